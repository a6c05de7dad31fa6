//! Fusee: an embeddable durable execution engine.
//!
//! A workflow is ordinary async code whose every effect (a step's result, a
//! timer, a signal received) is first written as a record to its shard's
//! log; after a crash the engine rebuilds every run from what is durable
//! and its code carries on where it was, replaying what it already did.
//!
//! # Quick start
//!
//! ```
//! use std::time::Duration;
//! use fusee::{Config, Ctx, Engine, Failure, Signal, Workflow};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Order { id: u64, cents: u64 }
//!
//! const CHECKOUT: Workflow<Order, String> = Workflow::new("checkout");
//! const APPROVED: Signal<bool> = Signal::new("approved");
//!
//! async fn checkout(ctx: Ctx, order: Order) -> Result<String, Failure> {
//!     // A step runs once its inputs are durable; its result is recorded,
//!     // and a restart replays it instead of charging twice.
//!     let charge = ctx
//!         .step("charge", move |step| async move {
//!             // step.key() is stable across retries and restarts: give it
//!             // to the payment service as its idempotency key.
//!             Ok(format!("charged {} for order {} ({})", order.cents, order.id, step.key()))
//!         })
//!         .await?;
//!     // Wait (durably) for a person, at most a day.
//!     let approved = ctx.wait_for(&APPROVED).timeout(Duration::from_secs(86_400)).await?;
//!     if approved != Some(true) {
//!         return Err(Failure::new("not approved"));
//!     }
//!     ctx.sleep("cool-down", Duration::from_millis(10)).await?;
//!     Ok(charge)
//! }
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), fusee::Error> {
//! // Config::file("data") keeps runs in a directory; memory is for tests.
//! let engine = Engine::open(Config::memory()).await?;
//! engine.register(CHECKOUT, checkout);
//! let run = engine.start(CHECKOUT, "order-42", &Order { id: 42, cents: 1999 }).await?;
//! engine.signal("order-42", APPROVED, &true).await?;
//! let receipt = run.result().await?;
//! assert!(receipt.starts_with("charged 1999 for order 42"));
//! engine.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # The pieces
//!
//! | item | what it is |
//! |---|---|
//! | [`Engine`] | open, register, start, execute, signal, update, update_once (keyed: retried safely), update_with_start, query, cancel (cooperative), cancel_with_grace (terminated with the cancel's reason once the grace passes), terminate, result, describe, metrics, close |
//! | [`Engine::backup`] | a consistent copy of a live directory store (file, redb, RocksDB) in a new directory, every shard cut at one instant; restore is opening it ([`backup`], [`BackupReport`]) |
//! | operator verbs on [`Engine`] | [`Engine::pause`], [`Engine::resume`], [`Engine::reset`], [`Engine::list`] ([`ListFilter`], [`Page`]), [`Engine::cancel_all`], [`Engine::terminate_all`] |
//! | [`Config`] | storage, shards, checkpoints, retention, queue capacity, payload limit, clock, [`Ownership`] |
//! | [`Ownership::Lease`] | several processes on one PostgreSQL store, each owning the shards whose leases it holds and taking over a dead one's; a call for a shard owned elsewhere is [`Error::NotOwner`]; [`Engine::owned_shards`], [`Engine::shard_status`] ([`ownership`]) |
//! | [`Ctx`] | what workflow code calls: [`Ctx::step`], [`Ctx::sleep`], [`Ctx::wait_for`], [`Ctx::child`], [`Ctx::signal`], [`Ctx::on_update`], [`Ctx::on_query`], [`Ctx::patched`], [`Ctx::continue_as_new`], [`Ctx::now`], [`Ctx::random`], [`Ctx::uuid`] |
//! | [`SearchAttributes`], [`AttrValue`], [`AttrCondition`] | typed search attributes set at start ([`StartOptions::attributes`]) or by workflow code ([`Ctx::set_attributes`]), recorded and replayed; [`ListFilter::attribute`] and ranges find runs by them through each shard's index ([`attrs`]) |
//! | [`Workflow`], [`Signal`], [`Update`], [`Query`] | typed names shared by workflow code and callers |
//! | [`RetryPolicy`] | how failed step attempts are retried, and how long all of them may take ([`RetryPolicy::schedule_to_close`]) |
//! | [`Step::timeout`], [`Step::heartbeat_timeout`], [`StepContext::heartbeat`], [`StepContext::last_heartbeat`] | time limits on a step's attempts (kind `timeout`; the timed-out attempt's future dropped), and progress a step reports that its next attempt reads, also after a crash ([`Step`'s time limits](Step#time-limits)) |
//! | [`StepContext::cancelled`], [`StepCancel`], [`Step::on_cancel`] ([`OnCancel`]) | a step attempt told to stop when its run is cancelled or ends, its future is dropped, or it times out; whether the workflow's await waits for a cancelled step ([`Step`'s cancellation](Step#cancellation)) |
//! | [`Saga`] | steps that register compensations, run durably newest first when the workflow fails or is cancelled ([`saga`]) |
//! | [`Engine::schedule`], [`Engine::schedules`] | a workflow started on a cron expression or an interval, each fire exactly once; time zone, [`Overlap`] and [`CatchUp`] policies; pause, resume, delete, describe ([`schedule`]) |
//! | [`Engine::queue`], [`Engine::queues`] | a durable queue starting a workflow per item: concurrency and rate limits, priorities, fairness or serialisation by key, enqueue idempotent by a dedup key ([`queue`]) |
//! | [`Engine::limit`], [`Step::limit`] | step limits: at most N steps under a limit at once and at most N per period, across all runs; waiting costs no thread and survives restarts ([`limit`]); [`Engine::register_flow_control`] registers the workflows behind these three |
//! | [`Promise`] | a durable promise: [`Ctx::promise`] makes an ID outside code completes with [`Engine::complete`]; the workflow waits for it with a timeout ([`promise`]) |
//! | [`dynamic`] | the same calls by workflow, signal and handler name with JSON payloads ([`Engine::start_json`], ...), a live run's journal ([`Engine::journal_json`]), an ID's chain of runs ([`Engine::chain`]), each shard's figures: what `fusee-server` serves |
//! | [`Error`], [`Failure`], [`StepError`] | what the client API, workflow code and steps fail with |
//! | [`telemetry`] | the engine's figures in the Prometheus text format ([`telemetry::render`]), counted from durable records: one table of every metric and span name |
//! | [`TraceParent`], [`StartOptions::trace`], [`StepContext::traceparent`] | a W3C trace context given at start, recorded in the run's `Start`, continued into its steps and children ([`trace`]) |
//! | `otel` (feature `otel`) | OpenTelemetry spans made from durable records, once, exported to the tracer provider you pass in `Config::tracer` |
//! | `testing` (feature `testing`) | the test kit (`TestEngine`: virtual clock, crashes, step mocks, replay of exported journals) and `testing::sim`, the deterministic simulator |
//!
//! # Choosing a backend
//!
//! Backends are Cargo features of this crate: `file` (default), `rocksdb`
//! and `redb`; the in-memory backend is always there. [`Config::file`],
//! [`Config::redb`], [`Config::rocksdb`] and [`Config::memory`] pick one;
//! [`open_storage`] opens one on its own, as an [`AnyStorage`] implementing
//! the storage contract ([`storage::Storage`]). The [`config`] module has an
//! example of each.
//!
//! # How it works
//!
//! Each shard is a thread running a loop over the pure core
//! ([`core::shard::ShardCore`], [`core::run::RunMachine`]): requests become
//! records, records go to the log in group commits (one `fdatasync` for
//! every record that arrived meanwhile, on a flusher thread), workflow code
//! runs ahead of the disk, and only what leaves the process (a reply, a
//! result, a step's effects) waits for the records it depends on. See
//! `ARCHITECTURE.md` for the invariants.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub use fusee_core as core;
pub use fusee_storage as storage;

pub mod any_storage;
pub mod attrs;
pub mod backup;
pub mod check;
mod client;
pub mod clock;
pub mod config;
mod ctx;
pub mod dynamic;
mod engine;
mod error;
mod flow;
pub mod inspect;
mod metrics;
pub mod migrate;
mod operator;
#[cfg(feature = "otel")]
pub mod otel;
pub mod ownership;
mod recovery;
mod registry;
mod retry;
mod runtime;
mod step;
pub mod stream;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod trace;
mod workflow;

/// The PostgreSQL server of the crate's own tests (`FUSEE_PG_URL`, set by
/// `scripts/postgres.sh`): `None` (the test prints SKIPPED) without one,
/// and a failure under CI, where `.ci/run` must have started one.
#[cfg(all(test, feature = "postgres"))]
pub(crate) fn test_pg_url() -> Option<String> {
    let url = std::env::var("FUSEE_PG_URL").unwrap_or_default();
    if url.is_empty() {
        assert!(
            std::env::var_os("CI").is_none(),
            "FUSEE_PG_URL is unset under CI: .ci/run must source scripts/postgres.sh"
        );
        eprintln!("SKIPPED: no PostgreSQL server (FUSEE_PG_URL unset)");
        return None;
    }
    Some(url)
}

pub use any_storage::{AnyCheckpoint, AnyLog, AnyRuns, AnyStorage};
pub use attrs::{AttrCondition, AttrMap, AttrValue, SearchAttributes};
pub use backup::{BackupError, BackupReport};
pub use check::ReplayReport;
pub use client::{
    CurrentStep, Cursor, Description, Divergence, IdPolicy, InFlightStep, ListFilter, Page,
    PendingChild, PendingWait, RunRef, RunStatus, RunSummary, StartOptions, StatusFilter,
};
pub use clock::{Clock, VirtualClock};
pub use config::Config;
pub use config::{
    Backend, Create, FileSettings, Flush, OpenError, RedbSettings, RocksSettings, StorageConfig,
    open_storage,
};
pub use ctx::{
    ChildCall, ContinueAsNew, Ctx, DetachedChild, OnCancel, ParentClose, Sleep, Step, StepCall,
    WaitFor,
};
pub use dynamic::{Cause, ChainLink};
pub use engine::{Engine, MAX_ID_BYTES, RunHandle, check_workflow_id};
pub use error::{Error, Result, shortened};
/// Flow control, in `flow/`: its modules keep their paths at the root.
pub use flow::debounce::Debounce;
pub use flow::{debounce, limit, promise, queue, saga, schedule};
/// How a run ended, as [`RunStatus::Finished`] holds it.
pub use fusee_core::record::Status;
pub use fusee_storage::StorageError;
/// Which of [`Ctx::select`]'s two futures finished first, with its output.
pub use futures_util::future::Either;
pub use limit::{LimitBuilder, LimitDescription, LimitedStep, Limits};
pub use metrics::{Histogram, Metrics, ShardMetrics};
pub use ownership::{Ownership, ShardStatus};
pub use promise::{Promise, PromiseWait};
pub use queue::{Enqueued, ItemOptions, Queue, QueueBuilder, QueueDescription, Queues};
pub use retry::{OnExhausted, RetryPolicy};
pub use saga::{Saga, SagaStep, SagaStepCall};
pub use schedule::{
    CatchUp, FireOutcome, FireRecord, Overlap, ScheduleBuilder, ScheduleDescription, Schedules,
    Spec,
};
pub use step::{Cancelled, StepCancel, StepContext, StepError};
pub use stream::{StreamChunk, StreamSender, Subscription};
pub use trace::{TraceParent, TraceParentError};
pub use workflow::{Failure, Query, Signal, Update, Workflow};
