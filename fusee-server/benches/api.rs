//! The API's cost, measured against the engine in-process in the same run.
//!
//! 1. Start and wait for a one-step run: `Engine::execute` in-process and
//!    `POST /api/v1/execute` through `fusee_server::Client`, alternating
//!    one of each per round, on the same engine (memory backend, so the
//!    difference is the HTTP path, not the disk); and `GET /healthz`, one
//!    loopback round trip, as the floor. The goal: API time at most twice
//!    the in-process time plus one round trip.
//! 2. The runs list's first page (100 runs) with many parked runs
//!    (`FUSEE_SERVER_BENCH_PARKED`, default 100,000): p50 and p99 of
//!    `GET /api/v1/runs`, against `Engine::list` in-process.
//!
//! `cargo bench -p fusee-server --bench api` (rounds:
//! `FUSEE_SERVER_BENCH_ROUNDS`, default 2,000).

use std::time::{Duration, Instant};

use fusee::{Config, Ctx, Engine, Failure, IdPolicy, ListFilter, Signal, Workflow};
use fusee_server::model::{ExecuteRequest, RunsQuery, StartRequest};
use fusee_server::{Client, Server};
use serde_json::{Value, json};

const ECHO: Workflow<Value, Value> = Workflow::new("echo");
const PARKED: Workflow<Value, ()> = Workflow::new("parked");
const NEVER: Signal<()> = Signal::new("never");

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

fn line(name: &str, mut d: Vec<Duration>) -> (Duration, Duration) {
    d.sort();
    let mean = d.iter().sum::<Duration>() / d.len().max(1) as u32;
    let (p50, p99) = (pct(&d, 50.0), pct(&d, 99.0));
    println!(
        "{name:<34} n={:<7} mean {:>9.1} µs  p50 {:>9.1} µs  p99 {:>9.1} µs",
        d.len(),
        mean.as_secs_f64() * 1e6,
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    (mean, p99)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        start_and_wait().await;
        first_page().await;
    });
}

async fn start_and_wait() {
    let rounds = env("FUSEE_SERVER_BENCH_ROUNDS", 2000);
    let engine = Engine::open(Config::memory()).await.expect("open");
    engine.register(ECHO, |ctx: Ctx, v: Value| async move {
        ctx.step("echo", move |_| {
            let v = v.clone();
            async move { Ok(v) }
        })
        .await
        .map_err(Failure::from)
    });
    let server = Server::new(engine.clone())
        .bind("127.0.0.1:0".parse().expect("addr"))
        .start()
        .await
        .expect("server");
    let client = Client::new(&server.url()).expect("client");
    let (mut local, mut api, mut rtt) = (Vec::new(), Vec::new(), Vec::new());
    // Warm-up: connections, allocations.
    for i in 0..100 {
        let _ = engine.execute(ECHO, &format!("w-{i}"), &json!(i)).await;
        let _ = client.health().await;
    }
    for i in 0..rounds {
        let t = Instant::now();
        engine
            .execute(ECHO, &format!("l-{i}"), &json!(i))
            .await
            .expect("in-process");
        local.push(t.elapsed());
        let t = Instant::now();
        client
            .execute(&ExecuteRequest {
                start: StartRequest {
                    workflow: "echo".into(),
                    id: format!("a-{i}"),
                    input: json!(i),
                    policy: None,
                    version: None,
                    attributes: None,
                },
                timeout_ms: Some(30_000),
            })
            .await
            .expect("api");
        api.push(t.elapsed());
        let t = Instant::now();
        client.health().await.expect("health");
        rtt.push(t.elapsed());
    }
    println!("start and wait for a one-step run ({rounds} rounds, alternating):");
    let (l, lp) = line("in-process Engine::execute", local);
    let (a, ap) = line("API POST /api/v1/execute", api);
    let (r, _) = line("loopback round trip GET /healthz", rtt);
    println!(
        "ratio API / in-process: mean {:.2}x, p99 {:.2}x; API / (2 x in-process + round trip): mean {:.2}",
        a.as_secs_f64() / l.as_secs_f64(),
        ap.as_secs_f64() / lp.as_secs_f64(),
        a.as_secs_f64() / (2.0 * l.as_secs_f64() + r.as_secs_f64())
    );
    server.stop().await.expect("stop");
    engine.close().await.expect("close");
}

async fn first_page() {
    let n = env("FUSEE_SERVER_BENCH_PARKED", 100_000);
    let rounds = env("FUSEE_SERVER_BENCH_PAGES", 200);
    let engine = Engine::open(Config::memory().park_after(Duration::from_millis(50)))
        .await
        .expect("open");
    engine.register(PARKED, |ctx: Ctx, _: Value| async move {
        ctx.wait_for(&NEVER).await?;
        Ok::<_, Failure>(())
    });
    let t = Instant::now();
    let ids: Vec<usize> = (0..n).collect();
    for chunk in ids.chunks(1000) {
        let mut starts = Vec::with_capacity(chunk.len());
        for &i in chunk {
            let engine = engine.clone();
            starts.push(tokio::spawn(async move {
                engine
                    .start_json("parked", &format!("p-{i:08}"), &json!(i), IdPolicy::NewOnly)
                    .await
            }));
        }
        for s in starts {
            s.await.expect("task").expect("start");
        }
    }
    // Every run idle and parked before measuring.
    loop {
        let m = engine.metrics().await;
        if m.parked_runs as usize >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "\n{n} runs started and parked in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let server = Server::new(engine.clone())
        .bind("127.0.0.1:0".parse().expect("addr"))
        .start()
        .await
        .expect("server");
    let client = Client::new(&server.url()).expect("client");
    let (mut local, mut api) = (Vec::new(), Vec::new());
    let q = RunsQuery {
        limit: Some(100),
        ..RunsQuery::default()
    };
    for _ in 0..rounds {
        let t = Instant::now();
        let page = engine
            .list(ListFilter::new().limit(100))
            .await
            .expect("list");
        local.push(t.elapsed());
        assert_eq!(page.runs.len(), 100);
        let t = Instant::now();
        let page = client.runs(&q).await.expect("api list");
        api.push(t.elapsed());
        assert_eq!(page.runs.len(), 100);
    }
    println!("first page of 100 runs with {n} parked ({rounds} rounds, alternating):");
    let (_, lp) = line("in-process Engine::list", local);
    let (_, ap) = line("API GET /api/v1/runs", api);
    println!(
        "p99 API {:.2} ms (goal 50 ms), {:.2}x in-process",
        ap.as_secs_f64() * 1e3,
        ap.as_secs_f64() / lp.as_secs_f64()
    );
    server.stop().await.expect("stop");
    engine.close().await.expect("close");
}
