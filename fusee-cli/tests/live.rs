//! Live mode (issue 29): `inspect`, `runs` and `show` with `--url` ask a
//! real `fusee_server::Server` (on 127.0.0.1, port 0) over an engine of
//! the test, and print what the same commands print of the engine's
//! directory once it is closed; the verbs act on its runs; the server's
//! refusals show its kind and message with the README's exit codes.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{RUNS, open_with_runs, temp_dir};
use fusee::{Config, Ctx, Engine, Failure, Signal, Workflow};
use serde_json::Value;

const ADMIN: &str = "admin-token";
const READ: &str = "read-token";

/// Runs the `fusee` binary off the runtime's threads (the server answers
/// on them meanwhile).
async fn fusee<S: AsRef<str>>(args: &[S]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.as_ref().to_string()).collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_fusee"))
            .args(&args)
            .env_remove("FUSEE_TOKEN")
            .output()
            .expect("the fusee binary runs")
    })
    .await
    .expect("joins")
}

/// `fusee args`' stdout, checking it exits `code`.
async fn stdout<S: AsRef<str>>(args: &[S], code: i32) -> String {
    let out = fusee(args).await;
    let shown: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    assert_eq!(
        out.status.code(),
        Some(code),
        "fusee {shown:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

async fn json<S: AsRef<str>>(args: &[S]) -> Value {
    let text = stdout(args, 0).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `v` with every `last_lsn` taken out (a store knows it, the API does
/// not say it).
fn without_lsn(mut v: Value) -> Value {
    for r in v.as_array_mut().expect("an array") {
        r.as_object_mut().expect("an object").remove("last_lsn");
    }
    v
}

async fn server(engine: &Engine) -> fusee_server::ServerHandle {
    fusee_server::Server::new(engine.clone())
        .bind("127.0.0.1:0".parse().expect("an address"))
        .admin_token(ADMIN)
        .read_token(READ)
        .start()
        .await
        .expect("the server starts")
}

/// `args` as the command takes them against the server at `url`, with
/// the read token.
fn live_args(url: &str, args: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    a.extend(["--url".into(), url.into(), "--token".into(), READ.into()]);
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_output_is_what_the_directory_shows() {
    let dir = temp_dir("live-same");
    let engine = open_with_runs("file", &dir).await;
    let handle = server(&engine).await;
    let url = handle.url();
    let u = url.as_str();
    let live = |args: &[&str]| live_args(u, args);

    let runs_json = json(&live(&["runs", "--json"])).await;
    let runs_table = stdout(&live(&["runs"]), 0).await;
    let waiting = json(&live(&["runs", "--status", "waiting", "--json"])).await;
    let limited = json(&live(&["runs", "--limit", "2", "--json"])).await;
    let shown = json(&live(&["show", "ok-1", "--json"])).await;
    let shown_table = stdout(&live(&["show", "cancel-1"]), 0).await;
    let info = json(&live(&["inspect", "--json"])).await;
    let info_table = stdout(&live(&["inspect"]), 0).await;
    handle.stop().await.expect("the server stops");
    engine.close().await.expect("close");
    drop(engine);

    // Every run, with the state a store gives it.
    let listed = runs_json.as_array().expect("an array");
    assert_eq!(listed.len(), RUNS.len(), "{runs_json:#}");
    for (id, _, state) in RUNS {
        let r = listed.iter().find(|r| r["id"] == id).expect("listed");
        assert_eq!(r["status"], state, "{r}");
    }
    assert_eq!(waiting.as_array().map(Vec::len), Some(2), "{waiting:#}");
    assert_eq!(limited.as_array().map(Vec::len), Some(2));
    assert_eq!(
        info["url"].as_str().map(|s| s.trim_end_matches('/')),
        Some(u)
    );
    assert_eq!(info["shards"].as_array().map(Vec::len), Some(2), "{info:#}");
    assert_eq!(info["shards"][0]["owned"], true, "{info:#}");
    assert_eq!(info["runs"]["waiting"], 2, "{info:#}");
    assert!(info_table.contains("server") && info_table.contains("durable LSN"));

    // The same commands on the directory, offline.
    let d = dir.to_str().expect("utf-8");
    let offline = common::fusee_json(&["runs", d, "--json"], 0);
    assert_eq!(without_lsn(runs_json), without_lsn(offline));
    assert_eq!(runs_table, stdout(&["runs", d], 0).await);
    assert_eq!(
        shown,
        common::fusee_json(&["show", d, "ok-1", "--json"], 0),
        "the journal document"
    );
    assert_eq!(shown_table, stdout(&["show", d, "cancel-1"], 0).await);
    let offline_info = common::fusee_json(&["inspect", d, "--json"], 0);
    assert_eq!(info["runs"], offline_info["runs"]);
    let _ = std::fs::remove_dir_all(&dir);
}

const ORDER: Workflow<u32, String> = Workflow::new("order");
const GO: Signal<String> = Signal::new("go");

/// Waits for a signal, then runs a step: what the verbs act on.
async fn order(ctx: Ctx, n: u32) -> Result<String, Failure> {
    let word = ctx.wait_for(&GO).await?.unwrap_or_default();
    let done = ctx
        .step("ship", move |_| {
            let word = word.clone();
            async move { Ok(format!("{word} {n}")) }
        })
        .await?;
    Ok(done)
}

const STUBBORN: Workflow<(), u32> = Workflow::new("stubborn");

/// Swallows every cancel: naps an hour, again and again.
async fn stubborn(ctx: Ctx, (): ()) -> Result<u32, Failure> {
    loop {
        let _ = ctx.sleep("nap", Duration::from_secs(3600)).await;
    }
}

/// Waits until `id`'s latest run ended with `status`.
async fn until_status(engine: &Engine, id: &str, status: &str) -> fusee::Description {
    for _ in 0..1000 {
        if let Ok(d) = engine.describe(id).await
            && let fusee::RunStatus::Finished(s) = d.status
            && fusee::inspect::status_name(s) == status
        {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} never {status}: {:?}", engine.describe(id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbs_act_on_a_live_engine_and_refusals_are_named() {
    let engine = Engine::open(Config::memory()).await.expect("opens");
    engine.register(ORDER, order);
    engine.register(STUBBORN, stubborn);
    let handle = server(&engine).await;
    let url = handle.url();
    let u = url.as_str();
    let admin = |args: &[&str]| {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.extend(["--url".into(), u.into(), "--token".into(), ADMIN.into()]);
        a
    };

    // start, then signal: the run finishes with the signal's word.
    let started = json(&admin(&["start", "order", "o-1", "7", "--json"])).await;
    assert_eq!(started["verb"], "started");
    assert_eq!(started["id"], "o-1");
    assert!(started["run"].as_u64().is_some(), "{started}");
    let said = stdout(&admin(&["signal", "o-1", "go", "\"shipped\""]), 0).await;
    assert!(said.contains("o-1"), "{said}");
    until_status(&engine, "o-1", "ok").await;
    let run = engine.describe("o-1").await.expect("described");
    let journal = json(&admin(&["show", "o-1", "--json"])).await;
    let done = journal["records"]
        .as_array()
        .expect("records")
        .iter()
        .find(|r| r["kind"] == "Done")
        .expect("a Done record")
        .clone();
    assert_eq!(done["payload"]["json"], "shipped 7", "{done}");
    assert_eq!(journal["run"], run.run);

    // pause holds the step after the signal; resume lets it run.
    stdout(&admin(&["start", "order", "o-2", "8"]), 0).await;
    stdout(&admin(&["pause", "o-2"]), 0).await;
    assert!(engine.describe("o-2").await.expect("described").paused);
    stdout(&admin(&["signal", "o-2", "go", "\"held\""]), 0).await;
    stdout(&admin(&["resume", "o-2"]), 0).await;
    until_status(&engine, "o-2", "ok").await;

    // reset from the step: a new run, which ends the same.
    let reset = json(&admin(&["reset", "o-2", "ship", "--json"])).await;
    assert_eq!(reset["verb"], "reset");
    assert!(reset["run"].as_u64().is_some(), "{reset}");
    for _ in 0..1000 {
        let d = engine.describe("o-2").await.expect("o-2");
        if Some(d.run) == reset["run"].as_u64() && d.finished_ms.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let d = engine.describe("o-2").await.expect("o-2");
    assert_eq!(Some(d.run), reset["run"].as_u64(), "the reset's run");

    // cancel and terminate.
    stdout(&admin(&["start", "order", "o-3", "1"]), 0).await;
    stdout(&admin(&["cancel", "o-3", "--reason", "no stock"]), 0).await;
    until_status(&engine, "o-3", "cancelled").await;
    stdout(&admin(&["start", "order", "o-4", "1"]), 0).await;
    stdout(&admin(&["terminate", "o-4"]), 0).await;
    until_status(&engine, "o-4", "terminated").await;
    // cancel --grace: code that swallows the cancel is terminated with
    // its reason once the grace passes.
    stdout(&admin(&["start", "stubborn", "s-1"]), 0).await;
    let asked = &["cancel", "s-1", "--reason", "late", "--grace", "200ms"];
    stdout(&admin(asked), 0).await;
    until_status(&engine, "s-1", "terminated").await;
    let err = engine
        .result(STUBBORN, "s-1")
        .await
        .expect_err("terminated");
    assert!(err.to_string().contains("late"), "{err}");

    // Refusals: the server's kind and message; 400 is exit 2, others 3.
    let refused = |out: &Output, code: i32, words: &[&str]| {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "{err}");
        for w in words {
            assert!(err.contains(w), "{w:?} not in {err}");
        }
    };
    let out = fusee(&admin(&["start", "nope", "x-1"])).await;
    refused(&out, 2, &["unknown_workflow", "order"]);
    let out = fusee(&admin(&["signal", "nobody", "go"])).await;
    refused(&out, 3, &["not_found", "nobody"]);
    let out = fusee(&admin(&["start", "order", "o-1", "1"])).await;
    refused(&out, 3, &["already_exists"]);
    let out = fusee(&["cancel", "o-1", "--url", u, "--token", READ]).await;
    refused(&out, 3, &["HTTP 403"]);
    let out = fusee(&["runs", "--url", u]).await;
    refused(&out, 3, &["HTTP 401"]);
    let out = fusee(&["runs", "--url", u, "--token", "wrong"]).await;
    refused(&out, 3, &["HTTP 401"]);
    // Bad arguments, before any request.
    let out = fusee(&admin(&["signal", "o-1", "go", "not json"])).await;
    refused(&out, 2, &["not JSON"]);
    refused(&fusee(&["cancel", "o-1"]).await, 2, &["--url"]);
    let out = fusee(&admin(&["cancel", "o-1", "--grace", "soon"])).await;
    refused(&out, 2, &["\"soon\" is not a duration"]);
    refused(&fusee(&["runs", "--token", ADMIN]).await, 2, &["--url"]);
    // --token on a directory: refused by every command, not ignored.
    for args in [
        &["runs", "some-dir", "--token", READ][..],
        &["inspect", "some-dir", "--token", READ],
        &["show", "some-dir", "o-1", "--token", READ],
        &["backup", "some-dir", "other-dir", "--token", ADMIN],
    ] {
        refused(&fusee(args).await, 2, &["--url"]);
    }
    // show's usage names what --url takes.
    refused(&fusee(&["show", "--url", u]).await, 2, &["--url URL ID"]);
    refused(
        &fusee(&["runs", "--url", "not a url"]).await,
        2,
        &["not a url"],
    );
    refused(
        &fusee(&["show", "some-dir", "o-1", "--url", u]).await,
        2,
        &["ID only"],
    );
    // The token from the environment.
    let out = tokio::task::spawn_blocking({
        let u = u.to_string();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_fusee"))
                .args(["runs", "--url", &u, "--json"])
                .env("FUSEE_TOKEN", READ)
                .output()
                .expect("runs")
        }
    })
    .await
    .expect("joins");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A server that is gone: exit 3, naming the URL.
    handle.stop().await.expect("stops");
    let out = fusee(&["runs", "--url", u, "--token", READ]).await;
    refused(&out, 3, &[u.trim_end_matches('/')]);
    engine.close().await.expect("close");
}

/// `fusee backup --url URL DEST`: the live engine backs its store up
/// through `POST /api/v1/backup` (admin token) while it runs; the copy
/// opens with the same runs the original's directory shows; the read
/// token, a destination that holds something, and `SRC DEST` with --url
/// are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_through_the_server_copies_the_live_store() {
    let dir = temp_dir("live-backup");
    let dest = temp_dir("live-backup-dest");
    let _ = std::fs::remove_dir_all(&dest);
    let engine = open_with_runs("file", &dir).await;
    let handle = server(&engine).await;
    let url = handle.url();
    let u = url.as_str();
    let d = dest.to_str().expect("UTF-8");

    // The read token may not.
    let out = fusee(&["backup", "--url", u, "--token", READ, d]).await;
    assert_ne!(out.status.code(), Some(0));
    assert!(!dest.exists(), "a refused backup wrote its destination");
    // A directory and a destination with --url is a usage error.
    let out = fusee(&["backup", "--url", u, "--token", ADMIN, d, d]).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    let reply = json(&["backup", "--url", u, "--token", ADMIN, d, "--json"]).await;
    assert_eq!(reply["shards"], 2, "{reply:#}");
    assert!(reply["bytes"].as_u64().unwrap_or(0) > 0, "{reply:#}");
    assert_eq!(reply["pauses"].as_array().map(Vec::len), Some(2));
    // Again into the same place: refused, the copy left alone.
    let out = fusee(&["backup", "--url", u, "--token", ADMIN, d]).await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("backup_not_empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    handle.stop().await.expect("the server stops");
    engine.close().await.expect("close");
    drop(engine);

    // The copy lists the runs the original does (LSNs aside: a copy's log
    // starts at 1, as a migration's does).
    let runs = |p: &std::path::Path| {
        let p = p.to_str().expect("UTF-8").to_string();
        async move {
            let mut v = json(&["runs", p.as_str(), "--json"]).await;
            v.as_array_mut()
                .expect("an array")
                .sort_by_key(|r| r["id"].as_str().unwrap_or("").to_string());
            without_lsn(v)
        }
    };
    assert_eq!(runs(&dest).await, runs(&dir).await);
    // And `fusee verify` finds nothing wrong with it.
    stdout(&["verify", d], 0).await;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dest);
}

const WORK: Workflow<(), u32> = Workflow::new("work");
const IDLE: Workflow<(), ()> = Workflow::new("idle");
const SPAWNER: Workflow<(), ()> = Workflow::new("spawner");

/// One step, to reset a run from, then a wait for `go`.
async fn work(ctx: Ctx, (): ()) -> Result<u32, Failure> {
    let n = ctx.step("count", |_| async { Ok(1u32) }).await?;
    ctx.wait_for(&GO).await?;
    Ok(n)
}

/// Waits until `id`'s latest run is `run` (any, if `None`) and waits for
/// a signal.
async fn until_waiting(engine: &Engine, id: &str, run: Option<u64>) {
    for _ in 0..1000 {
        if let Ok(d) = engine.describe(id).await
            && run.is_none_or(|r| r == d.run)
            && !d.waits.is_empty()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} never waited: {:?}", engine.describe(id).await);
}

/// `runs --url` and `inspect --url` over runs a description cannot reach
/// (an empty workflow ID, one too long for a URL) and an older run of a
/// reset chain: the listing carries on, each row keeps its own fields and
/// the server's attribute filtering, and the output is the directory's
/// (LSNs aside); what could not be described is said once on stderr, with
/// no huge URL. A missing token is told how to give one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_rows_keep_their_own_fields_and_undescribable_runs() {
    use fusee::{SearchAttributes, StartOptions};
    let dir = temp_dir("live-rows");
    let engine = Engine::open(Config::file(&dir).shards(2))
        .await
        .expect("opens");
    engine.register(WORK, work);
    // Its own code sets the attribute: a child gets none at its start.
    engine.register(IDLE, |ctx: Ctx, ()| async move {
        ctx.set_attributes(&SearchAttributes::new().int("customer_id", 5))?;
        Ok::<_, Failure>(())
    });
    let long = "L".repeat(100_000);
    let children = long.clone();
    // A client's start refuses both IDs (Error::BadWorkflowId); a store
    // may still hold such runs: made before that check, or children.
    engine.register(SPAWNER, move |ctx: Ctx, ()| {
        let long = children.clone();
        async move {
            ctx.child(IDLE, "", &()).await?;
            ctx.child(IDLE, &long, &()).await?;
            Ok::<_, Failure>(())
        }
    });
    for (id, customer) in [("chain-1", 5), ("other-1", 6)] {
        let attrs = SearchAttributes::new().int("customer_id", customer);
        let options = StartOptions::new().attributes(attrs);
        engine
            .start_with_options(WORK, id, &(), options)
            .await
            .expect("starts");
        until_waiting(&engine, id, None).await;
    }
    // Reset while it waits: the first run ends `reset`, a new one waits.
    let first = engine.describe("chain-1").await.expect("described").run;
    let again = engine
        .reset("chain-1", "count", "again")
        .await
        .expect("resets");
    assert_ne!(first, again.run);
    until_waiting(&engine, "chain-1", Some(again.run)).await;
    engine
        .execute(SPAWNER, "spawner", &())
        .await
        .expect("its children end");
    let handle = server(&engine).await;
    let url = handle.url();
    let u = url.as_str();
    let live = |args: &[&str]| live_args(u, args);

    let reset = json(&live(&["runs", "--status", "reset", "--json"])).await;
    let customer = json(&live(&[
        "runs",
        "--type",
        "work",
        "--attr",
        "customer_id=5",
        "--json",
    ]))
    .await;
    let every = fusee(&live(&["runs", "--json"])).await;
    let overview = fusee(&live(&["inspect", "--json"])).await;
    let idle = fusee(&live(&[
        "runs",
        "--type",
        "idle",
        "--attr",
        "customer_id=5",
        "--json",
    ]))
    .await;
    let no_token = fusee(&["runs", "--url", u]).await;
    handle.stop().await.expect("the server stops");
    engine.close().await.expect("close");
    drop(engine);

    // The older run keeps its finish time and attributes, and the
    // attribute filter keeps both runs of the chain, as offline.
    let d = dir.to_str().expect("utf-8");
    let offline = |args: &[&str]| {
        let mut a = vec!["runs", d, "--json"];
        a.extend_from_slice(args);
        without_lsn(common::fusee_json(&a, 0))
    };
    assert_eq!(reset.as_array().map(Vec::len), Some(1), "{reset:#}");
    assert!(reset[0]["finished_ms"].as_u64().is_some(), "{reset:#}");
    assert_eq!(
        reset[0]["attributes"]["customer_id"],
        serde_json::json!({"int": 5})
    );
    assert_eq!(without_lsn(reset), offline(&["--status", "reset"]));
    assert_eq!(customer.as_array().map(Vec::len), Some(2), "{customer:#}");
    assert_eq!(
        without_lsn(customer),
        offline(&["--type", "work", "--attr", "customer_id=5"])
    );

    // The runs no URL reaches are listed, as the listing says, and said
    // once on stderr, cut.
    for out in [&every, &overview, &idle] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert_eq!(err.matches("could not be described").count(), 1, "{err}");
        assert!(err.starts_with("fusee: 2 listed run(s)"), "{err}");
        assert!(err.len() < 2000, "{} bytes on stderr", err.len());
    }
    let listed: Value = serde_json::from_slice(&every.stdout).expect("JSON");
    assert_eq!(listed.as_array().map(Vec::len), Some(6), "{listed:#}");
    let idle: Value = serde_json::from_slice(&idle.stdout).expect("JSON");
    let ids: Vec<&str> = idle
        .as_array()
        .expect("an array")
        .iter()
        .map(|r| r["id"].as_str().expect("an ID"))
        .collect();
    assert!(
        ids.contains(&"") && ids.contains(&long.as_str()),
        "{}",
        ids.len()
    );
    for r in idle.as_array().expect("an array") {
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["finished_ms"].as_u64().is_some(), "{r}");
    }
    let overview: Value = serde_json::from_slice(&overview.stdout).expect("JSON");
    assert_eq!(
        overview["runs"],
        serde_json::json!({"ok": 3, "reset": 1, "waiting": 2}),
        "{overview:#}"
    );

    let err = String::from_utf8_lossy(&no_token.stderr);
    assert_eq!(no_token.status.code(), Some(3), "{err}");
    assert!(
        err.contains("--token") && err.contains("$FUSEE_TOKEN"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
