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
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fusee_core::record::{Name, Payload, RecordBuf, RunId, Seq, Status, WaitOutcome, value_kind};
use fusee_core::run::{
    Abandon, Issued, OpError, Patched, RetryAt, RunMachine, StepRun, ValueAnswer,
};
use rustc_hash::FxHashMap;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::registry::RunFuture;
use crate::retry::RetryPolicy;
use crate::workflow::{Failure, Query, Signal, Update, Workflow, decode, encode};

/// How a step attempt failed: a message, an optional kind that retry
/// policies match on ([`RetryPolicy::non_retryable`]), and whether it may
/// be retried at all. Any error converts into one with `?` (retryable, no
/// kind).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepError {
    /// What went wrong.
    pub message: String,
    /// A short kind for retry policies and callers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// False: fail the step now, whatever the policy allows.
    #[serde(default = "yes")]
    pub retryable: bool,
}

fn yes() -> bool {
    true
}

impl StepError {
    /// A retryable error.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            kind: None,
            retryable: true,
        }
    }

    /// An error that fails the step at once.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            kind: None,
            retryable: false,
        }
    }

    /// The same error with `kind` set.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Some(k) => write!(f, "{k}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl<E: std::error::Error> From<E> for StepError {
    fn from(e: E) -> Self {
        Self::retryable(e.to_string())
    }
}

impl From<StepError> for Failure {
    fn from(e: StepError) -> Self {
        Failure {
            message: e.message,
            kind: e.kind,
        }
    }
}

/// What a step function is told: which attempt this is, the step's
/// idempotency key, and the fencing token of its run's shard.
#[derive(Clone, Debug)]
pub struct StepContext {
    key: Arc<str>,
    attempt: u32,
    fencing_token: u64,
    /// The run's place in its trace and the step's sequence: the
    /// attempt's span is derived only when asked for
    /// ([`StepContext::traceparent`]), so a step that never asks pays no
    /// hash.
    trace: Option<(crate::trace::RunTrace, u32)>,
}

impl StepContext {
    pub(crate) fn new(key: Arc<str>, attempt: u32) -> Self {
        Self {
            key,
            attempt,
            fencing_token: 0,
            trace: None,
        }
    }

    /// The same context carrying `token` ([`StepContext::fencing_token`]).
    pub(crate) fn with_fencing_token(mut self, token: u64) -> Self {
        self.fencing_token = token;
        self
    }

