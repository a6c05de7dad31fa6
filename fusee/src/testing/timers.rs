//! Sleeps on the test engine's virtual clock for code outside the engine
//! (a step mock's delay): each a deadline and a waker, woken when the clock
//! passes it, and counted, so the kit knows a running step is only waiting
//! for time.
//!
//! Sleepers belong to an engine's incarnation (an epoch): a crash ends the
//! epoch, and the sleeps of the dead engine's steps end at once (their
//! results go nowhere), so they neither hang nor count as the new engine's.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::clock::VirtualClock;

/// The virtual-clock sleepers of one test engine (across its crashes).
pub(crate) struct Timers {
    clock: VirtualClock,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    epoch: u64,
    next_id: u64,
    /// Sleeps polled and not yet due, by id: deadline and waker.
    pending: BTreeMap<u64, (u64, Waker)>,
}

impl Timers {
    /// Sleepers on `clock`, woken whenever it moves.
    pub(crate) fn new(clock: &VirtualClock) -> Arc<Self> {
        let timers = Arc::new(Self {
            clock: clock.clone(),
            state: Mutex::default(),
        });
        // Weak: the clock outlives the kit's engines and must not keep
        // their sleepers alive.
        let weak = Arc::downgrade(&timers);
        clock.watch(Box::new(move || {
            if let Some(t) = weak.upgrade() {
                t.fire();
            }
        }));
        timers
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes (and forgets) every sleeper whose deadline has come.
    fn fire(&self) {
        let now = self.clock.now_ms();
        let due: Vec<Waker> = {
            let mut s = self.lock();
            let ids: Vec<u64> = s
                .pending
                .iter()
                .filter(|(_, (at, _))| *at <= now)
                .map(|(id, _)| *id)
                .collect();
            ids.iter()
                .filter_map(|id| s.pending.remove(id).map(|(_, w)| w))
                .collect()
        };
        for w in due {
            w.wake();
        }
    }

    /// A sleep until the clock reads `at_ms`, in the current epoch.
    pub(crate) fn sleep_until(self: &Arc<Self>, at_ms: u64) -> VirtualSleep {
        let mut s = self.lock();
        s.next_id += 1;
        VirtualSleep {
            timers: Arc::clone(self),
            id: s.next_id,
            epoch: s.epoch,
            at_ms,
        }
    }

    /// How many sleeps of the current epoch wait, and the earliest
    /// deadline among them.
    pub(crate) fn pending(&self) -> (u64, Option<u64>) {
        let s = self.lock();
        (
            s.pending.len() as u64,
            s.pending.values().map(|(at, _)| *at).min(),
        )
    }

    /// Ends the epoch (the engine crashed): every sleep of it ends now.
    pub(crate) fn new_epoch(&self) {
        let woken: Vec<Waker> = {
            let mut s = self.lock();
            s.epoch += 1;
            std::mem::take(&mut s.pending)
                .into_values()
                .map(|(_, w)| w)
                .collect()
        };
        for w in woken {
            w.wake();
        }
    }
}

/// Sleeps on a [`TestEngine`](super::TestEngine)'s virtual clock for a
/// step function's own code ([`TestEngine::sleeper`](super::TestEngine::sleeper)):
/// a step that works for a while, heartbeating between two sleeps, runs
/// on virtual time, and the kit counts it as waiting for time (so the
/// clock moves on to its deadline when everything else waits). Valid
/// across the engine's crashes.
#[derive(Clone)]
pub struct Sleeper {
    clock: VirtualClock,
    timers: Arc<Timers>,
}

impl std::fmt::Debug for Sleeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleeper")
            .field("now_ms", &self.clock.now_ms())
            .finish_non_exhaustive()
    }
}

impl Sleeper {
    /// A sleeper on `timers`' clock.
    pub(crate) fn new(timers: &Arc<Timers>) -> Self {
        Self {
            clock: timers.clock.clone(),
            timers: Arc::clone(timers),
        }
    }

    /// The virtual time now, in ms since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Returns once the virtual clock moved `d` past now. `Err` (kind
    /// `mock`) if the engine the step runs in crashed meanwhile: nobody
    /// takes its result.
    pub async fn sleep(&self, d: std::time::Duration) -> Result<(), crate::StepError> {
        let ms = d.as_millis().min(u128::from(u64::MAX)) as u64;
        self.timers
            .sleep_until(self.clock.now_ms().saturating_add(ms))
            .await
            .map_err(|Abandoned| {
                crate::StepError::retryable("the test engine crashed").kind("mock")
            })
    }
}

/// The sleep's engine crashed before its deadline.
#[derive(Debug)]
pub(crate) struct Abandoned;

/// A sleep on the virtual clock (see [`Timers::sleep_until`]).
pub(crate) struct VirtualSleep {
    timers: Arc<Timers>,
    id: u64,
    epoch: u64,
    at_ms: u64,
}

impl Future for VirtualSleep {
    type Output = Result<(), Abandoned>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut s = this.timers.lock();
        if s.epoch != this.epoch {
            s.pending.remove(&this.id);
            return Poll::Ready(Err(Abandoned));
        }
        if this.timers.clock.now_ms() >= this.at_ms {
            s.pending.remove(&this.id);
            return Poll::Ready(Ok(()));
        }
        s.pending.insert(this.id, (this.at_ms, cx.waker().clone()));
        Poll::Pending
    }
}

impl Drop for VirtualSleep {
    fn drop(&mut self) {
        // A dropped sleep (its step task was dropped) waits for nothing.
        self.timers.lock().pending.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> Waker {
        Waker::noop().clone()
    }

    #[test]
    fn a_sleep_ends_when_the_clock_passes_its_deadline_and_is_counted_meanwhile() {
        let clock = VirtualClock::new(1_000);
        let timers = Timers::new(&clock);
        let mut sleep = timers.sleep_until(1_500);
        let waker = noop();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut sleep).poll(&mut cx).is_pending());
        assert_eq!(timers.pending(), (1, Some(1_500)));
        clock.advance(499);
        assert_eq!(timers.pending(), (1, Some(1_500)), "not due at 1,499");
        assert!(Pin::new(&mut sleep).poll(&mut cx).is_pending());
        clock.advance(1);
        assert_eq!(timers.pending(), (0, None), "the move woke it");
        assert!(matches!(
            Pin::new(&mut sleep).poll(&mut cx),
            Poll::Ready(Ok(()))
        ));
    }

    #[test]
    fn a_new_epoch_ends_the_old_sleeps_and_a_dropped_sleep_is_not_counted() {
        let clock = VirtualClock::new(0);
        let timers = Timers::new(&clock);
        let waker = noop();
        let mut cx = Context::from_waker(&waker);
        let mut old = timers.sleep_until(10);
        assert!(Pin::new(&mut old).poll(&mut cx).is_pending());
        timers.new_epoch();
        assert_eq!(timers.pending(), (0, None));
        assert!(matches!(
            Pin::new(&mut old).poll(&mut cx),
            Poll::Ready(Err(Abandoned))
        ));
        let mut dropped = timers.sleep_until(10);
        assert!(Pin::new(&mut dropped).poll(&mut cx).is_pending());
        assert_eq!(timers.pending().0, 1);
        drop(dropped);
        assert_eq!(timers.pending().0, 0);
    }
}
