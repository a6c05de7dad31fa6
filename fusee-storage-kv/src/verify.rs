//! Read-only access to a key-value store, shared by both engines: the
//! directory claimed without writing ([`claim_read_only`]), a
//! [`ReadOnlyStorage`] that implements the storage contract over any
//! engine's read view ([`ReadOnlyDb`]) with the very parts the backends
//! use ([`KvLog`], [`KvRuns`], [`KvCheckpoint`], so every read check is
//! theirs), and [`verify_rows`], the check of every row's CRC and every
//! shard's log for holes and against its seal ([`crate::seal`]).
//!
//! What differs from a normal open: a shard is opened without the
//! open-time cleanup (it would delete rows). That changes nothing for a
//! reader: the parts read only the committed log (`base+1..=last` of the
//! log row), the committed index generation and frames the committed
//! index or checkpoint names, never the leftovers the cleanup deletes. The
//! shard's seal is checked as a normal open checks it (a log that ends
//! before it is [`StorageError::LostRecords`]), reading the seal file only.
//! Every write is refused with [`StorageError::Misuse`].
//!
//! The directory's `LOCK` is taken *shared*: an engine holding the store
//! makes the open [`StorageError::Locked`], and no engine can take the
//! store while a reader holds it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fusee_core::record::Lsn;
use fusee_storage::identity::{Create, check_path, claim_dir};
use fusee_storage::{Result, ShardParts, Storage, StorageError, index_record_run};

use crate::checkpoint::{Base, IndexEngine, IndexWrite, RowVisitor};
use crate::layout::{
    LogRow, TAG_COMMIT, TAG_LOG, check_crc, index_key, index_record_of, meta_key, meta_of, seq_key,
    seq_of,
};
use crate::log::LogEngine;
use crate::runs::FrameEngine;
use crate::store_dir::LOCK;
use crate::{KvCheckpoint, KvLog, KvRuns, Names, ShardEngine, ShardState, check_meta_row};

/// One thing [`verify_rows`] (or a backend's own checks) found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// A stable name for the kind of damage (`log-record`, `store-frame`,
    /// `index-record`, `meta-row`, `log-hole`, `log-seal`, `engine`), for
    /// scripts.
    pub kind: &'static str,
    /// The database file (or directory, or the file the engine names).
    pub file: PathBuf,
    /// The byte offset in `file`, when the engine names one.
    pub offset: Option<u64>,
    /// The log record concerned.
    pub lsn: Option<Lsn>,
    /// The shard concerned.
    pub shard: Option<u32>,
    /// What is wrong, in words (the row's key for a row).
    pub what: String,
}

/// The layout's tables, as [`ReadOnlyDb`] reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// Log records by (shard, LSN).
    Log,
    /// Run-store frames by (shard, frame number).
    Store,
    /// Index records by (shard, generation, run).
    Index,
    /// Meta rows by (shard, tag), the format row left out.
    Meta,
}

impl Table {
    /// The length of the table's keys.
    pub fn key_len(self) -> usize {
        match self {
            Table::Log | Table::Store => 12,
            Table::Index => 16,
            Table::Meta => 5,
        }
    }
}

/// What a backend gives [`ReadOnlyStorage`]: reads of its engine opened
/// read-only.
pub trait ReadOnlyDb: Send + Sync + 'static {
    /// The value stored under `key` in `table`.
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Calls `visit` with every row of `table` whose key lies in
    /// `from..=to` (keys of [`Table::key_len`] bytes), in key order,
    /// stopping at the first error `visit` returns.
    fn scan(&self, table: Table, from: &[u8], to: &[u8], visit: &mut RowVisitor<'_>) -> Result<()>;
}

