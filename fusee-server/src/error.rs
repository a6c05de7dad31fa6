//! Errors as HTTP replies: [`ApiError`], and [`engine_error`], the one
//! mapping of each [`fusee::Error`] kind to an HTTP status.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::model::ErrorBody;

/// An error reply: a status and the JSON body `{"kind", "message"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body's `kind`.
    pub kind: &'static str,
    /// The body's `message`.
    pub message: String,
}

impl ApiError {
    /// An error of the server's own (not the engine's): bad requests,
    /// refused tokens, unknown routes.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
        }
    }

    /// A request the server cannot read: bad JSON, a bad parameter.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

impl From<fusee::Error> for ApiError {
    fn from(e: fusee::Error) -> Self {
        let (status, kind) = engine_error(&e);
        Self {
            status,
            kind,
            message: e.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            kind: self.kind.to_string(),
            message: self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

/// The HTTP status and `kind` of an engine error: the kind is the
/// variant's name in snake case. Bad input is 4xx (400 malformed or
/// naming nothing registered, 404 no such thing, 409 a state that refuses
/// it (a run stopped by a code change included), 410 a finished run's history
/// let go, 413 too large, 422 refused by the workflow or ended without a
/// result; a backup's destination the client named wrong is 400
/// `backup_destination`, one not empty 409 `backup_not_empty`); a
/// condition to retry later is 503; a failure of the engine or its storage
/// is 500.
pub fn engine_error(e: &fusee::Error) -> (StatusCode, &'static str) {
    use fusee::Error as E;
    match e {
        E::UnknownWorkflow { .. } => (StatusCode::BAD_REQUEST, "unknown_workflow"),
        E::UnknownVersion { .. } => (StatusCode::BAD_REQUEST, "unknown_version"),
        E::AlreadyExists { .. } => (StatusCode::CONFLICT, "already_exists"),
        E::NotFound { .. } => (StatusCode::NOT_FOUND, "not_found"),
        E::UnknownUpdate { .. } => (StatusCode::BAD_REQUEST, "unknown_update"),
        E::UnknownQuery { .. } => (StatusCode::BAD_REQUEST, "unknown_query"),
        E::Rejected { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "rejected"),
        E::Finished { .. } => (StatusCode::CONFLICT, "finished"),
        E::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        E::Busy { .. } => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
        E::Closed => (StatusCode::SERVICE_UNAVAILABLE, "closed"),
        E::Codec { .. } => (StatusCode::BAD_REQUEST, "codec"),
        E::Failed { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "failed"),
        // A run whose code departs from its journal, or stopped otherwise,
        // is the run's state, not a fault of the server: 409 until fixed.
        E::Determinism(_) => (StatusCode::CONFLICT, "determinism"),
        E::Stopped { .. } => (StatusCode::CONFLICT, "stopped"),
        E::AlreadyRegistered { .. } => (StatusCode::CONFLICT, "already_registered"),
        E::Open(_) => (StatusCode::INTERNAL_SERVER_ERROR, "open"),
        E::Storage { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "storage"),
        E::Config(_) => (StatusCode::BAD_REQUEST, "config"),
        E::InvalidAttribute(_) => (StatusCode::BAD_REQUEST, "invalid_attribute"),
        E::BadPromiseId { .. } => (StatusCode::BAD_REQUEST, "bad_promise_id"),
        E::UnknownPromise { .. } => (StatusCode::NOT_FOUND, "unknown_promise"),
        E::PromiseCompleted { .. } => (StatusCode::CONFLICT, "promise_completed"),
        E::PromiseClosed { .. } => (StatusCode::CONFLICT, "promise_closed"),
        E::UnknownStep { .. } => (StatusCode::BAD_REQUEST, "unknown_step"),
        E::StepNotPaused { .. } => (StatusCode::CONFLICT, "step_not_paused"),
        E::CannotReset { .. } => (StatusCode::CONFLICT, "cannot_reset"),
        E::InvalidSchedule { .. } => (StatusCode::BAD_REQUEST, "invalid_schedule"),
        E::ScheduleExists { .. } => (StatusCode::CONFLICT, "schedule_exists"),
        E::UnknownSchedule { .. } => (StatusCode::NOT_FOUND, "unknown_schedule"),
        E::InvalidQueue { .. } => (StatusCode::BAD_REQUEST, "invalid_queue"),
        E::UnknownQueue { .. } => (StatusCode::NOT_FOUND, "unknown_queue"),
        E::QueueFull { .. } => (StatusCode::SERVICE_UNAVAILABLE, "queue_full"),
        E::InvalidLimit { .. } => (StatusCode::BAD_REQUEST, "invalid_limit"),
        E::UnknownLimit { .. } => (StatusCode::NOT_FOUND, "unknown_limit"),
        E::NotOwner { .. } => (StatusCode::SERVICE_UNAVAILABLE, "not_owner"),
        E::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        E::BadUpdateKey { .. } => (StatusCode::BAD_REQUEST, "bad_update_key"),
        E::BadSignalKey { .. } => (StatusCode::BAD_REQUEST, "bad_signal_key"),
        E::BadWorkflowId { .. } => (StatusCode::BAD_REQUEST, "bad_workflow_id"),
        E::BadCursor { .. } => (StatusCode::BAD_REQUEST, "bad_cursor"),
        // The run is as it was: not `failed`, which says a run ended.
        E::QueryFailed { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "query_failed"),
        // A finished run's journal let go after its history retention.
        E::HistoryGone { .. } => (StatusCode::GONE, "history_gone"),
        E::UnknownStream { .. } => (StatusCode::NOT_FOUND, "unknown_stream"),
        E::StreamCursor { .. } => (StatusCode::BAD_REQUEST, "stream_cursor"),
        E::StreamLimit { .. } => (StatusCode::CONFLICT, "stream_limit"),
        E::StreamClosed { .. } => (StatusCode::CONFLICT, "stream_closed"),
        // A finished run's chunks let go after its streams' retention.
        E::StreamGone { .. } => (StatusCode::GONE, "stream_gone"),
        E::Backup(b) => match b {
            fusee::BackupError::NotEmpty(_) => (StatusCode::CONFLICT, "backup_not_empty"),
            fusee::BackupError::Busy => (StatusCode::CONFLICT, "backup_busy"),
            fusee::BackupError::InsideStore { .. } => {
                (StatusCode::BAD_REQUEST, "backup_inside_store")
            }
            fusee::BackupError::Postgres | fusee::BackupError::NoBackend => {
                (StatusCode::BAD_REQUEST, "backup_unsupported")
            }
            // The destination the client named cannot be looked at or
            // created (missing parent, not a directory, no permission).
            fusee::BackupError::Destination { .. }
            | fusee::BackupError::Copy(fusee::migrate::MigrateError::Open {
                side: "destination",
                ..
            }) => (StatusCode::BAD_REQUEST, "backup_destination"),
            fusee::BackupError::Copy(fusee::migrate::MigrateError::TargetNotEmpty(_)) => {
                (StatusCode::CONFLICT, "backup_not_empty")
            }
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "backup_failed"),
        },
        // A kind added to the engine after this server was written.
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}
