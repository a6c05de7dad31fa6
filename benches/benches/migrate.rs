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
//! `fusee::migrate::reshard`: the source has the engine's default 4.)

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use fusee::migrate::{Source, migrate, reshard};
use fusee::{Backend, Config, Engine, StorageConfig};
use fusee_benches::engine::workload::{self, Stamps, WorkResult};

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

/// Drops [`SCHEMA`] at `url` with `psql`.
fn drop_schema(url: &str) {
    let _ = std::process::Command::new("psql")
        .args([
            url,
            "-q",
            "-c",
            &format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"),
        ])
        .status();
}

/// The child: migrates `src` into `dst` and prints its seconds and peak
/// memory on stdout.
fn child(src: &Path, dst: &str, to: Backend, shards: Option<u32>) -> ExitCode {
    let t = Instant::now();
    let source = Source::Dir(src.to_path_buf());
    let mut go = |_| std::ops::ControlFlow::Continue(());
    let r = match shards {
        None => migrate(&source, &target(dst, to), &mut go),
        Some(n) => reshard(&source, &target(dst, to), n, &mut go),
    };
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
    let n: u64 = std::env::var("FUSEE_MIGRATE_PARKED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let to: Backend = std::env::var("FUSEE_MIGRATE_TO")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(Backend::File);
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
        let exe = std::env::current_exe()?;
        let dst = match to {
            Backend::Postgres => {
                let url = std::env::var("FUSEE_PG_URL")
                    .map_err(|_| "FUSEE_MIGRATE_TO=postgres needs FUSEE_PG_URL")?;
                drop_schema(&url);
                url
            }
            _ => dir.join("dst").to_string_lossy().into_owned(),
        };
        let out = std::process::Command::new(exe)
            .arg("--migrate-child")
            .arg(&src)
            .arg(&dst)
            .arg(to.name())
            .args(shards.map(|n| n.to_string()))
            .output()?;
        if to == Backend::Postgres {
            drop_schema(&dst);
        }
        if !out.status.success() {
            return Err(
                format!("the child failed: {}", String::from_utf8_lossy(&out.stderr)).into(),
            );
        }
        let line = String::from_utf8_lossy(&out.stdout).to_string();
        let f: Vec<f64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let [secs, peak, parked, checked] = f[..] else {
            return Err(format!("the child said {line:?}").into());
        };
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
