//! `fusee verify` on stores with a byte flipped in each region: each
//! reports a named error (file, offset, LSN) and exits 1; the undamaged
//! store exits 0; verify changes nothing, damaged or not.

mod common;

use std::path::{Path, PathBuf};

use common::{build, build_crashed, copy_dir, flip, fusee_json, snapshot, temp_dir};
use serde_json::Value;

/// The store's files whose name satisfies `pick`, under `dir`.
fn files(dir: &Path, pick: &dyn Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("list") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            out.extend(files(&p, pick));
        } else if p.file_name().and_then(|n| n.to_str()).is_some_and(pick) {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Verifies `dir` (damaged): exit 1, and returns the problems, having
/// checked that verify changed nothing.
fn problems(dir: &Path) -> Vec<Value> {
    let before = snapshot(dir);
    let v = fusee_json(&["verify", dir.to_str().expect("utf-8"), "--json"], 1);
    assert_eq!(snapshot(dir), before, "verify changed a damaged store");
    assert_eq!(v["ok"], false);
    let p = v["problems"].as_array().expect("problems").clone();
    assert!(!p.is_empty());
    p
}

/// A problem names `file` (by its path's ending) and, if given, `offset`.
fn names(problems: &[Value], file: &Path, offset: Option<u64>) -> bool {
    let name = file.display().to_string();
    problems.iter().any(|p| {
        p["file"].as_str().is_some_and(|f| f == name)
            && offset.is_none_or(|o| p["offset"].as_u64() == Some(o))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_store_each_region() {
    let clean = build_crashed("file", "damage").await;
    fusee_json(&["verify", clean.to_str().expect("utf-8"), "--json"], 0);
    let work = temp_dir("file-damaged");
    // (what, the file, the offset to flip, the offset the error names)
    let shard = files(&clean, &|n| n == "slot-0")
        .into_iter()
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .expect("a shard with a commit");
    let rel = |p: &Path| p.strip_prefix(&clean).expect("inside").to_path_buf();
    let index = files(&shard, &|n| n.starts_with("index-"))
        .into_iter()
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 8))
        .expect("an index with records");
    let store = files(&shard, &|n| n.ends_with(".dat"))
        .into_iter()
        .next()
        .expect("a run store");
    let mut cases: Vec<(&str, PathBuf, u64, Option<u64>)> = vec![
        ("marker", PathBuf::from("FUSEE"), 3, None),
        ("slot-0", rel(&shard.join("slot-0")), 30, Some(12)),
        ("slot-1", rel(&shard.join("slot-1")), 30, Some(12)),
        (
            "manifest-0",
            rel(&shard.join("log/manifest-0")),
            20,
            Some(12),
        ),
        ("index chunk", rel(&index), 12, Some(0)),
        ("store frame", rel(&store), 24 + 8 + 3, Some(24)),
    ];
    // The newest segment holding frames: its header, and its first frame
    // (an acknowledged record, later batches after it: a lost record).
    let segment = files(&clean, &|n| n.ends_with(".seg"))
        .into_iter()
        .rfind(|p| {
            std::fs::read(p).is_ok_and(|b| b.len() > 4200 && b[4096..4120].iter().any(|&x| x != 0))
        })
        .expect("a segment with frames");
    cases.push(("segment header", rel(&segment), 30, Some(0)));
    cases.push(("segment frame", rel(&segment), 4096 + 22, Some(4096)));
    for (what, file, at, named) in cases {
        copy_dir(&clean, &work);
        flip(&work.join(&file), at);
        let p = problems(&work);
        assert!(
            names(&p, &work.join(&file), named),
            "{what}: no problem names {} at {named:?}: {p:#?}",
            file.display()
        );
        if what == "segment frame" {
            assert!(
                p.iter().any(|q| q["lsn"].as_u64().is_some()),
                "{what}: the LSN is named: {p:#?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&clean);
}

/// Flips the first byte of every occurrence of `needle` in `file`; how
/// many it flipped.
fn flip_all(file: &Path, needle: &[u8]) -> usize {
    let bytes = std::fs::read(file).expect("read");
    let at: Vec<usize> = bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    for &i in &at {
        flip(file, i as u64);
    }
    at.len()
}

async fn kv_store_regions(backend: &str, data: &dyn Fn(&str) -> bool, header: &str) {
    let clean = build(backend, "damage").await;
    fusee_json(&["verify", clean.to_str().expect("utf-8"), "--json"], 0);
    let work = temp_dir(&format!("{backend}-damaged"));
    // A run's ID in every row that holds it (frames, checkpoint journals).
    copy_dir(&clean, &work);
    let flipped: usize = files(&work, data)
        .iter()
        .map(|f| flip_all(f, b"cancel-1"))
        .sum();
    assert!(flipped > 0, "{backend}: the ID is stored somewhere");
    let p = problems(&work);
    assert!(
        p.iter().all(|q| q["file"].as_str().is_some()),
        "{backend}: every problem names a file: {p:#?}"
    );
    // The engine's own header or manifest.
    copy_dir(&clean, &work);
    let target = files(&work, &|n| n == header || n.starts_with(header));
    assert!(!target.is_empty(), "{backend}: {header} exists");
    flip(&target[0], 1);
    let p = problems(&work);
    assert!(p.iter().any(|q| q["kind"] == "engine"), "{backend}: {p:#?}");
    // The marker.
    copy_dir(&clean, &work);
    flip(&work.join("FUSEE"), 3);
    let p = problems(&work);
    assert!(names(&p, &work.join("FUSEE"), None), "{p:#?}");
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&clean);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_store_each_region() {
    kv_store_regions("redb", &|n| n == "fusee.redb", "fusee.redb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rocksdb_store_each_region() {
    kv_store_regions(
        "rocksdb",
        &|n| n.ends_with(".sst") || n.ends_with(".blob"),
        "CURRENT",
    )
    .await;
}
