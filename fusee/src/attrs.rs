//! Search attributes: typed values a run carries so that listings can find
//! it ([`SearchAttributes`], [`AttrValue`], [`AttrCondition`]), their one
//! recorded format, and the per-shard index over them (`AttrIndex`).
//!
//! # The payload format (`Attributes` records and `Start` meta)
//!
//! A run's `Attributes` records (tag 21) and the `attributes` bytes of its
//! `Start` record's meta are each one JSON object. Keys beginning with
//! `fusee.` are the engine's; any other key is ignored (kept for later
//! versions; the `Start` meta's `traceparent` is [`crate::trace`]'s):
//!
//! - `"fusee.attrs"`: an object from attribute name to a typed value,
//!   `{"keyword": "gold"}`, `{"text": "a note"}`, `{"int": 42}`,
//!   `{"float": 1.5}`, `{"bool": true}` or `{"time": <ms since the Unix
//!   epoch>}`, or `null`, which removes the attribute. Later records win,
//!   name by name (an upsert); the `Start` meta's set comes first.
//! - `"fusee.code"`: `true` on a record the run's own code made
//!   ([`Ctx::set_attributes`](crate::Ctx::set_attributes)): replay counts
//!   them, and the code's `n`th call records only when the journal holds
//!   fewer than `n` (so a replay records nothing twice, wherever other
//!   `Attributes` records fall).
//! - `"fusee.paused"` (bool) and `"fusee.held"` (string): the operator's
//!   pause and the replay check's hold (`runtime/operator`).
//!
//! Journals written before search attributes existed hold only the pause
//! keys, so they read as runs without attributes. A value that is not one
//! of the typed forms above (a later type, a hand-edited journal) is
//! skipped when read, never an error: journals always decode.
//!
//! # What carries them
//!
//! - Parking and restarts: they are records of the run's journal.
//! - Continue-as-new: the new run's `Start` meta carries the run's
//!   attributes as they stand when it continues (recorded in the same
//!   `Done` that hands over). A reset's new run copies its `Start` and the
//!   records before the cut: its attributes as they stood there.
//! - Retention: a finished run keeps its attributes as long as it is
//!   listed. When its history time passes and its frame is cut to its
//!   `Start` and `Done`, its attributes as they stood at its end are
//!   folded into that `Start`'s meta.
//!
//! # The index
//!
//! Each shard keeps an in-memory `AttrIndex`: for each attribute name an
//! ordered set of (value, run), and each run's current values. It is the
//! same on every backend, kept current as `Attributes` and `Start` records
//! are appended, and comes back at an open in one of two ways:
//!
//! - **From its snapshot**, after a clean close or a crash alike: every
//!   checkpoint names the index's frames as they stand then (a base
//!   written once, and deltas of the runs changed since each checkpoint;
//!   format in `attrs/snapshot.rs`, life in `runtime/search`), and an open
//!   reads them, so its first filtered listing needs no run's frame. Cost
//!   (measured with `benches/benches/list_attrs.rs`, 1,000,000 parked runs
//!   of 3 attributes each, 2 shards, file backend): the base is about 32
//!   bytes a value and is written again once the deltas pass a quarter of its
//!   size; the open reads it in about 0.2 s more, and the first filtered
//!   page takes about 1 ms (`benches/RESULTS.md`).
//! - **Otherwise** (a store written before snapshots, a copy made by
//!   `migrate` or a backup, or a snapshot that does not read): built from
//!   the runs (loaded runs from memory, parked runs by reading their
//!   frames), newest first. The build does not slow the open: it runs in
//!   the background (a batch of runs per loop iteration, between the
//!   shard's other work) once the shard is seen to use attributes (a
//!   loaded run or one of the 64 newest parked runs holds some at open,
//!   or one is set). A listing that filters by an attribute before it is
//!   done reads on, newest first, as far as its page needs: a page takes
//!   only runs at or above the build's frontier, all of which are in the
//!   index. A build of 1,000,000 parked runs takes about 4 s on the file
//!   backend (one frame read per run; where every read is a round trip to
//!   a server, as on PostgreSQL, the frames are fetched 256 at a time).
//!   The first checkpoint after the build writes the base.
//!
//! A shard whose runs never carry attributes reads no frame for it and
//! writes no snapshot. About 580 bytes of resident memory a run of 3
//! attributes (measured before the arena of `RunValues`; less since).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use fusee_core::record::{Payload, Record, RunId, StartMeta, Walked, iter_canonical_passing, kind};
use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

mod snapshot;
pub(crate) use snapshot::SnapshotError;

/// The payload key holding search attributes.
pub(crate) const ATTRS_KEY: &str = "fusee.attrs";
/// The payload key marking a record the run's code made.
pub(crate) const CODE_KEY: &str = "fusee.code";
/// The longest attribute name, in bytes.
pub const NAME_MAX: usize = 256;

/// One search attribute's value: its type and what it holds.
#[derive(Clone, Debug)]
pub enum AttrValue {
    /// A string compared whole (an identifier, a tier, a region).
    Keyword(String),
    /// A string compared whole too, kept apart from keywords (no word
    /// search: filters match the whole value or a range of values).
    Text(String),
    /// A signed 64-bit integer.
    Int(i64),
    /// A 64-bit float (not NaN).
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A time, in ms since the Unix epoch.
    Time(u64),
}

impl PartialEq for AttrValue {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for AttrValue {}

impl AttrValue {
    /// Its type's name, as the recorded format and the filter text spell
    /// it: `keyword`, `text`, `int`, `float`, `bool`, `time`.
    pub fn type_name(&self) -> &'static str {
        match self {
            AttrValue::Keyword(_) => "keyword",
            AttrValue::Text(_) => "text",
            AttrValue::Int(_) => "int",
            AttrValue::Float(_) => "float",
            AttrValue::Bool(_) => "bool",
            AttrValue::Time(_) => "time",
        }
    }

