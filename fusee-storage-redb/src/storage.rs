//! [`RedbStorage`]: opening the database file, checking its format, opening
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
use redb::{Database, Durability, ReadableDatabase, ReadableTable, WriteTransaction};

use crate::error::{RedbError, engine};
use crate::file::{DurableFile, repair_length};
use crate::layout::{
    self, FORMAT, FORMAT_KEY, FORMAT_MAGIC, FORMAT_VERSION, INDEX, LOG, META, STORE, TAG_COMMIT,
    TAG_LOG, index_key, meta_key, seq_key,
};
use crate::{NAMES, RedbCheckpoint, RedbLog, RedbRuns};

/// The database file's name inside the storage's directory.
pub const FILE_NAME: &str = "fusee.redb";

/// How many points inside a commit [`RedbStorage::crash_in_commit`] can
/// crash at: 0 before the transaction, 1 with everything written but not
/// committed, 2 after the commit, before it returns.
pub const COMMIT_CRASH_POINTS: u32 = fusee_storage_kv::COMMIT_CRASH_POINTS;

/// Every shard of a storage in one redb database file, `fusee.redb` in the
/// storage's directory. See the crate documentation for the layout and what
/// a crash can do.
pub struct RedbStorage {
    shared: Arc<Shared<Held<Db>>>,
}

/// The backend's name in the directory's identity marker.
pub const BACKEND: &str = "redb";

/// How [`RedbStorage::open_with`] opens a storage. `RedbOptions::default()`
/// is what [`RedbStorage::open`] uses.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedbOptions {
    /// Whether a missing store is created (default [`Create::IfMissing`])
    /// or refused ([`Create::Never`]), and why one would choose either:
    /// [`fusee_storage_kv::store_dir::claim`].
    pub create: Create,
    /// Bytes of memory redb caches pages in (default 1 GiB, redb's own
    /// default): reads of recent records, frames and index pages are served
    /// from it, and a write transaction's pages wait in its write part
    /// (a tenth of it) until the commit. Smaller saves memory at the price
    /// of reads from the file; the cache fills only as pages are used.
    pub cache_size: usize,
    /// Whether a flush and a commit use redb's two-phase commit (default
    /// `true`). Two-phase: a commit's pages are synced before its commit
    /// slot is written, so a crash never leaves a slot naming pages that
    /// are not on disk, and after an unclean shutdown redb reports damage
    /// to the newest commit's pages or slot as an error
    /// ([`StorageError::CorruptFile`]). One-phase (`false`, redb's own
    /// default): pages and slot are written and synced once, which halves
    /// the syncs of a flush (here 270 µs per flush instead of 470 µs), but
    /// after an unclean shutdown redb must treat a newest commit whose page
    /// checksums fail as one the crash tore, and opens the commit before
    /// it: damage to the pages the newest commit wrote, or to its slot, then
    /// loses that commit without an error. See the crate documentation.
    pub two_phase_commit: bool,
}

impl Default for RedbOptions {
    fn default() -> Self {
        Self {
            create: Create::IfMissing,
            cache_size: 1 << 30,
            two_phase_commit: true,
        }
    }
}

impl std::fmt::Debug for RedbStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStorage")
            .field("path", &self.shared.path())
            .finish_non_exhaustive()
    }
}

/// The open database, closed under a panic shield: redb's shutdown commit
/// walks allocator state that a damaged file can make it trip over, and a
/// panic must not escape a drop.
pub(crate) struct Db {
    db: Option<Database>,
    /// Durable commits use redb's two-phase commit ([`RedbOptions`]).
    two_phase: bool,
}

impl Db {
    /// `Durability::Immediate` commits of this database are two-phase.
    pub(crate) fn two_phase(&self) -> bool {
        self.two_phase
    }
}

impl std::ops::Deref for Db {
    type Target = Database;

    fn deref(&self) -> &Database {
        match &self.db {
            Some(db) => db,
            // Only `drop` empties it.
            None => unreachable!("database used during its drop"),
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(db) = self.db.take() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(db)));
        }
    }
}

/// One open of one shard on redb.
pub(crate) type ShardHandle = fusee_storage_kv::ShardHandle<Held<Db>>;

