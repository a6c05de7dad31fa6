//! The code's side: each operation workflow code calls, matched against the
//! journal (replay) or turned into a record for the host to append (live).
//!
//! An operation takes the code's next sequence number. If the journal holds
//! a record at that number, the call must be the same kind with the same
//! name, and the answer is `Recorded` (append nothing; a recorded value
//! comes back at once). Otherwise the call is live: commands answer
//! `Append(seq)` and the host appends the record; a step answers which
//! attempt to run. Whatever the journal proves the code did first (see the
//! module docs) is checked here, and a departure is a [`DeterminismError`]
//! that leaves the machine unchanged.

use super::error::{Call, DeterminismError, Did, Held, OpError};
use super::slots::{
    ABANDON_ASKED, ABANDONED, Asked, ENDED, ISSUED, OpKind, RECORDED, RESUMED, Slot, UNAPPENDED,
    UPDATE_DELIVERED, UPDATE_RETURNED,
};
use super::{MAX_ASKED, RunMachine};
use crate::record::{PAUSED, Seq, Status};

/// The answer to a command operation (sleep, wait, child, send).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Issued {
    /// The journal holds the operation's record: append nothing. A send is
    /// done; a sleep, wait or child's completion comes as a delivery.
    Recorded(Seq),
    /// Live: append the operation's record with this sequence number, then
    /// pass it to [`RunMachine::handle_record`].
    Append(Seq),
}

impl Issued {
    /// The operation's sequence number.
    pub fn seq(self) -> Seq {
        match self {
            Issued::Recorded(s) | Issued::Append(s) => s,
        }
    }

    /// Whether the host must append a record.
    pub fn is_append(self) -> bool {
        matches!(self, Issued::Append(_))
    }
}

/// When a step's next attempt may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAt {
    /// As soon as the log is durable through the gate LSN.
    Now,
    /// Not before this time (the latest `Attempt`'s `retry_at_ms`).
    At {
        /// When, in ms.
        retry_at_ms: u64,
    },
    /// Only after a `Resume` (the latest `Attempt` paused the step).
    Paused,
}

/// A step attempt the host is to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The attempt's number, from 1: one more than the failed attempts the
    /// journal holds (an attempt cut short by a crash runs again under its
    /// number).
    pub attempt: u32,
    /// When it may run.
    pub at: RetryAt,
}

/// What the host does for a step the code called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepRun {
    /// The journal holds its result: run nothing, the result comes as a
    /// delivery.
    Recorded,
    /// Run this attempt (its `Attempt` or `Step` record goes to
    /// [`RunMachine::handle_record`] when it ends).
    Attempt(Attempt),
}

/// The answer to a step call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepStart {
    /// The step's sequence number.
    pub seq: Seq,
    /// Whether and which attempt to run.
    pub run: StepRun,
    /// Live and new: append the step's `Began` for attempt 1 now, in call
    /// order like a command, and pass it to
    /// [`RunMachine::handle_record`]; the gate LSN then covers it, so the
    /// attempt starts only once it is durable, in the same flush as the
    /// records before it. When false and an attempt is to run (a step the
    /// journal holds, or one called where the journal cannot show it in
    /// call order), the host appends its `Began` when the attempt starts,
    /// and starts it once that is durable.
    pub began: bool,
}

/// The answer to a recorded-value call (now, random, UUID, custom).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueAnswer<'m> {
    /// The journal holds the value: the code gets these bytes.
    Recorded {
        /// The operation's sequence number.
        seq: Seq,
        /// The recorded value.
        value: &'m [u8],
    },
    /// Live: make the value, give it to the code, append a `Value` record
    /// with this sequence number.
    Append(Seq),
}

/// The answer to `patched(id)`: whether the code takes the new branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Patched {
    /// The journal holds the marker: the new branch.
    Recorded(Seq),
    /// Live: the new branch; append a `Patch` record with this sequence
    /// number.
    Append(Seq),
    /// The journal shows the run's code without this marker here (another
    /// operation at its number, a handler's return or the end first): the
    /// old branch. No sequence number is taken.
    Absent,
}

impl Patched {
    /// Whether the code takes the new branch.
    pub fn is_patched(self) -> bool {
        !matches!(self, Patched::Absent)
    }
}

