//! What Fusee's two ordered key-value backends, `fusee-storage-redb` and
//! `fusee-storage-rocksdb`, share: everything about storing the storage
//! contract in sorted key-value tables that does not depend on the engine.
//!
//! **Owns:**
//! - the byte layout of every key and value, documented byte by byte in
//!   [`layout`] (key codec, CRC-32 value framing, format marker, the log
//!   and commit rows);
//! - the parts' logic, written once and generic over a small engine trait:
//!   [`KvLog`] (frame buffering, spill, flush, reads, discards) over
//!   [`LogEngine`], [`KvRuns`] (frame buffer, spill, releases) over
//!   [`FrameEngine`], [`KvCheckpoint`] (bases under generations, caller
//!   checks, latching, the index read's checks) over [`IndexEngine`];
//! - opening a shard: decoding its rows and the cleanup plan
//!   ([`ShardState`], [`Cleanup`]), building its parts ([`shard_parts`]);
//! - what a storage shares with its parts whatever the engine: the database
//!   until closed, one owner per shard and the fault switches ([`Shared`],
//!   [`ShardHandle`], [`OpenShards`], [`FaultSwitches`]);
//! - each shard's log seal ([`seal`]): a file beside the database that
//!   records how far the log was durable, checked when the shard opens
//!   ([`ShardHandle::check_seal`]), so a database that opens as it was
//!   before its newest durable writes is an error, not less data;
//! - the storage's directory ([`store_dir`]): the identity marker checked
//!   before anything is written, the exclusive `LOCK` taken before the
//!   engine opens and held ([`store_dir::Held`]) as long as the database,
//!   which is as long as the storage or any part it gave out lives, and
//!   the engine's database created under a staging name and renamed into
//!   place whole, so that a missing database under a marker is damage, not
//!   a new store;
//! - with feature `testing`, test bodies both backends run, the damage
//!   matrix (`testing::damage`) and their conformance harness (`testing`,
//!   `testing::KvHarness`).
//!
//! A backend implements [`ShardEngine`], [`LogEngine`], [`FrameEngine`] and
//! [`IndexEngine`] for its shard handle, and its parts are then
//! `KvLog<Handle>`, `KvRuns<Handle>` and `KvCheckpoint<Handle>`.
//!
//! **Invariants.** A flush or a commit is one atomic durable engine write;
//! spills, streamed bases and discards are writes that need not be
//! durable, and the log row counts flushed records only, so the open-time
//! cleanup leaves exactly the last commit and the flushed log. Every stored
//! value carries a CRC-32 over its key and its bytes. One storage holds the
//! directory's lock from before its engine opens until the engine has
//! closed, however long its parts outlive it.
//!
//! **Deliberately does not know** any engine: how a read, a write batch or
//! transaction, durability or opening work, what an engine's errors are,
//! how its tables are named or created, what it keeps inside its database
//! file or directory, or how it fails on a damaged file. Those stay in the
//! backend crates, which implement the three engine traits and map the
//! five tables of [`layout`] onto their own namespaces.
//!
//! **Damage.** Every stored value's CRC covers its key, so a value read
//! under another key than it was written under (a damaged key, a row moved
//! by damage) fails like a changed byte: a frame can no longer be read
//! under another number, nor a record under another LSN. Every meta row is
//! checked when the storage opens ([`check_meta_row`]), so a commit or log
//! row whose key was damaged fails the open rather than leave its shard
//! looking never committed or new; a shard's log row missing beside its
//! other rows is `Corrupt` at the shard's open ([`ShardState::check_keys`]);
//! a record missing inside the log is `Corrupt` at the read; an index of
//! another size than its commit row says is `Corrupt`. What this layer
//! cannot see: a run-store frame whose row is gone entirely (an engine
//! dropping rows it holds) reads as [`fusee_storage::StorageError::UnknownBlob`],
//! like a released frame, since the layout keeps no list of live frames;
//! and a shard whose every row is gone looks never opened. What each engine
//! detects below this layer is in its crate's documentation.
//!
//! **Cost.** The traits are static (generic parameters, no `dyn` on the
//! write path); a record or frame is framed once by [`layout::with_crc`] and
//! handed to the engine by reference, never copied again before the engine
//! writes it. Reads pass each stored value to a visitor closure that checks
//! it (one indirect call per value).

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod checkpoint;
mod handle;
pub mod layout;
pub mod log;
mod open;
pub mod runs;
pub mod seal;
pub mod store_dir;
#[cfg(feature = "testing")]
pub mod testing;
pub mod verify;

