//! A run held in memory, and the pool its containers are recycled through.

use std::collections::VecDeque;

use rustc_hash::{FxHashMap, FxHashSet};

use super::types::{BlobRef, TimerKind, UpdateSlot};
use crate::record::{Lsn, Name, Origin, ParentRef, Payload, Seq, StartMeta, Status};

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
    /// The run that started it as a child.
    pub parent: Option<ParentRef>,
    /// When it started.
    pub started_ms: u64,
    /// Its deadline; 0 = none.
    pub deadline_ms: u64,
    /// The LSN of its latest record.
    pub last_lsn: Lsn,
    /// How and when it finished.
    pub done: Option<(Status, u64)>,
    /// Its result, once finished (empty for a handover).
    pub result: Option<Payload>,
    /// The newest frame of its journal prefix in the run store, if any.
    pub blob: Option<BlobRef>,
    /// Bytes of `blob` and of the frames it extends.
    pub blob_chain: u64,
    /// How many frames `blob` extends.
    pub blob_depth: u8,
    /// Canonical records after `blob`.
    pub journal: Vec<u8>,
    /// How many records `journal` holds.
    pub journal_records: u32,
    /// The start policy (see [`crate::record::policy`]).
    pub policy: u8,
    /// The run it replaced.
    pub from: Option<Origin>,
    /// Accepted updates by ordinal.
    pub updates: Vec<UpdateSlot>,
    /// Async completions whose token is out: operation → attempt.
    pub awaiting: FxHashMap<Seq, u32>,
    /// Search attribute objects in the order they were set.
    pub attrs: Vec<Payload>,
    /// Its `Start`'s rarely used fields (the trace context the host
    /// recorded there, say), as recorded.
    pub meta: Option<Box<StartMeta<Payload>>>,
    /// The journal holds stream records, which a finished run's summary
    /// keeps.
    pub streams: bool,
    pub(super) signal_count: u64,
    /// Oldest first: waits take signals in arrival order, so a long buffer
    /// drains from the front.
    pub(super) signals: VecDeque<SignalSlot>,
    pub(super) waits: Vec<WaitSlot>,
    pub(super) armed: Vec<(Seq, TimerKind, u64)>,
    pub(super) dedup: FxHashSet<u64>,
    pub(super) children: Vec<Seq>,
    /// Records still to come that are copies from the replaced run's journal
    /// (a reset): their messages were sent once already.
    pub(super) copies_left: u32,
    pub(super) update_ids: FxHashMap<Name, u64>,
    pub(super) kids: Vec<Kid>,
    /// Timer and signal events queued for the host and not taken yet.
    pub(super) queued: u32,
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

    /// Its pending waits: (operation, signal name).
    pub fn waiting_on(&self) -> impl Iterator<Item = (Seq, &str)> + '_ {
        self.waits.iter().map(|w| (w.seq, &*w.name))
    }

    /// Operations waiting for an attached child's result.
    pub fn pending_children(&self) -> &[Seq] {
        &self.children
    }

    /// How many delivered signals no wait has consumed.
    pub fn buffered_signals(&self) -> usize {
        self.signals.len()
    }

    /// The accepted update with this ID: its ordinal and slot.
    pub fn update(&self, id: &str) -> Option<(u64, &UpdateSlot)> {
        let ordinal = *self.update_ids.get(id)?;
        let slot = self.updates.get(usize::try_from(ordinal).ok()?)?;
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
            result: None,
            blob: None,
            blob_chain: 0,
            blob_depth: 0,
            journal: Vec::new(),
            journal_records: 0,
            policy: 0,
            from: None,
            updates: Vec::new(),
            awaiting: FxHashMap::default(),
            attrs: Vec::new(),
            meta: None,
            streams: false,
            signal_count: 0,
            signals: VecDeque::new(),
            waits: Vec::new(),
            armed: Vec::new(),
            dedup: FxHashSet::default(),
            children: Vec::new(),
            copies_left: 0,
            update_ids: FxHashMap::default(),
            kids: Vec::new(),
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
                self.signals.capacity(),
                self.waits.capacity(),
                self.armed.capacity(),
                self.dedup.capacity(),
                self.children.capacity(),
                self.updates.capacity(),
                self.update_ids.capacity(),
                self.awaiting.capacity(),
                self.kids.capacity(),
                self.attrs.capacity(),
            ]
            .into_iter()
            .any(|c| c > ITEMS_MAX);
        if large {
            return false;
        }
        self.result = None;
        self.journal.clear();
        self.signals.clear();
        self.waits.clear();
        self.armed.clear();
        self.dedup.clear();
        self.children.clear();
        self.updates.clear();
        self.update_ids.clear();
        self.awaiting.clear();
        self.kids.clear();
        self.attrs.clear();
        self.meta = None;
        true
    }

    /// Ends the run's pending work when it finishes: nothing it waited for
    /// matters any more. Returns the children the parent close policy acts on.
    pub(super) fn finish(&mut self, status: Status, at_ms: u64, result: Payload) -> Vec<Kid> {
        self.done = Some((status, at_ms));
        self.result = Some(result);
        self.armed.clear();
        self.waits.clear();
        self.children.clear();
        self.awaiting.clear();
        std::mem::take(&mut self.kids)
    }
}
