//! Sealing the log (`Config::seal_after_idle`, `Config::seal_interval`):
//! a shard seals once its log has been idle after a flush, under
//! continuous load only every interval (never between a chain's steps),
//! and at close; a log that later ends before its seal is an error at the
//! next open, not less data.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fusee::{Clock, Config, Ctx, Engine, Error, Failure, StorageError, VirtualClock, Workflow};

const CHAIN: Workflow<u32, u32> = Workflow::new("chain");
const START_MS: u64 = 1_700_000_000_000;

fn temp_dir(tag: &str) -> std::path::PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "fusee-seal-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A chain of `n` steps, each `ms_per_step` of virtual time after the one
/// before (the step moves the clock).
fn register_chain(engine: &Engine, clock: &VirtualClock, ms_per_step: u64) {
    let clock = clock.clone();
    engine.register(CHAIN, move |ctx: Ctx, n: u32| {
        let clock = clock.clone();
        async move {
            let mut sum = 0;
            for i in 0..n {
                let clock = clock.clone();
                sum += ctx
                    .step(&format!("s{i}"), move |_| {
                        let clock = clock.clone();
                        async move {
                            clock.advance(ms_per_step);
                            Ok(1u32)
                        }
                    })
                    .await?;
            }
            Ok::<_, Failure>(sum)
        }
    });
}

fn config(dir: &std::path::Path, clock: &VirtualClock) -> Config {
    Config::file(dir)
        .shards(1)
        .clock(Clock::Virtual(clock.clone()))
}

/// Waits (in real time, bounded) until `cond` holds of the metrics.
async fn until(engine: &Engine, what: &str, cond: impl Fn(&fusee::Metrics) -> bool) {
    for _ in 0..2000 {
        let m = engine.metrics().await;
        if cond(&m) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{what}: not reached in 10 s: {:?}", engine.metrics().await);
}

/// A seal comes once the log has been idle `seal_after_idle` (20 ms) after
/// its last flush, not before; a chain whose steps come 5 ms apart seals
/// not between its steps but only every `seal_interval` (1 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_shard_seals_and_a_chain_seals_only_by_interval() {
    let dir = temp_dir("idle");
    let clock = VirtualClock::new(START_MS);
    let engine = Engine::open(config(&dir, &clock)).await.unwrap();
    register_chain(&engine, &clock, 5);
    // 150 steps, 750 ms: under load, and less than an interval.
    assert_eq!(engine.execute(CHAIN, "short", &150).await.unwrap(), 150);
    let m = engine.metrics().await;
    assert_eq!(m.seals, 0, "a seal between a chain's steps: {m:?}");
    // Idle 10 ms: not yet.
    clock.advance(10);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(engine.metrics().await.seals, 0, "sealed before 20 ms idle");
    // Idle 25 ms: sealed, through the last record.
    clock.advance(15);
    until(&engine, "a seal once idle", |m| m.seals == 1).await;
    let sealed = engine.metrics().await.sealed_lsn;
    assert!(sealed >= 150, "the seal covers the chain: {sealed}");
    // Nothing new: no more seals, however long it stays idle.
    clock.advance(5_000);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(engine.metrics().await.seals, 1, "a second seal of nothing");
    // 300 steps, 1.5 s: under load for more than an interval, sealed by
    // the interval (once; twice if the last comes just past it), never per
    // step.
    assert_eq!(engine.execute(CHAIN, "long", &300).await.unwrap(), 300);
    let m = engine.metrics().await;
    assert!(
        (2..=3).contains(&m.seals),
        "expected one or two seals by interval during a 1.5 s chain: {m:?}"
    );
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A closed engine is sealed: when the disk later loses the records of its
/// last open (the newest segment's frames zeroed), the next open is
/// `LostRecords`. The same damage after a crash inside the window (no
/// seal since the records were flushed) opens with less data: what the
/// window means.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_records_after_a_seal_are_an_error_at_open() {
    for close in [true, false] {
        let dir = temp_dir("lost");
        let clock = VirtualClock::new(START_MS);
        {
            let engine = Engine::open(config(&dir, &clock)).await.unwrap();
            register_chain(&engine, &clock, 0);
            assert_eq!(engine.execute(CHAIN, "c", &20).await.unwrap(), 20);
            if close {
                engine.close().await.unwrap();
            }
            // Without close: a crash (the page cache keeps what was
            // written), the clock never having moved: no seal.
        }
        let log = dir.join("shard-0000000000").join("log");
        let newest = std::fs::read_dir(&log)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "seg"))
            .max()
            .unwrap();
        let mut bytes = std::fs::read(&newest).unwrap();
        bytes[4096..].fill(0);
        std::fs::write(&newest, &bytes).unwrap();
        let opened = Engine::open(config(&dir, &clock)).await;
        match (close, opened) {
            (
                true,
                Err(Error::Storage {
                    error:
                        StorageError::LostRecords {
                            sealed, recovered, ..
                        },
                    ..
                }),
            ) => assert!(recovered < sealed, "{recovered} < {sealed}"),
            (true, other) => panic!(
                "a sealed log that lost records opened: {:?}",
                other.map(|_| ())
            ),
            (false, Ok(engine)) => {
                register_chain(&engine, &clock, 0);
                // The run's records are gone, and nothing said so.
                assert!(
                    engine.describe("c").await.is_err(),
                    "the zeroed run is still there"
                );
                engine.close().await.unwrap();
            }
            (false, Err(e)) => panic!("an unsealed log's loss cannot be seen, yet: {e}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
