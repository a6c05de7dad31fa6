//! A run's journal as JSON: the documented, versioned format of
//! `fusee show --json`, which round-trips every record exactly (what the
//! test kit's replay tests read).
//!
//! # Format `fusee-journal`, version 1
//!
//! ```json
//! {
//!   "format": "fusee-journal",
//!   "version": 1,
//!   "shard": 0, "run": 3, "id": "order-42", "workflow": "checkout",
//!   "state": "ok", "complete": true,
//!   "records": [
//!     {"kind": "Start", "run": 3, "id": "order-42", ...},
//!     {"kind": "Step", "run": 3, "seq": 1, "name": "charge", "attempt": 1,
//!      "status": "ok", "payload": {"json": "charged"}}
//!   ]
//! }
//! ```
//!
//! `state` is the run's state as `fusee runs` names it; `complete` is false
//! for a finished run whose stored frame keeps only its `Start` and `Done`.
//! A reader takes `records` and may ignore every other top-level field.
//!
//! Each record is an object with `kind` (the variant name of
//! `fusee_core::record::Record`: `Start`, `Step`, ... `Done`, `Began`) and
//! the variant's fields under their Rust names, in any order, but one: a
//! `Value` record's own `kind` field is `value_kind`. Values:
//!
//! | field type | JSON |
//! |---|---|
//! | integers (`run`, `seq`, `attempt`, times, `dedup`, `ordinal`, `version`, `codec`, `policy`, `flags`, `value_kind`, `copies`) | a number (exact: up to 2^64 - 1) |
//! | strings (names, IDs, types) | a string |
//! | bytes (payloads, inputs, errors, `by`, `reason`) | `{"json": v}` when the bytes are exactly the compact JSON text of `v` (as `serde_json` writes it), else `{"hex": "..."}` (lower-case, two digits a byte) |
//! | `status` | `ok`, `failed`, `cancelled`, `timed-out`, `terminated`, `continued-as-new`, `reset` |
//! | options (`parent`, `from`, `update`, `meta`, `by`, `caller`) | `null`, or the value |
//! | `parent`, `caller` | `{"shard", "run", "seq"}` |
//! | `from` | `{"run", "cause"}` |
//! | `update` | `{"id", "name", "payload"}` |
//! | `meta` | `{"attributes", "memo"}` (bytes) |
//! | `outcome` (of `Waited`) | `{"signal": ordinal}`, `"timed-out"` or `"abandoned"` |
//!
//! [`from_json`] of [`to_json`]'s output is the same records, so the same
//! canonical bytes. A later version may add fields; it changes `version`
//! when a reader of this one would misread it.
//!
//! ## `Began` (added within version 1)
//!
//! A step attempt's start, before its function ran:
//! `{"kind": "Began", "run", "seq", "name", "attempt", "started_ms"}`
//! (`started_ms`: the engine's clock when the attempt began, ms since the
//! Unix epoch). A step's first attempt has one at its call, in call order;
//! each later attempt (a retry, or an attempt begun again after a crash:
//! the later one of the same `attempt` supersedes the earlier) has one as
//! it starts. The attempt ends with the step's `Attempt` (a failure to
//! retry) or `Step` (its result) of the same `seq`; a `Began` with neither
//! after it is an attempt in flight, or cut by a crash. Journals written
//! before this kind have no `Began`; a reader of version 1 that does not
//! know the kind may skip records of unknown `kind`.
//!
//! ## `ended_ms` (added within version 1)
//!
//! A `Step` or `Attempt` record may have `"ended_ms"`: when the attempt's
//! function returned, by the engine's clock (ms since the Unix epoch); the
//! attempt's duration is `ended_ms` minus its `Began`'s `started_ms`. The
//! field is absent (and `null` reads the same) in records written before
//! the engine recorded it, as it is absent from their bytes; a reader of
//! version 1 that does not know it ignores it, and one that does shows no
//! duration without it.
//!
//! ## A cancel's `grace` (added within version 1)
//!
//! A `Cancel` record may have `"grace": {"until_ms": u64, "grace_ms":
//! u64}`: the run is terminated with the cancel's reason at `until_ms`
//! (engine clock, ms since the Unix epoch) unless it ends first, a grace
//! of `grace_ms` from the cancel. Absent (and `null` reads the same) for a
//! plain cancel, and in records written before the field, whose grace, if
//! any, is an `Attributes` record (key `fusee.cancel_grace`) after it.
//!
//! ## Decoded views (added within version 1)
//!
//! [`to_json`] writes, beside bytes the round trip keeps as `{"hex": ...}`,
//! a `decoded` field saying what they mean, for people and scripts; a
//! reader ignores it ([`from_json`] reads only `json` and `hex`, and
//! [`record_to_json`] writes no view), so documents with and without views
//! read back to the same records:
//!
//! | bytes | `decoded` |
//! |---|---|
//! | payloads and inputs of a run whose `Start` says `codec` 1 (JSON), when they parse as JSON but are not its exact compact text (keys not in sorted order, spaces) | the JSON value |
//! | a `Value` record of `value_kind` 0 (`ctx.now()`) | the time, RFC 3339 UTC with milliseconds (`"2023-11-14T22:13:20.000Z"`) |
//! | `value_kind` 1 (`ctx.random()`) | the number (exact: up to 2^64 - 1) |
//! | `value_kind` 2 (`ctx.uuid()`) | the UUID, hyphenated |
//! | `value_kind` 3 (a custom value) | as a payload |
//! | `reason` and `by` (text the engine writes) | the text, when it is UTF-8 |
//!
//! Bytes that decode as none of these get no view.

