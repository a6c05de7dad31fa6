//! What the CLI tests share: stores built with the engine, holding a run in
//! every state, on every backend; running the `fusee` binary; hashing a
//! directory.

#![allow(dead_code, unreachable_pub)] // Each test binary uses part of it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use fusee::{
    Clock, Config, Ctx, Engine, Failure, RetryPolicy, Signal, StepError, VirtualClock, Workflow,
};

/// When the test stores' virtual clock starts.
pub const START_MS: u64 = 1_700_000_000_000;

const GREET: Workflow<String, String> = Workflow::new("greet");
const FAIL: Workflow<(), String> = Workflow::new("fail");
const GATE: Workflow<(), String> = Workflow::new("gate");
const NAP: Workflow<(), ()> = Workflow::new("nap");
const HANG: Workflow<(), ()> = Workflow::new("hang");
const GO: Signal<String> = Signal::new("go");

/// The backends the tests build stores on.
pub const BACKENDS: [&str; 3] = ["file", "redb", "rocksdb"];

/// Each run a test store holds: workflow ID, workflow type, the state
/// `fusee runs` must report.
pub const RUNS: [(&str, &str, &str); 7] = [
    ("parked-1", "gate", "parked"),
    ("ok-1", "greet", "ok"),
    ("fail-1", "fail", "failed"),
    ("cancel-1", "gate", "cancelled"),
    ("wait-1", "gate", "waiting"),
    ("nap-1", "nap", "waiting"),
    ("hang-1", "hang", "running"),
];

/// A fresh directory for a test store (removed first if a run left one).
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fusee-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The tests' engine configuration: two shards, runs park after 5 s.
pub fn config(backend: &str, dir: &Path, clock: &VirtualClock) -> Config {
    let c = match backend {
        "file" => Config::file(dir),
        "redb" => Config::redb(dir),
        "rocksdb" => Config::rocksdb(dir),
        other => panic!("unknown backend {other}"),
    };
    c.shards(2)
        .park_after(Duration::from_secs(5))
        .clock(Clock::Virtual(clock.clone()))
}

/// Registers the workflows of [`RUNS`].
pub fn register(engine: &Engine) {
    engine.register(GREET, |ctx: Ctx, name: String| async move {
        let hello = ctx
            .step("hello", move |_| {
                let name = name.clone();
                async move { Ok(format!("hello {name}")) }
            })
            .await?;
        Ok::<_, Failure>(hello)
    });
    engine.register(FAIL, |ctx: Ctx, ()| async move {
        ctx.step("try", |_| async { Ok(1u32) }).await?;
        Err::<String, _>(Failure::new("boom"))
    });
    engine.register(GATE, |ctx: Ctx, ()| async move {
        let word = ctx.wait_for(&GO).await?.unwrap_or_default();
        Ok::<_, Failure>(word)
    });
    engine.register(NAP, |ctx: Ctx, ()| async move {
        // Written so it compiles whether a sleep's await is a Result or not.
        #[allow(clippy::let_underscore_future, let_underscore_drop)]
        let _ = ctx.sleep("nap", Duration::from_secs(86_400)).await;
        Ok::<_, Failure>(())
    });
    engine.register(HANG, |ctx: Ctx, ()| async move {
        // A step whose attempt never ends: the run stays running.
        ctx.step("forever", |_| async {
            std::future::pending::<()>().await;
            Ok::<(), StepError>(())
        })
        .retry(RetryPolicy::none())
        .await?;
        Ok::<_, Failure>(())
    });
}