    /// Parses the filter text form of a value: `type:value` with a type of
    /// [`type_name`](Self::type_name) (a time as ms since the epoch or
    /// RFC 3339), or a bare value: `true`/`false` a bool, an integer an
    /// int, a decimal number a float, anything else a keyword. A prefix
    /// before `:` that names no type is an error (write `keyword:a:b` for
    /// a keyword holding a colon).
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: String| Error::InvalidAttribute(why);
        if let Some((ty, v)) = text.split_once(':') {
            return match ty {
                "keyword" => Ok(AttrValue::Keyword(v.to_string())),
                "text" => Ok(AttrValue::Text(v.to_string())),
                "int" => v
                    .parse()
                    .map(AttrValue::Int)
                    .map_err(|e| bad(format!("{v:?} is not an int: {e}"))),
                "float" => match v.parse::<f64>() {
                    Ok(f) if !f.is_nan() => Ok(AttrValue::Float(f)),
                    Ok(_) => Err(bad("a float attribute may not be NaN".into())),
                    Err(e) => Err(bad(format!("{v:?} is not a float: {e}"))),
                },
                "bool" => v
                    .parse()
                    .map(AttrValue::Bool)
                    .map_err(|_| bad(format!("{v:?} is not a bool (true or false)"))),
                "time" => parse_time(v).map(AttrValue::Time),
                other => Err(bad(format!(
                    "unknown attribute type {other:?} in {text:?} (known: keyword, text, int, \
                     float, bool, time; write keyword:{text} for a keyword holding a colon)"
                ))),
            };
        }
        if text.is_empty() {
            return Err(bad(
                "an empty value (write keyword: for an empty keyword)".into()
            ));
        }
        Ok(match text {
            "true" => AttrValue::Bool(true),
            "false" => AttrValue::Bool(false),
            _ => {
                if let Ok(i) = text.parse::<i64>() {
                    AttrValue::Int(i)
                } else if let Ok(f) = text.parse::<f64>().map_err(|_| ())
                    && !f.is_nan()
                    && text.bytes().any(|b| b.is_ascii_digit())
                {
                    AttrValue::Float(f)
                } else {
                    AttrValue::Keyword(text.to_string())
                }
            }
        })
    }

    /// Its recorded JSON form (`{"int": 42}`), also the HTTP API's.
    pub fn to_json(&self) -> Value {
        let v = match self {
            AttrValue::Keyword(s) | AttrValue::Text(s) => Value::from(s.as_str()),
            AttrValue::Int(i) => Value::from(*i),
            AttrValue::Float(f) => Value::from(*f),
            AttrValue::Bool(b) => Value::from(*b),
            AttrValue::Time(t) => Value::from(*t),
        };
        let mut m = Map::new();
        m.insert(self.type_name().to_string(), v);
        Value::Object(m)
    }

    /// A value from its recorded JSON form; `None` for anything else.
    pub fn from_json(v: &Value) -> Option<Self> {
        let m = v.as_object()?;
        if m.len() != 1 {
            return None;
        }
        let (ty, v) = m.iter().next()?;
        Some(match ty.as_str() {
            "keyword" => AttrValue::Keyword(v.as_str()?.to_string()),
            "text" => AttrValue::Text(v.as_str()?.to_string()),
            "int" => AttrValue::Int(v.as_i64()?),
            "float" => AttrValue::Float(v.as_f64().filter(|f| !f.is_nan())?),
            "bool" => AttrValue::Bool(v.as_bool()?),
            "time" => AttrValue::Time(v.as_u64()?),
            _ => return None,
        })
    }

    /// Its place in the index's order: by type, then by value.
    pub(crate) fn key(&self) -> AttrKey {
        match self {
            AttrValue::Bool(b) => AttrKey::Bool(*b),
            AttrValue::Int(i) => AttrKey::Int(*i),
            AttrValue::Float(f) => {
                // Total order of floats as unsigned integers.
                let b = f.to_bits();
                AttrKey::Float(if b >> 63 == 1 { !b } else { b | (1 << 63) })
            }
            AttrValue::Time(t) => AttrKey::Time(*t),
            AttrValue::Keyword(s) => AttrKey::Keyword(s.as_str().into()),
            AttrValue::Text(s) => AttrKey::Text(s.as_str().into()),
        }
    }

    fn check(&self) -> Result<()> {
        match self {
            AttrValue::Float(f) if f.is_nan() => Err(Error::InvalidAttribute(
                "a float attribute may not be NaN".into(),
            )),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for AttrValue {
    /// The filter text form, `type:value` ([`AttrValue::parse`] reads it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Keyword(s) | AttrValue::Text(s) => write!(f, "{}:{s}", self.type_name()),
            AttrValue::Int(i) => write!(f, "int:{i}"),
            AttrValue::Float(x) => write!(f, "float:{x}"),
            AttrValue::Bool(b) => write!(f, "bool:{b}"),
            AttrValue::Time(t) => write!(f, "time:{t}"),
        }
    }
}

impl From<i64> for AttrValue {
    fn from(v: i64) -> Self {
        AttrValue::Int(v)
    }
}
impl From<i32> for AttrValue {
    fn from(v: i32) -> Self {
        AttrValue::Int(v.into())
    }
}
impl From<u32> for AttrValue {
    fn from(v: u32) -> Self {
        AttrValue::Int(v.into())
    }
}
impl From<f64> for AttrValue {
    fn from(v: f64) -> Self {
        AttrValue::Float(v)
    }
}
impl From<bool> for AttrValue {
    fn from(v: bool) -> Self {
        AttrValue::Bool(v)
    }
}
/// A string is a keyword ([`AttrValue::Text`] for text).
impl From<&str> for AttrValue {
    fn from(v: &str) -> Self {
        AttrValue::Keyword(v.to_string())
    }
}
/// A string is a keyword ([`AttrValue::Text`] for text).
impl From<String> for AttrValue {
    fn from(v: String) -> Self {
        AttrValue::Keyword(v)
    }
}

/// A time as ms since the epoch, or RFC 3339.
fn parse_time(v: &str) -> Result<u64> {
    if let Ok(ms) = v.parse::<u64>() {
        return Ok(ms);
    }
    let t = chrono::DateTime::parse_from_rfc3339(v).map_err(|e| {
        Error::InvalidAttribute(format!(
            "{v:?} is not a time (ms since the Unix epoch or RFC 3339): {e}"
        ))
    })?;
    u64::try_from(t.timestamp_millis())
        .map_err(|_| Error::InvalidAttribute(format!("time {v:?} is before 1970")))
}

