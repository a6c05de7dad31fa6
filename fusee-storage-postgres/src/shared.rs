//! What a storage and its shards' parts share: the settings, the
//! connection pool, the leases of the open shards and the inbox listener's
//! callbacks. A leaf: the storage, its shards and their inboxes all import
//! it, and it imports none of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use fusee_storage::{Result, StorageError};
use fusee_storage_kv::{FaultSwitches, lock};
use postgres::{Client, NoTls};

use crate::PgOptions;
use crate::error::map;
use crate::schema::Sql;

/// One connection to the server, with the server process serving it.
pub(crate) struct Conn {
    pub(crate) client: Client,
    pub(crate) pid: i32,
    /// The flush statement, prepared on this connection once, so a flush
    /// is one round trip (bind and execute) rather than two.
    pub(crate) flush: Option<postgres::Statement>,
}

/// What a storage and its shards' parts share.
pub(crate) struct Shared {
    pub(crate) options: PgOptions,
    config: postgres::Config,
    /// The server, database and schema, for errors (never a password).
    pub(crate) place: String,
    pub(crate) owner: String,
    pub(crate) sql: Sql,
    pub(crate) closed: AtomicBool,
    /// Set by [`PgStorage::kill`](crate::PgStorage::kill): parts dropped afterwards release
    /// nothing, as when the process dies.
    pub(crate) dead: AtomicBool,
    pool: Mutex<Vec<Conn>>,
    pub(crate) open: fusee_storage_kv::OpenShards,
    pub(crate) faults: FaultSwitches,
    /// The leases of the open shards, which the renewal thread renews.
    pub(crate) leases: Mutex<HashMap<u32, Lease>>,
    /// Whether renewal is paused ([`PgStorage::pause_renewal`](crate::PgStorage::pause_renewal)).
    pub(crate) paused: AtomicBool,
    /// Wakes the renewal thread early (to stop).
    pub(crate) wake: (Mutex<bool>, Condvar),
    /// Names each log, so a flush ticket finds its way home.
    pub(crate) next_log: AtomicU64,
    /// Who wants to hear of rows posted to which shard's inbox, and the
    /// thread listening for them (see [`crate::inbox`]).
    pub(crate) listener: Listener,
}

/// An open shard's lease, as the storage renews it.
#[derive(Clone, Debug)]
pub(crate) struct Lease {
    pub(crate) epoch: i64,
    pub(crate) fenced: Arc<AtomicBool>,
    pub(crate) pids: ServerPids,
}

/// The session settings of every connection, as one batch.
///
/// Besides the commit level, two timeouts keep a stalled process from
/// holding a shard's rows past its lease. A process paused (SIGSTOP, a
/// long GC-like stall, a debugger) in the middle of a multi-statement
/// write keeps its transaction open, and with it the row locks of its
/// shard, until its connection dies, which on a healthy network is never:
/// the takeover's `UPDATE` of the `shards` row would wait behind it for
/// ever. `idle_in_transaction_session_timeout` of one lease makes the
/// server end such a session once the lease it wrote under has lapsed
/// anyway; its transaction rolls back (a flush or commit not acknowledged,
/// which the contract allows), and the paused process, when it runs again,
/// finds its connection gone and its part latched. `lock_timeout` of three
/// leases is the backstop, longer than the idle timeout so that a takeover
/// outlasts the stalled session it waits for: no statement of ours waits
/// longer than that for a lock, whatever holds it; the caller gets
/// `LockTimeout` (the statement did nothing) and tries again.
/// Our own transactions never sit idle between statements for anything
/// but the client's CPU, far below a lease.
pub(crate) fn session_setup(options: &PgOptions) -> String {
    let lease_ms = options.lease.as_millis().max(1);
    format!(
        "SET synchronous_commit = '{}'; \
         SET idle_in_transaction_session_timeout = {lease_ms}; \
         SET lock_timeout = {}",
        options.synchronous_commit.as_sql(),
        lease_ms.saturating_mul(3)
    )
}

