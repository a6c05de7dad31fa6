//! A process crash loses non-durable transactions (redb's own crash test),
//! and a power cut while a commit grows the file loses nothing durable.
//! The crash tests both key-value backends share (leftovers and spilled log
//! records cut at open) run from `conformance.rs` (`kv_suite!`).

mod common;

use std::sync::{Arc, Mutex};

use common::{Redb, TempDir};
use fusee_storage::{CheckpointStore, IndexChange, LogStore, RunStore, Storage};
use fusee_storage_kv::testing::{Backend, index_record};
use fusee_storage_redb::runs::SPILL_BYTES;
use fusee_storage_redb::{DurableFile, RedbOptions, RedbStorage};
use redb::StorageBackend;

/// Without a later durable commit, a process crash loses non-durable
/// transactions outright (what makes the conformance suite's crashes real).
#[test]
fn a_crash_loses_non_durable_transactions() {
    let dir = TempDir::new("lost");
    let (s, dead) = common::open_crashable(dir.path());
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    p.runs
        .append(b"committed")
        .unwrap_or_else(|e| panic!("{e}"));
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&index_record(1)), b"one")
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
    assert_eq!(Redb::raw_rows(dir.path(), 0).frames, 2);
    let s = RedbStorage::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    // The discard was not durable: the record came back.
    assert_eq!((p.log.first_lsn(), p.log.last_lsn()), (1, 1));
}

/// A power cut while a durable one-phase commit grew the file (issue 19's
/// case: redb's default commit, which earlier builds of this backend used),
/// with the header that names the new length and the new commit on disk
/// but neither the length nor the commit's pages past the old end: the
/// file is shorter than its header says. Built by hand: a durable commit, a
/// growing flush, a crash, and the file cut back to its length before the
/// growth. The storage opens (the open extends the file with zeros to the
/// header's length, and redb's recovery falls back to the last commit whose
/// pages it finds whole) with every record flushed and everything
/// committed before the growing flush, and that flush whole or not at all.
#[test]
fn a_file_shorter_than_its_header_opens_with_the_last_durable_commit() {
    let dir = TempDir::new("short");
    let big = |lsn: u64| vec![lsn as u8; 1 << 20];
    let mut one_phase = RedbOptions::default();
    one_phase.two_phase_commit = false;
    let (s, dead) = common::open_crashable_with(dir.path(), &one_phase);
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    for lsn in 1..=3 {
        p.log
            .append(lsn, b"small")
            .unwrap_or_else(|e| panic!("{e}"));
    }
    p.log.flush().unwrap_or_else(|e| panic!("{e}"));
    let blob = p.runs.append(b"frame").unwrap_or_else(|e| panic!("{e}"));
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&index_record(1)), b"A")
        .unwrap_or_else(|e| panic!("{e}"));
    let before = std::fs::metadata(dir.file())
        .map(|m| m.len())
        .unwrap_or_else(|e| panic!("{e}"));
    for lsn in 4..=11 {
        p.log
            .append(lsn, &big(lsn))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    p.log.flush().unwrap_or_else(|e| panic!("{e}"));
    drop(p);
    dead.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(s);
    let grown = std::fs::metadata(dir.file())
        .map(|m| m.len())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        grown > before,
        "the flush grew the file: {before} -> {grown}"
    );
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.file())
        .unwrap_or_else(|e| panic!("{e}"));
    file.set_len(before).unwrap_or_else(|e| panic!("{e}"));
    drop(file);

    let s = RedbStorage::open(dir.path())
        .unwrap_or_else(|e| panic!("a file shorter than its header: {e}"));
    let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"A"[..]));
    let mut records = Vec::new();
    p.log
        .read(0, &mut |lsn, bytes| {
            records.push((lsn, bytes.to_vec()));
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let last = records.len() as u64;
    assert!(
        last == 3 || last == 11,
        "the growing flush whole or not at all: {last}"
    );
    for (lsn, bytes) in &records {
        let want = if *lsn <= 3 {
            b"small".to_vec()
        } else {
            big(*lsn)
        };
        assert!(*bytes == want, "record {lsn} changed");
    }
    let mut out = Vec::new();
    p.runs
        .read(blob, &mut out)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out, b"frame");
}

