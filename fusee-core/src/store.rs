//! Run-store entries and the checkpoint format.
//!
//! # Run-store entry frame
//!
//! The run store is an append-only sequence of frames; a [`BlobRef`] names
//! one by offset and length. Every frame is (integers little-endian):
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..4 | len u32 | length of the body |
//! | 4 | kind u8 | 1 Park, 2 Delta, 3 Done, 4 Tombstone, 5 Index, 6 Stream; Park, Delta and Done plus [`kind::APART`] (0x80) with a chunks-apart section |
//! | 5..9 | crc u32 | CRC-32 (`crc32fast`) of bytes 0..5 (len and kind) then the body |
//! | 9.. | body | as below |
//!
//! Bodies (`varint` = LEB128 from [`crate::wire`]):
//!
//! - **Park** (a suspended run's whole journal): run varint, last_lsn varint,
//!   id_hash u64, timer count varint, then per timer seq varint, kind u8
//!   ([`TimerKind`] tag), at_ms varint; the journal (canonical records)
//!   fills the rest of the body.
//! - **Delta** (a suspended run parked again: only the records since its
//!   previous frame): as Park up to the timers, then prev.offset varint,
//!   prev.len varint, depth u8 (frames before this one in the chain), chain
//!   varint (bytes of those frames); the journal fills the rest.
//! - **Done** (a finished run's Start and result): run varint, last_lsn
//!   varint, id_hash u64, status u8, finished_ms varint; the journal fills
//!   the rest.
//! - **Stream** (a run's stream chunks kept out of its journal frames):
//!   run varint; the chunk records (canonical) fill the rest. Named by
//!   the [`Apart`] section of the run's frame that they came out of.
//! - **Tombstone** (retention ended): run varint.
//! - **Index** (part of the persisted run table): the body is a whole
//!   number of [`RECORD`]-byte table records.
//!
//! The journal is last and unprefixed so a frame can carry journals longer
//! than one length-prefixed field allows; the frame's `len` bounds it.
//!
//! A Park, Delta or Done whose kind has [`kind::APART`] set holds, right
//! before its journal, the section of [`Apart`]: its stream chunks went to
//! Stream frames, and the section says which and where each run of them
//! stood among the journal's records (format and why: [`apart`]). Such a
//! frame is refused by a build that predates the flag
//! ([`StoreError::UnknownKind`]), never misread.
//!
//! Invariants and damage: the crc covers every byte of the frame but itself,
//! so a torn or damaged frame is an error ([`StoreError::BadCrc`]), never a
//! different entry. A frame is only referenced once the store was made
//! durable by a checkpoint commit, so a store file's tail past the committed
//! length may hold a torn frame; readers stop at the committed length.
//! Decoding checks every count against the bytes present, so no frame can
//! make the decoder allocate more than the frame's size.
//!
//! # Checkpoint
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..8 | magic | `b"FUSEECKP"` |
//! | 8..12 | format u32 | 1, or [`CHECKPOINT_FORMAT`] (2) when it names attribute frames |
//! | 12..20 | body_len u64 | bytes after the 24-byte header |
//! | 20..24 | crc u32 | CRC-32 (`crc32fast`) of bytes 8..20 then the body |
//! | 24.. | body | as below |
//!
//! Body: shard varint, shards varint, lsn varint, next_run varint,
//! store_generation varint, store_len varint, created_ms varint, obsolete
//! varint, index_runs varint; run count varint, then per run: run varint,
//! last_lsn varint, has_blob u8 (0 or 1), if 1 blob.offset varint and
//! blob.len varint, blob_chain varint, blob_depth u8, journal length varint
//! and bytes; outbox length varint and bytes; index count varint, then per
//! frame offset varint and len varint. Format 2 then has the attribute
//! frames: count varint (at least 1), then per frame offset varint and len
//! varint. Nothing may follow. The lsn is at most [`MAX_LSN`], next_run at
//! most [`MAX_RUN`] + 1 and each run in `1..=MAX_RUN`: anything else is
//! refused as damage.
//!
//! Format 2 is written only when the checkpoint names attribute frames, so
//! a store that never uses search attributes (or whose last checkpoint
//! names none) stays readable by a build that reads format 1 only. The
//! attribute frames are the engine's (`fusee`'s search-attribute index
//! snapshot, its own format): the core only carries their addresses.
//!
//! The format is checked before the crc, since a later format may lay its
//! header out differently: an unknown format is
//! [`CheckpointError::UnsupportedVersion`], whatever the crc. A torn
//! checkpoint write fails its crc; the backend keeps two slots so the
//! previous checkpoint survives it.

