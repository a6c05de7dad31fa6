//! The code host's part of a shard loop: the runs whose workflow code runs
//! on this shard, and the work the loop owes them.
//!
//! - `runs`: each loaded run whose code was started ([`LiveRun`]: its
//!   state, future, waker, update handlers, why it stopped).
//! - `ready`: runs to poll, each queued once however often woken before
//!   its poll, pushed by their wakers (from any thread: a step's tokio
//!   task may wake nothing, but a `Ctx` future's waker may be cloned by
//!   code) and by the loop; a run woken only for records appended for it
//!   gets its next delivery before any poll.
//! - `no_code`: loaded runs whose type or version has no code registered;
//!   their code starts when it is ([`ShardLoop::start_waiting_code`]).
//! - `stepping`: runs with a step attempt to start or to begin
//!   ([`ShardLoop::start_steps`]).
//! - `jobs`: step attempts started this iteration, for the driver.
//! - `deferred`: recovered runs whose code has not started yet. A shard
//!   opens without starting any run's code; each starts when something
//!   reaches it (a record appended for it, a query, an update, a
//!   describe) or, a bounded number per pass of the loop, when nothing
//!   else is ready ([`ShardLoop::drive`]): timers due and new work go
//!   first, and the open does not wait for every run's replay. Runs that
//!   wait on nothing the shard announces (cut mid-way by the crash, say
//!   right after a timer fired, or with a step in flight) start first.
//!   Runs that sleep or wait start when their timer or signal comes, and
//!   before that only when the shard is quiet (no timer due soon) or the
//!   open was a while ago: their code has nothing to do until then, unless
//!   the crash cut a command it asked for beside its wait.
//!
//! - `dormant`: loaded runs whose code was dropped while it waited, idle
//!   past `doze_after` with nothing in flight ([`ShardLoop::doze`]). They
//!   count among the deferred runs, so whatever reaches one starts its
//!   code as for a recovered run, but the loop never starts theirs on its
//!   own: their code was seen waiting, with every record durable.
//!
//! # Invariants
//!
//! - A run is in at most one of `runs`, `no_code` and `deferred`: code
//!   started, code missing, or code not started yet ([`Live::insert`],
//!   [`Live::wait_for_code`] and [`Live::defer`] keep that).
//! - A run forgotten ([`Live::forget`]: finished, held, parked) leaves
//!   every set at once, so no step starts for a run whose code is gone.
//! - A run is on `ready` at most once; popped or taken off, a wake puts
//!   it back, so no wake between its pop and its poll is lost.
//! - A run's code is polled after each delivery before it gets the next
//!   ([`LiveRun::fed`]), as replay does: the loop skips only a poll of
//!   code that was woken by nothing but records appended for its run.
//! - Jobs leave only through [`Live::take_jobs`], once per iteration.
//!
//! What it does not know: records, the core, storage. The loop decides;
//! this part only keeps the sets consistent.
//!
//! [`ShardLoop::doze`]: super::ShardLoop::doze
//! [`ShardLoop::start_waiting_code`]: super::ShardLoop::start_waiting_code
//! [`ShardLoop::start_steps`]: super::ShardLoop::start_steps
//! [`ShardLoop::drive`]: super::ShardLoop::drive

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::Waker;

use fusee_core::record::RunId;
use rustc_hash::{FxHashMap, FxHashSet};

use super::StepJob;
use super::run::Fault;
use crate::ctx::RunState;
use crate::registry::RunFuture;

/// A run whose code is running on this shard.
pub(super) struct LiveRun {
    pub(super) state: Rc<RefCell<RunState>>,
    pub(super) future: Option<RunFuture>,
    pub(super) waker: Waker,
    /// Update handlers running, by the update's ordinal.
    pub(super) handlers: Vec<(u64, RunFuture)>,
    /// Why its code stopped without finishing (a determinism error).
    pub(super) stopped: Option<Fault>,
    /// When its code last ran or a record was appended for it.
    pub(super) active_ms: u64,
    /// Whether a delivery was handed to its code since its last poll: a
    /// run woken only by records appended for it is polled only then
    /// ([`Live::pop_ready`]).
    pub(super) fed: bool,
    /// Its place in its trace, derived at its first step start and kept:
    /// three hashes of its `Start`, which a loaded run never changes, so
    /// no step pays them again (they were a fanout's largest added cost).
    pub(super) trace: Option<crate::trace::RunTrace>,
    /// A recorded delivery held back by [`super::sabotage::Sabotage::ReorderReplay`],
    /// and whether the one after it was handed out since.
    #[cfg(feature = "testing")]
    pub(super) held: Option<(fusee_core::record::Seq, super::run::Outcome, bool)>,
}

