//! The log segment format, the pure [`LogWriter`] that lays records out in
//! it, and the recovery scanner that tells a torn tail from a lost record.
//!
//! A shard's log is a sequence of segment files numbered from the first the
//! shard ever wrote. Records carry consecutive LSNs across the whole log;
//! each segment holds a run of them, starting at its header's `base_lsn`.
//!
//! # Segment file
//!
//! ```text
//! offset 0     header block, HEADER_BYTES = 4096 bytes
//! offset 4096  frame, frame, frame, ...   (no padding between frames)
//!              zeros up to the end of the (preallocated) file
//! ```
//!
//! ## Header block (all integers little-endian)
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..8 | magic | `b"FUSEESEG"` |
//! | 8..12 | format u32 | [`SEGMENT_FORMAT`] (2; format 1 checksummed frames with CRC-32 and is not read) |
//! | 12..16 | shard u32 | the shard the log belongs to |
//! | 16..24 | segment u64 | this segment's number |
//! | 24..32 | base_lsn u64 | LSN of the segment's first frame (at least 1) |
//! | 32..40 | created_ms u64 | when the writer started the segment (informational) |
//! | 40..44 | flags u32 | bit 0 ([`OPENED`]): an open started the segment, so every LSN before `base_lsn` was durable when it was written (0: a roll started it, inside a flush batch); other bits must be zero |
//! | 44..48 | crc u32 | CRC-32 (`crc32fast`) of bytes 0..44 |
//! | 48..4096 | zero | must be zero |
//!
//! An all-zero block is a preallocated segment the writer never started:
//! [`SegmentHeader::decode`] returns `Ok(None)`. Anything else that is not a
//! valid header (wrong magic, bad crc, unknown format, non-zero padding) is an
//! error: the header is written once, before any frame can be acknowledged,
//! so a damaged header cannot be a torn write of an acknowledged record.
//!
//! ## Frame
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..4 | len u32 | length of the body |
//! | 4..8 | sum u32 | [`checksum32`] (low 32 bits of XXH3-64) of bytes 8..20+len: lsn, batch and body |
//! | 8..16 | lsn u64 | the record's LSN |
//! | 16..20 | batch u32 | how many records back the frame's flush batch began (0 = this frame starts it) |
//! | 20.. | body | the record's canonical bytes, without the varint length prefix the frame replaces |
//!
//! The segment module never decodes a body: it is opaque bytes here.
//! A frame's *batch start* is `lsn - batch`.
//!
//! # Invariants the writer keeps (and the scanner relies on)
//!
//! 1. LSNs are consecutive: the first frame has `base_lsn`, each next frame
//!    the previous plus one.
//! 2. Batch starts never decrease; a frame either continues the batch of the
//!    frame before it or starts a new one (`batch == 0`). A segment's first
//!    frame may continue a batch that began in the previous segment.
//! 3. A batch's bytes are one contiguous run per segment, written after the
//!    previous batch is durable: the host has at most one flush in flight
//!    ([`LogWriter::take`] hands out the next batch only when asked).
//! 4. Every open of the log starts a fresh segment whose header is flushed
//!    in a batch of its own, so a file that held a torn tail is never
//!    written again, and the bytes after a torn tail are never followed by
//!    frames of a later batch in the same file.
//! 5. Files are zero-filled before use (preallocated or freshly created), or
//!    are *recycled* segments: an older segment of the same log, renamed
//!    once every record in it was discarded. A recycled file still holds its
//!    old header until the new one is written and old frames after whatever
//!    is written, so (a) its old header names another segment number, which
//!    the backend reads as "never started", (b) every old frame has an LSN
//!    below the new `base_lsn`, which the scanner reads as garbage, never as
//!    a record or a lost one, and (c) the writer zeroes the bytes after each
//!    batch up to [`clean_end`], so a durable batch ends cleanly. For (b)
//!    the host recycles only files whose every frame it wrote itself: a
//!    file found at open may hold, after its recovered end, frames of the
//!    batch a crash cut short, whose LSNs new records have taken since.
//!
//! # What a crash can leave, and how the scanner reads it
//!
//! Every batch before the last one that was being written is complete and
//! durable. The last batch (the one in flight) may be missing any subset
//! of its pages, in any order, and a page may be torn; after it everything
//! is zero. The scanner walks frames from offset 4096 while each is valid
//! (length within limits, checksum matches, LSN is the next one, batch field
//! consistent) and then classifies where the valid prefix ends (`end`):
//!
//! - **Clean**: the 20 bytes at `end` are zero and so is every byte up to
//!   the end of the first whole 4 KiB-aligned block after `end` (or the
//!   file ends). Nothing follows.
//! - **Torn tail** ([`Tail::Torn`]): the frame at `end` is bad or partial,
//!   and no valid frame of a *later* batch follows it. The bad frame belongs
//!   to the last batch, which was never acknowledged: cut at `end`.
//! - **Lost record** ([`ScanError::LostRecord`]): a valid frame whose LSN
//!   is not the next one (but not below the segment's base: that is a
//!   recycled file's old frame, read as a bad frame) or whose batch field
//!   contradicts the frames before it, or a bad frame followed by a valid frame whose batch starts after
//!   the bad frame's LSN. A later batch is only written once the previous
//!   one is durable, so the damaged frame had been acknowledged.
//!
//! To find "a valid frame of a later batch" after a bad frame (whose length
//! field may itself be damaged) the scanner tries every byte offset after it
//! as a frame start, cheaply filtering on the LSN field first (it must lie
//! after the bad frame's LSN, within one record per 20 bytes skipped) and
//! the batch start (after the bad frame's LSN), and only then checking the
//! checksum. The search stops at the first all-zero 4 KiB-aligned block, the same
//! rule that ends a clean segment, so recovery reads the valid frames plus
//! the block after them, never the whole preallocated file. It checksums
//! at most twice the file's bytes: crafted bytes that pass the filters at
//! every offset would make it quadratic, and are refused as a lost record.
//!
//! What this cannot detect, by construction: damage that zeroes a whole
//! aligned block of acknowledged frames and everything up to the next
//! block (it reads as a clean end or a torn tail); and a record payload that
//! itself contains a byte-exact valid frame with upcoming LSNs can make a
//! torn tail look like a lost record (which fails safe: recovery refuses to
//! open rather than dropping data). Across segments the backend checks that
//! each segment's `base_lsn` follows the previous segment's `last_lsn`: a
//! segment after a torn one may only hold frames of the torn batch, i.e. its
//! [`Scanned::max_batch_start`] must not be after the torn frame's LSN.
//! Damage to the last frames of the newest batch looks exactly like a torn
//! write of it; the backend also checks that the log still reaches every
//! LSN it knows was durable (the checkpoint's LSN at least).

