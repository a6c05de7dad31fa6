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
//! The backend crate depends on the contract, and enables the suite for its
//! tests only:
//!
//! ```toml
//! [dependencies]
//! fusee-storage = "0.1"
//!
//! [dev-dependencies]
//! fusee-storage = { version = "0.1", features = ["conformance"] }
//! ```
//!
//! (Inside this workspace the crates write `workspace = true` instead of
//! the version.)
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
//!     // A storage that lives at a path also declares the lock checks, says
//!     // where the last storage lives, and opens one there with the
//!     // backend's ordinary open (the suite calls it in this process, and
//!     // in a child process that re-runs the test binary):
//!     //
//!     // fn lock_checks(&self) -> LockChecks {
//!     //     LockChecks { same_process: true, child_process: true }
//!     // }
//!     // fn location(&self) -> PathBuf { self.dir.clone() }
//!     // fn open_at(&mut self, path: &Path) -> Result<MyStorage> {
//!     //     MyStorage::open(path, MyOptions::default())
//!     // }
//! }
//!
//! fusee_storage::conformance_suite!(my_backend, MyHarness::default);
//! # fn main() {}
//! ```
//!
//! # Skips
//!
//! Clauses that need something the harness does not declare
//! ([`Capabilities`], [`LockChecks`]) print `SKIPPED <clause>: <reason>`
//! (or `SKIPPED part of <clause> (<part>): <reason>`) on stderr, bypassing
//! the test harness's output capture, and return, so a skip is always
//! visible in the test output rather than passing silently. What each
//! clause needs is written in one place ([`needs`]); the macro also expands
//! a test `skipped_clauses` that prints, from the harness's declarations
//! alone (so whatever order the tests run in),
//! `conformance: N of M clauses skipped for <suite>: a, b, c`.
//!
//! # Failures
//!
//! Every failure names its clause, the promise or operation checked, what
//! was expected and what was found, e.g. `calls_after_close: open_shard(1)
//! after close: expected Err(Closed); found Ok(())`.
//!
//! # Ownership, and the child process
//!
//! [`lock_outlives_storage`] and [`lock_outlives_storage_child`] check that
//! a storage's lock lives as long as the storage or any part it gave out.
//! The second re-runs the test binary (`std::env::current_exe()`) as a
//! child process, running only its own test (`--exact <test> --nocapture
//! --test-threads 1`) with `FUSEE_CONFORMANCE_LOCK_CHILD` naming the
//! storage's location; seeing that variable, the test builds its harness,
//! calls [`Harness::open_at`], prints its verdict and returns. The macro
//! names the test from `module_path!()`, so it works from any test file;
//! a test binary must therefore use the standard test harness.
//!
//! # Environment
//!
//! - `FUSEE_CONFORMANCE_SCALE`: percentage applied to the heavy counts (the
//!   1,000,000-record base, the 100 reopens, the random sequences); default
//!   100, which meets the contract's numbers. Sizes of records and frames are
//!   never scaled.
//! - `FUSEE_CONFORMANCE_SEED`: seed of the random-sequence clause (default:
//!   derived from the clock, printed on failure).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fusee_core::record::Lsn;

use crate::limits::{INDEX_RECORD, index_record_run};
use crate::{CheckpointStore, LogStore, MemoryStorage, Result, ShardParts, Storage};

mod check;
mod index;
mod lease;
mod lock;
mod log;
mod model;
mod shards;
mod store;

use check::{Index, check, check_eq, fail, must};

pub use lease::{
    LeaseChecks, failover_keeps_acknowledged, lease_connection_killed_mid_flush,
    lease_second_owner_refused, lease_takeover_after_death, lease_takeover_fences,
};
pub use lock::{lock_outlives_storage, lock_outlives_storage_child};

pub use index::{commit_atomic, index_bad_input, index_base_streamed, index_delta};
pub use log::{
    log_discard_through, log_flushes_overlap, log_lsn_continuity, log_pipelined_flush,
    log_power_loss, log_prefix_after_crash, log_read_from_every_position, log_record_sizes,
    log_round_trip, log_seal, log_too_large, log_unflushed_whole,
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
    /// The backend's logs take more than one flush ticket at once
    /// ([`crate::LogStore::flushes_in_flight_max`] above 1):
    /// [`log_flushes_overlap`] runs (and fails if they do not).
    pub overlapping_flushes: bool,
}

