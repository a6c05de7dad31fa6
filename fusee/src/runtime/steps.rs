//! Step attempts: begun (a `Began` record: a new step's first at its
//! call, in the flush of the records before it; a retry's, or an attempt
//! run again after a crash, when it comes due), started once their run is
//! durable through its gate LSN, which covers the `Began` (and their retry
//! time has come), run by the driver, and recorded when they end: the result (`Step`), or a failure the retry policy retries
//! (`Attempt` with the next attempt's time, or paused) or gives up on;
//! either carries the attempt's end time (`ended_ms`).
//!
//! # Timeouts and heartbeats ([`Watch`])
//!
//! A running attempt's deadline (its own timeout from its start, its
//! heartbeat timeout from its latest heartbeat, its policy's
//! schedule-to-close limit from its step's first `Began`) is the loop's,
//! not the core's timers: it is no record's, and a crash forgets it with
//! the attempt, whose run again after the crash counts from its new start.
//! [`Watch`] keeps the deadlines in order, looked at each pass and given
//! to `next_wake`; an attempt past its deadline is recorded as failed
//! (kind `timeout`) like any failure, and its future cancelled: the
//! driver's task drops it at its next poll, and its late end, if any, is
//! ignored (it is no longer the running attempt).
//!
//! Only a step with a limit is watched, its future wrapped to be
//! cancelled and given an [`AttemptLink`]; any other attempt costs nothing
//! here.
//!
//! Heartbeats wait in the shard's [`crate::step::StepHub`] (one per shard,
//! shared by every attempt's context), which tells the loop with one
//! [`super::Input::Heartbeats`] at a time: each heartbeat taken keeps its
//! attempt alive at the pass's time, and its details wait in the attempt's
//! [`super::run::StepSpec`]. Every [`HEARTBEAT_TICK_MS`] the pending details
//! of every attempt are appended together, so they ride in one group
//! commit: heartbeats cost at most one flush a tick per shard whatever
//! their number, and nothing of another run's steps waits for them.

use std::collections::BTreeSet;
use std::sync::Arc;

use fusee_core::record::{Name, PAUSED, Record, RunId, Seq, Status};

use super::ShardLoop;
use super::run::Due;
use crate::retry::Decision;
use crate::step::{StepCancel, StepContext, StepError, StepFuture};
use crate::workflow::encode;

/// How often, at most, an attempt's heartbeat details are recorded: the
/// shard appends the latest details of every attempt that reported since
/// the last tick at once, on a tick shared by all its steps, so a step
/// calling `heartbeat` in a tight loop costs no more log than one that
/// calls it once a tick, and a thousand heartbeating steps cost one flush
/// a tick rather than a thousand (a second is fine-grained enough to
/// resume from, and coarse enough to cost nothing measurable).
pub(crate) const HEARTBEAT_TICK_MS: u64 = 1_000;

/// The running attempts' deadlines and the heartbeats waiting to be
/// recorded (see the [module docs](self)).
#[derive(Default)]
pub(crate) struct Watch {
    /// (deadline, run, step, attempt), earliest first: one entry per
    /// running attempt with a time limit, removed when it ends. A
    /// heartbeat moves an attempt's deadline without touching its entry,
    /// which is put back at the new time when it comes up.
    deadlines: BTreeSet<(u64, RunId, Seq, u32)>,
    /// Attempts with heartbeat details waiting to be recorded.
    pending: Vec<(RunId, Seq, u32)>,
    /// When they are recorded (the next tick).
    tick_ms: Option<u64>,
    /// The time of the latest pass that looked: a deadline come and not
    /// acted on yet (a checkpoint held the pass) asks for a wake-up just
    /// after it, not a spin.
    seen_ms: u64,
}

impl Watch {
    /// When the loop must look again: the earliest deadline or tick.
    pub(crate) fn next_wake(&self) -> Option<u64> {
        let deadline = self.deadlines.first().map(|(at, ..)| *at);
        [deadline, self.tick_ms]
            .into_iter()
            .flatten()
            .min()
            .map(|at| at.max(self.seen_ms.saturating_add(1)))
    }

    /// Attempt `attempt` of step `seq` of run `run` may time out at `at`.
    fn watch(&mut self, at: u64, run: RunId, seq: Seq, attempt: u32) {
        self.deadlines.insert((at, run, seq, attempt));
    }

    /// The attempt watched at `at` ended.
    fn unwatch(&mut self, at: u64, run: RunId, seq: Seq, attempt: u32) {
        self.deadlines.remove(&(at, run, seq, attempt));
    }
}

