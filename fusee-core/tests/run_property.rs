//! Property test of `RunMachine`: random workflow programs run live against
//! a random environment, crashed at a random record, rebuilt from the
//! journal prefix and run again.
//!
//! A program is a main task and update handlers, each a list of
//! instructions: one operation awaited, several awaited together (`join!`),
//! a wait racing a sleep (`select!`, the loser dropped), values, sends,
//! patch markers, and branches on a fresh random value. A tiny interpreter
//! plays the workflow code: deterministic given what the machine hands it.
//! The environment plays the world and the shard: it completes steps (some
//! attempts fail, some pause and are resumed), fires timers, delivers
//! signals before and after waits, times waits out, finishes children,
//! sends updates and cancels, in a random order, while the code is
//! quiescent.
//!
//! Checked for every program:
//! - after the crash, what the code sees from records of the prefix is
//!   exactly what the uncrashed run saw from them, in the same order;
//! - the crashed run continues without a determinism error, and its whole
//!   journal (prefix plus what it appended) and the uncrashed one each
//!   replay with a fresh machine asking for no record and showing the code
//!   exactly what it saw; their operation numbers are exactly 1..=n, each
//!   command's once (no number repeated or skipped).
//!
//! A second test feeds random and mutated journals to the builder (and
//! random calls to what it builds): never a panic.
//!
//! Environment:
//! - `FUSEE_RUN_PROGRAMS`: programs (default 2,000).
//! - `FUSEE_FUZZ_ITERS`: fuzz inputs (default 20,000).
//! - `FUSEE_SEED`: the first program's seed (program `i` uses seed + i);
//!   a failure prints the command that replays it.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};

use common::{env_or, seed};
use fusee_core::record::{
    Name, PAUSED, Payload, Record, RecordBuf, RunId, Seq, StartUpdate, Status, WaitOutcome,
    decode_canonical_all, encode_canonical, value_kind,
};
use fusee_core::run::{
    Abandon, Answer, Delivery, Issued, Patched, RetryAt, RunMachine, StepRun, ValueAnswer,
};

const RUN: RunId = 3;
const SIGNALS: [&str; 3] = ["paid", "shipped", "poke"];
/// Environment steps a run may take before the test calls it stuck.
const MAX_TURNS: usize = 20_000;

// ---------------------------------------------------------------------
// Programs.

#[derive(Clone, Debug)]
enum Op {
    Step(String),
    Sleep(String),
    Wait { signal: &'static str, timeout: bool },
    Child(String),
}

#[derive(Clone, Debug)]
enum Instr {
    /// Call every operation, await them all (one: a plain call).
    Await(Vec<Op>),
    /// `select!(wait for signal, sleep)`: await the first, drop the other.
    Race {
        signal: &'static str,
        timer: String,
    },
    Value(u8),
    Send(String),
    Patch(String),
    /// Branch on a fresh random value.
    Branch(Vec<Instr>, Vec<Instr>),
}

#[derive(Debug)]
struct Program {
    main: Vec<Instr>,
    handlers: Vec<Vec<Instr>>,
    start_update: bool,
}

fn gen_op(rng: &mut fastrand::Rng) -> Op {
    match rng.u8(0..4) {
        0 => Op::Step(format!("s{}", rng.u8(0..4))),
        1 => Op::Sleep(format!("t{}", rng.u8(0..4))),
        2 => Op::Wait {
            signal: SIGNALS[rng.usize(0..SIGNALS.len())],
            timeout: rng.bool(),
        },
        _ => Op::Child(format!("c{}", rng.u8(0..4))),
    }
}

fn gen_instrs(rng: &mut fastrand::Rng, len: std::ops::Range<usize>, depth: u8) -> Vec<Instr> {
    (0..rng.usize(len))
        .map(|_| match rng.u8(0..10) {
            0..=3 => Instr::Await(vec![gen_op(rng)]),
            4 | 5 => Instr::Await((0..rng.usize(2..=4)).map(|_| gen_op(rng)).collect()),
            6 => Instr::Race {
                signal: SIGNALS[rng.usize(0..SIGNALS.len())],
                timer: format!("r{}", rng.u8(0..4)),
            },
            7 => match rng.u8(0..3) {
                0 => Instr::Value(rng.u8(0..4)),
                1 => Instr::Send(format!("w{}", rng.u8(0..4))),
                _ => Instr::Patch(format!("p{}", rng.u8(0..4))),
            },
            8 if depth > 0 => {
                let a = gen_instrs(rng, 0..3, depth - 1);
                Instr::Branch(a, gen_instrs(rng, 0..3, depth - 1))
            }
            _ => Instr::Await(vec![Op::Step(format!("s{}", rng.u8(0..4)))]),
        })
        .collect()
}

fn gen_program(rng: &mut fastrand::Rng) -> Program {
    let handlers = (0..rng.usize(0..3))
        .map(|_| gen_instrs(rng, 0..3, 0))
        .collect::<Vec<_>>();
    Program {
        main: gen_instrs(rng, 1..8, 1),
        start_update: !handlers.is_empty() && rng.u8(0..4) == 0,
        handlers,
    }
}

// ---------------------------------------------------------------------
// What the code saw, and where its record is.

/// A delivery, owned.
#[derive(Clone, Debug)]
enum Got {
    Op(Seq),
    Update { ordinal: u64, name: String },
    Cancel,
}

/// Which record a delivery or value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Step(Seq),
    Fired(Seq),
    Waited(Seq),
    ChildDone(Seq),
    Value(Seq),
    Patch(Seq),
    Cancel(u32),
    Update(u64),
}