/// Which ownership clauses a harness can run ([`Harness::lock_checks`]).
///
/// Both check the promise that the lock a storage takes lives as long as
/// the storage or any part it gave out: a storage dropped while a shard's
/// parts live must still refuse a second open with
/// [`crate::StorageError::Locked`], in this process and in another.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockChecks {
    /// [`Harness::open_again`] works: [`lock_outlives_storage`] runs.
    pub same_process: bool,
    /// [`Harness::location`] and [`Harness::open_at`] work, the latter in
    /// a child process too (the storage lives in files another process can
    /// open): [`lock_outlives_storage_child`] runs.
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
    /// [`lock_outlives_storage`] and [`lock_outlives_storage_child`] are
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

    // ---- shared ownership (the `lease` clauses) ----

    /// Which lease clauses the harness supports. Default: none, so the
    /// `lease_*` and `failover_*` clauses are skipped (and counted as
    /// skipped).
    fn lease_checks(&self) -> LeaseChecks {
        LeaseChecks::default()
    }

    /// Opens the store that the last [`Harness::open`], [`Harness::reopen`]
    /// or [`Harness::crash`] returned as another owner (another process's
    /// storage on the same store), with the backend's ordinary open. Only
    /// called when [`LeaseChecks::leases`] is declared.
    fn open_other_owner(&mut self) -> Result<Self::S> {
        panic!("open_other_owner called on a harness that declares no LeaseChecks::leases")
    }

    /// How long a lease of the storages this harness opens lives without
    /// renewal. Only called when [`LeaseChecks::leases`] is declared.
    fn lease_time(&self) -> Duration {
        panic!("lease_time called on a harness that declares no LeaseChecks::leases")
    }

    /// Makes `s` stop renewing its leases, as a process that hangs would,
    /// while its parts stay usable (and so stale once another owner takes
    /// their shards). Only called when [`LeaseChecks::leases`] is declared.
    fn pause_renewal(&mut self, s: &Self::S) {
        let _ = s;
        panic!("pause_renewal called on a harness that declares no LeaseChecks::leases")
    }

    /// Ends `s` as its process dying would: nothing released, nothing
    /// renewed. Only called when [`LeaseChecks::leases`] is declared.
    fn die(&mut self, s: Self::S) {
        let _ = s;
        panic!("die called on a harness that declares no LeaseChecks::leases")
    }

    /// Runs `flush` (a flush's I/O on `shard` of `s`) while the connection
    /// it writes on is killed in the middle of its statement, and returns
    /// what `flush` returned. Only called when
    /// [`LeaseChecks::connection_kill`] is declared.
    fn kill_connection_during(
        &mut self,
        s: &Self::S,
        shard: u32,
        flush: &mut dyn FnMut() -> bool,
    ) -> bool {
        let _ = (s, shard, flush);
        panic!(
            "kill_connection_during called on a harness that declares no LeaseChecks::connection_kill"
        )
    }

    /// A fresh, empty storage on a server with a synchronous standby that
    /// [`Harness::failover`] can promote. Only called when
    /// [`LeaseChecks::failover`] is declared.
    fn open_replicated(&mut self) -> Self::S {
        panic!("open_replicated called on a harness that declares no LeaseChecks::failover")
    }

    /// Stops the server under `s` hard (no shutdown checkpoint), promotes
    /// its most advanced synchronous standby, and opens the storage on it.
    /// The suite drops every part first. Only called when
    /// [`LeaseChecks::failover`] is declared.
    fn failover(&mut self, s: Self::S) -> Self::S {
        let _ = s;
        panic!("failover called on a harness that declares no LeaseChecks::failover")
    }
}

/// The harness of the memory backend, which supports every capability but
/// no [`LockChecks`]: a [`MemoryStorage`] has no lock and no location where
/// a second open (in this process or another) could find it, so the
/// ownership clauses are skipped (and counted as skipped).
#[derive(Debug, Default)]
pub struct MemoryHarness {
    /// Storages split their flushes and take two tickets at once.
    overlapping: bool,
}

impl MemoryHarness {
    /// A harness (stateless: every [`Harness::open`] is a new storage).
    pub fn new() -> Self {
        Self::default()
    }

    /// A harness whose storages split every flush for real
    /// ([`MemoryStorage::split_flushes`]) and let each log have two tickets
    /// out ([`MemoryStorage::overlap_flushes`]), declaring
    /// [`Capabilities::overlapping_flushes`]: the suite's second memory
    /// run, so [`log_flushes_overlap`] has a backend besides PostgreSQL.
    pub fn overlapping() -> Self {
        Self { overlapping: true }
    }
}

