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
//! record that opens or ends a span costs a note when appended: a
//! hash-map look-up of its run, the clock read, and for an ending record a
//! compact note (the record's names shared, not copied; no text made, no
//! attribute list built). When the flush that makes it durable comes back,
//! each note becomes one span on the provider: one allocation of our own
//! (its attribute list, sized; attribute values share the records' names),
//! its name a `&'static str` interned once per span kind and name (a
//! process-wide table bounded at 4,096 names: past it a name is made per
//! span, so names that vary per run cost time, never unbounded memory),
//! its parent's context made once per run. The shard keeps, per run with
//! spans open, its trace context and the opening times of what is open
//! (dropped at its `Done`).
//!
//! What is left is about half the SDK's and half ours: under callgrind
//! (the `telemetry` figure at `FUSEE_ENGINE_BENCH=quick`) a span costs
//! about 2,800 instructions in `opentelemetry_sdk` and the allocator
//! (building it about 700, ending it into the batch processor's channel
//! about 550, the batch thread receiving and dropping it about 1,400) and
//! about 2,700 of ours with the metrics (the notes, about 500 per span;
//! the span ID hash, about 300; the attribute list and its allocation;
//! the metrics' counts), against about 15,000 for a no-op step of the
//! fanout with telemetry off. On 2 cores the fanout is CPU-bound, so a
//! span's instructions cost wall time wherever they run (a thread of its
//! own would not help): each half alone is about a fifth of a no-op step.
//! With the SDK calls skipped (a trial build, not kept) the fanout was
//! 1.18 to 1.26 in memory and 1.20 to 1.40 on files, against 1.40 to
//! 1.48 and 1.28 with them, in alternating runs.
//!
//! Measured (`cargo bench -p fusee-benches --no-default-features
//! --features file --bench engine -- telemetry`, metrics and traces to a
//! batch processor exporting to a no-op sink against both off, median of
//! 20 alternating rounds), six runs of this design alternating with six
//! of the one before (spans built on the shard when durable from notes
//! holding their formatted names and attribute lists) on a shared 2-core
//! machine with other builds running (load 1 to 4.7), 2026-12-05; the
//! median run and the range: the chain of 300 steps on the file backend
//! 1.05 (1.02 to 1.09; before 1.06, 1.04 to 1.11); the fanout of 2,000
//! workflows of 10 no-op steps 1.45 in memory (1.33 to 1.76; before 1.71,
//! 1.55 to 1.96) and 1.38 on files (1.29 to 1.60; before 1.72, 1.56 to
//! 1.86). Under callgrind (the same figure, `FUSEE_ENGINE_BENCH=quick`)
//! the instructions telemetry adds fell from 169 to 122 million (28%).
//!
//! The same figure measures the SDK alone beside it: a memory fanout
//! round's spans built as `emit` builds them, with no engine around
//! them, cost 0.072 to 0.079 of the round's CPU with telemetry off (three
//! runs, 2026-12-06, `benches/RESULTS.md`): one SDK span per attempt is
//! already more than a 5% budget on a no-op step.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use fusee_core::record::{
    Lsn, Name, PAUSED, Payload, Record, RunId, Status, ToPayload, WaitOutcome, iter_canonical,
};
use fusee_core::shard::ShardCore;
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanContext, SpanId, SpanKind, Status as SpanStatus, TraceContextExt,
    TraceFlags, TraceId, TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use rustc_hash::FxHashMap;

use crate::client::InFlight;
use crate::clock::Clock;
use crate::telemetry::status_label;
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
            names: Names::default(),
            empty: Name::from(""),
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
    /// The run span's context: the parent of its other spans.
    cx: Context,
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

/// A span to emit once its ending record is durable: what the record
/// said, compact (names shared with the records, no text made), turned
/// into a span only when durable.
struct Note {
    trace: RunTrace,
    run: RunId,
    /// The span (`None`: the run's own).
    of: Option<SpanOf>,
    kind: Kind,
    /// The span's name after its kind's word (a step's, timer's, signal's
    /// or update handler's name, a child's or run's workflow type).
    name: Name,
    /// A child's or update's ID, a run's workflow ID.
    detail: Name,
    begin_ms: u64,
    begin: Begin,
    end_ms: u64,
    error: Failed,
    /// The parent's context: the run span's for the run's other spans
    /// (made once per run), `None` for the run's own span (made at emit).
    parent: Option<Context>,
}

/// What kind of span a note ends, with its kind's attributes.
#[derive(Clone, Copy)]
enum Kind {
    /// A step attempt: `fusee.step.outcome`.
    Attempt {
        seq: u32,
        attempt: u32,
        outcome: &'static str,
    },
    Sleep,
    Wait {
        outcome: &'static str,
    },
    Child {
        status: Status,
    },
    Update {
        status: Status,
    },
    Run {
        status: Status,
    },
}

