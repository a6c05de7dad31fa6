//! The code host: what polls workflow code and hands it its deliveries,
//! one at a time, shared by the shard loop (`runs.rs`) and the replay of
//! a journal ([`replay`]: the test kit's `testing::replay`, and queries to
//! a finished run), so the two cannot drift.

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use fusee_core::record::{
    Lsn, Record, RecordBuf, Seq, Status, WaitOutcome, encode_canonical, iter_canonical,
};
use fusee_core::run::{Answer, Delivery, DeterminismError, OpError, RunMachine};

use super::run::{Fault, Outcome};
use crate::ctx::{Ctx, Registry, RunState, Stopped, panic_message};
use crate::registry::RunFuture;
use crate::workflow::{Failure, decode, encode};

/// Polls a replay gives its code before giving up on code that keeps
/// waking itself without calling anything.
const MAX_POLLS: usize = 1_000_000;

/// A delivery taken from a run's machine: what to hand its code.
pub(crate) struct Taken {
    /// The answer to one of the code's pending operations.
    pub(crate) outcome: Option<(Seq, Outcome)>,
    /// A cancellation, with its reason: reaches the code as an error at
    /// its pending operations, which it may catch to clean up.
    pub(crate) cancel: Option<String>,
    /// An update to start a handler for: its ordinal, name and payload.
    pub(crate) update: Option<(u64, String, Vec<u8>)>,
}

/// Takes the run's next delivery from its machine (`None`: none waits);
/// `Err` when the code departed from its journal.
pub(crate) fn take_delivery(state: &mut RunState) -> Result<Option<Taken>, Box<DeterminismError>> {
    let Some(d) = state.machine_mut().poll_delivery()? else {
        return Ok(None);
    };
    let mut taken = Taken {
        outcome: None,
        cancel: None,
        update: None,
    };
    match d {
        Delivery::Step {
            seq,
            status,
            payload,
            ..
        } => {
            taken.outcome = Some((
                seq,
                Outcome::Step {
                    status,
                    payload: payload.to_vec(),
                },
            ))
        }
        Delivery::Fired { seq } => taken.outcome = Some((seq, Outcome::Fired)),
        Delivery::Waited {
            seq,
            outcome: WaitOutcome::Signal(_),
            payload,
        } => taken.outcome = Some((seq, Outcome::Signal(payload.to_vec()))),
        Delivery::Waited { seq, .. } => taken.outcome = Some((seq, Outcome::TimedOut)),
        Delivery::Child {
            seq,
            status,
            payload,
        } => {
            taken.outcome = Some((
                seq,
                Outcome::Child {
                    status,
                    payload: payload.to_vec(),
                },
            ))
        }
        Delivery::Cancel { reason } => {
            taken.cancel = Some(String::from_utf8_lossy(reason).into_owned());
        }
        Delivery::Update {
            ordinal,
            name,
            payload,
            ..
        } => taken.update = Some((ordinal, name.to_string(), payload.to_vec())),
    }
    Ok(Some(taken))
}

/// Polls workflow code (a run's main future or an update handler) once:
/// its result if it finished; a panic is a failure with its message; the
/// unwinding of an operation that found the run cannot go on is not.
pub(crate) fn poll_code(
    future: &mut RunFuture,
    cx: &mut Context<'_>,
) -> Option<Result<Vec<u8>, Failure>> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
        Ok(Poll::Pending) => None,
        Ok(Poll::Ready(result)) => Some(result),
        Err(panic) if panic.is::<Stopped>() => None,
        Err(panic) => Some(Err(Failure::with_kind(
            "panic",
            format!("workflow code panicked: {}", panic_message(&*panic)),
        ))),
    }
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

