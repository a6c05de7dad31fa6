//! Runs the `fusee-compare` binary end to end, the way CI proves it works:
//! `--quick` on the memory backend (plus the floor, always measured, and the
//! SQLite peer) with tiny counts, then checks the three output files exist
//! and parse, and that the text table went to stdout.
//!
//! The binary is the one Cargo built for this test, in the test's own
//! profile and features: CI builds nothing a second time for it.
//!
//! `FUSEE_COMPARE_TEST_RECORDS` sets the records written then recovered
//! (default 5,000); the other counts are fixed and tiny, so the test runs
//! in a few seconds in the dev profile.

use std::path::{Path, PathBuf};
use std::process::Command;

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
    let output = Command::new(env!("CARGO_BIN_EXE_fusee-compare"))
        .args(["--quick", "--backends", "memory,sqlite", "--samples", "32"])
        .args(["--records", &n.to_string(), "--frames", "300"])
        .args(["--parked", "2000", "--dir"])
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run fusee-compare");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "fusee-compare failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(
        stderr.contains("memory: recovery: reopening"),
        "progress on stderr:\n{stderr}"
    );
    for word in [
        "floor",
        "memory",
        "sqlite",
        "records/s, batch 256",
        "recovery",
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
    // 8 metrics × 3 subjects + the table-memory row.
    assert_eq!(rows.len(), 8 * 3 + 1, "rows:\n{csv}");
    for r in &rows {
        assert_eq!(r.len(), 7, "row {r:?}");
        let value: f64 = r[4].parse().unwrap_or(f64::NAN);
        assert!(value > 0.0 && value.is_finite(), "value in {r:?}");
        if !r[5].is_empty() {
            let ratio: f64 = r[5].parse().unwrap_or(f64::NAN);
            assert!(ratio > 0.0 && ratio.is_finite(), "ratio in {r:?}");
            if r[2] == "floor" {
                assert!((ratio - 1.0).abs() < 1e-9, "floor ratio in {r:?}");
            }
        }
    }
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
    ] {
        assert!(
            md.contains(needle),
            "{needle:?} missing from markdown:\n{md}"
        );
    }

    // SVG: one document, balanced elements, a bar per non-floor subject and
    // metric.
    let svg = std::fs::read_to_string(out.join("compare.svg")).expect("compare.svg");
    assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<svg").count(), 1);
    assert_eq!(svg.matches("<title>").count(), 8 * 2, "bars:\n{svg}");
    assert_eq!(svg.matches("</rect>").count(), 8 * 2, "bars:\n{svg}");
    assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());

    // The data directory is cleaned up.
    let left: Vec<_> = std::fs::read_dir(&data).expect("read data dir").collect();
    assert!(
        left.is_empty(),
        "left behind in {}: {left:?}",
        data.display()
    );
}
