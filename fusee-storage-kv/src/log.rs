//! [`KvLog`]: a shard's log on an ordered key-value engine, written once for
//! both backends; the engine supplies only the three writes and the scan of
//! [`LogEngine`].
//!
//! Appends wait in memory; a flush writes them and the log row in one
//! durable write (one fsync per batch). Memory is bounded: once the waiting
//! records pass [`LOG_SPILL_BYTES`] they are written in a write that is not
//! durable. Nothing about durability changes: `durable_lsn` moves only on a
//! flush, and the log row keeps counting flushed records only, so opening
//! the shard ([`crate::Cleanup`]) deletes spilled records even when a later
//! durable write made them durable: after any reopen the log holds exactly
//! the flushed records.
//!
//! [`fusee_storage::LogStore::discard_through`] deletes the records and
//! moves the row's base in a write that is not durable: a crash may bring
//! the records back, which the contract allows.

use fusee_core::record::Lsn;
use fusee_storage::{LogStore, Result, SealTicket, StorageError, check_log_append};

use crate::Names;
use crate::layout::{CRC, LogRow, check_crc, seq_key, with_crc};

/// Bytes of unflushed records held in memory before they are written out
/// (not durably).
pub const LOG_SPILL_BYTES: usize = 16 << 20;

/// What a backend does for its log part: one shard's log table and meta
/// row, on one engine.
pub trait LogEngine: crate::ShardEngine {
    /// Writes `records` (stored form, see [`crate::layout`]) under LSNs
    /// `first, first + 1, ..` and `row` as the shard's log row, in one atomic
    /// write; when `durable` it has reached stable storage once this returns
    /// `Ok`. (A backend's fault switch may fail a durable write here.)
    fn write(&self, first: Lsn, records: &[Vec<u8>], row: &LogRow, durable: bool) -> Result<()>;

    /// Calls `visit` with the LSN and stored value of every record in the
    /// table with LSN `from..=through`, in LSN order, stopping at (and
    /// returning) the first error `visit` returns. The engine checks
    /// nothing about the rows; the caller checks CRCs and holes.
    fn scan(
        &self,
        from: Lsn,
        through: Lsn,
        visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>,
    ) -> Result<()>;

    /// Deletes records `from..=through` and writes `row`, in one atomic
    /// write that need not be durable.
    fn discard(&self, from: Lsn, through: Lsn, row: &LogRow) -> Result<()>;
}

/// A shard's log part on engine `E`. Its [`LogStore`] implementation is the
/// whole of both backends' log logic.
pub struct KvLog<E> {
    engine: E,
    names: &'static Names,
    /// The LSN before the first record kept.
    base: Lsn,
    /// The last LSN written durably.
    durable: Lsn,
    /// The last LSN written to the table (durably or not): `>= durable`.
    written: Lsn,
    /// Records `written + 1 ..` in their stored form (CRC-prefixed), waiting
    /// for the next flush; at most [`LOG_SPILL_BYTES`] (plus one record).
    pending: Vec<Vec<u8>>,
    pending_bytes: usize,
    latched: bool,
    /// The shard's seal file (`None`: seals write nothing).
    seal: Option<crate::SealSlot>,
    /// A seal ticket is out.
    sealing: bool,
    /// This log's name on its seal tickets.
    id: u64,
}

