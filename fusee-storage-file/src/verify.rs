//! Read-only access to a file store: [`verify_dir`] checks every file a
//! recovery reads and every checksum in them, and [`open_read_only`] opens
//! the store as the engine would, changing nothing on disk.
//!
//! # How opening changes nothing
//!
//! Opening a shard writes: it starts a fresh log segment, rewrites the log
//! manifest, the checkpoint slots and the log's last batch, and cuts what no
//! commit names. [`ReadOnlyIo`] is a file system for the backend's [`Io`]
//! layer that reads the real files (opened read-only) and keeps every
//! write, cut, creation, rename and removal in memory, as a copy-on-write
//! overlay: the recovery runs exactly as it would (every decoder and check
//! of [`FileStorage::open`](crate::FileStorage::open)), and the directory
//! is left byte for byte as it was. Its lock is a *shared* lock on the
//! store's `LOCK`: an engine holding the store (an exclusive lock) makes it
//! [`StorageError::Locked`], and no engine can take the store while a
//! reader holds it.
//!
//! # What [`verify_dir`] checks
//!
//! Each file on its own first, so that every damaged region is reported,
//! not only the first one a recovery would stop at: the identity marker;
//! per shard both log manifests and both checkpoint slots (a damaged copy
//! is reported even though the other copy would be used); the index file
//! and release log the newest slot names (every chunk's length and CRC);
//! the run-store generation (its header, then every frame's length and CRC
//! up to the committed length); every log segment (header, then every
//! frame's checksum, LSN and batch field, through the recovery scanner of
//! `fusee_core::segment`). Then the whole recovery, through
//! [`ReadOnlyIo`], for what only the files together can say (segments that
//! do not chain, a missing carrier segment, an index whose size is not its
//! commit's). What the engine's core does with the bytes (decoding
//! checkpoints, records and frames) is checked by the `fusee` crate
//! (`fusee::inspect`), which reads the store through [`open_read_only`].
//!
//! A problem's `file` is the damaged file, `offset` the byte offset in it
//! where the damage was found, `lsn` the log record concerned when the
//! problem is in the log.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use fusee_core::record::Lsn;
use fusee_core::segment::{ScanError, scan_segment};
use fusee_storage::identity::{Identity, MARKER};
use fusee_storage::{INDEX_RECORD, Storage, StorageError};

use crate::error::FileError;
use crate::io::{Io, IoFile, Mapped, OpenMode};
use crate::manifest::Manifest;
use crate::slot::Slot;
use crate::{Create, FileOptions, FileStorage, FlushMethod};

/// One thing [`verify_dir`] found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// A stable name for the kind of damage (`segment-frame`,
    /// `slot-copy`, ...), for scripts.
    pub kind: &'static str,
    /// The file the damage is in.
    pub file: PathBuf,
    /// The byte offset in `file` where it was found, when known.
    pub offset: Option<u64>,
    /// The log record concerned, for damage in the log.
    pub lsn: Option<Lsn>,
    /// The shard, for a file of a shard.
    pub shard: Option<u32>,
    /// What is wrong, in words.
    pub what: String,
}

/// Checks the file store in `dir` without changing it (see the [module
/// docs](self)) and returns every problem found, in file order; empty for
/// a sound store. Errors only where there is nothing to check: no store at
/// `dir`, another backend's store, a store an engine holds
/// ([`StorageError::Locked`]), an I/O error listing the directory.
pub fn verify_dir(dir: &Path) -> Result<Vec<Problem>, StorageError> {
    let marker = dir.join(MARKER);
    let mut problems = Vec::new();
    // A damaged marker makes the open below fail: report it as a problem of
    // its own file instead.
    if let Ok(bytes) = std::fs::read(&marker)
        && let Err(e) = Identity::decode(&bytes, &marker.display().to_string())
        && let StorageError::CorruptFile { what, at, .. } = e
    {
        problems.push(problem("marker", &marker, Some(at), None, None, what));
        return Ok(problems);
    }
    let storage = open_read_only(dir)?;
    let shards = storage.shards()?;
    for shard in shards {
        let shard_dir = dir.join(format!("shard-{shard:010}"));
        let before = problems.len();
        check_shard_files(&shard_dir, shard, &mut problems);
        if let Err(e) = storage.open_shard(shard) {
            let p = from_error(e, shard, &shard_dir);
            // The per-file checks usually named it already, more precisely.
            let known = problems[before..]
                .iter()
                .any(|q| q.file == p.file && (q.offset == p.offset || p.offset.is_none()));
            if !known {
                problems.push(p);
            }
        }
    }
    Ok(problems)
}

