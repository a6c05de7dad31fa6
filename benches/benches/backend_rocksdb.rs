//! The RocksDB backend's log: durable append latency and group-commit
//! throughput, on the machine's real disk (a directory under the system
//! temporary directory).
//!
//! - `rocksdb_durable_append/append_flush_100B`: one 100-byte record
//!   appended and flushed (one write batch written with `sync`: one WAL
//!   fsync): the latency a lone caller waits for.
//! - `rocksdb_group_commit/batch_N`: N 100-byte records appended, then one
//!   flush; throughput in records per second for N = 1, 16, 256, 4096.
//!
//! Run: `cargo bench -p fusee-benches --bench backend_rocksdb -- --warm-up-time 1
//! --measurement-time 3`

// criterion_group! generates a public function without a doc comment.
#![allow(missing_docs)]

use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fusee_storage::{LogStore, Storage};
use fusee_storage_rocksdb::{RocksLog, RocksStorage};

const RECORD: usize = 100;

/// A storage in a fresh temporary directory (removed on drop) and its
/// shard 0's log.
struct Bench {
    dir: PathBuf,
    log: Option<RocksLog>,
    storage: Option<RocksStorage>,
    record: [u8; RECORD],
}

impl Bench {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("fusee-bench-rocksdb-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let storage = RocksStorage::open(&dir).unwrap_or_else(|e| panic!("open: {e}"));
        let log = storage
            .open_shard(0)
            .unwrap_or_else(|e| panic!("open_shard: {e}"))
            .log;
        let mut record = [0u8; RECORD];
        fastrand::Rng::with_seed(7).fill(&mut record);
        Self {
            dir,
            log: Some(log),
            storage: Some(storage),
            record,
        }
    }

    /// Appends `n` records and flushes them durably.
    fn append_flush(&mut self, n: usize) {
        let Some(log) = self.log.as_mut() else {
            panic!("log gone")
        };
        for _ in 0..n {
            let lsn = log.last_lsn() + 1;
            log.append(lsn, &self.record)
                .unwrap_or_else(|e| panic!("append: {e}"));
        }
        log.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.log = None;
        self.storage = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn durable_append(c: &mut Criterion) {
    let mut b = Bench::new("append");
    let mut g = c.benchmark_group("rocksdb_durable_append");
    g.throughput(Throughput::Elements(1));
    g.bench_function("append_flush_100B", |bench| {
        bench.iter(|| b.append_flush(1));
    });
    g.finish();
}

fn group_commit(c: &mut Criterion) {
    let mut g = c.benchmark_group("rocksdb_group_commit");
    for batch in [1usize, 16, 256, 4096] {
        let mut b = Bench::new(&format!("batch{batch}"));
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(format!("batch_{batch}"), |bench| {
            bench.iter(|| b.append_flush(batch));
        });
    }
    g.finish();
}

criterion_group!(benches, durable_append, group_commit);
criterion_main!(benches);
