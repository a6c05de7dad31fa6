//! Read-only access to a redb store: [`open_read_only`] (the storage
//! contract over the database, changing nothing) and [`verify_dir`] (every
//! page's checksum, every row's CRC, every shard's log for holes).
//!
//! # How opening changes nothing
//!
//! redb's own read-only open refuses a file that was not closed cleanly
//! (its repair must write), so the database is opened for writing on
//! [`CopyOnWrite`]: a redb storage backend that reads the real file
//! (opened read-only, under a shared lock: an engine holding the file is
//! [`StorageError::Locked`]) and keeps every write in memory. redb then
//! repairs a crashed file, and saves its state at close, in memory only;
//! the file is left byte for byte as it was. The directory is claimed as
//! [`fusee_storage_kv::verify::claim_read_only`] does (shared `LOCK`).
//! Reads go through read transactions into
//! [`fusee_storage_kv::verify::ReadOnlyStorage`], whose parts are the
//! backends' own.
//!
//! # What [`verify_dir`] checks
//!
//! redb's integrity check (every page's checksum against the commit that
//! names it; redb does not verify them on reads), then every row of every
//! table through [`fusee_storage_kv::verify::verify_rows`]. A panic inside
//! redb on a damaged page is caught and reported as a problem of the file.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use fusee_storage::{Result, StorageError};
use fusee_storage_kv::checkpoint::RowVisitor;
use fusee_storage_kv::verify::{
    Problem, ReadOnlyDb, ReadOnlyStorage, SharedLock, Table, claim_read_only, verify_rows,
};
use redb::{Database, ReadableDatabase, TableDefinition};

use crate::error::engine;
use crate::layout::{FORMAT, FORMAT_KEY, FORMAT_MAGIC, FORMAT_VERSION, INDEX, LOG, META, STORE};
use crate::storage::{BACKEND, FILE_NAME, shield_file};

/// The store in `dir` as the storage contract, read-only (see the [module
/// docs](self)). Errors: those of claiming the directory (`NotFound`,
/// `NotAStore`, `WrongBackend`, `UnsupportedFormat`, `Locked`), and the
/// database refused (`CorruptFile`).
pub fn open_read_only(dir: &Path) -> Result<ReadOnlyStorage<ReadOnlyRedb>> {
    let (lock, db) = open_db(dir)?;
    Ok(ReadOnlyStorage::new(db, lock, &crate::NAMES))
}

/// Checks the store in `dir` without changing it (see the [module
/// docs](self)); every problem found, empty for a sound store. Errors only
/// where there is nothing to check (no store, another backend's, locked);
/// a database redb refuses to open is a problem of its file.
pub fn verify_dir(dir: &Path, progress: &mut dyn FnMut()) -> Result<Vec<Problem>> {
    let (lock, db) = match open_db(dir) {
        Ok(opened) => opened,
        Err(StorageError::CorruptFile { file, what, at }) => {
            return Ok(vec![Problem {
                kind: "engine",
                file: file.into(),
                offset: Some(at),
                lsn: None,
                shard: None,
                what: what.to_string(),
            }]);
        }
        Err(e) => return Err(e),
    };
    let mut problems = Vec::new();
    let path = db.path.clone();
    let checked = {
        let mut guard = lock_db(&db.db);
        shield_file(&path, || {
            database(&mut guard)?
                .check_integrity()
                .map_err(|e| engine(format!("checking {}", path.display()), e))
        })
    };
    let engine_problem = |what: String| Problem {
        kind: "engine",
        file: path.clone(),
        offset: None,
        lsn: None,
        shard: None,
        what,
    };
    match checked {
        Ok(true) => {}
        Ok(false) => problems.push(engine_problem(
            "redb pages failed their checksums (redb can repair them, losing the damaged commit)"
                .into(),
        )),
        Err(e) => problems.push(engine_problem(e.to_string())),
    }
    problems.extend(verify_rows(&db, &path, &crate::NAMES, progress));
    drop(lock);
    Ok(problems)
}

