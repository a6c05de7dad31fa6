//! The test kit (`fusee::testing`): time that moves only while the kit
//! waits and jumps when everything waits, crashes that keep only what was
//! durable, step mocks, and the idleness the kit's waits rest on.

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fusee::testing::{StepMock, TestEngine, TestError};
use fusee::{Ctx, Engine, Error, Failure, RetryPolicy, RunStatus, Signal, StepError, Workflow};

const DAY: Duration = Duration::from_secs(86_400);
const HOUR: Duration = Duration::from_secs(3600);

const NAP: Workflow<u32, u32> = Workflow::new("nap");
const HOURLY: Workflow<u32, u32> = Workflow::new("hourly");
const ASK: Workflow<(), Option<String>> = Workflow::new("ask");
const STEPS: Workflow<(), String> = Workflow::new("steps");
const FAN: Workflow<u32, u32> = Workflow::new("fan");
const ANSWER: Signal<String> = Signal::new("answer");

/// Every real step function's run: (step name, idempotency key).
type Effects = Arc<Mutex<Vec<(String, String)>>>;

async fn noted(ctx: &Ctx, effects: &Effects, name: &str) -> Result<String, Failure> {
    let effects = Arc::clone(effects);
    let step = name.to_string();
    Ok(ctx
        .step(name, move |sc| {
            let effects = Arc::clone(&effects);
            let step = step.clone();
            async move {
                effects
                    .lock()
                    .unwrap()
                    .push((step.clone(), sc.key().to_string()));
                Ok(format!("{step} done"))
            }
        })
        .await?)
}

fn register(engine: &Engine, effects: &Effects) {
    // `days` day-long sleeps.
    engine.register(NAP, |ctx: Ctx, days: u32| async move {
        for i in 0..days {
            ctx.sleep(&format!("day-{i}"), DAY).await?;
        }
        Ok::<_, Failure>(days)
    });
    // Counts hourly ticks until `hours` passed.
    engine.register(HOURLY, |ctx: Ctx, hours: u32| async move {
        let mut ticks = 0;
        while ticks < hours {
            ctx.sleep("tick", HOUR).await?;
            ticks += 1;
        }
        Ok::<_, Failure>(ticks)
    });
    // Waits a day for an answer.
    engine.register(ASK, |ctx: Ctx, ()| async move {
        ctx.wait_for(&ANSWER).timeout(DAY).await
    });
    // Two steps around an hour's sleep; the second retried up to 3 times.
    let e = Arc::clone(effects);
    engine.register(STEPS, move |ctx: Ctx, ()| {
        let e = Arc::clone(&e);
        async move {
            let first = noted(&ctx, &e, "first").await?;
            ctx.sleep("between", HOUR).await?;
            let e2 = Arc::clone(&e);
            let second = ctx
                .step("second", move |sc| {
                    let e2 = Arc::clone(&e2);
                    async move {
                        e2.lock()
                            .unwrap()
                            .push(("second".into(), sc.key().to_string()));
                        Ok("second done".to_string())
                    }
                })
                .retry(RetryPolicy::default().attempts(3))
                .await?;
            Ok::<_, Failure>(format!("{first}, {second}"))
        }
    });
    // Children on every shard, each a day's nap.
    engine.register(FAN, |ctx: Ctx, n: u32| async move {
        let mut total = 0;
        for i in 0..n {
            total += ctx.child(NAP, &format!("child-{i}"), &1).await?;
        }
        Ok::<_, Failure>(total)
    });
}