/// A step attempt for the driver to run: its future, and where its result
/// goes.
pub(crate) struct StepJob {
    /// The run.
    pub(crate) run: RunId,
    /// The step.
    pub(crate) seq: Seq,
    /// The attempt, from 1.
    pub(crate) attempt: u32,
    /// The step's name (the production driver remembers steps whose first
    /// poll was slow).
    pub(crate) name: fusee_core::record::Name,
    /// The step function's future for this attempt.
    pub(crate) future: StepFuture,
}

/// How an attempt's end is recorded ([`ShardLoop::end_attempt`]): the
/// step's `Step` with its status, or an `Attempt` with when the next one
/// may start (`PAUSED`: when resumed).
#[derive(Clone, Copy)]
enum Ended {
    Step(Status),
    Retry(u64),
}

impl ShardLoop {
    /// Starts every step attempt that may start: its `Began` appended, its
    /// run durable through its gate LSN (which then covers the `Began`), its
    /// time come, not running already. An attempt due whose `Began` this
    /// process has not appended (a retry, one run again after a crash) gets
    /// it now and starts once it is durable.
    pub(super) fn start_steps(&mut self, now_ms: u64) {
        if !self.live.has_steps_due() || self.life.has_failed() {
            return;
        }
        let early = self.sabotaged(super::sabotage::Sabotage::EarlyStep);
        let token = self.log.fencing_token();
        let runs = self.live.stepping();
        let mut began = Vec::new();
        let mut jobs = Vec::new();
        let mut watched = Vec::new();
        let mut history = Vec::new();
        // Cancelled steps whose attempt came due: failed, not started.
        let mut refused = Vec::new();
        for run in runs {
            // A paused run starts nothing; resuming puts it back.
            if self.is_paused(run) {
                self.live.steps_started(run);
                continue;
            }
            let Some(live) = self.live.get_mut(&run) else {
                self.live.steps_started(run);
                continue;
            };
            let mut guard = live.state.borrow_mut();
            let s = &mut *guard;
            // A step begun before a crash or an unload: its first start
            // and last heartbeat come from the journal, read once after
            // this pass, which starts the run's steps again then.
            if s.steps_need_history() {
                history.push(run);
                continue;
            }
            // The `Began`s go after the records the code asked for.
            let Some(gate) = s.machine().gate_lsn() else {
                continue;
            };
            // The output-commit rule: nothing with effects before the
            // records the run wrote so far are durable.
            let durable = gate <= self.flights.durable() || early;
            if durable && live.trace.is_none() {
                live.trace = self
                    .core
                    .get(run)
                    .map(|l| crate::trace::RunTrace::of(self.shard, run, l));
            }
            let trace = live.trace;
            let id = s.id().clone();
            // Still to start: an attempt not due yet, not durable yet, or
            // whose `Began` goes out now.
            let mut waiting = !durable;
            for (seq, spec) in s.steps_mut() {
                let attempt = match spec.due(now_ms) {
                    Due::Now(attempt) => attempt,
                    Due::Later => {
                        waiting = true;
                        continue;
                    }
                    Due::No => continue,
                };
                if spec.is_cancelled() {
                    refused.push((run, seq, attempt));
                    continue;
                }
                if let Some(rec) = spec.began_record(run, seq, attempt, now_ms) {
                    began.push(rec);
                    waiting = true;
                    continue;
                }
                if !durable {
                    continue;
                }
                let cx = StepContext::of_attempt(
                    Arc::clone(&id),
                    spec.name().clone(),
                    (run, seq, attempt),
                    token,
                    trace,
                    Arc::clone(&self.hub),
                    spec.last_beat(),
                );
                let future = spec.begin(attempt, now_ms, cx);
                if let Some(at) = spec.watch_at() {
                    watched.push((at, run, seq, attempt));
                }
                jobs.push(StepJob {
                    run,
                    seq,
                    attempt,
                    name: spec.name().clone(),
                    future,
                });
            }
            drop(guard);
            if !waiting {
                self.live.steps_started(run);
            }
        }
        self.live.push_jobs(jobs);
        for (at, run, seq, attempt) in watched {
            self.watch.watch(at, run, seq, attempt);
        }
        // Wakes no code: the run's machine takes it, and the attempt
        // starts at a later pass once it is durable.
        for rec in &began {
            self.append_quiet(rec);
        }
        for (run, seq, attempt) in refused {
            self.refuse_cancelled(run, seq, attempt, now_ms);
        }
        if history.is_empty() {
            return;
        }
        for run in history {
            match self.run_code_journal(run) {
                Ok(journal) => {
                    if let Some(l) = self.live.get(&run) {
                        l.state.borrow_mut().read_step_history(&journal);
                    }
                }
                Err(e) => {
                    self.fail(e);
                    return;
                }
            }
        }
        // Their steps start now (read, the flag is down: no second round).
        self.start_steps(now_ms);
    }