impl Kind {
    /// The word the span's name begins with (the index into [`WORDS`]).
    fn word(self) -> usize {
        match self {
            Kind::Attempt { .. } => 0,
            Kind::Sleep => 1,
            Kind::Wait { .. } => 2,
            Kind::Child { .. } => 3,
            Kind::Update { .. } => 4,
            Kind::Run { .. } => 5,
        }
    }
}

/// The words span names begin with, by [`Kind::word`].
const WORDS: [&str; 6] = ["step ", "sleep ", "wait ", "child ", "update ", "run "];

/// A span's error status, read from the record only when emitted.
enum Failed {
    No,
    /// A cut attempt (a fixed message).
    Cut,
    /// The recorded error (a `StepError` or `Failure` in JSON).
    Recorded(Payload),
}

/// Span names interned for the process's life, so a span's name is a
/// `&'static str` (no text made per span). Bounded: past
/// [`INTERNED_MAX`] names each further name is made per span, so step or
/// timer names that vary per run cost time, never unbounded memory.
static INTERNED: std::sync::Mutex<Option<FxHashMap<(usize, Name), &'static str>>> =
    std::sync::Mutex::new(None);

/// The most span names [`INTERNED`] keeps (a few hundred bytes each at
/// most: about a megabyte).
const INTERNED_MAX: usize = 4096;

/// A shard's cache of [`INTERNED`] (no lock per span): `None` for a name
/// the table had no room for.
#[derive(Default)]
struct Names(FxHashMap<(usize, Name), Option<&'static str>>);

impl Names {
    /// The name of a span of word `word` and name `name`.
    fn get(&mut self, word: usize, name: &Name) -> Cow<'static, str> {
        let key = (word, name.clone());
        let found = match self.0.get(&key) {
            Some(found) => *found,
            None => {
                let found = intern(word, name);
                // The cache is bounded as the table is (a name the table
                // refused is remembered as refused, up to the same count).
                if self.0.len() < 2 * INTERNED_MAX {
                    self.0.insert(key, found);
                }
                found
            }
        };
        match found {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(format!("{}{name}", WORDS[word])),
        }
    }
}

/// `name` after word `word`, interned; `None` when the table is full.
fn intern(word: usize, name: &Name) -> Option<&'static str> {
    // A poisoned lock only means another thread panicked mid-insert; the
    // map is still a map.
    let mut table = INTERNED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let table = table.get_or_insert_with(FxHashMap::default);
    if let Some(s) = table.get(&(word, name.clone())) {
        return Some(s);
    }
    if table.len() >= INTERNED_MAX {
        return None;
    }
    let s: &'static str = Box::leak(format!("{}{name}", WORDS[word]).into_boxed_str());
    table.insert((word, name.clone()), s);
    Some(s)
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
    names: Names,
    /// The empty name (one allocation, shared).
    empty: Name,
}

