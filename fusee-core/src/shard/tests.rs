//! Scenario tests of the shard state machine. Property tests (replay
//! equivalence, the timer model) live in `property_tests`.

use super::*;
use crate::record::{
    Name, Origin, ParentRef, Payload, Record, RecordBuf, RecordRef, Status, WaitOutcome,
    decode_canonical_all, encode_canonical, origin, policy,
};
use crate::table;

/// A plain `Start` of run `run` for workflow ID `id`.
pub(super) fn start(run: RunId, id: &str, deadline_ms: u64) -> RecordBuf {
    Record::Start {
        run,
        id: Name::from(id),
        wtype: Name::from("wf"),
        version: 1,
        codec: 0,
        started_ms: 0,
        deadline_ms,
        parent: None,
        policy: 0,
        from: None,
        copies: 0,
        update: None,
        input: Payload::from(&b""[..]),
        meta: None,
    }
}

fn payload(bytes: &[u8]) -> Payload {
    Payload::from(bytes)
}

fn done(run: RunId, status: Status, at: u64, result: &[u8]) -> RecordBuf {
    Record::Done {
        run,
        status,
        finished_ms: at,
        payload: payload(result),
        by: None,
    }
}

fn timer(run: RunId, seq: u32, at: u64) -> RecordBuf {
    Record::Timer {
        run,
        seq,
        name: Name::from("sleep"),
        fire_at_ms: at,
    }
}

fn signal(run: RunId, name: &str, dedup: u64, body: &[u8]) -> RecordBuf {
    Record::Signal {
        run,
        name: Name::from(name),
        dedup,
        payload: payload(body),
        by: None,
    }
}

fn wait(run: RunId, seq: u32, name: &str, deadline_ms: u64) -> RecordBuf {
    Record::Wait {
        run,
        seq,
        name: Name::from(name),
        deadline_ms,
    }
}

fn drain_events(core: &mut ShardCore) -> Vec<Event> {
    std::iter::from_fn(|| core.take_event()).collect()
}

fn journal_of(core: &ShardCore, run: RunId) -> Vec<RecordBuf> {
    decode_canonical_all(&core.get(run).expect("loaded").journal).expect("journal decodes")
}

/// A successor `Start` for a handover from `from`, and the `Done` that
/// carries it.
fn handover(from: RunId, next: RunId, id: &str, status: Status) -> (RecordBuf, RecordBuf) {
    let cause = if status == Status::Reset {
        origin::RESET
    } else {
        origin::CONTINUED
    };
    let Record::Start {
        id: sid,
        wtype,
        input,
        ..
    } = start(next, id, 0)
    else {
        unreachable!()
    };
    let next_start: RecordBuf = Record::Start {
        run: next,
        id: sid,
        wtype,
        version: 2,
        codec: 1,
        started_ms: 5,
        deadline_ms: 0,
        parent: None,
        policy: 0,
        from: Some(Origin { run: from, cause }),
        copies: 0,
        update: None,
        input,
        meta: None,
    };
    let mut bytes = Vec::new();
    encode_canonical(&next_start, &mut bytes);
    (next_start, done(from, status, 5, &bytes))
}

/// A sleeper: run `run` for ID `id` with one timer at `at`, events drained.
/// Returns its journal.
pub(super) fn sleeper(core: &mut ShardCore, run: RunId, id: &str, at: u64) -> Vec<RecordBuf> {
    core.apply(run * 10, &start(run, id, 0), Mode::LIVE);
    core.apply(run * 10 + 1, &timer(run, 0, at), Mode::LIVE);
    drain_events(core);
    journal_of(core, run)
}

#[test]
fn a_listing_walks_runs_newest_first_with_or_without_gaps() {
    for renumbered in [false, true] {
        let mut core = ShardCore::new(0, 1, 1000, 0);
        for run in 1..=300u64 {
            core.apply(run, &start(run, &format!("w{run}"), 0), Mode::LIVE);
        }
        if renumbered {
            // Numbers handed out since and gone: probing them would cost
            // more than a pass over the table, so the cursor sorts.
            core.set_next_run_id(2_000_000);
        }
        let mut cursor = core.newest_first();
        let first: Vec<RunId> = cursor.next_batch(&core, 40);
        assert_eq!(first, (261..=300).rev().collect::<Vec<_>>());
        let mut rest = Vec::new();
        for _ in 0..100 {
            let batch = cursor.next_batch(&core, 33);
            if batch.is_empty() {
                break;
            }
            assert!(batch.len() <= 33);
            rest.extend(batch);
        }
        assert_eq!(
            rest,
            (1..=260).rev().collect::<Vec<_>>(),
            "renumbered {renumbered}"
        );
        // A cursor made where the first batch ended goes on from there.
        let mut again = core.newest_first_below(261);
        assert_eq!(
            again.next_batch(&core, 5),
            (256..=260).rev().collect::<Vec<_>>(),
            "renumbered {renumbered}"
        );
    }
}

#[test]
fn continue_as_new_ends_one_run_and_starts_the_next_in_one_record() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "order", 0), Mode::LIVE);
    let (next, done) = handover(1, 2, "order", Status::ContinuedAsNew);
    core.apply(2, &done, Mode::LIVE);
    assert_eq!(core.get(1).unwrap().done, Some((Status::ContinuedAsNew, 5)));
    assert_eq!(core.get(1).unwrap().result(), Some(&[][..]));
    assert_eq!(core.find("order"), Some(Found::Loaded(2)));
    let successor = core.get(2).expect("the successor is loaded");
    assert_eq!(successor.version, 2);
    assert_eq!(
        successor.from(),
        Some(Origin {
            run: 1,
            cause: origin::CONTINUED
        })
    );
    assert!(matches!(
        journal_of(&core, 2)[0],
        Record::Start { run: 2, .. }
    ));
    assert_eq!(
        drain_events(&mut core),
        vec![
            Event::Started { run: 1 },
            Event::Finished { run: 1 },
            Event::Started { run: 2 }
        ]
    );
    // Recovery meets the successor's own `Start` again: its state stays.
    core.apply(3, &signal(2, "s", 0, b""), Mode::LIVE);
    core.apply(2, &next, Mode::RECOVER);
    assert_eq!(core.get(2).unwrap().buffered_signals(), 1);
    assert_eq!(core.next_run_id(), 3);
}

