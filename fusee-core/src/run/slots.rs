//! The machine's internal bookkeeping: where kept bytes are ([`Span`]), one
//! operation's state ([`Slot`]), a delivery waiting for the code
//! ([`Pending`]), and what the host was asked to append ([`Asked`]).
//!
//! Nothing here is public: these are the rows the journal module writes and
//! the operation and delivery modules read.

use crate::record::{Seq, Status, WaitOutcome};

/// A run of bytes the machine keeps (a name, a payload) in its byte store:
/// offsets are `u32`, so the store holds at most 4 GiB at a time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) off: u32,
    pub(super) len: u32,
}

impl Span {
    /// The bytes of this span in `store`: empty if the span does not fit
    /// (it always does: spans are made by [`keep`] over the same store).
    pub(super) fn of(self, store: &[u8]) -> &[u8] {
        let start = self.off as usize;
        store
            .get(start..start.saturating_add(self.len as usize))
            .unwrap_or_default()
    }

    /// Copies this span's bytes from `old` to the end of `new` and returns
    /// where they are now (compaction).
    pub(super) fn moved(self, old: &[u8], new: &mut Vec<u8>) -> Span {
        let off = new.len() as u32;
        new.extend_from_slice(self.of(old));
        Span { off, len: self.len }
    }
}

/// Appends `bytes` to `store`: `None` if the store would pass 4 GiB.
pub(super) fn keep(store: &mut Vec<u8>, bytes: &[u8]) -> Option<Span> {
    let off = u32::try_from(store.len()).ok()?;
    let len = u32::try_from(bytes.len()).ok()?;
    off.checked_add(len)?;
    store.extend_from_slice(bytes);
    Some(Span { off, len })
}

/// What an operation is. Every kind but a step is a *command*: its record
/// is appended at the call, in call order. A step's first record is its
/// `Began`, asked at the call like a command's when the journal can show it
/// in call order, else appended when its attempt starts (journals written
/// before `Began` existed start a step with its first `Attempt` or its
/// result).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpKind {
    Step,
    Sleep,
    Wait,
    Child,
    Send,
    Value,
    Patch,
}

impl OpKind {
    /// Whether the call itself appends a record.
    pub(super) fn is_command(self) -> bool {
        self != OpKind::Step
    }

    /// Whether the operation resolves at its call (no delivery follows).
    pub(super) fn resolves_at_once(self) -> bool {
        matches!(self, OpKind::Send | OpKind::Value | OpKind::Patch)
    }

    /// The record that starts an operation of this kind, for messages.
    pub(super) fn command_name(self) -> &'static str {
        match self {
            OpKind::Step => "Began, Step or Attempt",
            OpKind::Sleep => "Timer",
            OpKind::Wait => "Wait",
            OpKind::Child => "Child",
            OpKind::Send => "Send",
            OpKind::Value => "Value",
            OpKind::Patch => "Patch",
        }
    }

    /// A lower-case name for messages.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            OpKind::Step => "step",
            OpKind::Sleep => "sleep",
            OpKind::Wait => "wait",
            OpKind::Child => "child",
            OpKind::Send => "send",
            OpKind::Value => "value",
            OpKind::Patch => "patch marker",
        }
    }
}

/// [`Slot::flags`]: the journal holds the operation's record (its command
/// record, or a step's `Began`, first attempt or result): the code must
/// match it.
pub(super) const RECORDED: u8 = 1;
/// The code called it.
pub(super) const ISSUED: u8 = 1 << 1;
/// Its completion is in the journal (a step's result, `Fired`, `Waited`,
/// `ChildDone`): no other completion may follow.
pub(super) const ENDED: u8 = 1 << 2;
/// The journal holds a `Waited { Abandoned }` for this wait.
pub(super) const ABANDONED: u8 = 1 << 3;
/// Issued live: its command record (a step's first `Began`) is asked for
/// and not appended yet, so no completion may come before it.
pub(super) const UNAPPENDED: u8 = 1 << 4;
/// The code dropped this wait and the host was asked to record it.
pub(super) const ABANDON_ASKED: u8 = 1 << 5;
/// A paused step's `Resume` is in the journal.
pub(super) const RESUMED: u8 = 1 << 6;

