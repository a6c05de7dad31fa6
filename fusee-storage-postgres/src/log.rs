//! [`PgLog`]: a shard's log, with split flushes on the shard's flusher
//! connection.
//!
//! Appends wait in memory, CRC-framed as `fusee-storage-kv`'s layout frames
//! a log record. [`LogStore::begin_flush`] moves them into a batch shared
//! with a [`FlushTicket`]; the ticket's I/O writes the batch in one
//! statement (records and the `log_last` bound together, under the lease's
//! epoch) on the flusher connection, whichever thread runs it, while the
//! log takes the next batch's appends and serves reads from the database,
//! the batch in flight and the pending records. A batch over
//! [`STATEMENT_BYTES`] goes in one transaction of several statements
//! instead (PostgreSQL takes at most 1 GiB in one message).
//!
//! A failed ticket latches the log: a lost connection may have committed
//! the batch or not, and only a reopen (which reads what the server holds)
//! can tell. A fenced one wrote nothing, and every later call is `Fenced`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use fusee_core::record::Lsn;
use fusee_storage::{FlushTicket, FlushWork, LogStore, Result, StorageError, check_log_append};
use fusee_storage_kv::layout::{CRC, check_crc, seq_key, with_crc};
use fusee_storage_kv::{LogRow, ShardEngine, injected, lock};
use postgres::fallible_iterator::FallibleIterator;

use crate::NAMES;
use crate::shard::{PgShard, ShardInner, i64_of};

/// Bytes of records one flush statement carries at most; a larger batch
/// is written in one transaction of several statements.
pub const STATEMENT_BYTES: usize = 32 << 20;

/// A batch handed to a flush ticket: records `first..` in stored form.
struct Batch {
    first: Lsn,
    records: Vec<Vec<u8>>,
}

impl Batch {
    fn last(&self) -> Lsn {
        self.first + self.records.len() as u64 - 1
    }
}

/// A shard's log part.
pub struct PgLog {
    shard: PgShard,
    /// The backend's name for this log, carried by its tickets.
    id: u64,
    /// The LSN before the first record kept.
    base: Lsn,
    /// The last LSN known durable (written by a finished flush).
    durable: Lsn,
    /// The batch of the ticket out, if one is: LSNs `durable + 1 ..`.
    inflight: Option<Arc<Batch>>,
    /// Records after the batch in flight, in stored form.
    pending: Vec<Vec<u8>>,
    latched: bool,
}

impl std::fmt::Debug for PgLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLog")
            .field("shard", &self.shard.shard())
            .field("base", &self.base)
            .field("durable", &self.durable)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl PgLog {
    /// The log of a shard whose bounds are `row` (after the open-time
    /// cleanup, so the table holds exactly LSNs `row.base+1..=row.last`).
    pub(crate) fn new(shard: PgShard, row: LogRow) -> Self {
        let id = shard.0.shared.next_log.fetch_add(1, Ordering::Relaxed);
        Self {
            shard,
            id,
            base: row.base,
            durable: row.last,
            inflight: None,
            pending: Vec::new(),
            latched: false,
        }
    }

    /// The shard's inbox ([`crate::PgInbox`]): messages from shards other
    /// processes own, and the way to theirs, on a connection of its own.
    pub fn inbox(&self) -> crate::PgInbox {
        crate::PgInbox::new(self.shard.clone())
    }

    fn writable(&self) -> Result<()> {
        self.shard.0.check(NAMES.log)?;
        if self.latched {
            return Err(StorageError::Latched { what: NAMES.log });
        }
        Ok(())
    }

    fn latch(&mut self) {
        self.latched = true;
        self.inflight = None;
        self.pending.clear();
    }

    /// The first LSN of the pending records.
    fn pending_first(&self) -> Lsn {
        self.inflight
            .as_ref()
            .map_or(self.durable + 1, |b| b.last() + 1)
    }

    /// Visits the stored records `from..=self.durable`, checking each CRC
    /// and that none is missing.
    fn read_stored(
        &self,
        from: Lsn,
        visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let h = &*self.shard.0;
        let doing = "reading the log";
        h.check(NAMES.log)?;
        let mut slot = h.main();
        let conn = h.conn(&mut slot, doing)?;
        let id = i64::from(h.id);
        let (lo, hi) = (i64_of(from, "LSN")?, i64_of(self.durable, "LSN")?);
        let params: [&(dyn postgres::types::ToSql + Sync); 3] = [&id, &lo, &hi];
        // Streamed row by row: a read of the whole log never sits in memory.
        let mut rows = conn
            .client
            .query_raw(h.shared.sql.log_scan.as_str(), params)
            .map_err(|e| h.err(doing, &e))?;
        let mut next = from;
        while let Some(row) = rows.next().map_err(|e| h.err(doing, &e))? {
            let lsn: i64 = row.try_get(0).map_err(|e| h.err(doing, &e))?;
            if u64::try_from(lsn).ok() != Some(next) {
                return Err(StorageError::Corrupt {
                    what: NAMES.missing_record,
                    at: next,
                });
            }
            let stored: &[u8] = row.try_get(1).map_err(|e| h.err(doing, &e))?;
            visit(
                next,
                check_crc(&seq_key(h.id, next), stored, NAMES.log_record, next)?,
            )?;
            next += 1;
        }
        if next <= self.durable {
            return Err(StorageError::Corrupt {
                what: NAMES.missing_record,
                at: next,
            });
        }
        Ok(())
    }
}

