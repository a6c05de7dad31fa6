//! The RocksDB options this backend opens its database with, each with the
//! reason it fits Fusee's workload: a log appended in batches and flushed
//! with one synced write, run-store frames written once and deleted whole,
//! a small index rewritten by range, and few, small meta rows.

use rocksdb::{DBCompressionType, DBRecoveryMode, LogLevel, Options};

use crate::RocksOptions;
use crate::layout::{LOG, STORE};

/// Memtable size of each column family.
pub const WRITE_BUFFER: usize = 32 << 20;
/// Memtables of all column families together.
pub const DB_WRITE_BUFFER: usize = 128 << 20;
/// WAL bytes kept before RocksDB flushes the column families that pin the
/// oldest WAL file.
pub const MAX_TOTAL_WAL: u64 = 256 << 20;
/// Values at least this large in the log and store column families go to
/// blob files.
pub const MIN_BLOB: u64 = 4 << 10;

/// Options of the database as a whole.
///
/// - **WAL on** (RocksDB's default, never disabled): a synced write batch is
///   the unit of durability of a log flush and of a checkpoint commit, and
///   the WAL is what makes it durable without flushing memtables.
/// - **Point-in-time WAL recovery** (the default, set explicitly because
///   the open-time cleanup relies on it): after a crash RocksDB replays the
///   WAL up to the first damaged record and stops, so every batch is
///   replayed whole or not at all and never one after a gap.
/// - **`max_total_wal_size` 256 MiB**: records reach 64 MiB and frames
///   256 MiB; without a bound, a quiet column family (meta) would pin old
///   WAL files and the WAL would grow with everything written since.
/// - **`db_write_buffer_size` 128 MiB** across the five column families'
///   32 MiB memtables: bounds the memory all shards' writes take together.
/// - **Two background jobs**: flushes and compactions of one embedded
///   storage; more would compete with the engine's own threads.
/// - **Info log: warnings only, 2 files of at most 1 MiB**: RocksDB's
///   diagnostic `LOG` otherwise grows without bound next to the data.
/// - **Paranoid checks** (default, explicit): a damaged file is reported at
///   open rather than discovered later.
///
/// The sizes and the job count are `options`' ([`RocksOptions`]).
pub fn db_options(options: &RocksOptions) -> Options {
    let mut o = Options::default();
    o.set_wal_recovery_mode(DBRecoveryMode::PointInTime);
    o.set_max_total_wal_size(options.max_total_wal);
    o.set_db_write_buffer_size(options.db_write_buffer);
    o.set_max_background_jobs(options.background_jobs);
    o.set_log_level(LogLevel::Warn);
    o.set_keep_log_file_num(2);
    o.set_max_log_file_size(1 << 20);
    o.set_paranoid_checks(true);
    family_defaults(&mut o, options);
    o
}

/// Options of column family `name`.
///
/// Every family: **no compression** (the crate is built without compression
/// libraries; records, frames and checkpoints are the engine's own encoded
/// bytes, and whatever compression suits them belongs above storage), **32
/// MiB memtables, at most 2 per family** (a 64 MiB record passes through
/// one memtable at a time; a second lets writes go on while the first is
/// flushed), **level compaction with dynamic level sizes** (RocksDB's
/// default shape: bounded space amplification for a store that deletes
/// whole ranges).
///
/// The log and store families add **blob files for values of 4 KiB and
/// more, with blob garbage collection**: records reach 64 MiB and frames
/// 256 MiB, and are written once, read rarely and deleted whole; kept in
/// the LSM tree they would be rewritten at every compaction level. Keys and
/// small values stay in the tree, so iteration in LSN order stays cheap.
///
/// The memtable size is `options`' ([`RocksOptions::write_buffer`]).
pub fn family_options(name: &str, options: &RocksOptions) -> Options {
    let mut o = Options::default();
    family_defaults(&mut o, options);
    if name == LOG || name == STORE {
        o.set_enable_blob_files(true);
        o.set_min_blob_size(MIN_BLOB);
        o.set_blob_compression_type(DBCompressionType::None);
        o.set_enable_blob_gc(true);
    }
    o
}

fn family_defaults(o: &mut Options, options: &RocksOptions) {
    o.set_compression_type(DBCompressionType::None);
    o.set_write_buffer_size(options.write_buffer);
    o.set_max_write_buffer_number(2);
    o.set_level_compaction_dynamic_level_bytes(true);
}
