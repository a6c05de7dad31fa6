//! Retiring a store that processes still run on, so that it can be copied
//! elsewhere (a reshard into another schema) with no write of theirs
//! landing after the copy read it.
//!
//! [`PgStorage::retire`] does, in one transaction:
//!
//! 1. `LOCK TABLE shards IN SHARE ROW EXCLUSIVE MODE`: waits for every
//!    shard open (take) in progress, and holds off new ones until it
//!    commits;
//! 2. `SELECT ... FOR UPDATE` of every shard row: waits for the fenced
//!    writes in flight (flushes, commits, inbox removals hold `FOR KEY
//!    SHARE`), as a takeover does;
//! 3. moves every shard's epoch by one, sets its `owner` to
//!    [`RETIRED_PREFIX`] and the reason, and its lease's end to
//!    `-infinity`.
//!
//! After the commit every write of a process that held a shard finds
//! another epoch and is `Fenced` (its engine stops the shard and answers
//! `NotOwner`), and every open, of the store or of a shard (including one
//! no process had opened yet: the mark is read from any row), is refused
//! with [`StorageError::Retired`], for good, whatever the lease times. The
//! one exception is a storage opened under the mark itself as its owner
//! name ([`crate::PgOptions::owner`]): the reshard that retired the store
//! reads it that way, and its opens and releases keep the mark (they
//! change the lease's epoch and end, never the owner).
//!
//! Retiring again with the same reason is allowed (a reshard run again
//! after a crash); with another it is refused, naming the first.
//!
//! | state | `shards.owner` of every row |
//! |---|---|
//! | live | the holder's name, or `''` |
//! | retired | `retired: ` and where the store went |
//!
//! Processes of a build without this module do not know the mark: they
//! would take a retired shard once its lease lapsed. Upgrade every process
//! before retiring a store.

use fusee_storage::{Result, StorageError};
use fusee_storage_kv::lock;

use crate::PgStorage;
use crate::error::map;
use crate::schema::{RETIRED_PREFIX, refusal, retired_why};

/// The owner name a store retired for `why` carries in every shard row.
pub fn retired_owner(why: &str) -> String {
    format!("{RETIRED_PREFIX}{why}")
}

/// How many times a retirement is tried again after the server broke a
/// deadlock by ending it: a process's log discard holds its shard's row
/// `FOR KEY SHARE` and then updates it, which the table lock held here
/// makes it wait for while the retirement waits for its row, and the
/// server ends one of the two (after `deadlock_timeout`, 1 s by default).
/// When it ends the process's, that process was being fenced anyway.
const RETIRE_TRIES: u32 = 5;

/// Why one try of a retirement failed.
enum Failed {
    /// The server ended it to break a deadlock (`40P01`): tried again.
    Deadlock(postgres::Error),
    /// Another server error.
    Server(postgres::Error),
    /// The store's own answer.
    Refused(StorageError),
}

impl From<postgres::Error> for Failed {
    fn from(e: postgres::Error) -> Self {
        if e.code() == Some(&postgres::error::SqlState::T_R_DEADLOCK_DETECTED) {
            Self::Deadlock(e)
        } else {
            Self::Server(e)
        }
    }
}

impl PgStorage {
    /// Retires the store (module docs): every shard's lease is taken from
    /// whoever holds it, so their writes from now on are `Fenced`, and
    /// every later open except under [`retired_owner`]`(why)` is refused
    /// with [`StorageError::Retired`]. Returns the shards the store had
    /// rows for. One transaction (tried again if the server ends it to
    /// break a deadlock: `RETIRE_TRIES`); it waits for the writes in
    /// flight.
    ///
    /// Errors: a store already retired for another reason (`Retired`,
    /// naming it); this storage holding shards open (`Misuse`: close
    /// them first, or they would be fenced too); the server's.
    pub fn retire(&self, why: &str) -> Result<Vec<u32>> {
        let sh = &*self.shared;
        sh.check_open("postgres storage")?;
        if !lock(&sh.leases).is_empty() {
            return Err(StorageError::Misuse {
                call: "PgStorage::retire",
                why: "this storage holds shards open; drop their parts first",
            });
        }
        let owner = retired_owner(why);
        let mut conn = sh.connect()?;
        let mut tries = 0;
        loop {
            match self.retire_once(&mut conn.client, &owner) {
                Err(Failed::Deadlock(_)) if tries < RETIRE_TRIES => tries += 1,
                Err(Failed::Deadlock(e) | Failed::Server(e)) => {
                    return Err(map(&e, "retiring the store", &sh.place));
                }
                Err(Failed::Refused(e)) => return Err(e),
                Ok(shards) => return Ok(shards),
            }
        }
    }

    /// One try of [`PgStorage::retire`]'s transaction.
    fn retire_once(
        &self,
        client: &mut postgres::Client,
        owner: &str,
    ) -> std::result::Result<Vec<u32>, Failed> {
        let sh = &*self.shared;
        let mut tx = client.transaction()?;
        let [lock_table, lock_rows, take] = &sh.sql.retire;
        tx.batch_execute(lock_table)?;
        let rows = tx.query(lock_rows.as_str(), &[])?;
        let mut shards = Vec::with_capacity(rows.len());
        for row in &rows {
            let shard: i64 = row.try_get(0)?;
            let holder: String = row.try_get(1)?;
            if holder.starts_with(RETIRED_PREFIX) {
                refusal(&sh.place, Some(holder), owner).map_err(Failed::Refused)?;
            }
            shards.push(u32::try_from(shard).map_err(|_| {
                Failed::Refused(StorageError::Corrupt {
                    what: "postgres shard row: shard number out of range",
                    at: shard as u64,
                })
            })?);
        }
        tx.execute(take.as_str(), &[&owner])?;
        tx.commit()?;
        Ok(shards)
    }

    /// Why the store is retired (the reason [`PgStorage::retire`] was
    /// given), or `None` for a live store. One query.
    pub fn retired(&self) -> Result<Option<String>> {
        let sh = &*self.shared;
        sh.check_open("postgres storage")?;
        let mut conn = sh.take_conn()?;
        let mark = sh.retirement_mark(&mut conn);
        sh.give_back(conn);
        Ok(mark?.map(|m| retired_why(&m).to_owned()))
    }
}
