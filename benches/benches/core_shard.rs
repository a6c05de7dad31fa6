//! `ShardCore` benches: apply throughput, a million parked sleepers (table
//! bytes per run and one sweep), and a mass wake of parked timers.
//!
//! `cargo bench -p fusee-benches --bench core_shard`

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use fusee_benches::workload::{encoded_journals, parked_sleepers};
use fusee_core::shard::{Event, Mode, ShardCore};

const DAY_MS: u64 = 24 * 3600 * 1000;

fn apply_throughput(c: &mut Criterion) {
    let records = encoded_journals(1000);
    let mut g = c.benchmark_group("shard_apply");
    g.throughput(Throughput::Elements(records.len() as u64));
    g.bench_function("start_10_steps_done", |b| {
        b.iter_batched(
            || ShardCore::new(0, 1, 1000, 0),
            |mut core| {
                for (lsn, (rec, bytes)) in records.iter().enumerate() {
                    core.apply_encoded(lsn as u64 + 1, rec, Mode::LIVE, bytes);
                }
                while core.take_event().is_some() {}
                core
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

/// `n` parked sleepers whose timers fall in `[at, at + spread)`.
fn sleepers(n: u64, at: u64, spread: u64) -> ShardCore {
    parked_sleepers(n, at, spread, 7)
}

fn parked_sleepers_bench(c: &mut Criterion) {
    let n = 1_000_000;
    let core = sleepers(n, DAY_MS, 3600 * 1000);
    eprintln!(
        "shard: {n} parked sleepers a day out: table {} bytes = {:.1} bytes per run",
        core.table_bytes(),
        core.table_bytes() as f64 / n as f64
    );
    drop(core);
    let mut g = c.benchmark_group("shard_sweep");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n));
    // The first sweep that reaches the sleepers walks every bucket and moves
    // the timers now within the horizon into the wheel of loads.
    g.bench_function("sweep_1m_parked_sleepers", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut core = sleepers(n, DAY_MS, 3600 * 1000);
                // Timers fall in [DAY, DAY + 1 h): a sweep at DAY walks every
                // bucket and moves the ~2% due within the horizon.
                let at = DAY_MS;
                let t = Instant::now();
                core.poll_timers(black_box(at));
                total += t.elapsed();
                assert!(core.timers_len() > 0, "the sweep moved timers");
            }
            total
        })
    });
    g.finish();
}

fn mass_wake(c: &mut Criterion) {
    let n = 100_000;
    let mut g = c.benchmark_group("shard_mass_wake");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n));
    g.bench_function("drain_100k_need_loads", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut core = sleepers(n, 1000, 1);
                let t = Instant::now();
                let mut loads = 0u64;
                while loads < n {
                    core.poll_timers(black_box(5000));
                    while let Some(ev) = core.take_event() {
                        if let Event::NeedLoad { .. } = ev {
                            loads += 1;
                        }
                    }
                }
                total += t.elapsed();
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, apply_throughput, parked_sleepers_bench, mass_wake);
criterion_main!(benches);
