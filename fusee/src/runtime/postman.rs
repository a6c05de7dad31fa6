//! The transport between processes: a shard's **postman** thread, which
//! carries its messages for shards another process owns to their inbox
//! table, and brings its own inbox's rows to the shard loop (the
//! PostgreSQL backend, whose parts give an inbox; see
//! [`super::messages`] for why exactly once into a journal still holds).
//!
//! The postman belongs to the production driver, beside the flusher: the
//! loop stays a state machine that does no I/O of its own. The driver
//! hands the postman the messages it could not deliver in this process
//! ([`Postman::post`]) and the inbox rows the loop acknowledged
//! ([`Postman::remove`]); the postman sends the loop
//! [`Input::Delivered`] for each message once its row is durable, and an
//! [`Input::Inbox`] for each row of the shard's inbox, read at the start,
//! whenever the storage hears of rows posted to it (a PostgreSQL
//! notification, within a round trip of the post), and every poll
//! interval in case a notification went unheard.
//!
//! A post that fails (a lost connection: the rows may or may not be
//! there) leaves its messages in the outbox. The postman then drops the
//! posts that follow, so a later message never overtakes an earlier one
//! from the same sender, until the driver, told through
//! [`Postman::take_retry`] after a back-off, routes every message its
//! outbox holds for shards not here again, in order. A row whose delete
//! fails is read again later and acknowledged again (a duplicate).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
#[cfg(feature = "postgres")]
use std::time::{Duration, Instant};

use super::messages::Message;
use super::{Input, ShardLoop};

/// How long the postman waits after a failed post before the driver posts
/// the outbox again (a server that is down is not asked in a tight loop).
#[cfg(feature = "postgres")]
const RETRY_AFTER: Duration = Duration::from_millis(250);

/// What the driver asks of the postman.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
enum Job {
    /// Post these messages (target shard, outbox id, message).
    Post(Vec<(u32, u64, Message)>),
    /// Delete these rows of the shard's inbox.
    Remove(Vec<u64>),
    /// The driver routes the outbox again after a failed post: take posts
    /// again.
    Resume,
    /// Rows were posted to this shard's inbox (a notification): read now.
    Read,
    /// The postman is dropped: end (the storage's listener holds a sender
    /// too, so the channel does not close by itself).
    Stop,
}

