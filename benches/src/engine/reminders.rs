//! The reminder service of issue 37, SIGKILLed mid-way: what a user of
//! durable sleepers watches after a crash.
//!
//! A child process ([`super::child`], mode `reminders`) starts N reminders
//! due 1 to 5 s after a base time; one in ten is snoozed by a signal (due
//! [`SNOOZE_MS`] later) and one in ten cancelled by one, their signals sent
//! before any of them is due. The parent kills the child with SIGKILL
//! [`KILL_AFTER_MS`] after the base, when about half the reminders are due.
//! A fresh child (mode `reminders-reopen`) then opens the store, and waits
//! for every reminder, checking each one's ending against its fate:
//!
//! - **open**: seconds `Engine::open` took, and the log records it replayed;
//! - **late p99**: how late the reminders due after the open fired (the
//!   time the workflow read after its wait, minus its due time), while the
//!   overdue ones are caught up;
//! - **caught up**: overdue reminders fired per second, from the open to
//!   the last overdue one;
//! - **bytes per loaded run**: resident memory the open added, per run it
//!   loaded.
//!
//! A reminder that fires before it is due, a cancelled one that fires, or
//! one whose snooze was lost fails the workload: no figure comes from runs
//! that went wrong.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fusee::{Ctx, Engine, Failure, Signal, Workflow};
use serde::{Deserialize, Serialize};

use super::workload::{self, WorkResult, for_each_in_window, unbusy};

/// The reminder: its input is when it is due (ms since the Unix epoch).
pub const REMINDER: Workflow<u64, Ending> = Workflow::new("reminder");
/// What a reminder is told while it sleeps.
pub const CONTROL: Signal<Control> = Signal::new("control");
/// Reminder IDs start with this.
pub const PREFIX: &str = "remind";
/// How much later a snooze makes a reminder due.
pub const SNOOZE_MS: u64 = 1000;
/// When the parent kills the child, after the base time: the middle of
/// the due times, so about half the reminders fired before.
pub const KILL_AFTER_MS: u64 = 3000;

/// A signal a reminder takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Control {
    /// Due [`SNOOZE_MS`] later.
    Snooze,
    /// Never fires.
    Cancel,
}

/// How a reminder ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ending {
    /// It fired: when it was due (snoozes included) and when its code ran
    /// after the wait, ms since the Unix epoch.
    Fired {
        /// Due, ms.
        due_ms: u64,
        /// Fired, ms.
        fired_ms: u64,
    },
    /// It was cancelled first.
    Cancelled,
}

/// What reminder `i` is told, if anything: one in ten snoozed, one in ten
/// cancelled.
pub fn fate(i: u64) -> Option<Control> {
    match i % 10 {
        0 => Some(Control::Snooze),
        1 => Some(Control::Cancel),
        _ => None,
    }
}

/// When reminder `i` is due before any snooze: 1 to 5 s after `base_ms`,
/// spread evenly; the ones told something 2 to 5 s after, so their
/// signals (sent first) arrive before they are due.
pub fn due_ms(base_ms: u64, i: u64) -> u64 {
    let spread = i.wrapping_mul(7919) % 4000;
    match fate(i) {
        None => base_ms + 1000 + spread,
        Some(_) => base_ms + 2000 + spread * 3 / 4,
    }
}

/// Milliseconds since the Unix epoch of `t` (0 before it).
pub fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Registers [`REMINDER`]: wait for a control signal until due; a snooze
/// waits again, later.
pub fn register(engine: &Engine) {
    engine.register(REMINDER, |ctx: Ctx, due_ms: u64| async move {
        let mut due = due_ms;
        loop {
            let left = due.saturating_sub(epoch_ms(ctx.now()));
            match ctx
                .wait_for(&CONTROL)
                .timeout(Duration::from_millis(left))
                .await?
            {
                None => break,
                Some(Control::Snooze) => due += SNOOZE_MS,
                Some(Control::Cancel) => return Ok::<_, Failure>(Ending::Cancelled),
            }
        }
        Ok(Ending::Fired {
            due_ms: due,
            fired_ms: epoch_ms(ctx.now()),
        })
    });
}

/// Reminder `i`'s ID.
pub fn id(i: u64) -> String {
    format!("{PREFIX}-{i}")
}

