//! `fusee runs --attr`: a stopped store's runs filtered by their search
//! attributes offline (loaded and parked runs alike), and a live engine's
//! through its server (`--url`), shown in the JSON; a malformed condition
//! is a usage error (exit 2) saying what is wrong.

mod common;

use common::{fusee, fusee_json, temp_dir};
use fusee::{
    Clock, Config, Ctx, Engine, Failure, SearchAttributes, StartOptions, VirtualClock, Workflow,
};

const IDLE: Workflow<(), ()> = Workflow::new("idle");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_filtered_by_attribute_offline() {
    let dir = temp_dir("attrs");
    let clock = VirtualClock::new(1_700_000_000_000);
    let config = || {
        Config::file(&dir)
            .shards(2)
            .park_after(std::time::Duration::ZERO)
            .clock(Clock::Virtual(clock.clone()))
    };
    let engine = Engine::open(config()).await.unwrap();
    engine.register(IDLE, |_ctx: Ctx, ()| async move { Ok::<_, Failure>(()) });
    for i in 0..12i64 {
        let attrs = SearchAttributes::new()
            .int("customer_id", i % 3)
            .float("amount", i as f64 * 10.0);
        engine
            .start_with_options(
                IDLE,
                &format!("o{i}"),
                &(),
                StartOptions::new().attributes(attrs),
            )
            .await
            .unwrap();
        engine.result(IDLE, &format!("o{i}")).await.unwrap();
    }
    // Live, through the server: the same runs.
    let server = fusee_server::Server::new(engine.clone())
        .bind("127.0.0.1:0".parse().unwrap())
        .read_token("read")
        .start()
        .await
        .unwrap();
    let url = server.url();
    let live = tokio::task::spawn_blocking(move || {
        fusee_json(
            &[
                "runs",
                "--url",
                &url,
                "--token",
                "read",
                "--json",
                "--attr",
                "customer_id=1",
                "--attr",
                "amount>float:50",
            ],
            0,
        )
    })
    .await
    .unwrap();
    let mut live_ids: Vec<&str> = live
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    live_ids.sort();
    assert_eq!(live_ids, ["o10", "o7"]);
    assert_eq!(
        live[0]["attributes"]["customer_id"],
        serde_json::json!({"int": 1})
    );
    server.stop().await.unwrap();
    engine.close().await.unwrap();
    let d = dir.to_str().unwrap();
    let ids = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["runs", d, "--json"];
        all.extend_from_slice(args);
        let mut v: Vec<String> = fusee_json(&all, 0)
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(ids(&["--attr", "customer_id=1"]), ["o1", "o10", "o4", "o7"]);
    assert_eq!(
        ids(&["--attr", "customer_id=1", "--attr", "amount>float:50"]),
        ["o10", "o7"]
    );
    assert_eq!(
        ids(&["--attr", "amount=float:20..float:40"]),
        ["o2", "o3", "o4"]
    );
    assert!(
        ids(&["--attr", "amount>50"]).is_empty(),
        "an int never matches a float"
    );
    let runs = fusee_json(
        &[
            "runs",
            d,
            "--json",
            "--attr",
            "customer_id=2",
            "--limit",
            "1",
        ],
        0,
    );
    assert_eq!(
        runs[0]["attributes"]["customer_id"],
        serde_json::json!({"int": 2})
    );
    for bad in ["colour=paint:red", "amount", "amount>int:ten"] {
        let out = fusee(&["runs", d, "--attr", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--attr"), "{bad}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
