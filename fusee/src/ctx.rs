//! [`Ctx`]: what workflow code calls. Every operation goes through the
//! run's [`RunMachine`]: replayed from the journal when the journal holds
//! it, recorded when it is new.
//!
//! Workflow code runs on its shard's thread, polled by the shard loop, and
//! must be deterministic: same calls, same order, on every run. Time,
//! randomness and IDs come from [`Ctx::now`], [`Ctx::random`] and
//! [`Ctx::uuid`] (recorded, so a replay sees the same); effects go in
//! steps ([`Ctx::step`]), which run on the embedder's tokio runtime once
//! the records they depend on are durable.
//!
//! A departure from the journal ([`fusee_core::run::DeterminismError`])
//! stops the run where it is: the operation never completes, nothing is
//! recorded for it, [`crate::Engine::describe`] shows the error, and a
//! caller waiting on the run's result gets it as
//! [`crate::Error::Determinism`] until the run replays with fixed code.

use std::cell::RefCell;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fusee_core::record::{Name, Payload, RecordBuf, Seq, Status, value_kind};
use fusee_core::run::{Issued, Patched, ValueAnswer};
use futures_util::future::Either;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::registry::RunFuture;
use crate::retry::RetryPolicy;
/// What flow control's promises register for an update made at run time.
pub(crate) use crate::runtime::run::{HandlerStart, Validator};
use crate::runtime::run::{Outcome, QueryHandler, StepExtra, UpdateHandler};
use crate::step::{StepContext, StepError, StepFn};
use crate::workflow::{Failure, Query, Signal, Update, Workflow, decode, encode};

/// A live run's state as its code sees it (owned by the runtime:
/// `runtime/run.rs`).
pub(crate) type RunState = crate::runtime::run::RunState<Ctx>;

/// The registered workflow types, whose code is called with a [`Ctx`].
pub(crate) type Registry = crate::registry::Registry<Ctx>;

/// Runs workflow code `f` outside the engine's own frames: a panic in it is
/// `Err` with the panic's message, not an unwinding shard thread.
pub(crate) fn catch_panic<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| panic_message(&*p))
}

/// A panic's message: its payload when that is a string.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// The marker a synchronous operation unwinds with when the run cannot go
/// on (a determinism error): the shard loop catches it and stops the run
/// without failing it.
pub(crate) struct Stopped;

/// The context of one workflow run: its operations. Cheap to clone; valid
/// only inside the run's code.
///
/// # Joining and racing operations
///
/// An operation takes its place in the journal when its future is first
/// polled, so code must poll concurrent operations in the same order on
/// every run. `futures_util::future::join_all`, `tokio::join!` and
/// `tokio::select!` with `biased;` poll in program order and replay alike
/// (checked at every crash point by the test kit's `crash_everywhere`:
/// `tests/testing_kit.rs`). An unbiased `tokio::select!` polls its branches
/// in a random order: two operations it first polls are journalled in
/// either order, and a replay may stop with a determinism error naming
/// both. Write `biased;` in every select over a run's operations, or use
/// [`Ctx::select`] and [`Ctx::join_all`], which poll in a fixed order.
#[derive(Clone)]
pub struct Ctx {
    state: Rc<RefCell<RunState>>,
}

impl fmt::Debug for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state.borrow();
        f.debug_struct("Ctx")
            .field("run", &s.run())
            .field("id", &&**s.id())
            .finish_non_exhaustive()
    }
}

impl Ctx {
    pub(crate) fn new(state: Rc<RefCell<RunState>>) -> Self {
        Self { state }
    }

    /// The workflow ID.
    pub fn workflow_id(&self) -> String {
        self.state.borrow().id().to_string()
    }

    /// The run's number within its shard.
    pub fn run_id(&self) -> u64 {
        self.state.borrow().run()
    }

