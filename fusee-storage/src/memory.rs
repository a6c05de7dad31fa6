//! The in-memory backend: the reference implementation of the contract and
//! the model the conformance suite checks other backends against.
//!
//! # What is "durable" here
//!
//! Each shard keeps its durable state (flushed log records, the committed
//! index, checkpoint and store position) next to its volatile state
//! (unflushed records, frames appended since the last commit, releases not
//! yet committed, a base being streamed). [`MemoryStorage::crash`] throws
//! the volatile state of every shard away, exactly as a power loss would on a
//! disk backend that keeps nothing it did not sync; so does closing the
//! storage or dropping a shard's last part, which makes the memory backend
//! the strictest legal backend (a real one may keep more, never less).
//!
//! # Fault injection
//!
//! [`MemoryStorage::fail_next_flush`], [`MemoryStorage::fail_next_commit`]
//! and [`MemoryStorage::crash_in_commit`] let the engine's crash tests and
//! the conformance suite exercise the failure paths. A commit passes through
//! [`COMMIT_STEPS`] points (before anything; store durable; new index staged;
//! published) and can be made to crash the whole storage at any of them.
//!
//! # Concurrency
//!
//! One mutex per shard, held only for short copies: log reads and index
//! reads collect a batch of shared (`Arc`) records under the lock and visit
//! them after releasing it, so a visitor may use the shard's other parts.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fusee_core::record::Lsn;
use fusee_core::shard::BlobRef;

use crate::contract::{
    CheckpointStore, Committed, IndexChange, LogStore, Recovered, RunStore, ShardParts, Storage,
};
use crate::limits::{
    DELETED, INDEX_RECORD, MAX_FRAME, MAX_OFFSET, MAX_RECORD, index_record_run, index_record_state,
    index_records,
};
use crate::{Result, StorageError};

/// How many crash points a memory commit passes through (see
/// [`MemoryStorage::crash_in_commit`]).
pub const COMMIT_STEPS: u32 = 4;

/// Records handed to a log visitor per lock acquisition.
const READ_BATCH: usize = 1024;
/// Index records handed to an index visitor per chunk.
const INDEX_CHUNK: usize = 4096;

type Index = BTreeMap<u64, [u8; INDEX_RECORD]>;

/// An in-memory [`Storage`]. Cloning gives another handle to the same
/// storage; a handle stays usable until the storage is closed, crashed or
/// reopened through any handle.
#[derive(Clone, Debug)]
pub struct MemoryStorage {
    shared: Arc<Shared>,
    /// Which incarnation of the storage this handle belongs to.
    epoch: u64,
    closed: Arc<AtomicBool>,
}

#[derive(Debug, Default)]
struct Shared {
    epoch: AtomicU64,
    next_token: AtomicU64,
    shards: Mutex<BTreeMap<u32, Arc<Mutex<Shard>>>>,
}

#[derive(Debug)]
struct Frame {
    bytes: Arc<[u8]>,
    released: bool,
}

#[derive(Debug, Default)]
struct Shard {
    /// Opened at least once (fault injection may create a shard early).
    opened: bool,
    /// The open that owns the shard's live parts, if any.
    token: Option<u64>,
    parts_alive: u8,
    // Log: `log[i]` has LSN `log_base + 1 + i`.
    log: VecDeque<Arc<[u8]>>,
    log_base: Lsn,
    durable: Lsn,
    log_latched: bool,
    // Run store.
    frames: HashMap<u64, Frame>,
    next_offset: u64,
    committed_offset: u64,
    runs_latched: bool,
    // Committed index and checkpoint; a base being streamed.
    index: Arc<Index>,
    checkpoint: Option<Vec<u8>>,
    /// Records of a base being streamed, in arrival order.
    base: Option<Vec<[u8; INDEX_RECORD]>>,
    checkpoint_latched: bool,
    // Injected faults.
    fail_next_flush: bool,
    fail_next_commit: bool,
    crash_at_step: Option<u32>,
}

