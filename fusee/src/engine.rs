//! [`Engine`]: what an embedder opens, registers workflows with, and calls.
//!
//! ```
//! use fusee::{Config, Ctx, Engine, Failure, Workflow};
//!
//! const GREET: Workflow<String, String> = Workflow::new("greet");
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), fusee::Error> {
//! let engine = Engine::open(Config::memory()).await?;
//! engine.register(GREET, |ctx: Ctx, name: String| async move {
//!     let greeting = ctx
//!         .step("compose", move |_| {
//!             let name = name.clone();
//!             async move { Ok(format!("hello, {name}")) }
//!         })
//!         .await?;
//!     Ok::<_, Failure>(greeting)
//! });
//! let out = engine.execute(GREET, "greet-1", &"ada".to_string()).await?;
//! assert_eq!(out, "hello, ada");
//! engine.close().await?;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fusee_core::record::Status;
use fusee_core::shard::shard_of;
use fusee_storage::Storage;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

use crate::client::{Description, IdPolicy, RunRef, RunResult, StartOptions};
use crate::config::{Config, open_storage};
use crate::ctx::Ctx;
use crate::ctx::Registry;
use crate::error::{Error, Result};
use crate::metrics::ShardMetrics;
use crate::ownership::{Ownership, ShardStatus, Shards};
use crate::runtime::driver;
use crate::runtime::{Input, LoopConfig};
use crate::telemetry::Telemetry;
use crate::workflow::{Failure, Signal, Workflow, decode, encode};
use crate::{AnyStorage, Metrics};

/// A started run, typed by its workflow's output.
#[derive(Debug)]
pub struct RunHandle<O> {
    engine: Engine,
    run: RunRef,
    _type: PhantomData<fn() -> O>,
}

impl<O: DeserializeOwned> RunHandle<O> {
    /// The run.
    pub fn run(&self) -> &RunRef {
        &self.run
    }

    /// Waits for the run's result.
    pub async fn result(&self) -> Result<O> {
        self.engine.result_of(&self.run.id).await
    }
}

/// The engine: shards over one storage, and the client API. Cheap to clone;
/// every clone is the same engine.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("backend", &self.inner.config.storage.backend)
            .field("shards", &self.inner.shards.count())
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: Config,
    registry: Registry,
    storage: Arc<AnyStorage>,
    shards: Arc<Shards>,
    telemetry: Option<Arc<Telemetry>>,
    closed: AtomicBool,
    /// Held while a backup runs (`Engine::backup`: one at a time).
    backup: std::sync::Mutex<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shards.stop_keeper();
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        // Dropped without close: stop as a crash would (what was written
        // stays in the page cache; nothing more is made durable).
        self.shards.crash_all();
    }
}

