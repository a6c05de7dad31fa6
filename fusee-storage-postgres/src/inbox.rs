//! [`PgInbox`]: messages between shards that different processes own,
//! through the `inbox` table.
//!
//! A process that owns a shard cannot hand a message to a shard another
//! process owns through memory; it writes the message to the `inbox` table
//! under the target shard instead ([`PgInbox::post`]), and the target's
//! owner reads its shard's rows ([`PgInbox::read`]) and deletes each once
//! what it made of the message is durable ([`PgInbox::remove`]). The bytes
//! are the host's (the engine's message encoding); this crate frames them
//! with a CRC-32 covering the target shard, so a value read under another
//! shard fails like a changed byte.
//!
//! What each statement promises:
//!
//! - **post** is one statement, so one transaction: every message of the
//!   call is durable (at the storage's synchronous-commit level) when it
//!   returns `Ok`, or none is. It checks no epoch: the messages a host
//!   posts come from its durable records, so even a stale owner posts only
//!   what the shard's log holds, and the new owner sends the same messages
//!   again (the target deduplicates). Each row takes a new `id` from the
//!   table's identity, never one the sender chose: a sender that crashed
//!   after posting and before counting the message sent posts it again as
//!   another row, and no row of an earlier incarnation can swallow a new
//!   message.
//! - **read** returns the shard's rows by `id`, which within one sender is
//!   the order it posted them.
//! - **remove** deletes rows only under this open's epoch (checked in the
//!   same statement, `FOR KEY SHARE` as every fenced write): a stale owner
//!   deletes nothing and gets `Fenced`, and the new owner reads the rows.
//!
//! # Notifications
//!
//! A post also sends, when it commits, a notification per target shard on
//! the store's channel (`pg_notify`, payload the shard's number). Each
//! storage with an inbox that asked to hear of them
//! ([`PgInbox::on_posted`]) has one listener thread, on a connection of its
//! own, that calls the registered callbacks of the shard named: a reader
//! learns of a row within a round trip rather than at its next poll. A
//! notification is a hint, never the only way: the listener, when it
//! connects again after losing its connection, calls every callback (what
//! was posted meanwhile went unheard), and a reader keeps reading on a
//! timer (a connection pooler in transaction mode, for one, does not carry
//! `LISTEN`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use fusee_storage::{Result, StorageError};
use fusee_storage_kv::layout::{check_crc, with_crc};
use postgres::fallible_iterator::FallibleIterator;

use crate::shard::{PgShard, i64_of};
use crate::shared::{Conn, Shared};

/// The notification channel of the store in `schema`: `fusee_inbox_` and a
/// hash of the schema's name (a channel's name is at most 63 bytes, and a
/// schema's alone may be 63), so stores sharing a database do not wake
/// each other's readers. FNV-1a, the same in every process and build.
pub(crate) fn channel(schema: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in schema.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("fusee_inbox_{h:016x}")
}

/// How long the listener blocks for a notification before it looks
/// whether its storage closed.
const LISTEN_SLICE: Duration = Duration::from_millis(500);

/// Starts `shared`'s listener thread, once.
fn start_listener(shared: &Arc<Shared>) {
    if shared.listener.started.swap(true, Ordering::AcqRel) {
        return;
    }
    let weak = Arc::downgrade(shared);
    let spawned = std::thread::Builder::new()
        .name("fusee-pg-inbox".to_owned())
        .spawn(move || listen(&weak));
    if spawned.is_err() {
        // Readers then find rows on their timer only.
        shared.listener.started.store(false, Ordering::Release);
    }
}

