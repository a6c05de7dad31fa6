//! Runs leaving memory for the run store and coming back, and where their
//! frames are.

use std::cmp::Reverse;

use super::run::LoadedRun;
use super::{BlobRef, Mode, ParkedRun, SPARE_RUNS, ShardCore, StoredPrefix, TimerKey};
use crate::record::{
    Lsn, Payload, Record, RecordBuf, RunId, Status, Walked, iter_canonical_passing, kind,
};
use crate::store::ApartRun;
use crate::table::{self, Entry, flag};
use crate::wire::DecodeError;
use crate::wire::hash_id;

/// The table state of a parked run: suspended, or finished with a status.
fn parked_state(done: Option<Status>) -> u8 {
    match done {
        Some(s) => table::DONE + s as u8,
        None => table::PARKED,
    }
}

impl ShardCore {
    /// Moves a loaded run out of memory: the host has written its journal to
    /// `blob` (`chained`: a `Delta` frame extending earlier ones). Its entry
    /// keeps its earliest timer (or finish time); a timer within the horizon
    /// goes into the wheel of loads. `None` if the run is not loaded.
    pub fn park(&mut self, run_id: RunId, blob: BlobRef, chained: bool) -> Option<ParkedRun> {
        self.park_linked(run_id, blob, chained, false)
    }

    /// [`park`](Self::park) of a run whose frame may also name `Stream`
    /// frames holding its chunks set apart (`apart`: the table's
    /// [`flag::APART`], which compaction and release go by).
    pub fn park_linked(
        &mut self,
        run_id: RunId,
        blob: BlobRef,
        chained: bool,
        apart: bool,
    ) -> Option<ParkedRun> {
        let run = self.loaded.remove(&run_id)?;
        self.journal_bytes = self.journal_bytes.saturating_sub(run.journal.len());
        let done = run.done.map(|(status, _)| status);
        let time = match run.done {
            Some((_, finished_ms)) => finished_ms,
            None => run.armed.iter().map(|a| a.2).min().unwrap_or(0),
        };
        let state = parked_state(done);
        let slot = match self.runs.find_run(run_id) {
            Some(slot) => slot,
            None => {
                let slot = self.table_insert(Entry::new(run_id, hash_id(&run.id), state));
                self.runs.index_id(slot);
                slot
            }
        };
        let near = done.is_none() && time != 0 && time < self.horizon_end();
        self.edit(slot, |e| {
            e.set_state(state);
            e.set_location(blob.offset, blob.len);
            e.set_time(time);
            e.set(flag::PENDING, false);
            e.set(flag::NEAR, near);
            e.set(flag::CHAINED, chained);
            e.set(flag::APART, apart);
        });
        self.mark_changed(slot);
        if near {
            self.near.insert(time, run_id);
        }
        self.recycle(run);
        Some(ParkedRun::new(blob, done))
    }

    /// Loads a parked run back from its decoded journal (`last_lsn` from its
    /// frame). If its timer came due while it was parked (it asked for this
    /// load), its due timers fire now. False, changing nothing, if the run
    /// is not parked or the journal does not begin with a `Start`.
    ///
    /// The run's stored prefix is taken to be its one newest frame (depth
    /// 0): a host whose frame extends older ones says how deep the chain is
    /// with [`set_blob`](Self::set_blob), or its next `Delta` would chain
    /// past the depth it can read back.
    pub fn unpark(
        &mut self,
        run_id: RunId,
        last_lsn: Lsn,
        blob_records: &[RecordBuf],
        now_ms: u64,
    ) -> bool {
        let starts =
            matches!(blob_records.first(), Some(Record::Start { run, .. }) if *run == run_id);
        self.unpark_with(run_id, starts, last_lsn, now_ms, |core| {
            for rec in blob_records {
                core.apply(last_lsn, rec, Mode::BLOB);
            }
        })
    }

