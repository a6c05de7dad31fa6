//! Log clauses.

use fusee_core::record::Lsn;

use super::{Harness, open, read_log, record};
use crate::{LogStore, MAX_RECORD, Storage, StorageError};

/// Appends records `from..=to` of sequence `salt`.
fn append_range<L: LogStore>(log: &mut L, from: Lsn, to: Lsn, salt: u64) {
    for lsn in from..=to {
        log.append(lsn, &record(lsn, salt))
            .unwrap_or_else(|e| panic!("append({lsn}) failed: {e}"));
    }
}

/// Checks that the log holds exactly records `after+1..=last` of `salt`.
fn check_range<L: LogStore>(log: &mut L, after: Lsn, last: Lsn, salt: u64) {
    let (records, end) =
        read_log(log, after).unwrap_or_else(|e| panic!("read({after}) failed: {e}"));
    assert_eq!(
        end, last,
        "read({after}) returned end {end}, expected {last}"
    );
    assert_eq!(
        records.len() as u64,
        last - after,
        "read({after}) visited a wrong count"
    );
    for (i, (lsn, bytes)) in records.iter().enumerate() {
        let want = after + 1 + i as u64;
        assert_eq!(
            *lsn, want,
            "read({after}) visited LSN {lsn} at position {i}"
        );
        assert!(*bytes == record(want, salt), "record {want} changed");
    }
}

/// Append, flush and read round trip: `flush` returns the last LSN, `read(0)`
/// visits every record in order with its exact bytes, before and after the
/// flush, and again after a clean reopen.
pub fn log_round_trip<H: Harness>(h: &mut H) {
    let s = h.open();
    let mut p = open(&s, 0);
    assert_eq!(
        (p.log.last_lsn(), p.log.durable_lsn()),
        (0, 0),
        "fresh log not empty"
    );
    append_range(&mut p.log, 1, 500, 1);
    assert_eq!(p.log.last_lsn(), 500);
    check_range(&mut p.log, 0, 500, 1);
    assert_eq!(
        p.log.flush().ok(),
        Some(500),
        "flush must return the last LSN"
    );
    assert_eq!(p.log.durable_lsn(), 500);
    append_range(&mut p.log, 501, 700, 1);
    assert_eq!(p.log.flush().ok(), Some(700));
    assert_eq!(
        p.log.flush().ok(),
        Some(700),
        "an empty flush returns the durable LSN"
    );
    check_range(&mut p.log, 0, 700, 1);
    drop(p);
    let s = h.reopen(s);
    let mut p = open(&s, 0);
    assert_eq!(p.log.last_lsn(), 700);
    assert_eq!(p.log.durable_lsn(), 700);
    check_range(&mut p.log, 0, 700, 1);
}

/// LSN continuity: a fresh log accepts only LSN 1; an append that skips or
/// repeats is an `LsnGap` error that changes nothing; after a reopen the log
/// continues right after its last flushed record.
pub fn log_lsn_continuity<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let mut p = open(&s, 3);
    for bad in [0, 2, 5] {
        match p.log.append(bad, b"x") {
            Err(StorageError::LsnGap { expected: 1, got }) => assert_eq!(got, bad),
            other => panic!("append({bad}) on a fresh log: expected LsnGap, got {other:?}"),
        }
    }
    append_range(&mut p.log, 1, 10, 2);
    for bad in [10, 9, 12] {
        assert!(
            matches!(
                p.log.append(bad, b"x"),
                Err(StorageError::LsnGap { expected: 11, .. })
            ),
            "append({bad}) after 10 must be LsnGap"
        );
    }
    assert_eq!(p.log.flush().ok(), Some(10));
    drop(p);
    for round in 0..3u64 {
        s = h.reopen(s);
        let mut p = open(&s, 3);
        let last = 10 + round * 5;
        assert_eq!(p.log.last_lsn(), last, "last LSN after reopen {round}");
        assert!(
            matches!(
                p.log.append(last + 2, b"x"),
                Err(StorageError::LsnGap { .. })
            ),
            "a gap after reopen must be refused"
        );
        append_range(&mut p.log, last + 1, last + 5, 2);
        assert_eq!(p.log.flush().ok(), Some(last + 5));
        check_range(&mut p.log, 0, last + 5, 2);
        drop(p);
    }
}

