//! The damage matrix both key-value backends run over their own files:
//! a storage holding a known data set ([`write_phase`]), copied, one region
//! of one file damaged in one way ([`Damage`]: a byte flipped, the file cut
//! short, deleted, or a range zeroed), then opened and read whole
//! ([`check`]). Every case must give the exact data back or a named error
//! of the vocabulary; less data (or other bytes) without an error fails
//! the test, naming the case.
//!
//! A backend lists its regions (redb: header, commit slots, each page;
//! RocksDB: each file) as [`Case`]s and calls [`run`], which prints the
//! matrix (region × damage → outcome) and fails listing every case that
//! lost data silently.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fusee_core::record::Lsn;
use fusee_core::shard::BlobRef;
use fusee_storage::{
    CheckpointStore, INDEX_RECORD, IndexChange, LogStore, RunStore, Storage, StorageError,
};

use super::{Backend, TempDir, must};

/// One way to damage a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// The byte at this offset inverted.
    Flip(u64),
    /// The file cut to this length.
    Truncate(u64),
    /// The file deleted.
    Delete,
    /// Bytes `from..to` set to zero (clamped to the file).
    Zero(u64, u64),
}

impl Damage {
    /// The kind's name, for the matrix.
    pub fn kind(&self) -> &'static str {
        match self {
            Damage::Flip(_) => "flip",
            Damage::Truncate(_) => "truncate",
            Damage::Delete => "delete",
            Damage::Zero(..) => "zero",
        }
    }

    /// Applies the damage to the file at `path`.
    pub fn apply(&self, path: &Path) {
        match *self {
            Damage::Delete => std::fs::remove_file(path)
                .unwrap_or_else(|e| panic!("damaging {path:?} ({self:?}): {e}")),
            Damage::Truncate(len) => std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(len))
                .unwrap_or_else(|e| panic!("damaging {path:?} ({self:?}): {e}")),
            Damage::Flip(at) | Damage::Zero(at, _) => {
                let mut bytes = std::fs::read(path)
                    .unwrap_or_else(|e| panic!("damaging {path:?} ({self:?}): {e}"));
                let len = bytes.len();
                let from = usize::try_from(at).unwrap_or(usize::MAX).min(len);
                match *self {
                    Damage::Flip(_) if from < len => bytes[from] ^= 0xFF,
                    Damage::Zero(_, to) => {
                        let to = usize::try_from(to).unwrap_or(usize::MAX).min(len);
                        bytes[from..to.max(from)].fill(0);
                    }
                    _ => {}
                }
                std::fs::write(path, bytes)
                    .unwrap_or_else(|e| panic!("damaging {path:?} ({self:?}): {e}"));
            }
        }
    }
}

/// One case of the matrix: a region of a file, damaged one way.
#[derive(Clone, Debug)]
pub struct Case {
    /// The region's name (`header`, `data page 17`, `*.sst`, ...).
    pub region: String,
    /// The file, relative to the storage's directory.
    pub file: PathBuf,
    /// The damage.
    pub damage: Damage,
}

impl Case {
    /// A case.
    pub fn new(region: impl Into<String>, file: impl Into<PathBuf>, damage: Damage) -> Self {
        Self {
            region: region.into(),
            file: file.into(),
            damage,
        }
    }
}

/// The cases of the store's identity marker (`FUSEE`): flipped in its
/// magic and its version, cut short, zeroed, deleted.
pub fn marker_cases() -> Vec<Case> {
    [
        Damage::Flip(0),
        Damage::Flip(12),
        Damage::Truncate(10),
        Damage::Zero(0, 64),
        Damage::Delete,
    ]
    .into_iter()
    .map(|damage| Case::new("identity marker", fusee_storage::identity::MARKER, damage))
    .collect()
}

/// The cases of shard 0's seal file (`seal-0000000000`, [`crate::seal`]):
/// each slot flipped, the file cut short (to nothing, inside slot 1),
/// zeroed, deleted. One slot damaged leaves the other; a seal gone is
/// "never sealed": each gives the exact data back.
pub fn seal_cases() -> Vec<Case> {
    let seal = crate::seal_path(Path::new("db"), 0);
    let name = seal.file_name().map(PathBuf::from).unwrap_or_default();
    [
        Damage::Flip(0),
        Damage::Flip(30),
        Damage::Flip(4096 + 20),
        Damage::Truncate(0),
        Damage::Truncate(4096 + 10),
        Damage::Zero(0, 8192),
        Damage::Delete,
    ]
    .into_iter()
    .map(|damage| Case::new("log seal", &name, damage))
    .collect()
}

