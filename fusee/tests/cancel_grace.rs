//! A cancel the code cannot swallow (issue 32, item 2):
//! `Engine::cancel_with_grace` terminates a run that has not ended when
//! its grace passes, with the cancel's reason, also across a crash; a
//! plain `cancel` stays cooperative. On the test kit's virtual clock.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use fusee::testing::{Sleeper, TestEngine};
use fusee::{Ctx, Engine, Failure, RetryPolicy, RunStatus, Status, StepContext, Workflow};

const HOUR: Duration = Duration::from_secs(3600);

/// Code that swallows every cancel: it sleeps an hour, again and again.
const STUBBORN: Workflow<(), u32> = Workflow::new("stubborn");
/// Code that ends at its cancel (the sleep's `cancelled` error returned).
const POLITE: Workflow<(), u32> = Workflow::new("polite");

async fn kit() -> TestEngine {
    TestEngine::open(|engine: &Engine| {
        engine.register(STUBBORN, |ctx: Ctx, ()| async move {
            let mut naps = 0u32;
            loop {
                let _ = ctx.sleep("nap", HOUR).await;
                naps += 1;
                if naps > 1_000 {
                    return Ok::<_, Failure>(naps);
                }
            }
        });
        engine.register(POLITE, |ctx: Ctx, ()| async move {
            ctx.sleep("nap", HOUR).await?;
            Ok::<_, Failure>(1)
        });
    })
    .await
    .expect("open")
}

async fn status(kit: &TestEngine, id: &str) -> RunStatus {
    kit.engine().describe(id).await.expect("describe").status
}

/// The grace passes with the code still running: the run is terminated
/// with the cancel's reason, exactly at the grace's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_with_grace_terminates_code_that_swallows_it() {
    let kit = kit().await;
    kit.engine()
        .start(STUBBORN, "s-1", &())
        .await
        .expect("start");
    let at = kit.now_ms();
    kit.engine()
        .cancel_with_grace("s-1", "shutting down", Duration::from_secs(30))
        .await
        .expect("cancel");
    let err = kit.result(STUBBORN, "s-1").await.expect_err("terminated");
    let text = err.to_string();
    assert!(text.contains("terminated"), "{text}");
    assert!(text.contains("shutting down"), "{text}");
    assert_eq!(kit.now_ms() - at, 30_000, "at the grace's end");
    assert_eq!(
        status(&kit, "s-1").await,
        RunStatus::Finished(Status::Terminated)
    );
}

/// A plain cancel is cooperative: code that swallows it runs on (hours
/// later it still does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_cancel_can_be_swallowed() {
    let kit = kit().await;
    kit.engine()
        .start(STUBBORN, "s-2", &())
        .await
        .expect("start");
    kit.engine().cancel("s-2", "please").await.expect("cancel");
    kit.advance(3 * HOUR).await.expect("advance");
    assert_eq!(status(&kit, "s-2").await, RunStatus::Running);
}

/// The grace is recorded with the cancel: a crash during it does not let
/// the run out, and the run is terminated at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_holds_across_a_crash() {
    let mut kit = kit().await;
    kit.engine()
        .start(STUBBORN, "s-3", &())
        .await
        .expect("start");
    let at = kit.now_ms();
    kit.engine()
        .cancel_with_grace("s-3", "moving house", Duration::from_secs(60))
        .await
        .expect("cancel");
    kit.advance(Duration::from_secs(10)).await.expect("advance");
    kit.crash().await.expect("crash");
    let err = kit.result(STUBBORN, "s-3").await.expect_err("terminated");
    assert!(err.to_string().contains("moving house"), "{err}");
    assert_eq!(kit.now_ms() - at, 60_000, "at the recorded grace's end");
}

/// Code that ends at its cancel ends as cancelled, and its grace, passing
/// later, changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_that_ends_within_its_grace_is_not_terminated() {
    let kit = kit().await;
    kit.engine().start(POLITE, "p-1", &()).await.expect("start");
    kit.engine()
        .cancel_with_grace("p-1", "done here", Duration::from_secs(30))
        .await
        .expect("cancel");
    let err = kit.result(POLITE, "p-1").await.expect_err("cancelled");
    assert!(err.to_string().contains("cancel"), "{err}");
    kit.advance(Duration::from_secs(60)).await.expect("advance");
    assert_eq!(
        status(&kit, "p-1").await,
        RunStatus::Finished(Status::Cancelled)
    );
}

/// Code that swallows its cancel and keeps calling steps, each working 1 s
/// of virtual time and ignoring its own cancel signal, failing half its
/// attempts (retried).
const BUSY: Workflow<(), u32> = Workflow::new("busy");

