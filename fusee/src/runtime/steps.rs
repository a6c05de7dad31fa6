//! Step attempts: begun (a `Began` record: a new step's first at its
//! call, in the flush of the records before it; a retry's, or an attempt
//! run again after a crash, when it comes due), started once their run is
//! durable through its gate LSN, which covers the `Began` (and their retry
//! time has come), run by the driver, and recorded when they end: the result (`Step`), or a failure the retry policy retries
//! (`Attempt` with the next attempt's time, or paused) or gives up on;
//! either carries the attempt's end time (`ended_ms`).

use std::sync::Arc;

use fusee_core::record::{PAUSED, Payload, RecordBuf, RunId, Seq, Status};

use super::ShardLoop;
use super::run::Due;
use crate::retry::Decision;
use crate::step::{StepContext, StepError, StepFuture};
use crate::workflow::encode;

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
                if let Some(rec) = spec.began_record(run, seq, attempt, now_ms) {
                    began.push(rec);
                    waiting = true;
                    continue;
                }
                if !durable {
                    continue;
                }
                let mut cx =
                    StepContext::new(Arc::clone(&id), run, seq, attempt).with_fencing_token(token);
                if let Some(t) = trace {
                    cx = cx.traced(t, seq);
                }
                let future = spec.begin(now_ms, cx);
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
        // Wakes no code: the run's machine takes it, and the attempt
        // starts at a later pass once it is durable.
        for rec in &began {
            self.append_quiet(rec);
        }
    }

    /// A step attempt ended: record its result, or what its retry policy
    /// decides about its failure.
    pub(super) fn step_done(
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
        let rec = {
            let mut s = live.state.borrow_mut();
            let Some(spec) = s.step_mut(seq) else {
                return;
            };
            spec.ended();
            let name = spec.name().clone();
            let result = match result {
                Ok(bytes) if bytes.len() > self.config.max_payload => {
                    Err(StepError::fatal(format!(
                        "step result of {} bytes exceeds the limit of {}",
                        bytes.len(),
                        self.config.max_payload
                    ))
                    .kind("too-large"))
                }
                other => other,
            };
            // The attempt's end, by the clock its `Began` was stamped with
            // (this pass's): read by people, never by replay.
            let ended_ms = Some(now_ms);
            let step = |status, payload: &[u8]| RecordBuf::Step {
                run,
                seq,
                name: name.clone(),
                attempt,
                status,
                payload: Payload::from(payload),
                ended_ms,
            };
            match result {
                Ok(bytes) => {
                    s.step_ended(seq);
                    step(Status::Ok, &bytes)
                }
                Err(e) => {
                    let decision = if e.retryable {
                        spec.decide(attempt, e.kind.as_deref(), now_ms)
                    } else {
                        Decision::Fail
                    };
                    let error = encode(&e).unwrap_or_else(|_| e.message.clone().into_bytes());
                    let attempt_rec = |retry_at_ms| RecordBuf::Attempt {
                        run,
                        seq,
                        name: name.clone(),
                        attempt,
                        retry_at_ms,
                        error: Payload::from(error.as_slice()),
                        ended_ms,
                    };
                    match decision {
                        Decision::Fail => {
                            s.step_ended(seq);
                            step(Status::Failed, &error)
                        }
                        Decision::RetryAt(retry_at_ms) => attempt_rec(retry_at_ms),
                        Decision::Pause => attempt_rec(PAUSED),
                    }
                }
            }
        };
        let retried = matches!(rec, RecordBuf::Attempt { .. });
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
}
