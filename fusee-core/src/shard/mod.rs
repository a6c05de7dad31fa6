//! The shard state machine.
//!
//! A shard owns a slice of the workflow ID space ([`shard_of`]), one log, and
//! the state derived from that log. [`ShardCore::apply`] is the only state
//! transition: the host calls it for every record as it appends it, and again
//! for every record it reads back at recovery, so live and recovered state
//! cannot drift apart.
//!
//! The core does no I/O and reads no clock: time comes in as `now_ms`, and
//! [`ShardCore::next_timer`] says when to come back. It emits [`Event`]s for
//! the host to act on (start this run's code, a timer fired, a signal matches
//! a wait, load this parked run) and queues [`Output`]s that may leave the
//! process only once the record that produced them is durable:
//! [`ShardCore::release`] hands them out as the durable LSN advances.
//!
//! # Loaded and parked runs
//!
//! A run is either **loaded** (a [`LoadedRun`]: identity, journal since its
//! stored prefix, pending timers, waits, signals) or **parked** (only its
//! 32-byte [`crate::table::Entry`], pointing at its frame in the
//! run store, with its earliest timer or its finish time). Suspended and
//! finished runs are parked so memory does not grow with idle work; the host
//! loads a run back ([`ShardCore::unpark`]) when a record must be appended to
//! it or its timer comes due ([`Event::NeedLoad`]).
//!
//! # Timers
//!
//! Only timers due within [`HORIZON_MS`] sit in a wheel: loaded runs' timers
//! in the timer wheel, parked runs' earliest timers in a wheel of loads. A
//! later timer waits in its run's table entry; each bucket of 4,096 table
//! slots knows the earliest time waiting in it. Once that time comes within
//! the horizon, a sweep walks the bucket and moves what is due within it into
//! the wheels. A sleeping population therefore costs its table entries and
//! nothing per timer until its timers approach. At most [`TIMER_CHUNK`]
//! timers fire per [`ShardCore::poll_timers`], so a mass wake is loaded,
//! driven and flushed in chunks.
//!
//! # The persisted index
//!
//! Parked entries are persisted as 32-byte index records: a **base** lists
//! every parked run (written in bounded chunks with
//! [`ShardCore::index_snapshot`] while [`ShardCore::hold_slots`] keeps slots
//! in place), and **deltas** ([`ShardCore::index_delta`]) list what changed
//! since. When the change lists would grow past an eighth of the parked runs,
//! they are dropped and the next write must be a base
//! ([`ShardCore::index_needs_base`]).
//!
//! # Invariants
//!
//! - Every run the shard knows has exactly one table entry; a loaded run also
//!   has a [`LoadedRun`]. Run numbers are below [`ShardCore::next_run_id`].
//! - An output queued for LSN `n` is released only by `release(d)` with
//!   `d >= n`, and outputs are released in the order they were queued.
//! - A parked run asks for at most one load ([`Event::NeedLoad`]) per park.
//! - No input makes the core panic: records for unknown runs are ignored, a
//!   second `Done` is ignored, malformed index records are refused whole.

mod apply;
mod index;
mod listing;
mod parking;
mod retention;
mod run;
mod timers;
mod types;

#[cfg(test)]
mod property_tests;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::record::{Lsn, Name, RunId};
use crate::table::{self, Entry, RunTable, Slot, flag};
use crate::wheel::Wheel;
use crate::wire::hash_id;

pub use index::IndexError;
pub use listing::{NewestFirst, send_dedup, shard_of, shard_of_hash};
pub use run::LoadedRun;
pub use types::{
    BlobRef, Event, Expired, Found, Mode, Output, ParkedRun, StoredPrefix, TimerKey, TimerKind,
    UpdateSlot,
};

/// The reserved signal name by which workflow code cancels another
/// workflow: a `Send` with this name becomes an [`Output::Close`].
pub const CANCEL_SIGNAL: &str = "fusee.cancel";

/// Timers due later than this (in ms from the latest time the core has
/// seen) wait in their run's table entry instead of a wheel.
pub const HORIZON_MS: u64 = 1 << 16;

/// While far timers wait, the host is asked to poll at least this often, so
/// the sweep moves them into the wheels before they come due.
const SWEEP_MS: u64 = HORIZON_MS / 16;

/// At most this many due timers fire per [`ShardCore::poll_timers`] (per
/// wheel); the rest stay due for the next call.
pub const TIMER_CHUNK: usize = 4096;

/// Table slots per time bucket, as a power of two.
const BUCKET_BITS: u32 = 12;

