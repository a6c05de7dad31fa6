//! `fusee inspect` and `fusee runs`.

use std::path::Path;
use std::process::ExitCode;

use fusee::inspect::{RunSummary, Waiting, status_of};
use fusee::{AttrCondition, AttrMap, Backend};
use serde_json::{Value, json};

use crate::output::{emit, emit_json};
use crate::store::{Request, gather};
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

/// Runs counted by status, in a fixed order (`running`, `waiting`,
/// `parked`, the live engine's `waiting-for-code` and `stopped`, then the
/// finished statuses; any other name last).
pub(crate) fn count_states<'a>(runs: impl IntoIterator<Item = &'a RunRow>) -> Vec<(String, u64)> {
    const FIRST: [&str; 5] = [
        "running",
        "waiting",
        "parked",
        "waiting-for-code",
        "stopped",
    ];
    let rank = |s: &str| {
        FIRST.iter().position(|f| *f == s).unwrap_or_else(|| {
            FIRST.len()
                + fusee::core::record::Status::ALL
                    .iter()
                    .position(|st| Some(*st) == status_of(s))
                    .unwrap_or(usize::MAX - FIRST.len())
        })
    };
    let mut counts: std::collections::BTreeMap<(usize, &str), u64> = Default::default();
    for r in runs {
        *counts.entry((rank(&r.status), &r.status)).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((_, s), n)| (s.to_string(), n))
        .collect()
}

fn states_json(runs: &[&RunRow]) -> Value {
    Value::Object(
        count_states(runs.iter().copied())
            .into_iter()
            .map(|(s, n)| (s, Value::from(n)))
            .collect(),
    )
}

