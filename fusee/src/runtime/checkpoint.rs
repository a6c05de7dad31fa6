//! Checkpoints: every loaded run's journal and the shard's counters,
//! committed with the index, then the log discarded through the LSN they
//! cover, so an open replays only the log after it. Taken when the log
//! since the last one passes `checkpoint_bytes` or `checkpoint_interval`,
//! and at close; only when the whole log is durable, so the checkpoint
//! holds no record a crash could take back.

use fusee_core::store::{Checkpoint, CheckpointRun};
use fusee_storage::{CheckpointStore, IndexChange, LogStore, RunStore};

use super::ShardLoop;

impl ShardLoop {
    /// Takes a checkpoint if one is due (or the shard is closing), and
    /// finishes a close once it is taken.
    pub(super) fn maybe_checkpoint(&mut self, now_ms: u64) {
        let due = self.checkpoint_due(now_ms);
        let closing = self.closing.is_some();
        if !(due || closing) || self.failed.is_some() {
            return;
        }
        if closing && (self.has_runnable_work() || self.sealing) {
            // Let the code that can go on without the disk reach quiescence
            // first; its records are flushed before the checkpoint. A seal
            // out comes back first: the close seals again after the
            // checkpoint.
            return;
        }
        let taken = if self.since_checkpoint > 0
            || self.core.index_pending() > 0
            || self.compaction_wanted()
            || (closing && !self.checkpointed)
        {
            // Frames moved by a compaction are committed by this checkpoint.
            self.maybe_compact()
                .and_then(|()| self.checkpoint_now(now_ms))
        } else {
            Ok(())
        };
        if let Err(e) = taken {
            self.fail(e);
            return;
        }
        if closing && let Err(e) = self.seal_now() {
            // The close seals after its checkpoint, so damage to anything
            // the closed shard holds is an error at the next open.
            self.fail(e);
            return;
        }
        if let Some(reply) = self.closing.take() {
            self.closed = true;
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
        self.failed.is_none()
            && (self.since_checkpoint >= self.config.checkpoint_bytes
                || (self.since_checkpoint > 0
                    && now_ms >= self.checkpoint_ms + self.config.checkpoint_interval_ms)
                || self.compaction_wanted())
    }

    /// Whether some run can make progress without the disk.
    fn has_runnable_work(&self) -> bool {
        !self
            .ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
            || !self.inbox.is_empty()
    }

    /// Commits a checkpoint of the shard as it is (the log wholly durable)
    /// and discards the log it covers.
    fn checkpoint_now(&mut self, now_ms: u64) -> Result<(), fusee_storage::StorageError> {
        debug_assert_eq!(self.log.last_lsn(), self.durable);
        let lsn = self.durable;
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
            outbox: self.outbox.encode(),
            index: Vec::new(),
            obsolete: 0,
            index_runs: self.core.parked_len() as u64,
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
        self.checkpoint
            .commit(&mut self.store, change, &cp.encode())?;
        if !unsynced {
            self.log.discard_through(lsn)?;
        }
        self.since_checkpoint = 0;
        self.checkpoint_ms = now_ms;
        self.checkpointed = true;
        self.metrics.checkpoints += 1;
        tracing::debug!(shard = self.shard, lsn, "checkpoint");
        Ok(())
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
