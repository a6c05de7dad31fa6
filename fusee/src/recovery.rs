//! A shard's state recovered from its storage, in the storage contract's
//! order: the index, the checkpoint's runs (a run's stored prefix from its
//! frames, then its journal suffix), then the log after the checkpoint
//! through [`ShardCore::apply`], a parked run loaded from its frames
//! before a record for it, as the live shard did before appending it.
//!
//! One copy, for the engine's shard loop (`runtime/recover.rs`, which then
//! starts the runs' code) and for the read-only inspection
//! ([`crate::inspect::rebuild`]); each words a failure ([`Damage`]) its
//! own way. Also the one reader of a run's frame chain ([`read_chain`]),
//! for recovery, for loading a parked run and for the inspection.

use fusee_core::record::{
    Lsn, Record, Walked, iter_canonical, iter_canonical_passing, kind, value_kind,
};
use fusee_core::shard::{BlobRef, IndexError, Mode, ShardCore};
use fusee_core::store::{Checkpoint, EntryRef, StoreError, decode_entry};
use fusee_core::wire::DecodeError;
use fusee_storage::{CheckpointStore, LogStore, RunStore, StorageError};

/// How many `Delta` frames a run's chain may hold before its newest frame
/// is written whole again (`runtime/parking.rs` writes to it; a reader
/// refuses a deeper chain as damaged).
pub(crate) const MAX_DEPTH: u8 = 8;

/// A run's stored journal read from its frame chain.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chain {
    /// The run's canonical records, oldest first (the whole chain's).
    pub(crate) journal: Vec<u8>,
    /// The LSN of the run's last record.
    pub(crate) last_lsn: Lsn,
    /// How many `Delta` frames precede the newest (0: it is whole).
    pub(crate) depth: u8,
    /// The bytes of every frame read.
    pub(crate) chain_bytes: u64,
    /// The frames read, newest first: what a run written whole again
    /// releases (known from this read, not from another).
    pub(crate) blobs: Vec<BlobRef>,
}

/// Why a frame chain did not read.
#[derive(Debug)]
pub(crate) enum ChainError {
    /// The run store refused a read.
    Store(StorageError),
    /// The frame at `offset` did not decode.
    Entry { offset: u64, error: StoreError },
    /// The frame at `offset` is not a run's frame.
    OtherKind { offset: u64 },
    /// The chain from `offset` is deeper than [`MAX_DEPTH`].
    TooDeep { offset: u64 },
}

/// Whether a finished run's summary frame keeps `rec`: its `Start` and
/// `Done` (input and result), and its streams (each stream's opening, its
/// chunks and its end: a stream stays readable as long as its run's
/// result, `Config::retention`, whatever its size and the history time).
/// One rule for the engine's summaries (`runtime/parking`) and for every
/// reader telling a summary from a whole journal ([`summary_only`]).
pub(crate) fn summary_keeps<S, B>(rec: &Record<S, B>) -> bool {
    matches!(
        rec,
        Record::Start { .. }
            | Record::Done { .. }
            | Record::Chunk { .. }
            | Record::StreamEnd { .. }
    ) || matches!(rec, Record::Value { kind, .. } if *kind == value_kind::STREAM)
}

/// Whether the finished run's stored `journal` holds only what a summary
/// keeps ([`summary_keeps`]): its history was let go. (A journal that
/// never held more reads the same: a frame does not say which it is; a
/// run that streams has steps, so this is a run of no operation.)
/// Undecodable bytes count as more.
pub(crate) fn summary_only(journal: &[u8]) -> bool {
    // Chunks, which a summary keeps, framed and not decoded.
    iter_canonical_passing(journal, kind::CHUNK).all(|r| match r {
        Ok(Walked::Record(rec, _)) => summary_keeps(&rec),
        Ok(Walked::Passed { .. }) => true,
        Err(_) => false,
    })
}

/// Reads the frame at `blob` and the chain of `Delta` frames before it.
pub(crate) fn read_chain<R: RunStore + ?Sized>(
    runs: &mut R,
    blob: BlobRef,
) -> Result<Chain, ChainError> {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let mut last_lsn = None;
    let mut next = blob;
    let mut buf = Vec::new();
    let mut chain_bytes = 0u64;
    let mut blobs = Vec::new();
    for _ in 0..=MAX_DEPTH {
        runs.read(next, &mut buf).map_err(ChainError::Store)?;
        blobs.push(next);
        chain_bytes += buf.len() as u64;
        let entry = decode_entry(&buf).map_err(|error| ChainError::Entry {
            offset: next.offset,
            error,
        })?;
        let (lsn, journal, prev) = match entry {
            EntryRef::Park {
                last_lsn, journal, ..
            }
            | EntryRef::Done {
                last_lsn, journal, ..
            } => (last_lsn, journal, None),
            EntryRef::Delta {
                last_lsn,
                journal,
                prev,
                ..
            } => (last_lsn, journal, Some(prev)),
            _ => {
                return Err(ChainError::OtherKind {
                    offset: next.offset,
                });
            }
        };
        last_lsn.get_or_insert(lsn);
        // The journal fills the rest of the frame's body.
        let at = buf.len() - journal.len();
        if prev.is_none() && parts.is_empty() {
            // A whole frame (the usual chain) keeps the buffer it was read
            // into: a journal of megabytes is not allocated and copied again.
            buf.drain(..at);
            return Ok(Chain {
                journal: buf,
                last_lsn: lsn,
                depth: 0,
                chain_bytes,
                blobs,
            });
        }
        parts.push(buf[at..].to_vec());
        match prev {
            Some(p) => next = p,
            None => {
                // At most MAX_DEPTH + 1 frames were read.
                let depth = u8::try_from(parts.len() - 1).unwrap_or(MAX_DEPTH);
                parts.reverse();
                return Ok(Chain {
                    journal: parts.concat(),
                    last_lsn: last_lsn.unwrap_or(lsn),
                    depth,
                    chain_bytes,
                    blobs,
                });
            }
        }
    }
    Err(ChainError::TooDeep {
        offset: blob.offset,
    })
}

