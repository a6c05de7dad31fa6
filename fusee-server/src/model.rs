//! The API's JSON bodies, shared by the server (which writes them) and
//! the [client](crate::client) (which reads them). Every field is
//! documented here once; the OpenAPI document takes its schemas from these
//! types.
//!
//! Times are milliseconds since the Unix epoch. A status is a string: for
//! a run, `running` or how it ended (`ok`, `failed`, `cancelled`,
//! `timed-out`, `terminated`, `continued-as-new`, `reset`, the names of
//! the journal format); a description adds `waiting-for-code` and
//! `stopped`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[cfg(feature = "server")]
use utoipa::{IntoParams, ToSchema};

/// Every error's body: `kind` names the error for code to match on (for
/// engine errors, the [`fusee::Error`] variant in snake case, such as
/// `not_found`), `message` is its text for people (for engine errors,
/// exactly the Rust error's `Display`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct ErrorBody {
    /// The error's kind.
    pub kind: String,
    /// What went wrong.
    pub message: String,
}

/// One run in a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct RunSummary {
    /// The workflow ID.
    pub id: String,
    /// The workflow type.
    pub workflow: String,
    /// The version of its code its start recorded (0: registered without
    /// one).
    #[serde(default)]
    pub version: u32,
    /// Its shard.
    pub shard: u32,
    /// Its run number in the shard.
    pub run: u64,
    /// When it started.
    pub started_ms: u64,
    /// `running`, or how it ended.
    pub status: String,
    /// When it ended (absent while it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
    /// Whether it is parked in the run store (idle, out of memory).
    pub parked: bool,
    /// Why the replay check held it (its code departs from its journal;
    /// absent when not held): it stays paused until resumed or reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// A page of runs, newest start first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct RunsPage {
    /// The runs.
    pub runs: Vec<RunSummary>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next: Option<String>,
}

/// Which runs a listing returns (query parameters of `GET /api/v1/runs`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(IntoParams))]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
pub struct RunsQuery {
    /// `running`, `finished`, or an end status (`ok`, `failed`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Only runs of this workflow type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Only workflow IDs starting with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_prefix: Option<String>,
    /// Only runs started at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_after_ms: Option<u64>,
    /// Only runs started before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_before_ms: Option<u64>,
    /// Only runs that finished at or after this time (no running run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_after_ms: Option<u64>,
    /// Only runs that finished before this time (no running run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_before_ms: Option<u64>,
    /// Only runs whose search attributes pass these conditions, separated
    /// by `;`: `name=value`, `name>value`, `name>=value`, `name<value`,
    /// `name<=value`, `name=low..high`; a value is `type:value` (types
    /// keyword, text, int, float, bool, time as ms or RFC 3339) or bare
    /// (an integer is an int, a decimal a float, true/false a bool, else a
    /// keyword). E.g. `customer_id=42;amount>float:100`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attr: Option<String>,
    /// Runs per page (1 to 10,000; default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Where the previous page ended (its `next`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// The step a run is at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct CurrentStep {
    /// The step's name.
    pub name: String,
    /// The attempt running or next.
    pub attempt: u32,
    /// Whether an attempt runs now.
    pub running: bool,
    /// Whether its retry policy ran out and it waits to be resumed.
    pub paused: bool,
}

/// A child a run started that has not finished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct PendingChild {
    /// The child's workflow ID.
    pub id: String,
    /// Its workflow type.
    pub workflow: String,
}

/// A timer or signal a run waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct PendingWait {
    /// `timer` or `signal`.
    pub kind: String,
    /// The sleep's or signal's name.
    pub name: String,
    /// When the timer fires, or the wait times out (absent: never).
    pub at_ms: Option<u64>,
}

