//! The directory a key-value storage lives in, the same for both engines:
//! its identity marker, its lock, and the engine's database created whole
//! or not at all.
//!
//! ```text
//! <dir>/FUSEE          identity marker: backend and layout version (fusee_storage::identity)
//! <dir>/LOCK           exclusive lock, held while the storage or any part of it lives
//! <dir>/<db>           the engine's database (redb: a file; RocksDB: a directory)
//! <dir>/<db>.new       the database while it is being created (gone once created)
//! <dir>/seal-NNNNNNNNNN  each shard's log seal, once it sealed (crate::seal)
//! ```
//!
//! **Opening** ([`claim`]): the directory is judged first without writing
//! anything ([`fusee_storage::identity::claim_dir`] with
//! [`Create::Never`]), so another backend's directory, another program's
//! files, a damaged marker and an empty path are refused before a byte is
//! written. Then `LOCK` is taken (`File::try_lock`: an exclusive lock on
//! the open file, so a second open in this process is refused like one
//! from another process), and only then is anything created.
//!
//! **Creating** a store: the directory (durably), `LOCK`, an empty
//! placeholder `<db>.new`, then the marker; the backend builds its
//! database at `<db>.new` and [`Staged::publish`] renames it to `<db>` and
//! syncs the directory. A crash at any point leaves either a directory
//! without a marker holding only `LOCK` and `<db>.new` (still empty to the
//! marker's rules: the next open starts again), or a marker beside
//! `<db>.new` (a creation cut short: the next open builds the database
//! again), or the finished store.
//!
//! **The database is missing** under a valid marker, with no `<db>.new`
//! beside it: the marker says a store was created here, so the database was
//! deleted or moved, and the open is [`StorageError::CorruptFile`] naming
//! it, never a new, empty store in its place.
//!
//! What this module does not know: what the engine keeps inside `<db>`, or
//! how it checks it (an empty or damaged database is the backend's to
//! refuse).

use std::fs::File;
use std::path::{Path, PathBuf};

use fusee_storage::identity::{Create, check_path, claim_dir};
use fusee_storage::{Result, StorageError};

/// The lock file's name.
pub const LOCK: &str = "LOCK";

/// The suffix of the name a database is built under.
const STAGING_SUFFIX: &str = ".new";

/// The exclusive lock of a storage directory: held until dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Takes the lock of `dir` (creating `dir/LOCK` if missing), or
/// [`StorageError::Locked`] naming `dir` if another open storage holds it,
/// in this process or another.
pub fn lock_dir(dir: &Path) -> Result<DirLock> {
    let path = dir.join(LOCK);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| StorageError::io(format!("opening {}", path.display()), e))?;
    match file.try_lock() {
        Ok(()) => Ok(DirLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(StorageError::Locked {
            path: dir.display().to_string(),
        }),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(StorageError::io(format!("locking {}", path.display()), e))
        }
    }
}

/// A database the backend builds at [`Staged::path`] and then publishes.
#[derive(Debug)]
pub struct Staged {
    dir: PathBuf,
    staging: PathBuf,
    target: PathBuf,
}

impl Staged {
    /// Where to build the database. Nothing is there: a file or directory
    /// of an earlier, interrupted creation was removed.
    pub fn path(&self) -> &Path {
        &self.staging
    }

    /// The built database (closed, every byte of it durable) becomes the
    /// store's: renamed to its name, and the directory synced. Returns its
    /// path.
    pub fn publish(self) -> Result<PathBuf> {
        std::fs::rename(&self.staging, &self.target).map_err(|e| {
            StorageError::io(
                format!(
                    "renaming {} to {}",
                    self.staging.display(),
                    self.target.display()
                ),
                e,
            )
        })?;
        fusee_storage::dirs::sync_dir(&self.dir)?;
        Ok(self.target)
    }
}