use std::fmt::Write as _;

use fusee_core::record::{
    CancelGrace, Name, Origin, ParentRef, Payload, Record, RecordBuf, StartMeta, StartUpdate,
    Status, WaitOutcome,
};
use serde_json::{Map, Value, json};

use super::{RunJournal, status_name, status_of};
use crate::workflow::CODEC_JSON;

/// The `format` field's value.
pub const FORMAT: &str = "fusee-journal";
/// The version this module writes and reads.
pub const VERSION: u64 = 1;

/// Why [`from_json`] refused a document.
#[derive(Debug, thiserror::Error)]
#[error("journal JSON{}: {why}", record.map(|i| format!(", record {i}")).unwrap_or_default())]
pub struct JournalError {
    /// The record (index in `records`) at fault, if one is.
    pub record: Option<usize>,
    /// What is wrong.
    pub why: String,
}

fn err(record: Option<usize>, why: impl Into<String>) -> JournalError {
    JournalError {
        record,
        why: why.into(),
    }
}

/// The journal document of `journal` (see the [module docs](self)), with
/// the decoded views of its bytes.
pub fn to_json(journal: &RunJournal) -> Value {
    let s = &journal.summary;
    let views = Views::On {
        codec: codec_of(&journal.records),
    };
    json!({
        "format": FORMAT,
        "version": VERSION,
        "shard": s.shard,
        "run": s.run,
        "id": s.id,
        "workflow": s.workflow,
        "state": s.state.name(),
        "complete": journal.complete,
        "records": journal.records.iter().map(|r| record_json(r, views)).collect::<Vec<_>>(),
    })
}

/// The `codec` byte of the run's `Start` record among `records`.
pub fn codec_of(records: &[RecordBuf]) -> Option<u8> {
    records.iter().find_map(|r| match r {
        Record::Start { codec, .. } => Some(*codec),
        _ => None,
    })
}

/// What payload bytes mean when the run's `codec` says they are JSON and
/// they parse; `None` otherwise (another codec, empty or not JSON).
pub fn decoded_payload(b: &[u8], codec: u8) -> Option<Value> {
    if codec != CODEC_JSON {
        return None;
    }
    serde_json::from_slice(b).ok()
}

/// What a `Value` record's bytes mean, as [`Ctx`](crate::Ctx) writes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// `ctx.now()`: ms since the Unix epoch (8 bytes, little-endian).
    Time(u64),
    /// `ctx.random()` (8 bytes, little-endian).
    Random(u64),
    /// `ctx.uuid()` (16 bytes).
    Uuid(uuid::Uuid),
}

/// A `Value` record's bytes of `kind` decoded; `None` for a custom value
/// (a payload) or bytes of the wrong length.
pub fn recorded(kind: u8, value: &[u8]) -> Option<Recorded> {
    use fusee_core::record::value_kind;
    let u64_le = || <[u8; 8]>::try_from(value).ok().map(u64::from_le_bytes);
    match kind {
        value_kind::NOW => u64_le().map(Recorded::Time),
        value_kind::RANDOM => u64_le().map(Recorded::Random),
        value_kind::UUID => uuid::Uuid::from_slice(value).ok().map(Recorded::Uuid),
        _ => None,
    }
}

/// A time in ms since the Unix epoch as RFC 3339 UTC with milliseconds;
/// `None` past chrono's range.
pub fn rfc3339(ms: u64) -> Option<String> {
    let ms = i64::try_from(ms).ok()?;
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

impl Recorded {
    /// The value as the `decoded` view writes it.
    pub fn to_json(&self) -> Value {
        match self {
            Recorded::Time(ms) => rfc3339(*ms).map_or_else(|| Value::from(*ms), Value::from),
            Recorded::Random(n) => Value::from(*n),
            Recorded::Uuid(u) => Value::from(u.hyphenated().to_string()),
        }
    }
}

/// Whether [`record_json`] adds `decoded` views, and the run's codec.
#[derive(Clone, Copy)]
enum Views {
    /// The exact fields only.
    Off,
    /// Views beside bytes the round trip keeps as hex; payloads are
    /// decoded as `codec` says.
    On { codec: Option<u8> },
}

/// `bytes_to_json(b)`, with `decoded: view()` beside a `hex` when views
/// are on and `view` has one.
fn with_view(b: &[u8], views: Views, view: impl FnOnce() -> Option<Value>) -> Value {
    let mut v = bytes_to_json(b);
    if let (Views::On { .. }, Value::Object(m)) = (views, &mut v)
        && m.contains_key("hex")
        && let Some(d) = view()
    {
        m.insert("decoded".into(), d);
    }
    v
}

/// The records of a journal document (any document with `format`
/// `fusee-journal` and `version` 1).
pub fn from_json(doc: &Value) -> Result<Vec<RecordBuf>, JournalError> {
    if doc.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Err(err(None, format!("`format` is not {FORMAT:?}")));
    }
    match doc.get("version").and_then(Value::as_u64) {
        Some(VERSION) => {}
        other => {
            return Err(err(
                None,
                format!("version {other:?}; this build reads version {VERSION}"),
            ));
        }
    }
    let records = doc
        .get("records")
        .and_then(Value::as_array)
        .ok_or_else(|| err(None, "`records` is not an array"))?;
    records
        .iter()
        .enumerate()
        .map(|(i, r)| record_from_json(r).map_err(|why| err(Some(i), why)))
        .collect()
}

