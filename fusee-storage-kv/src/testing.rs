//! Test bodies both key-value backends run against their own engine
//! (feature `testing`): what reaches stable storage outside a commit or
//! flush is cut at open, damaged and moved values are `Corrupt`, foreign,
//! damaged and other-format directories and format rows are the named
//! errors, and bit flips give errors or exact bytes; the damage matrix
//! ([`damage`]); and [`KvHarness`], the conformance harness (whose
//! ownership clauses check the lock in this process and a child one).
//!
//! A backend implements [`Backend`] (how to open, crash, and read or write
//! its tables behind the storage's back) in its tests and calls each body
//! from a `#[test]`. What only one engine has (redb's panics on damaged
//! pages, RocksDB's foreign column families, garbage `CURRENT` files)
//! stays in that backend's tests.
//!
//! Every body panics with the seed and what differed on failure; they use
//! `unwrap_or_else(|e| panic!(..))` on purpose (a test's failure is a panic).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use fusee_core::shard::BlobRef;
use fusee_storage::conformance::{Capabilities, Harness, LockChecks};
use fusee_storage::{
    CheckpointStore, INDEX_RECORD, IndexChange, LogStore, RunStore, ShardParts, Storage,
    StorageError,
};

use crate::checkpoint::BASE_SPILL;
use crate::layout::{TAG_COMMIT, TAG_LOG, meta_key, seq_key};
use crate::log::LOG_SPILL_BYTES;
use crate::runs::SPILL_BYTES;

pub mod damage;

/// A table of the shared layout, for raw access behind the storage's back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// Log records.
    Log,
    /// Run-store frames.
    Store,
    /// Index records.
    Index,
    /// Meta rows.
    Meta,
}

/// Rows of one shard in the log, store and index tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    /// Log records.
    pub log: usize,
    /// Store frames.
    pub frames: usize,
    /// Index records (of every generation).
    pub index: usize,
}

/// A backend under test.
pub trait Backend {
    /// Its storage.
    type S: Storage;

    /// Short name, for temporary directories and environment variables
    /// (`FUSEE_{ENV}_SEED`, `FUSEE_{ENV}_FLIP_ROUNDS`).
    const NAME: &'static str;
    /// `NAME` in capitals, for environment variables.
    const ENV: &'static str;
    /// Whether writes that were not durable survive a process crash (RocksDB:
    /// they are in the WAL file; redb: only its last durable commit counts).
    const UNSYNCED_SURVIVE_CRASH: bool;
    /// The layout version the backend writes.
    const FORMAT_VERSION: u32;
    /// Default rounds of [`bit_flips_are_errors_or_exact_bytes`].
    const FLIP_ROUNDS: u64;
    /// Most bits it flips per round.
    const FLIP_BITS: u64;
    /// Bytes of each frame it writes (RocksDB: above the blob threshold, so
    /// blob files are flipped too).
    const FLIP_FRAME_LEN: usize;

    /// Opens the storage in `dir` as the application would (creating it if
    /// missing).
    fn open(dir: &Path) -> fusee_storage::Result<Self::S>;

    /// Opens the storage in `dir` only if it exists
    /// ([`fusee_storage::identity::Create::Never`]).
    fn open_existing(dir: &Path) -> fusee_storage::Result<Self::S>;

    /// The engine's database inside a storage directory (redb: the file;
    /// RocksDB: the directory).
    fn database(dir: &Path) -> PathBuf;

    /// Empties the engine's database of the (closed) storage in `dir` as a
    /// copy gone wrong would (redb: the file cut to 0 bytes; RocksDB: every
    /// file of the directory deleted).
    fn empty_database(dir: &Path);

    /// Opens the storage in `dir` so that [`Backend::crash`] can crash it.
    fn open_crashable(&mut self, dir: &Path) -> Self::S;

    /// Ends `s` as a process crash would: nothing more reaches the files.
    fn crash(&mut self, s: Self::S);

    /// The format marker value of this version.
    fn format_value() -> [u8; 12];

    /// Writes the format marker of the (closed) storage in `dir`.
    fn set_marker(dir: &Path, value: &[u8]);

    /// The value under `key` in `table` of the (closed) storage in `dir`.
    fn raw_get(dir: &Path, table: Table, key: &[u8]) -> Option<Vec<u8>>;

    /// Writes `value` under `key` in `table` of the (closed) storage in
    /// `dir`.
    fn raw_put(dir: &Path, table: Table, key: &[u8], value: &[u8]);

    /// Deletes the meta row under `key` of the (closed) storage in `dir`.
    fn raw_delete_meta(dir: &Path, key: &[u8]);