/// The listener thread: `LISTEN` on the store's channel, and a call of the
/// callbacks of each shard notified, until the storage closes or is gone.
fn listen(weak: &Weak<Shared>) {
    let mut conn: Option<Conn> = None;
    loop {
        let Some(sh) = weak.upgrade() else { return };
        if sh.closed.load(Ordering::Acquire) {
            return;
        }
        if conn.as_ref().is_none_or(|c| c.client.is_closed()) {
            let sql = format!("LISTEN \"{}\"", channel(&sh.options.schema));
            let listening = sh.connect().and_then(|mut c| {
                c.client
                    .batch_execute(&sql)
                    .map_err(|e| crate::error::map(&e, "listening for inbox rows", &sh.place))?;
                Ok(c)
            });
            match listening {
                Ok(c) => {
                    conn = Some(c);
                    // Rows posted while nobody listened: every reader
                    // looks.
                    sh.listener.wake(None);
                }
                Err(_) => {
                    drop(sh);
                    std::thread::sleep(LISTEN_SLICE);
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let lost = {
            let mut notes = c.client.notifications();
            let mut heard = notes.timeout_iter(LISTEN_SLICE);
            loop {
                match heard.next() {
                    Ok(Some(n)) => match n.payload().parse::<u32>() {
                        Ok(shard) => sh.listener.wake(Some(shard)),
                        Err(_) => sh.listener.wake(None),
                    },
                    Ok(None) => break false,
                    Err(_) => break true,
                }
            }
        };
        if lost {
            // Connected again (and every reader woken) next time round.
            conn = None;
        }
    }
}

/// Rows one [`PgInbox::read`] returns at most, so a long inbox never sits
/// in memory at once.
pub const INBOX_READ_ROWS: usize = 256;

/// The key an inbox value's CRC covers: `inbox` and the target shard.
pub(crate) fn inbox_key(shard: u32) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[..5].copy_from_slice(b"inbox");
    k[5..].copy_from_slice(&shard.to_be_bytes());
    k
}

/// What [`StorageError::Corrupt`] names for an inbox row failing its CRC.
const INBOX_ROW: &str = "postgres inbox row";

/// One open shard's inbox, and its way to other shards' inboxes: a
/// connection of its own (taken from the storage's pool at the first call,
/// given back on drop), so a caller on its own thread never waits for the
/// shard's reads or flushes. Made by [`crate::PgLog::inbox`].
pub struct PgInbox {
    shard: PgShard,
    conn: Option<Conn>,
    /// The store's notification channel.
    channel: String,
    /// The callback [`PgInbox::on_posted`] registered, if any.
    registered: Option<u64>,
}

impl std::fmt::Debug for PgInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgInbox")
            .field("shard", &self.shard)
            .finish_non_exhaustive()
    }
}

/// One row of a shard's inbox as [`PgInbox::read`] returns it.
#[derive(Debug)]
pub struct InboxRow {
    /// The row's id (for [`PgInbox::remove`]).
    pub id: u64,
    /// The message's bytes, or `Corrupt` if the row failed its CRC.
    pub body: Result<Vec<u8>>,
}

impl PgInbox {
    pub(crate) fn new(shard: PgShard) -> Self {
        let channel = channel(&shard.0.shared.options.schema);
        Self {
            shard,
            conn: None,
            channel,
            registered: None,
        }
    }

    /// Has `wake` called, from the storage's listener thread, whenever a
    /// post to this shard's inbox commits (in any process), until this
    /// inbox is dropped; and once more whenever the listener connects
    /// again. A hint for a reader to read now, never the only way: a
    /// reader still reads on a timer (behind a connection pooler in
    /// transaction mode `LISTEN` is not carried, and nothing is heard).
    /// `wake` should
    /// only hand the news on (a channel send), as it runs on the thread
    /// every shard's news passes through.
    pub fn on_posted(&mut self, wake: impl Fn() + Send + Sync + 'static) {
        let shared = &self.shard.0.shared;
        if let Some(token) = self.registered.take() {
            shared.listener.unregister(self.shard.0.id, token);
        }
        self.registered = Some(shared.listener.register(self.shard.0.id, Arc::new(wake)));
        start_listener(shared);
    }

    /// The shard this inbox belongs to.
    pub fn shard(&self) -> u32 {
        self.shard.0.id
    }

    /// Runs `f` on the inbox's connection (connecting first if there is
    /// none); a failed statement drops the connection, so the next call
    /// connects again.
    fn with_conn<T>(
        &mut self,
        doing: &str,
        f: impl FnOnce(&mut Conn) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let h = &*self.shard.0;
        h.shared.check_open("postgres inbox")?;
        let conn = match &mut self.conn {
            Some(c) if !c.client.is_closed() => c,
            slot => slot.insert(h.shared.take_conn()?),
        };
        match f(conn) {
            Ok(v) => Ok(v),
            Err(e) => {
                let err = h.err(doing, &e);
                if e.as_db_error().is_none() {
                    self.conn = None;
                }
                Err(err)
            }
        }
    }

