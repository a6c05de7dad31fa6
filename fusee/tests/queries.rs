//! Queries and descriptions of finished runs (issue 32 item 4, issue 38):
//! while a finished run's journal is kept (`Config::history_retention`),
//! its queries are answered by replaying the journal with the registered
//! code, running no step and recording nothing; once only its `Start` and
//! `Done` are left, a query is `Error::HistoryGone` saying since when.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fusee::testing::TestEngine;
use fusee::{Config, Ctx, Engine, Error, Failure, Query, RunStatus, Signal, Workflow};

const COUNTER: Workflow<u32, u32> = Workflow::new("counter");
const GATE: Workflow<(), u32> = Workflow::new("gate");
const DONE: Query<(), u32> = Query::new("done");
const OPEN: Signal<u32> = Signal::new("open");
const HOUR: Duration = Duration::from_secs(3600);

/// `COUNTER` runs `n` steps, counting them in a query; `runs` counts the
/// step functions that really ran.
fn register(engine: &Engine, runs: &Arc<AtomicU32>) {
    let runs = Arc::clone(runs);
    engine.register(COUNTER, move |ctx: Ctx, n: u32| {
        let runs = Arc::clone(&runs);
        async move {
            let done = std::rc::Rc::new(std::cell::Cell::new(0u32));
            let seen = std::rc::Rc::clone(&done);
            ctx.on_query(DONE, move |()| Ok(seen.get()));
            for i in 0..n {
                let runs = Arc::clone(&runs);
                ctx.step(&format!("step-{i}"), move |_| {
                    let runs = Arc::clone(&runs);
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    }
                })
                .await?;
                done.set(done.get() + 1);
            }
            Ok::<_, Failure>(done.get())
        }
    });
    engine.register(GATE, |ctx: Ctx, ()| async move {
        Ok::<_, Failure>(ctx.wait_for(&OPEN).await?.unwrap_or(0))
    });
}

async fn open(runs: &Arc<AtomicU32>) -> TestEngine {
    let runs = Arc::clone(runs);
    TestEngine::builder()
        .config(Config::memory().shards(1).history_retention(HOUR))
        .open(move |engine| register(engine, &runs))
        .await
        .unwrap()
}

