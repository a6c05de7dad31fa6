//! What a step function is given and returns: [`StepContext`] (its
//! idempotency key, attempt, fencing token, trace context, heartbeats) and
//! [`StepError`]; the type-erased step function the runtime keeps; a
//! shard's side of its running attempts ([`StepHub`]: heartbeats on their
//! way to the loop), and the cancel of an attempt that timed out
//! ([`AttemptLink`], made only for a step with a time limit).
//! A leaf: both the workflow API (`ctx`) and the runtime import it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rustc_hash::FxHashMap;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use fusee_core::record::{RunId, Seq};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::workflow::{Failure, decode, encode};

/// How a step attempt failed: a message, an optional kind that retry
/// policies match on ([`crate::RetryPolicy::non_retryable`]), and whether it may
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
/// idempotency key, and the fencing token of its run's shard; and how it
/// reports progress ([`StepContext::heartbeat`]) and reads the progress an
/// earlier attempt reported ([`StepContext::last_heartbeat`]).
#[derive(Clone, Debug)]
pub struct StepContext {
    key: Key,
    /// The step's name (shared with its spec: a clone per attempt, no copy).
    name: fusee_core::record::Name,
    attempt: u32,
    fencing_token: u64,
    /// The run's place in its trace and the step's sequence: the
    /// attempt's span is derived only when asked for
    /// ([`StepContext::traceparent`]), so a step that never asks pays no
    /// hash.
    trace: Option<(crate::trace::RunTrace, u32)>,
    /// Its shard's hub, where heartbeats go (`None`: a context made
    /// outside the engine's shard loop, whose heartbeats go nowhere). One
    /// per shard, shared: an attempt allocates nothing for it.
    hub: Option<Arc<StepHub>>,
    /// The latest heartbeat details recorded for the step before this
    /// attempt began (by an earlier attempt, or before a crash).
    last_beat: Option<Arc<[u8]>>,
}

/// A step's idempotency key. The engine's is made only when asked for:
/// most steps never read it, and every attempt's start formatted and
/// allocated it (a fanout's `format_inner` alone: 1% of its instructions).
#[derive(Clone, Debug)]
enum Key {
    /// `<workflow ID>/<run>/<operation>`, formatted at the first ask.
    Step {
        id: Arc<str>,
        run: u64,
        seq: u32,
        made: std::sync::OnceLock<Box<str>>,
    },
    /// A key given whole (a saga's own), for step `seq` of run `run`.
    Given { key: Arc<str>, run: u64, seq: u32 },
}

impl StepContext {
    /// The context of attempt `attempt` of operation `seq` of run `run`
    /// of workflow `id`, outside any shard (the unit tests').
    #[cfg(test)]
    pub(crate) fn new(id: Arc<str>, run: u64, seq: u32, attempt: u32) -> Self {
        Self {
            key: Key::Step {
                id,
                run,
                seq,
                made: std::sync::OnceLock::new(),
            },
            name: fusee_core::record::Name::from("step"),
            attempt,
            fencing_token: 0,
            trace: None,
            hub: None,
            last_beat: None,
        }
    }

    /// The context of attempt `id` of step `name` of workflow `wf`'s run, its shard's
    /// fencing token `token`, in the run's trace `trace` (if traced),
    /// reporting heartbeats to `hub`, the step's latest recorded details
    /// being `last_beat`: made whole at once, as every attempt's start
    /// makes one.
    #[inline]
    pub(crate) fn of_attempt(
        wf: Arc<str>,
        name: fusee_core::record::Name,
        id: AttemptId,
        token: u64,
        trace: Option<crate::trace::RunTrace>,
        hub: Arc<StepHub>,
        last_beat: Option<Arc<[u8]>>,
    ) -> Self {
        let (run, seq, attempt) = id;
        Self {
            key: Key::Step {
                id: wf,
                run,
                seq,
                made: std::sync::OnceLock::new(),
            },
            name,
            attempt,
            fencing_token: token,
            trace: trace.map(|t| (t, seq)),
            hub: Some(hub),
            last_beat,
        }
    }

