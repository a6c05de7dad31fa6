//! The suite can fail: backends with one planted bug each (wrappers around
//! the memory backend, locked like a disk backend's directory) must fail
//! the clauses that cover that bug, with a message that says what was
//! expected and what was found, including the random-sequence clause that
//! compares against the memory model. The same wrapper without a bug
//! passes the whole suite, with nothing skipped.

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fusee_core::record::Lsn;
use fusee_core::shard::BlobRef;
use fusee_storage::conformance::{self, Capabilities, Harness, LockChecks, MemoryHarness};
use fusee_storage::memory::{COMMIT_STEPS, MemoryCheckpoint, MemoryLog, MemoryRuns};
use fusee_storage::{
    CheckpointStore, Committed, INDEX_RECORD, IndexChange, LogStore, MemoryStorage, Result,
    RunStore, ShardParts, Storage, StorageError,
};

/// The planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// None: the wrapper as it should be.
    None,
    /// Log reads skip every record whose LSN is a multiple of 50.
    ReadSkips,
    /// Commits ignore the index delta.
    DeltaIgnored,
    /// Frame reads flip the first byte of frames longer than 1000 bytes.
    FrameFlip,
    /// The first flush after a reopen returns one LSN too many.
    FlushOffByOne,
    /// A seal claims every record appended, not only the durable ones.
    SealClaimsAppended,
    /// Releasing a frame that does not exist succeeds.
    ReleaseUnknownOk,
    /// Reading a reference that names no frame is `Corrupt`, not
    /// `UnknownBlob`.
    BadReadCorrupt,
    /// A delta of partial index records is `Corrupt`, not `Misuse`.
    PartialDeltaCorrupt,
    /// A base chunk of partial index records is `Corrupt`, not `Misuse`.
    PartialChunkCorrupt,
    /// A second open of a live shard is `Locked`, not `AlreadyOpen`.
    AlreadyOpenAsLocked,
    /// `compact` returns `Ok(0)` without checking anything, after close too.
    CompactIgnoresClose,
    /// The directory lock lives in the storage only: dropping it lets a
    /// second open in while the parts still write.
    LockDroppedWithStorage,
    /// The directory lock is never let go of in this process.
    LockNeverReleased,
    /// A locked directory is a `Backend` error a caller can only
    /// string-match, not `Locked`.
    LockedAsBackend,
}

/// An exclusive `flock` on `<dir>/LOCK`, held while the value lives: the
/// same lock against another open in this process and against another
/// process.
#[derive(Debug)]
struct DirLock {
    /// Held open for the lock: closing it lets the lock go.
    _file: File,
}

impl DirLock {
    fn take(dir: &Path) -> Result<Arc<Self>> {
        let path = dir.join("LOCK");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| StorageError::io(format!("open {}", path.display()), e))?;
        match file.try_lock() {
            Ok(()) => Ok(Arc::new(Self { _file: file })),
            Err(TryLockError::WouldBlock) => Err(StorageError::Locked {
                path: dir.display().to_string(),
            }),
            Err(TryLockError::Error(e)) => {
                Err(StorageError::io(format!("lock {}", path.display()), e))
            }
        }
    }
}

struct Buggy {
    inner: MemoryStorage,
    bug: Bug,
    lock: Arc<DirLock>,
}

/// What every part holds besides its memory part: the bug, and the lock
/// (unless the bug leaves it to the storage alone).
struct Common {
    bug: Bug,
    _lock: Option<Arc<DirLock>>,
}

struct Log {
    inner: MemoryLog,
    common: Common,
    first_flush: bool,
}
struct Runs {
    inner: MemoryRuns,
    common: Common,
}
struct Ckpt {
    inner: MemoryCheckpoint,
    common: Common,
}

impl Storage for Buggy {
    type Log = Log;
    type Runs = Runs;
    type Checkpoint = Ckpt;

    fn open_shard(&self, shard: u32) -> Result<ShardParts<Self>> {
        let p = match self.inner.open_shard(shard) {
            Err(StorageError::AlreadyOpen { .. }) if self.bug == Bug::AlreadyOpenAsLocked => {
                return Err(StorageError::Locked {
                    path: "shard".into(),
                });
            }
            other => other?,
        };
        let common = || Common {
            bug: self.bug,
            _lock: (self.bug != Bug::LockDroppedWithStorage).then(|| Arc::clone(&self.lock)),
        };
        Ok(ShardParts {
            log: Log {
                inner: p.log,
                common: common(),
                first_flush: true,
            },
            runs: Runs {
                inner: p.runs,
                common: common(),
            },
            checkpoint: Ckpt {
                inner: p.checkpoint,
                common: common(),
            },
            recovered: p.recovered,
        })
    }
    fn shards(&self) -> Result<Vec<u32>> {
        self.inner.shards()
    }
    fn close(&self) -> Result<()> {
        self.inner.close()
    }
}

