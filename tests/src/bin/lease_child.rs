//! The child of the lease harness (`tests/lease_takeover.rs`):
//! `lease-child URL SCHEMA OWNER TAG LEDGER_DIR LEASE_MS RETRY_MS PREFER CHECKPOINTS [SHARDS]`.
//!
//! Opens an engine on the PostgreSQL store in SCHEMA at URL under
//! [`Ownership::Lease`], as lease holder OWNER, with leases of LEASE_MS,
//! trying shards it does not own every RETRY_MS, preferring PREFER (`all`,
//! `none`, or shards like `0,1`), checkpointing `often` (every 100 ms) or
//! `never` (only at close: a process the parent pauses with SIGSTOP must
//! not be paused inside a write transaction, which a takeover would wait
//! for). TAG (a number) names this child in what it reports and in what
//! its steps record. SHARDS is the store's shard count (default
//! [`SHARDS`]).
//!
//! It reads [`Command`]s on stdin (end of input: it exits at once, as the
//! parent is gone) and reports [`Report`]s on stdout, a line each, flushed
//! at once: the open, every change of the shards it owns, every start and
//! `go` signal its engine acknowledged, every result, and unexpected
//! errors. For each run it is told to drive it starts the workflow
//! ([`IdPolicy::Attach`]), signals it and waits for its result, trying
//! again while the run's shard is owned by another process
//! ([`Error::NotOwner`]).
//!
//! The workflow: a recorded random token; step `charge` (the outside
//! service's ledger gets the step's idempotency key and `charge TOKEN`); a
//! durable sleep of 1 to 4 ms; a wait for `go` (its value the sender's
//! tag); step `ship` (`ship TOKEN GO`); the result a [`RunValue`]. Each
//! step returns this child's tag, so a step run again after its result was
//! durable changes the run's result.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::{
    Config, Ctx, Engine, Error, Failure, IdPolicy, Ownership, Signal, StepError, StorageConfig,
    Workflow,
};
use fusee_tests::lease::{Command, IN_FLIGHT, LedgerLine, Report, RunValue, SHARDS, workflow_id};
use tokio::sync::{Semaphore, mpsc};

/// The harness's workflow: its number in, a [`RunValue`] out.
const RUN: Workflow<u64, String> = Workflow::new("lease-run");
/// Lets a run go past its wait; carries the sender's tag.
const GO: Signal<u64> = Signal::new("go");
/// How long a call refused because another process owns the shard waits
/// before it is tried again.
const POLL: Duration = Duration::from_millis(50);

struct Args {
    url: String,
    schema: String,
    owner: String,
    tag: u64,
    ledger: PathBuf,
    lease: Duration,
    retry: Duration,
    prefer: Option<Vec<u32>>,
    checkpoints_often: bool,
    /// The store's shard count ([`SHARDS`] unless a tenth argument says).
    shards: u32,
}

fn parse_args() -> Option<Args> {
    let mut args = std::env::args().skip(1);
    let mut next = || args.next();
    let url = next()?;
    let schema = next()?;
    let owner = next()?;
    let tag = next()?.parse().ok()?;
    let ledger = PathBuf::from(next()?);
    let lease = Duration::from_millis(next()?.parse().ok()?);
    let retry = Duration::from_millis(next()?.parse().ok()?);
    let prefer = match next()?.as_str() {
        "all" => None,
        "none" => Some(Vec::new()),
        list => Some(
            list.split(',')
                .map(|s| s.parse().ok())
                .collect::<Option<Vec<u32>>>()?,
        ),
    };
    let checkpoints_often = match next()?.as_str() {
        "often" => true,
        "never" => false,
        _ => return None,
    };
    let shards = match next() {
        Some(n) => n.parse().ok()?,
        None => SHARDS,
    };
    Some(Args {
        shards,
        url,
        schema,
        owner,
        tag,
        ledger,
        lease,
        retry,
        prefer,
        checkpoints_often,
    })
}

