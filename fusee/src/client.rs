//! The client vocabulary: what callers name runs by and what they learn
//! about them ([`RunRef`], [`RunStatus`], [`Description`], [`ListFilter`],
//! [`Page`], [`RunSummary`], [`IdPolicy`]), and the answers a shard sends
//! back to the engine handle (`RunResult`, `ShardPage`, `LiveJournal`).
//!
//! A leaf: the engine handle (`engine.rs`, `operator.rs`, `dynamic.rs`)
//! and the runtime (`runtime/*`) both import it, and it imports neither,
//! so the shard side never depends on the client API that drives it.

use std::fmt;
use std::ops::Bound;
use std::str::FromStr;

use fusee_core::record::{Record, RunId, Status};

use crate::attrs::{AttrCondition, AttrMap, AttrValue, SearchAttributes};
use crate::error::{Error, Result};
use crate::inspect::RunState;
use crate::trace::TraceParent;

/// Which run a start returns when the workflow ID is taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IdPolicy {
    /// Start only a new workflow: an ID ever used is [`Error::AlreadyExists`](crate::Error::AlreadyExists)
    /// (the default).
    #[default]
    NewOnly,
    /// Attach to the ID's latest run if there is one, else start it.
    Attach,
    /// Start a new run unless the ID's latest run is still running
    /// ([`Error::AlreadyExists`](crate::Error::AlreadyExists) then): an ID used once a day, say, by a
    /// daily job.
    ReuseAfterFinish,
}

/// How a run starts: [`Engine::start_with_options`](crate::Engine::start_with_options),
/// [`Engine::start_json_with`](crate::Engine::start_json_with).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StartOptions {
    policy: IdPolicy,
    trace: Option<TraceParent>,
    version: Option<u32>,
    attributes: Option<SearchAttributes>,
}

impl StartOptions {
    /// A new ID only, no trace context given (what
    /// [`Engine::start`](crate::Engine::start) does).
    pub fn new() -> Self {
        Self::default()
    }

    /// What the start does when the ID is taken (default
    /// [`IdPolicy::NewOnly`]).
    pub fn policy(mut self, policy: IdPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The caller's trace context (a W3C `traceparent`): recorded in the
    /// run's `Start`, so it survives restarts; the run's span is its
    /// child, and its steps ([`StepContext::traceparent`](crate::StepContext::traceparent))
    /// and children continue the trace. Without one, the current `tracing`
    /// span's context is taken when the embedder's subscriber keeps
    /// OpenTelemetry contexts (a `tracing-opentelemetry` layer; feature
    /// `otel`); else a run is the root of a trace of its own. An attach to
    /// an existing run records nothing.
    pub fn trace(mut self, parent: TraceParent) -> Self {
        self.trace = Some(parent);
        self
    }

    /// The version of the workflow's code the run starts with (see
    /// [`Engine::register_version`](crate::Engine::register_version));
    /// default: the newest registered. A version not registered in the
    /// engine the start reaches is [`Error::UnknownVersion`](crate::Error::UnknownVersion),
    /// and nothing is recorded.
    pub fn version(mut self, version: u32) -> Self {
        self.version = Some(version);
        self
    }

    /// Search attributes the run starts with, recorded in its `Start`
    /// (see [`crate::SearchAttributes`]; removals mean nothing here). A bad
    /// name or value is [`Error::InvalidAttribute`](crate::Error::InvalidAttribute)
    /// and nothing is recorded; an attach to an existing run records none.
    pub fn attributes(mut self, attributes: SearchAttributes) -> Self {
        self.attributes = Some(attributes);
        self
    }

    pub(crate) fn attributes_of(&self) -> Option<&SearchAttributes> {
        self.attributes.as_ref()
    }

    pub(crate) fn version_of(&self) -> Option<u32> {
        self.version
    }

    pub(crate) fn policy_of(&self) -> IdPolicy {
        self.policy
    }

    pub(crate) fn trace_of(&self) -> Option<TraceParent> {
        self.trace
    }
}

/// A run a start created or attached to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRef {
    /// The workflow ID.
    pub id: String,
    /// Its shard.
    pub shard: u32,
    /// The run's number in its shard.
    pub run: RunId,
    /// Whether the start attached to an existing run.
    pub attached: bool,
}

