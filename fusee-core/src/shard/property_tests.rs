//! Property tests of the shard: replay equivalence across modes, and the
//! timer model under a simulated clock.
//!
//! Seeds: `FUSEE_SHARD_SEEDS` (default 40) sequences per property;
//! `FUSEE_SEED` reruns one seed. Every failure names its seed.

use std::collections::{BTreeMap, BTreeSet};

use super::tests::start;
use super::*;
use crate::record::{
    CancelGrace, Name, Origin, PAUSED, ParentRef, Payload, Record, RecordBuf, Status, WaitOutcome,
    decode_canonical_all, encode_canonical, origin,
};

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("FUSEE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let n: u64 = std::env::var("FUSEE_SHARD_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    (1..=n).collect()
}

/// Everything a host can observe of a shard, in a comparable form.
#[derive(Debug, PartialEq)]
struct Observed {
    loaded: BTreeMap<RunId, String>,
    journals: BTreeMap<RunId, (Vec<u8>, u32)>,
    parked: BTreeMap<RunId, ParkedRun>,
    outputs: Vec<Output>,
    next_run: RunId,
    found: BTreeMap<String, Option<Found>>,
}

fn observe_run(l: &LoadedRun) -> String {
    let mut armed: Vec<_> = l.armed_timers().collect();
    armed.sort_by_key(|&(s, k, at)| (s, k as u8, at));
    let mut waits: Vec<_> = l.waiting_on().map(|(s, n)| (s, n.to_string())).collect();
    waits.sort();
    let mut awaiting: Vec<_> = l.awaiting().collect();
    awaiting.sort();
    let signals: Vec<_> = l
        .signals
        .iter()
        .flat_map(|q| q.iter())
        .map(|s| (s.ordinal, s.name.clone(), s.payload.clone()))
        .collect();
    let mut dedup: Vec<_> = l
        .rare
        .iter()
        .flat_map(|r| r.dedup.iter().copied())
        .collect();
    dedup.sort();
    // A run rebuilt from its frame applies every record at the frame's
    // LSN, so an update result's LSN is not compared.
    let updates: Vec<_> = l
        .updates()
        .iter()
        .map(|u| {
            (
                u.id.clone(),
                u.name.clone(),
                u.caller,
                u.result.clone().map(|r| (r.0, r.1)),
            )
        })
        .collect();
    let kids: Vec<_> = l
        .rare
        .iter()
        .flat_map(|r| &r.kids)
        .map(|k| (k.seq, k.id.clone(), k.flags))
        .collect();
    format!(
        "id={} wtype={} v={} codec={} parent={:?} started={} deadline={} done={:?} \
         result={:?} policy={} from={:?} updates={:?} awaiting={awaiting:?} attrs={:?} \
         streams={} armed={armed:?} waits={waits:?} signals={signals:?} count={} \
         dedup={dedup:?} children={:?} kids={kids:?} copies_left={}",
        l.id,
        l.wtype,
        l.version,
        l.codec,
        l.parent(),
        l.started_ms,
        l.deadline_ms,
        l.done,
        l.result(),
        l.policy,
        l.from(),
        updates,
        l.attrs(),
        l.streams,
        l.signal_count,
        l.pending_children(),
        l.rare.as_ref().map_or(0, |r| r.copies_left),
    )
}

fn observe(core: &ShardCore, ids: &BTreeSet<String>, outputs: bool) -> Observed {
    Observed {
        loaded: core
            .loaded_runs()
            .map(|(r, l)| (r, observe_run(l)))
            .collect(),
        journals: core
            .loaded_runs()
            .map(|(r, l)| (r, (l.journal.clone(), l.journal_records)))
            .collect(),
        parked: core.parked_runs().collect(),
        outputs: if outputs {
            core.unreleased().cloned().collect()
        } else {
            Vec::new()
        },
        next_run: core.next_run_id(),
        found: ids.iter().map(|id| (id.clone(), core.find(id))).collect(),
    }
}

/// A generator of valid (and a few invalid) record sequences over many
/// runs, keeping just enough of each run's state to make its next record
/// plausible.
struct Workload {
    rng: fastrand::Rng,
    next_run: RunId,
    live: Vec<RunState>,
    ids: BTreeSet<String>,
}

