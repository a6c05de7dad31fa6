//! Fusee storage backend on PostgreSQL: shards shared by many processes
//! and machines, each held under a lease with an epoch that every write
//! checks, so a stale owner writes nothing
//! ([`fusee_storage::StorageError::Fenced`]); a synchronous standby takes
//! over on failover.
//!
//! ```no_run
//! use fusee_storage::{LogStore, Storage};
//! use fusee_storage_postgres::{PgOptions, PgStorage};
//!
//! let storage = PgStorage::open(&PgOptions::new("postgresql://fusee@db.internal/app"))?;
//! let mut p = storage.open_shard(0)?; // takes shard 0's lease
//! p.log.append(1, b"record")?;
//! assert_eq!(p.log.flush()?, 1); // one statement, checked against the lease's epoch
//! # Ok::<(), fusee_storage::StorageError>(())
//! ```
//!
//! # Shape
//!
//! - **The run store and the checkpoint are `fusee-storage-kv`'s**
//!   ([`fusee_storage_kv::KvRuns`], [`fusee_storage_kv::KvCheckpoint`]) over
//!   this crate's [`fusee_storage_kv::FrameEngine`] and
//!   [`fusee_storage_kv::IndexEngine`]: frames and index records are rows
//!   keyed as the layout keys them, a spill or a streamed base is a fenced
//!   transaction, and a checkpoint commit is one fenced transaction (frames,
//!   releases, the index change, the commit row).
//! - **The log is this crate's own** ([`PgLog`]), not
//!   [`fusee_storage_kv::KvLog`] over a `LogEngine`: the kv log has no split
//!   flush (its flush is the whole write, on the caller's thread), and here
//!   the flush is the cost that matters (a round trip to a server, a WAL
//!   flush and a standby's acknowledgement: hundreds of microseconds) so it
//!   must overlap the next batch's appends. `PgLog::begin_flush` hands the
//!   batch to a ticket that writes it on one of the shard's flusher
//!   connections, in one statement, while the log takes appends. Up to
//!   [`PgOptions::flushes_in_flight`] tickets (2 by default) may be out at
//!   once, each on its own connection, so one flush's commit wait overlaps
//!   the next one's statement; the log reports them durable in the order
//!   they began. They may commit in either order, so a crash can leave a
//!   later flush's row with an earlier one's missing; that later flush was
//!   never acknowledged, and the next open deletes it (each row records
//!   the durable LSN when its flush began, so an open tells such a row
//!   from lost acknowledged records, which are `Corrupt`). The kv log's
//!   spill (writing unflushed records early, cut at the next open) is left
//!   out: here a spill would cost a round trip, and the host flushes every
//!   batch.
//! - **Ownership is a lease per shard** in the `shards` table: an epoch, the
//!   holder's name and an end judged by the server's clock. Opening a shard
//!   takes the lease (when it lapsed, or its holder is this storage's own
//!   owner name) and moves the epoch; a thread renews the leases of open
//!   shards every third of the lease; dropping a shard's parts releases it.
//!   Every write names the epoch: the flush's `SELECT ... WHERE epoch = $e
//!   FOR KEY SHARE` in the same statement as its `INSERT`, other writes'
//!   first in their transaction, which a takeover's `FOR UPDATE` waits
//!   for. A write that finds another epoch writes nothing and returns
//!   `Fenced`; so does every later call on that shard's parts.
//! - **A seal moves `log_last`** (under the epoch): the open reads the
//!   rows after it to find the log's end, and a log found to end before it
//!   is missing acknowledged records (`Corrupt` when read), never a
//!   shorter log without an error.
//! - **A lost connection latches the part**: a flush or commit whose
//!   connection fails may or may not have happened, so the part refuses
//!   writes (`Latched`) until the shard is reopened, and the reopened log
//!   is what the server holds: a prefix containing every acknowledged
//!   record.
//!
//! - **Messages between processes go through an inbox table**
//!   ([`PgInbox`]): a message for a shard another process owns is a row
//!   under that shard, which its owner reads and deletes (under its epoch)
//!   once what it recorded is durable.
//!
//! Options ([`PgOptions`]): the URL, the schema, the pool size, the
//! flushes in flight, the lease, the synchronous-commit level
//! ([`SyncCommit`], what each promises), the owner name. Deployment (synchronous standbys, failover with Patroni or
//! pg_auto_failover, moving shards, what a lease costs in recovery time):
//! `DEPLOYMENT.md` in this crate.
//!
//! # Errors
//!
//! The storage vocabulary's: `Fenced` (another owner took the shard over;
//! also a session the server ended after this process stalled a whole
//! lease inside a transaction, once the lease is no longer this open's),
//! `Leased` (another owner's lease is live: it names the holder and when
//! the lease ends; open the shard again once it lapses), `LockTimeout` (a
//! stalled owner's statement held the shard's rows past `lock_timeout`:
//! nothing was done; try again), `AlreadyOpen` (this storage holds the shard), `NotFound` (no
//! such database, or no store in the schema with
//! [`fusee_storage::identity::Create::Never`]), `UnsupportedFormat`
//! (another schema version), `WrongBackend`, `NotAStore` (a schema with
//! other tables), `Io` (the connection refused, lost or timed out, or
//! ended by the server: a shutdown, a restart or a crash answers the
//! statements in flight with `57P01`, `57P02`, `57P03` or a class `08`
//! code, which are mapped to `Io` too; the statement may or may not have
//! run; the kind is `ConnectionAborted` unless the system gave one),
//! `Latched`, `Closed`, `Corrupt` (a value failed its CRC); and
//! [`PgError`] inside `Backend` for a URL that does not parse, a bad
//! option, a missing right, or another server error (a statement the
//! server refused).
//!
//! A lost connection also empties the storage's pool, and a pooled
//! connection is checked (an empty statement) before a shard open takes
//! it, so a shard reopened after the server came back does not fail on a
//! connection the old server process held.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod inbox;
mod log;
pub mod migration;
mod options;
pub mod retire;
mod schema;
mod shard;
mod shared;
mod storage;

