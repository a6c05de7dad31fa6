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

use fusee_storage::{LogStore, SealTicket};

use super::ShardLoop;

impl ShardLoop {
    /// Whether a seal should begin now: its time ([`ShardLoop::next_seal`])
    /// has come, and the shard has not failed.
    pub(super) fn seal_due(&self, now_ms: u64) -> bool {
        self.failed.is_none() && self.next_seal().is_some_and(|at| now_ms >= at)
    }

    /// When a seal is due, if one is: with durable records no seal
    /// covers and no seal out, once the log has been idle for
    /// `seal_idle_ms` since its last flush or the oldest of them has been
    /// durable for `seal_interval_ms`, whichever comes first.
    pub(super) fn next_seal(&self) -> Option<u64> {
        let since = self.unsealed_ms?;
        if self.sealing || self.durable <= self.sealed {
            return None;
        }
        let interval = since.saturating_add(self.config.seal_interval_ms);
        let idle = self.flights.is_empty() && self.log.last_lsn() == self.durable;
        Some(if idle {
            interval.min(self.durable_ms.saturating_add(self.config.seal_idle_ms))
        } else {
            interval
        })
    }

    /// The durable LSN moved at `now_ms` (a flush came back).
    pub(super) fn note_durable(&mut self, now_ms: u64) {
        self.durable_ms = now_ms;
        if self.sealing {
            self.flushed_while_sealing_ms.get_or_insert(now_ms);
        } else if self.durable > self.sealed {
            self.unsealed_ms.get_or_insert(now_ms);
        }
    }

    /// A seal ticket came back.
    pub(super) fn sealed(&mut self, ticket: SealTicket, now_ms: u64) {
        self.sealing = false;
        let flushed_since = self.flushed_while_sealing_ms.take();
        match self.log.finish_seal(ticket) {
            Ok(lsn) => {
                self.sealed = self.sealed.max(lsn);
                self.metrics.seals += 1;
                self.metrics.sealed_lsn = self.sealed;
                tracing::trace!(shard = self.shard, sealed = lsn, "sealed");
                // Records made durable while the seal was out wait for the
                // next one, from when the first of them became durable.
                self.unsealed_ms =
                    (self.durable > self.sealed).then(|| flushed_since.unwrap_or(now_ms));
            }
            Err(e) => self.fail(e),
        }
    }

    /// Seals the log on this thread (at close, once the last checkpoint is
    /// taken): afterwards damage to anything the shard holds is an error
    /// at the next open, never less data.
    pub(super) fn seal_now(&mut self) -> Result<(), fusee_storage::StorageError> {
        let lsn = self.log.seal()?;
        self.sealed = self.sealed.max(lsn);
        self.metrics.seals += 1;
        self.metrics.sealed_lsn = self.sealed;
        self.unsealed_ms = None;
        Ok(())
    }
}
