//! Issue 35 item 2: the online backup (`Engine::backup`) of a live engine
//! on the directory backends.
//!
//! - A workload runs during the backup (parents on every shard starting a
//!   kid on whichever shard its ID hashes to, a durable timer, a step, a
//!   signal sent to a partner workflow, a client signal): the copy is
//!   verify-clean, everything acknowledged before the backup call is in
//!   it, runs whose start is in it carry on to their results there, and a
//!   parent in the copy implies its partner is (the partner's start was
//!   acknowledged before the parent's was asked: a consistent cut keeps
//!   what happened before). The original carries on too.
//!   The same on redb and RocksDB, and an in-memory engine's backup (a
//!   file store).
//! - The checks can fail: a backup without the barrier (shards cut one by
//!   one, `Engine::backup_without_barrier`) is caught losing a message.
//! - The backup stopped at every step: the destination is refused at
//!   open, and the engine carries on. A process SIGKILLed at moments
//!   through its backup: the destination is refused, an empty store, or
//!   whole; never part of one.
//!
//! `FUSEE_BACKUP_RUNS` sets the families (default 24),
//! `FUSEE_BACKUP_KILLS` the kills (default 8).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::inspect::{StoreVisitor, open_read_only, rebuild};
use fusee::migrate::Event;
use fusee::storage::Storage;
use fusee::{Backend, Config, Ctx, Engine, Error, Failure, Signal, Workflow};

const PARENT: Workflow<u64, u64> = Workflow::new("parent");
const KID: Workflow<u64, u64> = Workflow::new("kid");
const PARTNER: Workflow<u64, u64> = Workflow::new("partner");
const NOTE: Signal<u64> = Signal::new("note");
const GO: Signal<u64> = Signal::new("go");
const SHARDS: u32 = 4;
/// The longest a result may take: only a lost start or signal trips it.
const PATIENCE: Duration = Duration::from_secs(60);

fn register(engine: &Engine) {
    engine.register(KID, |ctx: Ctx, n: u64| async move {
        ctx.sleep("nap", Duration::from_millis(5)).await?;
        Ok::<_, Failure>(
            ctx.step("triple", move |_| async move { Ok(n * 3) })
                .await?,
        )
    });
    engine.register(PARTNER, |ctx: Ctx, n: u64| async move {
        let note = ctx.wait_for(&NOTE).await?.unwrap_or(0);
        Ok::<_, Failure>(n + note)
    });
    engine.register(PARENT, |ctx: Ctx, n: u64| async move {
        let kid = ctx.child(KID, &format!("kid-{n}"), &n).await?;
        ctx.signal(&format!("partner-{n}"), NOTE, &kid)?;
        let go = ctx.wait_for(&GO).await?.unwrap_or(0);
        Ok::<_, Failure>(kid + go)
    });
}

fn parent_result(n: u64) -> u64 {
    n * 3 + n + 1
}

