//! Checkpoints: every loaded run's journal and the shard's counters,
//! committed with the index, then the log discarded through the LSN they
//! cover, so an open replays only the log after it. Taken when the log
//! since the last one passes `checkpoint_bytes` or `checkpoint_interval`,
//! and at close; only when the whole log is durable, so the checkpoint
//! holds no record a crash could take back. A loaded run holding
//! `parking::SPILL_BYTES` or more of journal since its stored prefix (a
//! long stream) has it written to the run store first, as a park writes
//! it, and the checkpoint names the frame
//! (`ShardLoop::spill_long_journals`). Each also names the search-attribute
//! index's snapshot as it stands (`search`).

use fusee_core::store::{Checkpoint, CheckpointRun};
use fusee_storage::{CheckpointStore, IndexChange, LogStore, RunStore};

use super::ShardLoop;

/// When the shard checkpoints next: the log bytes since the last
/// checkpoint, when it was, and whether the shard holds one.
///
/// Invariant: a checkpoint is taken only when the log is wholly durable,
/// and a close leaves one (so a cleanly closed store is never taken for
/// one whose first open was interrupted). Checked by
/// `fusee/tests/testing_kit.rs`
/// `crash_everywhere_carries_on_from_every_prefix_of_the_log` and
/// `fusee/tests/engine.rs` `an_empty_closed_store_refuses_another_shard_count`.
pub(super) struct Checkpoints {
    /// Log bytes since the last checkpoint.
    since: u64,
    /// When the last checkpoint was (or the open).
    at_ms: u64,
    /// Whether the shard holds a checkpoint (recovered, or taken since). A
    /// close takes one if not, so a cleanly closed store, even an empty
    /// one, is never taken for one whose first open was interrupted (which
    /// may be opened with more shards: see `Engine::interrupted_creation`).
    taken: bool,
    /// A backup's hold waiting for the next checkpoint (`backup`): it makes
    /// one due at once, whatever was logged.
    hold: Option<super::backup::Hold>,
}

impl Checkpoints {
    /// An open's, at `now_ms`; `taken` if it recovered a checkpoint.
    pub(super) fn new(now_ms: u64, taken: bool) -> Self {
        Self {
            since: 0,
            at_ms: now_ms,
            taken,
            hold: None,
        }
    }

    /// A checkpoint was committed at `now_ms` (a hold waiting stays).
    fn committed(&mut self, now_ms: u64) {
        self.since = 0;
        self.at_ms = now_ms;
        self.taken = true;
    }

    /// A backup's hold waits for the next checkpoint (one at a time: a
    /// second is dropped, which its backup hears).
    pub(super) fn ask_hold(&mut self, hold: super::backup::Hold) {
        if self.hold.is_none() {
            self.hold = Some(hold);
        }
    }

    /// The hold waiting, taken out.
    pub(super) fn take_hold(&mut self) -> Option<super::backup::Hold> {
        self.hold.take()
    }

    /// `bytes` of log were appended.
    #[inline]
    pub(super) fn appended(&mut self, bytes: usize) {
        self.since += bytes as u64;
    }

    /// When a checkpoint is due by time (`interval_ms` after the last),
    /// if anything was appended since.
    pub(super) fn next_due(&self, interval_ms: u64) -> Option<u64> {
        (self.since > 0).then(|| self.at_ms + interval_ms)
    }
}

impl ShardLoop {
    /// Takes a checkpoint if one is due (or the shard is closing), and
    /// finishes a close once it is taken.
    pub(super) fn maybe_checkpoint(&mut self, now_ms: u64) {
        let due = self.checkpoint_due(now_ms);
        let closing = self.life.is_closing();
        if self.life.has_failed() {
            // A backup waiting hears of the failure from its dropped hold.
            drop(self.checkpoints.take_hold());
            return;
        }
        if !(due || closing) {
            return;
        }
        let backup = self.checkpoints.hold.is_some();
        if closing && (self.has_runnable_work() || self.seals.is_out()) {
            // Let the code that can go on without the disk reach quiescence
            // first; its records are flushed before the checkpoint. A seal
            // out comes back first: the close seals again after the
            // checkpoint.
            return;
        }
        let taken = if backup
            || self.checkpoints.since > 0
            || self.core.index_pending() > 0
            || self.compaction_wanted()
            || (closing && !self.checkpoints.taken)
            || (closing && self.attr_snapshot_wanted())
        {
            // Frames moved by a compaction are committed by this checkpoint.
            self.maybe_compact()
                .and_then(|()| self.checkpoint_now(now_ms))
                .map(Some)
        } else {
            Ok(None)
        };
        let committed = match taken {
            Ok(committed) => committed,
            Err(e) => {
                drop(self.checkpoints.take_hold());
                self.fail(e);
                return;
            }
        };
        if let Some(checkpoint) = committed.filter(|_| backup) {
            // The shard takes nothing until the backup lets it go.
            self.hold_for_backup(&checkpoint);
        }
        if closing && let Err(e) = self.seal_now() {
            // The close seals after its checkpoint, so damage to anything
            // the closed shard holds is an error at the next open.
            self.fail(e);
            return;
        }
        if let Some(reply) = self.life.finish_close() {
            self.live.clear();
            let _ = reply.send(Ok(()));
        }
    }

