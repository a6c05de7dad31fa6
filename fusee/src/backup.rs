//! Online backup: [`Engine::backup`](crate::Engine::backup) writes a
//! consistent copy of a live engine's store into a new directory while the
//! engine runs; restoring is opening the copy.
//!
//! # Design
//!
//! **One cut for every shard.** Shards send each other messages (child
//! starts, signals, their acknowledgements); a message stays in its
//! sender's outbox until the receiver has recorded it durably and said so.
//! Copies of shards taken at unrelated moments can lose one: the receiver
//! copied before it recorded the message, the sender after the
//! acknowledgement took it out of its outbox. So every shard is copied at
//! a point of one consistent cut: each owned shard is sent
//! `Input::Backup` (`runtime/backup.rs`); it stops taking inputs (but
//! flush completions, as for a checkpoint due), lets its log become
//! wholly durable, commits a
//! checkpoint, and then holds (its thread runs the backup's `Hold` and
//! takes nothing else) until **every** shard is held and its own copy is
//! done. A held shard appends, releases and sends nothing, so every
//! message or acknowledgement a shard took before its cut was sent before
//! its sender's cut: the cut is consistent. (Outputs a shard released just
//! before holding may leave after it, which is an ordinary delay: their
//! records are in the sender's copy, and a message still in its copy's
//! outbox is sent again at open and deduplicated, as after any crash.)
//!
//! **The copy is migrate's.** A held shard is copied on its own thread by
//! [`crate::migrate`]'s copier, through the storage contract, from the
//! shard's live parts: the checkpoint it just committed, the index and
//! frames that checkpoint names, and its log after it (empty: the log was
//! wholly durable and discarded through the checkpoint). The destination
//! is a new store of the source's backend (the file backend for an
//! in-memory engine), so restoring is opening it with the same backend's
//! configuration and shard count.
//!
//! **The pause.** A shard is paused from the moment it takes the backup's
//! input until its copy is done and every shard is held: one flush, one
//! checkpoint, the copy of that shard (its parked runs' frames included),
//! and the wait for the slowest shard to reach its checkpoint. Shards are
//! copied in parallel. Each shard goes on as soon as both hold; the check
//! and the completion mark below happen with every shard running again.
//! Measured (`benches/benches/backup.rs`, `benches/RESULTS.md`): on the
//! file backend the longest hold grows with the parked runs copied, about
//! 50 ms at 100,000 and 350 ms at 1,000,000 on 2 cores.
//! A shorter pause (hold only for the checkpoints, then copy the files the
//! checkpoints name while the shards run) needs each backend to keep those
//! files from compaction and release while the copy reads them, which the
//! contract cannot ask today. Hard links are no shortcut on the file
//! backend: a link shares the file, and the live shard appends to its
//! run-store generation, overwrites its checkpoint slots and recycles log
//! segments in place (and an open of the copy would cut the shared store
//! file back to its slot), so either side could change the other.
//!
//! **Incomplete until checked.** The destination is created empty and
//! marked as a migration's is (`FUSEE` renamed to `FUSEE.migrating`)
//! before any shard is written; every backend refuses it at open until
//! the mark is taken back. After the copies, each destination shard is
//! rebuilt as the engine's recovery does ([`crate::inspect::rebuild`]) and
//! must hold as many runs as the frozen shard held, with the same next
//! run number; only then is the mark taken back. So a backup interrupted
//! anywhere (a crash, a failed copy, the process killed) leaves a
//! destination refused at open, never a store missing data; delete it and
//! run the backup again. (One window remains, as in a migration: killed
//! after the backend created the empty store and before the mark, the
//! destination is an empty store, never part of one.)
//!
//! **Not here.** PostgreSQL: `pg_dump` or point-in-time recovery of the
//! server (`fusee-storage-postgres/DEPLOYMENT.md`); the backup refuses it
//! ([`BackupError::Postgres`]).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use fusee_core::record::RunId;
use fusee_storage::{Storage, StorageError};

