//! The conformance suite: executable clauses of the storage contract that
//! every backend runs (feature `conformance`).
//!
//! A backend's test file implements [`Harness`] (open a fresh storage in a
//! temporary directory, reopen it, crash it, and optionally inject faults)
//! and calls [`crate::conformance_suite!`], which expands to one `#[test]`
//! per clause so a failure names its clause:
//!
//! ```
//! // tests/conformance.rs of a backend crate:
//! fusee_storage::conformance_suite!(memory, fusee_storage::conformance::MemoryHarness::new);
//! # fn main() {}
//! ```
//!
//! The backend crate enables the feature for its tests only:
//! `[dev-dependencies] fusee-storage = { workspace = true, features =
//! ["conformance"] }`.
//!
//! Each clause is also a public function generic over the harness, for
//! backends that want to call them some other way.
//!
//! A harness for a disk backend looks like this (here over the memory
//! backend, so it compiles):
//!
//! ```
//! use fusee_storage::conformance::{Capabilities, Harness};
//! use fusee_storage::{MemoryStorage, Storage};
//!
//! #[derive(Default)]
//! struct MyHarness; // would hold the temporary directory
//!
//! impl Harness for MyHarness {
//!     type S = MemoryStorage; // the backend's storage type
//!     fn capabilities(&self) -> Capabilities {
//!         // No fault injection: those clauses print SKIPPED.
//!         Capabilities::default()
//!     }
//!     fn open(&mut self) -> MemoryStorage {
//!         MemoryStorage::new() // create a temp dir, open the storage in it
//!     }
//!     fn reopen(&mut self, s: MemoryStorage) -> MemoryStorage {
//!         s.close().expect("close"); // then open the same directory again
//!         s.reopen()
//!     }
//!     fn crash(&mut self, s: MemoryStorage) -> MemoryStorage {
//!         s.crash() // drop without closing (or simulate power loss), reopen
//!     }
//! }
//!
//! fusee_storage::conformance_suite!(my_backend, MyHarness::default);
//! # fn main() {}
//! ```
//!
//! Clauses that need a capability the harness does not declare
//! ([`Capabilities`]) print `SKIPPED <clause>: <reason>` on stderr (bypassing
//! the test harness's output capture) and return, so a skip is always
//! visible in the test output rather than passing silently.
//!
//! # Environment
//!
//! - `FUSEE_CONFORMANCE_SCALE`: percentage applied to the heavy counts (the
//!   1,000,000-record base, the 100 reopens, the random sequences); default
//!   100, which meets the contract's numbers. Sizes of records and frames are
//!   never scaled.
//! - `FUSEE_CONFORMANCE_SEED`: seed of the random-sequence clause (default:
//!   derived from the clock, printed on failure).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use fusee_core::record::Lsn;

use crate::limits::{INDEX_RECORD, index_record_run};
use crate::{CheckpointStore, LogStore, MemoryStorage, Result, ShardParts, Storage};

mod index;
mod log;
mod model;
mod shards;
mod store;

pub use index::{commit_atomic, index_bad_input, index_base_streamed, index_delta};
pub use log::{
    log_discard_through, log_lsn_continuity, log_pipelined_flush, log_power_loss,
    log_prefix_after_crash, log_read_from_every_position, log_record_sizes, log_round_trip,
    log_too_large, log_unflushed_whole,
};
pub use model::model_random;
pub use shards::{
    calls_after_close, commit_failure_latches, flush_failure_latches, reopen_hundred,
    shard_open_twice, shards_sixteen,
};
pub use store::{
    store_bad_reference, store_crash, store_release, store_round_trip, store_too_large,
};

/// What a backend's harness can simulate beyond open, reopen and crash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// [`Harness::fail_next_flush`] and [`Harness::fail_next_commit`] work.
    pub fault_injection: bool,
    /// [`Harness::crash`] simulates power loss: writes not yet synced are
    /// dropped or torn, not kept by an operating system that survived.
    pub power_loss: bool,
    /// How many points inside a commit [`Harness::crash_in_commit`] can
    /// crash at (0: none; the atomicity clause then checks only crashes
    /// just before and just after a commit).
    pub commit_crash_points: u32,
}