/// Records of phase `phase` (LSNs `100 * phase + 1 ..= 100 * phase + 100`).
fn record(lsn: Lsn) -> Vec<u8> {
    let mut r = vec![(lsn % 251) as u8; 150 + (lsn % 100) as usize];
    r[..8].copy_from_slice(&lsn.to_le_bytes());
    r
}

/// Frame `i` (numbered from 0 across phases): small ones and, every
/// fifth, one above RocksDB's blob threshold.
fn frame(i: u64) -> Vec<u8> {
    let len = if i % 5 == 4 { 6000 } else { 900 };
    let mut f = vec![(i * 13 % 251) as u8; len];
    f[..8].copy_from_slice(&i.to_le_bytes());
    f
}

/// The index record of `run`.
fn index_record(run: u64) -> [u8; INDEX_RECORD] {
    let mut r = [(run % 200) as u8; INDEX_RECORD];
    r[8..16].copy_from_slice(&(run | 1 << 48).to_le_bytes());
    r
}

/// Records, frames and index records each phase adds.
const RECORDS: u64 = 100;
const FRAMES: u64 = 10;
const RUNS: u64 = 100;

/// Adds phase `phase` (0, 1, ...) to shard 0 of the storage in `dir` and
/// closes it: [`write_phase_into`] on a storage [`Backend::open`] opens.
/// Phase 0 creates the storage.
pub fn write_phase<B: Backend>(dir: &Path, phase: u64) {
    let s = must(B::open(dir), "open");
    write_phase_into(&s, phase);
    must(s.close(), "close");
}

/// Adds phase `phase` to shard 0 of `s`, in the engine's order: 10 frames
/// and 100 index records in one commit whose checkpoint names the phase,
/// then 100 log records in two flushes, then a seal (what the engine does
/// once its log is idle). The last durable write of a phase is a log
/// flush, so damage that rolls the database back by one durable write
/// loses acknowledged records the seal covers.
pub fn write_phase_into<S: Storage>(s: &S, phase: u64) {
    let mut p = must(s.open_shard(0), "open_shard");
    for i in phase * FRAMES..(phase + 1) * FRAMES {
        let blob = must(p.runs.append(&frame(i)), "frame");
        assert_eq!(blob.offset, i, "frame numbers");
    }
    let index: Vec<u8> = (phase * RUNS..(phase + 1) * RUNS)
        .flat_map(index_record)
        .collect();
    must(
        p.checkpoint.commit(
            &mut p.runs,
            IndexChange::Delta(&index),
            format!("phase {phase}").as_bytes(),
        ),
        "commit",
    );
    let first = phase * RECORDS + 1;
    for lsn in first..first + RECORDS {
        must(p.log.append(lsn, &record(lsn)), "append");
        if lsn == first + RECORDS / 2 {
            must(p.log.flush(), "flush");
        }
    }
    must(p.log.flush(), "flush");
    assert_eq!(
        must(p.log.seal(), "seal"),
        first + RECORDS - 1,
        "the seal covers the phase's records"
    );
}

/// What the storage in `dir`, written by phases `0..phases`, gives back:
/// `Ok` if exactly the data written, the error if opening or reading fails.
/// Panics naming `case` if anything comes back without an error but
/// differs: a record, frame or index record missing or changed, an older
/// checkpoint, a shorter log.
pub fn check<B: Backend>(dir: &Path, phases: u64, case: &str) -> Result<(), StorageError> {
    let s = B::open_existing(dir)?;
    let shards = s.shards()?;
    assert!(shards.contains(&0), "{case}: shard 0 is gone: {shards:?}");
    let mut p = s.open_shard(0)?;
    let want = format!("phase {}", phases - 1);
    assert_eq!(
        p.recovered.checkpoint.as_deref(),
        Some(want.as_bytes()),
        "{case}: the checkpoint"
    );
    let last = phases * RECORDS;
    assert_eq!(p.log.last_lsn(), last, "{case}: the last LSN");
    let mut next = 1;
    let end = p.log.read(0, &mut |lsn, bytes| {
        assert!(
            lsn == next && bytes == record(lsn),
            "{case}: record {lsn} (expected {next}) came back other"
        );
        next += 1;
        Ok(())
    })?;
    assert_eq!((end, next), (last, last + 1), "{case}: records read");
    let mut index = BTreeMap::new();
    let n = p.checkpoint.read_index(&mut |chunk| {
        for r in chunk.chunks_exact(INDEX_RECORD) {
            let record: [u8; INDEX_RECORD] = r.try_into().unwrap_or([0; INDEX_RECORD]);
            let run = fusee_storage::index_record_run(&record);
            assert!(
                r == index_record(run),
                "{case}: index record of run {run} changed"
            );
            index.insert(run, ());
        }
        Ok(())
    })?;
    assert_eq!(
        (n, index.len() as u64),
        (phases * RUNS, phases * RUNS),
        "{case}: index records"
    );
    let mut out = Vec::new();
    for i in 0..phases * FRAMES {
        let want = frame(i);
        let blob = BlobRef {
            offset: i,
            len: want.len() as u32,
        };
        p.runs.read(blob, &mut out)?;
        assert!(out == want, "{case}: frame {i} changed");
    }
    Ok(())
}