    /// A number that grows with every change of owner of the run's shard
    /// (under [`crate::Ownership::Lease`] on PostgreSQL: the shard's lease
    /// epoch, which every open of the shard moves), so an outside service
    /// can refuse a late write from a process that lost the shard.
    ///
    /// A step runs at least once: a process paused past its lease may
    /// finish a step after another process took the shard and ran the same
    /// step again. Its token is then lower than the new owner's. A service
    /// that keeps, per idempotency key ([`StepContext::key`]), the highest
    /// token it has seen and refuses a write carrying a lower one applies
    /// only the current owner's write. Compare tokens of one key only:
    /// each shard counts its own. With a backend one process owns whole
    /// (files, RocksDB, redb, memory) it is 0, and only one process can run
    /// the step at a time.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use std::sync::Mutex;
    ///
    /// /// An outside service's ledger: per key, the highest token seen.
    /// #[derive(Default)]
    /// struct Ledger(Mutex<HashMap<String, u64>>);
    ///
    /// impl Ledger {
    ///     /// Applies a write unless a newer owner's write came first.
    ///     fn write(&self, key: &str, token: u64) -> Result<(), String> {
    ///         let mut seen = self.0.lock().unwrap();
    ///         let highest = seen.entry(key.to_owned()).or_insert(0);
    ///         if token < *highest {
    ///             return Err(format!("stale token {token} < {highest}"));
    ///         }
    ///         *highest = token;
    ///         Ok(()) // ...apply the effect
    ///     }
    /// }
    ///
    /// let ledger = Ledger::default();
    /// // The new owner (epoch 8) ran the step, then the old one (epoch 7)
    /// // woke up and finished its attempt: refused.
    /// assert!(ledger.write("order-1/1/2", 8).is_ok());
    /// assert!(ledger.write("order-1/1/2", 7).is_err());
    /// // In a step: `ledger.write(step.key(), step.fencing_token())`.
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The same attempt under another idempotency key (a saga's own).
    pub(crate) fn with_key(mut self, key: Arc<str>) -> Self {
        self.key = key;
        self
    }

    /// The context of step `seq`'s attempt of run `run`'s trace.
    pub(crate) fn traced(mut self, run: crate::trace::RunTrace, seq: u32) -> Self {
        self.trace = Some((run, seq));
        self
    }

    /// This attempt's trace context: the run's trace, this attempt's span
    /// as the parent. Send it as the `traceparent` header of the calls the
    /// step makes, so they appear under the attempt in the trace (see
    /// [`crate::trace`]). `None` only for a context made outside the
    /// engine's shard loop.
    pub fn traceparent(&self) -> Option<crate::trace::TraceParent> {
        self.trace
            .map(|(run, seq)| run.context(crate::trace::SpanOf::Attempt(seq, self.attempt)))
    }

    /// The step's idempotency key: the same on every attempt and after
    /// every restart, unique to this step of this run (`<workflow
    /// ID>/<run>/<operation>`). Pass it to outside services so an effect
    /// retried after a crash is applied once.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// This attempt's number, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// A step function's future, type-erased, its result already encoded.
pub(crate) type StepFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, StepError>> + Send>>;
/// A step function, type-erased.
pub(crate) type StepFn = Arc<dyn Fn(StepContext) -> StepFuture + Send + Sync>;

/// A step mock (feature `testing`): given the step's real function, the
/// function to run instead (which may call the real one).
#[cfg(feature = "testing")]
pub(crate) type StepWrap = Arc<dyn Fn(StepFn) -> StepFn + Send + Sync>;

/// The registered workflow types, whose code is called with a [`Ctx`].
pub(crate) type Registry = crate::registry::Registry<Ctx>;

/// A live step the shard must run: the function and its policy, kept until
/// the step's final record.
pub(crate) struct StepSpec {
    pub(crate) name: Name,
    pub(crate) f: StepFn,
    pub(crate) policy: RetryPolicy,
    /// When its first attempt began (for the policy's time limit).
    pub(crate) first_ms: Option<u64>,
    /// An attempt is running.
    pub(crate) running: bool,
    /// The attempt to run next and when.
    pub(crate) next: Option<(u32, RetryAt)>,
    /// Attempts made before the latest resume ([`crate::Engine::resume_step`]):
    /// the policy counts only the attempts since.
    pub(crate) resumed_after: u32,
}

/// A completion delivered to the code, kept until its operation's future
/// takes it.
#[derive(Debug)]
pub(crate) enum Outcome {
    Step { status: Status, payload: Vec<u8> },
    Fired,
    Signal(Vec<u8>),
    TimedOut,
    Child { status: Status, payload: Vec<u8> },
}

/// Why a run's code cannot go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The code departed from its journal: kept whole, as callers waiting
    /// on the run get it ([`crate::Error::Determinism`]).
    Determinism(Box<fusee_core::run::DeterminismError>),
    /// The machine refused a call or a record, or a completion does not
    /// fit its operation.
    Refused(String),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Determinism(e) => e.fmt(f),
            Fault::Refused(why) => f.write_str(why),
        }
    }
}

impl From<OpError> for Fault {
    fn from(e: OpError) -> Self {
        match e {
            OpError::Determinism(d) => Fault::Determinism(d),
            other => Fault::Refused(other.to_string()),
        }
    }
}

