//! Parking: runs idle longer than `park_after` leave memory for the run
//! store, and come back when a timer, a signal or a caller needs them.
//!
//! A suspended run parks as a `Park` frame (its whole journal and armed
//! timers) or, when it was loaded from the store before, as a `Delta` frame
//! of the records since, chained to the frame before (at most
//! [`MAX_DEPTH`] deep, then written whole again). A finished run parks as a
//! `Done` frame holding its whole journal while its history is kept
//! (`history_ms` since it finished, for a journal of at most
//! `history_max_bytes`): what `describe`, queries and `fusee show` read
//! after the end. Once its history time passes, the frame is rewritten
//! with only its `Start` and `Done` records (and its streams' records:
//! `crate::recovery::summary_keeps`), enough to answer for its result
//! (and its streams' subscribers) until its retention ends
//! ([`ShardLoop::drop_histories`]). Its streams' chunks go the same way
//! once `stream_ms` passes (each stream's opening and end stay). The new
//! frame, like every frame, is referenced only once a checkpoint commits
//! the index with it, so a crash leaves the old frame or the new one,
//! never a broken one. The core keeps only the run's
//! 32-byte table entry; the persisted index records it at the next
//! checkpoint, which also makes the frame durable (until then a crash
//! rebuilds the run from the checkpoint and the log, as if it never left).
//!
//! A checkpoint writes the frames of a loaded run whose journal in memory
//! reached [`SPILL_BYTES`] the same way, the run staying loaded
//! ([`ShardLoop::spill_long_journals`]): its later records go on in memory
//! after the frame, as for a run loaded from its frames.
//!
//! Every frame written here keeps its stream chunks, once they reach
//! `Config::stream_apart_bytes`, in a `Stream` frame of their own
//! ([`ShardLoop::set_apart`]; `crate::stream` says why), and a later
//! frame of the run names the `Stream` frames of its prefix again rather
//! than copying them: a load, a code start, a finished park and a result
//! read no chunk. A frame that replaces others releases them, but the
//! `Stream` frames it names ([`ShardLoop::release_replaced`]).
//!
//! A run parks only when nothing about it is in flight: its records are
//! durable, its code is quiescent (no delivery waiting, no record asked
//! for, no step attempt running or due), and no event for it is queued.
//!
//! Before it parks, a waiting run's code dozes ([`ShardLoop::doze`]) once
//! idle past `doze_after` (1 s by default) under the same conditions: the
//! code (its state, future and operation table, about 1.1 KB for a
//! sleeper) is dropped and the run stays loaded, dormant; what reaches it
//! next starts its code again by replaying its journal from memory, with
//! no read of the run store. Sleepers of a few seconds, which would never
//! park, cost their journal and shard state only.

use std::borrow::Cow;
use std::cmp::Reverse;

use fusee_core::record::{
    Record, RecordBuf, RecordRef, RunId, Walked, find_kind, iter_canonical, iter_canonical_passing,
    kind,
};
use fusee_core::shard::{BlobRef, LoadedRun};
use fusee_core::store::{
    Apart, EntryRef, decode_entry, encode_entry_into, rewrite_kept, split_chunks,
};
use fusee_core::wire::hash_id;
use fusee_storage::{RunStore, StorageError};

use super::ShardLoop;
use super::live::LiveRun;
use crate::AnyRuns;
use crate::client::RunResult;
use crate::recovery::{ChainError, join_streams, read_chain_apart};

/// Frames a `Delta` chain may have before the run is written whole.
pub(super) use crate::recovery::MAX_DEPTH;

/// Runs parked per call of [`ShardLoop::park_idle`].
const PARK_BUDGET: usize = 1024;

/// A frame read back: what it says about its run.
pub(super) use crate::recovery::Chain as Frame;

fn corrupt(what: &'static str, at: u64) -> StorageError {
    StorageError::Corrupt { what, at }
}

/// When runs are looked at to park them, and finished runs whose whole
/// journal is kept.
///
/// Invariant: a run parks only quiescent, with nothing in flight and its
/// records durable; a finished run keeps its whole journal for
/// `history_ms`, then only its `Start` and `Done`. Checked by
/// `fusee/tests/parking.rs` `sleepers_park_wake_on_time_after_a_restart_and_fire_once`
/// and `a_finished_run_keeps_its_history_for_the_history_time_then_its_summary`.
pub(super) struct Parking {
    /// Finished runs parked with something to let go later (their whole
    /// journal, their streams' chunks), by when the first of it goes
    /// (after an open, every parked finished run, due at once: its frame
    /// says when it finished).
    histories: std::collections::BinaryHeap<Reverse<(u64, RunId)>>,
    /// When housekeeping (parking, retention) runs next.
    housekeeping_ms: u64,
    /// The earliest time a parking scan could find a run to park (see
    /// [`ShardLoop::park_idle`]).
    scan_ms: u64,
}

impl Parking {
    /// An open's, at `now_ms`, with the finished runs it found parked.
    pub(super) fn new(
        now_ms: u64,
        histories: std::collections::BinaryHeap<Reverse<(u64, RunId)>>,
    ) -> Self {
        Self {
            histories,
            housekeeping_ms: now_ms,
            scan_ms: now_ms,
        }
    }

    /// The earliest time a parking scan could find a run to park.
    #[cfg(test)]
    pub(super) fn scan_ms(&self) -> u64 {
        self.scan_ms
    }

