//! The engines users would pick instead of Fusee, on the same machine and
//! disk, in the same run (`fusee-compare --peers ...`): Temporal (its dev
//! server on SQLite, a Python worker), Restate (its server, a Node
//! service), DBOS Transact on SQLite and on PostgreSQL (a Python library;
//! PostgreSQL the run's server, the one Fusee's PostgreSQL backend runs on
//! beside it). `scripts/peers.sh` installs them under `target/peers/`.
//!
//! The workloads are the engine section's ([`super`]): a chain of
//! sequential steps (per-step gap, p50 and p99, with the floor's
//! `pwrite` + `fdatasync` measured just before and after each turn), a
//! fanout of concurrent workflows of [`FANOUT_STEPS`] steps (steps per
//! second), durable timers of [`TIMER_SLEEP`] (first start to last result)
//! and recovery after a SIGKILL of the worker mid-fanout (restart to the
//! last result). Subjects take turns, the first rotating, each server
//! started for its turn and stopped after it. Peers far slower than Fusee
//! run fewer workflows ([`PeersPlan`]): per-step figures stay per step.
//! After the workloads, a short chain per subject runs under
//! `strace -f -c` to count its flush calls: the durability each one
//! really has, checked.
//!
//! | module | owns |
//! |---|---|
//! | [`protocol`] | the peers' programs' output, parsed and checked |
//! | [`process`] | servers, programs, `strace` |
//! | [`report`] | the table, the ratios, the goals |

pub mod process;
pub mod protocol;
pub mod report;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fusee::{Config, Engine};

use self::process::{Install, Program, Server, Strace};
use self::report::{PeersReport, SubjectFigures};
use super::child;
use super::measure::{FLOOR_RECORD, finish_killed_fanout, floor_halves, rotation, settle};
use super::workload::{self, Stamps, WorkResult};
use super::{EngineMetric, EngineSubject, FANOUT_STEPS, TIMER_SLEEP};
use crate::error::{BenchError, Result};
use crate::floor::FloorFile;
use crate::progress::Progress;
use crate::stats::Latencies;

/// An engine peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PeerKind {
    /// Temporal: `temporal server start-dev` on SQLite, a temporalio worker.
    Temporal,
    /// Restate: `restate-server`, a service on its TypeScript SDK.
    Restate,
    /// DBOS Transact with its system database on SQLite.
    DbosSqlite,
    /// DBOS Transact with its system database on the run's PostgreSQL.
    DbosPostgres,
}

impl PeerKind {
    /// Every peer, in report order.
    pub const ALL: [PeerKind; 4] = [
        PeerKind::Temporal,
        PeerKind::Restate,
        PeerKind::DbosSqlite,
        PeerKind::DbosPostgres,
    ];

    /// The name `--peers` takes.
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::Temporal => "temporal",
            PeerKind::Restate => "restate",
            PeerKind::DbosSqlite => "dbos-sqlite",
            PeerKind::DbosPostgres => "dbos-postgres",
        }
    }

    /// Parses `--peers`' comma-separated list.
    pub fn parse_list(list: &str) -> std::result::Result<Vec<PeerKind>, String> {
        let mut v = Vec::new();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let k = Self::ALL
                .into_iter()
                .find(|k| k.name() == name)
                .ok_or_else(|| {
                    format!(
                        "no peer {name:?}; known: {}",
                        Self::ALL.map(PeerKind::name).join(", ")
                    )
                })?;
            if !v.contains(&k) {
                v.push(k);
            }
        }
        if v.is_empty() {
            return Err("--peers needs at least one peer".into());
        }
        Ok(v)
    }

    /// Its program in `benches/peers/` (Python; Restate's is Node's).
    pub fn program(self) -> &'static str {
        match self {
            PeerKind::Temporal => "temporal_peer.py",
            PeerKind::Restate => "restate_peer.cjs",
            PeerKind::DbosSqlite | PeerKind::DbosPostgres => "dbos_peer.py",
        }
    }

    /// How it is configured to make a step durable (what the fsync count
    /// beside it checks).
    pub fn durability(self) -> &'static str {
        match self {
            PeerKind::Temporal => {
                "dev server's SQLite store (--db-filename), as the CLI configures it; a step is \
                 an activity: its events are in the server's store before the workflow goes on"
            }
            PeerKind::Restate => {
                "defaults: the log on the node's RocksDB with its WAL fsynced \
                 (rocksdb-disable-wal-fsync = false); a step is a ctx.run acknowledged by the server"
            }
            PeerKind::DbosSqlite => {
                "SQLite as DBOS opens it (rollback journal, synchronous=FULL: SQLite's defaults); \
                 a step's output committed before the workflow goes on"
            }
            PeerKind::DbosPostgres => {
                "PostgreSQL as the run's server is set (its settings, read from it, beside the \
                 version); a step's output committed before the workflow goes on"
            }
        }
    }
}

