//! The output-commit rule (DESIGN section 4): no reply, result or step
//! start leaves before the records it depends on are durable. The memory
//! backend holds flushes back on demand (a disk that does not answer):
//! while it does, the engine must keep every start unacknowledged, every
//! step unstarted and every signal unacknowledged, though its code runs
//! ahead; once the flushes go through, everything goes on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fusee::storage::MemoryStorage;
use fusee::{AnyStorage, Config, Ctx, Engine, Failure, Signal, Workflow};

const GATED: Workflow<(), u32> = Workflow::new("gated");
const GO: Signal<u32> = Signal::new("go");

/// Whether `task` is still running after `ms`.
async fn still_waiting<T>(task: &tokio::task::JoinHandle<T>, ms: u64) -> bool {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    !task.is_finished()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_leaves_before_its_records_are_durable() {
    let memory = MemoryStorage::new();
    let engine = Engine::open_on(
        Config::memory().shards(1),
        AnyStorage::Memory(memory.clone()),
    )
    .await
    .expect("open");
    let effects = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&effects);
    engine.register(GATED, move |ctx: Ctx, ()| {
        let seen = Arc::clone(&seen);
        async move {
            let go = ctx.wait_for(&GO).await?.unwrap_or(0);
            let n = ctx
                .step("effect", move |_| {
                    let seen = Arc::clone(&seen);
                    async move { Ok(seen.fetch_add(1, Ordering::SeqCst) + 1) }
                })
                .await?;
            Ok::<_, Failure>(go + n)
        }
    });

    memory.hold_flushes(true);
    let start = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.start(GATED, "g-1", &()).await.map(|_| ()) })
    };
    assert!(
        still_waiting(&start, 200).await,
        "the start was acknowledged before its Start record was durable"
    );
    // The run's code ran ahead of the disk: its Wait is recorded (pending a
    // flush), so a signal can be recorded for it too, but not acknowledged.
    let signal = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.signal("g-1", GO, &40).await })
    };
    assert!(
        still_waiting(&signal, 200).await,
        "the signal was acknowledged before its record was durable"
    );
    assert_eq!(
        effects.load(Ordering::SeqCst),
        0,
        "the step started before the records before it were durable"
    );
    let result = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.result(GATED, "g-1").await })
    };
    assert!(still_waiting(&result, 100).await);

    memory.hold_flushes(false);
    start.await.expect("join").expect("start");
    signal.await.expect("join").expect("signal");
    assert_eq!(result.await.expect("join").expect("result"), 41);
    assert_eq!(effects.load(Ordering::SeqCst), 1);
    engine.close().await.expect("close");
}