struct RunState {
    run: RunId,
    id: String,
    seq: u32,
    waits: Vec<u32>,
    timers: Vec<u32>,
    children: Vec<u32>,
    signals: u64,
    updates: u64,
}

const NAMES: [&str; 3] = ["go", "stop", "tick"];

impl Workload {
    fn new(seed: u64) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(seed),
            next_run: 1,
            live: Vec::new(),
            ids: BTreeSet::new(),
        }
    }

    fn time(&mut self) -> u64 {
        match self.rng.u8(0..4) {
            0 => self.rng.u64(1..100),
            1 => self.rng.u64(1..HORIZON_MS),
            _ => self.rng.u64(1..20 * HORIZON_MS),
        }
    }

    fn bytes(&mut self) -> Payload {
        let n = self.rng.usize(0..12);
        let v: Vec<u8> = (0..n).map(|_| self.rng.u8(..)).collect();
        Payload::from(v)
    }

    fn new_start(&mut self, from: Option<Origin>, id: Option<String>) -> RecordBuf {
        let run = self.next_run;
        self.next_run += 1;
        let id = id.unwrap_or_else(|| format!("wf{}", self.rng.u8(0..40)));
        self.ids.insert(id.clone());
        let deadline_ms = if self.rng.u8(0..5) == 0 {
            self.time()
        } else {
            0
        };
        let parent = (self.rng.u8(0..4) == 0).then(|| ParentRef {
            shard: self.rng.u32(0..4),
            run: self.rng.u64(1..1000),
            seq: self.rng.u32(0..10),
        });
        let copies = match from {
            Some(o) if o.cause == origin::RESET => self.rng.u32(0..3),
            _ => 0,
        };
        let pol = self.rng.u8(0..32);
        self.live.push(RunState {
            run,
            id: id.clone(),
            seq: 0,
            waits: Vec::new(),
            timers: Vec::new(),
            children: Vec::new(),
            signals: 0,
            updates: 0,
        });
        let update = (self.rng.u8(0..8) == 0).then(|| {
            Box::new(crate::record::StartUpdate {
                id: Name::from("u-start"),
                name: Name::from("set"),
                payload: self.bytes(),
            })
        });
        if update.is_some()
            && let Some(last) = self.live.last_mut()
        {
            last.updates = 1;
        }
        Record::Start {
            run,
            id: Name::from(id),
            wtype: Name::from("wf"),
            version: self.rng.u32(0..3),
            codec: self.rng.u8(0..2),
            started_ms: self.rng.u64(0..1000),
            deadline_ms,
            parent,
            policy: pol,
            from,
            copies,
            update,
            input: self.bytes(),
            meta: None,
        }
    }

    /// The next record, and the index of the live run it is for (`None`
    /// for a new run or a stray record).
    fn next(&mut self) -> (RecordBuf, Option<usize>) {
        if self.live.is_empty() || self.rng.u8(0..12) == 0 {
            return (self.new_start(None, None), None);
        }
        if self.rng.u8(0..60) == 0 {
            // A stray record for a run that does not exist.
            let run = self.next_run + 1000;
            return (
                Record::Signal {
                    run,
                    name: Name::from("go"),
                    dedup: 0,
                    payload: self.bytes(),
                    by: None,
                },
                None,
            );
        }
        let i = self.rng.usize(0..self.live.len());
        let run = self.live[i].run;
        let choice = self.rng.u8(0..26);
        let rec = match choice {
            0 => {
                let seq = self.bump(i);
                Record::Step {
                    run,
                    seq,
                    name: Name::from("step"),
                    attempt: 1,
                    status: Status::ALL[self.rng.usize(0..5)],
                    payload: self.bytes(),
                    ended_ms: self.rng.bool().then(|| self.time()),
                }
            }
            1 => {
                let seq = self.bump(i);
                let retry_at_ms = if self.rng.bool() { PAUSED } else { self.time() };
                Record::Attempt {
                    run,
                    seq,
                    name: Name::from("step"),
                    attempt: 1,
                    retry_at_ms,
                    error: self.bytes(),
                    ended_ms: self.rng.bool().then(|| self.time()),
                }
            }
            2 => Record::Resume {
                run,
                seq: self.live[i].seq.saturating_sub(1),
            },
            3 | 4 => {
                let seq = self.bump(i);
                self.live[i].timers.push(seq);
                Record::Timer {
                    run,
                    seq,
                    name: Name::from("nap"),
                    fire_at_ms: self.time(),
                }
            }
            5 => match self.live[i].timers.pop() {
                Some(seq) => Record::Fired { run, seq },
                None => Record::Fired { run, seq: 999 },
            },
            6..=8 => {
                self.live[i].signals += 1;
                let dedup = if self.rng.bool() { 0 } else { self.rng.u64(..) };
                Record::Signal {
                    run,
                    name: Name::from(NAMES[self.rng.usize(0..3)]),
                    dedup,
                    payload: self.bytes(),
                    by: self.rng.bool().then(|| self.bytes()),
                }
            }
            9 | 10 => {
                let seq = self.bump(i);
                self.live[i].waits.push(seq);
                let deadline_ms = if self.rng.bool() { 0 } else { self.time() };
                Record::Wait {
                    run,
                    seq,
                    name: Name::from(NAMES[self.rng.usize(0..3)]),
                    deadline_ms,
                }
            }
            11 | 12 => {
                let waits = &mut self.live[i].waits;
                let seq = if waits.is_empty() {
                    7777
                } else {
                    waits.swap_remove(self.rng.usize(0..waits.len()))
                };
                let signals = self.live[i].signals;
                let outcome = match self.rng.u8(0..3) {
                    0 if signals > 0 => WaitOutcome::Signal(self.rng.u64(0..signals)),
                    1 => WaitOutcome::Abandoned,
                    _ => WaitOutcome::TimedOut,
                };
                Record::Waited { run, seq, outcome }
            }
            13 => {
                let seq = self.bump(i);
                self.live[i].children.push(seq);
                Record::Child {
                    run,
                    seq,
                    wtype: Name::from("kid"),
                    id: Name::from(format!("kid{}", self.rng.u8(0..9))),
                    flags: self.rng.u8(0..32),
                    deadline_ms: 0,
                    input: self.bytes(),
                }
            }
            14 => {
                let seq = self.live[i].children.pop().unwrap_or(4242);
                Record::ChildDone {
                    run,
                    seq,
                    status: Status::ALL[self.rng.usize(0..5)],
                    payload: self.bytes(),
                }
            }
            15 => {
                let seq = self.bump(i);
                let name = if self.rng.u8(0..4) == 0 {
                    CANCEL_SIGNAL
                } else {
                    "hello"
                };
                Record::Send {
                    run,
                    seq,
                    target: Name::from("other"),
                    name: Name::from(name),
                    payload: self.bytes(),
                }
            }
            16 => {
                self.live[i].updates += 1;
                let caller = self.rng.bool().then_some(ParentRef {
                    shard: 1,
                    run: 5,
                    seq: 6,
                });
                Record::Update {
                    run,
                    id: Name::from(format!("u{}", self.live[i].updates)),
                    name: Name::from("bump"),
                    payload: self.bytes(),
                    caller,
                }
            }
            17 => Record::UpdateDone {
                run,
                ordinal: self.rng.u64(0..self.live[i].updates + 2),
                status: Status::ALL[self.rng.usize(0..5)],
                payload: self.bytes(),
            },
            18 => {
                let seq = self.bump(i);
                Record::Awaiting {
                    run,
                    seq,
                    name: Name::from("ext"),
                    attempt: 1,
                }
            }
            19 => Record::Completed {
                run,
                seq: self.rng.u32(0..self.live[i].seq + 1),
                attempt: 1,
                status: Status::Ok,
                payload: self.bytes(),
            },
            20 => Record::Attributes {
                run,
                payload: self.bytes(),
            },
            21 => Record::Chunk {
                run,
                seq: self.live[i].seq,
                payload: self.bytes(),
            },
            22 => {
                let seq = self.bump(i);
                Record::Value {
                    run,
                    seq,
                    kind: self.rng.u8(0..4),
                    value: self.bytes(),
                }
            }
            23 => Record::Cancel {
                run,
                reason: self.bytes(),
                by: None,
                grace: self.rng.bool().then(|| CancelGrace {
                    until_ms: self.time(),
                    grace_ms: self.time(),
                }),
            },
            24 => return (self.handover(i), Some(i)),
            _ => {
                let status = Status::ALL[self.rng.usize(0..5)];
                let rec = Record::Done {
                    run,
                    status,
                    finished_ms: self.rng.u64(0..5000),
                    payload: self.bytes(),
                    by: None,
                };
                // Sometimes the run stays "live" here, so a second `Done`
                // (which must change nothing) is generated too.
                if self.rng.u8(0..4) != 0 {
                    self.live.swap_remove(i);
                    return (rec, None);
                }
                rec
            }
        };
        (rec, Some(i))
    }

    fn bump(&mut self, i: usize) -> u32 {
        let s = self.live[i].seq;
        self.live[i].seq += 1;
        s
    }

    /// Continue-as-new or reset: a `Done` whose payload starts the next run.
    fn handover(&mut self, i: usize) -> RecordBuf {
        let old = self.live.swap_remove(i);
        let status = if self.rng.bool() {
            Status::ContinuedAsNew
        } else {
            Status::Reset
        };
        let cause = if status == Status::Reset {
            origin::RESET
        } else {
            origin::CONTINUED
        };
        let next = self.new_start(
            Some(Origin {
                run: old.run,
                cause,
            }),
            Some(old.id),
        );
        let mut payload = Vec::new();
        encode_canonical(&next, &mut payload);
        Record::Done {
            run: old.run,
            status,
            finished_ms: self.rng.u64(0..5000),
            payload: Payload::from(payload),
            by: None,
        }
    }
}

