//! A discard written without `sync` survives a process crash consistently
//! (RocksDB's own crash test). The crash tests both key-value backends share
//! (frames, bases and spilled log records written without `sync` are cut at
//! open) run from `conformance.rs` (`kv_suite!`).

mod common;

use common::TempDir;
use fusee_storage::{LogStore, Storage};
use fusee_storage_rocksdb::RocksStorage;

/// A discard is not synced: it may or may not survive a crash, and either
/// way the log is consistent (here it survives, being in the WAL file).
#[test]
fn a_discard_survives_a_process_crash_consistently() {
    let dir = TempDir::new("discard");
    let s = RocksStorage::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    for lsn in 1..=5 {
        p.log.append(lsn, b"r").unwrap_or_else(|e| panic!("{e}"));
    }
    p.log.flush().unwrap_or_else(|e| panic!("{e}"));
    p.log.discard_through(3).unwrap_or_else(|e| panic!("{e}"));
    drop(p);
    drop(s);
    let s = RocksStorage::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((p.log.first_lsn(), p.log.last_lsn()), (4, 5));
    let mut seen = Vec::new();
    p.log
        .read(3, &mut |lsn, _| {
            seen.push(lsn);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(seen, [4, 5]);
}
