//! Moving a store to another backend, or to another shard count, with the
//! engine stopped: the library under `fusee migrate SRC DST` and `fusee
//! reshard SRC DST --shards N`.
//!
//! # Design
//!
//! **Through the contract, shard by shard, from the source's last commit.**
//! A destination is written only through the storage contract
//! (`fusee-storage`: log, run store, checkpoint and index), never by
//! copying a backend's files, so any backend can be either side. Each
//! source shard is opened (read-only for directories, through
//! [`crate::inspect::open_read_only`]; PostgreSQL through its normal open,
//! which only cleans what no flush or commit made its own) and yields what
//! recovery starts from: its last commit (checkpoint and index), the frames
//! they name, and the log after the checkpoint. The destination shard
//! receives exactly that, so the engine's recovery on the destination does
//! what it would have done on the source: same runs and run numbers, same
//! journals byte for byte, same outbox, same messages regenerated from the
//! log tail. Nothing is rebuilt from the core's state, so nothing the
//! recovery owns (outputs released at open, messages re-sent) is done
//! twice or by a second copy of its logic.
//!
//! **Frames get new addresses.** A [`BlobRef`] is backend-defined, so every
//! frame the commit names is appended to the destination's run store and
//! every reference to it rewritten: the index records (offset and length,
//! the persisted entry's words 2 and 3) and the checkpoint's loaded runs.
//! A `Delta` chain (a run parked several times) names its previous frame
//! inside its bytes; it is written as one `Park` frame holding the chain's
//! whole journal and the newest frame's timers (the engine reads a chain
//! as exactly that), so no frame refers to another in the destination: the
//! index record loses its `CHAINED` flag, a loaded run's `blob_depth` is 0
//! and its `blob_chain` the new frame's length. A `Done` frame is copied
//! as it is. Frames the commit does not name (appended after it, released)
//! are left behind: the source's recovery would not read them either.
//!
//! **LSNs are shifted so the destination log starts at 1.** The contract
//! wants a log's LSNs consecutive from 1, and a source log discarded
//! through its checkpoint no longer has records 1..=`lsn`. LSNs are a
//! shard's private clock: no journal, index record, outbox message or
//! deduplication key holds one (keys are shard, run and sequence number;
//! see `fusee_core::shard::send_dedup`); only checkpoints (the LSN covered,
//! loaded runs' last LSN) and frame headers (the run's last LSN) do, and
//! recovery only compares them with each other and with the log's LSNs.
//! So the destination takes every LSN at or before the checkpoint's to 0
//! (they are all covered) and the log tail's LSN `n` to `n - lsn`: every
//! comparison recovery makes keeps its outcome (all covered LSNs are below
//! every tail LSN, tail LSNs keep their order), and the destination log
//! holds exactly the tail, from 1. The alternative, a contract call to
//! start an empty log after a given LSN (as a discarded log does), would
//! have kept LSNs equal at the cost of a change to every backend and the
//! conformance suite, for no behaviour the shift does not keep.
//!
//! **Inbox messages.** A PostgreSQL shard's inbox table holds messages from
//! other processes' shards that the shard has not recorded yet (their
//! senders counted them delivered). Into another PostgreSQL store they are
//! posted to the same shard's inbox; into a single-process backend they
//! are added to the shard's checkpoint outbox, which the engine sends at
//! open to the shard the message names, where they are deduplicated as
//! any message sent twice.
//!
//! **Incomplete until the end.** The destination is created empty, then
//! marked as being migrated into before any shard is written: a
//! directory's identity marker `FUSEE` is renamed to `FUSEE.migrating`
//! ([`fusee_storage::identity::MARKER_MIGRATING`]); a PostgreSQL schema's
//! `format` row moves to a `migrating` table
//! (`fusee_storage_postgres::migration`). Every backend refuses such a
//! store at open (a directory without a marker, a schema with an empty
//! format table), each naming the interrupted migration. Only after every
//! shard is written, the storage closed and the run-by-run comparison
//! passed is the mark taken back (a rename and a directory sync; one
//! transaction). The source is only read. So a crash or SIGKILL at any
//! point leaves the source untouched and the destination refused, and
//! running the command again starts the destination over (it recognises
//! its own mark and deletes what it holds; it deletes nothing else). One
//! window remains: after the backend created the empty store and before
//! the mark, a crash leaves an empty store (no shard) at the destination;
//! running the command again takes it, and an engine opening it sees an
//! empty store, never part of one.
//!
//! **The check.** [`compare`] rebuilds each shard of both stores as the
//! engine's recovery does ([`crate::inspect::rebuild`]) and compares, run
//! by run (newest first, one shard at a time, so memory stays that of one
//! shard's run table), the run's state and its whole journal's bytes, and
//! each shard's next run number; any difference is a
//! [`MigrateError::Mismatch`] naming the run.
//!
//! # Resharding
//!
//! [`reshard`] writes a store of another shard count through the same
//! steps (the destination created, marked incomplete, written, checked,
//! unmarked; the source only read), so an interrupted reshard leaves what
//! an interrupted migration does: the source whole and the destination
//! refused at open until the command runs again. The copy differs, since a
//! run's number is its shard's: a shard's commit cannot be carried over.
//!
//! **Rebuilt, then placed.** Every source shard is rebuilt as recovery
//! does ([`crate::inspect::rebuild`]: its index, checkpoint and log tail),
//! and each run it holds goes to `shard_of_hash` of its workflow-ID hash
//! under the new count. Destination shard `t` numbers its runs from 1 in
//! the order (source shard, old run number): the runs of one workflow ID
//! all come from one source shard, so they keep their order and the newest
//! (the one the ID index names) stays the newest. Workflow IDs stay; run
//! numbers change.
//!
//! **Links rewritten.** Every record's run becomes the run's new number; a
//! `Start`'s parent ([`ParentRef`](fusee_core::record::ParentRef): shard
//! and run) and origin, an `Update`'s caller, and the next run's `Start`
//! inside a handover `Done` are pointed at the new places. A link to a run
//! the source no longer holds (its retention ended) gets run [`GONE`]
//! (2^48 - 1), which no destination run has: it stays dangling, as it was,
//! never naming another run. Dedup keys (`send_dedup` of the sender's old
//! shard and run) are kept as recorded: they only need to be stable for
//! messages already sent, and those are carried as they were.
//!
//! **Written as a commit, no log.** A parked run becomes one `Park` or
//! `Done` frame (a `Delta` chain joined, as [`migrate`] does, by the same
//! frame copier with the run and journal rewritten) and an index record
//! keeping its hash, state and time; a loaded run (running, waiting, or
//! with a step in flight) goes into the checkpoint with its whole journal,
//! so the engine's recovery loads it and starts its code again. Every LSN
//! is 0 and every log is empty: the destination's recovery is its commit.
//!
//! **Messages in flight follow.** Each source shard's checkpoint outbox,
//! the messages its log tail regenerates (what recovery sends again), and,
//! from PostgreSQL, its inbox rows, have their parent links rewritten and
//! go into the checkpoint outbox of the destination shard they now go to;
//! the engine sends them at open, and targets deduplicate as for any
//! message sent twice (a child start by the child's ID and its parent,
//! both rewritten alike).
//!
//! **The check** rebuilds each destination shard and compares, run by
//! run, its state and journal with the source run's, journal rewritten by
//! the plan; it also checks that each run's workflow ID hashes to the
//! shard holding it, that each shard holds exactly the runs planned, and
//! that its next run number follows them. Memory: the source's rebuilt
//! shards are kept from the plan to the check (every shard's run table,
//! as an engine holds), plus 40 bytes a run for the plan.
//!
//! # Resharding while processes run
//!
//! A PostgreSQL store's shards are held under leases by engine processes
//! that keep running; [`reshard_taking_over`] takes the store from them
//! first, then reshards it into another schema (or directory). The
//! procedure, stop-the-world with a bounded pause:
//!
//! 1. The destination is checked free (a store there is refused) before
//!    anything else.
//! 2. **Retire** (`fusee_storage_postgres::retire`, one transaction): every
//!    shard's epoch moves and its owner becomes the mark `retired:
//!    resharded into <destination> with N shards`. It waits for the writes
//!    in flight; every later write of a running process is `Fenced` (its
//!    engine stops the shard and answers callers `NotOwner`; nothing it
//!    acknowledged is lost, since replies leave only once durable and what
//!    was durable is what the reshard reads), and every later open of the
//!    source, by anyone but this reshard, is refused as `Retired`, whatever
//!    the lease times. So no old-count owner writes after the switch.
//! 3. The source is read under the mark as owner name, and resharded as
//!    above; the destination opens only once checked.
//! 4. The operator restarts the processes on the destination with
//!    `Config::shards(N)`. The pause, from step 2 to the restart, is the
//!    reshard's time (measured in `benches/RESULTS.md`).
//!
//! A crash anywhere leaves the source whole and retired, the destination
//! refused as incomplete; the same command run again carries on (a
//! reshard into another destination is refused, naming the first).
//!
//! # Resharding in place
//!
//! [`reshard_in_place`] reshards a stopped store's directory `DIR` into
//! `DIR.reshard` (beside it, so on the same file system), then swaps the
//! two directories in one step ([`fusee_storage::dirs::exchange`], Linux's
//! `renameat2(RENAME_EXCHANGE)`, done while the old store's lock is held
//! so no engine has it open), then renames `DIR.reshard`, now the old
//! store, to `DIR.before-reshard`, kept until the operator deletes it. At
//! no moment does `DIR` name nothing or a half-written store: before the
//! swap it is the old store, after it the new one, checked. Run again
//! after a crash it finds where it was: an incomplete `DIR.reshard` is
//! started over; a whole one with the new count is swapped; a whole one
//! with the old count while `DIR` has the new one was swapped already and
//! is only renamed.
//!
//! # Interrupting for tests
//!
//! Every step reports an [`Event`] to the caller's progress function;
//! answering [`ControlFlow::Break`] stops the migration there as a crash
//! would (the destination is dropped unclosed, nothing is cleaned up),
//! which is how the tests interrupt it at every step boundary.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use fusee_core::shard::BlobRef;
use fusee_storage::identity::{MARKER, MARKER_MIGRATING};
use fusee_storage::{Storage, StorageError};