/// Opens the file store in `dir` on a [`ReadOnlyIo`]: the storage and the
/// shards it opens behave as [`FileStorage::open`](crate::FileStorage::open)'s
/// would, but nothing reaches the disk. A missing store is
/// [`StorageError::NotFound`] (nothing is created); a store an engine holds
/// is [`StorageError::Locked`].
pub fn open_read_only(dir: &Path) -> Result<FileStorage<ReadOnlyIo>, StorageError> {
    let options = FileOptions {
        // The segment an open starts lives in memory: keep it small.
        segment_bytes: fusee_core::segment::MIN_SEGMENT_BYTES,
        flush: FlushMethod::None,
        create: Create::Never,
    };
    FileStorage::open_with(ReadOnlyIo::default(), dir, options)
}

fn problem(
    kind: &'static str,
    file: &Path,
    offset: Option<u64>,
    lsn: Option<Lsn>,
    shard: Option<u32>,
    what: impl Into<String>,
) -> Problem {
    Problem {
        kind,
        file: file.to_path_buf(),
        offset,
        lsn,
        shard,
        what: what.into(),
    }
}

/// The problem a failed recovery of `shard` reports.
fn from_error(e: StorageError, shard: u32, shard_dir: &Path) -> Problem {
    match e {
        StorageError::CorruptFile { file, what, at } => Problem {
            kind: "recovery",
            file: PathBuf::from(file),
            offset: Some(at),
            lsn: None,
            shard: Some(shard),
            what: what.to_string(),
        },
        other => problem(
            "recovery",
            shard_dir,
            None,
            None,
            Some(shard),
            other.to_string(),
        ),
    }
}

/// The file problem of a backend error (`Corrupt`/`Format` name the file).
fn from_file_error(kind: &'static str, e: FileError, path: &Path, shard: u32) -> Problem {
    match e {
        FileError::Corrupt { what, at, .. } => {
            problem(kind, path, Some(at), None, Some(shard), what)
        }
        other => problem(kind, path, None, None, Some(shard), other.to_string()),
    }
}

/// Reads a whole file, `None` if it does not exist; an error is a problem.
fn read_file(path: &Path, shard: u32, problems: &mut Vec<Problem>) -> Option<Vec<u8>> {
    match std::fs::read(path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            problems.push(problem(
                "io",
                path,
                None,
                None,
                Some(shard),
                format!("cannot read: {e}"),
            ));
            None
        }
    }
}

/// The per-file checks of one shard directory (see the module docs).
fn check_shard_files(dir: &Path, shard: u32, problems: &mut Vec<Problem>) {
    let log_dir = dir.join("log");
    // The newest carrier a valid manifest copy names.
    let mut carrier = 0;
    for i in 0..2 {
        let path = log_dir.join(format!("manifest-{i}"));
        if let Some(bytes) = read_file(&path, shard, problems) {
            match Manifest::decode(&bytes, &path.display().to_string()) {
                Ok(m) => carrier = carrier.max(m.map_or(0, |m| m.carrier)),
                Err(e) => problems.push(from_file_error("manifest-copy", e, &path, shard)),
            }
        }
    }
    let mut newest: Option<Slot> = None;
    for i in 0..2 {
        let path = dir.join(format!("slot-{i}"));
        let Some(bytes) = read_file(&path, shard, problems) else {
            continue;
        };
        match Slot::decode(&bytes, &path.display().to_string()) {
            Ok(Some(s)) if newest.as_ref().is_none_or(|n| s.seq > n.seq) => newest = Some(s),
            Ok(_) => {}
            Err(e) => problems.push(from_file_error("slot-copy", e, &path, shard)),
        }
    }
    if let Some(slot) = &newest {
        check_index(dir, slot, shard, problems);
        check_store(dir, slot, shard, problems);
    }
    check_segments(&log_dir, shard, carrier, problems);
}

