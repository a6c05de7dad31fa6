//! [`PgLog`]: a shard's log, with split flushes on the shard's flusher
//! connections.
//!
//! Appends wait in memory, each CRC-framed as `fusee-storage-kv`'s layout
//! frames a log record, laid out as the entries of the row their flush
//! writes. [`LogStore::begin_flush`] moves them into a batch shared
//! with a [`FlushTicket`]; the ticket's I/O writes the batch in one
//! statement (its row, under the lease's epoch) on a flusher connection,
//! whichever thread runs it, while the log takes the next batch's appends
//! and serves reads from the database, the batches in flight and the
//! pending records. A batch over [`STATEMENT_BYTES`] goes in one
//! transaction of several statements instead (PostgreSQL takes at most
//! 1 GiB in one message).
//!
//! Up to [`crate::PgOptions::flushes_in_flight`] tickets may be out, each
//! on the next flusher connection in turn (so no two outstanding share
//! one); they are finished in the order they began, and the durable LSN
//! moves only then, so a flush that commits before an earlier one is not
//! reported durable until the earlier one is.
//!
//! A failed ticket latches the log, and every ticket still out fails with
//! it: a lost connection may have committed the batch or not, and only a
//! reopen (which reads what the server holds) can tell. A fenced one wrote
//! nothing, and every later call is `Fenced`.
//!
//! A seal ([`LogStore::begin_seal`]) moves the shard's `log_last` to the
//! durable LSN, under the epoch, on the main connection; an open reads
//! only the rows after `log_last` to find the log's end (see the crate
//! documentation).
//!
//! # A log row (schema versions 3 and 4)
//!
//! A flush writes one row of the `log` table (a batch over
//! [`STATEMENT_BYTES`], one row per that many bytes): key `(shard, last)`,
//! column `first`, and `value`, the records `first..=last` one after the
//! other, each an **entry**:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | `n`, the bytes that follow in this entry, big-endian u32 (big-endian because the upgrade from version 2 writes it with PostgreSQL's `int4send`) |
//! | 4 | CRC-32 of `seq_key(shard, lsn)` and the record, little-endian ([`fusee_storage_kv::layout::with_crc`]) |
//! | `n - 4` | the record |
//!
//! Entry `i` is LSN `first + i`, and a row holds exactly `last - first + 1`
//! entries with nothing after them. Each record keeps its own CRC over its
//! shard and LSN, so a changed byte, a row read under another shard or
//! LSN, a cut or a lost row is `Corrupt` naming the LSN, as with a row per
//! record; a row per flush is one heap tuple and one index entry for the
//! server to write rather than one per record.
//!
//! Version 4 adds the column `durable`: the log's durable LSN when the
//! flush that wrote the row began, which tells an open a flush that
//! overtook one that never committed from lost acknowledged records (see
//! the crate documentation).
//!
//! Rows never overlap, and every row lies past `log_base` but for its
//! records a discard passed: a discard deletes the rows whose last record
//! it passed, and a read skips the records before where it starts. Every
//! record through `log_last` is held (seals, discards and opens move it);
//! rows past it are the flushes since, which an open reads to find the
//! log's end.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fusee_core::record::Lsn;
use fusee_storage::{
    FlushTicket, FlushWork, LogStore, Result, SealTicket, StorageError, check_log_append,
};
use fusee_storage_kv::layout::{CRC, check_crc, crc_of, seq_key};
use fusee_storage_kv::{LogRow, ShardEngine, injected, lock};
use postgres::fallible_iterator::FallibleIterator;

use crate::NAMES;
use crate::shard::{PgShard, ShardInner, i64_of};

/// Bytes of records one flush statement carries at most; a larger batch
/// is written in one transaction of several statements.
pub const STATEMENT_BYTES: usize = 32 << 20;

/// Records waiting to be written, laid out as a log row's entries
/// already: an append frames its record straight into the row a flush
/// sends, so a batch costs no allocation per record and no copy at flush
/// time.
#[derive(Default)]
struct Entries {
    /// The entries, one after the other.
    row: Vec<u8>,
    /// How many entries `row` holds.
    count: u64,
}

