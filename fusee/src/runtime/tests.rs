//! The shard loop driven by hand, single-threaded: inputs are handed in
//! batches the test chooses, so two things that race in production (a
//! signal and a wait's timeout) can be made to land in one iteration.

use std::time::Duration;

use fusee_core::record::{Record, RunId, Status, iter_canonical};
use fusee_storage::{LogStore, MemoryStorage};
use tokio::sync::oneshot;

use super::{Effects, HOUSEKEEPING_MS, Input, LoopConfig, ShardLoop};
use crate::any_storage::AnyStorage;
use crate::client::IdPolicy;
use crate::ctx::Registry;
use crate::{Ctx, Failure, Signal, Workflow};

const WAITER: Workflow<(), String> = Workflow::new("waiter");
const GO: Signal<String> = Signal::new("go");
const START_MS: u64 = 1_000_000;

fn config() -> LoopConfig {
    LoopConfig {
        shards: 1,
        max_payload: 1 << 20,
        max_stream_chunks: 1_000_000,
        checkpoint_bytes: u64::MAX,
        checkpoint_interval_ms: u64::MAX / 2,
        retention_ms: 60_000,
        history_ms: 30_000,
        history_max_bytes: 1 << 20,
        stream_apart_bytes: 64 << 10,
        stream_ms: 60_000,
        park_after_ms: u64::MAX / 2,
        doze_after_ms: u64::MAX / 2,
        compact_after_bytes: u64::MAX,
        seal_idle_ms: 20,
        seal_interval_ms: 1000,
        stopwatch: None,
        #[cfg(feature = "testing")]
        sabotage: None,
    }
}

/// Runs the loop at `now_ms` until it has nothing left to do, carrying out
/// flushes at once (steps are not used here). Bounded: a loop that never
/// settles fails the test.
fn settle(shard: &mut ShardLoop, now_ms: u64) {
    for _ in 0..1000 {
        let Effects {
            flush,
            seal,
            steps,
            more,
            ..
        } = shard.run(now_ms);
        assert!(steps.is_empty(), "this harness runs no steps");
        if let Some(mut ticket) = seal {
            ticket.run();
            shard.handle(Input::Sealed { ticket });
        }
        match flush {
            Some(mut ticket) => {
                ticket.run();
                shard.handle(Input::Flushed { ticket, micros: 0 });
            }
            None if !more => return,
            None => {}
        }
    }
    panic!("the loop did not settle");
}

