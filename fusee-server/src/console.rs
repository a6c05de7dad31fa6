//! The web console at `/`: pages rendered on the server with maud (every
//! interpolated value escaped), one stylesheet and a few lines of plain
//! JavaScript served from this binary, nothing fetched from elsewhere.
//!
//! Pages: `/` (overview: shards, runs by status, an activity chart of
//! the last two minutes, a flush-latency chart),
//! `/runs` (filters, pagination), `/runs/{id}` (header, timeline, input
//! and result, actions), `/schedules`, `/queues`, `/limits`, `/login`.
//! Actions are HTML forms posted to `.../action`, each with the CSRF
//! token and a confirmation; the answer is a redirect back to the page
//! with a notice. A form or query the pages would not send is answered
//! with an error page (400).
//!
//! An ID or name in a URL is one percent-encoded segment; `""`, `.`, `..`
//! (which a browser cannot keep as a segment) and those starting with `~`
//! are written after a `~` (`/runs/~..` is run `..`).
//!
//! Rights: the token a person logged in with (a cookie) or a bearer
//! header, as for the API: reading needs the read token, actions the
//! admin one. Without tokens configured everything is open (loopback).

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::{Form, FromRequest, FromRequestParts, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use subtle::ConstantTimeEq;

use crate::App;
use crate::api::PathParams;
use crate::auth::{Access, CSRF_COOKIE, TOKEN_COOKIE, cookie, random_token};
use crate::error::ApiError;
use crate::model::RunsQuery;

/// The overview counts runs of each status up to this many ("1000+").
const STATUS_COUNT_MAX: usize = 1000;

/// The stylesheet, served at `/console.css`.
const CSS: &str = r#"
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
header{background:#1d232a;color:#fff;padding:8px 16px;display:flex;gap:18px;align-items:center}
header a{color:#cfe3ff;text-decoration:none}header b{margin-right:12px}
main{padding:16px;max-width:1200px}
table{border-collapse:collapse;background:#fff;width:100%;margin:8px 0 16px}
th,td{border-bottom:1px solid #e3e6ea;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}
.st{padding:1px 6px;border-radius:3px;font-size:12px;font-weight:600;color:#fff;background:#6b7785}
.st-running{background:#1f6feb}.st-ok{background:#1a7f37}.st-failed{background:#cf222e}
.st-cancelled,.st-terminated{background:#9a6700}.st-timed-out{background:#bc4c00}
.st-continued-as-new,.st-reset{background:#8250df}.st-stopped{background:#cf222e}
pre{background:#fff;border:1px solid #e3e6ea;padding:8px;overflow:auto;max-height:320px;margin:4px 0}
.notice{background:#ddf4ff;border:1px solid #54aeff;padding:8px;margin:8px 0}
.error{background:#ffebe9;border:1px solid #ff8182;padding:8px;margin:8px 0}
form.inline{display:inline-block;margin:4px 8px 4px 0;padding:8px;background:#fff;border:1px solid #e3e6ea}
.timeline td:first-child{white-space:nowrap;color:#57606a}
.k{font-weight:600}.right{margin-left:auto}form.flat{margin:0}
.took{white-space:nowrap;color:#57606a}.took b{color:#1d232a}
"#;

/// The script, served at `/console.js`: asks for confirmation before an
/// action form is sent.
const JS: &str = r#"
document.addEventListener('submit', function (e) {
  var f = e.target;
  var what = f.getAttribute('data-confirm');
  if (what && !window.confirm(what)) { e.preventDefault(); }
});
"#;

/// The console's routes.
pub(crate) fn router() -> Router<App> {
    Router::new()
        .route("/", get(overview))
        .route("/console.css", get(css))
        .route("/console.js", get(js))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/runs", get(runs_page))
        .route("/runs/{id}", get(run_page))
        .route("/runs/{id}/action", post(run_action))
        .route("/schedules", get(schedules_page))
        .route("/schedules/{id}/action", post(schedule_action))
        .route("/queues", get(queues_page))
        .route("/queues/{name}/action", post(queue_action))
        .route("/limits", get(limits_page))
        .route("/limits/{name}/action", post(limit_action))
}

async fn css() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS)
}

async fn js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        JS,
    )
}

/// Who is looking, and the CSRF token their forms carry.
struct Viewer {
    access: Access,
    csrf: String,
    /// A CSRF cookie to set (first visit).
    new_csrf: bool,
}

impl Viewer {
    fn of(app: &App, headers: &HeaderMap) -> Self {
        let token = cookie(headers, TOKEN_COOKIE)
            .and_then(unhex)
            .or_else(|| crate::auth::bearer(headers).map(str::to_string));
        let access = app.tokens.access(token.as_deref());
        match cookie(headers, CSRF_COOKIE).filter(|c| c.len() == 64) {
            Some(c) => Viewer {
                access,
                csrf: c.to_string(),
                new_csrf: false,
            },
            None => Viewer {
                access,
                csrf: random_token(),
                new_csrf: true,
            },
        }
    }

    /// Whether a form's CSRF field is this viewer's cookie.
    fn csrf_ok(&self, field: &str) -> bool {
        !self.new_csrf && bool::from(self.csrf.as_bytes().ct_eq(field.as_bytes()))
    }
}

/// Cookie attributes: never readable by scripts, never sent from another
/// site.
const COOKIE_ATTRS: &str = "; HttpOnly; SameSite=Strict; Path=/";

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|d| u8::from_str_radix(d, 16).ok()))
        .collect();
    String::from_utf8(bytes?).ok()
}

/// A page as a response: its CSRF cookie set on a first visit, and headers
/// that keep it from being framed or running scripts from elsewhere.
fn page(viewer: &Viewer, status: StatusCode, body: Markup) -> Response {
    let mut resp = (status, Html(body.into_string())).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if viewer.new_csrf
        && let Ok(v) =
            HeaderValue::from_str(&format!("{CSRF_COOKIE}={}{COOKIE_ATTRS}", viewer.csrf))
    {
        h.append(header::SET_COOKIE, v);
    }
    resp
}

/// The frame every page shares.
fn layout(viewer: &Viewer, title: &str, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · Fusee" }
                link rel="stylesheet" href="/console.css";
                script src="/console.js" defer {}
            }
            body {
                header {
                    b { "Fusee" }
                    a href="/" { "Overview" }
                    a href="/runs" { "Runs" }
                    a href="/schedules" { "Schedules" }
                    a href="/queues" { "Queues" }
                    a href="/limits" { "Limits" }
                    span.right id="rights" { "rights: " (viewer.access.name()) }
                    @if viewer.access != Access::None {
                        form.flat method="post" action="/logout" {
                            input type="hidden" name="csrf" value=(viewer.csrf);
                            button type="submit" { "Log out" }
                        }
                    } @else {
                        a href="/login" { "Log in" }
                    }
                }
                main { (content) }
            }
        }
    }
}

/// A page refused for want of rights: reading without a token goes to the
/// login page.
fn refused(viewer: &Viewer, need: Access) -> Response {
    if viewer.access == Access::None {
        return Redirect::to("/login").into_response();
    }
    let body = layout(
        viewer,
        "Refused",
        html! {
            div.error id="refused" {
                "Refused: this needs the " (need.name()) " token; you are logged in with the "
                (viewer.access.name()) " token."
            }
        },
    );
    page(viewer, StatusCode::FORBIDDEN, body)
}

/// Shown where a page could not be made (the engine's error).
fn failed(viewer: &Viewer, what: &str, e: &fusee::Error) -> Response {
    let (status, kind) = crate::error::engine_error(e);
    let body = layout(
        viewer,
        what,
        html! { div.error { (what) ": " (e.to_string()) " (" (kind) ")" } },
    );
    page(viewer, status, body)
}

/// Shown for a request the console's own pages do not make (a form
/// without its fields, a bad query parameter): its error page, not
/// axum's plain text.
fn bad_input(viewer: &Viewer, status: StatusCode, message: &str) -> Response {
    let body = layout(
        viewer,
        "Bad request",
        html! { div.error id="bad-request" { "Bad request: " (message) } },
    );
    page(viewer, status, body)
}

/// A console form's fields; a body that is not the form answered with
/// [`bad_input`] (400; 413 when too large).
struct ConsoleForm<T>(T);

impl<T: DeserializeOwned> FromRequest<App> for ConsoleForm<T> {
    type Rejection = Response;

    async fn from_request(req: Request, app: &App) -> Result<Self, Self::Rejection> {
        let headers = req.headers().clone();
        Form::<T>::from_request(req, app)
            .await
            .map(|Form(f)| ConsoleForm(f))
            .map_err(|e| {
                let status = match e.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
                    _ => StatusCode::BAD_REQUEST,
                };
                bad_input(&Viewer::of(app, &headers), status, &e.body_text())
            })
    }
}

/// A console page's query parameters; bad ones answered with
/// [`bad_input`] (400).
struct ConsoleQuery<T>(T);

impl<T: DeserializeOwned> FromRequestParts<App> for ConsoleQuery<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, app)
            .await
            .map(|Query(q)| ConsoleQuery(q))
            .map_err(|e| {
                bad_input(
                    &Viewer::of(app, &parts.headers),
                    StatusCode::BAD_REQUEST,
                    &e.body_text(),
                )
            })
    }
}

/// The ID or name a console URL's one path segment names, with
/// [`path_segment`]'s `~` taken off; a segment that is not UTF-8 is a
/// JSON `bad_request`, as in the API ([`PathParams`]).
struct SegmentId(String);

impl<S: Send + Sync> FromRequestParts<S> for SegmentId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let PathParams(seg) = PathParams::<String>::from_request_parts(parts, state).await?;
        Ok(SegmentId(match seg.strip_prefix('~') {
            Some(id) => id.to_string(),
            None => seg,
        }))
    }
}

