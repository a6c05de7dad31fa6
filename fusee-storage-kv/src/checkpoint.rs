//! [`KvCheckpoint`]: a shard's index and checkpoint on an ordered key-value
//! engine. The state machine (bases, caller checks, latching, the index
//! read's checks and chunking) is written once here; the engine's
//! [`IndexEngine`] supplies the writes, including the commit's one atomic,
//! durable write.
//!
//! A commit writes the run store's buffered frames and releases, the index
//! change and the commit row (checkpoint, store position, index generation
//! and size) so that they all become durable together or not at all.
//!
//! A base is streamed under the next index *generation* (the key's second
//! field) in writes of [`BASE_SPILL`] records that are not durable, so a
//! million-record base never sits in one write or in memory; the commit
//! writes the rest, switches the commit row to the new generation and
//! deletes the old one. Until then readers and recovery use the committed
//! generation; opening the shard deletes rows of any other
//! ([`crate::Cleanup`]).

use fusee_storage::{
    CheckpointStore, Committed, INDEX_RECORD, IndexChange, Result, RunStore, StorageError,
    index_record_run, index_records,
};

use crate::Names;
use crate::layout::{index_key, index_record_of};
use crate::runs::{FrameEngine, KvRuns};

/// Base records buffered before they are written (not durably): 2 MiB.
pub const BASE_SPILL: usize = 65_536;

/// Index records handed to a visitor per chunk (128 KiB).
pub const INDEX_CHUNK: usize = 4096;

/// A base being streamed under a new generation.
#[derive(Debug)]
pub struct Base {
    /// The generation it is written under.
    pub generation: u32,
    /// Records not yet written, in arrival order (the last record of a run
    /// wins).
    pub pending: Vec<[u8; INDEX_RECORD]>,
    /// Records the generation holds so far (written ones).
    pub records: u64,
    /// The largest run written under `generation` so far, if any: runs above
    /// it are known absent, so a base streamed in run order needs no
    /// lookups to keep `records` exact.
    pub max_written: Option<u64>,
}

impl Base {
    /// Sorts the pending records by run (stably: the last record of a run
    /// still wins) and returns them, for the engine to write.
    pub fn sorted_pending(&mut self) -> &[[u8; INDEX_RECORD]] {
        self.pending.sort_by_key(index_record_run);
        &self.pending
    }

    /// The sorted pending records were written: the generation now holds
    /// `records`.
    pub fn wrote(&mut self, records: u64) {
        if let Some(last) = self.pending.last().map(index_record_run) {
            self.max_written = Some(self.max_written.map_or(last, |m| m.max(last)));
        }
        self.records = records;
        self.pending.clear();
    }
}

/// The index change a commit writes, checked against the caller's input.
#[derive(Debug)]
pub enum IndexWrite<'a> {
    /// Apply these records, in order, to the committed generation, which
    /// holds `records` records.
    Delta {
        /// The committed generation.
        generation: u32,
        /// How many records it holds.
        records: u64,
        /// The delta's records (a whole number of them).
        bytes: &'a [u8],
    },
    /// Write the base's pending records, delete every row of `old` and make
    /// the base's generation the committed one.
    Base {
        /// The base.
        base: &'a mut Base,
        /// The committed generation the base replaces.
        old: u32,
    },
}

/// A visitor of stored rows: key, then value.
pub type RowVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// What a backend does for its checkpoint part: one shard's index table and
/// commit row (and, in the commit, its store table), on one engine.
pub trait IndexEngine: crate::ShardEngine {
    /// The run-store engine of the same storage.
    type Frames: FrameEngine;

    /// Whether `frames` is the run store of this same open of this shard.
    fn same_open(&self, frames: &Self::Frames) -> bool;

    /// Writes `base`'s pending records ([`Base::sorted_pending`]) under its
    /// generation, in one write that need not be durable, then reports the
    /// generation's new size with [`Base::wrote`].
    fn write_base(&self, base: &mut Base) -> Result<()>;

    /// Deletes every index row of `generation`, in one write that need not
    /// be durable.
    fn clear_generation(&self, generation: u32) -> Result<()>;

    /// The commit, in one atomic write that is durable when this returns
    /// `Ok`: `runs`' buffered frames written and released frames deleted,
    /// `index` applied, and the commit row (store position `runs.position()`,
    /// the resulting generation and size, `checkpoint`) written. Returns the
    /// generation and its size. (A backend's fault switches and crash points
    /// act here.)
    fn commit(
        &self,
        runs: &KvRuns<Self::Frames>,
        index: IndexWrite<'_>,
        checkpoint: &[u8],
    ) -> Result<(u32, u64)>;

