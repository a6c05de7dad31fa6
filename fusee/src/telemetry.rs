//! The engine's figures in the Prometheus text exposition format:
//! [`render`] turns an [`Engine`](crate::Engine) into the text a `/metrics` endpoint
//! serves, whatever HTTP stack serves it ([`CONTENT_TYPE`] is its
//! `Content-Type`).
//!
//! # Made from durable records
//!
//! What a workflow did (steps attempted, runs started and ended, timers
//! fired, schedule fires, queue items started) is counted from its records
//! when they become durable: the shard notes each such record as it
//! appends it, and counts the notes a flush made durable when the flush
//! completes. A record a crash takes back is never counted, and a restart
//! counts nothing again: recovery replays records through the core, not
//! through the append that notes them. (A record made durable by a flush
//! whose completion the process did not live to see is not counted: the
//! figures are at most once, never twice.)
//!
//! The shard's own figures ([`crate::Metrics`]: flushes, loaded and parked
//! runs, queue depth, checkpoints, seals, parks) are read from each shard
//! at every render, labelled by shard.
//!
//! # Cost
//!
//! With [`Config::metrics`](crate::Config::metrics) off (it is on by
//! default) the shard pays one branch per record appended. With it on, a
//! record of the kinds above costs a note (a look-up of its run, two
//! reference-count increments and a push) when appended, and a local count
//! when durable; a flush costs two histogram observations and one shared
//! counter increment per label set it touched. The `telemetry` figure of
//! `benches/benches/engine.rs` measures the chain and the fanout with
//! metrics on against off, in one run (`cargo bench -p fusee-benches
//! --no-default-features --features file --bench engine -- telemetry`).
//!
//! # Why `prometheus-client`
//!
//! The official Prometheus client for Rust: typed label sets, no global
//! registry (the engine keeps its own, so two engines in one process never
//! mix their figures and the embedder's registry is left alone), the
//! classic text format 0.0.4 that every Prometheus version scrapes, and
//! no dependencies beyond `parking_lot`, `itoa` and `dtoa`. The `metrics`
//! facade records through a process-global recorder, which an embedded
//! engine must not install.
//!
//! # Labels
//!
//! Label sets are bounded: `workflow` (a registered workflow type),
//! `step` (a step name as the code gives it: keep run-specific values out
//! of step names), `outcome` and `status` (fixed sets), `shard` (the
//! store's fixed count), `schedule` and `queue` (names an operator
//! creates). A run ID is never a label.
//!
//! # The metrics and spans
//!
//! Every metric [`render`] exposes and every span the `otel` feature
//! exports ([`crate::otel`]: spans carry attributes, not labels; those
//! every span has, `fusee.shard`, `fusee.run`, `fusee.lsn` and
//! `fusee.span.begin`, are not repeated).
//!
//! | name | type | labels / attributes | what |
//! |---|---|---|---|
//! | `fusee_step_attempts_total` | counter | workflow, step, outcome | step attempts whose result is durable; outcome `ok`, `failed` (final), `retried` (a failed attempt the retry policy retries), `paused` (one it pauses) |
//! | `fusee_run_starts_total` | counter | workflow | durable `Start`s (fresh, child, continue-as-new, reset) |
//! | `fusee_run_ends_total` | counter | workflow, status | durable `Done`s; status `ok`, `failed`, `cancelled`, `timed_out`, `terminated`, `continued_as_new`, `reset` |
//! | `fusee_run_duration_seconds` | histogram | workflow | from a run's start to its durable `Done`, by the times the records carry |
//! | `fusee_timer_lateness_seconds` | histogram | workflow | how long after its due time a durable sleep's `Fired` was recorded |
//! | `fusee_schedule_fires_total` | counter | schedule, workflow | fires a schedule started (durable) |
//! | `fusee_queue_starts_total` | counter | queue, workflow | items a queue started (durable) |
//! | `fusee_flush_duration_seconds` | histogram | shard | a log flush's I/O |
//! | `fusee_flush_records` | histogram | shard | records per flush |
//! | `fusee_flushes_total`, `fusee_flushed_records_total` | counter | shard | flushes, and the records they made durable |
//! | `fusee_shard_runs_started_total`, `fusee_shard_runs_finished_total` | counter | shard | runs started, and whose result was released |
//! | `fusee_shard_step_attempts_total` | counter | shard | step attempts whose end was appended (`Step` or `Attempt`), as `fusee_step_attempts_total` without its labels (cheap to sum for a steps-per-second rate) |
//! | `fusee_loaded_runs`, `fusee_parked_runs`, `fusee_dormant_runs` | gauge | shard | runs in memory, runs parked in the run store, runs in memory whose code dozed |
//! | `fusee_queued_inputs` | gauge | shard | inputs waiting in the shard's queue |
//! | `fusee_unacknowledged_messages` | gauge | shard | messages to other workflows not yet recorded by their target |
//! | `fusee_recovered_records` | gauge | shard | log records the last open replayed |
//! | `fusee_shard_open_duration_seconds` | gauge | shard | how long the shard's last open (recovery) took |
//! | `fusee_checkpoints_total`, `fusee_seals_total`, `fusee_parks_total`, `fusee_loads_total`, `fusee_dozes_total`, `fusee_compactions_total`, `fusee_compaction_frames_moved_total`, `fusee_run_store_frames_read_total`, `fusee_run_store_read_bytes_total` | counter | shard | checkpoints, log seals, runs parked, parked runs loaded, runs whose code dozed, run-store compactions, frames they moved, run-store frames read and their bytes (the recovery's not counted) |
//! | `fusee_sealed_lsn` | gauge | shard | the LSN the shard's last seal recorded |
//! | `fusee_shard_owned` | gauge | shard | 1 while this engine owns the shard |
//! | `fusee_shard_opens_total` | counter | shard | opens of the shard by this engine; under [`Ownership::Lease`](crate::Ownership::Lease) each after the first is a takeover |
//! | `fusee_shard_losses_total` | counter | shard | times the engine lost the shard (a storage failure or fencing) |
//! | `fusee_fencing_refusals_total` | counter | shard | writes the storage refused because another owner took the shard over |
//! | `run <workflow type>` | span | `fusee.workflow.type`, `fusee.workflow.id`, `fusee.run.status` | a run, from its `Start`'s time to its `Done`'s; the child of the trace context given at start, or of its parent's `child` span |
//! | `step <step name>` | span | `fusee.step.name`, `fusee.step.seq`, `fusee.step.attempt`, `fusee.step.outcome` (`ok`, `failed`, `retried`, `paused`, `cut`), `error.type` | one step attempt, from its `Began`, ended by its `Step` or `Attempt` (`cut`: by a later `Began` of its step, the attempt having never ended) |
//! | `sleep <timer name>` | span | `fusee.timer.name` | a durable sleep, `Timer` to `Fired` |
//! | `wait <signal name>` | span | `fusee.signal.name`, `fusee.wait.outcome` (`signal`, `timed_out`, `abandoned`) | a signal wait, `Wait` to `Waited` |
//! | `child <workflow type>` | span | `fusee.child.type`, `fusee.child.id`, `fusee.child.status`, `error.type` | a child seen from its parent, `Child` to `ChildDone`; the child's `run` span is its child |
//! | `update <handler name>` | span | `fusee.update.name`, `fusee.update.id`, `fusee.update.status`, `error.type` | an update handled, `Update` to `UpdateDone` |
//!
//! Counters of shard figures start again from 0 when the engine opens (a
//! Prometheus counter reset, which `rate` handles).
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), fusee::Error> {
//! let engine = fusee::Engine::open(fusee::Config::memory()).await?;
//! let text = fusee::telemetry::render(&engine).await;
//! assert!(text.contains("# TYPE fusee_flushes_total counter"));
//! // Serve `text` at /metrics with `Content-Type: fusee::telemetry::CONTENT_TYPE`.
//! engine.close().await?;
//! # Ok(())
//! # }
//! ```

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use fusee_core::record::{Lsn, Name, PAUSED, Record, Status, ToPayload};
use fusee_core::shard::{LoadedRun, ShardCore};
use prometheus_client::encoding::{EncodeLabelSet, prometheus_text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use rustc_hash::FxHashMap;

use crate::metrics::ShardMetrics;

/// The `Content-Type` of [`render`]'s text: the Prometheus text format,
/// version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// What [`render`] reads of an engine; [`Engine`](crate::Engine) is the
/// one implementation (no other crate can make a [`Figures`]). A trait so
/// that this module, which the runtime counts into, does not import the
/// engine that owns the runtime.
pub trait Exposition {
    /// The engine's figures now.
    #[doc(hidden)]
    fn figures(&self) -> impl std::future::Future<Output = Figures> + Send;
}

/// An engine's figures as [`render`] reads them (made by the engine only).
#[doc(hidden)]
pub struct Figures {
    /// Each owned shard's figures.
    shards: Vec<(u32, ShardMetrics)>,
    /// Each shard's (number, owned, opens, losses).
    owners: Vec<(u32, bool, u64, u64)>,
    /// The record-derived figures, when telemetry is on.
    telemetry: Option<Arc<Telemetry>>,
}

impl Figures {
    pub(crate) fn new(
        shards: Vec<(u32, ShardMetrics)>,
        owners: Vec<(u32, bool, u64, u64)>,
        telemetry: Option<Arc<Telemetry>>,
    ) -> Self {
        Self {
            shards,
            owners,
            telemetry,
        }
    }
}

/// The engine's figures in the Prometheus text exposition format (see the
/// [module docs](self) for the names). Asks each shard the engine owns for
/// its figures, as [`Engine::metrics`](crate::Engine::metrics) does; a
/// closed engine's text has its record-derived figures only.
pub async fn render(engine: &impl Exposition) -> String {
    let Figures {
        shards,
        owners,
        telemetry,
    } = engine.figures().await;
    let mut registry = Registry::default();
    if let Some(t) = &telemetry {
        t.register(&mut registry);
    }
    register_shards(&mut registry, &shards);
    let owned = Family::<ShardLabel, Gauge>::default();
    let opens = Family::<ShardLabel, Counter>::default();
    let losses = Family::<ShardLabel, Counter>::default();
    for &(shard, is_owned, opened, lost) in &owners {
        let l = ShardLabel { shard };
        owned.get_or_create(&l).set(i64::from(is_owned));
        opens.get_or_create(&l).inc_by(opened);
        losses.get_or_create(&l).inc_by(lost);
    }
    registry.register(
        "fusee_shard_owned",
        "1 while this engine owns the shard",
        owned,
    );
    registry.register(
        "fusee_shard_opens",
        "Opens of the shard by this engine (under leases, each after the first is a takeover)",
        opens,
    );
    registry.register(
        "fusee_shard_losses",
        "Times this engine lost the shard (a storage failure or fencing)",
        losses,
    );
    let mut text = String::new();
    // Writing to a String fails only if a label or help text does not
    // encode, which ours always do.
    let _ = prometheus_text::encode(&mut text, &registry);
    text
}

/// A shard's figures as counters and gauges labelled by shard.
fn register_shards(registry: &mut Registry, shards: &[(u32, ShardMetrics)]) {
    type Read = fn(&ShardMetrics) -> u64;
    let counters: [(&str, &str, Read); 14] = [
        ("fusee_flushes", "Log flushes completed", |m| m.flushes),
        (
            "fusee_flushed_records",
            "Records log flushes made durable",
            |m| m.flushed_records,
        ),
        (
            "fusee_shard_runs_started",
            "Runs started on the shard",
            |m| m.started,
        ),
        (
            "fusee_shard_runs_finished",
            "Runs whose result the shard released",
            |m| m.finished,
        ),
        (
            "fusee_shard_step_attempts",
            "Step attempts whose end the shard appended (without labels: a cheap steps-per-second rate)",
            |m| m.step_attempts,
        ),
        ("fusee_checkpoints", "Checkpoints committed", |m| {
            m.checkpoints
        }),
        ("fusee_seals", "Seals of the log written", |m| m.seals),
        (
            "fusee_parks",
            "Runs parked (written to the run store, dropped from memory)",
            |m| m.parks,
        ),
        ("fusee_loads", "Parked runs loaded back", |m| m.loads),
        (
            "fusee_dozes",
            "Times a waiting run's code was dropped (the run stays in memory)",
            |m| m.dozes,
        ),
        ("fusee_compactions", "Run-store compactions", |m| {
            m.compactions
        }),
        (
            "fusee_compaction_frames_moved",
            "Frames run-store compactions moved",
            |m| m.frames_moved,
        ),
        (
            "fusee_run_store_frames_read",
            "Run-store frames the shard read",
            |m| m.frame_reads,
        ),
        (
            "fusee_run_store_read_bytes",
            "Bytes of the run-store frames the shard read",
            |m| m.frame_read_bytes,
        ),
    ];
    for (name, help, read) in counters {
        let family = Family::<ShardLabel, Counter>::default();
        for (shard, m) in shards {
            family
                .get_or_create(&ShardLabel { shard: *shard })
                .inc_by(read(m));
        }
        registry.register(name, help, family);
    }
    let gauges: [(&str, &str, Read); 7] = [
        ("fusee_loaded_runs", "Runs in memory", |m| m.loaded_runs),
        ("fusee_parked_runs", "Runs parked in the run store", |m| {
            m.parked_runs
        }),
        (
            "fusee_dormant_runs",
            "Runs in memory whose code dozed",
            |m| m.dormant_runs,
        ),
        (
            "fusee_queued_inputs",
            "Inputs waiting in the shard's queue",
            |m| m.queued,
        ),
        (
            "fusee_unacknowledged_messages",
            "Messages to other workflows not yet recorded by their target",
            |m| m.unacknowledged_messages,
        ),
        (
            "fusee_recovered_records",
            "Log records the shard's last open replayed",
            |m| m.recovered_records,
        ),
        (
            "fusee_sealed_lsn",
            "The LSN the shard's last seal recorded",
            |m| m.sealed_lsn,
        ),
    ];
    for (name, help, read) in gauges {
        let family = Family::<ShardLabel, Gauge>::default();
        for (shard, m) in shards {
            let v = i64::try_from(read(m)).unwrap_or(i64::MAX);
            family.get_or_create(&ShardLabel { shard: *shard }).set(v);
        }
        registry.register(name, help, family);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabel {
    shard: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkflowLabel {
    workflow: Name,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    workflow: Name,
    step: Name,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    workflow: Name,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScheduleLabels {
    schedule: Name,
    workflow: Name,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: Name,
    workflow: Name,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// The engine's record-derived and flush figures, shared by its shards
/// (each adds to them) and [`render`].
pub(crate) struct Telemetry {
    step_attempts: Family<StepLabels, Counter>,
    run_starts: Family<WorkflowLabel, Counter>,
    run_ends: Family<EndLabels, Counter>,
    run_duration: Histograms<WorkflowLabel>,
    timer_lateness: Histograms<WorkflowLabel>,
    schedule_fires: Family<ScheduleLabels, Counter>,
    queue_starts: Family<QueueLabels, Counter>,
    flush_duration: Histograms<ShardLabel>,
    flush_records: Histograms<ShardLabel>,
    fencing_refusals: Family<ShardLabel, Counter>,
    open_duration: Family<ShardLabel, Gauge<f64, AtomicU64>>,
    /// Spans from the same records, to the embedder's tracer provider.
    #[cfg(feature = "otel")]
    traces: Option<crate::otel::Traces>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Self {
            step_attempts: Family::default(),
            run_starts: Family::default(),
            run_ends: Family::default(),
            // 1 ms to about 18 hours.
            run_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 4.0, 13))
            }),
            // 1 ms to about 65 s.
            timer_lateness: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 17))
            }),
            schedule_fires: Family::default(),
            queue_starts: Family::default(),
            // 25 µs to about 1.6 s.
            flush_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_025, 2.0, 17))
            }),
            // 1 to 8,192 records.
            flush_records: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1.0, 2.0, 14))
            }),
            fencing_refusals: Family::default(),
            open_duration: Family::default(),
            #[cfg(feature = "otel")]
            traces: None,
        }
    }
}