/// How a finished run ended, and its payload (its encoded result, or its
/// failure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunResult {
    pub(crate) status: Status,
    pub(crate) payload: Vec<u8>,
}

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStatus {
    /// Its code runs (or waits for a step, a timer, a signal).
    Running,
    /// Its workflow type has no code registered in this engine yet.
    WaitingForCode,
    /// Its code departed from its journal and stopped (see
    /// [`Description::stopped_because`]); a caller waiting on its result
    /// gets [`Error::Determinism`](crate::Error::Determinism).
    Stopped,
    /// It ended, with this status.
    Finished(Status),
}

/// The step a run is at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentStep {
    /// The step's name.
    pub name: String,
    /// The attempt running or next.
    pub attempt: u32,
    /// Whether an attempt is running now.
    pub running: bool,
    /// Whether its retry policy ran out of attempts and it waits for
    /// [`Engine::resume_step`](crate::Engine::resume_step).
    pub paused: bool,
}

/// What [`Engine::describe`](crate::Engine::describe) says about a run. More fields may come;
/// match it with `..`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Description {
    /// The workflow ID.
    pub id: String,
    /// The workflow type.
    pub workflow: String,
    /// The version of its code its `Start` recorded, which its code is on
    /// every replay (0: registered without one; see
    /// [`Engine::register_version`](crate::Engine::register_version)).
    pub version: u32,
    /// Its shard.
    pub shard: u32,
    /// Its run number.
    pub run: RunId,
    /// Where it stands.
    pub status: RunStatus,
    /// When it started (ms since the Unix epoch).
    pub started_ms: u64,
    /// When it finished.
    pub finished_ms: Option<u64>,
    /// Its current step, if one is pending.
    pub step: Option<CurrentStep>,
    /// Why its code stopped, for [`RunStatus::Stopped`].
    pub stopped_because: Option<String>,
    /// Whether it is parked in the run store (idle, out of memory).
    pub parked: bool,
    /// Whether an operator paused it ([`Engine::pause`](crate::Engine::pause)): no step starts.
    pub paused: bool,
    /// Why the replay check held it ([`Engine::check_replay`](crate::Engine::check_replay)):
    /// its code departs from its journal, so its code does not run (it is
    /// also `paused`) until [`Engine::resume`](crate::Engine::resume) or a
    /// reset. `None` when it is not held.
    pub held: Option<String>,
    /// Its journal's size in bytes (canonical records): what replaying it
    /// costs, and how close a long-lived run is to wanting
    /// continue-as-new.
    pub journal_bytes: u64,
    /// How many records its journal holds.
    pub journal_records: u64,
    /// Children it started that have not finished (as far as its journal
    /// knows).
    pub children: Vec<PendingChild>,
    /// What its code waits for besides steps: timers and signals.
    pub waits: Vec<PendingWait>,
    /// Steps whose latest attempt began (a durable-ordered `Began`
    /// record) and has no end in the journal, by operation: running now,
    /// or cut by a crash or a stop and not begun again yet. Read from the
    /// journal, so a restart, a parked run or a run with no code shows
    /// them too. Empty for journals written before `Began` existed.
    pub in_flight: Vec<InFlightStep>,
    /// Its search attributes as its journal stands (durable or not yet:
    /// as the rest of a running run's description), by name.
    pub attributes: AttrMap,
}

/// A step attempt the journal shows begun and not ended
/// ([`Description::in_flight`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlightStep {
    /// The step's operation (its sequence number).
    pub seq: u32,
    /// The step's name.
    pub name: String,
    /// The attempt, from 1.
    pub attempt: u32,
    /// When it began, by the engine's clock (ms since the Unix epoch).
    pub started_ms: u64,
}