    /// Rows of `shard` in the (closed) storage in `dir`.
    fn raw_rows(dir: &Path, shard: u32) -> Rows;

    /// Arms the storage's switch that fails the next flush of `shard`.
    fn fail_next_flush(s: &Self::S, shard: u32);

    /// Arms the storage's switch that fails the next commit of `shard`.
    fn fail_next_commit(s: &Self::S, shard: u32);

    /// Arms the storage's switch that fails the next base write of `shard`
    /// (a spill, or clearing an abandoned base).
    fn fail_next_base_write(s: &Self::S, shard: u32);

    /// Arms the storage's switch that crashes the next commit of `shard` at
    /// point `step` (of [`crate::COMMIT_CRASH_POINTS`]).
    fn crash_in_commit(s: &Self::S, shard: u32, step: u32);
}

/// The conformance harness of backend `B` over a temporary directory
/// (removed on drop): every [`Harness::open`] uses a fresh subdirectory, a
/// crash is [`Backend::crash`] (a process crash, not a power cut: unsynced
/// writes are not torn), faults are the backend's own switches, which fail
/// a flush or commit before anything is written. The ownership clauses
/// open the storage again at its directory with [`Backend::open_existing`],
/// in this process and in a child one.
#[derive(Debug)]
pub struct KvHarness<B> {
    backend: B,
    root: TempDir,
    opened: u64,
}

impl<B: Backend> KvHarness<B> {
    /// A harness running `backend`.
    pub fn new(backend: B) -> Self {
        Self {
            backend,
            root: TempDir::new(B::NAME, "conformance"),
            opened: 0,
        }
    }

    fn open_dir(&mut self) -> B::S {
        let dir = self.location();
        self.backend.open_crashable(&dir)
    }
}

impl<B: Backend> Harness for KvHarness<B> {
    type S = B::S;

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fault_injection: true,
            power_loss: false,
            commit_crash_points: crate::COMMIT_CRASH_POINTS,
            overlapping_flushes: false,
        }
    }

    fn open(&mut self) -> B::S {
        self.opened += 1;
        self.open_dir()
    }

    fn reopen(&mut self, s: B::S) -> B::S {
        s.close().unwrap_or_else(|e| panic!("close: {e}"));
        drop(s);
        self.open_dir()
    }

    fn crash(&mut self, s: B::S) -> B::S {
        self.backend.crash(s);
        self.open_dir()
    }

    fn fail_next_flush(&mut self, s: &B::S, shard: u32) {
        B::fail_next_flush(s, shard);
    }

    fn fail_next_commit(&mut self, s: &B::S, shard: u32) {
        B::fail_next_commit(s, shard);
    }

    fn crash_in_commit(&mut self, s: &B::S, shard: u32, step: u32) {
        B::crash_in_commit(s, shard, step);
    }

    fn lock_checks(&self) -> LockChecks {
        LockChecks {
            same_process: true,
            child_process: true,
        }
    }

    fn location(&self) -> PathBuf {
        self.root.0.join(self.opened.to_string())
    }

    fn open_at(&mut self, path: &Path) -> fusee_storage::Result<B::S> {
        // Open only: the store exists wherever the suite asks.
        B::open_existing(path)
    }
}

/// A temporary directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory named after `backend`, `name`, the process and
    /// a counter.
    pub fn new(backend: &str, name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fusee-{backend}-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {dir:?}: {e}"));
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `FUSEE_{env}_{var}` parsed, or `default`.
pub fn env_or(env: &str, var: &str, default: u64) -> u64 {
    std::env::var(format!("FUSEE_{env}_{var}"))
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// An index record of `run` (state live).
pub fn index_record(run: u64) -> [u8; INDEX_RECORD] {
    let mut r = [3u8; INDEX_RECORD];
    r[8..16].copy_from_slice(&(run | 1 << 48).to_le_bytes());
    r
}

fn must<T>(r: fusee_storage::Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Commits one frame and one index record on shard 0, then spills four
/// frames and a base (writes that are not durable), then (if
/// `other_flushes`) has a log flush of shard 1 make them durable; returns
/// the committed frame.
fn spill<S: Storage>(s: &S, other_flushes: bool) -> BlobRef {
    let mut p = must(s.open_shard(0), "open_shard");
    let kept = must(p.runs.append(b"committed"), "append");
    must(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&index_record(1)), b"one"),
        "commit",
    );
    let big = vec![7u8; SPILL_BYTES / 4 + 1];
    for _ in 0..4 {
        must(p.runs.append(&big), "append");
    }
    must(p.checkpoint.begin_base(), "begin_base");
    let base: Vec<u8> = (0..BASE_SPILL as u64).flat_map(index_record).collect();
    must(p.checkpoint.base_chunk(&base), "base_chunk");
    if other_flushes {
        let mut other = must(s.open_shard(1), "open_shard 1");
        must(other.log.append(1, b"x"), "append");
        must(other.log.flush(), "flush");
    }
    kept
}

/// Every record shard part `p`'s log reads back from its start.
fn log_records<S: Storage>(p: &mut ShardParts<S>) -> Vec<(u64, Vec<u8>)> {
    let mut all = Vec::new();
    must(
        p.log.read(p.log.first_lsn() - 1, &mut |lsn, bytes| {
            all.push((lsn, bytes.to_vec()));
            Ok(())
        }),
        "read the log",
    );
    all
}

/// The names in directory `dir`, sorted.
pub fn file_names(dir: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("listing {dir:?}: {e}"));
    let mut names: Vec<String> = entries
        .map(|e| {
            let e = e.unwrap_or_else(|e| panic!("listing {dir:?}: {e}"));
            e.file_name().to_string_lossy().into_owned()
        })
        .collect();
    names.sort();
    names
}

