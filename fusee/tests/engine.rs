//! The engine end to end: workflows with steps, sleeps and signals; bad
//! input; retries and panics; recovery after close and after a crash.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fusee::{
    AnyStorage, Clock, Config, Ctx, Engine, Error, Failure, IdPolicy, RetryPolicy, RunStatus,
    Signal, StepError, VirtualClock, Workflow,
};

const ADD: Workflow<(u64, u64), u64> = Workflow::new("add");
const WAITER: Workflow<String, String> = Workflow::new("waiter");
const FLAKY: Workflow<u32, u32> = Workflow::new("flaky");
const PANICS: Workflow<(), ()> = Workflow::new("panics");
const SLEEPER: Workflow<u64, u64> = Workflow::new("sleeper");
const NAME: Signal<String> = Signal::new("name");

fn temp_dir(tag: &str) -> std::path::PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "fusee-engine-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn register_add(engine: &Engine) {
    engine.register(ADD, |ctx: Ctx, (a, b): (u64, u64)| async move {
        let x = ctx
            .step("double-a", move |_| async move { Ok(a * 2) })
            .await?;
        let y = ctx.step("add-b", move |_| async move { Ok(x + b) }).await?;
        Ok::<_, Failure>(y)
    });
}

fn register_waiter(engine: &Engine) {
    engine.register(WAITER, |ctx: Ctx, greeting: String| async move {
        let who = ctx
            .wait_for(&NAME)
            .await?
            .ok_or_else(|| Failure::new("no name"))?;
        Ok::<_, Failure>(format!("{greeting}, {who}"))
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_of_steps_returns_its_result() {
    let engine = Engine::open(Config::memory()).await.unwrap();
    register_add(&engine);
    assert_eq!(engine.execute(ADD, "add-1", &(20, 2)).await.unwrap(), 42);
    let d = engine.describe("add-1").await.unwrap();
    // `Status` is the crate's own: no path into fusee-core to match it.
    assert!(matches!(d.status, RunStatus::Finished(fusee::Status::Ok)));
    let m = engine.metrics().await;
    assert!(m.flushes > 0 && m.flushed_records >= 4, "{m:?}");
    assert_eq!(m.step_attempts, 2, "one attempt of each of the two steps");
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_named_errors() {
    let engine = Engine::open(Config::memory().max_payload(1000))
        .await
        .unwrap();
    register_add(&engine);
    match engine.execute(WAITER, "w", &"hi".to_string()).await {
        Err(Error::UnknownWorkflow { wtype, registered }) => {
            assert_eq!(wtype, "waiter");
            assert_eq!(registered, vec!["add".to_string()]);
        }
        other => panic!("expected UnknownWorkflow, found {other:?}"),
    }
    engine.execute(ADD, "taken", &(1, 1)).await.unwrap();
    match engine.start(ADD, "taken", &(1, 1)).await {
        Err(Error::AlreadyExists { id, .. }) => assert_eq!(id, "taken"),
        other => panic!("expected AlreadyExists, found {other:?}"),
    }
    let attached = engine
        .start_with(ADD, "taken", &(1, 1), IdPolicy::Attach)
        .await
        .unwrap();
    assert!(attached.run().attached);
    assert_eq!(attached.result().await.unwrap(), 3);
    assert!(matches!(
        engine.signal("nobody", NAME, &"x".into()).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        engine.describe("nobody").await,
        Err(Error::NotFound { .. })
    ));
    let big = "x".repeat(2000);
    register_waiter(&engine);
    assert!(matches!(
        engine.start(WAITER, "big", &big).await,
        Err(Error::TooLarge { .. })
    ));
    // The refusal names the workflow it was for.
    let text = engine
        .start(WAITER, "big", &big)
        .await
        .unwrap_err()
        .to_string();
    assert!(text.contains("workflow \"big\""), "{text}");
    assert!(
        matches!(engine.describe("big").await, Err(Error::NotFound { .. })),
        "a refused start records nothing"
    );
    engine.close().await.unwrap();
    assert!(matches!(
        engine.execute(ADD, "after", &(1, 1)).await,
        Err(Error::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_reach_a_waiting_workflow() {
    let engine = Engine::open(Config::memory()).await.unwrap();
    register_waiter(&engine);
    let run = engine
        .start(WAITER, "w-1", &"hello".to_string())
        .await
        .unwrap();
    engine
        .signal("w-1", NAME, &"ada".to_string())
        .await
        .unwrap();
    assert_eq!(run.result().await.unwrap(), "hello, ada");
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attempts_are_retried_and_panics_are_failures() {
    let engine = Engine::open(Config::memory()).await.unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    engine.register(FLAKY, move |ctx: Ctx, fail_times: u32| {
        let seen = Arc::clone(&seen);
        async move {
            let n = ctx
                .step("flaky", move |step| {
                    let seen = Arc::clone(&seen);
                    async move {
                        seen.fetch_add(1, Ordering::SeqCst);
                        if step.attempt() <= fail_times {
                            if step.attempt() == 1 {
                                panic!("boom on the first attempt");
                            }
                            return Err(StepError::retryable("not yet"));
                        }
                        Ok(step.attempt())
                    }
                })
                .retry(RetryPolicy::default().attempts(4).backoff(
                    Duration::from_millis(1),
                    1.0,
                    Duration::from_millis(1),
                ))
                .await?;
            Ok::<_, Failure>(n)
        }
    });
    assert_eq!(engine.execute(FLAKY, "f-1", &2).await.unwrap(), 3);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    match engine.execute(FLAKY, "f-2", &10).await {
        Err(Error::Failed {
            status, failure, ..
        }) => {
            assert_eq!(status, "failed");
            assert_eq!(failure.message, "not yet");
        }
        other => panic!("expected the step to fail after 4 attempts, found {other:?}"),
    }
    engine.register(PANICS, |_ctx: Ctx, ()| async move {
        if true {
            panic!("workflow bug");
        }
        Ok::<_, Failure>(())
    });
    match engine.execute(PANICS, "p-1", &()).await {
        Err(Error::Failed { failure, .. }) => {
            assert!(failure.message.contains("workflow bug"), "{failure}")
        }
        other => panic!("expected a failed run, found {other:?}"),
    }
    // The engine goes on.
    engine.register(ADD, |ctx: Ctx, (a, b): (u64, u64)| async move {
        Ok::<_, Failure>(ctx.step("sum", move |_| async move { Ok(a + b) }).await?)
    });
    assert_eq!(
        engine.execute(ADD, "after-panic", &(2, 3)).await.unwrap(),
        5
    );
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_sleep_completes_when_the_virtual_clock_moves() {
    let clock = VirtualClock::new(1_000_000);
    let engine = Engine::open(Config::memory().clock(Clock::Virtual(clock.clone())))
        .await
        .unwrap();
    engine.register(SLEEPER, |ctx: Ctx, secs: u64| async move {
        ctx.sleep("nap", Duration::from_secs(secs)).await?;
        Ok::<_, Failure>(secs)
    });
    let run = engine.start(SLEEPER, "s-1", &86_400).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(matches!(
        engine.describe("s-1").await.unwrap().status,
        RunStatus::Running
    ));
    clock.advance(86_400 * 1000);
    assert_eq!(run.result().await.unwrap(), 86_400);
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_survive_close_and_a_clean_close_replays_nothing() {
    let dir = temp_dir("close");
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_waiter(&engine);
    register_add(&engine);
    engine
        .start(WAITER, "w-1", &"hi".to_string())
        .await
        .unwrap();
    assert_eq!(engine.execute(ADD, "a-1", &(5, 1)).await.unwrap(), 11);
    engine.close().await.unwrap();
    drop(engine);

    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    let m = engine.metrics().await;
    assert_eq!(
        m.recovered_records, 0,
        "a clean close leaves nothing to replay"
    );
    register_waiter(&engine);
    register_add(&engine);
    engine
        .signal("w-1", NAME, &"bob".to_string())
        .await
        .unwrap();
    assert_eq!(engine.result(WAITER, "w-1").await.unwrap(), "hi, bob");
    assert_eq!(engine.result(ADD, "a-1").await.unwrap(), 11);
    engine.close().await.unwrap();
    drop(engine);
    match Engine::open(Config::file(&dir).shards(3)).await {
        Err(Error::Config(msg)) => assert!(msg.contains("shards"), "{msg}"),
        other => panic!("another shard count must be refused, found {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_survive_a_crash_and_steps_do_not_run_twice() {
    let dir = temp_dir("crash");
    let calls = Arc::new(AtomicU32::new(0));
    let register = |engine: &Engine, calls: Arc<AtomicU32>| {
        engine.register(WAITER, move |ctx: Ctx, greeting: String| {
            let calls = Arc::clone(&calls);
            async move {
                let n = ctx
                    .step("count", move |_| {
                        let calls = Arc::clone(&calls);
                        async move { Ok(calls.fetch_add(1, Ordering::SeqCst) + 1) }
                    })
                    .await?;
                let who = ctx.wait_for(&NAME).await?.unwrap_or_default();
                Ok::<_, Failure>(format!("{greeting}, {who} ({n})"))
            }
        });
    };
    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    register(&engine, Arc::clone(&calls));
    engine
        .start(WAITER, "w-1", &"hi".to_string())
        .await
        .unwrap();
    // Wait until the step's result is recorded (and so durable once the
    // next flush runs).
    for _ in 0..200 {
        if calls.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(engine); // a crash: no close

    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    assert!(engine.metrics().await.recovered_records > 0);
    register(&engine, Arc::clone(&calls));
    engine
        .signal("w-1", NAME, &"eve".to_string())
        .await
        .unwrap();
    assert_eq!(engine.result(WAITER, "w-1").await.unwrap(), "hi, eve (1)");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the step's durable result was replayed"
    );
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

const BLOCKER: Workflow<(), ()> = Workflow::new("blocker");

/// `call` again while the shard's queue is full (for at most 10 s).
async fn until_not_busy<T, F: std::future::Future<Output = fusee::Result<T>>>(
    call: impl Fn() -> F,
) -> fusee::Result<T> {
    for _ in 0..2000 {
        match call().await {
            Err(Error::Busy { .. }) => tokio::time::sleep(Duration::from_millis(5)).await,
            other => return other,
        }
    }
    call().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_queue_is_busy_and_records_nothing() {
    let engine = Engine::open(Config::memory().shards(1).queue_capacity(2))
        .await
        .unwrap();
    // Workflow code that blocks its shard's thread (what workflow code must
    // never do) keeps the queue from draining for a while.
    engine.register(BLOCKER, |_ctx: Ctx, ()| async move {
        std::thread::sleep(Duration::from_millis(600));
        Ok::<_, Failure>(())
    });
    register_add(&engine);
    // Only the start: an `execute` would also ask for the result while the
    // queue is full, and rightly be told Busy.
    let blocked = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.start(BLOCKER, "b", &()).await.map(|_| ()) })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Each queued start, then its result: the result's request may find the
    // queue still full (Busy, which asks the caller to come back).
    let queued: Vec<_> = (0..2)
        .map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let id = format!("q-{i}");
                engine.start(ADD, &id, &(1, 1)).await?;
                until_not_busy(|| engine.result(ADD, &id)).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    match engine.start(ADD, "one-too-many", &(1, 1)).await {
        Err(Error::Busy { shard, capacity }) => assert_eq!((shard, capacity), (0, 2)),
        other => panic!("expected Busy, found {other:?}"),
    }
    blocked.await.unwrap().unwrap();
    until_not_busy(|| engine.result(BLOCKER, "b"))
        .await
        .unwrap();
    for q in queued {
        assert_eq!(q.await.unwrap().unwrap(), 3);
    }
    assert!(
        matches!(
            engine.describe("one-too-many").await,
            Err(Error::NotFound { .. })
        ),
        "a refused start records nothing"
    );
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_are_taken_under_load_and_keep_every_run() {
    let dir = temp_dir("load");
    // A checkpoint every few KiB of log: many are taken while runs go on.
    let config = || Config::file(&dir).shards(1).checkpoint_bytes(4096);
    let engine = Engine::open(config()).await.unwrap();
    register_add(&engine);
    let runs: Vec<_> = (0..200u64)
        .map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move { engine.execute(ADD, &format!("l-{i}"), &(i, 1)).await })
        })
        .collect();
    for (i, r) in runs.into_iter().enumerate() {
        assert_eq!(r.await.unwrap().unwrap(), i as u64 * 2 + 1);
    }
    let m = engine.metrics().await;
    assert!(m.checkpoints >= 2, "checkpoints while runs went on: {m:?}");
    drop(engine); // a crash: the last checkpoint and the log after it
    let engine = Engine::open(config()).await.unwrap();
    register_add(&engine);
    for i in (0..200u64).step_by(17) {
        assert_eq!(
            engine.result(ADD, &format!("l-{i}")).await.unwrap(),
            i * 2 + 1
        );
    }
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A first open killed while it created its shards leaves some of them,
/// none holding anything: the next open creates the rest. A store whose
/// shards hold records is refused a larger count, as damage would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_first_open_is_completed_and_a_used_store_is_not() {
    let dir = temp_dir("interrupted");
    // Three of four shards made, then the process died (no close).
    let engine = Engine::open(Config::file(&dir).shards(3)).await.unwrap();
    drop(engine);
    let engine = Engine::open(Config::file(&dir).shards(4))
        .await
        .expect("the shards of an interrupted creation are all empty");
    register_add(&engine);
    // Some of these IDs live on the shard the restart created.
    assert!((0..8).any(|i| fusee_core::shard::shard_of(&format!("a-{i}"), 4) == 3));
    execute_adds(&engine, 8).await;
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);

    let dir = temp_dir("used");
    let engine = Engine::open(Config::file(&dir).shards(3)).await.unwrap();
    register_add(&engine);
    execute_adds(&engine, 8).await;
    drop(engine);
    match Engine::open(Config::file(&dir).shards(4)).await {
        Err(Error::Config(msg)) => assert!(msg.contains("shards"), "{msg}"),
        other => panic!("a used store must refuse another shard count, found {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A store closed cleanly is refused another shard count even when it
/// never recorded anything, as `Config::shards` says, on file and on a
/// memory store opened again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_closed_store_refuses_another_shard_count() {
    let refused = |got: fusee::Result<Engine>, asked: u32| match got {
        Err(Error::Config(msg)) => assert!(
            msg.contains("[0, 1, 2, 3]") && msg.contains(&format!("asks for {asked}")),
            "{msg}"
        ),
        other => panic!("an empty closed store must refuse {asked} shards, found {other:?}"),
    };
    let dir = temp_dir("empty-closed");
    assert!(
        Engine::open(Config::file(&dir).existing_only())
            .await
            .is_err(),
        "existing_only opens no new store"
    );
    assert!(!dir.join("FUSEE").exists(), "and made nothing");
    let engine = Engine::open(Config::file(&dir).shards(4)).await.unwrap();
    engine.close().await.unwrap();
    drop(engine);
    refused(Engine::open(Config::file(&dir).shards(8)).await, 8);
    refused(Engine::open(Config::file(&dir).shards(2)).await, 2);
    // Its own count still opens it.
    let engine = Engine::open(Config::file(&dir).shards(4)).await.unwrap();
    engine.close().await.unwrap();
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);

    let memory = fusee::storage::MemoryStorage::new();
    let engine = Engine::open_on(
        Config::memory().shards(4),
        AnyStorage::Memory(memory.clone()),
    )
    .await
    .unwrap();
    engine.close().await.unwrap();
    drop(engine);
    refused(
        Engine::open_on(
            Config::memory().shards(8),
            AnyStorage::Memory(memory.reopen()),
        )
        .await,
        8,
    );
    let engine = Engine::open_on(
        Config::memory().shards(4),
        AnyStorage::Memory(memory.reopen()),
    )
    .await
    .expect("its own count opens it");
    engine.close().await.unwrap();
}

/// A second registration of a name in one engine is refused, whatever its
/// types; the first stands. A new engine on the same store registers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_name_registers_once_per_engine() {
    const OTHER_ADD: Workflow<String, String> = Workflow::new("add");
    let dir = temp_dir("register-twice");
    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    register_add(&engine);
    match engine.try_register(
        OTHER_ADD,
        |_: Ctx, s: String| async move { Ok::<_, Failure>(s) },
    ) {
        Err(Error::AlreadyRegistered { wtype, version }) => {
            assert_eq!((wtype.as_str(), version), ("add", 0));
        }
        other => panic!("expected AlreadyRegistered, found {other:?}"),
    }
    let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| register_add(&engine)));
    let message = again.expect_err("register panics on a name registered before");
    let message = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("\"add\"") && message.contains("already registered"),
        "{message}"
    );
    // The first registration stands.
    assert_eq!(engine.execute(ADD, "first", &(2, 3)).await.unwrap(), 7);
    engine.close().await.unwrap();
    drop(engine);
    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    register_add(&engine);
    assert_eq!(
        engine.execute(ADD, "after-reopen", &(1, 1)).await.unwrap(),
        3
    );
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A start whose input does not decode as the registered workflow's input
/// type is refused before anything is recorded: the ID stays free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_whose_input_does_not_decode_records_nothing() {
    // A caller's constant that disagrees with the registered type.
    const WRONG_ADD: Workflow<String, u64> = Workflow::new("add");
    const FLOAT: Workflow<f64, f64> = Workflow::new("float");
    let engine = Engine::open(Config::memory().shards(1)).await.unwrap();
    register_add(&engine);
    engine.register(FLOAT, |_: Ctx, x: f64| async move { Ok::<_, Failure>(x) });
    let codec = |got: fusee::Result<()>| match got {
        Err(Error::Codec { what, detail, .. }) => {
            assert_eq!(what, "workflow input");
            assert!(detail.contains("registered input type"), "{detail}");
        }
        other => panic!("expected a codec error, found {other:?}"),
    };
    codec(
        engine
            .start(WRONG_ADD, "bad", &"x".to_string())
            .await
            .map(drop),
    );
    codec(
        engine
            .start_with(
                WRONG_ADD,
                "bad",
                &"x".to_string(),
                IdPolicy::ReuseAfterFinish,
            )
            .await
            .map(drop),
    );
    // Even the right type can encode what it cannot decode (NaN is null).
    codec(engine.start(FLOAT, "nan", &f64::NAN).await.map(drop));
    for id in ["bad", "nan"] {
        assert!(
            matches!(engine.describe(id).await, Err(Error::NotFound { .. })),
            "the refused start of {id:?} recorded nothing"
        );
    }
    // The IDs are free for a start that decodes.
    assert_eq!(engine.execute(ADD, "bad", &(1, 2)).await.unwrap(), 4);
    assert_eq!(engine.execute(FLOAT, "nan", &1.5).await.unwrap(), 1.5);
    engine.close().await.unwrap();
}

/// The flush latency an engine reports is the time until its records are
/// durable, on every backend: a workload's median flush took time.
async fn flushes_take_time(config: Config) {
    let engine = Engine::open(config.shards(1)).await.unwrap();
    register_add(&engine);
    execute_adds(&engine, 20).await;
    let m = engine.metrics().await;
    assert!(m.flushes >= 20, "{} flushes", m.flushes);
    assert!(
        m.flush_micros.percentile(50.0) > 0 && m.flush_micros.percentile(99.0) > 0,
        "p50 {} us, p99 {} us over {} flushes",
        m.flush_micros.percentile(50.0),
        m.flush_micros.percentile(99.0),
        m.flush_micros.count()
    );
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_flush_latency_is_the_time_until_durable() {
    let dir = temp_dir("flush-time-file");
    flushes_take_time(Config::file(&dir)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// redb makes a batch durable in `begin_flush` itself (its ticket has no
/// I/O left): that is what is timed.
#[cfg(feature = "redb")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_flush_latency_is_the_time_until_durable() {
    let dir = temp_dir("flush-time-redb");
    flushes_take_time(Config::redb(&dir)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `add` as `a-0` to `a-{n-1}` to the end.
async fn execute_adds(engine: &Engine, n: u64) {
    for i in 0..n {
        engine
            .execute(ADD, &format!("a-{i}"), &(i, 1))
            .await
            .unwrap();
    }
}

const TWO_NAMES: Workflow<(), String> = Workflow::new("two-names");

fn register_two_names(engine: &Engine) {
    engine.register(TWO_NAMES, |ctx: Ctx, ()| async move {
        let mut names = Vec::new();
        for _ in 0..2 {
            let who = ctx.wait_for(&NAME).await?;
            names.push(who.ok_or_else(|| Failure::new("no name"))?);
        }
        Ok::<_, Failure>(names.join("+"))
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_signal_sent_again_is_recorded_once_across_a_reopen() {
    let dir = temp_dir("signal-once");
    let engine = Engine::open(Config::file(&dir)).await.unwrap();
    register_two_names(&engine);
    engine.start(TWO_NAMES, "two", &()).await.unwrap();
    engine
        .signal_once("two", NAME, "k-ada", &"ada".to_string())
        .await
        .unwrap();
    // A retry after a lost reply: acknowledged, not delivered again.
    engine
        .signal_once("two", NAME, "k-ada", &"ada".to_string())
        .await
        .unwrap();
    assert!(matches!(
        engine.signal_once("two", NAME, "", &"x".to_string()).await,
        Err(Error::BadSignalKey { .. })
    ));
    engine.close().await.unwrap();
    // The keys a run accepted are in its journal: a reopened engine
    // (the run parked or replayed) still knows them.
    let engine = Engine::open(Config::file(&dir)).await.unwrap();
    register_two_names(&engine);
    engine
        .signal_once("two", NAME, "k-ada", &"ada".to_string())
        .await
        .unwrap();
    engine
        .signal_once("two", NAME, "k-bob", &"bob".to_string())
        .await
        .unwrap();
    let got: String = engine.result(TWO_NAMES, "two").await.unwrap();
    assert_eq!(got, "ada+bob");
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 32.3: a step's `Began` rides in the flush of the record before it
/// (in a chain, the previous step's result), so a chain of steps takes one
/// flush a step, as it did before steps recorded their start (an attempt
/// starting only once its `Began` were flushed on its own would take two).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_steps_takes_one_flush_a_step() {
    const CHAIN: Workflow<u32, u32> = Workflow::new("chain");
    let engine = Engine::open(Config::memory().shards(1)).await.unwrap();
    engine.register(CHAIN, |ctx: Ctx, n: u32| async move {
        let mut total = 0;
        for i in 0..n {
            total += ctx
                .step(&format!("s{i}"), move |_| async move { Ok(i) })
                .await?;
        }
        Ok::<_, Failure>(total)
    });
    let n = 50u32;
    let before = engine.metrics().await;
    assert_eq!(engine.execute(CHAIN, "c-1", &n).await.unwrap(), 49 * 50 / 2);
    let after = engine.metrics().await;
    let (flushes, records) = (
        after.flushes - before.flushes,
        after.flushed_records - before.flushed_records,
    );
    // Start, a Began and a Step a step, Done.
    assert_eq!(records, 2 * u64::from(n) + 2);
    assert!(
        flushes <= u64::from(n) + 2,
        "{flushes} flushes for a chain of {n} steps"
    );
    engine.close().await.unwrap();
}

const BOOM: fusee::Workflow<(), u32> = fusee::Workflow::new("boom");

/// A step's panic fails its attempt with kind `panic`, the message naming
/// the step (issue 32 item 6: names in every message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_steps_failure_names_the_step() {
    let engine = Engine::open(fusee::Config::memory()).await.unwrap();
    engine.register(BOOM, |ctx: fusee::Ctx, ()| async move {
        let v = ctx
            .step("detonate", |_| async {
                if std::hint::black_box(true) {
                    panic!("the fuse was short");
                }
                Ok(1u32)
            })
            .retry(fusee::RetryPolicy::default().attempts(1))
            .await?;
        Ok::<_, fusee::Failure>(v)
    });
    let err = engine.execute(BOOM, "b-1", &()).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("step `detonate` panicked"), "{text}");
    assert!(text.contains("the fuse was short"), "{text}");
    engine.close().await.unwrap();
}

const WORDS: Workflow<(), String> = Workflow::new("words");
/// The same type read as a number: its result does not decode.
const WORDS_AS_NUMBER: Workflow<(), u64> = Workflow::new("words");

/// A payload that does not match its type names the workflow it was for,
/// in the error's field and its text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codec_error_names_its_workflow() {
    let engine = Engine::open(Config::memory()).await.unwrap();
    engine.register(WORDS, |_ctx: Ctx, ()| async move {
        Ok::<_, Failure>("hello".to_string())
    });
    engine.start(WORDS, "w-1", &()).await.unwrap();
    let err = engine.result(WORDS_AS_NUMBER, "w-1").await.unwrap_err();
    match &err {
        fusee::Error::Codec { what, id, .. } => {
            assert_eq!((*what, id.as_deref()), ("workflow result", Some("w-1")));
        }
        other => panic!("not a codec error: {other:?}"),
    }
    assert!(err.to_string().contains("for workflow \"w-1\""), "{err}");
    engine.close().await.unwrap();
}
