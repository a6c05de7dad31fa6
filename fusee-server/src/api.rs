//! The HTTP/JSON API, `/api/v1/...`, and `/healthz`, `/readyz`: one
//! handler per route, each documented for the OpenAPI document with
//! `utoipa::path` and registered with `utoipa_axum::routes!` (so a route
//! and its document entry are made in one place: [`router`]).

use std::str::FromStr;
use std::time::{Duration, UNIX_EPOCH};

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use fusee::{Cursor, IdPolicy, ListFilter, RunStatus, StartOptions, StatusFilter, TraceParent};
use serde::de::DeserializeOwned;
use serde_json::Value;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::error::ApiError;
use crate::model::*;

/// A handler's result.
type Reply<T> = Result<Json<T>, ApiError>;

/// How long `execute` and `result` wait by default.
const WAIT_DEFAULT_MS: u64 = 30_000;
/// Engine pages one listing with filters the engine does not apply (ID
/// prefix, times) reads before it returns what it found with a cursor
/// (a filter that matches little must not hold a request for long).
const FILTER_ROUNDS_MAX: usize = 20;

/// The API's routes with their document.
pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(openapi_json))
        .routes(routes!(metrics))
        .routes(routes!(list_runs, start_run))
        .routes(routes!(execute))
        .routes(routes!(bulk))
        .routes(routes!(describe))
        .routes(routes!(journal))
        .routes(routes!(chain))
        .routes(routes!(stream))
        .routes(routes!(result))
        .routes(routes!(signal))
        .routes(routes!(update))
        .routes(routes!(query))
        .routes(routes!(cancel))
        .routes(routes!(terminate))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(reset))
        .routes(routes!(workflows))
        .routes(routes!(shards))
        .routes(routes!(backup))
        .routes(routes!(list_schedules))
        .routes(routes!(describe_schedule, delete_schedule))
        .routes(routes!(pause_schedule))
        .routes(routes!(resume_schedule))
        .routes(routes!(trigger_schedule))
        .routes(routes!(list_queues))
        .routes(routes!(describe_queue, delete_queue))
        .routes(routes!(pause_queue))
        .routes(routes!(resume_queue))
        .routes(routes!(list_limits))
        .routes(routes!(describe_limit, delete_limit))
        .routes(routes!(pause_limit))
        .routes(routes!(resume_limit))
}

/// A JSON request body: bad JSON is `bad_request`, a body over the limit
/// `payload_too_large`, both as JSON error replies; an empty body is the
/// type's default when `T` has one ([`OptBody`]).
pub(crate) struct Body<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req, state).await?;
        parse(&bytes).map(Body)
    }
}

/// A JSON request body that may be left out (its type's default).
pub(crate) struct OptBody<T>(pub(crate) T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for OptBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptBody(T::default()));
        }
        parse(&bytes).map(OptBody)
    }
}

async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<axum::body::Bytes, ApiError> {
    axum::body::Bytes::from_request(req, state)
        .await
        .map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    "the request body exceeds the server's limit (the engine's payload limit plus 64 KiB)",
                )
            } else {
                ApiError::bad_request(format!("the request body could not be read: {e}"))
            }
        })
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "the request body is not the JSON this route takes: {e}"
        ))
    })
}

/// Query parameters, a bad one being a JSON `bad_request`.
pub(crate) struct Params<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| Params(q))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

/// Path parameters (a workflow ID, a stream's or a queue's name), a bad
/// one (not UTF-8 once percent-decoded) being a JSON `bad_request` like a
/// bad query parameter: every route with path parameters takes them
/// through this, the console's too.
pub(crate) struct PathParams<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(p)| PathParams(p))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

/// A status's name, as the journal format and `fusee runs` name it.
fn status_name(s: fusee::core::record::Status) -> &'static str {
    fusee::inspect::status_name(s)
}

/// A description's status as the API names it.
pub(crate) fn status_of(d: &fusee::Description) -> String {
    run_status(d.status)
}

fn run_status(s: RunStatus) -> String {
    match s {
        RunStatus::Running => "running".into(),
        RunStatus::WaitingForCode => "waiting-for-code".into(),
        RunStatus::Stopped => "stopped".into(),
        RunStatus::Finished(s) => status_name(s).into(),
        // A status added to the engine later.
        #[allow(unreachable_patterns)]
        _ => "unknown".into(),
    }
}

fn policy(p: Option<&str>) -> Result<IdPolicy, ApiError> {
    match p {
        None | Some("new-only") => Ok(IdPolicy::NewOnly),
        Some("attach") => Ok(IdPolicy::Attach),
        Some("reuse-after-finish") => Ok(IdPolicy::ReuseAfterFinish),
        Some(other) => Err(ApiError::bad_request(format!(
            "policy {other:?} is not one of new-only, attach, reuse-after-finish"
        ))),
    }
}

fn status_filter(s: &str) -> Result<StatusFilter, ApiError> {
    match s {
        "running" => Ok(StatusFilter::Running),
        "finished" => Ok(StatusFilter::Finished),
        other => fusee::inspect::status_of(other)
            .map(StatusFilter::Ended)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "status {other:?} is not one of running, finished, ok, failed, cancelled, timed-out, terminated, continued-as-new, reset"
                ))
            }),
    }
}

fn summary(r: &fusee::RunSummary) -> RunSummary {
    RunSummary {
        id: r.id.clone(),
        workflow: r.workflow.clone(),
        version: r.version,
        shard: r.shard,
        run: r.run,
        started_ms: r.started_ms,
        status: r.finished.map_or("running", status_name).to_string(),
        finished_ms: r.finished_ms,
        parked: r.parked,
        held: r.held.clone(),
    }
}

