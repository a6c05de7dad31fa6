//! [`RocksCheckpoint`]: a shard's index and checkpoint,
//! [`fusee_storage_kv::KvCheckpoint`] on RocksDB. A commit is one write
//! batch written with `sync`: the run store's buffered frames and releases
//! (point deletions), the index change and the commit row become durable
//! together or not at all (RocksDB writes a batch to the WAL as one
//! checksummed record and replays it whole or not at all). Bases are
//! streamed under a new generation in batches of [`BASE_SPILL`] records
//! without `sync`; the commit range-deletes the old generation.
//!
//! A write batch does not say whether a key was there, so the record count
//! is kept exact by lookups: a record that replaces one already stored does
//! not count twice, and a deletion counts only if the run was there. A delta
//! looks runs up in the database; a base only for runs not above the
//! largest it has written (a base streamed in run order, the usual case,
//! looks nothing up).

use std::collections::HashMap;

use fusee_storage::{
    DELETED, INDEX_RECORD, Result, RunStore, StorageError, index_record_run, index_record_state,
    index_records,
};
use fusee_storage_kv::checkpoint::RowVisitor;
use fusee_storage_kv::{Base, CommitRow, IndexEngine, IndexWrite, KvCheckpoint, KvRuns, injected};
use rocksdb::{DB, WriteBatch};

pub use fusee_storage_kv::checkpoint::BASE_SPILL;

use crate::NAMES;
use crate::layout::{
    INDEX, META, STORE, TAG_COMMIT, index_end, index_key, index_value, meta_key, seq_key,
};
use crate::runs::put_frames;
use crate::storage::{RocksOps, RocksShard, ShardHandle, family, range};

/// The RocksDB backend's checkpoint part.
pub type RocksCheckpoint = KvCheckpoint<RocksShard>;

/// Where [`apply`] learns whether a run is already stored.
enum Known {
    /// Look every run up in the database.
    Lookup,
    /// Runs above this one (or every run, with `None`) are known absent.
    AbsentAbove(Option<u64>),
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
        what: NAMES.index_miscount,
        at: u64::from(h.id()),
    };
    // Whether each run touched by this call is stored after it.
    let mut now: HashMap<u64, bool> = HashMap::new();
    for r in records {
        let run = index_record_run(r);
        let key = index_key(h.id(), generation, run);
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
            batch.put_cf(index, key, index_value(&key, r));
            if !stored {
                count += 1;
            }
            now.insert(run, true);
        }
    }
    Ok(count)
}

/// Adds a base's pending records to `batch`, in run order.
fn write_base(h: &ShardHandle, db: &DB, batch: &mut WriteBatch, base: &mut Base) -> Result<()> {
    let (generation, count) = (base.generation, base.records);
    let known = Known::AbsentAbove(base.max_written);
    let n = apply(
        h,
        db,
        batch,
        generation,
        count,
        known,
        base.sorted_pending().iter(),
    )?;
    base.wrote(n);
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
        &index_key(h.id(), generation, 0)[..],
        &index_end(h.id(), generation)[..],
    );
    Ok(())
}

impl IndexEngine for RocksShard {
    type Frames = RocksShard;

    fn same_open(&self, frames: &RocksShard) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &frames.0)
    }

    fn write_base(&self, base: &mut Base) -> Result<()> {
        let h = &*self.0;
        let db = h.db(NAMES.checkpoint)?;
        h.base_write_fault("writing a base")?;
        let mut batch = WriteBatch::default();
        write_base(h, &db, &mut batch, base)?;
        h.write(&db, batch, false, "writing a base")
    }

    fn clear_generation(&self, generation: u32) -> Result<()> {
        let h = &*self.0;
        let db = h.db(NAMES.checkpoint)?;
        h.base_write_fault("abandoning a base")?;
        let mut batch = WriteBatch::default();
        clear_generation(h, &db, &mut batch, generation)?;
        h.write(&db, batch, false, "abandoning a base")
    }

    fn commit(
        &self,
        runs: &KvRuns<RocksShard>,
        index: IndexWrite<'_>,
        checkpoint: &[u8],
    ) -> Result<(u32, u64)> {
        let doing = "committing a checkpoint";
        let h = &*self.0;
        let db = h.db(NAMES.checkpoint)?;
        if h.crash_point(0) || h.take_fail_commit() {
            return Err(injected(doing, h.id()));
        }
        let mut batch = WriteBatch::default();
        put_frames(&db, &mut batch, h.id(), runs.buffered())?;
        let store = family(&db, STORE)?;
        for n in runs.released() {
            batch.delete_cf(store, seq_key(h.id(), n));
        }
        let (generation, records) = match index {
            IndexWrite::Delta {
                generation,
                records,
                bytes,
            } => {
                let delta = index_records(bytes, "commit")?;
                let n = apply(
                    h,
                    &db,
                    &mut batch,
                    generation,
                    records,
                    Known::Lookup,
                    delta,
                )?;
                (generation, n)
            }
            IndexWrite::Base { base, old } => {
                write_base(h, &db, &mut batch, base)?;
                clear_generation(h, &db, &mut batch, old)?;
                (base.generation, base.records)
            }
        };
        let row = CommitRow {
            position: runs.position(),
            generation,
            records,
            checkpoint: checkpoint.to_vec(),
        };
        batch.put_cf(
            family(&db, META)?,
            meta_key(h.id(), TAG_COMMIT),
            row.encode(h.id()),
        );
        if h.crash_point(1) {
            drop(batch);
            return Err(injected(doing, h.id()));
        }
        h.write(&db, batch, true, doing)?;
        if h.crash_point(2) {
            return Err(injected(doing, h.id()));
        }
        Ok((generation, records))
    }

    fn scan(&self, generation: u32, visit: &mut RowVisitor<'_>) -> Result<()> {
        // One iterator reads one consistent view of the database.
        let h = &*self.0;
        let db = h.db(NAMES.checkpoint)?;
        let mut it = range(
            &db,
            family(&db, INDEX)?,
            &index_key(h.id(), generation, 0),
            &index_end(h.id(), generation),
        );
        while let (Some(key), Some(value)) = (it.key(), it.value()) {
            visit(key, value)?;
            it.next();
        }
        it.status().map_err(h.err("reading the index"))
    }
}
