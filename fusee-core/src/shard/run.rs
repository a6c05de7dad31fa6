//! A run held in memory, and the pool its containers are recycled through.

use std::collections::VecDeque;

use rustc_hash::{FxHashMap, FxHashSet};

use super::types::{BlobRef, TimerKind, UpdateSlot};
use crate::record::{
    CancelGrace, Lsn, Name, Origin, ParentRef, Payload, Record, Seq, StartMeta, Status, Walked,
    iter_canonical_passing, kind,
};

/// A buffered signal: delivered to the run, not yet consumed by a wait.
#[derive(Clone, Debug)]
pub(super) struct SignalSlot {
    pub(super) ordinal: u64,
    pub(super) name: Name,
    pub(super) payload: Payload,
    /// The wait it is offered to, if any: a signal is offered to one wait
    /// at a time.
    pub(super) offered: Option<Seq>,
}

/// A pending wait for a signal.
#[derive(Clone, Debug)]
pub(super) struct WaitSlot {
    pub(super) seq: Seq,
    pub(super) name: Name,
    /// The ordinal of the signal offered to it, if any.
    pub(super) offered: Option<u64>,
}

/// A child the parent close policy must act on: not known to have finished.
#[derive(Clone, Debug)]
pub(super) struct Kid {
    pub(super) seq: Seq,
    pub(super) id: Name,
    pub(super) wtype: Name,
    pub(super) flags: u8,
}

/// A run held in memory: its identity, its journal since its stored prefix,
/// and everything its records left pending (timers, waits, signals,
/// children, updates, completion tokens).
#[derive(Clone, Debug)]
pub struct LoadedRun {
    /// The workflow ID.
    pub id: Name,
    /// The workflow type.
    pub wtype: Name,
    /// The workflow code version.
    pub version: u32,
    /// How its payloads are encoded.
    pub codec: u8,
    /// The run that started it as a child, out of line: few runs are
    /// children, and a loaded sleeper pays 8 bytes for it, not 32.
    pub(super) parent: Option<Box<ParentRef>>,
    /// When it started.
    pub started_ms: u64,
    /// Its deadline; 0 = none.
    pub deadline_ms: u64,
    /// The LSN of its latest record.
    pub last_lsn: Lsn,
    /// How and when it finished.
    pub done: Option<(Status, u64)>,
    /// The newest frame of its journal prefix in the run store, if any.
    pub blob: Option<BlobRef>,
    /// Bytes of `blob` and of the frames it extends.
    pub blob_chain: u64,
    /// How many frames `blob` extends.
    pub blob_depth: u8,
    /// Bytes of canonical records the stored prefix holds: the run's whole
    /// journal is those, then `journal` (a reader that has the first
    /// bytes needs only the rest from memory).
    pub blob_journal: u64,
    /// Canonical records after `blob`.
    pub journal: Vec<u8>,
    /// How many records `journal` holds.
    pub journal_records: u32,
    /// The start policy (see [`crate::record::policy`]).
    pub policy: u8,
    /// Search attribute objects in the order they were set, out of line
    /// (most runs set none).
    // A box for 8 bytes inline, not a `Vec`'s 24: most runs have none.
    #[allow(clippy::box_collection)]
    pub(super) attrs: Option<Box<Vec<Payload>>>,
    /// Its `Start`'s rarely used fields (the trace context the host
    /// recorded there, say), as recorded.
    pub meta: Option<Box<StartMeta<Payload>>>,
    /// The journal holds stream records, which a finished run's summary
    /// keeps.
    pub streams: bool,
    pub(super) signal_count: u64,
    /// Oldest first: waits take signals in arrival order, so a long buffer
    /// drains from the front. Out of line, made by the first signal and
    /// dropped when a wait takes the last: most runs hold none.
    // A box for 8 bytes inline, not a `VecDeque`'s 32.
    #[allow(clippy::box_collection)]
    pub(super) signals: Option<Box<VecDeque<SignalSlot>>>,
    pub(super) waits: Vec<WaitSlot>,
    pub(super) armed: Vec<(Seq, TimerKind, u64)>,
    /// What few runs use, out of line; `None` until a record needs it.
    pub(super) rare: Option<Box<Rare>>,
    /// Timer and signal events queued for the host and not taken yet.
    pub(super) queued: u32,
}