fn start_reply(r: &fusee::RunRef) -> StartReply {
    StartReply {
        id: r.id.clone(),
        shard: r.shard,
        run: r.run,
        attached: r.attached,
    }
}

/// A page of runs passing `q`: the engine filters by status and type; an
/// ID prefix and start and finish times are applied here, over as many engine pages
/// as it takes to fill the page (at most [`FILTER_ROUNDS_MAX`]). A round
/// whose matches would overfill the page is asked again for only the runs
/// the page lacks, so the cursor returned always falls right after the
/// last run listed.
pub(crate) async fn runs_page(engine: &fusee::Engine, q: &RunsQuery) -> Result<RunsPage, ApiError> {
    let limit = q
        .limit
        .unwrap_or(ListFilter::LIMIT_DEFAULT)
        .clamp(1, ListFilter::LIMIT_MAX);
    let mut filter = ListFilter::new();
    if let Some(s) = q.status.as_deref().filter(|s| !s.is_empty()) {
        filter = filter.status(status_filter(s)?);
    }
    if let Some(w) = q.workflow.as_deref().filter(|w| !w.is_empty()) {
        filter = filter.workflow(w);
    }
    if let Some(c) = q.cursor.as_deref().filter(|c| !c.is_empty()) {
        filter = filter.after(Cursor::from_str(c)?);
    }
    for cond in q
        .attr
        .iter()
        .flat_map(|a| a.split(';'))
        .filter(|c| !c.trim().is_empty())
    {
        filter = filter.condition(fusee::AttrCondition::parse(cond.trim())?);
    }
    let prefix = q.id_prefix.as_deref().filter(|p| !p.is_empty());
    let passes = |r: &fusee::RunSummary| {
        prefix.is_none_or(|p| r.id.starts_with(p))
            && q.started_after_ms.is_none_or(|t| r.started_ms >= t)
            && q.started_before_ms.is_none_or(|t| r.started_ms < t)
            && q.finished_after_ms
                .is_none_or(|t| r.finished_ms.is_some_and(|f| f >= t))
            && q.finished_before_ms
                .is_none_or(|t| r.finished_ms.is_some_and(|f| f < t))
    };
    let mut runs = Vec::new();
    let mut next = None;
    // Runs asked of the engine per round: the runs the page lacks, grown
    // while rounds match nothing, so a rare match costs few rounds.
    let mut ask = limit;
    for _ in 0..FILTER_ROUNDS_MAX {
        let lacking = limit - runs.len();
        let size = ask.max(lacking).min(ListFilter::LIMIT_MAX);
        let mut page = engine.list(filter.clone().limit(size)).await?;
        let mut matched: Vec<RunSummary> = page
            .runs
            .iter()
            .filter(|r| passes(r))
            .map(summary)
            .collect();
        if matched.len() > lacking {
            // More than the page holds: the cursor must fall after the
            // last run taken, so ask again for exactly what it lacks.
            page = engine.list(filter.clone().limit(lacking)).await?;
            matched = page
                .runs
                .iter()
                .filter(|r| passes(r))
                .map(summary)
                .collect();
            ask = lacking;
        } else if matched.is_empty() {
            ask = size.saturating_mul(4);
        }
        runs.extend(matched);
        next = page.next;
        match &next {
            Some(c) if runs.len() < limit => filter = filter.after(c.clone()),
            _ => break,
        }
    }
    Ok(RunsPage {
        runs,
        next: next.map(|c| c.to_string()),
    })
}

fn description(d: fusee::Description) -> Description {
    Description {
        id: d.id,
        workflow: d.workflow,
        version: d.version,
        shard: d.shard,
        run: d.run,
        status: run_status(d.status),
        started_ms: d.started_ms,
        finished_ms: d.finished_ms,
        step: d.step.map(|s| CurrentStep {
            name: s.name,
            attempt: s.attempt,
            running: s.running,
            paused: s.paused,
        }),
        stopped_because: d.stopped_because,
        parked: d.parked,
        paused: d.paused,
        held: d.held,
        journal_bytes: d.journal_bytes,
        journal_records: d.journal_records,
        children: d
            .children
            .into_iter()
            .map(|c| PendingChild {
                id: c.id,
                workflow: c.workflow,
            })
            .collect(),
        attributes: d
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), v.to_json()))
            .collect(),
        in_flight: d
            .in_flight
            .into_iter()
            .map(|s| InFlightStep {
                seq: s.seq,
                name: s.name,
                attempt: s.attempt,
                started_ms: s.started_ms,
            })
            .collect(),
        waits: d
            .waits
            .into_iter()
            .map(|w| match w {
                fusee::PendingWait::Timer { name, fire_at_ms } => PendingWait {
                    kind: "timer".into(),
                    name,
                    at_ms: Some(fire_at_ms),
                },
                fusee::PendingWait::Signal { name, deadline_ms } => PendingWait {
                    kind: "signal".into(),
                    name,
                    at_ms: deadline_ms,
                },
            })
            .collect(),
    }
}

fn ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Waits at most `timeout_ms` for `id`'s result.
async fn wait_result(engine: &fusee::Engine, id: &str, timeout_ms: u64) -> Result<Value, ApiError> {
    match tokio::time::timeout(Duration::from_millis(timeout_ms), engine.result_json(id)).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout",
            format!("workflow {id:?} did not finish within {timeout_ms} ms; it goes on"),
        )),
    }
}

