//! A shard's run store: append-only generation files of checksummed frames,
//! a release log per generation, and compaction into a new generation.
//!
//! # Files
//!
//! `store-GGGGGGGGGGGGGGGGGGGG.dat` (generation `G` in 20 digits):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `FUSEESTO` |
//! | 8 | 4 | format (1) |
//! | 12 | 4 | shard |
//! | 16 | 8 | generation |
//! | 24 | .. | frames |
//!
//! Each frame: `len u32`, `crc32 u32` (of the `len` bytes and the payload),
//! then `len` payload bytes. A frame's address ([`BlobRef::offset`]) is the
//! generation's low 12 bits above a 36-bit file offset of its header (64 GiB
//! per generation); `BlobRef::len` is the payload length.
//!
//! `store-GGGGGGGGGGGGGGGGGGGG.rel`: a chunk file ([`crate::chunks`]) of
//! 12-byte entries (`offset u64`, `len u32`, little-endian): the frames of
//! that generation released by committed checkpoints.
//!
//! # Durability
//!
//! Frames are written when appended and synced by the next commit, which
//! records the generation, its length and its release log's length in the
//! checkpoint slot. Open cuts the generation file back to that length and
//! deletes every other generation: frames appended after the last commit
//! (and a compaction's output not yet committed) are gone, as the contract
//! says. Compaction copies live frames into the next generation and keeps
//! the old one readable until the commit that names the new one is durable;
//! a crash before it reopens the old generation, whose frames the committed
//! index still names, so nothing is lost.
//!
//! # Reads
//!
//! A frame not yet written out is read from the write buffer; a written one
//! through a read-only memory map of the generation file
//! ([`IoFile::map_ahead`]), made at the first read and made again, larger,
//! when a read reaches past it. Every read checks the frame's header
//! against the reference and its crc over the bytes it returns. The map
//! saves each read a system call and a page-cache lookup: the comparison's
//! run-store read went from 0.71x-0.82x the floor's `pread` to 1.30x-1.35x
//! (benches/RESULTS.md). The price is the map's: a disk error while a read
//! copies from it is a `SIGBUS`, not an error value, as it already is for
//! log reads and recovery scans, which map segments too.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fusee_core::shard::BlobRef;
use fusee_storage::{Result, RunStore, StorageError, check_frame_len};
use rustc_hash::FxHashMap;

use crate::chunks;
use crate::error::{FileError, IoContext};
use crate::io::{Io, IoFile, Mapped, OpenMode};
use crate::shared::Shared;

const MAGIC: [u8; 8] = *b"FUSEESTO";
const FORMAT: u32 = 1;
/// Bytes of a generation file's header.
pub const GEN_HEADER: u64 = 24;
/// Bytes before each frame's payload.
pub const FRAME_HEADER: u64 = 8;
/// Bits of a frame address that hold its file offset.
const OFFSET_BITS: u32 = 36;
const GEN_BITS: u32 = 12;
/// Bytes of a release-log entry.
const RELEASE_ENTRY: usize = 12;

pub(crate) fn gen_name(generation: u64) -> String {
    format!("store-{generation:020}.dat")
}

pub(crate) fn rel_name(generation: u64) -> String {
    format!("store-{generation:020}.rel")
}

/// A frame address: the generation's low bits over the file offset.
fn address(generation: u64, offset: u64) -> u64 {
    ((generation & ((1 << GEN_BITS) - 1)) << OFFSET_BITS) | offset
}

/// The store position a commit at (generation, length) records.
pub(crate) fn position_of(generation: u64, len: u64) -> u64 {
    address(generation, len)
}

fn split(address: u64) -> (u64, u64) {
    (address >> OFFSET_BITS, address & ((1 << OFFSET_BITS) - 1))
}

