//! [`RunMachine`]: the pure machine between one run's journal and that
//! run's workflow code.
//!
//! The engine's `Ctx` is a thin wrapper around it; a language binding or a
//! remote worker drives it the same way. Inputs are calls (the code's
//! operations, [`RunMachine::handle_record`] for every record appended to
//! the run); outputs are answers and [`RunMachine::poll_delivery`]. It does
//! no I/O, reads no clock and knows no async runtime.
//!
//! # The model
//!
//! A run's journal holds two sorts of record:
//!
//! - **Commands**, which workflow code produces as it calls an operation,
//!   appended at the call and so in call order: `Timer` (sleep), `Wait`,
//!   `Child`, `Send`, `Value`, `Patch`, `UpdateDone`, `Waited { Abandoned }`
//!   (the code dropped a wait), the code's `Done`, and a step's first
//!   `Began` (its first attempt's start, asked at the call so that code
//!   calling another step there after a crash is caught).
//! - **Completions and inputs**, which arrive from outside whenever they
//!   arrive: a step's later `Began`s (a retry, or an attempt run again
//!   after a crash, recorded as it starts), its `Attempt`s and `Step`
//!   result, `Resume`, `Fired`,
//!   `Waited` (a signal or a timeout), `ChildDone`, `Signal`, `Cancel`,
//!   `Update`, an outside `Done` (terminate, deadline).
//!
//! `Heartbeat`, `Awaiting`, `Completed`, `Chunk`, `StreamEnd` and
//! `Attributes` are the host's: checked for their run, otherwise passed
//! over (they wake no code and take no number).
//!
//! Each operation the code calls takes the next **sequence number**, from
//! 1: its identity is its call order. Steps, sleeps, waits, children,
//! sends, values and patch markers take one; an update handler's return
//! and the run's end do not (their records carry none, so a number given
//! to them would be a hole the journal cannot show).
//!
//! **Deliveries** are the completions that wake code: a step's result,
//! `Fired`, `Waited` with a signal or a timeout, `ChildDone`, `Cancel`, and
//! an accepted `Update` (its handler starts there, so its operations get
//! the same numbers on every run; an update-with-start is the first
//! delivery). They go to the code one at a time, in journal order, and the
//! host runs the code to quiescence between two: `poll_delivery` is the
//! host saying "the code is quiescent, what is next". A completion appended
//! while recorded ones are still to be delivered waits behind them, and
//! live execution follows the same rule, so concurrent branches (`join!`,
//! `select!`) see the same interleaving after a crash as before it.
//!
//! # What the journal proves, and the determinism checks
//!
//! Positions in the journal give upper bounds on when the code did things,
//! never lower bounds (a completion may be appended while the code is still
//! running before its turn). The machine checks exactly what they prove:
//!
//! - the record at an operation's sequence number has the kind and name the
//!   code calls: a step that only began (its `Began`, no result) counts,
//!   so a step swapped for another while in flight is caught (a number
//!   with no record but records after it can only be a step of a journal
//!   written before `Began` existed, whose result is not in yet);
//! - every operation named by a record before a delivery, a recorded
//!   `UpdateDone` or the recorded end was called before the code gets that
//!   delivery, returns that handler or finishes (each was called before its
//!   first record was appended);
//! - a command whose record comes after a recorded `UpdateDone` is called
//!   after that handler returns, and nothing is called after the code's
//!   recorded end.
//!
//! A failure is a [`DeterminismError`] naming the run, the operation, what
//! the journal holds and what the code did. An operation past the end of
//! the journal while recorded deliveries remain is live, not an error: the
//! crash may have cut its record while keeping a completion appended
//! earlier. For the same reason the code may finish while recorded
//! deliveries remain (a `select!` loser's result), but not while the
//! journal names an operation it has not called. Dropped waits
//! (`Waited { Abandoned }`) are matched by operation, not by position: the
//! moment a future is dropped is the runtime's.
//!
//! A recorded `Done` counts as the code's own when it names no outside
//! `by` and its status is one code returns (ok, failed, cancelled,
//! continued-as-new): replayed against it (to check new code against old
//! journals), the code must finish there with that status. Past any other
//! `Done` (terminated, timed out, reset) the code may call nothing.
//!
//! # The host's part
//!
//! 1. Build the machine from the run's journal (canonical records, the
//!    first its `Start`) and the LSN of its latest record. If
//!    [`RunMachine::end`] says the journal holds the run's `Done`, the run
//!    needs no code.
//! 2. Run the code. Each operation is a call here; an answer of
//!    `Append(seq)` asks the host to build the operation's record with that
//!    sequence number, append it, and pass it to `handle_record` with its
//!    LSN, in the order asked, before it reads the gate LSN.
//! 3. Pass every other record appended for the run to `handle_record` too
//!    (it may do so before appending, with the LSN the record will take: a
//!    refused record changes nothing, so the host can drop an input the
//!    run's state does not allow rather than log it).
//! 4. With the code quiescent, call `poll_delivery`, hand what it returns to
//!    the code, run the code to quiescence, and again until it returns
//!    `None`.
//! 5. Start a step attempt the machine names only once its `Began` is
//!    appended and the log is durable through [`RunMachine::gate_lsn`]
//!    (which then covers the `Began`), and its retry time has come. The
//!    first attempt's `Began` is asked at the call ([`StepStart::began`]);
//!    any other attempt's (a retry, one run again after a crash or a
//!    rebuild) the host appends when the attempt is due. After a crash, a
//!    retry timer or a `Resume`, [`RunMachine::step_attempt`] says which
//!    attempt is next.
//! 6. On a [`DeterminismError`], fail or suspend the run: append nothing for
//!    the call that failed.
//!
//! # Invariants
//!
//! - Sequence numbers the code gets are consecutive from 1; a live command
//!   record takes a number above every number the journal names, so the
//!   records appended after a rebuild continue the journal without a
//!   repeated or skipped number.
//! - Deliveries leave in journal order, one per `poll_delivery`.
//! - No journal bytes make the machine panic; memory grows only with
//!   records given to it (at most one slot, one pending delivery or one
//!   buffered signal per record, and their bytes), and the bytes of what
//!   was delivered are dropped as the code consumes them. Operations that
//!   are over leave no slot, so a long live run costs what is pending, not
//!   what it did. The bytes held at once are limited to 4 GiB
//!   ([`Problem::TooLarge`]); records the host was asked for and has not
//!   appended, to [`MAX_ASKED`].
//!
//! # What it deliberately does not know
//!
//! What `ShardCore` owns: timers and their firing, matching signals to
//! waits, outputs and their release, parking. Retry policies (the code's
//! `.retry(policy)` decides each `Attempt`), payload encodings, the clock,
//! durability (it reports the gate LSN; the host knows the durable one).

