//! [`RocksCheckpoint`]: a shard's index and checkpoint.
//!
//! A commit is one write batch written with `sync`: the run store's
//! buffered frames and releases, the index change and the commit row
//! (checkpoint, store position, index generation and size) all become
//! durable together or not at all (RocksDB writes a batch to the WAL as one
//! checksummed record and replays it whole or not at all).
//!
//! A base is streamed under the next index *generation* (the key's second
//! field) in batches of [`BASE_SPILL`] records written without `sync`, so a
//! million-record base never sits in one batch or in memory; the commit
//! writes the rest, switches the commit row to the new generation and
//! range-deletes the old one. Until then readers and recovery use the
//! committed generation; opening the shard deletes rows of any other.
//!
//! The record count is kept exact: a record that replaces one already
//! stored does not count twice, and a deletion counts only if the run was
//! there. A delta looks runs up in the database; a base only for runs not
//! above the largest it has written (a base streamed in run order, the
//! usual case, looks nothing up).

use std::collections::HashMap;
use std::sync::Arc;

use fusee_storage::{
    CheckpointStore, Committed, DELETED, INDEX_RECORD, IndexChange, Result, RunStore, StorageError,
    index_record_run, index_record_state, index_records,
};
use rocksdb::{DB, WriteBatch};

use crate::layout::{
    CommitRow, INDEX, META, TAG_COMMIT, index_end, index_key, index_record_of, index_value,
    meta_key,
};
use crate::runs::{self, RocksRuns};
use crate::storage::{ShardHandle, family, injected, range};

const WHAT: &str = "rocksdb checkpoint";

/// Base records buffered before they are written (without `sync`): 2 MiB.
pub const BASE_SPILL: usize = 65_536;

/// Index records handed to a visitor per chunk (128 KiB).
const INDEX_CHUNK: usize = 4096;

/// A base being streamed.
struct Base {
    generation: u32,
    /// Records not yet written, in arrival order.
    pending: Vec<[u8; INDEX_RECORD]>,
    /// Records the generation holds so far (written ones).
    records: u64,
    /// The largest run written under `generation` so far, if any.
    max_written: Option<u64>,
}

/// The RocksDB backend's checkpoint part.
pub struct RocksCheckpoint {
    h: Arc<ShardHandle>,
    /// The committed index generation and its size.
    generation: u32,
    records: u64,
    base: Option<Base>,
    latched: bool,
}

impl std::fmt::Debug for RocksCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksCheckpoint")
            .field("shard", &self.h.id)
            .field("generation", &self.generation)
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

/// Where [`RocksCheckpoint::apply`] learns whether a run is already stored.
enum Known {
    /// Look every run up in the database.
    Lookup,
    /// Runs above this one (or every run, with `None`) are known absent.
    AbsentAbove(Option<u64>),
}

impl RocksCheckpoint {
    pub(crate) fn new(h: Arc<ShardHandle>, generation: u32, records: u64) -> Self {
        Self {
            h,
            generation,
            records,
            base: None,
            latched: false,
        }
    }

    fn writable(&self) -> Result<()> {
        self.h.check_open(WHAT)?;
        if self.latched {
            return Err(StorageError::Latched { what: WHAT });
        }
        Ok(())
    }

