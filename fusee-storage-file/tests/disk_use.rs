//! What a shard costs on disk across restarts (issue 21 item 4): every open
//! starts a segment, so an engine that restarts often (a CLI, a test suite,
//! a crash loop) must not leave a full-size segment per restart.

use std::path::Path;

use fusee_storage::{LogStore, Storage};
use fusee_storage_file::{FileOptions, FileStorage, OPEN_SEGMENT_BYTES};

mod common;
use common::TempDir;

/// Bytes of every file under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            bytes_under(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// Opens the default storage in `dir`, appends `records` records to shard
/// 0 and flushes them, and closes.
fn session(dir: &Path, records: u64) {
    let s = FileStorage::open(dir, FileOptions::default()).unwrap();
    let mut p = s.open_shard(0).unwrap();
    let first = p.log.last_lsn() + 1;
    for lsn in first..first + records {
        p.log.append(lsn, b"one record").unwrap();
    }
    p.log.flush().unwrap();
    drop(p);
    s.close().unwrap();
}

#[test]
fn restarts_without_records_cost_no_more_than_one_open() {
    let t = TempDir::new("fusee-disk");
    session(&t.0, 0);
    let one = bytes_under(&t.0);
    for _ in 0..25 {
        session(&t.0, 0);
    }
    assert_eq!(
        bytes_under(&t.0),
        one,
        "26 opens without records must use what one open uses"
    );
}

#[test]
fn restarts_with_a_record_each_cost_a_small_segment_each() {
    let t = TempDir::new("fusee-disk");
    for _ in 0..26 {
        session(&t.0, 1);
    }
    let used = bytes_under(&t.0);
    // 26 segments of the open size, the segment the last open started
    // (which the next open reuses), and a few KiB of slots, manifest and
    // store headers. Before the open size was small, this was 1.7 GB.
    let bound = 27 * OPEN_SEGMENT_BYTES + (64 << 10);
    assert!(
        used <= bound,
        "26 opens with one record each use {used} bytes; at most {bound} expected"
    );
    let s = FileStorage::open(&t.0, FileOptions::default()).unwrap();
    let mut p = s.open_shard(0).unwrap();
    let mut n = 0;
    p.log
        .read(0, &mut |_, body| {
            assert_eq!(body, b"one record");
            n += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(n, 26, "every record of every session is there");
}
