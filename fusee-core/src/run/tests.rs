//! Unit tests of the run machine: every operation kind run live and then
//! replayed from the records it produced, malformed journals, each
//! determinism check, memory.

use super::*;
use crate::record::{
    PAUSED, Record, RecordRef, StartUpdate, WaitOutcome, encode_canonical, value_kind,
};
use crate::shard::CANCEL_SIGNAL;

const RUN: RunId = 7;

fn start(update: Option<(&'static str, &'static str)>) -> RecordRef<'static> {
    Record::Start {
        run: RUN,
        id: "order-42",
        wtype: "checkout",
        version: 1,
        codec: 0,
        started_ms: 0,
        deadline_ms: 0,
        parent: None,
        policy: 0,
        from: None,
        copies: 0,
        update: update.map(|(id, name)| {
            Box::new(StartUpdate {
                id,
                name,
                payload: &b"arg"[..],
            })
        }),
        input: b"in",
        meta: None,
    }
}

fn encode(recs: &[RecordRef<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in recs {
        encode_canonical(r, &mut out);
    }
    out
}

/// Plays the host and the workflow code. Live, it appends what the machine
/// asks for and what the script says arrives from outside; replaying, it
/// appends nothing and fails if the machine asks for anything.
struct Driver {
    m: RunMachine,
    journal: Vec<u8>,
    lsn: Lsn,
    live: bool,
    /// What the code saw, in order: deliveries and values.
    seen: Vec<String>,
}

impl Driver {
    fn live_with(update: Option<(&'static str, &'static str)>) -> Self {
        let journal = encode(&[start(update)]);
        let m = RunMachine::build(RUN, &journal, 1).expect("a Start alone builds");
        Self {
            m,
            journal,
            lsn: 1,
            live: true,
            seen: Vec::new(),
        }
    }

    fn live() -> Self {
        Self::live_with(None)
    }

    fn replay(journal: &[u8], lsn: Lsn) -> Self {
        let m = RunMachine::build(RUN, journal, lsn).expect("the journal builds");
        Self {
            m,
            journal: journal.to_vec(),
            lsn,
            live: false,
            seen: Vec::new(),
        }
    }

    fn append(&mut self, rec: RecordRef<'_>) {
        encode_canonical(&rec, &mut self.journal);
        self.lsn += 1;
        self.m.handle_record(self.lsn, &rec).expect("record taken");
    }

    /// A record from outside: appended live, in the journal already when
    /// replaying.
    fn env(&mut self, rec: RecordRef<'_>) {
        if self.live {
            self.append(rec);
        }
    }

    fn issued<'a>(&mut self, issued: Issued, rec: impl FnOnce(Seq) -> RecordRef<'a>) -> Seq {
        match (self.live, issued) {
            (true, Issued::Append(seq)) => {
                self.append(rec(seq));
                seq
            }
            (false, Issued::Recorded(seq)) => seq,
            (live, other) => panic!("live: {live}, answer {other:?}"),
        }
    }

    fn answered(&mut self, answer: Answer, rec: RecordRef<'_>) {
        match (self.live, answer) {
            (true, Answer::Append) => self.append(rec),
            (false, Answer::Recorded) => {}
            (live, other) => panic!("live: {live}, answer {other:?}"),
        }
    }

    /// The code calls step `name`; live, its first `Began` is appended as
    /// the machine asks.
    fn step(&mut self, name: &str) -> StepStart {
        let s = self.m.step(name).expect("step");
        if !self.live {
            assert_eq!(s.run, StepRun::Recorded, "a replayed step runs nothing");
        }
        assert_eq!(
            s.began, self.live,
            "a new step's Began is asked at its call"
        );
        if s.began {
            self.append(began(s.seq, name, 1));
        }
        s
    }

    fn sleep(&mut self, name: &str) -> Seq {
        let i = self.m.sleep(name).expect("sleep");
        self.issued(i, |seq| Record::Timer {
            run: RUN,
            seq,
            name,
            fire_at_ms: 100,
        })
    }

    fn wait(&mut self, name: &str, deadline_ms: u64) -> Seq {
        let i = self.m.wait(name).expect("wait");
        self.issued(i, |seq| Record::Wait {
            run: RUN,
            seq,
            name,
            deadline_ms,
        })
    }

    fn child(&mut self, wtype: &str, id: &str) -> Seq {
        let i = self.m.child(wtype, id).expect("child");
        self.issued(i, |seq| Record::Child {
            run: RUN,
            seq,
            wtype,
            id,
            flags: 0,
            deadline_ms: 0,
            input: b"",
        })
    }

    fn send(&mut self, target: &str, name: &str) -> Seq {
        let i = self.m.send(target, name).expect("send");
        self.issued(i, |seq| Record::Send {
            run: RUN,
            seq,
            target,
            name,
            payload: b"p",
        })
    }

    fn value(&mut self, kind: u8, fresh: &[u8]) -> Vec<u8> {
        let v = match self.m.value(kind).expect("value") {
            ValueAnswer::Recorded { value, .. } if !self.live => value.to_vec(),
            ValueAnswer::Append(seq) if self.live => {
                self.append(Record::Value {
                    run: RUN,
                    seq,
                    kind,
                    value: fresh,
                });
                fresh.to_vec()
            }
            other => panic!("live: {}, answer {other:?}", self.live),
        };
        self.seen.push(format!("value {v:?}"));
        v
    }

    fn patched(&mut self, id: &str) -> bool {
        match self.m.patched(id).expect("patched") {
            Patched::Append(seq) if self.live => {
                self.append(Record::Patch { run: RUN, seq, id });
                true
            }
            Patched::Recorded(_) if !self.live => true,
            Patched::Absent => false,
            other => panic!("live: {}, answer {other:?}", self.live),
        }
    }

    fn abandon(&mut self, seq: Seq) {
        match self.m.abandon_wait(seq) {
            Abandon::Append if self.live => self.append(Record::Waited {
                run: RUN,
                seq,
                outcome: WaitOutcome::Abandoned,
            }),
            Abandon::Recorded if !self.live => {}
            other => panic!("live: {}, answer {other:?}", self.live),
        }
    }

    fn update_done(&mut self, ordinal: u64) {
        let a = self.m.update_done(ordinal).expect("update_done");
        self.answered(
            a,
            Record::UpdateDone {
                run: RUN,
                ordinal,
                status: Status::Ok,
                payload: b"",
            },
        );
    }

    fn finish(&mut self, status: Status) {
        let a = self.m.finish(status).expect("finish");
        self.answered(
            a,
            Record::Done {
                run: RUN,
                status,
                finished_ms: 9,
                payload: b"out",
                by: None,
            },
        );
    }

    /// The code is quiescent: the next delivery, as the code saw it.
    fn deliver(&mut self) -> Option<String> {
        let d = self.m.poll_delivery().expect("no determinism error")?;
        let s = format!("{d:?}");
        let again = self.m.current_delivery().map(|d| format!("{d:?}"));
        assert_eq!(again.as_deref(), Some(s.as_str()));
        self.seen.push(s.clone());
        Some(s)
    }
}

