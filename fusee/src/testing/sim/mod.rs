//! Deterministic simulation of the engine: the real shard loops, run
//! machines and workflow code, stepped single-threaded in an order a seed
//! chooses, with the disk, the network and the clock simulated. Any failure
//! replays exactly from its seed.
//!
//! # The world
//!
//! The disk is the memory backend (two flushes in flight per shard, as on
//! PostgreSQL, completed in any order, a power cut losing those not taken
//! back, checkpoint commits crashing at each of its commit points) or the
//! file backend on the simulated file system (torn writes at 512-byte
//! sectors, failed syncs): [`SimDisk`].
//!
//! Each action is one of: run a shard loop's iteration; complete one of the
//! flushes in flight (in any order); poll one of the step tasks; deliver
//! one of the messages between shards (in any order: the network reorders
//! and delays); a power cut (everything not durable is lost, shards
//! recover from the disk); arm a fault in the disk's next writes (a commit
//! crashing part way, a sync failing); or move the
//! clock to the next timer any shard waits for. Clients start workflows
//! (again, attaching, when an answer was lost), signal them and ask for
//! their results at times the seed chooses.
//!
//! The workflows are programs generated from the seed (steps that fail and
//! retry, sleeps, signal waits with timeouts, a step racing a sleep,
//! children, continue-as-new, sagas whose compensations undo the steps
//! before one that fails for good, an update each run takes, a stream of
//! numbered chunks sent from a step that may fail after sending them all),
//! interpreted by one workflow type; their
//! steps call a mock outside service that logs each call's idempotency key
//! and input (see `workload`).
//!
//! # What is checked
//!
//! - After every shard iteration: no run stopped by a determinism error; the
//!   service never saw one key with two different inputs.
//! - After every recovery, every 64 actions and at the end: every
//!   acknowledged start exists; every acknowledged signal, and every update
//!   a client got a result for, is in the journal of the run it was sent to
//!   (while that run's journal is whole). In each journal read back, each
//!   op's search attribute is recorded once, in order, and each stream's
//!   chunks sit each at its own index, once (a chunk sent again by a step
//!   run again is dropped), none after the stream's end, which comes once;
//!   a chunk once read back never reads differently. A step's stream
//!   requests reach its shard through the world's network (the simulator
//!   has no engine), in an order the seed chooses.
//! - Subscribers: each stream of each client's program has one, which
//!   begins at an action the seed chooses and reads its run's journal
//!   through the shard (`Input::Journal`) as a subscription does, with the
//!   subscription's own cursor (`stream::Cursor`), on through power cuts
//!   (as a client resumes from its last index). Every chunk served is held
//!   by every journal read back from then on, at its index with its bytes,
//!   and a cursor never finds itself past the stream: a chunk served
//!   before it was durable fails one or the other. Half the seeds let a
//!   finished run's chunks go within 3 s (`Config::stream_retention`):
//!   a subscription told they went is told so exactly at the run's finish
//!   plus that time, never before, and a journal read back after it holds
//!   every chunk served or none, never some.
//! - The search-attribute index, once built (read from its snapshot after
//!   a recovery, or built from the runs), holds each workflow's latest
//!   run's attributes exactly as its journal does.
//! - Every result reported to a client is the same each time it is asked,
//!   across crashes.
//! - Once faults stop, every workflow finishes, within a bounded number of
//!   actions and of simulated time, and finishes `Ok` (the programs are
//!   built to succeed: a failure is the engine's), or, for a client that
//!   cancelled it, cancelled or terminated.
//! - With [`SimConfig::cancels`]: about half the clients cancel their
//!   workflow with a grace ([`crate::Engine::cancel_with_grace`]) at a time
//!   the seed chooses, often with steps in flight (a saga swallows the
//!   cancel and goes on); no step attempt of a cancelled run starts after
//!   its grace ended.
//!
//! # Sabotage
//!
//! [`SimConfig::sabotage`] switches on one deliberate bug ([`Sabotage`]) in
//! the shard loop; a simulator that does not fail some seed of a sabotaged
//! engine has a checker missing. The test suite checks every sabotage is
//! caught.
//!
//! ```
//! use fusee::testing::sim::{SimConfig, run};
//! let report = run(&SimConfig::new(7)).expect("seed 7 passes");
//! assert_eq!(report.seed, 7);
//! ```

mod workload;
mod world;

pub use crate::runtime::sabotage::Sabotage;

/// One simulation: its seed and its size. [`SimConfig::new`] derives the
/// shape from the seed; the fields can be set by hand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// The seed: the same seed (and fields) replays the same run.
    pub seed: u64,
    /// Shards (1 to 4).
    pub shards: u32,
    /// Top-level workflows the clients start.
    pub workflows: u32,
    /// Actions with faults, before the faults stop.
    pub actions: u32,
    /// Power cuts the seed may choose (commit crashes cause more).
    pub power_cuts: u32,
    /// A deliberate bug switched on.
    pub sabotage: Option<Sabotage>,
    /// The disk under the shards.
    pub disk: SimDisk,
    /// Some clients cancel their workflow with a grace (off by default:
    /// [`SimConfig::with_cancels`]).
    pub cancels: bool,
}