mod deliver;
mod error;
mod journal;
mod ops;
mod slots;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::record::{Lsn, RunId, Seq, Status};

pub use deliver::Delivery;
pub use error::{
    Call, DeterminismError, Did, Held, JournalError, Mismatch, OpError, Position, Problem,
};
pub use ops::{
    Abandon, Answer, Attempt, Issued, Patched, RetryAt, StepRun, StepStart, ValueAnswer,
};

use slots::{Asked, Buffered, Due, Pending, RecordedDone, Slot};

/// At most this many records may be asked for and not reported appended:
/// the host appends each as it is asked, so this only stops a host that
/// does not.
pub const MAX_ASKED: usize = 1 << 16;

/// The byte store is compacted when it grows past this size and twice what
/// survived the last compaction.
const COMPACT_MIN: usize = 4096;

/// How a run's journal says it ended.
#[derive(Clone, Copy, Debug)]
struct End {
    status: Status,
    /// The code recorded it (a `Done` asked for, or one with no `by` and a
    /// status code returns): replayed code must finish there, after every
    /// operation the journal names, and call nothing after it. (Records
    /// after a `Done` are ignored, so what the code must have done first is
    /// everything the machine holds.)
    by_code: bool,
}

/// The machine between one run's journal and its workflow code. See the
/// [module docs](self) for the model and the host's part.
#[derive(Debug)]
pub struct RunMachine {
    /// 0: no run built.
    run: RunId,
    gate_lsn: Lsn,
    end: Option<End>,
    /// Names and payloads still needed, addressed by `Span`s.
    bytes: Vec<u8>,
    /// Operations recorded and not called yet, or called and not over.
    ops: FxHashMap<Seq, Slot>,
    deliveries: VecDeque<Pending>,
    /// The delivery handed out last, readable until the next poll.
    current: Option<Due>,
    signals: VecDeque<Buffered>,
    signal_count: u64,
    /// Per accepted update (by ordinal): `UPDATE_*` flags.
    updates: Vec<u8>,
    /// Recorded `UpdateDone`s the code has not matched, in journal order.
    dones: VecDeque<RecordedDone>,
    /// `UpdateDone` records taken (recorded and appended).
    dones_seen: u32,
    /// Handlers the code returned.
    dones_called: u32,
    /// Records asked for and not reported appended, in the order asked.
    asked: VecDeque<Asked>,
    next_seq: Seq,
    /// The largest sequence number any record names.
    max_seq: Seq,
    /// Records taken, for error positions.
    records: u32,
    /// Deliveries from the built journal not handed out yet.
    recorded_due: usize,
    /// The code finished (called `finish`).
    code_finished: bool,
    compact_at: usize,
}

impl Default for RunMachine {
    fn default() -> Self {
        Self::new()
    }
}

impl RunMachine {
    /// An empty machine holding no run; [`rebuild`](Self::rebuild) gives it
    /// one.
    pub fn new() -> Self {
        Self {
            run: 0,
            gate_lsn: 0,
            end: None,
            bytes: Vec::new(),
            ops: FxHashMap::default(),
            deliveries: VecDeque::new(),
            current: None,
            signals: VecDeque::new(),
            signal_count: 0,
            updates: Vec::new(),
            dones: VecDeque::new(),
            dones_seen: 0,
            dones_called: 0,
            asked: VecDeque::new(),
            next_seq: 1,
            max_seq: 0,
            records: 0,
            recorded_due: 0,
            code_finished: false,
            compact_at: COMPACT_MIN,
        }
    }

