//! [`RedbLog`]: a shard's log. Appends wait in memory; a flush writes them
//! and the log row in one write transaction committed with
//! `Durability::Immediate` (one fsync per batch).
//!
//! Memory is bounded: once the waiting records pass [`LOG_SPILL_BYTES`] they
//! are written in a non-durable transaction. Nothing about durability
//! changes: `durable_lsn` moves only on a flush, and the log row keeps
//! counting flushed records only, so opening the shard deletes spilled
//! records even when another transaction (or redb's shutdown on close) made
//! them durable: after any reopen the log holds exactly the flushed
//! records.

use std::sync::Arc;

use fusee_core::record::Lsn;
use fusee_storage::{LogStore, MAX_RECORD, Result, StorageError};
use redb::{Durability, ReadableDatabase};

use crate::layout::{CRC, LOG, LogRow, META, TAG_LOG, check_crc, meta_key, seq_key, seq_of};
use crate::storage::{ShardHandle, injected};

const WHAT: &str = "redb log";

/// Bytes of unflushed records held in memory before they are written out
/// (non-durably).
pub const LOG_SPILL_BYTES: usize = 16 << 20;

/// Records copied out of the table per read transaction.
const READ_BATCH: usize = 1024;
/// Bytes copied out per read transaction (at least one record).
const READ_BATCH_BYTES: usize = 4 << 20;

/// The redb backend's log part.
pub struct RedbLog {
    h: Arc<ShardHandle>,
    /// The LSN before the first record kept.
    base: Lsn,
    /// The last LSN committed durably.
    durable: Lsn,
    /// The last LSN written to the table (durably or not): `>= durable`.
    written: Lsn,
    /// Records `written + 1 ..` in their stored form (CRC-prefixed), waiting
    /// for the next flush; at most [`LOG_SPILL_BYTES`] (plus one record).
    pending: Vec<Vec<u8>>,
    pending_bytes: usize,
    latched: bool,
}

impl std::fmt::Debug for RedbLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbLog")
            .field("shard", &self.h.id)
            .field("base", &self.base)
            .field("durable", &self.durable)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl RedbLog {
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

    /// Writes the pending records and the log row in one transaction of
    /// `durability`; on success they are written through `last`.
    fn write_pending(&mut self, last: Lsn, durability: Durability) -> Result<()> {
        let result = self.h.shield(|| self.write_txn(last, durability));
        // Either way the records leave memory: written, or never to be
        // treated as safe (the caller latches the part).
        self.pending.clear();
        self.pending_bytes = 0;
        if result.is_ok() {
            self.written = last;
        }
        result
    }

    fn write_txn(&self, last: Lsn, durability: Durability) -> Result<()> {
        let doing = "flushing the log";
        let db = self.h.db(WHAT)?;
        if matches!(durability, Durability::Immediate) && self.h.take_fail_flush() {
            return Err(injected(doing, self.h.id));
        }
        let tx = self.h.begin(&db, durability, doing)?;
        {
            let mut records = tx.open_table(LOG).map_err(self.h.err(doing))?;
            for (lsn, record) in (self.written + 1..).zip(&self.pending) {
                records
                    .insert(seq_key(self.h.id, lsn), record.as_slice())
                    .map_err(self.h.err(doing))?;
            }
            // The row counts flushed records only: a spill (non-durable)
            // keeps `last` at the durable LSN, so opening the shard cuts
            // spilled records whatever made them durable.
            let row = LogRow {
                base: self.base,
                last: if matches!(durability, Durability::Immediate) {
                    last
                } else {
                    self.durable
                },
            };
            let mut meta = tx.open_table(META).map_err(self.h.err(doing))?;
            meta.insert(meta_key(self.h.id, TAG_LOG), &row.encode()[..])
                .map_err(self.h.err(doing))?;
        }
        self.h.commit(tx, doing)
    }

    /// Copies written records `from..=self.written` out of the table, at
    /// most [`READ_BATCH`] records or [`READ_BATCH_BYTES`] (but at least
    /// one), checking each CRC and that no LSN is missing.
    fn read_batch(&self, db: &redb::Database, from: Lsn) -> Result<Vec<(Lsn, Vec<u8>)>> {
        let doing = "reading the log";
        let tx = db.begin_read().map_err(self.h.err(doing))?;
        let records = tx.open_table(LOG).map_err(self.h.err(doing))?;
        let range = records
            .range(seq_key(self.h.id, from)..=seq_key(self.h.id, self.written))
            .map_err(self.h.err(doing))?;
        let mut batch = Vec::new();
        let mut bytes = 0;
        for (next, row) in (from..).zip(range) {
            let (key, value) = row.map_err(self.h.err(doing))?;
            let lsn = seq_of(&key.value());
            if lsn != next {
                // A hole: the batch ends before it; the next read reports it.
                break;
            }
            let record = check_crc(value.value(), "redb log record at LSN", lsn)?;
            bytes += record.len();
            batch.push((lsn, record.to_vec()));
            if batch.len() == READ_BATCH || bytes >= READ_BATCH_BYTES {
                break;
            }
        }
        if batch.is_empty() {
            return Err(StorageError::Corrupt {
                what: "redb log: missing record at LSN",
                at: from,
            });
        }
        Ok(batch)
    }

    /// Deletes records `base+1..=lsn` and moves the log row's base, in a
    /// non-durable transaction: a crash may bring the records back, which
    /// the contract allows; the next durable commit makes it stick.
    fn discard_txn(&self, db: &redb::Database, lsn: Lsn) -> Result<()> {
        let doing = "discarding log records";
        let tx = self.h.begin(db, Durability::None, doing)?;
        {
            let mut records = tx.open_table(LOG).map_err(self.h.err(doing))?;
            records
                .retain_in(
                    seq_key(self.h.id, self.base + 1)..=seq_key(self.h.id, lsn),
                    |_, _| false,
                )
                .map_err(self.h.err(doing))?;
            let row = LogRow {
                base: lsn,
                last: self.durable,
            };
            let mut meta = tx.open_table(META).map_err(self.h.err(doing))?;
            meta.insert(meta_key(self.h.id, TAG_LOG), &row.encode()[..])
                .map_err(self.h.err(doing))?;
        }
        self.h.commit(tx, doing)
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

impl LogStore for RedbLog {
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
            && let Err(e) = self.write_pending(lsn, Durability::None)
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
        match self.write_pending(last, Durability::Immediate) {
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
        // Batches are copied out under the shield and visited outside it,
        // so a panic in the visitor stays the visitor's.
        let mut next = after + 1;
        while next <= self.written {
            let batch = self.h.shield(|| self.read_batch(&db, next))?;
            for (lsn, record) in &batch {
                visit(*lsn, record)?;
            }
            next += batch.len() as u64;
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
        self.h.shield(|| self.discard_txn(&db, lsn))?;
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
