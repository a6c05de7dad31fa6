//! Log clauses.

use fusee_core::record::Lsn;

use super::check::{Clause, check_bytes, check_matches};
use super::{Harness, check, check_eq, fail, flush_to, must, open, read_log, record};
use crate::{FlushTicket, LogStore, MAX_RECORD, SealTicket, StorageError};

/// Appends records `from..=to` of sequence `salt`.
fn append_range<L: LogStore>(log: &mut L, from: Lsn, to: Lsn, salt: u64) {
    for lsn in from..=to {
        must!(log.append(lsn, &record(lsn, salt)), "append({lsn})");
    }
}

/// Checks that the log holds exactly records `after+1..=last` of `salt`.
fn check_range<L: LogStore>(log: &mut L, after: Lsn, last: Lsn, salt: u64) {
    let (records, end) = must!(read_log(log, after), "read(after {after})");
    check_eq!(end, last, "read(after {after}) must return the last LSN");
    check_eq!(
        records.len() as u64,
        last - after,
        "read(after {after}) must visit every record from {} to {last}: the count",
        after + 1
    );
    for (i, (lsn, bytes)) in records.iter().enumerate() {
        let want = after + 1 + i as u64;
        check_eq!(
            *lsn,
            want,
            "read(after {after}) must visit LSNs in order: the LSN at position {i}"
        );
        check_bytes(
            bytes,
            &record(want, salt),
            format_args!("read(after {after}) must return record {want} as appended"),
        );
    }
}

/// Append, flush and read round trip: `flush` returns the last LSN, `read(0)`
/// visits every record in order with its exact bytes, before and after the
/// flush, and again after a clean reopen.
pub fn log_round_trip<H: Harness>(h: &mut H) {
    let _c = Clause::enter("log_round_trip");
    let s = h.open();
    let mut p = open(&s, 0);
    check_eq!(
        (p.log.last_lsn(), p.log.durable_lsn()),
        (0, 0),
        "a fresh log's (last, durable) LSNs"
    );
    append_range(&mut p.log, 1, 500, 1);
    check_eq!(p.log.last_lsn(), 500, "last_lsn after appending 1 to 500");
    check_range(&mut p.log, 0, 500, 1);
    flush_to(
        &mut p.log,
        500,
        format_args!("flush after appending 1 to 500"),
    );
    check_eq!(p.log.durable_lsn(), 500, "durable_lsn after the flush");
    append_range(&mut p.log, 501, 700, 1);
    flush_to(
        &mut p.log,
        700,
        format_args!("flush after appending 501 to 700"),
    );
    flush_to(
        &mut p.log,
        700,
        format_args!("an empty flush (it returns the durable LSN)"),
    );
    check_range(&mut p.log, 0, 700, 1);
    drop(p);
    let s = h.reopen(s);
    let mut p = open(&s, 0);
    check_eq!(p.log.last_lsn(), 700, "last_lsn after a reopen");
    check_eq!(p.log.durable_lsn(), 700, "durable_lsn after a reopen");
    check_range(&mut p.log, 0, 700, 1);
}

/// Checks that appending `lsn` is refused with `LsnGap { expected, got:
/// lsn }`.
fn check_gap<L: LogStore>(log: &mut L, lsn: Lsn, expected: Lsn, when: &str) {
    check_matches!(
        log.append(lsn, b"x"),
        Err(StorageError::LsnGap { expected: e, got }) if e == expected && got == lsn,
        format_args!("Err(LsnGap {{ expected: {expected}, got: {lsn} }})"),
        "append({lsn}) {when}"
    );
}

/// LSN continuity: a fresh log accepts only LSN 1; an append that skips or
/// repeats is an `LsnGap` error that changes nothing; after a reopen the log
/// continues right after its last flushed record.
pub fn log_lsn_continuity<H: Harness>(h: &mut H) {
    let _c = Clause::enter("log_lsn_continuity");
    let mut s = h.open();
    let mut p = open(&s, 3);
    for bad in [0, 2, 5] {
        check_gap(&mut p.log, bad, 1, "on a fresh log");
    }
    append_range(&mut p.log, 1, 10, 2);
    for bad in [10, 9, 12] {
        check_gap(&mut p.log, bad, 11, "after 10");
    }
    flush_to(&mut p.log, 10, format_args!("flush of 1 to 10"));
    drop(p);
    for round in 0..3u64 {
        s = h.reopen(s);
        let mut p = open(&s, 3);
        let last = 10 + round * 5;
        check_eq!(p.log.last_lsn(), last, "last_lsn after reopen {round}");
        check_gap(&mut p.log, last + 2, last + 1, "after a reopen");
        append_range(&mut p.log, last + 1, last + 5, 2);
        flush_to(
            &mut p.log,
            last + 5,
            format_args!("flush after reopen {round}"),
        );
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
        flush_to(log, to, format_args!("flush of the batch ending at {to}"));
        lsn = to + 1;
        batch = batch * 2 + 1;
    }
    append_range(log, flushed + 1, appended, salt);
}