use std::borrow::Cow;

use crate::record::{Lsn, MAX_LSN, MAX_RUN, RunId, Seq, Status};
use crate::shard::{BlobRef, TimerKind};
use crate::table::RECORD;
use crate::wire::{DecodeError, Reader, put_u8, put_u32, put_u64, put_varint};

/// Bytes of a store frame before its body.
pub const ENTRY_HEADER: usize = 9;

/// Entry kind tags (byte 4 of a store frame).
pub mod kind {
    /// A suspended run's whole journal.
    pub const PARK: u8 = 1;
    /// A suspended run's records since its previous frame.
    pub const DELTA: u8 = 2;
    /// A finished run's Start and result.
    pub const DONE: u8 = 3;
    /// A finished run whose retention ended.
    pub const TOMBSTONE: u8 = 4;
    /// Persisted run-table records.
    pub const INDEX: u8 = 5;
    /// A run's stream chunks, kept out of its journal frames.
    pub const STREAM: u8 = 6;
    /// Set on a [`PARK`], [`DELTA`] or [`DONE`] tag: the body holds a
    /// chunks-apart section ([`super::Apart`]).
    pub const APART: u8 = 0x80;
}

pub mod apart;

pub use apart::{Apart, ApartRun, Split, join_chunks, rewrite_kept, split_chunks};

/// An armed timer of a parked run: its operation, kind and due time (ms).
pub type Timer = (Seq, TimerKind, u64);

/// A run-store entry with borrowed bytes, as encoded and as decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryRef<'a> {
    /// A suspended run's whole journal and its armed timers.
    Park {
        /// The run.
        run: RunId,
        /// LSN of the run's last record.
        last_lsn: Lsn,
        /// Hash of the run's workflow ID.
        id_hash: u64,
        /// Armed timers.
        timers: Cow<'a, [Timer]>,
        /// Where its stream chunks went, if they went apart (empty: the
        /// journal holds them).
        apart: Cow<'a, Apart>,
        /// The run's canonical records.
        journal: &'a [u8],
    },
    /// A suspended run parked again: the records since `prev`.
    Delta {
        /// The run.
        run: RunId,
        /// LSN of the run's last record.
        last_lsn: Lsn,
        /// Hash of the run's workflow ID.
        id_hash: u64,
        /// Armed timers.
        timers: Cow<'a, [Timer]>,
        /// The run's previous frame, holding the records before these.
        prev: BlobRef,
        /// How many frames come before this one in the chain.
        depth: u8,
        /// Bytes of those frames.
        chain: u64,
        /// Where its stream chunks went, if they went apart (empty: the
        /// journal holds them).
        apart: Cow<'a, Apart>,
        /// The canonical records since `prev`.
        journal: &'a [u8],
    },
    /// A finished run's Start and result.
    Done {
        /// The run.
        run: RunId,
        /// LSN of the run's last record.
        last_lsn: Lsn,
        /// Hash of the run's workflow ID.
        id_hash: u64,
        /// How the run ended.
        status: Status,
        /// When it ended (ms).
        finished_ms: u64,
        /// Where its stream chunks went, if they went apart (empty: the
        /// journal holds them).
        apart: Cow<'a, Apart>,
        /// The canonical records kept.
        journal: &'a [u8],
    },
    /// A run's stream chunks kept out of its journal frames.
    Stream {
        /// The run.
        run: RunId,
        /// The chunk records, canonical, in order.
        chunks: &'a [u8],
    },
    /// A finished run whose retention ended.
    Tombstone {
        /// The run.
        run: RunId,
    },
    /// Persisted run-table records.
    Index {
        /// Concatenated [`RECORD`]-byte records.
        records: &'a [u8],
    },
}

