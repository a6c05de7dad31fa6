//! Helpers shared by the integration tests: a crashable file backend and
//! the [`Backend`] the shared test bodies of `fusee_storage_kv::testing`
//! run against.

#![allow(dead_code)] // each test file uses a part

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fusee_storage_kv::testing::{Backend, Rows, Table};
use fusee_storage_redb::layout::{
    self, FORMAT, FORMAT_KEY, INDEX, INDEX_VALUE, LOG, META, STORE, index_key, seq_key,
};
use fusee_storage_redb::{Create, DurableFile, FILE_NAME, RedbOptions, RedbStorage};
use redb::{ReadableDatabase, StorageBackend};

/// A file backend that refuses every write once its process "crashed".
#[derive(Debug)]
pub(crate) struct Crashable {
    file: DurableFile,
    dead: Arc<AtomicBool>,
}

impl Crashable {
    fn check(&self) -> std::io::Result<()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("the process crashed"));
        }
        Ok(())
    }
}

impl StorageBackend for Crashable {
    fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.check()?;
        self.file.set_len(len)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        self.check()?;
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.check()?;
        self.file.write(offset, data)
    }

    fn close(&self) -> std::io::Result<()> {
        self.file.close()
    }
}

/// Opens the storage in `dir` (created if missing) on a [`Crashable`]
/// file backend; returns it with its kill switch.
pub(crate) fn open_crashable(dir: &Path) -> (RedbStorage, Arc<AtomicBool>) {
    open_crashable_with(dir, &RedbOptions::default())
}

/// [`open_crashable`] with `options`.
pub(crate) fn open_crashable_with(
    dir: &Path,
    options: &RedbOptions,
) -> (RedbStorage, Arc<AtomicBool>) {
    let dead = Arc::<AtomicBool>::default();
    let switch = Arc::clone(&dead);
    let storage =
        RedbStorage::open_wrapped(dir, options, move |file| Crashable { file, dead: switch })
            .unwrap_or_else(|e| panic!("open {dir:?}: {e}"));
    (storage, dead)
}

/// A temporary directory, removed on drop.
pub(crate) struct TempDir(fusee_storage_kv::testing::TempDir);

impl TempDir {
    /// A new empty directory named after `name`, the process and a counter.
    pub(crate) fn new(name: &str) -> Self {
        Self(fusee_storage_kv::testing::TempDir::new("redb", name))
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.0.0
    }

    /// The database file inside.
    pub(crate) fn file(&self) -> PathBuf {
        self.0.0.join(FILE_NAME)
    }
}

/// The redb backend for the shared test bodies: crashes flip the kill
/// switch of a [`Crashable`] file backend.
#[derive(Default)]
pub(crate) struct Redb {
    dead: Arc<AtomicBool>,
}

fn db(dir: &Path) -> redb::Database {
    redb::Database::create(dir.join(FILE_NAME)).unwrap_or_else(|e| panic!("raw open: {e}"))
}

fn key<const N: usize>(key: &[u8]) -> [u8; N] {
    key.try_into()
        .unwrap_or_else(|_| panic!("a {N}-byte key, not {key:?}"))
}

impl Backend for Redb {
    type S = RedbStorage;
    const NAME: &'static str = "redb";
    const ENV: &'static str = "REDB";
    const UNSYNCED_SURVIVE_CRASH: bool = false;
    const FORMAT_VERSION: u32 = layout::FORMAT_VERSION;
    const FLIP_ROUNDS: u64 = 40;
    const FLIP_BITS: u64 = 5;
    const FLIP_FRAME_LEN: usize = 3000;

    fn open(dir: &Path) -> fusee_storage::Result<RedbStorage> {
        RedbStorage::open(dir)
    }

    fn open_existing(dir: &Path) -> fusee_storage::Result<RedbStorage> {
        let mut options = RedbOptions::default();
        options.create = Create::Never;
        RedbStorage::open_with(dir, &options)
    }

    fn database(dir: &Path) -> PathBuf {
        dir.join(FILE_NAME)
    }

