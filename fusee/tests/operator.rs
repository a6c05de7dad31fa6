//! Operator verbs and the client calls around them (issue 15): pause and
//! resume, reset to a step, list and bulk terminate, the reuse-after-finish
//! ID policy, update-with-start, what `describe` shows, and payload limits
//! checked at the call that made the payload. Each durable verb is checked
//! across a crash (the engine dropped without closing).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use fusee::core::Status;
use fusee::{
    Config, Ctx, Engine, Error, Failure, IdPolicy, ListFilter, PendingChild, PendingWait,
    RunStatus, Signal, StatusFilter, StepError, Workflow,
};

mod common;

use common::cart::{ADD, BIG, CART, GO, register_cart};

const TWO_STEPS: Workflow<(), u32> = Workflow::new("two-steps");
const THREE_STEPS: Workflow<u32, u32> = Workflow::new("three-steps");
const IDLE: Workflow<(), ()> = Workflow::new("idle");
const OTHER: Workflow<(), ()> = Workflow::new("other");
const QUICK: Workflow<u32, u32> = Workflow::new("quick");
const GROWER: Workflow<u32, ()> = Workflow::new("grower");
const HOLDER: Workflow<(), ()> = Workflow::new("holder");
const BLOB: Signal<String> = Signal::new("blob");

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("fusee-op-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Polls `f` until it is true, for at most 10 s.
async fn until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..1000 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A counted step: `counts[i]` goes up each time step `i` runs.
fn counted(ctx: &Ctx, name: &str, counts: &Arc<[AtomicU32; 3]>, i: usize) -> fusee::Step<u32> {
    let counts = Arc::clone(counts);
    ctx.step(name, move |_| {
        let counts = Arc::clone(&counts);
        async move {
            counts[i].fetch_add(1, Ordering::SeqCst);
            Ok(i as u32 + 1)
        }
    })
}

fn register_two_steps(engine: &Engine, counts: &Arc<[AtomicU32; 3]>) {
    let counts = Arc::clone(counts);
    engine.register(TWO_STEPS, move |ctx: Ctx, ()| {
        let counts = Arc::clone(&counts);
        async move {
            let a = counted(&ctx, "a", &counts, 0).await?;
            ctx.wait_for(&GO).await?;
            let b = counted(&ctx, "b", &counts, 1).await?;
            Ok::<_, Failure>(a + b)
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_starts_no_step_across_a_restart_until_resumed() {
    let dir = temp_dir("pause");
    let counts: Arc<[AtomicU32; 3]> = Arc::new(Default::default());
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_two_steps(&engine, &counts);
    engine.start(TWO_STEPS, "p-1", &()).await.unwrap();
    until("the wait for go", || async {
        let d = engine.describe("p-1").await.unwrap();
        d.waits
            == vec![PendingWait::Signal {
                name: "go".into(),
                deadline_ms: None,
            }]
    })
    .await;
    engine.pause("p-1").await.unwrap();
    engine.pause("p-1").await.unwrap(); // records nothing more
    let d = engine.describe("p-1").await.unwrap();
    assert!(d.paused);
    let records = d.journal_records;
    engine.signal("p-1", GO, &()).await.unwrap();
    // The signal is taken (the wait ends) but step b does not start.
    until("the wait to end", || async {
        engine.describe("p-1").await.unwrap().waits.is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(counts[1].load(Ordering::SeqCst), 0, "b ran while paused");
    assert!(engine.describe("p-1").await.unwrap().journal_records > records);
    drop(engine); // a crash

    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_two_steps(&engine, &counts);
    assert!(engine.describe("p-1").await.unwrap().paused, "still paused");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(counts[1].load(Ordering::SeqCst), 0, "b ran after a restart");
    engine.resume("p-1").await.unwrap();
    assert_eq!(engine.result(TWO_STEPS, "p-1").await.unwrap(), 3);
    assert_eq!(counts[0].load(Ordering::SeqCst), 1);
    assert_eq!(counts[1].load(Ordering::SeqCst), 1);
    assert!(!engine.describe("p-1").await.unwrap().paused);
    assert!(matches!(
        engine.pause("p-1").await,
        Err(Error::Finished { .. })
    ));
    assert!(matches!(
        engine.pause("nobody").await,
        Err(Error::NotFound { .. })
    ));
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

fn register_three_steps(engine: &Engine, counts: &Arc<[AtomicU32; 3]>, broken: &Arc<AtomicBool>) {
    let counts = Arc::clone(counts);
    let broken = Arc::clone(broken);
    engine.register(THREE_STEPS, move |ctx: Ctx, base: u32| {
        let counts = Arc::clone(&counts);
        let broken = Arc::clone(&broken);
        async move {
            let a = counted(&ctx, "a", &counts, 0).await?;
            let b = counted(&ctx, "b", &counts, 1).await?;
            let counts = Arc::clone(&counts);
            let c = ctx
                .step("c", move |_| {
                    let (counts, broken) = (Arc::clone(&counts), Arc::clone(&broken));
                    async move {
                        counts[2].fetch_add(1, Ordering::SeqCst);
                        if broken.load(Ordering::SeqCst) {
                            return Err(StepError::fatal("the service is broken"));
                        }
                        Ok(3u32)
                    }
                })
                .await?;
            if base == 100 {
                // A run that waits after its steps (reset while running).
                ctx.wait_for(&GO).await?;
            }
            Ok::<_, Failure>(base + a + b + c)
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_runs_a_failed_run_again_from_a_step_without_rerunning_the_ones_before() {
    let dir = temp_dir("reset");
    let counts: Arc<[AtomicU32; 3]> = Arc::new(Default::default());
    let broken = Arc::new(AtomicBool::new(true));
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_three_steps(&engine, &counts, &broken);
    engine.start(THREE_STEPS, "r-1", &0).await.unwrap();
    let failed = engine.result(THREE_STEPS, "r-1").await;
    assert!(matches!(failed, Err(Error::Failed { .. })), "{failed:?}");
    let old = engine.describe("r-1").await.unwrap().run;

    match engine.reset("r-1", "d", "typo").await {
        Err(Error::UnknownStep { steps, .. }) => assert_eq!(steps, ["a", "b", "c"]),
        other => panic!("expected UnknownStep, found {other:?}"),
    }
    broken.store(false, Ordering::SeqCst);
    let again = engine.reset("r-1", "c", "service fixed").await.unwrap();
    assert_ne!(again.run, old);
    assert_eq!(engine.result(THREE_STEPS, "r-1").await.unwrap(), 6);
    assert_eq!(counts[0].load(Ordering::SeqCst), 1, "a ran again");
    assert_eq!(counts[1].load(Ordering::SeqCst), 1, "b ran again");
    assert_eq!(counts[2].load(Ordering::SeqCst), 2);
    drop(engine); // a crash: the reset run's records are durable

    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_three_steps(&engine, &counts, &broken);
    assert_eq!(engine.result(THREE_STEPS, "r-1").await.unwrap(), 6);
    assert_eq!(engine.describe("r-1").await.unwrap().run, again.run);
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Polls until `id`'s current run is parked (at most 10 s).
async fn until_parked(engine: &Engine, id: &str) {
    for _ in 0..1000 {
        if engine.describe(id).await.unwrap().parked {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} never parked");
}

/// A finished run parks at the next housekeeping, its whole journal kept
/// in its frame while its history is: a reset reads it from there (it was
/// refused once parked, "only its start and end are kept", which was
/// false). Once the history is let go, the refusal says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_takes_a_parked_finished_run_while_its_history_is_kept() {
    let dir = temp_dir("reset-parked");
    let counts: Arc<[AtomicU32; 3]> = Arc::new(Default::default());
    let broken = Arc::new(AtomicBool::new(false));
    let config = || Config::file(&dir).shards(2).park_after(Duration::ZERO);
    let engine = Engine::open(config()).await.unwrap();
    register_three_steps(&engine, &counts, &broken);
    engine.start(THREE_STEPS, "rp-1", &0).await.unwrap();
    assert_eq!(engine.result(THREE_STEPS, "rp-1").await.unwrap(), 6);
    let first = engine.describe("rp-1").await.unwrap().run;
    until_parked(&engine, "rp-1").await;

    match engine.reset("rp-1", "d", "typo").await {
        Err(Error::UnknownStep { steps, .. }) => assert_eq!(steps, ["a", "b", "c"]),
        other => panic!("expected UnknownStep, found {other:?}"),
    }
    let again = engine.reset("rp-1", "c", "again").await.unwrap();
    assert_ne!(again.run, first);
    assert_eq!(engine.result(THREE_STEPS, "rp-1").await.unwrap(), 6);
    assert_eq!(counts[0].load(Ordering::SeqCst), 1, "a ran again");
    assert_eq!(counts[2].load(Ordering::SeqCst), 2);
    drop(engine); // a crash: the reset's records are durable
    let engine = Engine::open(config()).await.unwrap();
    register_three_steps(&engine, &counts, &broken);
    assert_eq!(engine.result(THREE_STEPS, "rp-1").await.unwrap(), 6);
    assert_eq!(engine.describe("rp-1").await.unwrap().run, again.run);
    engine.close().await.unwrap();

    // A finished run whose history is let go at once: refused, saying so.
    let engine = Engine::open(config().history_retention(Duration::ZERO))
        .await
        .unwrap();
    register_three_steps(&engine, &counts, &broken);
    engine.start(THREE_STEPS, "rp-2", &0).await.unwrap();
    assert_eq!(engine.result(THREE_STEPS, "rp-2").await.unwrap(), 6);
    until_parked(&engine, "rp-2").await;
    match engine.reset("rp-2", "c", "too late").await {
        Err(Error::CannotReset { reason, .. }) => {
            assert!(reason.contains("history was let go"), "{reason}")
        }
        other => panic!("expected CannotReset, found {other:?}"),
    }
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_run_resets_a_run_once_and_refuses_a_run_the_id_moved_on_from() {
    let dir = temp_dir("reset-run");
    let counts: Arc<[AtomicU32; 3]> = Arc::new(Default::default());
    let broken = Arc::new(AtomicBool::new(false));
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_three_steps(&engine, &counts, &broken);
    engine.start(THREE_STEPS, "r-3", &0).await.unwrap();
    assert_eq!(engine.result(THREE_STEPS, "r-3").await.unwrap(), 6);
    let first = engine.describe("r-3").await.unwrap().run;

    let made = engine.reset_run("r-3", first, "c", "once").await.unwrap();
    assert!(!made.attached);
    assert_ne!(made.run, first);
    assert_eq!(engine.result(THREE_STEPS, "r-3").await.unwrap(), 6);
    // A repeat, in this process and after a restart: the same run, and
    // no step runs again.
    let repeat = engine.reset_run("r-3", first, "c", "once").await.unwrap();
    assert_eq!((repeat.run, repeat.attached), (made.run, true));
    drop(engine);
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_three_steps(&engine, &counts, &broken);
    let repeat = engine.reset_run("r-3", first, "c", "once").await.unwrap();
    assert_eq!((repeat.run, repeat.attached), (made.run, true));
    assert_eq!(engine.result(THREE_STEPS, "r-3").await.unwrap(), 6);
    assert_eq!(counts[2].load(Ordering::SeqCst), 2, "c ran once per run");

    // Once the ID moved on past the reset's run (here a new run of the
    // ID), the first run's reset is refused rather than resetting a run
    // the caller never saw.
    let later = engine
        .start_with(THREE_STEPS, "r-3", &0, IdPolicy::ReuseAfterFinish)
        .await
        .unwrap();
    assert_eq!(engine.result(THREE_STEPS, "r-3").await.unwrap(), 6);
    match engine.reset_run("r-3", first, "c", "once").await {
        Err(Error::CannotReset { reason, .. }) => {
            assert!(
                reason.contains(&format!("run {}", later.run().run)),
                "{reason}"
            )
        }
        other => panic!("expected CannotReset, found {other:?}"),
    }
    match engine.reset_run("nobody", 1, "c", "once").await {
        Err(Error::NotFound { .. }) => {}
        other => panic!("expected NotFound, found {other:?}"),
    }
    assert_eq!(counts[0].load(Ordering::SeqCst), 2);
    assert_eq!(counts[2].load(Ordering::SeqCst), 3);
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_of_a_running_run_ends_it_and_its_successor_carries_on() {
    let dir = temp_dir("reset-running");
    let counts: Arc<[AtomicU32; 3]> = Arc::new(Default::default());
    let broken = Arc::new(AtomicBool::new(false));
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_three_steps(&engine, &counts, &broken);
    engine.start(THREE_STEPS, "r-2", &100).await.unwrap();
    until("the wait for go", || async {
        !engine.describe("r-2").await.unwrap().waits.is_empty()
    })
    .await;
    let again = engine.reset("r-2", "b", "run b again").await.unwrap();
    assert!(!again.attached);
    until("the new run's wait", || async {
        let d = engine.describe("r-2").await.unwrap();
        d.run == again.run && !d.waits.is_empty()
    })
    .await;
    assert_eq!(
        counts[0].load(Ordering::SeqCst),
        1,
        "a is copied, not rerun"
    );
    assert_eq!(counts[1].load(Ordering::SeqCst), 2);
    assert_eq!(counts[2].load(Ordering::SeqCst), 2);
    drop(engine);

    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_three_steps(&engine, &counts, &broken);
    engine.signal("r-2", GO, &()).await.unwrap();
    assert_eq!(engine.result(THREE_STEPS, "r-2").await.unwrap(), 106);
    assert_eq!(counts[0].load(Ordering::SeqCst), 1);
    assert_eq!(counts[1].load(Ordering::SeqCst), 2);
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_pages_through_every_run_newest_first_and_bulk_terminate_hits_only_its_filter() {
    let engine = Engine::open(Config::memory().shards(3)).await.unwrap();
    engine.register(IDLE, |ctx: Ctx, ()| async move {
        ctx.wait_for(&GO).await?;
        Ok::<_, Failure>(())
    });
    engine.register(OTHER, |ctx: Ctx, ()| async move {
        ctx.wait_for(&GO).await?;
        Ok::<_, Failure>(())
    });
    engine.register(
        QUICK,
        |_ctx: Ctx, n: u32| async move { Ok::<_, Failure>(n) },
    );
    let mut started = Vec::new();
    for i in 0..40u32 {
        let id = format!("l-{i:02}");
        match i % 3 {
            0 => engine.start(IDLE, &id, &()).await.unwrap(),
            1 => engine.start(OTHER, &id, &()).await.unwrap(),
            _ => {
                engine.execute(QUICK, &id, &i).await.unwrap();
                engine.start(QUICK, &format!("{id}-x"), &i).await.ok();
                engine.result(QUICK, &format!("{id}-x")).await.unwrap();
                started.push(format!("{id}-x"));
                continue;
            }
        };
        started.push(id);
        // Distinct start times: the listing's order is checkable.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut seen = Vec::new();
    let mut filter = ListFilter::new().limit(7);
    let mut pages = 0;
    loop {
        assert!(pages < 100, "paging does not end");
        let page = engine.list(filter.clone()).await.unwrap();
        assert!(page.runs.len() <= 7);
        pages += 1;
        seen.extend(page.runs);
        match page.next {
            Some(c) => filter = filter.after(c.to_string().parse().unwrap()),
            None => break,
        }
    }
    assert!(pages >= 8, "{pages} pages");
    let mut ids: Vec<&str> = seen.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    let mut all: Vec<String> = started.clone();
    for i in (0..40u32).filter(|i| i % 3 == 2) {
        all.push(format!("l-{i:02}"));
    }
    all.sort();
    assert_eq!(ids, all, "every run exactly once");
    assert!(
        seen.windows(2).all(|w| w[0].started_ms >= w[1].started_ms),
        "newest first"
    );

    let running = ListFilter::new().status(StatusFilter::Running).limit(100);
    let idle = engine.list(running.clone().workflow("idle")).await.unwrap();
    assert_eq!(idle.runs.len(), 14);
    assert!(
        idle.runs
            .iter()
            .all(|r| r.workflow == "idle" && r.finished.is_none())
    );
    let quick_done = engine
        .list(
            ListFilter::new()
                .status(StatusFilter::Ended(Status::Ok))
                .workflow("quick"),
        )
        .await
        .unwrap();
    assert_eq!(quick_done.runs.len(), 26);

    let n = engine
        .terminate_all(ListFilter::new().workflow("idle").limit(5), "cleanup")
        .await
        .unwrap();
    assert_eq!(n, 14);
    assert!(
        engine
            .list(running.clone().workflow("idle"))
            .await
            .unwrap()
            .runs
            .is_empty()
    );
    assert_eq!(
        engine
            .list(running.workflow("other"))
            .await
            .unwrap()
            .runs
            .len(),
        13,
        "other types untouched"
    );
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_runs_are_listed_without_being_loaded() {
    let engine = Engine::open(
        Config::memory()
            .shards(2)
            .park_after(Duration::from_millis(1)),
    )
    .await
    .unwrap();
    engine.register(IDLE, |ctx: Ctx, ()| async move {
        ctx.wait_for(&GO).await?;
        Ok::<_, Failure>(())
    });
    for i in 0..20 {
        engine.start(IDLE, &format!("k-{i}"), &()).await.unwrap();
    }
    until("every run to park", || async {
        engine.metrics().await.parked_runs == 20
    })
    .await;
    let page = engine
        .list(ListFilter::new().workflow("idle").limit(50))
        .await
        .unwrap();
    assert_eq!(page.runs.len(), 20);
    assert!(page.runs.iter().all(|r| r.parked && r.workflow == "idle"));
    assert_eq!(engine.metrics().await.parked_runs, 20, "none loaded");
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuse_after_finish_starts_a_new_run_only_once_the_last_one_ended() {
    let engine = Engine::open(Config::memory().shards(2)).await.unwrap();
    engine.register(QUICK, |ctx: Ctx, n: u32| async move {
        if n == 0 {
            ctx.wait_for(&GO).await?;
        }
        Ok::<_, Failure>(n)
    });
    let first = engine.execute(QUICK, "daily", &1).await.unwrap();
    assert_eq!(first, 1);
    assert!(matches!(
        engine.start(QUICK, "daily", &2).await,
        Err(Error::AlreadyExists { .. })
    ));
    let second = engine
        .start_with(QUICK, "daily", &0, IdPolicy::ReuseAfterFinish)
        .await
        .unwrap();
    assert!(!second.run().attached);
    assert!(matches!(
        engine
            .start_with(QUICK, "daily", &3, IdPolicy::ReuseAfterFinish)
            .await,
        Err(Error::AlreadyExists { .. })
    ));
    engine.signal("daily", GO, &()).await.unwrap();
    assert_eq!(engine.result(QUICK, "daily").await.unwrap(), 0);
    let third = engine
        .start_with(QUICK, "daily", &3, IdPolicy::ReuseAfterFinish)
        .await
        .unwrap();
    assert_eq!(third.result().await.unwrap(), 3);
    assert!(third.run().run > second.run().run);
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_with_start_creates_the_run_once_and_survives_a_crash() {
    let dir = temp_dir("uws");
    let priced = Arc::new(AtomicU32::new(0));
    let config = || Config::file(&dir).shards(2).max_payload(1024);
    let engine = Engine::open(config()).await.unwrap();
    register_cart(&engine, &priced);
    let n = engine
        .update_with_start(CART, "cart-9", &(), ADD, &"tea".to_string())
        .await
        .unwrap();
    assert_eq!(n, 1);
    let n = engine
        .update_with_start(CART, "cart-9", &(), ADD, &"milk".to_string())
        .await
        .unwrap();
    assert_eq!(n, 2, "the second call updates the same run");
    // An update's result over the limit fails the update, not the run.
    match engine.update("cart-9", BIG, &()).await {
        Err(Error::Failed { failure, .. }) => {
            assert_eq!(failure.kind.as_deref(), Some("too-large"))
        }
        other => panic!("expected a too-large failure, found {other:?}"),
    }
    drop(engine); // a crash

    let engine = Engine::open(config()).await.unwrap();
    register_cart(&engine, &priced);
    assert_eq!(priced.load(Ordering::SeqCst), 2, "replayed, not rerun");
    let n = engine
        .update_with_start(CART, "cart-9", &(), ADD, &"jam".to_string())
        .await
        .unwrap();
    assert_eq!(n, 3);
    engine.signal("cart-9", GO, &()).await.unwrap();
    assert_eq!(
        engine.result(CART, "cart-9").await.unwrap(),
        ["tea", "milk", "jam"]
    );
    assert!(matches!(
        engine
            .update_with_start(CART, "cart-9", &(), ADD, &"late".to_string())
            .await,
        Err(Error::Finished { .. })
    ));
    const NOBODY: Workflow<(), ()> = Workflow::new("nobody");
    assert!(matches!(
        engine
            .update_with_start(NOBODY, "n-1", &(), ADD, &"x".to_string())
            .await,
        Err(Error::UnknownWorkflow { .. })
    ));
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_reaches_a_parked_run() {
    let priced = Arc::new(AtomicU32::new(0));
    let engine = Engine::open(
        Config::memory()
            .shards(1)
            .park_after(Duration::from_millis(1)),
    )
    .await
    .unwrap();
    register_cart(&engine, &priced);
    engine.start(CART, "cart-p", &()).await.unwrap();
    until("the cart to park", || async {
        engine.metrics().await.parked_runs == 1
    })
    .await;
    let n = engine
        .update("cart-p", ADD, &"bread".to_string())
        .await
        .unwrap();
    assert_eq!(n, 1);
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_children_waits_and_a_growing_journal() {
    let engine = Engine::open(Config::memory().shards(2)).await.unwrap();
    engine.register(HOLDER, |ctx: Ctx, ()| async move {
        ctx.wait_for(&GO).await?;
        Ok::<_, Failure>(())
    });
    engine.register(GROWER, |ctx: Ctx, n: u32| async move {
        for i in 0..n {
            ctx.step(&format!("s{i}"), |_| async { Ok(0u8) }).await?;
        }
        let sleep = ctx.sleep("nap", Duration::from_secs(3600));
        let child = ctx.child(HOLDER, &format!("held-{n}"), &());
        let (slept, child) = tokio::join!(sleep, child);
        slept?;
        child?;
        Ok::<_, Failure>(())
    });
    engine.start(GROWER, "g-small", &1).await.unwrap();
    engine.start(GROWER, "g-big", &20).await.unwrap();
    for id in ["g-small", "g-big"] {
        until("the child to start", || async {
            !engine.describe(id).await.unwrap().children.is_empty()
        })
        .await;
    }
    let small = engine.describe("g-small").await.unwrap();
    let big = engine.describe("g-big").await.unwrap();
    assert!(big.journal_bytes > small.journal_bytes);
    // Nineteen more steps, each a Began and a Step.
    assert_eq!(big.journal_records, small.journal_records + 2 * 19);
    assert_eq!(
        big.children,
        vec![PendingChild {
            id: "held-20".into(),
            workflow: "holder".into()
        }]
    );
    assert!(matches!(
        big.waits.as_slice(),
        [PendingWait::Timer { name, .. }] if name == "nap"
    ));
    assert_eq!(big.status, RunStatus::Running);
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_over_the_limit_fail_at_the_call_that_made_them() {
    const SENDER: Workflow<usize, String> = Workflow::new("sender");
    const ECHO: Workflow<String, String> = Workflow::new("echo");
    const PARENT: Workflow<usize, String> = Workflow::new("big-parent");
    const LOOPER: Workflow<usize, String> = Workflow::new("looper");
    let engine = Engine::open(Config::memory().shards(2).max_payload(1024))
        .await
        .unwrap();
    engine.register(HOLDER, |ctx: Ctx, ()| async move {
        ctx.wait_for(&BLOB).await?;
        Ok::<_, Failure>(())
    });
    engine.register(
        ECHO,
        |_ctx: Ctx, s: String| async move { Ok::<_, Failure>(s) },
    );
    // Each workflow turns the failure at the call into its result, so the
    // test sees the kind and that the run itself went on.
    engine.register(SENDER, |ctx: Ctx, len: usize| async move {
        match ctx.signal("target", BLOB, &"y".repeat(len)) {
            Ok(()) => Ok::<_, Failure>("sent".to_string()),
            Err(f) => Ok(f.kind.unwrap_or_default()),
        }
    });
    engine.register(PARENT, |ctx: Ctx, len: usize| async move {
        match ctx
            .child(ECHO, &format!("kid-{len}"), &"q".repeat(len))
            .await
        {
            Ok(s) => Ok::<_, Failure>(format!("child said {}", s.len())),
            Err(f) => Ok(f.kind.unwrap_or_default()),
        }
    });
    engine.register(LOOPER, |ctx: Ctx, len: usize| async move {
        if len == 0 {
            return Ok::<_, Failure>("done".to_string());
        }
        let next: Result<String, Failure> = ctx.continue_as_new(&"z".repeat(len)).await;
        match next {
            Ok(s) => Ok(s),
            Err(f) => Ok(f.kind.unwrap_or_default()),
        }
    });
    engine.start(HOLDER, "target", &()).await.unwrap();
    assert_eq!(
        engine.execute(SENDER, "s-1", &2000).await.unwrap(),
        "too-large"
    );
    assert_eq!(engine.execute(SENDER, "s-2", &10).await.unwrap(), "sent");
    assert_eq!(
        engine.execute(PARENT, "p-1", &2000).await.unwrap(),
        "too-large"
    );
    assert_eq!(
        engine.execute(PARENT, "p-2", &10).await.unwrap(),
        "child said 10"
    );
    assert_eq!(
        engine.execute(LOOPER, "c-1", &2000).await.unwrap(),
        "too-large"
    );
    assert!(matches!(
        engine.start(ECHO, "e-1", &"w".repeat(2000)).await,
        Err(Error::TooLarge { .. })
    ));
    // Nothing reached the target: its only signal would have been s-2's.
    let target = engine.describe("target").await.unwrap();
    assert!(target.waits.is_empty(), "s-2's signal ended the wait");
    engine.close().await.unwrap();
}

const FLAKY: Workflow<(), u32> = Workflow::new("flaky");

fn register_flaky(engine: &Engine, broken: &Arc<AtomicBool>, tries: &Arc<AtomicU32>) {
    let (broken, tries) = (Arc::clone(broken), Arc::clone(tries));
    engine.register(FLAKY, move |ctx: Ctx, ()| {
        let (broken, tries) = (Arc::clone(&broken), Arc::clone(&tries));
        async move {
            let v = ctx
                .step("charge", move |_| {
                    let (broken, tries) = (Arc::clone(&broken), Arc::clone(&tries));
                    async move {
                        tries.fetch_add(1, Ordering::SeqCst);
                        if broken.load(Ordering::SeqCst) {
                            return Err(StepError::retryable("the processor is down"));
                        }
                        Ok(7u32)
                    }
                })
                .retry(
                    fusee::RetryPolicy::default()
                        .attempts(2)
                        .backoff(Duration::from_millis(1), 1.0, Duration::from_millis(1))
                        .pause_when_exhausted(),
                )
                .await?;
            Ok::<_, Failure>(v)
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_paused_by_its_policy_runs_again_when_resumed() {
    let dir = temp_dir("resume-step");
    let broken = Arc::new(AtomicBool::new(true));
    let tries = Arc::new(AtomicU32::new(0));
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_flaky(&engine, &broken, &tries);
    engine.start(FLAKY, "f-1", &()).await.unwrap();
    let paused = || async {
        engine
            .describe("f-1")
            .await
            .unwrap()
            .step
            .is_some_and(|s| s.paused && s.name == "charge")
    };
    until("the step to pause", paused).await;
    assert_eq!(tries.load(Ordering::SeqCst), 2);
    match engine.resume_step("f-1", "refund").await {
        Err(Error::StepNotPaused { paused, .. }) => assert_eq!(paused, ["charge"]),
        other => panic!("expected StepNotPaused, found {other:?}"),
    }
    // Still down: a fresh allowance of two attempts, then paused again.
    engine.resume_step("f-1", "charge").await.unwrap();
    until("two more attempts", || async {
        tries.load(Ordering::SeqCst) == 4
    })
    .await;
    until("the step to pause again", paused).await;
    drop(engine); // a crash: the run comes back paused

    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_flaky(&engine, &broken, &tries);
    until("the recovered step to show paused", || async {
        engine
            .describe("f-1")
            .await
            .unwrap()
            .step
            .is_some_and(|s| s.paused)
    })
    .await;
    broken.store(false, Ordering::SeqCst);
    engine.resume_step("f-1", "charge").await.unwrap();
    assert_eq!(engine.result(FLAKY, "f-1").await.unwrap(), 7);
    assert_eq!(tries.load(Ordering::SeqCst), 5);
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A listing tells when each run finished (issue 29's finish-time filter
/// rests on it): a loaded finished run from its `Done`, a parked one from
/// its table entry (no frame read), across a reopen; a running run has
/// none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_tells_when_each_run_finished_loaded_parked_and_reopened() {
    use fusee::testing::TestEngine;
    let mut kit = TestEngine::builder()
        .config(Config::memory().park_after(Duration::from_secs(5)))
        .open(|engine: &Engine| {
            engine.register(QUICK, |_: Ctx, n: u32| async move { Ok::<_, Failure>(n) });
            engine.register(IDLE, |ctx: Ctx, ()| async move {
                ctx.sleep("long", Duration::from_secs(86_400)).await?;
                Ok::<_, Failure>(())
            });
        })
        .await
        .expect("the test engine opens");
    let t0 = kit.now_ms();
    kit.engine().start(IDLE, "idle", &()).await.expect("start");
    kit.engine().start(QUICK, "q", &7).await.expect("start");
    // The engine's own wait, not the kit's: the kit moves the clock when
    // the engine looks idle, which could park "idle" before the first look.
    assert_eq!(kit.engine().result(QUICK, "q").await.expect("result"), 7);
    let finished_at = |page: &fusee::Page, id: &str| {
        page.runs
            .iter()
            .find(|r| r.id == id)
            .map(|r| (r.parked, r.finished_ms))
    };
    let page = kit.engine().list(ListFilter::new()).await.expect("list");
    assert_eq!(finished_at(&page, "q"), Some((false, Some(t0))), "{page:?}");
    assert_eq!(finished_at(&page, "idle"), Some((false, None)), "{page:?}");
    kit.advance(Duration::from_secs(60)).await.expect("advance");
    let page = kit.engine().list(ListFilter::new()).await.expect("list");
    assert_eq!(finished_at(&page, "q"), Some((true, Some(t0))), "{page:?}");
    kit.crash().await.expect("crash");
    let page = kit.engine().list(ListFilter::new()).await.expect("list");
    assert_eq!(finished_at(&page, "q"), Some((true, Some(t0))), "{page:?}");
    assert_eq!(
        finished_at(&page, "idle").map(|f| f.1),
        Some(None),
        "{page:?}"
    );
}

const NAMED: Workflow<u32, u32> = Workflow::new("named");

/// A workflow ID no URL could address (empty, `.`, `..`, a control
/// character) or over `MAX_ID_BYTES` is refused at start, through the
/// typed and the JSON API alike, recording nothing; a cursor this engine
/// could not have given is `BadCursor`, not a configuration error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_workflow_ids_and_cursors_are_named_errors() {
    let engine = Engine::open(Config::memory().shards(2)).await.unwrap();
    engine.register(NAMED, |_: Ctx, n: u32| async move { Ok::<_, Failure>(n) });
    let long = "x".repeat(fusee::MAX_ID_BYTES + 1);
    for id in ["", ".", "..", "new\nline", "tab\t", "nul\0", long.as_str()] {
        match engine.start(NAMED, id, &1).await {
            Err(Error::BadWorkflowId { id: shown, .. }) => {
                assert!(shown.chars().count() <= 65, "the error shows {shown:?}")
            }
            other => panic!("{id:?}: expected BadWorkflowId, found {other:?}"),
        }
        let json = engine
            .start_json("named", id, &serde_json::json!(1), IdPolicy::NewOnly)
            .await;
        assert!(
            matches!(json, Err(Error::BadWorkflowId { .. })),
            "{id:?}: {json:?}"
        );
        assert!(matches!(
            engine.describe(id).await,
            Err(Error::NotFound { .. })
        ));
    }
    let longest = "y".repeat(fusee::MAX_ID_BYTES);
    for id in [longest.as_str(), "a.b", "...", "a/b/../c", "заказ-🚀"] {
        assert_eq!(engine.execute(NAMED, id, &3).await.unwrap(), 3, "{id:?}");
    }

    match "garbage".parse::<fusee::Cursor>() {
        Err(Error::BadCursor { cursor, .. }) => assert_eq!(cursor, "garbage"),
        other => panic!("expected BadCursor, found {other:?}"),
    }
    let one_shard: fusee::Cursor = "5".parse().unwrap();
    match engine.list(ListFilter::new().after(one_shard)).await {
        Err(Error::BadCursor { reason, .. }) => assert!(reason.contains("2"), "{reason}"),
        other => panic!("expected BadCursor, found {other:?}"),
    }
    engine.close().await.unwrap();
}
