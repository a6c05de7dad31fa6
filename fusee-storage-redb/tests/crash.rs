//! A process crash loses non-durable transactions (redb's own crash test).
//! The crash tests both key-value backends share (leftovers and spilled log
//! records cut at open) run from `conformance.rs` (`kv_suite!`).

mod common;

use common::{Redb, TempDir};
use fusee_storage::{CheckpointStore, IndexChange, LogStore, RunStore, Storage};
use fusee_storage_kv::testing::{Backend, index_record};
use fusee_storage_redb::RedbStorage;
use fusee_storage_redb::runs::SPILL_BYTES;

/// Without a later durable commit, a process crash loses non-durable
/// transactions outright (what makes the conformance suite's crashes real).
#[test]
fn a_crash_loses_non_durable_transactions() {
    let dir = TempDir::new("lost");
    let (s, dead) = common::open_crashable(dir.path());
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    p.runs
        .append(b"committed")
        .unwrap_or_else(|e| panic!("{e}"));
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&index_record(1)), b"one")
        .unwrap_or_else(|e| panic!("{e}"));
    let big = vec![7u8; SPILL_BYTES + 1];
    p.runs.append(&big).unwrap_or_else(|e| panic!("{e}"));
    p.log.append(1, b"r").unwrap_or_else(|e| panic!("{e}"));
    p.log.flush().unwrap_or_else(|e| panic!("{e}"));
    p.log.discard_through(1).unwrap_or_else(|e| panic!("{e}"));
    p.runs.append(&big).unwrap_or_else(|e| panic!("{e}"));
    drop(p);
    dead.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(s);
    // The first big frame was made durable by the flush, the second not.
    assert_eq!(Redb::raw_rows(dir.path(), 0).frames, 2);
    let s = RedbStorage::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    // The discard was not durable: the record came back.
    assert_eq!((p.log.first_lsn(), p.log.last_lsn()), (1, 1));
}
