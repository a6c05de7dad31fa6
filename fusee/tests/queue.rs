//! Queues (issue 20), on the test kit's virtual clock: ten thousand items
//! through a queue with a concurrency limit and a rate limit across
//! crashes (never more running than the limit, the rate never exceeded in
//! any window, every item's workflow started once); priorities, keys
//! taking turns and one per key; bad input is a named error that records
//! nothing.
//!
//! Sizes (CI defaults; raise them by hand):
//!   FUSEE_QUEUE_ITEMS    items through the limited queue  (10,000)
//!   FUSEE_QUEUE_CRASHES  crashes while they go through    (20)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::testing::TestEngine;
use fusee::{Config, Ctx, Engine, Error, Failure, ItemOptions, ListFilter, Workflow};

/// An item's workflow: sleeps 2 to 8 s (by its number).
const ITEM: Workflow<u64, ()> = Workflow::new("item");
/// An item's workflow that notes its name when it starts.
const NOTE: Workflow<String, ()> = Workflow::new("note");

const CONCURRENCY: usize = 50;
const RATE: usize = 10;
const PER_MS: u64 = 1_000;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn kit(notes: Arc<Mutex<Vec<String>>>) -> TestEngine {
    TestEngine::builder()
        .config(
            Config::memory()
                .shards(2)
                .retention(Duration::from_secs(90 * 86_400)),
        )
        .open(move |engine: &Engine| {
            engine.register(ITEM, |ctx: Ctx, n: u64| async move {
                ctx.sleep("work", Duration::from_secs(2 + n % 7)).await?;
                Ok::<_, Failure>(())
            });
            let notes = Arc::clone(&notes);
            engine.register(NOTE, move |ctx: Ctx, name: String| {
                let notes = Arc::clone(&notes);
                async move {
                    // A step: noted once its start is durable.
                    ctx.step("note", move |_| {
                        let (notes, name) = (Arc::clone(&notes), name.clone());
                        async move {
                            notes.lock().expect("notes").push(name);
                            Ok(())
                        }
                    })
                    .await?;
                    ctx.sleep("work", Duration::from_secs(10)).await?;
                    Ok::<_, Failure>(())
                }
            });
            engine.register_flow_control();
        })
        .await
        .expect("the test engine opens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_never_exceed_the_concurrency_or_the_rate_and_each_starts_once_across_crashes() {
    let items = env("FUSEE_QUEUE_ITEMS", 10_000);
    let crashes = env("FUSEE_QUEUE_CRASHES", 20);
    let mut kit = kit(Arc::default()).await;
    kit.engine()
        .queue("work", ITEM)
        .concurrency(CONCURRENCY as u32)
        .rate(RATE as u32, Duration::from_millis(PER_MS))
        .create()
        .await
        .expect("created");
    let keys: Vec<String> = (0..items).map(|i| format!("i{i}")).collect();
    let numbers: Vec<u64> = (0..items).collect();
    let batches: Vec<usize> = (0..items as usize).step_by(500).collect();
    let crash_every = (batches.len() as u64 / 4).max(1);
    for (b, &from) in batches.iter().enumerate() {
        let to = (from + 500).min(items as usize);
        let q = kit.engine().queue("work", ITEM).handle();
        let batch = numbers[from..to]
            .iter()
            .zip(&keys[from..to])
            .map(|(n, k)| (n, k.as_str(), ItemOptions::new()));
        q.enqueue_all(batch).await.expect("enqueued");
        if (b as u64).is_multiple_of(crash_every) {
            kit.crash().await.expect("crash");
            // Sent again (its answer might have been lost): duplicates.
            let q = kit.engine().queue("work", ITEM).handle();
            let batch = numbers[from..to]
                .iter()
                .zip(&keys[from..to])
                .map(|(n, k)| (n, k.as_str(), ItemOptions::new()));
            let again = q.enqueue_all(batch).await.expect("enqueued again");
            assert!(again.iter().all(|e| e.duplicate), "a key enqueued twice");
        }
    }
    // At the concurrency limit an item ends every 0.1 s on average: the
    // whole run takes about items / 10 seconds of virtual time.
    let slice = Duration::from_millis(items * 100 / (crashes + 1) + 1_000);
    for round in 0.. {
        kit.advance(slice).await.expect("advance");
        let about = kit
            .engine()
            .queues()
            .describe("work")
            .await
            .expect("describe");
        assert!(about.running <= CONCURRENCY as u64, "{about:?}");
        let done = about.completed;
        if done == items {
            assert_eq!(about.started, items);
            assert_eq!(
                about.duplicates,
                500 * batches.len().div_ceil(crash_every as usize) as u64
            );
            break;
        }
        assert!(
            round < 10 * (crashes + 1),
            "stuck at {done} of {items}: {about:?}"
        );
        if round < crashes {
            kit.crash().await.expect("crash");
        }
    }
    // The engine's own record of every item workflow.
    let mut runs: BTreeMap<String, u32> = BTreeMap::new();
    let mut spans = Vec::new();
    let mut filter = ListFilter::new()
        .workflow("item")
        .limit(ListFilter::LIMIT_MAX);
    loop {
        let page = kit.engine().list(filter.clone()).await.expect("list");
        for r in &page.runs {
            *runs.entry(r.id.clone()).or_default() += 1;
            let d = kit.engine().describe(&r.id).await.expect("describe");
            spans.push((d.started_ms, d.finished_ms.expect("finished")));
        }
        match page.next {
            Some(c) => filter = filter.after(c),
            None => break,
        }
    }
    assert_eq!(runs.len() as u64, items, "every item's workflow ran");
    assert!(
        runs.values().all(|n| *n == 1),
        "an item's workflow started twice"
    );
    // Never more than the limit running: ends before starts at one time
    // (a slot is given again only after the end it waited for).
    let mut events: Vec<(u64, i32)> = spans
        .iter()
        .flat_map(|(s, e)| [(*s, 1), (*e, -1)])
        .collect();
    events.sort_by_key(|&(t, d)| (t, d));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    assert!(most as usize <= CONCURRENCY, "{most} ran at once");
    assert_eq!(most as usize, CONCURRENCY, "the limit was reached");
    // The rate: no window of PER_MS holds more than RATE starts.
    let mut starts: Vec<u64> = spans.iter().map(|(s, _)| *s).collect();
    starts.sort_unstable();
    for w in starts.windows(RATE + 1) {
        assert!(
            w[RATE] - w[0] >= PER_MS,
            "{} starts within {} ms",
            RATE + 1,
            w[RATE] - w[0]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priorities_first_keys_take_turns_and_one_per_key_holds() {
    let notes: Arc<Mutex<Vec<String>>> = Arc::default();
    let kit = kit(Arc::clone(&notes)).await;
    let q = kit
        .engine()
        .queue("turns", NOTE)
        .concurrency(1)
        .create()
        .await
        .expect("created");
    kit.engine().queues().pause("turns").await.expect("pause");
    for (name, priority, key) in [
        ("a1", 0, "a"),
        ("a2", 0, "a"),
        ("a3", 0, "a"),
        ("b1", 0, "b"),
        ("b2", 0, "b"),
        ("urgent", 9, "c"),
    ] {
        q.enqueue_with(
            &name.to_string(),
            name,
            ItemOptions::new().priority(priority).key(key),
        )
        .await
        .expect("enqueued");
    }
    kit.engine().queues().resume("turns").await.expect("resume");
    kit.advance(Duration::from_secs(120))
        .await
        .expect("advance");
    assert_eq!(
        *notes.lock().expect("notes"),
        ["urgent", "a1", "b1", "a2", "b2", "a3"]
    );

    // One per key: the three items of key k run one after another, the
    // unkeyed ones beside them.
    let q = kit
        .engine()
        .queue("serial", NOTE)
        .one_per_key()
        .create()
        .await
        .expect("created");
    for name in ["k1", "k2", "k3"] {
        q.enqueue_with(&name.to_string(), name, ItemOptions::new().key("k"))
            .await
            .expect("enqueued");
    }
    for name in ["free1", "free2"] {
        q.enqueue(&name.to_string(), name).await.expect("enqueued");
    }
    kit.settle().await.expect("settle");
    let about = q.describe().await.expect("describe");
    assert_eq!((about.running, about.pending), (3, 2), "{about:?}");
    kit.advance(Duration::from_secs(35)).await.expect("advance");
    let mut starts = Vec::new();
    for name in ["k1", "k2", "k3"] {
        let d = kit
            .engine()
            .describe(&format!("serial/{name}"))
            .await
            .expect("describe");
        starts.push((d.started_ms, d.finished_ms));
    }
    for w in starts.windows(2) {
        assert!(
            w[1].0 >= w[0].1.expect("finished"),
            "two of key k overlapped: {starts:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_named_error_and_records_nothing() {
    let kit = kit(Arc::default()).await;
    let engine = kit.engine();
    for (what, r) in [
        (
            "zero concurrency",
            engine
                .queue("q", ITEM)
                .concurrency(0)
                .create()
                .await
                .map(drop),
        ),
        (
            "zero rate",
            engine
                .queue("q", ITEM)
                .rate(0, Duration::from_secs(1))
                .create()
                .await
                .map(drop),
        ),
        (
            "rate per nothing",
            engine
                .queue("q", ITEM)
                .rate(1, Duration::ZERO)
                .create()
                .await
                .map(drop),
        ),
        (
            "no room",
            engine
                .queue("q", ITEM)
                .max_pending(0)
                .create()
                .await
                .map(drop),
        ),
    ] {
        assert!(
            matches!(r, Err(Error::InvalidQueue { .. })),
            "{what}: {r:?}"
        );
    }
    let unknown = engine.queue("nowhere", ITEM).handle();
    let r = unknown.enqueue(&1, "one").await;
    assert!(matches!(r, Err(Error::UnknownQueue { .. })), "{r:?}");
    let r = engine.queues().describe("nowhere").await;
    assert!(matches!(r, Err(Error::UnknownQueue { .. })), "{r:?}");
    let page = engine.list(ListFilter::new()).await.expect("list");
    assert!(
        page.runs.is_empty(),
        "something was recorded: {:?}",
        page.runs
    );

    // Full: a paused queue of two takes no third item.
    let q = engine
        .queue("small", ITEM)
        .max_pending(2)
        .create()
        .await
        .expect("created");
    engine.queues().pause("small").await.expect("pause");
    q.enqueue(&1, "one").await.expect("one");
    q.enqueue(&2, "two").await.expect("two");
    let r = q.enqueue(&3, "three").await;
    assert!(
        matches!(
            r,
            Err(Error::QueueFull {
                pending: 2,
                max: 2,
                ..
            })
        ),
        "{r:?}"
    );
    // A duplicate is still answered.
    assert!(q.enqueue(&1, "one").await.expect("dup").duplicate);
    assert_eq!(engine.queues().delete("small").await.expect("delete"), 2);
    let r = q.enqueue(&4, "four").await;
    assert!(matches!(r, Err(Error::UnknownQueue { .. })), "{r:?}");
}