impl Entries {
    /// Frames `record`, LSN `lsn` of shard `shard`, as the next entry.
    fn push(&mut self, shard: u32, lsn: Lsn, record: &[u8]) {
        // A record is at most `MAX_RECORD` bytes (`check_log_append`), far
        // below 4 GiB.
        let len = u32::try_from(CRC + record.len()).unwrap_or(u32::MAX);
        let crc = crc_of(&seq_key(shard, lsn), &[record]);
        self.row.extend_from_slice(&len.to_be_bytes());
        self.row.extend_from_slice(&crc.to_le_bytes());
        self.row.extend_from_slice(record);
        self.count += 1;
    }

    /// The stored form of each entry (its CRC, then its record), in order.
    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        // Built by `push` alone, so every entry parses.
        let mut rest = self.row.as_slice();
        std::iter::from_fn(move || {
            let (stored, after) = split_entry(rest)?;
            rest = after;
            Some(stored)
        })
    }
}

/// A batch handed to a flush ticket: records `first..` as a row's entries.
struct Batch {
    first: Lsn,
    /// The log's durable LSN when the flush began (the row's `durable`).
    durable: Lsn,
    entries: Entries,
}

impl Batch {
    fn last(&self) -> Lsn {
        self.first + self.entries.count - 1
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
    /// The batches of the tickets out, in the order they began: LSNs
    /// `durable + 1 ..`, one after the other.
    inflight: VecDeque<Arc<Batch>>,
    /// The flusher connection the next ticket writes on.
    next_flusher: usize,
    /// Records after the batches in flight.
    pending: Entries,
    /// A seal ticket is out.
    sealing: bool,
    latched: bool,
}

impl std::fmt::Debug for PgLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLog")
            .field("shard", &self.shard.shard())
            .field("base", &self.base)
            .field("durable", &self.durable)
            .field("pending", &self.pending.count)
            .finish_non_exhaustive()
    }
}

impl PgLog {
    /// The log of a shard whose bounds are `row` (after the open-time
    /// cleanup, so the table holds exactly LSNs `row.base+1..=row.last`).
    pub(crate) fn new(shard: PgShard, row: LogRow) -> Self {
        let id = shard.0.shared.next_log.fetch_add(1, Ordering::Relaxed);
        let inflight = VecDeque::with_capacity(shard.0.flushers.len());
        Self {
            shard,
            id,
            base: row.base,
            durable: row.last,
            inflight,
            next_flusher: 0,
            pending: Entries::default(),
            sealing: false,
            latched: false,
        }
    }

    /// The epoch of the shard's lease this open holds: every open of the
    /// shard moves it, so it grows with every change of owner (a fencing
    /// token for the outside services the shard's steps write to).
    pub fn epoch(&self) -> u64 {
        // Epochs start at 0 and only grow.
        u64::try_from(self.shard.0.epoch).unwrap_or(0)
    }

    /// The open shard behind this log, for the crate's tests.
    #[cfg(test)]
    pub(crate) fn shard_inner(&self) -> &Arc<ShardInner> {
        &self.shard.0
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
        self.inflight.clear();
        self.pending = Entries::default();
    }

