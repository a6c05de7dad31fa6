//! OpenTelemetry traces made from durable records (feature `otel`).
//!
//! Pass your own tracer provider in [`Config::tracer`](crate::Config::tracer):
//! the engine takes a tracer named `fusee` from it and never installs,
//! reads or replaces the global provider. Export, batching and sampling
//! are the provider's (a `BatchSpanProcessor` keeps the export off the
//! shard threads; the provider's sampler sees the trace context given at
//! start as the parent).
//!
//! ```no_run
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), fusee::Error> {
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//! let provider = SdkTracerProvider::builder()
//!     // .with_batch_exporter(your OTLP exporter)
//!     .build();
//! let engine = fusee::Engine::open(fusee::Config::memory().tracer(provider.clone())).await?;
//! # engine.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Made from durable records, once
//!
//! A shard notes the records that end a span as it appends them, and
//! emits the span when the flush that makes them durable comes back, at
//! the same hook points as the metrics ([`crate::telemetry`]). Recovery
//! replays records through the core, not through the append, so a restart
//! emits nothing again; a record a crash takes back never made a span; a
//! span whose ending record is durable but whose flush the process did not
//! live to see is lost (at most once, never twice). Span IDs are hashes of
//! durable facts ([`crate::trace`]), so the process that ends a span gives
//! it the ID its children already name as their parent.
//!
//! # The spans
//!
//! One per run, step attempt, durable sleep, signal wait, child and update
//! handled: the names and attributes are in the one table of metric and
//! span names, in [`crate::telemetry`]'s docs. Every span also has `fusee.shard`, `fusee.run` and `fusee.lsn` (the
//! log position of the record that ended it). A run's span is the child
//! of the context given at start, or of its parent's child span (the
//! child's run may be on another shard or in another process); every
//! other span is the child of its run's span. No OpenTelemetry semantic
//! convention covers workflows, so the names are `fusee.*`; `error.type`
//! is the convention's (a step error's or failure's kind). A failed step,
//! a failed attempt, a run that failed, was cancelled, timed out or was
//! terminated, a child that did and an update that failed set the span
//! status to `Error` with the recorded message; everything else leaves it
//! unset.
//!
//! # Times and their limits
//!
//! Times are the engine clock's, in ms. A run's span runs from the start
//! time its `Start` records to the finish time its `Done` records. The
//! other records carry no time, so the shard notes the time it appended
//! each: a sleep, wait, child or update begins when its opening record was
//! appended and ends when its closing one was.
//!
//! A step attempt begins at the time its `Began` records (`recorded`),
//! before its function ran. A journal written before `Began` existed
//! gives the best time the shard knows (`fusee.span.begin` says which):
//! the time its previous attempt's `Attempt` asked it to run at
//! (`retry_time`), else the time the run's previous record was appended
//! (`previous_record`). What began before this process opened the shard
//! (a recovered run's sleep, wait, child or update) begins at the shard's
//! open (`recovered`): the earlier part is not in any record.
//!
//! An attempt cut before it ended (a crash, or its run reloaded) has a
//! `Began` and no end; the next `Began` of its step supersedes it, and
//! then (once that is durable) the cut attempt gets its one span: from its
//! own `Began`'s time to the superseding one's (to the shard's open when
//! the cut was before it), status `Error` saying it was cut,
//! `fusee.step.outcome` `cut`, and an ID of its own (the attempt run again
//! under the same number keeps the attempt's ID, which the cut attempt's
//! own outgoing calls named as their parent).
//!
//! # Cost
//!
//! Without a tracer the shard pays one branch per record. With one, a
//! record that opens or ends a span costs a note (a hash-map look-up of its
//! run, the clock read) and each span one build and end on the provider at
//! the flush; the shard keeps, per run with spans open, its trace context
//! and the opening times of what is open (dropped at its `Done`).
//!
//! Measured (`cargo bench -p fusee-benches --no-default-features
//! --features file --bench engine -- telemetry`, metrics and traces to a
//! batch processor exporting to a no-op sink, against both off, on a busy
//! shared 2-core machine, 2026-12-04): the chain of 300 steps on the file
//! backend 1.018x (goal 1.05: met); the fanout of 2,000 workflows of 10
//! steps 2.28x in memory and 1.62x on files (goal not met). With a
//! provider that has no processor (spans built and dropped), the fanout
//! was 1.45x and 1.39x: about 40% is building spans on the shard thread
//! (several allocations here and in the SDK per span), the rest the batch
//! processor's thread taking CPU from the shard threads. Building spans
//! off the shard thread is the next step; not done yet.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use fusee_core::record::{
    Lsn, Name, PAUSED, Record, RecordBuf, RunId, Status, WaitOutcome, iter_canonical,
};
use fusee_core::shard::ShardCore;
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanContext, SpanId, SpanKind, Status as SpanStatus, TraceContextExt,
    TraceFlags, TraceId, TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use rustc_hash::FxHashMap;

