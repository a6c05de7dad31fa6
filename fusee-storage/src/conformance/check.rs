//! How a clause fails: every message names the clause, the promise or
//! operation checked, what was expected and what was found.
//!
//! The clause running on a thread is kept in a thread-local ([`Clause`]),
//! so a helper deep inside a clause (or a clause called directly rather
//! than through the macro) still names it.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;

use super::{Harness, needs};
use crate::INDEX_RECORD;

thread_local! {
    static CLAUSE: Cell<&'static str> = const { Cell::new("") };
}

/// The clause running on this thread while the value lives; the previous
/// one comes back when it is dropped.
pub(super) struct Clause {
    name: &'static str,
    previous: &'static str,
}

impl Clause {
    /// Marks `name` as the clause running on this thread.
    pub(super) fn enter(name: &'static str) -> Self {
        let previous = CLAUSE.with(|c| c.replace(name));
        Self { name, previous }
    }

    /// Whether this clause, or the part of it the needs table names, is
    /// skipped on `h` (which lacks what it needs); prints a `SKIPPED` line
    /// past the test harness's capture if so, so a skip is never silent.
    pub(super) fn skips<H: Harness>(&self, h: &H) -> bool {
        let Some(skip) = needs(self.name, h.capabilities(), h.lock_checks()) else {
            return false;
        };
        let what = match skip.part {
            Some(part) => format!("part of {} ({part})", self.name),
            None => self.name.to_owned(),
        };
        let _ = writeln!(std::io::stderr(), "SKIPPED {what}: {}", skip.reason);
        true
    }
}

impl Drop for Clause {
    fn drop(&mut self) {
        CLAUSE.with(|c| c.set(self.previous));
    }
}

/// Fails the running clause: panics with its name and `message`.
#[track_caller]
pub(super) fn fail(message: fmt::Arguments<'_>) -> ! {
    match CLAUSE.with(Cell::get) {
        "" => panic!("{message}"),
        clause => panic!("{clause}: {message}"),
    }
}

/// Fails the clause unless `$cond` holds; the message says what was
/// expected and what was found.
macro_rules! check {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            $crate::conformance::check::fail(format_args!($($message)+));
        }
    };
}

/// Fails the clause unless `$found == $expected`:
/// "<what>: expected <expected>; found <found>" (both with `Debug`, so
/// only for small values; bytes and indexes have their own checks).
macro_rules! check_eq {
    ($found:expr, $expected:expr, $($what:tt)+) => {{
        let (found, expected) = (&$found, &$expected);
        if found != expected {
            $crate::conformance::check::fail(format_args!(
                "{}: expected {:?}; found {:?}",
                format_args!($($what)+),
                expected,
                found
            ));
        }
    }};
}

/// Fails the clause unless `$found` matches `$pattern` (with an optional
/// `if` guard): "<what>: expected <$expected, in words>; found <found,
/// with Debug>".
macro_rules! check_matches {
    ($found:expr, $pattern:pat, $expected:expr, $($what:tt)+) => {
        match $found {
            $pattern => {}
            found => $crate::conformance::check::fail(format_args!(
                "{}: expected {}; found {:?}",
                format_args!($($what)+),
                $expected,
                found
            )),
        }
    };
    ($found:expr, $pattern:pat if $guard:expr, $expected:expr, $($what:tt)+) => {
        match $found {
            $pattern if $guard => {}
            found => $crate::conformance::check::fail(format_args!(
                "{}: expected {}; found {:?}",
                format_args!($($what)+),
                $expected,
                found
            )),
        }
    };
}

/// The value of `$result`, or a failure of the clause:
/// "<what> must succeed; found Err(..)".
macro_rules! must {
    ($result:expr, $($what:tt)+) => {
        match $result {
            Ok(value) => value,
            Err(e) => $crate::conformance::check::fail(format_args!(
                "{} must succeed; found Err({e:?})",
                format_args!($($what)+)
            )),
        }
    };
}

pub(super) use {check, check_eq, check_matches, must};

/// Fails the clause unless `found` is exactly `expected`; the message
/// gives both lengths and the first byte that differs, never the bytes
/// (a record may be 64 MiB).
#[track_caller]
pub(super) fn check_bytes(found: &[u8], expected: &[u8], what: fmt::Arguments<'_>) {
    if found == expected {
        return;
    }
    let first = found
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(found.len().min(expected.len()));
    fail(format_args!(
        "{what}: expected {} bytes; found {} bytes, differing first at byte {first}",
        expected.len(),
        found.len()
    ));
}

/// An index by run, as the clauses keep it.
pub(super) type Index = BTreeMap<u64, [u8; INDEX_RECORD]>;

/// Fails the clause unless `found` is exactly `expected`; the message
/// gives both sizes and the first run missing, unexpected or changed.
#[track_caller]
pub(super) fn check_index(found: &Index, expected: &Index, what: fmt::Arguments<'_>) {
    if found == expected {
        return;
    }
    let missing = expected.keys().find(|run| !found.contains_key(run));
    let extra = found.keys().find(|run| !expected.contains_key(run));
    let changed = expected
        .iter()
        .find(|&(run, r)| found.get(run).is_some_and(|f| f != r));
    let first = match (missing, extra, changed) {
        (Some(run), _, _) => format!("run {run} missing"),
        (_, Some(run), _) => format!("run {run} never committed"),
        (_, _, Some((run, _))) => format!("run {run} with other bytes"),
        _ => "other records".to_owned(),
    };
    fail(format_args!(
        "{what}: expected {} runs; found {} runs, {first}",
        expected.len(),
        found.len()
    ));
}
