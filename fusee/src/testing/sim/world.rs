//! The simulated world: every shard loop, the disk, the network between
//! shards, the step tasks, the clients and the clock, stepped one action at
//! a time in an order the seed chooses.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use fusee_core::record::{Record, RunId, Status};
use fusee_core::shard::shard_of;
use fusee_storage::{FlushTicket, MemoryStorage, SealTicket};
use fusee_storage_file::sim::{CrashMode, SimIo};
use fusee_storage_file::{FileOptions, FileStorage};
use tokio::sync::oneshot;

use super::workload::{self, Op, Program, SIGNALS, Service};
use super::{SimConfig, SimDisk, SimFailure, SimReport};
use crate::AnyStorage;
use crate::client::{IdPolicy, LiveJournal, RunRef, RunResult};
use crate::ctx::Registry;
use crate::error::Result as EngineResult;
use crate::runtime::sim_access::RunView;
use crate::runtime::{Effects, Input, LoopConfig, ShardLoop, StepJob};
use crate::stream::Cursor;

/// The simulated disk under the shards.
enum Disk {
    /// The memory backend, flushes split (durable when the loop takes the
    /// ticket back) with two in flight per shard (their tickets coming
    /// back in any order, as on PostgreSQL), commits crashing at chosen
    /// points.
    Memory(MemoryStorage),
    /// The file backend on the simulated file system: a power cut drops,
    /// keeps or tears (at 512-byte sectors) every write not synced, and
    /// syncs fail on demand.
    File(SimIo),
}

/// Where the file backend lives on the simulated file system.
const SIM_DIR: &str = "/fusee";

impl Disk {
    fn new(kind: SimDisk) -> Disk {
        match kind {
            SimDisk::Memory => {
                let memory = MemoryStorage::new();
                memory.split_flushes(true);
                memory.overlap_flushes(2);
                Disk::Memory(memory)
            }
            SimDisk::File => Disk::File(SimIo::new()),
        }
    }

    /// The storage as it stands (after a power cut: as recovered).
    fn open(&self) -> Result<AnyStorage, fusee_storage::StorageError> {
        match self {
            Disk::Memory(m) => Ok(AnyStorage::Memory(m.clone())),
            Disk::File(io) => {
                let options = FileOptions {
                    // Small segments: rolls, preallocation and discards
                    // happen often in a short simulation.
                    segment_bytes: 64 << 10,
                    ..FileOptions::default()
                };
                FileStorage::open_with(io.clone(), SIM_DIR, options).map(AnyStorage::SimFile)
            }
        }
    }

    /// A power cut: only what is durable survives (and on the file
    /// system, what an unsynced write left, torn or whole).
    fn power_cut(&mut self, rng: &mut fastrand::Rng) {
        match self {
            Disk::Memory(m) => *m = m.crash(),
            Disk::File(io) => io.crash(CrashMode::Random(rng.u64(..))),
        }
    }

    /// Arms a fault in the disk's next writes to `shard`: a commit that
    /// crashes part way (memory), or a sync that fails after a few succeed
    /// (file).
    fn arm_fault(&self, rng: &mut fastrand::Rng, shard: u32) {
        match self {
            Disk::Memory(m) => m.crash_in_commit(shard, rng.u32(0..4)),
            Disk::File(io) => io.fail_syncs_after(rng.u32(0..8), 1),
        }
    }
}

/// Actions the drain phase may take before every run must have finished.
const DRAIN_ACTIONS_MAX: u32 = 200_000;
/// The simulated time a run may take in the drain phase.
const DRAIN_MS_MAX: u64 = 3_600_000;

/// A client of one top-level workflow: when it starts it and which
/// signals it sends when.
struct Client {
    id: String,
    program: u32,
    start_at: u32,
    /// The start was acknowledged: the run it named.
    started: Option<RunId>,
    /// A start is in flight.
    starting: bool,
    /// (action, signal index, nonce), sent in order.
    signals: Vec<(u32, usize, u64)>,
    /// (action, nonce) of the updates it sends, in order.
    updates: Vec<(u32, u64)>,
    /// (action, grace ms) of its cancel with a grace, if it sends one.
    cancel: Option<(u32, u64)>,
    /// Its cancel was sent (its workflow may end cancelled or terminated).
    cancel_sent: bool,
}

/// A cancelled run and when its grace ended at the latest: no step
/// attempt of it may start after.
struct Graced {
    id: String,
    /// The run's shard and number (numbers are per shard).
    shard: u32,
    run: RunId,
    end_ms: u64,
}

/// An update a client got the result of: its `Update` is on record.
struct AckedUpdate {
    id: String,
    run: RunId,
    update_id: String,
}

/// A signal a client was told is recorded.
struct AckedSignal {
    id: String,
    run: RunId,
    nonce: u64,
}

enum Pending {
    Start(usize, oneshot::Receiver<EngineResult<RunRef>>),
    Signal(usize, RunId, u64, oneshot::Receiver<EngineResult<()>>),
    Result(usize, oneshot::Receiver<EngineResult<RunResult>>),
    Update(
        usize,
        RunId,
        String,
        oneshot::Receiver<EngineResult<RunResult>>,
    ),
    Cancel(usize, u64, oneshot::Receiver<EngineResult<()>>),
    /// A subscriber's read of its run's journal.
    Journal(usize, oneshot::Receiver<EngineResult<LiveJournal>>),
}

/// A client's subscription to one of its program's streams, read as the
/// engine's subscriptions read (`stream::Cursor` fed with the shard's
/// `Input::Journal` answers), from a random action on. It follows the
/// run it first reads; it stops once the stream or that run ended (or
/// the run never opened it). A power cut does not stop it: it reads on
/// from its cursor, as a client resumes.
struct Subscriber {
    client: usize,
    name: String,
    from_action: u32,
    cursor: Cursor,
    reading: bool,
    done: bool,
}