/// Flushes batches 1..=`flushed` in several flushes, then appends
/// `flushed+1..=appended` without flushing.
fn flushed_then_tail<L: LogStore>(log: &mut L, flushed: Lsn, appended: Lsn, salt: u64) {
    let mut lsn = 1;
    let mut batch = 1;
    while lsn <= flushed {
        let to = (lsn + batch - 1).min(flushed);
        append_range(log, lsn, to, salt);
        assert_eq!(log.flush().ok(), Some(to), "flush of batch ending at {to}");
        lsn = to + 1;
        batch = batch * 2 + 1;
    }
    append_range(log, flushed + 1, appended, salt);
}

/// Checks the prefix property after a crash and returns the recovered last
/// LSN: every flushed record present and intact, nothing invented, no hole.
fn check_prefix<L: LogStore>(log: &mut L, flushed: Lsn, appended: Lsn, salt: u64) -> Lsn {
    let last = log.last_lsn();
    assert!(
        (flushed..=appended).contains(&last),
        "after a crash the log ends at {last}: flushed {flushed}, appended {appended}"
    );
    assert_eq!(
        log.durable_lsn(),
        last,
        "after a crash everything held is durable"
    );
    check_range(log, 0, last, salt);
    last
}

/// The prefix property after a crash: flushed records all present and
/// intact, nothing invented, no hole; appends continue after the prefix and
/// survive a second crash once flushed.
pub fn log_prefix_after_crash<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let mut p = open(&s, 1);
    flushed_then_tail(&mut p.log, 300, 340, 3);
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 1);
    let last = check_prefix(&mut p.log, 300, 340, 3);
    append_range(&mut p.log, last + 1, last + 20, 3);
    assert_eq!(p.log.flush().ok(), Some(last + 20));
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 1);
    check_prefix(&mut p.log, last + 20, last + 20, 3);
}

/// Unflushed records vanish whole or stay whole: a tail of large records
/// (1 MiB each) appended after the last flush, then a crash, leaves each
/// either absent or byte-identical.
pub fn log_unflushed_whole<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let mut p = open(&s, 2);
    append_range(&mut p.log, 1, 5, 4);
    assert_eq!(p.log.flush().ok(), Some(5));
    let big = |lsn: Lsn| super::frame(1 << 20, lsn);
    for lsn in 6..=12 {
        p.log
            .append(lsn, &big(lsn))
            .unwrap_or_else(|e| panic!("append({lsn}): {e}"));
    }
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 2);
    let last = p.log.last_lsn();
    assert!(
        (5..=12).contains(&last),
        "log ends at {last} after crash (flushed 5, appended 12)"
    );
    let (records, end) = read_log(&mut p.log, 0).unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(end, last);
    assert_eq!(records.len() as u64, last, "hole in the recovered log");
    for (lsn, bytes) in records {
        let want = if lsn <= 5 { record(lsn, 4) } else { big(lsn) };
        assert!(bytes == want, "record {lsn} recovered with different bytes");
    }
}

/// discard_through: reads before the first kept record are `Trimmed` naming
/// it; later records stay readable; discarding beyond the durable LSN is an
/// error; the last LSN survives discarding everything and reopening.
pub fn log_discard_through<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let mut p = open(&s, 0);
    append_range(&mut p.log, 1, 200, 5);
    assert_eq!(p.log.flush().ok(), Some(200));
    append_range(&mut p.log, 201, 210, 5);
    assert!(
        p.log.discard_through(205).is_err(),
        "discarding unflushed records must fail"
    );
    p.log
        .discard_through(100)
        .unwrap_or_else(|e| panic!("discard_through(100): {e}"));
    let first = p.log.first_lsn();
    assert!(
        (1..=101).contains(&first),
        "first_lsn {first} after discarding through 100"
    );
    check_range(&mut p.log, 100, 210, 5);
    check_trimmed(&mut p.log, first, 5);
    assert_eq!(p.log.flush().ok(), Some(210));
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    let first = p.log.first_lsn();
    assert!((1..=101).contains(&first), "first_lsn {first} after reopen");
    check_range(&mut p.log, 100, 210, 5);
    check_trimmed(&mut p.log, first, 5);
    // Discard everything: the end must survive.
    p.log
        .discard_through(210)
        .unwrap_or_else(|e| panic!("discard_through(210): {e}"));
    p.log
        .discard_through(50)
        .unwrap_or_else(|e| panic!("discarding again below: {e}"));
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    assert_eq!(
        p.log.last_lsn(),
        210,
        "the last LSN must survive discarding every record"
    );
    check_range(&mut p.log, 210, 210, 5);
    assert!(
        matches!(
            p.log.append(1, b"x"),
            Err(StorageError::LsnGap { expected: 211, .. })
        ),
        "after discarding everything appends continue at 211"
    );
    append_range(&mut p.log, 211, 215, 5);
    assert_eq!(p.log.flush().ok(), Some(215));
    check_range(&mut p.log, 210, 215, 5);
}

