//! Sagas: steps that register how to undo themselves, undone durably in
//! reverse order when the workflow fails or is cancelled.
//!
//! ```
//! use fusee::{Config, Ctx, Engine, Error, Failure, Saga, StepError, Workflow};
//!
//! const TRIP: Workflow<u32, String> = Workflow::new("trip");
//!
//! async fn trip(ctx: Ctx, nights: u32) -> Result<String, Failure> {
//!     let saga = Saga::new(&ctx);
//!     let s = saga.clone();
//!     saga.run(async move {
//!         let flight = s
//!             .step("book-flight", |_| async { Ok("AF-12".to_string()) })
//!             .compensate("cancel-flight", |flight: String, _| async move {
//!                 println!("cancelled {flight}");
//!                 Ok(())
//!             })
//!             .await?;
//!         s.step("book-hotel", move |_| async move {
//!             if nights > 14 {
//!                 return Err(StepError::fatal("no room for that long"));
//!             }
//!             Ok(format!("{nights} nights"))
//!         })
//!         .compensate("cancel-hotel", |_: String, _| async { Ok(()) })
//!         .await?;
//!         Ok(format!("booked {flight}"))
//!     })
//!     .await
//! }
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), fusee::Error> {
//! let engine = Engine::open(Config::memory()).await?;
//! engine.register(TRIP, trip);
//! assert_eq!(engine.execute(TRIP, "trip-1", &3).await?, "booked AF-12");
//! // The hotel fails for good: the flight is cancelled (a step of its
//! // own), and the run fails with the hotel's error.
//! match engine.execute(TRIP, "trip-2", &30).await {
//!     Err(Error::Failed { failure, .. }) => assert_eq!(failure.message, "no room for that long"),
//!     other => panic!("{other:?}"),
//! }
//! engine.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # What it promises
//!
//! - **Compensations are steps**, with the names given, run one at a time
//!   newest first, each retried by its policy (by default the saga's,
//!   [`Saga::compensation_retry`]). A compensation that fails for good does
//!   not stop the others; the run's failure then says which failed.
//! - **Deterministic on replay**: a compensation is registered by code when
//!   its step succeeds, so a replay registers the same ones in the same
//!   order, and their steps replay from their records; none runs twice
//!   once its result is durable.
//! - **Cancellation is covered**: a cancellation reaches the saga's code as
//!   an error at its pending operation; [`Saga::run`] then compensates.
//!   Two cases need care, and the saga handles both:
//!   - a step the cancellation interrupted may still take effect (its
//!     attempt goes on). If it has a compensation, the saga calls it
//!     again, under the same idempotency key, to learn its outcome (an
//!     attempt that had not run yet runs now), and undoes it if it
//!     succeeded;
//!   - a second cancellation while compensating interrupts the
//!     compensation at hand; the saga calls it again, under the same key.
//! - **Stable idempotency keys**: every saga step and compensation is
//!   given a [`StepContext::key`] that is the same on every attempt, every
//!   replay and every call again after an interruption:
//!   `<workflow ID>/saga/<uuid>/<n>` for the saga's `n`th step or
//!   [`add`](Saga::add)ed compensation, with `/undo` appended for a step's
//!   compensation. Pass it to the services called, so an effect called
//!   again is applied once.
//!
//! A saga records one value when made (the uuid its keys share). It does
//! nothing for a run that is terminated (its code runs no further) or
//! whose code panics, and its compensations do not carry over
//! [`Ctx::continue_as_new`].

use std::cell::RefCell;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ctx::{Ctx, Step};
use crate::retry::RetryPolicy;
use crate::step::{StepContext, StepError};
use crate::workflow::Failure;

/// A step function's future, boxed.
type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, StepError>> + Send>>;

/// A step function, type-erased, callable for every attempt.
type StepFn<T> = Arc<dyn Fn(StepContext) -> BoxFuture<T> + Send + Sync>;

/// A compensation's record is kept as JSON: its type is the code's
/// business, and any JSON decodes back on replay.
type UndoFn = StepFn<serde_json::Value>;

/// A registered compensation.
struct Undo {
    name: String,
    key: Arc<str>,
    policy: RetryPolicy,
    f: UndoFn,
}

/// What every clone of a saga shares.
struct Book {
    /// The start of every key: `<workflow ID>/saga/<uuid>`.
    base: String,
    /// The next step or compensation's number.
    next: u64,
    /// The compensations' default policy.
    policy: RetryPolicy,
    /// Compensations registered, oldest first.
    undo: Vec<Undo>,
}

/// A saga over a run's [`Ctx`]: its steps register compensations, which
/// [`Saga::compensate`] (or [`Saga::run`], when its body fails) runs
/// durably, newest first. Cheap to clone; clones share the registered
/// compensations. See the [module docs](crate::saga).
#[derive(Clone)]
pub struct Saga {
    ctx: Ctx,
    book: Rc<RefCell<Book>>,
}

impl fmt::Debug for Saga {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Saga")
            .field("compensations", &self.compensations())
            .finish_non_exhaustive()
    }
}

