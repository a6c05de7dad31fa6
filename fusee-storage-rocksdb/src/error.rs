//! This backend's own failures: what RocksDB reports that the contract's
//! vocabulary has no variant for, carried inside
//! [`fusee_storage::StorageError::Backend`] (downcast to tell them apart).
//! Everything the vocabulary names is reported as its variant instead: a
//! locked directory is [`fusee_storage::StorageError::Locked`], damage
//! RocksDB detects [`fusee_storage::StorageError::CorruptFile`] (naming the
//! file RocksDB names), another format
//! [`fusee_storage::StorageError::UnsupportedFormat`], an I/O error
//! [`fusee_storage::StorageError::Io`].

use fusee_storage::StorageError;

/// What RocksDB reported, and what the backend was doing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RocksError {
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
/// errors become [`StorageError::Io`], damage RocksDB detected (a block,
/// blob or WAL checksum) [`StorageError::CorruptFile`] naming the file it
/// names, anything else a [`RocksError::Engine`].
pub(crate) fn engine(context: impl Into<String>, e: rocksdb::Error) -> StorageError {
    let kind = e.kind();
    let detail = e.into_string();
    match kind {
        // A file the manifest names is gone: damage, not the system's
        // failure.
        rocksdb::ErrorKind::IOError if detail.contains("No such file") => corruption(
            "the RocksDB database",
            &detail,
            "a file RocksDB's manifest names is missing",
        ),
        rocksdb::ErrorKind::IOError => StorageError::Io {
            context: context.into(),
            error: std::io::Error::other(detail),
        },
        rocksdb::ErrorKind::Corruption => corruption(
            "the RocksDB database",
            &detail,
            "RocksDB found damaged data in it (a checksum or format check failed)",
        ),
        _ => RocksError::Engine {
            context: context.into(),
            detail,
        }
        .into(),
    }
}

/// A [`StorageError::CorruptFile`] saying `what`, naming the file RocksDB's
/// message `detail` names (the first absolute path in it), else
/// `fallback`.
pub(crate) fn corruption(fallback: &str, detail: &str, what: &'static str) -> StorageError {
    let named = detail
        .split(|c: char| c.is_whitespace() || c == ',')
        .find(|word| word.starts_with('/'))
        .map(|word| word.trim_end_matches([':', '.', ')']));
    StorageError::CorruptFile {
        file: named.unwrap_or(fallback).to_string(),
        what,
        at: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corruption_names_the_file_rocksdb_names() {
        let e = corruption(
            "db",
            "Corruption: block checksum mismatch: stored = 1, computed = 2 in /tmp/x/000009.sst offset 0 size 9",
            "damaged",
        );
        assert!(matches!(e, StorageError::CorruptFile { file, .. } if file == "/tmp/x/000009.sst"));
        let e = corruption("db", "Corruption: CURRENT file corrupted", "damaged");
        assert!(matches!(e, StorageError::CorruptFile { file, .. } if file == "db"));
        let e = corruption(
            "db",
            "IO error: While opening /tmp/x/MANIFEST-000005: gone",
            "w",
        );
        assert!(
            matches!(e, StorageError::CorruptFile { file, .. } if file == "/tmp/x/MANIFEST-000005")
        );
    }
}