use crate::record::{Lsn, MAX_LSN};
use crate::wire::{MAX_PAYLOAD, checksum32};

/// Bytes of the header block at the start of every segment.
pub const HEADER_BYTES: usize = 4096;
/// Bytes of a frame before its body.
pub const FRAME_HEADER: usize = 20;
/// The first 8 bytes of every started segment.
pub const SEGMENT_MAGIC: [u8; 8] = *b"FUSEESEG";
/// The segment format this module writes and reads.
pub const SEGMENT_FORMAT: u32 = 2;
/// The largest record body a frame may carry: a full [`MAX_PAYLOAD`]
/// payload plus 64 KiB for the record's other fields (names, IDs, varints),
/// which are small but not bounded by the payload limit alone. A larger
/// length field can only be damage, so the scanner rejects it before
/// looking for the body.
pub const MAX_RECORD_BODY: usize = MAX_PAYLOAD + 64 * 1024;
/// The smallest segment size [`LogWriter`] uses: a header and one block of
/// frames.
pub const MIN_SEGMENT_BYTES: u64 = 2 * HEADER_BYTES as u64;

/// Alignment of the zero block that ends a segment's data.
const BLOCK: usize = 4096;
/// Bytes a search for a later batch may checksum, per byte of the file: a
/// candidate must pass the LSN filters first, which bytes a crash leaves
/// (zeros, a torn batch, a recycled file's older frames) almost never do,
/// so only crafted bytes reach the bound. Past it the scan refuses the
/// segment (a lost record) rather than run for minutes.
const SEARCH_CHECKED_PER_FILE_BYTE: u64 = 2;
/// Bytes of the header covered by its crc.
const HEADER_FIELDS: usize = 44;

/// Header flag: the segment was started by an open of the log, not by a
/// roll, so every LSN before its base was durable when the header was
/// written. Recovery uses it to tell a gap of lost acknowledged records
/// (an error) from a batch torn across a roll (cut).
pub const OPENED: u32 = 1;

/// A segment's header block, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SegmentHeader {
    /// The format version ([`SEGMENT_FORMAT`] for every header that decodes).
    pub format: u32,
    /// The shard whose log this segment belongs to.
    pub shard: u32,
    /// The segment's number in the shard's log.
    pub segment: u64,
    /// LSN of the segment's first frame.
    pub base_lsn: Lsn,
    /// When the writer started the segment, in ms (informational only).
    pub created_ms: u64,
    /// [`OPENED`] or 0.
    pub flags: u32,
}

impl SegmentHeader {
    /// Appends exactly [`HEADER_BYTES`] bytes: the header fields, their crc,
    /// then zeros.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&SEGMENT_MAGIC);
        out.extend_from_slice(&self.format.to_le_bytes());
        out.extend_from_slice(&self.shard.to_le_bytes());
        out.extend_from_slice(&self.segment.to_le_bytes());
        out.extend_from_slice(&self.base_lsn.to_le_bytes());
        out.extend_from_slice(&self.created_ms.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        let crc = crc32fast::hash(&out[start..start + HEADER_FIELDS]);
        out.extend_from_slice(&crc.to_le_bytes());
        out.resize(start + HEADER_BYTES, 0);
    }

