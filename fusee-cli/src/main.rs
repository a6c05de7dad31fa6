//! `fusee`: look inside a Fusee data directory, check it, check a disk,
//! compare backends.
//!
//! | command | what it does |
//! |---|---|
//! | `fusee inspect DIR` | the backend, shards, runs by status, log and store sizes, last checkpoint per shard |
//! | `fusee runs DIR [--status S] [--type T] [--limit N]` | runs, newest first |
//! | `fusee show DIR ID` | one run's journal, record by record (`--json`: the `fusee-journal` format, version 1) |
//! | `fusee verify DIR` | every byte a recovery reads, every checksum, offline; exit 1 on any problem |
//! | `fusee disk-check DIR` | write-then-flush latency per flush method and size |
//! | `fusee compare [flags]` | the cross-backend comparison (`fusee-compare`) |
//!
//! Every command prints a table for people, or JSON with `--json`.
//! `inspect`, `runs`, `show` and `verify` are read-only: the store is
//! opened through each backend's read-only entry point (`verify` modules),
//! under a shared lock, and no byte or file of it changes. A store an
//! engine holds is refused at once (locked), never waited for.
//!
//! Exit status: 0 done (for `verify`: no problem), 1 `verify` found
//! problems, 2 bad arguments, 3 the command could not do its work (no
//! store, a store an engine holds, another backend's store, damage that
//! stops reading).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fusee::Backend;

mod compare;
mod disk_check;
mod fmt;
mod progress;
mod show;
mod store;
mod summary;
mod verify;

/// What the command line asked for.
#[derive(Parser, Debug)]
#[command(
    name = "fusee",
    version,
    about = "Look inside a Fusee data directory, check it, check a disk, compare backends",
    after_help = "Exit status: 0 done (verify: no problem), 1 verify found problems, \
                  2 bad arguments, 3 the command could not do its work.\n\
                  inspect, runs, show and verify never change the store."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options every store command takes.
#[derive(clap::Args, Debug)]
struct StoreArgs {
    /// The store's directory.
    dir: PathBuf,
    /// Refuse the directory unless it holds a store of this backend
    /// (file, redb, rocksdb); by default the directory's marker says.
    #[arg(long)]
    backend: Option<Backend>,
    /// JSON on stdout instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The backend, shards, runs by status, log and store sizes, and each
    /// shard's last checkpoint.
    Inspect(StoreArgs),
    /// Runs, newest first.
    Runs {
        #[command(flatten)]
        store: StoreArgs,
        /// Only runs in this state: running, waiting, parked, finished, or
        /// a finished status (ok, failed, cancelled, timed-out, terminated,
        /// continued-as-new, reset).
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this workflow type.
        #[arg(long = "type")]
        wtype: Option<String>,
        /// At most this many runs.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// One run's journal (the latest run of workflow ID `ID`), record by
    /// record. With --json: the `fusee-journal` format, version 1, which
    /// round-trips every record exactly.
    Show {
        #[command(flatten)]
        store: StoreArgs,
        /// The workflow ID.
        id: String,
    },
    /// Reads every byte a recovery would read and checks every checksum,
    /// without changing anything; each problem is named (file, offset,
    /// LSN) and the exit status is 1 if there is any.
    Verify(StoreArgs),
    /// Times write-then-flush on this disk for each flush method
    /// (fdatasync, fsync, O_DSYNC writes) and size (512 B, 4 KiB, 64 KiB,
    /// 1 MiB): p50, p99, p99.9, max, and which method is fastest.
    DiskCheck(disk_check::Args),
    /// The cross-backend comparison, as `fusee-compare` runs it (its flags
    /// follow: --quick, --backends, --out, ...; `fusee compare -- --help`
    /// lists them).
    Compare(compare::Args),
}

/// Why a command could not do its work.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Reading the store failed.
    #[error("{}", describe(.0))]
    Inspect(#[from] fusee::inspect::InspectError),
    /// Anything else, said in words.
    #[error("{0}")]
    Other(String),
}

/// The inspect error, with what to do about a lock.
fn describe(e: &fusee::inspect::InspectError) -> String {
    use fusee::inspect::InspectError;
    match e {
        InspectError::Storage {
            error: fusee::StorageError::Locked { path },
            ..
        } => format!(
            "{path} is held by a running engine (its lock is taken): stop the engine, \
             or look at a copy of the directory"
        ),
        other => other.to_string(),
    }
}

/// Prints `value` as pretty JSON on stdout.
pub(crate) fn print_json(value: &serde_json::Value) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => println!("{s}"),
        // A Value always serialises; say so rather than print nothing.
        Err(e) => eprintln!("fusee: cannot write JSON: {e}"),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Inspect(a) => summary::inspect(&a.dir, a.backend, a.json),
        Command::Runs {
            store,
            status,
            wtype,
            limit,
        } => summary::runs(
            &store.dir,
            store.backend,
            store.json,
            &summary::Filter {
                status,
                wtype,
                limit,
            },
        ),
        Command::Show { store, id } => show::show(&store.dir, store.backend, store.json, &id),
        Command::Verify(a) => verify::verify(&a.dir, a.backend, a.json),
        Command::DiskCheck(a) => disk_check::run(&a),
        Command::Compare(a) => compare::run(a),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fusee: {e}");
            ExitCode::from(3)
        }
    }
}
