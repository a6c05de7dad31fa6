//! The memory backend's fault switches that the conformance suite does not
//! cover: split flushes (records durable only when their ticket is
//! finished) and held flushes.

use fusee_storage::{LogStore, MemoryStorage, Storage};

#[test]
fn a_split_flush_is_durable_only_once_finished() {
    let memory = MemoryStorage::new();
    memory.split_flushes(true);
    let mut parts = memory.open_shard(0).unwrap();
    parts.log.append(1, b"one").unwrap();
    let mut ticket = parts.log.begin_flush().unwrap();
    ticket.run();
    parts.log.finish_flush(ticket).unwrap();
    parts.log.append(2, b"two").unwrap();
    let mut ticket = parts.log.begin_flush().unwrap();
    // The ticket ran (the write happened) but the host never finished it.
    ticket.run();
    assert_eq!(parts.log.durable_lsn(), 1);
    drop(parts);
    let memory = memory.crash();
    let parts = memory.open_shard(0).unwrap();
    assert_eq!(parts.log.last_lsn(), 1, "the unfinished flush is lost");

    // Off: begin_flush makes the records durable itself.
    memory.split_flushes(false);
    let mut parts = parts;
    parts.log.append(2, b"two").unwrap();
    let _unfinished = parts.log.begin_flush().unwrap();
    drop(parts);
    let memory = memory.crash();
    assert_eq!(memory.open_shard(0).unwrap().log.last_lsn(), 2);
}
