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
//! The log's seal ([`crate::LogStore::begin_seal`]) is durable state too:
//! its ticket records the sealed LSN when it runs (as a disk's write and
//! sync would), and opening a shard whose log ends before it is
//! [`StorageError::LostRecords`]. A crash never causes that here (a seal
//! claims only durable records); [`MemoryStorage::lose_acknowledged`]
//! models the damage that does.
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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::contract::{Recovered, ShardParts, Storage};
use crate::limits::INDEX_RECORD;
use crate::{Result, StorageError};
use fusee_core::record::Lsn;

mod checkpoint;
mod log;
mod runs;
#[cfg(test)]
mod tests;

pub use checkpoint::MemoryCheckpoint;
pub use log::MemoryLog;
pub use runs::MemoryRuns;

/// How many crash points a memory commit passes through (see
/// [`MemoryStorage::crash_in_commit`]).
pub const COMMIT_STEPS: u32 = 4;

/// Records handed to a log visitor per lock acquisition.
const READ_BATCH: usize = 1024;

type Index = BTreeMap<u64, [u8; INDEX_RECORD]>;

/// An in-memory [`Storage`]. Cloning gives another handle to the same
/// storage; a handle stays usable until the storage is closed, crashed or
/// reopened through any handle.
#[derive(Clone)]
pub struct MemoryStorage {
    shared: Arc<Shared>,
    /// Which incarnation of the storage this handle belongs to.
    epoch: u64,
    closed: Arc<AtomicBool>,
}

#[derive(Default)]
struct Shared {
    epoch: AtomicU64,
    next_token: AtomicU64,
    shards: Mutex<BTreeMap<u32, Arc<Mutex<Shard>>>>,
    gate: Arc<FlushGate>,
}

/// Holds flushes back ([`MemoryStorage::hold_flushes`]): a slow disk, on
/// demand.
#[derive(Default, Debug)]
pub(super) struct FlushGate {
    state: Mutex<GateState>,
    opened: std::sync::Condvar,
    /// [`MemoryStorage::split_flushes`]: tickets defer durability to
    /// `finish_flush` without waiting.
    split: AtomicBool,
    /// [`MemoryStorage::overlap_flushes`]: how many deferred tickets a log
    /// may have out (0 meaning 1).
    overlap: AtomicUsize,
}

#[derive(Default, Debug)]
struct GateState {
    held: bool,
    /// Crashes so far: a flush held when the machine crashed never ends its
    /// I/O, but the thread waiting in it must be let go (a host joins its
    /// flusher when it stops).
    crashes: u64,
}

impl FlushGate {
    pub(super) fn is_held(&self) -> bool {
        lock(&self.state).held
    }

    /// Whether a split flush's records wait for `finish_flush` (held, or
    /// split on purpose) rather than being made durable by `begin_flush`.
    pub(super) fn defers(&self) -> bool {
        self.split.load(Ordering::SeqCst) || self.is_held()
    }

    /// How many deferred tickets a log may have out.
    pub(super) fn overlap(&self) -> usize {
        self.overlap.load(Ordering::SeqCst).max(1)
    }

    /// The crash count a flush started now waits under.
    pub(super) fn crashes(&self) -> u64 {
        lock(&self.state).crashes
    }

