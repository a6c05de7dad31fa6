//! Parking: idle runs leave memory for the run store, come back when a
//! timer, a signal or a caller needs them, and survive restarts.
//!
//! `FUSEE_PARKED_RUNS` sets the sleepers of the big test (default 100,000).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::{Clock, Config, Ctx, Engine, Failure, RunStatus, Signal, VirtualClock, Workflow};

const NAP: Workflow<u64, u64> = Workflow::new("nap");
const GATE: Workflow<(), String> = Workflow::new("gate");
const OPEN: Signal<String> = Signal::new("open");
const START_MS: u64 = 1_700_000_000_000;

fn runs() -> u64 {
    std::env::var("FUSEE_PARKED_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("fusee-parking-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Each sleeper's wake-ups, by workflow ID.
type Fired = Arc<Mutex<HashMap<String, u32>>>;

fn register(engine: &Engine, fired: Fired) {
    engine.register(NAP, move |ctx: Ctx, secs: u64| {
        let fired = Arc::clone(&fired);
        async move {
            ctx.sleep("nap", Duration::from_secs(secs)).await?;
            let id = ctx.workflow_id();
            ctx.step("wake", move |_| {
                let fired = Arc::clone(&fired);
                let id = id.clone();
                async move {
                    *fired.lock().unwrap().entry(id).or_default() += 1;
                    Ok(())
                }
            })
            .await?;
            Ok::<_, Failure>(secs)
        }
    });
    engine.register(GATE, |ctx: Ctx, ()| async move {
        let word = ctx.wait_for(&OPEN).await?.unwrap_or_default();
        Ok::<_, Failure>(word)
    });
}

fn config(dir: &std::path::Path, clock: &VirtualClock) -> Config {
    Config::file(dir)
        .shards(2)
        .park_after(Duration::ZERO)
        .clock(Clock::Virtual(clock.clone()))
}

/// Waits (in real time) until `cond` holds of the engine's metrics.
async fn until(engine: &Engine, what: &str, cond: impl Fn(&fusee::Metrics) -> bool) {
    for _ in 0..6000 {
        let m = engine.metrics().await;
        if cond(&m) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not reached in 60 s: {:?}", engine.metrics().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleepers_park_wake_on_time_after_a_restart_and_fire_once() {
    let n = runs();
    let dir = temp_dir("sleepers");
    let clock = VirtualClock::new(START_MS);
    let fired: Fired = Arc::default();
    let engine = Engine::open(config(&dir, &clock)).await.unwrap();
    register(&engine, Arc::clone(&fired));
    // Sleepers of one to four hours, started 1,000 at a time.
    let ids: Vec<u64> = (0..n).collect();
    for chunk in ids.chunks(1000) {
        let starts = chunk.iter().map(|&i| {
            let engine = engine.clone();
            async move {
                let secs = 3600 + (i % 4) * 3600;
                engine.start(NAP, &format!("nap-{i}"), &secs).await.unwrap();
            }
        });
        futures_join_all(starts).await;
    }
    until(&engine, "every sleeper parked", |m| m.parked_runs == n).await;
    assert_eq!(engine.metrics().await.loaded_runs, 0);
    let d = engine.describe("nap-7").await.unwrap();
    assert!(d.parked && d.status == RunStatus::Running, "{d:?}");
    engine.close().await.unwrap();
    drop(engine);
    assert!(
        fired.lock().unwrap().is_empty(),
        "no sleeper woke before its time"
    );

    let engine = Engine::open(config(&dir, &clock)).await.unwrap();
    register(&engine, Arc::clone(&fired));
    let m = engine.metrics().await;
    assert_eq!((m.parked_runs, m.loaded_runs), (n, 0), "{m:?}");
    // Two hours on: the one- and two-hour sleepers wake, the others not.
    clock.advance(2 * 3600 * 1000);
    let early = (0..n).filter(|i| i % 4 <= 1).count() as u64;
    until(&engine, "the first half woke", |m| m.finished >= early).await;
    {
        let f = fired.lock().unwrap();
        assert_eq!(f.len() as u64, early, "exactly the sleepers due woke");
        assert!(f.values().all(|&c| c == 1), "each woke once");
    }
    clock.advance(2 * 3600 * 1000);
    until(&engine, "every sleeper woke", |m| m.finished >= n).await;
    for i in [0u64, 1, 2, 3, n - 1] {
        let secs = engine.result(NAP, &format!("nap-{i}")).await.unwrap();
        assert_eq!(secs, 3600 + (i % 4) * 3600);
    }
    {
        let f = fired.lock().unwrap();
        assert_eq!(f.len() as u64, n);
        assert!(f.values().all(|&c| c == 1), "each sleeper fired once");
    }
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_loads_a_parked_run_and_a_parked_result_is_read_back() {
    let dir = temp_dir("signal");
    let clock = VirtualClock::new(START_MS);
    let fired: Fired = Arc::default();
    let engine = Engine::open(config(&dir, &clock)).await.unwrap();
    register(&engine, Arc::clone(&fired));
    engine.start(GATE, "gate-1", &()).await.unwrap();
    until(&engine, "the gate parked", |m| m.parked_runs == 1).await;
    let before = engine.metrics().await;
    engine
        .signal("gate-1", OPEN, &"sesame".to_string())
        .await
        .unwrap();
    // Finished, it parks as a Done frame; its result is read from there.
    until(&engine, "the finished gate parked", |m| {
        m.parked_runs == 1 && m.loaded_runs == 0 && m.parks > before.parks
    })
    .await;
    // Its frame was read once for the signal (the ID's check and the load
    // share the read) and once for the Done frame (its journal and the
    // frames it releases from the same read).
    let after = engine.metrics().await;
    assert_eq!(after.loads - before.loads, 1, "{after:?}");
    assert_eq!(after.frame_reads - before.frame_reads, 2, "{after:?}");
    assert!(after.frame_read_bytes > before.frame_read_bytes);
    assert_eq!(engine.result(GATE, "gate-1").await.unwrap(), "sesame");
    assert_eq!(engine.metrics().await.frame_reads, after.frame_reads + 1);
    let d = engine.describe("gate-1").await.unwrap();
    assert!(
        d.parked && matches!(d.status, RunStatus::Finished(_)),
        "{d:?}"
    );
    assert!(matches!(
        engine.signal("gate-1", OPEN, &"again".into()).await,
        Err(fusee::Error::Finished { .. })
    ));
    engine.close().await.unwrap();
    drop(engine);
    let engine = Engine::open(config(&dir, &clock)).await.unwrap();
    register(&engine, fired);
    assert_eq!(engine.result(GATE, "gate-1").await.unwrap(), "sesame");
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_call_on_a_parked_unfinished_run_waits_for_its_end() {
    let dir = temp_dir("result-waits");
    let clock = VirtualClock::new(START_MS);
    let engine = Engine::open(config(&dir, &clock)).await.unwrap();
    register(&engine, Arc::default());
    engine.start(GATE, "gate-w", &()).await.unwrap();
    until(&engine, "the gate parked", |m| m.parked_runs == 1).await;
    // Read from the parked frame: not finished, so the call waits.
    let waiting = tokio::spawn({
        let engine = engine.clone();
        async move { engine.result(GATE, "gate-w").await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "answered before the run ended");
    assert!(matches!(
        engine.result(GATE, "gate-none").await,
        Err(fusee::Error::NotFound { .. })
    ));
    engine
        .signal("gate-w", OPEN, &"later".to_string())
        .await
        .unwrap();
    assert_eq!(waiting.await.unwrap().unwrap(), "later");
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Awaits every future (a tiny join_all: the test needs no futures crate).
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
    futures: impl Iterator<Item = F>,
) {
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    for h in handles {
        h.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_runs_are_forgotten_when_their_retention_ends() {
    let dir = temp_dir("retention");
    let clock = VirtualClock::new(START_MS);
    let config = || config(&dir, &clock).retention(Duration::from_secs(3600));
    let engine = Engine::open(config()).await.unwrap();
    register(&engine, Arc::default());
    engine.start(GATE, "gate-1", &()).await.unwrap();
    engine
        .signal("gate-1", OPEN, &"x".to_string())
        .await
        .unwrap();
    assert_eq!(engine.result(GATE, "gate-1").await.unwrap(), "x");
    clock.advance(1800 * 1000);
    assert!(
        engine.describe("gate-1").await.is_ok(),
        "kept within retention"
    );
    clock.advance(3600 * 1000);
    for _ in 0..500 {
        if engine.describe("gate-1").await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(matches!(
        engine.describe("gate-1").await,
        Err(fusee::Error::NotFound { .. })
    ));
    engine.close().await.unwrap();
    drop(engine);
    // Forgotten for good: the index committed at close no longer lists it.
    let engine = Engine::open(config()).await.unwrap();
    assert!(matches!(
        engine.describe("gate-1").await,
        Err(fusee::Error::NotFound { .. })
    ));
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A parked finished run's frame is one `Done` frame: its expiry
/// releases it without reading it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_releases_parked_finished_runs_without_reading_their_frames() {
    const RUNS: u64 = 20;
    let dir = temp_dir("expiry-reads");
    let clock = VirtualClock::new(START_MS);
    let engine = Engine::open(config(&dir, &clock).retention(Duration::from_secs(60)))
        .await
        .unwrap();
    register(&engine, Arc::default());
    for i in 0..RUNS {
        let id = format!("e-{i}");
        engine.start(GATE, &id, &()).await.unwrap();
        engine.signal(&id, OPEN, &format!("r{i}")).await.unwrap();
    }
    until(&engine, "every run finished and parked", |m| {
        m.finished == RUNS && m.parked_runs == RUNS
    })
    .await;
    let before = engine.metrics().await;
    clock.advance(120 * 1000);
    until(&engine, "every run expired", |m| m.parked_runs == 0).await;
    let after = engine.metrics().await;
    assert_eq!(
        after.frame_reads, before.frame_reads,
        "expiry read frames: {after:?}"
    );
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_store_is_compacted_and_moved_frames_still_load() {
    let dir = temp_dir("compact");
    let clock = VirtualClock::new(START_MS);
    let config = || {
        config(&dir, &clock)
            .retention(Duration::from_secs(60))
            .compact_after_bytes(1024)
            .checkpoint_bytes(1024)
    };
    let engine = Engine::open(config()).await.unwrap();
    register(&engine, Arc::default());
    for i in 0..300 {
        engine.start(GATE, &format!("g-{i}"), &()).await.unwrap();
    }
    until(&engine, "every gate parked", |m| m.parked_runs == 300).await;
    // Two thirds finish (their Park frames released), then expire (their
    // Done frames released): most of the store is obsolete.
    for i in 100..300 {
        engine
            .signal(&format!("g-{i}"), OPEN, &format!("w{i}"))
            .await
            .unwrap();
    }
    until(&engine, "two thirds finished", |m| m.finished == 200).await;
    clock.advance(120 * 1000);
    until(&engine, "a compaction", |m| m.compactions > 0).await;
    let m = engine.metrics().await;
    assert!(
        m.frames_moved >= 100,
        "the waiting runs' frames were moved: {m:?}"
    );
    engine.close().await.unwrap();
    drop(engine);
    // The third left waiting was moved by the compaction: it loads from its
    // new address, after a restart.
    let engine = Engine::open(config()).await.unwrap();
    register(&engine, Arc::default());
    for i in 0..100 {
        let id = format!("g-{i}");
        engine.signal(&id, OPEN, &format!("w{i}")).await.unwrap();
        assert_eq!(engine.result(GATE, &id).await.unwrap(), format!("w{i}"));
    }
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

const HOURLY: Workflow<u32, u32> = Workflow::new("hourly");

/// A run that parks and loads again and again (each load extends its frame
/// chain with a `Delta`): the chain is rewritten whole before it grows
/// deeper than a load can follow, across a restart too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_parked_and_loaded_many_times_keeps_loading() {
    const NAPS: u32 = 30;
    let dir = temp_dir("chain");
    let clock = VirtualClock::new(START_MS);
    let register = |engine: &Engine| {
        engine.register(HOURLY, |ctx: Ctx, naps: u32| async move {
            for i in 0..naps {
                ctx.sleep(&format!("nap-{i}"), Duration::from_secs(3600))
                    .await?;
            }
            Ok::<_, Failure>(naps)
        });
    };
    let mut engine = Engine::open(config(&dir, &clock)).await.unwrap();
    register(&engine);
    engine.start(HOURLY, "h-1", &NAPS).await.unwrap();
    // Each hour: the run parks, the clock moves, its timer loads it.
    let mut session = 0; // loads this engine counted (a restart starts at 0)
    for hour in 0..NAPS {
        until(&engine, "the run to park", |m| m.parked_runs == 1).await;
        clock.advance(3_600_000);
        until(&engine, "the timer to load the run", |m| m.loads > session).await;
        session += 1;
        if hour == NAPS / 2 {
            drop(engine); // a crash halfway
            engine = Engine::open(config(&dir, &clock)).await.unwrap();
            register(&engine);
            session = 0;
        }
    }
    assert_eq!(engine.result(HOURLY, "h-1").await.unwrap(), NAPS);
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// More runs parked between two checkpoints than the index's change lists
/// hold (64 Ki a shard) are all there after a restart: the checkpoint then
/// writes a base. It wrote an empty delta, and a million sleepers reopened
/// as none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_runs_parked_than_a_delta_holds_survive_a_restart() {
    let dir = temp_dir("index-base");
    let clock = VirtualClock::new(START_MS);
    let n = 70_000u64;
    let config = || config(&dir, &clock).shards(1);
    let fired = Fired::default();
    let engine = Engine::open(config()).await.unwrap();
    register(&engine, Arc::clone(&fired));
    let ids: Vec<u64> = (0..n).collect();
    for chunk in ids.chunks(1000) {
        let starts = chunk.iter().map(|&i| {
            let engine = engine.clone();
            async move {
                engine.start(NAP, &format!("nap-{i}"), &3600).await.unwrap();
            }
        });
        futures_join_all(starts).await;
    }
    until(&engine, "every sleeper parked", |m| m.parked_runs == n).await;
    engine.close().await.unwrap();
    let engine = Engine::open(config()).await.unwrap();
    register(&engine, Arc::clone(&fired));
    assert_eq!(
        engine.metrics().await.parked_runs,
        n,
        "parked after the restart"
    );
    for i in [0, n / 2, n - 1] {
        let d = engine.describe(&format!("nap-{i}")).await.unwrap();
        assert_eq!(d.status, RunStatus::Running);
    }
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

const TEN: Workflow<(), u64> = Workflow::new("ten-steps");

fn register_ten(engine: &Engine) {
    engine.register(TEN, |ctx: Ctx, ()| async move {
        let mut sum = 0u64;
        for i in 0..10u64 {
            sum += ctx
                .step(&format!("step-{i}"), move |_| async move { Ok(i) })
                .await?;
        }
        Ok::<_, Failure>(sum)
    });
}

/// `id`'s description once `cond` holds of it (in real time).
async fn described(
    engine: &Engine,
    id: &str,
    what: &str,
    cond: impl Fn(&fusee::Description) -> bool,
) -> fusee::Description {
    for _ in 0..1000 {
        let d = engine.describe(id).await.unwrap();
        if cond(&d) {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id}: {what}: {:?}", engine.describe(id).await);
}

/// `id`'s journal as `fusee show` reads it (the store read-only, the
/// engine closed): its record count, and whether it is whole.
fn shown(dir: &std::path::Path, id: &str, now_ms: u64) -> (usize, bool) {
    struct Show<'a>(&'a str, u64);
    impl fusee::inspect::StoreVisitor for Show<'_> {
        type Out = (usize, bool);
        fn visit<S: fusee::storage::Storage>(
            self,
            _: fusee::Backend,
            storage: &S,
        ) -> (usize, bool) {
            let shard = fusee::core::shard::shard_of(self.0, 2);
            let mut view = fusee::inspect::rebuild(storage, shard, self.1, &mut |_| {}).unwrap();
            let run = view.find(self.0).unwrap().expect("the run is in the store");
            let journal = view.journal(run).unwrap();
            (journal.records.len(), journal.complete)
        }
    }
    fusee::inspect::open_read_only(dir, Show(id, now_ms)).unwrap()
}

/// A finished run keeps its whole journal once parked, across a restart,
/// for the history time; then only its `Start` and `Done` (its result
/// still read back), whether the time passes while the engine runs or
/// while it is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_keeps_its_history_for_the_history_time_then_its_summary() {
    const HOUR_MS: u64 = 3_600_000;
    let dir = temp_dir("history");
    let clock = VirtualClock::new(START_MS);
    let config = || {
        config(&dir, &clock)
            .history_retention(Duration::from_secs(3600))
            .retention(Duration::from_secs(24 * 3600))
    };
    let open = || async {
        let engine = Engine::open(config()).await.unwrap();
        register_ten(&engine);
        engine
    };
    let parked_whole = |d: &fusee::Description| d.parked && d.journal_records > 10;
    let summary = |d: &fusee::Description| d.parked && d.journal_records == 2;

    let engine = open().await;
    assert_eq!(engine.execute(TEN, "ten-1", &()).await.unwrap(), 45);
    let whole = engine.describe("ten-1").await.unwrap().journal_records;
    assert!(whole > 10, "Start, 10 steps, Done: {whole} records");
    let d = described(&engine, "ten-1", "parked whole", parked_whole).await;
    assert_eq!(d.journal_records, whole, "parked with every record");
    assert_eq!(d.status, RunStatus::Finished(fusee::Status::Ok));
    engine.close().await.unwrap();
    drop(engine);
    assert_eq!(
        shown(&dir, "ten-1", clock.now_ms()),
        (whole as usize, true),
        "`fusee show` reads the whole journal"
    );

    // Within the history time a restart keeps it whole.
    clock.advance(HOUR_MS / 2);
    let engine = open().await;
    let d = described(&engine, "ten-1", "parked whole", parked_whole).await;
    assert_eq!(d.journal_records, whole);
    engine.close().await.unwrap();
    drop(engine);

    // The history time passed while closed: the open drops it.
    clock.advance(HOUR_MS);
    let engine = open().await;
    described(&engine, "ten-1", "summary after the open", summary).await;
    assert_eq!(engine.result(TEN, "ten-1").await.unwrap(), 45);

    // And while running.
    assert_eq!(engine.execute(TEN, "ten-2", &()).await.unwrap(), 45);
    described(&engine, "ten-2", "parked whole", parked_whole).await;
    clock.advance(HOUR_MS / 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let d = engine.describe("ten-2").await.unwrap();
    assert_eq!(d.journal_records, whole, "kept within the history time");
    clock.advance(HOUR_MS);
    described(&engine, "ten-2", "summary while running", summary).await;
    assert_eq!(engine.result(TEN, "ten-2").await.unwrap(), 45);
    engine.close().await.unwrap();
    drop(engine);

    // The summary is what the store holds now.
    assert_eq!(shown(&dir, "ten-2", clock.now_ms()), (2, false));
    let engine = open().await;
    for id in ["ten-1", "ten-2"] {
        described(&engine, id, "summary after a restart", summary).await;
    }
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A journal over `history_max_bytes` parks as its summary at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_over_the_history_size_keeps_only_its_summary() {
    let dir = temp_dir("history-size");
    let clock = VirtualClock::new(START_MS);
    let engine = Engine::open(config(&dir, &clock).history_max_bytes(200))
        .await
        .unwrap();
    register_ten(&engine);
    assert_eq!(engine.execute(TEN, "big", &()).await.unwrap(), 45);
    let d = described(&engine, "big", "parked", |d| d.parked).await;
    assert_eq!(d.journal_records, 2, "{d:?}");
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

const DOZER: Workflow<(), u32> = Workflow::new("dozer");
const NUDGE: Signal<u32> = Signal::new("nudge");
const NUDGED: fusee::Query<(), u32> = fusee::Query::new("nudged");

/// A waiting run's code dozes once idle past `doze_after` (the run stays in
/// memory, its code dropped), and comes back, by replay, for a query, a
/// signal and its timer: each answers from the state its journal implies,
/// and the run ends as if its code had never left. Steps that ran before a
/// doze do not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_runs_code_dozes_and_comes_back_for_a_query_a_signal_and_its_timer() {
    let dir = temp_dir("dozer");
    let clock = VirtualClock::new(START_MS);
    let config = Config::file(&dir)
        .shards(2)
        .park_after(Duration::from_secs(3600))
        .doze_after(Duration::from_secs(1))
        .clock(Clock::Virtual(clock.clone()));
    let engine = Engine::open(config).await.unwrap();
    let steps = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = Arc::clone(&steps);
    engine.register(DOZER, move |ctx: Ctx, ()| {
        let counted = Arc::clone(&counted);
        async move {
            let total = std::rc::Rc::new(std::cell::Cell::new(0u32));
            let seen = std::rc::Rc::clone(&total);
            ctx.on_query(NUDGED, move |()| Ok(seen.get()));
            loop {
                // Waits up to a minute for each nudge; a minute without one
                // ends it.
                match ctx
                    .wait_for(&NUDGE)
                    .timeout(Duration::from_secs(60))
                    .await?
                {
                    Some(n) => total.set(total.get() + n),
                    None => break,
                }
                let counted = Arc::clone(&counted);
                ctx.step("count", move |_| {
                    let counted = Arc::clone(&counted);
                    async move {
                        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        Ok(())
                    }
                })
                .await?;
            }
            Ok::<_, Failure>(total.get())
        }
    });
    engine.start(DOZER, "dozer", &()).await.unwrap();
    engine.signal("dozer", NUDGE, &2).await.unwrap();
    until(&engine, "the first nudge counted", |_| {
        steps.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    // Two seconds idle, then the clock creeps on so housekeeping runs
    // again once the last records are durable.
    let doze = |what: &'static str| {
        let (engine, clock) = (engine.clone(), clock.clone());
        async move {
            clock.advance(2_000);
            for _ in 0..200 {
                let m = engine.metrics().await;
                if m.dormant_runs == 1 && m.loaded_runs == 1 {
                    return;
                }
                clock.advance(100);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("{what}: not dozed: {:?}", engine.metrics().await);
        }
    };
    doze("the waiting run's code dozed").await;
    let m = engine.metrics().await;
    assert!(m.dozes >= 1 && m.parked_runs == 0, "{m:?}");

    // A query starts its code again: the total its journal implies.
    assert_eq!(engine.query("dozer", NUDGED, &()).await.unwrap(), 2);
    doze("it dozed again after the query").await;
    // A signal: counted once, its step run once more (2 in all).
    engine.signal("dozer", NUDGE, &5).await.unwrap();
    until(&engine, "the second nudge counted", |_| {
        steps.load(std::sync::atomic::Ordering::SeqCst) == 2
    })
    .await;
    doze("it dozed after the signal").await;
    // Its timer ends it: the minute without a nudge (from the signal, at
    // most 22 s of creeping ago).
    clock.advance(60_000);
    assert_eq!(engine.result(DOZER, "dozer").await.unwrap(), 7);
    assert_eq!(
        steps.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "a step ran again after a doze"
    );
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

const SPEAK: Workflow<u64, u64> = Workflow::new("speak");
const SAID: Signal<u64> = Signal::new("said");
/// Bytes of each of `SPEAK`'s chunks.
const WORD: usize = 8 << 10;

/// `SPEAK`: a step streams `n` chunks of [`WORD`] bytes, then the run
/// waits for `SAID`.
fn register_speak(engine: &Engine) {
    engine.register(SPEAK, |ctx: Ctx, n: u64| async move {
        let tx = ctx.stream("words");
        ctx.step("speak", move |_| {
            let mut tx = tx.clone();
            async move {
                for i in 0..n {
                    tx.send(format!("{:<WORD$}", format!("word-{i}")))
                        .await
                        .map_err(|e| fusee::StepError::fatal(e.to_string()))?;
                }
                Ok(n)
            }
        })
        .await?;
        ctx.wait_for(&SAID).await?;
        Ok::<_, Failure>(n)
    });
}

/// The first `n` chunks of `id`'s stream (which goes on while its run
/// does), each checked to be the word it sent.
async fn words(engine: &Engine, id: &str, n: usize) -> u64 {
    use futures_util::StreamExt;
    let got: Vec<_> = engine.subscribe(id, "words", 0).take(n).collect().await;
    for (i, c) in got.iter().enumerate() {
        let c = c.as_ref().expect("a chunk");
        assert_eq!(c.index, i as u64);
        assert_eq!(c.payload.len(), WORD);
        assert!(c.payload.starts_with(format!("word-{i} ").as_bytes()));
    }
    got.len() as u64
}

/// A parked run whose chunks sit in a `Stream` frame of their own keeps
/// them when a compaction moves that frame: its frame is written again
/// naming where they went, before the checkpoint commits. Another run's
/// `Stream` frame goes with it when it expires (what the compaction
/// reclaims). After a restart the chunks read whole and the run finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_apart_survive_a_compaction_that_moves_them() {
    let dir = temp_dir("apart");
    let clock = VirtualClock::new(START_MS);
    let config = || {
        config(&dir, &clock)
            .shards(1)
            .retention(Duration::from_secs(60))
            .compact_after_bytes(64 << 10)
            .checkpoint_bytes(1024)
    };
    let engine = Engine::open(config()).await.unwrap();
    register_speak(&engine);
    // The one to expire first: its frames sit before the kept one's.
    engine.start(SPEAK, "junk", &32).await.unwrap();
    until(&engine, "junk parked", |m| m.parked_runs == 1).await;
    engine.start(SPEAK, "keep", &16).await.unwrap();
    until(&engine, "keep parked", |m| m.parked_runs == 2).await;
    engine.signal("junk", SAID, &0).await.unwrap();
    assert_eq!(engine.result(SPEAK, "junk").await.unwrap(), 32);
    clock.advance(120 * 1000);
    until(&engine, "a compaction", |m| m.compactions > 0).await;
    let m = engine.metrics().await;
    assert!(m.frames_moved >= 2, "keep's frames moved: {m:?}");
    // Before a restart, from the new addresses.
    assert_eq!(words(&engine, "keep", 16).await, 16);
    engine.close().await.unwrap();
    drop(engine);
    let engine = Engine::open(config()).await.unwrap();
    register_speak(&engine);
    assert_eq!(words(&engine, "keep", 16).await, 16);
    engine.signal("keep", SAID, &0).await.unwrap();
    assert_eq!(engine.result(SPEAK, "keep").await.unwrap(), 16);
    assert_eq!(words(&engine, "keep", 16).await, 16);
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
