//! What can go wrong between a run's journal and its code: a journal the
//! machine cannot take ([`JournalError`]), code that does something its
//! journal says it did not ([`DeterminismError`]), and a call the machine
//! cannot serve ([`OpError`]).
//!
//! Every error names the run; journal errors name the record (its place in
//! the journal given to the builder, or the LSN the host appended it at);
//! determinism errors name the operation (sequence number) and say, in
//! words a workflow author can act on, what the journal holds and what the
//! code did.

use std::fmt;

use thiserror::Error;

use crate::record::{Lsn, RunId, Seq, Status, value_kind};
use crate::shard::CANCEL_SIGNAL;
use crate::wire::DecodeError;

/// Where a record the machine refused is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    /// Record `index` (from 0) of the journal given to
    /// [`RunMachine::rebuild`](super::RunMachine::rebuild), starting at byte
    /// `offset`.
    Journal {
        /// The record's place in the journal, from 0.
        index: u32,
        /// Where its bytes start.
        offset: usize,
    },
    /// A record the host passed to
    /// [`RunMachine::handle_record`](super::RunMachine::handle_record).
    Appended {
        /// The LSN the host gave it.
        lsn: Lsn,
    },
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Journal { index, offset } => {
                write!(f, "journal record {index} (byte {offset})")
            }
            Position::Appended { lsn } => write!(f, "record appended at LSN {lsn}"),
        }
    }
}

/// A journal record the machine refuses: the journal is malformed, or the
/// host appended something the run's state does not allow. The machine
/// never panics on journal bytes; it returns this.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("run {run}, {at}: {problem}")]
pub struct JournalError {
    /// The run.
    pub run: RunId,
    /// The record.
    pub at: Position,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a record (see [`JournalError`]).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Problem {
    /// The bytes are not a canonical record.
    #[error("undecodable record ({0})")]
    Decode(DecodeError),
    /// The journal holds no record.
    #[error("the journal is empty; it must start with the run's Start")]
    Empty,
    /// The first record is not a `Start`.
    #[error("the journal starts with {kind}, not Start")]
    NotStart {
        /// The record's kind.
        kind: &'static str,
    },
    /// A `Start` after the first record.
    #[error("a second Start")]
    SecondStart,
    /// A record of another run.
    #[error("a {kind} record of run {found}")]
    OtherRun {
        /// The record's kind.
        kind: &'static str,
        /// The run it names.
        found: RunId,
    },
    /// A record naming operation 0 (operations count from 1).
    #[error("{kind} names operation 0; operations are numbered from 1")]
    SeqZero {
        /// The record's kind.
        kind: &'static str,
    },
    /// A command record whose operation is not after every operation named
    /// before it: the code records its calls in call order.
    #[error(
        "{kind} for operation {seq} comes after a record of operation {max}; commands are recorded in call order"
    )]
    OutOfOrder {
        /// The record's kind.
        kind: &'static str,
        /// Its operation.
        seq: Seq,
        /// The largest operation named before it.
        max: Seq,
    },
    /// A record about an operation of another kind.
    #[error("{kind} for operation {seq}, which is a {op}")]
    WrongKind {
        /// The record's kind.
        kind: &'static str,
        /// Its operation.
        seq: Seq,
        /// What the operation is.
        op: &'static str,
    },
    /// A completion whose operation no earlier record started.
    #[error("{kind} for operation {seq}, which no earlier {needs} record started")]
    NotStarted {
        /// The record's kind.
        kind: &'static str,
        /// Its operation.
        seq: Seq,
        /// The record that must come first.
        needs: &'static str,
    },
    /// A completion of an operation that already ended.
    #[error("{kind} for operation {seq}, which already ended")]
    Ended {
        /// The record's kind.
        kind: &'static str,
        /// Its operation.
        seq: Seq,
    },
    /// A step's attempts out of order.
    #[error("attempt {attempt} of step {seq} after attempt {last}")]
    AttemptOrder {
        /// The step.
        seq: Seq,
        /// The attempt recorded.
        attempt: u32,
        /// The latest failed attempt before it.
        last: u32,
    },
    /// A step's records disagree on its name.
    #[error("{kind} names step {seq} {found:?}, but earlier records name it {expected:?}")]
    Renamed {
        /// The record's kind.
        kind: &'static str,
        /// The step.
        seq: Seq,
        /// The name earlier records gave.
        expected: String,
        /// The name this record gives.
        found: String,
    },
    /// A `Resume` for a step that is not paused.
    #[error("Resume for step {seq}, which is not paused")]
    NotPaused {
        /// The step.
        seq: Seq,
    },
    /// A wait consumed a signal no earlier `Signal` delivered, or one
    /// another wait consumed.
    #[error(
        "Waited for operation {seq} takes signal {ordinal}, which no earlier Signal delivered or another wait took"
    )]
    UnknownSignal {
        /// The wait.
        seq: Seq,
        /// The signal's ordinal.
        ordinal: u64,
    },
    /// An `UpdateDone` for an update that was not accepted or already
    /// returned.
    #[error("UpdateDone for update {ordinal}, which was not accepted or already returned")]
    UnknownUpdate {
        /// The update's ordinal.
        ordinal: u64,
    },
    /// A record only workflow code produces, appended without the machine
    /// asking for it (or out of the order asked).
    #[error(
        "{kind} that the machine did not ask for (the host appends what it is asked, in the order asked)"
    )]
    NotAsked {
        /// The record's kind.
        kind: &'static str,
    },
    /// An LSN that is not after the run's latest record.
    #[error("LSN {lsn} is not after the run's latest record (LSN {gate_lsn})")]
    LsnOrder {
        /// The LSN given.
        lsn: Lsn,
        /// The run's latest LSN.
        gate_lsn: Lsn,
    },
    /// The names and payloads the machine must keep pass 4 GiB.
    #[error("the journal holds more than 4 GiB of names and payloads not yet delivered")]
    TooLarge,
    /// The machine holds no run (`new` or `reset` without a build).
    #[error("no journal was built")]
    NoRun,
}

