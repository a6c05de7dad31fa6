//! The key-value backends' logs (redb, RocksDB: each one whose
//! `fusee-benches` feature is on): durable append latency and group-commit
//! throughput, one measurement written once for any [`Factory`].
//!
//! - `{backend}_durable_append/append_flush_100B`: one 100-byte record
//!   appended and flushed (one durable transaction or synced write batch).
//! - `{backend}_group_commit/batch_N`: N 100-byte records appended, then one
//!   flush, for N in 1, 16, 256, 4096 (throughput in records).
//!
//! Run: `cargo bench -p fusee-benches --bench backend_kv -- --warm-up-time 1
//! --measurement-time 3`

// criterion_group! generates a public function without a doc comment.
#![allow(missing_docs)]

use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fusee_benches::Factory;
use fusee_storage::{LogStore, Storage};

const RECORD: usize = 100;

/// A storage in a fresh temporary directory (removed on drop) and its
/// shard 0's log.
struct Bench<F: Factory> {
    dir: PathBuf,
    log: Option<<F::S as Storage>::Log>,
    storage: Option<F::S>,
    record: [u8; RECORD],
}

impl<F: Factory> Bench<F> {
    fn new(factory: &F, name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "fusee-bench-{}-{name}-{}",
            factory.name(),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let storage = factory.open(&dir).unwrap_or_else(|e| panic!("open: {e}"));
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

impl<F: Factory> Drop for Bench<F> {
    fn drop(&mut self) {
        self.log = None;
        self.storage = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn measure<F: Factory>(c: &mut Criterion, factory: &F) {
    let name = factory.name();
    let mut b = Bench::new(factory, "append");
    let mut g = c.benchmark_group(format!("{name}_durable_append"));
    g.throughput(Throughput::Elements(1));
    g.bench_function("append_flush_100B", |bench| {
        bench.iter(|| b.append_flush(1));
    });
    g.finish();
    drop(b);
    let mut g = c.benchmark_group(format!("{name}_group_commit"));
    for batch in [1usize, 16, 256, 4096] {
        let mut b = Bench::new(factory, &format!("batch{batch}"));
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(format!("batch_{batch}"), |bench| {
            bench.iter(|| b.append_flush(batch));
        });
    }
    g.finish();
}

fn backends(#[allow(unused_variables)] c: &mut Criterion) {
    #[cfg(feature = "redb")]
    measure(c, &fusee_benches::backend::Redb);
    #[cfg(feature = "rocksdb")]
    measure(c, &fusee_benches::backend::Rocksdb);
}

criterion_group!(benches, backends);
criterion_main!(benches);
