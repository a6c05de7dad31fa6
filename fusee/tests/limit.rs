//! Step limits (issue 20), on the test kit's virtual clock: many runs
//! calling a limited step never have more than the limit's concurrency
//! running nor more than its rate starting in any window, waiting steps
//! survive a crash, every run ends; bad input is a named error.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use fusee::testing::{StepMock, TestEngine};
use fusee::{Ctx, Engine, Error, Failure, ListFilter, VirtualClock, Workflow};

const CALL: Workflow<u32, u32> = Workflow::new("call");
const RUNS: u32 = 30;
const CONCURRENCY: usize = 3;
const RATE: usize = 4;
const PER_MS: u64 = 60_000;
const TAKES_MS: u64 = 20_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limited_steps_respect_the_concurrency_and_the_rate_across_a_crash() {
    // When each call's function ran (after its mocked 20 s).
    let ends: Arc<Mutex<Vec<u64>>> = Arc::default();
    let clock: Arc<OnceLock<VirtualClock>> = Arc::default();
    let (seen, at) = (Arc::clone(&ends), Arc::clone(&clock));
    let mut kit = TestEngine::open(move |engine: &Engine| {
        let (seen, at) = (Arc::clone(&seen), Arc::clone(&at));
        engine.register(CALL, move |ctx: Ctx, n: u32| {
            let (seen, at) = (Arc::clone(&seen), Arc::clone(&at));
            async move {
                let out = ctx
                    .step("call-api", move |_| {
                        let (seen, at) = (Arc::clone(&seen), Arc::clone(&at));
                        async move {
                            let now = at.get().map_or(0, VirtualClock::now_ms);
                            seen.lock().expect("ends").push(now);
                            Ok(n * 2)
                        }
                    })
                    .limit("api")
                    .await?;
                Ok::<_, Failure>(out)
            }
        });
        engine.register_flow_control();
    })
    .await
    .expect("the test engine opens");
    let _ = clock.set(kit.clock().clone());
    kit.mock_step(
        "call-api",
        StepMock::real().delay(Duration::from_millis(TAKES_MS)),
    );
    kit.engine()
        .limit("api")
        .concurrency(CONCURRENCY as u32)
        .rate(RATE as u32, Duration::from_millis(PER_MS))
        .create()
        .await
        .expect("created");
    for n in 0..RUNS {
        kit.engine()
            .start(CALL, &format!("c{n}"), &n)
            .await
            .expect("started");
    }
    // 50 s in: three permits went at 0 s (the concurrency), one at 20 s
    // when they came back; the rate holds the rest until 60 s. The crash
    // finds 26 steps waiting, none mid-call (a call a crash cuts short
    // runs again later under its permit, which would blur the times
    // measured here).
    kit.advance(Duration::from_secs(50)).await.expect("advance");
    let about = kit
        .engine()
        .limits()
        .describe("api")
        .await
        .expect("describe");
    assert_eq!(
        (about.holders.len(), about.waiting, about.granted),
        (0, u64::from(RUNS) - 4, 4),
        "{about:?}"
    );
    kit.crash().await.expect("crash");
    for n in 0..RUNS {
        assert_eq!(
            kit.result(CALL, &format!("c{n}")).await.expect("result"),
            n * 2
        );
    }
    let mut ends = ends.lock().expect("ends").clone();
    ends.sort_unstable();
    assert_eq!(ends.len(), RUNS as usize, "each call ran once to its end");
    // Spans [end - 20 s, end]: never more than CONCURRENCY at once.
    let mut events: Vec<(u64, i32)> = ends
        .iter()
        .flat_map(|e| [(e - TAKES_MS, 1), (*e, -1)])
        .collect();
    events.sort_by_key(|&(t, d)| (t, d));
    let (mut now, mut most) = (0, 0);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    assert!(most as usize <= CONCURRENCY, "{most} calls at once");
    for w in ends.windows(RATE + 1) {
        assert!(
            w[RATE] - w[0] >= PER_MS,
            "{} calls began within {} ms",
            RATE + 1,
            w[RATE] - w[0]
        );
    }
    let about = kit
        .engine()
        .limits()
        .describe("api")
        .await
        .expect("describe");
    assert_eq!((about.holders.len(), about.waiting), (0, 0), "{about:?}");
    assert_eq!(about.granted, u64::from(RUNS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_named_error_and_records_nothing() {
    let kit = TestEngine::open(|engine: &Engine| engine.register_flow_control())
        .await
        .expect("the test engine opens");
    let engine = kit.engine();
    for r in [
        engine.limit("l").create().await,
        engine.limit("l").concurrency(0).create().await,
        engine
            .limit("l")
            .rate(0, Duration::from_secs(1))
            .create()
            .await,
        engine.limit("").concurrency(1).create().await,
    ] {
        assert!(matches!(r, Err(Error::InvalidLimit { .. })), "{r:?}");
    }
    let r = engine.limits().describe("none").await;
    assert!(matches!(r, Err(Error::UnknownLimit { .. })), "{r:?}");
    let page = engine.list(ListFilter::new()).await.expect("list");
    assert!(
        page.runs.is_empty(),
        "something was recorded: {:?}",
        page.runs
    );
}

/// Pause and resume (issue 29): a paused limit hands out no permit, also
/// after a crash; its steps wait and run once it is resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_limit_grants_nothing_until_resumed_across_a_crash() {
    let mut kit = TestEngine::open(|engine: &Engine| {
        engine.register(CALL, |ctx: Ctx, n: u32| async move {
            let out = ctx
                .step("call-api", move |_| async move { Ok(n * 2) })
                .limit("api")
                .await?;
            Ok::<_, Failure>(out)
        });
        engine.register_flow_control();
    })
    .await
    .expect("the test engine opens");
    let engine = kit.engine().clone();
    engine
        .limit("api")
        .concurrency(3)
        .create()
        .await
        .expect("created");
    engine
        .limits()
        .pause("api", "the API is down")
        .await
        .expect("pause");
    for n in 0..2 {
        engine
            .start(CALL, &format!("p{n}"), &n)
            .await
            .expect("started");
    }
    kit.advance(Duration::from_secs(10)).await.expect("advance");
    kit.crash().await.expect("crash");
    kit.advance(Duration::from_secs(10)).await.expect("advance");
    let engine = kit.engine().clone();
    let about = engine.limits().describe("api").await.expect("describe");
    assert_eq!(
        (
            about.paused,
            about.note.as_deref(),
            about.granted,
            about.waiting
        ),
        (true, Some("the API is down"), 0, 2),
        "{about:?}"
    );
    for n in 0..2 {
        let d = engine.describe(&format!("p{n}")).await.expect("describe");
        assert_eq!(d.status, fusee::RunStatus::Running, "p{n}");
    }
    engine.limits().resume("api").await.expect("resume");
    for n in 0..2 {
        assert_eq!(
            kit.result(CALL, &format!("p{n}")).await.expect("result"),
            n * 2
        );
    }
    let about = engine.limits().describe("api").await.expect("describe");
    assert_eq!((about.paused, about.granted, about.waiting), (false, 2, 0));
}
