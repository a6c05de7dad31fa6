//! The console in a real browser: Debian's headless `chromium` driven
//! through `chromedriver` (started here on a free loopback port, killed
//! when the test ends) with fantoccini, against a live engine running the
//! order saga. A missing chromedriver fails the test (CI installs it:
//! `scripts/prereqs.sh`). Screenshots of each page go to
//! `$CARGO_TARGET_DIR/fusee-console-screenshots/` (else
//! `target/fusee-console-screenshots/`).

mod common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use fantoccini::{Client as Browser, ClientBuilder, Locator};
use fusee::IdPolicy;
use serde_json::json;

/// chromedriver, killed (and reaped) on drop.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn chromedriver() -> String {
    if let Ok(p) = std::env::var("FUSEE_CHROMEDRIVER") {
        return p;
    }
    for p in ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"] {
        if std::path::Path::new(p).exists() {
            return p.to_string();
        }
    }
    panic!(
        "chromedriver is not installed: the console's browser test needs Debian's chromium and \
         chromium-driver (apt-get install chromium chromium-driver, as scripts/prereqs.sh does), \
         or FUSEE_CHROMEDRIVER naming the binary"
    );
}

fn start_driver() -> Driver {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(chromedriver())
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver { child, port };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "chromedriver did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    driver
}

async fn browser(driver: &Driver) -> Browser {
    let mut caps = serde_json::Map::new();
    let mut args = vec![
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
    ];
    if std::env::var_os("FUSEE_BROWSER_SHOW").is_some() {
        args.remove(0);
    }
    let mut opts = json!({ "args": args });
    if std::path::Path::new("/usr/bin/chromium").exists() {
        opts["binary"] = json!("/usr/bin/chromium");
    }
    caps.insert("goog:chromeOptions".into(), opts);
    // A dialog left open must fail a command, never be dismissed quietly:
    // the XSS check relies on seeing one if a script ran.
    caps.insert("unhandledPromptBehavior".into(), json!("ignore"));
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a browser session")
}