/// Bytes as the format writes them: `{"json": v}` when they are exactly
/// `v`'s compact JSON text, else `{"hex": ...}`.
pub fn bytes_to_json(b: &[u8]) -> Value {
    if let Ok(v) = serde_json::from_slice::<Value>(b)
        && serde_json::to_vec(&v).is_ok_and(|again| again == b)
    {
        return json!({ "json": v });
    }
    json!({ "hex": hex(b) })
}

/// Lower-case hex, two digits a byte.
pub fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for byte in b {
        let _ = write!(s, "{byte:02x}");
    }
    s
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err("hex of an odd length".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("not hex: {s:?}"))
        })
        .collect()
}

fn bytes_from_json(v: &Value) -> Result<Payload, String> {
    if let Some(j) = v.get("json") {
        return serde_json::to_vec(j)
            .map(Payload::from)
            .map_err(|e| e.to_string());
    }
    match v.get("hex").and_then(Value::as_str) {
        Some(h) => unhex(h).map(Payload::from),
        None => Err(format!(
            "bytes are neither {{\"json\"}} nor {{\"hex\"}}: {v}"
        )),
    }
}

fn parent_json(p: &ParentRef) -> Value {
    json!({"shard": p.shard, "run": p.run, "seq": p.seq})
}

fn opt<T>(v: Option<&T>, f: impl Fn(&T) -> Value) -> Value {
    v.map_or(Value::Null, f)
}

/// One record as the format writes it: its exact fields, without the
/// decoded views [`to_json`] adds.
pub fn record_to_json(rec: &RecordBuf) -> Value {
    record_json(rec, Views::Off)
}

fn record_json(rec: &RecordBuf, views: Views) -> Value {
    let codec = match views {
        Views::On { codec } => codec,
        Views::Off => None,
    };
    let b = |x: &Payload| with_view(x, views, || codec.and_then(|c| decoded_payload(x, c)));
    // `reason` and `by`: text the engine writes, not payloads.
    let t = |x: &Payload| with_view(x, views, || std::str::from_utf8(x).ok().map(Value::from));
    let st = |s: &Status| Value::from(status_name(*s));
    let mut v = match rec {
        Record::Start {
            run,
            id,
            wtype,
            version,
            codec,
            started_ms,
            deadline_ms,
            parent,
            policy,
            from,
            copies,
            update,
            input,
            meta,
        } => json!({
            "run": run, "id": &**id, "wtype": &**wtype, "version": version, "codec": codec,
            "started_ms": started_ms, "deadline_ms": deadline_ms,
            "parent": opt(parent.as_ref(), parent_json), "policy": policy,
            "from": opt(from.as_ref(), |o: &Origin| json!({"run": o.run, "cause": o.cause})),
            "copies": copies,
            "update": opt(update.as_deref(), |u: &StartUpdate<Name, Payload>|
                json!({"id": &*u.id, "name": &*u.name, "payload": b(&u.payload)})),
            "input": b(input),
            "meta": opt(meta.as_deref(), |m: &StartMeta<Payload>|
                json!({"attributes": b(&m.attributes), "memo": b(&m.memo)})),
        }),
        Record::Step {
            run,
            seq,
            name,
            attempt,
            status,
            payload,
            ended_ms,
        } => with_ended(
            json!({"run": run, "seq": seq, "name": &**name, "attempt": attempt,
                "status": st(status), "payload": b(payload)}),
            *ended_ms,
        ),
        Record::Attempt {
            run,
            seq,
            name,
            attempt,
            retry_at_ms,
            error,
            ended_ms,
        } => with_ended(
            json!({"run": run, "seq": seq, "name": &**name, "attempt": attempt,
                "retry_at_ms": retry_at_ms, "error": b(error)}),
            *ended_ms,
        ),
        Record::Resume { run, seq }
        | Record::Fired { run, seq }
        | Record::StreamEnd { run, seq } => json!({"run": run, "seq": seq}),
        Record::Timer {
            run,
            seq,
            name,
            fire_at_ms,
        } => json!({"run": run, "seq": seq, "name": &**name, "fire_at_ms": fire_at_ms}),
        Record::Signal {
            run,
            name,
            dedup,
            payload,
            by,
        } => json!({"run": run, "name": &**name, "dedup": dedup, "payload": b(payload),
            "by": opt(by.as_ref(), t)}),
        Record::Wait {
            run,
            seq,
            name,
            deadline_ms,
        } => json!({"run": run, "seq": seq, "name": &**name, "deadline_ms": deadline_ms}),
        Record::Waited { run, seq, outcome } => {
            let outcome = match outcome {
                WaitOutcome::Signal(o) => json!({ "signal": o }),
                WaitOutcome::TimedOut => json!("timed-out"),
                WaitOutcome::Abandoned => json!("abandoned"),
            };
            json!({"run": run, "seq": seq, "outcome": outcome})
        }
        Record::Value {
            run,
            seq,
            kind,
            value,
        } => {
            let value = match recorded(*kind, value) {
                Some(r) => with_view(value, views, || Some(r.to_json())),
                None => b(value),
            };
            json!({"run": run, "seq": seq, "value_kind": kind, "value": value})
        }
        Record::Child {
            run,
            seq,
            wtype,
            id,
            flags,
            deadline_ms,
            input,
        } => json!({"run": run, "seq": seq, "wtype": &**wtype, "id": &**id, "flags": flags,
            "deadline_ms": deadline_ms, "input": b(input)}),
        Record::ChildDone {
            run,
            seq,
            status,
            payload,
        } => json!({"run": run, "seq": seq, "status": st(status), "payload": b(payload)}),
        Record::Send {
            run,
            seq,
            target,
            name,
            payload,
        } => json!({"run": run, "seq": seq, "target": &**target, "name": &**name,
            "payload": b(payload)}),
        Record::Cancel {
            run,
            reason,
            by,
            grace,
        } => {
            let mut v = json!({"run": run, "reason": t(reason), "by": opt(by.as_ref(), t)});
            // Written only when present, as the record's bytes do.
            if let (Some(g), Value::Object(m)) = (grace, &mut v) {
                m.insert(
                    "grace".into(),
                    json!({"until_ms": g.until_ms, "grace_ms": g.grace_ms}),
                );
            }
            v
        }
        Record::Update {
            run,
            id,
            name,
            payload,
            caller,
        } => json!({"run": run, "id": &**id, "name": &**name, "payload": b(payload),
            "caller": opt(caller.as_ref(), parent_json)}),
        Record::UpdateDone {
            run,
            ordinal,
            status,
            payload,
        } => json!({"run": run, "ordinal": ordinal, "status": st(status), "payload": b(payload)}),
        Record::Heartbeat {
            run,
            seq,
            attempt,
            payload,
        } => json!({"run": run, "seq": seq, "attempt": attempt, "payload": b(payload)}),
        Record::Patch { run, seq, id } => json!({"run": run, "seq": seq, "id": &**id}),
        Record::Awaiting {
            run,
            seq,
            name,
            attempt,
        } => json!({"run": run, "seq": seq, "name": &**name, "attempt": attempt}),
        Record::Completed {
            run,
            seq,
            attempt,
            status,
            payload,
        } => json!({"run": run, "seq": seq, "attempt": attempt, "status": st(status),
            "payload": b(payload)}),
        Record::Attributes { run, payload } => json!({"run": run, "payload": b(payload)}),
        Record::Chunk { run, seq, payload } => {
            json!({"run": run, "seq": seq, "payload": b(payload)})
        }
        Record::Done {
            run,
            status,
            finished_ms,
            payload,
            by,
        } => json!({"run": run, "status": st(status), "finished_ms": finished_ms,
            "payload": b(payload), "by": opt(by.as_ref(), t)}),
        Record::Began {
            run,
            seq,
            name,
            attempt,
            started_ms,
        } => json!({"run": run, "seq": seq, "name": &**name, "attempt": attempt,
            "started_ms": started_ms}),
    };
    if let Value::Object(map) = &mut v {
        // `kind` first, for people reading the file.
        let mut with_kind = Map::new();
        with_kind.insert("kind".into(), Value::from(rec.kind_name()));
        with_kind.append(map);
        return Value::Object(with_kind);
    }
    v
}