    /// The [`HEADER_BYTES`]-byte block for this header.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES);
        self.encode_into(&mut out);
        out
    }

    /// Decodes the first [`HEADER_BYTES`] of `block`: `Ok(None)` if they are
    /// all zero (a segment never started), the header if it is valid, and
    /// an error for anything else, including a block shorter than
    /// [`HEADER_BYTES`].
    pub fn decode(block: &[u8]) -> Result<Option<Self>, ScanError> {
        let Some(block) = block.get(..HEADER_BYTES) else {
            return Err(ScanError::Truncated {
                len: block.len() as u64,
            });
        };
        if is_zero(block) {
            return Ok(None);
        }
        let bad = |reason| Err(ScanError::BadHeader { reason });
        if block[..8] != SEGMENT_MAGIC {
            return bad("wrong magic");
        }
        let stored = le_u32(block, HEADER_FIELDS);
        if crc32fast::hash(&block[..HEADER_FIELDS]) != stored {
            return bad("crc mismatch");
        }
        let format = le_u32(block, 8);
        if format != SEGMENT_FORMAT {
            return Err(ScanError::UnsupportedFormat { found: format });
        }
        if !is_zero(&block[HEADER_FIELDS + 4..]) {
            return bad("non-zero bytes after the header fields");
        }
        let header = Self {
            format,
            shard: le_u32(block, 12),
            segment: le_u64(block, 16),
            base_lsn: le_u64(block, 24),
            created_ms: le_u64(block, 32),
            flags: le_u32(block, 40),
        };
        if header.base_lsn == 0 {
            return bad("base LSN 0");
        }
        if header.base_lsn > MAX_LSN {
            return bad("base LSN out of range");
        }
        if header.flags & !OPENED != 0 {
            return bad("unknown header flags");
        }
        Ok(Some(header))
    }
}

/// A record or batch [`LogWriter::append`] refused; nothing was appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} of {len} is over the limit of {max}")]
pub struct TooLarge {
    /// What was too large: `"record body (bytes)"` or `"batch (records)"`.
    pub what: &'static str,
    /// Its size.
    pub len: u64,
    /// The limit it passed.
    pub max: u64,
}

/// Bytes to write at one place: `bytes` go to `offset` in segment number
/// `segment`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The segment file's number.
    pub segment: u64,
    /// Where in the file the bytes start.
    pub offset: u64,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// One flush batch: chunks to write in order; once all are written and
/// flushed, the records `first_lsn..=last_lsn` are durable. A batch that
/// only starts a segment has `first_lsn == last_lsn + 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// The writes, in order; frames adjacent in one segment are one chunk,
    /// and a segment started in this batch has its header block at the
    /// front of its chunk.
    pub chunks: Vec<Chunk>,
    /// LSN of the batch's first record.
    pub first_lsn: Lsn,
    /// LSN of the batch's last record.
    pub last_lsn: Lsn,
}

impl Batch {
    /// How many records the batch makes durable.
    pub fn records(&self) -> u64 {
        (self.last_lsn + 1).saturating_sub(self.first_lsn)
    }

    /// The batch's records in LSN order, read back from its chunks (a log
    /// reads a batch whose write is in flight here).
    pub fn frames(&self) -> impl Iterator<Item = (Lsn, &[u8])> + '_ {
        chunk_frames(&self.chunks)
    }
}

/// The records framed in `chunks` (written by [`LogWriter`], so well formed;
/// a short or odd chunk just ends its walk).
fn chunk_frames(chunks: &[Chunk]) -> impl Iterator<Item = (Lsn, &[u8])> + '_ {
    chunks.iter().flat_map(|c| {
        // A rolled segment's chunk starts with its header block.
        let start = if c.offset == 0 { HEADER_BYTES } else { 0 };
        PendingFrames {
            bytes: &c.bytes,
            at: start,
        }
    })
}

/// Lays records out as frames in segments, with no files: the host writes
/// the chunks of each [`Batch`] from [`LogWriter::take`], flushes, and only
/// then takes the next batch.
#[derive(Debug)]
pub struct LogWriter {
    shard: u32,
    segment: u64,
    segment_bytes: u64,
    /// Capacity of the current segment (smaller than `segment_bytes` only
    /// for a segment limited by [`LogWriter::limit_first_segment`] or
    /// [`LogWriter::limit_next_segment`]).
    limit: u64,
    /// The capacity the next roll gives its segment, if the host capped it
    /// ([`LogWriter::limit_next_segment`]); `segment_bytes` otherwise.
    next_limit: Option<u64>,
    /// Bytes used in the current segment, header included.
    offset: u64,
    next_lsn: Lsn,
    /// First LSN of the batch being built.
    batch_first: Lsn,
    pending_records: u32,
    /// The header of the segment this writer was opened on, until taken.
    open_header: Option<Chunk>,
    open_base: Lsn,
    /// Chunks of the pending batch that a roll closed, in order.
    chunks: Vec<Chunk>,
    /// The pending batch's open chunk: its bytes in the current segment,
    /// from `tail_offset` to `offset` (empty when the batch has none yet).
    /// Kept apart from `chunks` so an append writes to it directly.
    tail: Vec<u8>,
    tail_offset: u64,
    /// Bytes of the largest chunk of the last batch taken: the next batch's
    /// first chunk starts with that much room, so steady group commits
    /// do not regrow their buffer record by record.
    chunk_hint: usize,
    /// A written batch's buffer, handed back by [`LogWriter::recycle`]:
    /// reusing it spares the allocator and the page faults of a fresh
    /// multi-page buffer per batch.
    spare: Vec<u8>,
}