/// The I/O of one flush: the batch, written on the shard's flusher
/// connection.
struct FlushJob {
    shard: Arc<ShardInner>,
    batch: Arc<Batch>,
}

impl FlushWork for FlushJob {
    fn run(&mut self) -> Result<()> {
        let h = &*self.shard;
        let (first, last) = (self.batch.first, self.batch.last());
        let doing = format!(
            "flushing log records {first} to {last} (if the connection failed, they may or may not be durable)"
        );
        h.check(NAMES.log)?;
        if h.shared.faults.take_flush(h.id) {
            return Err(injected("flushing the log", h.id));
        }
        let mut slot = lock(&h.flusher);
        let conn = h.conn(&mut slot, &doing)?;
        let id = i64::from(h.id);
        let epoch = h.epoch;
        let last_i = i64_of(last, "LSN")?;
        let records = &self.batch.records;
        let bytes: usize = records.iter().map(Vec::len).sum();
        if bytes <= STATEMENT_BYTES {
            let stmt = match &conn.flush {
                Some(s) => s.clone(),
                None => {
                    let s = conn
                        .client
                        .prepare(h.shared.sql.flush.as_str())
                        .map_err(|e| h.err(&doing, &e))?;
                    conn.flush = Some(s.clone());
                    s
                }
            };
            let lsns = (first..=last)
                .map(|l| i64_of(l, "LSN"))
                .collect::<Result<Vec<i64>>>()?;
            let values: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
            let n = conn
                .client
                .execute(&stmt, &[&id, &epoch, &last_i, &lsns, &values])
                .map_err(|e| h.err(&doing, &e))?;
            return match n {
                0 => Err(h.fence()),
                n if n == records.len() as u64 => Ok(()),
                // One statement writes all or nothing: anything else is a
                // server that broke that promise.
                _ => Err(StorageError::Corrupt {
                    what: "postgres log flush: rows written differ from the batch, at LSN",
                    at: first,
                }),
            };
        }
        // A batch too large for one message: one transaction, fenced like
        // every multi-statement write, on the flusher connection.
        let mut tx = conn.client.transaction().map_err(|e| h.err(&doing, &e))?;
        h.check_epoch(&mut tx, &doing)?;
        let mut chunk_lsns = Vec::new();
        let mut chunk: Vec<&[u8]> = Vec::new();
        let mut chunk_bytes = 0usize;
        for (lsn, r) in (first..).zip(records.iter()) {
            chunk_lsns.push(i64_of(lsn, "LSN")?);
            chunk.push(r);
            chunk_bytes += r.len();
            if chunk_bytes >= STATEMENT_BYTES || lsn == last {
                tx.execute(
                    h.shared.sql.flush_insert.as_str(),
                    &[&id, &chunk_lsns, &chunk],
                )
                .map_err(|e| h.err(&doing, &e))?;
                chunk_lsns.clear();
                chunk.clear();
                chunk_bytes = 0;
            }
        }
        tx.execute(h.shared.sql.flush_last.as_str(), &[&id, &last_i])
            .map_err(|e| h.err(&doing, &e))?;
        tx.commit().map_err(|e| h.err(&doing, &e))
    }
}

