//! Step limits: at most `n` steps under a limit run at once, and at most
//! `count` start in any window of `per`, across every run of the engine,
//! to protect what the steps call. Waiting for a slot costs no thread and
//! survives restarts.
//!
//! ```
//! use std::time::Duration;
//! use fusee::{Config, Ctx, Engine, Failure, Workflow};
//!
//! const CHARGE: Workflow<u64, String> = Workflow::new("charge");
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), fusee::Error> {
//! let engine = Engine::open(Config::memory()).await?;
//! engine.register(CHARGE, |ctx: Ctx, cents: u64| async move {
//!     // At most 5 calls to the payment API at once, 10 a second, from
//!     // every run of every workflow that names the limit.
//!     let receipt = ctx
//!         .step("call-payments", move |_| async move { Ok(format!("charged {cents}")) })
//!         .limit("payments-api")
//!         .await?;
//!     Ok::<_, Failure>(receipt)
//! });
//! engine.register_flow_control();
//! engine
//!     .limit("payments-api")
//!     .concurrency(5)
//!     .rate(10, Duration::from_secs(1))
//!     .create()
//!     .await?;
//! assert_eq!(engine.execute(CHARGE, "c-1", &250).await?, "charged 250");
//! # engine.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # What it promises
//!
//! - A limited step ([`Step::limit`]) runs only with a permit of its
//!   limit: at most [`LimitBuilder::concurrency`] permits are out at once,
//!   and at most `count` are handed out in any window of `per`
//!   ([`LimitBuilder::rate`]), on the engine's clock. A permit covers the
//!   step's attempts and its retries' waits, and a restart: an attempt a
//!   crash cut short runs again under the same permit (steps are at least
//!   once; the outside service may have seen the lost attempt).
//! - Permits go in request order. A step waiting for one is a durable
//!   signal wait: no thread, no task, and it waits on after a restart.
//! - A permit comes back when the step ends (its result, its failure, or
//!   the run's cancellation interrupting it; an interrupted attempt may
//!   still run on, as a cancelled step's attempt does). A run that ends
//!   without giving it back (terminated, or its code failed) loses it:
//!   the limit looks at holders older than a minute and takes back the
//!   permits of runs that have ended.
//!
//! # Why a workflow, not a semaphore in the engine
//!
//! A limit is a workflow (type `fusee.limit`, ID `fusee.limit/<name>`)
//! that hands out permits through updates: a limited step asks with a
//! small step of its own (the update is recorded before its answer leaves,
//! and asked again after a crash it answers the same), waits for a grant
//! signal when none is free, and gives the permit back with another small
//! step. A semaphore in the engine would cost less (no records), but its
//! waiting steps would hold tasks, forget their order on a restart, and
//! count per process: with shards shared by several processes (the
//! PostgreSQL backend) a limit must live in the store to hold across
//! them. The price is about ten records per limited step (four in the run
//! when a permit is free, plus the limit's), so limit the steps that call
//! what needs protecting, not every step.
//!
//! Adding `.limit(...)` to a step of running workflows changes what their
//! code records: guard it with [`Ctx::patched`] as any change of calls.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::client::RunStatus;
use crate::ctx::{Ctx, Step};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::flow::shared::{EngineRef, MOVING, Notify, Rate, Timer, Window, now_ms};
use crate::step::StepError;
use crate::workflow::{Failure, Update, Workflow, encode};

/// The workflow that implements step limits; this file is their client
/// side (what callers call on `Engine`, and `Step::limit`, which asks
/// for a permit from inside a run) and the protocol between the two.
mod workflow;
pub(crate) use workflow::register;

/// The workflow type behind every step limit.
pub const LIMIT_WORKFLOW: &str = "fusee.limit";

/// What a limit's workflow ID starts with: `fusee.limit/<name>`.
pub const LIMIT_ID_PREFIX: &str = "fusee.limit/";

const WORKFLOW: Workflow<Input, ()> = Workflow::new(LIMIT_WORKFLOW);
const CONFIGURE: Update<Settings, ()> = Update::new("fusee.limit.configure");
const ACQUIRE: Update<Request, bool> = Update::new("fusee.limit.acquire");
const RELEASE: Update<String, ()> = Update::new("fusee.limit.release");
const DELETE: Update<(), ()> = Update::new("fusee.limit.delete");
const PAUSE: Update<String, ()> = Update::new("fusee.limit.pause");
const RESUME: Update<(), ()> = Update::new("fusee.limit.resume");
const DESCRIBE: Update<(), LimitDescription> = Update::new("fusee.limit.describe");

/// Wake-ups after which a limit continues as new.
const CONTINUE_EVERY: u32 = 1_000;
/// How long a permit is held before the limit checks its holder still
/// runs.
const SWEEP_AFTER_MS: u64 = 60_000;
/// What a grant signal's name starts with; the request's ID follows.
const GRANT_PREFIX: &str = "fusee.limit.grant/";

/// What a step waiting for a permit is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Grant {
    /// The permit is the step's.
    Granted,
    /// The limit was deleted: no permit will come.
    Closed,
}

