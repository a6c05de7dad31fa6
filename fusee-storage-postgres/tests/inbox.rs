//! The inbox table ([`fusee_storage_postgres::PgInbox`]): messages posted
//! to a shard come back by id, in order, each under an id of its own; a
//! post from another storage wakes the shard's reader (and only its); a
//! delete under a stale epoch is `Fenced` and deletes nothing; a damaged
//! row is `Corrupt` without hiding the others; a version 1 store is
//! upgraded in place.
//!
//! Without `FUSEE_PG_URL` (outside CI) the file compiles to one test that
//! prints SKIPPED.

mod common;

#[cfg(not(fusee_pg))]
#[test]
fn inbox_skipped() {
    common::skipped_without_server("inbox: 5 tests skipped");
}

#[cfg(fusee_pg)]
mod with_server {
    use fusee_storage::{Storage, StorageError};
    use fusee_storage_postgres::{InboxRow, PgStorage, SCHEMA_VERSION};

    use super::common::{admin, drop_schema, old_store, options, unique_schema, url};

    fn open(schema: &str, owner: &str) -> PgStorage {
        PgStorage::open(&options(&url(), schema, owner)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn bodies(rows: &[InboxRow]) -> Vec<Vec<u8>> {
        rows.iter()
            .map(|r| r.body.as_ref().map_or_else(|e| panic!("{e}"), Clone::clone))
            .collect()
    }

    #[test]
    fn messages_come_back_in_order_each_its_own_row() {
        let schema = unique_schema("inbox");
        let storage = open(&schema, "o");
        let sender = storage.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
        let target = storage.open_shard(1).unwrap_or_else(|e| panic!("{e}"));
        let mut out = sender.log.inbox();
        let mut inbox = target.log.inbox();
        assert!(inbox.read(&[]).unwrap_or_else(|e| panic!("{e}")).is_empty());
        out.post(&[(1, b"one"), (1, b"two"), (0, b"self")])
            .unwrap_or_else(|e| panic!("{e}"));
        // The same message again (a sender that crashed before counting
        // it sent): another row, not swallowed by the first.
        out.post(&[(1, b"one")]).unwrap_or_else(|e| panic!("{e}"));
        let rows = inbox.read(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            bodies(&rows),
            vec![b"one".to_vec(), b"two".to_vec(), b"one".to_vec()]
        );
        assert!(rows.windows(2).all(|w| w[0].id < w[1].id), "by id");
        let skipped = inbox
            .read(&[rows[0].id, rows[2].id])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bodies(&skipped), vec![b"two".to_vec()]);
        inbox
            .remove(&[rows[0].id, rows[1].id])
            .unwrap_or_else(|e| panic!("{e}"));
        let left = inbox.read(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].id, rows[2].id);
        let own = out.read(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bodies(&own), vec![b"self".to_vec()]);
        drop((out, inbox, sender, target, storage));
        drop_schema(&url(), &schema);
    }

