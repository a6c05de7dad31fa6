//! Opening directories that are not (or no longer) a healthy Fusee RocksDB
//! storage: every case is a clear error, never a panic and never silent
//! data.

use std::path::Path;

mod common;
use common::{TempDir, raw_open};

use fusee_storage::CheckpointStore;
use fusee_storage::{IndexChange, LogStore, RunStore, Storage, StorageError};
use fusee_storage_rocksdb::layout::{self, FORMAT_KEY, META};
use fusee_storage_rocksdb::{DIR_NAME, RocksError, RocksStorage};

/// The `RocksError` inside an open error, or a panic naming what came back.
fn open_err(dir: &Path) -> RocksError {
    match RocksStorage::open(dir) {
        Ok(_) => panic!("opening {dir:?} succeeded"),
        Err(StorageError::Backend(e)) => match e.downcast::<RocksError>() {
            Ok(e) => *e,
            Err(e) => panic!("backend error of another type: {e}"),
        },
        Err(e) => panic!("expected a RocksError, got {e}"),
    }
}

/// Writes a storage with one flushed record, one frame and one commit.
fn populate(dir: &Path) {
    let s = RocksStorage::open(dir).unwrap_or_else(|e| panic!("open: {e}"));
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

fn seed() -> u64 {
    std::env::var("FUSEE_ROCKSDB_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED_u64)
}

/// Random bytes as `CURRENT` (and as a manifest it might name), random
/// files without `CURRENT`, and text: all `NotRocksDb`, naming the path.
/// Seed: `FUSEE_ROCKSDB_SEED`.
#[test]
fn garbage_directories_are_not_rocksdb() {
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    for len in [1usize, 9, 100, 4096, 70_000] {
        let dir = TempDir::new("garbage");
        std::fs::create_dir_all(dir.db()).unwrap_or_else(|e| panic!("{e}"));
        let mut bytes = vec![0u8; len];
        rng.fill(&mut bytes);
        std::fs::write(dir.db().join("CURRENT"), &bytes).unwrap_or_else(|e| panic!("{e}"));
        rng.fill(&mut bytes);
        std::fs::write(dir.db().join("MANIFEST-000001"), &bytes).unwrap_or_else(|e| panic!("{e}"));
        let e = open_err(&dir.0);
        assert!(
            matches!(e, RocksError::NotRocksDb { .. }),
            "seed {seed}, {len} random bytes: {e}"
        );
        assert!(
            e.to_string().contains(DIR_NAME),
            "the error names the path: {e}"
        );
    }
    // A manifest named by CURRENT that holds garbage.
    let dir = TempDir::new("manifest");
    std::fs::create_dir_all(dir.db()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.db().join("CURRENT"), "MANIFEST-000001\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.db().join("MANIFEST-000001"),
        "just some text\n".repeat(1000),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(open_err(&dir.0), RocksError::NotRocksDb { .. }));
    // Files but no CURRENT: not taken over.
    let dir = TempDir::new("nocurrent");
    std::fs::create_dir_all(dir.db()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.db().join("000004.log"), b"anything").unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(open_err(&dir.0), RocksError::NotRocksDb { .. }));
    // The database path is a file.
    let dir = TempDir::new("file");
    std::fs::write(dir.db(), b"not a directory").unwrap_or_else(|e| panic!("{e}"));
    assert!(RocksStorage::open(&dir.0).is_err());
}

/// A RocksDB database that is not Fusee's: data in the default column
/// family, or a column family of its own. Refusing it changes nothing.
#[test]
fn foreign_rocksdb_databases_are_refused() {
    let mut plain = rocksdb::Options::default();
    plain.create_if_missing(true);
    plain.create_missing_column_families(true);
    plain.set_compression_type(rocksdb::DBCompressionType::None);
    let dir = TempDir::new("foreign");
    {
        let db = rocksdb::DB::open(&plain, dir.db()).unwrap_or_else(|e| panic!("{e}"));
        db.put(b"alice", b"5").unwrap_or_else(|e| panic!("{e}"));
    }
    let e = open_err(&dir.0);
    assert!(matches!(e, RocksError::Foreign { .. }), "{e}");
    {
        let db = rocksdb::DB::open(&plain, dir.db()).unwrap_or_else(|e| panic!("{e}"));
        let v = db.get(b"alice").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v.as_deref(), Some(&b"5"[..]), "the foreign data is intact");
    }
    let dir = TempDir::new("foreign-cf");
    {
        let db = rocksdb::DB::open_cf(&plain, dir.db(), ["default", "accounts"])
            .unwrap_or_else(|e| panic!("{e}"));
        drop(db);
    }
    let e = open_err(&dir.0);
    assert!(matches!(e, RocksError::Foreign { .. }), "{e}");
    assert!(e.to_string().contains("accounts"), "{e}");
    // An empty database with only the default family becomes a storage.
    let dir = TempDir::new("empty");
    drop(rocksdb::DB::open(&plain, dir.db()).unwrap_or_else(|e| panic!("{e}")));
    populate(&dir.0);
    let s = RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.shards().ok(), Some(vec![0]));
}

