//! Harnesses shared by Fusee's end-to-end and crash tests.
//!
//! The SIGKILL harness (`tests/sigkill.rs`) runs the `crash-child` binary,
//! which appends and flushes log records on a backend named on its command
//! line and reports every durable LSN on stdout; the parent kills it with
//! SIGKILL at random moments, reopens the storage and checks that every
//! reported record is present and intact. Any backend this crate is built
//! with ([`backends`]) runs the same harness.

use std::path::Path;

use fusee_core::record::Lsn;
use std::sync::mpsc;

use fusee_storage::{FlushTicket, LogStore, Result, Storage};

/// The bytes of the record at `lsn`: a length and content derived from the
/// LSN alone, so a checker needs nothing but the LSN to verify a record.
pub fn record_bytes(lsn: Lsn) -> Vec<u8> {
    let mut state = lsn.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let len = (state % 2048) as usize + (lsn % 3) as usize * 40;
    let mut out = Vec::with_capacity(len + 8);
    out.extend_from_slice(&lsn.to_le_bytes());
    while out.len() < len + 8 {
        // xorshift64: cheap, deterministic filler.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.push(state as u8);
    }
    out
}

/// The backends this build can drive, by name.
pub fn backends() -> Vec<&'static str> {
    let mut names = Vec::new();
    if cfg!(feature = "file") {
        names.push("file");
    }
    if cfg!(feature = "redb") {
        names.push("redb");
    }
    if cfg!(feature = "rocksdb") {
        names.push("rocksdb");
    }
    names
}

/// Checks shard 0's log of `storage`: every record from its first to its
/// last is the one [`record_bytes`] gives. Returns the last LSN.
pub fn check_log<S: Storage>(storage: &S) -> Result<Lsn> {
    let mut parts = storage.open_shard(0)?;
    let first = parts.log.first_lsn();
    let mut next = first;
    let last = parts.log.read(first.saturating_sub(1), &mut |lsn, bytes| {
        assert_eq!(lsn, next, "hole in the log before LSN {lsn}");
        assert!(
            bytes == record_bytes(lsn).as_slice(),
            "record {lsn} changed ({} bytes read)",
            bytes.len()
        );
        next += 1;
        Ok(())
    })?;
    Ok(last)
}

/// Runs `f` on the storage of backend `name` in `dir`.
///
/// # Panics
/// On an unknown backend name, or if the storage does not open.
pub fn with_backend<T>(name: &str, dir: &Path, f: impl FnOnce(&dyn AnyBackend) -> T) -> T {
    match name {
        #[cfg(feature = "file")]
        "file" => {
            let s = fusee_storage_file::FileStorage::open(dir, file_options())
                .unwrap_or_else(|e| panic!("open {}: {e}", dir.display()));
            let out = f(&s);
            let _ = s.close();
            out
        }
        #[cfg(feature = "redb")]
        "redb" => {
            let s = fusee_storage_redb::RedbStorage::open(dir)
                .unwrap_or_else(|e| panic!("open {}: {e}", dir.display()));
            let out = f(&s);
            let _ = s.close();
            out
        }
        #[cfg(feature = "rocksdb")]
        "rocksdb" => {
            let s = fusee_storage_rocksdb::RocksStorage::open(dir)
                .unwrap_or_else(|e| panic!("open {}: {e}", dir.display()));
            let out = f(&s);
            let _ = s.close();
            out
        }
        other => panic!("backend {other:?} is not built into this binary"),
    }
}

#[cfg(feature = "file")]
fn file_options() -> fusee_storage_file::FileOptions {
    fusee_storage_file::FileOptions {
        // Small segments, so kills land across rolls too.
        segment_bytes: 1 << 20,
        ..Default::default()
    }
}