    /// The step's name, as the workflow called it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The step's name, shared (for errors built after the context is
    /// moved into the step's function).
    pub(crate) fn shared_name(&self) -> fusee_core::record::Name {
        self.name.clone()
    }

    /// The failure this step returns when it stops for `cause`: as
    /// [`StepCancel::to_error`] (kind `cancelled`, final), its text naming
    /// the step.
    pub fn cancel_error(&self, cause: &StepCancel) -> StepError {
        StepError::fatal(format!(
            "step {:?}: attempt cancelled: {cause}",
            self.name()
        ))
        .kind("cancelled")
    }

    /// The run and step this attempt is of.
    fn place(&self) -> (RunId, Seq) {
        match &self.key {
            Key::Step { run, seq, .. } | Key::Given { run, seq, .. } => (*run, *seq),
        }
    }

    /// Reports that this attempt is alive and how far it got: `details`
    /// (any JSON-encodable value: bytes uploaded, the last item done) are
    /// what the step's next attempt reads with
    /// [`last_heartbeat`](Self::last_heartbeat), also after a crash.
    ///
    /// Every call keeps the attempt alive against its heartbeat timeout
    /// ([`crate::Step::heartbeat_timeout`]). Not every call is recorded:
    /// the shard appends each attempt's latest details at most once a
    /// second, all attempts' together, so they ride in one group commit
    /// and heartbeats never add a flush of their own per step, however
    /// often steps call this; an attempt that fails or times out has its
    /// latest details recorded with its failure, so its next attempt reads
    /// them. After a crash the next attempt reads the latest details
    /// recorded before it (up to a second older than the latest call).
    ///
    /// Cheap and never waits: call it as often as progress is made. `Err`
    /// (kind `too-large`) when the details exceed the engine's payload
    /// limit ([`crate::Config::max_payload`]), or (kind `encode`) when
    /// they do not encode as JSON; nothing is reported then.
    pub fn heartbeat<T: Serialize + ?Sized>(&self, details: &T) -> Result<(), StepError> {
        let bytes = encode(details).map_err(|e| {
            StepError::fatal(format!(
                "step {:?}: heartbeat details do not encode as JSON: {e}",
                self.name()
            ))
            .kind("encode")
        })?;
        let Some(hub) = &self.hub else {
            return Ok(());
        };
        if bytes.len() > hub.max_payload {
            return Err(StepError::fatal(format!(
                "step {:?}: heartbeat details of {} bytes exceed the payload limit of {} bytes",
                self.name(),
                bytes.len(),
                hub.max_payload
            ))
            .kind("too-large"));
        }
        let (run, seq) = self.place();
        hub.beat((run, seq, self.attempt), bytes);
        Ok(())
    }

    /// The latest heartbeat details recorded for this step before this
    /// attempt began (an earlier attempt's, or this attempt's own before a
    /// crash ran it again): where a long job stopped, to resume from
    /// there. `Ok(None)` on a step that never reported any. `Err` (kind
    /// `decode`) when they do not decode as `T`.
    pub fn last_heartbeat<T: DeserializeOwned>(&self) -> Result<Option<T>, StepError> {
        let Some(bytes) = &self.last_beat else {
            return Ok(None);
        };
        decode(bytes).map(Some).map_err(|e| {
            StepError::fatal(format!("the last heartbeat's details do not decode: {e}"))
                .kind("decode")
        })
    }

    /// Resolves when this attempt is told to stop (see [`StepCancel`] for
    /// when): the run was cancelled or ended, the workflow dropped the
    /// step's future, or the attempt ran past a time limit. Race it
    /// against the work (`tokio::select!`) to stop early, clean up, and
    /// return: a failure returned after the cancel is final (never
    /// retried), a result is recorded as usual. Nothing forces the step to
    /// listen: one that does not runs until its function returns (its
    /// future is dropped only past a time limit, such as
    /// [`Step::timeout`](crate::Step::timeout)), even after its run was
    /// terminated or a cancel's grace passed, and no further attempt of it
    /// starts after the cancel. Never resolves on a context made outside
    /// the engine. Costs nothing until called.
    pub fn cancelled(&self) -> Cancelled {
        let (run, seq) = self.place();
        Cancelled {
            hub: self.hub.clone(),
            id: (run, seq, self.attempt),
            slot: None,
        }
    }