#[test]
fn a_continued_run_loaded_back_leaves_its_successor_alone() {
    let mut core = ShardCore::new(0, 1, 1_000_000, 0);
    core.apply(1, &start(1, "order", 0), Mode::LIVE);
    let (_, done1) = handover(1, 2, "order", Status::ContinuedAsNew);
    core.apply(2, &done1, Mode::LIVE);
    let history = journal_of(&core, 1);
    core.park(1, BlobRef { offset: 0, len: 10 }, false);
    core.apply(3, &done(2, Status::Ok, 6, b"7"), Mode::LIVE);
    core.park(
        2,
        BlobRef {
            offset: 10,
            len: 10,
        },
        false,
    );
    // A late message loads the first run back from its whole history.
    assert!(core.unpark(1, 2, &history, 10));
    assert_eq!(core.parked(2).and_then(|p| p.done()), Some(Status::Ok));
    assert_eq!(core.find("order"), Some(Found::Parked(2)));
}

#[test]
fn the_parent_close_policy_terminates_cancels_or_abandons_children() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "parent", 0), Mode::LIVE);
    let kids = [
        (0, "terminated", policy::CLOSE_TERMINATE),
        (1, "cancelled", policy::CLOSE_CANCEL | policy::DETACHED),
        (2, "abandoned", policy::CLOSE_ABANDON),
        (3, "finished", policy::CLOSE_TERMINATE),
    ];
    for (seq, id, flags) in kids {
        let child: RecordRef<'_> = Record::Child {
            run: 1,
            seq,
            wtype: "kid",
            id,
            flags,
            deadline_ms: 0,
            input: b"",
        };
        core.apply(2 + u64::from(seq), &child, Mode::LIVE);
    }
    // Detached children are not waited for.
    assert_eq!(core.get(1).unwrap().pending_children(), &[0, 2, 3]);
    let child_done: RecordRef<'_> = Record::ChildDone {
        run: 1,
        seq: 3,
        status: Status::Ok,
        payload: b"",
    };
    core.apply(6, &child_done, Mode::LIVE);
    core.apply(7, &done(1, Status::Terminated, 1, b""), Mode::LIVE);
    let mut out = Vec::new();
    core.release(7, &mut out);
    let closes: Vec<(String, bool, Option<u32>)> = out
        .iter()
        .filter_map(|o| match o {
            Output::Close {
                target,
                terminate,
                parent,
                ..
            } => Some((target.to_string(), *terminate, parent.map(|p| p.seq))),
            _ => None,
        })
        .collect();
    assert_eq!(
        closes,
        vec![
            ("terminated".to_string(), true, Some(0)),
            ("cancelled".to_string(), false, Some(1))
        ]
    );
}

#[test]
fn signals_are_offered_in_order_and_a_timed_out_wait_frees_its_offer() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    assert_eq!(core.take_event(), Some(Event::Started { run: 1 }));
    core.apply(2, &signal(1, "go", 0, b"first"), Mode::LIVE);
    core.apply(3, &signal(1, "go", 0, b"second"), Mode::LIVE);
    assert_eq!(core.take_event(), None, "a signal with no wait is buffered");
    core.apply(4, &wait(1, 0, "go", 50), Mode::LIVE);
    assert_eq!(
        core.take_event(),
        Some(Event::SignalReady {
            run: 1,
            seq: 0,
            ordinal: 0,
            payload: payload(b"first")
        })
    );
    assert!(!core.get(1).unwrap().has_queued_events());
    // The timeout wins the race: the offered signal is free again.
    let timed_out: RecordRef<'_> = Record::Waited {
        run: 1,
        seq: 0,
        outcome: WaitOutcome::TimedOut,
    };
    core.apply(5, &timed_out, Mode::LIVE);
    core.apply(6, &wait(1, 1, "go", 0), Mode::LIVE);
    assert!(matches!(
        core.take_event(),
        Some(Event::SignalReady {
            seq: 1,
            ordinal: 0,
            ..
        })
    ));
    // Consumed: the next wait gets the second signal.
    let consumed: RecordRef<'_> = Record::Waited {
        run: 1,
        seq: 1,
        outcome: WaitOutcome::Signal(0),
    };
    core.apply(7, &consumed, Mode::LIVE);
    core.apply(8, &wait(1, 2, "go", 0), Mode::LIVE);
    assert!(matches!(
        core.take_event(),
        Some(Event::SignalReady {
            seq: 2,
            ordinal: 1,
            ..
        })
    ));
    assert_eq!(core.get(1).unwrap().buffered_signals(), 1);
    // The first wait's timeout is stale: it no longer fires.
    core.poll_timers(100);
    assert_eq!(core.take_event(), None);
}

#[test]
fn an_abandoned_wait_frees_its_signal_for_another_wait() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    core.apply(2, &wait(1, 0, "go", 0), Mode::LIVE);
    core.apply(3, &wait(1, 1, "go", 0), Mode::LIVE);
    core.apply(4, &signal(1, "go", 0, b"x"), Mode::LIVE);
    drain_events(&mut core);
    let abandoned: RecordRef<'_> = Record::Waited {
        run: 1,
        seq: 0,
        outcome: WaitOutcome::Abandoned,
    };
    core.apply(5, &abandoned, Mode::LIVE);
    assert!(matches!(
        core.take_event(),
        Some(Event::SignalReady {
            seq: 1,
            ordinal: 0,
            ..
        })
    ));
}

#[test]
fn dedup_keys_are_remembered_per_run() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    assert!(!core.seen_signal(1, 99));
    core.apply(2, &signal(1, "go", 99, b""), Mode::LIVE);
    assert!(core.seen_signal(1, 99));
    assert!(!core.seen_signal(1, 0), "key 0 means no key");
    core.apply(3, &signal(1, "go", 0, b""), Mode::LIVE);
    assert!(!core.seen_signal(1, 0));
    assert!(!core.seen_signal(2, 99));
}

