//! `fusee inspect` and `fusee runs`.

use std::path::Path;
use std::process::ExitCode;

use fusee::Backend;
use fusee::inspect::{RunSummary, Waiting, status_of};
use serde_json::{Value, json};

use crate::output::{emit, emit_json};
use crate::store::{Request, count_states, gather};
use crate::{CliError, fmt};

/// Bytes of the files under `path` (0 for a missing path).
fn disk_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| disk_bytes(&e.path()))
                .sum()
        })
        .unwrap_or(0)
}

/// A file-backend shard's log and run-store bytes on disk; `None` for the
/// key-value backends, whose shards share one database.
fn shard_bytes(dir: &Path, backend: Backend, shard: u32) -> Option<(u64, u64)> {
    if backend != Backend::File {
        return None;
    }
    let shard_dir = dir.join(format!("shard-{shard:010}"));
    let store: u64 = std::fs::read_dir(&shard_dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("store-"))
                .map(|e| disk_bytes(&e.path()))
                .sum()
        })
        .unwrap_or(0);
    Some((disk_bytes(&shard_dir.join("log")), store))
}

fn states_json(runs: &[RunSummary]) -> Value {
    Value::Object(
        count_states(runs)
            .into_iter()
            .map(|(s, n)| (s.to_string(), Value::from(n)))
            .collect(),
    )
}