/// A cancelled run with steps in flight, under a 10 s grace: steps called
/// after the cancel still run within the grace, none starts after it,
/// and the run ends terminated at the grace's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_step_starts_after_a_cancels_grace() {
    type Cell = Arc<OnceLock<Sleeper>>;
    let cell: Cell = Arc::default();
    let starts: Arc<Mutex<Vec<u64>>> = Arc::default();
    let (c, st) = (Arc::clone(&cell), Arc::clone(&starts));
    let mut kit = TestEngine::open(move |engine: &Engine| {
        let (c, st) = (Arc::clone(&c), Arc::clone(&st));
        engine.register(BUSY, move |ctx: Ctx, ()| {
            let (c, st) = (Arc::clone(&c), Arc::clone(&st));
            async move {
                let mut done = 0u32;
                loop {
                    let (c, st) = (Arc::clone(&c), Arc::clone(&st));
                    let r = ctx
                        .step("work", move |sc: StepContext| {
                            let sl = c.get().expect("the kit is open").clone();
                            let st = Arc::clone(&st);
                            async move {
                                st.lock().unwrap().push(sl.now_ms());
                                sl.sleep(Duration::from_secs(1)).await?;
                                if sc.attempt() % 2 == 1 {
                                    return Err(fusee::StepError::retryable("again"));
                                }
                                Ok(())
                            }
                        })
                        .retry(RetryPolicy::default().attempts(1_000))
                        .await;
                    done += u32::from(r.is_ok());
                    if done > 10_000 {
                        return Ok::<_, Failure>(done);
                    }
                }
            }
        });
    })
    .await
    .expect("open");
    let _ = cell.set(kit.sleeper());
    kit.engine().start(BUSY, "b-1", &()).await.expect("start");
    kit.advance(Duration::from_secs(5)).await.expect("advance");
    let at = kit.now_ms();
    kit.engine()
        .cancel_with_grace("b-1", "stop working", Duration::from_secs(10))
        .await
        .expect("cancel");
    let err = kit.result(BUSY, "b-1").await.expect_err("terminated");
    assert!(err.to_string().contains("stop working"), "{err}");
    let end = at + 10_000;
    assert_eq!(kit.now_ms(), end);
    kit.advance(Duration::from_secs(60)).await.expect("advance");
    let starts = starts.lock().unwrap().clone();
    assert!(
        starts.iter().any(|&t| t > at),
        "steps ran within the grace: {starts:?}"
    );
    assert!(
        starts.iter().all(|&t| t < end),
        "no step started at or after the grace's end ({end}): {starts:?}"
    );
    kit.crash().await.expect("crash");
    assert_eq!(
        status(&kit, "b-1").await,
        RunStatus::Finished(Status::Terminated)
    );
}

/// A step, a nap (where a cancel comes, swallowed), a step after it, then
/// naps that swallow every cancel.
const RESETTABLE: Workflow<(), u32> = Workflow::new("resettable");

/// A reset to a step after a cancel with a grace copies the cancel, not
/// its grace: the new run is not terminated at the old run's deadline,
/// neither live nor after a crash (which arms the graces its records hold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_after_a_cancel_with_grace_does_not_inherit_the_grace() {
    let mut kit = TestEngine::open(|engine: &Engine| {
        engine.register(RESETTABLE, |ctx: Ctx, ()| async move {
            ctx.step("first", |_| async { Ok(1u32) }).await?;
            let _ = ctx.sleep("nap", HOUR).await;
            ctx.step("after", |_| async { Ok(2u32) }).await?;
            loop {
                let _ = ctx.sleep("doze", HOUR).await;
            }
        });
    })
    .await
    .expect("open");
    kit.engine()
        .start(RESETTABLE, "r-1", &())
        .await
        .expect("start");
    kit.advance(Duration::from_secs(1)).await.expect("advance");
    kit.engine()
        .cancel_with_grace("r-1", "old deadline", Duration::from_secs(60))
        .await
        .expect("cancel");
    kit.advance(Duration::from_secs(5)).await.expect("advance");
    let old = kit.engine().describe("r-1").await.expect("describe").run;
    let new = kit
        .engine()
        .reset("r-1", "after", "try again")
        .await
        .expect("reset");
    assert_ne!(new.run, old);
    kit.advance(Duration::from_secs(120))
        .await
        .expect("advance");
    assert_eq!(status(&kit, "r-1").await, RunStatus::Running, "live");
    kit.crash().await.expect("crash");
    kit.advance(Duration::from_secs(120))
        .await
        .expect("advance");
    let d = kit.engine().describe("r-1").await.expect("describe");
    assert_eq!(
        (d.run, d.status),
        (new.run, RunStatus::Running),
        "recovered"
    );
}

