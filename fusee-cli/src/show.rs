//! `fusee show DIR ID`: one run's journal, record by record.

use std::path::Path;
use std::process::ExitCode;

use fusee::Backend;
use fusee::core::record::{Payload, Record, RecordBuf, Status, WaitOutcome};
use fusee::inspect::{InspectError, journal, status_name};

use crate::store::{Request, gather};
use crate::{CliError, fmt, print_json};

/// Characters of a payload a table cell shows.
const PAYLOAD_CHARS: usize = 60;

/// What a table row says of a record: seq, name, attempt, status, payload.
type Row<'a> = (
    Option<u32>,
    Option<&'a str>,
    Option<u32>,
    Option<String>,
    Option<&'a Payload>,
);

fn describe(rec: &RecordBuf) -> Row<'_> {
    let st = |s: &Status| Some(status_name(*s).to_string());
    match rec {
        Record::Start {
            wtype, input, id, ..
        } => (
            None,
            Some(wtype),
            None,
            Some(format!("id {id}")),
            Some(input),
        ),
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
            Some(payload),
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
            Some(error),
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
        Record::Signal { name, payload, .. } => (None, Some(name), None, None, Some(payload)),
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
        Record::Value { seq, value, .. } => (Some(*seq), None, None, None, Some(value)),
        Record::Child {
            seq, wtype, input, ..
        } => (Some(*seq), Some(wtype), None, None, Some(input)),
        Record::ChildDone {
            seq,
            status,
            payload,
            ..
        } => (Some(*seq), None, None, st(status), Some(payload)),
        Record::Send {
            seq, name, payload, ..
        } => (Some(*seq), Some(name), None, None, Some(payload)),
        Record::Cancel { reason, .. } => (None, None, None, None, Some(reason)),
        Record::Update { name, payload, .. } => (None, Some(name), None, None, Some(payload)),
        Record::UpdateDone {
            status, payload, ..
        } => (None, None, None, st(status), Some(payload)),
        Record::Heartbeat {
            seq,
            attempt,
            payload,
            ..
        } => (Some(*seq), None, Some(*attempt), None, Some(payload)),
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
        } => (Some(*seq), None, Some(*attempt), st(status), Some(payload)),
        Record::Attributes { payload, .. } => (None, None, None, None, Some(payload)),
        Record::Chunk { seq, payload, .. } => (Some(*seq), None, None, None, Some(payload)),
        Record::Done {
            status, payload, ..
        } => (None, None, None, st(status), Some(payload)),
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
    if json {
        print_json(&journal::to_json(&j));
        return Ok(ExitCode::SUCCESS);
    }
    let s = &j.summary;
    println!("id        {}", s.id);
    println!("workflow  {}", s.workflow);
    println!("shard     {}  run {}", s.shard, s.run);
    println!("status    {}", s.state.name());
    println!("started   {}", fmt::time(s.started_ms));
    println!("finished  {}", s.finished_ms.map_or("-".into(), fmt::time));
    if !j.complete {
        println!(
            "note      a finished run parked in the run store keeps only its Start and Done records"
        );
    }
    let mut t = fmt::table(&["#", "seq", "kind", "name", "attempt", "status", "payload"]);
    for (i, rec) in j.records.iter().enumerate() {
        let (seq, name, attempt, status, payload) = describe(rec);
        let opt = |v: Option<u32>| v.map_or(String::new(), |v| v.to_string());
        t.add_row(vec![
            i.to_string(),
            opt(seq),
            rec.kind_name().to_string(),
            name.unwrap_or_default().to_string(),
            opt(attempt),
            status.unwrap_or_default(),
            payload.map_or(String::new(), |p| fmt::payload(p, PAYLOAD_CHARS)),
        ]);
    }
    println!("\n{t}");
    Ok(ExitCode::SUCCESS)
}