impl Telemetry {
    /// The figures of shard `shard`'s loop.
    pub(crate) fn shard(self: &Arc<Self>, shard: u32) -> ShardTelemetry {
        let label = ShardLabel { shard };
        ShardTelemetry {
            flush_duration: self.flush_duration.get_or_create_owned(&label),
            flush_records: self.flush_records.get_or_create_owned(&label),
            shared: Arc::clone(self),
            shard,
            pending: VecDeque::new(),
            steps: FxHashMap::default(),
            starts: FxHashMap::default(),
            ends: FxHashMap::default(),
            #[cfg(feature = "otel")]
            traces: self.traces.as_ref().map(|t| t.shard(shard)),
        }
    }

    /// The same figures, and spans to `traces`.
    #[cfg(feature = "otel")]
    pub(crate) fn with_traces(mut self, traces: crate::otel::Traces) -> Self {
        self.traces = Some(traces);
        self
    }

    /// Shard `shard` opened (recovered) in `seconds`.
    pub(crate) fn opened(&self, shard: u32, seconds: f64) {
        self.open_duration
            .get_or_create(&ShardLabel { shard })
            .set(seconds);
    }

    /// The record-derived and flush figures alone, as text (tests).
    #[cfg(test)]
    pub(crate) fn text(&self) -> String {
        let mut r = Registry::default();
        self.register(&mut r);
        let mut text = String::new();
        let _ = prometheus_text::encode(&mut text, &r);
        text
    }

