//! Clauses about shards, reopening, closing and failures.

use super::{
    Harness, concat, frame, index_record, open, read_index, read_log, record, scaled, skip,
};
use crate::{CheckpointStore, IndexChange, LogStore, RunStore, Storage, StorageError};

/// A failed flush latches the log part: appends, flushes and discards are
/// refused until the shard is reopened; then the log holds a prefix with
/// every record flushed before the failure, and works again.
pub fn flush_failure_latches<H: Harness>(h: &mut H) {
    if !h.capabilities().fault_injection {
        return skip(
            "flush_failure_latches",
            "the harness declares no fault injection",
        );
    }
    let mut s = h.open();
    let mut p = open(&s, 6);
    for lsn in 1..=10 {
        p.log
            .append(lsn, &record(lsn, 20))
            .unwrap_or_else(|e| panic!("append: {e}"));
    }
    assert_eq!(p.log.flush().ok(), Some(10));
    for lsn in 11..=15 {
        p.log
            .append(lsn, &record(lsn, 20))
            .unwrap_or_else(|e| panic!("append: {e}"));
    }
    h.fail_next_flush(&s, 6);
    assert!(
        p.log.flush().is_err(),
        "the injected flush failure was not reported"
    );
    assert!(
        p.log.flush().is_err(),
        "a failed flush must never be retried as a success"
    );
    let next = p.log.last_lsn() + 1;
    assert!(
        p.log.append(next, b"x").is_err(),
        "append after a failed flush"
    );
    assert!(
        p.log.discard_through(1).is_err(),
        "discard after a failed flush"
    );
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 6);
    let last = p.log.last_lsn();
    assert!(
        (10..=15).contains(&last),
        "log ends at {last} after a failed flush of 11..=15"
    );
    let (records, _) = read_log(&mut p.log, 0).unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(records.len() as u64, last);
    for (lsn, bytes) in records {
        assert!(bytes == record(lsn, 20), "record {lsn} changed");
    }
    p.log
        .append(last + 1, b"y")
        .unwrap_or_else(|e| panic!("append after reopen: {e}"));
    assert_eq!(p.log.flush().ok(), Some(last + 1));
}

/// A failed commit latches the checkpoint part; after a reopen the shard has
/// the previous commit (or, for a backend that cannot tell, the failed one
/// whole) and commits again.
pub fn commit_failure_latches<H: Harness>(h: &mut H) {
    if !h.capabilities().fault_injection {
        return skip(
            "commit_failure_latches",
            "the harness declares no fault injection",
        );
    }
    let mut s = h.open();
    let mut p = open(&s, 6);
    let d1 = concat(&[index_record(1, 1)]);
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&d1), b"first")
        .unwrap_or_else(|e| panic!("commit: {e}"));
    let d2 = concat(&[index_record(2, 2)]);
    h.fail_next_commit(&s, 6);
    assert!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&d2), b"second")
            .is_err(),
        "the injected commit failure was not reported"
    );
    let r = p
        .checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&d2), b"second");
    assert!(r.is_err(), "a commit after a failed commit must be refused");
    assert!(
        p.checkpoint.begin_base().is_err(),
        "begin_base after a failed commit"
    );
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 6);
    let index = read_index(&mut p.checkpoint);
    match p.recovered.checkpoint.as_deref() {
        Some(b"first") => assert_eq!(index.keys().copied().collect::<Vec<_>>(), [1]),
        Some(b"second") => assert_eq!(index.keys().copied().collect::<Vec<_>>(), [1, 2]),
        other => panic!("after a failed commit the shard has checkpoint {other:?}"),
    }
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&d2), b"third")
        .unwrap_or_else(|e| panic!("commit after reopen: {e}"));
}

