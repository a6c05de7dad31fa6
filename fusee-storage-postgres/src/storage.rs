//! [`PgStorage`]: the connection settings, the pool, the leases of the
//! open shards and the thread renewing them, and opening a shard (taking
//! its lease, cleaning what no flush or commit made its own).

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use fusee_core::record::Lsn;
use fusee_storage::{Result, ShardParts, Storage, StorageError};
use fusee_storage_kv::{CommitRow, FaultSwitches, KvCheckpoint, KvRuns, LogRow, ShardState, lock};

use crate::error::{PgError, map};
use crate::options::FLUSHES_IN_FLIGHT_MAX;
use crate::schema::{Sql, check_name, prepare};
use crate::shard::{PgShard, ShardInner, i64_of};
use crate::shared::{Conn, Lease, ServerPids, ShardLease, Shared};
use crate::{NAMES, PgCheckpoint, PgLog, PgOptions, PgRuns};

/// A Fusee storage on a PostgreSQL schema, shared with any number of other
/// processes: each shard is owned by whoever holds its lease.
#[derive(Debug)]
pub struct PgStorage {
    pub(crate) shared: Arc<Shared>,
}

/// `host:port/database` of the configuration, for errors (no user's
/// password ever).
fn place_of(config: &postgres::Config, schema: &str) -> String {
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("");
    let db = config.get_dbname().unwrap_or(user);
    format!("postgresql://{user}@{host}:{port}/{db} schema {schema}")
}

/// A name for this process as a lease holder: host, process id and a
/// random suffix (a new name for every open).
fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".to_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    format!("{host}-{}-{nanos:08x}-{n}", std::process::id())
}

impl PgStorage {
    /// Connects to the server `options.url` names and opens the store in
    /// `options.schema`, creating the schema and its tables when they are
    /// missing (unless `options.create` says never).
    ///
    /// Errors: a URL that does not parse or an option out of range
    /// ([`PgError::BadUrl`], [`PgError::BadOption`] inside `Backend`); no
    /// server there (`Io`); no such database (`NotFound`); a role that may
    /// not create the schema ([`PgError::PermissionDenied`]); a schema of
    /// another version (`UnsupportedFormat`), of another backend
    /// (`WrongBackend`) or with other tables (`NotAStore`).
    pub fn open(options: &PgOptions) -> Result<Self> {
        check_name(&options.schema)?;
        if options.lease < Duration::from_millis(300) || options.lease > Duration::from_secs(3600) {
            return Err(PgError::BadOption {
                option: "lease",
                why: format!(
                    "{:?} is outside 300 ms to 1 hour (it is renewed every third of it)",
                    options.lease
                ),
            }
            .into());
        }
        if !(1..=FLUSHES_IN_FLIGHT_MAX).contains(&options.flushes_in_flight) {
            return Err(PgError::BadOption {
                option: "flushes_in_flight",
                why: format!(
                    "{} is outside 1 to {FLUSHES_IN_FLIGHT_MAX} (each is a connection per open shard)",
                    options.flushes_in_flight
                ),
            }
            .into());
        }
        let mut config = postgres::Config::from_str(&options.url).map_err(|e| PgError::BadUrl {
            message: e.to_string(),
        })?;
        let owner = options.owner.clone().unwrap_or_else(default_owner);
        config.application_name(&format!("fusee {owner}"));
        if config.get_connect_timeout().is_none() {
            // A server that does not answer is an error, not a hang.
            config.connect_timeout(Duration::from_secs(10));
        }
        let place = place_of(&config, &options.schema);
        let sql = Sql::new(&options.schema);
        let shared = Arc::new(Shared::new(options.clone(), config, place, owner, sql));
        let mut conn = shared.connect()?;
        prepare(
            &mut conn.client,
            &options.schema,
            &shared.sql,
            options.create,
            &shared.place,
        )?;
        // A retired store is refused here, not only at each shard's open:
        // an engine's open then fails whole, naming where the store went.
        let mark = shared.retirement_mark(&mut conn)?;
        crate::schema::refusal(&shared.place, mark, &shared.owner)?;
        shared.give_back(conn);
        spawn_renewal(&shared);
        Ok(Self { shared })
    }

    /// This storage's name as a lease holder.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// Shard `shard`'s lease as the store holds it now, whoever holds it
    /// (`None`: the shard was never opened): for an operator, or to name
    /// the owner that took a shard over. One query on a pooled connection.
    pub fn lease(&self, shard: u32) -> Result<Option<ShardLease>> {
        let sh = &self.shared;
        sh.check_open("postgres storage")?;
        let mut conn = sh.take_conn()?;
        let lease = sh.lease_row(&mut conn, shard);
        sh.give_back(conn);
        lease
    }

