//! Looking inside a store without an engine, and without changing it: the
//! library under the `fusee` command (`fusee-cli`).
//!
//! [`open_read_only`] reads a directory's identity marker, opens the store
//! with its backend's read-only entry point (each backend's `verify`
//! module: writes that opening a shard makes stay in memory, or are never
//! made), and hands it to a [`StoreVisitor`]. [`rebuild`] then recovers a
//! shard's state exactly as the engine's recovery does (the index, the
//! checkpoint's runs, then the log after the checkpoint, a parked run
//! loaded from its frames before a record for it), into a scratch
//! [`ShardCore`] that nothing drives. From it: the shard's runs and their
//! status ([`ShardView::runs`]), one run's journal ([`ShardView::journal`];
//! [`journal`] has its versioned JSON form), and the core's checks of every
//! stored byte ([`ShardView::verify`]).
//!
//! The recovery is the engine's own (`crate::recovery`, which the shard
//! loop calls too, then starts workflow code): one copy, so what this
//! reads is what an engine would recover (`tests` of `fusee-cli` compare
//! what this reads with what an engine wrote).
//!
//! Runs' status here: **running** (loaded, unfinished, no wait or sleep
//! pending: a step in flight or due), **waiting** (loaded, waiting for a
//! signal or a durable sleep), **parked** (suspended in the run store),
//! **finished** (with its status; loaded or parked).

use std::path::{Path, PathBuf};

use fusee_core::record::{
    Lsn, Record, RecordBuf, RunId, Status, decode_canonical_all, iter_canonical,
};
use fusee_core::shard::{BlobRef, Found, ShardCore, TimerKind};
use fusee_core::store::Checkpoint;
use fusee_storage::identity::{Identity, MARKER};
use fusee_storage::{LogStore, RunStore, Storage, StorageError};

use crate::Backend;
use crate::recovery::{self, ChainError, Damage};

pub mod journal;

/// Why looking inside a store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The directory is not a store this build can read: missing, not a
    /// store, another program's files, or a backend not compiled in.
    #[error("{path}: {why}")]
    NotAStore {
        /// The directory.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The storage refused (locked by an engine, damaged, I/O error).
    #[error("{}{error}", shard.map(|s| format!("shard {s}: ")).unwrap_or_default())]
    Storage {
        /// The shard, if the error is about one.
        shard: Option<u32>,
        /// The storage's error.
        error: StorageError,
    },
    /// Stored bytes the core cannot decode or refuses.
    #[error("shard {shard}: {what}{}: {detail}", lsn.map(|l| format!(" at LSN {l}")).unwrap_or_default())]
    Damaged {
        /// The shard.
        shard: u32,
        /// What failed (checkpoint, index, log record, run frame).
        what: &'static str,
        /// The log record, when the damage is in the log.
        lsn: Option<Lsn>,
        /// The decoder's words.
        detail: String,
    },
    /// No run of this workflow ID (or run number) is in the store.
    #[error("no run {0} in this store")]
    NoSuchRun(String),
}

impl InspectError {
    fn storage(shard: u32) -> impl Fn(StorageError) -> Self {
        move |error| Self::Storage {
            shard: Some(shard),
            error,
        }
    }

    fn damaged(shard: u32, what: &'static str, lsn: Option<Lsn>, detail: impl ToString) -> Self {
        Self::Damaged {
            shard,
            what,
            lsn,
            detail: detail.to_string(),
        }
    }
}

/// Which backend made the store in `dir`, from its identity marker.
pub fn backend_of(dir: &Path) -> Result<Backend, InspectError> {
    let not = |why: String| InspectError::NotAStore {
        path: dir.to_path_buf(),
        why,
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(not("not a directory".into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(not("no such directory".into()));
        }
        Err(e) => return Err(not(format!("cannot read it: {e}"))),
    }
    let marker = dir.join(MARKER);
    let bytes = match std::fs::read(&marker) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(not(
                "no FUSEE identity marker: not a Fusee store (or an empty directory)".into(),
            ));
        }
        Err(e) => return Err(not(format!("cannot read its FUSEE marker: {e}"))),
    };
    let id = Identity::decode(&bytes, &marker.display().to_string())
        .map_err(|error| InspectError::Storage { shard: None, error })?;
    let backend: Backend = id
        .backend
        .parse()
        .map_err(|_| not(format!("a store of an unknown backend {:?}", id.backend)))?;
    if !backend.compiled_in() {
        return Err(not(format!(
            "a {backend} store, and this build has no {backend} backend"
        )));
    }
    Ok(backend)
}

