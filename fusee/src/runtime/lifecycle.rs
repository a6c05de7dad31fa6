//! A shard loop's life: running, closing (a `Close` waits for the last
//! checkpoint and seal), closed, or failed (its storage failed: why, and
//! what callers are told).
//!
//! # Invariants
//!
//! - The first failure is the one kept: a later one (the same broken
//!   storage answering again) never turns a takeover into a storage error.
//! - A failed shard appends nothing more and answers every caller with
//!   [`Failure::error`]: [`Error::NotOwner`] when fenced (nothing of
//!   theirs was written), [`Error::Unavailable`] when the storage was out
//!   of reach and the engine opens the shard again, else
//!   [`Error::Storage`]. Checked by `tests/lease_*.rs` and the
//!   PostgreSQL outage tests.
//! - Closed is final: the driver ends once [`Lifecycle::is_closed`].
//!
//! What it does not know: who waits (the loop's waiters and inbox), the
//! storage itself.

use fusee_storage::StorageError;

use super::Reply;
use crate::error::Error;

/// Why a shard stopped taking work, and how its callers are told.
#[derive(Clone, Debug)]
pub(super) struct Failure {
    /// The storage's error, as text.
    why: String,
    /// The storage answered `Fenced`: another owner took the shard over.
    fenced: bool,
    /// The storage was out of reach ([`out_of_reach`]) and the engine
    /// opens the shard again: a retryable failure.
    unavailable: bool,
}

impl Failure {
    /// The error a caller of shard `shard` gets; `maybe_recorded`: what
    /// the caller asked for was recorded and waited to be durable, so the
    /// failed flush may have made it so.
    pub(super) fn error(&self, shard: u32, maybe_recorded: bool) -> Error {
        if self.fenced {
            Error::NotOwner { shard }
        } else if self.unavailable {
            Error::Unavailable {
                shard,
                cause: self.why.clone(),
                maybe_recorded,
            }
        } else {
            Error::Storage {
                shard,
                error: StorageError::Backend(self.why.clone().into()),
            }
        }
    }

    /// Whether another owner took the shard over.
    pub(super) fn fenced(&self) -> bool {
        self.fenced
    }

    /// The storage's error, as text.
    pub(super) fn why(&self) -> &str {
        &self.why
    }
}

/// A shard loop's life. See the [module docs](self).
#[derive(Default)]
pub(super) struct Lifecycle {
    /// The `Close` waiting for the last checkpoint.
    closing: Option<Reply<()>>,
    closed: bool,
    failure: Option<Failure>,
    /// The engine opens this shard again after a storage failure (under
    /// [`crate::Ownership::Lease`]); otherwise it stays stopped until the
    /// engine is opened again, and no failure is retryable.
    reopened_after_failure: bool,
}

impl Lifecycle {
    /// Whether the loop has stopped for good (closed, crashed or failed
    /// and told to stop).
    #[inline]
    pub(super) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Stops the loop now (a crash, or a close answered).
    pub(super) fn stop(&mut self) {
        self.closed = true;
    }

    /// A close asked: answered by [`finish_close`](Self::finish_close)
    /// once the last checkpoint is taken (or by the failure).
    pub(super) fn close_after_checkpoint(&mut self, reply: Reply<()>) {
        self.closing = Some(reply);
    }

    /// Whether a close waits for its checkpoint.
    #[inline]
    pub(super) fn is_closing(&self) -> bool {
        self.closing.is_some()
    }

    /// The waiting close's reply, the loop now stopped; `None` if no close
    /// waits.
    pub(super) fn finish_close(&mut self) -> Option<Reply<()>> {
        let reply = self.closing.take()?;
        self.closed = true;
        Some(reply)
    }

    /// Whether the storage failed.
    #[inline]
    pub(super) fn has_failed(&self) -> bool {
        self.failure.is_some()
    }

    /// The failure, if the storage failed.
    pub(super) fn failure(&self) -> Option<&Failure> {
        self.failure.as_ref()
    }

    /// Why the storage failed, if it did (the simulator's look).
    #[cfg(feature = "testing")]
    pub(super) fn why(&self) -> Option<&str> {
        self.failure.as_ref().map(Failure::why)
    }

    /// Whether the engine opens this shard again after a failure (a
    /// leased shard): its out-of-reach failures are retryable.
    pub(super) fn set_reopened_after_failure(&mut self, reopened: bool) {
        self.reopened_after_failure = reopened;
    }

    /// Records the storage's failure `e` unless one is recorded already;
    /// returns the failure kept and whether it is new.
    pub(super) fn fail(&mut self, e: &StorageError) -> (&Failure, bool) {
        let new = self.failure.is_none();
        let reopened = self.reopened_after_failure;
        let failure = self.failure.get_or_insert_with(|| Failure {
            why: e.to_string(),
            fenced: matches!(e, StorageError::Fenced { .. }),
            unavailable: reopened && out_of_reach(e),
        });
        (failure, new)
    }
}

/// Whether `e` says the storage is out of reach rather than broken: an
/// I/O error of a connection (lost, refused, reset, timed out), as the
/// PostgreSQL backend reports a server that went away. The shard stops
/// all the same; its callers are told to retry ([`Error::Unavailable`]).
fn out_of_reach(e: &StorageError) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e,
        StorageError::Io { error, .. } if matches!(
            error.kind(),
            K::ConnectionRefused
                | K::ConnectionReset
                | K::ConnectionAborted
                | K::NotConnected
                | K::BrokenPipe
                | K::TimedOut
                | K::HostUnreachable
                | K::NetworkUnreachable
                | K::NetworkDown
                | K::UnexpectedEof
        )
    )
}