/// What [`Limits::describe`] says about a limit. More fields may come;
/// match it with `..`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LimitDescription {
    /// The limit's name.
    pub name: String,
    /// At most this many permits out at once.
    pub concurrency: Option<u32>,
    /// At most `.0` permits handed out in any window of `.1`.
    pub rate: Option<(u32, Duration)>,
    /// The workflow IDs of the runs holding a permit now.
    pub holders: Vec<String>,
    /// Steps waiting for a permit.
    pub waiting: u64,
    /// Permits handed out since the limit was made.
    pub granted: u64,
    /// Permits taken back from runs that ended holding them.
    pub reclaimed: u64,
    /// Paused: no permit goes out until resumed.
    pub paused: bool,
    /// The note given when it was paused.
    pub note: Option<String>,
}

/// What [`Engine::limit`] makes: set its limits, then
/// [`create`](Self::create) it.
#[must_use = "a limit is made by create()"]
#[derive(Debug)]
pub struct LimitBuilder {
    engine: Engine,
    name: String,
    concurrency: Option<u32>,
    rate: Option<(u32, Duration)>,
}

impl Engine {
    /// Step limit `name` ([`Step::limit`]): set how many of its steps may
    /// run at once and how fast, then [`create`](LimitBuilder::create) it.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use fusee::{Config, Engine};
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register_flow_control();
    /// engine.limit("geocoder").rate(50, Duration::from_secs(1)).create().await?;
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn limit(&self, name: &str) -> LimitBuilder {
        LimitBuilder {
            engine: self.clone(),
            name: name.to_string(),
            concurrency: None,
            rate: None,
        }
    }

    /// The step limits of this engine: describe, pause, resume, delete,
    /// list.
    ///
    /// ```
    /// # use fusee::{Config, Engine};
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register_flow_control();
    /// engine.limit("api").concurrency(2).create().await?;
    /// assert_eq!(engine.limits().list().await?, vec!["api".to_string()]);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn limits(&self) -> Limits {
        Limits {
            engine: self.clone(),
        }
    }
}

impl LimitBuilder {
    /// At most `n` of the limit's steps run at once (0 is
    /// [`Error::InvalidLimit`]).
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// At most `count` of its steps start in any window of `per` (a count
    /// of 0 or above 100,000, or a period under a millisecond, is
    /// [`Error::InvalidLimit`]).
    pub fn rate(mut self, count: u32, per: Duration) -> Self {
        self.rate = Some((count, per));
        self
    }

    /// Creates the limit, or sets these numbers on the limit of this name
    /// (permits out and steps waiting are kept); returns once that is
    /// durable. Nothing is recorded when it fails: no number set, a zero
    /// limit or a bad rate is [`Error::InvalidLimit`], flow control not
    /// registered ([`Engine::register_flow_control`]) is
    /// [`Error::UnknownWorkflow`].
    ///
    /// ```
    /// # use fusee::{Config, Engine, Error};
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register_flow_control();
    /// let zero = engine.limit("api").concurrency(0).create().await;
    /// assert!(matches!(zero, Err(Error::InvalidLimit { .. })));
    /// engine.limit("api").concurrency(1).create().await?;
    /// engine.limit("api").concurrency(3).create().await?;
    /// assert_eq!(engine.limits().describe("api").await?.concurrency, Some(3));
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create(self) -> Result<()> {
        let invalid = |reason: String| Error::InvalidLimit {
            name: self.name.clone(),
            reason,
        };
        if self.name.is_empty() {
            return Err(invalid("the name is empty".into()));
        }
        if self.concurrency.is_none() && self.rate.is_none() {
            return Err(invalid(
                "set a concurrency, a rate or both: a limit of nothing limits nothing".into(),
            ));
        }
        if self.concurrency == Some(0) {
            return Err(invalid("a concurrency of 0 would run no step".into()));
        }
        let rate = match self.rate {
            Some((count, per)) => Some(Rate::new(count, per).map_err(invalid)?),
            None => None,
        };
        self.engine.check_flow(LIMIT_WORKFLOW, None)?;
        let settings = Settings {
            concurrency: self.concurrency,
            rate,
        };
        let id = workflow_id(&self.name);
        let input = Input {
            name: self.name.clone(),
            settings: settings.clone(),
            state: State::default(),
        };
        self.engine
            .update_or_start_entity(WORKFLOW, &id, &input, CONFIGURE, &settings)
            .await
    }
}

