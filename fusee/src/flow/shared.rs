//! What schedules, queues and step limits share (see the [folder's
//! docs](super)): the engine a run belongs to ([`EngineRef`]), the
//! client side of their updates ([`MOVING`]), a sliding-window rate, and
//! the small futures their entity workflows wait with. It imports none of
//! them: they import it.

use std::cell::{Cell, RefCell};
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{LazyLock, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::ctx::Ctx;
use crate::engine::{Engine, WeakEngine};
use crate::error::{Error, Result};
use crate::workflow::{Update, Workflow};

/// A validator's refusal while the entity moves to its next run: the
/// caller sends the update again.
pub(crate) const MOVING: &str = "fusee: moving to a new run; send again";

/// How often a client sends an update refused with [`MOVING`] again
/// before giving up (each retry reaches the next run, so one is the norm).
const MOVING_RETRIES: u32 = 64;

/// The engine a run belongs to, as its steps hold it: read from the run's
/// context (its registry's host, set when the engine opens),
/// weak so a step in flight does not keep a dropped engine open.
#[derive(Clone)]
pub(crate) struct EngineRef(Option<WeakEngine>);

impl EngineRef {
    /// The engine of the run `ctx` is the context of (none for code run
    /// without an engine: the test kit's offline replay).
    pub(crate) fn of(ctx: &Ctx) -> Self {
        Self(ctx.registry().host())
    }

    /// The engine, while it lives.
    pub(crate) fn get(&self) -> Option<Engine> {
        self.0.as_ref().and_then(WeakEngine::upgrade)
    }
}

impl Engine {
    /// `Err` ([`Error::UnknownWorkflow`]) unless flow control is
    /// registered in this engine and `wtype` (a workflow a schedule or
    /// queue will start) is registered.
    pub(crate) fn check_flow(&self, internal: &str, wtype: Option<&str>) -> Result<()> {
        for name in std::iter::once(internal).chain(wtype) {
            if !self.is_registered(name) {
                return Err(Error::UnknownWorkflow {
                    wtype: name.to_string(),
                    registered: self.registered_names(),
                });
            }
        }
        Ok(())
    }

    /// The names of the running entities (schedules, queues, limits) of
    /// internal workflow `wtype`: their workflow IDs after `prefix`,
    /// sorted, every page of the listing read.
    pub(crate) async fn list_entities(&self, wtype: &str, prefix: &str) -> Result<Vec<String>> {
        let mut filter = crate::ListFilter::new()
            .workflow(wtype)
            .status(crate::StatusFilter::Running)
            .limit(crate::ListFilter::LIMIT_MAX);
        let mut names = Vec::new();
        loop {
            let page = self.list(filter.clone()).await?;
            names.extend(
                page.runs
                    .iter()
                    .filter_map(|r| r.id.strip_prefix(prefix))
                    .map(str::to_string),
            );
            match page.next {
                Some(cursor) => filter = filter.after(cursor),
                None => break,
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Runs `update` with `arg` on entity `id`, starting it with `input`
    /// first when it has no run, or a new one when its last run finished
    /// (a deleted entity made again); sent again while the entity refuses
    /// it with [`MOVING`].
    pub(crate) async fn update_or_start_entity<I, O, UI, UO>(
        &self,
        workflow: Workflow<I, O>,
        id: &str,
        input: &I,
        update: Update<UI, UO>,
        arg: &UI,
    ) -> Result<UO>
    where
        I: Serialize,
        UI: Serialize,
        UO: DeserializeOwned,
    {
        let mut tries = 0;
        loop {
            match self
                .update_with_start(workflow, id, input, update, arg)
                .await
            {
                Err(Error::Finished { .. }) if tries < MOVING_RETRIES => {
                    tries += 1;
                    // Another caller may start it first: then the update
                    // goes to that run on the next pass.
                    match self
                        .start_with(workflow, id, input, crate::IdPolicy::ReuseAfterFinish)
                        .await
                    {
                        Ok(_) | Err(Error::AlreadyExists { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(Error::Rejected { reason, .. })
                    if reason == MOVING && tries < MOVING_RETRIES =>
                {
                    tries += 1;
                    tokio::task::yield_now().await;
                }
                other => return other,
            }
        }
    }

    /// Runs `update` with `arg` on `id`, sending it again while the entity
    /// refuses it with [`MOVING`].
    pub(crate) async fn update_entity<I: Serialize, O: DeserializeOwned>(
        &self,
        id: &str,
        update: Update<I, O>,
        arg: &I,
    ) -> Result<O> {
        let mut tries = 0;
        loop {
            match self.update(id, update, arg).await {
                Err(Error::Rejected { reason, .. })
                    if reason == MOVING && tries < MOVING_RETRIES =>
                {
                    tries += 1;
                    tokio::task::yield_now().await;
                }
                other => return other,
            }
        }
    }
}

/// Registers `update` on an entity's run as a change of its state: refused
/// when `refuse` says why; otherwise `change` is applied and the entity's
/// loop woken. The handler makes no operation of the run: the loop alone
/// does, so live and replay interleave them alike.
pub(crate) fn on_change<S: 'static, I: DeserializeOwned + 'static>(
    ctx: &Ctx,
    update: Update<I, ()>,
    shared: &Rc<RefCell<S>>,
    notify: &Notify,
    refuse: impl Fn(&I) -> std::result::Result<(), String> + 'static,
    change: impl Fn(&mut S, I) + 'static,
) {
    let (shared, notify) = (Rc::clone(shared), notify.clone());
    ctx.on_update_validated(update, refuse, move |input: I| {
        change(&mut shared.borrow_mut(), input);
        notify.notify();
        std::future::ready(Ok(()))
    });
}

/// Workflow type names made at run time, as the `&'static str` a
/// [`crate::Workflow`] holds: each distinct name is leaked once (there are
/// as many as workflow types schedules and queues start).
pub(crate) fn intern(name: &str) -> &'static str {
    static NAMES: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Mutex::default);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.get(name) {
        return n;
    }
    let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// Polls `fut` once with a waker that does nothing: an operation's first
/// poll issues its record at once (and a refusal comes back at once).
/// The caller polls it again with its real waker before it waits.
pub(crate) fn poll_once<F: Future + ?Sized>(fut: Pin<&mut F>) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    fut.poll(&mut cx)
}

/// The recorded time now, in ms since the Unix epoch.
pub(crate) fn now_ms(ctx: &Ctx) -> u64 {
    ms_of(ctx.now())
}

/// `t` in ms since the Unix epoch (0 before it).
pub(crate) fn ms_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis().min(u128::from(u64::MAX)) as u64)
}

/// `ms` since the Unix epoch as a time.
pub(crate) fn time_of(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// A wake-up an update handler gives the entity's main loop: handlers
/// change the shared state, then [`notify`](Notify::notify).
#[derive(Clone, Default)]
pub(crate) struct Notify(Rc<NotifyInner>);

#[derive(Default)]
struct NotifyInner {
    set: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Notify {
    /// Wakes the main loop (once, however often called before it looks).
    pub(crate) fn notify(&self) {
        self.0.set.set(true);
        if let Some(w) = self.0.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Whether a notification came since the last look; registers `cx`'s
    /// waker when none did.
    pub(crate) fn poll_take(&self, cx: &Context<'_>) -> bool {
        if self.0.set.replace(false) {
            return true;
        }
        *self.0.waker.borrow_mut() = Some(cx.waker().clone());
        false
    }
}

/// At most `count` starts in any window of `per_ms` milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rate {
    pub(crate) count: u32,
    pub(crate) per_ms: u64,
}

/// The largest `count` of a rate: the window keeps one time per start.
pub(crate) const RATE_COUNT_MAX: u32 = 100_000;

impl Rate {
    /// A rate of `count` per `per`, or why not.
    pub(crate) fn new(count: u32, per: Duration) -> std::result::Result<Self, String> {
        let per_ms = per.as_millis().min(u128::from(u64::MAX)) as u64;
        if count == 0 {
            return Err("a rate of 0 starts would never start anything".into());
        }
        if count > RATE_COUNT_MAX {
            return Err(format!(
                "a rate of {count} starts per period is over the limit of {RATE_COUNT_MAX}"
            ));
        }
        if per_ms == 0 {
            return Err("a rate's period must be at least 1 ms".into());
        }
        Ok(Self { count, per_ms })
    }
}

/// The start times of a sliding-window rate: a start at `t` is allowed
/// when fewer than `count` starts fall in `(t - per, t]`, so no window of
/// `per` ever holds more than `count` (unlike a token bucket, which lets
/// a full bucket and its refill through in one window).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Window {
    starts: VecDeque<u64>,
}

impl Window {
    /// `None` if a start at `now_ms` is allowed, else the time it will be.
    pub(crate) fn wait(&mut self, rate: Rate, now_ms: u64) -> Option<u64> {
        while let Some(&first) = self.starts.front() {
            if first.saturating_add(rate.per_ms) <= now_ms {
                self.starts.pop_front();
            } else {
                break;
            }
        }
        if self.starts.len() < rate.count as usize {
            return None;
        }
        let i = self.starts.len() - rate.count as usize;
        self.starts.get(i).map(|t| t.saturating_add(rate.per_ms))
    }

    /// Counts a start at `now_ms`.
    pub(crate) fn record(&mut self, now_ms: u64) {
        self.starts.push_back(now_ms);
    }
}

/// A timer of an entity's main loop, kept armed across its wake-ups (a
/// dropped sleep would still fire, into nothing): armed again only when
/// its target changes.
#[derive(Default)]
pub(crate) struct Timer {
    armed: Option<(u64, Pin<Box<crate::Sleep>>)>,
}

impl Timer {
    /// Makes the timer fire at `target_ms` (`None`: not at all), `now_ms`
    /// being the recorded time of this poll (a sleep is relative to it).
    pub(crate) fn set(&mut self, ctx: &Ctx, name: &str, target_ms: Option<u64>, now_ms: u64) {
        match target_ms {
            None => self.armed = None,
            Some(t) if self.armed.as_ref().is_some_and(|(at, _)| *at == t) => {}
            Some(t) => {
                let d = Duration::from_millis(t.saturating_sub(now_ms));
                self.armed = Some((t, Box::pin(ctx.sleep(name, d))));
            }
        }
    }

    /// Whether the timer fired (it is then disarmed); `Err` when the run
    /// was cancelled.
    pub(crate) fn poll_fired(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<std::result::Result<(), crate::Failure>> {
        let Some((_, sleep)) = self.armed.as_mut() else {
            return Poll::Pending;
        };
        match sleep.as_mut().poll(cx) {
            Poll::Ready(r) => {
                self.armed = None;
                Poll::Ready(r)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_admits_count_starts_per_period_and_says_when_the_next_may_go() {
        let rate = Rate::new(3, Duration::from_millis(100)).expect("a valid rate");
        let mut w = Window::default();
        for t in [0, 10, 20] {
            assert_eq!(w.wait(rate, t), None, "start at {t}");
            w.record(t);
        }
        assert_eq!(
            w.wait(rate, 50),
            Some(100),
            "the fourth waits for the first to age out"
        );
        assert_eq!(w.wait(rate, 99), Some(100));
        assert_eq!(w.wait(rate, 100), None);
        w.record(100);
        assert_eq!(w.wait(rate, 100), Some(110));
    }

    #[test]
    fn bad_rates_are_refused_with_a_reason() {
        assert!(Rate::new(0, Duration::from_secs(1)).is_err());
        assert!(Rate::new(1, Duration::ZERO).is_err());
        assert!(Rate::new(RATE_COUNT_MAX + 1, Duration::from_secs(1)).is_err());
    }

    #[test]
    fn interned_names_are_shared() {
        let a = intern("fusee-test-intern");
        let b = intern(&String::from("fusee-test-intern"));
        assert!(std::ptr::eq(a, b));
    }
}
