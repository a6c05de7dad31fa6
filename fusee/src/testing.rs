//! The test kit (feature `testing`): test your workflows without waiting
//! for real time or crashing real processes.
//!
//! A [`TestEngine`] is a real [`Engine`] on the in-memory backend and a
//! [`VirtualClock`]. Add the feature for your tests only:
//!
//! ```toml
//! [dev-dependencies]
//! fusee = { path = "fusee", features = ["testing"] }
//! ```
//!
//! | you want | call |
//! |---|---|
//! | a workflow's result, its sleeps and timeouts passing at once | [`TestEngine::result`], [`TestEngine::execute`] |
//! | to move time yourself | [`TestEngine::advance`] (and [`TestEngine::settle`]) |
//! | a crash: only what was durable survives | [`TestEngine::crash`] |
//! | every crash point of a workflow checked | [`TestEngine::crash_everywhere`], [`TestEngine::crash_everywhere_with`] |
//! | a step's outside call replaced | [`TestEngine::mock_step`] with a [`StepMock`] |
//! | a step's own code that works on virtual time (heartbeats between sleeps, a timeout passing) | [`TestEngine::sleeper`] |
//! | new code checked against journals of old runs | [`TestEngine::replay`] with a [`Journal`] |
//! | the engine itself judged under seeded faults | [`sim::run`] (the deterministic simulator) |
//!
//! # Time
//!
//! The clock stands still while your test does things: a start, a signal
//! and another start all happen at the same instant. It moves only while
//! the kit waits: [`TestEngine::result`] moves it, whenever every run waits
//! and nothing else is going on (no step running, nothing being written),
//! straight to the next timer (a sleep, a wait's timeout, a retry, a step
//! attempt's timeout, a heartbeat tick), so a
//! day-long sleep takes milliseconds; [`TestEngine::advance`] moves it by a
//! given time, stopping at every timer on the way so each fires in its
//! turn. A wait that cannot end (every run waits for a signal nobody sends)
//! is [`TestError::Stalled`], not a hang.
//!
//! ```
//! use std::time::Duration;
//! use fusee::testing::TestEngine;
//! use fusee::{Ctx, Engine, Failure, Workflow};
//!
//! const REMIND: Workflow<String, String> = Workflow::new("remind");
//!
//! async fn remind(ctx: Ctx, who: String) -> Result<String, Failure> {
//!     ctx.sleep("a-day", Duration::from_secs(86_400)).await?;
//!     Ok(format!("reminded {who}"))
//! }
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), fusee::testing::TestError> {
//! // The kit keeps the registration: it registers again after a crash.
//! let kit = TestEngine::open(|engine: &Engine| engine.register(REMIND, remind)).await?;
//! let before = kit.now_ms();
//! let out = kit.execute(REMIND, "r-1", &"ada".to_string()).await?;
//! assert_eq!(out, "reminded ada");
//! assert!(kit.now_ms() - before >= 86_400_000, "a virtual day passed");
//!
//! // By hand: after 23 hours the reminder still sleeps.
//! kit.engine().start(REMIND, "r-2", &"bob".to_string()).await?;
//! kit.advance(Duration::from_secs(23 * 3600)).await?;
//! assert!(kit.engine().describe("r-2").await?.finished_ms.is_none());
//! kit.advance(Duration::from_secs(3600)).await?;
//! assert_eq!(kit.result(REMIND, "r-2").await?, "reminded bob");
//! kit.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Crashes
//!
//! [`TestEngine::crash`] stops the engine as a power cut would: only what
//! was durable survives, and the engine opens again on it, with your
//! workflows registered and your mocks in place. Handles and clones of the
//! old engine find it closed: take [`TestEngine::engine`] again.
//!
//! [`TestEngine::crash_everywhere`] runs a workflow to its end once, then
//! again from every prefix of what it wrote: for each `n`, a store holding
//! exactly its first `n` records (a crash right after record `n` became
//! durable). Your check sees every outcome next to the uncrashed one:
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use fusee::testing::TestEngine;
//! use fusee::{Ctx, Engine, Failure, Workflow};
//!
//! const PAY: Workflow<u64, u64> = Workflow::new("pay");
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), fusee::testing::TestError> {
//! // What the outside world saw: each charge's idempotency key.
//! let charges: Arc<Mutex<Vec<String>>> = Arc::default();
//! let seen = Arc::clone(&charges);
//! let kit = TestEngine::open(move |engine: &Engine| {
//!     let seen = Arc::clone(&seen);
//!     engine.register(PAY, move |ctx: Ctx, cents: u64| {
//!         let seen = Arc::clone(&seen);
//!         async move {
//!             let fee = ctx
//!                 .step("charge", move |step| {
//!                     let seen = Arc::clone(&seen);
//!                     async move {
//!                         seen.lock().unwrap().push(step.key().to_string());
//!                         Ok(cents / 100)
//!                     }
//!                 })
//!                 .await?;
//!             Ok::<_, Failure>(cents + fee)
//!         }
//!     });
//! })
//! .await?;
//! let report = kit
//!     .crash_everywhere(PAY, &1_000, |point| {
//!         assert_eq!(point.outcome, point.uncrashed, "after {:?}", point.crashed_after);
//!         // After a crash, a charge whose result was durable is never
//!         // made again.
//!         let made = std::mem::take(&mut *charges.lock().unwrap());
//!         if point.crashed_after.is_some() && !point.durable_steps().is_empty() {
//!             assert!(made.is_empty(), "charged again after {:?}", point.crashed_after);
//!         }
//!     })
//!     .await?;
//! // Start, Began (the charge's start), Step, Done: crashed after 0 to 4
//! // of them.
//! assert_eq!((report.records, report.crash_points), (4, 5));
//! # Ok(())
//! # }
//! ```
//!
//! # Step mocks
//!
//! [`TestEngine::mock_step`] replaces the function of every step of a name
//! (in every run, and after crashes): return a value, fail, fail the first
//! attempts and then run the real function, take virtual time. The mock
//! records its calls.
//!
//! ```
//! use std::time::Duration;
//! use fusee::testing::{StepMock, TestEngine};
//! use fusee::{Ctx, Engine, Failure, RetryPolicy, Workflow};
//!
//! const SHIP: Workflow<(), String> = Workflow::new("ship");
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), fusee::testing::TestError> {
//! let kit = TestEngine::open(|engine: &Engine| {
//!     engine.register(SHIP, |ctx: Ctx, ()| async move {
//!         let label = ctx
//!             .step("carrier", |_| async { Ok("real label".to_string()) })
//!             .retry(RetryPolicy::default().attempts(5))
//!             .await?;
//!         Ok::<_, Failure>(label)
//!     });
//! })
//! .await?;
//! // The carrier is down twice, and each call takes a (virtual) minute.
//! let carrier = kit.mock_step(
//!     "carrier",
//!     StepMock::real().fail_first(2).delay(Duration::from_secs(60)),
//! );
//! assert_eq!(kit.execute(SHIP, "s-1", &()).await?, "real label");
//! assert_eq!(carrier.calls().len(), 3);
//!
//! kit.mock_step("carrier", StepMock::returning("test label")?);
//! assert_eq!(kit.execute(SHIP, "s-2", &()).await?, "test label");
//! # Ok(())
//! # }
//! ```
//!
//! # Replay tests
//!
//! Before deploying new workflow code, replay the journals of runs the old
//! code wrote (`fusee show DIR ID --json > journal.json`, or
//! [`TestEngine::export_journal`]) against it: [`TestEngine::replay`]
//! answers every operation from the journal, runs no step and waits for no
//! time, and returns the code's result ([`Replayed`]) or
//! [`ReplayError::Diverged`] with the determinism error naming the first
//! operation that departs.
//!
//! ```
//! use fusee::testing::{Journal, ReplayError, TestEngine};
//! use fusee::{Ctx, Engine, Failure, Workflow};
//!
//! const ORDER: Workflow<u64, u64> = Workflow::new("order");
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The code that wrote the journal...
//! let mut old = TestEngine::open(|engine: &Engine| {
//!     engine.register(ORDER, |ctx: Ctx, n: u64| async move {
//!         Ok::<_, Failure>(ctx.step("charge", move |_| async move { Ok(n * 2) }).await?)
//!     });
//! })
//! .await?;
//! old.execute(ORDER, "o-1", &21).await?;
//! let json = old.export_journal("o-1").await?.to_json().to_string();
//!
//! // ... and new code that renamed the step.
//! let new = TestEngine::open(|engine: &Engine| {
//!     engine.register(ORDER, |ctx: Ctx, n: u64| async move {
//!         Ok::<_, Failure>(ctx.step("charge-card", move |_| async move { Ok(n * 2) }).await?)
//!     });
//! })
//! .await?;
//! match new.replay(&Journal::from_json(&json)?) {
//!     Err(ReplayError::Diverged { message, .. }) => {
//!         assert!(message.contains("operation 1"), "{message}");
//!         assert!(message.contains("\"charge-card\""), "{message}");
//!     }
//!     other => panic!("the rename went unnoticed: {other:?}"),
//! }
//! # Ok(())
//! # }
//! ```

mod crash;
mod mock;
mod replay;
pub mod sim;
mod timers;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use fusee_storage::MemoryStorage;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use crash::{CRASH_ID, CrashPoint, CrashReport};
pub use mock::{MockCall, StepMock};
pub use replay::{Journal, ReplayError, Replayed};
pub use timers::Sleeper;

use self::timers::Timers;
use crate::AnyStorage;
use crate::client::{Description, IdPolicy};
use crate::clock::{Clock, VirtualClock};
use crate::config::Config;
use crate::engine::Engine;
use crate::error::Error;
use crate::workflow::{Failure, Workflow};

/// The virtual clock's default start: 2023-11-14T22:13:20Z.
pub const DEFAULT_START_MS: u64 = 1_700_000_000_000;

/// Why a test-kit call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestError {
    /// The engine refused or failed (a workflow's failure is
    /// [`Error::Failed`]).
    #[error(transparent)]
    Engine(#[from] Error),
    /// Every run waits for something the clock cannot bring (a signal, a
    /// registration), no step runs, and the awaited outcome has not come.
    #[error("{what} cannot come: every run waits for something time cannot bring ({run})")]
    Stalled {
        /// What the kit waited for.
        what: String,
        /// Where the awaited run stands.
        run: String,
    },
    /// The engine was still busy (steps running, records being written)
    /// when the wait's real-time limit passed.
    #[error("{what}: still busy after {limit:?} of real time ({busy}; the run: {run})")]
    Timeout {
        /// What the kit waited for.
        what: String,
        /// The limit ([`TestEngineBuilder::wait_limit`]).
        limit: Duration,
        /// What kept the engine busy.
        busy: String,
        /// Where the awaited run stands.
        run: String,
    },
    /// A step mock's value does not encode as JSON.
    #[error("the step mock's value does not encode as JSON: {0}")]
    Mock(String),
    /// Reading the store (to export a journal) failed.
    #[error("reading the store: {0}")]
    Inspect(#[from] crate::inspect::InspectError),
    /// The store cannot be made or read (crash_everywhere's prefixes).
    #[error("{what}: {error}")]
    Storage {
        /// What the kit was doing.
        what: &'static str,
        /// The storage's error.
        error: crate::StorageError,
    },
    /// A run of `crash_everywhere` failed to reach its end.
    #[error("{}: {source}", match crashed_after {
        Some(n) => format!("after a crash that kept {n} of {records} records"),
        None => "the uncrashed run".to_string(),
    })]
    CrashPoint {
        /// The crash point (`None`: the uncrashed run).
        crashed_after: Option<usize>,
        /// The records of the uncrashed run (0 while it runs).
        records: usize,
        /// What went wrong there.
        source: Box<TestError>,
    },
}