use crate::AnyStorage;
use crate::config::{Backend, OpenError, StorageConfig, open_storage};
use crate::migrate::{
    CopyReport, Event, MigrateError, NoInbox, SourceShard, copy_parts, mark_complete,
    mark_incomplete, now_ms, report, runs_in,
};
use crate::runtime::{Frozen, Hold};

/// What [`Engine::backup`](crate::Engine::backup) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupReport {
    /// Where the copy is.
    pub dest: PathBuf,
    /// Shards copied.
    pub shards: u32,
    /// Runs the copy holds (loaded and parked, finished ones within
    /// retention included), checked shard by shard against the held
    /// shards.
    pub runs: u64,
    /// What the copier wrote (frames, index records, outbox messages).
    pub copy: CopyReport,
    /// The copy's size on disk, in bytes (every file under `dest`).
    pub bytes: u64,
    /// Each shard's pause, in shard order: from when it stopped taking
    /// inputs (its flush and checkpoint included) until it went on.
    pub pauses: Vec<(u32, Duration)>,
    /// The whole backup, from the call to the completion mark.
    pub took: Duration,
}

impl BackupReport {
    /// The longest shard pause.
    pub fn longest_pause(&self) -> Duration {
        self.pauses
            .iter()
            .map(|&(_, d)| d)
            .max()
            .unwrap_or_default()
    }
}

/// Why a backup failed. The destination is then left marked incomplete
/// (refused at open) or untouched; delete it before trying again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    /// The engine's store is PostgreSQL's.
    #[error(
        "a PostgreSQL store is backed up by the server, not the engine: use pg_dump or \
         point-in-time recovery (see fusee-storage-postgres/DEPLOYMENT.md, \"Backing up\")"
    )]
    Postgres,
    /// The engine's store is in memory and no directory backend is
    /// compiled in to copy it into.
    #[error("an in-memory store is backed up into the file backend, which is not compiled in")]
    NoBackend,
    /// The destination exists and holds something.
    #[error("backup destination {0} exists and is not empty: back up into a new directory")]
    NotEmpty(PathBuf),
    /// The destination is inside the store's own directory (whose backend
    /// would take it for a foreign file, and a copy would copy itself).
    #[error("backup destination {dest} is inside the store's directory {store}")]
    InsideStore {
        /// The destination.
        dest: PathBuf,
        /// The store's directory.
        store: PathBuf,
    },
    /// The destination could not be looked at or created.
    #[error("backup destination {dest}: {error}")]
    Destination {
        /// The destination.
        dest: PathBuf,
        /// Why.
        error: String,
    },
    /// The copy was made but could not be finished (a shard still held
    /// the destination, or its size could not be measured): a fault of the
    /// engine's side, not of the destination the caller named.
    #[error("backup into {dest} could not be finished: {error}")]
    Finish {
        /// The destination.
        dest: PathBuf,
        /// Why.
        error: String,
    },
    /// Another backup of this engine is running.
    #[error("another backup of this engine is running")]
    Busy,
    /// A shard stopped (its storage failed, or the engine closed or
    /// crashed) before it was held; the other shards were let go.
    #[error("shard {0} stopped before the backup could hold it")]
    ShardGone(u32),
    /// The copy, or its check against the held shards, failed.
    #[error(transparent)]
    Copy(#[from] MigrateError),
}

impl From<OpenError> for BackupError {
    fn from(error: OpenError) -> Self {
        MigrateError::Open {
            side: "destination",
            error: Box::new(error),
        }
        .into()
    }
}

/// A backup's progress function: told each step (the copier's
/// [`Event`]s: `Marked`, then per shard `Shard`, `Frames`, `Committed`,
/// `ShardDone`, then `Checking`/`Checked` per shard and `Complete`); it
/// may stop the backup ([`ControlFlow::Break`]: the tests' interruptions),
/// which leaves the destination refused at open. Called from shard
/// threads too, one call at a time.
pub type BackupProgress = Box<dyn FnMut(Event) -> ControlFlow<()> + Send>;