/// How the crash child writes.
#[derive(Clone, Copy, Debug)]
pub struct Writing {
    /// Records per flush.
    pub batch: usize,
    /// Flush on a flusher thread (`begin_flush`, `FlushTicket::run` there,
    /// `finish_flush`) while the next batch is appended, as a host's group
    /// commit does; otherwise `flush` on the writing thread.
    pub pipelined: bool,
    /// Discard records this far behind the durable LSN after each flush, as
    /// a checkpointing host would (0: never), so segments are dropped or
    /// recycled while the process may die.
    pub keep: u64,
}

/// What the crash harness needs of a storage, object-safe.
pub trait AnyBackend {
    /// Appends records after the log's last LSN as `how` says, calling
    /// `durable` with the durable LSN after each flush, until `durable`
    /// returns false.
    fn append_forever(&self, how: Writing, durable: &mut dyn FnMut(Lsn) -> bool) -> Result<()>;
    /// [`check_log`] on this storage.
    fn check(&self) -> Result<Lsn>;
}

impl<S: Storage> AnyBackend for S {
    fn append_forever(&self, how: Writing, durable: &mut dyn FnMut(Lsn) -> bool) -> Result<()> {
        let mut parts = self.open_shard(0)?;
        let log = &mut parts.log;
        let append_batch = |log: &mut S::Log| -> Result<()> {
            for _ in 0..how.batch.max(1) {
                let lsn = log.last_lsn() + 1;
                log.append(lsn, &record_bytes(lsn))?;
            }
            Ok(())
        };
        let discard = |log: &mut S::Log, lsn: Lsn| -> Result<()> {
            if how.keep > 0 && lsn > how.keep {
                log.discard_through(lsn - how.keep)?;
            }
            Ok(())
        };
        if !how.pipelined {
            loop {
                append_batch(log)?;
                let lsn = log.flush()?;
                discard(log, lsn)?;
                if !durable(lsn) {
                    return Ok(());
                }
            }
        }
        let (to_flusher, jobs) = mpsc::sync_channel::<FlushTicket>(1);
        let (done, back) = mpsc::sync_channel::<FlushTicket>(1);
        std::thread::scope(|scope| {
            scope.spawn(move || {
                for mut ticket in jobs {
                    ticket.run();
                    if done.send(ticket).is_err() {
                        break;
                    }
                }
            });
            append_batch(log)?;
            let mut ticket = log.begin_flush()?;
            loop {
                // The flush of one batch runs while the next is appended.
                let _ = to_flusher.send(ticket);
                append_batch(log)?;
                let Ok(ran) = back.recv() else {
                    return Ok(());
                };
                let lsn = log.finish_flush(ran)?;
                discard(log, lsn)?;
                if !durable(lsn) {
                    return Ok(());
                }
                ticket = log.begin_flush()?;
            }
        })
    }

    fn check(&self) -> Result<Lsn> {
        check_log(self)
    }
}

pub mod lease;

#[cfg(feature = "postgres")]
pub mod inbox;

/// The URL of the PostgreSQL server the tests run against
/// (`FUSEE_PG_URL`, exported by `scripts/postgres.sh`), or `None` after
/// printing that `what` is skipped. Under CI (`CI` set) a missing server
/// fails the test instead: `.ci/run` starts one, so its absence is a bug.
pub fn pg_url_or_skip(what: &str) -> Option<String> {
    let url = std::env::var("FUSEE_PG_URL").unwrap_or_default();
    if !url.is_empty() {
        return Some(url);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "FUSEE_PG_URL is unset under CI: .ci/run must source scripts/postgres.sh"
    );
    eprintln!(
        "SKIPPED {what}: no PostgreSQL server (FUSEE_PG_URL unset; `source scripts/postgres.sh` starts one)"
    );
    None
}

/// A count from the environment variable `name`, or `default` when it is
/// unset or not a number (stress counts and seeds of the harnesses).
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// The engine SIGKILL harness (`tests/engine_sigkill.rs`) and its child
/// (`engine-child`): what the child reports on stdout, one line each, and
/// the result its workflow computes.
///
/// The child keeps up to [`IN_FLIGHT`](engine_kill::IN_FLIGHT) workflows
/// running (IDs [`workflow_id`](engine_kill::workflow_id) of increasing
/// numbers), reports each start the engine acknowledged and each result it
/// got; the parent kills it, starts it again on the same directory, and
/// checks every report of the new child against what the earlier ones said.
pub mod engine_kill {
    use std::fmt;