/// Checks an attribute name: not empty, at most [`NAME_MAX`] bytes, not
/// beginning with `fusee.` (the engine's).
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(Error::InvalidAttribute(format!(
            "attribute name {name:?} must be 1 to {NAME_MAX} bytes"
        )));
    }
    if name.starts_with("fusee.") {
        return Err(Error::InvalidAttribute(format!(
            "attribute name {name:?}: names beginning with \"fusee.\" are the engine's"
        )));
    }
    Ok(())
}

/// Search attributes to set (an upsert: names not mentioned keep their
/// values) on a run: at its start ([`StartOptions::attributes`](crate::StartOptions::attributes))
/// or from its code ([`Ctx::set_attributes`](crate::Ctx::set_attributes)).
///
/// ```
/// # use fusee::SearchAttributes;
/// let a = SearchAttributes::new().int("customer_id", 42).keyword("tier", "gold");
/// # let _ = a;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchAttributes {
    values: BTreeMap<String, Option<AttrValue>>,
}

impl SearchAttributes {
    /// Nothing to set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `name` to `value`.
    pub fn set(mut self, name: impl Into<String>, value: impl Into<AttrValue>) -> Self {
        self.values.insert(name.into(), Some(value.into()));
        self
    }

    /// Sets keyword `name`.
    pub fn keyword(self, name: impl Into<String>, v: impl Into<String>) -> Self {
        self.set(name, AttrValue::Keyword(v.into()))
    }

    /// Sets text `name`.
    pub fn text(self, name: impl Into<String>, v: impl Into<String>) -> Self {
        self.set(name, AttrValue::Text(v.into()))
    }

    /// Sets int `name`.
    pub fn int(self, name: impl Into<String>, v: i64) -> Self {
        self.set(name, AttrValue::Int(v))
    }

    /// Sets float `name` (a NaN is refused where the set is used).
    pub fn float(self, name: impl Into<String>, v: f64) -> Self {
        self.set(name, AttrValue::Float(v))
    }

    /// Sets bool `name`.
    pub fn bool(self, name: impl Into<String>, v: bool) -> Self {
        self.set(name, AttrValue::Bool(v))
    }

    /// Sets time `name` (ms since the Unix epoch).
    pub fn time(self, name: impl Into<String>, ms: u64) -> Self {
        self.set(name, AttrValue::Time(ms))
    }

    /// Removes `name` from the run's attributes.
    pub fn remove(mut self, name: impl Into<String>) -> Self {
        self.values.insert(name.into(), None);
        self
    }

    /// Whether it sets or removes nothing.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Each name with its new value (`None`: removed).
    pub fn iter(&self) -> impl Iterator<Item = (&str, Option<&AttrValue>)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_ref()))
    }

    /// `Err` for a name or value the engine refuses.
    pub(crate) fn check(&self) -> Result<()> {
        for (name, v) in &self.values {
            check_name(name)?;
            if let Some(v) = v {
                v.check()?;
            }
        }
        Ok(())
    }

    /// The `"fusee.attrs"` object.
    fn to_json(&self) -> Value {
        let m: Map<String, Value> = self
            .values
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_ref().map_or(Value::Null, AttrValue::to_json),
                )
            })
            .collect();
        Value::Object(m)
    }

    /// The `Attributes` record payload setting these (see the module
    /// docs); `by_code` marks one the run's code made.
    pub(crate) fn payload(&self, by_code: bool) -> Vec<u8> {
        let mut m = Map::new();
        m.insert(ATTRS_KEY.into(), self.to_json());
        if by_code {
            m.insert(CODE_KEY.into(), Value::Bool(true));
        }
        Value::Object(m).to_string().into_bytes()
    }
}

/// A run's current attributes, by name.
pub type AttrMap = BTreeMap<String, AttrValue>;

/// Applies one recorded payload (an `Attributes` record's, or a `Start`
/// meta's attributes) to `attrs`. Anything but a JSON object with a
/// `"fusee.attrs"` object changes nothing.
pub(crate) fn apply_payload(attrs: &mut AttrMap, payload: &[u8]) {
    // Most payloads (a pause, a trace context) set none: no parse.
    if !holds(payload, ATTRS_KEY) {
        return;
    }
    let Ok(Value::Object(mut m)) = serde_json::from_slice::<Value>(payload) else {
        return;
    };
    let Some(Value::Object(set)) = m.remove(ATTRS_KEY) else {
        return;
    };
    for (name, v) in set {
        if v.is_null() {
            attrs.remove(&name);
        } else if let Some(v) = AttrValue::from_json(&v) {
            attrs.insert(name, v);
        }
    }
}

/// Whether `payload` holds `key` as a JSON string (`"key"`): a cheap test
/// before a parse.
fn holds(payload: &[u8], key: &str) -> bool {
    let k = key.as_bytes();
    payload
        .windows(k.len() + 2)
        .any(|w| w[0] == b'"' && w[k.len() + 1] == b'"' && &w[1..=k.len()] == k)
}

/// Whether a recorded payload is one the run's code made.
pub(crate) fn by_code(payload: &[u8]) -> bool {
    if !holds(payload, CODE_KEY) {
        return false;
    }
    serde_json::from_slice::<Value>(payload)
        .ok()
        .and_then(|v| v.get(CODE_KEY)?.as_bool())
        .unwrap_or(false)
}

/// A run's attributes from its `Start` meta and its `Attributes` payloads,
/// oldest first.
pub(crate) fn fold<'a>(
    meta: Option<&StartMeta<Payload>>,
    records: impl IntoIterator<Item = &'a [u8]>,
) -> AttrMap {
    let mut attrs = AttrMap::new();
    if let Some(m) = meta {
        apply_payload(&mut attrs, &m.attributes);
    }
    for p in records {
        apply_payload(&mut attrs, p);
    }
    attrs
}

/// A journal's (canonical bytes) attributes as they stand at its end, and
/// how many of its `Attributes` records its code made. Records that do
/// not decode end the walk.
pub(crate) fn of_journal(journal: &[u8]) -> (AttrMap, u32) {
    let mut attrs = AttrMap::new();
    let mut code = 0;
    // Stream chunks hold no attributes: framed, not decoded.
    for item in iter_canonical_passing(journal, kind::CHUNK) {
        let rec = match item {
            Ok(Walked::Record(rec, _)) => rec,
            Ok(Walked::Passed { .. }) => continue,
            Err(_) => break,
        };
        match rec {
            Record::Start { meta: Some(m), .. } => apply_payload(&mut attrs, m.attributes),
            Record::Attributes { payload, .. } => {
                apply_payload(&mut attrs, payload);
                if by_code(payload) {
                    code += 1;
                }
            }
            _ => {}
        }
    }
    (attrs, code)
}

