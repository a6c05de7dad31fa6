//! Helpers shared by the integration tests: raw access to the database and
//! the [`Backend`] the shared test bodies of `fusee_storage_kv::testing`
//! run against.

#![allow(dead_code)] // each test file uses a part

use std::path::{Path, PathBuf};

use fusee_storage_kv::testing::{Backend, Rows, Table};
use fusee_storage_rocksdb::layout::{
    self, FAMILIES, FORMAT_KEY, INDEX, LOG, META, STORE, index_key, index_shard_end, seq_end,
    seq_key,
};
use fusee_storage_rocksdb::{Create, DIR_NAME, RocksOptions, RocksStorage};

/// A temporary directory, removed on drop.
pub(crate) struct TempDir(fusee_storage_kv::testing::TempDir);

impl TempDir {
    /// A new empty directory named after `name`, the process and a counter.
    pub(crate) fn new(name: &str) -> Self {
        Self(fusee_storage_kv::testing::TempDir::new("rocksdb", name))
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.0.0
    }

    /// The database directory inside.
    pub(crate) fn db(&self) -> PathBuf {
        self.0.0.join(DIR_NAME)
    }
}

/// Opens the database in `db` directly (the storage must be dropped).
pub(crate) fn raw_open(db: &Path) -> rocksdb::DB {
    let options = RocksOptions::default();
    let opts = fusee_storage_rocksdb::options::db_options(&options);
    let families = FAMILIES.iter().map(|f| {
        rocksdb::ColumnFamilyDescriptor::new(
            *f,
            fusee_storage_rocksdb::options::family_options(f, &options),
        )
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

fn family(table: Table) -> &'static str {
    match table {
        Table::Log => LOG,
        Table::Store => STORE,
        Table::Index => INDEX,
        Table::Meta => META,
    }
}

/// The RocksDB backend for the shared test bodies: a crash is dropping the
/// storage without closing it (what was written without `sync` is in the
/// WAL file, as after a real process crash).
#[derive(Default)]
pub(crate) struct Rocks;

impl Backend for Rocks {
    type S = RocksStorage;
    const NAME: &'static str = "rocksdb";
    const ENV: &'static str = "ROCKSDB";
    const UNSYNCED_SURVIVE_CRASH: bool = true;
    const FORMAT_VERSION: u32 = layout::FORMAT_VERSION;
    const FLIP_ROUNDS: u64 = 30;
    const FLIP_BITS: u64 = 3;
    const FLIP_FRAME_LEN: usize = 5000;

    fn open(dir: &Path) -> fusee_storage::Result<RocksStorage> {
        RocksStorage::open(dir)
    }

    fn open_existing(dir: &Path) -> fusee_storage::Result<RocksStorage> {
        let mut options = RocksOptions::default();
        options.create = Create::Never;
        RocksStorage::open_with(dir, &options)
    }

    fn database(dir: &Path) -> PathBuf {
        dir.join(DIR_NAME)
    }

    fn empty_database(dir: &Path) {
        let db = dir.join(DIR_NAME);
        for entry in std::fs::read_dir(&db).unwrap_or_else(|e| panic!("{e}")) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            std::fs::remove_file(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        }
    }

    fn open_crashable(&mut self, dir: &Path) -> RocksStorage {
        RocksStorage::open(dir).unwrap_or_else(|e| panic!("open {dir:?}: {e}"))
    }

    fn crash(&mut self, s: RocksStorage) {
        drop(s);
    }

    fn format_value() -> [u8; 12] {
        layout::format_value()
    }

    fn set_marker(dir: &Path, value: &[u8]) {
        Self::raw_put(dir, Table::Meta, FORMAT_KEY, value);
    }

    fn raw_get(dir: &Path, table: Table, key: &[u8]) -> Option<Vec<u8>> {
        let db = raw_open(&dir.join(DIR_NAME));
        let cf = db
            .cf_handle(family(table))
            .unwrap_or_else(|| panic!("no {table:?}"));
        db.get_cf(cf, key).unwrap_or_else(|e| panic!("{e}"))
    }

    fn raw_delete_meta(dir: &Path, key: &[u8]) {
        let db = raw_open(&dir.join(DIR_NAME));
        let cf = db
            .cf_handle(family(Table::Meta))
            .unwrap_or_else(|| panic!("no meta family"));
        db.delete_cf(cf, key).unwrap_or_else(|e| panic!("{e}"));
    }

    fn raw_put(dir: &Path, table: Table, key: &[u8], value: &[u8]) {
        let db = raw_open(&dir.join(DIR_NAME));
        let cf = db
            .cf_handle(family(table))
            .unwrap_or_else(|| panic!("no {table:?}"));
        db.put_cf(cf, key, value).unwrap_or_else(|e| panic!("{e}"));
    }

    fn raw_rows(dir: &Path, shard: u32) -> Rows {
        let db = raw_open(&dir.join(DIR_NAME));
        Rows {
            log: count(&db, LOG, &seq_key(shard, 0), &seq_end(shard)),
            frames: count(&db, STORE, &seq_key(shard, 0), &seq_end(shard)),
            index: count(&db, INDEX, &index_key(shard, 0, 0), &index_shard_end(shard)),
        }
    }

    fn fail_next_flush(s: &RocksStorage, shard: u32) {
        s.fail_next_flush(shard);
    }

    fn fail_next_commit(s: &RocksStorage, shard: u32) {
        s.fail_next_commit(shard);
    }

    fn fail_next_base_write(s: &RocksStorage, shard: u32) {
        s.fail_next_base_write(shard);
    }

    fn crash_in_commit(s: &RocksStorage, shard: u32, step: u32) {
        s.crash_in_commit(shard, step);
    }
}
