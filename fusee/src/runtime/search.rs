//! The shard's side of search attributes: its [`AttrIndex`] kept current
//! as records are appended, read at open from the snapshot a close wrote
//! or else built from every run newest first (in the background after an
//! open, and as far as a filtered listing's page needs), and the listing's
//! pages walked through it (format, rules and costs: [`crate::attrs`]).
//!
//! # The snapshot's life
//!
//! Every checkpoint names the index's snapshot as it stands at that
//! checkpoint (`Checkpoint::attr_frames`): a base and the deltas since
//! (`attrs/snapshot.rs`). A checkpoint writes a delta of the runs changed
//! since the last frame, or, when there is no base yet, when the deltas
//! together pass a quarter of the base's bytes, or when there are
//! [`DELTAS_MAX`] of them, a new base (releasing the old frames, which the
//! checkpoint no longer names). So the frames a checkpoint names are
//! exactly the index of that checkpoint (the log is wholly durable at a
//! checkpoint, and the index changes only with records appended), and an
//! open reads them, then indexes again the loaded runs the log after that
//! checkpoint changed: after a clean close or a crash alike. Nothing is
//! written before the index is built (its build after an open without a
//! snapshot), and nothing at all for a shard whose runs carry no
//! attribute. A compaction that moves the frames has their names follow.
//! Their writes are counted towards compaction like any frame's: a base
//! rewritten leaves the old one to reclaim.

use fusee_core::record::{Lsn, Name, Record, RunId, Status, iter_canonical};
use fusee_core::shard::BlobRef;
use fusee_core::store::Checkpoint;
use fusee_storage::{RunStore, StorageError};

use super::ShardLoop;
use super::parking::PREFETCH_RUNS;
use crate::attrs::{self, AttrIndex, SnapshotError};
use crate::client::{LIST_VISITS_MAX, ListFilter, ShardPage};

/// Runs asked of the index per round of a page.
const BATCH: usize = 256;

/// Newest runs whose frames the open reads to guess whether the shard
/// uses attributes.
const PROBE: usize = 64;

/// Largest frame the open's guess reads (64 KiB): a stream's journal of
/// megabytes is not read at every open for a guess. A store whose newest
/// runs are all longer gets its index built by its first filtered page.
const PROBE_FRAME_BYTES_MAX: u32 = 64 << 10;

/// Runs the background build reads per loop iteration (a few ms of the
/// shard's time).
pub(super) const BUILD_BATCH: usize = 1024;

/// Most deltas after a base before a checkpoint writes a new base (one
/// prefetch of frames reads them all at an open).
const DELTAS_MAX: usize = 256;

/// A new base once the deltas pass this fraction of the base's bytes
/// (1/4): an open applies deltas run by run, several times slower than it
/// reads a base, and the base's rewrite costs at most 4 bytes written per
/// byte of change.
const REBASE_FRACTION: u64 = 4;

/// The index's snapshot frames the last commit names: the base's parts,
/// then the deltas (none before the index was first built).
#[derive(Default)]
pub(super) struct Snapshot {
    pub(super) frames: Vec<BlobRef>,
    /// How many of `frames` are the base's.
    base: usize,
}

impl Snapshot {
    /// What checkpoint `cp` names (the base's size is known once read).
    pub(super) fn named(cp: &Checkpoint) -> Self {
        Self {
            frames: cp.attr_frames.clone(),
            base: cp.attr_frames.len(),
        }
    }

    fn bytes(frames: &[BlobRef]) -> u64 {
        frames.iter().map(|b| u64::from(b.len)).sum()
    }

    /// Whether the next frame should be a new base.
    fn rebase_due(&self) -> bool {
        let (base, deltas) = self.frames.split_at(self.base.min(self.frames.len()));
        base.is_empty()
            || deltas.len() >= DELTAS_MAX
            || REBASE_FRACTION * Self::bytes(deltas) > Self::bytes(base)
    }

    /// A compaction moved frames: the names follow them.
    pub(super) fn moved(&mut self, moves: &[(BlobRef, BlobRef)]) {
        if self.frames.is_empty() {
            return;
        }
        let to: rustc_hash::FxHashMap<u64, BlobRef> =
            moves.iter().map(|(old, new)| (old.offset, *new)).collect();
        for f in &mut self.frames {
            if let Some(&new) = to.get(&f.offset) {
                *f = new;
            }
        }
    }
}

