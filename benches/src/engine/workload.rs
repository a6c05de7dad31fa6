//! The engine workloads on Fusee: the workflows (a chain of no-op steps,
//! workflows of a few no-op steps, sleepers, a model's answer streamed)
//! and the drivers that start them and wait for every result. The comparison ([`super::measure`]) and
//! the criterion `engine` bench both use them, so the figures come from the
//! same code.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fusee::{Config, Ctx, Engine, Error, Failure, Signal, StepError, StorageConfig, Workflow};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use crate::error::TargetError;

/// The result of a workload driver.
pub type WorkResult<T> = std::result::Result<T, TargetError>;

/// One workflow of `n` sequential no-op steps, each stamped when it runs.
pub const CHAIN: Workflow<u32, u32> = Workflow::new("chain");
/// A workflow of `n` sequential no-op steps (the fanout's).
pub const STEPS: Workflow<u32, u32> = Workflow::new("steps");
/// A workflow that sleeps its input in milliseconds, then finishes.
pub const SLEEPER: Workflow<u64, ()> = Workflow::new("sleeper");
/// A model's answer streamed ([`register_talk`]): the stream benches'
/// workflow (`streams`, `stream_live`).
pub const TALK: Workflow<u64, u64> = Workflow::new("talk");

/// How long a parked sleeper sleeps: a day, so none wakes while measured.
pub const PARKED_SLEEP_MS: u64 = 86_400_000;

/// Starts in flight at once while starting many workflows: enough to fill
/// every shard's group commit, well under a shard's queue (4,096).
pub const STARTS_IN_FLIGHT: usize = 1024;

/// When each chain step ran, in order (shared with the step closures).
#[derive(Clone, Debug, Default)]
pub struct Stamps(Arc<Mutex<Vec<Instant>>>);

impl Stamps {
    /// Notes that a step runs now.
    pub fn push(&self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
    }

