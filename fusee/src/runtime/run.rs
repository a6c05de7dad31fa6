//! A live run's state ([`RunState`]), shared by its workflow code (through
//! [`crate::Ctx`]) and its shard loop, on the shard thread, and its live
//! steps ([`StepSpec`]). The runtime makes and drives it; its fields are
//! private, and each side goes through the methods below: the `Ctx` side
//! (issue an operation, take its outcome, register handlers) and the loop's
//! side (set the time, take what the code asked for, deliver, start and
//! end step attempts).
//!
//! This file imports nothing of `ctx` or of the rest of the runtime, so
//! `ctx` may import it without a circle: the registry it holds is generic
//! over the context type ([`Code`]), as `registry` itself is.
//!
//! # Retry state: one owner
//!
//! Which attempt of a step runs next, and when (now, at a time, or only
//! after a `Resume`), is the run's [`RunMachine`]'s: it reads it from the
//! journal (the latest `Attempt`'s number and `retry_at_ms`, a `Resume`
//! after it), live and after a crash alike, so no other copy can disagree
//! with what a recovery rebuilds. The loop never computes it: a step's
//! [`StepSpec`] holds the machine's answer ([`RunMachine::step`] at the
//! call, [`RunMachine::step_attempt`] after each `Attempt` or `Resume` the
//! loop appends for it), so starting a step looks nothing up. When a
//! retry's time comes is the core's retry timer, armed by
//! [`fusee_core::shard::ShardCore::apply`] from the same `Attempt` record
//! (a parked run has no machine, and the timer is what wakes the loop:
//! `ShardLoop::next_wake` reads it through `ShardCore::next_timer`, and
//! no step is scanned for it).
//!
//! # Time limits and heartbeats: the running attempt's
//!
//! A running attempt's deadline (its timeout, its heartbeat timeout, the
//! policy's schedule-to-close limit) and its heartbeat details not yet
//! recorded are its [`StepSpec`]'s, not the machine's: no record holds a
//! deadline (a crash forgets the attempt, and the one run again counts
//! from its own start). What must survive a crash comes from the journal:
//! the step's first `Began` (where schedule-to-close counts from) and its
//! latest `Heartbeat` (what the next attempt reads), read once for a step
//! this process did not begin ([`StepSpec::needs_history`]). The loop's
//! `steps::Watch` orders the deadlines and records heartbeats on a tick.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use fusee_core::record::{
    Name, Payload, Record, RecordBuf, RunId, Seq, Status, WaitOutcome, iter_canonical,
};
use fusee_core::run::{Abandon, Attempt, Issued, OpError, RetryAt, RunMachine, StepRun};
use rustc_hash::FxHashMap;

use crate::client::CurrentStep;
use crate::registry::{Code, Registry, RunFuture};
use crate::retry::{DEFAULT_POLICY, Decision, RetryPolicy};
use crate::step::{
    AttemptLink, Cancellable, StepCancel, StepContext, StepError, StepFn, StepFuture, Timeouts,
};
use crate::workflow::Failure;

/// A live step the shard must run: the function and its policy, kept until
/// the step's final record. Small, as every step has one: what only a step
/// with a policy of its own, a time limit or heartbeats needs is out of
/// line ([`StepExtra`]).
pub(crate) struct StepSpec {
    name: Name,
    f: StepFn,
    /// When its first attempt (since the latest resume) began, by its
    /// `Began` (for the policy's time limits); `None` before it began.
    first_ms: Option<u64>,
    /// The attempt to run next and when: the machine's answer as of the
    /// latest record for the step (see the [module docs](self)); `None`
    /// once the machine has no attempt to run.
    next: Option<Attempt>,
    /// Attempts made before the latest resume ([`crate::Engine::resume_step`]):
    /// the policy counts only the attempts since.
    resumed_after: u32,
    /// The attempt whose `Began` this process appended (at the call for a
    /// new step's first attempt, else when the attempt came due): that
    /// attempt starts once the run is durable through its gate LSN, which
    /// then covers the `Began`. Any other attempt needs its own first.
    began: Option<u32>,
    /// The attempt running (0: none; attempts count from 1).
    running: u32,
    /// Whether the step was cancelled (its run cancelled, or its future
    /// dropped by the workflow): no attempt starts after it, a failure
    /// after it is final ([`StepSpec::due`]).
    cancelled: Cancel,
    /// Whether `first_ms` and the latest recorded heartbeat are known:
    /// true for a step new in this process; else read from the run's
    /// journal before its first attempt here starts
    /// ([`StepSpec::read_history`]).
    known: bool,
    /// A step's own policy, time limits and heartbeat state: `None` for a
    /// step with the default policy, no limit, that never heartbeated
    /// (most), which pays nothing for any of them.
    extra: Option<Box<StepExtra>>,
}

