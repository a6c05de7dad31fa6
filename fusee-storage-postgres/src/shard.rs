//! [`PgShard`]: one open of one shard, shared by its three parts: its two
//! connections, its lease's epoch, the fenced writes, and the run-store
//! and index engines `fusee-storage-kv`'s parts run on.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fusee_storage::{
    DELETED, INDEX_RECORD, Result, RunStore, StorageError, index_record_run, index_record_state,
    index_records,
};
use fusee_storage_kv::checkpoint::{INDEX_CHUNK, RowVisitor};
use fusee_storage_kv::layout::{index_key, index_value};
use fusee_storage_kv::{
    Base, CommitRow, FrameEngine, IndexEngine, IndexWrite, KvRuns, ShardEngine, injected, lock,
};
use postgres::Transaction;

use crate::NAMES;
use crate::error::{IDLE_IN_TRANSACTION, map};
use crate::shared::{Conn, Shared};

/// A number as the `int8` columns hold it; numbers past `i64::MAX` never
/// occur (LSNs, frame numbers and runs stay far below), so one is a
/// caller's misuse rather than a value to wrap.
pub(crate) fn i64_of(n: u64, what: &'static str) -> Result<i64> {
    i64::try_from(n).map_err(|_| StorageError::TooLarge {
        what,
        len: n,
        max: i64::MAX as u64,
    })
}

/// One open of one shard.
pub(crate) struct ShardInner {
    pub(crate) shared: Arc<Shared>,
    pub(crate) id: u32,
    /// The lease's epoch this open holds: every write names it.
    pub(crate) epoch: i64,
    /// Set once any write or the renewal found another epoch.
    fenced: Arc<AtomicBool>,
    /// Reads, run-store spills, bases, commits and discards.
    main: Mutex<Option<Conn>>,
    /// Log flushes, so one overlaps the shard's other work: one
    /// connection per flush that may be in flight
    /// ([`crate::PgOptions::flushes_in_flight`]), taken in turn.
    pub(crate) flushers: Vec<Mutex<Option<Conn>>>,
    /// Frames a prefetch fetched ([`Prefetched`]).
    prefetched: Mutex<Prefetched>,
}

/// Frames fetched by a [`FrameEngine::prefetch`] and not yet read: a
/// migration's copy or check, or a shard's listing page, attribute build or
/// pass over finished runs, names the frames of its next runs, fetched in
/// one round trip instead of one each. Bounded: a prefetch fetches at most
/// [`PREFETCH_FRAMES`] frames and replaces what the last one left.
///
/// Sound because a frame number is written once per open and a frame is
/// never read after its release, so a frame held here is the stored one;
/// the reader's CRC check covers it as it covers a frame just read.
#[derive(Default)]
struct Prefetched {
    frames: std::collections::HashMap<u64, Vec<u8>>,
}

/// The most frames one prefetch fetches (a frame is a parked run's
/// journal: hundreds of bytes typically); the rest of a longer list is
/// left to the reads.
pub(crate) const PREFETCH_FRAMES: usize = 256;

/// The engine handle of one open shard (cloned into each part).
#[derive(Clone)]
pub struct PgShard(pub(crate) Arc<ShardInner>);

impl std::fmt::Debug for PgShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgShard")
            .field("shard", &self.0.id)
            .field("epoch", &self.0.epoch)
            .finish_non_exhaustive()
    }
}

impl ShardInner {
    pub(crate) fn new(
        shared: Arc<Shared>,
        id: u32,
        epoch: i64,
        fenced: Arc<AtomicBool>,
        main: Conn,
        flushers: Vec<Conn>,
    ) -> Self {
        Self {
            shared,
            id,
            epoch,
            fenced,
            main: Mutex::new(Some(main)),
            flushers: flushers.into_iter().map(|c| Mutex::new(Some(c))).collect(),
            prefetched: Mutex::default(),
        }
    }

    /// The `Fenced` error of this open, marking the shard fenced.
    pub(crate) fn fence(&self) -> StorageError {
        self.fenced.store(true, Ordering::Release);
        self.fenced_error()
    }

