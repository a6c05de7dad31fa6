//! The memory backend's log part.

use std::collections::VecDeque;
use std::sync::Arc;

use fusee_core::record::Lsn;

use super::{FlushGate, Part, READ_BATCH};
use crate::contract::{FlushTicket, FlushWork, LogStore, SealTicket};
use crate::limits::check_log_append;
use crate::{Result, StorageError};

/// The memory backend's log part.
#[derive(Debug)]
pub struct MemoryLog {
    pub(super) part: Part,
    // Only this part changes the log while it is live, so these mirror the
    // shard's state exactly.
    pub(super) first: Lsn,
    pub(super) last: Lsn,
    pub(super) durable: Lsn,
    pub(super) gate: Arc<FlushGate>,
    /// The last LSNs of the deferred flush tickets out, oldest first.
    pub(super) outstanding: VecDeque<Lsn>,
    /// A seal ticket is out.
    pub(super) sealing: bool,
}

/// A seal's I/O: recording the sealed LSN in the shard's durable state,
/// if the open that began it still owns the shard.
struct MemorySeal {
    shard: Arc<std::sync::Mutex<super::Shard>>,
    token: u64,
    lsn: Lsn,
}

impl FlushWork for MemorySeal {
    fn run(&mut self) -> Result<()> {
        let mut s = super::lock(&self.shard);
        if s.token != Some(self.token) {
            return Err(StorageError::Closed { what: LOG });
        }
        s.sealed = s.sealed.max(self.lsn);
        Ok(())
    }
}

/// The name seal tickets of memory logs carry.
const SEAL_TICKET: u64 = u64::MAX - 1;

/// A flush held back by the storage's gate: its I/O is the wait.
struct HeldFlush {
    gate: Arc<FlushGate>,
    /// The gate's crash count when the flush began.
    crashes: u64,
}

impl FlushWork for HeldFlush {
    fn run(&mut self) -> Result<()> {
        self.gate.wait(self.crashes);
        Ok(())
    }
}

/// The name held tickets carry (any nonzero value: a memory log checks
/// only that a ticket is one of its held ones).
const HELD_TICKET: u64 = u64::MAX;

impl MemoryLog {
    /// Makes the records through `last` durable (those appended since stay
    /// pending), as a flush that covered them.
    fn make_durable(&mut self, last: Lsn) -> Result<Lsn> {
        let mut s = self.part.lock(LOG)?;
        if s.log_latched {
            return Err(StorageError::Latched { what: LOG });
        }
        if let Some(e) = injected_failure(&mut s, self.part.id) {
            self.last = s.last_lsn();
            self.outstanding.clear();
            return Err(e);
        }
        s.durable = s.durable.max(last.min(s.last_lsn()));
        self.durable = s.durable;
        Ok(self.durable)
    }
}

/// The injected failure ([`super::MemoryStorage::fail_next_flush`]) of
/// shard `id`'s flush, if armed: the records not durable are lost and the
/// log latched.
fn injected_failure(s: &mut super::Shard, id: u32) -> Option<StorageError> {
    if !s.fail_next_flush {
        return None;
    }
    s.fail_next_flush = false;
    s.log_latched = true;
    let keep = s.durable.saturating_sub(s.log_base);
    s.log.truncate(usize::try_from(keep).unwrap_or(usize::MAX));
    Some(StorageError::io(
        format!("flushing shard {id} log (injected fault)"),
        std::io::Error::other("injected flush failure"),
    ))
}

const LOG: &str = "memory log";

impl LogStore for MemoryLog {
    fn append(&mut self, lsn: Lsn, record: &[u8]) -> Result<()> {
        let mut s = self.part.lock(LOG)?;
        if s.log_latched {
            return Err(StorageError::Latched { what: LOG });
        }
        check_log_append(s.last_lsn(), lsn, record)?;
        s.log.push_back(Arc::from(record));
        self.last = lsn;
        Ok(())
    }

    fn begin_flush(&mut self) -> Result<FlushTicket> {
        if !self.gate.defers() {
            return self.flush().map(FlushTicket::done);
        }
        let s = self.part.lock(LOG)?;
        if s.log_latched {
            return Err(StorageError::Latched { what: LOG });
        }
        drop(s);
        if let Some(&covered) = self.outstanding.back() {
            if self.outstanding.len() >= self.gate.overlap() {
                return Err(StorageError::Misuse {
                    call: "LogStore::begin_flush",
                    why: "as many flush tickets are outstanding as overlap_flushes allows",
                });
            }
            if covered == self.last {
                // Nothing appended since the ticket before.
                return Ok(FlushTicket::done(self.durable));
            }
        }
        self.outstanding.push_back(self.last);
        Ok(FlushTicket::new(
            HELD_TICKET,
            self.last,
            Box::new(HeldFlush {
                gate: Arc::clone(&self.gate),
                crashes: self.gate.crashes(),
            }),
        ))
    }