impl LogStore for Log {
    fn append(&mut self, lsn: Lsn, record: &[u8]) -> Result<()> {
        self.inner.append(lsn, record)
    }
    fn flush(&mut self) -> Result<Lsn> {
        let first = std::mem::replace(&mut self.first_flush, false);
        let lsn = self.inner.flush()?;
        Ok(if self.common.bug == Bug::FlushOffByOne && first {
            lsn + 1
        } else {
            lsn
        })
    }
    fn read(&mut self, after: Lsn, visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>) -> Result<Lsn> {
        let skip = self.common.bug == Bug::ReadSkips;
        self.inner.read(after, &mut |lsn, bytes| {
            if skip && lsn % 50 == 0 {
                Ok(())
            } else {
                visit(lsn, bytes)
            }
        })
    }
    fn begin_seal(&mut self) -> Result<fusee_storage::SealTicket> {
        if self.common.bug == Bug::SealClaimsAppended {
            return Ok(fusee_storage::SealTicket::done(self.inner.last_lsn()));
        }
        self.inner.begin_seal()
    }
    fn finish_seal(&mut self, ticket: fusee_storage::SealTicket) -> Result<Lsn> {
        if ticket.log() == 0 {
            return ticket.finish();
        }
        self.inner.finish_seal(ticket)
    }
    fn discard_through(&mut self, lsn: Lsn) -> Result<()> {
        self.inner.discard_through(lsn)
    }
    fn first_lsn(&self) -> Lsn {
        self.inner.first_lsn()
    }
    fn last_lsn(&self) -> Lsn {
        self.inner.last_lsn()
    }
    fn durable_lsn(&self) -> Lsn {
        self.inner.durable_lsn()
    }
}

impl RunStore for Runs {
    fn append(&mut self, frame: &[u8]) -> Result<BlobRef> {
        self.inner.append(frame)
    }
    fn read(&mut self, blob: BlobRef, out: &mut Vec<u8>) -> Result<()> {
        match self.inner.read(blob, out) {
            Err(StorageError::UnknownBlob { .. }) if self.common.bug == Bug::BadReadCorrupt => {
                return Err(StorageError::Corrupt {
                    what: "frame",
                    at: blob.offset,
                });
            }
            other => other?,
        }
        if self.common.bug == Bug::FrameFlip && out.len() > 1000 {
            out[0] ^= 1;
        }
        Ok(())
    }
    fn release(&mut self, blob: BlobRef) -> Result<()> {
        match self.inner.release(blob) {
            Err(StorageError::UnknownBlob { .. }) if self.common.bug == Bug::ReleaseUnknownOk => {
                Ok(())
            }
            other => other,
        }
    }
    fn compact(&mut self, moved: &mut dyn FnMut(BlobRef, BlobRef)) -> Result<u64> {
        if self.common.bug == Bug::CompactIgnoresClose {
            return Ok(0);
        }
        self.inner.compact(moved)
    }
    fn position(&self) -> u64 {
        self.inner.position()
    }
}

/// The error a backend that checks stored bytes before the caller's gives
/// for a partial index record.
fn partial_is_corrupt(records: &[u8]) -> Result<()> {
    if !records.len().is_multiple_of(INDEX_RECORD) {
        return Err(StorageError::Corrupt {
            what: "index records",
            at: records.len() as u64,
        });
    }
    Ok(())
}

impl CheckpointStore for Ckpt {
    type Runs = Runs;
    fn read_index(&mut self, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        self.inner.read_index(visit)
    }
    fn begin_base(&mut self) -> Result<()> {
        self.inner.begin_base()
    }
    fn base_chunk(&mut self, records: &[u8]) -> Result<()> {
        if self.common.bug == Bug::PartialChunkCorrupt {
            partial_is_corrupt(records)?;
        }
        self.inner.base_chunk(records)
    }
    fn commit(&mut self, runs: &mut Runs, change: IndexChange<'_>, ck: &[u8]) -> Result<Committed> {
        let change = match change {
            IndexChange::Delta(records) if self.common.bug == Bug::PartialDeltaCorrupt => {
                partial_is_corrupt(records)?;
                change
            }
            IndexChange::Delta(_) if self.common.bug == Bug::DeltaIgnored => {
                IndexChange::Delta(&[])
            }
            other => other,
        };
        self.inner.commit(&mut runs.inner, change, ck)
    }
}

