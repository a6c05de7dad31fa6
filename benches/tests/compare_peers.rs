//! `fusee-compare --peers` end to end without any peer installed, as CI
//! runs it: the peers are reported "not measured" (with the command that
//! installs them), while the driver still runs every workload on Fusee's
//! file backend and the floor in the quick plan, counts Fusee's flush
//! calls (where strace is installed), and writes a report with the peers'
//! section and its goals. No peer is installed or started here.
//!
//! `FUSEE_PEERS_DIR` points at an empty directory so an install under
//! `target/peers/` on a developer's machine is not picked up; the
//! PostgreSQL URLs are removed so Fusee's PostgreSQL backend is left out
//! too (CI tests it elsewhere). A run past [`DEADLINE`] is killed and fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The run needs seconds; only a hang trips this.
const DEADLINE: Duration = Duration::from_secs(240);

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

/// Runs `fusee-compare --peers temporal,dbos-sqlite --quick` in `tmp` with
/// no peer installed, Fusee on PostgreSQL at `pg` (left out without), and
/// returns its stdout once it succeeded.
fn run_peers(tmp: &TempDir, pg: Option<&str>) -> String {
    let (data, out, empty) = (
        tmp.0.join("data"),
        tmp.0.join("out"),
        tmp.0.join("no-peers"),
    );
    for d in [&data, &empty] {
        std::fs::create_dir_all(d).expect("create dir");
    }
    let (stdout_path, stderr_path) = (tmp.0.join("stdout"), tmp.0.join("stderr"));
    let file = |p: &Path| Stdio::from(std::fs::File::create(p).expect("create output file"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_fusee-compare"));
    command
        .args(["--peers", "temporal,dbos-sqlite", "--quick", "--dir"])
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .env("FUSEE_PEERS_DIR", &empty)
        .env_remove("FUSEE_PG_URL")
        .env_remove("FUSEE_PG_SINGLE_URL")
        .stdout(file(&stdout_path))
        .stderr(file(&stderr_path));
    if let Some(url) = pg {
        command.env("FUSEE_PG_URL", url);
    }
    let mut child = command.spawn().expect("run fusee-compare");
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
    let status = status.unwrap_or_else(|| {
        panic!("fusee-compare ran past {DEADLINE:?}: killed\nstdout:\n{stdout}\nstderr:\n{stderr}")
    });
    assert!(
        status.success(),
        "fusee-compare failed: {status:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

/// The row of `stdout` that starts with `label`.
fn row(stdout: &str, label: &str) -> String {
    stdout
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} row:\n{stdout}"))
        .to_string()
}

/// The figures (positive numbers) in a row.
fn figures(row: &str) -> Vec<f64> {
    row.split_whitespace()
        .filter_map(|c| c.parse::<f64>().ok())
        .filter(|v| *v > 0.0)
        .collect()
}

#[test]
fn peers_not_installed_are_reported_and_fusee_is_measured() {
    let tmp = TempDir::new("compare_peers");
    let stdout = run_peers(&tmp, None);
    let out = tmp.0.join("out");
    for word in [
        "engine peers",
        "temporal: not measured",
        "dbos-sqlite: not measured",
        "run scripts/peers.sh first",
        "fusee-postgres: not measured",
        "chain: step p50",
        "goals (issue 34):",
        "fusee-file: fusee ",
    ] {
        assert!(
            stdout.contains(word),
            "{word:?} missing from stdout:\n{stdout}"
        );
    }
    // Fusee on file has every figure, and the chain's ratio to the floor.
    assert!(
        row(&stdout, "chain: step p50").contains("floor)"),
        "{stdout}"
    );
    for label in [
        "fanout: steps/s",
        "timers: all done",
        "recovery after SIGKILL",
    ] {
        let r = row(&stdout, label);
        assert!(!figures(&r).is_empty(), "{label}: no figure in {r:?}");
    }
    // Without peers, every goal is unjudged, never met or missed.
    assert!(
        !stdout.contains("  met") && !stdout.contains("  missed"),
        "{stdout}"
    );
    let md = std::fs::read_to_string(out.join("compare.md")).expect("compare.md");
    assert!(md.contains("## Engine peers"), "{md}");
    assert!(md.contains("### Goals (issue 34)"), "{md}");
    // The CSV (what `fusee compare --json` reads) has the peers' rows.
    let csv = std::fs::read_to_string(out.join("compare.csv")).expect("compare.csv");
    assert!(
        csv.contains("peers_engine_fanout_steps_per_s,steps/s,fusee-file,backend,"),
        "{csv}"
    );
}

/// Fusee on PostgreSQL beside Fusee on file (the servers `.ci/run` starts):
/// every workload measured on both, the recovery too (its child process
/// opens the same schema the parent reopens).
#[test]
fn fusee_on_postgres_is_measured_recovery_included() {
    let Ok(url) = std::env::var("FUSEE_PG_URL") else {
        eprintln!("FUSEE_PG_URL is not set (source scripts/postgres.sh): skipped");
        return;
    };
    let tmp = TempDir::new("compare_peers_pg");
    let stdout = run_peers(&tmp, Some(&url));
    assert!(!stdout.contains("fusee-postgres: not measured"), "{stdout}");
    assert!(!stdout.contains("file stores only"), "{stdout}");
    for label in [
        "fanout: steps/s",
        "timers: all done",
        "recovery after SIGKILL",
    ] {
        let r = row(&stdout, label);
        assert!(
            figures(&r).len() >= 2,
            "{label}: fusee-file and fusee-postgres should both have a figure in {r:?}\n{stdout}"
        );
    }
}