/// How many records shard part `p`'s index reads back.
fn index_count<S: Storage>(p: &mut ShardParts<S>) -> usize {
    let mut n = 0;
    must(
        p.checkpoint.read_index(&mut |c| {
            n += c.len() / INDEX_RECORD;
            Ok(())
        }),
        "read_index",
    );
    n
}

/// Frames and a base spilled outside a commit, whether or not another
/// shard's durable write followed them: after a crash the storage holds
/// them or not (as the engine keeps writes that were not durable), and
/// opening the shard leaves exactly the last commit.
pub fn leftovers_are_removed_at_open<B: Backend>(backend: &mut B, other_flushes: bool) {
    let dir = TempDir::new(B::NAME, "leftovers");
    let s = backend.open_crashable(&dir.0);
    let kept = spill(&s, other_flushes);
    backend.crash(s);
    let rows = B::raw_rows(&dir.0, 0);
    let (frames, index) = if other_flushes || B::UNSYNCED_SURVIVE_CRASH {
        (5, 1 + BASE_SPILL)
    } else {
        (1, 1)
    };
    assert_eq!(
        (rows.frames, rows.index),
        (frames, index),
        "rows after the crash (other flush: {other_flushes})"
    );
    let s = must(B::open(&dir.0), "reopen");
    let mut p = must(s.open_shard(0), "open_shard");
    assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"one"[..]));
    assert_eq!((p.recovered.index_records, p.runs.position()), (1, 1));
    let mut out = Vec::new();
    must(p.runs.read(kept, &mut out), "read");
    assert_eq!(out, b"committed");
    assert_eq!(index_count(&mut p), 1);
    drop(p);
    must(s.close(), "close");
    drop(s);
    let rows = B::raw_rows(&dir.0, 0);
    assert_eq!(
        (rows.frames, rows.index),
        (1, 1),
        "open deleted the leftovers"
    );
}

/// A base write that fails leaves rows of unknown extent under the next
/// generation: the checkpoint part latches, whether the failed write was a
/// spill (`base_chunk`) or the clearing of an abandoned base that had
/// spilled (`begin_base`), so no later base can count those rows as its
/// own; a reopen reads the last commit whole.
pub fn failed_base_writes_latch<B: Backend>() {
    let latched = |r: Result<(), StorageError>, what: &str| {
        assert!(
            matches!(r, Err(StorageError::Latched { .. })),
            "{what} after a failed base write: {r:?}"
        );
    };
    let base: Vec<u8> = (0..BASE_SPILL as u64).flat_map(index_record).collect();
    for clearing in [false, true] {
        let dir = TempDir::new(B::NAME, "basefail");
        let s = must(B::open(&dir.0), "open");
        let mut p = must(s.open_shard(0), "open_shard");
        must(
            p.checkpoint
                .commit(&mut p.runs, IndexChange::Delta(&index_record(1)), b"one"),
            "commit",
        );
        must(p.checkpoint.begin_base(), "begin_base");
        if clearing {
            // A base that spilled, abandoned by the next begin_base.
            must(p.checkpoint.base_chunk(&base), "base_chunk");
            B::fail_next_base_write(&s, 0);
            assert!(p.checkpoint.begin_base().is_err(), "the clear failed");
        } else {
            B::fail_next_base_write(&s, 0);
            assert!(p.checkpoint.base_chunk(&base).is_err(), "the spill failed");
        }
        latched(p.checkpoint.begin_base(), "begin_base");
        latched(p.checkpoint.base_chunk(&base), "base_chunk");
        let commit = p
            .checkpoint
            .commit(&mut p.runs, IndexChange::Base, b"two")
            .map(|_| ());
        latched(commit, "commit");
        drop(p);
        let mut p = must(s.open_shard(0), "reopen the shard");
        assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"one"[..]));
        assert_eq!(index_count(&mut p), 1, "clearing: {clearing}");
        drop(p);
        must(s.close(), "close");
    }
}

