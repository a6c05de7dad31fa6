//! `fusee`: look inside a Fusee data directory, check it, check a disk,
//! compare backends.
//!
//! | command | what it does |
//! |---|---|
//! | `fusee inspect DIR` | the backend, shards, runs by status, log and store sizes, last checkpoint per shard |
//! | `fusee runs DIR [--status S] [--type T] [--attr COND]... [--limit N]` | runs, newest first (`--attr customer_id=42`, `--attr amount>float:100`: search attributes) |
//! | `fusee show DIR ID` | one run's journal, record by record (`--json`: the `fusee-journal` format, version 1) |
//! | `fusee verify DIR` | every byte a recovery reads, every checksum, offline; exit 1 on any problem |
//! | `fusee disk-check DIR` | write-then-flush latency per flush method and size |
//! | `fusee check DIR` | every unfinished run replayed against workflow code, read-only (the stock binary has none: an embedder builds its own with `fusee::check::main`) |
//! | `fusee migrate SRC DST [--to BACKEND]` | a stopped engine's store moved to another backend (a directory or a PostgreSQL URL), checked run by run; the destination opens only once whole |
//! | `fusee reshard SRC [DST] --shards N [--to BACKEND] [--take-over]` | a stopped engine's store copied into a new store of N shards: runs moved to the shard their ID hashes to, renumbered, links and messages in flight rewritten, checked run by run; the destination opens only once whole; without DST, in place (the directories swapped in one step); `--take-over`: a PostgreSQL store whose processes still run, fenced out and retired first |
//! | `fusee compare [flags]` | the cross-backend comparison (`fusee-compare`; feature `compare`) |
//! | `fusee inspect/runs/show --url URL` | the same, asked of a live engine's server (`fusee-server`) |
//! | `fusee start/signal/cancel/terminate/pause/resume/reset --url URL ...` | act on a live engine's runs |
//!
//! Every command prints a table for people, or JSON with `--json`; with
//! `--url` the same renderers print what the server answered (see
//! `live`).
//! `inspect`, `runs`, `show` and `verify` are read-only: the store is
//! opened through each backend's read-only entry point (`verify` modules),
//! under a shared lock, and no byte or file of it changes. A store an
//! engine holds is refused at once (locked), never waited for.
//!
//! Backends are Cargo features (`file`, `redb`, `rocksdb`, all on by
//! default, as are `compare` and `live`); a directory of a backend this
//! build leaves out is refused with the feature to enable.
//!
//! Exit status: 0 done (for `verify`: no problem; also when the reader of
//! stdout closed it early, as `| head` does), 1 `verify` found problems, 2
//! bad arguments (`--token` without `--url` among them; also a request a
//! server calls malformed, HTTP 400), 3
//! the command could not do its work (no store, a store an engine holds,
//! another backend's store, damage that stops reading; a server that
//! refused or could not be reached).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fusee::Backend;

mod compare;
mod disk_check;
mod fmt;
#[cfg(feature = "live")]
mod live;
mod migrate;
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

/// Where `inspect` and `runs` read: a store's directory, or a live
/// engine's server (`--url`).
#[derive(clap::Args, Debug)]
struct ReadArgs {
    /// The store's directory (not with --url).
    #[arg(required_unless_present = "url", conflicts_with = "url")]
    dir: Option<PathBuf>,
    /// Refuse the directory unless it holds a store of this backend
    /// (file, redb, rocksdb); by default the directory's marker says.
    #[arg(long, conflicts_with = "url")]
    backend: Option<Backend>,
    #[command(flatten)]
    remote: Remote,
    /// JSON on stdout instead of tables.
    #[arg(long)]
    json: bool,
}

/// A live engine's server to ask instead of a directory.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct Remote {
    /// A live engine's server (fusee-server), such as
    /// http://127.0.0.1:7700, instead of a directory.
    #[arg(long, value_name = "URL")]
    pub(crate) url: Option<String>,
    /// The server's bearer token (its read token for inspect, runs and
    /// show; its admin token for the verbs). Default: $FUSEE_TOKEN, which
    /// keeps it out of the process list.
    #[arg(long, value_name = "TOKEN", requires = "url")]
    pub(crate) token: Option<String>,
}

