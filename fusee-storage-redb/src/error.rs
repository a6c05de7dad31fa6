//! This backend's own failures, carried inside
//! [`fusee_storage::StorageError::Backend`] so callers can tell them apart
//! by downcasting.

use std::path::PathBuf;

use fusee_storage::StorageError;

/// Why a redb storage could not be opened, or what redb reported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedbError {
    /// Another process (or another storage in this process) holds the
    /// database file open.
    #[error("{path}: the database is already open in another process or storage")]
    Locked {
        /// The database file.
        path: PathBuf,
    },
    /// The file is not a redb database, or is damaged beyond redb's repair.
    #[error("{path}: not a readable redb database: {detail}")]
    NotRedb {
        /// The database file.
        path: PathBuf,
        /// What redb reported.
        detail: String,
    },
    /// The file is a redb database of an older redb file format that this
    /// build cannot read without an upgrade.
    #[error("{path}: redb file format {version} needs an upgrade before this build can open it")]
    OldRedbFormat {
        /// The database file.
        path: PathBuf,
        /// The file format version found.
        version: u8,
    },
    /// The file is a redb database written by something other than Fusee.
    #[error("{path}: a redb database that is not a Fusee storage (no or foreign format marker)")]
    Foreign {
        /// The database file.
        path: PathBuf,
    },
    /// The file was written by a newer Fusee with a layout this build does
    /// not know.
    #[error(
        "{path}: Fusee redb layout version {found} is newer than {supported}, the newest this build reads"
    )]
    NewerFormat {
        /// The database file.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// redb failed while the backend was doing `context`.
    #[error("redb failed while {context}: {error}")]
    Engine {
        /// What the backend was doing (with the shard involved).
        context: String,
        /// redb's error.
        error: redb::Error,
    },
}

impl From<RedbError> for StorageError {
    fn from(e: RedbError) -> Self {
        StorageError::Backend(Box::new(e))
    }
}

/// Maps a redb failure during `context` onto the contract's error: I/O
/// errors stay [`StorageError::Io`], anything else is a [`RedbError::Engine`].
pub(crate) fn engine(context: impl Into<String>, e: impl Into<redb::Error>) -> StorageError {
    match e.into() {
        redb::Error::Io(error) => StorageError::Io {
            context: context.into(),
            error,
        },
        error => RedbError::Engine {
            context: context.into(),
            error,
        }
        .into(),
    }
}
