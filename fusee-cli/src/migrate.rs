//! `fusee migrate SRC DST`: a stopped engine's store moved to another
//! backend (a directory of `--to BACKEND`, or a PostgreSQL URL), checked
//! run by run, and made openable only once whole (`fusee::migrate`).
//! `fusee reshard SRC DST --shards N`: the same with a new shard count
//! (`fusee::migrate::reshard`).

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use fusee::migrate::{
    Event, MigrateReport, Source, migrate, reshard, reshard_in_place, reshard_taking_over,
};
use fusee::{Backend, StorageConfig};
use serde_json::json;

use crate::output::{emit, emit_json};
use crate::progress::Bar;
use crate::{CliError, fmt};

/// `fusee migrate`'s arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The store to read: its directory (its marker names the backend), or
    /// a PostgreSQL URL (postgresql://...). Only read; the engine must be
    /// stopped.
    source: String,
    /// Where to write: a new or empty directory, or a PostgreSQL URL. An
    /// interrupted migration's leftovers there are started over; a store
    /// is refused. `fusee reshard DIR --shards N` without it reshards the
    /// directory in place (the old store kept at DIR.before-reshard).
    destination: Option<String>,
    /// The destination directory's backend (file, redb, rocksdb).
    #[arg(long, default_value = "file")]
    to: Backend,
    /// The PostgreSQL schema of a URL source.
    #[arg(long, default_value = "fusee")]
    source_schema: String,
    /// The PostgreSQL schema of a URL destination.
    #[arg(long, default_value = "fusee")]
    schema: String,
    /// JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
}

/// `fusee reshard`'s arguments: `migrate`'s and the new shard count.
#[derive(clap::Args, Debug)]
pub(crate) struct ReshardArgs {
    #[command(flatten)]
    pub(crate) migrate: Args,
    /// The destination's shard count (1 to 4096).
    #[arg(long)]
    pub(crate) shards: u32,
    /// Take a PostgreSQL source from the engine processes still running on
    /// it: its shards' leases are taken (their writes are fenced from then
    /// on) and the source is retired for good; restart them on the
    /// destination with the new shard count.
    #[arg(long)]
    pub(crate) take_over: bool,
}

/// `fusee backup`'s arguments: `SRC DEST` for a stopped store, `--url URL
/// DEST` for a live engine's server.
#[derive(clap::Args, Debug)]
pub(crate) struct BackupArgs {
    /// The stopped store's directory, then a new or empty directory; with
    /// --url, the destination only (a directory on the server's machine).
    #[arg(num_args = 1..=2, required = true, value_name = "SRC DEST")]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    pub(crate) remote: crate::Remote,
    /// JSON on stdout instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

impl BackupArgs {
    /// The destination of a backup through `--url`.
    pub(crate) fn live_dest(&self) -> Result<&std::path::Path, CliError> {
        match self.paths.as_slice() {
            [dest] => Ok(dest),
            _ => Err(CliError::Usage(
                "backup --url takes the destination only: fusee backup --url URL DEST".into(),
            )),
        }
    }
}

/// Runs `fusee backup`: through the server with `--url`; else `migrate`
/// into the source's own backend, after telling a store a live engine
/// holds from any other refusal.
pub(crate) fn backup(a: &BackupArgs) -> Result<ExitCode, CliError> {
    if a.remote.url.is_some() {
        return crate::live::backup(a);
    }
    let [source, destination] = a.paths.as_slice() else {
        return Err(CliError::Usage(
            "backup takes the stopped store's directory and a new one: fusee backup SRC DEST \
             (or fusee backup --url URL DEST for a live engine's server)"
                .into(),
        ));
    };
    let a = Plain {
        source,
        destination,
        json: a.json,
    };
    let backend = fusee::inspect::backend_of(a.source)?;
    if matches!(backend, Backend::Memory | Backend::Postgres) {
        return Err(CliError::Usage(format!(
            "{} is a {backend} store: back up PostgreSQL with pg_dump (see \
             fusee-storage-postgres/DEPLOYMENT.md)",
            a.source.display()
        )));
    }
    let locked = std::fs::OpenOptions::new()
        .read(true)
        .open(a.source.join("LOCK"))
        .is_ok_and(|f| f.try_lock_shared().is_err());
    if locked {
        return Err(CliError::Other(format!(
            "an engine holds {}: this command reads stopped stores only; back a live \
             store up through its server (fusee backup --url URL DEST) or with \
             Engine::backup in the program that runs the engine (a consistent copy \
             while it runs)",
            a.source.display()
        )));
    }
    run(
        &Args {
            source: a.source.display().to_string(),
            destination: Some(a.destination.display().to_string()),
            to: backend,
            source_schema: "fusee".into(),
            schema: "fusee".into(),
            json: a.json,
        },
        None,
    )
}

/// A stopped store's backup: its directories.
struct Plain<'a> {
    source: &'a PathBuf,
    destination: &'a PathBuf,
    json: bool,
}

