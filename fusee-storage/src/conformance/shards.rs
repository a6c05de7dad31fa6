//! Clauses about shards, reopening, closing and failures.

use super::check::{Clause, check_bytes, check_index, check_matches};
use super::{
    Harness, Index, check, check_eq, concat, fail, flush_to, frame, index_record, must, open,
    read_index, read_log, record, scaled,
};
use crate::{CheckpointStore, IndexChange, LogStore, RunStore, ShardParts, Storage, StorageError};

/// A failed flush latches the log part: appends, flushes and discards are
/// refused until the shard is reopened; then the log holds a prefix with
/// every record flushed before the failure, and works again.
pub fn flush_failure_latches<H: Harness>(h: &mut H) {
    let c = Clause::enter("flush_failure_latches");
    if c.skips(h) {
        return;
    }
    let mut s = h.open();
    let mut p = open(&s, 6);
    for lsn in 1..=10 {
        must!(p.log.append(lsn, &record(lsn, 20)), "append({lsn})");
    }
    flush_to(&mut p.log, 10, format_args!("flush of 1 to 10"));
    for lsn in 11..=15 {
        must!(p.log.append(lsn, &record(lsn, 20)), "append({lsn})");
    }
    h.fail_next_flush(&s, 6);
    check_matches!(
        p.log.flush(),
        Err(_),
        "an error",
        "flush of 11 to 15 with an injected failure"
    );
    check_matches!(
        p.log.flush(),
        Err(_),
        "an error (a failed flush is never retried as a success)",
        "a second flush after the failed one"
    );
    let next = p.log.last_lsn() + 1;
    check_matches!(
        p.log.append(next, b"x"),
        Err(_),
        "an error",
        "append({next}) after a failed flush"
    );
    check_matches!(
        p.log.discard_through(1),
        Err(_),
        "an error",
        "discard_through(1) after a failed flush"
    );
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 6);
    let last = p.log.last_lsn();
    check!(
        (10..=15).contains(&last),
        "after a failed flush of 11 to 15 and a reopen, the log must end between 10 and 15; found last_lsn {last}"
    );
    let (records, _) = must!(read_log(&mut p.log, 0), "read(after 0) after the reopen");
    check_eq!(
        records.len() as u64,
        last,
        "read(after 0) after the reopen must visit every record up to last_lsn: the count"
    );
    for (lsn, bytes) in records {
        check_bytes(
            &bytes,
            &record(lsn, 20),
            format_args!("record {lsn} after a failed flush and a reopen"),
        );
    }
    must!(
        p.log.append(last + 1, b"y"),
        "append({}) after the reopen",
        last + 1
    );
    flush_to(&mut p.log, last + 1, format_args!("flush after the reopen"));
}

/// A failed commit latches the checkpoint part; after a reopen the shard has
/// the previous commit (or, for a backend that cannot tell, the failed one
/// whole) and commits again.
pub fn commit_failure_latches<H: Harness>(h: &mut H) {
    let c = Clause::enter("commit_failure_latches");
    if c.skips(h) {
        return;
    }
    let mut s = h.open();
    let mut p = open(&s, 6);
    let d1 = concat(&[index_record(1, 1)]);
    must!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&d1), b"first"),
        "the first commit"
    );
    let d2 = concat(&[index_record(2, 2)]);
    h.fail_next_commit(&s, 6);
    check_matches!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&d2), b"second")
            .map(drop),
        Err(_),
        "an error",
        "a commit with an injected failure"
    );
    check_matches!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&d2), b"second")
            .map(drop),
        Err(_),
        "an error (the part is latched)",
        "a commit after a failed commit"
    );
    check_matches!(
        p.checkpoint.begin_base(),
        Err(_),
        "an error (the part is latched)",
        "begin_base after a failed commit"
    );
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 6);
    let runs: Vec<u64> = read_index(&mut p.checkpoint).keys().copied().collect();
    let found = p.recovered.checkpoint.as_deref();
    match found {
        Some(b"first") => check_eq!(runs, [1], "after a failed commit, the index of \"first\""),
        Some(b"second") => check_eq!(
            runs,
            [1, 2],
            "after a failed commit found whole, the index of \"second\""
        ),
        other => fail(format_args!(
            "after a failed commit and a reopen: expected checkpoint \"first\" (or \"second\" whole); found {:?}",
            other.map(String::from_utf8_lossy)
        )),
    }
    must!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&d2), b"third"),
        "a commit after the reopen"
    );
}

