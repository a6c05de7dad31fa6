//! `Engine::backup`'s pause (issue 35): on the file backend, with N parked
//! runs (day-long sleepers, default 100,000), a few thousand loaded ones
//! (day-long sleepers kept in memory, default 2,000) and a live workload
//! running (one-step workflows started at a fixed rate, default 1,000 a
//! second, by 8 clients with at most one start in flight each; each run
//! finishes on its own), each of R backups (default 3) into a fresh
//! directory measures:
//!
//! - the backup's total time ([`fusee::BackupReport::took`]);
//! - the longest time any shard was held
//!   ([`fusee::BackupReport::longest_pause`]: from when the shard took the
//!   backup's input, its flush and checkpoint included, until its hold
//!   returned and it took inputs again, timed on the shard's thread);
//! - the live starts' latency (from the send until `Engine::start`
//!   returned, the start durable; from its scheduled time for a start the
//!   one before it made late) for the starts scheduled
//!   while the backup ran, p50, p99 and max, as ratios to the same figures
//!   for the starts scheduled in the 2 s just before it: the baseline,
//!   measured in the same run.
//!
//! A start kept back by the one before it counts from its scheduled time,
//! so the starts a held shard kept back count their whole wait (no
//! coordinated omission); the timer's own lateness is not counted.
//!
//! `cargo bench -p fusee-benches --no-default-features --features file --bench backup`
//! (`FUSEE_BACKUP_PARKED`, `FUSEE_BACKUP_LOADED`, `FUSEE_BACKUP_ROUNDS` and
//! `FUSEE_BACKUP_RATE` set N, the loaded runs, R and the starts a second).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fusee::{Config, Engine};
use fusee_benches::engine::workload::{self, STEPS, Stamps, WorkResult};
use fusee_benches::env_or;
use fusee_benches::stats::Latencies;

/// The live clients, each with at most one start in flight.
const CLIENTS: usize = 8;
/// The baseline window just before each backup.
const BASELINE: Duration = Duration::from_secs(2);
/// The quiet time after each backup (its destination removed), so one
/// backup's after-effects are not the next one's baseline.
const SETTLE: Duration = Duration::from_secs(1);

/// One live start: when it was sent and how long it took.
type Sample = (Instant, Duration);

/// One client: starts `live-{client}-{i}` (one step) on its schedule,
/// one every `every` from `first`, until `stop`. A start sent late because
/// the one before it was still waiting (on a held shard) counts from its
/// scheduled time, so the starts a pause kept back count their wait too.
async fn client(
    engine: Engine,
    client: usize,
    first: Instant,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> WorkResult<Vec<Sample>> {
    let mut samples = Vec::new();
    let mut due = first;
    let mut i = 0u64;
    let mut last_done = first;
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep_until(due.into()).await;
        // Late because the previous start was: the wait counts. Late
        // because the timer woke late (up to a millisecond): it does not.
        let from = if last_done > due { due } else { Instant::now() };
        let id = format!("live-{client}-{i}");
        workload::unbusy(|| engine.start(STEPS, &id, &1))
            .await
            .map_err(|e| format!("starting {id}: {e}"))?;
        last_done = Instant::now();
        samples.push((due, last_done - from));
        due += every;
        i += 1;
    }
    Ok(samples)
}

