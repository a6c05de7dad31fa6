//! `fusee show DIR ID`: one run's journal, record by record.

use std::path::Path;
use std::process::ExitCode;

use fusee::Backend;
use fusee::core::record::{Payload, Record, RecordBuf, Status, WaitOutcome};
use fusee::inspect::{InspectError, journal, status_name};

use serde_json::Value;

use crate::output::{emit, emit_json};
use crate::store::{Request, gather};
use crate::{CliError, fmt};

/// What a table row says of a record: seq, name, attempt, status, and
/// the payload column's text.
type Row<'a> = (
    Option<u32>,
    Option<&'a str>,
    Option<u32>,
    Option<String>,
    Option<String>,
);

fn describe(rec: &RecordBuf, codec: Option<u8>) -> Row<'_> {
    let st = |s: &Status| Some(status_name(*s).to_string());
    let p = |b: &Payload| Some(fmt::payload(b, codec));
    match rec {
        Record::Start {
            wtype, input, id, ..
        } => (None, Some(wtype), None, Some(format!("id {id}")), p(input)),
        Record::Step {
            seq,
            name,
            attempt,
            status,
            payload,
            ..
        } => (
            Some(*seq),
            Some(name),
            Some(*attempt),
            st(status),
            p(payload),
        ),
        Record::Attempt {
            seq,
            name,
            attempt,
            retry_at_ms,
            error,
            ..
        } => (
            Some(*seq),
            Some(name),
            Some(*attempt),
            Some(if *retry_at_ms == fusee::core::record::PAUSED {
                "paused".into()
            } else {
                format!("retry at {}", fmt::time(*retry_at_ms))
            }),
            p(error),
        ),
        Record::Resume { seq, .. } | Record::Fired { seq, .. } | Record::StreamEnd { seq, .. } => {
            (Some(*seq), None, None, None, None)
        }
        Record::Timer {
            seq,
            name,
            fire_at_ms,
            ..
        } => (
            Some(*seq),
            Some(name),
            None,
            Some(format!("fires {}", fmt::time(*fire_at_ms))),
            None,
        ),
        Record::Signal {
            name, payload, by, ..
        } => (None, Some(name), None, by_text(by), p(payload)),
        Record::Wait {
            seq,
            name,
            deadline_ms,
            ..
        } => (
            Some(*seq),
            Some(name),
            None,
            (*deadline_ms != 0).then(|| format!("until {}", fmt::time(*deadline_ms))),
            None,
        ),
        Record::Waited { seq, outcome, .. } => (
            Some(*seq),
            None,
            None,
            Some(match outcome {
                WaitOutcome::Signal(o) => format!("signal #{o}"),
                WaitOutcome::TimedOut => "timed-out".into(),
                WaitOutcome::Abandoned => "abandoned".into(),
            }),
            None,
        ),
        Record::Value {
            seq, kind, value, ..
        } => (
            Some(*seq),
            Some(value_kind_name(*kind)),
            None,
            None,
            Some(fmt::recorded(*kind, value, codec)),
        ),
        Record::Child {
            seq, wtype, input, ..
        } => (Some(*seq), Some(wtype), None, None, p(input)),
        Record::ChildDone {
            seq,
            status,
            payload,
            ..
        } => (Some(*seq), None, None, st(status), p(payload)),
        Record::Send {
            seq, name, payload, ..
        } => (Some(*seq), Some(name), None, None, p(payload)),
        Record::Cancel { reason, by, .. } => {
            (None, None, None, by_text(by), Some(fmt::text(reason)))
        }
        Record::Update { name, payload, .. } => (None, Some(name), None, None, p(payload)),
        Record::UpdateDone {
            status, payload, ..
        } => (None, None, None, st(status), p(payload)),
        Record::Heartbeat {
            seq,
            attempt,
            payload,
            ..
        } => (Some(*seq), None, Some(*attempt), None, p(payload)),
        Record::Patch { seq, id, .. } => (Some(*seq), Some(id), None, None, None),
        Record::Awaiting {
            seq, name, attempt, ..
        } => (Some(*seq), Some(name), Some(*attempt), None, None),
        Record::Completed {
            seq,
            attempt,
            status,
            payload,
            ..
        } => (Some(*seq), None, Some(*attempt), st(status), p(payload)),
        Record::Attributes { payload, .. } => (None, None, None, None, p(payload)),
        Record::Chunk { seq, payload, .. } => (Some(*seq), None, None, None, p(payload)),
        Record::Done {
            status,
            payload,
            by,
            ..
        } => (
            None,
            None,
            None,
            Some(match by_text(by) {
                Some(by) => format!("{} {by}", status_name(*status)),
                None => status_name(*status).to_string(),
            }),
            p(payload),
        ),
        Record::Began {
            seq,
            name,
            attempt,
            started_ms,
            ..
        } => (
            Some(*seq),
            Some(name),
            Some(*attempt),
            Some(format!("began {}", fmt::time(*started_ms))),
            None,
        ),
    }
}

