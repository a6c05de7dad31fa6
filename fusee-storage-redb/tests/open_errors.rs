//! Opening files that are not (or no longer) a healthy Fusee redb storage:
//! every case is a named error of the vocabulary, never a panic and never
//! silent data.
//!
//! The open-error tests both key-value backends share (identity markers,
//! format rows, locks in this and another process, damaged values, bit
//! flips) run from `conformance.rs` (`kv_suite!`); these are redb's own.

mod common;
use common::{Redb, TempDir};

use fusee_storage::{Storage, StorageError};
use fusee_storage_kv::testing;
use fusee_storage_redb::{FILE_NAME, RedbStorage};

/// Random bytes and text in place of a store's database file:
/// `CorruptFile` naming the file. Seed: `FUSEE_REDB_SEED`.
#[test]
fn garbage_database_files_are_corrupt() {
    let seed = testing::env_or("REDB", "SEED", 0x5EED);
    let mut rng = fastrand::Rng::with_seed(seed);
    let text = "just some text\n".repeat(1000).into_bytes();
    for len in [1usize, 9, 100, 4096, 70_000, 0] {
        let dir = TempDir::new("garbage");
        testing::populate::<Redb>(dir.path());
        let mut bytes = vec![0u8; len];
        rng.fill(&mut bytes);
        let bytes = if len == 0 { text.clone() } else { bytes };
        std::fs::write(dir.file(), &bytes).unwrap_or_else(|e| panic!("write: {e}"));
        match RedbStorage::open(dir.path()) {
            Err(StorageError::CorruptFile { file, .. }) => {
                assert!(
                    file.ends_with(FILE_NAME),
                    "the error names the file: {file}"
                );
            }
            Err(e) => panic!("seed {seed}, {len} random bytes: expected CorruptFile, found {e:?}"),
            Ok(_) => panic!("seed {seed}, {len} random bytes: opened"),
        }
    }
}

/// A redb database of another program in place of a store's database:
/// `CorruptFile` (no Fusee format table), and refusing it changes nothing.
#[test]
fn a_foreign_redb_database_is_corrupt() {
    let dir = TempDir::new("foreign");
    testing::populate::<Redb>(dir.path());
    std::fs::remove_file(dir.file()).unwrap_or_else(|e| panic!("{e}"));
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
    let e = testing::open_err::<Redb>(dir.path());
    assert!(matches!(e, StorageError::CorruptFile { .. }), "{e:?}");
    let db = redb::Database::create(dir.file()).unwrap_or_else(|e| panic!("{e}"));
    let tx = redb::ReadableDatabase::begin_read(&db).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<String> = tx
        .list_tables()
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|t| redb::TableHandle::name(&t).to_string())
        .collect();
    assert_eq!(names, ["accounts"]);
}

/// A file cut short opens as an error or as exactly what was committed,
/// never with a panic; cut below redb's header, or with the store closed
/// cleanly, it is `CorruptFile`.
#[test]
fn truncated_files_are_corrupt() {
    let dir = TempDir::new("truncated");
    testing::populate::<Redb>(dir.path());
    let full = std::fs::read(dir.file()).unwrap_or_else(|e| panic!("{e}"));
    for cut in [full.len() / 2, full.len() / 4, 600, 100, 0] {
        let d = TempDir::new("cut");
        testing::populate::<Redb>(d.path());
        std::fs::write(d.file(), &full[..cut]).unwrap_or_else(|e| panic!("{e}"));
        match RedbStorage::open(d.path()) {
            Err(StorageError::CorruptFile { .. }) => {}
            Err(e) => panic!("cut at {cut}: expected CorruptFile, found {e:?}"),
            Ok(s) => panic!("cut at {cut}: opened with shards {:?}", s.shards()),
        }
    }
}
