//! The log seal of each shard, for both engines: a file beside the
//! database, `<dir>/seal-NNNNNNNNNN` (the shard in 10 digits), in the
//! format of [`fusee_storage::seal`] (two slots written in turn, each
//! synced; byte by byte there).
//!
//! Why beside the database and not in it: what the seal must catch is the
//! database itself opening as it was before its newest durable writes
//! (redb's commit-slot byte flipped, RocksDB's WAL damaged before its
//! point-in-time replay), which no row inside it can say. A file the engine
//! never touches records how far each shard's log was durable; opening a
//! shard whose log row ends before it is
//! [`fusee_storage::StorageError::LostRecords`], decided before the
//! open-time cleanup writes anything ([`crate::ShardHandle::check_seal`]).
//!
//! A seal's I/O runs on whatever thread runs its ticket and holds the
//! database (and so the directory's lock) while it writes: a ticket run
//! after the storage closed writes nothing.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fusee_core::record::Lsn;
use fusee_storage::seal::SealFile;
use fusee_storage::{FlushWork, Result};

/// The seal file of `shard` for the database at `db` (a file or a
/// directory inside the store's directory): in the store's directory.
pub fn seal_path(db: &Path, shard: u32) -> PathBuf {
    seal_path_in(db.parent().unwrap_or_else(|| Path::new(".")), shard)
}

/// The seal file of `shard` in the store's directory `dir`.
pub fn seal_path_in(dir: &Path, shard: u32) -> PathBuf {
    dir.join(format!("seal-{shard:010}"))
}

/// Reads (never opening it for writing) the seal file at `path` of
/// `shard` and checks it against a log row that ends at `last`, as
/// opening the shard for writing does ([`crate::ShardHandle::check_seal`]):
/// `Ok` for a missing file or a log that holds everything sealed,
/// [`fusee_storage::StorageError::LostRecords`] for one that ends before
/// its seal, `CorruptFile` for a damaged seal file. For readers that must
/// change nothing (`fusee verify`, `fusee inspect`).
pub fn check_seal_read_only(path: &Path, shard: u32, last: Lsn) -> Result<()> {
    let shown = path.display().to_string();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(fusee_storage::StorageError::io(
                format!("reading {shown}"),
                e,
            ));
        }
    };
    fusee_storage::seal::SealState::decode(&bytes, shard, &shown)?.check(last, shard, &shown)
}

/// Runs a seal's write while the storage is open, holding it open
/// meanwhile; `Closed` once it is not.
type WhileOpen = dyn Fn(&mut dyn FnMut() -> Result<()>) -> Result<()> + Send + Sync;

/// A shard's seal file, shared by its log part and the seal in flight.
#[derive(Clone)]
pub struct SealSlot {
    file: Arc<Mutex<SealFile>>,
    while_open: Arc<WhileOpen>,
}

impl SealSlot {
    /// `file`, written only while `while_open` lets it.
    pub(crate) fn new(file: SealFile, while_open: Arc<WhileOpen>) -> Self {
        Self {
            file: Arc::new(Mutex::new(file)),
            while_open,
        }
    }

    /// The work of a seal of `lsn`.
    pub(crate) fn work(&self, lsn: Lsn) -> Box<dyn FlushWork> {
        Box::new(SealWork {
            slot: self.clone(),
            lsn,
        })
    }
}

impl std::fmt::Debug for SealSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("SealSlot")
            .field("path", &file.path())
            .field("sealed", &file.sealed())
            .finish()
    }
}

/// One slot is the same slot: [`crate::ShardState`] compares by identity.
impl PartialEq for SealSlot {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.file, &other.file)
    }
}

impl Eq for SealSlot {}

struct SealWork {
    slot: SealSlot,
    lsn: Lsn,
}

impl FlushWork for SealWork {
    fn run(&mut self) -> Result<()> {
        let (file, lsn) = (&self.slot.file, self.lsn);
        (self.slot.while_open)(&mut || {
            let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
            f.write(lsn).map(|_| ())
        })
    }
}
