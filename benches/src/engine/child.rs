//! The child process of the recovery and parked workloads: the comparison
//! binary started again with [`CHILD_FLAG`] as its first argument.
//!
//! - `--engine-child fanout STORE RUNS STEPS`: opens the engine STORE names
//!   ([`ChildStore`]: `SUBJECT DIR`, or `postgres URL SCHEMA` for Fusee on a
//!   PostgreSQL schema), starts RUNS workflows of STEPS no-op steps (`fan-0`, ...), then
//!   waits for their results in order, writing `done I` on stdout after
//!   each (flushed at once). The parent kills it with SIGKILL part way.
//!   A start the peer engine gave up ([`super::peer`], counted as an
//!   infrastructure failure) is a `lost I` line before any `done`: the
//!   parent does not wait for that run after the reopen.
//! - `--engine-child reopen STORE`: opens the store, writes
//!   `opened SECONDS RESIDENT_BYTES PARKED` and closes it: an open in a
//!   fresh process, whose memory is the store's alone.
//! - `--engine-child reminders STORE N`: starts N reminders
//!   ([`super::reminders`]), writes `started BASE_MS` and waits to be
//!   killed.
//! - `--engine-child reminders-reopen STORE N BASE_MS`: opens the store
//!   the killed child left, waits for every reminder and writes the
//!   [`super::reminders::Reopened`] line.
//!
//! A failure is one `error MESSAGE` line and exit status 1.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use fusee::{Config, Engine};

use super::EngineSubject;
use super::peer::{Peer, PeerFailures};
use super::reminders;
use super::workload::{self, STEPS, Stamps, WorkResult};

/// The first argument that makes the comparison binary a child.
pub const CHILD_FLAG: &str = "--engine-child";

/// Workflow IDs of the recovery's fanout start with this.
pub const FANOUT_PREFIX: &str = "fan";

/// The longest a child may stay silent: far beyond what any step needs,
/// so only a hang trips it.
const PATIENCE: Duration = Duration::from_secs(300);

/// How long a child killed with SIGKILL may take to be gone.
const REAP: Duration = Duration::from_secs(30);

static PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Called first by a binary that serves [`CHILD_FLAG`]: runs the child and
/// returns its exit code if `args` (without the program name) ask for one;
/// otherwise records this binary as the child program and returns `None`.
pub fn serve(args: &[String]) -> Option<ExitCode> {
    if args.first().map(String::as_str) == Some(CHILD_FLAG) {
        return Some(main(&args[1..]));
    }
    if let Ok(exe) = std::env::current_exe() {
        let _ = PROGRAM.set(exe);
    }
    None
}

/// The program to start as a child: the binary that called [`serve`], or
/// else a `fusee-compare` beside the running executable (the `fusee`
/// command's comparison). `None` when there is neither: the workloads that
/// need a child are left out, with a note.
pub fn program() -> Option<PathBuf> {
    if let Some(p) = PROGRAM.get() {
        return Some(p.clone());
    }
    let exe = std::env::current_exe().ok()?;
    let sibling = exe.with_file_name("fusee-compare");
    sibling.is_file().then_some(sibling)
}

/// The store a child opens, as its arguments name it: a subject's store in
/// a directory, or Fusee on a schema of a PostgreSQL server (which has no
/// directory, so the URL and schema stand in its place).
#[derive(Clone, Copy, Debug)]
pub enum ChildStore<'a> {
    /// `SUBJECT DIR`.
    Dir(EngineSubject, &'a Path),
    /// `postgres URL SCHEMA`.
    Postgres {
        /// The server's URL.
        url: &'a str,
        /// The schema the store lives in.
        schema: &'a str,
    },
}

impl ChildStore<'_> {
    /// The word naming Fusee on PostgreSQL in a child's arguments.
    const POSTGRES: &'static str = "postgres";

    fn args(self) -> Vec<String> {
        match self {
            ChildStore::Dir(subject, dir) => {
                vec![subject.name().to_string(), dir.display().to_string()]
            }
            ChildStore::Postgres { url, schema } => {
                vec![Self::POSTGRES.into(), url.into(), schema.into()]
            }
        }
    }
}

/// What a child's workload runs on, parsed from its [`ChildStore`].
enum Opened {
    Fusee(Box<Config>),
    Duroxide(PathBuf),
}