/// What [`claim`] found where the database belongs.
#[derive(Debug)]
pub enum Database {
    /// The store exists: open its database at this path (the backend
    /// refuses it if it is empty or damaged).
    Existing(PathBuf),
    /// A new store (or one whose creation a crash cut short): build the
    /// database at [`Staged::path`], then [`Staged::publish`] it.
    New(Staged),
}

/// Claims directory `dir` for `backend` in layout version `format`, whose
/// database is named `db` inside it: checks the marker (or, when there is
/// no store and `create` allows, creates the directory and the marker),
/// takes the lock, and says where the database is. The lock is returned
/// first and must be held as long as the database is open.
///
/// `create`: [`Create::IfMissing`] is what a service opening its own data
/// directory wants; [`Create::Never`] suits a tool that must only ever
/// open an existing store, so that a mistyped path is an error rather than
/// a new, empty store.
///
/// Errors, each before anything is written in a directory that is not a
/// store of this backend: [`StorageError::NotAStore`] (empty path, a file,
/// a directory of other files), [`StorageError::WrongBackend`],
/// [`StorageError::UnsupportedFormat`], [`StorageError::CorruptFile`] (a
/// damaged marker, or the database missing under a marker),
/// [`StorageError::NotFound`] (no store, with [`Create::Never`]),
/// [`StorageError::Locked`].
pub fn claim(
    dir: &Path,
    backend: &'static str,
    format: u32,
    create: Create,
    db: &str,
) -> Result<(DirLock, Database)> {
    check_path(dir)?;
    let staging_name = format!("{db}{STAGING_SUFFIX}");
    let own = [LOCK, staging_name.as_str()];
    let target = dir.join(db);
    let staging = dir.join(&staging_name);
    // Judge the directory before writing anything in it.
    match claim_dir(dir, backend, format, Create::Never, &own) {
        Ok(_) => {}
        Err(StorageError::NotFound { .. }) if create == Create::IfMissing => {
            fusee_storage::dirs::create_dir_durably(dir)?;
            let lock = lock_dir(dir)?;
            // The placeholder first: once the marker exists, a crash before
            // the database is published leaves it, which says "creation cut
            // short", not "database deleted".
            if !exists(&staging)? {
                File::create(&staging)
                    .map_err(|e| StorageError::io(format!("creating {}", staging.display()), e))?;
                fusee_storage::dirs::sync_dir(dir)?;
            }
            if claim_dir(dir, backend, format, Create::IfMissing, &own)? {
                return Ok((lock, Database::New(staged(dir, staging, target)?)));
            }
            // Another open created the store and let it go meanwhile.
            return Ok((lock, existing(dir, create, staging, target)?));
        }
        Err(e) => return Err(e),
    }
    let lock = lock_dir(dir)?;
    Ok((lock, existing(dir, create, staging, target)?))
}

/// The database of a store whose marker is valid (its lock held).
fn existing(dir: &Path, create: Create, staging: PathBuf, target: PathBuf) -> Result<Database> {
    if exists(&target)? {
        return Ok(Database::Existing(target));
    }
    if exists(&staging)? {
        // A creation cut short: no database was ever published here.
        return match create {
            Create::IfMissing => Ok(Database::New(staged(dir, staging, target)?)),
            Create::Never => Err(StorageError::NotFound {
                path: dir.display().to_string(),
            }),
        };
    }
    Err(StorageError::CorruptFile {
        file: target.display().to_string(),
        what: "the database is missing, though the FUSEE marker says a store was created here",
        at: 0,
    })
}

/// A staged database at `staging`, whatever an earlier attempt left there
/// removed.
fn staged(dir: &Path, staging: PathBuf, target: PathBuf) -> Result<Staged> {
    let removed = match std::fs::symlink_metadata(&staging) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&staging),
        Ok(_) => std::fs::remove_file(&staging),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    removed.map_err(|e| StorageError::io(format!("removing {}", staging.display()), e))?;
    Ok(Staged {
        dir: dir.to_path_buf(),
        staging,
        target,
    })
}

