//! Timers: the two wheels, the far timers waiting in table buckets, and the
//! sweep that moves them into the wheels as they approach.

use super::run::{LoadedRun, push_small};
use super::{
    BUCKET_BITS, Event, HORIZON_MS, SWEEP_MS, ShardCore, TIMER_CHUNK, TimerKey, TimerKind,
};
use crate::record::{RunId, Seq};
use crate::table::{self, Entry, Slot, flag};
use crate::wheel::Wheel;

/// The next wake of a wheel; an empty wheel (the usual case for runs that
/// never sleep) has none, and asking would walk its levels.
fn wake<K: Copy>(w: &Wheel<K>) -> Option<u64> {
    if w.is_empty() { None } else { w.next_wake() }
}

impl ShardCore {
    /// The time an entry waits for outside the wheels: a suspended or loaded
    /// run's earliest timer that is in neither wheel yet.
    pub(super) fn waits_far(e: &Entry) -> Option<u64> {
        let t = e.time();
        let waits = t != 0
            && !e.has(flag::NEAR)
            && !e.has(flag::PENDING)
            && matches!(e.state(), table::LOADED | table::PARKED);
        waits.then_some(t)
    }

    /// When the host should next call [`poll_timers`](Self::poll_timers):
    /// polling at that time always makes progress (fires a timer, or moves
    /// a far timer into a wheel). `None`: no timer is armed.
    pub fn next_timer(&self) -> Option<u64> {
        if !self.backlog.is_empty() {
            return Some(self.backlog_at);
        }
        if !self.near_backlog.is_empty() {
            return Some(self.near_backlog_at);
        }
        let sweep = if self.sweep_full {
            Some(self.sweep_at)
        } else if self.far_min == u64::MAX {
            None
        } else {
            // A sweep at `now` moves what is due before `now + HORIZON_MS`,
            // so `far_min` is moved by a sweep at `far_min - HORIZON_MS + 1`
            // or later; sweeps are at least `SWEEP_MS` apart.
            Some(
                self.far_min
                    .saturating_sub(HORIZON_MS - 1)
                    .max(self.sweep_at.saturating_add(SWEEP_MS)),
            )
        };
        [wake(&self.wheel), wake(&self.near), sweep]
            .into_iter()
            .flatten()
            .min()
    }

    /// Fires due timers as events: at most [`TIMER_CHUNK`] loads of parked
    /// runs and [`TIMER_CHUNK`] timers of loaded runs per call. Timers found
    /// due and not fired stay due: [`next_timer`](Self::next_timer) asks for
    /// another poll at once.
    pub fn poll_timers(&mut self, now_ms: u64) {
        self.sweep(now_ms);
        if self.near_backlog.is_empty() {
            let mut due = std::mem::take(&mut self.scratch_runs);
            due.clear();
            self.near.poll(now_ms, &mut due);
            self.near_backlog.extend(due.drain(..));
            self.scratch_runs = due;
            self.near_backlog_at = now_ms;
        }
        for _ in 0..TIMER_CHUNK {
            let Some(run) = self.near_backlog.pop_front() else {
                break;
            };
            self.fire_parked(run, now_ms, true);
        }
        if self.backlog.is_empty() {
            let mut due = std::mem::take(&mut self.scratch_keys);
            due.clear();
            self.wheel.poll(now_ms, &mut due);
            self.backlog.extend(due.drain(..));
            self.scratch_keys = due;
            self.backlog_at = now_ms;
        }
        for _ in 0..TIMER_CHUNK {
            let Some(key) = self.backlog.pop_front() else {
                break;
            };
            self.fire(key, now_ms);
        }
    }

    /// Moves far timers that came within the horizon into the wheels. Walks
    /// only the buckets whose earliest time is within it, at most once per
    /// [`SWEEP_MS`] and only once something comes within it.
    fn sweep(&mut self, now_ms: u64) {
        let due = now_ms >= self.sweep_at.saturating_add(SWEEP_MS)
            && self.far_min < now_ms.saturating_add(HORIZON_MS);
        if !self.sweep_full && !due {
            return;
        }
        if self.sweep_full {
            // Entries moved: every bucket must be walked.
            let buckets = (self.runs.used() as usize).div_ceil(1 << BUCKET_BITS);
            self.far = vec![0; buckets];
            self.sweep_full = false;
        }
        self.sweep_at = now_ms;
        let end = now_ms.saturating_add(HORIZON_MS);
        let used = self.runs.used();
        let mut far_min = u64::MAX;
        for bucket in 0..self.far.len() {
            if self.far[bucket] >= end {
                far_min = far_min.min(self.far[bucket]);
                continue;
            }
            let from = u32::try_from(bucket)
                .unwrap_or(u32::MAX)
                .saturating_mul(1 << BUCKET_BITS);
            let to = from.saturating_add(1 << BUCKET_BITS).min(used);
            let mut min = u64::MAX;
            for slot in from..to {
                let Some(e) = self.runs.live_at(slot) else {
                    continue;
                };
                let Some(t) = Self::waits_far(e) else {
                    continue;
                };
                if t >= end {
                    min = min.min(t);
                    continue;
                }
                let run = e.run();
                if e.state() == table::PARKED {
                    self.near.insert(t, run);
                    self.runs.get_mut(slot).set(flag::NEAR, true);
                } else {
                    self.rearm(run, slot, end);
                    if let Some(t) = Self::waits_far(self.runs.get(slot)) {
                        min = min.min(t);
                    }
                }
            }
            self.far[bucket] = min;
            far_min = far_min.min(min);
        }
        self.far_min = far_min;
    }