/// `v` with `"ended_ms"` when the record has one: written only when
/// present, as the record's bytes do, so journals of records without it
/// read as they did before the field.
fn with_ended(mut v: Value, ended_ms: Option<u64>) -> Value {
    if let (Some(ms), Value::Object(m)) = (ended_ms, &mut v) {
        m.insert("ended_ms".into(), Value::from(ms));
    }
    v
}

/// Reads a record's fields, each error naming the field.
struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn get(&self, f: &str) -> Result<&Value, String> {
        self.0.get(f).ok_or_else(|| format!("field `{f}` missing"))
    }

    fn u64(&self, f: &str) -> Result<u64, String> {
        self.get(f)?
            .as_u64()
            .ok_or_else(|| format!("field `{f}` is not an unsigned integer"))
    }

    /// A cancel's grace: absent or `null` for none.
    fn grace(&self, f: &str) -> Result<Option<CancelGrace>, String> {
        match self.0.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => {
                let g = Fields(m);
                Ok(Some(CancelGrace {
                    until_ms: g.u64("until_ms").map_err(|e| format!("`{f}`: {e}"))?,
                    grace_ms: g.u64("grace_ms").map_err(|e| format!("`{f}`: {e}"))?,
                }))
            }
            Some(_) => Err(format!("field `{f}` is not an object")),
        }
    }

    /// An optional integer: absent or `null` is `None`.
    fn opt_u64(&self, f: &str) -> Result<Option<u64>, String> {
        match self.0.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("field `{f}` is not an unsigned integer")),
        }
    }

    fn u32(&self, f: &str) -> Result<u32, String> {
        u32::try_from(self.u64(f)?).map_err(|_| format!("field `{f}` does not fit 32 bits"))
    }

    fn u8(&self, f: &str) -> Result<u8, String> {
        u8::try_from(self.u64(f)?).map_err(|_| format!("field `{f}` does not fit a byte"))
    }

    fn name(&self, f: &str) -> Result<Name, String> {
        self.get(f)?
            .as_str()
            .map(Name::from)
            .ok_or_else(|| format!("field `{f}` is not a string"))
    }

    fn bytes(&self, f: &str) -> Result<Payload, String> {
        bytes_from_json(self.get(f)?).map_err(|e| format!("field `{f}`: {e}"))
    }

    fn status(&self, f: &str) -> Result<Status, String> {
        let v = self.get(f)?;
        v.as_str()
            .and_then(status_of)
            .ok_or_else(|| format!("field `{f}` is not a status: {v}"))
    }

    /// An optional field: `null` (or absent) is `None`.
    fn opt<T>(
        &self,
        f: &str,
        read: impl FnOnce(Fields<'_>) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        match self.0.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => read(Fields(m))
                .map(Some)
                .map_err(|e| format!("field `{f}`: {e}")),
            Some(other) => Err(format!("field `{f}` is not an object: {other}")),
        }
    }

    fn opt_bytes(&self, f: &str) -> Result<Option<Payload>, String> {
        match self.0.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => bytes_from_json(v)
                .map(Some)
                .map_err(|e| format!("field `{f}`: {e}")),
        }
    }

    fn parent(&self, f: &str) -> Result<Option<ParentRef>, String> {
        self.opt(f, |p| {
            Ok(ParentRef {
                shard: p.u32("shard")?,
                run: p.u64("run")?,
                seq: p.u32("seq")?,
            })
        })
    }
}