/// How a run ended when it did not end `Ok`: its status and its failure.
/// What [`TestEngine::crash_everywhere`] compares a failed run's outcome
/// by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunFailure {
    /// `failed`, `cancelled`, `timed-out`, `terminated`...
    pub status: &'static str,
    /// Its failure.
    pub failure: Failure,
}

impl RunFailure {
    /// The run's failure in `e` ([`Error::Failed`]); `Err(e)` for any
    /// other error.
    pub fn from_error(e: Error) -> Result<Self, Error> {
        match e {
            Error::Failed {
                status, failure, ..
            } => Ok(Self { status, failure }),
            other => Err(other),
        }
    }
}

/// Settings shared by a test engine, its incarnations after crashes, and
/// the engines `crash_everywhere` opens.
#[derive(Clone)]
struct Settings {
    config: Config,
    register: Arc<dyn Fn(&Engine) + Send + Sync>,
    mocks: Arc<Mutex<BTreeMap<String, StepMock>>>,
    start_ms: u64,
    wait_limit: Duration,
    stall_after: Duration,
}

/// Builds a [`TestEngine`] with settings other than the defaults.
pub struct TestEngineBuilder {
    config: Config,
    start_ms: u64,
    wait_limit: Duration,
    stall_after: Duration,
}

impl Default for TestEngineBuilder {
    fn default() -> Self {
        Self {
            config: Config::memory().shards(1),
            start_ms: DEFAULT_START_MS,
            wait_limit: Duration::from_secs(30),
            stall_after: Duration::from_millis(250),
        }
    }
}