/// Unflushed records past `LOG_SPILL_BYTES` are written without
/// durability: reads see them all and the durable LSN does not move. After
/// a crash the log holds exactly the flushed records, even when another
/// shard's flush made the spilled ones durable (opening the shard deletes
/// them).
pub fn log_spill_is_cut_at_open<B: Backend>(backend: &mut B, other_flushes: bool) {
    let rec = |lsn: u64| vec![(lsn % 251) as u8; 1 << 20];
    let spilled = (LOG_SPILL_BYTES >> 20) as u64;
    let n = spilled + 4;
    let dir = TempDir::new(B::NAME, "logspill");
    let s = backend.open_crashable(&dir.0);
    let mut p = must(s.open_shard(0), "open_shard");
    must(p.log.append(1, b"flushed"), "append");
    must(p.log.flush(), "flush");
    for lsn in 2..=n {
        must(p.log.append(lsn, &rec(lsn)), "append");
    }
    assert_eq!((p.log.last_lsn(), p.log.durable_lsn()), (n, 1));
    let mut seen = 0;
    must(
        p.log.read(1, &mut |lsn, bytes| {
            seen += 1;
            assert!(lsn == seen + 1 && bytes == rec(lsn), "record {lsn}");
            Ok(())
        }),
        "read",
    );
    assert_eq!(seen, n - 1);
    if other_flushes {
        let mut q = must(s.open_shard(1), "open_shard 1");
        must(q.log.append(1, b"x"), "append");
        must(q.log.flush(), "flush");
    }
    drop(p);
    backend.crash(s);
    let stored = B::raw_rows(&dir.0, 0).log as u64;
    let want = if other_flushes || B::UNSYNCED_SURVIVE_CRASH {
        1 + spilled
    } else {
        1
    };
    assert!(
        stored >= want,
        "{stored} records stored, expected at least {want} (other flush: {other_flushes})"
    );
    let s = must(B::open(&dir.0), "reopen");
    let mut p = must(s.open_shard(0), "open_shard");
    assert_eq!(
        p.log.last_lsn(),
        1,
        "unflushed records survived (other flush: {other_flushes})"
    );
    assert_eq!(log_records(&mut p), [(1, b"flushed".to_vec())]);
    // Appends continue after the flushed record.
    must(p.log.append(2, b"again"), "append");
    assert_eq!(p.log.flush().ok(), Some(2));
}

/// The error of opening `dir`; panics if the open succeeds.
pub fn open_err<B: Backend>(dir: &Path) -> StorageError {
    match B::open(dir) {
        Ok(_) => panic!("opening {dir:?} succeeded"),
        Err(e) => e,
    }
}

/// Writes a storage with one flushed record, one frame and one commit.
pub fn populate<B: Backend>(dir: &Path) {
    populate_with::<B>(dir, &[b"one"], &[b"frame"]);
}

/// Writes a storage whose shard 0 holds `records` (LSNs 1, 2, ...;
/// flushed) and `frames` (numbers 0, 1, ...), committed with checkpoint
/// `ck`, and closes it.
fn populate_with<B: Backend>(dir: &Path, records: &[&[u8]], frames: &[&[u8]]) {
    let s = must(B::open(dir), "open");
    let mut p = must(s.open_shard(0), "open_shard");
    for (lsn, record) in (1..).zip(records) {
        must(p.log.append(lsn, record), "append");
    }
    must(p.log.flush(), "flush");
    for frame in frames {
        must(p.runs.append(frame), "frame");
    }
    must(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&[]), b"ck"),
        "commit",
    );
    drop(p);
    must(s.close(), "close");
}

/// Checks that the storage [`populate`] wrote in `dir` opens with all of
/// it: the record, the frame and the checkpoint.
pub fn check_populated<B: Backend>(dir: &Path) {
    let s = must(B::open(dir), "open a populated storage");
    let mut p = must(s.open_shard(0), "open_shard");
    assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"ck"[..]));
    assert_eq!(log_records(&mut p), [(1, b"one".to_vec())]);
    let mut out = Vec::new();
    must(
        p.runs.read(BlobRef { offset: 0, len: 5 }, &mut out),
        "read the frame",
    );
    assert_eq!(out, b"frame");
}

