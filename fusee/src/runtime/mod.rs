//! The shard runtime: one [`ShardLoop`] per shard, a state machine over its
//! [`ShardCore`], its runs' [`RunMachine`](fusee_core::run::RunMachine)s
//! and workflow code, and its storage parts.
//!
//! # One loop, two drivers
//!
//! The loop does no waiting of its own and reads no clock: a driver gives
//! it inputs ([`ShardLoop::handle`]) and the time, runs it
//! ([`ShardLoop::run`]) and carries out what it asks ([`Effects`]: a flush
//! ticket to run, step functions to start), then waits until
//! [`ShardLoop::next_wake`] or the next input. The production driver
//! ([`driver`]) gives each shard a thread and a flusher thread and runs
//! steps on the embedder's tokio runtime; a test driver can step every
//! shard, flush and step single-threaded on a virtual clock.
//!
//! # One iteration ([`ShardLoop::run`])
//!
//! 1. Due timers fire ([`ShardCore::poll_timers`]).
//! 2. Inputs become records: client requests (start, signal, cancel),
//!    step results (`Step`, or `Attempt` by the step's retry policy).
//!    Every record is encoded once; the same bytes go to the log and, by
//!    [`ShardCore::apply_encoded`], to the run's journal, and the record to
//!    the run's machine.
//! 3. Core events: a started run gets its machine and its code; a fired
//!    timer or a signal offered to a wait becomes a `Fired` or `Waited`
//!    record.
//! 4. Runs woken are polled to quiescence; the records their code asked
//!    for are appended; then the machine's next delivery, one at a time.
//! 5. Steps whose run is durable through its gate LSN start (the
//!    output-commit rule: no effect before the records it follows are
//!    durable).
//! 6. With records waiting and no flush in flight, a flush begins (group
//!    commit: what arrives meanwhile forms the next batch). When its ticket
//!    comes back, outputs whose records are durable are released: replies,
//!    results to waiters.
//! 7. A seal of the log ([`fusee_storage::LogStore::begin_seal`]), once
//!    it has been idle `seal_idle_ms` after a flush or the oldest unsealed
//!    durable record waited `seal_interval_ms`: its ticket goes to the
//!    driver like a flush's, and the time it is due to [`ShardLoop::next_wake`].
//! 8. A checkpoint, when due, once the log is wholly durable (at close,
//!    followed by a seal).
//!
//! # Invariants
//!
//! - No reply, result or step start leaves before the records it depends
//!   on are durable (replies and results through [`ShardCore::release`],
//!   steps through the gate LSN).
//! - A client request refused records nothing.
//! - A storage failure stops the shard: every waiting caller gets
//!   [`crate::Error::Storage`] ([`crate::Error::NotOwner`] when the
//!   storage answered `Fenced`, [`crate::Error::Unavailable`] when it was
//!   out of reach), and nothing more is appended.

mod backup;
mod check;
mod checkpoint;
mod compaction;
pub(crate) mod driver;
mod flights;
mod grace;
pub(crate) mod host;
mod inputs;
mod lifecycle;
mod live;
pub(crate) mod messages;
pub(crate) mod operator;
mod parking;
mod postman;
mod receive;
mod recover;
pub(crate) mod run;
mod runs;
pub(crate) mod sabotage;
mod seal;
mod search;
#[cfg(feature = "testing")]
pub(crate) mod sim_access;
mod steps;
mod streams;
#[cfg(test)]
mod tests;
mod waiters;

use waiters::Waiting;

use std::collections::VecDeque;

use fusee_core::record::{
    Lsn, Name, Record, RecordBuf, RunId, Status, ToPayload, encode_canonical,
};
use fusee_core::shard::{Mode, Output, ShardCore};
use fusee_storage::{FlushTicket, LogStore, SealTicket};
use tokio::sync::oneshot;

use crate::AnyCheckpoint;
use crate::any_storage::{AnyLog, AnyRuns};
use crate::client::{Description, IdPolicy, ListFilter, LiveJournal, RunRef, RunResult, ShardPage};
use crate::ctx::Registry;
use crate::error::{Error, Result};
use crate::metrics::ShardMetrics;
use crate::step::StepError;
use run::Fault;

