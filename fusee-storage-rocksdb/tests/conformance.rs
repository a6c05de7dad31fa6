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
//! The harness is the shared `fusee_storage_kv::testing::KvHarness`.
//!
//! Module `kv` runs the tests both key-value backends share
//! (`fusee_storage_kv::kv_suite!`): leftovers and spilled log records cut at
//! open, markers, locks (in this process and a child one), damaged values,
//! bit flips (`FUSEE_ROCKSDB_FLIP_ROUNDS`, `FUSEE_ROCKSDB_SEED`).

mod common;

use common::Rocks;
use fusee_storage_kv::testing::KvHarness;

fusee_storage::conformance_suite!(rocksdb, || KvHarness::new(Rocks));

// The shared key-value backend tests (crash leftovers, log spill, markers,
// locks, damaged values, bit flips): `fusee_storage_kv::testing`.
fusee_storage_kv::kv_suite!(kv, Rocks, || Rocks);

/// The macro expands every clause the suite lists.
#[test]
fn every_clause_is_listed() {
    assert_eq!(rocksdb::CLAUSES, fusee_storage::conformance::CLAUSES);
}
