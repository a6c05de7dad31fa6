//! The comparison run: the command line, the choice of subjects, and the
//! loop that measures each one in its own directory and builds the
//! [`Report`].

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::backend::backends;
use crate::engine::EngineSubject;
use crate::engine::measure::measure_engines;
use crate::engine::peers::{PeerKind, PeersPlan, measure_peers};
use crate::engine::report::{EngineReport, EngineResult};
use crate::error::{BenchError, Result};
use crate::floor::Floor;
use crate::machine::{Machine, utc_now};
use crate::measure::{measure_all, table_bytes_per_run};
use crate::plan::Plan;
use crate::progress::Progress;
use crate::report::{Report, SubjectResult};
use crate::sqlite::Sqlite;
use crate::target::Subject;
use crate::workload::{Frames, LogRecords};

/// The command-line help.
pub const USAGE: &str = "\
fusee-compare: measure Fusee's storage backends and engine against the disk's floor,
SQLite and a peer engine (duroxide)

usage: fusee-compare [--quick] [--backends a,b,...] [--dir PATH] [--out DIR]
                     [--records N] [--samples N] [--frames N] [--parked N] [--seed N]
                     [--steps N] [--runs N] [--timers N]
                     [--reminders N] [--no-engine | --engine-only] [--quiet]
       fusee-compare --peers temporal,restate,dbos-sqlite,dbos-postgres [--quick] [--dir PATH] [--out DIR]

  --quick        the quick plan (under two minutes); default: the full plan
  --backends L   subjects to measure, comma-separated, from: memory, file, redb, rocksdb
                 (those compiled in), sqlite (the storage peer), duroxide (the engine
                 peer), floor. The floor is always measured.
                 Default: every backend compiled in, sqlite, duroxide and the floor
  --dir PATH     where the data files go (a fresh subdirectory, removed afterwards);
                 put it on the disk you want to judge. Default: the system temp dir
  --out DIR      where compare.csv, compare.md and compare.svg go
                 (default: target/fusee-compare)
  --records N    log records written then recovered (default 1000000)
  --samples N    single-record durable appends timed; batch flush counts scale with it
  --frames N     run-store frames written and read
  --parked N     parked runs for the table-memory figure and the engine's parked workload
  --seed N       seed of the random read order and timer times
  --steps N      steps of the engine's chain workflow
  --runs N       workflows of the engine's fanout (and of its recovery)
  --timers N     workflows of the engine's timers workload
  --reminders N  reminders of the engine's SIGKILLed reminder service (0: not run)
  --no-engine    the storage measurements only
  --engine-only  the engine workloads only
  --quiet        no progress on stderr
  --peers L      instead of the sections above: the engines users would pick instead, from
                 temporal, restate, dbos-sqlite, dbos-postgres (installed by scripts/peers.sh
                 under target/peers/), each server on 127.0.0.1, taking turns with Fusee on file
                 (and on PostgreSQL beside DBOS on it, the server of FUSEE_PG_SINGLE_URL or
                 FUSEE_PG_URL: `source scripts/postgres.sh`); fewer workflows for the slow peers
                 (the report says which counts each ran); their flush calls counted with strace
";

/// What the command line asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The workload.
    pub plan: Plan,
    /// Subjects named by `--backends`; `None` means all.
    pub subjects: Option<Vec<String>>,
    /// Parent of the data directory.
    pub dir: PathBuf,
    /// Output directory.
    pub out: PathBuf,
    /// No progress lines.
    pub quiet: bool,
    /// `--engine-only`: skip the storage measurements.
    pub engine_only: bool,
    /// `--help` was given: print [`USAGE`] and stop.
    pub help: bool,
    /// `--peers`: the engine peers to measure instead of the other sections.
    pub peers: Option<Vec<PeerKind>>,
    /// The command line as typed, for the report.
    pub command: String,
}