impl TestEngineBuilder {
    /// The engine's settings (default: [`Config::memory`] with one
    /// shard). Its storage and clock are the kit's whatever they say.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Sets the shard count (default 1).
    pub fn shards(mut self, n: u32) -> Self {
        self.config = self.config.shards(n);
        self
    }

    /// Where the virtual clock starts, in ms since the Unix epoch
    /// (default [`DEFAULT_START_MS`]).
    pub fn start_ms(mut self, ms: u64) -> Self {
        self.start_ms = ms;
        self
    }

    /// The most real time one wait of the kit ([`TestEngine::result`],
    /// [`TestEngine::advance`], [`TestEngine::settle`]) lets the engine
    /// stay busy before [`TestError::Timeout`] (default 30 s).
    pub fn wait_limit(mut self, d: Duration) -> Self {
        self.wait_limit = d;
        self
    }

    /// How long (real time) the engine must sit idle with no timer set
    /// before an awaited result is [`TestError::Stalled`] (default 250
    /// ms: time for a task of your test to send the signal it waits for).
    pub fn stall_after(mut self, d: Duration) -> Self {
        self.stall_after = d;
        self
    }

    /// Opens the test engine; `register` registers your workflows, now
    /// and after every crash.
    pub async fn open(
        self,
        register: impl Fn(&Engine) + Send + Sync + 'static,
    ) -> Result<TestEngine, TestError> {
        let settings = Arc::new(Settings {
            config: self.config,
            register: Arc::new(register),
            mocks: Arc::default(),
            start_ms: self.start_ms,
            wait_limit: self.wait_limit,
            stall_after: self.stall_after,
        });
        TestEngine::on(settings, MemoryStorage::new()).await
    }
}

