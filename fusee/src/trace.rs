//! Trace context: the W3C `traceparent` a run is started in
//! ([`TraceParent`]), where the engine records it, and the span IDs every
//! process derives from durable facts alone.
//!
//! # Recorded in the run's `Start`
//!
//! A run started with a trace context ([`StartOptions::trace`](crate::StartOptions::trace),
//! the HTTP API's `traceparent` header) records it in its `Start`
//! record's meta: `attributes` holds the JSON object
//! `{"traceparent": "00-<trace id>-<parent id>-<flags>"}` (the W3C text,
//! lower-case hex). A child's `Start` records its parent's trace ID with
//! the parent's child span as its parent, so a tree of runs is one trace
//! across shards and processes. A run started without one gets a trace
//! of its own, derived from its `Start` (below); nothing is recorded.
//!
//! # Span IDs from durable facts
//!
//! Spans are made when the records that end them are durable, by whichever
//! process sees that (see [`crate::otel`]); their IDs must agree without
//! any process telling another. So they are hashes (XXH64, seeded) of
//! what the records say: a run's span of its trace ID, shard and run
//! number; an attempt's of the run span, its operation and attempt number;
//! a sleep's, a wait's and a child's of the run span and their operation;
//! an update's of the run span and its ordinal. A trace ID not given at
//! start is a hash of the run's shard, run number, workflow ID and start
//! time (two engines' run 1 of shard 0 differ in their IDs or start
//! times). The attempt's context is what a step sees
//! ([`StepContext::traceparent`](crate::StepContext::traceparent)), so
//! the calls the step makes are children of its attempt's span.

use std::fmt;

use fusee_core::record::{ParentRef, Payload, RunId, Seq, StartMeta};
use fusee_core::shard::LoadedRun;
use fusee_core::wire::checksum64;

/// The context of the current `tracing` span, when the embedder's
/// subscriber keeps OpenTelemetry contexts (the `tracing-opentelemetry`
/// layer) and that span is in a valid trace: what a start without
/// [`StartOptions::trace`](crate::StartOptions::trace) records, so a run
/// started while handling a traced request joins the request's trace.
/// `None` without the `otel` feature, outside any span, or with no such
/// layer.
pub(crate) fn current() -> Option<TraceParent> {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let cx = tracing::Span::current().context();
        let span = cx.span();
        let sc = span.span_context();
        if sc.is_valid() {
            return TraceParent::new(
                sc.trace_id().to_bytes(),
                sc.span_id().to_bytes(),
                sc.is_sampled(),
            );
        }
    }
    None
}

/// The attributes key the trace context is recorded under.
const KEY: &str = "traceparent";

/// A W3C trace context (`traceparent`, version 00): the trace, the
/// caller's span, and whether the caller sampled it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceParent {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
}

/// Why a `traceparent` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceParentError {
    /// Not `00-<32 hex>-<16 hex>-<2 hex>` (lower-case).
    #[error("traceparent {0:?} is not 00-<32 hex>-<16 hex>-<2 hex>")]
    Malformed(String),
    /// An all-zero trace or parent ID (invalid by the W3C spec).
    #[error("traceparent {0:?} has an all-zero trace or parent ID")]
    ZeroId(String),
}

impl TraceParent {
    /// A context of `trace_id` whose parent span is `span_id`, sampled.
    /// `None` when either ID is all zeros (invalid in W3C).
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], sampled: bool) -> Option<Self> {
        (trace_id != [0; 16] && span_id != [0; 8]).then_some(Self {
            trace_id,
            span_id,
            flags: u8::from(sampled),
        })
    }

    /// Parses the `traceparent` header's value: version `00` exactly (a
    /// later version's longer value is refused rather than guessed at).
    pub fn parse(text: &str) -> Result<Self, TraceParentError> {
        let bad = || TraceParentError::Malformed(text.chars().take(64).collect());
        let parts: Vec<&str> = text.trim().split('-').collect();
        let [version, trace, span, flags] = parts.as_slice() else {
            return Err(bad());
        };
        if *version != "00" {
            return Err(bad());
        }
        let trace_id: [u8; 16] = hex(trace).ok_or_else(bad)?;
        let span_id: [u8; 8] = hex(span).ok_or_else(bad)?;
        let [flags]: [u8; 1] = hex(flags).ok_or_else(bad)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return Err(TraceParentError::ZeroId(text.chars().take(64).collect()));
        }
        Ok(Self {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The trace's ID.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The parent span's ID (for a step: its attempt's span).
    pub fn span_id(&self) -> [u8; 8] {
        self.span_id
    }

    /// Whether the caller sampled the trace (flag `01`).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The `Start` meta recording this context.
    pub(crate) fn to_meta(self) -> Box<StartMeta<Payload>> {
        let attributes = serde_json::json!({ KEY: self.to_string() }).to_string();
        Box::new(StartMeta {
            attributes: Payload::from(attributes.as_bytes()),
            memo: Payload::from(&b""[..]),
        })
    }

    /// The context a `Start`'s meta recorded, if any (a meta without one,
    /// or one that does not parse, records none).
    pub(crate) fn from_meta(meta: Option<&StartMeta<Payload>>) -> Option<Self> {
        let m = meta?;
        if m.attributes.is_empty() {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&m.attributes).ok()?;
        Self::parse(v.get(KEY)?.as_str()?).ok()
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        for b in self.trace_id {
            write!(f, "{b:02x}")?;
        }
        f.write_str("-")?;
        for b in self.span_id {
            write!(f, "{b:02x}")?;
        }
        write!(f, "-{:02x}", self.flags)
    }
}

impl std::str::FromStr for TraceParent {
    type Err = TraceParentError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Lower-case hex of exactly `N` bytes.
fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(b[2 * i])? << 4 | digit(b[2 * i + 1])?;
    }
    Some(out)
}

/// What a span of a run is: its kind and what tells it apart within the
/// run (the hash input of its ID).
// Without the `otel` feature only attempts and children are named (a
// step's context, a child's start); the spans are the feature's.
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum SpanOf {
    /// A step attempt: the step's operation and the attempt number.
    Attempt(Seq, u32),
    /// A durable sleep.
    Sleep(Seq),
    /// A signal wait.
    Wait(Seq),
    /// A child workflow, seen from its parent.
    Child(Seq),
    /// An update, by its ordinal.
    Update(u64),
    /// A step attempt cut before it ended (its `Began` superseded by a
    /// later one): the step's operation, the attempt and when it began
    /// (two cuts of one attempt number began at different times).
    Cut(Seq, u32, u64),
}

/// A run's place in its trace: derived from its loaded state (its `Start`)
/// alone, so every process derives the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunTrace {
    /// The run's trace.
    pub(crate) trace_id: [u8; 16],
    /// The span the run's span is a child of (given at start, or the
    /// parent's child span), and whether it was sampled.
    pub(crate) parent: Option<TraceParent>,
    /// The run's own span.
    pub(crate) span_id: [u8; 8],
}