/// What only a step with a policy of its own, a time limit or heartbeats
/// keeps: made by its builder ([`crate::Step`]) for the first two, moved
/// into its [`StepSpec`], or by its first heartbeat.
#[derive(Default)]
pub(crate) struct StepExtra {
    /// Its retry policy.
    pub(crate) policy: RetryPolicy,
    /// Its per-attempt and heartbeat timeouts.
    pub(crate) timeouts: Timeouts,
    /// Whether the workflow waits for it when its run is cancelled (the
    /// code's side only reads it: [`crate::Step::on_cancel`]).
    pub(crate) wait_on_cancel: bool,
    /// Whether it has a limit (a timeout, or the policy's
    /// schedule-to-close): its attempts are watched and cancellable.
    limited: bool,
    /// The latest heartbeat details recorded for the step.
    beat: Option<Arc<[u8]>>,
    /// When the running attempt started.
    started_ms: u64,
    /// The running attempt's latest sign of life: its start or its latest
    /// heartbeat.
    alive_ms: u64,
    /// The running attempt's cancel (a limited step's).
    link: Option<Arc<AttemptLink>>,
    /// Details the running attempt reported that are not recorded yet.
    pending: Option<Vec<u8>>,
    /// The deadline the running attempt's entry in the loop's watch has
    /// (`steps::Watch`).
    deadline: Option<u64>,
}

/// Whether, and why, a live step was cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cancel {
    /// It was not.
    No,
    /// Its run was cancelled while it was live.
    Run,
    /// The workflow dropped its future before its result.
    Dropped,
}

/// Which limit a timed-out attempt passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Limit {
    Attempt(Duration),
    Heartbeat(Duration),
    ScheduleToClose(Duration),
}

/// Whether a step's next attempt may start now.
pub(crate) enum Due {
    /// Start attempt number `.0` now.
    Now(u32),
    /// Its retry time has not come: the core's retry timer wakes the loop.
    Later,
    /// Running, paused until a `Resume`, or with no attempt to run.
    No,
}

impl StepSpec {
    /// The step's name.
    pub(crate) fn name(&self) -> &Name {
        &self.name
    }

    /// Whether its next attempt may start at `now_ms`.
    #[inline]
    pub(crate) fn due(&self, now_ms: u64) -> Due {
        let Some(next) = self.next else {
            return Due::No;
        };
        if self.running != 0 {
            return Due::No;
        }
        // A cancelled step runs no attempt: its failure is recorded now,
        // whatever its retry time.
        if self.cancelled != Cancel::No {
            return Due::Now(next.attempt);
        }
        match next.at {
            RetryAt::Now => Due::Now(next.attempt),
            RetryAt::At { retry_at_ms } if retry_at_ms <= now_ms => Due::Now(next.attempt),
            RetryAt::At { .. } => Due::Later,
            RetryAt::Paused => Due::No,
        }
    }

    /// The `Began` attempt `attempt` needs before it starts, if this
    /// process has not appended one for it (a retry, or an attempt the
    /// journal holds begun or failed before a crash or a rebuild): the loop
    /// appends it and starts the attempt once it is durable. `None` when
    /// it is appended already.
    pub(crate) fn began_record(
        &mut self,
        run: RunId,
        seq: Seq,
        attempt: u32,
        now_ms: u64,
    ) -> Option<RecordBuf> {
        if self.began == Some(attempt) {
            return None;
        }
        self.began = Some(attempt);
        self.first_ms.get_or_insert(now_ms);
        Some(RecordBuf::Began {
            run,
            seq,
            name: self.name.clone(),
            attempt,
            started_ms: now_ms,
        })
    }

    /// Starts attempt `attempt` at `now_ms` with context `cx`: the
    /// function's future, cancellable by the loop when the step has a time
    /// limit.
    #[inline]
    pub(crate) fn begin(&mut self, attempt: u32, now_ms: u64, cx: StepContext) -> StepFuture {
        self.first_ms.get_or_insert(now_ms);
        self.running = attempt;
        let future = (self.f)(cx);
        let Some(w) = self.extra.as_deref_mut() else {
            return future;
        };
        w.started_ms = now_ms;
        w.alive_ms = now_ms;
        w.pending = None;
        w.deadline = None;
        if !w.limited {
            w.link = None;
            return future;
        }
        let link = Arc::new(AttemptLink::default());
        w.link = Some(Arc::clone(&link));
        Cancellable::wrap(future, link)
    }

    /// The attempt running, if one is.
    #[inline]
    pub(crate) fn running(&self) -> Option<u32> {
        (self.running != 0).then_some(self.running)
    }

    /// The attempt running ended: its details not recorded yet that the
    /// loop took, and the deadline its entry in the loop's watch has, if
    /// any.
    #[inline]
    pub(crate) fn ended(&mut self) -> (Option<Vec<u8>>, Option<u64>) {
        self.running = 0;
        match self.extra.as_deref_mut() {
            None => (None, None),
            Some(w) => {
                w.link = None;
                (w.pending.take(), w.deadline.take())
            }
        }
    }