/// The state a run's code and its shard loop share, on the shard thread.
pub(crate) struct RunState {
    pub(crate) machine: RunMachine,
    pub(crate) run: RunId,
    pub(crate) id: Name,
    /// The loop's time, set before every poll.
    pub(crate) now_ms: u64,
    /// Records the code asked for, in order; the loop appends them after
    /// the poll.
    pub(crate) appends: Vec<RecordBuf>,
    /// Completions delivered and not yet taken, by operation.
    pub(crate) outcomes: FxHashMap<Seq, Outcome>,
    /// Wakers of pending operations.
    pub(crate) wakers: FxHashMap<Seq, Waker>,
    /// Live steps, by operation.
    pub(crate) steps: FxHashMap<Seq, StepSpec>,
    pub(crate) fault: Option<Fault>,
    /// Cancellations delivered to the code: an operation pending when one
    /// arrived ends with a `cancelled` error.
    pub(crate) cancels: u32,
    /// The latest cancellation's reason.
    pub(crate) cancel_reason: String,
    /// The code asked to continue as new with this input.
    pub(crate) continue_with: Option<Vec<u8>>,
    /// The workflow types registered (to refuse a child of an unknown type
    /// before anything is recorded).
    pub(crate) registry: Registry,
    /// Update handlers the code registered, by name.
    pub(crate) updates: FxHashMap<String, UpdateHandler>,
    /// Query handlers the code registered, by name.
    pub(crate) queries: FxHashMap<String, QueryHandler>,
    /// The engine's payload limit ([`crate::Config::max_payload`]): a
    /// payload the code hands over beyond it is refused at the call, before
    /// anything is recorded, rather than a record the log would refuse.
    pub(crate) max_payload: usize,
}

/// An update handler, type-erased: its validator, and its code started
/// from the argument's bytes.
pub(crate) struct UpdateHandler {
    pub(crate) validate: Option<Validator>,
    pub(crate) start: HandlerStart,
}

/// An update's validator over the argument's bytes: `Err` is the reason the
/// caller is told.
pub(crate) type Validator = Box<dyn Fn(&[u8]) -> Result<(), String>>;

/// Starts an update handler's code from the argument's bytes.
pub(crate) type HandlerStart = Box<dyn Fn(&[u8]) -> RunFuture>;

/// A query handler, type-erased: argument bytes to result bytes.
pub(crate) type QueryHandler = Box<dyn Fn(&[u8]) -> Result<Vec<u8>, Failure>>;

/// Calls `f` with update handler `name`, taken out of the run's state
/// meanwhile: the handler's own code (its validator, the synchronous part
/// of its start) may use the run's [`Ctx`], which borrows the state. Put
/// back after, unless the code registered a new one under the name. `None`
/// if there is no such handler.
pub(crate) fn with_update_handler<R>(
    state: &RefCell<RunState>,
    name: &str,
    f: impl FnOnce(&UpdateHandler) -> R,
) -> Option<R> {
    let handler = state.borrow_mut().updates.remove(name)?;
    let out = f(&handler);
    state
        .borrow_mut()
        .updates
        .entry(name.to_string())
        .or_insert(handler);
    Some(out)
}

/// [`with_update_handler`] for query handlers.
pub(crate) fn with_query_handler<R>(
    state: &RefCell<RunState>,
    name: &str,
    f: impl FnOnce(&QueryHandler) -> R,
) -> Option<R> {
    let handler = state.borrow_mut().queries.remove(name)?;
    let out = f(&handler);
    state
        .borrow_mut()
        .queries
        .entry(name.to_string())
        .or_insert(handler);
    Some(out)
}

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

impl RunState {
    pub(crate) fn new(
        machine: RunMachine,
        run: RunId,
        id: Name,
        registry: Registry,
        max_payload: usize,
    ) -> Self {
        Self {
            machine,
            run,
            id,
            now_ms: 0,
            appends: Vec::new(),
            outcomes: FxHashMap::default(),
            wakers: FxHashMap::default(),
            steps: FxHashMap::default(),
            fault: None,
            cancels: 0,
            cancel_reason: String::new(),
            continue_with: None,
            registry,
            updates: FxHashMap::default(),
            queries: FxHashMap::default(),
            max_payload,
        }
    }

    /// `Err` (kind `too-large`) when `len` bytes of `what` exceed the
    /// payload limit.
    pub(crate) fn check_payload(&self, what: &str, len: usize) -> Result<(), Failure> {
        if len > self.max_payload {
            return Err(Failure::with_kind(
                "too-large",
                format!(
                    "{what} of {len} bytes exceeds the payload limit of {} bytes",
                    self.max_payload
                ),
            ));
        }
        Ok(())
    }