pub(crate) use backup::{Frozen, Hold};
pub(crate) use check::{judge, note};
pub(crate) use steps::StepJob;

/// A reply to a client request.
pub(crate) type Reply<T> = oneshot::Sender<Result<T>>;

/// What a driver hands a shard loop.
pub(crate) enum Input {
    /// Start a run (or attach to one, by `policy`).
    Start {
        wtype: String,
        id: String,
        input: Vec<u8>,
        policy: IdPolicy,
        /// The trace context to record in its `Start`.
        trace: Option<crate::trace::TraceParent>,
        /// The version of its code (`None`: the newest registered).
        version: Option<u32>,
        /// Search attributes to record in its `Start` (checked).
        attrs: Option<crate::attrs::SearchAttributes>,
        reply: Reply<RunRef>,
    },
    /// Signal a workflow.
    Signal {
        id: String,
        name: String,
        payload: Vec<u8>,
        /// The caller's deduplication key (0 = none): a signal whose key
        /// the run has already accepted is acknowledged, not recorded again.
        dedup: u64,
        reply: Reply<()>,
    },
    /// Ask a workflow to cancel.
    Cancel {
        id: String,
        reason: String,
        /// Terminated this long after, if it has not ended (ms).
        grace_ms: Option<u64>,
        reply: Reply<()>,
    },
    /// Wait for a workflow's result.
    Result { id: String, reply: Reply<RunResult> },
    /// Describe a workflow.
    Describe {
        id: String,
        reply: Reply<Description>,
    },
    /// The shard's figures.
    Metrics {
        reply: oneshot::Sender<ShardMetrics>,
    },
    /// A workflow type was registered: runs waiting for code start.
    Registered,
    /// A step attempt ended.
    StepDone {
        run: RunId,
        seq: u32,
        attempt: u32,
        result: std::result::Result<Vec<u8>, StepError>,
    },
    /// Running step attempts sent heartbeats: their details wait in the
    /// shard's hub (`steps`).
    Heartbeats,
    /// A flush ticket ran (on the flusher); with how long its I/O took.
    Flushed { ticket: FlushTicket, micros: u64 },
    /// A seal ticket ran (on the flusher).
    Sealed { ticket: SealTicket },
    /// The time moved (a virtual clock): look at the timers again.
    Tick,
    /// Close: finish the flush in flight, checkpoint, stop.
    Close { reply: Reply<()> },
    /// The engine was dropped without `close`: stop now, as a crash would
    /// (the page cache keeps what was written).
    Crash,
    /// A message from shard `from` (its id there) to record here.
    Message {
        from: u32,
        id: u64,
        message: messages::Message,
    },
    /// The target of this shard's message `id` recorded it durably (or,
    /// in another process, its inbox row is durable).
    Delivered { id: u64 },
    /// Row `row` of this shard's inbox table: a message from a shard of
    /// another process, to record here (the PostgreSQL backend).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Inbox {
        row: u64,
        message: messages::Message,
    },
    /// Terminate a workflow.
    Terminate {
        id: String,
        reason: String,
        reply: Reply<()>,
    },
    /// Run an update on a workflow.
    Update {
        id: String,
        name: String,
        update_id: String,
        payload: Vec<u8>,
        reply: Reply<RunResult>,
    },
    /// Ask a workflow a query.
    Query {
        id: String,
        name: String,
        payload: Vec<u8>,
        reply: Reply<Vec<u8>>,
    },
    /// Run an update on a workflow, starting it with the update if it does
    /// not exist.
    UpdateWithStart {
        wtype: String,
        id: String,
        input: Vec<u8>,
        name: String,
        update_id: String,
        payload: Vec<u8>,
        reply: Reply<RunResult>,
    },
    /// Pause (or resume) a workflow.
    Pause {
        id: String,
        paused: bool,
        reply: Reply<()>,
    },
    /// Let a step paused by its retry policy run again.
    ResumeStep {
        id: String,
        step: String,
        reply: Reply<()>,
    },
    /// Reset a workflow to a step.
    Reset {
        id: String,
        /// The run to reset (`None`: the ID's current run). A repeat for
        /// a run already reset answers with the run that reset made.
        run: Option<RunId>,
        step: String,
        reason: String,
        reply: Reply<RunRef>,
    },
    /// A page of this shard's runs below a run number.
    List {
        filter: ListFilter,
        below: RunId,
        reply: Reply<ShardPage>,
    },
    /// A run's journal (`crate::dynamic`): run `run` of `id`, or its
    /// latest run.
    Journal {
        id: String,
        run: Option<RunId>,
        /// Bytes of the journal the reader walked already: an unfinished
        /// run in memory is answered with the rest only (0: the whole).
        from: u64,
        reply: Reply<LiveJournal>,
    },
    /// A page of the replay check (`runtime/check`) below a run number;
    /// answered with a `CheckPage` as JSON.
    Check { below: RunId, reply: Reply<Vec<u8>> },
    /// An online backup (`crate::backup`): checkpoint with the log wholly
    /// durable, then run `hold` with the shard frozen.
    Backup { hold: Hold },
    /// Chunk `index` of the stream run `run` opened at operation `seq`
    /// (`crate::stream`).
    Chunk {
        run: RunId,
        seq: u32,
        index: u64,
        payload: Vec<u8>,
        reply: Reply<()>,
    },
    /// The end of the stream run `run` opened at operation `seq`.
    StreamEnd {
        run: RunId,
        seq: u32,
        reply: Reply<()>,
    },
}