/// The shared lock [`claim_read_only`] takes on a store's `LOCK`; `None`
/// when the store has no `LOCK` file (nothing then holds it). It also
/// remembers the store's directory, where the shards' seal files are.
#[derive(Debug)]
pub struct SharedLock(#[allow(dead_code)] Option<File>, PathBuf);

/// Judges directory `dir` as `backend` in layout `format` would, writing
/// nothing: the marker checked (the same errors as
/// [`crate::store_dir::claim`]: `NotAStore`, `WrongBackend`,
/// `UnsupportedFormat`, a damaged marker, `NotFound` for no store), the
/// lock taken shared (`Locked` while an engine holds it), and the path of
/// its database `db`, which must exist (`CorruptFile` otherwise).
pub fn claim_read_only(
    dir: &Path,
    backend: &'static str,
    format: u32,
    db: &str,
) -> Result<(SharedLock, PathBuf)> {
    check_path(dir)?;
    let staging = format!("{db}.new");
    claim_dir(
        dir,
        backend,
        format,
        Create::Never,
        &[LOCK, staging.as_str()],
    )?;
    let lock_path = dir.join(LOCK);
    let lock = match File::open(&lock_path) {
        Ok(file) => match file.try_lock_shared() {
            Ok(()) => SharedLock(Some(file), dir.to_path_buf()),
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StorageError::Locked {
                    path: dir.display().to_string(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(StorageError::io(
                    format!("locking {}", lock_path.display()),
                    e,
                ));
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => SharedLock(None, dir.to_path_buf()),
        Err(e) => {
            return Err(StorageError::io(
                format!("opening {}", lock_path.display()),
                e,
            ));
        }
    };
    let path = dir.join(db);
    if !path.exists() {
        if dir.join(&staging).exists() {
            // A creation cut short: no store was ever published here.
            return Err(StorageError::NotFound {
                path: dir.display().to_string(),
            });
        }
        return Err(StorageError::CorruptFile {
            file: path.display().to_string(),
            what: "the database is missing, though the FUSEE marker says a store was created here",
            at: 0,
        });
    }
    Ok((lock, path))
}

struct Inner<D> {
    db: D,
    names: &'static Names,
    closed: AtomicBool,
    _lock: SharedLock,
}

/// The storage contract over a read-only engine `D` (see the [module
/// docs](self)). Every write is [`StorageError::Misuse`].
pub struct ReadOnlyStorage<D> {
    inner: Arc<Inner<D>>,
}

impl<D> std::fmt::Debug for ReadOnlyStorage<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyStorage").finish_non_exhaustive()
    }
}

impl<D: ReadOnlyDb> ReadOnlyStorage<D> {
    /// The storage over `db`, whose directory's lock `lock` is held as long
    /// as the storage or a part of it lives; `names` names the backend's
    /// parts in errors.
    pub fn new(db: D, lock: SharedLock, names: &'static Names) -> Self {
        Self {
            inner: Arc::new(Inner {
                db,
                names,
                closed: AtomicBool::new(false),
                _lock: lock,
            }),
        }
    }

    /// The engine.
    pub fn db(&self) -> &D {
        &self.inner.db
    }
}

/// One shard of a [`ReadOnlyStorage`]: the engine under its parts.
pub struct ReadOnlyShard<D> {
    inner: Arc<Inner<D>>,
    shard: u32,
}

impl<D> Clone for ReadOnlyShard<D> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            shard: self.shard,
        }
    }
}

fn read_only(call: &'static str) -> StorageError {
    StorageError::Misuse {
        call,
        why: "the store is open read-only",
    }
}

impl<D: ReadOnlyDb> ShardEngine for ReadOnlyShard<D> {
    fn shard(&self) -> u32 {
        self.shard
    }

    fn check_open(&self, what: &'static str) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(StorageError::Closed { what });
        }
        Ok(())
    }
}

impl<D: ReadOnlyDb> LogEngine for ReadOnlyShard<D> {
    fn write(&self, _: Lsn, _: &[Vec<u8>], _: &LogRow, _: bool) -> Result<()> {
        Err(read_only("LogStore::flush"))
    }

    fn scan(
        &self,
        from: Lsn,
        through: Lsn,
        visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let (a, b) = (seq_key(self.shard, from), seq_key(self.shard, through));
        self.inner.db.scan(Table::Log, &a, &b, &mut |k, v| {
            visit(seq_of(k).unwrap_or(0), v)
        })
    }

    fn discard(&self, _: Lsn, _: Lsn, _: &LogRow) -> Result<()> {
        Err(read_only("LogStore::discard_through"))
    }
}

impl<D: ReadOnlyDb> FrameEngine for ReadOnlyShard<D> {
    fn spill(&self, _: &std::collections::BTreeMap<u64, Vec<u8>>) -> Result<()> {
        Err(read_only("RunStore::append"))
    }

    fn with_stored<T>(&self, n: u64, f: impl FnOnce(Option<&[u8]>) -> Result<T>) -> Result<T> {
        let v = self.inner.db.get(Table::Store, &seq_key(self.shard, n))?;
        f(v.as_deref())
    }
}

