//! Streams from a run to its clients (`Ctx::stream`, `Engine::subscribe`):
//! chunks in order from any cursor, subscribers before and after the
//! chunks, a restart in between, a crash at every record boundary, the
//! per-run limit, the stream's and the run's end, the streams' retention,
//! and bad input.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::testing::{TestEngine, TestError};
use fusee::{
    Config, Ctx, Engine, Error, Failure, IdPolicy, Signal, StepError, StreamChunk, StreamSender,
    Workflow,
};
use futures_util::StreamExt;

/// (chunks to send, wait for `GO` first, end the stream): the run opens
/// stream "tokens", a step sends `tok-0`.. and the run returns how many.
const CHAT: Workflow<(u64, bool, bool), u64> = Workflow::new("chat");
const GO: Signal<u64> = Signal::new("go");
/// Chunks to send: the run opens stream "tokens", a step sends `tok-0`..
/// (keeping its sender for the test), then the run waits for `GO` and
/// returns how many; the stream is not ended.
const TALK: Workflow<u64, u64> = Workflow::new("talk");
/// [`TALK`] with each chunk padded with spaces to 8 KiB.
const LONG: Workflow<u64, u64> = Workflow::new("long");
/// The size of [`LONG`]'s chunks.
const LONG_CHUNK: usize = 8 << 10;

/// A sender the test keeps, to send after the run.
type Kept = Arc<Mutex<Option<StreamSender>>>;

fn register(engine: &Engine, kept: &Kept) {
    let kept = Arc::clone(kept);
    engine.register(CHAT, move |ctx: Ctx, (n, wait, end): (u64, bool, bool)| {
        let kept = Arc::clone(&kept);
        async move {
            if wait {
                // The subscriber comes before the stream is opened.
                ctx.wait_for(&GO).await?;
            }
            let tx = ctx.stream("tokens");
            *kept.lock().unwrap() = Some(tx.clone());
            let sent = ctx
                .step("llm", move |_| {
                    let mut tx = tx.clone();
                    async move {
                        for i in 0..n {
                            tx.send(format!("tok-{i}"))
                                .await
                                .map_err(|e| StepError::fatal(e.to_string()).kind("stream"))?;
                        }
                        if end {
                            tx.end()
                                .await
                                .map_err(|e| StepError::fatal(e.to_string()))?;
                        }
                        Ok(n)
                    }
                })
                .await?;
            Ok::<_, Failure>(sent)
        }
    });
}

fn register_talk(engine: &Engine, kept: &Kept, wf: Workflow<u64, u64>, pad: usize) {
    let kept = Arc::clone(kept);
    engine.register(wf, move |ctx: Ctx, n: u64| {
        let kept = Arc::clone(&kept);
        async move {
            let tx = ctx.stream("tokens");
            let sent = ctx
                .step("llm", move |_| {
                    let (mut tx, kept) = (tx.clone(), Arc::clone(&kept));
                    async move {
                        for i in 0..n {
                            tx.send(format!("{:<pad$}", format!("tok-{i}")))
                                .await
                                .map_err(|e| StepError::fatal(e.to_string()))?;
                        }
                        *kept.lock().unwrap() = Some(tx);
                        Ok(n)
                    }
                })
                .await?;
            ctx.wait_for(&GO).await?;
            Ok::<_, Failure>(sent)
        }
    });
}

async fn kit_with(config: Option<Config>) -> (TestEngine, Kept) {
    let kept = Kept::default();
    let k = Arc::clone(&kept);
    let builder = match config {
        Some(c) => TestEngine::builder().config(c),
        None => TestEngine::builder(),
    };
    let kit = builder
        .open(move |engine: &Engine| {
            register(engine, &k);
            register_talk(engine, &k, TALK, 0);
            register_talk(engine, &k, LONG, LONG_CHUNK);
        })
        .await
        .expect("open");
    (kit, kept)
}

