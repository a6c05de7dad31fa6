//! The code host: what polls workflow code and hands it its deliveries,
//! one at a time, shared by the shard loop (`runs.rs`) and the replay of
//! an exported journal (`testing::replay`), so the two cannot drift.

use std::panic::AssertUnwindSafe;
use std::task::{Context, Poll};

use fusee_core::record::{Seq, WaitOutcome};
use fusee_core::run::{Delivery, DeterminismError};

use crate::ctx::{Outcome, RunState, Stopped, panic_message};
use crate::registry::RunFuture;
use crate::workflow::Failure;

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
    let Some(d) = state.machine.poll_delivery()? else {
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
