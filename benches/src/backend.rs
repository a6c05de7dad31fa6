//! Fusee backends as comparison subjects: any [`Storage`] becomes a
//! [`Subject`] through a [`Factory`], and [`backends`] lists every backend
//! this build has.
//!
//! # Adding a backend
//!
//! 1. Implement [`Factory`] for it (open a storage in a directory; close it
//!    and open the same directory again).
//! 2. Push `Box::new(Backend(YourFactory))` in [`backends`] under the
//!    `fusee-benches` Cargo feature that enables the backend's crate
//!    (`file`, `redb`, `rocksdb` exist and pull the backend crates in).
//!
//! Everything else (the measurements, ratios, reports) is written once
//! against [`Target`] and needs no change.
//!
//! A factory, measured on a tiny plan (a real backend opens its files in
//! `dir`; this one wraps the memory backend):
//!
//! ```
//! use std::path::Path;
//! use fusee_benches::measure::{Metric, measure};
//! use fusee_benches::plan::Plan;
//! use fusee_benches::progress::Progress;
//! use fusee_benches::{Backend, Factory};
//! use fusee_storage::{MemoryStorage, Storage};
//!
//! struct Mine;
//!
//! impl Factory for Mine {
//!     type S = MemoryStorage;
//!     fn name(&self) -> &'static str {
//!         "mine"
//!     }
//!     fn flush_method(&self) -> String {
//!         "none".into()
//!     }
//!     fn open(&self, _dir: &Path) -> fusee_storage::Result<MemoryStorage> {
//!         Ok(MemoryStorage::new())
//!     }
//!     fn reopen(&self, s: MemoryStorage, _dir: &Path) -> fusee_storage::Result<MemoryStorage> {
//!         s.close()?; // a file backend: close, then open `dir` again
//!         Ok(s.reopen())
//!     }
//! }
//!
//! let mut plan = Plan::quick().with_samples(8);
//! (plan.frames, plan.recovery_records) = (10, 1000);
//! let figures = measure(&Backend(Mine), &plan, &std::env::temp_dir(), &Progress::new(true))?;
//! assert!(figures.get(Metric::Recovery).is_some());
//! # Ok::<(), fusee_benches::BenchError>(())
//! ```
//!
//! # How the workload maps onto the contract
//!
//! | target call | storage call |
//! |---|---|
//! | `append(log, r)` | `LogStore::append(last_lsn + 1, r)` on shard `log.number()` |
//! | `flush(log)` | `LogStore::flush` |
//! | `put_frame` | `RunStore::append` on shard [`FRAME_SHARD`] |
//! | `commit_frames` | `CheckpointStore::commit` with an empty delta and an empty checkpoint |
//! | `get_frame` | `RunStore::read` |
//! | `restart` | drop every part, [`Factory::reopen`] |
//! | `replay(log)` | `Storage::open_shard` then `LogStore::read(0, ..)` |

use std::path::{Path, PathBuf};

use fusee_core::shard::BlobRef;
use fusee_storage::{
    CheckpointStore, IndexChange, LogStore, MemoryStorage, RunStore, ShardParts, Storage,
};

use crate::target::{LogId, Role, Subject, Target, TargetResult};

/// The shard the run-store frames go to (the logs use shards 0 and 1).
pub const FRAME_SHARD: u32 = 2;

/// Opens one kind of [`Storage`] in a directory: all the comparison needs
/// to measure a backend.
pub trait Factory: Send + Sync {
    /// The storage opened.
    type S: Storage;

    /// Short lower-case name, as given to `--backends`.
    fn name(&self) -> &'static str;

    /// How the backend makes a flush durable, for the report.
    fn flush_method(&self) -> String;

    /// Whether a flush survives power loss (false for memory only).
    fn durable(&self) -> bool {
        true
    }

    /// Opens a fresh storage whose files live in `dir` (empty, existing).
    fn open(&self, dir: &Path) -> fusee_storage::Result<Self::S>;

    /// Closes `storage` (every part it gave out is already dropped) and
    /// opens the same directory again, as a restarted process would.
    fn reopen(&self, storage: Self::S, dir: &Path) -> fusee_storage::Result<Self::S>;
}

