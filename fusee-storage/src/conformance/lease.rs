//! Optional clauses for backends whose shards are shared by many processes
//! under leases (PostgreSQL): a second owner refused while a lease lives,
//! a takeover fencing the old owner, a takeover after the owner died, a
//! connection killed in the middle of a flush, and failover to a
//! synchronous standby. Other backends skip them (printed and counted),
//! since their harnesses declare no [`LeaseChecks`].
//!
//! "Another owner" is another process's storage on the same store
//! ([`super::Harness::open_other_owner`]); its refusal while a lease lives
//! is [`StorageError::Leased`] (naming the holder and when its lease
//! ends), and a stale owner's write after a takeover
//! is [`StorageError::Fenced`], having written nothing.

use std::io::Write;
use std::time::{Duration, Instant};

use fusee_core::record::Lsn;

use super::check::{Clause, check, check_bytes, check_eq, check_index, check_matches};
use super::log::check_prefix;
use super::{Harness, Index, fail, flush_to, frame, index_record, must, open, read_index, record};
use crate::{CheckpointStore, IndexChange, LogStore, RunStore, Storage, StorageError};

/// Which lease clauses a harness can run ([`Harness::lease_checks`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseChecks {
    /// [`Harness::open_other_owner`], [`Harness::lease_time`],
    /// [`Harness::pause_renewal`] and [`Harness::die`] work:
    /// [`lease_second_owner_refused`], [`lease_takeover_fences`] and
    /// [`lease_takeover_after_death`] run.
    pub leases: bool,
    /// [`Harness::kill_connection_during`] works:
    /// [`lease_connection_killed_mid_flush`] runs.
    pub connection_kill: bool,
    /// [`Harness::open_replicated`] and [`Harness::failover`] work:
    /// [`failover_keeps_acknowledged`] runs.
    pub failover: bool,
}

/// Why a lease clause is skipped on a harness declaring `checks`, if it is.
pub(super) fn lease_needs(clause: &str, checks: LeaseChecks) -> Option<&'static str> {
    match clause {
        "lease_second_owner_refused" | "lease_takeover_fences" | "lease_takeover_after_death"
            if !checks.leases =>
        {
            Some("the harness declares no LeaseChecks::leases (shards shared under leases)")
        }
        "lease_connection_killed_mid_flush" if !checks.connection_kill => {
            Some("the harness declares no LeaseChecks::connection_kill")
        }
        "failover_keeps_acknowledged" if !checks.failover => {
            Some("the harness declares no LeaseChecks::failover (a synchronous standby to promote)")
        }
        _ => None,
    }
}

/// Whether `clause` is skipped on `h`; prints a `SKIPPED` line past the
/// test harness's capture if so, as every skipped clause does.
fn skips<H: Harness>(clause: &'static str, h: &H) -> bool {
    let Some(reason) = lease_needs(clause, h.lease_checks()) else {
        return false;
    };
    let _ = writeln!(std::io::stderr(), "SKIPPED {clause}: {reason}");
    true
}

/// The salt of the records and frames the clauses write.
const SALT: u64 = 60;

fn append<L: LogStore>(log: &mut L, from: Lsn, to: Lsn) {
    for lsn in from..=to {
        must!(log.append(lsn, &record(lsn, SALT)), "append({lsn})");
    }
}

/// Opens `shard` on `s`, retrying while another owner's lease is live
/// (`Leased`, or `Locked`/`LockTimeout` while a stalled owner's
/// transaction holds the shard), for at most `limit`; fails the clause on any other error
/// or when the limit passes.
fn open_when_free<S: Storage>(s: &S, shard: u32, limit: Duration) -> crate::ShardParts<S> {
    let start = Instant::now();
    loop {
        match s.open_shard(shard) {
            Ok(p) => return p,
            Err(
                StorageError::Leased { .. }
                | StorageError::Locked { .. }
                | StorageError::LockTimeout { .. },
            ) if start.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => fail(format_args!(
                "open_shard({shard}) by another owner, retried for {:?} while Leased: expected Ok once the lease lapsed; found Err({e:?})",
                start.elapsed()
            )),
        }
    }
}