/// What to do with a store opened read-only: called with the storage of
/// whichever backend the directory holds.
pub trait StoreVisitor {
    /// What the visit returns.
    type Out;
    /// Visits `storage`, a store of `backend`.
    fn visit<S: Storage>(self, backend: Backend, storage: &S) -> Self::Out;
}

/// Opens the store in `dir` read-only with its own backend (named by its
/// identity marker) and runs `visitor` on it. Nothing in `dir` changes.
/// A store an engine holds is [`StorageError::Locked`] (in
/// [`InspectError::Storage`]), never a wait.
// With no directory backend compiled in, only the refusal is left.
#[cfg_attr(
    not(any(feature = "file", feature = "redb", feature = "rocksdb")),
    allow(unused_variables)
)]
pub fn open_read_only<V: StoreVisitor>(dir: &Path, visitor: V) -> Result<V::Out, InspectError> {
    let backend = backend_of(dir)?;
    let refused = |error| InspectError::Storage { shard: None, error };
    match backend {
        #[cfg(feature = "file")]
        Backend::File => {
            let s = fusee_storage_file::verify::open_read_only(dir).map_err(refused)?;
            Ok(visitor.visit(backend, &s))
        }
        #[cfg(feature = "redb")]
        Backend::Redb => {
            let s = fusee_storage_redb::verify::open_read_only(dir).map_err(refused)?;
            Ok(visitor.visit(backend, &s))
        }
        #[cfg(feature = "rocksdb")]
        Backend::Rocksdb => {
            let s = fusee_storage_rocksdb::verify::open_read_only(dir).map_err(refused)?;
            Ok(visitor.visit(backend, &s))
        }
        // `backend_of` refused the others.
        #[allow(unreachable_patterns)]
        other => Err(InspectError::NotAStore {
            path: dir.to_path_buf(),
            why: format!("a {other} store cannot be read from a directory"),
        }),
    }
}

/// A run's stored journal read from its frame chain.
#[derive(Clone, Debug, Default)]
pub struct Frame {
    /// The run's canonical records, oldest first (the whole chain's).
    pub journal: Vec<u8>,
    /// The LSN of the run's last record.
    pub last_lsn: Lsn,
}

/// Reads the frame at `blob` and the chain of `Delta` frames before it, as
/// the engine does when it loads a parked run (the same function).
pub fn read_chain<R: RunStore>(runs: &mut R, blob: BlobRef) -> Result<Frame, FrameError> {
    let chain = recovery::read_chain(runs, blob)?;
    Ok(Frame {
        journal: chain.journal,
        last_lsn: chain.last_lsn,
    })
}

/// Why a run's frames could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The run store refused the read (damaged, unknown frame).
    #[error("{0}")]
    Storage(StorageError),
    /// The frame's bytes are not a run's frame.
    #[error("frame at {offset}: {detail}")]
    Decode {
        /// The frame's address.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
}

impl From<ChainError> for FrameError {
    fn from(e: ChainError) -> Self {
        let decode = |offset, detail: String| FrameError::Decode { offset, detail };
        match e {
            ChainError::Store(e) => FrameError::Storage(e),
            ChainError::Entry { offset, error } => decode(offset, error.to_string()),
            ChainError::OtherKind { offset } => {
                decode(offset, "a frame of another kind than a run's".into())
            }
            ChainError::TooDeep { offset } => {
                decode(offset, "frame chain deeper than its limit".into())
            }
        }
    }
}

/// Recovery's failure as this module reports it: naming the shard, what
/// is damaged, and the LSN for a log record.
fn damage(shard: u32, d: Damage) -> InspectError {
    match d {
        Damage::Store(e) => InspectError::storage(shard)(e),
        Damage::Index(e) => InspectError::damaged(shard, "index records", None, e),
        Damage::Frame { lsn, error } => {
            InspectError::damaged(shard, "run frame", lsn, FrameError::from(error))
        }
        Damage::FrameJournal { lsn, error } => {
            InspectError::damaged(shard, "run frame journal", lsn, error)
        }
        Damage::CheckpointJournal(e) => InspectError::damaged(shard, "checkpoint journal", None, e),
        Damage::LogRecord { lsn, error } => match error {
            Some(e) => InspectError::damaged(shard, "log record", Some(lsn), e),
            None => InspectError::damaged(shard, "log record", Some(lsn), "empty"),
        },
    }
}