    fn register(&self, r: &mut Registry) {
        r.register(
            "fusee_step_attempts",
            "Step attempts whose result is durable, by outcome",
            self.step_attempts.clone(),
        );
        r.register(
            "fusee_run_starts",
            "Runs started (durable Start records)",
            self.run_starts.clone(),
        );
        r.register(
            "fusee_run_ends",
            "Runs ended (durable Done records), by status",
            self.run_ends.clone(),
        );
        r.register_with_unit(
            "fusee_run_duration",
            "From a run's start to its durable end",
            Unit::Seconds,
            self.run_duration.clone(),
        );
        r.register_with_unit(
            "fusee_timer_lateness",
            "How long after its due time a durable sleep fired",
            Unit::Seconds,
            self.timer_lateness.clone(),
        );
        r.register(
            "fusee_schedule_fires",
            "Fires a schedule started",
            self.schedule_fires.clone(),
        );
        r.register(
            "fusee_queue_starts",
            "Items a queue started",
            self.queue_starts.clone(),
        );
        r.register_with_unit(
            "fusee_flush_duration",
            "A log flush's I/O",
            Unit::Seconds,
            self.flush_duration.clone(),
        );
        r.register(
            "fusee_flush_records",
            "Records per log flush",
            self.flush_records.clone(),
        );
        r.register(
            "fusee_fencing_refusals",
            "Writes the storage refused because another owner took the shard over",
            self.fencing_refusals.clone(),
        );
        r.register_with_unit(
            "fusee_shard_open_duration",
            "How long the shard's last open (recovery) took",
            Unit::Seconds,
            self.open_duration.clone(),
        );
    }
}

