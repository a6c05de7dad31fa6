//! `fusee migrate`'s figures (issue 35): N parked sleepers (default
//! 1,000,000) on the file backend, migrated file -> file in a fresh
//! process: seconds and peak resident memory (goal: at most 30 s and
//! 500 MB on 2 cores), against a baseline measured in the same run: a
//! plain copy of the source directory's files, each synced (the floor of
//! moving the bytes, with none of the rewriting or the run-by-run check).
//!
//! `cargo bench -p fusee-benches --no-default-features --features file,redb --bench migrate`
//! (`FUSEE_MIGRATE_PARKED` sets the sleepers; `FUSEE_MIGRATE_TO=redb`
//! migrates into redb instead; `FUSEE_MIGRATE_TO=postgres` into the schema
//! `fusee_migrate_bench` at `FUSEE_PG_URL`, with `--features postgres`;
//! `FUSEE_MIGRATE_SHARDS=N` reshards into N shards instead, through
//! `fusee::migrate::reshard`: the source has the engine's default 4.
//! `FUSEE_MIGRATE_TAKE_OVER=1` with `FUSEE_MIGRATE_TO=postgres` and
//! `FUSEE_MIGRATE_SHARDS=N`: migrates into PostgreSQL, then reshards that
//! schema into N shards in the schema `fusee_migrate_bench_taken` through
//! `fusee::migrate::reshard_taking_over`, in another fresh process: the
//! pause of a reshard while processes run, against the migration into
//! PostgreSQL of the same runs.)

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use fusee::migrate::{Source, migrate, reshard, reshard_taking_over};
use fusee::{Backend, Config, Engine, StorageConfig};
use fusee_benches::engine::workload::{self, Stamps, WorkResult};
use fusee_benches::env_or;

/// The destination: a directory of `to`, or for PostgreSQL the URL `dst`
/// and the schema [`SCHEMA`].
fn target(dst: &str, to: Backend) -> StorageConfig {
    match to {
        Backend::Postgres => StorageConfig::postgres(dst).postgres_schema(SCHEMA),
        _ => StorageConfig::new(to, dst),
    }
}

/// The PostgreSQL schema the bench migrates into (dropped before and after).
const SCHEMA: &str = "fusee_migrate_bench";
/// The schema a reshard taking [`SCHEMA`] over writes.
const TAKEN: &str = "fusee_migrate_bench_taken";

/// Drops [`SCHEMA`] and [`TAKEN`] at `url` with `psql`.
fn drop_schema(url: &str) {
    let _ = std::process::Command::new("psql")
        .args([
            url,
            "-q",
            "-c",
            &format!(
                "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; DROP SCHEMA IF EXISTS {TAKEN} CASCADE"
            ),
        ])
        .status();
}