/// The steps a run's journal shows begun and not ended, read record by
/// record in journal order: each step's latest `Began` (a later one of
/// the same step supersedes it) until its `Attempt` or `Step`; the run's
/// `Done` ends them all. The one reader of this, for `describe` and the
/// traces' cut attempts.
#[derive(Debug, Default)]
pub(crate) struct InFlight(Vec<InFlightStep>);

impl InFlight {
    /// Takes the journal's next record.
    pub(crate) fn take<S: AsRef<str>, B>(&mut self, rec: &Record<S, B>) {
        match rec {
            Record::Began {
                seq,
                name,
                attempt,
                started_ms,
                ..
            } => {
                self.0.retain(|s| s.seq != *seq);
                self.0.push(InFlightStep {
                    seq: *seq,
                    name: name.as_ref().to_string(),
                    attempt: *attempt,
                    started_ms: *started_ms,
                });
            }
            Record::Step { seq, .. } | Record::Attempt { seq, .. } => {
                self.0.retain(|s| s.seq != *seq);
            }
            Record::Done { .. } => self.0.clear(),
            _ => {}
        }
    }

    /// What is in flight after the records taken, by operation.
    pub(crate) fn into_steps(mut self) -> Vec<InFlightStep> {
        self.0.sort_by_key(|s| s.seq);
        self.0
    }
}

/// A child a run started and has no result from yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingChild {
    /// The child's workflow ID.
    pub id: String,
    /// The child's workflow type.
    pub workflow: String,
}

/// A timer or a signal a run's code waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PendingWait {
    /// A sleep, and when it fires (ms since the Unix epoch).
    Timer {
        /// The sleep's name.
        name: String,
        /// When it fires.
        fire_at_ms: u64,
    },
    /// A wait for a signal, and its deadline if it has one.
    Signal {
        /// The signal's name.
        name: String,
        /// When the wait times out, if ever.
        deadline_ms: Option<u64>,
    },
}

/// Which runs [`Engine::list`](crate::Engine::list) returns: a status, a workflow type,
/// conditions on search attributes (all must hold), a page size, and
/// where the previous page ended.
///
/// ```
/// # use fusee::{ListFilter, StatusFilter};
/// let first = ListFilter::new().status(StatusFilter::Running).workflow("checkout").limit(50);
/// let gold = ListFilter::new().attribute("tier", "gold").attribute_above("amount", 100);
/// # let _ = (first, gold);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListFilter {
    status: Option<StatusFilter>,
    workflow: Option<String>,
    attrs: Vec<AttrCondition>,
    pub(crate) limit: usize,
    pub(crate) after: Option<Cursor>,
}

impl Default for ListFilter {
    fn default() -> Self {
        Self::new()
    }
}

impl ListFilter {
    /// The default page size.
    pub const LIMIT_DEFAULT: usize = 100;
    /// The largest page [`Engine::list`](crate::Engine::list) returns (a longer `limit` is cut
    /// to it), so one call holds each shard for a bounded time.
    pub const LIMIT_MAX: usize = 10_000;

    /// Every run, newest first, [`LIMIT_DEFAULT`](Self::LIMIT_DEFAULT) per
    /// page.
    pub fn new() -> Self {
        Self {
            status: None,
            workflow: None,
            attrs: Vec::new(),
            limit: Self::LIMIT_DEFAULT,
            after: None,
        }
    }

    /// Only runs with this status.
    pub fn status(mut self, status: StatusFilter) -> Self {
        self.status = Some(status);
        self
    }

    /// Only runs of this workflow type.
    pub fn workflow(mut self, wtype: impl Into<String>) -> Self {
        self.workflow = Some(wtype.into());
        self
    }

    /// Only runs whose search attribute `name` equals `value` (of the
    /// same type: see [`AttrCondition`]).
    pub fn attribute(self, name: impl Into<String>, value: impl Into<AttrValue>) -> Self {
        self.condition(AttrCondition::eq(name, value))
    }

    /// Only runs whose attribute `name` is above `value` (`amount > 100`).
    pub fn attribute_above(self, name: impl Into<String>, value: impl Into<AttrValue>) -> Self {
        self.condition(AttrCondition::range(
            name,
            Bound::Excluded(value.into()),
            Bound::Unbounded,
        ))
    }

