//! The engine's figures (issue 14), each against a baseline measured in
//! the same run, on the workloads of `fusee_benches::engine::workload`
//! (the comparison's engine section runs the same code against the peer):
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
//! 4. **queue**: no-op workflows started directly, then as many enqueued
//!    through a queue with no limit (issue 20's overhead figure), each
//!    timed from the first request until every run finished: runs per
//!    second both ways and their ratio, on the file backend.
//!
//! 5. **telemetry**: the chain (file backend) and the fanout (memory and
//!    file backends) with telemetry on (metrics, and traces through a
//!    tracer provider whose batch processor exports to a no-op sink)
//!    against off ([`Config::metrics`] off, no tracer), two engines open
//!    side by side and measured in alternating rounds (which one goes
//!    first alternates too): the median of the rounds' on/off time ratios
//!    (goal: at most 1.05 on each). A render of the exposition after
//!    each round with telemetry on is part of its time. Beside the
//!    memory fanout, the SDK alone: a round's spans built and exported
//!    with no engine around them, against a round with telemetry off.
//!
//! `cargo bench -p fusee-benches --no-default-features --features file,redb --bench engine`
//! (RocksDB too with its feature, after its 25-minute release build).
//! `FUSEE_ENGINE_BENCH=quick` runs small counts (CI-sized);
//! `FUSEE_ENGINE_PARKED` sets the sleepers.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use fusee::{Backend, Config, Engine};
use fusee_benches::engine::workload::{self, Stamps, WorkResult};
use fusee_benches::engine::{EngineSubject, FANOUT_STEPS, child};
use fusee_benches::env_or;
use fusee_benches::floor::FloorFile;

