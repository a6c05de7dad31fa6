//! [`Flights`]: the log flushes a shard has in flight and the durable LSN
//! they move, and the loop's side of a flush (`begin_flush`, `flushed`).
//!
//! Invariant: the durable LSN only moves forward, over a prefix of the
//! log, when the oldest flush in flight finishes (checked by this file's
//! `tickets_back_early_wait_for_those_begun_before_them`, and by
//! `fusee/tests/output_commit.rs`, since every output waits on it).
//!
//! A backend may take several flush tickets at once
//! ([`fusee_storage::LogStore::flushes_in_flight_max`]; PostgreSQL writes
//! each on a connection of its own). Their I/O runs on the flusher threads
//! and comes back in any order, but the log reports flushes durable only
//! in the order they began: a ticket that comes back early waits here for
//! those begun before it.

use std::collections::VecDeque;

use fusee_core::record::Lsn;
use fusee_storage::{FlushTicket, LogStore};

use super::ShardLoop;

/// One flush in flight.
#[derive(Debug)]
struct Flight {
    /// The last LSN it covers (its ticket's).
    last: Lsn,
    /// How many records it covers.
    records: u64,
    /// The µs its `begin_flush` took when that did the durable work itself
    /// (a backend without a split flush: redb, RocksDB), else 0.
    begin_micros: u64,
    /// Its ticket once its I/O came back, with the I/O's time in µs.
    back: Option<(FlushTicket, u64)>,
}

/// A flush whose I/O took longer than this makes the next one leave the
/// shard thread: the driver's inline flush saves two thread wake-ups
/// (tens of µs), which is not worth a shard deaf to its inputs for
/// milliseconds (a first flush after an open took 20 ms, while the
/// registration that starts its overdue runs' code waited behind it).
pub(super) const INLINE_FLUSH_MAX_US: u64 = 1_000;

/// The flushes in flight, oldest first, and the durable LSN.
#[derive(Debug, Default)]
pub(super) struct Flights {
    queue: VecDeque<Flight>,
    /// Every record through it is durable.
    durable: Lsn,
    /// The latest flush that landed took at most [`INLINE_FLUSH_MAX_US`]
    /// (false until one lands: nothing says an open's first is quick).
    quick: bool,
}

/// A flush whose turn came: its ticket, for the log's `finish_flush`.
pub(super) struct Landed {
    pub(super) ticket: FlushTicket,
    /// The time in µs until its records were durable: its `begin_flush`'s
    /// when that did the durable work, plus its ticket's I/O.
    pub(super) micros: u64,
    /// How many records it covers.
    pub(super) records: u64,
}

impl Flights {
    /// No flush in flight, records through `durable` durable (an open's).
    pub(super) fn new(durable: Lsn) -> Self {
        Self {
            queue: VecDeque::new(),
            durable,
            quick: false,
        }
    }

    /// Whether the latest flush that landed took at most
    /// [`INLINE_FLUSH_MAX_US`]: the next is likely quick too.
    #[inline]
    pub(super) fn are_quick(&self) -> bool {
        self.quick
    }

    /// Every record through this LSN is durable.
    #[inline]
    pub(super) fn durable(&self) -> Lsn {
        self.durable
    }

    /// Whether every record through `last` (the log's last) is durable
    /// and no flush is in flight.
    #[inline]
    pub(super) fn all_durable(&self, last: Lsn) -> bool {
        self.queue.is_empty() && last == self.durable
    }

    /// How many flushes are in flight.
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no flush is in flight.
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The last LSN the flushes in flight cover, if any are.
    pub(super) fn last(&self) -> Option<Lsn> {
        self.queue.back().map(|f| f.last)
    }

    /// A flush began: its ticket covers `records` records through `last`;
    /// `begin_micros` is the durable work its `begin_flush` did, if any.
    pub(super) fn begun(&mut self, last: Lsn, records: u64, begin_micros: u64) {
        debug_assert!(
            self.last().is_none_or(|l| l < last),
            "flushes begin in LSN order"
        );
        self.queue.push_back(Flight {
            last,
            records,
            begin_micros,
            back: None,
        });
    }

    /// A ticket's I/O came back after `micros`: kept for its turn. A ticket
    /// of no flush in flight (never begun here, or back twice) is handed
    /// back for the log to judge.
    pub(super) fn back(&mut self, ticket: FlushTicket, micros: u64) -> Option<FlushTicket> {
        let flight = self
            .queue
            .iter_mut()
            .find(|f| f.last == ticket.last_lsn() && f.back.is_none());
        match flight {
            Some(f) => {
                f.back = Some((ticket, micros));
                None
            }
            None => Some(ticket),
        }
    }

    /// The oldest flush, once its ticket is back: the next to finish.
    pub(super) fn next_landed(&mut self) -> Option<Landed> {
        // Not before its turn: the oldest flight's ticket must be back.
        self.queue.front()?.back.as_ref()?;
        let flight = self.queue.pop_front()?;
        let (ticket, micros) = flight.back?;
        let micros = flight.begin_micros.saturating_add(micros);
        self.quick = micros <= INLINE_FLUSH_MAX_US;
        Some(Landed {
            ticket,
            micros,
            records: flight.records,
        })
    }
}