use crate::config::{OpenError, StorageConfig, open_storage};
use crate::inspect::{InspectError, StoreVisitor};
use crate::{AnyLog, AnyStorage, Backend};

mod check;
mod copy;
mod reshard;

pub(crate) use check::runs_in;
pub use check::{CheckReport, compare};
pub use copy::{CopyReport, Inboxes, copy_storage};
pub(crate) use copy::{SourceShard, copy_parts};
pub use reshard::GONE;

/// Why a migration failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// The source or destination could not be opened.
    #[error("{side}: {error}")]
    Open {
        /// `source` or `destination`.
        side: &'static str,
        /// Why (boxed: an open error is large, and every result of the
        /// migration carries this type).
        error: Box<OpenError>,
    },
    /// A store could not be read (opened read-only, or rebuilt).
    #[error("{side}: {error}")]
    Inspect {
        /// `source` or `destination`.
        side: &'static str,
        /// Why.
        error: InspectError,
    },
    /// A storage call failed.
    #[error("{side}{}: {error}", shard.map(|s| format!(", shard {s}")).unwrap_or_default())]
    Storage {
        /// `source` or `destination`.
        side: &'static str,
        /// The shard, if the call was about one.
        shard: Option<u32>,
        /// The storage's error.
        error: StorageError,
    },
    /// The source holds bytes the core refuses.
    #[error("source, shard {shard}: {what}: {detail}")]
    Damaged {
        /// The shard.
        shard: u32,
        /// What failed to decode.
        what: &'static str,
        /// The decoder's words.
        detail: String,
    },
    /// The destination already holds a store (with shards), or another
    /// program's files.
    #[error("destination {0} already holds a store: migrate into a new directory or schema")]
    TargetNotEmpty(String),
    /// Source and destination are the same place.
    #[error("the source and the destination are the same store")]
    SamePlace,
    /// A PostgreSQL shard's inbox holds messages, the shard never took a
    /// checkpoint, and the destination has no inbox to post them to.
    #[error(
        "source shard {0} holds inbox messages and no checkpoint: open the store with an \
         engine and close it (which checkpoints every shard), then migrate"
    )]
    InboxWithoutCheckpoint(u32),
    /// The two stores differ after the copy (see [`compare`]).
    #[error("shard {shard}, run {run}: {what}")]
    Mismatch {
        /// The shard.
        shard: u32,
        /// The run (0: the shard itself).
        run: u64,
        /// What differs.
        what: String,
    },
    /// A reshard taking over a live store was asked of a backend without
    /// leases: only PostgreSQL's processes can be fenced out.
    #[error(
        "--take-over needs a PostgreSQL source (its shards' leases fence the running processes); a {0} store is resharded with its engine stopped"
    )]
    TakeOverNeedsLeases(Backend),
    /// An in-place reshard found the old store of an earlier one kept
    /// beside the directory.
    #[error(
        "{} holds the store an earlier in-place reshard replaced: delete it (or move it away) first",
        .0.display()
    )]
    InPlaceLeftover(PathBuf),
    /// An in-place reshard was asked for the shard count the store has.
    #[error("the store already has {0} shards")]
    SameShardCount(u32),
    /// A reshard was asked for a shard count out of range.
    #[error("a store has 1 to {MAX_SHARDS} shards, not {0}")]
    ShardCount(u32),
    /// The progress function stopped the migration (tests' crash points).
    #[error("interrupted")]
    Interrupted,
}