    /// Calls `visit` with the key and stored value of every index row of
    /// `generation`, in key order, stopping at (and returning) the first
    /// error `visit` returns. The engine checks nothing about the rows.
    fn scan(&self, generation: u32, visit: &mut RowVisitor<'_>) -> Result<()>;
}

/// A shard's checkpoint part on engine `E`. Its [`CheckpointStore`]
/// implementation is the whole of both backends' checkpoint logic but the
/// writes.
pub struct KvCheckpoint<E> {
    engine: E,
    names: &'static Names,
    /// The committed index generation and its size.
    generation: u32,
    records: u64,
    base: Option<Base>,
    latched: bool,
}

impl<E: IndexEngine> std::fmt::Debug for KvCheckpoint<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvCheckpoint")
            .field("shard", &self.engine.shard())
            .field("generation", &self.generation)
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

impl<E: IndexEngine> KvCheckpoint<E> {
    /// The checkpoint part of a shard whose committed index is `generation`
    /// holding `records` records (after the open-time cleanup).
    pub fn new(engine: E, generation: u32, records: u64, names: &'static Names) -> Self {
        Self {
            engine,
            names,
            generation,
            records,
            base: None,
            latched: false,
        }
    }

    fn writable(&self) -> Result<()> {
        self.engine.check_open(self.names.checkpoint)?;
        if self.latched {
            return Err(StorageError::Latched {
                what: self.names.checkpoint,
            });
        }
        Ok(())
    }
}

impl<E: IndexEngine> CheckpointStore for KvCheckpoint<E> {
    type Runs = KvRuns<E::Frames>;

    fn read_index(&mut self, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        self.engine.check_open(self.names.checkpoint)?;
        let (names, shard, generation) = (self.names, self.engine.shard(), self.generation);
        let cap = usize::try_from(self.records)
            .unwrap_or(usize::MAX)
            .min(INDEX_CHUNK);
        let mut chunk = Vec::with_capacity(cap * INDEX_RECORD);
        let mut at = 0u64;
        self.engine.scan(generation, &mut |key, value| {
            let record = index_record_of(key, value, names.index_record, at)?;
            if key != index_key(shard, generation, index_record_run(&record)) {
                return Err(StorageError::Corrupt {
                    what: names.index_key,
                    at,
                });
            }
            chunk.extend_from_slice(&record);
            at += 1;
            if chunk.len() == INDEX_CHUNK * INDEX_RECORD {
                visit(&chunk)?;
                chunk.clear();
            }
            Ok(())
        })?;
        if !chunk.is_empty() {
            visit(&chunk)?;
        }
        if at != self.records {
            return Err(StorageError::Corrupt {
                what: names.index_count,
                at: u64::from(shard),
            });
        }
        Ok(at)
    }

    fn begin_base(&mut self) -> Result<()> {
        self.writable()?;
        let generation = self.generation.wrapping_add(1);
        if self.base.as_ref().is_some_and(|b| b.max_written.is_some()) {
            self.base = None;
            if let Err(e) = self.engine.clear_generation(generation) {
                // Rows of the abandoned base may remain under the next
                // generation, which a new base would count as its own.
                self.latched = true;
                return Err(e);
            }
        }
        self.base = Some(Base {
            generation,
            pending: Vec::new(),
            records: 0,
            max_written: None,
        });
        Ok(())
    }

    fn base_chunk(&mut self, records: &[u8]) -> Result<()> {
        self.writable()?;
        let records = index_records(records, "base_chunk")?;
        let Some(base) = self.base.as_mut() else {
            return Err(StorageError::Misuse {
                call: "CheckpointStore::base_chunk",
                why: "no base was begun",
            });
        };
        base.pending.extend(records.copied());
        if base.pending.len() < BASE_SPILL {
            return Ok(());
        }
        let result = self.engine.write_base(base);
        if result.is_err() {
            // What the base holds is unknown now.
            self.latched = true;
        }
        result
    }

    fn commit(
        &mut self,
        runs: &mut KvRuns<E::Frames>,
        change: IndexChange<'_>,
        checkpoint: &[u8],
    ) -> Result<Committed> {
        if !self.engine.same_open(runs.engine()) {
            return Err(StorageError::Misuse {
                call: "CheckpointStore::commit",
                why: "the run store belongs to another shard or open",
            });
        }
        self.writable()?;
        runs.check_latched()?;
        // Caller errors change nothing and latch nothing.
        let index = match change {
            IndexChange::Delta(bytes) => {
                drop(index_records(bytes, "commit")?);
                IndexWrite::Delta {
                    generation: self.generation,
                    records: self.records,
                    bytes,
                }
            }
            IndexChange::Base => match self.base.as_mut() {
                Some(base) => IndexWrite::Base {
                    base,
                    old: self.generation,
                },
                None => {
                    return Err(StorageError::Misuse {
                        call: "CheckpointStore::commit",
                        why: "IndexChange::Base without begin_base",
                    });
                }
            },
        };
        match self.engine.commit(runs, index, checkpoint) {
            Ok((generation, records)) => {
                self.generation = generation;
                self.records = records;
                runs.committed();
                if matches!(change, IndexChange::Base) {
                    self.base = None;
                }
                Ok(Committed {
                    index_records: records,
                    store_position: runs.position(),
                })
            }
            Err(e) => {
                self.latched = true;
                runs.latch();
                Err(e)
            }
        }
    }
}
