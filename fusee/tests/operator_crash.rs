//! The operator verbs that write records, crashed at every record
//! boundary (issue 15): a run paused and resumed carries on to the same
//! result from every prefix of its log, is seen paused whenever the pause
//! was acknowledged, and no step whose result was durable runs again; a
//! run reset with `reset_run`, the reset repeated after every crash, is
//! reset once; a terminate, a bulk terminate and a bulk cancel end the
//! runs they hit the same way from every crash point, and no other.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::testing::{RunFailure, TestEngine, TestError};
use fusee::{Ctx, Engine, Error, Failure, IdPolicy, ListFilter, Signal, Workflow};

mod common;

use common::effects::{Effects, assert_same_end, noted, take};

type RunId = u64;

const TWO_STEPS: Workflow<(), u64> = Workflow::new("two-steps");

fn register(engine: &Engine, effects: &Effects) {
    let effects = Arc::clone(effects);
    engine.register(TWO_STEPS, move |ctx: Ctx, ()| {
        let effects = Arc::clone(&effects);
        async move {
            let mut sum = 0;
            for (name, value) in [("a", 1u64), ("b", 2)] {
                sum += noted(&ctx, &effects, name, value).await?;
                ctx.sleep(&format!("after-{name}"), Duration::from_secs(1))
                    .await?;
            }
            Ok::<_, Failure>(sum)
        }
    });
}