impl LogWriter {
    /// A writer that starts segment number `segment` with `next_lsn` as its
    /// base LSN. Segments hold `segment_bytes` bytes (raised to
    /// [`MIN_SEGMENT_BYTES`] if smaller); `next_lsn` 0 is taken as 1, since
    /// LSNs start at 1. The new segment's header is the first batch
    /// [`LogWriter::take`] returns, on its own.
    pub fn new(shard: u32, segment: u64, next_lsn: Lsn, segment_bytes: u64, now_ms: u64) -> Self {
        let next_lsn = next_lsn.max(1);
        let segment_bytes = segment_bytes.max(MIN_SEGMENT_BYTES);
        let header = SegmentHeader {
            format: SEGMENT_FORMAT,
            shard,
            segment,
            base_lsn: next_lsn,
            created_ms: now_ms,
            flags: OPENED,
        };
        Self {
            shard,
            segment,
            segment_bytes,
            limit: segment_bytes,
            next_limit: None,
            offset: HEADER_BYTES as u64,
            next_lsn,
            batch_first: next_lsn,
            pending_records: 0,
            open_header: Some(Chunk {
                segment,
                offset: 0,
                bytes: header.encode(),
            }),
            open_base: next_lsn,
            chunks: Vec::new(),
            tail: Vec::new(),
            tail_offset: 0,
            chunk_hint: 4096,
            spare: Vec::new(),
        }
    }

    /// The largest body [`LogWriter::append`] accepts: [`MAX_RECORD_BODY`],
    /// whatever the segment size. A record too large for a segment of
    /// `segment_bytes` gets a segment of its own, exactly as large as it
    /// needs (the host sizes the file from the chunks it writes).
    pub fn max_body(&self) -> usize {
        MAX_RECORD_BODY
    }

    /// Appends one record's canonical body as the next frame and returns its
    /// LSN. Starts a new segment first when the frame does not fit the
    /// current one. A body over [`LogWriter::max_body`], or a batch that
    /// already holds `u32::MAX` records, is refused with nothing changed.
    // Inlined into the host's append: this is the hot path of every durable
    // record, so the rare cases (a refusal, a roll, a batch's first frame)
    // are out of line and the rest is a few checks, the copy and the
    // checksum.
    #[inline]
    pub fn append(&mut self, body: &[u8], now_ms: u64) -> Result<Lsn, TooLarge> {
        if body.len() > MAX_RECORD_BODY || self.pending_records == u32::MAX {
            return Err(self.refusal(body.len()));
        }
        let frame = FRAME_HEADER + body.len();
        if self.offset + frame as u64 > self.limit {
            self.roll(now_ms, frame as u64);
        }
        if self.tail.is_empty() {
            self.open_tail(frame);
        }
        debug_assert_eq!(self.tail_offset + self.tail.len() as u64, self.offset);
        let lsn = self.next_lsn;
        let batch = self.pending_records;
        debug_assert_eq!(lsn - self.batch_first, u64::from(batch));
        let mut header = [0u8; FRAME_HEADER];
        header[0..4].copy_from_slice(&(body.len() as u32).to_le_bytes());
        header[8..16].copy_from_slice(&lsn.to_le_bytes());
        header[16..20].copy_from_slice(&batch.to_le_bytes());
        let start = self.tail.len();
        self.tail.extend_from_slice(&header);
        self.tail.extend_from_slice(body);
        let sum = checksum32(&self.tail[start + 8..]);
        self.tail[start + 4..start + 8].copy_from_slice(&sum.to_le_bytes());
        self.offset += frame as u64;
        debug_assert!(self.offset <= self.limit);
        self.next_lsn += 1;
        self.pending_records = batch + 1;
        Ok(lsn)
    }

    /// Why [`LogWriter::append`] refuses a body of `len` bytes.
    #[cold]
    #[inline(never)]
    fn refusal(&self, len: usize) -> TooLarge {
        if len > MAX_RECORD_BODY {
            TooLarge {
                what: "record body (bytes)",
                len: len as u64,
                max: MAX_RECORD_BODY as u64,
            }
        } else {
            TooLarge {
                what: "batch (records)",
                len: u64::from(self.pending_records) + 1,
                max: u64::from(u32::MAX),
            }
        }
    }