/// Where a run stands (`GET /api/v1/runs/{id}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct Description {
    /// The workflow ID.
    pub id: String,
    /// The workflow type.
    pub workflow: String,
    /// The version of its code its start recorded (0: registered without
    /// one).
    #[serde(default)]
    pub version: u32,
    /// Its shard.
    pub shard: u32,
    /// Its run number.
    pub run: u64,
    /// `running`, `waiting-for-code`, `stopped`, or how it ended.
    pub status: String,
    /// When it started.
    pub started_ms: u64,
    /// When it finished.
    pub finished_ms: Option<u64>,
    /// Its current step.
    pub step: Option<CurrentStep>,
    /// Why its code stopped (status `stopped`).
    pub stopped_because: Option<String>,
    /// Whether it is parked.
    pub parked: bool,
    /// Whether an operator paused it.
    pub paused: bool,
    /// Why the replay check held it (its code departs from its journal;
    /// absent when not held): it stays paused until resumed or reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// Its journal's size in bytes.
    pub journal_bytes: u64,
    /// Its journal's record count.
    pub journal_records: u64,
    /// Children not finished.
    pub children: Vec<PendingChild>,
    /// Timers and signals it waits for.
    pub waits: Vec<PendingWait>,
    /// Steps whose latest attempt began and has not ended, as the
    /// journal's `Began` records say (running, or cut by a crash and not
    /// begun again yet), by operation.
    #[serde(default)]
    pub in_flight: Vec<InFlightStep>,
    /// Its search attributes: name to typed value (`{"int": 42}`,
    /// `{"keyword": "gold"}`, `{"text": ...}`, `{"float": ...}`,
    /// `{"bool": ...}`, `{"time": <ms>}`).
    #[serde(default)]
    #[cfg_attr(feature = "server", schema(value_type = Object))]
    pub attributes: std::collections::BTreeMap<String, serde_json::Value>,
}

/// A step attempt a run's journal shows begun and not ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct InFlightStep {
    /// The step's operation (sequence number).
    pub seq: u32,
    /// The step's name.
    pub name: String,
    /// The attempt, from 1.
    pub attempt: u32,
    /// When it began (ms since the Unix epoch).
    pub started_ms: u64,
}

/// One run of an ID's chain (`GET /api/v1/runs/{id}/chain`), newest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct ChainLink {
    /// Its run number.
    pub run: u64,
    /// Its workflow type.
    pub workflow: String,
    /// When it started.
    pub started_ms: u64,
    /// `running`, or how it ended.
    pub status: String,
    /// When it ended.
    pub finished_ms: Option<u64>,
    /// The run it came from.
    pub from_run: Option<u64>,
    /// How: `continued-as-new`, `reset`, or `cause-N`.
    pub cause: Option<String>,
}

/// `POST /api/v1/runs`: start a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct StartRequest {
    /// The workflow type (a registered one).
    pub workflow: String,
    /// The workflow ID.
    pub id: String,
    /// Its input.
    #[serde(default)]
    pub input: Value,
    /// `new-only` (default), `attach` or `reuse-after-finish`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The version of the workflow's code to start (default: the newest
    /// registered; one not registered is kind `unknown_version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// Search attributes the run starts with: name to typed value, as
    /// [`Description::attributes`] shows them (`{"int": 42}`); a bad name
    /// or value is kind `invalid_attribute` and nothing is started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub attributes: Option<std::collections::BTreeMap<String, Value>>,
}

/// A run a start created or attached to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct StartReply {
    /// The workflow ID.
    pub id: String,
    /// Its shard.
    pub shard: u32,
    /// Its run number.
    pub run: u64,
    /// Whether the start attached to an existing run.
    pub attached: bool,
}

/// `POST /api/v1/execute`: start a run and wait for its result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct ExecuteRequest {
    /// What to start.
    #[serde(flatten)]
    pub start: StartRequest,
    /// How long to wait for the result (default 30,000). On timeout the
    /// answer is kind `timeout` and the run goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// A run's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct ResultReply {
    /// The run.
    pub run: StartReply,
    /// Its result.
    pub result: Value,
}