    /// When housekeeping runs next.
    #[inline]
    pub(super) fn housekeeping_ms(&self) -> u64 {
        self.housekeeping_ms
    }

    /// Whether housekeeping is due at `now_ms` (always with `park_after_ms`
    /// 0: tests, a virtual clock that stands still), and if so, the next
    /// is `every_ms` later.
    #[inline]
    pub(super) fn housekeeping_due(
        &mut self,
        now_ms: u64,
        park_after_ms: u64,
        every_ms: u64,
    ) -> bool {
        if now_ms >= self.housekeeping_ms || park_after_ms == 0 {
            self.housekeeping_ms = now_ms + every_ms;
            return true;
        }
        false
    }
}

impl ShardLoop {
    /// Parks every run idle since `now_ms - park_after`, within a budget.
    ///
    /// A scan walks every loaded run, so it is skipped until the earliest
    /// time one could park: a run whose code was active after the cut-off
    /// can park no sooner than `park_after` after that activity (activity
    /// only moves later), and a run loaded after this scan no sooner than
    /// `park_after` after it. Any other reason a run stays loaded (a timer
    /// due, records not yet durable, code not quiescent, the budget spent)
    /// scans again at the next housekeeping. Without this, 100,000 sleepers
    /// just started cost a walk of all of them every housekeeping: 4% of
    /// the CPU of starting them.
    pub(super) fn park_idle(&mut self, now_ms: u64) {
        if self.life.has_failed() || self.life.is_closing() || now_ms < self.parking.scan_ms {
            return;
        }
        let park_after = self.config.park_after_ms;
        // Code dozes only in the time before its run would park.
        let doze_after = self.config.doze_after_ms.min(park_after);
        let Some(doze_since) = now_ms.checked_sub(doze_after) else {
            self.parking.scan_ms = doze_after;
            return;
        };
        // `None`: too early in the clock's life for any run to park.
        let idle_since = now_ms.checked_sub(park_after);
        let mut next_scan = now_ms.saturating_add(doze_after);
        let mut candidates: Vec<RunId> = Vec::new();
        let mut dozers: Vec<RunId> = Vec::new();
        for (run, l) in self.core.loaded_runs() {
            let live = self.live.get(&run);
            if let Some(live) = live {
                let active_ms = live.active_ms;
                if active_ms > doze_since {
                    next_scan = next_scan.min(active_ms.saturating_add(doze_after));
                    continue;
                }
                if idle_since.is_none_or(|since| active_ms > since) {
                    // Idle long enough to doze, not to park.
                    next_scan = next_scan.min(active_ms.saturating_add(park_after));
                    if dozers.len() < PARK_BUDGET && self.dozable(run, l, live, now_ms) {
                        dozers.push(run);
                    } else if l.done.is_none() {
                        next_scan = now_ms;
                    }
                    continue;
                }
            } else if let Some(active_ms) = self.live.dormant_since(run)
                && idle_since.is_none_or(|since| active_ms > since)
            {
                next_scan = next_scan.min(active_ms.saturating_add(park_after));
                continue;
            }
            let Some(idle_since) = idle_since else {
                next_scan = next_scan.min(park_after);
                continue;
            };
            let parkable = candidates.len() < PARK_BUDGET
                && l.last_lsn <= self.flights.durable()
                && !l.has_queued_events()
                // A timer due now fires at the next poll: the run is about
                // to go on (it may have just been loaded for it).
                && l.armed_timers().all(|(_, _, at)| at > now_ms)
                && self.quiescent(run, idle_since);
            if parkable {
                candidates.push(run);
            } else {
                next_scan = now_ms;
            }
        }
        self.parking.scan_ms = next_scan;
        for run in dozers {
            self.doze(run);
        }
        for run in candidates {
            if let Err(e) = self.park(run, now_ms) {
                self.fail(e);
                return;
            }
        }
    }

    /// Whether `run`'s code may doze: it waits (its run unfinished) with
    /// nothing in flight: its records durable, no event queued for it, no
    /// timer due now, no step to start, no update handler running, and its
    /// code quiescent and not stopped.
    fn dozable(&self, run: RunId, l: &LoadedRun, live: &LiveRun, now_ms: u64) -> bool {
        l.done.is_none()
            && l.last_lsn <= self.flights.durable()
            && !l.has_queued_events()
            && l.armed_timers().all(|(_, _, at)| at > now_ms)
            && live.stopped.is_none()
            && live.handlers.is_empty()
            && !self.live.is_stepping(run)
            && live.state.borrow().quiescent()
    }

    /// Drops `run`'s code, which [`dozable`](Self::dozable) allowed: the run
    /// stays loaded, and whatever reaches it next starts its code again by
    /// replaying its journal, as after a recovery (`live.rs`).
    pub(super) fn doze(&mut self, run: RunId) {
        if self.live.doze(run) {
            self.metrics.dozes += 1;
            tracing::trace!(shard = self.shard, run, "dozed");
        }
    }