/// How long a takeover may wait for a lapsed lease: the lease, plus time
/// for a renewal in flight and a slow machine.
fn takeover_limit<H: Harness>(h: &H) -> Duration {
    h.lease_time() * 3 + Duration::from_secs(10)
}

/// A second owner is refused (`Leased`) while the first holds the shard's
/// lease, and opens it, with everything flushed and committed, once the
/// first lets it go.
pub fn lease_second_owner_refused<H: Harness>(h: &mut H) {
    let _c = Clause::enter("lease_second_owner_refused");
    if skips("lease_second_owner_refused", h) {
        return;
    }
    let s = h.open();
    let mut p = open(&s, 2);
    append(&mut p.log, 1, 20);
    flush_to(
        &mut p.log,
        20,
        format_args!("the first owner's flush of 1 to 20"),
    );
    let other = must!(h.open_other_owner(), "opening the store as another owner");
    check_matches!(
        other.open_shard(2).map(drop),
        Err(StorageError::Leased { .. }),
        "Err(Leased)",
        "open_shard(2) by another owner while the first holds its lease"
    );
    // The lease stays the first owner's while it lives, past renewals.
    std::thread::sleep(h.lease_time() + h.lease_time() / 2);
    check_matches!(
        other.open_shard(2).map(drop),
        Err(StorageError::Leased { .. }),
        "Err(Leased)",
        "open_shard(2) by another owner after one lease time, the first still renewing"
    );
    append(&mut p.log, 21, 22);
    flush_to(
        &mut p.log,
        22,
        format_args!("the first owner's flush after a lease time"),
    );
    drop(p);
    let mut q = must!(
        other.open_shard(2),
        "open_shard(2) by another owner once the first let go"
    );
    check_prefix(&mut q.log, 22, 22, SALT);
    drop(q);
    must!(other.close(), "close of the other owner");
    must!(s.close(), "close");
}