    /// A machine for run `run` built from its journal (canonical records
    /// concatenated in log order, the first its `Start`) and the LSN of its
    /// latest record. See [`rebuild`](Self::rebuild).
    pub fn build(run: RunId, journal: &[u8], gate_lsn: Lsn) -> Result<Self, JournalError> {
        Self::build_with_input(run, journal, gate_lsn).map(|(m, _)| m)
    }

    /// [`build`](Self::build), also giving the run's input (its `Start`'s,
    /// borrowed from `journal`): a code start needs it, and decoding the
    /// `Start` a second time would cost as much as the rest of a short
    /// journal's build.
    pub fn build_with_input(
        run: RunId,
        journal: &[u8],
        gate_lsn: Lsn,
    ) -> Result<(Self, &[u8]), JournalError> {
        let mut m = Self::new();
        let input = m.rebuild_with_input(run, journal, gate_lsn)?;
        Ok((m, input))
    }

    /// Makes this machine run `run`'s, from its journal and the LSN of its
    /// latest record, keeping the memory it has. A malformed journal (not
    /// starting with `run`'s `Start`, records of another run, undecodable
    /// bytes, sequence numbers out of order, completions of operations no
    /// record started) is an error, after which the machine holds no run.
    /// Stream chunks, which the machine keeps nothing of, are framed and
    /// counted, not decoded (a long stream costs a varint a chunk): a
    /// chunk's fields, its run's ID among them, are not checked here.
    pub fn rebuild(
        &mut self,
        run: RunId,
        journal: &[u8],
        gate_lsn: Lsn,
    ) -> Result<(), JournalError> {
        self.rebuild_with_input(run, journal, gate_lsn).map(|_| ())
    }

    /// [`rebuild`](Self::rebuild), giving the run's input (its `Start`'s,
    /// borrowed from `journal`).
    fn rebuild_with_input<'j>(
        &mut self,
        run: RunId,
        journal: &'j [u8],
        gate_lsn: Lsn,
    ) -> Result<&'j [u8], JournalError> {
        self.reset();
        self.run = run;
        self.gate_lsn = gate_lsn;
        let built = self.take_journal(journal);
        if built.is_err() {
            self.reset();
        }
        built
    }

    /// Forgets the run, keeping the memory for the next
    /// [`rebuild`](Self::rebuild).
    pub fn reset(&mut self) {
        self.run = 0;
        self.gate_lsn = 0;
        self.end = None;
        self.bytes.clear();
        self.ops.clear();
        self.deliveries.clear();
        self.current = None;
        self.signals.clear();
        self.signal_count = 0;
        self.updates.clear();
        self.dones.clear();
        self.dones_seen = 0;
        self.dones_called = 0;
        self.asked.clear();
        self.next_seq = 1;
        self.max_seq = 0;
        self.records = 0;
        self.recorded_due = 0;
        self.code_finished = false;
        self.compact_at = COMPACT_MIN;
    }

    /// The run (0 when the machine holds none).
    pub fn run(&self) -> RunId {
        self.run
    }

    /// The LSN of the run's latest record: the host starts a step attempt
    /// only once the log is durable through it. `None` while a record the
    /// machine asked for is not reported appended (its LSN is not known).
    pub fn gate_lsn(&self) -> Option<Lsn> {
        self.asked.is_empty().then_some(self.gate_lsn)
    }

    /// How the run ended, once its journal holds a `Done`. A run built from
    /// a journal that holds one needs no code (the code may still be
    /// replayed against it, to check it).
    pub fn end(&self) -> Option<Status> {
        self.end.map(|e| e.status)
    }

    /// Whether the code has not caught up with the journal it was built
    /// from: recorded operations it has not called, or recorded deliveries
    /// it has not received.
    pub fn is_replaying(&self) -> bool {
        self.max_seq >= self.next_seq || self.recorded_due > 0 || !self.dones.is_empty()
    }

    /// The sequence number the code's next operation takes.
    pub fn next_seq(&self) -> Seq {
        self.next_seq
    }

    /// Deliveries waiting for the code.
    pub fn pending_deliveries(&self) -> usize {
        self.deliveries.len()
    }

    /// Records asked for and not reported appended yet.
    pub fn unappended(&self) -> usize {
        self.asked.len()
    }

    /// Heap bytes the machine holds, from its containers' capacities (the
    /// hash map's from its bucket count, as hashbrown lays it out).
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let cap = self.ops.capacity();
        let buckets = match cap {
            0 => 0,
            1..=3 => 4,
            4..=7 => 8,
            _ => cap / 7 * 8,
        };
        // Entries, one control byte per bucket and a trailing group.
        let map = if buckets == 0 {
            0
        } else {
            buckets * (size_of::<(Seq, Slot)>() + 1) + 16
        };
        self.bytes.capacity()
            + map
            + self.deliveries.capacity() * size_of::<Pending>()
            + self.signals.capacity() * size_of::<Buffered>()
            + self.updates.capacity()
            + self.dones.capacity() * size_of::<RecordedDone>()
            + self.asked.capacity() * size_of::<Asked>()
    }
}
