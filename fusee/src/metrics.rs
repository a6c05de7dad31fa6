//! The engine's figures: [`Metrics`], summed over shards, and the latency
//! histogram behind its percentiles.

/// Sub-buckets per power of two: percentiles within 1/8 (12.5%) of the
/// value.
const SUB: usize = 8;
/// Powers of two covered (microseconds up to 2^40, about 12 days).
const POWERS: usize = 40;

/// A log-linear histogram of durations in microseconds: fixed memory,
/// percentiles within 12.5%.
#[derive(Clone, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max_micros: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; SUB * POWERS],
            total: 0,
            max_micros: 0,
        }
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.total)
            .field("p50_micros", &self.percentile(50.0))
            .field("p99_micros", &self.percentile(99.0))
            .field("max_micros", &self.max_micros)
            .finish()
    }
}

fn bucket(micros: u64) -> usize {
    if micros < SUB as u64 {
        return micros as usize;
    }
    let power = 63 - micros.leading_zeros() as usize; // >= 3
    let sub = ((micros >> (power - 3)) & (SUB as u64 - 1)) as usize;
    ((power - 2) * SUB + sub).min(SUB * POWERS - 1)
}

fn bucket_floor(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let power = b / SUB + 2;
    let sub = (b % SUB) as u64;
    (SUB as u64 + sub) << (power - 3)
}

impl Histogram {
    /// Counts one duration.
    pub fn record(&mut self, micros: u64) {
        self.counts[bucket(micros)] += 1;
        self.total += 1;
        self.max_micros = self.max_micros.max(micros);
    }

    /// How many durations were counted.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `p`-th percentile in microseconds (0 when empty): the lower
    /// bound of its bucket.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((p / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_floor(b).min(self.max_micros);
            }
        }
        self.max_micros
    }

    /// The longest duration counted.
    pub fn max(&self) -> u64 {
        self.max_micros
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max_micros = self.max_micros.max(other.max_micros);
    }
}

/// One shard's figures (see [`Metrics`]).
#[derive(Clone, Debug, Default)]
pub struct ShardMetrics {
    /// Runs started.
    pub started: u64,
    /// Runs whose result was released.
    pub finished: u64,
    /// Step attempts that ended and whose end was appended (a result, or a
    /// failure the step's retry policy retries or pauses): steps worked,
    /// for a steps-per-second rate.
    pub step_attempts: u64,
    /// Flushes completed.
    pub flushes: u64,
    /// Records those flushes made durable.
    pub flushed_records: u64,
    /// How long each flush took until its records were durable, on every
    /// backend: a split flush's I/O (file, PostgreSQL), or the commit that
    /// redb and RocksDB make when the flush begins.
    pub flush_micros: Histogram,
    /// Runs in memory.
    pub loaded_runs: u64,
    /// Runs parked in the run store.
    pub parked_runs: u64,
    /// Loaded runs whose code dozed (dropped while it waited; see
    /// [`crate::Config::doze_after`]).
    pub dormant_runs: u64,
    /// Inputs waiting in the shard's queue.
    pub queued: u64,
    /// Log records the last open replayed (0 after a clean close).
    pub recovered_records: u64,
    /// Checkpoints committed.
    pub checkpoints: u64,
    /// Seals of the log written (see [`crate::Config::seal_after_idle`]).
    pub seals: u64,
    /// The LSN the shard's last seal recorded (summed over shards in
    /// [`Metrics`]; 0 before the first seal of this open).
    pub sealed_lsn: u64,
    /// Runs parked (written to the run store and dropped from memory).
    pub parks: u64,
    /// Parked runs loaded back.
    pub loads: u64,
    /// Times a waiting run's code dozed.
    pub dozes: u64,
    /// Run-store compactions.
    pub compactions: u64,
    /// Frames compactions moved.
    pub frames_moved: u64,
    /// Run-store frames the shard read: loads, lookups of parked runs,
    /// listings, the search index's snapshot and build, compactions (the
    /// recovery's reads of its checkpoint's runs and its log's not counted).
    pub frame_reads: u64,
    /// Bytes of those frames.
    pub frame_read_bytes: u64,
    /// Messages to other workflows sent and not yet recorded by their
    /// target.
    pub unacknowledged_messages: u64,
}

impl ShardMetrics {
    /// Adds `other` to these figures.
    pub fn merge(&mut self, other: &ShardMetrics) {
        self.started += other.started;
        self.finished += other.finished;
        self.step_attempts += other.step_attempts;
        self.flushes += other.flushes;
        self.flushed_records += other.flushed_records;
        self.flush_micros.merge(&other.flush_micros);
        self.loaded_runs += other.loaded_runs;
        self.parked_runs += other.parked_runs;
        self.dormant_runs += other.dormant_runs;
        self.queued += other.queued;
        self.recovered_records += other.recovered_records;
        self.checkpoints += other.checkpoints;
        self.seals += other.seals;
        self.sealed_lsn += other.sealed_lsn;
        self.parks += other.parks;
        self.loads += other.loads;
        self.dozes += other.dozes;
        self.compactions += other.compactions;
        self.frames_moved += other.frames_moved;
        self.frame_reads += other.frame_reads;
        self.frame_read_bytes += other.frame_read_bytes;
        self.unacknowledged_messages += other.unacknowledged_messages;
    }

    /// Mean records per flush (0 before the first flush).
    pub fn records_per_flush(&self) -> f64 {
        if self.flushes == 0 {
            0.0
        } else {
            self.flushed_records as f64 / self.flushes as f64
        }
    }
}

/// The engine's figures, summed over its shards.
pub type Metrics = ShardMetrics;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_within_an_eighth() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v);
        }
        for (p, exact) in [(50.0, 5000u64), (99.0, 9900), (99.9, 9990)] {
            let got = h.percentile(p);
            assert!(
                got <= exact && got * 8 >= exact * 7,
                "p{p}: {got} for exact {exact}"
            );
        }
        assert_eq!(h.max(), 10_000);
        assert_eq!(Histogram::default().percentile(50.0), 0);
        for v in [0u64, 1, 7, 8, 9, 15, 16, 1 << 20, u64::MAX] {
            let b = bucket(v);
            assert!(bucket_floor(b) <= v, "{v}: floor {} above", bucket_floor(b));
        }
    }
}
