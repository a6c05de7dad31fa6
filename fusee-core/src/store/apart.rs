//! Stream chunks kept apart from a run's journal frames.
//!
//! A run that streams (the tokens of a model's answer) can hold far more
//! chunk bytes than records its code replays: 100,000 chunks are 1.6 MB
//! around a few hundred bytes of steps. Nothing but a subscriber reads a
//! chunk, yet a frame that holds them makes every load of the run read,
//! check and copy them. So the host may write a frame's chunk records to
//! `Stream` frames of their own ([`kind::STREAM`](super::kind::STREAM))
//! and the rest of its records to the run's `Park`, `Delta` or `Done`
//! frame, whose [`Apart`] section says which `Stream` frames hold its
//! chunks and where each run of them stood among its records. Loading the
//! run then reads the small frame only; a reader that wants the chunks
//! joins them back ([`join_chunks`]) to the bytes the frame would have
//! held. A later frame of the run names the same `Stream` frames again
//! instead of copying their chunks ([`Apart::extend_after`] for a chain
//! read whole, [`split_chunks`] for a journal that still holds some of
//! its chunks, [`rewrite_kept`] for a finished run's summary).
//!
//! # Section (in a frame whose kind has [`kind::APART`](super::kind::APART))
//!
//! After the kind's fixed fields, before the journal (`varint` = LEB128):
//!
//! | field | meaning |
//! |---|---|
//! | frame count varint (at least 1) | then per `Stream` frame: offset varint, len varint, its chunk records varint (at least 1) |
//! | run count varint (at least 1) | then per run of chunk records, in journal order: where it stood, as a varint delta from the run before (the first from 0), its frame's place in the list varint, and its records varint (at least 1) |
//!
//! "Where it stood" is a byte offset in the frame's journal (the records
//! that stayed), at most the journal's length: the run's chunks came
//! right before the record that starts there (after the last record at
//! the journal's length). Runs at one offset came in their list's order.
//! A frame's records are taken, in order, by the runs that name it, and
//! those take exactly as many as it holds. A frame with the flag and an
//! empty section is refused: the flag means chunks went.
//!
//! # Trust
//!
//! The section is inside the frame's crc. Its counts are checked against
//! the bytes present and against each other at decode, and
//! [`join_chunks`] checks every offset against the journal's record
//! boundaries and every chunk's framing and kind, so damaged or
//! mismatched frames are an error, never other bytes.

use std::borrow::Cow;

use crate::record::{RunId, frame_first, kind as record_kind};
use crate::shard::BlobRef;
use crate::wire::{DecodeError, DecodeResult, Reader, put_varint, varint_len};

/// Where a frame's stream chunks went: the `Stream` frames holding them,
/// and where each run of them stood among the frame's journal records.
/// Empty for a frame that keeps its chunks (every frame before this
/// section existed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Apart {
    /// The `Stream` frames, each with how many chunk records it holds.
    pub frames: Vec<(BlobRef, u32)>,
    /// The runs of chunk records, in journal order.
    pub runs: Vec<ApartRun>,
}

/// One run of consecutive chunk records set apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApartRun {
    /// The byte offset in the frame's journal where the run stood: right
    /// before the record that starts there.
    pub at: u64,
    /// Its frame's place in [`Apart::frames`].
    pub frame: u32,
    /// How many chunk records it holds, the next ones of its frame.
    pub count: u32,
}

/// Smallest encoding of one frame in the section: three one-byte varints.
const MIN_FRAME_BYTES: usize = 3;
/// Smallest encoding of one run in the section: three one-byte varints.
const MIN_RUN_BYTES: usize = 3;

