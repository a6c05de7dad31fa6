//! A workflow of 10 steps, a sleep and a signal wait, crashed at every
//! record boundary in turn: for each `n`, a store holding exactly the first
//! `n` records of an uncrashed run is opened and the run carried on. Every
//! crash must end with the uncrashed run's result, and a step whose result
//! was durable must never run again (its effect ran at most once after its
//! result was recorded). Memory backend: a crash keeps only what was
//! flushed, and here exactly the prefix given.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::core::Record;
use fusee::core::record::iter_canonical;
use fusee::storage::{LogStore, MemoryStorage, Storage};
use fusee::{AnyStorage, Clock, Config, Ctx, Engine, Failure, Signal, VirtualClock, Workflow};

const TRIP: Workflow<u64, u64> = Workflow::new("trip");
const GO: Signal<u64> = Signal::new("go");
const START_MS: u64 = 1_700_000_000_000;

/// Every step function's effect: (step name, idempotency key).
type Effects = Arc<Mutex<Vec<(String, String)>>>;

fn register(engine: &Engine, effects: Effects) {
    engine.register(TRIP, move |ctx: Ctx, base: u64| {
        let effects = Arc::clone(&effects);
        async move {
            let mut sum = base;
            for i in 0..10u64 {
                if i == 5 {
                    ctx.sleep("pause", Duration::from_secs(10)).await?;
                    let go = ctx.wait_for(&GO).await?.unwrap_or(0);
                    sum += go;
                }
                let effects = Arc::clone(&effects);
                let name = format!("step-{i}");
                let step_name = name.clone();
                sum = ctx
                    .step(&name, move |step| {
                        let effects = Arc::clone(&effects);
                        let step_name = step_name.clone();
                        async move {
                            effects
                                .lock()
                                .unwrap()
                                .push((step_name, step.key().to_string()));
                            Ok(sum * 3 + i)
                        }
                    })
                    .await?;
            }
            Ok::<_, Failure>(sum)
        }
    });
}

/// Opens an engine on `memory`, carries run "trip-1" to its end (moving the
/// clock and sending the signal until it finishes) and returns its result;
/// drops the engine without closing it (a crash).
async fn carry_on(memory: &MemoryStorage, effects: Effects, start: bool) -> u64 {
    let clock = VirtualClock::new(START_MS);
    let config = Config::memory()
        .shards(1)
        .clock(Clock::Virtual(clock.clone()));
    let engine = Engine::open_on(config, AnyStorage::Memory(memory.clone()))
        .await
        .expect("open");
    register(&engine, effects);
    if start {
        engine.start(TRIP, "trip-1", &7).await.expect("start");
    }
    // A signal sent before the wait is buffered; one sent again after a
    // crash (its acknowledgement may have been lost) is a second signal the
    // single wait never takes.
    match engine.signal("trip-1", GO, &100).await {
        Ok(()) | Err(fusee::Error::Finished { .. }) => {}
        Err(e) => panic!("signal: {e}"),
    }
    let result = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.result(TRIP, "trip-1").await })
    };
    let mut result = result;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        tokio::select! {
            r = &mut result => return r.expect("join").expect("result"),
            _ = tokio::time::sleep(Duration::from_millis(5)) => clock.advance(5_000),
        }
        if tokio::time::Instant::now() > deadline {
            let d = engine.describe("trip-1").await;
            panic!("no result within 20 s; the run: {d:?}");
        }
    }
}

/// The records of shard 0's log in `memory`, as appended.
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

/// The step names whose result (`Step` record) is among `records`.
fn recorded_steps(records: &[Vec<u8>]) -> Vec<String> {
    records
        .iter()
        .filter_map(|bytes| match iter_canonical(bytes).next() {
            Some(Ok((Record::Step { name, .. }, _))) => Some(name.to_string()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_ends_with_the_same_result_and_no_step_runs_twice() {
    let reference_effects: Effects = Arc::default();
    let memory = MemoryStorage::new();
    let expected = carry_on(&memory, Arc::clone(&reference_effects), true).await;
    let records = log_records(&memory);
    let keys: std::collections::BTreeMap<String, String> =
        reference_effects.lock().unwrap().iter().cloned().collect();
    assert_eq!(keys.len(), 10, "the uncrashed run ran each step once");
    // Start, ten Step, Timer and Fired, Signal, Wait and Waited, Done.
    assert_eq!(records.len(), 17, "the uncrashed run's records");

    for n in 0..=records.len() {
        let prefix = &records[..n];
        let memory = store_with(prefix);
        let effects: Effects = Arc::default();
        // With no Start durable, the start was never acknowledged: the
        // caller starts again.
        let start = n == 0;
        let got = carry_on(&memory, Arc::clone(&effects), start).await;
        assert_eq!(got, expected, "crash after {n} records: another result");
        let done = recorded_steps(prefix);
        for (name, key) in effects.lock().unwrap().iter() {
            assert!(
                !done.contains(name),
                "crash after {n} records: step {name} ran again though its result was durable"
            );
            assert_eq!(
                Some(key),
                keys.get(name),
                "crash after {n} records: step {name}'s idempotency key changed"
            );
        }
    }
}