/// The host's side of parking: every run's full history, for loading it
/// back.
#[derive(Default)]
struct Host {
    history: BTreeMap<RunId, Vec<RecordBuf>>,
    blobs: u64,
}

impl Host {
    fn note(&mut self, rec: &RecordBuf) {
        self.history.entry(rec.run()).or_default().push(rec.clone());
        if let Record::Done {
            status, payload, ..
        } = rec
            && status.is_handover()
            && let Ok(next) = decode_canonical_all(payload)
            && let Some(start @ Record::Start { .. }) = next.first()
        {
            self.history
                .entry(start.run())
                .or_default()
                .push(start.clone());
        }
    }

    fn park(&mut self, core: &mut ShardCore, run: RunId) {
        self.blobs += 1;
        let blob = BlobRef {
            offset: self.blobs * 100,
            len: 100,
        };
        core.park(run, blob, self.blobs.is_multiple_of(3));
    }

    fn unpark(&self, core: &mut ShardCore, run: RunId, lsn: Lsn, now: u64) {
        assert!(core.unpark(run, lsn, &self.history[&run], now));
    }
}

/// One sequence applied to two cores in two modes, with the same host
/// operations (parks, loads) at the same points: the observable state must
/// be equal at every check point.
fn replay_equivalent(seed: u64, mode_b: Mode, with_parking: bool) {
    let mut w = Workload::new(seed);
    let mut a = ShardCore::new(0, 1, 10_000, 0);
    let mut b = ShardCore::new(0, 1, 10_000, 0);
    let mut host = Host::default();
    let mut log = Vec::new();
    let records = 400;
    for lsn in 1..=records {
        let (rec, _) = w.next();
        // The host loads a parked run back before appending to it.
        if a.is_parked(rec.run()) && !matches!(rec, Record::Start { .. }) {
            host.unpark(&mut a, rec.run(), lsn - 1, 0);
            host.unpark(&mut b, rec.run(), lsn - 1, 0);
        }
        encode_canonical(&rec, &mut log);
        host.note(&rec);
        a.apply(lsn, &rec, Mode::LIVE);
        while a.take_event().is_some() {}
        // The other core reads the record back from the log's bytes.
        let mut back = decode_canonical_all(&log).expect("the log decodes");
        let rec_b = back.pop().expect("one record at least");
        assert_eq!(rec_b, rec, "seed {seed}: canonical round trip");
        b.apply(lsn, &rec_b, mode_b);
        log.clear();
        if with_parking && w.rng.u8(0..5) == 0 {
            let loaded: Vec<RunId> = a.loaded_runs().map(|(r, _)| r).collect();
            if !loaded.is_empty() {
                let run = loaded[w.rng.usize(0..loaded.len())];
                host.park(&mut a, run);
                host.blobs -= 1;
                host.park(&mut b, run);
            }
        }
        if lsn % 50 == 0 || lsn == records {
            let outputs = mode_b.outputs;
            let (oa, ob) = (observe(&a, &w.ids, outputs), observe(&b, &w.ids, outputs));
            if oa != ob {
                for (run, la) in &oa.loaded {
                    let lb = ob.loaded.get(run);
                    if Some(la) != lb {
                        panic!("seed {seed} lsn {lsn} run {run}:\n live {la}\n back {lb:?}");
                    }
                }
                assert_eq!(oa, ob, "seed {seed} at lsn {lsn}");
            }
        }
    }
}

