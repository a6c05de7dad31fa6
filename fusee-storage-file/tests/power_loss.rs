//! Seeded power-loss test on the simulated disk: random appends, flushes,
//! run-store writes and releases, commits (deltas and bases), compactions,
//! discards, injected sync failures and power cuts. After every cut the
//! shard must hold every flushed record unchanged (and nothing that was not
//! appended), the checkpoint and index of the last successful commit, and
//! every frame that commit names.
//!
//! `FUSEE_POWER_LOSS_SEEDS` (default 10000) sets how many seeds run;
//! `FUSEE_SEED` reruns one. A failure names its seed.

use std::collections::BTreeMap;

use fusee_core::shard::BlobRef;
use fusee_storage::{
    CheckpointStore, INDEX_RECORD, IndexChange, LogStore, RunStore, ShardParts, Storage,
    StorageError,
};
use fusee_storage_file::sim::{CrashMode, SimIo};
use fusee_storage_file::{FileOptions, FileStorage, FlushMethod};

type Parts = ShardParts<FileStorage<SimIo>>;

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("FUSEE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let n = std::env::var("FUSEE_POWER_LOSS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000u64);
    (1..=n).collect()
}

fn open(io: &SimIo) -> (FileStorage<SimIo>, Parts) {
    let options = FileOptions {
        segment_bytes: 16 << 10,
        flush: FlushMethod::DataSync,
        ..FileOptions::default()
    };
    let storage = FileStorage::open_with(io.clone(), "/p", options).expect("open storage");
    let parts = storage.open_shard(0).expect("open shard");
    (storage, parts)
}

/// An index record for `run` with some payload bytes.
fn index_record(run: u64, tag: u8) -> [u8; INDEX_RECORD] {
    let mut r = [tag; INDEX_RECORD];
    let word = run | (2u64 << 48);
    r[8..16].copy_from_slice(&word.to_le_bytes());
    r
}

fn delete_record(run: u64) -> [u8; INDEX_RECORD] {
    let mut r = [0; INDEX_RECORD];
    let word = run | (u64::from(fusee_storage::DELETED) << 48);
    r[8..16].copy_from_slice(&word.to_le_bytes());
    r
}

/// A frame the test wrote: its bytes, and where it is now.
#[derive(Clone)]
struct Frame {
    bytes: Vec<u8>,
    now: BlobRef,
    released: bool,
}

/// What a commit made durable (or may have, if it failed).
#[derive(Clone, Default)]
struct Commit {
    index: BTreeMap<u64, [u8; INDEX_RECORD]>,
    checkpoint: Option<Vec<u8>>,
    frames: Vec<Frame>,
}

struct World {
    seed: u64,
    rng: fastrand::Rng,
    io: SimIo,
    storage: Option<FileStorage<SimIo>>,
    parts: Option<Parts>,
    /// Every record appended, by LSN - 1.
    appended: Vec<Vec<u8>>,
    flushed: u64,
    discarded: u64,
    frames: Vec<Frame>,
    index: BTreeMap<u64, [u8; INDEX_RECORD]>,
    committed: Commit,
    /// A commit that failed: a cut may yield it or the one before.
    maybe: Option<Commit>,
    commits: u64,
    cuts: u64,
}

impl World {
    /// A failed flush or commit must be the injected I/O failure.
    fn assert_io(&self, e: &StorageError) {
        assert!(
            matches!(e, StorageError::Io { .. }),
            "seed {}: {e}",
            self.seed
        );
    }

    fn parts(&mut self) -> &mut Parts {
        self.parts.as_mut().expect("open")
    }

    fn append(&mut self) {
        for _ in 0..self.rng.usize(1..8) {
            let len = if self.rng.u8(..) < 8 {
                self.rng.usize(0..40_000)
            } else {
                self.rng.usize(0..400)
            };
            let mut bytes = vec![0u8; len];
            self.rng.fill(&mut bytes);
            let lsn = self.appended.len() as u64 + 1;
            self.parts().log.append(lsn, &bytes).expect("append");
            self.appended.push(bytes);
        }
    }