    /// Opens the batch's chunk at `offset` for a first frame of `frame`
    /// bytes, in the spare buffer when there is one, with room for a batch
    /// like the last.
    #[cold]
    #[inline(never)]
    fn open_tail(&mut self, frame: usize) {
        self.tail = std::mem::take(&mut self.spare);
        self.tail.clear();
        self.tail.reserve(frame.max(self.chunk_hint));
        self.tail_offset = self.offset;
    }

    /// Moves the open chunk, if any, to the end of `chunks`.
    fn close_tail(&mut self) {
        if !self.tail.is_empty() {
            self.chunks.push(Chunk {
                segment: self.segment,
                offset: self.tail_offset,
                bytes: std::mem::take(&mut self.tail),
            });
        }
    }

    /// Starts the next segment, large enough for a first frame of `frame`
    /// bytes; its header opens the segment's chunk.
    #[cold]
    #[inline(never)]
    fn roll(&mut self, now_ms: u64, frame: u64) {
        self.close_tail();
        self.segment += 1;
        self.offset = HEADER_BYTES as u64;
        let capacity = self.next_limit.take().unwrap_or(self.segment_bytes);
        self.limit = capacity.max(HEADER_BYTES as u64 + frame);
        let header = SegmentHeader {
            format: SEGMENT_FORMAT,
            shard: self.shard,
            segment: self.segment,
            base_lsn: self.next_lsn,
            created_ms: now_ms,
            flags: 0,
        };
        let mut bytes = Vec::with_capacity(2 * HEADER_BYTES);
        header.encode_into(&mut bytes);
        self.tail = bytes;
        self.tail_offset = 0;
    }

    /// The next batch to write and flush, or `None` if nothing is pending.
    /// The first call after [`LogWriter::new`] returns the opened segment's
    /// header alone; records appended meanwhile come in the next batch.
    pub fn take(&mut self) -> Option<Batch> {
        if let Some(header) = self.open_header.take() {
            return Some(Batch {
                chunks: vec![header],
                first_lsn: self.open_base,
                last_lsn: self.open_base - 1,
            });
        }
        self.close_tail();
        if self.chunks.is_empty() {
            return None;
        }
        debug_assert!(self.pending_records > 0);
        let largest = self.chunks.iter().map(|c| c.bytes.len()).max().unwrap_or(0);
        // Room for the next batch like this one, within reason.
        self.chunk_hint = largest.clamp(4096, 8 << 20);
        let batch = Batch {
            chunks: std::mem::take(&mut self.chunks),
            first_lsn: self.batch_first,
            last_lsn: self.next_lsn - 1,
        };
        self.pending_records = 0;
        self.batch_first = self.next_lsn;
        Some(batch)
    }

    /// Hands a written batch's buffers back for the next batch to reuse
    /// (optional: without it each batch allocates its own).
    pub fn recycle(&mut self, batch: Batch) {
        if let Some(largest) = batch
            .chunks
            .into_iter()
            .map(|c| c.bytes)
            .max_by_key(Vec::capacity)
            && largest.capacity() <= 16 << 20
            && largest.capacity() > self.spare.capacity()
        {
            self.spare = largest;
        }
    }

    /// The records appended since the last [`LogWriter::take`], in LSN order,
    /// read back from the pending chunks (a log reads its unflushed tail
    /// here instead of keeping a second copy).
    pub fn pending(&self) -> impl Iterator<Item = (Lsn, &[u8])> + '_ {
        // A rolled segment's chunk starts with its header block.
        let start = if self.tail_offset == 0 {
            HEADER_BYTES
        } else {
            0
        };
        chunk_frames(&self.chunks).chain(PendingFrames {
            bytes: &self.tail,
            at: start,
        })
    }

    /// Caps the current segment at `bytes` (at least what it already holds,
    /// at most the configured segment size): for a segment opened in a file
    /// smaller than the configured size. Later segments have the configured
    /// size, and the largest record accepted does not change.
    pub fn limit_first_segment(&mut self, bytes: u64) {
        self.limit = bytes.max(self.offset).min(self.segment_bytes);
    }

    /// Caps the segment the next roll starts at `bytes` (at least
    /// [`MIN_SEGMENT_BYTES`], at most the configured segment size): for a
    /// host that prepares that segment's file smaller than the configured
    /// size. Segments after it have the configured size again, and the
    /// largest record accepted does not change (one too large gets a
    /// segment of its own, as ever).
    pub fn limit_next_segment(&mut self, bytes: u64) {
        self.next_limit = Some(bytes.clamp(MIN_SEGMENT_BYTES, self.segment_bytes));
    }

    /// The LSN the next appended record gets.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }

    /// The LSN of the last record appended (`next_lsn - 1`).
    pub fn last_lsn(&self) -> Lsn {
        self.next_lsn - 1
    }

    /// The number of the segment records are appended to.
    pub fn segment(&self) -> u64 {
        self.segment
    }

    /// Bytes used in the current segment, its header and pending frames
    /// included.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The configured segment size.
    pub fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }

    /// The capacity of the current segment: the configured size, or less
    /// for a segment capped by [`LogWriter::limit_first_segment`], or more
    /// for a segment holding one oversized record.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Whether [`LogWriter::take`] would return a batch.
    pub fn has_pending(&self) -> bool {
        self.open_header.is_some() || !self.chunks.is_empty() || !self.tail.is_empty()
    }

    /// Records appended since the last batch of records was taken.
    pub fn pending_records(&self) -> u32 {
        self.pending_records
    }
}

