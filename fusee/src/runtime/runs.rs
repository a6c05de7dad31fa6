//! Runs and their code: starting a run's code (fresh, or replaying its
//! journal), polling it to quiescence, appending the records it asks for,
//! handing it its deliveries one at a time, and finishing it.

use std::rc::Rc;
use std::task::Context;

use fusee_core::record::{Name, Payload, Record, RecordBuf, RunId, Status, WaitOutcome};
use fusee_core::run::{Answer, RunMachine};
use fusee_core::shard::{Event, TimerKind};

use super::host::{Taken, poll_code, take_delivery};
use super::live::LiveRun;
use super::run::{Fault, with_update_handler};
use super::sabotage::Sabotage;
use super::{ShardLoop, stop};
use crate::ctx::{Ctx, RunState, catch_panic};
use crate::workflow::{Failure, encode};

/// The most records the lent list keeps room for between polls.
const SPARE_APPENDS_MAX: usize = 64;

/// How many polls [`ShardLoop::settle`] gives one run before a query reads it.
const SETTLE_POLLS_MAX: usize = 64;

impl ShardLoop {
    /// Acts on every event the core has for the host.
    pub(super) fn process_events(&mut self, now_ms: u64) {
        while let Some(ev) = self.core.take_event() {
            if self.is_stale(&ev) {
                continue;
            }
            match ev {
                Event::Started { run } => self.start_code(run),
                Event::Timer {
                    run,
                    seq,
                    kind,
                    due_ms,
                } => match kind {
                    TimerKind::Sleep => {
                        let fired = self.append(&RecordBuf::Fired { run, seq });
                        if let (Some(lsn), Some(t)) = (fired, &mut self.telemetry) {
                            t.slept(lsn, self.core.get(run), now_ms.saturating_sub(due_ms));
                        }
                    }
                    TimerKind::WaitTimeout => {
                        self.append(&RecordBuf::Waited {
                            run,
                            seq,
                            outcome: WaitOutcome::TimedOut,
                        });
                    }
                    TimerKind::Retry => {
                        // The attempt's time came: `start_steps` runs it
                        // (a recovered run's code starts for it now rather
                        // than at its turn among the deferred ones).
                        self.start_deferred(run);
                        self.live.step_due(run);
                    }
                    TimerKind::Deadline => {
                        self.append(&RecordBuf::Done {
                            run,
                            status: Status::TimedOut,
                            finished_ms: now_ms,
                            payload: Payload::from(&[][..]),
                            by: Some(Payload::from(&b"deadline"[..])),
                        });
                    }
                },
                Event::SignalReady {
                    run, seq, ordinal, ..
                } => {
                    self.append(&RecordBuf::Waited {
                        run,
                        seq,
                        outcome: WaitOutcome::Signal(ordinal),
                    });
                }
                Event::Finished { run } => {
                    self.steps_run_ended(run);
                    self.graces.ended(run);
                    self.live.forget(run);
                }
                Event::NeedLoad { run } => {
                    if let Err(e) = self.load(run, now_ms) {
                        self.fail(e);
                        return;
                    }
                }
            }
        }
    }

    /// Whether `ev` was overtaken by a record appended since the core
    /// queued it: a wait a signal ended before its timeout's event was
    /// taken (or the reverse), a run that finished before its timer's
    /// event. The core queues events as it applies records and does not
    /// take them back; the first one acted on wins, and a second `Waited`
    /// for one wait would stop the run.
    fn is_stale(&self, ev: &Event) -> bool {
        // Only a loaded run's state can show an event overtaken.
        let ended_wait = |run: RunId, seq: u32| {
            self.core
                .get(run)
                .is_some_and(|l| l.done.is_some() || !l.waiting_on().any(|(s, _)| s == seq))
        };
        let finished = |run: RunId| self.core.get(run).is_some_and(|l| l.done.is_some());
        match ev {
            Event::SignalReady { run, seq, .. } => ended_wait(*run, *seq),
            Event::Timer {
                run,
                seq,
                kind: TimerKind::WaitTimeout,
                ..
            } => ended_wait(*run, *seq),
            Event::Timer { run, .. } => finished(*run),
            _ => false,
        }
    }

    /// Starts the code of loaded run `run`: a machine built from its
    /// journal, and its workflow's future, replaying what the journal
    /// holds. A run whose type has no code yet waits for its registration.
    pub(super) fn start_code(&mut self, run: RunId) {
        self.start_code_with(run, None);
    }

