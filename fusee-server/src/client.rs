//! [`Client`]: the API's verbs from Rust, over HTTP (reqwest).
//!
//! ```no_run
//! # async fn demo() -> Result<(), fusee_server::ClientError> {
//! use fusee_server::Client;
//! use fusee_server::model::RunsQuery;
//!
//! let client = Client::new("http://127.0.0.1:7700")?.token("s3cret");
//! let page = client.runs(&RunsQuery { status: Some("running".into()), ..Default::default() }).await?;
//! for run in &page.runs {
//!     println!("{} {} {}", run.id, run.workflow, run.status);
//! }
//! client.signal("order-42", "approved", &serde_json::json!(true)).await?;
//! # Ok(()) }
//! ```
//!
//! Every method sends one request and returns the reply's body typed; an
//! error reply is [`ClientError::Api`] with the server's `kind` and
//! `message` (for engine errors, the [`fusee::Error`]'s text).

use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::model::{
    BackupReply, BackupRequest, BulkReply, BulkRequest, CancelRequest, ChainLink, Deleted,
    Description, ErrorBody, ExecuteRequest, LimitInfo, PauseRequest, QueryRequest, QueueInfo,
    ReasonRequest, ResetRequest, ResultReply, RunsPage, RunsQuery, ScheduleInfo, ShardInfo,
    SignalRequest, StartReply, StartRequest, UpdateRequest, ValueReply,
};

/// Why a [`Client`] call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error.
    #[error("{message} (HTTP {status}, {kind})")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The error's kind ([`ErrorBody::kind`]).
        kind: String,
        /// Its message ([`ErrorBody::message`]).
        message: String,
    },
    /// The request did not reach the server, or its reply did not arrive.
    #[error("request to {url} failed: {source}")]
    Transport {
        /// The URL asked.
        url: String,
        /// reqwest's error.
        source: reqwest::Error,
    },
    /// The reply's body was not what the API documents.
    #[error("reply from {url} does not parse: {detail}")]
    Decode {
        /// The URL asked.
        url: String,
        /// What did not parse.
        detail: String,
    },
    /// The server's address is not a base URL (`http://host:port`).
    #[error("{url:?} is not a server URL: {detail}")]
    BadUrl {
        /// The text given.
        url: String,
        /// Why.
        detail: String,
    },
    /// A workflow ID (or name) no URL can carry as a path segment: `.`
    /// or `..`, which a URL reads as a dot segment, so the request would
    /// name another resource. The engine refuses such IDs at start; a
    /// store made before that may hold one: reach it offline.
    #[error("{segment:?} cannot be a URL path segment (a URL reads it as a dot segment)")]
    Unaddressable {
        /// The segment.
        segment: String,
    },
}