pub use checkpoint::{Base, IndexEngine, IndexWrite, KvCheckpoint};
pub use handle::{ShardHandle, Shared};
pub use layout::{CommitRow, LogRow};
pub use log::{KvLog, LogEngine};
pub use open::{
    COMMIT_CRASH_POINTS, Cleanup, FaultSwitches, OpenShards, ShardState, check_format_row,
    check_meta_row, injected, lock, shard_parts,
};
pub use runs::{FrameEngine, KvRuns};
pub use seal::{SealSlot, seal_path};

/// What every engine trait needs: which shard, and whether the storage is
/// still open. A backend implements it once for its shard handle.
pub trait ShardEngine: Send {
    /// The shard.
    fn shard(&self) -> u32;

    /// `Ok` while the storage is open, `Closed { what }` after it closed.
    fn check_open(&self, what: &'static str) -> fusee_storage::Result<()>;
}

/// The names a backend gives its parts and its stored values in errors
/// (`Closed`, `Latched` and `Corrupt` carry them). Build one with
/// [`names!`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Names {
    /// The log part.
    pub log: &'static str,
    /// The run-store part.
    pub runs: &'static str,
    /// The checkpoint part.
    pub checkpoint: &'static str,
    /// A shard's log row (`at` is the shard).
    pub log_row: &'static str,
    /// A shard's commit row (`at` is the shard).
    pub commit_row: &'static str,
    /// A meta row of a shard under a tag that is neither the log row's nor
    /// the commit row's: a damaged key (`at` is the shard).
    pub meta_row: &'static str,
    /// A meta row whose key is not a meta key (`at` is the key's length).
    pub meta_key: &'static str,
    /// A log record (`at` is its LSN).
    pub log_record: &'static str,
    /// A log record missing from the table (`at` is its LSN).
    pub missing_record: &'static str,
    /// A run-store frame (`at` is its number).
    pub frame: &'static str,
    /// An index record (`at` is its position in the index).
    pub index_record: &'static str,
    /// An index record stored under another run's key (`at` as above).
    pub index_key: &'static str,
    /// An index whose size differs from the commit row's (`at` is the shard).
    pub index_count: &'static str,
    /// An index change that deletes more records than the index holds (`at`
    /// is the shard).
    pub index_miscount: &'static str,
}

/// The [`Names`] of a backend, every one prefixed with the literal
/// `$backend` (e.g. `names!("redb")` names the log part `"redb log"`).
#[macro_export]
macro_rules! names {
    ($backend:literal) => {
        $crate::Names {
            log: concat!($backend, " log"),
            runs: concat!($backend, " run store"),
            checkpoint: concat!($backend, " checkpoint"),
            log_row: concat!($backend, " log row of shard"),
            commit_row: concat!($backend, " commit row of shard"),
            meta_row: concat!($backend, " meta row under an unknown tag, shard"),
            meta_key: concat!(
                $backend,
                " meta row under a key of the wrong length, length"
            ),
            log_record: concat!($backend, " log record at LSN"),
            missing_record: concat!($backend, " log: missing record at LSN"),
            frame: concat!($backend, " run-store frame number"),
            index_record: concat!($backend, " index record number"),
            index_key: concat!(
                $backend,
                " index: record under another run's key, at record"
            ),
            index_count: concat!(
                $backend,
                " index: record count differs from the commit row of shard"
            ),
            index_miscount: concat!($backend, " index: record count of shard"),
        }
    };
}
