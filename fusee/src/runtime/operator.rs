//! Operator verbs on the shard: pausing and resuming a run, resetting it
//! to a step, listing runs, and the view of a journal `describe` shows.
//!
//! # Pause and resume: `Attributes` records
//!
//! A run's `Attributes` records (tag 21) belong to the host. The engine
//! writes their payload as a JSON object; the key `"fusee.paused"`, a
//! boolean, pauses (`true`) or resumes (`false`) the run, and the latest
//! record holding the key wins. Payloads that are not JSON objects, and
//! other keys, are left alone (search attributes, `"fusee.attrs"`: the
//! one payload format is documented in [`crate::attrs`]). Being in
//! the journal, the state survives a restart and a park, and replay never
//! sees it: `RunMachine` passes `Attributes` to the host.
//!
//! The replay check holds a run whose code departs from its journal
//! (`runtime/check`) with a pausing record that also holds the key
//! `"fusee.held"`, a string: why. A held run's code does not start (it
//! would only stop at the departure); resuming it (`"fusee.paused":
//! false`) lets its code start again, with the code registered then.
//!
//! While a run is paused no step attempt starts ([`ShardLoop::start_steps`]
//! asks [`ShardLoop::is_paused`]); its timers fire, signals, updates and
//! cancels are recorded, and its code runs up to its next step.
//!
//! # Reset: a `Done` that hands over, then copies
//!
//! Resetting run R of an ID to step `s` cuts R's journal before the first
//! record of the operation that is `s`'s first step (every record before
//! the cut, but R's `Start` and a cancel's grace, is copied: a grace
//! ends R, not the new run) and appends, for a running R:
//!
//! 1. `Done { run: R, status: Reset, payload: <the new Start>, by: "operator: <reason>" }`:
//!    one record ends R and, as for continue-as-new, carries the new run's
//!    `Start` (`from: R` with cause `RESET`, `copies: n`), which the core
//!    applies as the new run N's start;
//! 2. the `n` copied records, each with `run: N`. The core counts them
//!    off (`copies`): their messages were sent once, by R, and are not
//!    sent again.
//!
//! For an R already finished there is no `Done` to write: the new `Start`
//! is appended on its own, without R's parent (which has its answer).
//! Any prefix of a journal is a journal a crash could have left, so N's
//! code replays the copies and goes on live from the cut. A crash between
//! these records loses a suffix of them with the log's tail, and the
//! caller, answered only once all are durable, sees an error and may
//! retry.
//!
//! A retry must not reset the new run when the first try's records were
//! durable after all (the answer was lost, not the reset). `reset_run`
//! names the run to reset, and a run is reset at most once: when the
//! ID's current run is not the one named, the shard reads the current
//! run's `Start`, and if its origin is a reset of the named run, that run
//! is the answer and nothing is recorded. The origin is in the journal,
//! so this holds across restarts and parking, with no key to keep.
//!
//! A child started before the cut and not finished by it would report to
//! R, not N: such a reset is refused.

use fusee_core::record::{
    Origin, Payload, Record, RecordBuf, RunId, Status, find_kind, iter_canonical, kind, origin,
};
use fusee_core::shard::Output;
use fusee_storage::LogStore;

use super::ShardLoop;
use super::parking;
use super::waiters::Waiting;
use crate::client::{
    InFlight, InFlightStep, LIST_VISITS_MAX, ListFilter, LiveJournal, PendingChild, PendingWait,
    RunRef, RunSummary, ShardPage,
};
use crate::error::Error;

/// The attribute key that pauses a run.
const PAUSED_KEY: &str = "fusee.paused";

/// The attribute key, beside a pause, that says the replay check held the
/// run, and why.
const HELD_KEY: &str = "fusee.held";

