//! What a finished run's history costs on disk (issue 38): the store bytes
//! per finished run of 10 steps, parked with its whole journal
//! ([`Config::history_retention`]) against parked as its summary (a
//! history time of zero), the baseline measured in the same run on the
//! same workload.
//!
//! `cargo bench -p fusee --bench history` (`FUSEE_HISTORY_RUNS` runs per
//! store, default 2,000). Prints bytes per run for each store: the whole
//! directory, and the run-store files alone.

use std::path::Path;
use std::time::Duration;

use fusee::{Config, Ctx, Engine, Failure, Workflow};

const TEN: Workflow<u64, u64> = Workflow::new("ten-steps");

fn runs() -> u64 {
    std::env::var("FUSEE_HISTORY_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

/// Bytes of the files under `dir` (recursively): all of them, and those of
/// the run store (the file backend's `store-*` generations and release logs).
fn sizes(dir: &Path) -> (u64, u64) {
    let (mut all, mut runs) = (0, 0);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            let (a, r) = sizes(&path);
            all += a;
            runs += r;
        } else if let Ok(m) = e.metadata() {
            all += m.len();
            if e.file_name().to_string_lossy().starts_with("store-") {
                runs += m.len();
            }
        }
    }
    (all, runs)
}

/// Runs `n` workflows of 10 steps to their end on a fresh file store,
/// waits until every one parked, closes, and returns the store's sizes.
async fn store(dir: &Path, history: Duration, n: u64) -> (u64, u64) {
    let _ = std::fs::remove_dir_all(dir);
    let config = Config::file(dir)
        .shards(1)
        .park_after(Duration::ZERO)
        .history_retention(history);
    let engine = Engine::open(config).await.expect("open");
    engine.register(TEN, |ctx: Ctx, seed: u64| async move {
        let mut sum = seed;
        for i in 0..10u64 {
            sum += ctx
                .step(&format!("step-{i}"), move |_| async move { Ok(i * seed) })
                .await?;
        }
        Ok::<_, Failure>(sum)
    });
    for i in 0..n {
        engine
            .execute(TEN, &format!("order-{i:06}"), &i)
            .await
            .expect("run");
    }
    for _ in 0..6000 {
        if engine.metrics().await.parked_runs >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(engine.metrics().await.parked_runs >= n, "every run parked");
    engine.close().await.expect("close");
    drop(engine);
    sizes(dir)
}

fn main() {
    // `cargo test --benches` runs this with `--bench` absent: a quick pass.
    let n = if std::env::args().any(|a| a == "--bench") {
        runs()
    } else {
        20
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let root = std::env::temp_dir().join(format!("fusee-history-bench-{}", std::process::id()));
    let (summary, whole) = rt.block_on(async {
        let summary = store(&root.join("summary"), Duration::ZERO, n).await;
        let whole = store(&root.join("whole"), Duration::from_secs(3 * 86_400), n).await;
        (summary, whole)
    });
    let _ = std::fs::remove_dir_all(&root);
    let per = |b: u64| b as f64 / n as f64;
    println!("finished runs of 10 steps, {n} per store, file backend, after close");
    println!(
        "  summary only (history 0):  {:>8.0} B/run store, {:>8.0} B/run run-store files",
        per(summary.0),
        per(summary.1)
    );
    println!(
        "  whole journal (3 days):    {:>8.0} B/run store, {:>8.0} B/run run-store files",
        per(whole.0),
        per(whole.1)
    );
    println!(
        "  history's cost:            {:>8.0} B/run run-store files ({:.2}x the summary)",
        per(whole.1.saturating_sub(summary.1)),
        whole.1 as f64 / summary.1.max(1) as f64
    );
}
