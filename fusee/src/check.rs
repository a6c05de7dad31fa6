//! The replay check: every unfinished run replayed against the code
//! registered for its type before that code runs it, so a code change
//! that breaks a running workflow is found at deploy, not when the
//! workflow next wakes up in production.
//!
//! Each run's journal is replayed through the engine's one code host
//! (`runtime::host`, the same as recovery's replay, the test kit's
//! [`TestEngine::replay`](crate::testing::TestEngine::replay) and queries
//! to finished runs): every operation is answered from the journal, no
//! step runs, nothing is recorded. A run whose code departs is a
//! [`Divergence`]: its run, workflow, version, the operation the journal
//! holds and the one the code asked for.
//!
//! Three ways to run it:
//!
//! - At open: [`Config::replay_check`](crate::Config::replay_check). The
//!   engine recovers its shards but starts no run's code until
//!   [`Engine::check_replay`] has run once: open, register, check.
//! - On demand: [`Engine::check_replay`], any time (parked runs have not
//!   replayed since the code was registered; loaded ones stopped by a
//!   determinism error are held instead).
//! - Offline, on a stopped engine's directory: [`check_store`], read-only,
//!   and [`main`], the `check` command an embedder builds with its own
//!   registrations (the stock `fusee check` has no workflow code):
//!
//! ```no_run
//! // src/bin/check.rs of your application: `check DIR [--json]`.
//! fn main() -> std::process::ExitCode {
//!     fusee::check::main(|engine: &fusee::Engine| {
//!         // The same registrations your service makes at start-up.
//!         # let _ = engine;
//!         // my_app::register(engine);
//!     })
//! }
//! ```
//!
//! The engine's check holds each run that departs: a pausing `Attributes`
//! record naming why ([`Description::held`](crate::Description::held),
//! [`RunSummary::held`](crate::RunSummary::held)), recorded before the
//! report is answered. A held run's code does not start (its timers fire
//! and its signals are recorded); an operator deploys fixed code (or a
//! `ctx.patched` branch) and [`resumes`](Engine::resume) it, or
//! [`resets`](Engine::reset) it to a step. Every other run carries on.

use std::path::Path;
use std::process::ExitCode;

use fusee_core::record::RunId;
use fusee_storage::{RunStore, Storage};
use serde::Serialize;

use crate::Backend;
use crate::client::{CheckPage, Divergence};
use crate::config::Config;
use crate::ctx::Registry;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::inspect::{self, InspectError, StoreVisitor};
use crate::runtime::{Input, judge, note};

/// What a replay check found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    /// Unfinished runs replayed against their code (those without code
    /// are in `no_code` instead).
    pub checked: u64,
    /// Runs whose code departs from their journal, by shard and run.
    pub divergences: Vec<Divergence>,
    /// Unfinished runs whose workflow type has no code registered (not
    /// checked): their ID and type.
    pub no_code: Vec<Unchecked>,
    /// Runs held by an earlier check and not resumed since (not checked
    /// again).
    pub already_held: u64,
}

/// An unfinished run the check could not replay: no code is registered
/// for its type at the version it started with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unchecked {
    /// The workflow ID.
    pub id: String,
    /// The workflow type.
    pub workflow: String,
    /// The version of its code its `Start` recorded.
    pub version: u32,
}

/// ` version N` after a workflow type in the report's text; nothing for
/// version 0 (the code registered without one).
fn version_text(version: u32) -> String {
    if version == 0 {
        String::new()
    } else {
        format!(" version {version}")
    }
}

impl ReplayReport {
    fn add(&mut self, page: CheckPage) {
        self.checked += page.checked;
        self.already_held += page.already_held;
        self.divergences.extend(page.divergences);
        self.no_code.extend(
            page.no_code
                .into_iter()
                .map(|(id, workflow, version)| Unchecked {
                    id,
                    workflow,
                    version,
                }),
        );
    }

    fn sort(&mut self) {
        self.divergences.sort_by_key(|d| (d.shard, d.run));
        self.no_code
            .sort_by(|a, b| (&a.workflow, a.version, &a.id).cmp(&(&b.workflow, b.version, &b.id)));
    }