#[derive(Debug, Default)]
struct Stats {
    programs: u64,
    records: u64,
    deliveries: u64,
    attempts: u64,
    pauses: u64,
    abandons: u64,
    updates: u64,
    signals: u64,
    timeouts: u64,
    /// Crash prefixes that cut the run before its end.
    cut: u64,
    /// Records appended while the rebuilt machine was still replaying.
    live_in_replay: u64,
}

// ---------------------------------------------------------------------
// The environment: what is outstanding, derived from the journal (and,
// for steps, from the machine's answers and their `Began` records).

#[derive(Debug)]
struct StepEnv {
    name: Name,
    attempt: u32,
    paused: bool,
    /// The attempt's `Began` is appended: it may end.
    began: bool,
}

#[derive(Debug, Default)]
struct Env {
    steps: BTreeMap<Seq, StepEnv>,
    timers: BTreeSet<Seq>,
    waits: BTreeMap<Seq, (Name, bool)>,
    /// Buffered signals: (ordinal, name).
    signals: Vec<(u64, Name)>,
    signal_count: u64,
    children: BTreeSet<Seq>,
    updates: u64,
    cancels: u32,
    done: bool,
}

impl Env {
    fn observe(&mut self, rec: &RecordBuf) {
        match rec {
            Record::Start { update, .. } => self.updates = u64::from(update.is_some()),
            Record::Timer { seq, .. } => {
                self.timers.insert(*seq);
            }
            Record::Fired { seq, .. } => {
                self.timers.remove(seq);
            }
            Record::Wait {
                seq,
                name,
                deadline_ms,
                ..
            } => {
                self.waits.insert(*seq, (name.clone(), *deadline_ms > 0));
            }
            Record::Waited { seq, outcome, .. } => {
                self.waits.remove(seq);
                if let WaitOutcome::Signal(o) = outcome {
                    self.signals.retain(|(ord, _)| ord != o);
                }
            }
            Record::Signal { name, .. } => {
                self.signals.push((self.signal_count, name.clone()));
                self.signal_count += 1;
            }
            Record::Child { seq, .. } => {
                self.children.insert(*seq);
            }
            Record::ChildDone { seq, .. } => {
                self.children.remove(seq);
            }
            Record::Attempt {
                seq,
                attempt,
                retry_at_ms,
                ..
            } => {
                if let Some(s) = self.steps.get_mut(seq) {
                    s.attempt = attempt + 1;
                    s.paused = *retry_at_ms == PAUSED;
                    s.began = false;
                }
            }
            Record::Resume { seq, .. } => {
                if let Some(s) = self.steps.get_mut(seq) {
                    s.paused = false;
                }
            }
            Record::Step { seq, .. } => {
                self.steps.remove(seq);
            }
            Record::Began { seq, .. } => {
                if let Some(s) = self.steps.get_mut(seq) {
                    s.began = true;
                }
            }
            Record::Update { .. } => self.updates += 1,
            Record::Cancel { .. } => self.cancels += 1,
            Record::Done { .. } => self.done = true,
            _ => {}
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Complete(Seq),
    Resume(Seq),
    Fire(Seq),
    Satisfy(Seq),
    ChildDone(Seq),
    Signal,
    Update,
    Cancel,
}

fn payload(bytes: &[u8]) -> Payload {
    Payload::from(bytes)
}

// ---------------------------------------------------------------------
// The host: the machine, the journal, the environment, what the code saw.

struct Host<'s> {
    m: RunMachine,
    recs: Vec<RecordBuf>,
    env: Env,
    rng: fastrand::Rng,
    seen: Vec<(String, usize)>,
    index: HashMap<Key, usize>,
    /// A replay of a finished journal: any record asked for is a failure,
    /// and the environment never acts.
    replay_only: bool,
    handlers: usize,
    stats: &'s mut Stats,
}

impl<'s> Host<'s> {
    /// A host for the run whose journal so far is `recs`.
    fn new(
        m: &mut RunMachine,
        recs: &[RecordBuf],
        rng: fastrand::Rng,
        handlers: usize,
        replay_only: bool,
        stats: &'s mut Stats,
    ) -> Self {
        let mut bytes = Vec::new();
        for r in recs {
            encode_canonical(r, &mut bytes);
        }
        let mut machine = std::mem::take(m);
        machine
            .rebuild(RUN, &bytes, recs.len() as u64)
            .unwrap_or_else(|e| panic!("the journal builds: {e}"));
        let mut host = Self {
            m: machine,
            recs: Vec::new(),
            env: Env::default(),
            rng,
            seen: Vec::new(),
            index: HashMap::new(),
            replay_only,
            handlers,
            stats,
        };
        for r in recs {
            host.note(r.clone());
        }
        host
    }