    /// Adds `records`, in order, to `batch` under `generation`, which held
    /// `count` records; returns the new count.
    fn apply<'a>(
        h: &ShardHandle,
        db: &DB,
        batch: &mut WriteBatch,
        generation: u32,
        count: u64,
        known: Known,
        records: impl Iterator<Item = &'a [u8; INDEX_RECORD]>,
    ) -> Result<u64> {
        let doing = "writing index records";
        let index = family(db, INDEX)?;
        let mut count = count;
        let miscount = || StorageError::Corrupt {
            what: "rocksdb index: record count of shard",
            at: u64::from(h.id),
        };
        // Whether each run touched by this call is stored after it.
        let mut now: HashMap<u64, bool> = HashMap::new();
        for r in records {
            let run = index_record_run(r);
            let key = index_key(h.id, generation, run);
            let stored = match (now.get(&run), &known) {
                (Some(&stored), _) => stored,
                (None, Known::AbsentAbove(max)) if max.is_none_or(|m| run > m) => false,
                (None, _) => db
                    .get_pinned_cf(index, key)
                    .map_err(h.err(doing))?
                    .is_some(),
            };
            if index_record_state(r) == DELETED {
                if stored {
                    batch.delete_cf(index, key);
                    count = count.checked_sub(1).ok_or_else(miscount)?;
                }
                now.insert(run, false);
            } else {
                batch.put_cf(index, key, index_value(r));
                if !stored {
                    count += 1;
                }
                now.insert(run, true);
            }
        }
        Ok(count)
    }

    /// Adds a base's pending records to `batch`, in run order (a stable
    /// sort, so the last record of a run still wins).
    fn write_base(h: &ShardHandle, db: &DB, batch: &mut WriteBatch, base: &mut Base) -> Result<()> {
        base.pending.sort_by_key(index_record_run);
        let known = Known::AbsentAbove(base.max_written);
        base.records = Self::apply(
            h,
            db,
            batch,
            base.generation,
            base.records,
            known,
            base.pending.iter(),
        )?;
        if let Some(last) = base.pending.last().map(index_record_run) {
            base.max_written = Some(base.max_written.map_or(last, |m| m.max(last)));
        }
        base.pending.clear();
        Ok(())
    }

    /// Adds the deletion of every index row of `generation` to `batch`.
    fn clear_generation(
        h: &ShardHandle,
        db: &DB,
        batch: &mut WriteBatch,
        generation: u32,
    ) -> Result<()> {
        batch.delete_range_cf(
            family(db, INDEX)?,
            &index_key(h.id, generation, 0)[..],
            &index_end(h.id, generation)[..],
        );
        Ok(())
    }

    /// Visits the committed records in chunks of at most [`INDEX_CHUNK`],
    /// checking each; returns how many there were.
    fn visit_index(&self, db: &DB, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        let h = &*self.h;
        let index = family(db, INDEX)?;
        let mut it = range(
            db,
            index,
            &index_key(h.id, self.generation, 0),
            &index_end(h.id, self.generation),
        );
        let cap = usize::try_from(self.records)
            .unwrap_or(usize::MAX)
            .min(INDEX_CHUNK);
        let mut chunk = Vec::with_capacity(cap * INDEX_RECORD);
        let mut at = 0u64;
        while let (Some(key), Some(value)) = (it.key(), it.value()) {
            let record = index_record_of(value, "rocksdb index record number", at)?;
            let run = index_record_run(&record);
            if key != index_key(h.id, self.generation, run) {
                return Err(StorageError::Corrupt {
                    what: "rocksdb index: record under another run's key, at record",
                    at,
                });
            }
            chunk.extend_from_slice(&record);
            at += 1;
            if chunk.len() == INDEX_CHUNK * INDEX_RECORD {
                visit(&chunk)?;
                chunk.clear();
            }
            it.next();
        }
        it.status().map_err(h.err("reading the index"))?;
        if !chunk.is_empty() {
            visit(&chunk)?;
        }
        Ok(at)
    }

    fn write_commit(
        &mut self,
        runs: &RocksRuns,
        change: IndexChange<'_>,
        checkpoint: &[u8],
    ) -> Result<Committed> {
        let doing = "committing a checkpoint";
        let h = &*self.h;
        let db = h.db(WHAT)?;
        if h.crash_point(0) || h.take_fail_commit() {
            return Err(injected(doing, h.id));
        }
        let mut batch = WriteBatch::default();
        let position = runs.write_for_commit(&db, &mut batch)?;
        let (generation, records) = match change {
            IndexChange::Delta(bytes) => {
                let records = index_records(bytes, "index delta length")?;
                let n = Self::apply(
                    h,
                    &db,
                    &mut batch,
                    self.generation,
                    self.records,
                    Known::Lookup,
                    records,
                )?;
                (self.generation, n)
            }
            IndexChange::Base => {
                let Some(base) = self.base.as_mut() else {
                    return Err(StorageError::Misuse {
                        call: "CheckpointStore::commit",
                        why: "IndexChange::Base without begin_base",
                    });
                };
                Self::write_base(h, &db, &mut batch, base)?;
                Self::clear_generation(h, &db, &mut batch, self.generation)?;
                (base.generation, base.records)
            }
        };
        let row = CommitRow {
            position,
            generation,
            records,
            checkpoint: checkpoint.to_vec(),
        };
        batch.put_cf(family(&db, META)?, meta_key(h.id, TAG_COMMIT), row.encode());
        if h.crash_point(1) {
            drop(batch);
            return Err(injected(doing, h.id));
        }
        h.write(&db, batch, true, doing)?;
        self.generation = generation;
        self.records = records;
        if h.crash_point(2) {
            return Err(injected(doing, h.id));
        }
        Ok(Committed {
            index_records: records,
            store_position: position,
        })
    }
}

