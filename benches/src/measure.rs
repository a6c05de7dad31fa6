//! The measurements, written once against [`Target`] and run on every
//! subject, each on fresh files. Subjects take turns ([`measure_all`]): the
//! latency and throughput measurements are split into [`ROUNDS`] rounds,
//! and every subject runs round `r` before any runs round `r + 1`, so a
//! disk that slows down for a minute (another process, the device's own
//! housekeeping) weighs on every subject alike instead of on whichever ran
//! then. The measurements, in order:
//!
//! 1. **Durable append latency**: `plan.latency_samples` times, append one
//!    record and flush; each append + flush timed alone; p50 and p99.
//! 2. **Group-commit throughput**: for each batch size `b` of
//!    [`BATCH_SIZES`], `plan.batch_flushes` flushes of `b` records each;
//!    records per second over the whole loop. Same log as 1.
//! 3. **Run-store write**: `plan.frames` frames (whole journals, about
//!    1.6 KB) written, committed every [`FRAMES_PER_COMMIT`] and at the
//!    end; MB/s (10^6 bytes) over the whole loop including the commits.
//! 4. **Run-store read**: every frame read back once in a seeded random
//!    order and compared with what was written; MB/s. The page cache is not
//!    dropped (that needs root and disturbs other processes): reads are warm
//!    for every subject alike.
//! 5. **Recovery**: `plan.recovery_records` records appended to a second
//!    log in flushes of [`RECOVERY_BATCH`] (untimed), a restart, then the
//!    timed part: open the log and visit every record in order; the count
//!    and total bytes visited must match what was written.
//!
//! The table memory per parked run ([`table_bytes_per_run`]) is the core's
//! alone (every backend parks runs in the same `ShardCore`), so it is
//! measured once per comparison, not per subject.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fusee_core::shard::BlobRef;

use crate::error::{BenchError, Result};
use crate::plan::{BATCH_SIZES, FRAMES_PER_COMMIT, Plan, RECOVERY_BATCH};
use crate::progress::Progress;
use crate::stats::Latencies;
use crate::target::{LogId, Subject, Target};

/// Rounds the latency and each throughput measurement are split into.
pub const ROUNDS: u64 = 10;
use crate::workload::{Frames, LogRecords, parked_sleepers};

/// One figure a comparison reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// Median latency of one record's append + flush, µs.
    AppendP50,
    /// 99th-percentile latency of one record's append + flush, µs.
    AppendP99,
    /// Records per second with this many records per flush.
    Batch(u64),
    /// Run-store frames written and committed, MB/s.
    StoreWrite,
    /// Run-store frames read back in random order, MB/s.
    StoreRead,
    /// Seconds to open the recovery log and visit every record.
    Recovery,
    /// Table bytes per parked run in `ShardCore` (the core's, one figure).
    TableBytes,
}

impl Metric {
    /// Every per-subject metric, in report order.
    pub fn per_subject() -> Vec<Metric> {
        let mut v = vec![Metric::AppendP50, Metric::AppendP99];
        v.extend(BATCH_SIZES.iter().map(|&b| Metric::Batch(b)));
        v.extend([Metric::StoreWrite, Metric::StoreRead, Metric::Recovery]);
        v
    }

    /// Stable identifier for CSV (`append_p50_us`, `batch_16_rps`, ...).
    pub fn key(self) -> String {
        match self {
            Metric::AppendP50 => "append_p50_us".into(),
            Metric::AppendP99 => "append_p99_us".into(),
            Metric::Batch(b) => format!("batch_{b}_rps"),
            Metric::StoreWrite => "store_write_mbps".into(),
            Metric::StoreRead => "store_read_mbps".into(),
            Metric::Recovery => "recovery_s".into(),
            Metric::TableBytes => "table_bytes_per_parked_run".into(),
        }
    }