/// Splits a [`ChildStore`]'s arguments off the front of `args`.
fn parse_store(args: &[String]) -> WorkResult<(Opened, &[String])> {
    match args {
        [word, url, schema, rest @ ..] if word == ChildStore::POSTGRES => Ok((
            Opened::Fusee(Box::new(workload::postgres_config(url, schema))),
            rest,
        )),
        [subject, dir, rest @ ..] => {
            let opened = match EngineSubject::parse(subject) {
                Some(EngineSubject::Fusee(backend)) => {
                    Opened::Fusee(Box::new(workload::config(backend, Path::new(dir))))
                }
                Some(EngineSubject::Duroxide) => Opened::Duroxide(PathBuf::from(dir)),
                Some(EngineSubject::Floor) => return Err("the floor runs no workflows".into()),
                None => return Err(format!("unknown subject {subject:?}").into()),
            };
            Ok((opened, rest))
        }
        _ => Err(format!("no store in the child's arguments {args:?}").into()),
    }
}

/// Runs the child `args` (after [`CHILD_FLAG`]) describe.
fn main(args: &[String]) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            say(&format!("error no tokio runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let [mode, store @ ..] = args else {
            return Err(format!("bad child arguments {args:?}").into());
        };
        let (opened, rest) = parse_store(store)?;
        match (mode.as_str(), rest) {
            ("fanout", [runs, steps]) => fanout(opened, runs.parse()?, steps.parse()?).await,
            ("reopen", []) => reopen(opened).await,
            ("reminders", [n]) => remind(opened, n.parse()?).await,
            ("reminders-reopen", [n, base]) => {
                let Opened::Fusee(config) = opened else {
                    return Err("the peer has no reminders workload".into());
                };
                let r = reminders::reopen(*config, n.parse()?, base.parse()?).await?;
                say(&r.line());
                Ok(())
            }
            _ => Err(format!("unknown child mode {mode:?} {rest:?}").into()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say(&format!("error {e}"));
            ExitCode::FAILURE
        }
    }
}

/// Writes one line on stdout and flushes it; exits if the parent is gone.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(3);
    }
}

async fn fanout(opened: Opened, runs: u64, steps: u32) -> WorkResult<()> {
    match opened {
        Opened::Fusee(config) => {
            let engine = Engine::open(*config).await?;
            workload::register(&engine, &Stamps::default());
            workload::start_all(&engine, STEPS, FANOUT_PREFIX, runs, steps).await?;
            for i in 0..runs {
                let id = format!("{FANOUT_PREFIX}-{i}");
                let got = engine.result(STEPS, &id).await?;
                if got != steps {
                    return Err(format!("{id} returned {got}").into());
                }
                say(&format!("done {i}"));
            }
            engine.close().await?;
        }
        Opened::Duroxide(dir) => {
            let peer = Peer::open(&dir, &Stamps::default(), &PeerFailures::default()).await?;
            let lost = peer
                .start_all("steps", FANOUT_PREFIX, runs, &steps.to_string())
                .await?;
            for i in &lost {
                say(&format!("lost {i}"));
            }
            for i in (0..runs).filter(|i| !lost.contains(i)) {
                // A run duroxide failed is finished too: the parent counts
                // it after the reopen.
                peer.await_one(&format!("{FANOUT_PREFIX}-{i}"), &steps.to_string())
                    .await?;
                say(&format!("done {i}"));
            }
            peer.close().await;
        }
    }
    say("finished");
    Ok(())
}

async fn reopen(opened: Opened) -> WorkResult<()> {
    let Opened::Fusee(config) = opened else {
        return Err("the peer has no parked workload".into());
    };
    let t = Instant::now();
    let engine = Engine::open(*config).await?;
    let open = t.elapsed();
    let rss = workload::resident_bytes();
    let parked = engine.metrics().await.parked_runs;
    say(&format!("opened {} {rss} {parked}", open.as_secs_f64()));
    engine.close().await?;
    Ok(())
}

/// Starts `n` reminders, says `started BASE_MS`, and waits to be killed.
async fn remind(opened: Opened, n: u64) -> WorkResult<()> {
    let Opened::Fusee(config) = opened else {
        return Err("the peer has no reminders workload".into());
    };
    let engine = Engine::open(*config).await?;
    reminders::register(&engine);
    let base_ms = reminders::epoch_ms(std::time::SystemTime::now());
    reminders::start(&engine, n, base_ms).await?;
    say(&format!("started {base_ms}"));
    // The parent's SIGKILL ends it; a parent gone ends it too (`say`).
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        say("waiting");
    }
}

