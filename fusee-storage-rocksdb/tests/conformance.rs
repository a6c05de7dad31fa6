//! The RocksDB backend runs the whole conformance suite (`cargo test -p
//! fusee-storage-rocksdb`). Heavy counts follow `FUSEE_CONFORMANCE_SCALE`
//! (percent, default 100); the random-sequence clause takes its seed from
//! `FUSEE_CONFORMANCE_SEED`.
//!
//! A crash is a process crash: the harness drops the storage without
//! closing it, and reopens the directory. RocksDB closes its files but
//! writes nothing a crash would not have: batches written without `sync`
//! are in the WAL file already (the operating system keeps them when a
//! process dies), so they survive and the open-time cleanup must cut them,
//! exactly as after a real crash. Power loss (unsynced writes lost or torn)
//! is not simulated (`Capabilities::power_loss` is false). Faults are
//! injected by the backend's own switches ([`RocksStorage::fail_next_flush`]
//! and friends), which fail a flush or commit before anything is written.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use fusee_storage::Storage;
use fusee_storage::conformance::{Capabilities, Harness};
use fusee_storage_rocksdb::{COMMIT_CRASH_POINTS, RocksStorage};

/// A harness over a temporary directory, removed on drop; every
/// [`Harness::open`] uses a fresh subdirectory.
struct RocksHarness {
    root: PathBuf,
    opened: u64,
}

impl RocksHarness {
    fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let root = std::env::temp_dir().join(format!(
            "fusee-rocksdb-conformance-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&root);
        Self { root, opened: 0 }
    }

    fn open_dir(&mut self) -> RocksStorage {
        let dir = self.root.join(self.opened.to_string());
        RocksStorage::open(&dir).unwrap_or_else(|e| panic!("open {dir:?}: {e}"))
    }
}

impl Drop for RocksHarness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Harness for RocksHarness {
    type S = RocksStorage;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fault_injection: true,
            commit_crash_points: COMMIT_CRASH_POINTS,
            ..Capabilities::default()
        }
    }

    fn open(&mut self) -> RocksStorage {
        self.opened += 1;
        self.open_dir()
    }

    fn reopen(&mut self, s: RocksStorage) -> RocksStorage {
        s.close().unwrap_or_else(|e| panic!("close: {e}"));
        drop(s);
        self.open_dir()
    }

    fn crash(&mut self, s: RocksStorage) -> RocksStorage {
        drop(s);
        self.open_dir()
    }

    fn fail_next_flush(&mut self, s: &RocksStorage, shard: u32) {
        s.fail_next_flush(shard);
    }

    fn fail_next_commit(&mut self, s: &RocksStorage, shard: u32) {
        s.fail_next_commit(shard);
    }

    fn crash_in_commit(&mut self, s: &RocksStorage, shard: u32, step: u32) {
        s.crash_in_commit(shard, step);
    }
}

fusee_storage::conformance_suite!(rocksdb, RocksHarness::new);

/// The macro expands every clause the suite lists.
#[test]
fn every_clause_is_listed() {
    assert_eq!(rocksdb::CLAUSES, fusee_storage::conformance::CLAUSES);
}
