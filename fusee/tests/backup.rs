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
//! - The backup stopped at every step: the destination is refused at
//!   open, and the engine carries on.
//!
//! `FUSEE_BACKUP_RUNS` sets the families (default 24).

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

fn config(dir: &Path) -> Config {
    Config::file(dir).shards(SHARDS)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_load_opens_whole_and_its_runs_carry_on() {
    let runs: u64 = std::env::var("FUSEE_BACKUP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
        .max(4);
    let src = scratch("load-src");
    let dest = scratch("load-dest");
    let engine = Engine::open(config(&src)).await.expect("open");
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

    // During: the other half start while the backup runs.
    let load = {
        let engine = engine.clone();
        tokio::spawn(async move {
            for n in before..runs {
                family(&engine, n).await.expect("family during the backup");
            }
        })
    };
    let report = engine.backup(&dest).await.expect("backup");
    load.await.expect("load");
    assert_eq!(report.shards, SHARDS);
    assert_eq!(report.pauses.len(), SHARDS as usize);
    assert!(report.runs >= before * 3, "{report:?}");
    assert!(report.bytes > 0);
    eprintln!(
        "backup: {} runs, {} bytes, longest pause {:?}, took {:?}",
        report.runs,
        report.bytes,
        report.longest_pause(),
        report.took
    );

    // The original carries on: every family ends.
    for n in 0..runs {
        let got = tokio::time::timeout(PATIENCE, engine.result(PARENT, &format!("parent-{n}")))
            .await
            .expect("the original's result in time")
            .expect("result");
        assert_eq!(got, parent_result(n));
    }
    engine.close().await.expect("close");

    // The copy: verify-clean, then opened and carried on.
    assert_eq!(verify(&dest), Vec::<String>::new());
    let copy = Engine::open(config(&dest)).await.expect("the copy opens");
    register(&copy);
    for (n, want) in &results {
        let got = copy
            .result(PARENT, &format!("parent-{n}"))
            .await
            .unwrap_or_else(|e| panic!("parent-{n}: finished before the backup, lost: {e}"));
        assert_eq!(got, *want);
    }
    for n in 0..runs {
        let present = copy.describe(&format!("parent-{n}")).await.is_ok();
        if n < before {
            assert!(present, "parent-{n} was acknowledged before the backup");
        }
        if !present {
            continue;
        }
        // A parent in the copy has its partner (started and acknowledged
        // before the parent was asked for).
        assert!(
            copy.describe(&format!("partner-{n}")).await.is_ok(),
            "parent-{n} is in the copy but its partner is not"
        );
        // Its `go` may have come after the cut: sent again, deduplicated
        // (a parent finished in the copy refuses it).
        match copy
            .signal_once(&format!("parent-{n}"), GO, "go", &(n + 1))
            .await
        {
            Ok(()) | Err(Error::Finished { .. }) => {}
            Err(e) => panic!("go on the copy: {e}"),
        }
        let got = tokio::time::timeout(PATIENCE, copy.result(PARENT, &format!("parent-{n}")))
            .await
            .unwrap_or_else(|_| panic!("parent-{n} does not finish in the copy"))
            .expect("result");
        assert_eq!(got, parent_result(n), "parent-{n}");
        let got = tokio::time::timeout(PATIENCE, copy.result(PARTNER, &format!("partner-{n}")))
            .await
            .unwrap_or_else(|_| panic!("partner-{n} does not finish in the copy"))
            .expect("result");
        assert_eq!(got, partner_result(n), "partner-{n}");
    }
    copy.close().await.expect("close the copy");
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(&dest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_stopped_at_any_step_leaves_a_destination_refused_at_open() {
    let src = scratch("stop-src");
    let engine = Engine::open(config(&src)).await.expect("open");
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
        match Engine::open(config(&dest)).await {
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
    engine.close().await.expect("close");
    let _ = std::fs::remove_dir_all(&busy);
    let _ = std::fs::remove_dir_all(&src);
}