/// What an appended record will count once durable.
enum Note {
    Start {
        wtype: Name,
    },
    Step {
        wtype: Name,
        step: Name,
        outcome: &'static str,
    },
    End {
        wtype: Name,
        status: Status,
        seconds: f64,
    },
    Fired {
        wtype: Name,
        late_ms: u64,
    },
    Fire {
        schedule: Name,
        wtype: Name,
    },
    QueueStart {
        queue: Name,
        wtype: Name,
    },
}

/// Notes a shard's queue keeps room for once it drains (tens of KB).
const PENDING_KEPT_MAX: usize = 1024;

/// One shard loop's side of the figures: the notes of records appended
/// and not yet durable, counted when a flush makes them durable.
pub(crate) struct ShardTelemetry {
    shared: Arc<Telemetry>,
    shard: u32,
    pending: VecDeque<(Lsn, Note)>,
    /// The shared counters this shard adds to, by label set, with what
    /// the flush being counted adds: a flush of a thousand steps touches
    /// a shared counter (its cache line) once, and its family (lock and
    /// hash) only the first time the label set is seen.
    steps: FxHashMap<StepLabels, (Counter, u64)>,
    starts: FxHashMap<Name, (Counter, u64)>,
    ends: FxHashMap<EndLabels, (Counter, u64)>,
    /// This shard's flush histograms.
    flush_duration: Histogram,
    flush_records: Histogram,
    /// This shard's spans (`None`: no tracer).
    #[cfg(feature = "otel")]
    traces: Option<crate::otel::ShardTraces>,
}

