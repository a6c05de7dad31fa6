//! [`Error`]: what the engine's client API and step calls return.

use fusee_core::run::DeterminismError;
use fusee_storage::StorageError;

use crate::Failure;
use crate::config::OpenError;

/// What went wrong in a call to the engine. Bad input gets a named variant
/// and records nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No workflow of this type is registered.
    #[error("unknown workflow type {wtype:?}; registered: {}", registered.join(", "))]
    UnknownWorkflow {
        /// The type asked for.
        wtype: String,
        /// The types registered, sorted.
        registered: Vec<String>,
    },
    /// A start named a version of a workflow type that is not registered
    /// in this engine ([`crate::StartOptions::version`]).
    #[error("workflow type {wtype:?} has no version {version} registered here; registered: {}", registered.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))]
    UnknownVersion {
        /// The type asked for.
        wtype: String,
        /// The version asked for.
        version: u32,
        /// The versions registered, in order.
        registered: Vec<u32>,
    },
    /// A version of a workflow type registered twice in one engine
    /// ([`crate::Engine::try_register`], [`crate::Engine::try_register_version`]);
    /// the first registration stands.
    #[error(
        "version {version} of workflow type {wtype:?} is already registered in this engine; each version takes one registration"
    )]
    AlreadyRegistered {
        /// The workflow type.
        wtype: String,
        /// The version (0: [`crate::Engine::register`]'s).
        version: u32,
    },
    /// A workflow ID already used, under an ID policy that refuses it.
    #[error("workflow {id:?} already exists (run {run})")]
    AlreadyExists {
        /// The workflow ID.
        id: String,
        /// Its latest run.
        run: u64,
    },
    /// No workflow with this ID.
    #[error("no workflow {id:?}")]
    NotFound {
        /// The workflow ID.
        id: String,
    },
    /// The run's code registers no update handler of this name.
    #[error("workflow {id:?} has no update handler {name:?}; registered: {}", registered.join(", "))]
    UnknownUpdate {
        /// The workflow ID.
        id: String,
        /// The handler asked for.
        name: String,
        /// The handlers its code registered, sorted.
        registered: Vec<String>,
    },
    /// The run's code registers no query handler of this name.
    #[error("workflow {id:?} has no query handler {name:?}; registered: {}", registered.join(", "))]
    UnknownQuery {
        /// The workflow ID.
        id: String,
        /// The handler asked for.
        name: String,
        /// The handlers its code registered, sorted.
        registered: Vec<String>,
    },
    /// An update's validator refused it; nothing was recorded.
    #[error("workflow {id:?} refused the update: {reason}")]
    Rejected {
        /// The workflow ID.
        id: String,
        /// The validator's reason.
        reason: String,
    },
    /// The workflow has finished: it takes no more signals or cancels.
    #[error("workflow {id:?} has already finished ({status})")]
    Finished {
        /// The workflow ID.
        id: String,
        /// How it ended.
        status: &'static str,
    },
    /// A payload (input, signal, result) longer than the limit.
    #[error("{what} of {len} bytes for workflow {id:?} exceeds the limit of {max} bytes")]
    TooLarge {
        /// The workflow ID it was for.
        id: String,
        /// What was too large.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The shard's request queue is full: try again later.
    #[error("shard {shard} is busy: its request queue of {capacity} is full")]
    Busy {
        /// The shard.
        shard: u32,
        /// The queue's capacity.
        capacity: usize,
    },
    /// The engine was closed (or its shard stopped after a storage failure).
    #[error("the engine is closed")]
    Closed,
    /// A payload did not encode or decode as its type.
    #[error("payload of {what}{} does not match its type: {detail}", of_workflow(.id))]
    Codec {
        /// Which payload.
        what: &'static str,
        /// The workflow ID it was for, where the call names one.
        id: Option<String>,
        /// serde_json's message.
        detail: String,
    },
    /// The run ended without a result of its own: failed, cancelled, timed
    /// out or terminated.
    #[error("workflow {id:?} ended {status}: {failure}")]
    Failed {
        /// The workflow ID.
        id: String,
        /// How it ended (`failed`, `cancelled`, ...).
        status: &'static str,
        /// Why.
        failure: Failure,
    },
    /// The run's code did something its journal says it did not (the
    /// error names the run, the sequence number, the operation the journal
    /// holds there and the one the code did): it is stopped until its code
    /// is fixed (an engine opened with the fixed code replays it) or the
    /// run is reset. A caller waiting on its result gets this at once, and
    /// again on every call while the run stays stopped.
    #[error(transparent)]
    Determinism(Box<DeterminismError>),
    /// The run's code stopped for another reason than a departure from its
    /// journal (its journal does not replay, or the run's machine refused
    /// a record): as [`Error::Determinism`], it stays stopped until its
    /// code is fixed or it is reset.
    #[error("workflow {id:?} (run {run}) is stopped: {reason}")]
    Stopped {
        /// The workflow ID.
        id: String,
        /// The run.
        run: u64,
        /// Why its code stopped.
        reason: String,
    },
    /// Opening the storage failed.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// A storage call failed; the shard stopped.
    #[error("shard {shard}: {error}")]
    Storage {
        /// The shard.
        shard: u32,
        /// The storage's error.
        error: StorageError,
    },
    /// A search attribute or a filter on one is malformed (an unknown
    /// type, a bad name or value, bounds of two types); nothing was
    /// recorded.
    #[error("invalid search attribute: {0}")]
    InvalidAttribute(String),
    /// Another engine setting is wrong.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// An online backup failed ([`crate::Engine::backup`]); its
    /// destination is refused at open (or untouched).
    #[error("backup failed: {0}")]
    Backup(#[from] crate::backup::BackupError),
    /// A string [`crate::Engine::complete`] was given that no
    /// [`crate::Ctx::promise`] made; nothing was recorded.
    #[error("{promise:?} is not a promise ID: {reason}")]
    BadPromiseId {
        /// The string given.
        promise: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No promise with this ID is waiting: its workflow does not exist, or
    /// the workflow's current run did not make it (it never did, or the
    /// run that did continued as new). Nothing was recorded.
    #[error("no promise {promise:?}: {reason}")]
    UnknownPromise {
        /// The promise ID.
        promise: String,
        /// Why it is not known.
        reason: String,
    },
    /// The promise was completed before: its first value stands and this
    /// one was not recorded. A caller retrying a completion whose answer it
    /// lost (a timeout, a crash) gets this when the first one took.
    #[error("promise {promise:?} was already completed")]
    PromiseCompleted {
        /// The promise ID.
        promise: String,
    },
    /// The run that made the promise has finished: nothing waits for it
    /// any more, and nothing was recorded.
    #[error(
        "promise {promise:?} can no longer be completed: workflow {id:?} has finished ({status})"
    )]
    PromiseClosed {
        /// The promise ID.
        promise: String,
        /// The workflow that made it.
        id: String,
        /// How the workflow ended.
        status: &'static str,
    },
    /// A reset named a step the run never reached.
    #[error("workflow {id:?} has no step {step:?} to reset to; its steps: {steps:?}")]
    UnknownStep {
        /// The workflow ID.
        id: String,
        /// The step asked for.
        step: String,
        /// The steps its journal has, in the order they first appear.
        steps: Vec<String>,
    },
    /// [`crate::Engine::resume_step`] named a step that is not paused;
    /// nothing was recorded.
    #[error("workflow {id:?} has no paused step {step:?}; its paused steps: {paused:?}")]
    StepNotPaused {
        /// The workflow ID.
        id: String,
        /// The step asked for.
        step: String,
        /// The steps of the run that are paused.
        paused: Vec<String>,
    },
    /// A reset that cannot be done; nothing was recorded.
    #[error("workflow {id:?} cannot be reset: {reason}")]
    CannotReset {
        /// The workflow ID.
        id: String,
        /// Why.
        reason: String,
    },
    /// A schedule that cannot be made as asked (a bad cron expression,
    /// time zone, interval or limit); nothing was recorded.
    #[error("schedule {id:?} is invalid: {reason}")]
    InvalidSchedule {
        /// The schedule's ID.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// A schedule of this ID exists; nothing was recorded.
    #[error("schedule {id:?} already exists (delete it first to change it)")]
    ScheduleExists {
        /// The schedule's ID.
        id: String,
    },
    /// No schedule of this ID (never made, or deleted).
    #[error("no schedule {id:?}")]
    UnknownSchedule {
        /// The schedule's ID.
        id: String,
    },
    /// A queue that cannot be made as asked (a zero limit, a bad rate);
    /// nothing was recorded.
    #[error("queue {name:?} is invalid: {reason}")]
    InvalidQueue {
        /// The queue's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// No queue of this name (never made, or deleted); nothing was
    /// recorded.
    #[error("no queue {name:?}")]
    UnknownQueue {
        /// The queue's name.
        name: String,
    },
    /// The queue holds as many items waiting as it may; nothing was
    /// recorded: try again later.
    #[error("queue {name:?} is full: {pending} items wait (at most {max})")]
    QueueFull {
        /// The queue's name.
        name: String,
        /// Items waiting.
        pending: u64,
        /// The most it holds.
        max: u64,
    },
    /// A step limit that cannot be made as asked (a zero limit, a bad
    /// rate); nothing was recorded.
    #[error("step limit {name:?} is invalid: {reason}")]
    InvalidLimit {
        /// The limit's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// No step limit of this name (never made, or deleted).
    #[error("no step limit {name:?}")]
    UnknownLimit {
        /// The limit's name.
        name: String,
    },
    /// The workflow's shard is not owned by this engine (under
    /// [`crate::Ownership::Lease`]): another process holds its lease, its
    /// owner died and this engine has not taken it over yet, or this engine
    /// lost it (its storage answered `Fenced`: another owner took it over).
    /// Nothing was recorded here, and a caller that was waiting on the
    /// shard (a start or signal not yet acknowledged, a result) was not
    /// answered: send the request to the process that owns the shard, or
    /// try again here later ([`crate::Engine::owned_shards`] says which
    /// shards this engine owns).
    #[error(
        "shard {shard} is not owned by this engine (another process holds its lease, or it is being taken over): nothing was recorded here; send the request to its owner or try again later"
    )]
    NotOwner {
        /// The shard.
        shard: u32,
    },
    /// Under [`crate::Ownership::Lease`], the shard's storage could not be
    /// reached (a lost connection, a database server restarting or failing
    /// over), so the shard stopped here; the engine opens it again after
    /// its retry interval (or another process takes it once its lease
    /// lapses). Retryable: try the call again shortly, here or at the
    /// shard's owner. (With [`crate::Ownership::All`] a stopped shard
    /// stays stopped until the engine is opened again, and the same
    /// failure is [`Error::Storage`].) `maybe_recorded` says whether what the call asked
    /// for (a start, signal or update waiting to become durable) may have
    /// been recorded anyway (the flush that failed may have committed):
    /// repeat it in a form that is safe to repeat (a start that attaches,
    /// a signal or update with a deduplication key). When `false`, nothing
    /// this call asked for was recorded (a result, a query, a request the
    /// shard had not taken yet).
    #[error(
        "shard {shard} is unavailable: {cause}; {}",
        if *maybe_recorded {
            "what this call asked for may or may not have been recorded (it was waiting to become durable): try again shortly in a form safe to repeat (a start that attaches, a signal or update with a key)"
        } else {
            "nothing this call asked for was recorded: try it again shortly"
        }
    )]
    Unavailable {
        /// The shard.
        shard: u32,
        /// What happened to its storage.
        cause: String,
        /// Whether what the call asked for may have been recorded.
        maybe_recorded: bool,
    },
    /// An update's key cannot name it ([`crate::Engine::update_once`]).
    #[error("update key {key:?} for workflow {id:?} is invalid: {reason}")]
    BadUpdateKey {
        /// The workflow ID.
        id: String,
        /// The key given.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A signal's deduplication key cannot name it
    /// ([`crate::Engine::signal_once`]).
    #[error("signal key {key:?} for workflow {id:?} is invalid: {reason}")]
    BadSignalKey {
        /// The workflow ID.
        id: String,
        /// The key given.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A workflow ID no run may take, given to a start
    /// ([`crate::check_workflow_id`] says which): nothing was recorded.
    #[error("{id:?} is not a workflow ID: {reason}")]
    BadWorkflowId {
        /// The ID given (its first 64 characters, when longer).
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A listing cursor this engine could not have given: it does not
    /// parse, or names another number of shards.
    #[error("cursor {cursor:?} is invalid: {reason}")]
    BadCursor {
        /// The cursor given (its first 64 characters, when longer).
        cursor: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A query did not answer: its handler failed, or a finished run
    /// could not be replayed to answer it. The run is as it was.
    #[error("query {name:?} of workflow {id:?} failed: {failure}")]
    QueryFailed {
        /// The workflow ID.
        id: String,
        /// The query's name.
        name: String,
        /// Why.
        failure: Failure,
    },
    /// A question that needs a finished run's whole journal (a query,
    /// answered by replaying it) after only its `Start` and `Done` are
    /// kept: its history was let go once `Config::history_retention`
    /// passed after it finished (or at once, for a journal over
    /// `Config::history_max_bytes`). Its result stays readable.
    #[error(
        "workflow {id:?} (run {run}) finished at {finished_ms} ms and its history is gone since {gone_ms} ms (Unix time; Config::history_retention): only its start and result are kept, so {what} cannot be answered"
    )]
    HistoryGone {
        /// The workflow ID.
        id: String,
        /// The run.
        run: u64,
        /// What was asked (`query "status"`).
        what: String,
        /// When the run finished (ms since the Unix epoch).
        finished_ms: u64,
        /// Since when its history is gone (ms since the Unix epoch): its
        /// finish plus the history retention, or its finish for a journal
        /// over the size limit.
        gone_ms: u64,
    },
    /// A subscription names a stream the run never opened, and the run
    /// has finished, so it never will (`Engine::subscribe`).
    #[error("workflow {id:?} (run {run}) finished without opening stream {name:?}")]
    UnknownStream {
        /// The workflow ID.
        id: String,
        /// The run.
        run: u64,
        /// The stream asked for.
        name: String,
    },
    /// A subscription's cursor lies past the stream's durable chunks: a
    /// client only ever sees durable chunks, so no cursor it kept can be
    /// there (`Engine::subscribe`).
    #[error(
        "stream {name:?} of workflow {id:?} has {len} durable chunks; cursor {from} is past its end"
    )]
    StreamCursor {
        /// The workflow ID.
        id: String,
        /// The stream.
        name: String,
        /// The cursor asked for (a chunk index).
        from: u64,
        /// How many durable chunks the stream holds.
        len: u64,
    },
    /// A subscription names a stream whose chunks were let go: its run
    /// finished longer ago than `Config::stream_retention` (its result
    /// stays until `Config::retention` ends; `Engine::subscribe`).
    #[error(
        "the chunks of stream {name:?} of workflow {id:?} were let go at {gone_ms} ms, past Config::stream_retention after the run finished at {finished_ms} ms"
    )]
    StreamGone {
        /// The workflow ID.
        id: String,
        /// The stream.
        name: String,
        /// When the run finished (ms since the Unix epoch).
        finished_ms: u64,
        /// Since when its chunks are gone (ms since the Unix epoch).
        gone_ms: u64,
    },
    /// A run sent as many chunks as `Config::max_stream_chunks` allows,
    /// over all its streams: the chunk was not recorded.
    #[error(
        "workflow {id:?} (run {run}) has sent {limit} stream chunks, the most a run may (Config::max_stream_chunks)"
    )]
    StreamLimit {
        /// The workflow ID.
        id: String,
        /// The run.
        run: u64,
        /// The limit.
        limit: u64,
    },
    /// A chunk or a stream's end that cannot be taken: the stream ended or
    /// its run finished (or is unknown). Nothing was recorded.
    #[error("stream {name:?} of workflow {id:?} takes no more chunks: {reason}")]
    StreamClosed {
        /// The workflow ID.
        id: String,
        /// The stream.
        name: String,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// A payload that did not encode or decode, for no one workflow.
    pub(crate) fn codec(what: &'static str, e: serde_json::Error) -> Self {
        Self::Codec {
            what,
            id: None,
            detail: e.to_string(),
        }
    }

    /// `s` as an error names something a caller gave: its first 64
    /// characters and `…` when longer, so a megabyte ID makes no megabyte
    /// message.
    pub(crate) fn given(s: &str) -> String {
        shortened(s, 64)
    }

    /// A payload for workflow `id` that did not encode or decode.
    pub(crate) fn codec_for(what: &'static str, id: &str, e: serde_json::Error) -> Self {
        Self::Codec {
            what,
            id: Some(id.to_string()),
            detail: e.to_string(),
        }
    }
}

/// " for workflow \"ID\"" when a codec error names its workflow.
fn of_workflow(id: &Option<String>) -> String {
    id.as_ref()
        .map(|id| format!(" for workflow {id:?}"))
        .unwrap_or_default()
}

/// What the engine's calls return.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `s` cut to its first `chars_max` characters, with `…` when it was
/// longer: how a message shows text a caller gave (an ID, a URL), so a
/// megabyte of it makes no megabyte message.
pub fn shortened(s: &str, chars_max: usize) -> String {
    match s.char_indices().nth(chars_max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}
