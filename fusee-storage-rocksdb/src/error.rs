//! This backend's own failures, carried inside
//! [`fusee_storage::StorageError::Backend`] so callers can tell them apart
//! by downcasting.

use std::path::PathBuf;

use fusee_storage::StorageError;

/// Why a RocksDB storage could not be opened, or what RocksDB reported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RocksError {
    /// Another process (or another storage in this process) holds the
    /// database open: RocksDB's `LOCK` file is taken.
    #[error("{path}: the database is already open in another process or storage ({detail})")]
    Locked {
        /// The database directory.
        path: PathBuf,
        /// What RocksDB reported.
        detail: String,
    },
    /// The directory does not hold a readable RocksDB database (garbage
    /// files, a damaged manifest, or a format this RocksDB cannot read).
    #[error("{path}: not a readable RocksDB database: {detail}")]
    NotRocksDb {
        /// The database directory.
        path: PathBuf,
        /// What RocksDB reported.
        detail: String,
    },
    /// The directory holds a RocksDB database written by something other
    /// than Fusee (other column families, or data without our marker).
    #[error("{path}: a RocksDB database that is not a Fusee storage ({why})")]
    Foreign {
        /// The database directory.
        path: PathBuf,
        /// What gave it away.
        why: String,
    },
    /// The database was written by a newer Fusee with a layout this build
    /// does not know.
    #[error(
        "{path}: Fusee RocksDB layout version {found} is newer than {supported}, the newest this build reads"
    )]
    NewerFormat {
        /// The database directory.
        path: PathBuf,
        /// The version in the database.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// RocksDB failed while the backend was doing `context`.
    #[error("RocksDB failed while {context}: {detail}")]
    Engine {
        /// What the backend was doing (with the shard involved).
        context: String,
        /// RocksDB's message (its status code and text).
        detail: String,
    },
}

impl From<RocksError> for StorageError {
    fn from(e: RocksError) -> Self {
        StorageError::Backend(Box::new(e))
    }
}

/// Maps a RocksDB failure during `context` onto the contract's error: I/O
/// errors become [`StorageError::Io`], anything else a
/// [`RocksError::Engine`].
pub(crate) fn engine(context: impl Into<String>, e: rocksdb::Error) -> StorageError {
    match e.kind() {
        rocksdb::ErrorKind::IOError => StorageError::Io {
            context: context.into(),
            error: std::io::Error::other(e.into_string()),
        },
        _ => RocksError::Engine {
            context: context.into(),
            detail: e.into_string(),
        }
        .into(),
    }
}