impl ShardTelemetry {
    /// Record `rec` was appended at `lsn`, before `core` applied it.
    pub(crate) fn appended<B: ToPayload>(
        &mut self,
        lsn: Lsn,
        rec: &Record<Name, B>,
        core: &ShardCore,
    ) {
        #[cfg(feature = "otel")]
        if let Some(t) = &mut self.traces {
            t.appended(lsn, rec, core);
        }
        // Most records count nothing: only those that do look their run up.
        let run = match rec {
            Record::Start { .. } => None,
            Record::Step { .. }
            | Record::Attempt { .. }
            | Record::Done { .. }
            | Record::Child { .. } => core.get(rec.run()),
            _ => return,
        };
        let note = match (rec, run) {
            (Record::Start { wtype, .. }, _) => Note::Start {
                wtype: wtype.clone(),
            },
            (Record::Step { name, status, .. }, Some(l)) => Note::Step {
                wtype: l.wtype.clone(),
                step: name.clone(),
                outcome: status_label(*status),
            },
            (
                Record::Attempt {
                    name, retry_at_ms, ..
                },
                Some(l),
            ) => Note::Step {
                wtype: l.wtype.clone(),
                step: name.clone(),
                outcome: if *retry_at_ms == PAUSED {
                    "paused"
                } else {
                    "retried"
                },
            },
            (
                Record::Done {
                    status,
                    finished_ms,
                    ..
                },
                Some(l),
            ) if l.done.is_none() => Note::End {
                wtype: l.wtype.clone(),
                status: *status,
                seconds: finished_ms.saturating_sub(l.started_ms) as f64 / 1000.0,
            },
            (Record::Child { wtype, .. }, Some(l)) => {
                if let Some(name) = flow_name(l, crate::schedule::SCHEDULE_WORKFLOW) {
                    Note::Fire {
                        schedule: name,
                        wtype: wtype.clone(),
                    }
                } else if let Some(name) = flow_name(l, crate::queue::QUEUE_WORKFLOW) {
                    Note::QueueStart {
                        queue: name,
                        wtype: wtype.clone(),
                    }
                } else {
                    return;
                }
            }
            _ => return,
        };
        self.pending.push_back((lsn, note));
    }