impl Engine {
    /// Opens the engine: the storage `config` names, every shard recovered
    /// (runs whose code is registered later start then). Must be called
    /// inside a tokio runtime: steps run as its tasks.
    ///
    /// Under [`Ownership::Lease`] only the shards this process can take
    /// open here (the others are taken later, in the background; see
    /// [`Ownership`]); a shard another process holds is no error then.
    pub async fn open(config: Config) -> Result<Engine> {
        config.check().map_err(Error::Config)?;
        config.ownership.check(config.shards)?;
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || Self::open_blocking(config, runtime))
            .await
            .map_err(|e| Error::Config(format!("the opening task failed: {e}")))?
    }

    /// Opens the engine on `storage`, a storage opened beforehand (with
    /// options [`Config::storage`] cannot express, or a
    /// [`MemoryStorage`](crate::storage::MemoryStorage) a test keeps a
    /// handle on to crash it); `config.storage` is not used.
    pub async fn open_on(config: Config, storage: AnyStorage) -> Result<Engine> {
        config.check().map_err(Error::Config)?;
        config.ownership.check(config.shards)?;
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || Self::start_shards(config, storage, runtime))
            .await
            .map_err(|e| Error::Config(format!("the opening task failed: {e}")))?
    }

    fn open_blocking(config: Config, runtime: tokio::runtime::Handle) -> Result<Engine> {
        let storage = open_storage(&config.storage)?;
        Self::start_shards(config, storage, runtime)
    }

    /// Whether a store holding only shards `0..n` (fewer than configured)
    /// is one whose first open was interrupted while it created its
    /// shards: every shard it holds never recorded anything (no log
    /// record, no commit, no frame). The first open creates the shards in
    /// order before any client call can reach one, so a crash (a SIGKILL
    /// of the opening process) leaves exactly that, and the open goes on
    /// to create the rest. A shard that holds anything means the store
    /// was whole once: the missing ones are damage, refused.
    ///
    /// A clean close commits a checkpoint in every shard, even an empty
    /// one, so a closed store is never taken for an interrupted creation.
    /// What this cannot tell from one: a store that never closed cleanly
    /// and never recorded anything (a crash right after its first open
    /// made every shard), or whose only records were in trailing shards
    /// that were then deleted.
    fn interrupted_creation(storage: &AnyStorage, n: u32) -> Result<bool> {
        use fusee_storage::LogStore;
        for shard in 0..n {
            let parts = storage
                .open_shard(shard)
                .map_err(|error| Error::Storage { shard, error })?;
            let pristine = parts.recovered.checkpoint.is_none()
                && parts.recovered.store_position == 0
                && parts.log.last_lsn() == 0;
            if !pristine {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn start_shards(
        config: Config,
        storage: AnyStorage,
        runtime: tokio::runtime::Handle,
    ) -> Result<Engine> {
        let storage = Arc::new(storage);
        let existing = storage
            .shards()
            .map_err(|error| Error::Storage { shard: 0, error })?;
        let leased = matches!(config.ownership, Ownership::Lease { .. });
        if !existing.is_empty() {
            let n = existing.len() as u32;
            let contiguous = existing.iter().enumerate().all(|(i, &s)| i as u32 == s);
            // Under leases the store's shards are made by whichever process
            // opens each first: a store some of whose shards no process
            // opened yet is no error, one beyond the count is.
            let fits = if leased {
                existing.iter().all(|&s| s < config.shards)
            } else {
                contiguous
                    && (n == config.shards
                        || (n < config.shards && Self::interrupted_creation(&storage, n)?))
            };
            if !fits {
                return Err(Error::Config(format!(
                    "the store holds shards {existing:?}; the configuration asks for {}",
                    config.shards
                )));
            }
        }
        let registry = Registry::default();
        // Held back until `check_replay` runs (`Config::replay_check`).
        registry.hold_back(config.replay_check);
        let loop_config = LoopConfig {
            shards: config.shards,
            max_payload: config.max_payload,
            max_stream_chunks: config.max_stream_chunks,
            checkpoint_bytes: config.checkpoint_bytes,
            checkpoint_interval_ms: config.checkpoint_interval.as_millis() as u64,
            retention_ms: config.retention.as_millis() as u64,
            history_ms: config.history_retention.as_millis() as u64,
            history_max_bytes: config.history_max_bytes,
            stream_apart_bytes: config.stream_apart_bytes,
            stream_ms: config
                .stream_retention
                .unwrap_or(config.retention)
                .min(config.retention)
                .as_millis() as u64,
            park_after_ms: config.park_after.as_millis() as u64,
            doze_after_ms: config.doze_after.as_millis() as u64,
            compact_after_bytes: config.compact_after_bytes,
            seal_idle_ms: config.seal_after_idle.as_millis() as u64,
            seal_interval_ms: config.seal_interval.as_millis() as u64,
            stopwatch: Some(std::time::Instant::now),
            #[cfg(feature = "testing")]
            sabotage: None,
        };
        #[cfg(not(feature = "otel"))]
        let telemetry = config.metrics.then(|| Arc::new(Telemetry::default()));
        // A tracer needs the record notes: it turns them on, figures too.
        #[cfg(feature = "otel")]
        let telemetry = (config.metrics || config.tracer.is_some()).then(|| {
            let t = Telemetry::default();
            Arc::new(match &config.tracer {
                Some(p) => t.with_traces(crate::otel::Traces::new(p, config.clock.clone())),
                None => t,
            })
        });
        let context = driver::Context {
            telemetry: telemetry.clone(),
            storage: Arc::clone(&storage),
            config: loop_config,
            registry: registry.clone(),
            clock: config.clock.clone(),
            runtime,
            peers: driver::Peers::new(config.shards),
            inbox_poll: config
                .storage
                .postgres
                .inbox_poll
                .unwrap_or(crate::config::DEFAULT_INBOX_POLL),
        };
        let shards = Shards::open(context, config.shards, &config.ownership, config.lease())?;
        let engine = Engine {
            inner: Arc::new(Inner {
                config,
                registry,
                storage,
                shards,
                telemetry,
                closed: AtomicBool::new(false),
                backup: std::sync::Mutex::new(()),
            }),
        };
        // Runs' code reaches its engine (flow control, and a stream's
        // sender moved into a step) through the registry's host; no code
        // runs before a registration, which comes after this.
        engine.host_engine();
        Ok(engine)
    }

    /// Registers `f` as the code of `workflow`. Runs of that type
    /// recovered at open, waiting for their code, start now.
    ///
    /// `f` is called on the run's shard thread with the run's [`Ctx`] and
    /// input, once per run and again (replaying) after every restart; its
    /// future need not be `Send`.
    ///
    /// # Panics
    ///
    /// If a workflow of this name is registered in this engine already
    /// (whatever its types): a second registration would silently replace
    /// the code runs replay against, so it is a bug at start-up, as a
    /// duplicate route is in a web router. [`Engine::try_register`] returns
    /// the error instead. An engine opened again (after a restart, on the
    /// same store) starts with no registrations.
    #[track_caller]
    pub fn register<I, O, F, Fut>(&self, workflow: Workflow<I, O>, f: F)
    where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        F: Fn(Ctx, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, Failure>> + 'static,
    {
        if let Err(e) = self.try_register(workflow, f) {
            panic!("{e}");
        }
    }

    /// [`Engine::register`], with a name registered before refused as
    /// [`Error::AlreadyRegistered`] (the first registration stands) rather
    /// than a panic.
    pub fn try_register<I, O, F, Fut>(&self, workflow: Workflow<I, O>, f: F) -> Result<()>
    where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        F: Fn(Ctx, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, Failure>> + 'static,
    {
        self.try_register_version(workflow, 0, f)
    }

    /// Registers `f` as version `version` of `workflow`, beside the
    /// versions registered before: several implementations of one type
    /// side by side, so a code change that would break running runs ships
    /// as a new version instead.
    ///
    /// - A new run takes the newest version registered (the highest
    ///   number) unless its start names one ([`StartOptions::version`]);
    ///   its `Start` records it.
    /// - A run keeps the version it started with, across restarts: its
    ///   code is always that version's. A run whose version is not
    ///   registered here waits for it, as for a type not registered.
    /// - Continue-as-new moves to the newest version registered; a reset
    ///   keeps the run's version (it replays the same code).
    /// - [`Engine::register`] registers version 0, the version every run
    ///   started before versions were used recorded.
    ///
    /// Choose numbers that grow, for example a date (`20261204`).
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, StartOptions, Workflow};
    /// const GREET: Workflow<String, String> = Workflow::new("greet");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// let engine = Engine::open(Config::memory()).await?;
    /// engine.register(GREET, |_: Ctx, name: String| async move {
    ///     Ok::<_, Failure>(format!("hello {name}"))
    /// });
    /// engine.register_version(GREET, 2, |_: Ctx, name: String| async move {
    ///     Ok::<_, Failure>(format!("hello, {name}!"))
    /// });
    /// assert_eq!(engine.execute(GREET, "a", &"Ada".into()).await?, "hello, Ada!");
    /// let old = engine
    ///     .start_with_options(GREET, "b", &"Bob".into(), StartOptions::new().version(0))
    ///     .await?;
    /// assert_eq!(old.result().await?, "hello Bob");
    /// assert_eq!(engine.describe("b").await?.version, 0);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If this version of `workflow` is registered already, as
    /// [`Engine::register`]; [`Engine::try_register_version`] returns the
    /// error instead.
    #[track_caller]
    pub fn register_version<I, O, F, Fut>(&self, workflow: Workflow<I, O>, version: u32, f: F)
    where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        F: Fn(Ctx, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, Failure>> + 'static,
    {
        if let Err(e) = self.try_register_version(workflow, version, f) {
            panic!("{e}");
        }
    }

    /// [`Engine::register_version`], with a version registered before
    /// refused as [`Error::AlreadyRegistered`] rather than a panic.
    pub fn try_register_version<I, O, F, Fut>(
        &self,
        workflow: Workflow<I, O>,
        version: u32,
        f: F,
    ) -> Result<()>
    where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        F: Fn(Ctx, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, Failure>> + 'static,
    {
        self.inner.registry.register_version(workflow, version, f)?;
        self.start_waiting_code();
        Ok(())
    }

    /// Starts `workflow` as `id` with `input` (a new ID only: see
    /// [`Engine::start_with`]). Returns once the start is durable.
    pub async fn start<I: Serialize, O>(
        &self,
        workflow: Workflow<I, O>,
        id: &str,
        input: &I,
    ) -> Result<RunHandle<O>> {
        self.start_with(workflow, id, input, IdPolicy::NewOnly)
            .await
    }

    /// Starts `workflow` as `id`, or attaches to its run, as `policy` says.
    /// When `workflow` is registered in this engine, `input` must decode as
    /// its registered input type ([`Error::Codec`] otherwise, recording
    /// nothing: the ID stays free), whatever type the `Workflow` constant
    /// the caller holds says.
    pub async fn start_with<I: Serialize, O>(
        &self,
        workflow: Workflow<I, O>,
        id: &str,
        input: &I,
        policy: IdPolicy,
    ) -> Result<RunHandle<O>> {
        self.start_with_options(workflow, id, input, StartOptions::new().policy(policy))
            .await
    }

    /// [`Engine::start_with`] with every start option: the ID policy and
    /// the trace context to record in the run's `Start` (see
    /// [`StartOptions`]).
    pub async fn start_with_options<I: Serialize, O>(
        &self,
        workflow: Workflow<I, O>,
        id: &str,
        input: &I,
        options: StartOptions,
    ) -> Result<RunHandle<O>> {
        check_workflow_id(id)?;
        let input = encode(input).map_err(|e| Error::codec_for("workflow input", id, e))?;
        if let Some(a) = options.attributes_of() {
            a.check()?;
        }
        self.check_input(workflow.name(), options.version_of(), &input)?;
        let run = self
            .request(id, |reply| Input::Start {
                wtype: workflow.name().to_string(),
                id: id.to_string(),
                input,
                policy: options.policy_of(),
                trace: options.trace_of().or_else(crate::trace::current),
                version: options.version_of(),
                attrs: options.attributes_of().cloned(),
                reply,
            })
            .await?;
        Ok(RunHandle {
            engine: self.clone(),
            run,
            _type: PhantomData,
        })
    }

    /// Starts `workflow` as `id` and waits for its result (as
    /// [`Engine::result`] does: a run whose code stops is an error, not a
    /// wait for ever).
    pub async fn execute<I: Serialize, O: DeserializeOwned>(
        &self,
        workflow: Workflow<I, O>,
        id: &str,
        input: &I,
    ) -> Result<O> {
        self.start(workflow, id, input).await?.result().await
    }

    /// Sends `signal` with `value` to workflow `id`. Returns once the signal
    /// is durable in the workflow's journal.
    /// Without a key a repeated call records the signal twice: see
    /// [`Engine::signal_once`].
    pub async fn signal<T: Serialize>(&self, id: &str, signal: Signal<T>, value: &T) -> Result<()> {
        let payload = encode(value).map_err(|e| Error::codec_for("signal", id, e))?;
        self.signal_bytes(id, signal.name(), payload, 0).await
    }

    /// Sends `signal` with `value` to workflow `id` under the caller's
    /// deduplication `key`: the run records the first call with that key
    /// and acknowledges every later one without recording it again, so a
    /// client retrying after a lost reply delivers once. Returns once the
    /// signal is durable. Keys are remembered per run (a new run of the
    /// ID, after continue-as-new or a reset, has none); a retry that finds
    /// the run finished is acknowledged while the run is in memory, and is
    /// [`Error::Finished`] once it has parked. An empty key is
    /// [`Error::BadSignalKey`].
    pub async fn signal_once<T: Serialize>(
        &self,
        id: &str,
        signal: Signal<T>,
        key: &str,
        value: &T,
    ) -> Result<()> {
        let dedup = signal_dedup(id, key)?;
        let payload = encode(value).map_err(|e| Error::codec_for("signal", id, e))?;
        self.signal_bytes(id, signal.name(), payload, dedup).await
    }

    /// The one way a client signal reaches its shard (typed, JSON or keyed).
    pub(crate) async fn signal_bytes(
        &self,
        id: &str,
        name: &str,
        payload: Vec<u8>,
        dedup: u64,
    ) -> Result<()> {
        self.request(id, |reply| Input::Signal {
            id: id.to_string(),
            name: name.to_string(),
            payload,
            dedup,
            reply,
        })
        .await
    }

    /// Asks workflow `id` to cancel: a cooperative cancel, which the code
    /// may swallow. Its pending operations end with `cancelled` errors,
    /// which the code may catch to clean up (operations it calls after
    /// run normally), and its live steps are told
    /// ([`StepContext::cancelled`](crate::StepContext::cancelled)); the run
    /// ends as the code decides: as cancelled if it returns the error.
    /// Code that catches and ignores it, or awaits nothing of the engine
    /// (a bug, but it happens), never ends by this: for a cancel it cannot
    /// swallow, [`cancel_with_grace`](Self::cancel_with_grace).
    pub async fn cancel(&self, id: &str, reason: &str) -> Result<()> {
        self.cancel_as(id, reason, None).await
    }

    /// Cancels workflow `id` as [`cancel`](Self::cancel) does, and
    /// terminates its run with `reason` (as [`terminate`](Self::terminate),
    /// status terminated) if it has not ended `grace` after: a cancel the
    /// code cannot swallow, which still lets it clean up for `grace`. The
    /// grace is recorded with the cancel, so it holds across a crash or a
    /// restart (counted from the cancel, by the engine's clock). A second
    /// grace for the same run keeps the earlier end. No step attempt starts
    /// after the grace; one running then that does not listen to
    /// [`StepContext::cancelled`](crate::StepContext::cancelled) and has no
    /// time limit runs on until it returns (its result is dropped). Children
    /// the run's close cancels ([`ParentClose::Cancel`](crate::ParentClose::Cancel))
    /// get the same grace from their own cancel; a reset's new run does
    /// not inherit it. Also in the server's API (`grace_ms` on the cancel
    /// route and bulk cancel), `Client::cancel_with_grace` and
    /// `fusee cancel --grace`.
    pub async fn cancel_with_grace(
        &self,
        id: &str,
        reason: &str,
        grace: std::time::Duration,
    ) -> Result<()> {
        self.cancel_as(id, reason, Some(grace)).await
    }

    /// The one way a cancel reaches its shard: cooperative (`grace` none)
    /// or with a grace (see [`cancel_with_grace`](Self::cancel_with_grace)).
    pub(crate) async fn cancel_as(
        &self,
        id: &str,
        reason: &str,
        grace: Option<std::time::Duration>,
    ) -> Result<()> {
        let grace_ms = grace.map(|g| g.as_millis().min(u128::from(u64::MAX)) as u64);
        self.request(id, |reply| Input::Cancel {
            id: id.to_string(),
            reason: reason.to_string(),
            grace_ms,
            reply,
        })
        .await
    }

    /// Runs `update` with `input` on workflow `id` and returns its
    /// handler's result once the result is durable. The handler runs as
    /// part of the run's code, recorded (an `Update`, then an `UpdateDone`):
    /// after a crash it replays like the rest. An unknown handler is
    /// [`Error::UnknownUpdate`]; a validator's refusal is
    /// [`Error::Rejected`]; both record nothing. While the run's code is
    /// stopped ([`RunStatus::Stopped`](crate::RunStatus::Stopped)), every
    /// update call (this, [`update_once`](Self::update_once),
    /// [`update_with_start`](Self::update_with_start)) is its
    /// [`Error::Determinism`] (or [`Error::Stopped`]) at once, recording
    /// nothing, as [`result`](Self::result) is; callers already waiting get
    /// it when the run stops.
    pub async fn update<I: Serialize, O: DeserializeOwned>(
        &self,
        id: &str,
        update: crate::Update<I, O>,
        input: &I,
    ) -> Result<O> {
        let update_id = uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes())
            .into_uuid()
            .to_string();
        self.update_as(id, update, update_id, input).await
    }

    /// Runs `update` as [`update`](Self::update) does, at most once per
    /// `key` for the run: a call repeated with the same key (after a lost
    /// reply, a timeout, a crash of either side) records nothing and
    /// returns the first call's result, waiting for it if its handler
    /// still runs. The key names the call, whatever its handler or
    /// argument, for the run that took it. It holds while that run runs
    /// (across restarts) and after it finished until the engine lets the
    /// finished run go from memory (parked, or not loaded again after a
    /// restart); then a repeat is [`Error::Finished`] (the run's result
    /// shows whether the update was taken). After a continue-as-new the
    /// new run takes a repeat as a new update. An empty key is
    /// [`Error::BadUpdateKey`].
    ///
    /// ```
    /// # async fn demo(engine: fusee::Engine) -> fusee::Result<()> {
    /// use fusee::Update;
    /// const ADD: Update<String, usize> = Update::new("add");
    /// // The request's own ID as the key: a retried request adds once.
    /// let items = engine
    ///     .update_once("cart-7", ADD, "request-81f3", &"tea".to_string())
    ///     .await?;
    /// # let _ = items; Ok(()) }
    /// ```
    pub async fn update_once<I: Serialize, O: DeserializeOwned>(
        &self,
        id: &str,
        update: crate::Update<I, O>,
        key: &str,
        input: &I,
    ) -> Result<O> {
        self.update_as(id, update, keyed_update_id(id, key)?, input)
            .await
    }

    /// Runs `update` on `id` under update ID `update_id`.
    async fn update_as<I: Serialize, O: DeserializeOwned>(
        &self,
        id: &str,
        update: crate::Update<I, O>,
        update_id: String,
        input: &I,
    ) -> Result<O> {
        let payload = encode(input).map_err(|e| Error::codec_for("update argument", id, e))?;
        let r = self
            .request(id, |reply| Input::Update {
                id: id.to_string(),
                name: update.name().to_string(),
                update_id,
                payload,
                reply,
            })
            .await?;
        update_result(id, r)
    }

    /// Runs `update` with `arg` on workflow `id`, first starting `workflow`
    /// as `id` with `input` if it has no run, in one record: the update is
    /// then the new run's first delivery (its validator does not run, as no
    /// code has run to register it; an unknown handler fails the update).
    /// A running workflow takes the update as [`update`](Self::update)
    /// would; a finished one is [`Error::Finished`]. Lazily created entity
    /// workflows (a cart, an account) use it for their first call.
    ///
    /// ```
    /// # async fn demo(engine: fusee::Engine) -> fusee::Result<()> {
    /// use fusee::{Update, Workflow};
    /// const CART: Workflow<(), Vec<String>> = Workflow::new("cart");
    /// const ADD: Update<String, usize> = Update::new("add");
    /// // Starts cart-7 if needed and adds the item, durably, in one call.
    /// let items = engine
    ///     .update_with_start(CART, "cart-7", &(), ADD, &"tea".to_string())
    ///     .await?;
    /// # let _ = items; Ok(()) }
    /// ```
    pub async fn update_with_start<I: Serialize, O, UI: Serialize, UO: DeserializeOwned>(
        &self,
        workflow: Workflow<I, O>,
        id: &str,
        input: &I,
        update: crate::Update<UI, UO>,
        arg: &UI,
    ) -> Result<UO> {
        let input = encode(input).map_err(|e| Error::codec_for("workflow input", id, e))?;
        self.check_input(workflow.name(), None, &input)?;
        let payload = encode(arg).map_err(|e| Error::codec_for("update argument", id, e))?;
        let update_id = uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes())
            .into_uuid()
            .to_string();
        let r = self
            .request(id, |reply| Input::UpdateWithStart {
                wtype: workflow.name().to_string(),
                id: id.to_string(),
                input,
                name: update.name().to_string(),
                update_id,
                payload,
                reply,
            })
            .await?;
        update_result(id, r)
    }

    /// Asks workflow `id` `query` with `input`: its handler's answer over
    /// the run's current state, recording nothing (a parked run is loaded
    /// to answer). An unknown handler is [`Error::UnknownQuery`]. A
    /// finished run is answered as of its end: its journal, kept for
    /// [`Config::history_retention`](crate::Config::history_retention)
    /// after it finished, is replayed with the registered code (no step
    /// runs, no handler of an update runs anew, nothing is recorded); once
    /// only its `Start` and `Done` are kept, the query is
    /// [`Error::HistoryGone`], saying since when. A handler that fails (or
    /// panics), or a finished run that cannot be replayed, is
    /// [`Error::QueryFailed`]: the run is as it was.
    pub async fn query<I: Serialize, O: DeserializeOwned>(
        &self,
        id: &str,
        query: crate::Query<I, O>,
        input: &I,
    ) -> Result<O> {
        let payload = encode(input).map_err(|e| Error::codec_for("query argument", id, e))?;
        let answer = self
            .request(id, |reply| Input::Query {
                id: id.to_string(),
                name: query.name().to_string(),
                payload,
                reply,
            })
            .await?;
        decode(&answer).map_err(|e| Error::codec_for("query answer", id, e))
    }

    /// Ends workflow `id`'s run at once, as terminated with `reason`: its
    /// code runs no further, its children follow their parent close
    /// policy.
    pub async fn terminate(&self, id: &str, reason: &str) -> Result<()> {
        self.request(id, |reply| Input::Terminate {
            id: id.to_string(),
            reason: reason.to_string(),
            reply,
        })
        .await
    }

    /// Waits for the result of workflow `id`'s latest run. A run whose
    /// code stopped ([`RunStatus::Stopped`](crate::RunStatus::Stopped)) never ends by itself: while it
    /// is stopped, waiting on it is [`Error::Determinism`] (or
    /// [`Error::Stopped`]) at once; once an engine with fixed code replays
    /// it, waiting ends with its result again.
    pub async fn result<I, O: DeserializeOwned>(
        &self,
        workflow: Workflow<I, O>,
        id: &str,
    ) -> Result<O> {
        let _ = workflow;
        self.result_of(id).await
    }

    pub(crate) async fn result_of<O: DeserializeOwned>(&self, id: &str) -> Result<O> {
        let r = self
            .request(id, |reply| Input::Result {
                id: id.to_string(),
                reply,
            })
            .await?;
        match r.status {
            Status::Ok => {
                decode(&r.payload).map_err(|e| Error::codec_for("workflow result", id, e))
            }
            status => Err(Error::Failed {
                id: id.to_string(),
                status: status.as_str(),
                failure: decode::<Failure>(&r.payload).unwrap_or_else(|_| {
                    Failure::new(String::from_utf8_lossy(&r.payload).into_owned())
                }),
            }),
        }
    }

    /// Where workflow `id` stands.
    pub async fn describe(&self, id: &str) -> Result<Description> {
        self.request(id, |reply| Input::Describe {
            id: id.to_string(),
            reply,
        })
        .await
    }

    /// The engine's figures, summed over the shards it owns (all of them
    /// but under [`Ownership::Lease`]; [`Engine::owned_shards`] says which).
    pub async fn metrics(&self) -> Metrics {
        let mut total = Metrics::default();
        for (_, m) in self.per_shard_metrics().await {
            total.merge(&m);
        }
        total
    }

    /// Each owned shard's figures, in shard order: what [`Engine::metrics`]
    /// sums, the telemetry renders and `shard_metrics` answers.
    pub(crate) async fn per_shard_metrics(&self) -> Vec<(u32, ShardMetrics)> {
        let mut replies = Vec::new();
        self.inner.shards.each_owned(|shard, h| {
            let (tx, rx) = oneshot::channel();
            if h.tx.send(Input::Metrics { reply: tx }).is_ok() {
                replies.push((shard, rx));
            }
        });
        let mut out = Vec::with_capacity(replies.len());
        for (shard, rx) in replies {
            if let Ok(m) = rx.await {
                out.push((shard, m));
            }
        }
        out
    }

    /// The registered workflow types (and step mocks): the test kit's
    /// replay and the replay check read them.
    pub(crate) fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Tells every shard to start the code of runs waiting for it (a type
    /// was registered, or the replay check let starts go).
    pub(crate) fn start_waiting_code(&self) {
        self.inner.shards.each_owned(|_, h| {
            let _ = h.tx.send(Input::Registered);
        });
    }

    /// The engine's clock now (ms since the Unix epoch): the clock its
    /// records' times are stamped with (virtual under the test kit), so
    /// "running for" a time is measured against it.
    pub fn now_ms(&self) -> u64 {
        self.inner.config.clock.now_ms()
    }

    /// The shards this engine owns now, in order: every shard but under
    /// [`Ownership::Lease`], where a call for another is
    /// [`Error::NotOwner`].
    pub fn owned_shards(&self) -> Vec<u32> {
        self.inner.shards.owned()
    }

    /// Where each shard stands in this engine: owned or not, how often
    /// opened and lost, and why it is not owned.
    pub fn shard_status(&self) -> Vec<ShardStatus> {
        self.inner.shards.status()
    }

    /// Writes a consistent copy of the store into the new directory `dest`
    /// while the engine keeps running (refused if `dest` exists and is not
    /// empty); restoring is opening `dest` with the same backend and shard
    /// count (`Config::file(dest)` for the file backend and for an
    /// in-memory engine, whose copy is a file store). Every owned shard is
    /// paused at one cut (flushed, checkpointed, held) while it is copied;
    /// the report says how long. Design and guarantees: [`crate::backup`].
    /// A PostgreSQL store is refused ([`crate::BackupError::Postgres`]):
    /// back it up with the server's tools.
    pub async fn backup(&self, dest: impl AsRef<std::path::Path>) -> Result<crate::BackupReport> {
        self.backup_with(dest, Box::new(|_| std::ops::ControlFlow::Continue(())))
            .await
    }

    /// [`Engine::backup`], telling `progress` each step (which may stop the
    /// backup, leaving its destination refused at open).
    pub async fn backup_with(
        &self,
        dest: impl AsRef<std::path::Path>,
        progress: crate::backup::BackupProgress,
    ) -> Result<crate::BackupReport> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let dest = dest.as_ref().to_path_buf();
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            // One at a time: a shard holds one backup's hold.
            let Ok(_one) = inner.backup.try_lock() else {
                return Err(crate::BackupError::Busy.into());
            };
            let session = crate::backup::Session::start(
                &inner.storage,
                &inner.config.storage,
                &dest,
                progress,
            )?;
            let owned = inner.shards.owned();
            let mut holds = session.holds(&owned);
            inner.shards.each_owned(|shard, h| {
                if let Some(i) = holds.iter().position(|(s, _)| *s == shard) {
                    let (_, hold) = holds.swap_remove(i);
                    // Not sent: the hold comes back and is dropped, which
                    // gives the backup up.
                    let _ = h.tx.send(Input::Backup { hold });
                }
            });
            drop(holds);
            Ok(session.finish()?)
        })
        .await
        .map_err(|e| Error::Config(format!("the backup task failed: {e}")))?
    }

    /// A deliberately inconsistent backup, for the tests that show the
    /// barrier of [`Engine::backup`] is needed (feature `testing`): each
    /// shard is cut, copied and let go alone, one after another with `gap`
    /// between them, so messages between shards may fall between two
    /// copies.
    #[cfg(feature = "testing")]
    pub async fn backup_without_barrier(
        &self,
        dest: impl AsRef<std::path::Path>,
        gap: std::time::Duration,
    ) -> Result<crate::BackupReport> {
        let dest = dest.as_ref().to_path_buf();
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let Ok(_one) = inner.backup.try_lock() else {
                return Err(crate::BackupError::Busy.into());
            };
            let mut session = crate::backup::Session::start(
                &inner.storage,
                &inner.config.storage,
                &dest,
                Box::new(|_| std::ops::ControlFlow::Continue(())),
            )?;
            for shard in inner.shards.owned() {
                let mut hold = Some(session.hold_alone(shard));
                inner.shards.each_owned(|s, h| {
                    if s == shard
                        && let Some(hold) = hold.take()
                    {
                        let _ = h.tx.send(Input::Backup { hold });
                    }
                });
                drop(hold);
                session.wait_one();
                std::thread::sleep(gap);
            }
            Ok(session.finish()?)
        })
        .await
        .map_err(|e| Error::Config(format!("the backup task failed: {e}")))?
    }

    /// Closes the engine: stops taking requests, lets runs reach a quiescent
    /// point, flushes, checkpoints every shard and closes the storage, so
    /// the next open replays nothing. Steps still running are abandoned;
    /// they run again after the next open.
    pub async fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // No shard is taken any more (one being opened finishes opening
        // and is closed with the others).
        let shards = Arc::clone(&self.inner.shards);
        let _ = tokio::task::spawn_blocking(move || shards.stop_keeper()).await;
        let mut first_err = None;
        let mut replies = Vec::new();
        self.inner.shards.each_owned(|_, h| {
            let (tx, rx) = oneshot::channel();
            if h.tx.send(Input::Close { reply: tx }).is_ok() {
                replies.push(rx);
            }
        });
        for rx in replies {
            match rx.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(Error::Closed);
                }
            }
        }
        let inner = Arc::clone(&self.inner);
        let joined = tokio::task::spawn_blocking(move || {
            for t in inner.shards.take_threads() {
                let _ = t.join();
            }
            inner.storage.close()
        })
        .await;
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                first_err.get_or_insert(Error::Storage { shard: 0, error });
            }
            Err(e) => {
                first_err.get_or_insert(Error::Config(format!("closing failed: {e}")));
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// [`Error::Codec`] if `input` does not decode as the input type
    /// `wtype` is registered with here (at `version`, or its newest), so a
    /// start that would only fail records nothing and leaves its ID free.
    /// A type not registered here (its code comes later, or another process
    /// runs it) is not checked.
    pub(crate) fn check_input(
        &self,
        wtype: &str,
        version: Option<u32>,
        input: &[u8],
    ) -> Result<()> {
        match self.inner.registry.check_input(wtype, version, input) {
            Some(Err(e)) => Err(Error::Codec {
                what: "workflow input",
                id: None,
                detail: format!("it does not decode as {wtype:?}'s registered input type: {e}"),
            }),
            Some(Ok(())) | None => Ok(()),
        }
    }

    /// Sends a request to `id`'s shard and waits for its answer.
    pub(crate) async fn request<T>(
        &self,
        id: &str,
        make: impl FnOnce(oneshot::Sender<Result<T>>) -> Input,
    ) -> Result<T> {
        let shard = shard_of(id, self.shard_count());
        self.request_shard(shard, make).await
    }

    /// How many shards the engine has (owned or not).
    pub(crate) fn shard_count(&self) -> u32 {
        self.inner.shards.count()
    }

    /// Sends a request to shard `shard` and waits for its answer.
    pub(crate) async fn request_shard<T>(
        &self,
        shard: u32,
        make: impl FnOnce(oneshot::Sender<Result<T>>) -> Input,
    ) -> Result<T> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let (tx, rx) = oneshot::channel();
        {
            let slot = self
                .inner
                .shards
                .slot(shard)
                .ok_or(Error::NotOwner { shard })?;
            let Some(h) = &slot.handle else {
                return Err(Error::NotOwner { shard });
            };
            let capacity = self.inner.config.queue_capacity;
            if h.queued.fetch_add(1, Ordering::AcqRel) >= capacity {
                h.queued.fetch_sub(1, Ordering::AcqRel);
                return Err(Error::Busy { shard, capacity });
            }
            if h.tx.send(make(tx)).is_err() {
                h.queued.fetch_sub(1, Ordering::AcqRel);
                return Err(self.gone(shard));
            }
        }
        rx.await.map_err(|_| self.gone(shard))?
    }

    /// The error for a request whose shard stopped before answering: under
    /// a lease a shard stops only when it is lost (it is not this engine's
    /// any more, and the request was not taken, or was refused unrecorded);
    /// otherwise the engine closed.
    fn gone(&self, shard: u32) -> Error {
        if self.inner.shards.leased() && !self.inner.closed.load(Ordering::Acquire) {
            Error::NotOwner { shard }
        } else {
            Error::Closed
        }
    }
}

