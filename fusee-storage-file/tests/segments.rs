//! Segment files on real files, where the next segment is zero-filled on a
//! background thread: a log that grows through many segments (no discards,
//! so every one is new) reads back whole before and after a reopen, and a
//! close while a preparation may be running leaves a directory that opens
//! cleanly.

use fusee_storage::{LogStore, Storage};
use fusee_storage_file::{FileOptions, FileStorage, FlushMethod};

mod common;
use common::TempDir;

fn options() -> FileOptions {
    FileOptions {
        segment_bytes: 64 << 10,
        flush: FlushMethod::DataSync,
    }
}

fn record(lsn: u64) -> Vec<u8> {
    (0..200).map(|i| (lsn as u8).wrapping_add(i)).collect()
}

/// Checks that the log holds exactly records `1..=last`, each unchanged.
fn check(log: &mut impl LogStore, last: u64) {
    check_from(log, 1, last);
}

/// Checks that the log reads records `first..=last`, each unchanged.
fn check_from(log: &mut impl LogStore, first: u64, last: u64) {
    let mut next = first;
    let end = log
        .read(first - 1, &mut |lsn, bytes| {
            assert_eq!(lsn, next, "hole before {lsn}");
            assert_eq!(bytes, &record(lsn)[..], "record {lsn} changed");
            next += 1;
            Ok(())
        })
        .expect("read");
    assert_eq!((end, next), (last, last + 1));
}

#[test]
fn a_log_growing_through_many_segments_reads_back_whole() {
    let t = TempDir::new("fusee-segments");
    let s = FileStorage::open(&t.0, options()).expect("open");
    let mut p = s.open_shard(0).expect("shard");
    for lsn in 1..=3000 {
        p.log.append(lsn, &record(lsn)).expect("append");
        if lsn % 10 == 0 {
            assert_eq!(p.log.flush().ok(), Some(lsn));
        }
    }
    check(&mut p.log, 3000);
    let segments = std::fs::read_dir(t.0.join("shard-0000000000").join("log"))
        .expect("log dir")
        .count();
    // 3000 frames of 220 bytes in 64 KiB segments: at least ten files.
    assert!(segments >= 10, "only {segments} segment files");
    drop(p);
    s.close().expect("close");
    drop(s);
    let s = FileStorage::open(&t.0, options()).expect("reopen");
    let mut p = s.open_shard(0).expect("shard");
    check(&mut p.log, 3000);
}

/// Discarding 300 to 520 records behind while the log grows: segments come back
/// recycled while new ones are still being prepared in the background, and
/// the files ready for the next rolls keep their order.
#[test]
fn recycled_and_prepared_segments_interleave() {
    // A segment holds about 297 records: lags of one segment and more
    // recycle before, while and after the next one is being prepared.
    for lag in [300, 450, 520] {
        interleave(lag);
    }
}

fn interleave(lag: u64) {
    let t = TempDir::new("fusee-segments");
    let s = FileStorage::open(&t.0, options()).expect("open");
    let mut p = s.open_shard(0).expect("shard");
    for lsn in 1..=6000 {
        p.log.append(lsn, &record(lsn)).expect("append");
        if lsn % 10 == 0 {
            assert_eq!(p.log.flush().ok(), Some(lsn), "lag {lag}");
            p.log
                .discard_through(lsn.saturating_sub(lag))
                .expect("discard");
        }
    }
    let first = p.log.first_lsn();
    drop(p);
    s.close().expect("close");
    drop(s);
    let s = FileStorage::open(&t.0, options()).expect("reopen");
    let mut p = s.open_shard(0).expect("shard");
    check_from(&mut p.log, first, 6000);
}

#[test]
fn closing_while_a_segment_is_prepared_leaves_a_clean_directory() {
    for round in 0..20u64 {
        let t = TempDir::new("fusee-segments");
        let s = FileStorage::open(&t.0, options()).expect("open");
        let mut p = s.open_shard(0).expect("shard");
        // Past half a segment, so the flush starts preparing the next one.
        let last = 160 + round;
        for lsn in 1..=last {
            p.log.append(lsn, &record(lsn)).expect("append");
        }
        assert_eq!(p.log.flush().ok(), Some(last));
        s.close().expect("close");
        drop(p);
        drop(s);
        let s = FileStorage::open(&t.0, options()).expect("reopen");
        let mut p = s.open_shard(0).expect("shard");
        check(&mut p.log, last);
        p.log.append(last + 1, &record(last + 1)).expect("append");
        assert_eq!(p.log.flush().ok(), Some(last + 1));
    }
}

/// A recycled file whose new header never reached the disk, while frames
/// of the batch rolling into it did: its header names an older segment,
/// and after it lie frames with LSNs the log has not reached. Open must
/// read it as never started, not as a damaged log (found by the power-loss
/// test, seed 6823).
#[test]
fn a_recycled_file_with_an_old_header_and_new_frames_is_never_started() {
    use fusee_core::segment::{HEADER_BYTES, LogWriter};
    let t = TempDir::new("fusee-segments");
    let s = FileStorage::open(&t.0, options()).expect("open");
    let mut p = s.open_shard(0).expect("shard");
    for lsn in 1..=1000 {
        p.log.append(lsn, &record(lsn)).expect("append");
        if lsn % 10 == 0 {
            p.log.flush().expect("flush");
        }
    }
    drop(p);
    s.close().expect("close");
    drop(s);
    let log = t.0.join("shard-0000000000").join("log");
    let mut names: Vec<String> = std::fs::read_dir(&log)
        .expect("log dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let newest: u64 = names.last().expect("segments")[..20]
        .parse()
        .expect("number");
    // The oldest segment, "renamed" past the newest, with frames of the
    // batch that was rolling into it: LSNs 1001.. at offset 4096.
    let mut bytes = std::fs::read(log.join(&names[0])).expect("oldest segment");
    let mut w = LogWriter::new(0, newest + 1, 1001, bytes.len() as u64, 0);
    w.take().expect("header batch");
    for lsn in 1001..=1003 {
        w.append(&record(lsn), 0).expect("fits");
    }
    let batch = w.take().expect("records");
    let chunk = &batch.chunks[0];
    assert_eq!(chunk.offset, HEADER_BYTES as u64);
    bytes[HEADER_BYTES..HEADER_BYTES + chunk.bytes.len()].copy_from_slice(&chunk.bytes);
    std::fs::write(log.join(format!("{:020}.seg", newest + 1)), &bytes).expect("write");
    let s = FileStorage::open(&t.0, options()).expect("reopen");
    let mut p = s.open_shard(0).expect("a never-started file is not damage");
    check(&mut p.log, 1000);
    p.log.append(1001, &record(1001)).expect("append");
    assert_eq!(p.log.flush().ok(), Some(1001));
}