impl PeerKind {
    /// What its recovery after the worker's SIGKILL waits for.
    pub fn recovery(self) -> &'static str {
        match self {
            PeerKind::Temporal => {
                "a new worker; the activities in flight at the kill are retried once their \
                 start-to-close timeout (10 s, the worker's setting) passes"
            }
            PeerKind::Restate => {
                "the service back (a new process); the server retries the invocations in flight \
                 under its default retry policy"
            }
            PeerKind::DbosSqlite | PeerKind::DbosPostgres => {
                "a new process whose DBOS.launch() recovers the pending workflows from their \
                 last recorded step"
            }
        }
    }
}

/// A subject of the peers' comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeersSubject {
    /// `pwrite` + `fdatasync` of a step record's size (the chain's floor).
    Floor,
    /// Fusee on the file backend.
    FuseeFile,
    /// Fusee on its PostgreSQL backend, on the run's server.
    FuseePostgres,
    /// A peer.
    Peer(PeerKind),
}

impl PeersSubject {
    /// The name reports show.
    pub fn name(self) -> &'static str {
        match self {
            PeersSubject::Floor => "floor",
            PeersSubject::FuseeFile => "fusee-file",
            PeersSubject::FuseePostgres => "fusee-postgres",
            PeersSubject::Peer(k) => k.name(),
        }
    }
}

/// How many workflows one subject runs per turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Steps of each chain.
    pub chain_steps: u32,
    /// Workflows of each fanout (and of the recovery's).
    pub fanout_runs: u32,
    /// Timer workflows.
    pub timers: u32,
}

/// How much of each workload a peers' run makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeersPlan {
    /// Rounds of the chain (every subject once per round).
    pub chain_rounds: u32,
    /// Rounds of the fanout.
    pub fanout_rounds: u32,
    /// Fusee's counts, on either backend.
    pub fusee: Counts,
    /// Each peer's counts, scaled down to what it does in seconds.
    pub peers: Vec<(PeerKind, Counts)>,
    /// Steps of the chain whose flush calls are counted.
    pub fsync_steps: u32,
}

impl PeersPlan {
    /// The hand-run plan; `quick` divides every count by ten (at least a
    /// few workflows each).
    pub fn new(quick: bool) -> PeersPlan {
        let c = |chain_steps: u32, fanout_runs: u32, timers: u32| {
            let d = if quick { 10 } else { 1 };
            Counts {
                chain_steps: (chain_steps / d).max(10),
                fanout_runs: (fanout_runs / d).max(4),
                timers: (timers / d).max(4),
            }
        };
        // Sized on the machine of RESULTS.md: Temporal ran about 12 steps
        // per second of fanout, DBOS about 60, Restate about 700; a turn
        // stays within seconds to a minute.
        PeersPlan {
            chain_rounds: if quick { 1 } else { 3 },
            fanout_rounds: if quick { 1 } else { 2 },
            fusee: c(1000, 1000, 10_000),
            peers: vec![
                (PeerKind::Temporal, c(100, 20, 100)),
                (PeerKind::Restate, c(300, 200, 1000)),
                (PeerKind::DbosSqlite, c(100, 50, 200)),
                (PeerKind::DbosPostgres, c(100, 50, 200)),
            ],
            fsync_steps: 50,
        }
    }

    /// One line naming the rounds and Fusee's counts (each peer's are in
    /// its row of the report).
    pub fn describe(&self) -> String {
        let f = self.fusee;
        format!(
            "engine peers: chain of {} steps x {} rounds, fanout of {} workflows x {FANOUT_STEPS} \
             steps x {} rounds, {} timers of {} s, recovery after SIGKILL mid-fanout of {} \
             workflows (Fusee's counts; the peers' fewer, per peer in the report); flush calls \
             counted on a chain of {} steps",
            f.chain_steps,
            self.chain_rounds,
            f.fanout_runs,
            self.fanout_rounds,
            f.timers,
            TIMER_SLEEP.as_secs_f64(),
            f.fanout_runs,
            self.fsync_steps
        )
    }