/// What a shard's last checkpoint says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// The last log record it covers.
    pub lsn: Lsn,
    /// When it was taken (ms since the Unix epoch).
    pub created_ms: u64,
    /// The next run number at the time.
    pub next_run: RunId,
    /// Runs loaded in memory at the time (their journals are in it).
    pub loaded_runs: usize,
    /// Parked runs its index holds.
    pub index_runs: u64,
    /// Bytes of the checkpoint.
    pub bytes: usize,
}

/// One shard, recovered into a scratch core (see the [module docs](self)).
pub struct ShardView<R> {
    /// The shard.
    pub shard: u32,
    /// Its state, as the engine's recovery would rebuild it.
    pub core: ShardCore,
    /// Its run store, for parked runs' frames.
    pub runs: R,
    /// Its last checkpoint.
    pub checkpoint: Option<CheckpointInfo>,
    /// The first log record still held.
    pub first_lsn: Lsn,
    /// The last log record.
    pub last_lsn: Lsn,
    /// Log records after the checkpoint, replayed.
    pub replayed: u64,
    /// Index records the last commit holds.
    pub index_records: u64,
    /// The run store's position at the last commit.
    pub store_position: u64,
    /// The last checkpoint's outbox (messages to shards not acknowledged
    /// then; the engine's encoding).
    pub outbox: Vec<u8>,
    /// What replaying the log tail queued to leave the shard (messages
    /// recovery sends again, with replies nobody waits for any more).
    pub released: Vec<fusee_core::shard::Output>,
}

impl<R> std::fmt::Debug for ShardView<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardView")
            .field("shard", &self.shard)
            .field("last_lsn", &self.last_lsn)
            .finish_non_exhaustive()
    }
}

/// Recovers shard `shard` of `storage` at time `now_ms` as the engine's
/// recovery does (module docs), reading every record after the checkpoint
/// (`progress` is told each LSN replayed). Errors name the shard, and the
/// LSN for a log record.
pub fn rebuild<S: Storage>(
    storage: &S,
    shard: u32,
    now_ms: u64,
    progress: &mut dyn FnMut(Lsn),
) -> Result<ShardView<S::Runs>, InspectError> {
    let mut parts = storage
        .open_shard(shard)
        .map_err(InspectError::storage(shard))?;
    let checkpoint = parts
        .recovered
        .checkpoint
        .as_deref()
        .map(Checkpoint::decode)
        .transpose()
        .map_err(|e| InspectError::damaged(shard, "checkpoint", None, e))?;
    let shards = checkpoint.as_ref().map_or(1, |c| c.shards.max(1));
    let mut core = ShardCore::new(shard, shards, 0, now_ms);
    let index_records =
        recovery::load_index(&mut core, &mut parts.checkpoint).map_err(|d| damage(shard, d))?;
    let mut after: Lsn = 0;
    if let Some(cp) = &checkpoint {
        if cp.shard != shard {
            return Err(InspectError::damaged(
                shard,
                "checkpoint",
                None,
                format!("it is shard {}'s", cp.shard),
            ));
        }
        recovery::load_checkpoint(&mut core, &mut parts.runs, cp).map_err(|d| damage(shard, d))?;
        after = cp.lsn;
    }
    let replayed = recovery::replay_log(
        &mut core,
        &mut parts.log,
        &mut parts.runs,
        after,
        now_ms,
        progress,
    )
    .map_err(|d| damage(shard, d))?;
    let mut released = Vec::new();
    core.release(parts.log.last_lsn(), &mut released);
    while core.take_event().is_some() {}
    Ok(ShardView {
        shard,
        core,
        checkpoint: checkpoint.as_ref().map(|c| CheckpointInfo {
            lsn: c.lsn,
            created_ms: c.created_ms,
            next_run: c.next_run,
            loaded_runs: c.runs.len(),
            index_runs: c.index_runs,
            bytes: parts.recovered.checkpoint.as_ref().map_or(0, Vec::len),
        }),
        first_lsn: parts.log.first_lsn(),
        last_lsn: parts.log.last_lsn(),
        replayed,
        index_records,
        store_position: parts.recovered.store_position,
        outbox: checkpoint.map(|c| c.outbox).unwrap_or_default(),
        released,
        runs: parts.runs,
    })
}

/// Where a run stands (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunState {
    /// Loaded, with a step in flight or due.
    Running,
    /// Loaded, waiting for a signal or a durable sleep.
    Waiting,
    /// Suspended in the run store.
    Parked,
    /// Ended, with this status.
    Finished(Status),
}