fn time(ms: u64) -> String {
    match chrono::DateTime::from_timestamp_millis(ms as i64) {
        Some(t) if ms > 0 => t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string(),
        _ => "-".to_string(),
    }
}

fn status_badge(status: &str) -> Markup {
    html! { span class={ "st st-" (status) } { (status) } }
}

/// A journal-format bytes value (`{"json": v}` or `{"hex": ...}`) shown
/// as people read it: the JSON pretty-printed, else the hex.
fn payload_text(v: &Value) -> String {
    match v.get("json") {
        Some(j) => serde_json::to_string_pretty(j).unwrap_or_default(),
        None => match v.get("hex").and_then(Value::as_str) {
            Some(h) => format!("(bytes) {h}"),
            None => v.to_string(),
        },
    }
}

#[derive(Deserialize, Default)]
struct Notice {
    notice: Option<String>,
    error: Option<String>,
}

fn notices(n: &Notice) -> Markup {
    html! {
        @if let Some(m) = &n.notice { div.notice id="notice" { (m) } }
        @if let Some(m) = &n.error { div.error id="error" { (m) } }
    }
}

async fn overview(State(app): State<App>, headers: HeaderMap) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if viewer.access < Access::Read {
        return refused(&viewer, Access::Read);
    }
    let shards = crate::api::shard_infos(&app.engine).await;
    let metrics = app.engine.metrics().await;
    // Runs by status: one listing per status, its count capped (a parked
    // run listed costs a frame read: the page stays cheap with millions).
    let mut by_status = Vec::new();
    for s in [
        "running",
        "ok",
        "failed",
        "cancelled",
        "timed-out",
        "terminated",
        "continued-as-new",
        "reset",
    ] {
        let q = RunsQuery {
            status: Some(s.to_string()),
            limit: Some(STATUS_COUNT_MAX),
            ..RunsQuery::default()
        };
        match crate::api::runs_page(&app.engine, &q).await {
            Ok(p) => by_status.push((s, p.runs.len(), p.next.is_some())),
            Err(e) => return failed(&viewer, "Runs by status", &fusee::Error::Config(e.message)),
        }
    }
    let h = &metrics.flush_micros;
    let bars = [
        ("p50", h.percentile(50.0)),
        ("p90", h.percentile(90.0)),
        ("p99", h.percentile(99.0)),
        ("p99.9", h.percentile(99.9)),
        ("max", h.max()),
    ];
    let body = layout(
        &viewer,
        "Overview",
        html! {
            h1 { "Overview" }
            h2 { "Runs by status" }
            table id="by-status" {
                tr { @for (s, _, _) in &by_status { th { (status_badge(s)) } } }
                tr { @for (s, n, more) in &by_status {
                    td { a href={ "/runs?status=" (s) } { (n) @if *more { "+" } } }
                } }
            }
            p {
                "Started " (metrics.started) ", finished " (metrics.finished)
                    ", step attempts " (metrics.step_attempts)
                ", in memory " (metrics.loaded_runs) ", parked " (metrics.parked_runs)
                ", flushes " (metrics.flushes) " (" (format!("{:.1}", metrics.records_per_flush())) " records each)."
            }
            h2 { "Activity" }
            (activity_chart(&app.activity.rates()))
            h2 { "Flush latency" }
            p { "p50 " (h.percentile(50.0)) " µs, p99 " (h.percentile(99.0)) " µs over " (h.count()) " flushes." }
            (latency_chart(&bars))
            h2 { "Shards" }
            table id="shards" {
                tr { th { "shard" } th { "owned" } th { "sealed LSN" } th { "flushes" }
                     th { "flush p50 µs" } th { "flush p99 µs" } th { "in memory" } th { "parked" } th { "queued" } th { "last error" } }
                @for s in &shards {
                    tr {
                        td { (s.shard) } td { (if s.owned { "yes" } else { "no" }) }
                        td { (s.sealed_lsn.map_or("-".to_string(), |l| l.to_string())) }
                        td { (s.flushes) } td { (s.flush_p50_us) } td { (s.flush_p99_us) }
                        td { (s.loaded_runs) } td { (s.parked_runs) } td { (s.queued) }
                        td { (s.last_error.clone().unwrap_or_default()) }
                    }
                }
            }
        },
    );
    page(&viewer, StatusCode::OK, body)
}