fn main() -> ExitCode {
    let Some(args) = parse_args() else {
        eprintln!(
            "usage: lease-child URL SCHEMA OWNER TAG LEDGER_DIR LEASE_MS RETRY_MS PREFER CHECKPOINTS [SHARDS]"
        );
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lease-child: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lease-child: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `report` as one line and flushes it: once written, the parent may
/// hold the engine to it.
fn say(report: &Report) {
    let line = format!("{report}\n");
    let mut out = std::io::stdout().lock();
    if out
        .write_all(line.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        // The parent is gone: nobody checks what happens next.
        std::process::exit(3);
    }
}

/// The outside service the steps call: a file of [`LedgerLine`]s.
struct Ledger(Mutex<File>);

impl Ledger {
    fn record(&self, line: &LedgerLine) -> Result<(), StepError> {
        let text = format!("{line}\n");
        let mut file = self.0.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(text.as_bytes())
            .map_err(|e| StepError::retryable(format!("the ledger: {e}")))
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let ledger_path = args.ledger.join(format!("ledger-{}.log", args.tag));
    let ledger = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&ledger_path)
        .map_err(|e| Error::Config(format!("opening {}: {e}", ledger_path.display())))?;
    let ledger = Arc::new(Ledger(Mutex::new(ledger)));
    let mut storage = StorageConfig::postgres(&args.url)
        .postgres_schema(&args.schema)
        .postgres_lease(args.lease);
    storage.postgres.owner = Some(args.owner.clone());
    storage.postgres.pool_size = Some(2);
    let interval = if args.checkpoints_often {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(24 * 3600)
    };
    let config = Config::new(storage)
        .shards(args.shards)
        .checkpoint_interval(interval)
        .ownership(Ownership::Lease {
            retry: Some(args.retry),
            prefer: args.prefer.clone(),
        });
    let engine = Engine::open(config).await?;
    register(&engine, args.tag, &ledger);
    say(&Report::Opened);
    let watcher = engine.clone();
    tokio::spawn(async move {
        let mut owned = None;
        loop {
            let now = watcher.owned_shards();
            if owned.as_ref() != Some(&now) {
                say(&Report::Owns(now.clone()));
                owned = Some(now);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let (tx, mut commands) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            match Command::parse(&line) {
                Some(c) => {
                    if tx.send(c).is_err() {
                        return;
                    }
                }
                None => {
                    eprintln!("lease-child: unknown command {line:?}");
                    std::process::exit(2);
                }
            }
        }
        // The parent is gone: leave as a crash would.
        std::process::exit(4);
    });
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(command) = commands.recv().await {
        match command {
            Command::Drive { first, end } => {
                let engine = engine.clone();
                let permits = Arc::clone(&permits);
                let tag = args.tag;
                tokio::spawn(async move {
                    for n in first..end {
                        let engine = engine.clone();
                        let permits = Arc::clone(&permits);
                        tokio::spawn(async move {
                            if let Err(message) = drive(&engine, &permits, n, tag).await {
                                say(&Report::Error { n, message });
                            }
                        });
                    }
                });
            }
            Command::Close => break,
        }
    }
    engine.close().await?;
    say(&Report::Closed);
    Ok(())
}

/// What to do after a call's error.
enum Next {
    /// Try again shortly: the shard is another process's, busy, or its
    /// storage out of reach.
    Retry,
    /// The engine closed: stop quietly.
    Stop,
    /// Never expected: report it.
    Fail(String),
}

fn next_after(what: &str, e: &Error) -> Next {
    match e {
        Error::NotOwner { .. } | Error::Busy { .. } | Error::Unavailable { .. } => Next::Retry,
        Error::Closed => Next::Stop,
        e => Next::Fail(format!("{what}: {e}")),
    }
}

/// A permit of [`IN_FLIGHT`], taken again after a back-off.
type Permit = tokio::sync::OwnedSemaphorePermit;

/// Takes a permit (`None`: the semaphore closed, which it never does).
async fn permit(permits: &Arc<Semaphore>) -> Option<Permit> {
    Arc::clone(permits).acquire_owned().await.ok()
}

/// Starts (or attaches to) run `n`, sends it `go`, waits for its result,
/// reporting each step. At most [`IN_FLIGHT`] runs hold a permit at once;
/// a run whose shard another process owns lets its permit go while it
/// waits to try again, so runs on the shards this child owns are never
/// held up behind runs it cannot drive (two children splitting the shards
/// would otherwise each fill their permits with the other's runs and
/// stall).
async fn drive(engine: &Engine, permits: &Arc<Semaphore>, n: u64, tag: u64) -> Result<(), String> {
    let id = workflow_id(n);
    let Some(mut held) = permit(permits).await else {
        return Ok(());
    };
    // Lets the permit go for a back-off, then takes one again.
    async fn back_off(held: Permit, permits: &Arc<Semaphore>) -> Option<Permit> {
        drop(held);
        tokio::time::sleep(POLL).await;
        permit(permits).await
    }
    loop {
        match engine.start_with(RUN, &id, &n, IdPolicy::Attach).await {
            Ok(h) => {
                say(&Report::Started {
                    n,
                    attached: h.run().attached,
                });
                break;
            }
            Err(e) => match next_after("start", &e) {
                Next::Retry => match back_off(held, permits).await {
                    Some(p) => held = p,
                    None => return Ok(()),
                },
                Next::Stop => return Ok(()),
                Next::Fail(m) => return Err(m),
            },
        }
    }
    loop {
        match engine.signal(&id, GO, &tag).await {
            Ok(()) => {
                say(&Report::Signalled(n));
                break;
            }
            // Finished: another child's signal let it through.
            Err(Error::Finished { .. }) => break,
            Err(e) => match next_after("signal", &e) {
                Next::Retry => match back_off(held, permits).await {
                    Some(p) => held = p,
                    None => return Ok(()),
                },
                Next::Stop => return Ok(()),
                Next::Fail(m) => return Err(m),
            },
        }
    }
    loop {
        match engine.result(RUN, &id).await {
            Ok(value) => {
                say(&Report::Result { n, value });
                return Ok(());
            }
            Err(e) => match next_after("result", &e) {
                Next::Retry => match back_off(held, permits).await {
                    Some(p) => held = p,
                    None => return Ok(()),
                },
                Next::Stop => return Ok(()),
                Next::Fail(m) => return Err(m),
            },
        }
    }
}

/// Registers the harness's workflow; its steps call `ledger` and return
/// `tag`.
fn register(engine: &Engine, tag: u64, ledger: &Arc<Ledger>) {
    let ledger = Arc::clone(ledger);
    engine.register(RUN, move |ctx: Ctx, n: u64| {
        let ledger = Arc::clone(&ledger);
        async move {
            let token = ctx.random();
            let charge_ledger = Arc::clone(&ledger);
            let charged = ctx
                .step("charge", move |step| {
                    let line = LedgerLine {
                        key: step.key().to_owned(),
                        n,
                        input: format!("charge {token}"),
                    };
                    let ledger = Arc::clone(&charge_ledger);
                    async move {
                        ledger.record(&line)?;
                        Ok(tag)
                    }
                })
                .await?;
            ctx.sleep("nap", Duration::from_millis(1 + n % 4)).await?;
            let go = ctx
                .wait_for(&GO)
                .await?
                .ok_or_else(|| Failure::new("the wait for go ended without it"))?;
            let shipped = ctx
                .step("ship", move |step| {
                    let line = LedgerLine {
                        key: step.key().to_owned(),
                        n,
                        input: format!("ship {token} {go}"),
                    };
                    let ledger = Arc::clone(&ledger);
                    async move {
                        ledger.record(&line)?;
                        Ok(tag)
                    }
                })
                .await?;
            let value = RunValue {
                n,
                token,
                go,
                charged,
                shipped,
            };
            Ok::<_, Failure>(value.to_string())
        }
    });
}