/// One open of one shard on redb: the engine under [`RedbLog`],
/// [`RedbRuns`] and [`RedbCheckpoint`] (each holds a clone). Opaque: made by
/// [`RedbStorage`]'s `open_shard` only; dropping the last clone releases
/// the shard for the next open.
#[derive(Clone)]
pub struct RedbShard(pub(crate) Arc<ShardHandle>);

impl std::fmt::Debug for RedbShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RedbShard").field(&self.0.id()).finish()
    }
}

impl ShardEngine for RedbShard {
    fn shard(&self) -> u32 {
        self.0.id()
    }

    fn check_open(&self, what: &'static str) -> Result<()> {
        self.0.check_open(what)
    }
}

/// What the parts do with redb through their shard's handle.
pub(crate) trait RedbOps {
    /// The shard.
    fn shard_id(&self) -> u32;

    /// The database, or `Closed { what }` after the storage closed.
    fn database(&self, what: &'static str) -> Result<Arc<Held<Db>>>;

    /// Runs `f`, turning a panic inside redb (it has assertions that damaged
    /// pages can trip) into a `Corrupt` error naming the shard. `f` never
    /// calls a caller's visitor, so no caller panic is swallowed.
    fn shield<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        shield(u64::from(self.shard_id()), f)
    }

    /// Begins a write transaction with `durability` (two-phase if durable
    /// and the database says so).
    fn begin(&self, db: &Db, durability: Durability, doing: &str) -> Result<WriteTransaction> {
        let mut tx = db.begin_write().map_err(self.err(doing))?;
        tx.set_durability(durability).map_err(self.err(doing))?;
        if matches!(durability, Durability::Immediate) && db.two_phase() {
            tx.set_two_phase_commit(true);
        }
        Ok(tx)
    }

    /// Commits `tx`, mapping the error with `doing`.
    fn commit(&self, tx: WriteTransaction, doing: &str) -> Result<()> {
        tx.commit().map_err(self.err(doing))
    }

    /// An error for a redb failure while `doing`.
    fn err<E: Into<redb::Error>>(
        &self,
        doing: &str,
    ) -> impl FnOnce(E) -> StorageError + use<E, Self> {
        let context = format!("{doing} (shard {})", self.shard_id());
        move |e| engine(context, e)
    }

    /// Runs `f` in a write transaction of `durability` and commits it, all
    /// under the panic shield; `Closed { what }` after the storage closed.
    fn transact(
        &self,
        durability: Durability,
        what: &'static str,
        doing: &str,
        f: impl FnOnce(&WriteTransaction) -> Result<()>,
    ) -> Result<()> {
        let db = self.database(what)?;
        self.shield(|| {
            let tx = self.begin(&db, durability, doing)?;
            f(&tx)?;
            self.commit(tx, doing)
        })
    }
}

impl RedbOps for ShardHandle {
    fn shard_id(&self) -> u32 {
        self.id()
    }

    fn database(&self, what: &'static str) -> Result<Arc<Held<Db>>> {
        self.db(what)
    }
}

/// [`ShardHandle::shield`] for `shard` (`u32::MAX + 1` for the whole file).
pub(crate) fn shield<T>(shard: u64, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(Err(
        StorageError::Corrupt {
            what: "redb database (redb panicked on a damaged page) of shard",
            at: shard,
        },
    ))
}

/// [`shield`] for a call about the whole file at `path`: a panic is
/// [`StorageError::CorruptFile`] naming it.
pub(crate) fn shield_file<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(StorageError::CorruptFile {
            file: path.display().to_string(),
            what: "redb panicked reading it (a damaged page)",
            at: 0,
        })
    })
}

