//! Reminders: a thousand durable sleepers, snoozed or cancelled by signals.
//!
//! Each reminder is a workflow that waits until it is due and then sends a
//! notification (a step). The wait is a signal wait with a timeout: the
//! timeout is the durable timer, and a `control` signal interrupts it to
//! snooze the reminder (it waits again, longer) or to cancel it. A sleeping
//! reminder costs a timer entry, not a thread or a task.
//!
//! An hour is a long time for an example: the engine runs on a virtual
//! clock ([`VirtualClock`]) that the example moves a minute at a time, so
//! three and a half hours pass in a moment. With `Clock::System` (the
//! default) the same code waits for real.
//!
//! Run it with `cargo run -p fusee --example reminders`; `cargo test -p
//! fusee --examples` runs it too (its `main`, from the test at the bottom).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use fusee::{Clock, Config, Ctx, Engine, Error, Failure, Signal, VirtualClock, Workflow};
use serde::{Deserialize, Serialize};

/// A reminder: what to say, and in how many minutes.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Reminder {
    text: String,
    in_minutes: u64,
}

/// What a reminder is told while it sleeps.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
enum Control {
    /// Push it back this many minutes.
    Snooze { minutes: u64 },
    /// Drop it.
    Cancel,
}

/// How a reminder ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Ending {
    /// It went off this many minutes after it was set.
    Fired { minute: u64, snoozes: u32 },
    /// It was cancelled first.
    Cancelled { snoozes: u32 },
}

const REMIND: Workflow<Reminder, Ending> = Workflow::new("remind");
const CONTROL: Signal<Control> = Signal::new("control");

const MINUTE: Duration = Duration::from_secs(60);
const REMINDERS: u64 = 1000;

/// Where notifications go: one per step key, so a notification retried
/// after a crash is sent once.
#[derive(Default)]
struct Outbox {
    sent: Mutex<BTreeMap<String, String>>,
}