#[test]
fn live_and_recovered_state_are_equal() {
    for seed in seeds() {
        replay_equivalent(seed, Mode::RECOVER, false);
        replay_equivalent(seed, Mode::RECOVER, true);
    }
}

/// Runs rebuilt from the journal bytes a checkpoint keeps (SUFFIX, one
/// run's journal at a time) have the state of the runs that wrote them;
/// only what is emitted differs.
#[test]
fn runs_rebuilt_from_checkpoint_journals_equal_the_live_runs() {
    for seed in seeds() {
        let mut w = Workload::new(seed ^ 0x5eed);
        let mut live = ShardCore::new(0, 1, 10_000, 0);
        for lsn in 1..=400 {
            let (rec, _) = w.next();
            live.apply(lsn, &rec, Mode::LIVE);
        }
        let mut rebuilt = ShardCore::new(0, 1, 10_000, 0);
        let mut runs: Vec<RunId> = live.loaded_runs().map(|(r, _)| r).collect();
        runs.sort_unstable();
        for &run in &runs {
            let journal = &live.get(run).expect("loaded").journal;
            let records = decode_canonical_all(journal).expect("journal decodes");
            for rec in &records {
                rebuilt.apply(1, rec, Mode::SUFFIX);
            }
        }
        assert_eq!(rebuilt.pending_outputs(), 0, "seed {seed}");
        assert!(!rebuilt.has_events(), "seed {seed}");
        for &run in &runs {
            let (a, b) = (live.get(run).expect("live"), rebuilt.get(run));
            let b = b.unwrap_or_else(|| panic!("seed {seed}: run {run} not rebuilt"));
            assert_eq!(observe_run(a), observe_run(b), "seed {seed} run {run}");
            assert_eq!(a.journal, b.journal, "seed {seed} run {run}");
        }
        for id in &w.ids {
            assert_eq!(live.find(id), rebuilt.find(id), "seed {seed} id {id}");
        }
    }
}