/// Starts `n` reminders due after `base_ms` on `engine`: those told
/// something first, then their signals, then the rest. Returns once every
/// start and signal is durable.
pub async fn start(engine: &Engine, n: u64, base_ms: u64) -> WorkResult<()> {
    let told: Vec<u64> = (0..n).filter(|&i| fate(i).is_some()).collect();
    let rest: Vec<u64> = (0..n).filter(|&i| fate(i).is_none()).collect();
    let start_each = |list: &[u64]| {
        let list = list.to_vec();
        let engine = engine.clone();
        async move {
            for_each_in_window(list.len() as u64, |k| {
                let (engine, i) = (engine.clone(), list[k as usize]);
                async move {
                    let (id, due) = (id(i), due_ms(base_ms, i));
                    unbusy(|| engine.start(REMINDER, &id, &due))
                        .await
                        .map(|_| ())
                        .map_err(|e| format!("starting {id}: {e}").into())
                }
            })
            .await
        }
    };
    start_each(&told).await?;
    for_each_in_window(told.len() as u64, |k| {
        let (engine, i) = (engine.clone(), told[k as usize]);
        async move {
            let id = id(i);
            let control = fate(i).ok_or("a reminder told nothing")?;
            unbusy(|| engine.signal(&id, CONTROL, &control))
                .await
                .map_err(|e| format!("signalling {id}: {e}").into())
        }
    })
    .await?;
    start_each(&rest).await
}

/// What the reopened engine did with the reminders (the child's
/// `reminders ...` line).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reopened {
    /// Seconds `Engine::open` took.
    pub open_s: f64,
    /// Log records the open replayed.
    pub replayed: u64,
    /// Runs loaded after the open.
    pub loaded: u64,
    /// Resident bytes the open added, per loaded run.
    pub bytes_per_run: u64,
    /// Peak resident bytes from before the open to the last reminder's
    /// end (code started, fired and finished, dozed), per loaded run.
    pub peak_bytes_per_run: u64,
    /// Reminders due after the open (the lateness figures are theirs).
    pub late_count: u64,
    /// p50 lateness, ms.
    pub late_p50_ms: u64,
    /// p99 lateness, ms.
    pub late_p99_ms: u64,
    /// Largest lateness, ms.
    pub late_max_ms: u64,
    /// Overdue reminders fired by the reopened engine.
    pub overdue: u64,
    /// Seconds from the open to the last overdue one fired.
    pub catchup_s: f64,
}

impl Reopened {
    /// The child's line.
    pub fn line(&self) -> String {
        format!(
            "reminders {} {} {} {} {} {} {} {} {} {} {}",
            self.open_s,
            self.replayed,
            self.loaded,
            self.bytes_per_run,
            self.peak_bytes_per_run,
            self.late_count,
            self.late_p50_ms,
            self.late_p99_ms,
            self.late_max_ms,
            self.overdue,
            self.catchup_s
        )
    }

    /// Parses [`Reopened::line`].
    pub fn parse(line: &str) -> Option<Self> {
        let f: Vec<&str> = line.strip_prefix("reminders ")?.split(' ').collect();
        let [
            open_s,
            replayed,
            loaded,
            bytes,
            peak,
            count,
            p50,
            p99,
            max,
            overdue,
            catchup,
        ] = f[..]
        else {
            return None;
        };
        let int = |s: &str| s.parse::<u64>().ok();
        Some(Reopened {
            open_s: open_s.parse().ok()?,
            replayed: int(replayed)?,
            loaded: int(loaded)?,
            bytes_per_run: int(bytes)?,
            peak_bytes_per_run: int(peak)?,
            late_count: int(count)?,
            late_p50_ms: int(p50)?,
            late_p99_ms: int(p99)?,
            late_max_ms: int(max)?,
            overdue: int(overdue)?,
            catchup_s: catchup.parse().ok()?,
        })
    }

    /// Overdue reminders caught up per second.
    pub fn catchup_rate(&self) -> f64 {
        self.overdue as f64 / self.catchup_s.max(1e-3)
    }
}