/// Checks the prefix property of a log just opened (after a crash, or
/// after its last owner let go without a clean close) and returns its last
/// LSN: every flushed record present and intact, nothing invented, no hole.
pub(super) fn check_prefix<L: LogStore>(
    log: &mut L,
    flushed: Lsn,
    appended: Lsn,
    salt: u64,
) -> Lsn {
    let last = log.last_lsn();
    check!(
        (flushed..=appended).contains(&last),
        "the log opened must end between the last flushed LSN {flushed} and the last appended {appended}; found last_lsn {last}"
    );
    check_eq!(
        log.durable_lsn(),
        last,
        "everything the log opened holds is durable: durable_lsn"
    );
    check_range(log, 0, last, salt);
    last
}

/// The prefix property after a crash: flushed records all present and
/// intact, nothing invented, no hole; appends continue after the prefix and
/// survive a second crash once flushed.
pub fn log_prefix_after_crash<H: Harness>(h: &mut H) {
    let _c = Clause::enter("log_prefix_after_crash");
    let mut s = h.open();
    let mut p = open(&s, 1);
    flushed_then_tail(&mut p.log, 300, 340, 3);
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 1);
    let last = check_prefix(&mut p.log, 300, 340, 3);
    append_range(&mut p.log, last + 1, last + 20, 3);
    flush_to(&mut p.log, last + 20, format_args!("flush after the crash"));
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 1);
    check_prefix(&mut p.log, last + 20, last + 20, 3);
}

/// Unflushed records vanish whole or stay whole: a tail of large records
/// (1 MiB each) appended after the last flush, then a crash, leaves each
/// either absent or byte-identical.
pub fn log_unflushed_whole<H: Harness>(h: &mut H) {
    let _c = Clause::enter("log_unflushed_whole");
    let mut s = h.open();
    let mut p = open(&s, 2);
    append_range(&mut p.log, 1, 5, 4);
    flush_to(&mut p.log, 5, format_args!("flush of 1 to 5"));
    let big = |lsn: Lsn| super::frame(1 << 20, lsn);
    for lsn in 6..=12 {
        must!(p.log.append(lsn, &big(lsn)), "append({lsn}) of 1 MiB");
    }
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 2);
    let last = p.log.last_lsn();
    check!(
        (5..=12).contains(&last),
        "after a crash (5 flushed, 12 appended) the log must end between 5 and 12; found last_lsn {last}"
    );
    let (records, end) = must!(read_log(&mut p.log, 0), "read(after 0) after the crash");
    check_eq!(
        end,
        last,
        "read(after 0) after the crash must return last_lsn"
    );
    check_eq!(
        records.len() as u64,
        last,
        "read(after 0) after the crash must visit every record up to {last}, no hole: the count"
    );
    for (lsn, bytes) in records {
        let want = if lsn <= 5 { record(lsn, 4) } else { big(lsn) };
        check_bytes(
            &bytes,
            &want,
            format_args!("record {lsn} kept by the crash must be whole"),
        );
    }
}

