//! The whole conformance suite, twice: on real files in a temporary
//! directory (a crash is the process dropping everything without closing),
//! and on the simulated disk (a crash is a power cut that drops, keeps or
//! tears every unsynced write), which also injects sync failures and
//! crashes inside commits.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use std::path::Path;

use fusee_storage::conformance::{Capabilities, Harness, LockChecks};
use fusee_storage::{Storage, StorageError};
use fusee_storage_file::sim::{CrashMode, SimIo};
use fusee_storage_file::{FileOptions, FileStorage, FlushMethod};

/// Small segments, so the suite's logs roll through many of them.
fn options() -> FileOptions {
    FileOptions {
        segment_bytes: 256 << 10,
        flush: FlushMethod::DataSync,
        ..FileOptions::default()
    }
}

/// Real files in fresh temporary directories, removed on drop.
struct RealHarness {
    dir: PathBuf,
    used: Vec<PathBuf>,
}

impl RealHarness {
    /// A harness; each [`Harness::open`] uses a new directory.
    fn new() -> Self {
        Self {
            dir: PathBuf::new(),
            used: Vec::new(),
        }
    }

    fn fresh_dir(&mut self) {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        self.dir = std::env::temp_dir().join(format!(
            "fusee-file-conformance-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&self.dir);
        self.used.push(self.dir.clone());
    }

    fn open_storage(&self) -> FileStorage {
        FileStorage::open(&self.dir, options()).expect("open the file storage")
    }
}

impl Drop for RealHarness {
    fn drop(&mut self) {
        for dir in &self.used {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Harness for RealHarness {
    type S = FileStorage;

    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    fn open(&mut self) -> FileStorage {
        self.fresh_dir();
        self.open_storage()
    }

    fn reopen(&mut self, s: FileStorage) -> FileStorage {
        s.close().expect("close");
        drop(s);
        self.open_storage()
    }

    fn crash(&mut self, s: FileStorage) -> FileStorage {
        drop(s);
        self.open_storage()
    }

    fn lock_checks(&self) -> LockChecks {
        LockChecks {
            same_process: true,
            child_process: true,
        }
    }

    fn location(&self) -> PathBuf {
        self.dir.clone()
    }

    fn open_at(&mut self, path: &Path) -> Result<FileStorage, StorageError> {
        FileStorage::open(path, options())
    }
}

/// The simulated disk: power loss, sync failures, crashes inside commits.
struct SimHarness {
    io: SimIo,
    crashes: u64,
}

impl SimHarness {
    /// A harness on a fresh storage.
    fn new() -> Self {
        Self {
            io: SimIo::new(),
            crashes: 0,
        }
    }

    fn open_storage(&self) -> FileStorage<SimIo> {
        FileStorage::open_with(self.io.clone(), "/fusee", options()).expect("open on the sim")
    }
}

/// Syncs a commit without releases and without a base makes: the run store,
/// the index delta, and the slot in each of its two files.
const COMMIT_SYNCS: u32 = 4;

impl Harness for SimHarness {
    type S = FileStorage<SimIo>;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fault_injection: true,
            power_loss: true,
            commit_crash_points: COMMIT_SYNCS,
            overlapping_flushes: false,
        }
    }

    fn open(&mut self) -> FileStorage<SimIo> {
        self.io = SimIo::new();
        self.open_storage()
    }

    fn reopen(&mut self, s: FileStorage<SimIo>) -> FileStorage<SimIo> {
        s.close().expect("close");
        drop(s);
        self.open_storage()
    }

    fn crash(&mut self, s: FileStorage<SimIo>) -> FileStorage<SimIo> {
        drop(s);
        self.crashes += 1;
        self.io.crash(CrashMode::Random(self.crashes));
        self.open_storage()
    }

    fn fail_next_flush(&mut self, _s: &FileStorage<SimIo>, _shard: u32) {
        self.io.fail_next_syncs(1);
    }

    fn fail_next_commit(&mut self, _s: &FileStorage<SimIo>, _shard: u32) {
        self.io.fail_next_syncs(1);
    }

    fn crash_in_commit(&mut self, _s: &FileStorage<SimIo>, _shard: u32, step: u32) {
        self.io.fail_syncs_after(step, u32::MAX);
    }

    fn lock_checks(&self) -> LockChecks {
        LockChecks {
            same_process: true,
            child_process: false,
        }
    }

    fn open_again(&mut self) -> Result<FileStorage<SimIo>, StorageError> {
        FileStorage::open_with(self.io.clone(), "/fusee", options())
    }
}

fusee_storage::conformance_suite!(real_files, RealHarness::new);
fusee_storage::conformance_suite!(simulated_disk, SimHarness::new);