/// A run-store entry that owns its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreEntry {
    /// See [`EntryRef::Park`].
    Park {
        /// The run.
        run: RunId,
        /// LSN of the run's last record.
        last_lsn: Lsn,
        /// Hash of the run's workflow ID.
        id_hash: u64,
        /// Armed timers.
        timers: Vec<Timer>,
        /// Where its stream chunks went ([`Apart`]; empty: the journal
        /// holds them).
        apart: Apart,
        /// The run's canonical records.
        journal: Vec<u8>,
    },
    /// See [`EntryRef::Delta`].
    Delta {
        /// The run.
        run: RunId,
        /// LSN of the run's last record.
        last_lsn: Lsn,
        /// Hash of the run's workflow ID.
        id_hash: u64,
        /// Armed timers.
        timers: Vec<Timer>,
        /// The run's previous frame.
        prev: BlobRef,
        /// How many frames come before this one in the chain.
        depth: u8,
        /// Bytes of those frames.
        chain: u64,
        /// Where its stream chunks went ([`Apart`]; empty: the journal
        /// holds them).
        apart: Apart,
        /// The canonical records since `prev`.
        journal: Vec<u8>,
    },
    /// See [`EntryRef::Done`].
    Done {
        /// The run.
        run: RunId,
        /// LSN of the run's last record.
        last_lsn: Lsn,
        /// Hash of the run's workflow ID.
        id_hash: u64,
        /// How the run ended.
        status: Status,
        /// When it ended (ms).
        finished_ms: u64,
        /// Where its stream chunks went ([`Apart`]; empty: the journal
        /// holds them).
        apart: Apart,
        /// The canonical records kept.
        journal: Vec<u8>,
    },
    /// See [`EntryRef::Stream`].
    Stream {
        /// The run.
        run: RunId,
        /// The chunk records, canonical, in order.
        chunks: Vec<u8>,
    },
    /// See [`EntryRef::Tombstone`].
    Tombstone {
        /// The run.
        run: RunId,
    },
    /// See [`EntryRef::Index`].
    Index {
        /// Concatenated [`RECORD`]-byte records.
        records: Vec<u8>,
    },
}

impl StoreEntry {
    /// The entry borrowed.
    pub fn as_ref(&self) -> EntryRef<'_> {
        match self {
            Self::Park {
                run,
                last_lsn,
                id_hash,
                timers,
                apart,
                journal,
            } => EntryRef::Park {
                run: *run,
                last_lsn: *last_lsn,
                id_hash: *id_hash,
                timers: Cow::Borrowed(timers),
                apart: Cow::Borrowed(apart),
                journal,
            },
            Self::Delta {
                run,
                last_lsn,
                id_hash,
                timers,
                prev,
                depth,
                chain,
                apart,
                journal,
            } => EntryRef::Delta {
                run: *run,
                last_lsn: *last_lsn,
                id_hash: *id_hash,
                timers: Cow::Borrowed(timers),
                prev: *prev,
                depth: *depth,
                chain: *chain,
                apart: Cow::Borrowed(apart),
                journal,
            },
            Self::Done {
                run,
                last_lsn,
                id_hash,
                status,
                finished_ms,
                apart,
                journal,
            } => EntryRef::Done {
                run: *run,
                last_lsn: *last_lsn,
                id_hash: *id_hash,
                status: *status,
                finished_ms: *finished_ms,
                apart: Cow::Borrowed(apart),
                journal,
            },
            Self::Stream { run, chunks } => EntryRef::Stream { run: *run, chunks },
            Self::Tombstone { run } => EntryRef::Tombstone { run: *run },
            Self::Index { records } => EntryRef::Index { records },
        }
    }
}

impl<'a> EntryRef<'a> {
    /// The entry with its bytes copied.
    pub fn to_owned(&self) -> StoreEntry {
        match self {
            Self::Park {
                run,
                last_lsn,
                id_hash,
                timers,
                apart,
                journal,
            } => StoreEntry::Park {
                run: *run,
                last_lsn: *last_lsn,
                id_hash: *id_hash,
                timers: timers.to_vec(),
                apart: apart.clone().into_owned(),
                journal: journal.to_vec(),
            },
            Self::Delta {
                run,
                last_lsn,
                id_hash,
                timers,
                prev,
                depth,
                chain,
                apart,
                journal,
            } => StoreEntry::Delta {
                run: *run,
                last_lsn: *last_lsn,
                id_hash: *id_hash,
                timers: timers.to_vec(),
                prev: *prev,
                depth: *depth,
                chain: *chain,
                apart: apart.clone().into_owned(),
                journal: journal.to_vec(),
            },
            Self::Done {
                run,
                last_lsn,
                id_hash,
                status,
                finished_ms,
                apart,
                journal,
            } => StoreEntry::Done {
                run: *run,
                last_lsn: *last_lsn,
                id_hash: *id_hash,
                status: *status,
                finished_ms: *finished_ms,
                apart: apart.clone().into_owned(),
                journal: journal.to_vec(),
            },
            Self::Stream { run, chunks } => StoreEntry::Stream {
                run: *run,
                chunks: chunks.to_vec(),
            },
            Self::Tombstone { run } => StoreEntry::Tombstone { run: *run },
            Self::Index { records } => StoreEntry::Index {
                records: records.to_vec(),
            },
        }
    }

