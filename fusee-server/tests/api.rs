//! The API route by route, through `fusee_server::Client` against a live
//! engine: each route's success, the error kinds it returns, and its
//! refusal without, or with a wrong or a too weak token.

mod common;

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use common::*;
use fusee_server::model::*;
use fusee_server::{Client, ClientError, Server, ServerError};
use reqwest::Method;
use serde_json::json;

fn start(workflow: &str, id: &str, input: serde_json::Value) -> StartRequest {
    StartRequest {
        workflow: workflow.into(),
        id: id.into(),
        input,
        policy: None,
        version: None,
        attributes: None,
    }
}

fn order_input() -> serde_json::Value {
    json!({"sku": "tea", "cents": 450})
}

fn kind(r: Result<impl std::fmt::Debug, ClientError>) -> (u16, String) {
    match r {
        Err(ClientError::Api { status, kind, .. }) => (status, kind),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Polls `describe` until `pred` holds (at most 10 s).
async fn until(client: &Client, id: &str, pred: impl Fn(&Description) -> bool) -> Description {
    for _ in 0..1000 {
        if let Ok(d) = client.describe(id).await
            && pred(&d)
        {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} never reached the state asked for");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_workflow_types() {
    let (engine, server, client) = setup().await;
    let anonymous = Client::new(&server.url()).unwrap();
    anonymous.health().await.unwrap();
    anonymous.ready().await.unwrap();
    assert_eq!(client.workflows().await.unwrap(), ["echo", "order"]);
    let shards = client.shards().await.unwrap();
    assert_eq!(shards.len(), 4);
    assert!(shards.iter().all(|s| s.owned && s.sealed_lsn.is_some()));
    engine.close().await.unwrap();
    // A closed engine is not ready; the server still answers health.
    assert_eq!(kind(anonymous.ready().await), (503, "not_ready".into()));
    anonymous.health().await.unwrap();
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_from_start_to_result_with_its_journal_and_chain() {
    let (engine, server, client) = setup().await;
    let started = client
        .start(&start("order", "o-1", order_input()))
        .await
        .unwrap();
    assert_eq!((started.id.as_str(), started.attached), ("o-1", false));
    let d = until(&client, "o-1", |d| {
        d.waits.iter().any(|w| w.name == "approved")
    })
    .await;
    assert_eq!(
        (d.workflow.as_str(), d.status.as_str()),
        ("order", "running")
    );
    assert_eq!(
        client.query("o-1", "stage", &json!(null)).await.unwrap(),
        json!("waiting for approval")
    );
    client
        .signal("o-1", "approved", &json!(true))
        .await
        .unwrap();
    let result = client.result("o-1", Some(10_000)).await.unwrap();
    assert_eq!(result, json!("charged 450; shipped tea"));
    let journal = client.journal("o-1", None).await.unwrap();
    assert_eq!(journal["format"], "fusee-journal");
    assert_eq!(journal["version"], 1);
    let kinds: Vec<&str> = journal["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    for k in ["Start", "Step", "Wait", "Signal", "Done"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    // The journal of a named run; a run number not of this ID is not found.
    assert_eq!(
        client.journal("o-1", Some(started.run)).await.unwrap()["run"],
        json!(started.run)
    );
    assert_eq!(
        kind(client.journal("o-1", Some(999_999)).await),
        (404, "not_found".into())
    );
    assert_eq!(
        kind(client.journal("nobody", None).await),
        (404, "not_found".into())
    );
    let chain = client.chain("o-1").await.unwrap();
    assert_eq!(chain.len(), 1);
    assert_eq!(chain[0].status, "ok");
    assert_eq!(
        kind(client.chain("nobody").await),
        (404, "not_found".into())
    );
    assert_eq!(
        kind(client.describe("nobody").await),
        (404, "not_found".into())
    );
    assert_eq!(
        kind(client.result("nobody", None).await),
        (404, "not_found".into())
    );
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_refusals_record_nothing() {
    let (engine, server, client) = setup().await;
    let r = client.start(&start("nope", "x-1", json!(null))).await;
    match r {
        Err(ClientError::Api {
            status,
            kind,
            message,
        }) => {
            assert_eq!((status, kind.as_str()), (400, "unknown_workflow"));
            assert!(message.contains("registered: echo, order"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    client.start(&start("echo", "x-2", json!(1))).await.unwrap();
    assert_eq!(
        kind(client.start(&start("echo", "x-2", json!(1))).await),
        (409, "already_exists".into())
    );
    let mut attach = start("echo", "x-2", json!(1));
    attach.policy = Some("attach".into());
    assert!(client.start(&attach).await.unwrap().attached);
    attach.policy = Some("sometimes".into());
    assert_eq!(
        kind(client.start(&attach).await),
        (400, "bad_request".into())
    );
    // Bad JSON and a missing field.
    let url = format!("{}/api/v1/runs", server.url());
    let (s, body) = raw(Method::POST, &url, Some(ADMIN), Some("{not json")).await;
    assert_eq!((s, body["kind"].as_str()), (400, Some("bad_request")));
    let (s, body) = raw(Method::POST, &url, Some(ADMIN), Some(r#"{"id": "x-3"}"#)).await;
    assert_eq!((s, body["kind"].as_str()), (400, Some("bad_request")));
    assert!(
        body["message"].as_str().unwrap().contains("workflow"),
        "{body}"
    );
    // An input over the engine's payload limit (the body within the
    // server's): the engine's `too_large`.
    let big = "x".repeat(engine.payload_limit() + 10);
    assert_eq!(
        kind(client.start(&start("echo", "x-4", json!(big))).await),
        (413, "too_large".into())
    );
    // A body over the server's limit: refused before it is read.
    let huge = format!(
        r#"{{"workflow": "echo", "id": "x-5", "input": "{}"}}"#,
        "y".repeat(engine.payload_limit() + (128 << 10))
    );
    let (s, body) = raw(Method::POST, &url, Some(ADMIN), Some(&huge)).await;
    assert_eq!((s, body["kind"].as_str()), (413, Some("payload_too_large")));
    // Only x-2 was ever started.
    let page = client.runs(&RunsQuery::default()).await.unwrap();
    let ids: Vec<&str> = page.runs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["x-2"]);
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_waits_and_times_out() {
    let (engine, server, client) = setup().await;
    let r = client
        .execute(&ExecuteRequest {
            start: start("echo", "e-1", json!({"a": [1, 2]})),
            timeout_ms: Some(10_000),
        })
        .await
        .unwrap();
    assert_eq!(r.result, json!({"a": [1, 2]}));
    assert_eq!(r.run.id, "e-1");
    let slow = client
        .execute(&ExecuteRequest {
            start: start("order", "e-2", order_input()),
            timeout_ms: Some(200),
        })
        .await;
    assert_eq!(kind(slow), (504, "timeout".into()));
    // The run goes on: refused approval fails it, and its result says so.
    client
        .signal("e-2", "approved", &json!(false))
        .await
        .unwrap();
    match client.result("e-2", Some(10_000)).await {
        Err(ClientError::Api {
            status,
            kind,
            message,
        }) => {
            assert_eq!((status, kind.as_str()), (422, "failed"));
            assert!(message.contains("not approved"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        kind(client.result("e-2x", Some(50)).await),
        (404, "not_found".into())
    );
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_updates_and_queries() {
    let (engine, server, client) = setup().await;
    client
        .start(&start("order", "s-1", order_input()))
        .await
        .unwrap();
    until(&client, "s-1", |d| !d.waits.is_empty()).await;
    assert_eq!(
        client
            .update("s-1", "note", None, &json!("fragile"))
            .await
            .unwrap(),
        json!(1)
    );
    // Keyed: a repeat returns the first call's answer.
    assert_eq!(
        client
            .update("s-1", "note", Some("k1"), &json!("gift"))
            .await
            .unwrap(),
        json!(2)
    );
    assert_eq!(
        client
            .update("s-1", "note", Some("k1"), &json!("gift"))
            .await
            .unwrap(),
        json!(2)
    );
    assert_eq!(
        kind(client.update("s-1", "note", Some(""), &json!("x")).await),
        (400, "bad_update_key".into())
    );
    assert_eq!(
        kind(client.update("s-1", "note", None, &json!("")).await),
        (422, "rejected".into())
    );
    assert_eq!(
        kind(client.update("s-1", "nope", None, &json!(1)).await),
        (400, "unknown_update".into())
    );
    assert_eq!(
        kind(client.query("s-1", "nope", &json!(null)).await),
        (400, "unknown_query".into())
    );
    assert_eq!(
        kind(client.update("nobody", "note", None, &json!("a")).await),
        (404, "not_found".into())
    );
    assert_eq!(
        kind(client.query("nobody", "stage", &json!(null)).await),
        (404, "not_found".into())
    );
    assert_eq!(
        kind(client.signal("nobody", "approved", &json!(true)).await),
        (404, "not_found".into())
    );
    assert_eq!(
        kind(
            client
                .signal_once("s-1", "approved", "", &json!(true))
                .await
        ),
        (400, "bad_signal_key".into())
    );
    // Keyed, twice: the second is acknowledged and the run still ends
    // once (its one wait took the first).
    for _ in 0..2 {
        client
            .signal_once("s-1", "approved", "k-approve", &json!(true))
            .await
            .unwrap();
    }
    client.result("s-1", Some(10_000)).await.unwrap();
    assert_eq!(
        kind(client.signal("s-1", "approved", &json!(true)).await),
        (409, "finished".into())
    );
    let url = format!("{}/api/v1/runs/s-1/signal", server.url());
    let (s, body) = raw(Method::POST, &url, Some(ADMIN), Some("[]")).await;
    assert_eq!((s, body["kind"].as_str()), (400, Some("bad_request")));
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_verbs() {
    let (engine, server, client) = setup().await;
    client
        .start(&start("order", "v-1", order_input()))
        .await
        .unwrap();
    until(&client, "v-1", |d| !d.waits.is_empty()).await;
    client.pause("v-1").await.unwrap();
    assert!(client.describe("v-1").await.unwrap().paused);
    client.resume("v-1").await.unwrap();
    assert!(!client.describe("v-1").await.unwrap().paused);
    // Reset from its first step: a new run whose chain names the old.
    assert_eq!(
        kind(client.reset("v-1", "nope", "test", None).await),
        (400, "unknown_step".into())
    );
    let again = client.reset("v-1", "charge", "test", None).await.unwrap();
    let chain = client.chain("v-1").await.unwrap();
    assert_eq!(chain.len(), 2, "{chain:?}");
    assert_eq!(chain[0].run, again.run);
    assert_eq!(chain[0].cause.as_deref(), Some("reset"));
    assert_eq!(chain[1].status, "reset");
    // Safe to repeat by run number: the same new run.
    let repeat = client
        .reset("v-1", "charge", "test", Some(chain[1].run))
        .await
        .unwrap();
    assert_eq!((repeat.run, repeat.attached), (again.run, true));
    client.cancel("v-1", "changed my mind").await.unwrap();
    let d = until(&client, "v-1", |d| d.status != "running").await;
    assert_eq!(d.status, "cancelled");
    client
        .start(&start("order", "v-2", order_input()))
        .await
        .unwrap();
    client.terminate("v-2", "stuck").await.unwrap();
    assert_eq!(client.describe("v-2").await.unwrap().status, "terminated");
    for r in [
        client.terminate("v-2", "again").await,
        client.cancel("v-2", "again").await,
        client.pause("v-2").await,
    ] {
        assert_eq!(kind(r), (409, "finished".into()));
    }
    for r in [
        client.terminate("nobody", "x").await,
        client.cancel("nobody", "x").await,
        client.pause("nobody").await,
        client.resume("nobody").await,
    ] {
        assert_eq!(kind(r), (404, "not_found".into()));
    }
    assert_eq!(
        kind(client.reset("nobody", "charge", "x", None).await),
        (404, "not_found".into())
    );
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// Code that swallows every cancel: it naps an hour, again and again.
const STUBBORN: fusee::Workflow<(), u32> = fusee::Workflow::new("stubborn");

async fn stubborn(ctx: fusee::Ctx, (): ()) -> Result<u32, fusee::Failure> {
    loop {
        let _ = ctx.sleep("nap", Duration::from_secs(3600)).await;
    }
}

/// A cancel with a grace through the route, the client and a bulk cancel:
/// code that swallows it is terminated with the cancel's reason once the
/// grace passes; a plain cancel it swallows; the errors are the Rust
/// errors' kinds, and a grace is refused on a bulk terminate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_with_grace_terminates_code_that_swallows_it() {
    let engine = engine().await;
    engine.register(STUBBORN, stubborn);
    let server = serve(&engine).await;
    let client = Client::new(&server.url()).unwrap().token(ADMIN);
    for id in ["g-1", "g-2", "g-3", "g-4"] {
        client
            .start(&start("stubborn", id, json!(null)))
            .await
            .unwrap();
    }
    client.cancel("g-2", "please").await.unwrap();
    client
        .cancel_with_grace("g-1", "out of time", Duration::from_millis(200))
        .await
        .unwrap();
    let d = until(&client, "g-1", |d| d.status != "running").await;
    assert_eq!(d.status, "terminated");
    let result = engine
        .result(STUBBORN, "g-1")
        .await
        .expect_err("terminated");
    assert!(result.to_string().contains("out of time"), "{result}");
    // The plain cancel, long before g-1's grace, was swallowed.
    assert_eq!(client.describe("g-2").await.unwrap().status, "running");
    // The route's errors are the engine's.
    assert_eq!(
        kind(
            client
                .cancel_with_grace("g-1", "again", Duration::from_secs(1))
                .await
        ),
        (409, "finished".into())
    );
    assert_eq!(
        kind(
            client
                .cancel_with_grace("nobody", "x", Duration::from_secs(1))
                .await
        ),
        (404, "not_found".into())
    );
    // A bulk cancel with a grace: every stubborn run still running.
    let bulk = |action: &str, grace_ms| BulkRequest {
        action: action.into(),
        workflow: Some("stubborn".into()),
        reason: Some("closing".into()),
        dry_run: false,
        grace_ms,
    };
    assert_eq!(
        kind(client.bulk(&bulk("terminate", Some(10))).await),
        (400, "bad_request".into())
    );
    assert_eq!(client.describe("g-3").await.unwrap().status, "running");
    assert_eq!(
        client.bulk(&bulk("cancel", Some(100))).await.unwrap().count,
        3
    );
    for id in ["g-2", "g-3", "g-4"] {
        let d = until(&client, id, |d| d.status != "running").await;
        assert_eq!(d.status, "terminated", "{id}");
    }
    // The OpenAPI document names the grace in the cancel's body.
    let doc = client.openapi().await.unwrap();
    let schema = &doc["components"]["schemas"]["CancelRequest"]["properties"];
    assert!(schema.get("grace_ms").is_some(), "{schema}");
    assert!(
        doc["components"]["schemas"]["BulkRequest"]["properties"]
            .get("grace_ms")
            .is_some()
    );
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_counts_then_acts() {
    let (engine, server, client) = setup().await;
    for i in 0..5 {
        client
            .start(&start("order", &format!("b-{i}"), order_input()))
            .await
            .unwrap();
    }
    client
        .start(&start("echo", "b-echo", json!(1)))
        .await
        .unwrap();
    client.result("b-echo", Some(10_000)).await.unwrap();
    let bulk = |action: &str, dry_run| BulkRequest {
        action: action.into(),
        workflow: Some("order".into()),
        reason: Some("bulk".into()),
        dry_run,
        grace_ms: None,
    };
    assert_eq!(
        client.bulk(&bulk("terminate", true)).await.unwrap().count,
        5
    );
    // The dry run changed nothing.
    assert_eq!(client.describe("b-0").await.unwrap().status, "running");
    assert_eq!(
        client.bulk(&bulk("terminate", false)).await.unwrap().count,
        5
    );
    assert_eq!(client.bulk(&bulk("cancel", true)).await.unwrap().count, 0);
    assert_eq!(client.describe("b-4").await.unwrap().status, "terminated");
    assert_eq!(
        kind(client.bulk(&bulk("explode", false)).await),
        (400, "bad_request".into())
    );
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_filters() {
    let (engine, server, client) = setup().await;
    for id in ["a-1", "a-2", "b-1"] {
        client.start(&start("echo", id, json!(id))).await.unwrap();
        client.result(id, Some(10_000)).await.unwrap();
    }
    client
        .start(&start("order", "a-3", order_input()))
        .await
        .unwrap();
    let ids = |p: RunsPage| p.runs.into_iter().map(|r| r.id).collect::<BTreeSet<_>>();
    let q = |f: fn(&mut RunsQuery)| {
        let mut q = RunsQuery::default();
        f(&mut q);
        q
    };
    assert_eq!(
        ids(client
            .runs(&q(|q| q.id_prefix = Some("a-".into())))
            .await
            .unwrap())
        .len(),
        3
    );
    assert_eq!(
        ids(client
            .runs(&q(|q| q.status = Some("running".into())))
            .await
            .unwrap()),
        BTreeSet::from(["a-3".to_string()])
    );
    assert_eq!(
        ids(client
            .runs(&q(|q| q.status = Some("ok".into())))
            .await
            .unwrap())
        .len(),
        3
    );
    assert_eq!(
        ids(client
            .runs(&q(|q| q.workflow = Some("order".into())))
            .await
            .unwrap()),
        BTreeSet::from(["a-3".to_string()])
    );
    assert_eq!(
        ids(client
            .runs(&q(|q| q.started_before_ms = Some(1)))
            .await
            .unwrap())
        .len(),
        0
    );
    assert_eq!(
        ids(client
            .runs(&q(|q| q.started_after_ms = Some(1)))
            .await
            .unwrap())
        .len(),
        4
    );
    // Finish times: a running run has none, so it never passes.
    let finished = client
        .runs(&q(|q| q.finished_after_ms = Some(1)))
        .await
        .unwrap();
    assert_eq!(finished.runs.len(), 3, "{finished:?}");
    assert!(
        finished
            .runs
            .iter()
            .all(|r| r.finished_ms.is_some_and(|f| f >= r.started_ms)),
        "{finished:?}"
    );
    assert_eq!(
        ids(client
            .runs(&q(|q| q.finished_before_ms = Some(1)))
            .await
            .unwrap())
        .len(),
        0
    );
    assert_eq!(
        kind(client.runs(&q(|q| q.status = Some("bogus".into()))).await),
        (400, "bad_request".into())
    );
    assert_eq!(
        kind(client.runs(&q(|q| q.cursor = Some("x.y".into()))).await),
        (400, "bad_cursor".into())
    );
    let url = format!("{}/api/v1/runs?limit=many", server.url());
    let (s, body) = raw(Method::GET, &url, Some(READ), None).await;
    assert_eq!((s, body["kind"].as_str()), (400, Some("bad_request")));
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// Every run listed exactly once, through pages of the API, with and
/// without a filter the server applies (FUSEE_SERVER_PAGINATION_RUNS runs,
/// 10,000 by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_lists_each_run_exactly_once() {
    let n: usize = std::env::var("FUSEE_SERVER_PAGINATION_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let (engine, server, client) = setup().await;
    let mut want = HashSet::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut starts = Vec::new();
        for &i in chunk {
            let id = format!("{}-{i:06}", if i % 2 == 0 { "even" } else { "odd" });
            want.insert(id.clone());
            let engine = engine.clone();
            starts.push(tokio::spawn(async move {
                engine
                    .start_json("order", &id, &order_input(), fusee::IdPolicy::NewOnly)
                    .await
            }));
        }
        for s in starts {
            s.await.unwrap().unwrap();
        }
    }
    // All, half, and a rare match (the server's rounds grow past pages
    // that match nothing).
    let count = |p: &str| want.iter().filter(|id| id.starts_with(p)).count();
    for (prefix, limit, expect) in [
        (None, 1000, n),
        (Some("odd-"), 777, count("odd-")),
        (Some("even-0000"), 7, count("even-0000")),
    ] {
        let mut seen = HashSet::new();
        let mut q = RunsQuery {
            id_prefix: prefix.map(str::to_string),
            limit: Some(limit),
            ..RunsQuery::default()
        };
        let mut pages = 0;
        loop {
            let page = client.runs(&q).await.unwrap();
            pages += 1;
            assert!(page.runs.len() <= limit);
            for r in page.runs {
                assert!(want.contains(&r.id), "unknown run {}", r.id);
                assert!(seen.insert(r.id.clone()), "{} listed twice", r.id);
                if let Some(p) = prefix {
                    assert!(r.id.starts_with(p));
                }
            }
            match page.next {
                Some(c) => q.cursor = Some(c),
                None => break,
            }
            assert!(pages <= n + 1, "pagination does not end");
        }
        assert_eq!(seen.len(), expect, "prefix {prefix:?}: runs missed");
    }
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_queues_and_limits() {
    let (engine, server, client) = setup().await;
    engine.register_flow_control();
    engine
        .schedule("nightly", "0 3 * * *", ECHO, &json!("n"))
        .create()
        .await
        .unwrap();
    assert_eq!(client.schedules().await.unwrap(), ["nightly"]);
    let s = client.schedule("nightly").await.unwrap();
    assert_eq!((s.workflow.as_str(), s.paused), ("echo", false));
    assert!(!s.next_fires_ms.is_empty());
    client
        .pause_schedule("nightly", "maintenance")
        .await
        .unwrap();
    let s = client.schedule("nightly").await.unwrap();
    assert!(s.paused);
    assert_eq!(s.note.as_deref(), Some("maintenance"));
    // Paused, it refuses a trigger: nothing fires.
    assert_eq!(
        kind(client.trigger_schedule("nightly").await),
        (422, "rejected".into())
    );
    client.resume_schedule("nightly").await.unwrap();
    assert!(!client.schedule("nightly").await.unwrap().paused);
    // Fired now, out of its timetable: the fire runs and is counted.
    client.trigger_schedule("nightly").await.unwrap();
    let fire = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let page = engine
                .list(fusee::ListFilter::new().workflow("echo"))
                .await
                .unwrap();
            if let Some(r) = page.runs.first() {
                return r.id.clone();
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the trigger's fire starts");
    assert!(fire.starts_with("nightly/"), "{fire}");
    assert_eq!(
        client.result(&fire, Some(10_000)).await.unwrap(),
        json!("n")
    );
    assert_eq!(client.schedule("nightly").await.unwrap().fired, 1);
    client.delete_schedule("nightly").await.unwrap();
    // (Describing the deleted one answers `unknown_query` while its
    // finished run stays in memory: the engine's `Schedules::describe`
    // maps only not-found and finished to `UnknownSchedule`.)
    assert!(client.schedules().await.unwrap().is_empty());
    assert_eq!(
        kind(client.schedule("never").await),
        (404, "unknown_schedule".into())
    );
    assert_eq!(
        kind(client.pause_schedule("nightly", "x").await),
        (404, "unknown_schedule".into())
    );
    assert_eq!(
        kind(client.resume_schedule("nightly").await),
        (404, "unknown_schedule".into())
    );
    assert_eq!(
        kind(client.delete_schedule("nightly").await),
        (404, "unknown_schedule".into())
    );
    assert_eq!(
        kind(client.trigger_schedule("nightly").await),
        (404, "unknown_schedule".into())
    );

    engine
        .queue("mail", ECHO)
        .concurrency(2)
        .create()
        .await
        .unwrap();
    assert_eq!(client.queues().await.unwrap(), ["mail"]);
    assert_eq!(client.queue("mail").await.unwrap().concurrency, Some(2));
    client.pause_queue("mail").await.unwrap();
    assert!(client.queue("mail").await.unwrap().paused);
    client.resume_queue("mail").await.unwrap();
    assert!(!client.queue("mail").await.unwrap().paused);
    assert_eq!(client.delete_queue("mail").await.unwrap(), 0);
    for r in [
        client.queue("mail").await.map(drop),
        client.pause_queue("mail").await,
        client.resume_queue("mail").await,
        client.delete_queue("mail").await.map(drop),
    ] {
        assert_eq!(kind(r), (404, "unknown_queue".into()));
    }

    engine.limit("db").concurrency(3).create().await.unwrap();
    assert_eq!(client.limits().await.unwrap(), ["db"]);
    assert_eq!(client.limit("db").await.unwrap().concurrency, Some(3));
    client.pause_limit("db", "database down").await.unwrap();
    let l = client.limit("db").await.unwrap();
    assert_eq!((l.paused, l.note.as_deref()), (true, Some("database down")));
    client.resume_limit("db").await.unwrap();
    assert!(!client.limit("db").await.unwrap().paused);
    client.delete_limit("db").await.unwrap();
    assert_eq!(
        kind(client.limit("db").await),
        (404, "unknown_limit".into())
    );
    for r in [
        client.delete_limit("db").await,
        client.pause_limit("db", "x").await,
        client.resume_limit("db").await,
    ] {
        assert_eq!(kind(r), (404, "unknown_limit".into()));
    }
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// Every route: refused without a token and with a wrong one (401); the
/// read token refused on every verb (403) and taken on every read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_guard_every_route() {
    let (engine, server, client) = setup().await;
    client
        .start(&start("order", "t-1", order_input()))
        .await
        .unwrap();
    let doc = client.openapi().await.unwrap();
    let base = server.url();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let url = format!("{base}{}", fill(path));
        for method in item.as_object().unwrap().keys() {
            let m: Method = method.to_uppercase().parse().unwrap();
            let public = ["/healthz", "/readyz", "/api/v1/openapi.json"].contains(&path.as_str());
            for token in [None, Some("wrong-token")] {
                let (s, body) = raw(m.clone(), &url, token, Some("{}")).await;
                if public {
                    assert_ne!(s, 401, "{method} {path}");
                } else {
                    assert_eq!(
                        (s, body["kind"].as_str()),
                        (401, Some("unauthorized")),
                        "{method} {path}"
                    );
                }
            }
            let (s, body) = raw(m.clone(), &url, Some(READ), Some("{}")).await;
            if m == Method::GET {
                assert!(
                    s != 401 && s != 403,
                    "{method} {path} with the read token: {s}"
                );
            } else {
                assert_eq!(
                    (s, body["kind"].as_str()),
                    (403, Some("forbidden")),
                    "{method} {path}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} operations in the document");
    // The read token's refusals changed nothing.
    assert_eq!(client.describe("t-1").await.unwrap().status, "running");
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// A document path with its parameters filled in (a result waited for
/// briefly: the run stays running).
fn fill(path: &str) -> String {
    let url = path.replace("{id}", "t-1").replace("{name}", "q");
    if url.ends_with("/result") {
        return format!("{url}?timeout_ms=10");
    }
    if url.contains("/streams/") {
        // A cursor past the (empty) stream: answered at once, not a
        // stream of events that waits for the run.
        return format!("{url}?from=1");
    }
    url
}

/// Every operation in the OpenAPI document is served (not an unknown
/// route or a wrong method), every documented path refuses the methods it
/// does not document, and the document lists exactly the routes the
/// server has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_matches_the_routes() {
    let (engine, server, client) = setup().await;
    let doc = client.openapi().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let methods: Vec<String> = item.as_object().unwrap().keys().cloned().collect();
        for m in ["get", "post", "delete", "put", "patch"] {
            let url = format!("{}{}", server.url(), fill(path));
            let (s, body) = raw(
                m.to_uppercase().parse().unwrap(),
                &url,
                Some(ADMIN),
                Some("{}"),
            )
            .await;
            if methods.iter().any(|x| x == m) {
                assert_ne!(body["kind"], "unknown_route", "{m} {path}");
                assert_ne!(body["kind"], "method_not_allowed", "{m} {path}");
                documented.insert(format!("{} {path}", m.to_uppercase()));
            } else {
                assert_eq!(
                    (s, body["kind"].as_str()),
                    (405, Some("method_not_allowed")),
                    "{m} {path}"
                );
            }
        }
    }
    let served: BTreeSet<String> = SERVED.iter().map(|s| s.to_string()).collect();
    assert_eq!(documented, served);
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// The routes the server serves (besides the console's pages).
const SERVED: &[&str] = &[
    "GET /healthz",
    "GET /readyz",
    "GET /api/v1/openapi.json",
    "GET /metrics",
    "GET /api/v1/runs",
    "POST /api/v1/runs",
    "POST /api/v1/execute",
    "POST /api/v1/bulk",
    "GET /api/v1/runs/{id}",
    "GET /api/v1/runs/{id}/journal",
    "GET /api/v1/runs/{id}/chain",
    "GET /api/v1/runs/{id}/streams/{name}",
    "GET /api/v1/runs/{id}/result",
    "POST /api/v1/runs/{id}/signal",
    "POST /api/v1/runs/{id}/update",
    "POST /api/v1/runs/{id}/query",
    "POST /api/v1/runs/{id}/cancel",
    "POST /api/v1/runs/{id}/terminate",
    "POST /api/v1/runs/{id}/pause",
    "POST /api/v1/runs/{id}/resume",
    "POST /api/v1/runs/{id}/reset",
    "GET /api/v1/workflows",
    "GET /api/v1/shards",
    "POST /api/v1/backup",
    "GET /api/v1/schedules",
    "GET /api/v1/schedules/{id}",
    "DELETE /api/v1/schedules/{id}",
    "POST /api/v1/schedules/{id}/pause",
    "POST /api/v1/schedules/{id}/resume",
    "POST /api/v1/schedules/{id}/trigger",
    "GET /api/v1/queues",
    "GET /api/v1/queues/{name}",
    "DELETE /api/v1/queues/{name}",
    "POST /api/v1/queues/{name}/pause",
    "POST /api/v1/queues/{name}/resume",
    "GET /api/v1/limits",
    "GET /api/v1/limits/{name}",
    "DELETE /api/v1/limits/{name}",
    "POST /api/v1/limits/{name}/pause",
    "POST /api/v1/limits/{name}/resume",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_and_wrong_methods_are_json_and_change_nothing() {
    let (engine, server, client) = setup().await;
    let base = server.url();
    let (s, body) = raw(
        Method::GET,
        &format!("{base}/api/v1/nothing"),
        Some(ADMIN),
        None,
    )
    .await;
    assert_eq!((s, body["kind"].as_str()), (404, Some("unknown_route")));
    let (s, body) = raw(
        Method::POST,
        &format!("{base}/api/v2/runs"),
        Some(ADMIN),
        Some("{}"),
    )
    .await;
    assert_eq!((s, body["kind"].as_str()), (404, Some("unknown_route")));
    let (s, body) = raw(
        Method::PUT,
        &format!("{base}/api/v1/runs"),
        Some(ADMIN),
        Some(r#"{"workflow":"echo","id":"w-1","input":1}"#),
    )
    .await;
    assert_eq!(
        (s, body["kind"].as_str()),
        (405, Some("method_not_allowed"))
    );
    assert!(
        client
            .runs(&RunsQuery::default())
            .await
            .unwrap()
            .runs
            .is_empty()
    );
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_rules_and_stop() {
    let engine = engine().await;
    // Not loopback and no admin token: refused before binding.
    let r = Server::new(engine.clone())
        .bind("0.0.0.0:0".parse().unwrap())
        .read_token("r")
        .start()
        .await;
    assert!(matches!(r, Err(ServerError::Unprotected { .. })), "{r:?}");
    let r = Server::new(engine.clone()).admin_token("").start().await;
    assert!(
        matches!(r, Err(ServerError::EmptyToken { which: "admin" })),
        "{r:?}"
    );
    // Loopback without tokens: open, on the port the system chose.
    let open = Server::new(engine.clone())
        .bind("127.0.0.1:0".parse().unwrap())
        .start()
        .await
        .unwrap();
    assert!(open.local_addr().ip().is_loopback());
    assert_ne!(open.local_addr().port(), 0);
    let anonymous = Client::new(&open.url()).unwrap();
    anonymous
        .start(&start("echo", "open-1", json!(1)))
        .await
        .unwrap();
    let url = open.url();
    open.stop().await.unwrap();
    let after = Client::new(&url).unwrap().health().await;
    assert!(
        matches!(after, Err(ClientError::Transport { .. })),
        "{after:?}"
    );
    assert!(matches!(
        Client::new("not a url"),
        Err(ClientError::BadUrl { .. })
    ));
    engine.close().await.unwrap();
}

/// IDs with characters a URL treats specially reach the engine intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awkward_ids_round_trip() {
    let (engine, server, client) = setup().await;
    for id in ["a/b", "sp ace", "q?x=1&y", "ünï#code", "%2F"] {
        client.start(&start("echo", id, json!(id))).await.unwrap();
        assert_eq!(client.result(id, Some(10_000)).await.unwrap(), json!(id));
        assert_eq!(client.describe(id).await.unwrap().id, id);
    }
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

const AGAIN: fusee::Workflow<u32, u32> = fusee::Workflow::new("again");

/// Journals of parked runs (read from the run store) and a chain through
/// continue-as-new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journals_of_parked_runs_and_chains_of_continued_runs() {
    let engine = engine_with(fusee::Config::memory().park_after(Duration::from_millis(20))).await;
    engine.register(AGAIN, |ctx: fusee::Ctx, n: u32| async move {
        if n < 2 {
            return ctx.continue_as_new(&(n + 1)).await;
        }
        Ok(n)
    });
    let server = serve(&engine).await;
    let client = Client::new(&server.url()).unwrap().token(READ);
    engine
        .start_json("order", "p-1", &order_input(), fusee::IdPolicy::NewOnly)
        .await
        .unwrap();
    engine
        .start_json("echo", "p-2", &json!("done"), fusee::IdPolicy::NewOnly)
        .await
        .unwrap();
    engine.result_json("p-2").await.unwrap();
    for id in ["p-1", "p-2"] {
        until(&client, id, |d| d.parked).await;
    }
    // Parked and waiting: its whole journal, read from its frame.
    let j = client.journal("p-1", None).await.unwrap();
    assert_eq!(
        (j["state"].as_str(), j["complete"].as_bool()),
        (Some("parked"), Some(true))
    );
    assert!(
        j["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "Wait")
    );
    // Parked and finished, within its history time: its whole journal.
    let j = client.journal("p-2", None).await.unwrap();
    assert_eq!(
        (j["state"].as_str(), j["complete"].as_bool()),
        (Some("ok"), Some(true))
    );
    let kinds: Vec<&str> = j["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Start", "Began", "Step", "Done"]);
    // Continued twice: three runs, newest first, each naming the one before.
    engine
        .start_json("again", "c-1", &json!(0), fusee::IdPolicy::NewOnly)
        .await
        .unwrap();
    assert_eq!(engine.result_json("c-1").await.unwrap(), json!(2));
    let chain = client.chain("c-1").await.unwrap();
    assert_eq!(chain.len(), 3, "{chain:?}");
    assert_eq!(chain[0].status, "ok");
    for pair in chain.windows(2) {
        assert_eq!(pair[0].from_run, Some(pair[1].run));
        assert_eq!(pair[0].cause.as_deref(), Some("continued-as-new"));
        assert_eq!(pair[1].status, "continued-as-new");
    }
    assert_eq!(chain[2].from_run, None);
    // An earlier run's own journal, by its number.
    let first = client.journal("c-1", Some(chain[2].run)).await.unwrap();
    assert_eq!(first["records"][0]["input"]["json"], json!(0));
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_in_the_prometheus_format_to_the_read_token() {
    let (engine, server, client) = setup().await;
    client
        .start(&start("order", "m-1", order_input()))
        .await
        .unwrap();
    let url = format!("{}/metrics", server.url());
    let (s, body) = raw(Method::GET, &url, None, None).await;
    assert_eq!((s, body["kind"].as_str()), (401, Some("unauthorized")));
    let resp = reqwest::Client::new()
        .get(&url)
        .bearer_auth(READ)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert_eq!(ct, fusee::telemetry::CONTENT_TYPE);
    let text = resp.text().await.unwrap();
    // The start is durable once `start` returned: counted by workflow.
    assert!(
        text.lines()
            .any(|l| l.starts_with("fusee_run_starts_total{") && l.contains("workflow=\"order\"")),
        "{text}"
    );
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceparent_header_is_recorded_in_the_runs_start() {
    let (engine, server, client) = setup().await;
    let url = format!("{}/api/v1/runs", server.url());
    let body = r#"{"workflow": "echo", "id": "t-1", "input": 5}"#;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let send = |id: &str, header: &str| {
        reqwest::Client::new()
            .post(&url)
            .bearer_auth(ADMIN)
            .header("content-type", "application/json")
            .header("traceparent", header.to_string())
            .body(body.replace("t-1", id))
            .send()
    };
    assert_eq!(
        send("t-1", tp).await.expect("request").status().as_u16(),
        200
    );
    let journal = client.journal("t-1", None).await.unwrap();
    let start = &journal["records"][0];
    assert_eq!(start["kind"], "Start");
    assert_eq!(start["meta"]["attributes"]["json"]["traceparent"], tp);
    // A malformed header is refused, and nothing is started.
    let resp = send("t-2", "00-xyz").await.expect("request");
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(kind(client.journal("t-2", None).await).0, 404);
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

const DEPLOYED: fusee::Workflow<(), u32> = fusee::Workflow::new("deployed");
const GO_ON: fusee::Signal<()> = fusee::Signal::new("go-on");

/// A run the replay check held (its code departs from its journal) shows
/// why, in the run's description and in the list (issue 33's hold, as an
/// operator sees it from outside).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_the_replay_check_held_says_why_in_the_api() {
    let dir = std::env::temp_dir().join(format!("fusee-server-held-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let deploy = |engine: &fusee::Engine, step: &'static str| {
        engine.register(DEPLOYED, move |ctx: fusee::Ctx, ()| async move {
            let n = ctx
                .step(step, |_| async { Ok::<_, fusee::StepError>(1u32) })
                .await?;
            ctx.wait_for(&GO_ON).await?;
            Ok::<_, fusee::Failure>(n)
        });
    };
    let engine = fusee::Engine::open(fusee::Config::file(&dir))
        .await
        .expect("open");
    deploy(&engine, "old-step");
    engine.start(DEPLOYED, "h-1", &()).await.expect("start");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while engine
        .describe("h-1")
        .await
        .expect("describe")
        .waits
        .is_empty()
    {
        assert!(std::time::Instant::now() < deadline, "the run never waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    engine.close().await.expect("close");

    // A new deploy renamed the step: the check holds the run.
    let engine = fusee::Engine::open(fusee::Config::file(&dir).replay_check(true))
        .await
        .expect("reopen");
    deploy(&engine, "new-step");
    let report = engine.check_replay().await.expect("check");
    assert_eq!(report.divergences.len(), 1, "{report:?}");
    let server = serve(&engine).await;
    let base = server.url();
    let (status, run) = raw(
        Method::GET,
        &format!("{base}/api/v1/runs/h-1"),
        Some(READ),
        None,
    )
    .await;
    assert_eq!(status, 200, "{run}");
    let held = run["held"].as_str().unwrap_or_default();
    assert!(
        held.contains("old-step") && held.contains("new-step"),
        "the description's hold: {run}"
    );
    assert_eq!(run["paused"], json!(true), "{run}");
    let (status, page) = raw(
        Method::GET,
        &format!("{base}/api/v1/runs"),
        Some(READ),
        None,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let listed = &page["runs"][0];
    assert_eq!(listed["id"], json!("h-1"), "{page}");
    assert_eq!(listed["held"].as_str(), Some(held), "{page}");
    drop(server);
    engine.close().await.expect("close");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A start names a version of the code, or takes the newest; the run's
/// version shows in its description and in the listing; a version not
/// registered is kind `unknown_version`, with the engine's own text, and
/// records nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_names_its_code_version_and_runs_show_it() {
    const GREET: fusee::Workflow<String, String> = fusee::Workflow::new("greet");
    let engine = fusee::Engine::open(fusee::Config::memory())
        .await
        .expect("open");
    for v in [1, 2] {
        engine.register_version(GREET, v, move |_: fusee::Ctx, who: String| async move {
            Ok::<_, fusee::Failure>(format!("v{v} {who}"))
        });
    }
    let server = serve(&engine).await;
    let base = server.url();
    let start = |body: serde_json::Value| {
        let base = base.clone();
        async move {
            raw(
                Method::POST,
                &format!("{base}/api/v1/runs"),
                Some(ADMIN),
                Some(&body.to_string()),
            )
            .await
        }
    };
    let (status, body) =
        start(json!({"workflow": "greet", "id": "g-1", "input": "ada", "version": 1})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = start(json!({"workflow": "greet", "id": "g-2", "input": "bob"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(engine.result(GREET, "g-1").await.expect("g-1"), "v1 ada");
    assert_eq!(engine.result(GREET, "g-2").await.expect("g-2"), "v2 bob");
    for (id, v) in [("g-1", 1), ("g-2", 2)] {
        let (status, run) = raw(
            Method::GET,
            &format!("{base}/api/v1/runs/{id}"),
            Some(READ),
            None,
        )
        .await;
        assert_eq!((status, &run["version"]), (200, &json!(v)), "{run}");
    }
    let (status, page) = raw(
        Method::GET,
        &format!("{base}/api/v1/runs?workflow=greet"),
        Some(READ),
        None,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let mut seen: Vec<(String, u64)> = page["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap_or_default().to_string(),
                r["version"].as_u64().unwrap_or(99),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(seen, [("g-1".to_string(), 1), ("g-2".to_string(), 2)]);

    let (status, body) =
        start(json!({"workflow": "greet", "id": "g-3", "input": "cy", "version": 7})).await;
    let expected = fusee::Error::UnknownVersion {
        wtype: "greet".into(),
        version: 7,
        registered: vec![1, 2],
    };
    assert_eq!(
        (status, body["kind"].as_str(), body["message"].as_str()),
        (
            400,
            Some("unknown_version"),
            Some(expected.to_string().as_str())
        ),
        "{body}"
    );
    assert!(matches!(
        engine.describe("g-3").await,
        Err(fusee::Error::NotFound { .. })
    ));
    server.stop().await.expect("stop");
    engine.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_attributes_start_filter_and_describe() {
    let (engine, _server, client) = setup().await;
    for i in 0..6i64 {
        let mut r = start("echo", &format!("s-{i}"), json!(i));
        r.attributes = Some(
            [
                ("customer_id".to_string(), json!({"int": i % 2})),
                ("amount".to_string(), json!({"float": i as f64 * 10.0})),
            ]
            .into(),
        );
        client.start(&r).await.unwrap();
        client
            .result(&format!("s-{i}"), Some(10_000))
            .await
            .unwrap();
    }
    let ids = |p: RunsPage| p.runs.into_iter().map(|r| r.id).collect::<BTreeSet<_>>();
    let q = |attr: &str| RunsQuery {
        attr: Some(attr.into()),
        ..RunsQuery::default()
    };
    assert_eq!(
        ids(client.runs(&q("customer_id=1")).await.unwrap()),
        BTreeSet::from(["s-1".to_string(), "s-3".into(), "s-5".into()])
    );
    assert_eq!(
        ids(client
            .runs(&q("customer_id=1;amount>float:15"))
            .await
            .unwrap()),
        BTreeSet::from(["s-3".to_string(), "s-5".into()])
    );
    let d = client.describe("s-4").await.unwrap();
    assert_eq!(d.attributes["customer_id"], json!({"int": 0}));
    assert_eq!(d.attributes["amount"], json!({"float": 40.0}));
    // Bad input: a clear 400, nothing started.
    assert_eq!(
        kind(client.runs(&q("colour=paint:red")).await),
        (400, "invalid_attribute".into())
    );
    assert_eq!(
        kind(client.runs(&q("amount=int:1..float:2")).await),
        (400, "invalid_attribute".into())
    );
    let mut bad = start("echo", "s-bad", json!(0));
    bad.attributes = Some([("x".to_string(), json!({"colour": "red"}))].into());
    assert_eq!(
        kind(client.start(&bad).await),
        (400, "invalid_attribute".into())
    );
    assert_eq!(kind(client.describe("s-bad").await).0, 404);
    engine.close().await.unwrap();
}

/// A run's stream over Server-Sent Events through the client: every
/// chunk in order from a cursor, the end, and bad input as HTTP errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_stream_comes_as_server_sent_events() {
    use futures_util::StreamExt;
    const TALK: fusee::Workflow<u64, u64> = fusee::Workflow::new("talk");
    let engine = engine().await;
    engine.register(TALK, |ctx: fusee::Ctx, n: u64| async move {
        let tx = ctx.stream("tokens");
        let sent = ctx
            .step("model", move |_| {
                let mut tx = tx.clone();
                async move {
                    for i in 0..n {
                        // Text, then one chunk that is not UTF-8.
                        let chunk = if i == n - 1 {
                            vec![0xff, 0x00, b'\n']
                        } else {
                            format!("tok {i}\nline").into_bytes()
                        };
                        tx.send(chunk)
                            .await
                            .map_err(|e| fusee::StepError::fatal(e.to_string()))?;
                    }
                    tx.end()
                        .await
                        .map_err(|e| fusee::StepError::fatal(e.to_string()))?;
                    Ok(n)
                }
            })
            .await?;
        Ok::<_, fusee::Failure>(sent)
    });
    let server = serve(&engine).await;
    let client = Client::new(&server.url()).unwrap().token(READ);
    engine.start(TALK, "s-1", &40).await.unwrap();
    // Subscribed while the step may still be sending.
    let all: Vec<_> = client
        .subscribe("s-1", "tokens", 0)
        .await
        .unwrap()
        .collect()
        .await;
    let all: Vec<fusee::StreamChunk> = all.into_iter().map(Result::unwrap).collect();
    assert_eq!(all.len(), 40);
    for (i, c) in all.iter().enumerate() {
        assert_eq!(c.index, i as u64);
    }
    assert_eq!(all[3].payload, b"tok 3\nline");
    assert_eq!(all[39].payload, vec![0xff, 0x00, b'\n']);
    let tail: Vec<_> = client
        .subscribe("s-1", "tokens", 38)
        .await
        .unwrap()
        .map(|c| c.unwrap().index)
        .collect()
        .await;
    assert_eq!(tail, [38, 39]);
    let past = client.subscribe("s-1", "tokens", 41).await.unwrap_err();
    assert_eq!(
        (past.status(), past.kind()),
        (Some(400), Some("stream_cursor"))
    );
    let nobody = client.subscribe("nobody", "tokens", 0).await.unwrap_err();
    assert_eq!(
        (nobody.status(), nobody.kind()),
        (Some(404), Some("not_found"))
    );
    // A stream the finished run never opened.
    assert_eq!(engine.result(TALK, "s-1").await.unwrap(), 40);
    let other = client.subscribe("s-1", "other", 0).await.unwrap_err();
    assert_eq!(
        (other.status(), other.kind()),
        (Some(404), Some("unknown_stream"))
    );
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// A GET with the admin token and extra headers: its status, content
/// type and body as text.
async fn get_text(url: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let mut req = reqwest::Client::new().get(url).bearer_auth(ADMIN);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, ctype, resp.text().await.unwrap())
}

/// A browser's EventSource opened on `...?from=1` reconnects to the same
/// URL with `Last-Event-ID`: the header wins, and one that is not a
/// number is refused as a bad `from` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_wins_over_from_and_must_be_a_number() {
    const FIVE: fusee::Workflow<(), u32> = fusee::Workflow::new("five");
    let engine = engine().await;
    engine.register(FIVE, |ctx: fusee::Ctx, (): ()| async move {
        let tx = ctx.stream("tokens");
        let sent = ctx
            .step("model", move |_| {
                let mut tx = tx.clone();
                async move {
                    for i in 0..5 {
                        tx.send(format!("t{i}").into_bytes())
                            .await
                            .map_err(|e| fusee::StepError::fatal(e.to_string()))?;
                    }
                    tx.end()
                        .await
                        .map_err(|e| fusee::StepError::fatal(e.to_string()))?;
                    Ok(5u32)
                }
            })
            .await?;
        Ok::<_, fusee::Failure>(sent)
    });
    let server = serve(&engine).await;
    engine.start(FIVE, "s-5", &()).await.unwrap();
    assert_eq!(engine.result(FIVE, "s-5").await.unwrap(), 5);
    let url = format!("{}/api/v1/runs/s-5/streams/tokens?from=1", server.url());
    let ids = |body: &str| -> Vec<u64> {
        body.lines()
            .filter_map(|l| l.strip_prefix("id:"))
            .map(|i| i.trim().parse().unwrap())
            .collect()
    };
    let (s, _, body) = get_text(&url, &[]).await;
    assert_eq!((s, ids(&body)), (200, vec![1, 2, 3, 4]), "{body}");
    // Reconnected after chunk 3: 4 on, not 1 again.
    let (s, _, body) = get_text(&url, &[("last-event-id", "3")]).await;
    assert_eq!((s, ids(&body)), (200, vec![4]), "{body}");
    // Empty is "no last event" (the SSE spec): `from` holds.
    let (s, _, body) = get_text(&url, &[("last-event-id", "")]).await;
    assert_eq!((s, ids(&body)), (200, vec![1, 2, 3, 4]), "{body}");
    for bad in ["abc", "-1", "1.5"] {
        let (s, ctype, body) = get_text(&url, &[("last-event-id", bad)]).await;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!((s, v["kind"].as_str()), (400, Some("bad_request")), "{bad}");
        assert!(ctype.starts_with("application/json"), "{ctype}");
        assert!(
            v["message"].as_str().unwrap().contains("Last-Event-ID"),
            "{v}"
        );
    }
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// A path parameter that is not UTF-8 once decoded is a JSON
/// `bad_request`, on every route with one (the console's too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_path_parameters_are_json_errors() {
    let (engine, server, _client) = setup().await;
    let base = server.url();
    for path in [
        "/api/v1/runs/%FF",
        "/api/v1/runs/%FF/journal",
        "/api/v1/runs/ok/streams/%FF",
        "/api/v1/schedules/%FF",
        "/api/v1/queues/%FF",
        "/api/v1/limits/%FF",
        "/runs/%FF",
    ] {
        let (s, ctype, body) = get_text(&format!("{base}{path}"), &[]).await;
        let v: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("{path}: {s} {ctype} {body}"));
        assert_eq!(
            (s, v["kind"].as_str()),
            (400, Some("bad_request")),
            "{path}"
        );
        assert!(ctype.starts_with("application/json"), "{path}: {ctype}");
    }
    for path in [
        "/api/v1/runs/%FF/signal",
        "/api/v1/runs/%FF/cancel",
        "/api/v1/queues/%FF/pause",
    ] {
        let (s, body) = raw(
            Method::POST,
            &format!("{base}{path}"),
            Some(ADMIN),
            Some("{}"),
        )
        .await;
        assert_eq!(
            (s, body["kind"].as_str()),
            (400, Some("bad_request")),
            "{path}"
        );
    }
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// The OpenAPI document puts each route's query parameters in the query,
/// optional, and only path parameters in the path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_query_parameters_are_in_the_query_and_optional() {
    let (engine, server, client) = setup().await;
    let doc = client.openapi().await.unwrap();
    let params = |path: &str| {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .clone()
    };
    let expect: &[(&str, &[&str])] = &[
        (
            "/api/v1/runs",
            &[
                "status",
                "workflow",
                "id_prefix",
                "started_after_ms",
                "started_before_ms",
                "finished_after_ms",
                "finished_before_ms",
                "attr",
                "limit",
                "cursor",
            ],
        ),
        ("/api/v1/runs/{id}/journal", &["run"]),
        ("/api/v1/runs/{id}/streams/{name}", &["from"]),
        ("/api/v1/runs/{id}/result", &["timeout_ms"]),
    ];
    for (path, query) in expect {
        let ps = params(path);
        for name in *query {
            let p = ps
                .iter()
                .find(|p| p["name"] == *name)
                .unwrap_or_else(|| panic!("{path}: no parameter {name}"));
            assert_eq!(p["in"], "query", "{path} {name}: {p}");
            assert_ne!(p["required"], true, "{path} {name}: {p}");
        }
        // Every path parameter is one of the path's `{...}`.
        for p in ps.iter().filter(|p| p["in"] == "path") {
            let name = p["name"].as_str().unwrap();
            assert!(path.contains(&format!("{{{name}}}")), "{path}: {p}");
        }
    }
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// A backup destination the client got wrong is a 4xx with its own
/// kind, never a 500; a good one is backed up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_backup_destinations_are_client_errors() {
    let (engine, server, _client) = setup().await;
    let url = format!("{}/api/v1/backup", server.url());
    let dir = std::env::temp_dir().join(format!("fusee-server-backup-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("full")).unwrap();
    std::fs::write(dir.join("full/x"), b"x").unwrap();
    std::fs::write(dir.join("file"), b"x").unwrap();
    let d = |p: &str| dir.join(p).display().to_string();
    let cases = [
        (
            "relative/dest".to_string(),
            400,
            "backup_destination",
            "relative",
        ),
        (
            d("missing/child"),
            400,
            "backup_destination",
            "does not exist",
        ),
        (
            d("file/child"),
            400,
            "backup_destination",
            "not a directory",
        ),
        (d("file"), 400, "backup_destination", "not a directory"),
        (
            "/dev/null".to_string(),
            400,
            "backup_destination",
            "not a directory",
        ),
        // A place no directory can be made in: the engine's open refuses.
        (
            "/proc/fusee-backup".to_string(),
            400,
            "backup_destination",
            "/proc/fusee-backup",
        ),
        (d("full"), 409, "backup_not_empty", "not empty"),
    ];
    for (dest, status, kind, text) in cases {
        let body = json!({ "dest": dest }).to_string();
        let (s, v) = raw(Method::POST, &url, Some(ADMIN), Some(&body)).await;
        assert_eq!((s, v["kind"].as_str()), (status, Some(kind)), "{dest}: {v}");
        assert!(v["message"].as_str().unwrap().contains(text), "{dest}: {v}");
    }
    assert!(!std::path::Path::new("relative").exists());
    let body = json!({ "dest": d("copy") }).to_string();
    let (s, v) = raw(Method::POST, &url, Some(ADMIN), Some(&body)).await;
    assert_eq!(s, 200, "{v}");
    server.stop().await.unwrap();
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A signal, update or query body without its payload or argument, or
/// with a field it does not take (a misspelt `payload`), is refused and
/// records nothing: a signal of the wrong shape would fail the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_update_and_query_bodies_are_strict() {
    let (engine, server, client) = setup().await;
    client
        .start(&start("order", "strict-1", order_input()))
        .await
        .unwrap();
    until(&client, "strict-1", |d| {
        d.waits.iter().any(|w| w.name == "approved")
    })
    .await;
    let url = |verb: &str| format!("{}/api/v1/runs/strict-1/{verb}", server.url());
    let refused: &[(&str, &str, &str)] = &[
        (
            "signal",
            r#"{"name":"approved"}"#,
            "missing field `payload`",
        ),
        (
            "signal",
            r#"{"name":"approved","value":true}"#,
            "unknown field `value`",
        ),
        ("update", r#"{"name":"note"}"#, "missing field `arg`"),
        (
            "update",
            r#"{"name":"note","args":"x"}"#,
            "unknown field `args`",
        ),
        ("query", r#"{"name":"stage"}"#, "missing field `arg`"),
        (
            "query",
            r#"{"name":"stage","arg":null,"x":1}"#,
            "unknown field `x`",
        ),
    ];
    for (verb, body, text) in refused {
        let (s, v) = raw(Method::POST, &url(verb), Some(ADMIN), Some(body)).await;
        assert_eq!(
            (s, v["kind"].as_str()),
            (400, Some("bad_request")),
            "{verb} {body}: {v}"
        );
        assert!(
            v["message"].as_str().unwrap().contains(text),
            "{verb} {body}: {v}"
        );
    }
    // Nothing was recorded: the run still waits, and a good signal ends it.
    let d = client.describe("strict-1").await.unwrap();
    assert_eq!(d.status, "running");
    assert!(d.waits.iter().any(|w| w.name == "approved"));
    let (s, v) = raw(
        Method::POST,
        &url("query"),
        Some(ADMIN),
        Some(r#"{"name":"stage","arg":null}"#),
    )
    .await;
    assert_eq!(
        (s, v["value"].as_str()),
        (200, Some("waiting for approval"))
    );
    let (s, _) = raw(
        Method::POST,
        &url("signal"),
        Some(ADMIN),
        Some(r#"{"name":"approved","payload":true}"#),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        client.result("strict-1", Some(10_000)).await.unwrap(),
        json!("charged 450; shipped tea")
    );
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}