    /// A step attempt ended (its future returned): record its result, or
    /// what its retry policy decides about its failure. An end of an
    /// attempt that is no longer running (the loop timed it out) is
    /// ignored.
    pub(super) fn step_done(
        &mut self,
        run: RunId,
        seq: Seq,
        attempt: u32,
        result: Result<Vec<u8>, StepError>,
        now_ms: u64,
    ) {
        self.hub.attempt_ended((run, seq, attempt));
        self.end_attempt(run, seq, attempt, result, now_ms);
    }

    /// Cancelled step `seq` of run `run`, attempt `attempt` due: recorded
    /// failed (kind `cancelled`) without running it.
    fn refuse_cancelled(&mut self, run: RunId, seq: Seq, attempt: u32, now_ms: u64) {
        let Some(live) = self.live.get(&run) else {
            return;
        };
        let (name, error) = {
            let mut s = live.state.borrow_mut();
            let reason = s.cancel_reason().to_string();
            let Some(spec) = s.step_mut(seq) else {
                return;
            };
            let e = spec.cancel_error(attempt, &reason);
            let error = encode(&e).unwrap_or_else(|_| e.message.clone().into_bytes());
            let name = spec.name().clone();
            s.step_ended(seq);
            (name, error)
        };
        self.append(&Record::Step {
            run,
            seq,
            name,
            attempt,
            status: Status::Failed,
            payload: error.as_slice(),
            ended_ms: Some(now_ms),
        });
    }

    /// Tells running attempts of run `run` to stop (`cancels`: step,
    /// attempt, why), through the shard's hub.
    pub(super) fn tell_cancels(&self, run: RunId, cancels: Vec<(Seq, u32, StepCancel)>) {
        for (seq, attempt, why) in cancels {
            self.hub.cancel((run, seq, attempt), why);
        }
    }

    /// Run `run` ended: its running attempts are told to stop.
    pub(super) fn steps_run_ended(&self, run: RunId) {
        let Some(live) = self.live.get(&run) else {
            return;
        };
        for (seq, attempt) in live.state.borrow().running_steps() {
            self.hub.cancel((run, seq, attempt), StepCancel::RunEnded);
        }
    }

    /// Records the end of running attempt `attempt` of step `seq`: its
    /// result, or what its retry policy decides about its failure (after
    /// the details it reported and that are not recorded yet, so its next
    /// attempt, here or after a crash, reads them). Nothing if it is not
    /// the running attempt (the loop timed it out already).
    fn end_attempt(
        &mut self,
        run: RunId,
        seq: Seq,
        attempt: u32,
        result: Result<Vec<u8>, StepError>,
        now_ms: u64,
    ) {
        let Some(live) = self.live.get(&run) else {
            // The run finished (or the engine is closing): nobody waits.
            return;
        };
        // The record's bytes stay in `bytes` and the record borrows them:
        // a step's result is not copied on its way to the log (a copy, an
        // allocation and a free a step).
        let (beat, name, end, bytes) = {
            let mut s = live.state.borrow_mut();
            let Some(spec) = s
                .step_mut(seq)
                .filter(|spec| spec.running() == Some(attempt))
            else {
                return;
            };
            let (pending, watched) = spec.ended();
            if let Some(at) = watched {
                self.watch.unwatch(at, run, seq, attempt);
            }
            let name = spec.name().clone();
            let result = match result {
                Ok(bytes) if bytes.len() > self.config.max_payload => {
                    Err(StepError::fatal(format!(
                        "step `{name}` result of {} bytes exceeds the limit of {} bytes",
                        bytes.len(),
                        self.config.max_payload
                    ))
                    .kind("too-large"))
                }
                other => other,
            };
            match result {
                Ok(bytes) => {
                    s.step_ended(seq);
                    (None, name, Ended::Step(Status::Ok), bytes)
                }
                Err(e) => {
                    // A cancelled step's failure is final.
                    let decision = if e.retryable && !spec.is_cancelled() {
                        spec.decide(attempt, e.kind.as_deref(), now_ms)
                    } else {
                        Decision::Fail
                    };
                    let e = match decision {
                        Decision::OutOfTime => spec.out_of_time(attempt, &e),
                        _ => e,
                    };
                    let error = encode(&e).unwrap_or_else(|_| e.message.clone().into_bytes());
                    // Details the next attempt reads go before the
                    // `Attempt` that lets it run, in the same flush.
                    // The latest details may still wait in the hub.
                    let beat = self
                        .hub
                        .take_beat((run, seq, attempt))
                        .or(pending)
                        .inspect(|details| spec.beat_recorded(details));
                    match decision {
                        Decision::Fail | Decision::OutOfTime => {
                            s.step_ended(seq);
                            (None, name, Ended::Step(Status::Failed), error)
                        }
                        Decision::RetryAt(retry_at_ms) => {
                            (beat, name, Ended::Retry(retry_at_ms), error)
                        }
                        Decision::Pause => (beat, name, Ended::Retry(PAUSED), error),
                    }
                }
            }
        };
        if let Some(details) = beat {
            self.append_beat(run, seq, attempt, &details);
        }
        // The attempt's end, by the clock its `Began` was stamped with
        // (this pass's): read by people, never by replay.
        let ended_ms = Some(now_ms);
        let rec: Record<Name, &[u8]> = match end {
            Ended::Step(status) => Record::Step {
                run,
                seq,
                name,
                attempt,
                status,
                payload: &bytes,
                ended_ms,
            },
            Ended::Retry(retry_at_ms) => Record::Attempt {
                run,
                seq,
                name,
                attempt,
                retry_at_ms,
                error: &bytes,
                ended_ms,
            },
        };
        let retried = matches!(end, Ended::Retry(_));
        if retried {
            self.live.step_due(run);
        }
        self.metrics.step_attempts += 1;
        self.append(&rec);
        // The next attempt, and when, is the machine's answer now that it
        // has the `Attempt` (the one owner of retry state: `run`'s docs).
        if retried && let Some(live) = self.live.get(&run) {
            live.state.borrow_mut().step_retried(seq);
        }
    }

