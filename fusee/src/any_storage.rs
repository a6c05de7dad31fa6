//! [`AnyStorage`]: one type for whichever backend [`crate::open_storage`]
//! opened.
//!
//! An enum per trait (storage, log, run store, checkpoint) with one variant
//! per backend compiled in, each call a `match` that delegates. Chosen over
//! `Box<dyn ...>` because [`Storage`] has associated part types (and
//! [`CheckpointStore::commit`] takes the storage's own run store), which a
//! trait object cannot name without a second, object-safe set of traits;
//! the enums keep the contract's traits as they are and cost one branch per
//! call. A commit given another backend's run store is a `Misuse` error.

use fusee_core::record::Lsn;
use fusee_core::shard::BlobRef;
use fusee_storage::memory::{MemoryCheckpoint, MemoryLog, MemoryRuns};
use fusee_storage::{
    CheckpointStore, Committed, FlushTicket, IndexChange, LogStore, MemoryStorage, Result,
    RunStore, SealTicket, ShardParts, Storage, StorageError,
};

use crate::Backend;

/// Runs `$body` on whichever backend `$value` (an enum of this module) holds,
/// bound to `$x`.
macro_rules! each {
    ($value:expr, $enum:ident, $x:ident => $body:expr) => {
        match $value {
            $enum::Memory($x) => $body,
            #[cfg(feature = "file")]
            $enum::File($x) => $body,
            #[cfg(all(feature = "file", feature = "testing"))]
            $enum::SimFile($x) => $body,
            #[cfg(feature = "rocksdb")]
            $enum::Rocksdb($x) => $body,
            #[cfg(feature = "redb")]
            $enum::Redb($x) => $body,
            #[cfg(feature = "postgres")]
            $enum::Postgres($x) => $body,
        }
    };
}

/// A storage of any backend compiled in.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyStorage {
    /// The in-memory backend.
    Memory(MemoryStorage),
    /// The file backend.
    #[cfg(feature = "file")]
    File(fusee_storage_file::FileStorage),
    /// The file backend on the simulated disk (feature `testing`): the
    /// simulator's, for power cuts that tear writes.
    #[cfg(all(feature = "file", feature = "testing"))]
    SimFile(fusee_storage_file::FileStorage<fusee_storage_file::sim::SimIo>),
    /// The RocksDB backend.
    #[cfg(feature = "rocksdb")]
    Rocksdb(fusee_storage_rocksdb::RocksStorage),
    /// The redb backend.
    #[cfg(feature = "redb")]
    Redb(fusee_storage_redb::RedbStorage),
    /// The PostgreSQL backend.
    #[cfg(feature = "postgres")]
    Postgres(fusee_storage_postgres::PgStorage),
}

/// A log part of any backend compiled in.
#[derive(Debug)]
#[non_exhaustive]
// The file log is the largest variant by a few hundred bytes; there is one
// per open shard and it never moves on a hot path, while a Box would put an
// indirection in front of every append.
#[allow(clippy::large_enum_variant)]
pub enum AnyLog {
    /// The in-memory backend's.
    Memory(MemoryLog),
    /// The file backend's.
    #[cfg(feature = "file")]
    File(fusee_storage_file::log::FileLog),
    /// The file backend on the simulated disk (feature `testing`): the
    /// simulator's, for power cuts that tear writes.
    #[cfg(all(feature = "file", feature = "testing"))]
    SimFile(fusee_storage_file::log::FileLog<fusee_storage_file::sim::SimIo>),
    /// The RocksDB backend's.
    #[cfg(feature = "rocksdb")]
    Rocksdb(fusee_storage_rocksdb::RocksLog),
    /// The redb backend's.
    #[cfg(feature = "redb")]
    Redb(fusee_storage_redb::RedbLog),
    /// The PostgreSQL backend's.
    #[cfg(feature = "postgres")]
    Postgres(fusee_storage_postgres::PgLog),
}

/// A run-store part of any backend compiled in.
#[derive(Debug)]
#[non_exhaustive]
// As for `AnyLog`: one per open shard, never moved on a hot path.
#[allow(clippy::large_enum_variant)]
pub enum AnyRuns {
    /// The in-memory backend's.
    Memory(MemoryRuns),
    /// The file backend's.
    #[cfg(feature = "file")]
    File(fusee_storage_file::store::FileRuns),
    /// The file backend on the simulated disk (feature `testing`): the
    /// simulator's, for power cuts that tear writes.
    #[cfg(all(feature = "file", feature = "testing"))]
    SimFile(fusee_storage_file::store::FileRuns<fusee_storage_file::sim::SimIo>),
    /// The RocksDB backend's.
    #[cfg(feature = "rocksdb")]
    Rocksdb(fusee_storage_rocksdb::RocksRuns),
    /// The redb backend's.
    #[cfg(feature = "redb")]
    Redb(fusee_storage_redb::RedbRuns),
    /// The PostgreSQL backend's.
    #[cfg(feature = "postgres")]
    Postgres(fusee_storage_postgres::PgRuns),
}