#[test]
fn outputs_leave_only_once_their_record_is_durable() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    core.add_output(1, Output::Ack(7));
    core.apply(2, &done(1, Status::Ok, 5, b"r"), Mode::LIVE);
    core.add_output(2, Output::Reject(8));
    let mut out = Vec::new();
    core.release(0, &mut out);
    assert!(out.is_empty());
    core.release(1, &mut out);
    assert_eq!(out, vec![Output::Ack(7)]);
    assert_eq!(core.pending_outputs(), 2);
    out.clear();
    core.release(2, &mut out);
    assert_eq!(
        out,
        vec![
            Output::Result {
                run: 1,
                status: Status::Ok,
                payload: payload(b"r")
            },
            Output::Reject(8)
        ]
    );
    assert_eq!(core.unreleased().count(), 0);
}

#[test]
fn finished_runs_expire_after_their_retention() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    core.apply(2, &done(1, Status::Ok, 5, b"r"), Mode::LIVE);
    core.apply(3, &start(2, "b", 0), Mode::LIVE);
    core.apply(4, &done(2, Status::Failed, 7, b"e"), Mode::LIVE);
    core.park(2, BlobRef { offset: 0, len: 77 }, false);
    assert_eq!(core.next_expiry(), Some(1005));
    let mut gone = Vec::new();
    assert_eq!(core.expire(1004, &mut gone), 0);
    assert!(gone.is_empty());
    assert_eq!(core.expire(1005, &mut gone), 0, "run 1 was never stored");
    assert_eq!(gone, vec![1]);
    assert_eq!(core.find("a"), None);
    assert_eq!(core.expire(1007, &mut gone), 77);
    assert_eq!(gone, vec![1, 2]);
    assert_eq!(core.find("b"), None);
    assert_eq!(core.next_expiry(), None);
    // The removals reach the next index delta.
    let mut delta = Vec::new();
    core.index_delta(&mut delta);
    let deleted = delta
        .as_chunks::<{ table::RECORD }>()
        .0
        .iter()
        .filter_map(table::Entry::from_record)
        .filter(|e| e.state() == table::DELETED)
        .count();
    assert_eq!(deleted, 2);
}

#[test]
fn a_parked_runs_due_timer_asks_for_one_load() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    let journal = sleeper(&mut core, 1, "a", 10);
    assert_eq!(std::mem::size_of::<ParkedRun>(), 16);
    core.park(1, BlobRef { offset: 0, len: 1 }, false);
    assert_eq!(core.find("a"), Some(Found::Parked(1)));
    assert_eq!(core.get(1).map(|_| ()), None);
    assert_eq!(core.next_timer(), Some(10));
    core.poll_timers(9);
    assert_eq!(core.take_event(), None);
    core.poll_timers(10);
    assert_eq!(core.take_event(), Some(Event::NeedLoad { run: 1 }));
    core.poll_timers(11);
    assert_eq!(core.take_event(), None, "one load per park");
    assert!(core.unpark(1, 11, &journal, 12));
    assert_eq!(
        core.take_event(),
        Some(Event::Timer {
            run: 1,
            seq: 0,
            kind: TimerKind::Sleep,
            due_ms: 10
        })
    );
    assert!(!core.get(1).unwrap().has_queued_events());
}

#[test]
fn far_timers_wait_in_their_bucket_until_it_comes_within_the_horizon() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    let far = 10 * HORIZON_MS + 7;
    let journals: Vec<_> = ["a", "b", "c"]
        .iter()
        .zip(1..)
        .map(|(id, run)| sleeper(&mut core, run, id, far))
        .collect();
    assert_eq!(core.wheel.len(), 0, "far timers of loaded runs wait too");
    core.park(1, BlobRef { offset: 0, len: 1 }, false);
    core.park(2, BlobRef { offset: 9, len: 1 }, false);
    assert_eq!(core.near.len(), 0);
    // The horizon of a sweep at `t` ends just before `t + HORIZON_MS`: the
    // time the core asks for must move something, or a caller polling at
    // exactly that time (a simulated clock) would never get past it.
    assert_eq!(core.next_timer(), Some(far - HORIZON_MS + 1));
    for t in [far - HORIZON_MS - 1, far - HORIZON_MS] {
        core.poll_timers(t);
        assert_eq!((core.near.len(), core.wheel.len()), (0, 0), "at {t}");
    }
    assert!(core.next_timer().is_some_and(|t| t > far - HORIZON_MS));
    core.poll_timers(far - HORIZON_MS + 1);
    assert_eq!((core.near.len(), core.wheel.len()), (2, 1));
    assert_eq!(core.take_event(), None);
    core.poll_timers(far);
    let mut events = drain_events(&mut core);
    events.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(
        events,
        vec![
            Event::NeedLoad { run: 1 },
            Event::NeedLoad { run: 2 },
            Event::Timer {
                run: 3,
                seq: 0,
                kind: TimerKind::Sleep,
                due_ms: far
            }
        ]
    );
    assert!(core.unpark(1, 11, &journals[0], far));
    assert_eq!(
        core.take_event(),
        Some(Event::Timer {
            run: 1,
            seq: 0,
            kind: TimerKind::Sleep,
            due_ms: far
        })
    );
}