    /// The latest heartbeat details recorded for the step, for its next
    /// attempt's context.
    #[inline]
    pub(crate) fn last_beat(&self) -> Option<Arc<[u8]>> {
        self.extra.as_ref().and_then(|w| w.beat.clone())
    }

    /// Details `details` of the step are recorded (a `Heartbeat`).
    pub(crate) fn beat_recorded(&mut self, details: &[u8]) {
        self.extra.get_or_insert_with(Box::default).beat = Some(Arc::from(details));
    }

    /// Attempt `attempt` sent a heartbeat with `details` at `now_ms`: true
    /// if they are the first of it waiting to be recorded.
    pub(crate) fn heartbeat(&mut self, attempt: u32, details: Vec<u8>, now_ms: u64) -> bool {
        if self.running() != Some(attempt) {
            return false;
        }
        let w = self.extra.get_or_insert_with(Box::default);
        w.alive_ms = w.alive_ms.max(now_ms);
        w.pending.replace(details).is_none()
    }

    /// Attempt `attempt`'s details waiting to be recorded, taken.
    pub(crate) fn take_pending(&mut self, attempt: u32) -> Option<Vec<u8>> {
        if self.running() != Some(attempt) {
            return None;
        }
        self.extra.as_mut().and_then(|w| w.pending.take())
    }

    /// When the running attempt times out (the earliest of its own
    /// timeout, its heartbeat timeout and the policy's schedule-to-close
    /// limit), and which limit that is; `None` with no attempt running or
    /// no limit.
    fn deadline(&self) -> Option<(u64, Limit)> {
        self.running()?;
        let w = self.extra.as_deref().filter(|w| w.limited)?;
        let after = |from: u64, d: Duration| from.saturating_add(d.as_millis() as u64);
        [
            w.timeouts
                .attempt
                .map(|d| (after(w.started_ms, d), Limit::Attempt(d))),
            w.timeouts
                .heartbeat
                .map(|d| (after(w.alive_ms, d), Limit::Heartbeat(d))),
            w.policy
                .schedule_to_close
                .zip(self.first_ms)
                .map(|(d, first)| (after(first, d), Limit::ScheduleToClose(d))),
        ]
        .into_iter()
        .flatten()
        .min_by_key(|(at, _)| *at)
    }

    /// When the running attempt times out, if it can: the time the loop
    /// watches it at from now on (kept, so its entry is removed when it
    /// ends).
    #[inline]
    pub(crate) fn watch_at(&mut self) -> Option<u64> {
        self.extra.as_ref()?;
        let at = self.deadline().map(|(at, _)| at);
        if let Some(w) = self.extra.as_deref_mut() {
            w.deadline = at;
        }
        at
    }

    /// If attempt `attempt` is running and past its deadline at `now_ms`:
    /// cancels its future (dropped at its task's next poll) and returns
    /// its failure, kind `timeout` (final once the schedule-to-close limit
    /// passed, else retried by the policy).
    pub(crate) fn time_out(&mut self, attempt: u32, now_ms: u64) -> Option<StepError> {
        if self.running() != Some(attempt) {
            return None;
        }
        let (at, limit) = self.deadline()?;
        if at > now_ms {
            return None;
        }
        let name = &self.name;
        let error = match limit {
            Limit::Attempt(d) => StepError::retryable(format!(
                "step `{name}` attempt {attempt} ran past its timeout of {d:?}"
            )),
            Limit::Heartbeat(d) => StepError::retryable(format!(
                "step `{name}` attempt {attempt} sent no heartbeat within its heartbeat timeout of {d:?}"
            )),
            Limit::ScheduleToClose(d) => StepError::fatal(format!(
                "step `{name}` ran past its schedule-to-close limit of {d:?} (attempt {attempt} was running)"
            )),
        };
        if let Some(link) = self.extra.as_ref().and_then(|w| w.link.as_ref()) {
            link.cancel();
        }
        Some(error.kind("timeout"))
    }

    /// The failure of a step whose next attempt would start past its
    /// schedule-to-close limit, after attempt `attempt` failed with `e`.
    pub(crate) fn out_of_time(&self, attempt: u32, e: &StepError) -> StepError {
        let limit = self.policy().schedule_to_close.unwrap_or_default();
        StepError::fatal(format!(
            "step `{}` ran out of its schedule-to-close limit of {limit:?}: no retry after attempt {attempt}, which failed: {e}",
            self.name
        ))
        .kind("timeout")
    }

    /// Whether the step's start time and last heartbeat must be read from
    /// its run's journal before its next attempt starts here.
    #[inline]
    pub(crate) fn needs_history(&self) -> bool {
        !self.known
    }