    /// The first LSN of the pending records.
    fn pending_first(&self) -> Lsn {
        self.inflight
            .back()
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
            let first: i64 = row.try_get(0).map_err(|e| h.err(doing, &e))?;
            let last: i64 = row.try_get(1).map_err(|e| h.err(doing, &e))?;
            let value: &[u8] = row.try_get(2).map_err(|e| h.err(doing, &e))?;
            let (Ok(first), Ok(last)) = (u64::try_from(first), u64::try_from(last)) else {
                return Err(row_corrupt(next));
            };
            // A row that begins after the next LSN leaves a gap, one
            // after the first that begins before it overlaps the row
            // before, and one that ends past the durable LSN holds records
            // no flush made durable.
            let overlaps = next > from && first != next;
            if first > next || overlaps || last < first || last > self.durable {
                return Err(StorageError::Corrupt {
                    what: NAMES.missing_record,
                    at: next,
                });
            }
            let mut rest = value;
            for lsn in first..=last {
                let (stored, after) = split_entry(rest).ok_or_else(|| row_corrupt(lsn))?;
                rest = after;
                if lsn < next {
                    // Before the read's start: discarded, or read already.
                    continue;
                }
                visit(
                    lsn,
                    check_crc(&seq_key(h.id, lsn), stored, NAMES.log_record, lsn)?,
                )?;
                next = lsn + 1;
            }
            if !rest.is_empty() {
                return Err(row_corrupt(last));
            }
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

/// What a log row that does not parse into its entries is, at an LSN.
fn row_corrupt(at: Lsn) -> StorageError {
    StorageError::Corrupt {
        what: "postgres log row (its entries do not parse), at LSN",
        at,
    }
}

/// The first entry of `row` and what follows it, or `None` if the row
/// ends inside it.
fn split_entry(row: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = row.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    (len <= rest.len()).then(|| rest.split_at(len))
}

/// The I/O of one flush: the batch, written on one of the shard's
/// flusher connections.
struct FlushJob {
    shard: Arc<ShardInner>,
    batch: Arc<Batch>,
    /// Which of the shard's flusher connections.
    flusher: usize,
}

impl FlushWork for FlushJob {
    fn run(&mut self) -> Result<()> {
        let h = &*self.shard;
        let (first, last) = (self.batch.first, self.batch.last());
        let doing = format!("flushing log records {first} to {last}");
        h.check(NAMES.log)?;
        if h.shared.faults.take_flush(h.id) {
            return Err(injected("flushing the log", h.id));
        }
        let mut slot = lock(&h.flushers[self.flusher]);
        let conn = h.conn(&mut slot, &doing)?;
        let id = i64::from(h.id);
        let epoch = h.epoch;
        let last_i = i64_of(last, "LSN")?;
        let durable = i64_of(self.batch.durable, "LSN")?;
        let row = self.batch.entries.row.as_slice();
        if row.len() <= STATEMENT_BYTES {
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
            let first_i = i64_of(first, "LSN")?;
            let n = conn
                .client
                .execute(&stmt, &[&id, &epoch, &last_i, &first_i, &row, &durable])
                .map_err(|e| h.err(&doing, &e))?;
            return match n {
                0 => Err(h.fence()),
                1 => Ok(()),
                // One statement writes its row or nothing: anything else
                // is a server that broke that promise.
                _ => Err(StorageError::Corrupt {
                    what: "postgres log flush: rows written differ from the batch, at LSN",
                    at: first,
                }),
            };
        }
        // A batch too large for one message: one row per `STATEMENT_BYTES`
        // in one transaction, fenced like every multi-statement write, on
        // the flusher connection (so it does not move `log_last` either).
        let mut tx = conn.client.transaction().map_err(|e| h.err(&doing, &e))?;
        h.check_epoch(&mut tx, &doing)?;
        // Cut at entry boundaries: each piece is a row of whole entries.
        let (mut start, mut end) = (0, 0);
        let mut row_first = first;
        for (lsn, stored) in (first..).zip(self.batch.entries.iter()) {
            end += 4 + stored.len();
            if end - start >= STATEMENT_BYTES || lsn == last {
                let piece = &row[start..end];
                tx.execute(
                    h.shared.sql.flush_insert.as_str(),
                    &[
                        &id,
                        &i64_of(lsn, "LSN")?,
                        &i64_of(row_first, "LSN")?,
                        &piece,
                        &durable,
                    ],
                )
                .map_err(|e| h.err(&doing, &e))?;
                start = end;
                row_first = lsn + 1;
            }
        }
        tx.commit().map_err(|e| h.err(&doing, &e))
    }
}

/// The I/O of one seal: `log_last` moved to the sealed LSN, under the
/// epoch, on the shard's main connection (its flusher connections carry
/// the flushes).
struct SealJob {
    shard: Arc<ShardInner>,
    lsn: Lsn,
}

impl FlushWork for SealJob {
    fn run(&mut self) -> Result<()> {
        let h = &*self.shard;
        let doing = format!("sealing the log through LSN {}", self.lsn);
        h.check(NAMES.log)?;
        let mut slot = h.main();
        let conn = h.conn(&mut slot, &doing)?;
        let id = i64::from(h.id);
        let lsn = i64_of(self.lsn, "LSN")?;
        let n = conn
            .client
            .execute(h.shared.sql.seal.as_str(), &[&id, &h.epoch, &lsn])
            .map_err(|e| h.err(&doing, &e))?;
        if n == 0 {
            return Err(h.fence());
        }
        Ok(())
    }
}

impl LogStore for PgLog {
    fn append(&mut self, lsn: Lsn, record: &[u8]) -> Result<()> {
        self.writable()?;
        check_log_append(self.last_lsn(), lsn, record)?;
        self.pending.push(self.shard.shard(), lsn, record);
        Ok(())
    }

    fn flush(&mut self) -> Result<Lsn> {
        let ticket = self.begin_flush()?;
        self.finish_flush(ticket)
    }

    fn begin_flush(&mut self) -> Result<FlushTicket> {
        self.writable()?;
        if self.inflight.len() >= self.flushes_in_flight_max() {
            return Err(StorageError::Misuse {
                call: "LogStore::begin_flush",
                why: "as many flush tickets are outstanding (begun and not finished) as flushes_in_flight allows",
            });
        }
        if self.pending.count == 0 {
            return Ok(FlushTicket::done(self.durable));
        }
        // The next batch starts at this one's size (up to 1 MiB, so one
        // huge record does not pin its size for good), so a steady stream
        // of batches does not grow its buffer from nothing every time.
        let next = Entries {
            row: Vec::with_capacity(self.pending.row.len().min(1 << 20)),
            count: 0,
        };
        let batch = Arc::new(Batch {
            first: self.pending_first(),
            durable: self.durable,
            entries: std::mem::replace(&mut self.pending, next),
        });
        let last = batch.last();
        self.inflight.push_back(Arc::clone(&batch));
        // The tickets out are consecutive and at most as many as the
        // connections, so taking them in turn gives each its own.
        let flusher = self.next_flusher;
        self.next_flusher = (flusher + 1) % self.flushes_in_flight_max();
        let job = FlushJob {
            shard: Arc::clone(&self.shard.0),
            batch,
            flusher,
        };
        Ok(FlushTicket::new(self.id, last, Box::new(job)))
    }

    fn finish_flush(&mut self, ticket: FlushTicket) -> Result<Lsn> {
        if ticket.log() == 0 {
            return ticket.finish();
        }
        if ticket.log() != self.id {
            return Err(StorageError::Misuse {
                call: "LogStore::finish_flush",
                why: "the ticket was not begun by this log",
            });
        }
        if self.latched {
            // An earlier ticket failed: whatever this one did, the records
            // between are not known durable.
            return Err(StorageError::Latched { what: NAMES.log });
        }
        let front = self.inflight.front().map(|b| b.last());
        if front != Some(ticket.last_lsn()) {
            // Ours, out of turn (or finished twice): its records can no
            // longer be reported durable in order.
            self.latch();
            return Err(StorageError::Misuse {
                call: "LogStore::finish_flush",
                why: "the ticket is not the oldest outstanding one of this log (finish tickets in the order they began)",
            });
        }
        match ticket.finish() {
            Ok(last) => {
                self.durable = last;
                self.inflight.pop_front();
                Ok(last)
            }
            Err(e) => {
                self.latch();
                Err(e)
            }
        }
    }

    fn flushes_in_flight_max(&self) -> usize {
        // One connection per ticket that may be out.
        self.shard.0.flushers.len()
    }

    fn begin_seal(&mut self) -> Result<SealTicket> {
        self.writable()?;
        if self.sealing {
            return Err(StorageError::Misuse {
                call: "LogStore::begin_seal",
                why: "a seal ticket is outstanding (begun and never finished)",
            });
        }
        self.sealing = true;
        let job = SealJob {
            shard: Arc::clone(&self.shard.0),
            lsn: self.durable,
        };
        Ok(SealTicket::new(self.id, self.durable, Box::new(job)))
    }

    fn finish_seal(&mut self, ticket: SealTicket) -> Result<Lsn> {
        if ticket.log() != self.id {
            return Err(StorageError::Misuse {
                call: "LogStore::finish_seal",
                why: "the ticket was not begun by this log",
            });
        }
        self.sealing = false;
        match ticket.finish() {
            Ok(lsn) => Ok(lsn),
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
            .flat_map(|b| (b.first..).zip(b.entries.iter()))
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
        self.pending_first() + self.pending.count - 1
    }

    fn durable_lsn(&self) -> Lsn {
        self.durable
    }
}