    /// Why this attempt was told to stop, if it was ([`cancelled`](Self::cancelled)
    /// without waiting): to look between two pieces of work.
    pub fn cancel_reason(&self) -> Option<StepCancel> {
        let (run, seq) = self.place();
        self.hub.as_ref()?.cancel_of((run, seq, self.attempt))
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
        let (run, seq) = self.place();
        self.key = Key::Given { key, run, seq };
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
        match &self.key {
            Key::Step { id, run, seq, made } => {
                made.get_or_init(|| format!("{id}/{run}/{seq}").into_boxed_str())
            }
            Key::Given { key, .. } => key,
        }
    }

    /// This attempt's number, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// Limits on a step's attempts set on its builder ([`crate::Step::timeout`],
/// [`crate::Step::heartbeat_timeout`]); the limit on all attempts together
/// is the retry policy's ([`crate::RetryPolicy::schedule_to_close`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// The longest one attempt may run.
    pub(crate) attempt: Option<Duration>,
    /// The longest an attempt may go without a heartbeat.
    pub(crate) heartbeat: Option<Duration>,
}

/// An attempt: its run, its step, its number.
pub(crate) type AttemptId = (RunId, Seq, u32);

/// Tells a shard loop that heartbeats wait in its hub (the driver's: an
/// input sent to the loop).
pub(crate) type Poster = Box<dyn Fn() + Send + Sync>;

/// One shard's side of its running step attempts, shared by their
/// contexts (one `Arc` per shard, cloned into each context: no attempt
/// allocates for it): the heartbeat details reported and not yet taken by
/// the loop, by attempt. The first heartbeat after the loop took them
/// posts one input ([`StepHub::take_beats`]); later ones only replace
/// details, so steps calling in a tight loop send at most one input at a
/// time between them all.
pub(crate) struct StepHub {
    /// The engine's payload limit, which heartbeat details must keep to.
    max_payload: usize,
    /// The latest details of each attempt that reported since the loop
    /// last took them.
    beats: Mutex<FxHashMap<AttemptId, Vec<u8>>>,
    /// An input is on its way to the loop (posted, not yet taken).
    posted: AtomicBool,
    /// How the loop is told, set once by the driver (none: a driver that
    /// takes no heartbeats, which then go nowhere).
    poster: OnceLock<Poster>,
    /// Attempts told to stop, or listening for it ([`StepContext::cancelled`]),
    /// until their end reaches the loop.
    cancels: Mutex<FxHashMap<AttemptId, Arc<CancelSlot>>>,
    /// How many `cancels` holds: an attempt's end looks there only when
    /// some are (most never are).
    slots: AtomicUsize,
}

/// An attempt's cancel: why, once told, and the wakers of its
/// [`Cancelled`] futures waiting. A future keeps its slot once it looked,
/// so a cancel right before the attempt's end (a timeout) still reaches
/// it after the loop forgot the slot.
#[derive(Default)]
struct CancelSlot(Mutex<(Option<StepCancel>, Vec<Waker>)>);

impl CancelSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<StepCancel>, Vec<Waker>)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for StepHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepHub")
            .field("max_payload", &self.max_payload)
            .finish_non_exhaustive()
    }
}

impl StepHub {
    /// A shard's hub, heartbeat details kept within `max_payload` bytes.
    pub(crate) fn new(max_payload: usize) -> Arc<Self> {
        Arc::new(Self {
            max_payload,
            beats: Mutex::new(FxHashMap::default()),
            posted: AtomicBool::new(false),
            poster: OnceLock::new(),
            cancels: Mutex::new(FxHashMap::default()),
            slots: AtomicUsize::new(0),
        })
    }