    fn finish_flush(&mut self, ticket: FlushTicket) -> Result<Lsn> {
        if ticket.log() != HELD_TICKET {
            return ticket.finish();
        }
        if self.outstanding.front() != Some(&ticket.last_lsn()) {
            // Out of turn (or not this log's): its records can no longer
            // be reported durable in order.
            if let Ok(mut s) = self.part.lock(LOG) {
                s.log_latched = true;
            }
            return Err(StorageError::Misuse {
                call: "LogStore::finish_flush",
                why: "the ticket is not the oldest outstanding one of this log (finish tickets in the order they began)",
            });
        }
        self.outstanding.pop_front();
        let last = ticket.finish()?;
        self.make_durable(last)
    }

    fn flushes_in_flight_max(&self) -> usize {
        self.gate.overlap()
    }

    fn begin_seal(&mut self) -> Result<SealTicket> {
        let s = self.part.lock(LOG)?;
        if s.log_latched {
            return Err(StorageError::Latched { what: LOG });
        }
        if self.sealing {
            return Err(StorageError::Misuse {
                call: "LogStore::begin_seal",
                why: "a seal is already in flight",
            });
        }
        drop(s);
        self.sealing = true;
        Ok(SealTicket::new(
            SEAL_TICKET,
            self.durable,
            Box::new(MemorySeal {
                shard: Arc::clone(&self.part.shard),
                token: self.part.token,
                lsn: self.durable,
            }),
        ))
    }

    fn finish_seal(&mut self, ticket: SealTicket) -> Result<Lsn> {
        if ticket.log() != SEAL_TICKET {
            return Err(StorageError::Misuse {
                call: "LogStore::finish_seal",
                why: "the ticket is not this log's",
            });
        }
        self.sealing = false;
        match ticket.finish() {
            Ok(lsn) => Ok(lsn),
            Err(e) => {
                if let Ok(mut s) = self.part.lock(LOG) {
                    s.log_latched = true;
                }
                Err(e)
            }
        }
    }

    fn flush(&mut self) -> Result<Lsn> {
        self.gate.wait(self.gate.crashes());
        let mut s = self.part.lock(LOG)?;
        if s.log_latched {
            return Err(StorageError::Latched { what: LOG });
        }
        if let Some(e) = injected_failure(&mut s, self.part.id) {
            self.last = s.last_lsn();
            self.outstanding.clear();
            return Err(e);
        }
        s.durable = s.last_lsn();
        self.durable = s.durable;
        Ok(self.durable)
    }

    fn read(&mut self, after: Lsn, visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>) -> Result<Lsn> {
        let mut batch: Vec<Arc<[u8]>> = Vec::with_capacity(READ_BATCH);
        let mut next = after;
        let end;
        {
            let s = self.part.lock(LOG)?;
            if after < s.log_base {
                return Err(StorageError::Trimmed {
                    first_kept: s.log_base + 1,
                });
            }
            end = s.last_lsn();
            if after > end {
                return Err(StorageError::BeyondEnd { after, last: end });
            }
        }
        // Bounded: every round visits at least one record or stops.
        while next < end {
            batch.clear();
            {
                let s = self.part.lock(LOG)?;
                let start = usize::try_from(next - s.log_base).unwrap_or(usize::MAX);
                batch.extend(s.log.iter().skip(start).take(READ_BATCH).cloned());
            }
            if batch.is_empty() {
                return Err(StorageError::Closed { what: LOG });
            }
            for record in &batch {
                next += 1;
                visit(next, record)?;
                if next == end {
                    break;
                }
            }
        }
        Ok(end)
    }

    fn discard_through(&mut self, lsn: Lsn) -> Result<()> {
        let mut s = self.part.lock(LOG)?;
        if s.log_latched {
            return Err(StorageError::Latched { what: LOG });
        }
        if lsn > s.durable {
            return Err(StorageError::Misuse {
                call: "LogStore::discard_through",
                why: "the LSN is not durable yet",
            });
        }
        while s.log_base < lsn {
            if s.log.pop_front().is_none() {
                break;
            }
            s.log_base += 1;
        }
        self.first = s.log_base + 1;
        Ok(())
    }

    fn first_lsn(&self) -> Lsn {
        self.first
    }

    fn last_lsn(&self) -> Lsn {
        self.last
    }

    fn durable_lsn(&self) -> Lsn {
        self.durable
    }
}