/// The database of the store in `dir` on a [`CopyOnWrite`] backend, its
/// format row checked.
fn open_db(dir: &Path) -> Result<(SharedLock, ReadOnlyRedb)> {
    let (lock, path) = claim_read_only(dir, BACKEND, FORMAT_VERSION, FILE_NAME)?;
    let file = File::open(&path)
        .map_err(|e| StorageError::io(format!("opening {}", path.display()), e))?;
    match file.try_lock_shared() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(StorageError::Locked {
                path: path.display().to_string(),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(StorageError::io(format!("locking {}", path.display()), e));
        }
    }
    let len = file
        .metadata()
        .map_err(|e| StorageError::io(format!("reading {}", path.display()), e))?
        .len();
    if len < crate::file::HEADER {
        return Err(StorageError::CorruptFile {
            file: path.display().to_string(),
            what: "shorter than redb's header (cut short or emptied)",
            at: len,
        });
    }
    let backend = CopyOnWrite {
        file,
        state: Mutex::new(Writes {
            len,
            base_len: len,
            writes: Vec::new(),
        }),
    };
    let opened = shield_file(&path, || {
        Database::builder()
            .create_with_backend(backend)
            .map_err(|e| StorageError::CorruptFile {
                file: path.display().to_string(),
                what: match e {
                    redb::DatabaseError::Storage(redb::StorageError::Corrupted(_)) => {
                        "redb found it damaged beyond its repair"
                    }
                    _ => "redb refused to open it (damaged, or not a redb file)",
                },
                at: 0,
            })
    })?;
    let db = ReadOnlyRedb {
        db: Mutex::new(Some(opened)),
        path,
    };
    db.check_format()?;
    Ok((lock, db))
}

/// A redb database opened on [`CopyOnWrite`]: reads only, through read
/// transactions, each under the panic shield.
#[derive(Debug)]
pub struct ReadOnlyRedb {
    // A mutex: the integrity check needs the database mutably. `None` only
    // once dropped.
    db: Mutex<Option<Database>>,
    path: std::path::PathBuf,
}

impl Drop for ReadOnlyRedb {
    fn drop(&mut self) {
        // redb's shutdown commit can trip over a damaged file (after a
        // failed integrity check it asserts): under the shield, like every
        // other call into redb. Its writes go to memory only.
        let db = self.db.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(db)));
    }
}

fn lock_db(db: &Mutex<Option<Database>>) -> MutexGuard<'_, Option<Database>> {
    db.lock().unwrap_or_else(|e| e.into_inner())
}

/// The database in `guard`, or `Closed` once dropped (never, while borrowed).
fn database(guard: &mut Option<Database>) -> Result<&mut Database> {
    guard.as_mut().ok_or(StorageError::Closed {
        what: "redb database",
    })
}

impl ReadOnlyRedb {
    /// The format row: this layout version, or the open's error.
    fn check_format(&self) -> Result<()> {
        let path = &self.path;
        shield_file(path, || {
            let doing = || format!("checking the format of {}", path.display());
            let mut guard = lock_db(&self.db);
            let tx = database(&mut guard)?
                .begin_read()
                .map_err(|e| engine(doing(), e))?;
            let row = match tx.open_table(FORMAT) {
                Ok(t) => t
                    .get(FORMAT_KEY)
                    .map_err(|e| engine(doing(), e))?
                    .map(|v| v.value().to_vec()),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(engine(doing(), e)),
            };
            fusee_storage_kv::check_format_row(row.as_deref(), FORMAT_MAGIC, path)
        })
    }

    /// Runs `f` on a read transaction's view of `def`, under the shield.
    fn read<K, V, T>(
        &self,
        def: TableDefinition<'_, K, V>,
        f: impl FnOnce(&redb::ReadOnlyTable<K, V>) -> Result<T>,
    ) -> Result<T>
    where
        K: redb::Key + 'static,
        V: redb::Value + 'static,
    {
        shield_file(&self.path, || {
            let doing = || format!("reading {}", self.path.display());
            let mut guard = lock_db(&self.db);
            let tx = database(&mut guard)?
                .begin_read()
                .map_err(|e| engine(doing(), e))?;
            let table = tx.open_table(def).map_err(|e| engine(doing(), e))?;
            f(&table)
        })
    }
}

fn key<const N: usize>(k: &[u8]) -> Result<[u8; N]> {
    k.try_into().map_err(|_| StorageError::Misuse {
        call: "ReadOnlyDb",
        why: "a key of the wrong length for its table",
    })
}

/// Copies rows `from..=to` of a typed table out under the shield, so the
/// caller's visitor runs outside it (a visitor's own panic is never
/// swallowed).
type Rows = Vec<(Vec<u8>, Vec<u8>)>;

