//! `fusee::telemetry`: the exposition text parsed strictly and its values
//! checked after a workload, a restart that counts nothing again, and a
//! real scrape by Debian's `prometheus` server read back through its HTTP
//! API.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use fusee::{Config, Ctx, Engine, Failure, RetryPolicy, Signal, StepError, Workflow};

const ORDER: Workflow<u32, u32> = Workflow::new("order");
const DOOMED: Workflow<(), ()> = Workflow::new("doomed");
const RESUME: Workflow<(), u32> = Workflow::new("resume");
const GO: Signal<u32> = Signal::new("go");

fn temp_dir(tag: &str) -> std::path::PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "fusee-telemetry-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `order`: a step, a step that fails once and is retried, a short sleep.
/// `doomed`: a step that fails for good, so the run fails.
fn register(engine: &Engine) {
    engine.register(ORDER, |ctx: Ctx, n: u32| async move {
        let a = ctx.step("charge", move |_| async move { Ok(n) }).await?;
        let b = ctx
            .step("flaky", move |step| async move {
                if step.attempt() == 1 {
                    Err(StepError::retryable("not yet"))
                } else {
                    Ok(a + 1)
                }
            })
            .retry(RetryPolicy::default().backoff(
                Duration::from_millis(1),
                1.0,
                Duration::from_millis(1),
            ))
            .await?;
        ctx.sleep("settle", Duration::from_millis(5)).await?;
        Ok::<_, Failure>(b)
    });
    engine.register(DOOMED, |ctx: Ctx, ()| async move {
        ctx.step("boom", |_| async {
            Err::<(), _>(StepError::fatal("no such card"))
        })
        .await?;
        Ok::<_, Failure>(())
    });
}

async fn workload(engine: &Engine) {
    for i in 0..3 {
        assert_eq!(
            engine
                .execute(ORDER, &format!("order-{i}"), &i)
                .await
                .unwrap(),
            i + 1
        );
    }
    assert!(engine.execute(DOOMED, "doomed-1", &()).await.is_err());
}

/// One sample: its metric name and labels.
type Series = (String, BTreeMap<String, String>);

/// The exposition text parsed strictly (the text format 0.0.4): every
/// line a `# HELP`, a `# TYPE` before any sample of its family, or a
/// sample `name{label="value",...} value` of a declared family, with
/// valid names, escapes and a number; no series twice. Panics on anything
/// else.
fn parse(text: &str) -> HashMap<Series, f64> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = HashMap::new();
    let valid_name = |s: &str| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    for (n, line) in text.lines().enumerate() {
        let at = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kind, name, tail) = (parts.next(), parts.next(), parts.next());
            let name = name.unwrap_or_else(|| panic!("{}", at("comment without a name")));
            assert!(valid_name(name), "{}", at("bad metric name"));
            match kind {
                Some("HELP") => assert!(tail.is_some(), "{}", at("HELP without text")),
                Some("TYPE") => {
                    let t = tail.unwrap_or_default();
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                        "{}",
                        at("bad type")
                    );
                    assert!(
                        types.insert(name.to_string(), t.to_string()).is_none(),
                        "{}",
                        at("family typed twice")
                    );
                }
                _ => panic!("{}", at("unknown comment")),
            }
            continue;
        }
        assert!(!line.is_empty(), "{}", at("empty line"));
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("{}", at("no value")));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("{}", at("bad value"))),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("{}", at("unclosed labels")));
                (
                    name,
                    parse_labels(body).unwrap_or_else(|e| panic!("{}", at(e))),
                )
            }
        };
        assert!(valid_name(name), "{}", at("bad metric name"));
        let family = types
            .get(name)
            .map(|_| name)
            .or_else(|| {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .filter_map(|s| name.strip_suffix(s))
                    .find(|f| types.get(*f).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or_else(|| panic!("{}", at("sample of an undeclared family")));
        if name.ends_with("_bucket") {
            assert!(labels.contains_key("le"), "{}", at("bucket without le"));
        }
        assert!(
            samples.insert((name.to_string(), labels), value).is_none(),
            "{}",
            at(&format!("series of {family} twice"))
        );
    }
    samples
}

/// `a="x",b="y\"z"` into a map; an error names what is wrong.
fn parse_labels(body: &str) -> Result<BTreeMap<String, String>, &'static str> {
    let mut labels = BTreeMap::new();
    let mut chars = body.chars().peekable();
    while chars.peek().is_some() {
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err("bad label name");
        }
        if chars.next() != Some('"') {
            return Err("label value not quoted");
        }
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('"') => break,
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some('\\') => value.push('\\'),
                    Some('"') => value.push('"'),
                    _ => return Err("bad escape"),
                },
                Some(c) => value.push(c),
                None => return Err("unterminated label value"),
            }
        }
        if labels.insert(key, value).is_some() {
            return Err("label twice");
        }
        match chars.next() {
            None => {}
            Some(',') => {}
            Some(_) => return Err("junk after a label"),
        }
    }
    Ok(labels)
}

