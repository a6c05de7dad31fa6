//! The child of the engine SIGKILL harness:
//! `engine-child BACKEND DIR SEED INCARNATION FIRST END`.
//!
//! Opens an engine on BACKEND (`file`, `redb`, `rocksdb`) in DIR and runs
//! the workflows numbered FIRST to END (exclusive), at most
//! [`IN_FLIGHT`] at a time, each started with [`IdPolicy::Attach`] so a run
//! an earlier child started is attached to rather than started again. It
//! reports on stdout ([`Report`], a line each, flushed at once) the open,
//! each start it asks for and each the engine acknowledges (new or
//! attached), each signal acknowledged, and each result. INCARNATION (this child's number, from 0)
//! goes into what the steps return, so a result that changes across kills
//! shows. With END reached and every result in, it closes the engine and
//! exits 0; the parent kills it long before that in the kill phase (END is
//! then `u64::MAX`).
//!
//! Each workflow: step `a` (whose first attempt fails for every 7th run, so
//! retries cross kills too), a durable sleep of 1 to 5 ms, a recorded
//! random number, step `b`, two child workflows one after the other (IDs
//! [`kid_id`]: on the other shards, mostly), each running a step and
//! signalling its parent the step's value before it returns it; the
//! parent's waits for those two signals and a short one for any third (a
//! signal recorded twice), a wait for the `go` signal (which this child
//! sends once the start is acknowledged; a later child sends another,
//! which stays buffered if the first was durable), then step `c`.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use fusee::{
    Backend, Config, Ctx, Engine, Error, Failure, IdPolicy, RetryPolicy, Signal, StepError,
    StorageConfig, Workflow,
};
use fusee_tests::engine_kill::{IN_FLIGHT, NO_NOTE, Report, RunValue, kid_id, workflow_id};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// The harness's workflow: its number in, a [`RunValue`] out.
const RUN: Workflow<u64, String> = Workflow::new("sigkill-run");
/// Lets a run go past its wait; carries the sender's incarnation.
const GO: Signal<u64> = Signal::new("go");
/// A run's child workflow: (its parent's number, which child) in, the
/// incarnation whose attempt of its step was recorded out.
const KID: Workflow<(u64, u64), u64> = Workflow::new("sigkill-kid");
/// A child's signal to its parent: (which child, its step's value).
const NOTE: Signal<(u64, u64)> = Signal::new("note");
/// Fixed when the store is created: every incarnation must open it so.
/// Four, so most children and their signals cross shards.
const SHARDS: u32 = 4;

struct Args {
    backend: Backend,
    dir: String,
    seed: u64,
    incarnation: u64,
    first: u64,
    end: u64,
}

fn parse_args() -> Option<Args> {
    let mut args = std::env::args().skip(1);
    let mut next = || args.next();
    Some(Args {
        backend: next()?.parse().ok()?,
        dir: next()?,
        seed: next()?.parse().ok()?,
        incarnation: next()?.parse().ok()?,
        first: next()?.parse().ok()?,
        end: next()?.parse().ok()?,
    })
}