/// The answer to returning an update handler or finishing the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The journal holds the record: append nothing.
    Recorded,
    /// Live: append the record (`UpdateDone`, `Done`).
    Append,
}

/// The answer to dropping a wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abandon {
    /// The journal holds `Waited { Abandoned }` for it: append nothing.
    Recorded,
    /// Append `Waited { seq, Abandoned }`, so the shard offers the signal
    /// it held to other waits.
    Append,
    /// Nothing to append: the wait already ended (its outcome is in the
    /// journal and its delivery goes to no one: a signal it took stays
    /// taken), or it is not a pending wait, or the run is over.
    Ended,
}

/// An operation as the code calls it.
#[derive(Clone, Copy)]
struct Op<'a> {
    kind: OpKind,
    name: &'a str,
    /// A child's ID or a send's target.
    extra: &'a str,
    value_kind: u8,
}

impl<'a> Op<'a> {
    fn new(kind: OpKind, name: &'a str) -> Self {
        Self {
            kind,
            name,
            extra: "",
            value_kind: 0,
        }
    }

    fn call(&self) -> Call {
        slot_call(
            self.kind,
            self.name.as_bytes(),
            self.extra.as_bytes(),
            self.value_kind,
        )
    }

    /// Whether `slot` (a recorded operation) is this one.
    fn matches(&self, slot: &Slot, bytes: &[u8]) -> bool {
        slot.kind == self.kind
            && match self.kind {
                OpKind::Value => slot.value_kind == self.value_kind,
                OpKind::Child | OpKind::Send => {
                    slot.name.of(bytes) == self.name.as_bytes()
                        && slot.extra.of(bytes) == self.extra.as_bytes()
                }
                _ => slot.name.of(bytes) == self.name.as_bytes(),
            }
    }
}

/// A [`Call`] from an operation's identity.
fn slot_call(kind: OpKind, name: &[u8], extra: &[u8], value_kind: u8) -> Call {
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match kind {
        OpKind::Step => Call::Step { name: s(name) },
        OpKind::Sleep => Call::Sleep { name: s(name) },
        OpKind::Wait => Call::Wait { name: s(name) },
        OpKind::Child => Call::Child {
            wtype: s(name),
            id: s(extra),
        },
        OpKind::Send => Call::Send {
            target: s(extra),
            name: s(name),
        },
        OpKind::Value => Call::Value { kind: value_kind },
        OpKind::Patch => Call::Patch { id: s(name) },
    }
}

/// How an operation met the journal.
enum Found {
    /// The journal holds it: its slot as the call found it.
    Recorded(Slot),
    /// Past what the journal holds (or a step the journal has no record
    /// of yet).
    Live,
}

impl RunMachine {
    /// The code calls a step. Its result comes as a delivery; the answer
    /// says whether the host runs an attempt, which, and when.
    pub fn step(&mut self, name: &str) -> Result<StepStart, OpError> {
        let (seq, found) = self.issue(Op::new(OpKind::Step, name))?;
        let (run, began) = match found {
            Found::Recorded(slot) if slot.has(ENDED) => (StepRun::Recorded, false),
            Found::Recorded(slot) => (StepRun::Attempt(next_attempt(&slot)), false),
            Found::Live => {
                let first = Attempt {
                    attempt: 1,
                    at: RetryAt::Now,
                };
                let asked = self.ops.get(&seq).is_some_and(|s| s.has(UNAPPENDED));
                (StepRun::Attempt(first), asked)
            }
        };
        Ok(StepStart { seq, run, began })
    }

    /// The attempt a called step that has not ended runs next, and when: what
    /// the host needs to go on with retries after a crash, a retry timer or
    /// a `Resume`. `None` if `seq` is not such a step.
    pub fn step_attempt(&self, seq: Seq) -> Option<Attempt> {
        let slot = self.ops.get(&seq)?;
        (slot.kind == OpKind::Step && slot.has(ISSUED) && !slot.has(ENDED))
            .then(|| next_attempt(slot))
    }

    /// The code calls a durable sleep (record: `Timer`; its `Fired` comes
    /// as a delivery).
    pub fn sleep(&mut self, name: &str) -> Result<Issued, OpError> {
        self.command(Op::new(OpKind::Sleep, name))
    }