async fn kit(effects: &Effects) -> TestEngine {
    let e = Arc::clone(effects);
    TestEngine::open(move |engine: &Engine| register(engine, &e))
        .await
        .expect("open the test engine")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_day_long_sleeps_take_milliseconds() {
    let kit = kit(&Effects::default()).await;
    let (virtual_start, real_start) = (kit.now_ms(), Instant::now());
    // Each day the run parks (idle past `park_after`) and is loaded back
    // for its timer: the kit's jumps go through parking too.
    assert_eq!(kit.execute(NAP, "nap-1", &5).await.expect("result"), 5);
    let slept = kit.now_ms() - virtual_start;
    assert!(
        slept >= 5 * DAY.as_millis() as u64,
        "the clock moved {slept} ms"
    );
    // Exactly to each timer: no more than a second of slack a day.
    assert!(
        slept < 5 * (DAY.as_millis() as u64 + 1000),
        "the clock moved {slept} ms"
    );
    let real = real_start.elapsed();
    assert!(
        real < Duration::from_secs(5),
        "five virtual days took {real:?}"
    );
    kit.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advance_stops_at_every_timer_on_the_way() {
    let kit = kit(&Effects::default()).await;
    kit.engine()
        .start(HOURLY, "hourly-1", &6)
        .await
        .expect("start");
    kit.advance(HOUR * 5).await.expect("advance");
    let d = kit.engine().describe("hourly-1").await.expect("describe");
    assert_eq!(d.status, RunStatus::Running, "5 hours in: {d:?}");
    // A jump straight to the end would fire one tick, not the sixth.
    kit.advance(HOUR).await.expect("advance");
    let d = kit.engine().describe("hourly-1").await.expect("describe");
    assert!(d.finished_ms.is_some(), "6 hours in: {d:?}");
    assert_eq!(kit.result(HOURLY, "hourly-1").await.expect("result"), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_stands_still_while_the_test_acts() {
    let kit = kit(&Effects::default()).await;
    let start = kit.now_ms();
    kit.engine().start(ASK, "ask-1", &()).await.expect("start");
    // Settling lets the run reach its wait; the day-long timeout must not
    // be skipped to before the answer.
    kit.settle().await.expect("settle");
    kit.engine()
        .signal("ask-1", ANSWER, &"yes".to_string())
        .await
        .expect("signal");
    let got = kit.result(ASK, "ask-1").await.expect("result");
    assert_eq!(got.as_deref(), Some("yes"));
    assert_eq!(kit.now_ms(), start, "nothing waited for time");
    // With no answer, the kit moves to the timeout.
    kit.engine().start(ASK, "ask-2", &()).await.expect("start");
    assert_eq!(kit.result(ASK, "ask-2").await.expect("result"), None);
    assert!(kit.now_ms() >= start + DAY.as_millis() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_cannot_end_is_stalled_not_a_hang() {
    let kit = TestEngine::open(|engine: &Engine| {
        engine.register(
            ASK,
            |ctx: Ctx, ()| async move { ctx.wait_for(&ANSWER).await },
        );
    })
    .await
    .expect("open");
    kit.engine()
        .start(ASK, "forever", &())
        .await
        .expect("start");
    let started = Instant::now();
    match kit.result(ASK, "forever").await {
        Err(TestError::Stalled { what, run }) => {
            assert!(what.contains("forever"), "{what}");
            assert!(run.contains("Running"), "{run}");
        }
        other => panic!("expected Stalled, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

const RENAMED: Workflow<(), String> = Workflow::new("renamed");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_by_a_code_change_is_a_determinism_error_not_a_stall() {
    // The code's step name, switched between crashes as a deploy would.
    let renamed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&renamed);
    let mut kit = TestEngine::open(move |engine: &Engine| {
        let flag = Arc::clone(&flag);
        engine.register(RENAMED, move |ctx: Ctx, ()| {
            let name = if flag.load(Ordering::SeqCst) {
                "new"
            } else {
                "old"
            };
            async move {
                let got = ctx.step(name, |_| async { Ok(1u32) }).await?;
                let more = ctx.wait_for(&ANSWER).await?.unwrap_or_default();
                Ok::<_, Failure>(format!("{got}:{more}"))
            }
        });
    })
    .await
    .expect("open");
    kit.engine()
        .start(RENAMED, "deployed", &())
        .await
        .expect("start");
    kit.settle().await.expect("settle");
    renamed.store(true, Ordering::SeqCst);
    kit.crash().await.expect("crash");
    let started = Instant::now();
    for _ in 0..2 {
        match kit.result(RENAMED, "deployed").await {
            Err(TestError::Engine(Error::Determinism(e))) => {
                let why = e.to_string();
                assert!(why.contains("\"old\"") && why.contains("\"new\""), "{why}");
            }
            other => panic!("expected a determinism error, got {other:?}"),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered at once"
    );
    // The fix: the run replays and ends.
    renamed.store(false, Ordering::SeqCst);
    kit.crash().await.expect("crash");
    kit.engine()
        .signal("deployed", ANSWER, &"yes".to_string())
        .await
        .expect("signal");
    assert_eq!(
        kit.result(RENAMED, "deployed").await.expect("result"),
        "1:yes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_on_other_shards_are_waited_for() {
    let effects = Effects::default();
    let e = Arc::clone(&effects);
    let kit = TestEngine::builder()
        .shards(4)
        .open(move |engine: &Engine| register(engine, &e))
        .await
        .expect("open");
    let start = kit.now_ms();
    assert_eq!(kit.execute(FAN, "fan-1", &6).await.expect("result"), 6);
    // One day each, one after the other.
    assert!(kit.now_ms() - start >= 6 * DAY.as_millis() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_keeps_what_was_durable_and_only_that() {
    let effects = Effects::default();
    let mut kit = kit(&effects).await;
    kit.engine()
        .start(STEPS, "steps-1", &())
        .await
        .expect("start");
    // The first step's result is durable and the run sleeps.
    kit.settle().await.expect("settle");
    let old = kit.engine().clone();
    kit.crash().await.expect("crash");
    assert!(
        matches!(old.describe("steps-1").await, Err(Error::Closed)),
        "the old engine is closed"
    );
    let out = kit.result(STEPS, "steps-1").await.expect("result");
    assert_eq!(out, "first done, second done");
    let names: Vec<String> = effects
        .lock()
        .unwrap()
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(names, ["first", "second"], "no step ran twice");

    // A start whose record was never durable is gone after the crash.
    kit.storage().hold_flushes(true);
    let engine = kit.engine().clone();
    let pending = tokio::spawn(async move { engine.start(STEPS, "steps-2", &()).await.map(drop) });
    // The start is in the log, not durable: its acknowledgement waits.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !pending.is_finished(),
        "a start was acknowledged before it was durable"
    );
    kit.crash().await.expect("crash");
    assert!(
        pending.await.expect("join").is_err(),
        "the lost start failed"
    );
    assert!(matches!(
        kit.engine().describe("steps-2").await,
        Err(Error::NotFound { .. })
    ));
    // The engine after the crash writes as usual.
    assert_eq!(kit.execute(NAP, "nap-after", &1).await.expect("result"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mock_returns_a_value_and_the_real_function_never_runs() {
    let effects = Effects::default();
    let kit = kit(&effects).await;
    let first = kit.mock_step("first", StepMock::returning("mocked").expect("mock"));
    let out = kit.execute(STEPS, "m-1", &()).await.expect("result");
    assert_eq!(out, "mocked, second done");
    let names: Vec<String> = effects
        .lock()
        .unwrap()
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(names, ["second"], "the mocked step's function ran");
    let calls = first.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].attempt, 1);
    assert!(calls[0].key.starts_with("m-1/"), "{:?}", calls[0]);
    // Unmocked, the function runs again.
    kit.unmock_step("first");
    assert_eq!(
        kit.execute(STEPS, "m-2", &()).await.expect("result"),
        "first done, second done"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mock_fails_the_first_attempts_then_runs_the_real_function() {
    let effects = Effects::default();
    let kit = kit(&effects).await;
    let second = kit.mock_step("second", StepMock::real().fail_first(2));
    let out = kit.execute(STEPS, "f-1", &()).await.expect("result");
    assert_eq!(out, "first done, second done");
    let attempts: Vec<u32> = second.calls().iter().map(|c| c.attempt).collect();
    assert_eq!(attempts, [1, 2, 3]);
    let real = effects
        .lock()
        .unwrap()
        .iter()
        .filter(|(n, _)| n == "second")
        .count();
    assert_eq!(real, 1, "the real function ran once, after two failures");

    // Three failures exhaust the step's three attempts.
    kit.mock_step("second", StepMock::real().fail_first(3));
    match kit.execute(STEPS, "f-2", &()).await {
        Err(TestError::Engine(Error::Failed { failure, .. })) => {
            assert_eq!(failure.kind.as_deref(), Some("mock"), "{failure}");
            assert!(failure.message.contains("attempt 3"), "{failure}");
        }
        other => panic!("expected the step to fail, got {other:?}"),
    }
    // A fatal error fails the step at once.
    let fatal = kit.mock_step(
        "second",
        StepMock::failing(StepError::fatal("card declined").kind("declined")),
    );
    match kit.execute(STEPS, "f-3", &()).await {
        Err(TestError::Engine(Error::Failed { failure, .. })) => {
            assert_eq!(failure.kind.as_deref(), Some("declined"));
        }
        other => panic!("expected the step to fail, got {other:?}"),
    }
    assert_eq!(fatal.calls().len(), 1, "a fatal error is not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mock_delay_takes_virtual_time_and_holds_the_step_running() {
    let kit = kit(&Effects::default()).await;
    kit.mock_step("first", StepMock::real().delay(HOUR * 2));
    let start = kit.now_ms();
    kit.engine().start(STEPS, "d-1", &()).await.expect("start");
    kit.settle().await.expect("settle");
    let d = kit.engine().describe("d-1").await.expect("describe");
    let step = d.step.expect("a step is pending");
    assert_eq!((step.name.as_str(), step.running), ("first", true));
    kit.advance(HOUR * 2 - Duration::from_millis(1))
        .await
        .expect("advance");
    let d = kit.engine().describe("d-1").await.expect("describe");
    assert_eq!(
        d.step.map(|s| s.name),
        Some("first".to_string()),
        "1 ms early"
    );
    kit.advance(Duration::from_millis(1))
        .await
        .expect("advance");
    let d = kit.engine().describe("d-1").await.expect("describe");
    assert!(d.step.is_none(), "two hours in, the step ended: {d:?}");
    // Then the hour's sleep and the second step: moved to by the kit.
    let out = kit.result(STEPS, "d-1").await.expect("result");
    assert_eq!(out, "first done, second done");
    assert!(kit.now_ms() - start >= 3 * HOUR.as_millis() as u64);
}

/// Issue 29: each attempt's `Step` or `Attempt` carries when its function
/// returned (`ended_ms`), by the clock its `Began` was stamped with (the
/// virtual one here): an attempt that takes a known time has exactly that
/// between its `Began` and its end, a failed one as a retried one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attempt_records_its_end_so_its_duration_is_the_time_it_took() {
    let mut kit = kit(&Effects::default()).await;
    let first = Duration::from_millis(2_345);
    let second = Duration::from_millis(61_007);
    kit.mock_step("first", StepMock::real().delay(first));
    kit.mock_step("second", StepMock::real().fail_first(1).delay(second));
    let out = kit.execute(STEPS, "t-1", &()).await.expect("result");
    assert_eq!(out, "first done, second done");
    let journal = kit.export_journal("t-1").await.expect("journal");
    // (step, attempt, kind, ended - started) of every attempt's end.
    let mut began = std::collections::BTreeMap::new();
    let mut ends = Vec::new();
    for rec in journal.records() {
        use fusee::core::record::Record;
        match rec {
            Record::Began {
                seq,
                attempt,
                started_ms,
                ..
            } => {
                began.insert((*seq, *attempt), *started_ms);
            }
            Record::Step {
                seq,
                name,
                attempt,
                ended_ms,
                ..
            }
            | Record::Attempt {
                seq,
                name,
                attempt,
                ended_ms,
                ..
            } => {
                let started = began[&(*seq, *attempt)];
                let ended = ended_ms.unwrap_or_else(|| panic!("no end time: {rec:?}"));
                ends.push((
                    name.to_string(),
                    *attempt,
                    rec.kind_name(),
                    ended.checked_sub(started),
                ));
            }
            _ => {}
        }
    }
    let ms = |d: Duration| Some(d.as_millis() as u64);
    assert_eq!(
        ends,
        [
            ("first".to_string(), 1, "Step", ms(first)),
            ("second".to_string(), 1, "Attempt", ms(second)),
            ("second".to_string(), 2, "Step", ms(second)),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mocks_stay_in_place_after_a_crash() {
    let effects = Effects::default();
    let mut kit = kit(&effects).await;
    let first = kit.mock_step(
        "first",
        StepMock::returning("mocked").expect("mock").delay(HOUR),
    );
    kit.engine().start(STEPS, "c-1", &()).await.expect("start");
    kit.settle().await.expect("settle");
    // The step's attempt was running: after the crash it runs again, with
    // the same key, through the mock.
    kit.crash().await.expect("crash");
    let out = kit.result(STEPS, "c-1").await.expect("result");
    assert_eq!(out, "mocked, second done");
    let calls = first.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0], calls[1], "same step, same attempt, same key");
    assert!(effects.lock().unwrap().iter().all(|(n, _)| n != "first"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_does_not_jump_while_a_real_step_runs() {
    const RACE: Workflow<(), String> = Workflow::new("race");
    let kit = TestEngine::open(|engine: &Engine| {
        engine.register(RACE, |ctx: Ctx, ()| async move {
            // A real step of 300 ms of real time races a day's sleep: the
            // clock must not jump to the sleep while the step runs.
            let step = ctx
                .step("slow", |_| async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok(())
                })
                .into_future();
            let sleep = ctx.sleep("race", DAY);
            tokio::select! {
                biased;
                r = step => { r?; Ok::<_, Failure>("step".to_string()) }
                r = sleep => { r?; Ok("sleep".to_string()) }
            }
        });
    })
    .await
    .expect("open");
    let start = kit.now_ms();
    let out = kit.execute(RACE, "race-1", &()).await.expect("result");
    assert_eq!(out, "step", "the clock jumped while a step ran");
    assert_eq!(kit.now_ms(), start);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_a_busy_engine_times_out_naming_what_is_busy() {
    const STUCK: Workflow<(), u64> = Workflow::new("stuck");
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let kit = TestEngine::builder()
        .wait_limit(Duration::from_millis(300))
        .open(move |engine: &Engine| {
            let c = Arc::clone(&c);
            engine.register(STUCK, move |ctx: Ctx, ()| {
                let c = Arc::clone(&c);
                async move {
                    Ok::<_, Failure>(
                        ctx.step("stuck", move |_| {
                            c.fetch_add(1, Ordering::SeqCst);
                            async {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                                Ok(0u64)
                            }
                        })
                        .await?,
                    )
                }
            });
        })
        .await
        .expect("open");
    match kit.execute(STUCK, "stuck-1", &()).await {
        Err(TestError::Timeout { busy, run, .. }) => {
            assert!(busy.contains("1 step attempts running"), "{busy}");
            assert!(run.contains("stuck"), "{run}");
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_everywhere_carries_on_from_every_prefix_of_the_log() {
    let effects = Effects::default();
    let kit = kit(&effects).await;
    let mut seen = Vec::new();
    let report = kit
        .crash_everywhere(STEPS, &(), |point| {
            let ran: Vec<String> = std::mem::take(&mut *effects.lock().unwrap())
                .into_iter()
                .map(|(name, _)| name)
                .collect();
            assert_eq!(point.outcome, point.uncrashed);
            if let Some(n) = point.crashed_after {
                assert_eq!(point.kept.len(), n, "the crash kept the first {n} records");
            }
            seen.push((point.crashed_after, ran));
        })
        .await
        .expect("crash everywhere");
    // Start, Began, Step, Timer, Fired, Began, Step, Done.
    assert_eq!(report.records, 8);
    let both = vec!["first".to_string(), "second".to_string()];
    assert_eq!(seen.len(), 10, "the uncrashed run and 9 crash points");
    assert_eq!(seen[0], (None, both.clone()), "uncrashed");
    assert_eq!(
        seen[1],
        (Some(0), both.clone()),
        "nothing kept: everything runs again"
    );
    assert_eq!(
        seen[2],
        (Some(1), both.clone()),
        "the Start kept: both steps run"
    );
    assert_eq!(
        seen[3],
        (Some(2), both),
        "first's Began kept, its result not: it runs again"
    );
    assert_eq!(
        seen[4],
        (Some(3), vec!["second".to_string()]),
        "first's result kept"
    );
    assert_eq!(seen[9], (Some(8), vec![]), "everything kept: nothing runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_everywhere_catches_code_that_changes_across_a_crash() {
    const FICKLE: Workflow<(), String> = Workflow::new("fickle");
    // Code that reads state outside its journal: its first start takes
    // step "a", every later one (a replay after a crash included) "b".
    let starts = Arc::new(AtomicU32::new(0));
    let s = Arc::clone(&starts);
    let kit = TestEngine::open(move |engine: &Engine| {
        let s = Arc::clone(&s);
        engine.register(FICKLE, move |ctx: Ctx, ()| {
            let first = s.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                let name = if first { "a" } else { "b" };
                let v = ctx.step(name, |_| async { Ok(1u32) }).await?;
                Ok::<_, Failure>(format!("{name}{v}"))
            }
        });
    })
    .await
    .expect("open");
    let mut outcomes = Vec::new();
    let err = kit
        .crash_everywhere(FICKLE, &(), |point| {
            outcomes.push((point.crashed_after, point.outcome.clone()));
        })
        .await
        .expect_err("a run replayed with another step must not pass");
    // Uncrashed "a"; after a crash that kept nothing or only the Start,
    // "b" runs afresh; with step "a"'s Began kept (its start, before its
    // result), the code calling "b" departs from its journal and stops.
    assert_eq!(
        outcomes,
        [
            (None, Ok("a1".to_string())),
            (Some(0), Ok("b1".to_string())),
            (Some(1), Ok("b1".to_string()))
        ]
    );
    match &err {
        TestError::CrashPoint {
            crashed_after: Some(2),
            source,
            ..
        } => {
            let why = source.to_string();
            assert!(
                matches!(**source, TestError::Engine(Error::Determinism(_))),
                "the stopped run's caller gets the determinism error: {why}"
            );
            assert!(why.contains("operation 1"), "{why}");
            assert!(why.contains("step \"a\""), "{why}");
        }
        other => panic!("expected the error of crash point 2, got {other}"),
    }
}

/// Issue 32.3, the in-flight swap: code A's step "A1" began (its `Began`
/// durable) and its function ran; a crash cut its result; code B, deployed
/// meanwhile, calls "B1" at that point. The run stops with a determinism
/// error naming the run, the operation and both steps, and B1 never runs
/// beside A1. Checked at every record boundary: the crash points before
/// A1's `Began` run B1 afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_everywhere_catches_a_step_swapped_while_in_flight() {
    const SWAP: Workflow<(), String> = Workflow::new("swap");
    // The first start is code A, every later one (after a crash) code B.
    let starts = Arc::new(AtomicU32::new(0));
    let ran: Effects = Effects::default();
    let (s, r) = (Arc::clone(&starts), Arc::clone(&ran));
    let kit = TestEngine::open(move |engine: &Engine| {
        let (s, r) = (Arc::clone(&s), Arc::clone(&r));
        engine.register(SWAP, move |ctx: Ctx, ()| {
            let name = if s.fetch_add(1, Ordering::SeqCst) == 0 {
                "A1"
            } else {
                "B1"
            };
            let r = Arc::clone(&r);
            async move {
                let v = ctx
                    .step(name, move |sc| {
                        r.lock()
                            .unwrap()
                            .push((name.to_string(), sc.key().to_string()));
                        async { Ok(1u32) }
                    })
                    .await?;
                Ok::<_, Failure>(format!("{name}{v}"))
            }
        });
    })
    .await
    .expect("open");
    let mut points = Vec::new();
    let err = kit
        .crash_everywhere(SWAP, &(), |point| {
            let kinds: Vec<&str> = point.kept.iter().map(|r| r.kind_name()).collect();
            points.push((point.crashed_after, point.outcome.clone(), kinds.join(" ")));
        })
        .await
        .expect_err("a run whose in-flight step is swapped must not pass");
    assert_eq!(
        points,
        [
            (None, Ok("A11".to_string()), "Start Began Step Done".into()),
            (Some(0), Ok("B11".to_string()), String::new()),
            (Some(1), Ok("B11".to_string()), "Start".into()),
        ]
    );
    // Crash point 2 kept the Start and A1's Began, not its result.
    let TestError::CrashPoint {
        crashed_after: Some(2),
        source,
        ..
    } = &err
    else {
        panic!("expected the error of crash point 2, got {err}");
    };
    let TestError::Engine(Error::Determinism(d)) = &**source else {
        panic!("the stopped run's caller gets the determinism error: {source}");
    };
    assert_eq!(d.seq, 1);
    assert_eq!(
        d.journal,
        fusee::core::run::Held::Call(fusee::core::run::Call::Step { name: "A1".into() })
    );
    assert_eq!(
        d.code,
        fusee::core::run::Did::Called(fusee::core::run::Call::Step { name: "B1".into() })
    );
    let why = d.to_string();
    assert!(
        why.starts_with(&format!("run {}, operation 1:", d.run)),
        "{why}"
    );
    assert!(why.contains("\"A1\"") && why.contains("\"B1\""), "{why}");
    // A1 ran once (uncrashed); B1 only where the crash cut A1's Began.
    let ran: Vec<String> = ran.lock().unwrap().iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(ran, ["A1", "B1", "B1"]);
}

const SLOW: Workflow<(), u64> = Workflow::new("slow");

/// Issue 32.3: `describe` shows a step that began and has no result (its
/// name, operation, attempt and start time), from the journal, and again
/// after a restart, where the attempt begins again under its number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_a_step_in_flight_after_a_restart() {
    let mut kit = TestEngine::open(|engine: &Engine| {
        engine.register(SLOW, |ctx: Ctx, ()| async move {
            let v = ctx
                .step("upload", |_| async {
                    std::future::pending::<()>().await;
                    Ok(1u64)
                })
                .await?;
            Ok::<_, Failure>(v)
        });
    })
    .await
    .expect("open");
    let first_ms = kit.now_ms();
    kit.engine().start(SLOW, "slow-1", &()).await.unwrap();
    let in_flight = |started_ms| {
        vec![fusee::InFlightStep {
            seq: 1,
            name: "upload".into(),
            attempt: 1,
            started_ms,
        }]
    };
    let until = async |kit: &TestEngine, want: Vec<fusee::InFlightStep>| {
        let mut last = None;
        for _ in 0..2_000 {
            let d = kit.engine().describe("slow-1").await.unwrap();
            if d.in_flight == want {
                return d;
            }
            last = Some(d);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("never described as {want:?}: {last:?}");
    };
    let d = until(&kit, in_flight(first_ms)).await;
    assert_eq!(d.status, RunStatus::Running);
    kit.clock().advance(60_000);
    kit.crash().await.unwrap();
    // Recovered from the journal, the attempt cut by the crash begins
    // again: its new Began supersedes the old one.
    let d = until(&kit, in_flight(first_ms + 60_000)).await;
    assert_eq!(d.status, RunStatus::Running);
    let step = d.step.expect("the current step");
    assert_eq!((step.name.as_str(), step.attempt), ("upload", 1));
}

const TIMED: Workflow<(), (u64, u64)> = Workflow::new("timed");

/// Every crash point's clock starts at the latest time its kept records
/// hold (issue 32.5): after a crash that kept the nap's `Fired`, the code
/// reads a time no earlier than the nap's end, at every crash point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_everywhere_never_reads_a_time_before_a_fired_sleep() {
    fn ms(t: std::time::SystemTime) -> u64 {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
    let kit = TestEngine::open(|engine: &Engine| {
        engine.register(TIMED, |ctx: Ctx, ()| async move {
            let before = ms(ctx.now());
            ctx.sleep("nap", HOUR).await?;
            Ok::<_, Failure>((before, ms(ctx.now())))
        });
    })
    .await
    .expect("open");
    let mut points = 0;
    kit.crash_everywhere(TIMED, &(), |point| {
        let (before, after) = point.outcome.clone().expect("the run ends well");
        assert!(
            after >= before + HOUR.as_millis() as u64,
            "after the crash that kept {:?} records: woke at {after}, an hour after {before} is later",
            point.crashed_after
        );
        points += 1;
    })
    .await
    .expect("crash everywhere");
    // Start, Value (now), Timer, Fired, Value (now), Done: 6 records.
    assert_eq!(points, 8, "the uncrashed run and 7 crash points");
}

const RACE: Workflow<(), String> = Workflow::new("race");

/// `futures_util::future::join_all` and a `biased` `tokio::select!` over
/// the context's futures are deterministic under replay (issue 32.6): both
/// poll their futures in program order, so the operations take their
/// places in the journal in the same order live and on replay, and the
/// machine hands the code one delivery at a time in journal order. Proved
/// at every crash point: each carries on to the uncrashed outcome, with
/// no determinism error. The loser of a select is dropped, live and on
/// replay alike. (An unbiased select polls its branches in a random
/// order: two operations first polled there are journalled in either
/// order, and a replay may depart. This test's first draft had one and
/// failed at a crash point: "the journal holds a sleep named long, the
/// code called a sleep named short". `Ctx`'s docs say so.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_all_and_select_over_context_futures_replay_alike_at_every_crash_point() {
    let kit = TestEngine::open(|engine: &Engine| {
        engine.register(RACE, |ctx: Ctx, ()| async move {
            let steps = (0..3u32).map(|i| {
                ctx.step(&format!("s{i}"), move |_| async move {
                    Ok::<_, StepError>(i * 10)
                })
                .into_future()
            });
            let mut sum = 0;
            for r in futures_util::future::join_all(steps).await {
                sum += r?;
            }
            let first = tokio::select! {
                biased;
                r = ctx.step("quick", |_| async { Ok::<_, StepError>(1u32) }).into_future() => {
                    format!("step {}", r?)
                }
                r = ctx.sleep("late", HOUR) => {
                    r?;
                    "late".to_string()
                }
            };
            let second = tokio::select! {
                biased;
                r = ctx.sleep("short", Duration::from_secs(60)) => {
                    r?;
                    "short".to_string()
                }
                r = ctx.sleep("long", HOUR) => {
                    r?;
                    "long".to_string()
                }
            };
            Ok::<_, Failure>(format!("{sum} {first} {second}"))
        });
    })
    .await
    .expect("open");
    let mut points = 0;
    let report = kit
        .crash_everywhere(RACE, &(), |point| {
            assert_eq!(point.outcome, point.uncrashed, "{:?}", point.crashed_after);
            assert_eq!(
                point.outcome.clone().expect("the run ends well"),
                "30 step 1 short"
            );
            points += 1;
        })
        .await
        .expect("every crash point replays the raced futures alike");
    assert_eq!(points, report.crash_points + 1);
    assert!(report.records > 8, "{report:?}");
}

const HELPED: Workflow<(), String> = Workflow::new("helped");

/// `Ctx::join_all` (over 40 steps, past where `futures_util`'s changes
/// its polling order) and `Ctx::select` (a step against a sleep, two
/// sleeps) replay alike at every crash point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctx_join_all_and_select_replay_alike_at_every_crash_point() {
    use fusee::Either;
    let kit = TestEngine::open(|engine: &Engine| {
        engine.register(HELPED, |ctx: Ctx, ()| async move {
            let steps = (0..40u32).map(|i| {
                ctx.step(
                    &format!("s{i}"),
                    move |_| async move { Ok::<_, StepError>(i) },
                )
                .into_future()
            });
            let mut sum = 0;
            for r in ctx.join_all(steps).await {
                sum += r?;
            }
            let quick = ctx
                .step("quick", |_| async { Ok::<_, StepError>(1u32) })
                .into_future();
            let first = match ctx.select(quick, ctx.sleep("late", HOUR)).await {
                Either::Left(r) => format!("step {}", r?),
                Either::Right(r) => {
                    r?;
                    "late".to_string()
                }
            };
            let short = ctx.sleep("short", Duration::from_secs(60));
            let second = match ctx.select(ctx.sleep("long", HOUR), short).await {
                Either::Left(r) => {
                    r?;
                    "long".to_string()
                }
                Either::Right(r) => {
                    r?;
                    "short".to_string()
                }
            };
            Ok::<_, Failure>(format!("{sum} {first} {second}"))
        });
    })
    .await
    .expect("open");
    let mut points = 0;
    let report = kit
        .crash_everywhere(HELPED, &(), |point| {
            assert_eq!(point.outcome, point.uncrashed, "{:?}", point.crashed_after);
            assert_eq!(
                point.outcome.clone().expect("the run ends well"),
                "780 step 1 short"
            );
            points += 1;
        })
        .await
        .expect("every crash point replays the helpers alike");
    assert_eq!(points, report.crash_points + 1);
    assert!(report.records > 40, "{report:?}");
}
