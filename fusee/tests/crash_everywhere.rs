//! A workflow of 10 steps, a sleep and a signal wait, crashed at every
//! record boundary in turn (`TestEngine::crash_everywhere_with`: for each
//! `n`, a store holding exactly the first `n` records of an uncrashed run
//! is opened and the run carried on). Every crash must end with the
//! uncrashed run's result, and a step whose result was durable must never
//! run again (its effect ran at most once after its result was recorded),
//! with the same idempotency key as uncrashed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::testing::{TestEngine, TestError};
use fusee::{Ctx, Engine, Failure, IdPolicy, Signal, Workflow};

const TRIP: Workflow<u64, u64> = Workflow::new("trip");
const GO: Signal<u64> = Signal::new("go");

/// Every step function's effect: (step name, idempotency key).
type Effects = Arc<Mutex<Vec<(String, String)>>>;

fn register(engine: &Engine, effects: &Effects) {
    let effects = Arc::clone(effects);
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

/// Starts "trip-1" (or finds it, if its start was durable), signals it
/// and waits for its result.
async fn trip(kit: &TestEngine) -> Result<u64, TestError> {
    kit.engine()
        .start_with(TRIP, "trip-1", &7, IdPolicy::Attach)
        .await?;
    // A signal sent before the wait is buffered; one sent again after a
    // crash (its acknowledgement may have been lost) is a second signal the
    // single wait never takes.
    match kit.engine().signal("trip-1", GO, &100).await {
        Ok(()) | Err(fusee::Error::Finished { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    kit.result(TRIP, "trip-1").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_ends_with_the_same_result_and_no_step_runs_twice() {
    let effects = Effects::default();
    let e = Arc::clone(&effects);
    let kit = TestEngine::open(move |engine: &Engine| register(engine, &e))
        .await
        .expect("open");
    // The uncrashed run's key for each step.
    let mut keys = BTreeMap::new();
    let report = kit
        .crash_everywhere_with(trip, |point| {
            let ran = std::mem::take(&mut *effects.lock().unwrap());
            let at = point.crashed_after;
            if at.is_none() {
                keys = ran.into_iter().collect();
                assert_eq!(keys.len(), 10, "the uncrashed run ran each step once");
                return;
            }
            assert_eq!(
                point.outcome, point.uncrashed,
                "crash after {at:?}: another result"
            );
            let done: Vec<String> = point
                .durable_steps()
                .into_iter()
                .map(|(_, name)| name)
                .collect();
            for (name, key) in ran {
                assert!(
                    !done.contains(&name),
                    "crash after {at:?}: step {name} ran again though its result was durable"
                );
                assert_eq!(
                    Some(&key),
                    keys.get(&name),
                    "crash after {at:?}: step {name}'s idempotency key changed"
                );
            }
        })
        .await
        .expect("every crash point ends");
    // Start, ten Began and ten Step, Timer and Fired, Signal, Wait and
    // Waited, Done.
    assert_eq!(report.records, 27, "the uncrashed run's records");
    assert_eq!(report.crash_points, 28);
}