pub(super) struct World {
    cfg: SimConfig,
    rng: fastrand::Rng,
    now_ms: u64,
    disk: Disk,
    /// The storage the shards are open on (dropped at a power cut).
    storage: Option<AnyStorage>,
    registry: Registry,
    loop_config: LoopConfig,
    service: Arc<Mutex<Service>>,
    shards: Vec<ShardLoop>,
    /// Shards that may have work: inputs handed in, or more to do.
    busy: Vec<bool>,
    flushes: Vec<(u32, FlushTicket)>,
    /// Seal tickets out, run in an order the seed chooses (a power cut
    /// may come between a flush and its seal, or during one).
    seals: Vec<(u32, SealTicket)>,
    steps: Vec<(u32, StepJob)>,
    net: Vec<(u32, Input)>,
    clients: Vec<Client>,
    pending: Vec<Pending>,
    acked_signals: Vec<AckedSignal>,
    acked_updates: Vec<AckedUpdate>,
    /// Runs cancelled with a grace, acknowledged.
    graced: Vec<Graced>,
    /// Cancels acknowledged while the shards were down (a power cut):
    /// (client, grace, when), looked at once they are up.
    cancels_to_check: Vec<(usize, u64, u64)>,
    /// Results reported to clients, by workflow ID.
    results: BTreeMap<String, (Status, Vec<u8>)>,
    /// Stream requests the runs' steps made (they have no engine): moved
    /// to `net`, for the ID's shard, at each action.
    post: crate::stream::SimPost,
    /// Each stream chunk as first read back: (workflow ID, run, stream
    /// operation, index) -> its bytes, which no later pass may change.
    chunks_seen: BTreeMap<(String, RunId, u32, u64), Vec<u8>>,
    subscribers: Vec<Subscriber>,
    /// The subscribers' own choices (when each reads), apart from the
    /// seed's other choices.
    sub_rng: fastrand::Rng,
    /// Each stream chunk a subscriber was served: (workflow ID, run,
    /// stream name, index) -> its bytes, which the journal must hold from
    /// then on (served only once durable).
    served: BTreeMap<(String, RunId, String, u64), Vec<u8>>,
    action: u32,
    /// Power cuts the seed chose (a commit crash causes others).
    random_cuts: u32,
    report: SimReport,
}

impl World {
    pub(super) fn new(cfg: &SimConfig) -> Result<World, SimFailure> {
        let mut rng = fastrand::Rng::with_seed(cfg.seed);
        let programs_count = cfg.workflows + 4;
        let programs: Arc<Vec<Program>> = Arc::new(workload::programs(&mut rng, programs_count, 4));
        let service = Arc::new(Mutex::new(Service::default()));
        let registry = Registry::default();
        workload::register(&registry, Arc::clone(&programs), Arc::clone(&service));
        let post = crate::stream::SimPost::default();
        registry.set_sim_post(Arc::clone(&post));
        // Cancels come from a stream of their own: the seed's other choices
        // stay as they were without them.
        let mut cancel_rng = fastrand::Rng::with_seed(cfg.seed ^ 0xca9c_e1ed);
        let clients: Vec<Client> = (0..cfg.workflows)
            .map(|i| {
                let program = 4 + i;
                let waits: Vec<usize> = programs[program as usize]
                    .ops
                    .iter()
                    .filter_map(|op| match op {
                        Op::Wait { k, .. } => Some(*k),
                        _ => None,
                    })
                    .collect();
                let start_at = rng.u32(0..cfg.actions.max(1) / 2 + 1);
                let mut signals: Vec<(u32, usize, u64)> = waits
                    .iter()
                    .map(|&k| (start_at + rng.u32(0..cfg.actions.max(1)), k, rng.u64(1..)))
                    .collect();
                signals.sort();
                let mut updates: Vec<(u32, u64)> = (0..rng.usize(0..3))
                    .map(|_| (start_at + rng.u32(0..cfg.actions.max(1)), rng.u64(1..)))
                    .collect();
                updates.sort();
                let cancel = (cfg.cancels && cancel_rng.bool()).then(|| {
                    (
                        start_at + cancel_rng.u32(0..cfg.actions.max(1) / 2 + 1),
                        cancel_rng.u64(0..1_000),
                    )
                });
                Client {
                    updates,
                    cancel,
                    cancel_sent: false,
                    id: format!("wf-{i}"),
                    program,
                    start_at,
                    started: None,
                    starting: false,
                    signals,
                }
            })
            .collect();
        // Subscribers come from a stream of their own too.
        let mut sub_rng = fastrand::Rng::with_seed(cfg.seed ^ 0x5ab5_c41b);
        let mut subscribers = Vec::new();
        for (c, client) in clients.iter().enumerate() {
            for (i, op) in programs[client.program as usize].ops.iter().enumerate() {
                if matches!(op, Op::Stream { .. }) {
                    let name = format!("t{i}");
                    subscribers.push(Subscriber {
                        client: c,
                        cursor: Cursor::new(&client.id, &name, 0),
                        name,
                        from_action: client.start_at + sub_rng.u32(0..cfg.actions.max(1) / 2 + 1),
                        reading: false,
                        done: false,
                    });
                }
            }
        }
        // Code dozes at half the parking time: restarted by replay in the
        // seeds that park late, never in those that park at once.
        let checkpoint_bytes = 2048 + rng.u64(0..8192);
        let park_after_ms = rng.u64(0..2000);
        // Half the seeds let finished runs' chunks go within 3 s (some at
        // once, some after they parked with them), from a generator of
        // its own: the seed's other choices stay as they were.
        let mut keep_rng = fastrand::Rng::with_seed(cfg.seed ^ 0x57e4_3e7a);
        let stream_ms = if keep_rng.bool() {
            keep_rng.u64(0..3000)
        } else {
            24 * 3_600_000
        };
        // Half the seeds set every chunk apart from its run's other
        // records (the rest keep the engine's default, which their short
        // streams seldom reach), and half of those compact the run store
        // often, moving the `Stream` frames: from a generator of its own.
        let mut apart_rng = fastrand::Rng::with_seed(cfg.seed ^ 0xa9a7_7000);
        let (stream_apart_bytes, compact_after_bytes) = match apart_rng.u8(0..4) {
            0 => (0, 16 << 10),
            1 => (0, 1 << 20),
            _ => (64 << 10, 1 << 20),
        };
        let loop_config = LoopConfig {
            shards: cfg.shards,
            max_payload: 1 << 20,
            max_stream_chunks: 1_000_000,
            checkpoint_bytes,
            checkpoint_interval_ms: 1000,
            retention_ms: 24 * 3_600_000,
            // Under the parking times the seed chooses (0 to 2 s): some
            // runs park with their history and drop it later, some without.
            history_ms: 1_000,
            history_max_bytes: 1 << 20,
            stream_apart_bytes,
            stream_ms,
            park_after_ms,
            doze_after_ms: park_after_ms / 2,
            compact_after_bytes,
            seal_idle_ms: 20,
            seal_interval_ms: 1000,
            stopwatch: None,
            sabotage: cfg.sabotage,
        };
        let mut world = World {
            cfg: cfg.clone(),
            rng,
            now_ms: 1_700_000_000_000,
            disk: Disk::new(cfg.disk),
            storage: None,
            registry,
            loop_config,
            service,
            shards: Vec::new(),
            busy: vec![true; cfg.shards as usize],
            flushes: Vec::new(),
            seals: Vec::new(),
            steps: Vec::new(),
            net: Vec::new(),
            clients,
            pending: Vec::new(),
            acked_signals: Vec::new(),
            acked_updates: Vec::new(),
            graced: Vec::new(),
            cancels_to_check: Vec::new(),
            results: BTreeMap::new(),
            chunks_seen: BTreeMap::new(),
            subscribers,
            sub_rng,
            served: BTreeMap::new(),
            post,
            action: 0,
            random_cuts: 0,
            report: SimReport {
                seed: cfg.seed,
                disk: cfg.disk,
                actions: 0,
                power_cuts: 0,
                commit_crashes_armed: 0,
                storage_failures: 0,
                finished: 0,
                flushes_overlapped: 0,
                flushes_out_of_turn: 0,
                service_calls: 0,
                chunks_checked: 0,
                chunks_served: 0,
                streams_gone: 0,
                streams_let_go: 0,
                end_ms: 0,
                cancels_acked: 0,
                cancels_with_steps_in_flight: 0,
            },
        };
        world.open_shards()?;
        Ok(world)
    }

