//! The state a storage on some engine database `D` shares with its shards'
//! parts ([`Shared`]), and one open of one shard ([`ShardHandle`]): the
//! database until the storage closes, the one-owner-per-shard guard and the
//! fault switches. Nothing here touches the database itself.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use fusee_storage::{Result, StorageError};

use crate::{FaultSwitches, OpenShards};

/// What a storage and its parts share.
#[derive(Debug)]
pub struct Shared<D> {
    path: PathBuf,
    /// `None` once closed: every call then fails with `Closed`.
    db: RwLock<Option<Arc<D>>>,
    open: OpenShards,
    faults: FaultSwitches,
}

impl<D> Shared<D> {
    /// The state of a storage just opened on `db`, named `path` in errors.
    pub fn new(path: PathBuf, db: D) -> Self {
        Self {
            path,
            db: RwLock::new(Some(Arc::new(db))),
            open: OpenShards::default(),
            faults: FaultSwitches::default(),
        }
    }

    /// The database's path (a file or a directory).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The database, or `Closed { what }` after [`Shared::close`]. Calls in
    /// flight keep it alive past the close.
    pub fn db(&self, what: &'static str) -> Result<Arc<D>> {
        let db = self.db.read().unwrap_or_else(|e| e.into_inner());
        db.clone().ok_or(StorageError::Closed { what })
    }

    /// `Closed { what }` after [`Shared::close`].
    pub fn check_open(&self, what: &'static str) -> Result<()> {
        let db = self.db.read().unwrap_or_else(|e| e.into_inner());
        match *db {
            Some(_) => Ok(()),
            None => Err(StorageError::Closed { what }),
        }
    }

    /// Drops the storage's reference to the database: it closes once calls
    /// in flight end, and every later call is `Closed`.
    pub fn close(&self) {
        let mut db = self.db.write().unwrap_or_else(|e| e.into_inner());
        *db = None;
    }

    /// The fault switches (tests and the conformance harness).
    pub fn faults(&self) -> &FaultSwitches {
        &self.faults
    }

    /// Claims `shard` for one owner (`AlreadyOpen` if it has one); the
    /// handle releases it when dropped.
    pub fn claim(self: &Arc<Self>, shard: u32) -> Result<ShardHandle<D>> {
        self.open.claim(shard)?;
        Ok(ShardHandle {
            shared: Arc::clone(self),
            id: shard,
        })
    }
}

/// One open of one shard, shared by its three parts: dropping it releases
/// the shard for the next open.
#[derive(Debug)]
pub struct ShardHandle<D> {
    shared: Arc<Shared<D>>,
    id: u32,
}

impl<D> Drop for ShardHandle<D> {
    fn drop(&mut self) {
        self.shared.open.release(self.id);
    }
}

impl<D> ShardHandle<D> {
    /// The shard.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The database, or `Closed { what }` after the storage closed.
    pub fn db(&self, what: &'static str) -> Result<Arc<D>> {
        self.shared.db(what)
    }

    /// `Closed { what }` after the storage closed.
    pub fn check_open(&self, what: &'static str) -> Result<()> {
        self.shared.check_open(what)
    }

    /// Checks the shard's seal ([`crate::seal`]) against its log row, as
    /// read at open in `state`, and returns `state` with the seal the log
    /// part writes. Call it before the open writes anything (the cleanup):
    /// a log that ends before its sealed LSN is
    /// [`StorageError::LostRecords`] naming the seal file and both LSNs,
    /// and nothing may be deleted on top of that loss. A damaged seal file
    /// is `CorruptFile` naming it; a missing one is "never sealed". Reads
    /// only: the file is written by the first seal.
    pub fn check_seal(&self, mut state: crate::ShardState) -> Result<crate::ShardState>
    where
        D: Send + Sync + 'static,
    {
        let file = fusee_storage::seal::SealFile::open(
            &crate::seal_path(self.shared.path(), self.id),
            self.id,
        )?;
        file.check(state.log.last)?;
        let shared = Arc::clone(&self.shared);
        state.seal = Some(crate::SealSlot::new(
            file,
            Arc::new(move |write: &mut dyn FnMut() -> Result<()>| {
                // Held while the seal writes: the database, and with it
                // the directory's lock (no other storage owns the file).
                let _db = shared.db("log")?;
                write()
            }),
        ));
        Ok(state)
    }

    /// Whether a flush failure is armed for this shard (disarming it).
    pub fn take_fail_flush(&self) -> bool {
        self.shared.faults.take_flush(self.id)
    }

    /// Whether a commit failure is armed for this shard (disarming it).
    pub fn take_fail_commit(&self) -> bool {
        self.shared.faults.take_commit(self.id)
    }

    /// The injected I/O error of an armed base-write failure (disarming
    /// it), for the base write described by `doing`; `Ok` if none is armed.
    pub fn base_write_fault(&self, doing: &str) -> Result<()> {
        if self.shared.faults.take_base_write(self.id) {
            return Err(crate::injected(doing, self.id));
        }
        Ok(())
    }

    /// Whether the armed commit crash point is `step` (disarming it if so).
    pub fn crash_point(&self, step: u32) -> bool {
        self.shared.faults.crash_point(self.id, step)
    }
}
