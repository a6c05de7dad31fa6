//! What the backend does when a file-system call fails, on the simulated
//! disk: bytes a failed sync left in the page cache are never reported
//! durable by a later open without being written again; a directory whose
//! sync failed is synced by the next open; a base chunk that was not
//! written latches the checkpoint part; a commit that is durable succeeds
//! even if deleting what it replaced fails.

use fusee_storage::{CheckpointStore, IndexChange, LogStore, Storage};
use fusee_storage_file::sim::{CrashMode, SimIo};
use fusee_storage_file::{FileOptions, FileStorage, FlushMethod};

fn open(io: &SimIo, dir: &str) -> FileStorage<SimIo> {
    let options = FileOptions {
        segment_bytes: 64 << 10,
        flush: FlushMethod::DataSync,
        ..FileOptions::default()
    };
    FileStorage::open_with(io.clone(), dir, options).expect("open storage")
}

/// One 32-byte index record for run `run`.
fn index_record(run: u64) -> Vec<u8> {
    let mut r = vec![0u8; fusee_storage::INDEX_RECORD];
    r[8..14].copy_from_slice(&run.to_le_bytes()[..6]);
    r
}

/// Shard 0 of `s` with one commit ("one", run 1) and a base begun that
/// holds run 2.
fn base_begun(s: &FileStorage<SimIo>) -> fusee_storage::ShardParts<FileStorage<SimIo>> {
    let mut p = s.open_shard(0).expect("shard");
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&index_record(1)), b"one")
        .expect("commit");
    p.checkpoint.begin_base().expect("begin_base");
    p.checkpoint.base_chunk(&index_record(2)).expect("chunk");
    p
}

/// A commit whose slot sync failed leaves the new slot readable in the page
/// cache. On Linux a later sync of it writes nothing (the pages count as
/// written back), so an open that adopts that slot must write it again
/// before syncing, or a power cut takes back a commit the open reported.
#[test]
fn a_slot_left_by_a_failed_sync_is_written_again_before_open_reports_it() {
    let io = SimIo::new();
    io.forget_failed_syncs();
    let s = open(&io, "/c");
    let mut p = s.open_shard(0).expect("shard");
    let commit = |p: &mut fusee_storage::ShardParts<FileStorage<SimIo>>, run: u64, ck: &[u8]| {
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&index_record(run)), ck)
    };
    commit(&mut p, 1, b"one").expect("commit one");
    let before = io.syncs();
    commit(&mut p, 2, b"two").expect("commit two");
    let syncs = u32::try_from(io.syncs() - before).expect("a few syncs");
    // The same commit again, its last sync (the slot's) failing.
    io.fail_syncs_after(syncs - 1, 1);
    assert!(commit(&mut p, 3, b"three").is_err(), "the slot sync failed");
    drop(p);
    let p = s.open_shard(0).expect("reopen in the same boot");
    let reported = p.recovered.checkpoint.clone();
    assert_eq!(
        reported.as_deref(),
        Some(&b"three"[..]),
        "the slot is readable"
    );
    drop(p);
    drop(s);
    io.crash(CrashMode::LoseAll);
    let s = open(&io, "/c");
    let p = s.open_shard(0).expect("open after the power cut");
    assert_eq!(
        p.recovered.checkpoint, reported,
        "what the earlier open reported was durable"
    );
}

/// The first open of a shard creates its directory and fails to sync it
/// into the storage's; the next open finds the directory there and must
/// still sync it, or a power cut takes the shard, with everything flushed
/// and committed in it, away.
#[test]
fn a_shard_directory_whose_sync_failed_is_synced_by_the_next_open() {
    let io = SimIo::new();
    let s = open(&io, "/d");
    io.fail_next_syncs(1);
    assert!(s.open_shard(0).is_err(), "the directory sync failed");
    let mut p = s.open_shard(0).expect("the next open");
    p.log.append(1, b"flushed").expect("append");
    assert_eq!(p.log.flush().ok(), Some(1));
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&index_record(1)), b"one")
        .expect("commit");
    drop(p);
    drop(s);
    io.crash(CrashMode::LoseAll);
    let s = open(&io, "/d");
    let mut p = s.open_shard(0).expect("open after the power cut");
    assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"one"[..]));
    let mut seen = Vec::new();
    p.log
        .read(0, &mut |lsn, bytes| {
            seen.push((lsn, bytes.to_vec()));
            Ok(())
        })
        .expect("read");
    assert_eq!(seen, vec![(1, b"flushed".to_vec())]);
}