impl Apart {
    /// Whether no chunk went apart.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty() && self.runs.is_empty()
    }

    /// How many chunk records went apart.
    pub fn chunks(&self) -> u64 {
        self.runs.iter().map(|r| u64::from(r.count)).sum()
    }

    /// Bytes of run `run`'s journal of `journal_len` bytes with these
    /// chunks joined back: what a reader of the whole journal walks.
    pub fn joined_len(&self, run: RunId, journal_len: usize) -> u64 {
        journal_len as u64 + self.chunk_bytes(run)
    }

    /// Bytes of the chunk records the frames of run `run` hold: what
    /// joining them back adds to the journal.
    pub fn chunk_bytes(&self, run: RunId) -> u64 {
        let head = (super::ENTRY_HEADER + varint_len(run)) as u64;
        self.frames
            .iter()
            .map(|&(b, _)| u64::from(b.len).saturating_sub(head))
            .sum()
    }

    /// Appends `next`, the section of a frame whose journal follows `len`
    /// bytes of journal this section describes (the next frame of a
    /// chain): its frames after these, its runs moved up by `len`.
    pub fn extend_after(&mut self, len: u64, next: &Apart) {
        let base = self.frames.len() as u32;
        self.frames.extend_from_slice(&next.frames);
        self.runs.extend(next.runs.iter().map(|r| ApartRun {
            at: r.at.saturating_add(len),
            frame: r.frame.saturating_add(base),
            count: r.count,
        }));
    }

    /// Appends the section's encoding (see the module docs).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.frames.len() as u64);
        for &(blob, n) in &self.frames {
            put_varint(out, blob.offset);
            put_varint(out, u64::from(blob.len));
            put_varint(out, u64::from(n));
        }
        put_varint(out, self.runs.len() as u64);
        let mut prev = 0;
        for r in &self.runs {
            put_varint(out, r.at - prev);
            put_varint(out, u64::from(r.frame));
            put_varint(out, u64::from(r.count));
            prev = r.at;
        }
    }

    /// Reads a section written by [`encode`](Self::encode), checking its
    /// counts (each at least 1, each frame's the total of the runs that
    /// name it) and each run's frame; the offsets against the journal are
    /// checked by [`check_journal`](Self::check_journal) once its length
    /// is known.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let count = r.varint()?;
        if count == 0 || count > (r.remaining() / MIN_FRAME_BYTES) as u64 {
            return Err(DecodeError::new("chunks-apart frame count out of range"));
        }
        let mut frames = Vec::with_capacity(count as usize);
        let mut left = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let blob = BlobRef {
                offset: r.varint()?,
                len: r.varint32()?,
            };
            let n = r.varint32()?;
            if n == 0 {
                return Err(DecodeError::new("chunks-apart frame of no chunk"));
            }
            frames.push((blob, n));
            left.push(n);
        }
        let count = r.varint()?;
        if count == 0 || count > (r.remaining() / MIN_RUN_BYTES) as u64 {
            return Err(DecodeError::new("chunks-apart run count out of range"));
        }
        let mut runs = Vec::with_capacity(count as usize);
        let mut at = 0u64;
        for _ in 0..count {
            at = at
                .checked_add(r.varint()?)
                .ok_or(DecodeError::new("chunks-apart offset overflows"))?;
            let frame = r.varint32()?;
            let n = r.varint32()?;
            let Some(held) = left.get_mut(frame as usize) else {
                return Err(DecodeError::new("chunks-apart run of a frame not listed"));
            };
            if n == 0 || n > *held {
                return Err(DecodeError::new(
                    "chunks-apart run of no chunk, or more than its frame holds",
                ));
            }
            *held -= n;
            runs.push(ApartRun {
                at,
                frame,
                count: n,
            });
        }
        if left.iter().any(|&n| n != 0) {
            return Err(DecodeError::new(
                "chunks-apart frame holds more than its runs",
            ));
        }
        Ok(Self { frames, runs })
    }

    /// Checks that every run stood within a journal of `len` bytes.
    pub(crate) fn check_journal(&self, len: usize) -> Result<(), DecodeError> {
        match self.runs.last() {
            Some(r) if r.at > len as u64 => {
                Err(DecodeError::new("chunks-apart run past the journal's end"))
            }
            _ => Ok(()),
        }
    }
}