/// The update ID of an update keyed `key` ([`Engine::update_once`]); an
/// empty key is [`Error::BadUpdateKey`].
pub(crate) fn keyed_update_id(id: &str, key: &str) -> Result<String> {
    if key.is_empty() {
        return Err(Error::BadUpdateKey {
            id: id.to_string(),
            key: key.to_string(),
            reason: "it is empty".to_string(),
        });
    }
    // Random update IDs are bare UUIDs: a key never takes one's place.
    Ok(format!("key:{key}"))
}

/// The dedup key of a client signal keyed `key` ([`Engine::signal_once`]):
/// never 0 (no key), and in a domain of its own, apart from the keys of
/// signals workflow code sends (`send_dedup`); an empty key is
/// [`Error::BadSignalKey`].
/// The longest workflow ID a start takes, in bytes: one fits any URL (a
/// server refuses paths of 64 KiB and more) and a log record many times
/// over. Temporal's default limit is 1,000 characters.
pub const MAX_ID_BYTES: usize = 1024;

/// Whether `id` may name a new run: not empty, not `.` or `..` (a URL
/// reads them as dot segments, so no HTTP client could address the run),
/// at most [`MAX_ID_BYTES`] bytes, and no control character (a URL drops
/// tabs and line breaks, and they hide in logs). [`Error::BadWorkflowId`]
/// otherwise. Every start of a client checks it; runs stored before the
/// check keep their IDs.
pub fn check_workflow_id(id: &str) -> Result<()> {
    let reason = if id.is_empty() {
        "it is empty"
    } else if id == "." || id == ".." {
        "a URL reads it as a dot segment"
    } else if id.len() > MAX_ID_BYTES {
        "it is longer than 1024 bytes"
    } else if id.chars().any(char::is_control) {
        "it holds a control character"
    } else {
        return Ok(());
    };
    Err(Error::BadWorkflowId {
        id: Error::given(id),
        reason,
    })
}