impl Harness for MemoryHarness {
    type S = MemoryStorage;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fault_injection: true,
            power_loss: true,
            commit_crash_points: crate::memory::COMMIT_STEPS,
            overlapping_flushes: self.overlapping,
        }
    }

    fn open(&mut self) -> MemoryStorage {
        let s = MemoryStorage::new();
        if self.overlapping {
            s.split_flushes(true);
            s.overlap_flushes(2);
        }
        s
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
/// `$name`, each running the clause on a harness made by `$factory()`, and
/// a test `skipped_clauses` that prints how many clauses the harness's
/// declarations skip, and which.
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
                log_flushes_overlap, log_seal, store_round_trip, store_crash, store_release, store_too_large,
                store_bad_reference,
                index_delta, index_base_streamed, index_bad_input, commit_atomic,
                flush_failure_latches, commit_failure_latches, shards_sixteen,
                shard_open_twice, reopen_hundred, calls_after_close,
                lock_outlives_storage, model_random,
                lease_second_owner_refused, lease_takeover_fences, lease_takeover_after_death,
                lease_connection_killed_mid_flush, failover_keeps_acknowledged;
                lock_outlives_storage_child);
        }
    };
    (@tests $factory:expr; $($clause:ident),* ; $($child:ident),*) => {
        /// The clauses this module runs (compare with
        /// `fusee_storage::conformance::CLAUSES`).
        #[allow(dead_code)]
        pub const CLAUSES: &[&str] = &[$(stringify!($clause),)* $(stringify!($child)),*];
        $(
            #[test]
            fn $clause() {
                let mut harness = ($factory)();
                $crate::conformance::$clause(&mut harness);
            }
        )*
        // Clauses that run this test binary again as a child process: they
        // are told their own test's name, which the child runs alone.
        $(
            #[test]
            fn $child() {
                let mut harness = ($factory)();
                let test = $crate::conformance::test_name(module_path!(), stringify!($child));
                $crate::conformance::$child(&mut harness, &test);
            }
        )*
        #[test]
        fn skipped_clauses() {
            let harness = ($factory)();
            $crate::conformance::report_skipped(&harness, module_path!());
        }
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
    "log_flushes_overlap",
    "log_seal",
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
    "lock_outlives_storage",
    "model_random",
    "lease_second_owner_refused",
    "lease_takeover_fences",
    "lease_takeover_after_death",
    "lease_connection_killed_mid_flush",
    "failover_keeps_acknowledged",
    "lock_outlives_storage_child",
];

// ---- skips ----

/// A clause, or a part of one, that a harness cannot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Skip {
    /// The clause.
    pub clause: &'static str,
    /// The part skipped (the rest of the clause runs), or `None` when the
    /// whole clause is skipped.
    pub part: Option<&'static str>,
    /// What the harness does not declare.
    pub reason: &'static str,
}

/// One row of [`NEEDS`].
struct Need {
    clauses: &'static [&'static str],
    /// The part skipped without it (`None`: the whole clause).
    part: Option<&'static str>,
    /// Whether a harness with these declarations can run it.
    met: fn(Capabilities, LockChecks) -> bool,
    reason: &'static str,
}

/// What clauses need beyond open, reopen and crash: the one place both the
/// clauses (to skip) and [`skipped`] (to count) read.
const NEEDS: &[Need] = &[
    Need {
        clauses: &["log_power_loss"],
        part: None,
        met: |c, _| c.power_loss,
        reason: "the harness's crash does not simulate power loss (torn unsynced writes)",
    },
    Need {
        clauses: &["flush_failure_latches", "commit_failure_latches"],
        part: None,
        met: |c, _| c.fault_injection,
        reason: NO_FAULTS,
    },
    Need {
        clauses: &["log_pipelined_flush"],
        part: Some("a failed split flush"),
        met: |c, _| c.fault_injection,
        reason: NO_FAULTS,
    },
    Need {
        clauses: &["log_flushes_overlap"],
        part: None,
        met: |c, _| c.overlapping_flushes,
        reason: "the harness declares no overlapping flushes (its logs take one flush ticket at a time)",
    },
    Need {
        clauses: &["commit_atomic"],
        part: Some("crashes inside a commit"),
        met: |c, _| c.commit_crash_points > 0,
        reason: "the harness declares no commit crash points",
    },
    Need {
        clauses: &["lock_outlives_storage"],
        part: None,
        met: |_, l| l.same_process,
        reason: "the harness declares no LockChecks::same_process (Harness::open_again)",
    },
    Need {
        clauses: &["lock_outlives_storage_child"],
        part: None,
        met: |_, l| l.child_process,
        reason: "the harness declares no LockChecks::child_process (Harness::location, open_at)",
    },
];

/// Why clauses needing fault injection are skipped.
const NO_FAULTS: &str = "the harness declares no fault injection";

/// Whether `clause` (or a part of it) is skipped on a harness declaring
/// `caps` and `locks`, and why.
pub fn needs(clause: &str, caps: Capabilities, locks: LockChecks) -> Option<Skip> {
    NEEDS.iter().find_map(|n| {
        let &name = n.clauses.iter().find(|&&c| c == clause)?;
        (!(n.met)(caps, locks)).then_some(Skip {
            clause: name,
            part: n.part,
            reason: n.reason,
        })
    })
}

