//! Taking records: the journal a machine is built from, and every record the
//! host appends afterwards. Both go through [`RunMachine::take`], so a
//! rebuilt machine sees exactly what the live one saw.
//!
//! What a record does here: a command record from the journal becomes a
//! slot the code must match; one the host appends confirms what the machine
//! asked for, in the order asked. A step's attempts and result, `Fired`,
//! `Waited`, `ChildDone` must name an operation of the right kind that a
//! record started (a step needs none: its first record, a `Began` in
//! journals that have them, starts it).
//! Completions that wake code are queued as deliveries, with what the code
//! must have done before each. Every check runs before the state changes,
//! so a refused record leaves the machine as it was (bar bytes it kept,
//! which the next compaction drops).

use std::collections::hash_map::Entry;

use super::error::{JournalError, Position, Problem};
use super::slots::{
    self, ABANDONED, Asked, Buffered, Due, ENDED, ISSUED, OpKind, Pending, RECORDED, RESUMED,
    RecordedDone, Slot, Span, UNAPPENDED, UPDATE_RECORDED,
};
use super::{End, RunMachine};
use crate::record::{
    Lsn, PAUSED, Record, Seq, Status, WaitOutcome, Walked, iter_canonical_passing, kind,
};

type Taken = Result<(), Problem>;

impl RunMachine {
    /// Passes a record the host appended for this run at `lsn`: every
    /// record, those the machine asked for (a command, a handler's return,
    /// a dropped wait, the code's `Done`) and all others (a step's attempts
    /// and result, `Resume`, `Fired`, `Waited`, `ChildDone`, `Signal`,
    /// `Cancel`, `Update`, a `Done` from outside). Raises the gate LSN to
    /// `lsn`.
    ///
    /// Refuses (and changes nothing) a record of another run, an LSN not
    /// after the run's latest, a record the run's state does not allow (a
    /// completion of an operation that is over or of another kind, a signal
    /// no `Signal` delivered) and a command record not asked for or out of
    /// the order asked. Records after the run's `Done` are taken and
    /// ignored (late messages: no code waits for them).
    ///
    /// A refused record changes nothing, so a host may pass a record before
    /// appending it, with the LSN it is about to take, and drop an input the
    /// run's state does not allow instead of logging a record no rebuild
    /// would accept.
    pub fn handle_record<S: AsRef<str>, B: AsRef<[u8]>>(
        &mut self,
        lsn: Lsn,
        rec: &Record<S, B>,
    ) -> Result<(), JournalError> {
        let at = Position::Appended { lsn };
        if self.run == 0 {
            return Err(self.refuse(at, Problem::NoRun));
        }
        if lsn <= self.gate_lsn {
            let gate_lsn = self.gate_lsn;
            return Err(self.refuse(at, Problem::LsnOrder { lsn, gate_lsn }));
        }
        self.take(rec, at, true)?;
        self.gate_lsn = lsn;
        Ok(())
    }