    /// Keeps a record that is in the journal (and the machine) now.
    fn note(&mut self, rec: RecordBuf) {
        let i = self.recs.len();
        let key = match &rec {
            Record::Start {
                update: Some(_), ..
            } => Some(Key::Update(0)),
            Record::Step { seq, .. } => Some(Key::Step(*seq)),
            Record::Fired { seq, .. } => Some(Key::Fired(*seq)),
            Record::Waited { seq, outcome, .. } if *outcome != WaitOutcome::Abandoned => {
                Some(Key::Waited(*seq))
            }
            Record::ChildDone { seq, .. } => Some(Key::ChildDone(*seq)),
            Record::Value { seq, .. } => Some(Key::Value(*seq)),
            Record::Patch { seq, .. } => Some(Key::Patch(*seq)),
            Record::Cancel { .. } => Some(Key::Cancel(self.env.cancels)),
            Record::Update { .. } => Some(Key::Update(self.env.updates)),
            _ => None,
        };
        if let Some(k) = key {
            assert!(self.index.insert(k, i).is_none(), "{k:?} twice");
        }
        self.env.observe(&rec);
        self.recs.push(rec);
    }

    fn append(&mut self, rec: RecordBuf) {
        assert!(!self.replay_only, "a full replay appended {rec:?}");
        let lsn = self.recs.len() as u64 + 1;
        if self.m.is_replaying() {
            self.stats.live_in_replay += 1;
        }
        self.m
            .handle_record(lsn, &rec)
            .unwrap_or_else(|e| panic!("record refused: {e}"));
        self.note(rec);
    }

    fn saw(&mut self, what: String, key: Key) {
        let i = *self
            .index
            .get(&key)
            .unwrap_or_else(|| panic!("no record for {key:?}"));
        self.seen.push((what, i));
    }

    /// Appends a command the machine asked for (checks a full replay asks
    /// for none).
    fn command(&mut self, issued: Issued, rec: impl FnOnce(Seq) -> RecordBuf) -> Seq {
        match issued {
            Issued::Append(seq) => {
                self.append(rec(seq));
                seq
            }
            Issued::Recorded(seq) => seq,
        }
    }

    fn answered(&mut self, a: Answer, rec: RecordBuf) {
        if a == Answer::Append {
            self.append(rec);
        }
    }

    // The code's operations.

    fn step(&mut self, name: &str) -> Seq {
        let s = self.m.step(name).unwrap_or_else(|e| panic!("{e}"));
        match s.run {
            StepRun::Recorded => {}
            StepRun::Attempt(a) => {
                assert!(!self.replay_only, "a full replay runs step {}", s.seq);
                let paused = a.at == RetryAt::Paused;
                let step = StepEnv {
                    name: Name::from(name),
                    attempt: a.attempt,
                    paused,
                    began: false,
                };
                self.env.steps.insert(s.seq, step);
                // A new step's first Began, asked at the call.
                if s.began {
                    self.append(Record::Began {
                        run: RUN,
                        seq: s.seq,
                        name: Name::from(name),
                        attempt: a.attempt,
                        started_ms: 0,
                    });
                }
            }
        }
        s.seq
    }

    fn sleep(&mut self, name: &str) -> Seq {
        let i = self.m.sleep(name).unwrap_or_else(|e| panic!("{e}"));
        self.command(i, |seq| Record::Timer {
            run: RUN,
            seq,
            name: Name::from(name),
            fire_at_ms: 10,
        })
    }

    fn wait(&mut self, signal: &str, timeout: bool) -> Seq {
        let i = self.m.wait(signal).unwrap_or_else(|e| panic!("{e}"));
        self.command(i, |seq| Record::Wait {
            run: RUN,
            seq,
            name: Name::from(signal),
            deadline_ms: u64::from(timeout),
        })
    }

    fn child(&mut self, wtype: &str) -> Seq {
        let i = self.m.child(wtype, wtype).unwrap_or_else(|e| panic!("{e}"));
        self.command(i, |seq| Record::Child {
            run: RUN,
            seq,
            wtype: Name::from(wtype),
            id: Name::from(wtype),
            flags: 0,
            deadline_ms: 0,
            input: payload(b""),
        })
    }

