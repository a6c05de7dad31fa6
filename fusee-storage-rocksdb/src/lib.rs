//! Fusee storage backend on [RocksDB](https://rocksdb.org): every shard of a
//! storage in one database, the directory `fusee.rocksdb` in the storage's
//! directory, with one column family each for the log, the run store, the
//! index and metadata.
//!
//! ```
//! use fusee_storage::{CheckpointStore, IndexChange, LogStore, RunStore, Storage};
//! use fusee_storage_rocksdb::RocksStorage;
//!
//! let dir = std::env::temp_dir().join(format!("fusee-rocksdb-doc-{}", std::process::id()));
//! let storage = RocksStorage::open(&dir)?;
//! let mut p = storage.open_shard(0)?;
//! p.log.append(1, b"record")?;
//! assert_eq!(p.log.flush()?, 1); // one synced write batch
//! let blob = p.runs.append(b"journal")?;
//! p.checkpoint.commit(&mut p.runs, IndexChange::Delta(&[]), b"checkpoint")?;
//! drop(p);
//! storage.close()?;
//! drop(storage);
//!
//! let storage = RocksStorage::open(&dir)?;
//! let mut p = storage.open_shard(0)?;
//! assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"checkpoint"[..]));
//! let mut out = Vec::new();
//! p.runs.read(blob, &mut out)?;
//! assert_eq!(out, b"journal");
//! # drop(p); drop(storage); let _ = std::fs::remove_dir_all(&dir);
//! # Ok::<(), fusee_storage::StorageError>(())
//! ```
//!
//! # What this crate owns, and what it does not
//!
//! It owns the RocksDB side only: opening the database, column families and
//! their [`options`], the format row, RocksDB's errors (mapped onto the
//! contract's vocabulary), write batches with or without `sync`, and the
//! memtable flush of a clean close. The directory around the database
//! (identity marker, `LOCK`, creation whole or not at all) is
//! [`fusee_storage_kv::store_dir`]'s, as are the parts ([`RocksShard`]
//! implements the engine traits of [`fusee_storage_kv`]): the byte layout
//! of keys and values, the log and commit rows, frame and record buffering
//! and spills, bases under generations, the open-time cleanup plan and the
//! checks on everything read back live there once, for both key-value
//! backends. It deliberately does not know those bytes or state machines
//! beyond handing them to RocksDB, nor what records, frames, index records
//! or checkpoints mean.
//!
//! **Invariants.** A log flush and a commit are each one write batch
//! written with `sync`; everything else (spilled records, frames and base
//! records, discards) is written without `sync` and is either cut by the
//! next shard open or harmless to lose. The directory's lock is held from
//! before RocksDB opens until it has closed. A clean close leaves every
//! write in table files.
//!
//! # Choices, and why
//!
//! - **One database, shared column families** keyed by (shard, number),
//!   rather than a database per shard: one WAL, one lock, one set of
//!   background threads and memtable budget for the whole storage.
//! - **A log flush is one write batch written with `sync`**: the records
//!   and the shard's log row reach the WAL as one checksummed record and one
//!   fsync. Appends wait in memory until then, or past
//!   [`log::LOG_SPILL_BYTES`] are written without `sync` and with the log
//!   row left alone; opening a shard deletes records past the row.
//! - **Run-store frames between commits pay no fsync**: they wait in memory
//!   and are written every [`runs::SPILL_BYTES`] without `sync`; the commit
//!   writes the rest, the releases (point deletions), the index change and
//!   the commit row in **one** synced batch.
//! - **Bases are streamed under a new index generation** and switched in by
//!   the commit, which range-deletes the old generation.
//! - **`discard_through` is one range deletion** (and the log row), not
//!   synced: a crash may bring records back, which the contract allows.
//! - **Options** (WAL on, point-in-time recovery, bounded WAL and memtables,
//!   level compaction, no compression, blob files for large values): each
//!   with its reason in [`options`].
//! - **Own CRC-32 on records, frames, index records and meta rows**, on top
//!   of RocksDB's block and WAL checksums: a value damaged before RocksDB
//!   checksummed it is still an error, never wrong bytes.
//! - **No compaction by the backend**: deleted frames are reclaimed by
//!   RocksDB's compaction and blob garbage collection, so
//!   [`fusee_storage::RunStore::compact`] moves nothing.
//! - **RocksDB 0.25 (RocksDB 11.8) without default features**: no
//!   compression libraries, no jemalloc; compiled from source by the
//!   `librocksdb-sys` build (C++, slow the first time).
//!
//! # Layout
//!
//! Keys and values byte by byte: [`fusee_storage_kv::layout`]; the column
//! families they live in here: [`layout`].
//!
//! # What a crash can do
//!
//! Writes without `sync` reach the WAL file through the operating system at
//! once, so a process crash keeps them (power loss may not); and a synced
//! batch makes every earlier batch durable, the WAL being sequential.
//! RocksDB replays the WAL at open, batch by batch, stopping at the first
//! damaged record (point-in-time recovery), so each batch is replayed whole
//! or not at all and never one after a gap. After a crash the database may
//! therefore hold frames, base generations, spilled log records and log
//! discards that were never committed or flushed. Opening a shard
//! therefore, in one synced batch: deletes store frames at or past the
//! committed position, index rows of every generation but the committed
//! one, and log records past the last flushed LSN. What remains is exactly
//! the last commit (index, checkpoint and store position together: they
//! share one batch) and a log holding every flushed record.
//!
//! A clean [`fusee_storage::Storage::close`] flushes every column family's
//! memtables into table files, so the WAL of a closed store holds nothing
//! that is not also in them.
//!
//! # Locking and failures
//!
//! [`RocksStorage::open`] claims its directory first
//! ([`fusee_storage_kv::store_dir`]), then takes the directory's `LOCK`
//! (an exclusive lock on the open file, so a second open in this process
//! is refused like one from another process), and holds it until RocksDB
//! has closed: for as long as the storage or any part it gave out lives. A
//! second open meanwhile is [`fusee_storage::StorageError::Locked`]
//! (RocksDB's own `LOCK` inside `fusee.rocksdb` stays too; another program
//! holding it is `Locked` as well). Within a storage a shard is opened by
//! one owner at a time ([`fusee_storage::StorageError::AlreadyOpen`]). A
//! failed flush latches the log part; a failed commit latches the
//! checkpoint and run-store parts; after [`fusee_storage::Storage::close`]
//! every call is `Closed`. A failed WAL write or sync puts RocksDB itself
//! in a background error state in which it refuses later writes of every
//! shard until the storage is reopened (never a silent success).
//!
//! Opening refuses, with the contract's named errors and before writing
//! anything in a directory that is not its store: an empty path, a file or
//! a directory of other files (`NotAStore`), another backend's store
//! (`WrongBackend`), another layout version in the marker or the format
//! row (`UnsupportedFormat`), no store with [`Create::Never`] (`NotFound`),
//! a damaged marker (`CorruptFile`). The database directory missing or
//! emptied, `CURRENT` missing, files RocksDB finds damaged or missing, or
//! column families that are not Fusee's are `CorruptFile` naming the file
//! RocksDB names (or the directory): never a new, empty database where the
//! marker says a store was created. [`RocksError`] is left for RocksDB's
//! failures the vocabulary has no name for.
//!
//! # Damage
//!
//! RocksDB checksums its table blocks, blob records, manifest and WAL
//! records and verifies them on reads (`paranoid_checks` on); the
//! layout's CRCs over keys and values catch what was damaged before
//! RocksDB checksummed it. Every file of a store (`CURRENT`, `MANIFEST-*`,
//! `OPTIONS-*`, `IDENTITY`, the WAL, table and blob files, the marker)
//! flipped at spread offsets, cut short, deleted or zeroed gives the exact
//! data back or a named error (`tests/damage.rs`: `OPTIONS-*` and
//! `IDENTITY` are not read back, so their damage is harmless).
//!
//! What RocksDB cannot tell from a crash: **the WAL a crashed store must
//! replay.** Point-in-time recovery (which a crash's torn tail of unsynced
//! writes needs) replays the WAL up to its first damaged or missing record
//! and drops the rest; a changed byte in a WAL record, a WAL cut short, or
//! the WAL deleted therefore loses the synced batches after the damage,
//! since they look exactly like a tail a power cut tore. This concerns
//! only what was written since the last memtable flush of a store that was
//! not closed cleanly (a clean close flushes; RocksDB also flushes as
//! memtables fill and past [`options::MAX_TOTAL_WAL`]).
//!
//! The shard's **log seal** ([`fusee_storage_kv::seal`], a file
//! `seal-NNNNNNNNNN` beside `fusee.rocksdb`) turns that loss into an error
//! when it drops a log flush the seal covers: the shard's open is
//! [`fusee_storage::StorageError::LostRecords`], decided before the open's
//! cleanup batch (`tests/damage.rs` damages the WAL of a crashed, sealed
//! store). What stays undetected: batches acknowledged after the last seal
//! (the engine seals 20 ms after the log goes idle and every second under
//! load: `fusee::Config::seal_after_idle`), and a dropped batch that was
//! not a log flush (a checkpoint commit) with every flush kept: the shard
//! then opens at the commit before, as after a crash during that commit.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod checkpoint;
mod error;
pub mod layout;
pub mod log;
pub mod options;
pub mod runs;
mod storage;
pub mod verify;

pub use checkpoint::RocksCheckpoint;
pub use error::RocksError;
pub use fusee_storage::identity::Create;
pub use log::RocksLog;
pub use runs::RocksRuns;
pub use storage::{BACKEND, COMMIT_CRASH_POINTS, DIR_NAME, RocksOptions, RocksShard, RocksStorage};

/// This backend's names for its parts and values in errors.
static NAMES: fusee_storage_kv::Names = fusee_storage_kv::names!("rocksdb");