fn frame_crc(len: u32, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Frames a compaction moved: (old address, new address).
type Moves = Vec<(BlobRef, BlobRef)>;

/// Frames buffered before one positioned write: a shard's run store
/// appends many small frames between commits, and one write per frame cost
/// a system call each.
const WRITE_BUFFER: usize = 1 << 20;

/// Bytes a generation's view maps past the generation's end when it is
/// made, so reads of frames written later need no new map until the file
/// outgrows it (a map is address space, not memory).
const MAP_AHEAD: u64 = 64 << 20;

/// One generation file.
struct Generation<F> {
    number: u64,
    file: F,
    path: PathBuf,
    /// Bytes used: on file, then in `buf`.
    len: u64,
    /// Bytes written to the file; `buf` holds the bytes after them.
    written: u64,
    buf: Vec<u8>,
    /// A read-only map of the file ([`IoFile::map_ahead`]), made at the
    /// first read and again when a read reaches past it: reads of written
    /// frames copy from it, with no system call and no page-cache lookup
    /// per read (a `pread` of a 1.2 KB frame cost about a quarter more
    /// than the floor's, most of it in the kernel). Only bytes before
    /// `written` are ever read through it.
    view: Option<Mapped>,
}

impl<F: IoFile> Generation<F> {
    fn new(number: u64, file: F, path: PathBuf, len: u64) -> Self {
        Self {
            number,
            file,
            path,
            len,
            written: len,
            buf: Vec::new(),
            view: None,
        }
    }

    /// Writes the buffered frames to the file (not synced).
    fn write_out(&mut self) -> std::result::Result<(), FileError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.file
            .write_at(self.written, &self.buf)
            .ctx("write run store", &self.path)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        debug_assert_eq!(self.written, self.len);
        Ok(())
    }

    /// The `len` bytes at `offset`, from the buffer or the file's view.
    /// A range that starts in the file must end there: frames never
    /// straddle `written`, which a write-out moves by whole frames.
    fn bytes_at(&mut self, offset: u64, len: usize) -> Result<&[u8]> {
        if offset >= self.written {
            let start = (offset - self.written) as usize;
            return self
                .buf
                .get(start..start + len)
                .ok_or(StorageError::Corrupt {
                    what: "run-store read past the buffered frames",
                    at: offset,
                });
        }
        let end = offset + len as u64;
        if end > self.written {
            return Err(StorageError::Corrupt {
                what: "run-store read across the end of the written frames",
                at: offset,
            });
        }
        if self.view.as_ref().is_none_or(|v| (v.len() as u64) < end) {
            // The old map goes first: two maps of a large file at once
            // would double the address space held for a moment.
            self.view = None;
            let ahead = self
                .written
                .saturating_mul(2)
                .max(self.written + MAP_AHEAD)
                .min(1 << OFFSET_BITS);
            let view = self.file.map_ahead(ahead).map_err(|e| {
                StorageError::io(format!("map {} for reading", self.path.display()), e)
            })?;
            self.view = Some(view);
        }
        self.view
            .as_deref()
            .and_then(|v| v.get(offset as usize..end as usize))
            .ok_or(StorageError::Corrupt {
                what: "run-store read past the mapped file",
                at: offset,
            })
    }

    /// Fills `out` from `offset`, from the buffer or the file.
    fn read_exact_at(&mut self, offset: u64, out: &mut [u8]) -> Result<()> {
        let src = self.bytes_at(offset, out.len())?;
        out.copy_from_slice(src);
        Ok(())
    }
}

/// Where a commit found the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StoreMark {
    pub(crate) generation: u64,
    pub(crate) len: u64,
    pub(crate) releases_len: u64,
}

/// A shard's run store in generation files. See the [module docs](self).
pub struct FileRuns<I: Io = crate::io::RealIo> {
    shared: Arc<Shared<I>>,
    current: Generation<I::File>,
    /// The generation compacted away, readable until the next commit.
    retiring: Option<Generation<I::File>>,
    /// The current generation's release log and its committed length.
    releases: I::File,
    releases_path: PathBuf,
    releases_len: u64,
    /// Released frames of the current generation (committed or not) and
    /// their payload lengths.
    released: FxHashMap<u64, u32>,
    /// Releases not yet in the release log.
    unlogged: Vec<(u64, u32)>,
    obsolete_bytes: u64,
    pub(crate) latched: bool,
}

