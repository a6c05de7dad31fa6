//! [`RocksRuns`]: a shard's run store. A frame's address is its frame number
//! (`BlobRef::offset`), numbered from the committed position on; its key is
//! (shard, frame number) and its length is checked against the stored
//! value's.
//!
//! Appended frames wait in memory (readable at once) until they add up to
//! [`SPILL_BYTES`]; then they are written in one batch without `sync`. The
//! next checkpoint commit writes the rest in its own synced batch, which
//! makes the spilled ones durable too (the WAL is sequential). So frames
//! between commits never pay an fsync, memory stays bounded, and a frame
//! reaching the disk early is harmless: it lies at or past the committed
//! position, and opening the shard deletes those.
//!
//! Releases are remembered and applied (deleted) by the next commit, so a
//! crash before it leaves released frames readable.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use fusee_core::shard::BlobRef;
use fusee_storage::{MAX_FRAME, MAX_OFFSET, Result, RunStore, StorageError};
use rocksdb::{DB, WriteBatch};

use crate::layout::{CRC, STORE, check_crc, seq_key, with_crc};
use crate::storage::{ShardHandle, family};

pub(crate) const WHAT: &str = "rocksdb run store";

/// Buffered frame bytes that make the store write them out (without `sync`).
pub const SPILL_BYTES: usize = 4 << 20;

/// The RocksDB backend's run-store part.
pub struct RocksRuns {
    pub(crate) h: Arc<ShardHandle>,
    /// The next frame number (the store's position).
    next: u64,
    /// Frames not yet written to the database, in stored form, by number.
    buffer: BTreeMap<u64, Vec<u8>>,
    buffer_bytes: usize,
    /// Frames released since the last commit.
    released: HashSet<u64>,
    pub(crate) latched: bool,
}

impl std::fmt::Debug for RocksRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksRuns")
            .field("shard", &self.h.id)
            .field("next", &self.next)
            .field("buffered", &self.buffer.len())
            .field("released", &self.released.len())
            .finish_non_exhaustive()
    }
}

impl RocksRuns {
    pub(crate) fn new(h: Arc<ShardHandle>, position: u64) -> Self {
        Self {
            h,
            next: position,
            buffer: BTreeMap::new(),
            buffer_bytes: 0,
            released: HashSet::new(),
            latched: false,
        }
    }

    fn writable(&self) -> Result<()> {
        self.h.check_open(WHAT)?;
        if self.latched {
            return Err(StorageError::Latched { what: WHAT });
        }
        Ok(())
    }

    /// Writes the buffered frames in one batch without `sync`.
    fn spill(&mut self) -> Result<()> {
        let db = self.h.db(WHAT)?;
        let mut batch = WriteBatch::default();
        self.write_buffer(&db, &mut batch)?;
        self.h
            .write(&db, batch, false, "writing run-store frames")?;
        self.buffer.clear();
        self.buffer_bytes = 0;
        Ok(())
    }

    fn write_buffer(&self, db: &DB, batch: &mut WriteBatch) -> Result<()> {
        let store = family(db, STORE)?;
        for (&n, frame) in &self.buffer {
            batch.put_cf(store, seq_key(self.h.id, n), frame);
        }
        Ok(())
    }

    /// Adds everything the next commit makes durable to `batch`: the
    /// buffered frames and the deletion of released ones. Returns the
    /// position to record.
    pub(crate) fn write_for_commit(&self, db: &DB, batch: &mut WriteBatch) -> Result<u64> {
        self.write_buffer(db, batch)?;
        let store = family(db, STORE)?;
        for &n in &self.released {
            batch.delete_cf(store, seq_key(self.h.id, n));
        }
        Ok(self.next)
    }

    /// The commit that [`RocksRuns::write_for_commit`] wrote into succeeded.
    pub(crate) fn committed(&mut self) {
        self.buffer.clear();
        self.buffer_bytes = 0;
        self.released.clear();
    }

    /// Whether `blob` names a live frame (copying it into `out` if given);
    /// `Corrupt` if its bytes are damaged.
    fn live(&self, blob: BlobRef, out: Option<&mut Vec<u8>>) -> Result<bool> {
        if blob.offset >= self.next || self.released.contains(&blob.offset) {
            return Ok(false);
        }
        let fits = |stored: &[u8]| stored.len() == CRC + blob.len as usize;
        if let Some(stored) = self.buffer.get(&blob.offset) {
            if !fits(stored) {
                return Ok(false);
            }
            if let Some(out) = out {
                out.clear();
                out.extend_from_slice(&stored[CRC..]);
            }
            return Ok(true);
        }
        let db = self.h.db(WHAT)?;
        let Some(stored) = db
            .get_pinned_cf(family(&db, STORE)?, seq_key(self.h.id, blob.offset))
            .map_err(self.h.err("reading a run-store frame"))?
        else {
            return Ok(false);
        };
        if !fits(&stored) {
            return Ok(false);
        }
        let bytes = check_crc(&stored, "rocksdb run-store frame number", blob.offset)?;
        if let Some(out) = out {
            out.clear();
            out.extend_from_slice(bytes);
        }
        Ok(true)
    }
}

impl RunStore for RocksRuns {
    fn append(&mut self, frame: &[u8]) -> Result<BlobRef> {
        self.writable()?;
        let len = u32::try_from(frame.len())
            .ok()
            .filter(|&l| l as usize <= MAX_FRAME)
            .ok_or(StorageError::TooLarge {
                what: "run-store frame",
                len: frame.len() as u64,
                max: MAX_FRAME as u64,
            })?;
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
        self.buffer.insert(self.next, with_crc(frame));
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
        self.h.check_open(WHAT)?;
        if self.live(blob, Some(out))? {
            Ok(())
        } else {
            Err(StorageError::UnknownBlob { blob })
        }
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
        // RocksDB reclaims deleted frames itself (compaction drops the keys,
        // blob garbage collection the blob files), and a frame's address is
        // its key, never a file offset: nothing ever moves.
        Ok(0)
    }

    fn position(&self) -> u64 {
        self.next
    }
}