    fn send(&mut self, target: &str) {
        let i = self
            .m
            .send(target, "ping")
            .unwrap_or_else(|e| panic!("{e}"));
        self.command(i, |seq| Record::Send {
            run: RUN,
            seq,
            target: Name::from(target),
            name: Name::from("ping"),
            payload: payload(b""),
        });
    }

    fn value(&mut self, kind: u8) -> Vec<u8> {
        let (seq, v) = match self.m.value(kind).unwrap_or_else(|e| panic!("{e}")) {
            ValueAnswer::Recorded { seq, value } => (seq, value.to_vec()),
            ValueAnswer::Append(seq) => {
                let mut v = vec![0u8; self.rng.usize(1..4)];
                self.rng.fill(&mut v);
                self.append(Record::Value {
                    run: RUN,
                    seq,
                    kind,
                    value: payload(&v),
                });
                (seq, v)
            }
        };
        self.saw(format!("value {seq} {v:?}"), Key::Value(seq));
        v
    }

    fn patched(&mut self, id: &str) {
        let seq = match self.m.patched(id).unwrap_or_else(|e| panic!("{e}")) {
            Patched::Recorded(seq) => seq,
            Patched::Append(seq) => {
                self.append(Record::Patch {
                    run: RUN,
                    seq,
                    id: Name::from(id),
                });
                seq
            }
            Patched::Absent => panic!("the same program found no marker for {id}"),
        };
        self.saw(format!("patch {seq}"), Key::Patch(seq));
    }

    fn abandon(&mut self, seq: Seq) {
        if self.m.abandon_wait(seq) == Abandon::Append {
            self.stats.abandons += 1;
            self.append(Record::Waited {
                run: RUN,
                seq,
                outcome: WaitOutcome::Abandoned,
            });
        }
    }

    fn update_done(&mut self, ordinal: u64) {
        let a = self
            .m
            .update_done(ordinal)
            .unwrap_or_else(|e| panic!("{e}"));
        self.answered(
            a,
            Record::UpdateDone {
                run: RUN,
                ordinal,
                status: Status::Ok,
                payload: payload(b"u"),
            },
        );
    }

    fn finish(&mut self) {
        let a = self.m.finish(Status::Ok).unwrap_or_else(|e| panic!("{e}"));
        self.answered(
            a,
            Record::Done {
                run: RUN,
                status: Status::Ok,
                finished_ms: 1,
                payload: payload(b"out"),
                by: None,
            },
        );
    }

    /// The code is quiescent: the next delivery, noted as seen.
    fn poll(&mut self) -> Option<Got> {
        let d = self.m.poll_delivery().unwrap_or_else(|e| panic!("{e}"))?;
        let what = format!("{d:?}");
        let (got, key) = match d {
            Delivery::Step { seq, .. } => (Got::Op(seq), Key::Step(seq)),
            Delivery::Fired { seq } => (Got::Op(seq), Key::Fired(seq)),
            Delivery::Waited { seq, .. } => (Got::Op(seq), Key::Waited(seq)),
            Delivery::Child { seq, .. } => (Got::Op(seq), Key::ChildDone(seq)),
            Delivery::Cancel { .. } => {
                let n = self
                    .seen
                    .iter()
                    .filter(|(w, _)| w.starts_with("Cancel"))
                    .count();
                (Got::Cancel, Key::Cancel(n as u32))
            }
            Delivery::Update { ordinal, name, .. } => {
                let name = name.to_owned();
                (Got::Update { ordinal, name }, Key::Update(ordinal))
            }
        };
        self.stats.deliveries += 1;
        self.saw(what, key);
        Some(got)
    }

    // The environment.

    fn actions(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        for (&seq, s) in &self.env.steps {
            out.push(if s.paused {
                Action::Resume(seq)
            } else {
                Action::Complete(seq)
            });
        }
        out.extend(self.env.timers.iter().map(|&s| Action::Fire(s)));
        out.extend(self.env.waits.keys().map(|&s| Action::Satisfy(s)));
        out.extend(self.env.children.iter().map(|&s| Action::ChildDone(s)));
        if self.env.signal_count < 4 {
            out.push(Action::Signal);
        }
        if self.handlers > 0 && self.env.updates < 3 {
            out.push(Action::Update);
        }
        if self.env.cancels == 0 && self.rng.u8(0..20) == 0 {
            out.push(Action::Cancel);
        }
        out
    }