/// `id`'s description once `cond` holds of it (in real time: dropping a
/// history happens on the shard's own schedule).
async fn described(
    engine: &Engine,
    id: &str,
    what: &str,
    cond: impl Fn(&fusee::Description) -> bool,
) -> fusee::Description {
    for _ in 0..500 {
        let d = engine.describe(id).await.unwrap();
        if cond(&d) {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id}: {what}: {:?}", engine.describe(id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_runs_queries_replay_its_journal_until_its_history_is_gone() {
    let runs = Arc::new(AtomicU32::new(0));
    let mut te = open(&runs).await;
    assert_eq!(te.execute(COUNTER, "c-1", &3).await.unwrap(), 3);
    assert_eq!(runs.load(Ordering::SeqCst), 3);

    // Just finished, still in memory.
    assert_eq!(te.engine().query("c-1", DONE, &()).await.unwrap(), 3);

    // Parked (idle past `park_after`) with its whole journal.
    te.advance(Duration::from_secs(60)).await.unwrap();
    let d = described(te.engine(), "c-1", "parked whole", |d| {
        d.parked && d.journal_records > 2
    })
    .await;
    assert_eq!(d.status, RunStatus::Finished(fusee::Status::Ok));
    let finished_ms = d.finished_ms.expect("a finished run says when");
    assert_eq!(te.engine().query("c-1", DONE, &()).await.unwrap(), 3);
    match te
        .engine()
        .query("c-1", Query::<(), u32>::new("nope"), &())
        .await
    {
        Err(Error::UnknownQuery { registered, .. }) => assert_eq!(registered, ["done"]),
        other => panic!("expected UnknownQuery naming the handlers, got {other:?}"),
    }
    let records = d.journal_records;

    // And after a restart, from the store.
    te.crash().await.unwrap();
    assert_eq!(te.engine().query("c-1", DONE, &()).await.unwrap(), 3);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "answering ran no step again"
    );
    let d = te.engine().describe("c-1").await.unwrap();
    assert_eq!(d.journal_records, records, "answering recorded nothing");

    // Past the history time only the summary is left: a clear error.
    te.advance(2 * HOUR).await.unwrap();
    described(te.engine(), "c-1", "summary", |d| d.journal_records == 2).await;
    match te.engine().query("c-1", DONE, &()).await {
        Err(e @ Error::HistoryGone { .. }) => {
            let text = e.to_string();
            let Error::HistoryGone {
                id,
                finished_ms: at,
                gone_ms,
                ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!(id, "c-1");
            assert_eq!(at, finished_ms);
            assert_eq!(gone_ms, finished_ms + HOUR.as_millis() as u64);
            assert!(
                text.contains("history is gone") && text.contains(&gone_ms.to_string()),
                "{text}"
            );
        }
        other => panic!("expected HistoryGone, got {other:?}"),
    }
    assert_eq!(
        te.result(COUNTER, "c-1").await.unwrap(),
        3,
        "its result stays"
    );
    te.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_is_described_as_waiting_for_nothing() {
    let runs = Arc::new(AtomicU32::new(0));
    let te = open(&runs).await;
    te.engine().start(GATE, "g-1", &()).await.unwrap();
    te.settle().await.unwrap();
    let d = te.engine().describe("g-1").await.unwrap();
    assert_eq!(d.waits.len(), 1, "waits for its signal: {d:?}");

    // Terminated during its wait (its code never answers it): it ended,
    // and waits for nothing.
    te.engine()
        .terminate("g-1", "no longer needed")
        .await
        .unwrap();
    assert!(te.result(GATE, "g-1").await.is_err());
    let d = te.engine().describe("g-1").await.unwrap();
    assert!(matches!(d.status, RunStatus::Finished(_)), "{d:?}");
    assert!(d.waits.is_empty() && !d.paused, "{d:?}");
    te.advance(Duration::from_secs(60)).await.unwrap();
    let d = described(te.engine(), "g-1", "parked", |d| d.parked).await;
    assert!(d.waits.is_empty(), "parked too: {d:?}");
    te.close().await.unwrap();
}

/// A journal over `history_max_bytes` is kept as its summary from the
/// start: its history is gone since the run finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_over_the_history_size_answers_history_gone_since_its_end() {
    let runs = Arc::new(AtomicU32::new(0));
    let registered = Arc::clone(&runs);
    let te = TestEngine::builder()
        .config(
            Config::memory()
                .shards(1)
                .history_retention(HOUR)
                .history_max_bytes(50),
        )
        .open(move |engine| register(engine, &registered))
        .await
        .unwrap();
    assert_eq!(te.execute(COUNTER, "big", &3).await.unwrap(), 3);
    te.advance(Duration::from_secs(60)).await.unwrap();
    let d = described(te.engine(), "big", "parked", |d| d.parked).await;
    assert_eq!(d.journal_records, 2, "{d:?}");
    match te.engine().query("big", DONE, &()).await {
        Err(Error::HistoryGone {
            finished_ms,
            gone_ms,
            ..
        }) => {
            assert_eq!(Some(finished_ms), d.finished_ms);
            assert_eq!(gone_ms, finished_ms, "gone since its end");
        }
        other => panic!("expected HistoryGone, got {other:?}"),
    }
    te.close().await.unwrap();
}

const ASKER: Workflow<(), u32> = Workflow::new("asker");
const ASK: Query<u32, u32> = Query::new("ask");

/// A query whose handler fails is `Error::QueryFailed` naming the query,
/// not `Error::Failed`, which says the run ended: the run carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_query_is_its_own_error_and_the_run_carries_on() {
    let engine = Engine::open(Config::memory()).await.unwrap();
    engine.register(ASKER, |ctx: Ctx, ()| async move {
        ctx.on_query(ASK, |n: u32| {
            if n == 0 {
                Err(Failure::with_kind("zero", "ask a number above zero"))
            } else {
                Ok(n * 2)
            }
        });
        Ok::<_, Failure>(ctx.wait_for(&OPEN).await?.unwrap_or(0))
    });
    engine.start(ASKER, "a-1", &()).await.unwrap();
    let mut answered = None;
    for _ in 0..500 {
        match engine.query("a-1", ASK, &21).await {
            Ok(n) => {
                answered = Some(n);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    assert_eq!(answered, Some(42));
    match engine.query("a-1", ASK, &0).await {
        Err(Error::QueryFailed { id, name, failure }) => {
            assert_eq!((id.as_str(), name.as_str()), ("a-1", "ask"));
            assert!(failure.to_string().contains("above zero"), "{failure}");
        }
        other => panic!("expected QueryFailed, found {other:?}"),
    }
    assert_eq!(
        engine.describe("a-1").await.unwrap().status,
        RunStatus::Running
    );
    engine.signal("a-1", OPEN, &7).await.unwrap();
    assert_eq!(engine.result(ASKER, "a-1").await.unwrap(), 7);
    engine.close().await.unwrap();
}