/// The search attributes a run's journal (canonical bytes, as
/// [`crate::inspect`] reads it) holds at its end.
pub fn journal_attributes(journal: &[u8]) -> AttrMap {
    of_journal(journal).0
}

/// A `Start` meta's attributes bytes with `attrs` set as the run's
/// attributes (replacing any set it had), other keys (a trace context)
/// kept. `None` when there is nothing to record.
pub(crate) fn meta_with(
    old: Option<&StartMeta<Payload>>,
    attrs: &AttrMap,
) -> Option<Box<StartMeta<Payload>>> {
    let mut m = old
        .filter(|m| !m.attributes.is_empty())
        .and_then(|m| serde_json::from_slice::<Value>(&m.attributes).ok())
        .and_then(|v| match v {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default();
    m.remove(ATTRS_KEY);
    if !attrs.is_empty() {
        let set: Map<String, Value> = attrs
            .iter()
            .map(|(k, v)| (k.clone(), v.to_json()))
            .collect();
        m.insert(ATTRS_KEY.into(), Value::Object(set));
    }
    if m.is_empty() && old.is_none_or(|o| o.memo.is_empty()) {
        return None;
    }
    Some(Box::new(StartMeta {
        attributes: Payload::from(Value::Object(m).to_string().as_bytes()),
        memo: old.map_or_else(|| Payload::from(&b""[..]), |o| o.memo.clone()),
    }))
}

/// A start's meta: the trace context's, with `attrs` (those set, not
/// removals) added.
pub(crate) fn start_meta(
    trace: Option<Box<StartMeta<Payload>>>,
    attrs: Option<&SearchAttributes>,
) -> Option<Box<StartMeta<Payload>>> {
    let Some(set) = attrs.filter(|a| !a.is_empty()) else {
        return trace;
    };
    let mut map = AttrMap::new();
    for (k, v) in set.iter() {
        if let Some(v) = v {
            map.insert(k.to_string(), v.clone());
        }
    }
    meta_with(trace.as_deref(), &map)
}

/// One condition of a listing on an attribute: its value's type and
/// bounds ([`ListFilter::attribute`](crate::ListFilter::attribute) and
/// friends). A run matches when it has the attribute with a value of the
/// condition's type within the bounds: types never compare with each
/// other (an int condition does not match a float value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttrCondition {
    name: String,
    low: Bound<AttrValue>,
    high: Bound<AttrValue>,
}

impl AttrCondition {
    /// `name = value`.
    pub fn eq(name: impl Into<String>, value: impl Into<AttrValue>) -> Self {
        let v = value.into();
        Self::range(name, Bound::Included(v.clone()), Bound::Included(v))
    }

    /// `name` within `low` and `high` (at least one bounded, both of one
    /// type: checked when the listing runs).
    pub fn range(name: impl Into<String>, low: Bound<AttrValue>, high: Bound<AttrValue>) -> Self {
        Self {
            name: name.into(),
            low,
            high,
        }
    }

    /// The attribute's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Parses `name=value`, `name>value`, `name>=value`, `name<value`,
    /// `name<=value` or `name=low..high` (both included; a value holding
    /// `..` cannot be asked for by this form), values as
    /// [`AttrValue::parse`] reads them. Errors say what was expected.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::InvalidAttribute(format!(
                "filter {text:?}: {why} (expected name=value, name>value, name>=value, \
                 name<value, name<=value or name=low..high)"
            ))
        };
        let at = text
            .find(['=', '<', '>'])
            .ok_or_else(|| bad("no comparison"))?;
        let (name, rest) = text.split_at(at);
        let name = name.trim();
        if name.is_empty() {
            return Err(bad("no attribute name"));
        }
        let (op, value) = if let Some(v) = rest.strip_prefix(">=") {
            (">=", v)
        } else if let Some(v) = rest.strip_prefix("<=") {
            ("<=", v)
        } else {
            rest.split_at(1)
        };
        let value = value.trim();
        let cond = match op {
            "=" => match value.split_once("..") {
                Some((lo, hi)) => Self::range(
                    name,
                    Bound::Included(AttrValue::parse(lo)?),
                    Bound::Included(AttrValue::parse(hi)?),
                ),
                None => Self::eq(name, AttrValue::parse(value)?),
            },
            ">" => Self::range(
                name,
                Bound::Excluded(AttrValue::parse(value)?),
                Bound::Unbounded,
            ),
            ">=" => Self::range(
                name,
                Bound::Included(AttrValue::parse(value)?),
                Bound::Unbounded,
            ),
            "<" => Self::range(
                name,
                Bound::Unbounded,
                Bound::Excluded(AttrValue::parse(value)?),
            ),
            "<=" => Self::range(
                name,
                Bound::Unbounded,
                Bound::Included(AttrValue::parse(value)?),
            ),
            _ => return Err(bad("unknown comparison")),
        };
        cond.check()?;
        Ok(cond)
    }

    /// `Err` for a condition no value can be judged by: a bad name, no
    /// bound, bounds of two types, a NaN.
    pub(crate) fn check(&self) -> Result<()> {
        check_name(&self.name)?;
        let ty = |b: &Bound<AttrValue>| match b {
            Bound::Included(v) | Bound::Excluded(v) => Some((v.type_name(), v.check())),
            Bound::Unbounded => None,
        };
        match (ty(&self.low), ty(&self.high)) {
            (None, None) => Err(Error::InvalidAttribute(format!(
                "condition on {:?} has no bound",
                self.name
            ))),
            (Some((a, ra)), Some((b, rb))) => {
                ra?;
                rb?;
                if a != b {
                    return Err(Error::InvalidAttribute(format!(
                        "condition on {:?} compares a {a} with a {b}",
                        self.name
                    )));
                }
                Ok(())
            }
            (Some((_, r)), None) | (None, Some((_, r))) => r,
        }
    }

    fn bound_key(b: &Bound<AttrValue>) -> Bound<AttrKey> {
        match b {
            Bound::Included(v) => Bound::Included(v.key()),
            Bound::Excluded(v) => Bound::Excluded(v.key()),
            Bound::Unbounded => Bound::Unbounded,
        }
    }

    /// The condition over index keys.
    pub(crate) fn keys(&self) -> KeyRange {
        let kind = match (&self.low, &self.high) {
            (Bound::Included(v) | Bound::Excluded(v), _)
            | (_, Bound::Included(v) | Bound::Excluded(v)) => v.key().kind(),
            _ => 0,
        };
        KeyRange {
            kind,
            low: Self::bound_key(&self.low),
            high: Self::bound_key(&self.high),
        }
    }

    /// Whether it asks for one value.
    fn is_eq(&self) -> bool {
        matches!((&self.low, &self.high), (Bound::Included(a), Bound::Included(b)) if a == b)
    }

    /// Whether `v` passes.
    pub fn admits(&self, v: &AttrValue) -> bool {
        self.keys().admits(&v.key())
    }
}