#[test]
fn the_index_base_and_delta_restore_parked_runs_and_their_timers() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    let far = 5 * HORIZON_MS;
    for run in 1..=50 {
        sleeper(&mut core, run, &format!("w{run}"), far + run);
        let blob = BlobRef {
            offset: run * 100,
            len: 40,
        };
        core.park(run, blob, run % 2 == 0);
    }
    core.begin_index_snapshot();
    core.hold_slots(true);
    let mut base = Vec::new();
    let mut from = Some(0);
    let mut calls = 0;
    while let Some(at) = from {
        let before = base.len();
        from = core.index_snapshot(at, 7, &mut base);
        assert!(base.len() - before <= 7 * table::RECORD, "bounded chunks");
        calls += 1;
    }
    core.hold_slots(false);
    assert_eq!(calls, 8);
    assert_eq!(base.len(), 50 * table::RECORD);
    assert_eq!(core.index_pending(), 0);
    // Later changes go to a delta: one run moves, one is removed.
    core.relocate_blob(3, 9_999);
    core.remove(4);
    assert_eq!(core.index_pending(), 2);
    let mut delta = Vec::new();
    core.index_delta(&mut delta);
    assert_eq!(delta.len(), 2 * table::RECORD);

    let mut back = ShardCore::new(0, 1, 1000, 0);
    back.reserve_runs(50);
    back.load_index(&base).unwrap();
    back.load_index(&delta).unwrap();
    back.index_loaded();
    assert_eq!(back.parked_len(), 49);
    assert_eq!(back.next_run_id(), 51);
    assert_eq!(back.parked(3).unwrap().blob().offset, 9_999);
    assert!(back.parked(4).is_none());
    assert_eq!(back.find("w7"), Some(Found::Parked(7)));
    assert!(back.chained_runs().all(|(run, _)| run % 2 == 0));
    assert_eq!(back.chained_runs().count(), 24);
    // The earliest timer, `far + 1`, enters the horizon a millisecond after
    // `far + 1 - HORIZON_MS`.
    assert_eq!(back.next_timer(), Some(far + 2 - HORIZON_MS));
    back.poll_timers(far + 50);
    assert_eq!(drain_events(&mut back).len(), 49);
}

#[test]
fn malformed_index_input_is_refused_whole() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    assert!(matches!(
        core.load_index(&[1; 31]),
        Err(index::IndexError::NotWholeRecords { len: 31 })
    ));
    let good = table::Entry::new(5, 77, table::PARKED).record();
    let mut input = good.to_vec();
    input.extend_from_slice(&[0xff; 32]);
    assert!(matches!(
        core.load_index(&input),
        Err(index::IndexError::BadRecord { index: 1 })
    ));
    // A loaded state is never persisted.
    let loaded = table::Entry::new(6, 78, table::LOADED).record();
    assert!(core.load_index(&loaded).is_err());
    assert_eq!(core.parked_len(), 0, "nothing of a refused frame applies");
    assert_eq!(core.next_run_id(), 1);
    core.load_index(&good).unwrap();
    assert!(core.is_parked(5));
}

/// A run's ID never changes, so index records that say it did are
/// damage (found by fuzzing): the entry is replaced whole, the ID index
/// names no run under a hash it no longer has, and retention removes
/// every run without tripping the table's checks.
#[test]
fn an_index_record_changing_a_runs_id_hash_replaces_its_entry() {
    let rec = |run, hash, state| table::Entry::new(run, hash, state).record();
    let mut frame = Vec::new();
    frame.extend(rec(9, 2, table::DONE + 4));
    frame.extend(rec(9, 3, table::DONE));
    frame.extend(rec(7, 2, table::PARKED));
    frame.extend(rec(9, 2, table::PARKED));
    frame.extend(rec(7, 2, table::DONE + 6));
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.load_index(&frame).expect("well-formed records");
    core.index_loaded();
    // Hash 2's latest run is 9; hash 3 names nothing any more.
    let by_hash = |core: &ShardCore, h| core.runs.find_id(h).map(|s| core.runs.get(s).run());
    assert_eq!(by_hash(&core, 2), Some(9));
    assert_eq!(by_hash(&core, 3), None);
    assert_eq!(core.parked_len(), 2);
    let mut gone = Vec::new();
    core.expire(u64::MAX, &mut gone);
    assert_eq!(gone, vec![7]);
    assert_eq!(by_hash(&core, 2), Some(9));
}

#[test]
fn the_change_lists_overflow_into_a_forced_base() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    let parks = (1u64 << 16) + 10;
    for run in 1..=parks {
        core.insert_parked(
            run,
            BlobRef {
                offset: run,
                len: 1,
            },
            None,
            0,
            run,
            0,
        );
    }
    assert_eq!(
        core.index_pending(),
        0,
        "restored runs are in the index already"
    );
    for run in 1..=parks {
        core.relocate_blob(run, run + 1);
        if core.index_needs_base() {
            break;
        }
    }
    assert!(core.index_needs_base());
    assert_eq!(core.index_pending(), 0, "lists dropped");
    core.begin_index_snapshot();
    assert!(!core.index_needs_base());
    let mut base = Vec::new();
    assert_eq!(core.index_snapshot(0, usize::MAX, &mut base), None);
    assert_eq!(base.len() as u64, parks * table::RECORD as u64);
}

#[test]
fn the_workflow_deadline_fires_as_a_timer() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 30), Mode::LIVE);
    core.take_event();
    core.poll_timers(29);
    assert_eq!(core.take_event(), None);
    core.poll_timers(30);
    assert_eq!(
        core.take_event(),
        Some(Event::Timer {
            run: 1,
            seq: 0,
            kind: TimerKind::Deadline,
            due_ms: 30
        })
    );
}

#[test]
fn retries_arm_pause_and_resume() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    let attempt = |at: u64, n: u32| -> RecordBuf {
        Record::Attempt {
            run: 1,
            seq: 4,
            name: Name::from("charge"),
            attempt: n,
            retry_at_ms: at,
            error: payload(b"boom"),
            ended_ms: None,
        }
    };
    core.apply(2, &attempt(20, 1), Mode::LIVE);
    assert_eq!(
        core.get(1).unwrap().armed_timers().collect::<Vec<_>>(),
        vec![(4, TimerKind::Retry, 20)]
    );
    // A newer attempt replaces the older retry.
    core.apply(3, &attempt(40, 2), Mode::LIVE);
    assert_eq!(
        core.get(1).unwrap().armed_timers().collect::<Vec<_>>(),
        vec![(4, TimerKind::Retry, 40)]
    );
    core.apply(4, &attempt(crate::record::PAUSED, 3), Mode::LIVE);
    assert_eq!(core.get(1).unwrap().armed_timers().count(), 0);
    drain_events(&mut core);
    core.poll_timers(100);
    assert_eq!(core.take_event(), None, "a paused step waits for a resume");
    let step: RecordBuf = Record::Step {
        run: 1,
        seq: 4,
        name: Name::from("charge"),
        attempt: 4,
        status: Status::Ok,
        payload: payload(b""),
        ended_ms: None,
    };
    let resume: RecordBuf = Record::Resume { run: 1, seq: 4 };
    core.apply(5, &resume, Mode::LIVE);
    core.apply(6, &step, Mode::LIVE);
    assert_eq!(core.get(1).unwrap().armed_timers().count(), 0);
}

