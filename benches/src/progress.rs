//! Progress lines on stderr while a comparison runs (stdout carries only
//! the result table).

use std::io::Write;
use std::time::Instant;

/// Writes timestamped progress lines to stderr, or nothing when quiet.
#[derive(Debug)]
pub struct Progress {
    start: Instant,
    quiet: bool,
}

impl Progress {
    /// Progress measured from now; `quiet` silences it (tests).
    pub fn new(quiet: bool) -> Self {
        Self {
            start: Instant::now(),
            quiet,
        }
    }

    /// Prints one line prefixed by the seconds since the run began.
    pub fn line(&self, msg: std::fmt::Arguments<'_>) {
        if self.quiet {
            return;
        }
        let secs = self.start.elapsed().as_secs_f64();
        // Progress is best effort: a closed stderr must not stop the run.
        let _ = writeln!(std::io::stderr().lock(), "[{secs:7.1}s] {msg}");
    }

    /// Seconds since the run began.
    pub fn elapsed_secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
}