/// The engine's figures in the Prometheus text exposition format, as
/// [`fusee::telemetry::render`] makes them (read token).
#[utoipa::path(get, path = "/metrics", tag = "health", responses(
    (status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String)))]
async fn metrics(State(app): State<App>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let text = fusee::telemetry::render(&app.engine).await;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            fusee::telemetry::CONTENT_TYPE,
        )],
        text,
    )
        .into_response()
}

/// The server answers.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The server answers", body = Value)))]
async fn healthz() -> Json<Value> {
    Json(serde_json::json!({"status": "ok"}))
}

/// Every shard the engine owns is open (and the engine is not closed).
#[utoipa::path(get, path = "/readyz", tag = "health", responses(
    (status = 200, description = "Ready", body = Value),
    (status = 503, description = "Not ready", body = ErrorBody)))]
async fn readyz(State(app): State<App>) -> Reply<Value> {
    let owned = app.engine.owned_shards();
    let open: Vec<u32> = app
        .engine
        .shard_metrics()
        .await
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    if owned.is_empty() || owned.iter().any(|s| !open.contains(s)) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            format!("shards owned: {owned:?}; answering: {open:?}"),
        ));
    }
    Ok(Json(
        serde_json::json!({"status": "ready", "shards": owned}),
    ))
}

/// This document.
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "meta",
    responses((status = 200, description = "The OpenAPI 3 document", body = Value)))]
async fn openapi_json(State(app): State<App>) -> Json<Value> {
    Json((*app.openapi).clone())
}

/// A page of runs, newest start first.
#[utoipa::path(get, path = "/api/v1/runs", tag = "runs", params(RunsQuery), responses(
    (status = 200, body = RunsPage),
    (status = 400, description = "A bad filter or cursor", body = ErrorBody),
    (status = 401, body = ErrorBody)))]
async fn list_runs(State(app): State<App>, Params(q): Params<RunsQuery>) -> Reply<RunsPage> {
    Ok(Json(runs_page(&app.engine, &q).await?))
}

/// Starts a run; answers once the start is durable. A W3C `traceparent`
/// header is recorded in the run's start: the run's span is its child.
#[utoipa::path(post, path = "/api/v1/runs", tag = "runs", request_body = StartRequest,
    params(("traceparent" = Option<String>, Header, description = "W3C trace context the run continues")),
    responses(
    (status = 200, body = StartReply),
    (status = 400, description = "Unknown workflow type or version, bad policy, traceparent or JSON", body = ErrorBody),
    (status = 409, description = "The ID exists", body = ErrorBody),
    (status = 413, body = ErrorBody)))]
async fn start_run(
    State(app): State<App>,
    headers: HeaderMap,
    Body(r): Body<StartRequest>,
) -> Reply<StartReply> {
    let options = start_options(&r, &headers)?;
    let run = app
        .engine
        .start_json_with(&r.workflow, &r.id, &r.input, options)
        .await?;
    Ok(Json(start_reply(&run)))
}

/// The start's options: its ID policy, the version asked for, and the
/// `traceparent` header's trace context, if any.
fn start_options(r: &StartRequest, headers: &HeaderMap) -> Result<StartOptions, ApiError> {
    let mut options = StartOptions::new().policy(policy(r.policy.as_deref())?);
    if let Some(v) = r.version {
        options = options.version(v);
    }
    if let Some(attrs) = &r.attributes {
        let mut set = fusee::SearchAttributes::new();
        for (name, v) in attrs {
            let value = fusee::AttrValue::from_json(v).ok_or_else(|| {
                ApiError::from(fusee::Error::InvalidAttribute(format!(
                    "attribute {name:?}: {v} is not a typed value ({{\"keyword\": ...}}, \
                     text, int, float, bool or time)"
                )))
            })?;
            set = set.set(name.clone(), value);
        }
        options = options.attributes(set);
    }
    let Some(v) = headers.get("traceparent") else {
        return Ok(options);
    };
    let tp = v
        .to_str()
        .ok()
        .and_then(|t| TraceParent::parse(t).ok())
        .ok_or_else(|| {
            ApiError::bad_request(
                "traceparent is not a W3C trace context (00-<32 hex>-<16 hex>-<2 hex>)",
            )
        })?;
    Ok(options.trace(tp))
}

/// Starts a run and waits for its result, at most `timeout_ms`. A W3C
/// `traceparent` header is recorded as for a start.
#[utoipa::path(post, path = "/api/v1/execute", tag = "runs", request_body = ExecuteRequest,
    params(("traceparent" = Option<String>, Header, description = "W3C trace context the run continues")),
    responses(
    (status = 200, body = ResultReply),
    (status = 422, description = "The run ended without a result", body = ErrorBody),
    (status = 504, description = "No result in time; the run goes on", body = ErrorBody)))]
async fn execute(
    State(app): State<App>,
    headers: HeaderMap,
    Body(r): Body<ExecuteRequest>,
) -> Reply<ResultReply> {
    let options = start_options(&r.start, &headers)?;
    let run = app
        .engine
        .start_json_with(&r.start.workflow, &r.start.id, &r.start.input, options)
        .await?;
    let result = wait_result(
        &app.engine,
        &r.start.id,
        r.timeout_ms.unwrap_or(WAIT_DEFAULT_MS),
    )
    .await?;
    Ok(Json(ResultReply {
        run: start_reply(&run),
        result,
    }))
}

