//! The measurements, written once against [`Target`] and run in this order
//! on every subject, each on fresh files:
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

use std::time::{Duration, Instant};

use fusee_core::shard::BlobRef;

use crate::error::{BenchError, Result};
use crate::plan::{BATCH_SIZES, FRAMES_PER_COMMIT, Plan, RECOVERY_BATCH};
use crate::progress::Progress;
use crate::stats::Latencies;
use crate::target::{LogId, Subject, Target};
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

/// Runs every measurement of the module documentation on `subject`, with
/// its files in `dir` (empty, existing), and returns the figures.
pub fn measure(
    subject: &dyn Subject,
    plan: &Plan,
    dir: &std::path::Path,
    progress: &Progress,
) -> Result<Figures> {
    let name = subject.name();
    let records = LogRecords::new();
    let mut target = at(subject, "open", subject.open(dir))?;
    let t = target.as_mut();
    let mut figures = Figures::default();

    // 1. Latency.
    progress.line(format_args!(
        "{name}: durable append latency, {} samples",
        plan.latency_samples
    ));
    let phase = "append latency";
    let total = plan.log_records();
    at(
        subject,
        phase,
        t.prepare_log(LogId::Appends, total, records.bytes(total)),
    )?;
    let mut lat = Latencies::with_capacity(plan.latency_samples as usize);
    let mut i = 0u64;
    for _ in 0..plan.latency_samples {
        let start = Instant::now();
        at(subject, phase, t.append(LogId::Appends, records.get(i)))?;
        at(subject, phase, t.flush(LogId::Appends))?;
        lat.push(start.elapsed());
        i += 1;
    }
    for (m, p) in [(Metric::AppendP50, 50.0), (Metric::AppendP99, 99.0)] {
        if let Some(d) = lat.percentile(p) {
            figures.values.push((m, d.as_secs_f64() * 1e6));
        }
    }

    // 2. Group commit.
    let phase = "batch throughput";
    for (&b, &flushes) in BATCH_SIZES.iter().zip(&plan.batch_flushes) {
        progress.line(format_args!(
            "{name}: throughput, {flushes} flushes of {b} records"
        ));
        let start = Instant::now();
        for _ in 0..flushes {
            for _ in 0..b {
                at(subject, phase, t.append(LogId::Appends, records.get(i)))?;
                i += 1;
            }
            at(subject, phase, t.flush(LogId::Appends))?;
        }
        figures.values.push((
            Metric::Batch(b),
            rate((b * flushes) as f64, start.elapsed()),
        ));
    }
    debug_assert_eq!(i, total);

    // 3 and 4. Run store.
    store(subject, t, plan, progress, &mut figures)?;

    // 5. Recovery.
    let phase = "recovery";
    let n = plan.recovery_records;
    let bytes = records.bytes(n);
    progress.line(format_args!(
        "{name}: recovery: writing {n} records in flushes of {RECOVERY_BATCH}"
    ));
    at(subject, phase, t.prepare_log(LogId::Recovery, n, bytes))?;
    for j in 0..n {
        at(subject, phase, t.append(LogId::Recovery, records.get(j)))?;
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
    figures.values.push((Metric::Recovery, took.as_secs_f64()));
    Ok(figures)
}

fn store(
    subject: &dyn Subject,
    t: &mut dyn Target,
    plan: &Plan,
    progress: &Progress,
    figures: &mut Figures,
) -> Result<()> {
    let name = subject.name();
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
    figures.values.push((
        Metric::StoreWrite,
        rate(bytes as f64 / 1e6, start.elapsed()),
    ));

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
    figures
        .values
        .push((Metric::StoreRead, rate(bytes as f64 / 1e6, start.elapsed())));
    Ok(())
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