    fn fenced_error(&self) -> StorageError {
        StorageError::Fenced {
            shard: self.id,
            epoch: self.epoch as u64,
        }
    }

    /// `Closed` after the storage closed, `Fenced` once another owner took
    /// the shard over.
    pub(crate) fn check(&self, what: &'static str) -> Result<()> {
        self.shared.check_open(what)?;
        if self.fenced.load(Ordering::Acquire) {
            return Err(self.fenced_error());
        }
        Ok(())
    }

    /// `e` met while `doing`, in the storage vocabulary (the shard is the
    /// caller's to name: the engine's errors and logs carry it). A lost
    /// connection also empties the pool: its connections are likely as
    /// dead, and a reopen must not take one. A session the server ended
    /// for idling in a transaction a whole lease (this process stalled) is
    /// `Fenced` when the lease is no longer this open's.
    pub(crate) fn err(&self, doing: &str, e: &postgres::Error) -> StorageError {
        if e.as_db_error().map(|d| d.code().code()) == Some(IDLE_IN_TRANSACTION)
            && let Some(fenced) = self.lease_gone()
        {
            return fenced;
        }
        let mapped = map(e, doing, &self.shared.place);
        if matches!(mapped, StorageError::Io { .. }) {
            self.shared.clear_pool();
        }
        mapped
    }

    /// `Fenced` (and the shard marked so) if this open's lease has lapsed
    /// or moved to another epoch, asked on a new connection; `None` if it
    /// is still this open's, or the server cannot be asked. Only after the
    /// server ended a transaction of ours, which rolled back: nothing of
    /// it was written, as `Fenced` promises.
    fn lease_gone(&self) -> Option<StorageError> {
        let mut conn = self.shared.connect().ok()?;
        let lease = self.shared.lease_row(&mut conn, self.id).ok()?;
        self.shared.give_back(conn);
        let ours = lease.is_some_and(|l| l.epoch == self.epoch as u64 && l.live);
        (!ours).then(|| self.fence())
    }

    /// A live connection from `slot`, or the `Io` error of one that was
    /// lost (a statement on it may or may not have run: the part that
    /// used it is latched, and the shard must be reopened).
    pub(crate) fn conn<'a>(
        &self,
        slot: &'a mut MutexGuard<'_, Option<Conn>>,
        doing: &str,
    ) -> Result<&'a mut Conn> {
        match slot.as_mut() {
            Some(c) if !c.client.is_closed() => Ok(c),
            _ => Err(StorageError::io(
                format!("{doing} on {}", self.shared.place),
                std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the shard's connection was lost earlier; reopen the shard",
                ),
            )),
        }
    }

    /// Runs `f` in a transaction on the main connection that first checks
    /// the lease's epoch under `FOR KEY SHARE`: a takeover (`FOR UPDATE`)
    /// waits for the transaction, and a transaction after a takeover finds
    /// the new epoch and writes nothing (`Fenced`).
    pub(crate) fn write<T>(
        &self,
        what: &'static str,
        doing: &str,
        f: impl FnOnce(&Self, &mut Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        self.check(what)?;
        let mut slot = lock(&self.main);
        let conn = self.conn(&mut slot, doing)?;
        let mut tx = conn.client.transaction().map_err(|e| self.err(doing, &e))?;
        self.check_epoch(&mut tx, doing)?;
        let value = f(self, &mut tx)?;
        tx.commit().map_err(|e| self.err(doing, &e))?;
        Ok(value)
    }

    /// Reads the shard's row `FOR KEY SHARE` in `tx` (held until `tx`
    /// ends, so a takeover's `FOR UPDATE` waits for it) and checks the
    /// epoch: another one is `Fenced` (the caller drops `tx`, rolling it
    /// back, and nothing is written).
    pub(crate) fn check_epoch(&self, tx: &mut Transaction<'_>, doing: &str) -> Result<()> {
        let id = i64::from(self.id);
        let epoch: Option<i64> = tx
            .query_opt(self.shared.sql.epoch.as_str(), &[&id])
            .map_err(|e| self.err(doing, &e))?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(|e| self.err(doing, &e))?;
        if epoch != Some(self.epoch) {
            return Err(self.fence());
        }
        Ok(())
    }

    /// Runs `f` on the main connection (reads: no epoch check).
    pub(crate) fn read<T>(
        &self,
        what: &'static str,
        doing: &str,
        f: impl FnOnce(&mut postgres::Client) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        self.check(what)?;
        let mut slot = lock(&self.main);
        let conn = self.conn(&mut slot, doing)?;
        f(&mut conn.client).map_err(|e| self.err(doing, &e))
    }

    /// The main connection for a read that streams (the caller maps
    /// errors).
    pub(crate) fn main(&self) -> MutexGuard<'_, Option<Conn>> {
        lock(&self.main)
    }
}