    /// Blocks while the gate is held, unless the storage crashed since
    /// `crashes` was read: the flush is then cut short (its records stay
    /// volatile, and the dead part refuses to report them durable).
    pub(super) fn wait(&self, crashes: u64) {
        let mut state = lock(&self.state);
        while state.held && state.crashes == crashes {
            state = self.opened.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn set(&self, on: bool) {
        lock(&self.state).held = on;
        self.opened.notify_all();
    }

    fn crashed(&self) {
        lock(&self.state).crashes += 1;
        self.opened.notify_all();
    }
}

struct Frame {
    bytes: Arc<[u8]>,
    released: bool,
}

#[derive(Default)]
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
    /// The LSN the last seal recorded (durable state, like `durable`).
    sealed: Lsn,
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
        self.gate.crashed();
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

    /// Holds every log flush of every shard back while `on` (a slow disk):
    /// a flush split with [`crate::LogStore::begin_flush`] waits in its
    /// ticket's [`crate::FlushTicket::run`] until the hold is lifted, while
    /// the log takes more appends; a plain flush waits in place. Nothing is
    /// reported durable meanwhile. For tests of what a host lets out before
    /// its records are durable.
    pub fn hold_flushes(&self, on: bool) {
        self.shared.gate.set(on);
    }

    /// Splits every log flush begun with [`crate::LogStore::begin_flush`]
    /// for real while `on`: its ticket's [`crate::FlushTicket::run`] does
    /// nothing and returns at once, and the records become durable only in
    /// [`crate::LogStore::finish_flush`]. A crash before that loses them.
    /// For a host driven by a simulator, which completes the tickets in
    /// flight in an order of its choosing on one thread (where
    /// [`hold_flushes`](Self::hold_flushes) would block it). Off by default:
    /// `begin_flush` then makes the records durable itself.
    pub fn split_flushes(&self, on: bool) {
        self.shared.gate.split.store(on, Ordering::SeqCst);
    }

    /// Lets every log have up to `n` flush tickets out at once
    /// ([`crate::LogStore::flushes_in_flight_max`], default 1), as a backend
    /// that overlaps flushes does. Tickets are deferred only while flushes
    /// are split or held ([`split_flushes`](Self::split_flushes),
    /// [`hold_flushes`](Self::hold_flushes)); they must be finished in the
    /// order they began (a ticket finished out of turn is `Misuse` and
    /// latches the log). For a host's tests and its simulator, which then
    /// see tickets come back in any order. Set it before opening shards.
    pub fn overlap_flushes(&self, n: usize) {
        self.shared.gate.overlap.store(n, Ordering::SeqCst);
    }

    /// The next [`crate::LogStore::flush`] of `shard` fails with an I/O error:
    /// the records it would have made durable are lost and the log part is
    /// latched.
    pub fn fail_next_flush(&self, shard: u32) {
        lock(&self.shared.shard(shard)).fail_next_flush = true;
    }

    /// Damage a log cannot tell from a torn tail: the last `records`
    /// records `shard` flushed are gone, as if the disk had zeroed its
    /// newest acknowledged batches (the shard's durable state keeps its
    /// seal). The next open of the shard is
    /// [`StorageError::LostRecords`] if a seal covered any of them, and
    /// opens with less data otherwise, as a real backend would. Call it
    /// with no part of the shard alive (after a crash or close). For tests
    /// of what a seal detects.
    pub fn lose_acknowledged(&self, shard: u32, records: u64) {
        let state = self.shared.shard(shard);
        let mut s = lock(&state);
        let lose = records.min(s.log.len() as u64);
        let keep = s.log.len() - lose as usize;
        s.log.truncate(keep);
        s.durable = s.last_lsn();
    }

    /// The LSN the last seal of `shard` recorded (0: never sealed). For
    /// tests of when a host seals.
    pub fn sealed_lsn(&self, shard: u32) -> Lsn {
        lock(&self.shared.shard(shard)).sealed
    }

    /// The next [`crate::CheckpointStore::commit`] of `shard` fails with an I/O
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
        if s.last_lsn() < s.sealed {
            return Err(StorageError::LostRecords {
                shard,
                seal: format!("the memory seal of shard {shard}"),
                sealed: s.sealed,
                recovered: s.last_lsn(),
            });
        }
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
                gate: Arc::clone(&self.shared.gate),
                outstanding: VecDeque::new(),
                sealing: false,
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

// Manual: the derived form would print every record and frame held.
impl std::fmt::Debug for MemoryStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStorage")
            .field("epoch", &self.epoch)
            .field("closed", &self.closed.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Part")
            .field("shard", &self.id)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}
