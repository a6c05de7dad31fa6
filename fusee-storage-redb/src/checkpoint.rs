//! [`RedbCheckpoint`]: a shard's index and checkpoint.
//!
//! A commit is one write transaction committed with
//! `Durability::Immediate`: the run store's buffered frames and releases,
//! the index change and the commit row (checkpoint, store position, index
//! generation and size) all become durable together or not at all.
//!
//! A base is streamed under the next index *generation* (the key's second
//! field) in non-durable transactions of [`BASE_SPILL`] records, so a
//! million-record base never sits in one transaction or in memory; the
//! commit writes the rest, switches the commit row to the new generation and
//! deletes the old one. Until then readers and recovery use the committed
//! generation; opening the shard deletes rows of any other.

use std::sync::Arc;

use fusee_storage::{
    CheckpointStore, Committed, DELETED, INDEX_RECORD, IndexChange, Result, RunStore, StorageError,
    index_record_run, index_record_state, index_records,
};
use redb::{Durability, ReadableDatabase, WriteTransaction};

use crate::layout::{
    CommitRow, INDEX, META, TAG_COMMIT, index_key, index_record_of, index_value, meta_key,
};
use crate::runs::{self, RedbRuns};
use crate::storage::{ShardHandle, injected};

const WHAT: &str = "redb checkpoint";

/// Base records buffered before they are written (non-durably): 2 MiB.
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
    /// Whether any record was written under `generation`.
    written: bool,
}

/// The redb backend's checkpoint part.
pub struct RedbCheckpoint {
    h: Arc<ShardHandle>,
    /// The committed index generation and its size.
    generation: u32,
    records: u64,
    base: Option<Base>,
    latched: bool,
}

impl std::fmt::Debug for RedbCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbCheckpoint")
            .field("shard", &self.h.id)
            .field("generation", &self.generation)
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

impl RedbCheckpoint {
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

