//! Ownership clauses: the lock a storage takes lives as long as the
//! storage or any part it gave out, in this process and against others.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::check::{Clause, check_bytes, check_matches};
use super::log::check_prefix;
use super::{Harness, fail, flush_to, frame, must, open, record};
use crate::{CheckpointStore, IndexChange, LogStore, RunStore, Storage, StorageError};

/// The shard the clauses write to.
const SHARD: u32 = 3;
/// The salt of the records and frames they write.
const SALT: u64 = 40;

/// The environment variable that makes [`lock_outlives_storage_child`]
/// act as the child: the location the parent holds.
const CHILD_ENV: &str = "FUSEE_CONFORMANCE_LOCK_CHILD";
/// How a child's verdict line starts, so the parent finds it among the
/// test harness's own lines.
const VERDICT: &str = "fusee-conformance-lock-child: ";
/// How long the parent waits for a child: a child still running then is
/// most likely blocked on the lock instead of being refused.
const CHILD_TIMEOUT: Duration = Duration::from_secs(120);

/// A second open while `what` must be refused with `Locked`.
fn check_locked<S: Storage>(r: Result<S, StorageError>, what: std::fmt::Arguments<'_>) {
    check_matches!(
        r.map(drop),
        Err(StorageError::Locked { .. }),
        "Err(Locked)",
        "a second open of the storage {what}"
    );
}

/// Opens the storage's shard, writes record 1 (flushed), a frame and a
/// commit, and returns the parts with the frame's address.
fn write_first<S: Storage>(s: &S) -> (crate::ShardParts<S>, fusee_core::shard::BlobRef) {
    let mut p = open(s, SHARD);
    must!(p.log.append(1, &record(1, SALT)), "append(1)");
    flush_to(&mut p.log, 1, format_args!("the flush of record 1"));
    let blob = must!(p.runs.append(&frame(500, SALT)), "append of a frame");
    must!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&[]), b"owned"),
        "commit"
    );
    (p, blob)
}

/// The lock a storage takes lives as long as the storage or any part it
/// gave out: a second open of the same storage in this process
/// ([`Harness::open_again`]) is `Locked` while the first storage is open,
/// and still `Locked` after it was dropped while a shard's parts live
/// (which may go on working, or refuse with `Closed`); once the parts are
/// dropped too it opens, with everything flushed and committed, and locks
/// in turn. Needs [`super::LockChecks::same_process`].
pub fn lock_outlives_storage<H: Harness>(h: &mut H) {
    let c = Clause::enter("lock_outlives_storage");
    if c.skips(h) {
        return;
    }
    let s = h.open();
    let (mut p, blob) = write_first(&s);
    check_locked(h.open_again(), format_args!("while it is open"));
    drop(s);
    check_locked(
        h.open_again(),
        format_args!("after it was dropped while shard {SHARD}'s parts live"),
    );
    // The parts outlive their storage: they work on, or are Closed.
    let appended = match p.log.append(2, &record(2, SALT)) {
        Ok(()) => 2,
        Err(StorageError::Closed { .. }) => 1,
        Err(e) => fail(format_args!(
            "append(2) on a part whose storage was dropped: expected Ok or Err(Closed); found Err({e:?})"
        )),
    };
    let flushed = match p.log.flush() {
        Ok(lsn) if lsn == appended => lsn,
        Err(StorageError::Closed { .. }) => 1,
        other => fail(format_args!(
            "flush on a part whose storage was dropped: expected Ok({appended}) or Err(Closed); found {other:?}"
        )),
    };
    check_locked(
        h.open_again(),
        format_args!("after it was dropped, while shard {SHARD}'s parts live and write"),
    );
    drop(p);
    let s = match h.open_again() {
        Ok(s) => s,
        Err(e) => fail(format_args!(
            "once the storage and every part were dropped, a second open must succeed; found Err({e:?})"
        )),
    };
    let mut p = open(&s, SHARD);
    check_prefix(&mut p.log, flushed, appended, SALT);
    let mut out = Vec::new();
    must!(
        p.runs.read(blob, &mut out),
        "after the second open, the read of the committed frame"
    );
    check_bytes(
        &out,
        &frame(500, SALT),
        format_args!("after the second open, the committed frame"),
    );
    check_locked(
        h.open_again(),
        format_args!("while the storage opened again is open"),
    );
    drop(p);
    must!(s.close(), "close");
}