pub(crate) fn signal_dedup(id: &str, key: &str) -> Result<u64> {
    if key.is_empty() {
        return Err(Error::BadSignalKey {
            id: id.to_string(),
            key: key.to_string(),
            reason: "it is empty".to_string(),
        });
    }
    let hash = fusee_core::wire::checksum64(&[b"fusee.signal-key", key.as_bytes()]);
    Ok(hash.max(1))
}

/// An update's result as its caller sees it: the handler's value, or its
/// failure as [`Error::Failed`].
pub(crate) fn update_result<O: DeserializeOwned>(id: &str, r: RunResult) -> Result<O> {
    match r.status {
        Status::Ok => decode(&r.payload).map_err(|e| Error::codec_for("update result", id, e)),
        status => Err(Error::Failed {
            id: id.to_string(),
            status: status.as_str(),
            failure: decode::<Failure>(&r.payload)
                .unwrap_or_else(|_| Failure::new(String::from_utf8_lossy(&r.payload))),
        }),
    }
}

/// What [`crate::promise`] needs of the engine beyond its public calls.
impl Engine {
    /// [`Engine::update`] for a handler named at run time (a promise's),
    /// answering with the handler's raw result.
    pub(crate) async fn update_name(
        &self,
        id: &str,
        name: &str,
        payload: Vec<u8>,
    ) -> Result<RunResult> {
        let update_id = uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes())
            .into_uuid()
            .to_string();
        self.request(id, |reply| Input::Update {
            id: id.to_string(),
            name: name.to_string(),
            update_id,
            payload,
            reply,
        })
        .await
    }
}