/// What replaying a journal left: how the code ended (or that it still
/// runs at the journal's end) and its run's state, whose registered query
/// handlers answer as of the journal's end.
// Only the test kit reads how the code ended; queries read `state`.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub(crate) struct Replay {
    /// How the code ended the run; `None` while still running.
    pub(crate) ended: Option<Status>,
    /// Its result for an `Ok` end, its failure for another.
    pub(crate) payload: Vec<u8>,
    /// Whether the journal held the run's end as its code's.
    pub(crate) end_recorded: bool,
    /// Operations called past the journal's end, in call order.
    pub(crate) next: Vec<String>,
    /// The run's state after the replay (its query handlers).
    pub(crate) state: Rc<RefCell<RunState>>,
}

/// Why a replay failed.
pub(crate) enum ReplayFault {
    /// The records are not a run's journal.
    Malformed(String),
    /// The journal's workflow type has no code registered at the version
    /// its `Start` recorded: why, as the engine says it.
    NoCode {
        wtype: String,
        version: u32,
        error: Box<crate::Error>,
    },
    /// The code departs from the journal.
    Diverged(Departure),
}

/// How replayed code departs from its journal: the text, and the
/// determinism error when the run's machine caught it (what the journal
/// holds at which operation, and what the code did instead).
pub(crate) struct Departure {
    /// The determinism error's text (or why the machine refused).
    pub(crate) message: String,
    /// The determinism error itself, when it is one.
    pub(crate) error: Option<Box<DeterminismError>>,
}

impl Departure {
    fn text(message: String) -> Self {
        Self {
            message,
            error: None,
        }
    }

    fn fault(f: Fault) -> Self {
        match f {
            Fault::Determinism(e) => e.into(),
            Fault::Refused(why) => Self::text(why),
        }
    }

    fn op(e: OpError) -> Self {
        match e {
            OpError::Determinism(e) => e.into(),
            other => Self::text(other.to_string()),
        }
    }
}

impl From<Box<DeterminismError>> for Departure {
    fn from(e: Box<DeterminismError>) -> Self {
        Self {
            message: e.to_string(),
            error: Some(e),
        }
    }
}

/// Replays a run's journal (`records`, oldest first, its `Start` first)
/// with the code `registry` holds for its type: every operation is
/// answered from the journal by the run's machine, which checks the code
/// makes the same calls in the same order. No step runs and nothing is
/// recorded: what the code asks past the journal's end is only reported.
/// The test kit's replay and queries to a finished run use it.
pub(crate) fn replay(registry: &Registry, records: &[RecordBuf]) -> Result<Replay, ReplayFault> {
    let mut bytes = Vec::new();
    for r in records {
        encode_canonical(r, &mut bytes);
    }
    replay_encoded(registry, &bytes)
}