/// The child's line: seconds, peak memory, parked runs copied, runs
/// compared.
fn said(
    t: Instant,
    r: Result<fusee::migrate::MigrateReport, fusee::migrate::MigrateError>,
) -> ExitCode {
    match r {
        Ok(report) => {
            println!(
                "{} {} {} {}",
                t.elapsed().as_secs_f64(),
                workload::peak_resident_bytes(),
                report.copy.parked,
                report.check.runs
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("migrate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Seconds spent in each phase of a migration (on stderr): where a slow
/// one's time goes.
#[derive(Default)]
struct Phases {
    at: Option<(Instant, &'static str)>,
    spent: Vec<(&'static str, f64)>,
}

impl Phases {
    fn note(&mut self, e: fusee::migrate::Event) -> std::ops::ControlFlow<()> {
        use fusee::migrate::Event;
        let phase = match e {
            Event::Retired { .. } => "retire",
            Event::Marked => "mark",
            Event::Planning { .. } => "plan (read the source)",
            Event::Shard { .. } | Event::Frames(_) | Event::Committed | Event::LogRecords(_) => {
                "write"
            }
            Event::Checking { .. } | Event::Checked(_) => "check",
            _ => return std::ops::ControlFlow::Continue(()),
        };
        let now = Instant::now();
        match self.at {
            Some((_, p)) if p == phase => {}
            Some((since, p)) => {
                self.spent.push((p, (now - since).as_secs_f64()));
                self.at = Some((now, phase));
            }
            None => self.at = Some((now, phase)),
        }
        std::ops::ControlFlow::Continue(())
    }

    fn print(&mut self) {
        if let Some((since, p)) = self.at.take() {
            self.spent.push((p, since.elapsed().as_secs_f64()));
        }
        let mut total: Vec<(&str, f64)> = Vec::new();
        for &(p, s) in &self.spent {
            match total.iter_mut().find(|(q, _)| *q == p) {
                Some(t) => t.1 += s,
                None => total.push((p, s)),
            }
        }
        let line: Vec<String> = total.iter().map(|(p, s)| format!("{p} {s:.1} s")).collect();
        eprintln!("phases: {}", line.join(", "));
    }
}

/// The take-over child: reshards [`SCHEMA`] at `url` into [`TAKEN`] with
/// `shards` shards, taking it over.
fn take_over_child(url: &str, shards: u32) -> ExitCode {
    let t = Instant::now();
    let src = StorageConfig::postgres(url).postgres_schema(SCHEMA);
    let dst = StorageConfig::postgres(url).postgres_schema(TAKEN);
    let mut phases = Phases::default();
    let mut go = |e| phases.note(e);
    let r = reshard_taking_over(&src, &dst, shards, &mut go);
    phases.print();
    said(t, r)
}

/// The child: migrates `src` into `dst` and prints its seconds and peak
/// memory on stdout.
fn child(src: &Path, dst: &str, to: Backend, shards: Option<u32>) -> ExitCode {
    let t = Instant::now();
    let source = Source::Dir(src.to_path_buf());
    let mut phases = Phases::default();
    let mut go = |e| phases.note(e);
    let r = match shards {
        None => migrate(&source, &target(dst, to), &mut go),
        Some(n) => reshard(&source, &target(dst, to), n, &mut go),
    };
    phases.print();
    said(t, r)
}

/// Runs the bench's own executable as a child with `args`, and parses its
/// line: seconds, peak bytes, parked runs, runs compared.
fn run_child(args: &[String]) -> WorkResult<[f64; 4]> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(args)
        .output()?;
    if !out.status.success() {
        return Err(format!("the child failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    for l in String::from_utf8_lossy(&out.stderr).lines() {
        if l.starts_with("phases:") {
            eprintln!("{l}");
        }
    }
    let line = String::from_utf8_lossy(&out.stdout).to_string();
    let f: Vec<f64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    match f[..] {
        [a, b, c, d] => Ok([a, b, c, d]),
        _ => Err(format!("the child said {line:?}").into()),
    }
}

/// Copies every file under `from` to `to`, each synced: the baseline.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<u64> {
    std::fs::create_dir_all(to)?;
    let mut bytes = 0;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            bytes += copy_tree(&e.path(), &target)?;
        } else {
            bytes += std::fs::copy(e.path(), &target)?;
            std::fs::File::open(&target)?.sync_all()?;
        }
    }
    std::fs::File::open(to)?.sync_all()?;
    Ok(bytes)
}

fn du(p: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(p)
        .map(|rd| rd.flatten().map(|e| du(&e.path())).sum())
        .unwrap_or(0)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--migrate-child") {
        let to = args
            .get(4)
            .and_then(|b| b.parse().ok())
            .unwrap_or(Backend::File);
        let shards = args.get(5).and_then(|n| n.parse().ok());
        return child(Path::new(&args[2]), &args[3], to, shards);
    }
    if args.get(1).map(String::as_str) == Some("--take-over-child") {
        let shards = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(4);
        return take_over_child(&args[2], shards);
    }
    let take_over = std::env::var("FUSEE_MIGRATE_TAKE_OVER").is_ok_and(|v| v == "1");
    let n: u64 = env_or("FUSEE_MIGRATE_PARKED", 1_000_000);
    let to: Backend = env_or("FUSEE_MIGRATE_TO", Backend::File);
    let shards: Option<u32> = std::env::var("FUSEE_MIGRATE_SHARDS")
        .ok()
        .and_then(|v| v.parse().ok());
    let dir: PathBuf =
        std::env::temp_dir().join(format!("fusee-migrate-bench-{}", std::process::id()));
    let src = dir.join("src");
    let result = (|| -> WorkResult<()> {
        std::fs::create_dir_all(&dir)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let t = Instant::now();
        runtime.block_on(async {
            let engine = Engine::open(Config::file(&src).park_after(Duration::ZERO)).await?;
            workload::register(&engine, &Stamps::default());
            workload::park_sleepers(&engine, n).await?;
            engine.close().await?;
            WorkResult::Ok(())
        })?;
        drop(runtime);
        eprintln!("{n} sleepers parked in {:.1} s", t.elapsed().as_secs_f64());
        let size = du(&src);
        let t = Instant::now();
        let copied = copy_tree(&src, &dir.join("copy"))?;
        let copy_s = t.elapsed().as_secs_f64();
        let _ = std::fs::remove_dir_all(dir.join("copy"));
        if take_over && (to != Backend::Postgres || shards.is_none()) {
            return Err(
                "FUSEE_MIGRATE_TAKE_OVER=1 needs FUSEE_MIGRATE_TO=postgres and FUSEE_MIGRATE_SHARDS"
                    .into(),
            );
        }
        let dst = match to {
            Backend::Postgres => {
                let url = std::env::var("FUSEE_PG_URL")
                    .map_err(|_| "FUSEE_MIGRATE_TO=postgres needs FUSEE_PG_URL")?;
                drop_schema(&url);
                url
            }
            _ => dir.join("dst").to_string_lossy().into_owned(),
        };
        let mut first = vec![
            "--migrate-child".to_string(),
            src.to_string_lossy().into_owned(),
            dst.clone(),
            to.name().to_string(),
        ];
        // Taking over, the first child migrates and the second reshards.
        first.extend(shards.filter(|_| !take_over).map(|n| n.to_string()));
        let migrated = run_child(&first);
        let taken = match (&migrated, take_over, shards) {
            (Ok(_), true, Some(n)) => Some(run_child(&[
                "--take-over-child".to_string(),
                dst.clone(),
                n.to_string(),
            ])),
            _ => None,
        };
        if to == Backend::Postgres {
            drop_schema(&dst);
        }
        let [secs, peak, parked, checked] = migrated?;
        if let Some(taken) = taken {
            let [t_secs, t_peak, t_parked, t_checked] = taken?;
            println!(
                "migrate file -> postgres: {parked} parked runs ({checked} compared): {secs:.1} s, \
                 peak resident {:.0} MB; reshard taking it over (4 -> {} shards, postgres -> \
                 postgres): {t_parked} parked runs ({t_checked} compared): {t_secs:.1} s, peak \
                 resident {:.0} MB; take-over / migrate = {:.2}x",
                peak / (1 << 20) as f64,
                shards.unwrap_or(0),
                t_peak / (1 << 20) as f64,
                t_secs / secs
            );
            return Ok(());
        }
        let what = match shards {
            Some(n) => format!("reshard (4 -> {n} shards)"),
            None => "migrate".to_string(),
        };
        println!(
            "{what} file -> {to}: {parked} parked runs ({checked} compared), store {:.0} MB: \
             {secs:.1} s, peak resident {:.0} MB; a synced copy of the files ({:.0} MB): \
             {copy_s:.1} s; {what} / copy = {:.1}x",
            size as f64 / 1e6,
            peak / (1 << 20) as f64,
            copied as f64 / 1e6,
            secs / copy_s
        );
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("migrate bench: {e}");
            ExitCode::FAILURE
        }
    }
}