    /// Whether `run` may park: its code (if any) is quiescent and has been
    /// since `idle_since`.
    fn quiescent(&self, run: RunId, idle_since: u64) -> bool {
        // A cancel's grace is the loop's deadline: the run stays.
        if self.graces.holds(run) {
            return false;
        }
        let Some(live) = self.live.get(&run) else {
            // Dormant: its code was quiescent when it dozed, and nothing
            // reached it since (that would have started its code).
            if let Some(active_ms) = self.live.dormant_since(run) {
                return active_ms <= idle_since;
            }
            // Finished: nothing runs. A run waiting for its code to be
            // registered stays: its code must replay before it may park (a
            // step it had in flight would wait for a timer or a signal that
            // may never come).
            return !self.live.waits_for_code(run)
                && self.core.get(run).is_some_and(|l| l.is_done());
        };
        if live.stopped.is_some() || live.active_ms > idle_since {
            return false;
        }
        live.state.borrow().quiescent()
    }

    /// Writes `run`'s frame and parks it.
    fn park(&mut self, run: RunId, now_ms: u64) -> Result<(), StorageError> {
        let Some(l) = self.core.get(run) else {
            return Ok(());
        };
        let id_hash = hash_id(&l.id);
        let (last_lsn, done, may_stream) = (l.last_lsn, l.done, l.streams);
        let w = if let Some((status, finished_ms)) = done {
            // Its chunks set apart stay in their frames, named again by
            // the `Done` frame: a finished stream is not copied.
            let stored = self.run_stored(run)?;
            let fits = stored.joined_len(run) <= self.config.history_max_bytes;
            let (kept, kept_apart, next) = self.let_go(
                &stored.journal,
                &stored.apart,
                finished_ms,
                now_ms,
                fits,
                may_stream,
            );
            if let Some(at) = next {
                self.parking.histories.push(Reverse((at, run)));
            }
            let (journal, apart) = self.set_apart(run, &kept, &kept_apart)?;
            let entry = EntryRef::Done {
                run,
                last_lsn,
                id_hash,
                status,
                finished_ms,
                apart: Cow::Borrowed(&*apart),
                journal: &journal,
            };
            let mut frame = Vec::new();
            encode_entry_into(&entry, &mut frame)
                .map_err(|_| corrupt("run frame (encode)", run))?;
            let blob = self.store_frame(&frame)?;
            self.release_replaced(&stored.replaced, &apart)?;
            Written {
                blob,
                chain: u64::from(blob.len),
                depth: 0,
                apart: !apart.is_empty(),
            }
        } else {
            self.write_suspended(run)?
        };
        let blob = w.blob;
        self.core.park_linked(run, blob, w.depth > 0, w.apart);
        tracing::trace!(
            shard = self.shard,
            run,
            frame = blob.len,
            finished = done.is_some(),
            "parked"
        );
        self.live.forget(run);
        self.metrics.parks += 1;
        Ok(())
    }

    /// Writes unfinished loaded run `run`'s journal to the run store: a
    /// `Delta` frame of its records since its stored prefix, chained to
    /// it, or (without one, or past [`MAX_DEPTH`]) a `Park` frame of its
    /// whole journal, the old chain released. Either way its chunks go to
    /// a `Stream` frame of their own once they are
    /// `Config::stream_apart_bytes` or more ([`set_apart`](Self::set_apart)),
    /// and the chunks its prefix set apart stay where they are. The frame
    /// is durable, and the release too, with the next checkpoint's commit.
    fn write_suspended(&mut self, run: RunId) -> Result<Written, StorageError> {
        let Some(l) = self.core.get(run) else {
            return Err(corrupt("run frame of a run not loaded", run));
        };
        let id_hash = hash_id(&l.id);
        let timers: Vec<_> = l.armed_timers().collect();
        let last_lsn = l.last_lsn;
        let was_apart = l.blob_apart();
        let delta = l
            .blob
            .filter(|_| l.blob_depth < MAX_DEPTH)
            .map(|prev| (prev, l.blob_depth + 1, l.blob_chain, l.journal.clone()));
        let mut frame = Vec::new();
        let none = Apart::default();
        let (encoded, apart, replaced) = if let Some((prev, depth, chain, tail)) = &delta {
            let (journal, apart) = self.set_apart(run, tail, &none)?;
            let entry = EntryRef::Delta {
                run,
                last_lsn,
                id_hash,
                timers: timers.as_slice().into(),
                prev: *prev,
                depth: *depth,
                chain: *chain,
                apart: Cow::Borrowed(&*apart),
                journal: &journal,
            };
            let encoded = encode_entry_into(&entry, &mut frame);
            (encoded, apart.into_owned(), Replaced::default())
        } else {
            let stored = self.run_stored(run)?;
            let (journal, apart) = self.set_apart(run, &stored.journal, &stored.apart)?;
            let entry = EntryRef::Park {
                run,
                last_lsn,
                id_hash,
                timers: timers.as_slice().into(),
                apart: Cow::Borrowed(&*apart),
                journal: &journal,
            };
            let encoded = encode_entry_into(&entry, &mut frame);
            (encoded, apart.into_owned(), stored.replaced)
        };
        encoded.map_err(|_| corrupt("run frame (encode)", run))?;
        let blob = self.store_frame(&frame)?;
        self.release_replaced(&replaced, &apart)?;
        Ok(match delta {
            Some((_, depth, chain, _)) => Written {
                blob,
                chain: chain.saturating_add(u64::from(blob.len)),
                depth,
                apart: was_apart || !apart.is_empty(),
            },
            None => Written {
                blob,
                chain: u64::from(blob.len),
                depth: 0,
                apart: !apart.is_empty(),
            },
        })
    }

