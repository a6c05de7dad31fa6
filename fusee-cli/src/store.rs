//! Reading a store read-only: every shard rebuilt by `fusee::inspect`, and
//! what each command needs gathered into plain data while the store is open.

use std::path::Path;

use fusee::Backend;
use fusee::core::record::Lsn;
use fusee::inspect::{
    self, CheckpointInfo, InspectError, RunJournal, RunSummary, ShardView, StoreVisitor,
};
use fusee::storage::identity::{Identity, MARKER};
use fusee::storage::{RunStore, Storage};

use crate::CliError;
use crate::progress::Bar;

/// What a command asks of the store.
pub(crate) enum Request<'a> {
    /// Every shard's figures and every run.
    Overview,
    /// The latest run of this workflow ID, with its journal.
    Journal(&'a str),
    /// Every frame read and decoded, every problem kept.
    Verify,
}

/// One shard's figures.
#[derive(Debug)]
pub(crate) struct ShardFigures {
    pub(crate) shard: u32,
    pub(crate) first_lsn: Lsn,
    pub(crate) last_lsn: Lsn,
    pub(crate) replayed: u64,
    pub(crate) index_records: u64,
    pub(crate) store_position: u64,
    pub(crate) checkpoint: Option<CheckpointInfo>,
}

/// A problem the core's checks found (a shard that does not rebuild, a
/// frame that does not decode).
#[derive(Debug)]
pub(crate) struct CoreProblem {
    pub(crate) shard: u32,
    pub(crate) run: Option<u64>,
    pub(crate) error: InspectError,
}

/// What the store said.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    pub(crate) shards: Vec<ShardFigures>,
    pub(crate) runs: Vec<RunSummary>,
    pub(crate) journal: Option<RunJournal>,
    pub(crate) problems: Vec<CoreProblem>,
    /// Records replayed and frames checked (verify).
    pub(crate) checked: u64,
}

/// The Cargo feature of this command that reads `backend`'s directories,
/// and whether this build has it; `None` for a backend without
/// directories.
fn feature_of(backend: Backend) -> Option<(&'static str, bool)> {
    match backend {
        Backend::File => Some(("file", cfg!(feature = "file"))),
        Backend::Redb => Some(("redb", cfg!(feature = "redb"))),
        Backend::Rocksdb => Some(("rocksdb", cfg!(feature = "rocksdb"))),
        _ => None,
    }
}

/// Which backend made the store in `dir`, refused with the feature to
/// enable when this build of the command does not read it.
pub(crate) fn backend_of(dir: &Path) -> Result<Backend, CliError> {
    let refuse = |backend: Backend, feature| CliError::NotBuilt {
        what: format!("{}: a {backend} store", dir.display()),
        feature,
    };
    match inspect::backend_of(dir) {
        Ok(b) => match feature_of(b) {
            Some((feature, false)) => Err(refuse(b, feature)),
            _ => Ok(b),
        },
        Err(e) => {
            // The library refuses a backend it was built without in words;
            // the marker says which one, for the feature's name.
            if let Some(b) = marked_backend(dir)
                && let Some((feature, false)) = feature_of(b)
            {
                return Err(refuse(b, feature));
            }
            Err(e.into())
        }
    }
}

/// The backend `dir`'s identity marker names, if it reads as one.
fn marked_backend(dir: &Path) -> Option<Backend> {
    let bytes = std::fs::read(dir.join(MARKER)).ok()?;
    Identity::decode(&bytes, MARKER).ok()?.backend.parse().ok()
}

/// The store in `dir`, opened read-only, asked `request`.
pub(crate) fn gather(
    dir: &Path,
    expected: Option<Backend>,
    request: Request<'_>,
) -> Result<(Backend, Gathered), CliError> {
    let backend = backend_of(dir)?;
    if let Some(want) = expected
        && want != backend
    {
        return Err(InspectError::NotAStore {
            path: dir.to_path_buf(),
            why: format!("it holds a store of the {backend} backend, not {want}"),
        }
        .into());
    }
    let visitor = Gather { request };
    let gathered = inspect::open_read_only(dir, visitor)??;
    Ok((backend, gathered))
}

struct Gather<'a> {
    request: Request<'a>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl StoreVisitor for Gather<'_> {
    type Out = Result<Gathered, InspectError>;

    fn visit<S: Storage>(self, _backend: Backend, storage: &S) -> Self::Out {
        let shards = storage
            .shards()
            .map_err(|error| InspectError::Storage { shard: None, error })?;
        let verify = matches!(self.request, Request::Verify);
        let mut out = Gathered::default();
        let bar = Bar::new(shards.len() as u64, "shards");
        for shard in shards {
            bar.message(format!("shard {shard}"));
            let mut checked = 0u64;
            let rebuilt = inspect::rebuild(storage, shard, now_ms(), &mut |_| checked += 1);
            out.checked += checked;
            let mut view = match rebuilt {
                Ok(v) => v,
                Err(error) if verify => {
                    out.problems.push(CoreProblem {
                        shard,
                        run: None,
                        error,
                    });
                    bar.inc();
                    continue;
                }
                Err(e) => return Err(e),
            };
            out.shards.push(figures(&view));
            match self.request {
                Request::Overview => out.runs.extend(view.runs()?),
                Request::Journal(id) => {
                    if let Some(run) = view.find(id)? {
                        let journal = view.journal(run)?;
                        let newer = out
                            .journal
                            .as_ref()
                            .is_none_or(|j| j.summary.started_ms <= journal.summary.started_ms);
                        if newer {
                            out.journal = Some(journal);
                        }
                    }
                }
                Request::Verify => verify_shard(&mut view, &mut out),
            }
            bar.inc();
        }
        bar.finish();
        // Newest first across shards: by start time, then run number.
        out.runs
            .sort_by_key(|r| std::cmp::Reverse((r.started_ms, r.shard, r.run)));
        Ok(out)
    }
}

fn figures<R>(view: &ShardView<R>) -> ShardFigures {
    ShardFigures {
        shard: view.shard,
        first_lsn: view.first_lsn,
        last_lsn: view.last_lsn,
        replayed: view.replayed,
        index_records: view.index_records,
        store_position: view.store_position,
        checkpoint: view.checkpoint.clone(),
    }
}

fn verify_shard<R: RunStore>(view: &mut ShardView<R>, out: &mut Gathered) {
    let shard = view.shard;
    let mut checked = 0u64;
    let problems = &mut out.problems;
    view.verify(
        &mut |run, error| {
            problems.push(CoreProblem {
                shard,
                run: Some(run),
                error,
            });
        },
        &mut || checked += 1,
    );
    out.checked += checked;
}
