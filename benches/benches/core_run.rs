//! `RunMachine` benches: replay of a 1,000-operation journal (with two
//! baselines over the same bytes: decoding it with `iter_canonical`, and
//! `ShardCore::apply` of every record), the live cost of one operation, and
//! the heap bytes of a machine for a run with 10 completed steps.
//!
//! `cargo bench -p fusee-benches --no-default-features --bench core_run`

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use fusee_benches::workload;
use fusee_core::record::{
    Lsn, Name, Payload, Record, RecordRef, Seq, Status, encode_canonical, iter_canonical,
    value_kind,
};
use fusee_core::run::{Issued, RunMachine, StepRun, ValueAnswer};
use fusee_core::shard::{Mode, ShardCore};

const RUN: u64 = 1;
const OPS: usize = 1000;

/// The operations of the benched workflows, called one after another.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// A step with a small result (record: `Step`).
    Step,
    /// A durable sleep (`Timer`, `Fired`).
    Sleep,
    /// A recorded value (`Value`).
    Value,
    /// A signal sent (`Send`).
    Send,
}

/// `n` operations: all steps, or steps, sleeps, values and sends in turn.
fn program(n: usize, mixed: bool) -> Vec<Op> {
    const MIX: [Op; 4] = [Op::Step, Op::Sleep, Op::Value, Op::Send];
    (0..n)
        .map(|i| if mixed { MIX[i % MIX.len()] } else { Op::Step })
        .collect()
}

/// A live host: hands the machine every record the way the engine does,
/// keeping the journal's bytes.
struct Live {
    m: RunMachine,
    journal: Vec<u8>,
    lsn: Lsn,
    keep: bool,
}

impl Live {
    fn new(m: RunMachine, keep: bool) -> Self {
        let mut journal = Vec::new();
        encode_canonical(&workload::start(RUN), &mut journal);
        let mut m = m;
        m.rebuild(RUN, &journal, 1).expect("a Start builds");
        Self {
            m,
            journal,
            lsn: 1,
            keep,
        }
    }

    fn append(&mut self, rec: &RecordRef<'_>) {
        if self.keep {
            encode_canonical(rec, &mut self.journal);
        }
        self.lsn += 1;
        self.m.handle_record(self.lsn, rec).expect("record taken");
    }

    /// One operation, live: the call, the record(s) appended, the delivery.
    fn op(&mut self, op: Op) {
        match op {
            Op::Step => {
                let s = self.m.step("charge").expect("step");
                debug_assert!(matches!(s.run, StepRun::Attempt(_)));
                self.append(&Record::Step {
                    run: RUN,
                    seq: s.seq,
                    name: "charge",
                    attempt: 1,
                    status: Status::Ok,
                    payload: b"{\"ok\":true}",
                    ended_ms: None,
                });
                black_box(self.m.poll_delivery().expect("delivery"));
            }
            Op::Sleep => {
                let seq = issued(self.m.sleep("nap").expect("sleep"));
                self.append(&Record::Timer {
                    run: RUN,
                    seq,
                    name: "nap",
                    fire_at_ms: 1_700_000_000_000,
                });
                self.append(&Record::Fired { run: RUN, seq });
                black_box(self.m.poll_delivery().expect("delivery"));
            }
            Op::Value => {
                let ValueAnswer::Append(seq) = self.m.value(value_kind::NOW).expect("value") else {
                    panic!("a live value is appended");
                };
                self.append(&Record::Value {
                    run: RUN,
                    seq,
                    kind: value_kind::NOW,
                    value: b"1700000000000",
                });
            }
            Op::Send => {
                let seq = issued(self.m.send("order-7", "paid").expect("send"));
                self.append(&Record::Send {
                    run: RUN,
                    seq,
                    target: "order-7",
                    name: "paid",
                    payload: b"",
                });
            }
        }
    }
}

fn issued(i: Issued) -> Seq {
    match i {
        Issued::Append(seq) => seq,
        Issued::Recorded(_) => panic!("a live call is appended"),
    }
}

