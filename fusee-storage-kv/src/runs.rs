//! [`KvRuns`]: a shard's run store on an ordered key-value engine, written
//! once for both backends; the engine supplies the spill write and the
//! point read of [`FrameEngine`].
//!
//! A frame's address is its frame number (`BlobRef::offset`), numbered from
//! the committed position on; its key is (shard, frame number) and its
//! length is checked against the stored value's.
//!
//! Appended frames wait in memory (readable at once) until they add up to
//! [`SPILL_BYTES`]; then they are written in one write that is not durable.
//! The next checkpoint commit writes the rest in its own durable write,
//! which makes the spilled ones durable too. So frames between commits never
//! pay an fsync, memory stays bounded, and a frame reaching stable storage
//! early is harmless: it lies at or past the committed position, and
//! opening the shard deletes those ([`crate::Cleanup`]).
//!
//! Releases are remembered and applied (deleted) by the next commit, so a
//! crash before it leaves released frames readable. Nothing ever moves: the
//! engines reclaim deleted frames' space themselves, so
//! [`RunStore::compact`] returns 0.

use std::collections::{BTreeMap, HashSet};

use fusee_core::shard::BlobRef;
use fusee_storage::{MAX_OFFSET, Result, RunStore, StorageError, check_frame_len};

use crate::Names;
use crate::layout::{CRC, check_crc, seq_key, with_crc};

/// Buffered frame bytes that make the store write them out (not durably).
pub const SPILL_BYTES: usize = 4 << 20;

/// What a backend does for its run-store part: one shard's store table, on
/// one engine. The commit's writes are the checkpoint engine's
/// ([`crate::checkpoint::IndexEngine::commit`]).
pub trait FrameEngine: crate::ShardEngine {
    /// Writes `frames` (frame number → stored form) in one write that need
    /// not be durable.
    fn spill(&self, frames: &BTreeMap<u64, Vec<u8>>) -> Result<()>;

    /// Calls `f` with the stored value of frame `n` (`None` if there is
    /// none) and returns what it returns. `f` never calls out to the
    /// storage's caller, so an engine may run it under a panic shield.
    fn with_stored<T>(&self, n: u64, f: impl FnOnce(Option<&[u8]>) -> Result<T>) -> Result<T>;

    /// [`RunStore::prefetch`] of stored frames `numbers`: an engine whose
    /// reads are round trips fetches them together and serves the next
    /// [`FrameEngine::with_stored`] of each from what it fetched. Default:
    /// nothing.
    fn prefetch(&self, numbers: &[u64]) -> Result<()> {
        let _ = numbers;
        Ok(())
    }
}

/// A shard's run-store part on engine `E`. Its [`RunStore`] implementation
/// is the whole of both backends' run-store logic; the checkpoint part
/// reads [`KvRuns::buffered`] and [`KvRuns::released`] into its commit.
pub struct KvRuns<E> {
    engine: E,
    names: &'static Names,
    /// The next frame number (the store's position).
    next: u64,
    /// Frames not yet written, in stored form, by number.
    buffer: BTreeMap<u64, Vec<u8>>,
    buffer_bytes: usize,
    /// Frames released since the last commit.
    released: HashSet<u64>,
    latched: bool,
}

impl<E: FrameEngine> std::fmt::Debug for KvRuns<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvRuns")
            .field("shard", &self.engine.shard())
            .field("next", &self.next)
            .field("buffered", &self.buffer.len())
            .field("released", &self.released.len())
            .finish_non_exhaustive()
    }
}

impl<E: FrameEngine> KvRuns<E> {
    /// The run store of a shard whose committed position is `position`
    /// (after the open-time cleanup, so no frame at or past it exists).
    pub fn new(engine: E, position: u64, names: &'static Names) -> Self {
        Self {
            engine,
            names,
            next: position,
            buffer: BTreeMap::new(),
            buffer_bytes: 0,
            released: HashSet::new(),
            latched: false,
        }
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// Frames not yet written (frame number → stored form): the next commit
    /// writes them.
    pub fn buffered(&self) -> &BTreeMap<u64, Vec<u8>> {
        &self.buffer
    }

    /// Frames released since the last commit: the next commit deletes them.
    pub fn released(&self) -> impl Iterator<Item = u64> + '_ {
        self.released.iter().copied()
    }

    /// The commit that wrote [`KvRuns::buffered`] and deleted
    /// [`KvRuns::released`] is durable.
    pub fn committed(&mut self) {
        self.buffer.clear();
        self.buffer_bytes = 0;
        self.released.clear();
    }

