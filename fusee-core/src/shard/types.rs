//! The values that cross the shard's boundary: what the host is told
//! ([`Event`]), what may leave the process ([`Output`]), and the small
//! descriptions of runs and timers it hands out.

use crate::record::{Lsn, Name, ParentRef, Payload, RunId, Seq, Status};
use crate::table::Entry;

/// Location of a frame in the run store. `offset` is a backend-defined
/// address of at most 48 bits (the run table keeps 48); `len` the frame's
/// exact length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct BlobRef {
    /// Where the frame starts.
    pub offset: u64,
    /// The frame's length in bytes.
    pub len: u32,
}

/// What an armed timer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TimerKind {
    /// A durable sleep (`Timer` record).
    Sleep = 0,
    /// A step's next attempt (`Attempt` record).
    Retry = 1,
    /// A wait's deadline (`Wait` record).
    WaitTimeout = 2,
    /// The workflow's deadline (`Start` record).
    Deadline = 3,
}

impl TimerKind {
    /// The kind with this tag, `None` for an unknown tag.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Sleep),
            1 => Some(Self::Retry),
            2 => Some(Self::WaitTimeout),
            3 => Some(Self::Deadline),
            _ => None,
        }
    }
}

/// One armed timer: the run, the operation that armed it (0 for the
/// workflow deadline) and what it is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerKey {
    /// The run.
    pub run: RunId,
    /// The operation.
    pub seq: Seq,
    /// What it is for.
    pub kind: TimerKind,
}

/// Something the host must act on. Events are emitted only in a mode with
/// `events` on ([`Mode::LIVE`]) and by timers; the host takes them with
/// [`ShardCore::take_event`](super::ShardCore::take_event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A run was created and its code must be started.
    Started {
        /// The new run.
        run: RunId,
    },
    /// A timer is due: a sleep fired, a retry is due, a wait timed out or
    /// the workflow's deadline passed (`seq` 0).
    Timer {
        /// The run.
        run: RunId,
        /// The operation that armed it.
        seq: Seq,
        /// What it is for.
        kind: TimerKind,
        /// When it was due (ms): how late it fires is the host's time
        /// less this.
        due_ms: u64,
    },
    /// A buffered signal is offered to a pending wait.
    SignalReady {
        /// The run.
        run: RunId,
        /// The wait's operation.
        seq: Seq,
        /// The signal's ordinal within the run.
        ordinal: u64,
        /// The signal's payload.
        payload: Payload,
    },
    /// A run's `Done` record was applied.
    Finished {
        /// The run.
        run: RunId,
    },
    /// A parked run has a due timer: load it (then
    /// [`unpark`](super::ShardCore::unpark)) so the timer can fire. Asked
    /// once per park.
    NeedLoad {
        /// The parked run.
        run: RunId,
    },
}

/// Something that may leave the process once the record that produced it is
/// durable. Outputs are queued with the LSN of that record and handed out by
/// [`ShardCore::release`](super::ShardCore::release) in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Acknowledge a client request (start, signal, cancel).
    Ack(u64),
    /// Refuse a client request once the state the refusal rests on is
    /// durable (a crash could still take back, say, a `Done` just appended).
    Reject(u64),
    /// A run finished: its result for callers.
    Result {
        /// The run.
        run: RunId,
        /// How it ended.
        status: Status,
        /// Its result (empty for a handover).
        payload: Payload,
    },
    /// Start (or attach to) a child workflow.
    ChildStart {
        /// The parent operation waiting for the child.
        parent: ParentRef,
        /// The child's workflow type.
        wtype: Name,
        /// The child's workflow ID.
        id: Name,
        /// The child's start policy.
        flags: u8,
        /// The child's deadline; 0 = none.
        deadline_ms: u64,
        /// The child's input.
        input: Payload,
    },
    /// A child's result for its parent.
    ChildResult {
        /// The parent operation waiting for it.
        parent: ParentRef,
        /// How the child ended.
        status: Status,
        /// Its result.
        payload: Payload,
    },
    /// Deliver a signal to another workflow.
    Signal {
        /// The target workflow ID.
        target: Name,
        /// The signal's name.
        name: Name,
        /// Its payload.
        payload: Payload,
        /// Dedup key, stable across resends (see [`send_dedup`](super::send_dedup)).
        dedup: u64,
    },
    /// An update's handler returned: its result for callers.
    UpdateResult {
        /// The run.
        run: RunId,
        /// The update's ordinal.
        ordinal: u64,
        /// The update's ID.
        id: Name,
        /// How the handler ended.
        status: Status,
        /// Its result.
        payload: Payload,
    },
    /// Answer a client request with a value. Never produced by the core;
    /// the host queues it with [`add_output`](super::ShardCore::add_output).
    Reply {
        /// The request.
        token: u64,
        /// The answer's status.
        status: Status,
        /// The answer.
        payload: Payload,
    },
    /// Refuse a client request with a reason. Never produced by the core.
    Refuse {
        /// The request.
        token: u64,
        /// Why.
        message: Payload,
    },
    /// Close another workflow: a child under its parent close policy
    /// (`parent` names the closing parent), or a cancel sent by workflow
    /// code ([`CANCEL_SIGNAL`](super::CANCEL_SIGNAL)).
    Close {
        /// The workflow ID to close.
        target: Name,
        /// The child's workflow type (empty for a cancel by signal), so a
        /// child whose start has not arrived yet is recorded as closed.
        wtype: Name,
        /// The closing parent, for the parent close policy.
        parent: Option<ParentRef>,
        /// Terminate (true) or ask to cancel (false).
        terminate: bool,
        /// Why.
        reason: Payload,
        /// The close's key, stable across replays ([`send_dedup`] of the
        /// `Send` or of the parent's child operation): a close sent again
        /// after a crash carries the same key, so the target records it
        /// once.
        ///
        /// [`send_dedup`]: super::send_dedup
        dedup: u64,
    },
}