/// Which ownership clauses a harness can run ([`Harness::lock_checks`]).
///
/// Both check the promise that the lock a storage takes lives as long as
/// the storage or any part it gave out: a storage dropped while a shard's
/// parts live must still refuse a second open with
/// [`crate::StorageError::Locked`], in this process and in another.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockChecks {
    /// [`Harness::open_again`] works: `lock_outlives_storage` runs.
    pub same_process: bool,
    /// [`Harness::location`] and [`Harness::open_at`] work, the latter in
    /// a child process too (the storage lives in files another process can
    /// open): `lock_outlives_storage_child` runs.
    pub child_process: bool,
}

/// How the suite drives a backend. Every method panics on failure (it runs
/// inside a test), except the second opens ([`Harness::open_again`],
/// [`Harness::open_at`]), whose errors are what the ownership clauses check.
///
/// The methods with default bodies are optional: a harness declares the
/// ones it implements through [`Harness::capabilities`] and
/// [`Harness::lock_checks`], and the clauses that need the others are
/// skipped (printed and counted as skipped).
pub trait Harness {
    /// The storage under test.
    type S: Storage;

    /// What the harness can simulate.
    fn capabilities(&self) -> Capabilities;

    /// A fresh, empty storage (in a new temporary directory for a disk
    /// backend).
    fn open(&mut self) -> Self::S;

    /// Closes `s` cleanly and opens the same storage again. The suite drops
    /// every part before calling it.
    fn reopen(&mut self, s: Self::S) -> Self::S;

    /// Crashes `s` (the process dies; for a harness that simulates power
    /// loss, everything not flushed or committed may vanish) and opens the
    /// same storage again. The suite drops every part first, so dropping a
    /// part must not make anything durable that a crash should lose (or the
    /// harness must simulate power loss underneath).
    fn crash(&mut self, s: Self::S) -> Self::S;

    /// Makes the next log flush of `shard` fail (only called when
    /// [`Capabilities::fault_injection`] is declared).
    fn fail_next_flush(&mut self, s: &Self::S, shard: u32) {
        let _ = (s, shard);
        panic!("fail_next_flush called on a harness without fault injection");
    }

    /// Makes the next commit of `shard` fail (only called when
    /// [`Capabilities::fault_injection`] is declared).
    fn fail_next_commit(&mut self, s: &Self::S, shard: u32) {
        let _ = (s, shard);
        panic!("fail_next_commit called on a harness without fault injection");
    }

    /// Makes the next commit of `shard` crash the process at internal point
    /// `step` (below [`Capabilities::commit_crash_points`]); the commit
    /// returns an error and the suite then calls [`Harness::crash`].
    fn crash_in_commit(&mut self, s: &Self::S, shard: u32, step: u32) {
        let _ = (s, shard, step);
        panic!("crash_in_commit called on a harness without commit crash points");
    }

    /// Which ownership clauses the harness supports. Default: none, so
    /// `lock_outlives_storage` and `lock_outlives_storage_child` are
    /// skipped (and counted as skipped).
    fn lock_checks(&self) -> LockChecks {
        LockChecks::default()
    }

    /// Opens the storage that the last [`Harness::open`],
    /// [`Harness::reopen`], [`Harness::crash`] or `open_again` returned a
    /// second time, with the backend's ordinary open, without closing
    /// anything first, and returns the backend's answer as it is: while
    /// that storage or any part it gave out is alive, the backend must
    /// refuse with [`crate::StorageError::Locked`]; once all are dropped, it must
    /// open with everything flushed and committed. Only called when
    /// [`LockChecks::same_process`] is declared.
    ///
    /// Default: [`Harness::open_at`] at [`Harness::location`], which is
    /// right for a storage that lives at a path; a harness whose storage
    /// is not reachable from another process (a simulated disk) declares
    /// only `same_process` and implements this instead.
    fn open_again(&mut self) -> Result<Self::S> {
        let path = self.location();
        self.open_at(&path)
    }