/// Whether `e` is a named error that says the store is damaged, foreign or
/// of another format (what damage must give).
pub fn is_named(e: &StorageError) -> bool {
    matches!(
        e,
        StorageError::Corrupt { .. }
            | StorageError::CorruptFile { .. }
            | StorageError::UnsupportedFormat { .. }
            | StorageError::NotAStore { .. }
            | StorageError::NotFound { .. }
            | StorageError::WrongBackend { .. }
            | StorageError::LostRecords { .. }
    )
}

/// The variant's name of `e`, for the matrix.
fn variant(e: &StorageError) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Runs every case of `cases` on a copy of the storage in `pristine`
/// (written by phases `0..phases`), prints the matrix, and panics listing
/// every case that gave less or other data without an error, or an error
/// outside [`is_named`].
pub fn run<B: Backend>(pristine: &Path, phases: u64, cases: &[Case]) {
    {
        // On a copy: opening the store changes it (a repair, a clean close).
        let dir = TempDir::new(B::NAME, "undamaged");
        copy_dir(pristine, &dir.0);
        check::<B>(&dir.0, phases, "undamaged").unwrap_or_else(|e| panic!("undamaged: {e}"));
    }
    let mut matrix: BTreeMap<(String, &'static str), BTreeMap<String, usize>> = BTreeMap::new();
    let mut failures = Vec::new();
    for case in cases {
        let dir = TempDir::new(B::NAME, "damage");
        copy_dir(pristine, &dir.0);
        case.damage.apply(&dir.0.join(&case.file));
        let name = format!("{} {:?} ({:?})", case.region, case.damage, case.file);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check::<B>(&dir.0, phases, &name)
        }));
        let cell = match outcome {
            Ok(Ok(())) => "exact".to_string(),
            Ok(Err(e)) if is_named(&e) => variant(&e),
            Ok(Err(e)) => {
                failures.push(format!(
                    "{name}: an error outside the vocabulary of damage: {e:?}"
                ));
                format!("OTHER {}", variant(&e))
            }
            Err(panic) => {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(why);
                "LOST".to_string()
            }
        };
        *matrix
            .entry((case.region.clone(), case.damage.kind()))
            .or_default()
            .entry(cell)
            .or_default() += 1;
    }
    let mut table = format!("{} damage matrix ({} cases):\n", B::NAME, cases.len());
    for ((region, kind), cells) in &matrix {
        let cells: Vec<String> = cells.iter().map(|(c, n)| format!("{c} ×{n}")).collect();
        table.push_str(&format!("  {region:<28} {kind:<9} {}\n", cells.join(", ")));
    }
    eprintln!("{table}");
    assert!(
        failures.is_empty(),
        "{} of {} damage cases lost data or failed otherwise:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Copies directory `from` into `to` (regular files and subdirectories;
/// `LOCK` files are left behind, as a copy of a closed store would).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("mkdir {to:?}: {e}"));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{from:?}: {e}")) {
        let entry = entry.unwrap_or_else(|e| panic!("{e}"));
        let kind = entry.file_type().unwrap_or_else(|e| panic!("{e}"));
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), &target).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// Up to `n` offsets spread evenly over a file of `len` bytes (each in a
/// different stretch of it), starting with `first` and ending with the
/// last byte.
pub fn spread(len: u64, n: u64, first: u64) -> Vec<u64> {
    if len == 0 {
        return Vec::new();
    }
    let n = n.clamp(1, len);
    let mut at: Vec<u64> = (0..n).map(|i| first.min(len - 1) + i * (len / n)).collect();
    at.push(len - 1);
    at.retain(|&a| a < len);
    at.sort_unstable();
    at.dedup();
    at
}