    /// The records `journal` (a frame's to write, whose section is
    /// `apart`) as the frame holds them: with the chunks still in it
    /// moved to a new `Stream` frame once they are
    /// `Config::stream_apart_bytes` or more (the frame written here), and
    /// the runs set apart before moved to where they stand; otherwise as
    /// they are. So a load of the run reads no chunk of a long stream. A
    /// run that never streamed (`LoadedRun::streams`) is not walked.
    fn set_apart<'j>(
        &mut self,
        run: RunId,
        journal: &'j [u8],
        apart: &'j Apart,
    ) -> Result<(Cow<'j, [u8]>, Cow<'j, Apart>), StorageError> {
        let kept = (Cow::Borrowed(journal), Cow::Borrowed(apart));
        if !self.core.get(run).is_some_and(|l| l.streams) {
            return Ok(kept);
        }
        let mut split =
            split_chunks(journal, apart).map_err(|_| corrupt("run journal (split)", run))?;
        if split.count == 0 || split.chunks.len() < self.config.stream_apart_bytes {
            return Ok(kept);
        }
        let mut frame = Vec::with_capacity(split.chunks.len() + 16);
        let entry = EntryRef::Stream {
            run,
            chunks: &split.chunks,
        };
        encode_entry_into(&entry, &mut frame).map_err(|_| corrupt("stream frame (encode)", run))?;
        let blob = self.store_frame(&frame)?;
        split.stored_at(blob);
        Ok((Cow::Owned(split.journal), Cow::Owned(split.apart)))
    }

    /// Releases the frames a new frame replaced (`replaced`: a stored
    /// prefix's own frames, then the `Stream` frames it named), but the
    /// `Stream` frames the new frame names again (`kept`).
    fn release_replaced(&mut self, replaced: &Replaced, kept: &Apart) -> Result<(), StorageError> {
        for &old in &replaced.heads {
            self.release_frame(old)?;
        }
        for &old in &replaced.streams {
            if !kept.frames.iter().any(|&(b, _)| b == old) {
                self.release_frame(old)?;
            }
        }
        Ok(())
    }

    /// Moves the journals of unfinished loaded runs holding at least
    /// [`SPILL_BYTES`] since their stored prefix to the run store (as a
    /// park writes them: [`write_suspended`](Self::write_suspended)); the
    /// runs stay loaded. Called by a checkpoint right before it commits,
    /// so the frames are durable with it and it names them rather than
    /// carrying the bytes: a long journal (a stream's chunks) is written
    /// once, not into every checkpoint, and an open reads it from its
    /// frames instead of the checkpoint (which the file backend writes
    /// again, twice, at every open).
    pub(super) fn spill_long_journals(&mut self) -> Result<(), StorageError> {
        let long: Vec<RunId> = self
            .core
            .loaded_runs()
            .filter(|(_, l)| l.done.is_none() && l.journal.len() >= SPILL_BYTES)
            .map(|(run, _)| run)
            .collect();
        for run in long {
            let w = self.write_suspended(run)?;
            self.core.spilled(run, w.blob, w.chain, w.depth, w.apart);
            tracing::trace!(shard = self.shard, run, frame = w.blob.len, "spilled");
        }
        Ok(())
    }

    /// The frame at `blob` and the frames it chains to, newest first,
    /// each followed by the `Stream` frames its chunks went to: every
    /// frame a release of the run's stored journal lets go.
    fn chain(&mut self, blob: BlobRef) -> Result<Vec<BlobRef>, StorageError> {
        let mut out = Vec::new();
        let mut next = blob;
        let mut buf = Vec::new();
        for _ in 0..=MAX_DEPTH {
            out.push(next);
            self.read_one(next, &mut buf)?;
            let entry = decode_entry(&buf).map_err(|_| corrupt("run frame", next.offset))?;
            out.extend(entry.apart().frames.iter().map(|&(b, _)| b));
            match entry {
                EntryRef::Delta { prev, .. } => next = prev,
                _ => return Ok(out),
            }
        }
        Err(corrupt(
            "run frame chain deeper than its limit",
            blob.offset,
        ))
    }

    /// Reads the frame at `blob` and the chain before it. The running
    /// shard's reads of run-store frames go through this or
    /// [`read_one`](Self::read_one), which count them.
    pub(super) fn read_frame(&mut self, blob: BlobRef) -> Result<Frame, StorageError> {
        let frame = read_chain(&mut self.store, blob)?;
        self.metrics.frame_reads += frame.blobs.len() as u64;
        self.metrics.frame_read_bytes += frame.chain_bytes;
        Ok(frame)
    }

    /// Reads the frame at `blob` and the chain before it as
    /// [`read_frame`](Self::read_frame) does, but leaves the chunks set
    /// apart in their `Stream` frames (`Frame::apart` says where they
    /// went; `join` puts them back).
    pub(super) fn read_frame_apart(&mut self, blob: BlobRef) -> Result<Frame, StorageError> {
        let frame = read_chain_apart(&mut self.store, blob).map_err(chain_error)?;
        self.metrics.frame_reads += frame.heads().len() as u64;
        self.metrics.frame_read_bytes += frame.chain_bytes;
        Ok(frame)
    }

    /// `frame` (read by [`read_frame_apart`](Self::read_frame_apart))
    /// with its chunks set apart read and put back: what a reader of the
    /// whole journal (a subscriber, a reset's copies) needs.
    pub(super) fn join(&mut self, mut frame: Frame) -> Result<Frame, StorageError> {
        if frame.apart.is_empty() {
            return Ok(frame);
        }
        let before = frame.chain_bytes;
        join_streams(&mut self.store, &mut frame).map_err(chain_error)?;
        self.metrics.frame_reads += (frame.blobs.len() - frame.heads().len()) as u64;
        self.metrics.frame_read_bytes += frame.chain_bytes - before;
        Ok(frame)
    }

    /// Reads the one frame at `blob` into `buf`, counted.
    pub(super) fn read_one(
        &mut self,
        blob: BlobRef,
        buf: &mut Vec<u8>,
    ) -> Result<(), StorageError> {
        self.store.read(blob, buf)?;
        self.metrics.frame_reads += 1;
        self.metrics.frame_read_bytes += buf.len() as u64;
        Ok(())
    }

    /// A hint to the run store that the frames of `runs` (those parked;
    /// at most [`PREFETCH_RUNS`] are asked for) are about to be read: a
    /// backend whose every read is a round trip to its server fetches them
    /// in one. Listing pages, the attribute index's build and the
    /// histories' pass use it. A failed fetch is left for the reads
    /// themselves to report.
    pub(super) fn prefetch_parked(&mut self, runs: impl Iterator<Item = RunId>) {
        let blobs: Vec<_> = runs
            .take(PREFETCH_RUNS)
            .filter_map(|run| self.core.parked(run).map(|p| p.blob()))
            .collect();
        if blobs.len() > 1 {
            let _ = self.store.prefetch(&blobs);
        }
    }

    /// `run`'s whole journal: its stored prefix (if any) and the records
    /// in memory after it, its chunks set apart put back.
    pub(super) fn run_journal(&mut self, run: RunId) -> Result<Vec<u8>, StorageError> {
        let Some(l) = self.core.get(run) else {
            return Ok(Vec::new());
        };
        let Some(blob) = l.blob else {
            return Ok(l.journal.clone());
        };
        let frame = self.read_frame(blob)?;
        Ok(self.then_memory(run, frame.journal))
    }

    /// `run`'s journal as its code replays it: as
    /// [`run_journal`](Self::run_journal), but without the chunks its
    /// frames set apart (code takes no chunk: a long stream is not read
    /// to start the code that sent it). Describe, the replay check and a
    /// step's history read it too, none of them a chunk.
    pub(super) fn run_code_journal(&mut self, run: RunId) -> Result<Vec<u8>, StorageError> {
        Ok(self.run_stored(run)?.journal)
    }

    /// `run`'s whole journal with its chunks set apart left where they are,
    /// and what a frame of it all replaces: what writing it whole needs,
    /// learnt from one read.
    pub(super) fn run_stored(&mut self, run: RunId) -> Result<Stored, StorageError> {
        let Some(l) = self.core.get(run) else {
            return Ok(Stored {
                journal: Vec::new(),
                apart: Apart::default(),
                replaced: Replaced::default(),
            });
        };
        let Some(blob) = l.blob else {
            return Ok(Stored {
                journal: l.journal.clone(),
                apart: Apart::default(),
                replaced: Replaced::default(),
            });
        };
        let frame = self.read_frame_apart(blob)?;
        let replaced = Replaced {
            heads: frame.heads().to_vec(),
            streams: frame.blobs[frame.heads().len()..].to_vec(),
        };
        Ok(Stored {
            journal: self.then_memory(run, frame.journal),
            apart: frame.apart,
            replaced,
        })
    }

    /// `prefix` (run `run`'s stored records) followed by the records it
    /// holds in memory.
    fn then_memory(&self, run: RunId, mut prefix: Vec<u8>) -> Vec<u8> {
        if let Some(l) = self.core.get(run) {
            // Exact: grown by doubling, a stream's megabytes would hold
            // twice their size while the code replays them.
            prefix.reserve_exact(l.journal.len());
            prefix.extend_from_slice(&l.journal);
        }
        prefix
    }

    /// Loads parked run `run` back into memory (not a finished one, which
    /// stays parked): its frames read, the core's state rebuilt, its
    /// signals offered again, its code started. False if it is not parked
    /// or finished.
    pub(super) fn load(&mut self, run: RunId, now_ms: u64) -> Result<bool, StorageError> {
        let Some(parked) = self.core.parked(run) else {
            return Ok(false);
        };
        if parked.done().is_some() {
            return Ok(false);
        }
        let frame = self.read_frame_apart(parked.blob())?;
        self.load_frame(run, frame, now_ms)
    }

    /// Loads parked unfinished run `run` as [`load`](Self::load) does, its
    /// frames already read (by a lookup that checked its ID: a signal to a
    /// parked run reads them once, not twice).
    pub(super) fn load_frame(
        &mut self,
        run: RunId,
        frame: Frame,
        now_ms: u64,
    ) -> Result<bool, StorageError> {
        let Some(parked) = self.core.parked(run).filter(|p| p.done().is_none()) else {
            return Ok(false);
        };
        // Frames read for another address (none of today's callers) are
        // read again, never loaded as this run's.
        debug_assert_eq!(frame.blobs.first(), Some(&parked.blob()));
        let frame = if frame.blobs.first() == Some(&parked.blob()) {
            frame
        } else {
            self.read_frame_apart(parked.blob())?
        };
        // Its chunks set apart are applied where they stood, unread.
        let loaded = self
            .core
            .unpark_encoded(
                run,
                frame.last_lsn,
                &frame.journal,
                &frame.apart.runs,
                now_ms,
            )
            .map_err(|_| corrupt("run frame journal", parked.blob().offset))?;
        if !loaded {
            return Err(corrupt(
                "run frame that does not load",
                parked.blob().offset,
            ));
        }
        // The chain the run came from, as long as it is: the next park
        // extends it, and it must be written whole before it outgrows
        // what `read_chain` follows.
        self.core.set_blob(run, parked.blob(), frame.stored());
        self.metrics.loads += 1;
        tracing::trace!(shard = self.shard, run, "loaded");
        self.core.reoffer(run);
        // Just loaded, the run's journal is its frames' whole (but the
        // chunks set apart, which code takes none of).
        self.start_code_with(run, Some(frame.journal));
        Ok(true)
    }

    /// Parked run `run`'s stored journal, read from its frames (`None`: no
    /// such parked run), without its chunks set apart. One read: what a
    /// caller needs of it comes from this journal (a frame read is the
    /// cost of all these lookups).
    pub(super) fn parked_journal(&mut self, run: RunId) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.parked_frame(run)?.map(|f| f.journal))
    }

    /// Parked run `run`'s frames read (`None`: no such parked run), its
    /// chunks set apart left where they are: its ID, start, waits and
    /// result are read without them, and a load wants none. A reader of
    /// its chunks [`join`](Self::join)s them.
    pub(super) fn parked_frame(&mut self, run: RunId) -> Result<Option<Frame>, StorageError> {
        let Some(parked) = self.core.parked(run) else {
            return Ok(None);
        };
        self.read_frame_apart(parked.blob()).map(Some)
    }

    /// The `Start` record of parked run `run`, read from its frame (for
    /// its ID, type and start time without loading it).
    pub(super) fn parked_start(&mut self, run: RunId) -> Result<Option<RecordBuf>, StorageError> {
        let journal = self.parked_journal(run)?;
        Ok(journal.and_then(|j| start_of(&j).map(|r| r.to_buf())))
    }

    /// What a result call for `id` learns of parked run `run`, from one
    /// read of its frames (a result call after an open, for each run that
    /// finished before it, must not read them twice): whether the frame
    /// names `id` (its `Start`'s ID: a run is found by its ID's hash, which
    /// another ID may share), and if so the
    /// run's result once finished.
    pub(super) fn parked_result(
        &mut self,
        run: RunId,
        id: &str,
    ) -> Result<ParkedResult, StorageError> {
        let Some(journal) = self.parked_journal(run)?.filter(|j| names(j, id)) else {
            return Ok(ParkedResult::Other);
        };
        Ok(match done_of(&journal) {
            Some(Record::Done {
                status, payload, ..
            }) => ParkedResult::Finished(RunResult {
                status,
                payload: payload.to_vec(),
            }),
            _ => ParkedResult::Running,
        })
    }

    /// Removes finished runs whose retention ended and releases their
    /// frames (the release is durable with the next checkpoint, which also
    /// makes the index forget them).
    pub(super) fn expire(&mut self, now_ms: u64) {
        if self.core.next_expiry().is_none_or(|at| at > now_ms) {
            return;
        }
        let mut gone = Vec::new();
        self.core.expire_frames(now_ms, &mut gone);
        for fusee_core::shard::Expired { run, frame, linked } in gone {
            self.live.remove(&run);
            self.waiters.take_results(run);
            // Its retention ended: listings no longer find it.
            self.attr_index.remove(run);
            // A parked finished run's one `Done` frame goes unread: every
            // finished run of a fanout expires so, and each cost a read.
            let released = match frame {
                Some(blob) if linked => self.release_chain(blob),
                Some(blob) => self.release_frame(blob),
                None => Ok(()),
            };
            if let Err(e) = released {
                self.fail(e);
                return;
            }
        }
    }

    /// Rewrites the frames of finished runs whose history time passed with
    /// only their `Start` and `Done` ([`summary`]), and those whose
    /// streams' time passed without their chunks ([`without_chunks`]),
    /// within a budget: the rest waits for the next housekeeping. A run
    /// loaded since is judged again when it parks; one expired since is
    /// gone.
    pub(super) fn drop_histories(&mut self, now_ms: u64) {
        let mut due = Vec::new();
        while due.len() < HISTORY_BUDGET {
            match self.parking.histories.peek() {
                Some(&Reverse((at, run))) if at <= now_ms => {
                    self.parking.histories.pop();
                    due.push(run);
                }
                _ => break,
            }
        }
        // After an open every finished run is looked at once: read one by
        // one from PostgreSQL, a pass held the shard about 100 ms.
        for part in due.chunks(PREFETCH_RUNS) {
            self.prefetch_parked(part.iter().copied());
            for &run in part {
                if let Err(e) = self.drop_history(run, now_ms) {
                    self.fail(e);
                    return;
                }
            }
        }
    }

    /// [`drop_histories`](Self::drop_histories) of one run.
    fn drop_history(&mut self, run: RunId, now_ms: u64) -> Result<(), StorageError> {
        let Some(parked) = self.core.parked(run).filter(|p| p.done().is_some()) else {
            return Ok(());
        };
        let blob = parked.blob();
        let mut buf = Vec::new();
        self.read_one(blob, &mut buf)?;
        let EntryRef::Done {
            last_lsn,
            id_hash,
            status,
            finished_ms,
            apart,
            journal,
            ..
        } = decode_entry(&buf).map_err(|_| corrupt("run frame", blob.offset))?
        else {
            return Err(corrupt("finished run's frame of another kind", blob.offset));
        };
        // After an open every finished run is looked at once: its frame
        // says when it finished. A journal over the size limit was cut to
        // its summary when it parked. Chunks set apart stay in their
        // frames, named again or let go.
        let (kept, kept_apart, next) =
            self.let_go(journal, &apart, finished_ms, now_ms, true, true);
        if let Some(at) = next {
            self.parking.histories.push(Reverse((at, run)));
        }
        if matches!(kept, Cow::Borrowed(_)) && kept_apart == *apart {
            return Ok(());
        }
        let mut frame = Vec::new();
        let entry = EntryRef::Done {
            run,
            last_lsn,
            id_hash,
            status,
            finished_ms,
            apart: Cow::Borrowed(&kept_apart),
            journal: &kept,
        };
        encode_entry_into(&entry, &mut frame).map_err(|_| corrupt("run frame (encode)", run))?;
        let new = self.store_frame(&frame)?;
        let replaced = Replaced {
            heads: vec![blob],
            streams: apart.frames.iter().map(|&(b, _)| b).collect(),
        };
        self.release_replaced(&replaced, &kept_apart)?;
        self.core.reparked(run, new, !kept_apart.is_empty());
        Ok(())
    }

    /// What a finished run's frame keeps at `now_ms` out of `journal` (its
    /// whole journal at its park, what an earlier pass left after; its
    /// chunks set apart where `apart` says), and when it next has
    /// something to let go. Its history goes at
    /// [`history_until`](Self::history_until), or at once when the whole
    /// journal is over `history_max_bytes` (`fits` false): then its
    /// [`summary`]. Its streams' chunks go at
    /// [`streams_until`](Self::streams_until): then the journal
    /// [`without_chunks`], and no chunk set apart; `may_stream` false says
    /// it holds none. Borrowed: nothing to let go now. Every finished run
    /// parks through this: with its history kept and its chunks kept as
    /// long as the run (the defaults), it walks no journal.
    fn let_go<'j>(
        &self,
        journal: &'j [u8],
        apart: &Apart,
        finished_ms: u64,
        now_ms: u64,
        fits: bool,
        may_stream: bool,
    ) -> (Cow<'j, [u8]>, Apart, Option<u64>) {
        let history_until = self.history_until(finished_ms);
        let streams_until = match self.sabotaged(super::sabotage::Sabotage::ChunksEarly) {
            true => 0,
            false => self.streams_until(finished_ms),
        };
        let mut kept = Cow::Borrowed(journal);
        let mut kept_apart = apart.clone();
        // Kept whole until its history time; a summary no shorter than
        // the journal (one already) is nothing to let go.
        let history = fits && history_until > now_ms;
        if !history {
            let (cut, cut_apart) = summary(journal, apart);
            if cut.len() != journal.len() {
                kept = Cow::Owned(cut);
                kept_apart = cut_apart;
            }
        }
        // Chunks kept as long as the run go with it (`expire`): nothing to
        // look for.
        let expires = finished_ms.saturating_add(self.config.retention_ms);
        let mut chunks = false;
        let holds = !kept_apart.is_empty() || find_kind(&kept, kind::CHUNK).is_some();
        if may_stream && streams_until < expires && holds {
            if streams_until <= now_ms {
                kept = Cow::Owned(without_chunks(&kept));
                kept_apart = Apart::default();
            } else {
                chunks = true;
            }
        }
        let next = [(history, history_until), (chunks, streams_until)]
            .into_iter()
            .filter_map(|(holds, at)| holds.then_some(at))
            .min();
        (kept, kept_apart, next)
    }

    /// When a run that finished at `finished_ms` lets its history go
    /// (`Config::history_retention`).
    pub(super) fn history_until(&self, finished_ms: u64) -> u64 {
        finished_ms.saturating_add(self.config.history_ms)
    }

    /// When a run that finished at `finished_ms` lets its streams' chunks
    /// go (`Config::stream_retention`): the rule every reader answers by.
    pub(super) fn streams_until(&self, finished_ms: u64) -> u64 {
        finished_ms.saturating_add(self.config.stream_ms)
    }

    /// Releases the frame at `blob` and the chain before it.
    pub(super) fn release_chain(&mut self, blob: BlobRef) -> Result<(), StorageError> {
        for frame in self.chain(blob)? {
            self.release_frame(frame)?;
        }
        Ok(())
    }
}