/// Cancels or terminates every running run of a type, or counts them.
#[utoipa::path(post, path = "/api/v1/bulk", tag = "runs", request_body = BulkRequest, responses(
    (status = 200, body = BulkReply), (status = 400, body = ErrorBody)))]
async fn bulk(State(app): State<App>, Body(r): Body<BulkRequest>) -> Reply<BulkReply> {
    let mut filter = ListFilter::new().limit(ListFilter::LIMIT_MAX);
    if let Some(w) = r.workflow.as_deref() {
        filter = filter.workflow(w);
    }
    let reason = r.reason.as_deref().unwrap_or("operator");
    if !matches!(r.action.as_str(), "cancel" | "terminate") {
        return Err(ApiError::bad_request(format!(
            "action {:?} is not cancel or terminate",
            r.action
        )));
    }
    if r.grace_ms.is_some() && r.action != "cancel" {
        return Err(ApiError::bad_request(format!(
            "grace_ms is for action \"cancel\" only, not {:?}",
            r.action
        )));
    }
    let count = if r.dry_run {
        // The runs the action would ask, selected as the action selects.
        app.engine.count_running(filter).await?
    } else if r.action == "cancel" {
        match r.grace_ms {
            Some(ms) => {
                app.engine
                    .cancel_all_with_grace(filter, reason, Duration::from_millis(ms))
                    .await?
            }
            None => app.engine.cancel_all(filter, reason).await?,
        }
    } else {
        app.engine.terminate_all(filter, reason).await?
    };
    Ok(Json(BulkReply {
        count,
        dry_run: r.dry_run,
    }))
}

/// Where workflow `id`'s latest run stands.
#[utoipa::path(get, path = "/api/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "The workflow ID")), responses(
    (status = 200, body = Description), (status = 404, body = ErrorBody)))]
async fn describe(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
) -> Reply<Description> {
    Ok(Json(description(app.engine.describe(&id).await?)))
}

/// Query parameters of the journal route.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct JournalQuery {
    /// A run number of the ID (default: its latest run).
    run: Option<u64>,
}

/// A run's journal: the `fusee-journal` version 1 document (a step
/// attempt's `Began` has `started_ms`, its `Step` or `Attempt` has
/// `ended_ms` when the engine recorded one: its duration is the
/// difference).
#[utoipa::path(get, path = "/api/v1/runs/{id}/journal", tag = "runs",
    params(("id" = String, Path, description = "The workflow ID"), JournalQuery), responses(
    (status = 200, description = "A fusee-journal v1 document; a step attempt ran from its \
        Began's started_ms to its Step's or Attempt's ended_ms (absent in records written \
        before the engine kept it)", body = Value),
    (status = 404, body = ErrorBody)))]
async fn journal(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
    Params(q): Params<JournalQuery>,
) -> Reply<Value> {
    Ok(Json(app.engine.journal_json(&id, q.run).await?))
}

/// Query parameters of the stream route.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct StreamQuery {
    /// The first chunk's index (default 0). A `Last-Event-ID` header wins
    /// over it: an SSE client reconnecting resumes after that index.
    from: Option<u64>,
}

/// A run's stream as Server-Sent Events (`fusee::Engine::subscribe`):
/// one `chunk` event per durable chunk from `from` on (its `id` the
/// chunk's index, its data a `StreamChunkEvent`), then an `end` event
/// (`StreamEndEvent`) once the stream ended or the run finished. Bad input
/// is an HTTP error before any event (404 `not_found` or
/// `unknown_stream`, 400 `stream_cursor`, 400 `bad_request` for a `from`
/// or `Last-Event-ID` that is not a number); a `Last-Event-ID` header
/// wins over `from` (a reconnecting browser repeats its first URL); an error
/// after the events began is an `error` event (an `ErrorBody`), the last.
#[utoipa::path(get, path = "/api/v1/runs/{id}/streams/{name}", tag = "runs",
    params(("id" = String, Path, description = "The workflow ID"),
        ("name" = String, Path, description = "The stream's name"), StreamQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "The last chunk an SSE client got: \
            the events resume after it, whatever `from` says (not a number: 400 `bad_request`)")),
    responses(
    (status = 200, description = "text/event-stream: `chunk` events (data: StreamChunkEvent), \
        then `end` (data: StreamEndEvent) or `error` (data: ErrorBody)", content_type = "text/event-stream",
        body = StreamChunkEvent),
    (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn stream(
    State(app): State<App>,
    PathParams((id, name)): PathParams<(String, String)>,
    headers: HeaderMap,
    Params(q): Params<StreamQuery>,
) -> Result<
    axum::response::sse::Sse<
        impl futures_util::Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>>,
    >,
    ApiError,
> {
    use axum::response::sse::{KeepAlive, Sse};
    use futures_util::StreamExt;
    // A reconnecting EventSource repeats the URL it was opened with, so
    // its `Last-Event-ID` must win over that URL's `from`.
    let from = match last_event_id(&headers)? {
        Some(last) => last.saturating_add(1),
        None => q.from.unwrap_or(0),
    };
    let sub = app.engine.subscribe_checked(&id, &name, from).await?;
    // Each chunk an event; after the last, `end` (or `error`).
    let events = futures_util::stream::unfold(
        (sub, from, false),
        move |(mut sub, next, over)| async move {
            if over {
                return None;
            }
            let event = match sub.next().await {
                Some(Ok(c)) => {
                    let index = c.index;
                    let body = match String::from_utf8(c.payload) {
                        Ok(text) => StreamChunkEvent {
                            index,
                            text: Some(text),
                            bytes: None,
                        },
                        Err(e) => StreamChunkEvent {
                            index,
                            text: None,
                            bytes: Some(e.into_bytes()),
                        },
                    };
                    let ev = sse_event("chunk", &body).id(index.to_string());
                    return Some((ev, (sub, index + 1, false)));
                }
                Some(Err(e)) => {
                    let e = ApiError::from(e);
                    sse_event(
                        "error",
                        &ErrorBody {
                            kind: e.kind.to_string(),
                            message: e.message,
                        },
                    )
                }
                None => sse_event("end", &StreamEndEvent { next }),
            };
            Some((event, (sub, next, true)))
        },
    )
    .map(Ok);
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// The `Last-Event-ID` header's chunk index: absent when the header is
/// absent or empty (the SSE spec's "no last event"), a `bad_request` when
/// it is not a number, as a bad `from` is.
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(v) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let text = v.to_str().ok().map(str::trim);
    if text == Some("") {
        return Ok(None);
    }
    text.and_then(|t| t.parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "the Last-Event-ID header {v:?} is not a chunk index (a number from 0)"
            ))
        })
}

