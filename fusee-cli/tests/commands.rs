//! Each command on stores the engine wrote, on every backend, checked
//! against what was written; `verify` exits 0 on them and changes no byte
//! and no file; the refusals (a store an engine holds, another backend's,
//! a missing directory) are clear errors, never a hang or a panic.

mod common;

use common::{BACKENDS, RUNS, build, fusee, fusee_json, snapshot};
use fusee::inspect::journal;

async fn every_command_reads_what_the_engine_wrote(backend: &str) {
    let dir = build(backend, "commands").await;
    let d = dir.to_str().expect("utf-8 path");
    let before = snapshot(&dir);

    // runs: every run, its state, newest first.
    let runs = fusee_json(&["runs", d, "--json"], 0);
    let runs = runs.as_array().expect("an array");
    assert_eq!(runs.len(), RUNS.len(), "{runs:#?}");
    for (id, wtype, state) in RUNS {
        let r = runs
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{backend}: {id} missing: {runs:#?}"));
        assert_eq!(r["workflow"], wtype, "{backend}: {id}");
        assert_eq!(r["status"], state, "{backend}: {id}: {r}");
    }
    let started: Vec<u64> = runs
        .iter()
        .map(|r| r["started_ms"].as_u64().expect("a time"))
        .collect();
    assert!(started.windows(2).all(|w| w[0] >= w[1]), "newest first");
    // Filters.
    let waiting = fusee_json(&["runs", d, "--status", "waiting", "--json"], 0);
    let ids: Vec<&str> = waiting
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.contains(&"wait-1") && ids.contains(&"nap-1"));
    let finished = fusee_json(&["runs", d, "--status", "finished", "--json"], 0);
    assert_eq!(finished.as_array().map(Vec::len), Some(3));
    let gates = fusee_json(&["runs", d, "--type", "gate", "--limit", "2", "--json"], 0);
    assert_eq!(gates.as_array().map(Vec::len), Some(2));
    assert_eq!(
        fusee(&["runs", d, "--status", "sleepy"]).status.code(),
        Some(2),
        "bad arguments"
    );

    // inspect: the counts by state, every shard.
    let info = fusee_json(&["inspect", d, "--json"], 0);
    assert_eq!(info["backend"], backend);
    assert_eq!(info["shards"].as_array().map(Vec::len), Some(2));
    for state in ["ok", "failed", "cancelled", "running", "parked"] {
        assert_eq!(info["runs"][state], 1, "{backend} {state}: {info}");
    }
    assert_eq!(info["runs"]["waiting"], 2, "{info}");
    for s in info["shards"].as_array().expect("shards") {
        assert!(
            s["checkpoint"]["lsn"].as_u64().is_some(),
            "a checkpoint: {s}"
        );
    }

    // show: the journal record by record, and its JSON round-trips.
    let shown = fusee_json(&["show", d, "ok-1", "--json"], 0);
    assert_eq!(shown["format"], journal::FORMAT);
    assert_eq!(shown["version"], journal::VERSION);
    assert_eq!(shown["state"], "ok");
    let records = journal::from_json(&shown).expect("the journal reads back");
    let kinds: Vec<&str> = records.iter().map(|r| r.kind_name()).collect();
    assert_eq!(kinds, ["Start", "Began", "Step", "Done"], "{shown:#}");
    assert_eq!(shown["records"][1]["name"], shown["records"][2]["name"]);
    assert_eq!(
        shown["records"][2]["payload"],
        serde_json::json!({"json": "hello world"})
    );
    let redone: Vec<_> = records.iter().map(journal::record_to_json).collect();
    assert_eq!(serde_json::Value::from(redone), shown["records"]);
    let parked = fusee_json(&["show", d, "parked-1", "--json"], 0);
    assert_eq!(parked["state"], "parked");
    assert_eq!(parked["records"][0]["kind"], "Start");
    let cancelled = fusee_json(&["show", d, "cancel-1", "--json"], 0);
    let kinds: Vec<&str> = cancelled["records"]
        .as_array()
        .expect("records")
        .iter()
        .filter_map(|r| r["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"Cancel") && kinds.last() == Some(&"Done"),
        "{kinds:?}"
    );
    let human = fusee(&["show", d, "fail-1"]);
    assert!(human.status.success());
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("Done") && text.contains("failed"), "{text}");
    assert_eq!(fusee(&["show", d, "nobody"]).status.code(), Some(3));

    // verify: clean, exit 0.
    let v = fusee_json(&["verify", d, "--json"], 0);
    assert_eq!(v["ok"], true, "{v:#}");
    assert!(fusee(&["verify", d]).status.success());

    // check: the stock command holds no workflow code, so it checks no
    // run and lists every unfinished one as not checked (exit 0: none
    // diverges).
    let c = fusee_json(&["check", d, "--json"], 0);
    assert_eq!(c["checked"], 0, "{c:#}");
    assert_eq!(c["divergences"].as_array().map(Vec::len), Some(0), "{c:#}");
    let mut unchecked: Vec<&str> = c["no_code"]
        .as_array()
        .expect("no_code")
        .iter()
        .filter_map(|u| u["id"].as_str())
        .collect();
    unchecked.sort_unstable();
    let mut unfinished: Vec<&str> = RUNS
        .iter()
        .filter(|(_, _, state)| matches!(*state, "parked" | "waiting" | "running"))
        .map(|(id, _, _)| *id)
        .collect();
    unfinished.sort_unstable();
    assert_eq!(unchecked, unfinished, "{backend}: {c:#}");
    let text = fusee(&["check", d]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("NO CODE  wait-1 (gate)")
            && text.contains("0 unfinished runs checked, 0 diverge, 4 without code"),
        "{text}"
    );

    // Nothing above changed a byte or a file.
    assert_eq!(
        snapshot(&dir),
        before,
        "{backend}: a command changed the store"
    );

    // Another backend asked for: refused, naming both.
    let other = if backend == "file" { "redb" } else { "file" };
    let out = fusee(&["inspect", d, "--backend", other]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(backend) && err.contains(other), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_store() {
    every_command_reads_what_the_engine_wrote("file").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_store() {
    every_command_reads_what_the_engine_wrote("redb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rocksdb_store() {
    every_command_reads_what_the_engine_wrote("rocksdb").await;
}

/// A store an engine holds is refused at once with a clear error, by every
/// store command, on every backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_an_engine_holds_is_refused_not_waited_for() {
    for backend in BACKENDS {
        let dir = common::temp_dir(&format!("held-{backend}"));
        let config = match backend {
            "file" => fusee::Config::file(&dir),
            "redb" => fusee::Config::redb(&dir),
            _ => fusee::Config::rocksdb(&dir),
        };
        let engine = fusee::Engine::open(config).await.expect("opens");
        let d = dir.to_str().expect("utf-8");
        for cmd in ["inspect", "runs", "verify"] {
            let start = std::time::Instant::now();
            let out = fusee(&[cmd, d]);
            assert_eq!(out.status.code(), Some(3), "{backend} {cmd}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("held by a running engine"),
                "{backend} {cmd}: {err}"
            );
            assert!(start.elapsed().as_secs() < 10, "{backend} {cmd}: waited");
        }
        engine.close().await.expect("close");
        drop(engine);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn missing_and_foreign_directories_are_clear_errors() {
    let dir = common::temp_dir("missing");
    let d = dir.to_str().expect("utf-8");
    for cmd in ["inspect", "runs", "verify", "disk-check"] {
        let out = fusee(&[cmd, d]);
        assert_eq!(out.status.code(), Some(3), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(d), "{cmd}: {err}");
    }
    assert!(!dir.exists(), "nothing was created");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("notes.txt"), b"not a store").expect("write");
    let out = fusee(&["verify", d]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a Fusee store"));
    assert_eq!(fusee(&["show", d]).status.code(), Some(2), "usage error");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn disk_check_measures_every_method_and_size() {
    let dir = common::temp_dir("disk");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let d = dir.to_str().expect("utf-8");
    let v = fusee_json(
        &[
            "disk-check",
            d,
            "--samples",
            "5",
            "--sizes",
            "512,4096",
            "--json",
        ],
        0,
    );
    let rows = v["results"].as_array().expect("results");
    assert_eq!(rows.len(), 6, "3 methods × 2 sizes: {v:#}");
    for r in rows {
        let (p50, p99, max) = (
            r["p50_us"].as_f64().expect("p50"),
            r["p99_us"].as_f64().expect("p99"),
            r["max_us"].as_f64().expect("max"),
        );
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= max, "{r}");
    }
    assert!(["fdatasync", "fsync", "O_DSYNC"].contains(&v["fastest"].as_str().unwrap_or("")));
    assert_eq!(
        std::fs::read_dir(&dir).expect("list").count(),
        0,
        "the scratch file is gone"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `fusee compare` runs the comparison as `fusee-compare` does (a tiny
/// one here), writes its files and reports JSON rows.
#[test]
fn compare_runs_the_comparison() {
    let dir = common::temp_dir("compare");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let out = dir.join("out");
    let (d, o) = (dir.to_str().expect("utf-8"), out.to_str().expect("utf-8"));
    let v = fusee_json(
        &[
            "compare",
            "--json",
            "--quick",
            "--quiet",
            "--backends",
            "memory,file",
            "--samples",
            "4",
            "--records",
            "200",
            "--frames",
            "50",
            "--parked",
            "100",
            "--dir",
            d,
            "--out",
            o,
        ],
        0,
    );
    let rows = v["rows"].as_array().expect("rows");
    assert!(rows.iter().any(|r| r["subject"] == "file"), "{v:#}");
    assert!(out.join("compare.csv").exists());
    assert_eq!(fusee(&["compare", "--no-such-flag"]).status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}