/// Rewrites the format marker of the storage in `dir`.
fn set_marker(dir: &Path, value: &[u8]) {
    let db = raw_open(&dir.join(DIR_NAME));
    let meta = db.cf_handle(META).unwrap_or_else(|| panic!("no meta"));
    db.put_cf(meta, FORMAT_KEY, value)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn newer_and_foreign_markers_are_refused() {
    let dir = TempDir::new("newer");
    populate(&dir.0);
    let mut newer = layout::format_value();
    newer[8..].copy_from_slice(&(layout::FORMAT_VERSION + 1).to_le_bytes());
    set_marker(&dir.0, &newer);
    match open_err(&dir.0) {
        RocksError::NewerFormat {
            found, supported, ..
        } => assert_eq!(
            (found, supported),
            (layout::FORMAT_VERSION + 1, layout::FORMAT_VERSION)
        ),
        e => panic!("expected NewerFormat, got {e}"),
    }
    set_marker(&dir.0, b"SOMEONE-ELSE");
    assert!(matches!(open_err(&dir.0), RocksError::Foreign { .. }));
    set_marker(&dir.0, &layout::format_value());
    let s = RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("the right marker opens: {e}"));
    assert_eq!(s.shards().ok(), Some(vec![0]));
}

#[test]
fn a_second_open_of_the_database_is_locked() {
    let dir = TempDir::new("locked");
    let first = RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
    let e = open_err(&dir.0);
    assert!(matches!(e, RocksError::Locked { .. }), "{e}");
    assert!(e.to_string().contains("already open"), "{e}");
    first.close().unwrap_or_else(|e| panic!("{e}"));
    drop(first);
    RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("after the first closed: {e}"));
}

/// The environment variable that makes [`lock_child`] act: the directory a
/// parent test holds open.
const CHILD_DIR: &str = "FUSEE_ROCKSDB_LOCK_CHILD_DIR";

/// Another process opening a storage that this one holds gets `Locked`:
/// runs this test binary again as the child ([`lock_child`]).
#[test]
fn a_second_process_is_locked_out() {
    let dir = TempDir::new("process");
    let held = RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
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
/// `FUSEE_ROCKSDB_LOCK_CHILD_DIR` is set.
#[test]
fn lock_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let e = open_err(Path::new(&dir));
    assert!(matches!(e, RocksError::Locked { .. }), "{e}");
    println!("child saw: Locked ({e})");
}

/// Damaged records and rows are `Corrupt` errors naming what and where.
#[test]
fn damaged_values_are_corrupt() {
    let dir = TempDir::new("damaged");
    populate(&dir.0);
    let patch = |family: &str, key: &[u8]| {
        let db = raw_open(&dir.db());
        let cf = db
            .cf_handle(family)
            .unwrap_or_else(|| panic!("no {family}"));
        let mut v = db
            .get_cf(cf, key)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no value at {key:?}"));
        let last = v.len() - 1;
        v[last] ^= 0x40;
        db.put_cf(cf, key, v).unwrap_or_else(|e| panic!("{e}"));
    };
    patch(layout::LOG, &layout::seq_key(0, 1));
    patch(layout::STORE, &layout::seq_key(0, 0));
    let s = RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
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
        let db = raw_open(&dir.db());
        let meta = db.cf_handle(META).unwrap_or_else(|| panic!("no meta"));
        db.put_cf(meta, layout::meta_key(0, layout::TAG_COMMIT), b"short")
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let s = RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(s.open_shard(0), Err(StorageError::Corrupt { .. })));
    // The failed open released the shard: it fails the same way again.
    assert!(matches!(s.open_shard(0), Err(StorageError::Corrupt { .. })));
}

/// Bit flips anywhere in the files of a populated database (WAL, tables,
/// blob files, manifest): opening and reading everything either fails with
/// an error or returns exactly the bytes written, never panics and never
/// returns other bytes. Rounds: `FUSEE_ROCKSDB_FLIP_ROUNDS` (default 30);
/// seed: `FUSEE_ROCKSDB_SEED`.
#[test]
fn bit_flips_are_errors_or_exact_bytes() {
    let rounds: u64 = std::env::var("FUSEE_ROCKSDB_FLIP_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let seed = seed();
    let log_rec = |lsn: u64| vec![(lsn * 7) as u8; 200];
    let frame = |i: u64| vec![(i * 13) as u8; 5000];
    let index_rec = |run: u64| {
        let mut r = [(run % 200) as u8; 32];
        r[8..16].copy_from_slice(&(run | 1 << 48).to_le_bytes());
        r
    };
    let src = TempDir::new("flip-src");
    {
        let s = RocksStorage::open(&src.0).unwrap_or_else(|e| panic!("{e}"));
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
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(src.db())
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|e| {
            let e = e.unwrap_or_else(|e| panic!("{e}"));
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(e.path()).unwrap_or_else(|e| panic!("{e}"));
            (name, bytes)
        })
        .filter(|(name, bytes)| name != "LOCK" && !name.starts_with("LOG") && !bytes.is_empty())
        .collect();
    files.sort();
    let mut rng = fastrand::Rng::with_seed(seed);
    for round in 0..rounds {
        let dir = TempDir::new("flip");
        std::fs::create_dir_all(dir.db()).unwrap_or_else(|e| panic!("{e}"));
        let victim = rng.usize(0..files.len());
        for (i, (name, bytes)) in files.iter().enumerate() {
            let mut bytes = bytes.clone();
            if i == victim {
                for _ in 0..=round % 3 {
                    let at = rng.usize(0..bytes.len());
                    bytes[at] ^= 1 << rng.u8(0..8);
                }
            }
            std::fs::write(dir.db().join(name), &bytes).unwrap_or_else(|e| panic!("{e}"));
        }
        let what = format!("seed {seed} round {round} file {}", files[victim].0);
        let Ok(s) = RocksStorage::open(&dir.0) else {
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
                len: 5000,
            };
            if p.runs.read(blob, &mut out).is_ok() {
                assert!(out == frame(i), "{what}: frame {i} changed");
            }
        }
    }
}