/// A line chart (inline SVG) of runs started and finished, step attempts
/// and flushes per second over the samples the server took.
fn activity_chart(rates: &[crate::activity::Rates]) -> Markup {
    let (w, h) = (600.0f64, 140.0f64);
    let top = rates
        .iter()
        .flat_map(|r| [r.started, r.finished, r.steps, r.flushes])
        .fold(1.0f64, f64::max);
    let span = (crate::activity::SAMPLES_MAX as f64) * crate::activity::INTERVAL.as_secs_f64();
    let line = |f: &dyn Fn(&crate::activity::Rates) -> f64| {
        rates
            .iter()
            .map(|r| {
                let x = w * (1.0 - (r.ago_s / span).min(1.0));
                let y = h - h * f(r) / top;
                format!("{x:.1},{y:.1}")
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let last = rates.last().copied();
    html! {
        svg id="activity-chart" width=(w) height=(h + 20.0) viewBox={ "0 0 " (w) " " (h + 20.0) }
            xmlns="http://www.w3.org/2000/svg" role="img" {
            title { "runs started, runs finished, step attempts and flushes per second, last two minutes" }
            rect x="0" y="0" width=(w) height=(h) fill="#fff" stroke="#e3e6ea" {}
            polyline fill="none" stroke="#1f6feb" stroke-width="2" points=(line(&|r| r.started)) {}
            polyline fill="none" stroke="#1a7f37" stroke-width="2" points=(line(&|r| r.finished)) {}
            polyline fill="none" stroke="#8250df" stroke-width="2" points=(line(&|r| r.steps)) {}
            polyline fill="none" stroke="#9a6700" stroke-width="1" points=(line(&|r| r.flushes)) {}
            // The newest rates as dots, visible from the first one on.
            @if let Some(r) = last {
                @let x = w * (1.0 - (r.ago_s / span).min(1.0));
                @for (v, colour) in [(r.started, "#1f6feb"), (r.finished, "#1a7f37"), (r.steps, "#8250df"), (r.flushes, "#9a6700")] {
                    circle cx=(format!("{x:.1}")) cy=(format!("{:.1}", h - h * v / top)) r="3" fill=(colour) {}
                }
            }
            text x="4" y="12" font-size="11" fill="#57606a" { (format!("{top:.0}/s")) }
            text x="4" y=(h + 14.0) font-size="11" fill="#1f6feb" { "started/s" }
            text x="90" y=(h + 14.0) font-size="11" fill="#1a7f37" { "finished/s" }
            text x="180" y=(h + 14.0) font-size="11" fill="#8250df" { "steps/s" }
            text x="260" y=(h + 14.0) font-size="11" fill="#9a6700" { "flushes/s" }
        }
        p id="activity" {
            @match last {
                Some(r) => { "Now: " (format!("{:.1}", r.started)) " runs started/s, "
                    (format!("{:.1}", r.finished)) " finished/s, " (format!("{:.1}", r.steps)) " steps/s, "
                    (format!("{:.1}", r.flushes)) " flushes/s." }
                None => { "No samples yet (one a second while the server runs)." }
            }
        }
    }
}

/// A bar chart (inline SVG) of flush-latency percentiles, in µs.
fn latency_chart(bars: &[(&str, u64)]) -> Markup {
    let top = bars.iter().map(|b| b.1).max().unwrap_or(0).max(1);
    let (w, h, bw) = (420u64, 160u64, 60u64);
    html! {
        svg id="latency-chart" width=(w) height=(h + 30) viewBox={ "0 0 " (w) " " (h + 30) }
            xmlns="http://www.w3.org/2000/svg" role="img" {
            title { "flush latency percentiles (µs)" }
            @for (i, (label, v)) in bars.iter().enumerate() {
                @let bh = v * h / top;
                @let x = 10 + i as u64 * (bw + 20);
                rect x=(x) y=(h - bh) width=(bw) height=(bh.max(1)) fill="#1f6feb" {}
                text x=(x) y=(h + 14) font-size="11" { (label) }
                text x=(x) y=(h + 27) font-size="11" fill="#57606a" { (v) " µs" }
            }
        }
    }
}

async fn runs_page(
    State(app): State<App>,
    headers: HeaderMap,
    ConsoleQuery(q): ConsoleQuery<RunsQuery>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if viewer.access < Access::Read {
        return refused(&viewer, Access::Read);
    }
    let mut q = q;
    q.limit = Some(q.limit.unwrap_or(50).clamp(1, 1000));
    let types = app.engine.workflow_types();
    let listed = crate::api::runs_page(&app.engine, &q).await;
    let field = |v: &Option<String>| v.clone().unwrap_or_default();
    let next_href = |cursor: &str| {
        let mut next = q.clone();
        next.cursor = Some(cursor.to_string());
        format!("/runs?{}", query_string(&next))
    };
    let body = layout(
        &viewer,
        "Runs",
        html! {
            h1 { "Runs" }
            form method="get" action="/runs" id="filters" {
                label { "status " select name="status" {
                    @for s in ["", "running", "finished", "ok", "failed", "cancelled", "timed-out", "terminated", "continued-as-new", "reset"] {
                        option value=(s) selected[q.status.as_deref().unwrap_or("") == s] { (if s.is_empty() { "any" } else { s }) }
                    }
                } }
                " "
                label { "type " select name="workflow" {
                    option value="" { "any" }
                    @for t in &types { option value=(t) selected[q.workflow.as_deref() == Some(t.as_str())] { (t) } }
                } }
                " "
                label { "ID prefix " input type="text" name="id_prefix" value=(field(&q.id_prefix)); }
                " "
                button type="submit" id="apply" { "Filter" }
            }
            @match &listed {
                Err(e) => div.error { (e.message) }
                Ok(p) => {
                    table id="runs" {
                        tr { th { "ID" } th { "type" } th { "status" } th { "started" } th { "shard/run" } th { "parked" } th { "held" } }
                        @for r in &p.runs {
                            tr {
                                td { a href={ "/runs/" (path_segment(&r.id)) } { (r.id) } }
                                td { (r.workflow) @if r.version != 0 { " " span.st title="the version of its code" { "v" (r.version) } } }
                                td { (status_badge(&r.status)) }
                                td { (time(r.started_ms)) }
                                td { (r.shard) "/" (r.run) }
                                td { (if r.parked { "yes" } else { "" }) }
                                td { @if let Some(why) = &r.held { span.st title=(why) { "held" } } }
                            }
                        }
                    }
                    @if p.runs.is_empty() { p { "No runs." } }
                    @if let Some(c) = &p.next { a id="next-page" href=(next_href(c)) { "Next page →" } }
                }
            }
        },
    );
    page(&viewer, StatusCode::OK, body)
}

/// A listing's parameters as a query string.
fn query_string(q: &RunsQuery) -> String {
    let mut parts = Vec::new();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            parts.push(format!("{k}={}", crate::segment::encode(&v)));
        }
    };
    put("status", q.status.clone());
    put("workflow", q.workflow.clone());
    put("id_prefix", q.id_prefix.clone());
    put("limit", q.limit.map(|l| l.to_string()));
    put("cursor", q.cursor.clone());
    parts.join("&")
}

/// A workflow ID (or a schedule's, queue's, limit's name) as one path
/// segment, undone by [`SegmentId`]. `""`, `.` and `..` cannot be a
/// segment (a browser resolves dot segments, `%2E` spelled ones too, and
/// the route needs a non-empty one), so they, and IDs starting with `~`,
/// are written after a `~`.
fn path_segment(id: &str) -> String {
    if matches!(id, "" | "." | "..") || id.starts_with('~') {
        format!("~{}", crate::segment::encode(id))
    } else {
        crate::segment::encode(id)
    }
}

#[derive(Deserialize, Default)]
struct RunPageQuery {
    run: Option<u64>,
    notice: Option<String>,
    error: Option<String>,
}

async fn run_page(
    State(app): State<App>,
    headers: HeaderMap,
    SegmentId(id): SegmentId,
    ConsoleQuery(q): ConsoleQuery<RunPageQuery>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if viewer.access < Access::Read {
        return refused(&viewer, Access::Read);
    }
    let journal = match app.engine.journal_json(&id, q.run).await {
        Ok(j) => j,
        Err(e) => return failed(&viewer, "Run", &e),
    };
    // The description is of the latest run; an older run shows its journal.
    let described = match q.run {
        None => app.engine.describe(&id).await.ok(),
        Some(_) => None,
    };
    let chain = app.engine.chain(&id).await.unwrap_or_default();
    let records: Vec<Value> = journal["records"].as_array().cloned().unwrap_or_default();
    let state = journal["state"].as_str().unwrap_or("").to_string();
    let input = records
        .iter()
        .find(|r| r["kind"] == "Start")
        .map(|r| payload_text(&r["input"]));
    let done = records.iter().find(|r| r["kind"] == "Done");
    let last_error = records
        .iter()
        .rev()
        .find(|r| r["kind"] == "Attempt" || (r["kind"] == "Step" && r["status"] != "ok"))
        .map(|r| {
            let e = if r["kind"] == "Attempt" {
                &r["error"]
            } else {
                &r["payload"]
            };
            format!(
                "step {}: {}",
                r["name"].as_str().unwrap_or(""),
                payload_text(e)
            )
        })
        .or_else(|| {
            done.filter(|d| d["status"] != "ok")
                .map(|d| payload_text(&d["payload"]))
        });
    let steps: Vec<String> = {
        let mut seen = Vec::new();
        for r in &records {
            if r["kind"] == "Step" || r["kind"] == "Attempt" || r["kind"] == "Awaiting" {
                let n = r["name"].as_str().unwrap_or("").to_string();
                if !seen.contains(&n) {
                    seen.push(n);
                }
            }
        }
        seen
    };
    let times = StepTimes::of(&records, app.engine.now_ms());
    let notice = Notice {
        notice: q.notice.clone(),
        error: q.error.clone(),
    };
    let seg = path_segment(&id);
    let finished = done.is_some();
    let paused = described.as_ref().is_some_and(|d| d.paused);
    let body = layout(
        &viewer,
        &id,
        html! {
            (notices(&notice))
            h1 { "Run " span id="run-id" { (id) } }
            table id="header" {
                tr { th { "workflow" } td { (journal["workflow"].as_str().unwrap_or("")) } }
                @if let Some(d) = &described {
                    tr { th { "version" } td id="version" { (d.version) } }
                }
                tr { th { "status" } td id="status" {
                    @if let Some(d) = &described { (status_badge(&crate::api::status_of(d))) } @else { (status_badge(&state)) }
                    @if paused { " " span.st id="paused" { "paused" } }
                } }
                @if let Some(why) = described.as_ref().and_then(|d| d.held.as_ref()) {
                    tr { th { "held" } td id="held" { "by the replay check: " (why) " (resume once the code is fixed, or reset)" } }
                }
                @if let Some(d) = described.as_ref().filter(|d| !d.attributes.is_empty()) {
                    tr { th { "attributes" } td id="attributes" {
                        @for (i, (name, v)) in d.attributes.iter().enumerate() {
                            @if i > 0 { br; }
                            b { (name) } " = " (v.to_string())
                        }
                    } }
                }
                tr { th { "shard / run" } td { (journal["shard"]) " / " (journal["run"]) } }
                tr { th { "started" } td { (time(records.first().and_then(|r| r["started_ms"].as_u64()).unwrap_or(0))) } }
                tr { th { "finished" } td { (done.and_then(|d| d["finished_ms"].as_u64()).map_or("-".to_string(), time)) } }
                tr { th { "current step" } td id="current-step" {
                    @if let Some(s) = described.as_ref().and_then(|d| d.step.as_ref()) {
                        (s.name) " attempt " (s.attempt)
                        @if s.running { " (running)" } @if s.paused { " (paused: attempts ran out)" }
                    } @else { "-" }
                } }
                @if let Some(d) = described.as_ref().filter(|d| !d.in_flight.is_empty()) {
                    tr { th { "in flight" } td id="in-flight" {
                        @for (i, s) in d.in_flight.iter().enumerate() {
                            @if i > 0 { br; }
                            "step " b { (s.name) } " (operation " (s.seq) ") attempt " (s.attempt) " began at " (time(s.started_ms))
                        }
                    } }
                }
                tr { th { "last error" } td id="last-error" { (last_error.clone().unwrap_or_else(|| "-".into())) } }
                @if !journal["complete"].as_bool().unwrap_or(true) {
                    tr { th { "journal" } td { "finished and parked: only its start and end are kept" } }
                }
            }
            @if chain.len() > 1 {
                h2 { "Runs of this ID" }
                table id="chain" {
                    tr { th { "run" } th { "status" } th { "started" } th { "from" } }
                    @for l in &chain {
                        tr {
                            td { a href={ "/runs/" (seg) "?run=" (l.run) } { (l.run) } }
                            td { (status_badge(l.finished.map_or("running", |(s, _)| fusee::inspect::status_name(s)))) }
                            td { (time(l.started_ms)) }
                            td { @if let Some((r, c)) = l.from { (r) " (" (format!("{c:?}")) ")" } }
                        }
                    }
                }
            }
            h2 { "Input" }
            pre id="input" { (input.unwrap_or_default()) }
            @if let Some(d) = done {
                h2 { (if d["status"] == "ok" { "Result" } else { "Failure" }) }
                pre id="result" { (payload_text(&d["payload"])) }
            }
            h2 { "Timeline" }
            (step_chart(&times))
            (timeline(&records, &times))
            @if !finished {
                h2 { "Actions" }
                (run_actions(&viewer, &seg, &steps, paused))
            }
        },
    );
    page(&viewer, StatusCode::OK, body)
}

/// The forms acting on a run, each confirmed in the browser first.
fn run_actions(viewer: &Viewer, seg: &str, steps: &[String], paused: bool) -> Markup {
    let action = format!("/runs/{seg}/action");
    html! {
        form.inline method="post" action=(action) id="signal-form" data-confirm="Send this signal?" {
            input type="hidden" name="csrf" value=(viewer.csrf);
            input type="hidden" name="action" value="signal";
            label { "signal " input type="text" name="name" id="signal-name" required; }
            " "
            label { "payload (JSON) " input type="text" name="payload" id="signal-payload" placeholder="null, true, {...}" required; }
            " "
            label title="A signal sent again with the same key is recorded once: safe to retry." {
                "dedup key (optional) " input type="text" name="key" id="signal-key";
            }
            " " button type="submit" id="signal-send" { "Send signal" }
        }
        @if paused {
            (simple_action(viewer, &action, "resume", "Resume", "Resume this run?"))
        } @else {
            (simple_action(viewer, &action, "pause", "Pause", "Pause this run? No new step will start."))
        }
        (simple_action(viewer, &action, "cancel", "Cancel", "Cancel this run?"))
        (simple_action(viewer, &action, "terminate", "Terminate", "Terminate this run now? Its code runs no further."))
        @if !steps.is_empty() {
            form.inline method="post" action=(action) id="reset-form" data-confirm="Reset this run to the chosen step?" {
                input type="hidden" name="csrf" value=(viewer.csrf);
                input type="hidden" name="action" value="reset";
                label { "reset from step " select name="step" {
                    @for s in steps { option value=(s) { (s) } }
                } }
                " " button type="submit" id="reset" { "Reset" }
            }
        }
    }
}

fn simple_action(viewer: &Viewer, action: &str, name: &str, label: &str, confirm: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) id={ (name) "-form" } data-confirm=(confirm) {
            input type="hidden" name="csrf" value=(viewer.csrf);
            input type="hidden" name="action" value=(name);
            button type="submit" id=(name) { (label) }
        }
    }
}

