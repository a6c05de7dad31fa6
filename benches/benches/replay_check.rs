//! The replay check's figure (issue 33): N parked runs of 10 steps each
//! (default 100,000) on the file backend, each waiting for a signal after
//! its tenth step; the engine opened again with `Config::replay_check` and
//! every run replayed against its code (`Engine::check_replay`): seconds
//! (goal: at most 5 s on 2 cores), against a baseline measured in the same
//! run on the same open engine: a listing of every run (`Engine::list`,
//! which reads each parked run's frame for its `Start`, and replays
//! nothing), so the ratio is what replaying costs over reading.
//!
//! `cargo bench -p fusee-benches --no-default-features --features file --bench replay_check`
//! (`FUSEE_CHECK_PARKED` sets the runs.)

use std::process::ExitCode;
use std::time::{Duration, Instant};

use fusee::{Config, Ctx, Engine, Failure, ListFilter, Signal, Workflow};
use fusee_benches::engine::workload::{self, WorkResult};
use fusee_benches::env_or;

const TEN: Workflow<u64, u64> = Workflow::new("ten-steps");
const GO: Signal<()> = Signal::new("go");

fn register(engine: &Engine) {
    engine.register(TEN, |ctx: Ctx, n: u64| async move {
        let mut total = n;
        for i in 0..10u64 {
            total += ctx
                .step(&format!("step-{i}"), move |_| async move { Ok(i) })
                .await?;
        }
        ctx.wait_for(&GO).await?;
        Ok::<_, Failure>(total)
    });
}

fn config(dir: &std::path::Path) -> Config {
    Config::file(dir).shards(2).park_after(Duration::ZERO)
}

fn main() -> ExitCode {
    let n: u64 = env_or("FUSEE_CHECK_PARKED", 100_000);
    let dir = std::env::temp_dir().join(format!("fusee-check-bench-{}", std::process::id()));
    let result = (|| -> WorkResult<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let t = Instant::now();
            let engine = Engine::open(config(&dir)).await?;
            register(&engine);
            workload::start_all(&engine, TEN, "ten", n, 1u64).await?;
            let deadline = Instant::now() + Duration::from_secs(1200);
            while engine.metrics().await.parked_runs < n {
                if Instant::now() > deadline {
                    return Err("the runs did not all park in 20 minutes".into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            engine.close().await?;
            eprintln!(
                "{n} runs of 10 steps parked in {:.1} s",
                t.elapsed().as_secs_f64()
            );

            let engine = Engine::open(config(&dir).replay_check(true)).await?;
            register(&engine);
            let t = Instant::now();
            let report = engine.check_replay().await?;
            let check_s = t.elapsed().as_secs_f64();
            if report.checked != n || !report.divergences.is_empty() {
                return Err(format!(
                    "the check replayed {} of {n} runs, {} diverged",
                    report.checked,
                    report.divergences.len()
                )
                .into());
            }
            let t = Instant::now();
            let mut filter = ListFilter::new().limit(10_000);
            let mut listed = 0u64;
            loop {
                let page = engine.list(filter.clone()).await?;
                listed += page.runs.len() as u64;
                match page.next {
                    Some(c) => filter = filter.after(c),
                    None => break,
                }
            }
            let list_s = t.elapsed().as_secs_f64();
            engine.close().await?;
            println!(
                "replay check, file, 2 shards: {n} parked runs of 10 steps replayed in \
                 {check_s:.2} s ({:.1} us a run); listing all {listed} runs: {list_s:.2} s; \
                 check / list = {:.1}x",
                check_s * 1e6 / n as f64,
                check_s / list_s
            );
            WorkResult::Ok(())
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replay check bench: {e}");
            ExitCode::FAILURE
        }
    }
}