    fn fail(&self, check: &'static str, detail: String) -> SimFailure {
        SimFailure::new(
            &self.cfg,
            check,
            format!("action {}: {detail}", self.action),
        )
    }

    fn open_shards(&mut self) -> Result<(), SimFailure> {
        self.shards.clear();
        self.storage = None;
        let storage = self
            .disk
            .open()
            .map_err(|e| self.fail("recovery", format!("the storage does not open: {e}")))?;
        for shard in 0..self.cfg.shards {
            let opened = ShardLoop::open(
                &storage,
                shard,
                self.loop_config.clone(),
                self.registry.clone(),
                self.now_ms,
            )
            .map_err(|e| self.fail("recovery", format!("shard {shard} does not open: {e}")))?;
            self.shards.push(opened);
        }
        self.storage = Some(storage);
        self.busy = vec![true; self.cfg.shards as usize];
        Ok(())
    }

    /// Runs the whole simulation: a phase with faults, then one without
    /// until every run has finished.
    pub(super) fn run(mut self) -> Result<SimReport, SimFailure> {
        for _ in 0..self.cfg.actions {
            self.step(true)?;
        }
        let drain_from_ms = self.now_ms;
        let mut drained = 0u32;
        while !self.all_finished()? {
            drained += 1;
            if drained > DRAIN_ACTIONS_MAX || self.now_ms > drain_from_ms + DRAIN_MS_MAX {
                let waiting = self.unfinished()?;
                return Err(self.fail(
                    "liveness",
                    format!("with faults stopped, runs never finished: {waiting:?}"),
                ));
            }
            self.step(false)?;
        }
        self.check_results_stable_and_final()?;
        self.check_state()?;
        self.report.actions = self.action;
        self.report.finished = self.clients.len() as u32;
        // The programs are built to succeed: steps fail fewer times than
        // the retry policy allows, children have IDs of their own.
        // A client that cancelled may see its workflow cancelled or
        // terminated.
        let cancelled: Vec<&str> = self
            .clients
            .iter()
            .filter(|c| c.cancel_sent)
            .map(|c| c.id.as_str())
            .collect();
        if let Some((id, (status, payload))) = self.results.iter().find(|(id, (s, _))| {
            *s != Status::Ok
                && !(cancelled.contains(&id.as_str())
                    && matches!(s, Status::Cancelled | Status::Terminated))
        }) {
            return Err(self.fail(
                "unexpected failure",
                format!(
                    "{id} ended {status:?}: {}",
                    String::from_utf8_lossy(payload)
                ),
            ));
        }
        self.report.chunks_checked = self.chunks_seen.len() as u32;
        self.report.chunks_served = self.served.len() as u32;
        self.report.service_calls = self
            .service
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .calls
            .len() as u32;
        self.report.end_ms = self.now_ms;
        Ok(self.report)
    }

