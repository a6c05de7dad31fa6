//! [`FileStorage`]: one directory per storage, one subdirectory per shard.
//!
//! ```text
//! <dir>/LOCK                       held while the storage is open
//! <dir>/shard-NNNNNNNNNN/          one per shard (number in 10 digits)
//!     log/NNNNNNNNNNNNNNNNNNNN.seg   log segments        (crate::log)
//!     store-G.dat, store-G.rel       run-store generation (crate::store)
//!     index-N.idx                    index               (crate::checkpoint)
//!     slot-0, slot-1                 checkpoint slots    (crate::slot)
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fusee_storage::{Recovered, Result, ShardParts, Storage, StorageError};

use crate::checkpoint::{FileCheckpoint, SLOT_NAMES};
use crate::error::{FileError, IoContext};
use crate::io::{Io, OpenMode, RealIo};
use crate::log::FileLog;
use crate::shared::{FileOptions, Shared};
use crate::store::{FileRuns, StoreMark, position_of};

fn shard_name(shard: u32) -> String {
    format!("shard-{shard:010}")
}

fn parse_shard_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("shard-")?;
    (digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Marks a shard open while any of its parts lives.
pub struct ShardGuard {
    open: Arc<Mutex<BTreeSet<u32>>>,
    shard: u32,
}

impl Drop for ShardGuard {
    fn drop(&mut self) {
        lock(&self.open).remove(&self.shard);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A storage in a directory of plain files. See the [module docs](self).
pub struct FileStorage<I: Io = RealIo> {
    io: Arc<I>,
    dir: PathBuf,
    options: FileOptions,
    closed: Arc<AtomicBool>,
    open: Arc<Mutex<BTreeSet<u32>>>,
    lock: Mutex<Option<I::Lock>>,
}

impl FileStorage<RealIo> {
    /// Opens (creating if needed) the storage in directory `dir`. Another
    /// process holding it is a [`FileError::Locked`] error.
    pub fn open(
        dir: impl AsRef<Path>,
        options: FileOptions,
    ) -> std::result::Result<Self, FileError> {
        Self::open_with(RealIo, dir, options)
    }
}

impl<I: Io> FileStorage<I> {
    /// Opens the storage in `dir` through the file system `io` (a simulated
    /// disk in tests).
    pub fn open_with(
        io: I,
        dir: impl AsRef<Path>,
        options: FileOptions,
    ) -> std::result::Result<Self, FileError> {
        let dir = dir.as_ref().to_path_buf();
        crate::shared::create_dir_durably(&io, &dir, options.flush)?;
        let lock = io.lock(&dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock => FileError::Locked { path: dir.clone() },
            _ => FileError::Io {
                op: "lock",
                path: dir.clone(),
                source: e,
            },
        })?;
        Ok(Self {
            io: Arc::new(io),
            dir,
            options,
            closed: Arc::new(AtomicBool::new(false)),
            open: Arc::new(Mutex::new(BTreeSet::new())),
            lock: Mutex::new(Some(lock)),
        })
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
        let dir = &shared.dir;
        shared.create_dir(dir)?;
        for name in SLOT_NAMES {
            let path = dir.join(name);
            if !self.io.exists(&path) {
                self.io
                    .open(&path, OpenMode::CreateNew)
                    .ctx("create slot", &path)?;
                shared.sync_dir(dir)?;
            }
        }
        let opened = FileCheckpoint::open(shared.clone())?;
        let mark = opened.slot.as_ref().map(|s| StoreMark {
            generation: s.store_gen,
            len: s.store_len,
            releases_len: s.releases_len,
        });
        let runs = FileRuns::open(shared.clone(), mark)?;
        let log = FileLog::open(shared.clone())?;
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
        if !lock(&self.open).insert(shard) {
            return Err(StorageError::AlreadyOpen { shard });
        }
        let guard = Arc::new(ShardGuard {
            open: self.open.clone(),
            shard,
        });
        let shared = Arc::new(Shared {
            io: self.io.clone(),
            shard,
            dir: self.dir.join(shard_name(shard)),
            options: self.options.clone(),
            closed: self.closed.clone(),
            _guard: guard,
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