impl Shard {
    fn last_lsn(&self) -> Lsn {
        self.log_base + self.log.len() as u64
    }

    /// Throws away everything volatile and the live parts' ownership.
    fn roll_back(&mut self) {
        let keep = self.durable.saturating_sub(self.log_base);
        self.log
            .truncate(usize::try_from(keep).unwrap_or(usize::MAX));
        let committed = self.committed_offset;
        self.frames.retain(|&offset, _| offset < committed);
        for frame in self.frames.values_mut() {
            frame.released = false;
        }
        self.next_offset = committed;
        self.base = None;
        self.token = None;
        self.parts_alive = 0;
        self.log_latched = false;
        self.runs_latched = false;
        self.checkpoint_latched = false;
        self.crash_at_step = None;
        debug_assert_eq!(self.last_lsn(), self.durable.max(self.log_base));
    }
}

impl Shared {
    fn shard(&self, shard: u32) -> Arc<Mutex<Shard>> {
        let mut shards = lock(&self.shards);
        Arc::clone(shards.entry(shard).or_default())
    }

    /// Starts a new incarnation: every handle and part from before is dead
    /// and every shard keeps only what is durable.
    fn crash_all(&self) -> u64 {
        let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        let shards: Vec<_> = lock(&self.shards).values().cloned().collect();
        for shard in shards {
            lock(&shard).roll_back();
        }
        epoch
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the
/// state is consistent between statements that hold the lock).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for MemoryStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStorage {
    /// An empty storage.
    pub fn new() -> Self {
        Self {
            shared: Arc::default(),
            epoch: 0,
            closed: Arc::default(),
        }
    }

    /// Simulates a power loss and a restart: every shard keeps exactly what
    /// was flushed (log) or committed (index, checkpoint, frames up to the
    /// commit's position, releases); every handle and part obtained before
    /// is dead ([`StorageError::Closed`]). Returns the restarted storage.
    pub fn crash(&self) -> MemoryStorage {
        let epoch = self.shared.crash_all();
        Self {
            shared: Arc::clone(&self.shared),
            epoch,
            closed: Arc::default(),
        }
    }

    /// Closes this storage cleanly and opens it again. For memory the result
    /// is the same as [`MemoryStorage::crash`]: nothing volatile survives.
    pub fn reopen(&self) -> MemoryStorage {
        self.closed.store(true, Ordering::SeqCst);
        self.crash()
    }

    /// The next [`LogStore::flush`] of `shard` fails with an I/O error:
    /// the records it would have made durable are lost and the log part is
    /// latched.
    pub fn fail_next_flush(&self, shard: u32) {
        lock(&self.shared.shard(shard)).fail_next_flush = true;
    }

    /// The next [`CheckpointStore::commit`] of `shard` fails with an I/O
    /// error before changing anything; the checkpoint and run-store parts
    /// are latched.
    pub fn fail_next_commit(&self, shard: u32) {
        lock(&self.shared.shard(shard)).fail_next_commit = true;
    }

    /// The next commit of `shard` crashes at point `step` of
    /// [`COMMIT_STEPS`]: 0 before anything, 1 with the run store durable, 2
    /// with the new index staged, 3 after the commit is published but before
    /// it returns. The shard loses its volatile state at once and its parts
    /// die; the commit returns an I/O error, and the caller completes the
    /// crash with [`MemoryStorage::crash`]. A `step` past the last point
    /// never fires.
    pub fn crash_in_commit(&self, shard: u32, step: u32) {
        lock(&self.shared.shard(shard)).crash_at_step = Some(step);
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst)
            || self.shared.epoch.load(Ordering::SeqCst) != self.epoch
        {
            return Err(StorageError::Closed {
                what: "memory storage",
            });
        }
        Ok(())
    }
}

