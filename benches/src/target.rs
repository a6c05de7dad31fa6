//! What the comparison measures: a [`Subject`] (a backend or a reference)
//! opens a [`Target`], the few operations every measurement is written
//! against once ([`crate::measure`]).
//!
//! The operations are the storage contract's, reduced to what the
//! workload does: append records to a log and flush them as one batch,
//! write run-store frames and commit them, read frames back, restart, and
//! replay a log. A backend maps them onto [`fusee_storage::Storage`]
//! ([`crate::backend`]); the floor onto positioned writes and `fdatasync`
//! ([`crate::floor`]); the SQLite peer onto rows and transactions
//! ([`crate::sqlite`]).

use std::path::Path;

use fusee_core::shard::BlobRef;

use crate::error::TargetError;

/// The result of a [`Target`] call.
pub type TargetResult<T> = std::result::Result<T, TargetError>;

/// Which log of a target a call is for: each log measurement has its own,
/// so recovery reads exactly the records written for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogId {
    /// The log of the latency and batch-throughput measurements.
    Appends,
    /// The log written, then replayed by the recovery measurement.
    Recovery,
}

impl LogId {
    /// A small number naming the log (a shard number for backends, a
    /// `shard` column value for SQLite, a file name suffix for the floor).
    pub fn number(self) -> u32 {
        match self {
            LogId::Appends => 0,
            LogId::Recovery => 1,
        }
    }
}

/// What a subject is in the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A Fusee storage backend: what the user picks between.
    Backend,
    /// The floor: raw positioned writes and `fdatasync` of the same bytes,
    /// what no durable store can beat on this disk.
    Floor,
    /// A peer: the same journal kept the way a user would without Fusee.
    Peer,
}

impl Role {
    /// Lower-case name, for CSV and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Backend => "backend",
            Role::Floor => "floor",
            Role::Peer => "peer",
        }
    }
}

/// The operations every measurement is written against. Calls come in the
/// order [`crate::measure`] documents; a target need not support others.
pub trait Target {
    /// Untimed preparation before `records` records (`bytes` in all) are
    /// appended to `log` (the floor preallocates its file here).
    fn prepare_log(&mut self, log: LogId, records: u64, bytes: u64) -> TargetResult<()>;

    /// Buffers one record for `log`.
    fn append(&mut self, log: LogId, record: &[u8]) -> TargetResult<()>;

    /// Makes every record appended to `log` durable, as one batch.
    fn flush(&mut self, log: LogId) -> TargetResult<()>;

    /// Untimed preparation before `frames` frames (`bytes` in all) are
    /// written.
    fn prepare_frames(&mut self, frames: u64, bytes: u64) -> TargetResult<()>;

    /// Writes one frame and returns its address (readable at once).
    fn put_frame(&mut self, frame: &[u8]) -> TargetResult<BlobRef>;

    /// Makes every frame written so far durable.
    fn commit_frames(&mut self) -> TargetResult<()>;

    /// Replaces `out` with the frame at `at`.
    fn get_frame(&mut self, at: BlobRef, out: &mut Vec<u8>) -> TargetResult<()>;

    /// Closes everything and opens it again, as a restarted process would,
    /// up to (not including) reading the logs.
    fn restart(&mut self) -> TargetResult<()>;

    /// What a restarted process does first: opens `log` and visits every
    /// record it holds, in order. Returns how many it visited.
    fn replay(&mut self, log: LogId, visit: &mut dyn FnMut(&[u8])) -> TargetResult<u64>;
}

/// A backend or reference the comparison can measure.
pub trait Subject {
    /// Short lower-case name, as given to `--backends`.
    fn name(&self) -> &str;

    /// What the subject is in the comparison.
    fn role(&self) -> Role;

    /// How it makes data durable (`fdatasync`, a synced WAL, ...), for the
    /// report.
    fn flush_method(&self) -> String;

    /// Whether what it flushes survives power loss (the memory backend's
    /// does not: it is left out of "best backend" ratios).
    fn durable(&self) -> bool {
        true
    }

    /// Opens a fresh target whose files live in `dir` (an empty directory
    /// the caller created and removes afterwards).
    fn open<'a>(&'a self, dir: &Path) -> TargetResult<Box<dyn Target + 'a>>;
}
