//! Read-only access to a RocksDB store: [`open_read_only`] (the storage
//! contract over the database, changing nothing) and [`verify_dir`] (every
//! block's checksum RocksDB reads, every row's CRC, every shard's log for
//! holes).
//!
//! # How opening changes nothing
//!
//! The directory is claimed as
//! [`fusee_storage_kv::verify::claim_read_only`] does (marker checked,
//! `LOCK` taken shared: an engine holding the store is
//! [`StorageError::Locked`]), then the database is opened with RocksDB's
//! read-only open (`DB::open_cf_descriptors_read_only`): it replays the WAL
//! into memory and writes nothing into the database directory. RocksDB's
//! diagnostic `LOG` would be written there even so; it goes to a scratch
//! directory under the system's temporary directory instead, removed
//! when the database closes. Reads go into
//! [`fusee_storage_kv::verify::ReadOnlyStorage`], whose parts are the
//! backends' own.
//!
//! # What [`verify_dir`] checks
//!
//! Every row of every column family, read with checksum verification on
//! (RocksDB checks each block it reads, and fails naming the file), through
//! [`fusee_storage_kv::verify::verify_rows`].

use std::path::{Path, PathBuf};

use fusee_storage::{Result, StorageError};
use fusee_storage_kv::checkpoint::RowVisitor;
use fusee_storage_kv::verify::{
    Problem, ReadOnlyDb, ReadOnlyStorage, SharedLock, Table, claim_read_only, verify_rows,
};
use rocksdb::{ColumnFamilyDescriptor, DB, ReadOptions};

use crate::error::{corruption, engine};
use crate::layout::{FAMILIES, FORMAT_KEY, FORMAT_MAGIC, FORMAT_VERSION, INDEX, LOG, META, STORE};
use crate::storage::{BACKEND, DIR_NAME, family};
use crate::{RocksOptions, options};

/// The store in `dir` as the storage contract, read-only (see the [module
/// docs](self)). Errors: those of claiming the directory (`NotFound`,
/// `NotAStore`, `WrongBackend`, `UnsupportedFormat`, `Locked`), and the
/// database refused (`CorruptFile` naming the file RocksDB names).
pub fn open_read_only(dir: &Path) -> Result<ReadOnlyStorage<ReadOnlyRocks>> {
    let (lock, db) = open_db(dir)?;
    Ok(ReadOnlyStorage::new(db, lock, &crate::NAMES))
}

/// Checks the store in `dir` without changing it (see the [module
/// docs](self)); every problem found, empty for a sound store. Errors only
/// where there is nothing to check (no store, another backend's, locked);
/// a database RocksDB refuses to open is a problem of the file it names.
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
    let problems = verify_rows(&db, &db.path, &crate::NAMES, progress);
    drop(lock);
    Ok(problems)
}

/// A RocksDB database opened read-only, with the scratch directory its
/// diagnostic log goes to.
pub struct ReadOnlyRocks {
    // Fields drop in declaration order: the database closes before its
    // log's directory is removed.
    db: DB,
    path: PathBuf,
    _scratch: Scratch,
}

impl std::fmt::Debug for ReadOnlyRocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyRocks")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open_db(dir: &Path) -> Result<(SharedLock, ReadOnlyRocks)> {
    let (lock, path) = claim_read_only(dir, BACKEND, FORMAT_VERSION, DIR_NAME)?;
    if !path.join("CURRENT").exists() {
        return Err(StorageError::CorruptFile {
            file: path.join("CURRENT").display().to_string(),
            what: "RocksDB's CURRENT file is missing (the database was emptied or damaged)",
            at: 0,
        });
    }
    let scratch = std::env::temp_dir().join(format!(
        "fusee-ro-{}-{}",
        std::process::id(),
        SCRATCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&scratch)
        .map_err(|e| StorageError::io(format!("creating {}", scratch.display()), e))?;
    let scratch = Scratch(scratch);
    let settings = RocksOptions::default();
    let mut opts = options::db_options(&settings);
    opts.set_db_log_dir(&scratch.0);
    let descriptors = FAMILIES
        .iter()
        .map(|f| ColumnFamilyDescriptor::new(*f, options::family_options(f, &settings)));
    let opened = DB::open_cf_descriptors_read_only(&opts, &path, descriptors, false);
    let db = match opened {
        Ok(db) => db,
        Err(e) => {
            let detail = e.into_string();
            return Err(corruption(
                &path.display().to_string(),
                &detail,
                "RocksDB refused to open it read-only (files missing, damaged or not Fusee's)",
            ));
        }
    };
    let db = ReadOnlyRocks {
        db,
        path,
        _scratch: scratch,
    };
    db.check_format()?;
    Ok((lock, db))
}

static SCRATCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl ReadOnlyRocks {
    fn check_format(&self) -> Result<()> {
        let meta = family(&self.db, META)?;
        let row = self
            .db
            .get_pinned_cf(meta, FORMAT_KEY)
            .map_err(|e| self.error("checking the format", e))?;
        fusee_storage_kv::check_format_row(row.as_deref(), FORMAT_MAGIC, &self.path)
    }

    fn family(&self, table: Table) -> Result<&rocksdb::ColumnFamily> {
        family(
            &self.db,
            match table {
                Table::Log => LOG,
                Table::Store => STORE,
                Table::Index => INDEX,
                Table::Meta => META,
            },
        )
    }

    /// A read failure: damage RocksDB found names its file.
    fn error(&self, doing: &str, e: rocksdb::Error) -> StorageError {
        if e.kind() == rocksdb::ErrorKind::Corruption {
            return corruption(
                &self.path.display().to_string(),
                &e.into_string(),
                "RocksDB found it damaged (a block failed its checksum)",
            );
        }
        engine(format!("{doing} {}", self.path.display()), e)
    }
}

impl ReadOnlyDb for ReadOnlyRocks {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut ro = ReadOptions::default();
        ro.set_verify_checksums(true);
        self.db
            .get_cf_opt(self.family(table)?, key, &ro)
            .map_err(|e| self.error("reading", e))
    }

    fn scan(&self, table: Table, from: &[u8], to: &[u8], visit: &mut RowVisitor<'_>) -> Result<()> {
        let mut ro = ReadOptions::default();
        ro.set_verify_checksums(true);
        // Inclusive `to`: the bound is the next key after it.
        let mut end = to.to_vec();
        end.push(0);
        ro.set_iterate_upper_bound(end);
        let mut it = self.db.raw_iterator_cf_opt(self.family(table)?, ro);
        it.seek(from);
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            // The format row shares the meta family.
            if !(table == Table::Meta && k == FORMAT_KEY) {
                visit(k, v)?;
            }
            it.next();
        }
        it.status().map_err(|e| self.error("reading", e))
    }
}