/// Sixteen shards open at once on one storage, each driven by its own
/// thread (and shard 0's log flushed by a second thread while the first
/// reads frames), do not interfere: each finds exactly its own data after a
/// reopen, and `shards()` lists all of them.
pub fn shards_sixteen<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let results: Vec<(u32, Frames)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16u32)
            .map(|shard| {
                let s = &s;
                scope.spawn(move || drive_shard(s, shard))
            })
            .collect();
        handles
            .into_iter()
            .map(|j| {
                j.join()
                    .unwrap_or_else(|_| panic!("a shard thread panicked"))
            })
            .collect()
    });
    s = h.reopen(s);
    let listed = s.shards().unwrap_or_else(|e| panic!("shards(): {e}"));
    assert_eq!(
        listed,
        (0..16).collect::<Vec<_>>(),
        "shards() must list every shard opened"
    );
    for (shard, frames) in results {
        let mut p = open(&s, shard);
        let salt = 100 + u64::from(shard);
        let (records, last) = read_log(&mut p.log, 0).unwrap_or_else(|e| panic!("read: {e}"));
        assert_eq!(last, 50 + u64::from(shard), "shard {shard}: last LSN");
        for (lsn, bytes) in records {
            assert!(
                bytes == record(lsn, salt),
                "shard {shard}: record {lsn} changed"
            );
        }
        let index = read_index(&mut p.checkpoint);
        assert_eq!(
            index.len(),
            10 + shard as usize,
            "shard {shard}: index size"
        );
        assert!(
            index
                .values()
                .all(|r| *r == index_record(crate::index_record_run(r), salt))
        );
        assert_eq!(
            p.recovered.checkpoint,
            Some(format!("shard {shard}").into_bytes())
        );
        let mut out = Vec::new();
        for (blob, bytes) in frames {
            p.runs
                .read(blob, &mut out)
                .unwrap_or_else(|e| panic!("shard {shard}: frame: {e}"));
            assert!(out == bytes, "shard {shard}: frame changed");
        }
    }
}

/// Frames a shard wrote, with their bytes.
type Frames = Vec<(fusee_core::shard::BlobRef, Vec<u8>)>;

fn drive_shard<S: Storage>(s: &S, shard: u32) -> (u32, Frames) {
    let salt = 100 + u64::from(shard);
    let p = open(s, shard);
    let (mut log, mut runs, mut checkpoint) = (p.log, p.runs, p.checkpoint);
    let mut frames = Vec::new();
    std::thread::scope(|scope| {
        // The log on its own thread, as a host's flusher would hold it.
        let flusher = scope.spawn(move || {
            for lsn in 1..=50 + u64::from(shard) {
                log.append(lsn, &record(lsn, salt))
                    .unwrap_or_else(|e| panic!("append: {e}"));
                if lsn % 7 == 0 {
                    log.flush().unwrap_or_else(|e| panic!("flush: {e}"));
                }
            }
            log.flush().unwrap_or_else(|e| panic!("flush: {e}"))
        });
        let mut out = Vec::new();
        for i in 0..20 {
            let bytes = frame(i * 13 + shard as usize, salt);
            let blob = runs.append(&bytes).unwrap_or_else(|e| panic!("frame: {e}"));
            runs.read(blob, &mut out)
                .unwrap_or_else(|e| panic!("read: {e}"));
            assert!(out == bytes, "shard {shard}: frame read back changed");
            frames.push((blob, bytes));
        }
        let delta: Vec<_> = (0..10 + u64::from(shard))
            .map(|run| index_record(run, salt))
            .collect();
        checkpoint
            .commit(
                &mut runs,
                IndexChange::Delta(&concat(&delta)),
                format!("shard {shard}").as_bytes(),
            )
            .unwrap_or_else(|e| panic!("commit: {e}"));
        let durable = flusher
            .join()
            .unwrap_or_else(|_| panic!("flusher panicked"));
        assert_eq!(durable, 50 + u64::from(shard));
    });
    (shard, frames)
}

/// A shard is opened by one owner at a time: a second open while parts are
/// alive is `AlreadyOpen`; once they are dropped it opens again; other
/// shards are unaffected.
pub fn shard_open_twice<H: Harness>(h: &mut H) {
    let s = h.open();
    let p = open(&s, 9);
    assert!(
        matches!(s.open_shard(9), Err(StorageError::AlreadyOpen { shard: 9 })),
        "second open of a live shard"
    );
    let q = open(&s, 10);
    let crate::ShardParts {
        log,
        runs,
        checkpoint,
        ..
    } = p;
    drop((runs, checkpoint));
    assert!(s.open_shard(9).is_err(), "open while the log part is alive");
    drop(log);
    drop(open(&s, 9));
    drop(q);
}

