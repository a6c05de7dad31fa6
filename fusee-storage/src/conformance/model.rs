//! Random operation sequences checked against the memory backend as a model.

use std::collections::BTreeMap;

use fusee_core::shard::BlobRef;

use super::{Harness, delete_record, index_record, open, read_index, read_log, scaled};
use crate::{
    CheckpointStore, INDEX_RECORD, IndexChange, LogStore, MemoryStorage, RunStore, ShardParts,
};

/// Prints the seed if the sequence fails (the panic shows captured output).
struct SeedGuard(u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "model_random failed with seed {} (rerun with FUSEE_CONFORMANCE_SEED={})",
                self.0, self.0
            );
        }
    }
}

struct Frame {
    model: BlobRef,
    backend: BlobRef,
    bytes: Vec<u8>,
    committed: bool,
}

struct Run<'a, H: Harness> {
    h: &'a mut H,
    rng: fastrand::Rng,
    model: Option<MemoryStorage>,
    backend: Option<H::S>,
    m: Option<ShardParts<MemoryStorage>>,
    b: Option<ShardParts<H::S>>,
    /// Every record ever appended, by LSN - 1 (to check a crash's kept tail).
    appended: Vec<Vec<u8>>,
    live: Vec<Frame>,
    released: Vec<Frame>,
}

const SHARD: u32 = 7;

/// Random operation sequences (append, flush, read, discard, frame append,
/// read and release, delta and base commits, reopen, crash) applied to the
/// backend and to the memory backend, comparing every observable result.
/// Runs `scaled(8)` sequences of 400 operations; the seed comes from
/// `FUSEE_CONFORMANCE_SEED` or the clock and is printed on failure.
pub fn model_random<H: Harness>(h: &mut H) {
    let seed = std::env::var("FUSEE_CONFORMANCE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    for i in 0..scaled(8) as u64 {
        let seed = seed.wrapping_add(i);
        let _guard = SeedGuard(seed);
        let model = MemoryStorage::new();
        let backend = h.open();
        let m = open(&model, SHARD);
        let b = open(&backend, SHARD);
        let mut run = Run {
            h: &mut *h,
            rng: fastrand::Rng::with_seed(seed),
            model: Some(model),
            backend: Some(backend),
            m: Some(m),
            b: Some(b),
            appended: Vec::new(),
            live: Vec::new(),
            released: Vec::new(),
        };
        for step in 0..400 {
            run.step(step);
        }
    }
}