    /// The entry's kind tag (see [`kind`]): with [`kind::APART`] for a
    /// run's frame whose chunks went apart.
    pub fn kind(&self) -> u8 {
        let apart = |a: &Apart| if a.is_empty() { 0 } else { kind::APART };
        match self {
            Self::Park { apart: a, .. } => kind::PARK | apart(a),
            Self::Delta { apart: a, .. } => kind::DELTA | apart(a),
            Self::Done { apart: a, .. } => kind::DONE | apart(a),
            Self::Stream { .. } => kind::STREAM,
            Self::Tombstone { .. } => kind::TOMBSTONE,
            Self::Index { .. } => kind::INDEX,
        }
    }

    /// The run the entry is about (`None` for an Index entry).
    pub fn run(&self) -> Option<RunId> {
        match self {
            Self::Park { run, .. }
            | Self::Delta { run, .. }
            | Self::Done { run, .. }
            | Self::Stream { run, .. }
            | Self::Tombstone { run } => Some(*run),
            Self::Index { .. } => None,
        }
    }

    /// The same run's frame as one frame holding `journal` whole, its
    /// chunks set apart where `apart` says: a `Delta` becomes a `Park`
    /// (its chain read whole), a `Park` or a `Done` keeps its kind and
    /// fields. `None` for other kinds.
    pub fn written_whole(self, journal: &'a [u8], apart: Cow<'a, Apart>) -> Option<Self> {
        Some(match self {
            Self::Park {
                run,
                last_lsn,
                id_hash,
                timers,
                ..
            }
            | Self::Delta {
                run,
                last_lsn,
                id_hash,
                timers,
                ..
            } => Self::Park {
                run,
                last_lsn,
                id_hash,
                timers,
                apart,
                journal,
            },
            Self::Done {
                run,
                last_lsn,
                id_hash,
                status,
                finished_ms,
                ..
            } => Self::Done {
                run,
                last_lsn,
                id_hash,
                status,
                finished_ms,
                apart,
                journal,
            },
            _ => return None,
        })
    }

    /// Where a run's frame's stream chunks went, to change (a frame whose
    /// `Stream` frames moved, written again); `None` for other kinds.
    pub fn apart_mut(&mut self) -> Option<&mut Cow<'a, Apart>> {
        match self {
            Self::Park { apart, .. } | Self::Delta { apart, .. } | Self::Done { apart, .. } => {
                Some(apart)
            }
            _ => None,
        }
    }

    /// Where a run's frame's stream chunks went (empty for a frame that
    /// keeps them, and for every other kind).
    pub fn apart(&self) -> &Apart {
        static NONE: Apart = Apart {
            frames: Vec::new(),
            runs: Vec::new(),
        };
        match self {
            Self::Park { apart, .. } | Self::Delta { apart, .. } | Self::Done { apart, .. } => {
                apart
            }
            _ => &NONE,
        }
    }
}

/// Why a store frame could not be encoded or decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Fewer bytes than the frame header or the length it declares.
    #[error("store frame truncated: {have} bytes of {need}")]
    Truncated {
        /// Bytes the frame needs.
        need: u64,
        /// Bytes given.
        have: u64,
    },
    /// More bytes than the frame's declared length.
    #[error("store frame of {declared} bytes given with {have} bytes")]
    TrailingBytes {
        /// The frame's length from its header.
        declared: u64,
        /// Bytes given.
        have: u64,
    },
    /// The crc does not match: a torn or damaged frame.
    #[error("store frame crc mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BadCrc {
        /// The crc in the frame.
        stored: u32,
        /// The crc of the bytes.
        computed: u32,
    },
    /// An unknown kind tag.
    #[error("unknown store entry kind {0}")]
    UnknownKind(u8),
    /// An Index body that is not a whole number of records.
    #[error("index entry of {0} bytes is not a whole number of {RECORD}-byte records")]
    IndexLength(u64),
    /// A body too large for the frame's u32 length.
    #[error("store entry body of {0} bytes does not fit a frame")]
    TooLarge(u64),
    /// The body does not decode.
    #[error("malformed store entry: {0}")]
    Malformed(#[from] DecodeError),
}