    /// `subject`'s counts (the floor's are Fusee's chain).
    pub fn counts(&self, subject: PeersSubject) -> Counts {
        match subject {
            PeersSubject::Peer(k) => self
                .peers
                .iter()
                .find(|(p, _)| *p == k)
                .map_or(self.fusee, |&(_, c)| c),
            _ => self.fusee,
        }
    }
}

/// The run's PostgreSQL server: `$FUSEE_PG_SINGLE_URL` (a server alone,
/// as `scripts/postgres.sh` starts it), else `$FUSEE_PG_URL`.
pub fn postgres_url() -> Option<String> {
    ["FUSEE_PG_SINGLE_URL", "FUSEE_PG_URL"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

/// The port of a `postgresql://user@host:port/db` URL.
fn url_port(url: &str) -> Option<u16> {
    let rest = url.split_once("://")?.1;
    let hostport = rest.split('/').next()?.rsplit('@').next()?;
    hostport.rsplit_once(':')?.1.parse().ok()
}

/// `url` with its database replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.split('/').next().unwrap_or(rest);
            format!("{scheme}://{host}/{db}")
        }
        None => url.to_string(),
    }
}

/// One subject's accumulated measurements.
struct Books {
    subject: PeersSubject,
    dir: PathBuf,
    gaps: Latencies,
    beside: Latencies,
    fanout_steps: u64,
    fanout_time: Duration,
    /// This process's CPU time during Fusee's fanouts (a peer's runs in
    /// processes of its own: not measured).
    fanout_cpu: Duration,
    result: SubjectFigures,
}

fn measure_err(
    subject: PeersSubject,
    phase: &'static str,
    e: impl std::fmt::Display,
) -> BenchError {
    BenchError::Measure {
        subject: subject.name().into(),
        phase,
        source: e.to_string().into(),
    }
}

/// Everything one run shares: the install, the Fusee runtime, the
/// PostgreSQL server, the child program for Fusee's recovery.
struct Run<'a> {
    install: Install,
    runtime: tokio::runtime::Runtime,
    pg_url: Option<String>,
    dbos_pg_url: Option<String>,
    nonce: String,
    plan: &'a PeersPlan,
}

