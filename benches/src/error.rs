//! The one error type of the comparison.

use std::path::PathBuf;

/// What stopped a comparison run, and where.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A subject's call failed while measuring `phase`.
    #[error("{subject}: error during {phase}: {source}")]
    Measure {
        /// The backend or reference measured.
        subject: String,
        /// The measurement running.
        phase: &'static str,
        /// The subject's error (a `StorageError`, a SQLite error, an I/O
        /// error).
        #[source]
        source: TargetError,
    },
    /// A file operation failed.
    #[error("I/O error on {path}: {context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A measurement read back other bytes or counts than it wrote: the
    /// figure would be meaningless, so the run stops.
    #[error("{subject}: {phase} read back wrong data: {what}")]
    Mismatch {
        /// The subject measured.
        subject: String,
        /// The measurement running.
        phase: &'static str,
        /// What differed.
        what: String,
    },
    /// The command line is not understood.
    #[error("usage: {0}")]
    Usage(String),
}

impl BenchError {
    /// An [`BenchError::Io`] error with its context and path.
    pub fn io(context: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            context,
            path: path.into(),
            source,
        }
    }
}

/// An error from a [`crate::target::Target`] call, whatever the subject.
pub type TargetError = Box<dyn std::error::Error + Send + Sync>;

/// The result of every comparison call.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;
