//! Deliveries: completions handed to the code one at a time, in journal
//! order, each only once the code is quiescent and has done everything the
//! journal shows it did before that completion; and the byte store they
//! are read from, dropped or compacted as the code consumes it.

use super::COMPACT_MIN;
use super::RunMachine;
use super::error::{DeterminismError, Did};
use super::slots::{Due, RECORDED, Span, UPDATE_DELIVERED};
use crate::record::{Seq, Status, WaitOutcome};

/// A completion that wakes workflow code, its bytes borrowed from the
/// machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery<'m> {
    /// A step's result.
    Step {
        /// The step.
        seq: Seq,
        /// The attempt that produced it.
        attempt: u32,
        /// How it ended.
        status: Status,
        /// Its result or error.
        payload: &'m [u8],
    },
    /// A durable sleep fired.
    Fired {
        /// The sleep.
        seq: Seq,
    },
    /// A wait ended with a signal or its deadline.
    Waited {
        /// The wait.
        seq: Seq,
        /// How ([`WaitOutcome::Signal`] or [`WaitOutcome::TimedOut`]).
        outcome: WaitOutcome,
        /// The signal's payload (empty for a timeout).
        payload: &'m [u8],
    },
    /// A child's result.
    Child {
        /// The operation that started the child.
        seq: Seq,
        /// How the child ended.
        status: Status,
        /// Its result.
        payload: &'m [u8],
    },
    /// Cancellation was requested.
    Cancel {
        /// Why.
        reason: &'m [u8],
    },
    /// An update was accepted: start its handler now, so its operations
    /// take the same sequence numbers on every run.
    Update {
        /// Its ordinal among the run's updates (0 is an update-with-start).
        ordinal: u64,
        /// Its ID.
        id: &'m str,
        /// The handler's name.
        name: &'m str,
        /// Its argument.
        payload: &'m [u8],
    },
}

impl Delivery<'_> {
    /// The operation it completes (`None` for a cancel or an update).
    pub fn seq(&self) -> Option<Seq> {
        match *self {
            Delivery::Step { seq, .. }
            | Delivery::Fired { seq }
            | Delivery::Waited { seq, .. }
            | Delivery::Child { seq, .. } => Some(seq),
            Delivery::Cancel { .. } | Delivery::Update { .. } => None,
        }
    }
}

impl RunMachine {
    /// The code is quiescent: the next delivery, if one waits. The host
    /// hands it to the code and runs the code to quiescence before asking
    /// again. Its bytes stay readable through
    /// [`current_delivery`](Self::current_delivery) until the next call.
    ///
    /// A [`DeterminismError`] if the journal shows the code calling an
    /// operation (or returning a handler) before this delivery that it has
    /// not: quiescent code cannot call it any more. `None` once the code
    /// finished.
    pub fn poll_delivery(&mut self) -> Result<Option<Delivery<'_>>, Box<DeterminismError>> {
        self.current = None;
        if self.run == 0 || self.code_finished {
            return Ok(None);
        }
        self.tidy();
        let Some(next) = self.deliveries.front().copied() else {
            return Ok(None);
        };
        let seq = self.next_seq;
        if next.need >= seq {
            return Err(self.departure(seq, self.held_at(seq), Did::Quiescent));
        }
        if next.dones_before > self.dones_called {
            return Err(self.departure(seq, self.next_done(), Did::Quiescent));
        }
        self.deliveries.pop_front();
        self.recorded_due = self.recorded_due.saturating_sub(1);
        match next.due {
            Due::Update { ordinal, .. } => {
                if let Some(f) = usize::try_from(ordinal)
                    .ok()
                    .and_then(|i| self.updates.get_mut(i))
                {
                    *f |= UPDATE_DELIVERED;
                }
            }
            due => {
                // Its operation is over for the code.
                if let Some(seq) = due.seq() {
                    self.ops.remove(&seq);
                }
            }
        }
        self.current = Some(next.due);
        Ok(self.current_delivery())
    }

    /// The delivery the last [`poll_delivery`](Self::poll_delivery) handed
    /// out, until the next one.
    pub fn current_delivery(&self) -> Option<Delivery<'_>> {
        let text = |s: Span| std::str::from_utf8(s.of(&self.bytes)).unwrap_or_default();
        Some(match self.current? {
            Due::Step {
                seq,
                attempt,
                status,
                payload,
            } => Delivery::Step {
                seq,
                attempt,
                status,
                payload: payload.of(&self.bytes),
            },
            Due::Fired { seq } => Delivery::Fired { seq },
            Due::Waited {
                seq,
                outcome,
                payload,
            } => Delivery::Waited {
                seq,
                outcome,
                payload: payload.of(&self.bytes),
            },
            Due::Child {
                seq,
                status,
                payload,
            } => Delivery::Child {
                seq,
                status,
                payload: payload.of(&self.bytes),
            },
            Due::Cancel { reason } => Delivery::Cancel {
                reason: reason.of(&self.bytes),
            },
            Due::Update {
                ordinal,
                id,
                name,
                payload,
            } => Delivery::Update {
                ordinal,
                id: text(id),
                name: text(name),
                payload: payload.of(&self.bytes),
            },
        })
    }

    /// Drops the bytes nothing will read again. With no delivery, signal or
    /// recorded operation left, that is all of them; otherwise, once the
    /// store doubled since the last time, the live bytes are copied to a
    /// fresh store (amortised: each byte is copied a bounded number of
    /// times). Runs with no delivery borrowed.
    fn tidy(&mut self) {
        let unread = !self.deliveries.is_empty()
            || !self.signals.is_empty()
            || self.max_seq >= self.next_seq;
        if !unread {
            self.bytes.clear();
            self.compact_at = COMPACT_MIN;
            return;
        }
        if self.bytes.len() < self.compact_at {
            return;
        }
        let old = std::mem::take(&mut self.bytes);
        let mut new = Vec::new();
        for p in &mut self.deliveries {
            for s in p.due.spans_mut() {
                *s = s.moved(&old, &mut new);
            }
        }
        for b in &mut self.signals {
            b.payload = b.payload.moved(&old, &mut new);
        }
        let next_seq = self.next_seq;
        for (&seq, slot) in &mut self.ops {
            // A called operation's names were checked at the call.
            if seq >= next_seq && slot.has(RECORDED) {
                slot.name = slot.name.moved(&old, &mut new);
                slot.extra = slot.extra.moved(&old, &mut new);
            } else {
                slot.name = Span::default();
                slot.extra = Span::default();
            }
        }
        self.compact_at = COMPACT_MIN.max(2 * new.len());
        self.bytes = new;
    }
}