impl Drop for ShardInner {
    fn drop(&mut self) {
        let sh = &self.shared;
        {
            let mut leases = lock(&sh.leases);
            if leases.get(&self.id).is_some_and(|l| l.epoch == self.epoch) {
                leases.remove(&self.id);
            }
        }
        let main = self
            .main
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let flushers: Vec<Conn> = self
            .flushers
            .iter_mut()
            .filter_map(|m| m.get_mut().unwrap_or_else(|e| e.into_inner()).take())
            .collect();
        // A clean end releases the lease, so the next owner need not wait
        // for it to lapse; a killed storage (a simulated death) leaves it.
        if !sh.dead.load(Ordering::Acquire)
            && let Some(mut conn) = main
        {
            let id = i64::from(self.id);
            if conn
                .client
                .execute(sh.sql.release.as_str(), &[&id, &self.epoch])
                .is_ok()
            {
                sh.give_back(conn);
            }
        }
        if !sh.dead.load(Ordering::Acquire) {
            for conn in flushers {
                sh.give_back(conn);
            }
        }
        sh.open.release(self.id);
    }
}

impl ShardEngine for PgShard {
    fn shard(&self) -> u32 {
        self.0.id
    }

    fn check_open(&self, what: &'static str) -> Result<()> {
        self.0.check(what)
    }
}

/// Writes `frames` (number → stored form) in `tx`.
fn write_frames(
    h: &ShardInner,
    tx: &mut Transaction<'_>,
    frames: &BTreeMap<u64, Vec<u8>>,
    doing: &str,
) -> Result<()> {
    if frames.is_empty() {
        return Ok(());
    }
    let mut numbers = Vec::with_capacity(frames.len());
    let mut values: Vec<&[u8]> = Vec::with_capacity(frames.len());
    for (&n, v) in frames {
        numbers.push(i64_of(n, "frame number")?);
        values.push(v);
    }
    let id = i64::from(h.id);
    tx.execute(
        h.shared.sql.frames_insert.as_str(),
        &[&id, &numbers, &values],
    )
    .map_err(|e| h.err(doing, &e))?;
    Ok(())
}

impl FrameEngine for PgShard {
    fn prefetch(&self, numbers: &[u64]) -> Result<()> {
        let h = &*self.0;
        let id = i64::from(h.id);
        let wanted = numbers
            .iter()
            .take(PREFETCH_FRAMES)
            .map(|&n| i64_of(n, "frame number"))
            .collect::<Result<Vec<i64>>>()?;
        let doing = "prefetching run-store frames";
        let rows = h.read(NAMES.runs, doing, |c| {
            c.query(h.shared.sql.frames_get.as_str(), &[&id, &wanted])
        })?;
        let mut frames = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let n: i64 = row.try_get(0).map_err(|e| h.err(doing, &e))?;
            let value: Vec<u8> = row.try_get(1).map_err(|e| h.err(doing, &e))?;
            let n = u64::try_from(n).map_err(|_| StorageError::Corrupt {
                what: "postgres store row: negative frame number, in shard",
                at: u64::from(h.id),
            })?;
            frames.insert(n, value);
        }
        lock(&h.prefetched).frames = frames;
        Ok(())
    }

    fn spill(&self, frames: &BTreeMap<u64, Vec<u8>>) -> Result<()> {
        let doing = "writing run-store frames";
        self.0.write(NAMES.runs, doing, |h, tx| {
            write_frames(h, tx, frames, doing)
        })
    }

    fn with_stored<T>(&self, n: u64, f: impl FnOnce(Option<&[u8]>) -> Result<T>) -> Result<T> {
        let h = &*self.0;
        let id = i64::from(h.id);
        if let Some(value) = lock(&h.prefetched).frames.remove(&n) {
            return f(Some(&value));
        }
        let n = i64_of(n, "frame number")?;
        let row = h.read(NAMES.runs, "reading a run-store frame", |c| {
            c.query_opt(h.shared.sql.frame_get.as_str(), &[&id, &n])
        })?;
        match row {
            Some(row) => {
                let value: &[u8] = row
                    .try_get(0)
                    .map_err(|e| h.err("reading a run-store frame", &e))?;
                f(Some(value))
            }
            None => f(None),
        }
    }
}