/// Why recovery stopped: the caller words it (the engine as a
/// `StorageError`, the inspection naming the shard and the LSN).
#[derive(Debug)]
pub(crate) enum Damage {
    /// The storage refused a read.
    Store(StorageError),
    /// The index's records did not load.
    Index(IndexError),
    /// A run's frame chain did not read (`lsn`: the log record that
    /// loaded the run; `None` for the checkpoint).
    Frame { lsn: Option<Lsn>, error: ChainError },
    /// A frame's journal did not decode.
    FrameJournal {
        lsn: Option<Lsn>,
        error: DecodeError,
    },
    /// A run's journal in the checkpoint did not decode.
    CheckpointJournal(DecodeError),
    /// A log record did not decode (`None`: it was empty).
    LogRecord {
        lsn: Lsn,
        error: Option<DecodeError>,
    },
}

/// Loads the index into `core` (before anything else: a run parked in it
/// and loaded at the checkpoint becomes loaded when the checkpoint's
/// records are applied). Returns what the store's `read_index` returns.
pub(crate) fn load_index<C: CheckpointStore + ?Sized>(
    core: &mut ShardCore,
    checkpoints: &mut C,
) -> Result<u64, Damage> {
    let mut index_err = None;
    let read = checkpoints
        .read_index(&mut |chunk| {
            if let Err(e) = core.load_index(chunk) {
                index_err.get_or_insert(e);
            }
            Ok(())
        })
        .map_err(Damage::Store)?;
    if let Some(e) = index_err {
        return Err(Damage::Index(e));
    }
    core.index_loaded();
    Ok(read)
}

/// Applies checkpoint `cp`'s runs to `core`: a run loaded from the store
/// keeps its prefix there (its frames, then its blob noted), then its
/// journal suffix.
pub(crate) fn load_checkpoint<R: RunStore + ?Sized>(
    core: &mut ShardCore,
    runs: &mut R,
    cp: &Checkpoint,
) -> Result<(), Damage> {
    core.set_next_run_id(cp.next_run);
    for run in &cp.runs {
        if let Some(blob) = run.blob {
            let prefix =
                read_chain(runs, blob).map_err(|error| Damage::Frame { lsn: None, error })?;
            // Borrowed, record by record: a long journal costs no
            // allocation per record, and a stream's chunks no decode
            // (`ShardCore::apply_passed_chunks`). A record that does not
            // decode fails the open, which keeps nothing of this core.
            core.apply_journal(run.last_lsn, run.run, Mode::BLOB, &prefix.journal)
                .map_err(|error| Damage::FrameJournal { lsn: None, error })?;
            core.set_blob(
                run.run,
                blob,
                run.blob_chain,
                run.blob_depth,
                prefix.journal.len() as u64,
            );
        }
        // The suffix stays in memory: its bytes are copied, not encoded again.
        core.apply_journal(run.last_lsn, run.run, Mode::SUFFIX, &run.journal)
            .map_err(Damage::CheckpointJournal)?;
    }
    Ok(())
}

/// Replays the log after LSN `after` through `core`, loading a parked
/// unfinished run from its frames before a record for it (its blob noted,
/// as the live shard's load does). `progress` is told each LSN replayed.
/// Returns how many records were replayed; the first damage found stops
/// the replay.
pub(crate) fn replay_log<L: LogStore + ?Sized, R: RunStore + ?Sized>(
    core: &mut ShardCore,
    log: &mut L,
    runs: &mut R,
    after: Lsn,
    now_ms: u64,
    progress: &mut dyn FnMut(Lsn),
) -> Result<u64, Damage> {
    let mut replayed = 0u64;
    if log.last_lsn() <= after {
        return Ok(0);
    }
    let mut bad: Option<Damage> = None;
    log.read(after, &mut |lsn, bytes| {
        if bad.is_some() {
            return Ok(());
        }
        let rec = match iter_canonical(bytes).next() {
            Some(Ok((rec, _))) => rec,
            Some(Err(error)) => {
                bad = Some(Damage::LogRecord {
                    lsn,
                    error: Some(error),
                });
                return Ok(());
            }
            None => {
                bad = Some(Damage::LogRecord { lsn, error: None });
                return Ok(());
            }
        };
        let run = rec.run();
        if let Some(parked) = core.parked(run).filter(|p| p.done().is_none()) {
            let blob = parked.blob();
            let loaded = read_chain(runs, blob)
                .map_err(|error| Damage::Frame {
                    lsn: Some(lsn),
                    error,
                })
                .and_then(|frame| {
                    core.unpark_encoded(run, frame.last_lsn, &frame.journal, now_ms)
                        .map_err(|error| Damage::FrameJournal {
                            lsn: Some(lsn),
                            error,
                        })?;
                    core.set_blob(
                        run,
                        blob,
                        frame.chain_bytes,
                        frame.depth,
                        frame.journal.len() as u64,
                    );
                    Ok(())
                });
            if let Err(e) = loaded {
                bad = Some(e);
                return Ok(());
            }
        }
        core.apply(lsn, &rec, Mode::RECOVER);
        replayed += 1;
        progress(lsn);
        Ok(())
    })
    .map_err(Damage::Store)?;
    match bad {
        Some(e) => Err(e),
        None => Ok(replayed),
    }
}