/// Panics, saying what `$case` expected and what it found, unless
/// `$result` is an error matching `$pattern` (and `$guard`).
macro_rules! refused {
    ($result:expr, $case:expr, $pattern:pat $(if $guard:expr)?) => {
        match $result {
            Err($pattern) $(if $guard)? => {}
            Err(e) => panic!("{}: expected {}, found {e:?} ({e})", $case, stringify!($pattern)),
            Ok(_) => panic!("{}: expected {}, but it succeeded", $case, stringify!($pattern)),
        }
    };
}

/// A layout version in the format row other than this build's is
/// `UnsupportedFormat` (older or newer); a format row of another program
/// is `CorruptFile`; the right one opens again with everything.
pub fn other_format_rows_are_refused<B: Backend>() {
    let dir = TempDir::new(B::NAME, "format");
    populate::<B>(&dir.0);
    for version in [B::FORMAT_VERSION - 1, B::FORMAT_VERSION + 1] {
        let mut other = B::format_value();
        other[8..].copy_from_slice(&version.to_le_bytes());
        B::set_marker(&dir.0, &other);
        refused!(
            B::open(&dir.0).map(drop),
            format!("format row of version {version}"),
            StorageError::UnsupportedFormat { found, supported, .. }
                if found == version && supported == B::FORMAT_VERSION
        );
    }
    B::set_marker(&dir.0, b"SOMEONE-ELSE");
    refused!(
        B::open(&dir.0).map(drop),
        "a foreign format row",
        StorageError::CorruptFile { .. }
    );
    B::set_marker(&dir.0, &B::format_value());
    check_populated::<B>(&dir.0);
}

/// Every directory that is not this backend's store, and every store whose
/// database is gone or emptied, is the named error of the vocabulary, and
/// nothing is written into a directory that is not a store of this
/// backend.
pub fn foreign_and_damaged_directories_are_refused<B: Backend>() {
    use fusee_storage::identity::{Create, MARKER, claim_dir};
    let root = TempDir::new(B::NAME, "identity");

    // An empty path would mean the current directory.
    refused!(
        B::open(Path::new("")).map(drop),
        "the empty path",
        StorageError::NotAStore { .. }
    );
    // Another backend's store.
    let other = root.0.join("other");
    must(
        claim_dir(&other, "file", 1, Create::IfMissing, &[]),
        "a file-backend marker",
    );
    refused!(
        B::open(&other).map(drop),
        "another backend's store",
        StorageError::WrongBackend { found, expected, .. }
            if found == "file" && expected == B::NAME
    );
    assert_eq!(
        file_names(&other),
        [MARKER],
        "nothing written beside the marker"
    );
    // Another program's files.
    let foreign = root.0.join("foreign");
    std::fs::create_dir_all(&foreign).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(foreign.join("notes.txt"), b"mine").unwrap_or_else(|e| panic!("{e}"));
    refused!(
        B::open(&foreign).map(drop),
        "a directory of other files",
        StorageError::NotAStore { .. }
    );
    assert_eq!(file_names(&foreign), ["notes.txt"], "nothing written");
    // A file where the directory belongs.
    refused!(
        B::open(&foreign.join("notes.txt")).map(drop),
        "a file",
        StorageError::NotAStore { .. }
    );
    // Open-only: a missing and an empty directory are NotFound, and stay so.
    let missing = root.0.join("missing");
    refused!(
        B::open_existing(&missing).map(drop),
        "open-only, missing",
        StorageError::NotFound { .. }
    );
    assert!(!missing.exists(), "open-only created the directory");
    let empty = root.0.join("empty");
    std::fs::create_dir_all(&empty).unwrap_or_else(|e| panic!("{e}"));
    refused!(
        B::open_existing(&empty).map(drop),
        "open-only, empty",
        StorageError::NotFound { .. }
    );
    assert!(
        file_names(&empty).is_empty(),
        "open-only wrote into an empty directory"
    );
    // A store: open-only opens it.
    let store = root.0.join("store");
    populate::<B>(&store);
    drop(must(B::open_existing(&store), "open-only, a store"));
    // A damaged marker.
    let marker = store.join(MARKER);
    let good = std::fs::read(&marker).unwrap_or_else(|e| panic!("{e}"));
    let mut bad = good.clone();
    bad[10] ^= 0x10;
    std::fs::write(&marker, &bad).unwrap_or_else(|e| panic!("{e}"));
    refused!(
        B::open(&store).map(drop),
        "a damaged marker",
        StorageError::CorruptFile { file, .. } if file.ends_with(MARKER)
    );
    // A marker of another layout version.
    std::fs::remove_file(&marker).unwrap_or_else(|e| panic!("{e}"));
    let older = B::FORMAT_VERSION - 1;
    let db_name = B::database(&store);
    let db_name = db_name
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let own = [
        crate::store_dir::LOCK,
        db_name.as_deref().unwrap_or_default(),
    ];
    must(
        claim_dir(&store, B::NAME, older, Create::IfMissing, &own),
        "an older marker",
    );
    refused!(
        B::open(&store).map(drop),
        "a marker of an older version",
        StorageError::UnsupportedFormat { found, .. } if found == older
    );
    std::fs::write(&marker, &good).unwrap_or_else(|e| panic!("{e}"));
    check_populated::<B>(&store);
    // The database emptied, then deleted, under a valid marker.
    B::empty_database(&store);
    refused!(
        B::open(&store).map(drop),
        "the database emptied",
        StorageError::CorruptFile { .. } | StorageError::Corrupt { .. }
    );
    let db = B::database(&store);
    if db.is_dir() {
        std::fs::remove_dir_all(&db)
    } else {
        std::fs::remove_file(&db)
    }
    .unwrap_or_else(|e| panic!("{e}"));
    refused!(
        B::open(&store).map(drop),
        "the database deleted",
        StorageError::CorruptFile { file, .. } if Path::new(&file) == db
    );
    assert!(!db.exists(), "the open created a new database");
}