impl Input {
    /// Whether the input came from a client (counted against the queue's
    /// capacity).
    pub(crate) fn is_client(&self) -> bool {
        matches!(
            self,
            Input::Start { .. }
                | Input::Signal { .. }
                | Input::Cancel { .. }
                | Input::Terminate { .. }
                | Input::Update { .. }
                | Input::Query { .. }
                | Input::Result { .. }
                | Input::Describe { .. }
                | Input::UpdateWithStart { .. }
                | Input::Pause { .. }
                | Input::Reset { .. }
                | Input::ResumeStep { .. }
                | Input::List { .. }
                | Input::Journal { .. }
                | Input::Check { .. }
                | Input::Chunk { .. }
                | Input::StreamEnd { .. }
        )
    }
}

/// What a run of the loop asks its driver to do.
#[derive(Default)]
pub(crate) struct Effects {
    /// Run this flush's I/O (on a flusher) and hand the ticket back as
    /// [`Input::Flushed`].
    pub(crate) flush: Option<FlushTicket>,
    /// Run this seal's I/O (on the flusher, never the shard's thread) and
    /// hand the ticket back as [`Input::Sealed`].
    pub(crate) seal: Option<SealTicket>,
    /// Start these step attempts; each ends as [`Input::StepDone`].
    pub(crate) steps: Vec<StepJob>,
    /// The loop has work left (its budget ran out): run it again without
    /// waiting.
    pub(crate) more: bool,
    /// Inputs for shards (this one included): messages and their
    /// acknowledgements, by target shard.
    pub(crate) messages: Vec<(u32, Input)>,
    /// Rows of this shard's inbox table whose messages are recorded
    /// durably (or recognised as duplicates): the driver deletes them.
    pub(crate) inbox_done: Vec<u64>,
}

