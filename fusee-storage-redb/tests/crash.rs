//! What reaches the file outside a commit never becomes visible: frames and
//! staged bases that another transaction made durable are removed when the
//! shard opens, and a process crash loses non-durable transactions.

mod common;

use common::{TempDir, open_crashable};
use fusee_storage::{CheckpointStore, INDEX_RECORD, IndexChange, LogStore, RunStore, Storage};
use fusee_storage_redb::RedbStorage;
use fusee_storage_redb::checkpoint::BASE_SPILL;
use fusee_storage_redb::layout::{INDEX, STORE, index_key, seq_key};
use fusee_storage_redb::runs::SPILL_BYTES;
use redb::ReadableDatabase;

/// Rows of `shard` in the store and index tables, read from the file
/// directly (the storage must be closed).
fn raw_rows(file: &std::path::Path, shard: u32) -> (usize, usize) {
    let db = redb::Database::create(file).unwrap_or_else(|e| panic!("raw open: {e}"));
    let tx = db.begin_read().unwrap_or_else(|e| panic!("{e}"));
    let store = tx.open_table(STORE).unwrap_or_else(|e| panic!("{e}"));
    let frames = store
        .range(seq_key(shard, 0)..=seq_key(shard, u64::MAX))
        .unwrap_or_else(|e| panic!("{e}"))
        .count();
    let index = tx.open_table(INDEX).unwrap_or_else(|e| panic!("{e}"));
    let records = index
        .range(index_key(shard, 0, 0)..=index_key(shard, u32::MAX, u64::MAX))
        .unwrap_or_else(|e| panic!("{e}"))
        .count();
    (frames, records)
}

fn record(run: u64) -> [u8; INDEX_RECORD] {
    let mut r = [3u8; INDEX_RECORD];
    r[8..16].copy_from_slice(&(run | 1 << 48).to_le_bytes());
    r
}

/// Spills frames and a base (non-durable transactions), then has a log
/// flush of another shard make them durable; returns the committed frame.
fn spill_then_flush(s: &RedbStorage) -> fusee_core::shard::BlobRef {
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
    let mut other = s.open_shard(1).unwrap_or_else(|e| panic!("{e}"));
    other.log.append(1, b"x").unwrap_or_else(|e| panic!("{e}"));
    other.log.flush().unwrap_or_else(|e| panic!("{e}"));
    kept
}

/// A log flush persists earlier non-durable transactions: the spilled
/// frames and base are in the file, and opening the shard removes them.
#[test]
fn durable_leftovers_are_removed_at_open() {
    let dir = TempDir::new("leftovers");
    let (s, dead) = open_crashable(&dir.0);
    let kept = spill_then_flush(&s);
    dead.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(s);
    let (frames, records) = raw_rows(&dir.file(), 0);
    assert_eq!(frames, 5, "the flush made the spilled frames durable");
    assert_eq!(
        records,
        1 + BASE_SPILL,
        "the flush made the staged base durable"
    );
    let s = RedbStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
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
    assert_eq!(
        raw_rows(&dir.file(), 0),
        (1, 1),
        "open deleted the leftovers"
    );
}

/// Without a later durable commit, a process crash loses non-durable
/// transactions outright (what makes the conformance suite's crashes real).
#[test]
fn a_crash_loses_non_durable_transactions() {
    let dir = TempDir::new("lost");
    let (s, dead) = open_crashable(&dir.0);
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    p.runs
        .append(b"committed")
        .unwrap_or_else(|e| panic!("{e}"));
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&record(1)), b"one")
        .unwrap_or_else(|e| panic!("{e}"));
    let big = vec![7u8; SPILL_BYTES + 1];
    p.runs.append(&big).unwrap_or_else(|e| panic!("{e}"));
    p.log.append(1, b"r").unwrap_or_else(|e| panic!("{e}"));
    p.log.flush().unwrap_or_else(|e| panic!("{e}"));
    p.log.discard_through(1).unwrap_or_else(|e| panic!("{e}"));
    p.runs.append(&big).unwrap_or_else(|e| panic!("{e}"));
    drop(p);
    dead.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(s);
    // The first big frame was made durable by the flush, the second not.
    assert_eq!(raw_rows(&dir.file(), 0).0, 2);
    let s = RedbStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
    let p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    // The discard was not durable: the record came back.
    assert_eq!((p.log.first_lsn(), p.log.last_lsn()), (1, 1));
}

/// Unflushed records past `LOG_SPILL_BYTES` are written non-durably: reads
/// see them all and the durable LSN does not move. After a crash the log
/// holds exactly the flushed records, even when another shard's flush made
/// the spilled ones durable (opening the shard deletes them).
#[test]
fn log_spill_is_cut_at_open() {
    use fusee_storage_redb::layout::LOG;
    use fusee_storage_redb::log::LOG_SPILL_BYTES;
    let rec = |lsn: u64| vec![(lsn % 251) as u8; 1 << 20];
    let spilled = (LOG_SPILL_BYTES >> 20) as u64;
    let n = spilled + 4;
    for other_flushes in [false, true] {
        let dir = TempDir::new("logspill");
        let (s, dead) = open_crashable(&dir.0);
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
        dead.store(true, std::sync::atomic::Ordering::SeqCst);
        drop(s);
        let in_file = {
            let db = redb::Database::create(dir.file()).unwrap_or_else(|e| panic!("{e}"));
            let tx = db.begin_read().unwrap_or_else(|e| panic!("{e}"));
            let t = tx.open_table(LOG).unwrap_or_else(|e| panic!("{e}"));
            t.range(seq_key(0, 0)..=seq_key(0, u64::MAX))
                .unwrap_or_else(|e| panic!("{e}"))
                .count() as u64
        };
        let want = if other_flushes { 1 + spilled } else { 1 };
        assert!(
            in_file >= want,
            "{in_file} records in the file, expected {want}"
        );
        let s = RedbStorage::open(&dir.0).unwrap_or_else(|e| panic!("{e}"));
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
