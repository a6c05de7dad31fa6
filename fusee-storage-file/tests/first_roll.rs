//! The first segment roll after an open never waits for a zero-fill (issue
//! 21): every open starts a small segment, and the log rolls out of it
//! while the next full-size segment may still be being zero-filled on its
//! background thread. Here that zero-fill is held back (an I/O layer over
//! real files blocks every large write of zeros until the test lets it go),
//! so a roll that waited for it would never return: the appends run on a
//! thread and the test fails if they do not finish while the zero-fill is
//! held. The log rolls through several segments meanwhile; every record
//! reads back before and after a reopen.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

use fusee_storage::{LogStore, Storage};
use fusee_storage_file::io::{Io, IoFile, Mapped, OpenMode, RealFile, RealIo, RealLock};
use fusee_storage_file::{FileOptions, FileStorage, OPEN_SEGMENT_BYTES};

mod common;
use common::TempDir;

/// Holds back large writes of zeros (a segment's zero-fill) while closed.
#[derive(Default)]
struct Gate {
    closed: Mutex<bool>,
    opened: Condvar,
    /// Zero-fill writes that found the gate closed.
    held: AtomicU64,
}

impl Gate {
    fn set(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }

    fn pass(&self) {
        let mut closed = self.closed.lock().unwrap();
        if *closed {
            self.held.fetch_add(1, Ordering::SeqCst);
        }
        while *closed {
            closed = self.opened.wait(closed).unwrap();
        }
    }
}

/// Real files whose zero-fills pass through a [`Gate`].
#[derive(Clone)]
struct GatedIo {
    gate: Arc<Gate>,
}

struct GatedFile {
    file: RealFile,
    gate: Arc<Gate>,
}

/// A write the log makes only when zero-filling a segment: the
/// zero-fill's chunks are 1 MiB (the only other zeros it writes, after a
/// batch in a recycled segment, are at most two 4 KiB blocks).
fn is_zero_fill(bytes: &[u8]) -> bool {
    bytes.len() >= 64 << 10 && bytes.iter().all(|&b| b == 0)
}

impl IoFile for GatedFile {
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        if is_zero_fill(bytes) {
            self.gate.pass();
        }
        self.file.write_at(offset, bytes)
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(offset, buf)
    }

    fn size(&self) -> io::Result<u64> {
        self.file.size()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn map(&self) -> io::Result<Mapped> {
        self.file.map()
    }

    fn map_ahead(&self, len: u64) -> io::Result<Mapped> {
        self.file.map_ahead(len)
    }
}