    /// Whether the log since the last checkpoint passed
    /// `checkpoint_bytes`, or `checkpoint_interval` passed with anything
    /// logged: the loop then holds new records back until the log is
    /// durable and the checkpoint taken.
    /// A compaction wanted makes one due too, since a checkpoint commits
    /// the frames' new addresses.
    pub(super) fn checkpoint_due(&self, now_ms: u64) -> bool {
        !self.life.has_failed()
            && (self.checkpoints.hold.is_some()
                || self.checkpoints.since >= self.config.checkpoint_bytes
                || (self.checkpoints.since > 0
                    && now_ms >= self.checkpoints.at_ms + self.config.checkpoint_interval_ms)
                || self.compaction_wanted())
    }

    /// Whether some run can make progress without the disk.
    fn has_runnable_work(&self) -> bool {
        self.live.has_ready() || !self.inbox.is_empty()
    }

    /// Commits a checkpoint of the shard as it is (the log wholly durable)
    /// and discards the log it covers; returns the checkpoint's bytes. It
    /// names the search-attribute index's snapshot as it stands (`search`).
    fn checkpoint_now(&mut self, now_ms: u64) -> Result<Vec<u8>, fusee_storage::StorageError> {
        debug_assert_eq!(self.log.last_lsn(), self.flights.durable());
        // Long journals go to frames this commit makes durable.
        self.spill_long_journals()?;
        let attr_frames = self.attr_frames_at_checkpoint()?;
        let lsn = self.flights.durable();
        let runs = self
            .core
            .loaded_runs()
            .map(|(run, l)| CheckpointRun {
                run,
                last_lsn: l.last_lsn,
                blob: l.blob,
                blob_chain: l.blob_chain,
                blob_depth: l.blob_depth,
                journal: l.journal.clone(),
            })
            .collect();
        let cp = Checkpoint {
            shard: self.shard,
            shards: self.config.shards,
            lsn,
            next_run: self.core.next_run_id(),
            store_generation: 0,
            store_len: self.store.position(),
            created_ms: now_ms,
            runs,
            outbox: self.mail.encode_outbox(),
            index: Vec::new(),
            obsolete: 0,
            index_runs: self.core.parked_len() as u64,
            attr_frames,
        };
        let mut delta = Vec::new();
        // Past its cap the core drops its change lists: only a base (every
        // parked run) then says what the index holds. An empty delta in its
        // place lost every run parked since the last commit.
        let change = if self.core.index_needs_base() {
            self.stream_index_base()?;
            IndexChange::Base
        } else {
            self.core.index_delta(&mut delta);
            IndexChange::Delta(&delta)
        };
        let unsynced = self.sabotaged(super::sabotage::Sabotage::UnsyncedCheckpoint);
        if unsynced {
            self.log.discard_through(lsn)?;
        }
        let bytes = cp.encode();
        self.checkpoint.commit(&mut self.store, change, &bytes)?;
        if !unsynced {
            self.log.discard_through(lsn)?;
        }
        self.checkpoints.committed(now_ms);
        self.metrics.checkpoints += 1;
        tracing::debug!(shard = self.shard, lsn, "checkpoint");
        Ok(bytes)
    }

    /// Streams every parked run to the checkpoint part as a new base, in
    /// chunks of [`BASE_CHUNK_RUNS`] (the commit that follows makes it the
    /// index). Runs in one go, so no table compaction moves a slot between
    /// chunks.
    fn stream_index_base(&mut self) -> Result<(), fusee_storage::StorageError> {
        self.checkpoint.begin_base()?;
        self.core.begin_index_snapshot();
        let mut chunk = Vec::with_capacity(BASE_CHUNK_RUNS * fusee_storage::INDEX_RECORD);
        let mut from = 0;
        // Bounded: each pass moves `from` forward over at least one slot.
        loop {
            chunk.clear();
            let next = self.core.index_snapshot(from, BASE_CHUNK_RUNS, &mut chunk);
            if !chunk.is_empty() {
                self.checkpoint.base_chunk(&chunk)?;
            }
            match next {
                Some(slot) => {
                    debug_assert!(slot > from, "the snapshot moves forward");
                    from = slot;
                }
                None => return Ok(()),
            }
        }
    }
}

/// Parked runs per chunk of a streamed index base (a chunk is this many
/// index records in memory at once).
const BASE_CHUNK_RUNS: usize = 64 << 10;