impl<I: Io> FileRuns<I> {
    /// Opens the generation a commit named (`mark`; `None`: the shard never
    /// committed), cut back to its committed length, and deletes every
    /// other generation.
    pub(crate) fn open(
        shared: Arc<Shared<I>>,
        mark: Option<StoreMark>,
    ) -> std::result::Result<Self, FileError> {
        let dir = shared.dir.clone();
        let mark = match mark {
            Some(m) => m,
            None => {
                // A fresh store (or one whose first commit never finished):
                // start generation 1 from nothing.
                for name in [gen_name(1), rel_name(1)] {
                    let path = dir.join(name);
                    if shared.io.exists(&path) {
                        shared.io.remove_file(&path).ctx("remove", &path)?;
                    }
                }
                Self::create_generation(&shared, 1)?;
                StoreMark {
                    generation: 1,
                    len: GEN_HEADER,
                    releases_len: 0,
                }
            }
        };
        let path = dir.join(gen_name(mark.generation));
        let file = shared
            .io
            .open(&path, OpenMode::Existing)
            .ctx("open run store", &path)?;
        let size = file.size().ctx("stat run store", &path)?;
        if size < mark.len || mark.len < GEN_HEADER {
            return Err(FileError::Corrupt {
                file: path.display().to_string(),
                what: "run store shorter than its committed length",
                at: size,
            });
        }
        let mut header = [0u8; GEN_HEADER as usize];
        file.read_exact_at(0, &mut header)
            .ctx("read run store", &path)?;
        Self::check_header(&header, &path, shared.shard, mark.generation)?;
        // Frames appended after the last commit: unreferenced.
        shared.cut_to(&file, &path, mark.len)?;
        let releases_path = dir.join(rel_name(mark.generation));
        let releases =
            shared.open_or_create(&releases_path, mark.releases_len == 0, "open release log")?;
        let mut released = FxHashMap::default();
        let mut obsolete_bytes = 0u64;
        {
            let map = releases.map().ctx("map release log", &releases_path)?;
            let name = releases_path.display().to_string();
            chunks::read(&map, mark.releases_len, RELEASE_ENTRY, &name, |payload| {
                for e in payload.chunks_exact(RELEASE_ENTRY) {
                    let mut o = [0u8; 8];
                    o.copy_from_slice(&e[..8]);
                    let mut l = [0u8; 4];
                    l.copy_from_slice(&e[8..]);
                    let len = u32::from_le_bytes(l);
                    if released.insert(u64::from_le_bytes(o), len).is_none() {
                        obsolete_bytes += FRAME_HEADER + u64::from(len);
                    }
                }
                Ok(())
            })?;
        }
        shared.cut_to(&releases, &releases_path, mark.releases_len)?;
        // Every other generation is unreferenced.
        for name in shared.io.list_dir(&dir).ctx("list directory", &dir)? {
            let other = name.starts_with("store-")
                && name != gen_name(mark.generation)
                && name != rel_name(mark.generation);
            if other {
                let p = dir.join(&name);
                shared.io.remove_file(&p).ctx("remove", &p)?;
            }
        }
        Ok(Self {
            shared,
            current: Generation::new(mark.generation, file, path, mark.len),
            retiring: None,
            releases,
            releases_path,
            releases_len: mark.releases_len,
            released,
            unlogged: Vec::new(),
            obsolete_bytes,
            latched: false,
        })
    }

    fn check_header(
        header: &[u8],
        path: &Path,
        shard: u32,
        generation: u64,
    ) -> std::result::Result<(), FileError> {
        let corrupt = |what| FileError::Corrupt {
            file: path.display().to_string(),
            what,
            at: 0,
        };
        if header[..8] != MAGIC {
            return Err(corrupt("not a run-store file (bad magic)"));
        }
        let format = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        if format != FORMAT {
            return Err(FileError::Format {
                file: path.display().to_string(),
                found: format,
                supported: FORMAT,
            });
        }
        let mut s = [0u8; 4];
        s.copy_from_slice(&header[12..16]);
        let mut g = [0u8; 8];
        g.copy_from_slice(&header[16..24]);
        if u32::from_le_bytes(s) != shard || u64::from_le_bytes(g) != generation {
            return Err(corrupt("run store of another shard or generation"));
        }
        Ok(())
    }

