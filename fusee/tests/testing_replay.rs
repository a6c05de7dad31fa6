//! Replay tests (`TestEngine::replay`): the current code against journals
//! a real engine wrote, in the JSON `fusee show --json` prints. Unchanged
//! code replays to the same result; each kind of change that breaks old
//! runs (a renamed step, an operation added, removed or reordered, another
//! end) is caught with a message naming the operation.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fusee::core::record::{RecordBuf, Status};
use fusee::inspect::{ShardView, StoreVisitor, journal, open_read_only, rebuild};
use fusee::storage::Storage;
use fusee::testing::{Journal, ReplayError, TestEngine};
use fusee::{Backend, Clock, Config, Ctx, Engine, Failure, Signal, VirtualClock, Workflow};

const ORDER: Workflow<u64, String> = Workflow::new("order");
const GO: Signal<u64> = Signal::new("go");

/// Which version of the order workflow's code is registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    /// The code the journals were written with: charge, a sleep, a wait
    /// for `go`, ship.
    Original,
    /// The charge step renamed.
    Renamed,
    /// A step added between charge and the sleep.
    Added,
    /// The sleep removed.
    Removed,
    /// The sleep and the wait swapped.
    Reordered,
    /// Fails where the original returned.
    Fails,
    /// A step added after ship, before the end.
    Longer,
}

/// Counts the step functions that ran: a replay must run none.
type Calls = Arc<AtomicU32>;

fn register(engine: &Engine, version: Version, calls: &Calls) {
    let calls = Arc::clone(calls);
    engine.register(ORDER, move |ctx: Ctx, cents: u64| {
        let calls = Arc::clone(&calls);
        async move {
            let step = |name: &str, value: u64| {
                let calls = Arc::clone(&calls);
                ctx.step(name, move |_| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async move { Ok(value) }
                })
            };
            let charge = if version == Version::Renamed {
                "charge-card"
            } else {
                "charge"
            };
            let charged = step(charge, cents).await?;
            if version == Version::Added {
                step("fraud-check", 0).await?;
            }
            let go = if version == Version::Reordered {
                let go = ctx.wait_for(&GO).await?.unwrap_or(0);
                ctx.sleep("cool-down", Duration::from_secs(60)).await?;
                go
            } else {
                if version != Version::Removed {
                    ctx.sleep("cool-down", Duration::from_secs(60)).await?;
                }
                ctx.wait_for(&GO).await?.unwrap_or(0)
            };
            let shipped = step("ship", go).await?;
            if version == Version::Longer {
                step("survey", 0).await?;
            }
            if version == Version::Fails {
                return Err(Failure::with_kind("refused", "no more orders"));
            }
            Ok(format!("charged {charged}, shipped {shipped}"))
        }
    });
}

async fn kit(version: Version, calls: &Calls) -> TestEngine {
    let calls = Arc::clone(calls);
    TestEngine::open(move |engine: &Engine| register(engine, version, &calls))
        .await
        .expect("open the test engine")
}

/// The journal of a finished order and of one waiting for `go`, written
/// by the original code and exported as `fusee show --json` prints them.
async fn journals() -> (String, String) {
    let mut kit = kit(Version::Original, &Calls::default()).await;
    kit.engine()
        .start(ORDER, "done", &500)
        .await
        .expect("start");
    kit.engine().signal("done", GO, &7).await.expect("signal");
    assert_eq!(
        kit.result(ORDER, "done").await.expect("result"),
        "charged 500, shipped 7"
    );
    kit.engine()
        .start(ORDER, "waiting", &300)
        .await
        .expect("start");
    // Past the sleep, at the wait.
    kit.advance(Duration::from_secs(61)).await.expect("advance");
    let done = kit.export_journal("done").await.expect("export");
    let waiting = kit.export_journal("waiting").await.expect("export");
    assert!(done.is_complete());
    (done.to_json().to_string(), waiting.to_json().to_string())
}