impl RunState {
    /// The state's name as the command shows and filters it: `running`,
    /// `waiting`, `parked`, or the finished status (`ok`, `failed`,
    /// `cancelled`, `timed-out`, `terminated`, `continued-as-new`,
    /// `reset`).
    pub fn name(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Waiting => "waiting",
            RunState::Parked => "parked",
            RunState::Finished(s) => status_name(s),
        }
    }

    /// Whether the run ended.
    pub fn is_finished(self) -> bool {
        matches!(self, RunState::Finished(_))
    }
}

/// A status's name in the command's output and the journal format
/// (`ok`, `failed`, `cancelled`, `timed-out`, `terminated`,
/// `continued-as-new`, `reset`).
pub fn status_name(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Failed => "failed",
        Status::Cancelled => "cancelled",
        Status::TimedOut => "timed-out",
        Status::Terminated => "terminated",
        Status::ContinuedAsNew => "continued-as-new",
        Status::Reset => "reset",
    }
}

/// The status named `name` by [`status_name`].
pub fn status_of(name: &str) -> Option<Status> {
    Status::ALL.into_iter().find(|s| status_name(*s) == name)
}

/// One run, as [`ShardView::runs`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSummary {
    /// Its shard.
    pub shard: u32,
    /// Its run number in the shard.
    pub run: RunId,
    /// The workflow ID.
    pub id: String,
    /// The workflow type.
    pub workflow: String,
    /// Where it stands.
    pub state: RunState,
    /// When it started (ms since the Unix epoch).
    pub started_ms: u64,
    /// When it finished.
    pub finished_ms: Option<u64>,
    /// The LSN of its last record.
    pub last_lsn: Lsn,
    /// What it waits for, if anything.
    pub waiting_for: Vec<Waiting>,
    /// Its search attributes, by name ([`crate::attrs`]).
    pub attributes: crate::attrs::AttrMap,
}

/// What a waiting run waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// A signal of this name.
    Signal(String),
    /// A durable sleep, until this time (ms since the Unix epoch).
    Sleep(u64),
}

/// A run's journal as [`ShardView::journal`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunJournal {
    /// The run.
    pub summary: RunSummary,
    /// Its records, oldest first.
    pub records: Vec<RecordBuf>,
    /// False for a finished run parked in the run store whose frame keeps
    /// only its `Start` and `Done` records (and its streams'): its history time
    /// (`Config::history_retention`) passed, or its journal was over
    /// `Config::history_max_bytes`, and the rest was let go. (A run whose
    /// whole journal is those two records reads as incomplete too: a frame
    /// does not say which it is.)
    pub complete: bool,
}

impl<R: RunStore> ShardView<R> {
    /// Every run of the shard, newest first (highest run number first).
    /// Parked runs' identities are read from their frames.
    pub fn runs(&mut self) -> Result<Vec<RunSummary>, InspectError> {
        let mut cursor = self.core.newest_first();
        let mut out = Vec::new();
        loop {
            let batch = cursor.next_batch(&self.core, 4096);
            if batch.is_empty() {
                return Ok(out);
            }
            for run in batch {
                if let Some(s) = self.summary(run)? {
                    out.push(s);
                }
            }
        }
    }

    /// Run `run` of the shard, `None` if the shard has no such run.
    pub fn summary(&mut self, run: RunId) -> Result<Option<RunSummary>, InspectError> {
        let shard = self.shard;
        if let Some(l) = self.core.get(run) {
            let mut waiting_for: Vec<Waiting> = l
                .waiting_on()
                .map(|(_, name)| Waiting::Signal(name.to_string()))
                .collect();
            waiting_for.extend(
                l.armed_timers()
                    .filter(|(_, kind, _)| *kind == TimerKind::Sleep)
                    .map(|(_, _, at)| Waiting::Sleep(at)),
            );
            let state = match l.done {
                Some((status, _)) => RunState::Finished(status),
                None if !waiting_for.is_empty() => RunState::Waiting,
                None => RunState::Running,
            };
            return Ok(Some(RunSummary {
                shard,
                run,
                id: l.id.to_string(),
                workflow: l.wtype.to_string(),
                state,
                started_ms: l.started_ms,
                finished_ms: l.done.map(|(_, at)| at),
                last_lsn: l.last_lsn,
                waiting_for,
                attributes: crate::attrs::fold(l.meta.as_deref(), l.attrs().iter().map(|p| &p[..])),
            }));
        }
        let Some(parked) = self.core.parked(run) else {
            return Ok(None);
        };
        let frame = read_chain(&mut self.runs, parked.blob())
            .map_err(|e| InspectError::damaged(shard, "run frame", None, e))?;
        let mut summary = RunSummary {
            shard,
            run,
            id: String::new(),
            workflow: String::new(),
            state: parked.done().map_or(RunState::Parked, RunState::Finished),
            started_ms: 0,
            finished_ms: None,
            last_lsn: frame.last_lsn,
            waiting_for: Vec::new(),
            attributes: crate::attrs::journal_attributes(&frame.journal),
        };
        for item in iter_canonical(&frame.journal) {
            let (rec, _) =
                item.map_err(|e| InspectError::damaged(shard, "run frame journal", None, e))?;
            match rec {
                Record::Start {
                    id,
                    wtype,
                    started_ms,
                    ..
                } => {
                    summary.id = id.to_string();
                    summary.workflow = wtype.to_string();
                    summary.started_ms = started_ms;
                }
                Record::Done { finished_ms, .. } => summary.finished_ms = Some(finished_ms),
                _ => {}
            }
        }
        Ok(Some(summary))
    }