/// A real engine on the in-memory backend and a virtual clock, with what
/// tests need around it: waits that move time, crashes, step mocks,
/// crash-everywhere runs and replays (see the [module docs](self)).
pub struct TestEngine {
    engine: Engine,
    memory: MemoryStorage,
    clock: VirtualClock,
    timers: Arc<Timers>,
    settings: Arc<Settings>,
}

impl std::fmt::Debug for TestEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEngine")
            .field("engine", &self.engine)
            .field("now_ms", &self.clock.now_ms())
            .finish_non_exhaustive()
    }
}

/// The engine at rest: every shard idle, nothing in flight.
struct Quiet {
    /// The next time something is due (a timer, a mocked step's delay).
    next_due: Option<u64>,
}

impl TestEngine {
    /// Opens a test engine with the default settings (one shard, the clock
    /// at [`DEFAULT_START_MS`]); `register` registers your workflows, now
    /// and after every crash.
    pub async fn open(
        register: impl Fn(&Engine) + Send + Sync + 'static,
    ) -> Result<Self, TestError> {
        TestEngineBuilder::default().open(register).await
    }

    /// A builder for other settings.
    pub fn builder() -> TestEngineBuilder {
        TestEngineBuilder::default()
    }

    /// A test engine on `memory` with its own clock.
    async fn on(settings: Arc<Settings>, memory: MemoryStorage) -> Result<Self, TestError> {
        let clock = VirtualClock::new(settings.start_ms);
        let timers = Timers::new(&clock);
        let engine = open_engine(&settings, &memory, &clock, &timers).await?;
        Ok(Self {
            engine,
            memory,
            clock,
            timers,
            settings,
        })
    }