impl ClientError {
    /// The server's error kind, for an [`Api`](Self::Api) error.
    pub fn kind(&self) -> Option<&str> {
        match self {
            Self::Api { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// The HTTP status, for an [`Api`](Self::Api) error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A client of one Fusee server. Cheap to clone (one connection pool).
#[derive(Clone, Debug)]
pub struct Client {
    base: Url,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// A client of the server at `base` (`http://127.0.0.1:7700`; a path
    /// after the host is kept as a prefix), without a token.
    pub fn new(base: &str) -> Result<Self, ClientError> {
        let bad = |detail: String| ClientError::BadUrl {
            url: base.to_string(),
            detail,
        };
        let mut url = Url::parse(base).map_err(|e| bad(e.to_string()))?;
        if url.cannot_be_a_base() || !matches!(url.scheme(), "http" | "https") {
            return Err(bad("not an http:// URL".into()));
        }
        if !url.path().ends_with('/') {
            let path = format!("{}/", url.path());
            url.set_path(&path);
        }
        Ok(Self {
            base: url,
            token: None,
            http: reqwest::Client::new(),
        })
    }

    /// The same client, sending `token` as its bearer token (the server's
    /// read or admin token).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    /// `GET /healthz`: whether the server answers.
    pub async fn health(&self) -> Result<(), ClientError> {
        self.call::<(), Value>(Method::GET, &["healthz"], None, None)
            .await
            .map(drop)
    }

    /// `GET /readyz`: whether every shard the engine owns is open.
    pub async fn ready(&self) -> Result<(), ClientError> {
        self.call::<(), Value>(Method::GET, &["readyz"], None, None)
            .await
            .map(drop)
    }

    /// A page of runs passing `query`, newest first.
    pub async fn runs(&self, query: &RunsQuery) -> Result<RunsPage, ClientError> {
        let mut pairs = Vec::new();
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                pairs.push((k.to_string(), v));
            }
        };
        put("status", query.status.clone());
        put("workflow", query.workflow.clone());
        put("id_prefix", query.id_prefix.clone());
        put("attr", query.attr.clone());
        put(
            "started_after_ms",
            query.started_after_ms.map(|v| v.to_string()),
        );
        put(
            "started_before_ms",
            query.started_before_ms.map(|v| v.to_string()),
        );
        put(
            "finished_after_ms",
            query.finished_after_ms.map(|v| v.to_string()),
        );
        put(
            "finished_before_ms",
            query.finished_before_ms.map(|v| v.to_string()),
        );
        put("limit", query.limit.map(|v| v.to_string()));
        put("cursor", query.cursor.clone());
        self.call::<(), _>(Method::GET, &["api", "v1", "runs"], Some(&pairs), None)
            .await
    }

    /// Where workflow `id`'s latest run stands.
    pub async fn describe(&self, id: &str) -> Result<Description, ClientError> {
        self.get(&["api", "v1", "runs", id]).await
    }

    /// Run `run` of `id` (its latest when `None`) as a `fusee-journal`
    /// version 1 document (`fusee::inspect::journal`).
    pub async fn journal(&self, id: &str, run: Option<u64>) -> Result<Value, ClientError> {
        let pairs: Vec<(String, String)> = run
            .map(|r| ("run".into(), r.to_string()))
            .into_iter()
            .collect();
        self.call::<(), _>(
            Method::GET,
            &["api", "v1", "runs", id, "journal"],
            Some(&pairs),
            None,
        )
        .await
    }

    /// The runs of `id`, newest first, each with the run it came from.
    pub async fn chain(&self, id: &str) -> Result<Vec<ChainLink>, ClientError> {
        self.get(&["api", "v1", "runs", id, "chain"]).await
    }

    /// Stream `name` of workflow `id`'s latest run from chunk `from` on
    /// (`GET /api/v1/runs/{id}/streams/{name}`, Server-Sent Events), as
    /// [`fusee::Engine::subscribe`] gives it in process: each durable
    /// chunk with its index, in order, ending after the last once the
    /// stream ended or the run finished. Bad input is this call's
    /// [`ClientError::Api`]; an error after the events began is the
    /// stream's last item. After a dropped connection, call again with
    /// `from` one past the last index received.
    pub async fn subscribe(
        &self,
        id: &str,
        name: &str,
        from: u64,
    ) -> Result<ChunkStream, ClientError> {
        let url = self.url(&["api", "v1", "runs", id, "streams", name])?;
        let mut req = self
            .http
            .get(url.clone())
            .query(&[("from", from.to_string())])
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let transport = |source| ClientError::Transport {
            url: shown(&url),
            source,
        };
        let reply = req.send().await.map_err(transport)?;
        let status = reply.status();
        if !status.is_success() {
            let bytes = reply.bytes().await.map_err(transport)?;
            return Err(api_error(status, &bytes));
        }
        let events = Events {
            reply,
            url: shown(&url),
            buf: Vec::new(),
            over: false,
        };
        Ok(ChunkStream {
            inner: Box::pin(futures_util::stream::unfold(events, Events::next_chunk)),
        })
    }

    /// Waits up to `timeout_ms` (the server's default: 30 s) for `id`'s
    /// result. A run that did not end `ok` is kind `failed`; a wait that
    /// timed out is kind `timeout`.
    pub async fn result(&self, id: &str, timeout_ms: Option<u64>) -> Result<Value, ClientError> {
        let pairs: Vec<(String, String)> = timeout_ms
            .map(|t| ("timeout_ms".into(), t.to_string()))
            .into_iter()
            .collect();
        let reply: ValueReply = self
            .call::<(), _>(
                Method::GET,
                &["api", "v1", "runs", id, "result"],
                Some(&pairs),
                None,
            )
            .await?;
        Ok(reply.value)
    }

    /// Starts a run; returns once the start is durable.
    pub async fn start(&self, request: &StartRequest) -> Result<StartReply, ClientError> {
        self.post(&["api", "v1", "runs"], request).await
    }

    /// Starts a run and waits for its result (kind `timeout` past the
    /// request's `timeout_ms`; the run goes on).
    pub async fn execute(&self, request: &ExecuteRequest) -> Result<ResultReply, ClientError> {
        self.post(&["api", "v1", "execute"], request).await
    }

    /// Sends signal `name` with `payload` to `id`; returns once durable.
    /// Without a key a repeated call records the signal twice: see
    /// [`Client::signal_once`].
    pub async fn signal(&self, id: &str, name: &str, payload: &Value) -> Result<(), ClientError> {
        self.send_signal(id, name, payload, None).await
    }

    /// Sends signal `name` with `payload` to `id` under deduplication
    /// `key`: the run records it once however often it is sent (a retry
    /// after a lost reply is safe). Returns once durable.
    pub async fn signal_once(
        &self,
        id: &str,
        name: &str,
        key: &str,
        payload: &Value,
    ) -> Result<(), ClientError> {
        self.send_signal(id, name, payload, Some(key)).await
    }

    async fn send_signal(
        &self,
        id: &str,
        name: &str,
        payload: &Value,
        key: Option<&str>,
    ) -> Result<(), ClientError> {
        let body = SignalRequest {
            name: name.to_string(),
            payload: payload.clone(),
            key: key.map(str::to_string),
        };
        self.post_empty(&["api", "v1", "runs", id, "signal"], &body)
            .await
    }

    /// Runs update handler `name` on `id` with `arg` (at most once per
    /// `key` when one is given); its result.
    pub async fn update(
        &self,
        id: &str,
        name: &str,
        key: Option<&str>,
        arg: &Value,
    ) -> Result<Value, ClientError> {
        let body = UpdateRequest {
            name: name.to_string(),
            arg: arg.clone(),
            key: key.map(str::to_string),
        };
        let reply: ValueReply = self
            .post(&["api", "v1", "runs", id, "update"], &body)
            .await?;
        Ok(reply.value)
    }

    /// Asks `id` query `name` with `arg`; its answer.
    pub async fn query(&self, id: &str, name: &str, arg: &Value) -> Result<Value, ClientError> {
        let body = QueryRequest {
            name: name.to_string(),
            arg: arg.clone(),
        };
        let reply: ValueReply = self
            .post(&["api", "v1", "runs", id, "query"], &body)
            .await?;
        Ok(reply.value)
    }

    /// Asks `id` to cancel, cooperatively (its code may swallow it; see
    /// `Engine::cancel`).
    pub async fn cancel(&self, id: &str, reason: &str) -> Result<(), ClientError> {
        self.cancel_as(id, reason, None).await
    }

    /// Asks `id` to cancel and has its run terminated with `reason` if it
    /// has not ended `grace` after (`Engine::cancel_with_grace`; the grace
    /// is sent in whole milliseconds).
    pub async fn cancel_with_grace(
        &self,
        id: &str,
        reason: &str,
        grace: std::time::Duration,
    ) -> Result<(), ClientError> {
        self.cancel_as(id, reason, Some(grace)).await
    }

    /// The one cancel request, with a grace if `grace` is some.
    async fn cancel_as(
        &self,
        id: &str,
        reason: &str,
        grace: Option<std::time::Duration>,
    ) -> Result<(), ClientError> {
        let body = CancelRequest {
            reason: Some(reason.to_string()),
            grace_ms: grace.map(|g| g.as_millis().min(u128::from(u64::MAX)) as u64),
        };
        self.post_empty(&["api", "v1", "runs", id, "cancel"], &body)
            .await
    }

    /// Ends `id`'s run at once, as terminated.
    pub async fn terminate(&self, id: &str, reason: &str) -> Result<(), ClientError> {
        let body = ReasonRequest {
            reason: Some(reason.to_string()),
        };
        self.post_empty(&["api", "v1", "runs", id, "terminate"], &body)
            .await
    }

    /// Pauses `id`: no new step attempt starts until [`resume`](Self::resume).
    pub async fn pause(&self, id: &str) -> Result<(), ClientError> {
        self.post_empty(&["api", "v1", "runs", id, "pause"], &serde_json::json!({}))
            .await
    }

    /// Lets a paused `id` start steps again.
    pub async fn resume(&self, id: &str) -> Result<(), ClientError> {
        self.post_empty(&["api", "v1", "runs", id, "resume"], &serde_json::json!({}))
            .await
    }

    /// Restarts `id` from its step `step` (run `run` only, safe to repeat,
    /// when given); the new run.
    pub async fn reset(
        &self,
        id: &str,
        step: &str,
        reason: &str,
        run: Option<u64>,
    ) -> Result<StartReply, ClientError> {
        let body = ResetRequest {
            step: step.to_string(),
            reason: Some(reason.to_string()),
            run,
        };
        self.post(&["api", "v1", "runs", id, "reset"], &body).await
    }

    /// Cancels or terminates every running run of a type (or counts them,
    /// with `dry_run`).
    pub async fn bulk(&self, request: &BulkRequest) -> Result<BulkReply, ClientError> {
        self.post(&["api", "v1", "bulk"], request).await
    }

    /// An online backup of the engine's store into `dest`, a new or empty
    /// directory on the server's machine (admin token).
    pub async fn backup(&self, dest: &str) -> Result<BackupReply, ClientError> {
        let request = BackupRequest {
            dest: dest.to_string(),
        };
        self.post(&["api", "v1", "backup"], &request).await
    }

    /// The registered workflow types.
    pub async fn workflows(&self) -> Result<Vec<String>, ClientError> {
        self.get(&["api", "v1", "workflows"]).await
    }

    /// Every shard: owned or not, its seal LSN and flush figures.
    pub async fn shards(&self) -> Result<Vec<ShardInfo>, ClientError> {
        self.get(&["api", "v1", "shards"]).await
    }

    /// The schedules' IDs.
    pub async fn schedules(&self) -> Result<Vec<String>, ClientError> {
        self.get(&["api", "v1", "schedules"]).await
    }

    /// Schedule `id`.
    pub async fn schedule(&self, id: &str) -> Result<ScheduleInfo, ClientError> {
        self.get(&["api", "v1", "schedules", id]).await
    }

    /// Pauses schedule `id` with a note.
    pub async fn pause_schedule(&self, id: &str, note: &str) -> Result<(), ClientError> {
        let body = PauseRequest {
            note: Some(note.to_string()),
        };
        self.post_empty(&["api", "v1", "schedules", id, "pause"], &body)
            .await
    }

    /// Resumes schedule `id`.
    pub async fn resume_schedule(&self, id: &str) -> Result<(), ClientError> {
        self.post_empty(
            &["api", "v1", "schedules", id, "resume"],
            &serde_json::json!({}),
        )
        .await
    }

    /// Fires schedule `id` now, under its overlap policy.
    pub async fn trigger_schedule(&self, id: &str) -> Result<(), ClientError> {
        self.post_empty(
            &["api", "v1", "schedules", id, "trigger"],
            &serde_json::json!({}),
        )
        .await
    }

    /// Deletes schedule `id`.
    pub async fn delete_schedule(&self, id: &str) -> Result<(), ClientError> {
        self.call::<(), Value>(Method::DELETE, &["api", "v1", "schedules", id], None, None)
            .await
            .map(drop)
    }

    /// The queues' names.
    pub async fn queues(&self) -> Result<Vec<String>, ClientError> {
        self.get(&["api", "v1", "queues"]).await
    }

    /// Queue `name`.
    pub async fn queue(&self, name: &str) -> Result<QueueInfo, ClientError> {
        self.get(&["api", "v1", "queues", name]).await
    }

    /// Pauses queue `name`: no new run starts from it.
    pub async fn pause_queue(&self, name: &str) -> Result<(), ClientError> {
        self.post_empty(
            &["api", "v1", "queues", name, "pause"],
            &serde_json::json!({}),
        )
        .await
    }

    /// Resumes queue `name`.
    pub async fn resume_queue(&self, name: &str) -> Result<(), ClientError> {
        self.post_empty(
            &["api", "v1", "queues", name, "resume"],
            &serde_json::json!({}),
        )
        .await
    }

    /// Deletes queue `name`; the items it dropped.
    pub async fn delete_queue(&self, name: &str) -> Result<u64, ClientError> {
        let d: Deleted = self
            .call::<(), _>(Method::DELETE, &["api", "v1", "queues", name], None, None)
            .await?;
        Ok(d.dropped)
    }

    /// The step limits' names.
    pub async fn limits(&self) -> Result<Vec<String>, ClientError> {
        self.get(&["api", "v1", "limits"]).await
    }

    /// Step limit `name`.
    pub async fn limit(&self, name: &str) -> Result<LimitInfo, ClientError> {
        self.get(&["api", "v1", "limits", name]).await
    }

    /// Pauses step limit `name` with a note: no permit goes out.
    pub async fn pause_limit(&self, name: &str, note: &str) -> Result<(), ClientError> {
        let body = PauseRequest {
            note: Some(note.to_string()),
        };
        self.post_empty(&["api", "v1", "limits", name, "pause"], &body)
            .await
    }

    /// Resumes step limit `name`.
    pub async fn resume_limit(&self, name: &str) -> Result<(), ClientError> {
        self.post_empty(
            &["api", "v1", "limits", name, "resume"],
            &serde_json::json!({}),
        )
        .await
    }

    /// Deletes step limit `name`.
    pub async fn delete_limit(&self, name: &str) -> Result<(), ClientError> {
        self.call::<(), Value>(Method::DELETE, &["api", "v1", "limits", name], None, None)
            .await
            .map(drop)
    }

    /// The OpenAPI document the server serves.
    pub async fn openapi(&self) -> Result<Value, ClientError> {
        self.get(&["api", "v1", "openapi.json"]).await
    }

    async fn get<R: DeserializeOwned>(&self, path: &[&str]) -> Result<R, ClientError> {
        self.call::<(), R>(Method::GET, path, None, None).await
    }

    async fn post<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &[&str],
        body: &B,
    ) -> Result<R, ClientError> {
        self.call(Method::POST, path, None, Some(body)).await
    }

    async fn post_empty<B: Serialize>(&self, path: &[&str], body: &B) -> Result<(), ClientError> {
        self.call::<B, Value>(Method::POST, path, None, Some(body))
            .await
            .map(drop)
    }

    /// The URL of `path`'s segments under the base, each segment
    /// percent-encoded whole ([`crate::segment`]: a workflow ID may hold
    /// `/`, `?`, spaces or line breaks). `.` and `..` cannot be sent:
    /// [`ClientError::Unaddressable`].
    fn url(&self, path: &[&str]) -> Result<Url, ClientError> {
        let mut url = self.base.clone();
        let mut joined = url.path().trim_end_matches('/').to_string();
        for segment in path {
            // Encoded or not (`%2E` too), a URL parser drops them.
            if matches!(*segment, "." | "..") {
                return Err(ClientError::Unaddressable {
                    segment: segment.to_string(),
                });
            }
            joined.push('/');
            joined.push_str(&crate::segment::encode(segment));
        }
        // Encoded already: `set_path` leaves `%XX` as it is and finds no
        // control character left to drop.
        url.set_path(&joined);
        Ok(url)
    }

    async fn call<B: Serialize, R: DeserializeOwned>(
        &self,
        method: Method,
        path: &[&str],
        query: Option<&[(String, String)]>,
        body: Option<&B>,
    ) -> Result<R, ClientError> {
        let url = self.url(path)?;
        let mut req = self.http.request(method, url.clone());
        if let Some(q) = query
            && !q.is_empty()
        {
            req = req.query(q);
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let transport = |source| ClientError::Transport {
            url: shown(&url),
            source,
        };
        let reply = req.send().await.map_err(transport)?;
        let status = reply.status();
        let bytes = reply.bytes().await.map_err(transport)?;
        if !status.is_success() {
            return Err(api_error(status, &bytes));
        }
        let bytes = if bytes.is_empty() {
            &b"null"[..]
        } else {
            &bytes[..]
        };
        serde_json::from_slice(bytes).map_err(|e| ClientError::Decode {
            url: shown(&url),
            detail: e.to_string(),
        })
    }
}

/// `url` as an error shows it: at most 200 characters, so an ID of
/// megabytes makes no message of megabytes.
fn shown(url: &Url) -> String {
    fusee::shortened(url.as_str(), 200)
}

/// The chunks of a stream from [`Client::subscribe`]: a
/// [`futures_util::Stream`] of [`fusee::StreamChunk`]s.
pub struct ChunkStream {
    inner: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<fusee::StreamChunk, ClientError>> + Send>,
    >,
}

impl std::fmt::Debug for ChunkStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkStream").finish_non_exhaustive()
    }
}