impl LiveRun {
    /// A run's entry, woken through `waker`, with no future yet: the
    /// caller makes its code's future from the entry's `state` (or stops
    /// it at once, for code that cannot run).
    pub(super) fn new(state: RunState, waker: Waker) -> Self {
        Self {
            state: Rc::new(RefCell::new(state)),
            future: None,
            waker,
            handlers: Vec::new(),
            stopped: None,
            active_ms: 0,
            fed: false,
            trace: None,
            #[cfg(feature = "testing")]
            held: None,
        }
    }
}

/// Wakes a run: puts it on its shard's ready queue.
struct RunWaker {
    run: RunId,
    ready: Arc<Mutex<Ready>>,
}

impl std::task::Wake for RunWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        lock(&self.ready).push(self.run, false);
    }
}

/// The runs to poll, in the order woken, each at most once: a run woken
/// again before it is polled is polled once for both. Once popped, a run
/// woken again is queued again, so a wake during its poll is not lost.
///
/// Each queued run carries whether only records appended for it woke it
/// since its pop. Then, unless a delivery was handed to it since its last
/// poll ([`LiveRun::fed`]), its code has nothing new to see, and the loop
/// hands it its next delivery without polling it first. A step's result
/// woke its run by the record and by the delivery: a fanout of 4,000
/// steps polled its code 12,800 times, 8,400 once each run was queued
/// once, 4,400 now.
#[derive(Default)]
struct Ready {
    queue: VecDeque<RunId>,
    /// The queued runs, each with whether only records woke it.
    queued: FxHashMap<RunId, bool>,
}

impl Ready {
    fn push(&mut self, run: RunId, records_only: bool) {
        match self.queued.entry(run) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                *e.get_mut() &= records_only;
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(records_only);
                self.queue.push_back(run);
            }
        }
    }

    fn pop(&mut self) -> Option<(RunId, bool)> {
        let run = self.queue.pop_front()?;
        let records_only = self.queued.remove(&run).unwrap_or(false);
        Some((run, records_only))
    }

    /// Takes `run` off the queue: true if it was on it.
    fn take(&mut self, run: RunId) -> bool {
        if self.queued.remove(&run).is_none() {
            return false;
        }
        if let Some(at) = self.queue.iter().position(|r| *r == run) {
            self.queue.remove(at);
        }
        true
    }
}

/// The ready queue, whatever a panicking waker left in it (the queue and
/// its set change together, under the lock, in code that does not panic).
fn lock(ready: &Mutex<Ready>) -> std::sync::MutexGuard<'_, Ready> {
    ready.lock().unwrap_or_else(|e| e.into_inner())
}

/// The runs whose code runs on a shard. See the [module docs](self).
#[derive(Default)]
pub(super) struct Live {
    runs: FxHashMap<RunId, LiveRun>,
    ready: Arc<Mutex<Ready>>,
    no_code: FxHashSet<RunId>,
    stepping: FxHashSet<RunId>,
    jobs: Vec<StepJob>,
    /// Recovered runs whose code waits to start, in recovery order, those
    /// waiting on nothing first; a run taken out of `deferred_set` early
    /// leaves a stale entry here, skipped when reached.
    deferred_first: VecDeque<RunId>,
    deferred: VecDeque<RunId>,
    /// After this time, `deferred` runs start when nothing else is ready,
    /// quiet or not.
    waiting_start_by_ms: u64,
    /// Runs whose code dozed, with when it was last active (they are in
    /// `deferred_set` too, in no queue).
    dormant: FxHashMap<RunId, u64>,
    deferred_set: FxHashSet<RunId>,
}

impl Live {
    /// The run's entry, if its code was started.
    #[inline]
    pub(super) fn get(&self, run: &RunId) -> Option<&LiveRun> {
        self.runs.get(run)
    }

    /// The run's entry, if its code was started.
    #[inline]
    pub(super) fn get_mut(&mut self, run: &RunId) -> Option<&mut LiveRun> {
        self.runs.get_mut(run)
    }

    /// Whether the run's code was started.
    #[inline]
    pub(super) fn contains_key(&self, run: &RunId) -> bool {
        self.runs.contains_key(run)
    }

    /// Every live run, in no order (the simulator's look at stopped code).
    #[cfg(feature = "testing")]
    pub(super) fn iter(&self) -> impl Iterator<Item = (&RunId, &LiveRun)> {
        self.runs.iter()
    }

