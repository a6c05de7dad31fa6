//! [`RocksStorage`]: opening the database, checking its format, opening
//! shards (with the cleanup that rolls a shard back to its last commit), and
//! the state the parts share.

use std::path::Path;
use std::sync::Arc;

use fusee_storage::identity::Create;
use fusee_storage::{Result, ShardParts, Storage, StorageError};
use fusee_storage_kv::store_dir::{self, Database as Found, Held};
use fusee_storage_kv::{
    ShardEngine, ShardState, Shared, check_format_row, check_meta_row, shard_parts,
};
use rocksdb::{ColumnFamily, ColumnFamilyDescriptor, DB, ReadOptions, WriteBatch, WriteOptions};

use crate::error::{RocksError, corruption, engine};
use crate::layout::{
    self, FAMILIES, FORMAT_KEY, FORMAT_MAGIC, FORMAT_VERSION, INDEX, LOG, META, STORE, TAG_COMMIT,
    TAG_LOG, index_end, index_key, index_shard_end, meta_key, seq_end, seq_key,
};
use crate::{NAMES, RocksCheckpoint, RocksLog, RocksRuns, options};

/// The database directory's name inside the storage's directory.
pub const DIR_NAME: &str = "fusee.rocksdb";

/// How many points inside a commit [`RocksStorage::crash_in_commit`] can
/// crash at: 0 before the write batch is built, 1 with it built but not
/// written, 2 after it was written and synced, before the commit returns.
pub const COMMIT_CRASH_POINTS: u32 = fusee_storage_kv::COMMIT_CRASH_POINTS;

/// Every shard of a storage in one RocksDB database, the directory
/// `fusee.rocksdb` in the storage's directory. See the crate documentation
/// for the layout, the options and what a crash can do.
pub struct RocksStorage {
    shared: Arc<Shared<Held<DB>>>,
}

/// The backend's name in the directory's identity marker.
pub const BACKEND: &str = "rocksdb";

/// How [`RocksStorage::open_with`] opens a storage.
/// `RocksOptions::default()` is what [`RocksStorage::open`] uses; the
/// RocksDB options themselves, each with its reason, are in
/// [`crate::options`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RocksOptions {
    /// Whether a missing store is created (default [`Create::IfMissing`])
    /// or refused ([`Create::Never`]), and why one would choose either:
    /// [`fusee_storage_kv::store_dir::claim`].
    pub create: Create,
    /// Memtable bytes of each column family (default
    /// [`options::WRITE_BUFFER`], 32 MiB): a record of up to 64 MiB passes
    /// through memtables of this size; larger ones mean fewer, larger
    /// flushes.
    pub write_buffer: usize,
    /// Memtable bytes of all column families together (default
    /// [`options::DB_WRITE_BUFFER`], 128 MiB): the memory all shards'
    /// writes may take before RocksDB flushes.
    pub db_write_buffer: usize,
    /// WAL bytes kept before RocksDB flushes the column families pinning
    /// the oldest WAL file (default [`options::MAX_TOTAL_WAL`], 256 MiB):
    /// bounds the WAL on disk and the replay after a crash.
    pub max_total_wal: u64,
    /// Background flush and compaction jobs (default 2): an embedded
    /// storage shares its machine with the engine's own threads.
    pub background_jobs: i32,
}

impl Default for RocksOptions {
    fn default() -> Self {
        Self {
            create: Create::IfMissing,
            write_buffer: options::WRITE_BUFFER,
            db_write_buffer: options::DB_WRITE_BUFFER,
            max_total_wal: options::MAX_TOTAL_WAL,
            background_jobs: 2,
        }
    }
}

impl std::fmt::Debug for RocksStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksStorage")
            .field("path", &self.shared.path())
            .finish_non_exhaustive()
    }
}

/// One open of one shard on RocksDB.
pub(crate) type ShardHandle = fusee_storage_kv::ShardHandle<Held<DB>>;