impl futures_util::Stream for ChunkStream {
    type Item = Result<fusee::StreamChunk, ClientError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// A stream route's reply read as Server-Sent Events.
struct Events {
    reply: reqwest::Response,
    url: String,
    /// Bytes received and not yet parsed into events (an event's bytes
    /// may come in several reads, split anywhere).
    buf: Vec<u8>,
    over: bool,
}

impl Events {
    async fn next_chunk(mut self) -> Option<(Result<fusee::StreamChunk, ClientError>, Self)> {
        loop {
            if self.over {
                return None;
            }
            // One whole event: lines up to a blank line.
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let bytes: Vec<u8> = self.buf.drain(..at + 2).collect();
                let event = String::from_utf8_lossy(&bytes);
                let (mut kind, mut data) = ("message", String::new());
                for line in event.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        kind = match v.trim() {
                            "chunk" => "chunk",
                            "end" => "end",
                            "error" => "error",
                            _ => "other",
                        };
                    } else if let Some(v) = line.strip_prefix("data:") {
                        if !data.is_empty() {
                            data.push('\n');
                        }
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                let decode = |detail: String| ClientError::Decode {
                    url: self.url.clone(),
                    detail,
                };
                match kind {
                    "chunk" => {
                        let item = serde_json::from_str::<crate::model::StreamChunkEvent>(&data)
                            .map(|c| fusee::StreamChunk {
                                index: c.index,
                                payload: c.payload(),
                            })
                            .map_err(|e| decode(e.to_string()));
                        self.over = item.is_err();
                        return Some((item, self));
                    }
                    "end" => return None,
                    "error" => {
                        self.over = true;
                        let e = match serde_json::from_str::<ErrorBody>(&data) {
                            Ok(b) => ClientError::Api {
                                status: 200,
                                kind: b.kind,
                                message: b.message,
                            },
                            Err(e) => decode(e.to_string()),
                        };
                        return Some((Err(e), self));
                    }
                    // Keep-alive comments and unknown events.
                    _ => continue,
                }
            }
            match self.reply.chunk().await {
                Ok(Some(bytes)) => self.buf.extend_from_slice(&bytes),
                Ok(None) => {
                    self.over = true;
                    let e = ClientError::Decode {
                        url: self.url.clone(),
                        detail: "the events ended without an `end` event".into(),
                    };
                    return Some((Err(e), self));
                }
                Err(source) => {
                    self.over = true;
                    let e = ClientError::Transport {
                        url: self.url.clone(),
                        source,
                    };
                    return Some((Err(e), self));
                }
            }
        }
    }
}

/// An error reply as [`ClientError::Api`]: the server's body, or, from
/// something else on the way (a proxy), the status and the body's text.
fn api_error(status: StatusCode, body: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => ClientError::Api {
            status: status.as_u16(),
            kind: e.kind,
            message: e.message,
        },
        Err(_) => ClientError::Api {
            status: status.as_u16(),
            kind: "http".to_string(),
            message: String::from_utf8_lossy(body).into_owned(),
        },
    }
}