    /// One thing happens in the world. False if nothing can.
    fn act(&mut self) -> bool {
        if self.replay_only || self.env.done {
            return false;
        }
        let actions = self.actions();
        if actions.is_empty() {
            return false;
        }
        let action = actions[self.rng.usize(0..actions.len())];
        let rec = match action {
            Action::Complete(seq) => {
                let s = &self.env.steps[&seq];
                let (name, attempt) = (s.name.clone(), s.attempt);
                if !s.began {
                    // A retry, or an attempt cut by a crash run again:
                    // its Began as it starts.
                    Record::Began {
                        run: RUN,
                        seq,
                        name,
                        attempt,
                        started_ms: 0,
                    }
                } else if attempt < 3 && self.rng.u8(0..10) < 3 {
                    self.stats.attempts += 1;
                    let paused = self.rng.u8(0..4) == 0;
                    self.stats.pauses += u64::from(paused);
                    Record::Attempt {
                        run: RUN,
                        seq,
                        name,
                        attempt,
                        retry_at_ms: if paused { PAUSED } else { 1000 },
                        error: payload(b"err"),
                        ended_ms: None,
                    }
                } else {
                    let mut v = vec![0u8; self.rng.usize(0..6)];
                    self.rng.fill(&mut v);
                    let ok = self.rng.u8(0..5) > 0;
                    Record::Step {
                        run: RUN,
                        seq,
                        name,
                        attempt,
                        status: if ok { Status::Ok } else { Status::Failed },
                        payload: payload(&v),
                        ended_ms: None,
                    }
                }
            }
            Action::Resume(seq) => Record::Resume { run: RUN, seq },
            Action::Fire(seq) => Record::Fired { run: RUN, seq },
            Action::Satisfy(seq) => {
                let (name, timeout) = self.env.waits[&seq].clone();
                let buffered = self.env.signals.iter().find(|(_, n)| *n == name);
                match buffered {
                    Some(&(o, _)) if !timeout || self.rng.bool() => {
                        self.stats.signals += 1;
                        Record::Waited {
                            run: RUN,
                            seq,
                            outcome: WaitOutcome::Signal(o),
                        }
                    }
                    _ if timeout => {
                        self.stats.timeouts += 1;
                        Record::Waited {
                            run: RUN,
                            seq,
                            outcome: WaitOutcome::TimedOut,
                        }
                    }
                    // A late signal: the next turn may hand it over.
                    _ => self.signal(name),
                }
            }
            Action::ChildDone(seq) => Record::ChildDone {
                run: RUN,
                seq,
                status: Status::Ok,
                payload: payload(&[seq as u8]),
            },
            // An early signal, maybe for no wait at all.
            Action::Signal => {
                let name = Name::from(SIGNALS[self.rng.usize(0..SIGNALS.len())]);
                self.signal(name)
            }
            Action::Update => {
                self.stats.updates += 1;
                let h = self.rng.usize(0..self.handlers);
                Record::Update {
                    run: RUN,
                    id: Name::from(format!("u{}", self.env.updates).as_str()),
                    name: Name::from(format!("h{h}").as_str()),
                    payload: payload(b"arg"),
                    caller: None,
                }
            }
            Action::Cancel => Record::Cancel {
                run: RUN,
                reason: payload(b"asked"),
                by: None,
                grace: None,
            },
        };
        self.append(rec);
        true
    }

    fn signal(&mut self, name: Name) -> RecordBuf {
        Record::Signal {
            run: RUN,
            name,
            dedup: 0,
            payload: payload(&[self.env.signal_count as u8]),
            by: None,
        }
    }
}

// ---------------------------------------------------------------------
// The workflow code: an interpreter of a program.

#[derive(Debug)]
enum Waiting {
    Ready,
    All(Vec<Seq>),
    Race {
        wait: Seq,
        sleep: Seq,
    },
    /// The main task is at its end and waits for running handlers.
    Handlers,
}

struct Task<'p> {
    frames: Vec<(&'p [Instr], usize)>,
    waiting: Waiting,
    /// The update a handler serves.
    update: Option<u64>,
    done: bool,
}

struct Code<'p> {
    prog: &'p Program,
    tasks: Vec<Task<'p>>,
    finished: bool,
}

impl<'p> Code<'p> {
    fn new(prog: &'p Program) -> Self {
        let main = Task {
            frames: vec![(&prog.main[..], 0)],
            waiting: Waiting::Ready,
            update: None,
            done: false,
        };
        Self {
            prog,
            tasks: vec![main],
            finished: false,
        }
    }

    /// Runs every task that can go on until none can: quiescence.
    fn settle(&mut self, host: &mut Host<'_>) {
        while !self.finished && (0..self.tasks.len()).any(|t| self.advance(t, host)) {}
    }