    /// Every stamp so far, leaving none.
    pub fn take(&self) -> Vec<Instant> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The gaps between consecutive stamps: each step's time from its
    /// start to the next step's start (its result made durable, the next
    /// step started), `n - 1` gaps for `n` stamps.
    pub fn gaps(stamps: &[Instant]) -> Vec<Duration> {
        stamps.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// The engine configuration of `backend` with its files in `dir`.
pub fn config(backend: fusee::Backend, dir: &Path) -> Config {
    Config::new(StorageConfig::new(backend, dir))
}

/// The engine configuration of Fusee on `schema` of the PostgreSQL server
/// at `url`. The lease holder is named after the schema, so a process
/// opening it after another was killed (the recovery's reopen) takes the
/// shards back at once, as a restarted deployment given its predecessor's
/// name does, instead of waiting for the dead one's leases to lapse.
pub fn postgres_config(url: &str, schema: &str) -> Config {
    let mut storage = StorageConfig::postgres(url.to_string()).postgres_schema(schema.to_string());
    storage.postgres.owner = Some(format!("fusee-compare-{schema}"));
    Config::new(storage)
}

/// Registers the three workflows; the chain's steps stamp `stamps`.
pub fn register(engine: &Engine, stamps: &Stamps) {
    let chain_stamps = stamps.clone();
    engine.register(CHAIN, move |ctx: Ctx, n: u32| {
        let stamps = chain_stamps.clone();
        async move {
            for _ in 0..n {
                let stamps = stamps.clone();
                ctx.step("stamp", move |_| {
                    let stamps = stamps.clone();
                    async move {
                        stamps.push();
                        Ok(())
                    }
                })
                .await?;
            }
            Ok::<_, Failure>(n)
        }
    });
    engine.register(STEPS, |ctx: Ctx, n: u32| async move {
        for _ in 0..n {
            ctx.step("noop", |_| async { Ok(()) }).await?;
        }
        Ok::<_, Failure>(n)
    });
    engine.register(SLEEPER, |ctx: Ctx, ms: u64| async move {
        ctx.sleep("nap", Duration::from_millis(ms)).await?;
        Ok::<_, Failure>(())
    });
}

/// Retries `op` while the engine answers [`Error::Busy`] (a full queue
/// refuses and records nothing).
pub async fn unbusy<T, F, Fut>(mut op: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    loop {
        match op().await {
            Err(Error::Busy { .. }) => tokio::time::sleep(Duration::from_millis(1)).await,
            other => return other,
        }
    }
}

/// Starts `workflow` as `{prefix}-{i}` for every `i` in `0..n` with
/// `input`, [`STARTS_IN_FLIGHT`] at a time; returns once every start is
/// durable.
pub async fn start_all<I>(
    engine: &Engine,
    workflow: Workflow<I, impl Send + 'static>,
    prefix: &str,
    n: u64,
    input: I,
) -> WorkResult<()>
where
    I: serde::Serialize + Clone + Send + Sync + 'static,
{
    for_each_in_window(n, |i| {
        let (engine, input) = (engine.clone(), input.clone());
        let id = format!("{prefix}-{i}");
        async move {
            unbusy(|| engine.start(workflow, &id, &input))
                .await
                .map(|_| ())
                .map_err(|e| -> TargetError { format!("starting {id}: {e}").into() })
        }
    })
    .await
}

/// Waits for the result of every `{prefix}-{i}` and checks it is
/// `expected`: [`STARTS_IN_FLIGHT`] reads in flight at once, in order of
/// `i`, so the time is the engine's until the last run finished, not the
/// sum of `n` round trips (a result asked for before its run finished is
/// pushed to the reader once durable). The peer is polled one run at a time
/// instead ([`super::peer::Peer::await_all`]): its status reads are SQLite
/// queries that slow its own work when many are in flight (in two quick
/// runs at load 2, its 1,000 sleepers all finished in 8.9 s when polled
/// 1,024 at a time, 6.7 s one at a time), so each engine is read the way
/// that is fastest for it.
pub async fn await_all<I, O>(
    engine: &Engine,
    workflow: Workflow<I, O>,
    prefix: &str,
    n: u64,
    expected: &O,
) -> WorkResult<()>
where
    I: Send + 'static,
    O: serde::de::DeserializeOwned + PartialEq + std::fmt::Debug + Clone + Send + Sync + 'static,
{
    for_each_in_window(n, |i| {
        let (engine, expected) = (engine.clone(), expected.clone());
        let id = format!("{prefix}-{i}");
        async move {
            let got = unbusy(|| engine.result(workflow, &id))
                .await
                .map_err(|e| -> TargetError { format!("result of {id}: {e}").into() })?;
            if got != expected {
                return Err(format!("{id} returned {got:?}, expected {expected:?}").into());
            }
            Ok(())
        }
    })
    .await
}

/// Runs `task(i)` for every `i` in `0..n`, [`STARTS_IN_FLIGHT`] at a time,
/// in order of `i`, as futures of the calling task rather than tasks of
/// their own: a tokio task per start (a spawn, a 768 B cell, a wake of a
/// worker per reply) made the driver about a quarter of the machine's CPU
/// while 100,000 sleepers started (perf), CPU the engine's shard threads
/// then lacked. The first error is returned.
pub(crate) async fn for_each_in_window<F, Fut>(n: u64, mut task: F) -> WorkResult<()>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = WorkResult<()>>,
{
    let mut window = FuturesUnordered::new();
    for i in 0..n {
        if window.len() >= STARTS_IN_FLIGHT
            && let Some(r) = window.next().await
        {
            r?;
        }
        window.push(task(i));
    }
    while let Some(r) = window.next().await {
        r?;
    }
    Ok(())
}

/// One chain: the gaps between its steps.
#[derive(Clone, Debug, Default)]
pub struct ChainRun {
    /// Each step's time, start to the next step's start.
    pub gaps: Vec<Duration>,
    /// The whole workflow, start request to result.
    pub total: Duration,
}

/// Runs one chain of `steps` steps as `id` on `engine` (registered with
/// `stamps`).
pub async fn chain(engine: &Engine, stamps: &Stamps, id: &str, steps: u32) -> WorkResult<ChainRun> {
    stamps.take();
    let t = Instant::now();
    let n = engine
        .execute(CHAIN, id, &steps)
        .await
        .map_err(|e| format!("chain {id}: {e}"))?;
    let total = t.elapsed();
    let stamps = stamps.take();
    if n != steps || stamps.len() != steps as usize {
        return Err(format!(
            "chain {id}: {n} steps returned, {} ran, {steps} asked",
            stamps.len()
        )
        .into());
    }
    Ok(ChainRun {
        gaps: Stamps::gaps(&stamps),
        total,
    })
}

/// One fanout's figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct FanoutRun {
    /// Steps completed.
    pub steps: u64,
    /// From the first start to the last result.
    pub elapsed: Duration,
    /// Process CPU time meanwhile (every thread).
    pub cpu: Duration,
    /// Records flushed meanwhile.
    pub records: u64,
    /// Flushes meanwhile.
    pub flushes: u64,
    /// Runs the engine failed for reasons of its own (the peer only; see
    /// [`super::peer::Outcome`]), not counted in `steps`.
    pub failed: u64,
}

/// Runs `runs` workflows of `steps` steps at once as `{prefix}-{i}`.
pub async fn fanout(engine: &Engine, prefix: &str, runs: u32, steps: u32) -> WorkResult<FanoutRun> {
    let before = engine.metrics().await;
    let cpu = process_cpu();
    let t = Instant::now();
    start_all(engine, STEPS, prefix, u64::from(runs), steps).await?;
    await_all(engine, STEPS, prefix, u64::from(runs), &steps).await?;
    let elapsed = t.elapsed();
    let cpu = process_cpu().saturating_sub(cpu);
    let after = engine.metrics().await;
    Ok(FanoutRun {
        steps: u64::from(runs) * u64::from(steps),
        elapsed,
        cpu,
        records: after.flushed_records - before.flushed_records,
        flushes: after.flushes - before.flushes,
        failed: 0,
    })
}

/// One timers run's figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct TimersRun {
    /// From the first start until every start was durable.
    pub starting: Duration,
    /// From the first start to the last result.
    pub all_done: Duration,
    /// Runs the engine failed for reasons of its own (the peer only).
    pub failed: u64,
}