impl RunTrace {
    /// Run `run` of shard `shard`, loaded as `l`.
    pub(crate) fn of(shard: u32, run: RunId, l: &LoadedRun) -> Self {
        let parent = TraceParent::from_meta(l.meta.as_deref());
        let trace_id = match parent {
            Some(p) => p.trace_id,
            None => {
                let a = checksum64(&[
                    b"fusee.trace",
                    &shard.to_le_bytes(),
                    &run.to_le_bytes(),
                    &l.started_ms.to_le_bytes(),
                    l.id.as_bytes(),
                ]);
                let b = checksum64(&[&a.to_le_bytes(), l.id.as_bytes()]);
                let mut t = [0; 16];
                t[..8].copy_from_slice(&a.to_be_bytes());
                t[8..].copy_from_slice(&b.to_be_bytes());
                t
            }
        };
        let span_id = nonzero(checksum64(&[
            b"fusee.run",
            &trace_id,
            &shard.to_le_bytes(),
            &run.to_le_bytes(),
        ]));
        Self {
            trace_id,
            parent,
            span_id,
        }
    }

    /// The ID of the run's span `of`.
    pub(crate) fn span(&self, of: SpanOf) -> [u8; 8] {
        let (kind, a, b): (&[u8], u64, u64) = match of {
            SpanOf::Attempt(seq, attempt) => (b"attempt", u64::from(seq), u64::from(attempt)),
            SpanOf::Sleep(seq) => (b"sleep", u64::from(seq), 0),
            SpanOf::Wait(seq) => (b"wait", u64::from(seq), 0),
            SpanOf::Child(seq) => (b"child", u64::from(seq), 0),
            SpanOf::Update(ordinal) => (b"update", ordinal, 0),
            SpanOf::Cut(seq, attempt, began_ms) => {
                (b"cut", u64::from(seq) << 32 | u64::from(attempt), began_ms)
            }
        };
        nonzero(checksum64(&[
            kind,
            &self.span_id,
            &a.to_le_bytes(),
            &b.to_le_bytes(),
        ]))
    }

    /// Whether the trace is sampled: as the context given at start says,
    /// sampled when none was.
    pub(crate) fn sampled(&self) -> bool {
        self.parent.is_none_or(|p| p.sampled())
    }

    /// The context for the run's span `of`'s callees (a step's own
    /// calls, a child run).
    pub(crate) fn context(&self, of: SpanOf) -> TraceParent {
        TraceParent {
            trace_id: self.trace_id,
            span_id: self.span(of),
            flags: u8::from(self.sampled()),
        }
    }

    /// The context a child started by operation `parent.seq` of this run
    /// records in its `Start`.
    pub(crate) fn child_start(&self, parent: ParentRef) -> TraceParent {
        self.context(SpanOf::Child(parent.seq))
    }
}

/// A span ID is never all zeros (W3C: invalid).
fn nonzero(h: u64) -> [u8; 8] {
    (if h == 0 { 1 } else { h }).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_refuses_what_w3c_refuses() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let tp = TraceParent::parse(text).expect("valid");
        assert_eq!(tp.to_string(), text);
        assert!(tp.sampled());
        assert_eq!(
            tp.span_id(),
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        let back = TraceParent::from_meta(Some(&tp.to_meta())).expect("recorded");
        assert_eq!(back, tp);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert!(
                matches!(TraceParent::parse(bad), Err(TraceParentError::Malformed(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            TraceParent::parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            Err(TraceParentError::ZeroId(_))
        ));
        assert!(TraceParent::from_meta(None).is_none());
    }
}
