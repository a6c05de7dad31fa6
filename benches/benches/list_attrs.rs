//! Listing by search attribute (issue 33, part 1): N finished runs parked
//! (default 10,000; `FUSEE_ATTR_RUNS` sets it; the figure is
//! 1,000,000), each started with `customer_id` (an int, 1,000 customers),
//! `amount` (a float) and `order_date` (a time), on the file backend, or
//! the one `FUSEE_ATTR_BACKEND` names (`redb`, `rocksdb`, or `postgres`
//! with `FUSEE_PG_URL`, in schema `fusee_attrs_bench`, dropped before and
//! after). Printed, each with the process's resident memory before and
//! after where it matters:
//!
//! 1. the open after a clean close and its first filtered listing at once
//!    (the close wrote the index's snapshot: the open reads it), and the
//!    close's time;
//! 2. the same after a crash (a child process opens the store, starts a
//!    run, lets a checkpoint pass, and is killed): the last checkpoint
//!    names no snapshot, so the listing reads the shards' runs into their
//!    indexes, newest first, as far as its first page needs, racing the
//!    background builds (the worst case);
//! 3. the first filtered listing after a wait (built in the background).
//!
//! Then, on the backends kept in a directory, the store is copied by
//! `fusee::migrate` (a copy carries no snapshot) and the copy opened: its
//! first filtered listing reads the shards' runs into their indexes,
//! newest first, as far as its page needs, racing the background builds
//! (the worst case, as after an upgrade from a store without snapshots).
//!
//! Then the first page (100 runs) of each listing is measured against the
//! baseline measured in the same run: the unfiltered `Engine::list` first
//! page. Goal: a filtered first page in at most 50 ms.
//!
//! `FUSEE_ATTR_RUNS=1000000 cargo bench -p fusee-benches --bench list_attrs -- --warm-up-time 1 --measurement-time 5`

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::io::BufRead;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use fusee::{
    AttrValue, Backend, Config, Ctx, Engine, Failure, ListFilter, SearchAttributes, StartOptions,
    StorageConfig, Workflow,
};
use fusee_benches::engine::workload::{STARTS_IN_FLIGHT, unbusy};
use fusee_benches::env_or;

const ORDER: Workflow<(), ()> = Workflow::new("order");
const DAY_MS: u64 = 86_400_000;
const EPOCH_MS: u64 = 1_700_000_000_000;

fn runs() -> u64 {
    env_or("FUSEE_ATTR_RUNS", 10_000)
}

fn register(engine: &Engine) {
    engine.register(ORDER, |_ctx: Ctx, ()| async move { Ok::<_, Failure>(()) });
}

/// The PostgreSQL schema the bench writes (dropped before and after).
const SCHEMA: &str = "fusee_attrs_bench";
/// Set in the crash child's environment: the store's directory.
const CHILD_DIR: &str = "FUSEE_ATTR_CHILD_DIR";
/// Set in the crash child's environment: the round (its runs' IDs).
const CHILD_ROUND: &str = "FUSEE_ATTR_CHILD_ROUND";
/// The line the crash child prints once its checkpoint passed.
const CHECKPOINTED: &str = "checkpointed";

fn backend() -> Backend {
    std::env::var("FUSEE_ATTR_BACKEND")
        .ok()
        .map(|v| {
            v.parse()
                .expect("FUSEE_ATTR_BACKEND: file, redb, rocksdb or postgres")
        })
        .unwrap_or(Backend::File)
}

fn config(dir: &Path) -> Config {
    let storage = match backend() {
        Backend::Postgres => {
            let url = std::env::var("FUSEE_PG_URL")
                .expect("FUSEE_ATTR_BACKEND=postgres needs FUSEE_PG_URL");
            StorageConfig::postgres(url).postgres_schema(SCHEMA)
        }
        b => StorageConfig::new(b, dir),
    };
    Config::new(storage).shards(2).park_after(Duration::ZERO)
}

