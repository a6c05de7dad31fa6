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
    Lsn, Record, RunId, Walked, iter_canonical, iter_canonical_passing, kind, value_kind,
};
use fusee_core::shard::{BlobRef, IndexError, Mode, ShardCore, StoredPrefix};
use fusee_core::store::{Apart, Checkpoint, EntryRef, StoreError, decode_entry, join_chunks};
use fusee_core::wire::DecodeError;
use fusee_storage::{CheckpointStore, LogStore, RunStore, StorageError};

/// How many `Delta` frames a run's chain may hold before its newest frame
/// is written whole again (`runtime/parking.rs` writes to it; a reader
/// refuses a deeper chain as damaged).
pub(crate) const MAX_DEPTH: u8 = 8;

/// A run's stored journal read from its frame chain.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chain {
    /// The run the frames are of.
    pub(crate) run: RunId,
    /// The run's canonical records, oldest first (the whole chain's);
    /// without the chunks `apart` names, if any.
    pub(crate) journal: Vec<u8>,
    /// Where the chain's chunks set apart went, and where they stood in
    /// `journal` (empty once [`read_chain`] put them back).
    pub(crate) apart: Apart,
    /// The LSN of the run's last record.
    pub(crate) last_lsn: Lsn,
    /// How many `Delta` frames precede the newest (0: it is whole).
    pub(crate) depth: u8,
    /// The bytes of every frame read.
    pub(crate) chain_bytes: u64,
    /// The chain's frames, newest first, then the `Stream` frames holding
    /// its chunks set apart: what a run written whole again without them
    /// releases (known from this read, not from another).
    pub(crate) blobs: Vec<BlobRef>,
}

impl Chain {
    /// The chain's own frames, newest first (without the `Stream` frames
    /// it names).
    pub(crate) fn heads(&self) -> &[BlobRef] {
        let own = (usize::from(self.depth) + 1).min(self.blobs.len());
        &self.blobs[..own]
    }