/// Runs `script` live, then replays the journal it produced with a fresh
/// machine: the code sees the same, the machine asks for nothing, and the
/// run's end is recorded.
fn live_then_replay(script: impl Fn(&mut Driver)) -> Driver {
    let mut live = Driver::live();
    script(&mut live);
    assert_eq!(live.m.unappended(), 0);
    assert!(live.m.gate_lsn() == Some(live.lsn));
    let mut replay = Driver::replay(&live.journal, live.lsn);
    assert!(replay.m.end().is_some(), "the script finishes its run");
    script(&mut replay);
    assert_eq!(replay.seen, live.seen, "replay sees what the live run saw");
    assert_eq!(replay.m.unappended(), 0);
    assert!(!replay.m.is_replaying());
    assert_eq!(replay.m.next_seq(), live.m.next_seq());
    live
}

fn step_result<'a>(seq: Seq, name: &'a str, attempt: u32, payload: &'a [u8]) -> RecordRef<'a> {
    Record::Step {
        run: RUN,
        seq,
        name,
        attempt,
        status: Status::Ok,
        payload,
        ended_ms: None,
    }
}

fn began(seq: Seq, name: &str, attempt: u32) -> RecordRef<'_> {
    Record::Began {
        run: RUN,
        seq,
        name,
        attempt,
        started_ms: 40 + u64::from(attempt),
    }
}

fn attempt(seq: Seq, attempt: u32, retry_at_ms: u64) -> RecordRef<'static> {
    Record::Attempt {
        run: RUN,
        seq,
        name: "charge",
        attempt,
        retry_at_ms,
        error: b"declined",
        ended_ms: None,
    }
}

fn fired(seq: Seq) -> RecordRef<'static> {
    Record::Fired { run: RUN, seq }
}

fn signal<'a>(name: &'a str, payload: &'a [u8]) -> RecordRef<'a> {
    Record::Signal {
        run: RUN,
        name,
        dedup: 0,
        payload,
        by: None,
    }
}

fn waited(seq: Seq, outcome: WaitOutcome) -> RecordRef<'static> {
    Record::Waited {
        run: RUN,
        seq,
        outcome,
    }
}

fn update(id: &'static str, name: &'static str) -> RecordRef<'static> {
    Record::Update {
        run: RUN,
        id,
        name,
        payload: b"arg",
        caller: None,
    }
}

// ---------------------------------------------------------------------
// Every operation kind: live, then replayed.

/// The charge step of [`step_with_retries`]: two failed attempts (one
/// retried at a time, one paused and resumed), then a result.
fn charge_with_retries(d: &mut Driver) {
    let s = d.step("charge");
    assert_eq!(s.seq, 1);
    if d.live {
        let first = Attempt {
            attempt: 1,
            at: RetryAt::Now,
        };
        assert_eq!(s.run, StepRun::Attempt(first));
        assert_eq!(d.m.gate_lsn(), Some(2), "the gate is the step's Began");
    }
    d.env(attempt(1, 1, 500));
    d.env(began(1, "charge", 2));
    if d.live {
        let second = Attempt {
            attempt: 2,
            at: RetryAt::At { retry_at_ms: 500 },
        };
        assert_eq!(d.m.step_attempt(1), Some(second));
    }
    d.env(attempt(1, 2, PAUSED));
    if d.live {
        assert_eq!(d.m.step_attempt(1).map(|a| a.at), Some(RetryAt::Paused));
    }
    d.env(Record::Resume { run: RUN, seq: 1 });
    // Attempt 3 cut by a crash, then begun again under its number.
    d.env(began(1, "charge", 3));
    d.env(began(1, "charge", 3));
    if d.live {
        let third = Attempt {
            attempt: 3,
            at: RetryAt::Now,
        };
        assert_eq!(d.m.step_attempt(1), Some(third));
    }
    d.env(step_result(1, "charge", 3, b"paid"));
}

#[test]
fn step_with_retries() {
    let live = live_then_replay(|d| {
        charge_with_retries(d);
        assert_eq!(d.m.step_attempt(1), None, "the step has its result");
        let got = d.deliver().expect("the step's result");
        assert!(got.contains("attempt: 3") && got.contains("[112, 97, 105, 100]"));
        assert_eq!(d.deliver(), None);
        d.finish(Status::Ok);
    });
    assert_eq!(live.seen.len(), 1);
}