/// A workflow operation as the journal records it or the code called it,
/// for [`DeterminismError`]s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// A step.
    Step {
        /// Its name.
        name: String,
    },
    /// A durable sleep.
    Sleep {
        /// Its name.
        name: String,
    },
    /// A wait for a signal.
    Wait {
        /// The signal's name.
        name: String,
    },
    /// A child workflow.
    Child {
        /// Its workflow type.
        wtype: String,
        /// Its workflow ID.
        id: String,
    },
    /// A signal (or cancel) sent to another workflow.
    Send {
        /// The target workflow ID.
        target: String,
        /// The signal's name.
        name: String,
    },
    /// A recorded value.
    Value {
        /// Its kind (see [`value_kind`]).
        kind: u8,
    },
    /// A patch marker.
    Patch {
        /// The patch ID.
        id: String,
    },
}

impl Call {
    /// Whether two calls are the same kind of operation (names aside).
    pub fn same_kind(&self, other: &Call) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Step { name } => write!(f, "step {name:?}"),
            Call::Sleep { name } => write!(f, "sleep {name:?}"),
            Call::Wait { name } => write!(f, "wait for signal {name:?}"),
            Call::Child { wtype, id } => write!(f, "child {wtype:?} with ID {id:?}"),
            Call::Send { target, name } if name == CANCEL_SIGNAL => {
                write!(f, "cancel of {target:?}")
            }
            Call::Send { target, name } => write!(f, "send of signal {name:?} to {target:?}"),
            Call::Value { kind } => match *kind {
                value_kind::NOW => f.write_str("now()"),
                value_kind::RANDOM => f.write_str("random()"),
                value_kind::UUID => f.write_str("uuid()"),
                value_kind::CUSTOM => f.write_str("a recorded value"),
                value_kind::STREAM => f.write_str("stream()"),
                k => write!(f, "a recorded value of kind {k}"),
            },
            Call::Patch { id } => write!(f, "patched({id:?})"),
        }
    }
}

/// What the journal holds at the operation a [`DeterminismError`] names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Held {
    /// This operation.
    Call(Call),
    /// A step whose records are not in the journal yet (only a journal
    /// written before `Began` existed holds a step with no record while
    /// later operations have one): any operation but a step is a mismatch.
    UnrecordedStep,
    /// An update handler returning, before any further operation.
    UpdateDone {
        /// The update's ordinal.
        ordinal: u64,
    },
    /// The run's end, recorded by its code.
    End {
        /// How it ended.
        status: Status,
    },
}

