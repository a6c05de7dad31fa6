//! The child of the inbox harness (`tests/lease_messages.rs`):
//! `inbox-child URL SCHEMA ROLE LEASE_MS CHECKPOINTS`.
//!
//! Opens an engine on the PostgreSQL store in SCHEMA at URL under
//! [`Ownership::Lease`] as ROLE `a` (shard 0, the parents') or `b` (shards
//! 1 to 3, the kids'), with leases of LEASE_MS, under a lease holder name
//! made of the schema and the role: a child started again after a kill
//! takes its role's shards back at once. It never tries the other role's
//! shards (its retry interval is a day), so every message between a parent
//! and its kids goes between the two processes. CHECKPOINTS: `often`
//! (every 100 ms, so kills land in them too) or `never` (only at close: a
//! message's acknowledgement, which only a checkpoint makes durable, is
//! then lost by any kill after it, and the message is sent again).
//!
//! Commands on stdin, a line each (end of input: it exits at once, as a
//! crash would):
//!
//! - `parent ID KID...`: starts (or attaches to) parent ID with those kids,
//!   reports `started ID`, then `result ID LINE|LINE|...` once it finished;
//! - `kid ID PARENT`: starts kid ID as if parent PARENT had (a client
//!   start: the run has no parent), reports `started ID`;
//! - `loner ID KID`: starts (or attaches to) loner ID, whose kid is KID,
//!   reports `started ID`, then `result ID KIND` once it finished;
//! - `describe ID`: reports `described ID STATUS RECORDS`, the run's
//!   status and its journal's record count;
//! - `close`: closes the engine, reports `closed` and exits.
//!
//! A call that fails unexpectedly reports `error ID MESSAGE`.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use fusee::{Config, Engine, Error, IdPolicy, Ownership, StorageConfig};
use fusee_tests::inbox::{A_SHARDS, KID, LONER, PARENT, SHARDS, register};
use tokio::sync::mpsc;

/// How long a call refused for a passing reason waits to be tried again.
const POLL: Duration = Duration::from_millis(20);

/// Writes `line` and flushes it.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if out
        .write_all(format!("{line}\n").as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        // The parent is gone: nobody checks what happens next.
        std::process::exit(3);
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, schema, role, lease, checkpoints] = args.as_slice() else {
        eprintln!("usage: inbox-child URL SCHEMA ROLE LEASE_MS CHECKPOINTS");
        return ExitCode::from(2);
    };
    let checkpoint_interval = match checkpoints.as_str() {
        "often" => Duration::from_millis(100),
        "never" => Duration::from_secs(24 * 3600),
        _ => {
            eprintln!("inbox-child: checkpoints {checkpoints:?} is not often or never");
            return ExitCode::from(2);
        }
    };
    let prefer: Vec<u32> = match role.as_str() {
        "a" => A_SHARDS.to_vec(),
        "b" => (0..SHARDS).filter(|s| !A_SHARDS.contains(s)).collect(),
        _ => {
            eprintln!("inbox-child: role {role:?} is not a or b");
            return ExitCode::from(2);
        }
    };
    let Ok(lease) = lease.parse::<u64>() else {
        eprintln!("inbox-child: lease {lease:?} is not a number of ms");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("inbox-child: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut storage = StorageConfig::postgres(url)
        .postgres_schema(schema)
        .postgres_lease(Duration::from_millis(lease));
    storage.postgres.owner = Some(format!("inbox-{schema}-{role}"));
    storage.postgres.pool_size = Some(2);
    let config = Config::new(storage)
        .shards(SHARDS)
        .checkpoint_interval(checkpoint_interval)
        .ownership(Ownership::Lease {
            retry: Some(Duration::from_secs(24 * 3600)),
            prefer: Some(prefer),
        });
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("inbox-child {role}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> Result<(), Error> {
    let engine = Engine::open(config).await?;
    register(&engine);
    say("opened");
    let (tx, mut commands) = mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                return;
            }
        }
        // The parent is gone: leave as a crash would.
        std::process::exit(4);
    });
    while let Some(line) = commands.recv().await {
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        match words.first().map(String::as_str) {
            Some("parent") if words.len() > 2 => {
                let engine = engine.clone();
                tokio::spawn(async move {
                    let id = words[1].clone();
                    if let Err(e) = drive(&engine, &id, words[2..].to_vec()).await {
                        say(&format!("error {id} {}", e.to_string().replace('\n', " ")));
                    }
                });
            }
            Some("kid") if words.len() == 3 => {
                let id = &words[1];
                match engine
                    .start_with(KID, id, &words[2], IdPolicy::Attach)
                    .await
                {
                    Ok(_) => say(&format!("started {id}")),
                    Err(e) => say(&format!("error {id} {}", e.to_string().replace('\n', " "))),
                }
            }
            Some("loner") if words.len() == 3 => {
                let engine = engine.clone();
                tokio::spawn(async move {
                    let id = words[1].clone();
                    let started = engine
                        .start_with(LONER, &id, &words[2], IdPolicy::Attach)
                        .await;
                    let result = match started {
                        Ok(_) => {
                            say(&format!("started {id}"));
                            engine.result(LONER, &id).await
                        }
                        Err(e) => Err(e),
                    };
                    match result {
                        Ok(kind) => say(&format!("result {id} {kind}")),
                        Err(e) => say(&format!("error {id} {}", e.to_string().replace('\n', " "))),
                    }
                });
            }
            Some("describe") if words.len() == 2 => {
                let id = &words[1];
                match engine.describe(id).await {
                    Ok(d) => say(&format!(
                        "described {id} {:?} {}",
                        d.status, d.journal_records
                    )),
                    Err(e) => say(&format!("error {id} {}", e.to_string().replace('\n', " "))),
                }
            }
            Some("close") => break,
            _ => {
                eprintln!("inbox-child: unknown command {line:?}");
                std::process::exit(2);
            }
        }
    }
    engine.close().await?;
    say("closed");
    Ok(())
}

/// Starts (or attaches to) parent `id` and waits for its result, trying
/// again while the engine is busy.
async fn drive(engine: &Engine, id: &str, kids: Vec<String>) -> Result<(), Error> {
    loop {
        match engine.start_with(PARENT, id, &kids, IdPolicy::Attach).await {
            Ok(_) => break,
            Err(Error::Busy { .. }) => tokio::time::sleep(POLL).await,
            Err(e) => return Err(e),
        }
    }
    say(&format!("started {id}"));
    let lines = engine.result(PARENT, id).await?;
    say(&format!("result {id} {}", lines.join("|")));
    Ok(())
}
