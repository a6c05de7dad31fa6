//! [`RedbCheckpoint`]: a shard's index and checkpoint,
//! [`fusee_storage_kv::KvCheckpoint`] on redb. A commit is one write
//! transaction committed with `Durability::Immediate`: the run store's
//! buffered frames and releases, the index change and the commit row become
//! durable together or not at all. Bases are streamed under a new
//! generation in `Durability::None` transactions of [`BASE_SPILL`] records.
//!
//! The record count is kept exact by redb itself: an insert or remove says
//! whether the key was there.

use fusee_storage::{
    DELETED, INDEX_RECORD, Result, RunStore, StorageError, index_record_run, index_record_state,
    index_records,
};
use fusee_storage_kv::checkpoint::{INDEX_CHUNK, RowVisitor};
use fusee_storage_kv::{Base, CommitRow, IndexEngine, IndexWrite, KvCheckpoint, KvRuns};
use redb::{Durability, ReadableDatabase, WriteTransaction};

pub use fusee_storage_kv::checkpoint::BASE_SPILL;

use crate::NAMES;
use crate::layout::{
    INDEX, INDEX_VALUE, META, STORE, TAG_COMMIT, index_key, index_value, meta_key, seq_key,
};
use crate::runs::write_frames;
use crate::storage::{RedbOps, RedbShard, ShardHandle};
use fusee_storage_kv::injected;

/// The redb backend's checkpoint part.
pub type RedbCheckpoint = KvCheckpoint<RedbShard>;

/// Applies `records` in order to generation `generation`, which held
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
        what: NAMES.index_miscount,
        at: u64::from(h.id()),
    };
    for r in records {
        let key = index_key(h.id(), generation, index_record_run(r));
        if index_record_state(r) == DELETED {
            if index.remove(key).map_err(h.err(doing))?.is_some() {
                count = count.checked_sub(1).ok_or_else(miscount)?;
            }
        } else if index
            .insert(key, index_value(&key, r))
            .map_err(h.err(doing))?
            .is_none()
        {
            count += 1;
        }
    }
    Ok(count)
}

/// Writes a base's pending records into `tx`, in run order.
fn write_base(h: &ShardHandle, tx: &WriteTransaction, base: &mut Base) -> Result<()> {
    let (generation, count) = (base.generation, base.records);
    let n = apply(h, tx, generation, count, base.sorted_pending().iter())?;
    base.wrote(n);
    Ok(())
}

/// Deletes every index row of `generation`.
fn clear_generation(h: &ShardHandle, tx: &WriteTransaction, generation: u32) -> Result<()> {
    let doing = "deleting an index generation";
    let mut index = tx.open_table(INDEX).map_err(h.err(doing))?;
    index
        .retain_in(
            index_key(h.id(), generation, 0)..=index_key(h.id(), generation, u64::MAX),
            |_, _| false,
        )
        .map_err(h.err(doing))
}

/// Copies up to [`INDEX_CHUNK`] stored rows of `generation` from run `from`
/// on.
fn index_batch(
    h: &ShardHandle,
    db: &redb::Database,
    generation: u32,
    from: u64,
) -> Result<Vec<([u8; 16], [u8; INDEX_VALUE])>> {
    let doing = "reading the index";
    let tx = db.begin_read().map_err(h.err(doing))?;
    let index = tx.open_table(INDEX).map_err(h.err(doing))?;
    let range = index
        .range(index_key(h.id(), generation, from)..=index_key(h.id(), generation, u64::MAX))
        .map_err(h.err(doing))?;
    let mut batch = Vec::with_capacity(INDEX_CHUNK.min(64));
    for row in range {
        let (key, value) = row.map_err(h.err(doing))?;
        batch.push((key.value(), value.value()));
        if batch.len() == INDEX_CHUNK {
            break;
        }
    }
    Ok(batch)
}

impl IndexEngine for RedbShard {
    type Frames = RedbShard;

    fn same_open(&self, frames: &RedbShard) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &frames.0)
    }

    fn write_base(&self, base: &mut Base) -> Result<()> {
        let h = &*self.0;
        h.base_write_fault("writing a base")?;
        h.transact(Durability::None, NAMES.checkpoint, "writing a base", |tx| {
            write_base(h, tx, base)
        })
    }

    fn clear_generation(&self, generation: u32) -> Result<()> {
        let h = &*self.0;
        h.base_write_fault("abandoning a base")?;
        h.transact(
            Durability::None,
            NAMES.checkpoint,
            "abandoning a base",
            |tx| clear_generation(h, tx, generation),
        )
    }

    fn commit(
        &self,
        runs: &KvRuns<RedbShard>,
        index: IndexWrite<'_>,
        checkpoint: &[u8],
    ) -> Result<(u32, u64)> {
        let doing = "committing a checkpoint";
        let h = &*self.0;
        let db = h.db(NAMES.checkpoint)?;
        if h.crash_point(0) || h.take_fail_commit() {
            return Err(injected(doing, h.id()));
        }
        h.shield(|| {
            let tx = h.begin(&db, Durability::Immediate, doing)?;
            write_frames(h, &tx, runs.buffered(), doing)?;
            {
                let mut store = tx.open_table(STORE).map_err(h.err(doing))?;
                for n in runs.released() {
                    store.remove(seq_key(h.id(), n)).map_err(h.err(doing))?;
                }
            }
            let (generation, records) = match index {
                IndexWrite::Delta {
                    generation,
                    records,
                    bytes,
                } => {
                    let delta = index_records(bytes, "commit")?;
                    (generation, apply(h, &tx, generation, records, delta)?)
                }
                IndexWrite::Base { base, old } => {
                    write_base(h, &tx, base)?;
                    clear_generation(h, &tx, old)?;
                    (base.generation, base.records)
                }
            };
            let row = CommitRow {
                position: runs.position(),
                generation,
                records,
                checkpoint: checkpoint.to_vec(),
            };
            {
                let mut meta = tx.open_table(META).map_err(h.err(doing))?;
                meta.insert(meta_key(h.id(), TAG_COMMIT), row.encode(h.id()).as_slice())
                    .map_err(h.err(doing))?;
            }
            if h.crash_point(1) {
                drop(tx);
                return Err(injected(doing, h.id()));
            }
            h.commit(tx, doing)?;
            if h.crash_point(2) {
                return Err(injected(doing, h.id()));
            }
            Ok((generation, records))
        })
    }

    fn scan(&self, generation: u32, visit: &mut RowVisitor<'_>) -> Result<()> {
        // Batches are copied out under the shield and visited outside it, so
        // a panic in the caller's visitor stays the caller's. Only this part
        // changes the committed generation, so the batches form one
        // snapshot.
        let h = &*self.0;
        let db = h.db(NAMES.checkpoint)?;
        let mut from = 0u64;
        loop {
            let batch = h.shield(|| index_batch(h, &db, generation, from))?;
            for (key, value) in &batch {
                visit(key, value)?;
            }
            let Some((key, _)) = batch.last().filter(|_| batch.len() == INDEX_CHUNK) else {
                return Ok(());
            };
            let [.., r0, r1, r2, r3, r4, r5, r6, r7] = *key;
            match u64::from_be_bytes([r0, r1, r2, r3, r4, r5, r6, r7]).checked_add(1) {
                Some(next) => from = next,
                None => return Ok(()),
            }
        }
    }
}