/// One operation the machine still needs to know about: recorded and not
/// yet called by the code, or called and not yet over (its delivery not
/// handed out). Keyed by sequence number.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot {
    /// The recorded name: a step's, timer's or wait's name, a child's
    /// workflow type, a send's signal name, a patch ID, a value's bytes.
    pub(super) name: Span,
    /// A child's ID or a send's target.
    pub(super) extra: Span,
    /// A step's latest `Attempt`: when the next runs ([`PAUSED`](crate::record::PAUSED): after a `Resume`).
    pub(super) retry_at_ms: u64,
    /// A step's latest failed attempt (0: none recorded).
    pub(super) attempt: u32,
    /// How many `UpdateDone` records came before its command record: the
    /// code must have returned that many handlers before calling it.
    pub(super) dones_before: u32,
    pub(super) kind: OpKind,
    /// [`RECORDED`], [`ISSUED`], …
    pub(super) flags: u8,
    /// A value's kind (see [`value_kind`](crate::record::value_kind)).
    pub(super) value_kind: u8,
}

impl Slot {
    pub(super) fn new(kind: OpKind, flags: u8) -> Self {
        Self {
            name: Span::default(),
            extra: Span::default(),
            retry_at_ms: 0,
            attempt: 0,
            dones_before: 0,
            kind,
            flags,
            value_kind: 0,
        }
    }

    pub(super) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A completion that wakes the code, with its bytes in the store.
#[derive(Clone, Copy, Debug)]
pub(super) enum Due {
    Step {
        seq: Seq,
        attempt: u32,
        status: Status,
        payload: Span,
    },
    Fired {
        seq: Seq,
    },
    Waited {
        seq: Seq,
        outcome: WaitOutcome,
        payload: Span,
    },
    Child {
        seq: Seq,
        status: Status,
        payload: Span,
    },
    Cancel {
        reason: Span,
    },
    Update {
        ordinal: u64,
        id: Span,
        name: Span,
        payload: Span,
    },
}

impl Due {
    /// The operation it completes (`None`: a cancel or an update).
    pub(super) fn seq(&self) -> Option<Seq> {
        match *self {
            Due::Step { seq, .. }
            | Due::Fired { seq }
            | Due::Waited { seq, .. }
            | Due::Child { seq, .. } => Some(seq),
            Due::Cancel { .. } | Due::Update { .. } => None,
        }
    }

    /// Every span it holds, for compaction.
    pub(super) fn spans_mut(&mut self) -> impl Iterator<Item = &mut Span> {
        let (a, b, c) = match self {
            Due::Step { payload, .. }
            | Due::Waited { payload, .. }
            | Due::Child { payload, .. } => (Some(payload), None, None),
            Due::Cancel { reason } => (Some(reason), None, None),
            Due::Update {
                id, name, payload, ..
            } => (Some(id), Some(name), Some(payload)),
            Due::Fired { .. } => (None, None, None),
        };
        a.into_iter().chain(b).chain(c)
    }
}

/// A delivery in journal order, with what the code must have done before
/// it may be handed out.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pending {
    pub(super) due: Due,
    /// The largest sequence number any record up to this one names: the
    /// code must have called every operation up to it first (each was
    /// called before its first record was appended, hence before this
    /// delivery was).
    pub(super) need: Seq,
    /// How many `UpdateDone` records came before it: the code must have
    /// returned that many handlers first.
    pub(super) dones_before: u32,
}

/// A signal delivered to the run and not consumed by a wait yet.
#[derive(Clone, Copy, Debug)]
pub(super) struct Buffered {
    pub(super) ordinal: u64,
    pub(super) payload: Span,
}

/// A recorded `UpdateDone` the code has not matched yet.
#[derive(Clone, Copy, Debug)]
pub(super) struct RecordedDone {
    pub(super) ordinal: u64,
    /// As [`Pending::need`].
    pub(super) need: Seq,
}

/// A record the host was asked to append and has not reported yet. The
/// host appends them in the order asked, so the journal keeps call order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Asked {
    Command { seq: Seq, kind: OpKind },
    UpdateDone { ordinal: u64 },
    Abandon { seq: Seq },
    Done,
}

/// [`RunMachine::updates`](super::RunMachine) flags: its handler was
/// started (the update was handed out).
pub(super) const UPDATE_DELIVERED: u8 = 1;
/// The code returned its handler.
pub(super) const UPDATE_RETURNED: u8 = 1 << 1;
/// The journal holds its `UpdateDone`.
pub(super) const UPDATE_RECORDED: u8 = 1 << 2;