impl Saga {
    /// A saga for the run of `ctx`, with no compensation registered.
    /// Records one value (a uuid, the base of its steps' idempotency
    /// keys), so make sagas where the code makes them every run.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Saga, Workflow};
    /// # const W: Workflow<(), usize> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let saga = Saga::new(&ctx);
    ///     Ok::<_, Failure>(saga.compensations().len())
    /// });
    /// assert_eq!(engine.execute(W, "w", &()).await?, 0);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(ctx: &Ctx) -> Saga {
        let base = format!("{}/saga/{}", ctx.workflow_id(), ctx.uuid().simple());
        Saga {
            ctx: ctx.clone(),
            book: Rc::new(RefCell::new(Book {
                base,
                next: 0,
                policy: RetryPolicy::default(),
                undo: Vec::new(),
            })),
        }
    }

    /// Retries its compensations by `policy` unless a step sets another
    /// ([`SagaStep::compensation_retry`]). The default is
    /// [`RetryPolicy::default`] (five attempts within five minutes); an
    /// undo that must not be given up on deserves many more attempts over
    /// a longer time.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use fusee::{Config, Ctx, Engine, Failure, RetryPolicy, Saga, Workflow};
    /// # const W: Workflow<(), ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let saga = Saga::new(&ctx).compensation_retry(
    ///         RetryPolicy::default()
    ///             .attempts(100)
    ///             .backoff(Duration::from_millis(5), 2.0, Duration::from_secs(60)),
    ///     );
    ///     saga.add("release", |_| async { Ok(()) });
    ///     saga.compensate().await?;
    ///     Ok::<_, Failure>(())
    /// });
    /// engine.execute(W, "w", &()).await?;
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn compensation_retry(self, policy: RetryPolicy) -> Saga {
        self.book.borrow_mut().policy = policy;
        self
    }

    /// A step of the saga: [`Ctx::step`] (same recording, same retries)
    /// with a saga key ([`StepContext::key`], see the
    /// [module docs](crate::saga)), to which [`SagaStep::compensate`]
    /// attaches the step's undo. Await it like a step.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Saga, Workflow};
    /// # const W: Workflow<(), String> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let saga = Saga::new(&ctx);
    ///     // The key is the same on every attempt and replay: give it to
    ///     // the service as its idempotency key.
    ///     let key = saga.step("reserve", |step| async move { Ok(step.key().to_string()) }).await?;
    ///     Ok::<_, Failure>(key)
    /// });
    /// let key = engine.execute(W, "w-1", &()).await?;
    /// assert!(key.starts_with("w-1/saga/") && key.ends_with("/0"), "{key}");
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn step<T, F, Fut>(&self, name: &str, f: F) -> SagaStep<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: Fn(StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    {
        let f: StepFn<T> = Arc::new(move |sc| Box::pin(f(sc)));
        SagaStep {
            saga: self.clone(),
            name: name.to_string(),
            key: self.next_key(),
            f,
            policy: RetryPolicy::default(),
            undo: None,
            undo_policy: None,
        }
    }

    /// Registers compensation `name` now: `f` runs as a step (with a saga
    /// key) if the saga compensates. For an effect that is not a saga step
    /// (a child workflow, a message), or to undo a step whether or not it
    /// reports success (register before calling it; the undo must then
    /// tolerate an effect that never happened).
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Saga, Workflow};
    /// # const W: Workflow<(), Vec<String>> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let saga = Saga::new(&ctx);
    ///     saga.add("unlock", |_| async { Ok(()) });
    ///     saga.add("notify-undo", |step| async move { Ok(step.attempt()) });
    ///     Ok::<_, Failure>(saga.compensations())
    /// });
    /// assert_eq!(engine.execute(W, "w", &()).await?, ["unlock", "notify-undo"]);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn add<R, F, Fut>(&self, name: &str, f: F)
    where
        R: Serialize + 'static,
        F: Fn(StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, StepError>> + Send + 'static,
    {
        let key = self.next_key();
        let f: UndoFn = Arc::new(move |sc| {
            let fut = f(sc);
            Box::pin(async move { as_json(fut.await?) })
        });
        let mut book = self.book.borrow_mut();
        let policy = book.policy.clone();
        book.undo.push(Undo {
            name: name.to_string(),
            key,
            policy,
            f,
        });
    }

    /// The names of the compensations registered and not yet run, oldest
    /// first (they run newest first).
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Saga, Workflow};
    /// # const W: Workflow<(), usize> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let saga = Saga::new(&ctx);
    ///     saga.step("hold", |_| async { Ok(1) })
    ///         .compensate("release", |_, _| async { Ok(()) })
    ///         .await?;
    ///     assert_eq!(saga.compensations(), ["release"]);
    ///     saga.compensate().await?;
    ///     Ok::<_, Failure>(saga.compensations().len())
    /// });
    /// assert_eq!(engine.execute(W, "w", &()).await?, 0);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn compensations(&self) -> Vec<String> {
        self.book
            .borrow()
            .undo
            .iter()
            .map(|u| u.name.clone())
            .collect()
    }

    /// Runs the registered compensations now, newest first, each a step
    /// retried by its policy, and forgets them. A compensation that fails
    /// for good does not stop the others: `Err` (kind
    /// `compensation-failed`) names each that failed and why. A
    /// cancellation that interrupts one makes the saga call it again under
    /// the same key.
    ///
    /// ```
    /// # use std::sync::{Arc, Mutex};
    /// # use fusee::{Config, Ctx, Engine, Failure, Saga, StepError, Workflow};
    /// # const W: Workflow<(), ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// let undone = Arc::new(Mutex::new(Vec::new()));
    /// let log = Arc::clone(&undone);
    /// engine.register(W, move |ctx: Ctx, ()| {
    ///     let log = Arc::clone(&log);
    ///     async move {
    ///         let saga = Saga::new(&ctx);
    ///         for name in ["first", "second"] {
    ///             let log = Arc::clone(&log);
    ///             saga.add(name, move |_| {
    ///                 let log = Arc::clone(&log);
    ///                 async move {
    ///                     log.lock().unwrap().push(name);
    ///                     Ok::<_, StepError>(())
    ///                 }
    ///             });
    ///         }
    ///         saga.compensate().await?;
    ///         Ok::<_, Failure>(())
    ///     }
    /// });
    /// engine.execute(W, "w", &()).await?;
    /// assert_eq!(*undone.lock().unwrap(), ["second", "first"]);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn compensate(&self) -> Result<(), Failure> {
        let undo = std::mem::take(&mut self.book.borrow_mut().undo);
        let mut failed = Vec::new();
        for u in undo.into_iter().rev() {
            loop {
                let before = self.ctx.cancels();
                match issue(&self.ctx, &u.name, &u.key, &u.f, &u.policy).await {
                    Ok(_) => break,
                    Err(e) if interrupted(&e, &self.ctx, before) => continue,
                    Err(e) => {
                        failed.push(format!("compensation {:?} failed: {e}", u.name));
                        break;
                    }
                }
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(Failure::with_kind("compensation-failed", failed.join("; ")))
        }
    }

    /// Runs `body`; if it fails (a step failed for good, the run was
    /// cancelled, the code gave up), compensates ([`Saga::compensate`]) and
    /// returns the body's failure, its message followed by the
    /// compensations' failures if any failed. A cancelled run whose body
    /// returns the cancellation still ends as cancelled.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Error, Failure, Saga, Workflow};
    /// # const W: Workflow<(), ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let saga = Saga::new(&ctx);
    ///     let s = saga.clone();
    ///     saga.run(async move {
    ///         s.add("refund", |_| async { Err::<(), _>(fusee::StepError::fatal("bank closed")) });
    ///         Err(Failure::with_kind("out-of-stock", "no lamps"))
    ///     })
    ///     .await
    /// });
    /// match engine.execute(W, "w", &()).await {
    ///     Err(Error::Failed { failure, .. }) => {
    ///         assert_eq!(failure.kind.as_deref(), Some("out-of-stock"));
    ///         assert!(failure.message.starts_with("no lamps; "), "{}", failure.message);
    ///         assert!(failure.message.contains("\"refund\" failed: bank closed"));
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run<T>(
        &self,
        body: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        let failure = match body.await {
            Ok(v) => return Ok(v),
            Err(f) => f,
        };
        match self.compensate().await {
            Ok(()) => Err(failure),
            Err(undo) => Err(Failure {
                message: format!("{}; {}", failure.message, undo.message),
                kind: failure.kind,
            }),
        }
    }

    /// The key of the saga's next step or compensation.
    fn next_key(&self) -> Arc<str> {
        let mut book = self.book.borrow_mut();
        let key = format!("{}/{}", book.base, book.next);
        book.next += 1;
        Arc::from(key)
    }
}