impl fmt::Display for AttrCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.low, &self.high) {
            (Bound::Included(a), Bound::Included(b)) if a == b => write!(f, "{}={a}", self.name),
            (Bound::Included(a), Bound::Included(b)) => write!(f, "{}={a}..{b}", self.name),
            (Bound::Excluded(a), Bound::Unbounded) => write!(f, "{}>{a}", self.name),
            (Bound::Included(a), Bound::Unbounded) => write!(f, "{}>={a}", self.name),
            (Bound::Unbounded, Bound::Excluded(b)) => write!(f, "{}<{b}", self.name),
            (Bound::Unbounded, Bound::Included(b)) => write!(f, "{}<={b}", self.name),
            (l, h) => write!(f, "{} in ({l:?}, {h:?})", self.name),
        }
    }
}

/// A value's place in the index: by type, then value (floats as their
/// total order).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum AttrKey {
    Bool(bool),
    Int(i64),
    Float(u64),
    Time(u64),
    Keyword(Box<str>),
    Text(Box<str>),
}

impl AttrKey {
    fn kind(&self) -> u8 {
        match self {
            AttrKey::Bool(_) => 1,
            AttrKey::Int(_) => 2,
            AttrKey::Float(_) => 3,
            AttrKey::Time(_) => 4,
            AttrKey::Keyword(_) => 5,
            AttrKey::Text(_) => 6,
        }
    }

    /// The smallest key of type `kind`.
    fn min_of(kind: u8) -> AttrKey {
        match kind {
            1 => AttrKey::Bool(false),
            2 => AttrKey::Int(i64::MIN),
            3 => AttrKey::Float(0),
            4 => AttrKey::Time(0),
            5 => AttrKey::Keyword("".into()),
            _ => AttrKey::Text("".into()),
        }
    }
}

/// A condition over index keys.
pub(crate) struct KeyRange {
    kind: u8,
    low: Bound<AttrKey>,
    high: Bound<AttrKey>,
}

impl KeyRange {
    fn admits(&self, k: &AttrKey) -> bool {
        k.kind() == self.kind
            && match &self.low {
                Bound::Included(l) => k >= l,
                Bound::Excluded(l) => k > l,
                Bound::Unbounded => true,
            }
            && match &self.high {
                Bound::Included(h) => k <= h,
                Bound::Excluded(h) => k < h,
                Bound::Unbounded => true,
            }
    }
}

/// One value of a run in the index: its name and key.
type NamedKey = (Arc<str>, AttrKey);

/// Each run's values, kept in one arena (a run's are a span of it) rather
/// than an allocation per run, and the runs an open read from a snapshot
/// in a sorted list rather than a hash map: reading a snapshot of 500,000
/// runs into boxed slices under a hash map took 144 ms of one core, and
/// most of it went to allocating and to the map's scattered writes.
#[derive(Default)]
struct RunValues {
    /// Each run's span of `values` (start, length), for runs set since
    /// the open.
    spans: FxHashMap<RunId, (u32, u32)>,
    /// The same for the runs the snapshot held, in ascending run order;
    /// a start of [`TAKEN`] marks a run taken since.
    frozen: Vec<(RunId, u32, u32)>,
    /// Entries of `frozen` not taken.
    frozen_live: usize,
    values: Vec<NamedKey>,
    /// Values no span covers (left by changes): reclaimed once they are
    /// at least [`DEAD_MIN`] and half of `values`, so the arena's size is
    /// within twice the live values.
    dead: usize,
    /// What a taken value is replaced by (no allocation per take).
    blank: Option<Arc<str>>,
}

/// Dead values below which the arena is never compacted.
const DEAD_MIN: usize = 4096;
/// The start of a frozen run taken since the open.
const TAKEN: u32 = u32::MAX;

impl RunValues {
    /// An empty table for a snapshot's `runs` and about `values` values.
    fn with_capacity(runs: usize, values: usize) -> Self {
        Self {
            frozen: Vec::with_capacity(runs),
            values: Vec::with_capacity(values),
            ..Self::default()
        }
    }

    fn len(&self) -> usize {
        self.spans.len() + self.frozen_live
    }

    /// Where `run`'s span is in `frozen`, if it is there and not taken.
    fn frozen_at(&self, run: RunId) -> Option<usize> {
        let i = self.frozen.binary_search_by_key(&run, |e| e.0).ok()?;
        (self.frozen[i].1 != TAKEN).then_some(i)
    }

    fn span(&self, run: RunId) -> Option<(u32, u32)> {
        if let Some(&s) = self.spans.get(&run) {
            return Some(s);
        }
        self.frozen_at(run)
            .map(|i| (self.frozen[i].1, self.frozen[i].2))
    }

    fn contains(&self, run: RunId) -> bool {
        self.span(run).is_some()
    }

    fn get(&self, run: RunId) -> Option<&[NamedKey]> {
        let (at, len) = self.span(run)?;
        Some(&self.values[at as usize..(at + len) as usize])
    }

