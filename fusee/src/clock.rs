//! [`Clock`]: where the engine's time comes from. The shard loop never
//! reads a clock itself: its driver reads this one and passes the time in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// The engine's source of time, in milliseconds since the Unix epoch.
#[derive(Clone, Debug, Default)]
pub enum Clock {
    /// The system's wall clock (the default).
    #[default]
    System,
    /// A clock that moves only when told ([`VirtualClock::advance`]): a
    /// day-long sleep completes as soon as the test advances a day.
    Virtual(VirtualClock),
}

impl Clock {
    /// The time now, in ms.
    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            Clock::Virtual(v) => v.now_ms(),
        }
    }
}

/// A clock tests move by hand. Clones share the time.
#[derive(Clone)]
pub struct VirtualClock {
    inner: Arc<VirtualInner>,
}

impl std::fmt::Debug for VirtualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtualClock")
            .field("now_ms", &self.now_ms())
            .finish()
    }
}

struct VirtualInner {
    now_ms: AtomicU64,
    /// Called after every move, so shard loops waiting for a timer look
    /// at the new time.
    watchers: Mutex<Vec<Box<dyn Fn() + Send + Sync>>>,
}

impl VirtualClock {
    /// A clock at `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        Self {
            inner: Arc::new(VirtualInner {
                now_ms: AtomicU64::new(start_ms),
                watchers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The time now, in ms.
    pub fn now_ms(&self) -> u64 {
        self.inner.now_ms.load(Ordering::Acquire)
    }

    /// Moves the clock forward by `ms` and wakes every shard.
    pub fn advance(&self, ms: u64) {
        self.inner.now_ms.fetch_add(ms, Ordering::AcqRel);
        for w in self
            .inner
            .watchers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            w();
        }
    }

    /// Calls `f` after every move.
    pub(crate) fn watch(&self, f: Box<dyn Fn() + Send + Sync>) {
        self.inner
            .watchers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(f);
    }
}