    /// [`start_code`](Self::start_code) with the run's whole journal when
    /// the caller has just read it (a load: not read from the store twice).
    pub(super) fn start_code_with(&mut self, run: RunId, journal: Option<Vec<u8>>) {
        if self.live.contains_key(&run) {
            return;
        }
        let Some(l) = self.core.get(run) else {
            return;
        };
        if l.is_done() || self.is_held(run) {
            // A held run's code waits for an operator (`runtime/check`).
            return;
        }
        let Some(handler) = self.registry.to_start(&l.wtype, l.version) else {
            self.live.wait_for_code(run);
            return;
        };
        let id = l.id.clone();
        let (last_lsn, started_ms) = (l.last_lsn, l.started_ms);
        let code_attrs = l
            .attrs()
            .iter()
            .filter(|p| crate::attrs::by_code(p))
            .count();
        // A run wholly in memory is read where it is, not copied: after an
        // open, thousands of overdue runs start their code in one pass (and
        // a long stream's chunks are most of a journal). A load hands in
        // the frames it just read.
        let framed = match journal {
            Some(j) => Some(j),
            None if l.blob.is_some() => match self.run_code_journal(run) {
                Ok(j) => Some(j),
                Err(e) => {
                    self.fail(e);
                    return;
                }
            },
            None => None,
        };
        let journal: &[u8] = match &framed {
            Some(j) => j,
            None => self.core.get(run).map_or(&[], |l| &l.journal[..]),
        };
        let built = RunMachine::build_with_input(run, journal, last_lsn);
        let waker = self.live.waker(run);
        let (machine, input) = match built {
            Ok(built) => built,
            Err(e) => {
                let state = RunState::new(
                    RunMachine::new(),
                    run,
                    id,
                    self.registry.clone(),
                    self.config.max_payload,
                );
                let mut live = LiveRun::new(state, waker);
                stop(
                    &mut live,
                    run,
                    Fault::Refused(format!("its journal does not replay: {e}")),
                );
                self.live.insert(run, live);
                self.answer_stopped(run);
                return;
            }
        };
        let mut state = RunState::new(
            machine,
            run,
            id,
            self.registry.clone(),
            self.config.max_payload,
        );
        state.saw_time(started_ms);
        let code_attrs = if self.sabotaged(Sabotage::AttributesAgain) {
            0
        } else {
            code_attrs
        };
        state.set_code_attributes(u32::try_from(code_attrs).unwrap_or(u32::MAX));
        let mut live = LiveRun::new(state, waker);
        live.future = Some(handler(Ctx::new(Rc::clone(&live.state)), input));
        self.live.insert(run, live);
        self.wake(run);
    }

    /// Starts `run`'s code now if it was a recovered run whose code had not
    /// started (something reached it: a record, a query, an update).
    pub(super) fn start_deferred(&mut self, run: RunId) {
        if self.live.undefer(run) {
            self.start_code(run);
        }
    }

    /// Starts the code of runs that waited for their type's registration.
    pub(super) fn start_waiting_code(&mut self) {
        for run in self.live.waiting_for_code() {
            self.start_code(run);
        }
    }

    /// Puts `run` on the ready queue.
    pub(super) fn wake(&self, run: RunId) {
        self.live.wake(run);
    }

    /// Polls ready runs to quiescence, appending what they ask for and
    /// handing out deliveries, within `budget`. False if the budget ran
    /// out with work left.
    pub(super) fn drive(&mut self, now_ms: u64, budget: &mut usize) -> bool {
        let mut starts = 0;
        loop {
            self.process_events(now_ms);
            let Some((run, records_only)) = self.live.pop_ready() else {
                // Recovered runs' code, with nothing else ready, a bounded
                // number per pass: what comes due meanwhile goes first. A
                // closing shard starts none (their journals are durable).
                // The timer look (`quiet`) only when some run could start:
                // most passes of most shards have none deferred.
                if self.life.is_closing() || !self.live.has_deferred_to_start(true) {
                    return true;
                }
                let waiting_too = self.quiet(now_ms);
                if !self.live.has_deferred_to_start(waiting_too) {
                    return true;
                }
                if *budget == 0 || starts == super::DEFERRED_STARTS_MAX {
                    return false;
                }
                if let Some(run) = self.live.next_deferred(waiting_too) {
                    *budget -= 1;
                    starts += 1;
                    self.start_code(run);
                }
                continue;
            };
            if *budget == 0 {
                self.live.requeue(run, records_only);
                return false;
            }
            *budget -= 1;
            self.step_run(run, now_ms, records_only);
            if self.life.has_failed() {
                return true;
            }
        }
    }