impl RedbStorage {
    /// Opens the storage in directory `dir`, creating it (directory, marker
    /// and database) if there is none: [`RedbStorage::open_with`] with the
    /// default [`RedbOptions`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, &RedbOptions::default())
    }

    /// Opens the storage in directory `dir` as `options` say.
    ///
    /// The directory is claimed first, with the errors of
    /// [`fusee_storage_kv::store_dir::claim`] (`NotAStore`,
    /// `WrongBackend`, `UnsupportedFormat`, `NotFound`, `Locked` while
    /// another storage on it or a part one gave out lives). Then the
    /// database file: missing, empty, cut short, not redb, or damaged
    /// beyond redb's repair is [`StorageError::CorruptFile`] naming it,
    /// never a new, empty database; another layout version in its format
    /// table is [`StorageError::UnsupportedFormat`]; one a power cut left
    /// shorter than its header says is extended and opened
    /// ([`crate::file`]). Never panics on a bad file.
    pub fn open_with(dir: impl AsRef<Path>, options: &RedbOptions) -> Result<Self> {
        Self::open_wrapped(dir, options, |file| file)
    }

    /// [`RedbStorage::open_with`], with redb reaching the database file
    /// through `wrap`'s backend around the [`DurableFile`] (a crash switch
    /// in tests, I/O accounting). The wrapper must forward every call.
    pub fn open_wrapped<B: redb::StorageBackend>(
        dir: impl AsRef<Path>,
        options: &RedbOptions,
        wrap: impl FnOnce(DurableFile) -> B,
    ) -> Result<Self> {
        let dir = dir.as_ref();
        let (lock, found) =
            store_dir::claim(dir, BACKEND, FORMAT_VERSION, options.create, FILE_NAME)?;
        let path = match found {
            Found::Existing(path) => path,
            Found::New(staged) => {
                create_database(staged.path(), options)?;
                staged.publish()?
            }
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| StorageError::io(format!("opening {}", path.display()), e))?;
        repair_length(&file, &path)?;
        let file = DurableFile::open(file).map_err(|e| open_error(&path, e))?;
        let db = open_database(&path, options, wrap(file))?;
        shield_file(&path, || check_format(&db, &path))?;
        Ok(Self {
            shared: Arc::new(Shared::new(path, Held::new(db, lock))),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        self.shared.path()
    }

    /// The next [`fusee_storage::LogStore::flush`] of `shard` fails with an
    /// I/O error before committing anything; the log part is latched. For
    /// tests of the failure paths.
    pub fn fail_next_flush(&self, shard: u32) {
        self.shared.faults().arm_flush(shard);
    }

    /// The next [`fusee_storage::CheckpointStore::commit`] of `shard` fails
    /// with an I/O error before changing anything; its checkpoint and
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
    /// transaction, 1 with the transaction written but aborted, 2 after it
    /// committed. The commit returns an I/O error and latches its parts; the
    /// caller then drops the storage without closing it. For crash tests.
    pub fn crash_in_commit(&self, shard: u32, step: u32) {
        self.shared.faults().arm_crash(shard, step);
    }
}

/// A redb builder as `options` say.
fn builder(options: &RedbOptions) -> redb::Builder {
    let mut b = Database::builder();
    b.set_cache_size(options.cache_size);
    b
}

/// Builds a new database at `path`: redb's file, the format row and every
/// table, committed durably and closed (a clean close: the next open needs
/// no repair).
fn create_database(path: &Path, options: &RedbOptions) -> Result<()> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| StorageError::io(format!("creating {}", path.display()), e))?;
    let file = DurableFile::open(file).map_err(|e| open_error(path, e))?;
    let db = open_database(path, options, file)?;
    shield_file(path, || write_format(&db, path))?;
    drop(db);
    Ok(())
}

/// Opens the redb database at `path` (named so in errors) on `backend`,
/// which must hold a database or be empty (then redb initialises it),
/// mapping every failure (and, defensively, a panic inside redb on a
/// damaged file) to the contract's errors. The database closes under the
/// shield when dropped.
fn open_database(
    path: &Path,
    options: &RedbOptions,
    backend: impl redb::StorageBackend,
) -> Result<Db> {
    let builder = builder(options);
    // A backend that panicked half-way is dropped with the error.
    let backend = std::panic::AssertUnwindSafe(backend);
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let backend = backend;
        builder.create_with_backend(backend.0)
    }));
    match opened {
        Ok(Ok(db)) => Ok(Db {
            db: Some(db),
            two_phase: options.two_phase_commit,
        }),
        Ok(Err(e)) => Err(open_error(path, e)),
        Err(_) => Err(StorageError::CorruptFile {
            file: path.display().to_string(),
            what: "redb panicked reading it (a damaged page)",
            at: 0,
        }),
    }
}