fn diverged(r: Result<fusee::testing::Replayed, ReplayError>) -> String {
    match r {
        Err(ReplayError::Diverged { id, message }) => {
            assert!(!id.is_empty());
            message
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_code_replays_to_the_same_result_without_running_a_step() {
    let (done, waiting) = journals().await;
    let calls = Calls::default();
    let kit = kit(Version::Original, &calls).await;
    let replayed = kit
        .replay(&Journal::from_json(&done).expect("journal"))
        .expect("replay");
    assert_eq!(replayed.ended, Some(Status::Ok));
    assert!(replayed.end_recorded);
    assert!(replayed.next.is_empty(), "{:?}", replayed.next);
    assert_eq!(
        replayed.result::<String>().expect("result"),
        "charged 500, shipped 7"
    );
    // A run in progress replays to where its journal ends.
    let replayed = kit
        .replay(&Journal::from_json(&waiting).expect("journal"))
        .expect("replay");
    assert_eq!(replayed.ended, None);
    assert!(!replayed.end_recorded);
    assert!(replayed.next.is_empty(), "{:?}", replayed.next);
    assert_eq!(calls.load(Ordering::SeqCst), 0, "a replay ran a step");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_step_is_caught_naming_the_operation() {
    let (done, waiting) = journals().await;
    let kit = kit(Version::Renamed, &Calls::default()).await;
    for json in [&done, &waiting] {
        let message = diverged(kit.replay(&Journal::from_json(json).expect("journal")));
        assert!(message.contains("operation 1"), "{message}");
        assert!(message.contains("step \"charge\""), "{message}");
        assert!(message.contains("step \"charge-card\""), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_removed_and_reordered_operations_are_caught() {
    let (done, _) = journals().await;
    let journal = Journal::from_json(&done).expect("journal");
    let cases = [
        // The journal's sleep is operation 2; the new step takes its place.
        (Version::Added, "operation 2", "step \"fraud-check\""),
        (Version::Removed, "operation 2", "sleep \"cool-down\""),
        (Version::Reordered, "operation 2", "wait for signal \"go\""),
        (Version::Fails, "failed", "the run's end (ok)"),
        (Version::Longer, "operation 5", "step \"survey\""),
    ];
    for (version, op, detail) in cases {
        let kit = kit(version, &Calls::default()).await;
        let message = diverged(kit.replay(&journal));
        assert!(message.contains(op), "{version:?}: {message}");
        assert!(message.contains(detail), "{version:?}: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_code_past_a_journal_in_progress_reports_what_it_calls_next() {
    let (_, waiting) = journals().await;
    // The original code waits at the journal's end; code that removed the
    // wait's sleep departs at once (operation 2 is the journal's sleep).
    let kit = kit(Version::Removed, &Calls::default()).await;
    let message = diverged(kit.replay(&Journal::from_json(&waiting).expect("journal")));
    assert!(message.contains("operation 2"), "{message}");
    // A journal cut after the charge: the original code goes on to sleep.
    let full = Journal::from_json(&waiting).expect("journal");
    let cut: Vec<RecordBuf> = full
        .records()
        .iter()
        .take_while(|r| !matches!(r, RecordBuf::Timer { .. }))
        .cloned()
        .collect();
    let kit = kit_original().await;
    let replayed = kit.replay(&Journal::from_records(cut)).expect("replay");
    assert_eq!(replayed.ended, None);
    assert_eq!(replayed.next, ["operation 2: sleep \"cool-down\""]);
}

async fn kit_original() -> TestEngine {
    kit(Version::Original, &Calls::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journals_that_cannot_be_replayed_say_why() {
    let kit = kit_original().await;
    assert!(matches!(
        Journal::from_json("not json"),
        Err(ReplayError::Json(_))
    ));
    assert!(matches!(
        Journal::from_json(r#"{"format": "something-else", "version": 1, "records": []}"#),
        Err(ReplayError::Document(_))
    ));
    match kit.replay(&Journal::from_records(Vec::new())) {
        Err(ReplayError::Malformed(why)) => assert!(why.contains("Start"), "{why}"),
        other => panic!("expected Malformed, got {other:?}"),
    }
    let (done, _) = journals().await;
    let mut doc: serde_json::Value = serde_json::from_str(&done).expect("json");
    doc["complete"] = serde_json::Value::Bool(false);
    assert!(matches!(
        kit.replay(&Journal::from_value(&doc).expect("journal")),
        Err(ReplayError::Incomplete { .. })
    ));
    let other = TestEngine::open(|_: &Engine| {}).await.expect("open");
    match other.replay(&Journal::from_json(&done).expect("journal")) {
        Err(ReplayError::NoCode { wtype, .. }) => assert_eq!(wtype, "order"),
        r => panic!("expected NoCode, got {r:?}"),
    }
}

/// The journal document of workflow `id` in the store in `dir`, read as
/// `fusee show DIR ID --json` reads it (the `fusee::inspect` library
/// under the command).
fn show_json(dir: &std::path::Path, id: &str) -> String {
    struct Show<'a>(&'a str);
    impl StoreVisitor for Show<'_> {
        type Out = String;
        fn visit<S: Storage>(self, _: Backend, storage: &S) -> String {
            let shards = storage.shards().expect("shards");
            for shard in shards {
                let mut view: ShardView<S::Runs> =
                    rebuild(storage, shard, 0, &mut |_| {}).expect("rebuild");
                if let Some(run) = view.find(self.0).expect("find") {
                    let j = view.journal(run).expect("journal");
                    return journal::to_json(&j).to_string();
                }
            }
            panic!("no run {} in the store", self.0);
        }
    }
    open_read_only(dir, Show(id)).expect("open the store read-only")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_from_a_file_store_as_the_cli_shows_it_replays() {
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "fusee-testing-replay-{}-{}",
        std::process::id(),
        fastrand_suffix()
    ));
    // A plain engine (no kit) on a virtual clock, moved by hand.
    let clock = VirtualClock::new(1_700_000_000_000);
    // The clock moves 30 s at a time until the result is seen, which on
    // a busy machine can be a move or more after the run ended: past the
    // default 10 s a finished run parks, keeping only its Start and Done
    // (which replay rightly refuses as `Incomplete`). This test wants the
    // whole journal of a finished run, so runs never park here.
    let config = Config::file(&dir)
        .shards(2)
        .clock(Clock::Virtual(clock.clone()))
        .park_after(Duration::from_secs(365 * 24 * 3600));
    let engine = Engine::open(config).await.expect("open");
    register(&engine, Version::Original, &Calls::default());
    engine.start(ORDER, "filed", &900).await.expect("start");
    engine.signal("filed", GO, &3).await.expect("signal");
    // Past the minute's sleep (a timer armed after the advance would wait:
    // keep moving until the run ends).
    let result = engine.result(ORDER, "filed");
    tokio::pin!(result);
    let result = loop {
        tokio::select! {
            r = &mut result => break r,
            () = tokio::time::sleep(Duration::from_millis(5)) => clock.advance(30_000),
        }
    };
    assert_eq!(result.expect("result"), "charged 900, shipped 3");
    // One move more after the run ended, as a busy machine makes before the
    // result is seen: the run must still be whole when shown.
    clock.advance(30_000);
    engine.close().await.expect("close");
    let json = show_json(&dir, "filed");
    let _ = std::fs::remove_dir_all(&dir);
    let journal = Journal::from_json(&json).expect("journal");
    let replayed = kit_original().await.replay(&journal).expect("replay");
    assert_eq!(
        replayed.result::<String>().expect("result"),
        "charged 900, shipped 3"
    );
    let message = diverged(
        kit(Version::Renamed, &Calls::default())
            .await
            .replay(&journal),
    );
    assert!(message.contains("operation 1"), "{message}");
}

/// A suffix that keeps two test processes' directories apart.
fn fastrand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}