impl<H: Harness> Run<'_, H> {
    fn parts(&mut self) -> (&mut ShardParts<MemoryStorage>, &mut ShardParts<H::S>) {
        match (self.m.as_mut(), self.b.as_mut()) {
            (Some(m), Some(b)) => (m, b),
            _ => panic!("parts missing"),
        }
    }

    fn step(&mut self, step: usize) {
        let op = self.rng.u32(0..100);
        match op {
            0..=29 => self.append(),
            30..=41 => self.flush(),
            42..=49 => self.read(),
            50..=52 => self.discard(),
            53..=64 => self.frame_append(),
            65..=71 => self.frame_read(),
            72..=75 => self.release(),
            76..=87 => self.commit(),
            88..=91 => self.compare_index(),
            92..=95 => self.restart(false),
            _ => self.restart(true),
        }
        let (m, b) = self.parts();
        assert_eq!(
            m.log.last_lsn(),
            b.log.last_lsn(),
            "step {step}: last LSN differs"
        );
        assert_eq!(
            m.log.durable_lsn(),
            b.log.durable_lsn(),
            "step {step}: durable LSN differs"
        );
    }

    fn append(&mut self) {
        let n = self.rng.usize(1..=5);
        for _ in 0..n {
            let len = if self.rng.u8(..) == 0 {
                self.rng.usize(0..70_000)
            } else {
                self.rng.usize(0..300)
            };
            let mut bytes = vec![0u8; len];
            self.rng.fill(&mut bytes);
            // Sometimes a wrong LSN: both must refuse it alike.
            let kind = self.rng.u8(0..20);
            let (m, b) = self.parts();
            let lsn = match kind {
                0 => m.log.last_lsn() + 2,
                1 => m.log.last_lsn(),
                _ => m.log.last_lsn() + 1,
            };
            let rm = m.log.append(lsn, &bytes);
            let rb = b.log.append(lsn, &bytes);
            assert_eq!(
                rm.is_ok(),
                rb.is_ok(),
                "append({lsn}): model {rm:?}, backend {rb:?}"
            );
            if rm.is_ok() {
                let at = usize::try_from(lsn - 1).unwrap_or(usize::MAX);
                self.appended.truncate(at);
                self.appended.push(bytes);
            }
        }
    }

    fn flush(&mut self) {
        let (m, b) = self.parts();
        let rm = m.log.flush().ok();
        let rb = b.log.flush().ok();
        assert_eq!(rm, rb, "flush: model vs backend");
    }

    fn read(&mut self) {
        let (m, b) = self.parts();
        let first = m.log.first_lsn().max(b.log.first_lsn());
        let last = m.log.last_lsn();
        let after = first - 1 + self.rng.u64(0..=last + 1 - first);
        let (m, b) = self.parts();
        let rm = read_log(&mut m.log, after).unwrap_or_else(|e| panic!("model read({after}): {e}"));
        let rb =
            read_log(&mut b.log, after).unwrap_or_else(|e| panic!("backend read({after}): {e}"));
        assert!(rm == rb, "read({after}) differs from the model");
    }

    fn discard(&mut self) {
        let durable = self.parts().0.log.durable_lsn();
        let lsn = self.rng.u64(0..=durable);
        let (m, b) = self.parts();
        let rm = m.log.discard_through(lsn);
        let rb = b.log.discard_through(lsn);
        assert_eq!(
            rm.is_ok(),
            rb.is_ok(),
            "discard_through({lsn}): model {rm:?}, backend {rb:?}"
        );
    }

    fn frame_append(&mut self) {
        let len = if self.rng.u8(0..10) == 0 {
            self.rng.usize(0..200_000)
        } else {
            self.rng.usize(0..2000)
        };
        let mut bytes = vec![0u8; len];
        self.rng.fill(&mut bytes);
        let (m, b) = self.parts();
        let rm = m.runs.append(&bytes);
        let rb = b.runs.append(&bytes);
        match (rm, rb) {
            (Ok(model), Ok(backend)) => {
                self.live.push(Frame {
                    model,
                    backend,
                    bytes,
                    committed: false,
                });
            }
            (rm, rb) => assert_eq!(
                rm.is_ok(),
                rb.is_ok(),
                "frame append: model {rm:?}, backend {rb:?}"
            ),
        }
    }

    fn frame_read(&mut self) {
        if self.live.is_empty() {
            return;
        }
        let i = self.rng.usize(0..self.live.len());
        let (mref, bref) = (self.live[i].model, self.live[i].backend);
        let mut om = Vec::new();
        let mut ob = Vec::new();
        let (m, b) = self.parts();
        m.runs
            .read(mref, &mut om)
            .unwrap_or_else(|e| panic!("model frame read: {e}"));
        b.runs
            .read(bref, &mut ob)
            .unwrap_or_else(|e| panic!("backend frame read {bref:?}: {e}"));
        assert!(
            om == self.live[i].bytes && ob == om,
            "frame {bref:?} read back other bytes"
        );
    }

    fn release(&mut self) {
        if self.live.is_empty() {
            return;
        }
        let i = self.rng.usize(0..self.live.len());
        let f = self.live.swap_remove(i);
        let (m, b) = self.parts();
        m.runs
            .release(f.model)
            .unwrap_or_else(|e| panic!("model release: {e}"));
        b.runs
            .release(f.backend)
            .unwrap_or_else(|e| panic!("backend release {:?}: {e}", f.backend));
        self.released.push(f);
    }

    fn commit(&mut self) {
        let mut ck = vec![0u8; self.rng.usize(0..100)];
        self.rng.fill(&mut ck);
        let base = self.rng.u8(0..6) == 0;
        let records: Vec<[u8; INDEX_RECORD]> = (0..self.rng.usize(0..30))
            .map(|_| {
                let run = self.rng.u64(0..60);
                if !base && self.rng.bool() {
                    delete_record(run)
                } else {
                    index_record(run, self.rng.u64(..))
                }
            })
            .collect();
        let mut records = records;
        if base {
            // A base lists each run once.
            let unique: BTreeMap<u64, [u8; INDEX_RECORD]> = records
                .iter()
                .map(|r| (crate::index_record_run(r), *r))
                .collect();
            records = unique.into_values().collect();
        }
        let bytes = super::concat(&records);
        let (m, b) = self.parts();
        let (rm, rb) = if base {
            stream(&mut m.checkpoint, &records);
            b.checkpoint
                .begin_base()
                .unwrap_or_else(|e| panic!("begin_base: {e}"));
            for c in records.chunks(4) {
                b.checkpoint
                    .base_chunk(&super::concat(c))
                    .unwrap_or_else(|e| panic!("base_chunk: {e}"));
            }
            (
                m.checkpoint.commit(&mut m.runs, IndexChange::Base, &ck),
                b.checkpoint.commit(&mut b.runs, IndexChange::Base, &ck),
            )
        } else {
            (
                m.checkpoint
                    .commit(&mut m.runs, IndexChange::Delta(&bytes), &ck),
                b.checkpoint
                    .commit(&mut b.runs, IndexChange::Delta(&bytes), &ck),
            )
        };
        let (cm, cb) = match (rm, rb) {
            (Ok(cm), Ok(cb)) => (cm, cb),
            (rm, rb) => panic!("commit: model {rm:?}, backend {rb:?}"),
        };
        assert_eq!(
            cm.index_records, cb.index_records,
            "index size after commit"
        );
        for f in &mut self.live {
            f.committed = true;
        }
        self.released.clear();
    }

    fn compare_index(&mut self) {
        let (m, b) = self.parts();
        assert_eq!(
            read_index(&mut m.checkpoint),
            read_index(&mut b.checkpoint),
            "index differs"
        );
    }

    fn restart(&mut self, crash: bool) {
        // Parts first, then storages.
        self.m = None;
        self.b = None;
        let (Some(model), Some(backend)) = (self.model.take(), self.backend.take()) else {
            panic!("storages missing");
        };
        let (model, backend) = if crash {
            (model.crash(), self.h.crash(backend))
        } else {
            (model.reopen(), self.h.reopen(backend))
        };
        let mut m = open(&model, SHARD);
        let mut b = open(&backend, SHARD);
        assert_eq!(
            m.recovered.checkpoint, b.recovered.checkpoint,
            "checkpoint after restart"
        );
        assert_eq!(
            m.recovered.index_records, b.recovered.index_records,
            "index size after restart"
        );
        // The model keeps exactly the flushed records; the backend may keep
        // more of the unflushed tail, which must be what was appended.
        let (ml, bl) = (m.log.last_lsn(), b.log.last_lsn());
        assert!(
            bl >= ml,
            "backend lost flushed records: last {bl}, flushed {ml}"
        );
        let (extra, _) = read_log(&mut b.log, ml).unwrap_or_else(|e| panic!("backend tail: {e}"));
        for (lsn, bytes) in extra {
            let want = self
                .appended
                .get(usize::try_from(lsn - 1).unwrap_or(usize::MAX));
            assert_eq!(
                Some(&bytes),
                want,
                "record {lsn} kept after a crash was never appended"
            );
            m.log
                .append(lsn, &bytes)
                .unwrap_or_else(|e| panic!("model resync: {e}"));
        }
        m.log.flush().unwrap_or_else(|e| panic!("model flush: {e}"));
        // Frames: uncommitted ones are gone in both; releases not committed
        // are undone.
        let mut out = Vec::new();
        let released = std::mem::take(&mut self.released);
        self.live.extend(released);
        let (keep, gone): (Vec<Frame>, Vec<Frame>) = std::mem::take(&mut self.live)
            .into_iter()
            .partition(|f| f.committed);
        for f in &gone {
            assert!(
                b.runs.read(f.backend, &mut out).is_err(),
                "uncommitted frame {:?} survived",
                f.backend
            );
        }
        self.live = keep;
        self.model = Some(model);
        self.backend = Some(backend);
        self.m = Some(m);
        self.b = Some(b);
        self.compare_index();
    }
}

/// Streams a base into the model in one chunk.
fn stream<C: CheckpointStore>(c: &mut C, records: &[[u8; INDEX_RECORD]]) {
    c.begin_base()
        .unwrap_or_else(|e| panic!("model begin_base: {e}"));
    c.base_chunk(&super::concat(records))
        .unwrap_or_else(|e| panic!("model base_chunk: {e}"));
}