/// Applies `records` in order to `generation`, which holds `count`
/// records; returns the new count. A run's last record wins, so the
/// records collapse to one change per run, and then to one `DELETE` and
/// one upsert (which says which rows it inserted).
fn apply<'a>(
    h: &ShardInner,
    tx: &mut Transaction<'_>,
    generation: u32,
    count: u64,
    records: impl Iterator<Item = &'a [u8; INDEX_RECORD]>,
) -> Result<u64> {
    let doing = "writing index records";
    let mut last: HashMap<u64, &[u8; INDEX_RECORD]> = HashMap::new();
    let mut order = Vec::new();
    for r in records {
        let run = index_record_run(r);
        if last.insert(run, r).is_none() {
            order.push(run);
        }
    }
    let (mut del_runs, mut up_runs, mut up_values) = (Vec::new(), Vec::new(), Vec::new());
    for run in order {
        let Some(&r) = last.get(&run) else { continue };
        let run_i = i64_of(run, "run")?;
        if index_record_state(r) == DELETED {
            del_runs.push(run_i);
        } else {
            up_runs.push(run_i);
            up_values.push(index_value(&index_key(h.id, generation, run), r).to_vec());
        }
    }
    let id = i64::from(h.id);
    let generation = i64::from(generation);
    let sql = &h.shared.sql;
    let mut count = count;
    if !del_runs.is_empty() {
        let deleted = tx
            .execute(sql.index_delete.as_str(), &[&id, &generation, &del_runs])
            .map_err(|e| h.err(doing, &e))?;
        count = count.checked_sub(deleted).ok_or(StorageError::Corrupt {
            what: NAMES.index_miscount,
            at: u64::from(h.id),
        })?;
    }
    if !up_runs.is_empty() {
        let rows = tx
            .query(
                sql.index_upsert.as_str(),
                &[&id, &generation, &up_runs, &up_values],
            )
            .map_err(|e| h.err(doing, &e))?;
        for row in rows {
            let inserted: bool = row.try_get(0).map_err(|e| h.err(doing, &e))?;
            count += u64::from(inserted);
        }
    }
    Ok(count)
}

/// Writes a base's pending records in `tx`.
fn write_base(h: &ShardInner, tx: &mut Transaction<'_>, base: &mut Base) -> Result<()> {
    let (generation, count) = (base.generation, base.records);
    let n = apply(h, tx, generation, count, base.sorted_pending().iter())?;
    base.wrote(n);
    Ok(())
}

/// Deletes every index row of `generation` in `tx`.
fn clear_generation(h: &ShardInner, tx: &mut Transaction<'_>, generation: u32) -> Result<()> {
    let id = i64::from(h.id);
    tx.execute(
        h.shared.sql.index_clear.as_str(),
        &[&id, &i64::from(generation)],
    )
    .map_err(|e| h.err("deleting an index generation", &e))?;
    Ok(())
}

impl IndexEngine for PgShard {
    type Frames = PgShard;

    fn same_open(&self, frames: &PgShard) -> bool {
        Arc::ptr_eq(&self.0, &frames.0)
    }

