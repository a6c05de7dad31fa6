//! The suite can fail: backends with one planted bug each (wrappers around
//! the memory backend) must fail the clauses that cover that bug, including
//! the random-sequence clause that compares against the memory model.

use std::panic::{AssertUnwindSafe, catch_unwind};

use fusee_core::record::Lsn;
use fusee_core::shard::BlobRef;
use fusee_storage::conformance::{self, Capabilities, Harness};
use fusee_storage::memory::{MemoryCheckpoint, MemoryLog, MemoryRuns};
use fusee_storage::{
    CheckpointStore, Committed, IndexChange, LogStore, MemoryStorage, Result, RunStore, ShardParts,
    Storage,
};

/// The planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// Log reads skip every record whose LSN is a multiple of 50.
    ReadSkips,
    /// Commits ignore the index delta.
    DeltaIgnored,
    /// Frame reads flip the first byte of frames longer than 1000 bytes.
    FrameFlip,
    /// The first flush after a reopen returns one LSN too many.
    FlushOffByOne,
}

struct Buggy {
    inner: MemoryStorage,
    bug: Bug,
}
struct Log(MemoryLog, Bug, bool);
struct Runs(MemoryRuns, Bug);
struct Ckpt(MemoryCheckpoint, Bug);

impl Storage for Buggy {
    type Log = Log;
    type Runs = Runs;
    type Checkpoint = Ckpt;

    fn open_shard(&self, shard: u32) -> Result<ShardParts<Self>> {
        let p = self.inner.open_shard(shard)?;
        Ok(ShardParts {
            log: Log(p.log, self.bug, true),
            runs: Runs(p.runs, self.bug),
            checkpoint: Ckpt(p.checkpoint, self.bug),
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
        self.0.append(lsn, record)
    }
    fn flush(&mut self) -> Result<Lsn> {
        let first = std::mem::replace(&mut self.2, false);
        let lsn = self.0.flush()?;
        Ok(if self.1 == Bug::FlushOffByOne && first {
            lsn + 1
        } else {
            lsn
        })
    }
    fn read(&mut self, after: Lsn, visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>) -> Result<Lsn> {
        let skip = self.1 == Bug::ReadSkips;
        self.0.read(after, &mut |lsn, bytes| {
            if skip && lsn % 50 == 0 {
                Ok(())
            } else {
                visit(lsn, bytes)
            }
        })
    }
    fn discard_through(&mut self, lsn: Lsn) -> Result<()> {
        self.0.discard_through(lsn)
    }
    fn first_lsn(&self) -> Lsn {
        self.0.first_lsn()
    }
    fn last_lsn(&self) -> Lsn {
        self.0.last_lsn()
    }
    fn durable_lsn(&self) -> Lsn {
        self.0.durable_lsn()
    }
}

impl RunStore for Runs {
    fn append(&mut self, frame: &[u8]) -> Result<BlobRef> {
        self.0.append(frame)
    }
    fn read(&mut self, blob: BlobRef, out: &mut Vec<u8>) -> Result<()> {
        self.0.read(blob, out)?;
        if self.1 == Bug::FrameFlip && out.len() > 1000 {
            out[0] ^= 1;
        }
        Ok(())
    }
    fn release(&mut self, blob: BlobRef) -> Result<()> {
        self.0.release(blob)
    }
    fn compact(&mut self, moved: &mut dyn FnMut(BlobRef, BlobRef)) -> Result<u64> {
        self.0.compact(moved)
    }
    fn position(&self) -> u64 {
        self.0.position()
    }
}

impl CheckpointStore for Ckpt {
    type Runs = Runs;
    fn read_index(&mut self, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        self.0.read_index(visit)
    }
    fn begin_base(&mut self) -> Result<()> {
        self.0.begin_base()
    }
    fn base_chunk(&mut self, records: &[u8]) -> Result<()> {
        self.0.base_chunk(records)
    }
    fn commit(&mut self, runs: &mut Runs, change: IndexChange<'_>, ck: &[u8]) -> Result<Committed> {
        let change = match change {
            IndexChange::Delta(_) if self.1 == Bug::DeltaIgnored => IndexChange::Delta(&[]),
            other => other,
        };
        self.0.commit(&mut runs.0, change, ck)
    }
}

struct BuggyHarness(Bug);

impl Harness for BuggyHarness {
    type S = Buggy;
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    fn open(&mut self) -> Buggy {
        Buggy {
            inner: MemoryStorage::new(),
            bug: self.0,
        }
    }
    fn reopen(&mut self, s: Buggy) -> Buggy {
        Buggy {
            inner: s.inner.reopen(),
            bug: s.bug,
        }
    }
    fn crash(&mut self, s: Buggy) -> Buggy {
        Buggy {
            inner: s.inner.crash(),
            bug: s.bug,
        }
    }
}

fn fails(bug: Bug, clause: fn(&mut BuggyHarness), name: &str) {
    let r = catch_unwind(AssertUnwindSafe(|| clause(&mut BuggyHarness(bug))));
    assert!(
        r.is_err(),
        "clause {name} passed a backend with bug {bug:?}"
    );
}

#[test]
fn planted_bugs_are_caught() {
    fails(
        Bug::ReadSkips,
        conformance::log_round_trip,
        "log_round_trip",
    );
    fails(
        Bug::ReadSkips,
        conformance::log_read_from_every_position,
        "log_read_from_every_position",
    );
    fails(Bug::DeltaIgnored, conformance::index_delta, "index_delta");
    fails(
        Bug::DeltaIgnored,
        conformance::commit_atomic,
        "commit_atomic",
    );
    fails(
        Bug::FrameFlip,
        conformance::store_round_trip,
        "store_round_trip",
    );
    fails(
        Bug::FlushOffByOne,
        conformance::log_lsn_continuity,
        "log_lsn_continuity",
    );
    for bug in [
        Bug::ReadSkips,
        Bug::DeltaIgnored,
        Bug::FrameFlip,
        Bug::FlushOffByOne,
    ] {
        fails(bug, conformance::model_random, "model_random");
    }
}

/// Without the bug the same wrapper passes: the failures above come from
/// the planted bugs, not from the wrapper.
#[test]
fn clean_wrapper_passes() {
    struct Clean;
    impl Harness for Clean {
        type S = MemoryStorage;
        fn capabilities(&self) -> Capabilities {
            Capabilities::default()
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
    }
    conformance::model_random(&mut Clean);
    conformance::commit_atomic(&mut Clean);
    // Clauses needing fault injection are skipped (with a printed reason).
    conformance::flush_failure_latches(&mut Clean);
}