    /// [`unpark`](Self::unpark) from the journal's canonical bytes, each
    /// record applied as it is read (borrowed: no record is copied, so a
    /// long journal, a stream's chunks say, costs no allocation per
    /// record). A record that does not decode is `Err`, changing nothing
    /// (the bytes are checked before any is applied).
    ///
    /// Stream chunks are framed, not decoded
    /// ([`apply_passed_chunks`](Self::apply_passed_chunks)): a stream of
    /// 100,000 chunks costs two varint walks, not 200,000 decodes (the
    /// journal comes from a frame whose crc was checked).
    pub fn unpark_encoded(
        &mut self,
        run_id: RunId,
        last_lsn: Lsn,
        journal: &[u8],
        apart: &[ApartRun],
        now_ms: u64,
    ) -> Result<bool, DecodeError> {
        let mut starts = None;
        for item in iter_canonical_passing(journal, kind::CHUNK) {
            let first = match item? {
                Walked::Record(rec, _) => matches!(rec, Record::Start { run, .. } if run == run_id),
                Walked::Passed { .. } => false,
            };
            starts.get_or_insert(first);
        }
        // A run set apart before the first record would precede its
        // `Start`: not a run's journal.
        let starts = starts == Some(true) && apart.first().is_none_or(|r| r.at > 0);
        let mut applied = Ok(());
        let loaded = self.unpark_with(run_id, starts, last_lsn, now_ms, |core| {
            // Every record decoded above: only a misplaced run fails.
            applied = core.apply_journal_apart(last_lsn, run_id, Mode::BLOB, journal, apart);
        });
        applied.map(|()| loaded)
    }

    /// What both unparks share: `apply` applies the journal (which
    /// `starts` with the run's `Start`) in [`Mode::BLOB`].
    fn unpark_with(
        &mut self,
        run_id: RunId,
        starts: bool,
        last_lsn: Lsn,
        now_ms: u64,
        apply: impl FnOnce(&mut Self),
    ) -> bool {
        let Some(slot) = self.runs.find_run(run_id) else {
            return false;
        };
        let e = *self.runs.get(slot);
        if !e.is_parked() || !starts {
            return false;
        }
        let load_asked = e.has(flag::PENDING);
        apply(self);
        let Some(l) = self.loaded.get_mut(&run_id) else {
            return false;
        };
        l.blob = Some(e_blob(&e));
        l.blob_chain = u64::from(e.len());
        l.blob_depth = 0;
        // Set by the host's `set_blob`, which knows the frame's journal.
        l.blob_journal = 0;
        l.set_blob_apart(false);
        self.journal_bytes = self.journal_bytes.saturating_sub(l.journal.len());
        l.journal.clear();
        l.journal_records = 0;
        l.last_lsn = last_lsn;
        // Rebuilding the run armed its timers again; those that came due
        // while it was parked fire now.
        if load_asked {
            let mut due = std::mem::take(&mut self.scratch_keys);
            due.clear();
            due.extend(
                l.armed
                    .iter()
                    .filter(|a| a.2 <= now_ms)
                    .map(|&(seq, kind, _)| TimerKey {
                        run: run_id,
                        seq,
                        kind,
                    }),
            );
            for &key in &due {
                self.fire(key, now_ms);
            }
            due.clear();
            self.scratch_keys = due;
        }
        true
    }

    /// Restores a parked run at recovery (from a run-store scan or the
    /// persisted index). `time`: its earliest timer, or when it finished;
    /// `flags`: the persisted table flags its frame calls for
    /// ([`flag::CHAINED`] for a `Delta`, [`flag::APART`] for a frame that
    /// names `Stream` frames; others are ignored). Ignored for a loaded
    /// run.
    pub fn insert_parked(
        &mut self,
        run: RunId,
        blob: BlobRef,
        done: Option<Status>,
        flags: u8,
        id_hash: u64,
        time: u64,
    ) {
        self.next_run = self.next_run.max(run.saturating_add(1));
        if self.loaded.contains_key(&run) {
            return;
        }
        let state = parked_state(done);
        let slot = match self.runs.find_run(run) {
            Some(slot) => slot,
            None => self.table_insert(Entry::new(run, id_hash, state)),
        };
        self.edit(slot, |e| {
            e.set_state(state);
            e.set_location(blob.offset, blob.len);
            e.set_time(time);
            e.set(flag::PERSISTED, false);
            e.set(flags & flag::PERSISTED, true);
        });
        self.runs.index_id(slot);
        if done.is_some() {
            self.retention.push(Reverse((time, run)));
        }
    }