impl From<InspectError> for MigrateError {
    /// Reading the source failed.
    fn from(error: InspectError) -> Self {
        Self::Inspect {
            side: "source",
            error,
        }
    }
}

impl MigrateError {
    pub(crate) fn storage(side: &'static str, shard: Option<u32>) -> impl Fn(StorageError) -> Self {
        move |error| Self::Storage { side, shard, error }
    }
}

/// A step of a migration, as the progress function hears it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A live source was retired (its `shards` shards' leases taken); the
    /// processes running on it are fenced out.
    Retired {
        /// How many shards the source had rows for.
        shards: u32,
    },
    /// The destination exists and is marked incomplete.
    Marked,
    /// A reshard reads source shard `shard` (rebuilt as recovery does) to
    /// plan where its runs go.
    Planning {
        /// The shard.
        shard: u32,
    },
    /// Copying shard `shard` of `shards` begins (a reshard: writing
    /// destination shard `shard`).
    Shard {
        /// The shard.
        shard: u32,
        /// How many shards the source (a reshard: the destination) holds.
        shards: u32,
    },
    /// Frames copied so far in this shard.
    Frames(u64),
    /// The shard's commit (index and checkpoint) is written.
    Committed,
    /// Log records copied so far in this shard.
    LogRecords(u64),
    /// The shard is copied.
    ShardDone,
    /// Comparing shard `shard` begins.
    Checking {
        /// The shard.
        shard: u32,
    },
    /// Runs compared so far in this shard.
    Checked(u64),
    /// The destination is whole and no longer marked.
    Complete,
    /// An in-place reshard swapped the new store into the directory.
    Swapped,
}