/// Lines of a child's stdout, read on a thread so a silent child cannot
/// hang the parent (the peers' programs are read the same way,
/// [`super::peers`]).
pub(crate) struct Lines {
    child: std::process::Child,
    rx: mpsc::Receiver<String>,
}

impl Lines {
    fn spawn(program: &Path, args: &[String]) -> WorkResult<Self> {
        let mut command = Command::new(program);
        command.arg(CHILD_FLAG).args(args).stderr(Stdio::inherit());
        Self::start(command)
    }

    /// Starts `command` with its stdout piped and read line by line.
    pub(crate) fn start(mut command: Command) -> WorkResult<Self> {
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {command:?}: {e}"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or("the child's stdout is not piped")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Lines { child, rx })
    }

    /// The child process (its pid, its stdin).
    pub(crate) fn child(&mut self) -> &mut std::process::Child {
        &mut self.child
    }

    /// The next line; `None` at the end of the child's output.
    pub(crate) fn next(&mut self) -> WorkResult<Option<String>> {
        match self.rx.recv_timeout(PATIENCE) {
            Ok(line) => match line.strip_prefix("error ") {
                Some(e) => Err(format!("the child failed: {e}").into()),
                None => Ok(Some(line)),
            },
            Err(RecvTimeoutError::Disconnected) => Ok(None),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("the child said nothing for {} s", PATIENCE.as_secs()).into())
            }
        }
    }

    /// Kills the child with SIGKILL (if it still runs) and reaps it. A
    /// child that does not die within [`REAP`] (stuck in the kernel) is an
    /// error, not a hang.
    pub(crate) fn kill(&mut self) -> WorkResult<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        self.child.kill()?;
        let deadline = Instant::now() + REAP;
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                return Err(format!(
                    "the child (pid {}) still runs {} s after SIGKILL",
                    self.child.id(),
                    REAP.as_secs()
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        // A parent that fails part way leaves no child behind.
        let _ = self.kill();
    }
}

/// What the child of [`kill_mid_fanout`] reported before it was killed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Killed {
    /// Results it reported.
    pub done: u32,
    /// Runs whose start it gave up (the peer's infrastructure failures):
    /// they do not exist.
    pub lost: BTreeSet<u64>,
}

/// Runs the fanout of `runs` workflows of `steps` steps in a child on
/// `store`, and kills it with SIGKILL once `kill_after` of them reported
/// their result.
pub fn kill_mid_fanout(
    program: &Path,
    store: ChildStore<'_>,
    runs: u32,
    steps: u32,
    kill_after: u32,
) -> WorkResult<Killed> {
    let mut args = vec!["fanout".to_string()];
    args.extend(store.args());
    args.extend([runs.to_string(), steps.to_string()]);
    let mut child = Lines::spawn(program, &args)?;
    let mut killed = Killed::default();
    while killed.done < kill_after {
        match child.next()? {
            Some(line) if line.starts_with("done ") => killed.done += 1,
            Some(line) if line.starts_with("lost ") => {
                let i = line["lost ".len()..]
                    .parse()
                    .map_err(|e| format!("the child wrote {line:?}: {e}"))?;
                killed.lost.insert(i);
            }
            Some(line) if line == "finished" => {
                return Err("the child finished every run before it could be killed".into());
            }
            Some(line) => return Err(format!("the child wrote {line:?}").into()),
            None => {
                return Err(format!("the child exited after {} results", killed.done).into());
            }
        }
    }
    child.kill()?;
    Ok(killed)
}

/// What a fresh process saw opening a store.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reopened {
    /// Seconds `Engine::open` took.
    pub open_s: f64,
    /// The process's resident memory after the open, bytes.
    pub resident_bytes: u64,
    /// Parked runs the engine holds.
    pub parked: u64,
}

impl Reopened {
    /// Parses the child's `opened SECONDS RESIDENT_BYTES PARKED` line.
    pub fn parse(line: &str) -> Option<Self> {
        let mut f = line.strip_prefix("opened ")?.split(' ');
        let r = Reopened {
            open_s: f.next()?.parse().ok()?,
            resident_bytes: f.next()?.parse().ok()?,
            parked: f.next()?.parse().ok()?,
        };
        f.next().is_none().then_some(r)
    }
}