/// Walks the frames of a pending chunk (written by this writer, so well
/// formed; a short or odd chunk just ends the walk).
struct PendingFrames<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Iterator for PendingFrames<'a> {
    type Item = (Lsn, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let header = self.bytes.get(self.at..self.at + FRAME_HEADER)?;
        let len = le_u32(header, 0) as usize;
        let lsn = le_u64(header, 8);
        let start = self.at + FRAME_HEADER;
        let body = self.bytes.get(start..start + len)?;
        self.at = start + len;
        Some((lsn, body))
    }
}

/// How a segment's valid prefix ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tail {
    /// Zeros (or the end of the file) follow the last valid frame.
    Clean,
    /// A bad or partial frame of the last, never-acknowledged batch starts
    /// at `at`: cut the segment there.
    Torn {
        /// Offset of the bad frame (the end of the valid prefix).
        at: u64,
    },
}

/// What a scan found in one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scanned {
    /// The segment's header.
    pub header: SegmentHeader,
    /// Offset just past the last valid frame.
    pub end: u64,
    /// LSN of the last valid frame, or `base_lsn - 1` if there is none.
    pub last_lsn: Lsn,
    /// How many valid frames were read.
    pub records: u64,
    /// How the valid prefix ended.
    pub tail: Tail,
    /// The highest batch start (`lsn - batch`) of a valid frame; 0 if there
    /// is no valid frame.
    pub max_batch_start: Lsn,
}

/// Why a segment could not be read. Offsets are from the file's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    /// The file is shorter than a header block and not all zero.
    #[error("segment of {len} bytes is shorter than its header block")]
    Truncated {
        /// The file's length.
        len: u64,
    },
    /// The header block is neither valid nor all zero.
    #[error("bad segment header: {reason}")]
    BadHeader {
        /// What was wrong.
        reason: &'static str,
    },
    /// The header names a format this code does not read.
    #[error("segment format {found} is not supported (this build reads {SEGMENT_FORMAT})")]
    UnsupportedFormat {
        /// The header's format field.
        found: u32,
    },
    /// An acknowledged record is damaged or missing.
    #[error("lost record: {reason} at offset {offset} (LSN {lsn} expected there)")]
    LostRecord {
        /// Where the damaged frame starts.
        offset: u64,
        /// The LSN the frame there should have.
        lsn: Lsn,
        /// What was found.
        reason: &'static str,
    },
    /// The scanner was handed a prefix shorter than it was given before, or
    /// longer than the file: a caller bug.
    #[error("prefix of {got} bytes given after {had} bytes of a {file_len}-byte file")]
    BadPrefix {
        /// Bytes given before.
        had: u64,
        /// Bytes given now.
        got: u64,
        /// The file's length.
        file_len: u64,
    },
}

/// What [`SegmentScanner::advance`] got to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The scan needs a prefix of at least `want` bytes (never more than the
    /// file) to go on; every valid frame within the prefix given was visited.
    NeedMore {
        /// Smallest prefix length that lets the scan progress.
        want: u64,
    },
    /// The scan is over.
    Done(Scanned),
}

/// Scans a segment over a growing prefix of its file, so recovery reads the
/// valid frames and the zero block after them, not the whole preallocated
/// file. Given the whole file at once it is [`scan_segment`].
#[derive(Clone, Debug)]
pub struct SegmentScanner {
    header: SegmentHeader,
    file_len: u64,
    /// Longest prefix seen.
    seen: u64,
    /// Offset of the next frame to read.
    pos: usize,
    next_lsn: Lsn,
    records: u64,
    batch_start: Lsn,
    /// Set once the frame at `pos` is known bad: where the search for a
    /// later batch stands.
    search: Option<usize>,
    /// Bytes the search checksummed so far, bounded by
    /// [`SEARCH_CHECKED_PER_FILE_BYTE`].
    search_checked: u64,
    done: Option<Scanned>,
}

/// What is at a frame boundary.
enum At<'a> {
    Frame {
        lsn: Lsn,
        batch: u32,
        body: &'a [u8],
    },
    Zero,
    Bad,
    NeedMore(usize),
}