/// The progress function: told each [`Event`], it may stop the migration.
pub type Progress<'a> = &'a mut dyn FnMut(Event) -> ControlFlow<()>;

pub(crate) fn report(
    progress: &mut dyn FnMut(Event) -> ControlFlow<()>,
    e: Event,
) -> Result<(), MigrateError> {
    match progress(e) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(()) => Err(MigrateError::Interrupted),
    }
}

/// Where a migration reads.
#[derive(Clone, Debug)]
pub enum Source {
    /// A store's directory (its marker names the backend); opened
    /// read-only.
    Dir(PathBuf),
    /// A store opened through its configuration (PostgreSQL).
    Config(Box<StorageConfig>),
}

/// What a migration did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigrateReport {
    /// The copy.
    pub copy: CopyReport,
    /// The run-by-run comparison.
    pub check: CheckReport,
}

/// Migrates the store `source` into `target` (a new directory of
/// `target.backend`, or a PostgreSQL schema), checks the two hold the same
/// journals, and only then makes the destination openable (module docs).
/// The engine must be stopped: a directory an engine holds is refused
/// (locked). A destination an interrupted migration left is started over;
/// one holding a store is refused.
pub fn migrate(
    source: &Source,
    target: &StorageConfig,
    progress: Progress<'_>,
) -> Result<MigrateReport, MigrateError> {
    run(source, target, None, progress)
}

/// Reshards the store `source` into `target` (a new directory of
/// `target.backend`, or a PostgreSQL schema) with `shards` shards: every
/// run moved to the shard its workflow ID hashes to under the new count
/// and renumbered there, its links and the messages in flight rewritten
/// ([module docs](self#resharding)); then checked run by run against the
/// plan, and only then made openable, as [`migrate`] does. An engine opens
/// the result with `Config::shards(shards)`. A `shards` of 0 is refused.
pub fn reshard(
    source: &Source,
    target: &StorageConfig,
    shards: u32,
    progress: Progress<'_>,
) -> Result<MigrateReport, MigrateError> {
    check_shard_count(shards)?;
    run(source, target, Some(shards), progress)
}