/// Settings of a shard loop.
#[derive(Clone, Debug)]
pub(crate) struct LoopConfig {
    pub(crate) shards: u32,
    pub(crate) max_payload: usize,
    /// Most stream chunks one run may send ([`crate::Config::max_stream_chunks`]).
    pub(crate) max_stream_chunks: u64,
    pub(crate) checkpoint_bytes: u64,
    pub(crate) checkpoint_interval_ms: u64,
    pub(crate) retention_ms: u64,
    /// How long a finished run keeps its whole journal after it finished
    /// (then only its `Start` and `Done`), and the largest journal kept.
    pub(crate) history_ms: u64,
    pub(crate) history_max_bytes: u64,
    /// Chunk bytes from which a frame sets them apart
    /// ([`crate::Config::stream_apart_bytes`]).
    pub(crate) stream_apart_bytes: usize,
    /// How long a finished run keeps its streams' chunks after it
    /// finished (at most `retention_ms`; `crate::stream`'s retention).
    pub(crate) stream_ms: u64,
    pub(crate) park_after_ms: u64,
    /// How long a waiting run's code is idle before it is dropped (the run
    /// stays loaded; `runtime/parking.rs`); not below `park_after_ms`.
    pub(crate) doze_after_ms: u64,
    pub(crate) compact_after_bytes: u64,
    /// How long the log stays idle after a flush before it is sealed.
    pub(crate) seal_idle_ms: u64,
    /// The longest a durable record waits for a seal under continuous
    /// load.
    pub(crate) seal_interval_ms: u64,
    /// Where flush latencies are timed from (`Instant::now` under the
    /// production driver): the only time the loop reads itself, for the
    /// flush-latency metric alone (a backend may do its durable work in
    /// `begin_flush`, on the loop's thread). `None` (the simulator, unit
    /// tests): not timed, and the loop reads no clock.
    pub(crate) stopwatch: Option<fn() -> std::time::Instant>,
    /// A deliberate bug switched on, for the simulator to catch.
    #[cfg(feature = "testing")]
    pub(crate) sabotage: Option<sabotage::Sabotage>,
}

/// Runs polled, records appended and deliveries made per call of
/// [`ShardLoop::run`], so a busy shard still takes its inputs and flushes.
const RUN_BUDGET: usize = 4096;

/// Recovered runs whose code starts per call of [`ShardLoop::run`] when
/// nothing else is ready: at about 10 to 20 µs a replay, a few ms, so a
/// timer due meanwhile waits at most that (100,000 at once delayed timers
/// due after an open by up to 190 ms at p99).
const DEFERRED_STARTS_MAX: usize = 256;

/// A recovered run that waits on a timer or a signal starts its code before
/// its timer or signal comes only when no timer of the shard is due within
/// this many ms (or [`DEFERRED_WAITING_GRACE_MS`] after the open). In a
/// reopen of 100,000 reminders, starting the sleepers' code at once made
/// the reminders due after the open fire 200 to 300 ms late at p99 (7 to
/// 130 ms without).
const DEFERRED_QUIET_MS: u64 = 50;

/// After this long since the open, recovered runs that wait on a timer or
/// a signal start their code when nothing else is ready, quiet or not: a
/// run whose crash cut a command its code had asked for beside its wait
/// (`select!` of a step and a sleep, say) asks for it again by then at the
/// latest.
const DEFERRED_WAITING_GRACE_MS: u64 = 10_000;

/// How often idle runs are looked for (to park them) and finished runs
/// past their retention removed.
const HOUSEKEEPING_MS: u64 = 100;