/// Emptied runs kept for reuse while runs come and go.
const SPARE_RUNS: usize = 2048;

/// Workflow type names a shard shares among its runs; a store with more
/// types than this gives each run of the others its own copy.
const WTYPES_SHARED_MAX: usize = 4096;

/// Room the output queue keeps once empty: a live shard's queue holds about
/// one group commit's outputs, so more is left over from a burst.
const OUTPUTS_KEPT_MAX: usize = 1024;

/// Emptied runs a host keeps once a shard is idle (see
/// [`ShardCore::shrink_spare`]).
pub const SPARE_RUNS_IDLE: usize = 64;

/// The state derived from one shard's log. See the [module docs](self).
pub struct ShardCore {
    /// This shard's number.
    pub shard: u32,
    /// How many shards the workflow ID space is split into.
    pub shards: u32,
    /// How long a finished run is kept after it finishes.
    pub retention_ms: u64,
    next_run: RunId,
    /// Boxed: a run moves in and out of the map as it loads and parks, and
    /// moving a few hundred bytes each way (and at each rehash) was a tenth
    /// of a mass wake's copying.
    loaded: FxHashMap<RunId, Box<LoadedRun>>,
    /// Every run the shard knows, loaded or parked.
    runs: RunTable,
    /// Entries in a parked state (suspended or finished).
    parked_count: usize,
    /// Loaded runs' timers due within the horizon.
    wheel: Wheel<TimerKey>,
    /// Parked runs whose earliest timer is within the horizon.
    near: Wheel<RunId>,
    /// Per bucket of the table, the earliest time an entry in it waits for
    /// outside the wheels (`u64::MAX`: none). Lowered on every change,
    /// recomputed when a sweep walks the bucket.
    far: Vec<u64>,
    /// The earliest of `far`.
    far_min: u64,
    /// When the sweep last ran.
    sweep_at: u64,
    /// Entries moved (compaction): the next sweep walks every bucket.
    sweep_full: bool,
    /// Entries keep their slots while the host writes an index base.
    slots_held: bool,
    outputs: VecDeque<(Lsn, Output)>,
    events: VecDeque<Event>,
    /// Finished runs by finish time, for retention.
    retention: BinaryHeap<Reverse<(u64, RunId)>>,
    /// Due timers found by a poll and not fired yet, and when they were found.
    backlog: VecDeque<TimerKey>,
    backlog_at: u64,
    near_backlog: VecDeque<RunId>,
    near_backlog_at: u64,
    /// Scratch vectors kept for their capacity.
    scratch_keys: Vec<TimerKey>,
    scratch_runs: Vec<RunId>,
    /// Runs that left memory, emptied, for the next ones. Boxes, so a run's
    /// state never moves between the pool and the map.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<LoadedRun>>,
    /// Workflow type names loaded runs share (see `type_name`).
    wtypes: FxHashSet<Name>,
    /// Runs whose parked entry changed, and runs removed, since the index
    /// last recorded them.
    changed: Vec<RunId>,
    deleted: Vec<RunId>,
    /// The change lists overflowed: the next index write is a base.
    index_rebase: bool,
    /// Bytes of loaded runs' in-memory journals.
    journal_bytes: usize,
}

impl ShardCore {
    /// An empty shard `shard` of `shards`, at time `now_ms`.
    pub fn new(shard: u32, shards: u32, retention_ms: u64, now_ms: u64) -> Self {
        Self {
            shard,
            shards,
            retention_ms,
            next_run: 1,
            loaded: FxHashMap::default(),
            runs: RunTable::new(),
            parked_count: 0,
            wheel: Wheel::new(now_ms),
            near: Wheel::new(now_ms),
            far: Vec::new(),
            far_min: u64::MAX,
            // As if a sweep ran one interval ago, so timers that came due
            // while the shard was closed fire at the first poll rather than
            // an interval later.
            sweep_at: now_ms.saturating_sub(SWEEP_MS),
            sweep_full: false,
            slots_held: false,
            outputs: VecDeque::new(),
            events: VecDeque::new(),
            retention: BinaryHeap::new(),
            backlog: VecDeque::new(),
            backlog_at: 0,
            near_backlog: VecDeque::new(),
            near_backlog_at: 0,
            scratch_keys: Vec::new(),
            scratch_runs: Vec::new(),
            spare: Vec::new(),
            wtypes: FxHashSet::default(),
            changed: Vec::new(),
            deleted: Vec::new(),
            index_rebase: false,
            journal_bytes: 0,
        }
    }