    /// One action.
    fn step(&mut self, faults: bool) -> Result<(), SimFailure> {
        self.action += 1;
        self.client_actions(faults);
        let posted = std::mem::take(&mut *self.post.lock().unwrap_or_else(|e| e.into_inner()));
        for (id, input) in posted {
            self.net.push((shard_of(&id, self.cfg.shards), input));
        }
        let shards = self.cfg.shards as usize;
        let busy: Vec<usize> = (0..shards).filter(|&s| self.busy[s]).collect();
        // Weights: the seed decides the interleaving; faults are rare.
        let mut choices: Vec<(u32, u8)> = Vec::new();
        if !busy.is_empty() {
            choices.push((30, 0));
        }
        if !self.flushes.is_empty() {
            choices.push((20, 1));
        }
        if !self.steps.is_empty() {
            choices.push((20, 2));
        }
        if !self.net.is_empty() {
            choices.push((15, 3));
        }
        if faults && self.random_cuts < self.cfg.power_cuts {
            choices.push((2, 4));
        }
        if faults {
            choices.push((1, 5));
        }
        if !self.seals.is_empty() {
            choices.push((10, 7));
        }
        choices.push((2, 6));
        let total: u32 = choices.iter().map(|c| c.0).sum();
        let mut pick = self.rng.u32(0..total);
        let mut kind = 6;
        for (w, k) in choices {
            if pick < w {
                kind = k;
                break;
            }
            pick -= w;
        }
        match kind {
            0 => {
                let s = busy[self.rng.usize(0..busy.len())];
                self.run_shard(s)?;
            }
            1 => {
                let (shard, mut ticket) = self
                    .flushes
                    .swap_remove(self.rng.usize(0..self.flushes.len()));
                if self
                    .flushes
                    .iter()
                    .any(|(s, t)| *s == shard && t.last_lsn() < ticket.last_lsn())
                {
                    self.report.flushes_out_of_turn += 1;
                }
                ticket.run();
                self.shards[shard as usize].handle(Input::Flushed { ticket, micros: 0 });
                self.busy[shard as usize] = true;
            }
            2 => {
                let (shard, mut job) = self.steps.swap_remove(self.rng.usize(0..self.steps.len()));
                let mut cx = Context::from_waker(Waker::noop());
                match job.future.as_mut().poll(&mut cx) {
                    Poll::Ready(result) => {
                        self.shards[shard as usize].handle(Input::StepDone {
                            run: job.run,
                            seq: job.seq,
                            attempt: job.attempt,
                            result,
                        });
                        self.busy[shard as usize] = true;
                    }
                    Poll::Pending => self.steps.push((shard, job)),
                }
            }
            3 => {
                let (shard, input) = self.net.swap_remove(self.rng.usize(0..self.net.len()));
                self.shards[shard as usize].handle(input);
                self.busy[shard as usize] = true;
            }
            4 => {
                self.random_cuts += 1;
                self.power_cut()?;
            }
            5 => {
                // The next checkpoint of a shard crashes part way.
                let shard = self.rng.u32(0..self.cfg.shards);
                self.disk.arm_fault(&mut self.rng, shard);
                self.report.commit_crashes_armed += 1;
            }
            7 => {
                let (shard, mut ticket) =
                    self.seals.swap_remove(self.rng.usize(0..self.seals.len()));
                ticket.run();
                self.shards[shard as usize].handle(Input::Sealed { ticket });
                self.busy[shard as usize] = true;
            }
            _ => self.advance_time(),
        }
        self.take_replies()
    }

    fn run_shard(&mut self, s: usize) -> Result<(), SimFailure> {
        let Effects {
            flush,
            seal,
            steps,
            more,
            messages,
            // Inbox rows come only from PostgreSQL; the simulator's disk
            // is the file backend's, with no inbox.
            inbox_done: _,
        } = self.shards[s].run(self.now_ms);
        if let Some(ticket) = flush {
            if self.flushes.iter().any(|(shard, _)| *shard == s as u32) {
                self.report.flushes_overlapped += 1;
            }
            self.flushes.push((s as u32, ticket));
        }
        if let Some(ticket) = seal {
            self.seals.push((s as u32, ticket));
        }
        for job in steps {
            if let Some(g) = self
                .graced
                .iter()
                .find(|g| g.shard == s as u32 && g.run == job.run && self.now_ms > g.end_ms)
            {
                return Err(self.fail(
                    "step after a cancel's grace",
                    format!(
                        "{} (shard {} run {}): step {} attempt {} started at {}, its grace ended by {}",
                        g.id, g.shard, g.run, job.seq, job.attempt, self.now_ms, g.end_ms
                    ),
                ));
            }
            self.steps.push((s as u32, job));
        }
        for (target, input) in messages {
            self.net.push((target, input));
        }
        self.busy[s] = more;
        if let Some(why) = self.shards[s].failure() {
            // Only an armed fault fails a shard (each fails one commit or
            // one sync, then the power cut below ends it): a failure
            // beyond them is the engine misusing its storage, or the
            // storage breaking a promise.
            if self.report.storage_failures >= self.report.commit_crashes_armed {
                return Err(self.fail(
                    "a shard's storage failed with no fault armed",
                    format!("shard {s}: {why}"),
                ));
            }
            // A commit crashed part way: the rest of the crash.
            self.report.storage_failures += 1;
            return self.power_cut();
        }
        self.check_runs()?;
        // The records checks read journals back: every so often.
        if self.action.is_multiple_of(64) {
            self.check_records()?;
        }
        Ok(())
    }

    /// Time moves to the next thing any shard waits for, when nothing else
    /// can happen first (or by the seed's choice).
    fn advance_time(&mut self) {
        let next = self.shards.iter().filter_map(ShardLoop::next_wake).min();
        let to = match next {
            Some(at) if at > self.now_ms => at,
            Some(_) => self.now_ms + 1,
            None => self.now_ms + self.rng.u64(1..1000),
        };
        self.now_ms = to;
        for (s, shard) in self.shards.iter_mut().enumerate() {
            shard.handle(Input::Tick);
            self.busy[s] = true;
        }
    }

    /// A power cut: everything not durable is lost, every in-flight thing
    /// with it; the shards recover from the disk.
    fn power_cut(&mut self) -> Result<(), SimFailure> {
        self.report.power_cuts += 1;
        // The process dies first (its handles and locks with it), then the
        // disk loses what it had not made durable.
        self.flushes.clear();
        self.seals.clear();
        self.steps.clear();
        self.net.clear();
        self.post.lock().unwrap_or_else(|e| e.into_inner()).clear();
        // Replies in flight are lost with the process: clients see an error.
        self.shards.clear();
        self.storage = None;
        self.disk.power_cut(&mut self.rng);
        self.take_replies()?;
        self.open_shards()?;
        self.check_state()
    }

