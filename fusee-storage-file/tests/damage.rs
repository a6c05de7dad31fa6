//! Flipped bytes in each region of a shard's files: every case is either
//! recovered from (the same data, or a whole earlier commit) or reported as
//! an error that names the damaged file; none is silently accepted.

use std::path::{Path, PathBuf};

use fusee_core::shard::BlobRef;
use fusee_storage::{CheckpointStore, IndexChange, LogStore, RunStore, Storage};
use fusee_storage_file::{FileOptions, FileStorage, FlushMethod};

mod common;
use common::TempDir;

fn options() -> FileOptions {
    FileOptions {
        segment_bytes: 1 << 20,
        flush: FlushMethod::DataSync,
    }
}

fn record(lsn: u64) -> Vec<u8> {
    (0..200)
        .map(|i| (lsn as u8).wrapping_mul(31).wrapping_add(i))
        .collect()
}

fn index_record(run: u64) -> [u8; 32] {
    let mut r = [run as u8; 32];
    r[8..16].copy_from_slice(&(run | (2u64 << 48)).to_le_bytes());
    r
}

const RECORDS: u64 = 30;

/// A shard with records 1..=30 in three flush batches (segment 1), two
/// commits (so both slots hold one), a frame, and a reopen (so segment 2
/// carries the last LSN). Returns the frame's address.
fn build(dir: &Path) -> BlobRef {
    let s = FileStorage::open(dir, options()).unwrap();
    let mut p = s.open_shard(0).unwrap();
    for lsn in 1..=RECORDS {
        p.log.append(lsn, &record(lsn)).unwrap();
        if lsn % 10 == 0 {
            p.log.flush().unwrap();
        }
    }
    let blob = p.runs.append(&[7u8; 3000]).unwrap();
    let delta = index_record(1);
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&delta), b"first")
        .unwrap();
    let delta = index_record(2);
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&delta), b"second")
        .unwrap();
    drop(p);
    s.close().unwrap();
    drop(s);
    let s = FileStorage::open(dir, options()).unwrap();
    drop(s.open_shard(0).unwrap());
    s.close().unwrap();
    blob
}

fn shard_dir(dir: &Path) -> PathBuf {
    dir.join("shard-0000000000")
}

fn flip(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at as usize] ^= 0x55;
    std::fs::write(path, bytes).unwrap();
}

/// A shard's log records and its recovered checkpoint.
type Contents = (Vec<(u64, Vec<u8>)>, Option<Vec<u8>>);

