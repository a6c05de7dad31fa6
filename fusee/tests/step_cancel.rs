//! Cancellation that reaches steps (issue 32, item 2): a step attempt is
//! told to stop ([`StepContext::cancelled`]) when its run is cancelled or
//! terminated, when the workflow drops the step's future, or when the
//! attempt times out; no attempt starts after a cancel; and the step's
//! [`OnCancel`] policy says whether the workflow's await waits for it.
//! On the production driver and the system clock, times kept short.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fusee::{
    Config, Ctx, Engine, Failure, OnCancel, RetryPolicy, StepCancel, StepContext, StepError,
    Workflow,
};
use tokio::sync::Notify;

/// What the steps saw, shared with the test.
#[derive(Clone, Default)]
struct Seen {
    causes: Arc<Mutex<Vec<StepCancel>>>,
    attempts: Arc<Mutex<u32>>,
    started: Arc<Notify>,
    told: Arc<Notify>,
}

impl Seen {
    fn causes(&self) -> Vec<StepCancel> {
        self.causes.lock().unwrap().clone()
    }

    /// Waits (at most 10 s) until a step saw its cancel.
    async fn until_told(&self) {
        let told = self.told.notified();
        if !self.causes().is_empty() {
            return;
        }
        tokio::time::timeout(Duration::from_secs(10), told)
            .await
            .expect("the step was told to stop within 10 s");
    }
}

/// A step that runs 60 s unless told to stop, noting why; then returns
/// `Ok(7)` (with `ok`) or a `cancelled` failure.
async fn long_step(sc: StepContext, seen: Seen, ok: bool) -> Result<u32, StepError> {
    *seen.attempts.lock().unwrap() += 1;
    seen.started.notify_one();
    tokio::select! {
        why = sc.cancelled() => {
            assert_eq!(sc.cancel_reason().as_ref(), Some(&why));
            seen.causes.lock().unwrap().push(why.clone());
            seen.told.notify_one();
            if ok { Ok(7) } else { Err(why.to_error()) }
        }
        _ = tokio::time::sleep(Duration::from_secs(60)) => Ok(1),
    }
}

const ABANDON: Workflow<(), u32> = Workflow::new("abandon");
const WAIT: Workflow<(), u32> = Workflow::new("wait");
const RACE: Workflow<(), u32> = Workflow::new("race");

async fn engine(seen: &Seen) -> Engine {
    let engine = Engine::open(Config::memory()).await.expect("open");
    let s = seen.clone();
    engine.register(ABANDON, move |ctx: Ctx, ()| {
        let s = s.clone();
        async move {
            let v = ctx
                .step("long", move |sc| long_step(sc, s.clone(), false))
                .await?;
            Ok::<_, Failure>(v)
        }
    });
    let s = seen.clone();
    engine.register(WAIT, move |ctx: Ctx, ()| {
        let s = s.clone();
        async move {
            let v = ctx
                .step("long", move |sc| long_step(sc, s.clone(), true))
                .on_cancel(OnCancel::Wait)
                .await?;
            Ok::<_, Failure>(v)
        }
    });
    let s = seen.clone();
    engine.register(RACE, move |ctx: Ctx, ()| {
        let s = s.clone();
        async move {
            let step = ctx.step("long", move |sc| long_step(sc, s.clone(), false));
            let nap = ctx.sleep("nap", Duration::from_millis(200));
            tokio::select! {
                biased;
                v = step => Ok::<_, Failure>(v?),
                r = nap => { r?; Ok(0) }
            }
        }
    });
    engine
}

/// The run is cancelled while its step runs: the step is told why at
/// once (not 60 s later), and the workflow's await ends with `cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_runs_step_is_told_and_the_workflow_does_not_wait() {
    let seen = Seen::default();
    let engine = engine(&seen).await;
    let started = seen.started.notified();
    engine.start(ABANDON, "c-1", &()).await.expect("start");
    started.await;
    let t = Instant::now();
    engine.cancel("c-1", "enough").await.expect("cancel");
    let err = engine.result(ABANDON, "c-1").await.expect_err("cancelled");
    assert!(err.to_string().contains("cancel"), "{err}");
    seen.until_told().await;
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(
        seen.causes(),
        [StepCancel::RunCancelled("enough".to_string())]
    );
    engine.close().await.expect("close");
}