/// A saga step about to be called ([`Saga::step`]): set its retry policy
/// and its compensation, then `.await` it.
#[must_use = "a step does nothing until awaited"]
pub struct SagaStep<T> {
    saga: Saga,
    name: String,
    key: Arc<str>,
    f: StepFn<T>,
    policy: RetryPolicy,
    undo: Option<PendingUndo<T>>,
    /// The compensation's own policy, if not the saga's.
    undo_policy: Option<RetryPolicy>,
}

/// A step's compensation, made from the step's result once it succeeds.
struct PendingUndo<T> {
    name: String,
    make: Box<dyn FnOnce(&T) -> UndoFn>,
}

impl<T> fmt::Debug for SagaStep<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SagaStep")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("compensation", &self.undo.as_ref().map(|u| &u.name))
            .finish_non_exhaustive()
    }
}

impl<T> SagaStep<T> {
    /// Retries failed attempts by `policy` instead of the default
    /// ([`crate::Step::retry`]).
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, RetryPolicy, Saga, StepError, Workflow};
    /// # const W: Workflow<(), u32> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let saga = Saga::new(&ctx);
    ///     let attempts = saga
    ///         .step("flaky", |step| async move {
    ///             if step.attempt() < 3 {
    ///                 return Err(StepError::retryable("not yet"));
    ///             }
    ///             Ok(step.attempt())
    ///         })
    ///         .retry(RetryPolicy::default().backoff(
    ///             std::time::Duration::from_millis(1),
    ///             1.0,
    ///             std::time::Duration::from_millis(1),
    ///         ))
    ///         .await?;
    ///     Ok::<_, Failure>(attempts)
    /// });
    /// assert_eq!(engine.execute(W, "w", &()).await?, 3);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Retries this step's compensation by `policy` instead of the saga's
    /// ([`Saga::compensation_retry`]).
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, RetryPolicy, Saga, Workflow};
    /// # const W: Workflow<(), ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let saga = Saga::new(&ctx);
    ///     saga.step("charge", |_| async { Ok(1999) })
    ///         .compensate("refund", |_cents: u64, _| async { Ok(()) })
    ///         .compensation_retry(RetryPolicy::default().attempts(1000))
    ///         .await?;
    ///     Ok::<_, Failure>(())
    /// });
    /// engine.execute(W, "w", &()).await?;
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn compensation_retry(mut self, policy: RetryPolicy) -> Self {
        self.undo_policy = Some(policy);
        self
    }
}

