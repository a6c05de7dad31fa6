//! [`RocksLog`]: a shard's log, [`fusee_storage_kv::KvLog`] on RocksDB. A
//! flush is one write batch written with `sync` (the records and the log row
//! reach the WAL as one checksummed record and one fsync); a spill is a
//! batch without `sync`; a discard is one range deletion and the new log row
//! without `sync` (a crash may bring the records back, which the contract
//! allows). Reads iterate the log column family in key order, which is LSN
//! order.

use fusee_core::record::Lsn;
use fusee_storage::Result;
use fusee_storage_kv::{KvLog, LogEngine, LogRow, injected};
use rocksdb::{DB, WriteBatch};

pub use fusee_storage_kv::log::LOG_SPILL_BYTES;

use crate::NAMES;
use crate::layout::{LOG, META, TAG_LOG, meta_key, seq_end, seq_key, seq_of};
use crate::storage::{RocksOps, RocksShard, family, range};

/// The RocksDB backend's log part.
pub type RocksLog = KvLog<RocksShard>;

impl RocksShard {
    /// Adds this shard's log row `row` to `batch`.
    fn put_row(&self, db: &DB, batch: &mut WriteBatch, row: &LogRow) -> Result<()> {
        let id = self.0.id();
        batch.put_cf(family(db, META)?, meta_key(id, TAG_LOG), row.encode(id));
        Ok(())
    }

    /// The exclusive end of this shard's log or store keys through `n`.
    fn seq_through(&self, n: u64) -> Vec<u8> {
        match n.checked_add(1) {
            Some(next) => seq_key(self.0.id(), next).to_vec(),
            None => seq_end(self.0.id()).to_vec(),
        }
    }
}

impl LogEngine for RocksShard {
    fn write(&self, first: Lsn, records: &[Vec<u8>], row: &LogRow, durable: bool) -> Result<()> {
        let h = &*self.0;
        let doing = "flushing the log";
        let db = h.db(NAMES.log)?;
        if durable && h.take_fail_flush() {
            return Err(injected(doing, h.id()));
        }
        let mut batch = WriteBatch::default();
        let log = family(&db, LOG)?;
        for (lsn, record) in (first..).zip(records) {
            batch.put_cf(log, seq_key(h.id(), lsn), record);
        }
        self.put_row(&db, &mut batch, row)?;
        h.write(&db, batch, durable, doing)
    }

    fn scan(
        &self,
        from: Lsn,
        through: Lsn,
        visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let h = &*self.0;
        let db = h.db(NAMES.log)?;
        let end = self.seq_through(through);
        let mut it = range(&db, family(&db, LOG)?, &seq_key(h.id(), from), &end);
        while let (Some(key), Some(value)) = (it.key(), it.value()) {
            // A key of another length is damage: the caller reports the
            // LSN it expected as missing.
            visit(seq_of(key).unwrap_or(u64::MAX), value)?;
            it.next();
        }
        it.status().map_err(h.err("reading the log"))
    }

    fn discard(&self, from: Lsn, through: Lsn, row: &LogRow) -> Result<()> {
        let h = &*self.0;
        let db = h.db(NAMES.log)?;
        let mut batch = WriteBatch::default();
        let end = self.seq_through(through);
        batch.delete_range_cf(family(&db, LOG)?, &seq_key(h.id(), from)[..], &end[..]);
        self.put_row(&db, &mut batch, row)?;
        h.write(&db, batch, false, "discarding log records")
    }
}