/// A signal and the wait's timeout handled in one iteration: the core
/// queues both events, and only the first may end the wait. The run ends
/// normally (with one outcome or the other), never stopped for a second
/// `Waited`.
#[test]
fn a_signal_and_a_timeout_in_one_iteration_end_the_wait_once() {
    let storage = AnyStorage::Memory(MemoryStorage::new());
    let registry = Registry::default();
    registry
        .register(WAITER, |ctx: Ctx, ()| async move {
            let got = ctx.wait_for(&GO).timeout(Duration::from_secs(10)).await?;
            Ok::<_, Failure>(got.unwrap_or_else(|| "timed out".into()))
        })
        .expect("a fresh registry");
    let mut shard = ShardLoop::open(&storage, 0, config(), registry, START_MS).unwrap();
    let (reply, _started) = oneshot::channel();
    shard.handle(Input::Start {
        wtype: "waiter".into(),
        id: "w".into(),
        input: b"null".to_vec(),
        policy: IdPolicy::NewOnly,
        trace: None,
        version: None,
        attrs: None,
        reply,
    });
    settle(&mut shard, START_MS);
    let (reply, _signalled) = oneshot::channel();
    shard.handle(Input::Signal {
        id: "w".into(),
        name: GO.name().into(),
        payload: b"\"go\"".to_vec(),
        dedup: 0,
        reply,
    });
    // The clock passed the timeout too: one iteration sees both.
    settle(&mut shard, START_MS + 20_000);

    let mut waited = 0;
    let mut done = None;
    let run = shard.core.find("w").and_then(|f| match f {
        fusee_core::shard::Found::Loaded(run) => Some(run),
        fusee_core::shard::Found::Parked(_) => None,
    });
    let run = run.expect("the run is loaded");
    assert_eq!(shard.live.get(&run).and_then(|l| l.stopped.clone()), None);
    shard
        .log
        .read(0, &mut |_, bytes| {
            if let Some(Ok((rec, _))) = iter_canonical(bytes).next() {
                match rec {
                    Record::Waited { .. } => waited += 1,
                    Record::Done { status, .. } => done = Some(status),
                    _ => {}
                }
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(waited, 1, "the wait ended once");
    assert_eq!(done, Some(Status::Ok));
}

/// A close sent again (after the sender crashed before the target's
/// acknowledgement) is recorded once: the target finds its key in the
/// run's journal, even after the run parked in between.
#[test]
fn a_cancel_sent_twice_is_recorded_once() {
    let storage = AnyStorage::Memory(MemoryStorage::new());
    let registry = Registry::default();
    registry
        .register(WAITER, |ctx: Ctx, ()| async move {
            // Waits on, whatever happens: each cancellation is caught.
            loop {
                if let Ok(Some(v)) = ctx.wait_for(&GO).await {
                    return Ok::<_, Failure>(v);
                }
            }
        })
        .expect("a fresh registry");
    let mut config = config();
    config.park_after_ms = 0;
    let mut shard = ShardLoop::open(&storage, 0, config, registry, START_MS).unwrap();
    let (reply, _started) = oneshot::channel();
    shard.handle(Input::Start {
        wtype: "waiter".into(),
        id: "w".into(),
        input: b"null".to_vec(),
        policy: IdPolicy::NewOnly,
        trace: None,
        version: None,
        attrs: None,
        reply,
    });
    settle(&mut shard, START_MS);
    let close = |id: u64, dedup: u64| Input::Message {
        from: 0,
        id,
        message: super::messages::Message::Close {
            target: "w".into(),
            wtype: "".into(),
            parent: None,
            terminate: false,
            reason: fusee_core::record::Payload::from(&b"stop"[..]),
            dedup,
            grace_ms: None,
        },
    };
    shard.handle(close(1, 77));
    settle(&mut shard, START_MS + 1);
    // The same close again, under another message id (the sender's outbox
    // after a restart), once the run has parked.
    settle(&mut shard, START_MS + 2);
    assert!(shard.core.parked_len() == 1, "the run parked");
    shard.handle(close(9, 77));
    settle(&mut shard, START_MS + 3);
    // Another close is another cancellation.
    shard.handle(close(10, 78));
    settle(&mut shard, START_MS + 4);

    let mut cancels = 0;
    shard
        .log
        .read(0, &mut |_, bytes| {
            if let Some(Ok((Record::Cancel { .. }, _))) = iter_canonical(bytes).next() {
                cancels += 1;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(cancels, 2, "77 once, 78 once");
}

/// Parking scans are skipped until a run could park, and no run parks
/// later for it: each parks `park_after` after its code was last active,
/// the next scan being timed by the most recent of them.
#[test]
fn each_run_parks_park_after_its_last_activity_and_scans_wait_for_it() {
    const PARK_AFTER_MS: u64 = 10_000;
    let storage = AnyStorage::Memory(MemoryStorage::new());
    let registry = Registry::default();
    registry
        .register(WAITER, |ctx: Ctx, ()| async move {
            Ok::<_, Failure>(ctx.wait_for(&GO).await?.unwrap_or_default())
        })
        .expect("a fresh registry");
    let mut config = config();
    config.park_after_ms = PARK_AFTER_MS;
    let mut shard = ShardLoop::open(&storage, 0, config, registry, START_MS).unwrap();
    let mut replies = Vec::new();
    let mut start = |shard: &mut ShardLoop, id: &str, now_ms: u64| {
        let (reply, started) = oneshot::channel();
        replies.push(started);
        shard.handle(Input::Start {
            wtype: "waiter".into(),
            id: id.into(),
            input: b"null".to_vec(),
            policy: IdPolicy::NewOnly,
            trace: None,
            version: None,
            attrs: None,
            reply,
        });
        settle(shard, now_ms);
    };
    start(&mut shard, "a", START_MS);
    // A scan before any run could park finds nothing and waits for "a".
    settle(&mut shard, START_MS + 1_000);
    assert_eq!(shard.core.parked_len(), 0);
    assert_eq!(shard.parking.scan_ms(), START_MS + PARK_AFTER_MS);
    start(&mut shard, "b", START_MS + 5_000);
    // Housekeeping runs every HOUSEKEEPING_MS: the times below are that
    // far apart, so each settle may scan.
    settle(&mut shard, START_MS + PARK_AFTER_MS - HOUSEKEEPING_MS);
    assert_eq!(
        shard.core.parked_len(),
        0,
        "nothing idle for park_after yet"
    );
    settle(&mut shard, START_MS + PARK_AFTER_MS);
    assert_eq!(shard.core.parked_len(), 1, "\"a\" parks on time");
    assert_eq!(
        shard.parking.scan_ms(),
        START_MS + 5_000 + PARK_AFTER_MS,
        "the next scan is when \"b\" may park"
    );
    settle(
        &mut shard,
        START_MS + 5_000 + PARK_AFTER_MS - HOUSEKEEPING_MS,
    );
    assert_eq!(shard.core.parked_len(), 1);
    settle(&mut shard, START_MS + 5_000 + PARK_AFTER_MS);
    assert_eq!(shard.core.parked_len(), 2, "\"b\" parks on time");
}

/// Telemetry counts a record when the flush that makes it durable comes
/// back, not when it is appended; one a crash takes back never.
#[test]
fn telemetry_counts_records_when_durable_and_not_before() {
    let storage = AnyStorage::Memory(MemoryStorage::new());
    let registry = Registry::default();
    registry
        .register(WAITER, |ctx: Ctx, ()| async move {
            ctx.wait_for(&GO).await?;
            Ok::<_, Failure>(String::new())
        })
        .expect("a fresh registry");
    let telemetry = std::sync::Arc::new(crate::telemetry::Telemetry::default());
    let starts = || {
        telemetry
            .text()
            .lines()
            .find_map(|l| l.strip_prefix("fusee_run_starts_total{workflow=\"waiter\"} "))
            .map_or(0, |v| v.parse::<u64>().unwrap())
    };
    let mut shard = ShardLoop::open(&storage, 0, config(), registry, START_MS).unwrap();
    shard.attach_telemetry(telemetry.shard(0));
    let start = |shard: &mut ShardLoop, id: &str| {
        let (reply, _) = oneshot::channel();
        shard.handle(Input::Start {
            wtype: "waiter".into(),
            id: id.into(),
            input: b"null".to_vec(),
            policy: IdPolicy::NewOnly,
            trace: None,
            version: None,
            attrs: None,
            reply,
        });
    };
    start(&mut shard, "a");
    let mut ticket = shard.run(START_MS).flush.expect("a flush begins");
    assert_eq!(starts(), 0, "counted before durable");
    ticket.run();
    shard.handle(Input::Flushed { ticket, micros: 7 });
    let _ = shard.run(START_MS + 1);
    assert_eq!(starts(), 1);
    // A second start appended, then a crash before its flush comes back.
    start(&mut shard, "b");
    let ticket = shard.run(START_MS + 2).flush.expect("a flush begins");
    drop((ticket, shard));
    assert_eq!(starts(), 1, "a record lost to a crash was counted");
}

const SLEEPER: Workflow<u64, ()> = Workflow::new("sleeper");

fn sleeper_registry() -> Registry {
    let registry = Registry::default();
    registry
        .register(SLEEPER, |ctx: Ctx, secs: u64| async move {
            ctx.sleep("nap", Duration::from_secs(secs)).await?;
            Ok::<_, Failure>(())
        })
        .expect("a fresh registry");
    registry
}

/// A shard opened at `START_MS` on a fresh in-memory store, and the store
/// (to crash it later).
fn open_fresh(registry: Registry) -> (MemoryStorage, ShardLoop) {
    let storage = MemoryStorage::new();
    let shard = ShardLoop::open(
        &AnyStorage::Memory(storage.clone()),
        0,
        config(),
        registry,
        START_MS,
    )
    .unwrap();
    (storage, shard)
}

/// Asks `shard` to start a run of `wtype` as `id` with JSON `input`.
fn start_run(shard: &mut ShardLoop, wtype: &str, id: String, input: &str) {
    let (reply, _started) = oneshot::channel();
    shard.handle(Input::Start {
        wtype: wtype.into(),
        id,
        input: input.as_bytes().to_vec(),
        policy: IdPolicy::NewOnly,
        trace: None,
        version: None,
        attrs: None,
        reply,
    });
}

const NAPPER: Workflow<u64, ()> = Workflow::new("napper");

/// Opens a shard after a crash, `reopen_ms`, with 1,000 sleepers of an hour
/// and one "soon" due at `soon_ms` recovered, its first pass not run yet.
fn reopened_with_sleepers(soon_ms: u64, reopen_ms: u64) -> (ShardLoop, Vec<RunId>) {
    let registry = || {
        let registry = sleeper_registry();
        registry
            .register(NAPPER, |ctx: Ctx, until_ms: u64| async move {
                let left = until_ms.saturating_sub(START_MS);
                ctx.sleep("nap", Duration::from_millis(left)).await?;
                Ok::<_, Failure>(())
            })
            .expect("a fresh type");
        registry
    };
    let (storage, mut shard) = open_fresh(registry());
    for i in 0..1_000 {
        start_run(&mut shard, SLEEPER.name(), format!("late-{i}"), "3600");
    }
    start_run(
        &mut shard,
        NAPPER.name(),
        "soon".into(),
        &soon_ms.to_string(),
    );
    settle(&mut shard, START_MS);
    drop(shard);
    let storage = AnyStorage::Memory(storage.crash());
    let shard = ShardLoop::open(&storage, 0, config(), registry(), reopen_ms).unwrap();
    let sleepers = (0..1_000)
        .map(|i| match shard.core.find(&format!("late-{i}")) {
            Some(fusee_core::shard::Found::Loaded(run)) => run,
            other => panic!("late-{i} is not loaded after the open: {other:?}"),
        })
        .collect();
    (shard, sleepers)
}

/// Recovered sleepers' code waits while a timer is due soon: their replays
/// would take the time of the timers coming due. Once none is, they start.
#[test]
fn recovered_sleepers_start_their_code_only_when_no_timer_is_due_soon() {
    let now_ms = START_MS + 1_000;
    let (mut shard, sleepers) = reopened_with_sleepers(now_ms + 30, now_ms);
    let started = |shard: &ShardLoop| {
        sleepers
            .iter()
            .filter(|r| shard.live.get(r).is_some())
            .count()
    };
    let effects = shard.run(now_ms);
    assert_eq!(
        started(&shard),
        0,
        "sleepers started with a timer due in 30 ms"
    );
    assert!(
        !effects.more,
        "a shard with only waiting runs to start has no work left"
    );
    settle(&mut shard, now_ms + 30);
    assert_eq!(
        started(&shard),
        sleepers.len(),
        "sleepers did not start once quiet"
    );
}

/// However busy with timers, a shard starts its recovered sleepers' code
/// once the grace after its open has passed.
#[test]
fn recovered_sleepers_start_their_code_after_the_grace_though_timers_are_due_soon() {
    let now_ms = START_MS + 1_000;
    let grace_ms = super::DEFERRED_WAITING_GRACE_MS;
    let (mut shard, sleepers) = reopened_with_sleepers(now_ms + grace_ms + 30, now_ms);
    let _ = shard.run(now_ms + grace_ms);
    let started = sleepers
        .iter()
        .filter(|r| shard.live.get(r).is_some())
        .count();
    assert!(started > 0, "no sleeper started after the grace");
}

const STEPPER: Workflow<(), u64> = Workflow::new("stepper");

/// A recovered run cut mid-way (here: a step in flight, which waits on
/// nothing the shard announces) starts its code before the recovered runs
/// that sleep, though it was recovered after 2,000 of them: its step runs
/// again in the first pass of the loop, not after every sleeper's replay.
#[test]
fn a_reopened_shard_starts_a_run_cut_mid_way_before_its_sleepers() {
    const SLEEPERS: usize = 2_000;
    let registry = || {
        let registry = sleeper_registry();
        registry
            .register(STEPPER, |ctx: Ctx, (): ()| async move {
                Ok::<_, Failure>(ctx.step("work", |_| async { Ok(7u64) }).await?)
            })
            .expect("a fresh type");
        registry
    };
    let (storage, mut shard) = open_fresh(registry());
    for i in 0..SLEEPERS {
        start_run(&mut shard, SLEEPER.name(), format!("late-{i}"), "3600");
    }
    settle(&mut shard, START_MS);
    start_run(&mut shard, STEPPER.name(), "cut".into(), "null");
    // Until the step's `Began` is durable; its attempt is dropped unrun,
    // as a crash would.
    let mut jobs = 0;
    for _ in 0..100 {
        let effects = shard.run(START_MS);
        jobs += effects.steps.len();
        match effects.flush {
            Some(mut ticket) => {
                ticket.run();
                shard.handle(Input::Flushed { ticket, micros: 0 });
            }
            None if !effects.more => break,
            None => {}
        }
    }
    assert_eq!(jobs, 1, "the step was handed out once before the crash");
    drop(shard);

    let now_ms = START_MS + 1_000;
    let storage = AnyStorage::Memory(storage.crash());
    let mut shard = ShardLoop::open(&storage, 0, config(), registry(), now_ms).unwrap();
    let cut = match shard.core.find("cut") {
        Some(fusee_core::shard::Found::Loaded(run)) => run,
        other => panic!("the cut run is not loaded after the open: {other:?}"),
    };
    let mut effects = shard.run(now_ms);
    assert!(
        shard.live.get(&cut).is_some(),
        "the cut run's code did not start in the first pass"
    );
    // The step goes out once its new `Began` is durable.
    let mut handed_out = false;
    for _ in 0..4 {
        if effects.steps.iter().any(|job| job.run == cut) {
            handed_out = true;
            break;
        }
        if let Some(mut ticket) = effects.flush.take() {
            ticket.run();
            shard.handle(Input::Flushed { ticket, micros: 0 });
        }
        effects = shard.run(now_ms);
    }
    assert!(handed_out, "its step was not handed out again");
    let sleepers_started = (0..SLEEPERS)
        .filter(|i| match shard.core.find(&format!("late-{i}")) {
            Some(fusee_core::shard::Found::Loaded(run)) => shard.live.get(&run).is_some(),
            _ => false,
        })
        .count();
    assert!(
        sleepers_started <= 5 * super::DEFERRED_STARTS_MAX,
        "{sleepers_started} sleepers' code started first"
    );
}

/// A shard reopened after a crash starts no run's code in its open: a
/// timer already due fires, and its run's code runs to its end, in the
/// first pass of the loop, while most of the other recovered runs' code
/// has not started yet (a bounded number start per pass, when nothing else
/// is ready). Then every run's code starts, and none is stopped.
#[test]
fn a_reopened_shard_fires_a_due_timer_before_starting_every_runs_code() {
    const SLEEPERS: usize = 2_000;
    let storage = MemoryStorage::new();
    let mut shard = ShardLoop::open(
        &AnyStorage::Memory(storage.clone()),
        0,
        config(),
        sleeper_registry(),
        START_MS,
    )
    .unwrap();
    let start = |shard: &mut ShardLoop, id: String, secs: u64| {
        let (reply, _started) = oneshot::channel();
        shard.handle(Input::Start {
            wtype: SLEEPER.name().into(),
            id,
            input: secs.to_string().into_bytes(),
            policy: IdPolicy::NewOnly,
            trace: None,
            version: None,
            attrs: None,
            reply,
        });
    };
    for i in 0..SLEEPERS {
        start(&mut shard, format!("late-{i}"), 3_600);
    }
    start(&mut shard, "soon".into(), 10);
    settle(&mut shard, START_MS);
    drop(shard);

    // The crash, then the open, 20 s later: "soon" is overdue.
    let now_ms = START_MS + 20_000;
    let storage = AnyStorage::Memory(storage.crash());
    let mut shard = ShardLoop::open(&storage, 0, config(), sleeper_registry(), now_ms).unwrap();
    let runs: Vec<_> = (0..SLEEPERS)
        .map(|i| format!("late-{i}"))
        .chain(["soon".to_string()])
        .map(|id| match shard.core.find(&id) {
            Some(fusee_core::shard::Found::Loaded(run)) => run,
            other => panic!("{id} is not loaded after the open: {other:?}"),
        })
        .collect();
    let soon = runs[SLEEPERS];
    let started = |shard: &ShardLoop| runs.iter().filter(|r| shard.live.get(r).is_some()).count();
    assert_eq!(started(&shard), 0, "the open started runs' code");

    let _ = shard.run(now_ms);
    assert!(
        shard.core.get(soon).is_some_and(|l| l.done.is_some()),
        "the overdue timer's run did not end in the first pass"
    );
    let first_pass = started(&shard);
    assert!(
        first_pass <= super::DEFERRED_STARTS_MAX + 1,
        "{first_pass} runs' code started in the first pass"
    );

    settle(&mut shard, now_ms);
    assert_eq!(
        started(&shard),
        SLEEPERS,
        "every unfinished run's code starts (the finished one's is gone)"
    );
    for run in &runs[..SLEEPERS] {
        let live = shard.live.get(run).expect("started");
        assert!(
            live.stopped.is_none(),
            "run {run} stopped: {:?}",
            live.stopped
        );
        assert!(shard.core.get(*run).is_some_and(|l| l.done.is_none()));
    }
}

const TAGGED: Workflow<(), ()> = Workflow::new("tagged");

fn tagged_registry() -> Registry {
    let registry = Registry::default();
    registry
        .register(TAGGED, |_ctx: Ctx, ()| async move { Ok::<_, Failure>(()) })
        .expect("a fresh registry");
    registry
}

/// Starts runs `t{i}` of [`TAGGED`] for each `i`, with attribute `k` =
/// `i % 3`.
fn start_tagged(shard: &mut ShardLoop, ids: impl IntoIterator<Item = u32>) {
    for i in ids {
        let (reply, _started) = oneshot::channel();
        shard.handle(Input::Start {
            wtype: TAGGED.name().into(),
            id: format!("t{i}"),
            input: b"null".to_vec(),
            policy: IdPolicy::NewOnly,
            trace: None,
            version: None,
            attrs: Some(crate::attrs::SearchAttributes::new().int("k", i64::from(i % 3))),
            reply,
        });
    }
}

/// Every page of `filter` walked to the end: the runs' IDs in order.
fn walk_attr_pages(shard: &mut ShardLoop, filter: crate::client::ListFilter) -> Vec<String> {
    let (mut out, mut below) = (Vec::new(), RunId::MAX);
    for _ in 0..1_000 {
        let page = shard.attr_page(&filter, below).unwrap();
        out.extend(page.runs.into_iter().map(|r| r.id));
        match page.resume {
            Some(r) => below = r,
            None => return out,
        }
    }
    panic!("pages never ended");
}

/// Closes the shard at `now_ms` and waits for the close's reply.
fn close(shard: &mut ShardLoop, now_ms: u64) {
    let (reply, mut closed) = oneshot::channel();
    shard.handle(Input::Close { reply });
    settle(shard, now_ms);
    closed
        .try_recv()
        .expect("the close answered")
        .expect("the close succeeded");
}

/// Every checkpoint names the attribute index's snapshot as it stands: a
/// close's base is read by the next open (built at once, no run read);
/// runs the log after the last checkpoint changed are indexed again after
/// a crash; a later checkpoint names a delta of the runs changed since,
/// which the open after a crash applies (those runs' records are gone
/// from the log by then).
#[test]
fn every_checkpoint_names_the_attribute_snapshot_and_an_open_reads_it_back() {
    use crate::client::ListFilter;
    let mut parking = config();
    parking.park_after_ms = 0;
    let storage = MemoryStorage::new();
    let open = |now_ms: u64, config: &LoopConfig| {
        let any = AnyStorage::Memory(storage.crash());
        ShardLoop::open(&any, 0, config.clone(), tagged_registry(), now_ms).unwrap()
    };
    let expected = |runs: u32, k: u32| -> Vec<String> {
        (0..runs)
            .rev()
            .filter(|&i| i % 3 == k)
            .map(|i| format!("t{i}"))
            .collect()
    };
    let mut shard = open(START_MS, &parking);
    start_tagged(&mut shard, 0..300);
    settle(&mut shard, START_MS);
    settle(&mut shard, START_MS + 2 * HOUSEKEEPING_MS);
    assert!(shard.attr_index.built(), "the background build ended");
    close(&mut shard, START_MS + 2 * HOUSEKEEPING_MS);
    drop(shard);

    let mut shard = open(START_MS + 10_000, &parking);
    assert!(
        shard.attr_index.built(),
        "the open did not read the close's snapshot"
    );
    assert_eq!(shard.attr_snapshot.frames.len(), 1, "a base");
    assert_eq!(
        walk_attr_pages(&mut shard, ListFilter::new().attribute("k", 1).limit(40)),
        expected(300, 1)
    );
    // Runs started after the snapshot, then a crash with no checkpoint.
    start_tagged(&mut shard, 300..330);
    settle(&mut shard, START_MS + 10_000);
    drop(shard);
    let mut shard = open(START_MS + 20_000, &parking);
    assert!(shard.attr_index.built());
    assert_eq!(
        walk_attr_pages(&mut shard, ListFilter::new().attribute("k", 2).limit(40)),
        expected(330, 2),
        "runs the log after the snapshot's checkpoint holds are missing"
    );
    drop(shard);
    // A checkpoint that is not a close's names a delta; a crash after it
    // loses the log that held those runs' records, not their values.
    let mut every_second = parking.clone();
    every_second.checkpoint_interval_ms = 1_000;
    let mut shard = open(START_MS + 30_000, &every_second);
    start_tagged(&mut shard, 330..336);
    settle(&mut shard, START_MS + 30_000);
    settle(&mut shard, START_MS + 32_000);
    settle(&mut shard, START_MS + 32_000 + 2 * HOUSEKEEPING_MS);
    assert!(shard.metrics.checkpoints >= 1, "no checkpoint was taken");
    assert_eq!(shard.attr_snapshot.frames.len(), 2, "a base and a delta");
    drop(shard);
    let mut shard = open(START_MS + 40_000, &parking);
    assert!(
        shard.attr_index.built(),
        "the open did not read the snapshot"
    );
    assert_eq!(
        walk_attr_pages(&mut shard, ListFilter::new().attribute("k", 0).limit(40)),
        expected(336, 0),
        "runs a delta holds are missing"
    );
    assert_eq!(
        walk_attr_pages(
            &mut shard,
            ListFilter::new().attribute_above("k", 0).limit(25)
        ),
        (0..336)
            .rev()
            .filter(|&i| i % 3 != 0)
            .map(|i| format!("t{i}"))
            .collect::<Vec<_>>()
    );
}

const STREAMER: Workflow<(), ()> = Workflow::new("streamer");

/// A loaded run's journal past `SPILL_BYTES` goes to the run store at a
/// checkpoint (the run stays loaded, its journal in memory dropped), and
/// after a crash the reopened shard reads every chunk back from its
/// frames, then takes more.
#[test]
fn a_checkpoint_spills_a_long_journal_to_the_run_store_and_a_crash_keeps_it() {
    let registry = || {
        let registry = Registry::default();
        registry
            .register(STREAMER, |ctx: Ctx, ()| async move {
                let _tx = ctx.stream("t");
                ctx.wait_for(&GO).await?;
                Ok::<_, Failure>(())
            })
            .expect("a fresh registry");
        registry
    };
    let config = || LoopConfig {
        checkpoint_bytes: 64 << 10,
        ..config()
    };
    let storage = MemoryStorage::new();
    let mut shard = ShardLoop::open(
        &AnyStorage::Memory(storage.clone()),
        0,
        config(),
        registry(),
        START_MS,
    )
    .unwrap();
    start_run(&mut shard, STREAMER.name(), "s".into(), "null");
    settle(&mut shard, START_MS);
    let run = match shard.core.find("s") {
        Some(fusee_core::shard::Found::Loaded(run)) => run,
        other => panic!("s is not loaded: {other:?}"),
    };
    let journal = shard.run_journal(run).unwrap();
    let seq = crate::stream::scan(&journal, "t", 0, 0)
        .unwrap()
        .seq
        .unwrap();
    let chunk = |i: u64| vec![b'a' + (i % 26) as u8; 8 << 10];
    let send = |shard: &mut ShardLoop, i: u64| {
        let (reply, _answer) = oneshot::channel();
        shard.handle(Input::Chunk {
            run,
            seq,
            index: i,
            payload: chunk(i),
            reply,
        });
        settle(shard, START_MS);
    };
    let n = (super::parking::SPILL_BYTES / (8 << 10)) as u64 + 8;
    for i in 0..n {
        send(&mut shard, i);
    }
    let l = shard.core.get(run).unwrap();
    assert!(l.blob.is_some(), "the journal went to the run store");
    assert!(
        l.journal.len() < super::parking::SPILL_BYTES,
        "{}",
        l.journal.len()
    );
    drop(shard);
    let storage = AnyStorage::Memory(storage.crash());
    let mut shard = ShardLoop::open(&storage, 0, config(), registry(), START_MS).unwrap();
    let whole = shard.run_journal(run).unwrap();
    let view = crate::stream::scan(&whole, "t", 0, usize::MAX).unwrap();
    // Every chunk the crash kept (the log after the last checkpoint is
    // durable: settled), in order.
    assert_eq!(view.len, n);
    for c in &view.chunks {
        assert_eq!(c.payload, chunk(c.index));
    }
    send(&mut shard, n);
    let whole = shard.run_journal(run).unwrap();
    assert_eq!(crate::stream::scan(&whole, "t", 0, 0).unwrap().len, n + 1);
}

/// A waiter that swallows every cancel, registered afresh (a reopened
/// shard needs its own registry).
fn stubborn_registry() -> Registry {
    let registry = Registry::default();
    registry
        .register(WAITER, |ctx: Ctx, ()| async move {
            loop {
                if let Ok(Some(v)) = ctx.wait_for(&GO).await {
                    return Ok::<_, Failure>(v);
                }
            }
        })
        .expect("a fresh registry");
    registry
}

/// Every record of shard 0's log, decoded.
fn logged(shard: &mut ShardLoop) -> Vec<fusee_core::record::RecordBuf> {
    let mut out = Vec::new();
    shard
        .log
        .read(0, &mut |_, bytes| {
            out.extend(
                fusee_core::record::decode_canonical_all(bytes).expect("the log's records decode"),
            );
            Ok(())
        })
        .unwrap();
    out
}

/// A close carrying a parent's grace records it in the child's `Cancel`,
/// one record (no `Attributes` grace record after it), counted from the
/// cancel; the run is terminated when it passes.
#[test]
fn a_close_with_a_grace_records_it_in_its_cancel() {
    use fusee_core::record::{CancelGrace, RecordBuf};
    let (_storage, mut shard) = open_fresh(stubborn_registry());
    start_run(&mut shard, "waiter", "w".into(), "null");
    settle(&mut shard, START_MS);
    shard.handle(Input::Message {
        from: 0,
        id: 1,
        message: super::messages::Message::Close {
            target: "w".into(),
            wtype: "".into(),
            parent: None,
            terminate: false,
            reason: fusee_core::record::Payload::from(&b"stop"[..]),
            dedup: 5,
            grace_ms: Some(30_000),
        },
    });
    settle(&mut shard, START_MS + 1);
    let records = logged(&mut shard);
    let graces: Vec<Option<CancelGrace>> = records
        .iter()
        .filter_map(|r| match r {
            RecordBuf::Cancel { grace, .. } => Some(*grace),
            _ => None,
        })
        .collect();
    assert_eq!(
        graces,
        [Some(CancelGrace {
            until_ms: START_MS + 1 + 30_000,
            grace_ms: 30_000
        })]
    );
    assert!(
        !records
            .iter()
            .any(|r| matches!(r, RecordBuf::Attributes { .. })),
        "no separate grace record: {records:?}"
    );
    let run = records[0].run();
    settle(&mut shard, START_MS + 30_000);
    assert!(!shard.core.get(run).unwrap().is_done(), "within its grace");
    settle(&mut shard, START_MS + 1 + 30_000);
    let done = shard.core.get(run).and_then(|l| l.done).map(|(s, _)| s);
    assert_eq!(done, Some(Status::Terminated), "at its grace's end");
}

/// A journal of an older build holds a cancel's grace in an `Attributes`
/// record after a plain `Cancel`: a recovery still arms it (the run is
/// terminated at its deadline) and a close still passes its length on.
#[test]
fn an_older_builds_grace_record_is_still_read() {
    use fusee_core::record::{Payload, RecordBuf};
    let (storage, mut shard) = open_fresh(stubborn_registry());
    start_run(&mut shard, "waiter", "w".into(), "null");
    settle(&mut shard, START_MS);
    let run = logged(&mut shard)[0].run();
    let until_ms = START_MS + 60_000;
    shard.append(&RecordBuf::Cancel {
        run,
        reason: Payload::from(&b"old"[..]),
        by: None,
        grace: None,
    });
    let old = format!(
        r#"{{"fusee.cancel_grace":{{"until_ms":{until_ms},"reason":"old","grace_ms":60000}}}}"#
    );
    shard.append(&RecordBuf::Attributes {
        run,
        payload: Payload::from(old.as_bytes()),
    });
    settle(&mut shard, START_MS + 1);
    drop(shard);
    let storage = AnyStorage::Memory(storage.crash());
    let mut shard =
        ShardLoop::open(&storage, 0, config(), stubborn_registry(), START_MS + 2).unwrap();
    assert!(shard.graces.holds(run), "armed again at recovery");
    assert_eq!(
        super::grace::cascaded_grace(&shard.core, run),
        Some(60_000),
        "its length passes on"
    );
    settle(&mut shard, until_ms - 1);
    assert!(!shard.core.get(run).unwrap().is_done(), "within its grace");
    settle(&mut shard, until_ms);
    let done = shard.core.get(run).and_then(|l| l.done).map(|(s, _)| s);
    assert_eq!(done, Some(Status::Terminated), "at its grace's end");
}

const LISTENER: Workflow<u32, u32> = Workflow::new("listener");

/// Polls of the listener's code, counted by a wrapper around it.
static LISTENER_POLLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A run woken only by a record appended for it gets its delivery before
/// its next poll: each signal costs its code one poll, not a poll that
/// finds nothing and then the one that takes the signal.
#[test]
fn a_record_for_a_waiting_run_costs_its_code_one_poll() {
    use std::sync::atomic::Ordering;
    const SIGNALS: u32 = 20;
    let registry = Registry::default();
    registry
        .register(LISTENER, |ctx: Ctx, n: u32| {
            let mut body = Box::pin(async move {
                for _ in 0..n {
                    ctx.wait_for(&GO).await?;
                }
                Ok::<_, Failure>(n)
            });
            std::future::poll_fn(move |cx| {
                LISTENER_POLLS.fetch_add(1, Ordering::Relaxed);
                body.as_mut().poll(cx)
            })
        })
        .expect("a fresh registry");
    let (_storage, mut shard) = open_fresh(registry);
    start_run(&mut shard, "listener", "l".into(), &SIGNALS.to_string());
    settle(&mut shard, START_MS);
    let started = LISTENER_POLLS.load(Ordering::Relaxed);
    assert!(started >= 1, "its code started");
    for i in 0..SIGNALS {
        let (reply, _signalled) = oneshot::channel();
        shard.handle(Input::Signal {
            id: "l".into(),
            name: GO.name().into(),
            payload: format!("\"{i}\"").into_bytes(),
            dedup: 0,
            reply,
        });
        settle(&mut shard, START_MS + 1 + u64::from(i));
    }
    let done = logged(&mut shard).into_iter().any(|r| {
        matches!(
            r,
            Record::Done {
                status: Status::Ok,
                ..
            }
        )
    });
    assert!(done, "the run took every signal and finished");
    let polls = LISTENER_POLLS.load(Ordering::Relaxed) - started;
    assert_eq!(polls, SIGNALS as usize, "one poll per signal");
}