    /// What the chain is as a loaded run's stored prefix: its bytes, depth,
    /// the whole journal's length (its chunks set apart included: what a
    /// reader that walked the whole journal has) and whether it names
    /// `Stream` frames.
    pub(crate) fn stored(&self) -> StoredPrefix {
        StoredPrefix {
            chain: self.chain_bytes,
            depth: self.depth,
            journal_len: self.apart.joined_len(self.run, self.journal.len()),
            apart: !self.apart.is_empty(),
        }
    }
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

/// Reads the frame at `blob` and the chain of `Delta` frames before it,
/// with the chunks of any frame whose chunks went apart read from their
/// `Stream` frames and put back (`fusee_core::store::apart`): the journal
/// is the run's records as a frame that kept them would hold.
pub(crate) fn read_chain<R: RunStore + ?Sized>(
    runs: &mut R,
    blob: BlobRef,
) -> Result<Chain, ChainError> {
    let mut chain = read_chain_apart(runs, blob)?;
    join_streams(runs, &mut chain)?;
    Ok(chain)
}

/// Puts the chunks `chain` (read by [`read_chain_apart`]) set apart back
/// into its journal, read from their `Stream` frames (their bytes added to
/// `chain_bytes`); nothing to do for a chain that kept them.
pub(crate) fn join_streams<R: RunStore + ?Sized>(
    runs: &mut R,
    chain: &mut Chain,
) -> Result<(), ChainError> {
    if chain.apart.is_empty() {
        return Ok(());
    }
    let apart = std::mem::take(&mut chain.apart);
    let mut bodies = Vec::with_capacity(apart.frames.len());
    let mut buf = Vec::new();
    for &(at, _) in &apart.frames {
        runs.read(at, &mut buf).map_err(ChainError::Store)?;
        chain.chain_bytes += buf.len() as u64;
        let entry = decode_entry(&buf).map_err(|error| ChainError::Entry {
            offset: at.offset,
            error,
        })?;
        let skip = match entry {
            EntryRef::Stream { run, chunks } if run == chain.run => buf.len() - chunks.len(),
            _ => return Err(ChainError::OtherKind { offset: at.offset }),
        };
        buf.drain(..skip);
        bodies.push(std::mem::take(&mut buf));
    }
    let given: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    let mut joined = Vec::new();
    let head = chain.blobs.first().map_or(0, |b| b.offset);
    join_chunks(&chain.journal, &apart.runs, &given, &mut joined).map_err(|error| {
        ChainError::Entry {
            offset: head,
            error: StoreError::Malformed(error),
        }
    })?;
    chain.journal = joined;
    Ok(())
}

/// Reads the frame at `blob` and the chain of `Delta` frames before it,
/// leaving the chunks set apart where they are: the journal holds the
/// rest, and the chain's section says where they went (its frames' runs
/// one after the other; `Stream` frames are named in `blobs`, not read).
/// What a load, a result and a rewrite that keeps the `Stream` frames
/// read: no chunk set apart.
pub(crate) fn read_chain_apart<R: RunStore + ?Sized>(
    runs: &mut R,
    blob: BlobRef,
) -> Result<Chain, ChainError> {
    let mut parts: Vec<(Vec<u8>, Apart)> = Vec::new();
    let mut last_lsn = None;
    let mut run = None;
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
        let (lsn, journal, prev) = match &entry {
            EntryRef::Park {
                last_lsn, journal, ..
            }
            | EntryRef::Done {
                last_lsn, journal, ..
            } => (*last_lsn, *journal, None),
            EntryRef::Delta {
                last_lsn,
                journal,
                prev,
                ..
            } => (*last_lsn, *journal, Some(*prev)),
            _ => {
                return Err(ChainError::OtherKind {
                    offset: next.offset,
                });
            }
        };
        last_lsn.get_or_insert(lsn);
        let of = *run.get_or_insert(entry.run().unwrap_or(0));
        if prev.is_none() && parts.is_empty() {
            // A whole frame (the usual chain) keeps the buffer it was read
            // into: a journal of megabytes is not allocated and copied again.
            let apart = entry.apart().clone();
            blobs.extend(apart.frames.iter().map(|&(b, _)| b));
            let at = buf.len() - journal.len();
            buf.drain(..at);
            let chain = Chain {
                run: of,
                journal: buf,
                apart,
                last_lsn: lsn,
                depth: 0,
                chain_bytes,
                blobs,
            };
            return Ok(chain);
        }
        parts.push((journal.to_vec(), entry.apart().clone()));
        match prev {
            Some(p) => next = p,
            None => {
                // At most MAX_DEPTH + 1 frames were read.
                let depth = u8::try_from(parts.len() - 1).unwrap_or(MAX_DEPTH);
                let (mut journal, mut apart) = (Vec::new(), Apart::default());
                for (part, part_apart) in parts.into_iter().rev() {
                    apart.extend_after(journal.len() as u64, &part_apart);
                    journal.extend_from_slice(&part);
                }
                blobs.extend(apart.frames.iter().map(|&(b, _)| b));
                let chain = Chain {
                    run: of,
                    journal,
                    apart,
                    last_lsn: last_lsn.unwrap_or(lsn),
                    depth,
                    chain_bytes,
                    blobs,
                };
                return Ok(chain);
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
            // Its chunks set apart stay in their frames: an open reads none.
            let prefix =
                read_chain_apart(runs, blob).map_err(|error| Damage::Frame { lsn: None, error })?;
            // Borrowed, record by record: a long journal costs no
            // allocation per record, and a stream's chunks no decode
            // (`ShardCore::apply_passed_chunks`). A record that does not
            // decode fails the open, which keeps nothing of this core.
            core.apply_journal_apart(
                run.last_lsn,
                run.run,
                Mode::BLOB,
                &prefix.journal,
                &prefix.apart.runs,
            )
            .map_err(|error| Damage::FrameJournal { lsn: None, error })?;
            let stored = StoredPrefix {
                chain: run.blob_chain,
                depth: run.blob_depth,
                ..prefix.stored()
            };
            core.set_blob(run.run, blob, stored);
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
            let loaded = read_chain_apart(runs, blob)
                .map_err(|error| Damage::Frame {
                    lsn: Some(lsn),
                    error,
                })
                .and_then(|frame| {
                    core.unpark_encoded(
                        run,
                        frame.last_lsn,
                        &frame.journal,
                        &frame.apart.runs,
                        now_ms,
                    )
                    .map_err(|error| Damage::FrameJournal {
                        lsn: Some(lsn),
                        error,
                    })?;
                    core.set_blob(run, blob, frame.stored());
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

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use fusee_core::record::{Record, RecordRef, encode_canonical};
    use fusee_core::store::{Apart, EntryRef, encode_entry_into, split_chunks};
    use fusee_storage::{MemoryStorage, RunStore, Storage};

    use super::{BlobRef, ChainError, read_chain, read_chain_apart};

    fn record(rec: &RecordRef<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        encode_canonical(rec, &mut out);
        out
    }

    /// A journal of values and runs of chunks of run 1.
    fn journal(tag: u8, values: u32) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..values {
            out.extend(record(&Record::Value {
                run: 1,
                seq: i,
                kind: 1,
                value: &[tag; 3],
            }));
            for c in 0..i {
                let payload = format!("{tag}-{i}-{c}");
                out.extend(record(&Record::Chunk {
                    run: 1,
                    seq: 0,
                    payload: payload.as_bytes(),
                }));
            }
        }
        out
    }

    fn append(runs: &mut impl RunStore, entry: &EntryRef<'_>) -> BlobRef {
        let mut frame = Vec::new();
        encode_entry_into(entry, &mut frame).expect("small");
        runs.append(&frame).expect("appended")
    }

    /// Writes `records` as run `run`'s frame whose chunks went apart (its
    /// chunks in a `Stream` frame of run `owner`), chained to `prev`.
    fn apart_frame(
        runs: &mut impl RunStore,
        run: u64,
        owner: u64,
        records: &[u8],
        prev: Option<BlobRef>,
    ) -> (BlobRef, BlobRef) {
        let mut split = split_chunks(records, &Apart::default()).expect("frames");
        let stream = append(
            runs,
            &EntryRef::Stream {
                run: owner,
                chunks: &split.chunks,
            },
        );
        split.stored_at(stream);
        let head = match prev {
            Some(prev) => EntryRef::Delta {
                run,
                last_lsn: 9,
                id_hash: 5,
                timers: Cow::default(),
                prev,
                depth: 1,
                chain: 0,
                apart: Cow::Owned(split.apart),
                journal: &split.journal,
            },
            None => EntryRef::Park {
                run,
                last_lsn: 9,
                id_hash: 5,
                timers: Cow::default(),
                apart: Cow::Owned(split.apart),
                journal: &split.journal,
            },
        };
        (append(runs, &head), stream)
    }

    /// A chain whose frames set their chunks apart reads as the journal a
    /// chain that kept them would hold, and names the `Stream` frames it
    /// read after its own; a `Stream` frame of another run is refused.
    #[test]
    fn a_chain_whose_chunks_went_apart_reads_as_the_journal_it_held() {
        let storage = MemoryStorage::new();
        let mut parts = storage.open_shard(0).expect("opens");
        let runs = &mut parts.runs;
        let (a, b) = (journal(1, 6), journal(2, 5));
        let base = append(
            runs,
            &EntryRef::Park {
                run: 1,
                last_lsn: 4,
                id_hash: 5,
                timers: Cow::default(),
                apart: Cow::default(),
                journal: &a,
            },
        );
        let (head, stream) = apart_frame(runs, 1, 1, &b, Some(base));
        // Read apart: the records but the chunks, and where they went.
        let apart = read_chain_apart(runs, head).expect("reads");
        assert_eq!(
            apart.journal,
            [
                a.clone(),
                split_chunks(&b, &Apart::default()).expect("frames").journal
            ]
            .concat()
        );
        assert_eq!(apart.apart.frames.len(), 1);
        assert_eq!(apart.blobs, vec![head, base, stream]);
        assert_eq!(apart.heads(), &[head, base]);
        assert_eq!(
            apart.chain_bytes,
            u64::from(head.len + base.len),
            "no chunk read"
        );
        assert_eq!(apart.stored().journal_len, (a.len() + b.len()) as u64);
        let chain = read_chain(runs, head).expect("reads");
        assert_eq!(chain.journal, [a.clone(), b.clone()].concat());
        assert_eq!(chain.blobs, vec![head, base, stream]);
        assert_eq!(chain.depth, 1);
        assert_eq!(
            chain.chain_bytes,
            u64::from(head.len + base.len + stream.len)
        );

        // A whole frame, apart: the same records.
        let (whole, _) = apart_frame(runs, 1, 1, &a, None);
        assert_eq!(read_chain(runs, whole).expect("reads").journal, a);

        // Chunks named from a frame of run 1 but held for run 2.
        let (wrong, _) = apart_frame(runs, 1, 2, &a, None);
        assert!(matches!(
            read_chain(runs, wrong),
            Err(ChainError::OtherKind { .. })
        ));
    }
}