impl Io for GatedIo {
    type File = GatedFile;
    type Lock = RealLock;

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        RealIo.create_dir_all(path)
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<GatedFile> {
        Ok(GatedFile {
            file: RealIo.open(path, mode)?,
            gate: Arc::clone(&self.gate),
        })
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        RealIo.remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealIo.rename(from, to)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        RealIo.list_dir(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        RealIo.sync_dir(path)
    }

    fn exists(&self, path: &Path) -> bool {
        RealIo.exists(path)
    }

    fn lock(&self, dir: &Path) -> io::Result<RealLock> {
        RealIo.lock(dir)
    }
}

fn record(lsn: u64) -> Vec<u8> {
    (0..1000)
        .map(|i| (lsn as u8).wrapping_mul(7).wrapping_add(i as u8))
        .collect()
}

/// Checks that the log reads records `1..=last`, each unchanged.
fn check(log: &mut impl LogStore, last: u64) {
    let mut next = 1;
    let end = log
        .read(0, &mut |lsn, bytes| {
            assert_eq!(lsn, next, "hole before {lsn}");
            assert_eq!(bytes, &record(lsn)[..], "record {lsn} changed");
            next += 1;
            Ok(())
        })
        .expect("read");
    assert_eq!((end, next), (last, last + 1));
}

/// Appends records after the log's last one, 64 per flush, until `bytes`
/// of records were appended.
fn append(log: &mut impl LogStore, bytes: u64) {
    let mut appended = 0;
    while appended < bytes {
        for _ in 0..64 {
            let lsn = log.last_lsn() + 1;
            let r = record(lsn);
            appended += r.len() as u64;
            log.append(lsn, &r).expect("append");
        }
        log.flush().expect("flush");
    }
}

#[test]
fn rolls_after_an_open_do_not_wait_for_the_next_segments_zero_fill() {
    let t = TempDir::new("fusee-first-roll");
    let gate = Arc::new(Gate::default());
    let io = GatedIo {
        gate: Arc::clone(&gate),
    };
    // Default options: 64 MiB segments, the open's segment 1 MiB.
    let storage = FileStorage::open_with(io, &t.0, FileOptions::default()).expect("open");
    let parts = storage.open_shard(0).expect("open shard");
    // The open zero-filled its own small segment inline, before this.
    gate.set(true);
    let mut log = parts.log;
    let (done, finished) = mpsc::channel();
    let writer = std::thread::spawn(move || {
        // Past the open's segment and two more small ones.
        append(&mut log, 3 * OPEN_SEGMENT_BYTES);
        let _ = done.send(());
        log
    });
    let outcome = finished.recv_timeout(Duration::from_secs(120));
    let held = gate.held.load(Ordering::SeqCst);
    gate.set(false);
    assert!(
        outcome.is_ok(),
        "appends and flushes past the open's segment did not finish while the next \
         segment's zero-fill was held back: a roll waited for it"
    );
    let mut log = writer.join().expect("writer");
    assert!(held >= 1, "the next segment's zero-fill was never started");
    assert!(
        log.unprepared_rolls() >= 2,
        "{} rolls found no prepared segment; at least 2 expected",
        log.unprepared_rolls()
    );
    // The zero-fill may finish now, and later rolls take its segment.
    append(&mut log, 2 * OPEN_SEGMENT_BYTES);
    let last = log.last_lsn();
    check(&mut log, last);
    drop(log);
    drop(parts.runs);
    drop(parts.checkpoint);
    storage.close().expect("close");
    let storage = FileStorage::open(&t.0, FileOptions::default()).expect("reopen");
    let mut parts = storage.open_shard(0).expect("reopen shard");
    check(&mut parts.log, last);
}

/// What a crash leaves when it comes during the first flush into a segment
/// a roll created without zero-filling it: a file past the manifest's
/// carrier, shorter than a header block, holding part of its header. The
/// open reads it as never started (and reuses it), and `verify` reports
/// nothing; before, both called it a bad segment header.
#[test]
fn a_short_segment_past_the_carrier_is_never_started() {
    let t = TempDir::new("fusee-short-segment");
    let storage = FileStorage::open(&t.0, FileOptions::default()).expect("open");
    let mut parts = storage.open_shard(0).expect("open shard");
    parts.log.append(1, &record(1)).expect("append");
    parts.log.flush().expect("flush");
    drop(parts);
    storage.close().expect("close");
    let log = t.0.join("shard-0000000000").join("log");
    let mut segments: Vec<String> = std::fs::read_dir(&log)
        .expect("log dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    segments.sort();
    let newest = segments.last().expect("a segment");
    let number: u64 = newest.trim_end_matches(".seg").parse().expect("number");
    let header = std::fs::read(log.join(newest)).expect("read segment");
    std::fs::write(log.join(format!("{:020}.seg", number + 1)), &header[..512])
        .expect("write short segment");
    let problems = fusee_storage_file::verify::verify_dir(&t.0).expect("verify");
    assert!(problems.is_empty(), "verify: {problems:?}");
    let storage = FileStorage::open(&t.0, FileOptions::default()).expect("reopen");
    let mut parts = storage.open_shard(0).expect("reopen shard");
    check(&mut parts.log, 1);
}