use crate::client::InFlight;
use crate::clock::Clock;
use crate::trace::{RunTrace, SpanOf};

/// The engine's side of tracing: the tracer and the clock, shared by its
/// shards.
#[derive(Clone, Debug)]
pub(crate) struct Traces {
    tracer: SdkTracer,
    clock: Clock,
}

impl Traces {
    /// Spans to `provider`'s tracer `fusee`, timed by `clock`.
    pub(crate) fn new(provider: &SdkTracerProvider, clock: Clock) -> Self {
        Self {
            tracer: provider.tracer("fusee"),
            clock,
        }
    }

    /// Shard `shard`'s side, opened now.
    pub(crate) fn shard(&self, shard: u32) -> ShardTraces {
        ShardTraces {
            tracer: self.tracer.clone(),
            opened_ms: self.clock.now_ms(),
            clock: self.clock.clone(),
            shard,
            runs: FxHashMap::default(),
            pending: VecDeque::new(),
        }
    }
}

/// Where a span's begin time came from (`fusee.span.begin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Begin {
    /// A record carries it (the run's `Start`; a step's start record,
    /// once there is one).
    Recorded,
    /// The shard appended the span's opening record then.
    Appended,
    /// A retried attempt: the time its previous attempt asked for.
    RetryTime,
    /// An attempt: the time the run's previous record was appended.
    PreviousRecord,
    /// It opened before this process opened the shard: the open's time.
    Recovered,
}

impl Begin {
    fn label(self) -> &'static str {
        match self {
            Begin::Recorded => "recorded",
            Begin::Appended => "appended",
            Begin::RetryTime => "retry_time",
            Begin::PreviousRecord => "previous_record",
            Begin::Recovered => "recovered",
        }
    }
}

/// What the shard knows of a run with spans open, in this process.
struct RunMarks {
    trace: RunTrace,
    wtype: Name,
    id: Name,
    /// When its latest record was appended (the shard's open for a run
    /// first seen after it).
    last_ms: u64,
    last: Begin,
    /// What is open: the span, when it began and how that is known, its
    /// name and a detail (a child's ID, an update's ID).
    open: Vec<(SpanOf, u64, Begin, Name, Name)>,
    /// Step attempts begun before this process opened the shard and not
    /// ended in the journal (operation, attempt, begin time, name): each
    /// is a cut attempt once a later `Began` of its step supersedes it.
    cut: Vec<(u32, u32, u64, Name)>,
}

impl RunMarks {
    fn take(&mut self, of: SpanOf) -> Option<(u64, Begin, Name, Name)> {
        let i = self.open.iter().position(|o| o.0 == of)?;
        let (_, ms, how, name, detail) = self.open.swap_remove(i);
        Some((ms, how, name, detail))
    }
}

/// A span to emit once its ending record is durable.
struct Note {
    trace: RunTrace,
    run: RunId,
    name: String,
    parent: Parent,
    span_id: [u8; 8],
    begin_ms: u64,
    end_ms: u64,
    status: SpanStatus,
    attributes: Vec<KeyValue>,
}

/// A span's parent.
enum Parent {
    /// The run span's: the context given at start or the parent's child
    /// span, or none (a root).
    OfRun,
    /// Its run's span.
    Run,
}