/// The contract's error for redb's refusal to open the file at `path`.
fn open_error(path: &Path, e: redb::DatabaseError) -> StorageError {
    let file = || path.display().to_string();
    let corrupt = |what| StorageError::CorruptFile {
        file: file(),
        what,
        at: 0,
    };
    match e {
        // The directory lock keeps other storages away; this is another
        // program holding the file itself.
        redb::DatabaseError::DatabaseAlreadyOpen => StorageError::Locked { path: file() },
        redb::DatabaseError::UpgradeRequired(version) => StorageError::UnsupportedFormat {
            file: file(),
            found: u32::from(version),
            supported: REDB_FILE_FORMAT,
        },
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(_)) => {
            corrupt("redb found it damaged beyond its repair (its commits fail their checksums)")
        }
        // redb reports some malformed headers as I/O errors of these kinds.
        redb::DatabaseError::Storage(redb::StorageError::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            corrupt("redb could not read its header or pages (damaged)")
        }
        redb::DatabaseError::Storage(redb::StorageError::Io(error)) => StorageError::Io {
            context: format!("opening {}", file()),
            error,
        },
        other => RedbError::Engine {
            context: format!("opening {}", file()),
            error: other.into(),
        }
        .into(),
    }
}

/// The redb file format this crate's redb writes and reads (redb 3.x).
const REDB_FILE_FORMAT: u32 = 3;

/// Writes the format row into a new, empty database, and creates every
/// table so readers never meet a missing one.
fn write_format(db: &Database, path: &Path) -> Result<()> {
    let doing = || format!("creating the tables of {}", path.display());
    let tx = db.begin_write().map_err(|e| engine(doing(), e))?;
    {
        let mut table = tx.open_table(FORMAT).map_err(|e| engine(doing(), e))?;
        table
            .insert(FORMAT_KEY, &layout::format_value()[..])
            .map_err(|e| engine(doing(), e))?;
        tx.open_table(LOG).map_err(|e| engine(doing(), e))?;
        tx.open_table(STORE).map_err(|e| engine(doing(), e))?;
        tx.open_table(INDEX).map_err(|e| engine(doing(), e))?;
        tx.open_table(META).map_err(|e| engine(doing(), e))?;
    }
    tx.commit().map_err(|e| engine(doing(), e))
}

/// Checks the format row of an existing database (this layout version,
/// [`StorageError::UnsupportedFormat`] otherwise; missing or foreign:
/// [`StorageError::CorruptFile`]) and every meta row
/// ([`fusee_storage_kv::check_meta_row`]: a row whose key was damaged
/// fails here, for every shard, rather than leave its shard looking new).
fn check_format(db: &Database, path: &Path) -> Result<()> {
    let doing = || format!("checking the format of {}", path.display());
    let tx = db.begin_read().map_err(|e| engine(doing(), e))?;
    let format = match tx.open_table(FORMAT) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => {
            return check_format_row(None, FORMAT_MAGIC, path);
        }
        Err(e) => return Err(engine(doing(), e)),
    };
    let row = format.get(FORMAT_KEY).map_err(|e| engine(doing(), e))?;
    check_format_row(row.as_ref().map(|v| v.value()), FORMAT_MAGIC, path)?;
    let meta = tx.open_table(META).map_err(|e| engine(doing(), e))?;
    for row in meta.iter().map_err(|e| engine(doing(), e))? {
        let (key, value) = row.map_err(|e| engine(doing(), e))?;
        check_meta_row(&key.value(), value.value(), &NAMES)?;
    }
    Ok(())
}

impl Storage for RedbStorage {
    type Log = RedbLog;
    type Runs = RedbRuns;
    type Checkpoint = RedbCheckpoint;

    fn open_shard(&self, shard: u32) -> Result<ShardParts<Self>> {
        const WHAT: &str = "redb storage";
        let db = self.shared.db(WHAT)?;
        // From here on, dropping the handle releases the shard on any error.
        let handle = Arc::new(self.shared.claim(shard)?);
        let state = handle.shield(|| recover_shard(&handle, &db))?;
        Ok(shard_parts(RedbShard(handle), &state, &NAMES))
    }

    fn shards(&self) -> Result<Vec<u32>> {
        let db = self.shared.db("redb storage")?;
        shield_file(self.shared.path(), || list_shards(&db))
    }

    fn close(&self) -> Result<()> {
        // Dropping our reference closes the file once in-flight calls end.
        self.shared.close();
        Ok(())
    }
}

