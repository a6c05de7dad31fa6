//! [`RedbRuns`]: a shard's run store. A frame's address is its frame number
//! (`BlobRef::offset`), numbered from the committed position on.
//!
//! Appended frames wait in memory (readable at once) until they add up to
//! [`SPILL_BYTES`]; then they are written in one non-durable transaction
//! (`Durability::None`: no fsync). The next checkpoint commit writes the
//! rest in its own durable transaction, which makes the spilled ones durable
//! too. So frames between commits never pay a durable commit, memory stays
//! bounded, and a frame reaching the file early (a log flush persists every
//! earlier non-durable transaction) is harmless: it lies at or past the
//! committed position, and opening the shard deletes those.
//!
//! Releases are remembered and applied (deleted) by the next commit, so a
//! crash before it leaves released frames readable.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use fusee_core::shard::BlobRef;
use fusee_storage::{MAX_FRAME, MAX_OFFSET, Result, RunStore, StorageError};
use redb::{Durability, ReadableDatabase, WriteTransaction};

use crate::layout::{CRC, STORE, check_crc, seq_key, with_crc};
use crate::storage::ShardHandle;

pub(crate) const WHAT: &str = "redb run store";

/// Buffered frame bytes that make the store write them out (non-durably).
pub const SPILL_BYTES: usize = 4 << 20;

/// The redb backend's run-store part.
pub struct RedbRuns {
    pub(crate) h: Arc<ShardHandle>,
    /// The next frame number (the store's position).
    next: u64,
    /// Frames not yet written to the file, in stored form, by number.
    buffer: BTreeMap<u64, Vec<u8>>,
    buffer_bytes: usize,
    /// Frames released since the last commit.
    released: HashSet<u64>,
    pub(crate) latched: bool,
}

impl std::fmt::Debug for RedbRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbRuns")
            .field("shard", &self.h.id)
            .field("next", &self.next)
            .field("buffered", &self.buffer.len())
            .field("released", &self.released.len())
            .finish_non_exhaustive()
    }
}

impl RedbRuns {
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

    /// Writes the buffered frames in one non-durable transaction.
    fn spill(&mut self) -> Result<()> {
        let doing = "writing run-store frames";
        let db = self.h.db(WHAT)?;
        self.h.shield(|| {
            let tx = self.h.begin(&db, Durability::None, doing)?;
            self.write_buffer(&tx, doing)?;
            self.h.commit(tx, doing)
        })?;
        self.buffer.clear();
        self.buffer_bytes = 0;
        Ok(())
    }

    fn write_buffer(&self, tx: &WriteTransaction, doing: &str) -> Result<()> {
        let mut store = tx.open_table(STORE).map_err(self.h.err(doing))?;
        for (&n, frame) in &self.buffer {
            store
                .insert(seq_key(self.h.id, n), frame.as_slice())
                .map_err(self.h.err(doing))?;
        }
        Ok(())
    }

    /// Writes everything the next commit makes durable into `tx`: the
    /// buffered frames and the deletion of released ones. Returns the
    /// position to record.
    pub(crate) fn write_for_commit(&self, tx: &WriteTransaction) -> Result<u64> {
        let doing = "committing run-store frames";
        self.write_buffer(tx, doing)?;
        let mut store = tx.open_table(STORE).map_err(self.h.err(doing))?;
        for &n in &self.released {
            store
                .remove(seq_key(self.h.id, n))
                .map_err(self.h.err(doing))?;
        }
        Ok(self.next)
    }

    /// The commit that [`RedbRuns::write_for_commit`] wrote into succeeded.
    pub(crate) fn committed(&mut self) {
        self.buffer.clear();
        self.buffer_bytes = 0;
        self.released.clear();
    }

    /// Whether `blob` names a live frame; `Corrupt` if its bytes are damaged.
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
        self.h.shield(|| self.read_stored(&db, blob, out))
    }

    /// [`RedbRuns::live`] for a frame in the table.
    fn read_stored(
        &self,
        db: &redb::Database,
        blob: BlobRef,
        out: Option<&mut Vec<u8>>,
    ) -> Result<bool> {
        let fits = |stored: &[u8]| stored.len() == CRC + blob.len as usize;
        let doing = "reading a run-store frame";
        let tx = db.begin_read().map_err(self.h.err(doing))?;
        let store = tx.open_table(STORE).map_err(self.h.err(doing))?;
        let Some(value) = store
            .get(seq_key(self.h.id, blob.offset))
            .map_err(self.h.err(doing))?
        else {
            return Ok(false);
        };
        let stored = value.value();
        if !fits(stored) {
            return Ok(false);
        }
        let bytes = check_crc(stored, "redb run-store frame number", blob.offset)?;
        if let Some(out) = out {
            out.clear();
            out.extend_from_slice(bytes);
        }
        Ok(true)
    }
}

impl RunStore for RedbRuns {
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
        // redb reuses freed pages itself: the commit that deletes released
        // frames reclaims their space in place, so nothing ever moves.
        Ok(0)
    }

    fn position(&self) -> u64 {
        self.next
    }
}