/// Opens the shard and returns its contents, or the error's text.
fn reopen(dir: &Path) -> Result<Contents, String> {
    let s = FileStorage::open(dir, options()).map_err(|e| e.to_string())?;
    let mut p = s.open_shard(0).map_err(|e| e.to_string())?;
    let mut records = Vec::new();
    let first = p.log.first_lsn();
    p.log
        .read(first - 1, &mut |lsn, bytes| {
            records.push((lsn, bytes.to_vec()));
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    Ok((records, p.recovered.checkpoint.clone()))
}

fn all_records() -> Vec<(u64, Vec<u8>)> {
    (1..=RECORDS).map(|l| (l, record(l))).collect()
}

/// Offset of record `lsn`'s frame in segment 1 (frames of 20 + 200 bytes
/// after the 4 KiB header).
fn frame_at(lsn: u64) -> u64 {
    4096 + (lsn - 1) * 220
}

fn segment(dir: &Path, n: u64) -> PathBuf {
    shard_dir(dir).join("log").join(format!("{n:020}.seg"))
}

#[test]
fn the_undamaged_shard_reads_back_whole() {
    let t = TempDir::new("fusee-damage");
    build(&t.0);
    let (records, checkpoint) = reopen(&t.0).unwrap();
    assert_eq!(records, all_records());
    assert_eq!(checkpoint.as_deref(), Some(&b"second"[..]));
}

#[test]
fn a_damaged_segment_header_is_an_error_naming_the_segment() {
    let t = TempDir::new("fusee-damage");
    build(&t.0);
    let seg = segment(&t.0, 1);
    for at in [0, 9, 20, 30, 41, 100] {
        let t2 = TempDir::new("fusee-damage");
        copy_dir(&t.0, &t2.0);
        flip(&segment(&t2.0, 1), at);
        let err = reopen(&t2.0).unwrap_err();
        assert!(err.contains("00000000000000000001.seg"), "at {at}: {err}");
    }
    assert!(seg.exists());
}

#[test]
fn a_damaged_acknowledged_frame_is_an_error_in_every_batch() {
    for lsn in [1, 5, 10, 11, 20, 21, 25, 30] {
        for within in [0u64, 5, 12, 19, 20, 100, 219] {
            let t = TempDir::new("fusee-damage");
            build(&t.0);
            flip(&segment(&t.0, 1), frame_at(lsn) + within);
            let err = reopen(&t.0).unwrap_err();
            assert!(
                err.contains("00000000000000000001.seg")
                    || err.contains("00000000000000000002.seg"),
                "record {lsn} byte {within}: {err}"
            );
        }
    }
}

#[test]
fn garbage_after_the_last_frame_is_a_torn_tail_and_is_cut() {
    let t = TempDir::new("fusee-damage");
    build(&t.0);
    let path = segment(&t.0, 1);
    let mut bytes = std::fs::read(&path).unwrap();
    let end = frame_at(RECORDS + 1) as usize;
    // A half-written frame of the next LSN: a torn, unacknowledged write.
    bytes[end..end + 4].copy_from_slice(&200u32.to_le_bytes());
    bytes[end + 8..end + 16].copy_from_slice(&(RECORDS + 1).to_le_bytes());
    for b in &mut bytes[end + 20..end + 120] {
        *b = 0xee;
    }
    std::fs::write(&path, bytes).unwrap();
    let (records, _) = reopen(&t.0).unwrap();
    assert_eq!(records, all_records());
}

#[test]
fn a_damaged_store_frame_reads_as_corrupt_never_as_other_bytes() {
    let t = TempDir::new("fusee-damage");
    let blob = build(&t.0);
    let store = shard_dir(&t.0).join(format!("store-{:020}.dat", 1));
    let offset = blob.offset & ((1 << 36) - 1);
    for within in [0u64, 3, 4, 7, 8, 100, 3007] {
        let t2 = TempDir::new("fusee-damage");
        copy_dir(&t.0, &t2.0);
        let store2 = shard_dir(&t2.0).join(format!("store-{:020}.dat", 1));
        flip(&store2, offset + within);
        let s = FileStorage::open(&t2.0, options()).unwrap();
        let mut p = s.open_shard(0).unwrap();
        let mut out = Vec::new();
        let r = p.runs.read(blob, &mut out);
        assert!(
            r.is_err(),
            "byte {within} of the frame: read {} bytes",
            out.len()
        );
    }
    assert!(store.exists());
}

#[test]
fn a_damaged_index_file_is_an_error_naming_it() {
    let t = TempDir::new("fusee-damage");
    build(&t.0);
    let index = shard_dir(&t.0).join(format!("index-{:020}.idx", 1));
    let len = std::fs::metadata(&index).unwrap().len();
    for at in 0..len {
        let t2 = TempDir::new("fusee-damage");
        copy_dir(&t.0, &t2.0);
        flip(&shard_dir(&t2.0).join(format!("index-{:020}.idx", 1)), at);
        let err = reopen(&t2.0).unwrap_err();
        assert!(err.contains(".idx"), "byte {at}: {err}");
    }
}

#[test]
fn a_damaged_slot_falls_back_to_the_other_commit_and_two_are_an_error() {
    let t = TempDir::new("fusee-damage");
    build(&t.0);
    let slot = |d: &Path, i: u32| shard_dir(d).join(format!("slot-{i}"));
    // The second commit went to slot-1, the first to slot-0.
    for at in [0u64, 8, 12, 16, 40, 70, 80, 84] {
        let t2 = TempDir::new("fusee-damage");
        copy_dir(&t.0, &t2.0);
        flip(&slot(&t2.0, 1), at);
        let (records, checkpoint) = reopen(&t2.0).unwrap();
        assert_eq!(checkpoint.as_deref(), Some(&b"first"[..]), "byte {at}");
        assert_eq!(records, all_records());

        let t3 = TempDir::new("fusee-damage");
        copy_dir(&t.0, &t3.0);
        flip(&slot(&t3.0, 0), at);
        let (_, checkpoint) = reopen(&t3.0).unwrap();
        assert_eq!(checkpoint.as_deref(), Some(&b"second"[..]), "byte {at}");

        flip(&slot(&t3.0, 1), at);
        let err = reopen(&t3.0).unwrap_err();
        assert!(err.contains("slot-"), "both slots at {at}: {err}");
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A log whose segments are recycled files: 64 KiB segments, records
/// flushed ten at a time and discarded 300 behind, so dropped segments come
/// back as new ones with old frames after the new. Returns the directory's
/// records (LSN, bytes) that the log still holds.
fn build_recycled(dir: &Path) -> Vec<(u64, Vec<u8>)> {
    let options = FileOptions {
        segment_bytes: 64 << 10,
        flush: FlushMethod::DataSync,
    };
    let s = FileStorage::open(dir, options).unwrap();
    let mut p = s.open_shard(0).unwrap();
    for lsn in 1..=2000 {
        p.log.append(lsn, &record(lsn)).unwrap();
        if lsn % 10 == 0 {
            p.log.flush().unwrap();
            p.log.discard_through(lsn.saturating_sub(300)).unwrap();
        }
    }
    let first = p.log.first_lsn();
    drop(p);
    s.close().unwrap();
    (first..=2000).map(|l| (l, record(l))).collect()
}

/// Segments of `dir` that hold records and old bytes after them (past
/// where a clean end needs zeros): recycled files in use. Each comes with
/// its valid frames' end.
fn recycled_segments(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(shard_dir(dir).join("log")).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let Ok(Some(s)) = fusee_core::segment::scan_segment(&bytes, |_, _| {}) else {
            continue;
        };
        let zeros_to = fusee_core::segment::clean_end(s.end, bytes.len() as u64) as usize;
        if s.records > 0 && bytes[zeros_to..].iter().any(|&b| b != 0) {
            assert_eq!(
                s.tail,
                fusee_core::segment::Tail::Clean,
                "{}: a durable batch in a recycled file ends cleanly",
                path.display()
            );
            found.push((path, s.end));
        }
    }
    found
}

#[test]
fn recycled_segments_read_back_and_report_damage() {
    let t = TempDir::new("fusee-damage");
    let kept = build_recycled(&t.0);
    let (records, _) = reopen(&t.0).unwrap();
    assert_eq!(records, kept, "a log in recycled segments reads back whole");
    let recycled = recycled_segments(&t.0);
    assert!(!recycled.is_empty(), "no segment file was recycled");
    // Every 7th byte of the acknowledged frames of each recycled segment.
    for (path, end) in recycled {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for at in (4096..end).step_by(7 * 220 + 3) {
            let t2 = TempDir::new("fusee-damage");
            copy_dir(&t.0, &t2.0);
            let copy = segment(&t2.0, name[..20].parse().unwrap());
            flip(&copy, at);
            match reopen(&t2.0) {
                Err(err) => assert!(err.contains(".seg"), "{name} at {at}: {err}"),
                Ok((records, _)) => panic!(
                    "{name} at {at}: damage accepted, {} records read",
                    records.len()
                ),
            }
        }
    }
}
