//! Steps that note their effects, and the check every crash-everywhere
//! test makes of them: the same end as the uncrashed run, and no step run
//! again once its result was durable.

#![allow(dead_code)] // each test binary uses a part

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use fusee::testing::CrashPoint;
use fusee::{Ctx, Failure};

/// Every step's effect: (run number, step name). Run numbers come from the
/// log, so they are the same in the uncrashed run and every recovery.
pub(crate) type Effects = Arc<Mutex<Vec<(u64, String)>>>;

/// A step `name` that notes its effect in `effects` and returns `value`.
pub(crate) async fn noted(
    ctx: &Ctx,
    effects: &Effects,
    name: &str,
    value: u64,
) -> Result<u64, Failure> {
    let effects = Arc::clone(effects);
    let who = ctx.run_id();
    let step = name.to_string();
    Ok(ctx
        .step(name, move |_| {
            let effects = Arc::clone(&effects);
            let step = step.clone();
            async move {
                effects.lock().unwrap().push((who, step));
                Ok(value)
            }
        })
        .await?)
}

/// The effects noted since the last call (those of one crash point).
pub(crate) fn take(effects: &Effects) -> Vec<(u64, String)> {
    std::mem::take(&mut *effects.lock().unwrap())
}

/// Asserts that crash point `point` ended as the uncrashed run did and
/// that none of the steps in `ran` (run after the crash) had a durable
/// result.
pub(crate) fn assert_same_end<T: PartialEq + Debug>(
    point: &CrashPoint<'_, T>,
    ran: &[(u64, String)],
) {
    let Some(n) = point.crashed_after else {
        return;
    };
    assert_eq!(
        point.outcome, point.uncrashed,
        "crash after {n} of {} records",
        point.records
    );
    let done = point.durable_steps();
    for effect in ran {
        assert!(
            !done.contains(effect),
            "crash after {n} records: step {effect:?} ran again though its result was durable"
        );
    }
}
