//! Helpers shared by the integration tests.

#![allow(dead_code)] // each test file uses a part

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use fusee_storage_rocksdb::DIR_NAME;
use fusee_storage_rocksdb::layout::{
    FAMILIES, INDEX, LOG, STORE, index_key, index_shard_end, seq_end, seq_key,
};

/// A temporary directory, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    /// A new empty directory named after `name`, the process and a counter.
    pub(crate) fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fusee-rocksdb-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {dir:?}: {e}"));
        Self(dir)
    }

    /// The database directory inside.
    pub(crate) fn db(&self) -> PathBuf {
        self.0.join(DIR_NAME)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Opens the database in `db` directly (the storage must be dropped).
pub(crate) fn raw_open(db: &std::path::Path) -> rocksdb::DB {
    let opts = fusee_storage_rocksdb::options::db_options();
    let families = FAMILIES.iter().map(|f| {
        rocksdb::ColumnFamilyDescriptor::new(*f, fusee_storage_rocksdb::options::family_options(f))
    });
    rocksdb::DB::open_cf_descriptors(&opts, db, families)
        .unwrap_or_else(|e| panic!("raw open {db:?}: {e}"))
}

/// Counts the keys of `family` in `start..end`.
pub(crate) fn count(db: &rocksdb::DB, family: &str, start: &[u8], end: &[u8]) -> usize {
    let cf = db
        .cf_handle(family)
        .unwrap_or_else(|| panic!("no column family {family}"));
    let mut ro = rocksdb::ReadOptions::default();
    ro.set_iterate_upper_bound(end.to_vec());
    let mut it = db.raw_iterator_cf_opt(cf, ro);
    it.seek(start);
    let mut n = 0;
    while it.valid() {
        n += 1;
        it.next();
    }
    it.status()
        .unwrap_or_else(|e| panic!("iterating {family}: {e}"));
    n
}

/// Rows of `shard` in the log, store and index column families, read from
/// the database directly (the storage must be dropped).
pub(crate) fn raw_rows(db: &std::path::Path, shard: u32) -> (usize, usize, usize) {
    let db = raw_open(db);
    (
        count(&db, LOG, &seq_key(shard, 0), &seq_end(shard)),
        count(&db, STORE, &seq_key(shard, 0), &seq_end(shard)),
        count(&db, INDEX, &index_key(shard, 0, 0), &index_shard_end(shard)),
    )
}
