//! The schema: its tables, its version, and creating or judging it when a
//! storage opens.
//!
//! # Tables (schema version [`SCHEMA_VERSION`])
//!
//! | table | key | columns | holds |
//! |---|---|---|---|
//! | `format` | `one` (always true) | `backend text`, `version int4` | which backend and schema version made the store |
//! | `shards` | `shard` | `epoch int8`, `owner text`, `expires timestamptz`, `log_base int8`, `log_last int8` | the shard's lease (epoch, holder, end by the server's clock) and its log bounds: the LSN before the first record kept, and an LSN through which the log is known whole (moved by seals, discards and opens, never by a flush); an `owner` beginning with [`RETIRED_PREFIX`] marks the whole store retired ([`crate::retire`]) |
//! | `commits` | `shard` | `value bytea` | the last commit: `fusee-storage-kv`'s commit row (store position, index generation and size, checkpoint, CRC) |
//! | `log` | `shard, last` | `first int8`, `value bytea`, `durable int8` | one row per flush (or per 32 MiB of one): log records `first..=last`, laid out as [`crate::log`] says (each record under its own CRC over the key `seq_key(shard, lsn)`, as [`fusee_storage_kv::layout`] frames it); `durable`, the log's durable LSN when the flush began (`NULL` in rows written before version 4, meaning `first - 1`) |
//! | `store` | `shard, n` | `value bytea` | run-store frames, framed the same way under `seq_key(shard, n)` |
//! | `idx` | `shard, generation, run` | `value bytea` | index records with their CRC under `index_key(shard, generation, run)` |
//! | `inbox` | `shard, id` | `sender int8`, `value bytea` | messages for the shard from shards of other processes ([`crate::PgInbox`]): CRC-32 of [`inbox_key`](crate::inbox::inbox_key)`(shard)` and the message, then the message; `id` from the table's identity sequence, so a message sent again (after its sender crashed before it counted it sent) is another row, never one taken for it |
//!
//! The values are the bytes `fusee-storage-kv`'s layout defines, and their
//! CRCs cover the key the columns spell, so a value read under another
//! shard, LSN, frame or run fails like a changed byte. The log bounds are
//! two columns rather than the layout's log row: a discard moves
//! `log_base` (and `log_last` up to it), a seal `log_last`, each with its
//! own `UPDATE`, so they never overwrite each other's half.
//!
//! # Flushes in flight, and what an open repairs
//!
//! A flush only inserts its row, under a `FOR KEY SHARE` lock on its
//! shard's row that checks the lease's epoch: two flushes of one shard on
//! two connections ([`crate::PgOptions::flushes_in_flight`]) never wait
//! for each other, so one's commit wait overlaps the next one's statement.
//! They may therefore commit in either order, and a crash can leave the
//! later one's row with the earlier one's missing: a gap. The later flush
//! was never acknowledged (the log reports flushes durable in the order
//! they began), so the open that takes the lease deletes every row after
//! the first gap, and moves `log_last` to the end of what is left. A row
//! after a gap is only taken for such a flush if its `durable` column is
//! below the gap (it began before the missing records could have been
//! acknowledged); otherwise acknowledged records are missing and the open
//! fails with `Corrupt` naming the first of them. The open reads only rows
//! past `log_last`: seals and discards move it, so it stays close to the
//! end of the log.
//!
//! # Versions
//!
//! | version | change |
//! |---|---|
//! | 1 | the tables above but `inbox`, and `log` with a row per record (`shard, lsn` → `value`) |
//! | 2 | `inbox` |
//! | 3 | `log` with a row per flush: a flush of 256 records writes one row, not 256 (the server's per-row work, a heap tuple and an index entry each, was most of a group commit's time) |
//! | 4 | `log.durable`, and a flush no longer moves `shards.log_last` (so two flushes of a shard need not take turns on its row): an open finds the log's end from the rows after `log_last` |
//!
//! A version 1 or 2 schema is upgraded in place when a storage of this
//! build opens it, in the transaction that judges the schema: version 1
//! gains the `inbox` table (which no version 1 process reads or writes);
//! the per-record `log` table becomes a per-flush one, each old row a
//! one-record row (`first = last = lsn`, the value its entry: the old
//! value, which is the entry's CRC and record, behind its big-endian
//! length), so every record keeps its CRC; then the `format` row's version
//! moves. The rewrite holds the old table's exclusive lock until it
//! commits, so an older process flushing meanwhile waits and then fails
//! (its table is gone): it latches and acknowledges nothing it did not
//! write. A version 3 schema gains the `durable` column (`NULL` in its
//! rows, which were all written in order). An older process opening the
//! store afterwards is refused (`UnsupportedFormat`): a version 3 process
//! would take `log_last` for the log's end and delete what follows it.
//! Upgrade every process of a store together.
//!
//! A schema of another version is refused at open with
//! [`fusee_storage::StorageError::UnsupportedFormat`]; a schema holding
//! tables but no `format` row with [`fusee_storage::StorageError::NotAStore`];
//! another backend's with [`fusee_storage::StorageError::WrongBackend`].

