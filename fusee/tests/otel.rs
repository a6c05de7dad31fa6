//! Traces made from durable records, exported for real: the engine's
//! spans go through `opentelemetry-otlp`'s OTLP/HTTP exporter (protobuf,
//! no TLS) to a receiver in this test on 127.0.0.1, which decodes each
//! request with `opentelemetry-proto` as a collector would.
//!
//! Checks: the traceparent given at start is the root and the steps see
//! their attempt's context; a failed attempt's span carries the recorded
//! message; children on other shards are children of their parent's
//! child span; a run crashed at every record boundary (the test kit's
//! `crash_everywhere`) gets exactly one span per attempt, sleep and run
//! across the crash, the restarted engine emits nothing for the records it
//! replays, and both processes give each span the same ID.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::testing::TestEngine;
use fusee::{
    Config, Ctx, Engine, Failure, RetryPolicy, StartOptions, StepError, TraceParent, Workflow,
};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_sdk::trace::SdkTracerProvider;
use prost::Message as _;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// What the receiver decoded, in arrival order.
type Received = Arc<Mutex<Vec<Span>>>;

/// An OTLP/HTTP receiver on 127.0.0.1: `POST /v1/traces` with a protobuf
/// `ExportTraceServiceRequest`, answered 200 with an empty (valid)
/// `ExportTraceServiceResponse`. Returns its endpoint.
async fn receiver(received: Received) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let received = Arc::clone(&received);
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                // Requests on a kept-alive connection, one after another.
                loop {
                    let mut line = String::new();
                    if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    assert!(
                        line.starts_with("POST /v1/traces "),
                        "request line {line:?}"
                    );
                    let mut len = 0usize;
                    let mut content_type = String::new();
                    loop {
                        let mut h = String::new();
                        stream.read_line(&mut h).await.expect("header");
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        let (k, v) = h.split_once(':').expect("header line");
                        match k.to_ascii_lowercase().as_str() {
                            "content-length" => len = v.trim().parse().expect("length"),
                            "content-type" => content_type = v.trim().to_string(),
                            _ => {}
                        }
                    }
                    assert_eq!(content_type, "application/x-protobuf");
                    let mut body = vec![0; len];
                    stream.read_exact(&mut body).await.expect("body");
                    let req = ExportTraceServiceRequest::decode(body.as_slice()).expect("protobuf");
                    {
                        let mut r = received.lock().unwrap();
                        for rs in req.resource_spans {
                            for ss in rs.scope_spans {
                                assert_eq!(
                                    ss.scope.as_ref().map(|s| s.name.as_str()),
                                    Some("fusee")
                                );
                                r.extend(ss.spans);
                            }
                        }
                    }
                    let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if stream.get_mut().write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}/v1/traces")
}

/// A tracer provider exporting to `endpoint` in batches (the exporter's
/// blocking client runs on the batch thread, not on a shard's).
fn provider(endpoint: &str) -> SdkTracerProvider {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(Duration::from_secs(10))
        .build()
        .expect("exporter");
    SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .build()
}

/// Exports every span ended so far and takes what the receiver has.
fn flush(provider: &SdkTracerProvider, received: &Received) -> Vec<Span> {
    tokio::task::block_in_place(|| provider.force_flush()).expect("flush");
    std::mem::take(&mut *received.lock().unwrap())
}

fn attr<'a>(s: &'a Span, key: &str) -> Option<&'a Value> {
    s.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn int(s: &Span, key: &str) -> i64 {
    match attr(s, key) {
        Some(Value::IntValue(i)) => *i,
        other => panic!("span {} attribute {key}: {other:?}", s.name),
    }
}

fn text(s: &Span, key: &str) -> String {
    match attr(s, key) {
        Some(Value::StringValue(v)) => v.clone(),
        other => panic!("span {} attribute {key}: {other:?}", s.name),
    }
}

/// What tells a span apart within one run: its name and, for an attempt,
/// the step's operation and attempt number.
fn key(s: &Span) -> (String, i64, i64) {
    if s.name.starts_with("step ") {
        (
            s.name.clone(),
            int(s, "fusee.step.seq"),
            int(s, "fusee.step.attempt"),
        )
    } else {
        (s.name.clone(), 0, 0)
    }
}