    /// Creates generation `number` holding only its header, durable.
    fn create_generation(
        shared: &Shared<I>,
        number: u64,
    ) -> std::result::Result<Generation<I::File>, FileError> {
        let path = shared.dir.join(gen_name(number));
        let file = shared
            .io
            .open(&path, OpenMode::CreateNew)
            .ctx("create run store", &path)?;
        let mut header = Vec::with_capacity(GEN_HEADER as usize);
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&FORMAT.to_le_bytes());
        header.extend_from_slice(&shared.shard.to_le_bytes());
        header.extend_from_slice(&number.to_le_bytes());
        file.write_at(0, &header)
            .ctx("write run store header", &path)?;
        shared.sync(&file, &path)?;
        shared.sync_dir(&shared.dir)?;
        Ok(Generation::new(number, file, path, GEN_HEADER))
    }

    /// Appends one frame to `generation` (not synced) and returns its file
    /// offset.
    fn write_frame(generation: &mut Generation<I::File>, frame: &[u8]) -> Result<u64> {
        check_frame_len(frame)?;
        let offset = generation.len;
        let end = offset + FRAME_HEADER + frame.len() as u64;
        if end >= 1 << OFFSET_BITS {
            return Err(StorageError::TooLarge {
                what: "run-store generation (compact it)",
                len: end,
                max: 1 << OFFSET_BITS,
            });
        }
        let len = frame.len() as u32;
        let mut header = [0u8; FRAME_HEADER as usize];
        header[..4].copy_from_slice(&len.to_le_bytes());
        header[4..].copy_from_slice(&frame_crc(len, frame).to_le_bytes());
        if generation.buf.len() + frame.len() > WRITE_BUFFER {
            generation.write_out()?;
        }
        if frame.len() >= WRITE_BUFFER {
            // A large frame goes straight to the file, not through a copy.
            let g = &mut *generation;
            g.file
                .write_at(offset, &header)
                .and_then(|()| g.file.write_at(offset + FRAME_HEADER, frame))
                .ctx("write run store", &g.path)?;
            g.written = end;
        } else {
            generation.buf.extend_from_slice(&header);
            generation.buf.extend_from_slice(frame);
        }
        generation.len = end;
        Ok(offset)
    }

    /// Copies the live frames of the current generation into a new one.
    fn compact_into_next(&mut self) -> Result<(Generation<I::File>, Moves)> {
        let mut next = Self::create_generation(&self.shared, self.current.number + 1)
            .map_err(StorageError::from)?;
        let old = &mut self.current;
        let mut moves = Vec::new();
        let mut at = GEN_HEADER;
        let mut buf = Vec::new();
        while at < old.len {
            let mut header = [0u8; FRAME_HEADER as usize];
            old.read_exact_at(at, &mut header)?;
            let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
            let blob = BlobRef {
                offset: address(old.number, at),
                len,
            };
            if !self.released.contains_key(&at) {
                Self::read_from(old, at, blob, &mut buf)?;
                let offset = Self::write_frame(&mut next, &buf)?;
                let new = BlobRef {
                    offset: address(next.number, offset),
                    len,
                };
                moves.push((blob, new));
            }
            at += FRAME_HEADER + u64::from(len);
        }
        next.write_out()?;
        self.shared
            .sync(&next.file, &next.path)
            .map_err(StorageError::from)?;
        Ok((next, moves))
    }

    /// Bytes of released frames in the current generation.
    pub fn obsolete_bytes(&self) -> u64 {
        self.obsolete_bytes
    }

    /// Makes the store durable for a commit: syncs the generation, appends
    /// the releases since the last commit to the release log and syncs it.
    /// Returns what the commit records.
    pub(crate) fn prepare_commit(&mut self) -> std::result::Result<StoreMark, FileError> {
        self.current.write_out()?;
        self.shared.sync(&self.current.file, &self.current.path)?;
        if !self.unlogged.is_empty() {
            let mut payload = Vec::with_capacity(self.unlogged.len() * RELEASE_ENTRY);
            for (offset, len) in &self.unlogged {
                payload.extend_from_slice(&offset.to_le_bytes());
                payload.extend_from_slice(&len.to_le_bytes());
            }
            let mut out = Vec::new();
            chunks::encode(&payload, RELEASE_ENTRY, &mut out);
            self.releases
                .write_at(self.releases_len, &out)
                .ctx("append release log", &self.releases_path)?;
            self.shared.sync(&self.releases, &self.releases_path)?;
            self.releases_len += out.len() as u64;
            self.unlogged.clear();
        }
        Ok(StoreMark {
            generation: self.current.number,
            len: self.current.len,
            releases_len: self.releases_len,
        })
    }

    /// After a commit is durable: a generation compacted away is deleted.
    pub(crate) fn committed(&mut self) -> std::result::Result<(), FileError> {
        if let Some(old) = self.retiring.take() {
            // Its map and its file are closed before it is removed.
            drop(old.view);
            drop(old.file);
            self.shared
                .io
                .remove_file(&old.path)
                .ctx("remove", &old.path)?;
            let rel = self.shared.dir.join(rel_name(old.number));
            if self.shared.io.exists(&rel) {
                self.shared.io.remove_file(&rel).ctx("remove", &rel)?;
            }
            self.shared.sync_dir(&self.shared.dir)?;
        }
        Ok(())
    }

    /// `Closed` or `Latched` if a commit may not use this store.
    pub(crate) fn check_commit(&self) -> Result<()> {
        self.check_writable()
    }

    fn check_writable(&self) -> Result<()> {
        self.shared.check_open("run store")?;
        if self.latched {
            return Err(StorageError::Latched { what: "run store" });
        }
        Ok(())
    }

    /// `UnknownBlob` unless a frame of `blob.len` payload bytes at file
    /// offset `offset` lies within `generation`.
    fn check_bounds(generation: &Generation<I::File>, offset: u64, blob: BlobRef) -> Result<()> {
        let end = offset
            .checked_add(FRAME_HEADER + u64::from(blob.len))
            .ok_or(StorageError::UnknownBlob { blob })?;
        if offset < GEN_HEADER || end > generation.len {
            return Err(StorageError::UnknownBlob { blob });
        }
        Ok(())
    }

    /// The frame's crc from its `header`, after checking that the header's
    /// length is the reference's (`UnknownBlob` otherwise).
    fn header_crc(header: &[u8], blob: BlobRef) -> Result<u32> {
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        if len != blob.len {
            return Err(StorageError::UnknownBlob { blob });
        }
        Ok(u32::from_le_bytes([
            header[4], header[5], header[6], header[7],
        ]))
    }

    /// Checks that `blob` names a frame of `generation` (in bounds, its
    /// header's length the reference's).
    fn frame_at(generation: &mut Generation<I::File>, offset: u64, blob: BlobRef) -> Result<()> {
        Self::check_bounds(generation, offset, blob)?;
        let mut header = [0u8; FRAME_HEADER as usize];
        generation.read_exact_at(offset, &mut header)?;
        Self::header_crc(&header, blob).map(|_| ())
    }

    /// Reads the frame at `blob` from generation `generation`, checking its
    /// header and crc. The frame's bytes are borrowed from the file's map
    /// (or the write buffer) and the payload copied once into `out`, which
    /// is not zeroed first; the crc is computed over that copy, so the
    /// bytes returned are the bytes checked.
    fn read_from(
        generation: &mut Generation<I::File>,
        offset: u64,
        blob: BlobRef,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        Self::check_bounds(generation, offset, blob)?;
        let header = FRAME_HEADER as usize;
        out.clear();
        let checked = generation
            .bytes_at(offset, header + blob.len as usize)
            .and_then(|frame| {
                let crc = Self::header_crc(&frame[..header], blob)?;
                out.extend_from_slice(&frame[header..]);
                if frame_crc(blob.len, out) == crc {
                    return Ok(());
                }
                Err(StorageError::Corrupt {
                    what: "run-store frame (crc; offset is the frame address)",
                    at: blob.offset,
                })
            });
        if checked.is_err() {
            // Never leave other bytes in `out`.
            out.clear();
        }
        checked
    }

    /// The generation `blob` points into: the current one or the one
    /// being retired; else `UnknownBlob`.
    fn generation_of(&mut self, blob: BlobRef) -> Result<(&mut Generation<I::File>, u64)> {
        let (generation, offset) = split(blob.offset);
        let low = |n: u64| n & ((1 << GEN_BITS) - 1);
        if generation == low(self.current.number) {
            return Ok((&mut self.current, offset));
        }
        match &mut self.retiring {
            Some(old) if generation == low(old.number) => Ok((old, offset)),
            _ => Err(StorageError::UnknownBlob { blob }),
        }
    }
}

