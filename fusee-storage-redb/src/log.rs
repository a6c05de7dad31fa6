//! [`RedbLog`]: a shard's log. Appends wait in memory; a flush writes them
//! and the log row in one write transaction committed with
//! `Durability::Immediate` (one fsync per batch).
//!
//! Memory is bounded: once the waiting records pass [`LOG_SPILL_BYTES`] they
//! are written (with the log row) in a non-durable transaction. Nothing
//! about durability changes: `durable_lsn` still moves only on a flush, and
//! a crash keeps a prefix of what was appended (the spilled records are
//! kept or lost with their log row, whole).

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
            let row = LogRow {
                base: self.base,
                last,
            };
            let mut meta = tx.open_table(META).map_err(self.h.err(doing))?;
            meta.insert(meta_key(self.h.id, TAG_LOG), &row.encode()[..])
                .map_err(self.h.err(doing))?;
        }
        let result = self.h.commit(tx, doing);
        // Either way the records leave memory: written, or never to be
        // treated as safe (the caller latches the part).
        self.pending.clear();
        self.pending_bytes = 0;
        if result.is_ok() {
            self.written = last;
        }
        result
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
        let doing = "reading the log";
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
            let tx = db.begin_read().map_err(self.h.err(doing))?;
            let records = tx.open_table(LOG).map_err(self.h.err(doing))?;
            let range = records
                .range(seq_key(self.h.id, after + 1)..=seq_key(self.h.id, self.written))
                .map_err(self.h.err(doing))?;
            let mut next = after + 1;
            for row in range {
                let (key, value) = row.map_err(self.h.err(doing))?;
                let lsn = seq_of(&key.value());
                if lsn != next {
                    return Err(StorageError::Corrupt {
                        what: "redb log: missing record at LSN",
                        at: next,
                    });
                }
                visit(
                    lsn,
                    check_crc(value.value(), "redb log record at LSN", lsn)?,
                )?;
                next += 1;
            }
            if next != self.written + 1 {
                return Err(StorageError::Corrupt {
                    what: "redb log: missing record at LSN",
                    at: next,
                });
            }
        }
        let skip = usize::try_from(after.saturating_sub(self.written)).unwrap_or(usize::MAX);
        for (lsn, record) in (self.written + 1..).zip(&self.pending).skip(skip) {
            debug_assert!(lsn > after);
            visit(lsn, &record[CRC..])?;
        }
        Ok(last)
    }

    fn discard_through(&mut self, lsn: Lsn) -> Result<()> {
        let doing = "discarding log records";
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
        // Not durable on its own: a crash may bring the records back, which
        // the contract allows; the next flush or commit makes it durable.
        let tx = self.h.begin(&db, Durability::None, doing)?;
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
                last: self.written,
            };
            let mut meta = tx.open_table(META).map_err(self.h.err(doing))?;
            meta.insert(meta_key(self.h.id, TAG_LOG), &row.encode()[..])
                .map_err(self.h.err(doing))?;
        }
        self.h.commit(tx, doing)?;
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