/// A [`Factory`] as a comparison [`Subject`].
#[derive(Clone, Debug, Default)]
pub struct Backend<F>(pub F);

impl<F: Factory> Subject for Backend<F> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn role(&self) -> Role {
        Role::Backend
    }

    fn flush_method(&self) -> String {
        self.0.flush_method()
    }

    fn durable(&self) -> bool {
        self.0.durable()
    }

    fn open<'a>(&'a self, dir: &Path) -> TargetResult<Box<dyn Target + 'a>> {
        let storage = self.0.open(dir)?;
        Ok(Box::new(StorageTarget {
            factory: &self.0,
            dir: dir.to_path_buf(),
            storage: Some(storage),
            logs: [None, None],
            frames: None,
        }))
    }
}

/// A storage with the shards the workload opened.
struct StorageTarget<'a, F: Factory> {
    factory: &'a F,
    dir: PathBuf,
    /// `None` only inside `restart` (a failed reopen leaves it so).
    storage: Option<F::S>,
    logs: [Option<ShardParts<F::S>>; 2],
    frames: Option<ShardParts<F::S>>,
}

impl<F: Factory> StorageTarget<'_, F> {
    fn storage(&self) -> TargetResult<&F::S> {
        self.storage
            .as_ref()
            .ok_or_else(|| "the storage failed to reopen".into())
    }

    fn log(&mut self, log: LogId) -> TargetResult<&mut ShardParts<F::S>> {
        let i = log.number() as usize;
        if self.logs[i].is_none() {
            let parts = self.storage()?.open_shard(log.number())?;
            self.logs[i] = Some(parts);
        }
        self.logs[i]
            .as_mut()
            .ok_or_else(|| "log shard not open".into())
    }

    fn frames(&mut self) -> TargetResult<&mut ShardParts<F::S>> {
        if self.frames.is_none() {
            let parts = self.storage()?.open_shard(FRAME_SHARD)?;
            self.frames = Some(parts);
        }
        self.frames
            .as_mut()
            .ok_or_else(|| "frame shard not open".into())
    }
}

impl<F: Factory> Target for StorageTarget<'_, F> {
    fn prepare_log(&mut self, log: LogId, _records: u64, _bytes: u64) -> TargetResult<()> {
        self.log(log).map(|_| ())
    }

    fn append(&mut self, log: LogId, record: &[u8]) -> TargetResult<()> {
        let parts = self.log(log)?;
        let lsn = parts.log.last_lsn() + 1;
        parts.log.append(lsn, record)?;
        Ok(())
    }

    fn flush(&mut self, log: LogId) -> TargetResult<()> {
        self.log(log)?.log.flush()?;
        Ok(())
    }

    fn prepare_frames(&mut self, _frames: u64, _bytes: u64) -> TargetResult<()> {
        self.frames().map(|_| ())
    }

    fn put_frame(&mut self, frame: &[u8]) -> TargetResult<BlobRef> {
        Ok(self.frames()?.runs.append(frame)?)
    }

    fn commit_frames(&mut self) -> TargetResult<()> {
        let parts = self.frames()?;
        parts
            .checkpoint
            .commit(&mut parts.runs, IndexChange::Delta(&[]), &[])?;
        Ok(())
    }

    fn get_frame(&mut self, at: BlobRef, out: &mut Vec<u8>) -> TargetResult<()> {
        self.frames()?.runs.read(at, out)?;
        Ok(())
    }

    fn restart(&mut self) -> TargetResult<()> {
        self.logs = [None, None];
        self.frames = None;
        let storage = self
            .storage
            .take()
            .ok_or("the storage failed to reopen earlier")?;
        self.storage = Some(self.factory.reopen(storage, &self.dir)?);
        Ok(())
    }

    fn replay(&mut self, log: LogId, visit: &mut dyn FnMut(&[u8])) -> TargetResult<u64> {
        let parts = self.log(log)?;
        let mut n = 0u64;
        let first = parts.log.first_lsn();
        if first > parts.log.last_lsn() {
            return Ok(0);
        }
        parts.log.read(first - 1, &mut |_, bytes| {
            n += 1;
            visit(bytes);
            Ok(())
        })?;
        Ok(n)
    }
}

