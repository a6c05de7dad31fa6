//! The run table's lookups and inserts, its bytes per run, and the timing
//! wheel's insert+poll throughput.
//!
//! `cargo bench -p fusee-benches --bench core_table -- --warm-up-time 1 --measurement-time 3`

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use fusee_core::table::{Entry, Layout, PARKED, RunTable};
use fusee_core::wheel::Wheel;
use std::hint::black_box;

const MILLION: u64 = 1_000_000;

fn id_hash(run: u64) -> u64 {
    fusee_core::wire::hash_id(&format!("order-{run}"))
}

fn parked(table: &mut RunTable, n: u64) {
    for run in 1..=n {
        let mut e = Entry::new(run, id_hash(run), PARKED);
        e.set_location(run * 64, 64);
        e.set_time(run);
        let slot = table.insert(e);
        table.index_id(slot);
    }
}

fn layouts() -> [(Layout, &'static str); 2] {
    [(Layout::Compact, "compact"), (Layout::Roomy, "roomy")]
}

fn bytes_per_run() {
    for (layout, name) in layouts() {
        let mut grown = RunTable::with_layout(layout);
        parked(&mut grown, MILLION);
        let mut loaded = RunTable::with_layout(layout);
        loaded.reserve(MILLION as usize);
        parked(&mut loaded, MILLION);
        // The worst point of the growth cycle between 0.5 and 1.5 million.
        let mut worst: f64 = 0.0;
        let mut t = RunTable::with_layout(layout);
        parked(&mut t, MILLION / 2);
        for run in MILLION / 2 + 1..=3 * MILLION / 2 {
            let slot = t.insert(Entry::new(run, id_hash(run), PARKED));
            t.index_id(slot);
            if run % 1000 == 0 {
                worst = worst.max(t.heap_bytes() as f64 / run as f64);
            }
        }
        eprintln!(
            "heap bytes per run, 1,000,000 parked, {name}: grown {:.2}, reserved {:.2}; worst over 0.5-1.5 M: {worst:.2}",
            grown.heap_bytes() as f64 / MILLION as f64,
            loaded.heap_bytes() as f64 / MILLION as f64,
        );
    }
}

fn table(c: &mut Criterion) {
    bytes_per_run();
    let mut rng = fastrand::Rng::with_seed(7);
    let probes: Vec<u64> = (0..1 << 16).map(|_| rng.u64(1..=MILLION)).collect();
    let misses: Vec<u64> = (0..1 << 16)
        .map(|_| rng.u64(MILLION + 1..u64::from(u32::MAX)))
        .collect();
    let ids: Vec<u64> = probes.iter().map(|&r| id_hash(r)).collect();
    let mut g = c.benchmark_group("table_1m");
    for (layout, name) in layouts() {
        let mut t = RunTable::with_layout(layout);
        parked(&mut t, MILLION);
        let mut i = 0;
        g.bench_function(format!("find_run_hit/{name}"), |b| {
            b.iter(|| {
                i = (i + 1) & 0xFFFF;
                black_box(t.find_run(black_box(probes[i])))
            })
        });
        g.bench_function(format!("find_run_miss/{name}"), |b| {
            b.iter(|| {
                i = (i + 1) & 0xFFFF;
                black_box(t.find_run(black_box(misses[i])))
            })
        });
        g.bench_function(format!("find_id_hit/{name}"), |b| {
            b.iter(|| {
                i = (i + 1) & 0xFFFF;
                black_box(t.find_id(black_box(ids[i])))
            })
        });
        g.bench_function(format!("find_id_miss/{name}"), |b| {
            b.iter(|| {
                i = (i + 1) & 0xFFFF;
                black_box(t.find_id(black_box(misses[i])))
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("table_insert");
    const N: u64 = 200_000;
    g.throughput(Throughput::Elements(N));
    g.sample_size(10);
    for (layout, name) in layouts() {
        let entries: Vec<Entry> = (1..=N)
            .map(|run| Entry::new(run, id_hash(run), PARKED))
            .collect();
        g.bench_function(format!("insert_index_id_200k/{name}"), |b| {
            b.iter_batched(
                || RunTable::with_layout(layout),
                |mut t| {
                    for &e in &entries {
                        let slot = t.insert(e);
                        t.index_id(slot);
                    }
                    t
                },
                BatchSize::LargeInput,
            )
        });
        g.bench_function(format!("insert_index_id_200k_reserved/{name}"), |b| {
            b.iter_batched(
                || {
                    let mut t = RunTable::with_layout(layout);
                    t.reserve(N as usize);
                    t
                },
                |mut t| {
                    for &e in &entries {
                        let slot = t.insert(e);
                        t.index_id(slot);
                    }
                    t
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

fn wheel(c: &mut Criterion) {
    const N: usize = 100_000;
    let mut rng = fastrand::Rng::with_seed(9);
    let deltas: Vec<u64> = (0..N).map(|_| rng.u64(1..1 << 16)).collect();
    let mut g = c.benchmark_group("wheel");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    g.bench_function("insert_100k_poll_every_16ms", |b| {
        let mut out = Vec::with_capacity(N);
        b.iter(|| {
            let mut w = Wheel::new(1_000_000);
            for (k, &d) in deltas.iter().enumerate() {
                w.insert(1_000_000 + d, k);
            }
            let mut now = 1_000_000;
            while !w.is_empty() {
                now += 16;
                out.clear();
                w.poll(now, &mut out);
                black_box(out.len());
            }
        })
    });
    g.bench_function("insert_100k_poll_at_next_wake", |b| {
        let mut out = Vec::with_capacity(N);
        b.iter(|| {
            let mut w = Wheel::new(1_000_000);
            for (k, &d) in deltas.iter().enumerate() {
                w.insert(1_000_000 + d, k);
            }
            while let Some(t) = w.next_wake() {
                out.clear();
                w.poll(t, &mut out);
                black_box(out.len());
            }
        })
    });
    g.finish();
}

criterion_group!(benches, table, wheel);
criterion_main!(benches);
