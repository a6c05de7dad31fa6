//! [`PgError`], the failures the storage vocabulary has no name for, and
//! the one mapping of a client error onto [`StorageError`].

use fusee_storage::StorageError;

/// A PostgreSQL failure without a variant of its own in [`StorageError`];
/// it reaches the caller as [`StorageError::Backend`] (downcast to tell
/// the cases apart). No message carries a password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// The connection URL does not parse.
    #[error(
        "not a PostgreSQL connection URL (postgresql://user@host:port/database) or key=value string: {message}"
    )]
    BadUrl {
        /// What the parser said.
        message: String,
    },
    /// An option is out of its range.
    #[error("option {option}: {why}")]
    BadOption {
        /// The option.
        option: &'static str,
        /// What is wrong with its value.
        why: String,
    },
    /// The role lacks a right the storage needs: `CREATE` on the database
    /// (to create the schema at the first open), or rights on the
    /// schema's tables.
    #[error(
        "permission denied while {doing} on {place}: {message} (the role needs CREATE on the database for the first open, then USAGE on the schema and SELECT, INSERT, UPDATE and DELETE on its tables)"
    )]
    PermissionDenied {
        /// What the storage was doing.
        doing: String,
        /// The server, database and schema.
        place: String,
        /// The server's message.
        message: String,
    },
    /// Any other error the server reported.
    #[error("PostgreSQL refused {doing} on {place}: {code} {message}")]
    Server {
        /// What the storage was doing.
        doing: String,
        /// The server, database and schema.
        place: String,
        /// The SQLSTATE code.
        code: String,
        /// The server's message.
        message: String,
    },
}

impl From<PgError> for StorageError {
    fn from(e: PgError) -> Self {
        StorageError::Backend(Box::new(e))
    }
}

/// SQLSTATE of a missing database (`invalid_catalog_name`).
const NO_DATABASE: &str = "3D000";
/// SQLSTATE of a missing right (`insufficient_privilege`).
const NO_RIGHT: &str = "42501";
/// SQLSTATE of a lock not granted within `lock_timeout`
/// (`lock_not_available`).
const LOCK_TIMEOUT: &str = "55P03";

/// SQLSTATE of a session the server ended because it sat idle inside a
/// transaction past `idle_in_transaction_session_timeout`
/// (`idle_in_transaction_session_timeout`): its transaction rolled back.
pub(crate) const IDLE_IN_TRANSACTION: &str = "25P03";

/// Whether a server error says the session is over rather than that the
/// statement was wrong: class 08 (connection exception), 57P01 to 57P05
/// (the server shutting down, restarting after a crash, not accepting
/// connections yet, a dropped database, an idle session ended), 25P03 (an
/// idle transaction ended) and 53300 (too many connections). A server that
/// dies answers statements in flight with these (`57P01 terminating
/// connection due to administrator command`), so they are the same case
/// as a connection that breaks: `Io`.
fn session_over(code: &str) -> bool {
    code.starts_with("08")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "57P04" | "57P05" | IDLE_IN_TRANSACTION | "53300"
        )
}

/// `e`, met while `doing` on `place`, in the storage vocabulary: a missing
/// database is `NotFound`, a lock another session held past the
/// connection's `lock_timeout` `LockTimeout` (what a takeover meets while a
/// stalled owner's transaction holds the shard: try again, as for a live
/// lease; the statement did nothing), a missing right `PermissionDenied`,
/// and the connection refused, lost, timed out or ended by the server
/// (`session_over`: a restart, a shutdown) `Io` of kind
/// `ConnectionAborted` (or the system's kind), because whether the
/// statement took effect is then unknown and the engine treats it as a
/// failed write whose caller may retry. Any other server error is
/// `Server`.
pub(crate) fn map(e: &postgres::Error, doing: &str, place: &str) -> StorageError {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        if session_over(code) {
            return StorageError::io(
                format!("{doing} on {place}"),
                std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    format!("the server ended the session: {code} {}", db.message()),
                ),
            );
        }
        return match code {
            NO_DATABASE => StorageError::NotFound {
                path: place.to_owned(),
            },
            LOCK_TIMEOUT => StorageError::LockTimeout {
                doing: doing.to_owned(),
                place: place.to_owned(),
                message: db.message().to_owned(),
            },
            NO_RIGHT => PgError::PermissionDenied {
                doing: doing.to_owned(),
                place: place.to_owned(),
                message: db.message().to_owned(),
            }
            .into(),
            code => PgError::Server {
                doing: doing.to_owned(),
                place: place.to_owned(),
                code: code.to_owned(),
                message: db.message().to_owned(),
            }
            .into(),
        };
    }
    // The client's own message says what failed (refused, closed, timed
    // out); the kind comes from the operating system's error when there
    // is one.
    let mut kind = std::io::ErrorKind::ConnectionAborted;
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            kind = io.kind();
            break;
        }
        source = s.source();
    }
    let message = match std::error::Error::source(e) {
        Some(s) => format!("{e}: {s}"),
        None => e.to_string(),
    };
    StorageError::io(
        format!("{doing} on {place}"),
        std::io::Error::new(kind, message),
    )
}
