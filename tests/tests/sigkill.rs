//! The SIGKILL harness: a child process appends and flushes records and
//! reports each durable LSN; the parent kills it at random moments and,
//! after each kill, reopens the storage and checks that every reported
//! record is present and intact (and that nothing else was invented).
//!
//! `FUSEE_SIGKILL_RUNS` (default 50) kills per backend; `FUSEE_SEED` sets
//! the seed (printed on failure). Every backend this crate is built with
//! runs (`fusee_tests::backends`: file, redb and rocksdb by default).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn runs() -> u64 {
    std::env::var("FUSEE_SIGKILL_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50)
}

fn kill_and_check(backend: &str) {
    let seed: u64 = std::env::var("FUSEE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = std::env::temp_dir().join(format!("fusee-sigkill-{backend}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut reported = 0u64;
    for run in 0..runs() {
        let mut child = Command::new(env!("CARGO_BIN_EXE_crash-child"))
            .arg(backend)
            .arg(&dir)
            .arg((seed + run).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn crash-child");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<u64>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(lsn) = line.trim().parse() else { break };
                if tx.send(lsn).is_err() {
                    break;
                }
            }
        });
        // Let it run a random while (some kills land during the open).
        let lifetime = Duration::from_millis(rng.u64(1..120));
        let start = Instant::now();
        while start.elapsed() < lifetime {
            if let Ok(lsn) = rx.recv_timeout(Duration::from_millis(5)) {
                reported = reported.max(lsn);
            }
        }
        child.kill().expect("SIGKILL the child");
        let status = child.wait().expect("reap the child");
        reader.join().expect("reader thread");
        // Reports that reached the pipe before the kill count too.
        while let Ok(lsn) = rx.try_recv() {
            reported = reported.max(lsn);
        }
        assert!(!status.success(), "run {run}: the child exited by itself");
        let last = fusee_tests::with_backend(backend, &dir, |s| s.check())
            .unwrap_or_else(|e| panic!("seed {seed} run {run}: reopen failed: {e}"));
        assert!(
            last >= reported,
            "seed {seed} run {run}: {backend} reported LSN {reported} durable, reopened through {last}"
        );
        reported = reported.max(last);
    }
    assert!(reported > 0, "no record was ever reported durable");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_reported_record_survives_sigkill() {
    let backends = fusee_tests::backends();
    assert!(!backends.is_empty(), "no backend built in");
    for backend in backends {
        kill_and_check(backend);
    }
}