#[test]
fn a_step_cut_at_an_attempt_tells_the_next_attempt_and_when() {
    let mut live = Driver::live();
    let mut cuts = Vec::new();
    // Journal lengths after each record of the step.
    let mut at = |d: &Driver| cuts.push((d.journal.clone(), d.lsn));
    live.step("charge");
    live.append(attempt(1, 1, 500));
    at(&live);
    live.append(attempt(1, 2, PAUSED));
    at(&live);
    live.append(Record::Resume { run: RUN, seq: 1 });
    at(&live);
    let expected = [
        RetryAt::At { retry_at_ms: 500 },
        RetryAt::Paused,
        RetryAt::Now,
    ];
    for ((journal, lsn), (n, at)) in cuts.iter().zip([2, 3, 3].into_iter().zip(expected)) {
        let mut m = RunMachine::build(RUN, journal, *lsn).expect("builds");
        assert!(m.is_replaying());
        let s = m.step("charge").expect("step");
        let next = Attempt { attempt: n, at };
        assert_eq!(s.run, StepRun::Attempt(next));
        assert_eq!(m.step_attempt(1), Some(next));
        assert_eq!(m.poll_delivery(), Ok(None));
        assert!(!m.is_replaying());
    }
}

#[test]
fn sleep() {
    live_then_replay(|d| {
        let seq = d.sleep("nap");
        if d.live {
            assert_eq!(d.deliver(), None, "not fired yet");
        }
        d.env(fired(seq));
        assert_eq!(d.deliver(), Some("Fired { seq: 1 }".into()));
        d.finish(Status::Ok);
    });
}

#[test]
fn waits_for_signals_early_late_and_timing_out() {
    live_then_replay(|d| {
        // Early: the signal is buffered before the wait.
        d.env(signal("paid", b"early"));
        let early = d.wait("paid", 0);
        d.env(waited(early, WaitOutcome::Signal(0)));
        let got = d.deliver().expect("early signal");
        assert!(got.contains(&format!("{:?}", b"early")), "{got}");
        // Late: the signal arrives after the wait.
        let late = d.wait("paid", 0);
        d.env(signal("paid", b"late"));
        d.env(waited(late, WaitOutcome::Signal(1)));
        let got = d.deliver().expect("late signal");
        assert!(got.contains(&format!("{:?}", b"late")), "{got}");
        // A deadline.
        let timed = d.wait("never", 50);
        d.env(waited(timed, WaitOutcome::TimedOut));
        assert!(d.deliver().expect("timeout").contains("TimedOut"));
        d.finish(Status::Ok);
    });
}

#[test]
fn child() {
    live_then_replay(|d| {
        let seq = d.child("billing", "order-42/bill");
        d.env(Record::ChildDone {
            run: RUN,
            seq,
            status: Status::Failed,
            payload: b"no",
        });
        assert!(d.deliver().expect("child").contains("Failed"));
        d.finish(Status::Ok);
    });
}

#[test]
fn send_and_cancel_resolve_at_once() {
    live_then_replay(|d| {
        assert_eq!(d.send("order-7", "paid"), 1);
        assert_eq!(d.send("order-7", CANCEL_SIGNAL), 2);
        assert_eq!(d.deliver(), None);
        d.finish(Status::Ok);
    });
}

#[test]
fn values_are_made_once_and_replayed() {
    let live = live_then_replay(|d| {
        let now = d.value(value_kind::NOW, b"1700000000000");
        let random = d.value(value_kind::RANDOM, &[4, 2]);
        let uuid = d.value(value_kind::UUID, &[9; 16]);
        let custom = d.value(value_kind::CUSTOM, b"rate=1.1");
        assert_eq!(now, b"1700000000000");
        assert_eq!((random.len(), uuid.len(), custom.len()), (2, 16, 8));
        d.finish(Status::Ok);
    });
    assert_eq!(live.seen.len(), 4);
}

#[test]
fn patch_markers() {
    live_then_replay(|d| {
        assert!(d.patched("v2"), "a new run takes the new branch");
        let _ = d.sleep("after");
        d.finish(Status::Ok);
    });
}

#[test]
fn old_runs_replay_the_old_branch_of_a_patch() {
    // Old code: sleep, then finish. New code: `if patched("v2") { step }`.
    let mut old = Driver::live();
    let seq = old.sleep("t");
    old.append(fired(seq));
    old.deliver();
    old.finish(Status::Ok);
    let mut new = Driver::replay(&old.journal, old.lsn);
    new.sleep("t");
    // The journal holds the sleep's Fired next, then the end: no marker.
    new.deliver();
    assert!(!new.patched("v2"));
    new.finish(Status::Ok);
    // An unrecorded step at the number also means the old branch.
    let mut old = Driver::live();
    old.step("a");
    let _ = old.sleep("b");
    let mut m = RunMachine::build(RUN, &old.journal, old.lsn).expect("builds");
    assert_eq!(m.patched("v2"), Ok(Patched::Absent));
    assert_eq!(m.next_seq(), 1, "an absent marker takes no number");
}

#[test]
fn update_handlers_start_at_their_place_in_the_journal() {
    live_then_replay(|d| {
        let nap = d.sleep("nap");
        d.env(update("u1", "set-address"));
        d.env(fired(nap));
        let got = d.deliver().expect("the update comes first");
        assert!(
            got.contains("ordinal: 0") && got.contains("set-address"),
            "{got}"
        );
        // The handler's operation takes the next number.
        assert_eq!(d.sleep("handler"), 2);
        assert_eq!(d.deliver(), Some("Fired { seq: 1 }".into()));
        d.env(fired(2));
        assert_eq!(d.deliver(), Some("Fired { seq: 2 }".into()));
        d.update_done(0);
        d.finish(Status::Ok);
    });
}

#[test]
fn an_update_with_start_is_the_first_delivery() {
    let mut live = Driver::live_with(Some(("u0", "init")));
    let got = live.deliver().expect("the start's update");
    assert!(got.contains("ordinal: 0") && got.contains("init"));
    live.update_done(0);
    live.finish(Status::Ok);
    let mut replay = Driver::replay(&live.journal, live.lsn);
    replay.deliver();
    replay.update_done(0);
    replay.finish(Status::Ok);
    assert_eq!(replay.seen, live.seen);
}