/// Sixteen shards open at once on one storage, each driven by its own
/// thread (and shard 0's log flushed by a second thread while the first
/// reads frames), do not interfere: each finds exactly its own data after a
/// reopen, and `shards()` lists all of them.
pub fn shards_sixteen<H: Harness>(h: &mut H) {
    let _c = Clause::enter("shards_sixteen");
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
                j.join().unwrap_or_else(|_| {
                    fail(format_args!(
                        "a shard's thread panicked (its message is above)"
                    ))
                })
            })
            .collect()
    });
    s = h.reopen(s);
    let listed = must!(s.shards(), "shards() after a reopen");
    check_eq!(
        listed,
        (0..16).collect::<Vec<_>>(),
        "shards() must list every shard opened"
    );
    for (shard, frames) in results {
        let mut p = open(&s, shard);
        let salt = 100 + u64::from(shard);
        let (records, last) = must!(read_log(&mut p.log, 0), "shard {shard}: read(after 0)");
        check_eq!(
            last,
            50 + u64::from(shard),
            "shard {shard}: after a reopen, the last LSN read"
        );
        for (lsn, bytes) in records {
            check_bytes(
                &bytes,
                &record(lsn, salt),
                format_args!("shard {shard}: after a reopen, record {lsn}"),
            );
        }
        let expected: Index = (0..10 + u64::from(shard))
            .map(|run| (run, index_record(run, salt)))
            .collect();
        check_index(
            &read_index(&mut p.checkpoint),
            &expected,
            format_args!("shard {shard}: after a reopen, the index it committed"),
        );
        check_eq!(
            p.recovered.checkpoint,
            Some(format!("shard {shard}").into_bytes()),
            "shard {shard}: after a reopen, the checkpoint it committed"
        );
        let mut out = Vec::new();
        for (blob, bytes) in frames {
            must!(
                p.runs.read(blob, &mut out),
                "shard {shard}: after a reopen, the read of frame {blob:?}"
            );
            check_bytes(
                &out,
                &bytes,
                format_args!("shard {shard}: after a reopen, frame {blob:?}"),
            );
        }
    }
}

/// Frames a shard wrote, with their bytes.
type Frames = Vec<(fusee_core::shard::BlobRef, Vec<u8>)>;

fn drive_shard<S: Storage>(s: &S, shard: u32) -> (u32, Frames) {
    let _c = Clause::enter("shards_sixteen");
    let salt = 100 + u64::from(shard);
    let p = open(s, shard);
    let (mut log, mut runs, mut checkpoint) = (p.log, p.runs, p.checkpoint);
    let mut frames = Vec::new();
    std::thread::scope(|scope| {
        // The log on its own thread, as a host's flusher would hold it.
        let flusher = scope.spawn(move || {
            let _c = Clause::enter("shards_sixteen");
            for lsn in 1..=50 + u64::from(shard) {
                must!(
                    log.append(lsn, &record(lsn, salt)),
                    "shard {shard}: append({lsn})"
                );
                if lsn % 7 == 0 {
                    must!(log.flush(), "shard {shard}: flush through {lsn}");
                }
            }
            must!(log.flush(), "shard {shard}: the last flush")
        });
        let mut out = Vec::new();
        for i in 0..20 {
            let bytes = frame(i * 13 + shard as usize, salt);
            let blob = must!(runs.append(&bytes), "shard {shard}: append of frame {i}");
            must!(
                runs.read(blob, &mut out),
                "shard {shard}: the read of frame {blob:?}"
            );
            check_bytes(
                &out,
                &bytes,
                format_args!("shard {shard}: frame {blob:?} read back"),
            );
            frames.push((blob, bytes));
        }
        let delta: Vec<_> = (0..10 + u64::from(shard))
            .map(|run| index_record(run, salt))
            .collect();
        must!(
            checkpoint.commit(
                &mut runs,
                IndexChange::Delta(&concat(&delta)),
                format!("shard {shard}").as_bytes(),
            ),
            "shard {shard}: commit"
        );
        let Ok(durable) = flusher.join() else {
            fail(format_args!(
                "shard {shard}: the flusher thread panicked (its message is above)"
            ));
        };
        check_eq!(
            durable,
            50 + u64::from(shard),
            "shard {shard}: the last flush's durable LSN"
        );
    });
    (shard, frames)
}

/// A shard is opened by one owner at a time: a second open while any one
/// of its parts is alive is `AlreadyOpen`; once they are dropped it opens
/// again; other shards are unaffected.
pub fn shard_open_twice<H: Harness>(h: &mut H) {
    let _c = Clause::enter("shard_open_twice");
    let s = h.open();
    let q = open(&s, 10);
    let cases = [
        "only its log part is",
        "only its run-store part is",
        "only its checkpoint part is",
        "all its parts are",
    ];
    for (alive, name) in cases.into_iter().enumerate() {
        let ShardParts {
            log,
            runs,
            checkpoint,
            ..
        } = open(&s, 9);
        // Keep the parts of this case; `filter` drops the others.
        let kept = (
            Some(log).filter(|_| alive == 0 || alive == 3),
            Some(runs).filter(|_| alive == 1 || alive == 3),
            Some(checkpoint).filter(|_| alive == 2 || alive == 3),
        );
        check_matches!(
            s.open_shard(9).map(drop),
            Err(StorageError::AlreadyOpen { shard: 9 }),
            "Err(AlreadyOpen { shard: 9 })",
            "a second open_shard(9) while {name} alive"
        );
        drop(kept);
    }
    drop(open(&s, 9));
    drop(q);
}