impl Storage for MemoryStorage {
    type Log = MemoryLog;
    type Runs = MemoryRuns;
    type Checkpoint = MemoryCheckpoint;

    fn open_shard(&self, shard: u32) -> Result<ShardParts<Self>> {
        self.check_open()?;
        let state = self.shared.shard(shard);
        let token = self.shared.next_token.fetch_add(1, Ordering::SeqCst);
        let mut s = lock(&state);
        // Re-check under the shard lock: a crash that started after the
        // first check has either rolled this shard back already or will.
        self.check_open()?;
        if s.token.is_some() {
            return Err(StorageError::AlreadyOpen { shard });
        }
        s.roll_back();
        s.opened = true;
        s.token = Some(token);
        s.parts_alive = 3;
        let part = || Part {
            shard: Arc::clone(&state),
            id: shard,
            token,
        };
        let parts = ShardParts {
            log: MemoryLog {
                part: part(),
                first: s.log_base + 1,
                last: s.last_lsn(),
                durable: s.durable,
            },
            runs: MemoryRuns {
                part: part(),
                position: s.next_offset,
            },
            checkpoint: MemoryCheckpoint { part: part() },
            recovered: Recovered {
                checkpoint: s.checkpoint.clone(),
                index_records: s.index.len() as u64,
                store_position: s.committed_offset,
            },
        };
        drop(s);
        Ok(parts)
    }

    fn shards(&self) -> Result<Vec<u32>> {
        self.check_open()?;
        let shards: Vec<_> = lock(&self.shared.shards)
            .iter()
            .map(|(&id, shard)| (id, Arc::clone(shard)))
            .collect();
        Ok(shards
            .into_iter()
            .filter(|(_, shard)| lock(shard).opened)
            .map(|(id, _)| id)
            .collect())
    }

    fn close(&self) -> Result<()> {
        if !self.closed.swap(true, Ordering::SeqCst) && self.check_epoch() {
            self.shared.crash_all();
        }
        Ok(())
    }
}

impl MemoryStorage {
    fn check_epoch(&self) -> bool {
        self.shared.epoch.load(Ordering::SeqCst) == self.epoch
    }
}

/// What every memory part holds: its shard and the open it belongs to.
#[derive(Debug)]
struct Part {
    shard: Arc<Mutex<Shard>>,
    id: u32,
    token: u64,
}

impl Part {
    /// Locks the shard if this part still owns it.
    fn lock(&self, what: &'static str) -> Result<MutexGuard<'_, Shard>> {
        let s = lock(&self.shard);
        if s.token != Some(self.token) {
            return Err(StorageError::Closed { what });
        }
        Ok(s)
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        let mut s = lock(&self.shard);
        if s.token == Some(self.token) {
            debug_assert!(s.parts_alive > 0);
            s.parts_alive = s.parts_alive.saturating_sub(1);
            if s.parts_alive == 0 {
                s.roll_back();
            }
        }
    }
}

/// The memory backend's log part.
#[derive(Debug)]
pub struct MemoryLog {
    part: Part,
    // Only this part changes the log while it is live, so these mirror the
    // shard's state exactly.
    first: Lsn,
    last: Lsn,
    durable: Lsn,
}

const LOG: &str = "memory log";

impl LogStore for MemoryLog {
    fn append(&mut self, lsn: Lsn, record: &[u8]) -> Result<()> {
        let mut s = self.part.lock(LOG)?;
        if s.log_latched {
            return Err(StorageError::Latched { what: LOG });
        }
        if record.len() > MAX_RECORD {
            return Err(StorageError::TooLarge {
                what: "log record",
                len: record.len() as u64,
                max: MAX_RECORD as u64,
            });
        }
        let expected = s.last_lsn() + 1;
        if lsn != expected {
            return Err(StorageError::LsnGap { expected, got: lsn });
        }
        s.log.push_back(Arc::from(record));
        self.last = lsn;
        Ok(())
    }