    /// Records that the run's code started (it no longer waits for code).
    pub(super) fn insert(&mut self, run: RunId, live: LiveRun) {
        self.no_code.remove(&run);
        self.deferred_set.remove(&run);
        self.dormant.remove(&run);
        self.runs.insert(run, live);
    }

    /// Drops the run's code, which waits with nothing in flight; the run
    /// stays loaded and dormant until something reaches it (see the
    /// [module docs](self)). False if its code was not running.
    pub(super) fn doze(&mut self, run: RunId) -> bool {
        let Some(live) = self.runs.remove(&run) else {
            return false;
        };
        self.dormant.insert(run, live.active_ms);
        self.deferred_set.insert(run);
        true
    }

    /// When a dormant run's code was last active, if the run is dormant.
    pub(super) fn dormant_since(&self, run: RunId) -> Option<u64> {
        self.dormant.get(&run).copied()
    }

    /// How many runs are dormant.
    pub(super) fn dormant_len(&self) -> usize {
        self.dormant.len()
    }

    /// A waker that puts `run` on the ready queue.
    pub(super) fn waker(&self, run: RunId) -> Waker {
        Waker::from(Arc::new(RunWaker {
            run,
            ready: Arc::clone(&self.ready),
        }))
    }

    /// Drops the run's code (the run stays loaded in the core): it was
    /// expired, or the shard stops.
    pub(super) fn remove(&mut self, run: &RunId) {
        self.runs.remove(run);
    }

    /// Forgets the run everywhere: it finished, was held or parked.
    pub(super) fn forget(&mut self, run: RunId) {
        self.runs.remove(&run);
        self.stepping.remove(&run);
        self.no_code.remove(&run);
        self.deferred_set.remove(&run);
        self.dormant.remove(&run);
    }

    /// Drops every run's code: the shard stopped (closed or crashed).
    pub(super) fn clear(&mut self) {
        self.runs.clear();
        self.dormant.clear();
        self.deferred_first.clear();
        self.deferred.clear();
        self.deferred_set.clear();
    }

    /// Puts `run` on the ready queue.
    pub(super) fn wake(&self, run: RunId) {
        lock(&self.ready).push(run, false);
    }

    /// Puts `run` on the ready queue for records appended for it, which
    /// its code sees only through a delivery (see [`Ready`]).
    pub(super) fn wake_for_records(&self, run: RunId) {
        lock(&self.ready).push(run, true);
    }

    /// Puts back a run popped but not polled, as it was woken.
    pub(super) fn requeue(&self, run: RunId, records_only: bool) {
        lock(&self.ready).push(run, records_only);
    }

    /// The next run to poll, if any, with whether only records appended
    /// for it woke it since its last pop.
    pub(super) fn pop_ready(&self) -> Option<(RunId, bool)> {
        lock(&self.ready).pop()
    }

    /// Whether a run waits to be polled.
    pub(super) fn has_ready(&self) -> bool {
        !lock(&self.ready).queue.is_empty()
    }

    /// Takes `run` off the ready queue: true if it was on it.
    pub(super) fn take_ready(&self, run: RunId) -> bool {
        lock(&self.ready).take(run)
    }

    /// The run's code cannot start: its type or version has no code here.
    pub(super) fn wait_for_code(&mut self, run: RunId) {
        self.deferred_set.remove(&run);
        self.no_code.insert(run);
    }

    /// A recovered run's code starts later (see the [module docs](self)),
    /// among the first if `first`.
    pub(super) fn defer(&mut self, run: RunId, first: bool) {
        if !self.runs.contains_key(&run) && self.deferred_set.insert(run) {
            self.no_code.remove(&run);
            match first {
                true => self.deferred_first.push_back(run),
                false => self.deferred.push_back(run),
            }
        }
    }

    /// Takes `run` out of the deferred runs: true if its code was waiting
    /// to start (the caller starts it now).
    pub(super) fn undefer(&mut self, run: RunId) -> bool {
        // Every append for a run without code asks: most shards have no
        // deferred run left, and then no hash is worked out.
        if self.deferred_set.is_empty() || !self.deferred_set.remove(&run) {
            return false;
        }
        self.dormant.remove(&run);
        if self.deferred_set.len() == self.dormant.len() {
            // Only stale entries are left in the queues: give their room back.
            self.deferred_first = VecDeque::new();
            self.deferred = VecDeque::new();
        }
        true
    }

    /// The next deferred run to start, taken out of them: one waiting on
    /// nothing, else (if `waiting_too`) one that waits on a timer or a
    /// signal.
    pub(super) fn next_deferred(&mut self, waiting_too: bool) -> Option<RunId> {
        while let Some(run) = self.deferred_first.pop_front() {
            if self.deferred_set.remove(&run) {
                return Some(run);
            }
        }
        while waiting_too && let Some(run) = self.deferred.pop_front() {
            if self.deferred_set.remove(&run) {
                return Some(run);
            }
        }
        None
    }