/// Bytes of journal a loaded run holds in memory (since its stored
/// prefix) from which a checkpoint writes them to the run store instead
/// ([`ShardLoop::spill_long_journals`]).
pub(super) const SPILL_BYTES: usize = 256 << 10;

/// A frame [`ShardLoop::write_suspended`] wrote.
struct Written {
    blob: BlobRef,
    /// Bytes of it and the frames it extends.
    chain: u64,
    /// How many frames it extends.
    depth: u8,
    /// Whether it or a frame it extends names `Stream` frames.
    apart: bool,
}

/// What a run's stored prefix was, for the frame written in its place to
/// release ([`ShardLoop::release_replaced`]).
#[derive(Default)]
pub(super) struct Replaced {
    /// The prefix's own frames.
    heads: Vec<BlobRef>,
    /// The `Stream` frames they named.
    streams: Vec<BlobRef>,
}

/// A run's whole journal as its frames and memory hold it, its chunks set
/// apart left where they are ([`ShardLoop::run_stored`]).
pub(super) struct Stored {
    /// The stored prefix's records (but chunks set apart), then memory's.
    journal: Vec<u8>,
    /// Where the prefix's chunks set apart went.
    apart: Apart,
    /// What a frame of it all replaces.
    replaced: Replaced,
}

impl Stored {
    /// Bytes of the whole journal, its chunks set apart included.
    fn joined_len(&self, run: RunId) -> u64 {
        self.apart.joined_len(run, self.journal.len())
    }
}

