//! A PostgreSQL store's backup is `pg_dump` (issue 35 item 3; see
//! `fusee-storage-postgres/DEPLOYMENT.md`, "Backing up"): a dump taken
//! while the engine runs, restored into a fresh database, opens and its
//! runs carry on to their results, with everything acknowledged before
//! the dump (starts, signals, results) in it, across shards: each parent's
//! child lives on whichever shard its ID hashes to, so child starts and
//! results travel between shards.
//!
//! `FUSEE_PG_DUMP_RUNS` sets the parents (default 24). Needs
//! `FUSEE_PG_URL` (`source scripts/postgres.sh`), `psql`, and `pg_dump` and
//! `pg_restore` (on the PATH or under /usr/lib/postgresql/*/bin); without a
//! server it prints SKIPPED, and fails under `CI`.
#![cfg(feature = "postgres")]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use fusee::{Config, Ctx, Engine, Failure, Ownership, Signal, StorageConfig, Workflow};

#[path = "common/pg.rs"]
mod pg;
use pg::{pg_url_or_skip, psql};

const PARENT: Workflow<u64, u64> = Workflow::new("parent");
const KID: Workflow<u64, u64> = Workflow::new("kid");
const PING: Signal<u64> = Signal::new("ping");
/// The longest a result may take: only a lost start or signal trips it.
const PATIENCE: Duration = Duration::from_secs(60);

fn register(engine: &Engine) {
    engine.register(KID, |ctx: Ctx, n: u64| async move {
        let ping = ctx.wait_for(&PING).await?.unwrap_or(0);
        Ok::<_, Failure>(
            ctx.step("add", move |_| async move { Ok(n + ping) })
                .await?,
        )
    });
    engine.register(PARENT, |ctx: Ctx, n: u64| async move {
        let id = ctx.workflow_id();
        let kid = ctx.child(KID, &format!("{id}/kid"), &n).await?;
        let ping = ctx.wait_for(&PING).await?.unwrap_or(0);
        Ok::<_, Failure>(kid * 2 + ping)
    });
}

/// What parent `i` returns when its kid got `kid_ping` and it got `ping`.
fn expected(i: u64, kid_ping: u64, ping: u64) -> u64 {
    (i + kid_ping) * 2 + ping
}