    /// Whether recovered runs that wait on a timer or a signal may start
    /// their code now though nothing reached them: no timer is due within
    /// [`DEFERRED_QUIET_MS`](super::DEFERRED_QUIET_MS), or the open was
    /// long enough ago. Their replays would otherwise take the CPU of the
    /// timers coming due (on every shard: they share the cores).
    fn quiet(&self, now_ms: u64) -> bool {
        now_ms >= self.live.waiting_start_by_ms()
            || self
                .core
                .next_timer()
                .is_none_or(|at| at >= now_ms.saturating_add(super::DEFERRED_QUIET_MS))
    }

    /// Polls `run` while it waits on the ready queue, so a query reads the
    /// state its journal implies even when the run has not been polled since
    /// recovery or a load. Bounded by [`SETTLE_POLLS_MAX`]: a run that keeps
    /// waking itself is answered from where it stands.
    pub(super) fn settle(&mut self, run: RunId, now_ms: u64) {
        for _ in 0..SETTLE_POLLS_MAX {
            if !self.live.take_ready(run) || self.life.has_failed() {
                return;
            }
            self.step_run(run, now_ms, false);
        }
    }

    /// Polls `run`'s code once, appends the records it asked for, and hands
    /// it its next delivery if it is quiescent. Woken only for records
    /// (`records_only`) with no delivery handed since its last poll, its
    /// code has nothing new to see: it gets its next delivery, and the
    /// poll comes with the wake that delivery makes.
    fn step_run(&mut self, run: RunId, now_ms: u64, records_only: bool) {
        let Some(live) = self.live.get_mut(&run) else {
            return;
        };
        if records_only && !live.fed {
            self.deliver_next(run);
            return;
        }
        let Some(future) = live.future.as_mut() else {
            return;
        };
        live.fed = false;
        {
            let mut s = live.state.borrow_mut();
            s.set_now(now_ms);
            s.lend_appends(&mut self.spare_appends);
        }
        live.active_ms = now_ms;
        let mut cx = Context::from_waker(&live.waker);
        let finished = poll_code(future, &mut cx);
        // Update handlers run beside the main code, polled with it.
        let mut returned = Vec::new();
        live.handlers
            .retain_mut(|(ordinal, handler)| match poll_code(handler, &mut cx) {
                Some(result) => {
                    returned.push((*ordinal, result));
                    false
                }
                None => true,
            });
        let fault = live.state.borrow_mut().take_fault();
        let (mut asked, cancels) = {
            let mut s = live.state.borrow_mut();
            (s.take_appends(), s.take_step_cancels())
        };
        if live.state.borrow().has_step_to_start() {
            self.live.step_due(run);
        }
        if !cancels.is_empty() {
            self.tell_cancels(run, cancels);
        }
        let reuse_seq = self.sabotaged(Sabotage::ReuseSeq);
        for mut rec in asked.drain(..) {
            if reuse_seq && let RecordBuf::Timer { seq, .. } = &mut rec {
                *seq = seq.saturating_sub(1);
            }
            self.append_quiet(&rec);
        }
        // A poll asks for a handful; a list grown by a burst goes.
        if asked.capacity() <= SPARE_APPENDS_MAX {
            self.spare_appends = asked;
        }
        if let Some(why) = fault {
            if let Some(live) = self.live.get_mut(&run) {
                stop(live, run, why);
            }
            self.answer_stopped(run);
            return;
        }
        for (ordinal, result) in returned {
            self.update_returned(run, ordinal, result);
        }
        if let Some(result) = finished {
            self.end_handlers(run);
            self.finish(run, result, now_ms);
            return;
        }
        let next = self
            .live
            .get(&run)
            .and_then(|l| l.state.borrow_mut().take_continue());
        if let Some(input) = next {
            self.end_handlers(run);
            self.continue_as_new(run, input, now_ms);
            return;
        }
        self.deliver_next(run);
    }