/// A run's records as rows: what each means, how long the step attempt
/// it ends took, and its payloads.
fn timeline(records: &[Value], times: &StepTimes) -> Markup {
    // Steps' and timers' names by sequence number, for the records that
    // name only the sequence (a timer firing, a wait ending).
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    for r in records {
        if let (Some(seq), Some(name)) = (r["seq"].as_u64(), r["name"].as_str()) {
            names.entry(seq).or_insert_with(|| name.to_string());
        }
    }
    let name_of = |r: &Value| {
        r["seq"]
            .as_u64()
            .and_then(|s| names.get(&s).cloned())
            .unwrap_or_default()
    };
    html! {
        table.timeline id="timeline" {
            tr { th { "#" } th { "record" } th { "what" } th { "took" } th { "payload" } }
            @for (i, r) in records.iter().enumerate() {
                @let kind = r["kind"].as_str().unwrap_or("?");
                tr class={ "rec rec-" (kind) } {
                    td { (i + 1) }
                    td.k { (kind) }
                    td { (describe_record(kind, r, &name_of(r))) }
                    td.took { (times.took(i)) }
                    td { (record_payload(kind, r)) }
                }
            }
        }
    }
}

/// How a step attempt ended, as the journal says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// Its `Step`: the step's result, ok or not.
    Result { ok: bool },
    /// Its `Attempt`: it failed and is retried (or paused).
    Retried,
    /// Its `Began` has no end yet and the run goes on.
    Running,
    /// Its `Began` has no end, and the run ended or the attempt began
    /// again (a crash or a stop cut it).
    Cut,
}

impl End {
    /// The word a bar's tooltip and colour go by.
    fn name(self) -> &'static str {
        match self {
            End::Result { ok: true } => "ok",
            End::Result { ok: false } => "failed",
            End::Retried => "failed, retried",
            End::Running => "running",
            End::Cut => "cut",
        }
    }

    fn colour(self) -> &'static str {
        match self {
            End::Result { ok: true } => "#1a7f37",
            End::Result { ok: false } => "#cf222e",
            End::Retried => "#bc4c00",
            End::Running => "#1f6feb",
            End::Cut => "#6b7785",
        }
    }
}

