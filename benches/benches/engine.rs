//! The engine's figures (issue 14), each against a baseline measured in
//! the same run:
//!
//! 1. **chain**: one workflow of sequential no-op steps on the file
//!    backend: time per step against the floor's `pwrite` + `fdatasync` p50
//!    on the same disk, in interleaved rounds (goal: at most 1.2x). Each
//!    step waits for its predecessor's result to be durable (the gate), so
//!    a step costs at least one flush.
//! 2. **fanout**: 1,000 concurrent workflows of 10 no-op steps, per
//!    backend: steps per second and mean records per flush (goal on file:
//!    at least 100,000 steps/s on 2 cores).
//! 3. **parked**: 1,000,000 sleepers parked on the file backend, then the
//!    engine reopened in a fresh process: open time and resident memory
//!    after open (goals: 1 s, 150 MB).
//!
//! `cargo bench -p fusee-benches --no-default-features --features file,redb --bench engine`
//! (RocksDB too with its feature, after its 25-minute release build).
//! `FUSEE_ENGINE_BENCH=quick` runs small counts (CI-sized);
//! `FUSEE_ENGINE_PARKED` sets the sleepers.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fusee::{Config, Ctx, Engine, Failure, Workflow};
use fusee_benches::floor::FloorFile;

const CHAIN: Workflow<u32, u32> = Workflow::new("chain");
const TEN: Workflow<(), u32> = Workflow::new("ten");
const SLEEPER: Workflow<(), ()> = Workflow::new("sleeper");

fn quick() -> bool {
    std::env::var("FUSEE_ENGINE_BENCH").is_ok_and(|v| v == "quick")
}

