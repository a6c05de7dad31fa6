//! Run-store compaction: when most of the bytes written to the run store
//! since the last compaction were released (runs loaded back, rewritten
//! whole, finished, expired), the store is asked to reclaim them, just
//! before a checkpoint, which then commits the frames' new addresses.
//!
//! A backend that reclaims by moving frames (the file backend) reports each
//! move; a run's frame is found by its address and the core told where it
//! went. A `Delta` frame points at the frame before it by address, so
//! before compacting, every run whose stored journal is a chain is written
//! whole (one `Park` frame), and no frame points at another but to name
//! `Stream` frames (its chunks set apart, `fusee_core::store::apart`).
//! Those runs are known by their table flag (a loaded run by its own),
//! their frames read for the `Stream` frames they name before the
//! compaction, and each whose `Stream` frames moved is written again
//! naming where they went, before the checkpoint commits: a crash before
//! it leaves the old addresses, which stay readable until then.

use std::borrow::Cow;

use fusee_core::record::RunId;
use fusee_core::shard::BlobRef;
use fusee_core::store::{EntryRef, decode_entry, encode_entry_into};
use fusee_storage::{RunStore, StorageError};
use rustc_hash::FxHashMap;

use super::ShardLoop;

/// The run store's bytes written and released since the last compaction.
///
/// Invariant: every frame the loop writes or releases goes through
/// `store_frame` and `release_frame` (so the counts are the store's), and
/// a compaction is committed by the checkpoint that follows it. Checked
/// by `fusee/tests/parking.rs`
/// `the_run_store_is_compacted_and_moved_frames_still_load`.
#[derive(Default)]
pub(super) struct StoreBytes {
    written: u64,
    released: u64,
}

fn corrupt(what: &'static str, at: u64) -> StorageError {
    StorageError::Corrupt { what, at }
}

impl ShardLoop {
    /// Appends a frame to the run store, counted for compaction.
    pub(super) fn store_frame(&mut self, frame: &[u8]) -> Result<BlobRef, StorageError> {
        let blob = self.store.append(frame)?;
        self.store_bytes.written += u64::from(blob.len);
        Ok(blob)
    }

    /// Releases one frame, counted for compaction.
    pub(super) fn release_frame(&mut self, blob: BlobRef) -> Result<(), StorageError> {
        self.store.release(blob)?;
        self.store_bytes.released += u64::from(blob.len);
        Ok(())
    }

    /// Compacts the run store if most of what was written since the last
    /// compaction was released. Called right before a checkpoint, which
    /// commits the new addresses.
    pub(super) fn maybe_compact(&mut self) -> Result<(), StorageError> {
        if !self.compaction_wanted() {
            return Ok(());
        }
        let released = self.store_bytes.released;
        self.unchain_all()?;
        let mut owners: FxHashMap<u64, RunId> = FxHashMap::default();
        for (run, parked) in self.core.parked_runs() {
            owners.insert(parked.blob().offset, run);
        }
        for (run, l) in self.core.loaded_runs() {
            if let Some(blob) = l.blob {
                owners.insert(blob.offset, run);
            }
        }
        let streams = self.stream_owners()?;
        let mut moves = Vec::new();
        let moved = self.store.compact(&mut |old, new| moves.push((old, new)))?;
        // The attribute snapshot's frames are named by no run.
        self.attr_snapshot.moved(&moves);
        let mut stream_moves: FxHashMap<u64, BlobRef> = FxHashMap::default();
        let mut rewrite = Vec::new();
        for (old, new) in moves {
            if let Some(&run) = owners.get(&old.offset) {
                self.core.relocate_blob(run, new.offset);
            }
            if let Some(&run) = streams.get(&old.offset) {
                stream_moves.insert(old.offset, new);
                rewrite.push(run);
            }
        }
        rewrite.sort_unstable();
        rewrite.dedup();
        for run in rewrite {
            self.repoint_streams(run, &stream_moves)?;
        }
        tracing::debug!(shard = self.shard, moved, released, "run store compacted");
        self.metrics.compactions += 1;
        self.metrics.frames_moved += moved;
        let bytes = &mut self.store_bytes;
        bytes.written -= released.min(bytes.written);
        bytes.released = 0;
        Ok(())
    }

    /// Whether most of the run store written since the last compaction
    /// was released, and at least `compact_after_bytes`.
    pub(super) fn compaction_wanted(&self) -> bool {
        let StoreBytes { written, released } = self.store_bytes;
        released >= self.config.compact_after_bytes && released * 2 >= written
    }