/// `POST /api/v1/runs/{id}/signal`. A body without `payload`, or with a
/// field not listed here, is refused (400 `bad_request`): a signal
/// recorded with a payload its type does not decode would fail the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// The signal's name.
    pub name: String,
    /// Its payload, required (`null` for a signal of type `()`).
    pub payload: Value,
    /// A deduplication key: a signal sent again with a key the run has
    /// already accepted is acknowledged and not recorded twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// `POST /api/v1/runs/{id}/update`. A body without `arg`, or with a field
/// not listed here, is refused (400 `bad_request`), as for a signal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    /// The update handler's name.
    pub name: String,
    /// Its argument, required (`null` for an argument of type `()`).
    pub arg: Value,
    /// A key making the update safe to repeat (`update_once`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// `POST /api/v1/runs/{id}/query`. A body without `arg`, or with a field
/// not listed here, is refused (400 `bad_request`), as for a signal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    /// The query handler's name.
    pub name: String,
    /// Its argument, required (`null` for an argument of type `()`).
    pub arg: Value,
}

/// A handler's answer (update, query) or a run's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct ValueReply {
    /// The value.
    pub value: Value,
}

/// `cancel` and `terminate`: why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct ReasonRequest {
    /// The reason recorded (default `operator`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `cancel`: why, and how long the run's code has to end before it is
/// terminated (`Engine::cancel_with_grace`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct CancelRequest {
    /// The reason recorded (default `operator`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A grace in milliseconds: the run is terminated with the reason if
    /// it has not ended this long after the cancel (recorded, so it holds
    /// across a restart). Absent: a cooperative cancel the code may
    /// swallow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
}

/// `POST /api/v1/runs/{id}/reset`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct ResetRequest {
    /// The step to run again (and every record after it).
    pub step: String,
    /// The reason recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The run to reset: safe to repeat (`reset_run`); absent, the ID's
    /// current run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u64>,
}

/// `POST /api/v1/bulk`: cancel or terminate every running run of a
/// workflow type, or count them first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct BulkRequest {
    /// `cancel` or `terminate`.
    pub action: String,
    /// Only runs of this type (absent: every running run but the
    /// engine's own schedules, queues, limits and debounces, `fusee.*`,
    /// which go only when their type is named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The reason recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Count the runs it would act on, and act on none.
    #[serde(default)]
    pub dry_run: bool,
    /// `cancel` only: each run asked is terminated with the reason if it
    /// has not ended this many milliseconds after its cancel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
}

/// What a bulk action did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct BulkReply {
    /// Runs counted (dry run) or acted on.
    pub count: u64,
    /// Whether it was a dry run.
    pub dry_run: bool,
}

/// `POST /api/v1/backup`: an online backup of the engine's store
/// (`fusee::Engine::backup`) into a new directory on the server's machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct BackupRequest {
    /// The destination: a new or empty directory, as the server's process
    /// sees paths.
    pub dest: String,
}

/// What a backup did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct BackupReply {
    /// Where the copy is.
    pub dest: String,
    /// Shards copied.
    pub shards: u32,
    /// Runs the copy holds.
    pub runs: u64,
    /// The copy's size on disk, in bytes.
    pub bytes: u64,
    /// Each shard's pause, in shard order.
    pub pauses: Vec<BackupPause>,
    /// The whole backup, in microseconds.
    pub took_us: u64,
}

/// How long one shard was paused by a backup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct BackupPause {
    /// The shard.
    pub shard: u32,
    /// From when it stopped taking requests until it went on, in
    /// microseconds.
    pub paused_us: u64,
}

/// A shard as this engine sees it (`GET /api/v1/shards`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct ShardInfo {
    /// The shard.
    pub shard: u32,
    /// Whether this engine owns it (holds its lease, under leases).
    pub owned: bool,
    /// How often this engine opened it.
    pub opens: u64,
    /// How often this engine lost it.
    pub losses: u64,
    /// Why it is not owned, if it failed.
    pub last_error: Option<String>,
    /// The LSN the shard's last seal recorded: every record through it is
    /// durable (absent when not owned, 0 before the first seal).
    pub sealed_lsn: Option<u64>,
    /// Flushes since it opened.
    pub flushes: u64,
    /// Flush latency, median, in microseconds.
    pub flush_p50_us: u64,
    /// Flush latency, 99th percentile, in microseconds.
    pub flush_p99_us: u64,
    /// Runs in memory.
    pub loaded_runs: u64,
    /// Runs parked.
    pub parked_runs: u64,
    /// Requests waiting in its queue.
    pub queued: u64,
}

