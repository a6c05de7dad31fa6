//! Step mocks: a step's function replaced by name, in every run of a
//! [`TestEngine`](super::TestEngine) (and in each engine
//! [`crash_everywhere`](super::TestEngine::crash_everywhere) opens).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use super::TestError;
use super::timers::Timers;
use crate::clock::VirtualClock;
use crate::step::{StepContext, StepError, StepFn, StepFuture, StepWrap};

/// What a mocked step does: optionally wait on the virtual clock, fail its
/// first attempts, then return a value, fail, or run the real function.
/// Clones share the record of calls ([`StepMock::calls`]).
///
/// Attempts count per step of a run ([`StepContext::attempt`]), as the
/// engine records them: "fail twice" fails attempts 1 and 2 of every run's
/// step, and a crash does not start the count again.
///
/// A value must decode as the type the workflow's step returns; one that
/// does not fails the step when the code reads it, as a stored result of
/// the wrong type would.
#[derive(Clone, Debug)]
pub struct StepMock {
    then: Then,
    fail_first: u32,
    error: Option<StepError>,
    delay: Option<Duration>,
    calls: Arc<Mutex<Vec<MockCall>>>,
}

#[derive(Clone, Debug)]
enum Then {
    Real,
    Value(Vec<u8>),
    Fail(StepError),
}

/// One call of a mocked step: which step of which run, which attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MockCall {
    /// The step's idempotency key ([`StepContext::key`]).
    pub key: String,
    /// The attempt, from 1.
    pub attempt: u32,
}

impl StepMock {
    fn with(then: Then) -> Self {
        Self {
            then,
            fail_first: 0,
            error: None,
            delay: None,
            calls: Arc::default(),
        }
    }

    /// Runs the step's real function (useful with [`fail_first`] and
    /// [`delay`]).
    ///
    /// [`fail_first`]: StepMock::fail_first
    /// [`delay`]: StepMock::delay
    pub fn real() -> Self {
        Self::with(Then::Real)
    }

    /// Returns `value` instead of running the function. Fails when `value`
    /// does not encode as JSON (a map with keys that are not strings).
    pub fn returning<T: Serialize + ?Sized>(value: &T) -> Result<Self, TestError> {
        let bytes = serde_json::to_vec(value).map_err(|e| TestError::Mock(e.to_string()))?;
        Ok(Self::with(Then::Value(bytes)))
    }

    /// Fails every attempt with `error` (retried or not as the step's
    /// policy and `error.retryable` say).
    pub fn failing(error: StepError) -> Self {
        Self::with(Then::Fail(error))
    }

    /// Fails the first `n` attempts of each step (with a retryable error
    /// of kind `mock`, or the one [`with_error`](StepMock::with_error)
    /// sets), then does what the mock does otherwise.
    pub fn fail_first(mut self, n: u32) -> Self {
        self.fail_first = n;
        self
    }

    /// The error [`fail_first`](StepMock::fail_first)'s attempts fail with.
    pub fn with_error(mut self, error: StepError) -> Self {
        self.error = Some(error);
        self
    }

    /// Each attempt takes `d` of the test engine's virtual time before it
    /// ends (the engine counts it as waiting for time, so the clock moves
    /// on to it when everything else waits).
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = Some(d);
        self
    }

    /// Every call so far, in the order the attempts started (across the
    /// engine's crashes, and every engine of a `crash_everywhere`).
    pub fn calls(&self) -> Vec<MockCall> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The mock for one engine: its delays on `timers` (the engine's
    /// clock).
    pub(crate) fn wrap(&self, clock: &VirtualClock, timers: &Arc<Timers>) -> StepWrap {
        let mock = self.clone();
        let clock = clock.clone();
        let timers = Arc::clone(timers);
        Arc::new(move |real: StepFn| -> StepFn {
            // Shared: each attempt's future may call it.
            let real: Arc<dyn Fn(StepContext) -> StepFuture + Send + Sync> = Arc::from(real);
            let mock = mock.clone();
            let clock = clock.clone();
            let timers = Arc::clone(&timers);
            Box::new(move |sc: StepContext| -> StepFuture {
                let attempt = sc.attempt();
                mock.calls
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(MockCall {
                        key: sc.key().to_string(),
                        attempt,
                    });
                // The deadline counts from the attempt's start.
                let sleep = mock.delay.map(|d| {
                    let ms = d.as_millis().min(u128::from(u64::MAX)) as u64;
                    timers.sleep_until(clock.now_ms().saturating_add(ms))
                });
                let failure = (attempt <= mock.fail_first).then(|| {
                    mock.error.clone().unwrap_or_else(|| {
                        StepError::retryable(format!(
                            "mocked failure of attempt {attempt} (of the first {})",
                            mock.fail_first
                        ))
                        .kind("mock")
                    })
                });
                let then = mock.then.clone();
                let real = Arc::clone(&real);
                Box::pin(async move {
                    if let Some(sleep) = sleep
                        && sleep.await.is_err()
                    {
                        // Its engine crashed: nobody takes this result.
                        return Err(StepError::retryable("the test engine crashed").kind("mock"));
                    }
                    if let Some(e) = failure {
                        return Err(e);
                    }
                    match then {
                        Then::Real => real(sc).await,
                        Then::Value(bytes) => Ok(bytes),
                        Then::Fail(e) => Err(e),
                    }
                })
            })
        })
    }
}