/// One open of one shard on RocksDB: the engine under [`RocksLog`],
/// [`RocksRuns`] and [`RocksCheckpoint`] (each holds a clone). Opaque: made
/// by [`RocksStorage`]'s `open_shard` only; dropping the last clone releases
/// the shard for the next open.
#[derive(Clone)]
pub struct RocksShard(pub(crate) Arc<ShardHandle>);

impl ShardEngine for RocksShard {
    fn shard(&self) -> u32 {
        self.0.id()
    }

    fn check_open(&self, what: &'static str) -> Result<()> {
        self.0.check_open(what)
    }
}

impl std::fmt::Debug for RocksShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RocksShard").field(&self.0.id()).finish()
    }
}

/// Column family `name` of `db`. Opening checked that every family exists,
/// so a miss is reported, not assumed away.
pub(crate) fn family<'a>(db: &'a DB, name: &'static str) -> Result<&'a ColumnFamily> {
    db.cf_handle(name).ok_or_else(|| {
        RocksError::Engine {
            context: format!("looking up column family {name}"),
            detail: "the column family is missing".into(),
        }
        .into()
    })
}

/// A raw iterator over keys `start..end` of `cf`, positioned at the first.
pub(crate) fn range<'a>(
    db: &'a DB,
    cf: &ColumnFamily,
    start: &[u8],
    end: &[u8],
) -> rocksdb::DBRawIteratorWithThreadMode<'a, DB> {
    let mut ro = ReadOptions::default();
    ro.set_iterate_upper_bound(end.to_vec());
    let mut it = db.raw_iterator_cf_opt(cf, ro);
    it.seek(start);
    it
}

/// Whether `cf` holds any key in `start..end`.
fn any_in(db: &DB, cf: &ColumnFamily, start: &[u8], end: &[u8]) -> Result<bool> {
    if start >= end {
        return Ok(false);
    }
    let it = range(db, cf, start, end);
    let found = it.valid();
    it.status()
        .map_err(|e| engine("looking for leftover rows", e))?;
    Ok(found)
}

/// Writes `batch`, synced (durable when this returns) or not.
pub(crate) fn write(db: &DB, batch: WriteBatch, sync: bool, doing: String) -> Result<()> {
    let mut wo = WriteOptions::default();
    wo.set_sync(sync);
    db.write_opt(batch, &wo).map_err(|e| engine(doing, e))
}

/// What the parts do with RocksDB through their shard's handle.
pub(crate) trait RocksOps {
    /// `doing`, naming the shard, for error contexts.
    fn doing(&self, doing: &str) -> String;

    /// An error for a RocksDB failure while `doing`.
    fn err(&self, doing: &str) -> impl FnOnce(rocksdb::Error) -> StorageError + use<Self> {
        let context = self.doing(doing);
        move |e| engine(context, e)
    }

    /// Writes `batch` for this shard, synced or not.
    fn write(&self, db: &DB, batch: WriteBatch, sync: bool, doing: &str) -> Result<()> {
        write(db, batch, sync, self.doing(doing))
    }
}

impl RocksOps for ShardHandle {
    fn doing(&self, doing: &str) -> String {
        format!("{doing} (shard {})", self.id())
    }
}