/// Opens wrapped storages in directories of its own (removed on drop),
/// each locked while its storage or any part lives.
struct BuggyHarness {
    bug: Bug,
    root: PathBuf,
    opened: u64,
    /// Where the last storage returned lives.
    current: PathBuf,
    /// The data at each location, which a later open finds again.
    stores: HashMap<PathBuf, MemoryStorage>,
}

impl BuggyHarness {
    fn new(bug: Bug) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let root = std::env::temp_dir().join(format!(
            "fusee-conformance-catches-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        Self {
            bug,
            root,
            opened: 0,
            current: PathBuf::new(),
            stores: HashMap::new(),
        }
    }

    /// Locks `dir` and opens the storage in it: the data the last open
    /// there left, after a restart, or a new storage.
    fn open_in(&mut self, dir: &Path) -> Result<Buggy> {
        let lock = match DirLock::take(dir) {
            Err(StorageError::Locked { path }) if self.bug == Bug::LockedAsBackend => {
                return Err(StorageError::Backend(
                    format!("{path} is in use by another process").into(),
                ));
            }
            other => other?,
        };
        if self.bug == Bug::LockNeverReleased {
            std::mem::forget(Arc::clone(&lock));
        }
        // Only the lock's holder may touch the data: a restart ends the
        // previous incarnation's handles.
        let inner = self
            .stores
            .get(dir)
            .map_or_else(MemoryStorage::new, MemoryStorage::crash);
        self.stores.insert(dir.to_path_buf(), inner.clone());
        self.current = dir.to_path_buf();
        Ok(Buggy {
            inner,
            bug: self.bug,
            lock,
        })
    }

    fn must_open_in(&mut self, dir: &Path) -> Buggy {
        self.open_in(dir)
            .unwrap_or_else(|e| panic!("the harness's open of {}: {e}", dir.display()))
    }
}

impl Drop for BuggyHarness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Harness for BuggyHarness {
    type S = Buggy;
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fault_injection: true,
            power_loss: true,
            commit_crash_points: COMMIT_STEPS,
            overlapping_flushes: false,
        }
    }
    fn open(&mut self) -> Buggy {
        self.opened += 1;
        let dir = self.root.join(self.opened.to_string());
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        self.must_open_in(&dir)
    }
    fn reopen(&mut self, s: Buggy) -> Buggy {
        s.close()
            .unwrap_or_else(|e| panic!("the harness's close: {e}"));
        drop(s);
        let dir = self.current.clone();
        self.must_open_in(&dir)
    }
    fn crash(&mut self, s: Buggy) -> Buggy {
        drop(s);
        let dir = self.current.clone();
        self.must_open_in(&dir)
    }
    fn fail_next_flush(&mut self, s: &Buggy, shard: u32) {
        s.inner.fail_next_flush(shard);
    }
    fn fail_next_commit(&mut self, s: &Buggy, shard: u32) {
        s.inner.fail_next_commit(shard);
    }
    fn crash_in_commit(&mut self, s: &Buggy, shard: u32, step: u32) {
        s.inner.crash_in_commit(shard, step);
    }
    fn lock_checks(&self) -> LockChecks {
        LockChecks {
            same_process: true,
            child_process: true,
        }
    }
    fn location(&self) -> PathBuf {
        self.current.clone()
    }
    fn open_at(&mut self, path: &Path) -> Result<Buggy> {
        self.open_in(path)
    }
}

// The wrapper without a bug passes everything; its child-process clause is
// also the child the buggy parents below run.
fusee_storage::conformance_suite!(clean_wrapper, || BuggyHarness::new(Bug::None));

/// The test the child-process clause runs as its child.
const CHILD_TEST: &str = "clean_wrapper::lock_outlives_storage_child";

