//! A simulated disk for power-loss tests: it keeps each file's live bytes
//! (what reads see) apart from its durable bytes (what survives a crash),
//! and on [`SimIo::crash`] decides, write by write, what an unsynced write
//! left behind.
//!
//! At a crash, for each file, every write not covered by a later sync is
//! dropped, kept, or torn: only some of its 512-byte sectors (aligned to the
//! file's offsets, as a disk writes them) reach the durable image, which is
//! what a power cut during a multi-sector write can do. Length changes not
//! synced are kept or dropped. In each directory, a random prefix of the
//! unsynced creations (of files and of directories), removals and renames
//! survives; a directory whose creation did not survive takes everything in
//! it along. Handles opened before the crash fail afterwards, as a process
//! that died would have no handles.
//!
//! A directory's creation is durable once its parent is synced, like a
//! file's; the root (`/`) always exists.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::io::{Io, IoFile, Mapped, OpenMode};

/// Sector size of the simulated disk: the unit a torn write keeps or loses.
pub const SECTOR: u64 = 512;

/// What a crash does with unsynced writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Each unsynced write is dropped, kept or torn at random.
    Random(u64),
    /// Every unsynced write and directory change is lost.
    LoseAll,
    /// Every unsynced write and directory change survives.
    KeepAll,
}

#[derive(Clone, Debug)]
enum Pending {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Clone, Debug, Default)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
    /// Writes a failed sync covered, with the durable bytes under them then
    /// (only with [`SimIo::forget_failed_syncs`]): no later sync writes
    /// them, until the range is written again.
    forgotten: Vec<(u64, Vec<u8>)>,
}

impl Inode {
    /// What a failed sync does to the writes it covered, as Linux does:
    /// they stay readable but count as written back.
    fn forget_pending(&mut self) {
        for p in std::mem::take(&mut self.pending) {
            if let Pending::Write { offset, bytes } = p {
                let start = (offset as usize).min(self.durable.len());
                let end = (offset as usize + bytes.len()).min(self.durable.len());
                let mut old = self.durable[start..end].to_vec();
                old.resize(bytes.len(), 0);
                self.forgotten.push((offset, old));
            }
        }
    }

    /// A write to `offset..offset + len` makes that range dirty again.
    fn unforget(&mut self, offset: u64, len: u64) {
        let end = offset + len;
        let mut kept = Vec::new();
        for (at, old) in std::mem::take(&mut self.forgotten) {
            let old_end = at + old.len() as u64;
            if old_end <= offset || at >= end {
                kept.push((at, old));
                continue;
            }
            if at < offset {
                kept.push((at, old[..(offset - at) as usize].to_vec()));
            }
            if old_end > end {
                kept.push((end, old[(end - at) as usize..].to_vec()));
            }
        }
        self.forgotten = kept;
    }
}

#[derive(Clone, Debug)]
enum NsOp {
    Create(PathBuf, u64),
    CreateDir(PathBuf),
    Remove(PathBuf),
    Rename(PathBuf, PathBuf),
}

#[derive(Debug, Default)]
struct State {
    /// Bumped by every crash: handles of an older generation fail.
    generation: u64,
    next_inode: u64,
    inodes: BTreeMap<u64, Inode>,
    live: BTreeMap<PathBuf, u64>,
    durable: BTreeMap<PathBuf, u64>,
    /// Unsynced namespace changes per directory, in order.
    pending_ns: BTreeMap<PathBuf, Vec<NsOp>>,
    /// Directories as processes see them.
    dirs: BTreeSet<PathBuf>,
    /// Directories whose creation is durable (their parent was synced).
    durable_dirs: BTreeSet<PathBuf>,
    locks: BTreeSet<PathBuf>,
    fail_syncs: u32,
    /// File writes to fail before any more succeed.
    fail_writes: u32,
    /// File removals to fail before any more succeed.
    fail_removes: u32,
    /// Whether a failed sync forgets the writes it covered (Linux).
    forget_failed_syncs: bool,
    /// Syncs to let through before `fail_syncs` start failing.
    fail_after: u32,
    syncs: u64,
}

/// A simulated file system shared by every handle cloned from it.
#[derive(Clone, Debug, Default)]
pub struct SimIo {
    state: Arc<Mutex<State>>,
}

/// A handle to a simulated file.
#[derive(Debug)]
pub struct SimFile {
    state: Arc<Mutex<State>>,
    inode: u64,
    generation: u64,
}

