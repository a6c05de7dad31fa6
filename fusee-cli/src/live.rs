//! Live mode: with `--url`, `inspect`, `runs` and `show` ask a running
//! engine's server (`fusee-server`'s API, through
//! [`fusee_server::Client`]) instead of reading a directory, and the verbs
//! (`start`, `signal`, `cancel`, `terminate`, `pause`, `resume`, `reset`)
//! act on its runs. What they print goes through the offline commands'
//! renderers ([`summary::render_runs`], [`summary::render_overview`],
//! [`show::render`]): only where the data comes from differs.
//!
//! The API lists runs without what they wait for or their search
//! attributes, so `runs` and `inspect` describe each listed run too (a few
//! requests in flight at once), which also tells a waiting run from a
//! running one as a store does. A description is of an ID's latest run: an
//! older run of its chain (a reset's) keeps its own row, its attributes
//! read from its journal. A run that cannot be described (an ID no URL can
//! carry) keeps what the listing says, and the command says so on stderr
//! once instead of failing.

use std::process::ExitCode;

use fusee::AttrMap;
use fusee::inspect::{Waiting, journal};
use fusee_server::model::{
    Description, RunSummary, RunsQuery, ShardInfo, StartReply, StartRequest,
};
use fusee_server::{Client, ClientError};
use serde_json::{Value, json};

use crate::fmt::cut;
use crate::output::{emit, emit_json, say};
use crate::progress::Bar;
use crate::summary::{Filter, Overview, RunRow, ShardRow};
use crate::{CliError, Remote, Verb, show, summary};

/// Runs asked of the server per page.
const PAGE: usize = 1000;

/// Descriptions asked at once.
const IN_FLIGHT: usize = 16;

/// Characters of a URL, an ID or a server's message an error shows at
/// most: a workflow ID may be megabytes, and a URL holds it.
const SHOWN: usize = 200;

/// The client of `remote`'s server, with its token (`--token`, else
/// `$FUSEE_TOKEN`).
fn client(remote: &Remote) -> Result<Client, CliError> {
    let url = remote.url.as_deref().ok_or_else(|| {
        CliError::Usage("this command talks to a live engine: give its server's --url".into())
    })?;
    let client = Client::new(url).map_err(from_client)?;
    let token = remote
        .token
        .clone()
        .or_else(|| std::env::var("FUSEE_TOKEN").ok().filter(|t| !t.is_empty()));
    Ok(match token {
        Some(t) => client.token(t),
        None => client,
    })
}

/// A client error as the command reports it: the server's kind and
/// message with what to do about it, a URL that is not one as a usage
/// error; every URL and message cut to [`SHOWN`] characters.
fn from_client(e: ClientError) -> CliError {
    match e {
        ClientError::Api {
            status,
            kind,
            message,
        } => CliError::Server {
            status,
            kind,
            message: with_hint(status, &cut(&message, SHOWN)),
        },
        ClientError::BadUrl { url, detail } => CliError::Usage(
            ClientError::BadUrl {
                url: cut(&url, SHOWN),
                detail,
            }
            .to_string(),
        ),
        // reqwest's own text repeats the URL: said once, cut, then what
        // went wrong underneath (a refused connection, a reset).
        ClientError::Transport { url, source } => {
            let mut causes = String::new();
            let mut cause = std::error::Error::source(&source);
            while let Some(c) = cause {
                causes = format!("{causes}: {}", cut(&c.to_string(), SHOWN));
                cause = c.source();
            }
            let shown = ClientError::Transport {
                url: cut(&url, SHOWN),
                source: source.without_url(),
            };
            CliError::Other(format!("{shown}{causes}"))
        }
        ClientError::Decode { url, detail } => CliError::Other(
            ClientError::Decode {
                url: cut(&url, SHOWN),
                detail: cut(&detail, SHOWN),
            }
            .to_string(),
        ),
        // An ID `.` or `..`: no request can name it; the directory can.
        e @ ClientError::Unaddressable { .. } => {
            CliError::Usage(format!("{e}: read the store's directory instead of --url"))
        }
    }
}

/// A server's error `message` for HTTP `status`, with what the user can do
/// about the statuses the command itself causes (a missing or wrong token,
/// a URL too long); an empty message (a reply from outside the API) says
/// so.
fn with_hint(status: u16, message: &str) -> String {
    let message = if message.is_empty() {
        "(no message)"
    } else {
        message
    };
    let hint = match status {
        401 => "give the server's token with --token or $FUSEE_TOKEN",
        403 => "this token may not do this: the verbs and backup take the admin token",
        414 => {
            "the request's URL is too long for the server (a workflow ID that long cannot be asked for)"
        }
        _ => return message.to_string(),
    };
    format!("{message}; {hint}")
}