#[test]
fn a_send_becomes_a_signal_with_a_stable_key_or_a_close() {
    let mut core = ShardCore::new(3, 8, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    let send = |seq: u32, name: &'static str| -> RecordRef<'static> {
        Record::Send {
            run: 1,
            seq,
            target: "b",
            name,
            payload: b"p",
        }
    };
    core.apply(2, &send(0, "hello"), Mode::LIVE);
    core.apply(3, &send(1, CANCEL_SIGNAL), Mode::LIVE);
    let mut out = Vec::new();
    core.release(3, &mut out);
    assert_eq!(
        out[0],
        Output::Signal {
            target: Name::from("b"),
            name: Name::from("hello"),
            payload: payload(b"p"),
            dedup: send_dedup(3, 1, 0),
        }
    );
    assert!(matches!(
        &out[1],
        Output::Close {
            terminate: false,
            parent: None,
            dedup,
            ..
        } if *dedup == send_dedup(3, 1, 1)
    ));
    assert_ne!(send_dedup(3, 1, 0), send_dedup(3, 1, 1));
    assert_ne!(send_dedup(3, 1, 0), send_dedup(4, 1, 0));
    assert_eq!(send_dedup(0, 0, 0) & 1, 1, "never 0");
}

#[test]
fn a_reset_copies_records_without_sending_their_messages_again() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    let reset_start: RecordBuf = Record::Start {
        run: 5,
        id: Name::from("a"),
        wtype: Name::from("wf"),
        version: 1,
        codec: 0,
        started_ms: 0,
        deadline_ms: 0,
        parent: None,
        policy: 0,
        from: Some(Origin {
            run: 4,
            cause: origin::RESET,
        }),
        copies: 1,
        update: None,
        input: payload(b""),
        meta: None,
    };
    core.apply(1, &reset_start, Mode::LIVE);
    let send = |seq| -> RecordRef<'static> {
        Record::Send {
            run: 5,
            seq,
            target: "b",
            name: "hello",
            payload: b"",
        }
    };
    core.apply(2, &send(0), Mode::LIVE);
    core.apply(3, &send(1), Mode::LIVE);
    let mut out = Vec::new();
    core.release(3, &mut out);
    assert_eq!(out.len(), 1, "only the record after the copies sends");
    assert!(matches!(out[0], Output::Signal { dedup, .. } if dedup == send_dedup(0, 5, 1)));
}

#[test]
fn update_results_reach_their_callers() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    let caller = ParentRef {
        shard: 2,
        run: 9,
        seq: 3,
    };
    let update: RecordRef<'_> = Record::Update {
        run: 1,
        id: "u1",
        name: "bump",
        payload: b"1",
        caller: Some(caller),
    };
    core.apply(2, &update, Mode::LIVE);
    let (ordinal, slot) = core.get(1).unwrap().update("u1").unwrap();
    assert_eq!((ordinal, slot.result.clone()), (0, None));
    let update_done: RecordRef<'_> = Record::UpdateDone {
        run: 1,
        ordinal: 0,
        status: Status::Ok,
        payload: b"2",
    };
    core.apply(3, &update_done, Mode::LIVE);
    assert_eq!(
        core.get(1).unwrap().update("u1").unwrap().1.result,
        Some((Status::Ok, payload(b"2"), 3))
    );
    let mut out = Vec::new();
    core.release(3, &mut out);
    assert_eq!(
        out,
        vec![
            Output::ChildResult {
                parent: caller,
                status: Status::Ok,
                payload: payload(b"2")
            },
            Output::UpdateResult {
                run: 1,
                ordinal: 0,
                id: Name::from("u1"),
                status: Status::Ok,
                payload: payload(b"2")
            }
        ]
    );
    // An unknown ordinal changes nothing.
    let stray: RecordRef<'_> = Record::UpdateDone {
        run: 1,
        ordinal: 7,
        status: Status::Ok,
        payload: b"",
    };
    core.apply(4, &stray, Mode::LIVE);
    assert_eq!(core.pending_outputs(), 0);
}

#[test]
fn a_child_result_goes_to_an_attached_parent_only() {
    for (flags, expect_child_result) in [(0u8, true), (policy::DETACHED, false)] {
        let mut core = ShardCore::new(0, 1, 1000, 0);
        let parent = ParentRef {
            shard: 1,
            run: 7,
            seq: 2,
        };
        let mut child = start(1, "kid", 0);
        if let Record::Start {
            parent: p, policy, ..
        } = &mut child
        {
            *p = Some(parent);
            *policy = flags;
        }
        core.apply(1, &child, Mode::LIVE);
        core.apply(2, &done(1, Status::Ok, 3, b"r"), Mode::LIVE);
        let mut out = Vec::new();
        core.release(2, &mut out);
        let sent = out
            .iter()
            .any(|o| matches!(o, Output::ChildResult { parent: p, .. } if *p == parent));
        assert_eq!(sent, expect_child_result, "flags {flags}");
    }
}

#[test]
fn records_for_unknown_runs_and_second_dones_change_nothing() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &signal(42, "go", 1, b""), Mode::LIVE);
    core.apply(2, &done(42, Status::Ok, 1, b""), Mode::LIVE);
    assert_eq!((core.loaded_len(), core.parked_len()), (0, 0));
    assert_eq!((core.pending_outputs(), core.has_events()), (0, false));
    core.apply(3, &start(1, "a", 0), Mode::LIVE);
    core.apply(4, &done(1, Status::Ok, 5, b"first"), Mode::LIVE);
    let outputs = core.pending_outputs();
    core.apply(5, &done(1, Status::Failed, 6, b"second"), Mode::LIVE);
    assert_eq!(core.get(1).unwrap().done, Some((Status::Ok, 5)));
    assert_eq!(core.get(1).unwrap().result(), Some(&b"first"[..]));
    assert_eq!(core.pending_outputs(), outputs);
    assert_eq!(core.retention.len(), 1);
}

