//! [`FileStorage`]: one directory per storage, one subdirectory per shard.
//!
//! ```text
//! <dir>/FUSEE                      identity marker: backend `file`, FORMAT
//!                                  (fusee_storage::identity)
//! <dir>/LOCK                       held while the storage or any part lives
//! <dir>/shard-NNNNNNNNNN/          one per shard (number in 10 digits)
//!     log/NNNNNNNNNNNNNNNNNNNN.seg   log segments        (crate::log)
//!     log/manifest-0, manifest-1     log manifest        (crate::manifest)
//!     store-G.dat, store-G.rel       run-store generation (crate::store)
//!     index-N.idx                    index               (crate::checkpoint)
//!     slot-0, slot-1                 checkpoint slots    (crate::slot)
//!     seal                           log seal            (crate::seal)
//! ```
//!
//! # Opening
//!
//! The directory is claimed before anything is written in it: a missing or
//! empty directory becomes a new store (unless [`Create::Never`](crate::Create::Never)), a store
//! of this backend and [`FORMAT`] opens, and anything else (another
//! backend's store, another program's files, a damaged marker, an empty
//! path, a file) is a named error with nothing written.
//!
//! A shard is **initialized** once its first open completed, which the log
//! manifest records. Until then a missing slot or manifest file is a
//! creation a crash cut short, and is made; from then on it is damage, and
//! an error naming the file.
//!
//! # Ownership
//!
//! The directory's lock is shared by the storage and every part it gave
//! out: dropping or closing the storage while a shard's parts live keeps
//! the lock, so no other open (in this process or another) can write the
//! shard meanwhile; it is released when the last of them drops.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fusee_storage::identity::{self, Found, Verdict};
use fusee_storage::{Recovered, Result, ShardParts, Storage, StorageError};

use crate::checkpoint::FileCheckpoint;
use crate::error::{FileError, IoContext};
use crate::io::{Io, IoFile, OpenMode, RealIo};
use crate::log::FileLog;
use crate::shared::{FileOptions, OpenShards, ShardGuard, Shared, lock};
use crate::store::{FileRuns, StoreMark, position_of};

/// The file backend's format version, in its identity marker. Version 2:
/// the log manifest, and checkpoint slots written as a pair.
pub const FORMAT: u32 = 2;

/// The backend's name in identity markers.
const BACKEND: &str = "file";

fn shard_name(shard: u32) -> String {
    format!("shard-{shard:010}")
}