/// One shard loop's side of tracing: notes of the records appended that
/// end spans, emitted when a flush makes them durable.
pub(crate) struct ShardTraces {
    tracer: SdkTracer,
    clock: Clock,
    shard: u32,
    opened_ms: u64,
    runs: FxHashMap<RunId, RunMarks>,
    pending: VecDeque<(Lsn, Note)>,
}

impl ShardTraces {
    /// Record `rec` was appended at `lsn`, before `core` applied it.
    pub(crate) fn appended(&mut self, lsn: Lsn, rec: &RecordBuf, core: &ShardCore) {
        let run = rec.run();
        if let RecordBuf::Start { .. } = rec {
            // A new run of this number: its marks are made from its loaded
            // state by its next record (the core has not applied this one).
            self.runs.remove(&run);
            return;
        }
        let Some(l) = core.get(run) else {
            return;
        };
        let now = self.clock.now_ms();
        let (shard, opened_ms) = (self.shard, self.opened_ms);
        let marks = self.runs.entry(run).or_insert_with(|| {
            // First seen since the shard opened: its `Start` was the
            // previous record (started here), or the run was recovered or
            // loaded and nothing before the open is known.
            let (last_ms, last) = if l.started_ms >= opened_ms {
                (l.started_ms, Begin::Recorded)
            } else {
                (opened_ms, Begin::Recovered)
            };
            // Read once per run and process: a run started here holds its
            // `Start` alone by now, a recovered one what it did before.
            let cut = unended_attempts(&l.journal);
            RunMarks {
                trace: RunTrace::of(shard, run, l),
                wtype: l.wtype.clone(),
                id: l.id.clone(),
                last_ms,
                last,
                open: Vec::new(),
                cut,
            }
        });
        let (prev_ms, prev) = (marks.last_ms, marks.last);
        marks.last_ms = now;
        marks.last = Begin::PreviousRecord;
        let trace = marks.trace;
        // What a span opened before this process has for a begin; its
        // names are in its opening record, if the run's journal in memory
        // still holds it.
        let recovered = |of: SpanOf| {
            let (name, detail) = opening_names(&l.journal, of);
            (opened_ms, Begin::Recovered, name, detail)
        };
        let note = |name: String,
                    of: Option<SpanOf>,
                    begin: (u64, Begin),
                    status,
                    mut attributes: Vec<KeyValue>| {
            attributes.push(KeyValue::new("fusee.span.begin", begin.1.label()));
            Note {
                trace,
                run,
                name,
                parent: if of.is_some() {
                    Parent::Run
                } else {
                    Parent::OfRun
                },
                span_id: of.map_or(trace.span_id, |o| trace.span(o)),
                begin_ms: begin.0,
                end_ms: now,
                status,
                attributes,
            }
        };
        let open = |of: SpanOf, name: &Name, detail: Name| {
            (of, now, Begin::Appended, name.clone(), detail)
        };
        let n = match rec {
            RecordBuf::Began {
                seq,
                name,
                attempt,
                started_ms,
                ..
            } => {
                // What this `Began` supersedes: one of the step's, with no
                // end, begun in this process (its run was reloaded) or
                // before it (a crash cut the attempt). The retry-time guess
                // an `Attempt` left is replaced by the recorded time.
                let mut cut = None;
                if let Some(i) = marks
                    .open
                    .iter()
                    .position(|o| matches!(o.0, SpanOf::Attempt(s, _) if s == *seq))
                {
                    let (of, ms, how, n, _) = marks.open.swap_remove(i);
                    if let (SpanOf::Attempt(_, a), Begin::Recorded) = (of, how) {
                        cut = Some((a, ms, n, now));
                    }
                }
                if let Some(i) = marks.cut.iter().position(|c| c.0 == *seq) {
                    let (_, a, ms, n) = marks.cut.swap_remove(i);
                    // Its process was gone by the shard's open.
                    cut = Some((a, ms, n, opened_ms.max(ms)));
                }
                marks.open.push((
                    SpanOf::Attempt(*seq, *attempt),
                    *started_ms,
                    Begin::Recorded,
                    name.clone(),
                    Name::from(""),
                ));
                let Some((a, ms, n, end_ms)) = cut else {
                    return;
                };
                let status = SpanStatus::error(
                    "the attempt was cut: it began and never ended (its process stopped, \
                     or its run was reloaded); a later attempt superseded it",
                );
                let mut note = note(
                    format!("step {n}"),
                    Some(SpanOf::Cut(*seq, a, ms)),
                    (ms, Begin::Recorded),
                    status,
                    attempt_attributes(&n, *seq, a, "cut"),
                );
                note.end_ms = end_ms;
                note
            }
            RecordBuf::Step {
                seq,
                name,
                attempt,
                status,
                payload,
                ..
            } => {
                let begin = marks
                    .take(SpanOf::Attempt(*seq, *attempt))
                    .map(|(ms, how, ..)| (ms, how))
                    .unwrap_or((prev_ms, prev));
                let failed = *status != Status::Ok;
                let (span_status, kind) = error_of(failed, payload);
                let mut a =
                    attempt_attributes(name, *seq, *attempt, if failed { "failed" } else { "ok" });
                a.extend(kind);
                note(
                    format!("step {name}"),
                    Some(SpanOf::Attempt(*seq, *attempt)),
                    begin,
                    span_status,
                    a,
                )
            }
            RecordBuf::Attempt {
                seq,
                name,
                attempt,
                retry_at_ms,
                error,
                ..
            } => {
                let begin = marks
                    .take(SpanOf::Attempt(*seq, *attempt))
                    .map(|(ms, how, ..)| (ms, how))
                    .unwrap_or((prev_ms, prev));
                let next = SpanOf::Attempt(*seq, attempt.saturating_add(1));
                let paused = *retry_at_ms == PAUSED;
                if !paused {
                    let empty = Name::from("");
                    marks.open.push((
                        next,
                        (*retry_at_ms).max(now),
                        Begin::RetryTime,
                        empty.clone(),
                        empty,
                    ));
                }
                let (span_status, kind) = error_of(true, error);
                let mut a = attempt_attributes(
                    name,
                    *seq,
                    *attempt,
                    if paused { "paused" } else { "retried" },
                );
                a.extend(kind);
                note(
                    format!("step {name}"),
                    Some(SpanOf::Attempt(*seq, *attempt)),
                    begin,
                    span_status,
                    a,
                )
            }
            RecordBuf::Timer { seq, name, .. } => {
                marks
                    .open
                    .push(open(SpanOf::Sleep(*seq), name, Name::from("")));
                return;
            }
            RecordBuf::Wait { seq, name, .. } => {
                marks
                    .open
                    .push(open(SpanOf::Wait(*seq), name, Name::from("")));
                return;
            }
            RecordBuf::Child { seq, wtype, id, .. } => {
                marks
                    .open
                    .push(open(SpanOf::Child(*seq), wtype, id.clone()));
                return;
            }
            RecordBuf::Update { id, name, .. } => {
                let ordinal = l.updates().len() as u64;
                marks
                    .open
                    .push(open(SpanOf::Update(ordinal), name, id.clone()));
                return;
            }
            RecordBuf::Fired { seq, .. } => {
                let (ms, how, name, _) = marks
                    .take(SpanOf::Sleep(*seq))
                    .unwrap_or_else(|| recovered(SpanOf::Sleep(*seq)));
                let a = vec![KeyValue::new("fusee.timer.name", name.to_string())];
                note(
                    format!("sleep {name}"),
                    Some(SpanOf::Sleep(*seq)),
                    (ms, how),
                    SpanStatus::Unset,
                    a,
                )
            }
            RecordBuf::Waited { seq, outcome, .. } => {
                let (ms, how, name, _) = marks
                    .take(SpanOf::Wait(*seq))
                    .unwrap_or_else(|| recovered(SpanOf::Wait(*seq)));
                let outcome = match outcome {
                    WaitOutcome::Signal(_) => "signal",
                    WaitOutcome::TimedOut => "timed_out",
                    WaitOutcome::Abandoned => "abandoned",
                };
                let a = vec![
                    KeyValue::new("fusee.signal.name", name.to_string()),
                    KeyValue::new("fusee.wait.outcome", outcome),
                ];
                note(
                    format!("wait {name}"),
                    Some(SpanOf::Wait(*seq)),
                    (ms, how),
                    SpanStatus::Unset,
                    a,
                )
            }
            RecordBuf::ChildDone {
                seq,
                status,
                payload,
                ..
            } => {
                let (ms, how, wtype, id) = marks
                    .take(SpanOf::Child(*seq))
                    .unwrap_or_else(|| recovered(SpanOf::Child(*seq)));
                let (span_status, kind) = error_of(is_error(*status), payload);
                let mut a = vec![
                    KeyValue::new("fusee.child.type", wtype.to_string()),
                    KeyValue::new("fusee.child.id", id.to_string()),
                    KeyValue::new("fusee.child.status", status_label(*status)),
                ];
                a.extend(kind);
                note(
                    format!("child {wtype}"),
                    Some(SpanOf::Child(*seq)),
                    (ms, how),
                    span_status,
                    a,
                )
            }
            RecordBuf::UpdateDone {
                ordinal,
                status,
                payload,
                ..
            } => {
                let slot = usize::try_from(*ordinal)
                    .ok()
                    .and_then(|i| l.updates().get(i));
                let (ms, how, name, id) =
                    marks.take(SpanOf::Update(*ordinal)).unwrap_or_else(|| {
                        let (name, id) = slot.map_or_else(
                            || (Name::from(""), Name::from("")),
                            |s| (s.name.clone(), s.id.clone()),
                        );
                        (opened_ms, Begin::Recovered, name, id)
                    });
                let (span_status, kind) = error_of(*status != Status::Ok, payload);
                let mut a = vec![
                    KeyValue::new("fusee.update.name", name.to_string()),
                    KeyValue::new("fusee.update.id", id.to_string()),
                    KeyValue::new("fusee.update.status", status_label(*status)),
                ];
                a.extend(kind);
                note(
                    format!("update {name}"),
                    Some(SpanOf::Update(*ordinal)),
                    (ms, how),
                    span_status,
                    a,
                )
            }
            RecordBuf::Done {
                status,
                finished_ms,
                payload,
                ..
            } if l.done.is_none() => {
                let (span_status, kind) = error_of(is_error(*status), payload);
                let mut a = vec![
                    KeyValue::new("fusee.workflow.type", marks.wtype.to_string()),
                    KeyValue::new("fusee.workflow.id", marks.id.to_string()),
                    KeyValue::new("fusee.run.status", status_label(*status)),
                ];
                a.extend(kind);
                let mut n = note(
                    format!("run {}", marks.wtype),
                    None,
                    (l.started_ms, Begin::Recorded),
                    span_status,
                    a,
                );
                n.end_ms = *finished_ms;
                self.runs.remove(&run);
                n
            }
            // Any other record only moves the run's latest time.
            _ => return,
        };
        self.pending.push_back((lsn, n));
    }