/// Opens the store `config` names (its first process killed), waits for
/// all `n` reminders started after `base_ms` and checks each one: the
/// figures of [`Reopened`].
pub async fn reopen(config: fusee::Config, n: u64, base_ms: u64) -> WorkResult<Reopened> {
    let before = workload::resident_bytes();
    let t = std::time::Instant::now();
    let engine = fusee::Engine::open(config).await?;
    let open_s = t.elapsed().as_secs_f64();
    let opened_ms = epoch_ms(SystemTime::now());
    register(&engine);
    let metrics = engine.metrics().await;
    let added = workload::resident_bytes().saturating_sub(before);
    let endings = std::sync::Mutex::new(vec![None; n as usize]);
    for_each_in_window(n, |i| {
        let (engine, endings) = (engine.clone(), &endings);
        async move {
            let id = id(i);
            let got = unbusy(|| engine.result(REMINDER, &id))
                .await
                .map_err(|e| format!("result of {id}: {e}"))?;
            endings.lock().unwrap_or_else(|e| e.into_inner())[i as usize] = Some(got);
            Ok(())
        }
    })
    .await?;
    // Before the close, which frees the runs: the live phase's high mark.
    let peak = workload::peak_resident_bytes().saturating_sub(before);
    engine.close().await?;
    let endings = endings.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut late = Vec::new();
    let (mut overdue, mut last_overdue_ms) = (0u64, opened_ms);
    for (i, ending) in endings.into_iter().enumerate() {
        let i = i as u64;
        let due = due_ms(base_ms, i)
            + if fate(i) == Some(Control::Snooze) {
                SNOOZE_MS
            } else {
                0
            };
        match (fate(i), ending) {
            (Some(Control::Cancel), Some(Ending::Cancelled)) => {}
            (Some(Control::Cancel), other) => {
                return Err(format!("{} was cancelled, and ended {other:?}", id(i)).into());
            }
            (_, Some(Ending::Fired { due_ms, fired_ms })) => {
                if due_ms != due {
                    return Err(format!("{} fired due at {due_ms}, not {due}", id(i)).into());
                }
                if fired_ms < due_ms {
                    return Err(format!("{} fired {} ms early", id(i), due_ms - fired_ms).into());
                }
                if due_ms > opened_ms {
                    late.push(fired_ms - due_ms);
                } else if fired_ms >= opened_ms {
                    overdue += 1;
                    last_overdue_ms = last_overdue_ms.max(fired_ms);
                }
            }
            (_, other) => return Err(format!("{} ended {other:?}", id(i)).into()),
        }
    }
    late.sort_unstable();
    let pct = |p: usize| late.get((late.len() * p / 100).min(late.len().saturating_sub(1)));
    Ok(Reopened {
        open_s,
        replayed: metrics.recovered_records,
        loaded: metrics.loaded_runs,
        bytes_per_run: added / metrics.loaded_runs.max(1),
        peak_bytes_per_run: peak / metrics.loaded_runs.max(1),
        late_count: late.len() as u64,
        late_p50_ms: pct(50).copied().unwrap_or(0),
        late_p99_ms: pct(99).copied().unwrap_or(0),
        late_max_ms: late.last().copied().unwrap_or(0),
        overdue,
        catchup_s: (last_overdue_ms - opened_ms) as f64 / 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_parses_back() {
        let r = Reopened {
            open_s: 0.25,
            replayed: 605_165,
            loaded: 50_000,
            bytes_per_run: 2_700,
            peak_bytes_per_run: 2_900,
            late_count: 40_000,
            late_p50_ms: 83,
            late_p99_ms: 562,
            late_max_ms: 615,
            overdue: 9_000,
            catchup_s: 1.28,
        };
        assert_eq!(Reopened::parse(&r.line()), Some(r));
        assert_eq!(Reopened::parse("reminders 0.25 1"), None);
        assert_eq!(Reopened::parse(&format!("{} 7", r.line())), None);
        assert_eq!(Reopened::parse("opened 0.25 1 1"), None);
    }

    #[test]
    fn told_reminders_are_due_after_their_signals_and_all_within_five_seconds() {
        for i in 0..10_000 {
            let due = due_ms(0, i);
            assert!((1000..5000).contains(&due), "{i}: {due}");
            if fate(i).is_some() {
                assert!(due >= 2000, "{i}: {due}");
            }
        }
        let cancelled = (0..1000)
            .filter(|&i| fate(i) == Some(Control::Cancel))
            .count();
        assert_eq!(cancelled, 100);
    }
}