    /// Human label for tables and the chart.
    pub fn label(self) -> String {
        match self {
            Metric::AppendP50 => "durable append p50".into(),
            Metric::AppendP99 => "durable append p99".into(),
            Metric::Batch(b) => format!("records/s, batch {b}"),
            Metric::StoreWrite => "run-store write".into(),
            Metric::StoreRead => "run-store read".into(),
            Metric::Recovery => "recovery".into(),
            Metric::TableBytes => "table memory per parked run".into(),
        }
    }

    /// The unit of the value.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::AppendP50 | Metric::AppendP99 => "µs",
            Metric::Batch(_) => "records/s",
            Metric::StoreWrite | Metric::StoreRead => "MB/s",
            Metric::Recovery => "s",
            Metric::TableBytes => "bytes",
        }
    }

    /// Whether a larger value is better (throughputs) or worse (times,
    /// bytes).
    pub fn higher_is_better(self) -> bool {
        matches!(
            self,
            Metric::Batch(_) | Metric::StoreWrite | Metric::StoreRead
        )
    }

    /// How many times worse `value` is than `reference`: above 1 is worse,
    /// below 1 better, whatever the metric's direction. `None` when either
    /// is not a positive number.
    pub fn cost_ratio(self, value: f64, reference: f64) -> Option<f64> {
        let usable = |x: f64| x > 0.0 && x.is_finite();
        if !(usable(value) && usable(reference)) {
            return None;
        }
        Some(if self.higher_is_better() {
            reference / value
        } else {
            value / reference
        })
    }
}

/// The figures measured on one subject.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    /// Each metric measured, with its value in [`Metric::unit`].
    pub values: Vec<(Metric, f64)>,
}

impl Figures {
    /// The value of `m`, if measured.
    pub fn get(&self, m: Metric) -> Option<f64> {
        self.values.iter().find(|(k, _)| *k == m).map(|&(_, v)| v)
    }
}

/// Wraps a target error with the subject and phase.
fn at<T>(
    subject: &dyn Subject,
    phase: &'static str,
    r: std::result::Result<T, crate::error::TargetError>,
) -> Result<T> {
    r.map_err(|source| BenchError::Measure {
        subject: subject.name().to_string(),
        phase,
        source,
    })
}

fn mismatch(subject: &dyn Subject, phase: &'static str, what: String) -> BenchError {
    BenchError::Mismatch {
        subject: subject.name().to_string(),
        phase,
        what,
    }
}

fn rate(units: f64, d: Duration) -> f64 {
    units / d.as_secs_f64().max(1e-9)
}

/// Round `r`'s share of `n` (the shares of rounds `0..ROUNDS` add up to `n`).
fn share(n: u64, r: u64) -> u64 {
    n * (r + 1) / ROUNDS - n * r / ROUNDS
}

/// One subject being measured: its open target and what it measured so
/// far.
struct Session<'a> {
    subject: &'a dyn Subject,
    target: Box<dyn Target + 'a>,
    /// The next record of the appends log.
    next: u64,
    latencies: Latencies,
    /// Per batch size: records flushed and time taken.
    batches: [(u64, Duration); 3],
    figures: Figures,
}

impl<'a> Session<'a> {
    fn open(subject: &'a dyn Subject, plan: &Plan, dir: &Path, log: &LogRecords) -> Result<Self> {
        let mut target = at(subject, "open", subject.open(dir))?;
        let total = plan.log_records();
        at(
            subject,
            "open",
            target.prepare_log(LogId::Appends, total, log.bytes(total)),
        )?;
        Ok(Self {
            subject,
            target,
            next: 0,
            latencies: Latencies::with_capacity(plan.latency_samples as usize),
            batches: [(0, Duration::ZERO); 3],
            figures: Figures::default(),
        })
    }