/// Test kit hooks (feature `testing`): what `crate::testing` needs from
/// the engine, kept apart from the client API above.
#[cfg(feature = "testing")]
impl Engine {
    /// Each shard's activity and its client requests not yet taken, by
    /// shard.
    pub(crate) fn activity(&self) -> Vec<(driver::ActivityState, usize)> {
        (0..self.inner.shards.count())
            .map(|shard| {
                let slot = self.inner.shards.slot(shard);
                match slot.as_ref().and_then(|s| s.handle.as_ref()) {
                    Some(h) => (h.activity.snapshot(), h.queued.load(Ordering::Acquire)),
                    // A shard not owned here does nothing here.
                    None => (
                        driver::ActivityState {
                            idle: true,
                            ..Default::default()
                        },
                        0,
                    ),
                }
            })
            .collect()
    }

    /// Stops every shard as a crash would (what `Drop` does for the last
    /// clone), while clones may live on: they find the engine closed.
    /// Blocks until the shard threads end.
    pub(crate) fn crash_stop(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.shards.stop_keeper();
        self.inner.shards.crash_all();
    }
}

/// The engine is the host of its registry's code: a run's context reaches
/// the engine it runs in through the registry it shares with it (set by
/// [`Engine::register_flow_control`]). Said here, the one module that
/// knows both the engine and the context, so neither `ctx.rs` nor
/// `registry.rs` imports the other's side.
impl crate::registry::Code for Ctx {
    type Host = WeakEngine;
    #[cfg(feature = "testing")]
    type StepMock = crate::step::StepWrap;
}