/// discard_through: reads before the first kept record are `Trimmed` naming
/// it; later records stay readable; discarding beyond the durable LSN is an
/// error; the last LSN survives discarding everything and reopening.
pub fn log_discard_through<H: Harness>(h: &mut H) {
    let _c = Clause::enter("log_discard_through");
    let mut s = h.open();
    let mut p = open(&s, 0);
    append_range(&mut p.log, 1, 200, 5);
    flush_to(&mut p.log, 200, format_args!("flush of 1 to 200"));
    append_range(&mut p.log, 201, 210, 5);
    check_matches!(
        p.log.discard_through(205),
        Err(StorageError::Misuse { .. }),
        "Err(Misuse)",
        "discard_through(205) of records not yet flushed (durable 200)"
    );
    must!(p.log.discard_through(100), "discard_through(100)");
    let first = p.log.first_lsn();
    check!(
        (1..=101).contains(&first),
        "after discard_through(100), first_lsn must be between 1 and 101; found {first}"
    );
    check_range(&mut p.log, 100, 210, 5);
    check_trimmed(&mut p.log, first, 5);
    flush_to(&mut p.log, 210, format_args!("flush of 201 to 210"));
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    let first = p.log.first_lsn();
    check!(
        (1..=101).contains(&first),
        "after discard_through(100) and a reopen, first_lsn must be between 1 and 101; found {first}"
    );
    check_range(&mut p.log, 100, 210, 5);
    check_trimmed(&mut p.log, first, 5);
    // Discard everything: the end must survive.
    must!(p.log.discard_through(210), "discard_through(210)");
    must!(
        p.log.discard_through(50),
        "discard_through(50) below what was discarded"
    );
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    check_eq!(
        p.log.last_lsn(),
        210,
        "the last LSN must survive discarding every record and a reopen: last_lsn"
    );
    check_range(&mut p.log, 210, 210, 5);
    check_gap(&mut p.log, 1, 211, "after discarding everything");
    append_range(&mut p.log, 211, 215, 5);
    flush_to(&mut p.log, 215, format_args!("flush of 211 to 215"));
    check_range(&mut p.log, 210, 215, 5);
}

/// Reads starting before `first` are `Trimmed { first_kept: first }`; from
/// `first - 1` on they succeed.
fn check_trimmed<L: LogStore>(log: &mut L, first: Lsn, salt: u64) {
    let last = log.last_lsn();
    if first >= 2 {
        for after in [first - 2, 0] {
            check_matches!(
                read_log(log, after).map(drop),
                Err(StorageError::Trimmed { first_kept }) if first_kept == first,
                format_args!("Err(Trimmed {{ first_kept: {first} }})"),
                "read(after {after}) below the first kept record {first}"
            );
        }
    }
    check_range(log, first - 1, last, salt);
}

/// read(after) from every position 0..=last visits exactly the records
/// after it; after the last record it is a `BeyondEnd` error.
pub fn log_read_from_every_position<H: Harness>(h: &mut H) {
    let _c = Clause::enter("log_read_from_every_position");
    let s = h.open();
    let mut p = open(&s, 0);
    append_range(&mut p.log, 1, 120, 6);
    flush_to(&mut p.log, 120, format_args!("flush of 1 to 120"));
    append_range(&mut p.log, 121, 130, 6);
    for after in 0..=130 {
        check_range(&mut p.log, after, 130, 6);
    }
    check_matches!(
        read_log(&mut p.log, 131).map(drop),
        Err(StorageError::BeyondEnd {
            after: 131,
            last: 130
        }),
        "Err(BeyondEnd { after: 131, last: 130 })",
        "read(after 131) past the last record 130"
    );
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
    check_matches!(
        r,
        Err(StorageError::Corrupt {
            what: "visitor",
            ..
        }),
        "the visitor's own error",
        "read(after 0) whose visitor fails on the third record"
    );
    check_eq!(
        seen,
        3,
        "a visitor's error must stop the read: records visited"
    );
}

/// Empty and 64 MiB records round-trip, through a reopen.
pub fn log_record_sizes<H: Harness>(h: &mut H) {
    let _c = Clause::enter("log_record_sizes");
    let mut s = h.open();
    let mut p = open(&s, 0);
    let big = super::frame(fusee_core::wire::MAX_PAYLOAD, 7);
    let max = super::frame(MAX_RECORD, 8);
    let want: Vec<&[u8]> = vec![b"", &big, b"", b"z", &max];
    for (i, r) in want.iter().enumerate() {
        let lsn = i as Lsn + 1;
        must!(p.log.append(lsn, r), "append({lsn}) of {} bytes", r.len());
    }
    flush_to(&mut p.log, 5, format_args!("flush of the 5 records"));
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    let mut n = 0;
    let end = must!(
        p.log.read(0, &mut |lsn, bytes| {
            n += 1;
            check_eq!(lsn, n as Lsn, "after a reopen, read(after 0) must visit LSNs in order");
            let Some(&expected) = want.get(n - 1) else {
                fail(format_args!(
                    "after a reopen, read(after 0) must visit the 5 records appended; found record {lsn} beyond them"
                ));
            };
            check_bytes(
                bytes,
                expected,
                format_args!("after a reopen, record {lsn}"),
            );
            Ok(())
        }),
        "read(after 0) after a reopen"
    );
    check_eq!(
        (end, n),
        (5, 5),
        "after a reopen, read(after 0) must visit the 5 records (0 B, {} B, 0 B, 1 B, {} B) and return LSN 5: (end, records visited)",
        big.len(),
        max.len()
    );
}