    /// The report as text, one line per finding, for people.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for d in &self.divergences {
            let version = version_text(d.version);
            let at = match d.operation {
                Some(seq) => format!(
                    "operation {seq}: the journal holds {} but the code {}",
                    d.journal, d.code
                ),
                None => d.message.clone(),
            };
            out.push_str(&format!(
                "DIVERGES {} ({}{version}) shard {} run {}{}: {at}\n",
                d.id,
                d.workflow,
                d.shard,
                d.run,
                if d.held { ", held" } else { "" },
            ));
        }
        for u in &self.no_code {
            out.push_str(&format!(
                "NO CODE  {} ({}{}): no code registered for its type at its version; not checked\n",
                u.id,
                u.workflow,
                version_text(u.version)
            ));
        }
        out.push_str(&format!(
            "{} unfinished runs checked, {} diverge, {} without code (not checked){}\n",
            self.checked,
            self.divergences.len(),
            self.no_code.len(),
            if self.already_held > 0 {
                format!(", {} held before", self.already_held)
            } else {
                String::new()
            }
        ));
        out
    }
}

impl Engine {
    /// Replays every unfinished run this engine owns (loaded and parked)
    /// against the code registered for its type (module docs of
    /// [`crate::check`]): no step runs, nothing is recorded for a run that
    /// replays. Each run whose code departs from its journal is held
    /// (paused, with the reason in [`Description::held`](crate::Description::held)),
    /// recorded before this returns; everything else carries on. Shards
    /// are checked side by side, each a page of runs at a time between
    /// its other work.
    ///
    /// With [`Config::replay_check`](crate::Config::replay_check) on, no
    /// run's code starts until this has run once; it lets them start.
    pub async fn check_replay(&self) -> Result<ReplayReport> {
        let mut tasks = Vec::new();
        for shard in self.owned_shards() {
            let engine = self.clone();
            tasks.push(tokio::spawn(async move { engine.check_shard(shard).await }));
        }
        let mut report = ReplayReport::default();
        let mut failed = None;
        for task in tasks {
            match task.await {
                Ok(Ok(pages)) => pages.into_iter().for_each(|p| report.add(p)),
                Ok(Err(e)) => failed = failed.or(Some(e)),
                Err(e) => {
                    failed = failed.or(Some(Error::Config(format!(
                        "a replay check task failed: {e}"
                    ))))
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        report.sort();
        if self.registry().is_held_back() {
            self.registry().hold_back(false);
            self.start_waiting_code();
        }
        for d in &report.divergences {
            tracing::warn!(
                id = %d.id, workflow = %d.workflow, shard = d.shard, run = d.run,
                reason = %d.message, "replay check: held a run whose code departs from its journal"
            );
        }
        Ok(report)
    }

    /// Every page of the check of shard `shard`.
    async fn check_shard(&self, shard: u32) -> Result<Vec<CheckPage>> {
        let mut below = RunId::MAX;
        let mut pages = Vec::new();
        loop {
            let bytes = self
                .request_shard(shard, |reply| Input::Check { below, reply })
                .await?;
            let page: CheckPage =
                serde_json::from_slice(&bytes).map_err(|e| Error::codec("replay check page", e))?;
            let resume = page.resume;
            pages.push(page);
            match resume {
                Some(next) if next < below => below = next,
                _ => return Ok(pages),
            }
        }
    }
}

/// Why an offline check ([`check_store`]) could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The store could not be read (see [`InspectError`]).
    #[error(transparent)]
    Store(#[from] InspectError),
    /// The scratch engine the registrations are made on did not open.
    #[error("the scratch engine for the registrations did not open: {0}")]
    Engine(#[from] Error),
}

/// Checks a stopped engine's store in `dir` against the code
/// `register` registers, read-only (the store is opened as `fusee
/// inspect` opens it: nothing in `dir` changes, and a store an engine
/// holds is refused). `register` is called with a scratch in-memory engine
/// that holds no run, so nothing runs: only its registry is used. Nothing
/// is held (the report's divergences say `held: false`): open the engine
/// with [`Config::replay_check`] to hold them.
pub async fn check_store(
    dir: &Path,
    register: impl Fn(&Engine),
) -> std::result::Result<ReplayReport, CheckError> {
    let scratch = Engine::open(Config::memory().shards(1).metrics(false)).await?;
    register(&scratch);
    let registry = scratch.registry().clone();
    // The store is read on this thread: workflow code futures are not
    // `Send`, and a replay polls them where they were made.
    let report = inspect::open_read_only(dir, Offline { registry });
    let _ = scratch.close().await;
    let mut report = report??;
    report.sort();
    Ok(report)
}

/// The offline check's visit of a store.
struct Offline {
    registry: Registry,
}

impl StoreVisitor for Offline {
    type Out = std::result::Result<ReplayReport, InspectError>;

    fn visit<S: Storage>(self, _backend: Backend, storage: &S) -> Self::Out {
        let shards = storage
            .shards()
            .map_err(|error| InspectError::Storage { shard: None, error })?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut report = ReplayReport::default();
        for shard in shards {
            let mut view = inspect::rebuild(storage, shard, now_ms, &mut |_| {})?;
            report.add(check_view(&self.registry, &mut view)?);
        }
        Ok(report)
    }
}

/// Every unfinished run of a shard rebuilt read-only, judged.
fn check_view<R: RunStore>(
    registry: &Registry,
    view: &mut inspect::ShardView<R>,
) -> std::result::Result<CheckPage, InspectError> {
    let shard = view.shard;
    let damaged = |e: inspect::FrameError| InspectError::Damaged {
        shard,
        what: "run frame",
        lsn: None,
        detail: e.to_string(),
    };
    let mut page = CheckPage::default();
    let mut unfinished: Vec<RunId> = view
        .core
        .loaded_runs()
        .filter(|(_, l)| !l.is_done())
        .map(|(run, _)| run)
        .collect();
    unfinished.extend(
        view.core
            .parked_runs()
            .filter(|(_, p)| p.done().is_none())
            .map(|(run, _)| run),
    );
    unfinished.sort_unstable();
    for run in unfinished {
        let journal = match view.core.get(run) {
            Some(l) => {
                let (blob, tail) = (l.blob, l.journal.clone());
                let mut whole = match blob {
                    Some(blob) => {
                        inspect::read_chain(&mut view.runs, blob)
                            .map_err(damaged)?
                            .journal
                    }
                    None => Vec::new(),
                };
                whole.extend_from_slice(&tail);
                whole
            }
            None => match view.core.parked(run) {
                Some(p) => {
                    inspect::read_chain(&mut view.runs, p.blob())
                        .map_err(damaged)?
                        .journal
                }
                None => continue,
            },
        };
        if let Some(d) = note(&mut page, judge(registry, shard, run, &journal)) {
            page.divergences.push(*d);
        }
    }
    Ok(page)
}

/// The `check` command of an embedder's own binary: `check DIR [--json]`
/// (the program's first argument may be the word `check`), checking the
/// stopped engine's store in `DIR` against the code `register` registers
/// ([`check_store`]) and printing each divergence, as text or as the
/// report in JSON. Exit status: 0 no run diverges, 1 some do, 2 bad
/// arguments, 3 the store could not be checked.
pub fn main(register: impl Fn(&Engine)) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    if args.first() == Some(&"check") {
        args.remove(0);
    }
    let json = args.contains(&"--json");
    args.retain(|a| *a != "--json");
    let [dir] = args.as_slice() else {
        eprintln!("usage: check DIR [--json]");
        return ExitCode::from(2);
    };
    run(Path::new(dir), json, register)
}

/// [`main`] once its arguments are read: what `fusee check` runs too.
pub fn run(dir: &Path, json: bool, register: impl Fn(&Engine)) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: no runtime for the check: {e}");
            return ExitCode::from(3);
        }
    };
    let report = match runtime.block_on(check_store(dir, register)) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(3);
        }
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(3);
            }
        }
    } else {
        print!("{}", report.to_text());
    }
    if report.divergences.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