impl SegmentScanner {
    /// Reads the header from `prefix`, the first bytes of a `file_len`-byte
    /// file. `Ok(None)` means a segment never started (an all-zero header
    /// block, or an all-zero file shorter than one). The prefix must hold
    /// the whole header block, or the whole file if it is shorter.
    pub fn start(prefix: &[u8], file_len: u64) -> Result<Option<Self>, ScanError> {
        let got = prefix.len() as u64;
        let need = file_len.min(HEADER_BYTES as u64);
        if got > file_len || got < need {
            return Err(ScanError::BadPrefix {
                had: 0,
                got,
                file_len,
            });
        }
        if file_len < HEADER_BYTES as u64 {
            return if is_zero(prefix) {
                Ok(None)
            } else {
                Err(ScanError::Truncated { len: file_len })
            };
        }
        let Some(header) = SegmentHeader::decode(prefix)? else {
            return Ok(None);
        };
        Ok(Some(Self {
            header,
            file_len,
            seen: got,
            pos: HEADER_BYTES,
            next_lsn: header.base_lsn,
            records: 0,
            batch_start: 0,
            search: None,
            search_checked: 0,
            done: None,
        }))
    }

    /// The segment's header.
    pub fn header(&self) -> &SegmentHeader {
        &self.header
    }

    /// Continues over `prefix` (at least as long as any prefix given
    /// before), calling `visit(lsn, body)` once for each valid frame not
    /// visited yet, in LSN order. Once [`Progress::Done`] it stays done.
    pub fn advance(
        &mut self,
        prefix: &[u8],
        mut visit: impl FnMut(Lsn, &[u8]),
    ) -> Result<Progress, ScanError> {
        let got = prefix.len() as u64;
        if got < self.seen || got > self.file_len {
            return Err(ScanError::BadPrefix {
                had: self.seen,
                got,
                file_len: self.file_len,
            });
        }
        self.seen = got;
        if let Some(done) = self.done {
            return Ok(Progress::Done(done));
        }
        let file_len = self.file_len as usize;
        // Each turn consumes a frame or ends the scan; frames are at least
        // FRAME_HEADER bytes, which bounds the loop by the prefix.
        loop {
            if self.search.is_some() {
                return self.search_later_batch(prefix);
            }
            match frame_at(prefix, self.pos, file_len) {
                At::NeedMore(want) => return Ok(need(want)),
                // A frame older than the segment is a leftover of the file's
                // previous life (a recycled segment): it ends the valid
                // frames like garbage would.
                At::Frame { lsn, .. } if lsn < self.header.base_lsn => {
                    self.search = Some(self.pos + 1);
                }
                At::Frame { lsn, batch, body } => {
                    self.check_frame(lsn, batch)?;
                    visit(lsn, body);
                    self.pos += FRAME_HEADER + body.len();
                    self.next_lsn += 1;
                    self.records += 1;
                }
                At::Zero => {
                    let window = zero_window_end(self.pos, file_len);
                    let Some(bytes) = prefix.get(self.pos..window) else {
                        return Ok(need(window));
                    };
                    if is_zero(bytes) {
                        return Ok(self.finish(Tail::Clean));
                    }
                    self.search = Some(self.pos + 1);
                }
                At::Bad => self.search = Some(self.pos + 1),
            }
        }
    }

    /// Checks a checksum-valid frame against the frames before it.
    fn check_frame(&mut self, lsn: Lsn, batch: u32) -> Result<(), ScanError> {
        let lost = |reason| ScanError::LostRecord {
            offset: self.pos as u64,
            lsn: self.next_lsn,
            reason,
        };
        if lsn != self.next_lsn {
            return Err(lost("frame LSN is not the next LSN"));
        }
        let start = match lsn.checked_sub(u64::from(batch)) {
            Some(s) if s >= 1 => s,
            _ => return Err(lost("batch field reaches before LSN 1")),
        };
        if self.records > 0 && start != self.batch_start && batch != 0 {
            return Err(lost("batch field contradicts the frames before it"));
        }
        self.batch_start = start;
        Ok(())
    }

