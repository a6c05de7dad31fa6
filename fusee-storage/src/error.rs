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
    /// A shard's log ends before the LSN its seal says was durable
    /// ([`crate::LogStore::begin_seal`]): acknowledged records were lost
    /// (damage, or a disk that dropped writes it had reported durable).
    /// Nothing was changed: no file was cut, deleted or rewritten on the
    /// strength of the seal, so the store can still be examined or
    /// restored. The engine treats it as [`StorageError::Corrupt`].
    #[error(
        "shard {shard}: its log ends at LSN {recovered}, but {seal} records that every record through LSN {sealed} was durable: acknowledged records were lost"
    )]
    LostRecords {
        /// The shard.
        shard: u32,
        /// The seal file (or, for a backend without files, its name).
        seal: String,
        /// The LSN the seal records as durable.
        sealed: Lsn,
        /// The last LSN the log holds.
        recovered: Lsn,
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
    /// An operating-system error. The message says what the backend was
    /// doing, on which file, and what the system said; match the variant
    /// for the [`std::io::Error`] itself.
    ///
    /// Like every variant, its message is complete on its own and no
    /// [`source`](std::error::Error::source) repeats part of it, so an
    /// error printed with its chain says each thing once.
    #[error("I/O error while {context}: {error}")]
    Io {
        /// What the backend was doing (with the file or key involved).
        context: String,
        /// The system's error.
        error: std::io::Error,
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
    /// Another owner took the shard over: for a backend whose shards are
    /// shared by many processes under leases (PostgreSQL), this owner's
    /// lease lapsed and a newer epoch holds the shard. The write was
    /// refused whole (nothing of it was written), the part is latched, and
    /// every later call on the shard's parts is `Fenced` too: the shard
    /// belongs to the new owner, and this process must let it go (and may
    /// open it again, taking it back, only once that owner's lease lapses).
    #[error(
        "shard {shard} was taken over by another owner: this owner's lease (epoch {epoch}) is no longer current, and nothing was written"
    )]
    Fenced {
        /// The shard.
        shard: u32,
        /// The epoch of the lease this owner held.
        epoch: u64,
    },
    /// The storage is held by another owner: another process, or another
    /// open storage (or parts of one that outlived it) in this process. A
    /// storage's lock lives as long as the storage or any part it gave out.
    #[error(
        "{path} is locked by another open storage (in this process or another); close it first"
    )]
    Locked {
        /// The directory or database file that is locked.
        path: String,
    },
    /// The shard's lease is held by another owner (a backend whose shards
    /// are shared by many processes under leases: PostgreSQL). Unlike
    /// [`StorageError::Locked`] nothing in this process has to let go: the
    /// holder renews its lease while it lives, and the shard can be opened
    /// here once that lease lapses (its holder died or stalled: within one
    /// lease time) or its holder releases it. Nothing was written.
    #[error(
        "shard {shard} of {place} is leased by {holder:?} until {until}: another process holds it (or held it and stopped); it can be taken here once that lease lapses or is released"
    )]
    Leased {
        /// The shard.
        shard: u32,
        /// The store (never with a password).
        place: String,
        /// The lease holder's name.
        holder: String,
        /// When the lease ends unless renewed, by the store's clock.
        until: String,
    },
    /// The store was retired: a reshard took it over to copy it elsewhere
    /// (PostgreSQL: `fusee reshard --take-over`), so it takes no more
    /// writes from anyone but that reshard. Permanent: open the store it
    /// moved to. Nothing was written.
    #[error(
        "{place} is retired ({why}): it takes no more writes; open the store it moved to instead"
    )]
    Retired {
        /// The store (never with a password).
        place: String,
        /// Where it moved, in the reshard's words.
        why: String,
    },
    /// An operation waited past the backend's lock timeout for a lock that
    /// another session of the store held, and gave up (PostgreSQL's
    /// `lock_timeout`: a takeover meets it while a stalled owner's
    /// statement still holds the shard's rows). Unlike
    /// [`StorageError::Locked`] nothing in this process holds it: that
    /// session's work ends (or the server ends it), and the same operation
    /// can then be tried again. Nothing was done.
    #[error(
        "{doing} on {place} waited past the lock timeout for a lock another session holds ({message}); nothing was done: it can be tried again once that session's transaction ends (a stalled owner's ends when the server ends its session)"
    )]
    LockTimeout {
        /// What was being done.
        doing: String,
        /// The store (never with a password).
        place: String,
        /// The server's own words.
        message: String,
    },
    /// The path is not a store this backend can open or create: an empty
    /// path, a file where a directory belongs, or a non-empty directory
    /// without a Fusee identity marker (another program's files). Nothing
    /// was written.
    #[error("{path} is not a Fusee store: {why}")]
    NotAStore {
        /// The path given.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The directory holds a store of another backend. Nothing was written.
    #[error("{path} holds a Fusee store of the {found} backend, not {expected}")]
    WrongBackend {
        /// The directory.
        path: String,
        /// The backend its identity marker names.
        found: String,
        /// The backend that was asked to open it.
        expected: &'static str,
    },
    /// A file of a format version this build does not read. Nothing was
    /// written.
    #[error("{file} has format version {found}; this build reads version {supported}")]
    UnsupportedFormat {
        /// The file (or database) whose version is wrong.
        file: String,
        /// The version found.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// Opening an existing store only, and there is none at the path.
    #[error("no Fusee store at {path}")]
    NotFound {
        /// The path given.
        path: String,
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
    /// Any other failure of the backend's engine (RocksDB, redb, ...): the
    /// backend's own error, whose message and source this one forwards.
    /// Downcast it to the backend's error type to tell its cases apart.
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync>),
}

impl StorageError {
    /// An [`StorageError::Io`] error with its context.
    pub fn io(context: impl Into<String>, error: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            error,
        }
    }
}