#[test]
fn cancel_and_continue_as_new() {
    live_then_replay(|d| {
        d.env(Record::Cancel {
            run: RUN,
            reason: b"user",
            by: None,
            grace: None,
        });
        assert!(d.deliver().expect("cancel").starts_with("Cancel"));
        d.finish(Status::ContinuedAsNew);
    });
}

#[test]
fn a_dropped_wait_is_recorded_once() {
    live_then_replay(|d| {
        // select!(wait "paid", sleep "timeout"): the sleep wins.
        let wait = d.wait("paid", 0);
        let nap = d.sleep("timeout");
        d.env(fired(nap));
        assert_eq!(d.deliver(), Some("Fired { seq: 2 }".into()));
        d.abandon(wait);
        assert_eq!(d.m.abandon_wait(wait), Abandon::Ended, "dropped once");
        d.finish(Status::Ok);
    });
    // A wait whose outcome is in the journal needs no record when dropped.
    let mut d = Driver::live();
    let wait = d.wait("paid", 0);
    let nap = d.sleep("timeout");
    d.append(fired(nap));
    d.append(signal("paid", b"x"));
    d.append(waited(wait, WaitOutcome::Signal(0)));
    d.deliver();
    assert_eq!(d.m.abandon_wait(wait), Abandon::Ended);
    assert!(d.deliver().expect("still delivered").starts_with("Waited"));
}

#[test]
fn concurrent_completions_are_delivered_in_journal_order() {
    live_then_replay(|d| {
        // join!(step a, step b, step c), completing c, a, b.
        let seqs: Vec<Seq> = ["a", "b", "c"].iter().map(|n| d.step(n).seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        d.env(step_result(3, "c", 1, b"3"));
        d.env(step_result(1, "a", 1, b"1"));
        // The code reacts to the first before the next completion.
        let first = d.deliver().expect("c");
        assert!(first.starts_with("Step { seq: 3"));
        let _ = d.sleep("after-c");
        d.env(step_result(2, "b", 1, b"2"));
        for want in ["Step { seq: 1", "Step { seq: 2"] {
            assert!(d.deliver().expect("next").starts_with(want));
        }
        d.finish(Status::Ok);
    });
}

#[test]
fn a_live_completion_during_replay_waits_for_the_recorded_ones() {
    let mut live = Driver::live();
    let a = live.sleep("a");
    let b = live.sleep("b");
    live.append(fired(b));
    let (journal, lsn) = (live.journal.clone(), live.lsn);
    // Crash. Rebuilt, the code calls both sleeps again; `a` fires live
    // before the code took the recorded `b`.
    let mut d = Driver::replay(&journal, lsn);
    assert_eq!((d.sleep("a"), d.sleep("b")), (a, b));
    d.live = true;
    d.append(fired(a));
    assert!(
        d.m.is_replaying(),
        "the recorded Fired is not delivered yet"
    );
    assert_eq!(d.deliver(), Some("Fired { seq: 2 }".into()));
    assert_eq!(d.deliver(), Some("Fired { seq: 1 }".into()));
    assert!(!d.m.is_replaying());
}

#[test]
fn a_finished_run_needs_no_code() {
    let mut d = Driver::live();
    d.finish(Status::Failed);
    let m = RunMachine::build(RUN, &d.journal, d.lsn).expect("builds");
    assert_eq!(m.end(), Some(Status::Failed));
    // Terminated from outside: the code may not go past the journal.
    let mut d = Driver::live();
    d.step("s");
    d.append(Record::Done {
        run: RUN,
        status: Status::Terminated,
        finished_ms: 1,
        payload: b"",
        by: Some(b"admin"),
    });
    assert_eq!(d.m.end(), Some(Status::Terminated));
    assert_eq!(d.m.sleep("x"), Err(OpError::Finished { run: RUN }));
    assert_eq!(d.m.poll_delivery(), Ok(None));
    // Late messages after the end are taken and ignored.
    d.append(step_result(1, "s", 1, b"late"));
    assert_eq!(d.m.poll_delivery(), Ok(None));
}

#[test]
fn the_gate_waits_for_asked_records() {
    let mut d = Driver::live();
    assert_eq!(d.m.sleep("t"), Ok(Issued::Append(1)));
    assert_eq!(d.m.gate_lsn(), None, "the Timer's LSN is not known yet");
    d.append(Record::Timer {
        run: RUN,
        seq: 1,
        name: "t",
        fire_at_ms: 5,
    });
    assert_eq!(d.m.gate_lsn(), Some(2));
}

// ---------------------------------------------------------------------
// Malformed journals and refused records.

fn problem(journal: &[RecordRef<'_>]) -> Problem {
    let bytes = encode(journal);
    match RunMachine::build(RUN, &bytes, 1) {
        Err(e) => {
            assert_eq!(e.run, RUN);
            e.problem
        }
        Ok(_) => panic!("built {journal:?}"),
    }
}

#[test]
fn malformed_journals_are_errors() {
    let s = start(None);
    let timer = |seq| Record::Timer {
        run: RUN,
        seq,
        name: "t",
        fire_at_ms: 1,
    };
    assert_eq!(problem(&[]), Problem::Empty);
    assert_eq!(problem(&[fired(1)]), Problem::NotStart { kind: "Fired" });
    let mut other = s.clone();
    if let Record::Start { run, .. } = &mut other {
        *run = 8;
    }
    assert!(matches!(
        problem(&[other]),
        Problem::OtherRun { found: 8, .. }
    ));
    let foreign = Record::Fired { run: 9, seq: 1 };
    assert!(matches!(
        problem(&[s.clone(), foreign]),
        Problem::OtherRun { found: 9, .. }
    ));
    assert_eq!(problem(&[s.clone(), s.clone()]), Problem::SecondStart);
    assert_eq!(
        problem(&[s.clone(), timer(0)]),
        Problem::SeqZero { kind: "Timer" }
    );
    assert_eq!(
        problem(&[s.clone(), timer(2), timer(1)]),
        Problem::OutOfOrder {
            kind: "Timer",
            seq: 1,
            max: 2
        }
    );
    // A step's result names operation 3: a command for 2 cannot follow.
    assert!(matches!(
        problem(&[s.clone(), step_result(3, "a", 1, b""), timer(2)]),
        Problem::OutOfOrder { seq: 2, max: 3, .. }
    ));
    assert!(matches!(
        problem(&[s.clone(), fired(1)]),
        Problem::NotStarted { seq: 1, .. }
    ));
    assert!(matches!(
        problem(&[s.clone(), timer(1), waited(1, WaitOutcome::TimedOut)]),
        Problem::WrongKind {
            seq: 1,
            op: "sleep",
            ..
        }
    ));
    assert!(matches!(
        problem(&[s.clone(), timer(1), fired(1), fired(1)]),
        Problem::Ended { seq: 1, .. }
    ));
    assert!(matches!(
        problem(&[
            s.clone(),
            step_result(1, "a", 1, b""),
            step_result(1, "a", 1, b"")
        ]),
        Problem::Ended { seq: 1, .. }
    ));
    assert!(matches!(
        problem(&[s.clone(), attempt(1, 2, 5), attempt(1, 2, 6)]),
        Problem::AttemptOrder {
            attempt: 2,
            last: 2,
            ..
        }
    ));
    assert!(matches!(
        problem(&[s.clone(), attempt(1, 1, 5), step_result(1, "other", 2, b"")]),
        Problem::Renamed { seq: 1, .. }
    ));
    assert_eq!(
        problem(&[
            s.clone(),
            attempt(1, 1, 5),
            Record::Resume { run: RUN, seq: 1 }
        ]),
        Problem::NotPaused { seq: 1 }
    );
    let wait = Record::Wait {
        run: RUN,
        seq: 1,
        name: "w",
        deadline_ms: 0,
    };
    assert_eq!(
        problem(&[s.clone(), wait, waited(1, WaitOutcome::Signal(0))]),
        Problem::UnknownSignal { seq: 1, ordinal: 0 }
    );
    let done: RecordRef<'_> = Record::UpdateDone {
        run: RUN,
        ordinal: 0,
        status: Status::Ok,
        payload: b"",
    };
    assert_eq!(
        problem(&[s.clone(), done.clone()]),
        Problem::UnknownUpdate { ordinal: 0 }
    );
    assert_eq!(
        problem(&[s.clone(), update("u", "h"), done.clone(), done]),
        Problem::UnknownUpdate { ordinal: 0 }
    );
}

#[test]
fn undecodable_bytes_are_errors_with_their_place() {
    let mut bytes = encode(&[start(None), fired(1)]);
    let len = bytes.len();
    bytes.truncate(len - 1);
    let e = RunMachine::build(RUN, &bytes, 1).expect_err("torn");
    assert!(matches!(e.problem, Problem::Decode(_)));
    assert!(matches!(e.at, Position::Journal { index: 1, .. }));
    assert!(e.to_string().starts_with("run 7, journal record 1"), "{e}");
    // A failed build leaves no run.
    let mut m = RunMachine::build(RUN, &encode(&[start(None)]), 1).expect("builds");
    assert!(m.rebuild(RUN, &bytes, 1).is_err());
    assert_eq!(m.run(), 0);
    assert_eq!(m.sleep("x"), Err(OpError::NoRun));
}

#[test]
fn appended_records_are_checked() {
    let mut d = Driver::live();
    let timer = Record::Timer {
        run: RUN,
        seq: 1,
        name: "t",
        fire_at_ms: 1,
    };
    let refused = |d: &mut Driver, lsn, rec: &RecordRef<'_>| {
        d.m.handle_record(lsn, rec).expect_err("refused").problem
    };
    // A command nobody asked for.
    assert_eq!(
        refused(&mut d, 2, &timer),
        Problem::NotAsked { kind: "Timer" }
    );
    assert_eq!(d.m.sleep("t"), Ok(Issued::Append(1)));
    // Its completion before the command itself.
    assert!(matches!(
        refused(&mut d, 2, &fired(1)),
        Problem::NotStarted { seq: 1, .. }
    ));
    d.append(timer.clone());
    assert!(matches!(
        refused(&mut d, 2, &fired(1)),
        Problem::LsnOrder {
            lsn: 2,
            gate_lsn: 2
        }
    ));
    // Asked records in the order asked.
    assert_eq!(d.m.value(value_kind::NOW), Ok(ValueAnswer::Append(2)));
    assert_eq!(d.m.sleep("u"), Ok(Issued::Append(3)));
    let later = Record::Timer {
        run: RUN,
        seq: 3,
        name: "u",
        fire_at_ms: 1,
    };
    assert_eq!(
        refused(&mut d, 3, &later),
        Problem::NotAsked { kind: "Timer" }
    );
}

