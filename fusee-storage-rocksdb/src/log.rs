//! [`RocksLog`]: a shard's log. Appends wait in memory; a flush writes them
//! and the log row in one write batch written with `sync` (one WAL fsync
//! per batch).
//!
//! Memory is bounded: once the waiting records pass [`LOG_SPILL_BYTES`] they
//! are written in a batch without `sync`. Nothing about durability changes:
//! `durable_lsn` moves only on a flush, and the log row keeps counting
//! flushed records only, so opening the shard deletes spilled records even
//! when a later synced batch (of any shard) or a WAL replay made them
//! durable: after any reopen the log holds exactly the flushed records.
//!
//! [`fusee_storage::LogStore::discard_through`] is one range deletion and
//! the new log row, written without `sync`: a crash may bring the records
//! back, which the contract allows.

use std::sync::Arc;

use fusee_core::record::Lsn;
use fusee_storage::{LogStore, MAX_RECORD, Result, StorageError};
use rocksdb::{DB, WriteBatch};

use crate::layout::{CRC, LOG, LogRow, META, TAG_LOG, check_crc, meta_key, seq_key, seq_of};
use crate::storage::{ShardHandle, family, injected, range};

const WHAT: &str = "rocksdb log";

/// Bytes of unflushed records held in memory before they are written out
/// (without `sync`).
pub const LOG_SPILL_BYTES: usize = 16 << 20;

/// The RocksDB backend's log part.
pub struct RocksLog {
    h: Arc<ShardHandle>,
    /// The LSN before the first record kept.
    base: Lsn,
    /// The last LSN written with `sync`.
    durable: Lsn,
    /// The last LSN written to the database (synced or not): `>= durable`.
    written: Lsn,
    /// Records `written + 1 ..` in their stored form (CRC-prefixed), waiting
    /// for the next flush; at most [`LOG_SPILL_BYTES`] (plus one record).
    pending: Vec<Vec<u8>>,
    pending_bytes: usize,
    latched: bool,
}