/// Waits (in real time) until `cond` holds of the engine's metrics.
pub async fn until(engine: &Engine, what: &str, cond: impl Fn(&fusee::Metrics) -> bool) {
    for _ in 0..3000 {
        if cond(&engine.metrics().await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not reached in 30 s: {:?}", engine.metrics().await);
}

/// Builds a store on `backend` in a fresh directory holding [`RUNS`], and
/// closes its engine cleanly. Returns the directory.
pub async fn build(backend: &str, tag: &str) -> PathBuf {
    let dir = temp_dir(&format!("{backend}-{tag}"));
    let engine = open_with_runs(backend, &dir).await;
    engine.close().await.expect("close");
    drop(engine);
    dir
}

/// An engine on `backend` in `dir` holding [`RUNS`], still open; each run
/// started 100 ms after the one before (so newest-first orders are the
/// same whoever sorts them).
pub async fn open_with_runs(backend: &str, dir: &Path) -> Engine {
    let clock = VirtualClock::new(START_MS);
    let engine = Engine::open(config(backend, dir, &clock))
        .await
        .expect("engine opens");
    register(&engine);
    // Parked: started, then idle past `park_after`.
    engine
        .start(GATE, "parked-1", &())
        .await
        .expect("start parked-1");
    clock.advance(10_000);
    until(&engine, "parked-1 parks", |m| m.parks >= 1).await;
    // The others start after the clock moved: not idle long enough to park.
    let ok = engine
        .start(GREET, "ok-1", &"world".to_string())
        .await
        .expect("start ok-1");
    assert_eq!(ok.result().await.expect("ok-1 result"), "hello world");
    clock.advance(100);
    let failed = engine.start(FAIL, "fail-1", &()).await.expect("start");
    assert!(failed.result().await.is_err(), "fail-1 fails");
    clock.advance(100);
    engine.start(GATE, "cancel-1", &()).await.expect("start");
    engine.cancel("cancel-1", "test").await.expect("cancel");
    clock.advance(100);
    engine.start(GATE, "wait-1", &()).await.expect("start");
    clock.advance(100);
    engine.start(NAP, "nap-1", &()).await.expect("start");
    clock.advance(100);
    engine.start(HANG, "hang-1", &()).await.expect("start");
    until(&engine, "every run started", |m| m.started >= 7).await;
    until(&engine, "cancel-1 finishes", |m| m.finished >= 3).await;
    engine
}

/// Runs the `fusee` binary with `args`.
pub fn fusee(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_fusee"))
        .args(args)
        .output()
        .expect("the fusee binary runs")
}

/// Runs `fusee` with `args` and parses its stdout as JSON, checking the
/// exit status is `code`.
pub fn fusee_json(args: &[&str], code: i32) -> serde_json::Value {
    let out = fusee(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "fusee {args:?}: stderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "fusee {args:?}: stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Every file under `dir` with its bytes' hash, and every directory: what
/// must not change when a command only reads.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, u64> {
    fn walk(p: &Path, out: &mut BTreeMap<PathBuf, u64>) {
        let meta = std::fs::symlink_metadata(p).expect("stat");
        if meta.is_dir() {
            out.insert(p.to_path_buf(), u64::MAX);
            for e in std::fs::read_dir(p).expect("list") {
                walk(&e.expect("entry").path(), out);
            }
        } else {
            let bytes = std::fs::read(p).expect("read");
            // FNV-1a: any change of a byte changes it (with overwhelming
            // likelihood), and it needs no crate.
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            for b in &bytes {
                h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
            }
            out.insert(p.to_path_buf(), h ^ bytes.len() as u64);
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

/// [`build`], then the engine opened again, three more runs finished, and
/// the engine dropped without closing (a crash): the log then holds
/// records after the last checkpoint. Returns once the store's lock is
/// free.
pub async fn build_crashed(backend: &str, tag: &str) -> PathBuf {
    let dir = build(backend, tag).await;
    let clock = VirtualClock::new(START_MS + 20_000);
    let engine = Engine::open(config(backend, &dir, &clock))
        .await
        .expect("engine opens again");
    register(&engine);
    for i in 0..3 {
        let run = engine
            .start(GREET, &format!("late-{i}"), &format!("late {i}"))
            .await
            .expect("start");
        run.result().await.expect("late result");
    }
    drop(engine);
    // The shard threads let go of the store as they stop.
    let d = dir.to_str().expect("utf-8").to_string();
    for _ in 0..500 {
        let out = fusee(&["runs", &d, "--json"]);
        if out.status.success() {
            return dir;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the crashed store stays locked");
}

/// A copy of directory `from` at `to` (files only, recursively).
pub fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("list") {
        let e = e.expect("entry");
        let target = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &target);
        } else if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

/// Flips bits of the byte at `offset` of `file`.
pub fn flip(file: &Path, offset: u64) {
    let mut bytes = std::fs::read(file).expect("read");
    let i = usize::try_from(offset).expect("offset");
    assert!(
        i < bytes.len(),
        "{} has {} bytes, not {offset}",
        file.display(),
        bytes.len()
    );
    bytes[i] ^= 0x5a;
    std::fs::write(file, bytes).expect("write");
}

/// What the `values` workflow returns: fields not in sorted order, as
/// serde writes a struct (so the payload is JSON, not its sorted form).
#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
pub struct Picked {
    /// A number.
    pub zebra: u64,
    /// A word.
    pub apple: String,
}

const VALUES: Workflow<(), Picked> = Workflow::new("values");

/// The longest workflow ID a start takes ([`fusee::MAX_ID_BYTES`]).
pub fn long_id() -> String {
    format!("long-{}", "x".repeat(fusee::MAX_ID_BYTES - 5))
}

/// A file store holding `values-1` (a run that recorded `ctx.now()`,
/// `ctx.random()` and `ctx.uuid()` and returned a [`Picked`]), a waiting
/// run whose workflow ID is [`long_id`], and a run cancelled with a reason.
/// Returns the directory and the recorded random number.
pub async fn build_readable(tag: &str) -> (PathBuf, u64) {
    let dir = temp_dir(&format!("readable-{tag}"));
    let clock = VirtualClock::new(START_MS);
    let engine = Engine::open(config("file", &dir, &clock))
        .await
        .expect("engine opens");
    register(&engine);
    engine.register(VALUES, |ctx: Ctx, ()| async move {
        let _ = ctx.now();
        let n = ctx.random();
        let _ = ctx.uuid();
        let picked = ctx
            .step("pick", move |_| async move {
                Ok(Picked {
                    zebra: n,
                    apple: "red".into(),
                })
            })
            .await?;
        Ok::<_, Failure>(picked)
    });
    let run = engine
        .start(VALUES, "values-1", &())
        .await
        .expect("start values-1");
    let picked = run.result().await.expect("values-1 result");
    engine
        .start(GATE, &long_id(), &())
        .await
        .expect("start the long ID");
    engine.start(GATE, "cancel-2", &()).await.expect("start");
    engine
        .cancel("cancel-2", "changed my mind")
        .await
        .expect("cancel");
    until(&engine, "every run started", |m| m.started >= 3).await;
    until(&engine, "cancel-2 finishes", |m| m.finished >= 2).await;
    engine.close().await.expect("close");
    drop(engine);
    (dir, picked.zebra)
}