    /// A step: `f` runs with effects (calls to other services), on the
    /// engine's tokio runtime, once the run's records so far are durable;
    /// each attempt's start is recorded first (a `Began` record: the
    /// first attempt's at the call, in the flush of the records before
    /// it, so a chain of steps pays no extra sync), so code changed while
    /// a step is in flight, calling another step there after a restart,
    /// is a [`DeterminismError`](crate::Error::Determinism) naming both;
    /// its result (or its failure, once retries are exhausted) is
    /// recorded, and replays return it without running `f` again. Failed
    /// attempts are retried by the default [`RetryPolicy`]; set another
    /// with [`Step::retry`]. `f` may run more than once (a retried attempt,
    /// or a crash before its result was durable): make its effects
    /// idempotent with [`StepContext::key`]. An attempt may be given a
    /// timeout ([`Step::timeout`]), a heartbeat timeout
    /// ([`Step::heartbeat_timeout`], with [`StepContext::heartbeat`]) and
    /// all attempts a limit together ([`RetryPolicy::schedule_to_close`]):
    /// see [`Step`'s time limits](Step#time-limits).
    ///
    /// A panic in `f` (or in its future) does not take the engine down: it
    /// is a failed attempt, retryable, of kind `"panic"` with the panic's
    /// message, retried by the step's policy like any other failed attempt
    /// ([`RetryPolicy::non_retryable`] with `"panic"` makes it final).
    ///
    /// Each attempt's future is polled once on the shard's thread (in the
    /// runtime's context) before it becomes a task: a step that ends
    /// without waiting costs no task. So its code up to its first await
    /// that waits holds up the shard: blocking or heavy work belongs in
    /// `tokio::task::spawn_blocking` (a first poll over a millisecond makes
    /// the shard run that step's attempts as tasks from then on).
    pub fn step<T, F, Fut>(&self, name: &str, f: F) -> Step<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: Fn(StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, StepError>> + Send + 'static,
    {
        let f: StepFn = Box::new(move |sc: StepContext| {
            // The name only for the error: a shared name's clone, no copy.
            let name = sc.shared_name();
            let fut = f(sc);
            Box::pin(async move {
                let value = fut.await?;
                serde_json::to_vec(&value).map_err(|e| {
                    StepError::fatal(format!(
                        "step {:?}: its result does not encode as JSON: {e}",
                        &*name
                    ))
                })
            })
        });
        // Test kit hook (feature `testing`): a step mocked by name runs the
        // mock's function, which may call this one.
        #[cfg(feature = "testing")]
        let f = match self.state.borrow().registry().step_mock(name) {
            Some(wrap) => wrap(f),
            None => f,
        };
        Step {
            ctx: self.clone(),
            name: step_name(name),
            f,
            extra: None,
            _type: PhantomData,
        }
    }

    /// A durable sleep: returns once `duration` has passed, across
    /// restarts. A year-long sleep costs a table entry. `Err` (kind
    /// `cancelled`) if the run is cancelled meanwhile.
    pub fn sleep(&self, name: &str, duration: Duration) -> Sleep {
        Sleep {
            cancels: self.state.borrow().cancels(),
            ctx: self.clone(),
            name: Name::from(name),
            duration,
            seq: None,
        }
    }

    /// Waits for the next `signal` sent to this workflow (signals sent
    /// before the wait are buffered and delivered in order). `None` only
    /// with [`WaitFor::timeout`], when it passes first.
    pub fn wait_for<T: DeserializeOwned>(&self, signal: &Signal<T>) -> WaitFor<T> {
        WaitFor {
            cancels: self.state.borrow().cancels(),
            ctx: self.clone(),
            name: Name::from(signal.name()),
            timeout: None,
            seq: None,
            done: false,
            _type: PhantomData,
        }
    }

    /// The first of `a` and `b` to finish; the other is dropped (its
    /// operation abandoned, as a lost `select!` branch's is). `a` is polled
    /// before `b` every time, so the two operations take their places in
    /// the journal in the same order live and on replay (an unbiased
    /// `tokio::select!` polls in a random order: see [`Ctx`]).
    pub async fn select<A: Future, B: Future>(&self, a: A, b: B) -> Either<A::Output, B::Output> {
        let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
        std::future::poll_fn(move |cx| {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                return Poll::Ready(Either::Left(v));
            }
            b.as_mut().poll(cx).map(Either::Right)
        })
        .await
    }

    /// Every future's output, in the order given. Each poll polls the
    /// unfinished futures in that order, so their operations take their
    /// places in the journal alike live and on replay, however many there
    /// are (`futures_util::future::join_all` switches to an order set by
    /// wake-ups past 30 futures).
    pub async fn join_all<F: Future>(
        &self,
        futures: impl IntoIterator<Item = F>,
    ) -> Vec<F::Output> {
        let mut pending: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
        let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
        let mut left = pending.len();
        std::future::poll_fn(move |cx| {
            for (fut, out) in pending.iter_mut().zip(outputs.iter_mut()) {
                if out.is_none()
                    && let Poll::Ready(v) = fut.as_mut().poll(cx)
                {
                    *out = Some(v);
                    left -= 1;
                }
            }
            if left > 0 {
                return Poll::Pending;
            }
            Poll::Ready(outputs.iter_mut().filter_map(Option::take).collect())
        })
        .await
    }

    /// The current time, recorded: a replay sees the same.
    pub fn now(&self) -> SystemTime {
        let bytes = self.value(value_kind::NOW, |now_ms| now_ms.to_le_bytes().to_vec());
        UNIX_EPOCH + Duration::from_millis(value_u64(&bytes))
    }

    /// Sets (upserts) the run's search attributes: names not mentioned
    /// keep their values, [`SearchAttributes::remove`](crate::SearchAttributes::remove)
    /// removes one. Recorded as an `Attributes` record after the records
    /// the code asked for before it; a replay records nothing again (the
    /// code's `n`th call is matched with the journal's `n`th such record,
    /// see [`crate::attrs`]). `Engine::list` finds the run by them
    /// ([`ListFilter::attribute`](crate::ListFilter::attribute)). A bad
    /// name or value (kind `invalid-attribute`), or a set past the payload
    /// limit (`too-large`), is refused and nothing is recorded.
    pub fn set_attributes(&self, attributes: &crate::SearchAttributes) -> Result<(), Failure> {
        attributes
            .check()
            .map_err(|e| Failure::with_kind("invalid-attribute", e.to_string()))?;
        let payload = attributes.payload(true);
        let mut s = self.state.borrow_mut();
        s.check_payload("search attributes", payload.len())?;
        s.set_attributes(payload);
        Ok(())
    }

    /// A random number, recorded: a replay sees the same.
    pub fn random(&self) -> u64 {
        let bytes = self.value(value_kind::RANDOM, |_| {
            fastrand::u64(..).to_le_bytes().to_vec()
        });
        value_u64(&bytes)
    }

    /// A random (version 4) UUID, recorded: a replay sees the same.
    pub fn uuid(&self) -> uuid::Uuid {
        let bytes = self.value(value_kind::UUID, |_| {
            let mut b = [0u8; 16];
            fastrand::fill(&mut b);
            uuid::Builder::from_random_bytes(b)
                .into_uuid()
                .as_bytes()
                .to_vec()
        });
        bytes
            .get(..16)
            .and_then(|b| uuid::Uuid::from_slice(b).ok())
            .unwrap_or_default()
    }