    fn runs(&self) -> impl Iterator<Item = RunId> + '_ {
        let frozen = self.frozen.iter().filter(|e| e.1 != TAKEN).map(|e| e.0);
        self.spans.keys().copied().chain(frozen)
    }

    /// Sets `run`'s values (it has none: `take` it first).
    fn insert(&mut self, run: RunId, values: impl IntoIterator<Item = NamedKey>) {
        debug_assert!(!self.contains(run), "run {run} inserted twice");
        let (at, len) = self.push(values);
        self.spans.insert(run, (at, len));
    }

    /// Sets the values of `run`, above every run the snapshot held so far
    /// (an open reading it).
    fn insert_frozen(&mut self, run: RunId, values: impl IntoIterator<Item = NamedKey>) {
        debug_assert!(self.frozen.last().is_none_or(|e| e.0 < run), "ascending");
        let (at, len) = self.push(values);
        self.frozen.push((run, at, len));
        self.frozen_live += 1;
    }

    fn push(&mut self, values: impl IntoIterator<Item = NamedKey>) -> (u32, u32) {
        let at = self.values.len();
        self.values.extend(values);
        // Memory runs out long before: 4 billion values of one shard.
        assert!(self.values.len() < TAKEN as usize, "attribute arena full");
        (at as u32, (self.values.len() - at) as u32)
    }

    /// Removes `run`'s values and hands them over.
    fn take(&mut self, run: RunId) -> Vec<NamedKey> {
        let (at, len) = match self.spans.remove(&run) {
            Some(s) => s,
            None => match self.frozen_at(run) {
                Some(i) => {
                    let e = &mut self.frozen[i];
                    let s = (e.1, e.2);
                    (e.1, e.2) = (TAKEN, 0);
                    self.frozen_live -= 1;
                    s
                }
                None => return Vec::new(),
            },
        };
        let blank = self.blank.get_or_insert_with(|| Arc::from("")).clone();
        let out = self.values[at as usize..(at + len) as usize]
            .iter_mut()
            .map(|v| std::mem::replace(v, (Arc::clone(&blank), AttrKey::Bool(false))))
            .collect();
        self.dead += len as usize;
        if self.dead >= DEAD_MIN && self.dead * 2 >= self.values.len() {
            self.compact();
        }
        out
    }

    /// Moves every live span to a new arena.
    fn compact(&mut self) {
        let mut old = std::mem::take(&mut self.values);
        self.values.reserve(old.len() - self.dead);
        let blank = self.blank.get_or_insert_with(|| Arc::from("")).clone();
        let live_frozen = self.frozen.iter_mut().filter(|e| e.1 != TAKEN);
        let spans = self
            .spans
            .values_mut()
            .map(|(at, len)| (at, len))
            .chain(live_frozen.map(|e| (&mut e.1, &mut e.2)));
        for (at, len) in spans {
            let start = self.values.len() as u32;
            for v in &mut old[*at as usize..(*at + *len) as usize] {
                self.values.push(std::mem::replace(
                    v,
                    (Arc::clone(&blank), AttrKey::Bool(false)),
                ));
            }
            *at = start;
        }
        self.dead = 0;
    }
}

/// A shard's search-attribute index (see the module docs): for each name
/// the (value, run) pairs in order, and each run's values.
#[derive(Default)]
pub(crate) struct AttrIndex {
    /// Whether every run of the shard has been read into it since the
    /// open (until then only runs changed since are).
    built: bool,
    /// Whether the shard uses attributes (a run with some was seen), so
    /// the build goes on in the background.
    wanted: bool,
    /// Where the build goes on: runs below this are still to be read
    /// (`None`: not begun).
    below: Option<RunId>,
    by_name: FxHashMap<Arc<str>, BTreeSet<(AttrKey, RunId)>>,
    by_run: RunValues,
    /// Runs whose values changed since the last snapshot frame was taken
    /// (`attrs/snapshot.rs`): the next delta's runs.
    changed: FxHashSet<RunId>,
}

impl AttrIndex {
    /// Whether every run has been read in.
    pub(crate) fn built(&self) -> bool {
        self.built
    }

    /// Every run has been read in.
    pub(crate) fn set_built(&mut self) {
        self.built = true;
    }

    /// The shard uses attributes: build the index in the background.
    pub(crate) fn want(&mut self) {
        self.wanted = true;
    }

    /// Whether the shard uses attributes (a run with some was seen).
    pub(crate) fn used(&self) -> bool {
        self.wanted
    }

    /// Whether a build is wanted and not done.
    pub(crate) fn building(&self) -> bool {
        self.wanted && !self.built
    }

    /// Where the build goes on (runs below it are still to read).
    pub(crate) fn build_below(&self) -> RunId {
        self.below.unwrap_or(RunId::MAX)
    }

    /// The build read every run down to `run` (included).
    pub(crate) fn built_down_to(&mut self, run: RunId) {
        self.below = Some(run);
    }

    /// Whether `run` has an entry.
    pub(crate) fn has(&self, run: RunId) -> bool {
        self.by_run.contains(run)
    }

    /// Makes `attrs` run `run`'s attributes (none: forgets it).
    pub(crate) fn set(&mut self, run: RunId, attrs: &AttrMap) {
        let pairs = attrs
            .iter()
            .map(|(name, v)| (self.interned(name), v.key()))
            .collect();
        self.set_keys(run, pairs);
    }

    /// `name` as the index holds it (one allocation per name).
    fn interned(&self, name: &str) -> Arc<str> {
        match self.by_name.get_key_value(name) {
            Some((k, _)) => Arc::clone(k),
            None => Arc::from(name),
        }
    }

    /// Makes `pairs` run `run`'s values (none: forgets it), the one place
    /// a run's values change: the change is marked for the next snapshot
    /// delta (`attrs/snapshot.rs`).
    fn set_keys(&mut self, run: RunId, pairs: Vec<NamedKey>) {
        self.remove(run);
        if pairs.is_empty() {
            return;
        }
        self.wanted = true;
        self.changed.insert(run);
        for (name, key) in &pairs {
            self.by_name
                .entry(Arc::clone(name))
                .or_default()
                .insert((key.clone(), run));
        }
        self.by_run.insert(run, pairs);
    }

    /// Forgets run `run`.
    pub(crate) fn remove(&mut self, run: RunId) {
        let old = self.by_run.take(run);
        if old.is_empty() {
            return;
        }
        self.changed.insert(run);
        for (name, key) in old {
            if let Some(set) = self.by_name.get_mut(&name) {
                set.remove(&(key, run));
                if set.is_empty() {
                    self.by_name.remove(&name);
                }
            }
        }
    }