impl ReadOnlyDb for ReadOnlyRedb {
    fn get(&self, table: Table, k: &[u8]) -> Result<Option<Vec<u8>>> {
        let err = |e: redb::StorageError| engine(format!("reading {}", self.path.display()), e);
        match table {
            Table::Log => self.read(LOG, |t| {
                Ok(t.get(key::<12>(k)?)
                    .map_err(err)?
                    .map(|v| v.value().to_vec()))
            }),
            Table::Store => self.read(STORE, |t| {
                Ok(t.get(key::<12>(k)?)
                    .map_err(err)?
                    .map(|v| v.value().to_vec()))
            }),
            Table::Index => self.read(INDEX, |t| {
                Ok(t.get(key::<16>(k)?)
                    .map_err(err)?
                    .map(|v| v.value().to_vec()))
            }),
            Table::Meta => self.read(META, |t| {
                Ok(t.get(key::<5>(k)?)
                    .map_err(err)?
                    .map(|v| v.value().to_vec()))
            }),
        }
    }

    fn scan(&self, table: Table, from: &[u8], to: &[u8], visit: &mut RowVisitor<'_>) -> Result<()> {
        let err = |e: redb::StorageError| engine(format!("reading {}", self.path.display()), e);
        // Rows are copied out in batches of this many, then visited.
        const BATCH: usize = 4096;
        let mut start = from.to_vec();
        loop {
            // The same read for each typed table: a batch of rows copied out.
            macro_rules! batch {
                ($def:expr, $n:literal) => {
                    self.read($def, |t| {
                        let r = t.range(key::<$n>(&start)?..=key::<$n>(to)?).map_err(err)?;
                        r.take(BATCH)
                            .map(|x| x.map(|(k, v)| (k.value().to_vec(), v.value().to_vec())))
                            .collect::<std::result::Result<_, _>>()
                            .map_err(err)
                    })?
                };
            }
            let rows: Rows = match table {
                Table::Log => batch!(LOG, 12),
                Table::Store => batch!(STORE, 12),
                Table::Index => batch!(INDEX, 16),
                Table::Meta => batch!(META, 5),
            };
            let full = rows.len() == BATCH;
            for (k, v) in &rows {
                visit(k, v)?;
            }
            // The next batch starts just after the last key visited.
            match rows.last().map(|(k, _)| next_key(k)) {
                Some(Some(next)) if full && next.as_slice() <= to => start = next,
                _ => return Ok(()),
            }
        }
    }
}

/// The key just after `k` of the same length, `None` after the last.
fn next_key(k: &[u8]) -> Option<Vec<u8>> {
    let mut next = k.to_vec();
    for b in next.iter_mut().rev() {
        if *b == u8::MAX {
            *b = 0;
        } else {
            *b += 1;
            return Some(next);
        }
    }
    None
}

/// The writes redb made, kept in memory over the real file.
#[derive(Debug)]
struct Writes {
    len: u64,
    /// The real file's bytes visible (a cut hides the rest).
    base_len: u64,
    writes: Vec<(u64, Vec<u8>)>,
}

/// A redb storage backend that reads the real file and keeps every write
/// in memory (see the [module docs](self)).
#[derive(Debug)]
pub struct CopyOnWrite {
    file: File,
    state: Mutex<Writes>,
}

impl CopyOnWrite {
    fn state(&self) -> MutexGuard<'_, Writes> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl redb::StorageBackend for CopyOnWrite {
    fn len(&self) -> io::Result<u64> {
        Ok(self.state().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let s = self.state();
        let end = offset
            .checked_add(out.len() as u64)
            .filter(|&e| e <= s.len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))?;
        out.fill(0);
        if offset < s.base_len {
            let upto = end.min(s.base_len);
            self.file
                .read_exact_at(&mut out[..(upto - offset) as usize], offset)?;
        }
        for (at, bytes) in &s.writes {
            let from = (*at).max(offset);
            let to = (at + bytes.len() as u64).min(end);
            if from < to {
                out[(from - offset) as usize..(to - offset) as usize]
                    .copy_from_slice(&bytes[(from - at) as usize..(to - at) as usize]);
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.state();
        if len < s.len {
            s.base_len = s.base_len.min(len);
            for (at, bytes) in &mut s.writes {
                bytes.truncate(len.saturating_sub(*at) as usize);
            }
        }
        s.len = len;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut s = self.state();
        let end = offset + data.len() as u64;
        // A page written again replaces its earlier copy.
        s.writes
            .retain(|(at, b)| !(*at >= offset && at + b.len() as u64 <= end));
        s.writes.push((offset, data.to_vec()));
        s.len = s.len.max(end);
        Ok(())
    }
}