/// A run parked and loaded back from its history (BLOB) has the same state
/// as the run that never left memory.
#[test]
fn a_run_loaded_back_from_its_frame_is_the_run_that_left() {
    for seed in seeds() {
        let mut w = Workload::new(seed ^ 0xb10b);
        let mut core = ShardCore::new(0, 1, 10_000, 0);
        let mut host = Host::default();
        for lsn in 1..=300 {
            let (rec, _) = w.next();
            host.note(&rec);
            core.apply(lsn, &rec, Mode::LIVE);
        }
        while core.take_event().is_some() {}
        let runs: Vec<RunId> = core.loaded_runs().map(|(r, _)| r).collect();
        for run in runs {
            let Some(before) = core.get(run).map(observe_run) else {
                continue;
            };
            // Offers are not persisted; loading back re-offers afresh.
            host.park(&mut core, run);
            host.unpark(&mut core, run, 1, 0);
            let after = core.get(run).map(observe_run);
            assert_eq!(Some(before), after, "seed {seed} run {run}");
        }
    }
}

/// Sleepers under a simulated clock: every timer fires exactly once, never
/// early, and at the first poll at or after its time unless that poll was
/// already firing a full [`TIMER_CHUNK`].
#[test]
fn every_timer_fires_once_on_time_under_a_simulated_clock() {
    const YEAR_MS: u64 = 365 * 24 * 3600 * 1000;
    let runs: u64 = std::env::var("FUSEE_TIMER_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    for seed in seeds().into_iter().take(8) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut core = ShardCore::new(0, 1, 1000, 0);
        let mut host = Host::default();
        let mut lsn: Lsn = 0;
        let append = |core: &mut ShardCore, host: &mut Host, lsn: &mut Lsn, rec: RecordBuf| {
            *lsn += 1;
            host.note(&rec);
            core.apply(*lsn, &rec, Mode::LIVE);
        };
        // run -> (seq, due time) of its armed sleep.
        let mut due: BTreeMap<RunId, (u32, u64)> = BTreeMap::new();
        let mut sleeps_left: BTreeMap<RunId, u32> = BTreeMap::new();
        let mut now = 0u64;
        let sleep_for = |rng: &mut fastrand::Rng| -> u64 {
            // Log-uniform from 1 ms to a year.
            let exp = rng.f64() * (YEAR_MS as f64).ln();
            (exp.exp() as u64).clamp(1, YEAR_MS)
        };
        for run in 1..=runs {
            append(
                &mut core,
                &mut host,
                &mut lsn,
                start(run, &format!("t{run}"), 0),
            );
            let at = now + sleep_for(&mut rng);
            append(
                &mut core,
                &mut host,
                &mut lsn,
                Record::Timer {
                    run,
                    seq: 0,
                    name: Name::from("nap"),
                    fire_at_ms: at,
                },
            );
            due.insert(run, (0, at));
            sleeps_left.insert(run, rng.u32(0..3));
            if rng.bool() {
                host.park(&mut core, run);
            }
        }
        while core.take_event().is_some() {}
        let mut fired = 0u64;
        let mut polls = 0u64;
        let poll_limit = runs * 200;
        while !due.is_empty() {
            polls += 1;
            assert!(polls < poll_limit, "seed {seed}: no progress at {now}");
            let next = core.next_timer().expect("armed timers ask for a poll");
            // Sometimes the host polls early, or late after a pause.
            now = match rng.u8(0..10) {
                0 if next > now + 1 => rng.u64(now..next),
                1 => next.max(now) + rng.u64(0..HORIZON_MS * 4),
                _ => next.max(now),
            };
            core.poll_timers(now);
            let mut timers_fired = 0usize;
            let mut loads = 0usize;
            while let Some(ev) = core.take_event() {
                match ev {
                    Event::NeedLoad { run } => {
                        loads += 1;
                        host.unpark(&mut core, run, lsn, now);
                    }
                    Event::Timer { run, seq, kind, .. } => {
                        timers_fired += 1;
                        assert_eq!(kind, TimerKind::Sleep, "seed {seed}");
                        let (want_seq, at) = due.remove(&run).unwrap_or_else(|| {
                            panic!("seed {seed}: run {run} fired twice or unarmed")
                        });
                        assert_eq!(seq, want_seq, "seed {seed} run {run}");
                        assert!(now >= at, "seed {seed} run {run}: early {now} < {at}");
                        fired += 1;
                        append(&mut core, &mut host, &mut lsn, Record::Fired { run, seq });
                        let left = sleeps_left.get_mut(&run).expect("known run");
                        if *left == 0 {
                            append(&mut core, &mut host, &mut lsn, {
                                Record::Done {
                                    run,
                                    status: Status::Ok,
                                    finished_ms: now,
                                    payload: Payload::from(&b""[..]),
                                    by: None,
                                }
                            });
                        } else {
                            *left -= 1;
                            let at = now + sleep_for(&mut rng);
                            append(
                                &mut core,
                                &mut host,
                                &mut lsn,
                                Record::Timer {
                                    run,
                                    seq: seq + 1,
                                    name: Name::from("nap"),
                                    fire_at_ms: at,
                                },
                            );
                            due.insert(run, (seq + 1, at));
                        }
                        if rng.bool() {
                            host.park(&mut core, run);
                        }
                    }
                    Event::Finished { .. } | Event::Started { .. } => {}
                    other => panic!("seed {seed}: unexpected {other:?}"),
                }
            }
            // What was due at this poll and did not fire must be waiting
            // behind a full chunk.
            let saturated = timers_fired >= TIMER_CHUNK || loads >= TIMER_CHUNK;
            if !saturated {
                let late: Vec<_> = due.iter().filter(|(_, (_, at))| *at <= now).collect();
                assert!(
                    late.is_empty(),
                    "seed {seed}: due at {now} and not fired: {late:?}"
                );
            }
        }
        assert!(core.timers_len() as u64 <= runs * 3, "seed {seed}");
        assert!(fired >= runs, "seed {seed}");
    }
}
