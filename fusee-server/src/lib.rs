//! Fusee seen and driven from outside its process: an HTTP/JSON API
//! (`/api/v1/...`, described by an OpenAPI 3 document at
//! `/api/v1/openapi.json`), a web console at `/`, health and readiness
//! (`/healthz`, `/readyz`), all on one port, and [`Client`], the API from
//! Rust.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use fusee::{Config, Engine};
//!
//! let engine = Engine::open(Config::file("data")).await?;
//! // engine.register(CHECKOUT, checkout); ...
//! let server = fusee_server::Server::new(engine.clone())
//!     .bind("127.0.0.1:7700".parse()?)
//!     .admin_token(std::env::var("FUSEE_ADMIN_TOKEN")?)
//!     .read_token(std::env::var("FUSEE_READ_TOKEN")?)
//!     .start()
//!     .await?;
//! println!("console at http://{}/", server.local_addr());
//! // ... until the process ends:
//! server.stop().await?;
//! engine.close().await?;
//! # Ok(()) }
//! ```
//!
//! # Security
//!
//! - The server binds `127.0.0.1:7700` unless told otherwise, and refuses
//!   to start on an address that is not loopback without an admin token
//!   ([`ServerError::Unprotected`]).
//! - Two bearer tokens: the read token allows every `GET` (lists,
//!   descriptions, journals, results, shards); the admin token allows
//!   everything. Without any token every request is allowed (loopback
//!   only). Tokens are compared in constant time and never logged.
//! - The console logs a person in with a token (a form), kept in an
//!   `HttpOnly`, `SameSite=Strict` cookie; its forms carry a CSRF token
//!   checked against a second such cookie. Every payload it shows is
//!   escaped.
//! - Request bodies are limited to the engine's payload limit plus 64 KiB
//!   of JSON around it; bad JSON, unknown routes and wrong methods are
//!   4xx JSON errors (`{"kind", "message"}`) and change nothing.
//!
//! # Errors
//!
//! Every [`fusee::Error`] is one HTTP status and a `kind` (the variant in
//! snake case), its `message` the error's text: [`error::engine_error`] is
//! the one table.
//!
//! # Features
//!
//! `server` (the API and console) and `client` ([`Client`]), both by
//! default; a program that only talks to a server takes
//! `default-features = false, features = ["client"]`.

#[cfg(feature = "server")]
mod activity;
#[cfg(feature = "server")]
mod api;
#[cfg(feature = "server")]
mod auth;
#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "server")]
mod console;
#[cfg(feature = "server")]
pub mod error;
pub mod model;
#[cfg(any(feature = "server", feature = "client"))]
mod segment;

#[cfg(feature = "client")]
pub use client::{ChunkStream, Client, ClientError};

#[cfg(feature = "server")]
pub use server::{DEFAULT_ADDR, Server, ServerError, ServerHandle};

#[cfg(feature = "server")]
pub(crate) use server::App;

#[cfg(feature = "server")]
mod server {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use axum::Router;
    use axum::extract::DefaultBodyLimit;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    use crate::auth::Tokens;
    use crate::error::ApiError;

    /// Where a server listens unless told otherwise.
    pub const DEFAULT_ADDR: &str = "127.0.0.1:7700";

    /// JSON around a payload a request body may hold beyond the engine's
    /// payload limit (names, IDs, the envelope).
    const BODY_SLACK: usize = 64 << 10;

    /// How long [`ServerHandle::stop`] lets requests in flight finish.
    const STOP_GRACE: Duration = Duration::from_secs(5);

