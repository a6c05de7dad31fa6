//! [`RocksStorage`]: opening the database, checking its format, opening
//! shards (with the cleanup that rolls a shard back to its last commit), and
//! the state the parts share.

use std::path::Path;
use std::sync::Arc;

use fusee_storage::{Result, ShardParts, Storage, StorageError};
use fusee_storage_kv::{ShardEngine, ShardState, Shared, shard_parts};
use rocksdb::{ColumnFamily, ColumnFamilyDescriptor, DB, ReadOptions, WriteBatch, WriteOptions};

use crate::error::{RocksError, engine};
use crate::layout::{
    self, DEFAULT, FAMILIES, FORMAT_KEY, FORMAT_VERSION, INDEX, LOG, META, STORE, TAG_COMMIT,
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
    shared: Arc<Shared<DB>>,
}

impl std::fmt::Debug for RocksStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksStorage")
            .field("path", &self.shared.path())
            .finish_non_exhaustive()
    }
}

/// One open of one shard on RocksDB.
pub(crate) type ShardHandle = fusee_storage_kv::ShardHandle<DB>;

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
    /// Opens the storage in directory `dir` (created if missing), creating
    /// the database `dir/fusee.rocksdb` if it does not exist.
    ///
    /// Errors (as [`StorageError::Backend`] holding a [`RocksError`]):
    /// [`RocksError::Locked`] if another process or storage has the
    /// database open; [`RocksError::NotRocksDb`] for a directory that does
    /// not hold a readable RocksDB database; [`RocksError::Foreign`] for a
    /// RocksDB database that is not a Fusee storage; [`RocksError::NewerFormat`]
    /// for one written by a newer Fusee. Never panics on a bad database.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        fusee_storage::dirs::open_in_dir(dir.as_ref(), DIR_NAME, |path| {
            let db = open_database(path)?;
            Ok(Self {
                shared: Arc::new(Shared::new(path.to_path_buf(), db)),
            })
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

/// Whether a RocksDB open error says the `LOCK` file is held.
fn is_lock_error(message: &str) -> bool {
    message.contains("/LOCK") || message.contains("lock hold") || message.contains("While lock")
}

/// The error for a failed open of the database at `path`.
fn open_error(path: &Path, e: rocksdb::Error) -> StorageError {
    let detail = e.into_string();
    let path = path.to_path_buf();
    if is_lock_error(&detail) {
        RocksError::Locked { path, detail }.into()
    } else {
        RocksError::NotRocksDb { path, detail }.into()
    }
}

/// Opens or creates the database at `path`, checking (or, in a new or empty
/// database, writing) the format marker; creates missing column families of
/// an empty database.
fn open_database(path: &Path) -> Result<DB> {
    let current = path.join("CURRENT");
    let exists = current
        .try_exists()
        .map_err(|e| StorageError::io(format!("looking for {}", current.display()), e))?;
    let families: Vec<String> = if exists {
        DB::list_cf(&options::db_options(), path).map_err(|e| open_error(path, e))?
    } else {
        // RocksDB would create a database next to whatever is there (and
        // replay stray WAL files): a non-empty directory without `CURRENT`
        // is not ours to take.
        if let Ok(mut entries) = std::fs::read_dir(path)
            && entries.next().is_some()
        {
            return Err(RocksError::NotRocksDb {
                path: path.to_path_buf(),
                detail: "the directory is not empty and has no CURRENT file".into(),
            }
            .into());
        }
        FAMILIES.iter().map(|f| f.to_string()).collect()
    };
    let foreign: Vec<&String> = families
        .iter()
        .filter(|f| !FAMILIES.contains(&f.as_str()))
        .collect();
    if !foreign.is_empty() {
        return Err(RocksError::Foreign {
            path: path.to_path_buf(),
            why: format!("column families {foreign:?}"),
        }
        .into());
    }
    let mut opts = options::db_options();
    opts.create_if_missing(!exists);
    opts.create_missing_column_families(!exists);
    let descriptors = families
        .iter()
        .map(|f| ColumnFamilyDescriptor::new(f.as_str(), options::family_options(f)));
    let mut db =
        DB::open_cf_descriptors(&opts, path, descriptors).map_err(|e| open_error(path, e))?;
    check_format(&mut db, path, &families)?;
    Ok(db)
}

/// Checks the format marker; gives an empty database (new, or created by a
/// run that died before writing the marker) our column families and the
/// marker; refuses foreign and newer-format databases.
fn check_format(db: &mut DB, path: &Path, families: &[String]) -> Result<()> {
    let doing = || format!("checking the format of {}", path.display());
    let foreign = |why: &str| -> StorageError {
        RocksError::Foreign {
            path: path.to_path_buf(),
            why: why.into(),
        }
        .into()
    };
    let found = match db.cf_handle(META) {
        Some(meta) => db
            .get_pinned_cf(meta, FORMAT_KEY)
            .map_err(|e| engine(doing(), e))?
            .map(|v| layout::format_version(&v)),
        None => None,
    };
    match found {
        Some(Some(version)) if version <= FORMAT_VERSION => {
            if families.len() != FAMILIES.len() {
                return Err(foreign("a Fusee marker but column families missing"));
            }
            return Ok(());
        }
        Some(Some(found)) => {
            return Err(RocksError::NewerFormat {
                path: path.to_path_buf(),
                found,
                supported: FORMAT_VERSION,
            }
            .into());
        }
        Some(None) => return Err(foreign("a foreign format marker")),
        None => {}
    }
    // No marker: only an empty database may become ours.
    for name in families {
        let Some(cf) = db.cf_handle(name) else {
            continue;
        };
        let mut it = db.raw_iterator_cf(cf);
        it.seek_to_first();
        let any = it.valid();
        it.status().map_err(|e| engine(doing(), e))?;
        if any {
            return Err(foreign(&format!(
                "data in column family {name} without a Fusee marker"
            )));
        }
    }
    for name in FAMILIES {
        if name != DEFAULT && db.cf_handle(name).is_none() {
            db.create_cf(name, &options::family_options(name))
                .map_err(|e| engine(doing(), e))?;
        }
    }
    let mut batch = WriteBatch::default();
    batch.put_cf(family(db, META)?, FORMAT_KEY, layout::format_value());
    write(db, batch, true, doing())
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
        // Dropping our reference closes the database once in-flight calls
        // end. Everything a flush or commit reported is already synced.
        self.shared.close();
        Ok(())
    }
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
    let mut batch = WriteBatch::default();
    if state.new_log {
        batch.put_cf(meta, meta_key(shard, TAG_LOG), state.log.encode());
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