/// Measures Fusee (file; PostgreSQL when a server is there and the
/// backend compiled in), the floor and `peers`, files under `dir`.
pub fn measure_peers(
    peers: &[PeerKind],
    plan: &PeersPlan,
    dir: &Path,
    progress: &Progress,
) -> Result<PeersReport> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| BenchError::io("starting a tokio runtime", ".", e))?;
    let pg_url = postgres_url();
    // Workflow ids and schemas new to every run, so none meets a leftover.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let nonce = format!("{}x{secs}", std::process::id());
    let run = Run {
        install: Install::locate(),
        runtime,
        dbos_pg_url: pg_url
            .as_deref()
            .map(|u| with_database(u, &format!("fusee_dbos_{}", std::process::id()))),
        pg_url,
        nonce,
        plan,
    };
    let mut subjects = vec![PeersSubject::Floor, PeersSubject::FuseeFile];
    let mut notes = Vec::new();
    if fusee::Backend::Postgres.compiled_in() && run.pg_url.is_some() {
        subjects.push(PeersSubject::FuseePostgres);
    } else {
        notes.push(
            "fusee-postgres: not measured (needs the fusee-benches `postgres` feature and \
             FUSEE_PG_URL: `source scripts/postgres.sh`)"
                .to_string(),
        );
    }
    for &k in peers {
        if k == PeerKind::DbosPostgres && run.pg_url.is_none() {
            notes.push(format!(
                "{}: not measured: no PostgreSQL server (`source scripts/postgres.sh`)",
                k.name()
            ));
        } else if let Some(why) = run.install.missing(k) {
            notes.push(format!("{}: not measured: {why}", k.name()));
        } else {
            subjects.push(PeersSubject::Peer(k));
        }
    }
    let mut books: Vec<Books> = subjects
        .iter()
        .map(|&s| {
            let dir = dir.join(s.name());
            std::fs::create_dir_all(&dir).map_err(|e| BenchError::io("creating", &dir, e))?;
            let mut result = SubjectFigures::new(s.name(), plan.counts(s));
            if let PeersSubject::Peer(k) = s {
                result.version = run.install.version(k);
                result.durability = k.durability().to_string();
            }
            Ok(Books {
                subject: s,
                dir,
                gaps: Latencies::default(),
                beside: Latencies::default(),
                fanout_steps: 0,
                fanout_time: Duration::ZERO,
                fanout_cpu: Duration::ZERO,
                result,
            })
        })
        .collect::<Result<_>>()?;
    describe_fusee_and_floor(&run, &mut books);
    let n = books.len();
    let mut turn = 0;
    let mut floor = FloorFile::create(
        dir.join("floor.dat"),
        (FLOOR_RECORD as u64 * u64::from(plan.fusee.chain_steps) * u64::from(plan.chain_rounds))
            .max(1 << 20)
            * 2
            * n as u64,
    )
    .map_err(|e| measure_err(PeersSubject::Floor, "peers chain", e))?;
    for round in 0..plan.chain_rounds {
        for i in rotation(n, turn) {
            if books[i].subject == PeersSubject::Floor {
                continue;
            }
            let (before, after) = floor_halves(plan.fusee.chain_steps);
            floor_block(&mut books, &mut floor, i, before)?;
            progress.line(format_args!(
                "peers: chain, round {}/{}: {}",
                round + 1,
                plan.chain_rounds,
                books[i].subject.name()
            ));
            settle();
            let r = chain_turn(&run, &mut books[i], round);
            tolerate(&mut books[i], "chain", r)?;
            floor_block(&mut books, &mut floor, i, after)?;
        }
        turn += 1;
    }
    for round in 0..plan.fanout_rounds {
        for i in rotation(n, turn) {
            if books[i].subject == PeersSubject::Floor {
                continue;
            }
            progress.line(format_args!(
                "peers: fanout of {} x {FANOUT_STEPS} steps, round {}/{}: {}",
                plan.counts(books[i].subject).fanout_runs,
                round + 1,
                plan.fanout_rounds,
                books[i].subject.name()
            ));
            settle();
            let r = fanout_turn(&run, &mut books[i], round);
            tolerate(&mut books[i], "fanout", r)?;
        }
        turn += 1;
    }
    for i in rotation(n, turn) {
        if books[i].subject == PeersSubject::Floor {
            continue;
        }
        progress.line(format_args!(
            "peers: {} timers of {} s: {}",
            plan.counts(books[i].subject).timers,
            TIMER_SLEEP.as_secs_f64(),
            books[i].subject.name()
        ));
        settle();
        let r = timers_turn(&run, &mut books[i]);
        tolerate(&mut books[i], "timers", r)?;
    }
    turn += 1;
    for i in rotation(n, turn) {
        if books[i].subject == PeersSubject::Floor {
            continue;
        }
        progress.line(format_args!(
            "peers: recovery after SIGKILL mid-fanout: {}",
            books[i].subject.name()
        ));
        settle();
        let r = recovery_turn(&run, &mut books[i]);
        tolerate(&mut books[i], "recovery", r)?;
    }
    for b in &mut books {
        if b.subject == PeersSubject::Floor || !Strace::available() {
            continue;
        }
        progress.line(format_args!(
            "peers: flush calls of a chain of {} steps, under strace: {}",
            plan.fsync_steps,
            b.subject.name()
        ));
        let r = fsync_turn(&run, b);
        tolerate(b, "fsync count", r)?;
    }
    if !Strace::available() {
        notes.push("flush calls not counted: no strace (scripts/peers.sh installs it)".into());
    }
    for b in &mut books {
        for (m, p) in [
            (EngineMetric::ChainP50, 50.0),
            (EngineMetric::ChainP99, 99.0),
        ] {
            if let Some(d) = b.gaps.percentile(p) {
                b.result.figures.set(m, d.as_secs_f64() * 1e6);
                if let Some(f) = b.beside.percentile(p) {
                    let beside = if p == 50.0 {
                        EngineMetric::ChainFloorP50
                    } else {
                        EngineMetric::ChainFloorP99
                    };
                    b.result.figures.set(beside, f.as_secs_f64() * 1e6);
                }
            }
        }
        if b.fanout_steps > 0 {
            b.result.figures.set(
                EngineMetric::FanoutRate,
                b.fanout_steps as f64 / b.fanout_time.as_secs_f64().max(1e-9),
            );
        }
        if b.fanout_cpu > Duration::ZERO && b.fanout_steps > 0 {
            b.result.figures.set(
                EngineMetric::FanoutCpu,
                b.fanout_cpu.as_secs_f64() * 1e6 / b.fanout_steps as f64,
            );
        }
        if b.subject == PeersSubject::Floor {
            b.result
                .figures
                .set(EngineMetric::TimersDone, TIMER_SLEEP.as_secs_f64());
        }
    }
    if let Some(url) = &run.dbos_pg_url
        && subjects.contains(&PeersSubject::Peer(PeerKind::DbosPostgres))
    {
        drop_database(url);
    }
    Ok(PeersReport {
        plan: plan.clone(),
        subjects: books.into_iter().map(|b| b.result).collect(),
        notes,
    })
}