/// The largest shard count [`reshard`] makes.
pub const MAX_SHARDS: u32 = 4096;

/// Where [`reshard_in_place`] writes the new store before the swap
/// (`DIR.reshard`), and where the old store is kept after it
/// (`DIR.before-reshard`): beside `dir` (its path made absolute, so `.`
/// or a trailing `/` name the directory itself), on its file system.
/// `None` for a path without a last component (`/`).
pub fn in_place_paths(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let name = dir.file_name()?.to_os_string();
    let beside = |suffix: &str| {
        let mut n = name.clone();
        n.push(suffix);
        dir.with_file_name(n)
    };
    Some((beside(".reshard"), beside(".before-reshard")))
}

/// What [`reshard_in_place`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InPlaceReport {
    /// The reshard's report, `None` when a run cut short after its copy was
    /// finished (only the swap was left).
    pub reshard: Option<MigrateReport>,
    /// Where the old store is kept (delete it once satisfied).
    pub before: PathBuf,
}

/// Reshards the stopped store in `dir` in place
/// ([module docs](self#resharding-in-place)): into `DIR.reshard` as
/// [`reshard`] does, then the two directories swapped in one step, the old
/// store kept at `DIR.before-reshard`. Run again after a crash at any
/// point, it carries on from where it was. Refused: a store that already
/// has `shards` shards, or a `DIR.before-reshard` left by an earlier one.
pub fn reshard_in_place(
    dir: &Path,
    shards: u32,
    progress: Progress<'_>,
) -> Result<InPlaceReport, MigrateError> {
    check_shard_count(shards)?;
    // Absolute, so that `.` is swapped as the directory it names.
    let dir = &dir.canonicalize().map_err(|error| MigrateError::Storage {
        side: "source",
        shard: None,
        error: StorageError::io(format!("finding {}", dir.display()), error),
    })?;
    let Some((next, before)) = in_place_paths(dir) else {
        return Err(MigrateError::Storage {
            side: "source",
            shard: None,
            error: StorageError::io(
                format!("placing a new store beside {}", dir.display()),
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the root directory has nothing beside it",
                ),
            ),
        });
    };
    if before.exists() {
        return Err(MigrateError::InPlaceLeftover(before));
    }
    let now = shard_count(dir)?;
    // A whole store at `next` is this command's, cut short: after its copy
    // (its count the one asked for), or after the swap (then `dir` has it).
    let done = if next.join(MARKER).exists() {
        shard_count(&next).ok()
    } else {
        None
    };
    let (reshard_report, swapped) = match done {
        Some(n) if now == shards && n != shards => (None, true),
        Some(n) if n == shards => (None, false),
        _ if now == shards => return Err(MigrateError::SameShardCount(shards)),
        _ => {
            let backend = crate::inspect::backend_of(dir)?;
            let target = StorageConfig::new(backend, &next);
            let r = reshard(&Source::Dir(dir.to_path_buf()), &target, shards, progress)?;
            (Some(r), false)
        }
    };
    if !swapped {
        // Under the old store's lock, so no engine holds it while it moves.
        crate::inspect::open_read_only(dir, Swap { dir, next: &next })?
            .map_err(MigrateError::storage("source", None))?;
        report(progress, Event::Swapped)?;
    }
    std::fs::rename(&next, &before).map_err(|error| MigrateError::Storage {
        side: "source",
        shard: None,
        error: StorageError::io(
            format!("renaming {} to {}", next.display(), before.display()),
            error,
        ),
    })?;
    if let Some(parent) = before.parent() {
        fusee_storage::dirs::sync_dir(parent).map_err(MigrateError::storage("source", None))?;
    }
    Ok(InPlaceReport {
        reshard: reshard_report,
        before,
    })
}

/// How many shards the stopped store in `dir` has.
fn shard_count(dir: &Path) -> Result<u32, MigrateError> {
    let shards = crate::inspect::open_read_only(dir, Shards)?
        .map_err(MigrateError::storage("source", None))?;
    Ok(u32::try_from(shards.len()).unwrap_or(u32::MAX))
}

/// Swaps `dir` and `next` while the store in `dir` is held open.
struct Swap<'a> {
    dir: &'a Path,
    next: &'a Path,
}

