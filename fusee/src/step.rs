//! What a step function is given and returns: [`StepContext`] (its
//! idempotency key, attempt, fencing token, trace context) and
//! [`StepError`]; and the type-erased step function the runtime keeps.
//! A leaf: both the workflow API (`ctx`) and the runtime import it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::workflow::Failure;

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
/// idempotency key, and the fencing token of its run's shard.
#[derive(Clone, Debug)]
pub struct StepContext {
    key: Key,
    attempt: u32,
    fencing_token: u64,
    /// The run's place in its trace and the step's sequence: the
    /// attempt's span is derived only when asked for
    /// ([`StepContext::traceparent`]), so a step that never asks pays no
    /// hash.
    trace: Option<(crate::trace::RunTrace, u32)>,
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
    /// A key given whole (a saga's own).
    Given(Arc<str>),
}

impl StepContext {
    /// The context of attempt `attempt` of operation `seq` of run `run`
    /// of workflow `id`.
    pub(crate) fn new(id: Arc<str>, run: u64, seq: u32, attempt: u32) -> Self {
        Self {
            key: Key::Step {
                id,
                run,
                seq,
                made: std::sync::OnceLock::new(),
            },
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
        self.key = Key::Given(key);
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
        match &self.key {
            Key::Step { id, run, seq, made } => {
                made.get_or_init(|| format!("{id}/{run}/{seq}").into_boxed_str())
            }
            Key::Given(key) => key,
        }
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