/// The in-memory reference backend: nothing is ever written to disk, so
/// its figures are the cost of the contract's bookkeeping alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory;

impl Factory for Memory {
    type S = MemoryStorage;

    fn name(&self) -> &'static str {
        "memory"
    }

    fn flush_method(&self) -> String {
        "none (in memory)".into()
    }

    fn durable(&self) -> bool {
        false
    }

    fn open(&self, _dir: &Path) -> fusee_storage::Result<MemoryStorage> {
        Ok(MemoryStorage::new())
    }

    fn reopen(&self, storage: MemoryStorage, _dir: &Path) -> fusee_storage::Result<MemoryStorage> {
        Ok(storage.reopen())
    }
}

/// The file backend, with its default options (64 MiB segments,
/// `fdatasync`).
#[cfg(feature = "file")]
#[derive(Clone, Copy, Debug, Default)]
pub struct File;

#[cfg(feature = "file")]
impl Factory for File {
    type S = fusee_storage_file::FileStorage;

    fn name(&self) -> &'static str {
        "file"
    }

    fn flush_method(&self) -> String {
        use fusee_storage_file::FlushMethod;
        match fusee_storage_file::FileOptions::default().flush {
            FlushMethod::DataSync => "fdatasync",
            FlushMethod::FullSync => "fsync",
            FlushMethod::None => "none",
        }
        .into()
    }

    fn open(&self, dir: &Path) -> fusee_storage::Result<Self::S> {
        fusee_storage_file::FileStorage::open(dir, Default::default())
    }

    fn reopen(&self, storage: Self::S, dir: &Path) -> fusee_storage::Result<Self::S> {
        storage.close()?;
        drop(storage);
        self.open(dir)
    }
}

/// The redb backend (one database file; flushes and commits are durable
/// redb transactions).
#[cfg(feature = "redb")]
#[derive(Clone, Copy, Debug, Default)]
pub struct Redb;

#[cfg(feature = "redb")]
impl Factory for Redb {
    type S = fusee_storage_redb::RedbStorage;

    fn name(&self) -> &'static str {
        "redb"
    }

    fn flush_method(&self) -> String {
        "redb commit, Durability::Immediate".into()
    }

    fn open(&self, dir: &Path) -> fusee_storage::Result<Self::S> {
        fusee_storage_redb::RedbStorage::open(dir)
    }

    fn reopen(&self, storage: Self::S, dir: &Path) -> fusee_storage::Result<Self::S> {
        storage.close()?;
        drop(storage);
        self.open(dir)
    }
}

/// The RocksDB backend (one database, a column family per part; flushes
/// and commits are write batches written with `sync`).
#[cfg(feature = "rocksdb")]
#[derive(Clone, Copy, Debug, Default)]
pub struct Rocksdb;

#[cfg(feature = "rocksdb")]
impl Factory for Rocksdb {
    type S = fusee_storage_rocksdb::RocksStorage;

    fn name(&self) -> &'static str {
        "rocksdb"
    }

    fn flush_method(&self) -> String {
        "RocksDB WriteBatch, WriteOptions::set_sync(true) (WAL fsync)".into()
    }

    fn open(&self, dir: &Path) -> fusee_storage::Result<Self::S> {
        fusee_storage_rocksdb::RocksStorage::open(dir)
    }

    fn reopen(&self, storage: Self::S, dir: &Path) -> fusee_storage::Result<Self::S> {
        storage.close()?;
        drop(storage);
        self.open(dir)
    }
}

/// Every backend this build of `fusee-benches` has, memory first: one per
/// enabled backend feature (see the module documentation to add one).
pub fn backends() -> Vec<Box<dyn Subject>> {
    #[allow(unused_mut)]
    let mut list: Vec<Box<dyn Subject>> = vec![Box::new(Backend(Memory))];
    #[cfg(feature = "file")]
    list.push(Box::new(Backend(File)));
    #[cfg(feature = "rocksdb")]
    list.push(Box::new(Backend(Rocksdb)));
    #[cfg(feature = "redb")]
    list.push(Box::new(Backend(Redb)));
    list
}