    /// A durable sleep of run `run` fired `late_ms` after it was due: its
    /// `Fired` was appended at `lsn`.
    pub(crate) fn slept(&mut self, lsn: Lsn, run: Option<&LoadedRun>, late_ms: u64) {
        if let Some(l) = run {
            let wtype = l.wtype.clone();
            self.pending
                .push_back((lsn, Note::Fired { wtype, late_ms }));
        }
    }

    /// A flush of `records` records, whose I/O took `micros`, made the log
    /// durable through `durable`.
    pub(crate) fn durable(&mut self, durable: Lsn, records: u64, micros: u64) {
        #[cfg(feature = "otel")]
        if let Some(t) = &mut self.traces {
            t.durable(durable);
        }
        let t = &*self.shared;
        self.flush_duration.observe(micros as f64 / 1e6);
        self.flush_records.observe(records as f64);
        // Consecutive step notes of one workflow type, step and outcome
        // (a fanout's are all alike) are counted as one: a lookup of their
        // labels each was about 3% of a no-op step's CPU.
        let mut alike: Option<(StepLabels, u64)> = None;
        let step_counter = |l: &StepLabels| t.step_attempts.get_or_create_owned(l);
        while let Some((lsn, _)) = self.pending.front()
            && *lsn <= durable
        {
            let Some((_, note)) = self.pending.pop_front() else {
                break;
            };
            match note {
                Note::Start { wtype } => add(&mut self.starts, wtype, 1, |w| {
                    t.run_starts.get_or_create_owned(&WorkflowLabel {
                        workflow: w.clone(),
                    })
                }),
                Note::Step {
                    wtype,
                    step,
                    outcome,
                } => match &mut alike {
                    Some((l, n))
                        if Arc::ptr_eq(&l.workflow, &wtype)
                            && Arc::ptr_eq(&l.step, &step)
                            && l.outcome == outcome =>
                    {
                        *n += 1;
                    }
                    _ => {
                        let labels = StepLabels {
                            workflow: wtype,
                            step,
                            outcome,
                        };
                        if let Some((l, n)) = alike.replace((labels, 1)) {
                            add(&mut self.steps, l, n, step_counter);
                        }
                    }
                },
                Note::End {
                    wtype,
                    status,
                    seconds,
                } => {
                    let labels = EndLabels {
                        workflow: wtype.clone(),
                        status: status_label(status),
                    };
                    add(&mut self.ends, labels, 1, |l| {
                        t.run_ends.get_or_create_owned(l)
                    });
                    t.run_duration
                        .get_or_create(&WorkflowLabel { workflow: wtype })
                        .observe(seconds);
                }
                Note::Fired { wtype, late_ms } => {
                    t.timer_lateness
                        .get_or_create(&WorkflowLabel { workflow: wtype })
                        .observe(late_ms as f64 / 1000.0);
                }
                Note::Fire { schedule, wtype } => {
                    t.schedule_fires
                        .get_or_create(&ScheduleLabels {
                            schedule,
                            workflow: wtype,
                        })
                        .inc();
                }
                Note::QueueStart { queue, wtype } => {
                    t.queue_starts
                        .get_or_create(&QueueLabels {
                            queue,
                            workflow: wtype,
                        })
                        .inc();
                }
            }
        }
        if let Some((l, n)) = alike {
            add(&mut self.steps, l, n, step_counter);
        }
        // A recovery burst grows the queue to megabytes it would keep.
        if self.pending.is_empty() && self.pending.capacity() > PENDING_KEPT_MAX {
            self.pending.shrink_to(PENDING_KEPT_MAX);
        }
        publish(&mut self.steps);
        publish(&mut self.starts);
        publish(&mut self.ends);
    }

