//! The replay check (`fusee::check`): every unfinished run replayed
//! against the registered code before it runs; the runs whose code
//! departs are found and held, the rest carry on.
//!
//! `FUSEE_CHECK_RUNS` sets the runs of the planted-divergence test
//! (default 1,000).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fusee::testing::TestEngine;
use fusee::{Config, Ctx, Engine, Error, Failure, Query, RunStatus, Signal, Update, Workflow};

const ORDER: Workflow<u64, u64> = Workflow::new("order");
const GO: Signal<()> = Signal::new("go");

fn runs() -> u64 {
    std::env::var("FUSEE_CHECK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

/// Three steps, a wait for `go`, one more step. With `planted` set, the
/// run whose input is `odd_one` calls its second step by another name:
/// a code change that breaks that run's journal and no other.
fn register(engine: &Engine, planted: bool, odd_one: u64) {
    engine.register(ORDER, move |ctx: Ctx, n: u64| async move {
        let mut total = 0;
        for i in 0..3u64 {
            let name = if planted && n == odd_one && i == 1 {
                "reserve-v2".to_string()
            } else {
                format!("step-{i}")
            };
            total += ctx.step(&name, move |_| async move { Ok(i) }).await?;
        }
        ctx.wait_for(&GO).await?;
        total += ctx.step("ship", |_| async { Ok(10u64) }).await?;
        Ok::<_, Failure>(n + total)
    });
}

/// A kit whose registration is the old code until `planted` is set
/// (then, after the next crash, the new code).
async fn kit(planted: &Arc<AtomicBool>, odd_one: u64, check: bool) -> TestEngine {
    let flag = Arc::clone(planted);
    TestEngine::builder()
        .config(
            Config::memory()
                .shards(2)
                .park_after(Duration::from_secs(1))
                .replay_check(check),
        )
        .open(move |engine: &Engine| register(engine, flag.load(Ordering::SeqCst), odd_one))
        .await
        .unwrap()
}

/// Starts `n` runs and lets every one reach its wait and park.
async fn start_and_park(kit: &TestEngine, n: u64) {
    for i in 0..n {
        kit.engine()
            .start(ORDER, &format!("o-{i}"), &i)
            .await
            .unwrap();
    }
    kit.settle().await.unwrap();
    kit.advance(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_divergence_in_one_run_of_many_is_found_and_held_and_the_rest_run_on() {
    let n = runs();
    let odd_one = n / 2;
    let planted = Arc::new(AtomicBool::new(false));
    let mut kit = kit(&planted, odd_one, true).await;
    // The first open's check finds nothing to check and lets starts go.
    let empty = kit.engine().check_replay().await.unwrap();
    assert_eq!(empty.checked, 0);
    start_and_park(&kit, n).await;
    let parked = kit.engine().metrics().await.parked_runs;
    assert!(parked > n / 2, "most runs parked: {parked} of {n}");

    // Deploy the new code: the engine opens again on the same store.
    planted.store(true, Ordering::SeqCst);
    kit.crash().await.unwrap();
    // Nothing runs until the check: the odd run's code has not stopped.
    let before = kit
        .engine()
        .describe(&format!("o-{odd_one}"))
        .await
        .unwrap();
    assert_ne!(before.status, RunStatus::Stopped);
    let report = kit.engine().check_replay().await.unwrap();
    assert_eq!(
        report.checked, n,
        "every unfinished run replayed: {report:?}"
    );
    assert_eq!(report.divergences.len(), 1, "{}", report.to_text());
    let d = &report.divergences[0];
    assert_eq!(d.id, format!("o-{odd_one}"));
    assert_eq!(d.workflow, "order");
    assert!(d.held);
    assert_eq!(d.operation, Some(2), "{d:?}");
    assert!(d.journal.contains("step-1"), "{d:?}");
    assert!(d.code.contains("reserve-v2"), "{d:?}");
    assert!(report.no_code.is_empty());

    // The odd run is held: paused, with why, in describe and in the list.
    let held = kit.engine().describe(&d.id).await.unwrap();
    assert!(held.paused);
    let why = held.held.clone().expect("held with a reason");
    assert!(why.contains("reserve-v2"), "{why}");
    let mut heldlisted = Vec::new();
    let mut filter = fusee::ListFilter::new().limit(500);
    loop {
        let page = kit.engine().list(filter.clone()).await.unwrap();
        heldlisted.extend(page.runs.into_iter().filter(|r| r.held.is_some()));
        match page.next {
            Some(c) => filter = filter.after(c),
            None => break,
        }
    }
    assert_eq!(heldlisted.len(), 1);
    assert_eq!(heldlisted[0].id, d.id);

    // Everything else carries on to its end; the held run stays put.
    for i in 0..n {
        kit.engine()
            .signal(&format!("o-{i}"), GO, &())
            .await
            .unwrap();
    }
    for i in (0..n).filter(|&i| i != odd_one) {
        assert_eq!(kit.result(ORDER, &format!("o-{i}")).await.unwrap(), i + 13);
    }
    let still = kit.engine().describe(&d.id).await.unwrap();
    assert!(still.finished_ms.is_none());
    assert!(still.held.is_some());

    // The hold is recorded: it survives a restart, and a second check
    // skips the held run and finds nothing new.
    kit.crash().await.unwrap();
    let again = kit.engine().check_replay().await.unwrap();
    assert_eq!(again.divergences.len(), 0, "{}", again.to_text());
    assert_eq!(again.already_held, 1);
    assert!(kit.engine().describe(&d.id).await.unwrap().held.is_some());
    kit.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_check_the_diverging_run_stops_when_its_code_replays() {
    // What the check changes: the same deploy without it leaves the odd
    // run to fail with a determinism error once its code replays.
    let planted = Arc::new(AtomicBool::new(false));
    let mut kit = kit(&planted, 3, false).await;
    start_and_park(&kit, 5).await;
    planted.store(true, Ordering::SeqCst);
    kit.crash().await.unwrap();
    kit.engine().signal("o-3", GO, &()).await.unwrap();
    let err = kit.result(ORDER, "o-3").await.unwrap_err();
    assert!(
        matches!(
            err,
            fusee::testing::TestError::Engine(Error::Determinism(_))
        ),
        "{err:?}"
    );
    kit.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_on_demand_holds_a_parked_run_and_resume_lets_its_code_start() {
    let planted = Arc::new(AtomicBool::new(false));
    let mut kit = kit(&planted, 1, false).await;
    start_and_park(&kit, 3).await;
    planted.store(true, Ordering::SeqCst);
    kit.crash().await.unwrap();
    let report = kit.engine().check_replay().await.unwrap();
    assert_eq!(report.checked, 3);
    assert_eq!(report.divergences.len(), 1);
    assert_eq!(report.divergences[0].id, "o-1");
    // Resumed with the same code, it replays, departs, and stops: the
    // operator's next move is a fix or a reset.
    kit.engine().resume("o-1").await.unwrap();
    kit.settle().await.unwrap();
    let after = kit.engine().describe("o-1").await.unwrap();
    assert_eq!(after.held, None);
    assert_eq!(after.status, RunStatus::Stopped, "{after:?}");
    // A reset to the step before the change runs it with the new code.
    kit.engine()
        .reset("o-1", "step-1", "renamed step")
        .await
        .unwrap();
    kit.engine().signal("o-1", GO, &()).await.unwrap();
    assert_eq!(kit.result(ORDER, "o-1").await.unwrap(), 1 + 13);
    kit.close().await.unwrap();
}

/// A query or update to a run whose code does not run says why (held by
/// the check, or waiting for it) instead of "no such handler", and an
/// update records nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_run_and_one_waiting_for_the_check_say_why_no_handler_answers() {
    const STAGE: Query<(), String> = Query::new("stage");
    const NOTE: Update<String, ()> = Update::new("note");
    let planted = Arc::new(AtomicBool::new(false));
    let mut kit = kit(&planted, 1, true).await;
    kit.engine().check_replay().await.unwrap();
    start_and_park(&kit, 3).await;
    planted.store(true, Ordering::SeqCst);
    kit.crash().await.unwrap();
    // Opened with the check on: no code runs until it has.
    match kit.engine().query("o-0", STAGE, &()).await {
        Err(Error::Stopped { reason, .. }) => {
            assert!(reason.contains("check_replay"), "{reason}");
        }
        other => panic!("a query before the check: {other:?}"),
    }
    kit.engine().check_replay().await.unwrap();
    let records = kit.engine().describe("o-1").await.unwrap().journal_records;
    match kit.engine().query("o-1", STAGE, &()).await {
        Err(Error::Stopped { reason, .. }) => assert!(
            reason.contains("held by the replay check")
                && reason.contains("reserve-v2")
                && reason.contains("query"),
            "{reason}"
        ),
        other => panic!("a query to a held run: {other:?}"),
    }
    match kit.engine().update("o-1", NOTE, &"hi".to_string()).await {
        Err(Error::Stopped { reason, .. }) => {
            assert!(reason.contains("held by the replay check"), "{reason}");
        }
        other => panic!("an update to a held run: {other:?}"),
    }
    let after = kit.engine().describe("o-1").await.unwrap().journal_records;
    assert_eq!(after, records, "the refused update recorded nothing");
    // A run the check let go has code: it answers for itself.
    assert!(matches!(
        kit.engine().query("o-0", STAGE, &()).await,
        Err(Error::UnknownQuery { .. })
    ));
    kit.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offline_check_reads_a_stopped_store_and_changes_nothing() {
    let dir = std::env::temp_dir().join(format!("fusee-replay-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register(&engine, false, 2);
    for i in 0..4u64 {
        engine.start(ORDER, &format!("o-{i}"), &i).await.unwrap();
    }
    for i in 0..4u64 {
        while engine
            .describe(&format!("o-{i}"))
            .await
            .unwrap()
            .waits
            .is_empty()
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    engine.close().await.unwrap();
    let hash = |dir: &std::path::Path| {
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    files.push((p.display().to_string(), std::fs::read(&p).unwrap()));
                }
            }
        }
        files.sort();
        files
    };
    let before = hash(&dir);
    let report = fusee::check::check_store(&dir, |e: &Engine| register(e, true, 2))
        .await
        .unwrap();
    assert_eq!(report.checked, 4);
    assert_eq!(report.divergences.len(), 1, "{}", report.to_text());
    assert_eq!(report.divergences[0].id, "o-2");
    assert!(!report.divergences[0].held);
    assert!(report.to_text().contains("DIVERGES o-2 (order)"));
    // With no code registered, nothing is checked and every run says so.
    let none = fusee::check::check_store(&dir, |_: &Engine| {})
        .await
        .unwrap();
    assert_eq!(none.divergences.len(), 0);
    assert_eq!(none.no_code.len(), 4);
    assert_eq!(hash(&dir), before, "the store is unchanged");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 32.3: a run whose step is in flight (its `Began` durable, no
/// result) and whose new code calls another step there is found by the
/// check and held, naming both steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_swapped_while_in_flight_is_found_and_held() {
    const UPLOAD: Workflow<(), u64> = Workflow::new("upload");
    let planted = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&planted);
    let mut kit = TestEngine::builder()
        .config(Config::memory().shards(1).replay_check(true))
        .open(move |engine: &Engine| {
            let name = if flag.load(Ordering::SeqCst) {
                "upload-v2"
            } else {
                "upload"
            };
            engine.register(UPLOAD, move |ctx: Ctx, ()| async move {
                let v = ctx
                    .step(name, |_| async {
                        std::future::pending::<()>().await;
                        Ok(1u64)
                    })
                    .await?;
                Ok::<_, Failure>(v)
            });
        })
        .await
        .unwrap();
    kit.engine().check_replay().await.unwrap();
    kit.engine().start(UPLOAD, "u-1", &()).await.unwrap();
    let mut began = false;
    for _ in 0..2_000 {
        if !kit
            .engine()
            .describe("u-1")
            .await
            .unwrap()
            .in_flight
            .is_empty()
        {
            began = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(began, "the step began");
    planted.store(true, Ordering::SeqCst);
    kit.crash().await.unwrap();
    let report = kit.engine().check_replay().await.unwrap();
    assert_eq!(report.checked, 1);
    assert_eq!(report.divergences.len(), 1, "{}", report.to_text());
    let d = &report.divergences[0];
    assert_eq!(d.id, "u-1");
    assert!(d.held);
    assert_eq!(d.operation, Some(1), "{d:?}");
    assert!(d.journal.contains("\"upload\""), "{d:?}");
    assert!(d.code.contains("\"upload-v2\""), "{d:?}");
    kit.close().await.unwrap();
}
