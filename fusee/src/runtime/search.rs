//! The shard's side of search attributes: its [`AttrIndex`] kept current
//! as records are appended, built from every run the first time a listing
//! filters by an attribute after an open, and the listing's pages walked
//! through it (format, rules and costs: [`crate::attrs`]).

use fusee_core::record::{Record, RecordBuf, RunId, Status, iter_canonical};
use fusee_storage::StorageError;

use super::ShardLoop;
use crate::attrs::{self, AttrIndex};
use crate::client::{LIST_VISITS_MAX, ListFilter, ShardPage};

/// Runs asked of the index per round of a page.
const BATCH: usize = 256;

impl ShardLoop {
    /// Keeps the index current after `rec` was applied: an `Attributes`
    /// record or a `Start` changes its run's attributes, and a `Done` that
    /// hands over starts the next run, whose `Start` meta may carry some.
    pub(super) fn index_attributes(&mut self, rec: &RecordBuf) {
        let run = match rec {
            RecordBuf::Attributes { run, .. } => *run,
            RecordBuf::Start { run, meta, .. } => {
                if meta.is_none() && !self.attr_index.has(*run) {
                    return;
                }
                *run
            }
            RecordBuf::Done {
                status: Status::ContinuedAsNew | Status::Reset,
                payload,
                ..
            } => match iter_canonical(payload).next() {
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
            let now = attrs::fold(l.meta.as_deref(), l.attrs.iter().map(|p| &p[..]));
            self.attr_index.set(run, &now);
        }
    }

    /// Reads every run not yet in the index into it (loaded runs from
    /// memory, parked ones from their frames), once per open.
    fn build_attr_index(&mut self) -> Result<(), StorageError> {
        if self.attr_index.built() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut cursor = self.core.newest_first_below(RunId::MAX);
        let mut read = 0u64;
        loop {
            let batch = cursor.next_batch(&self.core, 4096);
            if batch.is_empty() {
                break;
            }
            for run in batch {
                if self.attr_index.has(run) {
                    continue;
                }
                if self.core.get(run).is_some() {
                    self.reindex_loaded(run);
                } else if let Some(p) = self.core.parked(run) {
                    let frame = self.read_frame(p.blob())?;
                    read += 1;
                    let (now, _) = attrs::of_journal(&frame.journal);
                    self.attr_index.set(run, &now);
                }
            }
        }
        self.attr_index.set_built();
        tracing::info!(
            shard = self.shard,
            frames = read,
            ms = started.elapsed().as_millis() as u64,
            "search attribute index built"
        );
        Ok(())
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
        self.build_attr_index()
            .map_err(|error| crate::error::Error::Storage { shard, error })?;
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
            let batch = self.attr_index.candidates(&driver, next, BATCH);
            if batch.is_empty() {
                break;
            }
            for run in batch {
                if page.runs.len() == limit || visited == LIST_VISITS_MAX {
                    page.resume = Some(next);
                    break 'walk;
                }
                visited += 1;
                next = run;
                if !self.attr_index.admits(run, conds) {
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