    /// The storage refused a write: another owner fenced this one off.
    pub(crate) fn fenced(&self) {
        self.shared
            .fencing_refusals
            .get_or_create(&ShardLabel { shard: self.shard })
            .inc();
    }
}

/// Adds `n` to what the flush being counted adds to `key`'s counter
/// (found in its family by `counter` the first time).
fn add<K: std::hash::Hash + Eq>(
    counters: &mut FxHashMap<K, (Counter, u64)>,
    key: K,
    n: u64,
    counter: impl FnOnce(&K) -> Counter,
) {
    match counters.get_mut(&key) {
        Some((_, count)) => *count += n,
        None => {
            let c = counter(&key);
            counters.insert(key, (c, n));
        }
    }
}

/// Adds what the flush counted to the shared counters.
fn publish<K>(counters: &mut FxHashMap<K, (Counter, u64)>) {
    for (c, n) in counters.values_mut() {
        if *n > 0 {
            c.inc_by(std::mem::take(n));
        }
    }
}

/// A status as a label value (snake case, as Prometheus labels go); the
/// spans' status attributes spell it the same.
pub(crate) fn status_label(status: Status) -> &'static str {
    match status {
        Status::Ok => "ok",
        Status::Failed => "failed",
        Status::Cancelled => "cancelled",
        Status::TimedOut => "timed_out",
        Status::Terminated => "terminated",
        Status::ContinuedAsNew => "continued_as_new",
        Status::Reset => "reset",
    }
}