    /// The number the next `Start` gets from [`allocate_run`](Self::allocate_run).
    pub fn next_run_id(&self) -> RunId {
        self.next_run
    }

    /// Raises the next run number to at least `next` (from a checkpoint);
    /// never lowers it.
    pub fn set_next_run_id(&mut self, next: RunId) {
        self.next_run = self.next_run.max(next);
    }

    /// A fresh run number for a `Start` record about to be appended.
    pub fn allocate_run(&mut self) -> RunId {
        let run = self.next_run;
        self.next_run += 1;
        run
    }

    /// The latest run of workflow ID `id`. A loaded run is matched on its
    /// full ID; a parked one only on the ID's hash.
    pub fn find(&self, id: &str) -> Option<Found> {
        let e = self.runs.get(self.runs.find_id(hash_id(id))?);
        let run = e.run();
        if e.is_parked() {
            return Some(Found::Parked(run));
        }
        let l = self.loaded.get(&run)?;
        (*l.id == *id).then_some(Found::Loaded(run))
    }

    /// A loaded run.
    pub fn get(&self, run: RunId) -> Option<&LoadedRun> {
        self.loaded.get(&run).map(|l| &**l)
    }

    /// A parked run.
    pub fn parked(&self, run: RunId) -> Option<ParkedRun> {
        self.parked_entry(run).map(ParkedRun::of)
    }

    /// When parked run `run` finished (ms since the Unix epoch), from its
    /// table entry (no frame read); `None` if it is not parked, or parked
    /// unfinished (the entry's time is then its earliest timer).
    pub fn parked_finished_ms(&self, run: RunId) -> Option<u64> {
        let e = self.parked_entry(run)?;
        e.done().map(|_| e.time())
    }

    /// Whether `run` is parked.
    pub fn is_parked(&self, run: RunId) -> bool {
        self.parked_entry(run).is_some()
    }

    /// Parked run `run`'s table entry (a copy): its workflow-ID hash,
    /// state, frame and time, as the persisted index records it.
    pub fn parked_record(&self, run: RunId) -> Option<Entry> {
        self.parked_entry(run).copied()
    }

    fn parked_entry(&self, run: RunId) -> Option<&Entry> {
        let e = self.runs.get(self.runs.find_run(run)?);
        e.is_parked().then_some(e)
    }

    /// Every loaded run, in no particular order.
    pub fn loaded_runs(&self) -> impl Iterator<Item = (RunId, &LoadedRun)> {
        self.loaded.iter().map(|(&run, l)| (run, &**l))
    }