    /// The code waits for signal `name` (record: `Wait` with the deadline;
    /// its `Waited` comes as a delivery).
    pub fn wait(&mut self, name: &str) -> Result<Issued, OpError> {
        self.command(Op::new(OpKind::Wait, name))
    }

    /// The code starts child workflow `wtype` with ID `id` (record: `Child`;
    /// its `ChildDone` comes as a delivery unless it is detached).
    pub fn child(&mut self, wtype: &str, id: &str) -> Result<Issued, OpError> {
        let op = Op {
            extra: id,
            ..Op::new(OpKind::Child, wtype)
        };
        self.command(op)
    }

    /// Whether the journal holds, at the code's next sequence number, a
    /// child start of `wtype` as `id` the code has not called yet (a
    /// replay). A host that refuses a child of a type it does not know,
    /// recording nothing, asks this first: recorded, the call was made live
    /// and is matched; not recorded, it was refused live too and is refused
    /// again, so the code goes on the same way.
    pub fn recorded_child_next(&self, wtype: &str, id: &str) -> bool {
        let op = Op {
            extra: id,
            ..Op::new(OpKind::Child, wtype)
        };
        self.ops
            .get(&self.next_seq)
            .is_some_and(|slot| !slot.has(ISSUED) && op.matches(slot, &self.bytes))
    }

    /// The code sends signal `name` to workflow `target` (a cancel is
    /// [`CANCEL_SIGNAL`](crate::shard::CANCEL_SIGNAL)); record: `Send`. It
    /// resolves at once.
    pub fn send(&mut self, target: &str, name: &str) -> Result<Issued, OpError> {
        let op = Op {
            extra: target,
            ..Op::new(OpKind::Send, name)
        };
        let issued = self.command(op)?;
        if let Issued::Recorded(seq) = issued {
            self.ops.remove(&seq);
        }
        Ok(issued)
    }