/// What a run's journal says, for `describe`.
#[derive(Debug, Default)]
pub(super) struct JournalView {
    pub(super) paused: bool,
    pub(super) held: Option<String>,
    pub(super) bytes: u64,
    pub(super) records: u64,
    pub(super) children: Vec<PendingChild>,
    pub(super) waits: Vec<PendingWait>,
    pub(super) in_flight: Vec<InFlightStep>,
    pub(super) attributes: crate::attrs::AttrMap,
}

impl JournalView {
    /// Reads a run's canonical journal. Records that do not decode end the
    /// view (the journal was checked when it was read).
    pub(super) fn of(journal: &[u8]) -> Self {
        let mut view = JournalView {
            bytes: journal.len() as u64,
            ..Self::default()
        };
        // Pending operations by sequence number, in the order they began.
        let mut children: Vec<(u32, PendingChild)> = Vec::new();
        let mut waits: Vec<(u32, PendingWait)> = Vec::new();
        let mut in_flight = InFlight::default();
        for item in iter_canonical(journal) {
            let Ok((rec, _)) = item else { break };
            view.records += 1;
            in_flight.take(&rec);
            match rec {
                Record::Child { seq, wtype, id, .. } => children.push((
                    seq,
                    PendingChild {
                        id: id.to_string(),
                        workflow: wtype.to_string(),
                    },
                )),
                Record::ChildDone { seq, .. } => children.retain(|(s, _)| *s != seq),
                Record::Timer {
                    seq,
                    name,
                    fire_at_ms,
                    ..
                } => waits.push((
                    seq,
                    PendingWait::Timer {
                        name: name.to_string(),
                        fire_at_ms,
                    },
                )),
                Record::Wait {
                    seq,
                    name,
                    deadline_ms,
                    ..
                } => waits.push((
                    seq,
                    PendingWait::Signal {
                        name: name.to_string(),
                        deadline_ms: (deadline_ms != 0).then_some(deadline_ms),
                    },
                )),
                Record::Fired { seq, .. } | Record::Waited { seq, .. } => {
                    waits.retain(|(s, _)| *s != seq)
                }
                Record::Start { meta: Some(m), .. } => {
                    crate::attrs::apply_payload(&mut view.attributes, m.attributes);
                }
                Record::Attributes { payload, .. } => {
                    crate::attrs::apply_payload(&mut view.attributes, payload);
                    if let Some(p) = paused_in(payload) {
                        view.paused = p;
                        view.held = held_in(payload);
                    }
                }
                // A finished run waits for nothing and is not paused: what
                // was pending when it ended (a cancel or terminate during a
                // wait, a timer that lost a race) was abandoned.
                Record::Done { .. } => {
                    children.clear();
                    waits.clear();
                    view.paused = false;
                    view.held = None;
                }
                _ => {}
            }
        }
        view.children = children.into_iter().map(|(_, c)| c).collect();
        view.waits = waits.into_iter().map(|(_, w)| w).collect();
        view.in_flight = in_flight.into_steps();
        view
    }
}

/// The pause state an `Attributes` payload sets, if it sets one.
fn paused_in(payload: &[u8]) -> Option<bool> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    value.get(PAUSED_KEY)?.as_bool()
}

/// Why a pausing `Attributes` payload holds its run (the replay check's
/// hold), if it does.
fn held_in(payload: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    if value.get(PAUSED_KEY)?.as_bool()? {
        return value.get(HELD_KEY)?.as_str().map(str::to_string);
    }
    None
}

/// The `Attributes` payload that holds a run: paused, with why.
pub(super) fn held_payload(why: &str) -> Vec<u8> {
    serde_json::json!({ PAUSED_KEY: true, HELD_KEY: why })
        .to_string()
        .into_bytes()
}

/// The `Attributes` payload that pauses or resumes a run.
fn paused_payload(paused: bool) -> Vec<u8> {
    serde_json::json!({ PAUSED_KEY: paused })
        .to_string()
        .into_bytes()
}