/// One shard's state machine. See the [module docs](self).
pub(crate) struct ShardLoop {
    shard: u32,
    config: LoopConfig,
    core: ShardCore,
    log: AnyLog,
    store: AnyRuns,
    checkpoint: AnyCheckpoint,
    registry: Registry,
    /// The runs whose code runs here, and the steps they owe (`live`).
    live: live::Live,
    inbox: VecDeque<Input>,
    /// The clients owed an answer (`waiters`).
    waiters: waiters::Waiters,
    /// The log flushes in flight, at most as many as the log takes
    /// ([`fusee_storage::LogStore::flushes_in_flight_max`]).
    /// ... and the durable LSN they move.
    flights: flights::Flights,
    /// When the log is sealed next (`seal`).
    seals: seal::Seals,
    /// Running, closing, closed or failed (`lifecycle`).
    life: lifecycle::Lifecycle,
    /// When the shard checkpoints next (`checkpoint`).
    checkpoints: checkpoint::Checkpoints,
    /// Parking scans, housekeeping and kept histories (`parking`).
    parking: parking::Parking,
    /// Run-store bytes since the last compaction (`compaction`).
    store_bytes: compaction::StoreBytes,
    /// Streaming runs' chunk counts (`streams`).
    streams: streams::Streams,
    /// Messages sent and not acknowledged, what goes to other shards, the
    /// acknowledgements owed (`receive`).
    mail: receive::Mail,
    metrics: ShardMetrics,
    /// Running step attempts' deadlines, heartbeats to record (`steps`).
    watch: steps::Watch,
    /// The shard's side of its running step attempts, shared by their
    /// contexts: heartbeats on their way (`steps`).
    hub: std::sync::Arc<crate::step::StepHub>,
    /// Cancelled runs under a grace, terminated when it passes (`grace`).
    graces: grace::Graces,
    /// The engine's telemetry (`None`: off, or a test driver's loop).
    telemetry: Option<crate::telemetry::ShardTelemetry>,
    /// The search-attribute index (`search`, `crate::attrs`).
    attr_index: crate::attrs::AttrIndex,
    /// The index's snapshot frames the last commit names (`search`).
    attr_snapshot: search::Snapshot,
    encode: Vec<u8>,
    /// The list a polled run's code asks for records in, lent to each run
    /// for its poll (`runs::step_run`): a run keeps none between polls
    /// (thousands wait loaded), and a poll allocates none.
    spare_appends: Vec<RecordBuf>,
}

impl ShardLoop {
    /// Takes an input; [`run`](Self::run) acts on it.
    pub(crate) fn handle(&mut self, input: Input) {
        self.inbox.push_back(input);
    }

    /// Counts this shard's durable records into `telemetry` from now on.
    pub(crate) fn attach_telemetry(&mut self, telemetry: crate::telemetry::ShardTelemetry) {
        self.telemetry = Some(telemetry);
    }

    /// The shard's side of its running step attempts: the driver tells it
    /// how heartbeats reach the loop ([`crate::step::StepHub::set_poster`]).
    pub(crate) fn step_hub(&self) -> &crate::step::StepHub {
        &self.hub
    }

    /// The shard's number.
    #[inline]
    pub(crate) fn shard(&self) -> u32 {
        self.shard
    }

    /// How many shards the engine has (the postman's check of an inbox
    /// row's target).
    #[cfg(feature = "postgres")]
    #[inline]
    pub(crate) fn shards(&self) -> u32 {
        self.config.shards
    }

    /// How many flush tickets the shard's log takes at once.
    pub(crate) fn flushes_in_flight_max(&self) -> usize {
        self.log.flushes_in_flight_max()
    }

    /// Whether the shard's storage failed (it takes no more work).
    #[inline]
    pub(crate) fn has_failed(&self) -> bool {
        self.life.has_failed()
    }

    /// Why the shard's storage failed, and whether it was fenced (another
    /// owner took it), if it did.
    pub(crate) fn lost(&self) -> Option<(String, bool)> {
        let failure = self.life.failure()?;
        Some((failure.why().to_owned(), failure.fenced()))
    }

    /// Whether the engine opens this shard again after a storage failure
    /// (a leased shard): its out-of-reach failures are then retryable.
    pub(crate) fn set_reopened_after_failure(&mut self, reopened: bool) {
        self.life.set_reopened_after_failure(reopened);
    }

    /// Whether inputs wait to be taken by the next [`run`](Self::run).
    #[inline]
    pub(crate) fn has_input(&self) -> bool {
        !self.inbox.is_empty()
    }

    /// Whether nothing is out or waiting: no flush or seal in flight, no
    /// input queued (the driver's idle test).
    pub(crate) fn is_quiet(&self) -> bool {
        self.flights.is_empty() && !self.seals.is_out() && self.inbox.is_empty()
    }