/// One record from the format (the inverse of [`record_to_json`]).
pub fn record_from_json(v: &Value) -> Result<RecordBuf, String> {
    let map = v.as_object().ok_or("a record is not an object")?;
    let f = Fields(map);
    let kind = map
        .get("kind")
        .and_then(Value::as_str)
        .ok_or("field `kind` missing")?;
    let run = f.u64("run")?;
    Ok(match kind {
        "Start" => Record::Start {
            run,
            id: f.name("id")?,
            wtype: f.name("wtype")?,
            version: f.u32("version")?,
            codec: f.u8("codec")?,
            started_ms: f.u64("started_ms")?,
            deadline_ms: f.u64("deadline_ms")?,
            parent: f.parent("parent")?,
            policy: f.u8("policy")?,
            from: f.opt("from", |o| {
                Ok(Origin {
                    run: o.u64("run")?,
                    cause: o.u8("cause")?,
                })
            })?,
            copies: f.u32("copies")?,
            update: f
                .opt("update", |u| {
                    Ok(StartUpdate {
                        id: u.name("id")?,
                        name: u.name("name")?,
                        payload: u.bytes("payload")?,
                    })
                })?
                .map(Box::new),
            input: f.bytes("input")?,
            meta: f
                .opt("meta", |m| {
                    Ok(StartMeta {
                        attributes: m.bytes("attributes")?,
                        memo: m.bytes("memo")?,
                    })
                })?
                .map(Box::new),
        },
        "Step" => Record::Step {
            run,
            seq: f.u32("seq")?,
            name: f.name("name")?,
            attempt: f.u32("attempt")?,
            status: f.status("status")?,
            payload: f.bytes("payload")?,
            ended_ms: f.opt_u64("ended_ms")?,
        },
        "Attempt" => Record::Attempt {
            run,
            seq: f.u32("seq")?,
            name: f.name("name")?,
            attempt: f.u32("attempt")?,
            retry_at_ms: f.u64("retry_at_ms")?,
            error: f.bytes("error")?,
            ended_ms: f.opt_u64("ended_ms")?,
        },
        "Resume" => Record::Resume {
            run,
            seq: f.u32("seq")?,
        },
        "Timer" => Record::Timer {
            run,
            seq: f.u32("seq")?,
            name: f.name("name")?,
            fire_at_ms: f.u64("fire_at_ms")?,
        },
        "Fired" => Record::Fired {
            run,
            seq: f.u32("seq")?,
        },
        "Signal" => Record::Signal {
            run,
            name: f.name("name")?,
            dedup: f.u64("dedup")?,
            payload: f.bytes("payload")?,
            by: f.opt_bytes("by")?,
        },
        "Wait" => Record::Wait {
            run,
            seq: f.u32("seq")?,
            name: f.name("name")?,
            deadline_ms: f.u64("deadline_ms")?,
        },
        "Waited" => Record::Waited {
            run,
            seq: f.u32("seq")?,
            outcome: match f.get("outcome")? {
                Value::String(s) if s == "timed-out" => WaitOutcome::TimedOut,
                Value::String(s) if s == "abandoned" => WaitOutcome::Abandoned,
                Value::Object(m) => WaitOutcome::Signal(Fields(m).u64("signal")?),
                other => return Err(format!("field `outcome` is not an outcome: {other}")),
            },
        },
        "Value" => Record::Value {
            run,
            seq: f.u32("seq")?,
            kind: f.u8("value_kind")?,
            value: f.bytes("value")?,
        },
        "Child" => Record::Child {
            run,
            seq: f.u32("seq")?,
            wtype: f.name("wtype")?,
            id: f.name("id")?,
            flags: f.u8("flags")?,
            deadline_ms: f.u64("deadline_ms")?,
            input: f.bytes("input")?,
        },
        "ChildDone" => Record::ChildDone {
            run,
            seq: f.u32("seq")?,
            status: f.status("status")?,
            payload: f.bytes("payload")?,
        },
        "Send" => Record::Send {
            run,
            seq: f.u32("seq")?,
            target: f.name("target")?,
            name: f.name("name")?,
            payload: f.bytes("payload")?,
        },
        "Cancel" => Record::Cancel {
            run,
            reason: f.bytes("reason")?,
            by: f.opt_bytes("by")?,
            grace: f.grace("grace")?,
        },
        "Update" => Record::Update {
            run,
            id: f.name("id")?,
            name: f.name("name")?,
            payload: f.bytes("payload")?,
            caller: f.parent("caller")?,
        },
        "UpdateDone" => Record::UpdateDone {
            run,
            ordinal: f.u64("ordinal")?,
            status: f.status("status")?,
            payload: f.bytes("payload")?,
        },
        "Heartbeat" => Record::Heartbeat {
            run,
            seq: f.u32("seq")?,
            attempt: f.u32("attempt")?,
            payload: f.bytes("payload")?,
        },
        "Patch" => Record::Patch {
            run,
            seq: f.u32("seq")?,
            id: f.name("id")?,
        },
        "Awaiting" => Record::Awaiting {
            run,
            seq: f.u32("seq")?,
            name: f.name("name")?,
            attempt: f.u32("attempt")?,
        },
        "Completed" => Record::Completed {
            run,
            seq: f.u32("seq")?,
            attempt: f.u32("attempt")?,
            status: f.status("status")?,
            payload: f.bytes("payload")?,
        },
        "Attributes" => Record::Attributes {
            run,
            payload: f.bytes("payload")?,
        },
        "Chunk" => Record::Chunk {
            run,
            seq: f.u32("seq")?,
            payload: f.bytes("payload")?,
        },
        "StreamEnd" => Record::StreamEnd {
            run,
            seq: f.u32("seq")?,
        },
        "Done" => Record::Done {
            run,
            status: f.status("status")?,
            finished_ms: f.u64("finished_ms")?,
            payload: f.bytes("payload")?,
            by: f.opt_bytes("by")?,
        },
        "Began" => Record::Began {
            run,
            seq: f.u32("seq")?,
            name: f.name("name")?,
            attempt: f.u32("attempt")?,
            started_ms: f.u64("started_ms")?,
        },
        other => return Err(format!("unknown record kind {other:?}")),
    })
}