/// The disk a simulation runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimDisk {
    /// The memory backend: two flushes in flight per shard, completing out
    /// of order, and a power cut loses those not taken back; checkpoint
    /// commits crash at each of the backend's commit points.
    Memory,
    /// The file backend on the simulated file system
    /// (`fusee_storage_file::sim`): a power cut drops, keeps or tears each
    /// unsynced write at 512-byte sectors; syncs fail on demand.
    File,
}

impl SimConfig {
    /// A simulation whose shape the seed chooses: 1 to 3 shards, 3 to 8
    /// workflows, 400 to 1,200 actions with faults, up to 5 power cuts, the
    /// file backend on a simulated disk for a third of the seeds and the
    /// memory backend for the rest.
    pub fn new(seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed_5eed_5eed_5eed);
        SimConfig {
            seed,
            shards: rng.u32(1..4),
            workflows: rng.u32(3..9),
            actions: rng.u32(400..1200),
            power_cuts: rng.u32(0..6),
            sabotage: None,
            disk: if rng.u32(0..3) == 0 {
                SimDisk::File
            } else {
                SimDisk::Memory
            },
            cancels: false,
        }
    }

    /// The same simulation with clients cancelling their workflows with a
    /// grace ([`SimConfig::cancels`]; the cancels are drawn from a stream
    /// of their own, so the rest of the seed's choices stay as they were).
    pub fn with_cancels(mut self) -> Self {
        self.cancels = true;
        self
    }

    /// The same simulation with `sabotage` switched on.
    pub fn sabotage(mut self, sabotage: Sabotage) -> Self {
        self.sabotage = Some(sabotage);
        self
    }
}

/// What a simulation that passed did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimReport {
    /// Its seed.
    pub seed: u64,
    /// Its disk.
    pub disk: SimDisk,
    /// Actions taken, both phases.
    pub actions: u32,
    /// Power cuts made (chosen by the seed, or completing a commit crash).
    pub power_cuts: u32,
    /// Commit crashes armed (a shard's next checkpoint crashes).
    pub commit_crashes_armed: u32,
    /// Storage failures the shards saw (an armed commit crash that fired).
    pub storage_failures: u32,
    /// Workflows that finished.
    pub finished: u32,
    /// Flushes begun while another flush of the same shard was in flight
    /// (the memory disk takes two at once).
    pub flushes_overlapped: u32,
    /// Flush tickets completed while an earlier one of the same shard was
    /// still in flight: they came back out of turn.
    pub flushes_out_of_turn: u32,
    /// Distinct idempotency keys the outside service saw.
    pub service_calls: u32,
    /// Stream chunks read back and checked (each counted once).
    pub chunks_checked: u32,
    /// Stream chunks the simulated subscribers were served (each then
    /// checked against every journal read back).
    pub chunks_served: u32,
    /// Subscriptions answered that their stream's chunks were let go
    /// (`Config::stream_retention`; half the seeds keep them under 3 s).
    pub streams_gone: u32,
    /// Streams found in a journal read back with their chunks let go
    /// (the frame rewritten; counted at each read).
    pub streams_let_go: u32,
    /// The simulated clock at the end (ms since the Unix epoch).
    pub end_ms: u64,
    /// Cancels with a grace acknowledged ([`SimConfig::cancels`]).
    pub cancels_acked: u32,
    /// Of those, the ones acknowledged while a step attempt of the run was
    /// in flight.
    pub cancels_with_steps_in_flight: u32,
}

/// A simulation that failed: which check, what it saw, and the command
/// that replays it.
#[derive(Clone, Debug, thiserror::Error)]
#[error("simulation of seed {seed} failed a check ({check}): {detail}\n  replay it: {replay}")]
pub struct SimFailure {
    /// The seed.
    pub seed: u64,
    /// The sabotage switched on, if any.
    pub sabotage: Option<Sabotage>,
    /// The check that failed.
    pub check: &'static str,
    /// What it saw.
    pub detail: String,
    /// The command that runs this seed again.
    pub replay: String,
}

impl SimFailure {
    fn new(cfg: &SimConfig, check: &'static str, detail: String) -> Self {
        let sabotage = cfg
            .sabotage
            .map(|s| format!(" FUSEE_SIM_SABOTAGE={s:?}"))
            .unwrap_or_default();
        let cancels = if cfg.cancels {
            " FUSEE_SIM_CANCELS=1"
        } else {
            ""
        };
        SimFailure {
            seed: cfg.seed,
            sabotage: cfg.sabotage,
            check,
            detail,
            replay: format!(
                "FUSEE_SIM_SEED={}{sabotage}{cancels} cargo test -p fusee --features testing --test sim -- --nocapture replay",
                cfg.seed
            ),
        }
    }
}

/// Runs one simulation. `Err` names the failed check and how to replay
/// it; a simulation never hangs (every phase is bounded).
pub fn run(config: &SimConfig) -> Result<SimReport, SimFailure> {
    world::World::new(config)?.run()
}
