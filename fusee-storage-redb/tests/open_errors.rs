//! Opening files that are not (or no longer) a healthy Fusee redb storage:
//! every case is a clear error, never a panic and never silent data.

use std::path::Path;

mod common;
use common::TempDir;

use fusee_storage::CheckpointStore;
use fusee_storage::{IndexChange, LogStore, RunStore, Storage, StorageError};
use fusee_storage_redb::layout::{self, FORMAT, FORMAT_KEY};
use fusee_storage_redb::{FILE_NAME, RedbError, RedbStorage};
use redb::ReadableTable;

/// The `RedbError` inside an open error, or a panic naming what came back.
fn open_err(dir: &Path) -> RedbError {
    match RedbStorage::open(dir) {
        Ok(_) => panic!("opening {dir:?} succeeded"),
        Err(StorageError::Backend(e)) => match e.downcast::<RedbError>() {
            Ok(e) => *e,
            Err(e) => panic!("backend error of another type: {e}"),
        },
        Err(e) => panic!("expected a RedbError, got {e}"),
    }
}

/// Writes a storage with one flushed record, one frame and one commit.
fn populate(dir: &Path) {
    let s = RedbStorage::open(dir).unwrap_or_else(|e| panic!("open: {e}"));
    let mut p = s
        .open_shard(0)
        .unwrap_or_else(|e| panic!("open_shard: {e}"));
    p.log
        .append(1, b"one")
        .unwrap_or_else(|e| panic!("append: {e}"));
    p.log.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    p.runs
        .append(b"frame")
        .unwrap_or_else(|e| panic!("frame: {e}"));
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&[]), b"ck")
        .unwrap_or_else(|e| panic!("commit: {e}"));
    drop(p);
    s.close().unwrap_or_else(|e| panic!("close: {e}"));
}

#[test]
fn garbage_files_are_not_redb() {
    let seed = std::env::var("FUSEE_REDB_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED_u64);
    let mut rng = fastrand::Rng::with_seed(seed);
    for len in [1usize, 9, 100, 4096, 70_000] {
        let dir = TempDir::new("garbage");
        let mut bytes = vec![0u8; len];
        rng.fill(&mut bytes);
        std::fs::write(dir.file(), &bytes).unwrap_or_else(|e| panic!("write: {e}"));
        let e = open_err(&dir.0);
        assert!(
            matches!(e, RedbError::NotRedb { .. }),
            "seed {seed}, {len} random bytes: {e}"
        );
        assert!(
            e.to_string().contains(FILE_NAME),
            "the error names the file: {e}"
        );
    }
    let dir = TempDir::new("text");
    std::fs::write(dir.file(), "just some text\n".repeat(1000)).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(open_err(&dir.0), RedbError::NotRedb { .. }));
}

#[test]
fn a_foreign_redb_database_is_refused() {
    let dir = TempDir::new("foreign");
    {
        let db = redb::Database::create(dir.file()).unwrap_or_else(|e| panic!("{e}"));
        let tx = db.begin_write().unwrap_or_else(|e| panic!("{e}"));
        {
            let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("accounts");
            let mut t = tx.open_table(def).unwrap_or_else(|e| panic!("{e}"));
            t.insert("alice", 5).unwrap_or_else(|e| panic!("{e}"));
        }
        tx.commit().unwrap_or_else(|e| panic!("{e}"));
    }
    let e = open_err(&dir.0);
    assert!(matches!(e, RedbError::Foreign { .. }), "{e}");
    // Refusing it changed nothing: the foreign table is still there alone.
    let db = redb::Database::create(dir.file()).unwrap_or_else(|e| panic!("{e}"));
    let tx = redb::ReadableDatabase::begin_read(&db).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<String> = tx
        .list_tables()
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|t| redb::TableHandle::name(&t).to_string())
        .collect();
    assert_eq!(names, ["accounts"]);
}