    /// Only runs whose attribute `name` is below `value`.
    pub fn attribute_below(self, name: impl Into<String>, value: impl Into<AttrValue>) -> Self {
        self.condition(AttrCondition::range(
            name,
            Bound::Unbounded,
            Bound::Excluded(value.into()),
        ))
    }

    /// Only runs whose attribute `name` is between `low` and `high`, both
    /// included (an order date between two times).
    pub fn attribute_between(
        self,
        name: impl Into<String>,
        low: impl Into<AttrValue>,
        high: impl Into<AttrValue>,
    ) -> Self {
        self.condition(AttrCondition::range(
            name,
            Bound::Included(low.into()),
            Bound::Included(high.into()),
        ))
    }

    /// Only runs passing `cond` too (any bounds; [`AttrCondition::parse`]
    /// reads the text form `amount>100`). A condition no value can pass
    /// (bounds of two types, no bound, a bad name) makes the listing fail
    /// with [`Error::InvalidAttribute`](crate::Error::InvalidAttribute).
    pub fn condition(mut self, cond: AttrCondition) -> Self {
        self.attrs.push(cond);
        self
    }

    /// The attribute conditions.
    pub fn conditions(&self) -> &[AttrCondition] {
        &self.attrs
    }

    /// `Err` for a condition no value can pass.
    pub(crate) fn check(&self) -> Result<()> {
        self.attrs.iter().try_for_each(AttrCondition::check)
    }

    /// At most `n` runs per page (1 to [`LIMIT_MAX`](Self::LIMIT_MAX)).
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = n.clamp(1, Self::LIMIT_MAX);
        self
    }

    /// The page after the one `cursor` ended ([`Page::next`]).
    pub fn after(mut self, cursor: Cursor) -> Self {
        self.after = Some(cursor);
        self
    }

    /// The page size.
    pub(crate) fn limit_value(&self) -> usize {
        self.limit
    }

    /// Whether the filter names a workflow type.
    pub(crate) fn names_workflow(&self) -> bool {
        self.workflow.is_some()
    }

    /// Whether a run with this end (`None`: running) passes the status
    /// part of the filter.
    pub(crate) fn admits_status(&self, done: Option<Status>) -> bool {
        match self.status {
            None => true,
            Some(StatusFilter::Running) => done.is_none(),
            Some(StatusFilter::Finished) => done.is_some(),
            Some(StatusFilter::Ended(s)) => done == Some(s),
        }
    }

    /// Whether a run with this status and type passes the filter.
    pub(crate) fn admits(&self, done: Option<Status>, wtype: Option<&str>) -> bool {
        let status_ok = self.admits_status(done);
        let type_ok = match (&self.workflow, wtype) {
            (Some(want), Some(have)) => want == have,
            (Some(_), None) => false,
            (None, _) => true,
        };
        status_ok && type_ok
    }
}

/// Which statuses [`ListFilter::status`] keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusFilter {
    /// Runs not finished (running, waiting, paused, stopped, waiting for
    /// code).
    Running,
    /// Runs finished, however they ended.
    Finished,
    /// Runs that ended with this status.
    Ended(Status),
}

/// One run as [`Engine::list`](crate::Engine::list) shows it: what the shard knows without
/// loading the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSummary {
    /// The workflow ID.
    pub id: String,
    /// The workflow type.
    pub workflow: String,
    /// The version of its code its `Start` recorded (0: registered without
    /// one; see [`Engine::register_version`](crate::Engine::register_version)).
    pub version: u32,
    /// Its shard.
    pub shard: u32,
    /// Its run number in its shard.
    pub run: RunId,
    /// When it started (ms since the Unix epoch).
    pub started_ms: u64,
    /// How it ended, once it has (durably).
    pub finished: Option<Status>,
    /// When it ended (ms since the Unix epoch), once it has (durably).
    pub finished_ms: Option<u64>,
    /// Whether it is parked in the run store.
    pub parked: bool,
    /// Why the replay check held it, if it did (see [`Description::held`]).
    pub held: Option<String>,
}