    /// The `Stream` frames runs' frames name, by address, with their run:
    /// the frames of the runs flagged so read (each one frame, its chain
    /// written whole).
    fn stream_owners(&mut self) -> Result<FxHashMap<u64, RunId>, StorageError> {
        let mut apart: Vec<(RunId, BlobRef)> = self.core.apart_runs().collect();
        apart.extend(
            self.core
                .loaded_runs()
                .filter(|(_, l)| l.blob_apart())
                .filter_map(|(run, l)| l.blob.map(|b| (run, b))),
        );
        let mut owners = FxHashMap::default();
        let mut buf = Vec::new();
        for (run, blob) in apart {
            self.read_one(blob, &mut buf)?;
            let entry = decode_entry(&buf).map_err(|_| corrupt("run frame", blob.offset))?;
            for &(b, _) in &entry.apart().frames {
                owners.insert(b.offset, run);
            }
        }
        Ok(owners)
    }

    /// Writes run `run`'s frame again naming where its `Stream` frames
    /// went (`moves`, by their old address), and releases the old one.
    fn repoint_streams(
        &mut self,
        run: RunId,
        moves: &FxHashMap<u64, BlobRef>,
    ) -> Result<(), StorageError> {
        let blob = match self.core.get(run) {
            Some(l) => l.blob,
            None => self.core.parked(run).map(|p| p.blob()),
        };
        let Some(blob) = blob else {
            return Ok(());
        };
        let mut buf = Vec::new();
        self.read_one(blob, &mut buf)?;
        let mut entry = decode_entry(&buf).map_err(|_| corrupt("run frame", blob.offset))?;
        if let Some(apart) = entry.apart_mut() {
            for frame in &mut apart.to_mut().frames {
                if let Some(&new) = moves.get(&frame.0.offset) {
                    frame.0 = new;
                }
            }
        }
        let mut frame = Vec::new();
        encode_entry_into(&entry, &mut frame).map_err(|_| corrupt("run frame (encode)", run))?;
        let new = self.store_frame(&frame)?;
        self.release_frame(blob)?;
        self.core.rewritten_whole(run, new, true);
        Ok(())
    }

    /// Writes every stored chain whole: parked runs whose frame is a
    /// `Delta`, and loaded runs whose stored prefix is a chain. Chunks set
    /// apart stay in their `Stream` frames, named by the whole frame.
    fn unchain_all(&mut self) -> Result<(), StorageError> {
        let mut chained: Vec<(RunId, BlobRef)> = self.core.chained_runs().collect();
        chained.extend(
            self.core
                .loaded_runs()
                .filter(|(_, l)| l.blob_depth > 0)
                .filter_map(|(run, l)| l.blob.map(|b| (run, b))),
        );
        for (run, blob) in chained {
            let (new, apart) = self.rewrite_whole(run, blob)?;
            self.core.rewritten_whole(run, new, apart);
        }
        Ok(())
    }

    /// Writes the chain ending at `blob` as one `Park` frame (the newest
    /// frame's timers and identity, the whole journal, its chunks set
    /// apart named again), releases the chain and returns the new frame
    /// and whether it names `Stream` frames.
    fn rewrite_whole(
        &mut self,
        run: RunId,
        blob: BlobRef,
    ) -> Result<(BlobRef, bool), StorageError> {
        let whole = self.read_frame_apart(blob)?;
        let mut newest = Vec::new();
        self.read_one(blob, &mut newest)?;
        let entry = decode_entry(&newest).map_err(|_| corrupt("run frame", blob.offset))?;
        // A chain's newest frame is a `Delta` or (at depth 0) a `Park`.
        let chain = matches!(entry, EntryRef::Delta { .. } | EntryRef::Park { .. });
        let entry = entry
            .written_whole(&whole.journal, Cow::Borrowed(&whole.apart))
            .filter(|_| chain)
            .ok_or_else(|| corrupt("run frame of another kind", blob.offset))?;
        let mut frame = Vec::new();
        encode_entry_into(&entry, &mut frame).map_err(|_| corrupt("run frame (encode)", run))?;
        let new = self.store_frame(&frame)?;
        // The chain; its `Stream` frames are the new frame's.
        for &old in whole.heads() {
            self.release_frame(old)?;
        }
        Ok((new, !whole.apart.is_empty()))
    }
}
