//! Memory-specific tests (the conformance suite covers the contract).

use super::checkpoint::build_base;
use super::*;
use crate::contract::{CheckpointStore, IndexChange, LogStore, RunStore};
use crate::limits::{DELETED, index_record_run};

fn rec(run: u64) -> [u8; INDEX_RECORD] {
    let mut r = [7u8; INDEX_RECORD];
    r[8..16].copy_from_slice(&(run | 1 << 48).to_le_bytes());
    r
}

fn runs_of(c: &mut MemoryCheckpoint) -> Vec<u64> {
    let mut runs = Vec::new();
    c.read_index(&mut |chunk| {
        for r in chunk.chunks_exact(INDEX_RECORD) {
            let r: &[u8; INDEX_RECORD] = r.try_into().map_err(|_| StorageError::Corrupt {
                what: "test chunk",
                at: 0,
            })?;
            runs.push(index_record_run(r));
        }
        Ok(())
    })
    .map(|_| runs)
    .unwrap_or_else(|e| panic!("read_index: {e}"))
}

#[test]
fn parts_are_send_and_storage_is_sync() {
    fn send<T: Send>() {}
    fn sync<T: Send + Sync>() {}
    send::<MemoryLog>();
    send::<MemoryRuns>();
    send::<MemoryCheckpoint>();
    sync::<MemoryStorage>();
}

/// Points 0..=2 leave the previous commit, point 3 the new one; a point
/// past the last never fires.
#[test]
fn commit_crash_points_are_exact() {
    for step in 0..=COMMIT_STEPS {
        let s = MemoryStorage::new();
        let mut p = s.open_shard(1).unwrap_or_else(|e| panic!("{e}"));
        let old = rec(1);
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&old), b"old")
            .unwrap_or_else(|e| panic!("{e}"));
        let blob = p.runs.append(b"frame").unwrap_or_else(|e| panic!("{e}"));
        s.crash_in_commit(1, step);
        let r = p
            .checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&rec(2)), b"new");
        assert_eq!(r.is_ok(), step >= COMMIT_STEPS, "step {step}: {r:?}");
        drop(p);
        let s = s.crash();
        let mut p = s.open_shard(1).unwrap_or_else(|e| panic!("{e}"));
        let new = step >= 3;
        let want: &[u8] = if new { b"new" } else { b"old" };
        assert_eq!(p.recovered.checkpoint.as_deref(), Some(want), "step {step}");
        assert_eq!(
            runs_of(&mut p.checkpoint),
            if new { vec![1, 2] } else { vec![1] }
        );
        let mut out = Vec::new();
        assert_eq!(
            p.runs.read(blob, &mut out).is_ok(),
            new,
            "step {step}: frame"
        );
    }
}

/// A failed flush loses exactly the records it covered, and parts from
/// before a crash are dead.
#[test]
fn failed_flush_and_dead_parts() {
    let s = MemoryStorage::new();
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    p.log.append(1, b"a").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.log.flush().ok(), Some(1));
    p.log.append(2, b"b").unwrap_or_else(|e| panic!("{e}"));
    s.fail_next_flush(0);
    assert!(p.log.flush().is_err());
    assert!(matches!(
        p.log.append(2, b"b"),
        Err(StorageError::Latched { .. })
    ));
    let s2 = s.crash();
    assert!(matches!(p.log.flush(), Err(StorageError::Closed { .. })));
    assert!(matches!(s.open_shard(0), Err(StorageError::Closed { .. })));
    drop(p);
    let mut p = s2.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.log.last_lsn(), 1);
    p.log.append(2, b"c").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s2.shards().ok(), Some(vec![0]));
}

/// A flush held when the machine crashes lets its thread go (a host joins
/// its flusher when it stops) and reports nothing durable.
#[test]
fn a_held_flush_ends_at_a_crash_without_durability() {
    let s = MemoryStorage::new();
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    p.log.append(1, b"a").unwrap_or_else(|e| panic!("{e}"));
    s.hold_flushes(true);
    let mut ticket = p.log.begin_flush().unwrap_or_else(|e| panic!("{e}"));
    let io = std::thread::spawn(move || {
        let ran = ticket.run();
        (ticket, ran)
    });
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(!io.is_finished(), "the hold holds the flush");
    let s2 = s.crash();
    let (ticket, ran) = io.join().unwrap_or_else(|_| panic!("flush thread"));
    assert!(ran, "a cut-short flush is no I/O error");
    assert!(matches!(
        p.log.finish_flush(ticket),
        Err(StorageError::Closed { .. })
    ));
    drop(p);
    s2.hold_flushes(false);
    let p = s2.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.log.last_lsn(), 0, "the held record was lost");
}

/// A log visitor may use the shard's other parts (no lock is held while
/// it runs), and a long read crosses batch boundaries intact.
#[test]
fn visitor_may_use_other_parts() {
    let s = MemoryStorage::new();
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    let n = READ_BATCH as u64 * 2 + 5;
    for lsn in 1..=n {
        p.log
            .append(lsn, &lsn.to_le_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let runs = &mut p.runs;
    let mut next = 0;
    let end = p
        .log
        .read(0, &mut |lsn, bytes| {
            next += 1;
            assert_eq!((lsn, bytes), (next, &lsn.to_le_bytes()[..]));
            runs.append(bytes).map(drop)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((end, next), (n, n));
}

/// Within a base the last record of a run wins and deletes remove.
#[test]
fn base_applies_records_in_order() {
    let mut del = rec(3);
    del[14] = DELETED;
    let index = build_base(vec![rec(5), rec(3), del, rec(9), rec(5)]);
    assert_eq!(index.keys().copied().collect::<Vec<_>>(), [5, 9]);
}

#[test]
fn a_log_that_lost_sealed_records_is_an_error_and_unsealed_loss_is_not_seen() {
    let storage = MemoryStorage::new();
    let mut p = storage.open_shard(0).unwrap();
    for lsn in 1..=10 {
        p.log.append(lsn, b"r").unwrap();
    }
    p.log.flush().unwrap();
    assert_eq!(p.log.seal().unwrap(), 10);
    for lsn in 11..=12 {
        p.log.append(lsn, b"r").unwrap();
    }
    p.log.flush().unwrap();
    drop(p);
    let storage = storage.crash();
    // Records past the seal lost: nothing can tell (the window).
    storage.lose_acknowledged(0, 2);
    let p = storage.open_shard(0).unwrap();
    assert_eq!(p.log.last_lsn(), 10);
    drop(p);
    // Sealed records lost: a named error, and the shard left as it is.
    storage.lose_acknowledged(0, 1);
    for _ in 0..2 {
        match storage.open_shard(0) {
            Err(StorageError::LostRecords {
                shard: 0,
                sealed: 10,
                recovered: 9,
                ..
            }) => {}
            other => panic!("{:?}", other.map(|p| p.log.last_lsn())),
        }
    }
    assert_eq!(storage.sealed_lsn(0), 10);
}
