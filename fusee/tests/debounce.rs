//! Debounce (issue 33, item 3), on the test kit's virtual clock: a burst
//! of calls for a key becomes one run with the last input, once the key
//! was quiet for its window; `max_wait` caps how long a busy key waits;
//! keys and workflow types are apart; a crash between the calls and the
//! fire loses nothing and starts nothing twice; bad input records nothing.

use std::time::Duration;

use fusee::testing::TestEngine;
use fusee::{Config, Ctx, Debounce, Engine, Error, Failure, ListFilter, Workflow};

const START_MS: u64 = 1_700_000_040_000;
const INDEX: Workflow<String, String> = Workflow::new("index");
const MAIL: Workflow<String, String> = Workflow::new("mail");

async fn kit() -> TestEngine {
    TestEngine::builder()
        .start_ms(START_MS)
        .config(Config::memory().shards(2))
        .open(|engine: &Engine| {
            for w in [INDEX, MAIL] {
                engine.register(
                    w,
                    |_: Ctx, input: String| async move { Ok::<_, Failure>(input) },
                );
            }
            engine.register_flow_control();
        })
        .await
        .expect("the test engine opens")
}

/// Every run of `workflow`, as (ID, start time after the kit's start).
async fn runs(engine: &Engine, workflow: &str) -> Vec<(String, u64)> {
    let page = engine
        .list(
            ListFilter::new()
                .workflow(workflow)
                .limit(ListFilter::LIMIT_MAX),
        )
        .await
        .expect("list");
    let mut out: Vec<(String, u64)> = page
        .runs
        .into_iter()
        .map(|r| (r.id, r.started_ms - START_MS))
        .collect();
    out.sort();
    out
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_one_run_with_the_last_input_once_the_key_is_quiet() {
    let kit = kit().await;
    let engine = kit.engine();
    let quiet = Debounce::new(10 * SECOND);
    let mut ids = Vec::new();
    // Calls 4 s apart: each moves the fire time on.
    for i in 0..4 {
        ids.push(
            engine
                .debounce(INDEX, "doc-1", &format!("edit {i}"), quiet)
                .await
                .expect("debounce"),
        );
        kit.advance(4 * SECOND).await.expect("advance");
    }
    assert!(ids.iter().all(|id| id == "index/doc-1/1"), "{ids:?}");
    assert_eq!(runs(engine, "index").await, Vec::<(String, u64)>::new());
    // 10 s after the last call (made at 12 s): one run, the last input.
    kit.advance(6 * SECOND).await.expect("advance");
    assert_eq!(
        runs(engine, "index").await,
        [("index/doc-1/1".to_string(), 22_000)]
    );
    assert_eq!(
        kit.result(INDEX, "index/doc-1/1").await.expect("result"),
        "edit 3"
    );
    // The next call opens the key's next window.
    let next = engine
        .debounce(INDEX, "doc-1", &"edit 4".to_string(), quiet)
        .await
        .expect("debounce");
    assert_eq!(next, "index/doc-1/2");
    kit.advance(10 * SECOND).await.expect("advance");
    assert_eq!(kit.result(INDEX, &next).await.expect("result"), "edit 4");
    kit.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_wait_fires_a_key_called_more_often_than_its_window() {
    let kit = kit().await;
    let engine = kit.engine();
    let capped = Debounce::new(10 * SECOND).max_wait(30 * SECOND);
    // A call every 5 s for a minute: never quiet for 10 s.
    for i in 0..12 {
        engine
            .debounce(INDEX, "busy", &format!("call {i}"), capped)
            .await
            .expect("debounce");
        kit.advance(5 * SECOND).await.expect("advance");
    }
    let started = runs(engine, "index").await;
    assert_eq!(
        started.first(),
        Some(&("index/busy/1".to_string(), 30_000)),
        "the first window fires 30 s after its first call: {started:?}"
    );
    // The fire at 30 s took the last input before it (the call at 25 s).
    assert_eq!(
        kit.result(INDEX, "index/busy/1").await.expect("result"),
        "call 5"
    );
    kit.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_types_are_debounced_apart() {
    let kit = kit().await;
    let engine = kit.engine();
    let quiet = Debounce::new(SECOND);
    for (w, key, input) in [
        (INDEX, "a", "index a"),
        (INDEX, "b", "index b"),
        (MAIL, "a", "mail a"),
    ] {
        engine
            .debounce(w, key, &input.to_string(), quiet)
            .await
            .expect("debounce");
    }
    kit.advance(2 * SECOND).await.expect("advance");
    for (w, id, want) in [
        (INDEX, "index/a/1", "index a"),
        (INDEX, "index/b/1", "index b"),
        (MAIL, "mail/a/1", "mail a"),
    ] {
        assert_eq!(kit.result(w, id).await.expect("result"), want);
    }
    kit.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_fire_loses_no_call_and_starts_once() {
    let mut kit = kit().await;
    let quiet = Debounce::new(10 * SECOND);
    for i in 0..3 {
        kit.engine()
            .debounce(INDEX, "doc", &format!("v{i}"), quiet)
            .await
            .expect("debounce");
        kit.advance(SECOND).await.expect("advance");
        kit.crash().await.expect("crash");
    }
    kit.advance(9 * SECOND).await.expect("advance");
    kit.crash().await.expect("crash");
    kit.advance(60 * SECOND).await.expect("advance");
    assert_eq!(
        runs(kit.engine(), "index").await,
        [("index/doc/1".to_string(), 12_000)]
    );
    assert_eq!(kit.result(INDEX, "index/doc/1").await.expect("r"), "v2");
    kit.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calls_are_named_errors_that_record_nothing() {
    const NUMBER: Workflow<u32, u32> = Workflow::new("index");
    let kit = kit().await;
    let engine = kit.engine();
    match engine
        .debounce(INDEX, "k", &"x".to_string(), Debounce::new(Duration::ZERO))
        .await
    {
        Err(Error::Config(why)) => assert!(why.contains("at least 1 ms"), "{why}"),
        other => panic!("expected a config error, found {other:?}"),
    }
    // The registered input type is a string.
    assert!(matches!(
        engine
            .debounce(NUMBER, "k", &7, Debounce::new(SECOND))
            .await,
        Err(Error::Codec { .. })
    ));
    const NONE: Workflow<(), ()> = Workflow::new("nowhere");
    assert!(matches!(
        engine.debounce(NONE, "k", &(), Debounce::new(SECOND)).await,
        Err(Error::UnknownWorkflow { .. })
    ));
    let page = engine
        .list(ListFilter::new().workflow("fusee.debounce"))
        .await
        .expect("list");
    assert!(page.runs.is_empty(), "{:?}", page.runs);
    kit.close().await.expect("close");
}