impl Outbox {
    fn send(&self, key: &str, text: &str) {
        self.sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.to_string())
            .or_insert_with(|| text.to_string());
    }

    fn len(&self) -> usize {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The reminder workflow: wait until due, unless told otherwise; then
/// notify.
async fn remind(ctx: Ctx, reminder: Reminder, outbox: Arc<Outbox>) -> Result<Ending, Failure> {
    // ctx.now() is recorded: a replay after a restart sees the same times.
    let set_at = ctx.now();
    let mut due = set_at + MINUTE * reminder.in_minutes as u32;
    let mut snoozes = 0;
    loop {
        let left = due.duration_since(ctx.now()).unwrap_or_default();
        match ctx.wait_for(&CONTROL).timeout(left).await? {
            // The timeout passed: it is due.
            None => break,
            Some(Control::Snooze { minutes }) => {
                due += MINUTE * minutes as u32;
                snoozes += 1;
            }
            Some(Control::Cancel) => return Ok(Ending::Cancelled { snoozes }),
        }
    }
    let text = reminder.text;
    ctx.step("notify", move |step| {
        let (outbox, text) = (Arc::clone(&outbox), text.clone());
        async move {
            outbox.send(step.key(), &text);
            Ok(())
        }
    })
    .await?;
    let minute = due.duration_since(set_at).unwrap_or_default().as_secs() / 60;
    Ok(Ending::Fired { minute, snoozes })
}

/// Reminder `i`'s ID.
fn id(i: u64) -> String {
    format!("reminder-{i}")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 9:00 on 1 January 2025, UTC.
    let start_ms = 1_735_722_000_000;
    let clock = VirtualClock::new(start_ms);
    let engine = Engine::open(Config::memory().clock(Clock::Virtual(clock.clone()))).await?;
    let outbox = Arc::new(Outbox::default());
    let workflow_outbox = Arc::clone(&outbox);
    engine.register(REMIND, move |ctx: Ctx, r: Reminder| {
        remind(ctx, r, Arc::clone(&workflow_outbox))
    });

    // What the example expects of each reminder, worked out here on its
    // own and compared with what the workflows say at the end.
    let mut expected = BTreeMap::new();
    for i in 0..REMINDERS {
        let in_minutes = 1 + (i * 37) % 60;
        let reminder = Reminder {
            text: format!("reminder {i}: due {in_minutes} minutes after 9:00"),
            in_minutes,
        };
        engine.start(REMIND, &id(i), &reminder).await?;
        expected.insert(
            i,
            Ending::Fired {
                minute: in_minutes,
                snoozes: 0,
            },
        );
    }
    // Before the clock moves: cancel every 25th, snooze every 10th by a
    // quarter of an hour.
    for i in 0..REMINDERS {
        let Some(Ending::Fired { minute, .. }) = expected.get(&i).copied() else {
            continue;
        };
        let control = if i % 25 == 0 {
            expected.insert(i, Ending::Cancelled { snoozes: 0 });
            Control::Cancel
        } else if i % 10 == 0 {
            expected.insert(
                i,
                Ending::Fired {
                    minute: minute + 15,
                    snoozes: 1,
                },
            );
            Control::Snooze { minutes: 15 }
        } else {
            continue;
        };
        engine.signal(&id(i), CONTROL, &control).await?;
    }
    let (cancelled, snoozed) = count(&expected);
    println!(
        "9:00  {REMINDERS} reminders set; {snoozed} snoozed by 15 minutes, {cancelled} cancelled"
    );

    // Half an hour passes, a minute at a time.
    for _ in 0..30 {
        clock.advance(60_000);
    }
    let due_by_now: Vec<u64> = expected
        .iter()
        .filter(|(_, e)| matches!(e, Ending::Fired { minute, .. } if *minute <= 30))
        .map(|(i, _)| *i)
        .collect();
    for i in &due_by_now {
        engine.result(REMIND, &id(*i)).await?;
    }
    // Nothing due later has gone off: the clock stands at 9:30.
    if outbox.len() != due_by_now.len() {
        return Err(format!(
            "{} notifications by 9:30, not {}",
            outbox.len(),
            due_by_now.len()
        )
        .into());
    }
    println!("9:30  {} reminders have gone off", due_by_now.len());

    // Too late for one that went off; in time to push back the next ones
    // due after 9:45 by another 45 minutes, twice.
    let Some(&gone_off) = due_by_now.first() else {
        return Err("nothing went off by 9:30".into());
    };
    match engine
        .signal(&id(gone_off), CONTROL, &Control::Cancel)
        .await
    {
        Err(Error::Finished { .. }) => {
            println!("9:30  too late to cancel {}: it went off", id(gone_off))
        }
        other => return Err(format!("cancelling a finished reminder: {other:?}").into()),
    }
    let later: Vec<u64> = expected
        .iter()
        .filter(|(_, e)| matches!(e, Ending::Fired { minute, .. } if *minute > 45))
        .map(|(i, _)| *i)
        .take(5)
        .collect();
    for i in &later {
        for _ in 0..2 {
            engine
                .signal(&id(*i), CONTROL, &Control::Snooze { minutes: 45 })
                .await?;
        }
        if let Some(Ending::Fired { minute, snoozes }) = expected.get_mut(i) {
            *minute += 90;
            *snoozes += 2;
        }
    }
    println!(
        "9:30  {} reminders due after 9:45 snoozed twice more, by 45 minutes each",
        later.len()
    );

    // Three more hours: everything goes off.
    for _ in 0..180 {
        clock.advance(60_000);
    }
    let mut last = 0;
    for (i, want) in &expected {
        let got = engine.result(REMIND, &id(*i)).await?;
        if got != *want {
            return Err(format!("{}: expected {want:?}, found {got:?}", id(*i)).into());
        }
        if let Ending::Fired { minute, .. } = got {
            last = last.max(minute);
        }
    }
    let fired = expected.len() - cancelled;
    if outbox.len() != fired {
        return Err(format!("{} notifications for {fired} reminders", outbox.len()).into());
    }
    let clock_now = UNIX_EPOCH + Duration::from_millis(clock.now_ms());
    let elapsed = clock_now.duration_since(UNIX_EPOCH + Duration::from_millis(start_ms))?;
    println!(
        "{}  {fired} reminders went off, one notification each, the last {last} minutes after 9:00; {cancelled} were cancelled",
        clock_time(elapsed)
    );
    engine.close().await?;
    Ok(())
}

/// Cancelled and snoozed reminders in `expected`.
fn count(expected: &BTreeMap<u64, Ending>) -> (usize, usize) {
    let cancelled = expected
        .values()
        .filter(|e| matches!(e, Ending::Cancelled { .. }))
        .count();
    let snoozed = expected
        .values()
        .filter(|e| matches!(e, Ending::Fired { snoozes, .. } if *snoozes > 0))
        .count();
    (cancelled, snoozed)
}

/// 9:00 plus `elapsed`, as a wall clock shows it.
fn clock_time(elapsed: Duration) -> String {
    let minutes = 9 * 60 + elapsed.as_secs() / 60;
    format!("{}:{:02}", minutes / 60, minutes % 60)
}

#[cfg(test)]
mod tests {
    /// The example's whole `main` runs to the end.
    #[test]
    fn main_runs_to_completion() {
        super::main().expect("the reminders example runs");
    }
}
