//! Replay tests: the current workflow code run against a journal a real
//! engine wrote, with no engine, storage or effect: every operation is
//! answered from the journal by the run's [`RunMachine`], which checks the
//! code makes the same calls in the same order.
//!
//! The host side (polling the code, appending what it asks for, handing
//! it one delivery at a time) is the engine's own (`runtime::host`, which
//! queries to a finished run use too). What the engine does
//! with the journal is the same; what it does past the journal's end
//! (running steps, timers) is left out: the code is stopped there and what
//! it called next is reported.

use fusee_core::record::{Record, RecordBuf, Status};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ctx::Registry;
use crate::inspect::journal as format;
use crate::runtime::host::{self, ReplayFault};
use crate::workflow::{Failure, decode};

/// A run's journal to replay: its records, oldest first, the first its
/// `Start`.
///
/// The usual source is the document `fusee show DIR ID --json` prints
/// ([`Journal::from_json`], format `fusee-journal` version 1, read by
/// [`crate::inspect::journal::from_json`]); a test engine exports the same
/// with [`TestEngine::export_journal`](super::TestEngine::export_journal).
#[derive(Clone, Debug)]
pub struct Journal {
    records: Vec<RecordBuf>,
    complete: bool,
    document: Option<Value>,
}

impl Journal {
    /// The journal in a `fusee show --json` document.
    pub fn from_json(text: &str) -> Result<Self, ReplayError> {
        let doc: Value = serde_json::from_str(text).map_err(ReplayError::Json)?;
        Self::from_value(&doc)
    }

    /// The journal in a parsed `fusee show --json` document.
    pub fn from_value(doc: &Value) -> Result<Self, ReplayError> {
        let records = format::from_json(doc)?;
        // The format's `complete`: false for a finished run whose stored
        // frame kept only its Start and Done.
        let complete = doc.get("complete").and_then(Value::as_bool) != Some(false);
        Ok(Self {
            records,
            complete,
            document: Some(doc.clone()),
        })
    }

    /// A journal of `records` (a run's, oldest first).
    pub fn from_records(records: Vec<RecordBuf>) -> Self {
        Self {
            records,
            complete: true,
            document: None,
        }
    }

    pub(crate) fn exported(records: Vec<RecordBuf>, complete: bool, document: Value) -> Self {
        Self {
            records,
            complete,
            document: Some(document),
        }
    }

    /// Its records, oldest first.
    pub fn records(&self) -> &[RecordBuf] {
        &self.records
    }

    /// False when the journal keeps only a finished run's `Start` and
    /// `Done` (the rest was let go when the run parked): nothing to check
    /// code against.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The journal as a `fusee-journal` document: the one it was read
    /// from or exported as, else one made of its records (`format`,
    /// `version`, `run`, `id`, `workflow`, `complete`, `records`).
    pub fn to_json(&self) -> Value {
        if let Some(doc) = &self.document {
            return doc.clone();
        }
        let (run, id, workflow) = match self.records.first() {
            Some(Record::Start { run, id, wtype, .. }) => (*run, id.to_string(), wtype.to_string()),
            _ => (0, String::new(), String::new()),
        };
        serde_json::json!({
            "format": format::FORMAT,
            "version": format::VERSION,
            "run": run,
            "id": id,
            "workflow": workflow,
            "complete": self.complete,
            "records": self.records.iter().map(format::record_to_json).collect::<Vec<_>>(),
        })
    }
}

/// What the current code did with a journal it replayed without departing
/// from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replayed {
    /// How the code ended the run; `None` when it was still running at
    /// the journal's end (a run in progress).
    pub ended: Option<Status>,
    /// Its result (JSON) for an `Ok` end, its [`Failure`] (JSON) for
    /// another; empty while running.
    pub payload: Vec<u8>,
    /// Whether the journal held the run's end as its code's (then the code
    /// ended there with the same status: the machine checked it).
    pub end_recorded: bool,
    /// The operations the code called past the journal's end, in call
    /// order (`operation 4: sleep "cool-down"`): what it does next.
    pub next: Vec<String>,
}

