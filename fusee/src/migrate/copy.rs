//! Copying each shard's last commit, the frames it names and its log tail
//! into another storage (see the [design](super)).

use std::borrow::Cow;

use fusee_core::record::{Lsn, RunId};
use fusee_core::shard::BlobRef;
use fusee_core::store::{Checkpoint, EntryRef, decode_entry, encode_entry_into};
use fusee_core::table::{DELETED, Entry, RECORD, flag};
use fusee_storage::{CheckpointStore, IndexChange, LogStore, RunStore, Storage, StorageError};

use super::check::PREFETCH_RUNS;
use super::{Event, MigrateError, Moved, Progress, report};
use crate::inspect::read_chain;
use crate::runtime::messages::{Message, Outbox};

/// Log bytes appended between two flushes of the destination log: large
/// batches (the destination is refused until the end anyway), bounded
/// memory for a backend that buffers until the flush.
const FLUSH_BYTES: usize = 8 << 20;
/// Index bytes per base chunk streamed to the destination.
const CHUNK_BYTES: usize = 64 << 10;

/// Where a shard's inbox messages (PostgreSQL) come from and go to. The
/// defaults: no inbox.
pub trait Inboxes<L> {
    /// Whether this storage has inboxes at all (else [`take`](Self::take)
    /// is never worth a shard's open).
    fn present(&self) -> bool {
        false
    }

    /// Every message waiting in the inbox of the shard whose log is `log`
    /// (left in place).
    fn take(&mut self, log: &mut L) -> Result<Vec<Vec<u8>>, StorageError> {
        let _ = log;
        Ok(Vec::new())
    }

    /// Posts `messages` to shard `shard`'s inbox; `false` if this storage
    /// has none (the messages then go into the shard's outbox).
    fn post(
        &mut self,
        log: &mut L,
        shard: u32,
        messages: &[Vec<u8>],
    ) -> Result<bool, StorageError> {
        let _ = (log, shard, messages);
        Ok(false)
    }
}

/// What [`copy_storage`] copied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyReport {
    /// Shards copied.
    pub shards: u32,
    /// Run-store frames written (one per parked run and per loaded run
    /// with a stored prefix).
    pub frames: u64,
    /// Parked runs the indexes list (finished ones within retention
    /// included).
    pub parked: u64,
    /// Runs loaded at the checkpoints.
    pub loaded: u64,
    /// Log records after the checkpoints, copied.
    pub log_records: u64,
    /// Messages waiting in outboxes (checkpoints') and inboxes.
    pub inbox_messages: u64,
}

/// Copies every shard of `src` into `dst`, whose shards must be new
/// (module docs: the last commit with new frame addresses, the log tail
/// with shifted LSNs, inbox messages). `src_inbox` reads a source shard's
/// inbox; `dst_inbox` posts to a destination shard's.
pub fn copy_storage<S: Storage, D: Storage>(
    src: &S,
    dst: &D,
    src_inbox: &mut dyn Inboxes<S::Log>,
    dst_inbox: &mut dyn Inboxes<D::Log>,
    progress: Progress<'_>,
) -> Result<CopyReport, MigrateError> {
    let shards = src
        .shards()
        .map_err(MigrateError::storage("source", None))?;
    let mut out = CopyReport::default();
    let count = shards.len() as u32;
    for shard in shards {
        report(
            progress,
            Event::Shard {
                shard,
                shards: count,
            },
        )?;
        copy_shard(src, dst, shard, src_inbox, dst_inbox, progress, &mut out)?;
        out.shards += 1;
        report(progress, Event::ShardDone)?;
    }
    Ok(out)
}

fn copy_shard<S: Storage, D: Storage>(
    src: &S,
    dst: &D,
    shard: u32,
    src_inbox: &mut dyn Inboxes<S::Log>,
    dst_inbox: &mut dyn Inboxes<D::Log>,
    progress: Progress<'_>,
    out: &mut CopyReport,
) -> Result<(), MigrateError> {
    let from = MigrateError::storage("source", Some(shard));
    let mut s = src.open_shard(shard).map_err(&from)?;
    let inbox = src_inbox.take(&mut s.log).map_err(&from)?;
    let source = SourceShard {
        checkpoint: s.recovered.checkpoint.as_deref(),
        log: &mut s.log,
        runs: &mut s.runs,
        index: &mut s.checkpoint,
    };
    copy_parts(source, inbox, dst, shard, dst_inbox, progress, out)
}

