//! The peers' processes: their servers (started for a turn, stopped after
//! it, every address on 127.0.0.1), their programs (`benches/peers/`, run
//! through `Lines`) and the `strace` that counts their fsyncs.
//!
//! Restate's server asks the network for a newer release of itself at
//! start, whatever `disable-telemetry` says: it runs, with its service, in
//! a network namespace of its own that holds only a loopback interface
//! (`unshare --net`, `nsenter`), so nothing it sends leaves the machine.
//! Temporal's dev server does too unless its dynamic config
//! `frontend.enableServerVersionCheck` is off, as it is here (with it off,
//! `strace -e trace=connect` saw connections to 127.0.0.1 only).

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::PeerKind;
use super::protocol::{Message, strace_calls};
use crate::engine::child::Lines;
use crate::engine::workload::WorkResult;

/// The system calls counted as a flush to the disk.
pub const FLUSH_CALLS: [&str; 3] = ["fsync", "fdatasync", "sync_file_range"];

/// How long a server may take to accept connections.
const START_PATIENCE: Duration = Duration::from_secs(90);

/// Where the peers are installed and their programs are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Install {
    /// `scripts/peers.sh`'s folder (`target/peers`).
    pub root: PathBuf,
    /// The peers' programs (`benches/peers`).
    pub programs: PathBuf,
}