/// Drops `conns` on a thread of its own and waits for it: a
/// `postgres::Client` closes its connection by blocking on a runtime of its
/// own, which panics on a thread that drives a tokio runtime (an `Engine`
/// dropped in async code drops its storage there). Should no thread start,
/// the connections are leaked, not dropped here: the system closes their
/// sockets when the process ends.
fn close_off_thread(conns: Vec<Conn>) {
    if conns.is_empty() {
        return;
    }
    let slot = Arc::new(Mutex::new(Some(conns)));
    let theirs = Arc::clone(&slot);
    let closer = std::thread::Builder::new()
        .name("fusee-pg-close".into())
        .spawn(move || drop(lock(&theirs).take()));
    match closer {
        Ok(t) => {
            let _ = t.join();
        }
        Err(_) => std::mem::forget(lock(&slot).take()),
    }
}

/// How long a pooled connection may take to answer its check before it
/// is dropped for a new one.
const POOL_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// A shard's lease as the store holds it ([`PgStorage::lease`](crate::PgStorage::lease)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardLease {
    /// The lease's epoch: moved by every open of the shard.
    pub epoch: u64,
    /// The holder's name (empty before the first open).
    pub holder: String,
    /// When the lease ends unless renewed, by the server's clock
    /// (`-infinity` once released).
    pub until: String,
    /// Whether it has not ended yet, by the server's clock.
    pub live: bool,
}

/// The server processes serving an open shard's connections: for
/// `pg_stat_activity`, or for `pg_terminate_backend` in a drill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerPids {
    /// The connection of its reads, run store and commits.
    pub main: i32,
    /// The connections its log flushes run on, one per flush that may be
    /// in flight ([`PgOptions::flushes_in_flight`](crate::PgOptions::flushes_in_flight)), in the order flushes
    /// take them.
    pub flushers: Vec<i32>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("place", &self.place)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// A storage's shared state, before its first connection: no pool, no
    /// lease, renewal not paused.
    pub(crate) fn new(
        options: PgOptions,
        config: postgres::Config,
        place: String,
        owner: String,
        sql: Sql,
    ) -> Self {
        Self {
            options,
            config,
            place,
            owner,
            sql,
            closed: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            pool: Mutex::new(Vec::new()),
            open: Default::default(),
            faults: FaultSwitches::default(),
            leases: Mutex::new(HashMap::new()),
            paused: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
            next_log: AtomicU64::new(1),
            listener: Listener::default(),
        }
    }

    /// Drops every pooled connection (the storage closed, or a connection
    /// was lost), off the calling thread ([`close_off_thread`]).
    pub(crate) fn clear_pool(&self) {
        let conns = std::mem::take(&mut *lock(&self.pool));
        close_off_thread(conns);
    }

    /// `Closed { what }` once the storage closed (or was killed).
    pub(crate) fn check_open(&self, what: &'static str) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StorageError::Closed { what });
        }
        Ok(())
    }

    /// A new connection with the storage's session settings.
    pub(crate) fn connect(&self) -> Result<Conn> {
        let doing = "connecting";
        let mut client = self
            .config
            .connect(NoTls)
            .map_err(|e| map(&e, doing, &self.place))?;
        let setup = session_setup(&self.options);
        let pid = client
            .batch_execute(&setup)
            .and_then(|()| client.query_one("SELECT pg_backend_pid()", &[]))
            .and_then(|row| row.try_get::<_, i32>(0))
            .map_err(|e| map(&e, "setting up a connection", &self.place))?;
        Ok(Conn {
            client,
            pid,
            flush: None,
        })
    }

    /// A pooled connection that answers, or a new one. A pooled
    /// connection is checked with an empty statement (one round trip)
    /// before it is handed out: one the server dropped while it sat in the
    /// pool (a restart) does not look closed until used, and a shard
    /// opened on it would fail its first write.
    pub(crate) fn take_conn(&self) -> Result<Conn> {
        loop {
            let Some(mut conn) = lock(&self.pool).pop() else {
                return self.connect();
            };
            if !conn.client.is_closed() && conn.client.is_valid(POOL_CHECK).is_ok() {
                return Ok(conn);
            }
            // Dead: the others pooled with it likely are too.
            self.clear_pool();
        }
    }

    /// Shard `shard`'s lease as the `shards` table holds it now (`None`:
    /// the shard was never opened), read on `conn`.
    pub(crate) fn lease_row(&self, conn: &mut Conn, shard: u32) -> Result<Option<ShardLease>> {
        let doing = "reading a shard's lease";
        let err = |e: postgres::Error| map(&e, doing, &self.place);
        let Some(row) = conn
            .client
            .query_opt(self.sql.lease_of.as_str(), &[&i64::from(shard)])
            .map_err(err)?
        else {
            return Ok(None);
        };
        let epoch: i64 = row.try_get(0).map_err(err)?;
        Ok(Some(ShardLease {
            epoch: u64::try_from(epoch).map_err(|_| StorageError::Corrupt {
                what: "postgres shard row: negative epoch, for shard",
                at: u64::from(shard),
            })?,
            holder: row.try_get(1).map_err(err)?,
            live: row.try_get(2).map_err(err)?,
            until: row.try_get(3).map_err(err)?,
        }))
    }

    /// The store's retirement mark, if a reshard retired it (a shard
    /// row's owner beginning with [`crate::RETIRED_PREFIX`]): one query on
    /// `conn`.
    pub(crate) fn retirement_mark(&self, conn: &mut Conn) -> Result<Option<String>> {
        conn.client
            .query_opt(self.sql.retired.as_str(), &[])
            .and_then(|row| row.map(|r| r.try_get(0)).transpose())
            .map_err(|e| map(&e, "reading the store's retirement", &self.place))
    }

    /// Keeps `conn` for the next shard open, if it is healthy, outside a
    /// transaction and the pool has room.
    pub(crate) fn give_back(&self, conn: Conn) {
        if conn.client.is_closed() || self.closed.load(Ordering::Acquire) {
            return;
        }
        let mut pool = lock(&self.pool);
        if pool.len() < self.options.pool_size {
            pool.push(conn);
        }
    }

    /// Wakes the renewal thread to stop.
    pub(crate) fn stop_renewal(&self) {
        let (flag, cv) = &self.wake;
        *lock(flag) = true;
        cv.notify_all();
    }

    /// The lease duration in seconds, as the statements take it.
    pub(crate) fn lease_secs(&self) -> f64 {
        self.options.lease.as_secs_f64()
    }
}