impl ShardLoop {
    /// Whether the shard's flushes are quick lately (see
    /// [`INLINE_FLUSH_MAX_US`]): only then may the driver run one on the
    /// shard thread.
    pub(super) fn flushes_are_quick(&self) -> bool {
        self.flights.are_quick()
    }

    /// Begins a flush of the records no flush covers yet, if the log takes
    /// one more ticket: its ticket, for the driver. With one at a time
    /// (most backends) a batch forms while the last is in flight; with
    /// more, the next batch's flush overlaps the one before.
    pub(super) fn begin_flush(&mut self) -> Option<FlushTicket> {
        let covered = self.flights.last().unwrap_or(self.flights.durable);
        if self.flights.len() >= self.log.flushes_in_flight_max().max(1)
            || self.life.has_failed()
            || self.log.last_lsn() <= covered
        {
            return None;
        }
        let records = self.log.last_lsn() - covered;
        let started = self.config.stopwatch.map(|now| now());
        match self.log.begin_flush() {
            Ok(ticket) => {
                // A backend without a split flush (redb, RocksDB) made
                // the batch durable in `begin_flush`: that is the
                // flush's time, not its ticket's empty I/O.
                let begin_micros = match started {
                    Some(t) if ticket.has_run() => t.elapsed().as_micros() as u64,
                    _ => 0,
                };
                self.flights.begun(ticket.last_lsn(), records, begin_micros);
                Some(ticket)
            }
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    /// A flush ticket came back: once every flush begun before it is back
    /// too, each is finished in turn (its batch durable, or the log failed)
    /// and the outputs it covers leave.
    pub(super) fn flushed(&mut self, ticket: FlushTicket, micros: u64, now_ms: u64) {
        if let Some(stray) = self.flights.back(ticket, micros) {
            // No flush in flight began it: the log says what it is.
            if let Err(e) = self.log.finish_flush(stray) {
                self.fail(e);
            }
            return;
        }
        while let Some(landed) = self.flights.next_landed() {
            match self.log.finish_flush(landed.ticket) {
                Ok(durable) => {
                    self.flights.durable = durable;
                    self.note_durable(now_ms);
                    self.metrics.flushes += 1;
                    self.metrics.flushed_records += landed.records;
                    self.metrics.flush_micros.record(landed.micros);
                    if let Some(t) = &mut self.telemetry {
                        t.durable(durable, landed.records, landed.micros);
                    }
                    tracing::trace!(
                        shard = self.shard,
                        durable,
                        micros = landed.micros,
                        "flushed"
                    );
                    self.release_outputs();
                }
                Err(e) => self.fail(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_back_early_wait_for_those_begun_before_them() {
        let mut f = Flights::default();
        f.begun(10, 10, 0);
        f.begun(15, 5, 3);
        assert_eq!((f.len(), f.last()), (2, Some(15)));
        assert!(f.back(FlushTicket::done(15), 7).is_none());
        assert!(f.next_landed().is_none(), "15 waits for 10");
        assert!(f.back(FlushTicket::done(10), 9).is_none());
        let first = f.next_landed().expect("10 landed");
        assert_eq!(
            (first.ticket.last_lsn(), first.micros, first.records),
            (10, 9, 10)
        );
        let second = f.next_landed().expect("15 landed");
        assert_eq!(
            (second.ticket.last_lsn(), second.micros, second.records),
            (15, 3 + 7, 5),
            "a flush whose begin did durable work counts it"
        );
        assert!(f.is_empty());
    }

    #[test]
    fn flushes_are_quick_only_once_the_latest_one_landed_quick() {
        let mut f = Flights::new(0);
        assert!(!f.are_quick(), "an open's first flush is not known quick");
        f.begun(1, 1, 0);
        f.back(FlushTicket::done(1), 80);
        f.next_landed();
        assert!(f.are_quick());
        f.begun(2, 1, 0);
        f.back(FlushTicket::done(2), INLINE_FLUSH_MAX_US + 1);
        assert!(f.are_quick(), "not before it lands");
        f.next_landed();
        assert!(!f.are_quick(), "a slow flush sends the next off the shard");
        f.begun(3, 1, INLINE_FLUSH_MAX_US);
        f.back(FlushTicket::done(3), 1);
        f.next_landed();
        assert!(!f.are_quick(), "a begin's durable work counts");
    }

    #[test]
    fn a_ticket_of_no_flight_is_handed_back() {
        let mut f = Flights::default();
        f.begun(10, 10, 0);
        assert!(f.back(FlushTicket::done(11), 1).is_some());
        assert!(f.back(FlushTicket::done(10), 1).is_none());
        assert!(f.back(FlushTicket::done(10), 1).is_some(), "back twice");
    }
}