    /// The frame at `self.pos` is bad: looks for a valid frame of a later
    /// batch before the first all-zero aligned block (see the module docs).
    fn search_later_batch(&mut self, prefix: &[u8]) -> Result<Progress, ScanError> {
        let file_len = self.file_len as usize;
        let bad_at = self.pos;
        let bad_lsn = self.next_lsn;
        let Some(mut q) = self.search else {
            return Ok(self.finish(Tail::Torn { at: bad_at as u64 }));
        };
        while q < file_len {
            if q % BLOCK == 0 {
                let block_end = (q + BLOCK).min(file_len);
                let Some(block) = prefix.get(q..block_end) else {
                    self.search = Some(q);
                    return Ok(need(block_end));
                };
                if is_zero(block) {
                    break;
                }
            }
            let Some(head) = prefix.get(q..q + FRAME_HEADER) else {
                if q + FRAME_HEADER > file_len {
                    // Too close to the end of the file to hold a frame;
                    // only the zero-block check above is left to do.
                    q += 1;
                    continue;
                }
                self.search = Some(q);
                return Ok(need(q + FRAME_HEADER));
            };
            let lsn = le_u64(head, 8);
            let batch = u64::from(le_u32(head, 16));
            // Every record between the bad frame and this one takes at
            // least FRAME_HEADER bytes.
            let reach = ((q - bad_at) / FRAME_HEADER) as u64;
            let plausible = lsn > bad_lsn
                && lsn - bad_lsn <= reach
                && lsn.checked_sub(batch).is_some_and(|s| s > bad_lsn);
            if plausible {
                let len = le_u32(head, 0) as usize;
                let end = q + FRAME_HEADER + len;
                if len <= MAX_RECORD_BODY && end <= file_len {
                    let Some(frame) = prefix.get(q..end) else {
                        self.search = Some(q);
                        return Ok(need(end));
                    };
                    self.search_checked += frame.len() as u64;
                    if self.search_checked > SEARCH_CHECKED_PER_FILE_BYTE * self.file_len {
                        // Only crafted bytes get here: refusing is safe,
                        // a quadratic scan of a 64 MiB file is not.
                        return Err(ScanError::LostRecord {
                            offset: bad_at as u64,
                            lsn: bad_lsn,
                            reason: "bad frame followed by more plausible frames than a scan checks",
                        });
                    }
                    if checksum32(&frame[8..]) == le_u32(head, 4) {
                        return Err(ScanError::LostRecord {
                            offset: bad_at as u64,
                            lsn: bad_lsn,
                            reason: "bad frame followed by a later flush batch",
                        });
                    }
                }
            }
            q += 1;
        }
        Ok(self.finish(Tail::Torn { at: bad_at as u64 }))
    }

    fn finish(&mut self, tail: Tail) -> Progress {
        let scanned = Scanned {
            header: self.header,
            end: self.pos as u64,
            last_lsn: self.next_lsn - 1,
            records: self.records,
            tail,
            max_batch_start: if self.records > 0 {
                self.batch_start
            } else {
                0
            },
        };
        self.search = None;
        self.done = Some(scanned);
        Progress::Done(scanned)
    }
}

/// Scans a whole segment image, calling `visit(lsn, body)` for each valid
/// frame in order. `Ok(None)` for a segment never started.
pub fn scan_segment(
    bytes: &[u8],
    visit: impl FnMut(Lsn, &[u8]),
) -> Result<Option<Scanned>, ScanError> {
    let Some(mut scanner) = SegmentScanner::start(bytes, bytes.len() as u64)? else {
        return Ok(None);
    };
    match scanner.advance(bytes, visit)? {
        Progress::Done(scanned) => Ok(Some(scanned)),
        // The whole file was given, so every read is satisfied.
        Progress::NeedMore { want } => unreachable!("whole image given, scanner wants {want}"),
    }
}

fn need(want: usize) -> Progress {
    Progress::NeedMore { want: want as u64 }
}

/// Classifies the bytes at frame boundary `p` of a `file_len`-byte file
/// whose first `prefix.len()` bytes are known.
fn frame_at(prefix: &[u8], p: usize, file_len: usize) -> At<'_> {
    if p + FRAME_HEADER > file_len {
        // The file ends inside a frame header.
        return match prefix.get(p..file_len) {
            Some(rest) if is_zero(rest) => At::Zero,
            Some(_) => At::Bad,
            None => At::NeedMore(file_len),
        };
    }
    let Some(head) = prefix.get(p..p + FRAME_HEADER) else {
        return At::NeedMore(p + FRAME_HEADER);
    };
    if is_zero(head) {
        return At::Zero;
    }
    let len = le_u32(head, 0) as usize;
    let end = p + FRAME_HEADER + len;
    if len > MAX_RECORD_BODY || end > file_len {
        return At::Bad;
    }
    let Some(frame) = prefix.get(p..end) else {
        return At::NeedMore(end);
    };
    if checksum32(&frame[8..]) != le_u32(head, 4) {
        return At::Bad;
    }
    At::Frame {
        lsn: le_u64(head, 8),
        batch: le_u32(head, 16),
        body: &frame[FRAME_HEADER..],
    }
}

/// End of the zero run that makes `p` a clean end: the rest of `p`'s block
/// and the whole next aligned block (or the file's end).
/// Where the zeros must reach for the scanner to read a segment of
/// `file_len` bytes as cleanly ended at `end`: the end of the first whole
/// 4 KiB block after `end`, or the end of the file. A writer that reuses a
/// file with old bytes in it (a recycled segment) zeroes `end..clean_end`
/// with every batch it writes.
pub fn clean_end(end: u64, file_len: u64) -> u64 {
    (end.next_multiple_of(BLOCK as u64) + BLOCK as u64).min(file_len)
}

fn zero_window_end(p: usize, file_len: usize) -> usize {
    (p.next_multiple_of(BLOCK) + BLOCK).min(file_len)
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

/// Reads a little-endian u32 at `at`; callers have checked the bounds.
fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// Reads a little-endian u64 at `at`; callers have checked the bounds.
fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}
