//! The persisted index: parked entries as 32-byte records, written as a base
//! (every parked run) or a delta (what changed since), and loaded back at
//! recovery.

use super::ShardCore;
use crate::record::RunId;
use crate::table::{self, Entry, Slot, flag};

/// Why [`ShardCore::load_index`] refused its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// The input is not a whole number of 32-byte records.
    #[error(
        "index frame of {len} bytes is not whole {}-byte records",
        table::RECORD
    )]
    NotWholeRecords {
        /// The input's length.
        len: usize,
    },
    /// A record is not a valid persisted entry.
    #[error("bad index record #{index}")]
    BadRecord {
        /// Its position in the input.
        index: usize,
    },
}

impl ShardCore {
    /// Marks a parked entry changed for the next delta.
    pub(super) fn mark_changed(&mut self, slot: Slot) {
        let e = self.runs.get_mut(slot);
        if e.has(flag::DIRTY) {
            return;
        }
        e.set(flag::DIRTY, true);
        let run = e.run();
        if !self.index_rebase {
            self.changed.push(run);
            self.check_index_lists();
        }
    }

    /// Notes a removed run for the next delta.
    pub(super) fn note_deleted(&mut self, run: RunId) {
        if !self.index_rebase {
            self.deleted.push(run);
            self.check_index_lists();
        }
    }

    /// Most runs the change lists hold before the next index write must be a
    /// base: an eighth of the parked runs (a delta that large costs an
    /// eighth of a base anyway), and at least 64 Ki.
    fn index_list_cap(&self) -> usize {
        (self.parked_count / 8).max(1 << 16)
    }

    fn check_index_lists(&mut self) {
        if self.changed.len() + self.deleted.len() > self.index_list_cap() {
            self.index_rebase = true;
            self.changed = Vec::new();
            self.deleted = Vec::new();
        }
    }

    /// Applies persisted index records, oldest frame first (recovery reads
    /// the base, then each delta): each record sets a parked run, or removes
    /// it (`DELETED`). The input is checked whole before anything changes,
    /// so a refused frame leaves the shard as it was.
    pub fn load_index(&mut self, records: &[u8]) -> Result<(), IndexError> {
        let (records, trailing) = records.as_chunks::<{ table::RECORD }>();
        if !trailing.is_empty() {
            return Err(IndexError::NotWholeRecords {
                len: records.len() * table::RECORD + trailing.len(),
            });
        }
        if let Some(index) = records.iter().position(|r| Entry::from_record(r).is_none()) {
            return Err(IndexError::BadRecord { index });
        }
        for e in records.iter().filter_map(Entry::from_record) {
            let run = e.run();
            if e.state() == table::DELETED {
                if let Some(slot) = self.runs.find_run(run) {
                    let gone = self.runs.remove(slot);
                    self.parked_count -= usize::from(gone.is_parked());
                }
                continue;
            }
            // Every run in the table is below `next_run`, so a base (in slot
            // order, mostly new runs) needs no lookup for most records.
            let known = run < self.next_run;
            self.next_run = self.next_run.max(run.saturating_add(1));
            let slot = match known.then(|| self.runs.find_run(run)).flatten() {
                Some(slot) if self.runs.get(slot).id_hash() != e.id_hash() => {
                    // A run's ID never changes: a record saying it did
                    // (damage) replaces the entry whole, so no ID bucket is
                    // left naming the old hash.
                    let gone = self.runs.remove(slot);
                    self.parked_count -= usize::from(gone.is_parked());
                    self.table_insert(e)
                }
                Some(slot) => {
                    self.edit(slot, |x| {
                        let in_id = x.has(flag::IN_ID);
                        *x = e;
                        x.set(flag::IN_ID, in_id);
                    });
                    slot
                }
                None => self.table_insert(e),
            };
            self.runs.index_id(slot);
        }
        Ok(())
    }

    /// Makes room for `n` more runs (before loading an index).
    pub fn reserve_runs(&mut self, n: usize) {
        self.runs.reserve(n);
    }

    /// After the last [`load_index`](Self::load_index): rebuilds the
    /// retention queue from the finished runs it restored.
    pub fn index_loaded(&mut self) {
        let finished: Vec<_> = self
            .runs
            .iter()
            .filter(|(_, e)| e.done().is_some())
            .map(|(_, e)| std::cmp::Reverse((e.time(), e.run())))
            .collect();
        self.retention.extend(finished);
    }

    /// Starts a new base: clears the change lists, after which
    /// [`index_snapshot`](Self::index_snapshot) lists every parked run.
    pub fn begin_index_snapshot(&mut self) {
        self.changed = Vec::new();
        self.deleted = Vec::new();
        self.index_rebase = false;
    }

    /// Appends index records for at most `max` parked runs from slot `from`
    /// on. Returns the slot to continue from, `None` once the table is done.
    pub fn index_snapshot(&mut self, from: Slot, max: usize, out: &mut Vec<u8>) -> Option<Slot> {
        let mut n = 0;
        for slot in from..self.runs.used() {
            if n == max {
                return Some(slot);
            }
            if self.runs.live_at(slot).is_none() {
                continue;
            }
            let e = self.runs.get_mut(slot);
            // Recorded as it is now: the change lists may have been dropped
            // with flags still set.
            e.set(flag::DIRTY, false);
            if e.is_parked() {
                out.extend_from_slice(&e.record());
                n += 1;
            }
        }
        None
    }

    /// While on, [`shrink`](Self::shrink) does not compact the table, so
    /// every entry keeps its slot: a base written over several
    /// [`index_snapshot`](Self::index_snapshot) calls visits every entry that
    /// was there when it began (entries added later go to the change lists).
    pub fn hold_slots(&mut self, on: bool) {
        self.slots_held = on;
    }

    /// The change lists overflowed: the next index write must be a base.
    pub fn index_needs_base(&self) -> bool {
        self.index_rebase
    }

    /// Appends index records for what changed since the last base or delta:
    /// parked runs as they are now, removed runs as `DELETED` records. A run
    /// that changed and is loaded again is left out (the checkpoint restores
    /// it).
    pub fn index_delta(&mut self, out: &mut Vec<u8>) {
        for run in std::mem::take(&mut self.changed) {
            let Some(slot) = self.runs.find_run(run) else {
                continue;
            };
            let e = self.runs.get_mut(slot);
            e.set(flag::DIRTY, false);
            if e.is_parked() {
                out.extend_from_slice(&e.record());
            }
        }
        for run in std::mem::take(&mut self.deleted) {
            out.extend_from_slice(&Entry::new(run, 0, table::DELETED).record());
        }
    }

    /// Records waiting for the next delta.
    pub fn index_pending(&self) -> usize {
        self.changed.len() + self.deleted.len()
    }
}