    /// The server processes serving an open shard's connections (`None`
    /// if this storage has not opened it).
    pub fn server_pids(&self, shard: u32) -> Option<ServerPids> {
        lock(&self.shared.leases)
            .get(&shard)
            .map(|l| l.pids.clone())
    }

    /// Stops (or resumes) renewing this storage's leases, as a process that
    /// hangs would stop: once a lease lapses another owner can take the
    /// shard, and this storage's next write to it is `Fenced`. For drills
    /// and takeover tests.
    pub fn pause_renewal(&self, paused: bool) {
        self.shared.paused.store(paused, Ordering::Release);
    }

    /// Ends the storage as if its process died: leases are neither renewed
    /// nor released (parts dropped afterwards release nothing), connections
    /// are dropped, every later call is `Closed`. Another owner can take
    /// its shards once their leases lapse; an open under the same owner
    /// name takes them at once. For drills and crash tests.
    pub fn kill(&self) {
        self.shared.dead.store(true, Ordering::Release);
        self.close_inner();
    }

    /// The faults tests can arm: the next log flush, commit or base write
    /// of a shard fails before it writes anything, or a commit stops at a
    /// crash point (0 before the transaction, 1 with it written but rolled
    /// back, 2 after it is durable).
    pub fn faults(&self) -> &FaultSwitches {
        &self.shared.faults
    }

    fn close_inner(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.stop_renewal();
        self.shared.clear_pool();
    }

    /// Takes `shard`'s lease and cleans the shard, in one transaction:
    /// returns the epoch and the rows after the cleanup.
    fn take(&self, conn: &mut Conn, shard: u32) -> Result<(i64, ShardState)> {
        let sh = &*self.shared;
        let doing = format!("taking the lease of shard {shard}");
        let err = |e: postgres::Error| map(&e, &doing, &sh.place);
        let id = i64::from(shard);
        let mut tx = conn.client.transaction().map_err(err)?;
        tx.execute(sh.sql.insert_shard.as_str(), &[&id])
            .map_err(err)?;
        let row = tx
            .query_one(sh.sql.lock_shard.as_str(), &[&id])
            .map_err(err)?;
        let holder: String = row.try_get(1).map_err(err)?;
        let live: bool = row.try_get(2).map_err(err)?;
        crate::schema::refusal(&sh.place, row.try_get(6).map_err(err)?, &sh.owner)?;
        if live && holder != sh.owner {
            let until: String = row.try_get(5).map_err(err)?;
            return Err(StorageError::Leased {
                shard,
                place: sh.place.clone(),
                holder,
                until,
            });
        }
        let corrupt = || StorageError::Corrupt {
            what: NAMES.log_row,
            at: u64::from(shard),
        };
        let base: i64 = row.try_get(3).map_err(err)?;
        let last: i64 = row.try_get(4).map_err(err)?;
        let mut log = LogRow {
            base: u64::try_from(base).map_err(|_| corrupt())?,
            last: u64::try_from(last).map_err(|_| corrupt())?,
        };
        if log.base > log.last {
            return Err(corrupt());
        }
        let epoch: i64 = tx
            .query_one(
                sh.sql.take_shard.as_str(),
                &[&id, &sh.owner, &sh.lease_secs()],
            )
            .and_then(|r| r.try_get(0))
            .map_err(err)?;
        // The previous owner's flushes have ended (the lock above waited
        // for their KEY SHARE locks) or will find the new epoch, so the
        // rows read here are all its flushes will ever leave.
        let rows = tx
            .query(sh.sql.log_tail.as_str(), &[&id, &last])
            .map_err(err)?;
        let mut tail = Vec::with_capacity(rows.len());
        for row in &rows {
            let lsn = |i| -> Result<Lsn> {
                let n: i64 = row.try_get(i).map_err(err)?;
                u64::try_from(n).map_err(|_| corrupt())
            };
            tail.push(TailRow {
                first: lsn(0)?,
                last: lsn(1)?,
                durable: lsn(2)?,
            });
        }
        let end = log_end(log.last, &tail)?;
        let last = i64_of(end, "LSN")?;
        if end != log.last {
            // Most opens find rows past `log_last` (the flushes since the
            // last seal): the next open need not read them again.
            tx.execute(sh.sql.set_last.as_str(), &[&id, &last])
                .map_err(err)?;
            log.last = end;
        }
        let commit = match tx
            .query_opt(sh.sql.commit_row.as_str(), &[&id])
            .map_err(err)?
        {
            Some(row) => {
                let value: &[u8] = row.try_get(0).map_err(err)?;
                Some(CommitRow::decode(value, shard, NAMES.commit_row)?)
            }
            None => None,
        };
        let state = ShardState {
            log,
            new_log: false,
            commit,
            // The server owns durability: its log needs no seal (the
            // contract's default `begin_seal`).
            seal: None,
        };
        // What no flush or commit made the shard's own: frames spilled past
        // the committed position, bases streamed and never committed, and
        // log rows after a gap (flushes that overtook one that never
        // committed).
        let cleanup = state.cleanup();
        let position = i64_of(cleanup.frames_from, "the run store's position")?;
        let generation = i64::from(cleanup.keep_generation);
        let [frames, index, log] = &sh.sql.cleanup;
        tx.execute(frames.as_str(), &[&id, &position])
            .map_err(err)?;
        tx.execute(index.as_str(), &[&id, &generation])
            .map_err(err)?;
        tx.execute(log.as_str(), &[&id, &last]).map_err(err)?;
        tx.commit().map_err(err)?;
        Ok((epoch, state))
    }
}