/// An event named `name` whose data is `body` as one line of JSON.
fn sse_event(name: &str, body: &impl serde::Serialize) -> axum::response::sse::Event {
    let data = serde_json::to_string(body).unwrap_or_else(|_| "null".into());
    axum::response::sse::Event::default().event(name).data(data)
}

/// The runs of an ID, newest first (continue-as-new, resets).
#[utoipa::path(get, path = "/api/v1/runs/{id}/chain", tag = "runs",
    params(("id" = String, Path, description = "The workflow ID")), responses(
    (status = 200, body = Vec<ChainLink>), (status = 404, body = ErrorBody)))]
async fn chain(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
) -> Reply<Vec<ChainLink>> {
    let links = app.engine.chain(&id).await?;
    Ok(Json(
        links
            .into_iter()
            .map(|l| ChainLink {
                run: l.run,
                workflow: l.workflow,
                started_ms: l.started_ms,
                status: l
                    .finished
                    .map_or("running", |(s, _)| status_name(s))
                    .to_string(),
                finished_ms: l.finished.map(|(_, at)| at),
                from_run: l.from.map(|(r, _)| r),
                cause: l.from.map(|(_, c)| match c {
                    fusee::Cause::ContinuedAsNew => "continued-as-new".to_string(),
                    fusee::Cause::Reset => "reset".to_string(),
                    fusee::Cause::Other(n) => format!("cause-{n}"),
                }),
            })
            .collect(),
    ))
}

/// Query parameters of the result route.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct WaitQuery {
    /// How long to wait (default 30,000 ms).
    timeout_ms: Option<u64>,
}

/// Waits for the result of the ID's latest run.
#[utoipa::path(get, path = "/api/v1/runs/{id}/result", tag = "runs",
    params(("id" = String, Path, description = "The workflow ID"), WaitQuery), responses(
    (status = 200, body = ValueReply),
    (status = 404, body = ErrorBody),
    (status = 422, description = "The run ended without a result", body = ErrorBody),
    (status = 504, body = ErrorBody)))]
async fn result(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
    Params(q): Params<WaitQuery>,
) -> Reply<ValueReply> {
    let value = wait_result(&app.engine, &id, q.timeout_ms.unwrap_or(WAIT_DEFAULT_MS)).await?;
    Ok(Json(ValueReply { value }))
}

/// Sends a signal; answers once it is durable.
#[utoipa::path(post, path = "/api/v1/runs/{id}/signal", tag = "verbs",
    params(("id" = String, Path, description = "The workflow ID")), request_body = SignalRequest,
    responses((status = 200, body = Value),
    (status = 400, description = "No payload, or a field the body does not take", body = ErrorBody),
    (status = 404, body = ErrorBody),
    (status = 409, description = "The run finished", body = ErrorBody)))]
async fn signal(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
    Body(r): Body<SignalRequest>,
) -> Reply<Value> {
    app.engine
        .signal_json(&id, &r.name, &r.payload, r.key.as_deref())
        .await?;
    Ok(Json(serde_json::json!({})))
}

/// Runs an update handler; its result once durable.
#[utoipa::path(post, path = "/api/v1/runs/{id}/update", tag = "verbs",
    params(("id" = String, Path, description = "The workflow ID")), request_body = UpdateRequest,
    responses((status = 200, body = ValueReply), (status = 400, body = ErrorBody),
    (status = 422, description = "Refused by the validator, or the handler failed", body = ErrorBody)))]
async fn update(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
    Body(r): Body<UpdateRequest>,
) -> Reply<ValueReply> {
    let value = app
        .engine
        .update_json(&id, &r.name, r.key.as_deref(), &r.arg)
        .await?;
    Ok(Json(ValueReply { value }))
}

/// Asks a query handler; records nothing.
#[utoipa::path(post, path = "/api/v1/runs/{id}/query", tag = "verbs",
    params(("id" = String, Path, description = "The workflow ID")), request_body = QueryRequest,
    responses((status = 200, body = ValueReply), (status = 400, body = ErrorBody)))]
async fn query(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
    Body(r): Body<QueryRequest>,
) -> Reply<ValueReply> {
    let value = app.engine.query_json(&id, &r.name, &r.arg).await?;
    Ok(Json(ValueReply { value }))
}