/// A base chunk whose write failed is missing from the base: the part
/// latches, so that base can never be committed, and a reopen reads the
/// last commit.
#[test]
fn a_base_chunk_that_was_not_written_latches_the_checkpoint() {
    let io = SimIo::new();
    let s = open(&io, "/b");
    let mut p = base_begun(&s);
    io.fail_next_writes(1);
    assert!(p.checkpoint.base_chunk(&index_record(3)).is_err());
    let latched = |r: Result<(), fusee_storage::StorageError>| {
        matches!(r, Err(fusee_storage::StorageError::Latched { .. }))
    };
    assert!(latched(p.checkpoint.base_chunk(&index_record(4))));
    let commit = p.checkpoint.commit(&mut p.runs, IndexChange::Base, b"two");
    assert!(
        latched(commit.map(|_| ())),
        "a base missing a chunk is never committed"
    );
    drop(p);
    let p = s.open_shard(0).expect("reopen");
    assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"one"[..]));
    assert_eq!(p.recovered.index_records, 1);
}

/// Once a commit's slot is durable the commit has happened: failing to
/// delete the index file it replaced does not make it an error, and the
/// next open deletes the leftover.
#[test]
fn a_durable_commit_succeeds_even_if_cleaning_up_after_it_fails() {
    let io = SimIo::new();
    let s = open(&io, "/e");
    let mut p = base_begun(&s);
    io.fail_next_removes(1);
    let done = p
        .checkpoint
        .commit(&mut p.runs, IndexChange::Base, b"two")
        .expect("the commit is durable, so it succeeded");
    assert_eq!(done.index_records, 1);
    p.checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&index_record(3)), b"three")
        .expect("the part is still writable");
    drop(p);
    let p = s.open_shard(0).expect("reopen");
    assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"three"[..]));
    assert_eq!(p.recovered.index_records, 2);
}

/// A flush whose sync failed latches the log; the shard is then opened
/// again in the same boot, as the contract says. On Linux the failed
/// batch's bytes are still readable but no later sync writes them, so the
/// open must write them again before reporting them: after a power cut the
/// log still holds every record that open reported.
#[test]
fn records_left_by_a_failed_flush_are_written_again_before_open_reports_them() {
    // 300 flushed records fill the first 64 KiB segment past half, so the
    // next one is made ready before the batch that fails; 400 more roll
    // into it.
    const FLUSHED: u64 = 300;
    for records in [1u64, 50, 400] {
        let io = SimIo::new();
        io.forget_failed_syncs();
        let s = open(&io, "/l");
        let mut p = s.open_shard(0).expect("shard");
        let record = |lsn: u64| vec![lsn as u8; 100];
        for lsn in 1..=FLUSHED {
            p.log.append(lsn, &record(lsn)).expect("append");
        }
        assert_eq!(p.log.flush().ok(), Some(FLUSHED));
        for lsn in FLUSHED + 1..=FLUSHED + records {
            p.log.append(lsn, &record(lsn)).expect("append");
        }
        io.fail_next_syncs(1);
        assert!(p.log.flush().is_err(), "the sync failed");
        drop(p);
        let p = s.open_shard(0).expect("reopen in the same boot");
        let reported = p.log.last_lsn();
        assert_eq!(reported, FLUSHED + records, "the failed batch is readable");
        drop(p);
        drop(s);
        io.crash(CrashMode::LoseAll);
        let s = open(&io, "/l");
        let mut p = s.open_shard(0).expect("open after the power cut");
        let mut next = 1;
        p.log
            .read(0, &mut |lsn, bytes| {
                assert_eq!((lsn, bytes), (next, &record(lsn)[..]));
                next += 1;
                Ok(())
            })
            .expect("read");
        assert_eq!(
            next - 1,
            reported,
            "{records} records: what the open reported"
        );
    }
}
