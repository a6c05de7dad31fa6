//! Sagas (issue 15): compensations registered by steps, run durably newest
//! first when the workflow fails or is cancelled. A step that fails for
//! good, a cancellation, a cancellation that interrupts a step (settled
//! under its key, then undone), a second cancellation during the
//! compensations, a compensation that fails for good; and both ways of
//! failing crashed at every record boundary, ending the same.

use std::collections::BTreeMap;
use std::future::{Ready, ready};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::core::Record;
use fusee::core::record::iter_canonical;
use fusee::storage::{LogStore, MemoryStorage, Storage};
use fusee::{
    AnyStorage, Config, Ctx, Engine, Error, Failure, IdPolicy, RetryPolicy, Saga, Signal,
    StepContext, StepError, Workflow,
};
use tokio::sync::Semaphore;

/// A step or compensation that ran: (workflow ID, run, name, key, value
/// it was given or returned).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Call {
    wf: String,
    run: u64,
    name: String,
    key: String,
    value: u64,
}

type Calls = Arc<Mutex<Vec<Call>>>;

/// A forward step that notes its call and returns `value`.
fn act(
    calls: &Calls,
    ctx: &Ctx,
    name: &str,
    value: u64,
) -> impl Fn(StepContext) -> Ready<Result<u64, StepError>> + Send + Sync + 'static {
    let (calls, wf, run, name) = (
        Arc::clone(calls),
        ctx.workflow_id(),
        ctx.run_id(),
        name.to_string(),
    );
    move |step| {
        calls.lock().unwrap().push(Call {
            wf: wf.clone(),
            run,
            name: name.clone(),
            key: step.key().to_string(),
            value,
        });
        ready(Ok(value))
    }
}

/// A compensation that notes its call with the forward step's value.
fn undo(
    calls: &Calls,
    ctx: &Ctx,
    name: &str,
) -> impl Fn(u64, StepContext) -> Ready<Result<(), StepError>> + Send + Sync + 'static {
    let (calls, wf, run, name) = (
        Arc::clone(calls),
        ctx.workflow_id(),
        ctx.run_id(),
        name.to_string(),
    );
    move |value, step| {
        calls.lock().unwrap().push(Call {
            wf: wf.clone(),
            run,
            name: name.clone(),
            key: step.key().to_string(),
            value,
        });
        ready(Ok(()))
    }
}

fn names(calls: &Calls, wf: &str) -> Vec<String> {
    calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.wf == wf)
        .map(|c| c.name.clone())
        .collect()
}

fn quick() -> RetryPolicy {
    RetryPolicy::default().backoff(Duration::from_millis(1), 1.0, Duration::from_millis(1))
}

const TRIP: Workflow<bool, u64> = Workflow::new("trip");
const NEVER: Signal<()> = Signal::new("never");