fn partner_result(n: u64) -> u64 {
    n + n * 3
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fusee-backup-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn config(backend: Backend, dir: &Path) -> Config {
    Config::new(fusee::StorageConfig::new(backend, dir)).shards(SHARDS)
}

/// Starts family `n` (partner, then parent) and sends the parent its `go`
/// (keyed, so sending it again to a copy that holds it changes nothing).
async fn family(engine: &Engine, n: u64) -> fusee::Result<()> {
    engine.start(PARTNER, &format!("partner-{n}"), &n).await?;
    engine.start(PARENT, &format!("parent-{n}"), &n).await?;
    engine
        .signal_once(&format!("parent-{n}"), GO, "go", &(n + 1))
        .await
}

/// Every shard of the store at `dir` rebuilt and verified as `fusee
/// verify` does; the problems found.
fn verify(dir: &Path) -> Vec<String> {
    struct Verify;
    impl StoreVisitor for Verify {
        type Out = Vec<String>;
        fn visit<S: Storage>(self, _: Backend, storage: &S) -> Vec<String> {
            let mut problems = Vec::new();
            for shard in storage.shards().expect("shards") {
                match rebuild(storage, shard, 0, &mut |_| {}) {
                    Ok(mut view) => view.verify(
                        &mut |run, e| problems.push(format!("shard {shard} run {run}: {e}")),
                        &mut || {},
                    ),
                    Err(e) => problems.push(format!("shard {shard}: {e}")),
                }
            }
            problems
        }
    }
    open_read_only(dir, Verify).expect("the copy opens read-only")
}

/// What a client saw acknowledged before the backup was called.
struct Before {
    /// Families started and signalled (0..this).
    families: u64,
    /// Results received.
    results: Vec<(u64, u64)>,
}

/// How a backup is taken: whole, or the sabotage without its barrier.
#[derive(Clone, Copy)]
enum Take {
    Whole,
    #[cfg(feature = "testing")]
    WithoutBarrier,
}

/// Runs the workload on a `backend` engine in `src`, backs it up into
/// `dest` half-way (`take`), lets the original finish every family, and
/// returns what was acknowledged before the backup and how many families
/// were started in all.
async fn load_and_back_up(
    backend: Backend,
    src: &Path,
    dest: &Path,
    take: Take,
) -> (Before, u64, fusee::BackupReport) {
    let runs: u64 = std::env::var("FUSEE_BACKUP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
        .max(4);
    let engine = Engine::open(config(backend, src)).await.expect("open");
    register(&engine);
    // Before the backup: half the families started and signalled, a
    // quarter of them finished (results acknowledged).
    let before = runs / 2;
    for n in 0..before {
        family(&engine, n).await.expect("family before the backup");
    }
    let mut results = Vec::new();
    for n in 0..before / 2 {
        let got = tokio::time::timeout(PATIENCE, engine.result(PARENT, &format!("parent-{n}")))
            .await
            .expect("a result in time")
            .expect("result");
        assert_eq!(got, parent_result(n));
        results.push((n, got));
    }
    // During: more families start while the backup runs, until it ends
    // (at least `runs` in all).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let engine = engine.clone();
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut n = before;
            while n < runs || !stop.load(std::sync::atomic::Ordering::Acquire) {
                family(&engine, n).await.expect("family during the backup");
                n += 1;
            }
            n
        })
    };
    let report = match take {
        Take::Whole => engine.backup(dest).await,
        #[cfg(feature = "testing")]
        Take::WithoutBarrier => {
            engine
                .backup_without_barrier(dest, Duration::from_millis(30))
                .await
        }
    }
    .expect("backup");
    stop.store(true, std::sync::atomic::Ordering::Release);
    let started = load.await.expect("load");
    // The original carries on: every family ends.
    for n in 0..started {
        let got = tokio::time::timeout(PATIENCE, engine.result(PARENT, &format!("parent-{n}")))
            .await
            .expect("the original's result in time")
            .expect("result");
        assert_eq!(got, parent_result(n));
    }
    engine.close().await.expect("close");
    (
        Before {
            families: before,
            results,
        },
        started,
        report,
    )
}

/// Opens the copy in `dest` and checks it against what was acknowledged
/// before the backup; the first problem found, if any. `patience`: how
/// long a run of the copy may take to finish.
async fn check_copy(
    backend: Backend,
    dest: &Path,
    before: &Before,
    started: u64,
    patience: Duration,
) -> Option<String> {
    let problems = verify(dest);
    if !problems.is_empty() {
        return Some(format!("verify: {problems:?}"));
    }
    let copy = Engine::open(config(backend, dest))
        .await
        .expect("the copy opens");
    register(&copy);
    let problem = check_runs(&copy, before, started, patience).await;
    copy.close().await.expect("close the copy");
    problem
}

