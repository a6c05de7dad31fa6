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
use fusee::migrate::{Event, MigrateError, Source, migrate, reshard};
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
    let engine = Engine::open(config("file", &dir, &clock).stream_apart_bytes(0))
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
            let engine = Engine::open(config("file", &dir, &clock).stream_apart_bytes(0))
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

/// `TWICE` streams three words first: its parked frame names a `Stream`
/// frame (`Config::stream_apart_bytes` 0 in [`build_chained`]), which a
/// migration carries.
fn register_twice(engine: &Engine) {
    engine.register(TWICE, |ctx: fusee::Ctx, ()| async move {
        let tx = ctx.stream("words");
        ctx.step("say", move |_| {
            let mut tx = tx.clone();
            async move {
                for w in ["one", "two", "three"] {
                    tx.send(w)
                        .await
                        .map_err(|e| fusee::StepError::fatal(e.to_string()))?;
                }
                Ok(())
            }
        })
        .await?;
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
    // twice-1's words, set apart in its source frames, are in its journal.
    let twice = want
        .iter()
        .find(|j| j.to_string().contains("twice-1"))
        .expect("twice-1's journal");
    assert_eq!(twice.to_string().matches("\"Chunk\"").count(), 3, "{twice}");
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

/// A migration (or a reshard) from `src` into `target`, stopped where the
/// progress function says.
type Op<'a> = &'a dyn Fn(
    &Path,
    &StorageConfig,
    fusee::migrate::Progress<'_>,
) -> Result<fusee::migrate::MigrateReport, MigrateError>;

fn migrate_op(
    src: &Path,
    target: &StorageConfig,
    p: fusee::migrate::Progress<'_>,
) -> Result<fusee::migrate::MigrateReport, MigrateError> {
    migrate(&Source::Dir(src.to_path_buf()), target, p)
}

/// Interrupts the migration into `target` at each of its steps in turn:
/// each time the source is unchanged and the destination refused at open,
/// naming the interrupted migration; then the command's next run
/// completes and both stores hold the same journals.
fn interrupted_everywhere(src: &Path, target: &StorageConfig) {
    interrupted_everywhere_by(src, target, &migrate_op);
}

/// A progress function that stops the operation at its step `at` (from
/// 0) and notes there which step that was in `broke`.
fn stopping_at(at: usize, broke: &mut Option<Event>) -> impl FnMut(Event) -> ControlFlow<()> + '_ {
    let mut seen = 0usize;
    move |e| {
        seen += 1;
        if seen > at {
            *broke = Some(e);
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// [`interrupted_everywhere`] of the operation `op`.
fn interrupted_everywhere_by(src: &Path, target: &StorageConfig, op: Op<'_>) {
    let before = snapshot(src);
    let mut at = 0usize;
    loop {
        let mut broke = None;
        match op(src, target, &mut stopping_at(at, &mut broke)) {
            Err(MigrateError::Interrupted) => {}
            other => panic!("step {at}: {other:?}"),
        }
        assert_eq!(snapshot(src), before, "step {at}: the source is only read");
        if broke == Some(Event::Complete) {
            // Stopped after the last step: the store is whole, and a
            // second migration into it is refused.
            opens(target).expect("the finished destination opens");
            let err = op(src, target, &mut |_| ControlFlow::Continue(()))
                .expect_err("a store is not migrated into");
            assert!(matches!(err, MigrateError::TargetNotEmpty(_)), "{err}");
            break;
        }
        let why = opens(target).expect_err("an interrupted destination is refused");
        assert!(why.contains("migrate"), "step {at} ({broke:?}): {why}");
        at += 1;
        assert!(at < 10_000, "the migration never ends");
    }
    // A reshard into one shard has the fewest: mark, read 2 shards, write
    // and check 1, unmark.
    assert!(at >= 8, "only {at} steps");
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

const FAMILY: Workflow<u32, String> = Workflow::new("family");

/// Parents whose children are parked by the time of the crash.
const PARKED_FAMILIES: u32 = 6;
/// Parents started after the last checkpoint (their `Child` records, the
/// child starts and the children's `Start`s in the log tail).
const TAIL_FAMILIES: u32 = 2;

/// Parent `fam-N` starts child `kid-N` (a gate waiting for its signal)
/// and returns what the child returned.
fn register_family(engine: &Engine) {
    engine.register(FAMILY, |ctx: fusee::Ctx, n: u32| async move {
        let got: String = ctx.child(GATE, &format!("kid-{n}"), &()).await?;
        Ok::<_, fusee::Failure>(format!("got {got}"))
    });
}

async fn described(engine: &Engine, id: &str) {
    for _ in 0..3000 {
        if engine.describe(id).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} never started");
}

/// [`build_crashed`]'s store plus parents and children on both shards:
/// some parked, then more started and the engine dropped without closing
/// (a crash), so the log tail holds child starts.
async fn build_family(tag: &str) -> PathBuf {
    let dir = build_crashed("file", tag).await;
    let clock = VirtualClock::new(START_MS + 30_000);
    let engine = Engine::open(config("file", &dir, &clock).stream_apart_bytes(0))
        .await
        .expect("opens");
    register(&engine);
    register_family(&engine);
    for n in 0..PARKED_FAMILIES {
        engine
            .start(FAMILY, &format!("fam-{n}"), &n)
            .await
            .expect("start");
    }
    for n in 0..PARKED_FAMILIES {
        described(&engine, &format!("kid-{n}")).await;
    }
    clock.advance(10_000);
    let parks = PARKED_FAMILIES as u64 * 2;
    common::until(&engine, "the families park", |m| m.parks >= parks).await;
    engine.close().await.expect("close");
    drop(engine);
    off_runtime(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let clock = VirtualClock::new(START_MS + 60_000);
            let engine = Engine::open(config("file", &dir, &clock).stream_apart_bytes(0))
                .await
                .expect("opens");
            register(&engine);
            register_family(&engine);
            for n in PARKED_FAMILIES..PARKED_FAMILIES + TAIL_FAMILIES {
                engine
                    .start(FAMILY, &format!("fam-{n}"), &n)
                    .await
                    .expect("start");
                described(&engine, &format!("kid-{n}")).await;
            }
            drop(engine);
        });
        drop(rt);
    });
    for _ in 0..500 {
        if fusee(&["runs", s(&dir), "--json"]).status.success() {
            return dir;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the crashed store stays unreadable");
}

fn family_ids() -> Vec<String> {
    let mut ids: Vec<String> = RUNS.iter().map(|(id, _, _)| id.to_string()).collect();
    ids.extend((0..3).map(|i| format!("late-{i}")));
    for n in 0..PARKED_FAMILIES + TAIL_FAMILIES {
        ids.push(format!("fam-{n}"));
        ids.push(format!("kid-{n}"));
    }
    ids
}

/// Every run's journal with run numbers and shards left out (a reshard
/// changes those, and only those), by workflow ID.
fn journals_unnumbered(dir: &Path) -> Vec<serde_json::Value> {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.remove("shard");
                m.remove("run");
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    family_ids()
        .iter()
        .map(|id| {
            let mut j = fusee_json(&["show", s(dir), id, "--json"], 0);
            strip(&mut j);
            j
        })
        .collect()
}

/// Each run of `dir` sits on the shard its ID hashes to under `shards`.
fn placed(dir: &Path, shards: u32) -> usize {
    let runs = fusee_json(&["runs", s(dir), "--json"], 0);
    let runs = runs.as_array().expect("a list");
    for r in runs {
        let id = r["id"].as_str().expect("an id");
        let want = fusee::core::shard::shard_of(id, shards);
        assert_eq!(r["shard"].as_u64(), Some(u64::from(want)), "{r}");
    }
    runs.len()
}

/// An engine with `shards` shards on the resharded `dir` carries on:
/// every child's signal reaches it and its result its parent (whose link
/// was rewritten), the other waiting runs take their signals.
async fn carries_on(backend: &str, dir: &Path, shards: u32) {
    let clock = VirtualClock::new(START_MS + 90_000);
    let engine = Engine::open(config(backend, dir, &clock).shards(shards))
        .await
        .expect("the resharded store opens");
    register(&engine);
    register_family(&engine);
    for n in 0..PARKED_FAMILIES + TAIL_FAMILIES {
        engine
            .signal(&format!("kid-{n}"), GO, &format!("go {n}"))
            .await
            .expect("signal");
    }
    for n in 0..PARKED_FAMILIES + TAIL_FAMILIES {
        let r = tokio::time::timeout(
            Duration::from_secs(30),
            engine.result(FAMILY, &format!("fam-{n}")),
        )
        .await
        .unwrap_or_else(|_| panic!("fam-{n} never hears from its child"))
        .expect("result");
        assert_eq!(r, format!("got go {n}"));
    }
    for id in ["wait-1", "parked-1"] {
        engine
            .signal(id, GO, &format!("go {id}"))
            .await
            .expect("signal");
        assert_eq!(
            engine.result(GATE, id).await.expect("result"),
            format!("go {id}")
        );
    }
    let late = engine.describe("late-2").await.expect("late-2 carried");
    assert_eq!(late.workflow, "greet", "{late:?}");
    engine.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_moves_every_run_and_its_links_follow() {
    let _serial = serial().await;
    let src = build_family("reshard-links").await;
    let before = snapshot(&src);
    let want = journals_unnumbered(&src);
    let total = placed(&src, 2);
    for (shards, backend) in [(3u32, "file"), (1, "redb"), (5, "rocksdb")] {
        let dst = temp_dir(&format!("reshard-links-{shards}"));
        let n = shards.to_string();
        let out = fusee_json(
            &[
                "reshard",
                s(&src),
                s(&dst),
                "--shards",
                &n,
                "--to",
                backend,
                "--json",
            ],
            0,
        );
        assert_eq!(out["shards"], shards, "{out}");
        assert_eq!(out["checked"]["runs"], total, "{out}");
        assert!(
            out["copied"]["inbox_messages"].as_u64() > Some(0),
            "the log tail's child starts are carried: {out}"
        );
        assert_eq!(snapshot(&src), before, "the source is only read");
        assert_eq!(placed(&dst, shards), total, "{shards} shards");
        assert_eq!(journals_unnumbered(&dst), want, "{shards} shards");
        assert_eq!(fusee(&["verify", s(&dst)]).status.code(), Some(0));
        carries_on(backend, &dst, shards).await;
        let _ = std::fs::remove_dir_all(&dst);
    }
    // A shard count out of range is refused before anything is written.
    let dst = temp_dir("reshard-links-zero");
    let out = fusee(&["reshard", s(&src), s(&dst), "--shards", "0"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(!dst.join("FUSEE").exists());
    let _ = std::fs::remove_dir_all(&src);
}

fn reshard_op(
    shards: u32,
) -> impl Fn(
    &Path,
    &StorageConfig,
    fusee::migrate::Progress<'_>,
) -> Result<fusee::migrate::MigrateReport, MigrateError> {
    move |src, target, p| reshard(&Source::Dir(src.to_path_buf()), target, shards, p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_interrupted_at_every_step_is_refused_then_redone() {
    let _serial = serial().await;
    let src = build_family("reshard-steps").await;
    let want = journals_unnumbered(&src);
    for (shards, backend) in [(3u32, Backend::File), (1, Backend::Redb)] {
        let dst = temp_dir(&format!("reshard-steps-{shards}"));
        interrupted_everywhere_by(
            &src,
            &StorageConfig::new(backend, &dst),
            &reshard_op(shards),
        );
        assert_eq!(journals_unnumbered(&dst), want, "{shards} shards");
        assert_eq!(fusee(&["verify", s(&dst)]).status.code(), Some(0));
        let _ = std::fs::remove_dir_all(&dst);
    }
    if let Some(url) = fusee_tests::pg_url_or_skip("an interrupted reshard into PostgreSQL") {
        let sch = schema("reshard_steps");
        let target = StorageConfig::postgres(&url).postgres_schema(&sch);
        off_runtime(|| interrupted_everywhere_by(&src, &target, &reshard_op(4)));
        // Back out of PostgreSQL into a directory of 2 shards: the same
        // journals again.
        let back = temp_dir("reshard-steps-back");
        let out = fusee_json(
            &[
                "reshard",
                &url,
                s(&back),
                "--source-schema",
                &sch,
                "--shards",
                "2",
                "--json",
            ],
            0,
        );
        assert_eq!(out["shards"], 2, "{out}");
        assert_eq!(
            journals_unnumbered(&back),
            want,
            "file -> postgres(4) -> file(2)"
        );
        carries_on("file", &back, 2).await;
        drop_schema(&url, &sch);
        let _ = std::fs::remove_dir_all(&back);
    }
    let _ = std::fs::remove_dir_all(&src);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_killed_at_any_moment_is_refused_or_whole() {
    let _serial = serial().await;
    let src = build_family("reshard-kill").await;
    let want = journals_unnumbered(&src);
    let before = snapshot(&src);
    let exe = env!("CARGO_BIN_EXE_fusee");
    let args = |dst: &Path| -> Vec<String> {
        ["reshard", s(&src), s(dst), "--shards", "3", "--to", "redb"]
            .map(String::from)
            .to_vec()
    };
    let mut refused = 0;
    for (i, delay_us) in [0u64, 1_000, 4_000, 16_000, 64_000].into_iter().enumerate() {
        let dst: PathBuf = temp_dir(&format!("reshard-kill-{i}"));
        let mut child = std::process::Command::new(exe)
            .args(args(&dst))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("fusee runs");
        std::thread::sleep(Duration::from_micros(delay_us));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        assert_eq!(snapshot(&src), before, "the source is only read");
        let again = || {
            let a = args(&dst);
            let mut a: Vec<&str> = a.iter().map(String::as_str).collect();
            a.push("--json");
            fusee_json(&a, 0);
        };
        match opens(&StorageConfig::new(Backend::Redb, &dst)) {
            Ok(()) => {
                let runs = fusee_json(&["runs", s(&dst), "--json"], 0);
                if runs.as_array().is_some_and(Vec::is_empty) {
                    again();
                }
            }
            Err(why) => {
                refused += 1;
                assert!(
                    why.contains("migrate") || why.contains("no Fusee store"),
                    "kill {i}: {why}"
                );
                again();
            }
        }
        assert_eq!(journals_unnumbered(&dst), want, "kill {i}");
        let _ = std::fs::remove_dir_all(&dst);
    }
    assert!(refused > 0, "no kill landed inside a reshard");
    let _ = std::fs::remove_dir_all(&src);
}

/// A parent on shard 0 and its child's ID on shard 1 (of 2).
fn split_family() -> u32 {
    use fusee::core::shard::shard_of;
    (0..1000)
        .find(|n| shard_of(&format!("fam-{n}"), 2) == 0 && shard_of(&format!("kid-{n}"), 2) == 1)
        .expect("some family splits")
}

/// A PostgreSQL store of 2 shards holding an inbox row: an engine under
/// leases owning only shard 0 started a parent there whose child's start,
/// for shard 1 (which no process runs), waits in shard 1's inbox table.
/// Returns the schema and the family's number.
async fn build_inbox(url: &str, tag: &str) -> (String, u32) {
    let sch = schema(tag);
    drop_schema(url, &sch);
    let storage = StorageConfig::postgres(url).postgres_schema(&sch);
    let clock = VirtualClock::new(START_MS);
    let config = || {
        fusee::Config::new(storage.clone())
            .shards(2)
            .clock(fusee::Clock::Virtual(clock.clone()))
    };
    // Both shards made (and checkpointed at close) by a first engine.
    let engine = Engine::open(config()).await.expect("opens");
    engine.close().await.expect("close");
    drop(engine);
    let n = split_family();
    let engine = Engine::open(config().ownership(fusee::Ownership::Lease {
        retry: Some(Duration::from_secs(24 * 3600)),
        prefer: Some(vec![0]),
    }))
    .await
    .expect("opens under leases");
    register(&engine);
    register_family(&engine);
    engine
        .start(FAMILY, &format!("fam-{n}"), &n)
        .await
        .expect("start");
    // The child start's row, posted by shard 0's driver.
    let rows = || {
        let url = url.to_string();
        let sch = sch.clone();
        off_runtime(move || {
            let mut c = postgres_client(&url).expect("connects");
            c.query_one(&format!("SELECT count(*) FROM \"{sch}\".inbox"), &[])
                .map(|r| r.get::<_, i64>(0))
                .unwrap_or(0)
        })
    };
    for _ in 0..3000 {
        if rows() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(rows(), 1, "one child start waits in shard 1's inbox");
    engine.close().await.expect("close");
    drop(engine);
    assert_eq!(rows(), 1, "nobody read it");
    (sch, n)
}

/// The family of [`build_inbox`] carries on in the store at `dir`: the
/// child started from the carried message, then its signal, then the
/// parent's result.
async fn inbox_carried(dir: &Path, shards: u32, n: u32) {
    let clock = VirtualClock::new(START_MS + 10_000);
    let engine = Engine::open(config("file", dir, &clock).shards(shards))
        .await
        .expect("opens");
    register(&engine);
    register_family(&engine);
    let kid = format!("kid-{n}");
    described(&engine, &kid).await;
    engine
        .signal(&kid, GO, &"go".to_string())
        .await
        .expect("signal");
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        engine.result(FAMILY, &format!("fam-{n}")),
    )
    .await
    .expect("the parent hears from its child")
    .expect("result");
    assert_eq!(r, "got go");
    engine.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_inbox_rows_are_carried_by_migrate_and_reshard() {
    let _serial = serial().await;
    let Some(url) = fusee_tests::pg_url_or_skip("inbox rows of a PostgreSQL store") else {
        return;
    };
    let (sch, n) = build_inbox(&url, "inbox").await;
    let dst = temp_dir("migrate-inbox");
    let out = fusee_json(
        &["migrate", &url, s(&dst), "--source-schema", &sch, "--json"],
        0,
    );
    assert_eq!(out["copied"]["inbox_messages"], 1, "{out}");
    inbox_carried(&dst, 2, n).await;
    let resharded = temp_dir("reshard-inbox");
    let out = fusee_json(
        &[
            "reshard",
            &url,
            s(&resharded),
            "--source-schema",
            &sch,
            "--shards",
            "3",
            "--json",
        ],
        0,
    );
    assert!(out["copied"]["inbox_messages"].as_u64() >= Some(1), "{out}");
    inbox_carried(&resharded, 3, n).await;
    drop_schema(&url, &sch);
    for d in [&dst, &resharded] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// `fusee backup`: a stopped store copied into its own backend, journals
/// byte-equal; a store an engine holds refused with the way to back it up
/// live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_copies_a_stopped_store_and_points_a_live_one_at_the_engine() {
    let _serial = serial().await;
    let src = build_crashed("file", "backup-src").await;
    let dst = temp_dir("backup-dst");
    let out = fusee(&["backup", s(&src), s(&dst)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(journals(&dst), journals(&src));
    // A live engine's store.
    let clock = VirtualClock::new(START_MS + 40_000);
    let engine = Engine::open(config("file", &src, &clock))
        .await
        .expect("opens");
    let dst2 = temp_dir("backup-dst-live");
    let out = fusee(&["backup", s(&src), s(&dst2)]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("an engine holds") && err.contains("Engine::backup"),
        "{err}"
    );
    assert!(!dst2.exists(), "nothing is written for a live store");
    engine.close().await.expect("close");
    for d in [&src, &dst, &dst2] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Source of a reshard taking over: `url`'s schema `sch`.
fn pg_store(url: &str, sch: &str) -> StorageConfig {
    StorageConfig::postgres(url).postgres_schema(sch)
}

/// Runs `f` on a thread of its own while the test's runtime keeps serving
/// the engines (a reshard is blocking, and PostgreSQL's client may not
/// start its runtime on a runtime thread).
async fn beside<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.await.expect("the thread answers")
}

/// A PostgreSQL query's single count.
fn pg_count(url: &str, sql: String) -> i64 {
    let url = url.to_owned();
    off_runtime(move || {
        postgres_client(&url)
            .expect("connects")
            .query_one(&sql, &[])
            .map(|r| r.get::<_, i64>(0))
            .expect("counts")
    })
}

/// `fusee reshard --take-over` while two processes (engines under leases,
/// one shard each) keep starting runs: after the reshard every start
/// acknowledged at any time is in the new store and carries on there;
/// the old processes' shards stop, and nothing more is written to the
/// source, through lease times and their keepers' retries; the source is
/// refused for good, naming where it went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_taking_over_fences_running_processes_and_loses_no_acknowledged_start() {
    let _serial = serial().await;
    let Some(url) = fusee_tests::pg_url_or_skip("a reshard taking a running store over") else {
        return;
    };
    let sch = schema("take_over");
    drop_schema(&url, &sch);
    let src = pg_store(&url, &sch).postgres_lease(Duration::from_millis(600));
    let clock = VirtualClock::new(START_MS);
    let config = || {
        fusee::Config::new(src.clone())
            .shards(2)
            .clock(fusee::Clock::Virtual(clock.clone()))
    };
    // Both shards made by a first engine, then two processes under leases.
    let first = Engine::open(config()).await.expect("opens");
    first.close().await.expect("close");
    drop(first);
    let mut engines = Vec::new();
    for shard in 0..2u32 {
        let e = Engine::open(config().ownership(fusee::Ownership::Lease {
            retry: Some(Duration::from_millis(100)),
            prefer: Some(vec![shard]),
        }))
        .await
        .expect("opens under leases");
        register(&e);
        engines.push(e);
    }
    let engines = std::sync::Arc::new(engines);
    // Starts, each sent to the engine owning its shard, until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let resharded = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (engines, stop, resharded) = (engines.clone(), stop.clone(), resharded.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut late = Vec::new();
            for i in 0..100_000u32 {
                if stop.load(std::sync::atomic::Ordering::Acquire) {
                    break;
                }
                let id = format!("live-{i}");
                for e in engines.iter() {
                    let after = resharded.load(std::sync::atomic::Ordering::Acquire);
                    match e.start(GATE, &id, &()).await {
                        Ok(_) if after => late.push(id.clone()),
                        Ok(_) => acked.push(id.clone()),
                        Err(_) => continue,
                    }
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (acked, late)
        })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    let dst = temp_dir("reshard-take-over");
    let target = StorageConfig::new(Backend::File, &dst);
    let report =
        {
            let (src, target) = (src.clone(), target.clone());
            beside(move || {
                fusee::migrate::reshard_taking_over(&src, &target, 3, &mut |_| {
                    ControlFlow::Continue(())
                })
            })
            .await
            .expect("the reshard takes the store over")
        };
    resharded.store(true, std::sync::atomic::Ordering::Release);
    let log_rows = || pg_count(&url, format!("SELECT count(*) FROM \"{sch}\".log"));
    let retired_rows = || {
        pg_count(
            &url,
            format!("SELECT count(*) FROM \"{sch}\".shards WHERE owner LIKE 'retired: %'"),
        )
    };
    let rows_then = log_rows();
    // Two lease times and many keeper retries while the old processes
    // keep trying to start runs and to take their shards back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    let (acked, late) = writer.await.expect("writer");
    assert!(
        late.is_empty(),
        "starts acknowledged after the reshard: {late:?}"
    );
    assert!(
        acked.len() >= 10,
        "the workload ran: {} starts",
        acked.len()
    );
    assert_eq!(
        log_rows(),
        rows_then,
        "nothing written to the source after the reshard"
    );
    assert_eq!(retired_rows(), 2, "every shard row carries the mark");
    for e in engines.iter() {
        let status = e.shard_status();
        assert!(
            status.iter().all(|s| !s.owned),
            "the old processes own nothing: {status:?}"
        );
        assert!(
            status.iter().any(|s| s
                .last_error
                .as_deref()
                .is_some_and(|t| t.contains("retired"))),
            "they say why: {status:?}"
        );
    }
    assert!(report.check.runs >= acked.len() as u64, "{report:?}");
    // The source is refused for good, naming where it went.
    let Err(err) = Engine::open(config()).await else {
        panic!("a retired store opens");
    };
    let err = err.to_string();
    assert!(
        err.contains("retired") && err.contains("with 3 shards"),
        "{err}"
    );
    // Another destination is refused: the store went to the first.
    let other = temp_dir("reshard-take-over-other");
    let err = {
        let (src, other) = (src.clone(), StorageConfig::new(Backend::File, &other));
        beside(move || {
            fusee::migrate::reshard_taking_over(&src, &other, 4, &mut |_| ControlFlow::Continue(()))
        })
        .await
        .expect_err("retired into another store")
        .to_string()
    };
    assert!(
        err.contains("retired") && err.contains("with 3 shards"),
        "{err}"
    );
    for e in engines.iter() {
        let _ = e.close().await;
    }
    drop(engines);
    // Every acknowledged start is in the new store, and carries on there.
    let engine = Engine::open(config_file(&dst, &clock, 3))
        .await
        .expect("opens");
    register(&engine);
    for id in &acked {
        engine
            .signal(id, GO, &"go".to_string())
            .await
            .unwrap_or_else(|e| panic!("{id}: {e}"));
    }
    for id in &acked {
        let r = tokio::time::timeout(Duration::from_secs(30), engine.result(GATE, id))
            .await
            .unwrap_or_else(|_| panic!("{id} finishes"))
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(r, "go");
    }
    engine.close().await.expect("close");
    drop_schema(&url, &sch);
    for d in [&dst, &other] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// An engine on the file store at `dir` with `shards` shards.
fn config_file(dir: &Path, clock: &VirtualClock, shards: u32) -> fusee::Config {
    config("file", dir, clock).shards(shards)
}

/// A reshard taking a store over, stopped at each of its steps (after the
/// source is retired, and at every step of the copy): each time the
/// source stays retired and the destination refused; the same command then
/// completes, and the messages in flight (an inbox row) are carried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_taking_over_interrupted_at_every_step_carries_on_when_run_again() {
    let _serial = serial().await;
    let Some(url) = fusee_tests::pg_url_or_skip("a reshard taking over, interrupted") else {
        return;
    };
    let (sch, n) = build_inbox(&url, "take_over_cut").await;
    let src = pg_store(&url, &sch);
    let dst = temp_dir("reshard-take-over-cut");
    let target = StorageConfig::new(Backend::File, &dst);
    let mut at = 0usize;
    loop {
        let (src2, target2) = (src.clone(), target.clone());
        let (result, broke) = off_runtime(move || {
            let mut broke = None;
            let r = fusee::migrate::reshard_taking_over(
                &src2,
                &target2,
                3,
                &mut stopping_at(at, &mut broke),
            );
            (r, broke)
        });
        match result {
            Err(MigrateError::Interrupted) => {}
            other => panic!("step {at}: {other:?}"),
        }
        let why = off_runtime(|| opens(&src)).expect_err("the source stays retired");
        assert!(why.contains("retired"), "step {at}: {why}");
        if broke == Some(Event::Complete) {
            break;
        }
        if at > 0 {
            // Before its first step the destination may not exist yet.
            let why = opens(&target).expect_err("an interrupted destination is refused");
            assert!(why.contains("migrate"), "step {at} ({broke:?}): {why}");
        }
        at += 1;
        assert!(at < 10_000, "the reshard never ends");
    }
    assert!(at >= 8, "only {at} steps");
    opens(&target).expect("the finished destination opens");
    inbox_carried(&dst, 3, n).await;
    drop_schema(&url, &sch);
    let _ = std::fs::remove_dir_all(&dst);
}

/// `fusee reshard --take-over` SIGKILLed at moments through its run: the
/// source is either untouched or retired (never half), the destination
/// refused or whole, and the command run again ends with every journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_taking_over_killed_at_any_moment_is_refused_or_whole() {
    let _serial = serial().await;
    let Some(url) = fusee_tests::pg_url_or_skip("a reshard taking over, killed") else {
        return;
    };
    let family = build_family("take-over-kill").await;
    let want = journals_unnumbered(&family);
    let sch = schema("take_over_kill");
    drop_schema(&url, &sch);
    fusee_json(
        &["migrate", s(&family), &url, "--schema", &sch, "--json"],
        0,
    );
    let src = pg_store(&url, &sch);
    // One destination path for every try: the retirement names it.
    let dst = temp_dir("take-over-kill-dst");
    let args: Vec<String> = [
        "reshard",
        &url,
        s(&dst),
        "--source-schema",
        &sch,
        "--shards",
        "3",
        "--take-over",
    ]
    .map(String::from)
    .to_vec();
    let exe = env!("CARGO_BIN_EXE_fusee");
    let mut refused = 0;
    for (i, delay_us) in [0u64, 2_000, 8_000, 32_000, 128_000]
        .into_iter()
        .enumerate()
    {
        let _ = std::fs::remove_dir_all(&dst);
        let mut child = std::process::Command::new(exe)
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("fusee runs");
        std::thread::sleep(Duration::from_micros(delay_us));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let source = off_runtime(|| opens(&src));
        if let Err(why) = &source {
            assert!(why.contains("retired"), "kill {i}: {why}");
        }
        match opens(&StorageConfig::new(Backend::File, &dst)) {
            Ok(()) => {}
            Err(why) => {
                refused += 1;
                assert!(
                    why.contains("migrate") || why.contains("no Fusee store"),
                    "kill {i}: {why}"
                );
                let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
                a.push("--json");
                fusee_json(&a, 0);
            }
        }
        assert_eq!(journals_unnumbered(&dst), want, "kill {i}");
    }
    assert!(refused > 0, "no kill landed inside a reshard");
    let why = off_runtime(|| opens(&src)).expect_err("the source ends retired");
    assert!(why.contains("retired"), "{why}");
    drop_schema(&url, &sch);
    let _ = std::fs::remove_dir_all(&dst);
    let _ = std::fs::remove_dir_all(&family);
}

/// `fusee reshard DIR --shards N` in place: the directory holds the new
/// store, checked, its runs carrying on; the old one is kept beside it;
/// a second run is refused while that is there, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_in_place_swaps_the_directories_and_keeps_the_old_store() {
    let _serial = serial().await;
    let dir = build_family("in-place").await;
    let want = journals_unnumbered(&dir);
    let out = fusee_json(&["reshard", s(&dir), "--shards", "3", "--json"], 0);
    assert_eq!(out["shards"], 3, "{out}");
    let (next, before) = fusee::migrate::in_place_paths(&dir).expect("a directory");
    assert_eq!(out["before"], s(&before), "{out}");
    assert!(!next.exists());
    assert_eq!(
        journals_unnumbered(&dir),
        want,
        "the directory holds every run"
    );
    assert_eq!(placed(&dir, 3), want.len());
    assert_eq!(
        journals_unnumbered(&before),
        want,
        "the old store is kept whole"
    );
    let again = fusee(&["reshard", s(&dir), "--shards", "4"]);
    assert_ne!(again.status.code(), Some(0));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("before-reshard"), "{err}");
    // Given as `.` from inside it, the directory itself is swapped.
    let _ = std::fs::remove_dir_all(&before);
    let here = std::process::Command::new(env!("CARGO_BIN_EXE_fusee"))
        .args(["reshard", ".", "--shards", "4"])
        .current_dir(&dir)
        .output()
        .expect("fusee runs");
    assert_eq!(
        here.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&here.stderr)
    );
    assert_eq!(placed(&dir, 4), want.len(), "resharded from inside");
    assert_eq!(journals_unnumbered(&dir), want);
    assert!(
        before.join(fusee::storage::identity::MARKER).exists(),
        "the 3-shard store kept"
    );
    carries_on("file", &dir, 4).await;
    for d in [&dir, &before] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// An in-place reshard stopped at each of its steps (the swap included):
/// each time the directory holds a whole store, the old or the new one,
/// never nothing; the same call then finishes, and the journals are all
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_in_place_interrupted_anywhere_leaves_a_whole_store_and_finishes() {
    let _serial = serial().await;
    let dir = build_family("in-place-cut").await;
    let want = journals_unnumbered(&dir);
    let (next, before) = fusee::migrate::in_place_paths(&dir).expect("a directory");
    let target = StorageConfig::new(Backend::File, &dir);
    // The copy, stopped at each step: every run starts it over.
    let mut at = 0usize;
    loop {
        let mut broke = None;
        let r = fusee::migrate::reshard_in_place(&dir, 3, &mut stopping_at(at, &mut broke));
        assert!(
            matches!(r, Err(MigrateError::Interrupted)),
            "step {at}: {r:?}"
        );
        opens(&target).unwrap_or_else(|e| panic!("step {at} ({broke:?}): {e}"));
        assert!(!before.exists(), "step {at}");
        if broke == Some(Event::Complete) {
            break;
        }
        at += 1;
        assert!(at < 10_000, "the reshard never ends");
    }
    assert!(at >= 8, "only {at} steps");
    assert_eq!(
        placed(&dir, 2),
        want.len(),
        "copied, not swapped: the old store"
    );
    // The swap, stopped right after it: the new store is in place.
    let r = fusee::migrate::reshard_in_place(&dir, 3, &mut |e| {
        assert_eq!(e, Event::Swapped, "only the swap was left");
        ControlFlow::Break(())
    });
    assert!(matches!(r, Err(MigrateError::Interrupted)), "{r:?}");
    opens(&target).expect("the swapped store opens");
    assert_eq!(placed(&dir, 3), want.len(), "swapped: the new store");
    // The rename of the old one is all that is left.
    let report = fusee::migrate::reshard_in_place(&dir, 3, &mut |e| {
        panic!("nothing is left to report: {e:?}")
    })
    .expect("finishes");
    assert!(report.reshard.is_none());
    assert!(!next.exists() && before.exists());
    assert_eq!(journals_unnumbered(&dir), want);
    assert_eq!(placed(&dir, 3), want.len());
    for d in [&dir, &before] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// `fusee reshard DIR --shards N` SIGKILLed at moments through its run:
/// the directory always opens whole, and the command run again finishes
/// with every journal (the count goes 2 -> 3 -> 2 -> ... across the kills).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_in_place_killed_at_any_moment_leaves_a_whole_store() {
    let _serial = serial().await;
    let dir = build_family("in-place-kill").await;
    let want = journals_unnumbered(&dir);
    let (_, before) = fusee::migrate::in_place_paths(&dir).expect("a directory");
    let target = StorageConfig::new(Backend::File, &dir);
    let exe = env!("CARGO_BIN_EXE_fusee");
    let mut count = 2u32;
    let mut cut = 0;
    for (i, delay_us) in [0u64, 3_000, 10_000, 30_000, 100_000, 300_000]
        .into_iter()
        .enumerate()
    {
        let to = if count == 2 { 3 } else { 2 };
        let _ = std::fs::remove_dir_all(&before);
        let n = to.to_string();
        let mut child = std::process::Command::new(exe)
            .args(["reshard", s(&dir), "--shards", &n])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("fusee runs");
        std::thread::sleep(Duration::from_micros(delay_us));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        opens(&target).unwrap_or_else(|e| panic!("kill {i}: the directory: {e}"));
        if !before.exists() {
            cut += 1;
            fusee_json(&["reshard", s(&dir), "--shards", &n, "--json"], 0);
        }
        assert!(before.exists(), "kill {i}");
        count = to;
        assert_eq!(journals_unnumbered(&dir), want, "kill {i}");
        assert_eq!(placed(&dir, count), want.len(), "kill {i}");
    }
    assert!(cut > 0, "no kill landed inside a reshard");
    for d in [&dir, &before] {
        let _ = std::fs::remove_dir_all(d);
    }
}