    fn flush(&mut self) -> Result<Lsn> {
        let mut s = self.part.lock(LOG)?;
        if s.log_latched {
            return Err(StorageError::Latched { what: LOG });
        }
        if s.fail_next_flush {
            s.fail_next_flush = false;
            s.log_latched = true;
            let keep = s.durable.saturating_sub(s.log_base);
            s.log.truncate(usize::try_from(keep).unwrap_or(usize::MAX));
            self.last = s.last_lsn();
            return Err(StorageError::io(
                format!("flushing shard {} log (injected fault)", self.part.id),
                std::io::Error::other("injected flush failure"),
            ));
        }
        s.durable = s.last_lsn();
        self.durable = s.durable;
        Ok(self.durable)
    }

    fn read(&mut self, after: Lsn, visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>) -> Result<Lsn> {
        let mut batch: Vec<Arc<[u8]>> = Vec::with_capacity(READ_BATCH);
        let mut next = after;
        let end;
        {
            let s = self.part.lock(LOG)?;
            if after < s.log_base {
                return Err(StorageError::Trimmed {
                    first_kept: s.log_base + 1,
                });
            }
            end = s.last_lsn();
            if after > end {
                return Err(StorageError::BeyondEnd { after, last: end });
            }
        }
        // Bounded: every round visits at least one record or stops.
        while next < end {
            batch.clear();
            {
                let s = self.part.lock(LOG)?;
                let start = usize::try_from(next - s.log_base).unwrap_or(usize::MAX);
                batch.extend(s.log.iter().skip(start).take(READ_BATCH).cloned());
            }
            if batch.is_empty() {
                return Err(StorageError::Closed { what: LOG });
            }
            for record in &batch {
                next += 1;
                visit(next, record)?;
                if next == end {
                    break;
                }
            }
        }
        Ok(end)
    }

    fn discard_through(&mut self, lsn: Lsn) -> Result<()> {
        let mut s = self.part.lock(LOG)?;
        if s.log_latched {
            return Err(StorageError::Latched { what: LOG });
        }
        if lsn > s.durable {
            return Err(StorageError::Misuse {
                call: "LogStore::discard_through",
                why: "the LSN is not durable yet",
            });
        }
        while s.log_base < lsn {
            if s.log.pop_front().is_none() {
                break;
            }
            s.log_base += 1;
        }
        self.first = s.log_base + 1;
        Ok(())
    }

    fn first_lsn(&self) -> Lsn {
        self.first
    }

    fn last_lsn(&self) -> Lsn {
        self.last
    }

    fn durable_lsn(&self) -> Lsn {
        self.durable
    }
}

/// The memory backend's run-store part.
#[derive(Debug)]
pub struct MemoryRuns {
    part: Part,
    position: u64,
}

const RUNS: &str = "memory run store";

impl RunStore for MemoryRuns {
    fn append(&mut self, frame: &[u8]) -> Result<BlobRef> {
        let mut s = self.part.lock(RUNS)?;
        if s.runs_latched {
            return Err(StorageError::Latched { what: RUNS });
        }
        let len = u32::try_from(frame.len())
            .ok()
            .filter(|&l| l as usize <= MAX_FRAME)
            .ok_or(StorageError::TooLarge {
                what: "run-store frame",
                len: frame.len() as u64,
                max: MAX_FRAME as u64,
            })?;
        let offset = s.next_offset;
        // Empty frames take one address so every frame has its own offset.
        let end = offset + u64::from(len.max(1));
        if end > MAX_OFFSET {
            return Err(StorageError::TooLarge {
                what: "run store",
                len: end,
                max: MAX_OFFSET,
            });
        }
        s.frames.insert(
            offset,
            Frame {
                bytes: Arc::from(frame),
                released: false,
            },
        );
        s.next_offset = end;
        self.position = end;
        Ok(BlobRef { offset, len })
    }