    /// Where the storage that the last [`Harness::open`],
    /// [`Harness::reopen`], [`Harness::crash`] or [`Harness::open_again`]
    /// returned lives: the directory (or file) [`Harness::open_at`] takes.
    /// Only called when [`LockChecks::child_process`] is declared (or by
    /// the default `open_again`).
    fn location(&self) -> PathBuf {
        panic!("location called on a harness that declares no LockChecks")
    }

    /// Opens the storage at `path` with the backend's ordinary open (what
    /// an embedder calls) and returns the backend's answer as it is. The
    /// suite calls it in a child process, on a harness fresh from the
    /// suite's factory, with a path [`Harness::location`] gave in the
    /// parent, and checks that a storage the parent holds (or whose parts
    /// it holds) is refused with [`crate::StorageError::Locked`] and one it let go
    /// of opens. So it must only open: create, clear or lock nothing else.
    fn open_at(&mut self, path: &Path) -> Result<Self::S> {
        let _ = path;
        panic!("open_at called on a harness that declares no LockChecks")
    }
}

/// The harness of the memory backend, which supports every capability.
#[derive(Debug, Default)]
pub struct MemoryHarness;

impl MemoryHarness {
    /// A harness (stateless: every [`Harness::open`] is a new storage).
    pub fn new() -> Self {
        Self
    }
}

impl Harness for MemoryHarness {
    type S = MemoryStorage;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fault_injection: true,
            power_loss: true,
            commit_crash_points: crate::memory::COMMIT_STEPS,
        }
    }

    fn open(&mut self) -> MemoryStorage {
        MemoryStorage::new()
    }

    fn reopen(&mut self, s: MemoryStorage) -> MemoryStorage {
        s.reopen()
    }

    fn crash(&mut self, s: MemoryStorage) -> MemoryStorage {
        s.crash()
    }

    fn fail_next_flush(&mut self, s: &MemoryStorage, shard: u32) {
        s.fail_next_flush(shard);
    }

    fn fail_next_commit(&mut self, s: &MemoryStorage, shard: u32) {
        s.fail_next_commit(shard);
    }

    fn crash_in_commit(&mut self, s: &MemoryStorage, shard: u32, step: u32) {
        s.crash_in_commit(shard, step);
    }
}

/// Expands to one `#[test]` per conformance clause, inside a module named
/// `$name`, each running the clause on a harness made by `$factory()`.
///
/// ```
/// use fusee_storage::conformance::MemoryHarness;
/// fusee_storage::conformance_suite!(my_backend, || MemoryHarness::new());
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($name:ident, $factory:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $crate::conformance_suite!(@tests $factory;
                log_round_trip, log_lsn_continuity, log_prefix_after_crash,
                log_unflushed_whole, log_discard_through, log_read_from_every_position,
                log_record_sizes, log_too_large, log_power_loss, log_pipelined_flush,
                store_round_trip, store_crash, store_release, store_too_large,
                store_bad_reference,
                index_delta, index_base_streamed, index_bad_input, commit_atomic,
                flush_failure_latches, commit_failure_latches, shards_sixteen,
                shard_open_twice, reopen_hundred, calls_after_close, model_random);
        }
    };
    (@tests $factory:expr; $($clause:ident),* $(,)?) => {
        /// The clauses this module runs (compare with
        /// `fusee_storage::conformance::CLAUSES`).
        #[allow(dead_code)]
        pub const CLAUSES: &[&str] = &[$(stringify!($clause)),*];
        $(
            #[test]
            fn $clause() {
                let mut harness = ($factory)();
                $crate::conformance::$clause(&mut harness);
            }
        )*
    };
}