fn parse_shard_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("shard-")?;
    (digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// A storage in a directory of plain files. See the [module docs](self).
pub struct FileStorage<I: Io = RealIo> {
    io: Arc<I>,
    dir: PathBuf,
    options: FileOptions,
    closed: Arc<AtomicBool>,
    open: OpenShards,
    /// The storage's share of the directory lock; every part holds one too.
    lock: Mutex<Option<Arc<I::Lock>>>,
}

impl FileStorage<RealIo> {
    /// Opens (creating it if needed and `options.create` allows) the
    /// storage in directory `dir`. See the [module docs](self) for what is
    /// refused; another open holding the directory, in this process or
    /// another, is [`StorageError::Locked`].
    pub fn open(dir: impl AsRef<Path>, options: FileOptions) -> Result<Self> {
        Self::open_with(RealIo, dir, options)
    }
}

impl<I: Io> FileStorage<I> {
    /// Opens the storage in `dir` through the file system `io` (a simulated
    /// disk in tests).
    pub fn open_with(io: I, dir: impl AsRef<Path>, options: FileOptions) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        identity::check_path(&dir)?;
        let found = Self::inspect(&io, &dir)?;
        // Judged once before anything is written (a missing directory is
        // created only if the verdict allows), and again under the lock.
        identity::judge(&dir, found, BACKEND, FORMAT, options.create)?;
        crate::shared::create_dir_durably(&io, &dir, options.flush)?;
        let lock = io.lock(&dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock => StorageError::Locked {
                path: dir.display().to_string(),
            },
            _ => StorageError::io(format!("lock {}", dir.display()), e),
        })?;
        let found = Self::inspect(&io, &dir)?;
        if identity::judge(&dir, found, BACKEND, FORMAT, options.create)? == Verdict::Create {
            Self::write_marker(&io, &dir, &options)?;
        }
        Ok(Self {
            io: Arc::new(io),
            dir,
            options,
            closed: Arc::new(AtomicBool::new(false)),
            open: Arc::new(Mutex::new(BTreeSet::new())),
            lock: Mutex::new(Some(Arc::new(lock))),
        })
    }

    /// What `dir` holds, as [`identity::judge`] wants it.
    fn inspect(io: &I, dir: &Path) -> Result<Found> {
        if !io.exists(dir) {
            return Ok(Found::Missing);
        }
        let Ok(names) = io.list_dir(dir) else {
            return Ok(Found::NotADirectory);
        };
        if names.iter().any(|n| n == identity::MARKER) {
            let path = dir.join(identity::MARKER);
            let bytes = io
                .open(&path, OpenMode::Existing)
                .and_then(|f| f.map())
                .map_err(|e| StorageError::io(format!("read {}", path.display()), e))?;
            return Ok(Found::Marker(bytes.to_vec()));
        }
        let own = |n: &String| n == "LOCK" || n == identity::MARKER_TMP;
        Ok(if names.iter().all(own) {
            Found::Empty
        } else {
            Found::Unmarked
        })
    }

    /// Writes the identity marker durably: to `FUSEE.tmp`, synced, renamed,
    /// directory synced.
    fn write_marker(io: &I, dir: &Path, options: &FileOptions) -> Result<()> {
        let tmp = dir.join(identity::MARKER_TMP);
        let bytes = identity::Identity {
            backend: BACKEND.to_string(),
            format: FORMAT,
        }
        .encode();
        let write = || -> std::result::Result<(), FileError> {
            if io.exists(&tmp) {
                io.remove_file(&tmp).ctx("remove", &tmp)?;
            }
            let f = io.open(&tmp, OpenMode::CreateNew).ctx("create", &tmp)?;
            f.write_at(0, &bytes).ctx("write", &tmp)?;
            if options.flush != crate::shared::FlushMethod::None {
                f.sync_all().ctx("fsync", &tmp)?;
            }
            io.rename(&tmp, &dir.join(identity::MARKER))
                .ctx("rename", &tmp)?;
            if options.flush != crate::shared::FlushMethod::None {
                io.sync_dir(dir).ctx("fsync directory", dir)?;
            }
            Ok(())
        };
        write().map_err(StorageError::from)
    }

    /// The storage's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file system it runs on.
    pub fn io(&self) -> &I {
        &self.io
    }

    fn open_parts(
        &self,
        shared: Arc<Shared<I>>,
    ) -> std::result::Result<ShardParts<Self>, FileError> {
        shared.create_dir(&shared.dir)?;
        let manifest = FileLog::read_manifest(&shared)?;
        let initialized = manifest.is_some_and(|m| m.carrier > 0);
        let opened = FileCheckpoint::open(shared.clone(), initialized)?;
        let mark = opened.slot.as_ref().map(|s| StoreMark {
            generation: s.store_gen,
            len: s.store_len,
            releases_len: s.releases_len,
        });
        let runs = FileRuns::open(shared.clone(), mark)?;
        let log = FileLog::open(shared.clone(), manifest.filter(|_| initialized))?;
        let recovered = Recovered {
            index_records: opened.slot.as_ref().map_or(0, |s| s.index_records),
            store_position: mark.map_or(0, |m| position_of(m.generation, m.len)),
            checkpoint: opened.slot.map(|s| s.checkpoint),
        };
        Ok(ShardParts {
            log,
            runs,
            checkpoint: opened.part,
            recovered,
        })
    }
}

impl<I: Io> Storage for FileStorage<I> {
    type Log = FileLog<I>;
    type Runs = FileRuns<I>;
    type Checkpoint = FileCheckpoint<I>;

    fn open_shard(&self, shard: u32) -> Result<ShardParts<Self>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StorageError::Closed { what: "storage" });
        }
        let Some(dir_lock) = lock(&self.lock).clone() else {
            return Err(StorageError::Closed { what: "storage" });
        };
        let Some(guard) = ShardGuard::claim(&self.open, shard) else {
            return Err(StorageError::AlreadyOpen { shard });
        };
        let shared = Arc::new(Shared {
            io: self.io.clone(),
            shard,
            dir: self.dir.join(shard_name(shard)),
            options: self.options.clone(),
            closed: self.closed.clone(),
            _guard: Arc::new(guard),
            _lock: dir_lock,
        });
        // On failure the guard drops with `shared`, freeing the shard.
        self.open_parts(shared).map_err(StorageError::from)
    }

    fn shards(&self) -> Result<Vec<u32>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StorageError::Closed { what: "storage" });
        }
        let names = self
            .io
            .list_dir(&self.dir)
            .map_err(|e| StorageError::io(format!("list {}", self.dir.display()), e))?;
        let mut shards: Vec<u32> = names.iter().filter_map(|n| parse_shard_name(n)).collect();
        shards.sort_unstable();
        Ok(shards)
    }

    fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        lock(&self.lock).take();
        Ok(())
    }
}

impl<I: Io> std::fmt::Debug for FileStorage<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStorage")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}