/// The value of `name` with exactly `labels` (0 when absent: a counter
/// never incremented has no series).
fn value(samples: &HashMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    samples
        .get(&(name.to_string(), labels))
        .copied()
        .unwrap_or(0.0)
}

/// The sum of `name` over every series.
fn total(samples: &HashMap<Series, f64>, name: &str) -> f64 {
    samples
        .iter()
        .filter(|((n, _), _)| n == name)
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exposition_parses_and_counts_a_workload() {
    let engine = Engine::open(Config::memory()).await.unwrap();
    register(&engine);
    workload(&engine).await;
    let text = fusee::telemetry::render(&engine).await;
    let s = parse(&text);

    let order = [("workflow", "order")];
    assert_eq!(value(&s, "fusee_run_starts_total", &order), 3.0, "{text}");
    assert_eq!(
        value(&s, "fusee_run_starts_total", &[("workflow", "doomed")]),
        1.0
    );
    assert_eq!(
        value(
            &s,
            "fusee_run_ends_total",
            &[("workflow", "order"), ("status", "ok")]
        ),
        3.0
    );
    assert_eq!(
        value(
            &s,
            "fusee_run_ends_total",
            &[("workflow", "doomed"), ("status", "failed")]
        ),
        1.0
    );
    let attempts = |w, step, outcome| {
        value(
            &s,
            "fusee_step_attempts_total",
            &[("workflow", w), ("step", step), ("outcome", outcome)],
        )
    };
    assert_eq!(attempts("order", "charge", "ok"), 3.0);
    assert_eq!(attempts("order", "flaky", "retried"), 3.0);
    assert_eq!(attempts("order", "flaky", "ok"), 3.0);
    assert_eq!(attempts("order", "charge", "retried"), 0.0);
    assert_eq!(attempts("doomed", "boom", "failed"), 1.0);
    assert_eq!(value(&s, "fusee_timer_lateness_seconds_count", &order), 3.0);
    assert_eq!(value(&s, "fusee_run_duration_seconds_count", &order), 3.0);
    // Every run took at least its 5 ms sleep, by the times its records carry.
    assert!(value(&s, "fusee_run_duration_seconds_sum", &order) >= 0.015);
    assert_eq!(
        value(
            &s,
            "fusee_run_duration_seconds_bucket",
            &[("workflow", "order"), ("le", "+Inf")]
        ),
        3.0
    );

    // The shard figures agree with `metrics()` and with each other.
    let m = engine.metrics().await;
    let flushes = total(&s, "fusee_flushes_total");
    assert!(flushes > 0.0);
    assert!(flushes <= m.flushes as f64);
    assert_eq!(total(&s, "fusee_flush_duration_seconds_count"), flushes);
    assert_eq!(total(&s, "fusee_flush_records_count"), flushes);
    assert_eq!(
        total(&s, "fusee_flush_records_sum"),
        total(&s, "fusee_flushed_records_total")
    );
    assert_eq!(total(&s, "fusee_shard_runs_started_total"), 4.0);
    // Every run ended, so every attempt's end is durable and counted by both.
    assert_eq!(
        total(&s, "fusee_shard_step_attempts_total"),
        total(&s, "fusee_step_attempts_total")
    );
    assert!(total(&s, "fusee_shard_step_attempts_total") > 0.0);
    assert_eq!(total(&s, "fusee_shard_owned"), 4.0);
    assert_eq!(total(&s, "fusee_shard_opens_total"), 4.0);
    assert_eq!(
        s.keys()
            .filter(|(n, _)| n == "fusee_shard_open_duration_seconds")
            .count(),
        4
    );
    // Bounded labels: no run ID or workflow ID anywhere.
    for (name, labels) in s.keys() {
        for v in labels.values() {
            assert!(
                !v.starts_with("order-") && !v.starts_with("doomed-"),
                "{name} carries a workflow ID: {labels:?}"
            );
        }
        assert!(!labels.contains_key("run") && !labels.contains_key("id"));
    }
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_counts_nothing_again() {
    let dir = temp_dir("restart");
    let config = || Config::file(&dir).shards(1);
    let register_resume = |engine: &Engine| {
        engine.register(RESUME, |ctx: Ctx, ()| async move {
            ctx.step("before", |_| async { Ok(1u32) }).await?;
            let n = ctx.wait_for(&GO).await?.unwrap_or(0);
            ctx.step("after", move |_| async move { Ok(n) }).await?;
            Ok::<_, Failure>(n)
        })
    };
    let engine = Engine::open(config()).await.unwrap();
    register_resume(&engine);
    engine.start(RESUME, "resume-1", &()).await.unwrap();
    let before = [
        ("workflow", "resume"),
        ("step", "before"),
        ("outcome", "ok"),
    ];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = parse(&fusee::telemetry::render(&engine).await);
        if value(&s, "fusee_step_attempts_total", &before) == 1.0 {
            assert_eq!(
                value(&s, "fusee_run_starts_total", &[("workflow", "resume")]),
                1.0
            );
            break;
        }
        assert!(Instant::now() < deadline, "step `before` never counted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A crash: the run's records so far are replayed at the next open.
    drop(engine);

    let engine = Engine::open(config()).await.unwrap();
    register_resume(&engine);
    engine.signal("resume-1", GO, &7).await.unwrap();
    let result = engine.result(RESUME, "resume-1").await.unwrap();
    assert_eq!(result, 7);
    let s = parse(&fusee::telemetry::render(&engine).await);
    assert!(value(&s, "fusee_recovered_records", &[("shard", "0")]) >= 2.0);
    // What the first process counted is not counted again...
    assert_eq!(
        value(&s, "fusee_run_starts_total", &[("workflow", "resume")]),
        0.0
    );
    assert_eq!(value(&s, "fusee_step_attempts_total", &before), 0.0);
    // ...and what this one recorded is.
    assert_eq!(
        value(
            &s,
            "fusee_step_attempts_total",
            &[("workflow", "resume"), ("step", "after"), ("outcome", "ok")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &s,
            "fusee_run_ends_total",
            &[("workflow", "resume"), ("status", "ok")]
        ),
        1.0
    );
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_metrics_off_only_the_shard_figures_are_rendered() {
    let engine = Engine::open(Config::memory().metrics(false)).await.unwrap();
    register(&engine);
    workload(&engine).await;
    let s = parse(&fusee::telemetry::render(&engine).await);
    assert_eq!(total(&s, "fusee_run_starts_total"), 0.0);
    assert_eq!(total(&s, "fusee_step_attempts_total"), 0.0);
    assert_eq!(total(&s, "fusee_flush_duration_seconds_count"), 0.0);
    assert!(total(&s, "fusee_flushes_total") > 0.0);
    assert_eq!(total(&s, "fusee_shard_runs_started_total"), 4.0);
    engine.close().await.unwrap();
}

/// Serves `engine`'s exposition at any path on a loopback port until
/// dropped: a bare HTTP/1.1 responder, one connection at a time.
struct Exporter {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Exporter {
    fn start(engine: Engine) -> Exporter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let runtime = tokio::runtime::Handle::current();
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let _ = conn.set_nonblocking(false);
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                if read_head(&mut conn).is_none() {
                    continue;
                }
                let body = runtime.block_on(fusee::telemetry::render(&engine));
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    fusee::telemetry::CONTENT_TYPE,
                    body.len()
                );
            }
        });
        Exporter {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads an HTTP request's head (through the blank line).
fn read_head(conn: &mut TcpStream) -> Option<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).ok()? == 0 || head.len() > 64 << 10 {
            return None;
        }
        head.push(byte[0]);
    }
    Some(())
}

/// A `prometheus` server that is killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GETs `path` from 127.0.0.1:`port`: the body, if the answer is 200.
fn get(port: u16, path: &str) -> Option<String> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// `s` percent-encoded for a query string.
fn encode_query(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The value of PromQL `query` as the server answers it now, if it has
/// one sample.
fn query(prometheus: &Prometheus, q: &str) -> Option<f64> {
    let body = get(
        prometheus.port,
        &format!("/api/v1/query?query={}", encode_query(q)),
    )?;
    let json: serde_json::Value = serde_json::from_str(&body).ok()?;
    let result = json["data"]["result"].as_array()?;
    match result.as_slice() {
        [one] => one["value"][1].as_str()?.parse().ok(),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_engine() {
    const BIN: &str = "/usr/bin/prometheus";
    assert!(
        std::path::Path::new(BIN).exists(),
        "{BIN} is missing: install Debian's `prometheus` package (scripts/prereqs.sh does)"
    );
    let engine = Engine::open(Config::memory()).await.unwrap();
    register(&engine);
    workload(&engine).await;
    let exporter = Exporter::start(engine.clone());

    let dir = temp_dir("prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: fusee\n    scrape_interval: 1s\n    \
             static_configs:\n      - targets: ['127.0.0.1:{}']\n",
            exporter.port
        ),
    )
    .unwrap();
    let port = free_port();
    let child = Command::new(BIN)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus starts");
    let prometheus = Prometheus { child, port };

    // Prometheus starts, scrapes within a second or two, and answers.
    let q =
        r#"fusee_step_attempts_total{job="fusee",workflow="order",step="flaky",outcome="retried"}"#;
    let deadline = Instant::now() + Duration::from_secs(60);
    let got = loop {
        if let Some(v) = query(&prometheus, q) {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus never scraped the engine in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(got, 3.0);
    assert_eq!(query(&prometheus, r#"up{job="fusee"}"#), Some(1.0));
    assert_eq!(
        query(
            &prometheus,
            r#"fusee_run_ends_total{workflow="doomed",status="failed"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        query(&prometheus, r#"sum(fusee_shard_runs_started_total)"#),
        Some(4.0)
    );
    assert_eq!(
        query(
            &prometheus,
            r#"fusee_run_duration_seconds_count{workflow="order"}"#
        ),
        Some(3.0)
    );
    drop(prometheus);
    drop(exporter);
    engine.close().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Schedule fires, queue starts and durable sleeps are counted by the name
/// of the schedule or queue, on the test kit's virtual clock.
#[cfg(feature = "testing")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_fires_queue_starts_and_timers_are_counted() {
    use fusee::testing::TestEngine;
    const REPORT: Workflow<String, ()> = Workflow::new("report");
    const SEND: Workflow<String, ()> = Workflow::new("send-email");
    let kit = TestEngine::open(|engine: &Engine| {
        engine.register(REPORT, |_: Ctx, _team: String| async {
            Ok::<_, Failure>(())
        });
        engine.register(SEND, |_: Ctx, _to: String| async { Ok::<_, Failure>(()) });
        engine.register_flow_control();
    })
    .await
    .unwrap();
    let engine = kit.engine();
    engine
        .schedule(
            "sales-daily",
            "0 9 * * MON-FRI",
            REPORT,
            &"sales".to_string(),
        )
        .create()
        .await
        .unwrap();
    kit.advance(Duration::from_secs(7 * 86_400)).await.unwrap();
    assert_eq!(
        engine
            .schedules()
            .describe("sales-daily")
            .await
            .unwrap()
            .fired,
        5
    );
    let emails = engine.queue("emails", SEND).create().await.unwrap();
    for to in ["ada", "bob", "eve"] {
        emails.enqueue(&to.to_string(), to).await.unwrap();
        kit.result(SEND, &format!("emails/{to}")).await.unwrap();
    }
    let s = parse(&fusee::telemetry::render(engine).await);
    assert_eq!(
        value(
            &s,
            "fusee_schedule_fires_total",
            &[("schedule", "sales-daily"), ("workflow", "report")]
        ),
        5.0
    );
    assert_eq!(
        value(
            &s,
            "fusee_queue_starts_total",
            &[("queue", "emails"), ("workflow", "send-email")]
        ),
        3.0
    );
    assert_eq!(
        value(
            &s,
            "fusee_run_ends_total",
            &[("workflow", "report"), ("status", "ok")]
        ),
        5.0
    );
    // The schedule sleeps between fires; the virtual clock fires each
    // sleep when it is due.
    let sleeps = value(
        &s,
        "fusee_timer_lateness_seconds_count",
        &[("workflow", "fusee.schedule")],
    );
    assert!(sleeps >= 5.0, "{sleeps} sleeps counted");
    assert_eq!(
        value(
            &s,
            "fusee_timer_lateness_seconds_bucket",
            &[("workflow", "fusee.schedule"), ("le", "0.001")]
        ),
        sleeps
    );
    kit.close().await.unwrap();
}