/// A record over `MAX_RECORD` is a `TooLarge` error that consumes no LSN.
pub fn log_too_large<H: Harness>(h: &mut H) {
    let _c = Clause::enter("log_too_large");
    let s = h.open();
    let mut p = open(&s, 0);
    append_range(&mut p.log, 1, 2, 9);
    // calloc'd zeroes: no page is touched unless the backend copies them.
    let over = vec![0u8; MAX_RECORD + 1];
    let (len, max) = ((MAX_RECORD + 1) as u64, MAX_RECORD as u64);
    check_matches!(
        p.log.append(3, &over),
        Err(StorageError::TooLarge { len: l, max: m, .. }) if (l, m) == (len, max),
        format_args!("Err(TooLarge {{ len: {len}, max: {max} }})"),
        "append(3) of a record one byte over MAX_RECORD"
    );
    append_range(&mut p.log, 3, 4, 9);
    flush_to(&mut p.log, 4, format_args!("flush of 1 to 4"));
    check_range(&mut p.log, 0, 4, 9);
}

/// Repeated power losses in the middle of work: twenty rounds of batches of
/// records from 0 B to 100 KiB, some flushed and some not, each ended by a
/// crash; after each, the prefix property holds and appends continue. Needs
/// [`super::Capabilities::power_loss`]: with a process crash only, torn
/// unsynced writes never happen and the clause would prove nothing new.
pub fn log_power_loss<H: Harness>(h: &mut H) {
    let c = Clause::enter("log_power_loss");
    if c.skips(h) {
        return;
    }
    let sized = |lsn: Lsn| super::frame((lsn as usize * 7919) % 100_000, lsn ^ 0xB0);
    let mut s = h.open();
    let mut last = 0;
    for round in 0..20u64 {
        let mut p = open(&s, 8);
        check_eq!(
            p.log.last_lsn(),
            last,
            "round {round}: the log must continue where the last crash left it: last_lsn"
        );
        let mut flushed = last;
        for batch in 0..round % 5 + 1 {
            for _ in 0..batch + 2 {
                last += 1;
                must!(
                    p.log.append(last, &sized(last)),
                    "round {round}: append({last})"
                );
            }
            if (round + batch) % 3 != 0 {
                flushed = must!(p.log.flush(), "round {round}: flush");
            }
        }
        let appended = last;
        drop(p);
        s = h.crash(s);
        let mut p = open(&s, 8);
        last = p.log.last_lsn();
        check!(
            (flushed..=appended).contains(&last),
            "round {round}: after a power loss the log must end between the last flushed LSN {flushed} and the last appended {appended}; found last_lsn {last}"
        );
        let (records, end) = must!(read_log(&mut p.log, 0), "round {round}: read(after 0)");
        check_eq!(
            (end, records.len() as u64),
            (last, last),
            "round {round}: read(after 0) must visit every record up to last_lsn, no hole: (end, records visited)"
        );
        for (lsn, bytes) in records {
            check_bytes(
                &bytes,
                &sized(lsn),
                format_args!("round {round}: record {lsn} after a power loss"),
            );
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
    let c = Clause::enter("log_pipelined_flush");
    let mut s = h.open();
    let mut p = open(&s, 5);
    append_range(&mut p.log, 1, 100, 11);
    let ticket = must!(p.log.begin_flush(), "begin_flush after appending 1 to 100");
    check_eq!(
        ticket.last_lsn(),
        100,
        "the ticket must cover what was appended before begin_flush: its last LSN"
    );
    append_range(&mut p.log, 101, 150, 11);
    check_range(&mut p.log, 0, 150, 11);
    let (ok, ticket) = on_another_thread(ticket, FlushTicket::run, "the ticket");
    check!(ok, "the ticket's I/O must succeed; found it failed");
    check_matches!(
        p.log.finish_flush(ticket),
        Ok(100),
        "Ok(100), the ticket's last LSN",
        "finish_flush of the ticket covering 1 to 100"
    );
    check_eq!(
        p.log.durable_lsn(),
        100,
        "after finish_flush the durable LSN moves to the ticket's end"
    );
    check_eq!(
        p.log.last_lsn(),
        150,
        "last_lsn with 101 to 150 appended during the flush"
    );
    check_range(&mut p.log, 0, 150, 11);
    // Finishing runs a ticket nobody ran; an empty one reports the durable LSN.
    for what in [
        "a ticket nobody ran, covering 101 to 150",
        "an empty ticket (the durable LSN)",
    ] {
        let ticket = must!(p.log.begin_flush(), "begin_flush for {what}");
        check_matches!(
            p.log.finish_flush(ticket),
            Ok(150),
            "Ok(150)",
            "finish_flush of {what}"
        );
    }
    // A ticket out (run, then not) when the process dies.
    append_range(&mut p.log, 151, 160, 11);
    let mut ran = must!(p.log.begin_flush(), "begin_flush of 151 to 160");
    check!(
        ran.run(),
        "the I/O of the ticket covering 151 to 160 must succeed; found it failed"
    );
    drop(p);
    drop(ran);
    s = h.crash(s);
    let mut p = open(&s, 5);
    let last = check_prefix(&mut p.log, 150, 160, 11);
    append_range(&mut p.log, last + 1, 170, 11);
    let pending = must!(p.log.begin_flush(), "begin_flush of {} to 170", last + 1);
    drop(p);
    drop(pending);
    s = h.crash(s);
    let mut p = open(&s, 5);
    let last = check_prefix(&mut p.log, last, 170, 11);
    if c.skips(h) {
        return;
    }
    append_range(&mut p.log, last + 1, last + 5, 11);
    h.fail_next_flush(&s, 5);
    // The failure may surface when the flush begins or when it ends.
    let failed = match p.log.begin_flush() {
        Err(_) => true,
        Ok(ticket) => p.log.finish_flush(ticket).is_err(),
    };
    check!(
        failed,
        "a split flush with an injected failure must report it (at begin_flush or finish_flush); found both succeeded"
    );
    check_matches!(
        p.log.append(last + 6, b"x"),
        Err(StorageError::Latched { .. }),
        "Err(Latched)",
        "append({}) after a failed split flush",
        last + 6
    );
    check_matches!(
        p.log.flush(),
        Err(_),
        "an error (a failed flush is never retried as a success)",
        "flush after a failed split flush"
    );
}

/// Flushes in flight at once, on a backend whose log takes more than one
/// ticket ([`LogStore::flushes_in_flight_max`]): each ticket covers what
/// was appended since the one before; their I/O runs at once on threads of
/// its own; finished in the order they began, each moves the durable LSN
/// to its end. One ticket more than the maximum is refused with `Misuse`,
/// as is finishing a later ticket before an earlier one (which latches the
/// log). A crash with a later ticket run and an earlier one not leaves a
/// prefix (the later ticket's records are not kept past the gap), and the
/// log goes on from it: flushed, reopened, read back whole.
pub fn log_flushes_overlap<H: Harness>(h: &mut H) {
    let c = Clause::enter("log_flushes_overlap");
    if c.skips(h) {
        return;
    }
    let salt = 17;
    let mut s = h.open();
    let mut p = open(&s, 6);
    let max = p.log.flushes_in_flight_max();
    check!(
        max >= 2,
        "the harness declares overlapping flushes, but flushes_in_flight_max() is {max}"
    );
    let mut tickets = Vec::new();
    for i in 0..max as u64 {
        append_range(&mut p.log, 10 * i + 1, 10 * i + 10, salt);
        let ticket = must!(p.log.begin_flush(), "begin_flush of ticket {i} of {max}");
        check_eq!(
            ticket.last_lsn(),
            10 * i + 10,
            "ticket {i} must cover what was appended before it began: its last LSN"
        );
        tickets.push(ticket);
    }
    let out = 10 * max as u64;
    append_range(&mut p.log, out + 1, out + 5, salt);
    check_matches!(
        p.log.begin_flush(),
        Err(StorageError::Misuse { .. }),
        "Err(Misuse)",
        "begin_flush with flushes_in_flight_max ({max}) tickets out"
    );
    check_eq!(p.log.durable_lsn(), 0, "durable_lsn with every ticket out");
    check_range(&mut p.log, 0, out + 5, salt);
    for (i, (ok, ticket)) in run_at_once(tickets).into_iter().enumerate() {
        check!(
            ok,
            "the I/O of ticket {i}, run beside the others, must succeed"
        );
        let end = 10 * i as u64 + 10;
        check_matches!(
            p.log.finish_flush(ticket),
            Ok(l) if l == end,
            "Ok({end}), the ticket's last LSN",
            "finish_flush of ticket {i}, in the order they began"
        );
        check_eq!(p.log.durable_lsn(), end, "durable_lsn after ticket {i}");
    }
    flush_to(
        &mut p.log,
        out + 5,
        format_args!("the flush after the tickets"),
    );
    // A later ticket finished first.
    let (earlier, later) = two_tickets(&mut p.log, out + 5, salt);
    check_matches!(
        p.log.finish_flush(later),
        Err(StorageError::Misuse { .. }),
        "Err(Misuse)",
        "finish_flush of the later of two tickets first"
    );
    check_matches!(
        p.log.append(out + 16, b"x"),
        Err(StorageError::Latched { .. }),
        "Err(Latched)",
        "append after a ticket was finished out of turn"
    );
    check!(
        p.log.finish_flush(earlier).is_err(),
        "finish_flush of the earlier ticket on a latched log must fail"
    );
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 6);
    let last = check_prefix(&mut p.log, out + 5, out + 15, salt);
    // The later ticket's I/O done, the earlier one's not: a crash.
    let (earlier, mut later) = two_tickets(&mut p.log, last, salt);
    check!(later.run(), "the later ticket's I/O must succeed");
    drop(p);
    drop((earlier, later));
    s = h.crash(s);
    let mut p = open(&s, 6);
    let end = check_prefix(&mut p.log, last, last + 10, salt);
    // The log goes on from its end: nothing the later ticket left in the
    // way of the records written again.
    append_range(&mut p.log, end + 1, last + 30, salt);
    flush_to(
        &mut p.log,
        last + 30,
        format_args!("the flush after the crash"),
    );
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 6);
    check_range(&mut p.log, 0, last + 30, salt);
    drop(p);
    drop(s);
}