impl Remote {
    /// Refuses `--token` without `--url` (exit 2): it would be silently
    /// ignored on a directory. Checked here, not only by clap's `requires`,
    /// which `inspect` and `runs` skip when their directory is given (it
    /// conflicts with `--url`).
    pub(crate) fn check(&self) -> Result<(), CliError> {
        match (&self.url, &self.token) {
            (None, Some(_)) => Err(CliError::Usage(
                "--token is the token of a live engine's server: give its --url too \
                 (a directory is read without one)"
                    .into(),
            )),
            _ => Ok(()),
        }
    }
}

/// What a verb on a live engine's run takes besides its own arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct VerbArgs {
    #[command(flatten)]
    remote: Remote,
    /// What was done as JSON on stdout instead of words.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The backend, shards, runs by status, log and store sizes, and each
    /// shard's last checkpoint; with --url, a live engine's shards
    /// (ownership, durable LSN, flushes) and runs by status.
    Inspect(ReadArgs),
    /// Runs, newest first.
    Runs {
        #[command(flatten)]
        read: ReadArgs,
        #[command(flatten)]
        filter: summary::FilterArgs,
    },
    /// One run's journal (the latest run of workflow ID `ID`), record by
    /// record: `fusee show DIR ID`, or `fusee show --url URL ID`. With
    /// --json: the `fusee-journal` format, version 1, which round-trips
    /// every record exactly.
    #[command(override_usage = "fusee show [OPTIONS] DIR ID\n       \
                                fusee show [OPTIONS] --url URL ID")]
    Show {
        /// The store's directory, then the workflow ID; with --url, the
        /// workflow ID only.
        #[arg(value_name = "[DIR] ID", num_args = 1..=2, required = true)]
        args: Vec<String>,
        /// Refuse the directory unless it holds a store of this backend.
        #[arg(long, conflicts_with = "url")]
        backend: Option<Backend>,
        #[command(flatten)]
        remote: Remote,
        /// JSON on stdout instead of tables.
        #[arg(long)]
        json: bool,
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
    /// Moves a stopped engine's store to another backend: SRC a store's
    /// directory or a PostgreSQL URL, DST a new directory (--to file, redb
    /// or rocksdb) or a PostgreSQL URL. Every run, timer, message, ID and
    /// run number is carried; the two stores are then compared run by run
    /// (journals byte-equal), and only then does the destination open. The
    /// source is only read; interrupted, the destination is refused at
    /// open until the command is run again.
    Migrate(migrate::Args),
    /// Replays every unfinished run of a stopped engine's store against
    /// workflow code, read-only, and names each run whose code departs
    /// from its journal (exit 1 if any). The code is your application's:
    /// this stock binary holds none, so it only lists the runs it could not
    /// check; build your own `check` binary with `fusee::check::main` and
    /// your registrations (see the README, "Checking runs against new
    /// code").
    Check {
        /// The store's directory.
        dir: PathBuf,
        /// The report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Copies a stopped engine's store into a new store of --shards N
    /// shards (SRC and DST as for migrate; DST may be another backend):
    /// every run moved to the shard its workflow ID hashes to under N and
    /// renumbered there (workflow IDs stay; run numbers change), its
    /// parent/child links and the messages in flight rewritten. The
    /// result is checked run by run and only then opens; open it with
    /// N shards. The source is only read; interrupted, the destination is
    /// refused at open until the command is run again. `fusee reshard DIR
    /// --shards N` reshards in place: the new store swapped into DIR in one
    /// step, the old one kept at DIR.before-reshard.
    /// With --take-over, a PostgreSQL source whose processes still run is
    /// taken from them first (their writes fenced, the source retired for
    /// good); restart them on DST with N shards.
    Reshard(migrate::ReshardArgs),
    /// Backs up a store. `fusee backup SRC DEST`: a stopped engine's
    /// store, written by `migrate` into a new directory of the same backend
    /// and checked run by run. `fusee backup --url URL DEST`: a live
    /// engine, through its server (admin token): a consistent copy while it
    /// runs, into DEST on the server's machine. A store a live engine holds
    /// is locked: go through its server, or `Engine::backup` in the program
    /// that runs it.
    Backup(migrate::BackupArgs),
    #[command(flatten)]
    Verb(Verb),
}

/// The verbs on a live engine's runs (`--url`, admin token).
#[derive(Subcommand, Debug)]
pub(crate) enum Verb {
    /// Starts a run of workflow type TYPE with workflow ID ID and INPUT
    /// (JSON; default null); answers once the start is durable.
    Start {
        /// The workflow type (a registered one).
        #[arg(value_name = "TYPE")]
        workflow: String,
        /// The workflow ID.
        id: String,
        /// The input, as JSON (a string with its quotes: '"text"').
        input: Option<String>,
        /// If the ID exists: new-only (refuse; the default), attach, or
        /// reuse-after-finish.
        #[arg(long)]
        policy: Option<String>,
        /// The version of the workflow's code to start (default: the
        /// newest the engine has registered).
        #[arg(long, value_name = "N")]
        code_version: Option<u32>,
        #[command(flatten)]
        args: VerbArgs,
    },
    /// Sends signal NAME with PAYLOAD (JSON; default null) to workflow ID
    /// ID; answers once it is durable.
    Signal {
        /// The workflow ID.
        id: String,
        /// The signal's name.
        name: String,
        /// Its payload, as JSON.
        payload: Option<String>,
        /// A deduplication key: sent again with the same key (a retry
        /// after a lost reply), the signal is recorded once.
        #[arg(long)]
        dedup: Option<String>,
        #[command(flatten)]
        args: VerbArgs,
    },
    /// Asks workflow ID ID's run to cancel (its code sees the
    /// cancellation and may compensate; without --grace it may also
    /// swallow it).
    Cancel {
        /// The workflow ID.
        id: String,
        /// The reason recorded.
        #[arg(long, default_value = "operator")]
        reason: String,
        /// Terminate the run with the reason if it has not ended this long
        /// after the cancel (e.g. 500ms, 30s, 5m, 2h): a cancel its code
        /// cannot swallow.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        grace: Option<std::time::Duration>,
        #[command(flatten)]
        args: VerbArgs,
    },
    /// Ends workflow ID ID's run at once, as terminated.
    Terminate {
        /// The workflow ID.
        id: String,
        /// The reason recorded.
        #[arg(long, default_value = "operator")]
        reason: String,
        #[command(flatten)]
        args: VerbArgs,
    },
    /// Pauses workflow ID ID's run: no new step attempt starts.
    Pause {
        /// The workflow ID.
        id: String,
        #[command(flatten)]
        args: VerbArgs,
    },
    /// Lets a paused run start steps again.
    Resume {
        /// The workflow ID.
        id: String,
        #[command(flatten)]
        args: VerbArgs,
    },
    /// Restarts workflow ID ID from its step STEP (that step and every
    /// record after it run again, as a new run).
    Reset {
        /// The workflow ID.
        id: String,
        /// The step to run again.
        step: String,
        /// The reason recorded.
        #[arg(long, default_value = "operator")]
        reason: String,
        /// Only if the ID's current run is this one (safe to repeat).
        #[arg(long)]
        run: Option<u64>,
        #[command(flatten)]
        args: VerbArgs,
    },
}

impl Verb {
    /// The server and output options.
    pub(crate) fn remote(&self) -> (&Remote, bool) {
        let a = match self {
            Verb::Start { args, .. }
            | Verb::Signal { args, .. }
            | Verb::Cancel { args, .. }
            | Verb::Terminate { args, .. }
            | Verb::Pause { args, .. }
            | Verb::Resume { args, .. }
            | Verb::Reset { args, .. } => args,
        };
        (&a.remote, a.json)
    }
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
    /// A live engine's server refused: its kind and message (exit 2 for a
    /// request it calls malformed, HTTP 400; else 3).
    #[error("the server refused: {kind}: {message} (HTTP {status})")]
    #[cfg_attr(not(feature = "live"), allow(dead_code))]
    Server {
        /// The HTTP status.
        status: u16,
        /// The error's kind (`not_found`, `unknown_workflow`, ...).
        kind: String,
        /// Its message.
        message: String,
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
            CliError::Usage(_) | CliError::Server { status: 400, .. } => ExitCode::from(2),
            CliError::Server { .. } => ExitCode::from(3),
            CliError::Inspect(_) | CliError::NotBuilt { .. } | CliError::Other(_) => {
                ExitCode::from(3)
            }
        }
    }
}