/// Runs `work` on a runtime of this thread (the command does one thing at
/// a time; its requests in flight are tasks of it).
fn block_on<T>(
    work: impl std::future::Future<Output = Result<T, CliError>>,
) -> Result<T, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Other(format!("cannot start the client's runtime: {e}")))?
        .block_on(work)
}

/// A described run's status as a store would name it: `parked` or
/// `waiting` for an unfinished run that is, else the engine's.
fn status_of(d: &Description) -> String {
    match d.status.as_str() {
        "running" if d.parked => "parked".into(),
        "running" if !d.waits.is_empty() => "waiting".into(),
        other => other.to_string(),
    }
}

/// What a described run waits for, as a store says it.
fn waiting_of(d: &Description) -> Vec<Waiting> {
    d.waits
        .iter()
        .filter_map(|w| match w.kind.as_str() {
            "signal" => Some(Waiting::Signal(w.name.clone())),
            "timer" => w.at_ms.map(Waiting::Sleep),
            _ => None,
        })
        .collect()
}

/// What the server said of a listed run besides its row.
enum Known {
    /// The ID's latest run's description, of this very run.
    Latest(Box<Description>),
    /// An older run of the ID's chain: its attributes, from its journal
    /// (a description is of the latest run only).
    Older(AttrMap),
    /// Nothing more: the run is gone meanwhile, or could not be asked for.
    Listed,
}

/// A listed run as a store would show it: the listing's row, completed by
/// what else is `known` of it.
fn row(s: RunSummary, known: Known) -> RunRow {
    let (d, attributes) = match known {
        Known::Latest(d) => {
            let attributes = d
                .attributes
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), fusee::AttrValue::from_json(v)?)))
                .collect();
            (Some(*d), attributes)
        }
        Known::Older(attributes) => (None, attributes),
        Known::Listed => (None, AttrMap::new()),
    };
    let status = match &d {
        Some(d) => status_of(d),
        None if s.parked && s.status == "running" => "parked".into(),
        None => s.status.clone(),
    };
    RunRow {
        shard: s.shard,
        run: s.run,
        status,
        // The description's when it has one: the run may have ended since
        // it was listed.
        finished_ms: d.as_ref().and_then(|d| d.finished_ms).or(s.finished_ms),
        // As a store lists it: a parked run's waits are in its journal
        // (`show`), not in the listing.
        waiting_for: d
            .as_ref()
            .filter(|d| !d.parked)
            .map(waiting_of)
            .unwrap_or_default(),
        last_lsn: None,
        attributes,
        id: s.id,
        workflow: s.workflow,
        started_ms: s.started_ms,
    }
}

/// The search attributes a `fusee-journal` document's records hold at its
/// end, as a store's reader folds them.
fn journal_attributes(doc: &serde_json::Value) -> Result<AttrMap, CliError> {
    let records = journal::from_json(doc)
        .map_err(|e| CliError::Other(format!("the server's journal does not read: {e}")))?;
    let mut bytes = Vec::new();
    for r in &records {
        fusee_core::record::encode_canonical(r, &mut bytes);
    }
    Ok(fusee::attrs::journal_attributes(&bytes))
}

/// What else the server knows of listed run `s`: its description, or for
/// an older run of its ID its journal's attributes. A run gone meanwhile
/// (`not_found`) is [`Known::Listed`].
async fn know(client: &Client, s: &RunSummary) -> Result<Known, CliError> {
    let gone = |e: &ClientError| e.kind() == Some("not_found");
    let d = match client.describe(&s.id).await {
        Ok(d) => d,
        Err(e) if gone(&e) => return Ok(Known::Listed),
        Err(e) => return Err(from_client(e)),
    };
    if d.shard == s.shard && d.run == s.run {
        return Ok(Known::Latest(Box::new(d)));
    }
    match client.journal(&s.id, Some(s.run)).await {
        Ok(doc) => Ok(Known::Older(journal_attributes(&doc)?)),
        Err(e) if gone(&e) => Ok(Known::Listed),
        Err(e) => Err(from_client(e)),
    }
}

/// The listed runs that could not be described, said once on stderr when
/// the listing is done.
#[derive(Default)]
struct Undescribed {
    /// How many.
    count: usize,
    /// The first one's ID and why.
    first: Option<(String, CliError)>,
}

impl Undescribed {
    fn add(&mut self, id: &str, e: CliError) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some((id.to_string(), e));
        }
    }

    /// Says on stderr which runs show only what the listing says.
    fn say(&self) {
        if let Some((id, e)) = &self.first {
            say(&format!(
                "fusee: {} listed run(s) could not be described and show only what the \
                 listing says (no attributes or waits); the first, {:?}: {e}",
                self.count,
                cut(id, SHOWN)
            ));
        }
    }
}

