//! What an operator reads when another owner takes a shard over while this
//! engine lives (issue 36): one WARN line naming the new owner, and nothing
//! else at WARN or above: not the storage failure that stops the shard
//! (once an ERROR), not the shard's inbox reader meeting the lost lease
//! (once a WARN per poll), not the retries that meet the new owner's lease.
//!
//! The takeover is played on the server: the `shards` row of the engine's
//! schema is given a new epoch and holder, as another process's open
//! does. Events are caught by a subscriber of this test binary (its only
//! test, so the global subscriber sees this engine alone). Needs
//! `FUSEE_PG_URL` (`source scripts/postgres.sh`) and `psql`.
#![cfg(feature = "postgres")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fusee::{Config, Engine, Ownership, StorageConfig};

#[path = "common/pg.rs"]
mod pg;
use pg::{pg_url_or_skip, psql};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// WARN and ERROR events, each as its message and its fields.
#[derive(Clone, Default)]
struct Caught(Arc<Mutex<Vec<String>>>);

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl Subscriber for Caught {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut text = Text(format!("{}:", event.metadata().level()));
        event.record(&mut text);
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(text.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Caught {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

const W: fusee::Workflow<(), ()> = fusee::Workflow::new("w");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_seen_by_a_live_engine_is_one_warning_naming_the_new_owner() {
    let Some(url) = pg_url_or_skip() else {
        return;
    };
    let caught = Caught::default();
    tracing::subscriber::set_global_default(caught.clone()).expect("the only subscriber");

    let schema = format!("t_lease_logs_{}", std::process::id());
    // A long lease, renewed every third of it: the engine learns of the
    // takeover from its next write, and its inbox reader polls every 10 ms.
    let mut storage = StorageConfig::postgres(&url)
        .postgres_schema(&schema)
        .postgres_lease(Duration::from_secs(30));
    storage.postgres.inbox_poll = Some(Duration::from_millis(10));
    let config = Config::new(storage).shards(1).ownership(Ownership::Lease {
        retry: Some(Duration::from_millis(50)),
        prefer: None,
    });
    let engine = Engine::open(config).await.expect("open");
    engine.register(W, |_: fusee::Ctx, ()| async { Ok::<_, fusee::Failure>(()) });
    assert_eq!(engine.owned_shards(), vec![0]);
    // Some reads of the inbox while the shard is ours: all quiet.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(caught.lines(), Vec::<String>::new());

    // Another owner's open: a new epoch and holder, a lease of an hour.
    psql(
        &url,
        &format!(
            "UPDATE \"{schema}\".shards SET epoch = epoch + 1, owner = 'thief', \
             expires = now() + interval '1 hour' WHERE shard = 0"
        ),
    );
    // The engine learns of it at its next write: one WARN naming "thief".
    let started = engine.start(W, "x", &()).await;
    assert!(
        started.is_err(),
        "a start on a shard taken over: {started:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.owned_shards() == vec![0] && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(engine.owned_shards(), Vec::<u32>::new());
    // Retries meet the thief's live lease: quiet too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = caught.lines();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].starts_with("WARN:")
            && lines[0].contains("taken over by \"thief\"")
            && lines[0].contains("new_owner=\"thief\""),
        "{lines:#?}"
    );
    // Dropped, not closed, inside the runtime: the storage's pooled
    // connections must close off this thread (a `postgres::Client` closing
    // here panicked: "Cannot start a runtime from within a runtime").
    drop(engine);
    psql(&url, &format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
}
