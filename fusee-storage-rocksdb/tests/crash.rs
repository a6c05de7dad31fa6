//! What reaches the database outside a commit or flush never becomes
//! visible: frames, staged bases and spilled log records written without
//! `sync` survive a process crash (they are in the WAL file) or are made
//! durable by a later synced batch of another shard, and opening the shard
//! removes them.

mod common;

use common::{TempDir, raw_rows};
use fusee_storage::{CheckpointStore, INDEX_RECORD, IndexChange, LogStore, RunStore, Storage};
use fusee_storage_rocksdb::RocksStorage;
use fusee_storage_rocksdb::checkpoint::BASE_SPILL;
use fusee_storage_rocksdb::runs::SPILL_BYTES;

fn record(run: u64) -> [u8; INDEX_RECORD] {
    let mut r = [3u8; INDEX_RECORD];
    r[8..16].copy_from_slice(&(run | 1 << 48).to_le_bytes());
    r
}

/// Commits one frame and one index record on shard 0, then spills four
/// frames and a base (batches without `sync`), then (if `other_flushes`) has
/// a log flush of shard 1 make them durable; returns the committed frame.
fn spill(s: &RocksStorage, other_flushes: bool) -> fusee_core::shard::BlobRef {
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    let kept = p
        .runs
        .append(b"committed")
        .unwrap_or_else(|e| panic!("{e}"));
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&record(1)), b"one")
        .unwrap_or_else(|e| panic!("{e}"));
    let big = vec![7u8; SPILL_BYTES / 4 + 1];
    for _ in 0..4 {
        p.runs.append(&big).unwrap_or_else(|e| panic!("{e}"));
    }
    p.checkpoint.begin_base().unwrap_or_else(|e| panic!("{e}"));
    let base: Vec<u8> = (0..BASE_SPILL as u64).flat_map(record).collect();
    p.checkpoint
        .base_chunk(&base)
        .unwrap_or_else(|e| panic!("{e}"));
    if other_flushes {
        let mut other = s.open_shard(1).unwrap_or_else(|e| panic!("{e}"));
        other.log.append(1, b"x").unwrap_or_else(|e| panic!("{e}"));
        other.log.flush().unwrap_or_else(|e| panic!("{e}"));
    }
    kept
}

/// Whether or not another shard's synced batch followed them, the spilled
/// frames and base are in the database after a crash, and opening the
/// shard removes them.
#[test]
fn leftovers_are_removed_at_open() {
    for other_flushes in [false, true] {
        let dir = TempDir::new("leftovers");
        let s = RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
        let kept = spill(&s, other_flushes);
        drop(s); // a crash: no close
        let (_, frames, records) = raw_rows(&dir.db(), 0);
        assert_eq!(
            frames, 5,
            "the spilled frames reached the WAL ({other_flushes})"
        );
        assert_eq!(records, 1 + BASE_SPILL, "the staged base reached the WAL");
        let s = RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
        let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"one"[..]));
        assert_eq!((p.recovered.index_records, p.runs.position()), (1, 1));
        let mut out = Vec::new();
        p.runs
            .read(kept, &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out, b"committed");
        let mut n = 0;
        p.checkpoint
            .read_index(&mut |c| {
                n += c.len() / INDEX_RECORD;
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(n, 1);
        drop(p);
        s.close().unwrap_or_else(|e| panic!("{e}"));
        drop(s);
        let (_, frames, records) = raw_rows(&dir.db(), 0);
        assert_eq!((frames, records), (1, 1), "open deleted the leftovers");
    }
}

/// A discard is not synced: it may or may not survive a crash, and either
/// way the log is consistent (here it survives, being in the WAL file).
#[test]
fn a_discard_survives_a_process_crash_consistently() {
    let dir = TempDir::new("discard");
    let s = RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    for lsn in 1..=5 {
        p.log.append(lsn, b"r").unwrap_or_else(|e| panic!("{e}"));
    }
    p.log.flush().unwrap_or_else(|e| panic!("{e}"));
    p.log.discard_through(3).unwrap_or_else(|e| panic!("{e}"));
    drop(p);
    drop(s);
    let s = RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((p.log.first_lsn(), p.log.last_lsn()), (4, 5));
    let mut seen = Vec::new();
    p.log
        .read(3, &mut |lsn, _| {
            seen.push(lsn);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(seen, [4, 5]);
}

/// Unflushed records past `LOG_SPILL_BYTES` are written without `sync`:
/// reads see them all and the durable LSN does not move. After a crash the
/// log holds exactly the flushed records, even though the spilled ones are
/// in the database (opening the shard deletes them).
#[test]
fn log_spill_is_cut_at_open() {
    use fusee_storage_rocksdb::log::LOG_SPILL_BYTES;
    let rec = |lsn: u64| vec![(lsn % 251) as u8; 1 << 20];
    let spilled = (LOG_SPILL_BYTES >> 20) as u64;
    let n = spilled + 4;
    for other_flushes in [false, true] {
        let dir = TempDir::new("logspill");
        let s = RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
        let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
        p.log
            .append(1, b"flushed")
            .unwrap_or_else(|e| panic!("{e}"));
        p.log.flush().unwrap_or_else(|e| panic!("{e}"));
        for lsn in 2..=n {
            p.log
                .append(lsn, &rec(lsn))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!((p.log.last_lsn(), p.log.durable_lsn()), (n, 1));
        let mut seen = 0;
        p.log
            .read(1, &mut |lsn, bytes| {
                seen += 1;
                assert!(lsn == seen + 1 && bytes == rec(lsn), "record {lsn}");
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(seen, n - 1);
        if other_flushes {
            let mut q = s.open_shard(1).unwrap_or_else(|e| panic!("{e}"));
            q.log.append(1, b"x").unwrap_or_else(|e| panic!("{e}"));
            q.log.flush().unwrap_or_else(|e| panic!("{e}"));
        }
        drop(p);
        drop(s);
        let in_db = raw_rows(&dir.db(), 0).0 as u64;
        assert!(
            in_db > spilled,
            "{in_db} records in the database, expected more than {spilled}"
        );
        let s = RocksStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
        let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p.log.last_lsn(),
            1,
            "unflushed records survived (other flush: {other_flushes})"
        );
        let mut all = Vec::new();
        p.log
            .read(0, &mut |lsn, bytes| {
                all.push((lsn, bytes.to_vec()));
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(all, [(1, b"flushed".to_vec())]);
        // Appends continue after the flushed record.
        p.log.append(2, b"again").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.log.flush().ok(), Some(2));
    }
}
