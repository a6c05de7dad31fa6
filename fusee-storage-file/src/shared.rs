//! What a shard's three parts share: the file system, the shard's paths,
//! the options, the storage's closed flag and the guard that marks the
//! shard open. A leaf: the storage and every part import it, it imports
//! none of them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fusee_storage::StorageError;
pub use fusee_storage::identity::Create;

use crate::error::FileError;
use crate::io::Io;

/// How a flush makes data durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FlushMethod {
    /// `fdatasync`: data and the metadata needed to read it (the default;
    /// segments are preallocated, so it writes no metadata).
    #[default]
    DataSync,
    /// `fsync`: data and all metadata.
    FullSync,
    /// No sync at all: nothing is durable before the OS writes it back.
    /// Only for tests and benchmarks that measure everything but the disk.
    None,
}

/// Options of the file backend.
#[derive(Clone, Debug)]
pub struct FileOptions {
    /// Bytes of a log segment file (preallocated with zeros). A record too
    /// large for one gets a segment of its own. The segment an open starts
    /// is smaller (see [`OPEN_SEGMENT_BYTES`]), so a process that restarts
    /// often does not leave a full segment per run.
    pub segment_bytes: u64,
    /// How flushes and commits reach the disk.
    pub flush: FlushMethod,
    /// Whether a missing or empty directory becomes a new store
    /// ([`Create::IfMissing`], the default) or is
    /// [`fusee_storage::StorageError::NotFound`] ([`Create::Never`]).
    pub create: Create,
}

/// 64 MiB: a segment's zero-fill costs about as much as writing it, once.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// The size of the segment every open starts (when
/// [`FileOptions::segment_bytes`] is larger): 1 MiB. A shard that takes
/// little between restarts then costs 1 MiB per restart until a checkpoint
/// discards it, not a full segment, and an open zero-fills 1 MiB instead of
/// 64; a shard under load rolls into full-size segments, prepared in the
/// background, after its first MiB.
pub const OPEN_SEGMENT_BYTES: u64 = 1 << 20;

impl Default for FileOptions {
    fn default() -> Self {
        Self {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            flush: FlushMethod::DataSync,
            create: Create::IfMissing,
        }
    }
}

/// The shards of one storage that are open (have a part alive).
pub(crate) type OpenShards = Arc<Mutex<BTreeSet<u32>>>;

/// Marks a shard open while any of its parts lives.
pub(crate) struct ShardGuard {
    open: OpenShards,
    shard: u32,
}

impl ShardGuard {
    /// Marks `shard` open in `open`; `None` if it already is.
    pub(crate) fn claim(open: &OpenShards, shard: u32) -> Option<Self> {
        lock(open).insert(shard).then(|| Self {
            open: open.clone(),
            shard,
        })
    }
}

impl Drop for ShardGuard {
    fn drop(&mut self) {
        lock(&self.open).remove(&self.shard);
    }
}

/// Locks `m`, even after a thread panicked holding it: each change to what
/// it guards (a set of shard numbers, a lock handle) is a single call.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A shard's shared context.
pub(crate) struct Shared<I: Io> {
    pub(crate) io: Arc<I>,
    pub(crate) shard: u32,
    pub(crate) dir: PathBuf,
    pub(crate) options: FileOptions,
    pub(crate) closed: Arc<AtomicBool>,
    /// Frees the shard for the next open once every part has dropped.
    pub(crate) _guard: Arc<ShardGuard>,
    /// The directory's lock: held while any part lives, even after the
    /// storage dropped, so no other open can write the shard meanwhile.
    pub(crate) _lock: Arc<I::Lock>,
}

impl<I: Io> Shared<I> {
    /// The shard's log directory.
    pub(crate) fn log_dir(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// `Closed` once the storage was closed.
    pub(crate) fn check_open(&self, what: &'static str) -> Result<(), StorageError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StorageError::Closed { what });
        }
        Ok(())
    }