impl Install {
    /// `$FUSEE_PEERS_DIR`, or `target/peers` of this workspace.
    pub fn locate() -> Install {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let root = std::env::var_os("FUSEE_PEERS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| manifest.join("../target/peers"));
        Install {
            root,
            programs: manifest.join("peers"),
        }
    }

    fn python(&self) -> PathBuf {
        self.root.join("venv/bin/python")
    }

    fn temporal(&self) -> PathBuf {
        self.root.join("venv/bin/temporal")
    }

    fn node_modules(&self) -> PathBuf {
        self.root.join("npm/node_modules")
    }

    fn restate_server(&self) -> PathBuf {
        self.node_modules()
            .join("@restatedev/restate-server-linux-x64/bin/restate-server")
    }

    /// Why `kind` cannot run here, if it cannot (not installed, no tool).
    pub fn missing(&self, kind: PeerKind) -> Option<String> {
        let need: Vec<PathBuf> = match kind {
            PeerKind::Temporal => vec![self.python(), self.temporal()],
            PeerKind::DbosSqlite | PeerKind::DbosPostgres => vec![self.python()],
            PeerKind::Restate => vec![
                self.restate_server(),
                self.node_modules().join("@restatedev/restate-sdk"),
            ],
        };
        if let Some(p) = need.iter().find(|p| !p.exists()) {
            return Some(format!(
                "{} is missing: run scripts/peers.sh first",
                p.display()
            ));
        }
        if kind == PeerKind::Restate {
            for tool in ["unshare", "nsenter", "ip", "node"] {
                if !on_path(tool) {
                    return Some(format!("no `{tool}` on PATH (Restate runs in a netns)"));
                }
            }
        }
        None
    }

    /// The versions of `kind`'s server and SDK, as they report them.
    pub fn version(&self, kind: PeerKind) -> String {
        let py = |code: &str| output(Command::new(self.python()).args(["-c", code]));
        match kind {
            PeerKind::Temporal => format!(
                "{}; temporalio {}",
                output(Command::new(self.temporal()).arg("--version")),
                py("import temporalio; print(temporalio.__version__)")
            ),
            PeerKind::Restate => format!(
                "{}; @restatedev/restate-sdk {} on Node {}",
                output(Command::new(self.restate_server()).arg("--version")),
                package_version(&self.node_modules().join("@restatedev/restate-sdk")),
                output(Command::new("node").arg("--version"))
            ),
            PeerKind::DbosSqlite | PeerKind::DbosPostgres => format!(
                "dbos {} on Python {}",
                py("import importlib.metadata as m; print(m.version('dbos'))"),
                py("import platform; print(platform.python_version())")
            ),
        }
    }
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

fn output(c: &mut Command) -> String {
    c.stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn package_version(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("package.json"))
        .ok()
        .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        .and_then(|v| v.get("version").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// A free TCP port on 127.0.0.1 (the kernel's pick, released at once).
fn free_port() -> WorkResult<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_for_port(port: u16, server: &mut Child) -> WorkResult<()> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + START_PATIENCE;
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Some(status) = server.try_wait()? {
            return Err(format!("the server exited ({status}) before listening on {addr}").into());
        }
        if Instant::now() > deadline {
            return Err(format!("nothing listens on {addr} after {START_PATIENCE:?}").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// A peer's server for one turn (none for DBOS: a library in the
/// program's process; PostgreSQL's is the run's, not the turn's).
#[derive(Debug)]
pub struct Server {
    kind: PeerKind,
    child: Option<Child>,
    /// Environment the peer's program needs to reach the server.
    env: Vec<(String, String)>,
    /// Where the server's output goes (its errors only: each server logs
    /// at error level), read when a turn fails.
    log: Option<PathBuf>,
}

impl Server {
    /// Starts `kind`'s server with its data in `dir` (kept across turns:
    /// each turn's workflow ids are new); `pg_url` is DBOS-on-PostgreSQL's
    /// database.
    pub fn start(
        install: &Install,
        kind: PeerKind,
        dir: &Path,
        pg_url: Option<&str>,
    ) -> WorkResult<Server> {
        std::fs::create_dir_all(dir)?;
        let mut server = Server {
            kind,
            child: None,
            env: Vec::new(),
            log: None,
        };
        match kind {
            PeerKind::Temporal => {
                let (port, http, metrics) = (free_port()?, free_port()?, free_port()?);
                let log = dir.join("server.log");
                let out = std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(&log)?;
                server.log = Some(log);
                let mut child = Command::new(install.temporal())
                    .args(["server", "start-dev", "--headless", "--ip", "127.0.0.1"])
                    .args(["--port", &port.to_string()])
                    .args(["--http-port", &http.to_string()])
                    .args(["--metrics-port", &metrics.to_string()])
                    .arg("--db-filename")
                    .arg(dir.join("temporal.db"))
                    .args(["--log-level", "error"])
                    // Else it asks version-info.temporal.io for a newer
                    // release at start (seen with strace): loopback only.
                    .args([
                        "--dynamic-config-value",
                        "frontend.enableServerVersionCheck=false",
                    ])
                    .stdin(Stdio::null())
                    .stdout(out.try_clone()?)
                    .stderr(out)
                    .spawn()
                    .map_err(|e| format!("starting the Temporal server: {e}"))?;
                let ready = wait_for_port(port, &mut child);
                server.child = Some(child);
                ready?;
                // The frontend listens before the default namespace is
                // served: wait until the CLI can describe it.
                let deadline = Instant::now() + START_PATIENCE;
                let address = format!("127.0.0.1:{port}");
                loop {
                    let ok = Command::new(install.temporal())
                        .args([
                            "operator",
                            "namespace",
                            "describe",
                            "--namespace",
                            "default",
                        ])
                        .args(["--address", &address])
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .is_ok_and(|s| s.success());
                    if ok {
                        break;
                    }
                    if Instant::now() > deadline {
                        return Err("the Temporal server never served its default namespace".into());
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                server.env.push(("FUSEE_PEER_TEMPORAL".into(), address));
            }
            PeerKind::Restate => {
                let config = dir.join("restate.toml");
                std::fs::write(&config, RESTATE_CONFIG)?;
                let mut sh = format!(
                    "ip link set lo up && exec '{}' --config-file '{}' --base-dir '{}' \
                     --listen-mode tcp --no-logo",
                    install.restate_server().display(),
                    config.display(),
                    dir.join("data").display()
                );
                let log = dir.join("server.log");
                sh.push_str(" >>'");
                sh.push_str(&log.display().to_string());
                sh.push_str("' 2>&1");
                server.log = Some(log);
                let mut child = Command::new("unshare")
                    .args(["--net", "--", "sh", "-c", &sh])
                    .stdin(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("starting the Restate server: {e}"))?;
                // The program joins the server's namespace by its pid: only
                // once the pid runs the server is that namespace the new one
                // with its loopback up (a program that joined earlier sat in
                // the machine's namespace, its calls refused for 90 s).
                let exe = PathBuf::from(format!("/proc/{}/exe", child.id()));
                let deadline = Instant::now() + START_PATIENCE;
                while !std::fs::read_link(&exe)
                    .is_ok_and(|p| p.file_name().is_some_and(|n| n == "restate-server"))
                {
                    if let Some(status) = child.try_wait()? {
                        return Err(format!("the Restate server exited ({status}) at start").into());
                    }
                    if Instant::now() > deadline {
                        return Err("the Restate server never started".into());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                server.child = Some(child);
                for (k, v) in [
                    ("FUSEE_PEER_RESTATE_ADMIN", "http://127.0.0.1:19070"),
                    ("FUSEE_PEER_RESTATE_INGRESS", "http://127.0.0.1:18080"),
                    ("FUSEE_PEER_RESTATE_SERVICE_PORT", "19080"),
                    ("RESTATE_LOGGING", "ERROR"),
                ] {
                    server.env.push((k.into(), v.into()));
                }
                server.env.push((
                    "NODE_PATH".into(),
                    install.node_modules().display().to_string(),
                ));
            }
            PeerKind::DbosSqlite => server.env.push((
                "FUSEE_PEER_DBOS_URL".into(),
                format!("sqlite:///{}", dir.join("dbos.sqlite").display()),
            )),
            PeerKind::DbosPostgres => {
                let url = pg_url.ok_or("no PostgreSQL server (source scripts/postgres.sh)")?;
                server
                    .env
                    .push(("FUSEE_PEER_DBOS_URL".into(), url.to_string()));
            }
        }
        Ok(server)
    }

    /// The server's process ids to trace (the server and, for PostgreSQL,
    /// every process of the server on `pg_port`).
    pub fn pids(&self, pg_port: Option<u16>) -> Vec<u32> {
        match (self.kind, &self.child) {
            (PeerKind::DbosPostgres, _) => pg_port.map(postgres_pids).unwrap_or_default(),
            (_, Some(c)) => vec![c.id()],
            _ => Vec::new(),
        }
    }

    /// The peer's program running `args`, its stdout read line by line.
    pub fn program(&self, install: &Install, args: &[String]) -> WorkResult<Program> {
        let mut command = match self.kind {
            PeerKind::Restate => {
                let pid = self
                    .child
                    .as_ref()
                    .map(Child::id)
                    .ok_or("no Restate server")?;
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/proc/{pid}/ns/net"))
                    .arg("--")
                    .arg("node")
                    .arg(install.programs.join("restate_peer.cjs"));
                c
            }
            kind => {
                let mut c = Command::new(install.python());
                c.arg(install.programs.join(kind.program()));
                c
            }
        };
        command
            .args(args)
            .current_dir(&install.programs)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            // Python's buffered stdout would hold `done` lines back.
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stderr(Stdio::null());
        Ok(Program {
            lines: Lines::start(command)?,
        })
    }

    /// Stops the server (see [`stop`](Self::stop)) after a turn that gave
    /// `r`; a failed turn's error says what the server says of itself:
    /// whether it had exited, and the end of its log. (A peer's program
    /// that cannot reach its server says only "connection refused".)
    pub fn stop_after<T>(mut self, r: WorkResult<T>) -> WorkResult<T> {
        let r = r.map_err(|e| {
            let said = self.said();
            if said.is_empty() {
                e
            } else {
                format!("{e} ({said})").into()
            }
        });
        self.stop();
        r
    }

    /// Whether the server exited, and the last lines of its log, in
    /// words; empty when it runs and logged nothing.
    fn said(&mut self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = self.child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            parts.push(format!(
                "the {} server had exited: {status}",
                self.kind.name()
            ));
        }
        if let Some(tail) = self.log.as_deref().and_then(log_tail) {
            parts.push(format!("its log ends: {tail}"));
        }
        parts.join("; ")
    }

    /// Stops the server (SIGTERM, then SIGKILL after 10 s) and reaps it.
    pub fn stop(mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        signal(child.id(), "TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(child.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A failed turn leaves no server behind.
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Restate's configuration: every listener on 127.0.0.1 (inside its own
/// network namespace), no telemetry, no web UI; durability as shipped
/// (the log's RocksDB WAL fsynced: `rocksdb-disable-wal-fsync = false`).
const RESTATE_CONFIG: &str = r#"node-name = "fusee-peer"
bind-address = "127.0.0.1:15122"
advertised-address = "http://127.0.0.1:15122/"
disable-telemetry = true
log-filter = "error"

[admin]
bind-address = "127.0.0.1:19070"
advertised-admin-endpoint = "http://127.0.0.1:19070/"
disable-web-ui = true

[ingress]
bind-address = "127.0.0.1:18080"
advertised-ingress-endpoint = "http://127.0.0.1:18080/"
"#;

/// The last lines of the log at `path`, at most [`LOG_TAIL_LINES`] lines
/// and [`LOG_TAIL_BYTES`] bytes, joined by " | "; `None` when it is empty
/// or unreadable.
fn log_tail(path: &Path) -> Option<String> {
    let text = std::fs::read(path).ok()?;
    let from = text.len().saturating_sub(LOG_TAIL_BYTES);
    let text = String::from_utf8_lossy(&text[from..]);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join(" | ");
    (!tail.is_empty()).then_some(tail)
}

/// How much of a server's log a failed turn's error quotes.
const LOG_TAIL_LINES: usize = 5;
const LOG_TAIL_BYTES: usize = 2048;

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Every process of the PostgreSQL server listening on 127.0.0.1:`port`:
/// the postmaster (from `ss`) and its children (from `/proc`).
pub fn postgres_pids(port: u16) -> Vec<u32> {
    let ss = output(Command::new("ss").args(["-Hltnp", &format!("sport = :{port}")]));
    let Some(master) = ss
        .split("pid=")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse::<u32>().ok())
    else {
        return Vec::new();
    };
    let mut pids = vec![master];
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // Field 4, after the parenthesised name: the parent's pid.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|s| s.parse::<u32>().ok());
            if ppid == Some(master) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// A peer's program, running one command.
pub struct Program {
    lines: Lines,
}

impl Program {
    /// The program's process id.
    pub fn pid(&mut self) -> u32 {
        self.lines.child().id()
    }

    /// The next message, skipping lines that are none; an `error` message
    /// and an end of output without a result are errors.
    pub fn message(&mut self) -> WorkResult<Message> {
        loop {
            match self.lines.next()? {
                None => {
                    let status = self.lines.child().wait()?;
                    return Err(
                        format!("the peer's program exited ({status}) without a result").into(),
                    );
                }
                Some(line) => match Message::parse(&line) {
                    Some(Message::Error(e)) => return Err(format!("the peer failed: {e}").into()),
                    Some(m) => return Ok(m),
                    None => {}
                },
            }
        }
    }

    /// Reads messages until the result, skipping progress.
    pub fn result(&mut self) -> WorkResult<Value> {
        loop {
            if let Message::Result(v) = self.message()? {
                let _ = self.lines.child().wait();
                return Ok(v);
            }
        }
    }

    /// Waits for `ready`, then says `go`.
    pub fn ready_go(
        &mut self,
        before_go: impl FnOnce(&mut Self) -> WorkResult<()>,
    ) -> WorkResult<()> {
        match self.message()? {
            Message::Ready => {}
            m => return Err(format!("expected ready, got {m:?}").into()),
        }
        before_go(self)?;
        let stdin = self.lines.child().stdin.as_mut().ok_or("no stdin")?;
        stdin.write_all(b"go\n")?;
        stdin.flush()?;
        Ok(())
    }

    /// Kills the program with SIGKILL.
    pub fn kill(&mut self) -> WorkResult<()> {
        self.lines.kill()
    }
}

/// An `strace -c` counting flush calls in `pids` (every thread) until
/// [`Strace::finish`].
pub struct Strace {
    child: Child,
    out: PathBuf,
}

impl Strace {
    /// Whether `strace` is installed (`scripts/peers.sh` installs it).
    pub fn available() -> bool {
        on_path("strace")
    }

    /// Attaches to `pids`; returns once attached (strace says so per
    /// thread on stderr; a second covers a few hundred threads).
    pub fn attach(pids: &[u32], out: PathBuf) -> WorkResult<Strace> {
        if pids.is_empty() {
            return Err("no process to trace".into());
        }
        let mut c = Command::new("strace");
        c.args(["-f", "-c", "-e"])
            .arg(format!("trace={}", FLUSH_CALLS.join(",")));
        c.arg("-o").arg(&out);
        for p in pids {
            c.arg("-p").arg(p.to_string());
        }
        let child = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting strace: {e}"))?;
        std::thread::sleep(Duration::from_secs(1));
        Ok(Strace { child, out })
    }

    /// Detaches (SIGINT) and returns the calls counted per system call.
    pub fn finish(mut self) -> WorkResult<Vec<(String, u64)>> {
        signal(self.child.id(), "INT");
        self.child.wait()?;
        let summary = std::fs::read_to_string(&self.out)?;
        Ok(strace_calls(&summary, &FLUSH_CALLS))
    }
}

impl Drop for Strace {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            signal(self.child.id(), "INT");
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed turn's error carries the server's exit and the end of its
    /// log; a turn that went well is left alone.
    #[test]
    fn a_failed_turn_says_what_its_server_said() -> WorkResult<()> {
        let dir = std::env::temp_dir().join(format!("fusee-peer-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let log = dir.join("server.log");
        let lines: String = (1..=8).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, format!("{lines}panic: database is locked\n"))?;
        let mut child = Command::new("sh").args(["-c", "exit 3"]).spawn()?;
        child.wait()?;
        let server = |child| Server {
            kind: PeerKind::Temporal,
            child,
            env: Vec::new(),
            log: Some(log.clone()),
        };
        let failed = server(Some(child)).stop_after::<()>(Err("connection refused".into()));
        let e = failed.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.starts_with("connection refused ("), "{e}");
        assert!(e.contains("temporal server had exited"), "{e}");
        assert!(
            e.contains("line 5 | line 6 | line 7 | line 8 | panic: database is locked"),
            "{e}"
        );
        assert!(!e.contains("line 4"), "{e}");
        assert_eq!(server(None).stop_after(Ok(7))?, 7);
        std::fs::write(&log, "")?;
        let e = server(None)
            .stop_after::<()>(Err("x".into()))
            .err()
            .map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("x"));
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