/// A parent that starts a child which swallows every cancel, under the
/// parent-close policy `Cancel`, then ends at its own cancel.
const PARENT: Workflow<(), u32> = Workflow::new("parent");

async fn family() -> TestEngine {
    TestEngine::open(|engine: &Engine| {
        engine.register(STUBBORN, |ctx: Ctx, ()| async move {
            loop {
                let _ = ctx.sleep("nap", HOUR).await;
            }
        });
        engine.register(PARENT, |ctx: Ctx, ()| async move {
            ctx.child(STUBBORN, "kid", &())
                .on_parent_close(fusee::ParentClose::Cancel)
                .detach()
                .await?;
            ctx.sleep("nap", HOUR).await?;
            Ok::<_, Failure>(1)
        });
    })
    .await
    .expect("open")
}

/// A parent cancelled with a grace passes the grace to the children its
/// close cancels: the child, which swallows its cancel, is terminated with
/// the reason the grace's length after its cancel, also across a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parents_grace_cascades_to_the_children_its_close_cancels() {
    let mut kit = family().await;
    kit.engine().start(PARENT, "dad", &()).await.expect("start");
    kit.advance(Duration::from_secs(1)).await.expect("advance");
    assert_eq!(status(&kit, "kid").await, RunStatus::Running);
    let at = kit.now_ms();
    kit.engine()
        .cancel_with_grace("dad", "closing shop", Duration::from_secs(30))
        .await
        .expect("cancel");
    kit.result(PARENT, "dad").await.expect_err("cancelled");
    assert_eq!(
        status(&kit, "dad").await,
        RunStatus::Finished(Status::Cancelled)
    );
    kit.advance(Duration::from_secs(10)).await.expect("advance");
    assert_eq!(status(&kit, "kid").await, RunStatus::Running, "in grace");
    kit.crash().await.expect("crash");
    let err = kit.result(STUBBORN, "kid").await.expect_err("terminated");
    assert!(err.to_string().contains("parent"), "{err}");
    assert_eq!(
        status(&kit, "kid").await,
        RunStatus::Finished(Status::Terminated)
    );
    let waited = kit.now_ms() - at;
    assert!(
        (30_000..31_000).contains(&waited),
        "terminated the grace after its cancel: {waited} ms"
    );
}

/// A parent cancelled without a grace passes none on: the child's cancel
/// stays cooperative (swallowed, it runs on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_cancel_cascades_without_a_grace() {
    let kit = family().await;
    kit.engine().start(PARENT, "mum", &()).await.expect("start");
    kit.advance(Duration::from_secs(1)).await.expect("advance");
    kit.engine().cancel("mum", "closing").await.expect("cancel");
    kit.result(PARENT, "mum").await.expect_err("cancelled");
    kit.advance(3 * HOUR).await.expect("advance");
    assert_eq!(status(&kit, "kid").await, RunStatus::Running);
}

/// The cascaded grace at every record boundary: whatever a crash keeps of
/// the parent's cancel, its end and the child's cancel, the child is
/// terminated within the grace after the scenario's cancel. No crash point
/// differs: a cancel and its grace are one record, so a crash that kept
/// the parent's cancel (before the call was acknowledged: the client's
/// retry then finds the parent finished) kept its grace too, and the
/// parent's close passes it on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cascaded_grace_holds_at_every_crash_point() {
    use fusee::core::record::Record;
    let kit = family().await;
    let mut cancel_last = 0;
    let report = kit
        .crash_everywhere_with(
            async |kit: &TestEngine| {
                kit.engine()
                    .start_with(PARENT, "dad", &(), fusee::IdPolicy::Attach)
                    .await?;
                kit.advance(Duration::from_secs(1)).await?;
                let grace = Duration::from_secs(30);
                match kit
                    .engine()
                    .cancel_with_grace("dad", "closing shop", grace)
                    .await
                {
                    Ok(()) | Err(fusee::Error::Finished { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                kit.advance(Duration::from_secs(60)).await?;
                Ok(kit.engine().describe("kid").await?.status)
            },
            |point| {
                let at = point.crashed_after;
                // The crash point the two-record form lost the grace at:
                // the parent's cancel kept as the last record.
                if matches!(point.kept.last(), Some(Record::Cancel { run, .. }) if *run == 1) {
                    cancel_last += 1;
                }
                assert_eq!(
                    *point.outcome,
                    RunStatus::Finished(Status::Terminated),
                    "crash after {at:?} of {} records",
                    point.records
                );
            },
        )
        .await
        .expect("every crash point ends");
    assert!(report.records > 6, "{report:?}");
    assert_eq!(
        cancel_last, 1,
        "one crash point kept the parent's cancel last"
    );
}
