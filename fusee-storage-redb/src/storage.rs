//! [`RedbStorage`]: opening the database file, checking its format, opening
//! shards (with the cleanup that rolls a shard back to its last commit), and
//! the state the parts share.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fusee_storage::{Result, ShardParts, Storage, StorageError};
use fusee_storage_kv::{ShardEngine, ShardState, Shared, shard_parts};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, WriteTransaction};

use crate::error::{RedbError, engine};
use crate::layout::{
    self, FORMAT, FORMAT_KEY, FORMAT_VERSION, INDEX, LOG, META, STORE, TAG_COMMIT, TAG_LOG,
    index_key, meta_key, seq_key,
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
    shared: Arc<Shared<Db>>,
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
pub(crate) struct Db(Option<Database>);

impl std::ops::Deref for Db {
    type Target = Database;

    fn deref(&self) -> &Database {
        match &self.0 {
            Some(db) => db,
            // Only `drop` empties it.
            None => unreachable!("database used during its drop"),
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(db) = self.0.take() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(db)));
        }
    }
}

/// One open of one shard on redb.
pub(crate) type ShardHandle = fusee_storage_kv::ShardHandle<Db>;

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
    fn database(&self, what: &'static str) -> Result<Arc<Db>>;

    /// Runs `f`, turning a panic inside redb (it has assertions that damaged
    /// pages can trip) into a `Corrupt` error naming the shard. `f` never
    /// calls a caller's visitor, so no caller panic is swallowed.
    fn shield<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        shield(u64::from(self.shard_id()), f)
    }

    /// Begins a write transaction with `durability`.
    fn begin(
        &self,
        db: &Database,
        durability: Durability,
        doing: &str,
    ) -> Result<WriteTransaction> {
        let mut tx = db.begin_write().map_err(self.err(doing))?;
        tx.set_durability(durability).map_err(self.err(doing))?;
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

    fn database(&self, what: &'static str) -> Result<Arc<Db>> {
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

/// The `at` of a shield around a call about no shard in particular.
const NO_SHARD: u64 = 1 << 32;

impl RedbStorage {
    /// Opens the storage in directory `dir` (created if missing), creating
    /// the database file `fusee.redb` if it does not exist.
    ///
    /// Errors (as [`StorageError::Backend`] holding a [`RedbError`]):
    /// [`RedbError::Locked`] if another process or storage has the file
    /// open; [`RedbError::NotRedb`] for a file that is not a redb database
    /// or is damaged beyond repair; [`RedbError::Foreign`] for a redb
    /// database that is not a Fusee storage; [`RedbError::NewerFormat`] for
    /// one written by a newer Fusee. Never panics on a bad file.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        fusee_storage::dirs::open_in_dir(dir.as_ref(), FILE_NAME, |path| {
            let opener = path.to_path_buf();
            let db = open_database(path, move || Database::builder().create(opener))?;
            Self::with_database(db, path.to_path_buf())
        })
    }

    /// Opens the storage on a redb [`redb::StorageBackend`] of the caller's
    /// (a file with a crash switch in tests, memory, ...); `name` names it
    /// in errors and [`RedbStorage::path`]. Errors as [`RedbStorage::open`]
    /// (locking is the backend's business).
    pub fn open_with_backend(
        name: impl Into<PathBuf>,
        backend: impl redb::StorageBackend,
    ) -> Result<Self> {
        let path = name.into();
        // A backend that panicked half-way is dropped with the error.
        let backend = std::panic::AssertUnwindSafe(backend);
        let db = open_database(&path, move || {
            let backend = backend;
            Database::builder().create_with_backend(backend.0)
        })?;
        Self::with_database(db, path)
    }

    fn with_database(db: Database, path: PathBuf) -> Result<Self> {
        shield(NO_SHARD, || check_format(&db, &path))?;
        Ok(Self {
            shared: Arc::new(Shared::new(path, Db(Some(db)))),
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

/// Opens or creates the redb file, mapping every failure (and, defensively,
/// a panic inside redb on a damaged file) to a clear error.
fn open_database(
    path: &Path,
    open: impl FnOnce() -> std::result::Result<Database, redb::DatabaseError> + std::panic::UnwindSafe,
) -> Result<Database> {
    let opened = std::panic::catch_unwind(open);
    let e = match opened {
        Ok(Ok(db)) => return Ok(db),
        Ok(Err(e)) => e,
        Err(_) => {
            return Err(RedbError::NotRedb {
                path: path.to_path_buf(),
                detail: "redb panicked while reading the file".into(),
            }
            .into());
        }
    };
    let path = path.to_path_buf();
    Err(match e {
        redb::DatabaseError::DatabaseAlreadyOpen => RedbError::Locked { path }.into(),
        redb::DatabaseError::UpgradeRequired(version) => {
            RedbError::OldRedbFormat { path, version }.into()
        }
        // redb reports some malformed headers as I/O errors of these kinds.
        redb::DatabaseError::Storage(redb::StorageError::Io(source))
            if matches!(
                source.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            RedbError::NotRedb {
                path,
                detail: source.to_string(),
            }
            .into()
        }
        redb::DatabaseError::Storage(redb::StorageError::Io(error)) => StorageError::Io {
            context: format!("opening {}", path.display()),
            error,
        },
        other => RedbError::NotRedb {
            path,
            detail: other.to_string(),
        }
        .into(),
    })
}

/// Checks the format marker, writing it into a new, empty database; refuses
/// foreign and newer-format databases.
fn check_format(db: &Database, path: &Path) -> Result<()> {
    let doing = || format!("checking the format of {}", path.display());
    let tx = db.begin_write().map_err(|e| engine(doing(), e))?;
    let found = {
        let table = tx.open_table(FORMAT).map_err(|e| engine(doing(), e))?;
        let value = table.get(FORMAT_KEY).map_err(|e| engine(doing(), e))?;
        value.map(|v| layout::format_version(v.value()))
    };
    match found {
        Some(Some(version)) if version <= FORMAT_VERSION => {
            tx.abort().map_err(|e| engine(doing(), e))?;
            return Ok(());
        }
        Some(Some(found)) => {
            return Err(RedbError::NewerFormat {
                path: path.to_path_buf(),
                found,
                supported: FORMAT_VERSION,
            }
            .into());
        }
        Some(None) => {
            return Err(RedbError::Foreign {
                path: path.to_path_buf(),
            }
            .into());
        }
        None => {}
    }
    // No marker: only an empty database (ours, just created) may get one.
    let names: Vec<String> = tx
        .list_tables()
        .map_err(|e| engine(doing(), e))?
        .map(|t| redb::TableHandle::name(&t).to_string())
        .collect();
    let multimaps = tx
        .list_multimap_tables()
        .map_err(|e| engine(doing(), e))?
        .count();
    if names.iter().any(|n| n != "fusee.format") || multimaps != 0 {
        return Err(RedbError::Foreign {
            path: path.to_path_buf(),
        }
        .into());
    }
    {
        let mut table = tx.open_table(FORMAT).map_err(|e| engine(doing(), e))?;
        table
            .insert(FORMAT_KEY, &layout::format_value()[..])
            .map_err(|e| engine(doing(), e))?;
        // Create the other tables now so readers never meet a missing one.
        tx.open_table(LOG).map_err(|e| engine(doing(), e))?;
        tx.open_table(STORE).map_err(|e| engine(doing(), e))?;
        tx.open_table(INDEX).map_err(|e| engine(doing(), e))?;
        tx.open_table(META).map_err(|e| engine(doing(), e))?;
    }
    tx.commit().map_err(|e| engine(doing(), e))
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
        shield(NO_SHARD, || list_shards(&db))
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
fn recover_shard(h: &ShardHandle, db: &Database) -> Result<ShardState> {
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
        if state.new_log {
            meta.insert(meta_key(shard, TAG_LOG), &state.log.encode()[..])
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