impl ShardLoop {
    /// At open: the index from the snapshot the last checkpoint names, the
    /// loaded runs the log after it (past `checkpoint_lsn`)
    /// changed indexed again; else (none, or one that does not read: it is
    /// logged, and its frames released by the next checkpoint) the
    /// background build if the shard uses attributes.
    pub(super) fn open_attr_index(&mut self, named: Snapshot, checkpoint_lsn: Lsn) {
        self.attr_snapshot = named;
        if !self.attr_snapshot.frames.is_empty() {
            match self.read_attr_snapshot() {
                Ok((index, base)) => {
                    self.attr_index = index;
                    self.attr_snapshot.base = base;
                    let changed: Vec<RunId> = self
                        .core
                        .loaded_runs()
                        .filter(|(_, l)| l.last_lsn > checkpoint_lsn)
                        .map(|(run, _)| run)
                        .collect();
                    for run in changed {
                        self.reindex_loaded(run);
                    }
                    tracing::debug!(
                        shard = self.shard,
                        frames = self.attr_snapshot.frames.len(),
                        "search attribute index read from its snapshot"
                    );
                    return;
                }
                Err(e) => {
                    tracing::warn!(
                        shard = self.shard,
                        error = %e,
                        "search attribute snapshot unreadable; building the index from the runs"
                    );
                    // Its frames go at the next checkpoint, with a new base.
                    self.attr_snapshot.base = 0;
                }
            }
        }
        self.want_attr_index_if_used();
    }

    /// The index the snapshot frames hold, and how many are the base's.
    fn read_attr_snapshot(&mut self) -> Result<(AttrIndex, usize), SnapshotError> {
        let named = self.attr_snapshot.frames.clone();
        // Where reads are round trips, one fetch (a base and its deltas).
        let _ = self.store.prefetch(&named);
        let mut frames = Vec::with_capacity(named.len());
        for blob in named {
            let mut buf = Vec::new();
            self.read_one(blob, &mut buf)?;
            frames.push(buf);
        }
        AttrIndex::from_snapshot(&frames)
    }

    /// Whether a close must take a checkpoint for the snapshot alone: the
    /// index is built and used, and the last commit names no snapshot.
    pub(super) fn attr_snapshot_wanted(&self) -> bool {
        self.attr_snapshot.frames.is_empty() && self.attr_index.built() && self.attr_index.used()
    }

    /// At a checkpoint (after any compaction): the snapshot frames it
    /// names, a delta or a new base written first (see the module docs).
    pub(super) fn attr_frames_at_checkpoint(&mut self) -> Result<Vec<BlobRef>, StorageError> {
        if !(self.attr_index.built() && self.attr_index.used()) {
            // Nothing to keep: changes are not counted against anything.
            self.attr_index.forget_changes();
            self.release_attr_snapshot()?;
            return Ok(Vec::new());
        }
        if self.attr_snapshot.rebase_due() {
            self.release_attr_snapshot()?;
            for frame in self.attr_index.snapshot_frames() {
                let blob = self.store_frame(&frame)?;
                self.attr_snapshot.frames.push(blob);
            }
            self.attr_snapshot.base = self.attr_snapshot.frames.len();
        } else {
            let seq = (self.attr_snapshot.frames.len() - self.attr_snapshot.base) as u32;
            if let Some(frame) = self.attr_index.delta_frame(seq)
                && !self.sabotaged(super::sabotage::Sabotage::DeltaDropped)
            {
                let blob = self.store_frame(&frame)?;
                self.attr_snapshot.frames.push(blob);
            }
        }
        self.attr_index.forget_changes();
        Ok(self.attr_snapshot.frames.clone())
    }

    /// The snapshot frames the last commit named are released (the commit
    /// being made names none of them).
    fn release_attr_snapshot(&mut self) -> Result<(), StorageError> {
        for blob in std::mem::take(&mut self.attr_snapshot.frames) {
            self.release_frame(blob)?;
        }
        self.attr_snapshot.base = 0;
        Ok(())
    }

    /// Keeps the index current after `rec` was applied: an `Attributes`
    /// record or a `Start` changes its run's attributes, and a `Done` that
    /// hands over starts the next run, whose `Start` meta may carry some.
    pub(super) fn index_attributes<B: AsRef<[u8]>>(&mut self, rec: &Record<Name, B>) {
        let run = match rec {
            Record::Attributes { run, .. } => *run,
            Record::Start { run, meta, .. } => {
                if meta.is_none() && !self.attr_index.has(*run) {
                    return;
                }
                *run
            }
            Record::Done {
                status: Status::ContinuedAsNew | Status::Reset,
                payload,
                ..
            } => match iter_canonical(payload.as_ref()).next() {
                Some(Ok((Record::Start { run, .. }, _))) => run,
                _ => return,
            },
            _ => return,
        };
        self.reindex_loaded(run);
    }

    /// Sets loaded run `run`'s entry from its `Start` meta and records.
    fn reindex_loaded(&mut self, run: RunId) {
        if let Some(l) = self.core.get(run) {
            let now = attrs::fold(l.meta.as_deref(), l.attrs().iter().map(|p| &p[..]));
            self.attr_index.set(run, &now);
        }
    }