fn quick() -> bool {
    std::env::var("FUSEE_ENGINE_BENCH").is_ok_and(|v| v == "quick")
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
async fn chain(dir: &Path) -> WorkResult<()> {
    let (rounds, steps) = if quick() { (3, 50) } else { (7, 300) };
    let engine =
        Engine::open(workload::config(Backend::File, &fresh(dir, "chain")).shards(1)).await?;
    let stamps = Stamps::default();
    workload::register(&engine, &stamps);
    let mut floor = FloorFile::create(dir.join("chain-floor.dat"), 64 << 20)?;
    // A Step record's size on the log: a few dozen bytes.
    let record = [7u8; 64];
    let (mut floors, mut stepping, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut samples = Vec::with_capacity(steps as usize);
        for _ in 0..steps {
            let t = std::time::Instant::now();
            floor.write_sync(&record)?;
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let floor_p50 = median(samples);
        let run = workload::chain(&engine, &stamps, &format!("chain-{round}"), steps).await?;
        let per_step = run.total.as_secs_f64() * 1e6 / f64::from(steps);
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
    engine.close().await?;
    Ok(())
}

/// Figure 2: many concurrent workflows of ten steps on `config`.
async fn fanout(name: &str, config: Config) -> WorkResult<()> {
    let runs: u32 = if quick() { 200 } else { 1000 };
    let engine = Engine::open(config).await?;
    workload::register(&engine, &Stamps::default());
    let f = workload::fanout(&engine, "ten", runs, FANOUT_STEPS).await?;
    let after = engine.metrics().await;
    println!(
        "fanout ({name}): {runs} workflows x {FANOUT_STEPS} steps in {:.2} s: {:.0} steps/s, {:.1} records per flush, flush p50 {} us",
        f.elapsed.as_secs_f64(),
        f.steps as f64 / f.elapsed.as_secs_f64(),
        f.records as f64 / f.flushes.max(1) as f64,
        after.flush_micros.percentile(50.0)
    );
    engine.close().await?;
    Ok(())
}

/// Opens an engine on `config` with the workloads registered (the chain's
/// steps stamping `stamps`).
async fn opened(config: Config, stamps: &Stamps) -> WorkResult<Engine> {
    let engine = Engine::open(config).await?;
    workload::register(&engine, stamps);
    Ok(engine)
}

/// One round's wall and process CPU times, on then off (or the other way
/// round): their on/off ratios.
async fn round_pair<F, Fut>(round: u32, mut timed: F) -> WorkResult<[f64; 2]>
where
    F: FnMut(bool) -> Fut,
    Fut: std::future::Future<Output = WorkResult<[f64; 2]>>,
{
    let (first, second) = if round.is_multiple_of(2) {
        (true, false)
    } else {
        (false, true)
    };
    let a = timed(first).await?;
    let b = timed(second).await?;
    let (on, off) = if first { (a, b) } else { (b, a) };
    Ok([on[0] / off[0], on[1] / off[1].max(1e-9)])
}

/// Figure 5: the chain and fanout with telemetry on against off.
async fn telemetry(dir: &Path) -> WorkResult<()> {
    // Round 0 warms both engines up and is not counted.
    let (rounds, steps, runs) = if quick() {
        (5, 50, 200)
    } else {
        (21, 300, 2000)
    };
    let chain_config = |on: bool| {
        let name = if on {
            "telemetry-chain-on"
        } else {
            "telemetry-chain-off"
        };
        telemetry_on(
            workload::config(Backend::File, &fresh(dir, name)).shards(1),
            on,
        )
    };
    let stamps = Stamps::default();
    let engines = [
        opened(chain_config(false), &stamps).await?,
        opened(chain_config(true), &stamps).await?,
    ];
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let ratio = round_pair(round, |on| {
            let engine = engines[usize::from(on)].clone();
            let stamps = stamps.clone();
            async move {
                let id = format!("chain-{round}");
                let cpu = workload::process_cpu();
                let run = workload::chain(&engine, &stamps, &id, steps).await?;
                if on {
                    std::hint::black_box(fusee::telemetry::render(&engine).await);
                }
                let cpu = workload::process_cpu().saturating_sub(cpu);
                Ok([run.total.as_secs_f64(), cpu.as_secs_f64()])
            }
        })
        .await?;
        if round > 0 {
            ratios.push(ratio);
        }
    }
    for e in engines {
        e.close().await?;
    }
    report_ratio(&format!("chain (file), {steps} steps"), ratios);
    type MakeConfig = fn(&Path, bool) -> Config;
    let backends: [(&str, MakeConfig); 2] = [
        ("memory", |_, on| telemetry_on(Config::memory(), on)),
        ("file", |dir, on| {
            let name = if on {
                "telemetry-fanout-on"
            } else {
                "telemetry-fanout-off"
            };
            telemetry_on(Config::file(fresh(dir, name)), on)
        }),
    ];
    for (name, config) in backends {
        let stamps = Stamps::default();
        let engines = [
            opened(config(dir, false), &stamps).await?,
            opened(config(dir, true), &stamps).await?,
        ];
        let mut ratios = Vec::new();
        for round in 0..rounds {
            let ratio = round_pair(round, |on| {
                let engine = engines[usize::from(on)].clone();
                async move {
                    let prefix = format!("ten-{round}");
                    let cpu = workload::process_cpu();
                    let t = std::time::Instant::now();
                    workload::fanout(&engine, &prefix, runs, FANOUT_STEPS).await?;
                    if on {
                        std::hint::black_box(fusee::telemetry::render(&engine).await);
                    }
                    let cpu = workload::process_cpu().saturating_sub(cpu);
                    Ok([t.elapsed().as_secs_f64(), cpu.as_secs_f64()])
                }
            })
            .await?;
            if round > 0 {
                ratios.push(ratio);
            }
        }
        if name == "memory" {
            sdk_alone(&engines[0], rounds, runs).await?;
        }
        for e in engines {
            e.close().await?;
        }
        report_ratio(
            &format!("fanout ({name}), {runs} workflows x {FANOUT_STEPS} steps"),
            ratios,
        );
    }
    Ok(())
}

/// The OpenTelemetry SDK's share alone, against a fanout round with
/// telemetry off on `off`, in alternating rounds: as many spans as a round
/// emits (one per step attempt and one per run), each built and ended as
/// the engine's `otel::Spans::emit` does (a remote parent, given IDs and
/// times, a step span's eight attributes) on a batch processor exporting
/// to [`Discard`], the provider flushed so its thread's work is counted.
/// No engine work is in it, so it bounds from below what the one
/// SDK span per attempt adds to a no-op fanout.
async fn sdk_alone(off: &Engine, rounds: u32, runs: u32) -> WorkResult<()> {
    let spans = u64::from(runs) * u64::from(FANOUT_STEPS + 1);
    // Summed over the rounds, [wall, CPU] of the SDK's arm and of the
    // fanout's.
    let mut sums = [[0.0f64; 2]; 2];
    for round in 0..rounds {
        for sdk in [round.is_multiple_of(2), !round.is_multiple_of(2)] {
            let cpu = workload::process_cpu();
            let t = std::time::Instant::now();
            if sdk {
                tokio::task::spawn_blocking(move || build_spans(spans)).await?;
            } else {
                let prefix = format!("sdk-off-{round}");
                workload::fanout(off, &prefix, runs, FANOUT_STEPS).await?;
            }
            let cpu = workload::process_cpu().saturating_sub(cpu);
            if round > 0 {
                let arm = &mut sums[usize::from(sdk)];
                arm[0] += t.elapsed().as_secs_f64();
                arm[1] += cpu.as_secs_f64();
            }
        }
    }
    let [fanout, sdk] = sums;
    println!(
        "telemetry, the SDK alone: {spans} spans a round (a fanout round's) built and exported to a \
         no-op sink / a memory fanout round with telemetry off, summed over {} rounds: process CPU \
         {:.3}, wall {:.3} (the goal's whole budget: 0.05)",
        rounds.saturating_sub(1),
        sdk[1] / fanout[1].max(1e-9),
        sdk[0] / fanout[0].max(1e-9),
    );
    Ok(())
}

/// Builds and ends `n` spans as the engine's `emit` does, on a fresh
/// provider exporting to [`Discard`], then flushes and shuts it down.
fn build_spans(n: u64) {
    use opentelemetry::trace::{
        SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
        TraceState, Tracer, TracerProvider,
    };
    use opentelemetry::{Context, KeyValue, Value};
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    let tracer = provider.tracer("fusee");
    let step: std::sync::Arc<str> = "step-name".into();
    let now = std::time::SystemTime::now();
    for i in 0..n {
        let trace_id = TraceId::from(u128::from(i / 11 + 1));
        let parent = Context::new().with_remote_span_context(SpanContext::new(
            trace_id,
            SpanId::from(i / 11 + 1),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        ));
        let mut a = Vec::with_capacity(9);
        a.extend([
            KeyValue::new("fusee.step.name", Value::String(step.clone().into())),
            KeyValue::new("fusee.step.seq", i64::try_from(i % 11).unwrap_or(0)),
            KeyValue::new("fusee.step.attempt", 1_i64),
            KeyValue::new("fusee.step.outcome", "ok"),
            KeyValue::new("fusee.span.begin", "recorded"),
            KeyValue::new("fusee.shard", 0_i64),
            KeyValue::new("fusee.run", i64::try_from(i / 11).unwrap_or(0)),
            KeyValue::new("fusee.lsn", i64::try_from(i).unwrap_or(0)),
        ]);
        let builder = SpanBuilder {
            trace_id: Some(trace_id),
            span_id: Some(SpanId::from(i + (1 << 40))),
            span_kind: Some(SpanKind::Internal),
            name: "fusee.step".into(),
            start_time: Some(now),
            attributes: Some(a),
            status: Status::Unset,
            ..SpanBuilder::from_name("")
        };
        let mut span = tracer.build_with_context(builder, &parent);
        opentelemetry::trace::Span::end_with_timestamp(&mut span, now);
    }
    // The batch thread's receiving and dropping is part of the SDK's cost.
    let _ = provider.force_flush();
    let _ = provider.shutdown();
}

/// `config` with telemetry `on` (metrics, and traces to [`Discard`]
/// through a batch processor, as an embedder would export) or off.
fn telemetry_on(config: Config, on: bool) -> Config {
    let config = config.metrics(on);
    if !on {
        return config;
    }
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    config.tracer(provider)
}

/// A span exporter that drops what it is given: the no-op sink of the
/// telemetry figure.
#[derive(Debug)]
struct Discard;

impl opentelemetry_sdk::trace::SpanExporter for Discard {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        std::hint::black_box(batch);
        Ok(())
    }
}

/// Prints a telemetry figure: the median on/off ratios of wall and CPU
/// time, and every round's wall ratio.
fn report_ratio(what: &str, ratios: Vec<[f64; 2]>) {
    let all: Vec<String> = ratios.iter().map(|r| format!("{:.3}", r[0])).collect();
    println!(
        "telemetry {what}: metrics and traces on / off, median of {} rounds: wall {:.3}, process CPU {:.3} (wall by round: {})",
        ratios.len(),
        median(ratios.iter().map(|r| r[0]).collect()),
        median(ratios.iter().map(|r| r[1]).collect()),
        all.join(" ")
    );
}

/// A no-op workflow for the queue figure.
const NOOP: fusee::Workflow<u32, u32> = fusee::Workflow::new("noop");

/// Figure 4: a queue's overhead against direct starts, in one run.
async fn queue(dir: &Path) -> WorkResult<()> {
    let n: u32 = if quick() { 200 } else { 2000 };
    let engine = Engine::open(Config::file(fresh(dir, "queue"))).await?;
    engine.register(NOOP, |_: fusee::Ctx, i: u32| async move {
        Ok::<_, fusee::Failure>(i)
    });
    engine.register_flow_control();
    // Direct: every start and every result at once.
    let t = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let engine = engine.clone();
        tasks.spawn(async move {
            let id = format!("direct-{i}");
            workload::unbusy(|| engine.start(NOOP, &id, &i)).await?;
            workload::unbusy(|| engine.result(NOOP, &id)).await
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let direct = t.elapsed();
    // Queued: enqueued in batches of 100, then every item's result (its
    // ID names no run until the queue starts it).
    let q = engine.queue("bench", NOOP).create().await?;
    let t = std::time::Instant::now();
    let items: Vec<u32> = (0..n).collect();
    let keys: Vec<String> = items.iter().map(|i| format!("item-{i}")).collect();
    let mut ids = Vec::with_capacity(n as usize);
    for (batch, batch_keys) in items.chunks(100).zip(keys.chunks(100)) {
        let done = q
            .enqueue_all(
                batch
                    .iter()
                    .zip(batch_keys)
                    .map(|(i, k)| (i, k.as_str(), fusee::queue::ItemOptions::new())),
            )
            .await?;
        ids.extend(done.into_iter().map(|e| e.id));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for id in ids {
        let engine = engine.clone();
        tasks.spawn(async move {
            // Bounded: a minute of asking for a run the queue must start.
            for _ in 0..60_000 {
                match engine.result(NOOP, &id).await {
                    Err(fusee::Error::NotFound { .. } | fusee::Error::Busy { .. }) => {
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await
                    }
                    other => return other,
                }
            }
            engine.result(NOOP, &id).await
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let queued = t.elapsed();
    let rate = |d: std::time::Duration| f64::from(n) / d.as_secs_f64();
    println!(
        "queue (file): {n} no-op workflows: direct {:.0} runs/s, through a queue with no limit {:.0} runs/s ({:.2}x direct)",
        rate(direct),
        rate(queued),
        rate(queued) / rate(direct)
    );
    engine.close().await?;
    Ok(())
}

/// Figure 3: parks `n` sleepers in `dir`, closes, and opens the store in a
/// fresh process (this bench, started as the comparison's child).
fn parked(runtime: &tokio::runtime::Runtime, dir: &Path, n: u64) -> WorkResult<()> {
    let t = std::time::Instant::now();
    runtime.block_on(async {
        let config = Config::file(dir).park_after(std::time::Duration::ZERO);
        let engine = Engine::open(config).await?;
        workload::register(&engine, &Stamps::default());
        workload::park_sleepers(&engine, n).await?;
        engine.close().await?;
        WorkResult::Ok(())
    })?;
    eprintln!(
        "parked: {n} sleepers started and parked in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let program = child::program().ok_or("no program to run as the child")?;
    let r = child::reopen_in_child(&program, EngineSubject::Fusee(Backend::File), dir)?;
    println!(
        "parked (file): {} parked runs: open {:.0} ms, resident {:.1} MB after open",
        r.parked,
        r.open_s * 1e3,
        r.resident_bytes as f64 / (1 << 20) as f64
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(code) = child::serve(args.get(1..).unwrap_or_default()) {
        return code;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
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
    let result = runtime.block_on(async {
        if wanted("chain") {
            chain(&dir).await?;
        }
        if wanted("fanout") {
            fanout("memory", Config::memory()).await?;
            #[cfg(feature = "file")]
            fanout("file", Config::file(fresh(&dir, "fanout-file"))).await?;
            #[cfg(feature = "redb")]
            fanout("redb", Config::redb(fresh(&dir, "fanout-redb"))).await?;
            #[cfg(feature = "rocksdb")]
            fanout("rocksdb", Config::rocksdb(fresh(&dir, "fanout-rocksdb"))).await?;
        }
        if wanted("queue") {
            queue(&dir).await?;
        }
        if wanted("telemetry") {
            telemetry(&dir).await?;
        }
        WorkResult::Ok(())
    });
    let result = result.and_then(|()| {
        if !wanted("parked") {
            return Ok(());
        }
        let n = env_or(
            "FUSEE_ENGINE_PARKED",
            if quick() { 20_000 } else { 1_000_000 },
        );
        parked(&runtime, &fresh(&dir, "parked"), n)
    });
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("engine bench: {e}");
            ExitCode::FAILURE
        }
    }
}