impl<D: ReadOnlyDb> IndexEngine for ReadOnlyShard<D> {
    type Frames = Self;

    fn same_open(&self, frames: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &frames.inner) && self.shard == frames.shard
    }

    fn write_base(&self, _: &mut Base) -> Result<()> {
        Err(read_only("CheckpointStore::base_chunk"))
    }

    fn clear_generation(&self, _: u32) -> Result<()> {
        Err(read_only("CheckpointStore::begin_base"))
    }

    fn commit(&self, _: &KvRuns<Self>, _: IndexWrite<'_>, _: &[u8]) -> Result<(u32, u64)> {
        Err(read_only("CheckpointStore::commit"))
    }

    fn scan(&self, generation: u32, visit: &mut RowVisitor<'_>) -> Result<()> {
        let a = index_key(self.shard, generation, 0);
        let b = index_key(self.shard, generation, u64::MAX);
        self.inner.db.scan(Table::Index, &a, &b, visit)
    }
}

/// Whether `table` holds a row in `from..=to`.
fn any<D: ReadOnlyDb>(db: &D, table: Table, from: &[u8], to: &[u8]) -> Result<bool> {
    let mut found = false;
    db.scan(table, from, to, &mut |_, _| {
        found = true;
        // Stop at the first row.
        Err(StorageError::Closed { what: "scan" })
    })
    .or_else(|e| match e {
        StorageError::Closed { what: "scan" } => Ok(()),
        e => Err(e),
    })?;
    Ok(found)
}

impl<D: ReadOnlyDb> Storage for ReadOnlyStorage<D> {
    type Log = KvLog<ReadOnlyShard<D>>;
    type Runs = KvRuns<ReadOnlyShard<D>>;
    type Checkpoint = KvCheckpoint<ReadOnlyShard<D>>;

    fn open_shard(&self, shard: u32) -> Result<ShardParts<Self>> {
        let (db, names) = (&self.inner.db, self.inner.names);
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(StorageError::Closed { what: names.log });
        }
        let log = db.get(Table::Meta, &meta_key(shard, TAG_LOG))?;
        let commit = db.get(Table::Meta, &meta_key(shard, TAG_COMMIT))?;
        let state = ShardState::decode(log.as_deref(), commit.as_deref(), shard, names)?;
        let mut stray_meta = false;
        db.scan(
            Table::Meta,
            &meta_key(shard, 0),
            &meta_key(shard, u8::MAX),
            &mut |k, _| {
                stray_meta |= meta_of(k).is_some_and(|(_, tag)| !crate::layout::known_tag(tag));
                Ok(())
            },
        )?;
        let holds_rows = || -> Result<bool> {
            let (a, b) = (seq_key(shard, 0), seq_key(shard, u64::MAX));
            Ok(any(db, Table::Log, &a, &b)?
                || any(db, Table::Store, &a, &b)?
                || any(
                    db,
                    Table::Index,
                    &index_key(shard, 0, 0),
                    &index_key(shard, u32::MAX, u64::MAX),
                )?)
        };
        state.check_keys(stray_meta, holds_rows, shard, names)?;
        crate::seal::check_seal_read_only(
            &crate::seal::seal_path_in(&self.inner._lock.1, shard),
            shard,
            state.log.last,
        )?;
        let engine = ReadOnlyShard {
            inner: Arc::clone(&self.inner),
            shard,
        };
        Ok(crate::shard_parts(engine, &state, names))
    }

    fn shards(&self) -> Result<Vec<u32>> {
        let mut shards = Vec::new();
        self.inner
            .db
            .scan(Table::Meta, &[0; 5], &[0xFF; 5], &mut |k, _| {
                if let Some((shard, TAG_LOG)) = meta_of(k) {
                    shards.push(shard);
                }
                Ok(())
            })?;
        Ok(shards)
    }

    fn close(&self) -> Result<()> {
        self.inner.closed.store(true, Ordering::Release);
        Ok(())
    }
}