/// The index file the commit names: whole chunks with right CRCs, up to its
/// committed length.
fn check_index(dir: &Path, slot: &Slot, shard: u32, problems: &mut Vec<Problem>) {
    let path = dir.join(crate::checkpoint::index_name(slot.index_file));
    let Some(bytes) = read_file(&path, shard, problems) else {
        problems.push(problem(
            "index",
            &path,
            None,
            None,
            Some(shard),
            "index file missing, though the checkpoint slot names it",
        ));
        return;
    };
    let name = path.display().to_string();
    if let Err(e) = crate::chunks::read(&bytes, slot.index_len, INDEX_RECORD, &name, |_| Ok(())) {
        problems.push(from_file_error("index", e, &path, shard));
    }
}

/// The run-store generation the commit names: its header, then every
/// frame's length and CRC up to the committed length; and its release log.
fn check_store(dir: &Path, slot: &Slot, shard: u32, problems: &mut Vec<Problem>) {
    use crate::store::{FRAME_HEADER, GEN_HEADER};
    let path = dir.join(crate::store::gen_name(slot.store_gen));
    let mut bad = |offset: u64, what: &str| {
        problems.push(problem(
            "store-frame",
            &path,
            Some(offset),
            None,
            Some(shard),
            what,
        ));
    };
    match File::open(&path) {
        Err(e) => bad(0, &format!("run-store generation unreadable: {e}")),
        Ok(file) => {
            let size = file.metadata().map(|m| m.len()).unwrap_or(0);
            if size < slot.store_len || slot.store_len < GEN_HEADER {
                bad(size, "run store shorter than its committed length");
            } else {
                let mut header = [0u8; GEN_HEADER as usize];
                let read = file.read_exact_at(&mut header, 0);
                let gen_ok = header[16..24] == slot.store_gen.to_le_bytes();
                if read.is_err()
                    || header[..8] != *b"FUSEESTO"
                    || header[12..16] != shard.to_le_bytes()
                    || !gen_ok
                {
                    bad(0, "run-store header damaged (magic, shard or generation)");
                } else {
                    let mut at = GEN_HEADER;
                    let mut buf = Vec::new();
                    while at < slot.store_len {
                        let mut head = [0u8; FRAME_HEADER as usize];
                        if at + FRAME_HEADER > slot.store_len
                            || file.read_exact_at(&mut head, at).is_err()
                        {
                            bad(at, "partial frame header before the committed length");
                            break;
                        }
                        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
                        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
                        let end = at + FRAME_HEADER + u64::from(len);
                        if end > slot.store_len {
                            bad(at, "frame runs past the committed length (length damaged)");
                            break;
                        }
                        buf.resize(len as usize, 0);
                        if file.read_exact_at(&mut buf, at + FRAME_HEADER).is_err() {
                            bad(at, "frame unreadable");
                            break;
                        }
                        let mut h = crc32fast::Hasher::new();
                        h.update(&len.to_le_bytes());
                        h.update(&buf);
                        if h.finalize() != crc {
                            bad(at, "run-store frame crc mismatch");
                        }
                        at = end;
                    }
                }
            }
        }
    }
    let rel = dir.join(crate::store::rel_name(slot.store_gen));
    if slot.releases_len > 0 {
        match read_file(&rel, shard, problems) {
            None => problems.push(problem(
                "release-log",
                &rel,
                None,
                None,
                Some(shard),
                "release log missing, though the checkpoint slot names it",
            )),
            Some(bytes) => {
                let name = rel.display().to_string();
                if let Err(e) =
                    crate::chunks::read(&bytes, slot.releases_len, 12, &name, |_| Ok(()))
                {
                    problems.push(from_file_error("release-log", e, &rel, shard));
                }
            }
        }
    }
}