fn register(engine: &Engine) {
    engine.register(CHAIN, |ctx: Ctx, n: u32| async move {
        for _ in 0..n {
            ctx.step("noop", |_| async { Ok(()) }).await?;
        }
        Ok::<_, Failure>(n)
    });
    engine.register(TEN, |ctx: Ctx, ()| async move {
        for _ in 0..10 {
            ctx.step("noop", |_| async { Ok(()) }).await?;
        }
        Ok::<_, Failure>(10)
    });
    engine.register(SLEEPER, |ctx: Ctx, ()| async move {
        ctx.sleep("day", Duration::from_secs(86_400)).await?;
        Ok::<_, Failure>(())
    });
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let d = dir.join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Figure 1: per-step time of a sequential workflow against the floor.
async fn chain(dir: &Path) {
    let (rounds, steps) = if quick() { (3, 50) } else { (7, 300) };
    let engine = Engine::open(Config::file(fresh(dir, "chain")).shards(1))
        .await
        .expect("open");
    register(&engine);
    let mut floor = FloorFile::create(dir.join("chain-floor.dat"), 64 << 20).expect("floor file");
    // A Step record's size on the log: a few dozen bytes.
    let record = [7u8; 64];
    let (mut floors, mut stepping, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut samples = Vec::with_capacity(steps as usize);
        for _ in 0..steps {
            let t = Instant::now();
            floor.write_sync(&record).expect("floor write");
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let floor_p50 = median(samples);
        let t = Instant::now();
        let n = engine
            .execute(CHAIN, &format!("chain-{round}"), &steps)
            .await
            .expect("chain");
        assert_eq!(n, steps);
        let per_step = t.elapsed().as_secs_f64() * 1e6 / f64::from(steps);
        floors.push(floor_p50);
        stepping.push(per_step);
        ratios.push(per_step / floor_p50);
    }
    println!(
        "chain (file): {steps} steps x {rounds} rounds: per step {:.0} us, floor p50 {:.0} us, ratio {:.2} (rounds: {})",
        median(stepping),
        median(floors),
        median(ratios.clone()),
        ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    engine.close().await.expect("close");
}

/// Figure 2: many concurrent workflows of ten steps on `config`.
async fn fanout(name: &str, config: Config) {
    let runs: u32 = if quick() { 200 } else { 1000 };
    let engine = Engine::open(config).await.expect("open");
    register(&engine);
    let before = engine.metrics().await;
    let t = Instant::now();
    let tasks: Vec<_> = (0..runs)
        .map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move {
                engine
                    .execute(TEN, &format!("ten-{i}"), &())
                    .await
                    .expect("ten steps")
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.expect("join"), 10);
    }
    let secs = t.elapsed().as_secs_f64();
    let after = engine.metrics().await;
    let flushes = after.flushes - before.flushes;
    let records = after.flushed_records - before.flushed_records;
    println!(
        "fanout ({name}): {runs} workflows x 10 steps in {secs:.2} s: {:.0} steps/s, {:.1} records per flush, flush p50 {} us",
        f64::from(runs * 10) / secs,
        records as f64 / flushes.max(1) as f64,
        after.flush_micros.percentile(50.0)
    );
    engine.close().await.expect("close");
}

/// Figure 3, first half: parks `n` sleepers in `dir` and closes.
async fn park_sleepers(dir: &Path, n: u64) {
    let config = Config::file(dir).park_after(Duration::ZERO);
    let engine = Engine::open(config).await.expect("open");
    register(&engine);
    let t = Instant::now();
    let ids: Vec<u64> = (0..n).collect();
    for chunk in ids.chunks(2000) {
        let tasks: Vec<_> = chunk
            .iter()
            .map(|&i| {
                let engine = engine.clone();
                tokio::spawn(async move {
                    engine
                        .start(SLEEPER, &format!("sleeper-{i}"), &())
                        .await
                        .expect("start")
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("join");
        }
    }
    loop {
        let m = engine.metrics().await;
        if m.parked_runs >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "parked: {n} sleepers started and parked in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    engine.close().await.expect("close");
}

/// Figure 3, second half, in a fresh process: opens the store in `dir`
/// and reports the open time and resident memory.
async fn reopen(dir: &Path) {
    let rss_before = rss_kb();
    let t = Instant::now();
    let engine = Engine::open(Config::file(dir)).await.expect("reopen");
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let m = engine.metrics().await;
    let rss_after = rss_kb();
    println!(
        "parked (file): {} parked runs: open {open_ms:.0} ms, resident {:.1} MB after open ({:.1} MB before), {} log records replayed",
        m.parked_runs,
        rss_after as f64 / 1024.0,
        rss_before as f64 / 1024.0,
        m.recovered_records
    );
    engine.close().await.expect("close");
}

/// This process's resident memory, in KiB (`VmRSS`).
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Some(i) = args.iter().position(|a| a == "--reopen") {
        let dir = PathBuf::from(args.get(i + 1).expect("--reopen DIR"));
        runtime.block_on(reopen(&dir));
        return;
    }
    // Criterion-style filters (`cargo bench -- chain`) pick figures.
    let wanted = |name: &str| {
        let filters: Vec<&String> = args
            .iter()
            .skip(1)
            .filter(|a| !a.starts_with('-'))
            .collect();
        filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
    };
    let dir = std::env::temp_dir().join(format!("fusee-engine-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench dir");
    runtime.block_on(async {
        if wanted("chain") {
            chain(&dir).await;
        }
        if wanted("fanout") {
            fanout("memory", Config::memory()).await;
            #[cfg(feature = "file")]
            fanout("file", Config::file(fresh(&dir, "fanout-file"))).await;
            #[cfg(feature = "redb")]
            fanout("redb", Config::redb(fresh(&dir, "fanout-redb"))).await;
            #[cfg(feature = "rocksdb")]
            fanout("rocksdb", Config::rocksdb(fresh(&dir, "fanout-rocksdb"))).await;
        }
    });
    if wanted("parked") {
        let n = std::env::var("FUSEE_ENGINE_PARKED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if quick() { 20_000 } else { 1_000_000 });
        let store = fresh(&dir, "parked");
        runtime.block_on(park_sleepers(&store, n));
        let status = std::process::Command::new(&args[0])
            .arg("--reopen")
            .arg(&store)
            .status()
            .expect("reopen in a fresh process");
        assert!(status.success(), "the reopen process failed");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