impl ShardTraces {
    /// Record `rec` was appended at `lsn`, before `core` applied it.
    pub(crate) fn appended<B: ToPayload>(
        &mut self,
        lsn: Lsn,
        rec: &Record<Name, B>,
        core: &ShardCore,
    ) {
        let run = rec.run();
        if let Record::Start { .. } = rec {
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
        let empty = &self.empty;
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
            let trace = RunTrace::of(shard, run, l);
            RunMarks {
                cx: remote(trace.trace_id, trace.span_id, trace.sampled()),
                trace,
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
        // What a span opened before this process has for a begin; its
        // names are in its opening record, if the run's journal in memory
        // still holds it.
        let recovered = |of: SpanOf| {
            let (name, detail) = opening_names(&l.journal, of);
            (opened_ms, Begin::Recovered, name, detail)
        };
        let note = |marks: &RunMarks,
                    of: SpanOf,
                    kind: Kind,
                    (name, detail): (Name, Name),
                    (begin_ms, begin): (u64, Begin),
                    error: Failed| Note {
            trace: marks.trace,
            run,
            of: Some(of),
            kind,
            name,
            detail,
            begin_ms,
            begin,
            end_ms: now,
            error,
            parent: Some(marks.cx.clone()),
        };
        let open = |of: SpanOf, name: &Name, detail: Name| {
            (of, now, Begin::Appended, name.clone(), detail)
        };
        let failed = |is: bool, payload: &B| {
            if is {
                Failed::Recorded(payload.to_payload())
            } else {
                Failed::No
            }
        };
        let n = match rec {
            Record::Began {
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
                    empty.clone(),
                ));
                let Some((a, ms, n, end_ms)) = cut else {
                    return;
                };
                let mut note = note(
                    marks,
                    SpanOf::Cut(*seq, a, ms),
                    Kind::Attempt {
                        seq: *seq,
                        attempt: a,
                        outcome: "cut",
                    },
                    (n, empty.clone()),
                    (ms, Begin::Recorded),
                    Failed::Cut,
                );
                note.end_ms = end_ms;
                note
            }
            Record::Step {
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
                let is_failed = *status != Status::Ok;
                note(
                    marks,
                    SpanOf::Attempt(*seq, *attempt),
                    Kind::Attempt {
                        seq: *seq,
                        attempt: *attempt,
                        outcome: if is_failed { "failed" } else { "ok" },
                    },
                    (name.clone(), empty.clone()),
                    begin,
                    failed(is_failed, payload),
                )
            }
            Record::Attempt {
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
                    marks.open.push((
                        next,
                        (*retry_at_ms).max(now),
                        Begin::RetryTime,
                        empty.clone(),
                        empty.clone(),
                    ));
                }
                note(
                    marks,
                    SpanOf::Attempt(*seq, *attempt),
                    Kind::Attempt {
                        seq: *seq,
                        attempt: *attempt,
                        outcome: if paused { "paused" } else { "retried" },
                    },
                    (name.clone(), empty.clone()),
                    begin,
                    failed(true, error),
                )
            }
            Record::Timer { seq, name, .. } => {
                marks
                    .open
                    .push(open(SpanOf::Sleep(*seq), name, empty.clone()));
                return;
            }
            Record::Wait { seq, name, .. } => {
                marks
                    .open
                    .push(open(SpanOf::Wait(*seq), name, empty.clone()));
                return;
            }
            Record::Child { seq, wtype, id, .. } => {
                marks
                    .open
                    .push(open(SpanOf::Child(*seq), wtype, id.clone()));
                return;
            }
            Record::Update { id, name, .. } => {
                let ordinal = l.updates().len() as u64;
                marks
                    .open
                    .push(open(SpanOf::Update(ordinal), name, id.clone()));
                return;
            }
            Record::Fired { seq, .. } => {
                let (ms, how, name, detail) = marks
                    .take(SpanOf::Sleep(*seq))
                    .unwrap_or_else(|| recovered(SpanOf::Sleep(*seq)));
                note(
                    marks,
                    SpanOf::Sleep(*seq),
                    Kind::Sleep,
                    (name, detail),
                    (ms, how),
                    Failed::No,
                )
            }
            Record::Waited { seq, outcome, .. } => {
                let (ms, how, name, detail) = marks
                    .take(SpanOf::Wait(*seq))
                    .unwrap_or_else(|| recovered(SpanOf::Wait(*seq)));
                let outcome = match outcome {
                    WaitOutcome::Signal(_) => "signal",
                    WaitOutcome::TimedOut => "timed_out",
                    WaitOutcome::Abandoned => "abandoned",
                };
                note(
                    marks,
                    SpanOf::Wait(*seq),
                    Kind::Wait { outcome },
                    (name, detail),
                    (ms, how),
                    Failed::No,
                )
            }
            Record::ChildDone {
                seq,
                status,
                payload,
                ..
            } => {
                let (ms, how, wtype, id) = marks
                    .take(SpanOf::Child(*seq))
                    .unwrap_or_else(|| recovered(SpanOf::Child(*seq)));
                note(
                    marks,
                    SpanOf::Child(*seq),
                    Kind::Child { status: *status },
                    (wtype, id),
                    (ms, how),
                    failed(is_error(*status), payload),
                )
            }
            Record::UpdateDone {
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
                            || (empty.clone(), empty.clone()),
                            |s| (s.name.clone(), s.id.clone()),
                        );
                        (opened_ms, Begin::Recovered, name, id)
                    });
                note(
                    marks,
                    SpanOf::Update(*ordinal),
                    Kind::Update { status: *status },
                    (name, id),
                    (ms, how),
                    failed(*status != Status::Ok, payload),
                )
            }
            Record::Done {
                status,
                finished_ms,
                payload,
                ..
            } if l.done.is_none() => {
                let n = Note {
                    trace: marks.trace,
                    run,
                    of: None,
                    kind: Kind::Run { status: *status },
                    name: marks.wtype.clone(),
                    detail: marks.id.clone(),
                    begin_ms: l.started_ms,
                    begin: Begin::Recorded,
                    end_ms: *finished_ms,
                    error: failed(is_error(*status), payload),
                    parent: None,
                };
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

    fn emit(&mut self, lsn: Lsn, n: Note) {
        let t = &n.trace;
        let parent = match n.parent {
            Some(cx) => cx,
            // The run's own span: the context given at start or its
            // parent's child span, or none (a root).
            None => match t.parent {
                Some(p) => remote(p.trace_id(), p.span_id(), p.sampled()),
                None => Context::new(),
            },
        };
        let (status, error_type) = match n.error {
            Failed::No => (SpanStatus::Unset, None),
            Failed::Cut => (
                SpanStatus::error(
                    "the attempt was cut: it began and never ended (its process stopped, \
                     or its run was reloaded); a later attempt superseded it",
                ),
                None,
            ),
            Failed::Recorded(payload) => error_of(&payload),
        };
        // Each kind's attributes, the error's kind, and the four every
        // span has: one allocation, sized.
        let mut a = Vec::with_capacity(9);
        let text = |name: &Name| Value::String(name.clone().into());
        match n.kind {
            Kind::Attempt {
                seq,
                attempt,
                outcome,
            } => a.extend([
                KeyValue::new("fusee.step.name", text(&n.name)),
                KeyValue::new("fusee.step.seq", i64::from(seq)),
                KeyValue::new("fusee.step.attempt", i64::from(attempt)),
                KeyValue::new("fusee.step.outcome", outcome),
            ]),
            Kind::Sleep => a.push(KeyValue::new("fusee.timer.name", text(&n.name))),
            Kind::Wait { outcome } => a.extend([
                KeyValue::new("fusee.signal.name", text(&n.name)),
                KeyValue::new("fusee.wait.outcome", outcome),
            ]),
            Kind::Child { status } => a.extend([
                KeyValue::new("fusee.child.type", text(&n.name)),
                KeyValue::new("fusee.child.id", text(&n.detail)),
                KeyValue::new("fusee.child.status", status_label(status)),
            ]),
            Kind::Update { status } => a.extend([
                KeyValue::new("fusee.update.name", text(&n.name)),
                KeyValue::new("fusee.update.id", text(&n.detail)),
                KeyValue::new("fusee.update.status", status_label(status)),
            ]),
            Kind::Run { status } => a.extend([
                KeyValue::new("fusee.workflow.type", text(&n.name)),
                KeyValue::new("fusee.workflow.id", text(&n.detail)),
                KeyValue::new("fusee.run.status", status_label(status)),
            ]),
        }
        a.extend(error_type);
        a.extend([
            KeyValue::new("fusee.span.begin", n.begin.label()),
            KeyValue::new("fusee.shard", i64::from(self.shard)),
            KeyValue::new("fusee.run", i64::try_from(n.run).unwrap_or(i64::MAX)),
            KeyValue::new("fusee.lsn", i64::try_from(lsn).unwrap_or(i64::MAX)),
        ]);
        let builder = SpanBuilder {
            trace_id: Some(TraceId::from_bytes(t.trace_id)),
            span_id: Some(SpanId::from_bytes(n.of.map_or(t.span_id, |o| t.span(o)))),
            span_kind: Some(SpanKind::Internal),
            name: self.names.get(n.kind.word(), &n.name),
            start_time: Some(time(n.begin_ms.min(n.end_ms))),
            attributes: Some(a),
            status,
            ..SpanBuilder::from_name("")
        };
        let mut span = self.tracer.build_with_context(builder, &parent);
        span.end_with_timestamp(time(n.end_ms));
    }
}

/// A context whose span is the remote span `span_id` of `trace_id`.
fn remote(trace_id: [u8; 16], span_id: [u8; 8], sampled: bool) -> Context {
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

/// A run's or child's end that is an error on its span.
fn is_error(status: Status) -> bool {
    matches!(
        status,
        Status::Failed | Status::Cancelled | Status::TimedOut | Status::Terminated
    )
}

/// The span status of a failed end (`payload` is the recorded error, a
/// `StepError` or `Failure` in JSON, `message` and `kind`), and the
/// `error.type` attribute when it has a kind.
fn error_of(payload: &[u8]) -> (SpanStatus, Option<KeyValue>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_names_are_interned_once_and_spelled_as_before() {
        let mut names = Names::default();
        let step = Name::from("charge");
        let a = names.get(0, &step);
        // Another shard's cache, and another Arc of the same text.
        let b = Names::default().get(0, &Name::from("charge"));
        assert_eq!(a, "step charge");
        let (Cow::Borrowed(a), Cow::Borrowed(b)) = (a, b) else {
            panic!("interned names are borrowed");
        };
        assert!(std::ptr::eq(a, b), "one copy per name in the process");
        assert_eq!(names.get(5, &step), "run charge", "the kind's word differs");
    }
}