/// Appends `entry` as one frame to `out`. Fails only if the body is over
/// `u32::MAX` bytes (nothing is appended then).
pub fn encode_entry_into(entry: &EntryRef<'_>, out: &mut Vec<u8>) -> Result<(), StoreError> {
    let start = out.len();
    out.extend_from_slice(&[0; ENTRY_HEADER]);
    match entry {
        EntryRef::Park {
            run,
            last_lsn,
            id_hash,
            timers,
            apart,
            journal,
        } => {
            put_run_head(out, *run, *last_lsn, *id_hash, timers);
            put_apart(out, apart);
            out.extend_from_slice(journal);
        }
        EntryRef::Delta {
            run,
            last_lsn,
            id_hash,
            timers,
            prev,
            depth,
            chain,
            apart,
            journal,
        } => {
            put_run_head(out, *run, *last_lsn, *id_hash, timers);
            put_blob(out, *prev);
            put_u8(out, *depth);
            put_varint(out, *chain);
            put_apart(out, apart);
            out.extend_from_slice(journal);
        }
        EntryRef::Done {
            run,
            last_lsn,
            id_hash,
            status,
            finished_ms,
            apart,
            journal,
        } => {
            put_varint(out, *run);
            put_varint(out, *last_lsn);
            put_u64(out, *id_hash);
            put_u8(out, *status as u8);
            put_varint(out, *finished_ms);
            put_apart(out, apart);
            out.extend_from_slice(journal);
        }
        EntryRef::Stream { run, chunks } => {
            put_varint(out, *run);
            out.extend_from_slice(chunks);
        }
        EntryRef::Tombstone { run } => put_varint(out, *run),
        EntryRef::Index { records } => out.extend_from_slice(records),
    }
    let body = out.len() - start - ENTRY_HEADER;
    let Ok(len) = u32::try_from(body) else {
        out.truncate(start);
        return Err(StoreError::TooLarge(body as u64));
    };
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4] = entry.kind();
    let crc = frame_crc(&out[start..start + 5], &out[start + ENTRY_HEADER..]);
    out[start + 5..start + ENTRY_HEADER].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// `entry` as one frame.
pub fn encode_entry(entry: &StoreEntry) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::new();
    encode_entry_into(&entry.as_ref(), &mut out)?;
    Ok(out)
}

/// The whole length of the frame starting at `prefix`, header included,
/// once its header is there (`None` with fewer than [`ENTRY_HEADER`] bytes).
/// A backend reading a store file sequentially reads this many bytes next.
pub fn peek_frame_len(prefix: &[u8]) -> Option<u64> {
    let head = prefix.get(..4)?;
    if prefix.len() < ENTRY_HEADER {
        return None;
    }
    let mut len = [0; 4];
    len.copy_from_slice(head);
    Some(ENTRY_HEADER as u64 + u64::from(u32::from_le_bytes(len)))
}

/// Decodes `frame`, which must be exactly one store frame.
pub fn decode_entry(frame: &[u8]) -> Result<EntryRef<'_>, StoreError> {
    let have = frame.len() as u64;
    let Some(declared) = peek_frame_len(frame) else {
        return Err(StoreError::Truncated {
            need: ENTRY_HEADER as u64,
            have,
        });
    };
    if have < declared {
        return Err(StoreError::Truncated {
            need: declared,
            have,
        });
    }
    if have > declared {
        return Err(StoreError::TrailingBytes { declared, have });
    }
    let mut r = Reader::new(frame);
    let head = r.take(5)?;
    let stored = r.u32()?;
    let body = r.rest();
    let computed = frame_crc(head, body);
    if stored != computed {
        return Err(StoreError::BadCrc { stored, computed });
    }
    let tag = head[4];
    let with_apart = tag & kind::APART != 0;
    if with_apart && !matches!(tag & !kind::APART, kind::PARK | kind::DELTA | kind::DONE) {
        return Err(StoreError::UnknownKind(tag));
    }
    let mut r = Reader::new(body);
    let entry = match tag & !kind::APART {
        kind::PARK => {
            let (run, last_lsn, id_hash, timers) = read_run_head(&mut r)?;
            let (apart, journal) = read_apart(&mut r, with_apart)?;
            EntryRef::Park {
                run,
                last_lsn,
                id_hash,
                timers,
                apart,
                journal,
            }
        }
        kind::DELTA => {
            let (run, last_lsn, id_hash, timers) = read_run_head(&mut r)?;
            let prev = read_blob(&mut r)?;
            let depth = r.u8()?;
            let chain = r.varint()?;
            let (apart, journal) = read_apart(&mut r, with_apart)?;
            EntryRef::Delta {
                run,
                last_lsn,
                id_hash,
                timers,
                prev,
                depth,
                chain,
                apart,
                journal,
            }
        }
        kind::DONE => {
            let run = r.varint()?;
            let last_lsn = r.varint()?;
            let id_hash = r.u64()?;
            let status = Status::from_u8(r.u8()?)?;
            let finished_ms = r.varint()?;
            let (apart, journal) = read_apart(&mut r, with_apart)?;
            EntryRef::Done {
                run,
                last_lsn,
                id_hash,
                status,
                finished_ms,
                apart,
                journal,
            }
        }
        kind::STREAM => EntryRef::Stream {
            run: r.varint()?,
            chunks: r.rest(),
        },
        kind::TOMBSTONE => {
            let run = r.varint()?;
            r.finish()?;
            EntryRef::Tombstone { run }
        }
        kind::INDEX => {
            if !body.len().is_multiple_of(RECORD) {
                return Err(StoreError::IndexLength(body.len() as u64));
            }
            EntryRef::Index { records: body }
        }
        other => return Err(StoreError::UnknownKind(other)),
    };
    Ok(entry)
}