    /// The loop tells attempt `id` to stop, for `cause` (the first cause
    /// told is kept): its [`Cancelled`] futures resolve.
    pub(crate) fn cancel(&self, id: AttemptId, cause: StepCancel) {
        let slot = self.slot(id);
        let mut state = slot.lock();
        if state.0.is_none() {
            state.0 = Some(cause);
            for w in state.1.drain(..) {
                w.wake();
            }
        }
    }

    /// Attempt `id`'s slot, made if it has none.
    fn slot(&self, id: AttemptId) -> Arc<CancelSlot> {
        let mut cancels = self.cancels.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(cancels.entry(id).or_insert_with(|| {
            self.slots.fetch_add(1, Ordering::Relaxed);
            Arc::default()
        }))
    }

    /// Why attempt `id` was told to stop, if it was.
    fn cancel_of(&self, id: AttemptId) -> Option<StepCancel> {
        if self.slots.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let cancels = self.cancels.lock().unwrap_or_else(|e| e.into_inner());
        cancels.get(&id).and_then(|slot| slot.lock().0.clone())
    }

    /// Attempt `id`'s end reached the loop: its cancel is forgotten (one
    /// atomic load when no attempt has one).
    #[inline]
    pub(crate) fn attempt_ended(&self, id: AttemptId) {
        if self.slots.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut cancels = self.cancels.lock().unwrap_or_else(|e| e.into_inner());
        if cancels.remove(&id).is_some() {
            self.slots.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Heartbeats reach the loop through `poster` (the driver's); set once.
    pub(crate) fn set_poster(&self, poster: Poster) {
        let _ = self.poster.set(poster);
    }

    /// A heartbeat of attempt `id` with `details`: kept as its latest, and
    /// the loop told unless it was told already.
    fn beat(&self, id: AttemptId, details: Vec<u8>) {
        let Some(post) = self.poster.get() else {
            return;
        };
        self.beats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, details);
        if !self.posted.swap(true, Ordering::AcqRel) {
            post();
        }
    }

    /// The loop takes every attempt's latest details (a heartbeat after
    /// this tells it again).
    pub(crate) fn take_beats(&self) -> FxHashMap<AttemptId, Vec<u8>> {
        // Cleared first: a heartbeat racing with the take posts again
        // rather than being left unseen.
        self.posted.store(false, Ordering::Release);
        std::mem::take(&mut *self.beats.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The loop takes attempt `id`'s latest details, if the loop has not
    /// yet (a heartbeat just before an attempt's end may still wait here
    /// when its end reaches the loop).
    pub(crate) fn take_beat(&self, id: AttemptId) -> Option<Vec<u8>> {
        self.beats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
    }
}

/// Why a step attempt is told to stop ([`StepContext::cancelled`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepCancel {
    /// The run was cancelled ([`crate::Engine::cancel`]) with this reason.
    RunCancelled(String),
    /// The run ended while the attempt ran: terminated, or its code
    /// returned without awaiting the step.
    RunEnded,
    /// The workflow dropped the step's future (it lost a `select!`).
    Dropped,
    /// The attempt ran past a time limit ([`crate::Step::timeout`],
    /// [`crate::Step::heartbeat_timeout`],
    /// [`crate::RetryPolicy::schedule_to_close`]); its future is dropped
    /// at its next poll.
    TimedOut,
}

impl fmt::Display for StepCancel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepCancel::RunCancelled(reason) => write!(f, "the run was cancelled: {reason}"),
            StepCancel::RunEnded => f.write_str("the run ended"),
            StepCancel::Dropped => f.write_str("the workflow dropped the step's future"),
            StepCancel::TimedOut => f.write_str("the attempt ran past its time limit"),
        }
    }
}

impl StepCancel {
    /// The failure a step returns when it stops for this cause: kind
    /// `cancelled`, final. A cause knows no step:
    /// [`StepContext::cancel_error`] makes the same failure naming it.
    pub fn to_error(&self) -> StepError {
        StepError::fatal(format!("step attempt cancelled: {self}")).kind("cancelled")
    }
}

/// Resolves when a step attempt is told to stop: [`StepContext::cancelled`].
#[must_use = "a future does nothing until awaited"]
#[derive(Debug)]
pub struct Cancelled {
    hub: Option<Arc<StepHub>>,
    id: AttemptId,
    /// The attempt's slot, once looked up.
    slot: Option<Arc<CancelSlot>>,
}