/// Who sent a signal or ended a run, in words.
fn by_text(by: &Option<Payload>) -> Option<String> {
    by.as_ref().map(|b| format!("by {}", fmt::text(b)))
}

/// A `Value` record's kind as the table names it.
fn value_kind_name(kind: u8) -> &'static str {
    use fusee::core::record::value_kind;
    match kind {
        value_kind::NOW => "now",
        value_kind::RANDOM => "random",
        value_kind::UUID => "uuid",
        value_kind::CUSTOM => "custom",
        value_kind::STREAM => "stream",
        _ => "value",
    }
}

/// `fusee show DIR ID`.
pub(crate) fn show(
    dir: &Path,
    expected: Option<Backend>,
    json: bool,
    id: &str,
) -> Result<ExitCode, CliError> {
    let (_, g) = gather(dir, expected, Request::Journal(id))?;
    let j = g
        .journal
        .ok_or_else(|| InspectError::NoSuchRun(format!("of workflow ID {id:?}")))?;
    render(&journal::to_json(&j), json)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes a journal document (`fusee-journal`, version 1) as `fusee show`
/// does: the document itself, or a header and a table of its records.
pub(crate) fn render(doc: &Value, json: bool) -> Result<(), CliError> {
    if json {
        return emit_json(doc);
    }
    let records = journal::from_json(doc).map_err(|e| CliError::Other(e.to_string()))?;
    let text = |k: &str| {
        doc.get(k).map_or_else(String::new, |v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    };
    let started = records.iter().find_map(|r| match r {
        Record::Start { started_ms, .. } => Some(*started_ms),
        _ => None,
    });
    let finished = records.iter().find_map(|r| match r {
        Record::Done { finished_ms, .. } => Some(*finished_ms),
        _ => None,
    });
    let mut out = String::new();
    for (label, value) in [
        ("id", text("id")),
        ("workflow", text("workflow")),
        ("shard", format!("{}  run {}", text("shard"), text("run"))),
        ("status", text("state")),
        ("started", started.map_or("-".into(), fmt::time)),
        ("finished", finished.map_or("-".into(), fmt::time)),
    ] {
        out.push_str(&format!("{label:<9} {}\n", fmt::cell(&value)));
    }
    if doc.get("complete") == Some(&Value::Bool(false)) {
        out.push_str(
            "note      a finished run parked in the run store keeps only its Start and Done records\n",
        );
    }
    let codec = journal::codec_of(&records);
    let mut t = fmt::Table::new(&["#", "seq", "kind", "name", "attempt", "status", "payload"]);
    for (i, rec) in records.iter().enumerate() {
        let (seq, name, attempt, status, payload) = describe(rec, codec);
        let opt = |v: Option<u32>| v.map_or(String::new(), |v| v.to_string());
        t.row([
            i.to_string(),
            opt(seq),
            rec.kind_name().to_string(),
            name.unwrap_or_default().to_string(),
            opt(attempt),
            status.unwrap_or_default(),
            payload.unwrap_or_default(),
        ]);
    }
    out.push_str(&format!("\n{t}\n"));
    emit(&out)
}
