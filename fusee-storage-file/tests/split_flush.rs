//! The file log's own rules for a split flush (beyond the conformance
//! clause): one ticket out at a time, tickets only go back to the log that
//! made them, and a ticket dropped instead of finished leaves the log
//! refusing flushes until the shard is reopened, with every record that was
//! flushed before still there.

use fusee_storage::{LogStore, Storage, StorageError};
use fusee_storage_file::sim::SimIo;
use fusee_storage_file::{FileOptions, FileStorage, FlushMethod};

fn open(io: &SimIo) -> FileStorage<SimIo> {
    let options = FileOptions {
        segment_bytes: 64 << 10,
        flush: FlushMethod::DataSync,
        ..FileOptions::default()
    };
    FileStorage::open_with(io.clone(), "/s", options).expect("open storage")
}

fn misuse(result: Result<impl std::fmt::Debug, StorageError>, what: &str) {
    match result {
        Err(StorageError::Misuse { .. }) => {}
        other => panic!("{what}: expected a misuse error, got {other:?}"),
    }
}

#[test]
fn one_ticket_at_a_time_and_only_to_its_own_log() {
    let io = SimIo::new();
    let s = open(&io);
    let mut a = s.open_shard(0).expect("shard 0");
    let mut b = s.open_shard(1).expect("shard 1");
    a.log.append(1, b"a1").expect("append");
    b.log.append(1, b"b1").expect("append");
    let ta = a.log.begin_flush().expect("begin a");
    misuse(a.log.begin_flush(), "a second ticket");
    misuse(a.log.flush(), "a flush while a ticket is out");
    let tb = b.log.begin_flush().expect("begin b");
    misuse(a.log.finish_flush(tb), "b's ticket handed to a");
    assert_eq!(a.log.finish_flush(ta).ok(), Some(1));
    assert_eq!(a.log.durable_lsn(), 1);
    // b's ticket was consumed by the refused call: b is left with a ticket
    // out, like a dropped one.
    b.log.append(2, b"b2").expect("appends go on");
    misuse(b.log.flush(), "b after losing its ticket");
}

#[test]
fn a_dropped_ticket_wedges_flushes_until_reopen() {
    let io = SimIo::new();
    let s = open(&io);
    let mut p = s.open_shard(0).expect("shard");
    for lsn in 1..=10 {
        p.log.append(lsn, &[lsn as u8; 50]).expect("append");
    }
    assert_eq!(p.log.flush().ok(), Some(10));
    for lsn in 11..=20 {
        p.log.append(lsn, &[lsn as u8; 50]).expect("append");
    }
    drop(p.log.begin_flush().expect("begin"));
    misuse(p.log.flush(), "a flush after a dropped ticket");
    assert_eq!(p.log.durable_lsn(), 10, "nothing more is reported durable");
    drop(p);
    s.close().expect("close");
    drop(s);
    let s = open(&io);
    let mut p = s.open_shard(0).expect("reopen");
    let last = p.log.last_lsn();
    assert!((10..=20).contains(&last), "reopened at {last}");
    p.log
        .append(last + 1, b"again")
        .expect("append after reopen");
    assert_eq!(p.log.flush().ok(), Some(last + 1));
}

#[test]
fn a_ticket_run_after_close_writes_nothing() {
    let io = SimIo::new();
    let s = open(&io);
    let mut p = s.open_shard(0).expect("shard");
    p.log.append(1, b"flushed").expect("append");
    assert_eq!(p.log.flush().ok(), Some(1));
    p.log.append(2, b"never flushed").expect("append");
    let mut ticket = p.log.begin_flush().expect("begin");
    s.close().expect("close");
    assert!(!ticket.run(), "a ticket ran after close");
    drop(ticket);
    drop(p);
    drop(s);
    // Even with every unsynced write kept, record 2 was never written.
    io.crash(fusee_storage_file::sim::CrashMode::KeepAll);
    let s = open(&io);
    let p = s.open_shard(0).expect("reopen");
    assert_eq!(p.log.last_lsn(), 1, "the late ticket made record 2 durable");
}