/// What a child process said about opening the storage.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Refused with `Locked`.
    Locked,
    /// Opened (then closed).
    Opened,
    /// Any other error, with its `Debug`.
    Error(String),
}

/// The lock holds against other processes too: a child process opening the
/// storage ([`Harness::open_at`] at [`Harness::location`]) is refused with
/// `Locked` while this process holds it open, and after this process
/// dropped it while a shard's parts live; once the parts are dropped too,
/// the child opens it. Needs [`super::LockChecks::child_process`].
///
/// `test` is the full name of the test that calls this function (the macro
/// passes its own): the child runs that test alone, which, seeing
/// `FUSEE_CONFORMANCE_LOCK_CHILD`, opens the location and prints its
/// verdict instead of running the clause.
pub fn lock_outlives_storage_child<H: Harness>(h: &mut H, test: &str) {
    let c = Clause::enter("lock_outlives_storage_child");
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        return answer_as_child(h, Path::new(&path));
    }
    if c.skips(h) {
        return;
    }
    let s = h.open();
    let path = h.location();
    let (p, _) = write_first(&s);
    let ask = |expected: Verdict, when: std::fmt::Arguments<'_>| {
        let found = ask_child(test, &path);
        if found != expected {
            fail(format_args!(
                "a child process opening {} {when}: expected {expected:?}; found {found:?}",
                path.display()
            ));
        }
    };
    ask(
        Verdict::Locked,
        format_args!("while this process holds it open"),
    );
    drop(s);
    ask(
        Verdict::Locked,
        format_args!("after this process dropped it but holds shard {SHARD}'s parts"),
    );
    drop(p);
    ask(
        Verdict::Opened,
        format_args!("after this process dropped it and every part"),
    );
}

/// The child's side: opens `path` and prints the verdict line.
fn answer_as_child<H: Harness>(h: &mut H, path: &Path) {
    let verdict = match h.open_at(path) {
        Ok(s) => {
            let _ = s.close();
            "opened".to_owned()
        }
        Err(StorageError::Locked { .. }) => "locked".to_owned(),
        Err(e) => format!("error {e:?}"),
    };
    let mut out = std::io::stdout().lock();
    // On a line of its own: the test harness has printed the test's name
    // without a line end.
    let _ = writeln!(out, "\n{VERDICT}{verdict}");
    let _ = out.flush();
}

/// Runs test `test` of this binary as a child process that opens `path`,
/// and returns its verdict (an `Error` saying so if it gave none).
fn ask_child(test: &str, path: &Path) -> Verdict {
    let exe = must!(
        std::env::current_exe().map_err(|e| StorageError::io("find the test binary", e)),
        "finding the test binary to run as a child"
    );
    let mut child = must!(
        Command::new(&exe)
            .args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .env(CHILD_ENV, path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| StorageError::io(format!("spawn {}", exe.display()), e)),
        "running the test binary as a child"
    );
    // Read both pipes on threads so a chatty child never blocks on a full
    // pipe while the parent waits for it.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + CHILD_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!(
                    "no answer within {CHILD_TIMEOUT:?} (killed): does open block on the lock instead of refusing?"
                ));
            }
            Err(e) => break Err(format!("waiting for it failed: {e}")),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let verdict = stdout
        .lines()
        .find_map(|l| l.split_once(VERDICT).map(|(_, v)| v.trim_end()));
    match (status, verdict) {
        (Ok(status), Some(v)) if status.success() => match v {
            "locked" => Verdict::Locked,
            "opened" => Verdict::Opened,
            other => Verdict::Error(other.to_owned()),
        },
        (status, _) => Verdict::Error(format!(
            "the child running test {test} gave no verdict ({}); stdout: {stdout:?}; stderr: {stderr:?}",
            match status {
                Ok(s) => s.to_string(),
                Err(why) => why,
            }
        )),
    }
}

/// Reads `pipe` to its end on a thread.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut text);
        }
        text
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test name the binary does not hold runs no test and prints no
    /// verdict: the parent must say so rather than read it as an answer.
    #[test]
    fn a_child_without_the_test_gives_no_verdict() {
        let v = ask_child("no::such::test", Path::new("/nonexistent"));
        assert!(
            matches!(&v, Verdict::Error(why) if why.contains("gave no verdict")),
            "expected an Error saying the child gave no verdict; found {v:?}"
        );
    }
}