impl StoreVisitor for Swap<'_> {
    type Out = Result<(), StorageError>;
    fn visit<S: Storage>(self, _backend: Backend, _storage: &S) -> Self::Out {
        fusee_storage::dirs::exchange(self.dir, self.next)
    }
}

/// Reshards a PostgreSQL store that engine processes still run on, as
/// [`reshard`] does after taking it from them
/// ([module docs](self#resharding-while-processes-run)): the source is
/// first retired (every shard's lease taken, so each process's next
/// write there is refused as fenced and its shards stop; every later open
/// of the source is refused as `Retired`), then read and copied into
/// `target` with `shards` shards. The processes are then restarted on
/// `target` with `Config::shards(shards)`; calls meanwhile are answered
/// `NotOwner`. Run again after a crash, it carries on (the same
/// destination only). The destination is checked free before anything
/// is retired.
pub fn reshard_taking_over(
    source: &StorageConfig,
    target: &StorageConfig,
    shards: u32,
    progress: Progress<'_>,
) -> Result<MigrateReport, MigrateError> {
    check_shard_count(shards)?;
    if source.backend != Backend::Postgres {
        return Err(MigrateError::TakeOverNeedsLeases(source.backend));
    }
    let from = Source::Config(Box::new(source.clone()));
    same_place(&from, target)?;
    target_is_free(target)?;
    #[cfg(feature = "postgres")]
    {
        let why = format!("resharded into {} with {shards} shards", place(target));
        let owner = fusee_storage_postgres::retire::retired_owner(&why);
        let mut options = source.clone().existing_only().postgres_options();
        options.owner = Some(owner.clone());
        let src = fusee_storage_postgres::PgStorage::open(&options).map_err(|error| {
            MigrateError::Open {
                side: "source",
                error: Box::new(OpenError::Storage {
                    backend: Backend::Postgres,
                    dir: PathBuf::new(),
                    error,
                }),
            }
        })?;
        let retired = src
            .retire(&why)
            .map_err(MigrateError::storage("source", None));
        let _ = fusee_storage::Storage::close(&src);
        drop(src);
        let retired = retired?;
        report(
            progress,
            Event::Retired {
                shards: u32::try_from(retired.len()).unwrap_or(u32::MAX),
            },
        )?;
        let mut source = source.clone();
        source.postgres.owner = Some(owner);
        run(
            &Source::Config(Box::new(source)),
            target,
            Some(shards),
            progress,
        )
    }
    #[cfg(not(feature = "postgres"))]
    {
        let _ = progress;
        Err(MigrateError::TakeOverNeedsLeases(source.backend))
    }
}

/// Refuses a destination that is the source.
fn same_place(source: &Source, target: &StorageConfig) -> Result<(), MigrateError> {
    if let Source::Dir(dir) = source
        && target.backend != Backend::Postgres
        && same_dir(dir, &target.dir)
    {
        return Err(MigrateError::SamePlace);
    }
    if let Source::Config(config) = source
        && config.backend == target.backend
        && (config.backend != Backend::Postgres || config.postgres == target.postgres)
        && (config.backend == Backend::Postgres || same_dir(&config.dir, &target.dir))
    {
        return Err(MigrateError::SamePlace);
    }
    Ok(())
}

/// Refuses, before a live source is retired, a destination that
/// [`into_target`] would refuse (a store, or other files or tables);
/// deletes an interrupted migration's leftovers there.
fn target_is_free(target: &StorageConfig) -> Result<(), MigrateError> {
    prepare_target(target)?;
    if target.backend == Backend::Postgres || target.dir.join(MARKER).exists() {
        let dst = open_storage(&target.clone().existing_only());
        let dst = match dst {
            // Nothing there yet: the migration makes it.
            Err(OpenError::Storage {
                error: StorageError::NotFound { .. },
                ..
            }) => return Ok(()),
            Err(error) => {
                return Err(MigrateError::Open {
                    side: "destination",
                    error: Box::new(error),
                });
            }
            Ok(dst) => dst,
        };
        let free = refuse_a_store(&dst, target);
        let _ = dst.close();
        free?;
    }
    Ok(())
}

/// Refuses the destination `dst` (at `target`) if it holds a store: any
/// shard.
fn refuse_a_store(dst: &AnyStorage, target: &StorageConfig) -> Result<(), MigrateError> {
    let shards = dst
        .shards()
        .map_err(MigrateError::storage("destination", None))?;
    if shards.is_empty() {
        Ok(())
    } else {
        Err(MigrateError::TargetNotEmpty(place(target)))
    }
}