    /// The end of the horizon from the latest time the core has seen (the
    /// wheels advance only when polled).
    pub(super) fn horizon_end(&self) -> u64 {
        self.wheel
            .elapsed()
            .max(self.near.elapsed())
            .max(self.sweep_at)
            .saturating_add(HORIZON_MS)
    }

    /// Puts a loaded run's timers due before `end` into the wheel; its entry
    /// keeps the earliest later one (0: none).
    fn rearm(&mut self, run: RunId, slot: Slot, end: u64) {
        let mut later = u64::MAX;
        if let Some(l) = self.loaded.get(&run) {
            for &(seq, kind, at) in &l.armed {
                if at < end {
                    self.wheel.insert(at, TimerKey { run, seq, kind });
                } else {
                    later = later.min(at);
                }
            }
        }
        let later = if later == u64::MAX { 0 } else { later };
        self.edit(slot, |e| e.set_time(later));
    }

    /// A parked run's timer is due: ask for one load. `near`: the call comes
    /// from the near wheel, whose item stands for the entry's current time.
    pub(super) fn fire_parked(&mut self, run: RunId, now_ms: u64, near: bool) {
        let Some(slot) = self.runs.find_run(run) else {
            return;
        };
        let e = self.runs.get_mut(slot);
        // A finished run's leftover, a load already asked for, a timer that
        // is no longer the earliest armed one, or a stale near-wheel item.
        let stale = e.state() != table::PARKED
            || e.has(flag::PENDING)
            || e.time() == 0
            || e.time() > now_ms
            || (near && !e.has(flag::NEAR));
        if stale {
            return;
        }
        e.set(flag::NEAR, false);
        e.set(flag::PENDING, true);
        self.events.push_back(Event::NeedLoad { run });
    }

    /// A wheel item is due: fire it if its timer is still armed.
    pub(super) fn fire(&mut self, key: TimerKey, now_ms: u64) {
        let Some(l) = self.loaded.get_mut(&key.run) else {
            self.fire_parked(key.run, now_ms, false);
            return;
        };
        if l.done.is_some() {
            return;
        }
        let Some(i) = l
            .armed
            .iter()
            .position(|&(s, k, at)| s == key.seq && k == key.kind && at <= now_ms)
        else {
            return;
        };
        let (_, _, due_ms) = l.armed.swap_remove(i);
        l.queued += 1;
        self.events.push_back(Event::Timer {
            run: key.run,
            seq: key.seq,
            kind: key.kind,
            due_ms,
        });
    }

    /// Arms a timer of a loaded run (once: re-arming the same timer is a
    /// no-op for the run) and schedules it.
    pub(super) fn arm(&mut self, run: RunId, seq: Seq, kind: TimerKind, at: u64) {
        if let Some(l) = self.loaded.get_mut(&run)
            && !l.armed.contains(&(seq, kind, at))
        {
            push_small(&mut l.armed, (seq, kind, at));
        }
        self.schedule(run, seq, kind, at);
    }

    /// A loaded run's timer goes into the wheel if it is due within the
    /// horizon, else into its entry's time for the sweep.
    fn schedule(&mut self, run: RunId, seq: Seq, kind: TimerKind, at: u64) {
        if at < self.horizon_end() {
            self.wheel.insert(at, TimerKey { run, seq, kind });
            return;
        }
        let Some(slot) = self.runs.find_run(run) else {
            return;
        };
        let e = self.runs.get(slot);
        if !e.is_parked() && (e.time() == 0 || at < e.time()) {
            self.edit(slot, |e| e.set_time(at));
        }
    }

    /// Forgets a loaded run's timer; its wheel item becomes stale.
    pub(super) fn disarm(run: &mut LoadedRun, seq: Seq, kind: TimerKind) {
        run.armed.retain(|&(s, k, _)| !(s == seq && k == kind));
    }
}