    /// Opens this run's stream `name`: a [`StreamSender`](crate::StreamSender)
    /// of chunks that clients read with [`crate::Engine::subscribe`]
    /// (the [stream docs](crate::stream)). Opening is an operation,
    /// recorded (a `Value` naming the stream): replayed, the journal's
    /// opening is found again, and code that opens another name there
    /// stops the run with both names. Move the sender into a step to send:
    /// the step that calls a language model sends its tokens as they come.
    /// A name is opened once per run (a second opening's sends are
    /// refused).
    pub fn stream(&self, name: &str) -> crate::StreamSender {
        let recorded = self.value(value_kind::STREAM, |_| name.as_bytes().to_vec());
        let mut s = self.state.borrow_mut();
        // The operation `value` just took.
        let seq = s.machine().next_seq().saturating_sub(1);
        if recorded != name.as_bytes() {
            s.refuse(format!(
                "determinism: the journal opened stream {:?} at operation {seq}, the code opens {name:?}",
                String::from_utf8_lossy(&recorded),
            ));
            drop(s);
            std::panic::resume_unwind(Box::new(Stopped));
        }
        crate::StreamSender::new(
            s.registry().host(),
            #[cfg(feature = "testing")]
            s.registry().sim_post(),
            std::sync::Arc::from(&**s.id()),
            std::sync::Arc::from(name),
            s.run(),
            seq,
        )
    }

    /// Sends `signal` with `value` to workflow `id` (on any shard): it
    /// leaves once this call's record is durable and lands in the target's
    /// journal exactly once, even across crashes of either side. A target
    /// that does not exist or has finished drops it. A value that does not
    /// encode, or whose encoding exceeds [`crate::Config::max_payload`], is
    /// an `Err` here and nothing is sent.
    pub fn signal<T: Serialize>(
        &self,
        id: &str,
        signal: Signal<T>,
        value: &T,
    ) -> Result<(), Failure> {
        let payload = encode(value).map_err(|e| {
            Failure::with_kind(
                "codec",
                format!("signal {:?} does not encode: {e}", signal.name()),
            )
        })?;
        self.state
            .borrow()
            .check_payload(&format!("signal {:?}", signal.name()), payload.len())?;
        self.send(id, signal.name(), payload);
        Ok(())
    }

    /// Asks workflow `id` (on any shard) to cancel, with `reason`: its
    /// pending operations end with a `cancelled` error its code may catch
    /// to clean up.
    pub fn cancel(&self, id: &str, reason: &str) {
        self.send(
            id,
            fusee_core::shard::CANCEL_SIGNAL,
            reason.as_bytes().to_vec(),
        );
    }

    fn send(&self, target: &str, name: &str, payload: Vec<u8>) {
        let mut s = self.state.borrow_mut();
        let run = s.run();
        match s.issue(|m| m.send(target, name)) {
            Some(Issued::Append(seq)) => s.ask(RecordBuf::Send {
                run,
                seq,
                target: Name::from(target),
                name: Name::from(name),
                payload: Payload::from(payload.as_slice()),
            }),
            Some(Issued::Recorded(_)) => {}
            None => {
                drop(s);
                std::panic::resume_unwind(Box::new(Stopped));
            }
        }
    }

    /// Starts `workflow` as child `id` with `input` (on any shard) and
    /// returns its result; a child that fails returns its failure. When
    /// this run finishes first, the child is terminated (the default; see
    /// [`ChildCall::on_parent_close`]). A type no engine registered is an
    /// error at once, and nothing is recorded.
    pub fn child<I: Serialize, O: DeserializeOwned>(
        &self,
        workflow: Workflow<I, O>,
        id: &str,
        input: &I,
    ) -> ChildCall<O> {
        ChildCall {
            ctx: self.clone(),
            wtype: workflow.name(),
            id: Name::from(id),
            input: encode(input).map_err(|e| e.to_string()),
            close: ParentClose::Terminate,
            detached: false,
            seq: None,
            cancels: self.state.borrow().cancels(),
            _type: PhantomData,
        }
    }

    /// Whether this run takes patch `id`'s new branch: true for runs that
    /// reach this point with code that has the patch (a marker is
    /// recorded), false for runs whose journal shows older code here. Lets
    /// new code change a running workflow's calls without breaking its
    /// replay.
    pub fn patched(&self, id: &str) -> bool {
        let mut s = self.state.borrow_mut();
        let run = s.run();
        match s.issue(|m| m.patched(id)) {
            Some(Patched::Append(seq)) => {
                s.ask(RecordBuf::Patch {
                    run,
                    seq,
                    id: Name::from(id),
                });
                true
            }
            Some(p) => p.is_patched(),
            None => {
                drop(s);
                std::panic::resume_unwind(Box::new(Stopped));
            }
        }
    }

    /// Ends this run and starts a new run of the same workflow and ID with
    /// `input`, so a long-lived workflow keeps a short journal. The future
    /// never completes: return it (`return ctx.continue_as_new(&next).await`).
    ///
    /// Signals this run received and did not consume are not carried over:
    /// take them first (`wait_for` with a short timeout, in a loop) and pass
    /// what matters in `input`, or use updates, which are answered before
    /// the run ends.
    pub fn continue_as_new<I: Serialize, O>(&self, input: &I) -> ContinueAsNew<O> {
        let checked = encode(input)
            .map_err(|e| {
                Failure::with_kind(
                    "codec",
                    format!("the next run's input does not encode: {e}"),
                )
            })
            .and_then(|bytes| {
                let s = self.state.borrow();
                s.check_payload("the next run's input", bytes.len())?;
                Ok(bytes)
            });
        let error = match checked {
            Ok(bytes) => {
                self.state.borrow_mut().continue_as_new(bytes);
                None
            }
            Err(f) => Some(f),
        };
        ContinueAsNew {
            error,
            _type: PhantomData,
        }
    }