#[test]
fn handover_payloads_that_do_not_decode_start_nothing() {
    let bad_payloads: [&[u8]; 4] = [b"", b"\x05garbage", &[0xff; 16], b"\x01"];
    for bad in bad_payloads {
        let mut core = ShardCore::new(0, 1, 1000, 0);
        core.apply(1, &start(1, "a", 0), Mode::LIVE);
        core.apply(2, &done(1, Status::ContinuedAsNew, 5, bad), Mode::LIVE);
        assert_eq!(core.loaded_len(), 1, "payload {bad:?}");
        assert_eq!(core.get(1).unwrap().done, Some((Status::ContinuedAsNew, 5)));
    }
    // A payload that decodes to a record other than a `Start`.
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    let mut bytes = Vec::new();
    encode_canonical(&signal(2, "x", 0, b""), &mut bytes);
    core.apply(2, &done(1, Status::Reset, 5, &bytes), Mode::LIVE);
    assert_eq!(core.loaded_len(), 1);
}

#[test]
fn unpark_refuses_a_journal_that_does_not_start_the_run() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    let journal = sleeper(&mut core, 1, "a", 10);
    core.park(1, BlobRef { offset: 0, len: 1 }, false);
    assert!(!core.unpark(1, 11, &journal[1..], 0));
    assert!(!core.unpark(2, 11, &journal, 0));
    let other = vec![start(2, "b", 0)];
    assert!(!core.unpark(1, 11, &other, 0));
    assert!(core.is_parked(1));
    assert_eq!(core.loaded_len(), 0);
    assert!(core.unpark(1, 11, &journal, 0));
}

#[test]
fn unpark_encoded_loads_as_unpark_does_and_refuses_damage_changing_nothing() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    let journal = sleeper(&mut core, 1, "a", 10);
    let mut bytes = Vec::new();
    for rec in &journal {
        encode_canonical(rec, &mut bytes);
    }
    core.park(1, BlobRef { offset: 0, len: 1 }, false);
    // Damage anywhere (here a cut last record) loads nothing.
    assert!(
        core.unpark_encoded(1, 11, &bytes[..bytes.len() - 1], &[], 0)
            .is_err()
    );
    assert!(core.is_parked(1));
    assert_eq!(core.loaded_len(), 0);
    // Not the run's journal: refused, as `unpark` refuses it.
    assert_eq!(core.unpark_encoded(2, 11, &bytes, &[], 0), Ok(false));
    assert!(core.unpark_encoded(1, 11, &bytes, &[], 0).unwrap());
    let loaded = core.get(1).unwrap();
    let timers: Vec<_> = loaded.armed_timers().collect();
    // The same state `unpark` of the decoded records gives.
    let mut other = ShardCore::new(0, 1, 1000, 0);
    let again = sleeper(&mut other, 1, "a", 10);
    other.park(1, BlobRef { offset: 0, len: 1 }, false);
    assert!(other.unpark(1, 11, &again, 0));
    let expected: Vec<_> = other.get(1).unwrap().armed_timers().collect();
    assert_eq!(timers, expected);
    assert_eq!(core.get(1).unwrap().last_lsn, 11);
}

/// Chunks framed and not decoded at an unpark still count off a reset's
/// copies and mark the run as streaming, as decoded ones do.
#[test]
fn unpark_encoded_passes_chunks_as_apply_takes_them() {
    let reset_start: RecordBuf = Record::Start {
        run: 5,
        id: Name::from("a"),
        wtype: Name::from("wf"),
        version: 1,
        codec: 0,
        started_ms: 0,
        deadline_ms: 0,
        parent: None,
        policy: 0,
        from: Some(Origin {
            run: 4,
            cause: origin::RESET,
        }),
        copies: 3,
        update: None,
        input: payload(b""),
        meta: None,
    };
    let chunk: RecordBuf = Record::Chunk {
        run: 5,
        seq: 1,
        payload: payload(b"tok"),
    };
    let send = |seq| -> RecordBuf {
        Record::Send {
            run: 5,
            seq,
            target: Name::from("b"),
            name: Name::from("hello"),
            payload: payload(b""),
        }
    };
    // The copies: two chunks and a send.
    let journal = [reset_start, chunk.clone(), chunk, send(2)];
    let mut bytes = Vec::new();
    for rec in &journal {
        encode_canonical(rec, &mut bytes);
    }
    // The same with the chunks set apart (`store::apart`): applied where
    // they stood, without their bytes.
    let split = crate::store::split_chunks(&bytes, &crate::store::Apart::default()).unwrap();
    assert_eq!(split.count, 2);
    for (frame, runs) in [(&bytes, &[][..]), (&split.journal, &split.apart.runs[..])] {
        let mut core = ShardCore::new(0, 1, 1000, 0);
        for (lsn, rec) in (1..).zip(&journal) {
            core.apply(lsn, rec, Mode::LIVE);
        }
        let mut out = Vec::new();
        core.release(4, &mut out);
        assert!(out.is_empty(), "copies send nothing: {out:?}");
        core.park(5, BlobRef { offset: 0, len: 1 }, false);
        assert!(core.unpark_encoded(5, 4, frame, runs, 0).unwrap());
        assert!(core.get(5).unwrap().streams);
        // The copies are counted off: the next record sends.
        core.apply(5, &send(3), Mode::LIVE);
        core.release(5, &mut out);
        assert_eq!(out.len(), 1, "the record after the copies sends: {out:?}");
    }
    // A run set apart that does not stand on a record: refused.
    let mut core = ShardCore::new(0, 1, 1000, 0);
    for (lsn, rec) in (1..).zip(&journal) {
        core.apply(lsn, rec, Mode::LIVE);
    }
    core.park(5, BlobRef { offset: 0, len: 1 }, false);
    let mut wrong = split.apart.runs.clone();
    wrong[0].at += 1;
    assert!(
        core.unpark_encoded(5, 4, &split.journal, &wrong, 0)
            .is_err()
    );
}