    fn latency(&mut self, samples: u64, log: &LogRecords) -> Result<()> {
        let phase = "append latency";
        let t = self.target.as_mut();
        for _ in 0..samples {
            let start = Instant::now();
            at(
                self.subject,
                phase,
                t.append(LogId::Appends, log.get(self.next)),
            )?;
            at(self.subject, phase, t.flush(LogId::Appends))?;
            self.latencies.push(start.elapsed());
            self.next += 1;
        }
        Ok(())
    }

    fn batches(&mut self, which: usize, flushes: u64, log: &LogRecords) -> Result<()> {
        let phase = "batch throughput";
        let b = BATCH_SIZES[which];
        let t = self.target.as_mut();
        let start = Instant::now();
        for _ in 0..flushes {
            for _ in 0..b {
                at(
                    self.subject,
                    phase,
                    t.append(LogId::Appends, log.get(self.next)),
                )?;
                self.next += 1;
            }
            at(self.subject, phase, t.flush(LogId::Appends))?;
        }
        self.batches[which].0 += b * flushes;
        self.batches[which].1 += start.elapsed();
        Ok(())
    }

    fn store(&mut self, plan: &Plan, progress: &Progress) -> Result<()> {
        let (subject, name) = (self.subject, self.subject.name());
        let t = self.target.as_mut();
        let frames = Frames::new();
        let n = plan.frames;
        let bytes = frames.bytes(n);
        let phase = "run-store write";
        progress.line(format_args!(
            "{name}: run store: writing {n} frames ({:.1} MB)",
            bytes as f64 / 1e6
        ));
        at(subject, phase, t.prepare_frames(n, bytes))?;
        let mut refs: Vec<(u64, BlobRef)> = Vec::with_capacity(n as usize);
        let start = Instant::now();
        for k in 0..n {
            refs.push((k, at(subject, phase, t.put_frame(frames.get(k)))?));
            if (k + 1) % FRAMES_PER_COMMIT == 0 {
                at(subject, phase, t.commit_frames())?;
            }
        }
        at(subject, phase, t.commit_frames())?;
        let took = start.elapsed();
        self.figures
            .values
            .push((Metric::StoreWrite, rate(bytes as f64 / 1e6, took)));

        let phase = "run-store read";
        progress.line(format_args!(
            "{name}: run store: reading {n} frames in random order"
        ));
        fastrand::Rng::with_seed(plan.seed).shuffle(&mut refs);
        let mut out = Vec::new();
        let start = Instant::now();
        for &(k, blob) in &refs {
            at(subject, phase, t.get_frame(blob, &mut out))?;
            if out.as_slice() != frames.get(k) {
                return Err(mismatch(
                    subject,
                    phase,
                    format!("frame {k} at offset {} differs", blob.offset),
                ));
            }
        }
        self.figures
            .values
            .push((Metric::StoreRead, rate(bytes as f64 / 1e6, start.elapsed())));
        Ok(())
    }

    fn recovery(&mut self, plan: &Plan, log: &LogRecords, progress: &Progress) -> Result<()> {
        let (subject, name) = (self.subject, self.subject.name());
        let t = self.target.as_mut();
        let phase = "recovery";
        let n = plan.recovery_records;
        let bytes = log.bytes(n);
        progress.line(format_args!(
            "{name}: recovery: writing {n} records in flushes of {RECOVERY_BATCH}"
        ));
        at(subject, phase, t.prepare_log(LogId::Recovery, n, bytes))?;
        for j in 0..n {
            at(subject, phase, t.append(LogId::Recovery, log.get(j)))?;
            if (j + 1) % RECOVERY_BATCH == 0 || j + 1 == n {
                at(subject, phase, t.flush(LogId::Recovery))?;
            }
        }
        at(subject, phase, t.restart())?;
        progress.line(format_args!("{name}: recovery: reopening and reading"));
        let mut seen = 0u64;
        let start = Instant::now();
        let visited = at(
            subject,
            phase,
            t.replay(LogId::Recovery, &mut |rec| seen += rec.len() as u64),
        )?;
        let took = start.elapsed();
        if visited != n || seen != bytes {
            return Err(mismatch(
                subject,
                phase,
                format!("visited {visited} records of {seen} bytes, wrote {n} of {bytes}"),
            ));
        }
        self.figures
            .values
            .push((Metric::Recovery, took.as_secs_f64()));
        Ok(())
    }