    /// Hands `run`'s code its next delivery, if one waits, and wakes it.
    fn deliver_next(&mut self, run: RunId) {
        let reorder = self.sabotaged(Sabotage::ReorderReplay);
        let Some(live) = self.live.get_mut(&run) else {
            return;
        };
        if live.future.is_none() {
            return;
        }
        #[cfg(feature = "testing")]
        if let Some((seq, outcome, true)) = live.held.take() {
            live.state.borrow_mut().deliver(seq, outcome);
            live.fed = true;
            self.wake(run);
            return;
        }
        let update = {
            let mut guard = live.state.borrow_mut();
            let state = &mut *guard;
            let Taken {
                outcome,
                cancel,
                update,
            } = match take_delivery(state) {
                Ok(None) => return,
                Ok(Some(taken)) => {
                    live.fed = true;
                    taken
                }
                Err(e) => {
                    drop(guard);
                    stop(live, run, Fault::Determinism(e));
                    self.answer_stopped(run);
                    return;
                }
            };
            if let Some((seq, outcome)) = outcome {
                #[cfg(feature = "testing")]
                let outcome = if reorder
                    && live.held.is_none()
                    && state.machine().is_replaying()
                    && state.machine().pending_deliveries() > 0
                {
                    // Held until the delivery after it has been handed out.
                    live.held = Some((seq, outcome, false));
                    None
                } else {
                    if let Some(held) = live.held.as_mut() {
                        held.2 = true;
                    }
                    Some(outcome)
                };
                #[cfg(not(feature = "testing"))]
                let outcome = {
                    let _ = reorder;
                    Some(outcome)
                };
                if let Some(outcome) = outcome {
                    state.deliver(seq, outcome);
                }
            }
            // Cancellation reaches the code as an error at its pending
            // operations, which it may catch to clean up.
            if let Some(reason) = cancel {
                state.cancel(reason);
            }
            update
        };
        if let Some((ordinal, name, payload)) = update {
            self.start_handler(run, ordinal, &name, &payload);
        }
        // The code runs to quiescence before the next delivery.
        self.wake(run);
    }

    /// The run's code returned `result`: its `Done`.
    fn finish(&mut self, run: RunId, result: Result<Vec<u8>, Failure>, now_ms: u64) {
        let _ = now_ms;
        let (status, payload) = match result {
            Ok(bytes) if bytes.len() <= self.config.max_payload => (Status::Ok, bytes),
            Ok(bytes) => (
                Status::Failed,
                failure_payload(&Failure::with_kind(
                    "too-large",
                    format!(
                        "result of {} bytes exceeds the limit of {}",
                        bytes.len(),
                        self.config.max_payload
                    ),
                )),
            ),
            // A cancelled run whose code gives up with the cancellation
            // ends as cancelled.
            Err(f) if f.kind.as_deref() == Some("cancelled") && self.was_cancelled(run) => {
                (Status::Cancelled, failure_payload(&f))
            }
            Err(f) => (Status::Failed, failure_payload(&f)),
        };
        self.finish_with(run, status, payload);
    }

    fn was_cancelled(&self, run: RunId) -> bool {
        self.live
            .get(&run)
            .is_some_and(|l| l.state.borrow().cancels() > 0)
    }

    /// The run's code continues as new with `input`: its `Done` carries
    /// the next run's `Start` (same ID and type, a new run number), which
    /// the core starts as it applies the `Done`.
    fn continue_as_new(&mut self, run: RunId, input: Vec<u8>, now_ms: u64) {
        let Some(l) = self.core.get(run) else {
            return;
        };
        let (id, wtype, parent, policy) = (l.id.clone(), l.wtype.clone(), l.parent(), l.policy);
        // The next run takes the newest code registered (a fresh run, so
        // it may move to a new version); a type not registered here keeps
        // its version.
        let version = self.registry.newest(&wtype).unwrap_or(l.version);
        // The next run continues its predecessor's trace context, and
        // carries its search attributes as they stand (`crate::attrs`).
        let attrs = crate::attrs::fold(l.meta.as_deref(), l.attrs().iter().map(|p| &p[..]));
        let meta = crate::attrs::meta_with(l.meta.as_deref(), &attrs);
        let next = self.core.allocate_run();
        let start = RecordBuf::Start {
            run: next,
            id,
            wtype,
            version,
            codec: crate::workflow::CODEC_JSON,
            started_ms: now_ms,
            deadline_ms: 0,
            parent,
            policy,
            from: Some(fusee_core::record::Origin {
                run,
                cause: fusee_core::record::origin::CONTINUED,
            }),
            copies: 0,
            update: None,
            input: Payload::from(input.as_slice()),
            meta,
        };
        let mut bytes = Vec::new();
        fusee_core::record::encode_canonical(&start, &mut bytes);
        self.finish_with(run, Status::ContinuedAsNew, bytes);
    }