/// Writes a run frame's chunks-apart section, if any (the kind's flag
/// says whether one is there).
fn put_apart(out: &mut Vec<u8>, apart: &Apart) {
    if !apart.is_empty() {
        apart.encode(out);
    }
}

/// Reads a run frame's chunks-apart section (if its kind has the flag)
/// and the journal after it, checked against each other.
fn read_apart<'a>(
    r: &mut Reader<'a>,
    with_apart: bool,
) -> Result<(Cow<'a, Apart>, &'a [u8]), DecodeError> {
    let apart = if with_apart {
        Apart::decode(r)?
    } else {
        Apart::default()
    };
    let journal = r.rest();
    apart.check_journal(journal.len())?;
    Ok((Cow::Owned(apart), journal))
}

fn frame_crc(head: &[u8], body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(head);
    h.update(body);
    h.finalize()
}

fn put_run_head(out: &mut Vec<u8>, run: RunId, last_lsn: Lsn, id_hash: u64, timers: &[Timer]) {
    put_varint(out, run);
    put_varint(out, last_lsn);
    put_u64(out, id_hash);
    put_varint(out, timers.len() as u64);
    for &(seq, kind, at) in timers {
        put_varint(out, u64::from(seq));
        put_u8(out, kind as u8);
        put_varint(out, at);
    }
}

type RunHead<'a> = (RunId, Lsn, u64, Cow<'a, [Timer]>);

/// Smallest encoding of one timer: a 1-byte seq, the kind, a 1-byte time.
const MIN_TIMER_BYTES: usize = 3;

fn read_run_head<'a>(r: &mut Reader<'a>) -> Result<RunHead<'a>, DecodeError> {
    let run = r.varint()?;
    let last_lsn = r.varint()?;
    let id_hash = r.u64()?;
    let count = r.varint()?;
    if count > (r.remaining() / MIN_TIMER_BYTES) as u64 {
        return Err(DecodeError::new("more timers than bytes"));
    }
    let mut timers = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let seq = r.varint32()?;
        let kind = TimerKind::from_u8(r.u8()?).ok_or(DecodeError::new("unknown timer kind"))?;
        let at = r.varint()?;
        timers.push((seq, kind, at));
    }
    Ok((run, last_lsn, id_hash, Cow::Owned(timers)))
}

fn put_blob(out: &mut Vec<u8>, b: BlobRef) {
    put_varint(out, b.offset);
    put_varint(out, u64::from(b.len));
}

fn read_blob(r: &mut Reader<'_>) -> Result<BlobRef, DecodeError> {
    Ok(BlobRef {
        offset: r.varint()?,
        len: r.varint32()?,
    })
}

/// The first 8 bytes of every checkpoint.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"FUSEECKP";
/// The newest checkpoint format this module writes and reads (it reads 1
/// too, and writes 1 when there are no attribute frames).
pub const CHECKPOINT_FORMAT: u32 = 2;
/// The format without attribute frames.
const CHECKPOINT_FORMAT_PLAIN: u32 = 1;
/// Bytes of a checkpoint before its body.
pub const CHECKPOINT_HEADER: usize = 24;

