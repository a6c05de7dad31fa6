//! Issue 15's operations crashed at every record boundary: a parent that
//! starts a child, signals a sibling workflow, cancels a victim (which
//! catches the cancellation and cleans up), takes a patch, and continues
//! as new once. For each `n`, a store holding exactly the first `n`
//! records of the uncrashed run is opened (`TestEngine::crash_everywhere_with`:
//! one shard, so one log holds every workflow's records, messages between
//! them included) and the workflows carried on: every crash ends with the
//! uncrashed results, and no step whose result was durable runs again.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::effects::{Effects, assert_same_end, noted, take};
use fusee::testing::{RunFailure, TestEngine, TestError};
use fusee::{Ctx, Engine, Failure, IdPolicy, Signal, Workflow};

const FAMILY: Workflow<u64, u64> = Workflow::new("family");
const KID: Workflow<u64, u64> = Workflow::new("kid");
const SIBLING: Workflow<(), u64> = Workflow::new("sibling");
const VICTIM: Workflow<(), String> = Workflow::new("victim");
const NOTE: Signal<u64> = Signal::new("note");

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

/// Starts the three workflows (attaching to those whose start was durable)
/// and waits for each to end; the kit moves time until the sibling's
/// second wait gives up.
async fn family(kit: &TestEngine) -> Result<Ends, TestError> {
    let engine = kit.engine();
    engine
        .start_with(SIBLING, "sibling", &(), IdPolicy::Attach)
        .await?;
    engine
        .start_with(VICTIM, "victim", &(), IdPolicy::Attach)
        .await?;
    engine
        .start_with(FAMILY, "family", &0, IdPolicy::Attach)
        .await?;
    let family = kit.result(FAMILY, "family").await?;
    let sibling = kit.result(SIBLING, "sibling").await?;
    let victim = match kit.outcome(VICTIM, "victim").await? {
        Ok(slept) => slept,
        Err(RunFailure { status, failure }) => format!("{status}: {}", failure.message),
    };
    Ok(Ends {
        family,
        sibling,
        victim,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_of_children_messages_and_handovers_ends_the_same() {
    let effects = Effects::default();
    let e = Arc::clone(&effects);
    let kit = TestEngine::open(move |engine: &Engine| register(engine, Arc::clone(&e)))
        .await
        .expect("open");
    let report = kit
        .crash_everywhere_with(family, |point| {
            let ran = take(&effects);
            if point.crashed_after.is_none() {
                assert_eq!(
                    *point.uncrashed,
                    Ends {
                        family: 20 + 5,
                        // Each round signals the sibling its child's result:
                        // 10, then 20.
                        sibling: 10 + 1000 * 20,
                        victim: "cancelled: family says so".into()
                    }
                );
            }
            assert_same_end(point, &ran);
        })
        .await
        .expect("every crash point ends");
    assert!(report.records > 20, "{} records", report.records);
}