    /// The latest run of workflow ID `id` in this shard, if any.
    pub fn find(&mut self, id: &str) -> Result<Option<RunId>, InspectError> {
        let run = match self.core.find(id) {
            Some(Found::Loaded(run)) => return Ok(Some(run)),
            Some(Found::Parked(run)) => run,
            None => return Ok(None),
        };
        // A parked run is found by its ID's hash: confirm the ID.
        Ok(self.summary(run)?.filter(|s| s.id == id).map(|s| s.run))
    }

    /// Run `run`'s journal: its stored prefix (if any) and the records in
    /// memory after it, decoded.
    pub fn journal(&mut self, run: RunId) -> Result<RunJournal, InspectError> {
        let shard = self.shard;
        let summary = self
            .summary(run)?
            .ok_or_else(|| InspectError::NoSuchRun(format!("{run} in shard {shard}")))?;
        let frame_err = |e| InspectError::damaged(shard, "run frame", None, e);
        let (bytes, complete) = match self.core.get(run) {
            Some(l) => {
                let tail = l.journal.clone();
                let mut whole = match l.blob {
                    Some(blob) => read_chain(&mut self.runs, blob).map_err(frame_err)?.journal,
                    None => Vec::new(),
                };
                whole.extend_from_slice(&tail);
                (whole, true)
            }
            None => {
                let parked = self
                    .core
                    .parked(run)
                    .ok_or_else(|| InspectError::NoSuchRun(format!("{run} in shard {shard}")))?;
                let frame = read_chain(&mut self.runs, parked.blob()).map_err(frame_err)?;
                (frame.journal, parked.done().is_none())
            }
        };
        let records = decode_canonical_all(&bytes)
            .map_err(|e| InspectError::damaged(shard, "run journal", None, e))?;
        // A finished run's frame holding more than its summary (`Start`,
        // `Done`, its streams) holds its whole journal: its history is kept.
        let complete = complete || !crate::recovery::summary_only(&bytes);
        Ok(RunJournal {
            summary,
            records,
            complete,
        })
    }

    /// Reads and decodes every stored frame the shard's runs name (each
    /// parked run's chain, each loaded run's stored prefix) and calls
    /// `problem` for each that fails; `progress` is told each run checked.
    /// The checks the engine makes only when it loads a run, made now.
    pub fn verify(
        &mut self,
        problem: &mut dyn FnMut(RunId, InspectError),
        progress: &mut dyn FnMut(),
    ) {
        let shard = self.shard;
        let mut blobs: Vec<(RunId, BlobRef)> = self
            .core
            .parked_runs()
            .map(|(run, p)| (run, p.blob()))
            .collect();
        blobs.extend(
            self.core
                .loaded_runs()
                .filter_map(|(run, l)| l.blob.map(|b| (run, b))),
        );
        blobs.sort_unstable_by_key(|(run, _)| *run);
        for (run, blob) in blobs {
            let checked = read_chain(&mut self.runs, blob)
                .map_err(|e| InspectError::damaged(shard, "run frame", None, e))
                .and_then(|frame| {
                    decode_canonical_all(&frame.journal)
                        .map(drop)
                        .map_err(|e| InspectError::damaged(shard, "run frame journal", None, e))
                });
            if let Err(e) = checked {
                problem(run, e);
            }
            progress();
        }
    }
}
