//! [`RocksRuns`]: a shard's run store, [`fusee_storage_kv::KvRuns`] on
//! RocksDB. Frames between commits are spilled in batches without `sync`;
//! the checkpoint commit writes the rest in its own synced batch, which
//! makes the spilled ones durable too (the WAL is sequential). RocksDB
//! reclaims deleted frames itself (compaction drops the keys, blob garbage
//! collection the blob files).

use std::collections::BTreeMap;

use fusee_storage::Result;
use fusee_storage_kv::{FrameEngine, KvRuns};
use rocksdb::{DB, WriteBatch};

pub use fusee_storage_kv::runs::SPILL_BYTES;

use crate::NAMES;
use crate::layout::{STORE, seq_key};
use crate::storage::{RocksOps, RocksShard, family};

/// The RocksDB backend's run-store part.
pub type RocksRuns = KvRuns<RocksShard>;

/// Adds `frames` of `shard` to `batch`.
pub(crate) fn put_frames(
    db: &DB,
    batch: &mut WriteBatch,
    shard: u32,
    frames: &BTreeMap<u64, Vec<u8>>,
) -> Result<()> {
    let store = family(db, STORE)?;
    for (&n, frame) in frames {
        batch.put_cf(store, seq_key(shard, n), frame);
    }
    Ok(())
}

impl FrameEngine for RocksShard {
    fn spill(&self, frames: &BTreeMap<u64, Vec<u8>>) -> Result<()> {
        let h = &*self.0;
        let db = h.db(NAMES.runs)?;
        let mut batch = WriteBatch::default();
        put_frames(&db, &mut batch, h.id(), frames)?;
        h.write(&db, batch, false, "writing run-store frames")
    }

    fn with_stored<T>(&self, n: u64, f: impl FnOnce(Option<&[u8]>) -> Result<T>) -> Result<T> {
        let h = &*self.0;
        let db = h.db(NAMES.runs)?;
        let stored = db
            .get_pinned_cf(family(&db, STORE)?, seq_key(h.id(), n))
            .map_err(h.err("reading a run-store frame"))?;
        f(stored.as_deref())
    }
}
