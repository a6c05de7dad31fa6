//! The engine's activity over the last minutes, for the console's chart:
//! a task of the running server samples `Engine::metrics()` once a second
//! into a ring of the last [`SAMPLES_MAX`] samples.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the sampler reads the figures.
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);
/// Samples kept: two minutes.
pub(crate) const SAMPLES_MAX: usize = 120;

/// One reading of the engine's counters.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    started: u64,
    finished: u64,
    step_attempts: u64,
    flushes: u64,
}

/// Rates between two consecutive samples, per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rates {
    /// Seconds before the newest sample.
    pub(crate) ago_s: f64,
    pub(crate) started: f64,
    pub(crate) finished: f64,
    /// Step attempts ended (results and retried failures).
    pub(crate) steps: f64,
    pub(crate) flushes: f64,
}

/// The samples, shared by the sampler and the pages.
#[derive(Clone, Debug, Default)]
pub(crate) struct Activity(Arc<Mutex<VecDeque<Sample>>>);

impl Activity {
    fn push(&self, s: Sample) {
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() == SAMPLES_MAX {
            q.pop_front();
        }
        q.push_back(s);
    }

    /// The rates between consecutive samples, oldest first.
    pub(crate) fn rates(&self) -> Vec<Rates> {
        let q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(newest) = q.back().map(|s| s.at) else {
            return Vec::new();
        };
        q.iter()
            .zip(q.iter().skip(1))
            .map(|(a, b)| {
                let dt = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
                let per = |x: u64, y: u64| y.saturating_sub(x) as f64 / dt;
                Rates {
                    ago_s: newest.duration_since(b.at).as_secs_f64(),
                    started: per(a.started, b.started),
                    finished: per(a.finished, b.finished),
                    steps: per(a.step_attempts, b.step_attempts),
                    flushes: per(a.flushes, b.flushes),
                }
            })
            .collect()
    }
}

/// Samples `engine` into `activity` every [`INTERVAL`] until aborted.
pub(crate) fn spawn_sampler(
    engine: fusee::Engine,
    activity: Activity,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(INTERVAL);
        loop {
            tick.tick().await;
            let m = engine.metrics().await;
            activity.push(Sample {
                at: Instant::now(),
                started: m.started,
                finished: m.finished,
                step_attempts: m.step_attempts,
                flushes: m.flushes,
            });
        }
    })
}