impl RocksStorage {
    /// Opens the storage in directory `dir`, creating it (directory, marker
    /// and database) if there is none: [`RocksStorage::open_with`] with the
    /// default [`RocksOptions`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, &RocksOptions::default())
    }

    /// Opens the storage in directory `dir` as `options` say.
    ///
    /// The directory is claimed first, with the errors of
    /// [`fusee_storage_kv::store_dir::claim`] (`NotAStore`,
    /// `WrongBackend`, `UnsupportedFormat`, `NotFound`, `Locked` while
    /// another storage on it or a part one gave out lives). Then the
    /// database: a missing or emptied database directory, a missing
    /// `CURRENT`, damaged files RocksDB refuses, or column families that
    /// are not Fusee's are [`StorageError::CorruptFile`] naming the
    /// directory or the file, never a new, empty database; another layout
    /// version in its format row is [`StorageError::UnsupportedFormat`].
    /// Never panics on a bad database.
    pub fn open_with(dir: impl AsRef<Path>, options: &RocksOptions) -> Result<Self> {
        let dir = dir.as_ref();
        let (lock, found) =
            store_dir::claim(dir, BACKEND, FORMAT_VERSION, options.create, DIR_NAME)?;
        let path = match found {
            Found::Existing(path) => path,
            Found::New(staged) => {
                create_database(staged.path(), options)?;
                staged.publish()?
            }
        };
        let db = open_database(&path, options)?;
        check_format(&db, &path)?;
        Ok(Self {
            shared: Arc::new(Shared::new(path, Held::new(db, lock))),
        })
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        self.shared.path()
    }

    /// The next [`fusee_storage::LogStore::flush`] of `shard` fails with an
    /// I/O error before writing anything; the log part is latched. For
    /// tests of the failure paths.
    pub fn fail_next_flush(&self, shard: u32) {
        self.shared.faults().arm_flush(shard);
    }

    /// The next [`fusee_storage::CheckpointStore::commit`] of `shard` fails
    /// with an I/O error before writing anything; its checkpoint and
    /// run-store parts are latched. For tests of the failure paths.
    pub fn fail_next_commit(&self, shard: u32) {
        self.shared.faults().arm_commit(shard);
    }

    /// The next write of a streamed index base of `shard` (a spill from
    /// [`fusee_storage::CheckpointStore::base_chunk`], or clearing an
    /// abandoned base in [`fusee_storage::CheckpointStore::begin_base`])
    /// fails with an I/O error before changing anything; the checkpoint
    /// part is latched. For tests of the failure paths.
    pub fn fail_next_base_write(&self, shard: u32) {
        self.shared.faults().arm_base_write(shard);
    }

    /// The next commit of `shard` stops at point `step` of
    /// [`COMMIT_CRASH_POINTS`] as if the process died there: 0 before the
    /// write batch is built, 1 with it built but never written, 2 after it
    /// was written and synced. The commit returns an I/O error and latches
    /// its parts; the caller then drops the storage without closing it. For
    /// crash tests.
    pub fn crash_in_commit(&self, shard: u32, step: u32) {
        self.shared.faults().arm_crash(shard, step);
    }
}

/// Whether a RocksDB open error says its own `LOCK` file is held (by a
/// program that is not a Fusee storage: those are kept away by the
/// directory's lock).
fn is_lock_error(message: &str) -> bool {
    message.contains("/LOCK") || message.contains("lock hold") || message.contains("While lock")
}

/// The error for a failed open of the database at `path`: locked, damaged
/// (RocksDB found a checksum or format check failing, or a file it needs
/// missing), or an I/O error.
fn open_error(path: &Path, e: rocksdb::Error) -> StorageError {
    let kind = e.kind();
    let detail = e.into_string();
    if is_lock_error(&detail) {
        return StorageError::Locked {
            path: path.display().to_string(),
        };
    }
    match kind {
        rocksdb::ErrorKind::IOError if !detail.contains("No such file") => StorageError::Io {
            context: format!("opening {}", path.display()),
            error: std::io::Error::other(detail),
        },
        rocksdb::ErrorKind::Corruption => corruption(
            &path.display().to_string(),
            &detail,
            "RocksDB found it damaged",
        ),
        _ => corruption(
            &path.display().to_string(),
            &detail,
            "RocksDB refused to open it (files missing, damaged or not RocksDB's)",
        ),
    }
}

/// Builds a new database at `path`: every column family and the format
/// row, synced, then closed.
fn create_database(path: &Path, options: &RocksOptions) -> Result<()> {
    let mut opts = options::db_options(options);
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    let descriptors = FAMILIES
        .iter()
        .map(|f| ColumnFamilyDescriptor::new(*f, options::family_options(f, options)));
    let db = DB::open_cf_descriptors(&opts, path, descriptors).map_err(|e| open_error(path, e))?;
    let mut batch = WriteBatch::default();
    batch.put_cf(family(&db, META)?, FORMAT_KEY, layout::format_value());
    write(&db, batch, true, format!("creating {}", path.display()))
}

