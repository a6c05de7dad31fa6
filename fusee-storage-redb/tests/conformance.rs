//! The redb backend runs the whole conformance suite (`cargo test -p
//! fusee-storage-redb`). Heavy counts follow `FUSEE_CONFORMANCE_SCALE`
//! (percent, default 100); the random-sequence clause takes its seed from
//! `FUSEE_CONFORMANCE_SEED`.
//!
//! A crash is a process crash: the harness flips the kill switch of the
//! database's file backend, so from then on nothing reaches the file (not
//! even redb's shutdown commit), then drops the storage and reopens the file.
//! Writes issued before the crash stay (they are in the OS page cache), but
//! redb only trusts its last durable commit slot: non-durable transactions
//! (frames between commits, a streamed base, discards) are lost, and redb
//! repairs its allocator state at open. Power loss (unsynced writes lost
//! too) is redb's commit protocol's business and is not simulated.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

mod common;
use fusee_storage::Storage;
use fusee_storage::conformance::{Capabilities, Harness};
use fusee_storage_redb::{COMMIT_CRASH_POINTS, RedbStorage};

/// A harness over a temporary directory, removed on drop; every
/// [`Harness::open`] uses a fresh subdirectory.
struct RedbHarness {
    root: PathBuf,
    opened: u64,
    /// The kill switch of the storage open now.
    dead: Arc<AtomicBool>,
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
        Self {
            root,
            opened: 0,
            dead: Arc::default(),
        }
    }

    fn dir(&self) -> PathBuf {
        self.root.join(self.opened.to_string())
    }

    fn open_dir(&mut self) -> RedbStorage {
        let (storage, dead) = common::open_crashable(&self.dir());
        self.dead = dead;
        storage
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
            // A crash here is a process crash (the kill switch stops every
            // later write), not a power cut: unsynced writes are not torn.
            power_loss: false,
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
        self.dead.store(true, Ordering::SeqCst);
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