/// A checkpoint part of any backend compiled in.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyCheckpoint {
    /// The in-memory backend's.
    Memory(MemoryCheckpoint),
    /// The file backend's.
    #[cfg(feature = "file")]
    File(fusee_storage_file::checkpoint::FileCheckpoint),
    /// The file backend on the simulated disk (feature `testing`): the
    /// simulator's, for power cuts that tear writes.
    #[cfg(all(feature = "file", feature = "testing"))]
    SimFile(fusee_storage_file::checkpoint::FileCheckpoint<fusee_storage_file::sim::SimIo>),
    /// The RocksDB backend's.
    #[cfg(feature = "rocksdb")]
    Rocksdb(fusee_storage_rocksdb::RocksCheckpoint),
    /// The redb backend's.
    #[cfg(feature = "redb")]
    Redb(fusee_storage_redb::RedbCheckpoint),
    /// The PostgreSQL backend's.
    #[cfg(feature = "postgres")]
    Postgres(fusee_storage_postgres::PgCheckpoint),
}

impl AnyStorage {
    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self {
            AnyStorage::Memory(_) => Backend::Memory,
            #[cfg(feature = "file")]
            AnyStorage::File(_) => Backend::File,
            #[cfg(all(feature = "file", feature = "testing"))]
            AnyStorage::SimFile(_) => Backend::File,
            #[cfg(feature = "rocksdb")]
            AnyStorage::Rocksdb(_) => Backend::Rocksdb,
            #[cfg(feature = "redb")]
            AnyStorage::Redb(_) => Backend::Redb,
            #[cfg(feature = "postgres")]
            AnyStorage::Postgres(_) => Backend::Postgres,
        }
    }

    /// Who holds `shard`'s lease now, with a backend whose shards are
    /// leased (PostgreSQL: one query); `None` with the others, or when the
    /// store cannot be asked.
    pub(crate) fn lease_holder(&self, shard: u32) -> Option<String> {
        match self {
            #[cfg(feature = "postgres")]
            AnyStorage::Postgres(s) => s.lease(shard).ok().flatten().map(|l| l.holder),
            #[allow(unreachable_patterns)] // every backend is leased
            _ => {
                let _ = shard;
                None
            }
        }
    }
}

impl AnyLog {
    /// The shard's fencing token as this open holds it: the lease's epoch
    /// with PostgreSQL (it grows with every open of the shard, so with
    /// every change of owner), 0 with a backend one process owns whole.
    pub(crate) fn fencing_token(&self) -> u64 {
        match self {
            #[cfg(feature = "postgres")]
            AnyLog::Postgres(l) => l.epoch(),
            #[allow(unreachable_patterns)] // every backend is leased
            _ => 0,
        }
    }
}

/// Wraps one backend's parts into the `Any` enums' `$variant`.
macro_rules! wrap_parts {
    ($variant:ident, $p:expr) => {{
        let p = $p;
        ShardParts {
            log: AnyLog::$variant(p.log),
            runs: AnyRuns::$variant(p.runs),
            checkpoint: AnyCheckpoint::$variant(p.checkpoint),
            recovered: p.recovered,
        }
    }};
}

impl Storage for AnyStorage {
    type Log = AnyLog;
    type Runs = AnyRuns;
    type Checkpoint = AnyCheckpoint;

    fn open_shard(&self, shard: u32) -> Result<ShardParts<Self>> {
        Ok(match self {
            AnyStorage::Memory(s) => wrap_parts!(Memory, s.open_shard(shard)?),
            #[cfg(feature = "file")]
            AnyStorage::File(s) => wrap_parts!(File, s.open_shard(shard)?),
            #[cfg(all(feature = "file", feature = "testing"))]
            AnyStorage::SimFile(s) => wrap_parts!(SimFile, s.open_shard(shard)?),
            #[cfg(feature = "rocksdb")]
            AnyStorage::Rocksdb(s) => wrap_parts!(Rocksdb, s.open_shard(shard)?),
            #[cfg(feature = "redb")]
            AnyStorage::Redb(s) => wrap_parts!(Redb, s.open_shard(shard)?),
            #[cfg(feature = "postgres")]
            AnyStorage::Postgres(s) => wrap_parts!(Postgres, s.open_shard(shard)?),
        })
    }

    fn shards(&self) -> Result<Vec<u32>> {
        each!(self, AnyStorage, s => s.shards())
    }