use fusee_storage::identity::Create;
use fusee_storage::{Result, StorageError};
use postgres::Client;

use crate::error::{PgError, map};

/// The schema version this build creates and reads.
pub const SCHEMA_VERSION: u32 = 4;

/// How a retired store's `shards.owner` begins (see [`crate::retire`]):
/// the rest says where the store moved. No live process has such a name.
pub const RETIRED_PREFIX: &str = "retired: ";

/// Where a retired store went, from its mark (the reason given to
/// `PgStorage::retire`).
pub(crate) fn retired_why(mark: &str) -> &str {
    mark.strip_prefix(RETIRED_PREFIX).unwrap_or(mark)
}

/// The refusal of a store whose shard rows carry `owner`, if that is a
/// retirement mark and not this storage's own name.
pub(crate) fn refusal(place: &str, mark: Option<String>, own: &str) -> Result<()> {
    match mark {
        Some(mark) if mark != own => Err(StorageError::Retired {
            place: place.to_owned(),
            why: retired_why(&mark).to_owned(),
        }),
        _ => Ok(()),
    }
}

/// The backend's name in the `format` row.
pub const BACKEND: &str = "postgres";

/// Whether `schema` is a name the storage accepts: lowercase letters,
/// digits and `_`, not starting with a digit, at most 63 bytes (so it
/// needs no quoting rules beyond double quotes, and PostgreSQL does not
/// truncate it).
pub(crate) fn check_name(schema: &str) -> Result<()> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && !schema.starts_with(|c: char| c.is_ascii_digit())
        && schema
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        return Ok(());
    }
    Err(PgError::BadOption {
        option: "schema",
        why: format!(
            "{schema:?} is not 1 to 63 lowercase ASCII letters, digits and _, starting with a letter or _"
        ),
    }
    .into())
}

/// Every statement the storage runs, with the schema's name in place.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) create: String,
    pub(crate) format: String,
    pub(crate) tables: String,
    pub(crate) insert_shard: String,
    pub(crate) lock_shard: String,
    pub(crate) take_shard: String,
    pub(crate) commit_row: String,
    pub(crate) cleanup: [String; 3],
    pub(crate) log_tail: String,
    pub(crate) set_last: String,
    pub(crate) epoch: String,
    pub(crate) lease_of: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) shards: String,
    pub(crate) retired: String,
    pub(crate) retire: [String; 3],
    pub(crate) flush: String,
    pub(crate) flush_insert: String,
    pub(crate) seal: String,
    pub(crate) discard_base: String,
    pub(crate) discard_log: String,
    pub(crate) log_scan: String,
    pub(crate) frames_insert: String,
    pub(crate) frames_delete: String,
    pub(crate) frame_get: String,
    pub(crate) frames_get: String,
    pub(crate) index_upsert: String,
    pub(crate) index_delete: String,
    pub(crate) index_clear: String,
    pub(crate) index_scan: String,
    pub(crate) commit_put: String,
    /// Creates the `inbox` table: the upgrade from version 1 to 2.
    pub(crate) upgrade_1: String,
    /// Rewrites a version 2 `log` table row per record into this
    /// version's row per flush, and moves the version.
    pub(crate) upgrade_2: String,
    /// Adds `log.durable`: the upgrade from version 3 to 4.
    pub(crate) upgrade_3: String,
    pub(crate) inbox_post: String,
    pub(crate) inbox_read: String,
    pub(crate) inbox_remove: String,
}