/// Opens the existing database at `path` with exactly Fusee's column
/// families. A directory without `CURRENT` (emptied, or never a RocksDB
/// database) is refused before RocksDB is asked, since RocksDB would start
/// a new database in it.
fn open_database(path: &Path, options: &RocksOptions) -> Result<DB> {
    let current = path.join("CURRENT");
    let exists = current
        .try_exists()
        .map_err(|e| StorageError::io(format!("looking for {}", current.display()), e))?;
    if !exists {
        return Err(StorageError::CorruptFile {
            file: current.display().to_string(),
            what: "RocksDB's CURRENT file is missing (the database was emptied or damaged)",
            at: 0,
        });
    }
    let opts = options::db_options(options);
    let families = DB::list_cf(&opts, path).map_err(|e| open_error(path, e))?;
    let mut sorted: Vec<&str> = families.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    let mut ours = FAMILIES;
    ours.sort_unstable();
    if sorted != ours {
        return Err(StorageError::CorruptFile {
            file: path.display().to_string(),
            what: "its column families are not Fusee's",
            at: 0,
        });
    }
    let descriptors = FAMILIES
        .iter()
        .map(|f| ColumnFamilyDescriptor::new(*f, options::family_options(f, options)));
    DB::open_cf_descriptors(&opts, path, descriptors).map_err(|e| open_error(path, e))
}

/// Checks the format row (this layout version,
/// [`StorageError::UnsupportedFormat`] otherwise; missing or foreign:
/// [`StorageError::CorruptFile`]) and every meta row
/// ([`fusee_storage_kv::check_meta_row`]: a row whose key was damaged
/// fails here, for every shard, rather than leave its shard looking new).
fn check_format(db: &DB, path: &Path) -> Result<()> {
    let doing = || format!("checking the format of {}", path.display());
    let meta = family(db, META)?;
    let row = db
        .get_pinned_cf(meta, FORMAT_KEY)
        .map_err(|e| engine(doing(), e))?;
    check_format_row(row.as_deref(), FORMAT_MAGIC, path)?;
    let mut it = db.raw_iterator_cf(meta);
    it.seek_to_first();
    while let (Some(key), Some(value)) = (it.key(), it.value()) {
        if key != FORMAT_KEY {
            check_meta_row(key, value, &NAMES)?;
        }
        it.next();
    }
    it.status().map_err(|e| engine(doing(), e))
}

impl Storage for RocksStorage {
    type Log = RocksLog;
    type Runs = RocksRuns;
    type Checkpoint = RocksCheckpoint;

    fn open_shard(&self, shard: u32) -> Result<ShardParts<Self>> {
        const WHAT: &str = "rocksdb storage";
        let db = self.shared.db(WHAT)?;
        // From here on, dropping the handle releases the shard on any error.
        let handle = Arc::new(self.shared.claim(shard)?);
        let state = recover_shard(&handle, &db)?;
        Ok(shard_parts(RocksShard(handle), &state, &NAMES))
    }

    fn shards(&self) -> Result<Vec<u32>> {
        let db = self.shared.db("rocksdb storage")?;
        list_shards(&db)
    }

    fn close(&self) -> Result<()> {
        // Everything a flush or commit reported is already synced (in the
        // WAL). A clean close also moves it into table files, whose blocks
        // RocksDB checksums on every read and whose loss its manifest
        // notices: the WAL of a closed store then holds nothing, and
        // damage to it loses nothing (damage to a WAL RocksDB must replay
        // is indistinguishable from a torn tail; see the crate docs).
        let flushed = match self.shared.db("rocksdb storage") {
            Ok(db) => flush_all(&db, self.path()),
            Err(_) => Ok(()),
        };
        // Dropping our reference closes the database once in-flight calls
        // end, whether or not the flush succeeded.
        self.shared.close();
        flushed
    }
}

