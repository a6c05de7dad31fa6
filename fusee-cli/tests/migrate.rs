//! `fusee migrate`: a store with a run in every state (parked, waiting on
//! a signal and on a timer, a step in flight, finished three ways) and a
//! log tail after its last checkpoint, moved between backends; the
//! journals stay byte-equal, the destination runs on; interrupted at every
//! step boundary or killed, the source is untouched and the destination is
//! refused at open until the command runs again.

mod common;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    RUNS, START_MS, build_crashed, config, fusee, fusee_json, register, snapshot, temp_dir,
};
use fusee::migrate::{Event, MigrateError, Source, migrate};
use fusee::{Backend, Engine, Signal, StorageConfig, VirtualClock, Workflow, open_storage};

const GO: Signal<String> = Signal::new("go");
const GATE: Workflow<(), String> = Workflow::new("gate");
const TWICE: Workflow<(), String> = Workflow::new("twice");
const GREET: Workflow<String, String> = Workflow::new("greet");

/// [`build_crashed`]'s store, plus a run parked twice (its second frame a
/// `Delta` on its first) and waiting again, and the engine dropped without
/// closing once more.
async fn build_chained(tag: &str) -> PathBuf {
    let dir = build_crashed("file", tag).await;
    let clock = VirtualClock::new(START_MS + 30_000);
    let engine = Engine::open(config("file", &dir, &clock))
        .await
        .expect("opens");
    register(&engine);
    register_twice(&engine);
    engine.start(TWICE, "twice-1", &()).await.expect("start");
    clock.advance(10_000);
    common::until(&engine, "twice-1 parks", |m| m.parks >= 1).await;
    engine
        .signal("twice-1", GO, &"one".to_string())
        .await
        .expect("signal");
    clock.advance(10_000);
    common::until(&engine, "twice-1 parks again", |m| m.parks >= 2).await;
    engine.close().await.expect("close");
    drop(engine);
    // Then a run finished after the last checkpoint, and a crash: the log
    // holds a tail again. On a runtime of its own, dropped with the engine,
    // so that the hung step's task goes too and the store's lock with it.
    off_runtime(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let clock = VirtualClock::new(START_MS + 60_000);
            let engine = Engine::open(config("file", &dir, &clock))
                .await
                .expect("opens");
            register(&engine);
            register_twice(&engine);
            let run = engine
                .start(GREET, "after-1", &"after".to_string())
                .await
                .expect("start");
            assert_eq!(run.result().await.expect("result"), "hello after");
            drop(engine);
        });
        drop(rt);
    });
    let mut last = String::new();
    for _ in 0..500 {
        let out = fusee(&["runs", s(&dir), "--json"]);
        if out.status.success() {
            return dir;
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the crashed store stays unreadable: {last}");
}

fn register_twice(engine: &Engine) {
    engine.register(TWICE, |ctx: fusee::Ctx, ()| async move {
        let a = ctx.wait_for(&GO).await?.unwrap_or_default();
        let b = ctx.wait_for(&GO).await?.unwrap_or_default();
        Ok::<_, fusee::Failure>(format!("{a} {b}"))
    });
}

/// Every run's journal (`fusee show --json`, the `fusee-journal` format:
/// every record's bytes) by workflow ID.
fn journals(dir: &Path) -> Vec<serde_json::Value> {
    let d = dir.to_str().expect("utf-8");
    let mut ids: Vec<String> = RUNS.iter().map(|(id, _, _)| id.to_string()).collect();
    ids.extend((0..3).map(|i| format!("late-{i}")));
    if dir.to_string_lossy().contains("trip") {
        ids.extend(["twice-1".to_string(), "after-1".to_string()]);
    }
    ids.iter()
        .map(|id| fusee_json(&["show", d, id, "--json"], 0))
        .collect()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

/// A schema of its own for each test and process.
fn schema(tag: &str) -> String {
    format!("migrate_{tag}_{}", std::process::id())
}

/// One test of this file at a time. They spawn `fusee` processes while
/// others hold a store's `LOCK` (a `flock`): a process forked meanwhile
/// holds a copy of that descriptor until it execs, and a store another
/// test closed a moment before could then still read as locked (seen once
/// in CI as "the finished destination opens: ... is locked").
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_file_redb_postgres_file_keeps_every_journal() {
    let _serial = serial().await;
    let src = build_chained("migrate-trip").await;
    let before = snapshot(&src);
    let want = journals(&src);
    let redb = temp_dir("migrate-trip-redb");
    let out = fusee_json(&["migrate", s(&src), s(&redb), "--to", "redb", "--json"], 0);
    assert_eq!(out["checked"]["runs"], 12, "{out}");
    assert!(
        out["copied"]["log_records"].as_u64() > Some(0),
        "a log tail: {out}"
    );
    assert_eq!(snapshot(&src), before, "the source is only read");
    assert_eq!(journals(&redb), want, "file -> redb");
    let back = temp_dir("migrate-trip-back");
    match fusee_tests::pg_url_or_skip("the PostgreSQL leg of the round trip") {
        Some(url) => {
            let sch = schema("trip");
            let out = fusee_json(&["migrate", s(&redb), &url, "--schema", &sch, "--json"], 0);
            assert_eq!(out["checked"]["runs"], 12, "{out}");
            let out = fusee_json(
                &["migrate", &url, s(&back), "--source-schema", &sch, "--json"],
                0,
            );
            assert_eq!(out["checked"]["runs"], 12, "{out}");
            drop_schema(&url, &sch);
        }
        None => {
            fusee_json(&["migrate", s(&redb), s(&back), "--json"], 0);
        }
    }
    assert_eq!(journals(&back), want, "file -> redb -> postgres -> file");
    assert_eq!(fusee(&["verify", s(&back)]).status.code(), Some(0));

    // The destination runs on: the waiting run takes its signal, the
    // parked one too, the hung step runs again.
    let clock = VirtualClock::new(START_MS + 40_000);
    let engine = Engine::open(config("file", &back, &clock))
        .await
        .expect("opens");
    register(&engine);
    register_twice(&engine);
    engine
        .signal("twice-1", GO, &"two".to_string())
        .await
        .expect("signal");
    assert_eq!(
        engine.result(TWICE, "twice-1").await.expect("result"),
        "one two"
    );
    for id in ["wait-1", "parked-1"] {
        engine
            .signal(id, GO, &format!("go {id}"))
            .await
            .expect("signal");
    }
    for id in ["wait-1", "parked-1"] {
        let r = engine.result(GATE, id).await.expect("result");
        assert_eq!(r, format!("go {id}"));
    }
    let late = engine.describe("late-2").await.expect("late-2 carried");
    assert_eq!(late.workflow, "greet", "{late:?}");
    engine.close().await.expect("close");
    for d in [&src, &redb, &back] {
        let _ = std::fs::remove_dir_all(d);
    }
}

fn drop_schema(url: &str, schema: &str) {
    off_runtime(|| {
        if let Ok(mut c) = postgres_client(url) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
        }
    });
}

/// Runs `f` on a thread of its own: PostgreSQL's blocking client starts a
/// runtime, which a test's tokio runtime thread may not.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(f)
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

fn postgres_client(url: &str) -> Result<postgres::Client, postgres::Error> {
    postgres::Client::connect(url, postgres::NoTls)
}

/// Whether `target` opens as a store; `Err` has the refusal's words.
fn opens(target: &StorageConfig) -> Result<(), String> {
    match open_storage(&target.clone().existing_only()) {
        Ok(s) => {
            fusee::storage::Storage::close(&s).map_err(|e| e.to_string())?;
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Interrupts the migration into `target` at each of its steps in turn:
/// each time the source is unchanged and the destination refused at open,
/// naming the interrupted migration; then the command's next run
/// completes and both stores hold the same journals.
fn interrupted_everywhere(src: &Path, target: &StorageConfig) {
    let before = snapshot(src);
    let mut at = 0usize;
    loop {
        let mut seen = 0usize;
        let mut broke = None;
        let mut stop = |e: Event| {
            seen += 1;
            if seen > at {
                broke = Some(e);
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        match migrate(&Source::Dir(src.to_path_buf()), target, &mut stop) {
            Err(MigrateError::Interrupted) => {}
            other => panic!("step {at}: {other:?}"),
        }
        assert_eq!(snapshot(src), before, "step {at}: the source is only read");
        if broke == Some(Event::Complete) {
            // Stopped after the last step: the store is whole, and a
            // second migration into it is refused.
            opens(target).expect("the finished destination opens");
            let err = migrate(&Source::Dir(src.to_path_buf()), target, &mut |_| {
                ControlFlow::Continue(())
            })
            .expect_err("a store is not migrated into");
            assert!(matches!(err, MigrateError::TargetNotEmpty(_)), "{err}");
            break;
        }
        let why = opens(target).expect_err("an interrupted destination is refused");
        assert!(why.contains("migrate"), "step {at} ({broke:?}): {why}");
        at += 1;
        assert!(at < 10_000, "the migration never ends");
    }
    assert!(at > 8, "only {at} steps");
    opens(target).expect("the finished destination opens");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_at_every_step_the_destination_is_refused_then_redone() {
    let _serial = serial().await;
    let src = build_crashed("file", "migrate-steps").await;
    let want = journals(&src);
    for backend in [Backend::File, Backend::Redb, Backend::Rocksdb] {
        let dst = temp_dir(&format!("migrate-steps-{backend}"));
        interrupted_everywhere(&src, &StorageConfig::new(backend, &dst));
        assert_eq!(journals(&dst), want, "{backend}");
        let _ = std::fs::remove_dir_all(&dst);
    }
    if let Some(url) = fusee_tests::pg_url_or_skip("an interrupted migration into PostgreSQL") {
        let sch = schema("steps");
        let target = StorageConfig::postgres(&url).postgres_schema(&sch);
        off_runtime(|| interrupted_everywhere(&src, &target));
        drop_schema(&url, &sch);
    }
    let _ = std::fs::remove_dir_all(&src);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_any_moment_the_destination_is_refused_or_whole() {
    let _serial = serial().await;
    let src = build_crashed("file", "migrate-kill").await;
    let want = journals(&src);
    let before = snapshot(&src);
    let exe = env!("CARGO_BIN_EXE_fusee");
    let mut refused = 0;
    for (i, delay_us) in [
        0u64, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000,
    ]
    .into_iter()
    .enumerate()
    {
        let dst: PathBuf = temp_dir(&format!("migrate-kill-{i}"));
        let mut child = std::process::Command::new(exe)
            .args(["migrate", s(&src), s(&dst), "--to", "redb"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("fusee runs");
        std::thread::sleep(Duration::from_micros(delay_us));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        assert_eq!(snapshot(&src), before, "the source is only read");
        let target = StorageConfig::new(Backend::Redb, &dst);
        match opens(&target) {
            Ok(()) => {
                // Whole (the kill came after the end), or killed between
                // the backend's creating an empty store and the mark: an
                // empty store, which the command takes and fills.
                let runs = fusee_json(&["runs", s(&dst), "--json"], 0);
                if runs.as_array().is_some_and(Vec::is_empty) {
                    fusee_json(&["migrate", s(&src), s(&dst), "--to", "redb", "--json"], 0);
                }
                assert_eq!(journals(&dst), want, "a destination that opens is whole");
            }
            Err(why) => {
                refused += 1;
                assert!(
                    why.contains("migrate") || why.contains("no Fusee store"),
                    "kill {i}: {why}"
                );
                // Run again: it completes.
                fusee_json(&["migrate", s(&src), s(&dst), "--to", "redb", "--json"], 0);
                assert_eq!(journals(&dst), want, "kill {i}, then again");
            }
        }
        let _ = std::fs::remove_dir_all(&dst);
    }
    assert!(refused > 0, "no kill landed inside a migration");
    let _ = std::fs::remove_dir_all(&src);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_clear() {
    let _serial = serial().await;
    let src = build_crashed("file", "migrate-refuse").await;
    // Into itself.
    let out = fusee(&["migrate", s(&src), s(&src)]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("same store"));
    // Into a store.
    let other = build_crashed("file", "migrate-refuse-other").await;
    let before = snapshot(&other);
    let out = fusee(&["migrate", s(&src), s(&other)]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already holds a store"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(snapshot(&other), before, "a store is never touched");
    // From a store an engine holds.
    let clock = VirtualClock::new(START_MS + 40_000);
    let engine = Engine::open(config("file", &src, &clock))
        .await
        .expect("opens");
    let dst = temp_dir("migrate-refuse-dst");
    let out = fusee(&["migrate", s(&src), s(&dst)]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lock"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    engine.close().await.expect("close");
    for d in [&src, &other, &dst] {
        let _ = std::fs::remove_dir_all(d);
    }
}