    /// Applies `records` in order to generation `generation` starting from
    /// `count` records; returns the new count.
    fn apply<'a>(
        h: &ShardHandle,
        tx: &WriteTransaction,
        generation: u32,
        count: u64,
        records: impl Iterator<Item = &'a [u8; INDEX_RECORD]>,
    ) -> Result<u64> {
        let doing = "writing index records";
        let mut index = tx.open_table(INDEX).map_err(h.err(doing))?;
        let mut count = count;
        let miscount = || StorageError::Corrupt {
            what: "redb index: record count of shard",
            at: u64::from(h.id),
        };
        for r in records {
            let key = index_key(h.id, generation, index_record_run(r));
            if index_record_state(r) == DELETED {
                if index.remove(key).map_err(h.err(doing))?.is_some() {
                    count = count.checked_sub(1).ok_or_else(miscount)?;
                }
            } else if index
                .insert(key, index_value(r))
                .map_err(h.err(doing))?
                .is_none()
            {
                count += 1;
            }
        }
        Ok(count)
    }

    /// Writes a base's pending records into `tx`, in run order (stable, so
    /// the last record of a run still wins).
    fn write_base(h: &ShardHandle, tx: &WriteTransaction, base: &mut Base) -> Result<()> {
        base.pending.sort_by_key(index_record_run);
        base.records = Self::apply(h, tx, base.generation, base.records, base.pending.iter())?;
        base.pending.clear();
        base.written = true;
        Ok(())
    }

    /// Deletes every index row of `generation`.
    fn clear_generation(h: &ShardHandle, tx: &WriteTransaction, generation: u32) -> Result<()> {
        let doing = "deleting an index generation";
        let mut index = tx.open_table(INDEX).map_err(h.err(doing))?;
        index
            .retain_in(
                index_key(h.id, generation, 0)..=index_key(h.id, generation, u64::MAX),
                |_, _| false,
            )
            .map_err(h.err(doing))
    }

    /// Runs `f` in a non-durable transaction.
    fn quietly(&self, doing: &str, f: impl FnOnce(&WriteTransaction) -> Result<()>) -> Result<()> {
        let db = self.h.db(WHAT)?;
        self.h.shield(|| {
            let tx = self.h.begin(&db, Durability::None, doing)?;
            f(&tx)?;
            self.h.commit(tx, doing)
        })
    }

    /// Copies up to [`INDEX_CHUNK`] committed records from run `from` on
    /// (`seen` records came before); returns them and the run to continue
    /// from (`None` at the end).
    fn index_chunk(
        &self,
        db: &redb::Database,
        from: u64,
        seen: u64,
    ) -> Result<(Vec<u8>, Option<u64>)> {
        let doing = "reading the index";
        let h = &*self.h;
        let tx = db.begin_read().map_err(h.err(doing))?;
        let index = tx.open_table(INDEX).map_err(h.err(doing))?;
        let range = index
            .range(
                index_key(h.id, self.generation, from)..=index_key(h.id, self.generation, u64::MAX),
            )
            .map_err(h.err(doing))?;
        let cap = usize::try_from(self.records)
            .unwrap_or(usize::MAX)
            .min(INDEX_CHUNK);
        let mut chunk = Vec::with_capacity(cap * INDEX_RECORD);
        for (at, row) in (seen..).zip(range) {
            let (key, value) = row.map_err(h.err(doing))?;
            let record = index_record_of(&value.value(), "redb index record number", at)?;
            let run = index_record_run(&record);
            if key.value() != index_key(h.id, self.generation, run) {
                return Err(StorageError::Corrupt {
                    what: "redb index: record under another run's key, at record",
                    at,
                });
            }
            chunk.extend_from_slice(&record);
            if chunk.len() == INDEX_CHUNK * INDEX_RECORD {
                return Ok((chunk, run.checked_add(1)));
            }
        }
        Ok((chunk, None))
    }

    fn write_commit(
        &mut self,
        runs: &RedbRuns,
        change: IndexChange<'_>,
        checkpoint: &[u8],
    ) -> Result<Committed> {
        let doing = "committing a checkpoint";
        let h = &*self.h;
        let db = h.db(WHAT)?;
        if h.crash_point(0) || h.take_fail_commit() {
            return Err(injected(doing, h.id));
        }
        let tx = h.begin(&db, Durability::Immediate, doing)?;
        let position = runs.write_for_commit(&tx)?;
        let (generation, records) = match change {
            IndexChange::Delta(bytes) => {
                let records = index_records(bytes, "index delta length")?;
                let n = Self::apply(h, &tx, self.generation, self.records, records)?;
                (self.generation, n)
            }
            IndexChange::Base => {
                let Some(base) = self.base.as_mut() else {
                    return Err(StorageError::Misuse {
                        call: "CheckpointStore::commit",
                        why: "IndexChange::Base without begin_base",
                    });
                };
                Self::write_base(h, &tx, base)?;
                Self::clear_generation(h, &tx, self.generation)?;
                (base.generation, base.records)
            }
        };
        {
            let row = CommitRow {
                position,
                generation,
                records,
                checkpoint: checkpoint.to_vec(),
            };
            let mut meta = tx.open_table(META).map_err(h.err(doing))?;
            meta.insert(meta_key(h.id, TAG_COMMIT), row.encode().as_slice())
                .map_err(h.err(doing))?;
        }
        if h.crash_point(1) {
            drop(tx);
            return Err(injected(doing, h.id));
        }
        h.commit(tx, doing)?;
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

impl CheckpointStore for RedbCheckpoint {
    type Runs = RedbRuns;

    fn read_index(&mut self, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        let db = self.h.db(WHAT)?;
        // Chunks are copied out under the shield and visited outside it, so
        // a panic in the visitor stays the visitor's. Only this part changes
        // the committed generation, so the chunks form one snapshot.
        let mut n = 0u64;
        let mut from = Some(0u64);
        while let Some(run) = from {
            let (chunk, next) = self.h.shield(|| self.index_chunk(&db, run, n))?;
            if chunk.is_empty() {
                break;
            }
            n += (chunk.len() / INDEX_RECORD) as u64;
            visit(&chunk)?;
            from = next;
        }
        if n != self.records {
            return Err(StorageError::Corrupt {
                what: "redb index: record count differs from the commit row of shard",
                at: u64::from(self.h.id),
            });
        }
        Ok(n)
    }

    fn begin_base(&mut self) -> Result<()> {
        self.writable()?;
        let generation = self.generation.wrapping_add(1);
        if self.base.as_ref().is_some_and(|b| b.written) {
            self.base = None;
            let h = Arc::clone(&self.h);
            self.quietly("abandoning a base", |tx| {
                Self::clear_generation(&h, tx, generation)
            })?;
        }
        self.base = Some(Base {
            generation,
            pending: Vec::new(),
            records: 0,
            written: false,
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
        let mut base = self.base.take();
        let h = Arc::clone(&self.h);
        let result = self.quietly("writing a base", |tx| match base.as_mut() {
            Some(base) => Self::write_base(&h, tx, base),
            None => Ok(()),
        });
        self.base = base;
        result
    }

    fn commit(
        &mut self,
        runs: &mut RedbRuns,
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
        let h = Arc::clone(&self.h);
        match h.shield(|| self.write_commit(runs, change, checkpoint)) {
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