/// What schedules, queues and step limits (`crate::flow`) need of the
/// engine: a handle their workflows' code and steps can hold without
/// keeping a dropped engine open, set as its registry's host (which a
/// run's context shares, so a step finds the engine it runs in).
impl Engine {
    /// A handle that does not keep the engine alive.
    pub(crate) fn downgrade(&self) -> WeakEngine {
        WeakEngine(Arc::downgrade(&self.inner))
    }

    /// Makes this engine the host its runs' code reaches
    /// ([`crate::flow::shared::EngineRef`], [`crate::StreamSender`]): set
    /// at open; a second call changes nothing.
    fn host_engine(&self) {
        self.inner.registry.set_host(self.downgrade());
    }

    /// Whether workflow type `wtype` is registered here.
    pub(crate) fn is_registered(&self, wtype: &str) -> bool {
        self.inner.registry.contains(wtype)
    }

    /// Every registered workflow type, sorted.
    pub(crate) fn registered_names(&self) -> Vec<String> {
        self.inner.registry.names()
    }
}

/// What [`crate::dynamic`] needs of the engine.
impl Engine {
    /// The largest payload the engine takes ([`Config::max_payload`]).
    pub(crate) fn max_payload(&self) -> usize {
        self.inner.config.max_payload
    }
}

/// An [`Engine`] that does not keep it alive ([`Engine::downgrade`]).
#[derive(Clone)]
pub(crate) struct WeakEngine(std::sync::Weak<Inner>);

impl WeakEngine {
    /// The engine, while it lives.
    pub(crate) fn upgrade(&self) -> Option<Engine> {
        self.0.upgrade().map(|inner| Engine { inner })
    }
}

impl crate::telemetry::Exposition for Engine {
    async fn figures(&self) -> crate::telemetry::Figures {
        let owners = self
            .shard_status()
            .iter()
            .map(|s| (s.shard, s.owned, s.opens, s.losses))
            .collect();
        crate::telemetry::Figures::new(
            self.per_shard_metrics().await,
            owners,
            self.inner.telemetry.clone(),
        )
    }
}