    /// Runs task `t` until it blocks or ends; whether it moved.
    fn advance(&mut self, t: usize, host: &mut Host<'_>) -> bool {
        let handlers_running = self.tasks.iter().any(|t| t.update.is_some() && !t.done);
        let task = &mut self.tasks[t];
        match task.waiting {
            _ if task.done || self.finished => return false,
            Waiting::Handlers if handlers_running => return false,
            Waiting::Handlers => {
                host.finish();
                self.finished = true;
                return true;
            }
            Waiting::Ready => {}
            _ => return false,
        }
        loop {
            let Some((list, i)) = task.frames.last_mut() else {
                match task.update {
                    Some(ordinal) => {
                        host.update_done(ordinal);
                        task.done = true;
                    }
                    None => task.waiting = Waiting::Handlers,
                }
                return true;
            };
            let Some(instr) = list.get(*i) else {
                task.frames.pop();
                continue;
            };
            *i += 1;
            match instr {
                Instr::Await(ops) => {
                    let seqs = ops
                        .iter()
                        .map(|op| match op {
                            Op::Step(n) => host.step(n),
                            Op::Sleep(n) => host.sleep(n),
                            Op::Wait { signal, timeout } => host.wait(signal, *timeout),
                            Op::Child(n) => host.child(n),
                        })
                        .collect();
                    task.waiting = Waiting::All(seqs);
                    return true;
                }
                Instr::Race { signal, timer } => {
                    let wait = host.wait(signal, false);
                    let sleep = host.sleep(timer);
                    task.waiting = Waiting::Race { wait, sleep };
                    return true;
                }
                Instr::Value(kind) => {
                    host.value(*kind);
                }
                Instr::Send(target) => host.send(target),
                Instr::Patch(id) => host.patched(id),
                Instr::Branch(a, b) => {
                    let v = host.value(value_kind::RANDOM);
                    let list = if v.first().is_some_and(|b| b % 2 == 0) {
                        a
                    } else {
                        b
                    };
                    task.frames.push((&list[..], 0));
                }
            }
        }
    }

    fn deliver(&mut self, got: Got, host: &mut Host<'_>) {
        match got {
            Got::Op(seq) => {
                for task in &mut self.tasks {
                    match &mut task.waiting {
                        Waiting::All(seqs) if seqs.contains(&seq) => {
                            seqs.retain(|s| *s != seq);
                            if seqs.is_empty() {
                                task.waiting = Waiting::Ready;
                            }
                        }
                        Waiting::Race { wait, sleep } if seq == *wait || seq == *sleep => {
                            // The sleep won: the wait is dropped.
                            if seq == *sleep {
                                host.abandon(*wait);
                            }
                            task.waiting = Waiting::Ready;
                        }
                        _ => continue,
                    }
                    break;
                }
            }
            Got::Update { ordinal, name } => {
                let h: usize = name.trim_start_matches('h').parse().expect("handler name");
                self.tasks.push(Task {
                    frames: vec![(&self.prog.handlers[h][..], 0)],
                    waiting: Waiting::Ready,
                    update: Some(ordinal),
                    done: false,
                });
            }
            Got::Cancel => {}
        }
    }
}

/// Runs the program's code against `host` until it finishes.
fn drive(prog: &Program, host: &mut Host<'_>) {
    let mut code = Code::new(prog);
    code.settle(host);
    for _ in 0..MAX_TURNS {
        if code.finished {
            return;
        }
        // The world moves while the code is quiescent.
        if host.rng.u8(0..3) == 0 {
            host.act();
        }
        match host.poll() {
            Some(got) => {
                code.deliver(got, host);
                code.settle(host);
            }
            None => assert!(host.act(), "stuck: nothing to deliver and nothing to do"),
        }
    }
    panic!("the run did not finish in {MAX_TURNS} turns");
}

// ---------------------------------------------------------------------
// One program.

struct Outcome {
    recs: Vec<RecordBuf>,
    seen: Vec<(String, usize)>,
    next_seq: Seq,
}

fn run(
    prog: &Program,
    m: &mut RunMachine,
    recs: &[RecordBuf],
    rng: fastrand::Rng,
    replay_only: bool,
    stats: &mut Stats,
) -> Outcome {
    let mut host = Host::new(m, recs, rng, prog.handlers.len(), replay_only, stats);
    drive(prog, &mut host);
    assert_eq!(host.m.unappended(), 0);
    let next_seq = host.m.next_seq();
    *m = std::mem::take(&mut host.m);
    Outcome {
        recs: host.recs,
        seen: host.seen,
        next_seq,
    }
}

fn start(prog: &Program) -> RecordBuf {
    Record::Start {
        run: RUN,
        id: Name::from("wf"),
        wtype: Name::from("prog"),
        version: 1,
        codec: 0,
        started_ms: 0,
        deadline_ms: 0,
        parent: None,
        policy: 0,
        from: None,
        copies: 0,
        update: prog.start_update.then(|| {
            Box::new(StartUpdate {
                id: Name::from("u0"),
                name: Name::from("h0"),
                payload: payload(b"arg"),
            })
        }),
        input: payload(b""),
        meta: None,
    }
}

