//! Engine processes sharing one PostgreSQL store under leases
//! ([`fusee::Ownership::Lease`]), taken down one after another while they
//! work: each shard moves to a live process within a lease time (plus the
//! retry interval), and nothing acknowledged is lost on the way.
//!
//! Two `lease-child` processes open one store of [`SHARDS`] shards with
//! short leases, each under its own owner name and preferring half the
//! shards, and must split them. Each round every live child is told to
//! drive the round's runs (start with `Attach`, signal `go`, wait for the
//! result: calls for a shard another process owns are `NotOwner` and are
//! tried again), and once a share of the round's results is in, the child
//! owning the most shards is taken down: SIGKILL (a process that dies), or
//! SIGSTOP until the others took its shards and then SIGCONT (a process
//! that hangs past its leases and wakes up: its storage answers `Fenced`,
//! and it must let the shards go without telling any caller a success its
//! records do not back). From the second round on a new standby joins
//! first. Checked:
//!
//! - the first two children split the shards as they prefer;
//! - after each takedown every shard of the victim is owned by another live
//!   child within lease + retry + [`SLACK`]; a paused child, resumed, owns
//!   none of them within a lease + [`SLACK`];
//! - an acknowledged start exists: no run is reported started anew twice,
//!   and no child never taken down starts a run anew once a start of it
//!   was acknowledged (a paused child may report, once resumed, a start
//!   its engine acknowledged before the pause);
//! - an acknowledged signal exists: a run goes on with the `go` of the
//!   first child whose signal to it was acknowledged, unless the signal it
//!   took came from a child taken down before that acknowledgement (whose
//!   own acknowledgement may never have been reported);
//! - a reported result never changes (each step returns the tag of the
//!   child that ran it, so a step run again after its result was durable
//!   changes the result), and every run finishes;
//! - the outside service (each child's ledger file of step calls) never
//!   saw one idempotency key with two inputs, and every step call of a run
//!   carried the token its result has: no step ran on a history another
//!   owner did not keep;
//! - after the last children close cleanly, an engine opening every shard
//!   replays nothing and finds every run's result as reported.
//!
//! A second test times a takeover of many shards: a child owning ten is
//! SIGKILLed, and an engine in the test's process must own all ten within
//! lease + retry + 0.5 s (they open side by side), the fencing token of a
//! step on one of them above the dead owner's lease epoch.
//!
//! Counts: `FUSEE_LEASE_RUNS` runs per round (default 120),
//! `FUSEE_LEASE_ROUNDS` rounds (default 2, each a takedown: even rounds
//! kill; odd ones pause a victim that checkpoints only at close, as the
//! second round's always does, and kill any other),
//! `FUSEE_SEED` the seed of the takedown moments (random by default;
//! printed with every failure), `FUSEE_LEASE_TRACE` (set: every report and
//! takedown printed). Needs the server `scripts/postgres.sh` starts
//! (`FUSEE_PG_URL`); without it the test prints SKIPPED, and fails under
//! `CI`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{
    Child as Process, ChildStdin, ChildStdout, Command as Spawn, ExitStatus, Stdio,
};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use fusee::{Config, Engine, StorageConfig, Workflow};
use fusee_tests::env_u64;
use fusee_tests::lease::{Command, LedgerLine, Report, RunValue, SHARDS, workflow_id};

/// The lease of every child.
const LEASE: Duration = Duration::from_secs(2);
/// How often a child tries the shards it does not own.
const RETRY: Duration = Duration::from_millis(500);
/// What a takeover may take beyond lease + retry: opening the shard (a
/// transaction and the replay of its log), and a loaded machine.
const SLACK: Duration = Duration::from_secs(3);
/// The longest anything else may take: only a hang trips it.
const PATIENCE: Duration = Duration::from_secs(30);

/// The workflow the children run (only its name and types matter here).
const RUN: Workflow<u64, String> = Workflow::new("lease-run");