// ---------------------------------------------------------------------
// Determinism: each departure, with its operation number.

/// A journal from a live run of `script`.
fn journal_of(script: impl Fn(&mut Driver)) -> (Vec<u8>, Lsn) {
    let mut d = Driver::live();
    script(&mut d);
    (d.journal, d.lsn)
}

fn replayed(journal: &(Vec<u8>, Lsn)) -> RunMachine {
    RunMachine::build(RUN, &journal.0, journal.1).expect("builds")
}

fn departure(e: OpError) -> DeterminismError {
    match e {
        OpError::Determinism(d) => *d,
        other => panic!("not a determinism error: {other}"),
    }
}

/// Two sleeps, each fired before the next.
fn two_sleeps(d: &mut Driver) {
    for name in ["a", "b"] {
        let seq = d.sleep(name);
        d.env(fired(seq));
        d.deliver();
    }
}

#[test]
fn another_kind_at_a_sequence_number() {
    let j = journal_of(|d| {
        d.value(value_kind::NOW, b"1");
        let seq = d.step("charge").seq;
        d.append(step_result(seq, "charge", 1, b""));
    });
    let mut m = replayed(&j);
    assert!(matches!(
        m.value(value_kind::NOW),
        Ok(ValueAnswer::Recorded { .. })
    ));
    let e = departure(m.sleep("wait-1").expect_err("departs"));
    assert_eq!((e.seq, e.mismatch()), (2, Mismatch::OtherKind));
    assert_eq!(
        e.to_string(),
        "run 7, operation 2: the journal holds step \"charge\" but the code called sleep \"wait-1\"; \
         workflow code must make the same calls in the same order on every run \
         (use ctx.patched to change it)"
    );
    assert_eq!(m.next_seq(), 2, "a refused call takes no number");
    // A step in flight (begun, no result) before recorded operations.
    let j = journal_of(|d| {
        d.step("a");
        d.sleep("b");
    });
    let e = departure(replayed(&j).wait("w").expect_err("departs"));
    assert_eq!((e.seq, e.mismatch()), (1, Mismatch::OtherKind));
    assert_eq!(e.journal, Held::Call(Call::Step { name: "a".into() }));
    // A journal written before `Began` existed: a number with no record
    // before recorded ones is a step in flight.
    let timer = Record::Timer {
        run: RUN,
        seq: 2,
        name: "b",
        fire_at_ms: 100,
    };
    let old = (encode(&[start(None), timer]), 2);
    let e = departure(replayed(&old).wait("w").expect_err("departs"));
    assert_eq!((e.seq, e.mismatch()), (1, Mismatch::OtherKind));
    assert_eq!(e.journal, Held::UnrecordedStep);
}