/// A takeover fences the old owner: once its lease lapsed (renewal paused,
/// as in a process that hung) another owner opens the shard and recovers
/// exactly the flushed prefix and the last commit; the old owner's next
/// flush, or commit, is `Fenced` and writes nothing; the new owner's
/// writes go on and survive a reopen.
pub fn lease_takeover_fences<H: Harness>(h: &mut H) {
    let _c = Clause::enter("lease_takeover_fences");
    if skips("lease_takeover_fences", h) {
        return;
    }
    let s = h.open();
    // Shard 4: the stale owner's first write is a flush; shard 5: a commit.
    let mut a = open(&s, 4);
    let mut b = open(&s, 5);
    append(&mut a.log, 1, 30);
    flush_to(&mut a.log, 30, format_args!("flush of 1 to 30"));
    append(&mut a.log, 31, 35);
    let kept = must!(b.runs.append(&frame(700, SALT)), "append of a frame");
    let first: Index = [(7u64, index_record(7, 1))].into_iter().collect();
    must!(
        b.checkpoint.commit(
            &mut b.runs,
            IndexChange::Delta(&index_record(7, 1)),
            b"first"
        ),
        "the first owner's commit"
    );
    h.pause_renewal(&s);
    let other = must!(h.open_other_owner(), "opening the store as another owner");
    let limit = takeover_limit(h);
    let mut na = open_when_free(&other, 4, limit);
    let mut nb = open_when_free(&other, 5, limit);
    check_prefix(&mut na.log, 30, 30, SALT);
    check_eq!(
        nb.recovered.checkpoint.as_deref(),
        Some(&b"first"[..]),
        "the new owner's recovered checkpoint"
    );
    // The stale owner writes: refused whole, and nothing lands.
    check_matches!(
        a.log.flush(),
        Err(StorageError::Fenced { shard: 4, .. }),
        "Err(Fenced) for shard 4",
        "the old owner's flush of 31 to 35 after the takeover"
    );
    check_matches!(
        a.log.append(36, b"x"),
        Err(StorageError::Fenced { .. }),
        "Err(Fenced)",
        "the old owner's append after its fenced flush"
    );
    let lost = must!(
        b.runs.append(&frame(900, SALT)),
        "the old owner's frame append"
    );
    check_matches!(
        b.checkpoint.commit(
            &mut b.runs,
            IndexChange::Delta(&index_record(8, 2)),
            b"stale"
        ),
        Err(StorageError::Fenced { shard: 5, .. }),
        "Err(Fenced) for shard 5",
        "the old owner's commit after the takeover"
    );
    check_prefix(&mut na.log, 30, 30, SALT);
    check_index(
        &read_index(&mut nb.checkpoint),
        &first,
        format_args!("the new owner's index after the old owner's fenced commit"),
    );
    let mut out = Vec::new();
    must!(
        nb.runs.read(kept, &mut out),
        "the new owner's read of the committed frame"
    );
    check_bytes(&out, &frame(700, SALT), format_args!("the committed frame"));
    check_matches!(
        nb.runs.read(lost, &mut out),
        Err(StorageError::UnknownBlob { .. }),
        "Err(UnknownBlob)",
        "the new owner's read of the frame the fenced commit carried"
    );
    // The new owner goes on.
    append(&mut na.log, 31, 40);
    flush_to(
        &mut na.log,
        40,
        format_args!("the new owner's flush of 31 to 40"),
    );
    must!(
        nb.checkpoint
            .commit(&mut nb.runs, IndexChange::Delta(&[]), b"second"),
        "the new owner's commit"
    );
    check_matches!(
        a.log.flush(),
        Err(StorageError::Fenced { .. }),
        "Err(Fenced)",
        "the old owner's flush once the new owner wrote"
    );
    drop((a, b, na, nb));
    let other = h.reopen(other);
    let mut na = open(&other, 4);
    check_prefix(&mut na.log, 40, 40, SALT);
    let nb = open(&other, 5);
    check_eq!(
        nb.recovered.checkpoint.as_deref(),
        Some(&b"second"[..]),
        "the checkpoint after a reopen"
    );
    drop((na, nb));
    must!(other.close(), "close of the new owner");
    must!(s.close(), "close of the old owner");
}

/// A takeover after the owner died without closing (nothing released):
/// another owner is refused while the lease lives, opens the shard once it
/// lapses, within a few lease times, and recovers every flushed record and
/// the last commit.
pub fn lease_takeover_after_death<H: Harness>(h: &mut H) {
    let _c = Clause::enter("lease_takeover_after_death");
    if skips("lease_takeover_after_death", h) {
        return;
    }
    let s = h.open();
    let mut p = open(&s, 6);
    append(&mut p.log, 1, 50);
    flush_to(&mut p.log, 50, format_args!("flush of 1 to 50"));
    append(&mut p.log, 51, 60);
    let blob = must!(p.runs.append(&frame(300, SALT)), "append of a frame");
    must!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&[]), b"before death"),
        "commit"
    );
    let other = must!(h.open_other_owner(), "opening the store as another owner");
    // The owner dies with the shard open: its parts go with it, releasing
    // nothing.
    h.die(s);
    drop(p);
    let died = Instant::now();
    let mut q = open_when_free(&other, 6, takeover_limit(h));
    let took = died.elapsed();
    check!(
        took >= h.lease_time() / 2,
        "a dead owner's lease must hold until it lapses; another owner took the shard after {took:?}, lease {:?}",
        h.lease_time()
    );
    check_prefix(&mut q.log, 50, 50, SALT);
    check_eq!(
        q.recovered.checkpoint.as_deref(),
        Some(&b"before death"[..]),
        "the checkpoint recovered after the owner died"
    );
    let mut out = Vec::new();
    must!(q.runs.read(blob, &mut out), "read of the committed frame");
    check_bytes(&out, &frame(300, SALT), format_args!("the committed frame"));
    append(&mut q.log, 51, 55);
    flush_to(&mut q.log, 55, format_args!("the new owner's flush"));
    drop(q);
    must!(other.close(), "close");
}

