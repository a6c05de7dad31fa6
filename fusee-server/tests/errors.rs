//! Each `fusee::Error` kind maps to one HTTP status and a JSON body whose
//! `kind` names it and whose `message` is the error's own text.

use axum::body::to_bytes;
use axum::response::IntoResponse;
use fusee::core::run::{DeterminismError, Did, Held};
use fusee::{Backend, Error, Failure, OpenError, StorageError};
use fusee_server::error::{ApiError, engine_error};

fn every_kind() -> Vec<(Error, u16, &'static str)> {
    let s = || "x".to_string();
    vec![
        (
            Error::UnknownWorkflow {
                wtype: s(),
                registered: vec!["a".into(), "b".into()],
            },
            400,
            "unknown_workflow",
        ),
        (
            Error::AlreadyExists { id: s(), run: 3 },
            409,
            "already_exists",
        ),
        (Error::NotFound { id: s() }, 404, "not_found"),
        (
            Error::UnknownUpdate {
                id: s(),
                name: s(),
                registered: vec![],
            },
            400,
            "unknown_update",
        ),
        (
            Error::UnknownQuery {
                id: s(),
                name: s(),
                registered: vec![],
            },
            400,
            "unknown_query",
        ),
        (
            Error::Rejected {
                id: s(),
                reason: s(),
            },
            422,
            "rejected",
        ),
        (
            Error::Finished {
                id: s(),
                status: "ok",
            },
            409,
            "finished",
        ),
        (
            Error::TooLarge {
                id: s(),
                what: "signal",
                len: 10,
                max: 5,
            },
            413,
            "too_large",
        ),
        (
            Error::Busy {
                shard: 1,
                capacity: 4,
            },
            503,
            "busy",
        ),
        (Error::Closed, 503, "closed"),
        (
            Error::Codec {
                what: "signal",
                id: Some(s()),
                detail: s(),
            },
            400,
            "codec",
        ),
        (
            Error::Failed {
                id: s(),
                status: "failed",
                failure: Failure::new("boom"),
            },
            422,
            "failed",
        ),
        (
            Error::Determinism(Box::new(DeterminismError {
                run: 1,
                seq: 2,
                journal: Held::UnrecordedStep,
                code: Did::Quiescent,
            })),
            409,
            "determinism",
        ),
        (
            Error::Stopped {
                id: s(),
                run: 4,
                reason: s(),
            },
            409,
            "stopped",
        ),
        (
            Error::AlreadyRegistered {
                wtype: s(),
                version: 2,
            },
            409,
            "already_registered",
        ),
        (
            Error::UnknownVersion {
                wtype: s(),
                version: 3,
                registered: vec![1, 2],
            },
            400,
            "unknown_version",
        ),
        (
            Error::BadSignalKey {
                id: s(),
                key: String::new(),
                reason: s(),
            },
            400,
            "bad_signal_key",
        ),
        (
            Error::BadWorkflowId {
                id: String::new(),
                reason: "it is empty",
            },
            400,
            "bad_workflow_id",
        ),
        (
            Error::BadCursor {
                cursor: s(),
                reason: s(),
            },
            400,
            "bad_cursor",
        ),
        (
            Error::QueryFailed {
                id: s(),
                name: s(),
                failure: Failure::new("no"),
            },
            422,
            "query_failed",
        ),
        (
            Error::HistoryGone {
                id: s(),
                run: 3,
                what: s(),
                finished_ms: 1,
                gone_ms: 2,
            },
            410,
            "history_gone",
        ),
        (
            Error::UnknownStream {
                id: s(),
                run: 3,
                name: s(),
            },
            404,
            "unknown_stream",
        ),
        (
            Error::StreamCursor {
                id: s(),
                name: s(),
                from: 5,
                len: 4,
            },
            400,
            "stream_cursor",
        ),
        (
            Error::StreamLimit {
                id: s(),
                run: 3,
                limit: 10,
            },
            409,
            "stream_limit",
        ),
        (
            Error::StreamClosed {
                id: s(),
                name: s(),
                reason: s(),
            },
            409,
            "stream_closed",
        ),
        (
            Error::StreamGone {
                id: s(),
                name: s(),
                finished_ms: 1,
                gone_ms: 2,
            },
            410,
            "stream_gone",
        ),
        (
            Error::Backup(fusee::BackupError::NotEmpty("/x".into())),
            409,
            "backup_not_empty",
        ),
        (Error::Backup(fusee::BackupError::Busy), 409, "backup_busy"),
        (
            Error::Backup(fusee::BackupError::InsideStore {
                dest: "/s/b".into(),
                store: "/s".into(),
            }),
            400,
            "backup_inside_store",
        ),
        (
            Error::Backup(fusee::BackupError::Postgres),
            400,
            "backup_unsupported",
        ),
        (
            Error::Backup(fusee::BackupError::ShardGone(1)),
            500,
            "backup_failed",
        ),
        (
            Error::Backup(fusee::BackupError::Destination {
                dest: "/dev/null".into(),
                error: "Not a directory (os error 20)".into(),
            }),
            400,
            "backup_destination",
        ),
        (
            Error::Open(OpenError::FeatureDisabled {
                backend: Backend::Redb,
                feature: "redb",
            }),
            500,
            "open",
        ),
        (
            Error::Storage {
                shard: 2,
                error: StorageError::Corrupt { what: "log", at: 7 },
            },
            500,
            "storage",
        ),
        (Error::Config(s()), 400, "config"),
        (
            Error::BadPromiseId {
                promise: s(),
                reason: "short",
            },
            400,
            "bad_promise_id",
        ),
        (
            Error::UnknownPromise {
                promise: s(),
                reason: s(),
            },
            404,
            "unknown_promise",
        ),
        (
            Error::PromiseCompleted { promise: s() },
            409,
            "promise_completed",
        ),
        (
            Error::PromiseClosed {
                promise: s(),
                id: s(),
                status: "ok",
            },
            409,
            "promise_closed",
        ),
        (
            Error::UnknownStep {
                id: s(),
                step: s(),
                steps: vec![],
            },
            400,
            "unknown_step",
        ),
        (
            Error::StepNotPaused {
                id: s(),
                step: s(),
                paused: vec![],
            },
            409,
            "step_not_paused",
        ),
        (
            Error::CannotReset {
                id: s(),
                reason: s(),
            },
            409,
            "cannot_reset",
        ),
        (
            Error::InvalidSchedule {
                id: s(),
                reason: s(),
            },
            400,
            "invalid_schedule",
        ),
        (Error::ScheduleExists { id: s() }, 409, "schedule_exists"),
        (Error::UnknownSchedule { id: s() }, 404, "unknown_schedule"),
        (
            Error::InvalidQueue {
                name: s(),
                reason: s(),
            },
            400,
            "invalid_queue",
        ),
        (Error::UnknownQueue { name: s() }, 404, "unknown_queue"),
        (
            Error::QueueFull {
                name: s(),
                pending: 9,
                max: 9,
            },
            503,
            "queue_full",
        ),
        (
            Error::InvalidLimit {
                name: s(),
                reason: s(),
            },
            400,
            "invalid_limit",
        ),
        (Error::UnknownLimit { name: s() }, 404, "unknown_limit"),
        (Error::NotOwner { shard: 3 }, 503, "not_owner"),
        (
            Error::Unavailable {
                shard: 3,
                cause: s(),
                maybe_recorded: true,
            },
            503,
            "unavailable",
        ),
        (
            Error::BadUpdateKey {
                id: s(),
                key: s(),
                reason: s(),
            },
            400,
            "bad_update_key",
        ),
    ]
}