    #[test]
    fn a_post_from_another_process_wakes_the_reader() {
        use std::sync::mpsc;
        use std::time::Duration;

        let schema = unique_schema("inbox_notify");
        let here = open(&schema, "here");
        let there = open(&schema, "there");
        let reader = here.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
        let writer = there.open_shard(1).unwrap_or_else(|e| panic!("{e}"));
        let (tx, rx) = mpsc::channel();
        let mut inbox = reader.log.inbox();
        inbox.on_posted(move || {
            let _ = tx.send(());
        });
        // The listener wakes every reader once it listens (for what was
        // posted before): from then on, only posts wake.
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the listener's first wake-up");
        let mut out = writer.log.inbox();
        out.post(&[(2, b"elsewhere")])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            rx.recv_timeout(Duration::from_millis(700)).is_err(),
            "a post to another shard woke this one"
        );
        out.post(&[(0, b"here")]).unwrap_or_else(|e| panic!("{e}"));
        rx.recv_timeout(Duration::from_secs(5))
            .expect("the post to this shard woke its reader");
        let rows = inbox.read(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bodies(&rows), vec![b"here".to_vec()]);
        drop((inbox, out, reader, writer, here, there));
        drop_schema(&url(), &schema);
    }

    #[test]
    fn a_stale_owner_deletes_nothing() {
        let schema = unique_schema("inbox_fenced");
        let first = open(&schema, "o");
        let parts = first.open_shard(1).unwrap_or_else(|e| panic!("{e}"));
        let mut stale = parts.log.inbox();
        stale
            .post(&[(1, b"kept")])
            .unwrap_or_else(|e| panic!("{e}"));
        let rows = stale.read(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rows.len(), 1);
        // Another storage under the same owner name takes the shard at
        // once: the epoch moves.
        let second = open(&schema, "o");
        let taken = second.open_shard(1).unwrap_or_else(|e| panic!("{e}"));
        match stale.remove(&[rows[0].id]) {
            Err(StorageError::Fenced { shard: 1, .. }) => {}
            other => panic!("a delete under the old epoch: {other:?}"),
        }
        assert!(
            matches!(stale.read(&[]), Err(StorageError::Fenced { .. })),
            "a fenced inbox reads nothing either"
        );
        let mut inbox = taken.log.inbox();
        let rows = inbox.read(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bodies(&rows), vec![b"kept".to_vec()], "the row stayed");
        inbox
            .remove(&[rows[0].id])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(inbox.read(&[]).unwrap_or_else(|e| panic!("{e}")).is_empty());
        drop((stale, inbox, parts, taken, first, second));
        drop_schema(&url(), &schema);
    }

    #[test]
    fn a_damaged_row_is_corrupt_and_the_others_still_read() {
        let schema = unique_schema("inbox_crc");
        let storage = open(&schema, "o");
        let parts = storage.open_shard(2).unwrap_or_else(|e| panic!("{e}"));
        let mut inbox = parts.log.inbox();
        inbox
            .post(&[(2, b"first"), (2, b"second"), (3, b"elsewhere")])
            .unwrap_or_else(|e| panic!("{e}"));
        let mut a = admin(&url());
        a.batch_execute(&format!(
            "UPDATE \"{schema}\".inbox SET value = set_byte(value, 5, get_byte(value, 5) # 1)
             WHERE id = (SELECT min(id) FROM \"{schema}\".inbox);
             UPDATE \"{schema}\".inbox SET shard = 2 WHERE shard = 3;"
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        let rows = inbox.read(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rows.len(), 3);
        assert!(matches!(rows[0].body, Err(StorageError::Corrupt { .. })));
        assert_eq!(rows[1].body.as_deref().ok(), Some(&b"second"[..]));
        // A row moved to another shard fails its CRC like a changed byte.
        assert!(matches!(rows[2].body, Err(StorageError::Corrupt { .. })));
        drop((inbox, parts, storage));
        drop_schema(&url(), &schema);
    }

    #[test]
    fn a_version_1_store_is_upgraded_in_place() {
        let schema = unique_schema("inbox_v1");
        // What a version 1 build made: no inbox table, a row per record.
        old_store(&url(), &schema, 1, 1);
        let storage = open(&schema, "o");
        let version: i32 = admin(&url())
            .query_one(&format!("SELECT version FROM \"{schema}\".format"), &[])
            .and_then(|r| r.try_get(0))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(version as u32, SCHEMA_VERSION);
        let parts = storage.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            fusee_storage::LogStore::last_lsn(&parts.log),
            1,
            "the log kept"
        );
        let mut inbox = parts.log.inbox();
        inbox.post(&[(0, b"new")]).unwrap_or_else(|e| panic!("{e}"));
        let rows = inbox.read(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bodies(&rows), vec![b"new".to_vec()]);
        drop((inbox, parts, storage));
        drop_schema(&url(), &schema);
    }
}
