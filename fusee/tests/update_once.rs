//! Every update gets an answer, once. Keyed updates
//! (`Engine::update_once`): a call repeated with its key — after a lost
//! reply, while the first still runs, after a crash — records nothing and
//! gets the first call's result, so a client that retries applies its
//! change once. A handler the run's end cuts short fails its caller (the
//! simulator found callers that waited for ever), the same after a crash.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

mod common;

use common::cart::{ADD, CART, GO, register_cart};
use fusee::testing::{TestEngine, TestError};
use fusee::{Config, Ctx, Engine, Error, Failure, IdPolicy, Signal, Update, Workflow};

const NEVER: Signal<()> = Signal::new("never");
const SHORT: Workflow<(), u32> = Workflow::new("short");
const HANG: Update<(), u32> = Update::new("hang");

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "fusee-update-once-{tag}-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_update_runs_once_across_repeats_and_a_crash() {
    let dir = temp_dir("repeat");
    let priced = Arc::new(AtomicU32::new(0));
    let config = || Config::file(&dir).shards(2);
    let engine = Engine::open(config()).await.unwrap();
    register_cart(&engine, &priced);
    engine.start(CART, "cart-1", &()).await.unwrap();
    // Two calls with one key at once: one runs, both get its result.
    let tea = "tea".to_string();
    let (a, b) = tokio::join!(
        engine.update_once("cart-1", ADD, "req-1", &tea),
        engine.update_once("cart-1", ADD, "req-1", &tea)
    );
    assert_eq!((a.unwrap(), b.unwrap()), (1, 1));
    // Asked again after it returned: the same answer, whatever the argument.
    let again = engine
        .update_once("cart-1", ADD, "req-1", &"coffee".to_string())
        .await
        .unwrap();
    assert_eq!(again, 1);
    assert_eq!(priced.load(Ordering::SeqCst), 1, "the handler ran once");
    // Another key is another update; so is a plain one.
    let milk = engine
        .update_once("cart-1", ADD, "req-2", &"milk".to_string())
        .await
        .unwrap();
    assert_eq!(milk, 2);
    assert!(matches!(
        engine.update_once("cart-1", ADD, "", &tea).await,
        Err(Error::BadUpdateKey { .. })
    ));
    drop(engine); // a crash

    let engine = Engine::open(config()).await.unwrap();
    register_cart(&engine, &priced);
    let again = engine
        .update_once("cart-1", ADD, "req-2", &"milk".to_string())
        .await
        .unwrap();
    assert_eq!(again, 2, "the key outlives the crash");
    assert_eq!(priced.load(Ordering::SeqCst), 2, "nothing priced again");
    engine.signal("cart-1", GO, &()).await.unwrap();
    assert_eq!(
        engine.result(CART, "cart-1").await.unwrap(),
        ["tea", "milk"]
    );
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_of_keyed_updates_ends_the_same() {
    let priced = Arc::new(AtomicU32::new(0));
    let p = Arc::clone(&priced);
    let kit = TestEngine::open(move |engine: &Engine| register_cart(engine, &p))
        .await
        .expect("open");
    let report = kit
        .crash_everywhere_with(
            async |kit: &TestEngine| {
                let engine = kit.engine();
                engine
                    .start_with(CART, "cart", &(), IdPolicy::Attach)
                    .await?;
                // A run that finished before the crash may refuse the
                // repeat (its result shows whether the update was taken);
                // one that answers must give the first call's answer.
                for (key, item, first) in [("add-tea", "tea", 1), ("add-milk", "milk", 2)] {
                    match engine
                        .update_once("cart", ADD, key, &item.to_string())
                        .await
                    {
                        Ok(n) if n == first => {}
                        Ok(n) => {
                            return Err(TestError::Engine(Error::Rejected {
                                id: "cart".into(),
                                reason: format!("{key} answered {n}, not {first}"),
                            }));
                        }
                        Err(Error::Finished { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                match engine.signal("cart", GO, &()).await {
                    Ok(()) | Err(Error::Finished { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                kit.result(CART, "cart").await
            },
            |point| {
                assert_eq!(*point.uncrashed, ["tea", "milk"]);
                assert_eq!(
                    point.outcome, point.uncrashed,
                    "crash after {:?} of {} records",
                    point.crashed_after, point.records
                );
            },
        )
        .await
        .expect("every crash point ends");
    assert!(report.records >= 6, "{} records", report.records);
}

/// A run whose handler waits for a signal that never comes, and whose code
/// ends once `go` arrives.
fn register_short(engine: &Engine) {
    engine.register(SHORT, |ctx: Ctx, ()| async move {
        let c = ctx.clone();
        ctx.on_update(HANG, move |()| {
            let c = c.clone();
            async move {
                c.wait_for(&NEVER).await?;
                Ok(1u32)
            }
        });
        ctx.wait_for(&GO).await?;
        Ok::<_, Failure>(7)
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_cut_short_by_the_runs_end_fails_its_caller() {
    let dir = temp_dir("short");
    let config = || Config::file(&dir).shards(1);
    let engine = Engine::open(config()).await.unwrap();
    register_short(&engine);
    engine.start(SHORT, "short-1", &()).await.unwrap();
    let e = engine.clone();
    let caller = tokio::spawn(async move { e.update("short-1", HANG, &()).await });
    // The update is taken (its handler waits) before the run is let go.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while engine.describe("short-1").await.unwrap().waits.len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the handler never waited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    engine.signal("short-1", GO, &()).await.unwrap();
    let answered = tokio::time::timeout(std::time::Duration::from_secs(10), caller)
        .await
        .expect("the caller was answered")
        .expect("join");
    match answered {
        Err(Error::Failed { failure, .. }) => {
            assert_eq!(failure.kind.as_deref(), Some("unfinished"), "{failure:?}")
        }
        other => panic!("expected the handler's failure, found {other:?}"),
    }
    assert_eq!(engine.result(SHORT, "short-1").await.unwrap(), 7);
    drop(engine); // a crash: the replay ends the handler at the same point
    let engine = Engine::open(config()).await.unwrap();
    register_short(&engine);
    assert_eq!(engine.result(SHORT, "short-1").await.unwrap(), 7);
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