/// Rows of `runs`, [`IN_FLIGHT`] described at a time. A run that cannot
/// be described keeps its listing's row and is counted in `undescribed`.
async fn describe_all(
    client: &Client,
    runs: Vec<RunSummary>,
    bar: &Bar,
    undescribed: &mut Undescribed,
) -> Result<Vec<RunRow>, CliError> {
    let mut out = Vec::with_capacity(runs.len());
    let mut runs = runs.into_iter().peekable();
    while runs.peek().is_some() {
        let chunk: Vec<_> = runs.by_ref().take(IN_FLIGHT).collect();
        let mut tasks = tokio::task::JoinSet::new();
        for (i, s) in chunk.iter().enumerate() {
            let (client, s) = (client.clone(), s.clone());
            tasks.spawn(async move { (i, know(&client, &s).await) });
        }
        let mut known: Vec<Known> = chunk.iter().map(|_| Known::Listed).collect();
        while let Some(done) = tasks.join_next().await {
            let (i, k) = done.map_err(|e| CliError::Other(format!("a description failed: {e}")))?;
            match k {
                Ok(k) => known[i] = k,
                Err(e) => undescribed.add(&chunk[i].id, e),
            }
            bar.inc();
        }
        out.extend(chunk.into_iter().zip(known).map(|(s, k)| row(s, k)));
    }
    Ok(out)
}

/// The runs passing `filter`, newest first, at most its limit: pages of
/// the server's listing (filtered there by type, attributes, and status as
/// far as the API names it), each run described, then filtered by status
/// and type as offline.
async fn rows(client: &Client, filter: &Filter) -> Result<Vec<RunRow>, CliError> {
    let status = filter.status.as_deref().map(|s| match s {
        // The API's `running` is every unfinished run.
        "running" | "waiting" | "parked" => "running".to_string(),
        other => other.to_string(),
    });
    let limit = filter.limit.unwrap_or(usize::MAX);
    let mut query = RunsQuery {
        status,
        workflow: filter.wtype.clone(),
        attr: filter.attr_query(),
        ..RunsQuery::default()
    };
    let bar = Bar::new(0, "runs");
    let mut out = Vec::new();
    let mut undescribed = Undescribed::default();
    while out.len() < limit {
        // No more than the limit still wants: each listed run costs a
        // description.
        query.limit = Some(PAGE.min(limit - out.len()));
        let page = client.runs(&query).await.map_err(from_client)?;
        let described = describe_all(client, page.runs, &bar, &mut undescribed).await?;
        // The server applied the attribute conditions to each run's own
        // attributes; a run left undescribed has none here to apply them to.
        out.extend(described.into_iter().filter(|r| filter.keeps_listed(r)));
        match page.next {
            Some(next) => query.cursor = Some(next),
            None => break,
        }
    }
    bar.finish();
    undescribed.say();
    out.truncate(limit);
    Ok(out)
}

/// `fusee runs --url URL`.
pub(crate) fn runs(remote: &Remote, json: bool, filter: &Filter) -> Result<ExitCode, CliError> {
    let client = client(remote)?;
    let runs = block_on(rows(&client, filter))?;
    summary::render_runs(&runs, json)?;
    Ok(ExitCode::SUCCESS)
}

fn shard_row(s: ShardInfo) -> ShardRow {
    ShardRow {
        shard: s.shard,
        owned: Some(s.owned),
        sealed_lsn: s.sealed_lsn,
        flushes: Some(s.flushes),
        flush_p50_us: Some(s.flush_p50_us),
        flush_p99_us: Some(s.flush_p99_us),
        loaded_runs: Some(s.loaded_runs),
        parked_runs: Some(s.parked_runs),
        queued: Some(s.queued),
        last_error: s.last_error,
        ..ShardRow::default()
    }
}

