//! The measurements, written once against [`Target`] and run on every
//! subject, each on fresh files. Subjects take turns operation by operation
//! ([`measure_all`]): every subject makes one durable append, or one flush
//! of a batch, or writes and commits one group of frames, or reads one
//! block of frames, before any makes the next, and the subject that goes
//! first rotates. A disk or CPU that slows down for a while (another
//! process, the device's own housekeeping) then weighs on every subject
//! alike. Turns of whole rounds (hundreds of flushes each) were too coarse
//! on a shared machine: two identical floors taking turns in blocks of 200
//! flushes of 256 records differed by up to 0.66x to 1.31x in one run, and
//! by 0.96x to 1.05x taking turns flush by flush. The measurements, in
//! order:
//!
//! 1. **Durable append latency**: `plan.latency_samples` times, append one
//!    record and flush; each append + flush timed alone; p50 and p99.
//! 2. **Group-commit throughput**: for each batch size `b` of
//!    [`BATCH_SIZES`], `plan.batch_flushes` flushes of `b` records each;
//!    records per second over the time spent in the appends and the
//!    flushes. Same log as 1. Each batch's appends and its flush are timed
//!    apart, so [`BatchBreakdown`] can say where the time went.
//! 3. **Run-store write**: `plan.frames` frames (whole journals, about
//!    1.6 KB) written, committed every [`FRAMES_PER_COMMIT`] and at the
//!    end; MB/s (10^6 bytes) over the writes and the commits.
//! 4. **Run-store read**: every frame read back once in a seeded random
//!    order (the same for every subject) and compared with what was
//!    written; MB/s. Subjects take turns by blocks of [`READ_BLOCK`]
//!    frames. The page cache is not dropped (that needs root and disturbs
//!    other processes): reads are warm for every subject alike.
//! 5. **Recovery**: `plan.recovery_records` records appended to a second
//!    log in flushes of [`RECOVERY_BATCH`] (untimed), a restart, then the
//!    timed part: open the log and visit every record in order; the count
//!    and total bytes visited must match what was written. One subject
//!    after the other (a restart cannot be split into turns).
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

use crate::workload::{Frames, LogRecords, parked_sleepers};

/// Rounds each measurement's progress is reported in (the subjects take
/// turns much more often: see the module documentation).
pub const ROUNDS: u64 = 10;

/// Frames each subject reads in one turn of the run-store read: enough
/// that a turn takes about a millisecond, so timing it costs nothing.
pub const READ_BLOCK: u64 = 1000;

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
    /// Where the group-commit time went, per batch size measured.
    pub batches: Vec<BatchBreakdown>,
}

/// Where one batch size's group-commit time went on one subject: the
/// appends (the caller's CPU), the flushes at their median, and what the
/// slower flushes added above the median (a segment roll, a checkpoint of
/// the engine, background work of the subject's own competing for the
/// disk, or the machine's noise, which the floor shows).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchBreakdown {
    /// Records per flush.
    pub batch: u64,
    /// Flushes timed.
    pub flushes: u64,
    /// Mean time of one batch's appends, µs.
    pub append_us: f64,
    /// Median flush, µs.
    pub flush_p50_us: f64,
    /// 99th-percentile flush, µs.
    pub flush_p99_us: f64,
    /// Time the flushes spent above the median flush, as a share of the
    /// whole (appends and flushes): the tail's part of the figure.
    pub tail_share: f64,
}

impl Figures {
    /// The value of `m`, if measured.
    pub fn get(&self, m: Metric) -> Option<f64> {
        self.values.iter().find(|(k, _)| *k == m).map(|&(_, v)| v)
    }