/// A loaded run as a checkpoint keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CheckpointRun {
    /// The run.
    pub run: RunId,
    /// LSN of the run's last record.
    pub last_lsn: Lsn,
    /// The newest store frame holding a prefix of the run's journal.
    pub blob: Option<BlobRef>,
    /// Bytes of `blob` and the frames it extends.
    pub blob_chain: u64,
    /// How many frames `blob` extends.
    pub blob_depth: u8,
    /// Canonical records after the stored prefix.
    pub journal: Vec<u8>,
}

/// What a shard needs to restart without replaying its whole log: every
/// record through `lsn` is reflected here or in the run store and index.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// The shard.
    pub shard: u32,
    /// How many shards the engine had.
    pub shards: u32,
    /// The last LSN the checkpoint covers.
    pub lsn: Lsn,
    /// The next run number to hand out.
    pub next_run: RunId,
    /// The run-store generation the checkpoint refers to.
    pub store_generation: u64,
    /// The run store's valid length at the commit.
    pub store_len: u64,
    /// When it was taken (ms).
    pub created_ms: u64,
    /// The runs held in memory.
    pub runs: Vec<CheckpointRun>,
    /// Messages to other shards not acknowledged yet (the host's encoding).
    pub outbox: Vec<u8>,
    /// The Index frames that together list every parked run, oldest first.
    pub index: Vec<BlobRef>,
    /// Bytes of the run store no longer referenced (for compaction).
    pub obsolete: u64,
    /// How many runs the index lists.
    pub index_runs: u64,
    /// Run-store frames of the engine's search-attribute index snapshot,
    /// as of this checkpoint (format 2; opaque here). The engine releases
    /// them once a later commit no longer names them.
    pub attr_frames: Vec<BlobRef>,
}

/// Why checkpoint bytes could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// Shorter than the checkpoint header.
    #[error("checkpoint of {len} bytes is shorter than its {CHECKPOINT_HEADER}-byte header")]
    TooShort {
        /// Bytes given.
        len: u64,
    },
    /// Not a checkpoint.
    #[error("not a checkpoint: wrong magic")]
    BadMagic,
    /// A format this code does not read.
    #[error("checkpoint format {found} is not supported (this build reads {CHECKPOINT_FORMAT})")]
    UnsupportedVersion {
        /// The format field.
        found: u32,
    },
    /// The body length disagrees with the bytes given.
    #[error("checkpoint body declared {declared} bytes, {have} given")]
    Length {
        /// Length in the header.
        declared: u64,
        /// Body bytes given.
        have: u64,
    },
    /// The crc does not match: a torn or damaged checkpoint.
    #[error("checkpoint crc mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BadCrc {
        /// The crc in the header.
        stored: u32,
        /// The crc of the bytes.
        computed: u32,
    },
    /// The body does not decode.
    #[error("malformed checkpoint: {0}")]
    Malformed(#[from] DecodeError),
}

