//! The one error type every backend returns.

use fusee_core::record::Lsn;
use fusee_core::shard::BlobRef;

/// The result of every storage call.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// What went wrong in a storage call, and where.
///
/// Backends map their own failures onto these variants so the engine can
/// react without knowing the backend: `Corrupt` and `Io` end the shard,
/// `Latched` says a part must be reopened, the caller-error variants
/// (`LsnGap`, `TooLarge`, `Misuse`, ...) leave the part usable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// Stored bytes failed a check: `what` names the structure (a segment, a
    /// frame, a checkpoint slot), `at` its position (byte offset or LSN, as
    /// `what` says).
    #[error("corrupt {what} at {at}")]
    Corrupt {
        /// The structure that failed its check.
        what: &'static str,
        /// Where: a byte offset or an LSN, as `what` says.
        at: u64,
    },
    /// Stored bytes in a named file failed a check (for backends that keep
    /// their data in files they can name): the engine treats it exactly as
    /// [`StorageError::Corrupt`].
    #[error("corrupt {file} at offset {at}: {what}")]
    CorruptFile {
        /// The damaged file.
        file: String,
        /// What failed its check.
        what: &'static str,
        /// The byte offset in the file.
        at: u64,
    },
    /// A record or frame longer than the limit ([`crate::MAX_RECORD`],
    /// [`crate::MAX_FRAME`]); nothing was written.
    #[error("{what} of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A log read asked for records already discarded.
    #[error("log records before LSN {first_kept} were discarded")]
    Trimmed {
        /// The first LSN the log still holds.
        first_kept: Lsn,
    },
    /// A log append skipped or repeated an LSN; nothing was written.
    #[error("log append out of order: expected LSN {expected}, got {got}")]
    LsnGap {
        /// The only LSN the log accepts next.
        expected: Lsn,
        /// The LSN the caller gave.
        got: Lsn,
    },
    /// A log read started after the log's last record.
    #[error("log read after LSN {after}, beyond the last record {last}")]
    BeyondEnd {
        /// The LSN given.
        after: Lsn,
        /// The log's last LSN.
        last: Lsn,
    },
    /// A run-store reference names no live frame (never appended, rolled
    /// back by a crash, released, or with the wrong length).
    #[error("no frame at offset {} with length {}", blob.offset, blob.len)]
    UnknownBlob {
        /// The reference given.
        blob: BlobRef,
    },
    /// An operating-system error.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What the backend was doing (with the file or key involved).
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The storage was closed, or crashed, after this handle or part was
    /// obtained.
    #[error("{what} used after the storage was closed")]
    Closed {
        /// Which handle or part was used.
        what: &'static str,
    },
    /// A flush or commit of this part failed earlier: the part refuses
    /// writes until the shard is reopened, because data the failed call
    /// covered must never be treated as safe.
    #[error("{what} refuses writes after a failed flush or commit; reopen the shard")]
    Latched {
        /// Which part is latched.
        what: &'static str,
    },
    /// The shard's parts are already held by someone (each shard is opened
    /// by at most one owner at a time).
    #[error("shard {shard} is already open")]
    AlreadyOpen {
        /// The shard.
        shard: u32,
    },
    /// A call that breaks the contract's calling rules (a partial index
    /// record, a commit of a base that was never begun, discarding unflushed
    /// records, a run store from another shard); nothing was changed.
    #[error("invalid call to {call}: {why}")]
    Misuse {
        /// The method called.
        call: &'static str,
        /// The rule it broke.
        why: &'static str,
    },
    /// Any other failure of the backend's engine (RocksDB, redb, ...).
    #[error("backend error: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl StorageError {
    /// An [`StorageError::Io`] error with its context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