impl<T: Clone + Send + Sync + 'static> SagaStep<T> {
    /// Registers compensation `name` when the step succeeds: `g` is called
    /// with the step's result and runs as a step (key: the step's key and
    /// `/undo`) if the saga compensates. A step that fails registers
    /// nothing: its effect is taken not to have happened. A step a
    /// cancellation interrupts is called again (same key) to learn whether
    /// it did; see the [module docs](crate::saga).
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Saga, Workflow};
    /// # const W: Workflow<(), Vec<String>> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let saga = Saga::new(&ctx);
    ///     let seat = saga
    ///         .step("reserve-seat", |_| async { Ok("12A".to_string()) })
    ///         .compensate("free-seat", |seat: String, step| async move {
    ///             // The compensation gets the step's result and its own key.
    ///             assert!(step.key().ends_with("/undo"));
    ///             Ok(format!("freed {seat}"))
    ///         })
    ///         .await?;
    ///     assert_eq!(seat, "12A");
    ///     Ok::<_, Failure>(saga.compensations())
    /// });
    /// assert_eq!(engine.execute(W, "w", &()).await?, ["free-seat"]);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn compensate<R, G, Fut>(mut self, name: &str, g: G) -> Self
    where
        R: Serialize + 'static,
        G: Fn(T, StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, StepError>> + Send + 'static,
    {
        let g = Arc::new(g);
        let make = Box::new(move |value: &T| -> UndoFn {
            let value = value.clone();
            Arc::new(move |sc| {
                let fut = g(value.clone(), sc);
                Box::pin(async move { as_json(fut.await?) })
            })
        });
        self.undo = Some(PendingUndo {
            name: name.to_string(),
            make,
        });
        self
    }
}

