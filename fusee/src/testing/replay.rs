//! Replay tests: the current workflow code run against a journal a real
//! engine wrote, with no engine, storage or effect: every operation is
//! answered from the journal by the run's [`RunMachine`], which checks the
//! code makes the same calls in the same order.
//!
//! The host side here (polling the code, appending what it asks for,
//! handing it one delivery at a time) follows the shard loop's
//! (`runtime::runs`): a change there belongs here too. What the engine does
//! with the journal is the same; what it does past the journal's end
//! (running steps, timers) is left out: the code is stopped there and what
//! it called next is reported.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake, Waker};

use fusee_core::record::{Lsn, Record, RecordBuf, RunId, Seq, Status, encode_canonical};
use fusee_core::run::{Answer, OpError, RunMachine};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ctx::Registry;
use crate::ctx::{Ctx, RunState};
use crate::inspect::journal as format;
use crate::registry::RunFuture;
use crate::runtime::host::{Taken, poll_code, take_delivery};
use crate::workflow::{Failure, decode, encode};

/// Polls a replay gives its code before giving up on code that keeps
/// waking itself without calling anything.
const MAX_POLLS: usize = 1_000_000;

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
    /// The journal's workflow type has no code in the test engine.
    #[error("workflow type {wtype:?} has no code registered; registered: {}", registered.join(", "))]
    NoCode {
        /// The journal's workflow type.
        wtype: String,
        /// The types registered.
        registered: Vec<String>,
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

/// Wakes by setting a flag: the replay polls again while it is set.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// Replays `journal` with the code `registry` holds for its type.
pub(crate) fn replay(registry: &Registry, journal: &Journal) -> Result<Replayed, ReplayError> {
    let records = journal.records();
    let Some(Record::Start {
        run,
        id,
        wtype,
        input,
        started_ms,
        ..
    }) = records.first()
    else {
        return Err(ReplayError::Malformed(
            "its first record is not the run's Start".into(),
        ));
    };
    if !journal.is_complete() {
        return Err(ReplayError::Incomplete { id: id.to_string() });
    }
    let Some(handler) = registry.get(wtype) else {
        return Err(ReplayError::NoCode {
            wtype: wtype.to_string(),
            registered: registry.names(),
        });
    };
    let run: RunId = *run;
    let mut bytes = Vec::new();
    for r in records {
        encode_canonical(r, &mut bytes);
    }
    let mut lsn = records.len() as Lsn;
    let machine =
        RunMachine::build(run, &bytes, lsn).map_err(|e| ReplayError::Malformed(e.to_string()))?;
    let end_recorded = records.iter().any(|r| {
        matches!(r, Record::Done { by: None, status, .. }
            if matches!(status, Status::Ok | Status::Failed | Status::Cancelled | Status::ContinuedAsNew))
    });
    let state = Rc::new(RefCell::new(RunState::new(
        machine,
        run,
        id.clone(),
        registry.clone(),
        // No limit: replay checks the code against a journal a real engine
        // (with its own limit) already accepted.
        usize::MAX,
    )));
    // The code's clock reads the run's start; recorded values replay.
    state.borrow_mut().now_ms = *started_ms;
    let diverged = |message: String| ReplayError::Diverged {
        id: id.to_string(),
        message,
    };
    let mut future: RunFuture = handler(Ctx::new(Rc::clone(&state)), input);
    let mut handlers: Vec<(u64, RunFuture)> = Vec::new();
    let flag = Arc::new(Flag(AtomicBool::new(true)));
    let waker = Waker::from(Arc::clone(&flag));
    let mut cx = Context::from_waker(&waker);
    let mut next: Vec<(Seq, String)> = Vec::new();
    for _ in 0..MAX_POLLS {
        flag.0.store(false, Ordering::Release);
        let finished = poll_code(&mut future, &mut cx);
        let mut returned = Vec::new();
        handlers.retain_mut(|(ordinal, h)| match poll_code(h, &mut cx) {
            Some(result) => {
                returned.push((*ordinal, result));
                false
            }
            None => true,
        });
        let fault = state.borrow_mut().fault.take();
        let asked = std::mem::take(&mut state.borrow_mut().appends);
        for rec in &asked {
            if let Some(op) = called(rec) {
                next.push(op);
            }
            lsn += 1;
            state
                .borrow_mut()
                .machine
                .handle_record(lsn, rec)
                .map_err(|e| diverged(e.to_string()))?;
        }
        if let Some(fault) = fault {
            return Err(diverged(fault.to_string()));
        }
        for (ordinal, result) in returned {
            let answer = state.borrow_mut().machine.update_done(ordinal);
            let (status, payload) = ending(result);
            match answer.map_err(|e| diverged(op_message(e)))? {
                Answer::Recorded => {}
                Answer::Append => {
                    next.push((Seq::MAX, format!("update {ordinal} returns")));
                    lsn += 1;
                    let rec = RecordBuf::UpdateDone {
                        run,
                        ordinal,
                        status,
                        payload: payload.as_slice().into(),
                    };
                    state
                        .borrow_mut()
                        .machine
                        .handle_record(lsn, &rec)
                        .map_err(|e| diverged(e.to_string()))?;
                }
            }
        }
        let end = match finished {
            Some(result) => {
                let (mut status, payload) = ending(result);
                if status == Status::Failed && state.borrow().cancels > 0 && is_cancel(&payload) {
                    status = Status::Cancelled;
                }
                Some((status, payload))
            }
            None => state
                .borrow_mut()
                .continue_with
                .take()
                .map(|input| (Status::ContinuedAsNew, input)),
        };
        if let Some((status, payload)) = end {
            let answer = state.borrow_mut().machine.finish(status);
            answer.map_err(|e| diverged(op_message(e)))?;
            return Ok(Replayed {
                ended: Some(status),
                payload,
                end_recorded,
                next: ordered(next, &state),
            });
        }
        let delivered = deliver_next(&state, &mut handlers).map_err(diverged)?;
        if !delivered && !flag.0.load(Ordering::Acquire) {
            // Quiescent with nothing more to deliver: the journal's end.
            if end_recorded {
                // The journal says the code ended here, and it waits.
                return Err(diverged(format!(
                    "run {run}: the journal holds the run's end but the code waits{}",
                    match ordered(next, &state).first() {
                        Some(op) => format!(" at {op}"),
                        None => " without calling anything".into(),
                    }
                )));
            }
            return Ok(Replayed {
                ended: None,
                payload: Vec::new(),
                end_recorded,
                next: ordered(next, &state),
            });
        }
    }
    Err(ReplayError::Malformed(format!(
        "the code of {id:?} was polled {MAX_POLLS} times without settling"
    )))
}

/// An operation the code called past the journal's end, from the record
/// it asked for.
fn called(rec: &RecordBuf) -> Option<(Seq, String)> {
    let (seq, what) = match rec {
        Record::Timer { seq, name, .. } => (*seq, format!("sleep {:?}", name.as_ref())),
        Record::Wait { seq, name, .. } => (*seq, format!("wait for signal {:?}", name.as_ref())),
        Record::Child { seq, wtype, id, .. } => (
            *seq,
            format!("child {:?} with ID {:?}", wtype.as_ref(), id.as_ref()),
        ),
        Record::Send {
            seq, target, name, ..
        } => (
            *seq,
            format!(
                "send of signal {:?} to {:?}",
                name.as_ref(),
                target.as_ref()
            ),
        ),
        Record::Value { seq, .. } => (*seq, "a recorded value".into()),
        Record::Patch { seq, id, .. } => (*seq, format!("patched({:?})", id.as_ref())),
        _ => return None,
    };
    Some((seq, what))
}

/// `next` and the live steps the code called (which record nothing until
/// they run), by operation.
fn ordered(mut next: Vec<(Seq, String)>, state: &Rc<RefCell<RunState>>) -> Vec<String> {
    for (seq, spec) in &state.borrow().steps {
        next.push((*seq, format!("step {:?}", spec.name.as_ref())));
    }
    next.sort_by_key(|(seq, _)| *seq);
    next.into_iter()
        .map(|(seq, what)| {
            if seq == Seq::MAX {
                what
            } else {
                format!("operation {seq}: {what}")
            }
        })
        .collect()
}

/// Hands the code its next delivery, if one waits (taken as the shard
/// loop takes it: `runtime::host`). True if it did.
fn deliver_next(
    state: &Rc<RefCell<RunState>>,
    handlers: &mut Vec<(u64, RunFuture)>,
) -> Result<bool, String> {
    let update = {
        let mut guard = state.borrow_mut();
        let s = &mut *guard;
        let Some(Taken {
            outcome,
            cancel,
            update,
        }) = take_delivery(s).map_err(|e| e.to_string())?
        else {
            return Ok(false);
        };
        if let Some((seq, outcome)) = outcome {
            s.deliver(seq, outcome);
        }
        if let Some(reason) = cancel {
            s.cancel(reason);
        }
        update
    };
    if let Some((ordinal, name, payload)) = update {
        let started = state
            .borrow()
            .updates
            .get(&name)
            .map(|h| (h.start)(&payload));
        match started {
            Some(h) => handlers.push((ordinal, h)),
            None => {
                let failure = Failure::with_kind(
                    "unknown-update",
                    format!("the run's code registers no update handler {name:?}"),
                );
                handlers.push((ordinal, Box::pin(async move { Err(failure) })));
            }
        }
    }
    Ok(true)
}

/// The status and payload code's result records (as the shard loop's
/// `finish`, before the cancelled case).
fn ending(result: Result<Vec<u8>, Failure>) -> (Status, Vec<u8>) {
    match result {
        Ok(bytes) => (Status::Ok, bytes),
        Err(f) => (
            Status::Failed,
            encode(&f).unwrap_or_else(|_| f.message.clone().into_bytes()),
        ),
    }
}

/// Whether a failure payload is a cancellation's (kind `cancelled`).
fn is_cancel(payload: &[u8]) -> bool {
    decode::<Failure>(payload).is_ok_and(|f| f.kind.as_deref() == Some("cancelled"))
}

fn op_message(e: OpError) -> String {
    e.to_string()
}