    /// Records an attempt's latest heartbeat details. Wakes no code: a
    /// heartbeat is the host's record.
    fn append_beat(&mut self, run: RunId, seq: Seq, attempt: u32, details: &[u8]) {
        self.append_quiet(&Record::<Name, _>::Heartbeat {
            run,
            seq,
            attempt,
            payload: details,
        });
    }

    /// Running attempts sent heartbeats (the hub told the loop): each is
    /// alive at `now_ms`, and its latest details wait for the next tick to
    /// be recorded.
    pub(super) fn heartbeats(&mut self, now_ms: u64) {
        for ((run, seq, attempt), details) in self.hub.take_beats() {
            let Some(live) = self.live.get(&run) else {
                continue;
            };
            let first = {
                let mut s = live.state.borrow_mut();
                let Some(spec) = s.step_mut(seq) else {
                    continue;
                };
                spec.heartbeat(attempt, details, now_ms)
            };
            if first {
                self.watch.pending.push((run, seq, attempt));
                let tick = (now_ms / HEARTBEAT_TICK_MS + 1) * HEARTBEAT_TICK_MS;
                self.watch.tick_ms.get_or_insert(tick);
            }
        }
    }

    /// Each pass: records the heartbeat details waiting when their tick
    /// came, and fails the attempts past their deadline (see the [module
    /// docs](self)); nothing while a checkpoint holds new records back
    /// (`holding`), which then asks for a wake-up a millisecond on, not
    /// at once.
    pub(super) fn watch_steps(&mut self, now_ms: u64, holding: bool) {
        self.watch.seen_ms = now_ms;
        if holding || self.life.has_failed() {
            return;
        }
        if self.watch.tick_ms.is_some_and(|t| t <= now_ms) {
            self.watch.tick_ms = None;
            for (run, seq, attempt) in std::mem::take(&mut self.watch.pending) {
                let Some(live) = self.live.get(&run) else {
                    continue;
                };
                let details = {
                    let mut s = live.state.borrow_mut();
                    let Some(spec) = s.step_mut(seq) else {
                        continue;
                    };
                    let Some(details) = spec.take_pending(attempt) else {
                        continue;
                    };
                    spec.beat_recorded(&details);
                    details
                };
                self.append_beat(run, seq, attempt, &details);
            }
        }
        while let Some(&(at, run, seq, attempt)) = self.watch.deadlines.first() {
            if at > now_ms {
                break;
            }
            self.watch.deadlines.pop_first();
            let Some(live) = self.live.get(&run) else {
                continue;
            };
            let timed_out = {
                let mut s = live.state.borrow_mut();
                let Some(spec) = s.step_mut(seq) else {
                    continue;
                };
                if spec.running() != Some(attempt) {
                    continue;
                }
                match spec.time_out(attempt, now_ms) {
                    Some(e) => Some(e),
                    None => {
                        // A heartbeat moved the deadline: watched again.
                        if let Some(later) = spec.watch_at() {
                            self.watch.watch(later, run, seq, attempt);
                        }
                        None
                    }
                }
            };
            if let Some(e) = timed_out {
                self.hub.cancel((run, seq, attempt), StepCancel::TimedOut);
                tracing::debug!(run, seq, attempt, error = %e, "a step attempt timed out");
                self.end_attempt(run, seq, attempt, Err(e), now_ms);
            }
        }
    }
}
