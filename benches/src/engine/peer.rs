//! The peer engine: duroxide (crates.io, Rust), a durable execution
//! framework in the Durable Task style, on its bundled SQLite provider, run
//! in this process on the same workflows as Fusee's ([`super::workload`]):
//!
//! | workload | Fusee | duroxide |
//! |---|---|---|
//! | chain | `ctx.step("stamp", ..)` `n` times | `ctx.schedule_activity("stamp", "")` `n` times |
//! | fanout | `ctx.step("noop", ..)` `n` times | `ctx.schedule_activity("noop", "")` `n` times |
//! | timers | `ctx.sleep("nap", d)` | `ctx.schedule_timer(d)` |
//!
//! Each workflow is an orchestration; each step an activity. duroxide
//! replays an orchestration's history at every turn and runs activities
//! from a work queue in its SQLite database, both polled by dispatchers.
//!
//! # Settings, and why
//!
//! [`options`]: the dispatchers poll every millisecond when idle (the
//! default, 100 ms, would add up to 100 ms to every step of a chain: a
//! peer measured at its best, not at a default no one tunes); one
//! orchestration and one activity worker (the defaults are two each: with
//! two or more orchestration workers, concurrent turns contend for
//! SQLite's write lock and duroxide failed whole orchestrations with
//! `database is locked` (SQLITE_BUSY, codes 5 and 517) in two of four
//! trial runs of the workloads on a 2-core machine, while with one
//! orchestration worker none of four failed, and was as fast within the
//! noise: about 200 steps per second either way); lock timeouts of 2 s for orchestrations and
//! activities (the defaults, 5 s and 30 s, are how long work a killed
//! process held stays invisible: the recovery figure would be mostly that
//! wait). Everything else is duroxide's default.
//!
//! # Failures
//!
//! Under load duroxide's SQLite provider can fail for reasons of its own:
//! a commit meets `database is locked` (a deferred transaction that must
//! upgrade to a write cannot wait for the lock), and then a start is
//! refused, a status read fails, or an orchestration ends as failed with
//! an infrastructure (or, after repeated lock losses, poison) error. None
//! of these stops the comparison: a start is retried
//! [`START_ATTEMPTS`] times and then given up, a status read is retried
//! until the wait's deadline, and every one is counted
//! ([`PeerFailures`]); runs that did not complete are left out of the
//! figures, and the report says how many and why. A wrong result, or a
//! failure of the workflow code itself (application or configuration),
//! is an error: that figure would be meaningless.
//!
//! # Durability
//!
//! The SQLite provider opens the database in WAL mode and sets
//! `PRAGMA synchronous = WAL`, a value SQLite does not know and reads as
//! `NORMAL`: a commit is not `fsync`ed (the WAL is synced only when it is
//! checkpointed into the database). A committed step survives the process
//! being killed, which is what the recovery workload tests, but not a power
//! loss. Fusee's figures are for steps durable against power loss; the
//! peer does less work per step.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use duroxide::providers::sqlite::SqliteProvider;
use duroxide::runtime::Runtime;
use duroxide::runtime::registry::ActivityRegistry;
use duroxide::{
    ActivityContext, Client, ClientError, OrchestrationContext, OrchestrationRegistry,
    OrchestrationStatus, RuntimeOptions,
};
use tokio::task::JoinSet;

use super::workload::{ChainRun, FanoutRun, Stamps, TimersRun, WorkResult, process_cpu};

/// How the peer makes a step durable, for the report.
pub const DURABILITY: &str = "duroxide 0.1 SqliteProvider: SQLite (bundled, sqlx) in WAL mode, \
    `PRAGMA synchronous = WAL`, which SQLite reads as NORMAL: no fsync per commit \
    (survives a killed process, not a power loss)";

/// The database file in the peer's directory.
pub const DB_FILE: &str = "duroxide.db";

/// How often the driver asks whether the run it waits for finished: the
/// client has no push, so the last result is known up to this late.
const POLL: Duration = Duration::from_millis(2);