/// A line a child wrote, or the end of its output.
enum Line {
    Report(Report),
    Garbage(String),
    End,
}

/// Where a child stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Running, never taken down.
    Live,
    /// Stopped by SIGSTOP.
    Paused,
    /// Paused, then resumed: it lost its shards while it slept.
    Resumed,
    /// Killed, or closed and exited.
    Gone,
}

/// One `lease-child` process.
struct Child {
    tag: u64,
    process: Process,
    stdin: Option<ChildStdin>,
    state: State,
    opened: bool,
    closed: bool,
    ended: bool,
    owns: BTreeSet<u32>,
    /// The report number at which it was taken down (killed or paused).
    down_at: Option<u64>,
}

impl Drop for Child {
    fn drop(&mut self) {
        // Never leave a child holding leases (a stopped one dies too).
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Sends `signal` (`-STOP`, `-CONT`) to `pid`.
fn signal(pid: u32, signal: &str) {
    let status = Spawn::new("kill")
        .arg(signal)
        .arg(pid.to_string())
        .status()
        .unwrap_or_else(|e| panic!("running kill {signal} {pid}: {e}"));
    assert!(status.success(), "kill {signal} {pid}: {status}");
}

/// Every child, what they reported, and the checks.
struct Fleet {
    url: String,
    schema: String,
    ledger: PathBuf,
    seed: u64,
    children: Vec<Child>,
    lines: Receiver<(u64, Line)>,
    lines_tx: Sender<(u64, Line)>,
    /// Reports taken so far (their order of arrival).
    seq: u64,
    /// Runs whose start some child reported acknowledged.
    acked: HashSet<u64>,
    /// The child whose start of each run was reported new.
    created: HashMap<u64, u64>,
    /// The first child whose `go` to a run was reported acknowledged, and
    /// when.
    signalled: HashMap<u64, (u64, u64)>,
    /// Every result reported, by run.
    results: BTreeMap<u64, String>,
    /// The children told to drive each run's round: `drivers[round]`.
    drivers: Vec<Vec<u64>>,
    runs_per_round: u64,
    stats: Stats,
}

#[derive(Debug, Default)]
struct Stats {
    kills: u64,
    pauses: u64,
    /// Runs started and not finished when their owner was taken down.
    in_flight: Vec<u64>,
    /// How long each takeover took, from the takedown.
    takeovers: Vec<Duration>,
    /// Runs started anew by a child other than the first to drive them.
    attached: u64,
}

impl Fleet {
    fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!(
            "seed {} (FUSEE_SEED={} replays the takedown moments), schema {}: {what} \
             (ledgers in {})",
            self.seed,
            self.seed,
            self.schema,
            self.ledger.display()
        )
    }

    /// Starts child `tag` preferring `prefer` (`all`, `none`, `0,1`).
    fn spawn(&mut self, prefer: &str) -> u64 {
        let tag = self.children.len() as u64;
        // A child that may be paused checkpoints only at close (see the
        // child's docs); the others every 100 ms, so takedowns land in
        // checkpoints too.
        let checkpoints = if tag % 2 == 1 { "never" } else { "often" };
        let (child, stdout) = start_child(
            &self.url,
            &self.schema,
            &format!("lease-test-{}-{tag}", std::process::id()),
            tag,
            &self.ledger,
            &[prefer, checkpoints],
        );
        let tx = self.lines_tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let line = match Report::parse(&line) {
                    Some(r) => Line::Report(r),
                    None => Line::Garbage(line),
                };
                if tx.send((tag, line)).is_err() {
                    return;
                }
            }
            let _ = tx.send((tag, Line::End));
        });
        self.children.push(child);
        tag
    }

    fn child(&mut self, tag: u64) -> &mut Child {
        &mut self.children[tag as usize]
    }

    /// Writes `command` to child `tag`.
    fn tell(&mut self, tag: u64, command: &Command) {
        let child = self.child(tag);
        let ok = child
            .stdin
            .as_mut()
            .is_some_and(|s| writeln!(s, "{command}").and_then(|()| s.flush()).is_ok());
        if !ok {
            self.fail(format!("child {tag} does not take commands"));
        }
    }

    /// The round run `n` belongs to.
    fn round_of(&self, n: u64) -> usize {
        (n / self.runs_per_round) as usize
    }

    /// Checks one line against everything before it.
    fn take(&mut self, tag: u64, line: Line) {
        self.seq += 1;
        if std::env::var_os("FUSEE_LEASE_TRACE").is_some() {
            match &line {
                Line::Report(r) => eprintln!("#{} child {tag}: {r}", self.seq),
                Line::Garbage(g) => eprintln!("#{} child {tag}: garbage {g:?}", self.seq),
                Line::End => eprintln!("#{} child {tag}: end", self.seq),
            }
        }
        let report = match line {
            Line::Report(r) => r,
            Line::Garbage(l) => self.fail(format!("child {tag} wrote {l:?}")),
            Line::End => {
                self.child(tag).ended = true;
                return;
            }
        };
        match report {
            Report::Opened => self.child(tag).opened = true,
            Report::Closed => self.child(tag).closed = true,
            Report::Owns(shards) => {
                self.child(tag).owns = shards.into_iter().collect();
                self.check_disjoint();
            }
            Report::Started { n, attached } => {
                if !attached {
                    // Reports of different children arrive in no set order,
                    // and a paused child reports, once resumed, what its
                    // engine acknowledged before the pause: its `new` may
                    // come after another child attached to the run it made.
                    // Two `new`s of one run, or a `new` after another's
                    // acknowledgement from a child never paused, mean the
                    // first run was lost.
                    if let Some(&first) = self.created.get(&n) {
                        self.fail(format!(
                            "run {n} was started anew by child {first} and again by child {tag}: the first was lost"
                        ));
                    }
                    if self.acked.contains(&n) && self.child(tag).down_at.is_none() {
                        self.fail(format!(
                            "run {n}'s start was acknowledged, yet child {tag} started it anew: it was lost"
                        ));
                    }
                    self.created.insert(n, tag);
                }
                self.stats.attached += u64::from(attached);
                self.acked.insert(n);
            }
            Report::Signalled(n) => {
                let seq = self.seq;
                self.signalled.entry(n).or_insert((tag, seq));
            }
            Report::Result { n, value } => self.check_result(tag, n, value),
            Report::Error { n, message } => self.fail(format!("child {tag}, run {n}: {message}")),
        }
    }

    /// No two children that were never taken down own a shard at once.
    fn check_disjoint(&self) {
        let mut owner: HashMap<u32, u64> = HashMap::new();
        for c in self.children.iter().filter(|c| c.state == State::Live) {
            for &s in &c.owns {
                if let Some(other) = owner.insert(s, c.tag) {
                    self.fail(format!(
                        "children {other} and {} both own shard {s}, neither ever taken down",
                        c.tag
                    ));
                }
            }
        }
    }

    fn check_result(&mut self, tag: u64, n: u64, value: String) {
        let Some(v) = RunValue::parse(&value) else {
            self.fail(format!("run {n}'s result {value:?} does not parse"))
        };
        let drivers = &self.drivers[self.round_of(n)];
        if v.n != n
            || [v.go, v.charged, v.shipped]
                .iter()
                .any(|t| !drivers.contains(t))
        {
            self.fail(format!(
                "child {tag} reported run {n}'s result {value}: not from the children driving it {drivers:?}"
            ));
        }
        if let Some(&(first, at)) = self.signalled.get(&n)
            && v.go != first
        {
            let down_before = self.children[v.go as usize].down_at.is_some_and(|d| d < at);
            if !down_before {
                self.fail(format!(
                    "run {n} went on with child {}'s go, yet child {first}'s was acknowledged first: it was lost",
                    v.go
                ));
            }
        }
        if let Some(before) = self.results.get(&n)
            && *before != value
        {
            self.fail(format!("run {n}'s result changed from {before} to {value}"));
        }
        self.results.insert(n, value);
    }

    /// Takes lines until `done` holds (checking it after each), failing
    /// with `what` at `deadline`.
    fn pump_until(&mut self, deadline: Instant, what: &str, done: impl Fn(&Fleet) -> bool) {
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((tag, line)) => self.take(tag, line),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    self.fail(format!("{what}: not within the time allowed"))
                }
            }
        }
    }

    /// Children that run (paused ones do not).
    fn running(&self) -> impl Iterator<Item = &Child> {
        self.children
            .iter()
            .filter(|c| matches!(c.state, State::Live | State::Resumed))
    }

    /// Results in for runs `range`.
    fn results_in(&self, range: std::ops::Range<u64>) -> usize {
        self.results.range(range).count()
    }

    /// Takes child `victim` down (SIGKILL, or SIGSTOP with `pause`) and
    /// waits until other running children own every shard it owned.
    fn take_down(&mut self, victim: u64, pause: bool, range: std::ops::Range<u64>) {
        let shards = self.child(victim).owns.clone();
        let in_flight = range
            .clone()
            .filter(|n| self.acked.contains(n) && !self.results.contains_key(n))
            .count() as u64;
        self.stats.in_flight.push(in_flight);
        let seq = self.seq;
        let pid = self.child(victim).process.id();
        if std::env::var_os("FUSEE_LEASE_TRACE").is_some() {
            eprintln!("#{seq} take down child {victim} (pause {pause})");
        }
        if pause {
            signal(pid, "-STOP");
            self.child(victim).state = State::Paused;
            self.stats.pauses += 1;
        } else {
            let c = self.child(victim);
            c.process.kill().expect("SIGKILL the child");
            c.process.wait().expect("reap the child");
            c.state = State::Gone;
            self.stats.kills += 1;
        }
        self.child(victim).down_at = Some(seq);
        let down = Instant::now();
        let bound = LEASE + RETRY + SLACK;
        self.pump_until(
            down + bound,
            &format!(
                "child {victim}'s shards {shards:?} taken over by another child within {bound:?}"
            ),
            |f| {
                shards
                    .iter()
                    .all(|s| f.running().any(|c| c.tag != victim && c.owns.contains(s)))
            },
        );
        self.stats.takeovers.push(down.elapsed());
        if pause {
            if std::env::var_os("FUSEE_LEASE_TRACE").is_some() {
                eprintln!("#{} resume child {victim}", self.seq);
            }
            signal(pid, "-CONT");
            self.child(victim).state = State::Resumed;
            let resumed = Instant::now();
            self.pump_until(
                resumed + LEASE + SLACK,
                &format!("child {victim}, resumed, letting go of the shards it lost"),
                |f| f.children[victim as usize].owns.is_disjoint(&shards),
            );
        }
    }

    /// Closes child `tag` and checks it exits cleanly.
    fn close(&mut self, tag: u64) {
        self.tell(tag, &Command::Close);
        self.pump_until(
            Instant::now() + PATIENCE,
            &format!("child {tag} closing"),
            |f| f.children[tag as usize].ended,
        );
        if !self.child(tag).closed {
            self.fail(format!("child {tag} ended without closing its engine"));
        }
        let status: ExitStatus = self.child(tag).process.wait().expect("reap the child");
        if !status.success() {
            self.fail(format!("child {tag} exited with {status}"));
        }
        self.child(tag).state = State::Gone;
    }
}

