//! The log's rows (since schema version 3: a row per flush, each record an
//! entry under its own CRC): damage to a row is `Corrupt` naming an LSN,
//! never fewer records without an error; a flush that overtook one that
//! never committed is deleted at the next open, and lost acknowledged
//! records are told from it; and stores of versions 1 to 3 are upgraded in
//! place at open with every record and its CRC kept.
//!
//! Without `FUSEE_PG_URL` (outside CI) the file compiles to one test that
//! prints SKIPPED.

mod common;

#[cfg(not(fusee_pg))]
#[test]
fn log_rows_skipped() {
    common::skipped_without_server("log_rows: 3 tests skipped");
}

#[cfg(fusee_pg)]
mod with_server {
    use fusee_storage::{LogStore, Storage, StorageError};
    use fusee_storage_postgres::{PgStorage, SCHEMA_VERSION};

    use super::common::{admin, drop_schema, old_store, options, record, unique_schema, url};

    /// Every record of shard 0's log, or the error reading it gave.
    fn read_all(url: &str, schema: &str) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        let storage = PgStorage::open(&options(url, schema, "reader"))?;
        let mut parts = storage.open_shard(0)?;
        let mut got = Vec::new();
        let first = parts.log.first_lsn();
        parts.log.read(first - 1, &mut |lsn, r| {
            got.push((lsn, r.to_vec()));
            Ok(())
        })?;
        Ok(got)
    }

    /// Writes records 1..=300 to shard 0 in flushes of 1, 99 and 200.
    fn write_three_flushes(url: &str, schema: &str) {
        let storage = PgStorage::open(&options(url, schema, "writer")).expect("open");
        let mut parts = storage.open_shard(0).expect("shard");
        for (from, to) in [(1, 1), (2, 100), (101, 300)] {
            for lsn in from..=to {
                parts.log.append(lsn, &record(lsn)).expect("append");
            }
            assert_eq!(parts.log.flush().expect("flush"), to);
        }
        drop(parts);
        storage.close().expect("close");
    }

    #[test]
    fn a_damaged_log_row_is_corrupt_naming_an_lsn() {
        let url = url();
        let damages: [(&str, &str); 6] = [
            (
                "a byte flipped in a record",
                "SET value = set_byte(value, 200, get_byte(value, 200) # 1) WHERE shard = 0 AND last = 100",
            ),
            (
                "a byte flipped in an entry's length",
                "SET value = set_byte(value, 1, get_byte(value, 1) # 16) WHERE shard = 0 AND last = 100",
            ),
            (
                "a row cut short",
                "SET value = substring(value from 1 for length(value) - 3) WHERE shard = 0 AND last = 300",
            ),
            (
                "bytes after the last entry",
                "SET value = value || '\\x00'::bytea WHERE shard = 0 AND last = 100",
            ),
            (
                "a row under other LSNs",
                "SET first = first + 1000, last = last + 1000 WHERE shard = 0 AND last = 1",
            ),
            (
                "a row zeroed",
                "SET value = decode(repeat('00', length(value)), 'hex') WHERE shard = 0 AND last = 300",
            ),
        ];
        for (what, update) in damages {
            let schema = unique_schema("logrow");
            write_three_flushes(&url, &schema);
            assert_eq!(read_all(&url, &schema).expect("undamaged").len(), 300);
            let n = admin(&url)
                .execute(&format!("UPDATE \"{schema}\".log {update}"), &[])
                .expect("damage");
            assert_eq!(n, 1, "{what}: the damage hit no row");
            match read_all(&url, &schema) {
                Err(StorageError::Corrupt { at, .. }) => assert!(at <= 300, "{what}: at {at}"),
                other => panic!(
                    "{what}: expected Corrupt, found {:?}",
                    other.map(|records| records.len())
                ),
            }
            drop_schema(&url, &schema);
        }
        // A row deleted: the records it held are missing, not skipped.
        let schema = unique_schema("logrow");
        write_three_flushes(&url, &schema);
        admin(&url)
            .execute(
                &format!("DELETE FROM \"{schema}\".log WHERE last = 100"),
                &[],
            )
            .expect("delete");
        match read_all(&url, &schema) {
            Err(StorageError::Corrupt { at: 2, .. }) => {}
            other => panic!(
                "a deleted row: expected Corrupt at 2, found {:?}",
                other.map(|r| r.len())
            ),
        }
        drop_schema(&url, &schema);
    }

    #[test]
    fn a_flush_past_a_gap_is_deleted_at_open_unless_it_began_after_the_gap() {
        let url = url();
        // The flush of 101..=300 began while 2..=100 was in flight (its
        // `durable` 1), and 2..=100 never committed: the log is 1 alone.
        let schema = unique_schema("gap");
        write_three_flushes(&url, &schema);
        let mut admin = admin(&url);
        admin
            .batch_execute(&format!(
                "DELETE FROM \"{schema}\".log WHERE last = 100;
                 UPDATE \"{schema}\".log SET durable = 1 WHERE last = 300;"
            ))
            .expect("the gap");
        let got = read_all(&url, &schema).expect("a log ending before its gap");
        assert_eq!(got, vec![(1, record(1))]);
        let rows: i64 = admin
            .query_one(&format!("SELECT count(*) FROM \"{schema}\".log"), &[])
            .and_then(|r| r.try_get(0))
            .expect("count");
        assert_eq!(rows, 1, "the row past the gap is deleted");
        // The log goes on from 1, through LSNs the deleted row held.
        {
            let storage = PgStorage::open(&options(&url, &schema, "next")).expect("open");
            let mut parts = storage.open_shard(0).expect("shard");
            assert_eq!(parts.log.last_lsn(), 1);
            for lsn in 2..=300 {
                parts.log.append(lsn, &record(lsn)).expect("append");
            }
            assert_eq!(parts.log.flush().expect("flush"), 300);
        }
        let got = read_all(&url, &schema).expect("reads after a flush");
        let want: Vec<(u64, Vec<u8>)> = (1..=300).map(|l| (l, record(l))).collect();
        assert_eq!(got, want);
        drop_schema(&url, &schema);
        // The same gap, but the flush after it began once 2..=100 was
        // durable: acknowledged records are missing.
        let schema = unique_schema("gap");
        write_three_flushes(&url, &schema);
        admin
            .execute(
                &format!("DELETE FROM \"{schema}\".log WHERE last = 100"),
                &[],
            )
            .expect("the gap");
        match read_all(&url, &schema) {
            Err(StorageError::Corrupt { at: 2, .. }) => {}
            other => panic!("expected Corrupt at 2, found {:?}", other.map(|r| r.len())),
        }
        drop_schema(&url, &schema);
    }

    #[test]
    fn stores_of_versions_1_to_3_are_upgraded_with_every_record() {
        let url = url();
        for version in [1, 2, 3] {
            let schema = unique_schema("upgrade");
            old_store(&url, &schema, version, 40);
            let got = read_all(&url, &schema).expect("the upgraded store reads");
            let want: Vec<(u64, Vec<u8>)> = (1..=40).map(|l| (l, record(l))).collect();
            assert_eq!(got, want, "version {version}");
            let found: i32 = admin(&url)
                .query_one(&format!("SELECT version FROM \"{schema}\".format"), &[])
                .and_then(|r| r.try_get(0))
                .expect("the version");
            assert_eq!(found, SCHEMA_VERSION as i32, "version {version}");
            // The upgraded log carries on: a new flush after the old rows.
            {
                let storage = PgStorage::open(&options(&url, &schema, "next")).expect("open");
                let mut parts = storage.open_shard(0).expect("shard");
                for lsn in 41..=45 {
                    parts.log.append(lsn, &record(lsn)).expect("append");
                }
                parts.log.flush().expect("flush");
            }
            let got = read_all(&url, &schema).expect("reads after a flush");
            assert_eq!(got.len(), 45, "version {version}");
            assert_eq!(got[44], (45, record(45)));
            // An old row damaged before the upgrade is still caught by its
            // own CRC after it.
            let schema2 = unique_schema("upgrade");
            old_store(&url, &schema2, version, 5);
            // Byte 6 of the old value: in its record (behind the CRC, and
            // in version 3 behind the entry's length too).
            let (key, byte) = if version >= 3 {
                ("last", 10)
            } else {
                ("lsn", 6)
            };
            admin(&url)
                .execute(
                    &format!("UPDATE \"{schema2}\".log SET value = set_byte(value, {byte}, get_byte(value, {byte}) # 1) WHERE {key} = 3"),
                    &[],
                )
                .expect("damage");
            match read_all(&url, &schema2) {
                Err(StorageError::Corrupt { at: 3, .. }) => {}
                other => panic!(
                    "version {version}: expected Corrupt at 3, found {:?}",
                    other.map(|r| r.len())
                ),
            }
            drop_schema(&url, &schema);
            drop_schema(&url, &schema2);
        }
    }
}