#[cfg(test)]
mod renewal_tests;
#[cfg(test)]
mod retire_tests;
/// The server `FUSEE_PG_URL` names, for the crate's own tests of `what`;
/// `None` (the test prints SKIPPED) without one outside CI.
#[cfg(test)]
fn test_server(what: &str) -> Option<String> {
    let url = std::env::var("FUSEE_PG_URL").unwrap_or_default();
    if url.is_empty() {
        assert!(
            std::env::var_os("CI").is_none(),
            "FUSEE_PG_URL is unset under CI: .ci/run must source scripts/postgres.sh"
        );
        eprintln!("SKIPPED {what}: no PostgreSQL server (FUSEE_PG_URL unset)");
        return None;
    }
    Some(url)
}
#[cfg(test)]
mod stall_tests;

pub use error::PgError;
pub use inbox::{INBOX_READ_ROWS, InboxRow, PgInbox};
pub use log::{PgLog, STATEMENT_BYTES};
pub use options::{DEFAULT_URL, FLUSHES_IN_FLIGHT_MAX, PgOptions, SyncCommit};
pub use schema::{BACKEND, RETIRED_PREFIX, SCHEMA_VERSION};
pub use shard::PgShard;
pub use shared::{ServerPids, ShardLease};
pub use storage::PgStorage;

/// The backend's run-store part.
pub type PgRuns = fusee_storage_kv::KvRuns<PgShard>;
/// The backend's checkpoint part.
pub type PgCheckpoint = fusee_storage_kv::KvCheckpoint<PgShard>;

/// The names the backend gives its parts and values in errors.
pub(crate) static NAMES: fusee_storage_kv::Names = fusee_storage_kv::names!("postgres");