/// A schedule (`GET /api/v1/schedules/{id}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct ScheduleInfo {
    /// Its ID.
    pub id: String,
    /// The workflow type it starts.
    pub workflow: String,
    /// Its cron expression or interval.
    pub spec: String,
    /// Its time zone.
    pub time_zone: String,
    /// Its overlap policy.
    pub overlap: String,
    /// Its catch-up policy.
    pub catch_up: String,
    /// Whether it is paused.
    pub paused: bool,
    /// The note given when paused.
    pub note: Option<String>,
    /// Its next fire times.
    pub next_fires_ms: Vec<u64>,
    /// Workflow IDs of its runs still running.
    pub running: Vec<String>,
    /// Fires done.
    pub fired: u64,
    /// Fires skipped.
    pub skipped: u64,
    /// Its last error.
    pub last_error: Option<String>,
}

/// A queue (`GET /api/v1/queues/{name}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct QueueInfo {
    /// Its name.
    pub name: String,
    /// The workflow type it starts.
    pub workflow: String,
    /// At most this many runs at once.
    pub concurrency: Option<u32>,
    /// At most this many starts per period: `(count, period_ms)`.
    pub rate: Option<(u32, u64)>,
    /// One run per key at a time.
    pub one_per_key: bool,
    /// Whether it is paused.
    pub paused: bool,
    /// Items waiting.
    pub pending: u64,
    /// Runs running.
    pub running: u64,
    /// Items enqueued.
    pub enqueued: u64,
    /// Runs started.
    pub started: u64,
    /// Runs completed.
    pub completed: u64,
    /// Runs failed.
    pub failed: u64,
    /// Its last error.
    pub last_error: Option<String>,
}

/// A step limit (`GET /api/v1/limits/{name}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct LimitInfo {
    /// Its name.
    pub name: String,
    /// At most this many steps at once.
    pub concurrency: Option<u32>,
    /// At most this many per period: `(count, period_ms)`.
    pub rate: Option<(u32, u64)>,
    /// Runs holding it.
    pub holders: Vec<String>,
    /// Steps waiting for it.
    pub waiting: u64,
    /// Grants made.
    pub granted: u64,
    /// Paused: no permit goes out.
    #[serde(default)]
    pub paused: bool,
    /// The note given when it was paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `POST /api/v1/schedules/{id}/pause` and `/api/v1/limits/{name}/pause`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct PauseRequest {
    /// A note shown with the paused schedule or limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A queue deleted: the items it dropped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct Deleted {
    /// Items dropped (queues); 0 otherwise.
    pub dropped: u64,
}

/// One chunk of a run's stream, the data of a `chunk` event of
/// `GET /api/v1/runs/{id}/streams/{name}` (Server-Sent Events; the event's
/// `id` is the index too). The chunk's bytes are `text` when they are
/// UTF-8 (a model's tokens), else `bytes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct StreamChunkEvent {
    /// Its index in the stream, from 0: resume with `from = index + 1`.
    pub index: u64,
    /// The chunk, if it is UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The chunk's bytes, if it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<Vec<u8>>,
}

impl StreamChunkEvent {
    /// The chunk's bytes, whichever way they came.
    pub fn payload(&self) -> Vec<u8> {
        match (&self.text, &self.bytes) {
            (Some(t), _) => t.as_bytes().to_vec(),
            (None, Some(b)) => b.clone(),
            (None, None) => Vec::new(),
        }
    }
}

/// The data of the `end` event that closes a stream's events: the stream
/// ended or its run finished, and `next` is the index after the last
/// chunk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(ToSchema))]
pub struct StreamEndEvent {
    /// The index after the stream's last chunk.
    pub next: u64,
}
