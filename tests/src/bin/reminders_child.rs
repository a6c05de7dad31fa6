//! The child of the reminders SIGKILL test (`tests/reminders_sigkill.rs`):
//! a reminder service of durable sleepers, killed while they fire.
//!
//! - `reminders-child start DIR N`: opens an engine (file backend, 4
//!   shards) in DIR, starts N reminders due 1 to 3 s after the time it
//!   prints, one in ten snoozed and one in ten cancelled by a signal sent
//!   before any of them is due, then prints `started BASE_MS` (every start
//!   and signal acknowledged) and waits to be killed.
//! - `reminders-child reopen DIR N`: opens the store again, waits
//!   for every reminder's result, and prints a line for each:
//!   `fired I DUE_MS FIRED_MS TIMEOUTS` or `cancelled I TIMEOUTS`, where
//!   TIMEOUTS counts the waits its journal holds as timed out (a timer
//!   that fired twice shows as 2), then `done` and exits 0.
//!
//! The parent judges every line against [`fusee_tests::reminders`].

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fusee::{Backend, Config, Ctx, Engine, Failure, StorageConfig};
use fusee_tests::reminders::{CONTROL, Control, REMINDER, SHARDS, due_ms, fate, id};
use tokio::task::JoinSet;

/// Starts and waits in flight at a time, so no shard's inbox overflows.
const IN_FLIGHT: usize = 256;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("reminders-child: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let parsed = |i: usize| args.get(i).and_then(|s| s.parse::<u64>().ok());
    let outcome = match (args.first().map(String::as_str), args.get(1), parsed(2)) {
        (Some("start"), Some(dir), Some(n)) => runtime.block_on(start(dir, n)),
        (Some("reopen"), Some(dir), Some(n)) => runtime.block_on(reopen(dir, n)),
        _ => return usage(),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reminders-child: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: reminders-child start DIR N | reopen DIR N");
    ExitCode::from(2)
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Writes `line` and flushes it: once written, the parent holds the
/// engine to it.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(3);
    }
}

/// What went wrong, for the parent to print.
type Fault = String;

async fn open(dir: &str) -> Result<Engine, Fault> {
    let config = Config::new(StorageConfig::new(Backend::File, dir)).shards(SHARDS);
    let engine = Engine::open(config)
        .await
        .map_err(|e| format!("open {dir}: {e}"))?;
    engine.register(REMINDER, |ctx: Ctx, due: u64| async move {
        let mut due = due;
        loop {
            let now = ctx
                .now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            let left = Duration::from_millis(due.saturating_sub(now));
            match ctx.wait_for(&CONTROL).timeout(left).await? {
                None => break,
                Some(c) if c == Control::Snooze as u8 => due += fusee_tests::reminders::SNOOZE_MS,
                Some(_) => return Ok::<_, Failure>(None),
            }
        }
        let fired = ctx
            .now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Ok(Some((due, fired)))
    });
    Ok(engine)
}

/// Runs `task` for each of `items`, [`IN_FLIGHT`] at a time.
async fn each<F, Fut>(items: Vec<u64>, task: F) -> Result<(), Fault>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), Fault>> + Send + 'static,
{
    let mut set = JoinSet::new();
    for i in items {
        if set.len() >= IN_FLIGHT
            && let Some(done) = set.join_next().await
        {
            done.map_err(|e| e.to_string())??;
        }
        set.spawn(task(i));
    }
    while let Some(done) = set.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    Ok(())
}

async fn start(dir: &str, n: u64) -> Result<(), Fault> {
    let engine = open(dir).await?;
    let base = now_ms();
    let start_all = |list: Vec<u64>| {
        let engine = engine.clone();
        each(list, move |i| {
            let engine = engine.clone();
            async move {
                engine
                    .start(REMINDER, &id(i), &due_ms(base, i))
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("start {}: {e}", id(i)))
            }
        })
    };
    let told: Vec<u64> = (0..n).filter(|&i| fate(i).is_some()).collect();
    let rest: Vec<u64> = (0..n).filter(|&i| fate(i).is_none()).collect();
    start_all(told.clone()).await?;
    let signals = engine.clone();
    each(told, move |i| {
        let engine = signals.clone();
        async move {
            let control = fate(i).map_or(0, |c| c as u8);
            engine
                .signal(&id(i), CONTROL, &control)
                .await
                .map_err(|e| format!("signal {}: {e}", id(i)))
        }
    })
    .await?;
    start_all(rest).await?;
    say(&format!("started {base}"));
    // The parent kills this process; an hour is far beyond its patience.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

async fn reopen(dir: &str, n: u64) -> Result<(), Fault> {
    let engine = open(dir).await?;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (e, l) = (engine.clone(), lines.clone());
    each((0..n).collect(), move |i| {
        let (engine, lines) = (e.clone(), l.clone());
        async move {
            let ending = engine
                .result(REMINDER, &id(i))
                .await
                .map_err(|e| format!("result of {}: {e}", id(i)))?;
            let journal = engine
                .journal_json(&id(i), None)
                .await
                .map_err(|e| format!("journal of {}: {e}", id(i)))?;
            let timeouts = journal["records"].as_array().map_or(0, |records| {
                records
                    .iter()
                    .filter(|r| r["kind"] == "Waited" && r["outcome"] == "timed-out")
                    .count()
            });
            let line = match ending {
                Some((due, fired)) => format!("fired {i} {due} {fired} {timeouts}"),
                None => format!("cancelled {i} {timeouts}"),
            };
            lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            Ok(())
        }
    })
    .await?;
    for line in lines.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        say(line);
    }
    engine.close().await.map_err(|e| format!("close: {e}"))?;
    say("done");
    Ok(())
}
