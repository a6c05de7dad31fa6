//! The I/O layer: every file access of the backend goes through [`Io`], so
//! production runs on real files ([`RealIo`]) and tests on a simulated disk
//! ([`crate::sim::SimIo`]) that loses, keeps or tears unsynced writes at a
//! crash.
//!
//! # Durability model
//!
//! The backend assumes what POSIX and Linux file systems promise, and the
//! simulated disk grants no more:
//! - bytes written with [`IoFile::write_at`] are durable only after
//!   [`IoFile::sync_data`] (or [`IoFile::sync_all`]) returns; until then a
//!   crash may drop each write, keep it, or keep any subset of its 512-byte
//!   sectors;
//! - creating, removing or renaming a file is durable only after
//!   [`Io::sync_dir`] of its directory; until then a crash keeps some prefix
//!   of the directory's changes;
//! - a rename replaces its target atomically;
//! - a failed sync leaves the file's state unknown: the caller must not
//!   retry it as if the data were safe.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::ops::Deref;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The bytes of a file as they are now, for recovery scans: a memory map of
/// a real file, or a copy.
pub enum Mapped {
    /// A read-only map of a real file.
    Map(memmap2::Mmap),
    /// Owned bytes (simulated files, empty files).
    Owned(Vec<u8>),
}

impl Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Mapped::Map(m) => m,
            Mapped::Owned(v) => v,
        }
    }
}

/// An open file.
pub trait IoFile: Send + Sync {
    /// Writes all of `bytes` at `offset` (not durable until synced).
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()>;
    /// Fills `buf` from `offset`; an error if the file ends first.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// The file's current length.
    fn size(&self) -> io::Result<u64>;
    /// Sets the file's length (cuts, or extends with zeros).
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes written data durable (and the length it needs).
    fn sync_data(&self) -> io::Result<()>;
    /// Makes written data and all metadata durable.
    fn sync_all(&self) -> io::Result<()>;
    /// The file's bytes as they are now.
    fn map(&self) -> io::Result<Mapped>;
    /// A view of the file's first `len` bytes that also shows bytes written
    /// after it was made, for a file that only grows at its end (a run-store
    /// generation): a memory map of `len` bytes, which may run past the
    /// file's end. The caller reads only bytes that were written before the
    /// read, never past the file's current end (a real map faults there).
    /// The default is [`IoFile::map`], a view of the file as it is now,
    /// shorter than `len` when the file is: the caller maps again when a
    /// read needs bytes past the view.
    fn map_ahead(&self, len: u64) -> io::Result<Mapped> {
        let _ = len;
        self.map()
    }
}

/// How [`Io::open`] finds the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Create it; an error if it exists.
    CreateNew,
    /// Open it; an error if it does not exist.
    Existing,
}

/// A file system: real, or simulated.
pub trait Io: Send + Sync + 'static {
    /// The files it opens.
    type File: IoFile + 'static;
    /// An exclusive lock on a directory, released on drop.
    type Lock: Send + Sync + 'static;

    /// Creates a directory and its parents (durable after `sync_dir` of the
    /// parent).
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Opens a file for reading and writing.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Self::File>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Renames a file, atomically replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// The names of the entries of a directory, sorted.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Makes the directory's entries (created, removed, renamed) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Whether a file or directory exists.
    fn exists(&self, path: &Path) -> bool;
    /// Takes the exclusive lock of directory `dir` (a `LOCK` file in it).
    /// `WouldBlock` if another process or handle holds it.
    fn lock(&self, dir: &Path) -> io::Result<Self::Lock>;
    /// Whether the log may prepare segment files on a background thread
    /// (real files: yes). A simulated disk says no, so a seed replays the
    /// same sequence of operations; the work is the same, done inline.
    fn background(&self) -> bool {
        true
    }
}

/// Real files through `std::fs`, read back through `memmap2`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealIo;

/// A real open file.
#[derive(Debug)]
pub struct RealFile {
    file: File,
}

impl IoFile for RealFile {
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, offset)
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        FileExt::read_exact_at(&self.file, buf, offset)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn map(&self) -> io::Result<Mapped> {
        if self.size()? == 0 {
            // Mapping an empty file is an error on some platforms.
            return Ok(Mapped::Owned(Vec::new()));
        }
        // SAFETY: the map is read-only and lives only for one scan: of a
        // file at open, or of a log segment by `FileLog::read`. The backend
        // holds the directory's exclusive lock, so no other process writes
        // or truncates the file meanwhile. In this process nothing truncates
        // a mapped file, and the one write that can overlap a scan is a
        // flush on another thread into a log segment, past the segment's
        // flushed end: the read looks only at bytes before that end, which
        // are never written again while the segment is in the log.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&self.file)? };
        Ok(Mapped::Map(map))
    }

    fn map_ahead(&self, len: u64) -> io::Result<Mapped> {
        let len = usize::try_from(len).map_err(|_| io::Error::other("map length over usize"))?;
        if len == 0 {
            return Ok(Mapped::Owned(Vec::new()));
        }
        // SAFETY: a shared read-only map. The run store maps its current
        // generation file, which it only appends to (it is cut back only at
        // open, before any map, and deleted only after its map is dropped),
        // and reads only bytes it wrote before the read: never past the
        // file's end, where the map would fault, and never bytes a write
        // changes while they are read. The backend holds the directory's
        // exclusive lock, so no other process writes or truncates the file.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(&self.file)? };
        Ok(Mapped::Map(map))
    }
}

/// The lock of a directory held by [`RealIo::lock`].
#[derive(Debug)]
pub struct RealLock {
    _file: File,
    _path: PathBuf,
}

impl Io for RealIo {
    type File = RealFile;
    type Lock = RealLock;

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<RealFile> {
        let mut o = OpenOptions::new();
        o.read(true).write(true);
        if mode == OpenMode::CreateNew {
            o.create_new(true);
        }
        Ok(RealFile {
            file: o.open(path)?,
        })
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(path)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn lock(&self, dir: &Path) -> io::Result<RealLock> {
        let path = dir.join("LOCK");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        match file.try_lock() {
            Ok(()) => Ok(RealLock {
                _file: file,
                _path: path,
            }),
            Err(fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is locked by another process", path.display()),
            )),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}
