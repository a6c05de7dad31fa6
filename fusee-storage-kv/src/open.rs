//! Opening a shard: what its meta rows say ([`ShardState`]), what the
//! open-time cleanup deletes ([`Cleanup`]), and the bookkeeping a storage
//! keeps across shards ([`OpenShards`], [`FaultSwitches`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use fusee_core::record::Lsn;
use fusee_storage::{Recovered, Result, ShardParts, Storage, StorageError};

use crate::layout::{CommitRow, LogRow};
use crate::{FrameEngine, IndexEngine, KvCheckpoint, KvLog, KvRuns, LogEngine, Names};

/// How many points inside a commit a backend's `crash_in_commit` can crash
/// at: 0 before the write is built, 1 with it built but never written, 2
/// after it is durable, before the commit returns.
pub const COMMIT_CRASH_POINTS: u32 = 3;

/// A shard's meta rows as found at open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardState {
    /// The log row (a default one if the shard is new).
    pub log: LogRow,
    /// Whether the shard had no log row: the cleanup's write must create it.
    pub new_log: bool,
    /// The last commit, if any.
    pub commit: Option<CommitRow>,
    /// The shard's seal file, once [`crate::ShardHandle::check_seal`]
    /// checked it against the log row (`None`: the log part seals
    /// nothing, as on a read-only storage).
    pub seal: Option<crate::SealSlot>,
}

/// What opening a shard deletes so that it holds exactly its last commit
/// and its flushed log, whatever reached stable storage outside a commit or
/// flush (spilled frames, streamed bases, spilled log records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cleanup {
    /// Store frames numbered this or more (the committed position on).
    pub frames_from: u64,
    /// Index rows of every generation but this one (the committed one).
    pub keep_generation: u32,
    /// Log records with this LSN or more (past the last flushed one);
    /// `None` if the last flushed LSN is `u64::MAX`.
    pub log_from: Option<Lsn>,
}

impl ShardState {
    /// Decodes the stored log and commit rows of `shard` (either may be
    /// absent); `Corrupt` naming the row if one is damaged.
    pub fn decode(
        log: Option<&[u8]>,
        commit: Option<&[u8]>,
        shard: u32,
        names: &Names,
    ) -> Result<Self> {
        let commit = commit
            .map(|v| CommitRow::decode(v, shard, names.commit_row))
            .transpose()?;
        Ok(match log {
            Some(v) => Self {
                log: LogRow::decode(v, shard, names.log_row)?,
                new_log: false,
                commit,
                seal: None,
            },
            None => Self {
                log: LogRow::default(),
                new_log: true,
                commit,
                seal: None,
            },
        })
    }

    /// Checks what the rows' CRCs cannot: their keys. A CRC covers a row's
    /// value only, so a damaged key moves a row where no lookup finds it,
    /// and the shard would open as new or never committed, the cleanup
    /// deleting what the row kept. `stray_meta` says whether the shard has
    /// a meta row under another tag than the log's and the commit's;
    /// `holds_rows` whether it has any log record, frame or index row
    /// (asked only when the log row is missing: a shard is given its log
    /// row at its first open, before anything else is written to it).
    /// `Corrupt` for a stray meta row, or for a shard without a log row
    /// that has a commit row or any other row.
    ///
    /// What stays undetectable: a commit row whose shard bytes are damaged
    /// (the shard then reads as never committed; the other shard the row
    /// moved to fails this check when opened).
    pub fn check_keys(
        &self,
        stray_meta: bool,
        holds_rows: impl FnOnce() -> Result<bool>,
        shard: u32,
        names: &Names,
    ) -> Result<()> {
        let corrupt = |what| StorageError::Corrupt {
            what,
            at: u64::from(shard),
        };
        if stray_meta {
            return Err(corrupt(names.meta_row));
        }
        if self.new_log && (self.commit.is_some() || holds_rows()?) {
            return Err(corrupt(names.log_row));
        }
        Ok(())
    }

    /// The store's committed position (0 before the first commit).
    pub fn position(&self) -> u64 {
        self.commit.as_ref().map_or(0, |c| c.position)
    }

    /// The committed index generation (0 before the first commit).
    pub fn generation(&self) -> u32 {
        self.commit.as_ref().map_or(0, |c| c.generation)
    }

    /// How many records the committed generation holds.
    pub fn records(&self) -> u64 {
        self.commit.as_ref().map_or(0, |c| c.records)
    }

    /// What the open-time cleanup deletes.
    pub fn cleanup(&self) -> Cleanup {
        Cleanup {
            frames_from: self.position(),
            keep_generation: self.generation(),
            log_from: self.log.last.checked_add(1),
        }
    }

    /// What the shard's owner recovers.
    pub fn recovered(&self) -> Recovered {
        Recovered {
            checkpoint: self.commit.as_ref().map(|c| c.checkpoint.clone()),
            index_records: self.records(),
            store_position: self.position(),
        }
    }
}

