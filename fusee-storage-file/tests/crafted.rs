//! Files whose checksums are right but whose fields are out of range (a
//! writer's bug, a foreign or hand-edited file): an open refuses them or
//! treats them as damage, never panics, aborts or wraps around. Each test
//! rewrites fields of one file of a healthy shard on the simulated disk,
//! with its checksum recomputed, then opens and uses the shard.

use std::path::Path;

use fusee_storage::{CheckpointStore, IndexChange, LogStore, MAX_SEQ, Storage};
use fusee_storage_file::io::{Io, IoFile, OpenMode};
use fusee_storage_file::manifest::Manifest;
use fusee_storage_file::sim::SimIo;
use fusee_storage_file::slot::Slot;
use fusee_storage_file::{FileOptions, FileStorage, FlushMethod};

fn options() -> FileOptions {
    FileOptions {
        segment_bytes: 16 << 10,
        flush: FlushMethod::DataSync,
        ..FileOptions::default()
    }
}

const SHARD: &str = "/p/shard-0000000000";

/// A shard with 10 records flushed and sealed and two commits, closed.
fn build() -> SimIo {
    let io = SimIo::new();
    let s = FileStorage::open_with(io.clone(), "/p", options()).expect("open");
    let mut p = s.open_shard(0).expect("shard");
    for lsn in 1..=10 {
        p.log.append(lsn, &[lsn as u8; 100]).expect("append");
    }
    p.log.flush().expect("flush");
    p.log.seal().expect("seal");
    for c in [&b"one"[..], b"two"] {
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&[]), c)
            .expect("commit");
    }
    drop(p);
    s.close().expect("close");
    io
}

fn read(io: &SimIo, path: &str) -> Vec<u8> {
    io.open(Path::new(path), OpenMode::Existing)
        .expect("open file")
        .map()
        .expect("map")
        .to_vec()
}

fn write(io: &SimIo, path: &str, bytes: &[u8]) {
    let f = io
        .open(Path::new(path), OpenMode::Existing)
        .expect("open file");
    f.set_len(0).expect("truncate");
    f.write_at(0, bytes).expect("write");
    f.sync_all().expect("sync");
}

/// Rewrites both checkpoint slots through `edit`.
fn edit_slots(io: &SimIo, edit: impl Fn(&mut Slot)) {
    for i in 0..2 {
        let path = format!("{SHARD}/slot-{i}");
        let mut s = Slot::decode(&read(io, &path), "s")
            .expect("decodes")
            .expect("written");
        edit(&mut s);
        write(io, &path, &s.encode());
    }
}

/// Opens the shard and uses it: append, flush, seal, commit, reopen.
fn open_and_use(io: &SimIo) -> Result<(), String> {
    for round in 0..2 {
        let s = FileStorage::open_with(io.clone(), "/p", options()).map_err(|e| e.to_string())?;
        let mut p = s.open_shard(0).map_err(|e| e.to_string())?;
        let last = p.log.last_lsn();
        p.log.append(last + 1, b"more").map_err(|e| e.to_string())?;
        p.log.flush().map_err(|e| e.to_string())?;
        p.log.seal().map_err(|e| e.to_string())?;
        p.checkpoint
            .commit(
                &mut p.runs,
                IndexChange::Delta(&[]),
                format!("r{round}").as_bytes(),
            )
            .map_err(|e| e.to_string())?;
        drop(p);
        s.close().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A slot claiming 2^35 index records in a 2^40-byte index: the table is
/// sized from the index file the open finds, so the open refuses the slot
/// instead of reserving half a terabyte (which aborted the process).
#[test]
fn a_slot_claiming_a_huge_index_is_refused_without_reserving_it() {
    let io = build();
    edit_slots(&io, |s| {
        s.index_records = 1 << 35;
        s.index_len = 1 << 40;
    });
    let err = open_and_use(&io).expect_err("a slot naming more index than its file holds");
    assert!(err.contains("index"), "{err}");
}

/// Sequence numbers past [`MAX_SEQ`] are damage where they are read: the
/// next write's `seq + 1` can never overflow (it panicked in debug builds
/// and, in release, wrapped to a number the older copy beat).
#[test]
fn sequence_numbers_past_their_bound_are_damage() {
    // Both checkpoint slots: the open refuses them.
    let io = build();
    edit_slots(&io, |s| s.seq = u64::MAX);
    let err = open_and_use(&io).expect_err("both slots out of range");
    assert!(err.contains("sequence number out of range"), "{err}");
    // At the bound, the shard opens and commits on.
    let io = build();
    edit_slots(&io, |s| s.seq = MAX_SEQ - 1);
    open_and_use(&io).expect("slots at the bound");

    // Both log manifests.
    let io = build();
    for i in 0..2 {
        let path = format!("{SHARD}/log/manifest-{i}");
        let mut m = Manifest::decode(&read(&io, &path), "m")
            .expect("decodes")
            .expect("written");
        m.seq = u64::MAX;
        write(&io, &path, &m.encode());
    }
    let err = open_and_use(&io).expect_err("both manifests out of range");
    assert!(err.contains("sequence number out of range"), "{err}");

    // The seal's only written slot: damage, so the shard reads as never
    // sealed (the first seal's torn write looks the same) and seals on.
    let io = build();
    let path = format!("{SHARD}/seal");
    let mut b = read(&io, &path);
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    let crc = crc32fast::hash(&b[..32]);
    b[32..36].copy_from_slice(&crc.to_le_bytes());
    write(&io, &path, &b);
    open_and_use(&io).expect("a damaged seal slot");
}
