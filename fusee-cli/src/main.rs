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
//! | `fusee compare [flags]` | the cross-backend comparison (`fusee-compare`; feature `compare`) |
//!
//! Every command prints a table for people, or JSON with `--json`.
//! `inspect`, `runs`, `show` and `verify` are read-only: the store is
//! opened through each backend's read-only entry point (`verify` modules),
//! under a shared lock, and no byte or file of it changes. A store an
//! engine holds is refused at once (locked), never waited for.
//!
//! Backends are Cargo features (`file`, `redb`, `rocksdb`, all on by
//! default, as is `compare`); a directory of a backend this build leaves
//! out is refused with the feature to enable.
//!
//! Exit status: 0 done (for `verify`: no problem; also when the reader of
//! stdout closed it early, as `| head` does), 1 `verify` found problems, 2
//! bad arguments, 3 the command could not do its work (no store, a store
//! an engine holds, another backend's store, damage that stops reading).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fusee::Backend;

mod compare;
mod disk_check;
mod fmt;
mod output;
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
        #[command(flatten)]
        filter: summary::FilterArgs,
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
    /// lists them). Needs the `compare` feature (on by default).
    Compare(compare::Args),
}

/// Why a command could not do its work; [`CliError::exit_code`] says how
/// it ends.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// The command line asks for something that cannot be: exit 2.
    #[error("{0}")]
    Usage(String),
    /// Reading the store failed.
    #[error("{}", describe(.0))]
    Inspect(#[from] fusee::inspect::InspectError),
    /// This build leaves out what the command needs (a backend, the
    /// comparison): the Cargo feature that adds it.
    #[error(
        "{what}, and this build of `fusee` was compiled without it: install it with \
         the `{feature}` feature (`cargo install --path fusee-cli --features {feature}`)"
    )]
    NotBuilt {
        /// What is missing, with the directory that needs it.
        what: String,
        /// The feature to enable.
        feature: &'static str,
    },
    /// Whoever reads stdout closed it (`| head`): end quietly, exit 0.
    #[error("stdout closed")]
    Closed,
    /// Anything else, said in words.
    #[error("{0}")]
    Other(String),
}

impl CliError {
    /// The exit status the README promises for this error.
    fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Closed => ExitCode::SUCCESS,
            CliError::Usage(_) => ExitCode::from(2),
            CliError::Inspect(_) | CliError::NotBuilt { .. } | CliError::Other(_) => {
                ExitCode::from(3)
            }
        }
    }
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

fn run(command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::Inspect(a) => summary::inspect(&a.dir, a.backend, a.json),
        Command::Runs { store, filter } => {
            summary::runs(&store.dir, store.backend, store.json, &filter.check()?)
        }
        Command::Show { store, id } => show::show(&store.dir, store.backend, store.json, &id),
        Command::Verify(a) => verify::verify(&a.dir, a.backend, a.json),
        Command::DiskCheck(a) => disk_check::run(&a),
        Command::Compare(a) => compare::run(a),
    }
}

fn main() -> ExitCode {
    // clap ends bad command lines with exit 2 itself (and `--help` with 0;
    // it ignores a closed pipe).
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            if !matches!(e, CliError::Closed) {
                output::say(&format!("fusee: {e}"));
            }
            e.exit_code()
        }
    }
}