#[cfg(test)]
mod tests {
    use fusee_core::record::{PAUSED, encode_canonical};

    use super::*;

    fn p(b: &[u8]) -> Payload {
        Payload::from(b)
    }

    fn n(s: &str) -> Name {
        Name::from(s)
    }

    /// One record of every kind, with every option both ways and payloads
    /// that are JSON, not quite JSON (spaces) and not UTF-8.
    fn every_kind() -> Vec<RecordBuf> {
        let parent = Some(ParentRef {
            shard: 3,
            run: 9,
            seq: 2,
        });
        vec![
            Record::Start {
                run: 1,
                id: n("id"),
                wtype: n("w"),
                version: 7,
                codec: 1,
                started_ms: 1_700_000_000_000,
                deadline_ms: 0,
                parent,
                policy: 0b1_0110,
                from: Some(Origin { run: 4, cause: 1 }),
                copies: 2,
                update: Some(Box::new(StartUpdate {
                    id: n("u"),
                    name: n("h"),
                    payload: p(b"{\"a\":1}"),
                })),
                input: p(b"{\"id\":42,\"cents\":1999}"),
                meta: Some(Box::new(StartMeta {
                    attributes: p(b"[1,2]"),
                    memo: p(&[0xff, 0]),
                })),
            },
            Record::Start {
                run: 2,
                id: n(""),
                wtype: n("w"),
                version: 0,
                codec: 0,
                started_ms: 0,
                deadline_ms: u64::MAX,
                parent: None,
                policy: 0,
                from: None,
                copies: 0,
                update: None,
                input: p(b""),
                meta: None,
            },
            Record::Step {
                run: 1,
                seq: 1,
                name: n("charge"),
                attempt: 1,
                status: Status::Ok,
                payload: p(b"\"charged\""),
                ended_ms: None,
            },
            Record::Step {
                run: 1,
                seq: 9,
                name: n("timed"),
                attempt: 2,
                status: Status::Failed,
                payload: p(b"\"no\""),
                ended_ms: Some(u64::MAX),
            },
            Record::Attempt {
                run: 1,
                seq: 2,
                name: n("s"),
                attempt: 3,
                retry_at_ms: PAUSED,
                error: p(b"{ \"spaced\": true }"),
                ended_ms: Some(1_700_000_000_123),
            },
            Record::Attempt {
                run: 1,
                seq: 2,
                name: n("s"),
                attempt: 4,
                retry_at_ms: 0,
                error: p(b""),
                ended_ms: None,
            },
            Record::Resume { run: 1, seq: 2 },
            Record::Timer {
                run: 1,
                seq: 3,
                name: n("t"),
                fire_at_ms: 5,
            },
            Record::Fired { run: 1, seq: 3 },
            Record::Signal {
                run: 1,
                name: n("approved"),
                dedup: u64::MAX,
                payload: p(b"true"),
                by: Some(p(b"ops")),
            },
            Record::Signal {
                run: 1,
                name: n("x"),
                dedup: 0,
                payload: p(b"1.5"),
                by: None,
            },
            Record::Wait {
                run: 1,
                seq: 4,
                name: n("approved"),
                deadline_ms: 9,
            },
            Record::Waited {
                run: 1,
                seq: 4,
                outcome: WaitOutcome::Signal(0),
            },
            Record::Waited {
                run: 1,
                seq: 5,
                outcome: WaitOutcome::TimedOut,
            },
            Record::Waited {
                run: 1,
                seq: 6,
                outcome: WaitOutcome::Abandoned,
            },
            Record::Value {
                run: 1,
                seq: 7,
                kind: 2,
                value: p(&[1, 2, 3]),
            },
            Record::Child {
                run: 1,
                seq: 8,
                wtype: n("c"),
                id: n("cid"),
                flags: 12,
                deadline_ms: 3,
                input: p(b"null"),
            },
            Record::ChildDone {
                run: 1,
                seq: 8,
                status: Status::Terminated,
                payload: p(b""),
            },
            Record::Send {
                run: 1,
                seq: 9,
                target: n("other"),
                name: n("fusee.cancel"),
                payload: p(b"{}"),
            },
            Record::Cancel {
                run: 1,
                reason: p(b"why"),
                by: Some(p(b"")),
                grace: None,
            },
            Record::Update {
                run: 1,
                id: n("u1"),
                name: n("h"),
                payload: p(b"[]"),
                caller: parent,
            },
            Record::UpdateDone {
                run: 1,
                ordinal: 0,
                status: Status::Reset,
                payload: p(b"0"),
            },
            Record::Heartbeat {
                run: 1,
                seq: 10,
                attempt: 1,
                payload: p(b"-0"),
            },
            Record::Patch {
                run: 1,
                seq: 11,
                id: n("v2"),
            },
            Record::Awaiting {
                run: 1,
                seq: 12,
                name: n("a"),
                attempt: 2,
            },
            Record::Completed {
                run: 1,
                seq: 12,
                attempt: 2,
                status: Status::ContinuedAsNew,
                payload: p(b"1e5"),
            },
            Record::Attributes {
                run: 1,
                payload: p(b"{\"b\":1,\"a\":2}"),
            },
            Record::Chunk {
                run: 1,
                seq: 13,
                payload: p("é".as_bytes()),
            },
            Record::StreamEnd { run: 1, seq: 13 },
            Record::Done {
                run: 1,
                status: Status::TimedOut,
                finished_ms: 11,
                payload: p(b"\"done\""),
                by: Some(p(b"deadline")),
            },
            Record::Done {
                run: (1 << 48) - 1,
                status: Status::Cancelled,
                finished_ms: 0,
                payload: p(b""),
                by: None,
            },
            Record::Began {
                run: 1,
                seq: u32::MAX,
                name: n("charge"),
                attempt: 3,
                started_ms: u64::MAX,
            },
        ]
    }