    /// A cancellation reached the code: every pending operation wakes, to
    /// end with a `cancelled` error.
    pub(crate) fn cancel(&mut self, reason: String) {
        self.cancels += 1;
        self.cancel_reason = reason;
        for (_, w) in self.wakers.drain() {
            w.wake();
        }
    }

    /// The error of an operation cancelled while pending.
    fn cancelled(&self) -> Failure {
        Failure::with_kind("cancelled", self.cancel_reason.clone())
    }

    /// Hands a delivered completion to its operation and wakes it.
    pub(crate) fn deliver(&mut self, seq: Seq, outcome: Outcome) {
        self.outcomes.insert(seq, outcome);
        if let Some(w) = self.wakers.remove(&seq) {
            w.wake();
        }
    }

    /// Issues a command operation once (`seq` remembers it): `call` asks
    /// the machine, and a live answer appends `record(run, seq)`. `None`
    /// when the run cannot go on (the fault is recorded).
    fn command(
        &mut self,
        seq: &mut Option<Seq>,
        call: impl FnOnce(&mut RunMachine) -> Result<Issued, OpError>,
        record: impl FnOnce(RunId, Seq) -> RecordBuf,
    ) -> Option<Seq> {
        if let Some(seq) = *seq {
            return Some(seq);
        }
        let issued = match call(&mut self.machine) {
            Ok(issued) => issued,
            Err(e) => {
                self.fail(e);
                return None;
            }
        };
        if let Issued::Append(n) = issued {
            let rec = record(self.run, n);
            self.appends.push(rec);
        }
        *seq = Some(issued.seq());
        *seq
    }

    fn fail(&mut self, e: OpError) {
        if self.fault.is_none() {
            self.fault = Some(Fault::from(e));
        }
    }
}

/// The marker a synchronous operation unwinds with when the run cannot go
/// on (a determinism error): the shard loop catches it and stops the run
/// without failing it.
pub(crate) struct Stopped;

/// The context of one workflow run: its operations. Cheap to clone; valid
/// only inside the run's code.
#[derive(Clone)]
pub struct Ctx {
    state: Rc<RefCell<RunState>>,
}