fn exists(path: &Path) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StorageError::io(
            format!("looking for {}", path.display()),
            e,
        )),
    }
}

/// An open database and the lock of its directory, closed in that order:
/// the lock is released only once the engine has let go of its files. A
/// storage keeps it for as long as the storage or any part it gave out
/// lives ([`crate::Shared`]).
#[derive(Debug)]
pub struct Held<D> {
    // Fields drop in declaration order: the database first.
    db: D,
    _lock: DirLock,
}

impl<D> Held<D> {
    /// `db`, opened under `lock`.
    pub fn new(db: D, lock: DirLock) -> Self {
        Self { db, _lock: lock }
    }
}

impl<D> std::ops::Deref for Held<D> {
    type Target = D;

    fn deref(&self) -> &D {
        &self.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("fusee-kv-storedir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn build(db: Database) -> PathBuf {
        match db {
            Database::New(s) => {
                std::fs::write(s.path(), b"db").expect("build");
                s.publish().expect("publish")
            }
            Database::Existing(p) => panic!("expected a new store, found {p:?}"),
        }
    }

    #[test]
    fn a_store_is_created_once_locked_and_found_again() {
        let dir = root("create");
        assert!(matches!(
            claim(&dir, "t", 2, Create::Never, "db"),
            Err(StorageError::NotFound { .. })
        ));
        assert!(!dir.exists(), "Never created nothing");
        let (lock, db) = claim(&dir, "t", 2, Create::IfMissing, "db").expect("claim");
        let path = build(db);
        assert!(matches!(
            claim(&dir, "t", 2, Create::IfMissing, "db"),
            Err(StorageError::Locked { .. })
        ));
        drop(lock);
        let (_lock, db) = claim(&dir, "t", 2, Create::Never, "db").expect("reopen");
        assert!(matches!(db, Database::Existing(p) if p == path));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_interrupted_creation_starts_again_and_a_deleted_database_is_corrupt() {
        let dir = root("interrupted");
        let (lock, db) = claim(&dir, "t", 2, Create::IfMissing, "db").expect("claim");
        // The process dies before publishing: a half-built database.
        let Database::New(s) = db else {
            panic!("not new")
        };
        std::fs::write(s.path(), b"half").expect("half");
        drop(lock);
        assert!(matches!(
            claim(&dir, "t", 2, Create::Never, "db"),
            Err(StorageError::NotFound { .. })
        ));
        let (lock, db) = claim(&dir, "t", 2, Create::IfMissing, "db").expect("again");
        let path = build(db);
        drop(lock);
        std::fs::remove_file(&path).expect("delete");
        match claim(&dir, "t", 2, Create::IfMissing, "db") {
            Err(StorageError::CorruptFile { file, .. }) => assert!(file.ends_with("db")),
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn foreign_directories_get_nothing_written() {
        let dir = root("foreign");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("theirs"), b"x").expect("file");
        assert!(matches!(
            claim(&dir, "t", 2, Create::IfMissing, "db"),
            Err(StorageError::NotAStore { .. })
        ));
        let names: Vec<_> = std::fs::read_dir(&dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["theirs"]);
        assert!(matches!(
            claim(Path::new(""), "t", 2, Create::IfMissing, "db"),
            Err(StorageError::NotAStore { .. })
        ));
        let (lock, db) = claim(&dir.join("ok"), "t", 2, Create::IfMissing, "db").expect("ok");
        build(db);
        drop(lock);
        assert!(matches!(
            claim(&dir.join("ok"), "u", 2, Create::IfMissing, "db"),
            Err(StorageError::WrongBackend { .. })
        ));
        assert!(matches!(
            claim(&dir.join("ok"), "t", 1, Create::IfMissing, "db"),
            Err(StorageError::UnsupportedFormat { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
