//! The memory backend's costs: the floor every disk backend is compared to.
//!
//! `cargo bench -p fusee-benches --bench storage_memory -- --warm-up-time 1 --measurement-time 3`

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use fusee_storage::{
    CheckpointStore, INDEX_RECORD, IndexChange, LogStore, MemoryStorage, RunStore, Storage,
};

fn index_record(run: u64) -> [u8; INDEX_RECORD] {
    let mut r = [3u8; INDEX_RECORD];
    r[8..16].copy_from_slice(&(run | 1 << 48).to_le_bytes());
    r
}

fn log(c: &mut Criterion) {
    let mut g = c.benchmark_group("memory_log");
    let record = [7u8; 100];
    for batch in [1u64, 64] {
        g.throughput(Throughput::Elements(batch));
        g.bench_function(format!("append_flush_discard_100B_x{batch}"), |b| {
            let s = MemoryStorage::new();
            let mut p = s.open_shard(0).expect("open");
            let mut lsn = 0;
            b.iter(|| {
                for _ in 0..batch {
                    lsn += 1;
                    p.log.append(lsn, &record).expect("append");
                }
                let durable = p.log.flush().expect("flush");
                // Keeps the log's memory bounded over millions of iterations.
                p.log.discard_through(durable).expect("discard");
                durable
            });
        });
    }
    g.finish();
}

fn store(c: &mut Criterion) {
    let mut g = c.benchmark_group("memory_store");
    let frame = vec![5u8; 4096];
    g.throughput(Throughput::Bytes(frame.len() as u64));
    g.bench_function("append_read_release_4KiB", |b| {
        let s = MemoryStorage::new();
        let mut p = s.open_shard(0).expect("open");
        let mut out = Vec::new();
        let mut n = 0u32;
        b.iter(|| {
            let blob = p.runs.append(&frame).expect("append");
            p.runs.read(blob, &mut out).expect("read");
            p.runs.release(blob).expect("release");
            // Released frames are dropped by the next commit: commit every
            // 1024 frames so memory stays bounded (4 MiB).
            n += 1;
            if n.is_multiple_of(1024) {
                p.checkpoint
                    .commit(&mut p.runs, IndexChange::Delta(&[]), b"")
                    .expect("commit");
            }
        });
    });
    g.finish();
}

fn index(c: &mut Criterion) {
    let mut g = c.benchmark_group("memory_index");
    g.throughput(Throughput::Elements(16));
    g.bench_function("delta_commit_16", |b| {
        let s = MemoryStorage::new();
        let mut p = s.open_shard(0).expect("open");
        let mut run = 0u64;
        b.iter(|| {
            let delta: Vec<u8> = (0..16)
                .flat_map(|_| {
                    run = (run + 7919) % 100_000;
                    index_record(run)
                })
                .collect();
            p.checkpoint
                .commit(&mut p.runs, IndexChange::Delta(&delta), b"checkpoint")
                .expect("commit")
        });
    });
    let n = 100_000u64;
    let base: Vec<u8> = (0..n)
        .flat_map(|i| index_record(i.wrapping_mul(0x9E37_79B9) & 0xFFFF_FFFF))
        .collect();
    g.throughput(Throughput::Elements(n));
    g.bench_function("base_100k_stream_commit", |b| {
        let s = MemoryStorage::new();
        let mut p = s.open_shard(0).expect("open");
        b.iter_batched(
            || (),
            |()| {
                p.checkpoint.begin_base().expect("begin");
                for chunk in base.chunks(4096 * INDEX_RECORD) {
                    p.checkpoint.base_chunk(chunk).expect("chunk");
                }
                p.checkpoint
                    .commit(&mut p.runs, IndexChange::Base, b"checkpoint")
                    .expect("commit")
            },
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

criterion_group!(benches, log, store, index);
criterion_main!(benches);