    /// Clients act when their time comes: starts (again, attaching, if an
    /// earlier one's answer was lost), signals, and result requests.
    fn client_actions(&mut self, faults: bool) {
        let shards = self.cfg.shards;
        for c in 0..self.clients.len() {
            let client = &self.clients[c];
            let due = !faults || client.start_at <= self.action;
            if client.started.is_none() && !client.starting && due {
                let (reply, rx) = oneshot::channel();
                let id = client.id.clone();
                let input = serde_json::to_vec(&(client.program, 0u32)).unwrap_or_default();
                let shard = shard_of(&id, shards) as usize;
                self.shards[shard].handle(Input::Start {
                    wtype: workload::SIM.name().to_string(),
                    id,
                    input,
                    policy: IdPolicy::Attach,
                    trace: None,
                    version: None,
                    attrs: None,
                    reply,
                });
                self.busy[shard] = true;
                self.clients[c].starting = true;
                self.pending.push(Pending::Start(c, rx));
                continue;
            }
            let Some(run) = client.started else { continue };
            while let Some(&(at, k, nonce)) = self.clients[c].signals.first() {
                if faults && at > self.action {
                    break;
                }
                self.clients[c].signals.remove(0);
                let (reply, rx) = oneshot::channel();
                let id = self.clients[c].id.clone();
                let shard = shard_of(&id, shards) as usize;
                self.shards[shard].handle(Input::Signal {
                    id,
                    name: SIGNALS[k].name().to_string(),
                    payload: serde_json::to_vec(&nonce).unwrap_or_default(),
                    dedup: 0,
                    reply,
                });
                self.busy[shard] = true;
                self.pending.push(Pending::Signal(c, run, nonce, rx));
            }
            // Updates go while faults happen only (a run may have finished
            // by the time one arrives: refused, and that is fine).
            while let Some(&(at, nonce)) = self.clients[c].updates.first() {
                if !faults || at > self.action {
                    break;
                }
                self.clients[c].updates.remove(0);
                let (reply, rx) = oneshot::channel();
                let id = self.clients[c].id.clone();
                let update_id = format!("up-{nonce}");
                let shard = shard_of(&id, shards) as usize;
                self.shards[shard].handle(Input::Update {
                    id,
                    name: workload::ADD.name().to_string(),
                    update_id: update_id.clone(),
                    payload: serde_json::to_vec(&nonce).unwrap_or_default(),
                    reply,
                });
                self.busy[shard] = true;
                self.pending.push(Pending::Update(c, run, update_id, rx));
            }
            // Its cancel, with a grace, when its time comes.
            if let Some((at, grace_ms)) = self.clients[c].cancel
                && !self.clients[c].cancel_sent
                && (!faults || at <= self.action)
            {
                self.clients[c].cancel_sent = true;
                let (reply, rx) = oneshot::channel();
                let id = self.clients[c].id.clone();
                let shard = shard_of(&id, shards) as usize;
                self.shards[shard].handle(Input::Cancel {
                    id,
                    reason: "the simulator cancels".to_string(),
                    grace_ms: Some(grace_ms),
                    reply,
                });
                self.busy[shard] = true;
                self.pending.push(Pending::Cancel(c, grace_ms, rx));
            }
            // Now and then a client asks for the result.
            if self.rng.u32(0..200) == 0 {
                let (reply, rx) = oneshot::channel();
                let id = self.clients[c].id.clone();
                let shard = shard_of(&id, shards) as usize;
                self.shards[shard].handle(Input::Result { id, reply });
                self.busy[shard] = true;
                self.pending.push(Pending::Result(c, rx));
            }
        }
        self.subscribers_read(faults);
    }

    /// Each subscriber whose time came and that has no read in flight
    /// asks its run's journal, as a subscription does between pauses.
    fn subscribers_read(&mut self, faults: bool) {
        let shards = self.cfg.shards;
        for i in 0..self.subscribers.len() {
            let sub = &self.subscribers[i];
            let client = &self.clients[sub.client];
            if sub.done || sub.reading || client.started.is_none() {
                continue;
            }
            if (faults && sub.from_action > self.action) || self.sub_rng.u8(..3) != 0 {
                continue;
            }
            let (reply, rx) = oneshot::channel();
            let id = client.id.clone();
            let shard = shard_of(&id, shards) as usize;
            let (run, from) = (sub.cursor.run(), sub.cursor.scanned());
            self.shards[shard].handle(Input::Journal {
                id,
                run,
                from,
                reply,
            });
            self.busy[shard] = true;
            self.subscribers[i].reading = true;
            self.pending.push(Pending::Journal(i, rx));
        }
    }

    /// A subscriber's read came back: its chunks are remembered as served
    /// (the same index never served with other bytes), and a cursor past
    /// the stream (chunks served, then gone) is a failure.
    fn served(&mut self, i: usize, live: &LiveJournal) -> Result<(), SimFailure> {
        let sub = &mut self.subscribers[i];
        sub.reading = false;
        let id = self.clients[sub.client].id.clone();
        let chunks = match sub.cursor.take(live) {
            Ok(chunks) => chunks,
            Err(crate::Error::UnknownStream { .. }) => {
                sub.done = true;
                return Ok(());
            }
            // Let go by the rule, never before (the clock only goes on).
            Err(crate::Error::StreamGone {
                finished_ms,
                gone_ms,
                ..
            }) if gone_ms == finished_ms.saturating_add(self.loop_config.stream_ms)
                && gone_ms <= self.now_ms =>
            {
                sub.done = true;
                self.report.streams_gone += 1;
                return Ok(());
            }
            Err(e) => {
                let name = sub.name.clone();
                return Err(self.fail(
                    "served stream chunk lost",
                    format!("{id} run {} stream {name}: {e}", live.run),
                ));
            }
        };
        sub.done = sub.cursor.finished();
        let name = sub.name.clone();
        for c in chunks {
            let key = (id.clone(), live.run, name.clone(), c.index);
            if let Some(first) = self.served.get(&key)
                && *first != c.payload
            {
                return Err(self.fail(
                    "served stream chunk changed",
                    format!(
                        "{id} run {} stream {name} chunk {} served {:?}, then {:?}",
                        live.run,
                        c.index,
                        String::from_utf8_lossy(first),
                        String::from_utf8_lossy(&c.payload)
                    ),
                ));
            }
            self.served.insert(key, c.payload);
        }
        Ok(())
    }