/// Flushes every column family's memtables into table files and waits.
fn flush_all(db: &DB, path: &Path) -> Result<()> {
    let families = FAMILIES
        .iter()
        .map(|name| family(db, name))
        .collect::<Result<Vec<_>>>()?;
    let mut options = rocksdb::FlushOptions::default();
    options.set_wait(true);
    db.flush_cfs_opt(&families, &options)
        .map_err(|e| engine(format!("flushing {} at close", path.display()), e))
}

/// Every shard with a log row, ascending.
fn list_shards(db: &DB) -> Result<Vec<u32>> {
    let meta = family(db, META)?;
    let mut it = db.raw_iterator_cf(meta);
    it.seek_to_first();
    let mut shards = Vec::new();
    while let Some(key) = it.key() {
        if let Some((shard, TAG_LOG)) = layout::meta_of(key) {
            shards.push(shard);
        }
        it.next();
    }
    it.status().map_err(|e| engine("listing shards", e))?;
    Ok(shards)
}

/// Rolls `shard` back to its last commit in one synced write batch,
/// deleting what [`fusee_storage_kv::Cleanup`] names (store frames at or
/// past the committed position, index rows of other generations, log
/// records past the last flushed LSN), whatever made them durable: a later
/// synced batch of any shard, or RocksDB replaying its WAL after a crash;
/// creates the log row of a new shard. Returns the shard's rows.
fn recover_shard(h: &ShardHandle, db: &DB) -> Result<ShardState> {
    let shard = h.id();
    let doing = "opening the shard";
    let meta = family(db, META)?;
    let log = db
        .get_pinned_cf(meta, meta_key(shard, TAG_LOG))
        .map_err(h.err(doing))?;
    let commit = db
        .get_pinned_cf(meta, meta_key(shard, TAG_COMMIT))
        .map_err(h.err(doing))?;
    let state = ShardState::decode(log.as_deref(), commit.as_deref(), shard, &NAMES)?;
    let mut stray_meta = false;
    {
        let mut end = meta_key(shard, u8::MAX).to_vec();
        end.push(0);
        let mut it = range(db, meta, &meta_key(shard, 0), &end);
        while let Some(key) = it.key() {
            stray_meta |= layout::meta_of(key).is_some_and(|(_, tag)| !layout::known_tag(tag));
            it.next();
        }
        it.status().map_err(h.err(doing))?;
    }
    let holds_rows = || -> Result<bool> {
        Ok(
            any_in(db, family(db, LOG)?, &seq_key(shard, 0), &seq_end(shard))?
                || any_in(db, family(db, STORE)?, &seq_key(shard, 0), &seq_end(shard))?
                || any_in(
                    db,
                    family(db, INDEX)?,
                    &index_key(shard, 0, 0),
                    &index_shard_end(shard),
                )?,
        )
    };
    state.check_keys(stray_meta, holds_rows, shard, &NAMES)?;
    // Before the cleanup batch: a log row that ends before the shard's
    // seal (a WAL damaged before its replay) is lost data, not a torn tail.
    let state = h.check_seal(state)?;
    let mut batch = WriteBatch::default();
    if state.new_log {
        batch.put_cf(meta, meta_key(shard, TAG_LOG), state.log.encode(shard));
    }
    let cleanup = state.cleanup();
    let generation = cleanup.keep_generation;
    // A range deletion only where there is something to delete: tombstones
    // cost every later read of the range.
    let mut cut = |name: &'static str, start: &[u8], end: &[u8]| -> Result<()> {
        let cf = family(db, name)?;
        if any_in(db, cf, start, end)? {
            batch.delete_range_cf(cf, start, end);
        }
        Ok(())
    };
    cut(STORE, &seq_key(shard, cleanup.frames_from), &seq_end(shard))?;
    cut(
        INDEX,
        &index_key(shard, 0, 0),
        &index_key(shard, generation, 0),
    )?;
    cut(
        INDEX,
        &index_end(shard, generation),
        &index_shard_end(shard),
    )?;
    if let Some(from) = cleanup.log_from {
        cut(LOG, &seq_key(shard, from), &seq_end(shard))?;
    }
    if !batch.is_empty() {
        h.write(db, batch, true, doing)?;
    }
    Ok(state)
}