    /// Workflows a child keeps running at once.
    pub const IN_FLIGHT: usize = 1000;

    /// The workflow ID of run number `n`.
    pub fn workflow_id(n: u64) -> String {
        format!("wf-{n}")
    }

    /// One line of the child's stdout.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Report {
        /// The engine opened; its shards replayed this many log records.
        Opened {
            /// Log records recovery replayed, summed over the shards.
            recovered: u64,
        },
        /// The child is about to ask for the start of run `n` (so a run
        /// numbered `n` may exist from now on, acknowledged or not).
        Starting(u64),
        /// The engine acknowledged the start of run `n`: a new run, or one
        /// that existed (`attached`).
        Started {
            /// The run's number.
            n: u64,
            /// Whether the start attached to an existing run.
            attached: bool,
        },
        /// The engine acknowledged the `go` signal this child sent run `n`
        /// (not sent when the run had finished).
        Signalled(u64),
        /// Run `n`'s result, as [`RunValue`] formats it.
        Result {
            /// The run's number.
            n: u64,
            /// The result.
            value: String,
        },
        /// A call about run `n` failed: never expected.
        Error {
            /// The run's number.
            n: u64,
            /// The error.
            message: String,
        },
    }

    impl fmt::Display for Report {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Report::Opened { recovered } => write!(f, "opened {recovered}"),
                Report::Starting(n) => write!(f, "starting {n}"),
                Report::Started { n, attached } => {
                    write!(
                        f,
                        "started {n} {}",
                        if *attached { "attached" } else { "new" }
                    )
                }
                Report::Signalled(n) => write!(f, "signalled {n}"),
                Report::Result { n, value } => write!(f, "result {n} {value}"),
                // One line, whatever the error says.
                Report::Error { n, message } => {
                    write!(f, "error {n} {}", message.replace('\n', " "))
                }
            }
        }
    }

    impl Report {
        /// Parses a line [`Display`](fmt::Display) wrote; `None` for
        /// anything else.
        pub fn parse(line: &str) -> Option<Report> {
            let (word, rest) = line.trim_end().split_once(' ')?;
            let (n, tail) = match rest.split_once(' ') {
                Some((n, tail)) => (n.parse::<u64>().ok()?, Some(tail)),
                None => (rest.parse::<u64>().ok()?, None),
            };
            Some(match (word, tail) {
                ("opened", None) => Report::Opened { recovered: n },
                ("starting", None) => Report::Starting(n),
                ("signalled", None) => Report::Signalled(n),
                ("started", Some("new")) => Report::Started { n, attached: false },
                ("started", Some("attached")) => Report::Started { n, attached: true },
                ("result", Some(value)) => Report::Result {
                    n,
                    value: value.to_string(),
                },
                ("error", Some(message)) => Report::Error {
                    n,
                    message: message.to_string(),
                },
                _ => return None,
            })
        }
    }

    /// What the harness's workflow returns: its number, the incarnations
    /// of the child (numbered from 0 by the parent) whose attempts of
    /// steps `a`, `b` and `c` were recorded, the incarnation that sent the
    /// signal it consumed, a recorded random number, and what its two
    /// child workflows (on other shards, mostly) returned and signalled
    /// it. Everything but `n` depends on which process got there first,
    /// so a result that changes after a kill shows a step run again after
    /// its result was durable, or a replay that saw another journal.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct RunValue {
        /// The run's number.
        pub n: u64,
        /// Incarnation whose attempt of step `a` was recorded.
        pub a: u64,
        /// The same for step `b`.
        pub b: u64,
        /// Incarnation whose `go` signal the run consumed.
        pub go: u64,
        /// The same for step `c`.
        pub c: u64,
        /// `ctx.random()`, recorded.
        pub random: u64,
        /// What child workflow 0 returned: the incarnation whose attempt of
        /// its step was recorded.
        pub k0: u64,
        /// The same for child workflow 1.
        pub k1: u64,
        /// The value child 0 signalled its parent ([`NO_NOTE`] if none
        /// came): the same as `k0`, or a signal was lost or changed.
        pub n0: u64,
        /// The same for child 1.
        pub n1: u64,
        /// Signals from the children beyond one each: a signal recorded in
        /// its target's journal twice.
        pub extra: u64,
    }

    /// The note of a child that never signalled (in [`RunValue::n0`]).
    pub const NO_NOTE: u64 = u64::MAX;

    /// The workflow ID of child `k` (0 or 1) of run number `n`.
    pub fn kid_id(n: u64, k: u64) -> String {
        format!("wf-{n}/kid-{k}")
    }

    impl fmt::Display for RunValue {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let RunValue {
                n,
                a,
                b,
                go,
                c,
                random,
                k0,
                k1,
                n0,
                n1,
                extra,
            } = self;
            write!(
                f,
                "n={n},a={a},b={b},go={go},c={c},random={random:x},k0={k0},k1={k1},n0={n0},n1={n1},extra={extra}"
            )
        }
    }

    impl RunValue {
        /// Parses what [`Display`](fmt::Display) wrote.
        pub fn parse(s: &str) -> Option<RunValue> {
            let mut fields = s.split(',').map(|kv| kv.split_once('='));
            let mut next = |key: &str, radix: u32| -> Option<u64> {
                let (k, v) = fields.next()??;
                (k == key).then(|| u64::from_str_radix(v, radix).ok())?
            };
            let value = RunValue {
                n: next("n", 10)?,
                a: next("a", 10)?,
                b: next("b", 10)?,
                go: next("go", 10)?,
                c: next("c", 10)?,
                random: next("random", 16)?,
                k0: next("k0", 10)?,
                k1: next("k1", 10)?,
                n0: next("n0", 10)?,
                n1: next("n1", 10)?,
                extra: next("extra", 10)?,
            };
            fields.next().is_none().then_some(value)
        }

        /// Why this value cannot be run `n`'s as seen by incarnation
        /// `incarnation`, if it cannot: another number, steps recorded out
        /// of order, an incarnation that has not run yet, or a child's
        /// signal lost, changed or recorded twice.
        pub fn implausible(&self, n: u64, incarnation: u64) -> Option<String> {
            if self.n != n {
                return Some(format!("it is run {}'s", self.n));
            }
            if !(self.a <= self.b && self.b <= self.c && self.go <= self.c) {
                return Some("its steps were recorded out of order".into());
            }
            // The children start after step `b` and end before step `c`.
            for (k, kid) in [self.k0, self.k1].into_iter().enumerate() {
                if !(self.b <= kid && kid <= self.c) {
                    return Some(format!(
                        "child {k}'s step was recorded by incarnation {kid}, outside b..=c"
                    ));
                }
            }
            for (k, (kid, note)) in [(self.k0, self.n0), (self.k1, self.n1)]
                .into_iter()
                .enumerate()
            {
                if note == NO_NOTE {
                    return Some(format!("child {k}'s signal never reached its parent"));
                }
                if note != kid {
                    return Some(format!(
                        "child {k} returned {kid} but signalled {note}: a step ran again"
                    ));
                }
            }
            if self.extra != 0 {
                return Some(format!(
                    "{} child signals reached the parent twice",
                    self.extra
                ));
            }
            if self.c > incarnation {
                return Some(format!(
                    "it names incarnation {}, after this one ({incarnation})",
                    self.c
                ));
            }
            None
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn reports_and_values_read_back() {
            let value = RunValue {
                n: 7,
                a: 1,
                b: 2,
                go: 2,
                c: 3,
                random: u64::MAX,
                k0: 2,
                k1: 3,
                n0: 2,
                n1: 3,
                extra: 0,
            };
            let reports = [
                Report::Opened { recovered: 12 },
                Report::Starting(3),
                Report::Started {
                    n: 3,
                    attached: true,
                },
                Report::Started {
                    n: 4,
                    attached: false,
                },
                Report::Signalled(3),
                Report::Result {
                    n: 7,
                    value: value.to_string(),
                },
                Report::Error {
                    n: 9,
                    message: "shard 1: busy".into(),
                },
            ];
            for r in reports {
                assert_eq!(Report::parse(&r.to_string()), Some(r));
            }
            assert_eq!(RunValue::parse(&value.to_string()), Some(value));
            assert_eq!(value.implausible(7, 3), None);
            assert!(value.implausible(8, 3).is_some());
            assert!(value.implausible(7, 2).is_some());
            for bad in [
                RunValue { n0: 1, ..value },
                RunValue {
                    n1: NO_NOTE,
                    ..value
                },
                RunValue { extra: 1, ..value },
                RunValue {
                    k0: 1,
                    n0: 1,
                    ..value
                },
            ] {
                assert!(bad.implausible(7, 3).is_some(), "{bad}");
            }
            for bad in ["", "started 3", "started x new", "result 3", "opened"] {
                assert_eq!(Report::parse(bad), None, "{bad:?}");
            }
            assert_eq!(RunValue::parse("n=1,a=1"), None);
        }
    }
}