fn states_text(runs: &[&RunRow]) -> String {
    count_states(runs.iter().copied())
        .into_iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What `fusee inspect` shows, from a store or a live engine's server.
#[derive(Debug, Default)]
pub(crate) struct Overview {
    /// The store's directory (offline).
    pub(crate) dir: Option<String>,
    /// The server's URL (live).
    pub(crate) url: Option<String>,
    /// The backend (a store's marker says; the API does not).
    pub(crate) backend: Option<String>,
    /// The directory's bytes on disk.
    pub(crate) disk_bytes: Option<u64>,
    /// Every run.
    pub(crate) runs: Vec<RunRow>,
    /// Every shard.
    pub(crate) shards: Vec<ShardRow>,
}

/// One shard: a store's figures, or a live engine's; what a source does
/// not know is `None`.
#[derive(Debug, Default)]
pub(crate) struct ShardRow {
    pub(crate) shard: u32,
    // A store's: its log, what a recovery replays, its files, checkpoint.
    pub(crate) first_lsn: Option<u64>,
    pub(crate) last_lsn: Option<u64>,
    pub(crate) replayed: Option<u64>,
    pub(crate) index_records: Option<u64>,
    pub(crate) store_position: Option<u64>,
    pub(crate) log_bytes: Option<u64>,
    pub(crate) store_bytes: Option<u64>,
    pub(crate) checkpoint: Option<fusee::inspect::CheckpointInfo>,
    // A live engine's: ownership, the durable LSN, flushes, runs in memory.
    pub(crate) owned: Option<bool>,
    pub(crate) sealed_lsn: Option<u64>,
    pub(crate) flushes: Option<u64>,
    pub(crate) flush_p50_us: Option<u64>,
    pub(crate) flush_p99_us: Option<u64>,
    pub(crate) loaded_runs: Option<u64>,
    pub(crate) parked_runs: Option<u64>,
    pub(crate) queued: Option<u64>,
    pub(crate) last_error: Option<String>,
}

/// `fusee inspect DIR`.
pub(crate) fn inspect(
    dir: &Path,
    expected: Option<Backend>,
    json: bool,
) -> Result<ExitCode, CliError> {
    let (backend, g) = gather(dir, expected, Request::Overview)?;
    let shards = g
        .shards
        .iter()
        .map(|s| {
            let sizes = shard_bytes(dir, backend, s.shard);
            ShardRow {
                shard: s.shard,
                first_lsn: Some(s.first_lsn),
                last_lsn: Some(s.last_lsn),
                replayed: Some(s.replayed),
                index_records: Some(s.index_records),
                store_position: Some(s.store_position),
                log_bytes: sizes.map(|b| b.0),
                store_bytes: sizes.map(|b| b.1),
                checkpoint: s.checkpoint.clone(),
                ..ShardRow::default()
            }
        })
        .collect();
    let overview = Overview {
        dir: Some(dir.display().to_string()),
        url: None,
        backend: Some(backend.name().to_string()),
        disk_bytes: Some(disk_bytes(dir)),
        runs: g.runs.into_iter().map(RunRow::from).collect(),
        shards,
    };
    render_overview(&overview, json)?;
    Ok(ExitCode::SUCCESS)
}

/// A shard's column of the `inspect` table: its header and its cell, for
/// the rows whose source knows it.
type Column = (&'static str, fn(&ShardRow) -> Option<String>);

/// The `inspect` table's columns after `shard`; each is shown when some
/// shard has it.
const SHARD_COLUMNS: [Column; 13] = [
    ("owned", |s| {
        s.owned.map(|o| if o { "yes" } else { "no" }.into())
    }),
    ("log LSNs", |s| {
        let (first, last) = (s.first_lsn?, s.last_lsn?);
        Some(if last >= first {
            format!("{first}..={last}")
        } else {
            format!("none (last {last})")
        })
    }),
    ("durable LSN", |s| s.sealed_lsn.map(|l| l.to_string())),
    ("replayed", |s| s.replayed.map(|n| n.to_string())),
    ("log size", |s| {
        s.first_lsn?;
        Some(s.log_bytes.map_or("(shared)".into(), fmt::bytes))
    }),
    ("store size", |s| {
        s.first_lsn?;
        Some(s.store_bytes.map_or("(shared)".into(), fmt::bytes))
    }),
    ("checkpoint LSN", |s| {
        s.first_lsn?;
        Some(
            s.checkpoint
                .as_ref()
                .map_or("none".into(), |c| c.lsn.to_string()),
        )
    }),
    ("checkpoint taken", |s| {
        s.first_lsn?;
        Some(
            s.checkpoint
                .as_ref()
                .map_or("-".into(), |c| fmt::time(c.created_ms)),
        )
    }),
    ("flushes", |s| s.flushes.map(|n| n.to_string())),
    ("flush p50/p99", |s| {
        Some(format!("{} / {} µs", s.flush_p50_us?, s.flush_p99_us?))
    }),
    ("loaded", |s| s.loaded_runs.map(|n| n.to_string())),
    ("queued", |s| s.queued.map(|n| n.to_string())),
    ("error", |s| s.last_error.clone()),
];

/// Writes `o` as `fusee inspect` does: a header and a table of shards, or
/// JSON (every key present; `null` for what the source does not know).
pub(crate) fn render_overview(o: &Overview, json: bool) -> Result<(), CliError> {
    let on = |shard: u32| -> Vec<&RunRow> { o.runs.iter().filter(|r| r.shard == shard).collect() };
    let all: Vec<&RunRow> = o.runs.iter().collect();
    if json {
        let shards: Vec<Value> = o
            .shards
            .iter()
            .map(|s| {
                json!({
                    "shard": s.shard,
                    "first_lsn": s.first_lsn,
                    "last_lsn": s.last_lsn,
                    "log_records": s.first_lsn.zip(s.last_lsn)
                        .map(|(f, l)| (l + 1).saturating_sub(f)),
                    "replayed": s.replayed,
                    "index_records": s.index_records,
                    "store_position": s.store_position,
                    "log_bytes": s.log_bytes,
                    "store_bytes": s.store_bytes,
                    "checkpoint": s.checkpoint.as_ref().map(|c| json!({
                        "lsn": c.lsn,
                        "created_ms": c.created_ms,
                        "next_run": c.next_run,
                        "loaded_runs": c.loaded_runs,
                        "index_runs": c.index_runs,
                        "bytes": c.bytes,
                    })),
                    "owned": s.owned,
                    "sealed_lsn": s.sealed_lsn,
                    "flushes": s.flushes,
                    "flush_p50_us": s.flush_p50_us,
                    "flush_p99_us": s.flush_p99_us,
                    "loaded_runs": s.loaded_runs,
                    "parked_runs": s.parked_runs,
                    "queued": s.queued,
                    "last_error": s.last_error,
                    "runs": states_json(&on(s.shard)),
                })
            })
            .collect();
        return emit_json(&json!({
            "dir": o.dir,
            "url": o.url,
            "backend": o.backend,
            "disk_bytes": o.disk_bytes,
            "runs": states_json(&all),
            "shards": shards,
        }));
    }
    let mut out = String::new();
    let mut line = |label: &str, value: &str| {
        out.push_str(&format!("{label:<8} {}\n", fmt::cell(value)));
    };
    if let Some(d) = &o.dir {
        line("store", d);
    }
    if let Some(u) = &o.url {
        line("server", u);
    }
    if let Some(b) = &o.backend {
        line("backend", b);
    }
    if let Some(n) = o.disk_bytes {
        line("size", &fmt::bytes(n));
    }
    line("shards", &o.shards.len().to_string());
    let counts = states_text(&all);
    line(
        "runs",
        &if counts.is_empty() {
            o.runs.len().to_string()
        } else {
            format!("{} ({counts})", o.runs.len())
        },
    );
    let columns: Vec<&Column> = SHARD_COLUMNS
        .iter()
        .filter(|(_, cell)| o.shards.iter().any(|s| cell(s).is_some()))
        .collect();
    let mut header = vec!["shard"];
    header.extend(columns.iter().map(|(h, _)| *h));
    header.push("runs");
    let mut t = fmt::Table::new(&header);
    for s in &o.shards {
        let runs = on(s.shard);
        let mut row = vec![s.shard.to_string()];
        row.extend(
            columns
                .iter()
                .map(|(_, cell)| cell(s).unwrap_or_else(|| "-".into())),
        );
        row.push(format!("{} ({})", runs.len(), states_text(&runs)));
        t.row(row);
    }
    out.push_str(&format!("\n{t}\n"));
    emit(&out)
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
    /// Only runs whose search attributes pass this condition (repeat for
    /// several, all must hold): name=value, name>value, name>=value,
    /// name<value, name<=value or name=low..high; a value is type:value
    /// (keyword, text, int, float, bool, time as ms or RFC 3339) or bare
    /// (an integer is an int, a decimal a float, true/false a bool, else a
    /// keyword). E.g. --attr customer_id=42 --attr amount>float:100.
    #[arg(long = "attr", value_name = "CONDITION")]
    attrs: Vec<String>,
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
        let attrs = self
            .attrs
            .iter()
            .map(|a| AttrCondition::parse(a).map_err(|e| CliError::Usage(format!("--attr: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Filter {
            status: self.status,
            wtype: self.wtype,
            attrs,
            limit: self.limit,
        })
    }
}

/// What `fusee runs` keeps: a checked [`FilterArgs`].
#[derive(Debug)]
pub(crate) struct Filter {
    pub(crate) status: Option<String>,
    pub(crate) wtype: Option<String>,
    pub(crate) attrs: Vec<AttrCondition>,
    pub(crate) limit: Option<usize>,
}

impl Filter {
    /// Whether `r` passes.
    pub(crate) fn keeps(&self, r: &RunRow) -> bool {
        self.keeps_listed(r)
            && self
                .attrs
                .iter()
                .all(|c| r.attributes.get(c.name()).is_some_and(|v| c.admits(v)))
    }

    /// Whether `r` passes by status and type, the attribute conditions
    /// aside: what a server's listing, which applied those itself, is
    /// filtered by again (its `running` is also `waiting` and `parked`).
    pub(crate) fn keeps_listed(&self, r: &RunRow) -> bool {
        let status = self.status.as_deref().is_none_or(|s| match s {
            "finished" => status_of(&r.status).is_some(),
            other => r.status == other,
        });
        status && self.wtype.as_deref().is_none_or(|t| r.workflow == t)
    }

    /// The attribute conditions in the server's query form (`;` between).
    pub(crate) fn attr_query(&self) -> Option<String> {
        (!self.attrs.is_empty()).then(|| {
            self.attrs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(";")
        })
    }
}

/// One run as `fusee runs` shows it, from a store or a live engine's
/// server: what both know, and what only one does as `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunRow {
    pub(crate) shard: u32,
    pub(crate) run: u64,
    pub(crate) id: String,
    pub(crate) workflow: String,
    /// `running`, `waiting`, `parked`, how it ended, or (live only) the
    /// engine's `waiting-for-code` and `stopped`.
    pub(crate) status: String,
    pub(crate) started_ms: u64,
    pub(crate) finished_ms: Option<u64>,
    /// The LSN of its last record (a store only: the API does not say).
    pub(crate) last_lsn: Option<u64>,
    pub(crate) waiting_for: Vec<Waiting>,
    /// Its search attributes.
    pub(crate) attributes: AttrMap,
}

impl From<RunSummary> for RunRow {
    fn from(r: RunSummary) -> Self {
        Self {
            shard: r.shard,
            run: r.run,
            status: r.state.name().to_string(),
            id: r.id,
            workflow: r.workflow,
            started_ms: r.started_ms,
            finished_ms: r.finished_ms,
            last_lsn: Some(r.last_lsn),
            waiting_for: r.waiting_for,
            attributes: r.attributes,
        }
    }
}

/// A run as `runs --json` writes it.
pub(crate) fn run_json(r: &RunRow) -> Value {
    json!({
        "shard": r.shard,
        "run": r.run,
        "id": r.id,
        "workflow": r.workflow,
        "status": r.status,
        "started_ms": r.started_ms,
        "finished_ms": r.finished_ms,
        "last_lsn": r.last_lsn,
        "waiting_for": r.waiting_for.iter().map(|w| match w {
            Waiting::Signal(name) => json!({"signal": name}),
            Waiting::Sleep(at) => json!({"sleep_until_ms": at}),
        }).collect::<Vec<_>>(),
        "attributes": r.attributes.iter().map(|(k, v)| (k.clone(), v.to_json())).collect::<serde_json::Map<_, _>>(),
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
    let runs: Vec<RunRow> = g
        .runs
        .into_iter()
        .map(RunRow::from)
        .filter(|r| filter.keeps(r))
        .take(filter.limit.unwrap_or(usize::MAX))
        .collect();
    render_runs(&runs, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `runs` as `fusee runs` does: a table, or JSON.
pub(crate) fn render_runs(runs: &[RunRow], json: bool) -> Result<(), CliError> {
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
            r.status.clone(),
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
