//! [`RedbRuns`]: a shard's run store, [`fusee_storage_kv::KvRuns`] on
//! redb. Frames between commits are spilled in `Durability::None`
//! transactions (no fsync); the checkpoint commit writes the rest in its
//! durable transaction, which makes the spilled ones durable too. A frame
//! reaching the file early (a log flush persists every earlier non-durable
//! transaction) lies at or past the committed position, and opening the
//! shard deletes those. redb reuses the pages of deleted frames itself.

use std::collections::BTreeMap;

use fusee_storage::Result;
use fusee_storage_kv::{FrameEngine, KvRuns};
use redb::{Durability, ReadableDatabase, WriteTransaction};

pub use fusee_storage_kv::runs::SPILL_BYTES;

use crate::NAMES;
use crate::layout::{STORE, seq_key};
use crate::storage::{RedbOps, RedbShard, ShardHandle};

/// The redb backend's run-store part.
pub type RedbRuns = KvRuns<RedbShard>;

/// Writes `frames` into `tx`.
pub(crate) fn write_frames(
    h: &ShardHandle,
    tx: &WriteTransaction,
    frames: &BTreeMap<u64, Vec<u8>>,
    doing: &str,
) -> Result<()> {
    let mut store = tx.open_table(STORE).map_err(h.err(doing))?;
    for (&n, frame) in frames {
        store
            .insert(seq_key(h.id(), n), frame.as_slice())
            .map_err(h.err(doing))?;
    }
    Ok(())
}

impl FrameEngine for RedbShard {
    fn spill(&self, frames: &BTreeMap<u64, Vec<u8>>) -> Result<()> {
        let doing = "writing run-store frames";
        let h = &*self.0;
        h.transact(Durability::None, NAMES.runs, doing, |tx| {
            write_frames(h, tx, frames, doing)
        })
    }

    fn with_stored<T>(&self, n: u64, f: impl FnOnce(Option<&[u8]>) -> Result<T>) -> Result<T> {
        let h = &*self.0;
        let doing = "reading a run-store frame";
        let db = h.db(NAMES.runs)?;
        h.shield(|| {
            let tx = db.begin_read().map_err(h.err(doing))?;
            let store = tx.open_table(STORE).map_err(h.err(doing))?;
            let value = store.get(seq_key(h.id(), n)).map_err(h.err(doing))?;
            f(value.as_ref().map(|v| v.value()))
        })
    }
}