impl ShardLoop {
    /// Whether loaded run `run` is paused: its latest `Attributes` record
    /// with the pause key says so.
    pub(super) fn is_paused(&self, run: RunId) -> bool {
        self.core.get(run).is_some_and(|l| {
            l.attrs()
                .iter()
                .rev()
                .find_map(|a| paused_in(a))
                .unwrap_or(false)
        })
    }

    /// Why loaded run `run` is held by the replay check, if it is: its
    /// latest `Attributes` record with the pause key pauses it and names
    /// why.
    pub(super) fn held_reason(&self, run: RunId) -> Option<String> {
        let l = self.core.get(run)?;
        let latest = l.attrs().iter().rev().find(|a| paused_in(a).is_some())?;
        held_in(latest)
    }

    /// Whether loaded run `run` is held (see [`held_reason`](Self::held_reason)).
    pub(super) fn is_held(&self, run: RunId) -> bool {
        self.held_reason(run).is_some()
    }

    /// Pauses or resumes workflow `id` (see the module docs); answers once
    /// the record is durable, or at once when there is nothing to record.
    pub(super) fn set_paused(
        &mut self,
        id: &str,
        paused: bool,
        reply: super::Reply<()>,
        now_ms: u64,
    ) {
        let run = match self.running(id, "pause", 0, now_ms) {
            Ok(run) => run,
            Err(e) => {
                self.refuse_after_durable(reply, e);
                return;
            }
        };
        if self.is_paused(run) == paused {
            // Nothing to record, but the state read may not be durable.
            self.ack_after_last(reply);
            return;
        }
        let rec = RecordBuf::Attributes {
            run,
            payload: Payload::from(paused_payload(paused).as_slice()),
        };
        self.ack_after(&rec, reply);
        if !paused {
            self.live.step_due(run);
            // A run the replay check held has no code running: it starts
            // now, with the code registered now.
            self.start_code(run);
        }
        tracing::debug!(shard = self.shard, run, paused, "pause state set");
    }

    /// Lets step `step` of workflow `id`, paused because its retry policy
    /// ran out of attempts, run again with a fresh allowance: a `Resume`
    /// record, then the next attempt as soon as it is durable.
    pub(super) fn resume_step(
        &mut self,
        id: &str,
        step: &str,
        reply: super::Reply<()>,
        now_ms: u64,
    ) {
        let run = match self.running(id, "resume", 0, now_ms) {
            Ok(run) => run,
            Err(e) => {
                self.refuse_after_durable(reply, e);
                return;
            }
        };
        self.settle(run, now_ms);
        let paused = self
            .live
            .get(&run)
            .map(|live| live.state.borrow().paused_steps());
        let paused = paused.unwrap_or_default();
        let Some(&(seq, _, _)) = paused.iter().find(|(_, name, _)| name == step) else {
            let _ = reply.send(Err(Error::StepNotPaused {
                id: id.to_string(),
                step: step.to_string(),
                paused: paused.into_iter().map(|(_, name, _)| name).collect(),
            }));
            return;
        };
        self.ack_after(&RecordBuf::Resume { run, seq }, reply);
        // The next attempt is the machine's answer now that it has the
        // `Resume` (the one owner of retry state: `run`'s docs).
        if let Some(live) = self.live.get(&run) {
            live.state.borrow_mut().step_resumed(seq);
        }
        self.live.step_due(run);
        tracing::info!(shard = self.shard, run, seq, step, "step resumed");
    }

    /// Answers `reply` once the log is durable through its last record.
    fn ack_after_last(&mut self, reply: super::Reply<()>) {
        let token = self.waiters.wait(Waiting::Done(reply));
        let lsn = self.log.last_lsn();
        self.core.add_output(lsn, Output::Ack(token));
        self.release_now_if_durable();
    }