/// Drops [`SCHEMA`] with `psql` (on PostgreSQL).
fn drop_schema() {
    if backend() != Backend::Postgres {
        return;
    }
    let url = std::env::var("FUSEE_PG_URL").expect("FUSEE_PG_URL");
    let _ = std::process::Command::new("psql")
        .args([
            &url,
            "-q",
            "-c",
            &format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"),
        ])
        .status();
}

/// The bench's runtime: two workers, as the machine has two cores.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The crash child: opens the store, starts runs without attributes on
/// every shard, lets a checkpoint pass, says so, and waits to be killed.
fn crash_child(dir: &Path) {
    runtime().block_on(async {
        let engine = Engine::open(config(dir).checkpoint_interval(Duration::from_millis(100)))
            .await
            .expect("child open");
        register(&engine);
        let round = std::env::var(CHILD_ROUND).unwrap_or_default();
        start_plain(&engine, &format!("crash-{round}")).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        println!("{CHECKPOINTED}");
        std::future::pending::<()>().await;
    });
}

/// Starts 64 runs without attributes, IDs `{prefix}-{i}`: some on every
/// shard (each shard then has something to checkpoint).
async fn start_plain(engine: &Engine, prefix: &str) {
    for i in 0..64 {
        engine
            .start(ORDER, &format!("{prefix}-{i}"), &())
            .await
            .expect("start");
    }
}

