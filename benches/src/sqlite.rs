//! The SQLite peer: the same journal kept the way embedded workflow engines
//! on SQLite keep their history, one row per record.
//!
//! SQLite is the crate's bundled build, in WAL mode with
//! `synchronous=FULL` (the WAL is `fsync`ed at every commit, so a committed
//! transaction survives power loss). Schema:
//!
//! ```sql
//! CREATE TABLE journal(shard INTEGER NOT NULL, lsn INTEGER NOT NULL,
//!                      body BLOB NOT NULL, PRIMARY KEY (shard, lsn)) WITHOUT ROWID;
//! CREATE TABLE store(id INTEGER PRIMARY KEY, frame BLOB NOT NULL);
//! ```
//!
//! The journal is clustered on its key (`WITHOUT ROWID`: rows of about
//! 100 bytes are the case SQLite recommends it for), the fairest layout for
//! appending in key order and reading a shard back in order; a table with a
//! row ID and a separate key index would pay an extra B-tree per row.
//!
//! A log batch is one transaction of one `INSERT` per record; a flush is its
//! `COMMIT`. Frames are rows of `store` (the address's offset is the row
//! ID), committed every [`crate::plan::FRAMES_PER_COMMIT`] frames. Replay
//! opens a new connection and selects the shard's rows in LSN order.
//! Statements are prepared once and cached.

use std::path::{Path, PathBuf};

use fusee_core::shard::BlobRef;
use rusqlite::{Connection, params};

use crate::target::{LogId, Role, Subject, Target, TargetResult};

/// The SQLite peer as a comparison subject.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sqlite;

impl Subject for Sqlite {
    fn name(&self) -> &str {
        "sqlite"
    }

    fn role(&self) -> Role {
        Role::Peer
    }

    fn flush_method(&self) -> String {
        format!(
            "SQLite {} (bundled), WAL, synchronous=FULL: fsync at COMMIT",
            rusqlite::version()
        )
    }

    fn open<'a>(&'a self, dir: &Path) -> TargetResult<Box<dyn Target + 'a>> {
        let path = dir.join("peer.sqlite");
        let conn = connect(&path)?;
        conn.execute_batch(
            "CREATE TABLE journal(shard INTEGER NOT NULL, lsn INTEGER NOT NULL, \
                                  body BLOB NOT NULL, PRIMARY KEY (shard, lsn)) WITHOUT ROWID;
             CREATE TABLE store(id INTEGER PRIMARY KEY, frame BLOB NOT NULL);",
        )?;
        Ok(Box::new(SqliteTarget {
            path,
            conn: Some(conn),
            lsn: [0, 0],
            in_tx: false,
        }))
    }
}

/// A connection in the peer's durability mode.
fn connect(path: &Path) -> TargetResult<Connection> {
    let conn = Connection::open(path)?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!("SQLite refused WAL mode (got {mode})").into());
    }
    conn.execute_batch("PRAGMA synchronous=FULL;")?;
    Ok(conn)
}

struct SqliteTarget {
    path: PathBuf,
    conn: Option<Connection>,
    /// The last LSN inserted per log.
    lsn: [u64; 2],
    /// Whether a transaction is open (one batch of appends or frames).
    in_tx: bool,
}

impl SqliteTarget {
    fn conn(&self) -> TargetResult<&Connection> {
        self.conn.as_ref().ok_or_else(|| "connection closed".into())
    }

    fn begin(&mut self) -> TargetResult<()> {
        if !self.in_tx {
            self.conn()?.execute_batch("BEGIN")?;
            self.in_tx = true;
        }
        Ok(())
    }

    fn commit(&mut self) -> TargetResult<()> {
        if self.in_tx {
            self.in_tx = false;
            self.conn()?.execute_batch("COMMIT")?;
        }
        Ok(())
    }
}

impl Target for SqliteTarget {
    fn prepare_log(&mut self, _log: LogId, _records: u64, _bytes: u64) -> TargetResult<()> {
        Ok(())
    }

    fn append(&mut self, log: LogId, record: &[u8]) -> TargetResult<()> {
        self.begin()?;
        let i = log.number() as usize;
        let lsn = self.lsn[i] + 1;
        self.conn()?
            .prepare_cached("INSERT INTO journal(shard, lsn, body) VALUES (?1, ?2, ?3)")?
            .execute(params![log.number(), lsn, record])?;
        self.lsn[i] = lsn;
        Ok(())
    }

    fn flush(&mut self, _log: LogId) -> TargetResult<()> {
        self.commit()
    }

    fn prepare_frames(&mut self, _frames: u64, _bytes: u64) -> TargetResult<()> {
        Ok(())
    }

    fn put_frame(&mut self, frame: &[u8]) -> TargetResult<BlobRef> {
        self.begin()?;
        let conn = self.conn()?;
        conn.prepare_cached("INSERT INTO store(frame) VALUES (?1)")?
            .execute(params![frame])?;
        let offset = u64::try_from(conn.last_insert_rowid())?;
        let len = u32::try_from(frame.len())?;
        Ok(BlobRef { offset, len })
    }

    fn commit_frames(&mut self) -> TargetResult<()> {
        self.commit()
    }

    fn get_frame(&mut self, at: BlobRef, out: &mut Vec<u8>) -> TargetResult<()> {
        let id = i64::try_from(at.offset)?;
        self.conn()?
            .prepare_cached("SELECT frame FROM store WHERE id = ?1")?
            .query_row(params![id], |row| {
                let blob = row.get_ref(0)?.as_blob()?;
                out.clear();
                out.extend_from_slice(blob);
                Ok(())
            })?;
        Ok(())
    }

    fn restart(&mut self) -> TargetResult<()> {
        self.commit()?;
        if let Some(conn) = self.conn.take() {
            conn.close().map_err(|(_, e)| e)?;
        }
        Ok(())
    }

    fn replay(&mut self, log: LogId, visit: &mut dyn FnMut(&[u8])) -> TargetResult<u64> {
        if self.conn.is_none() {
            self.conn = Some(connect(&self.path)?);
        }
        let conn = self.conn()?;
        let mut stmt = conn.prepare("SELECT body FROM journal WHERE shard = ?1 ORDER BY lsn")?;
        let mut rows = stmt.query(params![log.number()])?;
        let mut n = 0u64;
        while let Some(row) = rows.next()? {
            visit(row.get_ref(0)?.as_blob()?);
            n += 1;
        }
        Ok(n)
    }
}