/// With `OnCancel::Wait` the workflow's await waits for the step, which
/// stops when told and returns a result: the run ends with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_the_workflow_waits_for_returns_its_own_result_after_a_cancel() {
    let seen = Seen::default();
    let engine = engine(&seen).await;
    let started = seen.started.notified();
    engine.start(WAIT, "c-2", &()).await.expect("start");
    started.await;
    engine.cancel("c-2", "stop").await.expect("cancel");
    let out = tokio::time::timeout(Duration::from_secs(10), engine.result(WAIT, "c-2"))
        .await
        .expect("within 10 s")
        .expect("the step's result");
    assert_eq!(out, 7, "the step's own result, not a cancelled error");
    assert_eq!(
        seen.causes(),
        [StepCancel::RunCancelled("stop".to_string())]
    );
    engine.close().await.expect("close");
}

/// The step's future loses a `select!` to a sleep: the step is told its
/// future was dropped, and its failure is final (one attempt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_future_is_dropped_is_told() {
    let seen = Seen::default();
    let engine = engine(&seen).await;
    assert_eq!(engine.execute(RACE, "c-3", &()).await.expect("result"), 0);
    seen.until_told().await;
    assert_eq!(seen.causes(), [StepCancel::Dropped]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(*seen.attempts.lock().unwrap(), 1, "not retried");
    engine.close().await.expect("close");
}

/// A terminated run's running step is told the run ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_runs_step_is_told() {
    let seen = Seen::default();
    let engine = engine(&seen).await;
    let started = seen.started.notified();
    engine.start(ABANDON, "c-4", &()).await.expect("start");
    started.await;
    engine.terminate("c-4", "gone").await.expect("terminate");
    seen.until_told().await;
    assert_eq!(seen.causes(), [StepCancel::RunEnded]);
    engine.close().await.expect("close");
}

const TIMED: Workflow<(), u32> = Workflow::new("timed");
const RETRIED: Workflow<(), u32> = Workflow::new("retried");

/// An attempt past its timeout is told (a clone of its context, handed to
/// a task of its own, sees it) before its future is dropped; and a step
/// waiting for its retry when the run is cancelled never runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_attempt_is_told_and_no_attempt_starts_after_a_cancel() {
    let seen = Seen::default();
    let engine = Engine::open(Config::memory()).await.expect("open");
    let s = seen.clone();
    engine.register(TIMED, move |ctx: Ctx, ()| {
        let s = s.clone();
        async move {
            let v = ctx
                .step("slow", move |sc: StepContext| {
                    let s = s.clone();
                    async move {
                        let watcher = sc.clone();
                        let s2 = s.clone();
                        tokio::spawn(async move {
                            let why = watcher.cancelled().await;
                            s2.causes.lock().unwrap().push(why);
                            s2.told.notify_one();
                        });
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        Ok(1)
                    }
                })
                .timeout(Duration::from_millis(100))
                .retry(RetryPolicy::none())
                .await?;
            Ok::<_, Failure>(v)
        }
    });
    let s = seen.clone();
    engine.register(RETRIED, move |ctx: Ctx, ()| {
        let s = s.clone();
        async move {
            let v = ctx
                .step("flaky", move |_sc: StepContext| {
                    let s = s.clone();
                    async move {
                        *s.attempts.lock().unwrap() += 1;
                        s.started.notify_one();
                        Err::<u32, _>(StepError::retryable("not yet"))
                    }
                })
                .retry(RetryPolicy::default().attempts(10).backoff(
                    Duration::from_millis(500),
                    1.0,
                    Duration::from_secs(1),
                ))
                .await;
            // The code catches the cancel and goes on a while: the step
            // stays live, past its retry's time.
            if v.is_err() {
                ctx.sleep("after", Duration::from_millis(1_500)).await?;
            }
            Ok::<_, Failure>(v.unwrap_or(0))
        }
    });
    let err = engine
        .execute(TIMED, "t-1", &())
        .await
        .expect_err("timed out");
    assert!(err.to_string().contains("timeout"), "{err}");
    seen.until_told().await;
    assert_eq!(seen.causes(), [StepCancel::TimedOut]);

    let started = seen.started.notified();
    engine.start(RETRIED, "r-1", &()).await.expect("start");
    started.await;
    engine.cancel("r-1", "no more").await.expect("cancel");
    let out = engine
        .result(RETRIED, "r-1")
        .await
        .expect("the code went on");
    assert_eq!(out, 0);
    // Well past the retry's time (500 ms): still one attempt.
    assert_eq!(
        *seen.attempts.lock().unwrap(),
        1,
        "no attempt after the cancel"
    );
    let journal = engine.journal_json("r-1", None).await.expect("journal");
    let failed = journal
        .to_string()
        .contains("was cancelled before attempt 2 started");
    assert!(
        failed,
        "the step was recorded failed, kind cancelled: {journal}"
    );
    engine.close().await.expect("close");
}
