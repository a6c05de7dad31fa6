//! Durable promises (issue 15): `Ctx::promise` makes an ID, outside code
//! completes it with `Engine::complete`, the workflow waits for it with a
//! timeout. Completed during and before a wait, timed out and waited for
//! again, ended by a cancellation, taken by a parked run and after a
//! restart; every bad completion a named error that records nothing; and
//! a workflow using one crashed at every record boundary, ending the same.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::core::Record;
use fusee::core::record::iter_canonical;
use fusee::storage::{LogStore, MemoryStorage, Storage};
use fusee::{
    AnyStorage, Clock, Config, Ctx, Engine, Error, Failure, IdPolicy, Query, Signal, VirtualClock,
    Workflow,
};

const START_MS: u64 = 1_700_000_000_000;
const MINUTE_MS: u64 = 60_000;
/// Runs never park unless a test asks (a virtual clock moved by minutes
/// would park every idle run).
const NEVER: Duration = Duration::from_secs(365 * 86_400);

/// The workflow's promise ID and how far its code got.
const STATE: Query<(), (u8, String)> = Query::new("state");
const GO: Signal<()> = Signal::new("go");

/// Makes a promise of a `u64`, answers [`STATE`] with `stage` and its ID.
fn promise_with_state(ctx: &Ctx) -> (fusee::Promise<u64>, Rc<Cell<u8>>) {
    let p = ctx.promise::<u64>();
    let stage = Rc::new(Cell::new(1));
    let (seen, id) = (Rc::clone(&stage), p.id().to_string());
    ctx.on_query(STATE, move |()| Ok((seen.get(), id.clone())));
    (p, stage)
}