/// A loaded run's state that most runs never touch: where a reset or
/// continue-as-new came from, updates, completion tokens, children, signal
/// dedup keys. Kept behind one pointer so a loaded sleeper pays 8 bytes
/// for it, not the ~200 of its empty containers (issue 37's 1 KB a run).
#[derive(Clone, Debug, Default)]
pub(super) struct Rare {
    /// The run it replaced.
    pub(super) from: Option<Origin>,
    /// Records still to come that are copies from the replaced run's journal
    /// (a reset): their messages were sent once already.
    pub(super) copies_left: u32,
    /// Accepted updates by ordinal.
    pub(super) updates: Vec<UpdateSlot>,
    pub(super) update_ids: FxHashMap<Name, u64>,
    /// Async completions whose token is out: operation → attempt.
    pub(super) awaiting: FxHashMap<Seq, u32>,
    pub(super) dedup: FxHashSet<u64>,
    /// Operations waiting for an attached child's result.
    pub(super) children: Vec<Seq>,
    pub(super) kids: Vec<Kid>,
    /// Its result while its `Done` is not in `journal` (the run was rebuilt
    /// from its frame, or spilled): otherwise [`LoadedRun::result`] reads
    /// it there, and a finished run does not hold its payload twice.
    pub(super) result: Option<Payload>,
    /// The grace its latest `Cancel` carried, if any, with that cancel's
    /// reason (not one copied by a reset: the old run's deadline is not the
    /// new run's).
    pub(super) grace: Option<(CancelGrace, Payload)>,
    /// Its stored prefix's frames name `Stream` frames holding chunks set
    /// apart (`LoadedRun::blob_apart`).
    pub(super) blob_apart: bool,
}

/// Journals shorter than this are kept snug (a quarter over their length)
/// while their run waits; longer ones double, as a `Vec` does.
const JOURNAL_SNUG_MAX: usize = 4096;

/// A live run's first room for its journal: a `Start` and about ten
/// steps' records (a step's `Began` and result take about 45 bytes with a
/// short name), so a short busy run never grows it.
const JOURNAL_BUSY_FIRST: usize = 512;

/// Makes room for `more` bytes in a run's journal. Appended live (`busy`),
/// a journal doubles as a `Vec` does, so a busy run's appends stay
/// amortized O(1): growing by a quarter each time reallocated every second
/// record of a run of steps, about 5% of a no-op step's CPU. Rebuilt at
/// recovery, a short journal grows to a quarter over what it needs: most
/// of those runs wait, thousands at once, and doubling left about a third
/// of their memory unused. [`snug_journal`] trims a live run's journal to
/// the same once it waits.
pub(super) fn reserve_journal(journal: &mut Vec<u8>, more: usize, busy: bool) {
    let len = journal.len();
    if journal.capacity() - len >= more {
        return;
    }
    if busy && journal.capacity() == 0 {
        // A run's first records: room for a few steps' worth at once.
        journal.reserve_exact(more.max(JOURNAL_BUSY_FIRST));
    } else if len < JOURNAL_SNUG_MAX && !busy {
        let want = len + more;
        journal.reserve_exact(want + want / 4 - len);
    } else {
        journal.reserve(more);
    }
}

/// Trims a short journal to a quarter over its length, for a run that now
/// waits on the outside (a timer, a signal, a child): what a journal
/// rebuilt at recovery would hold.
pub(super) fn snug_journal(journal: &mut Vec<u8>) {
    let len = journal.len();
    let snug = len + len / 4;
    if len < JOURNAL_SNUG_MAX && journal.capacity() > snug {
        journal.shrink_to(snug);
    }
}

/// Pushes onto a list that is usually empty or holds one item: the first
/// push allocates room for exactly one (`Vec`'s first growth makes room
/// for four, 3x the memory of a loaded sleeper's one wait or timer).
pub(super) fn push_small<T>(list: &mut Vec<T>, item: T) {
    if list.capacity() == 0 {
        list.reserve_exact(1);
    }
    list.push(item);
}