/// The clause fails on a backend with `bug`, and its message holds
/// `message` (what was expected and what was found).
fn fails(bug: Bug, clause: fn(&mut BuggyHarness), name: &str, message: &str) {
    let r = catch_unwind(AssertUnwindSafe(|| clause(&mut BuggyHarness::new(bug))));
    let Err(payload) = r else {
        panic!("clause {name} passed a backend with bug {bug:?}");
    };
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    assert!(
        text.starts_with(&format!("{name}: ")) && text.contains(message),
        "clause {name} on bug {bug:?}: expected a failure naming the clause and saying {message:?}; found {text:?}"
    );
}

#[test]
fn planted_bugs_are_caught() {
    fails(
        Bug::ReadSkips,
        conformance::log_round_trip,
        "log_round_trip",
        "the count: expected 500; found 490",
    );
    fails(
        Bug::ReadSkips,
        conformance::log_read_from_every_position,
        "log_read_from_every_position",
        "the count: expected 130; found 128",
    );
    fails(
        Bug::DeltaIgnored,
        conformance::index_delta,
        "index_delta",
        "expected 100 runs; found 0 runs, run 1 missing",
    );
    fails(
        Bug::DeltaIgnored,
        conformance::commit_atomic,
        "commit_atomic",
        "the index must be that of the commit found",
    );
    fails(
        Bug::FrameFlip,
        conformance::store_round_trip,
        "store_round_trip",
        "differing first at byte 0",
    );
    fails(
        Bug::FlushOffByOne,
        conformance::log_lsn_continuity,
        "log_lsn_continuity",
        "flush must return LSN 10; found Ok(11)",
    );
    fails(
        Bug::SealClaimsAppended,
        conformance::log_seal,
        "log_seal",
        "expected Ok(40): the durable LSN, not the records appended since; found Ok(45)",
    );
    for bug in [
        Bug::ReadSkips,
        Bug::DeltaIgnored,
        Bug::FrameFlip,
        Bug::FlushOffByOne,
    ] {
        fails(bug, conformance::model_random, "model_random", "found");
    }
}

/// The same mistake must get the same variant on every backend: a bug that
/// answers with another variant fails the clause that pins it.
#[test]
fn wrong_variants_are_caught() {
    fails(
        Bug::ReleaseUnknownOk,
        conformance::store_bad_reference,
        "store_bad_reference",
        "(far past the end): expected Err(UnknownBlob",
    );
    fails(
        Bug::BadReadCorrupt,
        conformance::store_bad_reference,
        "store_bad_reference",
        "found Err(Corrupt",
    );
    fails(
        Bug::PartialDeltaCorrupt,
        conformance::index_bad_input,
        "index_bad_input",
        "commit of a 33-byte delta (a partial index record): expected Err(Misuse), changing nothing; found Err(Corrupt",
    );
    fails(
        Bug::PartialChunkCorrupt,
        conformance::index_bad_input,
        "index_bad_input",
        "base_chunk of 31 bytes (a partial index record): expected Err(Misuse), changing nothing; found Err(Corrupt",
    );
    fails(
        Bug::AlreadyOpenAsLocked,
        conformance::shard_open_twice,
        "shard_open_twice",
        "expected Err(AlreadyOpen { shard: 9 }); found Err(Locked",
    );
    fails(
        Bug::CompactIgnoresClose,
        conformance::calls_after_close,
        "calls_after_close",
        "compact after close: expected Err(Closed); found Ok(0)",
    );
}

/// A storage's lock must live as long as the storage or any part it gave
/// out, and be refused with `Locked`, in this process and in a child.
#[test]
fn lock_bugs_are_caught() {
    fails(
        Bug::LockDroppedWithStorage,
        conformance::lock_outlives_storage,
        "lock_outlives_storage",
        "after it was dropped while shard 3's parts live: expected Err(Locked); found Ok(())",
    );
    fails(
        Bug::LockNeverReleased,
        conformance::lock_outlives_storage,
        "lock_outlives_storage",
        "every part were dropped, a second open must succeed; found Err(Locked",
    );
    fails(
        Bug::LockedAsBackend,
        conformance::lock_outlives_storage,
        "lock_outlives_storage",
        "while it is open: expected Err(Locked); found Err(Backend(",
    );
    fails(
        Bug::LockDroppedWithStorage,
        |h| conformance::lock_outlives_storage_child(h, CHILD_TEST),
        "lock_outlives_storage_child",
        "holds shard 3's parts: expected Locked; found Opened",
    );
    fails(
        Bug::LockNeverReleased,
        |h| conformance::lock_outlives_storage_child(h, CHILD_TEST),
        "lock_outlives_storage_child",
        "dropped it and every part: expected Opened; found Locked",
    );
}