/// A PostgreSQL client program: from the PATH's directory of `psql`'s
/// version if installed there, else the newest under /usr/lib/postgresql.
fn pg_bin(name: &str) -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    versions.sort();
    versions
        .into_iter()
        .rev()
        .map(|v| v.join("bin").join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

fn run(program: PathBuf, args: &[&str]) {
    let out = Command::new(&program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn config(url: &str, schema: &str) -> Config {
    let mut storage = StorageConfig::postgres(url)
        .postgres_schema(schema)
        .postgres_lease(Duration::from_secs(30));
    // The restored copy holds the original's leases, live: the same owner
    // name takes them at once (DEPLOYMENT.md, "Backing up").
    storage.postgres.owner = Some("pg-dump-test".into());
    storage.postgres.inbox_poll = Some(Duration::from_millis(10));
    Config::new(storage).shards(4).ownership(Ownership::Lease {
        retry: Some(Duration::from_millis(50)),
        prefer: None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_dump_taken_live_restores_into_a_fresh_database_and_its_runs_carry_on() {
    let Some(url) = pg_url_or_skip() else {
        return;
    };
    let runs: u64 = std::env::var("FUSEE_PG_DUMP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
        .max(4);
    let pid = std::process::id();
    let schema = format!("t_pg_dump_{pid}");
    let database = format!("t_pg_dump_{pid}");
    let (server, _) = url.rsplit_once('/').expect("FUSEE_PG_URL names a database");
    let restored_url = format!("{server}/{database}");
    let dump = std::env::temp_dir().join(format!("fusee-pg-dump-{pid}.dump"));

    let engine = Engine::open(config(&url, &schema)).await.expect("open");
    register(&engine);
    for i in 0..runs {
        engine
            .start(PARENT, &format!("p-{i}"), &i)
            .await
            .expect("start");
    }
    // A quarter finish before the dump (results acknowledged), another
    // quarter have their kid signalled (acknowledged), the rest wait.
    let finished = runs / 4;
    let kid_signalled = runs / 2;
    for i in 0..kid_signalled {
        engine
            .signal(&format!("p-{i}/kid"), PING, &(100 + i))
            .await
            .expect("kid's signal");
    }
    let mut results = Vec::new();
    for i in 0..finished {
        engine
            .signal(&format!("p-{i}"), PING, &7)
            .await
            .expect("signal");
        let got = tokio::time::timeout(PATIENCE, engine.result(PARENT, &format!("p-{i}")))
            .await
            .expect("a result in time")
            .expect("result");
        assert_eq!(got, expected(i, 100 + i, 7));
        results.push(got);
    }

    // The dump, while the engine runs (its leases renewed, inboxes polled).
    run(
        pg_bin("pg_dump"),
        &[
            "--format=custom",
            &format!("--schema={schema}"),
            &format!("--file={}", dump.display()),
            &url,
        ],
    );
    // The original goes on and then crashes: nothing it does after the
    // dump may matter to the copy.
    for i in kid_signalled..runs {
        engine
            .signal(&format!("p-{i}/kid"), PING, &999)
            .await
            .expect("signal after the dump");
    }
    drop(engine);

    psql(&url, &format!("CREATE DATABASE \"{database}\""));
    run(
        pg_bin("pg_restore"),
        &[
            &format!("--dbname={restored_url}"),
            &dump.display().to_string(),
        ],
    );

    let restored = Engine::open(config(&restored_url, &schema))
        .await
        .expect("the restored copy opens");
    register(&restored);
    // Results acknowledged before the dump are there, unchanged.
    for (i, want) in results.iter().enumerate() {
        let got = tokio::time::timeout(PATIENCE, restored.result(PARENT, &format!("p-{i}")))
            .await
            .unwrap_or_else(|_| panic!("p-{i}: its result, acknowledged before the dump, is lost"))
            .expect("a finished run's result");
        assert_eq!(got, *want, "p-{i}");
    }
    // Signals acknowledged before the dump are there: those kids finish
    // without another; the others get theirs now (the original's signals
    // after the dump are not in the copy: 999 must not appear).
    for i in kid_signalled..runs {
        restored
            .signal(&format!("p-{i}/kid"), PING, &(200 + i))
            .await
            .expect("kid's signal on the copy");
    }
    for i in finished..runs {
        restored
            .signal(&format!("p-{i}"), PING, &9)
            .await
            .expect("signal on the copy");
    }
    for i in finished..runs {
        let got = tokio::time::timeout(PATIENCE, restored.result(PARENT, &format!("p-{i}")))
            .await
            .unwrap_or_else(|_| panic!("p-{i}: no result: a start or signal was lost"))
            .expect("result");
        let kid_ping = if i < kid_signalled { 100 + i } else { 200 + i };
        assert_eq!(got, expected(i, kid_ping, 9), "p-{i}");
    }
    restored.close().await.expect("close");

    let _ = std::fs::remove_file(&dump);
    psql(&url, &format!("DROP DATABASE \"{database}\" WITH (FORCE)"));
    psql(&url, &format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
}

/// `Engine::backup` on a PostgreSQL store refuses, naming the server's
/// tools and this crate's deployment guide, and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_backup_of_a_postgres_store_points_at_pg_dump() {
    let Some(url) = pg_url_or_skip() else {
        return;
    };
    let schema = format!("t_pg_backup_{}", std::process::id());
    let engine = Engine::open(config(&url, &schema)).await.expect("open");
    let dest = std::env::temp_dir().join(format!("fusee-pg-backup-{}", std::process::id()));
    let refused = engine.backup(&dest).await;
    match refused {
        Err(fusee::Error::Backup(fusee::BackupError::Postgres)) => {}
        other => panic!("a PostgreSQL backup through the engine: {other:?}"),
    }
    let text = fusee::Error::Backup(fusee::BackupError::Postgres).to_string();
    assert!(
        text.contains("pg_dump") && text.contains("DEPLOYMENT.md"),
        "{text}"
    );
    assert!(!dest.exists(), "the refused backup created its destination");
    engine.close().await.expect("close");
    psql(&url, &format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
}