/// Starts the run (attaching after a crash), pauses it, checks it is seen
/// paused, resumes it and waits for its result.
async fn pause_and_resume(kit: &TestEngine) -> Result<u64, TestError> {
    let engine = kit.engine();
    engine
        .start_with(TWO_STEPS, "paused", &(), IdPolicy::Attach)
        .await?;
    match engine.pause("paused").await {
        Ok(()) => {
            let d = engine.describe("paused").await?;
            if !d.paused && d.finished_ms.is_none() {
                return Err(TestError::Engine(Error::Rejected {
                    id: "paused".into(),
                    reason: "an acknowledged pause is not seen".into(),
                }));
            }
            engine.resume("paused").await?;
        }
        // A crash after the run's end: its result is all there is.
        Err(Error::Finished { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    kit.result(TWO_STEPS, "paused").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_of_a_pause_and_resume_ends_the_same() {
    let effects = Effects::default();
    let e = Arc::clone(&effects);
    let kit = TestEngine::open(move |engine: &Engine| register(engine, &e))
        .await
        .expect("open");
    let report = kit
        .crash_everywhere_with(pause_and_resume, |point| {
            let ran = take(&effects);
            assert_eq!(*point.uncrashed, 3);
            assert_same_end(point, &ran);
        })
        .await
        .expect("every crash point ends");
    assert!(report.records >= 8, "{} records", report.records);
}

const RESETTABLE: Workflow<(), u64> = Workflow::new("resettable");
const GO: Signal<u64> = Signal::new("go");

/// Steps `a` and `b`, then a wait for `go`: the sum of the three.
fn register_resettable(engine: &Engine, effects: &Effects) {
    let effects = Arc::clone(effects);
    engine.register(RESETTABLE, move |ctx: Ctx, ()| {
        let effects = Arc::clone(&effects);
        async move {
            let mut sum = 0;
            for (name, value) in [("a", 1u64), ("b", 2)] {
                sum += noted(&ctx, &effects, name, value).await?;
            }
            Ok::<_, Failure>(sum + ctx.wait_for(&GO).await?.unwrap_or(0))
        }
    });
}

/// Starts the run (attaching after a crash), lets it reach its wait,
/// resets its first run to step `b` with `reset_run` (a repeat when the
/// crash kept the reset), signals the run that reset made and waits for
/// its result. Returns the result and the reset's run.
async fn reset_once(
    kit: &TestEngine,
    first: &Mutex<Option<RunId>>,
) -> Result<(u64, RunId), TestError> {
    let engine = kit.engine();
    let started = engine
        .start_with(RESETTABLE, "reset", &(), IdPolicy::Attach)
        .await?;
    // The uncrashed scenario's start made the first run; after a crash
    // the start may attach to the run its reset made.
    let first_run = *first.lock().unwrap().get_or_insert(started.run().run);
    kit.settle().await?;
    let made = engine.reset_run("reset", first_run, "b", "again").await?;
    match engine.signal("reset", GO, &10).await {
        Ok(()) | Err(Error::Finished { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    Ok((kit.result(RESETTABLE, "reset").await?, made.run))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_of_a_repeated_reset_resets_once() {
    let effects = Effects::default();
    let e = Arc::clone(&effects);
    let kit = TestEngine::open(move |engine: &Engine| register_resettable(engine, &e))
        .await
        .expect("open");
    let first = Arc::new(Mutex::new(None));
    let f = Arc::clone(&first);
    let report = kit
        .crash_everywhere_with(
            async move |kit: &TestEngine| reset_once(kit, &f).await,
            |point| {
                let ran = take(&effects);
                let (value, made) = *point.uncrashed;
                assert_eq!(value, 13);
                let first_run = first.lock().unwrap().expect("the first run");
                assert_ne!(made, first_run, "the reset made no new run");
                for effect in &ran {
                    // A step run by a third run means a second reset.
                    assert!(
                        effect.0 == first_run || effect.0 == made,
                        "crash after {:?} records: step {effect:?} ran in a run neither the \
                         first ({first_run}) nor its reset ({made})",
                        point.crashed_after
                    );
                }
                assert_same_end(point, &ran);
            },
        )
        .await
        .expect("every crash point ends");
    assert!(report.records >= 8, "{} records", report.records);
}

const WAITER: Workflow<(), u64> = Workflow::new("waiter");
const CATCHER: Workflow<(), String> = Workflow::new("catcher");

/// A waiter takes a step, then waits for `go`; a catcher waits for `go`
/// and, cancelled, cleans up in a step and ends as cancelled.
fn register_bulk(engine: &Engine, effects: &Effects) {
    let e = Arc::clone(effects);
    engine.register(WAITER, move |ctx: Ctx, ()| {
        let e = Arc::clone(&e);
        async move {
            let got = noted(&ctx, &e, "w", 1).await?;
            Ok::<_, Failure>(got + ctx.wait_for(&GO).await?.unwrap_or(0))
        }
    });
    let e = Arc::clone(effects);
    engine.register(CATCHER, move |ctx: Ctx, ()| {
        let e = Arc::clone(&e);
        async move {
            match ctx.wait_for(&GO).await {
                Ok(_) => Ok("went".to_string()),
                Err(f) => {
                    noted(&ctx, &e, "clean-up", 0).await?;
                    Err(f)
                }
            }
        }
    });
}

/// A run's end as the scenario compares it.
fn end<O: std::fmt::Debug>(outcome: Result<O, RunFailure>) -> String {
    match outcome {
        Ok(v) => format!("{v:?}"),
        Err(RunFailure { status, failure }) => format!("{status}: {}", failure.message),
    }
}

/// Starts three waiters, a catcher and a bystander waiter (attaching
/// after a crash) and lets them reach their waits; terminates `w-0` by
/// hand; releases the bystander with `go` and waits for its end, so the
/// bulk terminate of running waiters that follows hits `w-1` and `w-2`
/// only; then bulk-cancels catchers. Returns every run's end.
async fn terminate_and_cancel(kit: &TestEngine) -> Result<Vec<String>, TestError> {
    let engine = kit.engine();
    for id in ["w-0", "w-1", "w-2", "bystander"] {
        engine.start_with(WAITER, id, &(), IdPolicy::Attach).await?;
    }
    engine
        .start_with(CATCHER, "c-0", &(), IdPolicy::Attach)
        .await?;
    kit.settle().await?;
    let finished_is_fine = |r: Result<(), Error>| match r {
        Ok(()) | Err(Error::Finished { .. }) => Ok(()),
        Err(e) => Err(e),
    };
    finished_is_fine(engine.terminate("w-0", "by hand").await)?;
    finished_is_fine(engine.signal("bystander", GO, &10).await)?;
    // The bystander's end must be durable before the bulk terminate
    // looks for running waiters, or it would be hit too.
    kit.result(WAITER, "bystander").await?;
    engine
        .terminate_all(ListFilter::new().workflow("waiter"), "in bulk")
        .await?;
    engine
        .cancel_all(ListFilter::new().workflow("catcher"), "in bulk")
        .await?;
    let mut ends = Vec::new();
    for id in ["w-0", "w-1", "w-2", "bystander"] {
        ends.push(end(kit.outcome(WAITER, id).await?));
    }
    ends.push(end(kit.outcome(CATCHER, "c-0").await?));
    Ok(ends)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_of_terminates_and_bulk_verbs_ends_the_same() {
    let effects = Effects::default();
    let e = Arc::clone(&effects);
    let kit = TestEngine::open(move |engine: &Engine| register_bulk(engine, &e))
        .await
        .expect("open");
    let report = kit
        .crash_everywhere_with(terminate_and_cancel, |point| {
            let ran = take(&effects);
            if point.crashed_after.is_none() {
                assert_eq!(
                    *point.uncrashed,
                    [
                        "terminated: by hand",
                        "terminated: in bulk",
                        "terminated: in bulk",
                        "11",
                        "cancelled: in bulk",
                    ]
                );
            }
            assert_same_end(point, &ran);
        })
        .await
        .expect("every crash point ends");
    // Five starts, a step, the waits, the bystander's signal and end, three
    // terminations, the cancel, the clean-up and the catcher's end.
    assert!(report.records >= 15, "{} records", report.records);
    eprintln!("{} crash points", report.crash_points);
}