    /// The log is durable through `durable`: emits the spans it ended.
    pub(crate) fn durable(&mut self, durable: Lsn) {
        while let Some((lsn, _)) = self.pending.front()
            && *lsn <= durable
        {
            let Some((lsn, note)) = self.pending.pop_front() else {
                break;
            };
            self.emit(lsn, note);
        }
    }

    fn emit(&self, lsn: Lsn, n: Note) {
        let t = &n.trace;
        let remote = |trace_id: [u8; 16], span_id: [u8; 8], sampled: bool| {
            Context::new().with_remote_span_context(SpanContext::new(
                TraceId::from_bytes(trace_id),
                SpanId::from_bytes(span_id),
                if sampled {
                    TraceFlags::SAMPLED
                } else {
                    TraceFlags::default()
                },
                true,
                TraceState::default(),
            ))
        };
        let parent = match n.parent {
            Parent::Run => remote(t.trace_id, t.span_id, t.sampled()),
            Parent::OfRun => match t.parent {
                Some(p) => remote(p.trace_id(), p.span_id(), p.sampled()),
                None => Context::new(),
            },
        };
        let mut attributes = n.attributes;
        attributes.extend([
            KeyValue::new("fusee.shard", i64::from(self.shard)),
            KeyValue::new("fusee.run", i64::try_from(n.run).unwrap_or(i64::MAX)),
            KeyValue::new("fusee.lsn", i64::try_from(lsn).unwrap_or(i64::MAX)),
        ]);
        let begin = time(n.begin_ms.min(n.end_ms));
        let builder = SpanBuilder {
            trace_id: Some(TraceId::from_bytes(t.trace_id)),
            span_id: Some(SpanId::from_bytes(n.span_id)),
            span_kind: Some(SpanKind::Internal),
            name: Cow::Owned(n.name),
            start_time: Some(begin),
            attributes: Some(attributes),
            status: n.status,
            ..SpanBuilder::from_name("")
        };
        let mut span = self.tracer.build_with_context(builder, &parent);
        span.end_with_timestamp(time(n.end_ms));
    }
}

