//! A live subscriber's cost (issue 33, item 2): one run whose step sends
//! N stream chunks (default 100,000, `token-N`, a pause of 200 µs every
//! 100 as a model's tokens come in bursts), relayed to one subscriber
//! that reads them as they come, against the same run with nobody
//! subscribed. Measured: the time from the start to the last chunk read
//! (or to the result, without a subscriber) and the process's CPU time
//! meanwhile; the run of each pair alternates, in one process, on the
//! backend `FUSEE_STREAM_BACKEND` names (`memory`, the default, or
//! `file`).
//!
//! `cargo bench -p fusee-benches --no-default-features --features file --bench stream_live`
//! (`FUSEE_STREAM_CHUNKS` sets N, `FUSEE_STREAM_ROUNDS` the pairs, default
//! 3).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use fusee::{Config, Engine};
use fusee_benches::engine::workload::{TALK, WorkResult, process_cpu, register_talk};
use fusee_benches::env_or;
use futures_util::StreamExt;

fn register(engine: &Engine) {
    register_talk(engine, Some((100, Duration::from_micros(200))), None);
}

/// One run of `n` chunks, read by a subscriber if `subscribed`: (seconds,
/// CPU seconds).
async fn relay(config: Config, n: u64, subscribed: bool) -> WorkResult<(f64, f64)> {
    let engine = Engine::open(config).await?;
    register(&engine);
    let cpu = process_cpu();
    let t = Instant::now();
    engine.start(TALK, "talk", &n).await?;
    if subscribed {
        let mut read = 0u64;
        let mut chunks = engine.subscribe("talk", "tokens", 0);
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk?;
            if chunk.index != read {
                return Err(format!("chunk {} came where {read} was due", chunk.index).into());
            }
            read += 1;
        }
        if read != n {
            return Err(format!("the subscriber read {read} chunks, not {n}").into());
        }
    }
    let sent: u64 = engine.result(TALK, "talk").await?;
    let (took, cpu) = (t.elapsed(), process_cpu().saturating_sub(cpu));
    if sent != n {
        return Err(format!("the run returned {sent}, not {n}").into());
    }
    engine.close().await?;
    Ok((took.as_secs_f64(), cpu.as_secs_f64()))
}

fn main() -> ExitCode {
    let n = env_or("FUSEE_STREAM_CHUNKS", 100_000u64);
    let rounds = env_or("FUSEE_STREAM_ROUNDS", 3u64);
    let backend = std::env::var("FUSEE_STREAM_BACKEND").unwrap_or_else(|_| "memory".into());
    let dir = std::env::temp_dir().join(format!("fusee-stream-live-{}", std::process::id()));
    let config = |i: u64| -> WorkResult<Config> {
        Ok(match backend.as_str() {
            "memory" => Config::memory(),
            "file" => Config::file(dir.join(i.to_string())),
            other => return Err(format!("FUSEE_STREAM_BACKEND={other}: memory or file").into()),
        }
        .shards(1))
    };
    let result = (|| -> WorkResult<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        for round in 0..rounds {
            let alone = runtime.block_on(relay(config(2 * round)?, n, false))?;
            let read = runtime.block_on(relay(config(2 * round + 1)?, n, true))?;
            println!(
                "stream_live ({backend}), {n} chunks, round {round}: with a subscriber {:.2} s, {:.2} s CPU; alone {:.2} s, {:.2} s CPU; ratio wall {:.2}x, CPU {:.2}x; {:.1} µs of CPU a chunk more",
                read.0,
                read.1,
                alone.0,
                alone.1,
                read.0 / alone.0,
                read.1 / alone.1,
                (read.1 - alone.1) * 1e6 / n as f64,
            );
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stream_live bench: {e}");
            ExitCode::FAILURE
        }
    }
}