/// Rewrites the format marker of the storage in `dir`.
fn set_marker(dir: &Path, value: &[u8]) {
    let db = redb::Database::create(dir.join(FILE_NAME)).unwrap_or_else(|e| panic!("{e}"));
    let tx = db.begin_write().unwrap_or_else(|e| panic!("{e}"));
    {
        let mut t = tx.open_table(FORMAT).unwrap_or_else(|e| panic!("{e}"));
        t.insert(FORMAT_KEY, value)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    tx.commit().unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn newer_and_foreign_markers_are_refused() {
    let dir = TempDir::new("newer");
    populate(&dir.0);
    let mut newer = layout::format_value();
    newer[8..].copy_from_slice(&(layout::FORMAT_VERSION + 1).to_le_bytes());
    set_marker(&dir.0, &newer);
    match open_err(&dir.0) {
        RedbError::NewerFormat {
            found, supported, ..
        } => assert_eq!(
            (found, supported),
            (layout::FORMAT_VERSION + 1, layout::FORMAT_VERSION)
        ),
        e => panic!("expected NewerFormat, got {e}"),
    }
    set_marker(&dir.0, b"SOMEONE-ELSE");
    assert!(matches!(open_err(&dir.0), RedbError::Foreign { .. }));
    set_marker(&dir.0, &layout::format_value());
    let s = RedbStorage::open(&dir.0).unwrap_or_else(|e| panic!("the right marker opens: {e}"));
    assert_eq!(s.shards().ok(), Some(vec![0]));
}

#[test]
fn a_second_open_of_the_file_is_locked() {
    let dir = TempDir::new("locked");
    let first = RedbStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
    let e = open_err(&dir.0);
    assert!(matches!(e, RedbError::Locked { .. }), "{e}");
    assert!(e.to_string().contains("already open"), "{e}");
    first.close().unwrap_or_else(|e| panic!("{e}"));
    drop(first);
    RedbStorage::open(&dir.0).unwrap_or_else(|e| panic!("after the first closed: {e}"));
}

/// The environment variable that makes [`lock_child`] act: the directory a
/// parent test holds open.
const CHILD_DIR: &str = "FUSEE_REDB_LOCK_CHILD_DIR";

/// Another process opening a storage that this one holds gets `Locked`:
/// runs this test binary again as the child ([`lock_child`]).
#[test]
fn a_second_process_is_locked_out() {
    let dir = TempDir::new("process");
    let held = RedbStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(exe)
        .args(["--exact", "lock_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, &dir.0)
        .output()
        .unwrap_or_else(|e| panic!("spawning the child: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("child saw: Locked"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(held);
}

/// The child half of [`a_second_process_is_locked_out`]; does nothing unless
/// `FUSEE_REDB_LOCK_CHILD_DIR` is set.
#[test]
fn lock_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let e = open_err(Path::new(&dir));
    assert!(matches!(e, RedbError::Locked { .. }), "{e}");
    println!("child saw: Locked ({e})");
}

/// Damaged records and rows are `Corrupt` errors naming what and where.
#[test]
fn damaged_values_are_corrupt() {
    let dir = TempDir::new("damaged");
    populate(&dir.0);
    let patch = |table: redb::TableDefinition<[u8; 12], &[u8]>, key: [u8; 12]| {
        let db = redb::Database::create(dir.file()).unwrap_or_else(|e| panic!("{e}"));
        let tx = db.begin_write().unwrap_or_else(|e| panic!("{e}"));
        {
            let mut t = tx.open_table(table).unwrap_or_else(|e| panic!("{e}"));
            let mut v = t
                .get(key)
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("no value at {key:?}"))
                .value()
                .to_vec();
            let last = v.len() - 1;
            v[last] ^= 0x40;
            t.insert(key, v.as_slice())
                .unwrap_or_else(|e| panic!("{e}"));
        }
        tx.commit().unwrap_or_else(|e| panic!("{e}"));
    };
    patch(layout::LOG, layout::seq_key(0, 1));
    patch(layout::STORE, layout::seq_key(0, 0));
    let s = RedbStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    match p.log.read(0, &mut |_, _| Ok(())) {
        Err(StorageError::Corrupt { at: 1, .. }) => {}
        other => panic!("damaged record: {other:?}"),
    }
    let mut out = Vec::new();
    let blob = fusee_core::shard::BlobRef { offset: 0, len: 5 };
    match p.runs.read(blob, &mut out) {
        Err(StorageError::Corrupt { at: 0, .. }) => {}
        other => panic!("damaged frame: {other:?}"),
    }
    drop(p);
    s.close().unwrap_or_else(|e| panic!("{e}"));
    drop(s);
    // A damaged commit row fails the shard's open.
    {
        let db = redb::Database::create(dir.file()).unwrap_or_else(|e| panic!("{e}"));
        let tx = db.begin_write().unwrap_or_else(|e| panic!("{e}"));
        {
            let mut t = tx
                .open_table(layout::META)
                .unwrap_or_else(|e| panic!("{e}"));
            t.insert(layout::meta_key(0, layout::TAG_COMMIT), &b"short"[..])
                .unwrap_or_else(|e| panic!("{e}"));
        }
        tx.commit().unwrap_or_else(|e| panic!("{e}"));
    }
    let s = RedbStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(s.open_shard(0), Err(StorageError::Corrupt { .. })));
    // The failed open released the shard: it fails the same way again.
    assert!(matches!(s.open_shard(0), Err(StorageError::Corrupt { .. })));
}

/// A file cut short (a copy gone wrong) opens as an error or as a
/// database redb repaired, never with a panic.
#[test]
fn truncated_files_do_not_panic() {
    let dir = TempDir::new("truncated");
    populate(&dir.0);
    let full = std::fs::read(dir.file()).unwrap_or_else(|e| panic!("{e}"));
    for cut in [full.len() / 2, full.len() / 4, 600, 100, 0] {
        let d = TempDir::new("cut");
        std::fs::write(d.file(), &full[..cut]).unwrap_or_else(|e| panic!("{e}"));
        if let Ok(s) = RedbStorage::open(&d.0) {
            // Whatever survived, the shard opens or reports an error.
            let _ = s.open_shard(0).map(drop);
        }
    }
}

/// Bit flips anywhere in a populated file: opening and reading everything
/// either fails with an error or returns exactly the bytes written, never
/// panics and never returns other bytes. Rounds: `FUSEE_REDB_FLIP_ROUNDS`
/// (default 40); seed: `FUSEE_REDB_SEED`.
#[test]
fn bit_flips_are_errors_or_exact_bytes() {
    let rounds: u64 = std::env::var("FUSEE_REDB_FLIP_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let seed = std::env::var("FUSEE_REDB_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0xF11B_u64);
    let log_rec = |lsn: u64| vec![(lsn * 7) as u8; 200];
    let frame = |i: u64| vec![(i * 13) as u8; 3000];
    let index_rec = |run: u64| {
        let mut r = [(run % 200) as u8; 32];
        r[8..16].copy_from_slice(&(run | 1 << 48).to_le_bytes());
        r
    };
    let src = TempDir::new("flip-src");
    {
        let s = RedbStorage::open(&src.0).unwrap_or_else(|e| panic!("{e}"));
        let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
        for lsn in 1..=2000u64 {
            p.log
                .append(lsn, &log_rec(lsn))
                .unwrap_or_else(|e| panic!("{e}"));
            if lsn % 100 == 0 {
                p.log.flush().unwrap_or_else(|e| panic!("{e}"));
            }
        }
        let index: Vec<u8> = (0..3000).flat_map(index_rec).collect();
        for i in 0..200 {
            p.runs.append(&frame(i)).unwrap_or_else(|e| panic!("{e}"));
        }
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&index), b"ck")
            .unwrap_or_else(|e| panic!("{e}"));
        drop(p);
        s.close().unwrap_or_else(|e| panic!("{e}"));
    }
    let full = std::fs::read(src.file()).unwrap_or_else(|e| panic!("{e}"));
    let mut rng = fastrand::Rng::with_seed(seed);
    for round in 0..rounds {
        let dir = TempDir::new("flip");
        let mut bytes = full.clone();
        for _ in 0..=round % 5 {
            let i = rng.usize(0..bytes.len());
            bytes[i] ^= 1 << rng.u8(0..8);
        }
        std::fs::write(dir.file(), &bytes).unwrap_or_else(|e| panic!("{e}"));
        let what = format!("seed {seed} round {round}");
        let Ok(s) = RedbStorage::open(&dir.0) else {
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
            for r in chunk.chunks_exact(32) {
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
            let blob = fusee_core::shard::BlobRef {
                offset: i,
                len: 3000,
            };
            if p.runs.read(blob, &mut out).is_ok() {
                assert!(out == frame(i), "{what}: frame {i} changed");
            }
        }
    }
}
