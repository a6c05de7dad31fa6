//! Segment files on real files, where the next segment is zero-filled on a
//! background thread: a log that grows through many segments (no discards,
//! so every one is new) reads back whole before and after a reopen, and a
//! close while a preparation may be running leaves a directory that opens
//! cleanly. Recycling: prepared and recycled files interleave, a recycled
//! file whose new header was lost reads as never started, and a segment
//! found at open is deleted, never recycled. A discard that fails (on the
//! simulated disk) latches the log.

use fusee_storage::{LogStore, Storage};
use fusee_storage_file::{FileOptions, FileStorage, FlushMethod};

mod common;
use common::TempDir;

fn options() -> FileOptions {
    FileOptions {
        segment_bytes: 64 << 10,
        flush: FlushMethod::DataSync,
        ..FileOptions::default()
    }
}

fn record(lsn: u64) -> Vec<u8> {
    (0..200).map(|i| (lsn as u8).wrapping_add(i)).collect()
}

/// The names of the files in the log directory `log`, sorted.
fn segment_names(log: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(log)
        .expect("log dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    names.sort();
    names
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
    let names = segment_names(&log);
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

/// A segment found at open may hold, after its recovered end, frames of the
/// batch a crash cut short, with LSNs the log gives to new records after
/// the open. Recycling such a file would leave frames with LSNs at or past
/// its new base (a false lost-record error at a later recovery, if a crash
/// exposed one at a frame boundary), so it is deleted instead: the file the
/// log rolls into holds no valid frame it did not write.
#[test]
fn a_segment_found_at_open_is_never_recycled() {
    use fusee_core::segment::{FRAME_HEADER, HEADER_BYTES, LogWriter, clean_end};
    let t = TempDir::new("fusee-segments");
    let s = FileStorage::open(&t.0, options()).expect("open");
    let mut p = s.open_shard(0).expect("shard");
    for lsn in 1..=5 {
        p.log.append(lsn, &record(lsn)).expect("append");
    }
    assert_eq!(p.log.flush().ok(), Some(5));
    drop(p);
    s.close().expect("close");
    drop(s);
    // A crash cut the batch of records 6..=10 short: its first sector never
    // landed, later ones did, beyond the zeros that end record 5 cleanly.
    let log = t.0.join("shard-0000000000").join("log");
    let names = segment_names(&log);
    let newest = names.last().expect("segments").clone();
    let path = log.join(&newest);
    let mut bytes = std::fs::read(&path).expect("segment");
    let frame = (FRAME_HEADER + record(1).len()) as u64;
    let end = HEADER_BYTES as u64 + 5 * frame;
    let mut w = LogWriter::new(0, 1, 6, bytes.len() as u64, 0);
    w.take().expect("header batch");
    for lsn in 6..=10 {
        w.append(&record(lsn), 0).expect("fits");
    }
    let lost = w.take().expect("records");
    let leftovers = &lost.chunks[0].bytes[frame as usize..];
    let at = (clean_end(end, bytes.len() as u64) + frame) as usize;
    bytes[at..at + leftovers.len()].copy_from_slice(leftovers);
    std::fs::write(&path, &bytes).expect("write");

    let s = FileStorage::open(&t.0, options()).expect("reopen");
    let mut p = s.open_shard(0).expect("shard");
    check(&mut p.log, 5);
    // A record that nearly fills the open's segment, so the next one rolls
    // into a segment based at LSN 7, while the old segment is discarded.
    let big = vec![6u8; 61_300];
    p.log.append(6, &big).expect("append");
    p.log.discard_through(5).expect("discard");
    assert_eq!(p.log.flush().ok(), Some(6));
    p.log.append(7, &record(7)).expect("append");
    assert_eq!(p.log.flush().ok(), Some(7));
    let names = segment_names(&log);
    assert!(!names.contains(&newest), "the old segment left the log");
    // The segment the roll made holds record 7 at the header's end and no
    // other valid frame numbered 7 or later anywhere after it.
    let rolled: u64 = newest[..20].parse::<u64>().expect("number") + 2;
    let bytes = std::fs::read(log.join(format!("{rolled:020}.seg"))).expect("rolled segment");
    let u32_at = |p: usize| u32::from_le_bytes(bytes[p..p + 4].try_into().expect("4 bytes"));
    let u64_at = |p: usize| u64::from_le_bytes(bytes[p..p + 8].try_into().expect("8 bytes"));
    assert_eq!(u64_at(HEADER_BYTES + 8), 7, "record 7 starts the segment");
    for p in HEADER_BYTES + frame as usize..bytes.len() - FRAME_HEADER {
        let len = u32_at(p) as usize;
        let body_end = p + FRAME_HEADER + len;
        let valid = len <= 1 << 16
            && body_end <= bytes.len()
            && u64_at(p + 8) >= 7
            && fusee_core::wire::checksum32(&bytes[p + 8..body_end]) == u32_at(p + 4);
        assert!(
            !valid,
            "a frame of LSN {} at {p} the log never wrote here",
            u64_at(p + 8)
        );
    }
    check_from(&mut p.log, 7, 7);
}

/// A discard whose rename, delete or directory sync fails leaves the log
/// unsure of what its directory holds: it refuses every write until a
/// reopen reads the directory again, and the reopened log is whole.
#[test]
fn a_failed_discard_latches_the_log() {
    use fusee_storage::StorageError;
    use fusee_storage_file::sim::SimIo;
    let io = SimIo::new();
    let s = FileStorage::open_with(io.clone(), "/d", options()).expect("open");
    let mut p = s.open_shard(0).expect("shard");
    for lsn in 1..=1000 {
        p.log.append(lsn, &record(lsn)).expect("append");
        if lsn % 10 == 0 {
            p.log.flush().expect("flush");
        }
    }
    io.fail_next_syncs(1);
    assert!(
        p.log.discard_through(500).is_err(),
        "the directory sync failed"
    );
    assert!(matches!(
        p.log.append(1001, &record(1001)),
        Err(StorageError::Latched { .. })
    ));
    assert!(p.log.flush().is_err());
    drop(p);
    let mut p = s.open_shard(0).expect("reopen the shard");
    let first = p.log.first_lsn();
    assert!(first <= 501, "nothing after the discard point is gone");
    check_from(&mut p.log, first, 1000);
    p.log.append(1001, &record(1001)).expect("append");
    assert_eq!(p.log.flush().ok(), Some(1001));
}