/// A connection killed in the middle of a flush: the flush fails, the log
/// latches, and after a reopen the log is a prefix holding every record
/// acknowledged before (the killed batch whole or not at all).
pub fn lease_connection_killed_mid_flush<H: Harness>(h: &mut H) {
    let _c = Clause::enter("lease_connection_killed_mid_flush");
    if skips("lease_connection_killed_mid_flush", h) {
        return;
    }
    let mut s = h.open();
    let mut p = open(&s, 7);
    append(&mut p.log, 1, 40);
    flush_to(&mut p.log, 40, format_args!("flush of 1 to 40"));
    append(&mut p.log, 41, 60);
    let mut ticket = must!(p.log.begin_flush(), "begin_flush of 41 to 60");
    let ok = h.kill_connection_during(&s, 7, &mut || ticket.run());
    check!(
        !ok,
        "a flush whose connection was killed mid-statement must fail; found it succeeded"
    );
    check_matches!(
        p.log.finish_flush(ticket),
        Err(_),
        "an error",
        "finish_flush of the killed flush"
    );
    check_matches!(
        p.log.append(61, b"x"),
        Err(StorageError::Latched { .. }),
        "Err(Latched)",
        "append(61) after the killed flush"
    );
    check_matches!(
        p.log.flush(),
        Err(_),
        "an error (never retried as a success)",
        "flush after the killed flush"
    );
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 7);
    let last = check_prefix(&mut p.log, 40, 60, SALT);
    check!(
        last == 40 || last == 60,
        "the killed batch 41 to 60 must be whole or absent; the log ends at {last}"
    );
    append(&mut p.log, last + 1, last + 5);
    flush_to(&mut p.log, last + 5, format_args!("flush after the reopen"));
    drop(p);
    must!(s.close(), "close");
}

/// Failover: the primary stops hard, a synchronous standby is promoted,
/// the storage reopens on it, and every acknowledged record and the last
/// commit (checkpoint, index, frames) are there.
pub fn failover_keeps_acknowledged<H: Harness>(h: &mut H) {
    let _c = Clause::enter("failover_keeps_acknowledged");
    if skips("failover_keeps_acknowledged", h) {
        return;
    }
    let s = h.open_replicated();
    let mut p = open(&s, 8);
    let mut flushed = 0;
    for batch in 0..20u64 {
        append(&mut p.log, flushed + 1, flushed + 1 + batch);
        flushed += 1 + batch;
        flush_to(&mut p.log, flushed, format_args!("flush {batch}"));
    }
    let blob = must!(p.runs.append(&frame(4000, SALT)), "append of a frame");
    let records: Vec<_> = (1..=50u64).map(|run| index_record(run, run)).collect();
    let delta = super::concat(&records);
    must!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&delta), b"last commit"),
        "the last commit before failover"
    );
    append(&mut p.log, flushed + 1, flushed + 3);
    let acked = flushed + 3;
    flush_to(
        &mut p.log,
        acked,
        format_args!("the last flush before failover"),
    );
    drop(p);
    let s = h.failover(s);
    let mut p = open(&s, 8);
    check_prefix(&mut p.log, acked, acked, SALT);
    check_eq!(
        p.recovered.checkpoint.as_deref(),
        Some(&b"last commit"[..]),
        "the checkpoint on the promoted standby"
    );
    let expected: Index = records
        .iter()
        .map(|r| (crate::index_record_run(r), *r))
        .collect();
    check_index(
        &read_index(&mut p.checkpoint),
        &expected,
        format_args!("the index on the promoted standby"),
    );
    let mut out = Vec::new();
    must!(
        p.runs.read(blob, &mut out),
        "read of the committed frame after failover"
    );
    check_bytes(
        &out,
        &frame(4000, SALT),
        format_args!("the committed frame"),
    );
    append(&mut p.log, acked + 1, acked + 2);
    flush_to(
        &mut p.log,
        acked + 2,
        format_args!("a flush on the promoted standby"),
    );
    drop(p);
    must!(s.close(), "close");
}