/// `fusee inspect DIR`.
pub(crate) fn inspect(
    dir: &Path,
    expected: Option<Backend>,
    json: bool,
) -> Result<ExitCode, CliError> {
    let (backend, g) = gather(dir, expected, Request::Overview)?;
    let total = disk_bytes(dir);
    if json {
        let shards: Vec<Value> = g
            .shards
            .iter()
            .map(|s| {
                let runs: Vec<RunSummary> = g
                    .runs
                    .iter()
                    .filter(|r| r.shard == s.shard)
                    .cloned()
                    .collect();
                let sizes = shard_bytes(dir, backend, s.shard);
                json!({
                    "shard": s.shard,
                    "first_lsn": s.first_lsn,
                    "last_lsn": s.last_lsn,
                    "log_records": (s.last_lsn + 1).saturating_sub(s.first_lsn),
                    "replayed": s.replayed,
                    "index_records": s.index_records,
                    "store_position": s.store_position,
                    "log_bytes": sizes.map(|b| b.0),
                    "store_bytes": sizes.map(|b| b.1),
                    "checkpoint": s.checkpoint.as_ref().map(|c| json!({
                        "lsn": c.lsn,
                        "created_ms": c.created_ms,
                        "next_run": c.next_run,
                        "loaded_runs": c.loaded_runs,
                        "index_runs": c.index_runs,
                        "bytes": c.bytes,
                    })),
                    "runs": states_json(&runs),
                })
            })
            .collect();
        emit_json(&json!({
            "dir": dir.display().to_string(),
            "backend": backend.name(),
            "disk_bytes": total,
            "runs": states_json(&g.runs),
            "shards": shards,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let counts = count_states(&g.runs)
        .into_iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut out = format!(
        "store    {}\nbackend  {backend}\nsize     {}\nshards   {}\nruns     {}{}\n",
        dir.display(),
        fmt::bytes(total),
        g.shards.len(),
        g.runs.len(),
        if counts.is_empty() {
            String::new()
        } else {
            format!(" ({counts})")
        }
    );
    let mut t = fmt::Table::new(&[
        "shard",
        "log LSNs",
        "replayed",
        "log size",
        "store size",
        "checkpoint LSN",
        "checkpoint taken",
        "runs",
    ]);
    for s in &g.shards {
        let sizes = shard_bytes(dir, backend, s.shard);
        let runs: Vec<RunSummary> = g
            .runs
            .iter()
            .filter(|r| r.shard == s.shard)
            .cloned()
            .collect();
        let per_state = count_states(&runs)
            .into_iter()
            .map(|(st, n)| format!("{st} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        t.row([
            s.shard.to_string(),
            if s.last_lsn >= s.first_lsn {
                format!("{}..={}", s.first_lsn, s.last_lsn)
            } else {
                format!("none (last {})", s.last_lsn)
            },
            s.replayed.to_string(),
            sizes.map_or("(shared)".into(), |b| fmt::bytes(b.0)),
            sizes.map_or("(shared)".into(), |b| fmt::bytes(b.1)),
            s.checkpoint
                .as_ref()
                .map_or("none".into(), |c| c.lsn.to_string()),
            s.checkpoint
                .as_ref()
                .map_or("-".into(), |c| fmt::time(c.created_ms)),
            format!("{} ({per_state})", runs.len()),
        ]);
    }
    out.push_str(&format!("\n{t}\n"));
    emit(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// `fusee runs`' filters, as the command line gives them.
#[derive(clap::Args, Debug)]
pub(crate) struct FilterArgs {
    /// Only runs in this state: running, waiting, parked, finished, or
    /// a finished status (ok, failed, cancelled, timed-out, terminated,
    /// continued-as-new, reset).
    #[arg(long)]
    status: Option<String>,
    /// Only runs of this workflow type.
    #[arg(long = "type")]
    wtype: Option<String>,
    /// At most this many runs.
    #[arg(long)]
    limit: Option<usize>,
}

/// The states `--status` names besides the finished statuses.
const STATES: [&str; 4] = ["running", "waiting", "parked", "finished"];

impl FilterArgs {
    /// The filter, once `--status` is known to name a state (else a usage
    /// error, exit 2).
    pub(crate) fn check(self) -> Result<Filter, CliError> {
        if let Some(s) = &self.status
            && !STATES.contains(&s.as_str())
            && status_of(s).is_none()
        {
            return Err(CliError::Usage(format!(
                "unknown --status {s:?}: expected running, waiting, parked, finished, ok, \
                 failed, cancelled, timed-out, terminated, continued-as-new or reset"
            )));
        }
        Ok(Filter {
            status: self.status,
            wtype: self.wtype,
            limit: self.limit,
        })
    }
}

/// What `fusee runs` keeps: a checked [`FilterArgs`].
#[derive(Debug)]
pub(crate) struct Filter {
    pub(crate) status: Option<String>,
    pub(crate) wtype: Option<String>,
    pub(crate) limit: Option<usize>,
}

impl Filter {
    /// Whether `r` passes.
    fn keeps(&self, r: &RunSummary) -> bool {
        let status = self.status.as_deref().is_none_or(|s| match s {
            "finished" => r.state.is_finished(),
            other => r.state.name() == other,
        });
        status && self.wtype.as_deref().is_none_or(|t| r.workflow == t)
    }
}

/// A run as `runs --json` writes it.
pub(crate) fn run_json(r: &RunSummary) -> Value {
    json!({
        "shard": r.shard,
        "run": r.run,
        "id": r.id,
        "workflow": r.workflow,
        "status": r.state.name(),
        "started_ms": r.started_ms,
        "finished_ms": r.finished_ms,
        "last_lsn": r.last_lsn,
        "waiting_for": r.waiting_for.iter().map(|w| match w {
            Waiting::Signal(name) => json!({"signal": name}),
            Waiting::Sleep(at) => json!({"sleep_until_ms": at}),
        }).collect::<Vec<_>>(),
    })
}

/// What a run waits for, in words.
fn waiting_text(w: &Waiting) -> String {
    match w {
        Waiting::Signal(name) => format!("signal {name}"),
        Waiting::Sleep(at) => format!("sleep until {}", fmt::time(*at)),
    }
}

/// `fusee runs DIR`.
pub(crate) fn runs(
    dir: &Path,
    expected: Option<Backend>,
    json: bool,
    filter: &Filter,
) -> Result<ExitCode, CliError> {
    let (_, g) = gather(dir, expected, Request::Overview)?;
    let runs: Vec<RunSummary> = g
        .runs
        .into_iter()
        .filter(|r| filter.keeps(r))
        .take(filter.limit.unwrap_or(usize::MAX))
        .collect();
    render_runs(&runs, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `runs` as `fusee runs` does: a table, or JSON.
pub(crate) fn render_runs(runs: &[RunSummary], json: bool) -> Result<(), CliError> {
    if json {
        return emit_json(&Value::Array(runs.iter().map(run_json).collect()));
    }
    let mut t = fmt::Table::new(&[
        "shard",
        "run",
        "id",
        "workflow",
        "status",
        "started",
        "finished",
        "waiting for",
    ]);
    for r in runs {
        t.row([
            r.shard.to_string(),
            r.run.to_string(),
            r.id.clone(),
            r.workflow.clone(),
            r.state.name().to_string(),
            fmt::time(r.started_ms),
            r.finished_ms.map_or("-".into(), fmt::time),
            r.waiting_for
                .iter()
                .map(waiting_text)
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    emit(&format!("{t}\n{} run(s)\n", runs.len()))
}