/// Names of every clause, in the order the macro expands them.
pub const CLAUSES: &[&str] = &[
    "log_round_trip",
    "log_lsn_continuity",
    "log_prefix_after_crash",
    "log_unflushed_whole",
    "log_discard_through",
    "log_read_from_every_position",
    "log_record_sizes",
    "log_too_large",
    "log_power_loss",
    "log_pipelined_flush",
    "store_round_trip",
    "store_crash",
    "store_release",
    "store_too_large",
    "store_bad_reference",
    "index_delta",
    "index_base_streamed",
    "index_bad_input",
    "commit_atomic",
    "flush_failure_latches",
    "commit_failure_latches",
    "shards_sixteen",
    "shard_open_twice",
    "reopen_hundred",
    "calls_after_close",
    "model_random",
];

// ---- helpers shared by the clauses ----

/// Prints why a clause was skipped, past the test harness's capture.
fn skip(clause: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {clause}: {reason}");
}

/// `n` scaled by `FUSEE_CONFORMANCE_SCALE` percent (at least 1).
fn scaled(n: usize) -> usize {
    let pct = std::env::var("FUSEE_CONFORMANCE_SCALE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(100);
    (n.saturating_mul(pct) / 100).max(1)
}

fn open<S: Storage>(s: &S, shard: u32) -> ShardParts<S> {
    s.open_shard(shard)
        .unwrap_or_else(|e| panic!("open_shard({shard}) failed: {e}"))
}

/// Deterministic bytes of record `lsn` in a sequence salted by `salt`:
/// lengths vary from 0 to 300 so batches mix empty and longer records.
fn record(lsn: Lsn, salt: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(lsn.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt);
    let len = rng.usize(0..=300);
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

/// Deterministic frame bytes of `len` bytes.
fn frame(len: usize, salt: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(salt ^ (len as u64).rotate_left(17));
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

/// An index record for `run` (state 1, other bytes from `tag`).
fn index_record(run: u64, tag: u64) -> [u8; INDEX_RECORD] {
    let mut r = [0u8; INDEX_RECORD];
    r[0..8].copy_from_slice(&tag.wrapping_mul(31).to_le_bytes());
    let word1 = (run & ((1 << 48) - 1)) | (1 << 48) | ((tag & 0x10) << 56);
    r[8..16].copy_from_slice(&word1.to_le_bytes());
    r[16..24].copy_from_slice(&tag.to_le_bytes());
    r[24..32].copy_from_slice(&(!tag).to_le_bytes());
    r
}

/// An index record that deletes `run`.
fn delete_record(run: u64) -> [u8; INDEX_RECORD] {
    let mut r = [0xEEu8; INDEX_RECORD];
    let word1 = (run & ((1 << 48) - 1)) | (u64::from(crate::DELETED) << 48);
    r[8..16].copy_from_slice(&word1.to_le_bytes());
    r
}

/// Every record after `after`, with the returned end.
/// Records with their LSNs.
type Records = Vec<(Lsn, Vec<u8>)>;

fn read_log<L: LogStore>(log: &mut L, after: Lsn) -> Result<(Records, Lsn)> {
    let mut out = Vec::new();
    let end = log.read(after, &mut |lsn, bytes| {
        out.push((lsn, bytes.to_vec()));
        Ok(())
    })?;
    Ok((out, end))
}

/// The committed index as a map by run, checking the chunking promises.
fn read_index<C: CheckpointStore>(c: &mut C) -> BTreeMap<u64, [u8; INDEX_RECORD]> {
    let mut map = BTreeMap::new();
    let mut visited = 0u64;
    let count = c
        .read_index(&mut |chunk| {
            assert_eq!(
                chunk.len() % INDEX_RECORD,
                0,
                "index chunk of {} bytes",
                chunk.len()
            );
            for r in chunk.chunks_exact(INDEX_RECORD) {
                let mut rec = [0u8; INDEX_RECORD];
                rec.copy_from_slice(r);
                let run = index_record_run(&rec);
                assert!(
                    map.insert(run, rec).is_none(),
                    "run {run} listed twice in the index"
                );
                visited += 1;
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("read_index failed: {e}"));
    assert_eq!(
        count, visited,
        "read_index returned a count other than it visited"
    );
    map
}

/// Concatenates index records.
fn concat(records: &[[u8; INDEX_RECORD]]) -> Vec<u8> {
    records.iter().flatten().copied().collect()
}