    /// The breakdown of batch size `batch`, if measured.
    pub fn batch(&self, batch: u64) -> Option<&BatchBreakdown> {
        self.batches.iter().find(|b| b.batch == batch)
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

/// One batch size's timings on one subject.
#[derive(Default)]
struct BatchTimes {
    records: u64,
    /// Time in `append` calls.
    appending: Duration,
    /// Each flush, timed alone.
    flushes: Latencies,
}

impl BatchTimes {
    /// Records per second and the breakdown of batch size `batch`; `None`
    /// if nothing was measured.
    fn summary(&mut self, batch: u64) -> Option<(f64, BatchBreakdown)> {
        let p50 = self.flushes.percentile(50.0)?;
        let p99 = self.flushes.percentile(99.0)?;
        let total = self.appending + self.flushes.total();
        let flushes = self.flushes.len() as u64;
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        Some((
            rate(self.records as f64, total),
            BatchBreakdown {
                batch,
                flushes,
                append_us: us(self.appending) / flushes.max(1) as f64,
                flush_p50_us: us(p50),
                flush_p99_us: us(p99),
                tail_share: self.flushes.excess_over(p50).as_secs_f64()
                    / total.as_secs_f64().max(1e-9),
            },
        ))
    }
}

/// The run-store measurement's state on one subject.
#[derive(Default)]
struct StoreTimes {
    /// Each frame written, by number, with its address.
    refs: Vec<(u64, BlobRef)>,
    written: Duration,
    read: Duration,
    /// The read buffer, reused as a host would.
    out: Vec<u8>,
}

/// One subject being measured: its open target and what it measured so
/// far.
struct Session<'a> {
    subject: &'a dyn Subject,
    target: Box<dyn Target + 'a>,
    /// The next record of the appends log.
    next: u64,
    latencies: Latencies,
    batches: [BatchTimes; BATCH_SIZES.len()],
    store: StoreTimes,
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
            batches: Default::default(),
            store: StoreTimes::default(),
            figures: Figures::default(),
        })
    }

    /// One durable append of one record, timed.
    fn latency(&mut self, log: &LogRecords) -> Result<()> {
        let phase = "append latency";
        let t = self.target.as_mut();
        let start = Instant::now();
        at(
            self.subject,
            phase,
            t.append(LogId::Appends, log.get(self.next)),
        )?;
        at(self.subject, phase, t.flush(LogId::Appends))?;
        self.latencies.push(start.elapsed());
        self.next += 1;
        Ok(())
    }

    /// One batch of `BATCH_SIZES[which]` records: the appends and the flush
    /// timed apart.
    fn batch(&mut self, which: usize, log: &LogRecords) -> Result<()> {
        let phase = "batch throughput";
        let b = BATCH_SIZES[which];
        let t = self.target.as_mut();
        let start = Instant::now();
        for _ in 0..b {
            at(
                self.subject,
                phase,
                t.append(LogId::Appends, log.get(self.next)),
            )?;
            self.next += 1;
        }
        let appended = Instant::now();
        at(self.subject, phase, t.flush(LogId::Appends))?;
        let times = &mut self.batches[which];
        times.flushes.push(appended.elapsed());
        times.appending += appended - start;
        times.records += b;
        Ok(())
    }

    /// Untimed: makes the target ready for `plan.frames` frames.
    fn prepare_store(&mut self, plan: &Plan, frames: &Frames) -> Result<()> {
        let n = plan.frames;
        self.store.refs = Vec::with_capacity(n as usize);
        at(
            self.subject,
            "run-store write",
            self.target.prepare_frames(n, frames.bytes(n)),
        )
    }

    /// Writes frames `range` and commits them, timed.
    fn write_group(&mut self, range: std::ops::Range<u64>, frames: &Frames) -> Result<()> {
        let phase = "run-store write";
        let (subject, t) = (self.subject, self.target.as_mut());
        let start = Instant::now();
        for k in range {
            let blob = at(subject, phase, t.put_frame(frames.get(k)))?;
            self.store.refs.push((k, blob));
        }
        at(subject, phase, t.commit_frames())?;
        self.store.written += start.elapsed();
        Ok(())
    }

    /// Reads back the frames at positions `range` of the shuffled
    /// references, timed, and checks each against what was written.
    fn read_block(&mut self, range: std::ops::Range<usize>, frames: &Frames) -> Result<()> {
        let phase = "run-store read";
        let (subject, t) = (self.subject, self.target.as_mut());
        let store = &mut self.store;
        let refs = store.refs.get(range.clone()).ok_or_else(|| {
            mismatch(
                subject,
                phase,
                format!("frames {range:?} of {} written", store.refs.len()),
            )
        })?;
        let start = Instant::now();
        for &(k, blob) in refs {
            at(subject, phase, t.get_frame(blob, &mut store.out))?;
            if store.out.as_slice() != frames.get(k) {
                return Err(mismatch(
                    subject,
                    phase,
                    format!("frame {k} at offset {} differs", blob.offset),
                ));
            }
        }
        store.read += start.elapsed();
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
    fn finish(mut self, frame_bytes: u64) -> Figures {
        let mut values = Vec::new();
        let mut batches = Vec::new();
        for (m, p) in [(Metric::AppendP50, 50.0), (Metric::AppendP99, 99.0)] {
            if let Some(d) = self.latencies.percentile(p) {
                values.push((m, d.as_secs_f64() * 1e6));
            }
        }
        for (&b, times) in BATCH_SIZES.iter().zip(&mut self.batches) {
            if let Some((per_s, breakdown)) = times.summary(b) {
                values.push((Metric::Batch(b), per_s));
                batches.push(breakdown);
            }
        }
        if !self.store.refs.is_empty() {
            let mb = frame_bytes as f64 / 1e6;
            values.push((Metric::StoreWrite, rate(mb, self.store.written)));
            values.push((Metric::StoreRead, rate(mb, self.store.read)));
        }
        values.append(&mut self.figures.values);
        Figures { values, batches }
    }
}