    fn close(&self) -> Result<()> {
        each!(self, AnyStorage, s => s.close())
    }
}

impl LogStore for AnyLog {
    fn append(&mut self, lsn: Lsn, record: &[u8]) -> Result<()> {
        each!(self, AnyLog, l => l.append(lsn, record))
    }

    fn flush(&mut self) -> Result<Lsn> {
        each!(self, AnyLog, l => l.flush())
    }

    fn begin_flush(&mut self) -> Result<FlushTicket> {
        each!(self, AnyLog, l => l.begin_flush())
    }

    fn finish_flush(&mut self, ticket: FlushTicket) -> Result<Lsn> {
        each!(self, AnyLog, l => l.finish_flush(ticket))
    }

    fn flushes_in_flight_max(&self) -> usize {
        each!(self, AnyLog, l => l.flushes_in_flight_max())
    }

    fn begin_seal(&mut self) -> Result<SealTicket> {
        each!(self, AnyLog, l => l.begin_seal())
    }

    fn finish_seal(&mut self, ticket: SealTicket) -> Result<Lsn> {
        each!(self, AnyLog, l => l.finish_seal(ticket))
    }

    fn seal(&mut self) -> Result<Lsn> {
        each!(self, AnyLog, l => l.seal())
    }

    fn read(&mut self, after: Lsn, visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>) -> Result<Lsn> {
        each!(self, AnyLog, l => l.read(after, visit))
    }

    fn discard_through(&mut self, lsn: Lsn) -> Result<()> {
        each!(self, AnyLog, l => l.discard_through(lsn))
    }

    fn first_lsn(&self) -> Lsn {
        each!(self, AnyLog, l => l.first_lsn())
    }

    fn last_lsn(&self) -> Lsn {
        each!(self, AnyLog, l => l.last_lsn())
    }

    fn durable_lsn(&self) -> Lsn {
        each!(self, AnyLog, l => l.durable_lsn())
    }
}

impl RunStore for AnyRuns {
    fn append(&mut self, frame: &[u8]) -> Result<BlobRef> {
        each!(self, AnyRuns, r => r.append(frame))
    }

    fn read(&mut self, blob: BlobRef, out: &mut Vec<u8>) -> Result<()> {
        each!(self, AnyRuns, r => r.read(blob, out))
    }

    fn prefetch(&mut self, blobs: &[BlobRef]) -> Result<()> {
        each!(self, AnyRuns, r => r.prefetch(blobs))
    }

    fn release(&mut self, blob: BlobRef) -> Result<()> {
        each!(self, AnyRuns, r => r.release(blob))
    }

    fn compact(&mut self, moved: &mut dyn FnMut(BlobRef, BlobRef)) -> Result<u64> {
        each!(self, AnyRuns, r => r.compact(moved))
    }

    fn position(&self) -> u64 {
        each!(self, AnyRuns, r => r.position())
    }
}

impl CheckpointStore for AnyCheckpoint {
    type Runs = AnyRuns;

    fn read_index(&mut self, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        each!(self, AnyCheckpoint, c => c.read_index(visit))
    }

    fn begin_base(&mut self) -> Result<()> {
        each!(self, AnyCheckpoint, c => c.begin_base())
    }

    fn base_chunk(&mut self, records: &[u8]) -> Result<()> {
        each!(self, AnyCheckpoint, c => c.base_chunk(records))
    }

    fn commit(
        &mut self,
        runs: &mut AnyRuns,
        change: IndexChange<'_>,
        checkpoint: &[u8],
    ) -> Result<Committed> {
        #[allow(unreachable_patterns)] // only one backend compiled in
        match (self, runs) {
            (AnyCheckpoint::Memory(c), AnyRuns::Memory(r)) => c.commit(r, change, checkpoint),
            #[cfg(feature = "file")]
            (AnyCheckpoint::File(c), AnyRuns::File(r)) => c.commit(r, change, checkpoint),
            #[cfg(all(feature = "file", feature = "testing"))]
            (AnyCheckpoint::SimFile(c), AnyRuns::SimFile(r)) => c.commit(r, change, checkpoint),
            #[cfg(feature = "rocksdb")]
            (AnyCheckpoint::Rocksdb(c), AnyRuns::Rocksdb(r)) => c.commit(r, change, checkpoint),
            #[cfg(feature = "redb")]
            (AnyCheckpoint::Redb(c), AnyRuns::Redb(r)) => c.commit(r, change, checkpoint),
            #[cfg(feature = "postgres")]
            (AnyCheckpoint::Postgres(c), AnyRuns::Postgres(r)) => c.commit(r, change, checkpoint),
            _ => Err(StorageError::Misuse {
                call: "CheckpointStore::commit",
                why: "the run store belongs to another backend",
            }),
        }
    }
}