/// A finished journal replays with a fresh machine asking for nothing and
/// showing the code what `seen` holds; its operation numbers are exactly
/// 1..next_seq, each command's once.
fn check_full_replay(prog: &Program, out: &Outcome, m: &mut RunMachine, stats: &mut Stats) {
    let again = run(prog, m, &out.recs, fastrand::Rng::with_seed(0), true, stats);
    assert_eq!(
        again.seen, out.seen,
        "a full replay shows the code the same"
    );
    assert_eq!(again.next_seq, out.next_seq);
    let mut named = BTreeSet::new();
    for r in &out.recs {
        let seq = match r {
            Record::Step { seq, .. }
            | Record::Began { seq, .. }
            | Record::Attempt { seq, .. }
            | Record::Timer { seq, .. }
            | Record::Wait { seq, .. }
            | Record::Child { seq, .. }
            | Record::Send { seq, .. }
            | Record::Value { seq, .. }
            | Record::Patch { seq, .. } => *seq,
            _ => continue,
        };
        let command = !matches!(
            r,
            Record::Step { .. } | Record::Began { .. } | Record::Attempt { .. }
        );
        assert!(
            named.insert(seq) || !command,
            "operation {seq} recorded twice"
        );
    }
    let all: BTreeSet<Seq> = (1..out.next_seq).collect();
    assert_eq!(named, all, "operation numbers repeated or skipped");
}

fn one_program(seed: u64, m: &mut RunMachine, stats: &mut Stats) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let prog = gen_program(&mut rng);
    let env_seed = rng.u64(..);
    let whole = run(
        &prog,
        m,
        &[start(&prog)],
        fastrand::Rng::with_seed(env_seed),
        false,
        stats,
    );
    check_full_replay(&prog, &whole, m, stats);

    // Crash: keep a prefix of the journal, at least its Start.
    let cut = rng.usize(1..=whole.recs.len());
    stats.cut += u64::from(cut < whole.recs.len());
    let crashed = run(
        &prog,
        m,
        &whole.recs[..cut],
        fastrand::Rng::with_seed(rng.u64(..)),
        false,
        stats,
    );
    assert_eq!(&crashed.recs[..cut], &whole.recs[..cut]);
    // Both runs show the code the same until the first thing it sees from
    // past the cut (after a fresh value its path may differ), and that is
    // at the same point in both.
    let live_at = |seen: &[(String, usize)]| seen.iter().position(|(_, i)| *i >= cut);
    let k = live_at(&crashed.seen).unwrap_or(crashed.seen.len());
    assert_eq!(
        &crashed.seen[..k],
        whole.seen.get(..k).unwrap_or_default(),
        "after the crash at record {cut}, the code saw another history"
    );
    assert_eq!(
        live_at(&crashed.seen),
        live_at(&whole.seen),
        "after the crash at record {cut}, the code went past the journal elsewhere"
    );
    check_full_replay(&prog, &crashed, m, stats);
    stats.programs += 1;
    stats.records += whole.recs.len() as u64;
}

#[test]
fn crashed_runs_replay_and_continue_the_same_journal() {
    let programs: u64 = env_or("FUSEE_RUN_PROGRAMS", 2000);
    let base = seed(0x5eed_0013);
    let mut stats = Stats::default();
    // One machine for every run: rebuilt in place each time.
    let mut m = RunMachine::new();
    for i in 0..programs {
        let seed = base.wrapping_add(i);
        let result = catch_unwind(AssertUnwindSafe(|| one_program(seed, &mut m, &mut stats)));
        if result.is_err() {
            panic!("program {i} failed; replay it with FUSEE_SEED={seed} FUSEE_RUN_PROGRAMS=1");
        }
    }
    eprintln!("{stats:?}");
    if programs >= 500 {
        // Every feature was exercised.
        for (what, n) in [
            ("attempts", stats.attempts),
            ("pauses", stats.pauses),
            ("abandons", stats.abandons),
            ("updates", stats.updates),
            ("signals", stats.signals),
            ("timeouts", stats.timeouts),
            ("cut runs", stats.cut),
            ("live records during replay", stats.live_in_replay),
        ] {
            assert!(n > 0, "no {what}");
        }
    }
}

// ---------------------------------------------------------------------
// Fuzz smoke: malformed journals never make the machine panic.