fn number(flag: &str, v: Option<String>) -> Result<u64> {
    let v = v.ok_or_else(|| BenchError::Usage(format!("{flag} needs a value")))?;
    let v = v.replace('_', "");
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    parsed.map_err(|_| BenchError::Usage(format!("{flag}: not a number: {v}")))
}

/// Parses the command line (`args` without the program name; `program` is
/// used in the recorded command).
pub fn parse_args(program: &str, args: Vec<String>) -> Result<Options> {
    let command = std::iter::once(program.to_string())
        .chain(args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    let mut quick = false;
    let mut subjects = None;
    let mut dir = std::env::temp_dir();
    let mut out = PathBuf::from("target/fusee-compare");
    let (mut records, mut samples, mut frames, mut parked, mut seed) =
        (None, None, None, None, None);
    let mut quiet = false;
    let mut help = false;
    let (mut no_engine, mut engine_only) = (false, false);
    let (mut steps, mut runs, mut timers, mut reminders) = (None, None, None, None);
    let mut peers = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--quiet" => quiet = true,
            "--no-engine" => no_engine = true,
            "--engine-only" => engine_only = true,
            "--steps" => steps = Some(number(&a, it.next())?),
            "--runs" => runs = Some(number(&a, it.next())?),
            "--timers" => timers = Some(number(&a, it.next())?),
            "--reminders" => reminders = Some(number(&a, it.next())?),
            "--help" | "-h" => help = true,
            "--peers" => {
                let list = it
                    .next()
                    .ok_or_else(|| BenchError::Usage("--peers needs a list".into()))?;
                peers = Some(PeerKind::parse_list(&list).map_err(BenchError::Usage)?);
            }
            "--backends" => {
                let list = it
                    .next()
                    .ok_or_else(|| BenchError::Usage("--backends needs a list".into()))?;
                subjects = Some(
                    list.split(',')
                        .map(|s| s.trim().to_lowercase())
                        .filter(|s| !s.is_empty())
                        .collect(),
                );
            }
            "--dir" => {
                dir = it
                    .next()
                    .map(PathBuf::from)
                    .ok_or_else(|| BenchError::Usage("--dir needs a path".into()))?;
            }
            "--out" => {
                out = it
                    .next()
                    .map(PathBuf::from)
                    .ok_or_else(|| BenchError::Usage("--out needs a path".into()))?;
            }
            "--records" => records = Some(number(&a, it.next())?),
            "--samples" => samples = Some(number(&a, it.next())?),
            "--frames" => frames = Some(number(&a, it.next())?),
            "--parked" => parked = Some(number(&a, it.next())?),
            "--seed" => seed = Some(number(&a, it.next())?),
            other => {
                return Err(BenchError::Usage(format!(
                    "unknown argument {other:?} (try --help)"
                )));
            }
        }
    }
    let mut plan = if quick { Plan::quick() } else { Plan::full() };
    if let Some(s) = samples {
        plan = plan.with_samples(s);
    }
    if let Some(n) = records {
        plan.recovery_records = n.max(1);
    }
    if let Some(n) = frames {
        plan.frames = n.max(1);
    }
    if let Some(n) = parked {
        plan.parked_runs = n.max(1);
        plan.engine.parked = n.max(1);
    }
    let count = |flag: &str, n: u64| {
        u32::try_from(n.max(1)).map_err(|_| BenchError::Usage(format!("{flag}: {n} is too many")))
    };
    if let Some(n) = steps {
        // A chain of one step has no gap between steps to time.
        plan.engine.chain_steps = count("--steps", n)?.max(2);
    }
    if let Some(n) = runs {
        // The recovery kills its child at half the runs: at least one.
        plan.engine.fanout_runs = count("--runs", n)?.max(2);
    }
    if let Some(n) = timers {
        plan.engine.timers = count("--timers", n)?;
        plan.engine.peer_timers = plan.engine.peer_timers.min(plan.engine.timers);
    }
    if let Some(n) = reminders {
        plan.engine.reminders = n;
    }
    if no_engine && engine_only {
        return Err(BenchError::Usage(
            "--no-engine and --engine-only exclude each other".into(),
        ));
    }
    plan.engine.enabled = !no_engine;
    if let Some(s) = seed {
        plan.seed = s;
    }
    Ok(Options {
        plan,
        subjects,
        dir,
        out,
        quiet,
        engine_only,
        help,
        peers,
        command,
    })
}