/// Refuses a shard count a reshard does not make.
fn check_shard_count(shards: u32) -> Result<(), MigrateError> {
    if shards == 0 || shards > MAX_SHARDS {
        return Err(MigrateError::ShardCount(shards));
    }
    Ok(())
}

fn run(
    source: &Source,
    target: &StorageConfig,
    shards: Option<u32>,
    progress: Progress<'_>,
) -> Result<MigrateReport, MigrateError> {
    same_place(source, target)?;
    match source {
        Source::Dir(dir) => crate::inspect::open_read_only(
            dir,
            Visit {
                target,
                shards,
                progress,
            },
        )?,
        Source::Config(config) => {
            // A source that is not there is an error, never a new store.
            let src = open_storage(&config.clone().existing_only()).map_err(|error| {
                MigrateError::Open {
                    side: "source",
                    error: Box::new(error),
                }
            })?;
            let r = into_target(&src, &mut AnyInbox, target, shards, progress);
            // Reading changed nothing worth keeping: a close only ends leases.
            let _ = src.close();
            r
        }
    }
}

/// The destination's part, once the source is open (so a source an engine
/// holds is refused before anything is created).
fn into_target<S: Storage>(
    src: &S,
    src_inbox: &mut dyn Inboxes<S::Log>,
    target: &StorageConfig,
    shards: Option<u32>,
    progress: Progress<'_>,
) -> Result<MigrateReport, MigrateError> {
    prepare_target(target)?;
    let dst = open_storage(target).map_err(|error| MigrateError::Open {
        side: "destination",
        error: Box::new(error),
    })?;
    refuse_a_store(&dst, target)?;
    mark_incomplete(&dst, target)?;
    report(progress, Event::Marked)?;
    let now = now_ms();
    let (copy, check) = match shards {
        None => {
            let copy = copy_storage(src, &dst, src_inbox, &mut AnyInbox, progress)?;
            (copy, compare(src, &dst, now, progress)?)
        }
        Some(shards) => {
            // The source is rebuilt once and kept for the write and the
            // check (memory: every shard's run table, as an engine's).
            let (mut views, plan) = reshard::plan(src, src_inbox, shards, now, progress)?;
            let copy = reshard::write(&mut views, &plan, &dst, now, progress)?;
            let check = reshard::check(&mut views, &plan, &dst, now, progress)?;
            (copy, check)
        }
    };
    mark_complete(dst, target)?;
    report(progress, Event::Complete)?;
    Ok(MigrateReport { copy, check })
}

struct Visit<'a, 'p> {
    target: &'a StorageConfig,
    shards: Option<u32>,
    progress: Progress<'p>,
}

impl StoreVisitor for Visit<'_, '_> {
    type Out = Result<MigrateReport, MigrateError>;
    fn visit<S: Storage>(self, _backend: Backend, storage: &S) -> Self::Out {
        into_target(
            storage,
            &mut NoInbox,
            self.target,
            self.shards,
            self.progress,
        )
    }
}

/// The time `compare` rebuilds at (only timers' due state depends on it,
/// and both sides see the same).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A source or destination without inbox tables.
pub(crate) struct NoInbox;

impl<L> Inboxes<L> for NoInbox {}

/// The inboxes of an [`AnyStorage`]: PostgreSQL's table, none otherwise.
pub(crate) struct AnyInbox;

impl Inboxes<AnyLog> for AnyInbox {
    fn present(&self) -> bool {
        cfg!(feature = "postgres")
    }

    #[allow(unused_variables)]
    fn take(&mut self, log: &mut AnyLog) -> Result<Vec<Vec<u8>>, StorageError> {
        #[cfg(feature = "postgres")]
        if let AnyLog::Postgres(log) = log {
            let mut inbox = log.inbox();
            let mut seen = Vec::new();
            let mut out = Vec::new();
            loop {
                let rows = inbox.read(&seen)?;
                if rows.is_empty() {
                    return Ok(out);
                }
                for row in rows {
                    seen.push(row.id);
                    out.push(row.body?);
                }
            }
        }
        Ok(Vec::new())
    }