    /// Reads, from its run's canonical journal, when the step's first
    /// attempt since its latest resume began and its latest heartbeat
    /// details: what a crash or an unload took from memory.
    fn read_history(&mut self, seq: Seq, journal: &[u8]) {
        self.known = true;
        for item in iter_canonical(journal) {
            let Ok((rec, _)) = item else { break };
            match rec {
                Record::Began {
                    seq: s, started_ms, ..
                } if s == seq => {
                    self.first_ms.get_or_insert(started_ms);
                }
                Record::Resume { seq: s, .. } if s == seq => self.first_ms = None,
                Record::Heartbeat {
                    seq: s, payload, ..
                } if s == seq => self.beat_recorded(payload),
                _ => {}
            }
        }
    }

    /// Whether the step was cancelled (see [`StepSpec::cancel_error`]).
    #[inline]
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled != Cancel::No
    }

    /// The failure recorded for a cancelled step whose attempt `attempt`
    /// never started (the run's cancel's reason `reason`).
    pub(crate) fn cancel_error(&self, attempt: u32, reason: &str) -> StepError {
        let why = match self.cancelled {
            Cancel::Dropped => StepCancel::Dropped,
            _ => StepCancel::RunCancelled(reason.to_string()),
        };
        StepError::fatal(format!(
            "step `{}` was cancelled before attempt {attempt} started: {why}",
            self.name
        ))
        .kind("cancelled")
    }

    /// The step's retry policy.
    #[inline]
    fn policy(&self) -> &RetryPolicy {
        self.extra.as_ref().map_or(&DEFAULT_POLICY, |w| &w.policy)
    }

    /// What the step's policy decides about failed attempt `attempt`
    /// (counted since the latest resume) of kind `kind`.
    pub(crate) fn decide(&self, attempt: u32, kind: Option<&str>, now_ms: u64) -> Decision {
        self.policy().decide(
            attempt.saturating_sub(self.resumed_after),
            kind,
            self.first_ms.unwrap_or(now_ms),
            now_ms,
        )
    }

    /// Whether an attempt could start without a record or a time coming
    /// first: it holds the run from parking.
    fn busy(&self) -> bool {
        self.running != 0
            || self
                .next
                .is_some_and(|a| a.at == RetryAt::Now || self.began == Some(a.attempt))
    }
}

/// A completion delivered to the code, kept until its operation's future
/// takes it.
#[derive(Debug)]
pub(crate) enum Outcome {
    Step { status: Status, payload: Vec<u8> },
    Fired,
    Signal(Vec<u8>),
    TimedOut,
    Child { status: Status, payload: Vec<u8> },
}

/// Why a run's code cannot go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The code departed from its journal: kept whole, as callers waiting
    /// on the run get it ([`crate::Error::Determinism`]).
    Determinism(Box<fusee_core::run::DeterminismError>),
    /// The machine refused a call or a record, or a completion does not
    /// fit its operation.
    Refused(String),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Determinism(e) => e.fmt(f),
            Fault::Refused(why) => f.write_str(why),
        }
    }
}

impl From<OpError> for Fault {
    fn from(e: OpError) -> Self {
        match e {
            OpError::Determinism(d) => Fault::Determinism(d),
            other => Fault::Refused(other.to_string()),
        }
    }
}

/// The state a run's code and its shard loop share, on the shard thread.
pub(crate) struct RunState<C: Code> {
    machine: RunMachine,
    run: RunId,
    id: Name,
    /// The loop's time, set before every poll.
    now_ms: u64,
    /// The latest time the run's journal holds as far as its code has
    /// seen (its start, every `now()` recorded or read back): the code's
    /// clock never reads earlier, so a restart on a clock behind the
    /// journal (an NTP step, a VM restore) cannot run the run's time
    /// backwards, for `now()` or for the fire time of a new sleep.
    floor_ms: u64,
    /// Records the code asked for, in order; the loop appends them after
    /// the poll.
    appends: Vec<RecordBuf>,
    /// Completions delivered and not yet taken, by operation.
    outcomes: FxHashMap<Seq, Outcome>,
    /// Wakers of pending operations.
    wakers: FxHashMap<Seq, Waker>,
    /// Live steps, by operation.
    steps: FxHashMap<Seq, StepSpec>,
    /// Running attempts told to stop by the code's side (its run
    /// cancelled, a step's future dropped): the loop tells the hub after
    /// the poll ([`RunState::take_step_cancels`]).
    step_cancels: Vec<(Seq, u32, StepCancel)>,
    /// Whether a step may need its history read from the journal
    /// ([`StepSpec::needs_history`]): set when one is made, cleared when
    /// read, so starting steps looks at no step for it otherwise.
    unknown_steps: bool,
    fault: Option<Fault>,
    /// Cancellations delivered to the code: an operation pending when one
    /// arrived ends with a `cancelled` error.
    cancels: u32,
    /// The latest cancellation's reason.
    cancel_reason: String,
    /// The code asked to continue as new with this input.
    continue_with: Option<Vec<u8>>,
    /// The workflow types registered (to refuse a child of an unknown type
    /// before anything is recorded).
    registry: Registry<C>,
    /// Update handlers the code registered, by name.
    updates: FxHashMap<String, UpdateHandler>,
    /// Query handlers the code registered, by name.
    queries: FxHashMap<String, QueryHandler>,
    /// The engine's payload limit ([`crate::Config::max_payload`]): a
    /// payload the code hands over beyond it is refused at the call, before
    /// anything is recorded, rather than a record the log would refuse.
    max_payload: usize,
    /// `Attributes` records the code made that the journal held when the
    /// code started, and the code's calls so far: call `n` records only
    /// past the first (`crate::attrs`).
    attrs_recorded: u32,
    attrs_called: u32,
}