/// Every clause of [`CLAUSES`] that `h` skips, wholly or in part, in that
/// order: decided from its declarations alone, so the answer does not
/// depend on which clauses ran.
pub fn skipped<H: Harness>(h: &H) -> Vec<Skip> {
    let (caps, locks, leases) = (h.capabilities(), h.lock_checks(), h.lease_checks());
    CLAUSES
        .iter()
        .filter_map(|&clause| {
            needs(clause, caps, locks).or_else(|| {
                lease::lease_needs(clause, leases).map(|reason| Skip {
                    clause,
                    part: None,
                    reason,
                })
            })
        })
        .collect()
}

/// The line [`report_skipped`] prints for `h` in the suite named `suite`:
/// `conformance: N of M clauses skipped for <suite>: a, b, c`, then the
/// clauses skipped in part, if any.
pub fn skip_summary<H: Harness>(h: &H, suite: &str) -> String {
    let all = skipped(h);
    let (part, whole): (Vec<Skip>, Vec<Skip>) = all.into_iter().partition(|s| s.part.is_some());
    let mut line = format!(
        "conformance: {} of {} clauses skipped for {suite}",
        whole.len(),
        CLAUSES.len()
    );
    if !whole.is_empty() {
        let names: Vec<&str> = whole.iter().map(|s| s.clause).collect();
        line.push_str(&format!(": {}", names.join(", ")));
    }
    if !part.is_empty() {
        let names: Vec<String> = part
            .iter()
            .map(|s| format!("{} ({})", s.clause, s.part.unwrap_or("")))
            .collect();
        line.push_str(&format!("; {} in part: {}", part.len(), names.join(", ")));
    }
    line
}

/// Prints [`skip_summary`] on stderr, past the test harness's capture;
/// `module_path` is the calling suite's `module_path!()`.
pub fn report_skipped<H: Harness>(h: &H, module_path: &str) {
    let suite = module_path.split_once("::").map_or(module_path, |(_, m)| m);
    let _ = writeln!(std::io::stderr(), "{}", skip_summary(h, suite));
}

/// The name the test harness gives clause `clause` of the suite expanded
/// in module `module_path` (a `module_path!()`, whose first segment, the
/// crate, test names leave out), as `--exact` takes it.
pub fn test_name(module_path: &str, clause: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{clause}"),
        None => clause.to_owned(),
    }
}

// ---- helpers shared by the clauses ----

/// `n` scaled by `FUSEE_CONFORMANCE_SCALE` percent (at least 1).
fn scaled(n: usize) -> usize {
    let pct = std::env::var("FUSEE_CONFORMANCE_SCALE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(100);
    (n.saturating_mul(pct) / 100).max(1)
}

fn open<S: Storage>(s: &S, shard: u32) -> ShardParts<S> {
    must!(s.open_shard(shard), "open_shard({shard})")
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

/// Records with their LSNs.
type Records = Vec<(Lsn, Vec<u8>)>;

/// Every record after `after`, with the returned end.
fn read_log<L: LogStore>(log: &mut L, after: Lsn) -> Result<(Records, Lsn)> {
    let mut out = Vec::new();
    let end = log.read(after, &mut |lsn, bytes| {
        out.push((lsn, bytes.to_vec()));
        Ok(())
    })?;
    Ok((out, end))
}

/// Flushes `log`, which must report `expected` as its durable LSN.
fn flush_to<L: LogStore>(log: &mut L, expected: Lsn, what: std::fmt::Arguments<'_>) {
    match log.flush() {
        Ok(lsn) if lsn == expected => {}
        other => fail(format_args!(
            "{what}: flush must return LSN {expected}; found {other:?}"
        )),
    }
}

/// The committed index as a map by run, checking the chunking promises.
fn read_index<C: CheckpointStore>(c: &mut C) -> Index {
    let mut map = Index::new();
    let mut visited = 0u64;
    let count = must!(
        c.read_index(&mut |chunk| {
            check!(
                chunk.len() % INDEX_RECORD == 0,
                "read_index must visit whole {INDEX_RECORD}-byte records; found a chunk of {} bytes",
                chunk.len()
            );
            for r in chunk.chunks_exact(INDEX_RECORD) {
                let mut rec = [0u8; INDEX_RECORD];
                rec.copy_from_slice(r);
                let run = index_record_run(&rec);
                check!(
                    map.insert(run, rec).is_none(),
                    "read_index must visit each run once; found run {run} twice"
                );
                visited += 1;
            }
            Ok(())
        }),
        "read_index"
    );
    check_eq!(
        count,
        visited,
        "read_index must return how many records it visited"
    );
    map
}

/// Concatenates index records.
fn concat(records: &[[u8; INDEX_RECORD]]) -> Vec<u8> {
    records.iter().flatten().copied().collect()
}