/// One attempt of a step: when it began (its `Began`) and ended (its
/// `Step` or `Attempt`), each absent in journals written before the
/// engine recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AttemptTime {
    attempt: u64,
    started_ms: Option<u64>,
    ended_ms: Option<u64>,
    end: End,
    /// For a running attempt: the engine's clock when the page was made.
    now_ms: u64,
}

impl AttemptTime {
    /// How long it ran: from its start to its end, or to now while it
    /// runs; `None` when a time is missing (never a made-up one).
    fn ms(&self) -> Option<u64> {
        let start = self.started_ms?;
        let end = match self.end {
            End::Running => self.now_ms,
            _ => self.ended_ms?,
        };
        end.checked_sub(start)
    }
}

/// A step's attempts, in the order they began.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StepTime {
    seq: u64,
    name: String,
    attempts: Vec<AttemptTime>,
}

impl StepTime {
    /// The time its attempts ran, summed over those with a duration, and
    /// how many have one.
    fn total(&self) -> (u64, usize) {
        let known: Vec<u64> = self.attempts.iter().filter_map(AttemptTime::ms).collect();
        (known.iter().sum(), known.len())
    }

    /// From its first attempt's start to its last one's end (the retry
    /// waits included), when both are known and differ from the total.
    fn span(&self) -> Option<u64> {
        let first = self.attempts.first()?;
        let last = self.attempts.last()?;
        let end = match last.end {
            End::Running => last.now_ms,
            _ => last.ended_ms?,
        };
        end.checked_sub(first.started_ms?)
    }
}

/// Every step attempt of a run, read from its journal: the durations the
/// timeline and the step chart show.
#[derive(Debug, Default)]
struct StepTimes {
    steps: Vec<StepTime>,
    /// Record index -> (step, attempt) it begins or ends, and whether
    /// it ends it (a `Step` or `Attempt`, not a `Began`).
    at: BTreeMap<usize, (usize, usize, bool)>,
    /// Record indexes of `Step` records: their row shows the step's total.
    results: Vec<usize>,
}

impl StepTimes {
    /// Reads `records` (the journal's, in order); `now_ms` is the engine's
    /// clock, for attempts still running.
    fn of(records: &[Value], now_ms: u64) -> Self {
        let mut t = StepTimes::default();
        let mut by_seq: BTreeMap<u64, usize> = BTreeMap::new();
        for (i, r) in records.iter().enumerate() {
            let kind = r["kind"].as_str().unwrap_or("");
            if kind == "Done" {
                for s in &mut t.steps {
                    for a in &mut s.attempts {
                        if a.end == End::Running {
                            a.end = End::Cut;
                        }
                    }
                }
                continue;
            }
            if !matches!(kind, "Began" | "Step" | "Attempt") {
                continue;
            }
            let (Some(seq), Some(attempt)) = (r["seq"].as_u64(), r["attempt"].as_u64()) else {
                continue;
            };
            let step = *by_seq.entry(seq).or_insert_with(|| {
                t.steps.push(StepTime {
                    seq,
                    name: r["name"].as_str().unwrap_or("").to_string(),
                    attempts: Vec::new(),
                });
                t.steps.len() - 1
            });
            let attempts = &mut t.steps[step].attempts;
            // The attempt this record ends: the latest one begun and not
            // ended, if it has this number.
            let open = attempts
                .iter()
                .rposition(|a| a.end == End::Running && a.attempt == attempt);
            if kind == "Began" {
                // A later `Began` supersedes one with no end: it was cut.
                for a in attempts.iter_mut() {
                    if a.end == End::Running {
                        a.end = End::Cut;
                    }
                }
                attempts.push(AttemptTime {
                    attempt,
                    started_ms: r["started_ms"].as_u64(),
                    ended_ms: None,
                    end: End::Running,
                    now_ms,
                });
                t.at.insert(i, (step, attempts.len() - 1, false));
                continue;
            }
            let end = if kind == "Step" {
                t.results.push(i);
                End::Result {
                    ok: r["status"] == "ok",
                }
            } else {
                End::Retried
            };
            let ended_ms = r["ended_ms"].as_u64();
            let a = match open {
                Some(a) => a,
                None => {
                    // No `Began`: a journal from before the engine wrote them.
                    attempts.push(AttemptTime {
                        attempt,
                        started_ms: None,
                        ended_ms: None,
                        end,
                        now_ms,
                    });
                    attempts.len() - 1
                }
            };
            attempts[a].ended_ms = ended_ms;
            attempts[a].end = end;
            t.at.insert(i, (step, a, true));
        }
        t
    }

    /// The "took" cell of record `i`: an ending record's attempt duration
    /// (and a `Step`'s total for the step), a running attempt's time so
    /// far on its `Began`; nothing where a time is missing.
    fn took(&self, i: usize) -> Markup {
        let Some(&(s, a, ends)) = self.at.get(&i) else {
            return html! {};
        };
        let step = &self.steps[s];
        let attempt = &step.attempts[a];
        let result = self.results.contains(&i);
        html! {
            @match (attempt.end, attempt.ms()) {
                (End::Running, Some(ms)) => { "running for " b { (duration(ms)) } }
                // An ended attempt's time is on its end's row.
                (End::Running | End::Cut, _) => {}
                _ if !ends => {}
                (_, Some(ms)) => { b { (duration(ms)) } }
                (_, None) => { span title="recorded before the engine kept step end times" { "-" } }
            }
            @if result && step.attempts.len() > 1 {
                @let (total, known) = step.total();
                @if known > 0 {
                    br;
                    span.step-total {
                        "step total " b { (duration(total)) } " over " (known) " attempts"
                        @if let Some(span) = step.span().filter(|s| *s > total) {
                            " (" (duration(span)) " with the waits between)"
                        }
                    }
                }
            }
        }
    }
}

/// A duration for people: ms under a second, seconds with ms under a
/// minute, then minutes, hours and days.
fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{}.{:03} s", s, ms % 1000),
        60_000..3_600_000 => format!("{} min {}.{:03} s", s / 60, s % 60, ms % 1000),
        3_600_000..86_400_000 => format!("{} h {} min {} s", s / 3600, s / 60 % 60, s % 60),
        _ => format!("{} d {} h {} min", s / 86_400, s / 3600 % 24, s / 60 % 60),
    }
}

/// One attempt's bar in [`step_chart`]: where it starts, how wide, and
/// what it shows.
struct Bar<'a> {
    x: f64,
    width: f64,
    attempt: &'a AttemptTime,
    ms: u64,
}

/// One step's row in [`step_chart`].
struct ChartRow<'a> {
    step: &'a StepTime,
    bars: Vec<Bar<'a>>,
    /// Where its total's text begins, after its bars.
    text_x: f64,
    total: u64,
}