/// Checks one row of the meta table, read when the storage opens. Every
/// row's CRC covers its key ([`crate::layout`]), so a row whose key was
/// damaged (moved to another shard or tag) fails here, where a shard's own
/// lookups would simply not find it (its shard then looking new or never
/// committed). Returns the shard of a log row (so the caller can list
/// shards), `None` for a commit row; `Corrupt` for a damaged row, a key of
/// the wrong length or an unknown tag. The caller skips its own format
/// row.
pub fn check_meta_row(key: &[u8], value: &[u8], names: &Names) -> Result<Option<u32>> {
    let Some((shard, tag)) = crate::layout::meta_of(key) else {
        return Err(StorageError::Corrupt {
            what: names.meta_key,
            at: key.len() as u64,
        });
    };
    match tag {
        crate::layout::TAG_LOG => LogRow::decode(value, shard, names.log_row).map(|_| Some(shard)),
        crate::layout::TAG_COMMIT => {
            CommitRow::decode(value, shard, names.commit_row).map(|_| None)
        }
        _ => Err(StorageError::Corrupt {
            what: names.meta_row,
            at: u64::from(shard),
        }),
    }
}

/// Judges the format row of the database `file` (`None`: there is none)
/// against this build's `magic` and [`crate::layout::FORMAT_VERSION`]: `Ok`
/// for this version, [`StorageError::UnsupportedFormat`] for another,
/// [`StorageError::CorruptFile`] for a missing row or another program's.
/// (A store's database is built with its format row, so a missing one is
/// damage.)
pub fn check_format_row(
    value: Option<&[u8]>,
    magic: [u8; 8],
    file: &std::path::Path,
) -> Result<()> {
    let corrupt = |what| StorageError::CorruptFile {
        file: file.display().to_string(),
        what,
        at: 0,
    };
    match value.map(|v| crate::layout::format_version(magic, v)) {
        Some(Some(crate::layout::FORMAT_VERSION)) => Ok(()),
        Some(Some(found)) => Err(StorageError::UnsupportedFormat {
            file: file.display().to_string(),
            found,
            supported: crate::layout::FORMAT_VERSION,
        }),
        Some(None) => Err(corrupt("the Fusee format row is not Fusee's")),
        None => Err(corrupt("no Fusee format row in the database")),
    }
}