/// A source shard's parts as the copier reads them: a stopped store's
/// shard opened for the copy, or a live engine's shard held at its
/// checkpoint ([`crate::backup`]).
pub(crate) struct SourceShard<'a, L, R, C> {
    /// The last commit's checkpoint bytes (`None`: the shard never took
    /// one).
    pub(crate) checkpoint: Option<&'a [u8]>,
    /// The log (read after the checkpoint's LSN).
    pub(crate) log: &'a mut L,
    /// The run store (the frames the commit names).
    pub(crate) runs: &'a mut R,
    /// The checkpoint part (the last commit's index).
    pub(crate) index: &'a mut C,
}

/// Copies one source shard's last commit, the frames it names, its log
/// tail and `inbox` (its inbox messages, already read) into the new shard
/// `shard` of `dst`.
pub(crate) fn copy_parts<L: LogStore, R: RunStore, C: CheckpointStore, D: Storage>(
    s: SourceShard<'_, L, R, C>,
    inbox: Vec<Vec<u8>>,
    dst: &D,
    shard: u32,
    dst_inbox: &mut dyn Inboxes<D::Log>,
    progress: Progress<'_>,
    out: &mut CopyReport,
) -> Result<(), MigrateError> {
    let from = MigrateError::storage("source", Some(shard));
    let to = MigrateError::storage("destination", Some(shard));
    let mut d = dst.open_shard(shard).map_err(&to)?;
    if d.recovered.checkpoint.is_some() || d.recovered.store_position != 0 || d.log.last_lsn() != 0
    {
        return Err(MigrateError::TargetNotEmpty(format!("(shard {shard})")));
    }
    let damaged = |what: &'static str| {
        move |e: &dyn std::fmt::Display| MigrateError::Damaged {
            shard,
            what,
            detail: e.to_string(),
        }
    };
    out.inbox_messages += inbox.len() as u64;
    let posted = inbox.is_empty() || dst_inbox.post(&mut d.log, shard, &inbox).map_err(&to)?;
    let checkpoint = s
        .checkpoint
        .map(Checkpoint::decode)
        .transpose()
        .map_err(|e| damaged("checkpoint")(&e))?;
    let base: Lsn = checkpoint.as_ref().map_or(0, |c| c.lsn);
    if let Some(mut cp) = checkpoint {
        let mut moved = Moved::default();
        let mut buf = Vec::new();
        let mut frame = Vec::new();
        for run in &mut cp.runs {
            if let Some(blob) = run.blob {
                let new = copy_frame(
                    &mut *s.runs,
                    &mut d.runs,
                    blob,
                    base,
                    &mut buf,
                    &mut frame,
                    None,
                )
                .map_err(|e| e.at(shard))?;
                moved.insert(blob, new);
                run.blob = Some(new);
                run.blob_chain = u64::from(new.len);
                run.blob_depth = 0;
                out.frames += 1;
            }
            run.last_lsn = run.last_lsn.saturating_sub(base);
            out.loaded += 1;
        }
        d.checkpoint.begin_base().map_err(&to)?;
        let mut chunk = Vec::with_capacity(CHUNK_BYTES + RECORD);
        let mut failed: Option<MigrateError> = None;
        let mut parked = 0u64;
        let (sruns, druns, dcp) = (&mut *s.runs, &mut d.runs, &mut d.checkpoint);
        s.index
            .read_index(&mut |records| {
                if failed.is_some() {
                    return Ok(());
                }
                for (i, rec) in records.chunks_exact(RECORD).enumerate() {
                    if i % PREFETCH_RUNS == 0 {
                        // The next frames in one round trip where reads are
                        // round trips; a failure here only loses the hint.
                        let next: Vec<BlobRef> = records[i * RECORD..]
                            .chunks_exact(RECORD)
                            .take(PREFETCH_RUNS)
                            .filter_map(|r| Entry::from_record(r.try_into().ok()?))
                            .filter(|e| {
                                e.state() != DELETED
                                    && !moved.contains_key(&BlobRef {
                                        offset: e.offset(),
                                        len: e.len(),
                                    })
                            })
                            .map(|e| BlobRef {
                                offset: e.offset(),
                                len: e.len(),
                            })
                            .collect();
                        let _ = sruns.prefetch(&next);
                    }
                    let step = (|| -> Result<bool, FrameFail> {
                        let bytes: &[u8; RECORD] =
                            rec.try_into().map_err(|_| FrameFail::short())?;
                        let mut e = Entry::from_record(bytes).ok_or_else(FrameFail::index)?;
                        if e.state() == DELETED {
                            return Ok(false);
                        }
                        let old = BlobRef {
                            offset: e.offset(),
                            len: e.len(),
                        };
                        let new = match moved.get(&old) {
                            Some(&n) => n,
                            None => {
                                copy_frame(sruns, druns, old, base, &mut buf, &mut frame, None)?
                            }
                        };
                        e.set_location(new.offset, new.len);
                        e.set(flag::CHAINED, false);
                        chunk.extend_from_slice(&e.record());
                        Ok(true)
                    })();
                    match step {
                        Ok(true) => parked += 1,
                        Ok(false) => {}
                        Err(e) => {
                            failed = Some(e.at(shard));
                            return Ok(());
                        }
                    }
                    if parked.is_multiple_of(4096)
                        && let Err(e) = report(progress, Event::Frames(parked))
                    {
                        failed = Some(e);
                        return Ok(());
                    }
                }
                if chunk.len() >= CHUNK_BYTES {
                    if let Err(e) = dcp.base_chunk(&chunk) {
                        failed = Some(to(e));
                        return Ok(());
                    }
                    chunk.clear();
                }
                Ok(())
            })
            .map_err(&from)?;
        if let Some(e) = failed {
            return Err(e);
        }
        if !chunk.is_empty() {
            d.checkpoint.base_chunk(&chunk).map_err(&to)?;
        }
        out.parked += parked;
        out.frames += parked;
        if !posted {
            let mut outbox =
                Outbox::decode(&cp.outbox).map_err(|e| damaged("checkpoint outbox")(&e))?;
            for bytes in &inbox {
                let m = Message::from_bytes(bytes).map_err(|e| damaged("inbox message")(&e))?;
                outbox.add(m);
            }
            cp.outbox = outbox.encode();
        }
        cp.lsn = 0;
        cp.store_generation = 0;
        cp.store_len = d.runs.position();
        cp.index = Vec::new();
        // The search-attribute snapshot is not copied: the copy's first
        // open builds its index from the runs (`attrs`).
        cp.attr_frames = Vec::new();
        cp.obsolete = 0;
        cp.index_runs = parked;
        let committed = d
            .checkpoint
            .commit(&mut d.runs, IndexChange::Base, &cp.encode())
            .map_err(&to)?;
        if committed.index_records != parked {
            return Err(MigrateError::Mismatch {
                shard,
                run: 0,
                what: format!(
                    "the destination's index holds {} records, the source's {parked}",
                    committed.index_records
                ),
            });
        }
        report(progress, Event::Committed)?;
    } else if !posted {
        return Err(MigrateError::InboxWithoutCheckpoint(shard));
    }
    if s.log.last_lsn() > base {
        let mut failed: Option<MigrateError> = None;
        let mut pending = 0usize;
        let mut copied = 0u64;
        let dlog = &mut d.log;
        s.log
            .read(base, &mut |lsn, bytes| {
                if failed.is_some() {
                    return Ok(());
                }
                let r = dlog.append(lsn - base, bytes).and_then(|()| {
                    pending += bytes.len();
                    if pending >= FLUSH_BYTES {
                        pending = 0;
                        dlog.flush()?;
                    }
                    Ok(())
                });
                if let Err(e) = r {
                    failed = Some(to(e));
                    return Ok(());
                }
                copied += 1;
                if copied.is_multiple_of(65536)
                    && let Err(e) = report(progress, Event::LogRecords(copied))
                {
                    failed = Some(e);
                }
                Ok(())
            })
            .map_err(&from)?;
        if let Some(e) = failed {
            return Err(e);
        }
        d.log.flush().map_err(&to)?;
        out.log_records += copied;
        report(progress, Event::LogRecords(copied))?;
    }
    d.log.seal().map_err(&to)?;
    Ok(())
}