    #[test]
    fn every_kind_round_trips_to_the_same_canonical_bytes() {
        let records = every_kind();
        let kinds: std::collections::BTreeSet<u8> = records.iter().map(|r| r.kind()).collect();
        assert_eq!(
            kinds.len(),
            fusee_core::record::kind::ALL.len(),
            "every record kind is covered"
        );
        for rec in &records {
            let v = record_to_json(rec);
            // Through text, as a file would carry it.
            let text = serde_json::to_string_pretty(&v).expect("serialises");
            let back: Value = serde_json::from_str(&text).expect("parses");
            let again = record_from_json(&back).unwrap_or_else(|e| panic!("{rec:?}: {e}"));
            assert_eq!(&again, rec);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            encode_canonical(rec, &mut a);
            encode_canonical(&again, &mut b);
            assert_eq!(a, b);
        }
    }

    #[test]
    fn payloads_are_json_only_when_exact() {
        assert_eq!(bytes_to_json(b"{\"a\":1}"), json!({"json": {"a": 1}}));
        assert_eq!(
            bytes_to_json(b"{ \"a\": 1 }"),
            json!({"hex": hex(b"{ \"a\": 1 }")})
        );
        // Keys out of order would come back sorted: not exact.
        assert!(bytes_to_json(b"{\"b\":1,\"a\":2}").get("hex").is_some());
        assert_eq!(bytes_to_json(&[0xff]), json!({"hex": "ff"}));
        assert_eq!(bytes_to_json(b""), json!({"hex": ""}));
    }

    /// A journal of `records` as `to_json` takes it.
    fn journal_of(records: Vec<RecordBuf>) -> RunJournal {
        RunJournal {
            summary: super::super::RunSummary {
                shard: 0,
                run: 1,
                id: "id".into(),
                workflow: "w".into(),
                state: super::super::RunState::Finished(Status::Cancelled),
                started_ms: 0,
                finished_ms: Some(11),
                last_lsn: 0,
                waiting_for: Vec::new(),
                attributes: Default::default(),
            },
            records,
            complete: true,
        }
    }