    /// Parked runs whose frame is a `Delta` (compaction rewrites them whole).
    pub fn chained_runs(&self) -> impl Iterator<Item = (RunId, BlobRef)> + '_ {
        self.runs
            .iter()
            .filter(|(_, e)| e.is_parked() && e.has(flag::CHAINED))
            .map(|(_, e)| (e.run(), e_blob(e)))
    }

    /// Parked runs whose frame names `Stream` frames (compaction writes
    /// them again when those move).
    pub fn apart_runs(&self) -> impl Iterator<Item = (RunId, BlobRef)> + '_ {
        self.runs
            .iter()
            .filter(|(_, e)| e.is_parked() && e.has(flag::APART))
            .map(|(_, e)| (e.run(), e_blob(e)))
    }

    /// A parked run's frame was rewritten whole at `blob` (before a
    /// compaction, or a finished run's let go of its history), naming
    /// `Stream` frames if `apart`.
    pub fn reparked(&mut self, run: RunId, blob: BlobRef, apart: bool) {
        let Some(slot) = self.runs.find_run(run) else {
            return;
        };
        if !self.runs.get(slot).is_parked() {
            return;
        }
        let e = self.runs.get_mut(slot);
        e.set_location(blob.offset, blob.len);
        e.set(flag::CHAINED, false);
        e.set(flag::APART, apart);
        self.mark_changed(slot);
    }

    /// Run `run`'s newest stored frame was written again, whole, at
    /// `blob` (naming `Stream` frames if `apart`): a parked run's frame
    /// ([`reparked`](Self::reparked)), or a loaded run's stored prefix,
    /// which holds the same records in one frame now.
    pub fn rewritten_whole(&mut self, run: RunId, blob: BlobRef, apart: bool) {
        if let Some(l) = self.loaded.get_mut(&run) {
            let stored = StoredPrefix {
                chain: u64::from(blob.len),
                depth: 0,
                journal_len: l.blob_journal,
                apart,
            };
            self.set_blob(run, blob, stored);
            return;
        }
        self.reparked(run, blob, apart);
    }

    /// A run's frame moved to `offset` (compaction): a loaded run's stored
    /// prefix, or a parked run's frame. The loaded journal and timers stay.
    pub fn relocate_blob(&mut self, run: RunId, offset: u64) {
        if let Some(blob) = self.loaded.get_mut(&run).and_then(|l| l.blob.as_mut()) {
            blob.offset = offset;
            return;
        }
        let Some(slot) = self.runs.find_run(run) else {
            return;
        };
        if self.runs.get(slot).is_parked() {
            let len = self.runs.get(slot).len();
            self.runs.get_mut(slot).set_location(offset, len);
            self.mark_changed(slot);
        }
    }

    /// The host stored a loaded run's journal in the run store: `blob` is
    /// the newest frame, `chain` the bytes of it and the frames it extends,
    /// `depth` how many it extends, `apart` whether its frames name
    /// `Stream` frames. The in-memory journal is dropped.
    pub fn spilled(&mut self, run: RunId, blob: BlobRef, chain: u64, depth: u8, apart: bool) {
        if let Some(l) = self.loaded.get_mut(&run) {
            l.blob = Some(blob);
            l.blob_chain = chain;
            l.blob_depth = depth;
            l.set_blob_apart(apart);
            // The frame holds the prefix before it and what was in memory.
            l.blob_journal = l.blob_journal.saturating_add(l.journal.len() as u64);
            // A finished run's result leaves with its `Done`: hold it.
            if let Some(result) = l.result().map(Payload::from) {
                l.rare_mut().result = Some(result);
            }
            self.journal_bytes = self.journal_bytes.saturating_sub(l.journal.len());
            l.journal.clear();
            l.journal_records = 0;
        }
    }

    /// A loaded run's stored prefix is at `blob` (loaded from it, or its
    /// chain rewritten whole), as `stored` describes it; the records after
    /// it stay in memory.
    pub fn set_blob(&mut self, run: RunId, blob: BlobRef, stored: StoredPrefix) {
        if let Some(l) = self.loaded.get_mut(&run) {
            l.blob = Some(blob);
            l.blob_chain = stored.chain;
            l.blob_depth = stored.depth;
            l.blob_journal = stored.journal_len;
            l.set_blob_apart(stored.apart);
        }
    }

    /// Frees pooled runs beyond `keep` (a shard that loads nothing needs no
    /// pool). Returns how many it freed.
    pub fn shrink_spare(&mut self, keep: usize) -> usize {
        let freed = self.spare.len().saturating_sub(keep);
        if freed > 0 {
            self.spare.truncate(keep);
            self.spare.shrink_to(keep);
        }
        freed
    }

    /// Keeps a run that left memory, emptied, for the next run loaded or
    /// started.
    pub(super) fn recycle(&mut self, mut run: Box<LoadedRun>) {
        if self.spare.len() < SPARE_RUNS && run.empty_for_reuse() {
            self.spare.push(run);
        }
    }

    /// Forgets a loaded run (its entry stays).
    pub(super) fn forget_loaded(&mut self, run: RunId) {
        if let Some(l) = self.loaded.remove(&run) {
            self.journal_bytes = self.journal_bytes.saturating_sub(l.journal.len());
            self.recycle(l);
        }
    }
}

fn e_blob(e: &Entry) -> BlobRef {
    BlobRef {
        offset: e.offset(),
        len: e.len(),
    }
}