    /// Answers that arrived: acknowledged starts and signals are checked
    /// and remembered, reported results compared with earlier ones.
    fn take_replies(&mut self) -> Result<(), SimFailure> {
        let mut still = Vec::new();
        for p in std::mem::take(&mut self.pending) {
            match p {
                Pending::Start(c, mut rx) => match rx.try_recv() {
                    Ok(Ok(r)) => {
                        self.clients[c].started = Some(r.run);
                        self.clients[c].starting = false;
                    }
                    Ok(Err(_)) | Err(oneshot::error::TryRecvError::Closed) => {
                        self.clients[c].starting = false;
                    }
                    Err(oneshot::error::TryRecvError::Empty) => still.push(Pending::Start(c, rx)),
                },
                Pending::Signal(c, run, nonce, mut rx) => match rx.try_recv() {
                    Ok(Ok(())) => {
                        self.acked_signals.push(AckedSignal {
                            id: self.clients[c].id.clone(),
                            run,
                            nonce,
                        });
                    }
                    Ok(Err(_)) | Err(oneshot::error::TryRecvError::Closed) => {}
                    Err(oneshot::error::TryRecvError::Empty) => {
                        still.push(Pending::Signal(c, run, nonce, rx))
                    }
                },
                Pending::Update(c, run, update_id, mut rx) => match rx.try_recv() {
                    Ok(Ok(r)) if r.status == Status::Ok => {
                        self.acked_updates.push(AckedUpdate {
                            id: self.clients[c].id.clone(),
                            run,
                            update_id,
                        });
                    }
                    Ok(_) | Err(oneshot::error::TryRecvError::Closed) => {}
                    Err(oneshot::error::TryRecvError::Empty) => {
                        still.push(Pending::Update(c, run, update_id, rx))
                    }
                },
                Pending::Cancel(c, grace_ms, mut rx) => match rx.try_recv() {
                    Ok(Ok(())) => self.cancels_to_check.push((c, grace_ms, self.now_ms)),
                    Ok(Err(_)) | Err(oneshot::error::TryRecvError::Closed) => {}
                    Err(oneshot::error::TryRecvError::Empty) => {
                        still.push(Pending::Cancel(c, grace_ms, rx))
                    }
                },
                Pending::Result(c, mut rx) => match rx.try_recv() {
                    Ok(Ok(r)) => self.reported(c, r)?,
                    Ok(Err(_)) | Err(oneshot::error::TryRecvError::Closed) => {}
                    Err(oneshot::error::TryRecvError::Empty) => still.push(Pending::Result(c, rx)),
                },
                Pending::Journal(i, mut rx) => match rx.try_recv() {
                    Ok(Ok(live)) => self.served(i, &live)?,
                    // Not started yet, or cut off by a power cut: it asks
                    // again.
                    Ok(Err(_)) | Err(oneshot::error::TryRecvError::Closed) => {
                        self.subscribers[i].reading = false;
                    }
                    Err(oneshot::error::TryRecvError::Empty) => still.push(Pending::Journal(i, rx)),
                },
            }
        }
        self.pending = still;
        if !self.shards.is_empty() {
            for (c, grace_ms, acked_ms) in std::mem::take(&mut self.cancels_to_check) {
                self.cancel_acked(c, grace_ms, acked_ms)?;
            }
        }
        Ok(())
    }

    /// A client's cancel with a grace of `grace_ms` was acknowledged at
    /// `acked_ms`: the run it reached (the current run, once its journal
    /// holds a `Cancel`) starts no step attempt after `acked_ms` + the
    /// grace (the loop took the cancel no later, and counts the grace from
    /// then).
    fn cancel_acked(&mut self, c: usize, grace_ms: u64, acked_ms: u64) -> Result<(), SimFailure> {
        let id = self.clients[c].id.clone();
        let shard = shard_of(&id, self.cfg.shards) as usize;
        let view = self.shards[shard]
            .view(&id)
            .map_err(|e| self.fail("read back", format!("{id}: {e}")))?;
        let Some(v) = view else {
            return Ok(());
        };
        if !v
            .journal
            .iter()
            .any(|r| matches!(r, fusee_core::record::RecordBuf::Cancel { .. }))
        {
            return Ok(());
        }
        self.report.cancels_acked += 1;
        if self
            .steps
            .iter()
            .any(|(s, job)| *s as usize == shard && job.run == v.run)
        {
            self.report.cancels_with_steps_in_flight += 1;
        }
        self.graced.push(Graced {
            id,
            shard: shard as u32,
            run: v.run,
            end_ms: acked_ms + grace_ms,
        });
        Ok(())
    }

    /// A result reported to a client: the same every time it is asked.
    fn reported(&mut self, c: usize, r: RunResult) -> Result<(), SimFailure> {
        let id = self.clients[c].id.clone();
        let now = (r.status, r.payload);
        match self.results.get(&id) {
            Some(before) if *before != now => Err(self.fail(
                "result changed",
                format!("{id}: reported {before:?}, later {now:?}"),
            )),
            Some(_) => Ok(()),
            None => {
                self.results.insert(id, now);
                Ok(())
            }
        }
    }

    /// Every check.
    fn check_state(&mut self) -> Result<(), SimFailure> {
        self.check_runs()?;
        self.check_records()
    }

