//! The client addresses the run it names, whatever its workflow ID holds:
//! `/`, `\`, `?`, `#`, `%`, dots inside an ID and non-ASCII letters each
//! stay one path segment. IDs no URL can carry (`.`, `..`, control
//! characters) are refused at start, and the client never sends a
//! request for `.` or `..` (the url crate dropped them, so a verb acted
//! on another resource).

mod common;

use common::*;
use fusee_server::ClientError;
use fusee_server::model::StartRequest;

fn start(id: &str) -> StartRequest {
    StartRequest {
        workflow: "order".into(),
        id: id.into(),
        input: serde_json::json!({"sku": id, "cents": 1}),
        policy: None,
        version: None,
        attributes: None,
    }
}

const IDS: [&str; 8] = [
    "a/b/../c",
    "a/b",
    "a\\b",
    "q?x=1#frag",
    "pct%2Fenc",
    "%2E%2E",
    "...",
    "заказ-🚀",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_reaches_the_run_its_id_names() {
    let (engine, server, client) = setup().await;
    for id in IDS {
        let started = client.start(&start(id)).await.expect("start");
        assert_eq!(started.id, id);
    }
    for id in IDS {
        let d = client.describe(id).await.expect("describe");
        assert_eq!(d.id, id, "describe of {id:?}");
    }
    // Terminating one leaves its look-alikes running.
    client
        .terminate("a/b/../c", "by its own name")
        .await
        .expect("terminate");
    assert_eq!(
        client.describe("a/b/../c").await.expect("describe").status,
        "terminated"
    );
    for id in ["a/b", "%2E%2E", "..."] {
        assert_eq!(
            client.describe(id).await.expect("describe").status,
            "running"
        );
    }
    server.stop().await.expect("stop");
    engine.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_no_url_can_carry_are_refused_and_never_sent() {
    let (engine, server, client) = setup().await;
    for id in [".", "..", "", "new\nline", "tab\there"] {
        match client.start(&start(id)).await {
            Err(e) => assert_eq!(e.kind(), Some("bad_workflow_id"), "{id:?}: {e}"),
            Ok(r) => panic!("{id:?} started: {r:?}"),
        }
    }
    for id in [".", ".."] {
        assert!(
            matches!(
                client.describe(id).await,
                Err(ClientError::Unaddressable { .. })
            ),
            "{id:?}"
        );
    }
    server.stop().await.expect("stop");
    engine.close().await.expect("close");
}