const ORDER: Workflow<u64, u64> = Workflow::new("order");
const PARENT: Workflow<u32, u32> = Workflow::new("parent");
const KID: Workflow<u32, u32> = Workflow::new("kid");

/// What each attempt of the order's first step saw: its number and context.
type Seen = Arc<Mutex<Vec<(u32, Option<TraceParent>)>>>;

/// Two steps, the first failing its first attempt, and a sleep between.
/// Each step's context is kept by its attempt.
fn register_order(engine: &Engine, seen: &Seen) {
    let seen = Arc::clone(seen);
    engine.register(ORDER, move |ctx: Ctx, n: u64| {
        let seen = Arc::clone(&seen);
        async move {
            let charged = ctx
                .step("charge", move |sc| {
                    let seen = Arc::clone(&seen);
                    async move {
                        seen.lock().unwrap().push((sc.attempt(), sc.traceparent()));
                        if sc.attempt() == 1 {
                            Err(StepError::retryable("card declined").kind("declined"))
                        } else {
                            Ok(n * 2)
                        }
                    }
                })
                .retry(RetryPolicy::default().backoff(
                    Duration::from_millis(50),
                    1.0,
                    Duration::from_millis(50),
                ))
                .await?;
            ctx.sleep("cool-off", Duration::from_secs(5)).await?;
            let shipped = ctx
                .step("ship", move |_| async move { Ok(charged + 1) })
                .await?;
            Ok::<_, Failure>(shipped)
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_traceparent_given_at_start_is_the_root_and_steps_continue_it() {
    let received = Received::default();
    let endpoint = receiver(Arc::clone(&received)).await;
    let provider = provider(&endpoint);
    let seen = Seen::default();
    let s = Arc::clone(&seen);
    let kit = TestEngine::builder()
        .config(Config::memory().shards(1).tracer(provider.clone()))
        .open(move |e: &Engine| register_order(e, &s))
        .await
        .expect("open");
    let given = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .expect("traceparent");
    kit.engine()
        .start_with_options(ORDER, "o-1", &20, StartOptions::new().trace(given))
        .await
        .expect("start");
    assert_eq!(kit.result(ORDER, "o-1").await.expect("result"), 41);
    let spans = flush(&provider, &received);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let by_name = |n: &str, attempt: i64| {
        spans
            .iter()
            .find(|s| s.name == n && (attempt == 0 || int(s, "fusee.step.attempt") == attempt))
            .unwrap_or_else(|| panic!("no span {n} {attempt} in {names:?}"))
    };
    assert_eq!(spans.len(), 5, "{names:?}");
    let run = by_name("run order", 0);
    assert_eq!(run.trace_id, given.trace_id());
    assert_eq!(
        run.parent_span_id,
        given.span_id(),
        "the caller's span is the run's parent"
    );
    assert_eq!(text(run, "fusee.workflow.id"), "o-1");
    assert_eq!(text(run, "fusee.run.status"), "ok");
    for s in &spans {
        assert_eq!(s.trace_id, given.trace_id(), "{}", s.name);
        assert!(s.start_time_unix_nano <= s.end_time_unix_nano, "{}", s.name);
        if s.name != "run order" {
            assert_eq!(s.parent_span_id, run.span_id, "{} under the run", s.name);
        }
    }
    let first = by_name("step charge", 1);
    let status = first.status.as_ref().expect("status");
    assert_eq!(status.code, 2, "error");
    assert_eq!(status.message, "card declined");
    assert_eq!(text(first, "error.type"), "declined");
    assert_eq!(text(first, "fusee.step.outcome"), "retried");
    let second = by_name("step charge", 2);
    // From its Began, recorded once its retry time came.
    assert_eq!(text(second, "fusee.span.begin"), "recorded");
    assert!(second.start_time_unix_nano >= first.end_time_unix_nano + 50_000_000);
    assert_eq!(second.status.as_ref().map_or(0, |s| s.code), 0, "unset");
    let sleep = by_name("sleep cool-off", 0);
    assert!(sleep.end_time_unix_nano - sleep.start_time_unix_nano >= 5_000_000_000);
    // Each attempt saw its own span as the parent of what it calls.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for (attempt, tp) in seen {
        let tp = tp.expect("a step sees its trace context");
        assert_eq!(tp.trace_id(), given.trace_id());
        assert_eq!(
            tp.span_id().to_vec(),
            by_name("step charge", i64::from(attempt)).span_id
        );
    }
    kit.close().await.expect("close");
    tokio::task::block_in_place(|| provider.shutdown()).expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_on_other_shards_are_children_of_their_parents_child_span() {
    let received = Received::default();
    let endpoint = receiver(Arc::clone(&received)).await;
    let provider = provider(&endpoint);
    let kit = TestEngine::builder()
        .config(Config::memory().shards(4).tracer(provider.clone()))
        .open(|e: &Engine| {
            e.register(
                KID,
                |_ctx: Ctx, n: u32| async move { Ok::<_, Failure>(n + 1) },
            );
            e.register(PARENT, |ctx: Ctx, n: u32| async move {
                let mut sum = 0;
                for i in 0..n {
                    sum += ctx.child(KID, &format!("kid-{i}"), &i).await?;
                }
                Ok::<_, Failure>(sum)
            });
        })
        .await
        .expect("open");
    kit.engine().start(PARENT, "p-1", &8).await.expect("start");
    assert_eq!(kit.result(PARENT, "p-1").await.expect("result"), 36);
    let spans = flush(&provider, &received);
    let parent = spans
        .iter()
        .find(|s| s.name == "run parent")
        .expect("parent run span");
    assert!(
        parent.parent_span_id.is_empty(),
        "a run started without a context is a root"
    );
    let child_spans: BTreeMap<String, &Span> = spans
        .iter()
        .filter(|s| s.name == "child kid")
        .map(|s| (text(s, "fusee.child.id"), s))
        .collect();
    let kid_runs: Vec<&Span> = spans.iter().filter(|s| s.name == "run kid").collect();
    assert_eq!(child_spans.len(), 8);
    assert_eq!(kid_runs.len(), 8);
    let parent_shard = int(parent, "fusee.shard");
    let mut elsewhere = 0;
    for run in kid_runs {
        let id = text(run, "fusee.workflow.id");
        let child = child_spans[&id];
        assert_eq!(child.parent_span_id, parent.span_id);
        assert_eq!(run.trace_id, parent.trace_id, "{id}: one trace");
        assert_eq!(
            run.parent_span_id, child.span_id,
            "{id}: under its child span"
        );
        elsewhere += usize::from(int(run, "fusee.shard") != parent_shard);
    }
    assert!(elsewhere >= 3, "children on other shards: {elsewhere} of 8");
    kit.close().await.expect("close");
    tokio::task::block_in_place(|| provider.shutdown()).expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_every_record_boundary_leaves_one_span_per_attempt() {
    let received = Received::default();
    let endpoint = receiver(Arc::clone(&received)).await;
    let provider = provider(&endpoint);
    let seen = Seen::default();
    let s = Arc::clone(&seen);
    let kit = TestEngine::builder()
        .config(Config::memory().tracer(provider.clone()))
        .open(move |e: &Engine| register_order(e, &s))
        .await
        .expect("open");
    // The uncrashed run's spans by key, with their ending record's LSN.
    let mut uncrashed: BTreeMap<(String, i64, i64), (i64, Vec<u8>)> = BTreeMap::new();
    let report = kit
        .crash_everywhere(ORDER, &20, |point| {
            assert_eq!(point.outcome.as_ref().ok(), Some(&41));
            let spans = flush(&provider, &received);
            let Some(n) = point.crashed_after else {
                for s in &spans {
                    let old = uncrashed.insert(key(s), (int(s, "fusee.lsn"), s.span_id.clone()));
                    assert!(old.is_none(), "uncrashed: two spans {:?}", key(s));
                }
                let names: Vec<_> = uncrashed.keys().collect();
                assert_eq!(uncrashed.len(), 5, "{names:?}");
                return;
            };
            let n = n as i64;
            // An attempt the crash cut (its Began kept, its end not) gets
            // one span saying so, from its Began's time, once the attempt
            // run again begins; the uncrashed run has no such span.
            let mut unended: BTreeMap<u32, (u32, u64)> = BTreeMap::new();
            for r in point.kept {
                match r {
                    fusee::core::record::Record::Began {
                        seq,
                        attempt,
                        started_ms,
                        ..
                    } => {
                        unended.insert(*seq, (*attempt, *started_ms));
                    }
                    fusee::core::record::Record::Step { seq, .. }
                    | fusee::core::record::Record::Attempt { seq, .. } => {
                        unended.remove(seq);
                    }
                    _ => {}
                }
            }
            let (cut, spans): (Vec<&Span>, Vec<&Span>) = spans.iter().partition(|s| {
                s.name.starts_with("step ") && text(s, "fusee.step.outcome") == "cut"
            });
            assert_eq!(
                cut.len(),
                unended.len(),
                "crash after {n}: one span per cut attempt"
            );
            let cut: BTreeMap<u32, (u32, u64)> = cut
                .iter()
                .map(|s| {
                    assert_eq!(
                        s.status.as_ref().map(|st| st.code),
                        Some(2),
                        "an error status"
                    );
                    let seq = u32::try_from(int(s, "fusee.step.seq")).unwrap();
                    let attempt = u32::try_from(int(s, "fusee.step.attempt")).unwrap();
                    (seq, (attempt, s.start_time_unix_nano / 1_000_000))
                })
                .collect();
            assert_eq!(cut, unended, "crash after {n}: cut attempts");
            let mut after = BTreeMap::new();
            for s in spans {
                let lsn = int(s, "fusee.lsn");
                assert!(
                    lsn > n,
                    "crash after {n}: {} emitted again for replayed record {lsn}",
                    s.name
                );
                assert!(
                    after.insert(key(s), s.span_id.clone()).is_none(),
                    "crash after {n}: two spans {:?}",
                    key(s)
                );
            }
            // Before the crash the process emitted the spans whose ending
            // record the crash kept; after it, exactly the others.
            for (k, (lsn, id)) in &uncrashed {
                match after.remove(k) {
                    Some(again) => {
                        assert!(*lsn > n, "crash after {n}: {k:?} emitted on both sides");
                        assert_eq!(&again, id, "crash after {n}: {k:?} has another ID");
                    }
                    None => assert!(*lsn <= n, "crash after {n}: no span {k:?}"),
                }
            }
            assert!(
                after.is_empty(),
                "crash after {n}: spans the uncrashed run has not: {after:?}"
            );
        })
        .await
        .expect("crash everywhere");
    assert!(report.records >= 7, "{report:?}");
    assert_eq!(report.crash_points, report.records + 1);
    tokio::task::block_in_place(|| provider.shutdown()).expect("shutdown");
}

/// A start given no traceparent takes the current `tracing` span's
/// context when the subscriber keeps OpenTelemetry contexts (the
/// `tracing-opentelemetry` layer): the run's trace is the span's, and its
/// step sees that trace. Outside the span, a start gets a trace of its own.
#[tokio::test(flavor = "current_thread")]
async fn a_start_in_a_traced_tracing_span_joins_its_trace() {
    use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
    use tracing::Instrument as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    const TRACED: Workflow<(), Option<String>> = Workflow::new("traced");
    let tracer = SdkTracerProvider::builder().build().tracer("the embedder");
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
    // This thread's default: the current-thread runtime polls here.
    let _default = tracing::subscriber::set_default(subscriber);
    let kit = TestEngine::builder()
        .config(Config::memory().shards(1))
        .open(|e: &Engine| {
            e.register(TRACED, |ctx: Ctx, ()| async move {
                Ok::<_, Failure>(
                    ctx.step("see", |step| async move {
                        Ok::<_, StepError>(step.traceparent().map(|t| t.to_string()))
                    })
                    .await?,
                )
            });
        })
        .await
        .expect("open");

    let request = tracing::info_span!("request");
    let trace_id = request.context().span().span_context().trace_id();
    assert_ne!(
        trace_id,
        opentelemetry::trace::TraceId::INVALID,
        "the layer keeps contexts"
    );
    kit.engine()
        .start(TRACED, "in-span", &())
        .instrument(request)
        .await
        .expect("start");
    let seen = kit.result(TRACED, "in-span").await.expect("result");
    let seen = seen.expect("a step sees its trace context");
    assert_eq!(
        seen.split('-').nth(1),
        Some(trace_id.to_string().as_str()),
        "the run joined the span's trace: {seen}"
    );

    kit.engine()
        .start(TRACED, "outside", &())
        .await
        .expect("start");
    let own = kit.result(TRACED, "outside").await.expect("result");
    let own = own.expect("a step sees its trace context");
    assert_ne!(
        own.split('-').nth(1),
        Some(trace_id.to_string().as_str()),
        "{own}"
    );
}
