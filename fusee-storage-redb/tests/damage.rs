//! The damage matrix of the redb backend (`fusee_storage_kv::testing::damage`):
//! every region of a store's files (the identity marker; redb's header,
//! its two commit slots and the rest of its first page; the region header
//! pages; every data page in turn; the file's end; the shard's log seal)
//! flipped, cut, deleted and zeroed must give the exact data back or a
//! named error.
//!
//! `FUSEE_DAMAGE_PAGES` bounds the pages flipped and zeroed one by one
//! (default: all of them, about 300).

mod common;

use common::{Redb, TempDir};
use fusee_storage_kv::testing::damage::{self, Case, Damage};
use std::sync::atomic::Ordering;

use fusee_storage_kv::testing::env_or;
use fusee_storage_redb::FILE_NAME;

const PAGE: u64 = 4096;
const PHASES: u64 = 3;
/// The region of redb's god byte.
const GOD_BYTE: &str = "header: god byte";

/// The cases of a redb file of `len` bytes whose regions have
/// `header_pages` header pages each.
fn redb_cases(len: u64, header_pages: u64, pages: u64, seed: u64) -> Vec<Case> {
    let mut cases = Vec::new();
    let file = FILE_NAME;
    let mut add = |region: &str, damage| cases.push(Case::new(region, file, damage));
    for (region, at) in [
        ("header: magic", 0),
        ("header: magic", 8),
        (GOD_BYTE, 9),
        ("header: page size", 13),
        ("header: region geometry", 17),
        ("header: region geometry", 21),
        ("header: full regions", 24),
        ("header: trailing pages", 28),
        ("header: unused", 40),
        ("commit slot 0", 64),
        ("commit slot 0", 72),
        ("commit slot 0", 120),
        ("commit slot 0", 190),
        ("commit slot 1", 192),
        ("commit slot 1", 200),
        ("commit slot 1", 248),
        ("commit slot 1", 318),
        ("page 0 after the slots", 2000),
    ] {
        add(region, Damage::Flip(at));
    }
    add("header: magic", Damage::Zero(0, 9));
    add("header: geometry", Damage::Zero(9, 64));
    add("commit slot 0", Damage::Zero(64, 192));
    add("commit slot 1", Damage::Zero(192, 320));
    add("page 0", Damage::Zero(0, PAGE));
    let mut rng = fastrand::Rng::with_seed(seed);
    let total = len / PAGE;
    let step = (total / pages.max(1)).max(1);
    for page in (1..total).step_by(step as usize) {
        let region = if page <= header_pages {
            "region header page"
        } else {
            "data page"
        };
        add(region, Damage::Flip(page * PAGE + rng.u64(0..PAGE)));
        add(region, Damage::Zero(page * PAGE, (page + 1) * PAGE));
    }
    for cut in [len - 1, len - PAGE, len / 2, PAGE, 320, 100, 0] {
        add("file end", Damage::Truncate(cut));
    }
    add("whole file", Damage::Delete);
    add("file end", Damage::Zero(len - PAGE, len));
    cases.extend(damage::marker_cases());
    cases.extend(damage::seal_cases());
    cases
}

/// The cases of the store in `dir`: its file's length and region header
/// pages (header bytes 16..20) read from it; pages bounded by
/// `FUSEE_DAMAGE_PAGES`, offsets in them drawn with `FUSEE_DAMAGE_SEED`.
fn cases_of(dir: &TempDir) -> Vec<Case> {
    let bytes = std::fs::read(dir.file()).unwrap_or_else(|e| panic!("{e}"));
    let header_pages = u64::from(u32::from_le_bytes([
        bytes[16], bytes[17], bytes[18], bytes[19],
    ]));
    let pages = env_or("DAMAGE", "PAGES", u64::MAX);
    let seed = env_or("DAMAGE", "SEED", 0xDA);
    redb_cases(bytes.len() as u64, header_pages, pages, seed)
}

/// A store closed cleanly (redb's shutdown commit saved its allocator
/// state): damage anywhere is an error or harmless.
#[test]
fn every_region_of_a_closed_store() {
    let dir = TempDir::new("damage-src");
    for phase in 0..PHASES {
        damage::write_phase::<Redb>(dir.path(), phase);
    }
    damage::run::<Redb>(dir.path(), PHASES, &cases_of(&dir));
}

/// A store whose process died after its last phase (no shutdown commit:
/// redb repairs it at the next open, checking the newest commit's page
/// checksums), damaged everywhere, redb's god byte included: with
/// two-phase commits (the default) that byte, which says which commit slot
/// is the newest, is the one part of the file no checksum covers and no
/// crash state excludes (a crash between a commit's two syncs leaves the
/// same bytes), so flipping it opens the commit before, which lacks the
/// phase's last flush. The shard's seal, taken after that flush, makes the
/// open `LostRecords` instead of a shorter log (issue 19).
#[test]
fn every_region_of_a_crashed_store() {
    let dir = TempDir::new("damage-crashed");
    for phase in 0..PHASES - 1 {
        damage::write_phase::<Redb>(dir.path(), phase);
    }
    let (s, dead) = common::open_crashable(dir.path());
    damage::write_phase_into(&s, PHASES - 1);
    dead.store(true, Ordering::SeqCst);
    drop(s);
    let cases = cases_of(&dir);
    assert!(
        cases.iter().any(|c| c.region == GOD_BYTE),
        "the god byte is among the cases"
    );
    damage::run::<Redb>(dir.path(), PHASES, &cases);
}

/// The readers that change nothing (`fusee verify`, `fusee inspect`) see
/// the loss the seal reveals too: a crashed, sealed store whose god byte
/// was flipped is a `log-seal` problem for `verify_dir` and `LostRecords`
/// for a read-only open of the shard, and neither changes a byte.
#[test]
fn readers_report_a_log_that_lost_sealed_records() {
    use fusee_storage::{Storage, StorageError};
    let dir = TempDir::new("damage-readers");
    for phase in 0..PHASES - 1 {
        damage::write_phase::<Redb>(dir.path(), phase);
    }
    let (s, dead) = common::open_crashable(dir.path());
    damage::write_phase_into(&s, PHASES - 1);
    dead.store(true, Ordering::SeqCst);
    drop(s);
    Damage::Flip(9).apply(&dir.file());
    let before = std::fs::read(dir.file()).unwrap_or_else(|e| panic!("{e}"));
    let problems = fusee_storage_redb::verify::verify_dir(dir.path(), &mut || {})
        .unwrap_or_else(|e| panic!("verify: {e}"));
    assert!(
        problems
            .iter()
            .any(|p| p.kind == "log-seal" && p.shard == Some(0)),
        "{problems:?}"
    );
    let s = fusee_storage_redb::verify::open_read_only(dir.path())
        .unwrap_or_else(|e| panic!("read-only open: {e}"));
    match s.open_shard(0) {
        Err(StorageError::LostRecords {
            sealed, recovered, ..
        }) => assert!(recovered < sealed),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a read-only open of a shard that lost sealed records"),
    }
    drop(s);
    let after = std::fs::read(dir.file()).unwrap_or_else(|e| panic!("{e}"));
    assert!(before == after, "a reader changed the database");
}