/// Reads starting before `first` are `Trimmed { first_kept: first }`; from
/// `first - 1` on they succeed.
fn check_trimmed<L: LogStore>(log: &mut L, first: Lsn, salt: u64) {
    let last = log.last_lsn();
    if first >= 2 {
        match read_log(log, first - 2) {
            Err(StorageError::Trimmed { first_kept }) => assert_eq!(first_kept, first),
            other => panic!(
                "read({}) below first {first}: expected Trimmed, got {other:?}",
                first - 2
            ),
        }
        assert!(matches!(
            read_log(log, 0),
            Err(StorageError::Trimmed { .. })
        ));
    }
    check_range(log, first - 1, last, salt);
}

/// read(after) from every position 0..=last visits exactly the records
/// after it; after the last record it is a `BeyondEnd` error.
pub fn log_read_from_every_position<H: Harness>(h: &mut H) {
    let s = h.open();
    let mut p = open(&s, 0);
    append_range(&mut p.log, 1, 120, 6);
    assert_eq!(p.log.flush().ok(), Some(120));
    append_range(&mut p.log, 121, 130, 6);
    for after in 0..=130 {
        check_range(&mut p.log, after, 130, 6);
    }
    assert!(matches!(
        read_log(&mut p.log, 131),
        Err(StorageError::BeyondEnd {
            after: 131,
            last: 130
        })
    ));
    // A visitor's error stops the read and comes back.
    let mut seen = 0;
    let r = p.log.read(0, &mut |_, _| {
        seen += 1;
        if seen == 3 {
            Err(StorageError::Corrupt {
                what: "visitor",
                at: 3,
            })
        } else {
            Ok(())
        }
    });
    assert!(matches!(
        r,
        Err(StorageError::Corrupt {
            what: "visitor",
            ..
        })
    ));
    assert_eq!(seen, 3, "the read went on after the visitor failed");
}

/// Empty and 64 MiB records round-trip, through a reopen.
pub fn log_record_sizes<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let mut p = open(&s, 0);
    let big = super::frame(fusee_core::wire::MAX_PAYLOAD, 7);
    let max = super::frame(MAX_RECORD, 8);
    let want: Vec<&[u8]> = vec![b"", &big, b"", b"z", &max];
    for (i, r) in want.iter().enumerate() {
        p.log
            .append(i as Lsn + 1, r)
            .unwrap_or_else(|e| panic!("append #{i} ({} B): {e}", r.len()));
    }
    assert_eq!(p.log.flush().ok(), Some(5));
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    let mut n = 0;
    let end = p
        .log
        .read(0, &mut |lsn, bytes| {
            n += 1;
            assert!(
                bytes == want[n - 1],
                "record {lsn} ({} B) changed",
                want[n - 1].len()
            );
            Ok(())
        })
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!((end, n), (5, 5));
}

/// A record over `MAX_RECORD` is a `TooLarge` error that consumes no LSN.
pub fn log_too_large<H: Harness>(h: &mut H) {
    let s = h.open();
    let mut p = open(&s, 0);
    append_range(&mut p.log, 1, 2, 9);
    // calloc'd zeroes: no page is touched unless the backend copies them.
    let over = vec![0u8; MAX_RECORD + 1];
    match p.log.append(3, &over) {
        Err(StorageError::TooLarge { len, max, .. }) => {
            assert_eq!((len, max), ((MAX_RECORD + 1) as u64, MAX_RECORD as u64));
        }
        other => panic!("oversized append: expected TooLarge, got {other:?}"),
    }
    append_range(&mut p.log, 3, 4, 9);
    assert_eq!(p.log.flush().ok(), Some(4));
    check_range(&mut p.log, 0, 4, 9);
    let _ = s.shards();
}