/// The schedule's or queue's name when run `l` is one (its ID is the
/// flow's prefix and the name).
fn flow_name(l: &LoadedRun, wtype: &str) -> Option<Name> {
    if &*l.wtype != wtype {
        return None;
    }
    let prefix = if wtype == crate::schedule::SCHEDULE_WORKFLOW {
        crate::schedule::SCHEDULE_ID_PREFIX
    } else {
        crate::queue::QUEUE_ID_PREFIX
    };
    Some(Name::from(l.id.strip_prefix(prefix).unwrap_or(&l.id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drained_note_queue_gives_back_a_bursts_room() {
        let mut shard = Arc::new(Telemetry::default()).shard(0);
        let wtype = Name::from("w");
        for lsn in 1..=10_000 {
            let note = Note::Fired {
                wtype: wtype.clone(),
                late_ms: 0,
            };
            shard.pending.push_back((lsn, note));
        }
        shard.durable(5_000, 5_000, 1);
        assert_eq!(shard.pending.len(), 5_000);
        assert!(shard.pending.capacity() >= 5_000, "notes waiting keep it");
        shard.durable(10_000, 5_000, 1);
        assert!(shard.pending.is_empty());
        assert!(shard.pending.capacity() <= PENDING_KEPT_MAX);
    }

    /// Step notes counted a run of alike ones at a time add up as one by
    /// one would: a change of step, outcome or type (or a name that is
    /// equal but not shared) starts a new run, and the last run counts.
    #[test]
    fn alike_step_notes_add_up_as_one_by_one() {
        let telemetry = Arc::new(Telemetry::default());
        let mut shard = Arc::clone(&telemetry).shard(0);
        let (w, a, b) = (Name::from("w"), Name::from("a"), Name::from("b"));
        let a_again = Name::from("a");
        let notes = [
            (&w, &a, "ok"),
            (&w, &a, "ok"),
            (&w, &a, "ok"),
            (&w, &b, "ok"),
            (&w, &b, "ok"),
            (&w, &a, "failed"),
            (&w, &a, "ok"),
            (&w, &a_again, "ok"),
            (&w, &a, "ok"),
        ];
        for (lsn, (wtype, step, outcome)) in (1..).zip(notes) {
            let note = Note::Step {
                wtype: Name::clone(wtype),
                step: Name::clone(step),
                outcome,
            };
            shard.pending.push_back((lsn, note));
        }
        shard.durable(9, 9, 1);
        let count = |step: &str, outcome: &'static str| {
            telemetry
                .step_attempts
                .get_or_create(&StepLabels {
                    workflow: Name::from("w"),
                    step: Name::from(step),
                    outcome,
                })
                .get()
        };
        assert_eq!(count("a", "ok"), 6);
        assert_eq!(count("b", "ok"), 2);
        assert_eq!(count("a", "failed"), 1);
    }
}
