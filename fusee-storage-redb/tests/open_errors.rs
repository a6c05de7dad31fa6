//! Opening files that are not (or no longer) a healthy Fusee redb storage:
//! every case is a clear error, never a panic and never silent data.
//!
//! The open-error tests both key-value backends share (newer and foreign
//! markers, locks in this and another process, damaged values, bit flips)
//! run from `conformance.rs` (`kv_suite!`); these are redb's own.

use std::path::Path;

mod common;
use common::{Redb, TempDir};

use fusee_storage::{Storage, StorageError};
use fusee_storage_kv::testing;
use fusee_storage_redb::{FILE_NAME, RedbError, RedbStorage};

/// The `RedbError` inside an open error, or a panic naming what came back.
fn open_err(dir: &Path) -> RedbError {
    match RedbStorage::open(dir) {
        Ok(_) => panic!("opening {dir:?} succeeded"),
        Err(StorageError::Backend(e)) => match e.downcast::<RedbError>() {
            Ok(e) => *e,
            Err(e) => panic!("backend error of another type: {e}"),
        },
        Err(e) => panic!("expected a RedbError, got {e}"),
    }
}

/// Random bytes and text as the database file: `NotRedb`, naming the file.
/// Seed: `FUSEE_REDB_SEED`.
#[test]
fn garbage_files_are_not_redb() {
    let seed = std::env::var("FUSEE_REDB_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED_u64);
    let mut rng = fastrand::Rng::with_seed(seed);
    for len in [1usize, 9, 100, 4096, 70_000] {
        let dir = TempDir::new("garbage");
        let mut bytes = vec![0u8; len];
        rng.fill(&mut bytes);
        std::fs::write(dir.file(), &bytes).unwrap_or_else(|e| panic!("write: {e}"));
        let e = open_err(dir.path());
        assert!(
            matches!(e, RedbError::NotRedb { .. }),
            "seed {seed}, {len} random bytes: {e}"
        );
        assert!(
            e.to_string().contains(FILE_NAME),
            "the error names the file: {e}"
        );
    }
    let dir = TempDir::new("text");
    std::fs::write(dir.file(), "just some text\n".repeat(1000)).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(open_err(dir.path()), RedbError::NotRedb { .. }));
}

#[test]
fn a_foreign_redb_database_is_refused() {
    let dir = TempDir::new("foreign");
    {
        let db = redb::Database::create(dir.file()).unwrap_or_else(|e| panic!("{e}"));
        let tx = db.begin_write().unwrap_or_else(|e| panic!("{e}"));
        {
            let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("accounts");
            let mut t = tx.open_table(def).unwrap_or_else(|e| panic!("{e}"));
            t.insert("alice", 5).unwrap_or_else(|e| panic!("{e}"));
        }
        tx.commit().unwrap_or_else(|e| panic!("{e}"));
    }
    let e = open_err(dir.path());
    assert!(matches!(e, RedbError::Foreign { .. }), "{e}");
    // Refusing it changed nothing: the foreign table is still there alone.
    let db = redb::Database::create(dir.file()).unwrap_or_else(|e| panic!("{e}"));
    let tx = redb::ReadableDatabase::begin_read(&db).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<String> = tx
        .list_tables()
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|t| redb::TableHandle::name(&t).to_string())
        .collect();
    assert_eq!(names, ["accounts"]);
}

/// A file cut short (a copy gone wrong) opens as an error or as a
/// database redb repaired, never with a panic.
#[test]
fn truncated_files_do_not_panic() {
    let dir = TempDir::new("truncated");
    testing::populate::<Redb>(dir.path());
    let full = std::fs::read(dir.file()).unwrap_or_else(|e| panic!("{e}"));
    for cut in [full.len() / 2, full.len() / 4, 600, 100, 0] {
        let d = TempDir::new("cut");
        std::fs::write(d.file(), &full[..cut]).unwrap_or_else(|e| panic!("{e}"));
        if let Ok(s) = RedbStorage::open(d.path()) {
            // Whatever survived, the shard opens or reports an error.
            let _ = s.open_shard(0).map(drop);
        }
    }
}