/// Appends records `after+1..=after+5` and begins a flush of them, then
/// `after+6..=after+10` and another: the two tickets, earlier first.
fn two_tickets<L: LogStore>(log: &mut L, after: Lsn, salt: u64) -> (FlushTicket, FlushTicket) {
    let mut begin = |from: Lsn| {
        append_range(log, from, from + 4, salt);
        must!(log.begin_flush(), "begin_flush of {from} to {}", from + 4)
    };
    (begin(after + 1), begin(after + 6))
}

/// Runs every ticket's I/O at once, each on a thread of its own, and hands
/// back the outcomes and the tickets in the order given.
fn run_at_once(tickets: Vec<FlushTicket>) -> Vec<(bool, FlushTicket)> {
    std::thread::scope(|scope| {
        let running: Vec<_> = tickets
            .into_iter()
            .map(|mut ticket| scope.spawn(move || (ticket.run(), ticket)))
            .collect();
        running
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                t.join().unwrap_or_else(|_| {
                    fail(format_args!("the thread running ticket {i} panicked"))
                })
            })
            .collect()
    })
}

/// The seal ([`LogStore::begin_seal`], [`LogStore::finish_seal`],
/// [`LogStore::seal`]): a seal returns the durable LSN (not records
/// appended since), with nothing flushed too; sealing twice, and a seal
/// split across threads while the log takes appends and a flush, are
/// fine; a reopen after a seal keeps the log through the sealed LSN and
/// opens without an error, as does a crash between a flush and its seal,
/// a crash with a seal ticket out (run or not), and a seal after every
/// record was discarded.
pub fn log_seal<H: Harness>(h: &mut H) {
    let _c = Clause::enter("log_seal");
    let mut s = h.open();
    let mut p = open(&s, 6);
    check_matches!(
        p.log.seal(),
        Ok(0),
        "Ok(0), the durable LSN",
        "seal of a fresh log (nothing flushed)"
    );
    append_range(&mut p.log, 1, 40, 12);
    flush_to(&mut p.log, 40, format_args!("flush of 1 to 40"));
    append_range(&mut p.log, 41, 45, 12);
    check_matches!(
        p.log.seal(),
        Ok(40),
        "Ok(40): the durable LSN, not the records appended since",
        "seal after flushing 1 to 40 and appending 41 to 45"
    );
    check_matches!(
        p.log.seal(),
        Ok(40),
        "Ok(40)",
        "a second seal with nothing flushed since"
    );
    flush_to(&mut p.log, 45, format_args!("flush of 41 to 45"));
    // Split: the ticket runs on another thread while the log goes on.
    let ticket = must!(p.log.begin_seal(), "begin_seal after flushing 45");
    check_eq!(ticket.lsn(), 45, "the seal ticket's LSN (the durable LSN)");
    append_range(&mut p.log, 46, 60, 12);
    flush_to(
        &mut p.log,
        60,
        format_args!("flush of 46 to 60 with a seal out"),
    );
    let (ok, ticket) = on_another_thread(ticket, SealTicket::run, "the seal ticket");
    check!(ok, "the seal ticket's I/O must succeed; found it failed");
    check_matches!(
        p.log.finish_seal(ticket),
        Ok(45),
        "Ok(45), the ticket's LSN",
        "finish_seal of the ticket begun at 45"
    );
    check_range(&mut p.log, 0, 60, 12);
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 6);
    check_eq!(
        p.log.last_lsn(),
        60,
        "last_lsn after a reopen (sealed through 45, flushed through 60)"
    );
    check_range(&mut p.log, 0, 60, 12);
    check_matches!(p.log.seal(), Ok(60), "Ok(60)", "seal after a reopen");
    // A crash between a flush and its seal: the log keeps every flushed
    // record and opens without an error.
    append_range(&mut p.log, 61, 80, 12);
    flush_to(&mut p.log, 80, format_args!("flush of 61 to 80"));
    append_range(&mut p.log, 81, 85, 12);
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 6);
    let last = check_prefix(&mut p.log, 80, 85, 12);
    // A crash with seal tickets out: one run, one not.
    append_range(&mut p.log, last + 1, last + 10, 12);
    flush_to(
        &mut p.log,
        last + 10,
        format_args!("flush of {} to {}", last + 1, last + 10),
    );
    let mut ran = must!(p.log.begin_seal(), "begin_seal at {}", last + 10);
    check!(
        ran.run(),
        "the seal ticket's I/O must succeed; found it failed"
    );
    drop(p);
    drop(ran);
    s = h.crash(s);
    let mut p = open(&s, 6);
    let last = check_prefix(&mut p.log, last + 10, last + 10, 12);
    append_range(&mut p.log, last + 1, last + 3, 12);
    flush_to(
        &mut p.log,
        last + 3,
        format_args!("flush of {} to {}", last + 1, last + 3),
    );
    let pending = must!(p.log.begin_seal(), "begin_seal at {}", last + 3);
    drop(p);
    drop(pending);
    s = h.crash(s);
    let mut p = open(&s, 6);
    let last = check_prefix(&mut p.log, last + 3, last + 3, 12);
    // Every record discarded: the seal and the last LSN survive a reopen.
    must!(p.log.discard_through(last), "discard_through({last})");
    check_matches!(
        p.log.seal(),
        Ok(l) if l == last,
        format_args!("Ok({last})"),
        "seal with every record discarded"
    );
    drop(p);
    s = h.reopen(s);
    let p = open(&s, 6);
    check_eq!(
        p.log.last_lsn(),
        last,
        "last_lsn after discarding everything, sealing and reopening"
    );
}

/// Runs `ticket`'s I/O (`run`) on a thread of its own, as a host's flusher
/// would, and hands back its outcome and the ticket; `what` names it if
/// that thread panics.
fn on_another_thread<T: Send>(mut ticket: T, run: fn(&mut T) -> bool, what: &str) -> (bool, T) {
    let ran = std::thread::scope(|scope| {
        scope
            .spawn(move || {
                let ok = run(&mut ticket);
                (ok, ticket)
            })
            .join()
    });
    match ran {
        Ok(done) => done,
        Err(_) => fail(format_args!("the thread running {what} panicked")),
    }
}