/// The steps' durations as bars (inline SVG, as the overview's charts):
/// a row per step, its attempts side by side, each as long as it ran
/// (the longest step spans the width), coloured by how it ended; the
/// step's total at the end. Attempts without both times get no bar.
fn step_chart(times: &StepTimes) -> Markup {
    let (label_w, bar_w, row_h) = (160.0f64, 520.0f64, 22.0f64);
    // Per step with a duration: its bars, where its total's text goes,
    // and the total.
    let rows: Vec<ChartRow<'_>> = {
        let timed: Vec<&StepTime> = times.steps.iter().filter(|s| s.total().1 > 0).collect();
        let longest = timed.iter().map(|s| s.total().0).max().unwrap_or(0).max(1);
        timed
            .into_iter()
            .map(|step| {
                let mut x = label_w;
                let mut bars = Vec::new();
                for a in &step.attempts {
                    if let Some(ms) = a.ms() {
                        let width = (bar_w * ms as f64 / longest as f64).max(1.0);
                        bars.push(Bar {
                            x,
                            width,
                            attempt: a,
                            ms,
                        });
                        x += width;
                    }
                }
                ChartRow {
                    step,
                    bars,
                    text_x: x + 6.0,
                    total: step.total().0,
                }
            })
            .collect()
    };
    if rows.is_empty() {
        return html! {};
    }
    let w = label_w + bar_w + 150.0;
    let legend_y = row_h * rows.len() as f64 + 8.0;
    let h = legend_y + 18.0;
    let legend = [
        End::Result { ok: true },
        End::Result { ok: false },
        End::Retried,
        End::Running,
    ];
    html! {
        svg id="step-durations" width=(w) height=(h) viewBox={ "0 0 " (w) " " (h) }
            xmlns="http://www.w3.org/2000/svg" role="img" {
            title { "how long each step's attempts ran" }
            rect x="0" y="0" width=(w) height=(h) fill="#fff" stroke="#e3e6ea" {}
            @for (i, row) in rows.iter().enumerate() {
                @let y = 4.0 + i as f64 * row_h;
                g class="step-row" data-seq=(row.step.seq) {
                    text x="6" y=(y + 15.0) font-size="12" fill="#1d232a" { (row.step.name) }
                    @for b in &row.bars {
                        rect class="attempt-bar" x=(format!("{:.1}", b.x)) y=(y + 3.0) width=(format!("{:.1}", b.width))
                            height=(row_h - 8.0) fill=(b.attempt.end.colour()) stroke="#fff" {
                            title { "attempt " (b.attempt.attempt) ": " (duration(b.ms)) " (" (b.attempt.end.name()) ")" }
                        }
                    }
                    text x=(format!("{:.1}", row.text_x)) y=(y + 15.0) font-size="11" fill="#57606a" { (duration(row.total)) }
                }
            }
            @for (i, end) in legend.iter().enumerate() {
                @let x = label_w + i as f64 * 110.0;
                rect x=(x) y=(legend_y) width="10" height="10" fill=(end.colour()) {}
                text x=(x + 14.0) y=(legend_y + 9.0) font-size="11" fill="#57606a" { (end.name()) }
            }
        }
    }
}

fn describe_record(kind: &str, r: &Value, seq_name: &str) -> Markup {
    let s = |f: &str| r[f].as_str().unwrap_or("").to_string();
    let n = |f: &str| r[f].as_u64().unwrap_or(0);
    html! {
        @match kind {
            "Start" => { "started " (s("wtype")) " at " (time(n("started_ms")))
                @if let Some(from) = r["from"].as_object() { " (from run " (from.get("run").cloned().unwrap_or_default()) ")" } }
            "Began" => { "step " b { (s("name")) } " attempt " (n("attempt")) " began at " (time(n("started_ms"))) }
            "Step" => { "step " b { (s("name")) } " attempt " (n("attempt")) ": " (status_badge(&s("status"))) }
            "Attempt" => { "step " b { (s("name")) } " attempt " (n("attempt")) " failed; retry at " (time(n("retry_at_ms"))) }
            "Awaiting" => { "step " b { (s("name")) } " attempt " (n("attempt")) " awaits an outside completion" }
            "Completed" => { "step " b { (seq_name) } " attempt " (n("attempt")) " completed: " (status_badge(&s("status"))) }
            "Timer" => { "timer " b { (s("name")) } " fires at " (time(n("fire_at_ms"))) }
            "Fired" => { "timer " b { (seq_name) } " fired" }
            "Signal" => { "signal " b { (s("name")) } " received" }
            "Wait" => { "waits for signal " b { (s("name")) }
                @if n("deadline_ms") > 0 { " until " (time(n("deadline_ms"))) } }
            "Waited" => { "wait for " b { (seq_name) } " ended: " (r["outcome"].to_string()) }
            "Child" => { "child " a href={ "/runs/" (path_segment(&s("id"))) } { (s("id")) } " (" (s("wtype")) ") started" }
            "ChildDone" => { "child " b { (seq_name) } " ended: " (status_badge(&s("status"))) }
            "Send" => { "sent signal " b { (s("name")) } " to " a href={ "/runs/" (path_segment(&s("target"))) } { (s("target")) } }
            "Cancel" => { "cancel asked" }
            "Update" => { "update " b { (s("name")) } " (" (s("id")) ")" }
            "UpdateDone" => { "update #" (n("ordinal")) " done: " (status_badge(&s("status"))) }
            "Done" => { "finished " (status_badge(&s("status"))) " at " (time(n("finished_ms"))) }
            "Attributes" => { "attributes set" }
            "Patch" => { "patch " (s("id")) }
            _ => { (kind) }
        }
    }
}

fn record_payload(kind: &str, r: &Value) -> Markup {
    let field = match kind {
        "Start" | "Child" => "input",
        "Attempt" => "error",
        "Cancel" => "reason",
        "Value" => "value",
        _ => "payload",
    };
    match r.get(field) {
        Some(v) if v.is_object() => html! { pre { (payload_text(v)) } },
        _ => html! {},
    }
}

#[derive(Deserialize)]
struct ActionForm {
    #[serde(default)]
    csrf: String,
    action: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    payload: String,
    /// A signal's deduplication key; empty = none.
    #[serde(default)]
    key: String,
    #[serde(default)]
    step: String,
    #[serde(default)]
    note: String,
}

/// Checks a form's rights and CSRF token; the refusal page if they fail.
fn check_form(viewer: &Viewer, csrf: &str) -> Option<Response> {
    if viewer.access < Access::Admin {
        return Some(refused(viewer, Access::Admin));
    }
    if !viewer.csrf_ok(csrf) {
        let body = layout(
            viewer,
            "Refused",
            html! { div.error id="refused" { "Refused: the form's CSRF token is missing or stale; reload the page and try again." } },
        );
        return Some(page(viewer, StatusCode::FORBIDDEN, body));
    }
    None
}

/// Back to `page` with a notice or an error.
fn back(page: &str, outcome: Result<String, String>) -> Response {
    let sep = if page.contains('?') { '&' } else { '?' };
    let to = match outcome {
        Ok(m) => format!("{page}{sep}notice={}", crate::segment::encode(&m)),
        Err(m) => format!("{page}{sep}error={}", crate::segment::encode(&m)),
    };
    Redirect::to(&to).into_response()
}

async fn run_action(
    State(app): State<App>,
    headers: HeaderMap,
    SegmentId(id): SegmentId,
    ConsoleForm(f): ConsoleForm<ActionForm>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if let Some(r) = check_form(&viewer, &f.csrf) {
        return r;
    }
    let e = &app.engine;
    let outcome = match f.action.as_str() {
        // No default payload: one the signal's type does not decode
        // would fail the run once recorded.
        "signal" if f.payload.trim().is_empty() => {
            return back(
                &format!("/runs/{}", path_segment(&id)),
                Err("the payload is empty: give the signal's JSON payload (null for none)".into()),
            );
        }
        "signal" => match serde_json::from_str::<Value>(&f.payload) {
            Ok(v) => e
                .signal_json(
                    &id,
                    &f.name,
                    &v,
                    Some(f.key.as_str()).filter(|k| !k.is_empty()),
                )
                .await
                .map(|()| format!("signal {} sent", f.name)),
            Err(err) => {
                return back(
                    &format!("/runs/{}", path_segment(&id)),
                    Err(format!("the payload is not JSON: {err}")),
                );
            }
        },
        "pause" => e.pause(&id).await.map(|()| "paused".to_string()),
        "resume" => e.resume(&id).await.map(|()| "resumed".to_string()),
        "cancel" => e
            .cancel(&id, "operator (console)")
            .await
            .map(|()| "cancel asked".to_string()),
        "terminate" => e
            .terminate(&id, "operator (console)")
            .await
            .map(|()| "terminated".to_string()),
        "reset" => e
            .reset(&id, &f.step, "operator (console)")
            .await
            .map(|r| format!("reset from step {}: new run {}", f.step, r.run)),
        other => Err(fusee::Error::Config(format!("unknown action {other:?}"))),
    };
    back(
        &format!("/runs/{}", path_segment(&id)),
        outcome.map_err(|e| e.to_string()),
    )
}