    /// Makes a file's writes durable as the options say.
    pub(crate) fn sync(&self, file: &I::File, path: &Path) -> Result<(), FileError> {
        use crate::error::IoContext;
        use crate::io::IoFile;
        match self.options.flush {
            FlushMethod::DataSync => file.sync_data().ctx("fdatasync", path),
            FlushMethod::FullSync => file.sync_all().ctx("fsync", path),
            FlushMethod::None => Ok(()),
        }
    }

    /// Opens `path`, or creates it (durably) when it is missing and
    /// `may_create` says a missing file is legitimate (nothing committed in
    /// it yet); `what` names the file in errors.
    pub(crate) fn open_or_create(
        &self,
        path: &Path,
        may_create: bool,
        what: &'static str,
    ) -> Result<I::File, FileError> {
        use crate::error::IoContext;
        use crate::io::OpenMode;
        match self.io.open(path, OpenMode::Existing) {
            Ok(f) => Ok(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && may_create => {
                let f = self.io.open(path, OpenMode::CreateNew).ctx(what, path)?;
                if let Some(dir) = path.parent() {
                    self.sync_dir(dir)?;
                }
                Ok(f)
            }
            Err(e) => Err(e).ctx(what, path),
        }
    }

    /// Cuts `file` back to `len` bytes, durably, if it is longer: what a
    /// commit that did not finish appended after the committed length.
    pub(crate) fn cut_to(&self, file: &I::File, path: &Path, len: u64) -> Result<(), FileError> {
        use crate::error::IoContext;
        use crate::io::IoFile;
        if file.size().ctx("stat", path)? > len {
            file.set_len(len).ctx("truncate", path)?;
            file.sync_all().ctx("fsync", path)?;
        }
        Ok(())
    }

    /// Makes a directory's entries durable (unless syncing is off).
    pub(crate) fn sync_dir(&self, dir: &Path) -> Result<(), FileError> {
        use crate::error::IoContext;
        if self.options.flush == FlushMethod::None {
            return Ok(());
        }
        self.io.sync_dir(dir).ctx("fsync directory", dir)
    }

    /// Creates `dir` as [`create_dir_durably`] does, under this shard's
    /// flush method.
    pub(crate) fn create_dir(&self, dir: &Path) -> Result<(), FileError> {
        create_dir_durably(&*self.io, dir, self.options.flush)
    }
}

/// Creates `dir` and whichever of its parents are missing, each new
/// directory's entry durable in its parent before this returns (unless
/// `flush` is [`FlushMethod::None`]). A directory's creation, like a file's,
/// survives a crash only once its parent is synced: without it a crash
/// could take the directory, and every file synced in it, away. `dir`'s
/// parent is synced even when `dir` exists: an earlier open may have
/// created it and failed, or died, before that sync.
pub(crate) fn create_dir_durably<I: Io>(
    io: &I,
    dir: &Path,
    flush: FlushMethod,
) -> Result<(), FileError> {
    use crate::error::IoContext;
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !io.exists(d))
        .collect();
    if !missing.is_empty() {
        io.create_dir_all(dir).ctx("create directory", dir)?;
    }
    if flush == FlushMethod::None {
        return Ok(());
    }
    let synced = if missing.is_empty() {
        vec![dir]
    } else {
        missing
    };
    // Outermost first, so each entry synced sits in a durable directory.
    for new in synced.iter().rev() {
        let parent = match new.parent() {
            Some(p) if p.as_os_str().is_empty() => Path::new("."),
            Some(p) => p,
            None => continue,
        };
        io.sync_dir(parent).ctx("fsync directory", parent)?;
    }
    Ok(())
}

/// Maps the backend's errors onto the contract's.
impl From<FileError> for StorageError {
    fn from(e: FileError) -> Self {
        match e {
            FileError::Io { op, path, error } => {
                StorageError::io(format!("{op} {}", path.display()), error)
            }
            FileError::Corrupt { file, what, at } => StorageError::CorruptFile { file, what, at },
            FileError::Format {
                file,
                found,
                supported,
            } => StorageError::UnsupportedFormat {
                file,
                found,
                supported,
            },
            FileError::Storage(e) => e,
        }
    }
}
