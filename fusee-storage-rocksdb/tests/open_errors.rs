//! Opening directories that are not (or no longer) a healthy Fusee RocksDB
//! storage: every case is a named error of the vocabulary, never a panic
//! and never silent data.
//!
//! The open-error tests both key-value backends share (identity markers,
//! format rows, locks in this and another process, damaged values, bit
//! flips) run from `conformance.rs` (`kv_suite!`); these are RocksDB's own.

mod common;
use common::{Rocks, TempDir};

use fusee_storage::StorageError;
use fusee_storage_kv::testing;
use fusee_storage_rocksdb::DIR_NAME;

/// `CorruptFile` naming a path inside the database directory, or a panic
/// saying what `case` found.
fn corrupt(dir: &std::path::Path, case: &str) {
    match testing::open_err::<Rocks>(dir) {
        StorageError::CorruptFile { file, .. } => {
            assert!(
                file.contains(DIR_NAME),
                "{case}: the error names the database: {file}"
            );
        }
        e => panic!("{case}: expected CorruptFile, found {e:?} ({e})"),
    }
}

/// Random bytes as `CURRENT` (and as the manifest it might name), and text
/// as the manifest `CURRENT` names, in place of a store's: `CorruptFile`.
/// Seed: `FUSEE_ROCKSDB_SEED`.
#[test]
fn garbage_databases_are_corrupt() {
    let seed = testing::env_or("ROCKSDB", "SEED", 0x5EED);
    let mut rng = fastrand::Rng::with_seed(seed);
    for len in [1usize, 9, 100, 4096, 70_000] {
        let dir = TempDir::new("garbage");
        testing::populate::<Rocks>(dir.path());
        let mut bytes = vec![0u8; len];
        rng.fill(&mut bytes);
        std::fs::write(dir.db().join("CURRENT"), &bytes).unwrap_or_else(|e| panic!("{e}"));
        corrupt(
            dir.path(),
            &format!("seed {seed}, {len} random bytes as CURRENT"),
        );
    }
    let dir = TempDir::new("manifest");
    testing::populate::<Rocks>(dir.path());
    std::fs::write(dir.db().join("CURRENT"), "MANIFEST-000001\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.db().join("MANIFEST-000001"),
        "just some text\n".repeat(1000),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    corrupt(dir.path(), "a text manifest");
}

/// A RocksDB database of another program in place of a store's database:
/// data in the default column family only (no Fusee families), or a column
/// family of its own: `CorruptFile`, and refusing it changes nothing.
#[test]
fn foreign_rocksdb_databases_are_corrupt() {
    let mut plain = rocksdb::Options::default();
    plain.create_if_missing(true);
    plain.create_missing_column_families(true);
    plain.set_compression_type(rocksdb::DBCompressionType::None);
    let dir = TempDir::new("foreign");
    testing::populate::<Rocks>(dir.path());
    std::fs::remove_dir_all(dir.db()).unwrap_or_else(|e| panic!("{e}"));
    {
        let db = rocksdb::DB::open(&plain, dir.db()).unwrap_or_else(|e| panic!("{e}"));
        db.put(b"alice", b"5").unwrap_or_else(|e| panic!("{e}"));
    }
    corrupt(dir.path(), "a foreign database");
    {
        let db = rocksdb::DB::open(&plain, dir.db()).unwrap_or_else(|e| panic!("{e}"));
        let v = db.get(b"alice").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v.as_deref(), Some(&b"5"[..]), "the foreign data is intact");
    }
    let dir = TempDir::new("foreign-cf");
    testing::populate::<Rocks>(dir.path());
    {
        let mut db = common::raw_open(&dir.db());
        db.create_cf("accounts", &plain)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    corrupt(dir.path(), "a foreign column family");
}