/// An update handler, type-erased: its validator, and its code started
/// from the argument's bytes.
pub(crate) struct UpdateHandler {
    pub(crate) validate: Option<Validator>,
    pub(crate) start: HandlerStart,
}

/// An update's validator over the argument's bytes: `Err` is the reason the
/// caller is told.
pub(crate) type Validator = Box<dyn Fn(&[u8]) -> Result<(), String>>;

/// Starts an update handler's code from the argument's bytes.
pub(crate) type HandlerStart = Box<dyn Fn(&[u8]) -> RunFuture>;

/// A query handler, type-erased: argument bytes to result bytes.
pub(crate) type QueryHandler = Box<dyn Fn(&[u8]) -> Result<Vec<u8>, Failure>>;

/// Calls `f` with update handler `name`, taken out of the run's state
/// meanwhile: the handler's own code (its validator, the synchronous part
/// of its start) may use the run's [`crate::Ctx`], which borrows the
/// state. Put back after, unless the code registered a new one under the
/// name. `None` if there is no such handler.
pub(crate) fn with_update_handler<C: Code, R>(
    state: &RefCell<RunState<C>>,
    name: &str,
    f: impl FnOnce(&UpdateHandler) -> R,
) -> Option<R> {
    with_handler(state, name, |s| &mut s.updates, f)
}

/// [`with_update_handler`] for query handlers.
pub(crate) fn with_query_handler<C: Code, R>(
    state: &RefCell<RunState<C>>,
    name: &str,
    f: impl FnOnce(&QueryHandler) -> R,
) -> Option<R> {
    with_handler(state, name, |s| &mut s.queries, f)
}

/// [`with_update_handler`] over the handlers `map` picks.
fn with_handler<C: Code, H, R>(
    state: &RefCell<RunState<C>>,
    name: &str,
    map: fn(&mut RunState<C>) -> &mut FxHashMap<String, H>,
    f: impl FnOnce(&H) -> R,
) -> Option<R> {
    let handler = map(&mut state.borrow_mut()).remove(name)?;
    let out = f(&handler);
    map(&mut state.borrow_mut())
        .entry(name.to_string())
        .or_insert(handler);
    Some(out)
}

/// The loop's side.
impl<C: Code> RunState<C> {
    pub(crate) fn new(
        machine: RunMachine,
        run: RunId,
        id: Name,
        registry: Registry<C>,
        max_payload: usize,
    ) -> Self {
        Self {
            machine,
            run,
            id,
            now_ms: 0,
            floor_ms: 0,
            appends: Vec::new(),
            outcomes: FxHashMap::default(),
            wakers: FxHashMap::default(),
            steps: FxHashMap::default(),
            unknown_steps: false,
            step_cancels: Vec::new(),
            fault: None,
            cancels: 0,
            cancel_reason: String::new(),
            continue_with: None,
            registry,
            updates: FxHashMap::default(),
            queries: FxHashMap::default(),
            max_payload,
            attrs_recorded: 0,
            attrs_called: 0,
        }
    }

    /// The journal the code starts from holds `n` `Attributes` records the
    /// code made.
    pub(crate) fn set_code_attributes(&mut self, n: u32) {
        self.attrs_recorded = n;
    }

    /// The run's machine (fusee-core), which the loop hands every record
    /// appended for the run and asks for deliveries.
    #[inline]
    pub(crate) fn machine(&self) -> &RunMachine {
        &self.machine
    }

    /// [`machine`](Self::machine), to change.
    #[inline]
    pub(crate) fn machine_mut(&mut self) -> &mut RunMachine {
        &mut self.machine
    }

    /// The loop's time, set before every poll.
    #[inline]
    pub(crate) fn set_now(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
    }

    /// Why the code cannot go on, if it cannot (taken: asked once).
    #[inline]
    pub(crate) fn take_fault(&mut self) -> Option<Fault> {
        self.fault.take()
    }

    /// Running attempts the code's side cancelled since the last call:
    /// the loop tells them through its hub.
    #[inline]
    pub(crate) fn take_step_cancels(&mut self) -> Vec<(Seq, u32, StepCancel)> {
        std::mem::take(&mut self.step_cancels)
    }

