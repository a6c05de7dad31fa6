//! Calls by name with JSON payloads, for callers that do not link the
//! workflows' Rust types: an HTTP server, a command line, a console.
//!
//! The typed client API ([`Engine::start`], [`Engine::signal`], ...) takes
//! a [`crate::Workflow`] or [`crate::Signal`] declared as a `const`; these
//! calls take the names as strings and the payloads as
//! [`serde_json::Value`]s, and go through the same requests to the same
//! shards, so they record, refuse and answer exactly as the typed calls
//! do (payloads are JSON on both sides: a value given here is what a typed
//! call of the same value would record). Besides the verbs, this module
//! reads what a live engine holds that the typed API has no use for: a
//! run's journal in the `fusee-journal` format ([`crate::inspect::journal`]),
//! the chain of runs of an ID, each shard's figures, the registered types.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> fusee::Result<()> {
//! use fusee::{Config, Ctx, Engine, Failure, IdPolicy, Workflow};
//! use serde_json::json;
//!
//! const DOUBLE: Workflow<u64, u64> = Workflow::new("double");
//! let engine = Engine::open(Config::memory()).await?;
//! engine.register(DOUBLE, |_ctx: Ctx, n: u64| async move { Ok::<_, Failure>(n * 2) });
//! assert_eq!(engine.workflow_types(), ["double"]);
//! engine.start_json("double", "d-1", &json!(21), IdPolicy::NewOnly).await?;
//! assert_eq!(engine.result_json("d-1").await?, json!(42));
//! let journal = engine.journal_json("d-1", None).await?;
//! assert_eq!(journal["records"][0]["kind"], "Start");
//! engine.close().await?;
//! # Ok(()) }
//! ```

use fusee_core::record::{Record, RunId, Status, decode_canonical_all, origin};
use serde_json::Value;

use crate::Metrics;
use crate::client::{IdPolicy, RunRef, StartOptions};
use crate::engine::{Engine, keyed_update_id, update_result};
use crate::error::{Error, Result};
use crate::inspect::{RunJournal, RunState, RunSummary};
use crate::runtime::Input;

/// How a run came from the run before it of the same ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The earlier run continued as new into this one.
    ContinuedAsNew,
    /// An operator reset the earlier run ([`Engine::reset`]).
    Reset,
    /// A cause this build does not name (the `Start` record's byte).
    Other(u8),
}

/// One run in the chain of an ID ([`Engine::chain`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainLink {
    /// Its run number in the ID's shard.
    pub run: RunId,
    /// Its workflow type.
    pub workflow: String,
    /// When it started (ms since the Unix epoch).
    pub started_ms: u64,
    /// How it ended and when, once it has.
    pub finished: Option<(Status, u64)>,
    /// The run it came from and how, for every run but the first.
    pub from: Option<(RunId, Cause)>,
}

/// The longest chain [`Engine::chain`] follows: a bound on the reads one
/// call makes, far beyond what retention keeps of a real chain.
pub const CHAIN_MAX: usize = 1000;

impl Engine {
    /// The registered workflow types, sorted (what
    /// [`Error::UnknownWorkflow`] lists).
    pub fn workflow_types(&self) -> Vec<String> {
        self.registered_names()
    }

    /// The largest payload this engine takes, in bytes
    /// ([`crate::Config::max_payload`]): a server in front of it refuses
    /// longer request bodies before reading them.
    pub fn payload_limit(&self) -> usize {
        self.max_payload()
    }

    /// [`Engine::start_with`] of workflow type `wtype`, its input a JSON
    /// value. An unregistered type is [`Error::UnknownWorkflow`], listing
    /// the registered ones.
    pub async fn start_json(
        &self,
        wtype: &str,
        id: &str,
        input: &Value,
        policy: IdPolicy,
    ) -> Result<RunRef> {
        self.start_json_with(wtype, id, input, StartOptions::new().policy(policy))
            .await
    }

    /// [`Engine::start_json`] with every start option (see
    /// [`StartOptions`]).
    pub async fn start_json_with(
        &self,
        wtype: &str,
        id: &str,
        input: &Value,
        options: StartOptions,
    ) -> Result<RunRef> {
        crate::engine::check_workflow_id(id)?;
        if let Some(a) = options.attributes_of() {
            a.check()?;
        }
        let input = json_bytes(input);
        self.request(id, |reply| Input::Start {
            wtype: wtype.to_string(),
            id: id.to_string(),
            input,
            policy: options.policy_of(),
            trace: options.trace_of().or_else(crate::trace::current),
            version: options.version_of(),
            attrs: options.attributes_of().cloned(),
            reply,
        })
        .await
    }

    /// [`Engine::signal`] of signal `name` with a JSON value, or
    /// [`Engine::signal_once`] with `key`. Returns once the signal is
    /// durable. Without a key a repeated call records the signal twice.
    pub async fn signal_json(
        &self,
        id: &str,
        name: &str,
        value: &Value,
        key: Option<&str>,
    ) -> Result<()> {
        let dedup = match key {
            Some(key) => crate::engine::signal_dedup(id, key)?,
            None => 0,
        };
        self.signal_bytes(id, name, json_bytes(value), dedup).await
    }