    /// `Latched` if a failed write latched the part.
    pub fn check_latched(&self) -> Result<()> {
        if self.latched {
            return Err(StorageError::Latched {
                what: self.names.runs,
            });
        }
        Ok(())
    }

    /// Latches the part: a commit that should have written its frames failed.
    pub fn latch(&mut self) {
        self.latched = true;
    }

    fn writable(&self) -> Result<()> {
        self.engine.check_open(self.names.runs)?;
        self.check_latched()
    }

    /// Writes the buffered frames in one write that is not durable.
    fn spill(&mut self) -> Result<()> {
        self.engine.spill(&self.buffer)?;
        self.buffer.clear();
        self.buffer_bytes = 0;
        Ok(())
    }

    /// Whether `blob` names a live frame (copying it into `out` if given);
    /// `Corrupt` if its bytes are damaged.
    fn live(&self, blob: BlobRef, out: Option<&mut Vec<u8>>) -> Result<bool> {
        if blob.offset >= self.next || self.released.contains(&blob.offset) {
            return Ok(false);
        }
        let what = self.names.frame;
        let copy = |stored: Option<&[u8]>, out: Option<&mut Vec<u8>>| {
            let Some(stored) = stored else {
                return Ok(false);
            };
            // Damage first: a value cut short is `Corrupt`, not a caller's
            // wrong length.
            let key = seq_key(self.engine.shard(), blob.offset);
            let bytes = check_crc(&key, stored, what, blob.offset)?;
            if bytes.len() != blob.len as usize {
                return Ok(false);
            }
            if let Some(out) = out {
                out.clear();
                out.extend_from_slice(bytes);
            }
            Ok(true)
        };
        let Some(stored) = self.buffer.get(&blob.offset) else {
            return self
                .engine
                .with_stored(blob.offset, |stored| copy(stored, out));
        };
        // Frames in memory were framed by `append`: no CRC to check.
        if stored.len() != CRC + blob.len as usize {
            return Ok(false);
        }
        if let Some(out) = out {
            out.clear();
            out.extend_from_slice(&stored[CRC..]);
        }
        Ok(true)
    }
}

impl<E: FrameEngine> RunStore for KvRuns<E> {
    fn append(&mut self, frame: &[u8]) -> Result<BlobRef> {
        self.writable()?;
        let len = check_frame_len(frame)?;
        if self.next > MAX_OFFSET {
            return Err(StorageError::TooLarge {
                what: "run store (frame numbers)",
                len: self.next,
                max: MAX_OFFSET,
            });
        }
        let blob = BlobRef {
            offset: self.next,
            len,
        };
        let key = seq_key(self.engine.shard(), self.next);
        self.buffer.insert(self.next, with_crc(&key, frame));
        self.buffer_bytes += CRC + frame.len();
        self.next += 1;
        if self.buffer_bytes >= SPILL_BYTES
            && let Err(e) = self.spill()
        {
            self.latched = true;
            return Err(e);
        }
        Ok(blob)
    }

    fn read(&mut self, blob: BlobRef, out: &mut Vec<u8>) -> Result<()> {
        self.engine.check_open(self.names.runs)?;
        if self.live(blob, Some(out))? {
            Ok(())
        } else {
            Err(StorageError::UnknownBlob { blob })
        }
    }

    fn prefetch(&mut self, blobs: &[BlobRef]) -> Result<()> {
        self.engine.check_open(self.names.runs)?;
        // Frames still buffered here are read from memory anyway.
        let stored: Vec<u64> = blobs
            .iter()
            .map(|b| b.offset)
            .filter(|n| *n < self.next && !self.buffer.contains_key(n))
            .collect();
        if stored.is_empty() {
            return Ok(());
        }
        self.engine.prefetch(&stored)
    }

    fn release(&mut self, blob: BlobRef) -> Result<()> {
        self.writable()?;
        if !self.live(blob, None)? {
            return Err(StorageError::UnknownBlob { blob });
        }
        self.released.insert(blob.offset);
        Ok(())
    }

    fn compact(&mut self, _moved: &mut dyn FnMut(BlobRef, BlobRef)) -> Result<u64> {
        self.writable()?;
        // Both engines reclaim deleted frames' space themselves (redb reuses
        // freed pages, RocksDB compacts and collects blob files), and a
        // frame's address is its key, never a file offset: nothing moves.
        Ok(0)
    }

    fn position(&self) -> u64 {
        self.next
    }
}
