//! Issue 15's operations crashed at every record boundary: a parent that
//! starts a child, signals a sibling workflow, cancels a victim (which
//! catches the cancellation and cleans up), takes a patch, and continues
//! as new once. For each `n`, a store holding exactly the first `n`
//! records of the uncrashed run is opened (one shard, so one log holds
//! every workflow's records, messages between them included) and the
//! workflows carried on: every crash ends with the uncrashed results, and
//! no step whose result was durable runs again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::core::Record;
use fusee::core::record::iter_canonical;
use fusee::storage::{LogStore, MemoryStorage, Storage};
use fusee::{
    AnyStorage, Clock, Config, Ctx, Engine, Error, Failure, IdPolicy, Signal, VirtualClock,
    Workflow,
};

const FAMILY: Workflow<u64, u64> = Workflow::new("family");
const KID: Workflow<u64, u64> = Workflow::new("kid");
const SIBLING: Workflow<(), u64> = Workflow::new("sibling");
const VICTIM: Workflow<(), String> = Workflow::new("victim");
const NOTE: Signal<u64> = Signal::new("note");
const START_MS: u64 = 1_700_000_000_000;

/// Every step's effect: (run number, step name). Run numbers come from the
/// log, so they are the same in the uncrashed run and every recovery.
type Effects = Arc<Mutex<Vec<(u64, String)>>>;

/// A step that notes its effect and returns `value`.
async fn noted(ctx: &Ctx, effects: &Effects, name: &str, value: u64) -> Result<u64, Failure> {
    let effects = Arc::clone(effects);
    let who = ctx.run_id();
    let step = name.to_string();
    Ok(ctx
        .step(name, move |_| {
            let effects = Arc::clone(&effects);
            let step = step.clone();
            async move {
                effects.lock().unwrap().push((who, step));
                Ok(value)
            }
        })
        .await?)
}

fn register(engine: &Engine, effects: Effects) {
    let e = Arc::clone(&effects);
    engine.register(KID, move |ctx: Ctx, n: u64| {
        let e = Arc::clone(&e);
        async move { noted(&ctx, &e, "kid-work", n * 10).await }
    });
    // The sibling takes its note, then waits a minute for another: a note
    // recorded twice would show in its result.
    engine.register(SIBLING, |ctx: Ctx, ()| async move {
        let note = ctx.wait_for(&NOTE).await?.unwrap_or(0);
        let twice = ctx.wait_for(&NOTE).timeout(Duration::from_secs(60)).await?;
        Ok::<_, Failure>(note + 1000 * twice.unwrap_or(0))
    });
    let e = Arc::clone(&effects);
    engine.register(VICTIM, move |ctx: Ctx, ()| {
        let e = Arc::clone(&e);
        async move {
            match ctx
                .sleep("forever", Duration::from_secs(86_400 * 365))
                .await
            {
                Ok(()) => Ok("slept".into()),
                Err(f) => {
                    noted(&ctx, &e, "clean-up", 1).await?;
                    Err(f)
                }
            }
        }
    });
    let e = Arc::clone(&effects);
    engine.register(FAMILY, move |ctx: Ctx, round: u64| {
        let e = Arc::clone(&e);
        async move {
            let got = ctx
                .child(KID, &format!("kid-{round}"), &(round + 1))
                .await?;
            ctx.signal("sibling", NOTE, &got)?;
            if round == 0 {
                ctx.cancel("victim", "family says so");
            }
            let extra = if ctx.patched("bonus") {
                noted(&ctx, &e, "bonus", 5).await?
            } else {
                0
            };
            if round == 0 {
                return ctx.continue_as_new(&1u64).await;
            }
            Ok(got + extra)
        }
    });
}

/// The three results everything ends with.
#[derive(Debug, PartialEq)]
struct Ends {
    family: u64,
    sibling: u64,
    victim: String,
}

async fn carry_on(memory: &MemoryStorage, effects: Effects) -> Ends {
    let clock = VirtualClock::new(START_MS);
    let config = Config::memory()
        .shards(1)
        .clock(Clock::Virtual(clock.clone()));
    let engine = Engine::open_on(config, AnyStorage::Memory(memory.clone()))
        .await
        .expect("open");
    register(&engine, effects);
    // A start whose acknowledgement a crash may have taken is sent again:
    // attaching to the run if it exists.
    for (wf, id) in [("sibling", "sibling"), ("victim", "victim")] {
        let r = match wf {
            "sibling" => engine
                .start_with(SIBLING, id, &(), IdPolicy::Attach)
                .await
                .map(|_| ()),
            _ => engine
                .start_with(VICTIM, id, &(), IdPolicy::Attach)
                .await
                .map(|_| ()),
        };
        r.expect("start");
    }
    engine
        .start_with(FAMILY, "family", &0, IdPolicy::Attach)
        .await
        .expect("start");
    let ends = async {
        let family = engine.result(FAMILY, "family").await.expect("family");
        // Time moves on until the sibling's second wait gives up.
        let sibling = loop {
            let waiting = engine.result(SIBLING, "sibling");
            tokio::select! {
                r = waiting => break r.expect("sibling"),
                _ = tokio::time::sleep(Duration::from_millis(5)) => clock.advance(30_000),
            }
        };
        let victim = match engine.result(VICTIM, "victim").await {
            Err(Error::Failed {
                status, failure, ..
            }) => format!("{status}: {}", failure.message),
            other => format!("{other:?}"),
        };
        Ends {
            family,
            sibling,
            victim,
        }
    };
    tokio::time::timeout(Duration::from_secs(20), ends)
        .await
        .expect("every workflow ends within 20 s")
}

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

/// The (run, step name) whose result is among `records`.
fn recorded_steps(records: &[Vec<u8>]) -> Vec<(u64, String)> {
    records
        .iter()
        .filter_map(|bytes| match iter_canonical(bytes).next() {
            Some(Ok((Record::Step { run, name, .. }, _))) => Some((run, name.to_string())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_of_children_messages_and_handovers_ends_the_same() {
    let memory = MemoryStorage::new();
    let reference_effects: Effects = Arc::default();
    let expected = carry_on(&memory, Arc::clone(&reference_effects)).await;
    assert_eq!(
        expected,
        Ends {
            family: 20 + 5,
            // Each round signals the sibling its child's result: 10, then 20.
            sibling: 10 + 1000 * 20,
            victim: "cancelled: family says so".into()
        }
    );
    let records = log_records(&memory);
    assert!(records.len() > 20, "{} records", records.len());
    for n in 0..=records.len() {
        let prefix = &records[..n];
        let effects: Effects = Arc::default();
        let got = carry_on(&store_with(prefix), Arc::clone(&effects)).await;
        assert_eq!(
            got,
            expected,
            "crash after {n} of {} records",
            records.len()
        );
        let done = recorded_steps(prefix);
        for effect in effects.lock().unwrap().iter() {
            assert!(
                !done.contains(effect),
                "crash after {n} records: step {effect:?} ran again though its result was durable"
            );
        }
    }
}
