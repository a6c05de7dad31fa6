//! A shard's part in an online backup ([`crate::backup`]): asked by
//! [`Input::Backup`](super::Input::Backup), the shard takes no more
//! inputs but flush completions (the same hold as a checkpoint due), lets
//! its log become wholly durable, commits a checkpoint, and then runs the
//! backup's [`Hold`] on its own thread with its parts frozen at that
//! checkpoint ([`Frozen`]); it goes on only when the hold returns.
//!
//! # Invariants
//!
//! - The parts a hold is given hold exactly the committed checkpoint, the
//!   index and frames it names, and an empty log after it: the checkpoint
//!   is taken with the log wholly durable and nothing is appended until
//!   the hold returns.
//! - A hold is always either run or dropped, and dropping it (the shard
//!   failed, crashed or closed first) tells the backup (its guard), so a
//!   backup never waits for a shard that will not come.
//!
//! What it does not know: what the hold does with the parts, or other
//! shards.

use std::time::Instant;

use fusee_core::record::RunId;
use fusee_storage::LogStore as _;

use super::ShardLoop;
use crate::{AnyCheckpoint, AnyLog, AnyRuns};

/// A shard frozen at the checkpoint it just committed, lent to a
/// backup's [`Hold`].
pub(crate) struct Frozen<'a> {
    /// The shard.
    pub(crate) shard: u32,
    /// The checkpoint committed (its bytes, as the storage holds them).
    pub(crate) checkpoint: &'a [u8],
    /// The shard's log (wholly durable, discarded through the checkpoint).
    pub(crate) log: &'a mut AnyLog,
    /// The shard's run store.
    pub(crate) runs: &'a mut AnyRuns,
    /// The shard's checkpoint part (the committed index).
    pub(crate) index: &'a mut AnyCheckpoint,
    /// How many runs (loaded or parked) the shard holds.
    pub(crate) runs_held: u64,
    /// The shard's next run number.
    pub(crate) next_run: RunId,
    /// When the shard stopped taking inputs for the backup (the production
    /// driver's stopwatch; `None` under a test driver).
    pub(crate) asked: Option<Instant>,
}

/// What a backup runs on a shard's thread once the shard is frozen.
pub(crate) type HoldJob = Box<dyn for<'a> FnOnce(Frozen<'a>) + Send>;

/// A backup's hold of one shard: run with the shard frozen, or dropped.
pub(crate) struct Hold {
    job: HoldJob,
    asked: Option<Instant>,
}

impl Hold {
    /// A hold running `job` with the shard frozen.
    pub(crate) fn new(job: HoldJob) -> Self {
        Self { job, asked: None }
    }
}

impl ShardLoop {
    /// A backup asked for this shard: hold inputs until the log is durable
    /// and a checkpoint taken (`checkpoint`'s `maybe_checkpoint`), then
    /// run the hold. A second hold while one waits is dropped (the engine
    /// runs one backup at a time, so only a misuse gets there).
    pub(super) fn backup_asked(&mut self, mut hold: Hold) {
        hold.asked = self.config.stopwatch.map(|now| now());
        if self.life.has_failed() {
            return;
        }
        self.checkpoints.ask_hold(hold);
    }

    /// Runs the hold waiting, if any, with the shard frozen at the
    /// checkpoint `checkpoint` just committed.
    pub(super) fn hold_for_backup(&mut self, checkpoint: &[u8]) {
        let Some(hold) = self.checkpoints.take_hold() else {
            return;
        };
        debug_assert_eq!(self.log.last_lsn(), self.flights.durable());
        let frozen = Frozen {
            shard: self.shard,
            checkpoint,
            runs_held: crate::migrate::runs_in(&self.core),
            next_run: self.core.next_run_id(),
            log: &mut self.log,
            runs: &mut self.store,
            index: &mut self.checkpoint,
            asked: hold.asked,
        };
        (hold.job)(frozen);
    }
}