/// The inspect error, with what to do about a lock.
/// A duration as people write it on a command line: a whole number and
/// a unit (`ms`, `s`, `m`, `h`), e.g. `30s`.
pub(crate) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let bad = || format!("{text:?} is not a duration such as 500ms, 30s, 5m or 2h");
    let n: u64 = number.parse().map_err(|_| bad())?;
    let ms_per = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    n.checked_mul(ms_per)
        .map(std::time::Duration::from_millis)
        .ok_or_else(bad)
}

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

/// Live mode's entry points, or, in a build without the `live` feature,
/// its refusal.
#[cfg(not(feature = "live"))]
mod live {
    use std::process::ExitCode;

    use crate::summary::Filter;
    use crate::{CliError, Remote, Verb};

    fn refuse() -> Result<ExitCode, CliError> {
        Err(CliError::NotBuilt {
            what: "--url talks to a live engine's server".into(),
            feature: "live",
        })
    }

    pub(crate) fn runs(_: &Remote, _: bool, _: &Filter) -> Result<ExitCode, CliError> {
        refuse()
    }

    pub(crate) fn inspect(_: &Remote, _: bool) -> Result<ExitCode, CliError> {
        refuse()
    }

    pub(crate) fn show(_: &Remote, _: bool, _: &str) -> Result<ExitCode, CliError> {
        refuse()
    }