/// A harness that declares nothing optional, and counts its opens.
#[derive(Default)]
struct Bare {
    opens: u32,
}

impl Harness for Bare {
    type S = MemoryStorage;
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    fn open(&mut self) -> MemoryStorage {
        self.opens += 1;
        MemoryStorage::new()
    }
    fn reopen(&mut self, s: MemoryStorage) -> MemoryStorage {
        s.reopen()
    }
    fn crash(&mut self, s: MemoryStorage) -> MemoryStorage {
        s.crash()
    }
}

/// The optional clauses of shards shared under leases, which only a
/// backend like PostgreSQL declares.
const LEASE_CLAUSES: [&str; 5] = [
    "lease_second_owner_refused",
    "lease_takeover_fences",
    "lease_takeover_after_death",
    "lease_connection_killed_mid_flush",
    "failover_keeps_acknowledged",
];

/// Skips are counted from the harness's declarations: a harness with none
/// skips every clause that needs one and two clauses in part; the memory
/// harness the overlapping flushes (its logs take one ticket at a time) and
/// the ownership clauses; the clean wrapper the overlapping flushes and the
/// lease clauses. A clause counted as skipped returns before opening
/// anything (it would panic in the harness's default methods otherwise).
#[test]
fn skips_are_counted() {
    let whole = |skips: Vec<conformance::Skip>| {
        skips
            .iter()
            .filter(|s| s.part.is_none())
            .map(|s| s.clause)
            .collect::<Vec<_>>()
    };
    let mut bare = Bare::default();
    assert_eq!(
        whole(conformance::skipped(&bare)),
        [
            "log_power_loss",
            "log_flushes_overlap",
            "flush_failure_latches",
            "commit_failure_latches",
            "lock_outlives_storage",
            LEASE_CLAUSES[0],
            LEASE_CLAUSES[1],
            LEASE_CLAUSES[2],
            LEASE_CLAUSES[3],
            LEASE_CLAUSES[4],
            "lock_outlives_storage_child"
        ],
        "clauses skipped whole on a harness declaring nothing"
    );
    assert_eq!(
        conformance::skip_summary(&bare, "bare"),
        "conformance: 11 of 35 clauses skipped for bare: log_power_loss, \
         log_flushes_overlap, flush_failure_latches, commit_failure_latches, lock_outlives_storage, \
         lease_second_owner_refused, lease_takeover_fences, lease_takeover_after_death, \
         lease_connection_killed_mid_flush, failover_keeps_acknowledged, \
         lock_outlives_storage_child; 2 in part: log_pipelined_flush (a failed split flush), \
         commit_atomic (crashes inside a commit)"
    );
    assert_eq!(
        whole(conformance::skipped(&MemoryHarness::new())),
        [
            "log_flushes_overlap",
            "lock_outlives_storage",
            LEASE_CLAUSES[0],
            LEASE_CLAUSES[1],
            LEASE_CLAUSES[2],
            LEASE_CLAUSES[3],
            LEASE_CLAUSES[4],
            "lock_outlives_storage_child"
        ],
        "clauses skipped on the memory harness"
    );
    let mut overlap_and_lease = vec!["log_flushes_overlap"];
    overlap_and_lease.extend(LEASE_CLAUSES);
    assert_eq!(
        whole(conformance::skipped(&BuggyHarness::new(Bug::None))),
        overlap_and_lease,
        "clauses skipped on the clean wrapper (the overlapping flushes, which its memory logs do not take, and the lease clauses, which need shared ownership)"
    );
    conformance::flush_failure_latches(&mut bare);
    conformance::commit_failure_latches(&mut bare);
    conformance::log_power_loss(&mut bare);
    conformance::log_flushes_overlap(&mut bare);
    conformance::lock_outlives_storage(&mut bare);
    conformance::lock_outlives_storage_child(&mut bare, CHILD_TEST);
    assert_eq!(bare.opens, 0, "a skipped clause opened a storage");
    // Clauses skipped in part still run the rest.
    conformance::commit_atomic(&mut bare);
    conformance::log_pipelined_flush(&mut bare);
    assert_eq!(bare.opens, 2, "a clause skipped in part did not run");
}