    /// Writes `messages` (target shard, bytes) to their targets' inboxes,
    /// in one transaction, from this shard. Once this returns `Ok` every
    /// one is durable; after an error none or all may be (a lost
    /// connection), and the caller posts them again (targets deduplicate).
    pub fn post(&mut self, messages: &[(u32, &[u8])]) -> Result<()> {
        if messages.is_empty() {
            return Ok(());
        }
        let sender = i64::from(self.shard.0.id);
        let targets: Vec<i64> = messages.iter().map(|(t, _)| i64::from(*t)).collect();
        let values: Vec<Vec<u8>> = messages
            .iter()
            .map(|(t, body)| with_crc(&inbox_key(*t), body))
            .collect();
        let sql = self.shard.0.shared.sql.inbox_post.clone();
        let channel = self.channel.clone();
        self.with_conn("posting messages to other shards' inboxes", |c| {
            c.client
                .execute(sql.as_str(), &[&sender, &targets, &values, &channel])
        })?;
        Ok(())
    }

    /// Up to [`INBOX_READ_ROWS`] rows of this shard's inbox, by id, leaving
    /// out the rows `skip` names (those the caller holds already). `Fenced`
    /// once the shard was taken over (checked in memory: the rows would be
    /// the new owner's to take).
    pub fn read(&mut self, skip: &[u64]) -> Result<Vec<InboxRow>> {
        let h = &*self.shard.0;
        h.check("postgres inbox")?;
        let id = h.id;
        let shard = i64::from(id);
        let skip = skip
            .iter()
            .map(|&n| i64_of(n, "inbox row"))
            .collect::<Result<Vec<i64>>>()?;
        let limit = INBOX_READ_ROWS as i64;
        let sql = h.shared.sql.inbox_read.clone();
        let rows = self.with_conn("reading the shard's inbox", |c| {
            c.client.query(sql.as_str(), &[&shard, &skip, &limit])
        })?;
        let h = &*self.shard.0;
        let key = inbox_key(id);
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let n: i64 = row
                .try_get(0)
                .map_err(|e| h.err("reading the shard's inbox", &e))?;
            // Identity values start at 1: a negative one is no row this
            // crate wrote.
            let n = u64::try_from(n).map_err(|_| StorageError::Corrupt {
                what: INBOX_ROW,
                at: 0,
            })?;
            let value: &[u8] = row
                .try_get(1)
                .map_err(|e| h.err("reading the shard's inbox", &e))?;
            out.push(InboxRow {
                id: n,
                body: check_crc(&key, value, INBOX_ROW, n).map(<[u8]>::to_vec),
            });
        }
        Ok(out)
    }

    /// Deletes rows `ids` of this shard's inbox, under this open's epoch:
    /// `Fenced` (and nothing deleted) once another owner took the shard.
    pub fn remove(&mut self, ids: &[u64]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let h = &*self.shard.0;
        h.check("postgres inbox")?;
        let shard = i64::from(h.id);
        let epoch = h.epoch;
        let ids = ids
            .iter()
            .map(|&n| i64_of(n, "inbox row"))
            .collect::<Result<Vec<i64>>>()?;
        let sql = h.shared.sql.inbox_remove.clone();
        let row = self.with_conn("deleting rows of the shard's inbox", |c| {
            c.client.query_one(sql.as_str(), &[&shard, &epoch, &ids])
        })?;
        let h = &*self.shard.0;
        let owned: i64 = row
            .try_get(0)
            .map_err(|e| h.err("deleting rows of the shard's inbox", &e))?;
        if owned == 0 {
            return Err(h.fence());
        }
        Ok(())
    }
}

impl Drop for PgInbox {
    fn drop(&mut self) {
        if let Some(token) = self.registered.take() {
            self.shard
                .0
                .shared
                .listener
                .unregister(self.shard.0.id, token);
        }
        if let Some(conn) = self.conn.take()
            && !self
                .shard
                .0
                .shared
                .dead
                .load(std::sync::atomic::Ordering::Acquire)
        {
            self.shard.0.shared.give_back(conn);
        }
    }
}
