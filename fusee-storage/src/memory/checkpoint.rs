//! The memory backend's checkpoint part: the index and checkpoint, committed
//! together with the run store's position.

use std::sync::{Arc, MutexGuard};

use super::{Index, MemoryRuns, Part, Shard};
use crate::contract::{CheckpointStore, Committed, IndexChange};
use crate::limits::{DELETED, INDEX_RECORD, index_record_run, index_record_state, index_records};
use crate::{Result, StorageError};

/// Index records handed to an index visitor per chunk.
const INDEX_CHUNK: usize = 4096;

/// The memory backend's checkpoint part.
#[derive(Debug)]
pub struct MemoryCheckpoint {
    pub(super) part: Part,
}

const CHECKPOINT: &str = "memory checkpoint";

/// One staged change of the index.
enum Staged {
    Delta(Vec<(u64, Option<[u8; INDEX_RECORD]>)>),
    Base(Index),
}

impl MemoryCheckpoint {
    fn check_writable(s: &Shard) -> Result<()> {
        if s.checkpoint_latched {
            return Err(StorageError::Latched { what: CHECKPOINT });
        }
        Ok(())
    }

    /// Crashes the storage if the armed crash point is `step`.
    fn crash_point(&self, s: &mut MutexGuard<'_, Shard>, step: u32) -> Result<()> {
        if s.crash_at_step != Some(step) {
            return Ok(());
        }
        s.roll_back();
        Err(StorageError::io(
            format!(
                "committing shard {} (injected crash at step {step})",
                self.part.id
            ),
            std::io::Error::other("injected crash"),
        ))
    }
}

impl CheckpointStore for MemoryCheckpoint {
    type Runs = MemoryRuns;

    fn read_index(&mut self, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        // A snapshot: commits made meanwhile copy the map instead.
        let index = Arc::clone(&self.part.lock(CHECKPOINT)?.index);
        let mut chunk = Vec::with_capacity(INDEX_CHUNK.min(index.len()) * INDEX_RECORD);
        for record in index.values() {
            chunk.extend_from_slice(record);
            if chunk.len() == INDEX_CHUNK * INDEX_RECORD {
                visit(&chunk)?;
                chunk.clear();
            }
        }
        if !chunk.is_empty() {
            visit(&chunk)?;
        }
        Ok(index.len() as u64)
    }

    fn begin_base(&mut self) -> Result<()> {
        let mut s = self.part.lock(CHECKPOINT)?;
        Self::check_writable(&s)?;
        s.base = Some(Vec::new());
        Ok(())
    }

    fn base_chunk(&mut self, records: &[u8]) -> Result<()> {
        let mut s = self.part.lock(CHECKPOINT)?;
        Self::check_writable(&s)?;
        let records = index_records(records, "base_chunk")?;
        let Some(base) = s.base.as_mut() else {
            return Err(StorageError::Misuse {
                call: "CheckpointStore::base_chunk",
                why: "no base was begun",
            });
        };
        // Appending is all: sorting once at commit beats a million random
        // tree inserts by an order of magnitude.
        base.extend(records.copied());
        Ok(())
    }

    fn commit(
        &mut self,
        runs: &mut MemoryRuns,
        change: IndexChange<'_>,
        checkpoint: &[u8],
    ) -> Result<Committed> {
        if runs.part.token != self.part.token {
            return Err(StorageError::Misuse {
                call: "CheckpointStore::commit",
                why: "the run store belongs to another shard or open",
            });
        }
        let mut s = self.part.lock(CHECKPOINT)?;
        Self::check_writable(&s)?;
        // Validate before any step so a caller error changes nothing.
        let staged = match change {
            IndexChange::Delta(bytes) => Staged::Delta(
                index_records(bytes, "commit")?
                    .map(|r| {
                        let run = index_record_run(r);
                        (run, (index_record_state(r) != DELETED).then_some(*r))
                    })
                    .collect(),
            ),
            IndexChange::Base => match s.base.take() {
                Some(base) => Staged::Base(build_base(base)),
                None => {
                    return Err(StorageError::Misuse {
                        call: "CheckpointStore::commit",
                        why: "IndexChange::Base without begin_base",
                    });
                }
            },
        };
        self.crash_point(&mut s, 0)?;
        if s.fail_next_commit {
            s.fail_next_commit = false;
            s.checkpoint_latched = true;
            s.runs_latched = true;
            return Err(StorageError::io(
                format!("committing shard {} (injected fault)", self.part.id),
                std::io::Error::other("injected commit failure"),
            ));
        }
        // Step 1: the run store is durable up to here (memory: trivially).
        let position = s.next_offset;
        self.crash_point(&mut s, 1)?;
        // Step 2: the new index is staged.
        self.crash_point(&mut s, 2)?;
        // Publish index, checkpoint and store position as one step.
        match staged {
            Staged::Base(base) => s.index = Arc::new(base),
            Staged::Delta(ops) => {
                let index = Arc::make_mut(&mut s.index);
                for (run, record) in ops {
                    match record {
                        Some(r) => index.insert(run, r),
                        None => index.remove(&run),
                    };
                }
            }
        }
        s.checkpoint = Some(checkpoint.to_vec());
        s.committed_offset = position;
        s.frames.retain(|_, f| !f.released);
        self.crash_point(&mut s, 3)?;
        Ok(Committed {
            index_records: s.index.len() as u64,
            store_position: position,
        })
    }
}

/// The index a streamed base describes: the last record of each run wins
/// and a [`DELETED`] record removes its run, as if applied in order.
pub(super) fn build_base(mut records: Vec<[u8; INDEX_RECORD]>) -> Index {
    // Stable: records of one run keep their order, so the last one is last.
    records.sort_by_key(index_record_run);
    let mut kept: Vec<(u64, [u8; INDEX_RECORD])> = Vec::with_capacity(records.len());
    for r in records {
        let run = index_record_run(&r);
        if kept.last().is_some_and(|(last, _)| *last == run) {
            kept.pop();
        }
        if index_record_state(&r) != DELETED {
            kept.push((run, r));
        }
    }
    // Sorted input: the map is built in bulk.
    kept.into_iter().collect()
}