    /// Whether [`next_deferred`](Self::next_deferred) may find a run: some
    /// recovered run's code has not started yet, and one waiting on
    /// nothing or (if `waiting_too`) any may start.
    pub(super) fn has_deferred_to_start(&self, waiting_too: bool) -> bool {
        // The queues may hold stale entries (`next_deferred` skips them),
        // never a dormant run, which only something reaching it starts.
        self.deferred_set.len() > self.dormant.len()
            && (!self.deferred_first.is_empty() || (waiting_too && !self.deferred.is_empty()))
    }

    /// Deferred runs that wait on a timer or a signal start by `at_ms` at
    /// the latest (see the [module docs](self)).
    pub(super) fn start_waiting_by(&mut self, at_ms: u64) {
        self.waiting_start_by_ms = at_ms;
    }

    /// See [`start_waiting_by`](Self::start_waiting_by).
    pub(super) fn waiting_start_by_ms(&self) -> u64 {
        self.waiting_start_by_ms
    }

    /// Whether the run waits for its code to be registered.
    pub(super) fn waits_for_code(&self, run: RunId) -> bool {
        self.no_code.contains(&run)
    }

    /// The runs waiting for their code.
    pub(super) fn waiting_for_code(&self) -> Vec<RunId> {
        self.no_code.iter().copied().collect()
    }

    /// The run has a step attempt to begin or start.
    pub(super) fn step_due(&mut self, run: RunId) {
        self.stepping.insert(run);
    }

    /// The run has no step attempt left to begin or start.
    pub(super) fn steps_started(&mut self, run: RunId) {
        self.stepping.remove(&run);
    }

    /// Whether the run has a step attempt to begin or start.
    pub(super) fn is_stepping(&self, run: RunId) -> bool {
        self.stepping.contains(&run)
    }

    /// The runs with a step attempt to begin or start (empty: none).
    pub(super) fn stepping(&self) -> Vec<RunId> {
        self.stepping.iter().copied().collect()
    }

    /// Whether any run has a step attempt to begin or start.
    pub(super) fn has_steps_due(&self) -> bool {
        !self.stepping.is_empty()
    }

    /// Step attempts started, for the driver to run.
    pub(super) fn push_jobs(&mut self, jobs: Vec<StepJob>) {
        if self.jobs.is_empty() {
            self.jobs = jobs;
        } else {
            self.jobs.extend(jobs);
        }
    }

    /// The step attempts started since the last call.
    pub(super) fn take_jobs(&mut self) -> Vec<StepJob> {
        std::mem::take(&mut self.jobs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Woken twice before its poll, a run is polled once; woken after it
    /// was popped, it is queued again; taken off, it is no longer queued.
    #[test]
    fn a_run_is_on_the_ready_queue_once_until_popped() {
        let live = Live::default();
        let waker = live.waker(7);
        live.wake(7);
        waker.wake_by_ref();
        live.wake(9);
        live.wake(7);
        assert_eq!(live.pop_ready(), Some((7, false)));
        // Woken while (or after) it is polled: queued again, behind 9.
        waker.wake_by_ref();
        assert_eq!(live.pop_ready(), Some((9, false)));
        assert_eq!(live.pop_ready(), Some((7, false)));
        assert_eq!(live.pop_ready(), None);
        live.wake(3);
        live.wake(4);
        assert!(live.take_ready(3));
        assert!(!live.take_ready(3));
        live.wake(3);
        assert_eq!(live.pop_ready(), Some((4, false)));
        assert_eq!(live.pop_ready(), Some((3, false)));
        assert!(!live.has_ready());
    }

    /// A run woken only for records is popped saying so; any other wake
    /// before its pop (its code's waker, the loop's) makes it a poll.
    #[test]
    fn a_run_woken_only_for_records_is_popped_saying_so() {
        let live = Live::default();
        let waker = live.waker(7);
        live.wake_for_records(7);
        live.wake_for_records(7);
        live.wake_for_records(8);
        waker.wake_by_ref();
        live.wake_for_records(9);
        live.wake(9);
        live.wake_for_records(9);
        assert_eq!(live.pop_ready(), Some((7, false)));
        assert_eq!(live.pop_ready(), Some((8, true)));
        assert_eq!(live.pop_ready(), Some((9, false)));
        live.requeue(8, true);
        assert_eq!(live.pop_ready(), Some((8, true)));
        assert_eq!(live.pop_ready(), None);
    }
}