/// Flight, a hand-registered compensation, hotel, then car: the car fails
/// for good when `fail`.
fn register_trip(engine: &Engine, calls: Calls) {
    engine.register(TRIP, move |ctx: Ctx, fail: bool| {
        let calls = Arc::clone(&calls);
        async move {
            let saga = Saga::new(&ctx);
            let s = saga.clone();
            let c = ctx.clone();
            saga.run(async move {
                let flight = s
                    .step("flight", act(&calls, &c, "flight", 1))
                    .compensate("unflight", undo(&calls, &c, "unflight"))
                    .await?;
                s.add("unmail", act(&calls, &c, "unmail", 0));
                let hotel = s
                    .step("hotel", act(&calls, &c, "hotel", 10))
                    .compensate("unhotel", undo(&calls, &c, "unhotel"))
                    .await?;
                let car = s.step("car", move |_| async move {
                    if fail {
                        return Err(StepError::fatal("no cars left").kind("sold-out"));
                    }
                    Ok(100)
                });
                let car = car.compensate("uncar", undo(&calls, &c, "uncar")).await?;
                Ok(flight + hotel + car)
            })
            .await
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_fails_for_good_undoes_the_ones_before_it_newest_first() {
    let engine = Engine::open(Config::memory().shards(2)).await.unwrap();
    let calls: Calls = Arc::default();
    register_trip(&engine, Arc::clone(&calls));
    assert_eq!(engine.execute(TRIP, "ok", &false).await.unwrap(), 111);
    assert_eq!(names(&calls, "ok"), ["flight", "hotel"], "nothing undone");

    match engine.execute(TRIP, "fail", &true).await {
        Err(Error::Failed {
            status, failure, ..
        }) => {
            assert_eq!(status, "failed");
            assert_eq!(failure.kind.as_deref(), Some("sold-out"));
            assert_eq!(failure.message, "no cars left");
        }
        other => panic!("expected the car's failure, found {other:?}"),
    }
    assert_eq!(
        names(&calls, "fail"),
        ["flight", "hotel", "unhotel", "unmail", "unflight"]
    );
    let by_name: BTreeMap<String, Call> = calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.wf == "fail")
        .map(|c| (c.name.clone(), c.clone()))
        .collect();
    // Each compensation was given its step's result, and its step's key
    // with /undo.
    for (step, comp) in [("flight", "unflight"), ("hotel", "unhotel")] {
        assert_eq!(by_name[comp].value, by_name[step].value);
        assert_eq!(by_name[comp].key, format!("{}/undo", by_name[step].key));
    }
    assert!(
        by_name["flight"].key.starts_with("fail/saga/"),
        "{}",
        by_name["flight"].key
    );
    let keys: std::collections::BTreeSet<_> = by_name.values().map(|c| c.key.clone()).collect();
    assert_eq!(keys.len(), by_name.len(), "every key differs: {by_name:?}");
    engine.close().await.unwrap();
}

const CANCELLED: Workflow<(), u64> = Workflow::new("cancelled");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_saga_undoes_what_it_did_and_ends_cancelled() {
    let engine = Engine::open(Config::memory().shards(2)).await.unwrap();
    let calls: Calls = Arc::default();
    let c2 = Arc::clone(&calls);
    engine.register(CANCELLED, move |ctx: Ctx, ()| {
        let calls = Arc::clone(&c2);
        async move {
            let saga = Saga::new(&ctx);
            let s = saga.clone();
            let c = ctx.clone();
            saga.run(async move {
                let a = s
                    .step("a", act(&calls, &c, "a", 1))
                    .compensate("undo-a", undo(&calls, &c, "undo-a"))
                    .await?;
                let b = s
                    .step("b", act(&calls, &c, "b", 2))
                    .compensate("undo-b", undo(&calls, &c, "undo-b"))
                    .await?;
                c.wait_for(&NEVER).await?;
                Ok(a + b)
            })
            .await
        }
    });
    engine.start(CANCELLED, "c", &()).await.unwrap();
    wait_until(|| names(&calls, "c").len() == 2).await;
    engine.cancel("c", "changed plans").await.unwrap();
    match engine.result(CANCELLED, "c").await {
        Err(Error::Failed {
            status, failure, ..
        }) => assert_eq!(
            (status, failure.message.as_str()),
            ("cancelled", "changed plans")
        ),
        other => panic!("expected a cancelled run, found {other:?}"),
    }
    assert_eq!(names(&calls, "c"), ["a", "b", "undo-b", "undo-a"]);
    engine.close().await.unwrap();
}

async fn wait_until(mut ready: impl FnMut() -> bool) {
    for _ in 0..5000 {
        if ready() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the condition never came true");
}

const GATED: Workflow<bool, u64> = Workflow::new("gated");

/// A service whose calls wait at a gate, and apply their effect once per
/// key.
#[derive(Default)]
struct Service {
    /// Calls made: (name, key).
    calls: Mutex<Vec<(String, String)>>,
    /// Effects applied, by key.
    applied: Mutex<BTreeMap<String, String>>,
}

impl Service {
    fn call(&self, name: &str, key: &str) {
        self.calls
            .lock()
            .unwrap()
            .push((name.to_string(), key.to_string()));
    }

    fn apply(&self, name: &str, key: &str) {
        self.applied
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_insert_with(|| name.to_string());
    }

    fn called(&self, name: &str) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, k)| k.clone())
            .collect()
    }

    fn applied(&self) -> Vec<String> {
        self.applied.lock().unwrap().values().cloned().collect()
    }
}

/// "hold" (ungated), then "charge" (gated when `!gate_refund`), both with
/// compensations ("refund" gated when `gate_refund`); then waits for ever.
fn register_gated(engine: &Engine, service: Arc<Service>, gate: Arc<Semaphore>) {
    engine.register(GATED, move |ctx: Ctx, gate_refund: bool| {
        let (service, gate) = (Arc::clone(&service), Arc::clone(&gate));
        async move {
            let saga = Saga::new(&ctx);
            let s = saga.clone();
            let c = ctx.clone();
            let gated = move |name: &'static str, at_gate: bool| {
                let (service, gate) = (Arc::clone(&service), Arc::clone(&gate));
                move |key: String| {
                    let (service, gate) = (Arc::clone(&service), Arc::clone(&gate));
                    async move {
                        service.call(name, &key);
                        if at_gate {
                            let _pass = gate.acquire().await;
                        }
                        service.apply(name, &key);
                        Ok::<_, StepError>(1u64)
                    }
                }
            };
            let (hold, release) = (gated("hold", false), gated("release", false));
            let (charge, refund) = (gated("charge", !gate_refund), gated("refund", gate_refund));
            saga.run(async move {
                s.step("hold", move |step| hold(step.key().to_string()))
                    .compensate("release", move |_, step| {
                        let release = release.clone();
                        async move { release(step.key().to_string()).await.map(|_| ()) }
                    })
                    .await?;
                s.step("charge", move |step| charge(step.key().to_string()))
                    .compensate("refund", move |_, step| {
                        let refund = refund.clone();
                        async move { refund(step.key().to_string()).await.map(|_| ()) }
                    })
                    .retry(quick())
                    .await?;
                c.wait_for(&NEVER).await?;
                Ok(0)
            })
            .await
        }
    });
}