/// Finished runs whose history is dropped per call of
/// [`ShardLoop::drop_histories`].
const HISTORY_BUDGET: usize = 1024;

/// Most parked runs whose frames one [`ShardLoop::prefetch_parked`] asks
/// for (the PostgreSQL backend's most per fetch).
pub(super) const PREFETCH_RUNS: usize = 256;

/// `journal` without its streams' chunks (each stream's opening and end
/// kept: a subscriber learns the chunks were let go, not that the stream
/// never was), in journal order. The chunks are framed, not decoded.
pub(super) fn without_chunks(journal: &[u8]) -> Vec<u8> {
    let mut kept = Vec::with_capacity(journal.len());
    for item in iter_canonical_passing(journal, kind::CHUNK).filter_map(Result::ok) {
        if let Walked::Record(_, bytes) = item {
            kept.extend_from_slice(bytes);
        }
    }
    kept
}

/// A finished run's summary: out of its whole journal `whole` (its chunks
/// set apart where `apart` says), the records a summary keeps
/// (`crate::recovery::summary_keeps`: its `Start` and `Done`, and its
/// streams), in journal order, with its search
/// attributes as they stood at its end folded into the `Start`'s meta
/// (`crate::attrs`: a run is listed by them for its whole retention).
fn summary(whole: &[u8], apart: &Apart) -> (Vec<u8>, Apart) {
    let mut attrs = None;
    // Chunks, which it keeps (those set apart stay where they stood), are
    // copied as they are, not decoded.
    let cut = rewrite_kept(whole, apart, |tag, bytes| {
        if tag == kind::CHUNK {
            return Some(Cow::Borrowed(bytes));
        }
        let (rec, _) = iter_canonical(bytes).next()?.ok()?;
        if !crate::recovery::summary_keeps(&rec) {
            return None;
        }
        if !matches!(rec, Record::Start { .. }) {
            return Some(Cow::Borrowed(bytes));
        }
        let (attrs, _) = attrs.get_or_insert_with(|| crate::attrs::of_journal(whole));
        let mut start = rec.to_buf();
        match &mut start {
            RecordBuf::Start { meta, .. } if !(attrs.is_empty() && meta.is_none()) => {
                *meta = crate::attrs::meta_with(meta.as_deref(), attrs);
                let mut out = Vec::new();
                fusee_core::record::encode_canonical(&start, &mut out);
                Some(Cow::Owned(out))
            }
            _ => Some(Cow::Borrowed(bytes)),
        }
    });
    // Bytes that do not frame: nothing is cut (the frame stays as it is).
    cut.unwrap_or_else(|_| (whole.to_vec(), apart.clone()))
}