impl Checkpoint {
    /// The checkpoint's bytes: header with magic, format and crc, then body.
    pub fn encode(&self) -> Vec<u8> {
        let journals: usize = self.runs.iter().map(|r| r.journal.len() + 48).sum();
        let mut out = Vec::with_capacity(
            CHECKPOINT_HEADER + 64 + journals + self.outbox.len() + 16 * self.index.len(),
        );
        out.extend_from_slice(&CHECKPOINT_MAGIC);
        let format = if self.attr_frames.is_empty() {
            CHECKPOINT_FORMAT_PLAIN
        } else {
            CHECKPOINT_FORMAT
        };
        put_u32(&mut out, format);
        out.extend_from_slice(&[0; 12]);
        for v in [u64::from(self.shard), u64::from(self.shards)] {
            put_varint(&mut out, v);
        }
        for v in [
            self.lsn,
            self.next_run,
            self.store_generation,
            self.store_len,
            self.created_ms,
            self.obsolete,
            self.index_runs,
        ] {
            put_varint(&mut out, v);
        }
        put_varint(&mut out, self.runs.len() as u64);
        for run in &self.runs {
            put_varint(&mut out, run.run);
            put_varint(&mut out, run.last_lsn);
            match run.blob {
                Some(b) => {
                    put_u8(&mut out, 1);
                    put_blob(&mut out, b);
                }
                None => put_u8(&mut out, 0),
            }
            put_varint(&mut out, run.blob_chain);
            put_u8(&mut out, run.blob_depth);
            put_long_bytes(&mut out, &run.journal);
        }
        put_long_bytes(&mut out, &self.outbox);
        put_varint(&mut out, self.index.len() as u64);
        for &b in &self.index {
            put_blob(&mut out, b);
        }
        if format == CHECKPOINT_FORMAT {
            put_varint(&mut out, self.attr_frames.len() as u64);
            for &b in &self.attr_frames {
                put_blob(&mut out, b);
            }
        }
        let body_len = (out.len() - CHECKPOINT_HEADER) as u64;
        out[12..20].copy_from_slice(&body_len.to_le_bytes());
        let crc = frame_crc(&out[8..20], &out[CHECKPOINT_HEADER..]);
        out[20..24].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes checkpoint bytes written by [`Checkpoint::encode`] (exactly
    /// one checkpoint, nothing after it).
    pub fn decode(bytes: &[u8]) -> Result<Self, CheckpointError> {
        if bytes.len() < CHECKPOINT_HEADER {
            return Err(CheckpointError::TooShort {
                len: bytes.len() as u64,
            });
        }
        let mut r = Reader::new(bytes);
        if r.array::<8>()? != CHECKPOINT_MAGIC {
            return Err(CheckpointError::BadMagic);
        }
        let found = r.u32()?;
        if found != CHECKPOINT_FORMAT && found != CHECKPOINT_FORMAT_PLAIN {
            return Err(CheckpointError::UnsupportedVersion { found });
        }
        let declared = r.u64()?;
        let stored = r.u32()?;
        let body = r.rest();
        if declared != body.len() as u64 {
            return Err(CheckpointError::Length {
                declared,
                have: body.len() as u64,
            });
        }
        let computed = frame_crc(&bytes[8..20], body);
        if stored != computed {
            return Err(CheckpointError::BadCrc { stored, computed });
        }
        let mut r = Reader::new(body);
        let mut c = Checkpoint {
            shard: r.varint32()?,
            shards: r.varint32()?,
            lsn: r.varint()?,
            next_run: r.varint()?,
            store_generation: r.varint()?,
            store_len: r.varint()?,
            created_ms: r.varint()?,
            obsolete: r.varint()?,
            index_runs: r.varint()?,
            ..Checkpoint::default()
        };
        // A shard's next run number and position never pass these; a
        // checkpoint naming more would make the shard hand out run IDs no
        // record can carry.
        if c.next_run > MAX_RUN + 1 {
            return Err(DecodeError::new("next run number out of range").into());
        }
        if c.lsn > MAX_LSN {
            return Err(DecodeError::new("checkpoint LSN out of range").into());
        }
        // A run takes at least 6 bytes: run, last_lsn, has_blob, chain,
        // depth, journal length.
        let runs = r.count(6)?;
        c.runs = Vec::with_capacity(runs);
        for _ in 0..runs {
            let run = r.varint()?;
            if !(1..=MAX_RUN).contains(&run) {
                return Err(DecodeError::new("run ID out of range").into());
            }
            let last_lsn = r.varint()?;
            let blob = match r.u8()? {
                0 => None,
                1 => Some(read_blob(&mut r)?),
                _ => return Err(DecodeError::new("blob flag is not 0 or 1").into()),
            };
            c.runs.push(CheckpointRun {
                run,
                last_lsn,
                blob,
                blob_chain: r.varint()?,
                blob_depth: r.u8()?,
                journal: read_long_bytes(&mut r)?.to_vec(),
            });
        }
        c.outbox = read_long_bytes(&mut r)?.to_vec();
        // A BlobRef takes at least 2 bytes.
        let frames = r.count(2)?;
        c.index = Vec::with_capacity(frames);
        for _ in 0..frames {
            c.index.push(read_blob(&mut r)?);
        }
        if found == CHECKPOINT_FORMAT {
            let frames = r.count(2)?;
            c.attr_frames = Vec::with_capacity(frames);
            for _ in 0..frames {
                c.attr_frames.push(read_blob(&mut r)?);
            }
            if c.attr_frames.is_empty() {
                // The writer picks format 1 for none: one form per content.
                return Err(DecodeError::new("format 2 names no attribute frame").into());
            }
        }
        r.finish()?;
        Ok(c)
    }
}

/// Varint length then bytes, with no cap but the input: a journal or
/// outbox may pass the single-payload limit.
fn put_long_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn read_long_bytes<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    let n = r.varint()?;
    if n > r.remaining() as u64 {
        return Err(DecodeError::new("length past the end of input"));
    }
    r.take(n as usize)
}
