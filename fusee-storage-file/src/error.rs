//! Errors of the file backend, each naming the file and offset involved.

use std::io;
use std::path::PathBuf;

/// What went wrong in the file backend.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// An I/O call failed.
    #[error("{op} {path}: {error}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error the system returned.
        error: io::Error,
    },
    /// Bytes on disk are damaged in a way a crash cannot explain.
    #[error("corrupt {file} at offset {at}: {what}")]
    Corrupt {
        /// The file.
        file: String,
        /// What is wrong.
        what: &'static str,
        /// Where.
        at: u64,
    },
    /// A file of a format version this build does not read.
    #[error("{file} has format {found}; this build reads format {supported}")]
    Format {
        /// The file.
        file: String,
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// Another contract error, passed through unchanged.
    #[error(transparent)]
    Storage(#[from] fusee_storage::StorageError),
}

/// Attaches the operation and path to an I/O result.
#[allow(dead_code)] // Used by the backend modules as they land.
pub(crate) trait IoContext<T> {
    fn ctx(self, op: &'static str, path: &std::path::Path) -> Result<T, FileError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: &std::path::Path) -> Result<T, FileError> {
        self.map_err(|error| FileError::Io {
            op,
            path: path.to_path_buf(),
            error,
        })
    }
}