/// Opens the store of `subject` in `dir` in a fresh process.
pub fn reopen_in_child(program: &Path, subject: EngineSubject, dir: &Path) -> WorkResult<Reopened> {
    let mut args = vec!["reopen".to_string()];
    args.extend(ChildStore::Dir(subject, dir).args());
    let mut child = Lines::spawn(program, &args)?;
    let line = child.next()?.ok_or("the child exited without a word")?;
    let r = Reopened::parse(&line).ok_or_else(|| format!("the child wrote {line:?}"))?;
    // The child closes the engine and exits by itself.
    while child.next()?.is_some() {}
    let status = child.child.wait()?;
    if !status.success() {
        return Err(format!("the reopening child exited with {status}").into());
    }
    Ok(r)
}

/// Runs `n` reminders in a child on the store of `subject` in `dir`, kills
/// it with SIGKILL [`reminders::KILL_AFTER_MS`] after their base time, and
/// reopens the store in a fresh child that waits for every one: what that
/// child saw.
pub fn kill_mid_reminders(
    program: &Path,
    subject: EngineSubject,
    dir: &Path,
    n: u64,
) -> WorkResult<reminders::Reopened> {
    let store = ChildStore::Dir(subject, dir).args();
    let mut args = vec!["reminders".to_string()];
    args.extend(store.iter().cloned());
    args.push(n.to_string());
    let mut child = Lines::spawn(program, &args)?;
    let line = child
        .next()?
        .ok_or("the reminders child exited without a word")?;
    let base_ms: u64 = line
        .strip_prefix("started ")
        .and_then(|b| b.parse().ok())
        .ok_or_else(|| format!("the reminders child wrote {line:?}"))?;
    let kill_ms = base_ms + reminders::KILL_AFTER_MS;
    let now_ms = reminders::epoch_ms(std::time::SystemTime::now());
    std::thread::sleep(Duration::from_millis(kill_ms.saturating_sub(now_ms)));
    child.kill()?;
    let mut args = vec!["reminders-reopen".to_string()];
    args.extend(store);
    args.extend([n.to_string(), base_ms.to_string()]);
    let mut child = Lines::spawn(program, &args)?;
    let line = child
        .next()?
        .ok_or("the reopening child exited without a word")?;
    let r = reminders::Reopened::parse(&line)
        .ok_or_else(|| format!("the reopening child wrote {line:?}"))?;
    while child.next()?.is_some() {}
    let status = child.child.wait()?;
    if !status.success() {
        return Err(format!("the reopening child exited with {status}").into());
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_store_parses_back_from_its_arguments() {
        let pg = ChildStore::Postgres {
            url: "postgresql://postgres@127.0.0.1:1/postgres",
            schema: "peers_1_recovery",
        };
        let mut args = pg.args();
        args.extend(["10".to_string(), "3".to_string()]);
        let (opened, rest) = parse_store(&args).expect("postgres store");
        assert!(matches!(opened, Opened::Fusee(_)));
        assert_eq!(rest, ["10", "3"]);

        let args = ChildStore::Dir(EngineSubject::Duroxide, Path::new("/d")).args();
        let (opened, rest) = parse_store(&args).expect("duroxide store");
        assert!(matches!(opened, Opened::Duroxide(ref d) if d == Path::new("/d")));
        assert!(rest.is_empty());

        let floor = ChildStore::Dir(EngineSubject::Floor, Path::new("/d")).args();
        assert!(parse_store(&floor).is_err());
        assert!(parse_store(&["bogus".to_string(), "/d".to_string()]).is_err());
    }

    #[test]
    fn the_open_line_parses() {
        assert_eq!(
            Reopened::parse("opened 0.25 1048576 1000"),
            Some(Reopened {
                open_s: 0.25,
                resident_bytes: 1 << 20,
                parked: 1000
            })
        );
        assert_eq!(Reopened::parse("opened 0.25 1048576"), None);
        assert_eq!(Reopened::parse("opened 0.25 1048576 1000 7"), None);
        assert_eq!(Reopened::parse("opened x 1 1"), None);
        assert_eq!(Reopened::parse("done 3"), None);
    }
}