fn shots_dir() -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = base.join("fusee-console-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}

async fn shot(b: &Browser, name: &str) {
    let png = b.screenshot().await.expect("screenshot");
    std::fs::write(shots_dir().join(format!("{name}.png")), png).expect("write screenshot");
}

/// Polls the page's text until it holds `want` (reloading), at most 10 s.
async fn until_text(b: &Browser, css: &str, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(e) = b.find(Locator::Css(css)).await
            && let Ok(t) = e.text().await
            && t.contains(want)
        {
            return t;
        }
        assert!(Instant::now() < deadline, "{css} never showed {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = b.refresh().await;
    }
}

/// Clicks `css` and accepts the confirmation it asks for.
async fn click_confirmed(b: &Browser, css: &str) {
    b.find(Locator::Css(css))
        .await
        .expect(css)
        .click()
        .await
        .expect("click");
    b.accept_alert().await.expect("a confirmation to accept");
}

async fn login(b: &Browser, base: &str, token: &str) {
    b.goto(&format!("{base}/login")).await.unwrap();
    b.find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys(token)
        .await
        .unwrap();
    b.find(Locator::Id("login-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until_text(b, "#rights", "rights:").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_chromium() {
    let driver = start_driver();
    let engine = engine().await;
    engine.register_flow_control();
    let server = serve(&engine).await;
    let base = server.url();
    let b = browser(&driver).await;
    let outcome = drive(&b, &engine, &base).await;
    let _ = b.close().await;
    server.stop().await.unwrap();
    engine.close().await.unwrap();
    outcome.unwrap();
}

async fn drive(b: &Browser, engine: &fusee::Engine, base: &str) -> Result<(), String> {
    let order = json!({"sku": "tea", "cents": 450});
    for id in ["order-1", "order-2"] {
        engine
            .start_json("order", id, &order, IdPolicy::NewOnly)
            .await
            .map_err(|e| e.to_string())?;
    }
    engine
        .start_json("echo", "echo-1", &json!(1), IdPolicy::NewOnly)
        .await
        .map_err(|e| e.to_string())?;
    engine
        .start_json(
            "echo",
            "xss-1",
            &json!("<script>alert(1)</script>"),
            IdPolicy::NewOnly,
        )
        .await
        .map_err(|e| e.to_string())?;
    engine
        .result_json("xss-1")
        .await
        .map_err(|e| e.to_string())?;
    engine
        .schedule("nightly-report", "0 3 * * *", ECHO, &json!("report"))
        .create()
        .await
        .map_err(|e| e.to_string())?;
    engine
        .queue("mail", ECHO)
        .concurrency(4)
        .create()
        .await
        .map_err(|e| e.to_string())?;
    engine
        .limit("payments-api")
        .concurrency(2)
        .create()
        .await
        .map_err(|e| e.to_string())?;

    // Logged in as admin: the overview.
    login(b, base, ADMIN).await;
    until_text(b, "#rights", "admin").await;
    until_text(b, "#shards", "shard").await;
    b.find(Locator::Id("latency-chart"))
        .await
        .map_err(|e| e.to_string())?;
    shot(b, "overview").await;

    // The runs list, filtered by type.
    b.goto(&format!("{base}/runs"))
        .await
        .map_err(|e| e.to_string())?;
    b.find(Locator::Css("select[name=workflow]"))
        .await
        .map_err(|e| e.to_string())?
        .select_by_value("order")
        .await
        .map_err(|e| e.to_string())?;
    b.find(Locator::Id("apply"))
        .await
        .map_err(|e| e.to_string())?
        .click()
        .await
        .map_err(|e| e.to_string())?;
    // The unfiltered page shows order-1 too: wait for the form's
    // navigation before reading the list (refreshing before it could
    // read, or cut short, the page it leaves).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !b
        .current_url()
        .await
        .map_err(|e| e.to_string())?
        .as_str()
        .contains("workflow=order")
    {
        assert!(Instant::now() < deadline, "the filter form never navigated");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let list = until_text(b, "#runs", "order-1").await;
    assert!(
        list.contains("order-2") && !list.contains("echo-1"),
        "filtered list: {list}"
    );
    assert!(
        b.current_url()
            .await
            .map_err(|e| e.to_string())?
            .as_str()
            .contains("workflow=order")
    );
    shot(b, "runs").await;

    // A run: its step on the timeline, then a signal from the page.
    b.find(Locator::LinkText("order-1"))
        .await
        .map_err(|e| e.to_string())?
        .click()
        .await
        .map_err(|e| e.to_string())?;
    until_text(b, "#run-id", "order-1").await;
    let timeline = until_text(b, "#timeline", "Wait").await;
    assert!(timeline.contains("charge"), "timeline: {timeline}");
    shot(b, "run").await;
    b.find(Locator::Id("signal-name"))
        .await
        .map_err(|e| e.to_string())?
        .send_keys("approved")
        .await
        .map_err(|e| e.to_string())?;
    let payload = b
        .find(Locator::Id("signal-payload"))
        .await
        .map_err(|e| e.to_string())?;
    payload.clear().await.map_err(|e| e.to_string())?;
    payload.send_keys("true").await.map_err(|e| e.to_string())?;
    click_confirmed(b, "#signal-send").await;
    until_text(b, "#notice", "signal approved sent").await;
    until_text(b, "#status", "ok").await;
    let result = until_text(b, "#result", "shipped tea").await;
    assert!(result.contains("charged 450"), "{result}");
    let timeline = until_text(b, "#timeline", "ship").await;
    assert!(
        timeline.contains("Signal") && timeline.contains("Done"),
        "{timeline}"
    );
    shot(b, "run-finished").await;

    // Pause and resume another run.
    b.goto(&format!("{base}/runs/order-2"))
        .await
        .map_err(|e| e.to_string())?;
    click_confirmed(b, "#pause").await;
    until_text(b, "#notice", "paused").await;
    b.find(Locator::Id("paused"))
        .await
        .map_err(|e| e.to_string())?;
    assert!(
        engine
            .describe("order-2")
            .await
            .map_err(|e| e.to_string())?
            .paused
    );
    shot(b, "run-paused").await;
    click_confirmed(b, "#resume").await;
    until_text(b, "#notice", "resumed").await;
    assert!(
        !engine
            .describe("order-2")
            .await
            .map_err(|e| e.to_string())?
            .paused
    );

    // The other pages.
    for (page, css, want) in [
        ("schedules", "#schedules", "nightly-report"),
        ("queues", "#queues", "mail"),
        ("limits", "#limits", "payments-api"),
    ] {
        b.goto(&format!("{base}/{page}"))
            .await
            .map_err(|e| e.to_string())?;
        until_text(b, css, want).await;
        shot(b, page).await;
    }

    // With the read token an action is refused and changes nothing.
    b.goto(&format!("{base}/"))
        .await
        .map_err(|e| e.to_string())?;
    b.find(Locator::Css("form[action='/logout'] button"))
        .await
        .map_err(|e| e.to_string())?
        .click()
        .await
        .map_err(|e| e.to_string())?;
    login(b, base, READ).await;
    until_text(b, "#rights", "read").await;
    b.goto(&format!("{base}/runs/order-2"))
        .await
        .map_err(|e| e.to_string())?;
    click_confirmed(b, "#terminate").await;
    until_text(b, "#refused", "Refused").await;
    shot(b, "refused").await;
    let d = engine
        .describe("order-2")
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!(d.status, fusee::RunStatus::Running);

    // A payload that is a script is shown as text and never runs.
    b.goto(&format!("{base}/runs/xss-1"))
        .await
        .map_err(|e| e.to_string())?;
    let input = until_text(b, "#input", "<script>alert(1)</script>").await;
    assert!(input.contains("<script>alert(1)</script>"));
    assert!(
        b.get_alert_text().await.is_err(),
        "a script from the payload ran"
    );
    until_text(b, "#result", "<script>alert(1)</script>").await;
    assert!(
        b.get_alert_text().await.is_err(),
        "a script from the payload ran"
    );
    shot(b, "xss").await;
    Ok(())
}