impl CheckpointStore for RocksCheckpoint {
    type Runs = RocksRuns;

    fn read_index(&mut self, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        let db = self.h.db(WHAT)?;
        // One iterator reads one consistent view of the database.
        let n = self.visit_index(&db, visit)?;
        if n != self.records {
            return Err(StorageError::Corrupt {
                what: "rocksdb index: record count differs from the commit row of shard",
                at: u64::from(self.h.id),
            });
        }
        Ok(n)
    }

    fn begin_base(&mut self) -> Result<()> {
        self.writable()?;
        let generation = self.generation.wrapping_add(1);
        if self.base.as_ref().is_some_and(|b| b.max_written.is_some()) {
            self.base = None;
            let db = self.h.db(WHAT)?;
            let mut batch = WriteBatch::default();
            Self::clear_generation(&self.h, &db, &mut batch, generation)?;
            self.h.write(&db, batch, false, "abandoning a base")?;
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
        let records = index_records(records, "index base chunk length")?;
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
        let db = self.h.db(WHAT)?;
        let mut batch = WriteBatch::default();
        let result = Self::write_base(&self.h, &db, &mut batch, base)
            .and_then(|()| self.h.write(&db, batch, false, "writing a base"));
        if result.is_err() {
            // The base's count now includes records that were not written.
            self.latched = true;
        }
        result
    }

    fn commit(
        &mut self,
        runs: &mut RocksRuns,
        change: IndexChange<'_>,
        checkpoint: &[u8],
    ) -> Result<Committed> {
        if !Arc::ptr_eq(&runs.h, &self.h) {
            return Err(StorageError::Misuse {
                call: "CheckpointStore::commit",
                why: "the run store belongs to another shard or open",
            });
        }
        self.writable()?;
        if runs.latched {
            return Err(StorageError::Latched { what: runs::WHAT });
        }
        // Caller errors change nothing and latch nothing.
        match change {
            IndexChange::Delta(bytes) => drop(index_records(bytes, "index delta length")?),
            IndexChange::Base if self.base.is_none() => {
                return Err(StorageError::Misuse {
                    call: "CheckpointStore::commit",
                    why: "IndexChange::Base without begin_base",
                });
            }
            IndexChange::Base => {}
        }
        match self.write_commit(runs, change, checkpoint) {
            Ok(c) => {
                runs.committed();
                if matches!(change, IndexChange::Base) {
                    self.base = None;
                }
                debug_assert_eq!(c.store_position, runs.position());
                Ok(c)
            }
            Err(e) => {
                self.latched = true;
                runs.latched = true;
                Err(e)
            }
        }
    }
}