/// What one held shard reports.
struct ShardDone {
    shard: u32,
    copy: CopyReport,
    runs: u64,
    next_run: RunId,
    pause: Duration,
}

/// Where the shards meet: how many are held of how many, or given up.
#[derive(Default)]
struct Meeting {
    total: usize,
    held: usize,
    aborted: bool,
}

/// What the holds share with the backup's thread.
struct Shared {
    dst: AnyStorage,
    meeting: Mutex<Meeting>,
    all_held: Condvar,
    progress: Mutex<BackupProgress>,
}

impl Shared {
    fn meet(&self, f: impl FnOnce(&mut Meeting)) {
        let mut m = self.meeting.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut m);
        self.all_held.notify_all();
    }

    /// Waits until every shard is held, or the backup gave up.
    fn wait_all_held(&self) {
        let mut m = self.meeting.lock().unwrap_or_else(|p| p.into_inner());
        while m.held < m.total && !m.aborted {
            m = self.all_held.wait(m).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn report(&self, e: Event) -> ControlFlow<()> {
        let mut p = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        p(e)
    }
}

/// One shard's hold as the backup sees it: reports exactly once, and a
/// hold dropped unrun (the shard stopped first) gives the backup up.
struct Guard {
    shard: u32,
    shared: Option<Arc<Shared>>,
    tx: mpsc::Sender<Result<ShardDone, BackupError>>,
}

impl Guard {
    fn send(mut self, r: Result<ShardDone, BackupError>) {
        if r.is_err()
            && let Some(s) = &self.shared
        {
            s.meet(|m| m.aborted = true);
        }
        // The backup's thread takes the destination back once every hold
        // let go of it: the reference goes before the report.
        self.shared = None;
        let _ = self.tx.send(r);
    }

    fn run(self, frozen: Frozen<'_>) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        let asked = frozen.asked.unwrap_or_else(Instant::now);
        shared.meet(|m| m.held += 1);
        let shard = frozen.shard;
        let mut copy = CopyReport::default();
        let shards = shared
            .meeting
            .lock()
            .map_or(0, |m| u32::try_from(m.total).unwrap_or(u32::MAX));
        let mut progress = |e: Event| shared.report(e);
        let copied = report(&mut progress, Event::Shard { shard, shards })
            .and_then(|()| {
                copy_parts(
                    SourceShard {
                        checkpoint: Some(frozen.checkpoint),
                        log: frozen.log,
                        runs: frozen.runs,
                        index: frozen.index,
                    },
                    Vec::new(),
                    &shared.dst,
                    shard,
                    &mut NoInbox,
                    &mut progress,
                    &mut copy,
                )
            })
            .and_then(|()| report(&mut progress, Event::ShardDone));
        if copied.is_err() {
            // The backup fails: no shard need wait for the others.
            shared.meet(|m| m.aborted = true);
        }
        shared.wait_all_held();
        let pause = asked.elapsed();
        let (runs, next_run) = (frozen.runs_held, frozen.next_run);
        drop(shared);
        copy.shards = 1;
        self.send(
            copied
                .map(|()| ShardDone {
                    shard,
                    copy,
                    runs,
                    next_run,
                    pause,
                })
                .map_err(BackupError::from),
        );
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(s) = self.shared.take() {
            s.meet(|m| m.aborted = true);
            drop(s);
            let _ = self.tx.send(Err(BackupError::ShardGone(self.shard)));
        }
    }
}

/// One backup, from the destination's creation to its completion mark.
pub(crate) struct Session {
    shared: Arc<Shared>,
    target: StorageConfig,
    rx: mpsc::Receiver<Result<ShardDone, BackupError>>,
    tx: mpsc::Sender<Result<ShardDone, BackupError>>,
    /// Reports taken before `finish` (the sabotage's one-by-one holds).
    done: Vec<Result<ShardDone, BackupError>>,
    started: Instant,
}

impl Session {
    /// Creates the destination `dest` for a backup of `storage` (opened
    /// with `settings`) and marks it incomplete; refuses PostgreSQL and a
    /// destination that holds anything.
    pub(crate) fn start(
        storage: &AnyStorage,
        settings: &StorageConfig,
        dest: &Path,
        mut progress: BackupProgress,
    ) -> Result<Self, BackupError> {
        let started = Instant::now();
        // The copy is written with the store's own backend; an in-memory
        // engine's as a file store.
        let backend = match storage.backend() {
            Backend::Postgres => return Err(BackupError::Postgres),
            Backend::Memory if cfg!(feature = "file") => Backend::File,
            Backend::Memory => return Err(BackupError::NoBackend),
            other => other,
        };
        if !matches!(storage, AnyStorage::Memory(_))
            && settings.backend == backend
            && inside(dest, &settings.dir)
        {
            return Err(BackupError::InsideStore {
                dest: dest.to_path_buf(),
                store: settings.dir.clone(),
            });
        }
        match std::fs::read_dir(dest) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(BackupError::NotEmpty(dest.to_path_buf()));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(BackupError::Destination {
                    dest: dest.to_path_buf(),
                    error: e.to_string(),
                });
            }
        }
        let target = StorageConfig {
            backend,
            dir: dest.to_path_buf(),
            create: fusee_storage::identity::Create::IfMissing,
            ..settings.clone()
        };
        let dst = open_storage(&target)?;
        let existing = dst
            .shards()
            .map_err(MigrateError::storage("destination", None))?;
        if !existing.is_empty() {
            return Err(BackupError::NotEmpty(dest.to_path_buf()));
        }
        mark_incomplete(&dst, &target)?;
        report(&mut *progress, Event::Marked)?;
        let (tx, rx) = mpsc::channel();
        Ok(Self {
            shared: Arc::new(Shared {
                dst,
                meeting: Mutex::default(),
                all_held: Condvar::new(),
                progress: Mutex::new(progress),
            }),
            target,
            rx,
            tx,
            done: Vec::new(),
            started,
        })
    }

    /// One hold per shard of `shards` (each to be sent to its shard, or
    /// dropped, which gives the backup up).
    pub(crate) fn holds(&self, shards: &[u32]) -> Vec<(u32, Hold)> {
        self.shared.meet(|m| m.total = shards.len());
        shards
            .iter()
            .map(|&shard| (shard, self.hold(shard)))
            .collect()
    }

    fn hold(&self, shard: u32) -> Hold {
        let guard = Guard {
            shard,
            shared: Some(Arc::clone(&self.shared)),
            tx: self.tx.clone(),
        };
        Hold::new(Box::new(move |frozen: Frozen<'_>| guard.run(frozen)))
    }

    /// The sabotage (tests only): a hold of `shard` that meets no other
    /// shard, so it goes on once its own copy is done.
    #[cfg(feature = "testing")]
    pub(crate) fn hold_alone(&self, shard: u32) -> Hold {
        self.shared.meet(|m| m.total = m.held + 1);
        self.hold(shard)
    }

    /// The sabotage (tests only): waits for the next hold's report.
    #[cfg(feature = "testing")]
    pub(crate) fn wait_one(&mut self) {
        if let Ok(r) = self.rx.recv() {
            self.done.push(r);
        }
    }

    /// Waits for every hold, checks the copy against the held shards and
    /// takes the destination's mark back.
    pub(crate) fn finish(self) -> Result<BackupReport, BackupError> {
        let Session {
            shared,
            target,
            rx,
            tx,
            done: early,
            started,
        } = self;
        drop(tx);
        let mut done = Vec::new();
        let mut failed = None;
        // Every hold reports once (run or dropped), then lets go of its sender.
        for r in early.into_iter().chain(rx.iter()) {
            match r {
                Ok(d) => done.push(d),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed {
            // The destination stays marked incomplete, dropped unclosed.
            return Err(e);
        }
        done.sort_by_key(|d| d.shard);
        let Ok(shared) = Arc::try_unwrap(shared) else {
            return Err(BackupError::Finish {
                dest: target.dir.clone(),
                error: "a shard still holds the destination".into(),
            });
        };
        let Shared { dst, progress, .. } = shared;
        let mut progress = progress.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut out = BackupReport {
            dest: target.dir.clone(),
            ..BackupReport::default()
        };
        let now = now_ms();
        let mut shards = dst
            .shards()
            .map_err(MigrateError::storage("destination", None))?;
        shards.sort_unstable();
        let held: Vec<u32> = done.iter().map(|d| d.shard).collect();
        if shards != held {
            return Err(MigrateError::Mismatch {
                shard: 0,
                run: 0,
                what: format!("shards {held:?} were held, the copy holds {shards:?}"),
            }
            .into());
        }
        for d in &done {
            report(&mut *progress, Event::Checking { shard: d.shard })?;
            let view = crate::inspect::rebuild(&dst, d.shard, now, &mut |_| {}).map_err(|e| {
                MigrateError::Mismatch {
                    shard: d.shard,
                    run: 0,
                    what: format!("the copy does not recover: {e}"),
                }
            })?;
            let runs = runs_in(&view.core);
            if runs != d.runs || view.core.next_run_id() != d.next_run {
                return Err(MigrateError::Mismatch {
                    shard: d.shard,
                    run: 0,
                    what: format!(
                        "the held shard had {} runs and next run {}, the copy {runs} and {}",
                        d.runs,
                        d.next_run,
                        view.core.next_run_id()
                    ),
                }
                .into());
            }
            report(&mut *progress, Event::Checked(runs))?;
            out.runs += runs;
            out.shards += 1;
            add(&mut out.copy, &d.copy);
            out.pauses.push((d.shard, d.pause));
        }
        mark_complete(dst, &target)?;
        out.bytes = size_of_dir(&target.dir).map_err(|e| BackupError::Finish {
            dest: target.dir.clone(),
            error: e.to_string(),
        })?;
        out.took = started.elapsed();
        report(&mut *progress, Event::Complete)?;
        Ok(out)
    }
}

fn add(to: &mut CopyReport, r: &CopyReport) {
    to.shards += r.shards;
    to.frames += r.frames;
    to.parked += r.parked;
    to.loaded += r.loaded;
    to.log_records += r.log_records;
    to.inbox_messages += r.inbox_messages;
}

/// Whether `dest` is `dir` or under it (symbolic links resolved where the
/// paths exist).
fn inside(dest: &Path, dir: &Path) -> bool {
    let Ok(store) = dir.canonicalize() else {
        return false;
    };
    let Ok(mut dest) = std::path::absolute(dest) else {
        return false;
    };
    // The nearest existing ancestor resolved, the rest kept as written.
    let mut rest = Vec::new();
    while !dest.exists() {
        match (dest.file_name().map(ToOwned::to_owned), dest.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                dest = parent.to_path_buf();
            }
            _ => return false,
        }
    }
    let Ok(mut resolved) = dest.canonicalize() else {
        return false;
    };
    resolved.extend(rest.into_iter().rev());
    resolved.starts_with(&store)
}

/// Every file's length under `dir`.
fn size_of_dir(dir: &Path) -> Result<u64, StorageError> {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d)
            .map_err(|e| StorageError::io(format!("listing {}", d.display()), e))?;
        for entry in entries {
            let entry =
                entry.map_err(|e| StorageError::io(format!("listing {}", d.display()), e))?;
            let meta = entry
                .metadata()
                .map_err(|e| StorageError::io(format!("reading {}", d.display()), e))?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

impl From<StorageError> for BackupError {
    fn from(error: StorageError) -> Self {
        MigrateError::Storage {
            side: "destination",
            shard: None,
            error,
        }
        .into()
    }
}
