//! Issue 37's reminder service, SIGKILLed when about half its reminders
//! are due and reopened in a fresh process (the comparison's `reminders`
//! workload, [`fusee_benches::engine::reminders`]): every reminder ends
//! once as its fate says, none fires before it is due, no cancelled one
//! fires, and no snooze is lost. The reopening child checks each run and
//! fails on the first that went wrong; this test checks the workload
//! really straddled the kill (some reminders fired after the open, some
//! were overdue or fired before).
//!
//! `FUSEE_REMINDERS` sets the count (default 5,000, a few seconds in the
//! dev profile); raise it by hand for a longer run.
#![cfg(feature = "file")]

use std::path::{Path, PathBuf};

use fusee_benches::engine::EngineSubject;
use fusee_benches::engine::child::kill_mid_reminders;

fn count() -> u64 {
    std::env::var("FUSEE_REMINDERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000)
}

#[test]
fn reminders_killed_mid_way_fire_once_never_early_and_cancelled_ones_never() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reminders_sigkill");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the test's directory");
    let program = PathBuf::from(env!("CARGO_BIN_EXE_fusee-compare"));
    let n = count();
    let r = kill_mid_reminders(
        &program,
        EngineSubject::Fusee(fusee::Backend::File),
        &dir,
        n,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // Due after the open: the reopened engine fired them.
    assert!(r.late_count > 0, "{r:?}");
    // Before the kill: the first process fired or cancelled some, so the
    // open found fewer runs than were started to load.
    assert!(r.loaded < n, "{r:?}");
    assert!(r.replayed > 0, "the kill left a log to replay: {r:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