#[test]
fn at_most_a_timer_chunk_fires_per_poll() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    let runs = TIMER_CHUNK as u64 + 100;
    for run in 1..=runs {
        sleeper(&mut core, run, &format!("s{run}"), 50);
    }
    core.poll_timers(60);
    assert_eq!(drain_events(&mut core).len(), TIMER_CHUNK);
    assert_eq!(
        core.next_timer(),
        Some(60),
        "the backlog asks for a poll at once"
    );
    core.poll_timers(60);
    assert_eq!(drain_events(&mut core).len(), 100);
    assert_eq!(core.next_timer(), None);
}

#[test]
fn spare_runs_are_reused_and_shrunk() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    for run in 1..=100 {
        core.apply(run, &start(run, &format!("p{run}"), 0), Mode::LIVE);
        core.park(
            run,
            BlobRef {
                offset: run,
                len: 1,
            },
            false,
        );
    }
    assert!(!core.spare.is_empty());
    let before = core.spare.len();
    core.apply(101, &start(101, "fresh", 0), Mode::LIVE);
    assert_eq!(core.spare.len(), before - 1, "a start takes a pooled run");
    assert_eq!(core.get(101).unwrap().journal_records, 1);
    assert_eq!(
        core.shrink_spare(SPARE_RUNS_IDLE),
        before - 1 - SPARE_RUNS_IDLE.min(before - 1)
    );
    assert!(core.spare.len() <= SPARE_RUNS_IDLE);
}

#[test]
fn a_busy_journal_doubles_and_a_waiting_or_recovered_one_is_snug() {
    // Live appends double: 200 signals grow the journal a handful of times,
    // not once every record or two.
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "busy", 0), Mode::LIVE);
    let mut grown = 0;
    for lsn in 2..=200 {
        let before = core.get(1).unwrap().journal.capacity();
        core.apply(lsn, &signal(1, "s", 0, b"payload"), Mode::LIVE);
        grown += usize::from(core.get(1).unwrap().journal.capacity() != before);
    }
    assert!(grown <= 12, "the journal grew {grown} times in 199 appends");
    // Waiting on a timer gives the slack back.
    core.apply(201, &timer(1, 0, 5_000), Mode::LIVE);
    let j = &core.get(1).unwrap().journal;
    assert!(
        j.len() > 4096 || j.capacity() <= j.len() + j.len() / 4,
        "{} of {}",
        j.len(),
        j.capacity()
    );

    // A short live journal is snug once its run waits.
    core.apply(202, &start(2, "sleeper", 0), Mode::LIVE);
    core.apply(203, &signal(2, "s", 0, &[7; 300]), Mode::LIVE);
    core.apply(204, &wait(2, 0, "go", 0), Mode::LIVE);
    let j = &core.get(2).unwrap().journal;
    assert!(
        j.capacity() <= j.len() + j.len() / 4,
        "{} of {}",
        j.len(),
        j.capacity()
    );

    // Rebuilt at recovery, each append is snug.
    core.apply(205, &start(3, "recovered", 0), Mode::RECOVER);
    for lsn in 206..=215 {
        core.apply(lsn, &signal(3, "s", 0, b"payload"), Mode::RECOVER);
        let j = &core.get(3).unwrap().journal;
        assert!(
            j.capacity() <= j.len() + j.len() / 4 + 64,
            "{} of {}",
            j.len(),
            j.capacity()
        );
    }
}

#[test]
fn shard_of_is_stable_and_in_range() {
    for shards in [0u32, 1, 2, 7, 64, 1000] {
        for i in 0..200 {
            let id = format!("workflow-{i}");
            let s = shard_of(&id, shards);
            assert!(s < shards.max(1));
            assert_eq!(s, shard_of(&id, shards));
        }
    }
    assert_eq!(
        shard_of("order-42", 16),
        (crate::wire::hash_id("order-42") % 16) as u32
    );
}

#[test]
fn spilled_and_set_blob_move_the_stored_prefix() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    core.apply(2, &signal(1, "x", 0, b"abc"), Mode::LIVE);
    assert!(core.journal_bytes() > 0);
    let spilt = core.get(1).unwrap().journal.len() as u64;
    let blob = BlobRef {
        offset: 64,
        len: 30,
    };
    core.spilled(1, blob, 30, 0, false);
    assert_eq!(core.journal_bytes(), 0);
    let l = core.get(1).unwrap();
    assert_eq!(
        (l.blob, l.blob_chain, l.journal_records, l.blob_journal),
        (Some(blob), 30, 0, spilt)
    );
    core.apply(3, &signal(1, "x", 0, b"d"), Mode::LIVE);
    // A second spill extends the prefix by what memory held.
    let more = core.get(1).unwrap().journal.len() as u64;
    core.spilled(1, blob, 60, 1, false);
    assert_eq!(core.get(1).unwrap().blob_journal, spilt + more);
    core.apply(4, &signal(1, "x", 0, b"e"), Mode::LIVE);
    let moved = BlobRef {
        offset: 640,
        len: 30,
    };
    core.set_blob(
        1,
        moved,
        StoredPrefix {
            chain: 30,
            depth: 0,
            journal_len: 7,
            apart: false,
        },
    );
    let l = core.get(1).unwrap();
    assert_eq!(l.journal_records, 1, "the suffix stays");
    assert_eq!(l.blob_journal, 7);
    core.relocate_blob(1, 999);
    assert_eq!(core.get(1).unwrap().blob.unwrap().offset, 999);
}

#[test]
fn reparked_runs_lose_their_chain() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    core.park(1, BlobRef { offset: 5, len: 10 }, true);
    assert_eq!(core.chained_runs().count(), 1);
    let mut delta = Vec::new();
    core.index_delta(&mut delta);
    core.reparked(
        1,
        BlobRef {
            offset: 50,
            len: 20,
        },
        true,
    );
    assert_eq!(core.chained_runs().count(), 0);
    // Written whole, its chunks apart: compaction finds it by its flag.
    assert_eq!(
        core.apart_runs().collect::<Vec<_>>(),
        vec![(
            1,
            BlobRef {
                offset: 50,
                len: 20
            }
        )]
    );
    assert_eq!(
        core.parked(1).unwrap().blob(),
        BlobRef {
            offset: 50,
            len: 20
        }
    );
    assert_eq!(core.index_pending(), 1);
}

