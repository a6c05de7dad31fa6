//! The engine SIGKILL harness: a child process (`engine-child`) runs an
//! engine on 4 shards with 1,000 workflows in flight, each with two child
//! workflows (on other shards, mostly) that signal it, and reports each
//! start the engine acknowledged and each result it got; the parent kills
//! it with SIGKILL at random moments and starts it again on the same
//! directory, attaching to the runs that exist and starting the rest.
//! Every report of every child is checked against the earlier ones:
//!
//! - an acknowledged start exists: a later child attaches to it, never
//!   starts it anew (and attaches to nothing no child asked for);
//! - an acknowledged signal exists: the run goes on with it, or with one
//!   an earlier child sent (signals are consumed in the order they came);
//! - a reported result is a result of that run and never changes when a
//!   later child reports it again (steps record the child that ran them, so
//!   a step run again after its result was durable changes the result),
//!   and shows each child's result and signal reaching its parent exactly
//!   once (a lost, changed or doubled signal is in the value);
//! - once the kills stop, a last child finishes every run ever asked for
//!   and closes the engine, and one more finds every run there, with the
//!   same results, replaying nothing.
//!
//! `FUSEE_ENGINE_SIGKILL_RUNS` (default 20) sets the kills per backend;
//! `FUSEE_SEED` the seed of the kill moments and the child's settings
//! (random by default; printed with every failure). One test per backend
//! this crate is built with: file, redb and rocksdb by default, and
//! PostgreSQL with the `postgres` feature (on the server at
//! `FUSEE_PG_URL`, in a schema of its own; its logs keep two flushes in
//! flight, so kills land between a flush that committed and an earlier one
//! that did not).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fusee_tests::engine_kill::{Report, RunValue};
use fusee_tests::env_u64;

/// The longest a child may take to open its engine, or a last child to
/// finish every run: far beyond what either needs, so only a hang trips it.
const PATIENCE: Duration = Duration::from_secs(60);

/// A line of a child's stdout.
enum Line {
    Report(Report),
    /// Anything the protocol does not know.
    Garbage(String),
}

/// A running child and its stdout, line by line.
struct Child {
    process: std::process::Child,
    lines: Receiver<Line>,
    reader: Option<JoinHandle<()>>,
}

