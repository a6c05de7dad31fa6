//! Streams' cost at a restart (issue 33, item 2): one unfinished run that
//! sent N stream chunks (default 100,000, 12 to 16 bytes each, like a
//! model's tokens) and waits for a signal, against the same run with no
//! chunks, on the file backend. Each store is closed, then opened in a
//! fresh process (on a copy of the store) that registers the code and
//! signals the run, which starts its code: the code replays its journal,
//! the chunks in it included, takes the signal and finishes. Measured
//! there: the time from `Engine::open` to the run's result, and the
//! process's resident memory after it; the median of several child
//! processes each. Two states of the run at
//! the close: **loaded** (in memory: its journal rides in the close's
//! checkpoint) and **parked** (its journal in a run-store frame, read back
//! when the description loads it).
//!
//! `cargo bench -p fusee-benches --no-default-features --features file --bench streams`
//! (`FUSEE_STREAM_CHUNKS` sets N, `FUSEE_STREAM_ROUNDS` the child
//! processes per figure, default 5).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use fusee::{Config, Engine, Signal};
use fusee_benches::engine::workload::{TALK, WorkResult, register_talk, resident_bytes};
use fusee_benches::env_or;

/// What [`TALK`]'s run waits for after its stream.
const GO: Signal<()> = Signal::new("go");
const ID: &str = "talk-1";
const CHILD: &str = "--stream-child";

fn register(engine: &Engine) {
    register_talk(engine, None, Some(&GO));
}

fn config(dir: &Path, parked: bool) -> Config {
    let park_after = if parked {
        Duration::ZERO
    } else {
        Duration::from_secs(3600)
    };
    Config::file(dir).shards(1).park_after(park_after)
}

/// Makes the store: the run started, its step done, the run parked if
/// asked, the engine closed.
async fn make(dir: &Path, n: u64, parked: bool) -> WorkResult<()> {
    let engine = Engine::open(config(dir, parked)).await?;
    register(&engine);
    engine.start(TALK, ID, &n).await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let d = engine.describe(ID).await?;
        if !d.waits.is_empty() && (!parked || d.parked) {
            break;
        }
        if Instant::now() > deadline {
            return Err("the run did not get to its wait in 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    engine.close().await?;
    Ok(())
}

/// The child: opens the store, registers the code, asks for the run's
/// description (its code replays), says `SECONDS RESIDENT_BYTES`.
fn child(dir: &Path, parked: bool, n: u64) -> WorkResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let t = Instant::now();
        let engine = Engine::open(config(dir, parked)).await?;
        register(&engine);
        // The signal reaches the run's code, which replays its journal
        // (loading it first if parked), takes the signal and finishes.
        engine.signal(ID, GO, &()).await?;
        let sent: u64 = engine.result(TALK, ID).await?;
        let took = t.elapsed();
        if sent != n {
            return Err(format!("the run returned {sent}, not {n}").into());
        }
        println!("{} {}", took.as_secs_f64(), resident_bytes());
        engine.close().await?;
        Ok(())
    })
}

/// The median of `rounds` children's (seconds, resident bytes).
fn reopen(dir: &Path, parked: bool, n: u64, rounds: usize) -> WorkResult<(f64, f64)> {
    let exe = std::env::current_exe()?;
    let (mut secs, mut rss) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        // Each child finishes the run: it works on a copy of the store.
        let copy = dir.with_extension("copy");
        let _ = std::fs::remove_dir_all(&copy);
        copy_dir(dir, &copy)?;
        let out = Command::new(&exe)
            .arg(CHILD)
            .arg(&copy)
            .arg(if parked { "parked" } else { "loaded" })
            .arg(n.to_string())
            .output()?;
        if !out.status.success() {
            return Err(
                format!("the child failed: {}", String::from_utf8_lossy(&out.stderr)).into(),
            );
        }
        let line = String::from_utf8_lossy(&out.stdout);
        let mut f = line.split_whitespace();
        let (Some(s), Some(r)) = (f.next(), f.next()) else {
            return Err(format!("the child wrote {line:?}").into());
        };
        secs.push(s.parse::<f64>()?);
        rss.push(r.parse::<f64>()?);
    }
    Ok((median(secs), median(rss)))
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), &dest)?;
            // A copy's pages are dirty: synced here, the child's first
            // fsync of each file pays for its own writes, not the copy's.
            std::fs::File::open(&dest)?.sync_all()?;
        }
    }
    std::fs::File::open(to)?.sync_all()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let d = dir.join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(CHILD) {
        let (Some(dir), Some(state), Some(n)) = (
            args.get(2),
            args.get(3),
            args.get(4).and_then(|n| n.parse().ok()),
        ) else {
            eprintln!("usage: {CHILD} DIR loaded|parked CHUNKS");
            return ExitCode::FAILURE;
        };
        return match child(Path::new(dir), state == "parked", n) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("stream bench child: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let n = env_or("FUSEE_STREAM_CHUNKS", 100_000u64);
    let rounds = env_or("FUSEE_STREAM_ROUNDS", 5usize);
    let dir = std::env::temp_dir().join(format!("fusee-stream-bench-{}", std::process::id()));
    let result = (|| -> WorkResult<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        for parked in [false, true] {
            let state = if parked { "parked" } else { "loaded" };
            let without = fresh(&dir, &format!("{state}-0"));
            let with = fresh(&dir, &format!("{state}-{n}"));
            let t = Instant::now();
            runtime.block_on(make(&without, 0, parked))?;
            runtime.block_on(make(&with, n, parked))?;
            eprintln!(
                "streams ({state}): stores made in {:.1} s",
                t.elapsed().as_secs_f64()
            );
            let (s0, r0) = reopen(&without, parked, 0, rounds)?;
            let (s1, r1) = reopen(&with, parked, n, rounds)?;
            let mb = |b: f64| b / f64::from(1 << 20);
            println!(
                "streams ({state}, file): a run with {n} chunks against none: open to replayed {:.1} ms against {:.1} ms ({:.2}x), resident {:.1} MB against {:.1} MB ({:.2}x, +{:.1} MB); median of {rounds} processes",
                s1 * 1e3,
                s0 * 1e3,
                s1 / s0,
                mb(r1),
                mb(r0),
                r1 / r0,
                mb(r1 - r0),
            );
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stream bench: {e}");
            ExitCode::FAILURE
        }
    }
}