    /// Whether run `run`'s attributes pass every condition.
    pub(crate) fn admits(&self, run: RunId, conds: &[AttrCondition]) -> bool {
        let Some(entry) = self.by_run.get(run) else {
            return conds.is_empty();
        };
        conds.iter().all(|c| {
            let r = c.keys();
            entry.iter().any(|(n, k)| **n == *c.name && r.admits(k))
        })
    }

    /// The condition among `conds` to walk the index by: one asking for a
    /// single value (its runs come in run order), else the first.
    pub(crate) fn driver(conds: &[AttrCondition]) -> Option<&AttrCondition> {
        conds.iter().find(|c| c.is_eq()).or(conds.first())
    }

    /// Up to `n` runs below `below` whose attribute passes `cond`, newest
    /// (highest run number) first. A single value walks its runs in order;
    /// a range keeps the `n` highest runs over the whole range.
    pub(crate) fn candidates(&self, cond: &AttrCondition, below: RunId, n: usize) -> Vec<RunId> {
        let Some(set) = self.by_name.get(cond.name.as_str()) else {
            return Vec::new();
        };
        let r = cond.keys();
        if cond.is_eq() {
            let Bound::Included(k) = &r.low else {
                return Vec::new();
            };
            return set
                .range((k.clone(), 0)..(k.clone(), below))
                .rev()
                .take(n)
                .map(|(_, run)| *run)
                .collect();
        }
        let start = match &r.low {
            Bound::Included(k) => Bound::Included((k.clone(), 0)),
            Bound::Excluded(k) => Bound::Excluded((k.clone(), RunId::MAX)),
            Bound::Unbounded => Bound::Included((AttrKey::min_of(r.kind), 0)),
        };
        let mut top: BinaryHeap<Reverse<RunId>> = BinaryHeap::with_capacity(n + 1);
        for (k, run) in set.range((start, Bound::Unbounded)) {
            if !r.admits(k) {
                if k.kind() != r.kind
                    || match &r.high {
                        Bound::Included(h) => k > h,
                        Bound::Excluded(h) => k >= h,
                        Bound::Unbounded => false,
                    }
                {
                    break;
                }
                continue;
            }
            if *run >= below {
                continue;
            }
            if top.len() < n {
                top.push(Reverse(*run));
            } else if top.peek().is_some_and(|Reverse(m)| run > m) {
                top.pop();
                top.push(Reverse(*run));
            }
        }
        let mut out: Vec<RunId> = top.into_iter().map(|Reverse(r)| r).collect();
        out.sort_unstable_by(|a, b| b.cmp(a));
        out
    }

    /// Run `run`'s values, by name (none: not in the index).
    #[cfg(feature = "testing")]
    pub(crate) fn values_of(&self, run: RunId) -> BTreeMap<String, AttrKey> {
        self.by_run
            .get(run)
            .unwrap_or_default()
            .iter()
            .map(|(n, k)| (n.to_string(), k.clone()))
            .collect()
    }