    /// The run's running attempts (step, attempt), to tell when it ends.
    pub(crate) fn running_steps(&self) -> impl Iterator<Item = (Seq, u32)> + '_ {
        self.steps
            .iter()
            .filter(|(_, spec)| spec.running != 0)
            .map(|(seq, spec)| (*seq, spec.running))
    }

    /// The latest cancellation's reason.
    pub(crate) fn cancel_reason(&self) -> &str {
        &self.cancel_reason
    }

    /// The records the code asked for since the last call, in order.
    #[inline]
    pub(crate) fn take_appends(&mut self) -> Vec<RecordBuf> {
        std::mem::take(&mut self.appends)
    }

    /// Lends `spare`'s room for the records the next poll asks for, if the
    /// run holds none (the loop takes it back with
    /// [`take_appends`](Self::take_appends)).
    #[inline]
    pub(crate) fn lend_appends(&mut self, spare: &mut Vec<RecordBuf>) {
        if self.appends.capacity() == 0 {
            debug_assert!(spare.is_empty());
            std::mem::swap(&mut self.appends, spare);
        }
    }

    /// The input the code asked to continue as new with, if it did.
    pub(crate) fn take_continue(&mut self) -> Option<Vec<u8>> {
        self.continue_with.take()
    }

    /// A cancellation reached the code: every pending operation wakes, to
    /// end with a `cancelled` error.
    pub(crate) fn cancel(&mut self, reason: String) {
        self.cancels += 1;
        // Its live steps are cancelled: a running attempt is told, no
        // attempt starts after (a step called after it is not).
        for (seq, spec) in self.steps.iter_mut() {
            if spec.cancelled == Cancel::No {
                spec.cancelled = Cancel::Run;
                if spec.running != 0 {
                    let why = StepCancel::RunCancelled(reason.clone());
                    self.step_cancels.push((*seq, spec.running, why));
                }
            }
        }
        self.cancel_reason = reason;
        for (_, w) in self.wakers.drain() {
            w.wake();
        }
    }

    /// Hands a delivered completion to its operation and wakes it.
    #[inline]
    pub(crate) fn deliver(&mut self, seq: Seq, outcome: Outcome) {
        self.outcomes.insert(seq, outcome);
        if let Some(w) = self.wakers.remove(&seq) {
            w.wake();
        }
    }

    /// The update handlers the code registered, by name.
    pub(crate) fn update_names(&self) -> Vec<String> {
        self.updates.keys().cloned().collect()
    }

    /// The query handlers the code registered, by name.
    pub(crate) fn query_names(&self) -> Vec<String> {
        self.queries.keys().cloned().collect()
    }

    /// Update handler `name`, if the code registered one.
    pub(crate) fn update(&self, name: &str) -> Option<&UpdateHandler> {
        self.updates.get(name)
    }

    /// Whether one of the run's steps has an attempt to start (now or at
    /// its retry time) and none running.
    #[inline]
    pub(crate) fn has_step_to_start(&self) -> bool {
        self.steps
            .values()
            .any(|s| s.running == 0 && s.next.is_some())
    }

    /// The run's live steps, to start their attempts.
    #[inline]
    pub(crate) fn steps_mut(&mut self) -> impl Iterator<Item = (Seq, &mut StepSpec)> {
        self.steps.iter_mut().map(|(seq, spec)| (*seq, spec))
    }

    /// Live step `seq`.
    #[inline]
    pub(crate) fn step_mut(&mut self, seq: Seq) -> Option<&mut StepSpec> {
        self.steps.get_mut(&seq)
    }

    /// Step `seq` ended (its `Step` record): nothing more to run.
    #[inline]
    pub(crate) fn step_ended(&mut self, seq: Seq) {
        self.steps.remove(&seq);
    }

    /// Reads, from the run's whole canonical journal, what its steps that
    /// need it ([`StepSpec::needs_history`]) lost from memory.
    pub(crate) fn read_step_history(&mut self, journal: &[u8]) {
        self.unknown_steps = false;
        for (seq, spec) in self.steps.iter_mut() {
            if spec.needs_history() {
                spec.read_history(*seq, journal);
            }
        }
    }

    /// Whether one of the run's steps needs its history read
    /// ([`read_step_history`](Self::read_step_history)).
    #[inline]
    pub(crate) fn steps_need_history(&self) -> bool {
        self.unknown_steps
    }

    /// The loop appended an `Attempt` for step `seq`: its next attempt is
    /// the machine's answer now.
    pub(crate) fn step_retried(&mut self, seq: Seq) {
        let next = self.machine.step_attempt(seq);
        if let Some(spec) = self.steps.get_mut(&seq) {
            spec.next = next;
        }
    }

    /// The loop appended a `Resume` for paused step `seq`: the machine's
    /// next attempt, which its policy counts from 1 again.
    pub(crate) fn step_resumed(&mut self, seq: Seq) {
        let next = self.machine.step_attempt(seq);
        if let Some(spec) = self.steps.get_mut(&seq) {
            spec.next = next;
            if let Some(a) = next {
                spec.resumed_after = a.attempt - 1;
            }
            spec.first_ms = None;
        }
    }

    /// The steps paused until a `Resume`: operation, name and the attempt
    /// a resume runs, by operation.
    pub(crate) fn paused_steps(&self) -> Vec<(Seq, String, u32)> {
        let mut paused: Vec<(Seq, String, u32)> = self
            .steps
            .iter()
            .filter_map(|(seq, spec)| match spec.next {
                Some(Attempt {
                    attempt,
                    at: RetryAt::Paused,
                }) => Some((*seq, spec.name.to_string(), attempt)),
                _ => None,
            })
            .collect();
        paused.sort();
        paused
    }

    /// The run's earliest live step, as `describe` shows it.
    pub(crate) fn current_step(&self) -> Option<CurrentStep> {
        self.steps
            .iter()
            .min_by_key(|(seq, _)| **seq)
            .map(|(_, spec)| CurrentStep {
                name: spec.name.to_string(),
                attempt: spec.next.map_or(0, |a| a.attempt),
                running: spec.running != 0,
                paused: matches!(
                    spec.next,
                    Some(Attempt {
                        at: RetryAt::Paused,
                        ..
                    })
                ),
            })
    }

    /// The live steps' names, by operation.
    pub(crate) fn step_names(&self) -> impl Iterator<Item = (Seq, &Name)> {
        self.steps.iter().map(|(seq, spec)| (*seq, &spec.name))
    }

    /// Whether the code is quiescent: no delivery waiting, nothing asked
    /// and not appended, no attempt running or due now.
    pub(crate) fn quiescent(&self) -> bool {
        self.machine.pending_deliveries() == 0
            && self.machine.unappended() == 0
            && self.appends.is_empty()
            && self.steps.values().all(|spec| !spec.busy())
    }
}

