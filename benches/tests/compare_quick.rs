//! Runs the `fusee-compare` binary end to end, the way CI proves it works:
//! `--quick` on the memory backend (plus the floor, always measured, the
//! SQLite peer and the peer engine, duroxide) with tiny counts, storage and
//! engine sections both, then checks the three output files exist and
//! parse, and that the text table went to stdout. The peer's recovery runs
//! this binary as its child and kills it, so that path runs too.
//!
//! The binary is the one Cargo built for this test, in the test's own
//! profile and features: CI builds nothing a second time for it.
//!
//! `FUSEE_COMPARE_TEST_RECORDS` sets the records written then recovered
//! (default 5,000); the other counts are fixed and tiny, so the test runs
//! in about ten seconds in the dev profile, most of it the timers' 1 s
//! sleeps and the peer engine, unoptimised (a few dozen steps per second).
//! A run that does not end within [`DEADLINE`] is killed and fails the
//! test with its output.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest the run may take: it needs seconds, so only a hang trips
/// it, and the test then fails with the run's output instead of hanging.
const DEADLINE: Duration = Duration::from_secs(240);

/// A directory under the target dir, emptied first, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn records() -> u64 {
    std::env::var("FUSEE_COMPARE_TEST_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000)
}

#[test]
fn quick_run_on_memory_writes_parsable_outputs() {
    let tmp = TempDir::new("compare_quick");
    let data = tmp.0.join("data");
    let out = tmp.0.join("out");
    std::fs::create_dir_all(&data).expect("create data dir");
    let n = records();
    // Output to files, not pipes: nothing to drain while polling for the
    // exit.
    let (stdout_path, stderr_path) = (tmp.0.join("stdout"), tmp.0.join("stderr"));
    let file = |p: &Path| Stdio::from(std::fs::File::create(p).expect("create output file"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_fusee-compare"))
        .args([
            "--quick",
            "--backends",
            "memory,sqlite,duroxide",
            "--samples",
            "32",
        ])
        .args(["--records", &n.to_string(), "--frames", "300"])
        .args(["--steps", "20", "--runs", "2", "--timers", "50"])
        .args(["--parked", "2000", "--dir"])
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .stdout(file(&stdout_path))
        .stderr(file(&stderr_path))
        .spawn()
        .expect("run fusee-compare");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for fusee-compare") {
            break Some(status);
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let Some(status) = status else {
        panic!(
            "fusee-compare still ran after {} s: killed\nstdout:\n{stdout}\nstderr:\n{stderr}",
            DEADLINE.as_secs()
        );
    };
    assert!(
        status.success(),
        "fusee-compare failed: {status:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stderr.contains("memory: recovery: reopening"),
        "progress on stderr:\n{stderr}"
    );
    for word in [
        "floor",
        "memory",
        "sqlite",
        "duroxide",
        "records/s, batch 256",
        "recovery",
        "chain: step p50",
        "engine goals on the file backend",
    ] {
        assert!(
            stdout.contains(word),
            "{word:?} missing from stdout:\n{stdout}"
        );
    }

    // CSV: a header and one row per metric and subject, every value a
    // positive number, the floor's ratio to itself exactly 1.
    let csv = std::fs::read_to_string(out.join("compare.csv")).expect("compare.csv");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("metric,unit,subject,role,value,ratio_to_floor,ratio_to_best_backend")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let (engine, storage): (Vec<&Vec<&str>>, Vec<&Vec<&str>>) =
        rows.iter().partition(|r| r[0].starts_with("engine_"));
    // 8 metrics × 3 subjects + the table-memory row.
    assert_eq!(storage.len(), 8 * 3 + 1, "rows:\n{csv}");
    for r in &rows {
        assert_eq!(r.len(), 7, "row {r:?}");
        let value: f64 = r[4].parse().unwrap_or(f64::NAN);
        // A count of failures may be zero; every measured figure is not.
        let least = if r[0] == "engine_peer_infrastructure_failures" {
            0.0
        } else {
            f64::MIN_POSITIVE
        };
        assert!(value >= least && value.is_finite(), "value in {r:?}");
        if !r[5].is_empty() {
            let ratio: f64 = r[5].parse().unwrap_or(f64::NAN);
            assert!(ratio > 0.0 && ratio.is_finite(), "ratio in {r:?}");
            if r[2] == "floor" {
                assert!((ratio - 1.0).abs() < 1e-9, "floor ratio in {r:?}");
            }
        }
    }
    // The engine section: the chain on every subject, the fanout and the
    // timers on both engines, the recovery on the durable one (memory's
    // runs do not survive a kill).
    let has =
        |metric: &str, subject: &str| engine.iter().any(|r| r[0] == metric && r[2] == subject);
    for subject in ["floor", "memory", "duroxide"] {
        assert!(
            has("engine_chain_step_p50_us", subject),
            "{subject}:\n{csv}"
        );
        assert!(
            has("engine_timers_all_done_s", subject),
            "{subject}:\n{csv}"
        );
    }
    for subject in ["memory", "duroxide"] {
        assert!(
            has("engine_fanout_steps_per_s", subject),
            "{subject}:\n{csv}"
        );
    }
    assert!(has("engine_recovery_s", "duroxide"), "{csv}");
    assert!(
        has("engine_peer_infrastructure_failures", "duroxide"),
        "{csv}"
    );
    assert!(!has("engine_recovery_s", "memory"), "{csv}");
    assert!(!has("engine_fanout_steps_per_s", "sqlite"), "{csv}");
    for subject in ["floor", "memory", "sqlite"] {
        let recovery = rows
            .iter()
            .find(|r| r[0] == "recovery_s" && r[2] == subject);
        assert!(recovery.is_some(), "no recovery row for {subject}:\n{csv}");
    }
    assert!(
        rows.iter().any(|r| r[0] == "table_bytes_per_parked_run"),
        "{csv}"
    );

    // Markdown: names the command, the machine and the workload, and has
    // one results row per metric and a breakdown row per batch size and
    // subject.
    let md = std::fs::read_to_string(out.join("compare.md")).expect("compare.md");
    for needle in [
        "- command: `fusee-compare --quick",
        "| CPU |",
        "| filesystem |",
        &format!("recovery of {n} records"),
        "| durable append p50 | µs |",
        "| recovery | s |",
        "## Where the group-commit time goes",
        "| 256 | memory |",
        "| 256 | sqlite |",
        "## The engine",
        "| chain: step p50 | µs |",
        "| recovery after SIGKILL | s |",
        "**Engine verdict**: engine goals on the file backend",
    ] {
        assert!(
            md.contains(needle),
            "{needle:?} missing from markdown:\n{md}"
        );
    }

    // SVG: one document, balanced elements, a bar per non-floor subject and
    // storage metric, and the engine's panel.
    let svg = std::fs::read_to_string(out.join("compare.svg")).expect("compare.svg");
    assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<svg").count(), 1);
    let bars = svg.matches("<title>").count();
    assert!(bars > 8 * 2, "storage and engine bars:\n{svg}");
    assert_eq!(svg.matches("</rect>").count(), bars, "bars:\n{svg}");
    assert!(svg.contains("Engine: cost relative"), "{svg}");
    assert!(svg.contains("<title>duroxide: "), "{svg}");
    assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());

    // The data directory is cleaned up.
    let left: Vec<_> = std::fs::read_dir(&data).expect("read data dir").collect();
    assert!(
        left.is_empty(),
        "left behind in {}: {left:?}",
        data.display()
    );
}