/// Asks the run to cancel: cooperatively, or with `grace_ms`, terminated
/// with the reason if it has not ended that long after.
#[utoipa::path(post, path = "/api/v1/runs/{id}/cancel", tag = "verbs",
    params(("id" = String, Path, description = "The workflow ID")), request_body = CancelRequest,
    responses((status = 200, body = Value), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn cancel(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
    OptBody(r): OptBody<CancelRequest>,
) -> Reply<Value> {
    let reason = r.reason.as_deref().unwrap_or("operator");
    match r.grace_ms {
        Some(ms) => {
            app.engine
                .cancel_with_grace(&id, reason, Duration::from_millis(ms))
                .await?
        }
        None => app.engine.cancel(&id, reason).await?,
    }
    Ok(Json(serde_json::json!({})))
}

/// Ends the run at once, as terminated.
#[utoipa::path(post, path = "/api/v1/runs/{id}/terminate", tag = "verbs",
    params(("id" = String, Path, description = "The workflow ID")), request_body = ReasonRequest,
    responses((status = 200, body = Value), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn terminate(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
    OptBody(r): OptBody<ReasonRequest>,
) -> Reply<Value> {
    app.engine
        .terminate(&id, r.reason.as_deref().unwrap_or("operator"))
        .await?;
    Ok(Json(serde_json::json!({})))
}

/// Pauses the run: no new step attempt starts.
#[utoipa::path(post, path = "/api/v1/runs/{id}/pause", tag = "verbs",
    params(("id" = String, Path, description = "The workflow ID")),
    responses((status = 200, body = Value), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn pause(State(app): State<App>, PathParams(id): PathParams<String>) -> Reply<Value> {
    app.engine.pause(&id).await?;
    Ok(Json(serde_json::json!({})))
}

/// Lets a paused run start steps again.
#[utoipa::path(post, path = "/api/v1/runs/{id}/resume", tag = "verbs",
    params(("id" = String, Path, description = "The workflow ID")),
    responses((status = 200, body = Value), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn resume(State(app): State<App>, PathParams(id): PathParams<String>) -> Reply<Value> {
    app.engine.resume(&id).await?;
    Ok(Json(serde_json::json!({})))
}

/// Restarts the run from a step; the new run.
#[utoipa::path(post, path = "/api/v1/runs/{id}/reset", tag = "verbs",
    params(("id" = String, Path, description = "The workflow ID")), request_body = ResetRequest,
    responses((status = 200, body = StartReply), (status = 400, description = "Unknown step", body = ErrorBody),
    (status = 409, description = "Cannot reset", body = ErrorBody)))]
async fn reset(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
    Body(r): Body<ResetRequest>,
) -> Reply<StartReply> {
    let reason = r.reason.as_deref().unwrap_or("operator");
    let run = match r.run {
        Some(run) => app.engine.reset_run(&id, run, &r.step, reason).await?,
        None => app.engine.reset(&id, &r.step, reason).await?,
    };
    Ok(Json(start_reply(&run)))
}

/// The registered workflow types.
#[utoipa::path(get, path = "/api/v1/workflows", tag = "meta",
    responses((status = 200, body = Vec<String>)))]
async fn workflows(State(app): State<App>) -> Json<Vec<String>> {
    Json(app.engine.workflow_types())
}

/// Every shard as this engine sees it.
#[utoipa::path(get, path = "/api/v1/shards", tag = "meta",
    responses((status = 200, body = Vec<ShardInfo>)))]
async fn shards(State(app): State<App>) -> Json<Vec<ShardInfo>> {
    Json(shard_infos(&app.engine).await)
}

/// An online backup of the store into a new directory on the server's
/// machine (admin token): every shard paused at one cut while it is
/// copied; restore is opening the copy. A PostgreSQL store is refused
/// (`pg_dump`). A destination that is relative, whose parent is missing or
/// not a directory, that is not a directory, or that cannot be created is
/// 400 `backup_destination`; one that exists and is not empty is 409
/// `backup_not_empty`.
#[utoipa::path(post, path = "/api/v1/backup", tag = "meta", request_body = BackupRequest,
    responses((status = 200, body = BackupReply),
    (status = 400, description = "A bad destination (kind backup_destination), an unsupported store", body = ErrorBody),
    (status = 409, description = "The destination is not empty, or a backup runs", body = ErrorBody)))]
async fn backup(State(app): State<App>, Body(r): Body<BackupRequest>) -> Reply<BackupReply> {
    if r.dest.is_empty() {
        return Err(ApiError::bad_request("dest is empty".to_string()));
    }
    backup_destination(std::path::Path::new(&r.dest))?;
    let report = app.engine.backup(&r.dest).await?;
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    Ok(Json(BackupReply {
        dest: report.dest.display().to_string(),
        shards: report.shards,
        runs: report.runs,
        bytes: report.bytes,
        pauses: report
            .pauses
            .iter()
            .map(|&(shard, d)| BackupPause {
                shard,
                paused_us: micros(d),
            })
            .collect(),
        took_us: micros(report.took),
    }))
}