impl LoadedRun {
    /// Whether its `Done` was applied.
    pub fn is_done(&self) -> bool {
        self.done.is_some()
    }

    /// Whether a fired timer or an offered signal for the run is still
    /// queued for the host. Such a run is about to continue: parking it now
    /// would lose the fired timer, which only its event carries.
    pub fn has_queued_events(&self) -> bool {
        self.queued > 0
    }

    /// Its armed timers: (operation, kind, due time).
    pub fn armed_timers(&self) -> impl Iterator<Item = (Seq, TimerKind, u64)> + '_ {
        self.armed.iter().copied()
    }

    /// Whether the run waits on something the shard announces when it
    /// happens (a timer other than its deadline, a signal, a child's
    /// result, a completion): its code, not running after a recovery, need
    /// not run before that. A run waiting on nothing was cut mid-way and
    /// its code should run first.
    pub fn waits_on_shard(&self) -> bool {
        self.armed
            .iter()
            .any(|&(_, kind, _)| kind != TimerKind::Deadline)
            || !self.waits.is_empty()
            || !self.pending_children().is_empty()
            || self.awaiting().next().is_some()
    }

    /// Its pending waits: (operation, signal name).
    pub fn waiting_on(&self) -> impl Iterator<Item = (Seq, &str)> + '_ {
        self.waits.iter().map(|w| (w.seq, &*w.name))
    }

    /// Operations waiting for an attached child's result.
    pub fn pending_children(&self) -> &[Seq] {
        self.rare.as_ref().map_or(&[], |r| &r.children)
    }

    /// The run it replaced, if it is not a fresh start.
    pub fn from(&self) -> Option<Origin> {
        self.rare.as_ref().and_then(|r| r.from)
    }

    /// Accepted updates by ordinal.
    pub fn updates(&self) -> &[UpdateSlot] {
        self.rare.as_ref().map_or(&[], |r| &r.updates)
    }

    /// Async completions whose token is out: (operation, attempt).
    pub fn awaiting(&self) -> impl Iterator<Item = (Seq, u32)> + '_ {
        self.rare
            .iter()
            .flat_map(|r| r.awaiting.iter().map(|(s, a)| (*s, *a)))
    }

    /// Whether the run accepted a signal with dedup key `dedup` (never for
    /// 0, no key).
    pub fn seen_signal(&self, dedup: u64) -> bool {
        dedup != 0 && self.rare.as_ref().is_some_and(|r| r.dedup.contains(&dedup))
    }

    /// The grace of its latest cancel that carried one
    /// ([`Record::Cancel`](crate::record::Record::Cancel)'s `grace`), with
    /// that cancel's reason. Journals of older builds hold theirs in
    /// [`LoadedRun::attrs`] instead (the host reads both).
    pub fn cancel_grace(&self) -> Option<(CancelGrace, &Payload)> {
        self.rare
            .as_ref()
            .and_then(|r| r.grace.as_ref())
            .map(|(g, reason)| (*g, reason))
    }

    /// Its rarely used state, made on first use.
    /// Whether its stored prefix's frames name `Stream` frames holding
    /// chunks set apart (compaction writes the newest again when those
    /// move). Out of line: few runs stream that much.
    pub fn blob_apart(&self) -> bool {
        self.rare.as_ref().is_some_and(|r| r.blob_apart)
    }

    pub(super) fn set_blob_apart(&mut self, apart: bool) {
        if apart || self.rare.is_some() {
            self.rare_mut().blob_apart = apart;
        }
    }

    pub(super) fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// How many delivered signals no wait has consumed.
    pub fn buffered_signals(&self) -> usize {
        self.signals.as_ref().map_or(0, |q| q.len())
    }

    /// The signal buffer, made on first use with room for one (usually the
    /// one signal a wait takes next, see [`push_small`]).
    pub(super) fn signal_buffer(&mut self) -> &mut VecDeque<SignalSlot> {
        self.signals
            .get_or_insert_with(|| Box::new(VecDeque::with_capacity(1)))
    }

    /// The run that started it as a child, if any.
    pub fn parent(&self) -> Option<ParentRef> {
        self.parent.as_deref().copied()
    }

    /// Its search attribute objects in the order they were set.
    pub fn attrs(&self) -> &[Payload] {
        self.attrs.as_deref().map_or(&[], |a| a.as_slice())
    }

    /// Its result, once finished (empty for a handover): the payload of the
    /// `Done` in its journal, or the copy held when the journal does not
    /// have it. `None` while it runs, or if the journal's bytes do not
    /// decode (they were checked when they were appended).
    pub fn result(&self) -> Option<&[u8]> {
        let (status, _) = self.done?;
        if status.is_handover() {
            // Its `Done` carries the next run's `Start`, not a result.
            return Some(&[]);
        }
        if let Some(held) = self.rare.as_ref().and_then(|r| r.result.as_deref()) {
            return Some(held);
        }
        // The first `Done` is the one applied (a later one changes
        // nothing); a walk of a journal in memory, once per caller.
        // Stream chunks framed, not decoded.
        iter_canonical_passing(&self.journal, kind::CHUNK)
            .map_while(Result::ok)
            .find_map(|item| match item {
                Walked::Record(Record::Done { payload, .. }, _) => Some(payload),
                _ => None,
            })
    }

    /// The accepted update with this ID: its ordinal and slot.
    pub fn update(&self, id: &str) -> Option<(u64, &UpdateSlot)> {
        let rare = self.rare.as_ref()?;
        let ordinal = *rare.update_ids.get(id)?;
        let slot = rare.updates.get(usize::try_from(ordinal).ok()?)?;
        Some((ordinal, slot))
    }

    /// A run with nothing in it, for an empty pool.
    pub(super) fn empty() -> Self {
        let blank = Name::from("");
        Self {
            id: blank.clone(),
            wtype: blank,
            version: 0,
            codec: 0,
            parent: None,
            started_ms: 0,
            deadline_ms: 0,
            last_lsn: 0,
            done: None,
            blob: None,
            blob_chain: 0,
            blob_journal: 0,
            blob_depth: 0,
            journal: Vec::new(),
            journal_records: 0,
            policy: 0,
            attrs: None,
            meta: None,
            streams: false,
            signal_count: 0,
            signals: None,
            waits: Vec::new(),
            armed: Vec::new(),
            rare: None,
            queued: 0,
        }
    }

    /// Empties a run that left memory so its box and containers serve the
    /// next run loaded or started (a mass wake loads and parks runs in turn
    /// without allocating their journals and lists each time). Refuses (false)
    /// when a container grew large: clearing keeps capacity, and a large one
    /// is better given back. Names stay until the next run overwrites them.
    pub(super) fn empty_for_reuse(&mut self) -> bool {
        const ITEMS_MAX: usize = 64;
        const JOURNAL_BYTES_MAX: usize = 4096;
        let large = self.journal.capacity() > JOURNAL_BYTES_MAX
            || [
                self.signals.as_ref().map_or(0, |q| q.capacity()),
                self.waits.capacity(),
                self.armed.capacity(),
                self.attrs.as_ref().map_or(0, |a| a.capacity()),
            ]
            .into_iter()
            .any(|c| c > ITEMS_MAX);
        if large {
            return false;
        }
        self.journal.clear();
        if let Some(q) = self.signals.as_mut() {
            q.clear();
        }
        self.waits.clear();
        self.armed.clear();
        // Few runs have one: the next run makes its own if it needs one.
        self.rare = None;
        self.attrs = None;
        self.parent = None;
        self.meta = None;
        true
    }

    /// Ends the run's pending work when it finishes: nothing it waited for
    /// matters any more. Returns the children the parent close policy acts on.
    /// `held` is the result when its `Done` is not appended to `journal`.
    pub(super) fn finish(&mut self, status: Status, at_ms: u64, held: Option<Payload>) -> Vec<Kid> {
        self.done = Some((status, at_ms));
        if let Some(result) = held {
            self.rare_mut().result = Some(result);
        }
        self.armed.clear();
        self.waits.clear();
        let Some(rare) = self.rare.as_mut() else {
            return Vec::new();
        };
        rare.children.clear();
        rare.awaiting.clear();
        std::mem::take(&mut rare.kids)
    }
}