#[test]
fn another_name_at_a_sequence_number() {
    let j = journal_of(|d| {
        let seq = d.step("charge").seq;
        d.append(step_result(seq, "charge", 1, b""));
        d.child("billing", "b-1");
        d.send("order-7", "paid");
        d.value(value_kind::UUID, &[1; 16]);
    });
    let names = |m: &mut RunMachine| m.step("refund").map(|_| ());
    let e = departure(names(&mut replayed(&j)).expect_err("step name"));
    assert_eq!((e.seq, e.mismatch()), (1, Mismatch::OtherName));
    let mut m = replayed(&j);
    m.step("charge").expect("same step");
    let e = departure(m.child("billing", "b-2").expect_err("child ID"));
    assert_eq!((e.seq, e.mismatch()), (2, Mismatch::OtherName));
    m.child("billing", "b-1").expect("same child");
    let e = departure(m.send("order-8", "paid").expect_err("send target"));
    assert_eq!((e.seq, e.mismatch()), (3, Mismatch::OtherName));
    m.send("order-7", "paid").expect("same send");
    let e = departure(m.value(value_kind::NOW).expect_err("value kind"));
    assert_eq!((e.seq, e.mismatch()), (4, Mismatch::OtherName));
}

#[test]
fn an_extra_operation_after_the_recorded_end() {
    let j = journal_of(|d| {
        two_sleeps(d);
        d.finish(Status::Ok);
    });
    let mut d = Driver::replay(&j.0, j.1);
    two_sleeps(&mut d);
    let e = departure(d.m.sleep("c").expect_err("extra"));
    assert_eq!((e.seq, e.mismatch()), (3, Mismatch::Extra));
    assert_eq!(e.journal, Held::End { status: Status::Ok });
    let e = departure(d.m.step("c").expect_err("extra step"));
    assert_eq!((e.seq, e.mismatch()), (3, Mismatch::Extra));
}

#[test]
fn an_extra_operation_before_a_recorded_handler_return() {
    // The handler returns, then the main code sleeps.
    let script = |d: &mut Driver, early: bool| {
        d.env(update("u1", "h"));
        d.deliver();
        if early {
            return;
        }
        d.update_done(0);
        d.sleep("after");
    };
    let j = journal_of(|d| script(d, false));
    let mut d = Driver::replay(&j.0, j.1);
    script(&mut d, true);
    let e = departure(d.m.sleep("after").expect_err("sleeps before the return"));
    assert_eq!((e.seq, e.mismatch()), (1, Mismatch::Extra));
    assert_eq!(e.journal, Held::UpdateDone { ordinal: 0 });
    // Past the journal too: a new command cannot come before it.
    let j = journal_of(|d| {
        d.env(update("u1", "h"));
        d.deliver();
        d.update_done(0);
    });
    let mut d = Driver::replay(&j.0, j.1);
    d.deliver();
    let e = departure(d.m.sleep("new").expect_err("before the return"));
    assert_eq!((e.seq, e.mismatch()), (1, Mismatch::Extra));
}

#[test]
fn a_missing_operation_before_a_delivery() {
    let j = journal_of(two_sleeps);
    let mut d = Driver::replay(&j.0, j.1);
    d.sleep("a");
    d.deliver();
    // Quiescent without sleeping "b", whose Fired is next.
    let e = d.m.poll_delivery().expect_err("missing");
    assert_eq!((e.seq, e.mismatch()), (2, Mismatch::Missing));
    assert_eq!(e.code, Did::Quiescent);
    assert_eq!(e.journal, Held::Call(Call::Sleep { name: "b".into() }));
    // A step whose result is recorded, never called.
    let j = journal_of(|d| {
        let _ = d.step("a");
        d.append(step_result(1, "a", 1, b""));
    });
    let e = replayed(&j).poll_delivery().expect_err("missing");
    assert_eq!((e.seq, e.mismatch()), (1, Mismatch::Missing));
    assert_eq!(e.journal, Held::Call(Call::Step { name: "a".into() }));
}

#[test]
fn a_missing_handler_return_before_a_delivery() {
    let j = journal_of(|d| {
        d.env(update("u1", "h"));
        d.deliver();
        let nap = d.sleep("nap");
        d.update_done(0);
        d.env(fired(nap));
        d.deliver();
    });
    let mut d = Driver::replay(&j.0, j.1);
    d.deliver();
    d.sleep("nap");
    let e = d.m.poll_delivery().expect_err("the handler did not return");
    assert_eq!((e.seq, e.mismatch()), (2, Mismatch::Missing));
    assert_eq!(e.journal, Held::UpdateDone { ordinal: 0 });
}