impl<I: Io> RunStore for FileRuns<I> {
    fn append(&mut self, frame: &[u8]) -> Result<BlobRef> {
        self.check_writable()?;
        let offset = match Self::write_frame(&mut self.current, frame) {
            Ok(offset) => offset,
            Err(e @ StorageError::Io { .. }) => {
                // The file's tail is in an unknown state.
                self.latched = true;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        Ok(BlobRef {
            offset: address(self.current.number, offset),
            len: frame.len() as u32,
        })
    }

    fn read(&mut self, blob: BlobRef, out: &mut Vec<u8>) -> Result<()> {
        self.shared.check_open("run store")?;
        let (generation, offset) = self.generation_of(blob)?;
        Self::read_from(generation, offset, blob, out)
    }

    fn release(&mut self, blob: BlobRef) -> Result<()> {
        self.check_writable()?;
        let current = self.current.number;
        let (generation, offset) = self.generation_of(blob)?;
        Self::frame_at(generation, offset, blob)?;
        if generation.number != current {
            // A frame of the generation being retired: it goes with it.
            return Ok(());
        }
        if self.released.insert(offset, blob.len).is_none() {
            self.unlogged.push((offset, blob.len));
            self.obsolete_bytes += FRAME_HEADER + u64::from(blob.len);
        }
        Ok(())
    }

    fn compact(&mut self, moved: &mut dyn FnMut(BlobRef, BlobRef)) -> Result<u64> {
        self.check_writable()?;
        if self.obsolete_bytes == 0 || self.retiring.is_some() {
            // Nothing to reclaim, or the last compaction is not committed.
            return Ok(0);
        }
        let (next, moves) = match self.compact_into_next() {
            Ok(done) => done,
            Err(e) => {
                // The old generation is untouched; the new one is deleted
                // at the next open.
                self.latched = true;
                return Err(e);
            }
        };
        let rel_path = self.shared.dir.join(rel_name(next.number));
        let rel = match self.shared.io.open(&rel_path, OpenMode::CreateNew) {
            Ok(f) => f,
            Err(e) => {
                self.latched = true;
                return Err(StorageError::io(
                    format!("create {}", rel_path.display()),
                    e,
                ));
            }
        };
        if let Err(e) = self.shared.sync_dir(&self.shared.dir) {
            self.latched = true;
            return Err(e.into());
        }
        let old = std::mem::replace(&mut self.current, next);
        self.retiring = Some(old);
        self.releases = rel;
        self.releases_path = rel_path;
        self.releases_len = 0;
        self.released = FxHashMap::default();
        self.unlogged.clear();
        self.obsolete_bytes = 0;
        for &(old, new) in &moves {
            moved(old, new);
        }
        Ok(moves.len() as u64)
    }

    fn position(&self) -> u64 {
        address(self.current.number, self.current.len)
    }
}

impl<I: Io> std::fmt::Debug for FileRuns<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileRuns")
            .field("dir", &self.shared.dir)
            .finish_non_exhaustive()
    }
}