/// Damaged records, frames and rows are `Corrupt` errors naming what and
/// where; a damaged commit row fails the shard's open, every time.
pub fn damaged_values_are_corrupt<B: Backend>() {
    let dir = TempDir::new(B::NAME, "damaged");
    populate::<B>(&dir.0);
    let flip_last = |table: Table, key: &[u8]| {
        let mut v = B::raw_get(&dir.0, table, key)
            .unwrap_or_else(|| panic!("no value at {key:?} in {table:?}"));
        let last = v.len() - 1;
        v[last] ^= 0x40;
        B::raw_put(&dir.0, table, key, &v);
    };
    flip_last(Table::Log, &seq_key(0, 1));
    flip_last(Table::Store, &seq_key(0, 0));
    let s = must(B::open(&dir.0), "open");
    let mut p = must(s.open_shard(0), "open_shard");
    match p.log.read(0, &mut |_, _| Ok(())) {
        Err(StorageError::Corrupt { at: 1, .. }) => {}
        other => panic!("damaged record: {other:?}"),
    }
    let mut out = Vec::new();
    let blob = BlobRef { offset: 0, len: 5 };
    match p.runs.read(blob, &mut out) {
        Err(StorageError::Corrupt { at: 0, .. }) => {}
        other => panic!("damaged frame: {other:?}"),
    }
    drop(p);
    must(s.close(), "close");
    drop(s);
    B::raw_put(&dir.0, Table::Meta, &meta_key(0, TAG_COMMIT), b"short");
    // The storage checks every meta row when it opens.
    refused!(
        B::open(&dir.0).map(drop),
        "a damaged commit row",
        StorageError::Corrupt { at: 0, .. }
    );
}

/// Opens the storage in `dir` and then its shard 0: the first error, or
/// `Ok` (with what the shard recovered in the panic a caller's `refused!`
/// raises) if both open. A failed shard open must release the shard: a
/// second one fails the same way (`case` names it in that check).
fn open_shard_0<B: Backend>(dir: &Path, case: &str) -> fusee_storage::Result<()> {
    let s = B::open(dir)?;
    let e = match s.open_shard(0) {
        Err(e) => e,
        Ok(p) => {
            let (checkpoint, last) = (p.recovered.checkpoint.clone(), p.log.last_lsn());
            panic!("{case}: opened with checkpoint {checkpoint:?} and last LSN {last}");
        }
    };
    let again = s.open_shard(0).err().map(|e| e.to_string());
    assert_eq!(again, Some(e.to_string()), "{case}: a second open_shard");
    Err(e)
}