impl LogStore for PgLog {
    fn append(&mut self, lsn: Lsn, record: &[u8]) -> Result<()> {
        self.writable()?;
        check_log_append(self.last_lsn(), lsn, record)?;
        self.pending
            .push(with_crc(&seq_key(self.shard.shard(), lsn), record));
        Ok(())
    }

    fn flush(&mut self) -> Result<Lsn> {
        let ticket = self.begin_flush()?;
        self.finish_flush(ticket)
    }

    fn begin_flush(&mut self) -> Result<FlushTicket> {
        self.writable()?;
        if self.inflight.is_some() {
            return Err(StorageError::Misuse {
                call: "LogStore::begin_flush",
                why: "a flush ticket is outstanding (begun and never finished)",
            });
        }
        if self.pending.is_empty() {
            return Ok(FlushTicket::done(self.durable));
        }
        let batch = Arc::new(Batch {
            first: self.durable + 1,
            records: std::mem::take(&mut self.pending),
        });
        let last = batch.last();
        self.inflight = Some(Arc::clone(&batch));
        let job = FlushJob {
            shard: Arc::clone(&self.shard.0),
            batch,
        };
        Ok(FlushTicket::new(self.id, last, Box::new(job)))
    }

    fn finish_flush(&mut self, ticket: FlushTicket) -> Result<Lsn> {
        if ticket.log() == 0 {
            return ticket.finish();
        }
        let expected = self.inflight.as_ref().map(|b| b.last());
        if ticket.log() != self.id || expected != Some(ticket.last_lsn()) {
            return Err(StorageError::Misuse {
                call: "LogStore::finish_flush",
                why: "the ticket was not begun by this log",
            });
        }
        match ticket.finish() {
            Ok(last) => {
                self.durable = last;
                self.inflight = None;
                Ok(last)
            }
            Err(e) => {
                self.latch();
                Err(e)
            }
        }
    }

    fn read(&mut self, after: Lsn, visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>) -> Result<Lsn> {
        self.shard.0.check(NAMES.log)?;
        if after < self.base {
            return Err(StorageError::Trimmed {
                first_kept: self.base + 1,
            });
        }
        let last = self.last_lsn();
        if after > last {
            return Err(StorageError::BeyondEnd { after, last });
        }
        if after < self.durable {
            self.read_stored(after + 1, visit)?;
        }
        let memory = self
            .inflight
            .iter()
            .flat_map(|b| (b.first..).zip(b.records.iter()))
            .chain((self.pending_first()..).zip(self.pending.iter()));
        for (lsn, record) in memory {
            if lsn > after {
                visit(lsn, &record[CRC..])?;
            }
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
        let through = i64_of(lsn, "LSN")?;
        let doing = "discarding log records";
        // The base moves in its own column, so a flush in flight (which
        // moves `log_last`) and this discard never undo each other.
        self.shard.0.write(NAMES.log, doing, |h, tx| {
            let id = i64::from(h.id);
            tx.execute(h.shared.sql.discard_base.as_str(), &[&id, &through])
                .and_then(|_| tx.execute(h.shared.sql.discard_log.as_str(), &[&id, &through]))
                .map_err(|e| h.err(doing, &e))
        })?;
        self.base = lsn;
        Ok(())
    }

    fn first_lsn(&self) -> Lsn {
        self.base + 1
    }

    fn last_lsn(&self) -> Lsn {
        self.pending_first() + self.pending.len() as u64 - 1
    }

    fn durable_lsn(&self) -> Lsn {
        self.durable
    }
}