    /// No run stopped by a determinism error, no idempotency key with two
    /// inputs.
    fn check_runs(&mut self) -> Result<(), SimFailure> {
        for (s, shard) in self.shards.iter().enumerate() {
            if let Some((run, why)) = shard.stopped_runs().into_iter().next() {
                return Err(self.fail("determinism", format!("shard {s} run {run}: {why}")));
            }
        }
        let conflict = self
            .service
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .conflicts
            .first()
            .cloned();
        if let Some((key, first, later)) = conflict {
            return Err(self.fail(
                "idempotency",
                format!("key {key:?} called with input {first}, then with {later}"),
            ));
        }
        Ok(())
    }

    /// Every acknowledged start on record; each op's progress attribute
    /// recorded once, in order; every acknowledged signal, and
    /// every update a client got a result for, in the journal of the run
    /// it went to (while that run's journal is whole: a finished run
    /// parked keeps its start and end only). Each workflow's latest run is
    /// read back once per pass.
    fn check_records(&mut self) -> Result<(), SimFailure> {
        let shards = self.cfg.shards;
        let mut views = BTreeMap::new();
        for c in 0..self.clients.len() {
            let Some(run) = self.clients[c].started else {
                continue;
            };
            let id = self.clients[c].id.clone();
            let shard = shard_of(&id, shards) as usize;
            let view = self.shards[shard]
                .view(&id)
                .map_err(|e| self.fail("read back", format!("{id}: {e}")))?;
            let Some(view) = view else {
                return Err(self.fail(
                    "acknowledged start lost",
                    format!("{id} (run {run}) was acknowledged and is gone"),
                ));
            };
            views.insert(id, view);
        }
        // The journal of `id`'s run `run`, if the pass has it whole.
        let whole = |id: &str, run: RunId| {
            views
                .get(id)
                .filter(|v| v.run == run && v.done.is_none())
                .map(|v| &v.journal)
        };
        // Search attributes: the progress each op sets as it begins is
        // recorded once and in order (a replay records none again), in
        // every journal the shard still holds whole.
        for (id, view) in &views {
            let mut seen = 0i64;
            for rec in &view.journal {
                let Record::Attributes { payload, .. } = rec else {
                    continue;
                };
                let mut set = crate::attrs::AttrMap::new();
                crate::attrs::apply_payload(&mut set, payload);
                let Some(v) = set.get(workload::PROGRESS) else {
                    continue;
                };
                if *v != crate::attrs::AttrValue::Int(seen + 1) {
                    return Err(self.fail(
                        "search attribute out of order",
                        format!(
                            "{id} run {}: {} {v:?} recorded after {seen}",
                            view.run,
                            workload::PROGRESS
                        ),
                    ));
                }
                seen += 1;
            }
        }
        for (id, view) in &views {
            self.check_streams(id, view)?;
        }
        // The search-attribute index (read from its snapshot after a
        // recovery, or built) holds each run's attributes as its journal
        // does.
        for (id, view) in &views {
            let shard = shard_of(id, shards) as usize;
            let Some(indexed) = self.shards[shard].indexed_attributes(view.run) else {
                continue;
            };
            let mut meta = None;
            let mut payloads = Vec::new();
            for rec in &view.journal {
                match rec {
                    Record::Start { meta: m, .. } => meta = m.as_deref(),
                    Record::Attributes { payload, .. } => payloads.push(&payload[..]),
                    _ => {}
                }
            }
            let journal: BTreeMap<String, crate::attrs::AttrKey> =
                crate::attrs::fold(meta, payloads)
                    .into_iter()
                    .map(|(k, v)| (k, v.key()))
                    .collect();
            if indexed != journal {
                return Err(self.fail(
                    "search attribute index",
                    format!(
                        "{id} run {}: the index holds {indexed:?}, the journal {journal:?}",
                        view.run
                    ),
                ));
            }
        }
        for a in &self.acked_signals {
            let Some(journal) = whole(&a.id, a.run) else {
                continue;
            };
            let payload = serde_json::to_vec(&a.nonce).unwrap_or_default();
            let found = journal.iter().any(|r| {
                matches!(r, Record::Signal { payload: p, .. } if p.as_ref() == payload.as_slice())
            });
            if !found {
                return Err(self.fail(
                    "acknowledged signal lost",
                    format!(
                        "{} run {}: signal {} was acknowledged and is not in its journal",
                        a.id, a.run, a.nonce
                    ),
                ));
            }
        }
        for a in &self.acked_updates {
            let Some(journal) = whole(&a.id, a.run) else {
                continue;
            };
            let found = journal
                .iter()
                .any(|r| matches!(r, Record::Update { id: u, .. } if **u == *a.update_id));
            if !found {
                return Err(self.fail(
                    "acknowledged update lost",
                    format!(
                        "{} run {}: update {} answered and not in its journal",
                        a.id, a.run, a.update_id
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Streams in run `view` of `id`: each chunk at its own index once (a
    /// chunk sent again, by a step run again, is dropped), none after the
    /// end, one end, and a chunk once read back never different.
    fn check_streams(&mut self, id: &str, view: &RunView) -> Result<(), SimFailure> {
        let mut streams: BTreeMap<u32, (u64, bool)> = BTreeMap::new();
        let mut names: BTreeMap<u32, String> = BTreeMap::new();
        for rec in &view.journal {
            match rec {
                Record::Value {
                    seq, kind, value, ..
                } if *kind == fusee_core::record::value_kind::STREAM => {
                    streams.insert(*seq, (0, false));
                    names.insert(*seq, String::from_utf8_lossy(value).into_owned());
                }
                Record::Chunk { seq, payload, .. } => {
                    let Some((len, ended)) = streams.get_mut(seq) else {
                        return Err(self.fail(
                            "stream chunk without its stream",
                            format!("{id} run {}: a chunk of operation {seq}", view.run),
                        ));
                    };
                    let at = *len;
                    let text = String::from_utf8_lossy(payload);
                    let place = text.split('@').next().and_then(|j| j.parse::<u64>().ok());
                    if *ended || place != Some(at) {
                        return Err(self.fail(
                            "stream chunk out of place",
                            format!(
                                "{id} run {}: stream {seq} holds {text:?} at index {at}{}",
                                view.run,
                                if *ended { " after its end" } else { "" }
                            ),
                        ));
                    }
                    *len += 1;
                    let name = names.get(seq).cloned().unwrap_or_default();
                    let served = (id.to_string(), view.run, name, at);
                    if let Some(first) = self.served.get(&served)
                        && first.as_slice() != payload.as_ref()
                    {
                        return Err(self.fail(
                            "served stream chunk changed",
                            format!(
                                "{id} run {}: stream {} chunk {at} served {:?}, now {text:?}",
                                view.run,
                                served.2,
                                String::from_utf8_lossy(first)
                            ),
                        ));
                    }
                    let key = (id.to_string(), view.run, *seq, at);
                    match self.chunks_seen.get(&key) {
                        Some(first) if first.as_slice() != payload.as_ref() => {
                            return Err(self.fail(
                                "stream chunk changed",
                                format!(
                                    "{id} run {}: stream {seq} chunk {at} read {:?}, now {text:?}",
                                    view.run,
                                    String::from_utf8_lossy(first)
                                ),
                            ));
                        }
                        Some(_) => {}
                        None => {
                            self.chunks_seen.insert(key, payload.to_vec());
                        }
                    }
                }
                Record::StreamEnd { seq, .. } => match streams.get_mut(seq) {
                    Some((_, ended)) if !*ended => *ended = true,
                    _ => {
                        return Err(self.fail(
                            "stream ended twice",
                            format!("{id} run {}: stream {seq}", view.run),
                        ));
                    }
                },
                _ => {}
            }
        }
        // Every chunk served is held by the journal from then on, until
        // the run's streams' time passed: then none, or all as before (a
        // frame not rewritten yet), never some.
        let let_go = view.journal.iter().any(|r| {
            matches!(r, Record::Done { finished_ms, .. }
                if finished_ms.saturating_add(self.loop_config.stream_ms) <= self.now_ms)
        });
        for (seq, name) in &names {
            let len = streams.get(seq).map_or(0, |s| s.0);
            if let_go && len == 0 {
                // Counted where a chunk of it was read back before.
                let key = |at| (id.to_string(), view.run, *seq, at);
                if self
                    .chunks_seen
                    .range(key(0)..=key(u64::MAX))
                    .next()
                    .is_some()
                {
                    self.report.streams_let_go += 1;
                }
                continue;
            }
            let from = (id.to_string(), view.run, name.clone(), len);
            let to = (id.to_string(), view.run, name.clone(), u64::MAX);
            if let Some(((_, _, _, at), bytes)) = self.served.range(from..=to).next() {
                return Err(self.fail(
                    "served stream chunk lost",
                    format!(
                        "{id} run {}: stream {name} chunk {at} ({:?}) was served; the journal \
                         holds {len} chunks",
                        view.run,
                        String::from_utf8_lossy(bytes)
                    ),
                ));
            }
        }
        Ok(())
    }

    fn all_finished(&mut self) -> Result<bool, SimFailure> {
        Ok(self.unfinished()?.is_empty())
    }

    /// Clients whose workflow has not finished (or not started).
    fn unfinished(&mut self) -> Result<Vec<String>, SimFailure> {
        let shards = self.cfg.shards;
        let mut out = Vec::new();
        for c in 0..self.clients.len() {
            let id = self.clients[c].id.clone();
            if self.clients[c].started.is_none() || !self.clients[c].signals.is_empty() {
                out.push(id);
                continue;
            }
            let shard = shard_of(&id, shards) as usize;
            let view = self.shards[shard]
                .view(&id)
                .map_err(|e| self.fail("read back", format!("{id}: {e}")))?;
            // A continued run hands over: its successor must finish.
            match view.and_then(|v| v.done) {
                Some(s) if s != Status::ContinuedAsNew => {}
                _ => out.push(id),
            }
        }
        Ok(out)
    }

    /// At the end: every client asks for its result once more, and gets
    /// what it was told before (if it asked before).
    fn check_results_stable_and_final(&mut self) -> Result<(), SimFailure> {
        let shards = self.cfg.shards;
        for c in 0..self.clients.len() {
            let (reply, rx) = oneshot::channel();
            let id = self.clients[c].id.clone();
            let shard = shard_of(&id, shards) as usize;
            self.shards[shard].handle(Input::Result { id, reply });
            self.busy[shard] = true;
            self.pending.push(Pending::Result(c, rx));
        }
        for _ in 0..10_000 {
            // Subscribers read on for as long as the world steps.
            if self
                .pending
                .iter()
                .all(|p| matches!(p, Pending::Journal(..)))
            {
                return Ok(());
            }
            self.step(false)?;
        }
        let waiting: Vec<String> = self
            .pending
            .iter()
            .map(|p| match p {
                Pending::Start(c, _) => format!("start of {}", self.clients[*c].id),
                Pending::Signal(c, ..) => format!("signal to {}", self.clients[*c].id),
                Pending::Result(c, _) => format!("result of {}", self.clients[*c].id),
                Pending::Update(c, ..) => format!("update of {}", self.clients[*c].id),
                Pending::Cancel(c, ..) => format!("cancel of {}", self.clients[*c].id),
                Pending::Journal(i, _) => {
                    let sub = &self.subscribers[*i];
                    format!(
                        "read of stream {} of {}",
                        sub.name, self.clients[sub.client].id
                    )
                }
            })
            .collect();
        let mut detail = format!("requests never answered: {waiting:?}");
        for what in waiting.iter().take(3) {
            let id = what.rsplit(' ').next().unwrap_or_default();
            let shard = shard_of(id, shards) as usize;
            if let Ok(Some(v)) = self.shards[shard].view(id) {
                let last: Vec<String> = v
                    .journal
                    .iter()
                    .rev()
                    .take(4)
                    .map(|r| format!("{r:?}"))
                    .collect();
                detail.push_str(&format!(
                    "; {id}: run {} done {:?}, last records (newest first) {last:?}",
                    v.run, v.done
                ));
            }
        }
        Err(self.fail("liveness", detail))
    }
}