/// Repeated power losses in the middle of work: twenty rounds of batches of
/// records from 0 B to 100 KiB, some flushed and some not, each ended by a
/// crash; after each, the prefix property holds and appends continue. Needs
/// [`super::Capabilities::power_loss`]: with a process crash only, torn
/// unsynced writes never happen and the clause would prove nothing new.
pub fn log_power_loss<H: Harness>(h: &mut H) {
    if !h.capabilities().power_loss {
        return super::skip(
            "log_power_loss",
            "the harness's crash does not simulate power loss (torn unsynced writes)",
        );
    }
    let sized = |lsn: Lsn| super::frame((lsn as usize * 7919) % 100_000, lsn ^ 0xB0);
    let mut s = h.open();
    let mut last = 0;
    for round in 0..20u64 {
        let mut p = open(&s, 8);
        assert_eq!(
            p.log.last_lsn(),
            last,
            "round {round}: log does not continue"
        );
        let mut flushed = last;
        for batch in 0..round % 5 + 1 {
            for _ in 0..batch + 2 {
                last += 1;
                p.log
                    .append(last, &sized(last))
                    .unwrap_or_else(|e| panic!("append: {e}"));
            }
            if (round + batch) % 3 != 0 {
                flushed = p.log.flush().unwrap_or_else(|e| panic!("flush: {e}"));
            }
        }
        let appended = last;
        drop(p);
        s = h.crash(s);
        let mut p = open(&s, 8);
        last = p.log.last_lsn();
        assert!(
            (flushed..=appended).contains(&last),
            "round {round}: log ends at {last}, flushed {flushed}, appended {appended}"
        );
        let (records, end) = read_log(&mut p.log, 0).unwrap_or_else(|e| panic!("read: {e}"));
        assert_eq!(
            (end, records.len() as u64),
            (last, last),
            "round {round}: hole"
        );
        for (lsn, bytes) in records {
            assert!(bytes == sized(lsn), "round {round}: record {lsn} changed");
        }
    }
}

/// A flush split in two ([`LogStore::begin_flush`], [`crate::FlushTicket::run`]
/// on another thread, [`LogStore::finish_flush`]): records appended while the
/// ticket is out are not covered by it and are read back with the rest; the
/// durable LSN moves only when the ticket comes back, to the ticket's last
/// LSN; the next flush covers the rest. A ticket that is never finished, run
/// or not, leaves a prefix after a crash. With fault injection, a failed
/// split flush latches the log like a failed `flush`.
pub fn log_pipelined_flush<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let mut p = open(&s, 5);
    append_range(&mut p.log, 1, 100, 11);
    let mut ticket = p
        .log
        .begin_flush()
        .unwrap_or_else(|e| panic!("begin_flush: {e}"));
    assert_eq!(
        ticket.last_lsn(),
        100,
        "the ticket covers what was appended"
    );
    append_range(&mut p.log, 101, 150, 11);
    check_range(&mut p.log, 0, 150, 11);
    let ran = std::thread::scope(|scope| {
        scope
            .spawn(move || {
                let ok = ticket.run();
                (ok, ticket)
            })
            .join()
    });
    let (ok, ticket) = ran.unwrap_or_else(|_| panic!("the flush thread panicked"));
    assert!(ok, "the ticket's I/O failed");
    assert_eq!(p.log.finish_flush(ticket).ok(), Some(100));
    assert_eq!(
        p.log.durable_lsn(),
        100,
        "durable moves to the ticket's end"
    );
    assert_eq!(p.log.last_lsn(), 150);
    check_range(&mut p.log, 0, 150, 11);
    // Finishing runs a ticket nobody ran; an empty one reports the durable LSN.
    let ticket = p.log.begin_flush().unwrap_or_else(|e| panic!("begin: {e}"));
    assert_eq!(p.log.finish_flush(ticket).ok(), Some(150));
    let ticket = p.log.begin_flush().unwrap_or_else(|e| panic!("begin: {e}"));
    assert_eq!(p.log.finish_flush(ticket).ok(), Some(150));
    // A ticket out (run, then not) when the process dies.
    append_range(&mut p.log, 151, 160, 11);
    let mut ran = p.log.begin_flush().unwrap_or_else(|e| panic!("begin: {e}"));
    assert!(ran.run(), "the ticket's I/O failed");
    drop(p);
    drop(ran);
    s = h.crash(s);
    let mut p = open(&s, 5);
    let last = check_prefix(&mut p.log, 150, 160, 11);
    append_range(&mut p.log, last + 1, 170, 11);
    let pending = p.log.begin_flush().unwrap_or_else(|e| panic!("begin: {e}"));
    drop(p);
    drop(pending);
    s = h.crash(s);
    let mut p = open(&s, 5);
    let last = check_prefix(&mut p.log, last, 170, 11);
    if !h.capabilities().fault_injection {
        return;
    }
    append_range(&mut p.log, last + 1, last + 5, 11);
    h.fail_next_flush(&s, 5);
    // The failure may surface when the flush begins or when it ends.
    let failed = match p.log.begin_flush() {
        Err(_) => true,
        Ok(ticket) => p.log.finish_flush(ticket).is_err(),
    };
    assert!(
        failed,
        "the injected failure of a split flush was not reported"
    );
    assert!(
        p.log.append(last + 6, b"x").is_err(),
        "append after a failed split flush"
    );
    assert!(p.log.flush().is_err(), "a failed flush is never retried");
}
