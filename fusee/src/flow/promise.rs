//! Durable promises: a value the workflow waits for that outside code (a
//! webhook, another service, a person clicking a link) supplies later,
//! knowing only the promise's ID.
//!
//! ```
//! use std::time::Duration;
//! use fusee::{Config, Ctx, Engine, Failure, Query, Workflow};
//!
//! const PAY: Workflow<u64, String> = Workflow::new("pay");
//! const LINK: Query<(), String> = Query::new("payment-link");
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), fusee::Error> {
//! let engine = Engine::open(Config::memory()).await?;
//! engine.register(PAY, |ctx: Ctx, cents: u64| async move {
//!     // The payment provider calls back with a receipt number.
//!     let receipt = ctx.promise::<String>();
//!     let id = receipt.id().to_string();
//!     ctx.on_query(LINK, move |()| Ok(id.clone()));
//!     match receipt.wait().timeout(Duration::from_secs(3600)).await? {
//!         Some(number) => Ok(format!("{cents} cents paid: {number}")),
//!         None => Err(Failure::with_kind("timeout", "no payment within an hour")),
//!     }
//! });
//! engine.start(PAY, "pay-7", &1999).await?;
//! // The webhook handler knows the ID (here read with a query; usually
//! // carried in the callback URL a step gave the provider).
//! let id = engine.query("pay-7", LINK, &()).await?;
//! engine.complete(&id, &"R-100".to_string()).await?;
//! assert_eq!(engine.result(PAY, "pay-7").await?, "1999 cents paid: R-100");
//! engine.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Design
//!
//! A promise is built from operations the engine already makes durable,
//! so it inherits their recovery, their crash tests and their place in the
//! journal; no record kind is added.
//!
//! - **Its ID** is `<workflow ID>/promise/<uuid>`, the uuid from
//!   [`Ctx::uuid`]: recorded, so a replay makes the same promise with the
//!   same ID, and unique per promise across runs and continue-as-new. The
//!   ID names its workflow, so [`Engine::complete`] needs no lookup table:
//!   it routes like any call to that workflow.
//! - **Completing it is an update** ([`Engine::update`]'s machinery), to a
//!   handler the promise registers under its own name
//!   (`fusee.promise/<uuid>`) when it is made. Its validator runs on the
//!   run's shard, in order with everything else there, before anything is
//!   recorded: it refuses a second completion and a value that does not
//!   decode as the promise's type, so those are named errors and record
//!   nothing, and two racing completions cannot both be accepted. An
//!   accepted completion is recorded (`Update`, then `UpdateDone`) and
//!   [`Engine::complete`] returns once it is durable. A signal would not
//!   do: a signal sent twice is buffered twice, and whether anyone will
//!   take it is not known when it is accepted.
//! - **The value reaches the waiting code at the update's place in the
//!   journal**: the handler stores it in the promise, where every wait
//!   finds it. Replay delivers the same update at the same place, so the
//!   code sees the value at the same point, and a completion that lost a
//!   race with a wait's timeout is seen by the next wait, never dropped.
//! - **A wait is a signal wait** ([`Ctx::wait_for`]) on the promise's own
//!   name, which no one sends: its timeout is the durable timer, it ends
//!   with a `cancelled` error when the run is cancelled, and when the value
//!   arrives first it is abandoned (a `Waited` record), which disarms its
//!   timer. A wait that finds the value already there records nothing.
//!
//! So a promise costs a `Value` record when it is made, two records when
//! it is completed, and a `Wait` and a `Waited` per wait that has to wait.
//! Each promise keeps a small handler in its run's memory until the run
//! ends: a run making very many promises should continue as new now and
//! then ([`Ctx::continue_as_new`]).
//!
//! Completing fails with a named error, recording nothing, when the ID is
//! not a promise ID ([`Error::BadPromiseId`]), names no workflow or a run
//! that did not make it ([`Error::UnknownPromise`]), was completed before
//! ([`Error::PromiseCompleted`]), or its run has finished
//! ([`Error::PromiseClosed`]); a value of the wrong type is
//! [`Error::Codec`].

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use fusee_core::record::Status;
use serde::Serialize;
use serde::de::{DeserializeOwned, IgnoredAny};

use crate::ctx::{Ctx, HandlerStart, Validator, WaitFor};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::workflow::{Failure, decode, encode};

/// What separates the workflow ID from the uuid in a promise ID.
const ID_MARK: &str = "/promise/";

/// The prefix of a promise's update handler and wait names.
const NAME_PREFIX: &str = "fusee.promise/";

/// The validator's refusal of a second completion.
const ALREADY: &str = "fusee.promise: already completed";

/// The start of the validator's refusal of a value of another type.
const WRONG_TYPE: &str = "fusee.promise: the value does not decode: ";

/// A promise's state in its run's memory, rebuilt by replay like the rest
/// of the code's state.
#[derive(Default)]
struct Slot {
    /// The completing value, once its update was delivered.
    value: RefCell<Option<Vec<u8>>>,
    /// A completion was accepted: set by the validator the moment it lets
    /// one through (so a second, racing one is refused before the first is
    /// delivered) and by the delivery (so a replay knows too).
    claimed: Cell<bool>,
    /// The waiting code's waker.
    waker: RefCell<Option<Waker>>,
}

impl Slot {
    fn fill(&self, bytes: &[u8]) {
        self.claimed.set(true);
        let mut value = self.value.borrow_mut();
        if value.is_none() {
            *value = Some(bytes.to_vec());
        }
        drop(value);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

/// A durable promise of a `T`, made by [`Ctx::promise`]: outside code
/// completes it by its [`id`](Promise::id) with [`Engine::complete`], and
/// the workflow waits for it with [`Promise::wait`]. It is completed at
/// most once; once completed, every wait returns its value at once.
pub struct Promise<T> {
    ctx: Ctx,
    id: String,
    name: String,
    slot: Rc<Slot>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for Promise<T> {
    fn clone(&self) -> Self {
        Self {
            ctx: self.ctx.clone(),
            id: self.id.clone(),
            name: self.name.clone(),
            slot: Rc::clone(&self.slot),
            _type: PhantomData,
        }
    }
}

impl<T> fmt::Debug for Promise<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Promise")
            .field("id", &self.id)
            .field("completed", &self.slot.value.borrow().is_some())
            .finish()
    }
}

impl Ctx {
    /// A new durable promise of a `T`: an ID to hand to outside code
    /// (through a step, a query, a signal to another workflow), which
    /// completes it with [`Engine::complete`]; the workflow waits for it
    /// with [`Promise::wait`], with a timeout if it likes. The ID is the
    /// same on every replay of this run and unique to this promise. Records
    /// one value (the ID's uuid); see the [module docs](crate::promise) for
    /// how completion works.
    ///
    /// ```
    /// use fusee::{Config, Ctx, Engine, Failure, Query, Workflow};
    ///
    /// const SIGN: Workflow<(), bool> = Workflow::new("sign");
    /// const LINK: Query<(), String> = Query::new("link");
    ///
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// let engine = Engine::open(Config::memory()).await?;
    /// engine.register(SIGN, |ctx: Ctx, ()| async move {
    ///     let signed = ctx.promise::<bool>();
    ///     assert!(signed.id().starts_with("contract-1/promise/"));
    ///     let id = signed.id().to_string();
    ///     ctx.on_query(LINK, move |()| Ok(id.clone()));
    ///     Ok::<_, Failure>(signed.wait().await?.unwrap_or(false))
    /// });
    /// engine.start(SIGN, "contract-1", &()).await?;
    /// let id = engine.query("contract-1", LINK, &()).await?;
    /// engine.complete(&id, &true).await?;
    /// assert!(engine.result(SIGN, "contract-1").await?);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn promise<T: DeserializeOwned + 'static>(&self) -> Promise<T> {
        let uuid = self.uuid().hyphenated().to_string();
        let id = format!("{}{ID_MARK}{uuid}", self.workflow_id());
        let name = format!("{NAME_PREFIX}{uuid}");
        let slot = Rc::new(Slot::default());
        let checked = Rc::clone(&slot);
        // Runs live only, when a completion is offered: refusals record
        // nothing.
        let validate: Validator = Box::new(move |bytes: &[u8]| {
            if checked.claimed.get() {
                return Err(ALREADY.to_string());
            }
            decode::<T>(bytes).map_err(|e| format!("{WRONG_TYPE}{e}"))?;
            checked.claimed.set(true);
            Ok(())
        });
        // Runs at the completion's place in the journal, live and in replay.
        let filled = Rc::clone(&slot);
        let start: HandlerStart = Box::new(move |bytes: &[u8]| {
            filled.fill(bytes);
            Box::pin(std::future::ready(
                encode(&()).map_err(|e| Failure::with_kind("codec", e.to_string())),
            ))
        });
        self.on_update_name(name.clone(), validate, start);
        Promise {
            ctx: self.clone(),
            id,
            name,
            slot,
            _type: PhantomData,
        }
    }
}

impl<T: DeserializeOwned> Promise<T> {
    /// The promise's ID, `<workflow ID>/promise/<uuid>`: what outside code
    /// passes to [`Engine::complete`]. It names the workflow, so anyone
    /// holding it can complete the promise: hand it out as you would a
    /// capability.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # const W: Workflow<(), String> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let p = ctx.promise::<u32>();
    ///     Ok::<_, Failure>(p.id().to_string())
    /// });
    /// let id = engine.execute(W, "job-9", &()).await?;
    /// let uuid = id.strip_prefix("job-9/promise/").expect("the workflow ID first");
    /// assert_eq!(uuid.len(), 36);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Waits for the promise's value: at once if it was completed before,
    /// else until [`Engine::complete`] completes it. `None` only with
    /// [`PromiseWait::timeout`], when it passes first; the promise stays
    /// open, and a later wait takes a value that comes after. `Err` (kind
    /// `cancelled`) if the run is cancelled meanwhile.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use fusee::{Clock, Config, Ctx, Engine, Failure, VirtualClock, Workflow};
    /// # const W: Workflow<(), String> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let answer = ctx.promise::<String>();
    ///     // Nobody answers within the minute: the wait gives up, the
    ///     // promise stays open.
    ///     let first = answer.wait().timeout(Duration::from_millis(20)).await?;
    ///     assert_eq!(first, None);
    ///     Ok::<_, Failure>(answer.id().to_string())
    /// });
    /// let id = engine.execute(W, "w-1", &()).await?;
    /// // The run has finished: its promise can no longer be completed.
    /// assert!(matches!(
    ///     engine.complete(&id, &"late".to_string()).await,
    ///     Err(fusee::Error::PromiseClosed { .. })
    /// ));
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait(&self) -> PromiseWait<T> {
        PromiseWait {
            ctx: self.ctx.clone(),
            name: self.name.clone(),
            slot: Rc::clone(&self.slot),
            timeout: None,
            wait: None,
            _type: PhantomData,
        }
    }
}

/// A wait for a promise's value being awaited ([`Promise::wait`]).
#[must_use = "a wait does nothing until awaited"]
pub struct PromiseWait<T> {
    ctx: Ctx,
    name: String,
    slot: Rc<Slot>,
    timeout: Option<Duration>,
    /// The signal wait that times the wait out and ends it on a
    /// cancellation, issued at the first poll that finds no value.
    wait: Option<WaitFor<IgnoredAny>>,
    _type: PhantomData<fn() -> T>,
}

impl<T> PromiseWait<T> {
    /// Gives up after `d`: the wait then returns `None`, and the promise
    /// stays open for a later wait.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # const W: Workflow<(), Option<u8>> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let p = ctx.promise::<u8>();
    ///     Ok::<_, Failure>(p.wait().timeout(Duration::from_millis(10)).await?)
    /// });
    /// assert_eq!(engine.execute(W, "w-2", &()).await?, None);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }
}

impl<T: DeserializeOwned> PromiseWait<T> {
    /// The value, decoded, if the promise was completed.
    fn value(&self) -> Option<Result<Option<T>, Failure>> {
        let value = self.slot.value.borrow();
        let bytes = value.as_ref()?;
        Some(decode(bytes).map(Some).map_err(|e| {
            Failure::with_kind(
                "codec",
                format!("the promise's value does not decode as its type: {e}"),
            )
        }))
    }
}

impl<T: DeserializeOwned> Future for PromiseWait<T> {
    type Output = Result<Option<T>, Failure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Nothing in it is pinned structurally (WaitFor is Unpin).
        let this = self.get_mut();
        // The value first: when it and the timeout (or a cancellation)
        // both arrived, replay delivers them in the same order and this
        // answers the same.
        if let Some(done) = this.value() {
            // Dropping the signal wait records its abandonment.
            this.wait = None;
            return Poll::Ready(done);
        }
        let wait = this.wait.get_or_insert_with(|| {
            let w = this.ctx.wait_for_name(&this.name);
            match this.timeout {
                Some(d) => w.timeout(d),
                None => w,
            }
        });
        match Pin::new(wait).poll(cx) {
            Poll::Pending => {
                *this.slot.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
            Poll::Ready(Ok(None)) => Poll::Ready(Ok(None)),
            Poll::Ready(Ok(Some(_))) => Poll::Ready(Err(Failure::with_kind(
                "promise",
                format!(
                    "signal {:?} is reserved for the promise's own wait",
                    this.name
                ),
            ))),
            Poll::Ready(Err(cancelled)) => Poll::Ready(Err(cancelled)),
        }
    }
}

impl Engine {
    /// Completes promise `promise` (an ID from [`Promise::id`]) with
    /// `value`: the workflow's waits return it. Returns once the
    /// completion is durable; it then reaches the workflow exactly once,
    /// across crashes. Nothing is recorded when it fails: a malformed ID is
    /// [`Error::BadPromiseId`], an ID whose workflow or run is not there
    /// [`Error::UnknownPromise`], a promise completed before
    /// [`Error::PromiseCompleted`] (a retry after a lost answer gets this
    /// when the first completion took), a promise whose run has finished
    /// [`Error::PromiseClosed`], a value that does not decode as the
    /// promise's type [`Error::Codec`].
    ///
    /// ```
    /// use fusee::{Config, Ctx, Engine, Error, Failure, Query, Signal, Workflow};
    ///
    /// const W: Workflow<(), u32> = Workflow::new("w");
    /// const ID: Query<(), String> = Query::new("id");
    /// const DONE: Signal<()> = Signal::new("done");
    ///
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |ctx: Ctx, ()| async move {
    ///     let p = ctx.promise::<u32>();
    ///     let id = p.id().to_string();
    ///     ctx.on_query(ID, move |()| Ok(id.clone()));
    ///     let v = p.wait().await?.unwrap_or(0);
    ///     ctx.wait_for(&DONE).await?;
    ///     Ok::<_, Failure>(v)
    /// });
    /// engine.start(W, "w-3", &()).await?;
    /// let id = engine.query("w-3", ID, &()).await?;
    /// assert!(matches!(
    ///     engine.complete(&id, &"seven").await,
    ///     Err(Error::Codec { .. })
    /// ));
    /// engine.complete(&id, &7u32).await?;
    /// assert!(matches!(
    ///     engine.complete(&id, &8u32).await,
    ///     Err(Error::PromiseCompleted { .. })
    /// ));
    /// assert!(matches!(
    ///     engine.complete("w-3", &7u32).await,
    ///     Err(Error::BadPromiseId { .. })
    /// ));
    /// engine.signal("w-3", DONE, &()).await?;
    /// assert_eq!(engine.result(W, "w-3").await?, 7);
    /// assert!(matches!(
    ///     engine.complete(&id, &9u32).await,
    ///     Err(Error::PromiseClosed { .. })
    /// ));
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn complete<T: Serialize + ?Sized>(&self, promise: &str, value: &T) -> Result<()> {
        let (workflow, uuid) = parse_id(promise)?;
        let payload = encode(value).map_err(|e| Error::codec("promise value", e))?;
        let name = format!("{NAME_PREFIX}{uuid}");
        let unknown = |reason: String| Error::UnknownPromise {
            promise: promise.to_string(),
            reason,
        };
        // The shard polls the run's code before it looks for the handler,
        // so a run loaded from the run store or recovered just now has
        // registered it.
        let answer = self.update_name(workflow, &name, payload).await;
        match answer {
            Ok(r) if r.status == Status::Ok => Ok(()),
            // The handler itself never fails; a run whose code lost it
            // (changed code) says so here.
            Ok(r) => Err(Error::Failed {
                id: workflow.to_string(),
                status: r.status.as_str(),
                failure: decode::<Failure>(&r.payload)
                    .unwrap_or_else(|_| Failure::new(String::from_utf8_lossy(&r.payload))),
            }),
            Err(Error::NotFound { id }) => Err(unknown(format!("no workflow {id:?}"))),
            Err(Error::UnknownUpdate { id, .. }) => Err(unknown(format!(
                "workflow {id:?} is running, but its current run made no such promise"
            ))),
            Err(Error::Finished { id, status }) => Err(Error::PromiseClosed {
                promise: promise.to_string(),
                id,
                status,
            }),
            Err(Error::Rejected { reason, .. }) if reason == ALREADY => {
                Err(Error::PromiseCompleted {
                    promise: promise.to_string(),
                })
            }
            Err(Error::Rejected { reason, .. }) if reason.starts_with(WRONG_TYPE) => {
                Err(Error::Codec {
                    what: "promise value",
                    id: None,
                    detail: reason[WRONG_TYPE.len()..].to_string(),
                })
            }
            Err(e) => Err(e),
        }
    }
}

/// The workflow ID and uuid of promise ID `promise`.
fn parse_id(promise: &str) -> Result<(&str, &str)> {
    let bad = |reason| Error::BadPromiseId {
        promise: promise.to_string(),
        reason,
    };
    // The uuid holds no '/': the last mark ends the workflow ID, whatever
    // the ID holds.
    let (workflow, uuid) = promise
        .rsplit_once(ID_MARK)
        .ok_or_else(|| bad("it does not have the form <workflow ID>/promise/<uuid>"))?;
    if workflow.is_empty() {
        return Err(bad("its workflow ID is empty"));
    }
    let parsed =
        uuid::Uuid::try_parse(uuid).map_err(|_| bad("what follows /promise/ is not a uuid"))?;
    // Only the form Ctx::promise writes: the handler's name is built from
    // these characters, so another spelling of the same uuid would miss.
    if parsed.hyphenated().to_string() != uuid {
        return Err(bad("its uuid is not in lower-case hyphenated form"));
    }
    Ok((workflow, uuid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_back_to_their_workflow_and_uuid() {
        let uuid = "0b6e6d53-2a47-4d1c-9f4e-2d1b8c7a6e50";
        let id = format!("orders/promise/42{ID_MARK}{uuid}");
        let (workflow, got) = parse_id(&id).expect("a promise ID");
        assert_eq!((workflow, got), ("orders/promise/42", uuid));
        for bad in [
            "",
            "w",
            "w/promise/",
            &format!("{ID_MARK}{uuid}"),
            "w/promise/not-a-uuid",
            &format!("w{ID_MARK}{}", uuid.to_uppercase()),
            &format!("w{ID_MARK}{}", uuid.replace('-', "")),
        ] {
            assert!(
                matches!(parse_id(bad), Err(Error::BadPromiseId { .. })),
                "{bad:?} parsed"
            );
        }
    }
}