    fn empty_database(dir: &Path) {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(FILE_NAME))
            .unwrap_or_else(|e| panic!("{e}"));
        file.set_len(0).unwrap_or_else(|e| panic!("{e}"));
    }

    fn open_crashable(&mut self, dir: &Path) -> RedbStorage {
        let (s, dead) = open_crashable(dir);
        self.dead = dead;
        s
    }

    fn crash(&mut self, s: RedbStorage) {
        self.dead.store(true, Ordering::SeqCst);
        drop(s);
    }

    fn format_value() -> [u8; 12] {
        layout::format_value()
    }

    fn set_marker(dir: &Path, value: &[u8]) {
        let db = db(dir);
        let tx = db.begin_write().unwrap_or_else(|e| panic!("{e}"));
        {
            let mut t = tx.open_table(FORMAT).unwrap_or_else(|e| panic!("{e}"));
            t.insert(FORMAT_KEY, value)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        tx.commit().unwrap_or_else(|e| panic!("{e}"));
    }

    fn raw_delete_meta(dir: &Path, k: &[u8]) {
        let db = db(dir);
        let tx = db.begin_write().unwrap_or_else(|e| panic!("{e}"));
        {
            let mut t = tx.open_table(META).unwrap_or_else(|e| panic!("{e}"));
            t.remove(key::<5>(k)).unwrap_or_else(|e| panic!("{e}"));
        }
        tx.commit().unwrap_or_else(|e| panic!("{e}"));
    }

    fn raw_get(dir: &Path, table: Table, k: &[u8]) -> Option<Vec<u8>> {
        let db = db(dir);
        let tx = db.begin_read().unwrap_or_else(|e| panic!("{e}"));
        match table {
            Table::Log | Table::Store => {
                let def = if table == Table::Log { LOG } else { STORE };
                let t = tx.open_table(def).unwrap_or_else(|e| panic!("{e}"));
                t.get(key::<12>(k))
                    .unwrap_or_else(|e| panic!("{e}"))
                    .map(|v| v.value().to_vec())
            }
            Table::Index => {
                let t = tx.open_table(INDEX).unwrap_or_else(|e| panic!("{e}"));
                t.get(key::<16>(k))
                    .unwrap_or_else(|e| panic!("{e}"))
                    .map(|v| v.value().to_vec())
            }
            Table::Meta => {
                let t = tx.open_table(META).unwrap_or_else(|e| panic!("{e}"));
                t.get(key::<5>(k))
                    .unwrap_or_else(|e| panic!("{e}"))
                    .map(|v| v.value().to_vec())
            }
        }
    }

    fn raw_put(dir: &Path, table: Table, k: &[u8], value: &[u8]) {
        let db = db(dir);
        let tx = db.begin_write().unwrap_or_else(|e| panic!("{e}"));
        match table {
            Table::Log | Table::Store => {
                let def = if table == Table::Log { LOG } else { STORE };
                let mut t = tx.open_table(def).unwrap_or_else(|e| panic!("{e}"));
                t.insert(key::<12>(k), value)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            Table::Index => {
                let mut t = tx.open_table(INDEX).unwrap_or_else(|e| panic!("{e}"));
                let v: [u8; INDEX_VALUE] = key(value);
                t.insert(key::<16>(k), v).unwrap_or_else(|e| panic!("{e}"));
            }
            Table::Meta => {
                let mut t = tx.open_table(META).unwrap_or_else(|e| panic!("{e}"));
                t.insert(key::<5>(k), value)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
        tx.commit().unwrap_or_else(|e| panic!("{e}"));
    }

    fn raw_rows(dir: &Path, shard: u32) -> Rows {
        let db = db(dir);
        let tx = db.begin_read().unwrap_or_else(|e| panic!("{e}"));
        let seq = |def| {
            let t = tx.open_table(def).unwrap_or_else(|e| panic!("{e}"));
            t.range(seq_key(shard, 0)..=seq_key(shard, u64::MAX))
                .unwrap_or_else(|e| panic!("{e}"))
                .count()
        };
        let (log, frames) = (seq(LOG), seq(STORE));
        let t = tx.open_table(INDEX).unwrap_or_else(|e| panic!("{e}"));
        let index = t
            .range(index_key(shard, 0, 0)..=index_key(shard, u32::MAX, u64::MAX))
            .unwrap_or_else(|e| panic!("{e}"))
            .count();
        Rows { log, frames, index }
    }

    fn fail_next_flush(s: &RedbStorage, shard: u32) {
        s.fail_next_flush(shard);
    }

    fn fail_next_commit(s: &RedbStorage, shard: u32) {
        s.fail_next_commit(shard);
    }

    fn fail_next_base_write(s: &RedbStorage, shard: u32) {
        s.fail_next_base_write(shard);
    }

    fn crash_in_commit(s: &RedbStorage, shard: u32, step: u32) {
        s.crash_in_commit(shard, step);
    }
}