    fn read(&mut self, blob: BlobRef, out: &mut Vec<u8>) -> Result<()> {
        let bytes = {
            let s = self.part.lock(RUNS)?;
            match s.frames.get(&blob.offset) {
                Some(f) if !f.released && f.bytes.len() == blob.len as usize => {
                    Arc::clone(&f.bytes)
                }
                _ => return Err(StorageError::UnknownBlob { blob }),
            }
        };
        out.clear();
        out.extend_from_slice(&bytes);
        Ok(())
    }

    fn release(&mut self, blob: BlobRef) -> Result<()> {
        let mut s = self.part.lock(RUNS)?;
        if s.runs_latched {
            return Err(StorageError::Latched { what: RUNS });
        }
        match s.frames.get_mut(&blob.offset) {
            Some(f) if !f.released && f.bytes.len() == blob.len as usize => {
                f.released = true;
                Ok(())
            }
            _ => Err(StorageError::UnknownBlob { blob }),
        }
    }

    fn compact(&mut self, _moved: &mut dyn FnMut(BlobRef, BlobRef)) -> Result<u64> {
        let s = self.part.lock(RUNS)?;
        if s.runs_latched {
            return Err(StorageError::Latched { what: RUNS });
        }
        // Released frames are dropped by the commit that makes the release
        // durable; nothing ever moves.
        Ok(0)
    }

    fn position(&self) -> u64 {
        self.position
    }
}

/// The memory backend's checkpoint part.
#[derive(Debug)]
pub struct MemoryCheckpoint {
    part: Part,
}

const CHECKPOINT: &str = "memory checkpoint";

/// One staged change of the index.
enum Staged {
    Delta(Vec<(u64, Option<[u8; INDEX_RECORD]>)>),
    Base(Index),
}

impl MemoryCheckpoint {
    fn check_writable(s: &Shard) -> Result<()> {
        if s.checkpoint_latched {
            return Err(StorageError::Latched { what: CHECKPOINT });
        }
        Ok(())
    }

    /// Crashes the storage if the armed crash point is `step`.
    fn crash_point(&self, s: &mut MutexGuard<'_, Shard>, step: u32) -> Result<()> {
        if s.crash_at_step != Some(step) {
            return Ok(());
        }
        s.roll_back();
        Err(StorageError::io(
            format!(
                "committing shard {} (injected crash at step {step})",
                self.part.id
            ),
            std::io::Error::other("injected crash"),
        ))
    }
}

impl CheckpointStore for MemoryCheckpoint {
    type Runs = MemoryRuns;

    fn read_index(&mut self, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        // A snapshot: commits made meanwhile copy the map instead.
        let index = Arc::clone(&self.part.lock(CHECKPOINT)?.index);
        let mut chunk = Vec::with_capacity(INDEX_CHUNK.min(index.len()) * INDEX_RECORD);
        for record in index.values() {
            chunk.extend_from_slice(record);
            if chunk.len() == INDEX_CHUNK * INDEX_RECORD {
                visit(&chunk)?;
                chunk.clear();
            }
        }
        if !chunk.is_empty() {
            visit(&chunk)?;
        }
        Ok(index.len() as u64)
    }

    fn begin_base(&mut self) -> Result<()> {
        let mut s = self.part.lock(CHECKPOINT)?;
        Self::check_writable(&s)?;
        s.base = Some(Vec::new());
        Ok(())
    }

    fn base_chunk(&mut self, records: &[u8]) -> Result<()> {
        let mut s = self.part.lock(CHECKPOINT)?;
        Self::check_writable(&s)?;
        let records = index_records(records, "index base chunk length")?;
        let Some(base) = s.base.as_mut() else {
            return Err(StorageError::Misuse {
                call: "CheckpointStore::base_chunk",
                why: "no base was begun",
            });
        };
        // Appending is all: sorting once at commit beats a million random
        // tree inserts by an order of magnitude.
        base.extend(records.copied());
        Ok(())
    }