#[tokio::test(flavor = "current_thread")]
async fn each_engine_error_kind_has_one_status_and_its_own_text() {
    let mut kinds = std::collections::BTreeSet::new();
    for (e, status, kind) in every_kind() {
        let (got_status, got_kind) = engine_error(&e);
        assert_eq!((got_status.as_u16(), got_kind), (status, kind), "{e:?}");
        assert!(kinds.insert(kind), "kind {kind} used twice");
        let text = e.to_string();
        let resp = ApiError::from(e).into_response();
        assert_eq!(resp.status().as_u16(), status);
        let body = to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["kind"], kind);
        assert_eq!(v["message"], text);
    }
}

/// A backup's copy failing on the destination the client named (it could
/// not be opened, or it holds a store) is that destination's client error,
/// with the kind of the engine's own check of it; failing elsewhere is 500.
#[test]
fn a_backup_copy_failing_on_its_destination_is_a_client_error() {
    use fusee::migrate::MigrateError;
    let copy = |m: MigrateError| Error::Backup(fusee::BackupError::Copy(m));
    let open = |side: &'static str| MigrateError::Open {
        side,
        error: Box::new(OpenError::FeatureDisabled {
            backend: Backend::Redb,
            feature: "redb",
        }),
    };
    for (e, status, kind) in [
        (copy(open("destination")), 400, "backup_destination"),
        (
            copy(MigrateError::TargetNotEmpty("/x".into())),
            409,
            "backup_not_empty",
        ),
        (copy(open("source")), 500, "backup_failed"),
        (copy(MigrateError::Interrupted), 500, "backup_failed"),
        // The copy made, then a fault on the engine's side: not the
        // caller's destination.
        (
            Error::Backup(fusee::BackupError::Finish {
                dest: "/b".into(),
                error: "a shard still holds the destination".into(),
            }),
            500,
            "backup_failed",
        ),
    ] {
        let (got_status, got_kind) = engine_error(&e);
        assert_eq!((got_status.as_u16(), got_kind), (status, kind), "{e:?}");
    }
}