/// The latencies of the starts sent in `[from, to)`.
fn window(samples: &[Sample], from: Instant, to: Instant) -> Latencies {
    let mut l = Latencies::with_capacity(samples.len());
    for &(sent, took) in samples {
        if sent >= from && sent < to {
            l.push(took);
        }
    }
    l
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One backup: its window, the one before it, and its report.
struct Round {
    before: Instant,
    start: Instant,
    end: Instant,
    report: fusee::BackupReport,
}

async fn run(dir: &Path, parked: u64, loaded: u64, rounds: u64, rate: u64) -> WorkResult<()> {
    let src = dir.join("src");
    let t = Instant::now();
    let engine = Engine::open(Config::file(&src).park_after(Duration::ZERO)).await?;
    workload::register(&engine, &Stamps::default());
    workload::park_sleepers(&engine, parked).await?;
    engine.close().await?;
    eprintln!(
        "{parked} sleepers parked in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    // Reopened with runs kept loaded for the whole bench.
    let engine = Engine::open(Config::file(&src).park_after(Duration::from_secs(86_400))).await?;
    workload::register(&engine, &Stamps::default());
    workload::start_all(
        &engine,
        workload::SLEEPER,
        "loaded",
        loaded,
        workload::PARKED_SLEEP_MS,
    )
    .await?;
    let m = engine.metrics().await;
    eprintln!(
        "{} parked, {} loaded runs; live clients start",
        m.parked_runs, m.loaded_runs
    );
    let stop = Arc::new(AtomicBool::new(false));
    // Each client's share of the rate, the clients' schedules interleaved.
    let every = Duration::from_secs_f64(CLIENTS as f64 / rate.max(1) as f64);
    let now = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let first = now + every * u32::try_from(c).unwrap_or(0) / CLIENTS as u32;
            tokio::spawn(client(engine.clone(), c, first, every, Arc::clone(&stop)))
        })
        .collect();
    // Warm-up: the clients' first starts are not in any window.
    tokio::time::sleep(SETTLE).await;
    let mut done = Vec::new();
    let mut failed = None;
    for r in 0..rounds {
        let before = Instant::now();
        tokio::time::sleep(BASELINE).await;
        let dest = dir.join(format!("copy-{r}"));
        let start = Instant::now();
        let report = engine.backup(&dest).await;
        let end = Instant::now();
        let _ = std::fs::remove_dir_all(&dest);
        match report {
            Ok(report) => done.push(Round {
                before,
                start,
                end,
                report,
            }),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
        tokio::time::sleep(SETTLE).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for c in clients {
        samples.extend(c.await.map_err(|e| format!("a client panicked: {e}"))??);
    }
    engine.close().await?;
    if let Some(e) = failed {
        return Err(format!("backup: {e}").into());
    }
    let mut ratios = Vec::new();
    for (r, round) in done.iter().enumerate() {
        let rep = &round.report;
        let mut base = window(&samples, round.before, round.start);
        let mut during = window(&samples, round.start, round.end);
        let span = (round.end - round.start).as_secs_f64();
        let p = |l: &mut Latencies, q: f64| l.percentile(q).unwrap_or_default();
        let (b50, b99, bmax) = (p(&mut base, 50.0), p(&mut base, 99.0), p(&mut base, 100.0));
        let (d50, d99, dmax) = (
            p(&mut during, 50.0),
            p(&mut during, 99.0),
            p(&mut during, 100.0),
        );
        let pauses: Vec<String> = rep
            .pauses
            .iter()
            .map(|(s, d)| format!("{s}:{:.1}", ms(*d)))
            .collect();
        println!(
            "backup {r}: {} runs, {} shards, {:.0} MB: took {:.1} ms, longest shard hold {:.1} ms \
             (per shard, ms: {}); live starts before ({} in {:.1} s, {:.0}/s): p50 {:.2} ms, \
             p99 {:.2} ms, max {:.2} ms; during ({} in {:.3} s, {:.0}/s): p50 {:.2} ms, \
             p99 {:.2} ms, max {:.2} ms; during / before: p50 {:.2}x, p99 {:.2}x",
            rep.runs,
            rep.shards,
            rep.bytes as f64 / 1e6,
            ms(rep.took),
            ms(rep.longest_pause()),
            pauses.join(" "),
            base.len(),
            BASELINE.as_secs_f64(),
            base.len() as f64 / BASELINE.as_secs_f64(),
            ms(b50),
            ms(b99),
            ms(bmax),
            during.len(),
            span,
            during.len() as f64 / span,
            ms(d50),
            ms(d99),
            ms(dmax),
            d50.as_secs_f64() / b50.as_secs_f64(),
            d99.as_secs_f64() / b99.as_secs_f64(),
        );
        ratios.push((
            ms(rep.took),
            ms(rep.longest_pause()),
            d50.as_secs_f64() / b50.as_secs_f64(),
            d99.as_secs_f64() / b99.as_secs_f64(),
        ));
    }
    if !ratios.is_empty() {
        let med = |f: fn(&(f64, f64, f64, f64)) -> f64| {
            let mut v: Vec<f64> = ratios.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "median of {} backups ({parked} parked, {loaded} loaded, live starts {rate}/s): \
             took {:.1} ms, longest shard hold {:.1} ms, live start p50 {:.2}x and p99 {:.2}x \
             the baseline",
            ratios.len(),
            med(|r| r.0),
            med(|r| r.1),
            med(|r| r.2),
            med(|r| r.3),
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let parked = env_or("FUSEE_BACKUP_PARKED", 100_000u64);
    let loaded = env_or("FUSEE_BACKUP_LOADED", 2_000u64);
    let rounds = env_or("FUSEE_BACKUP_ROUNDS", 3u64).max(1);
    let rate = env_or("FUSEE_BACKUP_RATE", 1_000u64);
    let dir: PathBuf =
        std::env::temp_dir().join(format!("fusee-backup-bench-{}", std::process::id()));
    let result = (|| -> WorkResult<()> {
        std::fs::create_dir_all(&dir)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        runtime.block_on(run(&dir, parked, loaded, rounds, rate))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("backup bench: {e}");
            ExitCode::FAILURE
        }
    }
}
