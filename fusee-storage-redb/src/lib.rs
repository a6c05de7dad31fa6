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
//! It owns the redb side only: the database file under redb
//! ([`file::DurableFile`], whose growth is durable before a header names
//! it, and the open-time repair of a file a power cut left shorter than
//! its header), redb's format table, redb's errors, the panic shield
//! (`catch_unwind`) around every redb call, and write transactions with
//! their `Durability`. The directory around the file (identity marker,
//! `LOCK`, creation whole or not at all) is
//! [`fusee_storage_kv::store_dir`]'s, as are the parts
//! ([`RedbShard`] implements the engine traits of [`fusee_storage_kv`]):
//! the byte layout of keys and values, the log and commit rows, frame and
//! record buffering and spills, bases under generations, the open-time
//! cleanup plan and the checks on everything read back live there once,
//! for both key-value backends. It deliberately does not know those bytes
//! or state machines beyond handing them to redb, nor what records,
//! frames, index records or checkpoints mean.
//!
//! **Invariants.** Every call into redb runs under the shield, and a
//! caller's visitor never runs under it. A flush and a commit are each one
//! durable (by default two-phase) transaction. The file never grows without
//! the new length being durable first. The directory's lock is held from
//! before the file is opened until redb has closed it.
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
//! - **Two-phase commit** by default ([`RedbOptions::two_phase_commit`]):
//!   a durable transaction syncs its pages, then writes and syncs its
//!   commit slot, so no crash leaves a slot naming pages that are not on
//!   disk, and redb reports damage to the newest commit as an error rather
//!   than falling back to the commit before (which it must do for a commit
//!   a crash may have torn, under one-phase commit). It costs a second
//!   sync per flush and commit (here 470 µs per flush instead of 270 µs);
//!   one-phase is an option, with the loss it allows stated below.
//! - **Quick repair is off**: redb's allocator state is saved at a clean
//!   close only, so a commit writes nothing more; the price is that opening
//!   after a crash lets redb walk the file to rebuild it.
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
//! past the last flushed LSN (spilled ones). What remains is exactly the
//! last commit (index, checkpoint and store position together: they share
//! one transaction) and a log holding every flushed record. A discard may
//! come back after a crash (the contract allows keeping records). A commit
//! a crash interrupted is rolled back by redb to the commit before.
//!
//! **A power cut while a commit grows the file** (issue 19): redb grows the
//! file (`set_len`) and later writes a header naming the new length; the
//! kernel may write that header back before the size change is durable,
//! and redb 3.1 then refuses the file at open. [`file::DurableFile`] syncs
//! every growth before returning, so a header never names a length that is
//! not on disk; and a file already in that state (written by an earlier
//! build, or on a file system that lost the size anyway) is extended with
//! zeros to its header's length at open, which is what redb's recovery
//! needs ([`file`](mod@crate::file) documents the header's bytes and the bounds of that
//! repair).
//!
//! # Locking and failures
//!
//! [`RedbStorage::open`] claims its directory first
//! ([`fusee_storage_kv::store_dir`]), then takes the directory's `LOCK`
//! (an exclusive lock on the open file, so a second open in this process
//! is refused like one from another process), and holds it until redb has
//! closed the file: for as long as the storage or any part it gave out
//! lives. A second open meanwhile is
//! [`fusee_storage::StorageError::Locked`]. Within a storage a shard is
//! opened by one owner at a time
//! ([`fusee_storage::StorageError::AlreadyOpen`]). A failed flush latches
//! the log part; a failed commit latches the checkpoint and run-store
//! parts; after [`fusee_storage::Storage::close`] every call is `Closed`.
//! A real I/O error inside redb goes further: redb refuses every later
//! write transaction of the database, so all shards' flushes and commits
//! fail until the storage is reopened (never a silent success).
//!
//! Opening refuses, with the contract's named errors and before writing
//! anything in a directory that is not its store: an empty path, a file or
//! a directory of other files (`NotAStore`), another backend's store
//! (`WrongBackend`), another layout version in the marker or the format
//! table (`UnsupportedFormat`), no store with [`Create::Never`]
//! (`NotFound`), a damaged marker (`CorruptFile`). The database file
//! missing, emptied, cut short, not redb, of another program or damaged
//! beyond redb's repair is `CorruptFile` naming it: never a new, empty
//! database where the marker says a store was created.
//!
//! # Damage
//!
//! redb does not verify page checksums on reads, and has assertions and
//! slice indexing that a damaged page can trip. Every call into redb
//! therefore runs under a panic shield that turns such a panic into
//! [`fusee_storage::StorageError::Corrupt`] naming the shard (reads copy
//! their batches out under the shield and call the caller's visitor
//! outside it, so a visitor's own panic is never swallowed); the database
//! is also closed under the shield. With the layout's CRCs over keys and
//! values, every region of the file damaged (a byte flipped in the header,
//! either commit slot and every page in turn, pages zeroed, the file cut
//! short or deleted, the marker damaged) gives the exact data back or a
//! named error (`tests/damage.rs`, for a store closed cleanly and for one
//! whose process died).
//!
//! What redb cannot tell from a crash, and so opens as the commit before,
//! after an unclean shutdown only (a clean close saves redb's state and
//! needs no recovery):
//!
//! - with two-phase commit (the default): a flipped *god byte* (header byte
//!   9, outside every checksum), whose bit 0 names the newest commit slot;
//!   a crash between a commit's two syncs leaves the same bytes.
//! - with one-phase commit ([`RedbOptions::two_phase_commit`] `false`):
//!   damage to any page the newest commit wrote, or to its commit slot:
//!   redb sees a commit whose checksums fail, which is what a crash during
//!   that commit leaves.
//!
//! The shard's **log seal** ([`fusee_storage_kv::seal`], a file
//! `seal-NNNNNNNNNN` beside `fusee.redb`) turns the loss into an error when
//! it matters: a log flush the seal covers, lost that way, makes the
//! shard's open [`fusee_storage::StorageError::LostRecords`] (decided
//! before the open's cleanup transaction, so nothing is deleted or
//! overwritten; `tests/damage.rs` flips the god byte of a crashed, sealed
//! store). What stays undetected: a flush acknowledged after the last seal
//! (the engine seals 20 ms after the log goes idle and every second under
//! load: `fusee::Config::seal_after_idle`), and a lost commit that was not
//! a log flush (a checkpoint commit): the shard then opens at the commit
//! before, with every flushed record, as after a crash during that commit,
//! which recovery replays from the log.
//!

#![cfg_attr(docsrs, feature(doc_cfg))]
pub mod checkpoint;
mod error;
pub mod file;
pub mod layout;
pub mod log;
pub mod runs;
mod storage;
pub mod verify;

pub use checkpoint::RedbCheckpoint;
pub use error::RedbError;
pub use file::DurableFile;
pub use fusee_storage::identity::Create;
pub use log::RedbLog;
pub use runs::RedbRuns;
pub use storage::{BACKEND, COMMIT_CRASH_POINTS, FILE_NAME, RedbOptions, RedbShard, RedbStorage};

/// This backend's names for its parts and values in errors.
static NAMES: fusee_storage_kv::Names = fusee_storage_kv::names!("redb");
