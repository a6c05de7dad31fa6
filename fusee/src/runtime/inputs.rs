//! Inputs becoming records: client requests, and what the flusher hands
//! back.

use fusee_core::record::{Payload, Record, RecordBuf, RunId, policy};
use fusee_core::shard::{Found, Output};
use fusee_storage::LogStore;

use super::host::{self, ReplayFault};
use super::messages::Origin;
use super::operator::JournalView;
use super::parking::{self, Frame, ParkedResult};
use super::run::{with_query_handler, with_update_handler};
use super::sabotage::Sabotage;
use super::waiters::Waiting;
use super::{Input, ShardLoop, name, name as name_of, status_name};
use crate::client::{Description, IdPolicy, RunRef, RunResult, RunStatus};
use crate::ctx::{RunState, catch_panic};
use crate::error::Error;
use crate::workflow::{CODEC_JSON, Failure};

impl ShardLoop {
    /// Acts on one input.
    pub(super) fn take(&mut self, input: Input, now_ms: u64) {
        if self.life.is_closing() && input.is_client() {
            refuse(input, || Error::Closed);
            return;
        }
        match input {
            Input::Start {
                wtype,
                id,
                input,
                policy,
                trace,
                version,
                attrs,
                reply,
            } => {
                let meta = crate::attrs::start_meta(
                    trace.map(crate::trace::TraceParent::to_meta),
                    attrs.as_ref(),
                );
                self.start(wtype, id, input, (policy, meta, version), reply, now_ms)
            }
            Input::Signal {
                id,
                name: signal,
                payload,
                dedup,
                reply,
            } => match self.running(&id, "signal", payload.len(), now_ms) {
                Ok(_) if self.sabotaged(Sabotage::DropSignal) => {
                    let _ = reply.send(Ok(()));
                }
                // Sent again (a caller retrying after a lost reply): the
                // first one's record answers, once it is durable.
                Ok(run) if self.core.seen_signal(run, dedup) => self.ack_when_durable(reply),
                Ok(run) => {
                    let rec = RecordBuf::Signal {
                        run,
                        name: name(&signal),
                        dedup,
                        payload: Payload::from(payload.as_slice()),
                        by: None,
                    };
                    self.ack_after(&rec, reply);
                }
                // A keyed retry whose first call the run took before it
                // finished: acknowledged while the run is in memory.
                Err(Error::Finished { .. }) if matches!(self.core.find(&id), Some(Found::Loaded(run)) if self.core.seen_signal(run, dedup)) => {
                    self.ack_when_durable(reply)
                }
                Err(e) => self.refuse_after_durable(reply, e),
            },
            Input::Cancel {
                id,
                reason,
                grace_ms,
                reply,
            } => {
                match self.running(&id, "cancel reason", reason.len(), now_ms) {
                    Ok(run) => {
                        // The grace rides in the cancel: one record, so
                        // no crash keeps the cancel and cuts its grace.
                        let grace = grace_ms.map(|g| self.grace_for(run, now_ms, g, &reason));
                        let rec = RecordBuf::Cancel {
                            run,
                            reason: Payload::from(reason.as_bytes()),
                            by: None,
                            grace,
                        };
                        self.ack_after(&rec, reply)
                    }
                    Err(e) => self.refuse_after_durable(reply, e),
                }
            }
            // A parked run's frames are read once, for its ID and result.
            Input::Result { id, reply } => match self.core.find(&id) {
                Some(Found::Parked(run)) => match self.parked_result(run, &id) {
                    Ok(ParkedResult::Finished(r)) => {
                        let _ = reply.send(Ok(r));
                    }
                    Ok(ParkedResult::Running) => self.waiters.wait_result(run, reply),
                    Ok(ParkedResult::Other) => {
                        let _ = reply.send(Err(Error::NotFound { id }));
                    }
                    Err(error) => {
                        let shard = self.shard;
                        let _ = reply.send(Err(Error::Storage { shard, error }));
                    }
                },
                Some(Found::Loaded(run)) => match self.result_of(run) {
                    Some(r) => {
                        let _ = reply.send(Ok(r));
                    }
                    None => {
                        self.waiters.wait_result(run, reply);
                        self.answer_stopped(run);
                    }
                },
                None => {
                    let _ = reply.send(Err(Error::NotFound { id }));
                }
            },
            Input::Describe { id, reply } => {
                let answer = self.describe(&id);
                let _ = reply.send(answer);
            }
            Input::Metrics { reply } => {
                let mut m = self.metrics.clone();
                m.loaded_runs = self.core.loaded_len() as u64;
                m.parked_runs = self.core.parked_len() as u64;
                m.dormant_runs = self.live.dormant_len() as u64;
                m.queued = self.inbox.len() as u64;
                m.unacknowledged_messages = self.mail.unacknowledged() as u64;
                let _ = reply.send(m);
            }
            Input::Registered => self.start_waiting_code(),
            Input::Check { below, reply } => self.take_check(below, reply, now_ms),
            Input::Chunk {
                run,
                seq,
                index,
                payload,
                reply,
            } => self.take_chunk(run, seq, index, payload, reply, now_ms),
            Input::StreamEnd { run, seq, reply } => self.take_stream_end(run, seq, reply, now_ms),
            Input::StepDone {
                run,
                seq,
                attempt,
                result,
            } => self.step_done(run, seq, attempt, result, now_ms),
            Input::Flushed { ticket, micros } => self.flushed(ticket, micros, now_ms),
            Input::Sealed { ticket } => self.sealed(ticket, now_ms),
            Input::Heartbeats => self.heartbeats(now_ms),
            Input::Tick => {}
            Input::Message { from, id, message } => {
                self.receive(Origin::Shard { shard: from, id }, message, now_ms);
            }
            Input::Inbox { row, message } => self.receive(Origin::Inbox { row }, message, now_ms),
            Input::Update {
                id,
                name,
                update_id,
                payload,
                reply,
            } => {
                let accepted = self.accept_update(&id, &name, &update_id, &payload, now_ms);
                self.answer_update(accepted, &update_id, reply);
            }
            Input::Query {
                id,
                name,
                payload,
                reply,
            } => match self.answer_query(&id, &name, &payload, now_ms) {
                Ok(answer) => {
                    // The answer read state that may not be durable yet.
                    let token = self.waiters.wait(Waiting::Answer(reply, answer));
                    let lsn = self.log.last_lsn();
                    self.core.add_output(lsn, Output::Ack(token));
                    self.release_now_if_durable();
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            Input::Delivered { id } => self.delivered(id),
            Input::UpdateWithStart {
                wtype,
                id,
                input,
                name,
                update_id,
                payload,
                reply,
            } => self.update_with_start(
                UpdateStart {
                    wtype,
                    id,
                    input,
                    name,
                    update_id,
                },
                payload,
                reply,
                now_ms,
            ),
            Input::Pause { id, paused, reply } => self.set_paused(&id, paused, reply, now_ms),
            Input::Reset {
                id,
                run,
                step,
                reason,
                reply,
            } => self.reset(&id, run, &step, &reason, reply, now_ms),
            Input::ResumeStep { id, step, reply } => self.resume_step(&id, &step, reply, now_ms),
            Input::List {
                filter,
                below,
                reply,
            } => {
                let page = if filter.conditions().is_empty() {
                    Ok(self.list_page(&filter, below))
                } else {
                    self.attr_page(&filter, below)
                };
                let _ = reply.send(page);
            }
            Input::Journal {
                id,
                run,
                from,
                reply,
            } => match self.live_journal(&id, run, from, now_ms) {
                Ok(journal) if self.sabotaged(super::sabotage::Sabotage::JournalEarly) => {
                    let _ = reply.send(Ok(journal));
                }
                Ok(journal) => {
                    // Records in memory may not be durable yet.
                    let token = self.waiters.wait(Waiting::Journal(reply, journal));
                    let lsn = self.log.last_lsn();
                    self.core.add_output(lsn, Output::Ack(token));
                    self.release_now_if_durable();
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            Input::Terminate { id, reason, reply } => {
                match self.running(&id, "terminate reason", reason.len(), now_ms) {
                    Ok(run) => {
                        let rec = self.terminate_record(run, reason, "client", now_ms);
                        self.ack_after(&rec, reply);
                    }
                    Err(e) => self.refuse_after_durable(reply, e),
                }
            }
            Input::Close { reply } => self.life.close_after_checkpoint(reply),
            Input::Backup { hold } => self.backup_asked(hold),
            Input::Crash => {
                self.life.stop();
                self.live.clear();
            }
        }
    }

    fn start(
        &mut self,
        wtype: String,
        id: String,
        input: Vec<u8>,
        (id_policy, meta, version): (
            IdPolicy,
            Option<Box<fusee_core::record::StartMeta<Payload>>>,
            Option<u32>,
        ),
        reply: super::Reply<RunRef>,
        now_ms: u64,
    ) {
        let version = match self.registry.version_to_start(&wtype, version) {
            Ok(v) => v,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        if input.len() > self.config.max_payload {
            let _ = reply.send(Err(Error::TooLarge {
                id,
                what: "workflow input",
                len: input.len(),
                max: self.config.max_payload,
            }));
            return;
        }
        let found = match self.lookup(&id) {
            Ok(found) => found,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let finished = |this: &Self, run: RunId, parked: bool| {
            if parked {
                this.core.parked(run).and_then(|p| p.done()).is_some()
            } else {
                this.core.get(run).and_then(|l| l.done).is_some()
            }
        };
        let reuse = match found {
            Some((run, parked)) => {
                id_policy == IdPolicy::ReuseAfterFinish && finished(self, run, parked)
            }
            None => false,
        };
        if let Some((run, _)) = found.filter(|_| !reuse) {
            let existing = RunRef {
                id: id.clone(),
                shard: self.shard,
                run,
                attached: true,
            };
            // The answer rests on the run's records: it leaves once they
            // are durable, like any other.
            let waiting = match id_policy {
                IdPolicy::NewOnly | IdPolicy::ReuseAfterFinish => {
                    Waiting::Refused(reply, Error::AlreadyExists { id, run })
                }
                IdPolicy::Attach => Waiting::Started(reply, existing),
            };
            let token = self.waiters.wait(waiting);
            let lsn = self.log.last_lsn();
            self.core.add_output(lsn, Output::Ack(token));
            self.release_now_if_durable();
            return;
        }
        let run = self.core.allocate_run();
        let rec = RecordBuf::Start {
            run,
            id: name(&id),
            wtype: name(&wtype),
            version,
            codec: CODEC_JSON,
            started_ms: now_ms,
            deadline_ms: 0,
            parent: None,
            policy: if reuse {
                policy::ID_ALLOW_DUPLICATE
            } else {
                policy::ID_REJECT_DUPLICATE
            },
            from: None,
            copies: 0,
            update: None,
            input: Payload::from(input.as_slice()),
            meta,
        };
        let started = RunRef {
            id,
            shard: self.shard,
            run,
            attached: false,
        };
        if let Some(lsn) = self.append(&rec) {
            self.metrics.started += 1;
            if self.sabotaged(Sabotage::EarlyReply) {
                let _ = reply.send(Ok(started));
                return;
            }
            let token = self.waiters.wait(Waiting::Started(reply, started));
            self.core.add_output(lsn, Output::Ack(token));
        }
    }

    /// The latest run of `id` and whether it is parked; a parked run's ID
    /// is confirmed from its frame (the core matches parked runs on the
    /// ID's hash only).
    pub(super) fn lookup(&mut self, id: &str) -> Result<Option<(u64, bool)>, Error> {
        Ok(self
            .lookup_frames(id)?
            .map(|(run, frame)| (run, frame.is_some())))
    }

    /// As [`lookup`](Self::lookup), with a parked run's frames, read to
    /// confirm its ID, handed back: a caller that loads the run passes
    /// them to [`load_frame`](Self::load_frame) instead of reading them
    /// again (a journal of megabytes, a stream's, read once).
    pub(super) fn lookup_frames(
        &mut self,
        id: &str,
    ) -> Result<Option<(u64, Option<Frame>)>, Error> {
        match self.core.find(id) {
            Some(Found::Loaded(run)) => Ok(Some((run, None))),
            Some(Found::Parked(run)) => match self.parked_frame(run) {
                Ok(frame) => Ok(frame
                    .filter(|f| parking::names(&f.journal, id))
                    .map(|f| (run, Some(f)))),
                Err(error) => Err(Error::Storage {
                    shard: self.shard,
                    error,
                }),
            },
            None => Ok(None),
        }
    }

    /// The run `id` names, if it is running (loaded back if it was
    /// parked); otherwise why not. Checks a payload of `len` bytes against
    /// the limit.
    pub(super) fn running(
        &mut self,
        id: &str,
        what: &'static str,
        len: usize,
        now_ms: u64,
    ) -> Result<u64, Error> {
        if len > self.config.max_payload {
            return Err(Error::TooLarge {
                id: id.to_string(),
                what,
                len,
                max: self.config.max_payload,
            });
        }
        let Some((run, frame)) = self.lookup_frames(id)? else {
            return Err(Error::NotFound { id: id.to_string() });
        };
        let finished = |status| Error::Finished {
            id: id.to_string(),
            status: status_name(status),
        };
        if let Some(frame) = frame {
            if let Some(status) = self.core.parked(run).and_then(|p| p.done()) {
                return Err(finished(status));
            }
            self.load_frame(run, frame, now_ms)
                .map_err(|error| Error::Storage {
                    shard: self.shard,
                    error,
                })?;
        }
        match self.core.get(run).and_then(|l| l.done) {
            None => Ok(run),
            Some((status, _)) => Err(finished(status)),
        }
    }

    /// Refuses a signal or cancel with `e`: at once when `e` rests on
    /// nothing a crash could take back, else once the log is durable
    /// through its last record (a run's `Done` not yet durable).
    pub(super) fn refuse_after_durable(&mut self, reply: super::Reply<()>, e: Error) {
        if !matches!(e, Error::Finished { .. }) || self.log.last_lsn() == self.flights.durable() {
            let _ = reply.send(Err(e));
            return;
        }
        let token = self.waiters.wait(Waiting::RefusedDone(reply, e));
        let lsn = self.log.last_lsn();
        self.core.add_output(lsn, Output::Ack(token));
    }

    /// [`refuse_after_durable`](Self::refuse_after_durable) for a reply of
    /// any type.
    fn refuse_after_durable_any<T>(&mut self, reply: super::Reply<T>, e: Error) {
        // Only a finished run's refusal rests on records a crash could take
        // back; answered at once otherwise, and for other reply types the
        // run's Done was made durable before `running` saw it (results
        // wait for durability), so at once is safe.
        let _ = reply.send(Err(e));
    }

    /// Accepts update `update_id` (handler `name`) for workflow `id`: the
    /// run's code must have registered the handler, and its validator must
    /// let the argument through; then the `Update` is recorded. An update
    /// ID the run has already accepted (a keyed update asked again) records
    /// nothing: its caller waits for, or gets, the first call's result.
    /// Refusals record nothing.
    fn accept_update(
        &mut self,
        id: &str,
        name: &str,
        update_id: &str,
        payload: &[u8],
        now_ms: u64,
    ) -> Result<Accepted, Error> {
        // Asked again: answered from the run that took it, even one that
        // has finished since, while it is in memory.
        if let Some(Found::Loaded(run)) = self.core.find(id)
            && let Some(known) = self.known_update(run, update_id)
        {
            return Ok(known);
        }
        let run = self.running(id, "update argument", payload.len(), now_ms)?;
        if let Some(known) = self.known_update(run, update_id) {
            return Ok(known);
        }
        // Handlers register when the code runs (see `answer_query`).
        self.start_deferred(run);
        self.settle(run, now_ms);
        // Stopped code would never run the handler: nothing is recorded
        // (a fixed deploy must not find an update its caller saw refused).
        if self.stopped_error(run).is_some() {
            return Ok(Accepted::Stopped(run));
        }
        let Some(live) = self.live.get(&run) else {
            return Err(self
                .codeless(run, id, "update")
                .unwrap_or_else(|| Error::UnknownUpdate {
                    id: id.to_string(),
                    name: name.to_string(),
                    registered: Vec::new(),
                }));
        };
        let state = std::rc::Rc::clone(&live.state);
        let verdict = with_update_handler(&state, name, |h| match &h.validate {
            Some(validate) => match catch_panic(|| validate(payload)) {
                Ok(verdict) => verdict,
                Err(panic) => Err(format!("the validator panicked: {panic}")),
            },
            None => Ok(()),
        });
        let Some(verdict) = verdict else {
            let mut registered: Vec<String> = state.borrow().update_names();
            registered.sort();
            return Err(Error::UnknownUpdate {
                id: id.to_string(),
                name: name.to_string(),
                registered,
            });
        };
        verdict.map_err(|reason| Error::Rejected {
            id: id.to_string(),
            reason,
        })?;
        self.append(&RecordBuf::Update {
            run,
            id: name_of(update_id),
            name: name_of(name),
            payload: Payload::from(payload),
            caller: None,
        });
        Ok(Accepted::Waiting(run))
    }

    /// Run `run` ended with `status`: callers of its updates still waiting
    /// (a run terminated while a handler ran: its code never records the
    /// handler's end) get [`Error::Finished`] rather than no answer. Its
    /// code's own end records every handler's end first, so those callers
    /// were answered by then.
    fn end_update_waiters(&mut self, run: u64, status: fusee_core::record::Status) {
        if !self.waiters.has_updates(run) {
            return;
        }
        let id = self
            .core
            .get(run)
            .map(|l| l.id.to_string())
            .unwrap_or_default();
        for reply in self.waiters.take_updates(run, |_| true) {
            let _ = reply.send(Err(Error::Finished {
                id: id.clone(),
                status: status_name(status),
            }));
        }
    }

    /// How loaded run `run` took update `update_id` before, if it did.
    fn known_update(&self, run: u64, update_id: &str) -> Option<Accepted> {
        let (_, slot) = self.core.get(run)?.update(update_id)?;
        Some(match &slot.result {
            Some((status, payload, _)) => Accepted::Returned(RunResult {
                status: *status,
                payload: payload.to_vec(),
            }),
            None => Accepted::Waiting(run),
        })
    }

    /// Answers an update's caller as [`accept_update`](Self::accept_update)
    /// took it: once the handler's result is durable, or with the refusal.
    fn answer_update(
        &mut self,
        accepted: Result<Accepted, Error>,
        update_id: &str,
        reply: super::Reply<RunResult>,
    ) {
        match accepted {
            Ok(Accepted::Waiting(run) | Accepted::Stopped(run)) => {
                self.waiters.wait_update(run, name(update_id), reply);
                // A stopped run answers its update callers as its result's.
                self.answer_stopped(run);
            }
            Ok(Accepted::Returned(result)) => {
                // Its `UpdateDone` is in the log: answered once the log is
                // durable through its end (outputs queue in LSN order).
                let token = self.waiters.wait(Waiting::Updated(reply, result));
                let lsn = self.log.last_lsn();
                self.core.add_output(lsn, Output::Ack(token));
                self.release_now_if_durable();
            }
            Err(e) => self.refuse_after_durable_any(reply, e),
        }
    }

    /// Runs an update on workflow `start.id`, starting the workflow with the
    /// update when it has no run: the update then rides in the `Start`
    /// (the run's first delivery, so no validator runs: no code has run to
    /// register one). A finished run refuses it, as a plain update would.
    fn update_with_start(
        &mut self,
        start: UpdateStart,
        payload: Vec<u8>,
        reply: super::Reply<RunResult>,
        now_ms: u64,
    ) {
        match self.lookup(&start.id) {
            Err(e) => {
                let _ = reply.send(Err(e));
            }
            Ok(Some(_)) => {
                let accepted =
                    self.accept_update(&start.id, &start.name, &start.update_id, &payload, now_ms);
                self.answer_update(accepted, &start.update_id, reply);
            }
            Ok(None) => {
                let version = match self.registry.version_to_start(&start.wtype, None) {
                    Ok(v) => v,
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return;
                    }
                };
                let max = self.config.max_payload;
                for (what, len) in [
                    ("workflow input", start.input.len()),
                    ("update argument", payload.len()),
                ] {
                    if len > max {
                        let id = start.id.clone();
                        let _ = reply.send(Err(Error::TooLarge { id, what, len, max }));
                        return;
                    }
                }
                let run = self.core.allocate_run();
                let rec = RecordBuf::Start {
                    run,
                    id: name(&start.id),
                    wtype: name(&start.wtype),
                    version,
                    codec: CODEC_JSON,
                    started_ms: now_ms,
                    deadline_ms: 0,
                    parent: None,
                    policy: policy::ID_REJECT_DUPLICATE,
                    from: None,
                    copies: 0,
                    update: Some(Box::new(fusee_core::record::StartUpdate {
                        id: name(&start.update_id),
                        name: name(&start.name),
                        payload: Payload::from(payload.as_slice()),
                    })),
                    input: Payload::from(start.input.as_slice()),
                    meta: None,
                };
                if self.append(&rec).is_some() {
                    self.answer_update(Ok(Accepted::Waiting(run)), &start.update_id, reply);
                    self.metrics.started += 1;
                }
            }
        }
    }

    /// Answers query `name` of workflow `id` with its handler (loading a
    /// parked run first), recording nothing. A finished run's code no
    /// longer runs: its journal, while kept, is replayed with the
    /// registered code to answer ([`query_finished`](Self::query_finished)).
    fn answer_query(
        &mut self,
        id: &str,
        name: &str,
        payload: &[u8],
        now_ms: u64,
    ) -> Result<Vec<u8>, Error> {
        let Some((run, frame)) = self.lookup_frames(id)? else {
            return Err(Error::NotFound { id: id.to_string() });
        };
        let finished = match frame {
            Some(_) => self.core.parked(run).and_then(|p| p.done()).is_some(),
            None => self.core.get(run).is_some_and(|l| l.done.is_some()),
        };
        if finished {
            return self.query_finished(id, run, name, payload, now_ms);
        }
        if let Some(frame) = frame {
            self.load_frame(run, frame, now_ms)
                .map_err(|error| Error::Storage {
                    shard: self.shard,
                    error,
                })?;
        }
        // Handlers register when the code runs: a run not polled since
        // recovery or the load above has none yet.
        self.start_deferred(run);
        self.settle(run, now_ms);
        match self.live.get(&run) {
            Some(live) => ask_query(&std::rc::Rc::clone(&live.state), id, name, payload),
            None => Err(self
                .codeless(run, id, "query")
                .unwrap_or_else(|| Error::UnknownQuery {
                    id: id.to_string(),
                    name: name.to_string(),
                    registered: Vec::new(),
                })),
        }
    }

    /// Why unfinished run `run` has no code to answer a `what` (a query or
    /// an update), when the reason is not that the code registers no such
    /// handler: the replay check held it, or its type (at its version) has
    /// no code here.
    fn codeless(&self, run: RunId, id: &str, what: &str) -> Option<Error> {
        if let Some(why) = self.held_reason(run) {
            return Some(Error::Stopped {
                id: id.to_string(),
                run,
                reason: format!(
                    "held by the replay check ({why}): its code does not run, so no {what} \
                     handler answers, until it is resumed or reset"
                ),
            });
        }
        if !self.live.waits_for_code(run) {
            return None;
        }
        let l = self.core.get(run)?;
        match self.registry.code(&l.wtype, l.version) {
            Err(e) => Some(e),
            // Registered, and held back: the engine opened with
            // `Config::replay_check` starts no code until the check ran.
            Ok(_) => Some(Error::Stopped {
                id: id.to_string(),
                run,
                reason: format!(
                    "no run's code starts until Engine::check_replay has run (the engine was \
                     opened with Config::replay_check), so no {what} handler answers yet"
                ),
            }),
        }
    }

    /// Answers query `name` of finished run `run` by replaying its journal
    /// with the registered code (the engine's one host, `host::replay`):
    /// no step runs, nothing is recorded, the handlers answer as of the
    /// run's end. Once only its `Start` and `Done` are kept,
    /// [`Error::HistoryGone`].
    fn query_finished(
        &mut self,
        id: &str,
        run: RunId,
        name: &str,
        payload: &[u8],
        now_ms: u64,
    ) -> Result<Vec<u8>, Error> {
        let shard = self.shard;
        let journal = self.live_journal(id, Some(run), 0, now_ms)?;
        let records = fusee_core::record::decode_canonical_all(&journal.journal).map_err(|_| {
            Error::Storage {
                shard,
                error: fusee_storage::StorageError::Corrupt {
                    what: "finished run's journal",
                    at: run,
                },
            }
        })?;
        if !journal.complete {
            let finished_ms = records
                .iter()
                .find_map(|r| match r {
                    fusee_core::record::Record::Done { finished_ms, .. } => Some(*finished_ms),
                    _ => None,
                })
                .unwrap_or_default();
            // Still within its history time: the journal was over
            // `history_max_bytes`, kept as its summary from the start.
            let due = self.history_until(finished_ms);
            return Err(Error::HistoryGone {
                id: id.to_string(),
                run,
                what: format!("query {name:?}"),
                finished_ms,
                gone_ms: if due > now_ms { finished_ms } else { due },
            });
        }
        let failed = |kind: &str, message: String| Error::QueryFailed {
            id: id.to_string(),
            name: name.to_string(),
            failure: Failure::with_kind(kind, message),
        };
        match host::replay(&self.registry, &records) {
            Ok(replay) => ask_query(&replay.state, id, name, payload),
            Err(ReplayFault::NoCode { error, .. }) => Err(*error),
            Err(ReplayFault::Diverged(why)) => Err(failed(
                "determinism",
                format!(
                    "the registered code departs from the finished run's journal: {}",
                    why.message
                ),
            )),
            Err(ReplayFault::Malformed(why)) => Err(failed(
                "replay",
                format!("the finished run's journal does not replay: {why}"),
            )),
        }
    }

    /// Appends `rec` and acknowledges `reply` once it is durable.
    /// Acknowledges once everything appended so far is durable: a request
    /// that records nothing because an earlier record already answers it.
    fn ack_when_durable(&mut self, reply: super::Reply<()>) {
        let lsn = self.log.last_lsn();
        if lsn == self.flights.durable() {
            let _ = reply.send(Ok(()));
            return;
        }
        let token = self.waiters.wait(Waiting::Done(reply));
        self.core.add_output(lsn, Output::Ack(token));
    }

    /// The `Done` that terminates run `run` at `now_ms` for `reason`, on
    /// the word of `by` (a client's terminate, a cancel's grace passed).
    pub(super) fn terminate_record(
        &self,
        run: RunId,
        reason: String,
        by: &str,
        now_ms: u64,
    ) -> RecordBuf {
        let failure = crate::Failure::with_kind("terminated", reason);
        RecordBuf::Done {
            run,
            status: fusee_core::record::Status::Terminated,
            finished_ms: now_ms,
            payload: Payload::from(
                crate::workflow::encode(&failure)
                    .unwrap_or_default()
                    .as_slice(),
            ),
            by: Some(Payload::from(by.as_bytes())),
        }
    }

    pub(super) fn ack_after(&mut self, rec: &RecordBuf, reply: super::Reply<()>) {
        if let Some(lsn) = self.append(rec) {
            let token = self.waiters.wait(Waiting::Done(reply));
            self.core.add_output(lsn, Output::Ack(token));
        }
    }

    fn describe(&mut self, id: &str) -> crate::error::Result<Description> {
        let run = match self.core.find(id) {
            Some(Found::Parked(run)) => return self.describe_parked(id, run),
            Some(Found::Loaded(run)) => run,
            None => return Err(Error::NotFound { id: id.to_string() }),
        };
        let journal = self.run_journal(run).map_err(|error| Error::Storage {
            shard: self.shard,
            error,
        })?;
        let view = JournalView::of(&journal);
        // Its current step and any stop are in its code's state.
        self.start_deferred(run);
        let Some(l) = self.core.get(run) else {
            return Err(Error::NotFound { id: id.to_string() });
        };
        let live = self.live.get(&run);
        let stopped = live.and_then(|l| l.stopped.as_ref().map(ToString::to_string));
        // Only durable state is shown: a `Done` not yet durable may still
        // be taken back by a crash.
        let done = l.done.filter(|_| l.last_lsn <= self.flights.durable());
        let status = match (done, &stopped) {
            (Some((s, _)), _) => RunStatus::Finished(s),
            (None, Some(_)) => RunStatus::Stopped,
            (None, None) if self.live.waits_for_code(run) => RunStatus::WaitingForCode,
            (None, None) => RunStatus::Running,
        };
        let step = live.and_then(|live| live.state.borrow().current_step());
        Ok(Description {
            id: id.to_string(),
            workflow: l.wtype.to_string(),
            version: l.version,
            shard: self.shard,
            run,
            status,
            started_ms: l.started_ms,
            finished_ms: done.map(|(_, ms)| ms),
            step,
            stopped_because: stopped,
            parked: false,
            paused: view.paused,
            held: view.held,
            journal_bytes: view.bytes,
            journal_records: view.records,
            children: view.children,
            waits: view.waits,
            in_flight: view.in_flight,
            attributes: view.attributes,
        })
    }

    /// [`describe`](Self::describe) of parked run `run`, found for `id`.
    fn describe_parked(&mut self, id: &str, run: RunId) -> crate::error::Result<Description> {
        let shard = self.shard;
        let storage = |error| Error::Storage { shard, error };
        // One read of its frames for all of it.
        let Some(journal) = self
            .parked_journal(run)
            .map_err(storage)?
            .filter(|j| parking::names(j, id))
        else {
            return Err(Error::NotFound { id: id.to_string() });
        };
        let start = parking::start_of(&journal);
        let done = self
            .core
            .parked(run)
            .and_then(|p| p.done())
            .map(|status| (status, parking::done_of(&journal)));
        let (workflow, version, started_ms) = match start {
            Some(Record::Start {
                wtype,
                version,
                started_ms,
                ..
            }) => (wtype.to_string(), version, started_ms),
            _ => (String::new(), 0, 0),
        };
        let (status, finished_ms) = match done {
            Some((status, Some(Record::Done { finished_ms, .. }))) => {
                (RunStatus::Finished(status), Some(finished_ms))
            }
            Some((status, _)) => (RunStatus::Finished(status), None),
            None => (RunStatus::Running, None),
        };
        let view = JournalView::of(&journal);
        Ok(Description {
            id: id.to_string(),
            workflow,
            version,
            shard: self.shard,
            run,
            status,
            started_ms,
            finished_ms,
            step: None,
            stopped_because: None,
            parked: true,
            paused: view.paused,
            held: view.held,
            journal_bytes: view.bytes,
            journal_records: view.records,
            children: view.children,
            waits: view.waits,
            in_flight: view.in_flight,
            attributes: view.attributes,
        })
    }

    /// Releases outputs at once when nothing is waiting to be flushed.
    pub(super) fn release_now_if_durable(&mut self) {
        if self.log.last_lsn() == self.flights.durable() {
            self.release_outputs();
        }
    }

    /// Hands out every output whose record is durable.
    pub(super) fn release_outputs(&mut self) {
        let mut out = Vec::new();
        self.core.release(self.flights.durable(), &mut out);
        for o in out {
            match o {
                Output::Ack(token) => match self.waiters.take(token) {
                    Some(Waiting::Started(r, run)) => {
                        let _ = r.send(Ok(run));
                    }
                    Some(Waiting::Done(r)) => {
                        let _ = r.send(Ok(()));
                    }
                    Some(Waiting::Refused(r, e)) => {
                        let _ = r.send(Err(e));
                    }
                    Some(Waiting::RefusedDone(r, e)) => {
                        let _ = r.send(Err(e));
                    }
                    Some(Waiting::Message { from }) => self.mail.acknowledge(from),
                    Some(Waiting::Answer(r, answer)) => {
                        let _ = r.send(Ok(answer));
                    }
                    Some(Waiting::Updated(r, result)) => {
                        let _ = r.send(Ok(result));
                    }
                    Some(Waiting::Journal(r, journal)) => {
                        let _ = r.send(Ok(journal));
                    }
                    Some(Waiting::Stopped(r, e)) => {
                        let _ = r.send(Err(e));
                    }
                    None => {}
                },
                Output::Result {
                    run,
                    status,
                    payload,
                } => {
                    self.streams.forget(run);
                    self.metrics.finished += 1;
                    self.end_update_waiters(run, status);
                    let waiting = self.waiters.take_results(run);
                    // A handover (continue-as-new) hands its callers to the
                    // ID's next run.
                    let next = status
                        .is_handover()
                        .then(|| self.core.get(run).map(|l| l.id.clone()))
                        .flatten()
                        .and_then(|id| match self.core.find(&id) {
                            Some(Found::Loaded(next)) if next != run => Some(next),
                            _ => None,
                        });
                    match next {
                        Some(next) => self.waiters.hand_results(next, waiting),
                        None => {
                            for r in waiting {
                                let _ = r.send(Ok(RunResult {
                                    status,
                                    payload: payload.to_vec(),
                                }));
                            }
                        }
                    }
                }
                Output::UpdateResult {
                    run,
                    id,
                    status,
                    payload,
                    ..
                } => {
                    for r in self.waiters.take_update(run, id) {
                        let _ = r.send(Ok(RunResult {
                            status,
                            payload: payload.to_vec(),
                        }));
                    }
                }
                other => {
                    if let Some(message) = super::messages::Message::of(other, &self.core) {
                        self.send(message);
                    }
                }
            }
        }
    }
}

/// Asks query `name` of a run's code state (its registered handlers), a
/// panic in the handler a failure.
fn ask_query(
    state: &std::rc::Rc<std::cell::RefCell<RunState>>,
    id: &str,
    name: &str,
    payload: &[u8],
) -> Result<Vec<u8>, Error> {
    let answer = with_query_handler(state, name, |handler| {
        catch_panic(|| handler(payload)).unwrap_or_else(|panic| {
            Err(Failure::with_kind(
                "panic",
                format!("the query handler panicked: {panic}"),
            ))
        })
    });
    let Some(answer) = answer else {
        let mut registered: Vec<String> = state.borrow().query_names();
        registered.sort();
        return Err(Error::UnknownQuery {
            id: id.to_string(),
            name: name.to_string(),
            registered,
        });
    };
    answer.map_err(|failure| Error::QueryFailed {
        id: id.to_string(),
        name: name.to_string(),
        failure,
    })
}

/// How an update was taken.
enum Accepted {
    /// Recorded now, or earlier and its handler still runs: the caller
    /// waits for its `UpdateDone`.
    Waiting(u64),
    /// Accepted and answered before (a keyed update asked again): its
    /// result.
    Returned(RunResult),
    /// Not recorded: the run's code is stopped, and the caller gets the
    /// stop as a result's caller does ([`ShardLoop::answer_stopped`]).
    Stopped(u64),
}

/// What an update-with-start starts when the workflow has no run.
pub(super) struct UpdateStart {
    pub(super) wtype: String,
    pub(super) id: String,
    pub(super) input: Vec<u8>,
    pub(super) name: String,
    pub(super) update_id: String,
}

/// Answers a client input the shard will not act on with `err()`.
pub(super) fn refuse(input: Input, err: impl Fn() -> Error) {
    match input {
        Input::Start { reply, .. } => {
            let _ = reply.send(Err(err()));
        }
        Input::Signal { reply, .. } | Input::Cancel { reply, .. } | Input::Close { reply } => {
            let _ = reply.send(Err(err()));
        }
        Input::Result { reply, .. } => {
            let _ = reply.send(Err(err()));
        }
        Input::Describe { reply, .. } => {
            let _ = reply.send(Err(err()));
        }
        _ => {}
    }
}
