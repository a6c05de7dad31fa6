//! The fixed workload of a comparison run: how much of each measurement,
//! in `--quick` and full mode. Every subject runs the same plan on the same
//! bytes ([`crate::workload`]).

use crate::engine::EnginePlan;

/// The batch sizes of the group-commit throughput measurement.
pub const BATCH_SIZES: [u64; 3] = [1, 16, 256];

/// How many records one flush covers while the recovery log is written
/// (untimed; the log a busy shard leaves behind). Large enough that writing
/// a million records costs under a thousand flushes per subject, which
/// keeps `--quick` under two minutes on a slow, shared disk.
pub const RECOVERY_BATCH: u64 = 1024;

/// Frames appended between two commits of the run store (about 1.6 MB):
/// a host commits its run store with each checkpoint, not per frame.
pub const FRAMES_PER_COMMIT: u64 = 1000;

/// How much of each measurement one run makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Whether this is the `--quick` plan (or derived from it).
    pub quick: bool,
    /// Durable appends of one record timed one by one (append + flush).
    pub latency_samples: u64,
    /// For each of [`BATCH_SIZES`], how many flushes of that many records.
    pub batch_flushes: [u64; 3],
    /// Run-store frames written (then committed) and read back.
    pub frames: u64,
    /// Records written to the log that recovery then reads.
    pub recovery_records: u64,
    /// Parked runs in the `ShardCore` whose table memory is measured.
    pub parked_runs: u64,
    /// Seed of every random choice (frame read order, timer times).
    pub seed: u64,
    /// The engine workloads ([`crate::engine`]).
    pub engine: EnginePlan,
}

impl Plan {
    /// The full plan: a few minutes for four backends and the two
    /// references on a disk whose `fdatasync` takes a few hundred
    /// microseconds (well under fifteen).
    pub fn full() -> Self {
        Self {
            quick: false,
            latency_samples: 20_000,
            batch_flushes: [10_000, 4_000, 2_000],
            frames: 200_000,
            recovery_records: 1_000_000,
            parked_runs: 1_000_000,
            seed: 0x00F0_05EE,
            engine: EnginePlan::full(),
        }
    }

    /// The `--quick` plan: under two minutes on the same disk, with the
    /// same recovery size (the figure the issue names) and fewer samples.
    pub fn quick() -> Self {
        Self {
            quick: true,
            latency_samples: 1_000,
            batch_flushes: [500, 200, 100],
            frames: 50_000,
            engine: EnginePlan::quick(),
            ..Self::full()
        }
    }

    /// This plan with `samples` latency samples and flush counts scaled to
    /// them as in the standard plans (a half, a fifth and a tenth; at least
    /// 4 flushes per batch size).
    pub fn with_samples(mut self, samples: u64) -> Self {
        let samples = samples.max(4);
        self.batch_flushes = [
            (samples / 2).max(4),
            (samples / 5).max(4),
            (samples / 10).max(4),
        ];
        self.latency_samples = samples;
        self
    }

    /// Records appended to the latency and batch log in all.
    pub fn log_records(&self) -> u64 {
        self.latency_samples
            + BATCH_SIZES
                .iter()
                .zip(self.batch_flushes)
                .map(|(b, f)| b * f)
                .sum::<u64>()
    }

    /// One line naming every count, for reports.
    pub fn describe(&self) -> String {
        format!(
            "{} plan: {} single-record durable appends; {}/{}/{} flushes of 1/16/256 records; \
             {} run-store frames (commit every {}); recovery of {} records written in batches of {}; \
             {} parked runs; seed {:#x}",
            if self.quick { "quick" } else { "full" },
            self.latency_samples,
            self.batch_flushes[0],
            self.batch_flushes[1],
            self.batch_flushes[2],
            self.frames,
            FRAMES_PER_COMMIT,
            self.recovery_records,
            RECOVERY_BATCH,
            self.parked_runs,
            self.seed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_scale_like_the_standard_plans() {
        assert_eq!(Plan::quick().with_samples(1_000), Plan::quick());
        assert_eq!(Plan::full().with_samples(20_000), Plan::full());
        let tiny = Plan::quick().with_samples(1);
        assert_eq!(tiny.latency_samples, 4);
        assert_eq!(tiny.batch_flushes, [4, 4, 4]);
        assert_eq!(tiny.log_records(), 4 + 4 + 16 * 4 + 256 * 4);
    }
}
