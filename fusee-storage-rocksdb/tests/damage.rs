//! The damage matrix of the RocksDB backend
//! (`fusee_storage_kv::testing::damage`): every file of a store (the
//! identity marker; RocksDB's `CURRENT`, `MANIFEST-*`, `OPTIONS-*`,
//! `IDENTITY`, WAL `*.log`, table `*.sst` and blob `*.blob` files; the
//! shard's log seal) flipped at spread offsets, cut short, deleted and
//! zeroed must give the exact data back or a named error.
//!
//! `FUSEE_DAMAGE_PAGES` bounds the offsets flipped per file (default 8).

mod common;

use std::path::Path;

use common::{Rocks, TempDir};
use fusee_storage_kv::testing::damage::{self, Case, Damage};
use fusee_storage_kv::testing::{Backend, env_or, file_names};
use fusee_storage_rocksdb::DIR_NAME;

const PHASES: u64 = 3;
/// Offsets flipped per file unless `FUSEE_DAMAGE_PAGES` says otherwise.
const FLIPS: u64 = 8;

/// The region a file of RocksDB's belongs to, by its name.
fn region(name: &str) -> &'static str {
    match name {
        "CURRENT" => CURRENT,
        "IDENTITY" => "IDENTITY",
        n if n.starts_with("MANIFEST-") => MANIFEST,
        n if n.starts_with("OPTIONS-") => "OPTIONS-*",
        n if n.ends_with(".log") => WAL,
        n if n.ends_with(".sst") => SST,
        n if n.ends_with(".blob") => BLOB,
        _ => "other",
    }
}

const CURRENT: &str = "CURRENT";
const MANIFEST: &str = "MANIFEST-*";
const WAL: &str = "WAL *.log";
const SST: &str = "table *.sst";
const BLOB: &str = "blob *.blob";

/// The cases of every data file of the database in `db` (not `LOCK` nor
/// RocksDB's diagnostic `LOG*`).
fn rocks_cases(db: &Path, flips: u64) -> Vec<Case> {
    let mut cases = Vec::new();
    let names = file_names(db);
    for name in names
        .iter()
        .filter(|n| *n != "LOCK" && !n.starts_with("LOG"))
    {
        let len = std::fs::metadata(db.join(name))
            .map(|m| m.len())
            .unwrap_or_else(|e| panic!("{e}"));
        let file = Path::new(DIR_NAME).join(name);
        let region = region(name);
        for at in damage::spread(len, flips, 0) {
            cases.push(Case::new(region, &file, Damage::Flip(at)));
        }
        for cut in [0, len / 2, len.saturating_sub(1)] {
            cases.push(Case::new(region, &file, Damage::Truncate(cut)));
        }
        cases.push(Case::new(region, &file, Damage::Delete));
        cases.push(Case::new(region, &file, Damage::Zero(0, len)));
        cases.push(Case::new(region, &file, Damage::Zero(len / 2, len)));
    }
    cases.extend(damage::marker_cases());
    cases.extend(damage::seal_cases());
    cases
}

/// Writes the phases of the damage matrix into `dir`, the last one
/// through a storage whose process dies (no clean close) if `crash`.
fn store(dir: &TempDir, crash: bool) {
    for phase in 0..PHASES - 1 {
        damage::write_phase::<Rocks>(dir.path(), phase);
    }
    if crash {
        let s = Rocks.open_crashable(dir.path());
        damage::write_phase_into(&s, PHASES - 1);
        Rocks.crash(s);
    } else {
        damage::write_phase::<Rocks>(dir.path(), PHASES - 1);
    }
}

/// A store closed cleanly after each phase: a clean close flushes the
/// memtables, so its data is in table and blob files (several of each) and
/// its WAL holds nothing.
#[test]
fn every_file_of_a_closed_store() {
    let dir = TempDir::new("damage-closed");
    store(&dir, false);
    let cases = rocks_cases(&dir.db(), env_or("DAMAGE", "PAGES", FLIPS));
    let kinds: Vec<&str> = cases.iter().map(|c| c.region.as_str()).collect();
    for kind in [SST, BLOB, MANIFEST, CURRENT] {
        assert!(kinds.contains(&kind), "no {kind} file in {kinds:?}");
    }
    damage::run::<Rocks>(dir.path(), PHASES, &cases);
}

/// A store whose process died after its last phase: that phase is in the
/// WAL only, which RocksDB replays at the next open. Every file, the WAL
/// included: RocksDB's point-in-time recovery stops at the first damaged
/// WAL record and drops what follows, which it cannot tell from the torn
/// tail of writes a power cut interrupted; the phase ends with a log
/// flush and a seal, so whatever the damage drops includes that flush,
/// and the shard's seal makes the open `LostRecords` instead of a shorter
/// log (issue 19).
#[test]
fn every_file_of_a_crashed_store() {
    let dir = TempDir::new("damage-crashed");
    store(&dir, true);
    let cases = rocks_cases(&dir.db(), env_or("DAMAGE", "PAGES", FLIPS));
    assert!(
        cases.iter().any(|c| c.region == WAL),
        "no WAL in the crashed store"
    );
    damage::run::<Rocks>(dir.path(), PHASES, &cases);
}