#[test]
fn returning_a_handler_out_of_turn() {
    // Two updates; the journal has update 1's handler return first.
    let script = |d: &mut Driver, swap: bool| {
        d.env(update("u0", "h"));
        d.env(update("u1", "h"));
        d.deliver();
        d.deliver();
        let (first, second) = if swap { (0, 1) } else { (1, 0) };
        d.update_done(first);
        d.update_done(second);
    };
    let j = journal_of(|d| script(d, false));
    let mut m = replayed(&j);
    m.poll_delivery().expect("u0");
    m.poll_delivery().expect("u1");
    let e = departure(m.update_done(0).expect_err("other handler"));
    assert_eq!((e.seq, e.mismatch()), (1, Mismatch::OtherName));
    assert_eq!(e.journal, Held::UpdateDone { ordinal: 1 });
    // A recorded return before which the handler slept; and one not
    // recorded yet, with the handler's sleep recorded.
    for recorded_return in [true, false] {
        let j = journal_of(|d| {
            d.env(update("u0", "h"));
            d.deliver();
            d.sleep("h");
            if recorded_return {
                d.update_done(0);
            }
        });
        let mut m = replayed(&j);
        m.poll_delivery().expect("u0");
        let e = departure(m.update_done(0).expect_err("skips the sleep"));
        assert_eq!((e.seq, e.mismatch()), (1, Mismatch::Missing));
        assert_eq!(e.journal, Held::Call(Call::Sleep { name: "h".into() }));
    }
}

#[test]
fn finishing_early() {
    // The journal holds a second sleep the code skips.
    let j = journal_of(two_sleeps);
    let mut d = Driver::replay(&j.0, j.1);
    d.sleep("a");
    d.deliver();
    let e = departure(d.m.finish(Status::Ok).expect_err("early"));
    assert_eq!((e.seq, e.mismatch()), (2, Mismatch::Missing));
    assert_eq!(e.code, Did::Finished { status: Status::Ok });
    // A recorded end with another status.
    let j = journal_of(|d| d.finish(Status::Failed));
    let e = departure(replayed(&j).finish(Status::Ok).expect_err("status"));
    assert_eq!((e.seq, e.mismatch()), (1, Mismatch::OtherName));
    // A handler the journal shows returning before the recorded end.
    let j = journal_of(|d| {
        d.env(update("u1", "h"));
        d.deliver();
        d.update_done(0);
        d.finish(Status::Ok);
    });
    let mut d = Driver::replay(&j.0, j.1);
    d.deliver();
    let e = departure(d.m.finish(Status::Ok).expect_err("early"));
    assert_eq!((e.seq, e.mismatch()), (1, Mismatch::Missing));
}

#[test]
fn finishing_with_deliveries_left_is_not_an_error() {
    // select!(sleep a, step b): the sleep wins and the code finishes; the
    // step's result was appended before the crash cut the end.
    let j = journal_of(|d| {
        let a = d.sleep("a");
        d.step("b");
        d.env(fired(a));
        d.env(step_result(2, "b", 1, b""));
        d.deliver();
    });
    let mut d = Driver::replay(&j.0, j.1);
    d.sleep("a");
    d.m.step("b").expect("step");
    d.deliver();
    d.live = true;
    d.finish(Status::Ok);
}

// ---------------------------------------------------------------------
// Memory.

/// A journal of `n` completed steps with `payload`-byte results, run live.
fn steps_journal(n: u32, payload: &'static [u8]) -> (Vec<u8>, Lsn) {
    journal_of(|d| {
        for i in 0..n {
            let s = d.step("step").seq;
            assert_eq!(s, i + 1);
            d.append(Record::Step {
                run: RUN,
                seq: s,
                name: "step",
                attempt: 1,
                status: Status::Ok,
                payload,
                ended_ms: None,
            });
            d.deliver();
        }
    })
}

fn replay_steps(m: &mut RunMachine, n: u32) {
    for _ in 0..n {
        assert_eq!(m.step("step").map(|s| s.run), Ok(StepRun::Recorded));
        assert!(matches!(m.poll_delivery(), Ok(Some(Delivery::Step { .. }))));
    }
    assert_eq!(m.poll_delivery(), Ok(None));
}

#[test]
fn heap_bytes_of_a_run_with_ten_completed_steps() {
    let j = steps_journal(10, b"ok");
    let mut m = replayed(&j);
    let built = m.heap_bytes();
    replay_steps(&mut m, 10);
    let replayed = m.heap_bytes();
    eprintln!("10 completed steps: {built} heap bytes built, {replayed} after replay");
    assert!(built <= 2048, "{built}");
    assert_eq!(replayed, built, "replay allocates nothing more");
    // Rebuilt for another run of the same shape, it allocates nothing.
    m.rebuild(RUN, &j.0, j.1).expect("rebuilds");
    replay_steps(&mut m, 10);
    assert_eq!(m.heap_bytes(), built);
}

#[test]
fn delivered_bytes_are_dropped() {
    // A signal nobody waits for keeps the store from simply clearing; the
    // store is compacted instead, so it stays bounded.
    let mut d = Driver::live();
    d.append(signal("never", b"kept"));
    let payload = &[7u8; 1024][..];
    for i in 0..2000 {
        let s = d.step("s").seq;
        d.append(Record::Step {
            run: RUN,
            seq: s,
            name: "s",
            attempt: 1,
            status: Status::Ok,
            payload,
            ended_ms: None,
        });
        let got = d.m.poll_delivery().expect("delivers").expect("one");
        assert!(
            matches!(got, Delivery::Step { payload: p, .. } if p == payload),
            "{i}"
        );
    }
    assert!(d.m.heap_bytes() < 16 * 1024, "{}", d.m.heap_bytes());
}

// ---------------------------------------------------------------------
// A step's start in the journal (`Began`).