    fn commit(
        &mut self,
        runs: &mut MemoryRuns,
        change: IndexChange<'_>,
        checkpoint: &[u8],
    ) -> Result<Committed> {
        if runs.part.token != self.part.token {
            return Err(StorageError::Misuse {
                call: "CheckpointStore::commit",
                why: "the run store belongs to another shard or open",
            });
        }
        let mut s = self.part.lock(CHECKPOINT)?;
        Self::check_writable(&s)?;
        // Validate before any step so a caller error changes nothing.
        let staged = match change {
            IndexChange::Delta(bytes) => Staged::Delta(
                index_records(bytes, "index delta length")?
                    .map(|r| {
                        let run = index_record_run(r);
                        (run, (index_record_state(r) != DELETED).then_some(*r))
                    })
                    .collect(),
            ),
            IndexChange::Base => match s.base.take() {
                Some(base) => Staged::Base(build_base(base)),
                None => {
                    return Err(StorageError::Misuse {
                        call: "CheckpointStore::commit",
                        why: "IndexChange::Base without begin_base",
                    });
                }
            },
        };
        self.crash_point(&mut s, 0)?;
        if s.fail_next_commit {
            s.fail_next_commit = false;
            s.checkpoint_latched = true;
            s.runs_latched = true;
            return Err(StorageError::io(
                format!("committing shard {} (injected fault)", self.part.id),
                std::io::Error::other("injected commit failure"),
            ));
        }
        // Step 1: the run store is durable up to here (memory: trivially).
        let position = s.next_offset;
        self.crash_point(&mut s, 1)?;
        // Step 2: the new index is staged.
        self.crash_point(&mut s, 2)?;
        // Publish index, checkpoint and store position as one step.
        match staged {
            Staged::Base(base) => s.index = Arc::new(base),
            Staged::Delta(ops) => {
                let index = Arc::make_mut(&mut s.index);
                for (run, record) in ops {
                    match record {
                        Some(r) => index.insert(run, r),
                        None => index.remove(&run),
                    };
                }
            }
        }
        s.checkpoint = Some(checkpoint.to_vec());
        s.committed_offset = position;
        s.frames.retain(|_, f| !f.released);
        self.crash_point(&mut s, 3)?;
        Ok(Committed {
            index_records: s.index.len() as u64,
            store_position: position,
        })
    }
}

/// The index a streamed base describes: the last record of each run wins
/// and a [`DELETED`] record removes its run, as if applied in order.
fn build_base(mut records: Vec<[u8; INDEX_RECORD]>) -> Index {
    // Stable: records of one run keep their order, so the last one is last.
    records.sort_by_key(index_record_run);
    let mut kept: Vec<(u64, [u8; INDEX_RECORD])> = Vec::with_capacity(records.len());
    for r in records {
        let run = index_record_run(&r);
        if kept.last().is_some_and(|(last, _)| *last == run) {
            kept.pop();
        }
        if index_record_state(&r) != DELETED {
            kept.push((run, r));
        }
    }
    // Sorted input: the map is built in bulk.
    kept.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(run: u64) -> [u8; INDEX_RECORD] {
        let mut r = [7u8; INDEX_RECORD];
        r[8..16].copy_from_slice(&(run | 1 << 48).to_le_bytes());
        r
    }

    fn runs_of(c: &mut MemoryCheckpoint) -> Vec<u64> {
        let mut runs = Vec::new();
        c.read_index(&mut |chunk| {
            for r in chunk.chunks_exact(INDEX_RECORD) {
                let r: &[u8; INDEX_RECORD] = r.try_into().map_err(|_| StorageError::Corrupt {
                    what: "test chunk",
                    at: 0,
                })?;
                runs.push(index_record_run(r));
            }
            Ok(())
        })
        .map(|_| runs)
        .unwrap_or_else(|e| panic!("read_index: {e}"))
    }

    #[test]
    fn parts_are_send_and_storage_is_sync() {
        fn send<T: Send>() {}
        fn sync<T: Send + Sync>() {}
        send::<MemoryLog>();
        send::<MemoryRuns>();
        send::<MemoryCheckpoint>();
        sync::<MemoryStorage>();
    }

    /// Points 0..=2 leave the previous commit, point 3 the new one; a point
    /// past the last never fires.
    #[test]
    fn commit_crash_points_are_exact() {
        for step in 0..=COMMIT_STEPS {
            let s = MemoryStorage::new();
            let mut p = s.open_shard(1).unwrap_or_else(|e| panic!("{e}"));
            let old = rec(1);
            p.checkpoint
                .commit(&mut p.runs, IndexChange::Delta(&old), b"old")
                .unwrap_or_else(|e| panic!("{e}"));
            let blob = p.runs.append(b"frame").unwrap_or_else(|e| panic!("{e}"));
            s.crash_in_commit(1, step);
            let r = p
                .checkpoint
                .commit(&mut p.runs, IndexChange::Delta(&rec(2)), b"new");
            assert_eq!(r.is_ok(), step >= COMMIT_STEPS, "step {step}: {r:?}");
            drop(p);
            let s = s.crash();
            let mut p = s.open_shard(1).unwrap_or_else(|e| panic!("{e}"));
            let new = step >= 3;
            let want: &[u8] = if new { b"new" } else { b"old" };
            assert_eq!(p.recovered.checkpoint.as_deref(), Some(want), "step {step}");
            assert_eq!(
                runs_of(&mut p.checkpoint),
                if new { vec![1, 2] } else { vec![1] }
            );
            let mut out = Vec::new();
            assert_eq!(
                p.runs.read(blob, &mut out).is_ok(),
                new,
                "step {step}: frame"
            );
        }
    }

    /// A failed flush loses exactly the records it covered, and parts from
    /// before a crash are dead.
    #[test]
    fn failed_flush_and_dead_parts() {
        let s = MemoryStorage::new();
        let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
        p.log.append(1, b"a").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.log.flush().ok(), Some(1));
        p.log.append(2, b"b").unwrap_or_else(|e| panic!("{e}"));
        s.fail_next_flush(0);
        assert!(p.log.flush().is_err());
        assert!(matches!(
            p.log.append(2, b"b"),
            Err(StorageError::Latched { .. })
        ));
        let s2 = s.crash();
        assert!(matches!(p.log.flush(), Err(StorageError::Closed { .. })));
        assert!(matches!(s.open_shard(0), Err(StorageError::Closed { .. })));
        drop(p);
        let mut p = s2.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.log.last_lsn(), 1);
        p.log.append(2, b"c").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s2.shards().ok(), Some(vec![0]));
    }

    /// A log visitor may use the shard's other parts (no lock is held while
    /// it runs), and a long read crosses batch boundaries intact.
    #[test]
    fn visitor_may_use_other_parts() {
        let s = MemoryStorage::new();
        let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
        let n = READ_BATCH as u64 * 2 + 5;
        for lsn in 1..=n {
            p.log
                .append(lsn, &lsn.to_le_bytes())
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let runs = &mut p.runs;
        let mut next = 0;
        let end = p
            .log
            .read(0, &mut |lsn, bytes| {
                next += 1;
                assert_eq!((lsn, bytes), (next, &lsn.to_le_bytes()[..]));
                runs.append(bytes).map(drop)
            })
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((end, next), (n, n));
    }

    /// Within a base the last record of a run wins and deletes remove.
    #[test]
    fn base_applies_records_in_order() {
        let mut del = rec(3);
        del[14] = DELETED;
        let index = build_base(vec![rec(5), rec(3), del, rec(9), rec(5)]);
        assert_eq!(index.keys().copied().collect::<Vec<_>>(), [5, 9]);
    }
}