/// 100 reopens in a row (scaled by `FUSEE_CONFORMANCE_SCALE`), each adding a
/// flushed record, a frame and a commit, lose nothing.
pub fn reopen_hundred<H: Harness>(h: &mut H) {
    let n = scaled(100) as u64;
    let mut s = h.open();
    let mut frames = Vec::new();
    for i in 0..n {
        let mut p = open(&s, 1);
        assert_eq!(p.log.last_lsn(), i, "reopen {i}: last LSN");
        assert_eq!(p.recovered.index_records, i, "reopen {i}: index size");
        let want = (i > 0).then(|| format!("ck {}", i - 1).into_bytes());
        assert_eq!(p.recovered.checkpoint, want, "reopen {i}: checkpoint");
        p.log
            .append(i + 1, &record(i + 1, 30))
            .unwrap_or_else(|e| panic!("append: {e}"));
        assert_eq!(p.log.flush().ok(), Some(i + 1));
        let bytes = frame(i as usize * 3, 30);
        let blob = p
            .runs
            .append(&bytes)
            .unwrap_or_else(|e| panic!("frame: {e}"));
        frames.push((blob, bytes));
        let d = concat(&[index_record(i, 30)]);
        p.checkpoint
            .commit(
                &mut p.runs,
                IndexChange::Delta(&d),
                format!("ck {i}").as_bytes(),
            )
            .unwrap_or_else(|e| panic!("reopen {i}: commit: {e}"));
        drop(p);
        s = h.reopen(s);
    }
    let mut p = open(&s, 1);
    let (records, last) = read_log(&mut p.log, 0).unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(last, n);
    for (lsn, bytes) in records {
        assert!(bytes == record(lsn, 30), "record {lsn} changed");
    }
    let mut out = Vec::new();
    for (blob, bytes) in frames {
        p.runs
            .read(blob, &mut out)
            .unwrap_or_else(|e| panic!("frame: {e}"));
        assert!(out == bytes, "frame changed");
    }
    assert_eq!(read_index(&mut p.checkpoint).len() as u64, n);
}

/// Calls after `close` are errors: on the storage and on every part it gave
/// out. Closing twice is allowed; the storage reopens afterwards with what
/// was durable.
pub fn calls_after_close<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let mut p = open(&s, 0);
    p.log
        .append(1, b"a")
        .unwrap_or_else(|e| panic!("append: {e}"));
    assert_eq!(p.log.flush().ok(), Some(1));
    let blob = p
        .runs
        .append(b"frame")
        .unwrap_or_else(|e| panic!("frame: {e}"));
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&[]), b"ck")
        .unwrap_or_else(|e| panic!("commit: {e}"));
    s.close().unwrap_or_else(|e| panic!("close: {e}"));
    s.close().unwrap_or_else(|e| panic!("second close: {e}"));
    assert!(
        matches!(s.open_shard(1), Err(StorageError::Closed { .. })),
        "open_shard after close"
    );
    assert!(
        matches!(s.shards(), Err(StorageError::Closed { .. })),
        "shards after close"
    );
    let mut out = Vec::new();
    let closed = |r: Result<(), StorageError>, what: &str| {
        assert!(
            matches!(r, Err(StorageError::Closed { .. })),
            "{what} after close: {r:?}"
        );
    };
    closed(p.log.append(2, b"b"), "append");
    closed(p.log.flush().map(drop), "flush");
    closed(p.log.read(0, &mut |_, _| Ok(())).map(drop), "read");
    closed(p.log.discard_through(1), "discard_through");
    closed(p.runs.append(b"x").map(drop), "store append");
    closed(p.runs.read(blob, &mut out), "store read");
    closed(p.runs.release(blob), "release");
    closed(p.checkpoint.begin_base(), "begin_base");
    closed(
        p.checkpoint.read_index(&mut |_| Ok(())).map(drop),
        "read_index",
    );
    closed(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&[]), b"x")
            .map(drop),
        "commit",
    );
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    assert_eq!(p.log.last_lsn(), 1);
    p.runs
        .read(blob, &mut out)
        .unwrap_or_else(|e| panic!("frame after reopen: {e}"));
    assert_eq!(out, b"frame");
}