/// The step limits of an engine ([`Engine::limits`]). A name with no limit
/// is [`Error::UnknownLimit`].
#[derive(Clone, Debug)]
pub struct Limits {
    engine: Engine,
}

impl Limits {
    /// Where limit `name` stands: its numbers, holders, waiting steps.
    pub async fn describe(&self, name: &str) -> Result<LimitDescription> {
        let r = self
            .engine
            .update_entity(&workflow_id(name), DESCRIBE, &())
            .await;
        r.map_err(|e| limit_error(name, e))
    }

    /// Pauses limit `name`, with a note for people: no permit goes out
    /// until [`resume`](Self::resume), so its steps wait (durably, in
    /// request order, as for a full limit) while steps holding a permit
    /// run on. For stopping calls to a service that is down without
    /// failing the runs. Pausing a paused limit changes only its note.
    ///
    /// ```
    /// # use fusee::{Config, Engine};
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register_flow_control();
    /// engine.limit("api").concurrency(2).create().await?;
    /// engine.limits().pause("api", "the API is down").await?;
    /// let about = engine.limits().describe("api").await?;
    /// assert!(about.paused);
    /// assert_eq!(about.note.as_deref(), Some("the API is down"));
    /// engine.limits().resume("api").await?;
    /// assert!(!engine.limits().describe("api").await?.paused);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn pause(&self, name: &str, note: &str) -> Result<()> {
        let r = self
            .engine
            .update_entity(&workflow_id(name), PAUSE, &note.to_string())
            .await;
        r.map_err(|e| limit_error(name, e))
    }

    /// Resumes limit `name`: permits go out again to the steps waiting, in
    /// request order. Resuming a limit that is not paused changes nothing.
    pub async fn resume(&self, name: &str) -> Result<()> {
        let r = self
            .engine
            .update_entity(&workflow_id(name), RESUME, &())
            .await;
        r.map_err(|e| limit_error(name, e))
    }

    /// Deletes limit `name`: steps waiting for its permits fail (kind
    /// `limit-deleted`), steps holding one run on, and later limited steps
    /// naming it fail (kind `unknown-limit`) until it is made again.
    ///
    /// ```
    /// # use fusee::{Config, Engine, Error};
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register_flow_control();
    /// engine.limit("api").concurrency(1).create().await?;
    /// engine.limits().delete("api").await?;
    /// assert!(matches!(engine.limits().describe("api").await, Err(Error::UnknownLimit { .. })));
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn delete(&self, name: &str) -> Result<()> {
        let id = workflow_id(name);
        self.engine
            .update_entity(&id, DELETE, &())
            .await
            .map_err(|e| limit_error(name, e))?;
        match self.engine.result(WORKFLOW, &id).await {
            Ok(()) | Err(Error::Failed { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The names of every limit, sorted.
    pub async fn list(&self) -> Result<Vec<String>> {
        self.engine
            .list_entities(LIMIT_WORKFLOW, LIMIT_ID_PREFIX)
            .await
    }
}

/// Limit `name`'s workflow ID.
fn workflow_id(name: &str) -> String {
    format!("{LIMIT_ID_PREFIX}{name}")
}

fn limit_error(name: &str, e: Error) -> Error {
    match e {
        Error::NotFound { .. } | Error::Finished { .. } => Error::UnknownLimit {
            name: name.to_string(),
        },
        other => other,
    }
}

impl<T> Step<T> {
    /// Runs the step under step limit `limit` ([`Engine::limit`]): it
    /// starts only with a permit, waiting durably for one if none is free,
    /// and gives it back when it ends. A limit that does not exist fails
    /// the step (kind `unknown-limit`, not retried); one deleted while the
    /// step waits fails it too (kind `limit-deleted`). See the
    /// [module docs](crate::limit).
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Error, Failure, Workflow};
    /// # const W: Workflow<(), String> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     match ctx.step("geocode", |_| async { Ok(1) }).limit("no-such-limit").await {
    ///         Err(e) => Ok::<_, Failure>(e.kind.unwrap_or_default()),
    ///         Ok(_) => Ok("ran".to_string()),
    ///     }
    /// });
    /// engine.register_flow_control();
    /// assert_eq!(engine.execute(W, "w-1", &()).await?, "unknown-limit");
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn limit(self, limit: &str) -> LimitedStep<T> {
        LimitedStep {
            step: self,
            limit: limit.to_string(),
        }
    }
}

/// A step to run under a step limit ([`Step::limit`]): `.await` it.
#[must_use = "a step does nothing until awaited"]
pub struct LimitedStep<T> {
    step: Step<T>,
    limit: String,
}

impl<T: DeserializeOwned + 'static> IntoFuture for LimitedStep<T> {
    type Output = std::result::Result<T, StepError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output>>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(run_limited(self.step, self.limit))
    }
}

