//! A reminder service SIGKILLed while its timers fire (issue 37): a child
//! (`reminders-child start`) starts N durable sleepers due 1 to 3 s later
//! on the file backend, one in ten snoozed and one in ten cancelled by a
//! signal; the parent kills it with SIGKILL [`KILL_AFTER_MS`] after its
//! base time, when about half are due, and a fresh child (`reopen`) opens
//! the store and reports how each ended. Every reminder must be there and:
//!
//! - a cancelled one never fired, and its journal holds no timed-out wait;
//! - every other one fired once (its journal holds exactly one timed-out
//!   wait), at the time its snooze (if any) made it due, never earlier.
//!
//! `FUSEE_REMINDERS_SIGKILL_N` (default 2,000) sets the reminders and
//! `FUSEE_REMINDERS_SIGKILL_RUNS` (default 2) the kills, each on a fresh
//! store.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fusee_tests::env_u64;
use fusee_tests::reminders::{KILL_AFTER_MS, fires_at, id};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A `reminders-child` with `args`, its stdout piped.
fn child(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_reminders-child"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn reminders-child")
}

/// One kill: returns a description of every broken promise (empty: none).
fn one_kill(n: u64, round: u64) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!(
        "fusee-reminders-sigkill-{}-{round}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let store = dir.to_str().expect("a UTF-8 path");
    let count = n.to_string();
    let mut first = child(&["start", store, &count]);
    let mut lines = BufReader::new(first.stdout.take().expect("piped")).lines();
    let base: u64 = match lines.next() {
        Some(Ok(line)) => line
            .strip_prefix("started ")
            .and_then(|b| b.trim().parse().ok())
            .unwrap_or_else(|| panic!("round {round}: the child said {line:?}, not `started`")),
        other => panic!("round {round}: the child ended without starting: {other:?}"),
    };
    let kill_at = base + KILL_AFTER_MS;
    let now = now_ms();
    if kill_at > now {
        std::thread::sleep(Duration::from_millis(kill_at - now));
    }
    first.kill().expect("SIGKILL the first child");
    let _ = first.wait();

    let second = child(&["reopen", store, &count]);
    let output = second.wait_with_output().expect("the reopened child ran");
    assert!(
        output.status.success(),
        "round {round}: the reopened child failed: {}",
        output.status
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        text.lines().last(),
        Some("done"),
        "round {round}: the reopened child did not finish"
    );
    let mut seen = vec![false; n as usize];
    let mut broken = Vec::new();
    for line in text.lines().filter(|l| *l != "done") {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let num = |k: usize| fields.get(k).and_then(|f| f.parse::<u64>().ok());
        let Some(i) = num(1).filter(|&i| i < n) else {
            broken.push(format!("an unknown line: {line:?}"));
            continue;
        };
        if std::mem::replace(&mut seen[i as usize], true) {
            broken.push(format!("{} reported twice", id(i)));
        }
        match (fields[0], fires_at(base, i)) {
            ("cancelled", None) if num(2) == Some(0) => {}
            ("cancelled", None) => {
                broken.push(format!("{} was cancelled after a timeout: {line}", id(i)))
            }
            ("fired", Some(due)) => {
                let (Some(got_due), Some(fired), Some(timeouts)) = (num(2), num(3), num(4)) else {
                    broken.push(format!("a bad line: {line:?}"));
                    continue;
                };
                if got_due != due {
                    broken.push(format!("{} fired due at {got_due}, not {due}", id(i)));
                }
                if fired < due {
                    broken.push(format!("{} fired {} ms early", id(i), due - fired));
                }
                if timeouts != 1 {
                    broken.push(format!("{} timed out {timeouts} times, not once", id(i)));
                }
            }
            (how, fate) => broken.push(format!("{} ended {how}, its fate {fate:?}", id(i))),
        }
    }
    for (i, _) in seen.iter().enumerate().filter(|(_, s)| !**s) {
        broken.push(format!("{} is missing", id(i as u64)));
    }
    let _ = std::fs::remove_dir_all(&dir);
    broken
}

#[test]
fn reminders_killed_while_they_fire_each_fire_once_on_time_after_the_reopen() {
    let n = env_u64("FUSEE_REMINDERS_SIGKILL_N", 2_000);
    let runs = env_u64("FUSEE_REMINDERS_SIGKILL_RUNS", 2);
    for round in 0..runs {
        let broken = one_kill(n, round);
        assert!(
            broken.is_empty(),
            "round {round}: {} broken promises, the first: {:#?}",
            broken.len(),
            &broken[..broken.len().min(10)]
        );
    }
}