impl Sql {
    /// The statements for the store in `schema` (a name [`check_name`]
    /// accepted).
    pub(crate) fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        // EXTERNAL: a flush's row is stored out of line without the
        // compression attempt, which costs CPU on every flush and gains
        // little on records that carry their own encodings.
        let create_log = format!(
            "CREATE TABLE {s}.log (shard int8, last int8, first int8 NOT NULL,
                 value bytea NOT NULL, durable int8, PRIMARY KEY (shard, last));
             ALTER TABLE {s}.log ALTER COLUMN value SET STORAGE EXTERNAL;"
        );
        let create_inbox = format!(
            "CREATE TABLE IF NOT EXISTS {s}.inbox (shard int8,
                 id int8 GENERATED BY DEFAULT AS IDENTITY, sender int8 NOT NULL,
                 value bytea NOT NULL, PRIMARY KEY (shard, id));"
        );
        Self {
            create: format!(
                "CREATE SCHEMA IF NOT EXISTS {s};
                 CREATE TABLE {s}.format (one boolean PRIMARY KEY DEFAULT true CHECK (one),
                     backend text NOT NULL, version int4 NOT NULL);
                 CREATE TABLE {s}.shards (shard int8 PRIMARY KEY, epoch int8 NOT NULL,
                     owner text NOT NULL, expires timestamptz NOT NULL,
                     log_base int8 NOT NULL, log_last int8 NOT NULL);
                 CREATE TABLE {s}.commits (shard int8 PRIMARY KEY, value bytea NOT NULL);
                 {create_log}
                 CREATE TABLE {s}.store (shard int8, n int8, value bytea NOT NULL,
                     PRIMARY KEY (shard, n));
                 CREATE TABLE {s}.idx (shard int8, generation int8, run int8,
                     value bytea NOT NULL, PRIMARY KEY (shard, generation, run));
                 {create_inbox}
                 INSERT INTO {s}.format (backend, version) VALUES ('{BACKEND}', {SCHEMA_VERSION});"
            ),
            format: format!("SELECT backend, version FROM {s}.format"),
            tables: "SELECT count(*) FROM pg_tables WHERE schemaname = $1".to_owned(),
            insert_shard: format!(
                "INSERT INTO {s}.shards (shard, epoch, owner, expires, log_base, log_last)
                 VALUES ($1, 0, '', '-infinity', 0, 0) ON CONFLICT (shard) DO NOTHING"
            ),
            // FOR UPDATE conflicts with the FOR KEY SHARE every fenced
            // write of the previous owner holds: the takeover waits for
            // those in flight, and any later one sees the new epoch.
            // The last column: the store's retirement, if a reshard took it
            // (`crate::retire`); any shard's row carries it.
            lock_shard: format!(
                "SELECT epoch, owner, expires > now(), log_base, log_last, expires::text,
                     (SELECT r.owner FROM {s}.shards r
                      WHERE starts_with(r.owner, '{RETIRED_PREFIX}') LIMIT 1)
                 FROM {s}.shards WHERE shard = $1 FOR UPDATE"
            ),
            take_shard: format!(
                "UPDATE {s}.shards SET epoch = epoch + 1, owner = $2,
                 expires = now() + make_interval(secs => $3) WHERE shard = $1 RETURNING epoch"
            ),
            commit_row: format!("SELECT value FROM {s}.commits WHERE shard = $1"),
            cleanup: [
                format!("DELETE FROM {s}.store WHERE shard = $1 AND n >= $2"),
                format!("DELETE FROM {s}.idx WHERE shard = $1 AND generation <> $2"),
                // Rows past the log's end: flushes after a gap.
                format!("DELETE FROM {s}.log WHERE shard = $1 AND first > $2"),
            ],
            log_tail: format!(
                "SELECT first, last, coalesce(durable, first - 1) FROM {s}.log
                 WHERE shard = $1 AND last > $2 ORDER BY last"
            ),
            set_last: format!("UPDATE {s}.shards SET log_last = $2 WHERE shard = $1"),
            epoch: format!("SELECT epoch FROM {s}.shards WHERE shard = $1 FOR KEY SHARE"),
            lease_of: format!(
                "SELECT epoch, owner, expires > now(), expires::text FROM {s}.shards
                 WHERE shard = $1"
            ),
            // Never a released lease (`expires = '-infinity'`, which only a
            // release writes once a lease was taken): a renewal that read
            // the shard among its leases just before its part was dropped
            // can reach the server after the release, and would otherwise
            // hold the shard for a storage that let it go, for a whole
            // lease.
            renew: format!(
                "UPDATE {s}.shards AS s SET expires = now() + make_interval(secs => $3)
                 FROM unnest($1::int8[], $2::int8[]) AS o(shard, epoch)
                 WHERE s.shard = o.shard AND s.epoch = o.epoch
                   AND s.expires <> '-infinity' RETURNING s.shard"
            ),
            release: format!(
                "UPDATE {s}.shards SET expires = '-infinity' WHERE shard = $1 AND epoch = $2"
            ),
            shards: format!("SELECT shard FROM {s}.shards ORDER BY shard"),
            retired: format!(
                "SELECT owner FROM {s}.shards WHERE starts_with(owner, '{RETIRED_PREFIX}') LIMIT 1"
            ),
            // SHARE ROW EXCLUSIVE waits for every open's transaction (their
            // INSERT and UPDATE) and holds off new ones; FOR UPDATE waits for
            // the fenced writes in flight (their FOR KEY SHARE), as a
            // takeover's does. Shard 0's row is made so that an empty store
            // carries the mark too.
            retire: [
                format!(
                    "LOCK TABLE {s}.shards IN SHARE ROW EXCLUSIVE MODE;
                     INSERT INTO {s}.shards (shard, epoch, owner, expires, log_base, log_last)
                     VALUES (0, 0, '', '-infinity', 0, 0) ON CONFLICT (shard) DO NOTHING"
                ),
                format!("SELECT shard, owner FROM {s}.shards ORDER BY shard FOR UPDATE"),
                format!(
                    "UPDATE {s}.shards SET epoch = epoch + 1, owner = $1, expires = '-infinity'"
                ),
            ],
            // The flush: one statement, so one round trip and its own
            // transaction. The SELECT finds the shard's row only under
            // this owner's epoch, locked FOR KEY SHARE like every fenced
            // write (a takeover's FOR UPDATE waits for it; after one, the
            // re-check finds the new epoch), and the INSERT joins its
            // result: a stale owner writes no record and learns it from
            // the row count. Two flushes' KEY SHARE locks do not conflict,
            // so neither waits for the other's commit.
            flush: format!(
                "WITH s AS (SELECT shard FROM {s}.shards
                            WHERE shard = $1 AND epoch = $2 FOR KEY SHARE)
                 INSERT INTO {s}.log (shard, last, first, value, durable)
                 SELECT s.shard, $3, $4, $5, $6 FROM s"
            ),
            flush_insert: format!(
                "INSERT INTO {s}.log (shard, last, first, value, durable)
                 VALUES ($1, $2, $3, $4, $5)"
            ),
            // Under this owner's epoch only (the UPDATE re-checks it after
            // any lock wait): a stale owner seals nothing.
            seal: format!(
                "UPDATE {s}.shards SET log_last = greatest(log_last, $3)
                 WHERE shard = $1 AND epoch = $2"
            ),
            // The log is whole through a discard's LSN (it is durable), so
            // `log_last` may follow the base.
            discard_base: format!(
                "UPDATE {s}.shards SET log_base = greatest(log_base, $2),
                     log_last = greatest(log_last, $2) WHERE shard = $1"
            ),
            // A row partly discarded stays until its last record is: the
            // base says where the log begins.
            discard_log: format!("DELETE FROM {s}.log WHERE shard = $1 AND last <= $2"),
            log_scan: format!(
                "SELECT first, last, value FROM {s}.log
                 WHERE shard = $1 AND last >= $2 AND first <= $3 ORDER BY last"
            ),
            frames_insert: format!(
                "INSERT INTO {s}.store (shard, n, value)
                 SELECT $1, x.n, x.value FROM unnest($2::int8[], $3::bytea[]) AS x(n, value)
                 ON CONFLICT (shard, n) DO UPDATE SET value = EXCLUDED.value"
            ),
            frames_delete: format!("DELETE FROM {s}.store WHERE shard = $1 AND n = ANY($2)"),
            frame_get: format!("SELECT value FROM {s}.store WHERE shard = $1 AND n = $2"),
            frames_get: format!("SELECT n, value FROM {s}.store WHERE shard = $1 AND n = ANY($2)"),
            // `xmax = 0` on a returned row: it was inserted, not updated,
            // which keeps the index's record count exact without a lookup
            // per record.
            index_upsert: format!(
                "INSERT INTO {s}.idx (shard, generation, run, value)
                 SELECT $1, $2, x.run, x.value FROM unnest($3::int8[], $4::bytea[]) AS x(run, value)
                 ON CONFLICT (shard, generation, run) DO UPDATE SET value = EXCLUDED.value
                 RETURNING xmax = 0"
            ),
            index_delete: format!(
                "DELETE FROM {s}.idx WHERE shard = $1 AND generation = $2 AND run = ANY($3)"
            ),
            index_clear: format!("DELETE FROM {s}.idx WHERE shard = $1 AND generation = $2"),
            index_scan: format!(
                "SELECT run, value FROM {s}.idx WHERE shard = $1 AND generation = $2 AND run >= $3
                 ORDER BY run LIMIT $4"
            ),
            commit_put: format!(
                "INSERT INTO {s}.commits (shard, value) VALUES ($1, $2)
                 ON CONFLICT (shard) DO UPDATE SET value = EXCLUDED.value"
            ),
            upgrade_1: create_inbox.clone(),
            upgrade_2: format!(
                "ALTER TABLE {s}.log RENAME TO log_v2;
                 {create_log}
                 INSERT INTO {s}.log (shard, last, first, value)
                     SELECT shard, lsn, lsn, int4send(length(value)) || value FROM {s}.log_v2;
                 DROP TABLE {s}.log_v2;
                 UPDATE {s}.format SET version = {SCHEMA_VERSION};"
            ),
            upgrade_3: format!(
                "ALTER TABLE {s}.log ADD COLUMN durable int8;
                 UPDATE {s}.format SET version = {SCHEMA_VERSION};"
            ),
            // The rows take their ids (the identity's default) in the
            // order the SELECT hands them over, which ORDER BY fixes to
            // the order given: the target reads its inbox by id, so one
            // sender's messages arrive in the order it sent them.
            // And one notification per target shard, on the store's
            // channel ($4), sent when the transaction commits.
            inbox_post: format!(
                "WITH ins AS (INSERT INTO {s}.inbox (shard, sender, value)
                     SELECT x.shard, $1, x.value
                     FROM unnest($2::int8[], $3::bytea[]) WITH ORDINALITY AS x(shard, value, n)
                     ORDER BY x.n
                     RETURNING shard)
                 SELECT pg_notify($4, t.shard::text) FROM (SELECT DISTINCT shard FROM ins) t"
            ),
            inbox_read: format!(
                "SELECT id, value FROM {s}.inbox WHERE shard = $1 AND id <> ALL($2)
                 ORDER BY id LIMIT $3"
            ),
            // Deleted only under this owner's epoch, read FOR KEY SHARE as
            // the other fenced writes read it (a takeover's FOR UPDATE
            // waits for the statement): a stale owner deletes nothing,
            // and learns it from the first count.
            inbox_remove: format!(
                "WITH s AS (SELECT shard FROM {s}.shards WHERE shard = $1 AND epoch = $2
                            FOR KEY SHARE),
                      d AS (DELETE FROM {s}.inbox i USING s
                            WHERE i.shard = s.shard AND i.id = ANY($3) RETURNING 1)
                 SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM d)"
            ),
        }
    }
}