async fn expect_cancelled(engine: &Engine, id: &str) {
    match engine.result(GATED, id).await {
        Err(Error::Failed { status, .. }) => assert_eq!(status, "cancelled"),
        other => panic!("expected a cancelled run, found {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_a_cancellation_interrupts_is_settled_under_its_key_and_undone() {
    let engine = Engine::open(Config::memory().shards(1)).await.unwrap();
    let (service, gate) = (Arc::new(Service::default()), Arc::new(Semaphore::new(0)));
    register_gated(&engine, Arc::clone(&service), Arc::clone(&gate));
    engine.start(GATED, "g", &false).await.unwrap();
    // The charge is at the gate when the cancellation comes.
    wait_until(|| service.called("charge").len() == 1).await;
    engine.cancel("g", "stop").await.unwrap();
    // The saga calls the charge again, under the same key, to learn what
    // it did: it waits at the gate too.
    wait_until(|| service.called("charge").len() == 2).await;
    gate.add_permits(100);
    expect_cancelled(&engine, "g").await;
    let charged = service.called("charge");
    assert_eq!(charged[0], charged[1], "the same key both times");
    // Charged once (by key), then refunded; the hold released.
    let mut applied = service.applied();
    applied.sort();
    assert_eq!(applied, ["charge", "hold", "refund", "release"]);
    assert_eq!(service.called("refund"), [format!("{}/undo", charged[0])]);
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_cancellation_does_not_stop_the_compensations() {
    let engine = Engine::open(Config::memory().shards(1)).await.unwrap();
    let (service, gate) = (Arc::new(Service::default()), Arc::new(Semaphore::new(0)));
    register_gated(&engine, Arc::clone(&service), Arc::clone(&gate));
    engine.start(GATED, "g2", &true).await.unwrap();
    wait_until(|| service.called("charge").len() == 1 && service.applied().len() == 2).await;
    engine.cancel("g2", "stop").await.unwrap();
    // The refund is at the gate when the second cancellation comes.
    wait_until(|| service.called("refund").len() == 1).await;
    engine.cancel("g2", "stop, really").await.unwrap();
    wait_until(|| service.called("refund").len() == 2).await;
    gate.add_permits(100);
    expect_cancelled(&engine, "g2").await;
    let refunds = service.called("refund");
    assert_eq!(
        refunds[0], refunds[1],
        "the refund called again under its key"
    );
    let mut applied = service.applied();
    applied.sort();
    assert_eq!(applied, ["charge", "hold", "refund", "release"]);
    engine.close().await.unwrap();
}

const STUBBORN: Workflow<(), ()> = Workflow::new("stubborn");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compensation_that_fails_for_good_is_reported_and_the_others_still_run() {
    let engine = Engine::open(Config::memory().shards(1)).await.unwrap();
    let calls: Calls = Arc::default();
    let attempts = Arc::new(AtomicU32::new(0));
    let (c2, a2) = (Arc::clone(&calls), Arc::clone(&attempts));
    engine.register(STUBBORN, move |ctx: Ctx, ()| {
        let (calls, attempts) = (Arc::clone(&c2), Arc::clone(&a2));
        async move {
            let saga = Saga::new(&ctx).compensation_retry(quick().attempts(3));
            let s = saga.clone();
            let c = ctx.clone();
            saga.run(async move {
                s.step("a", act(&calls, &c, "a", 1))
                    .compensate("undo-a", undo(&calls, &c, "undo-a"))
                    .await?;
                s.step("b", act(&calls, &c, "b", 2))
                    .compensate("undo-b", move |_: u64, _| {
                        let attempts = Arc::clone(&attempts);
                        async move {
                            attempts.fetch_add(1, Ordering::SeqCst);
                            Err::<(), _>(StepError::retryable("the bank is closed"))
                        }
                    })
                    .await?;
                Err::<(), _>(Failure::with_kind("gave-up", "the customer left"))
            })
            .await
        }
    });
    match engine.execute(STUBBORN, "s", &()).await {
        Err(Error::Failed {
            status, failure, ..
        }) => {
            assert_eq!(status, "failed");
            assert_eq!(failure.kind.as_deref(), Some("gave-up"));
            assert_eq!(
                failure.message,
                "the customer left; compensation \"undo-b\" failed: the bank is closed"
            );
        }
        other => panic!("expected a failed run, found {other:?}"),
    }
    assert_eq!(attempts.load(Ordering::SeqCst), 3, "retried by its policy");
    assert_eq!(names(&calls, "s"), ["a", "b", "undo-a"], "undo-a still ran");
    engine.close().await.unwrap();
}

// ---- Crashed at every record boundary ----

const READY_TO_CANCEL: Signal<()> = Signal::new("ready");
const CANCELLER: Workflow<(), ()> = Workflow::new("canceller");

/// The trip that fails ("trip-fail"), and one cancelled by the canceller
/// once its steps are done ("trip-cancel"), on one shard.
fn register_crashable(engine: &Engine, calls: Calls) {
    register_trip(engine, Arc::clone(&calls));
    engine.register(CANCELLED, move |ctx: Ctx, ()| {
        let calls = Arc::clone(&calls);
        async move {
            let saga = Saga::new(&ctx);
            let s = saga.clone();
            let c = ctx.clone();
            saga.run(async move {
                let a = s
                    .step("a", act(&calls, &c, "a", 1))
                    .compensate("undo-a", undo(&calls, &c, "undo-a"))
                    .await?;
                c.signal("canceller", READY_TO_CANCEL, &())?;
                c.wait_for(&NEVER).await?;
                Ok(a)
            })
            .await
        }
    });
    engine.register(CANCELLER, |ctx: Ctx, ()| async move {
        ctx.wait_for(&READY_TO_CANCEL).await?;
        ctx.cancel("trip-cancel", "changed plans");
        Ok::<_, Failure>(())
    });
}

/// How the two trips ended.
async fn carry_on(memory: &MemoryStorage, calls: Calls) -> (String, String) {
    let config = Config::memory().shards(1);
    let engine = Engine::open_on(config, AnyStorage::Memory(memory.clone()))
        .await
        .expect("open");
    register_crashable(&engine, calls);
    // Starts whose acknowledgement a crash may have taken are sent again.
    engine
        .start_with(CANCELLER, "canceller", &(), IdPolicy::Attach)
        .await
        .expect("start");
    engine
        .start_with(TRIP, "trip-fail", &true, IdPolicy::Attach)
        .await
        .expect("start");
    engine
        .start_with(CANCELLED, "trip-cancel", &(), IdPolicy::Attach)
        .await
        .expect("start");
    let ended = |r: Result<u64, Error>| match r {
        Err(Error::Failed {
            status, failure, ..
        }) => format!("{status}: {failure}"),
        other => format!("{other:?}"),
    };
    let ends = async {
        let failed = ended(engine.result(TRIP, "trip-fail").await);
        let cancelled = ended(engine.result(CANCELLED, "trip-cancel").await);
        (failed, cancelled)
    };
    tokio::time::timeout(Duration::from_secs(20), ends)
        .await
        .expect("both trips end within 20 s")
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
async fn every_crash_point_of_a_failing_and_a_cancelled_saga_ends_the_same() {
    let memory = MemoryStorage::new();
    let reference: Calls = Arc::default();
    let expected = carry_on(&memory, Arc::clone(&reference)).await;
    assert_eq!(
        expected,
        (
            "failed: sold-out: no cars left".to_string(),
            "cancelled: cancelled: changed plans".to_string()
        )
    );
    assert_eq!(
        names(&reference, "trip-fail"),
        ["flight", "hotel", "unhotel", "unmail", "unflight"]
    );
    assert_eq!(names(&reference, "trip-cancel"), ["a", "undo-a"]);
    // Each step's key, by workflow and name.
    let keys: BTreeMap<(String, String), String> = reference
        .lock()
        .unwrap()
        .iter()
        .map(|c| ((c.wf.clone(), c.name.clone()), c.key.clone()))
        .collect();
    let records = log_records(&memory);
    assert!(records.len() > 20, "{} records", records.len());
    let uuids = records
        .iter()
        .filter(|b| {
            matches!(
                iter_canonical(b).next(),
                Some(Ok((Record::Value { .. }, _)))
            )
        })
        .count();
    assert_eq!(uuids, 2, "each saga records its uuid");
    for n in 0..=records.len() {
        let prefix = &records[..n];
        let calls: Calls = Arc::default();
        let got = carry_on(&store_with(prefix), Arc::clone(&calls)).await;
        assert_eq!(
            got,
            expected,
            "crash after {n} of {} records",
            records.len()
        );
        let done = recorded_steps(prefix);
        for c in calls.lock().unwrap().iter() {
            assert!(
                !done.contains(&(c.run, c.name.clone())),
                "crash after {n} records: {c:?} ran again though its result was durable"
            );
            // A key is the same wherever its saga's uuid was durable: a
            // step run again after a crash is applied once by its service.
            if keys.get(&(c.wf.clone(), c.name.clone())) != Some(&c.key) {
                assert!(
                    !prefix_holds_uuid_of(prefix, c.run),
                    "crash after {n} records: {c:?} has another key than {:?}",
                    keys.get(&(c.wf.clone(), c.name.clone()))
                );
            }
        }
    }
}

/// Whether `records` hold run `run`'s saga uuid (its `Value`).
fn prefix_holds_uuid_of(records: &[Vec<u8>], run: u64) -> bool {
    records.iter().any(|bytes| {
        matches!(
            iter_canonical(bytes).next(),
            Some(Ok((Record::Value { run: r, .. }, _))) if r == run
        )
    })
}