/// Asks for a permit, waits for it if need be, runs the step, gives the
/// permit back.
async fn run_limited<T: DeserializeOwned + 'static>(
    step: Step<T>,
    limit: String,
) -> std::result::Result<T, StepError> {
    let ctx = step.ctx().clone();
    let host = EngineRef::of(&ctx);
    // Recorded: the same request after a replay, unique across runs.
    let request = ctx.uuid().hyphenated().to_string();
    let req = Request {
        request: request.clone(),
        holder: ctx.workflow_id(),
        run: ctx.run_id(),
        limit: limit.clone(),
    };
    let limiter = workflow_id(&limit);
    let granted = {
        let (limiter, req, host) = (limiter.clone(), req.clone(), host.clone());
        ctx.step("fusee.limit.acquire", move |_| {
            let (limiter, req, host) = (limiter.clone(), req.clone(), host.clone());
            async move { acquire(&host, &limiter, &req).await }
        })
        .await?
    };
    if !granted {
        let waited = ctx
            .wait_for_name::<Grant>(&format!("{GRANT_PREFIX}{request}"))
            .await;
        match waited {
            Ok(Some(Grant::Granted)) => {}
            Ok(Some(Grant::Closed)) => {
                return Err(StepError::fatal(format!(
                    "step limit {limit:?} was deleted while the step waited for a permit"
                ))
                .kind("limit-deleted"));
            }
            Ok(None) => {
                return Err(StepError::fatal("the wait for a permit ended without one"));
            }
            Err(cancelled) => {
                give_back(&ctx, &host, &limiter, &request).await;
                return Err(StepError {
                    message: cancelled.message,
                    kind: cancelled.kind,
                    retryable: false,
                });
            }
        }
    }
    let out = step.await;
    give_back(&ctx, &host, &limiter, &request).await;
    out
}

/// Gives permit `request` back (a step; a limit gone has nothing to take).
async fn give_back(ctx: &Ctx, host: &EngineRef, limiter: &str, request: &str) {
    let (limiter, request, host) = (limiter.to_string(), request.to_string(), host.clone());
    // A release that fails for good leaves the permit to the limit's
    // look at old holders; the step's own outcome stands.
    let _ = ctx
        .step("fusee.limit.release", move |_| {
            let (limiter, request, host) = (limiter.clone(), request.clone(), host.clone());
            async move {
                let engine = host
                    .get()
                    .ok_or_else(|| StepError::retryable("the engine is closing"))?;
                match engine.update_entity(&limiter, RELEASE, &request).await {
                    Ok(()) | Err(Error::NotFound { .. } | Error::Finished { .. }) => Ok(()),
                    Err(e) => Err(StepError::retryable(e.to_string())),
                }
            }
        })
        .await;
}

/// The acquire step: asks the limit for a permit; `true` if it is the
/// step's now.
async fn acquire(
    host: &EngineRef,
    limiter: &str,
    req: &Request,
) -> std::result::Result<bool, StepError> {
    let engine = host.get().ok_or_else(|| {
        StepError::fatal(
            "flow control is not registered in this engine (Engine::register_flow_control)",
        )
        .kind("unknown-limit")
    })?;
    match engine.update_entity(limiter, ACQUIRE, req).await {
        Ok(granted) => Ok(granted),
        Err(Error::NotFound { .. } | Error::Finished { .. }) => Err(StepError::fatal(format!(
            "no step limit {:?} (make it with Engine::limit)",
            req.limit
        ))
        .kind("unknown-limit")),
        Err(e) => Err(StepError::retryable(e.to_string())),
    }
}

/// A step's request for a permit.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Request {
    /// Its ID (a recorded uuid): the grant signal's name ends with it.
    request: String,
    /// The workflow ID and run asking.
    holder: String,
    run: u64,
    limit: String,
}

/// A permit out.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Holder {
    req: Request,
    since_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Settings {
    concurrency: Option<u32>,
    rate: Option<Rate>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    waiting: VecDeque<Request>,
    holders: Vec<Holder>,
    window: Window,
    granted: u64,
    reclaimed: u64,
    /// Paused ([`Limits::pause`]), with the operator's note: no permit
    /// goes out. Absent from inputs written before pausing existed.
    #[serde(default)]
    paused: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Input {
    name: String,
    settings: Settings,
    #[serde(default)]
    state: State,
}