async fn check_runs(
    copy: &Engine,
    before: &Before,
    started: u64,
    patience: Duration,
) -> Option<String> {
    for (n, want) in &before.results {
        match copy.result(PARENT, &format!("parent-{n}")).await {
            Ok(got) if got == *want => {}
            other => return Some(format!("parent-{n}, finished before the backup: {other:?}")),
        }
    }
    for n in 0..started {
        let present = copy.describe(&format!("parent-{n}")).await.is_ok();
        if n < before.families && !present {
            return Some(format!(
                "parent-{n} was acknowledged before the backup and is missing"
            ));
        }
        if !present {
            continue;
        }
        // A parent in the copy has its partner (started and acknowledged
        // before the parent was asked for).
        if copy.describe(&format!("partner-{n}")).await.is_err() {
            return Some(format!("parent-{n} is in the copy but its partner is not"));
        }
        // Its `go` may have come after the cut: sent again, deduplicated
        // (a parent finished in the copy refuses it).
        match copy
            .signal_once(&format!("parent-{n}"), GO, "go", &(n + 1))
            .await
        {
            Ok(()) | Err(Error::Finished { .. }) => {}
            Err(e) => return Some(format!("go to parent-{n} on the copy: {e}")),
        }
        for (wf, id, want) in [
            (PARENT, format!("parent-{n}"), parent_result(n)),
            (PARTNER, format!("partner-{n}"), partner_result(n)),
        ] {
            match tokio::time::timeout(patience, copy.result(wf, &id)).await {
                Ok(Ok(got)) if got == want => {}
                Ok(other) => return Some(format!("{id} in the copy: {other:?}")),
                Err(_) => return Some(format!("{id} does not finish in the copy")),
            }
        }
    }
    None
}

