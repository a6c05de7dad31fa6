//! Opening directories that are not (or no longer) a healthy Fusee RocksDB
//! storage: every case is a clear error, never a panic and never silent
//! data.
//!
//! The open-error tests both key-value backends share (newer and foreign
//! markers, locks in this and another process, damaged values, bit flips)
//! run from `conformance.rs` (`kv_suite!`); these are RocksDB's own.

use std::path::Path;

mod common;
use common::{Rocks, TempDir};

use fusee_storage::{Storage, StorageError};
use fusee_storage_kv::testing;
use fusee_storage_rocksdb::{DIR_NAME, RocksError, RocksStorage};

/// The `RocksError` inside an open error, or a panic naming what came back.
fn open_err(dir: &Path) -> RocksError {
    match RocksStorage::open(dir) {
        Ok(_) => panic!("opening {dir:?} succeeded"),
        Err(StorageError::Backend(e)) => match e.downcast::<RocksError>() {
            Ok(e) => *e,
            Err(e) => panic!("backend error of another type: {e}"),
        },
        Err(e) => panic!("expected a RocksError, got {e}"),
    }
}

fn seed() -> u64 {
    std::env::var("FUSEE_ROCKSDB_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED_u64)
}

/// Random bytes as `CURRENT` (and as a manifest it might name), random
/// files without `CURRENT`, and text: all `NotRocksDb`, naming the path.
/// Seed: `FUSEE_ROCKSDB_SEED`.
#[test]
fn garbage_directories_are_not_rocksdb() {
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    for len in [1usize, 9, 100, 4096, 70_000] {
        let dir = TempDir::new("garbage");
        std::fs::create_dir_all(dir.db()).unwrap_or_else(|e| panic!("{e}"));
        let mut bytes = vec![0u8; len];
        rng.fill(&mut bytes);
        std::fs::write(dir.db().join("CURRENT"), &bytes).unwrap_or_else(|e| panic!("{e}"));
        rng.fill(&mut bytes);
        std::fs::write(dir.db().join("MANIFEST-000001"), &bytes).unwrap_or_else(|e| panic!("{e}"));
        let e = open_err(dir.path());
        assert!(
            matches!(e, RocksError::NotRocksDb { .. }),
            "seed {seed}, {len} random bytes: {e}"
        );
        assert!(
            e.to_string().contains(DIR_NAME),
            "the error names the path: {e}"
        );
    }
    // A manifest named by CURRENT that holds garbage.
    let dir = TempDir::new("manifest");
    std::fs::create_dir_all(dir.db()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.db().join("CURRENT"), "MANIFEST-000001\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.db().join("MANIFEST-000001"),
        "just some text\n".repeat(1000),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        open_err(dir.path()),
        RocksError::NotRocksDb { .. }
    ));
    // Files but no CURRENT: not taken over.
    let dir = TempDir::new("nocurrent");
    std::fs::create_dir_all(dir.db()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.db().join("000004.log"), b"anything").unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        open_err(dir.path()),
        RocksError::NotRocksDb { .. }
    ));
    // The database path is a file.
    let dir = TempDir::new("file");
    std::fs::write(dir.db(), b"not a directory").unwrap_or_else(|e| panic!("{e}"));
    assert!(RocksStorage::open(dir.path()).is_err());
}

/// A RocksDB database that is not Fusee's: data in the default column
/// family, or a column family of its own. Refusing it changes nothing.
#[test]
fn foreign_rocksdb_databases_are_refused() {
    let mut plain = rocksdb::Options::default();
    plain.create_if_missing(true);
    plain.create_missing_column_families(true);
    plain.set_compression_type(rocksdb::DBCompressionType::None);
    let dir = TempDir::new("foreign");
    {
        let db = rocksdb::DB::open(&plain, dir.db()).unwrap_or_else(|e| panic!("{e}"));
        db.put(b"alice", b"5").unwrap_or_else(|e| panic!("{e}"));
    }
    let e = open_err(dir.path());
    assert!(matches!(e, RocksError::Foreign { .. }), "{e}");
    {
        let db = rocksdb::DB::open(&plain, dir.db()).unwrap_or_else(|e| panic!("{e}"));
        let v = db.get(b"alice").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v.as_deref(), Some(&b"5"[..]), "the foreign data is intact");
    }
    let dir = TempDir::new("foreign-cf");
    {
        let db = rocksdb::DB::open_cf(&plain, dir.db(), ["default", "accounts"])
            .unwrap_or_else(|e| panic!("{e}"));
        drop(db);
    }
    let e = open_err(dir.path());
    assert!(matches!(e, RocksError::Foreign { .. }), "{e}");
    assert!(e.to_string().contains("accounts"), "{e}");
    // An empty database with only the default family becomes a storage.
    let dir = TempDir::new("empty");
    drop(rocksdb::DB::open(&plain, dir.db()).unwrap_or_else(|e| panic!("{e}")));
    testing::populate::<Rocks>(dir.path());
    let s = RocksStorage::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.shards().ok(), Some(vec![0]));
}