impl Child {
    fn spawn(backend: &str, dir: &Path, seed: u64, incarnation: u64, first: u64, end: u64) -> Self {
        let mut process = Command::new(env!("CARGO_BIN_EXE_engine-child"))
            .arg(backend)
            .arg(dir)
            .args([seed, incarnation, first, end].map(|n| n.to_string()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn engine-child");
        let stdout = process.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let line = match Report::parse(&line) {
                    Some(r) => Line::Report(r),
                    None => Line::Garbage(line),
                };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Child {
            process,
            lines,
            reader: Some(reader),
        }
    }

    /// Kills the child with SIGKILL (unless it already exited: that status
    /// is returned) and reaps it; its stdout is then read to the end.
    fn kill(&mut self) -> Option<ExitStatus> {
        let exited = self.process.try_wait().expect("poll the child");
        if exited.is_none() {
            self.process.kill().expect("SIGKILL the child");
        }
        self.process.wait().expect("reap the child");
        if let Some(r) = self.reader.take() {
            r.join().expect("the reader thread");
        }
        exited
    }
}

/// What the children said, and what was checked.
struct Books {
    backend: &'static str,
    dir: PathBuf,
    seed: u64,
    incarnation: u64,
    /// Runs some earlier child asked to start.
    attempted: BTreeSet<u64>,
    /// Runs whose start was acknowledged.
    acked: HashSet<u64>,
    /// The first child whose `go` signal to a run was acknowledged.
    signalled: HashMap<u64, u64>,
    /// Every result reported, by run.
    results: HashMap<u64, String>,
    /// The smallest run without a reported result.
    first_unreported: u64,
    /// This child's reports.
    now: Incarnation,
    stats: Stats,
}

/// One child's reports.
#[derive(Default)]
struct Incarnation {
    opened: Option<u64>,
    attempted: Vec<u64>,
    started: HashSet<u64>,
    new: u64,
    results: HashSet<u64>,
}

#[derive(Debug, Default)]
struct Stats {
    kills: u64,
    /// Kills before the child's engine had opened.
    before_open: u64,
    /// Kills with runs acknowledged and not finished in that child.
    in_flight: u64,
    /// The most log records an open replayed.
    most_recovered: u64,
}

impl Books {
    fn new(backend: &'static str, dir: PathBuf, seed: u64) -> Self {
        Books {
            backend,
            dir,
            seed,
            incarnation: 0,
            attempted: BTreeSet::new(),
            acked: HashSet::new(),
            signalled: HashMap::new(),
            results: HashMap::new(),
            first_unreported: 0,
            now: Incarnation::default(),
            stats: Stats::default(),
        }
    }

    /// Starts the next child on runs `first` to `end` (exclusive).
    fn spawn(&self, first: u64, end: u64) -> Child {
        Child::spawn(
            self.backend,
            &self.dir,
            self.seed,
            self.incarnation,
            first,
            end,
        )
    }

    /// Fails the test, saying where and how to replay.
    fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!(
            "{} backend, seed {} (FUSEE_SEED={} replays the settings), child {}: {what} \
             (the store is left in {})",
            self.backend,
            self.seed,
            self.seed,
            self.incarnation,
            self.dir.display()
        )
    }

    /// Checks one line of the current child against everything before it.
    fn take(&mut self, line: Line) {
        let report = match line {
            Line::Report(r) => r,
            Line::Garbage(l) => self.fail(format!("the child wrote {l:?}")),
        };
        match report {
            Report::Opened { recovered } => {
                self.now.opened = Some(recovered);
                self.stats.most_recovered = self.stats.most_recovered.max(recovered);
            }
            Report::Starting(n) => self.now.attempted.push(n),
            Report::Started { n, attached } => {
                if !attached && self.acked.contains(&n) {
                    self.fail(format!(
                        "run {n}'s start was acknowledged, yet it was gone: this child started it anew"
                    ));
                }
                if attached && !self.attempted.contains(&n) {
                    self.fail(format!("run {n} exists, but no earlier child asked for it"));
                }
                self.now.new += u64::from(!attached);
                self.acked.insert(n);
                self.now.started.insert(n);
            }
            Report::Signalled(n) => {
                self.signalled.entry(n).or_insert(self.incarnation);
            }
            Report::Result { n, value } => {
                let Some(v) = RunValue::parse(&value) else {
                    self.fail(format!("run {n}'s result {value:?} does not parse"))
                };
                if let Some(why) = v.implausible(n, self.incarnation) {
                    self.fail(format!("run {n}'s result {value} is wrong: {why}"));
                }
                if let Some(&k) = self.signalled.get(&n)
                    && v.go > k
                {
                    self.fail(format!(
                        "run {n} went on with child {}'s signal, yet child {k}'s was acknowledged before: it is gone",
                        v.go
                    ));
                }
                if let Some(before) = self.results.get(&n)
                    && *before != value
                {
                    self.fail(format!("run {n}'s result changed from {before} to {value}"));
                }
                self.results.insert(n, value);
                self.now.results.insert(n);
                while self.results.contains_key(&self.first_unreported) {
                    self.first_unreported += 1;
                }
            }
            Report::Error { n, message } => self.fail(format!("run {n}: {message}")),
        }
    }

    /// Takes the child's lines until `until` (or its stdout ends).
    fn read(&mut self, child: &Child, until: Instant) {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match child.lines.recv_timeout(left) {
                Ok(line) => self.take(line),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Takes the child's lines until its engine opened (or `PATIENCE`).
    fn read_until_open(&mut self, child: &Child) {
        let deadline = Instant::now() + PATIENCE;
        while self.now.opened.is_none() {
            match child
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => self.take(line),
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(format!("the engine did not open within {PATIENCE:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.fail("the child ended before its engine opened")
                }
            }
        }
    }

    /// Ends the current child's books: what it asked for joins what
    /// earlier ones did.
    fn next_child(&mut self) {
        self.attempted.extend(self.now.attempted.drain(..));
        self.now = Incarnation::default();
        self.incarnation += 1;
    }

    /// The runs any child asked for: 0 to this, exclusive.
    fn end(&self) -> u64 {
        self.attempted.last().map_or(0, |n| n + 1)
    }

    /// Runs a child over every run ever asked for, to its end, and checks
    /// that it reported every one (and started none anew if `all_exist`).
    fn finish_all(&mut self, all_exist: bool) {
        let end = self.end();
        let mut child = self.spawn(0, end);
        self.read(&child, Instant::now() + PATIENCE);
        if let Some(n) = (0..end).find(|n| !self.now.results.contains(n)) {
            let missing = (0..end).filter(|n| !self.now.results.contains(n)).count();
            let when = match child.kill() {
                Some(status) => format!("before the child ended ({status})"),
                None => format!("within {PATIENCE:?} of the kills stopping"),
            };
            self.fail(format!(
                "{missing} of {end} runs reported no result {when} (run {n} among them)"
            ));
        }
        // Its stdout ended: it exited, or is about to.
        let status = child.process.wait().expect("reap the child");
        if !status.success() {
            self.fail(format!("the child failed at the end: {status}"));
        }
        if all_exist {
            if self.now.new > 0 {
                self.fail(format!(
                    "{} runs were started anew after a clean close",
                    self.now.new
                ));
            }
            if self.now.opened != Some(0) {
                self.fail(format!(
                    "the open after a clean close replayed {:?} log records, not none",
                    self.now.opened
                ));
            }
        }
        self.next_child();
    }
}

fn kill_and_check(backend: &'static str) {
    let dir = std::env::temp_dir().join(format!(
        "fusee-engine-sigkill-{backend}-{}",
        std::process::id()
    ));
    kill_and_check_in(backend, dir);
}

/// [`kill_and_check`] with the children's `DIR` argument `dir`.
fn kill_and_check_in(backend: &'static str, dir: PathBuf) {
    let kills = env_u64("FUSEE_ENGINE_SIGKILL_RUNS", 20);
    let seed = env_u64("FUSEE_SEED", fastrand::u64(..));
    let began = Instant::now();
    let mut rng = fastrand::Rng::with_seed(seed);
    let _ = std::fs::remove_dir_all(&dir);
    let mut books = Books::new(backend, dir.clone(), seed);
    for _ in 0..kills {
        let first = books.first_unreported;
        let mut child = books.spawn(first, u64::MAX);
        // Most kills land while runs are in flight; one in five may land
        // while the engine opens (recovery, a checkpoint's first writes).
        let until = if rng.u32(0..5) == 0 {
            Instant::now() + Duration::from_millis(rng.u64(0..150))
        } else {
            books.read_until_open(&child);
            Instant::now() + Duration::from_millis(rng.u64(0..300))
        };
        books.read(&child, until);
        if let Some(status) = child.kill() {
            books.fail(format!("the child exited by itself: {status}"));
        }
        // Reports that reached the pipe before the kill count too.
        while let Ok(line) = child.lines.try_recv() {
            books.take(line);
        }
        books.stats.kills += 1;
        books.stats.before_open += u64::from(books.now.opened.is_none());
        books.stats.in_flight += u64::from(books.now.started.len() > books.now.results.len());
        books.next_child();
    }
    let killed = began.elapsed();
    let (attempted, finished_under_kills) = (books.end(), books.results.len());
    books.finish_all(false);
    books.finish_all(true);
    if books.stats.kills > 0 && books.stats.in_flight == 0 {
        books.fail(format!(
            "no kill landed with runs in flight: {:?}",
            books.stats
        ));
    }
    eprintln!(
        "{backend}: {:?}; {attempted} runs asked for, {finished_under_kills} finished under kills; \
         kills took {killed:.1?}, all {:.1?} (seed {seed})",
        books.stats,
        began.elapsed(),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "file")]
#[test]
fn file_engine_survives_sigkill() {
    kill_and_check("file");
}

#[cfg(feature = "redb")]
#[test]
fn redb_engine_survives_sigkill() {
    kill_and_check("redb");
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_engine_survives_sigkill() {
    kill_and_check("rocksdb");
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_engine_survives_sigkill() {
    let Some(url) = fusee_tests::pg_url_or_skip("postgres engine sigkill") else {
        return;
    };
    // The children take this as their schema.
    let schema = format!("t_engine_sigkill_{}", std::process::id());
    kill_and_check_in("postgres", PathBuf::from(&schema));
    if let Ok(mut c) = postgres::Client::connect(&url, postgres::NoTls) {
        let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
    }
}