/// The code's side (what [`crate::Ctx`] and its futures call).
impl<C: Code> RunState<C> {
    /// The run's number.
    #[inline]
    pub(crate) fn run(&self) -> RunId {
        self.run
    }

    /// The workflow ID.
    #[inline]
    pub(crate) fn id(&self) -> &Name {
        &self.id
    }

    /// The code's time at this poll: the loop's, or the latest time the
    /// run's journal holds if the loop's clock is behind it.
    #[inline]
    pub(crate) fn now_ms(&self) -> u64 {
        self.now_ms.max(self.floor_ms)
    }

    /// The run's journal holds time `ms` (its start, a recorded `now()`):
    /// the code's clock reads no earlier from now on.
    #[inline]
    pub(crate) fn saw_time(&mut self, ms: u64) {
        self.floor_ms = self.floor_ms.max(ms);
    }

    /// The workflow types registered.
    #[inline]
    pub(crate) fn registry(&self) -> &Registry<C> {
        &self.registry
    }

    /// Cancellations delivered to the code so far.
    #[inline]
    pub(crate) fn cancels(&self) -> u32 {
        self.cancels
    }

    /// `Err` (kind `too-large`) when `len` bytes of `what` exceed the
    /// payload limit.
    pub(crate) fn check_payload(&self, what: &str, len: usize) -> Result<(), Failure> {
        if len > self.max_payload {
            return Err(Failure::with_kind(
                "too-large",
                format!(
                    "{what} of {len} bytes exceeds the payload limit of {} bytes",
                    self.max_payload
                ),
            ));
        }
        Ok(())
    }

    /// The error of an operation cancelled while pending.
    pub(crate) fn cancelled(&self) -> Failure {
        Failure::with_kind("cancelled", self.cancel_reason.clone())
    }