/// Every shard with a log row, ascending.
fn list_shards(db: &Database) -> Result<Vec<u32>> {
    {
        let doing = "listing shards";
        let tx = db.begin_read().map_err(|e| engine(doing, e))?;
        let table = tx.open_table(META).map_err(|e| engine(doing, e))?;
        let mut shards = Vec::new();
        for row in table.iter().map_err(|e| engine(doing, e))? {
            let (key, _) = row.map_err(|e| engine(doing, e))?;
            if let Some((shard, TAG_LOG)) = layout::meta_of(&key.value()) {
                shards.push(shard);
            }
        }
        Ok(shards)
    }
}

/// Rolls `shard` back to its last commit in one durable transaction,
/// deleting what [`fusee_storage_kv::Cleanup`] names (store frames at or
/// past the committed position, index rows of other generations, log
/// records past the last flushed LSN); creates the log row of a new shard.
/// Returns the shard's rows.
fn recover_shard(h: &ShardHandle, db: &Db) -> Result<ShardState> {
    let shard = h.id();
    let doing = "opening the shard";
    let tx = h.begin(db, Durability::Immediate, doing)?;
    let state = {
        let mut meta = tx.open_table(META).map_err(h.err(doing))?;
        let state = {
            let log = meta.get(meta_key(shard, TAG_LOG)).map_err(h.err(doing))?;
            let commit = meta
                .get(meta_key(shard, TAG_COMMIT))
                .map_err(h.err(doing))?;
            ShardState::decode(
                log.as_ref().map(|v| v.value()),
                commit.as_ref().map(|v| v.value()),
                shard,
                &NAMES,
            )?
        };
        let mut stray_meta = false;
        for row in meta
            .range(meta_key(shard, 0)..=meta_key(shard, u8::MAX))
            .map_err(h.err(doing))?
        {
            let (key, _) = row.map_err(h.err(doing))?;
            stray_meta |= !layout::known_tag(key.value()[4]);
        }
        let holds_rows = || -> Result<bool> {
            let seqs = seq_key(shard, 0)..=seq_key(shard, u64::MAX);
            for def in [LOG, STORE] {
                let table = tx.open_table(def).map_err(h.err(doing))?;
                if table
                    .range(seqs.clone())
                    .map_err(h.err(doing))?
                    .next()
                    .is_some()
                {
                    return Ok(true);
                }
            }
            let index = tx.open_table(INDEX).map_err(h.err(doing))?;
            let rows = index
                .range(index_key(shard, 0, 0)..=index_key(shard, u32::MAX, u64::MAX))
                .map_err(h.err(doing))?
                .next()
                .is_some();
            Ok(rows)
        };
        state.check_keys(stray_meta, holds_rows, shard, &NAMES)?;
        // Before the cleanup's transaction commits: a log row that ends
        // before the shard's seal is lost data, and nothing is deleted.
        let state = h.check_seal(state)?;
        if state.new_log {
            meta.insert(meta_key(shard, TAG_LOG), &state.log.encode(shard)[..])
                .map_err(h.err(doing))?;
        }
        state
    };
    let cut = state.cleanup();
    let generation = cut.keep_generation;
    {
        let mut store = tx.open_table(STORE).map_err(h.err(doing))?;
        store
            .retain_in(
                seq_key(shard, cut.frames_from)..=seq_key(shard, u64::MAX),
                |_, _| false,
            )
            .map_err(h.err(doing))?;
        let mut index = tx.open_table(INDEX).map_err(h.err(doing))?;
        index
            .retain_in(
                index_key(shard, 0, 0)..index_key(shard, generation, 0),
                |_, _| false,
            )
            .map_err(h.err(doing))?;
        if let Some(next) = generation.checked_add(1) {
            index
                .retain_in(
                    index_key(shard, next, 0)..=index_key(shard, u32::MAX, u64::MAX),
                    |_, _| false,
                )
                .map_err(h.err(doing))?;
        }
        if let Some(from) = cut.log_from {
            let mut records = tx.open_table(LOG).map_err(h.err(doing))?;
            records
                .retain_in(seq_key(shard, from)..=seq_key(shard, u64::MAX), |_, _| {
                    false
                })
                .map_err(h.err(doing))?;
        }
    }
    h.commit(tx, doing)?;
    Ok(state)
}
