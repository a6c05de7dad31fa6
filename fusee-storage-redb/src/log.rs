//! [`RedbLog`]: a shard's log, [`fusee_storage_kv::KvLog`] on redb. A flush
//! is one write transaction committed with `Durability::Immediate` (one
//! fsync per batch); a spill and a discard are transactions with
//! `Durability::None`, which the next durable commit of any shard makes
//! durable (the open-time cleanup cuts spilled records, and a discard
//! coming back is allowed).
//!
//! Reads copy batches of records out of the table under the panic shield
//! and hand them to the caller's visitor outside it, so a visitor's own
//! panic is never swallowed.

use fusee_core::record::Lsn;
use fusee_storage::Result;
use fusee_storage_kv::{KvLog, LogEngine, LogRow};
use redb::{Durability, ReadableDatabase};

pub use fusee_storage_kv::log::LOG_SPILL_BYTES;

use crate::NAMES;
use crate::layout::{LOG, META, TAG_LOG, meta_key, number, seq_key};
use crate::storage::{RedbOps, RedbShard, ShardHandle};
use fusee_storage_kv::injected;

/// The redb backend's log part.
pub type RedbLog = KvLog<RedbShard>;

/// Records copied out of the table per read transaction.
const READ_BATCH: usize = 1024;
/// Bytes copied out per read transaction (at least one record).
const READ_BATCH_BYTES: usize = 4 << 20;

fn durability(durable: bool) -> Durability {
    if durable {
        Durability::Immediate
    } else {
        Durability::None
    }
}

impl LogEngine for RedbShard {
    fn write(&self, first: Lsn, records: &[Vec<u8>], row: &LogRow, durable: bool) -> Result<()> {
        let h = &*self.0;
        let doing = "flushing the log";
        if durable && h.take_fail_flush() {
            return Err(injected(doing, h.id()));
        }
        h.transact(durability(durable), NAMES.log, doing, |tx| {
            let mut table = tx.open_table(LOG).map_err(h.err(doing))?;
            for (lsn, record) in (first..).zip(records) {
                table
                    .insert(seq_key(h.id(), lsn), record.as_slice())
                    .map_err(h.err(doing))?;
            }
            let mut meta = tx.open_table(META).map_err(h.err(doing))?;
            meta.insert(meta_key(h.id(), TAG_LOG), &row.encode(h.id())[..])
                .map_err(h.err(doing))?;
            Ok(())
        })
    }

    fn scan(
        &self,
        from: Lsn,
        through: Lsn,
        visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let h = &*self.0;
        let db = h.db(NAMES.log)?;
        let mut next = from;
        while next <= through {
            let batch = h.shield(|| read_batch(h, &db, next, through))?;
            for (lsn, stored) in &batch {
                visit(*lsn, stored)?;
            }
            match batch.last().and_then(|(lsn, _)| lsn.checked_add(1)) {
                Some(after) => next = after,
                None => break,
            }
        }
        Ok(())
    }

    fn discard(&self, from: Lsn, through: Lsn, row: &LogRow) -> Result<()> {
        let h = &*self.0;
        let doing = "discarding log records";
        h.transact(Durability::None, NAMES.log, doing, |tx| {
            let mut table = tx.open_table(LOG).map_err(h.err(doing))?;
            table
                .retain_in(seq_key(h.id(), from)..=seq_key(h.id(), through), |_, _| {
                    false
                })
                .map_err(h.err(doing))?;
            let mut meta = tx.open_table(META).map_err(h.err(doing))?;
            meta.insert(meta_key(h.id(), TAG_LOG), &row.encode(h.id())[..])
                .map_err(h.err(doing))?;
            Ok(())
        })
    }
}

/// Copies stored records `from..=through` out of the table, at most
/// [`READ_BATCH`] records or [`READ_BATCH_BYTES`] (but at least one).
fn read_batch(
    h: &ShardHandle,
    db: &redb::Database,
    from: Lsn,
    through: Lsn,
) -> Result<Vec<(Lsn, Vec<u8>)>> {
    let doing = "reading the log";
    let tx = db.begin_read().map_err(h.err(doing))?;
    let table = tx.open_table(LOG).map_err(h.err(doing))?;
    let range = table
        .range(seq_key(h.id(), from)..=seq_key(h.id(), through))
        .map_err(h.err(doing))?;
    let mut batch = Vec::new();
    let mut bytes = 0;
    for row in range {
        let (key, value) = row.map_err(h.err(doing))?;
        let stored = value.value();
        bytes += stored.len();
        batch.push((number(key.value()), stored.to_vec()));
        if batch.len() == READ_BATCH || bytes >= READ_BATCH_BYTES {
            break;
        }
    }
    Ok(batch)
}