/// A callback [`PgInbox::on_posted`](crate::PgInbox::on_posted) registered.
type Wake = Arc<dyn Fn() + Send + Sync>;

/// A storage's inbox listener: the callbacks by shard, and whether its
/// thread runs (the thread itself is [`crate::inbox`]'s).
#[derive(Default)]
pub(crate) struct Listener {
    wakers: Mutex<HashMap<u32, Vec<(u64, Wake)>>>,
    next: AtomicU64,
    pub(crate) started: AtomicBool,
}

impl Listener {
    pub(crate) fn register(&self, shard: u32, wake: Wake) -> u64 {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.wakers)
            .entry(shard)
            .or_default()
            .push((token, wake));
        token
    }

    pub(crate) fn unregister(&self, shard: u32, token: u64) {
        let mut wakers = lock(&self.wakers);
        if let Some(list) = wakers.get_mut(&shard) {
            list.retain(|(t, _)| *t != token);
            if list.is_empty() {
                wakers.remove(&shard);
            }
        }
    }

    /// Calls the callbacks of `shard` (all of them with `None`), outside
    /// the lock: a callback may take its time.
    pub(crate) fn wake(&self, shard: Option<u32>) {
        let calls: Vec<Wake> = {
            let wakers = lock(&self.wakers);
            match shard {
                Some(s) => wakers
                    .get(&s)
                    .map(|l| l.iter().map(|(_, w)| Arc::clone(w)).collect())
                    .unwrap_or_default(),
                None => wakers
                    .values()
                    .flatten()
                    .map(|(_, w)| Arc::clone(w))
                    .collect(),
            }
        };
        for call in calls {
            call();
        }
    }
}