impl fmt::Display for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Held::Call(c) => c.fmt(f),
            Held::UnrecordedStep => f.write_str("a step whose result is not recorded yet"),
            Held::UpdateDone { ordinal } => write!(f, "update {ordinal}'s handler returning"),
            Held::End { status } => write!(f, "the run's end ({})", status.as_str()),
        }
    }
}

/// What the code did at the operation a [`DeterminismError`] names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Did {
    /// Called this operation.
    Called(Call),
    /// Became quiescent (asked for its next delivery) without calling the
    /// operation.
    Quiescent,
    /// Returned an update handler.
    UpdateDone {
        /// The update's ordinal.
        ordinal: u64,
    },
    /// Finished the run.
    Finished {
        /// How.
        status: Status,
    },
}

impl fmt::Display for Did {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Did::Called(c) => write!(f, "called {c}"),
            Did::Quiescent => f.write_str("waited for its next result without calling it"),
            Did::UpdateDone { ordinal } => write!(f, "returned update {ordinal}'s handler"),
            Did::Finished { status } => write!(f, "finished ({})", status.as_str()),
        }
    }
}

/// The kinds of departure from the journal a [`DeterminismError`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// Another kind of operation at this sequence number.
    OtherKind,
    /// The same kind under another name (or ID, target, value kind, end
    /// status, update).
    OtherName,
    /// An operation where the journal shows the code returning an update
    /// handler or ending the run first.
    Extra,
    /// The code went quiescent, returned a handler or finished without an
    /// operation the journal holds.
    Missing,
}

/// Workflow code did something its journal says it did not. The run
/// cannot go on with this code: the host fails or suspends it and appends
/// nothing for the call that failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "run {run}, operation {seq}: the journal holds {journal} but the code {code}; workflow code must make the same calls in the same order on every run (use ctx.patched to change it)"
)]
pub struct DeterminismError {
    /// The run.
    pub run: RunId,
    /// The operation: the sequence number the code's next call takes.
    pub seq: Seq,
    /// What the journal holds there.
    pub journal: Held,
    /// What the code did.
    pub code: Did,
}

impl DeterminismError {
    /// Which kind of departure this is.
    pub fn mismatch(&self) -> Mismatch {
        match (&self.journal, &self.code) {
            (Held::Call(a), Did::Called(b)) if a.same_kind(b) => Mismatch::OtherName,
            (Held::Call(_) | Held::UnrecordedStep, Did::Called(_)) => Mismatch::OtherKind,
            (Held::UpdateDone { .. } | Held::End { .. }, Did::Called(_)) => Mismatch::Extra,
            (Held::End { .. }, Did::UpdateDone { .. }) => Mismatch::Extra,
            (Held::UpdateDone { .. }, Did::UpdateDone { .. })
            | (Held::End { .. }, Did::Finished { .. }) => Mismatch::OtherName,
            _ => Mismatch::Missing,
        }
    }
}

/// Why the machine cannot serve an operation call.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum OpError {
    /// The code departs from its journal (boxed: the error path is cold,
    /// and every operation's result stays small).
    #[error(transparent)]
    Determinism(#[from] Box<DeterminismError>),
    /// The run finished (its code finished, or it was ended from outside):
    /// its code may call nothing more.
    #[error("run {run} has finished: its code may call no more operations")]
    Finished {
        /// The run.
        run: RunId,
    },
    /// Every sequence number is taken.
    #[error("run {run} has used every operation number")]
    Exhausted {
        /// The run.
        run: RunId,
    },
    /// The host has not appended the records it was asked for: too many
    /// are outstanding.
    #[error("run {run}: {asked} records asked for are not appended yet")]
    Backlog {
        /// The run.
        run: RunId,
        /// How many are outstanding.
        asked: usize,
    },
    /// `update_done` for an update whose handler is not running.
    #[error("run {run}: update {ordinal} has no handler running")]
    NoHandler {
        /// The run.
        run: RunId,
        /// The update's ordinal.
        ordinal: u64,
    },
    /// The machine holds no run.
    #[error("no journal was built")]
    NoRun,
}
