//! The console over plain HTTP: pages, escaping, login cookies, CSRF and
//! rights on its forms. (The browser test drives the same pages in
//! Chromium.)

mod common;

use common::*;
use fusee::IdPolicy;
use serde_json::json;

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A browser's session: the CSRF cookie from a first page, and a login.
struct Session {
    http: reqwest::Client,
    base: String,
    cookies: String,
    csrf: String,
}

impl Session {
    async fn login(base: &str, token: &str) -> Session {
        let http = no_redirects();
        let first = http.get(format!("{base}/login")).send().await.unwrap();
        let set: Vec<String> = first
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect();
        let csrf_cookie = set
            .iter()
            .find(|c| c.starts_with("fusee_csrf="))
            .expect("csrf cookie");
        assert!(csrf_cookie.contains("HttpOnly") && csrf_cookie.contains("SameSite=Strict"));
        let csrf = csrf_cookie["fusee_csrf=".len()..]
            .split(';')
            .next()
            .unwrap()
            .to_string();
        let page = first.text().await.unwrap();
        assert!(
            page.contains(&csrf),
            "the login form carries the CSRF token"
        );
        let resp = http
            .post(format!("{base}/login"))
            .header("cookie", format!("fusee_csrf={csrf}"))
            .form(&[("csrf", csrf.as_str()), ("token", token)])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 303);
        let token_cookie = resp
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .find(|c| c.starts_with("fusee_token="))
            .expect("token cookie");
        assert!(token_cookie.contains("HttpOnly") && token_cookie.contains("SameSite=Strict"));
        assert!(
            !token_cookie.contains(token),
            "the cookie does not hold the token as given"
        );
        let value = token_cookie.split(';').next().unwrap().to_string();
        Session {
            http,
            base: base.to_string(),
            cookies: format!("fusee_csrf={csrf}; {value}"),
            csrf,
        }
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookies)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> (u16, String, String) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", &self.cookies)
            .form(form)
            .send()
            .await
            .unwrap();
        let location = r
            .headers()
            .get("location")
            .map(|l| l.to_str().unwrap().to_string())
            .unwrap_or_default();
        (r.status().as_u16(), location, r.text().await.unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_escape_payloads_and_forms_need_admin_and_csrf() {
    let engine = engine().await;
    let server = serve(&engine).await;
    let base = server.url();
    engine
        .start_json(
            "echo",
            "<b>xss</b>",
            &json!("<script>alert(1)</script>"),
            IdPolicy::NewOnly,
        )
        .await
        .unwrap();
    engine.result_json("<b>xss</b>").await.unwrap();
    engine
        .start_json(
            "order",
            "o-1",
            &json!({"sku": "tea", "cents": 1}),
            IdPolicy::NewOnly,
        )
        .await
        .unwrap();

    // Without a login the pages send a person to the login page.
    let anon = no_redirects()
        .get(format!("{base}/runs"))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status().as_u16(), 303);
    assert_eq!(anon.headers()["location"], "/login");

    // Two samples of the server's activity sampler make a rate.
    tokio::time::sleep(std::time::Duration::from_millis(2200)).await;
    let reader = Session::login(&base, READ).await;
    let (_, overview) = reader.get("/").await;
    assert!(
        overview.contains("id=\"activity-chart\"")
            && overview.contains("Now: ")
            && overview.contains(" steps/s, "),
        "{overview}"
    );
    for path in [
        "/",
        "/runs",
        "/runs?status=ok",
        "/schedules",
        "/queues",
        "/limits",
        "/runs/o-1",
    ] {
        let (status, body) = reader.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert!(body.contains("rights: read"), "{path}");
    }
    let (status, list) = reader.get("/runs").await;
    assert_eq!(status, 200);
    assert!(list.contains("&lt;b&gt;xss&lt;/b&gt;") && !list.contains("<b>xss</b>"));
    let (status, page) = reader.get("/runs/%3Cb%3Exss%3C%2Fb%3E").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<script>alert"), "an unescaped payload");

    // The read token's action is refused and changes nothing.
    let (status, _, body) = reader
        .post(
            "/runs/o-1/action",
            &[("csrf", reader.csrf.as_str()), ("action", "terminate")],
        )
        .await;
    assert_eq!(status, 403);
    assert!(body.contains("Refused"), "{body}");
    assert_eq!(
        engine.describe("o-1").await.unwrap().status,
        fusee::RunStatus::Running
    );

    let admin = Session::login(&base, ADMIN).await;
    // A form without the CSRF token, or with another, is refused.
    for csrf in ["", "0000"] {
        let (status, _, _) = admin
            .post("/runs/o-1/action", &[("csrf", csrf), ("action", "pause")])
            .await;
        assert_eq!(status, 403);
    }
    assert!(!engine.describe("o-1").await.unwrap().paused);
    let (status, location, _) = admin
        .post(
            "/runs/o-1/action",
            &[("csrf", admin.csrf.as_str()), ("action", "pause")],
        )
        .await;
    assert_eq!(
        (status, location.starts_with("/runs/o-1?notice=")),
        (303, true)
    );
    assert!(engine.describe("o-1").await.unwrap().paused);
    // A bad JSON payload is refused with an error, and records nothing.
    let (_, location, _) = admin
        .post(
            "/runs/o-1/action",
            &[
                ("csrf", admin.csrf.as_str()),
                ("action", "signal"),
                ("name", "approved"),
                ("payload", "{oops"),
            ],
        )
        .await;
    assert!(location.contains("error="), "{location}");
    let (_, page) = admin.get("/runs/o-1").await;
    assert!(page.contains("id=\"paused\""), "the page shows the pause");
    assert!(page.contains("charge"), "the timeline shows the step");
    let form =
        |action: &'static str| vec![("csrf", admin.csrf.clone()), ("action", action.to_string())];
    let post = |path: &'static str, f: Vec<(&'static str, String)>| {
        let admin = &admin;
        async move {
            let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
            admin.post(path, &pairs).await
        }
    };
    let (_, location, _) = post("/runs/o-1/action", form("resume")).await;
    assert!(location.contains("notice=resumed"), "{location}");
    // Reset from the chosen step: a new run of the ID.
    let before = engine.describe("o-1").await.unwrap().run;
    let mut reset = form("reset");
    reset.push(("step", "charge".into()));
    let (_, location, _) = post("/runs/o-1/action", reset).await;
    assert!(location.contains("notice=reset"), "{location}");
    assert_ne!(engine.describe("o-1").await.unwrap().run, before);
    let (_, page) = admin.get("/runs/o-1").await;
    assert!(
        page.contains("id=\"chain\""),
        "the page shows the runs of the ID"
    );
    // A signal with a deduplication key, sent twice from the form (a retry
    // after a lost reply), is recorded once; without a key, twice.
    for key in ["retry-1", "retry-1", "", ""] {
        let mut keyed = form("signal");
        keyed.push(("name", "ping".into()));
        keyed.push(("payload", "1".into()));
        keyed.push(("key", key.into()));
        let (_, location, _) = post("/runs/o-1/action", keyed).await;
        assert!(location.contains("notice=signal"), "{location}");
    }
    let journal = engine.journal_json("o-1", None).await.unwrap();
    let pings = journal["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "Signal" && r["name"] == "ping")
        .count();
    assert_eq!(pings, 3, "{journal}");
    // A signal from the form finishes the run.
    let mut signal = form("signal");
    signal.push(("name", "approved".into()));
    signal.push(("payload", "true".into()));
    let (_, location, _) = post("/runs/o-1/action", signal).await;
    assert!(location.contains("notice=signal"), "{location}");
    assert_eq!(
        engine.result_json("o-1").await.unwrap(),
        json!("charged 1; shipped tea")
    );
    // An engine refusal comes back as the page's error, its text intact.
    let (_, location, _) = post("/runs/o-1/action", form("cancel")).await;
    assert!(
        location.contains("error=") && location.contains("finished"),
        "{location}"
    );
    // Schedules, queues, limits.
    engine.register_flow_control();
    engine
        .schedule("nightly", "0 3 * * *", ECHO, &json!(1))
        .create()
        .await
        .unwrap();
    engine.queue("mail", ECHO).create().await.unwrap();
    engine.limit("db").concurrency(1).create().await.unwrap();
    let (_, location, _) = post("/schedules/nightly/action", form("pause")).await;
    assert!(location.starts_with("/schedules?notice="), "{location}");
    assert!(engine.schedules().describe("nightly").await.unwrap().paused);
    let (_, location, _) = post("/queues/mail/action", form("pause")).await;
    assert!(location.starts_with("/queues?notice="), "{location}");
    assert!(engine.queues().describe("mail").await.unwrap().paused);
    let (_, location, _) = post("/limits/db/action", form("delete")).await;
    assert!(location.starts_with("/limits?notice="), "{location}");
    assert!(engine.limits().list().await.unwrap().is_empty());
    let (_, location, _) = post("/queues/nope/action", form("pause")).await;
    assert!(location.starts_with("/queues?error="), "{location}");
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_does_not_log_in() {
    let engine = engine().await;
    let server = serve(&engine).await;
    let base = server.url();
    let http = no_redirects();
    let first = http.get(format!("{base}/login")).send().await.unwrap();
    let csrf = first
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find_map(|c| {
            c.strip_prefix("fusee_csrf=")
                .map(|c| c.split(';').next().unwrap().to_string())
        })
        .unwrap();
    let resp = http
        .post(format!("{base}/login"))
        .header("cookie", format!("fusee_csrf={csrf}"))
        .form(&[("csrf", csrf.as_str()), ("token", "guess")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 303);
    assert!(
        resp.headers()["location"]
            .to_str()
            .unwrap()
            .starts_with("/login?error=")
    );
    assert!(
        resp.headers()
            .get_all("set-cookie")
            .iter()
            .all(|c| !c.to_str().unwrap().starts_with("fusee_token="))
    );
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// Issue 32.3: a run's page shows the steps that began and have not
/// ended, with when each began (from the journal's `Began` records).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_page_shows_its_steps_in_flight() {
    const STUCK: fusee::Workflow<(), u32> = fusee::Workflow::new("stuck");
    let engine = engine().await;
    engine.register(STUCK, |ctx: fusee::Ctx, ()| async move {
        let v = ctx
            .step("upload", |_| async {
                std::future::pending::<()>().await;
                Ok(1u32)
            })
            .await?;
        Ok::<_, fusee::Failure>(v)
    });
    let server = serve(&engine).await;
    engine.start(STUCK, "s-1", &()).await.unwrap();
    let mut began = false;
    for _ in 0..2_000 {
        if !engine.describe("s-1").await.unwrap().in_flight.is_empty() {
            began = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(began, "the step began");
    let reader = Session::login(&server.url(), READ).await;
    let (status, page) = reader.get("/runs/s-1").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("id=\"in-flight\"")
            && page.contains("<b>upload</b> (operation 1) attempt 1 began at "),
        "{page}"
    );
    // Its `Began` row says how long it has run so far (issue 29).
    assert!(
        page.contains("<td class=\"took\">running for <b>"),
        "{page}"
    );
}

/// Issue 29: the run page's timeline shows how long each step attempt
/// ran, from its `Began` to its end as the journal records them (a
/// failed attempt's and the result's), the step's total on its result's
/// row, and a bar per attempt as long as it ran; a step still running
/// shows its time so far.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_page_shows_how_long_each_step_attempt_ran() {
    use std::time::Duration;
    const FLAKY: fusee::Workflow<(), u32> = fusee::Workflow::new("flaky");
    const NAP_MS: u64 = 150;
    let engine = engine().await;
    engine.register(FLAKY, |ctx: fusee::Ctx, ()| async move {
        let v = ctx
            .step("fetch", |sc| async move {
                tokio::time::sleep(Duration::from_millis(NAP_MS)).await;
                if sc.attempt() == 1 {
                    return Err(fusee::StepError::retryable("flaky"));
                }
                Ok(7u32)
            })
            .retry(fusee::RetryPolicy::default().attempts(3).backoff(
                Duration::from_millis(20),
                1.0,
                Duration::from_millis(20),
            ))
            .await?;
        Ok::<_, fusee::Failure>(v)
    });
    let server = serve(&engine).await;
    assert_eq!(engine.execute(FLAKY, "f-1", &()).await.unwrap(), 7);

    // What the journal says each attempt took.
    let journal = engine.journal_json("f-1", None).await.unwrap();
    let records = journal["records"].as_array().unwrap();
    let mut took = Vec::new();
    for r in records {
        if r["kind"] == "Step" || r["kind"] == "Attempt" {
            let began = records
                .iter()
                .rfind(|b| b["kind"] == "Began" && b["attempt"] == r["attempt"])
                .expect("its Began");
            let ended = r["ended_ms"].as_u64().expect("an end time");
            took.push(ended - began["started_ms"].as_u64().unwrap());
        }
    }
    assert_eq!(took.len(), 2, "{journal}");
    for ms in &took {
        assert!(
            (NAP_MS..1_000).contains(ms),
            "an attempt took {ms} ms: {journal}"
        );
    }
    let reader = Session::login(&server.url(), READ).await;
    let (status, page) = reader.get("/runs/f-1").await;
    assert_eq!(status, 200, "{page}");
    // Each attempt's row, and the total on the result's.
    // The failed attempt's time on its `Attempt` row only (not on its
    // `Began`'s).
    assert_eq!(
        page.matches(&format!("<td class=\"took\"><b>{} ms</b></td>", took[0]))
            .count(),
        1,
        "{page}"
    );
    assert_eq!(
        page.matches("<td class=\"took\"></td>").count(),
        4,
        "{page}"
    );
    let total = took[0] + took[1];
    let total = if total < 1000 {
        format!("{total} ms")
    } else {
        format!("{}.{:03} s", total / 1000, total % 1000)
    };
    assert!(
        page.contains(&format!(
            "<td class=\"took\"><b>{} ms</b><br><span class=\"step-total\">step total <b>{total}</b> over 2 attempts",
            took[1]
        )),
        "{page}"
    );
    // The chart: one row, a bar per attempt, each titled with its time.
    assert!(page.contains("id=\"step-durations\""), "{page}");
    assert_eq!(page.matches("class=\"attempt-bar\"").count(), 2, "{page}");
    assert!(
        page.contains(&format!("attempt 1: {} ms (failed, retried)", took[0]))
            && page.contains(&format!("attempt 2: {} ms (ok)", took[1])),
        "{page}"
    );
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// Issue 33: the run page shows the run's search attributes, escaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_page_shows_its_search_attributes() {
    const QUIET: fusee::Workflow<(), ()> = fusee::Workflow::new("quiet");
    let engine = engine().await;
    engine.register(QUIET, |_ctx: fusee::Ctx, ()| async move {
        Ok::<_, fusee::Failure>(())
    });
    let server = serve(&engine).await;
    let attrs = fusee::SearchAttributes::new()
        .int("customer_id", 42)
        .keyword("tier", "<gold>");
    engine
        .start_with_options(
            QUIET,
            "q-1",
            &(),
            fusee::StartOptions::new().attributes(attrs),
        )
        .await
        .unwrap();
    engine.result(QUIET, "q-1").await.unwrap();
    let reader = Session::login(&server.url(), READ).await;
    let (status, page) = reader.get("/runs/q-1").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("id=\"attributes\"")
            && page.contains("<b>customer_id</b> = int:42")
            && page.contains("<b>tier</b> = keyword:&lt;gold&gt;"),
        "{page}"
    );
}

/// IDs a browser cannot keep as a path segment (`.` and `..` are dot
/// segments, `%2E` spelled too; the empty one is no segment) are written
/// after a `~` (as are IDs starting with `~`): each run's link reaches
/// its page and its forms act on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_id_has_a_link_that_reaches_its_run() {
    let engine = engine().await;
    let server = serve(&engine).await;
    let base = reqwest::Url::parse(&server.url()).unwrap();
    // Why not `%2E`: the URL standard resolves it as a dot segment.
    assert_eq!(base.join("/runs/%2E%2E").unwrap().path(), "/");
    let ids = [
        ("..", "~.."),
        (".", "~."),
        ("", "~"),
        ("~x", "~~x"),
        ("a.b", "a.b"),
    ];
    // A client's start refuses the first three (Error::BadWorkflowId); a
    // store may hold them still, made before that check or as children.
    const SPAWN: fusee::Workflow<(), ()> = fusee::Workflow::new("spawn");
    engine.register(SPAWN, move |ctx: fusee::Ctx, ()| async move {
        for (id, _) in ids {
            let order = Order {
                sku: "tea".into(),
                cents: 1,
            };
            ctx.child(ORDER, id, &order)
                .on_parent_close(fusee::ParentClose::Abandon)
                .detach()
                .await?;
        }
        Ok::<_, fusee::Failure>(())
    });
    engine.execute(SPAWN, "spawn", &()).await.unwrap();
    for (id, _) in ids {
        let mut started = false;
        for _ in 0..500 {
            if engine.describe(id).await.is_ok() {
                started = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(started, "{id:?} never started");
    }
    let admin = Session::login(&server.url(), ADMIN).await;
    let (_, listing) = admin.get("/runs").await;
    for (id, seg) in ids {
        let href = format!("/runs/{seg}");
        assert!(
            listing.contains(&format!("href=\"{href}\"")),
            "{id:?}: {listing}"
        );
        // As a browser resolves the link.
        let url = base.join(&href).unwrap();
        assert_eq!(url.path(), href, "{id:?}");
        let (status, page) = admin.get(url.path()).await;
        assert_eq!(status, 200, "{id:?}: {page}");
        assert!(
            page.contains(&format!("<span id=\"run-id\">{id}</span>")),
            "{id:?}: {page}"
        );
        let action = format!("{href}/action");
        assert!(page.contains(&format!("action=\"{action}\"")), "{id:?}");
        let (status, location, _) = admin
            .post(
                &action,
                &[("csrf", admin.csrf.as_str()), ("action", "pause")],
            )
            .await;
        assert_eq!(status, 303, "{id:?}");
        assert!(
            location.starts_with(&format!("{href}?notice=")),
            "{location}"
        );
        assert!(engine.describe(id).await.unwrap().paused, "{id:?}");
    }
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// The signal form has no default payload: an empty one is an error on
/// the page and sends nothing (a `null` the signal's type does not decode
/// would fail the run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signal_form_needs_a_payload() {
    let engine = engine().await;
    let server = serve(&engine).await;
    engine
        .start_json(
            "order",
            "o-2",
            &json!({"sku": "tea", "cents": 1}),
            IdPolicy::NewOnly,
        )
        .await
        .unwrap();
    let admin = Session::login(&server.url(), ADMIN).await;
    let (_, page) = admin.get("/runs/o-2").await;
    let input = page
        .split("id=\"signal-payload\"")
        .nth(1)
        .and_then(|rest| rest.split('>').next())
        .expect("the payload input");
    assert!(
        input.contains("required") && !input.contains("value="),
        "{input}"
    );
    for payload in ["", "  "] {
        let (status, location, _) = admin
            .post(
                "/runs/o-2/action",
                &[
                    ("csrf", admin.csrf.as_str()),
                    ("action", "signal"),
                    ("name", "approved"),
                    ("payload", payload),
                ],
            )
            .await;
        assert_eq!(status, 303);
        assert!(
            location.contains("error=the%20payload%20is%20empty"),
            "{location}"
        );
    }
    // Nothing was sent: the run still waits for its approval.
    let journal = engine.journal_json("o-2", None).await.unwrap();
    assert!(
        !journal["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "Signal"),
        "{journal}"
    );
    assert!(matches!(
        engine.describe("o-2").await.unwrap().status,
        fusee::RunStatus::Running
    ));
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}

/// A form or a query the console's pages would not send is answered with
/// its error page, not axum's plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_forms_and_queries_get_the_consoles_error_page() {
    let engine = engine().await;
    let server = serve(&engine).await;
    engine
        .start_json(
            "order",
            "o-3",
            &json!({"sku": "tea", "cents": 1}),
            IdPolicy::NewOnly,
        )
        .await
        .unwrap();
    let admin = Session::login(&server.url(), ADMIN).await;
    let (status, _, page) = admin
        .post("/runs/o-3/action", &[("csrf", admin.csrf.as_str())])
        .await;
    assert_eq!(status, 400, "{page}");
    assert!(
        page.contains("id=\"bad-request\"") && page.contains("action"),
        "{page}"
    );
    let (status, page) = admin.get("/runs?limit=abc").await;
    assert_eq!(status, 400, "{page}");
    assert!(
        page.contains("id=\"bad-request\"") && page.contains("limit"),
        "{page}"
    );
    let (status, page) = admin.get("/runs/o-3?run=x").await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("id=\"bad-request\""), "{page}");
    server.stop().await.unwrap();
    engine.close().await.unwrap();
}