/// Starts in flight at once: each is one SQLite write, and more writers at
/// once only queue on SQLite's lock (Fusee takes 1,024 at once: its
/// requests are queued and group-committed).
pub const STARTS_IN_FLIGHT: usize = 16;

/// Attempts at one start before it is given up and counted: a refused
/// start (`database is locked`) usually goes through at the next try.
pub const START_ATTEMPTS: u32 = 5;

/// The longest the driver waits for one run: far beyond any workload's
/// need on a working peer, so only a stuck one trips it, and the
/// comparison then stops with a message rather than hanging.
const PATIENCE: Duration = Duration::from_secs(300);

/// The runtime options the comparison runs duroxide with (see the module
/// documentation for each).
pub fn options() -> RuntimeOptions {
    RuntimeOptions {
        dispatcher_min_poll_interval: Duration::from_millis(1),
        orchestration_concurrency: 1,
        worker_concurrency: 1,
        orchestrator_lock_timeout: Duration::from_secs(2),
        worker_lock_timeout: Duration::from_secs(2),
        ..RuntimeOptions::default()
    }
}

/// The peer's infrastructure failures in one stretch of work (see the
/// module documentation), counted by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailureCounts {
    /// Starts refused [`START_ATTEMPTS`] times in a row: the run was never
    /// started, and is left out.
    pub starts_lost: u64,
    /// Starts refused once and then retried (each retry counted).
    pub starts_retried: u64,
    /// Status reads that failed and were retried.
    pub reads_retried: u64,
    /// Orchestrations duroxide ended as failed with an infrastructure or
    /// poison error: finished, but without a result.
    pub runs_failed: u64,
    /// The first message of each kind seen, for the report.
    pub messages: Vec<String>,
}

impl FailureCounts {
    /// Every failure counted, of any kind.
    pub fn total(&self) -> u64 {
        self.starts_lost + self.starts_retried + self.reads_retried + self.runs_failed
    }