/// 100 reopens in a row (scaled by `FUSEE_CONFORMANCE_SCALE`), each adding a
/// flushed record, a frame and a commit, lose nothing.
pub fn reopen_hundred<H: Harness>(h: &mut H) {
    let _c = Clause::enter("reopen_hundred");
    let n = scaled(100) as u64;
    let mut s = h.open();
    let mut frames = Vec::new();
    for i in 0..n {
        let mut p = open(&s, 1);
        check_eq!(p.log.last_lsn(), i, "after reopen {i}, last_lsn");
        check_eq!(
            p.recovered.index_records,
            i,
            "after reopen {i}, recovered.index_records"
        );
        let want = (i > 0).then(|| format!("ck {}", i - 1).into_bytes());
        check_eq!(
            p.recovered.checkpoint,
            want,
            "after reopen {i}, recovered.checkpoint"
        );
        must!(
            p.log.append(i + 1, &record(i + 1, 30)),
            "reopen {i}: append({})",
            i + 1
        );
        flush_to(&mut p.log, i + 1, format_args!("reopen {i}: flush"));
        let bytes = frame(i as usize * 3, 30);
        let blob = must!(p.runs.append(&bytes), "reopen {i}: append of a frame");
        frames.push((blob, bytes));
        let d = concat(&[index_record(i, 30)]);
        must!(
            p.checkpoint.commit(
                &mut p.runs,
                IndexChange::Delta(&d),
                format!("ck {i}").as_bytes(),
            ),
            "reopen {i}: commit"
        );
        drop(p);
        s = h.reopen(s);
    }
    let mut p = open(&s, 1);
    let (records, last) = must!(read_log(&mut p.log, 0), "read(after 0) after {n} reopens");
    check_eq!(last, n, "after {n} reopens, the last LSN read");
    for (lsn, bytes) in records {
        check_bytes(
            &bytes,
            &record(lsn, 30),
            format_args!("after {n} reopens, record {lsn}"),
        );
    }
    let mut out = Vec::new();
    for (blob, bytes) in frames {
        must!(
            p.runs.read(blob, &mut out),
            "after {n} reopens, the read of frame {blob:?}"
        );
        check_bytes(
            &out,
            &bytes,
            format_args!("after {n} reopens, frame {blob:?}"),
        );
    }
    check_eq!(
        read_index(&mut p.checkpoint).len() as u64,
        n,
        "after {n} reopens, the runs in the index"
    );
}

/// Calls after `close` are `Closed` errors: on the storage and on every
/// part it gave out, whatever the call. Closing twice is allowed; the
/// storage reopens afterwards with what was durable.
pub fn calls_after_close<H: Harness>(h: &mut H) {
    let _c = Clause::enter("calls_after_close");
    let mut s = h.open();
    let mut p = open(&s, 0);
    must!(p.log.append(1, b"a"), "append(1)");
    flush_to(&mut p.log, 1, format_args!("flush of record 1"));
    let blob = must!(p.runs.append(b"frame"), "append of a frame");
    must!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&[]), b"ck"),
        "commit"
    );
    must!(p.checkpoint.begin_base(), "begin_base");
    must!(s.close(), "close");
    must!(s.close(), "a second close");
    let mut out = Vec::new();
    fn closed<T: std::fmt::Debug>(r: Result<T, StorageError>, call: &str) {
        check_matches!(
            r,
            Err(StorageError::Closed { .. }),
            "Err(Closed)",
            "{call} after close"
        );
    }
    closed(s.open_shard(1).map(drop), "open_shard(1)");
    closed(s.shards(), "shards()");
    closed(p.log.append(2, b"b"), "append(2)");
    closed(p.log.flush(), "flush");
    closed(p.log.begin_flush().map(drop), "begin_flush");
    closed(p.log.read(0, &mut |_, _| Ok(())), "read(after 0)");
    closed(p.log.discard_through(1), "discard_through(1)");
    closed(p.runs.append(b"x"), "append of a frame");
    closed(p.runs.read(blob, &mut out), "read of a committed frame");
    closed(p.runs.release(blob), "release of a committed frame");
    closed(p.runs.compact(&mut |_, _| {}), "compact");
    closed(p.checkpoint.base_chunk(&[0u8; 32]), "base_chunk");
    closed(p.checkpoint.begin_base(), "begin_base");
    closed(p.checkpoint.read_index(&mut |_| Ok(())), "read_index");
    closed(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&[]), b"x"),
        "commit",
    );
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    check_eq!(
        p.log.last_lsn(),
        1,
        "after close and a reopen, last_lsn (record 1 was flushed before close, 2 refused after)"
    );
    must!(
        p.runs.read(blob, &mut out),
        "after close and a reopen, the read of the frame committed before close"
    );
    check_bytes(
        &out,
        b"frame",
        format_args!("after close and a reopen, the frame committed before close"),
    );
}