/// Checks every row of every table of `db` (the database at `file`): each
/// meta row ([`check_meta_row`]), each log record's, frame's and index
/// record's CRC over its key (an index record's run must be its key's), and
/// each shard's log for a record missing between its log row's `base` and
/// `last`. Returns every problem found; `progress` is told each row read.
pub fn verify_rows<D: ReadOnlyDb>(
    db: &D,
    file: &Path,
    names: &Names,
    progress: &mut dyn FnMut(),
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut push = |kind: &'static str, shard: Option<u32>, lsn: Option<Lsn>, what: String| {
        problems.push(Problem {
            kind,
            file: file.to_path_buf(),
            offset: None,
            lsn,
            shard,
            what,
        });
    };
    let shard_of = |k: &[u8]| -> Option<u32> {
        let b: [u8; 4] = k.get(..4)?.try_into().ok()?;
        Some(u32::from_be_bytes(b))
    };
    let mut logs: Vec<(u32, LogRow)> = Vec::new();
    let scanned = db.scan(Table::Meta, &[0; 5], &[0xFF; 5], &mut |k, v| {
        progress();
        match check_meta_row(k, v, names) {
            Ok(_) => {
                if let Some((shard, TAG_LOG)) = meta_of(k)
                    && let Ok(row) = LogRow::decode(v, shard, names.log_row)
                {
                    logs.push((shard, row));
                }
            }
            Err(e) => push("meta-row", shard_of(k), None, e.to_string()),
        }
        Ok(())
    });
    if let Err(e) = scanned {
        push("engine", None, None, format!("reading the meta rows: {e}"));
    }
    // Per shard, the next LSN its log must hold (base + 1 ..= last).
    let mut next: std::collections::BTreeMap<u32, (Lsn, Lsn)> = logs
        .iter()
        .map(|(s, row)| (*s, (row.base + 1, row.last)))
        .collect();
    let mut holes: Vec<(u32, Lsn)> = Vec::new();
    let scanned = db.scan(Table::Log, &[0; 12], &[0xFF; 12], &mut |k, v| {
        progress();
        let (shard, lsn) = (shard_of(k).unwrap_or(0), seq_of(k).unwrap_or(0));
        if let Err(e) = check_crc(k, v, names.log_record, lsn) {
            push("log-record", Some(shard), Some(lsn), e.to_string());
        }
        if let Some((want, last)) = next.get_mut(&shard)
            && lsn >= *want
            && *want <= *last
        {
            if lsn > *want {
                holes.push((shard, *want));
            }
            *want = lsn + 1;
        }
        Ok(())
    });
    if let Err(e) = scanned {
        push("engine", None, None, format!("reading the log: {e}"));
    }
    for (shard, (want, last)) in &next {
        if want <= last {
            holes.push((*shard, *want));
        }
    }
    for (shard, lsn) in holes {
        push(
            "log-hole",
            Some(shard),
            Some(lsn),
            format!("{} {lsn} (shard {shard})", names.missing_record),
        );
    }
    // Each shard's log against its seal, beside the database: a log row
    // that ends before it lost acknowledged records (crate::seal).
    let mut seals = Vec::new();
    for (shard, row) in &logs {
        let seal = crate::seal_path(file, *shard);
        if let Err(e) = crate::seal::check_seal_read_only(&seal, *shard, row.last) {
            let lsn = match &e {
                StorageError::LostRecords { recovered, .. } => Some(recovered + 1),
                _ => None,
            };
            seals.push(Problem {
                kind: "log-seal",
                file: seal,
                offset: None,
                lsn,
                shard: Some(*shard),
                what: e.to_string(),
            });
        }
    }
    let scanned = db.scan(Table::Store, &[0; 12], &[0xFF; 12], &mut |k, v| {
        progress();
        let n = seq_of(k).unwrap_or(0);
        if let Err(e) = check_crc(k, v, names.frame, n) {
            push("store-frame", shard_of(k), None, e.to_string());
        }
        Ok(())
    });
    if let Err(e) = scanned {
        push("engine", None, None, format!("reading the run store: {e}"));
    }
    let mut at = 0u64;
    let scanned = db.scan(Table::Index, &[0; 16], &[0xFF; 16], &mut |k, v| {
        progress();
        at += 1;
        let run = k
            .get(8..16)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes);
        match index_record_of(k, v, names.index_record, at) {
            Ok(rec) if Some(index_record_run(&rec)) != run => push(
                "index-record",
                shard_of(k),
                None,
                format!("{} {at}", names.index_key),
            ),
            Ok(_) => {}
            Err(e) => push("index-record", shard_of(k), None, e.to_string()),
        }
        Ok(())
    });
    if let Err(e) = scanned {
        push("engine", None, None, format!("reading the index: {e}"));
    }
    problems.extend(seals);
    problems
}
