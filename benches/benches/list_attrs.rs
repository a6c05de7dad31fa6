//! Listing by search attribute (issue 33, part 1): N finished runs parked
//! on the file backend (default 10,000; `FUSEE_ATTR_RUNS` sets it; the
//! issue's figure is 1,000,000), each started with `customer_id` (an int,
//! 1,000 customers), `amount` (a float) and `order_date` (a time). The
//! engine is opened again and a filtered listing asked at once (it
//! reads the shards' runs into their indexes, newest first, as far as
//! its first page needs, racing the background builds: its time and the
//! process's resident memory before and after are printed); opened again
//! and asked after a wait (the index built in the background meanwhile);
//! then the first page (100 runs) of each
//! listing is measured against the baseline measured in the same run: the
//! unfiltered `Engine::list` first page. Goal: a filtered first page in at
//! most 50 ms.
//!
//! `FUSEE_ATTR_RUNS=1000000 cargo bench -p fusee-benches --bench list_attrs -- --warm-up-time 1 --measurement-time 5`

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use fusee::{
    AttrValue, Config, Ctx, Engine, Failure, ListFilter, SearchAttributes, StartOptions, Workflow,
};
use fusee_benches::engine::workload::{STARTS_IN_FLIGHT, unbusy};

const ORDER: Workflow<(), ()> = Workflow::new("order");
const DAY_MS: u64 = 86_400_000;
const EPOCH_MS: u64 = 1_700_000_000_000;

fn runs() -> u64 {
    std::env::var("FUSEE_ATTR_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn register(engine: &Engine) {
    engine.register(ORDER, |_ctx: Ctx, ()| async move { Ok::<_, Failure>(()) });
}

fn config(dir: &std::path::Path) -> Config {
    Config::file(dir).shards(2).park_after(Duration::ZERO)
}

/// The process's resident memory, in bytes (0 where /proc has none).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn attrs(i: u64) -> SearchAttributes {
    SearchAttributes::new()
        .int("customer_id", (i % 1000) as i64)
        .float("amount", (i % 10_000) as f64)
        .time("order_date", EPOCH_MS + (i % 3650) * DAY_MS)
}

async fn populate(dir: &std::path::Path, n: u64) {
    let engine = Engine::open(config(dir)).await.expect("open");
    register(&engine);
    let t = Instant::now();
    let mut next = 0u64;
    let mut in_flight = tokio::task::JoinSet::new();
    while next < n || !in_flight.is_empty() {
        while next < n && in_flight.len() < STARTS_IN_FLIGHT {
            let (engine, i) = (engine.clone(), next);
            in_flight.spawn(async move {
                let id = format!("order-{i}");
                unbusy(|| {
                    engine.start_with_options(
                        ORDER,
                        &id,
                        &(),
                        StartOptions::new().attributes(attrs(i)),
                    )
                })
                .await
                .expect("start");
            });
            next += 1;
        }
        if let Some(r) = in_flight.join_next().await {
            r.expect("start task");
        }
    }
    while engine.metrics().await.parked_runs < n {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    engine.close().await.expect("close");
    eprintln!(
        "{n} runs started and parked in {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// The median of `k` timings of `f`.
fn median(
    rt: &tokio::runtime::Runtime,
    k: usize,
    mut f: impl FnMut() -> ListFilter,
    engine: &Engine,
) -> Duration {
    let mut t: Vec<Duration> = (0..k)
        .map(|_| {
            let filter = f();
            let s = Instant::now();
            let page = rt.block_on(engine.list(filter)).expect("list");
            let d = s.elapsed();
            assert!(!page.runs.is_empty());
            d
        })
        .collect();
    t.sort();
    t[k / 2]
}

fn bench(c: &mut Criterion) {
    let n = runs();
    let dir = std::env::temp_dir().join(format!("fusee-attrs-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(populate(&dir, n));

    // Right after an open: the first filtered listing reads on into the
    // index's build as far as its page needs (the worst case).
    let t = Instant::now();
    let engine = rt.block_on(Engine::open(config(&dir))).expect("reopen");
    register(&engine);
    let open_s = t.elapsed().as_secs_f64();
    let before = rss();
    let t = Instant::now();
    let first = rt
        .block_on(engine.list(ListFilter::new().attribute("customer_id", 42)))
        .expect("first filtered listing");
    let build_s = t.elapsed().as_secs_f64();
    let after = rss();
    assert_eq!(first.runs.len(), 100.min((n / 1000) as usize));
    eprintln!(
        "{n} parked runs: open {open_s:.2} s; first filtered listing right after it \
         (reads into the index's build) {build_s:.2} s; resident memory +{:.1} MB \
         ({:.0} bytes a run, 3 attributes each)",
        after.saturating_sub(before) as f64 / 1e6,
        after.saturating_sub(before) as f64 / n as f64
    );
    rt.block_on(engine.close()).expect("close");
    // Again, with the background build given time (8 s a million runs).
    let engine = rt.block_on(Engine::open(config(&dir))).expect("reopen");
    register(&engine);
    let wait = Duration::from_millis((n / 125).max(500));
    std::thread::sleep(wait);
    let t = Instant::now();
    rt.block_on(engine.list(ListFilter::new().attribute("customer_id", 42)))
        .expect("first filtered listing");
    eprintln!(
        "first filtered listing {:.1} s after the open (built in the background): {:.2} ms",
        wait.as_secs_f64(),
        t.elapsed().as_secs_f64() * 1e3
    );

    let unfiltered = || ListFilter::new();
    let by_value = || ListFilter::new().attribute("customer_id", 42);
    let above = || ListFilter::new().attribute_above("amount", 9_900.0);
    let between = || {
        ListFilter::new().attribute_between(
            "order_date",
            AttrValue::Time(EPOCH_MS + 100 * DAY_MS),
            AttrValue::Time(EPOCH_MS + 130 * DAY_MS),
        )
    };
    // Interleaved medians, so load on the machine weighs on all alike.
    let (mut base, mut eq, mut gt, mut bt) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        base.push(median(&rt, 21, unfiltered, &engine));
        eq.push(median(&rt, 21, by_value, &engine));
        gt.push(median(&rt, 21, above, &engine));
        bt.push(median(&rt, 21, between, &engine));
    }
    let mid = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (base, eq, gt, bt) = (mid(&mut base), mid(&mut eq), mid(&mut gt), mid(&mut bt));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "list first page (100 runs), file, 2 shards, {n} parked runs: unfiltered {:.2} ms; \
         customer_id = 42: {:.2} ms ({:.2}x); amount > 9900.0: {:.2} ms ({:.2}x); \
         order_date in 31 days: {:.2} ms ({:.2}x)",
        ms(base),
        ms(eq),
        ms(eq) / ms(base),
        ms(gt),
        ms(gt) / ms(base),
        ms(bt),
        ms(bt) / ms(base)
    );

    let mut g = c.benchmark_group(format!("list_first_page_{n}_runs"));
    g.sample_size(20);
    for (name, f) in [
        ("unfiltered", &unfiltered as &dyn Fn() -> ListFilter),
        ("customer_id_eq", &by_value),
        ("amount_above", &above),
        ("order_date_between", &between),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| rt.block_on(engine.list(f())).expect("list"))
        });
    }
    g.finish();
    rt.block_on(engine.close()).expect("close");
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