/// Creates the store's schema when it is missing (and `create` allows),
/// or judges the one there: this version's is `Ok`, another version's
/// `UnsupportedFormat`, another backend's `WrongBackend`, a schema with
/// other tables `NotAStore`. Serialised with any other process opening the
/// same schema by an advisory lock, so two first opens create it once.
pub(crate) fn prepare(
    client: &mut Client,
    schema: &str,
    sql: &Sql,
    create: Create,
    place: &str,
) -> Result<()> {
    let doing = "preparing the schema";
    let err = |e: postgres::Error| map(&e, doing, place);
    let mut tx = client.transaction().map_err(err)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('fusee-storage-postgres'), hashtext($1))",
        &[&schema],
    )
    .map_err(err)?;
    let format = tx
        .query_one(
            "SELECT to_regclass(quote_ident($1) || '.format') IS NOT NULL",
            &[&schema],
        )
        .map_err(err)?;
    if format.try_get::<_, bool>(0).map_err(err)? {
        let rows = tx.query(sql.format.as_str(), &[]).map_err(err)?;
        let Some(row) = rows.first() else {
            return Err(StorageError::NotAStore {
                path: place.to_owned(),
                why: "the schema's format table is empty (damage, or a store an interrupted \
                      `fusee migrate` left incomplete: run it again)",
            });
        };
        let backend: String = row.try_get(0).map_err(err)?;
        let version: i32 = row.try_get(1).map_err(err)?;
        if backend != BACKEND {
            return Err(StorageError::WrongBackend {
                path: place.to_owned(),
                found: backend,
                expected: BACKEND,
            });
        }
        let found = u32::try_from(version).unwrap_or(u32::MAX);
        if (1..=3).contains(&found) {
            // See the module docs. Versions 1 and 2 get this version's
            // `log` table whole; 3 gains its column.
            if found == 1 {
                tx.batch_execute(&sql.upgrade_1).map_err(err)?;
            }
            let upgrade = if found == 3 {
                &sql.upgrade_3
            } else {
                &sql.upgrade_2
            };
            tx.batch_execute(upgrade).map_err(err)?;
            return tx.commit().map_err(err);
        }
        if found != SCHEMA_VERSION {
            return Err(StorageError::UnsupportedFormat {
                file: place.to_owned(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        return Ok(());
    }
    let tables: i64 = tx
        .query_one(sql.tables.as_str(), &[&schema])
        .and_then(|r| r.try_get(0))
        .map_err(err)?;
    if tables > 0 {
        return Err(StorageError::NotAStore {
            path: place.to_owned(),
            why: "the schema holds tables but no Fusee format table",
        });
    }
    if create == Create::Never {
        return Err(StorageError::NotFound {
            path: place.to_owned(),
        });
    }
    tx.batch_execute(&sql.create).map_err(err)?;
    tx.commit().map_err(err)
}