/// Every log segment through the recovery scanner: a damaged header, or a
/// damaged or missing acknowledged record (with its offset and LSN). A file
/// shorter than a header block past the manifest's `carrier` is not one: a
/// roll created it without zero-filling it and a crash came before its
/// first flush was durable, and recovery reads it as never started (see
/// [`crate::log`]).
fn check_segments(log_dir: &Path, shard: u32, carrier: u64, problems: &mut Vec<Problem>) {
    let Ok(entries) = std::fs::read_dir(log_dir) else {
        return;
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    names.sort();
    for name in names {
        let path = log_dir.join(&name);
        let Some(bytes) = read_file(&path, shard, problems) else {
            continue;
        };
        let mut bad = |offset: u64, lsn: Option<Lsn>, what: String| {
            problems.push(problem(
                "segment",
                &path,
                Some(offset),
                lsn,
                Some(shard),
                what,
            ));
        };
        let number = name
            .strip_suffix(".seg")
            .and_then(|d| d.parse::<u64>().ok())
            .unwrap_or(0);
        match scan_segment(&bytes, |_, _| {}) {
            Ok(_) => {}
            Err(ScanError::Truncated { .. }) if number > carrier => {}
            Err(ScanError::LostRecord {
                offset,
                lsn,
                reason,
            }) => bad(
                offset,
                Some(lsn),
                format!("acknowledged record damaged: {reason}"),
            ),
            Err(e @ ScanError::BadHeader { .. }) => bad(0, None, e.to_string()),
            Err(e) => bad(0, None, e.to_string()),
        }
    }
}

// ---------------------------------------------------------------------------
// The copy-on-write file system.

/// A file as the overlay sees it: the real file's bytes up to `base_len`,
/// zeros after, then every write made since, in order, up to `len`.
#[derive(Debug)]
struct Overlaid {
    base: Option<File>,
    base_len: u64,
    len: u64,
    writes: Vec<(u64, Vec<u8>)>,
}

impl Overlaid {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= self.len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))?;
        buf.fill(0);
        if let Some(base) = &self.base
            && offset < self.base_len
        {
            let upto = end.min(self.base_len);
            base.read_exact_at(&mut buf[..(upto - offset) as usize], offset)?;
        }
        for (at, bytes) in &self.writes {
            let w_end = at + bytes.len() as u64;
            let from = (*at).max(offset);
            let to = w_end.min(end);
            if from < to {
                buf[(from - offset) as usize..(to - offset) as usize]
                    .copy_from_slice(&bytes[(from - at) as usize..(to - at) as usize]);
            }
        }
        Ok(())
    }
}

/// What the overlay knows about a path.
#[derive(Debug, Clone)]
enum Entry {
    File(Arc<Mutex<Overlaid>>),
    Dir,
    Removed,
}

/// The backend's file-system layer over the real files, read-only: see the
/// [module docs](self). Cheap to create; each store opened on its own.
#[derive(Debug, Default)]
pub struct ReadOnlyIo {
    entries: Mutex<BTreeMap<PathBuf, Entry>>,
}

/// A file opened through [`ReadOnlyIo`].
#[derive(Debug)]
pub struct ReadOnlyFile(Arc<Mutex<Overlaid>>);

/// The shared lock [`ReadOnlyIo`] takes on a store's `LOCK` (none when
/// the store has no `LOCK` file: nothing then holds it).
#[derive(Debug)]
pub struct SharedLock(#[allow(dead_code)] Option<File>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ReadOnlyIo {
    fn entry(&self, path: &Path) -> Option<Entry> {
        lock(&self.entries).get(path).cloned()
    }

    /// The overlay's state of an existing file at `path` (opened from disk
    /// the first time), shared by every handle on it.
    fn existing(&self, path: &Path) -> io::Result<Arc<Mutex<Overlaid>>> {
        match self.entry(path) {
            Some(Entry::File(f)) => return Ok(f),
            Some(Entry::Removed) => return Err(io::ErrorKind::NotFound.into()),
            Some(Entry::Dir) => return Err(io::Error::other("is a directory")),
            None => {}
        }
        let file = File::open(path)?;
        let meta = file.metadata()?;
        if meta.is_dir() {
            return Err(io::Error::other("is a directory"));
        }
        let state = Arc::new(Mutex::new(Overlaid {
            base: Some(file),
            base_len: meta.len(),
            len: meta.len(),
            writes: Vec::new(),
        }));
        lock(&self.entries).insert(path.to_path_buf(), Entry::File(state.clone()));
        Ok(state)
    }
}