async fn schedules_page(
    State(app): State<App>,
    headers: HeaderMap,
    ConsoleQuery(n): ConsoleQuery<Notice>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if viewer.access < Access::Read {
        return refused(&viewer, Access::Read);
    }
    let s = app.engine.schedules();
    let ids = match s.list().await {
        Ok(ids) => ids,
        Err(e) => return failed(&viewer, "Schedules", &e),
    };
    let mut rows = Vec::new();
    for id in ids {
        if let Ok(d) = s.describe(&id).await {
            rows.push(crate::api::schedule_info(d));
        }
    }
    let body = layout(
        &viewer,
        "Schedules",
        html! {
            (notices(&n))
            h1 { "Schedules" }
            @if rows.is_empty() { p { "No schedules." } }
            table id="schedules" {
                tr { th { "ID" } th { "workflow" } th { "spec" } th { "zone" } th { "state" } th { "next fire" } th { "fired / skipped" } th { "last error" } th { "actions" } }
                @for d in &rows {
                    @let action = format!("/schedules/{}/action", path_segment(&d.id));
                    tr {
                        td { (d.id) } td { (d.workflow) } td { (d.spec) } td { (d.time_zone) }
                        td { (if d.paused { "paused" } else { "active" }) @if let Some(note) = &d.note { " (" (note) ")" } }
                        td { (d.next_fires_ms.first().map_or("-".to_string(), |t| time(*t))) }
                        td { (d.fired) " / " (d.skipped) }
                        td { (d.last_error.clone().unwrap_or_default()) }
                        td {
                            @if d.paused { (simple_action(&viewer, &action, "resume", "Resume", "Resume this schedule?")) }
                            @else {
                                (simple_action(&viewer, &action, "trigger", "Trigger now", "Fire this schedule now?"))
                                (simple_action(&viewer, &action, "pause", "Pause", "Pause this schedule?"))
                            }
                            (simple_action(&viewer, &action, "delete", "Delete", "Delete this schedule?"))
                        }
                    }
                }
            }
        },
    );
    page(&viewer, StatusCode::OK, body)
}

async fn schedule_action(
    State(app): State<App>,
    headers: HeaderMap,
    SegmentId(id): SegmentId,
    ConsoleForm(f): ConsoleForm<ActionForm>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if let Some(r) = check_form(&viewer, &f.csrf) {
        return r;
    }
    let s = app.engine.schedules();
    let outcome = match f.action.as_str() {
        "pause" => s
            .pause(&id, &f.note)
            .await
            .map(|()| format!("schedule {id} paused")),
        "resume" => s
            .resume(&id)
            .await
            .map(|()| format!("schedule {id} resumed")),
        "trigger" => s
            .trigger(&id)
            .await
            .map(|()| format!("schedule {id} triggered")),
        "delete" => s
            .delete(&id)
            .await
            .map(|()| format!("schedule {id} deleted")),
        other => Err(fusee::Error::Config(format!("unknown action {other:?}"))),
    };
    back("/schedules", outcome.map_err(|e| e.to_string()))
}

async fn queues_page(
    State(app): State<App>,
    headers: HeaderMap,
    ConsoleQuery(n): ConsoleQuery<Notice>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if viewer.access < Access::Read {
        return refused(&viewer, Access::Read);
    }
    let q = app.engine.queues();
    let names = match q.list().await {
        Ok(n) => n,
        Err(e) => return failed(&viewer, "Queues", &e),
    };
    let mut rows = Vec::new();
    for name in names {
        if let Ok(d) = q.describe(&name).await {
            rows.push(crate::api::queue_info(d));
        }
    }
    let body = layout(
        &viewer,
        "Queues",
        html! {
            (notices(&n))
            h1 { "Queues" }
            @if rows.is_empty() { p { "No queues." } }
            table id="queues" {
                tr { th { "name" } th { "workflow" } th { "state" } th { "pending" } th { "running" } th { "enqueued / started / completed / failed" } th { "limits" } th { "last error" } th { "actions" } }
                @for d in &rows {
                    @let action = format!("/queues/{}/action", path_segment(&d.name));
                    tr {
                        td { (d.name) } td { (d.workflow) }
                        td { (if d.paused { "paused" } else { "active" }) }
                        td { (d.pending) } td { (d.running) }
                        td { (d.enqueued) " / " (d.started) " / " (d.completed) " / " (d.failed) }
                        td {
                            @if let Some(c) = d.concurrency { "at most " (c) " at once " }
                            @if let Some((n, per)) = d.rate { (n) " per " (per) " ms" }
                        }
                        td { (d.last_error.clone().unwrap_or_default()) }
                        td {
                            @if d.paused { (simple_action(&viewer, &action, "resume", "Resume", "Resume this queue?")) }
                            @else { (simple_action(&viewer, &action, "pause", "Pause", "Pause this queue?")) }
                            (simple_action(&viewer, &action, "delete", "Delete", "Delete this queue and the items waiting in it?"))
                        }
                    }
                }
            }
        },
    );
    page(&viewer, StatusCode::OK, body)
}

async fn queue_action(
    State(app): State<App>,
    headers: HeaderMap,
    SegmentId(name): SegmentId,
    ConsoleForm(f): ConsoleForm<ActionForm>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if let Some(r) = check_form(&viewer, &f.csrf) {
        return r;
    }
    let q = app.engine.queues();
    let outcome = match f.action.as_str() {
        "pause" => q
            .pause(&name)
            .await
            .map(|()| format!("queue {name} paused")),
        "resume" => q
            .resume(&name)
            .await
            .map(|()| format!("queue {name} resumed")),
        "delete" => q
            .delete(&name)
            .await
            .map(|n| format!("queue {name} deleted ({n} items dropped)")),
        other => Err(fusee::Error::Config(format!("unknown action {other:?}"))),
    };
    back("/queues", outcome.map_err(|e| e.to_string()))
}

async fn limits_page(
    State(app): State<App>,
    headers: HeaderMap,
    ConsoleQuery(n): ConsoleQuery<Notice>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if viewer.access < Access::Read {
        return refused(&viewer, Access::Read);
    }
    let l = app.engine.limits();
    let names = match l.list().await {
        Ok(n) => n,
        Err(e) => return failed(&viewer, "Limits", &e),
    };
    let mut rows = Vec::new();
    for name in names {
        if let Ok(d) = l.describe(&name).await {
            rows.push(crate::api::limit_info(d));
        }
    }
    let body = layout(
        &viewer,
        "Limits",
        html! {
            (notices(&n))
            h1 { "Step limits" }
            @if rows.is_empty() { p { "No step limits." } }
            table id="limits" {
                tr { th { "name" } th { "limits" } th { "state" } th { "holders" } th { "waiting" } th { "granted" } th { "actions" } }
                @for d in &rows {
                    @let action = format!("/limits/{}/action", path_segment(&d.name));
                    tr {
                        td { (d.name) }
                        td {
                            @if let Some(c) = d.concurrency { "at most " (c) " at once " }
                            @if let Some((n, per)) = d.rate { (n) " per " (per) " ms" }
                        }
                        td { (if d.paused { "paused" } else { "active" }) @if let Some(note) = &d.note { " (" (note) ")" } }
                        td { (d.holders.join(", ")) } td { (d.waiting) } td { (d.granted) }
                        td {
                            @if d.paused { (simple_action(&viewer, &action, "resume", "Resume", "Resume this step limit?")) }
                            @else { (simple_action(&viewer, &action, "pause", "Pause", "Pause this step limit? Its steps wait until it is resumed.")) }
                            (simple_action(&viewer, &action, "delete", "Delete", "Delete this step limit?"))
                        }
                    }
                }
            }
        },
    );
    page(&viewer, StatusCode::OK, body)
}

