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
//! too) is redb's commit protocol's business and is not simulated. The
//! harness is the shared `fusee_storage_kv::testing::KvHarness`.

mod common;

use common::Redb;
use fusee_storage_kv::testing::KvHarness;

fusee_storage::conformance_suite!(redb, || KvHarness::new(Redb::default()));

// The shared key-value backend tests (crash leftovers, log spill, markers,
// locks, damaged values, bit flips): `fusee_storage_kv::testing`.
fusee_storage_kv::kv_suite!(kv, Redb, Redb::default);

/// The macro expands every clause the suite lists.
#[test]
fn every_clause_is_listed() {
    assert_eq!(redb::CLAUSES, fusee_storage::conformance::CLAUSES);
}
