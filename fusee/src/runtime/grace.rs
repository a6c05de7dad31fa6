//! Cancels with a grace period ([`crate::Engine::cancel_with_grace`]): a
//! cancel the code cannot swallow. The run is cancelled as by a plain
//! cancel (its code sees `cancelled` errors and may clean up), and if it
//! has not ended when the grace passes, the loop terminates it with the
//! cancel's reason.
//!
//! The grace is durable: it rides in the `Cancel` record itself (its
//! `grace` tail, [`CancelGrace`]: the deadline `until_ms`, which a
//! recovery arms, and the length `grace_ms`, which the cascade passes on),
//! so no crash keeps the cancel and loses its grace, and the run's table
//! entry keeps it ([`LoadedRun::cancel_grace`]), so a recovery arms it
//! again ([`ShardLoop::arm_recovered_grace`]) and a restart never lets a
//! run out of its grace. Journals of older builds hold a grace in an
//! `Attributes` record right after the `Cancel` (key [`GRACE_KEY`]:
//! `{"until_ms": u64, "reason": str, "grace_ms": u64}`, `grace_ms` absent
//! in the oldest): still read, never written.
//!
//! A run under a grace never parks (its deadline is the loop's, not the
//! core's timers), and the grace is forgotten when the run ends.
//!
//! Children: when a run that got a grace ends, the children its
//! parent-close policy asks to cancel (`ParentClose::Cancel`) get the same
//! grace, counted from their own cancel ([`cascaded_grace`] puts it in the
//! close message): each level of a tree gets as long to clean up as its
//! parent had. A run cancelled without a grace passes none on.
//!
//! [`LoadedRun::cancel_grace`]: fusee_core::shard::LoadedRun::cancel_grace

use std::collections::BTreeSet;

use fusee_core::record::{CancelGrace, RecordBuf, RunId};
use fusee_core::shard::ShardCore;
use rustc_hash::FxHashMap;

use super::ShardLoop;

/// The `Attributes` key of a cancel's grace in journals of older builds.
pub(crate) const GRACE_KEY: &str = "fusee.cancel_grace";

/// The runs under a cancel's grace: when each is terminated, and why.
#[derive(Default)]
pub(crate) struct Graces {
    /// (until, run), earliest first.
    due: BTreeSet<(u64, RunId)>,
    /// Run → (until, the cancel's reason).
    runs: FxHashMap<RunId, (u64, String)>,
    /// The time of the latest pass that looked: a grace come and not acted
    /// on yet (a checkpoint held the pass) asks for a wake-up just after
    /// it, not a spin.
    seen_ms: u64,
}

impl Graces {
    /// When the loop must look again: the earliest grace's end.
    pub(crate) fn next_wake(&self) -> Option<u64> {
        self.due
            .first()
            .map(|(at, _)| (*at).max(self.seen_ms.saturating_add(1)))
    }

    /// Whether `run` is under a grace (it must not park).
    pub(crate) fn holds(&self, run: RunId) -> bool {
        !self.runs.is_empty() && self.runs.contains_key(&run)
    }

    /// Run `run` is terminated at `until_ms` unless it ends first; an
    /// earlier grace already armed for it stands.
    fn arm(&mut self, run: RunId, until_ms: u64, reason: String) {
        if let Some((at, _)) = self.runs.get(&run)
            && *at <= until_ms
        {
            return;
        }
        if let Some((at, _)) = self.runs.insert(run, (until_ms, reason)) {
            self.due.remove(&(at, run));
        }
        self.due.insert((until_ms, run));
    }

    /// Run `run` ended: its grace, if any, is over.
    pub(crate) fn ended(&mut self, run: RunId) {
        if self.runs.is_empty() {
            return;
        }
        if let Some((at, _)) = self.runs.remove(&run) {
            self.due.remove(&(at, run));
        }
    }
}

/// The grace (its length, ms) that run `run`'s children cancelled by its
/// close get: the grace its own cancel had, if any (the latest `Cancel`
/// with one; else, in an older build's journal, the latest grace record,
/// none from the oldest builds, which did not record its length).
pub(super) fn cascaded_grace(core: &ShardCore, run: RunId) -> Option<u64> {
    let l = core.get(run)?;
    if let Some((g, _)) = l.cancel_grace() {
        return Some(g.grace_ms);
    }
    l.attrs().iter().rev().find_map(|a| {
        let value: serde_json::Value = serde_json::from_slice(a).ok()?;
        value.get(GRACE_KEY)?.get("grace_ms")?.as_u64()
    })
}

/// The grace an older build's `Attributes` payload sets, if it sets one.
fn grace_in(payload: &[u8]) -> Option<(u64, String)> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let grace = value.get(GRACE_KEY)?;
    let until = grace.get("until_ms")?.as_u64()?;
    let reason = grace.get("reason")?.as_str()?.to_string();
    Some((until, reason))
}

/// `rec` as a reset copies it into the new run, or `None` if it leaves it
/// out: a cancel's grace belongs to the old run (its deadline), so a
/// `Cancel` is copied without it (the code replays the cancel) and an
/// older build's grace record not at all.
pub(super) fn without_grace(rec: &RecordBuf) -> Option<RecordBuf> {
    match rec {
        RecordBuf::Attributes { payload, .. } if grace_in(payload).is_some() => None,
        RecordBuf::Cancel {
            run,
            reason,
            by,
            grace: Some(_),
        } => Some(RecordBuf::Cancel {
            run: *run,
            reason: reason.clone(),
            by: by.clone(),
            grace: None,
        }),
        other => Some(other.clone()),
    }
}

impl ShardLoop {
    /// Run `run`'s grace of `grace_ms` from `now_ms` for `reason`, for
    /// the `Cancel` that records it; armed now.
    pub(super) fn grace_for(
        &mut self,
        run: RunId,
        now_ms: u64,
        grace_ms: u64,
        reason: &str,
    ) -> CancelGrace {
        let until_ms = now_ms.saturating_add(grace_ms);
        self.graces.arm(run, until_ms, reason.to_string());
        CancelGrace { until_ms, grace_ms }
    }

    /// A recovered, unfinished run `run`: its grace, if its records hold
    /// one (in a `Cancel`, or in an older build's grace record), is armed
    /// again; of both, the earlier deadline stands.
    pub(super) fn arm_recovered_grace(&mut self, run: RunId) {
        let Some(l) = self.core.get(run) else {
            return;
        };
        let new = l
            .cancel_grace()
            .map(|(g, reason)| (g.until_ms, String::from_utf8_lossy(reason).into_owned()));
        let old = l.attrs().iter().rev().find_map(|a| grace_in(a));
        for (until, reason) in new.into_iter().chain(old) {
            self.graces.arm(run, until, reason);
        }
    }

    /// Each pass: terminates every run whose grace passed at `now_ms` and
    /// that has not ended, with its cancel's reason; nothing while a
    /// checkpoint holds new records back (`holding`).
    pub(super) fn end_graces(&mut self, now_ms: u64, holding: bool) {
        self.graces.seen_ms = now_ms;
        if holding || self.life.has_failed() {
            return;
        }
        while let Some(&(at, run)) = self.graces.due.first() {
            if at > now_ms {
                break;
            }
            self.graces.due.pop_first();
            let Some((_, reason)) = self.graces.runs.remove(&run) else {
                continue;
            };
            if self.core.get(run).is_none_or(|l| l.is_done()) {
                continue;
            }
            tracing::debug!(run, %reason, "a cancelled run outlived its grace: terminated");
            let rec = self.terminate_record(run, reason, "cancel grace", now_ms);
            self.append(&rec);
        }
    }
}