async fn limit_action(
    State(app): State<App>,
    headers: HeaderMap,
    SegmentId(name): SegmentId,
    ConsoleForm(f): ConsoleForm<ActionForm>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if let Some(r) = check_form(&viewer, &f.csrf) {
        return r;
    }
    let l = app.engine.limits();
    let outcome = match f.action.as_str() {
        "pause" => l
            .pause(&name, &f.note)
            .await
            .map(|()| format!("limit {name} paused")),
        "resume" => l
            .resume(&name)
            .await
            .map(|()| format!("limit {name} resumed")),
        "delete" => l
            .delete(&name)
            .await
            .map(|()| format!("limit {name} deleted")),
        other => Err(fusee::Error::Config(format!("unknown action {other:?}"))),
    };
    back("/limits", outcome.map_err(|e| e.to_string()))
}

async fn login_page(
    State(app): State<App>,
    headers: HeaderMap,
    ConsoleQuery(n): ConsoleQuery<Notice>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    let body = layout(
        &viewer,
        "Log in",
        html! {
            (notices(&n))
            h1 { "Log in" }
            p { "Give the server's read token (to look) or admin token (to act)." }
            form method="post" action="/login" id="login" {
                input type="hidden" name="csrf" value=(viewer.csrf);
                label { "token " input type="password" name="token" id="token" autocomplete="off" required; }
                " " button type="submit" id="login-submit" { "Log in" }
            }
        },
    );
    page(&viewer, StatusCode::OK, body)
}

#[derive(Deserialize)]
struct LoginForm {
    #[serde(default)]
    csrf: String,
    token: String,
}

async fn login(
    State(app): State<App>,
    headers: HeaderMap,
    ConsoleForm(f): ConsoleForm<LoginForm>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if !viewer.csrf_ok(&f.csrf) {
        return back("/login", Err("the form was stale: try again".into()));
    }
    if app.tokens.access(Some(&f.token)) == Access::None {
        return back("/login", Err("that token is not this server's".into()));
    }
    let mut resp = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("{TOKEN_COOKIE}={}{COOKIE_ATTRS}", hex(&f.token)))
    {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

#[derive(Deserialize)]
struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

async fn logout(
    State(app): State<App>,
    headers: HeaderMap,
    ConsoleForm(f): ConsoleForm<LogoutForm>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if !viewer.csrf_ok(&f.csrf) {
        return back("/", Err("the form was stale: try again".into()));
    }
    let mut resp = Redirect::to("/login").into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("{TOKEN_COOKIE}=; Max-Age=0{COOKIE_ATTRS}")) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn began(seq: u64, attempt: u64, started_ms: u64) -> Value {
        json!({"kind": "Began", "run": 1, "seq": seq, "name": format!("s{seq}"),
            "attempt": attempt, "started_ms": started_ms})
    }

    fn step(seq: u64, attempt: u64, ok: bool, ended_ms: Option<u64>) -> Value {
        let mut r = json!({"kind": "Step", "run": 1, "seq": seq, "name": format!("s{seq}"),
            "attempt": attempt, "status": if ok { "ok" } else { "failed" },
            "payload": {"json": 1}});
        if let Some(ms) = ended_ms {
            r["ended_ms"] = json!(ms);
        }
        r
    }

    fn retried(seq: u64, attempt: u64, ended_ms: u64) -> Value {
        json!({"kind": "Attempt", "run": 1, "seq": seq, "name": format!("s{seq}"),
            "attempt": attempt, "retry_at_ms": ended_ms + 100, "error": {"json": "e"},
            "ended_ms": ended_ms})
    }

    fn ms_of(t: &StepTimes, seq: u64) -> Vec<(u64, End, Option<u64>)> {
        let s = t.steps.iter().find(|s| s.seq == seq).expect("the step");
        s.attempts
            .iter()
            .map(|a| (a.attempt, a.end, a.ms()))
            .collect()
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(duration(0), "0 ms");
        assert_eq!(duration(999), "999 ms");
        assert_eq!(duration(2_345), "2.345 s");
        assert_eq!(duration(61_007), "1 min 1.007 s");
        assert_eq!(duration(3_723_000), "1 h 2 min 3 s");
        assert_eq!(duration(90_061_000), "1 d 1 h 1 min");
    }

    /// Each attempt runs from its `Began` to its end; one still running
    /// to now; one cut (begun again, or its run ended) or missing a time
    /// (a journal from before the times) has no duration at all.
    #[test]
    fn attempts_run_from_their_began_to_their_end() {
        let records = vec![
            json!({"kind": "Start", "run": 1, "started_ms": 900}),
            // s1: fails after 500 ms, then succeeds after 600 ms.
            began(1, 1, 1_000),
            retried(1, 1, 1_500),
            began(2, 1, 1_600),
            began(1, 2, 2_000),
            step(1, 2, true, Some(2_600)),
            // s2: fails for good 60 ms in.
            step(2, 1, false, Some(1_660)),
            // s3: a journal from before `Began` and end times.
            step(3, 1, true, None),
            // s4: cut, begun again, running now.
            began(4, 1, 3_000),
            began(4, 1, 4_000),
        ];
        let t = StepTimes::of(&records, 9_000);
        assert_eq!(
            ms_of(&t, 1),
            [
                (1, End::Retried, Some(500)),
                (2, End::Result { ok: true }, Some(600))
            ]
        );
        assert_eq!(ms_of(&t, 2), [(1, End::Result { ok: false }, Some(60))]);
        assert_eq!(ms_of(&t, 3), [(1, End::Result { ok: true }, None)]);
        assert_eq!(
            ms_of(&t, 4),
            [(1, End::Cut, None), (1, End::Running, Some(5_000))]
        );
        let s1 = t.steps.iter().find(|s| s.seq == 1).unwrap();
        assert_eq!(s1.total(), (1_100, 2));
        assert_eq!(s1.span(), Some(1_600), "the retry wait included");
        // The cells: the retried attempt's, the result's with the total,
        // the old record's dash, the running attempt's time so far.
        let took = |i: usize| t.took(i).into_string();
        assert_eq!(took(1), "", "an ended attempt's Began");
        assert_eq!(took(4), "", "an ended attempt's Began");
        assert_eq!(took(2), "<b>500 ms</b>");
        assert_eq!(took(6), "<b>60 ms</b>", "one attempt: no total");
        assert_eq!(
            took(5),
            "<b>600 ms</b><br><span class=\"step-total\">step total <b>1.100 s</b> over 2 \
             attempts (1.600 s with the waits between)</span>"
        );
        assert!(took(7).contains(">-</span>"), "{}", took(7));
        assert_eq!(took(8), "", "a cut attempt's Began");
        assert_eq!(took(9), "running for <b>5.000 s</b>");
        assert_eq!(took(0), "");
        // The chart: a row per step with a duration, a bar per attempt
        // with one, as long as it ran (s4's 5 s is the longest: 520 px).
        let chart = step_chart(&t).into_string();
        assert_eq!(chart.matches("class=\"step-row\"").count(), 3, "{chart}");
        assert_eq!(chart.matches("class=\"attempt-bar\"").count(), 4, "{chart}");
        assert!(chart.contains("width=\"52.0\""), "500 ms of 5 s: {chart}");
        assert!(chart.contains("width=\"520.0\""), "{chart}");
        assert!(chart.contains("attempt 2: 600 ms (ok)"), "{chart}");

        // The run's end cuts what was still running.
        let mut done = records.clone();
        done.push(json!({"kind": "Done", "run": 1, "status": "ok", "finished_ms": 9_500}));
        let t = StepTimes::of(&done, 99_000);
        assert_eq!(ms_of(&t, 4), [(1, End::Cut, None), (1, End::Cut, None)]);
        // No times at all: no chart.
        let old = vec![step(3, 1, true, None)];
        assert_eq!(step_chart(&StepTimes::of(&old, 0)).into_string(), "");
    }
}