/// A file whose writes become durable only at `sync_data`, except that any
/// page written may reach the disk at once (the kernel writing it back):
/// every write of redb's header (offset 0) records the file a power cut at
/// that moment would leave, the writes so far cut or zero-filled to the
/// durable length.
#[derive(Debug, Default)]
struct PowerCut {
    data: Mutex<Vec<u8>>,
    durable: Mutex<u64>,
    images: Mutex<Vec<Vec<u8>>>,
}

#[derive(Debug)]
struct PowerCutFile(Arc<PowerCut>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl StorageBackend for PowerCutFile {
    fn len(&self) -> std::io::Result<u64> {
        Ok(lock(&self.0.data).len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let data = lock(&self.0.data);
        let from = usize::try_from(offset).map_err(std::io::Error::other)?;
        let bytes = data
            .get(from..from + out.len())
            .ok_or(std::io::ErrorKind::UnexpectedEof)?;
        out.copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let len = usize::try_from(len).map_err(std::io::Error::other)?;
        lock(&self.0.data).resize(len, 0);
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        *lock(&self.0.durable) = lock(&self.0.data).len() as u64;
        Ok(())
    }

    fn write(&self, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
        let mut data = lock(&self.0.data);
        let from = usize::try_from(offset).map_err(std::io::Error::other)?;
        data.get_mut(from..from + bytes.len())
            .ok_or(std::io::ErrorKind::UnexpectedEof)?
            .copy_from_slice(bytes);
        if offset == 0 {
            let mut image = data.clone();
            let durable = usize::try_from(*lock(&self.0.durable)).map_err(std::io::Error::other)?;
            image.resize(durable, 0);
            lock(&self.0.images).push(image);
        }
        Ok(())
    }
}

/// What issue 19 found: a commit that grows the file writes a header naming
/// the new length, which the kernel may write back before the size change
/// is durable. Through [`DurableFile`] the growth is synced first, so at
/// every moment a header write may reach the disk, the durable file is at
/// least as long as the header says, and redb itself (no repair of ours)
/// opens what a power cut then would leave.
#[test]
fn growth_is_durable_before_a_header_names_it() {
    let sim = Arc::new(PowerCut::default());
    let table: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("t");
    let created;
    {
        let db = redb::Database::builder()
            .create_with_backend(DurableFile::new(PowerCutFile(Arc::clone(&sim))))
            .unwrap_or_else(|e| panic!("{e}"));
        created = lock(&sim.images).len();
        for (round, len) in [(0u64, 100usize), (1, 3 << 20), (2, 9 << 20)] {
            let tx = db.begin_write().unwrap_or_else(|e| panic!("{e}"));
            {
                let mut t = tx.open_table(table).unwrap_or_else(|e| panic!("{e}"));
                t.insert(round, vec![round as u8; len].as_slice())
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            tx.commit().unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let images = std::mem::take(&mut *lock(&sim.images));
    assert!(images.len() > created + 2, "{} header writes", images.len());
    let dir = TempDir::new("powercut");
    for (i, image) in images.iter().enumerate().skip(created) {
        let path = dir.path().join(format!("image-{i}.redb"));
        std::fs::write(&path, image).unwrap_or_else(|e| panic!("{e}"));
        let opened = std::panic::catch_unwind(|| redb::Database::create(&path).map(drop));
        match opened {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("power cut at header write {i}: redb refused the file: {e}"),
            Err(_) => panic!(
                "power cut at header write {i} ({} bytes durable): redb panicked at open",
                image.len()
            ),
        }
    }
}