/// The step attempts `journal` (a run's canonical records in memory)
/// shows begun and not ended ([`InFlight`]): operation, attempt, begin
/// time, name.
fn unended_attempts(journal: &[u8]) -> Vec<(u32, u32, u64, Name)> {
    let mut open = InFlight::default();
    for (r, _) in iter_canonical(journal).map_while(Result::ok) {
        open.take(&r);
    }
    open.into_steps()
        .into_iter()
        .map(|s| (s.seq, s.attempt, s.started_ms, Name::from(s.name)))
        .collect()
}

/// The names of the record that opened span `of` (a sleep's timer name, a
/// wait's signal, a child's type and ID), found in `journal` (a run's
/// canonical records in memory); empty when it is not there (a frame in
/// the run store holds it).
fn opening_names(journal: &[u8], of: SpanOf) -> (Name, Name) {
    let found = iter_canonical(journal)
        .map_while(Result::ok)
        .find_map(|(r, _)| match (r, of) {
            (Record::Timer { seq, name, .. }, SpanOf::Sleep(s))
            | (Record::Wait { seq, name, .. }, SpanOf::Wait(s))
                if seq == s =>
            {
                Some((Name::from(name), Name::from("")))
            }
            (Record::Child { seq, wtype, id, .. }, SpanOf::Child(s)) if seq == s => {
                Some((Name::from(wtype), Name::from(id)))
            }
            _ => None,
        });
    found.unwrap_or_else(|| (Name::from(""), Name::from("")))
}