/// Runs `op` once on every session, beginning with session `turn` (modulo
/// their count): the one that goes first changes from turn to turn, so
/// none always follows the same neighbour.
fn in_turn(
    sessions: &mut [Session<'_>],
    turn: u64,
    mut op: impl FnMut(&mut Session<'_>) -> Result<()>,
) -> Result<()> {
    let n = sessions.len();
    let first = (turn % n.max(1) as u64) as usize;
    for j in 0..n {
        op(&mut sessions[(first + j) % n])?;
    }
    Ok(())
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
    let mut turn = 0u64;
    for r in 0..ROUNDS {
        let samples = share(plan.latency_samples, r);
        progress.line(format_args!(
            "durable append latency, round {}/{ROUNDS}: {samples} samples each",
            r + 1,
        ));
        for _ in 0..samples {
            in_turn(&mut sessions, turn, |s| s.latency(&log))?;
            turn += 1;
        }
    }
    for (which, (&b, &flushes)) in BATCH_SIZES.iter().zip(&plan.batch_flushes).enumerate() {
        for r in 0..ROUNDS {
            let n = share(flushes, r);
            progress.line(format_args!(
                "throughput, batch {b}, round {}/{ROUNDS}: {n} flushes each",
                r + 1,
            ));
            for _ in 0..n {
                in_turn(&mut sessions, turn, |s| s.batch(which, &log))?;
                turn += 1;
            }
        }
    }
    debug_assert!(sessions.iter().all(|s| s.next == plan.log_records()));
    store(&mut sessions, plan, progress)?;
    for s in &mut sessions {
        s.recovery(plan, &log, progress)?;
    }
    let frame_bytes = Frames::new().bytes(plan.frames);
    Ok(sessions
        .into_iter()
        .map(|s| s.finish(frame_bytes))
        .collect())
}

/// The run-store write and read, subjects taking turns by commit group and
/// by block of reads.
fn store(sessions: &mut [Session<'_>], plan: &Plan, progress: &Progress) -> Result<()> {
    let frames = Frames::new();
    let n = plan.frames;
    for s in sessions.iter_mut() {
        s.prepare_store(plan, &frames)?;
    }
    let groups = n.div_ceil(FRAMES_PER_COMMIT);
    let mut turn = 0u64;
    for r in 0..ROUNDS {
        let share = share(groups, r);
        progress.line(format_args!(
            "run store: writing, round {}/{ROUNDS}: {share} commits of up to {FRAMES_PER_COMMIT} \
             frames each ({:.1} MB in all per subject)",
            r + 1,
            frames.bytes(n) as f64 / 1e6
        ));
        for _ in 0..share {
            let first = turn * FRAMES_PER_COMMIT;
            let range = first..(first + FRAMES_PER_COMMIT).min(n);
            in_turn(sessions, turn, |s| s.write_group(range.clone(), &frames))?;
            turn += 1;
        }
    }
    for s in sessions.iter_mut() {
        // The same seed and count: every subject reads the frames in the
        // same order.
        fastrand::Rng::with_seed(plan.seed).shuffle(&mut s.store.refs);
    }
    let blocks = n.div_ceil(READ_BLOCK);
    let mut turn = 0u64;
    for r in 0..ROUNDS {
        let share = share(blocks, r);
        progress.line(format_args!(
            "run store: reading in random order, round {}/{ROUNDS}: {share} blocks of up to \
             {READ_BLOCK} frames each",
            r + 1,
        ));
        for _ in 0..share {
            let first = (turn * READ_BLOCK) as usize;
            let range = first..((turn + 1) * READ_BLOCK).min(n) as usize;
            in_turn(sessions, turn, |s| s.read_block(range.clone(), &frames))?;
            turn += 1;
        }
    }
    Ok(())
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