/// Queries `id`'s [`STATE`] until its stage is at least `stage`.
async fn state_at(engine: &Engine, id: &str, stage: u8) -> String {
    for _ in 0..2000 {
        if let Ok((at, promise)) = engine.query(id, STATE, &()).await
            && at >= stage
        {
            return promise;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("{id} never reached stage {stage}");
}

const TAKE: Workflow<(), u64> = Workflow::new("take");
/// Waits for a GO signal first, so a completion can come before the wait.
const TAKE_LATE: Workflow<(), u64> = Workflow::new("take-late");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promise_completed_during_or_before_its_wait_gives_the_wait_its_value() {
    let engine = Engine::open(Config::memory().shards(2)).await.unwrap();
    engine.register(TAKE, |ctx: Ctx, ()| async move {
        let (p, _) = promise_with_state(&ctx);
        Ok::<_, Failure>(p.wait().await?.unwrap_or(0))
    });
    engine.register(TAKE_LATE, |ctx: Ctx, ()| async move {
        let (p, _) = promise_with_state(&ctx);
        ctx.wait_for(&GO).await?;
        // Completed before this wait: it returns at once, and again.
        let first = p.wait().await?.unwrap_or(0);
        let again = p.wait().await?.unwrap_or(0);
        Ok::<_, Failure>(first * 1000 + again)
    });
    engine.start(TAKE, "take", &()).await.unwrap();
    engine.start(TAKE_LATE, "late", &()).await.unwrap();
    let id = state_at(&engine, "take", 1).await;
    assert!(id.starts_with("take/promise/"), "{id}");
    engine.complete(&id, &42u64).await.unwrap();
    assert_eq!(engine.result(TAKE, "take").await.unwrap(), 42);
    let late = state_at(&engine, "late", 1).await;
    engine.complete(&late, &7u64).await.unwrap();
    engine.signal("late", GO, &()).await.unwrap();
    assert_eq!(engine.result(TAKE_LATE, "late").await.unwrap(), 7007);
    engine.close().await.unwrap();
}

const ESCALATE: Workflow<(), (Option<u64>, u64)> = Workflow::new("escalate");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_times_out_leaves_the_promise_open_for_the_next_wait() {
    let clock = VirtualClock::new(START_MS);
    let config = Config::memory()
        .shards(1)
        .park_after(NEVER)
        .clock(Clock::Virtual(clock.clone()));
    let engine = Engine::open(config).await.unwrap();
    engine.register(ESCALATE, |ctx: Ctx, ()| async move {
        let (p, stage) = promise_with_state(&ctx);
        let first = p.wait().timeout(Duration::from_secs(600)).await?;
        stage.set(2);
        let second = p.wait().timeout(Duration::from_secs(86_400)).await?;
        Ok::<_, Failure>((first, second.unwrap_or(0)))
    });
    engine.start(ESCALATE, "e", &()).await.unwrap();
    let id = state_at(&engine, "e", 1).await;
    // Eleven minutes pass: the first wait gives up.
    clock.advance(11 * MINUTE_MS);
    state_at(&engine, "e", 2).await;
    engine.complete(&id, &5u64).await.unwrap();
    assert_eq!(engine.result(ESCALATE, "e").await.unwrap(), (None, 5));
    engine.close().await.unwrap();
}

const HOLD: Workflow<(), u64> = Workflow::new("hold");
const FINISH: Signal<()> = Signal::new("finish");

/// Every record of shard 0's log in `memory`, as appended.
fn log_records(memory: &MemoryStorage) -> Vec<Vec<u8>> {
    let storage = memory.crash();
    let mut parts = storage.open_shard(0).expect("open shard");
    let mut out = Vec::new();
    parts
        .log
        .read(0, &mut |_, bytes| {
            out.push(bytes.to_vec());
            Ok(())
        })
        .expect("read the log");
    out
}

/// How many of `records` are `Update` and `UpdateDone` records.
fn updates(records: &[Vec<u8>]) -> (usize, usize) {
    let mut n = (0, 0);
    for bytes in records {
        match iter_canonical(bytes).next() {
            Some(Ok((Record::Update { .. }, _))) => n.0 += 1,
            Some(Ok((Record::UpdateDone { .. }, _))) => n.1 += 1,
            _ => {}
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_completions_are_named_errors_and_record_nothing() {
    let memory = MemoryStorage::new();
    let engine = Engine::open_on(
        Config::memory().shards(1),
        AnyStorage::Memory(memory.clone()),
    )
    .await
    .unwrap();
    engine.register(HOLD, |ctx: Ctx, ()| async move {
        let (p, _) = promise_with_state(&ctx);
        let v = p.wait().await?.unwrap_or(0);
        // Stays running, so a second completion meets the promise, not
        // a finished run.
        ctx.wait_for(&FINISH).await?;
        Ok::<_, Failure>(v)
    });
    engine.start(HOLD, "hold", &()).await.unwrap();
    let id = state_at(&engine, "hold", 1).await;
    let uuid = id.strip_prefix("hold/promise/").unwrap().to_string();

    for bad in [
        "",
        "hold",
        "hold/promise/",
        "/promise/0b6e6d53-2a47-4d1c-9f4e-2d1b8c7a6e50",
        "hold/promise/not-a-uuid",
    ] {
        match engine.complete(bad, &1u64).await {
            Err(Error::BadPromiseId { promise, .. }) => assert_eq!(promise, bad),
            other => panic!("{bad:?}: expected BadPromiseId, found {other:?}"),
        }
    }
    let upper = format!("hold/promise/{}", uuid.to_uppercase());
    assert!(
        matches!(
            engine.complete(&upper, &1u64).await,
            Err(Error::BadPromiseId { .. })
        ),
        "another spelling of the uuid"
    );
    match engine
        .complete(&format!("ghost/promise/{uuid}"), &1u64)
        .await
    {
        Err(Error::UnknownPromise { reason, .. }) => {
            assert!(reason.contains("no workflow \"ghost\""), "{reason}")
        }
        other => panic!("expected UnknownPromise, found {other:?}"),
    }
    let stranger = "hold/promise/0b6e6d53-2a47-4d1c-9f4e-2d1b8c7a6e50";
    match engine.complete(stranger, &1u64).await {
        Err(Error::UnknownPromise { promise, reason }) => {
            assert_eq!(promise, stranger);
            assert!(reason.contains("made no such promise"), "{reason}");
        }
        other => panic!("expected UnknownPromise, found {other:?}"),
    }
    match engine.complete(&id, &"not a number").await {
        Err(Error::Codec { what, detail, .. }) => {
            assert_eq!(what, "promise value");
            assert!(detail.contains("invalid type"), "{detail}");
        }
        other => panic!("expected a codec error, found {other:?}"),
    }
    let big = Config::memory().max_payload;
    assert!(matches!(
        engine.complete(&id, &"x".repeat(big + 1)).await,
        Err(Error::TooLarge { .. })
    ));

    engine.complete(&id, &42u64).await.unwrap();
    match engine.complete(&id, &43u64).await {
        Err(Error::PromiseCompleted { promise }) => assert_eq!(promise, id),
        other => panic!("expected PromiseCompleted, found {other:?}"),
    }
    engine.signal("hold", FINISH, &()).await.unwrap();
    assert_eq!(engine.result(HOLD, "hold").await.unwrap(), 42);
    match engine.complete(&id, &44u64).await {
        Err(Error::PromiseClosed { id: wf, status, .. }) => {
            assert_eq!((wf.as_str(), status), ("hold", "ok"))
        }
        other => panic!("expected PromiseClosed, found {other:?}"),
    }
    drop(engine);
    // Of all those calls, only the one completion is in the log.
    assert_eq!(updates(&log_records(&memory)), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_racing_completions_exactly_one_takes() {
    let engine = Engine::open(Config::memory().shards(2)).await.unwrap();
    engine.register(HOLD, |ctx: Ctx, ()| async move {
        let (p, _) = promise_with_state(&ctx);
        let v = p.wait().await?.unwrap_or(0);
        ctx.wait_for(&FINISH).await?;
        Ok::<_, Failure>(v)
    });
    // Bursts, so that some completions reach the shard together, before
    // the first one's update is delivered to the code.
    for round in 0..8 {
        let wf = format!("race-{round}");
        engine.start(HOLD, &wf, &()).await.unwrap();
        let id = state_at(&engine, &wf, 1).await;
        let calls: Vec<_> = (1..=64u64)
            .map(|v| {
                let (engine, id) = (engine.clone(), id.clone());
                tokio::spawn(async move { (v, engine.complete(&id, &v).await) })
            })
            .collect();
        let mut took = Vec::new();
        for call in calls {
            match call.await.unwrap() {
                (v, Ok(())) => took.push(v),
                (_, Err(Error::PromiseCompleted { .. })) => {}
                (v, Err(e)) => panic!("completion with {v}: {e}"),
            }
        }
        assert_eq!(took.len(), 1, "{wf}: completions that took: {took:?}");
        engine.signal(&wf, FINISH, &()).await.unwrap();
        assert_eq!(engine.result(HOLD, &wf).await.unwrap(), took[0]);
    }
    engine.close().await.unwrap();
}

const PATIENT: Workflow<(), String> = Workflow::new("patient");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_ends_a_promise_wait_with_an_error_the_code_can_catch() {
    let engine = Engine::open(Config::memory().shards(1)).await.unwrap();
    engine.register(PATIENT, |ctx: Ctx, ()| async move {
        let (p, _) = promise_with_state(&ctx);
        match p.wait().await {
            Err(f) if f.kind.as_deref() == Some("cancelled") => {
                Ok(format!("caught: {}", f.message))
            }
            other => Err(Failure::new(format!("expected a cancellation: {other:?}"))),
        }
    });
    engine.start(PATIENT, "p", &()).await.unwrap();
    let id = state_at(&engine, "p", 1).await;
    engine.cancel("p", "no longer needed").await.unwrap();
    assert_eq!(
        engine.result(PATIENT, "p").await.unwrap(),
        "caught: no longer needed"
    );
    assert!(matches!(
        engine.complete(&id, &1u64).await,
        Err(Error::PromiseClosed { .. })
    ));
    engine.close().await.unwrap();
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("fusee-promise-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_and_a_restarted_engine_take_their_completions() {
    let dir = temp_dir("parked");
    let config = || {
        Config::file(&dir)
            .shards(2)
            .park_after(Duration::from_millis(300))
    };
    let engine = Engine::open(config()).await.unwrap();
    let register = |engine: &Engine| {
        engine.register(TAKE, |ctx: Ctx, ()| async move {
            let (p, _) = promise_with_state(&ctx);
            Ok::<_, Failure>(p.wait().await?.unwrap_or(0))
        })
    };
    register(&engine);
    for w in ["a", "b"] {
        engine.start(TAKE, w, &()).await.unwrap();
    }
    let a = state_at(&engine, "a", 1).await;
    let b = state_at(&engine, "b", 1).await;
    // Idle, the run leaves memory; the completion brings it back.
    let mut parked = false;
    for _ in 0..500 {
        parked = engine.describe("a").await.unwrap().parked;
        if parked {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(parked, "run a parked");
    engine.complete(&a, &1u64).await.unwrap();
    assert_eq!(engine.result(TAKE, "a").await.unwrap(), 1);
    drop(engine); // a crash
    let engine = Engine::open(config()).await.unwrap();
    register(&engine);
    engine.complete(&b, &2u64).await.unwrap();
    assert_eq!(engine.result(TAKE, "b").await.unwrap(), 2);
    assert!(matches!(
        engine.complete(&a, &1u64).await,
        Err(Error::PromiseClosed { .. })
    ));
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- Crashed at every record boundary ----

const DEAL: Workflow<u64, u64> = Workflow::new("deal");

/// Every step's effect: its name.
type Effects = Arc<Mutex<Vec<String>>>;

async fn noted(ctx: &Ctx, effects: &Effects, name: &str, value: u64) -> Result<u64, Failure> {
    let (effects, step) = (Arc::clone(effects), name.to_string());
    Ok(ctx
        .step(name, move |_| {
            let (effects, step) = (Arc::clone(&effects), step.clone());
            async move {
                effects.lock().unwrap().push(step);
                Ok(value)
            }
        })
        .await?)
}

/// Makes a promise; waits ten minutes for it, in vain (the harness
/// completes it only after); reminds; waits a day, gets it; books.
fn register_deal(engine: &Engine, effects: Effects) {
    engine.register(DEAL, move |ctx: Ctx, base: u64| {
        let effects = Arc::clone(&effects);
        async move {
            let (offer, stage) = promise_with_state(&ctx);
            let first = offer.wait().timeout(Duration::from_secs(600)).await?;
            noted(&ctx, &effects, "remind", 0).await?;
            stage.set(2);
            let v = offer
                .wait()
                .timeout(Duration::from_secs(86_400))
                .await?
                .ok_or_else(|| Failure::new("no offer within a day"))?;
            let booked = noted(&ctx, &effects, "book", v * 2 + base).await?;
            Ok(booked + first.map_or(1000, |_| 0))
        }
    });
}

/// Opens an engine on `memory`, carries "deal" to its end (completing its
/// promise with `value`) and returns its result and the promise's ID;
/// drops the engine without closing it (a crash).
async fn carry_on(memory: &MemoryStorage, effects: Effects, value: u64) -> (u64, String) {
    let clock = VirtualClock::new(START_MS);
    let config = Config::memory()
        .shards(1)
        .park_after(NEVER)
        .checkpoint_interval(NEVER)
        .clock(Clock::Virtual(clock.clone()));
    let engine = Engine::open_on(config, AnyStorage::Memory(memory.clone()))
        .await
        .expect("open");
    register_deal(&engine, effects);
    // A start whose acknowledgement a crash may have taken is sent again.
    engine
        .start_with(DEAL, "deal", &5, IdPolicy::Attach)
        .await
        .expect("start");
    let run = async {
        let (mut promise, mut sent) = (None, false);
        loop {
            match engine.query("deal", STATE, &()).await {
                // The first wait gives up after ten minutes: the clock
                // moves past them once.
                Ok((1, id)) if clock.now_ms() < START_MS + 11 * MINUTE_MS => {
                    promise = Some(id);
                    clock.advance(11 * MINUTE_MS)
                }
                Ok((2, id)) if !sent => {
                    // A completion whose answer a crash took is sent again
                    // (here with another value): when the first one was
                    // durable it is refused, or the run has finished.
                    match engine.complete(&id, &value).await {
                        Ok(())
                        | Err(Error::PromiseCompleted { .. } | Error::PromiseClosed { .. }) => {}
                        Err(e) => panic!("complete: {e}"),
                    }
                    (promise, sent) = (Some(id), true);
                }
                // The run ended: its code registers nothing any more.
                Err(Error::UnknownQuery { .. }) => break,
                Ok((_, id)) => promise = Some(id),
                Err(_) => {}
            }
            if let Ok(d) = engine.describe("deal").await
                && matches!(d.status, fusee::RunStatus::Finished(_))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let result = engine.result(DEAL, "deal").await.expect("result");
        (result, promise.unwrap_or_default())
    };
    tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("the deal ends within 20 s")
}

/// A fresh store holding exactly `records` in shard 0's log, durable.
fn store_with(records: &[Vec<u8>]) -> MemoryStorage {
    let memory = MemoryStorage::new();
    let mut parts = memory.open_shard(0).expect("open shard");
    for (i, r) in records.iter().enumerate() {
        parts.log.append(i as u64 + 1, r).expect("append");
    }
    parts.log.flush().expect("flush");
    drop(parts);
    memory.crash()
}

/// The names of the steps whose result is among `records`.
fn recorded_steps(records: &[Vec<u8>]) -> Vec<String> {
    records
        .iter()
        .filter_map(|bytes| match iter_canonical(bytes).next() {
            Some(Ok((Record::Step { name, .. }, _))) => Some(name.to_string()),
            _ => None,
        })
        .collect()
}

/// Whether `records` hold a record of kind `is`.
fn holds(records: &[Vec<u8>], is: fn(&fusee::core::record::RecordRef<'_>) -> bool) -> bool {
    records
        .iter()
        .any(|bytes| matches!(iter_canonical(bytes).next(), Some(Ok((r, _))) if is(&r)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_of_a_promise_ends_the_same() {
    let memory = MemoryStorage::new();
    let reference: Effects = Arc::default();
    let (expected, reference_id) = carry_on(&memory, Arc::clone(&reference), 21).await;
    assert_eq!(expected, 21 * 2 + 5 + 1000, "the first wait timed out");
    assert_eq!(*reference.lock().unwrap(), ["remind", "book"]);
    let records = log_records(&memory);
    // Start, the promise's uuid, Wait and Waited (timed out), the remind
    // step (Began, Step), Wait, Update, UpdateDone, Waited (abandoned: the
    // value came first), the book step (Began, Step), Done.
    assert_eq!(records.len(), 13, "the uncrashed run's records");
    assert_eq!(updates(&records), (1, 1));
    let mut same_id = 0;
    for n in 0..=records.len() {
        let prefix = &records[..n];
        let effects: Effects = Arc::default();
        // Each recovery completes with a value of its own: the reference
        // run's stands only where its completion was durable.
        let value = 100 + n as u64;
        let (got, id) = carry_on(&store_with(prefix), Arc::clone(&effects), value).await;
        let completed = holds(prefix, |r| matches!(r, Record::Update { .. }));
        let want = if completed {
            expected
        } else {
            value * 2 + 5 + 1000
        };
        assert_eq!(got, want, "crash after {n} of {} records", records.len());
        // (A run that finishes during recovery is never asked.)
        if !id.is_empty() && holds(prefix, |r| matches!(r, Record::Value { .. })) {
            assert_eq!(
                id, reference_id,
                "crash after {n} records: the promise's ID changed"
            );
            same_id += 1;
        }
        let done = recorded_steps(prefix);
        for name in effects.lock().unwrap().iter() {
            assert!(
                !done.contains(name),
                "crash after {n} records: step {name} ran again though its result was durable"
            );
        }
    }
    assert!(same_id >= 5, "the ID was compared after {same_id} crashes");
}