impl IoFile for ReadOnlyFile {
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut f = lock(&self.0);
        f.len = f.len.max(offset + bytes.len() as u64);
        f.writes.push((offset, bytes.to_vec()));
        Ok(())
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        lock(&self.0).read_at(offset, buf)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(lock(&self.0).len)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut f = lock(&self.0);
        if len < f.len {
            // Bytes past a cut read as zeros if the file grows again.
            f.base_len = f.base_len.min(len);
            for (at, bytes) in &mut f.writes {
                bytes.truncate(len.saturating_sub(*at) as usize);
            }
        }
        f.len = len;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }

    fn map(&self) -> io::Result<Mapped> {
        let f = lock(&self.0);
        let mut bytes = vec![0u8; usize::try_from(f.len).map_err(io::Error::other)?];
        f.read_at(0, &mut bytes)?;
        Ok(Mapped::Owned(bytes))
    }
}

impl Io for ReadOnlyIo {
    type File = ReadOnlyFile;
    type Lock = SharedLock;

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut entries = lock(&self.entries);
        for dir in path.ancestors().filter(|d| !d.as_os_str().is_empty()) {
            let known = matches!(entries.get(dir), Some(Entry::Dir | Entry::File(_)));
            if known || (dir.is_dir() && !matches!(entries.get(dir), Some(Entry::Removed))) {
                continue;
            }
            entries.insert(dir.to_path_buf(), Entry::Dir);
        }
        Ok(())
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<ReadOnlyFile> {
        match mode {
            OpenMode::Existing => self.existing(path).map(ReadOnlyFile),
            OpenMode::CreateNew => {
                if self.exists(path) {
                    return Err(io::ErrorKind::AlreadyExists.into());
                }
                let state = Arc::new(Mutex::new(Overlaid {
                    base: None,
                    base_len: 0,
                    len: 0,
                    writes: Vec::new(),
                }));
                lock(&self.entries).insert(path.to_path_buf(), Entry::File(state.clone()));
                Ok(ReadOnlyFile(state))
            }
        }
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        if !self.exists(path) {
            return Err(io::ErrorKind::NotFound.into());
        }
        lock(&self.entries).insert(path.to_path_buf(), Entry::Removed);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let state = self.existing(from)?;
        let mut entries = lock(&self.entries);
        entries.insert(to.to_path_buf(), Entry::File(state));
        entries.insert(from.to_path_buf(), Entry::Removed);
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = BTreeSet::new();
        let real = std::fs::read_dir(path);
        let overlay_dir = matches!(self.entry(path), Some(Entry::Dir));
        match real {
            Ok(entries) => {
                for entry in entries {
                    if let Ok(name) = entry?.file_name().into_string() {
                        names.insert(name);
                    }
                }
            }
            Err(e) if !overlay_dir => return Err(e),
            Err(_) => {}
        }
        for (p, e) in lock(&self.entries).iter() {
            if p.parent() != Some(path) {
                continue;
            }
            let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            match e {
                Entry::Removed => {
                    names.remove(name);
                }
                _ => {
                    names.insert(name.to_string());
                }
            }
        }
        Ok(names.into_iter().collect())
    }

    fn sync_dir(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        match self.entry(path) {
            Some(Entry::Removed) => false,
            Some(_) => true,
            None => path.exists(),
        }
    }

    fn lock(&self, dir: &Path) -> io::Result<SharedLock> {
        let file = match File::open(dir.join("LOCK")) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(SharedLock(None)),
            Err(e) => return Err(e),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(SharedLock(Some(file))),
            Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is locked by an engine", dir.display()),
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }

    fn background(&self) -> bool {
        // No zero-filling thread: everything the open writes stays here.
        false
    }
}