/// What [`ShardLoop::parked_result`] found.
pub(super) enum ParkedResult {
    /// The frame names another ID: the one asked for is not this run.
    Other,
    /// The run has not finished.
    Running,
    /// The run's result.
    Finished(RunResult),
}

/// The first record of the stored journal `journal`: its `Start`.
pub(super) fn start_of(journal: &[u8]) -> Option<RecordRef<'_>> {
    iter_canonical(journal)
        .next()
        .and_then(Result::ok)
        .map(|(r, _)| r)
}

/// Whether the stored journal `journal` starts with a `Start` naming `id`.
pub(super) fn names(journal: &[u8], id: &str) -> bool {
    matches!(start_of(journal), Some(Record::Start { id: found, .. }) if found == id)
}

/// The `Done` record in the stored journal `journal`, the records before
/// it framed, not decoded (a finished run has one, near its end).
pub(super) fn done_of(journal: &[u8]) -> Option<RecordRef<'_>> {
    find_kind(journal, kind::DONE).and_then(Result::ok)
}

/// Reads the frame at `blob` from `store` and the chain before it: the
/// run's stored journal, oldest record first, and its last LSN.
pub(super) fn read_chain(store: &mut AnyRuns, blob: BlobRef) -> Result<Frame, StorageError> {
    crate::recovery::read_chain(store, blob).map_err(chain_error)
}

/// A frame chain's failure as the engine reports it.
pub(super) fn chain_error(e: ChainError) -> StorageError {
    match e {
        ChainError::Store(e) => e,
        ChainError::Entry { offset, .. } => corrupt("run frame", offset),
        ChainError::OtherKind { offset } => corrupt("run frame of another kind", offset),
        ChainError::TooDeep { offset } => corrupt("run frame chain deeper than its limit", offset),
    }
}