/// A log row past `log_last`, as an open reads it: its LSNs and the log's
/// durable LSN when its flush began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TailRow {
    first: Lsn,
    last: Lsn,
    durable: Lsn,
}

/// The log's end, from `known` (every record through it is held) and the
/// rows after it in LSN order: the end of the run of rows that follows
/// without a gap. The rows after a gap are flushes that began before the
/// missing records were acknowledged (their `durable` is below the gap)
/// and overtook a flush that never committed; the caller deletes them. A
/// row after a gap that began later means acknowledged records are
/// missing: `Corrupt` naming the first.
fn log_end(known: Lsn, rows: &[TailRow]) -> Result<Lsn> {
    let mut next = known + 1;
    let mut gap = None;
    for row in rows {
        match gap {
            // A row may begin before `next` only where a discard or a seal
            // left `log_last` inside it; overlaps are the read's to report.
            None if row.first <= next => next = next.max(row.last + 1),
            _ => {
                let missing = *gap.get_or_insert(next);
                if row.durable >= missing {
                    return Err(StorageError::Corrupt {
                        what: NAMES.missing_record,
                        at: missing,
                    });
                }
            }
        }
    }
    Ok(next - 1)
}

impl Storage for PgStorage {
    type Log = PgLog;
    type Runs = PgRuns;
    type Checkpoint = PgCheckpoint;

    fn open_shard(&self, shard: u32) -> Result<ShardParts<Self>> {
        let sh = &self.shared;
        sh.check_open("postgres storage")?;
        sh.open.claim(shard)?;
        // From here the claim is released on every path: by the shard's
        // inner state once it exists, by hand before.
        let taken = (|| {
            let mut main = sh.take_conn()?;
            let flushers = (0..sh.options.flushes_in_flight)
                .map(|_| sh.take_conn())
                .collect::<Result<Vec<_>>>()?;
            let (epoch, state) = self.take(&mut main, shard)?;
            Ok((main, flushers, epoch, state))
        })();
        let (main, flushers, epoch, state) = match taken {
            Ok(t) => t,
            Err(e) => {
                sh.open.release(shard);
                return Err(e);
            }
        };
        let pids = ServerPids {
            main: main.pid,
            flushers: flushers.iter().map(|c| c.pid).collect(),
        };
        let fenced = Arc::new(AtomicBool::new(false));
        lock(&sh.leases).insert(
            shard,
            Lease {
                epoch,
                fenced: Arc::clone(&fenced),
                pids,
            },
        );
        let engine = PgShard(Arc::new(ShardInner::new(
            Arc::clone(sh),
            shard,
            epoch,
            fenced,
            main,
            flushers,
        )));
        Ok(ShardParts {
            log: PgLog::new(engine.clone(), state.log),
            runs: KvRuns::new(engine.clone(), state.position(), &NAMES),
            checkpoint: KvCheckpoint::new(engine, state.generation(), state.records(), &NAMES),
            recovered: state.recovered(),
        })
    }

    fn shards(&self) -> Result<Vec<u32>> {
        let sh = &self.shared;
        sh.check_open("postgres storage")?;
        let doing = "listing shards";
        let mut conn = sh.take_conn()?;
        let rows = conn
            .client
            .query(sh.sql.shards.as_str(), &[])
            .map_err(|e| map(&e, doing, &sh.place));
        sh.give_back(conn);
        let mut shards = Vec::new();
        for row in rows? {
            let id: i64 = row.try_get(0).map_err(|e| map(&e, doing, &sh.place))?;
            shards.push(u32::try_from(id).map_err(|_| StorageError::Corrupt {
                what: "postgres shard row: shard number out of range",
                at: id as u64,
            })?);
        }
        Ok(shards)
    }

