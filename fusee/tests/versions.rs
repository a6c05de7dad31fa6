//! Versioned workflows (issue 33, item 4): several implementations of one
//! type side by side. A new run takes the newest version (or the one its
//! start names), keeps the version it started with across restarts, waits
//! for its version's code, moves to the newest at continue-as-new; runs
//! list and describe show the version; a finished run's query replays its
//! own version's code.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fusee::{
    Config, Ctx, Engine, Error, Failure, ListFilter, Query, RunStatus, Signal, StartOptions,
    Workflow,
};

const W: Workflow<u32, String> = Workflow::new("versioned");
const GO: Signal<()> = Signal::new("go");
const WHICH: Query<(), String> = Query::new("which");

fn temp_dir(tag: &str) -> std::path::PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "fusee-versions-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Version `v` of the code: answers `which` with its name, waits for `go`
/// when its input is 0, continues as new with input - 1 otherwise, and
/// returns its name.
fn register(engine: &Engine, v: u32) {
    engine.register_version(W, v, move |ctx: Ctx, n: u32| async move {
        ctx.on_query(WHICH, move |()| Ok(format!("v{v}")));
        if n > 0 {
            return ctx.continue_as_new(&(n - 1)).await;
        }
        ctx.wait_for(&GO).await?;
        Ok::<_, Failure>(format!("v{v}"))
    });
}

/// Waits until `id`'s code is at its wait for `go` (what a signal needs
/// no more than a start does, but a restart test wants the wait durable).
async fn waiting(engine: &Engine, id: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while engine
        .describe(id)
        .await
        .expect("describe")
        .waits
        .is_empty()
    {
        assert!(std::time::Instant::now() < deadline, "{id} never waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_keeps_the_version_it_started_with_across_a_restart() {
    let dir = temp_dir("keep");
    let engine = Engine::open(Config::file(&dir)).await.expect("open");
    register(&engine, 1);
    engine.start(W, "old", &0).await.expect("start old");
    waiting(&engine, "old").await;
    engine.close().await.expect("close");

    // The next deploy adds version 2: new runs take it, the old run stays
    // on version 1's code.
    let engine = Engine::open(Config::file(&dir)).await.expect("reopen");
    register(&engine, 1);
    register(&engine, 2);
    engine.start(W, "new", &0).await.expect("start new");
    assert_eq!(engine.describe("old").await.expect("old").version, 1);
    assert_eq!(engine.describe("new").await.expect("new").version, 2);
    let page = engine.list(ListFilter::new()).await.expect("list");
    let mut versions: Vec<(String, u32)> = page
        .runs
        .iter()
        .map(|r| (r.id.clone(), r.version))
        .collect();
    versions.sort();
    assert_eq!(versions, [("new".to_string(), 2), ("old".to_string(), 1)]);
    for id in ["old", "new"] {
        waiting(&engine, id).await;
        engine.signal(id, GO, &()).await.expect("signal");
    }
    assert_eq!(engine.result(W, "old").await.expect("old"), "v1");
    assert_eq!(engine.result(W, "new").await.expect("new"), "v2");
    // A finished run's query replays its own version's code.
    assert_eq!(engine.query("old", WHICH, &()).await.expect("query"), "v1");
    assert_eq!(engine.query("new", WHICH, &()).await.expect("query"), "v2");
    engine.close().await.expect("close");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_may_name_a_version_and_one_not_registered_records_nothing() {
    let engine = Engine::open(Config::memory()).await.expect("open");
    register(&engine, 1);
    register(&engine, 2);
    let named = StartOptions::new().version(1);
    engine
        .start_with_options(W, "named", &0, named)
        .await
        .expect("start at version 1");
    assert_eq!(engine.describe("named").await.expect("describe").version, 1);
    match engine
        .start_with_options(W, "nine", &0, StartOptions::new().version(9))
        .await
    {
        Err(Error::UnknownVersion {
            wtype,
            version,
            registered,
        }) => assert_eq!(
            (wtype.as_str(), version, registered),
            ("versioned", 9, vec![1, 2])
        ),
        other => panic!("expected UnknownVersion, found {other:?}"),
    }
    // Nothing was recorded: the ID is free.
    assert!(matches!(
        engine.describe("nine").await,
        Err(Error::NotFound { .. })
    ));
    engine.start(W, "nine", &0).await.expect("the ID is free");
    assert_eq!(engine.describe("nine").await.expect("describe").version, 2);
    // A version registered twice is refused; the first stands.
    match engine.try_register_version(W, 2, |_: Ctx, _: u32| async {
        Ok::<_, Failure>(String::new())
    }) {
        Err(Error::AlreadyRegistered { wtype, version }) => {
            assert_eq!((wtype.as_str(), version), ("versioned", 2));
        }
        other => panic!("expected AlreadyRegistered, found {other:?}"),
    }
    engine.signal("nine", GO, &()).await.expect("signal");
    assert_eq!(engine.result(W, "nine").await.expect("nine"), "v2");
    engine.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_version_has_no_code_waits_for_it() {
    let dir = temp_dir("wait");
    let engine = Engine::open(Config::file(&dir)).await.expect("open");
    register(&engine, 1);
    engine.start(W, "r", &0).await.expect("start");
    waiting(&engine, "r").await;
    engine.close().await.expect("close");

    // A deploy that dropped version 1: the run waits for its code rather
    // than running version 2's.
    let engine = Engine::open(Config::file(&dir)).await.expect("reopen");
    register(&engine, 2);
    let d = engine.describe("r").await.expect("describe");
    assert_eq!((d.status, d.version), (RunStatus::WaitingForCode, 1));
    // No code, no handler: a query is told which version is missing.
    match engine.query("r", WHICH, &()).await {
        Err(Error::UnknownVersion {
            version,
            registered,
            ..
        }) => assert_eq!((version, registered), (1, vec![2])),
        other => panic!("expected UnknownVersion, found {other:?}"),
    }
    engine.signal("r", GO, &()).await.expect("signal");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let d = engine.describe("r").await.expect("describe");
    assert_eq!(d.status, RunStatus::WaitingForCode);
    // Version 1 comes back: the run goes on with it.
    register(&engine, 1);
    assert_eq!(engine.result(W, "r").await.expect("result"), "v1");
    engine.close().await.expect("close");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_moves_to_the_newest_version() {
    let engine = Engine::open(Config::memory()).await.expect("open");
    register(&engine, 1);
    register(&engine, 3);
    // Version 1 continues as new once: the next run is version 3's.
    engine
        .start_with_options(W, "c", &1, StartOptions::new().version(1))
        .await
        .expect("start");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let d = engine.describe("c").await.expect("describe");
        if d.version == 3 && !d.waits.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{d:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    engine.signal("c", GO, &()).await.expect("signal");
    assert_eq!(engine.result(W, "c").await.expect("result"), "v3");
    engine.close().await.expect("close");
}