    /// Why a server did not start or stop cleanly.
    #[derive(Debug, thiserror::Error)]
    pub enum ServerError {
        /// A non-loopback address without an admin token: anyone who can
        /// reach it could drive every run.
        #[error(
            "refusing to listen on {addr} without an admin token: it is not a loopback address (set Server::admin_token, or bind 127.0.0.1)"
        )]
        Unprotected {
            /// The address asked for.
            addr: SocketAddr,
        },
        /// A token given is empty.
        #[error("the {which} token is empty")]
        EmptyToken {
            /// `admin` or `read`.
            which: &'static str,
        },
        /// The address could not be bound.
        #[error("cannot listen on {addr}: {source}")]
        Bind {
            /// The address asked for.
            addr: SocketAddr,
            /// The system's error.
            source: std::io::Error,
        },
        /// Serving failed (the listener broke).
        #[error("the server failed: {0}")]
        Serve(std::io::Error),
    }

    /// What every handler shares.
    #[derive(Clone)]
    pub(crate) struct App {
        pub(crate) engine: fusee::Engine,
        pub(crate) tokens: Arc<Tokens>,
        pub(crate) openapi: Arc<serde_json::Value>,
        /// The engine's recent activity (sampled while the server runs).
        pub(crate) activity: crate::activity::Activity,
    }

    /// A server to start: an engine, an address, tokens.
    #[derive(Debug)]
    pub struct Server {
        engine: fusee::Engine,
        addr: SocketAddr,
        tokens: Tokens,
    }

    impl Server {
        /// A server of `engine` on [`DEFAULT_ADDR`], without tokens.
        pub fn new(engine: fusee::Engine) -> Self {
            Self {
                engine,
                addr: SocketAddr::from(([127, 0, 0, 1], 7700)),
                tokens: Tokens::default(),
            }
        }

        /// Listens on `addr` instead (port 0: any free port, see
        /// [`ServerHandle::local_addr`]).
        pub fn bind(mut self, addr: SocketAddr) -> Self {
            self.addr = addr;
            self
        }

        /// The token that allows every request.
        pub fn admin_token(mut self, token: impl Into<String>) -> Self {
            self.tokens.admin = Some(token.into());
            self
        }

        /// The token that allows reading (every `GET`).
        pub fn read_token(mut self, token: impl Into<String>) -> Self {
            self.tokens.read = Some(token.into());
            self
        }

        /// The server's routes, to serve on a listener of the caller's (or
        /// to call in-process): the caller then answers for the address
        /// rules [`start`](Self::start) enforces.
        pub fn router(&self) -> Router {
            router(self.engine.clone(), self.tokens.clone(), Default::default())
        }

        /// Binds the address and serves until [`ServerHandle::stop`] (or
        /// the runtime ends). Fails on a non-loopback address without an
        /// admin token, an empty token, or an address it cannot bind.
        pub async fn start(self) -> Result<ServerHandle, ServerError> {
            for (which, t) in [("admin", &self.tokens.admin), ("read", &self.tokens.read)] {
                if t.as_deref().is_some_and(str::is_empty) {
                    return Err(ServerError::EmptyToken { which });
                }
            }
            if !self.addr.ip().is_loopback() && self.tokens.admin.is_none() {
                return Err(ServerError::Unprotected { addr: self.addr });
            }
            let listener = tokio::net::TcpListener::bind(self.addr)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: self.addr,
                    source,
                })?;
            let local = listener.local_addr().map_err(|source| ServerError::Bind {
                addr: self.addr,
                source,
            })?;
            let activity = crate::activity::Activity::default();
            let sampler = crate::activity::spawn_sampler(self.engine.clone(), activity.clone());
            let app = router(self.engine.clone(), self.tokens.clone(), activity);
            let (tx, rx) = oneshot::channel::<()>();
            let task = tokio::spawn(async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = rx.await;
                    })
                    .await
            });
            tracing::info!(addr = %local, "fusee-server listening");
            Ok(ServerHandle {
                addr: local,
                stop: Some(tx),
                task: Some(task),
                sampler,
            })
        }
    }

    /// A running server. Dropping it stops the server without waiting.
    #[derive(Debug)]
    pub struct ServerHandle {
        addr: SocketAddr,
        stop: Option<oneshot::Sender<()>>,
        task: Option<JoinHandle<std::io::Result<()>>>,
        sampler: JoinHandle<()>,
    }

    impl ServerHandle {
        /// The address it listens on (the port chosen, for port 0).
        pub fn local_addr(&self) -> SocketAddr {
            self.addr
        }

        /// Its base URL, `http://<addr>`.
        pub fn url(&self) -> String {
            format!("http://{}", self.addr)
        }

        /// Stops taking connections, lets requests in flight finish (at
        /// most 5 s, then they are cut), and returns once it stopped.
        pub async fn stop(mut self) -> Result<(), ServerError> {
            self.sampler.abort();
            if let Some(tx) = self.stop.take() {
                let _ = tx.send(());
            }
            let Some(mut task) = self.task.take() else {
                return Ok(());
            };
            match tokio::time::timeout(STOP_GRACE, &mut task).await {
                Ok(Ok(Ok(()))) => Ok(()),
                Ok(Ok(Err(e))) => Err(ServerError::Serve(e)),
                Ok(Err(join)) => Err(ServerError::Serve(std::io::Error::other(join.to_string()))),
                Err(_) => {
                    task.abort();
                    Ok(())
                }
            }
        }
    }

    impl Drop for ServerHandle {
        fn drop(&mut self) {
            self.sampler.abort();
            if let Some(tx) = self.stop.take() {
                let _ = tx.send(());
            }
            if let Some(task) = self.task.take() {
                task.abort();
            }
        }
    }

    /// Every route: the API (behind its token gate), health, the console,
    /// and JSON answers for unknown routes and wrong methods.
    fn router(
        engine: fusee::Engine,
        tokens: Tokens,
        activity: crate::activity::Activity,
    ) -> Router {
        let (api, openapi) = crate::api::router().split_for_parts();
        let openapi = serde_json::to_value(&openapi).unwrap_or_default();
        let limit = engine.payload_limit().saturating_add(BODY_SLACK);
        let app = App {
            engine,
            tokens: Arc::new(tokens),
            openapi: Arc::new(openapi),
            activity,
        };
        let gate = axum::middleware::from_fn_with_state(app.clone(), crate::auth::api_gate);
        let api = api.route_layer(gate);
        Router::new()
            .merge(api)
            .merge(crate::console::router())
            .fallback(unknown_route)
            .method_not_allowed_fallback(wrong_method)
            .layer(DefaultBodyLimit::max(limit))
            .with_state(app)
    }

    async fn unknown_route(uri: axum::http::Uri) -> impl IntoResponse {
        let path = uri.path();
        // Under /api/v1 already: pointing there again would not help.
        let hint = if path.starts_with("/api/v1/") {
            "the API's routes are in /api/v1/openapi.json"
        } else {
            "the API is under /api/v1 (see /api/v1/openapi.json)"
        };
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_route",
            format!("no route {path}; {hint}"),
        )
    }

    async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> impl IntoResponse {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{} does not take {method}", uri.path()),
        )
    }
}