/// Every subject this build can measure, in measurement order: the floor,
/// the backends ([`backends`]), the SQLite peer.
pub fn all_subjects() -> Vec<Box<dyn Subject>> {
    let mut v: Vec<Box<dyn Subject>> = vec![Box::new(Floor)];
    v.extend(backends());
    v.push(Box::new(Sqlite));
    v
}

/// The storage subjects `names` selects (plus the floor), in measurement
/// order; a name neither a storage nor an engine subject is an error
/// listing the known ones (engine-only names, such as `duroxide`, select
/// no storage subject).
pub fn select(names: Option<&[String]>) -> Result<Vec<Box<dyn Subject>>> {
    let all = all_subjects();
    let Some(names) = names else {
        return Ok(all);
    };
    for n in names {
        if !all.iter().any(|s| s.name() == n) && EngineSubject::parse(n).is_none() {
            let mut known: Vec<String> = all.iter().map(|s| s.name().to_string()).collect();
            for e in EngineSubject::all() {
                if !known.iter().any(|k| k == e.name()) {
                    known.push(e.name().to_string());
                }
            }
            return Err(BenchError::Usage(format!(
                "no subject {n:?} in this build; known: {} \
                 (a backend needs its fusee-benches feature and its crate's storage)",
                known.join(", ")
            )));
        }
    }
    Ok(all
        .into_iter()
        .filter(|s| s.name() == "floor" || names.iter().any(|n| n == s.name()))
        .collect())
}

/// The engine subjects `names` selects (plus the floor), in measurement
/// order: every one of this build when `names` is `None`. Storage-only
/// names (`sqlite`) select none.
pub fn select_engines(names: Option<&[String]>) -> Vec<EngineSubject> {
    EngineSubject::all()
        .into_iter()
        .filter(|e| {
            *e == EngineSubject::Floor
                || names.is_none_or(|names| names.iter().any(|n| n == e.name()))
        })
        .collect()
}

/// Removes a directory tree on drop, so a failed run leaves no data behind.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        // Best effort: a leftover temp directory is not worth failing for.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fresh_dir(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(BenchError::io("clearing", path, e)),
    }
    std::fs::create_dir_all(path).map_err(|e| BenchError::io("creating", path, e))
}

