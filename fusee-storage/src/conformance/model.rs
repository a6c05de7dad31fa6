//! Random operation sequences checked against the memory backend as a model.

use std::collections::BTreeMap;

use fusee_core::shard::BlobRef;

use super::check::{Clause, check_bytes, check_index};
use super::{
    Harness, check, check_eq, delete_record, fail, index_record, must, open, read_index, read_log,
    scaled,
};
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
    /// The step running, named in every failure.
    step: usize,
}

const SHARD: u32 = 7;

/// Random operation sequences (append, flush, read, discard, frame append,
/// read and release, delta and base commits, reopen, crash) applied to the
/// backend and to the memory backend, comparing every observable result.
/// Runs `scaled(8)` sequences of 400 operations; the seed comes from
/// `FUSEE_CONFORMANCE_SEED` or the clock and is printed on failure.
pub fn model_random<H: Harness>(h: &mut H) {
    let _c = Clause::enter("model_random");
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
            step: 0,
        };
        for step in 0..400 {
            run.step = step;
            run.step();
        }
    }
}

impl<H: Harness> Run<'_, H> {
    fn parts(&mut self) -> (&mut ShardParts<MemoryStorage>, &mut ShardParts<H::S>) {
        match (self.m.as_mut(), self.b.as_mut()) {
            (Some(m), Some(b)) => (m, b),
            _ => fail(format_args!("the shard's parts are missing between steps")),
        }
    }

    fn step(&mut self) {
        let step = self.step;
        let op: (fn(&mut Self), &str) = match self.rng.u32(0..100) {
            0..=29 => (Self::append, "append"),
            30..=41 => (Self::flush, "flush"),
            42..=49 => (Self::read, "read"),
            50..=52 => (Self::discard, "discard"),
            53..=64 => (Self::frame_append, "frame append"),
            65..=71 => (Self::frame_read, "frame read"),
            72..=75 => (Self::release, "release"),
            76..=87 => (Self::commit, "commit"),
            88..=91 => (Self::compare_index, "index read"),
            92..=95 => (Self::reopen, "reopen"),
            _ => (Self::crash, "crash"),
        };
        (op.0)(self);
        let name = op.1;
        let (m, b) = self.parts();
        check_eq!(
            b.log.last_lsn(),
            m.log.last_lsn(),
            "step {step} ({name}): the backend's last_lsn must be the model's"
        );
        check_eq!(
            b.log.durable_lsn(),
            m.log.durable_lsn(),
            "step {step} ({name}): the backend's durable_lsn must be the model's"
        );
    }

    fn reopen(&mut self) {
        self.restart(false);
    }

    fn crash(&mut self) {
        self.restart(true);
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
            let step = self.step;
            let (m, b) = self.parts();
            let lsn = match kind {
                0 => m.log.last_lsn() + 2,
                1 => m.log.last_lsn(),
                _ => m.log.last_lsn() + 1,
            };
            let rm = m.log.append(lsn, &bytes);
            let rb = b.log.append(lsn, &bytes);
            check!(
                rm.is_ok() == rb.is_ok(),
                "step {step}: append({lsn}) of {len} bytes must come out as the model's: expected {rm:?}; found {rb:?}"
            );
            if rm.is_ok() {
                let at = usize::try_from(lsn - 1).unwrap_or(usize::MAX);
                self.appended.truncate(at);
                self.appended.push(bytes);
            }
        }
    }

    fn flush(&mut self) {
        let step = self.step;
        let (m, b) = self.parts();
        let rm = m.log.flush();
        let rb = b.log.flush();
        check!(
            rm.as_ref().ok() == rb.as_ref().ok(),
            "step {step}: flush must return the model's durable LSN: expected {rm:?}; found {rb:?}"
        );
    }

    fn read(&mut self) {
        let (m, b) = self.parts();
        let first = m.log.first_lsn().max(b.log.first_lsn());
        let last = m.log.last_lsn();
        let after = first - 1 + self.rng.u64(0..=last + 1 - first);
        let step = self.step;
        let (m, b) = self.parts();
        let (rm, em) = must!(
            read_log(&mut m.log, after),
            "step {step}: the model's read(after {after})"
        );
        let (rb, eb) = must!(
            read_log(&mut b.log, after),
            "step {step}: read(after {after})"
        );
        check_eq!(
            eb,
            em,
            "step {step}: read(after {after}) must return the model's last LSN"
        );
        check_eq!(
            rb.iter().map(|(lsn, _)| *lsn).collect::<Vec<_>>(),
            rm.iter().map(|(lsn, _)| *lsn).collect::<Vec<_>>(),
            "step {step}: read(after {after}) must visit the model's LSNs"
        );
        for ((lsn, found), (_, expected)) in rb.iter().zip(&rm) {
            check_bytes(
                found,
                expected,
                format_args!("step {step}: read(after {after}), record {lsn}"),
            );
        }
    }

    fn discard(&mut self) {
        let durable = self.parts().0.log.durable_lsn();
        let lsn = self.rng.u64(0..=durable);
        let step = self.step;
        let (m, b) = self.parts();
        let rm = m.log.discard_through(lsn);
        let rb = b.log.discard_through(lsn);
        check!(
            rm.is_ok() == rb.is_ok(),
            "step {step}: discard_through({lsn}) must come out as the model's: expected {rm:?}; found {rb:?}"
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
        let step = self.step;
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
            (rm, rb) => check!(
                rm.is_ok() == rb.is_ok(),
                "step {step}: append of a {len} B frame must come out as the model's: expected {rm:?}; found {rb:?}"
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
        let step = self.step;
        let (m, b) = self.parts();
        must!(
            m.runs.read(mref, &mut om),
            "step {step}: the model's read of frame {mref:?}"
        );
        must!(
            b.runs.read(bref, &mut ob),
            "step {step}: the read of live frame {bref:?}"
        );
        let bytes = &self.live[i].bytes;
        check_bytes(
            &om,
            bytes,
            format_args!("step {step}: the model's frame {mref:?}"),
        );
        check_bytes(&ob, bytes, format_args!("step {step}: live frame {bref:?}"));
    }

    fn release(&mut self) {
        if self.live.is_empty() {
            return;
        }
        let i = self.rng.usize(0..self.live.len());
        let f = self.live.swap_remove(i);
        let step = self.step;
        let (m, b) = self.parts();
        must!(
            m.runs.release(f.model),
            "step {step}: the model's release of {:?}",
            f.model
        );
        must!(
            b.runs.release(f.backend),
            "step {step}: release of live frame {:?}",
            f.backend
        );
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
        let step = self.step;
        let (m, b) = self.parts();
        let (rm, rb) = if base {
            stream(&mut m.checkpoint, &records);
            must!(b.checkpoint.begin_base(), "step {step}: begin_base");
            for c in records.chunks(4) {
                must!(
                    b.checkpoint.base_chunk(&super::concat(c)),
                    "step {step}: base_chunk"
                );
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
        let kind = if base { "base" } else { "delta" };
        let (cm, cb) = match (rm, rb) {
            (Ok(cm), Ok(cb)) => (cm, cb),
            (rm, rb) => fail(format_args!(
                "step {step}: a {kind} commit of {} records must succeed as the model's: expected {rm:?}; found {rb:?}",
                records.len()
            )),
        };
        check_eq!(
            cb.index_records,
            cm.index_records,
            "step {step}: a {kind} commit must return the model's index_records"
        );
        for f in &mut self.live {
            f.committed = true;
        }
        self.released.clear();
    }

    fn compare_index(&mut self) {
        let step = self.step;
        let (m, b) = self.parts();
        check_index(
            &read_index(&mut b.checkpoint),
            &read_index(&mut m.checkpoint),
            format_args!("step {step}: the index must be the model's"),
        );
    }

    fn restart(&mut self, crash: bool) {
        // Parts first, then storages.
        self.m = None;
        self.b = None;
        let (Some(model), Some(backend)) = (self.model.take(), self.backend.take()) else {
            fail(format_args!("the storages are missing between steps"));
        };
        let step = self.step;
        let what = if crash { "crash" } else { "reopen" };
        let (model, backend) = if crash {
            (model.crash(), self.h.crash(backend))
        } else {
            (model.reopen(), self.h.reopen(backend))
        };
        let mut m = open(&model, SHARD);
        let mut b = open(&backend, SHARD);
        check_eq!(
            b.recovered.checkpoint,
            m.recovered.checkpoint,
            "step {step}: after a {what}, recovered.checkpoint must be the model's"
        );
        check_eq!(
            b.recovered.index_records,
            m.recovered.index_records,
            "step {step}: after a {what}, recovered.index_records must be the model's"
        );
        // The model keeps exactly the flushed records; the backend may keep
        // more of the unflushed tail, which must be what was appended.
        let (ml, bl) = (m.log.last_lsn(), b.log.last_lsn());
        check!(
            bl >= ml,
            "step {step}: after a {what}, the log must keep every flushed record: expected last_lsn {ml} or more; found {bl}"
        );
        let (extra, _) = must!(
            read_log(&mut b.log, ml),
            "step {step}: after a {what}, read(after {ml}) of the unflushed records kept"
        );
        for (lsn, bytes) in extra {
            let Some(want) = self
                .appended
                .get(usize::try_from(lsn - 1).unwrap_or(usize::MAX))
            else {
                fail(format_args!(
                    "step {step}: after a {what}, the log may keep only records appended; found record {lsn}, never appended"
                ));
            };
            check_bytes(
                &bytes,
                want,
                format_args!("step {step}: after a {what}, unflushed record {lsn} kept"),
            );
            must!(
                m.log.append(lsn, &bytes),
                "step {step}: the model's append({lsn}) of a record the backend kept"
            );
        }
        must!(m.log.flush(), "step {step}: the model's flush");
        // Frames: uncommitted ones are gone in both; releases not committed
        // are undone.
        let mut out = Vec::new();
        let released = std::mem::take(&mut self.released);
        self.live.extend(released);
        let (keep, gone): (Vec<Frame>, Vec<Frame>) = std::mem::take(&mut self.live)
            .into_iter()
            .partition(|f| f.committed);
        for f in &gone {
            let r = b.runs.read(f.backend, &mut out);
            check!(
                r.is_err(),
                "step {step}: after a {what}, the read of frame {:?}, appended after the last commit, must fail; found Ok with {} bytes",
                f.backend,
                out.len()
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
    must!(c.begin_base(), "the model's begin_base");
    must!(
        c.base_chunk(&super::concat(records)),
        "the model's base_chunk"
    );
}