    /// The engine (the current one: after [`crash`](Self::crash), a new
    /// one). The whole client API is here; waits that should move time go
    /// through the kit ([`result`](Self::result)).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The virtual clock (moving it by hand wakes timers as
    /// [`advance`](Self::advance) does, without waiting for what follows).
    pub fn clock(&self) -> &VirtualClock {
        &self.clock
    }

    /// Sleeps on this engine's virtual clock for step functions' own code
    /// (a step that heartbeats between two pieces of work): see
    /// [`Sleeper`].
    pub fn sleeper(&self) -> Sleeper {
        Sleeper::new(&self.timers)
    }

    /// The virtual time now, in ms since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The in-memory store under the engine (to hold or fail its flushes:
    /// [`MemoryStorage::hold_flushes`], [`MemoryStorage::fail_next_flush`]).
    pub fn storage(&self) -> &MemoryStorage {
        &self.memory
    }

    /// Steps named `name`, in every run from now on (and after crashes),
    /// do what `mock` says instead of their function. Returns the mock
    /// (clones share its record of calls).
    pub fn mock_step(&self, name: &str, mock: StepMock) -> StepMock {
        self.settings
            .mocks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), mock.clone());
        self.engine
            .registry()
            .set_step_mock(name, mock.wrap(&self.clock, &self.timers));
        mock
    }

    /// Steps named `name` run their own function again (from their next
    /// attempt).
    pub fn unmock_step(&self, name: &str) {
        self.settings
            .mocks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        self.engine.registry().clear_step_mock(name);
    }

    /// Starts `workflow` as `id` with `input` and waits for its result,
    /// moving time as [`result`](Self::result) does.
    pub async fn execute<I: Serialize, O: DeserializeOwned>(
        &self,
        workflow: Workflow<I, O>,
        id: &str,
        input: &I,
    ) -> Result<O, TestError> {
        self.engine.start(workflow, id, input).await?;
        self.result(workflow, id).await
    }

    /// Waits for the result of workflow `id`, moving the clock to the next
    /// timer whenever the engine is idle (every run waits, no step runs,
    /// nothing is being written). A workflow's failure is
    /// [`Error::Failed`] (in [`TestError::Engine`]); a run that cannot end
    /// is [`TestError::Stalled`]. A run not found is looked for again once
    /// the engine has settled: one that another workflow starts (a
    /// parent's child, a queue's item, a schedule's fire) is then found
    /// once what is due now has happened.
    pub async fn result<I, O: DeserializeOwned>(
        &self,
        workflow: Workflow<I, O>,
        id: &str,
    ) -> Result<O, TestError> {
        let what = format!("the result of {id:?}");
        match self
            .until(self.engine.result(workflow, id), &what, id)
            .await?
        {
            Err(Error::NotFound { .. }) => {
                self.settle().await?;
                Ok(self
                    .until(self.engine.result(workflow, id), &what, id)
                    .await??)
            }
            found => Ok(found?),
        }
    }

    /// [`result`](Self::result), with a workflow's failure as a value: `Ok`
    /// of how the run ended.
    pub async fn outcome<I, O: DeserializeOwned>(
        &self,
        workflow: Workflow<I, O>,
        id: &str,
    ) -> Result<Result<O, RunFailure>, TestError> {
        match self.result(workflow, id).await {
            Ok(out) => Ok(Ok(out)),
            Err(TestError::Engine(e)) => Ok(Err(RunFailure::from_error(e)?)),
            Err(e) => Err(e),
        }
    }

    /// Moves the clock `d` forward, stopping at every timer on the way
    /// until what it started is done (so a step retried every minute runs
    /// each attempt in its turn), and returns with the engine idle at the
    /// new time.
    pub async fn advance(&self, d: Duration) -> Result<(), TestError> {
        let deadline = Instant::now() + self.settings.wait_limit;
        let ms = d.as_millis().min(u128::from(u64::MAX)) as u64;
        let target = self.clock.now_ms().saturating_add(ms);
        let what = format!("advancing the clock by {d:?}");
        loop {
            let quiet = self.quiet(deadline, &what, None).await?;
            let now = self.clock.now_ms();
            if now >= target {
                return Ok(());
            }
            let to = quiet
                .next_due
                .map_or(target, |t| t.min(target))
                .max(now + 1);
            self.clock.advance(to - now);
        }
    }

    /// Waits, without moving the clock, until the engine is idle: what
    /// can happen at this time has happened.
    pub async fn settle(&self) -> Result<(), TestError> {
        let deadline = Instant::now() + self.settings.wait_limit;
        self.quiet(deadline, "settling", None).await.map(drop)
    }

    /// Crashes the engine: it stops as a power cut would stop it, the
    /// store keeps only what was durable, and a new engine opens on it
    /// (your workflows registered again, mocks in place; runs carry on
    /// from their journals, steps whose results were not durable run
    /// again). The clock keeps its time. Clones of the old engine and its
    /// run handles find it closed. Flushes held back with
    /// [`MemoryStorage::hold_flushes`] are let go after the crash: what
    /// they held was lost with it.
    pub async fn crash(&mut self) -> Result<(), TestError> {
        // Power first, then the process: a flush held in flight must end
        // (its records lost) before the engine's threads can be joined.
        let restarted = self.memory.crash();
        self.stop().await;
        restarted.hold_flushes(false);
        self.engine = open_engine(&self.settings, &restarted, &self.clock, &self.timers).await?;
        self.memory = restarted;
        Ok(())
    }

    /// The durable journal of workflow `id`'s latest run, as `fusee show
    /// --json` prints it. Reading the store needs the engine stopped: the
    /// engine crashes and opens again, as [`crash`](Self::crash) does
    /// (take it after the run ended and nothing is lost). A finished run
    /// that parked (idle past [`Config::park_after`], 10 s of virtual time
    /// by default) keeps its whole journal for
    /// [`Config::history_retention`] (3 days by default); past that, once
    /// checkpointed, only its `Start` and `Done`: its journal is then
    /// [incomplete](Journal::is_complete), nothing to replay.
    pub async fn export_journal(&mut self, id: &str) -> Result<Journal, TestError> {
        let restarted = self.memory.crash();
        self.stop().await;
        let read = read_journal(&restarted, id, self.engine_shards(), self.clock.now_ms());
        // The read opened the store's shards: start from it afresh.
        let again = restarted.crash();
        self.engine = open_engine(&self.settings, &again, &self.clock, &self.timers).await?;
        self.memory = again;
        read
    }

    /// Replays `journal` with the code registered here for its workflow
    /// type: every operation is answered from the journal, no step runs,
    /// no time passes. Returns how the code ended (or that it was still
    /// running where the journal ends, and what it called next), or
    /// [`ReplayError::Diverged`] naming the first operation where it
    /// departs from the journal.
    pub fn replay(&self, journal: &Journal) -> Result<Replayed, ReplayError> {
        replay::replay(self.engine.registry(), journal)
    }

    /// Closes the engine cleanly.
    pub async fn close(self) -> Result<(), TestError> {
        Ok(self.engine.close().await?)
    }

    fn engine_shards(&self) -> u32 {
        self.settings.config.shards
    }

    /// Stops the engine as a crash would, and ends its mocks' sleeps.
    async fn stop(&self) {
        let engine = self.engine.clone();
        // Joining shard threads blocks.
        let _ = tokio::task::spawn_blocking(move || engine.crash_stop()).await;
        self.timers.new_epoch();
    }

    /// Waits for `fut`, moving the clock to the next thing due whenever
    /// the engine is idle.
    async fn until<T>(
        &self,
        fut: impl Future<Output = T>,
        what: &str,
        id: &str,
    ) -> Result<T, TestError> {
        let deadline = Instant::now() + self.settings.wait_limit;
        let mut fut = pin!(fut);
        let mut stalled: Option<Instant> = None;
        loop {
            let quiet = tokio::select! {
                biased;
                out = &mut fut => return Ok(out),
                q = self.quiet(deadline, what, Some(id)) => q?,
            };
            // The engine may have gone idle by answering: `fut` was polled
            // before the answer and `quiet` looked after it. The answer
            // goes first, or the clock would move past a finished run.
            if let Poll::Ready(out) =
                std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
            {
                return Ok(out);
            }
            match quiet.next_due {
                Some(at) => {
                    stalled = None;
                    let now = self.clock.now_ms();
                    self.clock.advance(at.saturating_sub(now).max(1));
                }
                None => {
                    let since = *stalled.get_or_insert_with(Instant::now);
                    if since.elapsed() >= self.settings.stall_after {
                        return Err(TestError::Stalled {
                            what: what.to_string(),
                            run: self.where_is(id).await,
                        });
                    }
                    tokio::select! {
                        biased;
                        out = &mut fut => return Ok(out),
                        () = tokio::time::sleep(Duration::from_millis(2)) => {}
                    }
                }
            }
        }
    }

    /// Where run `id` stands, in words (for errors).
    async fn where_is(&self, id: &str) -> String {
        match self.engine.describe(id).await {
            Ok(d) => describe(&d),
            Err(e) => e.to_string(),
        }
    }

    /// Waits until the engine is idle (see [`Quiet`]); `Timeout` at
    /// `deadline`.
    async fn quiet(
        &self,
        deadline: Instant,
        what: &str,
        id: Option<&str>,
    ) -> Result<Quiet, TestError> {
        // A round trip to every shard: every input sent before (a tick of
        // the clock, a client's request, a registration) is taken first.
        let _ = self.engine.metrics().await;
        let mut polls = 0u32;
        loop {
            if let Some(q) = self.idle_now() {
                return Ok(q);
            }
            if Instant::now() >= deadline {
                return Err(TestError::Timeout {
                    what: what.to_string(),
                    limit: self.settings.wait_limit,
                    busy: self.busy(),
                    run: match id {
                        Some(id) => self.where_is(id).await,
                        None => "none awaited".into(),
                    },
                });
            }
            polls += 1;
            if polls < 8 {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    /// The engine's state if it is idle now: every shard blocked with
    /// nothing queued, no message between shards in transit, and every
    /// running step task waiting for virtual time. Two snapshots around
    /// the count of sleepers, equal, show no shard moved meanwhile.
    fn idle_now(&self) -> Option<Quiet> {
        let before = self.engine.activity();
        if !before.iter().all(|(a, queued)| a.idle && *queued == 0) {
            return None;
        }
        let (sleeping, sleep_due) = self.timers.pending();
        let after = self.engine.activity();
        if before != after {
            return None;
        }
        let sent: u64 = before.iter().map(|(a, _)| a.sent).sum();
        let received: u64 = before.iter().map(|(a, _)| a.received).sum();
        let steps: u64 = before.iter().map(|(a, _)| a.steps).sum();
        if sent != received || steps != sleeping {
            return None;
        }
        let next_due = before
            .iter()
            .filter_map(|(a, _)| a.next_due)
            .chain(sleep_due)
            .min();
        Some(Quiet { next_due })
    }

    /// What keeps the engine busy, in words (for errors).
    fn busy(&self) -> String {
        let (sleeping, _) = self.timers.pending();
        let mut parts = Vec::new();
        for (shard, (a, queued)) in self.engine.activity().iter().enumerate() {
            let mut s = Vec::new();
            if !a.idle {
                s.push("working".to_string());
            }
            if *queued > 0 {
                s.push(format!("{queued} requests queued"));
            }
            if a.steps > 0 {
                s.push(format!("{} step attempts running", a.steps));
            }
            if !s.is_empty() {
                parts.push(format!("shard {shard}: {}", s.join(", ")));
            }
        }
        if sleeping > 0 {
            parts.push(format!("{sleeping} mocked steps waiting for virtual time"));
        }
        if parts.is_empty() {
            "idle now".into()
        } else {
            parts.join("; ")
        }
    }
}

/// Opens an engine on `memory` at `clock`'s time: the mocks installed
/// first (a recovered run's steps find them), then the workflows.
async fn open_engine(
    settings: &Settings,
    memory: &MemoryStorage,
    clock: &VirtualClock,
    timers: &Arc<Timers>,
) -> Result<Engine, TestError> {
    let config = settings.config.clone().clock(Clock::Virtual(clock.clone()));
    let engine = Engine::open_on(config, AnyStorage::Memory(memory.clone())).await?;
    let mocks = settings
        .mocks
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for (name, mock) in &mocks {
        engine
            .registry()
            .set_step_mock(name, mock.wrap(clock, timers));
    }
    (settings.register)(&engine);
    Ok(engine)
}

/// Workflow `id`'s journal in `storage` (no engine on it), as the CLI
/// reads it.
fn read_journal(
    storage: &MemoryStorage,
    id: &str,
    shards: u32,
    now_ms: u64,
) -> Result<Journal, TestError> {
    let shard = fusee_core::shard::shard_of(id, shards);
    let mut view = crate::inspect::rebuild(storage, shard, now_ms, &mut |_| {})?;
    let run = view
        .find(id)?
        .ok_or_else(|| crate::inspect::InspectError::NoSuchRun(id.to_string()))?;
    let journal = view.journal(run)?;
    let document = crate::inspect::journal::to_json(&journal);
    Ok(Journal::exported(
        journal.records,
        journal.complete,
        document,
    ))
}

/// A run's description in a line.
fn describe(d: &Description) -> String {
    let mut s = format!("{} (workflow {}) is {:?}", d.id, d.workflow, d.status);
    if let Some(step) = &d.step {
        s.push_str(&format!(
            ", at step {:?} attempt {}",
            step.name, step.attempt
        ));
    }
    if let Some(why) = &d.stopped_because {
        s.push_str(&format!(": {why}"));
    }
    s
}

/// The start policy `crash_everywhere` uses: a start whose
/// acknowledgement a crash took is sent again and finds the run.
const ATTACH: IdPolicy = IdPolicy::Attach;