#[test]
fn shrink_compacts_unless_slots_are_held() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    let far = 3 * HORIZON_MS;
    for run in 1..=9000u64 {
        sleeper(&mut core, run, &format!("c{run}"), far + run);
        core.park(
            run,
            BlobRef {
                offset: run,
                len: 1,
            },
            false,
        );
    }
    for run in (1..=9000u64).filter(|r| r % 10 != 0) {
        core.remove(run);
    }
    core.hold_slots(true);
    core.shrink();
    assert!(!core.sweep_full, "held slots do not move");
    core.hold_slots(false);
    core.shrink();
    // Whether or not the table chose to compact, every survivor is still
    // found and its timer still asks for a load.
    for run in (10..=9000u64).step_by(10) {
        assert!(core.is_parked(run), "run {run}");
        assert_eq!(core.find(&format!("c{run}")), Some(Found::Parked(run)));
    }
    let mut loads = 0;
    let mut now = 0;
    for _ in 0..10_000 {
        let Some(t) = core.next_timer() else { break };
        now = t.max(now);
        core.poll_timers(now);
        loads += drain_events(&mut core).len();
    }
    assert_eq!(loads, 900);
    assert!(now <= far + 9000);
}

#[test]
fn continue_as_new_closes_children_and_a_reset_keeps_them() {
    for status in [Status::ContinuedAsNew, Status::Reset] {
        let mut core = ShardCore::new(0, 1, 1000, 0);
        let mut parented = start(1, "p", 0);
        if let Record::Start { parent, .. } = &mut parented {
            *parent = Some(ParentRef {
                shard: 3,
                run: 9,
                seq: 1,
            });
        }
        core.apply(1, &parented, Mode::LIVE);
        let child: RecordRef<'_> = Record::Child {
            run: 1,
            seq: 0,
            wtype: "kid",
            id: "k",
            flags: policy::CLOSE_TERMINATE,
            deadline_ms: 0,
            input: b"",
        };
        core.apply(2, &child, Mode::LIVE);
        let (_, done) = handover(1, 2, "p", status);
        core.apply(3, &done, Mode::LIVE);
        let mut out = Vec::new();
        core.release(3, &mut out);
        let closes = out
            .iter()
            .filter(|o| matches!(o, Output::Close { .. }))
            .count();
        assert_eq!(
            closes,
            usize::from(status == Status::ContinuedAsNew),
            "{status:?}"
        );
        assert!(
            !out.iter().any(|o| matches!(o, Output::ChildResult { .. })),
            "{status:?}: the successor inherits the parent"
        );
        assert!(out.contains(&Output::Result {
            run: 1,
            status,
            payload: payload(b""),
        }));
    }
}

#[test]
fn a_loaded_run_stays_small() {
    // Issue 37: 100,000 loaded sleepers in 128 MB. This struct was 504
    // bytes of a sleeper's ~2 KB; what few runs use is now out of line.
    // 248 since `blob_journal` (a live stream's subscriber reads no
    // frame): 0.8 MB more for those 100,000.
    let size = std::mem::size_of::<LoadedRun>();
    eprintln!("LoadedRun: {size} bytes");
    assert!(size <= 248, "LoadedRun grew to {size} bytes");
}

#[test]
fn a_finished_run_reads_its_result_from_its_journal_or_holds_it_when_rebuilt() {
    // Issue 37: the result is not held twice while the journal has it.
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    core.apply(2, &done(1, Status::Ok, 5, b"the result"), Mode::LIVE);
    let l = core.get(1).unwrap();
    assert!(
        l.rare.as_ref().is_none_or(|r| r.result.is_none()),
        "held twice"
    );
    assert_eq!(l.result(), Some(&b"the result"[..]));
    // Rebuilt from a frame, the journal is empty: the result is held.
    let mut rebuilt = ShardCore::new(0, 1, 1000, 0);
    rebuilt.apply(1, &start(1, "a", 0), Mode::BLOB);
    rebuilt.apply(2, &done(1, Status::Ok, 5, b"the result"), Mode::BLOB);
    let l = rebuilt.get(1).unwrap();
    assert!(l.journal.is_empty());
    assert_eq!(l.result(), Some(&b"the result"[..]));
    // Spilled after it finished, the journal leaves and the result stays.
    let blob = BlobRef {
        offset: 64,
        len: 30,
    };
    core.spilled(1, blob, 30, 0, false);
    assert_eq!(core.get(1).unwrap().result(), Some(&b"the result"[..]));
    // A run still going has none.
    core.apply(3, &start(2, "b", 0), Mode::LIVE);
    assert_eq!(core.get(2).unwrap().result(), None);
}

/// A run parked with its chunks set apart is flagged so in its entry (and
/// in the persisted index), found by compaction, and expires as a frame
/// that names others (read before its release); written again without
/// them, it loses the flag.
#[test]
fn a_run_parked_with_chunks_apart_is_flagged_and_read_before_release() {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    core.apply(1, &start(1, "a", 0), Mode::LIVE);
    let done: RecordBuf = Record::Done {
        run: 1,
        status: Status::Ok,
        finished_ms: 10,
        payload: Payload::from(&b"r"[..]),
        by: None,
    };
    core.apply(2, &done, Mode::LIVE);
    let blob = BlobRef { offset: 5, len: 10 };
    core.park_linked(1, blob, false, true);
    assert_eq!(core.apart_runs().collect::<Vec<_>>(), vec![(1, blob)]);
    let mut delta = Vec::new();
    core.index_delta(&mut delta);
    let record: [u8; table::RECORD] = delta[..table::RECORD].try_into().unwrap();
    assert_eq!(record[15], table::flag::APART);
    let back = table::Entry::from_record(&record).unwrap();
    assert!(back.has(table::flag::APART));
    core.reparked(1, blob, false);
    assert_eq!(core.apart_runs().count(), 0);
    core.reparked(1, blob, true);
    let mut gone = Vec::new();
    core.expire_frames(u64::MAX, &mut gone);
    assert_eq!(gone.len(), 1);
    assert!(gone[0].linked, "read for its Stream frames before release");
}