/// Refuses a destination the client got wrong before the engine pauses
/// any shard: a relative path (it would resolve against the server's
/// working directory), a missing parent, a parent or a destination that is
/// not a directory. Refused as the engine refuses a destination it cannot
/// look at (`BackupError::Destination`), so the kind is one. (Two `stat`s,
/// blocking briefly: `tokio::fs` is not compiled in.)
fn backup_destination(dest: &std::path::Path) -> Result<(), ApiError> {
    let refuse = |error: String| {
        ApiError::from(fusee::Error::Backup(fusee::BackupError::Destination {
            dest: dest.to_path_buf(),
            error,
        }))
    };
    if !dest.is_absolute() {
        return Err(refuse(
            "a relative path (it would resolve against the server's working directory): \
             give an absolute path"
                .into(),
        ));
    }
    match std::fs::metadata(dest) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => return Err(refuse("it exists and is not a directory".into())),
        // Absent, or under a file: the parent says which.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) => {}
        Err(e) => return Err(refuse(e.to_string())),
    }
    // A new directory: its parent must be one (the engine creates only it).
    let Some(parent) = dest.parent() else {
        return Ok(());
    };
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(refuse(format!(
            "its parent {} is not a directory",
            parent.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(refuse(format!(
            "its parent {} does not exist",
            parent.display()
        ))),
        Err(e) => Err(refuse(format!("its parent {}: {e}", parent.display()))),
    }
}

/// Each shard's state and figures.
pub(crate) async fn shard_infos(engine: &fusee::Engine) -> Vec<ShardInfo> {
    let metrics = engine.shard_metrics().await;
    engine
        .shard_status()
        .into_iter()
        .map(|s| {
            let m = metrics.iter().find(|(n, _)| *n == s.shard).map(|(_, m)| m);
            ShardInfo {
                shard: s.shard,
                owned: s.owned,
                opens: s.opens,
                losses: s.losses,
                last_error: s.last_error.clone(),
                sealed_lsn: m.map(|m| m.sealed_lsn),
                flushes: m.map_or(0, |m| m.flushes),
                flush_p50_us: m.map_or(0, |m| m.flush_micros.percentile(50.0)),
                flush_p99_us: m.map_or(0, |m| m.flush_micros.percentile(99.0)),
                loaded_runs: m.map_or(0, |m| m.loaded_runs),
                parked_runs: m.map_or(0, |m| m.parked_runs),
                queued: m.map_or(0, |m| m.queued),
            }
        })
        .collect()
}

/// The schedules' IDs.
#[utoipa::path(get, path = "/api/v1/schedules", tag = "schedules",
    responses((status = 200, body = Vec<String>)))]
async fn list_schedules(State(app): State<App>) -> Reply<Vec<String>> {
    Ok(Json(app.engine.schedules().list().await?))
}

/// A schedule.
pub(crate) fn schedule_info(d: fusee::ScheduleDescription) -> ScheduleInfo {
    ScheduleInfo {
        id: d.id,
        workflow: d.workflow,
        spec: d.spec,
        time_zone: d.time_zone,
        overlap: format!("{:?}", d.overlap),
        catch_up: format!("{:?}", d.catch_up),
        paused: d.paused,
        note: d.note,
        next_fires_ms: d.next_fires.into_iter().map(ms).collect(),
        running: d.running,
        fired: d.fired,
        skipped: d.skipped,
        last_error: d.last_error,
    }
}

/// Schedule `id`.
#[utoipa::path(get, path = "/api/v1/schedules/{id}", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's ID")),
    responses((status = 200, body = ScheduleInfo), (status = 404, body = ErrorBody)))]
async fn describe_schedule(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
) -> Reply<ScheduleInfo> {
    Ok(Json(schedule_info(
        app.engine.schedules().describe(&id).await?,
    )))
}

/// Deletes schedule `id`.
#[utoipa::path(delete, path = "/api/v1/schedules/{id}", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's ID")),
    responses((status = 200, body = Value), (status = 404, body = ErrorBody)))]
async fn delete_schedule(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
) -> Reply<Value> {
    app.engine.schedules().delete(&id).await?;
    Ok(Json(serde_json::json!({})))
}

/// Pauses schedule `id`.
#[utoipa::path(post, path = "/api/v1/schedules/{id}/pause", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's ID")), request_body = PauseRequest,
    responses((status = 200, body = Value), (status = 404, body = ErrorBody)))]
async fn pause_schedule(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
    OptBody(r): OptBody<PauseRequest>,
) -> Reply<Value> {
    app.engine
        .schedules()
        .pause(&id, r.note.as_deref().unwrap_or(""))
        .await?;
    Ok(Json(serde_json::json!({})))
}

/// Resumes schedule `id`.
#[utoipa::path(post, path = "/api/v1/schedules/{id}/resume", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's ID")),
    responses((status = 200, body = Value), (status = 404, body = ErrorBody)))]
async fn resume_schedule(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
) -> Reply<Value> {
    app.engine.schedules().resume(&id).await?;
    Ok(Json(serde_json::json!({})))
}

/// Fires schedule `id` now, under its overlap policy (the fire shows in
/// the schedule's `recent` once it woke). A paused schedule refuses (422
/// `rejected`).
#[utoipa::path(post, path = "/api/v1/schedules/{id}/trigger", tag = "schedules",
    params(("id" = String, Path, description = "The schedule's ID")),
    responses((status = 200, body = Value), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
async fn trigger_schedule(
    State(app): State<App>,
    PathParams(id): PathParams<String>,
) -> Reply<Value> {
    app.engine.schedules().trigger(&id).await?;
    Ok(Json(serde_json::json!({})))
}

/// The queues' names.
#[utoipa::path(get, path = "/api/v1/queues", tag = "queues",
    responses((status = 200, body = Vec<String>)))]
async fn list_queues(State(app): State<App>) -> Reply<Vec<String>> {
    Ok(Json(app.engine.queues().list().await?))
}