/// The parts of a shard opened on `engine` (one open of one shard, cloned
/// into each part) whose rows, after the open-time cleanup, are `state`.
pub fn shard_parts<S, E>(engine: E, state: &ShardState, names: &'static Names) -> ShardParts<S>
where
    E: LogEngine + FrameEngine + IndexEngine<Frames = E> + Clone,
    S: Storage<Log = KvLog<E>, Runs = KvRuns<E>, Checkpoint = KvCheckpoint<E>>,
{
    ShardParts {
        log: KvLog::new(engine.clone(), state.log, names).with_seal(state.seal.clone()),
        runs: KvRuns::new(engine.clone(), state.position(), names),
        checkpoint: KvCheckpoint::new(engine, state.generation(), state.records(), names),
        recovered: state.recovered(),
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the
/// sets it guards are consistent between statements).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The shards of a storage whose parts are alive: each has one owner.
#[derive(Debug, Default)]
pub struct OpenShards(Mutex<HashSet<u32>>);

impl OpenShards {
    /// Marks `shard` open; `AlreadyOpen` if it is.
    pub fn claim(&self, shard: u32) -> Result<()> {
        if !lock(&self.0).insert(shard) {
            return Err(StorageError::AlreadyOpen { shard });
        }
        Ok(())
    }

    /// Marks `shard` closed (its last part was dropped).
    pub fn release(&self, shard: u32) {
        lock(&self.0).remove(&shard);
    }
}

/// Faults armed for one shard.
#[derive(Debug, Default)]
struct Faults {
    fail_next_flush: bool,
    fail_next_commit: bool,
    fail_next_base_write: bool,
    crash_at: Option<u32>,
}

/// Faults armed per shard by tests and the conformance harness: each fires
/// once.
#[derive(Debug, Default)]
pub struct FaultSwitches(Mutex<HashMap<u32, Faults>>);

impl FaultSwitches {
    /// The next durable log write of `shard` fails.
    pub fn arm_flush(&self, shard: u32) {
        lock(&self.0).entry(shard).or_default().fail_next_flush = true;
    }

    /// The next commit of `shard` fails before writing anything.
    pub fn arm_commit(&self, shard: u32) {
        lock(&self.0).entry(shard).or_default().fail_next_commit = true;
    }

    /// The next write of a streamed base of `shard` (a spill, or clearing
    /// an abandoned base) fails before writing anything.
    pub fn arm_base_write(&self, shard: u32) {
        lock(&self.0).entry(shard).or_default().fail_next_base_write = true;
    }

    /// The next commit of `shard` stops at crash point `step` (of
    /// [`COMMIT_CRASH_POINTS`]).
    pub fn arm_crash(&self, shard: u32, step: u32) {
        lock(&self.0).entry(shard).or_default().crash_at = Some(step);
    }

    fn take(&self, shard: u32, pick: impl FnOnce(&mut Faults) -> bool) -> bool {
        lock(&self.0).get_mut(&shard).is_some_and(pick)
    }

    /// Whether a flush failure is armed for `shard` (disarming it).
    pub fn take_flush(&self, shard: u32) -> bool {
        self.take(shard, |f| std::mem::take(&mut f.fail_next_flush))
    }

    /// Whether a commit failure is armed for `shard` (disarming it).
    pub fn take_commit(&self, shard: u32) -> bool {
        self.take(shard, |f| std::mem::take(&mut f.fail_next_commit))
    }

    /// Whether a base-write failure is armed for `shard` (disarming it).
    pub fn take_base_write(&self, shard: u32) -> bool {
        self.take(shard, |f| std::mem::take(&mut f.fail_next_base_write))
    }

    /// Whether the armed commit crash point of `shard` is `step` (disarming
    /// it if so).
    pub fn crash_point(&self, shard: u32, step: u32) -> bool {
        self.take(shard, |f| {
            let hit = f.crash_at == Some(step);
            if hit {
                f.crash_at = None;
            }
            hit
        })
    }
}

/// The error an injected fault returns.
pub fn injected(what: &str, shard: u32) -> StorageError {
    StorageError::io(
        format!("{what} (shard {shard}, injected fault)"),
        std::io::Error::other("injected fault"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleanup_follows_the_rows() {
        let names = crate::names!("t");
        let fresh = ShardState::decode(None, None, 0, &names).unwrap_or_else(|e| panic!("{e}"));
        assert!(fresh.new_log && fresh.commit.is_none());
        assert_eq!(
            fresh.cleanup(),
            Cleanup {
                frames_from: 0,
                keep_generation: 0,
                log_from: Some(1)
            }
        );
        let log = LogRow { base: 3, last: 9 }.encode(0);
        let commit = CommitRow {
            position: 5,
            generation: 2,
            records: 7,
            checkpoint: b"ck".to_vec(),
        }
        .encode(0);
        let s = ShardState::decode(Some(&log), Some(&commit), 0, &names)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!s.new_log);
        assert_eq!(
            s.cleanup(),
            Cleanup {
                frames_from: 5,
                keep_generation: 2,
                log_from: Some(10)
            }
        );
        assert_eq!(
            (s.recovered().checkpoint.as_deref(), s.records()),
            (Some(&b"ck"[..]), 7)
        );
        let max = LogRow {
            base: 0,
            last: u64::MAX,
        }
        .encode(0);
        let s = ShardState::decode(Some(&max), None, 0, &names).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.cleanup().log_from, None);
        assert!(ShardState::decode(Some(b"bad"), None, 0, &names).is_err());
        assert!(ShardState::decode(None, Some(b"bad"), 0, &names).is_err());
    }

    #[test]
    fn faults_fire_once() {
        let f = FaultSwitches::default();
        assert!(!f.take_flush(1));
        f.arm_flush(1);
        f.arm_crash(1, 2);
        assert!(!f.take_flush(2) && !f.crash_point(1, 1));
        assert!(f.take_flush(1) && !f.take_flush(1));
        assert!(f.crash_point(1, 2) && !f.crash_point(1, 2));
        let open = OpenShards::default();
        assert!(open.claim(4).is_ok() && open.claim(4).is_err());
        open.release(4);
        assert!(open.claim(4).is_ok());
    }

    #[test]
    fn keys_are_checked_where_crcs_cannot_see() {
        let names = crate::names!("test");
        let fresh = ShardState::decode(None, None, 7, &names).unwrap_or_else(|e| panic!("{e}"));
        let nothing = || Ok(false);
        let rows = || Ok(true);
        assert!(
            fresh.check_keys(false, nothing, 7, &names).is_ok(),
            "a new shard"
        );
        let corrupt = |r: Result<()>, what: &str| match r {
            Err(StorageError::Corrupt { what: w, at: 7 }) => assert_eq!(w, what),
            other => panic!("{other:?}"),
        };
        corrupt(fresh.check_keys(false, rows, 7, &names), names.log_row);
        corrupt(fresh.check_keys(true, nothing, 7, &names), names.meta_row);
        let log = LogRow { base: 0, last: 3 }.encode(7);
        let known =
            ShardState::decode(Some(&log), None, 7, &names).unwrap_or_else(|e| panic!("{e}"));
        // With its log row the shard may hold rows and no commit.
        let unasked = || -> Result<bool> { panic!("asked about rows") };
        assert!(known.check_keys(false, unasked, 7, &names).is_ok());
        corrupt(known.check_keys(true, nothing, 7, &names), names.meta_row);
    }
}