/// Names each log's seal tickets apart (0 is the contract's "nothing to
/// run").
static NEXT_LOG_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl<E: LogEngine> std::fmt::Debug for KvLog<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvLog")
            .field("shard", &self.engine.shard())
            .field("base", &self.base)
            .field("durable", &self.durable)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl<E: LogEngine> KvLog<E> {
    /// The log of a shard whose stored log row is `row` (after the open-time
    /// cleanup, so the table holds exactly LSNs `row.base+1..=row.last`).
    pub fn new(engine: E, row: LogRow, names: &'static Names) -> Self {
        Self {
            engine,
            names,
            base: row.base,
            durable: row.last,
            written: row.last,
            pending: Vec::new(),
            pending_bytes: 0,
            latched: false,
            seal: None,
            sealing: false,
            id: NEXT_LOG_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// This log, sealing into `seal` ([`crate::ShardHandle::check_seal`]'s;
    /// `None`: seals write nothing).
    pub fn with_seal(mut self, seal: Option<crate::SealSlot>) -> Self {
        self.seal = seal;
        self
    }

    fn writable(&self) -> Result<()> {
        self.engine.check_open(self.names.log)?;
        if self.latched {
            return Err(StorageError::Latched {
                what: self.names.log,
            });
        }
        Ok(())
    }

    /// Writes the pending records and the log row in one write; on success
    /// they are written through `last`.
    fn write_pending(&mut self, last: Lsn, durable: bool) -> Result<()> {
        // The row counts flushed records only: a spill keeps `last` at the
        // durable LSN, so opening the shard cuts spilled records whatever
        // made them durable.
        let row = LogRow {
            base: self.base,
            last: if durable { last } else { self.durable },
        };
        let result = self
            .engine
            .write(self.written + 1, &self.pending, &row, durable);
        // Either way the records leave memory: written, or never to be
        // treated as safe (the caller latches the part).
        self.pending.clear();
        self.pending_bytes = 0;
        if result.is_ok() {
            self.written = last;
        }
        result
    }

    /// Visits written records `from..=self.written`, checking each CRC and
    /// that no LSN is missing.
    fn read_written(
        &self,
        from: Lsn,
        visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let (names, shard) = (self.names, self.engine.shard());
        let mut next = from;
        self.engine.scan(from, self.written, &mut |lsn, stored| {
            if lsn != next {
                return Err(StorageError::Corrupt {
                    what: names.missing_record,
                    at: next,
                });
            }
            visit(
                lsn,
                check_crc(&seq_key(shard, lsn), stored, names.log_record, lsn)?,
            )?;
            next += 1;
            Ok(())
        })?;
        if next <= self.written {
            return Err(StorageError::Corrupt {
                what: names.missing_record,
                at: next,
            });
        }
        Ok(())
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

impl<E: LogEngine> LogStore for KvLog<E> {
    fn append(&mut self, lsn: Lsn, record: &[u8]) -> Result<()> {
        self.writable()?;
        check_log_append(self.last_lsn(), lsn, record)?;
        let stored = with_crc(&seq_key(self.engine.shard(), lsn), record);
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

    fn begin_seal(&mut self) -> Result<SealTicket> {
        self.writable()?;
        if self.sealing {
            return Err(StorageError::Misuse {
                call: "LogStore::begin_seal",
                why: "a seal is already in flight",
            });
        }
        let Some(seal) = &self.seal else {
            return Ok(SealTicket::done(self.durable));
        };
        self.sealing = true;
        Ok(SealTicket::new(
            self.id,
            self.durable,
            seal.work(self.durable),
        ))
    }

    fn finish_seal(&mut self, ticket: SealTicket) -> Result<Lsn> {
        if ticket.log() == 0 && ticket.has_run() {
            return ticket.finish();
        }
        if ticket.log() != self.id || !self.sealing {
            return Err(StorageError::Misuse {
                call: "LogStore::finish_seal",
                why: "the ticket is not this log's seal in flight",
            });
        }
        self.sealing = false;
        ticket.finish().inspect_err(|_| {
            // A failed sync on the shard's disk: later ones cannot be
            // trusted either (the seal file keeps its newest record).
            self.latched = true;
        })
    }

    fn read(&mut self, after: Lsn, visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>) -> Result<Lsn> {
        self.engine.check_open(self.names.log)?;
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
            self.read_written(after + 1, visit)?;
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
        let row = LogRow {
            base: lsn,
            last: self.durable,
        };
        self.engine.discard(self.base + 1, lsn, &row)?;
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