/// The reminders SIGKILL test (`tests/reminders_sigkill.rs`) and its child
/// (`reminders-child`): the reminder service both sides agree on.
pub mod reminders {
    use fusee::{Signal, Workflow};

    /// A reminder: when it is due (ms since the Unix epoch) in; `None` if
    /// it was cancelled, else (when it was due, snoozes included; when its
    /// code ran after the wait) out.
    pub const REMINDER: Workflow<u64, Option<(u64, u64)>> = Workflow::new("reminder");
    /// What a reminder is told while it sleeps: a [`Control`] as a byte.
    pub const CONTROL: Signal<u8> = Signal::new("control");
    /// Shards of the store: four, so reminders spread over threads.
    pub const SHARDS: u32 = 4;
    /// How much later a snooze makes a reminder due.
    pub const SNOOZE_MS: u64 = 1000;
    /// When the parent kills the first child, after its base time: about
    /// half the reminders are due by then.
    pub const KILL_AFTER_MS: u64 = 2000;

    /// A signal a reminder takes.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(u8)]
    pub enum Control {
        /// Due [`SNOOZE_MS`] later.
        Snooze = 1,
        /// Never fires.
        Cancel = 2,
    }

    /// What reminder `i` is told, if anything: one in ten snoozed, one in
    /// ten cancelled.
    pub fn fate(i: u64) -> Option<Control> {
        match i % 10 {
            0 => Some(Control::Snooze),
            1 => Some(Control::Cancel),
            _ => None,
        }
    }

    /// When reminder `i` is due, before any snooze: 1 to 3 s after
    /// `base_ms`; those told something 1.5 to 3 s after, so their signals
    /// (sent first) come before they are due.
    pub fn due_ms(base_ms: u64, i: u64) -> u64 {
        let spread = i.wrapping_mul(7919) % 2000;
        match fate(i) {
            None => base_ms + 1000 + spread,
            Some(_) => base_ms + 1500 + spread * 3 / 4,
        }
    }

    /// When reminder `i` should fire: its due time, a snooze later if it
    /// was snoozed; `None` if it was cancelled.
    pub fn fires_at(base_ms: u64, i: u64) -> Option<u64> {
        match fate(i) {
            Some(Control::Cancel) => None,
            Some(Control::Snooze) => Some(due_ms(base_ms, i) + SNOOZE_MS),
            None => Some(due_ms(base_ms, i)),
        }
    }

    /// Reminder `i`'s workflow ID.
    pub fn id(i: u64) -> String {
        format!("remind-{i}")
    }
}