    /// Asks the machine: its answer, or `None` when the run cannot go on
    /// (the fault is kept for the loop).
    #[inline]
    pub(crate) fn issue<T>(
        &mut self,
        call: impl FnOnce(&mut RunMachine) -> Result<T, OpError>,
    ) -> Option<T> {
        match call(&mut self.machine) {
            Ok(answer) => Some(answer),
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    /// The code sets search attributes: an `Attributes` record, unless the
    /// journal already holds this call's.
    pub(crate) fn set_attributes(&mut self, payload: Vec<u8>) {
        self.attrs_called += 1;
        if self.attrs_called > self.attrs_recorded {
            self.appends.push(RecordBuf::Attributes {
                run: self.run,
                payload: Payload::from(payload.as_slice()),
            });
        }
    }

    /// A record the code asks for: the loop appends it after the poll.
    #[inline]
    pub(crate) fn ask(&mut self, rec: RecordBuf) {
        self.appends.push(rec);
    }

    /// Issues a command operation once (`seq` remembers it): `call` asks
    /// the machine, and a live answer appends `record(run, seq)`. `None`
    /// when the run cannot go on (the fault is recorded).
    #[inline]
    pub(crate) fn command(
        &mut self,
        seq: &mut Option<Seq>,
        call: impl FnOnce(&mut RunMachine) -> Result<Issued, OpError>,
        record: impl FnOnce(RunId, Seq) -> RecordBuf,
    ) -> Option<Seq> {
        if let Some(seq) = *seq {
            return Some(seq);
        }
        let issued = self.issue(call)?;
        if let Issued::Append(n) = issued {
            let rec = record(self.run, n);
            self.appends.push(rec);
        }
        *seq = Some(issued.seq());
        *seq
    }

    /// The code calls step `name`: its operation, and, unless the journal
    /// holds its result, a live step the loop runs with `f` by `extra`'s
    /// policy and limits (`None`: the defaults).
    /// `None` when the run cannot go on.
    #[inline]
    pub(crate) fn call_step(
        &mut self,
        name: &Name,
        f: StepFn,
        extra: Option<Box<StepExtra>>,
    ) -> Option<Seq> {
        let start = self.issue(|m| m.step(name))?;
        if let StepRun::Attempt(a) = start.run {
            // A new step's first `Began`, asked by the machine in call
            // order: it rides in the flush of the records before it.
            let mut first_ms = None;
            let began = start.began.then(|| {
                let (run, seq, attempt) = (self.run, start.seq, a.attempt);
                let started_ms = self.now_ms();
                first_ms = Some(started_ms);
                self.appends.push(RecordBuf::Began {
                    run,
                    seq,
                    name: name.clone(),
                    attempt,
                    started_ms,
                });
                attempt
            });
            let extra = extra.map(|mut x| {
                x.limited =
                    x.timeouts != Timeouts::default() || x.policy.schedule_to_close.is_some();
                x
            });
            // A new step has no history; one the journal holds begun or
            // retried has.
            let known = began.is_some();
            self.unknown_steps |= !known;
            self.steps.insert(
                start.seq,
                StepSpec {
                    name: name.clone(),
                    f,
                    first_ms,
                    next: Some(a),
                    resumed_after: 0,
                    began,
                    running: 0,
                    cancelled: Cancel::No,
                    known,
                    extra,
                },
            );
        }
        Some(start.seq)
    }

    /// Operation `seq`'s outcome, if delivered; else a cancellation
    /// delivered since the operation was called (`cancels` then), as its
    /// error; else pending, woken by `waker` when either comes.
    #[inline]
    pub(crate) fn poll_outcome(
        &mut self,
        seq: Seq,
        cancels: u32,
        waker: &Waker,
    ) -> Poll<Result<Outcome, Failure>> {
        if let Some(outcome) = self.outcomes.remove(&seq) {
            return Poll::Ready(Ok(outcome));
        }
        if self.cancels > cancels {
            return Poll::Ready(Err(self.cancelled()));
        }
        self.wakers.insert(seq, waker.clone());
        Poll::Pending
    }

    /// The code cannot go on: `why`.
    pub(crate) fn refuse(&mut self, why: String) {
        self.fault = Some(Fault::Refused(why));
    }

    /// The code asks to continue as new with `input`.
    pub(crate) fn continue_as_new(&mut self, input: Vec<u8>) {
        self.continue_with = Some(input);
    }

    /// Registers update handler `name`.
    pub(crate) fn on_update(&mut self, name: String, handler: UpdateHandler) {
        self.updates.insert(name, handler);
    }

    /// Registers query handler `name`.
    pub(crate) fn on_query(&mut self, name: String, handler: QueryHandler) {
        self.queries.insert(name, handler);
    }

    /// Step `seq`'s future was dropped before its result (it lost a
    /// race): the step is cancelled (its running attempt told, no attempt
    /// after), unless it was already or has ended.
    pub(crate) fn abandon_step(&mut self, seq: Seq) {
        self.wakers.remove(&seq);
        let Some(spec) = self.steps.get_mut(&seq) else {
            return;
        };
        if spec.cancelled == Cancel::No {
            spec.cancelled = Cancel::Dropped;
            if spec.running != 0 {
                self.step_cancels
                    .push((seq, spec.running, StepCancel::Dropped));
            }
        }
    }

    /// Wait `seq` was dropped before it ended (it lost a race): recorded
    /// as abandoned, so the signal offered to it goes to another wait.
    pub(crate) fn abandon_wait(&mut self, seq: Seq) {
        self.wakers.remove(&seq);
        if self.machine.abandon_wait(seq) == Abandon::Append {
            let run = self.run;
            self.appends.push(RecordBuf::Waited {
                run,
                seq,
                outcome: WaitOutcome::Abandoned,
            });
        }
    }

    fn fail(&mut self, e: OpError) {
        if self.fault.is_none() {
            self.fault = Some(Fault::from(e));
        }
    }
}