    /// The next time only time can bring, in ms: the core's next timer,
    /// a step attempt's deadline or heartbeat tick (`steps`), or the end
    /// of a cancel's grace (`grace`).
    pub(crate) fn next_timer(&self) -> Option<u64> {
        [
            self.core.next_timer(),
            self.watch.next_wake(),
            self.graces.next_wake(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Asks the shard's log whether the shard is still this process's: a
    /// read of nothing, which the PostgreSQL log answers from memory with
    /// `Fenced` once its storage saw another owner's epoch. Other backends
    /// are never fenced and are not asked.
    pub(crate) fn probe(&mut self) -> Result<(), fusee_storage::StorageError> {
        #[cfg(feature = "postgres")]
        if let AnyLog::Postgres(log) = &mut self.log {
            let last = log.last_lsn();
            return log.read(last, &mut |_, _| Ok(())).map(|_| ());
        }
        Ok(())
    }

    /// The shard's inbox table, when its log is PostgreSQL's (the
    /// postman's).
    #[cfg(feature = "postgres")]
    pub(crate) fn pg_inbox(&self) -> Option<fusee_storage_postgres::PgInbox> {
        match &self.log {
            AnyLog::Postgres(log) => Some(log.inbox()),
            _ => None,
        }
    }

    /// Whether the loop has stopped (closed, crashed or failed) and its
    /// driver may end.
    pub(crate) fn is_closed(&self) -> bool {
        self.life.is_closed()
    }

    /// When the loop wants to run again without an input (a timer), in
    /// ms; `None`: only on an input.
    pub(crate) fn next_wake(&self) -> Option<u64> {
        if self.life.is_closed() || self.life.has_failed() {
            return None;
        }
        let checkpoint = self
            .checkpoints
            .next_due(self.config.checkpoint_interval_ms);
        let housekeeping = (self.core.loaded_len() > 0 || self.core.next_expiry().is_some())
            .then_some(self.parking.housekeeping_ms());
        // A step's retry time is the core's retry timer, armed by its
        // `Attempt` record (see `run`'s docs): `next_timer` has it, and
        // the running attempts' deadlines and heartbeat ticks.
        [
            self.next_timer(),
            checkpoint,
            housekeeping,
            self.next_seal(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs the loop at time `now_ms`: see the [module docs](self).
    pub(crate) fn run(&mut self, now_ms: u64) -> Effects {
        if self.life.is_closed() {
            return Effects::default();
        }
        if self.life.has_failed() {
            self.refuse_all();
            return Effects::default();
        }
        self.core.poll_timers(now_ms);
        // A checkpoint due holds new records back until the log is wholly
        // durable (a checkpoint must hold no record a crash could take
        // back): only flush completions are taken meanwhile.
        let holding = self.checkpoint_due(now_ms);
        let mut budget = RUN_BUDGET;
        let mut deferred = VecDeque::new();
        while budget > 0
            && let Some(input) = self.inbox.pop_front()
        {
            if holding
                && !matches!(
                    input,
                    Input::Flushed { .. } | Input::Sealed { .. } | Input::Crash
                )
            {
                deferred.push_back(input);
                continue;
            }
            self.take(input, now_ms);
            budget -= 1;
            if self.life.is_closed() {
                return Effects::default();
            }
        }
        // The inbox keeps its room when nothing was held back (a fresh
        // queue each pass grew again input by input).
        if !deferred.is_empty() {
            deferred.append(&mut self.inbox);
            self.inbox = deferred;
        }
        self.watch_steps(now_ms, holding);
        self.end_graces(now_ms, holding);
        let more = if holding {
            false
        } else {
            let more = !self.drive(now_ms, &mut budget) || !self.inbox.is_empty();
            self.start_steps(now_ms);
            more
        };
        // With `park_after` 0 (tests, a virtual clock that stands still)
        // runs park as soon as they are quiescent.
        // Only with every woken run polled (`!more`): a run still on the
        // ready queue has a delivery its code has not seen.
        if !more
            && !holding
            && self
                .parking
                .housekeeping_due(now_ms, self.config.park_after_ms, HOUSEKEEPING_MS)
        {
            self.park_idle(now_ms);
            self.expire(now_ms);
            self.drop_histories(now_ms);
        }
        // The search-attribute index's background build, a batch at a
        // time, between the shard's other work (`search`).
        let mut more = more;
        if !holding && self.attr_index.building() {
            match self.build_attr_index_some(search::BUILD_BATCH) {
                Ok(done) => more |= !done,
                Err(e) => self.fail(e),
            }
        }
        let mut effects = Effects {
            more,
            ..Effects::default()
        };
        // A flush begins whenever records wait that no flush covers and the
        // log takes one more ticket (`flights`).
        effects.flush = self.begin_flush();
        effects.seal = self.begin_seal(now_ms);
        if self.flights.all_durable(self.log.last_lsn()) {
            self.maybe_checkpoint(now_ms);
            // What the checkpoint held back (inputs, woken runs, steps to
            // start) goes on at once: nothing else may come to wake the
            // loop (a virtual clock standing still sends nothing).
            effects.more |= holding && !self.checkpoint_due(now_ms);
        }
        effects.steps = self.live.take_jobs();
        effects.messages = self.mail.take_outgoing();
        effects.inbox_done = self.mail.take_inbox_done();
        if self.life.has_failed() {
            self.refuse_all();
        }
        effects
    }

    /// Appends `rec` to the log, applies it to the core (the same bytes
    /// going to the run's journal) and hands it to the run's machine, then
    /// wakes the run: a record from outside its code (a step's result, a
    /// timer, a signal) may be its next delivery.
    fn append<B: ToPayload>(&mut self, rec: &Record<Name, B>) -> Option<Lsn> {
        let lsn = self.append_quiet(rec)?;
        let run = rec.run();
        if self.live.contains_key(&run) {
            self.live.wake_for_records(run);
        } else {
            // A recovered run whose code had not started: it starts now,
            // its machine built from a journal that holds this record.
            self.start_deferred(run);
        }
        Some(lsn)
    }

    /// [`append`](Self::append) without the wake-up: for the records a
    /// run's code asked for, after which the loop looks for its next
    /// delivery anyway.
    fn append_quiet<B: ToPayload>(&mut self, rec: &Record<Name, B>) -> Option<Lsn> {
        if self.life.has_failed() {
            return None;
        }
        let lsn = self.log.last_lsn() + 1;
        self.encode.clear();
        encode_canonical(rec, &mut self.encode);
        if let Err(e) = self.log.append(lsn, &self.encode) {
            self.fail(e);
            return None;
        }
        self.checkpoints.appended(self.encode.len());
        let run = rec.run();
        if let Some(t) = &mut self.telemetry {
            t.appended(lsn, rec, &self.core);
        }
        self.core.apply_encoded(lsn, rec, Mode::LIVE, &self.encode);
        self.index_attributes(rec);
        if let Some(live) = self.live.get_mut(&run) {
            live.active_ms = live.state.borrow().now_ms().max(live.active_ms);
            let refused = live
                .state
                .borrow_mut()
                .machine_mut()
                .handle_record(lsn, rec);
            if let Err(e) = refused {
                stop(live, run, Fault::Refused(e.to_string()));
                self.answer_stopped(run);
            }
        }
        Some(lsn)
    }

    /// The storage failed: stop taking work (see the module docs).
    fn fail(&mut self, e: fusee_storage::StorageError) {
        let (failure, new) = self.life.fail(&e);
        // A backup waiting for this shard hears of it from its dropped hold.
        drop(self.checkpoints.take_hold());
        let fenced = failure.fenced();
        if let Some(t) = self.telemetry.as_ref().filter(|_| new && fenced) {
            t.fenced();
        }
        if fenced {
            // Expected under a lease: the engine logs the takeover once,
            // naming the new owner (`ownership`).
            tracing::debug!(shard = self.shard, error = %e, "shard fenced; it stops");
        } else {
            tracing::error!(shard = self.shard, error = %e, "storage failed; the shard stops");
        }
        self.refuse_all();
    }

    /// Answers everyone waiting with the storage failure.
    fn refuse_all(&mut self) {
        let Some(failure) = self.life.failure().cloned() else {
            return;
        };
        let shard = self.shard;
        self.waiters
            .refuse_all(|maybe_recorded| failure.error(shard, maybe_recorded));
        while let Some(input) = self.inbox.pop_front() {
            match input {
                // A failed shard still stops when told: its driver (and
                // whoever drops or closes the engine) waits for that.
                Input::Crash => self.life.stop(),
                Input::Close { reply } => {
                    let _ = reply.send(Err(failure.error(shard, false)));
                    self.life.stop();
                }
                // Not taken yet: nothing of it was recorded.
                other => inputs::refuse(other, || failure.error(shard, false)),
            }
        }
        if let Some(r) = self.life.finish_close() {
            let _ = r.send(Err(failure.error(shard, false)));
        }
    }

    /// A finished run's result, once its `Done` is durable.
    fn result_of(&self, run: RunId) -> Option<RunResult> {
        let l = self.core.get(run)?;
        let (status, _) = l.done?;
        (l.last_lsn <= self.flights.durable()).then(|| RunResult {
            status,
            payload: l.result().map(<[u8]>::to_vec).unwrap_or_default(),
        })
    }
}

/// Stops a run's code for good (a determinism error or a refused record):
/// it stays where it is, `describe` says why, and callers waiting on its
/// result get the error ([`ShardLoop::answer_stopped`], which every caller
/// of this calls next).
fn stop(live: &mut live::LiveRun, run: RunId, why: impl Into<Fault>) {
    if live.stopped.is_none() {
        let why = why.into();
        tracing::error!(run, reason = %why, "workflow code stopped");
        live.stopped = Some(why);
    }
    live.future = None;
}

impl ShardLoop {
    /// The error a caller waiting on `run`'s result gets while its code is
    /// stopped; `None` while it is not.
    fn stopped_error(&self, run: RunId) -> Option<Error> {
        // A run whose end is recorded is not waited on for ever: its
        // callers get its end (and its handlers' recorded results).
        if self.core.get(run).is_some_and(|l| l.done.is_some()) {
            return None;
        }
        let why = self.live.get(&run)?.stopped.as_ref()?;
        Some(match why {
            Fault::Determinism(e) => Error::Determinism(e.clone()),
            Fault::Refused(reason) => Error::Stopped {
                id: self
                    .core
                    .get(run)
                    .map(|l| l.id.to_string())
                    .unwrap_or_default(),
                run,
                reason: reason.clone(),
            },
        })
    }

    /// Answers the callers waiting on `run`'s result or on one of its
    /// updates with its stop, if its code stopped: a stopped run never ends
    /// by itself nor runs a handler, so waiting would be for ever. Given
    /// once the records so far are durable, as any answer resting on them.
    fn answer_stopped(&mut self, run: RunId) {
        if self.stopped_error(run).is_none() {
            return;
        }
        let mut waiting = self.waiters.take_results(run);
        let core = &self.core;
        // An update whose result is recorded (its handler ended before the
        // stop) is answered with that result once it is durable.
        waiting.append(&mut self.waiters.take_updates(run, |update| {
            core.get(run)
                .and_then(|l| l.update(update))
                .is_none_or(|(_, slot)| slot.result.is_none())
        }));
        for reply in waiting {
            if let Some(err) = self.stopped_error(run) {
                self.refuse_result_after_durable(reply, err);
            }
        }
    }

    /// Sends `err` to a result's caller once every record appended so far
    /// is durable.
    fn refuse_result_after_durable(&mut self, reply: Reply<RunResult>, err: Error) {
        if self.log.last_lsn() == self.flights.durable() {
            let _ = reply.send(Err(err));
            return;
        }
        let token = self.waiters.wait(Waiting::Stopped(reply, err));
        let lsn = self.log.last_lsn();
        self.core.add_output(lsn, Output::Ack(token));
    }
}

/// Names for statuses in errors.
pub(crate) fn status_name(status: Status) -> &'static str {
    status.as_str()
}

/// A workflow ID as the core keeps it.
pub(crate) fn name(s: &str) -> Name {
    Name::from(s)
}