fn main() -> ExitCode {
    let Some(args) = parse_args() else {
        eprintln!("usage: engine-child BACKEND DIR SEED INCARNATION FIRST END");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("engine-child: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("engine-child: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Where the engine keeps its shards: `DIR` is the directory, or for
/// PostgreSQL (the server at `FUSEE_PG_URL`) the schema, under one owner
/// name for every incarnation, so each takes its predecessor's shards at
/// once rather than after their leases lapse.
fn storage(args: &Args) -> StorageConfig {
    if args.backend != Backend::Postgres {
        return StorageConfig::new(args.backend, &args.dir);
    }
    let url = std::env::var("FUSEE_PG_URL").unwrap_or_default();
    let mut storage = StorageConfig::postgres(&url).postgres_schema(&args.dir);
    storage.postgres.owner = Some(format!("engine-child-{}", args.dir));
    storage
}

/// Writes `report` as one line and flushes it: once written, the parent may
/// hold the engine to it.
fn say(report: Report) {
    let line = format!("{report}\n");
    let mut out = std::io::stdout().lock();
    if out
        .write_all(line.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        // The parent is gone: nobody checks what happens next.
        std::process::exit(3);
    }
}

async fn run(args: Args) -> Result<(), Error> {
    // Checkpoints often in some incarnations, so kills land during
    // checkpoints and log discards too; rarely in others, so recovery
    // replays a long log.
    let mut rng = fastrand::Rng::with_seed(args.seed ^ args.incarnation.rotate_left(32));
    let checkpoint_bytes = [16 << 10, 256 << 10, 64 << 20][rng.usize(0..3)];
    let config = Config::new(storage(&args))
        .shards(SHARDS)
        .checkpoint_bytes(checkpoint_bytes)
        .checkpoint_interval(Duration::from_millis(rng.u64(20..500)));
    let engine = Engine::open(config).await?;
    say(Report::Opened {
        recovered: engine.metrics().await.recovered_records,
    });
    register(&engine, args.incarnation);
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = JoinSet::new();
    for n in args.first..args.end {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            break;
        };
        let engine = engine.clone();
        let incarnation = args.incarnation;
        tasks.spawn(async move {
            if let Err(message) = drive(&engine, n, incarnation).await {
                say(Report::Error { n, message });
            }
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    engine.close().await
}

/// Starts (or attaches to) run `n`, sends it `go`, waits for its result,
/// reporting each step.
async fn drive(engine: &Engine, n: u64, incarnation: u64) -> Result<(), String> {
    let id = workflow_id(n);
    say(Report::Starting(n));
    let handle = loop {
        match engine.start_with(RUN, &id, &n, IdPolicy::Attach).await {
            // A full queue refuses and records nothing: ask again.
            Err(Error::Busy { .. }) => tokio::time::sleep(Duration::from_millis(1)).await,
            other => break other.map_err(|e| format!("start: {e}"))?,
        }
    };
    say(Report::Started {
        n,
        attached: handle.run().attached,
    });
    loop {
        match engine.signal(&id, GO, &incarnation).await {
            Ok(()) => {
                say(Report::Signalled(n));
                break;
            }
            // Finished: an earlier child's signal let it through.
            Err(Error::Finished { .. }) => break,
            Err(Error::Busy { .. }) => tokio::time::sleep(Duration::from_millis(1)).await,
            Err(e) => return Err(format!("signal: {e}")),
        }
    }
    let value = loop {
        match handle.result().await {
            Err(Error::Busy { .. }) => tokio::time::sleep(Duration::from_millis(1)).await,
            other => break other.map_err(|e| format!("result: {e}"))?,
        }
    };
    say(Report::Result { n, value });
    Ok(())
}

/// Registers the harness's workflows; their steps return `incarnation`.
fn register(engine: &Engine, incarnation: u64) {
    engine.register(KID, move |ctx: Ctx, (n, k): (u64, u64)| async move {
        let value = ctx
            .step("k", move |_| async move { Ok(incarnation) })
            .await?;
        ctx.signal(&workflow_id(n), NOTE, &(k, value))?;
        Ok::<_, Failure>(value)
    });
    engine.register(RUN, move |ctx: Ctx, n: u64| async move {
        let quick = RetryPolicy::default().backoff(
            Duration::from_millis(1),
            2.0,
            Duration::from_millis(10),
        );
        let a = ctx
            .step("a", move |step| async move {
                if n.is_multiple_of(7) && step.attempt() == 1 {
                    return Err(StepError::retryable("the first attempt fails"));
                }
                Ok(incarnation)
            })
            .retry(quick)
            .await?;
        ctx.sleep("nap", Duration::from_millis(1 + n % 5)).await?;
        let random = ctx.random();
        let b = ctx
            .step("b", move |_| async move { Ok(incarnation) })
            .await?;
        let k0 = ctx.child(KID, &kid_id(n, 0), &(n, 0)).await?;
        let k1 = ctx.child(KID, &kid_id(n, 1), &(n, 1)).await?;
        // Each child signals once before it ends: two notes are due, and a
        // third would be one recorded twice.
        let mut notes = [NO_NOTE; 2];
        let mut extra = 0;
        for _ in 0..2 {
            let (k, value) = ctx
                .wait_for(&NOTE)
                .await?
                .ok_or_else(|| Failure::new("the wait for a child's note ended without it"))?;
            match notes.get_mut(k as usize) {
                Some(slot) if *slot == NO_NOTE => *slot = value,
                _ => extra += 1,
            }
        }
        if ctx
            .wait_for(&NOTE)
            .timeout(Duration::from_millis(2))
            .await?
            .is_some()
        {
            extra += 1;
        }
        let go = ctx
            .wait_for(&GO)
            .await?
            .ok_or_else(|| Failure::new("the wait for go ended without it"))?;
        let c = ctx
            .step("c", move |_| async move { Ok(incarnation) })
            .await?;
        let value = RunValue {
            n,
            a,
            b,
            go,
            c,
            random,
            k0,
            k1,
            n0: notes[0],
            n1: notes[1],
            extra,
        };
        Ok::<_, Failure>(value.to_string())
    });
}