    /// [`Engine::update`] of handler `name` with a JSON argument, or
    /// [`Engine::update_once`] when `key` is given; the handler's result
    /// as JSON.
    pub async fn update_json(
        &self,
        id: &str,
        name: &str,
        key: Option<&str>,
        arg: &Value,
    ) -> Result<Value> {
        let payload = json_bytes(arg);
        let r = match key {
            None => self.update_name(id, name, payload).await?,
            Some(key) => {
                let update_id = keyed_update_id(id, key)?;
                self.request(id, |reply| Input::Update {
                    id: id.to_string(),
                    name: name.to_string(),
                    update_id,
                    payload,
                    reply,
                })
                .await?
            }
        };
        update_result(id, r)
    }

    /// [`Engine::query`] of handler `name` with a JSON argument; the
    /// answer as JSON.
    pub async fn query_json(&self, id: &str, name: &str, arg: &Value) -> Result<Value> {
        let payload = json_bytes(arg);
        let answer = self
            .request(id, |reply| Input::Query {
                id: id.to_string(),
                name: name.to_string(),
                payload,
                reply,
            })
            .await?;
        serde_json::from_slice(&answer).map_err(|e| Error::codec_for("query answer", id, e))
    }

    /// Waits for the result of workflow `id`'s latest run, as JSON; a run
    /// that did not end `ok` is [`Error::Failed`], as for
    /// [`Engine::result`].
    pub async fn result_json(&self, id: &str) -> Result<Value> {
        self.result_of::<Value>(id).await
    }

    /// Run `run` of workflow `id` (its latest run when `None`) as a
    /// `fusee-journal` version 1 document ([`crate::inspect::journal`]),
    /// the format `fusee show --json` prints: every record the engine
    /// holds of it, each durable. A finished run that parked keeps its
    /// whole journal for its history time (`Config::history_retention`),
    /// then only its `Start` and `Done` (`"complete": false`). A run number that is
    /// not a run of `id` is [`Error::NotFound`].
    pub async fn journal_json(&self, id: &str, run: Option<RunId>) -> Result<Value> {
        let journal = self.live_journal(id, run).await?;
        Ok(crate::inspect::journal::to_json(&journal))
    }

    /// The runs of workflow `id`, newest first: its latest run, then the
    /// run it continued from or was reset from, and so on back to the
    /// first run still kept (finished runs leave after the engine's
    /// retention), at most [`CHAIN_MAX`] runs.
    pub async fn chain(&self, id: &str) -> Result<Vec<ChainLink>> {
        let mut links = Vec::new();
        let mut next = None;
        loop {
            let journal = match self.live_journal(id, next).await {
                Ok(j) => j,
                // The earlier run is gone (expired): the chain ends here.
                Err(Error::NotFound { .. }) if next.is_some() => return Ok(links),
                Err(e) => return Err(e),
            };
            let link = link_of(&journal);
            next = link.from.map(|(run, _)| run);
            links.push(link);
            if next.is_none() || links.len() == CHAIN_MAX {
                return Ok(links);
            }
        }
    }

    /// Each owned shard's figures apart, in shard order (what
    /// [`Engine::metrics`] sums).
    pub async fn shard_metrics(&self) -> Vec<(u32, Metrics)> {
        self.per_shard_metrics().await
    }

    async fn live_journal(&self, id: &str, run: Option<RunId>) -> Result<RunJournal> {
        let live = self
            .request(id, |reply| Input::Journal {
                id: id.to_string(),
                run,
                from: 0,
                reply,
            })
            .await?;
        // The shard checked these bytes when it read or wrote them.
        let records = decode_canonical_all(&live.journal).map_err(|_| Error::Storage {
            shard: live.shard,
            error: fusee_storage::StorageError::Corrupt {
                what: "run journal",
                at: 0,
            },
        })?;
        let mut summary = RunSummary {
            shard: live.shard,
            run: live.run,
            id: id.to_string(),
            workflow: String::new(),
            state: live.state,
            started_ms: 0,
            finished_ms: None,
            last_lsn: live.last_lsn,
            waiting_for: Vec::new(),
            attributes: crate::attrs::journal_attributes(&live.journal),
        };
        for rec in &records {
            match rec {
                Record::Start {
                    wtype, started_ms, ..
                } => {
                    summary.workflow = wtype.to_string();
                    summary.started_ms = *started_ms;
                }
                Record::Done { finished_ms, .. } => summary.finished_ms = Some(*finished_ms),
                _ => {}
            }
        }
        Ok(RunJournal {
            summary,
            records,
            complete: live.complete,
        })
    }
}

/// A run's place in its chain, from its journal.
fn link_of(journal: &RunJournal) -> ChainLink {
    let s = &journal.summary;
    let mut from = None;
    if let Some(Record::Start { from: Some(o), .. }) = journal.records.first() {
        let cause = match o.cause {
            origin::CONTINUED => Cause::ContinuedAsNew,
            origin::RESET => Cause::Reset,
            other => Cause::Other(other),
        };
        from = Some((o.run, cause));
    }
    let finished = match s.state {
        RunState::Finished(status) => Some((status, s.finished_ms.unwrap_or(0))),
        _ => None,
    };
    ChainLink {
        run: s.run,
        workflow: s.workflow.clone(),
        started_ms: s.started_ms,
        finished,
        from,
    }
}

/// A JSON value's payload bytes: its compact text, as the typed calls
/// encode theirs.
fn json_bytes(v: &Value) -> Vec<u8> {
    // A `Value` always serialises (its map keys are strings).
    serde_json::to_vec(v).unwrap_or_default()
}