/// Starts a `lease-child` as `owner` numbered `tag`, with this file's
/// lease and retry and the arguments after them (`PREFER CHECKPOINTS
/// [SHARDS]`); returns it and its stdout (which must be read to its end:
/// a child whose stdout closes exits).
fn start_child(
    url: &str,
    schema: &str,
    owner: &str,
    tag: u64,
    ledger: &Path,
    rest: &[&str],
) -> (Child, ChildStdout) {
    let mut process = Spawn::new(env!("CARGO_BIN_EXE_lease-child"))
        .arg(url)
        .arg(schema)
        .arg(owner)
        .arg(tag.to_string())
        .arg(ledger)
        .arg(LEASE.as_millis().to_string())
        .arg(RETRY.as_millis().to_string())
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn lease-child");
    let stdout = process.stdout.take().expect("piped stdout");
    let stdin = process.stdin.take();
    let child = Child {
        tag,
        process,
        stdin,
        state: State::Live,
        opened: false,
        closed: false,
        ended: false,
        owns: BTreeSet::new(),
        down_at: None,
    };
    (child, stdout)
}

/// Every ledger line the children wrote.
fn read_ledgers(dir: &Path) -> Vec<LedgerLine> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the ledger directory") {
        let path = entry.expect("a ledger").path();
        let text = std::fs::read_to_string(&path).expect("read a ledger");
        for line in text.lines() {
            lines.push(
                LedgerLine::parse(line)
                    .unwrap_or_else(|| panic!("{}: bad line {line:?}", path.display())),
            );
        }
    }
    lines
}