    /// Registers `handler` for `update`: callers' updates
    /// ([`crate::Engine::update`]) are recorded and run it at their place in
    /// the journal, as part of this run's code (its operations replay like
    /// the rest). Register handlers when the run starts, before anything
    /// that waits: an update accepted before its handler exists fails.
    pub fn on_update<I, O, F, Fut>(&self, update: Update<I, O>, handler: F)
    where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        F: Fn(I) -> Fut + 'static,
        Fut: Future<Output = Result<O, Failure>> + 'static,
    {
        self.register_update(update, None, handler);
    }

    /// [`Ctx::on_update`] with a validator: an update it refuses (with a
    /// reason) is answered with that reason and records nothing. It sees
    /// the argument only, before anything is recorded.
    pub fn on_update_validated<I, O, V, F, Fut>(
        &self,
        update: Update<I, O>,
        validate: V,
        handler: F,
    ) where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        V: Fn(&I) -> Result<(), String> + 'static,
        F: Fn(I) -> Fut + 'static,
        Fut: Future<Output = Result<O, Failure>> + 'static,
    {
        let check = Box::new(move |bytes: &[u8]| match decode::<I>(bytes) {
            Ok(input) => validate(&input),
            Err(e) => Err(format!("the update's argument does not decode: {e}")),
        });
        self.register_update(update, Some(check), handler);
    }

    fn register_update<I, O, F, Fut>(
        &self,
        update: Update<I, O>,
        validate: Option<Validator>,
        handler: F,
    ) where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        F: Fn(I) -> Fut + 'static,
        Fut: Future<Output = Result<O, Failure>> + 'static,
    {
        let start = Box::new(move |bytes: &[u8]| -> RunFuture {
            match decode::<I>(bytes) {
                Ok(input) => {
                    let fut = handler(input);
                    Box::pin(async move {
                        let out = fut.await?;
                        encode(&out).map_err(|e| {
                            Failure::with_kind(
                                "codec",
                                format!("update result does not encode: {e}"),
                            )
                        })
                    })
                }
                Err(e) => {
                    let f = Failure::with_kind(
                        "codec",
                        format!("update argument does not decode: {e}"),
                    );
                    Box::pin(async move { Err(f) })
                }
            }
        });
        self.state
            .borrow_mut()
            .on_update(update.name().to_string(), UpdateHandler { validate, start });
    }

    /// Registers `handler` for `query`: callers' queries
    /// ([`crate::Engine::query`]) call it with the argument and return its
    /// answer, recording nothing. It must only read the run's state. After
    /// the run finished, a query replays its kept journal with the code
    /// registered then, and this handler answers over the state the
    /// replay left (the run's end): registered before the code's end, it
    /// answers for as long as the run's history is kept.
    pub fn on_query<I, O, F>(&self, query: Query<I, O>, handler: F)
    where
        I: DeserializeOwned + 'static,
        O: Serialize + 'static,
        F: Fn(I) -> Result<O, Failure> + 'static,
    {
        let call: QueryHandler = Box::new(move |bytes: &[u8]| {
            let input = decode::<I>(bytes).map_err(|e| {
                Failure::with_kind("codec", format!("query argument does not decode: {e}"))
            })?;
            let out = handler(input)?;
            encode(&out).map_err(|e| {
                Failure::with_kind("codec", format!("query answer does not encode: {e}"))
            })
        });
        self.state
            .borrow_mut()
            .on_query(query.name().to_string(), call);
    }

    /// A recorded value of `kind`: the journal's, or `make(now_ms)`'s,
    /// recorded. Unwinds with [`Stopped`] when the run cannot go on.
    fn value(&self, kind: u8, make: impl FnOnce(u64) -> Vec<u8>) -> Vec<u8> {
        let mut s = self.state.borrow_mut();
        let now_ms = s.now_ms();
        let run = s.run();
        let answer = match s.issue(|m| {
            m.value(kind).map(|a| match a {
                ValueAnswer::Recorded { value, .. } => Ok(value.to_vec()),
                ValueAnswer::Append(seq) => Err(seq),
            })
        }) {
            Some(answer) => answer,
            None => {
                drop(s);
                std::panic::resume_unwind(Box::new(Stopped));
            }
        };
        let value = match answer {
            Ok(value) => value,
            Err(seq) => {
                let value = make(now_ms);
                s.ask(RecordBuf::Value {
                    run,
                    seq,
                    kind,
                    value: Payload::from(value.as_slice()),
                });
                value
            }
        };
        if kind == value_kind::NOW {
            s.saw_time(value_u64(&value));
        }
        value
    }
}