/// Starts `n` sleepers of `sleep` as `{prefix}-{i}` and waits until all
/// finished.
pub async fn timers(
    engine: &Engine,
    prefix: &str,
    n: u32,
    sleep: Duration,
) -> WorkResult<TimersRun> {
    let ms = u64::try_from(sleep.as_millis())?;
    let t = Instant::now();
    start_all(engine, SLEEPER, prefix, u64::from(n), ms).await?;
    let starting = t.elapsed();
    await_all(engine, SLEEPER, prefix, u64::from(n), &()).await?;
    Ok(TimersRun {
        starting,
        all_done: t.elapsed(),
        failed: 0,
    })
}

/// Starts `n` day-long sleepers as `parked-{i}` on an engine that parks
/// idle runs at once, and returns once every one is parked.
pub async fn park_sleepers(engine: &Engine, n: u64) -> WorkResult<()> {
    start_all(engine, SLEEPER, "parked", n, PARKED_SLEEP_MS).await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let m = engine.metrics().await;
        if m.parked_runs >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(
                format!("{} of {n} sleepers parked after 10 minutes", m.parked_runs).into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// This process's CPU time, user and system, of every thread that ran in
/// it, to the nanosecond (`CLOCK_PROCESS_CPUTIME_ID`). `/proc/self/stat`
/// counts 10 ms ticks: a 1,000-workflow fanout's turn is about 30 ms, so
/// its CPU a step read from ticks moved by a third with where they fell.
pub fn process_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable `timespec` for the whole call, and
    // the clock is one the platform defines; nothing else is touched.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// This process's resident memory in bytes (`VmRSS`; zero where it cannot
/// be read).
pub fn resident_bytes() -> u64 {
    status_bytes("VmRSS:")
}

/// This process's peak resident memory in bytes so far (`VmHWM`; zero
/// where it cannot be read).
pub fn peak_resident_bytes() -> u64 {
    status_bytes("VmHWM:")
}

/// A `kB` field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

/// Registers [`TALK`]: one step sends its input's count of chunks
/// (`token-N`) on stream "tokens", pausing `pause.1` after every `pause.0`
/// of them if given (a model's tokens come in bursts), and ends the
/// stream; the run then waits for `wait` if given, and returns the count.
pub fn register_talk(
    engine: &Engine,
    pause: Option<(u64, Duration)>,
    wait: Option<&'static Signal<()>>,
) {
    engine.register(TALK, move |ctx: Ctx, n: u64| async move {
        let tx = ctx.stream("tokens");
        let sent = ctx
            .step("model", move |_| {
                let mut tx = tx.clone();
                async move {
                    for i in 0..n {
                        tx.send(format!("token-{i}"))
                            .await
                            .map_err(|e| StepError::fatal(e.to_string()))?;
                        if let Some((every, pause)) = pause
                            && i % every == every - 1
                        {
                            tokio::time::sleep(pause).await;
                        }
                    }
                    tx.end()
                        .await
                        .map_err(|e| StepError::fatal(e.to_string()))?;
                    Ok(n)
                }
            })
            .await?;
        if let Some(signal) = wait {
            ctx.wait_for(signal).await?;
        }
        Ok::<_, Failure>(sent)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_between_consecutive_stamps() {
        let t = Instant::now();
        let s = [
            t,
            t + Duration::from_millis(2),
            t + Duration::from_millis(5),
        ];
        assert_eq!(
            Stamps::gaps(&s),
            [Duration::from_millis(2), Duration::from_millis(3)]
        );
        assert!(Stamps::gaps(&s[..1]).is_empty());
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let mut x = 0u64;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(resident_bytes() > 0);
        assert!(process_cpu() > Duration::ZERO);
        // Finer than a 10 ms tick: the first move seen is a read's cost,
        // where a tick clock jumps by 10 ms at once.
        let before = process_cpu();
        let mut now = before;
        while now == before {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the CPU clock stands still"
            );
            now = process_cpu();
        }
        assert!(
            now - before < Duration::from_millis(10),
            "{:?}",
            now - before
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_workloads_run_on_memory() -> WorkResult<()> {
        let engine = Engine::open(Config::memory()).await?;
        let stamps = Stamps::default();
        register(&engine, &stamps);
        let c = chain(&engine, &stamps, "c", 5).await?;
        assert_eq!(c.gaps.len(), 4);
        let f = fanout(&engine, "f", 20, 3).await?;
        assert_eq!(f.steps, 60);
        let t = timers(&engine, "t", 50, Duration::from_millis(20)).await?;
        assert!(t.all_done >= Duration::from_millis(20));
        engine.close().await?;
        Ok(())
    }
}