impl fmt::Debug for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state.borrow();
        f.debug_struct("Ctx")
            .field("run", &s.run)
            .field("id", &&*s.id)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    pub(crate) fn new(state: Rc<RefCell<RunState>>) -> Self {
        Self { state }
    }

    /// The workflow ID.
    pub fn workflow_id(&self) -> String {
        self.state.borrow().id.to_string()
    }

    /// The run's number within its shard.
    pub fn run_id(&self) -> u64 {
        self.state.borrow().run
    }

    /// A step: `f` runs with effects (calls to other services), on the
    /// engine's tokio runtime, once the run's records so far are durable;
    /// its result (or its failure, once retries are exhausted) is
    /// recorded, and replays return it without running `f` again. Failed
    /// attempts are retried by the default [`RetryPolicy`]; set another
    /// with [`Step::retry`]. `f` may run more than once (a retried attempt,
    /// or a crash before its result was durable): make its effects
    /// idempotent with [`StepContext::key`].
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
        let f: StepFn = Arc::new(move |sc: StepContext| {
            let fut = f(sc);
            Box::pin(async move {
                let value = fut.await?;
                serde_json::to_vec(&value).map_err(|e| {
                    StepError::fatal(format!("step result does not encode as JSON: {e}"))
                })
            })
        });
        // Test kit hook (feature `testing`): a step mocked by name runs the
        // mock's function, which may call this one.
        #[cfg(feature = "testing")]
        let f = match self.state.borrow().registry.step_mock(name) {
            Some(wrap) => wrap(f),
            None => f,
        };
        Step {
            ctx: self.clone(),
            name: Name::from(name),
            f,
            policy: RetryPolicy::default(),
            _type: PhantomData,
        }
    }

    /// A durable sleep: returns once `duration` has passed, across
    /// restarts. A year-long sleep costs a table entry. `Err` (kind
    /// `cancelled`) if the run is cancelled meanwhile.
    pub fn sleep(&self, name: &str, duration: Duration) -> Sleep {
        Sleep {
            cancels: self.state.borrow().cancels,
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
            cancels: self.state.borrow().cancels,
            ctx: self.clone(),
            name: Name::from(signal.name()),
            timeout: None,
            seq: None,
            done: false,
            _type: PhantomData,
        }
    }

    /// The current time, recorded: a replay sees the same.
    pub fn now(&self) -> SystemTime {
        let bytes = self.value(value_kind::NOW, |now_ms| now_ms.to_le_bytes().to_vec());
        let ms = bytes
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes);
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    /// A random number, recorded: a replay sees the same.
    pub fn random(&self) -> u64 {
        let bytes = self.value(value_kind::RANDOM, |_| {
            fastrand::u64(..).to_le_bytes().to_vec()
        });
        bytes
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
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
        let run = s.run;
        match s.machine.send(target, name) {
            Ok(Issued::Append(seq)) => s.appends.push(RecordBuf::Send {
                run,
                seq,
                target: Name::from(target),
                name: Name::from(name),
                payload: Payload::from(payload.as_slice()),
            }),
            Ok(Issued::Recorded(_)) => {}
            Err(e) => {
                s.fail(e);
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
            seq: None,
            cancels: self.state.borrow().cancels,
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
        let run = s.run;
        match s.machine.patched(id) {
            Ok(Patched::Append(seq)) => {
                s.appends.push(RecordBuf::Patch {
                    run,
                    seq,
                    id: Name::from(id),
                });
                true
            }
            Ok(p) => p.is_patched(),
            Err(e) => {
                s.fail(e);
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
                self.state.borrow_mut().continue_with = Some(bytes);
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
            .updates
            .insert(update.name().to_string(), UpdateHandler { validate, start });
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
            .queries
            .insert(query.name().to_string(), call);
    }

    /// A recorded value of `kind`: the journal's, or `make(now_ms)`'s,
    /// recorded. Unwinds with [`Stopped`] when the run cannot go on.
    fn value(&self, kind: u8, make: impl FnOnce(u64) -> Vec<u8>) -> Vec<u8> {
        let mut s = self.state.borrow_mut();
        let now_ms = s.now_ms;
        let run = s.run;
        let answer = match s.machine.value(kind) {
            Ok(ValueAnswer::Recorded { value, .. }) => Ok(value.to_vec()),
            Ok(ValueAnswer::Append(seq)) => Err(seq),
            Err(e) => {
                s.fail(e);
                drop(s);
                std::panic::resume_unwind(Box::new(Stopped));
            }
        };
        match answer {
            Ok(value) => value,
            Err(seq) => {
                let value = make(now_ms);
                s.appends.push(RecordBuf::Value {
                    run,
                    seq,
                    kind,
                    value: Payload::from(value.as_slice()),
                });
                value
            }
        }
    }
}

/// A step about to be called: set its retry policy, then `.await` it.
#[must_use = "a step does nothing until awaited"]
pub struct Step<T> {
    ctx: Ctx,
    name: Name,
    f: StepFn,
    policy: RetryPolicy,
    _type: PhantomData<fn() -> T>,
}

impl<T> Step<T> {
    /// Retries failed attempts by `policy` instead of the default.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }
}

impl<T: DeserializeOwned> IntoFuture for Step<T> {
    type Output = Result<T, StepError>;
    type IntoFuture = StepCall<T>;

    fn into_future(self) -> StepCall<T> {
        StepCall {
            step: Some(self),
            seq: None,
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
}

impl<T: DeserializeOwned> Future for StepCall<T> {
    type Output = Result<T, StepError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Nothing here is pinned structurally.
        let this = self.get_mut();
        if this.seq.is_none() {
            let Some(step) = this.step.take() else {
                return Poll::Pending;
            };
            let mut s = step.ctx.state.borrow_mut();
            let start = match s.machine.step(&step.name) {
                Ok(start) => start,
                Err(e) => {
                    s.fail(e);
                    return Poll::Pending;
                }
            };
            if let StepRun::Attempt(a) = start.run {
                s.steps.insert(
                    start.seq,
                    StepSpec {
                        name: step.name.clone(),
                        f: step.f.clone(),
                        policy: step.policy.clone(),
                        first_ms: None,
                        running: false,
                        next: Some((a.attempt, a.at)),
                        resumed_after: 0,
                    },
                );
            }
            let cancels = s.cancels;
            drop(s);
            this.seq = Some((step.ctx, start.seq, cancels));
        }
        let Some((ctx, seq, cancels)) = &this.seq else {
            return Poll::Pending;
        };
        let mut s = ctx.state.borrow_mut();
        match s.outcomes.remove(seq) {
            Some(Outcome::Step { status, payload }) => Poll::Ready(step_result(status, &payload)),
            None if s.cancels > *cancels => {
                let f = s.cancelled();
                Poll::Ready(Err(StepError {
                    message: f.message,
                    kind: f.kind,
                    retryable: false,
                }))
            }
            Some(other) => {
                s.fault = Some(Fault::Refused(format!(
                    "operation {seq} is a step but completed as {other:?}"
                )));
                Poll::Pending
            }
            None => {
                s.wakers.insert(*seq, cx.waker().clone());
                Poll::Pending
            }
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
        let at_ms = at_ms(s.now_ms, this.duration);
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
        match s.outcomes.remove(&seq) {
            Some(_) => Poll::Ready(Ok(())),
            None if s.cancels > this.cancels => Poll::Ready(Err(s.cancelled())),
            None => {
                s.wakers.insert(seq, cx.waker().clone());
                Poll::Pending
            }
        }
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
        let deadline_ms = this.timeout.map_or(0, |d| at_ms(s.now_ms, d).max(1));
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
        match s.outcomes.remove(&seq) {
            Some(Outcome::Signal(payload)) => {
                this.done = true;
                Poll::Ready(decode(&payload).map(Some).map_err(|e| {
                    Failure::with_kind(
                        "codec",
                        format!("signal {:?} does not decode as its type: {e}", this.name),
                    )
                }))
            }
            Some(_) => {
                this.done = true;
                Poll::Ready(Ok(None))
            }
            None if s.cancels > this.cancels => Poll::Ready(Err(s.cancelled())),
            None => {
                s.wakers.insert(seq, cx.waker().clone());
                Poll::Pending
            }
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
        s.wakers.remove(&seq);
        if s.machine.abandon_wait(seq) == Abandon::Append {
            let run = s.run;
            s.appends.push(RecordBuf::Waited {
                run,
                seq,
                outcome: WaitOutcome::Abandoned,
            });
        }
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

/// What happens to a child when its parent finishes first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ParentClose {
    /// The child is terminated (the default).
    #[default]
    Terminate,
    /// The child is asked to cancel.
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
            // Only a live call is refused: a replayed one is in the journal
            // already (its type may be registered later, or elsewhere).
            if !s.machine.is_replaying() && !s.registry.contains(this.wtype) {
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
            } | fusee_core::record::policy::ID_REJECT_DUPLICATE;
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
        match s.outcomes.remove(&seq) {
            Some(Outcome::Child { status, payload }) => Poll::Ready(match status {
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
            Some(_) => Poll::Pending,
            None if s.cancels > this.cancels => Poll::Ready(Err(s.cancelled())),
            None => {
                s.wakers.insert(seq, cx.waker().clone());
                Poll::Pending
            }
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
            cancels: self.state.borrow().cancels,
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
        self.state.borrow_mut().updates.insert(
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
        self.state.borrow().cancels
    }
}

/// What `crate::flow` (schedules, queues, step limits) needs of a run
/// beyond its public operations.
impl Ctx {
    /// The registry the run's engine shares: its host is the engine the
    /// run belongs to, once flow control is registered.
    pub(crate) fn registry(&self) -> Registry {
        self.state.borrow().registry.clone()
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