    /// Resets workflow `id` to its step `step` (see the module docs): its
    /// run `run` if named, else its current run.
    pub(super) fn reset(
        &mut self,
        id: &str,
        run: Option<RunId>,
        step: &str,
        reason: &str,
        reply: super::Reply<RunRef>,
        now_ms: u64,
    ) {
        if let Some(expected) = run {
            match self.reset_already(id, expected) {
                Ok(None) => {}
                Ok(Some(made)) => {
                    // The reset was made before (a repeat after a lost
                    // answer or a crash): answer with its run once the
                    // records that made it are durable, as the first
                    // answer would have been.
                    let token = self.waiters.wait(Waiting::Started(reply, made));
                    let lsn = self.log.last_lsn();
                    self.core.add_output(lsn, Output::Ack(token));
                    self.release_now_if_durable();
                    return;
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                    return;
                }
            }
        }
        match self.plan_reset(id, step, reason, now_ms) {
            Ok(records) => {
                let mut last = None;
                for rec in &records {
                    last = self.append(rec);
                }
                let (Some(lsn), Some(next)) = (last, records.last().map(RecordBuf::run)) else {
                    return;
                };
                let made = RunRef {
                    id: id.to_string(),
                    shard: self.shard,
                    run: self.reset_target(&records).unwrap_or(next),
                    attached: false,
                };
                let token = self.waiters.wait(Waiting::Started(reply, made));
                self.core.add_output(lsn, Output::Ack(token));
                self.metrics.started += 1;
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// Whether run `expected` of `id` was reset already: `None` if it is
    /// the ID's current run (reset it now), the run its reset made if
    /// that is the current run, otherwise why it cannot be reset.
    fn reset_already(&mut self, id: &str, expected: RunId) -> Result<Option<RunRef>, Error> {
        let Some((current, _)) = self.lookup(id)? else {
            return Err(Error::NotFound { id: id.to_string() });
        };
        if current == expected {
            return Ok(None);
        }
        let shard = self.shard;
        let storage = move |error| Error::Storage { shard, error };
        let start = match self.core.get(current) {
            Some(_) => {
                let journal = self.run_journal(current).map_err(storage)?;
                iter_canonical(&journal)
                    .next()
                    .and_then(Result::ok)
                    .map(|(r, _)| r.to_buf())
            }
            None => self.parked_start(current).map_err(storage)?,
        };
        match start {
            Some(RecordBuf::Start {
                from: Some(Origin { run, cause }),
                ..
            }) if run == expected && cause == origin::RESET => Ok(Some(RunRef {
                id: id.to_string(),
                shard: self.shard,
                run: current,
                attached: true,
            })),
            _ => Err(Error::CannotReset {
                id: id.to_string(),
                reason: format!(
                    "run {expected} is not its current run (run {current} is), and run \
                     {current} was not made by resetting it"
                ),
            }),
        }
    }

    /// The new run a reset's records start.
    fn reset_target(&self, records: &[RecordBuf]) -> Option<RunId> {
        match records.first()? {
            RecordBuf::Start { run, .. } => Some(*run),
            RecordBuf::Done { payload, .. } => match iter_canonical(payload).next() {
                Some(Ok((Record::Start { run, .. }, _))) => Some(run),
                _ => None,
            },
            _ => None,
        }
    }

    /// The records a reset appends, or why it may not happen. Records
    /// nothing itself.
    fn plan_reset(
        &mut self,
        id: &str,
        step: &str,
        reason: &str,
        now_ms: u64,
    ) -> Result<Vec<RecordBuf>, Error> {
        let cannot = |why: String| Error::CannotReset {
            id: id.to_string(),
            reason: why,
        };
        let Some((old, frame)) = self.lookup_frames(id)? else {
            return Err(Error::NotFound { id: id.to_string() });
        };
        // A finished parked run is reset from its frame, which holds its
        // whole journal while its history is kept: it is not loaded back.
        let mut parked_finished = None;
        if let Some(frame) = frame {
            if self.core.parked(old).and_then(|p| p.done()).is_some() {
                if crate::recovery::summary_only(&frame.journal) {
                    return Err(cannot(
                        "its history was let go (Config::history_retention,                          Config::history_max_bytes): only its start and end are kept"
                            .into(),
                    ));
                }
                // The copies include its chunks, set apart or not.
                let frame = self.join(frame).map_err(|error| Error::Storage {
                    shard: self.shard,
                    error,
                })?;
                parked_finished = Some(frame.journal);
            } else {
                self.load_frame(old, frame, now_ms)
                    .map_err(|error| Error::Storage {
                        shard: self.shard,
                        error,
                    })?;
            }
        }
        let (finished, journal) = match parked_finished {
            Some(journal) => (true, journal),
            None => (
                self.core.get(old).and_then(|l| l.done).is_some(),
                self.run_journal(old).map_err(|error| Error::Storage {
                    shard: self.shard,
                    error,
                })?,
            ),
        };
        let mut records = Vec::new();
        for item in iter_canonical(&journal) {
            let (rec, _) = item.map_err(|e| cannot(format!("its journal does not decode: {e}")))?;
            records.push(rec.to_buf());
        }
        let Some(RecordBuf::Start {
            id: rid,
            wtype,
            version,
            codec,
            deadline_ms,
            parent,
            policy,
            input,
            meta,
            ..
        }) = records.first().cloned()
        else {
            return Err(cannot("its journal does not begin with its start".into()));
        };
        let step_seq = records.iter().find_map(|r| match r {
            RecordBuf::Step { seq, name, .. }
            | RecordBuf::Began { seq, name, .. }
            | RecordBuf::Attempt { seq, name, .. }
            | RecordBuf::Awaiting { seq, name, .. }
                if &**name == step =>
            {
                Some(*seq)
            }
            _ => None,
        });
        let Some(step_seq) = step_seq else {
            let mut steps: Vec<String> = Vec::new();
            for r in &records {
                if let RecordBuf::Step { name, .. }
                | RecordBuf::Began { name, .. }
                | RecordBuf::Attempt { name, .. } = r
                    && !steps.iter().any(|s| s == &**name)
                {
                    steps.push(name.to_string());
                }
            }
            return Err(Error::UnknownStep {
                id: id.to_string(),
                step: step.to_string(),
                steps,
            });
        };
        let cut = records
            .iter()
            .position(|r| r.seq() == Some(step_seq))
            .unwrap_or(records.len());
        // A cancel's grace belongs to the old run (its deadline): not
        // copied, or a recovery would arm it for the new one.
        let copied: Vec<RecordBuf> = records[1..cut]
            .iter()
            .filter_map(super::grace::without_grace)
            .collect();
        let mut open_children: Vec<(u32, String)> = Vec::new();
        for r in &copied {
            match r {
                RecordBuf::Child { seq, id, .. } => open_children.push((*seq, id.to_string())),
                RecordBuf::ChildDone { seq, .. } => open_children.retain(|(s, _)| s != seq),
                _ => {}
            }
        }
        if let Some((_, child)) = open_children.first() {
            return Err(cannot(format!(
                "its child {child:?} is still running at step {step:?}: its result would go \
                 to the old run; reset to a step before the child started"
            )));
        }
        let copies = u32::try_from(copied.len())
            .map_err(|_| cannot("its journal has too many records to copy".into()))?;
        let new = self.core.allocate_run();
        let start = RecordBuf::Start {
            run: new,
            id: rid,
            wtype,
            version,
            codec,
            started_ms: now_ms,
            deadline_ms,
            // A finished run's parent has had its answer.
            parent: if finished { None } else { parent },
            policy,
            from: Some(Origin {
                run: old,
                cause: origin::RESET,
            }),
            copies,
            update: None,
            input,
            meta,
        };
        let mut out = Vec::with_capacity(copied.len() + 1);
        if finished {
            out.push(start);
        } else {
            let mut bytes = Vec::new();
            fusee_core::record::encode_canonical(&start, &mut bytes);
            out.push(RecordBuf::Done {
                run: old,
                status: Status::Reset,
                finished_ms: now_ms,
                payload: Payload::from(bytes.as_slice()),
                by: Some(Payload::from(format!("operator: {reason}").as_bytes())),
            });
        }
        for mut copy in copied {
            copy.set_run(new);
            out.push(copy);
        }
        tracing::info!(shard = self.shard, old, new, step, copies, "reset");
        Ok(out)
    }

    /// One shard's page of runs below `below` passing `filter`: at most the
    /// filter's limit, visiting at most [`LIST_VISITS_MAX`] runs.
    pub(super) fn list_page(&mut self, filter: &ListFilter, below: RunId) -> ShardPage {
        let limit = filter.limit_value();
        let mut page = ShardPage::default();
        let mut cursor = self.core.newest_first_below(below);
        let mut visited = 0usize;
        let mut last = below;
        loop {
            let batch = cursor.next_batch(&self.core, 256);
            if batch.is_empty() {
                return page;
            }
            let wanted = limit.saturating_sub(page.runs.len());
            self.prefetch_parked(batch.iter().copied().take(wanted));
            for run in batch {
                if page.runs.len() == limit || visited == LIST_VISITS_MAX {
                    page.resume = Some(last);
                    return page;
                }
                visited += 1;
                last = run;
                if let Some(summary) = self.summary(run, filter) {
                    page.runs.push(summary);
                }
            }
        }
    }

    /// `run` as a listing shows it, if it passes `filter`.
    pub(super) fn summary(&mut self, run: RunId, filter: &ListFilter) -> Option<RunSummary> {
        if let Some(l) = self.core.get(run) {
            // Only a durable end counts, as in `describe`.
            let ended = l.done.filter(|_| l.last_lsn <= self.flights.durable());
            let done = ended.map(|(s, _)| s);
            if !filter.admits(done, Some(&l.wtype)) {
                return None;
            }
            return Some(RunSummary {
                id: l.id.to_string(),
                workflow: l.wtype.to_string(),
                version: l.version,
                shard: self.shard,
                run,
                started_ms: l.started_ms,
                finished: done,
                finished_ms: ended.map(|(_, ms)| ms),
                parked: false,
                held: self.held_reason(run),
            });
        }
        let parked = self.core.parked(run)?;
        let done = parked.done();
        // Status first: it costs nothing, the type costs a read.
        if !filter.admits_status(done) {
            return None;
        }
        let start = self.parked_start(run).ok().flatten()?;
        let RecordBuf::Start {
            id,
            wtype,
            version,
            started_ms,
            ..
        } = start
        else {
            return None;
        };
        if !filter.admits(done, Some(&wtype)) {
            return None;
        }
        Some(RunSummary {
            id: id.to_string(),
            workflow: wtype.to_string(),
            version,
            shard: self.shard,
            run,
            started_ms,
            finished: done,
            finished_ms: self.core.parked_finished_ms(run),
            parked: true,
            // A held run does not park (`parking::quiescent`).
            held: None,
        })
    }
}

/// `journal` without its streams' chunks once they went (`gone`), as a
/// rewritten frame holds it: a reader sees the same before and after the
/// rewrite.
fn without_chunks_if(journal: Vec<u8>, gone: Option<(u64, u64)>) -> Vec<u8> {
    match gone {
        Some(_) if find_kind(&journal, kind::CHUNK).is_some() => parking::without_chunks(&journal),
        _ => journal,
    }
}

/// A run's journal for [`crate::dynamic`] (`Input::Journal`).
impl ShardLoop {
    /// For a run that finished at `finished_ms`: when its streams' chunks
    /// went (`Config::stream_retention`), if that time passed by `now_ms`,
    /// with its finish.
    fn streams_gone(&self, finished_ms: Option<u64>, now_ms: u64) -> Option<(u64, u64)> {
        let finished_ms = finished_ms?;
        let at = self.streams_until(finished_ms);
        (at <= now_ms).then_some((finished_ms, at))
    }

    /// Run `run` of `id` (its latest run when `None`): its whole journal
    /// as the shard holds it, and where it stands. Answered once every
    /// record it holds is durable (the caller sends it out of the
    /// process), as a query's answer is. A reader that walked `from`
    /// bytes of an unfinished run's journal in memory gets the rest only,
    /// with no read of its stored prefix (`LiveJournal::offset`; its
    /// `state` then from the core's waits).
    pub(super) fn live_journal(
        &mut self,
        id: &str,
        run: Option<RunId>,
        from: u64,
        now_ms: u64,
    ) -> Result<LiveJournal, Error> {
        use crate::inspect::RunState;
        let not_found = || Error::NotFound { id: id.to_string() };
        let shard = self.shard;
        let storage = |error| Error::Storage { shard, error };
        // A lookup's read of a parked run's frames is the answer's: a
        // subscriber polling a parked run reads them once per poll.
        let (run, read) = match run {
            Some(run) => (run, None),
            None => self.lookup_frames(id)?.ok_or_else(not_found)?,
        };
        if let Some(l) = self.core.get(run) {
            if &*l.id != id {
                return Err(not_found());
            }
            // The rest after `from`: an unfinished run's journal is only
            // appended to, and `from` ended a durable answer's bytes.
            let rest = from
                .checked_sub(l.blob_journal)
                .and_then(|at| usize::try_from(at).ok())
                .filter(|&at| from > 0 && l.done.is_none() && at <= l.journal.len());
            if let Some(at) = rest {
                let state = match l.waiting_on().next() {
                    Some(_) => RunState::Waiting,
                    None => RunState::Running,
                };
                return Ok(LiveJournal {
                    shard,
                    run,
                    journal: l.journal[at..].to_vec(),
                    offset: from,
                    complete: true,
                    streams_gone: None,
                    state,
                    last_lsn: l.last_lsn,
                });
            }
            let (last_lsn, done) = (l.last_lsn, l.done);
            let journal = self.run_journal(run).map_err(storage)?;
            let state = match done {
                Some((status, _)) => RunState::Finished(status),
                None if JournalView::of(&journal).waits.is_empty() => RunState::Running,
                None => RunState::Waiting,
            };
            let streams_gone = self.streams_gone(done.map(|(_, at)| at), now_ms);
            return Ok(LiveJournal {
                shard,
                run,
                journal: without_chunks_if(journal, streams_gone),
                offset: 0,
                complete: true,
                streams_gone,
                state,
                last_lsn,
            });
        }
        let Some(parked) = self.core.parked(run) else {
            return Err(not_found());
        };
        let (blob, done) = (parked.blob(), parked.done());
        // A subscriber reads the chunks: those set apart are put back.
        let frame = match read.filter(|f| f.blobs.first() == Some(&blob)) {
            Some(frame) => self.join(frame).map_err(storage)?,
            None => self.read_frame(blob).map_err(storage)?,
        };
        match iter_canonical(&frame.journal).next() {
            Some(Ok((Record::Start { id: found, .. }, _))) if found == id => {}
            _ => return Err(not_found()),
        }
        // A finished run's frame keeps its whole journal for its history
        // time, then only its summary (the rule `fusee::inspect` reads).
        let complete = done.is_none() || !crate::recovery::summary_only(&frame.journal);
        // A finished run's `Done` says when (a walk of the journal: not
        // for an unfinished one, which a subscriber polls).
        let finished_ms = match done.map(|_| parking::done_of(&frame.journal)) {
            Some(Some(Record::Done { finished_ms, .. })) => Some(finished_ms),
            _ => None,
        };
        let streams_gone = self.streams_gone(finished_ms, now_ms);
        Ok(LiveJournal {
            shard,
            run,
            journal: without_chunks_if(frame.journal, streams_gone),
            offset: 0,
            complete,
            streams_gone,
            state: done.map_or(RunState::Parked, RunState::Finished),
            last_lsn: frame.last_lsn,
        })
    }
}