/// Runs the comparison `opts` asks for and returns its report (nothing is
/// written: see [`Report::write`]).
pub fn run(opts: &Options) -> Result<Report> {
    let started = Instant::now();
    let date = utc_now();
    let progress = Progress::new(opts.quiet);
    let subjects = select(opts.subjects.as_deref())?;
    let base = opts
        .dir
        .join(format!("fusee-compare-{}", std::process::id()));
    fresh_dir(&base)?;
    let scratch = Scratch(base);
    let machine = Machine::probe(&scratch.0);
    progress.line(format_args!("{}", opts.plan.describe()));
    progress.line(format_args!(
        "data in {} ({}, {})",
        machine.dir, machine.disk, machine.filesystem
    ));
    if machine.profile == "debug" {
        progress.line(format_args!(
            "warning: debug build; figures are not comparable (use --release)"
        ));
    }
    let mut dirs = Vec::with_capacity(subjects.len());
    for s in &subjects {
        let dir = scratch.0.join(s.name());
        fresh_dir(&dir)?;
        dirs.push(dir);
    }
    if let Some(peers) = &opts.peers {
        let plan = PeersPlan::new(opts.plan.quick);
        let dir = scratch.0.join("peers");
        fresh_dir(&dir)?;
        let report = measure_peers(peers, &plan, &dir, &progress)?;
        return Ok(Report {
            date,
            command: opts.command.clone(),
            machine,
            plan: opts.plan.clone(),
            record_bytes: LogRecords::new().mean_len(),
            frame_bytes: 0.0,
            subjects: Vec::new(),
            table_bytes_per_run: 0.0,
            seconds: started.elapsed().as_secs_f64(),
            engine: None,
            peers: Some(report),
        });
    }
    let refs: Vec<&dyn Subject> = subjects.iter().map(|s| s.as_ref()).collect();
    let figures = if opts.engine_only {
        Vec::new()
    } else {
        measure_all(&refs, &opts.plan, &dirs, &progress)?
    };
    let results = subjects
        .iter()
        .zip(figures)
        .map(|(s, figures)| SubjectResult {
            name: s.name().to_string(),
            role: s.role(),
            durable: s.durable(),
            flush_method: s.flush_method(),
            figures,
        })
        .collect();
    let engines = select_engines(opts.subjects.as_deref());
    // The floor alone is no comparison.
    let engine = if opts.plan.engine.enabled && engines.len() > 1 {
        let mut dirs = Vec::with_capacity(engines.len());
        for e in &engines {
            let dir = scratch.0.join(format!("engine-{}", e.name()));
            fresh_dir(&dir)?;
            dirs.push(dir);
        }
        let figures = measure_engines(&engines, &opts.plan.engine, &dirs, &progress)?;
        Some(EngineReport {
            plan: opts.plan.engine.clone(),
            subjects: engines
                .into_iter()
                .zip(figures)
                .map(|(subject, figures)| EngineResult { subject, figures })
                .collect(),
        })
    } else {
        None
    };
    progress.line(format_args!(
        "core: table memory of {} parked runs",
        opts.plan.parked_runs
    ));
    let table = table_bytes_per_run(&opts.plan);
    let frames = Frames::new();
    let cycle = crate::workload::LOG_CYCLE_RUNS;
    Ok(Report {
        date,
        command: opts.command.clone(),
        machine,
        plan: opts.plan.clone(),
        record_bytes: LogRecords::new().mean_len(),
        frame_bytes: frames.bytes(cycle) as f64 / cycle as f64,
        subjects: results,
        table_bytes_per_run: table,
        seconds: started.elapsed().as_secs_f64(),
        engine,
        peers: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn flags_shape_the_plan() -> Result<()> {
        let o = parse_args(
            "x",
            args("--quick --records 1_000 --samples 40 --backends memory"),
        )?;
        assert!(o.plan.quick);
        assert_eq!(o.plan.recovery_records, 1000);
        assert_eq!(o.plan.latency_samples, 40);
        assert_eq!(o.subjects.as_deref(), Some(&["memory".to_string()][..]));
        assert_eq!(
            o.command,
            "x --quick --records 1_000 --samples 40 --backends memory"
        );
        assert!(parse_args("x", args("--records")).is_err());
        assert!(parse_args("x", args("--bogus")).is_err());
        let p = parse_args("x", args("--peers temporal,dbos-sqlite --quick"))?;
        assert_eq!(
            p.peers,
            Some(vec![PeerKind::Temporal, PeerKind::DbosSqlite])
        );
        assert!(parse_args("x", args("--peers nope")).is_err());
        assert!(parse_args("x", args("--peers")).is_err());
        Ok(())
    }

    #[test]
    fn selection_keeps_the_floor_and_refuses_unknown_names() -> Result<()> {
        let names = vec!["memory".to_string()];
        let picked: Vec<String> = select(Some(&names))?
            .iter()
            .map(|s| s.name().to_string())
            .collect();
        assert_eq!(picked, ["floor", "memory"]);
        assert!(select(Some(&["nope".to_string()])).is_err());
        Ok(())
    }
}