/// Values read under another key than the one they were written under
/// (what a damaged key does) are `Corrupt`: two frames of the same length
/// swapped, two log records swapped, a commit row moved to another shard.
/// Before keys were under the CRC, the first two read back each other's
/// bytes and the third opened the shard as never committed.
pub fn moved_values_are_corrupt<B: Backend>() {
    let dir = TempDir::new(B::NAME, "moved");
    populate_with::<B>(&dir.0, &[b"rec-1", b"rec-2"], &[b"frame-a", b"frame-b"]);
    let swap = |table: Table, a: &[u8], b: &[u8]| {
        let va = B::raw_get(&dir.0, table, a).unwrap_or_else(|| panic!("no {a:?}"));
        let vb = B::raw_get(&dir.0, table, b).unwrap_or_else(|| panic!("no {b:?}"));
        B::raw_put(&dir.0, table, a, &vb);
        B::raw_put(&dir.0, table, b, &va);
    };
    swap(Table::Store, &seq_key(0, 0), &seq_key(0, 1));
    swap(Table::Log, &seq_key(0, 1), &seq_key(0, 2));
    {
        let s = must(B::open(&dir.0), "open");
        let mut p = must(s.open_shard(0), "open_shard");
        let mut out = Vec::new();
        let r = p.runs.read(BlobRef { offset: 0, len: 7 }, &mut out);
        assert!(
            matches!(r, Err(StorageError::Corrupt { at: 0, .. })),
            "frame 0 holding frame 1's value: expected Corrupt, found {r:?} ({:?})",
            String::from_utf8_lossy(&out)
        );
        let mut seen = Vec::new();
        let r = p.log.read(0, &mut |lsn, bytes| {
            seen.push((lsn, bytes.to_vec()));
            Ok(())
        });
        assert!(
            matches!(r, Err(StorageError::Corrupt { at: 1, .. })),
            "record 1 holding record 2's value: expected Corrupt, found {r:?} after {seen:?}"
        );
        drop(p);
        must(s.close(), "close");
    }
    let row = B::raw_get(&dir.0, Table::Meta, &meta_key(0, TAG_COMMIT))
        .unwrap_or_else(|| panic!("no commit row"));
    B::raw_delete_meta(&dir.0, &meta_key(0, TAG_COMMIT));
    B::raw_put(&dir.0, Table::Meta, &meta_key(1, TAG_COMMIT), &row);
    let case = "the commit row moved to shard 1";
    refused!(
        open_shard_0::<B>(&dir.0, case),
        case,
        StorageError::Corrupt { .. }
    );
}

/// A meta row whose key was damaged (moved under another tag, or gone
/// while the shard's other rows remain) makes the shard's open `Corrupt`,
/// never a new or rolled-back shard whose cleanup deletes its records.
pub fn moved_meta_rows_are_corrupt<B: Backend>() {
    let cases = [
        ("log row under tag 3", TAG_LOG, Some(3)),
        ("log row under tag 0", TAG_LOG, Some(0)),
        ("commit row under tag 3", TAG_COMMIT, Some(3)),
        ("log row gone", TAG_LOG, None),
    ];
    for (case, tag, moved_to) in cases {
        let dir = TempDir::new(B::NAME, "meta");
        populate::<B>(&dir.0);
        let row = B::raw_get(&dir.0, Table::Meta, &meta_key(0, tag))
            .unwrap_or_else(|| panic!("{case}: no row"));
        B::raw_delete_meta(&dir.0, &meta_key(0, tag));
        if let Some(to) = moved_to {
            B::raw_put(&dir.0, Table::Meta, &meta_key(0, to), &row);
        }
        refused!(
            open_shard_0::<B>(&dir.0, case),
            case,
            StorageError::Corrupt { at: 0, .. }
        );
    }
}

/// The files under `dir` that hold data (relative path, bytes): every
/// non-empty regular file but locks and diagnostic logs, sorted.
fn data_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(rel) = dirs.pop() {
        let entries = std::fs::read_dir(dir.join(&rel)).unwrap_or_else(|e| panic!("{e}"));
        for entry in entries {
            let entry = entry.unwrap_or_else(|e| panic!("{e}"));
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = rel.join(&name);
            let kind = entry.file_type().unwrap_or_else(|e| panic!("{e}"));
            if kind.is_dir() {
                dirs.push(path);
            } else if name != "LOCK" && !name.starts_with("LOG") {
                let bytes = std::fs::read(entry.path()).unwrap_or_else(|e| panic!("{e}"));
                if !bytes.is_empty() {
                    files.push((path, bytes));
                }
            }
        }
    }
    files.sort();
    files
}