    fn write_base(&self, base: &mut Base) -> Result<()> {
        let h = &*self.0;
        let sh = &h.shared;
        if sh.faults.take_base_write(h.id) {
            return Err(injected("writing a base", h.id));
        }
        h.write(NAMES.checkpoint, "writing a base", |h, tx| {
            write_base(h, tx, base)
        })
    }

    fn clear_generation(&self, generation: u32) -> Result<()> {
        let h = &*self.0;
        if h.shared.faults.take_base_write(h.id) {
            return Err(injected("abandoning a base", h.id));
        }
        h.write(NAMES.checkpoint, "abandoning a base", |h, tx| {
            clear_generation(h, tx, generation)
        })
    }

    fn commit(
        &self,
        runs: &KvRuns<PgShard>,
        index: IndexWrite<'_>,
        checkpoint: &[u8],
    ) -> Result<(u32, u64)> {
        let doing = "committing a checkpoint";
        let h = &*self.0;
        let faults = &h.shared.faults;
        if faults.crash_point(h.id, 0) || faults.take_commit(h.id) {
            return Err(injected(doing, h.id));
        }
        h.write(NAMES.checkpoint, doing, |h, tx| {
            write_frames(h, tx, runs.buffered(), doing)?;
            let id = i64::from(h.id);
            let released = runs
                .released()
                .map(|n| i64_of(n, "frame number"))
                .collect::<Result<Vec<i64>>>()?;
            if !released.is_empty() {
                tx.execute(h.shared.sql.frames_delete.as_str(), &[&id, &released])
                    .map_err(|e| h.err(doing, &e))?;
            }
            let (generation, records) = match index {
                IndexWrite::Delta {
                    generation,
                    records,
                    bytes,
                } => {
                    let delta = index_records(bytes, "commit")?;
                    (generation, apply(h, tx, generation, records, delta)?)
                }
                IndexWrite::Base { base, old } => {
                    write_base(h, tx, base)?;
                    clear_generation(h, tx, old)?;
                    (base.generation, base.records)
                }
            };
            let row = CommitRow {
                position: runs.position(),
                generation,
                records,
                checkpoint: checkpoint.to_vec(),
            };
            tx.execute(h.shared.sql.commit_put.as_str(), &[&id, &row.encode(h.id)])
                .map_err(|e| h.err(doing, &e))?;
            if faults.crash_point(h.id, 1) {
                // Built, never committed: dropping the transaction rolls it
                // back.
                return Err(injected(doing, h.id));
            }
            Ok((generation, records))
        })
        .and_then(|done| {
            if faults.crash_point(h.id, 2) {
                return Err(injected(doing, h.id));
            }
            Ok(done)
        })
    }

    fn scan(&self, generation: u32, visit: &mut RowVisitor<'_>) -> Result<()> {
        // Batches of INDEX_CHUNK rows in run order, each its own query, so
        // a million-record index never sits in memory; only this part
        // changes the committed generation, so the batches form one
        // snapshot.
        let h = &*self.0;
        let doing = "reading the index";
        let id = i64::from(h.id);
        let gen_i = i64::from(generation);
        let limit = INDEX_CHUNK as i64;
        let mut from = 0i64;
        loop {
            let rows = h.read(NAMES.checkpoint, doing, |c| {
                c.query(
                    h.shared.sql.index_scan.as_str(),
                    &[&id, &gen_i, &from, &limit],
                )
            })?;
            for row in &rows {
                let run: i64 = row.try_get(0).map_err(|e| h.err(doing, &e))?;
                let value: &[u8] = row.try_get(1).map_err(|e| h.err(doing, &e))?;
                // A negative run is no run this layout wrote: reading it
                // under run 0's key fails its CRC as damage.
                let key = index_key(h.id, generation, u64::try_from(run).unwrap_or(0));
                visit(&key, value)?;
            }
            let Some(last) = rows.last().filter(|_| rows.len() == INDEX_CHUNK) else {
                return Ok(());
            };
            let run: i64 = last.try_get(0).map_err(|e| h.err(doing, &e))?;
            match run.checked_add(1) {
                Some(next) => from = next,
                None => return Ok(()),
            }
        }
    }
}