fn time(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

fn attempt_attributes(name: &Name, seq: u32, attempt: u32, outcome: &'static str) -> Vec<KeyValue> {
    vec![
        KeyValue::new("fusee.step.name", name.to_string()),
        KeyValue::new("fusee.step.seq", i64::from(seq)),
        KeyValue::new("fusee.step.attempt", i64::from(attempt)),
        KeyValue::new("fusee.step.outcome", outcome),
    ]
}

/// A run's or child's end that is an error on its span.
fn is_error(status: Status) -> bool {
    matches!(
        status,
        Status::Failed | Status::Cancelled | Status::TimedOut | Status::Terminated
    )
}

/// The span status of an end (`failed`: its payload is the recorded
/// error, a `StepError` or `Failure` in JSON, `message` and `kind`), and
/// the `error.type` attribute when it has a kind.
fn error_of(failed: bool, payload: &[u8]) -> (SpanStatus, Option<KeyValue>) {
    if !failed {
        return (SpanStatus::Unset, None);
    }
    let v: Option<serde_json::Value> = serde_json::from_slice(payload).ok();
    let field = |k: &str| {
        v.as_ref()
            .and_then(|v| v.get(k))
            .and_then(|m| m.as_str())
            .map(str::to_string)
    };
    let message = field("message").unwrap_or_else(|| String::from_utf8_lossy(payload).into_owned());
    let kind = field("kind").map(|k| KeyValue::new("error.type", k));
    (SpanStatus::error(message), kind)
}

/// A status as an attribute value (as the metrics' labels spell it).
fn status_label(status: Status) -> &'static str {
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