    /// Every parked run, in table order.
    pub fn parked_runs(&self) -> impl Iterator<Item = (RunId, ParkedRun)> + '_ {
        self.runs
            .iter()
            .filter(|(_, e)| e.is_parked())
            .map(|(_, e)| (e.run(), ParkedRun::of(e)))
    }

    /// A cursor over every run, loaded or parked, newest first.
    pub fn newest_first(&self) -> NewestFirst {
        NewestFirst::below(self.next_run)
    }

    /// A cursor over the runs numbered below `below`, newest first: where
    /// an earlier cursor's last batch ended, so a listing pages without
    /// walking what it already returned.
    pub fn newest_first_below(&self, below: RunId) -> NewestFirst {
        NewestFirst::below(below.min(self.next_run))
    }

    /// How many runs are loaded.
    pub fn loaded_len(&self) -> usize {
        self.loaded.len()
    }

    /// How many runs are parked (suspended or finished).
    pub fn parked_len(&self) -> usize {
        self.parked_count
    }

    /// Timers in the wheels or due and not fired yet (far timers waiting in
    /// table entries are not counted).
    pub fn timers_len(&self) -> usize {
        self.wheel.len() + self.backlog.len() + self.near.len() + self.near_backlog.len()
    }

    /// Heap bytes of the run table, its indexes, the retention queue and the
    /// near wheel's items: what the parked population costs.
    pub fn table_bytes(&self) -> usize {
        let item = std::mem::size_of::<(u64, RunId)>();
        self.runs.heap_bytes()
            + self.retention.capacity() * item
            + self.near.len() * item
            + self.far.capacity() * std::mem::size_of::<u64>()
    }

    /// The name of workflow type `wtype`, shared by every loaded run of the
    /// type rather than copied into each (a loaded run's bytes, issue 37).
    fn type_name(&mut self, wtype: &str) -> Name {
        if let Some(name) = self.wtypes.get(wtype) {
            return name.clone();
        }
        let name = Name::from(wtype);
        if self.wtypes.len() < WTYPES_SHARED_MAX {
            self.wtypes.insert(name.clone());
        }
        name
    }

    /// Whether the loaded run `run` already accepted a signal with dedup key
    /// `dedup` (0 = no key: never seen).
    pub fn seen_signal(&self, run: RunId, dedup: u64) -> bool {
        self.loaded.get(&run).is_some_and(|l| l.seen_signal(dedup))
    }

    /// Queues an output that may leave once LSN `lsn` (the most recent
    /// append) is durable.
    pub fn add_output(&mut self, lsn: Lsn, output: Output) {
        debug_assert!(
            self.outputs.back().is_none_or(|(last, _)| *last <= lsn),
            "outputs are queued in LSN order"
        );
        self.outputs.push_back((lsn, output));
    }

    /// Appends to `out`, in order, every output whose record is durable
    /// through `durable`.
    pub fn release(&mut self, durable: Lsn, out: &mut Vec<Output>) {
        while self.outputs.front().is_some_and(|(lsn, _)| *lsn <= durable) {
            if let Some((_, o)) = self.outputs.pop_front() {
                out.push(o);
            }
        }
        // Recovery queues an output for every run it saw finish (a queue of
        // megabytes after a busy log): once they are out, the room goes back.
        if self.outputs.is_empty() && self.outputs.capacity() > OUTPUTS_KEPT_MAX {
            self.outputs.shrink_to(OUTPUTS_KEPT_MAX);
        }
    }

    /// Outputs not released yet.
    pub fn pending_outputs(&self) -> usize {
        self.outputs.len()
    }

    /// Outputs not released yet (their records are not durable yet), oldest
    /// first.
    pub fn unreleased(&self) -> impl Iterator<Item = &Output> {
        self.outputs.iter().map(|(_, o)| o)
    }

    /// The next event for the host.
    pub fn take_event(&mut self) -> Option<Event> {
        let ev = self.events.pop_front()?;
        if let Event::Timer { run, .. } | Event::SignalReady { run, .. } = &ev
            && let Some(l) = self.loaded.get_mut(run)
        {
            l.queued = l.queued.saturating_sub(1);
        }
        Some(ev)
    }

    /// The next event, without taking it.
    pub fn peek_event(&self) -> Option<&Event> {
        self.events.front()
    }

    /// Whether an event waits for the host.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Bytes of loaded runs' in-memory journals.
    pub fn journal_bytes(&self) -> usize {
        self.journal_bytes
    }

    /// Keeps the parked count and the entry's time bucket true after the
    /// entry at `slot` changed (`was_parked`: before the change).
    fn noted(&mut self, slot: Slot, was_parked: bool) {
        let e = self.runs.get(slot);
        let parked = e.is_parked();
        self.parked_count = self.parked_count + usize::from(parked) - usize::from(was_parked);
        if let Some(t) = Self::waits_far(e) {
            let bucket = (slot >> BUCKET_BITS) as usize;
            if self.far.len() <= bucket {
                self.far.resize(bucket + 1, u64::MAX);
            }
            self.far[bucket] = self.far[bucket].min(t);
            self.far_min = self.far_min.min(t);
        }
    }

    /// Changes the entry at `slot` through `f`, keeping the parked count and
    /// time buckets true.
    fn edit(&mut self, slot: Slot, f: impl FnOnce(&mut Entry)) {
        let was_parked = self.runs.get(slot).is_parked();
        f(self.runs.get_mut(slot));
        self.noted(slot, was_parked);
    }

    fn table_insert(&mut self, e: Entry) -> Slot {
        let slot = self.runs.insert(e);
        self.noted(slot, false);
        slot
    }

    fn table_remove(&mut self, slot: Slot) {
        let e = self.runs.remove(slot);
        self.parked_count -= usize::from(e.is_parked());
        self.note_deleted(e.run());
    }

    /// Makes `run` a loaded run's entry, keeping its slot if it has one, and
    /// lets it hold its ID unless a later run of the ID does.
    fn note_loaded(&mut self, run: RunId, id_hash: u64) {
        let slot = match self.runs.find_run(run) {
            Some(slot) => {
                self.edit(slot, |e| {
                    e.set_state(table::LOADED);
                    e.set_time(0);
                    e.set(flag::NEAR | flag::PENDING, false);
                });
                slot
            }
            None => self.table_insert(Entry::new(run, id_hash, table::LOADED)),
        };
        self.runs.index_id(slot);
    }
}