    /// The figures, in [`Metric::per_subject`] order.
    fn finish(mut self) -> Figures {
        let mut values = Vec::new();
        for (m, p) in [(Metric::AppendP50, 50.0), (Metric::AppendP99, 99.0)] {
            if let Some(d) = self.latencies.percentile(p) {
                values.push((m, d.as_secs_f64() * 1e6));
            }
        }
        for (&b, &(n, d)) in BATCH_SIZES.iter().zip(&self.batches) {
            if n > 0 {
                values.push((Metric::Batch(b), rate(n as f64, d)));
            }
        }
        values.append(&mut self.figures.values);
        Figures { values }
    }
}

/// Runs every measurement of the module documentation on each subject,
/// taking turns, subject `i` with its files in `dirs[i]` (empty, existing),
/// and returns each subject's figures in the same order.
pub fn measure_all(
    subjects: &[&dyn Subject],
    plan: &Plan,
    dirs: &[PathBuf],
    progress: &Progress,
) -> Result<Vec<Figures>> {
    debug_assert_eq!(subjects.len(), dirs.len());
    let log = LogRecords::new();
    let mut sessions = Vec::with_capacity(subjects.len());
    for (&s, dir) in subjects.iter().zip(dirs) {
        sessions.push(Session::open(s, plan, dir, &log)?);
    }
    for r in 0..ROUNDS {
        progress.line(format_args!(
            "durable append latency, round {}/{ROUNDS}: {} samples each",
            r + 1,
            share(plan.latency_samples, r)
        ));
        for s in &mut sessions {
            s.latency(share(plan.latency_samples, r), &log)?;
        }
    }
    for (which, (&b, &flushes)) in BATCH_SIZES.iter().zip(&plan.batch_flushes).enumerate() {
        for r in 0..ROUNDS {
            progress.line(format_args!(
                "throughput, batch {b}, round {}/{ROUNDS}: {} flushes each",
                r + 1,
                share(flushes, r)
            ));
            for s in &mut sessions {
                s.batches(which, share(flushes, r), &log)?;
            }
        }
    }
    debug_assert!(sessions.iter().all(|s| s.next == plan.log_records()));
    for s in &mut sessions {
        s.store(plan, progress)?;
    }
    for s in &mut sessions {
        s.recovery(plan, &log, progress)?;
    }
    Ok(sessions.into_iter().map(Session::finish).collect())
}

/// [`measure_all`] for one subject.
pub fn measure(
    subject: &dyn Subject,
    plan: &Plan,
    dir: &Path,
    progress: &Progress,
) -> Result<Figures> {
    let mut all = measure_all(&[subject], plan, &[dir.to_path_buf()], progress)?;
    all.pop()
        .ok_or_else(|| mismatch(subject, "measure", "no figures".into()))
}

/// Table bytes per parked run: `ShardCore::table_bytes` after parking
/// `plan.parked_runs` sleepers whose timers fall a day out, divided by the
/// count.
pub fn table_bytes_per_run(plan: &Plan) -> f64 {
    const DAY_MS: u64 = 24 * 3600 * 1000;
    let n = plan.parked_runs.max(1);
    let core = parked_sleepers(n, DAY_MS, 3600 * 1000, plan.seed);
    core.table_bytes() as f64 / n as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up() {
        for n in [0, 1, 9, 10, 11, 2_000, 12_345] {
            let total: u64 = (0..ROUNDS).map(|r| share(n, r)).sum();
            assert_eq!(total, n, "n = {n}");
        }
    }
}