    /// One sentence for the report, `None` when nothing failed.
    pub fn describe(&self) -> Option<String> {
        if self.total() == 0 {
            return None;
        }
        let mut parts = Vec::new();
        for (n, what) in [
            (self.starts_lost, "starts given up"),
            (self.starts_retried, "starts retried"),
            (self.reads_retried, "status reads retried"),
            (self.runs_failed, "orchestrations failed by duroxide"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        let mut s = format!("infrastructure failures: {}", parts.join(", "));
        if !self.messages.is_empty() {
            s.push_str(&format!(" (first: {})", self.messages.join("; ")));
        }
        Some(s)
    }

    /// Adds `other`'s counts (and its messages of kinds not yet seen).
    pub fn merge(&mut self, other: FailureCounts) {
        self.starts_lost += other.starts_lost;
        self.starts_retried += other.starts_retried;
        self.reads_retried += other.reads_retried;
        self.runs_failed += other.runs_failed;
        for m in other.messages {
            let kind = m.split(' ').next().unwrap_or_default();
            if !self.messages.iter().any(|k| k.starts_with(kind)) {
                self.messages.push(m);
            }
        }
    }

    fn note(&mut self, kind: &str, message: String) {
        // One message per kind: enough to say why, short enough to read.
        if !self.messages.iter().any(|m| m.starts_with(kind)) {
            let short: String = message.chars().take(160).collect();
            self.messages.push(format!("{kind} {short}"));
        }
    }
}

/// A shared tally of the peer's infrastructure failures: the driver and
/// the measurements hold the same one.
#[derive(Clone, Debug, Default)]
pub struct PeerFailures(Arc<Mutex<FailureCounts>>);

impl PeerFailures {
    fn update(&self, f: impl FnOnce(&mut FailureCounts)) {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Every failure counted so far, leaving none.
    pub fn take(&self) -> FailureCounts {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A running duroxide runtime on a SQLite database, and its client.
pub struct Peer {
    runtime: Arc<Runtime>,
    client: Client,
    failures: PeerFailures,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer").finish_non_exhaustive()
    }
}

impl Peer {
    /// Opens (creating if needed) the database in `dir` and starts a
    /// runtime with the three workflows; the chain's activities stamp
    /// `stamps`, and infrastructure failures are counted in `failures`.
    /// Runs the database holds (after a kill) carry on.
    pub async fn open(dir: &Path, stamps: &Stamps, failures: &PeerFailures) -> WorkResult<Peer> {
        // duroxide installs a global tracing subscriber printing its
        // warnings (lock retries under load) unless one is there: install a
        // silent one first. Its failures reach the driver, which counts them.
        let _ =
            tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default());
        let path = dir.join(DB_FILE);
        let url = format!(
            "sqlite:{}?mode=rwc",
            path.to_str()
                .ok_or_else(|| format!("{} is not UTF-8", path.display()))?
        );
        let store = SqliteProvider::new(&url, None)
            .await
            .map_err(|e| format!("opening duroxide's SQLite store {}: {e}", path.display()))?;
        let store = Arc::new(store);
        let chain_stamps = stamps.clone();
        let activities = ActivityRegistry::builder()
            .register("stamp", move |_: ActivityContext, _: String| {
                let stamps = chain_stamps.clone();
                async move {
                    stamps.push();
                    Ok(String::new())
                }
            })
            .register("noop", |_: ActivityContext, _: String| async {
                Ok(String::new())
            })
            .build();
        let orchestrations = OrchestrationRegistry::builder()
            .register("chain", |ctx: OrchestrationContext, n: String| async move {
                steps(&ctx, "stamp", &n).await
            })
            .register("steps", |ctx: OrchestrationContext, n: String| async move {
                steps(&ctx, "noop", &n).await
            })
            .register(
                "sleeper",
                |ctx: OrchestrationContext, ms: String| async move {
                    let ms: u64 = ms
                        .parse()
                        .map_err(|e| format!("sleeper input {ms:?}: {e}"))?;
                    ctx.schedule_timer(Duration::from_millis(ms)).await;
                    Ok(String::new())
                },
            )
            .build();
        let runtime =
            Runtime::start_with_options(store.clone(), activities, orchestrations, options()).await;
        Ok(Peer {
            runtime,
            client: Client::new(store),
            failures: failures.clone(),
        })
    }

    /// Stops the runtime (work in flight gets a second to finish).
    pub async fn close(self) {
        self.runtime.shutdown(None).await;
    }

    /// Starts `orchestration` as `id` with `input`, retrying a refused
    /// start; `Ok(false)` when it was refused [`START_ATTEMPTS`] times
    /// (counted), an error for a start the peer can never take.
    async fn start_one(
        client: &Client,
        failures: &PeerFailures,
        id: &str,
        orchestration: &str,
        input: &str,
    ) -> WorkResult<bool> {
        let mut pause = Duration::from_millis(5);
        for attempt in 1..=START_ATTEMPTS {
            match client.start_orchestration(id, orchestration, input).await {
                Ok(()) => return Ok(true),
                // Invalid input and the like: this driver's mistake, not
                // the peer's weather.
                Err(e @ ClientError::Provider(_)) if e.is_retryable() => {
                    if attempt == START_ATTEMPTS {
                        failures.update(|f| {
                            f.starts_lost += 1;
                            f.note("start:", format!("{e}"));
                        });
                        return Ok(false);
                    }
                    failures.update(|f| {
                        f.starts_retried += 1;
                        f.note("start:", format!("{e}"));
                    });
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Err(e) => return Err(format!("starting {id}: {e}").into()),
            }
        }
        Ok(false)
    }

    /// Starts `orchestration` as `{prefix}-{i}` for every `i` in `0..n`
    /// with `input`, [`STARTS_IN_FLIGHT`] at a time. Returns the `i` of
    /// every start given up (counted; those runs do not exist).
    pub async fn start_all(
        &self,
        orchestration: &'static str,
        prefix: &str,
        n: u64,
        input: &str,
    ) -> WorkResult<BTreeSet<u64>> {
        let mut lost = BTreeSet::new();
        let mut tasks = JoinSet::new();
        for i in 0..n {
            if tasks.len() >= STARTS_IN_FLIGHT
                && let Some(r) = tasks.join_next().await
                && let Some(i) = r??
            {
                lost.insert(i);
            }
            let (client, failures) = (self.client.clone(), self.failures.clone());
            let (id, input) = (format!("{prefix}-{i}"), input.to_string());
            tasks.spawn(async move {
                let started =
                    Self::start_one(&client, &failures, &id, orchestration, &input).await?;
                WorkResult::Ok((!started).then_some(i))
            });
        }
        while let Some(r) = tasks.join_next().await {
            if let Some(i) = r?? {
                lost.insert(i);
            }
        }
        Ok(lost)
    }

    /// Waits for `{prefix}-{i}` to finish, for every `i` in `0..n` but
    /// those in `skip` (starts given up), in order, and checks each
    /// completed one's output is `expected`. Returns how many completed
    /// with it (the rest duroxide failed: counted).
    pub async fn await_all(
        &self,
        prefix: &str,
        n: u64,
        skip: &BTreeSet<u64>,
        expected: &str,
    ) -> WorkResult<u64> {
        let mut completed = 0;
        for i in (0..n).filter(|i| !skip.contains(i)) {
            if self.await_one(&format!("{prefix}-{i}"), expected).await? == Outcome::Completed {
                completed += 1;
            }
        }
        Ok(completed)
    }

    /// Waits for `id` to finish; a completed run's output must be
    /// `expected`. A run duroxide failed for reasons of its own, and a
    /// failed status read, is counted; a failure of the workflow code, or
    /// no end within five minutes (a stuck peer), is an error.
    pub async fn await_one(&self, id: &str, expected: &str) -> WorkResult<Outcome> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.client.get_orchestration_status(id).await {
                Ok(OrchestrationStatus::Completed { output, .. }) if output == expected => {
                    return Ok(Outcome::Completed);
                }
                Ok(OrchestrationStatus::Completed { output, .. }) => {
                    return Err(format!("{id} returned {output:?}, expected {expected:?}").into());
                }
                Ok(OrchestrationStatus::Failed { details, .. })
                    if matches!(details.category(), "infrastructure" | "poison") =>
                {
                    let message = details.display_message();
                    self.failures.update(|f| {
                        f.runs_failed += 1;
                        f.note("run:", message.clone());
                    });
                    return Ok(Outcome::Infrastructure(message));
                }
                Ok(OrchestrationStatus::Failed { details, .. }) => {
                    return Err(format!("{id} failed: {}", details.display_message()).into());
                }
                // Not found: started, its first turn not yet taken.
                Ok(OrchestrationStatus::Running { .. } | OrchestrationStatus::NotFound) => {}
                Err(e) => self.failures.update(|f| {
                    f.reads_retried += 1;
                    f.note("status read:", format!("{e}"));
                }),
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{id} not finished after {} s (the peer is stuck)",
                    PATIENCE.as_secs()
                )
                .into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// One chain of `steps` activities as `id`. `Ok(None)` when duroxide
    /// could not run it (counted): the round has no figures.
    pub async fn chain(
        &self,
        stamps: &Stamps,
        id: &str,
        steps: u32,
    ) -> WorkResult<Option<ChainRun>> {
        stamps.take();
        let t = Instant::now();
        if !Self::start_one(
            &self.client,
            &self.failures,
            id,
            "chain",
            &steps.to_string(),
        )
        .await?
        {
            return Ok(None);
        }
        if let Outcome::Infrastructure(_) = self.await_one(id, &steps.to_string()).await? {
            return Ok(None);
        }
        let total = t.elapsed();
        let stamps = stamps.take();
        if stamps.len() != steps as usize {
            return Err(format!("chain {id}: {} steps ran, {steps} asked", stamps.len()).into());
        }
        Ok(Some(ChainRun {
            gaps: Stamps::gaps(&stamps),
            total,
        }))
    }

    /// `runs` orchestrations of `steps` activities at once; the steps of
    /// runs duroxide could not start or finish are left out (counted).
    pub async fn fanout(&self, prefix: &str, runs: u32, steps: u32) -> WorkResult<FanoutRun> {
        let cpu = process_cpu();
        let t = Instant::now();
        let input = steps.to_string();
        let lost = self
            .start_all("steps", prefix, u64::from(runs), &input)
            .await?;
        let completed = self
            .await_all(prefix, u64::from(runs), &lost, &input)
            .await?;
        Ok(FanoutRun {
            steps: completed * u64::from(steps),
            failed: u64::from(runs) - completed,
            elapsed: t.elapsed(),
            cpu: process_cpu().saturating_sub(cpu),
            records: 0,
            flushes: 0,
        })
    }

    /// `n` orchestrations that sleep `sleep` on a durable timer.
    pub async fn timers(&self, prefix: &str, n: u32, sleep: Duration) -> WorkResult<TimersRun> {
        let t = Instant::now();
        let lost = self
            .start_all(
                "sleeper",
                prefix,
                u64::from(n),
                &sleep.as_millis().to_string(),
            )
            .await?;
        let starting = t.elapsed();
        let completed = self.await_all(prefix, u64::from(n), &lost, "").await?;
        Ok(TimersRun {
            starting,
            all_done: t.elapsed(),
            failed: u64::from(n) - completed,
        })
    }
}

/// How a peer run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Completed with the expected output.
    Completed,
    /// duroxide failed it for a reason of its own (its SQLite provider
    /// gives up on a write after a few `database is locked` retries and
    /// fails the orchestration): the message.
    Infrastructure(String),
}

/// `n` (the orchestration's input) activities `name`, one after the other;
/// the output is `n`.
async fn steps(ctx: &OrchestrationContext, name: &str, n: &str) -> Result<String, String> {
    let count: u32 = n.parse().map_err(|e| format!("input {n:?}: {e}"))?;
    for _ in 0..count {
        ctx.schedule_activity(name, "").await?;
    }
    Ok(count.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_workloads_run_on_duroxide() -> WorkResult<()> {
        let dir = std::env::temp_dir().join(format!("fusee-peer-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let (stamps, failures) = (Stamps::default(), PeerFailures::default());
        let peer = Peer::open(&dir, &stamps, &failures).await?;
        let c = peer.chain(&stamps, "c", 5).await?;
        // A round duroxide could not run has no gaps, and is counted.
        match c {
            Some(c) => assert_eq!(c.gaps.len(), 4),
            None => assert!(failures.take().total() > 0),
        }
        let f = peer.fanout("f", 10, 3).await?;
        assert_eq!(f.steps + f.failed * 3, 30);
        let t = peer.timers("t", 10, Duration::from_millis(20)).await?;
        assert!(t.all_done >= Duration::from_millis(20));
        // A wrong expectation is an error, not a figure.
        let none = BTreeSet::new();
        assert!(peer.await_all("f", 1, &none, "4").await.is_err());
        assert_eq!(peer.await_all("f", 10, &none, "3").await?, 10 - f.failed);
        peer.close().await;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    #[test]
    fn failures_are_described_by_kind() {
        let mut f = FailureCounts::default();
        assert_eq!(f.describe(), None);
        f.starts_retried = 2;
        f.note("start:", "database is locked".into());
        f.note("start:", "another".into());
        f.runs_failed = 1;
        assert_eq!(f.total(), 3);
        assert_eq!(
            f.describe().as_deref(),
            Some(
                "infrastructure failures: 2 starts retried, 1 orchestrations failed by duroxide \
                 (first: start: database is locked)"
            )
        );
    }
}
