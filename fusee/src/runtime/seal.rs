//! Sealing the log: recording, apart from the log, that every record
//! through the durable LSN is durable ([`fusee_storage::LogStore::begin_seal`]),
//! so that damage the log alone cannot tell from a torn tail (the newest
//! acknowledged batch zeroed by the disk, an embedded database opening as
//! it was one commit earlier) makes the next open fail with
//! `LostRecords` rather than lose the records silently.
//!
//! When: once the log has been idle for `seal_idle_ms` after a flush
//! (nothing appended, no flush in flight), and at the latest
//! `seal_interval_ms` after the oldest unsealed record became durable, so
//! a shard under continuous load still seals. At close, always (after the
//! last checkpoint). A seal is one small write and its sync; its ticket
//! runs on the flusher, never on the shard's thread, and the loop takes
//! appends and flushes meanwhile. A shard whose records arrive closer
//! together than `seal_idle_ms` (a chain of steps) seals only every
//! `seal_interval_ms`, not between its flushes.
//!
//! The window: a record acknowledged at time `t` is covered by a seal by
//! `t + seal_idle_ms` if the shard then goes idle, and by
//! `t + seal_interval_ms` (plus one seal's I/O) in any case. Damage that
//! loses it before then is not detected by the seal.

use fusee_core::record::Lsn;
use fusee_storage::{LogStore, SealTicket};

use super::ShardLoop;

/// When the log was sealed and is sealed next.
///
/// Invariant: a seal claims only durable records (it is begun for the
/// durable LSN, never past it), and a durable record waits for one at most
/// `seal_interval_ms`. Checked by `fusee/tests/seal.rs`
/// `an_idle_shard_seals_and_a_chain_seals_only_by_interval` and
/// `lost_records_after_a_seal_are_an_error_at_open`.
pub(super) struct Seals {
    /// A seal ticket is out (see [`ShardLoop::seal_due`]).
    sealing: bool,
    /// The LSN the last seal recorded (0 before this open's first).
    sealed: Lsn,
    /// When the durable LSN last moved.
    durable_ms: u64,
    /// When the oldest durable record no seal covers became durable
    /// (`None`: every durable record is sealed, or a seal covering them is
    /// out).
    unsealed_ms: Option<u64>,
    /// When the first flush since the seal in flight began completed.
    flushed_while_sealing_ms: Option<u64>,
}

impl Seals {
    /// An open's, at `now_ms`, with records through `durable` recovered.
    pub(super) fn new(durable: Lsn, now_ms: u64) -> Self {
        Self {
            sealing: false,
            sealed: 0,
            durable_ms: now_ms,
            // What the open recovered is durable, and may not be sealed (a
            // crash between a flush and its seal): sealed once idle.
            unsealed_ms: (durable > 0).then_some(now_ms),
            flushed_while_sealing_ms: None,
        }
    }

    /// Whether a seal ticket is out.
    #[inline]
    pub(super) fn is_out(&self) -> bool {
        self.sealing
    }
}

impl ShardLoop {
    /// Whether a seal should begin now: its time ([`ShardLoop::next_seal`])
    /// has come, and the shard has not failed.
    pub(super) fn seal_due(&self, now_ms: u64) -> bool {
        !self.life.has_failed() && self.next_seal().is_some_and(|at| now_ms >= at)
    }

    /// When a seal is due, if one is: with durable records no seal
    /// covers and no seal out, once the log has been idle for
    /// `seal_idle_ms` since its last flush or the oldest of them has been
    /// durable for `seal_interval_ms`, whichever comes first.
    pub(super) fn next_seal(&self) -> Option<u64> {
        let s = &self.seals;
        let since = s.unsealed_ms?;
        if s.sealing || self.flights.durable() <= s.sealed {
            return None;
        }
        let interval = since.saturating_add(self.config.seal_interval_ms);
        let idle = self.flights.all_durable(self.log.last_lsn());
        Some(if idle {
            interval.min(s.durable_ms.saturating_add(self.config.seal_idle_ms))
        } else {
            interval
        })
    }

    /// The durable LSN moved at `now_ms` (a flush came back).
    pub(super) fn note_durable(&mut self, now_ms: u64) {
        let durable = self.flights.durable();
        let s = &mut self.seals;
        s.durable_ms = now_ms;
        if s.sealing {
            s.flushed_while_sealing_ms.get_or_insert(now_ms);
        } else if durable > s.sealed {
            s.unsealed_ms.get_or_insert(now_ms);
        }
    }

    /// Begins a seal if one is due: its ticket, for the driver.
    pub(super) fn begin_seal(&mut self, now_ms: u64) -> Option<SealTicket> {
        if !self.seal_due(now_ms) {
            return None;
        }
        match self.log.begin_seal() {
            Ok(ticket) => {
                self.seals.sealing = true;
                self.seals.unsealed_ms = None;
                Some(ticket)
            }
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    /// A seal ticket came back.
    pub(super) fn sealed(&mut self, ticket: SealTicket, now_ms: u64) {
        self.seals.sealing = false;
        let flushed_since = self.seals.flushed_while_sealing_ms.take();
        match self.log.finish_seal(ticket) {
            Ok(lsn) => {
                self.seals.sealed = self.seals.sealed.max(lsn);
                self.metrics.seals += 1;
                self.metrics.sealed_lsn = self.seals.sealed;
                tracing::trace!(shard = self.shard, sealed = lsn, "sealed");
                // Records made durable while the seal was out wait for the
                // next one, from when the first of them became durable.
                self.seals.unsealed_ms = (self.flights.durable() > self.seals.sealed)
                    .then(|| flushed_since.unwrap_or(now_ms));
            }
            Err(e) => self.fail(e),
        }
    }

    /// Seals the log on this thread (at close, once the last checkpoint is
    /// taken): afterwards damage to anything the shard holds is an error
    /// at the next open, never less data.
    pub(super) fn seal_now(&mut self) -> Result<(), fusee_storage::StorageError> {
        let lsn = self.log.seal()?;
        self.seals.sealed = self.seals.sealed.max(lsn);
        self.metrics.seals += 1;
        self.metrics.sealed_lsn = self.seals.sealed;
        self.seals.unsealed_ms = None;
        Ok(())
    }
}