/// A run whose journal the registered code departs from, as the replay
/// check ([`Engine::check_replay`](crate::Engine::check_replay)) finds it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Divergence {
    /// The workflow ID.
    pub id: String,
    /// The workflow type.
    pub workflow: String,
    /// The code version its `Start` recorded (0: none).
    pub version: u32,
    /// Its shard.
    pub shard: u32,
    /// Its run number in its shard.
    pub run: RunId,
    /// The operation (its sequence number) where the code departs, when
    /// the run's machine named one.
    pub operation: Option<u32>,
    /// What the journal holds there (`step "charge"`).
    pub journal: String,
    /// What the code asked for instead (`called step "refund"`).
    pub code: String,
    /// The whole determinism error.
    pub message: String,
    /// Whether the check held the run (paused with this reason); false
    /// for a check that only reads (`fusee check`).
    pub held: bool,
}

/// One shard's answer to a page of the replay check (`Input::Check`).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct CheckPage {
    /// Unfinished runs replayed.
    pub(crate) checked: u64,
    /// Those whose code departs from their journal.
    pub(crate) divergences: Vec<Divergence>,
    /// Unfinished runs whose type has no code registered at their
    /// version: (ID, type, version).
    pub(crate) no_code: Vec<(String, String, u32)>,
    /// Runs held before this check (skipped).
    pub(crate) already_held: u64,
    /// Where the shard goes on (runs below this number), `None` when done.
    pub(crate) resume: Option<RunId>,
}

/// A page of [`Engine::list`](crate::Engine::list): runs newest first, and where to go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The runs, newest start first.
    pub runs: Vec<RunSummary>,
    /// Pass to [`ListFilter::after`] for the next page; `None` on the last.
    pub next: Option<Cursor>,
}

/// Where a listing stopped: for each shard, the run number below which it
/// goes on. Opaque to callers; its text form ([`fmt::Display`],
/// [`FromStr`]) survives a trip through a URL or a command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub(crate) below: Vec<RunId>,
}

impl fmt::Display for Cursor {
    /// The per-shard run numbers joined by `.`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.below.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{b}")?;
        }
        Ok(())
    }
}

impl FromStr for Cursor {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let below = s
            .split('.')
            .map(|part| part.parse::<RunId>())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::BadCursor {
                cursor: Error::given(s),
                reason: format!("it does not parse: {e}"),
            })?;
        Ok(Cursor { below })
    }
}

/// What one shard answers for a page: its runs (newest first, at most the
/// limit) and where it would go on (`None`: nothing below).
#[derive(Debug, Default)]
pub(crate) struct ShardPage {
    pub(crate) runs: Vec<RunSummary>,
    pub(crate) resume: Option<RunId>,
}

/// Listing runs past this many runs visited per shard and page returns what
/// it found so far, with a cursor to go on: a filter that matches few runs
/// must not hold a shard for a pass over millions.
pub(crate) const LIST_VISITS_MAX: usize = 100_000;

/// A run's journal as its shard answers `Input::Journal`: every record of
/// the run it holds (canonical encoding), durable when sent.
#[derive(Debug)]
pub(crate) struct LiveJournal {
    pub(crate) shard: u32,
    pub(crate) run: RunId,
    pub(crate) journal: Vec<u8>,
    /// Bytes of the run's journal before `journal`: 0 for the whole, or
    /// the `from` a reader asked with, when the shard could answer with
    /// the rest alone (an unfinished run in memory).
    pub(crate) offset: u64,
    /// False for a finished parked run, whose frame keeps only its
    /// `Start` and `Done`.
    pub(crate) complete: bool,
    /// For a run that finished past its streams' time
    /// ([`crate::Config::stream_retention`]): when it finished and when its
    /// chunks went (the journal is answered without them, whether or not
    /// its frame was rewritten yet).
    pub(crate) streams_gone: Option<(u64, u64)>,
    pub(crate) state: RunState,
    pub(crate) last_lsn: u64,
}