/// A recorded 8-byte value (`now()` in ms, `random()`), little-endian; 0
/// if it is shorter (no value this crate records is).
pub(crate) fn value_u64(bytes: &[u8]) -> u64 {
    bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// A step about to be called: set its retry policy, time limits and
/// cancellation policy, then `.await` it.
///
/// # Cancellation
///
/// A step's running attempt is told to stop ([`StepContext::cancelled`]
/// resolves, [`StepContext::cancel_reason`] says why: a [`crate::StepCancel`])
/// when its run is cancelled ([`crate::Engine::cancel`]) or ends
/// (terminated, or its code returned without awaiting it), when the
/// workflow drops the step's future (it lost a `select!`), or when the
/// attempt times out. After a cancel (of the run, or the future dropped)
/// no further attempt of the step starts: one due is recorded failed with
/// kind `cancelled`, and a failure the running attempt returns is final.
/// [`on_cancel`](Step::on_cancel) says whether the workflow's await waits
/// for the step's end ([`OnCancel::Wait`]) or ends at once with a
/// `cancelled` error ([`OnCancel::Abandon`], the default).
///
/// Being told is all the engine does to a running attempt, except past a
/// time limit (below), where its future is dropped. An attempt of a step
/// without a limit that does not listen runs until its function returns,
/// whatever happened to its run meanwhile: after a cancel, a cancel's
/// grace ([`crate::Engine::cancel_with_grace`]; the grace stops new
/// attempts, not running ones), a terminate, or its run's end, its result
/// is then recorded if the run still waits for it and dropped if not. To
/// bound such a step, listen, or give it a [`timeout`](Step::timeout).
///
/// # Time limits
///
/// Three limits fail a step that takes too long, each with a
/// [`StepError`] of kind `timeout` whose message names the limit:
///
/// - [`timeout`](Step::timeout) (Temporal's start-to-close): one attempt
///   runs at most this long; past it the attempt fails and the retry
///   policy retries it like any failure (a policy that lists `"timeout"`
///   as [non-retryable](RetryPolicy::non_retryable) makes it final).
/// - [`heartbeat_timeout`](Step::heartbeat_timeout): an attempt that goes
///   this long without a [`StepContext::heartbeat`] (counted from its
///   start, then from its latest heartbeat) fails the same way: a stuck
///   attempt is noticed long before its overall timeout.
/// - [`RetryPolicy::schedule_to_close`]: all attempts together, from the
///   first attempt's start, retry delays included; past it the step fails
///   for good.
///
/// A timed-out attempt's future is dropped (cancelled) on the tokio
/// runtime at its next poll: its work stops at the await it was waiting
/// in, and a result it would have produced is never recorded. Code that
/// blocks its thread without awaiting runs on until it awaits (put it in
/// `spawn_blocking`, which is not cancelled either), and work it handed
/// elsewhere (a spawned task, a request already sent) may still happen:
/// make effects idempotent with [`StepContext::key`], as for any retried
/// attempt. Only a step with a limit can be cancelled so (its future is
/// wrapped for it; a step without one pays nothing). The limits are measured by the engine's clock from
/// the attempt's start (once its `Began` is durable); an attempt run
/// again after a crash counts from its new start, while the
/// schedule-to-close limit counts from the first attempt's recorded
/// `Began`, across crashes.
#[must_use = "a step does nothing until awaited"]
pub struct Step<T> {
    ctx: Ctx,
    name: Name,
    f: StepFn,
    /// Its policy and time limits when not the defaults (`None`: most
    /// steps, which move and keep none).
    extra: Option<Box<StepExtra>>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Step<T> {
    /// Retries failed attempts by `policy` instead of the default.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.extra.get_or_insert_with(Box::default).policy = policy;
        self
    }

    /// Each attempt runs at most `d`: one still running then fails with
    /// kind `timeout` and its future is dropped; the retry policy decides
    /// whether another attempt runs (see [Time limits](Step#time-limits)).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.extra.get_or_insert_with(Box::default).timeouts.attempt = Some(d);
        self
    }

    /// An attempt that sends no [`StepContext::heartbeat`] for `d` (from
    /// its start, then from its latest heartbeat) fails with kind
    /// `timeout`, its message saying it was the heartbeat, and its future
    /// is dropped; the retry policy decides whether another attempt runs,
    /// which reads the latest recorded details with
    /// [`StepContext::last_heartbeat`] (see [Time limits](Step#time-limits)).
    pub fn heartbeat_timeout(mut self, d: Duration) -> Self {
        self.extra
            .get_or_insert_with(Box::default)
            .timeouts
            .heartbeat = Some(d);
        self
    }

    /// What the workflow's await does when its run is cancelled while the
    /// step is live (see [Cancellation](Step#cancellation)); the default
    /// is [`OnCancel::Abandon`]. Neither stops the step's running attempt:
    /// it is told ([`StepContext::cancelled`]), and one that does not
    /// listen runs until it returns (under `Wait`, the workflow waits that
    /// long; under a cancel's grace, the run is terminated at the grace's
    /// end even so).
    pub fn on_cancel(mut self, policy: OnCancel) -> Self {
        if policy == OnCancel::Wait || self.extra.is_some() {
            self.extra.get_or_insert_with(Box::default).wait_on_cancel = policy == OnCancel::Wait;
        }
        self
    }
}

/// What a workflow's await of a step does when the run is cancelled while
/// the step is live ([`Step::on_cancel`]). Either way the step is told
/// ([`StepContext::cancelled`]), no attempt of it starts after the
/// cancel, and its end is recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnCancel {
    /// The await ends at once with a `cancelled` error; the step goes on
    /// (or stops, if it listens) without the workflow: one that does not
    /// listen runs until it returns.
    #[default]
    Abandon,
    /// The await waits for the step to end and returns its result or
    /// failure (a failure after the cancel is final): the workflow sees
    /// what the step did, and cleans up knowing it.
    Wait,
}

impl<T: DeserializeOwned> IntoFuture for Step<T> {
    type Output = Result<T, StepError>;
    type IntoFuture = StepCall<T>;

    fn into_future(self) -> StepCall<T> {
        StepCall {
            step: Some(self),
            seq: None,
            done: false,
        }
    }
}

/// A step being awaited.
#[must_use = "a step does nothing until awaited"]
pub struct StepCall<T> {
    step: Option<Step<T>>,
    /// The step's context, number, and the cancellations delivered when it
    /// was called.
    seq: Option<(Ctx, Seq, u32)>,
    /// Its result was taken: dropping it cancels nothing.
    done: bool,
}

