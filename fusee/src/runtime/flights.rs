//! [`Flights`]: the log flushes a shard has in flight.
//!
//! A backend may take several flush tickets at once
//! ([`fusee_storage::LogStore::flushes_in_flight_max`]; PostgreSQL writes
//! each on a connection of its own). Their I/O runs on the flusher threads
//! and comes back in any order, but the log reports flushes durable only
//! in the order they began: a ticket that comes back early waits here for
//! those begun before it.

use std::collections::VecDeque;

use fusee_core::record::Lsn;
use fusee_storage::FlushTicket;

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

/// The flushes in flight, oldest first.
#[derive(Debug, Default)]
pub(super) struct Flights {
    queue: VecDeque<Flight>,
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
        Some(Landed {
            ticket,
            micros: flight.begin_micros.saturating_add(micros),
            records: flight.records,
        })
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
    fn a_ticket_of_no_flight_is_handed_back() {
        let mut f = Flights::default();
        f.begun(10, 10, 0);
        assert!(f.back(FlushTicket::done(11), 1).is_some());
        assert!(f.back(FlushTicket::done(10), 1).is_none());
        assert!(f.back(FlushTicket::done(10), 1).is_some(), "back twice");
    }
}