/// A shard's postman (see the [module docs](self)). Dropping it stops the
/// thread (after its statement in flight) and waits for it.
pub(crate) struct Postman {
    tx: Option<std::sync::mpsc::Sender<Job>>,
    retry: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Postman {
    fn drop(&mut self) {
        // Joined so the shard's storage (the inbox holds the open shard)
        // is let go when the driver ends.
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Job::Stop);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Postman {
    /// The postman of `shard`, if its storage has an inbox (PostgreSQL);
    /// it hands the loop its inputs through `back`, and reads the inbox
    /// every `poll`.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn start(
        shard: &ShardLoop,
        back: Sender<Input>,
        poll: std::time::Duration,
    ) -> Option<Postman> {
        #[cfg(feature = "postgres")]
        if let Some(mut inbox) = shard.pg_inbox() {
            let (tx, rx) = std::sync::mpsc::channel();
            let news = tx.clone();
            inbox.on_posted(move || {
                let _ = news.send(Job::Read);
            });
            let retry = Arc::new(AtomicBool::new(false));
            let flag = Arc::clone(&retry);
            let id = shard.shard();
            let shards = shard.shards();
            let spawned = std::thread::Builder::new()
                .name(format!("fusee-postman-{id}"))
                .spawn(move || carry(inbox, &rx, &back, &flag, poll, shards));
            return match spawned {
                Ok(thread) => Some(Postman {
                    tx: Some(tx),
                    retry,
                    thread: Some(thread),
                }),
                Err(e) => {
                    // Messages for other processes then wait in the outbox
                    // and this shard's inbox waits for its next owner, as
                    // before the transport existed: nothing is lost.
                    tracing::error!(shard = id, error = %e, "no postman thread: no messages between processes for this shard");
                    None
                }
            };
        }
        None
    }

    /// Posts `messages` (target shard, outbox id, message) to their
    /// targets' inboxes; each is acknowledged to the loop once durable.
    pub(crate) fn post(&self, messages: Vec<(u32, u64, Message)>) {
        self.send(Job::Post(messages));
    }

    /// Deletes inbox rows `rows`, whose messages the loop recorded.
    pub(crate) fn remove(&self, rows: Vec<u64>) {
        self.send(Job::Remove(rows));
    }

    /// Whether a post failed and its back-off passed: the driver then
    /// routes again every message of the outbox for a shard not here
    /// (after this call, posts are taken again).
    pub(crate) fn take_retry(&self) -> bool {
        if self.retry.swap(false, Ordering::AcqRel) {
            self.send(Job::Resume);
            return true;
        }
        false
    }

    fn send(&self, job: Job) {
        if let Some(tx) = &self.tx {
            // A postman gone (its thread ended) posts nothing: messages
            // stay in the outbox, rows in the inbox, for the next open.
            let _ = tx.send(job);
        }
    }
}

/// The postman's thread: posts, deletes, and reads the inbox when due.
#[cfg(feature = "postgres")]
fn carry(
    mut inbox: fusee_storage_postgres::PgInbox,
    rx: &std::sync::mpsc::Receiver<Job>,
    back: &Sender<Input>,
    retry: &AtomicBool,
    poll: Duration,
    shards: u32,
) {
    use std::collections::BTreeSet;
    use std::sync::mpsc::RecvTimeoutError;

    let shard = inbox.shard();
    // Rows handed to the loop and not deleted yet: not handed again.
    let mut handed: BTreeSet<u64> = BTreeSet::new();
    // Posts are dropped from a failure until the driver routes again.
    let mut broken = false;
    let mut retry_at: Option<Instant> = None;
    let mut next_read = Instant::now();
    // Another owner took the shard: its inbox is that owner's to read, and
    // the driver drops this postman soon.
    let mut lost = false;
    loop {
        let now = Instant::now();
        if retry_at.is_some_and(|at| at <= now) {
            retry_at = None;
            retry.store(true, Ordering::Release);
            // Wakes the driver, which takes the retry.
            if back.send(Input::Tick).is_err() {
                return;
            }
        }
        if next_read <= now && !lost {
            let skip: Vec<u64> = handed.iter().copied().collect();
            let full = match inbox.read(&skip) {
                Ok(rows) => {
                    let full = rows.len() == fusee_storage_postgres::INBOX_READ_ROWS;
                    for row in rows {
                        handed.insert(row.id);
                        let corrupt =
                            |what| fusee_storage::StorageError::Corrupt { what, at: row.id };
                        // A message for another shard (a sender with
                        // another shard count) would name a run of this
                        // shard that is not its target: never recorded.
                        let message = row.body.and_then(|b| {
                            Message::from_bytes(&b)
                                .map_err(|_| corrupt("message in a postgres inbox row"))
                                .and_then(|m| {
                                    if m.target_shard(shards) == shard {
                                        Ok(m)
                                    } else {
                                        Err(corrupt(
                                            "postgres inbox row for another shard (do all processes use the same shard count?)",
                                        ))
                                    }
                                })
                        });
                        match message {
                            Ok(message) => {
                                let input = Input::Inbox {
                                    row: row.id,
                                    message,
                                };
                                if back.send(input).is_err() {
                                    return;
                                }
                            }
                            // Left in the table for an operator to look
                            // at (and kept handed, so not read again in
                            // a loop): a damaged message cannot be
                            // recorded.
                            Err(e) => {
                                tracing::error!(shard, row = row.id, error = %e, "an inbox row is damaged; it stays in the table");
                            }
                        }
                    }
                    full
                }
                Err(fusee_storage::StorageError::Fenced { .. }) => {
                    tracing::debug!(
                        shard,
                        "the shard was taken over; its inbox is no longer read here"
                    );
                    lost = true;
                    false
                }
                Err(e) => {
                    tracing::warn!(shard, error = %e, "reading the shard's inbox failed; trying again");
                    false
                }
            };
            next_read = if full { now } else { now + poll };
        }
        let read_at = if lost { now + poll } else { next_read };
        let until = match retry_at {
            Some(at) => at.min(read_at),
            None => read_at,
        };
        let wait = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Job::Post(messages)) => {
                if broken {
                    continue;
                }
                let bodies: Vec<(u32, Vec<u8>)> = messages
                    .iter()
                    .map(|(target, _, m)| (*target, m.to_bytes()))
                    .collect();
                let refs: Vec<(u32, &[u8])> =
                    bodies.iter().map(|(t, b)| (*t, b.as_slice())).collect();
                match inbox.post(&refs) {
                    Ok(()) => {
                        for (_, id, _) in messages {
                            if back.send(Input::Delivered { id }).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(shard, error = %e, "posting messages to other processes' shards failed; posting them again");
                        broken = true;
                        retry_at = Some(Instant::now() + RETRY_AFTER);
                    }
                }
            }
            Ok(Job::Remove(rows)) => match inbox.remove(&rows) {
                Ok(()) => {
                    for row in rows {
                        handed.remove(&row);
                    }
                }
                Err(fusee_storage::StorageError::Fenced { .. }) => {
                    // The rows are the new owner's.
                    lost = true;
                    for row in rows {
                        handed.remove(&row);
                    }
                }
                Err(e) => {
                    // Read again and acknowledged again.
                    tracing::warn!(shard, error = %e, "deleting inbox rows failed");
                    for row in rows {
                        handed.remove(&row);
                    }
                }
            },
            Ok(Job::Resume) => broken = false,
            Ok(Job::Read) => next_read = Instant::now(),
            Ok(Job::Stop) => return,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// The reader of a shard this process lost (issue 36): it stops reading
/// that inbox, which is the new owner's, and says so once at DEBUG rather
/// than a WARN per poll. Needs `FUSEE_PG_URL` and `psql`.
#[cfg(all(test, feature = "postgres"))]
mod tests {
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use fusee_storage::{Storage, StorageError};
    use fusee_storage_postgres::{PgOptions, PgStorage};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    use super::{Job, carry};

    /// Every event of the thread it is the default of: level and message.
    #[derive(Clone, Default)]
    struct Caught(Arc<Mutex<Vec<String>>>);

    struct Message(String);

    impl Visit for Message {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.0.push_str(&format!("{value:?}"));
            }
        }
    }

    impl Subscriber for Caught {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut text = Message(format!("{}: ", event.metadata().level()));
            event.record(&mut text);
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(text.0);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    fn psql(url: &str, sql: &str) {
        let out = std::process::Command::new("psql")
            .args([url, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql])
            .output()
            .expect("psql runs");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn the_inbox_of_a_shard_taken_over_is_no_longer_read_and_nothing_warns() {
        let Some(url) = crate::test_pg_url() else {
            return;
        };
        let schema = format!("t_postman_lost_{}", std::process::id());
        let options = PgOptions::new(&url)
            .schema(&schema)
            .lease(Duration::from_secs(30))
            .owner("here");
        let storage = PgStorage::open(&options).unwrap_or_else(|e| panic!("{e}"));
        let parts = storage.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
        let inbox = parts.log.inbox();
        let mut other = parts.log.inbox();
        // Another owner's open, played on the server; this process learns
        // of it at its next write under the old epoch.
        psql(
            &url,
            &format!(
                "UPDATE \"{schema}\".shards SET epoch = epoch + 1, owner = 'thief', \
                 expires = now() + interval '1 hour' WHERE shard = 0"
            ),
        );
        assert!(
            matches!(other.remove(&[1]), Err(StorageError::Fenced { .. })),
            "a delete under the old epoch is fenced"
        );

        let (tx, rx) = mpsc::channel();
        let (back, inputs) = mpsc::channel();
        let caught = Caught::default();
        let subscriber = caught.clone();
        let reader = std::thread::spawn(move || {
            let retry = std::sync::atomic::AtomicBool::new(false);
            tracing::subscriber::with_default(subscriber, || {
                carry(inbox, &rx, &back, &retry, Duration::from_millis(5), 1);
            });
        });
        // Twenty polls' worth of time, and notifications asking it to read
        // now: with the lost shard not told apart, each read warned.
        for _ in 0..10 {
            tx.send(Job::Read).expect("the reader runs");
            std::thread::sleep(Duration::from_millis(10));
        }
        tx.send(Job::Stop).expect("the reader runs");
        reader.join().expect("the reader ends");
        let lines = caught.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(
            lines,
            vec!["DEBUG: the shard was taken over; its inbox is no longer read here".to_string()],
        );
        assert!(inputs.try_recv().is_err(), "no row handed to the loop");
        drop((other, parts, storage));
        psql(&url, &format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
    }
}