/// Bit flips in one data file of a populated storage: opening and reading
/// everything either fails with an error or returns exactly the bytes
/// written, never panics and never returns other bytes. Each round flips
/// 1 to [`Backend::FLIP_BITS`] bits; frames are [`Backend::FLIP_FRAME_LEN`]
/// bytes. Rounds: `FUSEE_{ENV}_FLIP_ROUNDS` (default
/// [`Backend::FLIP_ROUNDS`]); seed: `FUSEE_{ENV}_SEED`.
pub fn bit_flips_are_errors_or_exact_bytes<B: Backend>() {
    let (max_flips, frame_len) = (B::FLIP_BITS, B::FLIP_FRAME_LEN);
    let rounds = env_or(B::ENV, "FLIP_ROUNDS", B::FLIP_ROUNDS);
    let seed = env_or(B::ENV, "SEED", 0xF11B);
    let log_rec = |lsn: u64| vec![(lsn * 7) as u8; 200];
    let frame = |i: u64| vec![(i * 13) as u8; frame_len];
    let index_rec = |run: u64| {
        let mut r = [(run % 200) as u8; INDEX_RECORD];
        r[8..16].copy_from_slice(&(run | 1 << 48).to_le_bytes());
        r
    };
    let src = TempDir::new(B::NAME, "flip-src");
    {
        let s = must(B::open(&src.0), "open");
        let mut p = must(s.open_shard(0), "open_shard");
        for lsn in 1..=2000u64 {
            must(p.log.append(lsn, &log_rec(lsn)), "append");
            if lsn % 100 == 0 {
                must(p.log.flush(), "flush");
            }
        }
        let index: Vec<u8> = (0..3000).flat_map(index_rec).collect();
        for i in 0..200 {
            must(p.runs.append(&frame(i)), "frame");
        }
        must(
            p.checkpoint
                .commit(&mut p.runs, IndexChange::Delta(&index), b"ck"),
            "commit",
        );
        drop(p);
        must(s.close(), "close");
    }
    let files = data_files(&src.0);
    assert!(!files.is_empty(), "no data files in {:?}", src.0);
    let mut rng = fastrand::Rng::with_seed(seed);
    for round in 0..rounds {
        let dir = TempDir::new(B::NAME, "flip");
        let victim = rng.usize(0..files.len());
        for (i, (rel, bytes)) in files.iter().enumerate() {
            let mut bytes = bytes.clone();
            if i == victim {
                for _ in 0..=round % max_flips {
                    let at = rng.usize(0..bytes.len());
                    bytes[at] ^= 1 << rng.u8(0..8);
                }
            }
            let path = dir.0.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
            }
            std::fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
        }
        let what = format!("seed {seed} round {round} file {:?}", files[victim].0);
        let Ok(s) = B::open(&dir.0) else {
            continue;
        };
        let Ok(mut p) = s.open_shard(0) else {
            continue;
        };
        let _ = p.log.read(0, &mut |lsn, bytes| {
            assert!(bytes == log_rec(lsn), "{what}: record {lsn} changed");
            Ok(())
        });
        let _ = p.checkpoint.read_index(&mut |chunk| {
            for r in chunk.chunks_exact(INDEX_RECORD) {
                let mut run = [0u8; 8];
                run[..6].copy_from_slice(&r[8..14]);
                let run = u64::from_le_bytes(run);
                assert!(
                    r == index_rec(run),
                    "{what}: index record of run {run} changed"
                );
            }
            Ok(())
        });
        let mut out = Vec::new();
        for i in 0..200u64 {
            let blob = BlobRef {
                offset: i,
                len: frame_len as u32,
            };
            if p.runs.read(blob, &mut out).is_ok() {
                assert!(out == frame(i), "{what}: frame {i} changed");
            }
        }
    }
}

/// Expands, in module `$name`, one `#[test]` per shared body for backend
/// `$backend`, each on a fresh backend from `$factory` (crash bodies run
/// with and without another shard's durable write). A backend's test file
/// calls it once, next to `fusee_storage::conformance_suite!`.
#[macro_export]
macro_rules! kv_suite {
    ($name:ident, $backend:ty, $factory:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::testing;

            #[test]
            fn leftovers_are_removed_at_open() {
                for other_flushes in [false, true] {
                    testing::leftovers_are_removed_at_open(&mut ($factory)(), other_flushes);
                }
            }

            #[test]
            fn log_spill_is_cut_at_open() {
                for other_flushes in [false, true] {
                    testing::log_spill_is_cut_at_open(&mut ($factory)(), other_flushes);
                }
            }

            #[test]
            fn failed_base_writes_latch() {
                testing::failed_base_writes_latch::<$backend>();
            }

            #[test]
            fn other_format_rows_are_refused() {
                testing::other_format_rows_are_refused::<$backend>();
            }

            #[test]
            fn foreign_and_damaged_directories_are_refused() {
                testing::foreign_and_damaged_directories_are_refused::<$backend>();
            }

            #[test]
            fn damaged_values_are_corrupt() {
                testing::damaged_values_are_corrupt::<$backend>();
            }

            #[test]
            fn moved_values_are_corrupt() {
                testing::moved_values_are_corrupt::<$backend>();
            }

            #[test]
            fn moved_meta_rows_are_corrupt() {
                testing::moved_meta_rows_are_corrupt::<$backend>();
            }

            #[test]
            fn bit_flips_are_errors_or_exact_bytes() {
                testing::bit_flips_are_errors_or_exact_bytes::<$backend>();
            }
        }
    };
}