/// The journal of `ops` run live, and its last LSN.
fn journal(ops: &[Op]) -> (Vec<u8>, Lsn) {
    let mut live = Live::new(RunMachine::new(), true);
    for &op in ops {
        live.op(op);
    }
    (live.journal, live.lsn)
}

/// Rebuilds `m` from `journal` and replays `ops` against it: the code
/// calls each operation and takes each delivery.
fn replay(m: &mut RunMachine, journal: &[u8], lsn: Lsn, ops: &[Op]) {
    m.rebuild(RUN, journal, lsn).expect("builds");
    for &op in ops {
        match op {
            Op::Step => {
                black_box(m.step("charge").expect("step"));
                black_box(m.poll_delivery().expect("delivery"));
            }
            Op::Sleep => {
                black_box(m.sleep("nap").expect("sleep"));
                black_box(m.poll_delivery().expect("delivery"));
            }
            Op::Value => {
                black_box(m.value(value_kind::NOW).expect("value"));
            }
            Op::Send => {
                black_box(m.send("order-7", "paid").expect("send"));
            }
        }
    }
    debug_assert!(!m.is_replaying());
}

fn replay_bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("run_replay");
    g.throughput(Throughput::Elements(OPS as u64));
    for (label, mixed) in [("1000_steps", false), ("1000_mixed", true)] {
        let ops = program(OPS, mixed);
        let (bytes, lsn) = journal(&ops);
        let records = iter_canonical(&bytes).count();
        eprintln!("{label}: {records} records, {} bytes", bytes.len());
        let mut m = RunMachine::new();
        g.bench_function(format!("{label}/run_machine"), |b| {
            b.iter(|| replay(&mut m, black_box(&bytes), lsn, &ops))
        });
        // Baseline: only walking the same bytes.
        g.bench_function(format!("{label}/iter_canonical"), |b| {
            b.iter(|| {
                for item in iter_canonical(black_box(&bytes)) {
                    black_box(item.expect("decodes"));
                }
            })
        });
        // Baseline: the shard applying every record of the journal.
        let decoded: Vec<(Record<Name, Payload>, Vec<u8>)> = iter_canonical(&bytes)
            .map(|item| {
                let (rec, whole) = item.expect("decodes");
                (
                    rec.map(|s| Name::from(*s), |b| Payload::from(*b)),
                    whole.to_vec(),
                )
            })
            .collect();
        g.bench_function(format!("{label}/shard_apply"), |b| {
            b.iter_batched(
                || ShardCore::new(0, 1, 1000, 0),
                |mut core| {
                    for (lsn, (rec, whole)) in decoded.iter().enumerate() {
                        core.apply_encoded(lsn as u64 + 1, rec, Mode::LIVE, whole);
                    }
                    while core.take_event().is_some() {}
                    core
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

fn live_bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("run_live");
    g.throughput(Throughput::Elements(OPS as u64));
    for (label, mixed) in [("1000_steps", false), ("1000_mixed", true)] {
        let ops = program(OPS, mixed);
        let mut spare = Some(RunMachine::new());
        g.bench_function(label, |b| {
            b.iter(|| {
                let mut live = Live::new(spare.take().unwrap_or_default(), false);
                for &op in &ops {
                    live.op(op);
                }
                spare = Some(live.m);
            })
        });
    }
    g.finish();
}

fn heap_bytes(_c: &mut Criterion) {
    let ops = program(10, false);
    let (bytes, lsn) = journal(&ops);
    let mut m = RunMachine::build(RUN, &bytes, lsn).expect("builds");
    let built = m.heap_bytes();
    replay(&mut m, &bytes, lsn, &ops);
    eprintln!(
        "run machine, 10 completed steps ({} journal bytes): {built} heap bytes built, {} after replay",
        bytes.len(),
        m.heap_bytes()
    );
}

criterion_group!(benches, heap_bytes, replay_bench, live_bench);
criterion_main!(benches);