    /// A flush; `false` if it failed (the world must then be cut).
    fn flush(&mut self) -> bool {
        if self.rng.u8(0..30) == 0 {
            self.io.fail_next_syncs(1);
        }
        let covers = self.appended.len() as u64;
        let result = if self.rng.bool() {
            self.parts().log.flush()
        } else {
            // Split in two, as a host's group commit does: more records
            // arrive while the ticket is out, and the power may go then.
            match self.parts().log.begin_flush() {
                Err(e) => Err(e),
                Ok(mut ticket) => {
                    if self.rng.bool() {
                        self.append();
                    }
                    if self.rng.bool() {
                        ticket.run();
                    }
                    if self.rng.u8(0..8) == 0 {
                        drop(ticket);
                        self.io.fail_next_syncs(0);
                        // `cut` checks the records the ticket covered may
                        // be there or not, whole.
                        self.cut();
                        return true;
                    }
                    self.parts().log.finish_flush(ticket)
                }
            }
        };
        self.io.fail_next_syncs(0);
        match result {
            Ok(durable) => {
                assert_eq!(durable, covers, "seed {}", self.seed);
                self.flushed = durable;
                true
            }
            Err(e) => {
                self.assert_io(&e);
                false
            }
        }
    }

    fn frame_append(&mut self) {
        let len = self.rng.usize(0..6000);
        let mut bytes = vec![0u8; len];
        self.rng.fill(&mut bytes);
        let blob = self.parts().runs.append(&bytes).expect("frame append");
        self.frames.push(Frame {
            bytes,
            now: blob,
            released: false,
        });
    }

    fn release(&mut self) {
        let live: Vec<usize> = (0..self.frames.len())
            .filter(|&i| !self.frames[i].released)
            .collect();
        if live.is_empty() {
            return;
        }
        let i = live[self.rng.usize(0..live.len())];
        let blob = self.frames[i].now;
        self.parts().runs.release(blob).expect("release");
        self.frames[i].released = true;
    }

    fn compact(&mut self) {
        let mut moves = BTreeMap::new();
        let parts = self.parts.as_mut().expect("open");
        parts
            .runs
            .compact(&mut |old, new| {
                moves.insert(old.offset, new);
            })
            .expect("compact");
        for f in &mut self.frames {
            if let Some(new) = moves.remove(&f.now.offset) {
                f.now = new;
            }
        }
        assert!(
            moves.is_empty(),
            "seed {}: moves of unknown frames",
            self.seed
        );
    }

    /// A commit; `false` if it failed (the world must then be cut).
    fn commit(&mut self) -> bool {
        let base = self.rng.u8(0..5) == 0;
        let mut staged = self.index.clone();
        let mut delta = Vec::new();
        for _ in 0..self.rng.usize(0..20) {
            let run = self.rng.u64(1..60);
            if self.rng.u8(0..4) == 0 {
                staged.remove(&run);
                delta.extend_from_slice(&delete_record(run));
            } else {
                let r = index_record(run, self.rng.u8(..));
                staged.insert(run, r);
                delta.extend_from_slice(&r);
            }
        }
        let mut checkpoint = vec![0u8; self.rng.usize(0..3000)];
        self.rng.fill(&mut checkpoint);
        checkpoint.extend_from_slice(&self.commits.to_le_bytes());
        if self.rng.u8(0..20) == 0 {
            self.io.fail_syncs_after(self.rng.u32(0..4), 1);
        }
        let parts = self.parts.as_mut().expect("open");
        let result = if base {
            let mut all = Vec::new();
            staged.values().for_each(|r| all.extend_from_slice(r));
            parts.checkpoint.begin_base().expect("begin base");
            for chunk in all.chunks(INDEX_RECORD * 7) {
                parts.checkpoint.base_chunk(chunk).expect("base chunk");
            }
            parts
                .checkpoint
                .commit(&mut parts.runs, IndexChange::Base, &checkpoint)
        } else {
            parts
                .checkpoint
                .commit(&mut parts.runs, IndexChange::Delta(&delta), &checkpoint)
        };
        self.io.fail_next_syncs(0);
        self.commits += 1;
        let frames: Vec<Frame> = self
            .frames
            .iter()
            .filter(|f| !f.released)
            .cloned()
            .collect();
        let candidate = Commit {
            index: staged.clone(),
            checkpoint: Some(checkpoint),
            frames,
        };
        match result {
            Ok(c) => {
                assert_eq!(c.index_records, staged.len() as u64, "seed {}", self.seed);
                self.index = staged;
                self.frames = candidate.frames.clone();
                self.committed = candidate;
                // The log before a commit's point may go.
                if self.rng.bool() && self.flushed > 0 {
                    let upto = self.rng.u64(0..=self.flushed);
                    self.parts().log.discard_through(upto).expect("discard");
                    self.discarded = self.discarded.max(upto);
                }
                true
            }
            Err(e) => {
                self.assert_io(&e);
                self.maybe = Some(candidate);
                false
            }
        }
    }