impl Replayed {
    /// The code's result as `O`: `Err` when it did not end `Ok` (its
    /// failure) or the result does not decode.
    pub fn result<O: DeserializeOwned>(&self) -> Result<O, ReplayError> {
        match self.ended {
            Some(Status::Ok) => decode(&self.payload).map_err(|e| ReplayError::Result {
                why: format!("the result does not decode as the output type: {e}"),
            }),
            Some(status) => Err(ReplayError::Result {
                why: format!(
                    "the code ended {}: {}",
                    status.as_str(),
                    decode::<Failure>(&self.payload)
                        .map(|f| f.to_string())
                        .unwrap_or_else(|_| String::from_utf8_lossy(&self.payload).into_owned())
                ),
            }),
            None => Err(ReplayError::Result {
                why: "the code was still running at the journal's end".into(),
            }),
        }
    }
}

/// Why a replay failed: the journal could not be read, or the code departs
/// from it ([`ReplayError::Diverged`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The document is not JSON.
    #[error("the journal is not JSON: {0}")]
    Json(serde_json::Error),
    /// The document is not a journal this build reads.
    #[error(transparent)]
    Document(#[from] format::JournalError),
    /// The records are not a run's journal (no `Start` first, records of
    /// several runs, completions of operations never started).
    #[error("the journal cannot be replayed: {0}")]
    Malformed(String),
    /// The journal keeps only a finished run's `Start` and `Done`.
    #[error(
        "the journal of {id:?} keeps only its Start and Done (the run parked after it finished): nothing to replay"
    )]
    Incomplete {
        /// The workflow ID.
        id: String,
    },
    /// The journal's workflow type has no code in the test engine, at the
    /// version its `Start` recorded.
    #[error("workflow type {wtype:?} has no code registered at version {version}: {why}")]
    NoCode {
        /// The journal's workflow type.
        wtype: String,
        /// The version the journal's `Start` recorded.
        version: u32,
        /// The engine's error: the type not registered (with the types
        /// that are), or not at that version (with the versions that are).
        why: String,
    },
    /// The code departs from the journal: `message` is the engine's
    /// determinism error, naming the operation (its sequence number), what
    /// the journal holds there and what the code did.
    #[error("workflow {id:?} departs from its journal: {message}")]
    Diverged {
        /// The workflow ID.
        id: String,
        /// The determinism error.
        message: String,
    },
    /// [`Replayed::result`] has no result of that type to give.
    #[error("no result: {why}")]
    Result {
        /// Why.
        why: String,
    },
}

/// Replays `journal` with the code `registry` holds for its type (the
/// engine's own replay: [`host::replay`]).
pub(crate) fn replay(registry: &Registry, journal: &Journal) -> Result<Replayed, ReplayError> {
    let records = journal.records();
    let Some(Record::Start { id, .. }) = records.first() else {
        return Err(ReplayError::Malformed(
            "its first record is not the run's Start".into(),
        ));
    };
    if !journal.is_complete() {
        return Err(ReplayError::Incomplete { id: id.to_string() });
    }
    match host::replay(registry, records) {
        Ok(r) => Ok(Replayed {
            ended: r.ended,
            payload: r.payload,
            end_recorded: r.end_recorded,
            next: r.next,
        }),
        Err(ReplayFault::Malformed(why)) => Err(ReplayError::Malformed(why)),
        Err(ReplayFault::NoCode {
            wtype,
            version,
            error,
        }) => Err(ReplayError::NoCode {
            wtype,
            version,
            why: error.to_string(),
        }),
        Err(ReplayFault::Diverged(d)) => Err(ReplayError::Diverged {
            id: id.to_string(),
            message: d.message,
        }),
    }
}