    /// The background build's share of one loop iteration: at most
    /// [`BUILD_BATCH`] runs read, newest first, from where it stands.
    /// Whether it is done.
    pub(super) fn build_attr_index_some(&mut self, batch: usize) -> Result<bool, StorageError> {
        if self.attr_index.built() {
            return Ok(true);
        }
        let mut cursor = self.core.newest_first_below(self.attr_index.build_below());
        let runs = cursor.next_batch(&self.core, batch);
        let Some(&last) = runs.last() else {
            self.attr_index.set_built();
            tracing::info!(shard = self.shard, "search attribute index built");
            return Ok(true);
        };
        for part in runs.chunks(PREFETCH_RUNS) {
            // One fetch for the part's frames where reads are round trips
            // (a million parked runs read one by one from PostgreSQL took
            // minutes).
            let unread: Vec<RunId> = part
                .iter()
                .copied()
                .filter(|&r| !self.attr_index.has(r))
                .collect();
            self.prefetch_parked(unread.into_iter());
            for &run in part {
                if self.attr_index.has(run) {
                    continue;
                }
                if self.core.get(run).is_some() {
                    self.reindex_loaded(run);
                } else if let Some(p) = self.core.parked(run) {
                    // Attributes are records, not chunks: those set apart
                    // stay unread.
                    let frame = self.read_frame_apart(p.blob())?;
                    let (now, _) = attrs::of_journal(&frame.journal);
                    self.attr_index.set(run, &now);
                }
            }
        }
        self.attr_index.built_down_to(last);
        Ok(false)
    }

    /// At open: the background build is wanted if a loaded run holds
    /// attributes, or one of the [`PROBE`] newest parked runs does (their
    /// frames of at most [`PROBE_FRAME_BYTES_MAX`] read: a store that uses
    /// attributes has them on its recent runs). Payloads without
    /// attributes are not parsed.
    pub(super) fn want_attr_index_if_used(&mut self) {
        let used = self.core.loaded_runs().any(|(_, l)| {
            let meta = l.meta.as_deref().map(|m| &m.attributes[..]);
            meta.into_iter()
                .chain(l.attrs().iter().map(|p| &p[..]))
                .any(|p| !attrs::fold(None, [p]).is_empty())
        });
        if used {
            self.attr_index.want();
            return;
        }
        let mut cursor = self.core.newest_first_below(RunId::MAX);
        let newest: Vec<RunId> = cursor
            .next_batch(&self.core, PROBE)
            .into_iter()
            .filter(|&run| {
                self.core
                    .parked(run)
                    .is_some_and(|p| p.blob().len <= PROBE_FRAME_BYTES_MAX)
            })
            .collect();
        self.prefetch_parked(newest.iter().copied());
        for run in newest {
            let Some(p) = self.core.parked(run) else {
                continue;
            };
            // A frame that does not read is the build's (or a load's) to
            // report: the probe only guesses.
            let Ok(frame) = self.read_frame_apart(p.blob()) else {
                continue;
            };
            if !attrs::of_journal(&frame.journal).0.is_empty() {
                self.attr_index.want();
                return;
            }
        }
    }

    /// One shard's page of runs below `below` passing `filter`, which has
    /// attribute conditions: walked newest first through the index by one
    /// condition, the others, the status and the type checked per run.
    pub(super) fn attr_page(
        &mut self,
        filter: &ListFilter,
        below: RunId,
    ) -> Result<ShardPage, crate::error::Error> {
        let shard = self.shard;
        let storage = |error| crate::error::Error::Storage { shard, error };
        let conds = filter.conditions();
        let Some(driver) = AttrIndex::driver(conds).cloned() else {
            return Ok(ShardPage::default());
        };
        let limit = filter.limit_value();
        let mut page = ShardPage::default();
        let mut visited = 0usize;
        let mut next = below;
        let mut gone = Vec::new();
        'walk: loop {
            // Runs at or above the build's frontier are all in the index;
            // below it only those changed since the open are. The page
            // takes only the former, and reads more of the shard (newest
            // first) when it runs out: a listing right after an open reads
            // what its page needs, not every run.
            let built = self.attr_index.built();
            let frontier = if built {
                0
            } else {
                self.attr_index.build_below()
            };
            let batch = self.attr_index.candidates(&driver, next, BATCH);
            let exact = batch.iter().take_while(|&&run| run >= frontier).count();
            if exact == 0 {
                if built {
                    break;
                }
                self.build_attr_index_some(BUILD_BATCH).map_err(storage)?;
                continue;
            }
            // Each candidate judged once: the admitted ones are read in one
            // fetch where reads are round trips, then summed up.
            let admitted: Vec<bool> = batch[..exact]
                .iter()
                .map(|&run| self.attr_index.admits(run, conds))
                .collect();
            let wanted = limit.saturating_sub(page.runs.len());
            let fetch = batch[..exact].iter().zip(&admitted);
            self.prefetch_parked(fetch.filter(|(_, a)| **a).map(|(r, _)| *r).take(wanted));
            for (&run, admitted) in batch[..exact].iter().zip(admitted) {
                if page.runs.len() == limit || visited == LIST_VISITS_MAX {
                    page.resume = Some(next);
                    break 'walk;
                }
                visited += 1;
                next = run;
                if !admitted {
                    continue;
                }
                match self.summary(run, filter) {
                    Some(s) => page.runs.push(s),
                    // Expired since it was indexed.
                    None if self.core.get(run).is_none() && self.core.parked(run).is_none() => {
                        gone.push(run)
                    }
                    None => {}
                }
            }
        }
        for run in gone {
            self.attr_index.remove(run);
        }
        Ok(page)
    }
}