    pub(crate) fn verb(_: Verb) -> Result<ExitCode, CliError> {
        refuse()
    }

    pub(crate) fn backup(_: &crate::migrate::BackupArgs) -> Result<ExitCode, CliError> {
        refuse()
    }
}

/// `DIR ID` offline, `ID` with --url.
fn show_target(args: Vec<String>, live: bool) -> Result<(Option<PathBuf>, String), CliError> {
    let mut args = args.into_iter();
    match (args.next(), args.next(), live) {
        (Some(id), None, true) => Ok((None, id)),
        (Some(dir), Some(id), false) => Ok((Some(PathBuf::from(dir)), id)),
        (_, _, true) => Err(CliError::Usage(
            "show --url takes the workflow ID only (no directory)".into(),
        )),
        _ => Err(CliError::Usage(
            "show takes the store's directory and the workflow ID: fusee show DIR ID".into(),
        )),
    }
}

impl Command {
    /// The server options of a command that takes them.
    fn remote(&self) -> Option<&Remote> {
        match self {
            Command::Inspect(a) | Command::Runs { read: a, .. } => Some(&a.remote),
            Command::Show { remote, .. } => Some(remote),
            Command::Backup(a) => Some(&a.remote),
            Command::Verb(v) => Some(v.remote().0),
            Command::Verify(_)
            | Command::DiskCheck(_)
            | Command::Compare(_)
            | Command::Migrate(_)
            | Command::Check { .. }
            | Command::Reshard(_) => None,
        }
    }
}

fn run(command: Command) -> Result<ExitCode, CliError> {
    if let Some(remote) = command.remote() {
        remote.check()?;
    }
    match command {
        Command::Inspect(a) => match a.dir {
            Some(dir) => summary::inspect(&dir, a.backend, a.json),
            None => live::inspect(&a.remote, a.json),
        },
        Command::Runs { read, filter } => {
            let filter = filter.check()?;
            match read.dir {
                Some(dir) => summary::runs(&dir, read.backend, read.json, &filter),
                None => live::runs(&read.remote, read.json, &filter),
            }
        }
        Command::Show {
            args,
            backend,
            remote,
            json,
        } => match show_target(args, remote.url.is_some())? {
            (Some(dir), id) => show::show(&dir, backend, json, &id),
            (None, id) => live::show(&remote, json, &id),
        },
        Command::Verify(a) => verify::verify(&a.dir, a.backend, a.json),
        Command::DiskCheck(a) => disk_check::run(&a),
        Command::Compare(a) => compare::run(a),
        Command::Migrate(a) => migrate::run(&a, None),
        Command::Reshard(a) => migrate::run(&a.migrate, Some(a.how())),
        Command::Backup(a) => migrate::backup(&a),
        Command::Check { dir, json } => {
            eprintln!(
                "note: this fusee binary holds no workflow code: every unfinished run is listed \
                 as unchecked. Build your own check binary with fusee::check::main and your \
                 registrations to replay them."
            );
            Ok(fusee::check::run(&dir, json, |_| {}))
        }
        Command::Verb(v) => live::verb(v),
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