/// Every item of a subscription, to its end, within 10 s.
async fn collect(engine: &Engine, id: &str, from: u64) -> Vec<Result<StreamChunk, Error>> {
    let sub = engine.subscribe(id, "tokens", from);
    tokio::time::timeout(Duration::from_secs(10), sub.collect::<Vec<_>>())
        .await
        .expect("the subscription ends")
}

fn texts(items: &[Result<StreamChunk, Error>]) -> Vec<(u64, String)> {
    items
        .iter()
        .map(|c| {
            let c = c.as_ref().expect("a chunk");
            (c.index, String::from_utf8(c.payload.clone()).unwrap())
        })
        .collect()
}

fn toks(range: std::ops::Range<u64>) -> Vec<(u64, String)> {
    range.map(|i| (i, format!("tok-{i}"))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_come_in_order_from_any_cursor_and_the_streams_end_ends_them() {
    let (kit, _) = kit_with(None).await;
    assert_eq!(
        kit.execute(CHAT, "c", &(10, false, true)).await.unwrap(),
        10
    );
    let e = kit.engine();
    assert_eq!(texts(&collect(e, "c", 0).await), toks(0..10));
    assert_eq!(texts(&collect(e, "c", 3).await), toks(3..10));
    assert_eq!(texts(&collect(e, "c", 9).await), toks(9..10));
    // At the end: nothing, and the end.
    assert!(collect(e, "c", 10).await.is_empty());
    // Past the end: a clear error, and nothing else.
    let past = collect(e, "c", 11).await;
    assert!(
        matches!(
            past.as_slice(),
            [Err(Error::StreamCursor {
                from: 11,
                len: 10,
                ..
            })]
        ),
        "{past:?}"
    );
    kit.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_before_the_stream_opens_gets_every_chunk_and_the_runs_end_ends_it() {
    let (kit, _) = kit_with(None).await;
    let e = kit.engine().clone();
    // The stream is never ended: the run's end ends the subscription.
    e.start(CHAT, "early", &(25, true, false)).await.unwrap();
    let early = tokio::spawn({
        let e = e.clone();
        async move { collect(&e, "early", 0).await }
    });
    // The subscriber reads (and waits) before the signal opens the stream.
    tokio::time::sleep(Duration::from_millis(30)).await;
    e.signal("early", GO, &1).await.unwrap();
    assert_eq!(kit.result(CHAT, "early").await.unwrap(), 25);
    assert_eq!(texts(&early.await.unwrap()), toks(0..25));
    kit.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_between_two_subscriptions_resumes_from_the_cursor() {
    let (mut kit, _) = kit_with(None).await;
    kit.engine()
        .start(CHAT, "r", &(8, false, true))
        .await
        .unwrap();
    kit.result(CHAT, "r").await.unwrap();
    // The client reads the first three, then the engine restarts.
    let first: Vec<_> = kit
        .engine()
        .subscribe("r", "tokens", 0)
        .take(3)
        .collect()
        .await;
    assert_eq!(texts(&first), toks(0..3));
    let cursor = first.last().unwrap().as_ref().unwrap().index + 1;
    kit.crash().await.unwrap();
    assert_eq!(texts(&collect(kit.engine(), "r", cursor).await), toks(3..8));
    kit.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_cut_by_a_restart_mid_stream_resumes_on_the_new_engine() {
    let (mut kit, _) = kit_with(None).await;
    // 2,000 chunks: a restart lands while the step sends them.
    kit.engine()
        .start(CHAT, "mid", &(2000, false, true))
        .await
        .unwrap();
    let mut sub = kit.engine().subscribe("mid", "tokens", 0);
    let mut seen = Vec::new();
    while seen.len() < 5 {
        seen.push(sub.next().await.unwrap().unwrap());
    }
    kit.crash().await.unwrap();
    // The old engine's subscription ends with an error (or its last
    // durable chunks); the client resumes after what it saw.
    while let Some(Ok(c)) = sub.next().await {
        seen.push(c);
    }
    let cursor = seen.last().unwrap().index + 1;
    let rest = tokio::time::timeout(Duration::from_secs(30), async {
        let res = kit.result(CHAT, "mid");
        let sub = kit
            .engine()
            .subscribe("mid", "tokens", cursor)
            .collect::<Vec<_>>();
        let (r, items) = tokio::join!(res, sub);
        r.unwrap();
        items
    })
    .await
    .expect("the run and the subscription end");
    seen.extend(rest.into_iter().map(Result::unwrap));
    let got: Vec<_> = seen
        .iter()
        .map(|c| (c.index, String::from_utf8(c.payload.clone()).unwrap()))
        .collect();
    assert_eq!(got, toks(0..2000));
    kit.close().await.unwrap();
}

/// Twice: with the chunks in the runs' frames, and set apart in frames of
/// their own (`Config::stream_apart_bytes` 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_every_record_boundary_keeps_every_chunk_once_in_order() {
    for config in [None, Some(Config::memory().stream_apart_bytes(0))] {
        crash_everywhere_keeps_every_chunk(config).await;
    }
}

async fn crash_everywhere_keeps_every_chunk(config: Option<Config>) {
    let (kit, _) = kit_with(config).await;
    let report = kit
        .crash_everywhere_with(
            async |kit: &TestEngine| {
                kit.engine()
                    .start_with(CHAT, "x", &(4, false, true), IdPolicy::Attach)
                    .await?;
                let n = kit.result(CHAT, "x").await?;
                let items = collect(kit.engine(), "x", 0).await;
                let got = texts(&items);
                // Resumed from the middle: the same chunks after it.
                let tail = texts(&collect(kit.engine(), "x", 2).await);
                Ok::<_, TestError>((n, got, tail))
            },
            |point| {
                assert_eq!(
                    point.outcome, point.uncrashed,
                    "crash after {:?} of {} records",
                    point.crashed_after, point.records
                );
                assert_eq!(point.uncrashed.1, toks(0..4));
                assert_eq!(point.uncrashed.2, toks(2..4));
            },
        )
        .await
        .unwrap();
    // Start, stream's opening, Began, 4 chunks, end, Step, Done at least.
    assert!(report.records >= 10, "{report:?}");
    kit.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_chunk_limit_is_refused_with_a_clear_error() {
    let (kit, _) = kit_with(Some(Config::memory().max_stream_chunks(3))).await;
    kit.engine()
        .start(CHAT, "lim", &(5, false, true))
        .await
        .unwrap();
    let out = kit.result(CHAT, "lim").await;
    match out {
        Err(TestError::Engine(Error::Failed { failure, .. })) => {
            assert!(
                failure.message.contains("has sent 3 stream chunks"),
                "{failure:?}"
            );
        }
        other => panic!("expected the limit's failure, got {other:?}"),
    }
    // Three were kept; the run's end ends the subscription.
    assert_eq!(texts(&collect(kit.engine(), "lim", 0).await), toks(0..3));
    kit.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors() {
    let (kit, kept) = kit_with(None).await;
    let e = kit.engine().clone();
    let none = collect(&e, "nobody", 0).await;
    assert!(
        matches!(none.as_slice(), [Err(Error::NotFound { .. })]),
        "{none:?}"
    );
    assert_eq!(kit.execute(CHAT, "b", &(2, false, true)).await.unwrap(), 2);
    let other: Vec<_> = e.subscribe("b", "other", 0).collect().await;
    assert!(
        matches!(other.as_slice(), [Err(Error::UnknownStream { .. })]),
        "{other:?}"
    );
    // A send after the stream's end, and after the run's.
    let mut tx = kept.lock().unwrap().take().unwrap();
    let late = tx.send("late").await;
    assert!(matches!(late, Err(Error::StreamClosed { .. })), "{late:?}");
    // Ending again is no error... for a run still going; this one ended.
    let again = tx.end().await;
    assert!(
        matches!(again, Err(Error::StreamClosed { .. })),
        "{again:?}"
    );
    assert_eq!(texts(&collect(&e, "b", 0).await), toks(0..2));
    kit.close().await.unwrap();
}

/// A retried attempt sends again from index 0: the first recording of
/// each index stands and the new ones go on after it (the module docs'
/// rule).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_step_sends_on_after_what_its_first_attempt_sent() {
    const RETRY: Workflow<(), u32> = Workflow::new("retry");
    let kit = TestEngine::open(|engine: &Engine| {
        engine.register(RETRY, |ctx: Ctx, ()| async move {
            let tx = ctx.stream("tokens");
            let attempt = ctx
                .step("llm", move |step| {
                    let mut tx = tx.clone();
                    async move {
                        let attempt = step.attempt();
                        let n = if attempt == 1 { 2 } else { 4 };
                        for i in 0..n {
                            tx.send(format!("a{attempt}-{i}"))
                                .await
                                .map_err(|e| StepError::fatal(e.to_string()))?;
                        }
                        if attempt == 1 {
                            return Err(StepError::retryable("the model hung up"));
                        }
                        Ok(attempt)
                    }
                })
                .await?;
            Ok::<_, Failure>(attempt)
        });
    })
    .await
    .unwrap();
    kit.engine().start(RETRY, "t", &()).await.unwrap();
    assert_eq!(kit.result(RETRY, "t").await.unwrap(), 2);
    let got: Vec<_> = texts(&collect(kit.engine(), "t", 0).await)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(got, ["a1-0", "a1-1", "a2-2", "a2-3"]);
    kit.close().await.unwrap();
}

/// A finished run's history goes (here at once: its journal is over
/// `history_max_bytes`) but its streams stay with its summary for the
/// run's retention: a subscriber after the run parked still reads every
/// chunk, while a query-like reader sees the history gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_runs_streams_outlive_its_history() {
    let config = Config::memory()
        .history_max_bytes(64)
        .park_after(Duration::ZERO);
    let (kit, _) = kit_with(Some(config)).await;
    assert_eq!(
        kit.execute(CHAT, "h", &(30, false, true)).await.unwrap(),
        30
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let d = kit.engine().describe("h").await.unwrap();
        if d.parked {
            // Start, the stream's opening, 30 chunks, its end and Done: the
            // steps' records are gone.
            assert_eq!(d.journal_records, 34, "{d:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the run parks");
        kit.advance(Duration::from_secs(1)).await.unwrap();
    }
    assert_eq!(texts(&collect(kit.engine(), "h", 0).await), toks(0..30));
    assert_eq!(texts(&collect(kit.engine(), "h", 28).await), toks(28..30));
    let journal = kit.engine().journal_json("h", None).await.unwrap();
    assert_eq!(journal["complete"], false, "the history is gone");
    kit.close().await.unwrap();
}

/// Opening a stream is an operation: replayed against code that opens
/// another name there, the run departs from its journal, naming both; the
/// same code replays with no step run and no chunk sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_that_opens_another_stream_on_replay_departs_from_its_journal() {
    let (mut kit, _) = kit_with(None).await;
    assert_eq!(kit.execute(CHAT, "d", &(3, false, true)).await.unwrap(), 3);
    let journal = kit.export_journal("d").await.unwrap();
    let same = kit.replay(&journal).expect("the same code replays");
    assert_eq!(same.result::<u64>().unwrap(), 3);
    let changed = TestEngine::open(|engine: &Engine| {
        engine.register(CHAT, |ctx: Ctx, _: (u64, bool, bool)| async move {
            let _tx = ctx.stream("answer");
            Ok::<_, Failure>(0)
        });
    })
    .await
    .unwrap();
    match changed.replay(&journal) {
        Err(e @ fusee::testing::ReplayError::Diverged { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("\"tokens\"") && text.contains("\"answer\""),
                "{text}"
            );
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
    changed.close().await.unwrap();
    kit.close().await.unwrap();
}

/// No subscriber sees a chunk a crash could take back: chunks appended
/// while flushes are held come only once they are durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_sees_a_chunk_only_once_it_is_durable() {
    const GATED: Workflow<(), u64> = Workflow::new("gated");
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = Arc::clone(&gate);
    let kit = TestEngine::open(move |engine: &Engine| {
        let g = Arc::clone(&g);
        engine.register(GATED, move |ctx: Ctx, ()| {
            let g = Arc::clone(&g);
            async move {
                let tx = ctx.stream("tokens");
                let n = ctx
                    .step("model", move |_| {
                        let (mut tx, g) = (tx.clone(), Arc::clone(&g));
                        async move {
                            let fatal = |e: Error| StepError::fatal(e.to_string());
                            for i in 0..3u64 {
                                tx.send(format!("tok-{i}")).await.map_err(fatal)?;
                            }
                            g.acquire()
                                .await
                                .map_err(|e| StepError::fatal(e.to_string()))?
                                .forget();
                            for i in 3..6u64 {
                                tx.send(format!("tok-{i}")).await.map_err(fatal)?;
                            }
                            tx.end().await.map_err(fatal)?;
                            Ok(6u64)
                        }
                    })
                    .await?;
                Ok::<_, Failure>(n)
            }
        });
    })
    .await
    .unwrap();
    kit.engine().start(GATED, "g", &()).await.unwrap();
    let mut sub = kit.engine().subscribe("g", "tokens", 0);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(sub.next().await.unwrap().unwrap());
    }
    // The next three are appended while no flush completes.
    kit.storage().hold_flushes(true);
    gate.add_permits(1);
    let early = tokio::time::timeout(Duration::from_millis(200), sub.next()).await;
    assert!(
        early.is_err(),
        "a chunk left before it was durable: {early:?}"
    );
    kit.storage().hold_flushes(false);
    while let Some(c) = tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .expect("the rest come once durable")
    {
        seen.push(c.unwrap());
    }
    let got: Vec<_> = seen
        .iter()
        .map(|c| (c.index, String::from_utf8(c.payload.clone()).unwrap()))
        .collect();
    assert_eq!(got, toks(0..6));
    kit.close().await.unwrap();
}

/// Waits (advancing the test clock) until run `id` is parked.
async fn parked(kit: &TestEngine, id: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !kit.engine().describe(id).await.unwrap().parked {
        assert!(std::time::Instant::now() < deadline, "the run parks");
        kit.advance(Duration::from_secs(1)).await.unwrap();
    }
}

/// A run whose journal holds chunks parks unfinished, takes a chunk while
/// parked (loaded from its frame, its chunks passed undecoded), parks
/// again (a `Delta` frame), and after a crash is read from any cursor,
/// loaded for a signal, replayed past its chunks, and finishes with its
/// stream whole.
///
/// Twice: with the chunks in the run's frames, and set apart in frames of
/// their own from the first (`Config::stream_apart_bytes` 0: the `Park`
/// and the `Delta` each name one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_with_chunks_loads_replays_and_streams_on() {
    for apart in [usize::MAX, 0] {
        parked_run_with_chunks(apart).await;
    }
}

async fn parked_run_with_chunks(apart_bytes: usize) {
    let config = Config::memory()
        .park_after(Duration::ZERO)
        .stream_apart_bytes(apart_bytes);
    let (mut kit, kept) = kit_with(Some(config)).await;
    kit.engine().start(TALK, "p", &5).await.unwrap();
    parked(&kit, "p").await;
    let mut tx = kept
        .lock()
        .unwrap()
        .take()
        .expect("the step kept its sender");
    assert_eq!(tx.index(), 5);
    tx.send("tok-5").await.unwrap();
    parked(&kit, "p").await;
    kit.crash().await.unwrap();
    let tail: Vec<_> = kit
        .engine()
        .subscribe("p", "tokens", 3)
        .take(3)
        .collect()
        .await;
    assert_eq!(texts(&tail), toks(3..6));
    assert!(kit.engine().describe("p").await.unwrap().parked);
    kit.engine().signal("p", GO, &0).await.unwrap();
    assert_eq!(kit.result(TALK, "p").await.unwrap(), 5);
    assert_eq!(texts(&collect(kit.engine(), "p", 0).await), toks(0..6));
    kit.close().await.unwrap();
}

/// A run streaming more than a checkpoint carries (its journal goes to
/// the run store at a checkpoint while it stays loaded: with checkpoints
/// every 64 KiB, several times here) keeps every chunk across a crash, is
/// read from any cursor, and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_stream_past_checkpoints_survives_a_crash() {
    let config = Config::memory().checkpoint_bytes(64 << 10);
    let (mut kit, _) = kit_with(Some(config)).await;
    let n = 64;
    kit.engine().start(LONG, "l", &n).await.unwrap();
    let got: Vec<_> = kit
        .engine()
        .subscribe("l", "tokens", 0)
        .take(64)
        .collect()
        .await;
    assert_eq!(got.len(), 64);
    kit.crash().await.unwrap();
    let tail: Vec<_> = kit
        .engine()
        .subscribe("l", "tokens", 60)
        .take(4)
        .collect()
        .await;
    let tail: Vec<_> = tail.into_iter().map(|c| c.unwrap()).collect();
    assert_eq!(
        tail.iter().map(|c| c.index).collect::<Vec<_>>(),
        vec![60, 61, 62, 63]
    );
    for c in &tail {
        assert_eq!(c.payload.len(), LONG_CHUNK);
        assert!(
            c.payload
                .starts_with(format!("tok-{} ", c.index).as_bytes())
        );
    }
    kit.engine().signal("l", GO, &0).await.unwrap();
    assert_eq!(kit.result(LONG, "l").await.unwrap(), n);
    assert_eq!(collect(kit.engine(), "l", 0).await.len(), 64);
    kit.close().await.unwrap();
}

/// A parked run whose stream made its journal long keeps its chunks in a
/// frame of their own (`Config::stream_apart_bytes`), and nothing but a
/// subscriber reads them: an open's guess at whether the store uses
/// search attributes, a signal's lookup and load (one read of the run's
/// short frame), its finished park (one more; the `Done` frame names the
/// same `Stream` frame, nothing copied) and its result. With the chunks
/// in the run's frame, each of those read all 128 KiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_parked_stream_is_read_once_per_need_and_not_at_an_open() {
    let config = Config::memory()
        .park_after(Duration::ZERO)
        .checkpoint_interval(Duration::from_secs(1));
    let (mut kit, _) = kit_with(Some(config)).await;
    // 16 chunks of 8 KiB: 128 KiB, past the 64 KiB that sets them apart.
    kit.engine().start(LONG, "long", &16).await.unwrap();
    kit.engine().start(TALK, "short", &1).await.unwrap();
    parked(&kit, "long").await;
    parked(&kit, "short").await;
    // A checkpoint commits the parks: the open finds both parked.
    kit.advance(Duration::from_secs(3)).await.unwrap();
    kit.crash().await.unwrap();
    let long = 16 * LONG_CHUNK as u64;
    let m = kit.engine().metrics().await;
    assert_eq!((m.parked_runs, m.frame_reads), (2, 2), "{m:?}");
    assert!(
        m.frame_read_bytes < 4096,
        "no chunk read at the open: {m:?}"
    );
    kit.engine().signal("long", GO, &0).await.unwrap();
    // Finished, it parks again (watched through the metrics: a
    // description of a parked run reads its frame).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while kit.engine().metrics().await.parks == m.parks {
        assert!(std::time::Instant::now() < deadline, "the run parks");
        kit.advance(Duration::from_secs(1)).await.unwrap();
    }
    assert_eq!(kit.result(LONG, "long").await.unwrap(), 16);
    let after = kit.engine().metrics().await;
    // The lookup and load, the finished park, the result.
    assert_eq!(after.frame_reads - m.frame_reads, 3, "{after:?}");
    assert!(
        after.frame_read_bytes - m.frame_read_bytes < 4096,
        "no chunk read for a load, a park or a result: {after:?}"
    );
    // A subscriber reads them, all there.
    assert_eq!(collect(kit.engine(), "long", 0).await.len(), 16);
    let read = kit.engine().metrics().await;
    assert!(
        read.frame_read_bytes - after.frame_read_bytes >= long,
        "{read:?}"
    );
    kit.close().await.unwrap();
}