    /// Takes the journal a machine is built from.
    /// Takes the whole of `journal` (the machine reset), returning its
    /// `Start`'s input, borrowed from it.
    pub(super) fn take_journal<'j>(&mut self, journal: &'j [u8]) -> Result<&'j [u8], JournalError> {
        // Stream chunks are the host's (`take` keeps nothing of them):
        // framed and counted, not decoded, so a long stream costs a
        // varint a chunk here.
        let mut walk = iter_canonical_passing(journal, kind::CHUNK);
        let mut input: &'j [u8] = &[];
        // The bytes kept are parts of the journal's records: one
        // allocation up front rather than a doubling series (a code start
        // after an open builds thousands of machines), bounded for a
        // journal that is mostly stream chunks, which keep nothing.
        self.bytes.reserve(journal.len().min(KEEP_RESERVE_MAX));
        // Each record is at least 4 bytes, so the walk ends within
        // `journal.len() / 4` steps.
        loop {
            let at = Position::Journal {
                index: self.records,
                offset: walk.offset(),
            };
            let Some(item) = walk.next() else {
                break;
            };
            let rec = match item.map_err(|e| self.refuse(at, Problem::Decode(e)))? {
                Walked::Record(rec, _) => rec,
                Walked::Passed { .. } if self.records == 0 => {
                    return Err(self.refuse(at, Problem::NotStart { kind: "Chunk" }));
                }
                Walked::Passed { count, .. } => {
                    self.records = self.records.saturating_add(count);
                    continue;
                }
            };
            if self.records == 0 {
                self.take_start(&rec, at)?;
                if let Record::Start { input: given, .. } = rec {
                    input = given;
                }
            } else {
                self.take(&rec, at, false)?;
            }
        }
        if self.records == 0 {
            let at = Position::Journal {
                index: 0,
                offset: 0,
            };
            return Err(self.refuse(at, Problem::Empty));
        }
        self.recorded_due = self.deliveries.len();
        // Nothing is consumed yet: no compaction until the store doubles.
        self.compact_at = self.compact_at.max(2 * self.bytes.len());
        Ok(input)
    }

    pub(super) fn refuse(&self, at: Position, problem: Problem) -> JournalError {
        JournalError {
            run: self.run,
            at,
            problem,
        }
    }

    /// The journal's first record: the run's `Start`. An update-with-start
    /// is the run's first delivery (update 0).
    fn take_start<S: AsRef<str>, B: AsRef<[u8]>>(
        &mut self,
        rec: &Record<S, B>,
        at: Position,
    ) -> Result<(), JournalError> {
        let Record::Start { run, update, .. } = rec else {
            let kind = rec.kind_name();
            return Err(self.refuse(at, Problem::NotStart { kind }));
        };
        if *run != self.run {
            let p = Problem::OtherRun {
                kind: "Start",
                found: *run,
            };
            return Err(self.refuse(at, p));
        }
        self.records = 1;
        if let Some(u) = update {
            let (id, name, payload) = (u.id.as_ref(), u.name.as_ref(), u.payload.as_ref());
            self.take_update(id, name, payload)
                .map_err(|p| self.refuse(at, p))?;
        }
        Ok(())
    }

    /// Takes one record after the `Start`: `live` when the host appends it
    /// now, else it is from the journal being built.
    pub(super) fn take<S: AsRef<str>, B: AsRef<[u8]>>(
        &mut self,
        rec: &Record<S, B>,
        at: Position,
        live: bool,
    ) -> Result<(), JournalError> {
        let kind = rec.kind_name();
        if rec.run() != self.run {
            let p = Problem::OtherRun {
                kind,
                found: rec.run(),
            };
            return Err(self.refuse(at, p));
        }
        if self.end.is_some() {
            self.records = self.records.saturating_add(1);
            return Ok(());
        }
        let taken = match rec {
            Record::Start { .. } => Err(Problem::SecondStart),
            Record::Step {
                seq,
                name,
                attempt,
                status,
                payload,
                ..
            } => self.take_result(*seq, name.as_ref(), *attempt, *status, payload.as_ref()),
            Record::Attempt {
                seq,
                name,
                attempt,
                retry_at_ms,
                ..
            } => self.take_attempt(*seq, name.as_ref(), *attempt, *retry_at_ms),
            Record::Resume { seq, .. } => self.take_resume(*seq),
            Record::Began {
                seq, name, attempt, ..
            } => self.take_began(live, *seq, name.as_ref(), *attempt),
            Record::Timer { seq, name, .. } => {
                let c = Command::new(OpKind::Sleep, *seq, name.as_ref());
                self.take_command(live, kind, c)
            }
            Record::Wait { seq, name, .. } => {
                let c = Command::new(OpKind::Wait, *seq, name.as_ref());
                self.take_command(live, kind, c)
            }
            Record::Child { seq, wtype, id, .. } => {
                let c = Command {
                    extra: id.as_ref().as_bytes(),
                    ..Command::new(OpKind::Child, *seq, wtype.as_ref())
                };
                self.take_command(live, kind, c)
            }
            Record::Send {
                seq, target, name, ..
            } => {
                let c = Command {
                    extra: target.as_ref().as_bytes(),
                    ..Command::new(OpKind::Send, *seq, name.as_ref())
                };
                self.take_command(live, kind, c)
            }
            Record::Value {
                seq,
                kind: value_kind,
                value,
                ..
            } => {
                let c = Command {
                    name: value.as_ref(),
                    value_kind: *value_kind,
                    ..Command::new(OpKind::Value, *seq, "")
                };
                self.take_command(live, kind, c)
            }
            Record::Patch { seq, id, .. } => {
                let c = Command::new(OpKind::Patch, *seq, id.as_ref());
                self.take_command(live, kind, c)
            }
            Record::Fired { seq, .. } => self.take_fired(*seq, kind),
            Record::Waited { seq, outcome, .. } => self.take_waited(live, *seq, *outcome),
            Record::ChildDone {
                seq,
                status,
                payload,
                ..
            } => self.take_child_done(*seq, *status, payload.as_ref()),
            Record::Signal { payload, .. } => self.keep(payload.as_ref()).map(|payload| {
                let ordinal = self.signal_count;
                self.signal_count += 1;
                self.signals.push_back(Buffered { ordinal, payload });
            }),
            Record::Cancel { reason, .. } => self.keep(reason.as_ref()).map(|reason| {
                self.push_due(Due::Cancel { reason });
            }),
            Record::Update {
                id, name, payload, ..
            } => self.take_update(id.as_ref(), name.as_ref(), payload.as_ref()),
            Record::UpdateDone { ordinal, .. } => self.take_update_done(live, *ordinal),
            Record::Done { status, by, .. } => {
                self.take_done(live, *status, by.is_none());
                Ok(())
            }
            // A step's progress, async tokens, streams and search
            // attributes are the host's: they wake no code and take no
            // operation number.
            Record::Heartbeat { .. }
            | Record::Awaiting { .. }
            | Record::Completed { .. }
            | Record::Attributes { .. }
            | Record::Chunk { .. }
            | Record::StreamEnd { .. } => Ok(()),
        };
        taken.map_err(|p| self.refuse(at, p))?;
        self.records = self.records.saturating_add(1);
        Ok(())
    }

    fn keep(&mut self, bytes: &[u8]) -> Result<Span, Problem> {
        slots::keep(&mut self.bytes, bytes).ok_or(Problem::TooLarge)
    }

    fn push_due(&mut self, due: Due) {
        self.deliveries.push_back(Pending {
            due,
            need: self.max_seq,
            dones_before: self.dones_seen,
        });
    }

    fn end_op(&mut self, seq: Seq) {
        if let Some(slot) = self.ops.get_mut(&seq) {
            slot.flags |= ENDED;
        }
    }

    /// The slot of operation `seq` for a completion: a `kind` a record
    /// started and not over.
    fn completion(
        &mut self,
        seq: Seq,
        kind: OpKind,
        rec: &'static str,
    ) -> Result<&mut Slot, Problem> {
        if seq == 0 {
            return Err(Problem::SeqZero { kind: rec });
        }
        let called = seq < self.next_seq;
        let ended = Problem::Ended { kind: rec, seq };
        let not_started = Problem::NotStarted {
            kind: rec,
            seq,
            needs: kind.command_name(),
        };
        match self.ops.get_mut(&seq) {
            Some(s) if s.kind != kind => Err(Problem::WrongKind {
                kind: rec,
                seq,
                op: s.kind.as_str(),
            }),
            Some(s) if s.has(ENDED) => Err(ended),
            Some(s) if s.has(UNAPPENDED) => Err(not_started),
            Some(s) => Ok(s),
            // Called, and over since: its slot is gone.
            None if called => Err(ended),
            None => Err(not_started),
        }
    }

    /// Finds or starts the slot of step `seq` for one of its records.
    fn step_slot(&mut self, seq: Seq, name: &str, rec: &'static str) -> Result<&mut Slot, Problem> {
        if seq == 0 {
            return Err(Problem::SeqZero { kind: rec });
        }
        let called = seq < self.next_seq;
        let slot = match self.ops.entry(seq) {
            Entry::Occupied(o) => {
                let s = o.into_mut();
                if s.kind != OpKind::Step {
                    let op = s.kind.as_str();
                    return Err(Problem::WrongKind { kind: rec, seq, op });
                }
                if s.has(ENDED) {
                    return Err(Problem::Ended { kind: rec, seq });
                }
                // Its attempt cannot have run before its `Began` was
                // appended.
                if s.has(UNAPPENDED) {
                    let needs = "Began";
                    return Err(Problem::NotStarted {
                        kind: rec,
                        seq,
                        needs,
                    });
                }
                // Names are kept until the code's call checked them.
                let kept = s.name.of(&self.bytes);
                if s.has(RECORDED) && !s.has(ISSUED) && kept != name.as_bytes() {
                    return Err(Problem::Renamed {
                        kind: rec,
                        seq,
                        expected: String::from_utf8_lossy(kept).into_owned(),
                        found: name.to_owned(),
                    });
                }
                s
            }
            Entry::Vacant(_) if called => return Err(Problem::Ended { kind: rec, seq }),
            Entry::Vacant(v) => {
                let mut slot = Slot::new(OpKind::Step, RECORDED);
                slot.name =
                    slots::keep(&mut self.bytes, name.as_bytes()).ok_or(Problem::TooLarge)?;
                v.insert(slot)
            }
        };
        self.max_seq = self.max_seq.max(seq);
        Ok(slot)
    }

    fn take_result(
        &mut self,
        seq: Seq,
        name: &str,
        attempt: u32,
        status: Status,
        payload: &[u8],
    ) -> Taken {
        let payload = self.keep(payload)?;
        // A new slot has no attempt: only an existing one can refuse.
        let slot = self.step_slot(seq, name, "Step")?;
        let last = slot.attempt;
        if attempt < last {
            return Err(Problem::AttemptOrder { seq, attempt, last });
        }
        slot.flags |= ENDED;
        self.push_due(Due::Step {
            seq,
            attempt,
            status,
            payload,
        });
        Ok(())
    }

    fn take_attempt(&mut self, seq: Seq, name: &str, attempt: u32, retry_at_ms: u64) -> Taken {
        if attempt == 0 {
            let last = 0;
            return Err(Problem::AttemptOrder { seq, attempt, last });
        }
        // A new slot has no attempt: only an existing one can refuse.
        let slot = self.step_slot(seq, name, "Attempt")?;
        if attempt <= slot.attempt {
            let last = slot.attempt;
            return Err(Problem::AttemptOrder { seq, attempt, last });
        }
        slot.attempt = attempt;
        slot.retry_at_ms = retry_at_ms;
        slot.flags &= !RESUMED;
        Ok(())
    }

    /// A step attempt's `Began`. Appended as the machine asked at the
    /// step's call (its first attempt, in call order), it confirms that
    /// call like a command record; otherwise (from the journal, or a
    /// retry's or a re-run's appended when the attempt starts) it starts or
    /// continues the step's slot, whose name the code's call must then
    /// match, and names the attempt after the latest failed one (a crash
    /// may repeat it: the attempt begins again).
    fn take_began(&mut self, live: bool, seq: Seq, name: &str, attempt: u32) -> Taken {
        if seq == 0 {
            return Err(Problem::SeqZero { kind: "Began" });
        }
        let kind = OpKind::Step;
        if live && self.asked.front() == Some(&Asked::Command { seq, kind }) {
            if attempt != 1 {
                let last = 0;
                return Err(Problem::AttemptOrder { seq, attempt, last });
            }
            self.asked.pop_front();
            if let Some(slot) = self.ops.get_mut(&seq) {
                slot.flags &= !UNAPPENDED;
            }
            self.max_seq = self.max_seq.max(seq);
            return Ok(());
        }
        let slot = self.step_slot(seq, name, "Began")?;
        let last = slot.attempt;
        if attempt != last.saturating_add(1) {
            return Err(Problem::AttemptOrder { seq, attempt, last });
        }
        Ok(())
    }

    fn take_resume(&mut self, seq: Seq) -> Taken {
        if seq == 0 {
            return Err(Problem::SeqZero { kind: "Resume" });
        }
        let next_seq = self.next_seq;
        match self.ops.get_mut(&seq) {
            Some(s) if s.kind != OpKind::Step => Err(Problem::WrongKind {
                kind: "Resume",
                seq,
                op: s.kind.as_str(),
            }),
            Some(s)
                if !s.has(ENDED) && !s.has(RESUMED) && s.attempt > 0 && s.retry_at_ms == PAUSED =>
            {
                s.flags |= RESUMED;
                Ok(())
            }
            Some(_) => Err(Problem::NotPaused { seq }),
            None if seq < next_seq => Err(Problem::Ended {
                kind: "Resume",
                seq,
            }),
            None => Err(Problem::NotStarted {
                kind: "Resume",
                seq,
                needs: "Attempt",
            }),
        }
    }

    /// A command record: from the journal, a slot for the code to match;
    /// appended, the record the machine asked for next.
    fn take_command(&mut self, live: bool, rec: &'static str, c: Command<'_>) -> Taken {
        let seq = c.seq;
        if seq == 0 {
            return Err(Problem::SeqZero { kind: rec });
        }
        // The code called every operation a record names before this one,
        // and takes numbers in call order.
        if seq <= self.max_seq {
            let max = self.max_seq;
            return Err(Problem::OutOfOrder {
                kind: rec,
                seq,
                max,
            });
        }
        if live {
            let kind = c.kind;
            if self.asked.front() != Some(&Asked::Command { seq, kind }) {
                return Err(Problem::NotAsked { kind: rec });
            }
            self.asked.pop_front();
            if let Some(slot) = self.ops.get_mut(&seq) {
                slot.flags &= !UNAPPENDED;
            }
        } else {
            let mut slot = Slot::new(c.kind, RECORDED);
            slot.name = self.keep(c.name)?;
            slot.extra = self.keep(c.extra)?;
            slot.value_kind = c.value_kind;
            slot.dones_before = self.dones_seen;
            self.ops.insert(seq, slot);
        }
        self.max_seq = seq;
        Ok(())
    }

    fn take_waited(&mut self, live: bool, seq: Seq, outcome: WaitOutcome) -> Taken {
        let payload = match outcome {
            WaitOutcome::Abandoned if live => {
                if self.asked.front() != Some(&Asked::Abandon { seq }) {
                    return Err(Problem::NotAsked {
                        kind: "Waited (abandoned)",
                    });
                }
                self.asked.pop_front();
                self.ops.remove(&seq);
                return Ok(());
            }
            WaitOutcome::Abandoned => {
                self.completion(seq, OpKind::Wait, "Waited")?.flags |= ENDED | ABANDONED;
                return Ok(());
            }
            WaitOutcome::Signal(ordinal) => {
                self.completion(seq, OpKind::Wait, "Waited")?;
                // Waits usually take the oldest signal: found at the front.
                let i = self
                    .signals
                    .iter()
                    .position(|s| s.ordinal == ordinal)
                    .ok_or(Problem::UnknownSignal { seq, ordinal })?;
                self.signals
                    .remove(i)
                    .map(|s| s.payload)
                    .unwrap_or_default()
            }
            WaitOutcome::TimedOut => {
                self.completion(seq, OpKind::Wait, "Waited")?;
                Span::default()
            }
        };
        self.end_op(seq);
        self.push_due(Due::Waited {
            seq,
            outcome,
            payload,
        });
        Ok(())
    }

    fn take_fired(&mut self, seq: Seq, rec: &'static str) -> Taken {
        self.completion(seq, OpKind::Sleep, rec)?.flags |= ENDED;
        self.push_due(Due::Fired { seq });
        Ok(())
    }

    fn take_child_done(&mut self, seq: Seq, status: Status, payload: &[u8]) -> Taken {
        let payload = self.keep(payload)?;
        self.completion(seq, OpKind::Child, "ChildDone")?.flags |= ENDED;
        self.push_due(Due::Child {
            seq,
            status,
            payload,
        });
        Ok(())
    }

    fn take_update(&mut self, id: &str, name: &str, payload: &[u8]) -> Taken {
        let ordinal = self.updates.len() as u64;
        let id = self.keep(id.as_bytes())?;
        let name = self.keep(name.as_bytes())?;
        let payload = self.keep(payload)?;
        self.updates.push(0);
        self.push_due(Due::Update {
            ordinal,
            id,
            name,
            payload,
        });
        Ok(())
    }

    fn take_update_done(&mut self, live: bool, ordinal: u64) -> Taken {
        let Some(flags) = usize::try_from(ordinal)
            .ok()
            .and_then(|i| self.updates.get(i).copied())
        else {
            return Err(Problem::UnknownUpdate { ordinal });
        };
        if flags & UPDATE_RECORDED != 0 {
            return Err(Problem::UnknownUpdate { ordinal });
        }
        if live {
            if self.asked.front() != Some(&Asked::UpdateDone { ordinal }) {
                return Err(Problem::NotAsked { kind: "UpdateDone" });
            }
            self.asked.pop_front();
        } else {
            self.dones.push_back(RecordedDone {
                ordinal,
                need: self.max_seq,
            });
        }
        if let Some(f) = usize::try_from(ordinal)
            .ok()
            .and_then(|i| self.updates.get_mut(i))
        {
            *f |= UPDATE_RECORDED;
        }
        self.dones_seen = self.dones_seen.saturating_add(1);
        Ok(())
    }

    /// The run's `Done`. From the journal, it is the code's own when it
    /// names no outside `by` and has a status code returns; appended, when
    /// the machine asked for it. One from outside drops what the code was
    /// still to append: records after the end wake nothing.
    fn take_done(&mut self, live: bool, status: Status, no_by: bool) {
        let by_code = if live {
            let asked = self.asked.front() == Some(&Asked::Done);
            self.asked.clear();
            asked
        } else {
            no_by
                && matches!(
                    status,
                    Status::Ok | Status::Failed | Status::Cancelled | Status::ContinuedAsNew
                )
        };
        self.end = Some(End { status, by_code });
    }
}

/// A command record's identity, as the code's call must repeat it.
struct Command<'a> {
    kind: OpKind,
    seq: Seq,
    name: &'a [u8],
    extra: &'a [u8],
    value_kind: u8,
}

impl<'a> Command<'a> {
    fn new(kind: OpKind, seq: Seq, name: &'a str) -> Self {
        Self {
            kind,
            seq,
            name: name.as_bytes(),
            extra: &[],
            value_kind: 0,
        }
    }
}

/// The most byte-store capacity [`RunMachine::take_journal`] reserves
/// before a build.
const KEEP_RESERVE_MAX: usize = 1024;
