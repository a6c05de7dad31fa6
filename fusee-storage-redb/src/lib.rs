//! Fusee storage backend on [redb](https://www.redb.org): every shard of a
//! storage in one database file, `fusee.redb` in the storage's directory.
//!
//! ```
//! use fusee_storage::{CheckpointStore, IndexChange, LogStore, RunStore, Storage};
//! use fusee_storage_redb::RedbStorage;
//!
//! let dir = std::env::temp_dir().join(format!("fusee-redb-doc-{}", std::process::id()));
//! let storage = RedbStorage::open(&dir)?;
//! let mut p = storage.open_shard(0)?;
//! p.log.append(1, b"record")?;
//! assert_eq!(p.log.flush()?, 1); // one durable redb commit
//! let blob = p.runs.append(b"journal")?;
//! p.checkpoint.commit(&mut p.runs, IndexChange::Delta(&[]), b"checkpoint")?;
//! drop(p);
//! storage.close()?;
//! drop(storage);
//!
//! let storage = RedbStorage::open(&dir)?;
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
//! It owns the redb side only: opening and locking the file, the format marker, redb's errors, the panic shield (`catch_unwind`) around every redb call, and write transactions with their `Durability`. The parts are the shared ones of
//! [`fusee_storage_kv`] on this engine ([`RedbShard`] implements its engine
//! traits): the byte layout of keys and values, the log and commit rows,
//! frame and record buffering and spills, bases under generations, the
//! open-time cleanup plan and the checks on everything read back live there
//! once, for both key-value backends. It deliberately does not know those
//! bytes or state machines beyond handing them to redb, nor what records,
//! frames, index records or checkpoints mean.
//!
//! # Choices, and why
//!
//! - **One file, shared tables** keyed by (shard, number), rather than a
//!   file or table per shard: redb allows one writer per file, and one file
//!   keeps opening, locking and backup simple. Shards' write transactions
//!   serialise; each is short.
//! - **A log flush is one write transaction** with `Durability::Immediate`
//!   (redb's default one-phase commit: the data and a checksummed commit
//!   slot, then one `fsync`). Appends wait in memory until then, or past
//!   [`log::LOG_SPILL_BYTES`] are written with the log row in a non-durable
//!   transaction that leaves the log row (which counts flushed records)
//!   alone; opening a shard deletes records past the row, so after a crash
//!   or a close the log holds exactly the flushed records, never a hole or a
//!   torn record.
//! - **Run-store frames between commits do not pay a durable commit**: they
//!   wait in memory and are written every [`runs::SPILL_BYTES`] in a
//!   `Durability::None` transaction (no fsync). The checkpoint commit writes
//!   the rest, the index change and the commit row in **one** durable
//!   transaction, which also makes the earlier non-durable ones durable.
//! - **Bases are streamed under a new index generation** in non-durable
//!   transactions ([`checkpoint::BASE_SPILL`] records each) and switched in
//!   by the commit, so a million-record base needs neither one huge
//!   transaction nor a copy.
//! - **Quick repair is off**: a durable commit costs one `fsync`, not two;
//!   the price is that opening after a crash lets redb walk the file to
//!   rebuild its allocator state.
//! - **Own CRC-32 on records, frames and meta rows**: redb checksums pages
//!   for crash recovery, but a read does not verify them; the CRC makes a
//!   changed byte an error instead of wrong bytes.
//! - **No compaction**: a commit deletes released frames and redb reuses
//!   their pages for later writes, so [`fusee_storage::RunStore::compact`]
//!   moves nothing; the file does not shrink while open (redb's own
//!   `Database::compact` needs exclusive access).
//! - **redb 3.1**, the newest line whose minimum Rust version (1.89) is the
//!   workspace's.
//!
//! # Layout
//!
//! Keys and values byte by byte: [`fusee_storage_kv::layout`]; the tables
//! they live in here: [`layout`].
//!
//! # What a crash can do
//!
//! A non-durable transaction becomes durable with the next durable commit of
//! *any* shard (redb persists every earlier transaction), and redb's own
//! clean shutdown (dropping the database) commits durably too. So after a
//! crash the file may hold frames, base generations and log discards that
//! were never committed. Opening a shard therefore, in one durable
//! transaction: deletes store frames at or past the committed position,
//! index rows of every generation but the committed one, and log records
//! past the last flushed LSN (spilled ones). What remains is exactly the last commit (index,
//! checkpoint and store position together: they share one transaction) and
//! a log holding every flushed record. A discard may come back after a
//! crash (the contract allows keeping records). A torn redb commit is rolled
//! back by redb to the previous commit slot.
//!
//! # Locking and failures
//!
//! redb locks the file: a second [`RedbStorage::open`] of the same directory,
//! from another process or this one, fails with [`RedbError::Locked`]. Within
//! a storage a shard is opened by one owner at a time
//! ([`fusee_storage::StorageError::AlreadyOpen`]). A failed flush latches the
//! log part; a failed commit latches the checkpoint and run-store parts;
//! after [`fusee_storage::Storage::close`] every call is `Closed`. A real I/O
//! error inside redb goes further: redb refuses every later write
//! transaction of the database, so all shards' flushes and commits fail
//! until the storage is reopened (never a silent success). A file that
//! is not redb, a foreign redb database and a newer Fusee layout are refused
//! at open with [`RedbError::NotRedb`], [`RedbError::Foreign`] and
//! [`RedbError::NewerFormat`].
//!
//! **Damaged files.** redb does not verify page checksums on reads and has
//! assertions and slice indexing that a damaged page can trip. Every call
//! into redb therefore runs under a panic shield that turns such a panic into
//! [`fusee_storage::StorageError::Corrupt`] naming the shard (reads copy
//! their batches out under the shield and call the caller's visitor outside
//! it, so a visitor's own panic is never swallowed); the database is also
//! closed under the shield. Together with the CRCs, a damaged file gives
//! errors or exact bytes, never a panic (tested with random bit flips).

pub mod checkpoint;
mod error;
pub mod layout;
pub mod log;
pub mod runs;
mod storage;

pub use checkpoint::RedbCheckpoint;
pub use error::RedbError;
pub use log::RedbLog;
pub use runs::RedbRuns;
pub use storage::{COMMIT_CRASH_POINTS, FILE_NAME, RedbShard, RedbStorage};

/// This backend's names for its parts and values in errors.
static NAMES: fusee_storage_kv::Names = fusee_storage_kv::names!("redb");