    /// Records the run's end with `status` and `payload`, as its code
    /// asked (checked against its journal).
    fn finish_with(&mut self, run: RunId, status: Status, payload: Vec<u8>) {
        let Some(live) = self.live.get_mut(&run) else {
            return;
        };
        live.future = None;
        let (answer, now_ms) = {
            let mut s = live.state.borrow_mut();
            (s.machine_mut().finish(status), s.now_ms())
        };
        match answer {
            Ok(Answer::Append) => {
                self.append(&Record::<Name, _>::Done {
                    run,
                    status,
                    finished_ms: now_ms,
                    payload: payload.as_slice(),
                    by: None,
                });
            }
            Ok(Answer::Recorded) => {}
            Err(e) => {
                stop(live, run, e);
                self.answer_stopped(run);
            }
        }
    }
}

impl ShardLoop {
    /// Starts the handler of update `ordinal` (named `name`): it runs with
    /// the run's code from this point of the journal on. A run whose code
    /// registered no such handler fails the update.
    fn start_handler(&mut self, run: RunId, ordinal: u64, name: &str, payload: &[u8]) {
        let Some(live) = self.live.get_mut(&run) else {
            return;
        };
        let state = Rc::clone(&live.state);
        let started = with_update_handler(&state, name, |h| catch_panic(|| (h.start)(payload)));
        match started {
            Some(Ok(handler)) => {
                if let Some(live) = self.live.get_mut(&run) {
                    live.handlers.push((ordinal, handler));
                }
            }
            Some(Err(panic)) => {
                let failure = Failure::with_kind(
                    "panic",
                    format!("the update handler {name:?} panicked: {panic}"),
                );
                self.update_returned(run, ordinal, Err(failure));
            }
            None => {
                let failure = Failure::with_kind(
                    "unknown-update",
                    format!("the run's code registers no update handler {name:?}"),
                );
                self.update_returned(run, ordinal, Err(failure));
            }
        }
    }

    /// The run's code ended (or continues as new) while update handlers
    /// still run: they never will, so each fails, recorded before the
    /// run's end (a replay ends them at the same point), and its caller is
    /// answered instead of waiting for ever.
    fn end_handlers(&mut self, run: RunId) {
        let left: Vec<u64> = match self.live.get_mut(&run) {
            Some(live) => live
                .handlers
                .drain(..)
                .map(|(ordinal, _)| ordinal)
                .collect(),
            None => return,
        };
        for ordinal in left {
            self.update_returned(
                run,
                ordinal,
                Err(Failure::with_kind(
                    "unfinished",
                    "the run ended before this update's handler returned",
                )),
            );
        }
    }

    /// Update `ordinal`'s handler returned `result`: its `UpdateDone`.
    fn update_returned(&mut self, run: RunId, ordinal: u64, result: Result<Vec<u8>, Failure>) {
        let Some(live) = self.live.get_mut(&run) else {
            return;
        };
        let answer = live.state.borrow_mut().machine_mut().update_done(ordinal);
        match answer {
            Ok(Answer::Append) => {
                let max = self.config.max_payload;
                let (status, payload) = match result {
                    Ok(bytes) if bytes.len() <= max => (Status::Ok, bytes),
                    Ok(bytes) => (
                        Status::Failed,
                        failure_payload(&Failure::with_kind(
                            "too-large",
                            format!(
                                "the update's result of {} bytes exceeds the payload limit of {max} bytes",
                                bytes.len()
                            ),
                        )),
                    ),
                    Err(f) => (Status::Failed, failure_payload(&f)),
                };
                self.append_quiet(&Record::<Name, _>::UpdateDone {
                    run,
                    ordinal,
                    status,
                    payload: payload.as_slice(),
                });
            }
            Ok(Answer::Recorded) => {}
            Err(e) => {
                stop(live, run, e);
                self.answer_stopped(run);
            }
        }
    }
}

/// A failure as a `Done` payload.
fn failure_payload(f: &Failure) -> Vec<u8> {
    encode(f).unwrap_or_else(|_| f.message.clone().into_bytes())
}