fn is_url(s: &str) -> bool {
    s.starts_with("postgresql://") || s.starts_with("postgres://")
}

/// How `run` reshards, if it does.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reshard {
    /// Into this many shards, the source's engine stopped.
    Stopped(u32),
    /// Into this many shards, taking the source from its running processes.
    TakingOver(u32),
}

impl ReshardArgs {
    /// What `fusee reshard` was asked to do.
    pub(crate) fn how(&self) -> Reshard {
        if self.take_over {
            Reshard::TakingOver(self.shards)
        } else {
            Reshard::Stopped(self.shards)
        }
    }
}

/// The progress function drawing `bar`: which shard is read, written or
/// compared, and how far.
fn progress_of(bar: &Bar) -> impl FnMut(Event) -> ControlFlow<()> + '_ {
    let mut shard_msg = String::new();
    move |e: Event| {
        match e {
            Event::Retired { shards } => bar.message(format!(
                "took the source's {shards} shards from its processes (retired)"
            )),
            Event::Planning { shard } => bar.message(format!("reading shard {shard}")),
            Event::Shard { shard, shards } => {
                bar.length(u64::from(shards));
                shard_msg = format!("writing shard {shard}");
                bar.message(shard_msg.clone());
            }
            Event::Frames(n) => bar.message(format!("{shard_msg}: {n} runs")),
            Event::LogRecords(n) => bar.message(format!("{shard_msg}: {n} log records")),
            Event::ShardDone => bar.inc(),
            Event::Checking { shard } => {
                bar.reset_position();
                shard_msg = format!("comparing shard {shard}");
                bar.message(shard_msg.clone());
            }
            Event::Checked(n) => bar.message(format!("{shard_msg}: {n} runs")),
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// Runs `fusee migrate`, or `fusee reshard` given how.
pub(crate) fn run(a: &Args, how: Option<Reshard>) -> Result<ExitCode, CliError> {
    let source = if is_url(&a.source) {
        Source::Config(Box::new(
            StorageConfig::postgres(&a.source).postgres_schema(&a.source_schema),
        ))
    } else {
        Source::Dir(PathBuf::from(&a.source))
    };
    let destination = match (&a.destination, how, &source) {
        (Some(d), _, _) => d.clone(),
        (None, Some(Reshard::Stopped(n)), Source::Dir(dir)) => return in_place(a, dir, n),
        (None, Some(_), _) => {
            return Err(CliError::Usage(
                "a reshard in place takes a stopped store's directory (fusee reshard DIR \
                 --shards N); a PostgreSQL store is resharded into another schema"
                    .into(),
            ));
        }
        (None, None, _) => {
            return Err(CliError::Usage(
                "migrate takes the source and the destination: fusee migrate SRC DST".into(),
            ));
        }
    };
    let target = if is_url(&destination) {
        StorageConfig::postgres(&destination).postgres_schema(&a.schema)
    } else {
        if matches!(a.to, Backend::Memory | Backend::Postgres) {
            return Err(CliError::Usage(format!(
                "--to {}: a directory's backend is file, redb or rocksdb (a PostgreSQL \
                 destination is a postgresql:// URL)",
                a.to
            )));
        }
        StorageConfig::new(a.to, &destination)
    };
    if !target.backend.compiled_in() {
        return Err(CliError::NotBuilt {
            what: format!("the destination is a {} store", target.backend),
            feature: target.backend.name(),
        });
    }
    let started = Instant::now();
    let bar = Bar::new(0, "shards");
    let mut progress = progress_of(&bar);
    let (verb, result) = match how {
        None => ("migrate", migrate(&source, &target, &mut progress)),
        Some(Reshard::Stopped(n)) => ("reshard", reshard(&source, &target, n, &mut progress)),
        Some(Reshard::TakingOver(n)) => match &source {
            Source::Config(config) => (
                "reshard",
                reshard_taking_over(config, &target, n, &mut progress),
            ),
            Source::Dir(_) => {
                return Err(CliError::Usage(
                    "--take-over needs a PostgreSQL source (postgresql://...): a directory's \
                     engine is stopped before a reshard"
                        .into(),
                ));
            }
        },
    };
    bar.finish();
    let report = result.map_err(|e| CliError::Other(format!("{verb}: {e}")))?;
    let secs = started.elapsed().as_secs_f64();
    if a.json {
        emit_json(&to_json(&report, secs))?;
    } else {
        emit(&table(&report, secs, &destination, how.is_some()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `fusee reshard DIR --shards N`: in place (`fusee::migrate::reshard_in_place`).
fn in_place(a: &Args, dir: &std::path::Path, shards: u32) -> Result<ExitCode, CliError> {
    let started = Instant::now();
    let bar = Bar::new(0, "shards");
    let mut progress = progress_of(&bar);
    let result = reshard_in_place(dir, shards, &mut progress);
    bar.finish();
    let report = result.map_err(|e| CliError::Other(format!("reshard: {e}")))?;
    let secs = started.elapsed().as_secs_f64();
    let before = report.before.display().to_string();
    let kept = format!("the old store is kept at {before}: delete it once satisfied");
    match (&report.reshard, a.json) {
        (Some(r), true) => {
            let mut j = to_json(r, secs);
            j["before"] = json!(before);
            emit_json(&j)?;
        }
        (None, true) => emit_json(&json!({ "swapped": true, "before": before, "seconds": secs }))?,
        (Some(r), false) => emit(&format!("{}{kept}\n", table(r, secs, &a.source, true)))?,
        (None, false) => emit(&format!(
            "an earlier run had resharded {} and was cut short: swapped now; {kept}\n",
            a.source
        ))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn to_json(r: &MigrateReport, secs: f64) -> serde_json::Value {
    json!({
        "shards": r.copy.shards,
        "copied": {
            "parked_runs": r.copy.parked,
            "loaded_runs": r.copy.loaded,
            "frames": r.copy.frames,
            "log_records": r.copy.log_records,
            "inbox_messages": r.copy.inbox_messages,
        },
        "checked": {
            "runs": r.check.runs,
            "journal_bytes": r.check.journal_bytes,
            "by_state": r.check.by_state,
            "equal": true,
        },
        "seconds": secs,
    })
}

fn table(r: &MigrateReport, secs: f64, dst: &str, resharded: bool) -> String {
    let mut t = fmt::Table::new(&["what", "count"]);
    let rows: Vec<(String, String)> = vec![
        ("shards".into(), r.copy.shards.to_string()),
        ("parked runs copied".into(), r.copy.parked.to_string()),
        ("loaded runs copied".into(), r.copy.loaded.to_string()),
        ("frames written".into(), r.copy.frames.to_string()),
        (
            "log records after checkpoints".into(),
            r.copy.log_records.to_string(),
        ),
        ("inbox messages".into(), r.copy.inbox_messages.to_string()),
        (
            "runs compared, journals equal".into(),
            r.check.runs.to_string(),
        ),
        (
            "journal bytes compared".into(),
            r.check.journal_bytes.to_string(),
        ),
    ];
    for (k, v) in rows {
        t.row([k, v]);
    }
    for (state, n) in &r.check.by_state {
        t.row([format!("  {state}"), n.to_string()]);
    }
    t.row(["seconds".to_string(), format!("{secs:.1}")]);
    if resharded {
        format!(
            "resharded into {dst} ({} shards): every run moved, its journal equal to the \
             source's with runs renumbered\n{t}\n",
            r.copy.shards
        )
    } else {
        format!("migrated into {dst}: every run's journal equal in both stores\n{t}\n")
    }
}