impl<T: Serialize + DeserializeOwned + Send + 'static> IntoFuture for SagaStep<T> {
    type Output = Result<T, StepError>;
    type IntoFuture = SagaStepCall<T>;

    fn into_future(self) -> SagaStepCall<T> {
        SagaStepCall(Box::pin(self.call()))
    }
}

impl<T: Serialize + DeserializeOwned + Send + 'static> SagaStep<T> {
    async fn call(self) -> Result<T, StepError> {
        let SagaStep {
            saga,
            name,
            key,
            f,
            policy,
            undo,
            undo_policy,
        } = self;
        let ctx = &saga.ctx;
        let before = ctx.cancels();
        let error = match issue(ctx, &name, &key, &f, &policy).await {
            Ok(value) => {
                if let Some(undo) = undo {
                    saga.register(&key, undo, undo_policy, &value);
                }
                return Ok(value);
            }
            Err(e) => e,
        };
        let Some(undo) = undo.filter(|_| interrupted(&error, ctx, before)) else {
            return Err(error);
        };
        // Interrupted by a cancellation, its attempt may still take
        // effect: called again under the same key, an idempotent service
        // answers with what it did, and what it did can be undone.
        loop {
            let before = ctx.cancels();
            match issue(ctx, &name, &key, &f, &policy).await {
                Ok(value) => {
                    saga.register(&key, undo, undo_policy, &value);
                    break;
                }
                Err(e) if interrupted(&e, ctx, before) => continue,
                Err(_) => break,
            }
        }
        Err(error)
    }
}

impl Saga {
    /// Registers the compensation of the step keyed `key`, made from its
    /// result.
    fn register<T>(&self, key: &str, undo: PendingUndo<T>, policy: Option<RetryPolicy>, value: &T) {
        let f = (undo.make)(value);
        let mut book = self.book.borrow_mut();
        let policy = policy.unwrap_or_else(|| book.policy.clone());
        book.undo.push(Undo {
            name: undo.name,
            key: Arc::from(format!("{key}/undo")),
            policy,
            f,
        });
    }
}

/// A saga step being awaited.
#[must_use = "a step does nothing until awaited"]
pub struct SagaStepCall<T>(Pin<Box<dyn Future<Output = Result<T, StepError>>>>);

impl<T> fmt::Debug for SagaStepCall<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SagaStepCall")
    }
}

impl<T> Future for SagaStepCall<T> {
    type Output = Result<T, StepError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().0.as_mut().poll(cx)
    }
}

/// Step `name` calling `f` with `key` for its idempotency key.
fn issue<T>(ctx: &Ctx, name: &str, key: &Arc<str>, f: &StepFn<T>, policy: &RetryPolicy) -> Step<T>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    let (key, f) = (Arc::clone(key), Arc::clone(f));
    ctx.step(
        name,
        move |sc: StepContext| f(sc.with_key(Arc::clone(&key))),
    )
    .retry(policy.clone())
}

/// Whether `e` is a cancellation that arrived while the step was pending
/// (rather than a failure the step itself returned).
fn interrupted(e: &StepError, ctx: &Ctx, before: u32) -> bool {
    e.kind.as_deref() == Some("cancelled") && !e.retryable && ctx.cancels() > before
}

/// A compensation's result as the JSON its step records.
fn as_json<R: Serialize>(r: R) -> Result<serde_json::Value, StepError> {
    serde_json::to_value(r)
        .map_err(|e| StepError::fatal(format!("compensation result does not encode: {e}")))
}