    /// How many values run `run` has in the index.
    #[cfg(test)]
    pub(crate) fn of(&self, run: RunId) -> usize {
        self.by_run.get(run).map_or(0, <[_]>::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, AttrValue)]) -> AttrMap {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn values_round_trip_through_the_recorded_form_and_the_text_form() {
        let values = [
            AttrValue::Keyword("gold".into()),
            AttrValue::Text("a: note".into()),
            AttrValue::Int(-42),
            AttrValue::Float(1.5),
            AttrValue::Bool(true),
            AttrValue::Time(1_733_000_000_000),
        ];
        for v in values {
            assert_eq!(AttrValue::from_json(&v.to_json()), Some(v.clone()));
            assert_eq!(AttrValue::parse(&v.to_string()).unwrap(), v);
        }
        assert_eq!(AttrValue::parse("42").unwrap(), AttrValue::Int(42));
        assert_eq!(AttrValue::parse("4.5").unwrap(), AttrValue::Float(4.5));
        assert_eq!(
            AttrValue::parse("gold").unwrap(),
            AttrValue::Keyword("gold".into())
        );
        assert_eq!(
            AttrValue::parse("time:2026-12-01T00:00:00Z").unwrap(),
            AttrValue::Time(1_796_083_200_000)
        );
    }

    #[test]
    fn bad_input_is_a_named_error() {
        for bad in [
            "colour:red",
            "int:x",
            "float:NaN",
            "bool:yes",
            "time:soon",
            "",
        ] {
            let e = AttrValue::parse(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidAttribute(_)), "{bad}: {e}");
        }
        assert!(
            AttrValue::parse("colour:red")
                .unwrap_err()
                .to_string()
                .contains("unknown attribute type")
        );
        for bad in [
            "amount",
            "=3",
            "a=int:1..float:2",
            "fusee.paused=true",
            "a>int:x",
        ] {
            assert!(AttrCondition::parse(bad).is_err(), "{bad}");
        }
        assert!(
            SearchAttributes::new()
                .float("f", f64::NAN)
                .check()
                .is_err()
        );
        assert!(SearchAttributes::new().int("", 1).check().is_err());
    }

    #[test]
    fn no_text_or_payload_makes_a_parser_panic() {
        let alphabet: Vec<char> = "ab=<>:.-0123456789eE+ \"{}[],fusekywordintflotimbl"
            .chars()
            .collect();
        let mut rng = fastrand::Rng::with_seed(33);
        for _ in 0..20_000 {
            let len = rng.usize(0..24);
            let text: String = (0..len)
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            let _ = AttrValue::parse(&text);
            if let Ok(c) = AttrCondition::parse(&text) {
                // What parses is a condition a listing accepts.
                c.check().expect("a parsed condition checks");
                let _ = c.to_string();
            }
            let mut a = AttrMap::new();
            apply_payload(&mut a, text.as_bytes());
            let wrapped = format!("{{\"fusee.attrs\":{{\"x\":{text}}}}}");
            apply_payload(&mut a, wrapped.as_bytes());
            let _ = by_code(text.as_bytes());
        }
    }

    #[test]
    fn payloads_fold_as_upserts_and_old_payloads_read_as_none() {
        let mut a = AttrMap::new();
        apply_payload(&mut a, br#"{"fusee.paused":true}"#);
        apply_payload(&mut a, b"not json");
        assert!(a.is_empty());
        let p = SearchAttributes::new()
            .int("n", 1)
            .keyword("k", "x")
            .payload(true);
        assert!(by_code(&p));
        apply_payload(&mut a, &p);
        apply_payload(
            &mut a,
            &SearchAttributes::new()
                .int("n", 2)
                .remove("k")
                .payload(false),
        );
        assert_eq!(a, map(&[("n", AttrValue::Int(2))]));
        // An unknown type is skipped, not an error.
        apply_payload(
            &mut a,
            br#"{"fusee.attrs":{"m":{"colour":"red"},"n":{"int":3}}}"#,
        );
        assert_eq!(a, map(&[("n", AttrValue::Int(3))]));
    }

    #[test]
    fn conditions_parse_and_judge_by_type_and_bounds() {
        let c = AttrCondition::parse("amount>100").unwrap();
        assert!(c.admits(&AttrValue::Int(101)));
        assert!(!c.admits(&AttrValue::Int(100)));
        assert!(!c.admits(&AttrValue::Float(101.0)));
        let c = AttrCondition::parse("t=time:10..time:20").unwrap();
        assert!(c.admits(&AttrValue::Time(10)) && c.admits(&AttrValue::Time(20)));
        assert!(!c.admits(&AttrValue::Time(21)));
        let c = AttrCondition::parse("k=keyword:a:b").unwrap();
        assert!(c.admits(&AttrValue::Keyword("a:b".into())));
        let c = AttrCondition::parse("x<=float:-1.5").unwrap();
        assert!(c.admits(&AttrValue::Float(-2.0)) && !c.admits(&AttrValue::Float(0.0)));
    }

    /// Random sets and removes, before and after a snapshot is read back
    /// (its runs then sit in the frozen list) and through arena
    /// compactions, agree with a plain map of each run's values.
    #[test]
    fn the_index_agrees_with_a_model_through_changes_snapshots_and_compactions() {
        let mut rng = fastrand::Rng::with_seed(0xa77);
        let mut ix = AttrIndex::default();
        let mut model: BTreeMap<RunId, AttrMap> = BTreeMap::new();
        let mut compactions = 0;
        let mut frames: Vec<Vec<u8>> = Vec::new();
        for round in 0..6 {
            for _ in 0..20_000 {
                let run = rng.u64(1..3_000);
                if rng.u8(..10) == 0 {
                    ix.remove(run);
                    model.remove(&run);
                    continue;
                }
                let mut m = AttrMap::new();
                for name in ["a", "b", "c"] {
                    if rng.bool() {
                        m.insert(name.into(), AttrValue::Int(rng.i64(0..5)));
                    }
                }
                if rng.u8(..4) == 0 {
                    m.insert("k".into(), AttrValue::Keyword(format!("k{}", rng.u8(..3))));
                }
                let before = ix.by_run.dead;
                ix.set(run, &m);
                compactions += usize::from(ix.by_run.dead < before);
                if m.is_empty() {
                    model.remove(&run);
                } else {
                    model.insert(run, m);
                }
            }
            // Odd rounds read back a base; even ones a base and a delta
            // of the changes made since it.
            if round % 2 == 1 {
                frames = ix.snapshot_frames();
                ix.forget_changes();
                ix = AttrIndex::from_snapshot(&frames).expect("reads back").0;
                assert!(ix.by_run.frozen_live > 0);
            } else if !frames.is_empty() {
                frames.extend(ix.delta_frame(0));
                ix.forget_changes();
                let back = AttrIndex::from_snapshot(&frames).expect("reads back").0;
                assert_eq!(back.by_run.len(), ix.by_run.len());
                for run in ix.by_run.runs() {
                    assert_eq!(back.by_run.get(run), ix.by_run.get(run), "run {run}");
                }
                assert_eq!(back.by_name, ix.by_name);
                ix = back;
            }
            assert_eq!(ix.by_run.len(), model.len());
            assert!(ix.by_run.values.len() <= 2 * 4 * model.len() + 2 * DEAD_MIN);
            for (run, m) in &model {
                assert_eq!(ix.of(*run), m.len(), "run {run}");
                for (name, v) in m {
                    assert!(ix.admits(*run, &[AttrCondition::eq(name.as_str(), v.clone())]));
                }
            }
            for v in 0..5 {
                let want: Vec<RunId> = model
                    .iter()
                    .rev()
                    .filter(|(_, m)| m.get("a") == Some(&AttrValue::Int(v)))
                    .map(|(r, _)| *r)
                    .collect();
                assert_eq!(
                    ix.candidates(&AttrCondition::eq("a", v), RunId::MAX, usize::MAX),
                    want
                );
            }
        }
        assert!(compactions > 0, "no compaction ran");
    }

    #[test]
    fn the_index_walks_newest_first_for_values_and_ranges() {
        let mut ix = AttrIndex::default();
        for run in 1..=1000u64 {
            ix.set(
                run,
                &map(&[
                    ("c", AttrValue::Int((run % 10) as i64)),
                    ("amount", AttrValue::Float(run as f64)),
                ]),
            );
        }
        let eq = AttrCondition::eq("c", 3);
        assert_eq!(ix.candidates(&eq, RunId::MAX, 3), vec![993, 983, 973]);
        assert_eq!(ix.candidates(&eq, 983, 2), vec![973, 963]);
        let gt = AttrCondition::range(
            "amount",
            Bound::Excluded(AttrValue::Float(500.0)),
            Bound::Unbounded,
        );
        assert_eq!(ix.candidates(&gt, 700, 2), vec![699, 698]);
        let lt = AttrCondition::range(
            "amount",
            Bound::Unbounded,
            Bound::Excluded(AttrValue::Float(3.0)),
        );
        assert_eq!(ix.candidates(&lt, RunId::MAX, 10), vec![2, 1]);
        assert!(ix.admits(993, &[eq.clone(), gt.clone()]));
        assert!(!ix.admits(3, &[eq.clone(), gt]));
        // Changing a run's values moves it; removing forgets it.
        ix.set(993, &map(&[("c", AttrValue::Int(4))]));
        assert_eq!(ix.candidates(&eq, RunId::MAX, 1), vec![983]);
        ix.remove(983);
        assert_eq!(ix.candidates(&eq, RunId::MAX, 1), vec![973]);
        assert_eq!(ix.of(993), 1);
    }
}