/// `fusee inspect --url URL`.
pub(crate) fn inspect(remote: &Remote, json: bool) -> Result<ExitCode, CliError> {
    let client = client(remote)?;
    let every = Filter {
        status: None,
        wtype: None,
        attrs: Vec::new(),
        limit: None,
    };
    let (shards, runs) = block_on(async {
        let shards = client.shards().await.map_err(from_client)?;
        Ok((shards, rows(&client, &every).await?))
    })?;
    let overview = Overview {
        dir: None,
        url: Some(client.base_url().to_string()),
        backend: None,
        disk_bytes: None,
        runs,
        shards: shards.into_iter().map(shard_row).collect(),
    };
    summary::render_overview(&overview, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `fusee show --url URL ID`.
pub(crate) fn show(remote: &Remote, json: bool, id: &str) -> Result<ExitCode, CliError> {
    let client = client(remote)?;
    let doc = block_on(async { client.journal(id, None).await.map_err(from_client) })?;
    show::render(&doc, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `payload`, a command-line argument, as JSON (`null` when absent).
fn json_arg(what: &str, payload: Option<&str>) -> Result<Value, CliError> {
    payload.map_or(Ok(Value::Null), |p| {
        serde_json::from_str(p).map_err(|e| {
            CliError::Usage(format!(
                "the {what} {p:?} is not JSON ({e}); a string is written with its quotes: '\"text\"'"
            ))
        })
    })
}

/// What a verb did, as `--json` writes it and in words.
fn done(verb: &str, id: &str, reply: Option<&StartReply>, json: bool) -> Result<(), CliError> {
    if json {
        let mut v = json!({"verb": verb, "id": id});
        if let (Some(r), Value::Object(m)) = (reply, &mut v) {
            m.insert("shard".into(), r.shard.into());
            m.insert("run".into(), r.run.into());
            m.insert("attached".into(), r.attached.into());
        }
        return emit_json(&v);
    }
    let run = reply.map_or(String::new(), |r| {
        format!(
            " (shard {}, run {}{})",
            r.shard,
            r.run,
            if r.attached { ", attached" } else { "" }
        )
    });
    emit(&format!("{verb}: {}{run}\n", crate::fmt::cell(id)))
}

/// `fusee start|signal|cancel|terminate|pause|resume|reset --url URL ...`.
/// `fusee backup --url URL DEST`: the server's engine backs its store up
/// into DEST (on the server's machine) while it runs.
pub(crate) fn backup(a: &crate::migrate::BackupArgs) -> Result<ExitCode, CliError> {
    let dest = a.live_dest()?.display().to_string();
    let client = client(&a.remote)?;
    let reply = block_on(async { client.backup(&dest).await.map_err(from_client) })?;
    if a.json {
        emit_json(&serde_json::to_value(&reply).map_err(|e| CliError::Other(e.to_string()))?)?;
    } else {
        let longest = reply.pauses.iter().map(|p| p.paused_us).max().unwrap_or(0);
        emit(&format!(
            "backed up into {}: {} shards, {} runs, {} bytes; longest shard pause {:.1} ms, \
             {:.1} ms in all\n",
            reply.dest,
            reply.shards,
            reply.runs,
            reply.bytes,
            longest as f64 / 1000.0,
            reply.took_us as f64 / 1000.0
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn verb(verb: Verb) -> Result<ExitCode, CliError> {
    let (remote, json) = verb.remote();
    let client = client(remote)?;
    match verb {
        Verb::Start {
            workflow,
            id,
            input,
            policy,
            code_version,
            ..
        } => {
            let request = StartRequest {
                workflow,
                id: id.clone(),
                input: json_arg("input", input.as_deref())?,
                policy,
                version: code_version,
                attributes: None,
            };
            let reply = block_on(async { client.start(&request).await.map_err(from_client) })?;
            done("started", &id, Some(&reply), json)?;
        }
        Verb::Signal {
            id,
            name,
            payload,
            dedup,
            ..
        } => {
            let payload = json_arg("payload", payload.as_deref())?;
            block_on(async {
                match &dedup {
                    Some(key) => client.signal_once(&id, &name, key, &payload).await,
                    None => client.signal(&id, &name, &payload).await,
                }
                .map_err(from_client)
            })?;
            done("signalled", &id, None, json)?;
        }
        Verb::Cancel {
            id, reason, grace, ..
        } => {
            block_on(async {
                match grace {
                    Some(grace) => client.cancel_with_grace(&id, &reason, grace).await,
                    None => client.cancel(&id, &reason).await,
                }
                .map_err(from_client)
            })?;
            done("cancel asked", &id, None, json)?;
        }
        Verb::Terminate { id, reason, .. } => {
            block_on(async { client.terminate(&id, &reason).await.map_err(from_client) })?;
            done("terminated", &id, None, json)?;
        }
        Verb::Pause { id, .. } => {
            block_on(async { client.pause(&id).await.map_err(from_client) })?;
            done("paused", &id, None, json)?;
        }
        Verb::Resume { id, .. } => {
            block_on(async { client.resume(&id).await.map_err(from_client) })?;
            done("resumed", &id, None, json)?;
        }
        Verb::Reset {
            id,
            step,
            reason,
            run,
            ..
        } => {
            let reply = block_on(async {
                client
                    .reset(&id, &step, &reason, run)
                    .await
                    .map_err(from_client)
            })?;
            done("reset", &id, Some(&reply), json)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