/// A schema no other test uses.
fn unique_schema() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("t_lease_{}_{}", std::process::id(), nanos % 1_000_000_007)
}

#[test]
fn engines_split_shards_and_take_over_those_of_one_taken_down() {
    let Some(url) = fusee_tests::pg_url_or_skip("lease takeover") else {
        return;
    };
    let runs = env_u64("FUSEE_LEASE_RUNS", 120).max(8);
    let rounds = env_u64("FUSEE_LEASE_ROUNDS", 2).max(1);
    let seed = env_u64("FUSEE_SEED", fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(seed);
    let began = Instant::now();
    let schema = unique_schema();
    let ledger = std::env::temp_dir().join(format!("fusee-{schema}"));
    let _ = std::fs::remove_dir_all(&ledger);
    std::fs::create_dir_all(&ledger).expect("the ledger directory");
    let (lines_tx, lines) = mpsc::channel();
    let mut fleet = Fleet {
        url: url.clone(),
        schema: schema.clone(),
        ledger: ledger.clone(),
        seed,
        children: Vec::new(),
        lines,
        lines_tx,
        seq: 0,
        acked: HashSet::new(),
        created: HashMap::new(),
        signalled: HashMap::new(),
        results: BTreeMap::new(),
        drivers: Vec::new(),
        runs_per_round: runs,
        stats: Stats::default(),
    };

    // Two processes, each preferring half the shards: they split them.
    let half = SHARDS / 2;
    let first: Vec<String> = (0..half).map(|s| s.to_string()).collect();
    let second: Vec<String> = (half..SHARDS).map(|s| s.to_string()).collect();
    let a = fleet.spawn(&first.join(","));
    let b = fleet.spawn(&second.join(","));
    let split = Instant::now() + PATIENCE;
    fleet.pump_until(split, "the first two children splitting the shards", |f| {
        f.children[a as usize].owns == (0..half).collect()
            && f.children[b as usize].owns == (half..SHARDS).collect()
    });
    // Each tries the other's shards a lease after opening: still split.
    let settle = Instant::now() + LEASE + RETRY;
    while Instant::now() < settle {
        if let Ok((tag, line)) = fleet.lines.recv_timeout(Duration::from_millis(50)) {
            fleet.take(tag, line);
        }
    }
    if fleet.children[a as usize].owns != (0..half).collect::<BTreeSet<_>>() {
        fleet.fail("the split did not hold once each tried the other's shards");
    }

    for round in 0..rounds {
        if round > 0 {
            let standby = fleet.spawn("all");
            fleet.pump_until(
                Instant::now() + PATIENCE,
                &format!("child {standby} opening"),
                |f| f.children[standby as usize].opened,
            );
        }
        let range = round * runs..(round + 1) * runs;
        let drivers: Vec<u64> = fleet.running().map(|c| c.tag).collect();
        fleet.drivers.push(drivers.clone());
        for &tag in &drivers {
            fleet.tell(
                tag,
                &Command::Drive {
                    first: range.start,
                    end: range.end,
                },
            );
        }
        // Take the holder down with a share of the round's runs finished
        // and others in flight.
        let at = rng.usize(runs as usize / 4..=runs as usize / 2);
        let r = range.clone();
        fleet.pump_until(
            Instant::now() + PATIENCE,
            &format!("{at} results of round {round}"),
            |f| f.results_in(r.clone()) >= at,
        );
        let victim = fleet
            .running()
            .filter(|c| c.state == State::Live || c.state == State::Resumed)
            .max_by_key(|c| (c.owns.len(), std::cmp::Reverse(c.tag)))
            .map(|c| c.tag)
            .unwrap_or_else(|| fleet.fail("no child to take down"));
        if fleet.child(victim).owns.is_empty() {
            fleet.fail(format!("round {round}: no child owns a shard"));
        }
        // Children that checkpoint only at close may be paused.
        let pause = victim % 2 == 1 && round % 2 == 1;
        fleet.take_down(victim, pause, range);
    }

    // Every run finishes.
    let total = rounds * runs;
    fleet.pump_until(
        Instant::now() + PATIENCE,
        &format!("every one of the {total} runs finishing"),
        |f| f.results.len() as u64 == total,
    );
    // Those that own nothing close first, then the owners (whose shards
    // the others would otherwise take).
    let mut closing: Vec<(usize, u64)> = fleet.running().map(|c| (c.owns.len(), c.tag)).collect();
    closing.sort();
    for (_, tag) in closing {
        fleet.close(tag);
    }

    // The outside service: one input per idempotency key, and every step
    // call of a run with the token of its result.
    let mut inputs: HashMap<String, String> = HashMap::new();
    for line in read_ledgers(&ledger) {
        if let Some(before) = inputs.get(&line.key)
            && *before != line.input
        {
            fleet.fail(format!(
                "idempotency key {} met two inputs: {before:?} and {:?}",
                line.key, line.input
            ));
        }
        let result = fleet
            .results
            .get(&line.n)
            .and_then(|v| RunValue::parse(v))
            .unwrap_or_else(|| fleet.fail(format!("run {} has a step call but no result", line.n)));
        if line.token() != Some(result.token) {
            fleet.fail(format!(
                "run {}'s step call {line} carries another token than its result {result}: it ran on a history that was not kept",
                line.n
            ));
        }
        inputs.insert(line.key, line.input);
    }
    if inputs.len() as u64 != 2 * total {
        fleet.fail(format!(
            "the ledger holds {} step keys for {total} runs of two steps",
            inputs.len()
        ));
    }

    // An engine on every shard finds every result as reported, replaying
    // nothing (the last owners closed cleanly).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let results = fleet.results.clone();
    let check = async move {
        let storage = StorageConfig::postgres(&url).postgres_schema(&schema);
        let engine = Engine::open(Config::new(storage).shards(SHARDS))
            .await
            .map_err(|e| format!("opening every shard: {e}"))?;
        let replayed = engine.metrics().await.recovered_records;
        if replayed != 0 {
            return Err(format!(
                "the open after clean closes replayed {replayed} records"
            ));
        }
        for (n, value) in &results {
            let got = engine
                .result(RUN, &workflow_id(*n))
                .await
                .map_err(|e| format!("run {n}'s result: {e}"))?;
            if got != *value {
                return Err(format!("run {n}'s result is {got}, reported {value}"));
            }
        }
        engine.close().await.map_err(|e| format!("closing: {e}"))
    };
    let verdict = runtime.block_on(async move {
        tokio::time::timeout(PATIENCE, check)
            .await
            .unwrap_or_else(|_| Err(format!("the check over every shard took over {PATIENCE:?}")))
    });
    if let Err(e) = verdict {
        fleet.fail(e);
    }
    if fleet.stats.in_flight.iter().all(|&n| n == 0) {
        fleet.fail(format!(
            "no takedown landed with runs in flight: {:?}",
            fleet.stats
        ));
    }
    eprintln!(
        "lease takeover: {total} runs over {rounds} rounds, {:?}; all {:.1?} (seed {seed}, schema {})",
        fleet.stats,
        began.elapsed(),
        fleet.schema
    );
    // The schema stays (a throwaway server's); the ledgers go.
    let _ = std::fs::remove_dir_all(&ledger);
}

/// Shards of the process [`a_dead_processs_ten_shards_come_up_together`]
/// kills.
const MANY: u32 = 10;
/// What taking over [`MANY`] shards may take beyond lease + retry: the
/// shards are opened side by side (eight at a time), so about two opens.
const TOGETHER: Duration = Duration::from_millis(500);

/// Hands back a step's fencing token.
const TOKEN: Workflow<(), u64> = Workflow::new("fencing-token");

/// A `lease-child` owning [`MANY`] shards is killed; an engine in this
/// process, refused every shard while the child lives, owns all of them
/// within lease + retry + [`TOGETHER`] of the kill (a serial takeover
/// needs about 100 ms a shard more), and a step on a shard it took over
/// gets a fencing token above the dead owner's epoch: the lease epoch the
/// takeover moved.
#[test]
fn a_dead_processs_ten_shards_come_up_together() {
    use fusee::{Ctx, Failure, Ownership, StepError};
    use fusee_core::shard::shard_of;

    let Some(url) = fusee_tests::pg_url_or_skip("parallel lease takeover") else {
        return;
    };
    let schema = unique_schema();
    let ledger = std::env::temp_dir().join(format!("fusee-{schema}"));
    std::fs::create_dir_all(&ledger).expect("the ledger directory");
    let owner = format!("lease-many-{}", std::process::id());
    let many = MANY.to_string();
    let (mut victim, stdout) =
        start_child(&url, &schema, &owner, 0, &ledger, &["all", "often", &many]);
    // Read to the end: a child whose stdout closes exits.
    let (reports, owned) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = reports.send(Report::parse(&line));
        }
    });
    let all: Vec<u32> = (0..MANY).collect();
    loop {
        match owned.recv_timeout(PATIENCE) {
            Ok(Some(Report::Owns(shards))) if shards == all => break,
            Ok(_) => {}
            Err(e) => panic!("the child never owned all {MANY} shards: {e}"),
        }
    }
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("an admin connection");
    let epochs = |admin: &mut postgres::Client| -> Vec<u64> {
        admin
            .query(
                &format!("SELECT epoch FROM \"{schema}\".shards ORDER BY shard"),
                &[],
            )
            .expect("the shards' epochs")
            .iter()
            .map(|r| r.get::<_, i64>(0) as u64)
            .collect()
    };
    let dead_epochs = epochs(&mut admin);
    assert_eq!(dead_epochs.len(), MANY as usize);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (engine, came) = runtime.block_on(async {
        let mut storage = StorageConfig::postgres(&url)
            .postgres_schema(&schema)
            .postgres_lease(LEASE);
        storage.postgres.owner = Some(format!("{owner}-survivor"));
        let config = Config::new(storage)
            .shards(MANY)
            .ownership(Ownership::Lease {
                retry: Some(RETRY),
                prefer: None,
            });
        let engine = Engine::open(config).await.expect("the survivor opens");
        assert!(
            engine.owned_shards().is_empty(),
            "the survivor took shards of a live owner: {:?}",
            engine.owned_shards()
        );
        engine.register(TOKEN, |ctx: Ctx, ()| async move {
            Ok::<_, Failure>(
                ctx.step("token", |step| async move {
                    Ok::<_, StepError>(step.fencing_token())
                })
                .await?,
            )
        });
        victim.process.kill().expect("SIGKILL the child");
        let killed = Instant::now();
        // When each shard was first seen owned.
        let mut came = [None; MANY as usize];
        while came.iter().any(Option::is_none) {
            for shard in engine.owned_shards() {
                if let Some(slot) = came.get_mut(shard as usize) {
                    slot.get_or_insert(killed.elapsed());
                }
            }
            assert!(
                killed.elapsed() < PATIENCE,
                "the dead child's shards never came"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // What the opens cost one by one: each shard's open (lease
        // transaction, connections, replay), as the engine measured it.
        let mut opens = [Duration::ZERO; MANY as usize];
        for line in fusee::telemetry::render(&engine).await.lines() {
            let Some(rest) = line.strip_prefix("fusee_shard_open_duration_seconds{shard=\"") else {
                continue;
            };
            let shard = rest.split('"').next().and_then(|s| s.parse::<usize>().ok());
            let seconds = rest.rsplit(' ').next().and_then(|s| s.parse::<f64>().ok());
            if let (Some(shard), Some(seconds)) = (shard, seconds)
                && let Some(slot) = opens.get_mut(shard)
            {
                *slot = Duration::from_secs_f64(seconds);
            }
        }
        let came: Vec<(Duration, Duration)> = came
            .iter()
            .zip(opens)
            .map(|(at, open)| (at.unwrap_or_default(), open))
            .collect();
        (engine, came)
    });
    let took = came.iter().map(|(at, _)| *at).max().unwrap_or_default();
    let opens: Duration = came.iter().map(|(_, open)| *open).sum();
    eprintln!(
        "parallel takeover: {MANY} shards of a dead process owned {took:?} after the kill (lease {LEASE:?}, retry {RETRY:?}); their opens took {opens:?} together; came up at {came:?} (after the kill, open)"
    );
    assert!(
        took <= LEASE + RETRY + TOGETHER,
        "{MANY} shards of a dead process were owned {took:?} after the kill, over lease + retry + {TOGETHER:?}"
    );
    // Side by side: the shards taken at one retry tick come up well before
    // their opens' sum (one after another, the last comes about that sum
    // after the first). The dead owner's leases lapse a few ms apart, so a
    // tick may fall between them: then the rest come at the next tick, one
    // retry later, and never a third.
    let mut by_time = came.clone();
    by_time.sort();
    let mut ticks: Vec<Vec<(Duration, Duration)>> = Vec::new();
    for shard in by_time {
        match ticks.last_mut() {
            Some(tick) if tick.last().is_some_and(|(at, _)| shard.0 - *at < RETRY / 2) => {
                tick.push(shard);
            }
            _ => ticks.push(vec![shard]),
        }
    }
    assert!(
        ticks.len() <= 2,
        "the {MANY} shards came up at {} retry ticks, not side by side: {came:?}",
        ticks.len()
    );
    for tick in ticks.iter().filter(|tick| tick.len() > 1) {
        let spread = tick.last().map(|s| s.0).unwrap_or_default() - tick[0].0;
        let opens: Duration = tick.iter().map(|(_, open)| *open).sum();
        assert!(
            spread < opens / 2,
            "{} shards taken at one tick came up {spread:?} apart, their opens taking {opens:?} together: not opened side by side ({came:?})",
            tick.len()
        );
    }
    // The fencing token grew across the takeover.
    let id = (0..)
        .map(|i| format!("token-{i}"))
        .find(|id| shard_of(id, MANY) == 3)
        .unwrap_or_default();
    let token = runtime
        .block_on(engine.execute(TOKEN, &id, &()))
        .expect("a step on a shard taken over");
    let now = epochs(&mut admin);
    assert!(
        token > dead_epochs[3] && token == now[3],
        "the fencing token after the takeover is {token}; the dead owner's epoch was {}, the lease's is {}",
        dead_epochs[3],
        now[3]
    );
    runtime.block_on(engine.close()).expect("close");
    let _ = std::fs::remove_dir_all(&ledger);
}