/// [`replay`] of a journal in its canonical bytes (as a shard and a frame
/// hold it): the replay check's form, which decodes nothing twice.
pub(crate) fn replay_encoded(registry: &Registry, bytes: &[u8]) -> Result<Replay, ReplayFault> {
    let malformed = |e: &dyn std::fmt::Display| ReplayFault::Malformed(e.to_string());
    let mut records: Lsn = 0;
    let mut end_recorded = false;
    let mut start = None;
    let mut code_attrs = 0u32;
    for item in iter_canonical(bytes) {
        let (rec, _) = item.map_err(|e| malformed(&e))?;
        records += 1;
        match rec {
            Record::Start {
                run,
                id,
                wtype,
                version,
                input,
                started_ms,
                ..
            } if start.is_none() && records == 1 => {
                start = Some((run, id, wtype, version, input, started_ms));
            }
            Record::Done {
                by: None,
                status: Status::Ok | Status::Failed | Status::Cancelled | Status::ContinuedAsNew,
                ..
            } => end_recorded = true,
            Record::Attributes { payload, .. } if crate::attrs::by_code(payload) => {
                code_attrs += 1;
            }
            _ => {}
        }
    }
    let Some((run, id, wtype, version, input, started_ms)) = start else {
        return Err(ReplayFault::Malformed(
            "its first record is not the run's Start".into(),
        ));
    };
    let handler = registry
        .code(wtype, version)
        .map_err(|e| ReplayFault::NoCode {
            wtype: wtype.to_string(),
            version,
            error: Box::new(e),
        })?;
    let mut lsn = records;
    let machine = RunMachine::build(run, bytes, lsn).map_err(|e| malformed(&e))?;
    let state = Rc::new(RefCell::new(RunState::new(
        machine,
        run,
        fusee_core::record::Name::from(id),
        registry.clone(),
        // No limit: replay checks the code against a journal a real engine
        // (with its own limit) already accepted.
        usize::MAX,
    )));
    // The code's clock reads the run's start; recorded values replay.
    state.borrow_mut().set_now(started_ms);
    state.borrow_mut().set_code_attributes(code_attrs);
    let diverged = |d: Departure| ReplayFault::Diverged(d);
    let text = |e: &dyn std::fmt::Display| ReplayFault::Diverged(Departure::text(e.to_string()));
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
        let fault = state.borrow_mut().take_fault();
        let asked = state.borrow_mut().take_appends();
        for rec in &asked {
            if let Some(op) = called(rec) {
                next.push(op);
            }
            lsn += 1;
            state
                .borrow_mut()
                .machine_mut()
                .handle_record(lsn, rec)
                .map_err(|e| text(&e))?;
        }
        if let Some(fault) = fault {
            return Err(diverged(Departure::fault(fault)));
        }
        for (ordinal, result) in returned {
            let answer = state.borrow_mut().machine_mut().update_done(ordinal);
            let (status, payload) = ending(result);
            match answer.map_err(|e| diverged(Departure::op(e)))? {
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
                        .machine_mut()
                        .handle_record(lsn, &rec)
                        .map_err(|e| text(&e))?;
                }
            }
        }
        let end = match finished {
            Some(result) => {
                let (mut status, payload) = ending(result);
                if status == Status::Failed && state.borrow().cancels() > 0 && is_cancel(&payload) {
                    status = Status::Cancelled;
                }
                Some((status, payload))
            }
            None => state
                .borrow_mut()
                .take_continue()
                .map(|input| (Status::ContinuedAsNew, input)),
        };
        if let Some((status, payload)) = end {
            let answer = state.borrow_mut().machine_mut().finish(status);
            answer.map_err(|e| diverged(Departure::op(e)))?;
            let next = ordered(next, &state);
            return Ok(Replay {
                ended: Some(status),
                payload,
                end_recorded,
                next,
                state,
            });
        }
        let delivered = deliver_next(&state, &mut handlers).map_err(diverged)?;
        if !delivered && !flag.0.load(Ordering::Acquire) {
            // Quiescent with nothing more to deliver: the journal's end.
            if end_recorded {
                // The journal says the code ended here, and it waits.
                return Err(diverged(Departure::text(format!(
                    "run {run}: the journal holds the run's end but the code waits{}",
                    match ordered(next, &state).first() {
                        Some(op) => format!(" at {op}"),
                        None => " without calling anything".into(),
                    }
                ))));
            }
            let next = ordered(next, &state);
            return Ok(Replay {
                ended: None,
                payload: Vec::new(),
                end_recorded,
                next,
                state,
            });
        }
    }
    Err(ReplayFault::Malformed(format!(
        "the code of run {run} was polled {MAX_POLLS} times without settling"
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

/// `next` and the live steps the code called (their `Began`, asked at the
/// call, is not in `next`), by operation.
fn ordered(mut next: Vec<(Seq, String)>, state: &Rc<RefCell<RunState>>) -> Vec<String> {
    for (seq, name) in state.borrow().step_names() {
        next.push((seq, format!("step {:?}", name.as_ref())));
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
/// loop takes it: [`take_delivery`]). True if it did.
fn deliver_next(
    state: &Rc<RefCell<RunState>>,
    handlers: &mut Vec<(u64, RunFuture)>,
) -> Result<bool, Departure> {
    let update = {
        let mut guard = state.borrow_mut();
        let s = &mut *guard;
        let Some(Taken {
            outcome,
            cancel,
            update,
        }) = take_delivery(s).map_err(Departure::from)?
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
        let started = state.borrow().update(&name).map(|h| (h.start)(&payload));
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
