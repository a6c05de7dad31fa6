//! The rest of the workflow API (issue 15): children across shards,
//! signals and cancels between workflows, catchable cancellation,
//! continue-as-new, versioning with `patched`, terminate, and determinism
//! errors that name the operation.
//!
//! `FUSEE_CHILD_PARENTS` sets the parents of the cross-shard test (default
//! 1,000, each with two children, over four shards).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fusee::{
    Config, Ctx, Engine, Error, Failure, ParentClose, RunStatus, Signal, StepError, Workflow,
};

const PARENT: Workflow<u64, u64> = Workflow::new("parent");
const CHILD: Workflow<u64, u64> = Workflow::new("child");
const PINGER: Workflow<String, ()> = Workflow::new("pinger");
const WAITER: Workflow<(), u64> = Workflow::new("waiter");
const CLEANER: Workflow<(), String> = Workflow::new("cleaner");
const CANCELLER: Workflow<String, ()> = Workflow::new("canceller");
const COUNTER: Workflow<(u64, u64), u64> = Workflow::new("counter");
const LONG_CHILD: Workflow<(), ()> = Workflow::new("long-child");
const SHORT_PARENT: Workflow<(), ()> = Workflow::new("short-parent");
const PING: Signal<u64> = Signal::new("ping");

fn parents() -> u64 {
    std::env::var("FUSEE_CHILD_PARENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("fusee-wf-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn register_family(engine: &Engine) {
    engine.register(CHILD, |ctx: Ctx, n: u64| async move {
        Ok::<_, Failure>(
            ctx.step("square", move |_| async move { Ok(n * n) })
                .await?,
        )
    });
    engine.register(PARENT, |ctx: Ctx, n: u64| async move {
        let id = ctx.workflow_id();
        let a = ctx.child(CHILD, &format!("{id}/a"), &n);
        let b = ctx.child(CHILD, &format!("{id}/b"), &(n + 1));
        let (a, b) = tokio::join!(a, b);
        Ok::<_, Failure>(a? + b?)
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parents_get_their_childrens_results_across_shards_and_a_restart() {
    let dir = temp_dir("family");
    let n = parents();
    let engine = Engine::open(Config::file(&dir).shards(4)).await.unwrap();
    register_family(&engine);
    let runs: Vec<_> = (0..n)
        .map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move { engine.start(PARENT, &format!("p-{i}"), &i).await })
        })
        .collect();
    for r in runs {
        r.await.unwrap().unwrap();
    }
    // Half of them, then a crash, then the rest after the restart.
    for i in 0..n / 2 {
        let got = engine.result(PARENT, &format!("p-{i}")).await.unwrap();
        assert_eq!(got, i * i + (i + 1) * (i + 1));
    }
    drop(engine);
    let engine = Engine::open(Config::file(&dir).shards(4)).await.unwrap();
    register_family(&engine);
    for i in 0..n {
        let got = engine.result(PARENT, &format!("p-{i}")).await.unwrap();
        assert_eq!(got, i * i + (i + 1) * (i + 1), "parent {i}");
        let kid = engine.result(CHILD, &format!("p-{i}/b")).await.unwrap();
        assert_eq!(kid, (i + 1) * (i + 1));
    }
    // Messages the crash left unacknowledged go out again at the open and
    // are acknowledged as their targets see them; the results above do not
    // wait for that, so give it a bounded while.
    let since = std::time::Instant::now();
    let m = loop {
        let m = engine.metrics().await;
        if m.unacknowledged_messages == 0 || since.elapsed() > Duration::from_secs(20) {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        m.unacknowledged_messages,
        0,
        "after {:?}: {m:?}",
        since.elapsed()
    );
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_signal_each_other_exactly_once() {
    let engine = Engine::open(Config::memory().shards(4)).await.unwrap();
    engine.register(WAITER, |ctx: Ctx, ()| async move {
        let mut sum = 0;
        for _ in 0..3 {
            sum += ctx.wait_for(&PING).await?.unwrap_or(0);
        }
        // Nothing more arrives: three signals, each once.
        let extra = ctx
            .wait_for(&PING)
            .timeout(Duration::from_millis(200))
            .await?;
        Ok::<_, Failure>(sum + extra.unwrap_or(0) * 1000)
    });
    engine.register(PINGER, |ctx: Ctx, target: String| async move {
        for i in 1..=3 {
            ctx.signal(&target, PING, &i)?;
        }
        Ok::<_, Failure>(())
    });
    for w in 0..8 {
        engine.start(WAITER, &format!("w-{w}"), &()).await.unwrap();
        engine
            .execute(PINGER, &format!("ping-{w}"), &format!("w-{w}"))
            .await
            .unwrap();
    }
    for w in 0..8 {
        assert_eq!(engine.result(WAITER, &format!("w-{w}")).await.unwrap(), 6);
    }
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_workflow_catches_it_and_cleans_up() {
    let engine = Engine::open(Config::memory().shards(2)).await.unwrap();
    let cleaned = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&cleaned);
    engine.register(CLEANER, move |ctx: Ctx, ()| {
        let seen = Arc::clone(&seen);
        async move {
            match ctx.sleep("forever", Duration::from_secs(86_400)).await {
                Ok(()) => Ok("slept".to_string()),
                Err(f) => {
                    assert_eq!(f.kind.as_deref(), Some("cancelled"));
                    ctx.step("clean-up", move |_| {
                        let seen = Arc::clone(&seen);
                        async move {
                            seen.fetch_add(1, Ordering::SeqCst);
                            Ok::<_, StepError>(())
                        }
                    })
                    .await?;
                    Err(f)
                }
            }
        }
    });
    engine.register(CANCELLER, |ctx: Ctx, target: String| async move {
        ctx.cancel(&target, "no longer needed");
        Ok::<_, Failure>(())
    });
    engine.start(CLEANER, "c-1", &()).await.unwrap();
    engine
        .execute(CANCELLER, "k-1", &"c-1".to_string())
        .await
        .unwrap();
    match engine.result(CLEANER, "c-1").await {
        Err(Error::Failed {
            status, failure, ..
        }) => {
            assert_eq!(status, "cancelled");
            assert_eq!(failure.message, "no longer needed");
        }
        other => panic!("expected a cancelled run, found {other:?}"),
    }
    assert_eq!(
        cleaned.load(Ordering::SeqCst),
        1,
        "the clean-up step ran once"
    );
    // From a client too.
    engine.start(CLEANER, "c-2", &()).await.unwrap();
    engine.cancel("c-2", "by hand").await.unwrap();
    assert!(matches!(
        engine.result(CLEANER, "c-2").await,
        Err(Error::Failed {
            status: "cancelled",
            ..
        })
    ));
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_keeps_the_id_and_hands_the_result_on() {
    let dir = temp_dir("continue");
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    engine.register(COUNTER, |ctx: Ctx, (n, total): (u64, u64)| async move {
        let total = ctx
            .step("add", move |_| async move { Ok(total + n) })
            .await?;
        if n == 0 {
            return Ok::<_, Failure>(total);
        }
        ctx.continue_as_new(&(n - 1, total)).await
    });
    let run = engine.start(COUNTER, "count", &(10, 0)).await.unwrap();
    let first = run.run().run;
    assert_eq!(run.result().await.unwrap(), 55);
    let d = engine.describe("count").await.unwrap();
    assert!(d.run > first, "a later run holds the ID: {d:?}");
    engine.close().await.unwrap();
    drop(engine);
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    assert_eq!(engine.result(COUNTER, "count").await.unwrap(), 55);
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_is_terminated_when_its_parent_finishes_first() {
    let engine = Engine::open(Config::memory().shards(2)).await.unwrap();
    engine.register(LONG_CHILD, |ctx: Ctx, ()| async move {
        ctx.sleep("long", Duration::from_secs(86_400)).await?;
        Ok::<_, Failure>(())
    });
    engine.register(SHORT_PARENT, |ctx: Ctx, ()| async move {
        let child = ctx
            .child(LONG_CHILD, "kid", &())
            .on_parent_close(ParentClose::Terminate);
        // Give up on the child after a short wait.
        tokio::select! {
            r = child => r?,
            _ = ctx.sleep("patience", Duration::from_millis(50)) => {}
        }
        Ok::<_, Failure>(())
    });
    engine.execute(SHORT_PARENT, "sp", &()).await.unwrap();
    match engine.result(LONG_CHILD, "kid").await {
        Err(Error::Failed { status, .. }) => assert_eq!(status, "terminated"),
        other => panic!("expected the child terminated, found {other:?}"),
    }
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_children_and_terminate() {
    const GHOST: Workflow<(), ()> = Workflow::new("ghost");
    const ORPHAN: Workflow<(), String> = Workflow::new("orphan");
    let engine = Engine::open(Config::memory().shards(2)).await.unwrap();
    engine.register(ORPHAN, |ctx: Ctx, ()| async move {
        match ctx.child(GHOST, "g", &()).await {
            Err(f) => Ok::<_, Failure>(f.kind.unwrap_or_default()),
            Ok(()) => Ok("started".into()),
        }
    });
    assert_eq!(
        engine.execute(ORPHAN, "o", &()).await.unwrap(),
        "unknown-workflow"
    );
    assert!(matches!(
        engine.describe("g").await,
        Err(Error::NotFound { .. })
    ));
    engine.register(WAITER, |ctx: Ctx, ()| async move {
        Ok::<_, Failure>(ctx.wait_for(&PING).await?.unwrap_or(0))
    });
    engine.start(WAITER, "t", &()).await.unwrap();
    engine.terminate("t", "operator").await.unwrap();
    match engine.result(WAITER, "t").await {
        Err(Error::Failed {
            status, failure, ..
        }) => assert_eq!(
            (status, failure.message.as_str()),
            ("terminated", "operator")
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        engine.terminate("t", "again").await,
        Err(Error::Finished { .. })
    ));
    engine.close().await.unwrap();
}

const VERSIONED: Workflow<(), String> = Workflow::new("versioned");

/// Old code: step "old", then a wait. New code puts a patch where "old"
/// was, and renames nothing else.
fn register_versioned(engine: &Engine, new_code: bool, renamed: bool) {
    engine.register(VERSIONED, move |ctx: Ctx, ()| async move {
        let first = if new_code && ctx.patched("use-new") {
            ctx.step("new", |_| async { Ok("new".to_string()) }).await?
        } else {
            let name = if renamed { "renamed" } else { "old" };
            ctx.step(name, |_| async { Ok("old".to_string()) }).await?
        };
        let n = ctx.wait_for(&PING).await?.unwrap_or(0);
        Ok::<_, Failure>(format!("{first}:{n}"))
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patched_keeps_old_runs_on_the_old_branch_and_renames_are_determinism_errors() {
    let dir = temp_dir("versions");
    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    register_versioned(&engine, false, false);
    engine.start(VERSIONED, "old-run", &()).await.unwrap();
    engine.start(VERSIONED, "renamed-run", &()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    engine.close().await.unwrap();
    drop(engine);

    // New code with a patch: the old run replays its old branch, a new run
    // takes the new one.
    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    register_versioned(&engine, true, false);
    engine.start(VERSIONED, "new-run", &()).await.unwrap();
    engine.signal("old-run", PING, &1).await.unwrap();
    engine.signal("new-run", PING, &2).await.unwrap();
    assert_eq!(engine.result(VERSIONED, "old-run").await.unwrap(), "old:1");
    assert_eq!(engine.result(VERSIONED, "new-run").await.unwrap(), "new:2");
    engine.close().await.unwrap();
    drop(engine);

    // A rename without a patch breaks replay: the run stops and says where.
    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    register_versioned(&engine, false, true);
    let mut d = engine.describe("renamed-run").await.unwrap();
    for _ in 0..100 {
        if d.status == RunStatus::Stopped {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        d = engine.describe("renamed-run").await.unwrap();
    }
    assert_eq!(d.status, RunStatus::Stopped, "{d:?}");
    let why = d.stopped_because.unwrap_or_default();
    assert!(
        why.contains("operation 1") && why.contains("\"old\"") && why.contains("\"renamed\""),
        "the message names the operation and both names: {why}"
    );
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The result of `id`, which must come within a few seconds.
async fn result_soon(engine: &Engine, id: &str) -> Result<String, Error> {
    tokio::time::timeout(Duration::from_secs(5), engine.result(VERSIONED, id))
        .await
        .unwrap_or_else(|_| panic!("waiting on {id:?} did not end"))
}

/// The determinism error a caller waiting on the stopped "stopped-run"
/// gets: the run, the operation and both sides.
fn assert_departure(got: Result<String, Error>) {
    match got {
        Err(Error::Determinism(e)) => {
            assert_eq!(e.seq, 1, "{e}");
            let why = e.to_string();
            assert!(
                why.contains("operation 1")
                    && why.contains("\"old\"")
                    && why.contains("\"renamed\""),
                "the error names the operation and both sides: {why}"
            );
            assert!(
                why.contains(&format!("run {}", e.run)),
                "and the run: {why}"
            );
        }
        other => panic!("expected a determinism error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_waiting_on_a_stopped_run_get_the_determinism_error_until_it_is_fixed() {
    let dir = temp_dir("stopped-wait");
    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    register_versioned(&engine, false, false);
    engine.start(VERSIONED, "stopped-run", &()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    engine.close().await.unwrap();
    drop(engine);

    // A deploy that renames the step: a caller already waiting (the run
    // waits for its code) is answered when the run stops, and every later
    // caller at once.
    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    let waiting = {
        let engine = engine.clone();
        tokio::spawn(async move { result_soon(&engine, "stopped-run").await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    register_versioned(&engine, false, true);
    assert_departure(waiting.await.unwrap());
    assert_departure(result_soon(&engine, "stopped-run").await);
    assert_departure(result_soon(&engine, "stopped-run").await);
    assert_eq!(
        engine.describe("stopped-run").await.unwrap().status,
        RunStatus::Stopped
    );
    engine.close().await.unwrap();
    drop(engine);

    // The fix deployed: the run replays and waiting ends with its result.
    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    register_versioned(&engine, false, false);
    engine.signal("stopped-run", PING, &7).await.unwrap();
    assert_eq!(result_soon(&engine, "stopped-run").await.unwrap(), "old:7");
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

const BUMP: fusee::Update<u64, u64> = fusee::Update::new("bump");

/// [`register_versioned`] with an update handler registered first.
fn register_versioned_with_update(engine: &Engine, renamed: bool) {
    engine.register(VERSIONED, move |ctx: Ctx, ()| async move {
        ctx.on_update(BUMP, |n: u64| async move { Ok(n + 1) });
        let name = if renamed { "renamed" } else { "old" };
        let first = ctx.step(name, |_| async { Ok("old".to_string()) }).await?;
        let n = ctx.wait_for(&PING).await?.unwrap_or(0);
        Ok::<_, Failure>(format!("{first}:{n}"))
    });
}

/// An update call on `id`, which must end within a few seconds.
async fn update_soon<F: std::future::Future<Output = Result<u64, Error>>>(
    what: &str,
    call: F,
) -> Result<String, Error> {
    tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .unwrap_or_else(|_| panic!("{what} on the stopped run did not end"))
        .map(|n| n.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_to_a_stopped_run_get_the_determinism_error_until_it_is_fixed() {
    let dir = temp_dir("stopped-update");
    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    register_versioned_with_update(&engine, false);
    engine.start(VERSIONED, "stopped-run", &()).await.unwrap();
    assert_eq!(engine.update("stopped-run", BUMP, &1).await.unwrap(), 2);
    engine.close().await.unwrap();
    drop(engine);

    // A deploy that renames the step: every kind of update call is
    // answered at once, and again, with the departure; none is recorded.
    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    register_versioned_with_update(&engine, true);
    let mut d = engine.describe("stopped-run").await.unwrap();
    for _ in 0..100 {
        if d.status == RunStatus::Stopped {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        d = engine.describe("stopped-run").await.unwrap();
    }
    assert_eq!(d.status, RunStatus::Stopped, "{d:?}");
    for _ in 0..2 {
        assert_departure(update_soon("update", engine.update("stopped-run", BUMP, &5)).await);
        assert_departure(
            update_soon(
                "update_once",
                engine.update_once("stopped-run", BUMP, "key-1", &5),
            )
            .await,
        );
        assert_departure(
            update_soon(
                "update_with_start",
                engine.update_with_start(VERSIONED, "stopped-run", &(), BUMP, &5),
            )
            .await,
        );
    }
    engine.close().await.unwrap();
    drop(engine);

    // The fix deployed: updates run again, the keyed one as new (the
    // refused call recorded nothing), and the run ends normally.
    let engine = Engine::open(Config::file(&dir).shards(1)).await.unwrap();
    register_versioned_with_update(&engine, false);
    assert_eq!(
        update_soon(
            "update_once",
            engine.update_once("stopped-run", BUMP, "key-1", &10)
        )
        .await
        .unwrap(),
        "11"
    );
    assert_eq!(engine.update("stopped-run", BUMP, &20).await.unwrap(), 21);
    engine.signal("stopped-run", PING, &3).await.unwrap();
    assert_eq!(result_soon(&engine, "stopped-run").await.unwrap(), "old:3");
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

const CART: Workflow<(), Vec<String>> = Workflow::new("cart");
const ADD_ITEM: fusee::Update<String, usize> = fusee::Update::new("add-item");
const ITEMS: fusee::Query<(), Vec<String>> = fusee::Query::new("items");
const CLOSE_CART: Signal<()> = Signal::new("close");

fn register_cart(engine: &Engine, priced: Arc<AtomicU32>) {
    engine.register(CART, move |ctx: Ctx, ()| {
        let priced = Arc::clone(&priced);
        async move {
            let items = std::rc::Rc::new(std::cell::RefCell::new(Vec::<String>::new()));
            let seen = std::rc::Rc::clone(&items);
            ctx.on_query(ITEMS, move |()| Ok(seen.borrow().clone()));
            let held = std::rc::Rc::clone(&items);
            let c = ctx.clone();
            ctx.on_update_validated(
                ADD_ITEM,
                |item: &String| {
                    if item.is_empty() {
                        Err("an item needs a name".to_string())
                    } else {
                        Ok(())
                    }
                },
                move |item: String| {
                    let (held, c, priced) =
                        (std::rc::Rc::clone(&held), c.clone(), Arc::clone(&priced));
                    async move {
                        // A step inside the handler: recorded, replayed.
                        c.step("price", move |_| {
                            let priced = Arc::clone(&priced);
                            async move {
                                priced.fetch_add(1, Ordering::SeqCst);
                                Ok(())
                            }
                        })
                        .await?;
                        held.borrow_mut().push(item);
                        Ok(held.borrow().len())
                    }
                },
            );
            ctx.wait_for(&CLOSE_CART).await?;
            let done = items.borrow().clone();
            Ok::<_, Failure>(done)
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_run_their_handlers_durably_and_queries_read_the_state() {
    let dir = temp_dir("cart");
    let priced = Arc::new(AtomicU32::new(0));
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_cart(&engine, Arc::clone(&priced));
    engine.start(CART, "cart-1", &()).await.unwrap();
    assert_eq!(
        engine
            .update("cart-1", ADD_ITEM, &"tea".to_string())
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        engine
            .update("cart-1", ADD_ITEM, &"milk".to_string())
            .await
            .unwrap(),
        2
    );
    match engine.update("cart-1", ADD_ITEM, &String::new()).await {
        Err(Error::Rejected { reason, .. }) => assert_eq!(reason, "an item needs a name"),
        other => panic!("expected the validator's refusal, found {other:?}"),
    }
    const NOPE: fusee::Update<(), ()> = fusee::Update::new("nope");
    match engine.update("cart-1", NOPE, &()).await {
        Err(Error::UnknownUpdate { registered, .. }) => {
            assert_eq!(registered, vec!["add-item".to_string()])
        }
        other => panic!("expected UnknownUpdate, found {other:?}"),
    }
    const WHAT: fusee::Query<(), ()> = fusee::Query::new("what");
    assert!(matches!(
        engine.query("cart-1", WHAT, &()).await,
        Err(Error::UnknownQuery { .. })
    ));
    assert_eq!(
        engine.query("cart-1", ITEMS, &()).await.unwrap(),
        vec!["tea".to_string(), "milk".to_string()]
    );
    drop(engine); // a crash

    // The updates replay (their steps not run again), the query sees them.
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register_cart(&engine, Arc::clone(&priced));
    assert_eq!(
        engine.query("cart-1", ITEMS, &()).await.unwrap(),
        vec!["tea".to_string(), "milk".to_string()]
    );
    assert_eq!(
        priced.load(Ordering::SeqCst),
        2,
        "each update's step ran once"
    );
    engine.signal("cart-1", CLOSE_CART, &()).await.unwrap();
    assert_eq!(
        engine.result(CART, "cart-1").await.unwrap(),
        vec!["tea".to_string(), "milk".to_string()]
    );
    assert!(matches!(
        engine.update("cart-1", ADD_ITEM, &"late".to_string()).await,
        Err(Error::Finished { .. })
    ));
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

const EAGER: Workflow<(), u64> = Workflow::new("eager");
const STAMP: fusee::Update<(), u64> = fusee::Update::new("stamp");
const STRICT: fusee::Update<u64, u64> = fusee::Update::new("strict");
const PEEK: fusee::Query<(), u64> = fusee::Query::new("peek");

/// Handler code that uses the run's `Ctx` before its future (a common way
/// to write one), a validator and a query handler that panic: the update
/// works, the panics are errors for their caller, and the shard goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_may_use_the_ctx_at_once_and_their_panics_stay_theirs() {
    let engine = Engine::open(Config::memory().shards(1)).await.unwrap();
    engine.register(EAGER, |ctx: Ctx, ()| async move {
        let c = ctx.clone();
        ctx.on_update(STAMP, move |()| {
            // Synchronous use of the run's state, before the future.
            let id_len = c.workflow_id().len() as u64;
            let now = c.now();
            async move {
                let secs = now
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                Ok((secs > 0) as u64 + id_len)
            }
        });
        ctx.on_update_validated(
            STRICT,
            |n: &u64| {
                if *n == 13 {
                    panic!("unlucky");
                }
                Ok(())
            },
            |n: u64| async move { Ok(n) },
        );
        ctx.on_query(PEEK, |()| -> Result<u64, Failure> { panic!("peeking") });
        ctx.wait_for(&CLOSE_CART).await?;
        Ok::<_, Failure>(1)
    });
    engine.start(EAGER, "e-1", &()).await.unwrap();
    assert_eq!(engine.update("e-1", STAMP, &()).await.unwrap(), 4);
    match engine.update("e-1", STRICT, &13).await {
        Err(Error::Rejected { reason, .. }) => assert!(reason.contains("unlucky"), "{reason}"),
        other => panic!("expected the validator's panic as a refusal, found {other:?}"),
    }
    match engine.query("e-1", PEEK, &()).await {
        Err(Error::QueryFailed { failure, .. }) => {
            assert_eq!(failure.kind.as_deref(), Some("panic"))
        }
        other => panic!("expected the query's panic as a failed query, found {other:?}"),
    }
    // The shard still works.
    assert_eq!(engine.update("e-1", STRICT, &7).await.unwrap(), 7);
    engine.signal("e-1", CLOSE_CART, &()).await.unwrap();
    assert_eq!(engine.result(EAGER, "e-1").await.unwrap(), 1);
    engine.close().await.unwrap();
}

/// A parent whose journal holds a child of a type this engine has not
/// registered (yet) replays without a determinism error and finishes once
/// the type is registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_child_of_a_type_registered_later_is_not_a_determinism_error() {
    let dir = temp_dir("late-child");
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    engine.register(LONG_CHILD, |ctx: Ctx, ()| async move {
        ctx.wait_for(&CLOSE_CART).await?;
        Ok::<_, Failure>(())
    });
    engine.register(SHORT_PARENT, |ctx: Ctx, ()| async move {
        ctx.child(LONG_CHILD, "late-kid", &()).await?;
        Ok::<_, Failure>(())
    });
    engine
        .start(SHORT_PARENT, "late-parent", &())
        .await
        .unwrap();
    for _ in 0..500 {
        if engine.describe("late-kid").await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(engine); // a crash

    // The parent's code comes first; the child's type only later.
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    engine.register(SHORT_PARENT, |ctx: Ctx, ()| async move {
        ctx.child(LONG_CHILD, "late-kid", &()).await?;
        Ok::<_, Failure>(())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_ne!(
        engine.describe("late-parent").await.unwrap().status,
        RunStatus::Stopped,
        "the parent replayed its child call without the child's type"
    );
    engine.register(LONG_CHILD, |ctx: Ctx, ()| async move {
        ctx.wait_for(&CLOSE_CART).await?;
        Ok::<_, Failure>(())
    });
    engine.signal("late-kid", CLOSE_CART, &()).await.unwrap();
    engine.result(SHORT_PARENT, "late-parent").await.unwrap();
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

const CLOCKED: Workflow<(), (u64, u64, u64)> = Workflow::new("clocked");
const GO: Signal<()> = Signal::new("go");

/// Time never runs backwards inside a run (issue 32.5): reopened on a
/// clock a minute behind what the journal holds (an NTP step, a VM
/// restore), `now()` reads no earlier than the last recorded `now()`, and
/// a sleep armed after the reopen fires no earlier than that time plus
/// its duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopen_on_a_clock_behind_the_journal_does_not_run_a_runs_time_backwards() {
    use fusee::{Clock, VirtualClock};
    fn ms(t: std::time::SystemTime) -> u64 {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
    let register = |engine: &Engine| {
        engine.register(CLOCKED, |ctx: Ctx, ()| async move {
            let before = ms(ctx.now());
            ctx.wait_for(&GO).await?;
            let after = ms(ctx.now());
            ctx.sleep("nap", Duration::from_secs(10)).await?;
            Ok::<_, Failure>((before, after, ms(ctx.now())))
        });
    };
    let dir = temp_dir("clock-behind");
    let ahead = 1_700_000_060_000;
    let clock = VirtualClock::new(ahead);
    let engine = Engine::open(Config::file(&dir).clock(Clock::Virtual(clock.clone())))
        .await
        .unwrap();
    register(&engine);
    engine.start(CLOCKED, "c", &()).await.unwrap();
    // The first `now()` is recorded once the code waits for the signal.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while engine.describe("c").await.unwrap().waits.is_empty() {
        assert!(std::time::Instant::now() < deadline, "the run never waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(engine); // a crash

    let behind = VirtualClock::new(ahead - 60_000);
    let engine = Engine::open(Config::file(&dir).clock(Clock::Virtual(behind.clone())))
        .await
        .unwrap();
    register(&engine);
    engine.signal("c", GO, &()).await.unwrap();
    // The sleep fires 10 s after the journal's time, not after the clock's:
    // at 50 s on the clock behind it has not fired yet.
    behind.advance(50_000);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        matches!(
            engine.describe("c").await.unwrap().status,
            RunStatus::Running
        ),
        "the sleep fired by the clock behind the journal"
    );
    behind.advance(20_000);
    let (before, after, woke) =
        tokio::time::timeout(Duration::from_secs(10), engine.result(CLOCKED, "c"))
            .await
            .expect("the run finished")
            .unwrap();
    assert_eq!(before, ahead);
    assert!(after >= before, "now() ran backwards: {after} < {before}");
    assert!(
        woke >= before + 10_000,
        "woke at {woke}, before {before} + 10 s"
    );
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A detached child: the parent goes on once the child's start is
/// recorded and ends first; under `Abandon` the child runs on to its own
/// end, across a restart of the engine in between; an unknown type is an
/// error at once. The parent's journal holds the `Child` record, and
/// replaying it (the restart) is no determinism error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_child_outlives_its_parent_that_did_not_wait() {
    const SLOW: Workflow<u64, u64> = Workflow::new("slow-child");
    const LAUNCHER: Workflow<(), String> = Workflow::new("launcher");
    const GHOST: Workflow<(), ()> = Workflow::new("ghost");
    let register = |engine: &Engine| {
        engine.register(SLOW, |ctx: Ctx, n: u64| async move {
            ctx.sleep("later", Duration::from_millis(300)).await?;
            Ok::<_, Failure>(n + 1)
        });
        engine.register(LAUNCHER, |ctx: Ctx, ()| async move {
            ctx.child(SLOW, "detached-kid", &41)
                .on_parent_close(ParentClose::Abandon)
                .detach()
                .await?;
            let ghost = ctx.child(GHOST, "no-such", &()).detach().await;
            let refused = ghost.err().and_then(|f| f.kind).unwrap_or_default();
            // Held here until the test restarts the engine.
            ctx.sleep("after", Duration::from_millis(100)).await?;
            Ok::<_, Failure>(refused)
        });
    };
    let dir = temp_dir("detached");
    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register(&engine);
    engine.start(LAUNCHER, "launcher-1", &()).await.unwrap();
    // The child exists (its start is durable) while the parent runs.
    let mut seen = false;
    for _ in 0..200 {
        if engine.describe("detached-kid").await.is_ok() {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(seen, "the detached child was never started");
    engine.close().await.unwrap();

    let engine = Engine::open(Config::file(&dir).shards(2)).await.unwrap();
    register(&engine);
    assert_eq!(
        engine.result(LAUNCHER, "launcher-1").await.unwrap(),
        "unknown-workflow"
    );
    let parent = engine.describe("launcher-1").await.unwrap();
    let child = engine.describe("detached-kid").await.unwrap();
    assert!(
        matches!(parent.status, RunStatus::Finished(_)),
        "{:?}",
        parent.status
    );
    // The parent did not wait: it ended before its child.
    if let (Some(p), RunStatus::Finished(_)) = (parent.finished_ms, &child.status) {
        assert!(p <= child.finished_ms.unwrap_or(u64::MAX));
    }
    assert_eq!(engine.result(SLOW, "detached-kid").await.unwrap(), 42);
    // Detached: the child's result never came back to the parent.
    let journal = engine
        .journal_json("launcher-1", None)
        .await
        .unwrap()
        .to_string();
    assert!(journal.contains("\"Child\""), "{journal}");
    assert!(!journal.contains("ChildDone"), "{journal}");
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