/// The floor's and Fusee's versions and durability settings, and the
/// PostgreSQL server's settings, read from it.
fn describe_fusee_and_floor(run: &Run<'_>, books: &mut [Books]) {
    let pg = run.pg_url.as_deref().map(postgres_settings);
    for b in books {
        match b.subject {
            PeersSubject::Floor => {
                b.result.version = "-".into();
                b.result.durability =
                    format!("pwrite + fdatasync of {FLOOR_RECORD} bytes on a preallocated file");
            }
            PeersSubject::FuseeFile => {
                b.result.version = format!("fusee {}", env!("CARGO_PKG_VERSION"));
                b.result.durability =
                    "file backend: group commit, one flush for every record that arrived meanwhile"
                        .into();
            }
            PeersSubject::FuseePostgres => {
                b.result.version = format!(
                    "fusee {} on {}",
                    env!("CARGO_PKG_VERSION"),
                    pg.clone().unwrap_or_default()
                );
                b.result.durability =
                    "PostgreSQL backend, synchronous_commit = on (its default): a commit per \
                     group of records"
                        .into();
            }
            PeersSubject::Peer(PeerKind::DbosPostgres) => {
                b.result
                    .version
                    .push_str(&format!(" on {}", pg.clone().unwrap_or_default()));
            }
            PeersSubject::Peer(_) => {}
        }
    }
}

/// The server's version and the settings that decide a commit's
/// durability, read with `psql` (`unknown` without it).
fn postgres_settings(url: &str) -> String {
    let out = std::process::Command::new("psql")
        .arg(url)
        .args([
            "-Atc",
            "SELECT current_setting('server_version') || ', fsync=' || current_setting('fsync') \
             || ', synchronous_commit=' || current_setting('synchronous_commit') \
             || ', wal_sync_method=' || current_setting('wal_sync_method')",
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            format!("PostgreSQL {}", String::from_utf8_lossy(&o.stdout).trim())
        }
        _ => "PostgreSQL (settings unknown: no psql)".into(),
    }
}