/// Runs [`crash_child`] and kills it (SIGKILL) once it checkpointed.
fn crash(dir: &Path, round: usize) {
    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .env(CHILD_DIR, dir)
        .env(CHILD_ROUND, round.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the crash child");
    let out = child.stdout.take().expect("piped");
    let said = std::io::BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|l| l == CHECKPOINTED);
    child.kill().expect("kill the child");
    let _ = child.wait();
    assert!(said, "the crash child ended before its checkpoint");
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

/// The store at `dir` copied by `fusee::migrate` (a copy carries no
/// snapshot) and the copy opened: its first filtered listing reads into
/// the index's build (the worst case).
fn copied_without_snapshot(rt: &tokio::runtime::Runtime, dir: &Path, n: u64, expected: usize) {
    let copy = dir.with_extension("copy");
    let _ = std::fs::remove_dir_all(&copy);
    fusee::migrate::migrate(
        &fusee::migrate::Source::Dir(dir.to_path_buf()),
        &StorageConfig::new(backend(), &copy),
        &mut |_| std::ops::ControlFlow::Continue(()),
    )
    .expect("copy");
    let (engine, open_s) = open(rt, &copy);
    let (first_s, len) = first_listing(rt, &engine);
    assert_eq!(len, expected);
    eprintln!(
        "{n} parked runs, a copy without a snapshot: open {open_s:.2} s; first filtered listing \
         (reads into the index's build) {first_s:.2} s"
    );
    rt.block_on(engine.close()).expect("close");
    let _ = std::fs::remove_dir_all(&copy);
}

/// Opens the store at `dir`: the engine and the open's seconds. On
/// PostgreSQL the killed child's leases are waited out first (not timed).
fn open(rt: &tokio::runtime::Runtime, dir: &Path) -> (Engine, f64) {
    for _ in 0..240 {
        let t = Instant::now();
        match rt.block_on(Engine::open(config(dir))) {
            Ok(engine) => {
                register(&engine);
                return (engine, t.elapsed().as_secs_f64());
            }
            Err(fusee::Error::Storage {
                error: fusee::StorageError::Leased { .. },
                ..
            }) => std::thread::sleep(Duration::from_millis(500)),
            Err(e) => panic!("reopen: {e}"),
        }
    }
    panic!("the crashed child's leases never expired");
}

/// The first filtered listing's seconds and length.
fn first_listing(rt: &tokio::runtime::Runtime, engine: &Engine) -> (f64, usize) {
    let t = Instant::now();
    let first = rt
        .block_on(engine.list(ListFilter::new().attribute("customer_id", 42)))
        .expect("first filtered listing");
    (t.elapsed().as_secs_f64(), first.runs.len())
}

fn bench(c: &mut Criterion) {
    let n = runs();
    let dir = std::env::temp_dir().join(format!("fusee-attrs-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    drop_schema();
    let rt = runtime();
    rt.block_on(populate(&dir, n));

    // Rounds of: an open after a clean close, then one after a crash past
    // a checkpoint (both read the index's snapshot), each with its first
    // filtered listing at once.
    let rounds = env_or("FUSEE_ATTR_ROUNDS", 1usize).max(1);
    // Built in the background meanwhile (8 s a million runs on file;
    // `FUSEE_ATTR_WAIT_MS` sets it for a slower store).
    let wait = Duration::from_millis(env_or("FUSEE_ATTR_WAIT_MS", (n / 125).max(500)));
    let expected = 100.min((n / 1000) as usize);
    let mut engine = None;
    for round in 0..rounds {
        let (clean, open_s) = open(&rt, &dir);
        let (first_s, len) = first_listing(&rt, &clean);
        assert_eq!(len, expected);
        let (again_s, _) = first_listing(&rt, &clean);
        // Runs on each shard, so the close takes a checkpoint (an idle
        // close takes none).
        rt.block_on(start_plain(&clean, &format!("open-{round}")));
        let t = Instant::now();
        rt.block_on(clean.close()).expect("close");
        let close_s = t.elapsed().as_secs_f64();
        eprintln!(
            "round {round}, {n} parked runs, after a clean close: open {open_s:.2} s; first \
             filtered listing {:.2} ms (again at once {:.2} ms); then a close with a \
             checkpoint {close_s:.2} s",
            first_s * 1e3,
            again_s * 1e3,
        );
        crash(&dir, round);
        let (crashed, open_s) = open(&rt, &dir);
        let (first_s, len) = first_listing(&rt, &crashed);
        assert_eq!(len, expected);
        eprintln!(
            "round {round}, {n} parked runs, after a crash: open {open_s:.2} s; first filtered \
             listing {:.2} ms; resident memory {:.0} MB",
            first_s * 1e3,
            rss() as f64 / 1e6
        );
        std::thread::sleep(wait);
        let t = Instant::now();
        rt.block_on(crashed.list(ListFilter::new().attribute("customer_id", 42)))
            .expect("filtered listing");
        eprintln!(
            "round {round}, a filtered listing {:.1} s after the crash's open: {:.2} ms; \
             resident memory {:.0} MB",
            wait.as_secs_f64(),
            t.elapsed().as_secs_f64() * 1e3,
            rss() as f64 / 1e6
        );
        // A value no run has: the listing walks the whole index (read back
        // whole: it reads no run).
        let t = Instant::now();
        let none = rt
            .block_on(crashed.list(ListFilter::new().attribute("customer_id", -1)))
            .expect("listing of no run");
        assert!(none.runs.is_empty());
        eprintln!(
            "round {round}, a listing that matches no run: {:.2} s",
            t.elapsed().as_secs_f64()
        );
        if round + 1 < rounds {
            rt.block_on(crashed.close()).expect("close");
        } else {
            engine = Some(crashed);
        }
    }
    let mut engine = engine.expect("at least one round");
    if backend() != Backend::Postgres {
        // The copy reads the store closed; the medians below reopen it.
        rt.block_on(engine.close()).expect("close");
        copied_without_snapshot(&rt, &dir, n, expected);
        engine = open(&rt, &dir).0;
    }

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
        "list first page (100 runs), {}, 2 shards, {n} parked runs: unfiltered {:.2} ms; \
         customer_id = 42: {:.2} ms ({:.2}x); amount > 9900.0: {:.2} ms ({:.2}x); \
         order_date in 31 days: {:.2} ms ({:.2}x)",
        backend().name(),
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
    drop_schema();
}

criterion_group!(benches, bench);

fn main() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        crash_child(Path::new(&dir));
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
