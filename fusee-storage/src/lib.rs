//! The Fusee storage contract: what backend authors implement and what the
//! engine calls.
//!
//! One [`Storage`] holds many shards. [`Storage::open_shard`] gives a
//! shard's three parts ([`ShardParts`]), each `Send` so the host can hand
//! the log to a flusher thread while the shard thread reads frames:
//!
//! | part | trait | holds |
//! |---|---|---|
//! | log | [`LogStore`] | records (canonical bytes) in LSN order, consecutive from 1 |
//! | run store | [`RunStore`] | frames (journals, deltas, summaries) addressed by `BlobRef` |
//! | checkpoint | [`CheckpointStore`] | the index (32-byte records) and the checkpoint bytes, committed together |
//!
//! Methods are plain blocking calls; pipelining and group commit are the
//! engine's job. The contract knows the core's formats only as opaque bytes,
//! except the run ID inside an index record ([`index_record_run`]).
//!
//! The crate also holds the reference backend, [`MemoryStorage`], and (with
//! feature `conformance`) the suite every backend runs, `conformance`.
//!
//! # The contract
//!
//! **Log.** [`LogStore::append`] buffers record `last_lsn() + 1` (any other
//! LSN is [`StorageError::LsnGap`]; more than [`MAX_RECORD`] bytes is
//! [`StorageError::TooLarge`]; a failed append consumes no LSN).
//! [`LogStore::flush`] makes everything appended durable and returns the
//! durable LSN; one flush is one batch. [`LogStore::begin_flush`] and
//! [`LogStore::finish_flush`] split a flush so its I/O ([`FlushTicket::run`])
//! can run on another thread while the next batch is appended: records are
//! reported durable only when the ticket comes back, at most
//! [`LogStore::flushes_in_flight_max`] tickets are outstanding (1 unless
//! the backend overlaps flushes), they are finished in the order they
//! began, and a failed ticket latches the log like a failed flush.
//! [`LogStore::read`] visits the records
//! after an LSN in order, flushed or not, with their exact bytes, and returns
//! the last LSN; records discarded are [`StorageError::Trimmed`] naming the
//! first kept. [`LogStore::discard_through`] lets the backend drop records a
//! committed checkpoint covers (it may keep some). After any crash, reopening
//! yields a **prefix** of what was appended that contains every flushed
//! record: no hole, no changed byte, no record that was not appended, and
//! the last LSN survives even if every record was discarded. A torn,
//! never-acknowledged tail is cut silently; damage inside acknowledged
//! records is [`StorageError::Corrupt`], never a silent truncation.
//! [`LogStore::begin_seal`] and [`LogStore::finish_seal`] (or
//! [`LogStore::seal`]) record, apart from the log, that every record
//! through the durable LSN is durable ([`seal`]): an open whose log ends
//! before the sealed LSN is [`StorageError::LostRecords`], so damage the
//! log cannot tell from a torn tail still gives an error.
//!
//! **Run store.** [`RunStore::append`] returns a `BlobRef` (offset below
//! 2^48, `len` = the frame's length); [`RunStore::read`] returns the exact
//! bytes or an error, never other bytes. Frames become durable with the next
//! commit. [`RunStore::release`] frees a frame, but never durably before the
//! next commit (the committed index may still name it). A backend that must
//! move frames to reclaim space does so in [`RunStore::compact`] and reports
//! each move; old and new addresses stay readable until the next commit.
//! [`RunStore::prefetch`] is a hint that some frames are read next (a
//! backend whose reads are round trips fetches them together); it never
//! changes what a read returns, and the default ignores it.
//!
//! **Checkpoint and index.** The index is a set of [`INDEX_RECORD`]-byte
//! records keyed by run. [`CheckpointStore::commit`] takes the run store,
//! makes it durable and records its position, then makes the index change
//! ([`IndexChange::Delta`]: upserts and deletes; or [`IndexChange::Base`]:
//! a whole new set streamed beforehand with [`CheckpointStore::begin_base`]
//! and [`CheckpointStore::base_chunk`]) and the checkpoint bytes durable
//! **atomically**. Opening a shard yields the index
//! ([`CheckpointStore::read_index`]) and checkpoint ([`Recovered`]) of the
//! same commit, with the run store rolled back to that commit's position.
//!
//! **Failures.** A part whose flush or commit failed is latched
//! ([`StorageError::Latched`]) until the shard is reopened: data a failed
//! `fsync` covered is never treated as safe. Nothing panics on bad bytes.
//! After [`Storage::close`], every call is [`StorageError::Closed`]. A shard
//! is opened by one owner at a time ([`StorageError::AlreadyOpen`]).
//!
//! **Recovery order** (the engine's side): open the shard, load its
//! checkpoint (which names the LSN it covers) and its index, replay the log
//! after that LSN; discard the log only through a committed checkpoint.
//!
//! ## Why this shape
//!
//! - `commit` takes `&mut` run store rather than the engine flushing the
//!   store and passing a position: the order "store durable, then index and
//!   checkpoint" is the backend's to keep, and the type system guarantees the
//!   store committed is the shard's own (`CheckpointStore::Runs`).
//! - The recovered index is streamed ([`CheckpointStore::read_index`])
//!   rather than returned as a vector: a million parked runs are 32 MB, and a
//!   backend can hand out chunks straight from its file or iterator.
//! - `read` sees unflushed records too, so the log is one sequence whose
//!   durability is a separate question ([`LogStore::durable_lsn`]).
//!
//! # Writing a backend
//!
//! 1. Implement [`Storage`] and the three part traits. Each method's
//!    documentation says what it promises; the table says where backends
//!    usually go wrong.
//!
//!    | method | the promise that matters |
//!    |---|---|
//!    | [`LogStore::append`] | refuse gaps and repeats with `LsnGap`, oversize with `TooLarge`, without consuming the LSN |
//!    | [`LogStore::flush`] | durable before it returns; on failure latch, never retry as success |
//!    | [`LogStore::read`] | exact bytes, in order, no hole; `Trimmed { first_kept }`; `BeyondEnd` |
//!    | [`LogStore::discard_through`] | never beyond the durable LSN; keep the last LSN across reopen |
//!    | [`LogStore::begin_seal`] / [`LogStore::finish_seal`] | record the durable LSN apart from the log ([`seal`]); an open whose log ends before it is `LostRecords`, checked before the open writes anything |
//!    | [`RunStore::append`] / [`RunStore::read`] | exact bytes or an error, for 0 B to [`MAX_FRAME`] |
//!    | [`RunStore::read`] / [`RunStore::release`] | a reference that names no frame (never appended, wrong length, between frames) is `UnknownBlob` |
//!    | [`RunStore::release`] | not durable before the next commit |
//!    | [`RunStore::compact`] | report every move; both addresses readable until the next commit |
//!    | [`RunStore::prefetch`] | reads afterwards return what they would have (a reference to no frame in it is no error) |
//!    | [`CheckpointStore::commit`] | store durable first; then index + checkpoint + store position atomically |
//!    | [`CheckpointStore::commit`] / [`CheckpointStore::base_chunk`] | partial index records, a base never begun: `Misuse`, changing nothing |
//!    | [`Storage::open_shard`] | roll the store back to the last commit; cut a torn log tail, report damage before it; `AlreadyOpen` while any one part lives |
//!    | opening the storage, dropping it | the lock lives as long as the storage or any part it gave out; a second open meanwhile, in this process or another, is `Locked` |
//!    | [`Storage::close`] | afterwards every call, on the storage and on every part, is `Closed` |
//!
//! 2. In the backend crate's tests, implement
//!    `fusee_storage::conformance::Harness` (open a fresh storage in a
//!    temporary directory, reopen it, crash it; declare what faults it can
//!    inject) and call `fusee_storage::conformance_suite!`. A backend that
//!    locks its storage also implements the harness's ownership methods:
//!    `lock_checks` declares which checks it supports, `location` says
//!    where the storage it opened last lives, `open_at` opens the storage
//!    at a path with the backend's ordinary open (the suite calls it in
//!    this process, and in a child process that re-runs the test binary),
//!    and `open_again` opens the last storage a second time when it is not
//!    reachable by path (a simulated disk). A harness that leaves them out
//!    still compiles: those clauses are skipped, and the suite's
//!    `skipped_clauses` test counts every skip. The suite checks
//!    the log's round trip, LSN continuity, the prefix property after a
//!    crash, whole-or-nothing unflushed records, repeated power losses (if
//!    the harness simulates them), discard, reads from every position,
//!    empty/64 MiB/oversized records; frames from 0 B to 16 MiB,
//!    their fate across crashes, release and bad references; index deltas, a
//!    1,000,000-record streamed base, bad index input, commit atomicity at
//!    every crash point the harness offers; latching after failed flushes
//!    and commits; 16 shards at once on threads; 100 reopens; calls after
//!    close; the lock outliving a dropped storage while its parts live, in
//!    this process and from a child process; the exact error variant for
//!    each misuse; and random operation sequences against
//!    [`MemoryStorage`]. Every failure says what was expected and what was
//!    found.
//!
//! 3. A skeleton: a backend whose parts wrap the memory backend's. A real
//!    backend replaces each delegation with its own I/O, keeping the
//!    comments' promises.
//!
//! ```
//! use fusee_core::record::Lsn;
//! use fusee_core::shard::BlobRef;
//! use fusee_storage::memory::{MemoryCheckpoint, MemoryLog, MemoryRuns};
//! use fusee_storage::{
//!     CheckpointStore, Committed, IndexChange, LogStore, MemoryStorage, Result, RunStore,
//!     ShardParts, Storage,
//! };
//!
//! /// The storage: owns whatever all shards share (a directory, a DB handle).
//! struct MyStorage(MemoryStorage);
//! struct MyLog(MemoryLog);
//! struct MyRuns(MemoryRuns);
//! struct MyCheckpoint(MemoryCheckpoint);
//!
//! impl Storage for MyStorage {
//!     type Log = MyLog;
//!     type Runs = MyRuns;
//!     type Checkpoint = MyCheckpoint;
//!
//!     fn open_shard(&self, shard: u32) -> Result<ShardParts<Self>> {
//!         // Lock the shard (AlreadyOpen), read the newest valid commit,
//!         // roll the store back to its position, scan the log's tail.
//!         let p = self.0.open_shard(shard)?;
//!         Ok(ShardParts {
//!             log: MyLog(p.log),
//!             runs: MyRuns(p.runs),
//!             checkpoint: MyCheckpoint(p.checkpoint),
//!             recovered: p.recovered,
//!         })
//!     }
//!     fn shards(&self) -> Result<Vec<u32>> {
//!         self.0.shards()
//!     }
//!     fn close(&self) -> Result<()> {
//!         self.0.close()
//!     }
//! }
//!
//! impl LogStore for MyLog {
//!     fn append(&mut self, lsn: Lsn, record: &[u8]) -> Result<()> {
//!         // Check the LSN and the size before buffering anything.
//!         self.0.append(lsn, record)
//!     }
//!     fn flush(&mut self) -> Result<Lsn> {
//!         // write + fdatasync; on error latch the part before returning.
//!         self.0.flush()
//!     }
//!     fn read(&mut self, after: Lsn, visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>) -> Result<Lsn> {
//!         self.0.read(after, visit)
//!     }
//!     fn discard_through(&mut self, lsn: Lsn) -> Result<()> {
//!         self.0.discard_through(lsn)
//!     }
//!     fn first_lsn(&self) -> Lsn {
//!         self.0.first_lsn()
//!     }
//!     fn last_lsn(&self) -> Lsn {
//!         self.0.last_lsn()
//!     }
//!     fn durable_lsn(&self) -> Lsn {
//!         self.0.durable_lsn()
//!     }
//! }
//!
//! impl RunStore for MyRuns {
//!     fn append(&mut self, frame: &[u8]) -> Result<BlobRef> {
//!         self.0.append(frame)
//!     }
//!     fn read(&mut self, blob: BlobRef, out: &mut Vec<u8>) -> Result<()> {
//!         // Verify a checksum: return the exact bytes or an error.
//!         self.0.read(blob, out)
//!     }
//!     fn release(&mut self, blob: BlobRef) -> Result<()> {
//!         // Remember it; delete only inside the next commit.
//!         self.0.release(blob)
//!     }
//!     fn compact(&mut self, moved: &mut dyn FnMut(BlobRef, BlobRef)) -> Result<u64> {
//!         self.0.compact(moved)
//!     }
//!     fn position(&self) -> u64 {
//!         self.0.position()
//!     }
//! }
//!
//! impl CheckpointStore for MyCheckpoint {
//!     type Runs = MyRuns;
//!     fn read_index(&mut self, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64> {
//!         self.0.read_index(visit)
//!     }
//!     fn begin_base(&mut self) -> Result<()> {
//!         self.0.begin_base()
//!     }
//!     fn base_chunk(&mut self, records: &[u8]) -> Result<()> {
//!         self.0.base_chunk(records)
//!     }
//!     fn commit(&mut self, runs: &mut MyRuns, change: IndexChange<'_>, checkpoint: &[u8]) -> Result<Committed> {
//!         // 1. make `runs` durable and note its position;
//!         // 2. write index change + checkpoint + position in one atomic step
//!         //    (one synced WriteBatch / transaction / alternating slot).
//!         self.0.commit(&mut runs.0, change, checkpoint)
//!     }
//! }
//!
//! let storage = MyStorage(MemoryStorage::new());
//! let mut p = storage.open_shard(0)?;
//! p.log.append(1, b"record")?;
//! assert_eq!(p.log.flush()?, 1);
//! let blob = p.runs.append(b"journal")?;
//! p.checkpoint.commit(&mut p.runs, IndexChange::Delta(&[]), b"checkpoint")?;
//! let mut out = Vec::new();
//! p.runs.read(blob, &mut out)?;
//! assert_eq!(out, b"journal");
//! # Ok::<(), fusee_storage::StorageError>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod contract;
pub mod dirs;
mod error;
pub mod identity;
mod limits;
pub mod memory;
pub mod seal;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use contract::{
    CheckpointStore, Committed, FlushTicket, FlushWork, IndexChange, LogStore, Recovered, RunStore,
    SealTicket, ShardParts, Storage,
};
pub use error::{Result, StorageError};
/// Where a run-store frame is: the address every [`RunStore`] call takes.
pub use fusee_core::shard::BlobRef;
pub use limits::{
    DELETED, INDEX_RECORD, MAX_FRAME, MAX_OFFSET, MAX_RECORD, MAX_SEQ, NO_LSN, check_frame_len,
    check_log_append, index_record_run, index_record_state, index_records,
};
pub use memory::MemoryStorage;