/// A simulated directory lock, released on drop.
#[derive(Debug)]
pub struct SimLock {
    state: Arc<Mutex<State>>,
    dir: PathBuf,
    generation: u64,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut s = lock(&self.state);
        if s.generation == self.generation {
            s.locks.remove(&self.dir);
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves plain data; keep going.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

fn crashed() -> io::Error {
    io::Error::other("the simulated disk crashed since this handle was opened")
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

fn apply_write(image: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let (start, end) = (offset as usize, offset as usize + bytes.len());
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(bytes);
}

impl SimIo {
    /// An empty disk.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next `n` syncs (of files or directories) fail with an I/O
    /// error, leaving their writes unsynced.
    pub fn fail_next_syncs(&self, n: u32) {
        self.fail_syncs_after(0, n);
    }

    /// Lets `skip` syncs succeed, then makes the `n` after them fail: a
    /// crash at a chosen point inside a sequence of syncs (a commit).
    pub fn fail_syncs_after(&self, skip: u32, n: u32) {
        let mut s = lock(&self.state);
        s.fail_after = skip;
        s.fail_syncs = n;
    }

    /// Makes the next `n` file writes fail with an I/O error, writing
    /// nothing.
    pub fn fail_next_writes(&self, n: u32) {
        lock(&self.state).fail_writes = n;
    }

    /// Makes the next `n` file removals fail with an I/O error, removing
    /// nothing.
    pub fn fail_next_removes(&self, n: u32) {
        lock(&self.state).fail_removes = n;
    }

    /// From now on a failed file sync behaves as on Linux: the writes it
    /// covered stay readable but are marked written back, so no later sync
    /// makes them durable; only writing them again does. (By default they
    /// stay pending, and a later successful sync makes them durable.)
    pub fn forget_failed_syncs(&self) {
        lock(&self.state).forget_failed_syncs = true;
    }

    /// How many syncs succeeded so far.
    pub fn syncs(&self) -> u64 {
        lock(&self.state).syncs
    }

    /// Bytes written and not synced yet, over all files.
    pub fn unsynced_bytes(&self) -> u64 {
        let s = lock(&self.state);
        let mut n = 0u64;
        for inode in s.inodes.values() {
            for p in &inode.pending {
                if let Pending::Write { bytes, .. } = p {
                    n += bytes.len() as u64;
                }
            }
        }
        n
    }

    /// Cuts the power: what was not synced is dropped, kept or torn as
    /// `mode` says; every handle and lock from before fails or is released.
    pub fn crash(&self, mode: CrashMode) {
        let mut s = lock(&self.state);
        let mut rng = match mode {
            CrashMode::Random(seed) => Some(fastrand::Rng::with_seed(seed)),
            _ => None,
        };
        let keep = |rng: &mut Option<fastrand::Rng>, p_keep: u8| -> bool {
            match (mode, rng) {
                (CrashMode::KeepAll, _) => true,
                (CrashMode::LoseAll, _) => false,
                (_, Some(r)) => r.u8(0..100) < p_keep,
                (_, None) => false,
            }
        };
        for inode in s.inodes.values_mut() {
            inode.forgotten.clear();
            let pending = std::mem::take(&mut inode.pending);
            for p in pending {
                match p {
                    Pending::SetLen(len) => {
                        if keep(&mut rng, 50) {
                            inode.durable.resize(len as usize, 0);
                        }
                    }
                    Pending::Write { offset, bytes } => {
                        let torn = matches!(mode, CrashMode::Random(_))
                            && rng.as_mut().is_some_and(|r| r.u8(0..3) == 0);
                        if torn {
                            let Some(r) = rng.as_mut() else { continue };
                            // Each sector the write touches survives or not.
                            let end = offset + bytes.len() as u64;
                            let mut at = offset;
                            while at < end {
                                let sector_end = ((at / SECTOR) + 1) * SECTOR;
                                let upto = sector_end.min(end);
                                if r.bool() {
                                    let from = (at - offset) as usize;
                                    let to = (upto - offset) as usize;
                                    apply_write(&mut inode.durable, at, &bytes[from..to]);
                                }
                                at = upto;
                            }
                        } else if keep(&mut rng, 50) {
                            apply_write(&mut inode.durable, offset, &bytes);
                        }
                    }
                }
            }
            inode.live = inode.durable.clone();
        }
        let pending_ns = std::mem::take(&mut s.pending_ns);
        for (_, ops) in pending_ns {
            let kept = match (mode, rng.as_mut()) {
                (CrashMode::KeepAll, _) => ops.len(),
                (CrashMode::Random(_), Some(r)) => r.usize(0..=ops.len()),
                _ => 0,
            };
            for op in ops.into_iter().take(kept) {
                let s = &mut *s;
                apply_ns(&mut s.durable, &mut s.durable_dirs, op);
            }
        }
        // A directory lost takes what was in it along, durable or not.
        let dirs = s.durable_dirs.clone();
        let present = |d: &Path| {
            d.ancestors()
                .all(|a| a.parent().is_none() || dirs.contains(a))
        };
        s.durable_dirs.retain(|d| present(d));
        s.durable.retain(|p, _| present(&parent(p)));
        s.dirs = s.durable_dirs.clone();
        s.live = s.durable.clone();
        let referenced: BTreeSet<u64> = s.live.values().copied().collect();
        s.inodes.retain(|id, _| referenced.contains(id));
        s.locks.clear();
        s.generation += 1;
        s.fail_syncs = 0;
        s.fail_after = 0;
        s.fail_writes = 0;
        s.fail_removes = 0;
    }

    fn take_failure(s: &mut State) -> io::Result<()> {
        if s.fail_syncs > 0 && s.fail_after > 0 {
            s.fail_after -= 1;
        } else if s.fail_syncs > 0 {
            s.fail_syncs -= 1;
            return Err(io::Error::other("injected sync failure"));
        }
        s.syncs += 1;
        Ok(())
    }
}

fn apply_ns(names: &mut BTreeMap<PathBuf, u64>, dirs: &mut BTreeSet<PathBuf>, op: NsOp) {
    match op {
        NsOp::Create(path, inode) => {
            names.insert(path, inode);
        }
        NsOp::CreateDir(path) => {
            dirs.insert(path);
        }
        NsOp::Remove(path) => {
            names.remove(&path);
        }
        NsOp::Rename(from, to) => {
            if let Some(inode) = names.remove(&from) {
                names.insert(to, inode);
            }
        }
    }
}

impl SimFile {
    fn with<T>(&self, f: impl FnOnce(&mut State, u64) -> io::Result<T>) -> io::Result<T> {
        let mut s = lock(&self.state);
        if s.generation != self.generation {
            return Err(crashed());
        }
        if !s.inodes.contains_key(&self.inode) {
            return Err(io::Error::new(io::ErrorKind::NotFound, "file removed"));
        }
        f(&mut s, self.inode)
    }
}

impl IoFile for SimFile {
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.with(|s, id| {
            if s.fail_writes > 0 {
                s.fail_writes -= 1;
                return Err(io::Error::other("injected write failure"));
            }
            let inode = s.inodes.get_mut(&id).ok_or_else(crashed)?;
            apply_write(&mut inode.live, offset, bytes);
            inode.unforget(offset, bytes.len() as u64);
            inode.pending.push(Pending::Write {
                offset,
                bytes: bytes.to_vec(),
            });
            Ok(())
        })
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.with(|s, id| {
            let inode = s.inodes.get(&id).ok_or_else(crashed)?;
            let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
            let end = start.saturating_add(buf.len());
            let src = inode
                .live
                .get(start..end)
                .ok_or(io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(src);
            Ok(())
        })
    }

    fn size(&self) -> io::Result<u64> {
        self.with(|s, id| Ok(s.inodes.get(&id).map_or(0, |i| i.live.len() as u64)))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.with(|s, id| {
            let inode = s.inodes.get_mut(&id).ok_or_else(crashed)?;
            inode.live.resize(len as usize, 0);
            inode.pending.push(Pending::SetLen(len));
            Ok(())
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        self.with(|s, id| {
            if let Err(e) = SimIo::take_failure(s) {
                if s.forget_failed_syncs
                    && let Some(inode) = s.inodes.get_mut(&id)
                {
                    inode.forget_pending();
                }
                return Err(e);
            }
            let inode = s.inodes.get_mut(&id).ok_or_else(crashed)?;
            inode.durable = inode.live.clone();
            for (at, old) in &inode.forgotten {
                apply_write(&mut inode.durable, *at, old);
            }
            inode.pending.clear();
            Ok(())
        })
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }

    fn map(&self) -> io::Result<Mapped> {
        self.with(|s, id| {
            Ok(Mapped::Owned(
                s.inodes
                    .get(&id)
                    .map(|i| i.live.clone())
                    .unwrap_or_default(),
            ))
        })
    }
}

impl Io for SimIo {
    type File = SimFile;
    type Lock = SimLock;

    fn background(&self) -> bool {
        false
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = lock(&self.state);
        let mut missing: Vec<&Path> = path
            .ancestors()
            .take_while(|d| !s.dirs.contains(*d))
            .collect();
        // Parents first, each creation pending in its parent until synced.
        missing.reverse();
        for dir in missing {
            s.dirs.insert(dir.to_path_buf());
            match dir.parent() {
                None => {
                    s.durable_dirs.insert(dir.to_path_buf());
                }
                Some(up) => s
                    .pending_ns
                    .entry(up.to_path_buf())
                    .or_default()
                    .push(NsOp::CreateDir(dir.to_path_buf())),
            }
        }
        Ok(())
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<SimFile> {
        let mut s = lock(&self.state);
        if !s.dirs.contains(&parent(path)) {
            return Err(not_found(&parent(path)));
        }
        let inode = match (mode, s.live.get(path).copied()) {
            (OpenMode::Existing, Some(inode)) => inode,
            (OpenMode::Existing, None) => return Err(not_found(path)),
            (OpenMode::CreateNew, Some(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists", path.display()),
                ));
            }
            (OpenMode::CreateNew, None) => {
                s.next_inode += 1;
                let inode = s.next_inode;
                s.inodes.insert(inode, Inode::default());
                s.live.insert(path.to_path_buf(), inode);
                s.pending_ns
                    .entry(parent(path))
                    .or_default()
                    .push(NsOp::Create(path.to_path_buf(), inode));
                inode
            }
        };
        Ok(SimFile {
            state: self.state.clone(),
            inode,
            generation: s.generation,
        })
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = lock(&self.state);
        if s.fail_removes > 0 {
            s.fail_removes -= 1;
            return Err(io::Error::other("injected remove failure"));
        }
        if s.live.remove(path).is_none() {
            return Err(not_found(path));
        }
        s.pending_ns
            .entry(parent(path))
            .or_default()
            .push(NsOp::Remove(path.to_path_buf()));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = lock(&self.state);
        let inode = s.live.remove(from).ok_or_else(|| not_found(from))?;
        s.live.insert(to.to_path_buf(), inode);
        s.pending_ns
            .entry(parent(to))
            .or_default()
            .push(NsOp::Rename(from.to_path_buf(), to.to_path_buf()));
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let s = lock(&self.state);
        if !s.dirs.contains(path) {
            return Err(not_found(path));
        }
        let mut names: Vec<String> = s
            .live
            .keys()
            .chain(s.dirs.iter())
            .filter(|p| p.parent() == Some(path))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut s = lock(&self.state);
        SimIo::take_failure(&mut s)?;
        let ops = s.pending_ns.remove(path).unwrap_or_default();
        for op in ops {
            let s = &mut *s;
            apply_ns(&mut s.durable, &mut s.durable_dirs, op);
        }
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let s = lock(&self.state);
        s.live.contains_key(path) || s.dirs.contains(path)
    }

    fn lock(&self, dir: &Path) -> io::Result<SimLock> {
        let mut s = lock(&self.state);
        if !s.locks.insert(dir.to_path_buf()) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is locked", dir.display()),
            ));
        }
        Ok(SimLock {
            state: self.state.clone(),
            dir: dir.to_path_buf(),
            generation: s.generation,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (SimIo, PathBuf) {
        let io = SimIo::new();
        let dir = PathBuf::from("/db");
        io.create_dir_all(&dir).unwrap();
        io.sync_dir(Path::new("/")).unwrap();
        (io, dir)
    }

    #[test]
    fn a_directory_not_synced_into_its_parent_vanishes_with_its_files() {
        let (io, dir) = setup();
        let sub = dir.join("sub");
        io.create_dir_all(&sub).unwrap();
        let f = io.open(&sub.join("f"), OpenMode::CreateNew).unwrap();
        f.write_at(0, b"x").unwrap();
        f.sync_data().unwrap();
        // The file's entry is durable in `sub`, but `sub`'s is not in `/db`.
        io.sync_dir(&sub).unwrap();
        io.crash(CrashMode::LoseAll);
        assert!(!io.exists(&sub) && !io.exists(&sub.join("f")));
        assert!(io.exists(&dir), "synced into its parent before");
        io.create_dir_all(&sub).unwrap();
        io.sync_dir(&dir).unwrap();
        let f = io.open(&sub.join("g"), OpenMode::CreateNew).unwrap();
        io.sync_dir(&sub).unwrap();
        drop(f);
        io.crash(CrashMode::LoseAll);
        assert_eq!(io.list_dir(&sub).unwrap(), vec!["g".to_string()]);
    }

    #[test]
    fn synced_bytes_survive_and_unsynced_ones_follow_the_mode() {
        let (io, dir) = setup();
        let path = dir.join("f");
        let f = io.open(&path, OpenMode::CreateNew).unwrap();
        f.write_at(0, b"durable").unwrap();
        f.sync_data().unwrap();
        io.sync_dir(&dir).unwrap();
        f.write_at(7, b"-lost").unwrap();
        io.crash(CrashMode::LoseAll);
        assert!(f.size().is_err(), "old handles fail after a crash");
        let f = io.open(&path, OpenMode::Existing).unwrap();
        assert_eq!(&*f.map().unwrap(), b"durable");
        f.write_at(7, b"-kept").unwrap();
        io.crash(CrashMode::KeepAll);
        let f = io.open(&path, OpenMode::Existing).unwrap();
        assert_eq!(&*f.map().unwrap(), b"durable-kept");
    }

    #[test]
    fn unsynced_creations_vanish() {
        let (io, dir) = setup();
        let f = io.open(&dir.join("new"), OpenMode::CreateNew).unwrap();
        f.write_at(0, b"x").unwrap();
        f.sync_data().unwrap();
        io.crash(CrashMode::LoseAll);
        assert!(!io.exists(&dir.join("new")));
        assert_eq!(io.list_dir(&dir).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn torn_writes_keep_whole_sectors_only() {
        for seed in 0..200 {
            let (io, dir) = setup();
            let path = dir.join("f");
            let f = io.open(&path, OpenMode::CreateNew).unwrap();
            f.set_len(4 * SECTOR).unwrap();
            f.sync_data().unwrap();
            io.sync_dir(&dir).unwrap();
            let ones = vec![1u8; 3 * SECTOR as usize];
            f.write_at(SECTOR / 2, &ones).unwrap();
            io.crash(CrashMode::Random(seed));
            let f = io.open(&path, OpenMode::Existing).unwrap();
            let image = f.map().unwrap();
            assert_eq!(image.len(), 4 * SECTOR as usize);
            // Each sector is all old or all new within the write's range.
            for s in 0..4u64 {
                let lo = (s * SECTOR).max(SECTOR / 2) as usize;
                let hi = ((s + 1) * SECTOR).min(SECTOR / 2 + 3 * SECTOR) as usize;
                let part = &image[lo..hi];
                assert!(
                    part.iter().all(|&b| b == 0) || part.iter().all(|&b| b == 1),
                    "seed {seed} sector {s}"
                );
            }
        }
    }

    #[test]
    fn failed_syncs_keep_writes_unsynced() {
        let (io, dir) = setup();
        let f = io.open(&dir.join("f"), OpenMode::CreateNew).unwrap();
        io.sync_dir(&dir).unwrap();
        f.write_at(0, b"abc").unwrap();
        io.fail_next_syncs(1);
        assert!(f.sync_data().is_err());
        assert_eq!(io.unsynced_bytes(), 3);
        io.crash(CrashMode::LoseAll);
        let f = io.open(&dir.join("f"), OpenMode::Existing).unwrap();
        assert_eq!(f.size().unwrap(), 0);
    }

    #[test]
    fn a_failed_sync_forgets_its_writes_until_they_are_written_again() {
        let (io, dir) = setup();
        io.forget_failed_syncs();
        let f = io.open(&dir.join("f"), OpenMode::CreateNew).unwrap();
        io.sync_dir(&dir).unwrap();
        f.write_at(0, b"abcd").unwrap();
        io.fail_next_syncs(1);
        assert!(f.sync_data().is_err());
        f.write_at(4, b"ef").unwrap();
        f.sync_data().unwrap();
        assert_eq!(&*f.map().unwrap(), b"abcdef", "still readable");
        io.crash(CrashMode::KeepAll);
        let f = io.open(&dir.join("f"), OpenMode::Existing).unwrap();
        assert_eq!(&*f.map().unwrap(), b"\0\0\0\0ef", "never written back");
        f.write_at(0, b"ab").unwrap();
        io.fail_next_syncs(1);
        assert!(f.sync_data().is_err());
        f.write_at(0, b"AB").unwrap();
        f.sync_data().unwrap();
        io.crash(CrashMode::LoseAll);
        let f = io.open(&dir.join("f"), OpenMode::Existing).unwrap();
        assert_eq!(
            &*f.map().unwrap(),
            b"AB\0\0ef",
            "written again, then synced"
        );
    }

    #[test]
    fn locks_are_exclusive_until_dropped_or_crashed() {
        let (io, dir) = setup();
        let l = io.lock(&dir).unwrap();
        assert_eq!(io.lock(&dir).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        drop(l);
        let _l = io.lock(&dir).unwrap();
        io.crash(CrashMode::LoseAll);
        let _again = io.lock(&dir).unwrap();
    }
}