/// A random change to a journal: bytes flipped, cut, spliced, or records
/// dropped, repeated, swapped or renumbered (still decodable).
fn mutate(rng: &mut fastrand::Rng, pool: &[Vec<RecordBuf>]) -> Vec<u8> {
    let mut recs = pool[rng.usize(0..pool.len())].clone();
    let mut bytes = Vec::new();
    match rng.u8(0..8) {
        0 if recs.len() > 1 => {
            recs.remove(rng.usize(1..recs.len()));
        }
        1 => {
            let r = recs[rng.usize(0..recs.len())].clone();
            recs.insert(rng.usize(0..=recs.len()), r);
        }
        2 if recs.len() > 2 => {
            let (a, b) = (rng.usize(1..recs.len()), rng.usize(1..recs.len()));
            recs.swap(a, b);
        }
        3 => {
            let i = rng.usize(0..recs.len());
            if let Some(s) = seq_mut(&mut recs[i]) {
                *s = match rng.u8(0..3) {
                    0 => 0,
                    1 => u32::MAX,
                    _ => rng.u32(0..40),
                };
            }
        }
        4 => {
            let other = &pool[rng.usize(0..pool.len())];
            recs.extend(other.iter().skip(1).cloned());
        }
        _ => {}
    }
    for r in &recs {
        encode_canonical(r, &mut bytes);
    }
    match rng.u8(0..4) {
        0 if !bytes.is_empty() => {
            for _ in 0..rng.usize(1..4) {
                let i = rng.usize(0..bytes.len());
                bytes[i] ^= 1 << rng.u8(0..8);
            }
        }
        1 => bytes.truncate(rng.usize(0..=bytes.len())),
        _ => {}
    }
    bytes
}

fn seq_mut(rec: &mut RecordBuf) -> Option<&mut Seq> {
    match rec {
        Record::Step { seq, .. }
        | Record::Began { seq, .. }
        | Record::Attempt { seq, .. }
        | Record::Resume { seq, .. }
        | Record::Timer { seq, .. }
        | Record::Fired { seq, .. }
        | Record::Wait { seq, .. }
        | Record::Waited { seq, .. }
        | Record::Value { seq, .. }
        | Record::Child { seq, .. }
        | Record::ChildDone { seq, .. }
        | Record::Send { seq, .. }
        | Record::Patch { seq, .. } => Some(seq),
        _ => None,
    }
}

/// Random calls, as confused code would make them.
fn poke(rng: &mut fastrand::Rng, m: &mut RunMachine) {
    for _ in 0..rng.usize(0..24) {
        let name = ["s0", "t1", "paid", "c2", ""][rng.usize(0..5)];
        let _ = match rng.u8(0..10) {
            0 => m.step(name).map(|_| ()),
            1 => m.sleep(name).map(|_| ()),
            2 => m.wait(name).map(|_| ()),
            3 => m.child(name, name).map(|_| ()),
            4 => m.value(rng.u8(0..5)).map(|_| ()),
            5 => m.patched(name).map(|_| ()),
            6 => m.update_done(rng.u64(0..3)).map(|_| ()),
            7 => {
                m.abandon_wait(rng.u32(0..8));
                Ok(())
            }
            8 => m.finish(Status::Ok).map(|_| ()),
            _ => {
                let _ = m.poll_delivery();
                let _ = m.current_delivery();
                Ok(())
            }
        };
        let _ = (
            m.gate_lsn(),
            m.is_replaying(),
            m.step_attempt(rng.u32(0..8)),
        );
    }
}

#[test]
fn malformed_journals_never_panic() {
    let iters: u64 = env_or("FUSEE_FUZZ_ITERS", 20_000);
    let base = seed(0xf022_0013);
    let mut rng = fastrand::Rng::with_seed(base);
    let mut stats = Stats::default();
    let mut m = RunMachine::new();
    let pool: Vec<Vec<RecordBuf>> = (0..64)
        .map(|i| {
            let mut r = fastrand::Rng::with_seed(base ^ i);
            let prog = gen_program(&mut r);
            run(&prog, &mut m, &[start(&prog)], r, false, &mut stats).recs
        })
        .collect();
    let mut built = 0u64;
    for i in 0..iters {
        let input = if rng.u8(0..8) == 0 {
            let mut v = vec![0u8; rng.usize(0..64)];
            rng.fill(&mut v);
            v
        } else {
            mutate(&mut rng, &pool)
        };
        let lsn = rng.u64(0..50);
        let case = catch_unwind(AssertUnwindSafe(|| {
            if m.rebuild(RUN, &input, lsn).is_ok() {
                poke(&mut rng, &mut m);
                // Appended records, valid or not.
                for rec in decode_canonical_all(&input)
                    .unwrap_or_default()
                    .iter()
                    .take(4)
                {
                    let _ = m.handle_record(rng.u64(..), rec);
                }
                poke(&mut rng, &mut m);
                true
            } else {
                false
            }
        }));
        match case {
            Ok(ok) => built += u64::from(ok),
            Err(_) => panic!("input {i} panicked (FUSEE_SEED={base}): {input:02x?}"),
        }
    }
    eprintln!("{iters} inputs, {built} built");
}