async fn under_load(backend: Backend) {
    if !backend.compiled_in() {
        return;
    }
    let src = scratch(&format!("load-src-{backend}"));
    let dest = scratch(&format!("load-dest-{backend}"));
    let (before, started, report) = load_and_back_up(backend, &src, &dest, Take::Whole).await;
    assert_eq!(report.shards, SHARDS);
    assert_eq!(report.pauses.len(), SHARDS as usize);
    // Each shard's hold, in shard order, is timed and lies within the backup.
    let shards: Vec<u32> = report.pauses.iter().map(|&(s, _)| s).collect();
    assert_eq!(shards, (0..SHARDS).collect::<Vec<_>>(), "{report:?}");
    for &(shard, pause) in &report.pauses {
        assert!(
            pause > Duration::ZERO && pause <= report.took,
            "{backend}: shard {shard} held {pause:?}, the backup took {:?}",
            report.took
        );
    }
    assert!(report.longest_pause() <= report.took);
    assert!(report.runs >= before.families * 3, "{report:?}");
    assert!(report.bytes > 0);
    eprintln!(
        "{backend}: backup of {} runs, {} bytes, longest pause {:?}, took {:?}",
        report.runs,
        report.bytes,
        report.longest_pause(),
        report.took
    );
    if let Some(problem) = check_copy(backend, &dest, &before, started, PATIENCE).await {
        panic!("{backend}: {problem}");
    }
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(&dest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_load_opens_whole_and_its_runs_carry_on() {
    under_load(Backend::File).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redb_backup_taken_under_load_opens_whole() {
    under_load(Backend::Redb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rocksdb_backup_taken_under_load_opens_whole() {
    under_load(Backend::Rocksdb).await;
}

/// The checks above can fail: shards cut one after another without the
/// barrier lose what travelled between them (a partner acknowledged after
/// its shard's cut, before its parent's shard's; a kid's start
/// acknowledged and so out of its parent's outbox, but not in the kid's
/// shard's copy). Tried a few times: whether a message falls in a gap
/// depends on timing.
#[cfg(feature = "testing")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_without_the_barrier_is_caught_losing_messages() {
    for attempt in 0..5 {
        let src = scratch(&format!("sabotage-src-{attempt}"));
        let dest = scratch(&format!("sabotage-dest-{attempt}"));
        let (before, started, _) =
            load_and_back_up(Backend::File, &src, &dest, Take::WithoutBarrier).await;
        let problem = check_copy(
            Backend::File,
            &dest,
            &before,
            started,
            Duration::from_secs(3),
        )
        .await;
        let _ = std::fs::remove_dir_all(&src);
        let _ = std::fs::remove_dir_all(&dest);
        if let Some(problem) = problem {
            eprintln!("caught on attempt {attempt}: {problem}");
            return;
        }
    }
    panic!("five backups without the barrier lost nothing: the checks would miss a lost message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_stopped_at_any_step_leaves_a_destination_refused_at_open() {
    let src = scratch("stop-src");
    let engine = Engine::open(config(Backend::File, &src))
        .await
        .expect("open");
    register(&engine);
    for n in 0..8 {
        family(&engine, n).await.expect("family");
    }
    // The steps of a whole backup.
    let whole = scratch("stop-whole");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    engine
        .backup_with(
            &whole,
            Box::new(move |e| {
                s.lock().unwrap().push(e);
                ControlFlow::Continue(())
            }),
        )
        .await
        .expect("whole backup");
    let events = seen.lock().unwrap().clone();
    assert_eq!(events.first(), Some(&Event::Marked));
    assert_eq!(events.last(), Some(&Event::Complete));
    assert!(events.iter().any(|e| matches!(e, Event::Committed)));
    let _ = std::fs::remove_dir_all(&whole);

    // Stopped before each step but the last (after which the copy is
    // complete): refused at open, and the engine goes on.
    for (k, at) in events.iter().enumerate().take(events.len() - 1) {
        let dest = scratch(&format!("stop-{k}"));
        let mut count = 0;
        let stopped = engine
            .backup_with(
                &dest,
                Box::new(move |_| {
                    count += 1;
                    if count > k {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                }),
            )
            .await;
        assert!(
            matches!(stopped, Err(Error::Backup(_))),
            "stopped at {at:?}: {stopped:?}"
        );
        match Engine::open(config(Backend::File, &dest)).await {
            Ok(_) => panic!("a backup stopped at step {k} ({at:?}) opens"),
            Err(e) => assert!(
                e.to_string().contains("migrat"),
                "stopped at {at:?}: refused for another reason: {e}"
            ),
        }
        // The shards were let go: a new family runs to its end.
        let n = 100 + k as u64;
        family(&engine, n)
            .await
            .expect("family after a stopped backup");
        let got = tokio::time::timeout(PATIENCE, engine.result(PARENT, &format!("parent-{n}")))
            .await
            .expect("a result in time")
            .expect("result");
        assert_eq!(got, parent_result(n));
        let _ = std::fs::remove_dir_all(&dest);
    }
    // A destination that holds anything is refused before anything runs.
    let busy = scratch("stop-busy");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("note"), b"mine").unwrap();
    let refused = engine.backup(&busy).await;
    assert!(
        matches!(refused, Err(Error::Backup(fusee::BackupError::NotEmpty(_)))),
        "{refused:?}"
    );
    assert_eq!(std::fs::read(busy.join("note")).unwrap(), b"mine");
    // So is one inside the store's own directory, and nothing is made.
    let refused = engine.backup(src.join("backups/today")).await;
    assert!(
        matches!(
            refused,
            Err(Error::Backup(fusee::BackupError::InsideStore { .. }))
        ),
        "{refused:?}"
    );
    assert!(!src.join("backups").exists());
    engine.close().await.expect("close");
    let _ = std::fs::remove_dir_all(&busy);
    let _ = std::fs::remove_dir_all(&src);
}

/// An in-memory engine's backup is a file store holding its runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_memory_engine_backs_up_into_a_file_store() {
    let dest = scratch("memory-dest");
    let engine = Engine::open(Config::memory().shards(SHARDS))
        .await
        .expect("open");
    register(&engine);
    let families = 8;
    for n in 0..families {
        family(&engine, n).await.expect("family");
    }
    let mut results = Vec::new();
    for n in 0..families / 2 {
        let got = engine
            .result(PARENT, &format!("parent-{n}"))
            .await
            .expect("result");
        results.push((n, got));
    }
    let report = engine.backup(&dest).await.expect("backup");
    assert_eq!(report.shards, SHARDS);
    engine.close().await.expect("close");
    assert_eq!(verify(&dest), Vec::<String>::new());
    let copy = Engine::open(config(Backend::File, &dest))
        .await
        .expect("the copy opens as a file store");
    register(&copy);
    let before = Before { families, results };
    if let Some(problem) = check_runs(&copy, &before, families, PATIENCE).await {
        panic!("{problem}");
    }
    copy.close().await.expect("close the copy");
    let _ = std::fs::remove_dir_all(&dest);
}

/// The child of [`killed_mid_backup_the_destination_is_refused_or_whole`]:
/// opens the store in `FUSEE_BACKUP_CHILD` (families already in it), says
/// so on stdout, and backs it up into `<dir>-dest` (then waits to be
/// killed).
async fn backup_child(src: &Path) {
    use std::io::Write;
    let engine = Engine::open(config(Backend::File, src))
        .await
        .expect("open");
    register(&engine);
    let dest = PathBuf::from(format!("{}-dest", src.display()));
    println!("backing up");
    std::io::stdout().flush().expect("stdout");
    let _ = engine.backup(&dest).await;
    println!("backed up");
    std::io::stdout().flush().expect("stdout");
    tokio::time::sleep(Duration::from_secs(600)).await;
}

/// A process killed (SIGKILL) at a random moment of its backup leaves a
/// destination that is refused at open as incomplete, or an empty store
/// (killed before the mark), or the whole copy; never part of one. Its
/// own store opens after the kill too. `FUSEE_BACKUP_KILLS` sets the
/// kills (default 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_backup_the_destination_is_refused_or_whole() {
    if let Some(src) = std::env::var_os("FUSEE_BACKUP_CHILD") {
        backup_child(Path::new(&src)).await;
        return;
    }
    let kills: u64 = std::env::var("FUSEE_BACKUP_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let src = scratch("kill-src");
    let families = 64;
    {
        let engine = Engine::open(config(Backend::File, &src))
            .await
            .expect("open");
        register(&engine);
        for n in 0..families {
            family(&engine, n).await.expect("family");
        }
        for n in 0..families {
            engine
                .result(PARENT, &format!("parent-{n}"))
                .await
                .expect("result");
        }
        engine.close().await.expect("close");
    }
    let dest = PathBuf::from(format!("{}-dest", src.display()));
    let (mut absent, mut refused, mut empty, mut whole) = (0, 0, 0, 0);
    for k in 0..kills {
        let _ = std::fs::remove_dir_all(&dest);
        let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args([
                "--exact",
                "killed_mid_backup_the_destination_is_refused_or_whole",
                "--nocapture",
            ])
            .env("FUSEE_BACKUP_CHILD", &src)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the child runs");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        let said = tokio::task::spawn_blocking(move || {
            lines.find(|l| l.as_deref().is_ok_and(|l| l == "backing up"))
        })
        .await
        .expect("joins");
        assert!(said.is_some(), "the child never began its backup");
        // From the call on, a few milliseconds in steps: some kills land
        // inside the backup, some after it.
        tokio::time::sleep(Duration::from_millis(k * 12)).await;
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        match Engine::open(config(Backend::File, &dest).existing_only()).await {
            // Killed before the destination held a store (its directory
            // may be made already): nothing to open, nothing half-made.
            Err(e) if !dest.exists() || e.to_string().contains("no Fusee store") => absent += 1,
            Err(e) => {
                assert!(
                    e.to_string().contains("migrat"),
                    "kill {k}: refused for another reason: {e}"
                );
                refused += 1;
            }
            Ok(copy) => {
                register(&copy);
                if copy.describe("parent-0").await.is_ok() {
                    for n in 0..families {
                        let got = tokio::time::timeout(
                            PATIENCE,
                            copy.result(PARENT, &format!("parent-{n}")),
                        )
                        .await
                        .expect("in time")
                        .unwrap_or_else(|e| panic!("kill {k}: parent-{n}: {e}"));
                        assert_eq!(got, parent_result(n));
                    }
                    whole += 1;
                } else {
                    // Killed before the mark: an empty store, never part
                    // of one.
                    let page = copy
                        .list(fusee::ListFilter::new())
                        .await
                        .expect("list the copy");
                    assert!(
                        page.runs.is_empty(),
                        "kill {k}: the copy opens with {} runs and without parent-0",
                        page.runs.len()
                    );
                    empty += 1;
                }
                copy.close().await.expect("close the copy");
            }
        }
        // The killed engine's own store opens.
        let again = Engine::open(config(Backend::File, &src))
            .await
            .expect("the source opens after the kill");
        again.close().await.expect("close");
    }
    eprintln!(
        "{kills} kills: {absent} before the destination, {refused} refused, {empty} empty, \
         {whole} whole"
    );
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(&dest);
}

const TALK: Workflow<u64, u64> = Workflow::new("talk");
const CHUNK: usize = 8 << 10;

/// A run streaming past what a checkpoint carries (its journal written to
/// run-store frames at checkpoints while it stays loaded) is backed up
/// whole: the copy is verify-clean, holds every chunk, and the run
/// carries on there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_stream_in_run_store_frames_is_backed_up_whole() {
    use futures_util::StreamExt;
    let (src, dest) = (scratch("stream-src"), scratch("stream-dest"));
    let config = |dir: &Path| Config::file(dir).shards(1).checkpoint_bytes(64 << 10);
    let talk = |engine: &Engine| {
        engine.register(TALK, |ctx: Ctx, n: u64| async move {
            let tx = ctx.stream("tokens");
            let sent = ctx
                .step("llm", move |_| {
                    let mut tx = tx.clone();
                    async move {
                        for i in 0..n {
                            tx.send(format!("{:<CHUNK$}", format!("tok-{i}")))
                                .await
                                .map_err(|e| fusee::StepError::fatal(e.to_string()))?;
                        }
                        Ok(n)
                    }
                })
                .await?;
            ctx.wait_for(&GO).await?;
            Ok::<_, Failure>(sent)
        });
    };
    let engine = Engine::open(config(&src)).await.expect("open");
    talk(&engine);
    engine.start(TALK, "t", &64).await.expect("start");
    let got: Vec<_> = engine.subscribe("t", "tokens", 0).take(64).collect().await;
    assert_eq!(got.len(), 64);
    engine.backup(&dest).await.expect("backup");
    engine.close().await.expect("close");
    assert_eq!(verify(&dest), Vec::<String>::new());
    let copy = Engine::open(config(&dest)).await.expect("the copy opens");
    talk(&copy);
    let chunks: Vec<_> = copy.subscribe("t", "tokens", 0).take(64).collect().await;
    for (i, c) in chunks.iter().enumerate() {
        let c = c.as_ref().expect("a chunk");
        assert_eq!(c.index, i as u64);
        assert_eq!(c.payload.len(), CHUNK);
        assert!(c.payload.starts_with(format!("tok-{i} ").as_bytes()));
    }
    assert_eq!(chunks.len(), 64);
    copy.signal("t", GO, &0).await.expect("signal");
    assert_eq!(copy.result(TALK, "t").await.expect("result"), 64);
    copy.close().await.expect("close the copy");
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(&dest);
}