    fn close(&self) -> Result<()> {
        self.close_inner();
        Ok(())
    }
}

impl Drop for PgStorage {
    fn drop(&mut self) {
        // Parts may outlive the storage: the renewal thread keeps their
        // leases while they live (it holds only a weak reference, and
        // ends when the last part does).
        self.shared.clear_pool();
    }
}

/// Starts the thread renewing `shared`'s leases every third of the lease.
fn spawn_renewal(shared: &Arc<Shared>) {
    let weak = Arc::downgrade(shared);
    let every = shared.options.lease / 3;
    let spawned = std::thread::Builder::new()
        .name("fusee-pg-lease".to_owned())
        .spawn(move || renew_loop(&weak, every));
    // Without the thread, leases lapse after one lease time and the shards'
    // next writes are Fenced: the safe side, so nothing more is done.
    drop(spawned);
}

fn renew_loop(weak: &Weak<Shared>, every: Duration) {
    let mut conn: Option<Conn> = None;
    loop {
        {
            let Some(sh) = weak.upgrade() else { return };
            let (flag, cv) = &sh.wake;
            let stop = lock(flag);
            let (stop, _) = cv
                .wait_timeout_while(stop, every, |s| !*s)
                .unwrap_or_else(|e| e.into_inner());
            if *stop {
                return;
            }
        }
        let Some(sh) = weak.upgrade() else { return };
        if sh.closed.load(Ordering::Acquire) {
            return;
        }
        if sh.paused.load(Ordering::Acquire) {
            continue;
        }
        let leases: Vec<(u32, Lease)> = lock(&sh.leases)
            .iter()
            .map(|(&s, l)| (s, l.clone()))
            .collect();
        if leases.is_empty() {
            continue;
        }
        if conn.as_ref().is_none_or(|c| c.client.is_closed()) {
            conn = sh.connect().ok();
        }
        let Some(c) = conn.as_mut() else { continue };
        let shards: Vec<i64> = leases.iter().map(|(s, _)| i64::from(*s)).collect();
        let epochs: Vec<i64> = leases.iter().map(|(_, l)| l.epoch).collect();
        let Ok(rows) = c
            .client
            .query(sh.sql.renew.as_str(), &[&shards, &epochs, &sh.lease_secs()])
        else {
            // The next round tries again, on a new connection if this one
            // is gone; meanwhile the leases run down, which is safe.
            continue;
        };
        let renewed: Vec<i64> = rows.iter().filter_map(|r| r.try_get(0).ok()).collect();
        // A lease not renewed under its epoch was taken over: every part of
        // that shard answers Fenced from now on, without asking the server.
        let current = lock(&sh.leases);
        for (shard, lease) in &leases {
            let still_ours = current.get(shard).is_some_and(|l| l.epoch == lease.epoch);
            if still_ours && !renewed.contains(&i64::from(*shard)) {
                lease.fenced.store(true, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(first: Lsn, last: Lsn, durable: Lsn) -> TailRow {
        TailRow {
            first,
            last,
            durable,
        }
    }

    #[test]
    fn the_log_ends_where_the_rows_after_log_last_stop_following_on() {
        assert_eq!(log_end(7, &[]).ok(), Some(7));
        // In order, the first one begun before the second was finished.
        let rows = [row(8, 10, 7), row(11, 20, 7), row(21, 21, 20)];
        assert_eq!(log_end(7, &rows).ok(), Some(21));
        // `log_last` inside the first row (a discard's LSN).
        assert_eq!(log_end(9, &[row(8, 10, 7), row(11, 12, 10)]).ok(), Some(12));
    }

    #[test]
    fn rows_after_a_gap_are_a_flush_that_overtook_one_never_committed() {
        // 11..=20 never committed; 21..=30 began while it was in flight.
        let rows = [row(8, 10, 7), row(21, 30, 10)];
        assert_eq!(log_end(7, &rows).ok(), Some(10));
        // Two flushes past the gap, both begun before it was acknowledged.
        let rows = [row(21, 30, 7), row(31, 40, 7)];
        assert_eq!(log_end(7, &rows).ok(), Some(7));
    }

    #[test]
    fn a_row_past_a_gap_that_began_after_it_was_acknowledged_is_corrupt() {
        // 11..=20 was durable when 21..=30 began: acknowledged, and lost.
        for rows in [
            vec![row(8, 10, 7), row(21, 30, 20)],
            vec![row(8, 10, 7), row(21, 30, 10), row(31, 40, 30)],
        ] {
            match log_end(7, &rows) {
                Err(StorageError::Corrupt { at: 11, .. }) => {}
                other => panic!("{rows:?}: expected Corrupt at 11, found {other:?}"),
            }
        }
    }
}