#[test]
fn a_step_swapped_while_in_flight_is_a_determinism_error() {
    // Code A called step "A1": its Began is durable, the attempt ran, and
    // a crash cut its result.
    let j = journal_of(|d| {
        d.step("A1");
    });
    // Code B calls "B1" there.
    let e = departure(replayed(&j).step("B1").expect_err("another step"));
    assert_eq!((e.seq, e.mismatch()), (1, Mismatch::OtherName));
    assert_eq!(e.journal, Held::Call(Call::Step { name: "A1".into() }));
    assert_eq!(e.code, Did::Called(Call::Step { name: "B1".into() }));
    assert_eq!(
        e.to_string(),
        "run 7, operation 1: the journal holds step \"A1\" but the code called step \"B1\"; \
         workflow code must make the same calls in the same order on every run \
         (use ctx.patched to change it)"
    );
    // Another kind of operation there.
    let e = departure(replayed(&j).sleep("nap").expect_err("a sleep"));
    assert_eq!((e.seq, e.mismatch()), (1, Mismatch::OtherKind));
    // Finishing without calling it.
    let e = departure(replayed(&j).finish(Status::Ok).expect_err("finish"));
    assert_eq!((e.seq, e.mismatch()), (1, Mismatch::Missing));
    // The same code runs attempt 1 again, its Began appended as it starts
    // (not asked at the call: the journal holds the step).
    let mut m = replayed(&j);
    let s = m.step("A1").expect("same step");
    let first = Attempt {
        attempt: 1,
        at: RetryAt::Now,
    };
    assert_eq!((s.run, s.began), (StepRun::Attempt(first), false));
    m.handle_record(j.1 + 1, &began(1, "A1", 1))
        .expect("the attempt begins again under its number");
    m.handle_record(j.1 + 2, &step_result(1, "A1", 1, b"ok"))
        .expect("its result");
    assert!(matches!(m.poll_delivery(), Ok(Some(Delivery::Step { .. }))));
}

#[test]
fn a_new_steps_began_is_asked_at_its_call_in_call_order() {
    let mut d = Driver::live();
    // join!(step a, sleep b): the Began first, as called.
    let a = d.m.step("a").expect("step");
    assert!(a.began);
    assert_eq!(d.m.sleep("b"), Ok(Issued::Append(2)));
    assert_eq!(d.m.gate_lsn(), None, "the Began's LSN is not known yet");
    let timer = Record::Timer {
        run: RUN,
        seq: 2,
        name: "b",
        fire_at_ms: 1,
    };
    let refused = |d: &mut Driver, rec: &RecordRef<'_>| {
        let lsn = d.lsn + 1;
        d.m.handle_record(lsn, rec).expect_err("refused").problem
    };
    assert_eq!(refused(&mut d, &timer), Problem::NotAsked { kind: "Timer" });
    // No attempt can end before its Began.
    assert!(matches!(
        refused(&mut d, &step_result(1, "a", 1, b"")),
        Problem::NotStarted {
            seq: 1,
            needs: "Began",
            ..
        }
    ));
    // The first attempt's Began names attempt 1.
    assert!(matches!(
        refused(&mut d, &began(1, "a", 2)),
        Problem::AttemptOrder { attempt: 2, .. }
    ));
    d.append(began(1, "a", 1));
    d.append(timer);
    assert_eq!(d.m.gate_lsn(), Some(3), "the gate covers the Began");
    // A retry's Began names the attempt after the failed one.
    d.append(Record::Attempt {
        run: RUN,
        seq: 1,
        name: "a",
        attempt: 1,
        retry_at_ms: 5,
        error: b"",
        ended_ms: None,
    });
    assert!(matches!(
        refused(&mut d, &began(1, "a", 3)),
        Problem::AttemptOrder {
            attempt: 3,
            last: 1,
            ..
        }
    ));
    d.append(began(1, "a", 2));
    d.append(step_result(1, "a", 2, b""));
    // Records of the journal disagree on the step's name.
    let renamed = encode(&[start(None), began(1, "a", 1), step_result(1, "b", 1, b"")]);
    let e = RunMachine::build(RUN, &renamed, 3).expect_err("renamed");
    assert!(matches!(e.problem, Problem::Renamed { seq: 1, .. }), "{e}");
}

#[test]
fn journals_without_began_still_replay() {
    // Written before `Began` existed: a step's first record is its first
    // failed attempt or its result.
    let old = encode(&[
        start(None),
        attempt(1, 1, 500),
        step_result(1, "charge", 2, b"paid"),
        Record::Timer {
            run: RUN,
            seq: 2,
            name: "nap",
            fire_at_ms: 9,
        },
        step_result(3, "ship", 1, b"sent"),
    ]);
    let mut m = RunMachine::build(RUN, &old, 5).expect("builds");
    let s = m.step("charge").expect("step");
    assert_eq!((s.run, s.began), (StepRun::Recorded, false));
    assert!(matches!(m.poll_delivery(), Ok(Some(Delivery::Step { .. }))));
    assert!(matches!(m.sleep("nap"), Ok(Issued::Recorded(2))));
    let s = m.step("ship").expect("step");
    assert_eq!(s.run, StepRun::Recorded);
    assert!(matches!(
        m.poll_delivery(),
        Ok(Some(Delivery::Step { seq: 3, .. }))
    ));
    // A step of an old journal with no record while a later one has (its
    // result not in yet) runs, its Began appended as the attempt starts.
    let old = encode(&[
        start(None),
        Record::Timer {
            run: RUN,
            seq: 2,
            name: "nap",
            fire_at_ms: 9,
        },
    ]);
    let mut m = RunMachine::build(RUN, &old, 2).expect("builds");
    let s = m.step("charge").expect("step");
    assert!(matches!(s.run, StepRun::Attempt(_)));
    assert!(
        !s.began,
        "its number is behind the journal's: not in call order"
    );
    m.handle_record(3, &began(1, "charge", 1))
        .expect("begun as it starts");
    assert!(matches!(m.sleep("nap"), Ok(Issued::Recorded(2))));
}