/// Records of each kind in `id`'s journal as the engine answers it.
async fn kinds(engine: &Engine, id: &str) -> HashMap<String, usize> {
    let journal = engine.journal_json(id, None).await.unwrap();
    let mut out = HashMap::new();
    for r in journal["records"].as_array().expect("records") {
        *out.entry(r["kind"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    out
}

/// Whether `got` is one `StreamGone` saying the chunks went `after_ms`
/// after the run finished.
fn gone(got: &[Result<StreamChunk, Error>], after_ms: u64) -> bool {
    matches!(got, [Err(Error::StreamGone { finished_ms, gone_ms, .. })] if gone_ms - finished_ms == after_ms)
}

/// Waits (advancing the test clock) until `id` is parked, and says how
/// many records its frame holds.
async fn parked_records(kit: &TestEngine, id: &str) -> u64 {
    parked(kit, id).await;
    kit.engine().describe(id).await.unwrap().journal_records
}

/// A finished run keeps its streams' chunks for `Config::stream_retention`
/// and then lets them go, each stream's opening and end kept. With a
/// retention of zero they go when the run finishes (a client reads them
/// only while the run runs): a subscription is
/// then `Error::StreamGone` (from any cursor; a stream never opened is
/// still unknown), the run's frame is written without them when it parks,
/// and after a crash; its result and its history stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_runs_chunks_go_after_the_stream_retention_and_its_result_stays() {
    let config = Config::memory()
        .stream_retention(Duration::ZERO)
        .history_retention(Duration::from_secs(3600))
        .checkpoint_interval(Duration::from_secs(1));
    let (mut kit, _) = kit_with(Some(config)).await;
    assert_eq!(kit.execute(CHAT, "c", &(5, false, true)).await.unwrap(), 5);
    let got = collect(kit.engine(), "c", 0).await;
    assert!(gone(&got, 0), "{got:?}");
    assert!(gone(&collect(kit.engine(), "c", 3).await, 0));
    let other: Vec<_> = kit.engine().subscribe("c", "other", 0).collect().await;
    assert!(
        matches!(other.as_slice(), [Err(Error::UnknownStream { .. })]),
        "{other:?}"
    );
    let answered = kinds(kit.engine(), "c").await;
    assert_eq!(answered.get("Chunk"), None, "{answered:?}");
    assert_eq!(answered.get("StreamEnd"), Some(&1), "{answered:?}");
    let kept: usize = answered.values().sum();
    // Parked: its frame holds exactly what the answer held.
    assert_eq!(parked_records(&kit, "c").await, kept as u64);
    assert!(gone(&collect(kit.engine(), "c", 0).await, 0));
    kit.advance(Duration::from_secs(2)).await.unwrap();
    kit.crash().await.unwrap();
    assert_eq!(
        kit.engine().describe("c").await.unwrap().journal_records,
        kept as u64
    );
    assert!(gone(&collect(kit.engine(), "c", 0).await, 0));
    assert_eq!(kinds(kit.engine(), "c").await, answered);
    assert_eq!(kit.result(CHAT, "c").await.unwrap(), 5);
    let journal = kit.engine().journal_json("c", None).await.unwrap();
    assert_eq!(journal["complete"], true, "the history stays");
    kit.close().await.unwrap();
}

/// A run parked with its chunks (its streams' time not over) has them let
/// go by the pass over parked finished runs once the time passes, its
/// frame rewritten, and the rewrite survives a crash; until then every
/// chunk is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_finished_runs_chunks_go_when_its_stream_time_passes() {
    let config = Config::memory()
        .stream_retention(Duration::from_secs(60))
        .park_after(Duration::ZERO)
        .checkpoint_interval(Duration::from_secs(1));
    let (mut kit, _) = kit_with(Some(config)).await;
    assert_eq!(kit.execute(CHAT, "p", &(5, false, true)).await.unwrap(), 5);
    let all = parked_records(&kit, "p").await;
    assert_eq!(texts(&collect(kit.engine(), "p", 0).await), toks(0..5));
    // Across a crash, the pass finds the run again.
    kit.advance(Duration::from_secs(2)).await.unwrap();
    kit.crash().await.unwrap();
    assert_eq!(texts(&collect(kit.engine(), "p", 0).await), toks(0..5));
    kit.advance(Duration::from_secs(60)).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while kit.engine().describe("p").await.unwrap().journal_records != all - 5 {
        assert!(std::time::Instant::now() < deadline, "the chunks go");
        kit.advance(Duration::from_secs(1)).await.unwrap();
    }
    assert!(gone(&collect(kit.engine(), "p", 0).await, 60_000));
    kit.advance(Duration::from_secs(2)).await.unwrap();
    kit.crash().await.unwrap();
    assert_eq!(
        kit.engine().describe("p").await.unwrap().journal_records,
        all - 5
    );
    assert!(gone(&collect(kit.engine(), "p", 0).await, 60_000));
    assert_eq!(kit.result(CHAT, "p").await.unwrap(), 5);
    kit.close().await.unwrap();
}

/// A subscriber reads each chunk of a live run once: after its first read
/// it asks for what came since, and the shard answers from memory, even
/// for a run whose journal went to the run store at a checkpoint (its
/// frames are not read again at each poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_polling_a_spilled_run_reads_its_frames_once() {
    let config = Config::memory().checkpoint_bytes(64 << 10);
    let (kit, kept) = kit_with(Some(config)).await;
    // 64 chunks of 8 KiB: past the 256 KiB a checkpoint moves to a frame.
    kit.engine().start(LONG, "s", &64).await.unwrap();
    let mut sub = kit.engine().subscribe("s", "tokens", 0);
    for i in 0..64 {
        assert_eq!(sub.next().await.unwrap().unwrap().index, i);
    }
    let before = kit.engine().metrics().await;
    assert!(
        before.frame_reads >= 1,
        "the journal went to a frame: {before:?}"
    );
    // The stream is open and the run waits: the subscriber polls on.
    let idle = tokio::time::timeout(Duration::from_millis(400), sub.next()).await;
    assert!(idle.is_err(), "no chunk came");
    let mut tx = kept
        .lock()
        .unwrap()
        .take()
        .expect("the step kept its sender");
    tx.send(format!("{:<LONG_CHUNK$}", "tok-64")).await.unwrap();
    assert_eq!(sub.next().await.unwrap().unwrap().index, 64);
    let after = kit.engine().metrics().await;
    assert_eq!(after.frame_reads, before.frame_reads, "{after:?}");
    kit.engine().signal("s", GO, &0).await.unwrap();
    assert_eq!(kit.result(LONG, "s").await.unwrap(), 64);
    kit.close().await.unwrap();
}
