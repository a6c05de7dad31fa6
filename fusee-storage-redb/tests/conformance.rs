//! The redb backend runs the whole conformance suite (`cargo test -p
//! fusee-storage-redb`). Heavy counts follow `FUSEE_CONFORMANCE_SCALE`
//! (percent, default 100); the random-sequence clause takes its seed from
//! `FUSEE_CONFORMANCE_SEED`.
//!
//! A crash is the storage dropped without `close`: redb then shuts down on
//! its own (which makes even non-durable transactions durable), so what the
//! suite checks is that opening a shard removes everything past its last
//! flush and commit, whatever reached the file.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use fusee_storage::Storage;
use fusee_storage::conformance::{Capabilities, Harness};
use fusee_storage_redb::{COMMIT_CRASH_POINTS, RedbStorage};

/// A harness over a temporary directory, removed on drop; every
/// [`Harness::open`] uses a fresh subdirectory.
struct RedbHarness {
    root: PathBuf,
    opened: u64,
}

impl RedbHarness {
    fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let root = std::env::temp_dir().join(format!(
            "fusee-redb-conformance-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&root);
        Self { root, opened: 0 }
    }

    fn dir(&self) -> PathBuf {
        self.root.join(self.opened.to_string())
    }

    fn open_dir(&self) -> RedbStorage {
        RedbStorage::open(self.dir()).unwrap_or_else(|e| panic!("open {:?}: {e}", self.dir()))
    }
}

impl Drop for RedbHarness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Harness for RedbHarness {
    type S = RedbStorage;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fault_injection: true,
            commit_crash_points: COMMIT_CRASH_POINTS,
        }
    }

    fn open(&mut self) -> RedbStorage {
        self.opened += 1;
        self.open_dir()
    }

    fn reopen(&mut self, s: RedbStorage) -> RedbStorage {
        s.close().unwrap_or_else(|e| panic!("close: {e}"));
        drop(s);
        self.open_dir()
    }

    fn crash(&mut self, s: RedbStorage) -> RedbStorage {
        drop(s);
        self.open_dir()
    }

    fn fail_next_flush(&mut self, s: &RedbStorage, shard: u32) {
        s.fail_next_flush(shard);
    }

    fn fail_next_commit(&mut self, s: &RedbStorage, shard: u32) {
        s.fail_next_commit(shard);
    }

    fn crash_in_commit(&mut self, s: &RedbStorage, shard: u32, step: u32) {
        s.crash_in_commit(shard, step);
    }
}

fusee_storage::conformance_suite!(redb, RedbHarness::new);

/// The macro expands every clause the suite lists.
#[test]
fn every_clause_is_listed() {
    assert_eq!(redb::CLAUSES, fusee_storage::conformance::CLAUSES);
}