/// A frame's journal with its chunk records taken out by
/// [`split_chunks`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// The records that are not chunks, in order.
    pub journal: Vec<u8>,
    /// The chunk records taken out, in order: the body of the `Stream`
    /// frame to write (after its run), if any.
    pub chunks: Vec<u8>,
    /// How many records `chunks` holds.
    pub count: u32,
    /// The section for `journal`: the frames and runs given, moved to
    /// where they stand in `journal`, and (when `count` is not 0) runs of
    /// the chunks taken, naming a last frame that is a placeholder until
    /// [`Split::stored_at`] names where `chunks` were written.
    pub apart: Apart,
}

impl Split {
    /// Names the `Stream` frame that holds [`Split::chunks`] (written by
    /// the caller) in [`Split::apart`].
    pub fn stored_at(&mut self, blob: BlobRef) {
        debug_assert!(self.count > 0, "no chunk to store");
        if let Some(last) = self.apart.frames.last_mut() {
            last.0 = blob;
        }
    }
}

/// What [`walk_apart`] meets, in journal order.
enum Met<'j> {
    /// A run set apart that stood here.
    Run(&'j ApartRun),
    /// A record still in the journal: its kind tag and whole canonical
    /// bytes.
    Record(u8, &'j [u8]),
}

/// Walks `journal` (a frame's, whose section is `apart`) in order: before
/// each record, the runs that stood right before it, in their order; the
/// runs at its end last. Each record is framed, not decoded. Fails on
/// bytes that do not frame or runs that do not stand on a record's start.
fn walk_apart<'j>(
    journal: &'j [u8],
    apart: &'j Apart,
    mut meet: impl FnMut(Met<'j>) -> DecodeResult<()>,
) -> DecodeResult<()> {
    let mut old = apart.runs.iter().peekable();
    let mut at = 0usize;
    loop {
        while let Some(r) = old.next_if(|r| r.at <= at as u64) {
            if r.at != at as u64 {
                return Err(DecodeError::new("chunks-apart run inside a record"));
            }
            meet(Met::Run(r))?;
        }
        let Some(rest) = journal.get(at..).filter(|r| !r.is_empty()) else {
            break;
        };
        let (tag, total) = frame_first(rest)?;
        meet(Met::Record(tag, &rest[..total]))?;
        at += total;
    }
    match old.next() {
        Some(_) => Err(DecodeError::new("chunks-apart run past the journal's end")),
        None => Ok(()),
    }
}

/// Takes the chunk records still in `journal` (a frame's, whose section is
/// `apart`; empty for one that kept its chunks) out of it, framing each
/// record without decoding it: the runs already apart keep their frames
/// and move to where they stand in the shorter journal. Fails on bytes
/// that do not frame or runs that do not stand on a record's start.
pub fn split_chunks(journal: &[u8], apart: &Apart) -> DecodeResult<Split> {
    let new_frame = apart.frames.len() as u32;
    let mut split = Split {
        journal: Vec::with_capacity(journal.len().min(1 << 16)),
        apart: Apart {
            frames: apart.frames.clone(),
            runs: Vec::with_capacity(apart.runs.len() + 1),
        },
        ..Split::default()
    };
    walk_apart(journal, apart, |met| {
        let stood = split.journal.len() as u64;
        match met {
            Met::Run(r) => split.apart.runs.push(ApartRun { at: stood, ..*r }),
            Met::Record(record_kind::CHUNK, whole) => {
                split.chunks.extend_from_slice(whole);
                split.count = split
                    .count
                    .checked_add(1)
                    .ok_or(DecodeError::new("more chunks than a frame counts"))?;
                match split.apart.runs.last_mut() {
                    Some(last) if last.frame == new_frame && last.at == stood => last.count += 1,
                    _ => split.apart.runs.push(ApartRun {
                        at: stood,
                        frame: new_frame,
                        count: 1,
                    }),
                }
            }
            Met::Record(_, whole) => split.journal.extend_from_slice(whole),
        }
        Ok(())
    })?;
    if split.count > 0 {
        split.apart.frames.push((BlobRef::default(), split.count));
    }
    Ok(split)
}

/// Rewrites a frame's journal record by record, its chunks set apart
/// staying where they stood among the records kept: `keep` gets each
/// record's kind tag and whole canonical bytes (a chunk still in the
/// journal too) and returns what stands in its place (nothing, the same
/// bytes or others).
/// The section keeps its frames. Fails on bytes that do not frame or runs
/// that do not stand on a record's start.
pub fn rewrite_kept<'j>(
    journal: &'j [u8],
    apart: &'j Apart,
    mut keep: impl FnMut(u8, &'j [u8]) -> Option<Cow<'j, [u8]>>,
) -> DecodeResult<(Vec<u8>, Apart)> {
    let mut out = Vec::with_capacity(journal.len());
    let mut runs = Vec::with_capacity(apart.runs.len());
    walk_apart(journal, apart, |met| {
        match met {
            Met::Run(r) => runs.push(ApartRun {
                at: out.len() as u64,
                ..*r
            }),
            Met::Record(tag, whole) => {
                if let Some(kept) = keep(tag, whole) {
                    out.extend_from_slice(&kept);
                }
            }
        }
        Ok(())
    })?;
    let frames = apart.frames.clone();
    Ok((out, Apart { frames, runs }))
}

/// Appends to `out` the records a frame held before its chunks went
/// apart: `journal` with the chunk records of `chunks` (the bodies of the
/// section's `Stream` frames after their run, in the section's frame
/// order) put back where `runs` says. Fails, having appended part, if an
/// offset is not a record boundary of `journal`, a run names a frame not
/// given or takes more than it holds, a chunk does not frame or is not a
/// chunk, or a frame holds chunks no run takes.
pub fn join_chunks(
    journal: &[u8],
    runs: &[ApartRun],
    chunks: &[&[u8]],
    out: &mut Vec<u8>,
) -> DecodeResult<()> {
    out.reserve(journal.len() + chunks.iter().map(|c| c.len()).sum::<usize>());
    // Bytes of each frame taken so far.
    let mut taken = vec![0usize; chunks.len()];
    // `at`: framed up to here; `copied`: journal bytes in `out`.
    let (mut at, mut copied) = (0usize, 0usize);
    for r in runs {
        let stood = usize::try_from(r.at)
            .ok()
            .filter(|&s| s >= at && s <= journal.len())
            .ok_or(DecodeError::new("chunks-apart run out of its journal"))?;
        // The records before the run, framed so it lands on a boundary.
        while at < stood {
            let (_, total) = frame_first(&journal[at..])?;
            at += total;
        }
        if at != stood {
            return Err(DecodeError::new("chunks-apart run inside a record"));
        }
        out.extend_from_slice(&journal[copied..at]);
        copied = at;
        let (Some(frame), Some(from)) = (
            chunks.get(r.frame as usize),
            taken.get_mut(r.frame as usize),
        ) else {
            return Err(DecodeError::new("chunks-apart run of a frame not given"));
        };
        let start = *from;
        for _ in 0..r.count {
            let (tag, total) = frame_first(&frame[*from..])?;
            if tag != record_kind::CHUNK {
                return Err(DecodeError::new(
                    "a stream frame holds a record that is not a chunk",
                ));
            }
            *from += total;
        }
        out.extend_from_slice(&frame[start..*from]);
    }
    if taken.iter().zip(chunks).any(|(&t, c)| t != c.len()) {
        return Err(DecodeError::new(
            "stream frames hold more chunks than their runs",
        ));
    }
    out.extend_from_slice(&journal[copied..]);
    Ok(())
}