    /// The code asks for a recorded value of kind `kind` (see
    /// [`value_kind`](crate::record::value_kind)). Replayed, the journal's
    /// bytes; live, the host makes the value and appends it, so the value is
    /// made only when it is new.
    pub fn value(&mut self, kind: u8) -> Result<ValueAnswer<'_>, OpError> {
        let op = Op {
            value_kind: kind,
            ..Op::new(OpKind::Value, "")
        };
        match self.command(op)? {
            Issued::Append(seq) => Ok(ValueAnswer::Append(seq)),
            Issued::Recorded(seq) => {
                let span = self.ops.remove(&seq).map(|s| s.name).unwrap_or_default();
                let value = span.of(&self.bytes);
                Ok(ValueAnswer::Recorded { seq, value })
            }
        }
    }

    /// The code asks whether patch `id` applies (`ctx.patched`): yes if the
    /// journal holds its marker here or the code is past the journal (live:
    /// the marker is appended); no, taking no sequence number, if the
    /// journal shows the run's older code doing something else here.
    pub fn patched(&mut self, id: &str) -> Result<Patched, OpError> {
        let seq = self.open()?;
        let op = Op::new(OpKind::Patch, id);
        let here = match self.ops.get(&seq) {
            Some(slot) => op.matches(slot, &self.bytes),
            // An unrecorded step at this number, or the journal's handler
            // return or end comes first: the old code made no marker here.
            None => !(self.max_seq > seq || self.end.is_some() || !self.dones.is_empty()),
        };
        if !here {
            return Ok(Patched::Absent);
        }
        Ok(match self.command(op)? {
            Issued::Recorded(seq) => {
                self.ops.remove(&seq);
                Patched::Recorded(seq)
            }
            Issued::Append(seq) => Patched::Append(seq),
        })
    }

    /// The code dropped its wait `seq` (it lost a race). Idempotent; never
    /// an error: dropping happens when futures are dropped, also after the
    /// run ended.
    pub fn abandon_wait(&mut self, seq: Seq) -> Abandon {
        // Nothing may be appended after the run's end.
        let over = self.end.is_some() || self.code_finished;
        let Some(slot) = self.ops.get_mut(&seq) else {
            return Abandon::Ended;
        };
        if slot.kind != OpKind::Wait || !slot.has(ISSUED) {
            return Abandon::Ended;
        }
        if slot.has(ABANDONED) {
            self.ops.remove(&seq);
            return Abandon::Recorded;
        }
        if over || slot.has(ENDED) || slot.has(ABANDON_ASKED) {
            return Abandon::Ended;
        }
        slot.flags |= ABANDON_ASKED;
        self.asked.push_back(Asked::Abandon { seq });
        Abandon::Append
    }

    /// The code's handler of update `ordinal` returned (record:
    /// `UpdateDone`). The update must have been delivered and not returned.
    pub fn update_done(&mut self, ordinal: u64) -> Result<Answer, OpError> {
        if self.run == 0 {
            return Err(OpError::NoRun);
        }
        if self.code_finished {
            return Err(OpError::Finished { run: self.run });
        }
        let i = usize::try_from(ordinal)
            .ok()
            .filter(|&i| {
                self.updates
                    .get(i)
                    .is_some_and(|f| f & UPDATE_DELIVERED != 0 && f & UPDATE_RETURNED == 0)
            })
            .ok_or(OpError::NoHandler {
                run: self.run,
                ordinal,
            })?;
        let seq = self.next_seq;
        let did = || Did::UpdateDone { ordinal };
        let answer = match self.dones.front().copied() {
            Some(d) if d.ordinal != ordinal => {
                return Err(self.departs(seq, Held::UpdateDone { ordinal: d.ordinal }, did()));
            }
            Some(d) if d.need >= seq => return Err(self.departs(seq, self.held_at(seq), did())),
            Some(_) => {
                self.dones.pop_front();
                Answer::Recorded
            }
            None => {
                // Operations the journal names were called before this
                // return, which it does not hold.
                if self.max_seq >= seq {
                    return Err(self.departs(seq, self.held_at(seq), did()));
                }
                self.check_live(seq, did, true)?;
                self.asked.push_back(Asked::UpdateDone { ordinal });
                Answer::Append
            }
        };
        if let Some(f) = self.updates.get_mut(i) {
            *f |= UPDATE_RETURNED;
        }
        self.dones_called = self.dones_called.saturating_add(1);
        Ok(answer)
    }

    /// The code finished the run with `status` (continue-as-new is
    /// [`Status::ContinuedAsNew`]); record: `Done`. Every operation the
    /// journal names must have been called and every recorded handler
    /// returned. The code may call nothing after.
    pub fn finish(&mut self, status: Status) -> Result<Answer, OpError> {
        if self.run == 0 {
            return Err(OpError::NoRun);
        }
        if self.code_finished {
            return Err(OpError::Finished { run: self.run });
        }
        let seq = self.next_seq;
        let did = || Did::Finished { status };
        if let Some(d) = self.dones.front() {
            let held = Held::UpdateDone { ordinal: d.ordinal };
            return Err(self.departs(seq, held, did()));
        }
        if self.max_seq >= seq {
            return Err(self.departs(seq, self.held_at(seq), did()));
        }
        let answer = match self.end {
            Some(end) if !end.by_code => return Err(OpError::Finished { run: self.run }),
            Some(end) if end.status != status => {
                return Err(self.departs(seq, Held::End { status: end.status }, did()));
            }
            Some(_) => Answer::Recorded,
            None => {
                self.check_live(seq, did, true)?;
                self.asked.push_back(Asked::Done);
                Answer::Append
            }
        };
        self.code_finished = true;
        Ok(answer)
    }

    /// The sequence number the code's next call takes, if it may call.
    fn open(&self) -> Result<Seq, OpError> {
        if self.run == 0 {
            return Err(OpError::NoRun);
        }
        if self.code_finished {
            return Err(OpError::Finished { run: self.run });
        }
        if self.next_seq == Seq::MAX {
            return Err(OpError::Exhausted { run: self.run });
        }
        Ok(self.next_seq)
    }

    /// A command call: [`issue`](Self::issue), answered as [`Issued`].
    fn command(&mut self, op: Op<'_>) -> Result<Issued, OpError> {
        Ok(match self.issue(op)? {
            (seq, Found::Recorded(_)) => Issued::Recorded(seq),
            (seq, Found::Live) => Issued::Append(seq),
        })
    }

    /// Matches the code's next operation against the journal and gives it
    /// the next sequence number. Changes nothing on error.
    fn issue(&mut self, op: Op<'_>) -> Result<(Seq, Found), OpError> {
        let seq = self.open()?;
        let command = op.kind.is_command();
        let found = if let Some(slot) = self.ops.get_mut(&seq) {
            // Unissued slots are recorded ones.
            let other = !op.matches(slot, &self.bytes);
            let early = command && slot.dones_before > self.dones_called;
            if !other && !early {
                slot.flags |= ISSUED;
            }
            let found = *slot;
            if other {
                return Err(self.departs(seq, self.held_at(seq), Did::Called(op.call())));
            }
            if early {
                return Err(self.departs(seq, self.next_done(), Did::Called(op.call())));
            }
            Found::Recorded(found)
        } else if self.max_seq > seq {
            // Records name later operations but none this one: a step
            // whose result is not in yet.
            if command {
                return Err(self.departs(seq, Held::UnrecordedStep, Did::Called(op.call())));
            }
            self.ops.insert(seq, Slot::new(OpKind::Step, ISSUED));
            Found::Live
        } else {
            // A step's first `Began` is asked at the call like a command's
            // record, unless a recorded handler return is still to come: a
            // journal written before `Began` existed may hold the step
            // before it with no record, so its `Began` waits for its start.
            let records = command || self.dones.is_empty();
            self.check_live(seq, || Did::Called(op.call()), records)?;
            if records {
                if !op.kind.resolves_at_once() {
                    self.ops
                        .insert(seq, Slot::new(op.kind, ISSUED | UNAPPENDED));
                }
                let kind = op.kind;
                self.asked.push_back(Asked::Command { seq, kind });
            } else {
                self.ops.insert(seq, Slot::new(OpKind::Step, ISSUED));
            }
            Found::Live
        };
        self.next_seq += 1;
        Ok((seq, found))
    }

    /// Checks that the code may do something the journal does not hold: the
    /// journal's end does not come first (nor, for a record the call makes,
    /// a handler's return), and the host keeps up with appends.
    fn check_live(
        &self,
        seq: Seq,
        did: impl FnOnce() -> Did,
        records: bool,
    ) -> Result<(), OpError> {
        if let Some(end) = self.end {
            if !end.by_code {
                return Err(OpError::Finished { run: self.run });
            }
            return Err(self.departs(seq, Held::End { status: end.status }, did()));
        }
        if records && !self.dones.is_empty() {
            return Err(self.departs(seq, self.next_done(), did()));
        }
        if records && self.asked.len() >= MAX_ASKED {
            let asked = self.asked.len();
            return Err(OpError::Backlog {
                run: self.run,
                asked,
            });
        }
        Ok(())
    }

    /// What the journal holds at operation `seq`, which the code has not
    /// called: its record, or (no record, later ones named) a step.
    pub(super) fn held_at(&self, seq: Seq) -> Held {
        match self.ops.get(&seq) {
            Some(s) if s.has(RECORDED) => Held::Call(slot_call(
                s.kind,
                s.name.of(&self.bytes),
                s.extra.of(&self.bytes),
                s.value_kind,
            )),
            _ => Held::UnrecordedStep,
        }
    }

    /// The recorded handler return the code must make next.
    pub(super) fn next_done(&self) -> Held {
        Held::UpdateDone {
            ordinal: self.dones.front().map_or(0, |d| d.ordinal),
        }
    }

    pub(super) fn departure(&self, seq: Seq, journal: Held, code: Did) -> Box<DeterminismError> {
        Box::new(DeterminismError {
            run: self.run,
            seq,
            journal,
            code,
        })
    }

    fn departs(&self, seq: Seq, journal: Held, code: Did) -> OpError {
        OpError::Determinism(self.departure(seq, journal, code))
    }
}

/// The attempt a step runs next, from its latest recorded attempt.
fn next_attempt(slot: &Slot) -> Attempt {
    let at = if slot.attempt == 0 || slot.has(RESUMED) {
        RetryAt::Now
    } else if slot.retry_at_ms == PAUSED {
        RetryAt::Paused
    } else {
        RetryAt::At {
            retry_at_ms: slot.retry_at_ms,
        }
    };
    Attempt {
        attempt: slot.attempt.saturating_add(1),
        at,
    }
}
