//! [`RetryPolicy`]: how a failed step attempt is retried.
//!
//! The policy is applied on the shard when an attempt fails, and its
//! decision is recorded (an `Attempt` record with the next attempt's time,
//! or the step's final `Step` record): after a crash the run goes on from
//! what was recorded, so a change of policy affects only decisions not
//! made yet.

use std::time::Duration;

/// What happens when a step's attempts run out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnExhausted {
    /// The step fails: its error goes to the workflow (the default).
    #[default]
    Fail,
    /// The step pauses until an operator resumes it
    /// ([`crate::Engine::resume_step`]); then it runs again with a fresh
    /// allowance of attempts.
    Pause,
}

/// How a step's failed attempts are retried.
///
/// The default retries up to 5 attempts in all, waiting 100 ms after the
/// first failure and twice as long after each next one, at most 10 s, for
/// at most 5 minutes from the first attempt, then fails the step.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included (at least 1).
    pub max_attempts: u32,
    /// Delay before the second attempt.
    pub initial_delay: Duration,
    /// Factor the delay grows by after each failed attempt (at least 1).
    pub backoff: f64,
    /// The longest delay between two attempts.
    pub max_delay: Duration,
    /// No attempt starts later than this after the first one began
    /// (`None`: no limit).
    pub max_duration: Option<Duration>,
    /// Schedule-to-close: the longest all attempts together may take,
    /// from the first attempt's recorded `Began` (after an operator's
    /// [`crate::Engine::resume_step`], from the next attempt's), across
    /// crashes (`None`: no limit). An attempt
    /// still running then is cancelled and fails the step for good with
    /// kind `timeout`; a retry that would start at or after it is not
    /// made and the step fails with kind `timeout` too. Unlike
    /// [`max_duration`](Self::max_duration) it cuts a running attempt and
    /// never pauses the step.
    pub schedule_to_close: Option<Duration>,
    /// Error kinds that are never retried (matched against
    /// [`StepError::kind`](crate::StepError)).
    pub non_retryable: Vec<String>,
    /// What happens once attempts run out.
    pub on_exhausted: OnExhausted,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        DEFAULT_POLICY.clone()
    }
}

/// The default policy, one copy: a step that keeps it stores none of its
/// own (`runtime::run::StepSpec::policy`).
pub(crate) static DEFAULT_POLICY: RetryPolicy = RetryPolicy {
    max_attempts: 5,
    initial_delay: Duration::from_millis(100),
    backoff: 2.0,
    max_delay: Duration::from_secs(10),
    max_duration: Some(Duration::from_secs(300)),
    schedule_to_close: None,
    non_retryable: Vec::new(),
    on_exhausted: OnExhausted::Fail,
};

/// What the policy decides after attempt `attempt` failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Run the next attempt at this time (ms).
    RetryAt(u64),
    /// Pause until resumed.
    Pause,
    /// Fail the step.
    Fail,
    /// Fail the step: its retry would start past its schedule-to-close
    /// limit (kind `timeout`).
    OutOfTime,
}

impl RetryPolicy {
    /// No retries: the first failure fails the step.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// At most `n` attempts in all.
    pub fn attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// The delay before the second attempt, growing by `factor` up to
    /// `max`.
    pub fn backoff(mut self, initial: Duration, factor: f64, max: Duration) -> Self {
        self.initial_delay = initial;
        self.backoff = if factor.is_finite() {
            factor.max(1.0)
        } else {
            1.0
        };
        self.max_delay = max;
        self
    }

    /// No attempt starts later than `d` after the first one.
    pub fn max_duration(mut self, d: Duration) -> Self {
        self.max_duration = Some(d);
        self
    }

    /// All attempts together take at most `d` from the first one's start
    /// (see [`schedule_to_close`](Self::schedule_to_close)).
    pub fn schedule_to_close(mut self, d: Duration) -> Self {
        self.schedule_to_close = Some(d);
        self
    }

    /// Errors of `kind` fail the step at once.
    pub fn non_retryable(mut self, kind: impl Into<String>) -> Self {
        self.non_retryable.push(kind.into());
        self
    }

    /// Pause the step when attempts run out, instead of failing it.
    pub fn pause_when_exhausted(mut self) -> Self {
        self.on_exhausted = OnExhausted::Pause;
        self
    }

    /// The delay after failed attempt `attempt` (from 1).
    pub fn delay_after(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(64) as i32;
        let ms = self.initial_delay.as_secs_f64() * 1000.0 * self.backoff.powi(exp);
        let max = self.max_delay.as_secs_f64() * 1000.0;
        Duration::from_millis(ms.min(max).max(0.0) as u64)
    }

    /// The decision after attempt `attempt` failed with an error of `kind`
    /// at `now_ms`, the step's first attempt having begun at `first_ms`.
    pub(crate) fn decide(
        &self,
        attempt: u32,
        kind: Option<&str>,
        first_ms: u64,
        now_ms: u64,
    ) -> Decision {
        let exhausted = |this: &Self| match this.on_exhausted {
            OnExhausted::Fail => Decision::Fail,
            OnExhausted::Pause => Decision::Pause,
        };
        if kind.is_some_and(|k| self.non_retryable.iter().any(|n| n == k)) {
            return Decision::Fail;
        }
        if attempt >= self.max_attempts.max(1) {
            return exhausted(self);
        }
        let at = now_ms.saturating_add(self.delay_after(attempt).as_millis() as u64);
        if let Some(limit) = self.schedule_to_close
            && at >= first_ms.saturating_add(limit.as_millis() as u64)
        {
            return Decision::OutOfTime;
        }
        if let Some(max) = self.max_duration
            && at > first_ms.saturating_add(max.as_millis() as u64)
        {
            return exhausted(self);
        }
        Decision::RetryAt(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_to_their_cap_and_attempts_run_out() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay_after(1), Duration::from_millis(100));
        assert_eq!(p.delay_after(2), Duration::from_millis(200));
        assert_eq!(p.delay_after(20), Duration::from_secs(10));
        assert_eq!(p.decide(1, None, 0, 1000), Decision::RetryAt(1100));
        assert_eq!(p.decide(5, None, 0, 1000), Decision::Fail);
        assert_eq!(
            p.clone().pause_when_exhausted().decide(5, None, 0, 1000),
            Decision::Pause
        );
        let fatal = p.clone().non_retryable("invalid-card");
        assert_eq!(fatal.decide(1, Some("invalid-card"), 0, 0), Decision::Fail);
        assert_eq!(
            fatal.decide(1, Some("timeout"), 0, 0),
            Decision::RetryAt(100)
        );
        let short = RetryPolicy::default().max_duration(Duration::from_millis(150));
        assert_eq!(short.decide(1, None, 0, 0), Decision::RetryAt(100));
        assert_eq!(short.decide(2, None, 0, 100), Decision::Fail);
        assert_eq!(RetryPolicy::none().decide(1, None, 0, 0), Decision::Fail);
        let closing = RetryPolicy::default()
            .pause_when_exhausted()
            .schedule_to_close(Duration::from_millis(250));
        assert_eq!(closing.decide(1, None, 0, 100), Decision::RetryAt(200));
        assert_eq!(
            closing.decide(2, None, 0, 50),
            Decision::OutOfTime,
            "a retry at 250 starts at the limit: never paused"
        );
    }
}