/// Why one frame could not be copied (the shard is added by the caller).
pub(crate) enum FrameFail {
    Source(StorageError),
    Dest(StorageError),
    Damaged(&'static str, String),
}

impl FrameFail {
    fn short() -> Self {
        Self::Damaged("index record", "shorter than 32 bytes".into())
    }

    fn index() -> Self {
        Self::Damaged("index record", "not a well-formed entry".into())
    }

    pub(crate) fn at(self, shard: u32) -> MigrateError {
        match self {
            Self::Source(error) => MigrateError::Storage {
                side: "source",
                shard: Some(shard),
                error,
            },
            Self::Dest(error) => MigrateError::Storage {
                side: "destination",
                shard: Some(shard),
                error,
            },
            Self::Damaged(what, detail) => MigrateError::Damaged {
                shard,
                what,
                detail,
            },
        }
    }
}

/// A frame's run number and journal rewritten for another shard (a
/// reshard's renumbering): given the run and its whole journal, the new
/// run and the journal to write.
pub(crate) type Retarget<'a> = &'a mut dyn FnMut(RunId, &[u8]) -> Result<(RunId, Vec<u8>), String>;

/// Copies the frame at `blob` (with the `Delta` chain before it, written as
/// one `Park` frame) into `to`, its last LSN shifted by `base` and, given
/// `retarget`, its run and journal rewritten; returns its new address.
pub(crate) fn copy_frame<R: RunStore, W: RunStore>(
    from: &mut R,
    to: &mut W,
    blob: BlobRef,
    base: Lsn,
    buf: &mut Vec<u8>,
    frame: &mut Vec<u8>,
    retarget: Option<Retarget<'_>>,
) -> Result<BlobRef, FrameFail> {
    from.read(blob, buf).map_err(FrameFail::Source)?;
    // Outlive `entry`, which borrows a chain's journal from the one and
    // a rewritten journal from the other.
    let chained;
    let rewritten;
    let mut entry =
        decode_entry(buf).map_err(|e| FrameFail::Damaged("run frame", e.to_string()))?;
    match &mut entry {
        EntryRef::Park { last_lsn, .. }
        | EntryRef::Done { last_lsn, .. }
        | EntryRef::Delta { last_lsn, .. } => *last_lsn = last_lsn.saturating_sub(base),
        _ => {
            return Err(FrameFail::Damaged(
                "run frame",
                format!("frame at {} is not a run's", blob.offset),
            ));
        }
    }
    // A chain, or a frame whose chunks went apart, names other frames of
    // the source store: copied as one frame holding its whole journal.
    let whole = matches!(entry, EntryRef::Delta { .. }) || !entry.apart().is_empty();
    if whole {
        chained =
            read_chain(from, blob).map_err(|e| FrameFail::Damaged("run frame", e.to_string()))?;
        // Only a run's frames get here (others were refused above).
        entry = entry
            .written_whole(&chained.journal, Cow::default())
            .ok_or_else(|| FrameFail::Damaged("run frame", "not a run's".into()))?;
    }
    if let Some(retarget) = retarget {
        let (EntryRef::Park { run, journal, .. } | EntryRef::Done { run, journal, .. }) =
            &mut entry
        else {
            // A Delta became a Park above, other kinds were refused: never.
            return Err(FrameFail::Damaged("run frame", "not a run's".into()));
        };
        let (new_run, new_journal) =
            retarget(*run, journal).map_err(|e| FrameFail::Damaged("run frame journal", e))?;
        rewritten = new_journal;
        *run = new_run;
        *journal = &rewritten;
    }
    frame.clear();
    encode_entry_into(&entry, frame).map_err(|e| FrameFail::Damaged("run frame", e.to_string()))?;
    to.append(frame).map_err(FrameFail::Dest)
}
