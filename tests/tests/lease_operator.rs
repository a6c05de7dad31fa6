//! What an operator and a caller of an engine under leases on PostgreSQL
//! read when things go wrong (issue 36): a database connection lost under
//! a waiting caller is [`Error::Unavailable`] (retryable, saying whether
//! what the call asked for may have been recorded), and a shard another
//! owner took over is logged once naming that owner (the same text is
//! what [`Engine::shard_status`] reports until the shard is tried again).
//! Needs the server `scripts/postgres.sh` starts (`FUSEE_PG_URL`);
//! without it each test prints SKIPPED, and fails under `CI`.

use std::time::{Duration, Instant};

use fusee::{Config, Ctx, Engine, Error, Failure, Ownership, Signal, StorageConfig, Workflow};

/// Waits for [`GO`], then answers with it.
const WAIT: Workflow<(), u64> = Workflow::new("wait-for-go");
const GO: Signal<u64> = Signal::new("go");
const LEASE: Duration = Duration::from_secs(2);
const PATIENCE: Duration = Duration::from_secs(30);

/// A schema no other test uses.
fn unique_schema(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("t_{what}_{}_{}", std::process::id(), nanos % 1_000_000_007)
}

/// One shard under a lease as `owner`, no checkpoint or seal on a timer
/// (so the only statement after the connections die is the test's).
async fn open(url: &str, schema: &str, owner: &str) -> Engine {
    let mut storage = StorageConfig::postgres(url)
        .postgres_schema(schema)
        .postgres_lease(LEASE);
    storage.postgres.owner = Some(owner.to_owned());
    let config = Config::new(storage)
        .shards(1)
        .checkpoint_interval(Duration::from_secs(24 * 3600))
        .seal_after_idle(Duration::from_secs(24 * 3600))
        .ownership(Ownership::Lease {
            retry: Some(Duration::from_millis(200)),
            prefer: None,
        });
    let engine = Engine::open(config).await.expect("open");
    engine.register(WAIT, |ctx: Ctx, ()| async move {
        let go = ctx.wait_for(&GO).await?;
        go.ok_or_else(|| Failure::new("no go"))
    });
    engine
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Runs `statement` with the text parameters `params` on a connection of
/// its own, on a thread of its own (the blocking client runs a runtime of
/// its own, which it may not inside the test's); the rows it touched.
fn admin(url: &str, statement: &str, params: &[&str]) -> u64 {
    let (url, statement) = (url.to_owned(), statement.to_owned());
    let params: Vec<String> = params.iter().map(|&p| p.to_owned()).collect();
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("an admin connection");
        let params: Vec<&(dyn postgres::types::ToSql + Sync)> = params
            .iter()
            .map(|p| p as &(dyn postgres::types::ToSql + Sync))
            .collect();
        c.execute(statement.as_str(), &params)
            .unwrap_or_else(|e| panic!("{statement}: {e}"))
    })
    .join()
    .expect("the admin statement")
}

/// The database ends every session of the engine (as a server restart
/// does: `57P01`) while a caller waits for a result and another's signal
/// waits to be durable: both get [`Error::Unavailable`], the signal's
/// saying it may have been recorded, the result's that nothing was; the
/// shard comes back on its own and the run finishes.
#[test]
fn callers_during_an_outage_are_told_to_retry() {
    runtime().block_on(outage());
}

async fn outage() {
    let Some(url) = fusee_tests::pg_url_or_skip("unavailable during an outage") else {
        return;
    };
    let schema = unique_schema("outage");
    let owner = format!("outage-{}", std::process::id());
    let engine = open(&url, &schema, &owner).await;
    engine.start(WAIT, "w", &()).await.expect("start");
    let waiter = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.result(WAIT, "w").await })
    };
    // The result's caller is waiting on the shard.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ended = admin(
        &url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        &[&format!("fusee {owner}")],
    );
    assert!(ended >= 3, "only {ended} sessions of the engine ended");
    let signalled = engine.signal("w", GO, &7).await;
    match &signalled {
        Err(
            e @ Error::Unavailable {
                shard: 0,
                maybe_recorded: true,
                ..
            },
        ) => {
            let text = e.to_string();
            assert!(
                text.starts_with("shard 0 is unavailable: I/O error while flushing log records ")
                    && text.ends_with("what this call asked for may or may not have been recorded (it was waiting to become durable): try again shortly in a form safe to repeat (a start that attaches, a signal or update with a key)"),
                "{text}"
            );
        }
        other => panic!("a signal whose flush lost its connection: {other:?}"),
    }
    match tokio::time::timeout(PATIENCE, waiter).await {
        Ok(Ok(Err(
            e @ Error::Unavailable {
                maybe_recorded: false,
                ..
            },
        ))) => assert!(
            e.to_string()
                .ends_with("nothing this call asked for was recorded: try it again shortly"),
            "{e}"
        ),
        other => panic!("a result waited on during the outage: {other:?}"),
    }
    // Retrying is safe: the shard comes back (new connections, none from
    // before the outage) and the run takes a `go`, the first if it was
    // durable.
    let began = Instant::now();
    let value = loop {
        assert!(began.elapsed() < PATIENCE, "the shard never came back");
        match engine.signal("w", GO, &8).await {
            Ok(()) | Err(Error::Finished { .. }) => {}
            Err(Error::NotOwner { .. } | Error::Unavailable { .. }) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => panic!("a signal after the outage: {e}"),
        }
        break engine.result(WAIT, "w").await.expect("the result");
    };
    assert!(value == 7 || value == 8, "the run took go {value}");
    engine.close().await.expect("close");
}

/// Another owner takes the shard over (its lease row moved to a new epoch
/// and holder, as a takeover moves it): the engine lets the shard go, says
/// once who took it, and its status shows the same text.
#[test]
fn a_takeover_names_the_new_owner() {
    runtime().block_on(takeover());
}

async fn takeover() {
    let Some(url) = fusee_tests::pg_url_or_skip("takeover message") else {
        return;
    };
    let schema = unique_schema("taken");
    let engine = open(&url, &schema, "first").await;
    assert_eq!(engine.owned_shards(), vec![0]);
    let moved = admin(
        &url,
        &format!(
            "UPDATE \"{schema}\".shards SET epoch = epoch + 1, owner = 'second',
                 expires = now() + interval '1 hour' WHERE shard = 0"
        ),
        &[],
    );
    assert_eq!(moved, 1, "the takeover");
    let began = Instant::now();
    let status = loop {
        let status = engine.shard_status().remove(0);
        if status.losses == 1 {
            break status;
        }
        assert!(began.elapsed() < PATIENCE, "the engine kept the shard");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(!status.owned);
    assert_eq!(
        status.last_error.as_deref(),
        Some(
            "shard 0 was taken over by \"second\" (this engine's lease lapsed): it stopped here, and is tried again once that owner's lease lapses"
        )
    );
    match engine.start(WAIT, "x", &()).await {
        Err(Error::NotOwner { shard: 0 }) => {}
        other => panic!("a start on a shard taken over: {:?}", other.map(|_| ())),
    }
    engine.close().await.expect("close");
}