impl fmt::Debug for CancelSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CancelSlot").field(&self.lock().0).finish()
    }
}

impl Future for Cancelled {
    type Output = StepCancel;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<StepCancel> {
        let this = &mut *self;
        if this.slot.is_none() {
            let Some(hub) = &this.hub else {
                return Poll::Pending;
            };
            this.slot = Some(hub.slot(this.id));
        }
        let Some(slot) = &this.slot else {
            return Poll::Pending;
        };
        let mut state = slot.lock();
        if let Some(cause) = &state.0 {
            return Poll::Ready(cause.clone());
        }
        if !state.1.iter().any(|w| w.will_wake(cx.waker())) {
            state.1.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// The loop's cancel of a running attempt of a step with a time limit,
/// which timed out: shared by the attempt's future's [`Cancellable`]
/// wrapper and the loop. Made only for a step with a limit.
#[derive(Debug, Default)]
pub(crate) struct AttemptLink {
    /// The loop cancelled the attempt (it timed out).
    cancelled: AtomicBool,
    /// The attempt's task, woken by a cancel.
    waker: Mutex<Option<Waker>>,
}

impl AttemptLink {
    /// The loop cancels the attempt: its future is dropped at its task's
    /// next poll, which this wakes.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        if let Some(w) = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take() {
            w.wake();
        }
    }
}

/// An attempt's future that its loop can cancel ([`AttemptLink::cancel`]):
/// the step's future is dropped (its work stops at the await it was
/// waiting in) and the attempt ends with a `cancelled` error the loop
/// ignores (it recorded the attempt's end when it cancelled it).
pub(crate) struct Cancellable {
    future: Option<StepFuture>,
    link: Arc<AttemptLink>,
}

impl Cancellable {
    /// `future`, cancelled through `link`.
    pub(crate) fn wrap(future: StepFuture, link: Arc<AttemptLink>) -> StepFuture {
        Box::pin(Self {
            future: Some(future),
            link,
        })
    }
}

impl Future for Cancellable {
    type Output = Result<Vec<u8>, StepError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let cancelled = || StepError::fatal("the attempt was cancelled").kind("cancelled");
        if self.link.cancelled.load(Ordering::Acquire) {
            self.future = None;
            return Poll::Ready(Err(cancelled()));
        }
        *self.link.waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
        // A cancel between the check and the waker's store finds no waker:
        // looked at again now the waker is in place.
        if self.link.cancelled.load(Ordering::Acquire) {
            self.future = None;
            return Poll::Ready(Err(cancelled()));
        }
        match self.future.as_mut() {
            Some(f) => f.as_mut().poll(cx),
            None => Poll::Ready(Err(cancelled())),
        }
    }
}

/// A step function's future, type-erased, its result already encoded.
pub(crate) type StepFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, StepError>> + Send>>;
/// A step function, type-erased. Boxed, not shared: the step's spec owns
/// it for its attempts, and a closure that captures nothing then costs
/// no allocation.
pub(crate) type StepFn = Box<dyn Fn(StepContext) -> StepFuture + Send + Sync>;

/// A step mock (feature `testing`): given the step's real function, the
/// function to run instead (which may call the real one).
#[cfg(feature = "testing")]
pub(crate) type StepWrap = Arc<dyn Fn(StepFn) -> StepFn + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The key is the same text whether it is read first on this context
    /// or on a clone, and a saga's given key replaces it.
    #[test]
    fn the_key_is_made_when_asked_and_is_the_same_on_every_clone() {
        let cx = StepContext::new(Arc::from("order-1"), 3, 7, 2);
        let copy = cx.clone();
        assert_eq!(copy.key(), "order-1/3/7");
        assert_eq!(cx.key(), "order-1/3/7");
        assert_eq!(cx.attempt(), 2);
        let given = cx.with_key(Arc::from("saga/undo"));
        assert_eq!(given.key(), "saga/undo");
    }
}