    #[allow(unused_variables)]
    fn post(
        &mut self,
        log: &mut AnyLog,
        shard: u32,
        messages: &[Vec<u8>],
    ) -> Result<bool, StorageError> {
        #[cfg(feature = "postgres")]
        if let AnyLog::Postgres(log) = log {
            let rows: Vec<(u32, &[u8])> = messages.iter().map(|m| (shard, m.as_slice())).collect();
            log.inbox().post(&rows)?;
            return Ok(true);
        }
        Ok(false)
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn place(target: &StorageConfig) -> String {
    if target.backend == Backend::Postgres {
        format!(
            "schema {}",
            target.postgres.schema.as_deref().unwrap_or("fusee")
        )
    } else {
        target.dir.display().to_string()
    }
}

/// Deletes what an interrupted migration left at `target` (only if its
/// mark is there); refuses a directory holding anything else but an empty
/// store.
fn prepare_target(target: &StorageConfig) -> Result<(), MigrateError> {
    let io = |error: std::io::Error| MigrateError::Storage {
        side: "destination",
        shard: None,
        error: StorageError::io(format!("preparing {}", target.dir.display()), error),
    };
    match target.backend {
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            let options = target.postgres_options();
            fusee_storage_postgres::migration::drop_incomplete(&options)
                .map_err(MigrateError::storage("destination", None))?;
            Ok(())
        }
        _ => {
            let dir = &target.dir;
            if dir.join(MARKER).exists() {
                // A store: refused unless it is empty (a migration stopped
                // before its mark), judged without opening it for writing.
                let shards = match crate::inspect::open_read_only(dir, Shards) {
                    // A marker and no database yet: a store whose creation
                    // was cut short (the backend's open finishes it).
                    Err(InspectError::Storage {
                        error: StorageError::NotFound { .. },
                        ..
                    }) => Vec::new(),
                    Err(error) => {
                        return Err(MigrateError::Inspect {
                            side: "destination",
                            error,
                        });
                    }
                    Ok(shards) => shards.map_err(MigrateError::storage("destination", None))?,
                };
                if !shards.is_empty() {
                    return Err(MigrateError::TargetNotEmpty(place(target)));
                }
            } else if dir.join(MARKER_MIGRATING).exists() {
                std::fs::remove_dir_all(dir).map_err(io)?;
                if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                    fusee_storage::dirs::sync_dir(parent)
                        .map_err(MigrateError::storage("destination", None))?;
                }
            }
            Ok(())
        }
    }
}

/// The shards of a store opened read-only.
struct Shards;

impl StoreVisitor for Shards {
    type Out = Result<Vec<u32>, StorageError>;
    fn visit<S: Storage>(self, _backend: Backend, storage: &S) -> Self::Out {
        storage.shards()
    }
}

pub(crate) fn mark_incomplete(
    dst: &AnyStorage,
    target: &StorageConfig,
) -> Result<(), MigrateError> {
    let err = MigrateError::storage("destination", None);
    match dst {
        #[cfg(feature = "postgres")]
        AnyStorage::Postgres(pg) => pg.mark_incomplete().map_err(err),
        AnyStorage::Memory(_) => Ok(()),
        #[allow(unreachable_patterns)]
        _ => rename_marker(&target.dir, MARKER, MARKER_MIGRATING).map_err(err),
    }
}

/// Closes `dst` and takes the mark back: the destination opens from now on.
pub(crate) fn mark_complete(dst: AnyStorage, target: &StorageConfig) -> Result<(), MigrateError> {
    let err = MigrateError::storage("destination", None);
    #[cfg(feature = "postgres")]
    if let AnyStorage::Postgres(pg) = &dst {
        pg.mark_complete().map_err(&err)?;
    }
    dst.close().map_err(&err)?;
    let dir_backend = !matches!(dst, AnyStorage::Memory(_)) && target.backend != Backend::Postgres;
    // The database (and its lock) goes before the marker comes back.
    drop(dst);
    if dir_backend {
        rename_marker(&target.dir, MARKER_MIGRATING, MARKER).map_err(err)?;
    }
    Ok(())
}

fn rename_marker(dir: &Path, from: &str, to: &str) -> Result<(), StorageError> {
    std::fs::rename(dir.join(from), dir.join(to)).map_err(|e| {
        StorageError::io(format!("renaming {from} to {to} in {}", dir.display()), e)
    })?;
    fusee_storage::dirs::sync_dir(dir)
}

/// A frame address as the destination's index and checkpoint name it.
pub(crate) type Moved = rustc_hash::FxHashMap<BlobRef, BlobRef>;