fn drop_database(url: &str) {
    let Some(db) = url.rsplit('/').next() else {
        return;
    };
    let admin = with_database(url, "postgres");
    // Best effort: the scratch server is the run's; a leftover database
    // costs nothing but disk.
    let _ = std::process::Command::new("psql")
        .arg(&admin)
        .args([
            "-qAtc",
            &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// A failed turn of a peer becomes a note and the run goes on (the peer
/// is measured as it is); a failure of Fusee stops the comparison.
fn tolerate(b: &mut Books, workload: &'static str, r: Result<()>) -> Result<()> {
    match (b.subject, r) {
        (_, Ok(())) => Ok(()),
        (PeersSubject::Peer(_), Err(e)) => {
            b.result.figures.failed.push(workload);
            b.result
                .figures
                .notes
                .push(format!("{workload}: not measured: {e}"));
            Ok(())
        }
        (_, Err(e)) => Err(e),
    }
}

/// `count` floor writes beside subject `i`'s chain turn.
fn floor_block(books: &mut [Books], floor: &mut FloorFile, i: usize, count: u32) -> Result<()> {
    settle();
    let record = [7u8; FLOOR_RECORD];
    let f = books
        .iter()
        .position(|b| b.subject == PeersSubject::Floor)
        .unwrap_or(0);
    for _ in 0..count {
        let t = Instant::now();
        floor
            .write_sync(&record)
            .map_err(|e| measure_err(PeersSubject::Floor, "peers chain", e))?;
        let d = t.elapsed();
        books[f].gaps.push(d);
        books[i].beside.push(d);
    }
    Ok(())
}

/// The PostgreSQL schema of Fusee's `what` turn: a schema per turn, so no
/// turn waits for another's leases.
fn pg_schema(run: &Run<'_>, what: &str) -> String {
    format!("peers_{}_{what}", run.nonce)
}

fn fusee_config(run: &Run<'_>, subject: PeersSubject, dir: &Path, what: &str) -> Config {
    match subject {
        PeersSubject::FuseePostgres => workload::postgres_config(
            run.pg_url.as_deref().unwrap_or_default(),
            &pg_schema(run, what),
        ),
        _ => workload::config(fusee::Backend::File, &dir.join(what)),
    }
}

/// Starts `b`'s server (if any) for a turn.
fn server(run: &Run<'_>, b: &Books) -> WorkResult<Server> {
    let PeersSubject::Peer(k) = b.subject else {
        return Err("not a peer".into());
    };
    Server::start(
        &run.install,
        k,
        &b.dir.join("server"),
        run.dbos_pg_url.as_deref(),
    )
}

fn args(v: &[&dyn std::fmt::Display]) -> Vec<String> {
    v.iter().map(|a| a.to_string()).collect()
}

fn chain_turn(run: &Run<'_>, b: &mut Books, round: u32) -> Result<()> {
    let subject = b.subject;
    let steps = run.plan.counts(subject).chain_steps;
    let id = format!("chain-{}-{round}", run.nonce);
    let gaps = match subject {
        PeersSubject::Floor => return Ok(()),
        PeersSubject::FuseeFile | PeersSubject::FuseePostgres => {
            let config = fusee_config(run, subject, &b.dir, &format!("chain{round}")).shards(1);
            run.runtime
                .block_on(async {
                    let engine = Engine::open(config).await?;
                    let stamps = Stamps::default();
                    workload::register(&engine, &stamps);
                    let r = workload::chain(&engine, &stamps, &id, steps).await?;
                    engine.close().await?;
                    WorkResult::Ok(r.gaps)
                })
                .map_err(|e| measure_err(subject, "peers chain", e))?
        }
        PeersSubject::Peer(_) => {
            let server = server(run, b).map_err(|e| measure_err(subject, "peers chain", e))?;
            let r = (|| -> WorkResult<Vec<Duration>> {
                let mut p = server.program(&run.install, &args(&[&"chain", &id, &steps]))?;
                p.ready_go(|_| Ok(()))?;
                Ok(protocol::chain_gaps(&p.result()?, steps)?)
            })();
            let r = server.stop_after(r);
            r.map_err(|e| measure_err(subject, "peers chain", e))?
        }
    };
    for g in gaps {
        b.gaps.push(g);
    }
    Ok(())
}

fn fanout_turn(run: &Run<'_>, b: &mut Books, round: u32) -> Result<()> {
    let subject = b.subject;
    let runs = run.plan.counts(subject).fanout_runs;
    let prefix = format!("fan-{}-{round}", run.nonce);
    let (elapsed, cpu) = match subject {
        PeersSubject::Floor => return Ok(()),
        PeersSubject::FuseeFile | PeersSubject::FuseePostgres => {
            let config = fusee_config(run, subject, &b.dir, &format!("fanout{round}"));
            run.runtime
                .block_on(async {
                    let engine = Engine::open(config).await?;
                    workload::register(&engine, &Stamps::default());
                    let r = workload::fanout(&engine, &prefix, runs, FANOUT_STEPS).await?;
                    engine.close().await?;
                    WorkResult::Ok(r)
                })
                .map(|r| (r.elapsed, r.cpu))
                .map_err(|e| measure_err(subject, "peers fanout", e))?
        }
        PeersSubject::Peer(_) => {
            let server = server(run, b).map_err(|e| measure_err(subject, "peers fanout", e))?;
            let r = (|| -> WorkResult<Duration> {
                let mut p = server.program(
                    &run.install,
                    &args(&[&"fanout", &prefix, &runs, &FANOUT_STEPS]),
                )?;
                Ok(protocol::fanout_elapsed(&p.result()?, runs, FANOUT_STEPS)?)
            })();
            let r = server.stop_after(r);
            (
                r.map_err(|e| measure_err(subject, "peers fanout", e))?,
                Duration::ZERO,
            )
        }
    };
    b.fanout_steps += u64::from(runs) * u64::from(FANOUT_STEPS);
    b.fanout_time += elapsed;
    b.fanout_cpu += cpu;
    Ok(())
}

fn timers_turn(run: &Run<'_>, b: &mut Books) -> Result<()> {
    let subject = b.subject;
    let n = run.plan.counts(subject).timers;
    let prefix = format!("nap-{}", run.nonce);
    let ms = TIMER_SLEEP.as_millis() as u64;
    let done = match subject {
        PeersSubject::Floor => return Ok(()),
        PeersSubject::FuseeFile | PeersSubject::FuseePostgres => {
            let config = fusee_config(run, subject, &b.dir, "timers");
            run.runtime
                .block_on(async {
                    let engine = Engine::open(config).await?;
                    workload::register(&engine, &Stamps::default());
                    let r = workload::timers(&engine, &prefix, n, TIMER_SLEEP).await?;
                    engine.close().await?;
                    WorkResult::Ok(r.all_done)
                })
                .map_err(|e| measure_err(subject, "peers timers", e))?
        }
        PeersSubject::Peer(_) => {
            let server = server(run, b).map_err(|e| measure_err(subject, "peers timers", e))?;
            let r = (|| -> WorkResult<Duration> {
                let mut p = server.program(&run.install, &args(&[&"timers", &prefix, &n, &ms]))?;
                Ok(protocol::timers_done(&p.result()?, TIMER_SLEEP)?)
            })();
            let r = server.stop_after(r);
            r.map_err(|e| measure_err(subject, "peers timers", e))?
        }
    };
    b.result
        .figures
        .set(EngineMetric::TimersDone, done.as_secs_f64());
    Ok(())
}

fn recovery_turn(run: &Run<'_>, b: &mut Books) -> Result<()> {
    let subject = b.subject;
    let runs = run.plan.counts(subject).fanout_runs;
    let phase = "peers recovery";
    let took = match subject {
        PeersSubject::Floor => return Ok(()),
        PeersSubject::FuseeFile | PeersSubject::FuseePostgres => {
            let Some(program) = child::program() else {
                b.result
                    .figures
                    .notes
                    .push("recovery: not measured (no fusee-compare binary for the child)".into());
                return Ok(());
            };
            let dir = b.dir.join("recovery");
            std::fs::create_dir_all(&dir).map_err(|e| BenchError::io("creating", &dir, e))?;
            let schema = pg_schema(run, "recovery");
            let store = match (subject, run.pg_url.as_deref()) {
                (PeersSubject::FuseePostgres, Some(url)) => child::ChildStore::Postgres {
                    url,
                    schema: &schema,
                },
                (PeersSubject::FuseePostgres, None) => {
                    return Err(measure_err(subject, phase, "no PostgreSQL URL"));
                }
                _ => child::ChildStore::Dir(EngineSubject::Fusee(fusee::Backend::File), &dir),
            };
            child::kill_mid_fanout(&program, store, runs, FANOUT_STEPS, runs / 2)
                .map_err(|e| measure_err(subject, phase, e))?;
            // The same store the child used: fusee_config names the schema
            // as pg_schema does, and file stores under dir/recovery.
            let config = fusee_config(run, subject, &b.dir, "recovery");
            run.runtime
                .block_on(finish_killed_fanout(config, runs))
                .map_err(|e| measure_err(subject, phase, e))?
        }
        PeersSubject::Peer(_) => {
            let prefix = format!("rec-{}", run.nonce);
            let server = server(run, b).map_err(|e| measure_err(subject, phase, e))?;
            let r = (|| -> WorkResult<Duration> {
                let a = args(&[&"fanout", &prefix, &runs, &FANOUT_STEPS]);
                let mut p: Program = server.program(&run.install, &a)?;
                loop {
                    match p.message()? {
                        protocol::Message::Done(k) if k >= u64::from(runs / 2) => break,
                        protocol::Message::Result(_) => {
                            return Err("every run finished before the kill".into());
                        }
                        _ => {}
                    }
                }
                p.kill()?;
                let a = args(&[&"recover", &prefix, &runs, &FANOUT_STEPS]);
                let mut p = server.program(&run.install, &a)?;
                Ok(protocol::recovered(&p.result()?, runs)?)
            })();
            let r = server.stop_after(r);
            r.map_err(|e| measure_err(subject, phase, e))?
        }
    };
    b.result
        .figures
        .set(EngineMetric::Recovery, took.as_secs_f64());
    match subject {
        PeersSubject::Peer(k) => b.result.figures.notes.push(format!(
            "recovery: killed (SIGKILL) at half of {runs} results; waits for {}",
            k.recovery()
        )),
        PeersSubject::FuseePostgres => b.result.figures.notes.push(format!(
            "recovery: killed (SIGKILL) at half of {runs} results; the new process takes the \
             lease holder name of the killed one, so it takes its shards back at once (another \
             name would wait for their leases to lapse)"
        )),
        _ => {}
    }
    Ok(())
}

/// A chain of [`PeersPlan::fsync_steps`] under `strace -f -c`: Fusee's
/// in this process, a peer's in its program and its server (PostgreSQL's
/// every process).
fn fsync_turn(run: &Run<'_>, b: &mut Books) -> Result<()> {
    let subject = b.subject;
    let steps = run.plan.fsync_steps;
    let phase = "peers fsync count";
    let id = format!("fsync-{}", run.nonce);
    let pg_port = run.pg_url.as_deref().and_then(url_port);
    let out = b.dir.join("strace.txt");
    let calls = match subject {
        PeersSubject::Floor => return Ok(()),
        PeersSubject::FuseeFile | PeersSubject::FuseePostgres => {
            let config = fusee_config(run, subject, &b.dir, "fsync").shards(1);
            run.runtime
                .block_on(async {
                    let engine = Engine::open(config).await?;
                    let stamps = Stamps::default();
                    workload::register(&engine, &stamps);
                    let mut pids = vec![std::process::id()];
                    if subject == PeersSubject::FuseePostgres {
                        pids.extend(pg_port.map(process::postgres_pids).unwrap_or_default());
                    }
                    let trace = Strace::attach(&pids, out.clone())?;
                    workload::chain(&engine, &stamps, &id, steps).await?;
                    let calls = trace.finish()?;
                    engine.close().await?;
                    WorkResult::Ok(calls)
                })
                .map_err(|e| measure_err(subject, phase, e))?
        }
        PeersSubject::Peer(k) => {
            let server = server(run, b).map_err(|e| measure_err(subject, phase, e))?;
            let r = (|| -> WorkResult<Vec<(String, u64)>> {
                let mut p = server.program(&run.install, &args(&[&"chain", &id, &steps]))?;
                let mut trace = None;
                p.ready_go(|p| {
                    let mut pids = vec![p.pid()];
                    pids.extend(server.pids(if k == PeerKind::DbosPostgres {
                        pg_port
                    } else {
                        None
                    }));
                    trace = Some(Strace::attach(&pids, out.clone())?);
                    Ok(())
                })?;
                protocol::chain_gaps(&p.result()?, steps)?;
                trace.ok_or("strace never attached")?.finish()
            })();
            let r = server.stop_after(r);
            r.map_err(|e| measure_err(subject, phase, e))?
        }
    };
    b.result.fsyncs = Some((steps, calls));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peers_list_parses_and_refuses_unknown_names() {
        assert_eq!(
            PeerKind::parse_list("temporal, dbos-sqlite,temporal"),
            Ok(vec![PeerKind::Temporal, PeerKind::DbosSqlite])
        );
        assert!(PeerKind::parse_list("temporal,nope").is_err());
        assert!(PeerKind::parse_list(" , ").is_err());
        let all = PeerKind::ALL.map(PeerKind::name).join(",");
        assert_eq!(PeerKind::parse_list(&all).map(|v| v.len()), Ok(4));
    }

    #[test]
    fn every_peer_has_counts_and_a_program_and_the_quick_plan_is_smaller() {
        let (full, quick) = (PeersPlan::new(false), PeersPlan::new(true));
        for k in PeerKind::ALL {
            let (f, q) = (
                full.counts(PeersSubject::Peer(k)),
                quick.counts(PeersSubject::Peer(k)),
            );
            assert!(
                q.fanout_runs <= f.fanout_runs && q.fanout_runs >= 4,
                "{k:?}"
            );
            assert!(f.chain_steps <= full.fusee.chain_steps, "{k:?}");
            let program = Install::locate().programs.join(k.program());
            assert!(program.is_file(), "{}", program.display());
        }
    }

    #[test]
    fn postgres_urls_give_their_port_and_take_another_database() {
        let u = "postgresql://postgres@127.0.0.1:55438/postgres";
        assert_eq!(url_port(u), Some(55438));
        assert_eq!(
            with_database(u, "fusee_dbos_7"),
            "postgresql://postgres@127.0.0.1:55438/fusee_dbos_7"
        );
        assert_eq!(url_port("postgresql://localhost/db"), None);
    }
}