/// A queue.
pub(crate) fn queue_info(d: fusee::QueueDescription) -> QueueInfo {
    QueueInfo {
        name: d.name,
        workflow: d.workflow,
        concurrency: d.concurrency,
        rate: d.rate.map(|(n, per)| (n, per.as_millis() as u64)),
        one_per_key: d.one_per_key,
        paused: d.paused,
        pending: d.pending,
        running: d.running,
        enqueued: d.enqueued,
        started: d.started,
        completed: d.completed,
        failed: d.failed,
        last_error: d.last_error,
    }
}

/// Queue `name`.
#[utoipa::path(get, path = "/api/v1/queues/{name}", tag = "queues",
    params(("name" = String, Path, description = "The queue's name")),
    responses((status = 200, body = QueueInfo), (status = 404, body = ErrorBody)))]
async fn describe_queue(
    State(app): State<App>,
    PathParams(name): PathParams<String>,
) -> Reply<QueueInfo> {
    Ok(Json(queue_info(app.engine.queues().describe(&name).await?)))
}

/// Deletes queue `name` and the items waiting in it.
#[utoipa::path(delete, path = "/api/v1/queues/{name}", tag = "queues",
    params(("name" = String, Path, description = "The queue's name")),
    responses((status = 200, body = Deleted), (status = 404, body = ErrorBody)))]
async fn delete_queue(
    State(app): State<App>,
    PathParams(name): PathParams<String>,
) -> Reply<Deleted> {
    let dropped = app.engine.queues().delete(&name).await?;
    Ok(Json(Deleted { dropped }))
}

/// Pauses queue `name`: no new run starts from it.
#[utoipa::path(post, path = "/api/v1/queues/{name}/pause", tag = "queues",
    params(("name" = String, Path, description = "The queue's name")),
    responses((status = 200, body = Value), (status = 404, body = ErrorBody)))]
async fn pause_queue(State(app): State<App>, PathParams(name): PathParams<String>) -> Reply<Value> {
    app.engine.queues().pause(&name).await?;
    Ok(Json(serde_json::json!({})))
}

/// Resumes queue `name`.
#[utoipa::path(post, path = "/api/v1/queues/{name}/resume", tag = "queues",
    params(("name" = String, Path, description = "The queue's name")),
    responses((status = 200, body = Value), (status = 404, body = ErrorBody)))]
async fn resume_queue(
    State(app): State<App>,
    PathParams(name): PathParams<String>,
) -> Reply<Value> {
    app.engine.queues().resume(&name).await?;
    Ok(Json(serde_json::json!({})))
}

/// The step limits' names.
#[utoipa::path(get, path = "/api/v1/limits", tag = "limits",
    responses((status = 200, body = Vec<String>)))]
async fn list_limits(State(app): State<App>) -> Reply<Vec<String>> {
    Ok(Json(app.engine.limits().list().await?))
}

/// A step limit.
pub(crate) fn limit_info(d: fusee::LimitDescription) -> LimitInfo {
    LimitInfo {
        name: d.name,
        concurrency: d.concurrency,
        rate: d.rate.map(|(n, per)| (n, per.as_millis() as u64)),
        holders: d.holders,
        waiting: d.waiting,
        granted: d.granted,
        paused: d.paused,
        note: d.note,
    }
}

/// Step limit `name`.
#[utoipa::path(get, path = "/api/v1/limits/{name}", tag = "limits",
    params(("name" = String, Path, description = "The limit's name")),
    responses((status = 200, body = LimitInfo), (status = 404, body = ErrorBody)))]
async fn describe_limit(
    State(app): State<App>,
    PathParams(name): PathParams<String>,
) -> Reply<LimitInfo> {
    Ok(Json(limit_info(app.engine.limits().describe(&name).await?)))
}

/// Deletes step limit `name`.
#[utoipa::path(delete, path = "/api/v1/limits/{name}", tag = "limits",
    params(("name" = String, Path, description = "The limit's name")),
    responses((status = 200, body = Value), (status = 404, body = ErrorBody)))]
async fn delete_limit(
    State(app): State<App>,
    PathParams(name): PathParams<String>,
) -> Reply<Value> {
    app.engine.limits().delete(&name).await?;
    Ok(Json(serde_json::json!({})))
}

/// Pauses step limit `name`: no permit goes out until resumed; its steps
/// wait.
#[utoipa::path(post, path = "/api/v1/limits/{name}/pause", tag = "limits",
    params(("name" = String, Path, description = "The limit's name")), request_body = PauseRequest,
    responses((status = 200, body = Value), (status = 404, body = ErrorBody)))]
async fn pause_limit(
    State(app): State<App>,
    PathParams(name): PathParams<String>,
    OptBody(r): OptBody<PauseRequest>,
) -> Reply<Value> {
    app.engine
        .limits()
        .pause(&name, r.note.as_deref().unwrap_or(""))
        .await?;
    Ok(Json(serde_json::json!({})))
}

/// Resumes step limit `name`.
#[utoipa::path(post, path = "/api/v1/limits/{name}/resume", tag = "limits",
    params(("name" = String, Path, description = "The limit's name")),
    responses((status = 200, body = Value), (status = 404, body = ErrorBody)))]
async fn resume_limit(
    State(app): State<App>,
    PathParams(name): PathParams<String>,
) -> Reply<Value> {
    app.engine.limits().resume(&name).await?;
    Ok(Json(serde_json::json!({})))
}