impl std::fmt::Debug for RocksLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksLog")
            .field("shard", &self.h.id)
            .field("base", &self.base)
            .field("durable", &self.durable)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl RocksLog {
    pub(crate) fn new(h: Arc<ShardHandle>, row: LogRow) -> Self {
        Self {
            h,
            base: row.base,
            durable: row.last,
            written: row.last,
            pending: Vec::new(),
            pending_bytes: 0,
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

    /// Writes the pending records and the log row in one batch, synced or
    /// not; on success they are written through `last`.
    fn write_pending(&mut self, last: Lsn, sync: bool) -> Result<()> {
        let result = self.write_batch(last, sync);
        // Either way the records leave memory: written, or never to be
        // treated as safe (the caller latches the part).
        self.pending.clear();
        self.pending_bytes = 0;
        if result.is_ok() {
            self.written = last;
        }
        result
    }

    fn write_batch(&self, last: Lsn, sync: bool) -> Result<()> {
        let doing = "flushing the log";
        let db = self.h.db(WHAT)?;
        if sync && self.h.take_fail_flush() {
            return Err(injected(doing, self.h.id));
        }
        let mut batch = WriteBatch::default();
        let records = family(&db, LOG)?;
        for (lsn, record) in (self.written + 1..).zip(&self.pending) {
            batch.put_cf(records, seq_key(self.h.id, lsn), record);
        }
        // The row counts flushed records only: a spill (not synced) keeps
        // `last` at the durable LSN, so opening the shard cuts spilled
        // records whatever made them durable.
        let row = LogRow {
            base: self.base,
            last: if sync { last } else { self.durable },
        };
        batch.put_cf(
            family(&db, META)?,
            meta_key(self.h.id, TAG_LOG),
            row.encode(),
        );
        self.h.write(&db, batch, sync, doing)
    }

    /// Visits written records `from..=self.written` in order, checking each
    /// CRC and that no LSN is missing.
    fn read_written(
        &self,
        db: &DB,
        from: Lsn,
        visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let doing = "reading the log";
        let records = family(db, LOG)?;
        let end = match self.written.checked_add(1) {
            Some(next) => seq_key(self.h.id, next).to_vec(),
            None => crate::layout::seq_end(self.h.id).to_vec(),
        };
        let mut it = range(db, records, &seq_key(self.h.id, from), &end);
        let mut next = from;
        while let (Some(key), Some(value)) = (it.key(), it.value()) {
            if seq_of(key) != Some(next) {
                break;
            }
            let record = check_crc(value, "rocksdb log record at LSN", next)?;
            visit(next, record)?;
            next += 1;
            it.next();
        }
        it.status().map_err(self.h.err(doing))?;
        if next <= self.written {
            return Err(StorageError::Corrupt {
                what: "rocksdb log: missing record at LSN",
                at: next,
            });
        }
        Ok(())
    }

    /// Deletes records `base+1..=lsn` and moves the log row's base, in one
    /// batch without `sync`.
    fn discard_batch(&self, db: &DB, lsn: Lsn) -> Result<()> {
        let doing = "discarding log records";
        let mut batch = WriteBatch::default();
        let end = match lsn.checked_add(1) {
            Some(next) => seq_key(self.h.id, next).to_vec(),
            None => crate::layout::seq_end(self.h.id).to_vec(),
        };
        batch.delete_range_cf(
            family(db, LOG)?,
            &seq_key(self.h.id, self.base + 1)[..],
            &end[..],
        );
        let row = LogRow {
            base: lsn,
            last: self.durable,
        };
        batch.put_cf(
            family(db, META)?,
            meta_key(self.h.id, TAG_LOG),
            row.encode(),
        );
        self.h.write(db, batch, false, doing)
    }

    /// Latches the part after a failed write: the log ends at what is known
    /// durable.
    fn latch(&mut self) {
        self.latched = true;
        self.pending.clear();
        self.pending_bytes = 0;
        self.written = self.durable;
    }
}

impl LogStore for RocksLog {
    fn append(&mut self, lsn: Lsn, record: &[u8]) -> Result<()> {
        self.writable()?;
        if record.len() > MAX_RECORD {
            return Err(StorageError::TooLarge {
                what: "log record",
                len: record.len() as u64,
                max: MAX_RECORD as u64,
            });
        }
        let expected = self.last_lsn() + 1;
        if lsn != expected {
            return Err(StorageError::LsnGap { expected, got: lsn });
        }
        let stored = crate::layout::with_crc(record);
        self.pending_bytes += stored.len();
        self.pending.push(stored);
        if self.pending_bytes >= LOG_SPILL_BYTES
            && let Err(e) = self.write_pending(lsn, false)
        {
            self.latch();
            return Err(e);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<Lsn> {
        self.writable()?;
        let last = self.last_lsn();
        if last == self.durable {
            return Ok(last);
        }
        match self.write_pending(last, true) {
            Ok(()) => {
                self.durable = last;
                Ok(last)
            }
            Err(e) => {
                self.latch();
                Err(e)
            }
        }
    }

    fn read(&mut self, after: Lsn, visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>) -> Result<Lsn> {
        let db = self.h.db(WHAT)?;
        if after < self.base {
            return Err(StorageError::Trimmed {
                first_kept: self.base + 1,
            });
        }
        let last = self.last_lsn();
        if after > last {
            return Err(StorageError::BeyondEnd { after, last });
        }
        if after < self.written {
            self.read_written(&db, after + 1, visit)?;
        }
        let skip = usize::try_from(after.saturating_sub(self.written)).unwrap_or(usize::MAX);
        for (lsn, record) in (self.written + 1..).zip(&self.pending).skip(skip) {
            debug_assert!(lsn > after);
            visit(lsn, &record[CRC..])?;
        }
        Ok(last)
    }

    fn discard_through(&mut self, lsn: Lsn) -> Result<()> {
        self.writable()?;
        if lsn > self.durable {
            return Err(StorageError::Misuse {
                call: "LogStore::discard_through",
                why: "the LSN is not durable yet",
            });
        }
        if lsn <= self.base {
            return Ok(());
        }
        let db = self.h.db(WHAT)?;
        self.discard_batch(&db, lsn)?;
        self.base = lsn;
        Ok(())
    }

    fn first_lsn(&self) -> Lsn {
        self.base + 1
    }

    fn last_lsn(&self) -> Lsn {
        self.written + self.pending.len() as u64
    }

    fn durable_lsn(&self) -> Lsn {
        self.durable
    }
}