impl<T> Drop for StepCall<T> {
    fn drop(&mut self) {
        // A step dropped before its result (it lost a race): cancelled, so
        // its attempt is told and no other starts.
        if self.done {
            return;
        }
        let Some((ctx, seq, _)) = &self.seq else {
            return;
        };
        let Ok(mut s) = ctx.state.try_borrow_mut() else {
            return;
        };
        s.abandon_step(*seq);
    }
}

impl<T: DeserializeOwned> Future for StepCall<T> {
    type Output = Result<T, StepError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Nothing here is pinned structurally.
        let this = self.get_mut();
        if this.seq.is_none() {
            let Some(Step {
                ctx,
                name,
                f,
                extra,
                ..
            }) = this.step.take()
            else {
                return Poll::Pending;
            };
            let wait = extra.as_ref().is_some_and(|x| x.wait_on_cancel);
            let mut s = ctx.state.borrow_mut();
            let Some(seq) = s.call_step(&name, f, extra) else {
                return Poll::Pending;
            };
            // A step the workflow waits for sees no cancellation as its
            // error: its own end is the await's.
            let cancels = if wait { u32::MAX } else { s.cancels() };
            drop(s);
            this.seq = Some((ctx, seq, cancels));
        }
        let Some((ctx, seq, cancels)) = &this.seq else {
            return Poll::Pending;
        };
        let mut s = ctx.state.borrow_mut();
        match s.poll_outcome(*seq, *cancels, cx.waker()) {
            Poll::Ready(Ok(Outcome::Step { status, payload })) => {
                this.done = true;
                Poll::Ready(step_result(status, &payload))
            }
            Poll::Ready(Err(f)) => Poll::Ready(Err(StepError {
                message: f.message,
                kind: f.kind,
                retryable: false,
            })),
            Poll::Ready(Ok(other)) => {
                s.refuse(format!(
                    "operation {seq} is a step but completed as {other:?}"
                ));
                Poll::Pending
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A step's recorded result as the code sees it.
fn step_result<T: DeserializeOwned>(status: Status, payload: &[u8]) -> Result<T, StepError> {
    match status {
        Status::Ok => decode(payload)
            .map_err(|e| StepError::fatal(format!("recorded step result does not decode: {e}"))),
        _ => Err(decode::<StepError>(payload)
            .unwrap_or_else(|_| StepError::fatal(String::from_utf8_lossy(payload).into_owned()))),
    }
}

/// A durable sleep being awaited.
#[must_use = "a sleep does nothing until awaited"]
pub struct Sleep {
    ctx: Ctx,
    name: Name,
    duration: Duration,
    seq: Option<Seq>,
    cancels: u32,
}

impl Future for Sleep {
    /// `Err` (kind `cancelled`) if the run is cancelled while it sleeps.
    type Output = Result<(), Failure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut s = this.ctx.state.borrow_mut();
        let at_ms = at_ms(s.now_ms(), this.duration);
        let name = &this.name;
        let Some(seq) = s.command(
            &mut this.seq,
            |m| m.sleep(name),
            |run, seq| RecordBuf::Timer {
                run,
                seq,
                name: name.clone(),
                fire_at_ms: at_ms,
            },
        ) else {
            return Poll::Pending;
        };
        s.poll_outcome(seq, this.cancels, cx.waker()).map_ok(|_| ())
    }
}

/// A wait for a signal being awaited.
#[must_use = "a wait does nothing until awaited"]
pub struct WaitFor<T> {
    ctx: Ctx,
    name: Name,
    timeout: Option<Duration>,
    seq: Option<Seq>,
    done: bool,
    cancels: u32,
    _type: PhantomData<fn() -> T>,
}

impl<T> WaitFor<T> {
    /// Gives up after `d`: the wait then returns `None`.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }
}

impl<T: DeserializeOwned> Future for WaitFor<T> {
    type Output = Result<Option<T>, Failure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // `WaitFor` holds nothing pinned (PhantomData of a fn pointer).
        let this = unpin(self);
        let mut s = this.ctx.state.borrow_mut();
        // 0 means no deadline, so a deadline is at least 1.
        let deadline_ms = this.timeout.map_or(0, |d| at_ms(s.now_ms(), d).max(1));
        let name = &this.name;
        let Some(seq) = s.command(
            &mut this.seq,
            |m| m.wait(name),
            |run, seq| RecordBuf::Wait {
                run,
                seq,
                name: name.clone(),
                deadline_ms,
            },
        ) else {
            return Poll::Pending;
        };
        match s.poll_outcome(seq, this.cancels, cx.waker()) {
            Poll::Ready(Ok(Outcome::Signal(payload))) => {
                this.done = true;
                Poll::Ready(decode(&payload).map(Some).map_err(|e| {
                    Failure::with_kind(
                        "codec",
                        format!("signal {:?} does not decode as its type: {e}", this.name),
                    )
                }))
            }
            Poll::Ready(Ok(_)) => {
                this.done = true;
                Poll::Ready(Ok(None))
            }
            Poll::Ready(Err(f)) => Poll::Ready(Err(f)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T> Drop for WaitFor<T> {
    fn drop(&mut self) {
        // A wait dropped before it ended (it lost a race): record that, so
        // the signal offered to it goes to another wait.
        let Some(seq) = self.seq.filter(|_| !self.done) else {
            return;
        };
        let Ok(mut s) = self.ctx.state.try_borrow_mut() else {
            return;
        };
        s.abandon_wait(seq);
    }
}

/// `now_ms + d`, saturating.
fn at_ms(now_ms: u64, d: Duration) -> u64 {
    now_ms.saturating_add(d.as_millis().min(u128::from(u64::MAX)) as u64)
}

/// `Pin<&mut WaitFor<T>>` to `&mut`: nothing in it is pinned structurally.
fn unpin<T>(p: Pin<&mut WaitFor<T>>) -> &mut WaitFor<T> {
    // SAFETY-free: WaitFor is Unpin (all fields are), so this is safe.
    Pin::into_inner(p)
}

/// What happens to a child when its parent finishes first (completes,
/// fails, continues as new, or is cancelled or terminated: a cancel
/// reaches a child only through this policy, so a cancelled parent's
/// children are terminated by default, asked to cancel under `Cancel`,
/// and left running under `Abandon`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ParentClose {
    /// The child is terminated (the default).
    #[default]
    Terminate,
    /// The child is asked to cancel (its code sees the cancellation and
    /// may clean up). If this run was cancelled with a grace
    /// ([`Engine::cancel_with_grace`](crate::Engine::cancel_with_grace)),
    /// the child gets the same grace, counted from its own cancel: it is
    /// terminated if it has not ended that long after. Without one, the
    /// child's cancel is cooperative, as a plain cancel is.
    Cancel,
    /// The child runs on.
    Abandon,
}

/// A child workflow being started and awaited.
#[must_use = "a child does nothing until awaited"]
pub struct ChildCall<O> {
    ctx: Ctx,
    wtype: &'static str,
    id: Name,
    input: Result<Vec<u8>, String>,
    close: ParentClose,
    /// Started by [`ChildCall::detach`]: recorded with
    /// [`policy::DETACHED`](fusee_core::record::policy::DETACHED), so no
    /// result comes back to this run.
    detached: bool,
    seq: Option<Seq>,
    cancels: u32,
    _type: PhantomData<fn() -> O>,
}

impl<O> ChildCall<O> {
    /// What happens to the child when this run finishes first.
    pub fn on_parent_close(mut self, close: ParentClose) -> Self {
        self.close = close;
        self
    }

    /// Starts the child without waiting for its result: the future ends
    /// once the child's start is recorded in this run's journal (durable
    /// before any effect this run has after it, as every record is; the
    /// child's shard then starts it), and the child's result never comes
    /// back to this run. Its parent-close policy applies as set: the
    /// default terminates it when this run ends, so a child meant to
    /// outlive this run is started with
    /// `.on_parent_close(ParentClose::Abandon).detach()`. An unknown type
    /// or an input that does not encode is an error at once, nothing
    /// recorded; a refusal on the child's side (its ID taken) is not seen
    /// here.
    pub fn detach(mut self) -> DetachedChild<O> {
        self.detached = true;
        DetachedChild { call: self }
    }
}

/// A child being started without waiting for its result
/// ([`ChildCall::detach`]).
#[must_use = "a child does nothing until awaited"]
pub struct DetachedChild<O> {
    call: ChildCall<O>,
}

impl<O: DeserializeOwned> Future for DetachedChild<O> {
    /// `Ok` once the child's start is recorded.
    type Output = Result<(), Failure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Nothing in it is pinned structurally.
        let this = self.get_mut();
        let polled = Pin::new(&mut this.call).poll(cx);
        // Issued (live, or matched in the journal on replay): done. No
        // outcome comes for a detached child (and a cancel of this run
        // after the call does not undo the start), so replay cannot differ.
        if this.call.seq.is_some() {
            return Poll::Ready(Ok(()));
        }
        match polled {
            Poll::Ready(result) => Poll::Ready(result.map(|_| ())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<O: DeserializeOwned> Future for ChildCall<O> {
    /// The child's result, or its failure (kind `child-failed` unless the
    /// child gave one; `cancelled` if this run is cancelled meanwhile).
    type Output = Result<O, Failure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Nothing in it is pinned structurally.
        let this = self.get_mut();
        let mut s = this.ctx.state.borrow_mut();
        if this.seq.is_none() {
            // A call the journal holds is matched, its type known here or
            // not (it may be registered later, or elsewhere); one it does
            // not hold is refused, live or replayed alike (refused live,
            // nothing was recorded, and the code went on past it).
            if !s.registry().contains(this.wtype)
                && !s.machine().recorded_child_next(this.wtype, &this.id)
            {
                return Poll::Ready(Err(Failure::with_kind(
                    "unknown-workflow",
                    format!("no workflow type {:?} is registered", this.wtype),
                )));
            }
            let input = match &this.input {
                Ok(bytes) => {
                    if let Err(f) = s.check_payload("the child's input", bytes.len()) {
                        return Poll::Ready(Err(f));
                    }
                    Payload::from(bytes.as_slice())
                }
                Err(e) => {
                    return Poll::Ready(Err(Failure::with_kind(
                        "codec",
                        format!("the child's input does not encode: {e}"),
                    )));
                }
            };
            let flags = match this.close {
                ParentClose::Terminate => fusee_core::record::policy::CLOSE_TERMINATE,
                ParentClose::Cancel => fusee_core::record::policy::CLOSE_CANCEL,
                ParentClose::Abandon => fusee_core::record::policy::CLOSE_ABANDON,
            } | fusee_core::record::policy::ID_REJECT_DUPLICATE
                | if this.detached {
                    fusee_core::record::policy::DETACHED
                } else {
                    0
                };
            let (wtype, id) = (this.wtype, this.id.clone());
            let Some(_) = s.command(
                &mut this.seq,
                |m| m.child(wtype, &id),
                |run, seq| RecordBuf::Child {
                    run,
                    seq,
                    wtype: Name::from(wtype),
                    id: id.clone(),
                    flags,
                    deadline_ms: 0,
                    input,
                },
            ) else {
                return Poll::Pending;
            };
        }
        let Some(seq) = this.seq else {
            return Poll::Pending;
        };
        match s.poll_outcome(seq, this.cancels, cx.waker()) {
            Poll::Ready(Ok(Outcome::Child { status, payload })) => Poll::Ready(match status {
                Status::Ok => decode(&payload).map_err(|e| {
                    Failure::with_kind("codec", format!("the child's result does not decode: {e}"))
                }),
                status => Err(decode::<Failure>(&payload).unwrap_or_else(|_| {
                    Failure::with_kind(
                        "child-failed",
                        format!("child {:?} ended {}", this.id, status.as_str()),
                    )
                })),
            }),
            Poll::Ready(Ok(_)) => Poll::Pending,
            Poll::Ready(Err(f)) => Poll::Ready(Err(f)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The end of a run that continues as new: never completes (the shard ends
/// the run when its code reaches it), unless the next input does not
/// encode.
#[must_use = "continue_as_new does nothing until awaited and returned"]
pub struct ContinueAsNew<O> {
    error: Option<Failure>,
    _type: PhantomData<fn() -> O>,
}

impl<O> Future for ContinueAsNew<O> {
    type Output = Result<O, Failure>;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this.error.take() {
            Some(e) => Poll::Ready(Err(e)),
            None => Poll::Pending,
        }
    }
}

/// What [`crate::promise`] and [`crate::saga`] need of a run beyond its
/// public operations, so the run's state stays private to this module.
impl Ctx {
    /// A wait for the signal named `name`, made at run time (a promise's
    /// own name), where [`Ctx::wait_for`] takes a static one.
    pub(crate) fn wait_for_name<T: DeserializeOwned>(&self, name: &str) -> WaitFor<T> {
        WaitFor {
            cancels: self.state.borrow().cancels(),
            ctx: self.clone(),
            name: Name::from(name),
            timeout: None,
            seq: None,
            done: false,
            _type: PhantomData,
        }
    }

    /// Registers update handler `name` (made at run time) with its
    /// validator, as [`Ctx::on_update_validated`] does for a static name.
    pub(crate) fn on_update_name(&self, name: String, validate: Validator, start: HandlerStart) {
        self.state.borrow_mut().on_update(
            name,
            UpdateHandler {
                validate: Some(validate),
                start,
            },
        );
    }

    /// Cancellations delivered to the code so far: each is a journal
    /// delivery, so the count replays the same.
    pub(crate) fn cancels(&self) -> u32 {
        self.state.borrow().cancels()
    }
}

/// What `crate::flow` (schedules, queues, step limits) needs of a run
/// beyond its public operations.
impl Ctx {
    /// The registry the run's engine shares: its host is the engine the
    /// run belongs to, once flow control is registered.
    pub(crate) fn registry(&self) -> Registry {
        self.state.borrow().registry().clone()
    }

    /// [`Ctx::signal`] with a name made at run time and a payload already
    /// encoded.
    pub(crate) fn signal_named(
        &self,
        id: &str,
        name: &str,
        payload: Vec<u8>,
    ) -> Result<(), Failure> {
        self.state
            .borrow()
            .check_payload(&format!("signal {name:?}"), payload.len())?;
        self.send(id, name, payload);
        Ok(())
    }
}

/// What `crate::limit` needs of a step before it is awaited.
impl<T> Step<T> {
    /// The run the step belongs to.
    pub(crate) fn ctx(&self) -> &Ctx {
        &self.ctx
    }
}

/// Names of at most this many bytes are kept by [`step_name`].
const STEP_NAME_KEPT_MAX: usize = 64;
/// How many names [`step_name`] keeps per thread (a bound for code that
/// makes a name per call).
const STEP_NAMES_MAX: usize = 1024;

thread_local! {
    /// Step names called on this thread (a shard's), shared by its runs.
    static STEP_NAMES: std::cell::RefCell<rustc_hash::FxHashSet<Name>> =
        std::cell::RefCell::default();
}

/// Step `name` as a [`Name`], shared with earlier calls of the same name
/// on this thread: a step called in a loop, or by every run of a type,
/// allocates its name once instead of at every call (an allocation and a
/// free a step, of the dozen a fanout's step makes).
fn step_name(name: &str) -> Name {
    if name.len() > STEP_NAME_KEPT_MAX {
        return Name::from(name);
    }
    STEP_NAMES.with(|names| {
        let mut names = names.borrow_mut();
        if let Some(kept) = names.get(name) {
            return kept.clone();
        }
        let made = Name::from(name);
        if names.len() < STEP_NAMES_MAX {
            names.insert(made.clone());
        }
        made
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name called again on a thread is the one made the first time; a
    /// long one, or one past the bound, is made each time but reads the
    /// same.
    #[test]
    fn step_names_are_shared_on_a_thread_within_bounds() {
        let (a, b) = (step_name("charge"), step_name("charge"));
        assert!(std::sync::Arc::ptr_eq(&a, &b));
        let long = "x".repeat(STEP_NAME_KEPT_MAX + 1);
        let (c, d) = (step_name(&long), step_name(&long));
        assert_eq!(c, d);
        assert!(!std::sync::Arc::ptr_eq(&c, &d));
        for i in 0..STEP_NAMES_MAX + 10 {
            let _ = step_name(&format!("n-{i}"));
        }
        assert_eq!(STEP_NAMES.with(|n| n.borrow().len()), STEP_NAMES_MAX);
        let (e, f) = (step_name("n-past"), step_name("n-past"));
        assert_eq!(e, f);
        assert!(!std::sync::Arc::ptr_eq(&e, &f));
        // Kept before the bound was reached: still shared.
        assert!(std::sync::Arc::ptr_eq(&step_name("charge"), &a));
    }
}