/// An accepted update of a loaded run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateSlot {
    /// The update's ID.
    pub id: Name,
    /// The handler's name.
    pub name: Name,
    /// The workflow operation waiting for the result, if a workflow called.
    pub caller: Option<ParentRef>,
    /// Set once its handler returned, with the LSN of its `UpdateDone`.
    pub result: Option<(Status, Payload, Lsn)>,
}

/// What a loaded run's stored prefix is
/// ([`ShardCore::set_blob`](super::ShardCore::set_blob)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoredPrefix {
    /// Bytes of its newest frame and of the frames it extends.
    pub chain: u64,
    /// How many frames the newest extends.
    pub depth: u8,
    /// Bytes of canonical records the prefix holds, its chunks set apart
    /// included (a reader that has these needs only the rest, from memory).
    pub journal_len: u64,
    /// Whether its frames name `Stream` frames holding chunks set apart.
    pub apart: bool,
}

/// A finished run [`ShardCore::expire_frames`](super::ShardCore::expire_frames)
/// removed, with the newest frame that held it, for the host to release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired {
    /// The run.
    pub run: RunId,
    /// A parked run's frame, or a loaded run's stored prefix; `None` for a
    /// loaded run that never reached the run store.
    pub frame: Option<BlobRef>,
    /// Whether `frame` may extend older frames or name `Stream` frames,
    /// which the host then reads its way to. False only for a parked frame
    /// whose table entry says it stands alone (`CHAINED` and `APART`
    /// clear: the flags compaction relies on), as a `Done` frame usually
    /// does: it is released without a read.
    pub linked: bool,
}

/// A parked run as its table entry describes it: where its frame is, and
/// whether it finished. Everything else (its last LSN included) is in the
/// frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParkedRun {
    offset: u64,
    len: u32,
    /// 0 for a suspended run, else 1 + the final status.
    done: u8,
}

impl ParkedRun {
    /// A parked run whose frame is `blob`, finished with `done` if `Some`.
    pub fn new(blob: BlobRef, done: Option<Status>) -> Self {
        Self {
            offset: blob.offset,
            len: blob.len,
            done: done.map_or(0, |s| 1 + s as u8),
        }
    }

    pub(super) fn of(e: &Entry) -> Self {
        Self::new(
            BlobRef {
                offset: e.offset(),
                len: e.len(),
            },
            e.done(),
        )
    }

    /// The run's frame in the run store.
    pub fn blob(&self) -> BlobRef {
        BlobRef {
            offset: self.offset,
            len: self.len,
        }
    }

    /// `Some` for a finished run (kept until its retention ends).
    pub fn done(&self) -> Option<Status> {
        let tag = self.done.checked_sub(1)?;
        Status::from_u8(tag).ok()
    }
}

/// What a lookup by workflow ID found: the latest run of that ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// A loaded run with exactly this ID.
    Loaded(RunId),
    /// A parked run whose ID hash matches: the host confirms the full ID
    /// from its frame when it matters.
    Parked(RunId),
}

/// What applying a record does besides changing state. The same record
/// applied in any mode leaves the same run state; modes differ only in the
/// journal bytes kept and what is emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mode {
    /// Append the record to the run's in-memory journal.
    pub journal: bool,
    /// Queue outputs.
    pub outputs: bool,
    /// Emit events.
    pub events: bool,
}

impl Mode {
    /// A record being appended now.
    pub const LIVE: Self = Self {
        journal: true,
        outputs: true,
        events: true,
    };
    /// Replaying the log after the checkpoint at recovery: outputs are
    /// regenerated (receivers are idempotent); the host restarts code itself.
    pub const RECOVER: Self = Self {
        journal: true,
        outputs: true,
        events: false,
    };
    /// Rebuilding a run from its stored frame: its records are already in
    /// the store, and what they sent was sent.
    pub const BLOB: Self = Self {
        journal: false,
        outputs: false,
        events: false,
    };
    /// Rebuilding a run from journal bytes kept in a checkpoint: they stay
    /// in memory, and what they sent was sent.
    pub const SUFFIX: Self = Self {
        journal: true,
        outputs: false,
        events: false,
    };
}