    /// Cuts the power and checks what the reopened shard holds.
    fn cut(&mut self) {
        self.parts = None;
        self.storage = None;
        self.cuts += 1;
        self.io
            .crash(CrashMode::Random(self.seed.wrapping_mul(7919) + self.cuts));
        let (storage, mut parts) = open(&self.io);
        let seed = self.seed;
        // The log: a prefix of what was appended that holds every flushed
        // record, unchanged.
        let last = parts.log.last_lsn();
        assert!(
            last >= self.flushed,
            "seed {seed}: flushed through {} but recovered through {last}",
            self.flushed
        );
        assert!(
            last <= self.appended.len() as u64,
            "seed {seed}: invented records"
        );
        let first = parts.log.first_lsn();
        assert!(first <= self.discarded + 1, "seed {seed}: kept too little");
        let mut next = first;
        parts
            .log
            .read(first - 1, &mut |lsn, bytes| {
                assert_eq!(lsn, next, "seed {seed}: hole in the log");
                assert_eq!(
                    bytes,
                    &self.appended[(lsn - 1) as usize][..],
                    "seed {seed}: record {lsn} changed"
                );
                next += 1;
                Ok(())
            })
            .expect("read the log");
        assert_eq!(next, last + 1, "seed {seed}");
        self.appended.truncate(last as usize);
        self.flushed = last;
        // The checkpoint, index and frames of the last commit (or of a
        // failed one, whole).
        if let Some(maybe) = self.maybe.take()
            && parts.recovered.checkpoint == maybe.checkpoint
        {
            self.committed = maybe;
        }
        assert_eq!(
            parts.recovered.checkpoint, self.committed.checkpoint,
            "seed {seed}: checkpoint"
        );
        let mut index = BTreeMap::new();
        parts
            .checkpoint
            .read_index(&mut |chunk| {
                for r in chunk.chunks_exact(INDEX_RECORD) {
                    let mut rec = [0u8; INDEX_RECORD];
                    rec.copy_from_slice(r);
                    index.insert(fusee_storage::index_record_run(&rec), rec);
                }
                Ok(())
            })
            .expect("read index");
        assert_eq!(index, self.committed.index, "seed {seed}: index");
        self.index = self.committed.index.clone();
        self.frames = self.committed.frames.clone();
        let mut buf = Vec::new();
        for f in &self.frames {
            parts.runs.read(f.now, &mut buf).expect("committed frame");
            assert_eq!(buf, f.bytes, "seed {seed}: frame at {:?}", f.now);
        }
        self.storage = Some(storage);
        self.parts = Some(parts);
    }
}

/// Names the seed of a failing run.
struct SeedGuard(u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "power-loss run failed with seed {0} (rerun: FUSEE_SEED={0})",
                self.0
            );
        }
    }
}

#[test]
fn no_flushed_record_or_committed_frame_is_lost_to_a_power_cut() {
    for seed in seeds() {
        let _guard = SeedGuard(seed);
        let io = SimIo::new();
        let (storage, parts) = open(&io);
        let mut w = World {
            seed,
            rng: fastrand::Rng::with_seed(seed),
            io,
            storage: Some(storage),
            parts: Some(parts),
            appended: Vec::new(),
            flushed: 0,
            discarded: 0,
            frames: Vec::new(),
            index: BTreeMap::new(),
            committed: Commit::default(),
            maybe: None,
            commits: 0,
            cuts: 0,
        };
        let trace = std::env::var("FUSEE_TRACE").is_ok();
        for _ in 0..60 {
            let op = w.rng.u8(0..100);
            if trace {
                eprintln!(
                    "op {op} appended {} flushed {}",
                    w.appended.len(),
                    w.flushed
                );
            }
            let ok = match op {
                0..=34 => {
                    w.append();
                    true
                }
                35..=54 => w.flush(),
                55..=67 => {
                    w.frame_append();
                    true
                }
                68..=72 => {
                    w.release();
                    true
                }
                73..=75 => {
                    w.compact();
                    true
                }
                76..=89 => w.commit(),
                _ => {
                    w.cut();
                    true
                }
            };
            if !ok {
                w.cut();
            }
        }
        w.cut();
    }
}