    #[test]
    fn decoded_views_sit_beside_the_exact_bytes_and_readers_ignore_them() {
        use fusee_core::record::value_kind;
        let uuid = uuid::Uuid::from_u128(0x0123_4567_89ab_4cde_8f01_2345_6789_abcd);
        let records = |codec| {
            vec![
                Record::Start {
                    run: 1,
                    id: n("id"),
                    wtype: n("w"),
                    version: 0,
                    codec,
                    started_ms: 0,
                    deadline_ms: 0,
                    parent: None,
                    policy: 0,
                    from: None,
                    copies: 0,
                    update: None,
                    // Fields in declaration order, as serde writes a struct.
                    input: p(b"{\"id\":42,\"cents\":1999,\"b\":true,\"a\":1}"),
                    meta: None,
                },
                Record::Value {
                    run: 1,
                    seq: 1,
                    kind: value_kind::NOW,
                    value: p(&1_700_000_000_123u64.to_le_bytes()),
                },
                Record::Value {
                    run: 1,
                    seq: 2,
                    kind: value_kind::RANDOM,
                    value: p(&u64::MAX.to_le_bytes()),
                },
                Record::Value {
                    run: 1,
                    seq: 3,
                    kind: value_kind::UUID,
                    value: p(uuid.as_bytes()),
                },
                Record::Value {
                    run: 1,
                    seq: 4,
                    kind: value_kind::NOW,
                    value: p(&[1, 2, 3]),
                },
                Record::Cancel {
                    run: 1,
                    reason: p(b"changed my mind"),
                    by: Some(p(&[0xff])),
                    grace: Some(CancelGrace {
                        until_ms: 1_700_000_030_000,
                        grace_ms: 30_000,
                    }),
                },
                Record::Done {
                    run: 1,
                    status: Status::Cancelled,
                    finished_ms: 11,
                    payload: p(b"{ \"spaced\": 1 }"),
                    by: Some(p(b"client")),
                },
            ]
        };
        let doc = to_json(&journal_of(records(CODEC_JSON)));
        let r = &doc["records"];
        // Keys out of sorted order are exact JSON only where serde_json
        // keeps insertion order (its `preserve_order` feature): either way
        // the value is shown, as `json` or as a view beside the hex.
        let input = &r[0]["input"];
        assert_eq!(
            input.get("json").or(input.get("decoded")),
            Some(&json!({"id": 42, "cents": 1999, "b": true, "a": 1})),
            "{input}"
        );
        assert!(input.get("json").is_some() || input["hex"].is_string());
        assert_eq!(r[1]["value"]["decoded"], "2023-11-14T22:13:20.123Z");
        assert_eq!(r[2]["value"]["decoded"], json!(u64::MAX));
        assert_eq!(
            r[3]["value"]["decoded"],
            "01234567-89ab-4cde-8f01-23456789abcd"
        );
        assert!(r[4]["value"].get("decoded").is_none(), "3 bytes: no time");
        assert_eq!(r[5]["reason"]["decoded"], "changed my mind");
        assert!(r[5]["by"].get("decoded").is_none(), "not UTF-8");
        assert_eq!(r[6]["payload"]["decoded"], json!({"spaced": 1}));
        assert_eq!(r[6]["by"]["decoded"], "client");
        // Read back: the same records, through text as a file carries them.
        let text = serde_json::to_string(&doc).expect("serialises");
        let back = from_json(&serde_json::from_str(&text).expect("parses")).expect("reads");
        assert_eq!(back, records(CODEC_JSON));
        // The round-trip form has no views.
        for rec in records(CODEC_JSON) {
            assert!(!record_to_json(&rec).to_string().contains("decoded"));
        }
        // Another codec: payloads are not decoded as JSON; values still are.
        let other = to_json(&journal_of(records(7)));
        assert!(other["records"][0]["input"].get("decoded").is_none());
        assert!(other["records"][6]["payload"].get("decoded").is_none());
        assert_eq!(
            other["records"][1]["value"]["decoded"],
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(from_json(&other).expect("reads"), records(7));
    }

    #[test]
    fn bad_documents_are_named_errors() {
        assert!(from_json(&json!({"format": "x", "version": 1, "records": []})).is_err());
        assert!(from_json(&json!({"format": FORMAT, "version": 2, "records": []})).is_err());
        let e = from_json(&json!({"format": FORMAT, "version": 1,
            "records": [{"kind": "Fired", "run": 1}]}))
        .expect_err("seq missing");
        assert_eq!(e.record, Some(0));
        assert!(e.why.contains("seq"), "{e}");
        assert!(record_from_json(&json!({"kind": "Nope", "run": 1})).is_err());
        assert!(
            record_from_json(&json!({"kind": "Step", "run": 1, "seq": 1, "name": "a",
            "attempt": 1, "status": "fine", "payload": {"hex": ""}}))
            .is_err()
        );
        assert!(record_from_json(&json!({"kind": "Fired", "run": 1, "seq": 1u64 << 33})).is_err());
        assert!(bytes_from_json(&json!({"hex": "abc"})).is_err());
        assert!(
            record_from_json(&json!({"kind": "Step", "run": 1, "seq": 1, "name": "a",
            "attempt": 1, "status": "ok", "payload": {"hex": ""}, "ended_ms": -1}))
            .is_err(),
            "a negative end time"
        );
    }

    /// `ended_ms` is written only when the record has one, so a document
    /// written before the field reads as before: absent (or `null`) is
    /// `None`.
    #[test]
    fn end_times_are_written_when_present_and_absent_reads_as_none() {
        let step = |ended_ms| Record::Step {
            run: 1,
            seq: 1,
            name: n("a"),
            attempt: 1,
            status: Status::Ok,
            payload: p(b"1"),
            ended_ms,
        };
        let old = json!({"kind": "Step", "run": 1, "seq": 1, "name": "a", "attempt": 1,
            "status": "ok", "payload": {"json": 1}});
        assert_eq!(record_to_json(&step(None)), old);
        assert_eq!(record_from_json(&old), Ok(step(None)));
        let mut null = old.clone();
        null["ended_ms"] = Value::Null;
        assert_eq!(record_from_json(&null), Ok(step(None)));
        let new = record_to_json(&step(Some(1_700_000_000_250)));
        assert_eq!(new["ended_ms"], 1_700_000_000_250u64);
        assert_eq!(record_from_json(&new), Ok(step(Some(1_700_000_000_250))));
        let attempt = Record::Attempt {
            run: 1,
            seq: 1,
            name: n("a"),
            attempt: 1,
            retry_at_ms: 5,
            error: p(b""),
            ended_ms: Some(4),
        };
        assert_eq!(record_to_json(&attempt)["ended_ms"], 4);
        assert_eq!(record_from_json(&record_to_json(&attempt)), Ok(attempt));
    }
}
