//! This backend's own failures: what redb reports that the contract's
//! vocabulary has no variant for, carried inside
//! [`fusee_storage::StorageError::Backend`] (downcast to tell them apart).
//! Everything the vocabulary names is reported as its variant instead: a
//! locked directory is [`fusee_storage::StorageError::Locked`], a damaged
//! file [`fusee_storage::StorageError::CorruptFile`], another format
//! [`fusee_storage::StorageError::UnsupportedFormat`], an I/O error
//! [`fusee_storage::StorageError::Io`].

use fusee_storage::StorageError;

/// What redb reported, and what the backend was doing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedbError {
    /// redb failed while the backend was doing `context` (redb's message
    /// follows it, once: the error is not also a `source`).
    #[error("redb failed while {context}: {error}")]
    Engine {
        /// What the backend was doing, with the shard or file involved.
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
