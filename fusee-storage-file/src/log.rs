//! A shard's log in segment files (`log/NNNNNNNNNNNNNNNNNNNN.seg`, the
//! segment number in 20 digits), in the format of [`fusee_core::segment`].
//!
//! # Writing
//!
//! [`LogWriter`] lays appended records out as frames; a flush writes the
//! batch's chunks with positioned writes and syncs every segment it touched,
//! once. The flush is split as the contract allows: `begin_flush` takes the
//! batch and opens the files it needs (the part that touches the log's
//! state), the ticket's work does the writes and syncs on whatever thread
//! runs it, holding its own handles on the files and the batch, and
//! `finish_flush` records the result. Appends, reads and discards go on
//! meanwhile; reads see the batch in flight from its buffer. `flush` is the
//! three in a row, so one code path serves both.
//!
//! Every segment a flush writes was made ready before its roll, so a flush's
//! `fdatasync` writes data only, never metadata:
//! - **Recycled**: a segment that `discard_through` drops is renamed to the
//!   next number instead of being deleted (up to two files kept
//!   ready), the way PostgreSQL recycles WAL segments. Its blocks are
//!   allocated and written already. Its old header names its old number
//!   (recovery reads that as "never started"), its old frames have LSNs
//!   below the new base (the scanner reads them as garbage), and every
//!   batch written into it also zeroes up to
//!   [`clean_end`], so a durable batch ends
//!   cleanly: see the segment format's invariant 5. Only segments this open
//!   of the log wrote are recycled. A segment found at open may hold, after
//!   its recovered end, frames of the batch a crash cut short, whose LSNs
//!   the records appended since reuse: in a recycled file such a frame could
//!   read as a record of the new segment (a false lost-record error at the
//!   next recovery), so those segments are deleted instead.
//! - **Zero-filled**: when nothing was recycled, the next segment is created
//!   and zero-filled (and synced) once the current one is half full, on a
//!   background thread (inline on the simulated disk, so a seed replays the
//!   same operations). Dropping the log waits for that thread, and it stops
//!   once the storage is closed. Zero-filling writes as many bytes as the
//!   segment will hold, so a log that grows pays it in disk bandwidth, and
//!   a host that checkpoints and discards steadily does not pay it at all.
//!
//! A roll never waits for a zero-fill. One that finds no file ready (the
//! first roll after an open under load comes after half of the open's
//! 1 MiB segment, too soon for a 64 MiB zero-fill of about 50 ms; or no
//! thread could be started) renames a preparation still running to the
//! number after it, and starts a new file of the open segment's size
//! instead, without writing its blocks: the flushes into it also write the
//! metadata that allocates them (which `fdatasync` makes durable with
//! their data, as it must to read them back), and the blocks never written
//! read as zeros, as a zero-filled file's do. Its first flush also syncs
//! the directory (the new file's entry and the rename). A crash before
//! that flush is durable can leave it shorter than a header block with
//! part of its header: past the manifest's carrier, recovery reads such a
//! file as never started, as it reads one whose header is all zeros.
//!
//! Every open starts a fresh segment whose header is flushed on its
//! own: a torn tail from before the open is never followed by new frames in
//! its file, and the new header keeps the last LSN even when every record
//! has been discarded. A file found never started at open (zero or old
//! header) is zeroed before the open's segment reuses it, since a batch torn
//! across a roll may have left newer frames in it.
//!
//! # Recovery
//!
//! Open scans every segment (through a memory map, reading the valid frames
//! and the first zero block after them) and checks that they chain: each
//! segment starts at the LSN after the previous one's last valid record. A
//! torn tail (a bad frame in the last batch of a segment) is cut by starting
//! the next segment at its LSN. Where a segment's valid records end (torn, or
//! clean because the rest of a batch never reached the disk), the next
//! segment's base LSN tells two cases apart:
//! - equal to the next LSN: the chain goes on (an earlier open may have cut
//!   a torn tail there);
//! - above it, in a segment an open started (header flag
//!   [`OPENED`]): the open knew every record
//!   before its base was durable, so records were lost: an error;
//! - above it, in a segment a roll started: it was rolled into by a batch that began at or
//!   before the first missing record (every frame's batch start is at or
//!   before it). That batch never became durable, since a durable batch has
//!   all its frames, so the segment's records lie after a hole and are
//!   dropped with it. A frame of a later batch there means an acknowledged
//!   record was lost, which is an error.
//!
//! A segment whose header is all zeros (or, past the manifest's carrier, a
//! file shorter than a header block) before newer segments was rolled
//! into by a batch that never became durable: it is dropped like the rest
//! of that batch. Any other break of the chain, a segment of another shard, or a lost
//! record inside a segment is reported as corruption naming the file and
//! offset: acknowledged records are never silently dropped.
//!
//! What the segments cannot tell: the newest acknowledged batch zeroed or
//! cut off by the disk reads exactly like a batch a crash tore before it
//! was acknowledged. The shard's seal ([`crate::seal`]) can: once a seal
//! covered the batch, a log that recovers to an earlier LSN is
//! [`fusee_storage::StorageError::LostRecords`], decided after the scan
//! and before the open writes anything to the log (no torn tail is cut,
//! no segment started or deleted on top of the loss).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use fusee_core::record::Lsn;
use fusee_core::segment::{
    Batch, FRAME_HEADER, HEADER_BYTES, LogWriter, OPENED, ScanError, SegmentHeader, clean_end,
    scan_segment,
};
use fusee_storage::{
    FlushTicket, FlushWork, LogStore, Result, SealTicket, StorageError, check_log_append,
};

use crate::error::{FileError, IoContext};
use crate::io::{Io, IoFile, OpenMode};
use crate::manifest::{MANIFEST_STEM, Manifest};
use crate::pair;
use crate::seal::{FileSeal, SealWork};
use crate::shared::{OPEN_SEGMENT_BYTES, Shared};

/// Zeros written per call when preparing a segment.
const ZERO_CHUNK: usize = 1 << 20;

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn segment_name(n: u64) -> String {
    format!("{n:020}.seg")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// A segment file that holds records, or the current one.
struct Segment<F> {
    /// Shared with the flush in flight, which writes it on another thread.
    file: Arc<F>,
    path: PathBuf,
    /// Its first LSN.
    base: Lsn,
    /// Its last flushed record (`base - 1` if none).
    last: Lsn,
    /// The offset just past its last flushed frame: reads scan no further,
    /// so they never look at bytes a flush in flight is writing.
    end: u64,
    /// Its allocated size.
    size: u64,
    /// Its header is durable: it carries the log's LSN continuity.
    header_durable: bool,
    /// A recycled file: old bytes follow whatever this segment wrote, so
    /// every batch also zeroes up to [`clean_end`].
    recycled: bool,
    /// Every frame in the file has an LSN of at most `last`, so it may be
    /// recycled for a segment based after it. False for segments found at
    /// open: bytes after their recovered end may be frames of the batch a
    /// crash cut short, with LSNs the log has given to new records since.
    recyclable: bool,
    /// Created by a roll that found no file ready: its directory entry (and
    /// the rename of the preparation it displaced) is not durable yet, so
    /// the first flush into it also syncs the log directory.
    dir_unsynced: bool,
}

/// A segment file being zero-filled on a background thread. The file is
/// created before the thread starts, so a roll that finds it unfinished can
/// rename it to a later number without racing its creation.
struct Preparing<F> {
    number: u64,
    /// Its name now (a roll may have renamed it).
    path: PathBuf,
    size: u64,
    work: std::thread::JoinHandle<std::result::Result<F, FileError>>,
}

/// The file the next roll writes: zero-filled, or a recycled old segment.
struct Prepared<F> {
    number: u64,
    file: F,
    size: u64,
    recycled: bool,
}

/// A shard's log in segment files. See the [module docs](self).
pub struct FileLog<I: Io = crate::io::RealIo> {
    shared: Arc<Shared<I>>,
    writer: LogWriter,
    segments: BTreeMap<u64, Segment<I::File>>,
    /// A zero-filled segment ready for the next roll.
    /// Files ready for the next rolls, numbered consecutively from
    /// [`FileLog::next_file`] (at most [`READY_MAX`]).
    ready: VecDeque<Prepared<I::File>>,
    /// A new segment file being zero-filled off the flush path, numbered
    /// after every file in `ready`.
    preparing: Option<Preparing<I::File>>,
    durable: Lsn,
    first: Lsn,
    latched: bool,
    /// The time the next roll's header records (refreshed at each flush:
    /// reading the clock per append would cost more than the append).
    now_ms: u64,
    /// This log's name on its [`FlushTicket`]s.
    id: u64,
    /// The flush whose ticket is out, if any.
    in_flight: Option<InFlight>,
    /// What the log manifest on disk says.
    manifest: Manifest,
    /// See [`FileLog::unprepared_rolls`].
    unprepared_rolls: u64,
    /// The shard's seal file ([`crate::seal`]), shared with a seal's work.
    seal: Arc<std::sync::Mutex<FileSeal<I>>>,
    /// A seal ticket is out.
    sealing: bool,
}

/// A flush begun and not yet finished: what [`FileLog::finish_flush`] needs
/// to account for it.
struct InFlight {
    /// The batch being written, shared with the ticket's work; reads visit
    /// its records meanwhile.
    batch: Arc<Batch>,
    /// The segments it writes, in order.
    touched: Vec<u64>,
}

/// The I/O of one flush: positioned writes of the batch's chunks, then one
/// sync per segment touched. It holds its own handles on the files, so the
/// log may append, read and discard while it runs.
struct FileFlush<I: Io> {
    shared: Arc<Shared<I>>,
    batch: Arc<Batch>,
    /// The file of each chunk, in the batch's order, and where the zeros
    /// after the chunk must reach (past its end only in a recycled file).
    writes: Vec<(Arc<I::File>, PathBuf, u64)>,
    /// Each segment touched, once.
    syncs: Vec<(Arc<I::File>, PathBuf)>,
    /// The log directory, when a segment this batch writes was created by
    /// its roll and its entry is not durable yet.
    sync_dir: Option<PathBuf>,
}

impl<I: Io> FlushWork for FileFlush<I> {
    fn run(&mut self) -> Result<()> {
        // After a close the directory's lock is gone and may belong to
        // another process, and close promises nothing more becomes durable:
        // a ticket run late writes nothing. (A close racing with this run on
        // another thread is the host's bug; the check narrows it to the
        // writes already under way.)
        self.shared.check_open("log")?;
        debug_assert_eq!(self.writes.len(), self.batch.chunks.len());
        for (chunk, (file, path, zero_to)) in self.batch.chunks.iter().zip(&self.writes) {
            file.write_at(chunk.offset, &chunk.bytes)
                .ctx("write segment", path)?;
            let end = chunk.offset + chunk.bytes.len() as u64;
            if *zero_to > end {
                let n = (*zero_to - end) as usize;
                let zeros = ZEROS.get(..n).ok_or_else(|| {
                    FileLog::<I>::corrupt(path, "zero padding beyond two blocks", end)
                })?;
                file.write_at(end, zeros).ctx("zero after batch", path)?;
            }
        }
        for (file, path) in &self.syncs {
            self.shared.sync(file, path)?;
        }
        if let Some(dir) = &self.sync_dir {
            self.shared.sync_dir(dir)?;
        }
        Ok(())
    }
}

/// Zeros written after a batch in a recycled segment: at most the rest of
/// its block and one more block ([`clean_end`]).
static ZEROS: [u8; 2 * HEADER_BYTES] = [0; 2 * HEADER_BYTES];

/// Files kept ready for the next rolls: the one being prepared for the
/// next segment and one recycled spare after it, so a discard that comes
/// after the next segment was prepared still saves the following one its
/// zero-fill.
const READY_MAX: usize = 2;

/// Names each log's tickets apart (0 is the contract's "nothing to run").
static NEXT_LOG_ID: AtomicU64 = AtomicU64::new(1);

/// What a scan of the existing segments found.
struct Recovered<F> {
    /// Segments whose records are part of the log, by number.
    live: BTreeMap<u64, Segment<F>>,
    /// The highest segment number present.
    max_number: u64,
    /// A trailing never-used segment, for reuse.
    spare: Option<(u64, F, PathBuf, u64)>,
    /// Segments to delete: record-less, or after a hole.
    dead: Vec<PathBuf>,
    last: Lsn,
}

impl<I: Io> FileLog<I> {
    /// Reads the log manifest of the shard ([`crate::manifest`]) and
    /// writes the trusted copy back over both files (see
    /// [`pair::restore`]). `None`: no manifest was ever written, so the
    /// shard was never opened whole.
    pub(crate) fn read_manifest(
        shared: &Shared<I>,
    ) -> std::result::Result<Option<Manifest>, FileError> {
        let paths = pair::paths(&shared.log_dir(), MANIFEST_STEM);
        let (first, _) = pair::read(shared, &paths[0], Manifest::decode)?;
        let (second, _) = pair::read(shared, &paths[1], Manifest::decode)?;
        let Some((m, source)) = pair::choose(first, second)? else {
            return Ok(None);
        };
        pair::restore(shared, &paths, source, &m.encode())?;
        Ok(Some(m))
    }

    /// Opens the shard's log: recovers what its segments hold (held to what
    /// `manifest` says they must hold), then starts a fresh segment after
    /// it. Returns the log; its last LSN is the end of the recovered
    /// prefix.
    pub(crate) fn open(
        shared: Arc<Shared<I>>,
        manifest: Option<Manifest>,
    ) -> std::result::Result<Self, FileError> {
        let dir = shared.log_dir();
        shared.create_dir(&dir)?;
        let seal = FileSeal::read(&shared)?;
        let rec = Self::recover(&shared, &dir, manifest.as_ref(), &seal)?;
        // A never-used trailing segment is reused; else a new number. The
        // segment an open starts is small: a shard restarted often costs
        // little disk per restart, one under load rolls into full-size
        // segments soon.
        let want = shared
            .options
            .segment_bytes
            .min(OPEN_SEGMENT_BYTES)
            .max(2 * HEADER_BYTES as u64);
        let (number, file, path, size) = match rec.spare {
            Some((n, file, path, size)) => {
                // Its header is zero, but a batch torn across a roll may have
                // left frames after it, which must never read as records
                // again: zero it unless it is all zeros already.
                let clean = size >= want
                    && file
                        .map()
                        .ctx("map segment", &path)?
                        .iter()
                        .all(|&b| b == 0);
                let size = size.max(want);
                if !clean {
                    Self::zero_fill(&shared, &file, &path, size)?;
                }
                (n, file, path, size)
            }
            None => {
                let n = rec.max_number + 1;
                let path = dir.join(segment_name(n));
                let file = Self::create_zeroed(&shared, &path, want)?;
                (n, file, path, want)
            }
        };
        let mut writer = LogWriter::new(
            shared.shard,
            number,
            rec.last + 1,
            shared.options.segment_bytes,
            now_ms(),
        );
        writer.limit_first_segment(size);
        // The new segment's header goes out on its own and is durable before
        // anything else changes.
        if let Some(batch) = writer.take() {
            for chunk in &batch.chunks {
                debug_assert_eq!(chunk.segment, number);
                file.write_at(chunk.offset, &chunk.bytes)
                    .ctx("write segment header", &path)?;
            }
            shared.sync(&file, &path)?;
        }
        shared.sync_dir(&dir)?;
        // The new segment carries the log from now on; only then may the
        // segments without records go.
        let manifest = Manifest {
            seq: manifest.map_or(1, |m| m.seq + 1),
            floor: manifest.map_or(1, |m| m.floor),
            carrier: number,
            carrier_base: rec.last + 1,
            carrier_size: size,
        };
        pair::write(
            &shared,
            &pair::paths(&dir, MANIFEST_STEM),
            &manifest.encode(),
        )?;
        // Segments without records (older opens' headers, a batch after a
        // hole) are no longer needed: the new header carries the last LSN.
        for dead in &rec.dead {
            shared.io.remove_file(dead).ctx("remove segment", dead)?;
        }
        if !rec.dead.is_empty() {
            shared.sync_dir(&dir)?;
        }
        let mut segments = rec.live;
        segments.insert(
            number,
            Segment {
                file: Arc::new(file),
                path,
                base: rec.last + 1,
                last: rec.last,
                end: HEADER_BYTES as u64,
                size,
                header_durable: true,
                recycled: false,
                recyclable: true,
                dir_unsynced: false,
            },
        );
        let first = segments
            .values()
            .find(|s| s.last >= s.base)
            .map_or(rec.last + 1, |s| s.base);
        Ok(Self {
            shared,
            writer,
            segments,
            ready: VecDeque::new(),
            preparing: None,
            durable: rec.last,
            first,
            latched: false,
            now_ms: now_ms(),
            id: NEXT_LOG_ID.fetch_add(1, Ordering::Relaxed),
            in_flight: None,
            manifest,
            unprepared_rolls: 0,
            seal: Arc::new(std::sync::Mutex::new(seal)),
            sealing: false,
        })
    }

    fn corrupt(path: &Path, what: &'static str, at: u64) -> FileError {
        FileError::Corrupt {
            file: path.display().to_string(),
            what,
            at,
        }
    }

    /// Scans the segments in `dir` and checks that they chain, and that
    /// they hold what `manifest` says the log must hold: segments up to its
    /// carrier are held to the strict rules (see [`crate::manifest`]); and
    /// that they reach the LSN `seal` records as durable, before anything
    /// is written (see [`crate::seal`]).
    fn recover(
        shared: &Shared<I>,
        dir: &Path,
        manifest: Option<&Manifest>,
        seal: &FileSeal<I>,
    ) -> std::result::Result<Recovered<I::File>, FileError> {
        let carrier = manifest.map_or(0, |m| m.carrier);
        let mut carrier_seen = false;
        let mut numbers: Vec<u64> = shared
            .io
            .list_dir(dir)
            .ctx("list directory", dir)?
            .iter()
            .filter_map(|n| parse_segment_name(n))
            .collect();
        numbers.sort_unstable();
        let mut rec = Recovered {
            live: BTreeMap::new(),
            max_number: numbers.last().copied().unwrap_or(0),
            spare: None,
            dead: Vec::new(),
            last: 0,
        };
        // The LSN the next segment must start at, once one was seen.
        let mut expected: Option<Lsn> = None;
        // Of each live segment: its last batch's start and its header flags.
        let mut batches: BTreeMap<u64, (Lsn, u32)> = BTreeMap::new();
        let count = numbers.len();
        for (i, &n) in numbers.iter().enumerate() {
            let path = dir.join(segment_name(n));
            let file = shared
                .io
                .open(&path, OpenMode::Existing)
                .ctx("open segment", &path)?;
            let size = file.size().ctx("stat segment", &path)?;
            let map = file.map().ctx("map segment", &path)?;
            // A recycled file whose new header never reached the disk still
            // names the older segment it was, and what follows that header
            // may be anything (old frames, part of the batch that was
            // rolling into it): it was never started as `n`, so its frames
            // are not read at all.
            let stale = map
                .get(..HEADER_BYTES)
                .and_then(|h| SegmentHeader::decode(h).ok().flatten())
                .is_some_and(|h| h.shard == shared.shard && h.segment < n);
            // Up to the carrier every segment was started durably and holds
            // only durable batches: nothing there may be read as a crash's
            // leftovers.
            let strict = n <= carrier;
            let scanned = match scan_segment(if stale { &[] } else { &map[..] }, |_, _| {}) {
                Ok(s) => s,
                // Shorter than a header block and not all zeros: a roll
                // that found no file ready created it without zero-filling
                // it ([`FileLog::unprepared`]), and the crash came before
                // the batch that rolled into it was durable (the file's
                // size becomes durable with that batch's sync). Past the
                // carrier no acknowledged record can be in it: it was never
                // started.
                Err(ScanError::Truncated { .. }) if !strict => None,
                Err(ScanError::LostRecord { offset, .. }) => {
                    return Err(Self::corrupt(&path, "acknowledged record damaged", offset));
                }
                Err(ScanError::UnsupportedFormat { found }) => {
                    return Err(FileError::Format {
                        file: path.display().to_string(),
                        found,
                        supported: fusee_core::segment::SEGMENT_FORMAT,
                    });
                }
                Err(_) => return Err(Self::corrupt(&path, "bad segment header", 0)),
            };
            drop(map);
            if strict && (stale || scanned.is_none()) {
                return Err(Self::corrupt(
                    &path,
                    "segment header zeroed or replaced, though the log manifest says it was started",
                    0,
                ));
            }
            let Some(s) = scanned else {
                if i + 1 == count {
                    // Prepared ahead and never used: reused by this open.
                    rec.spare = Some((n, file, path, size));
                } else {
                    // Rolled into by a batch that never became durable: its
                    // header was lost with it, and the segments after it may
                    // hold only the rest of that batch.
                    rec.dead.push(path);
                }
                continue;
            };
            if s.header.shard != shared.shard || s.header.segment != n {
                return Err(Self::corrupt(
                    &path,
                    "segment of another shard or number",
                    0,
                ));
            }
            let base = s.header.base_lsn;
            if let Some(m) = manifest.filter(|m| m.carrier == n) {
                carrier_seen = true;
                if base != m.carrier_base {
                    return Err(Self::corrupt(
                        &path,
                        "segment base LSN is not the one the log manifest records",
                        0,
                    ));
                }
                if size < m.carrier_size {
                    return Err(Self::corrupt(
                        &path,
                        "segment shorter than it was made (truncated)",
                        size,
                    ));
                }
            }
            match expected {
                Some(e) if base == e => {}
                Some(e) if base > e && s.header.flags & OPENED != 0 => {
                    // An open wrote this header knowing every LSN before
                    // its base was durable: those records are lost.
                    return Err(Self::corrupt(
                        &path,
                        "LSN gap before a segment an open started (lost records)",
                        0,
                    ));
                }
                Some(e) if base > e && s.max_batch_start <= e && !strict => {
                    // Rolled into by a batch that began at or before the
                    // first record missing before it: that batch never
                    // became durable (a durable batch has all its frames),
                    // so its records here lie after a hole.
                    rec.dead.push(path);
                    continue;
                }
                Some(e) if base > e => {
                    return Err(Self::corrupt(
                        &path,
                        "LSN gap before segment (lost records)",
                        0,
                    ));
                }
                Some(_) => return Err(Self::corrupt(&path, "segment overlaps the one before", 0)),
                None => {}
            }
            expected = Some(s.last_lsn + 1);
            if s.records == 0 {
                // An older open's header: the new segment will carry the LSN.
                rec.dead.push(path);
                continue;
            }
            // Made durable below, with the last batch: only that batch can
            // be in the page cache only, since a flush begins after the one
            // before it is durable.
            batches.insert(n, (s.max_batch_start, s.header.flags));
            rec.live.insert(
                n,
                Segment {
                    file: Arc::new(file),
                    path,
                    base,
                    last: s.last_lsn,
                    end: s.end,
                    size,
                    header_durable: true,
                    recycled: false,
                    recyclable: false,
                    dir_unsynced: false,
                },
            );
        }
        rec.last = expected.map_or(0, |e| e - 1);
        match manifest {
            Some(m) => Self::check_manifest(dir, m, carrier_seen, &rec)?,
            // A shard is opened whole, manifest written, before any record
            // is appended: records without a manifest mean it was lost.
            None if !rec.live.is_empty() => {
                return Err(Self::corrupt(
                    &dir.join(format!("{MANIFEST_STEM}-0")),
                    "log manifest missing, though segments hold records",
                    0,
                ));
            }
            None => {}
        }
        // Before the open writes anything to the log: a log that ends
        // before its seal lost acknowledged records (its newest batches
        // zeroed or cut off read like a torn tail), and nothing may be
        // cut, rewritten or started on top of that.
        seal.check(rec.last, shared.shard)?;
        Self::rewrite_last_batch(shared, &rec.live, &batches)?;
        Ok(rec)
    }

    /// The checks of a recovered log against its manifest that need the
    /// whole scan: the carrier was there, and nothing at or above the floor
    /// is missing at the front.
    fn check_manifest(
        dir: &Path,
        m: &Manifest,
        carrier_seen: bool,
        rec: &Recovered<I::File>,
    ) -> std::result::Result<(), FileError> {
        if m.carrier > 0 && !carrier_seen {
            return Err(Self::corrupt(
                &dir.join(segment_name(m.carrier)),
                "segment missing, though the log manifest says it was started",
                0,
            ));
        }
        let first = rec.live.values().next().map_or(rec.last + 1, |s| s.base);
        if m.floor <= rec.last && first > m.floor {
            let oldest = rec
                .live
                .values()
                .next()
                .map_or_else(|| dir.to_path_buf(), |s| s.path.clone());
            return Err(Self::corrupt(
                &oldest,
                "log segments missing before this one: records from the manifest's floor LSN on are gone",
                m.floor,
            ));
        }
        Ok(())
    }

    /// Writes the log's last batch again, then syncs it: a process that
    /// died before its flush returned may have left that batch in the page
    /// cache only, and it is durable from now on, as the recovered log says.
    /// A sync alone is not enough after a failed one: Linux keeps the pages a failed fsync
    /// covered but marks them written back, so an open in the same boot
    /// would read records a later sync never writes, and report them. Only
    /// the last batch can be in that state, since a failed flush latches
    /// the log and no batch follows it; it is one flush's bytes, in the
    /// segments it reached (with the header of a segment it rolled into).
    fn rewrite_last_batch(
        shared: &Shared<I>,
        live: &BTreeMap<u64, Segment<I::File>>,
        batches: &BTreeMap<u64, (Lsn, u32)>,
    ) -> std::result::Result<(), FileError> {
        let Some(&(start, _)) = live.keys().next_back().and_then(|n| batches.get(n)) else {
            return Ok(());
        };
        for (n, seg) in live.iter().filter(|(_, s)| s.last >= start) {
            let rolled = batches
                .get(n)
                .is_some_and(|&(_, flags)| flags & OPENED == 0);
            let bytes = {
                let map = seg.file.map().ctx("map segment", &seg.path)?;
                let end = (seg.end as usize).min(map.len());
                let from = if seg.base >= start && rolled {
                    0
                } else {
                    // The frames before the batch's first one here, walked
                    // by their lengths (the scan checked every one).
                    let mut at = HEADER_BYTES;
                    for _ in seg.base..start.max(seg.base) {
                        let len = map
                            .get(at..at + 4)
                            .and_then(|b| b.try_into().ok())
                            .map(u32::from_le_bytes)
                            .ok_or_else(|| {
                                Self::corrupt(&seg.path, "frame past the end", at as u64)
                            })?;
                        at += FRAME_HEADER + len as usize;
                    }
                    at
                };
                (from, map.get(from..end).unwrap_or_default().to_vec())
            };
            seg.file
                .write_at(bytes.0 as u64, &bytes.1)
                .ctx("rewrite last batch", &seg.path)?;
            shared.sync(&seg.file, &seg.path)?;
        }
        Ok(())
    }

    /// Creates a segment file of `size` zero bytes, durable with its
    /// directory entry.
    fn create_zeroed(
        shared: &Shared<I>,
        path: &Path,
        size: u64,
    ) -> std::result::Result<I::File, FileError> {
        let file = shared
            .io
            .open(path, OpenMode::CreateNew)
            .ctx("create segment", path)?;
        Self::zero_fill(shared, &file, path, size)?;
        if let Some(dir) = path.parent() {
            shared.sync_dir(dir)?;
        }
        Ok(file)
    }

    /// Writes zeros over the first `size` bytes of `file` and syncs it, so
    /// later writes there change data only.
    fn zero_fill(
        shared: &Shared<I>,
        file: &I::File,
        path: &Path,
        size: u64,
    ) -> std::result::Result<(), FileError> {
        let zeros = vec![0u8; ZERO_CHUNK.min(size as usize)];
        let mut at = 0u64;
        while at < size {
            // A background preparation stops once the storage is closed: the
            // directory may belong to another process from then on.
            if shared.closed.load(Ordering::Acquire) {
                return Err(FileError::Io {
                    op: "zero-fill segment",
                    path: path.to_path_buf(),
                    error: std::io::Error::other("the storage was closed"),
                });
            }
            let n = (size - at).min(zeros.len() as u64) as usize;
            file.write_at(at, &zeros[..n])
                .ctx("zero-fill segment", path)?;
            at += n as u64;
        }
        shared.sync(file, path)
    }

    /// Makes the file for the segment after the current one ready, so the
    /// next roll's flush writes data only: a recycled or earlier prepared
    /// file is renamed to its number, else a new one is zero-filled.
    fn prepare_next(&mut self) -> std::result::Result<(), FileError> {
        let next = self.next_file();
        let path = self.shared.log_dir().join(segment_name(next));
        debug_assert!(
            self.preparing
                .as_ref()
                .map(|p| p.number)
                .into_iter()
                .chain(self.ready.front().map(|p| p.number))
                .min()
                .is_none_or(|n| n == next),
            "files are made ready in the order the rolls take them"
        );
        if self.ready.is_empty() && self.preparing.is_none() {
            let size = if self.writer.segment() >= next {
                // The writer already rolled into it (in memory): the file
                // must hold what that roll allows.
                self.writer.limit().max(2 * HEADER_BYTES as u64)
            } else {
                // Sizes ramp up from the small segment an open starts,
                // doubling at each roll: a shard that writes a few MiB
                // zero-fills a few MiB, not a full segment (64 MiB by
                // default, a quarter of a second of disk and CPU that
                // competes with the flushes of a busy start).
                let size = self
                    .writer
                    .limit()
                    .saturating_mul(2)
                    .min(self.segment_size())
                    .max(2 * HEADER_BYTES as u64);
                self.writer.limit_next_segment(size);
                size
            };
            if self.shared.io.background() {
                // Zero-filling a segment writes and syncs as many bytes as
                // the segment will hold (tens to hundreds of ms here): off
                // the flush path, it costs only disk bandwidth. The file is
                // created here, so a roll that comes first finds it under
                // its name and can renumber it.
                let file = self
                    .shared
                    .io
                    .open(&path, OpenMode::CreateNew)
                    .ctx("create segment", &path)?;
                let shared = Arc::clone(&self.shared);
                let job_path = path.clone();
                let spawned = std::thread::Builder::new()
                    .name("fusee-segment-prepare".into())
                    .spawn(move || {
                        Self::zero_fill(&shared, &file, &job_path, size)?;
                        if let Some(dir) = job_path.parent() {
                            shared.sync_dir(dir)?;
                        }
                        Ok(file)
                    });
                if let Ok(work) = spawned {
                    self.preparing = Some(Preparing {
                        number: next,
                        path,
                        size,
                        work,
                    });
                    return Ok(());
                }
                // No thread: the file (dropped with the closure) is
                // zero-filled here instead.
                let file = self
                    .shared
                    .io
                    .open(&path, OpenMode::Existing)
                    .ctx("open segment", &path)?;
                Self::zero_fill(&self.shared, &file, &path, size)?;
                self.shared.sync_dir(&self.shared.log_dir())?;
                self.ready.push_back(Prepared {
                    number: next,
                    file,
                    size,
                    recycled: false,
                });
                return Ok(());
            }
            let file = Self::create_zeroed(&self.shared, &path, size)?;
            self.ready.push_back(Prepared {
                number: next,
                file,
                size,
                recycled: false,
            });
        }
        Ok(())
    }

    /// Takes the background preparation of segment `n`, if that is the one
    /// running and it has finished, and puts its file in `ready`. Never
    /// waits for it: a roll that finds it unfinished starts a small
    /// segment instead ([`FileLog::unprepared`]).
    fn finish_preparing(&mut self, n: u64) -> std::result::Result<(), FileError> {
        let Some(p) = self
            .preparing
            .take_if(|p| p.number == n && p.work.is_finished())
        else {
            return Ok(());
        };
        let file = p.work.join().map_err(|_| {
            Self::corrupt(
                &self.shared.log_dir().join(segment_name(n)),
                "segment preparation panicked",
                0,
            )
        })??;
        // Recycled files that arrived meanwhile were numbered after it.
        debug_assert!(self.ready.iter().all(|r| r.number > p.number));
        self.ready.push_front(Prepared {
            number: p.number,
            file,
            size: p.size,
            recycled: false,
        });
        Ok(())
    }

    /// The number of the next segment file a roll will need: the one after
    /// the newest file. (The writer may already have rolled into it in
    /// memory, with the batch not yet begun.) Every file made ready is
    /// numbered from here on, so the rolls take them in order.
    fn next_file(&self) -> u64 {
        self.segments
            .keys()
            .next_back()
            .map_or(self.writer.segment(), |n| n + 1)
    }

    /// The size of every segment file but one made for an oversized record.
    fn segment_size(&self) -> u64 {
        self.shared
            .options
            .segment_bytes
            .max(2 * HEADER_BYTES as u64)
    }

    /// The file of segment `n` for a roll that found none ready (the
    /// preparation of `n` still running, or none made): the roll does not
    /// wait for a zero-fill. A preparation of `n` still running is renamed
    /// to the number after every file made ready (it keeps running and the
    /// next roll takes it), and `n` becomes a new file of the open
    /// segment's size ([`OPEN_SEGMENT_BYTES`], or `end` if more) whose
    /// blocks are not written yet: the flushes into it also write the
    /// metadata that allocates them, which `fdatasync` makes durable with
    /// their data, and the unwritten blocks read as zeros, as a zero-filled
    /// segment's do, so recovery reads it the same. Its directory entry
    /// (and the rename) become durable with the first flush into it
    /// ([`Segment::dir_unsynced`]). The writer is capped at the file's size
    /// when `n` is its current segment, so the next roll comes soon and
    /// can take the prepared file.
    fn unprepared(
        &mut self,
        n: u64,
        path: &Path,
        end: u64,
    ) -> std::result::Result<(I::File, u64), FileError> {
        self.unprepared_rolls += 1;
        let after = self.ready.back().map_or(n + 1, |r| r.number.max(n) + 1);
        let mut next_size = None;
        if let Some(p) = self.preparing.as_mut().filter(|p| p.number == n) {
            let to = self.shared.log_dir().join(segment_name(after));
            self.shared
                .io
                .rename(&p.path, &to)
                .ctx("renumber segment being prepared", &p.path)?;
            p.number = after;
            p.path = to;
            next_size = Some(p.size).filter(|_| after == n + 1);
        }
        let size = self
            .segment_size()
            .min(OPEN_SEGMENT_BYTES)
            .max(2 * HEADER_BYTES as u64)
            .max(end);
        let file = self
            .shared
            .io
            .open(path, OpenMode::CreateNew)
            .ctx("create segment", path)?;
        file.set_len(size).ctx("size segment", path)?;
        if self.writer.segment() == n {
            self.writer.limit_first_segment(size);
            if let Some(size) = next_size {
                // The roll after this one takes the renumbered file: it
                // holds what its preparation was sized for.
                self.writer.limit_next_segment(size);
            }
        }
        Ok((file, size))
    }

    /// Rolls that found no file ready and started a small segment without
    /// zero-filling it rather than wait (see `FileLog::unprepared`): the
    /// first roll after an open under a heavy load, when the next
    /// full-size segment is still being zero-filled, or a roll on a system
    /// that could not start the preparation's thread.
    pub fn unprepared_rolls(&self) -> u64 {
        self.unprepared_rolls
    }

    /// The open file of segment `n`, created (or taken from the prepared
    /// one) for a roll, at least `end` bytes large.
    fn segment_for(
        &mut self,
        n: u64,
        base: Lsn,
        end: u64,
    ) -> std::result::Result<&mut Segment<I::File>, FileError> {
        if !self.segments.contains_key(&n) {
            let path = self.shared.log_dir().join(segment_name(n));
            self.finish_preparing(n)?;
            let ready = self.ready.front().is_some_and(|p| p.number == n);
            let (file, size, recycled, dir_unsynced) = match self.ready.pop_front() {
                Some(p) if ready => (p.file, p.size, p.recycled, false),
                other => {
                    if let Some(p) = other {
                        self.ready.push_front(p);
                    }
                    let (file, size) = self.unprepared(n, &path, end)?;
                    (file, size, false, true)
                }
            };
            self.segments.insert(
                n,
                Segment {
                    file: Arc::new(file),
                    path,
                    base,
                    last: base - 1,
                    end: 0,
                    size,
                    header_durable: false,
                    recycled,
                    recyclable: true,
                    dir_unsynced,
                },
            );
        }
        let seg = self
            .segments
            .get_mut(&n)
            .ok_or_else(|| Self::corrupt(Path::new("log"), "segment vanished", n))?;
        if end > seg.size {
            // A record larger than the prepared size: grow the file (this
            // flush then also writes metadata).
            seg.file.set_len(end).ctx("grow segment", &seg.path)?;
            seg.size = end;
        }
        Ok(seg)
    }

    /// Takes the pending batch and opens (or creates) the files it writes:
    /// the part of a flush that touches the log's own state. `None` when
    /// nothing is pending.
    fn begin_batch(&mut self) -> std::result::Result<Option<FileFlush<I>>, FileError> {
        let Some(batch) = self.writer.take() else {
            return Ok(None);
        };
        let mut touched: Vec<u64> = Vec::new();
        let mut writes = Vec::with_capacity(batch.chunks.len());
        let mut syncs = Vec::new();
        let mut sync_dir = None;
        for chunk in &batch.chunks {
            let end = chunk.offset + chunk.bytes.len() as u64;
            let base = if chunk.offset == 0 {
                // A rolled segment starts with its header, which names it.
                SegmentHeader::decode(&chunk.bytes)
                    .ok()
                    .flatten()
                    .map_or(batch.first_lsn, |h| h.base_lsn)
            } else {
                self.segments
                    .get(&chunk.segment)
                    .map_or(batch.first_lsn, |s| s.base)
            };
            let seg = self.segment_for(chunk.segment, base, end)?;
            let zero_to = if seg.recycled {
                clean_end(end, seg.size)
            } else {
                end
            };
            writes.push((Arc::clone(&seg.file), seg.path.clone(), zero_to));
            if seg.dir_unsynced {
                sync_dir = seg.path.parent().map(Path::to_path_buf);
            }
            if touched.last() != Some(&chunk.segment) {
                touched.push(chunk.segment);
                syncs.push((Arc::clone(&seg.file), seg.path.clone()));
            }
        }
        let batch = Arc::new(batch);
        self.in_flight = Some(InFlight {
            batch: Arc::clone(&batch),
            touched,
        });
        Ok(Some(FileFlush {
            shared: Arc::clone(&self.shared),
            batch,
            writes,
            syncs,
            sync_dir,
        }))
    }

    /// Accounts for the flush in flight once its I/O succeeded: its
    /// segments' headers and records are durable.
    fn end_batch(&mut self) -> std::result::Result<(), FileError> {
        let Some(InFlight { batch, touched }) = self.in_flight.take() else {
            return Ok(());
        };
        // Assign each segment its last record: the batch's records fill the
        // touched segments in order.
        let last_segment = touched.last().copied().unwrap_or(self.writer.segment());
        for n in &touched {
            let last = if *n == last_segment {
                Some(batch.last_lsn)
            } else {
                self.next_base(*n).map(|b| b - 1)
            };
            if let Some(seg) = self.segments.get_mut(n) {
                seg.header_durable = true;
                seg.dir_unsynced = false;
                if let Some(last) = last {
                    seg.last = last;
                }
            }
        }
        for chunk in &batch.chunks {
            if let Some(seg) = self.segments.get_mut(&chunk.segment) {
                seg.end = chunk.offset + chunk.bytes.len() as u64;
            }
        }
        // A segment this flush rolled into now carries the log: the
        // manifest says so before the flush is reported durable.
        if last_segment > self.manifest.carrier
            && let Some(seg) = self.segments.get(&last_segment)
        {
            let next = Manifest {
                seq: self.manifest.seq + 1,
                carrier: last_segment,
                carrier_base: seg.base,
                carrier_size: seg.size,
                ..self.manifest
            };
            self.write_manifest(next)?;
        }
        self.durable = batch.last_lsn;
        // The ticket's work is gone, so the batch is ours again.
        if let Ok(batch) = Arc::try_unwrap(batch) {
            self.writer.recycle(batch);
        }
        // Once the current segment is half full, the next one is prepared,
        // so the flush that rolls into it writes data only. (An open does
        // not prepare: it reuses a prepared segment it finds.)
        if self.writer.offset() > self.writer.limit() / 2 {
            self.prepare_next()?;
        }
        Ok(())
    }

    /// Removes segment `n` from the log for good: recycled as the next
    /// segment to roll into when it may be (renamed: its blocks are
    /// allocated and written, so the rolls into it write no metadata and no
    /// zeros), deleted otherwise; either way durable in the directory before
    /// this returns.
    fn drop_segment(&mut self, n: u64) -> std::result::Result<(), FileError> {
        let Some(seg) = self.segments.remove(&n) else {
            return Ok(());
        };
        let dir = self.shared.log_dir();
        let ready = self.ready.len() + usize::from(self.preparing.is_some());
        let recycle = seg.recyclable && ready < READY_MAX && seg.size == self.segment_size();
        match Arc::try_unwrap(seg.file) {
            Ok(file) if recycle => {
                let number = self
                    .preparing
                    .as_ref()
                    .map(|p| p.number)
                    .or(self.ready.back().map(|p| p.number))
                    .map_or(self.next_file(), |n| n + 1);
                let to = dir.join(segment_name(number));
                self.shared
                    .io
                    .rename(&seg.path, &to)
                    .ctx("recycle segment", &seg.path)?;
                self.shared.sync_dir(&dir)?;
                self.ready.push_back(Prepared {
                    number,
                    file,
                    size: seg.size,
                    recycled: true,
                });
            }
            _ => {
                self.shared
                    .io
                    .remove_file(&seg.path)
                    .ctx("remove segment", &seg.path)?;
                self.shared.sync_dir(&dir)?;
            }
        }
        Ok(())
    }

    /// Writes `next` as the log manifest (both files) and keeps it.
    fn write_manifest(&mut self, next: Manifest) -> std::result::Result<(), FileError> {
        let paths = pair::paths(&self.shared.log_dir(), MANIFEST_STEM);
        pair::write(&self.shared, &paths, &next.encode())?;
        self.manifest = next;
        Ok(())
    }

    /// The checks every writing call makes first.
    fn check_writable(&self) -> Result<()> {
        self.shared.check_open("log")?;
        if self.latched {
            return Err(StorageError::Latched { what: "log" });
        }
        Ok(())
    }

    /// The base LSN of the segment after `n`, if one is open.
    fn next_base(&self, n: u64) -> Option<Lsn> {
        self.segments.range(n + 1..).next().map(|(_, s)| s.base)
    }
}

impl<I: Io> LogStore for FileLog<I> {
    fn append(&mut self, lsn: Lsn, record: &[u8]) -> Result<()> {
        self.check_writable()?;
        check_log_append(self.writer.last_lsn(), lsn, record)?;
        let got = self
            .writer
            .append(record, self.now_ms)
            .map_err(|e| StorageError::TooLarge {
                what: e.what,
                len: e.len,
                max: e.max,
            })?;
        debug_assert_eq!(got, lsn);
        Ok(())
    }

    fn flush(&mut self) -> Result<Lsn> {
        let ticket = self.begin_flush()?;
        self.finish_flush(ticket)
    }

    fn begin_flush(&mut self) -> Result<FlushTicket> {
        self.check_writable()?;
        if self.in_flight.is_some() {
            return Err(StorageError::Misuse {
                call: "begin_flush",
                why: "a flush is already in flight: finish it first",
            });
        }
        match self.begin_batch() {
            Ok(Some(work)) => {
                let last = work.batch.last_lsn;
                Ok(FlushTicket::new(self.id, last, Box::new(work)))
            }
            Ok(None) => Ok(FlushTicket::done(self.durable)),
            Err(e) => {
                // A segment file could not be made ready: what it holds is
                // unknown.
                self.latched = true;
                Err(e.into())
            }
        }
    }

    fn finish_flush(&mut self, ticket: FlushTicket) -> Result<Lsn> {
        self.shared.check_open("log")?;
        let ours = ticket.log() == self.id && self.in_flight.is_some();
        let nothing = ticket.log() == 0 && ticket.has_run();
        if !ours && !nothing {
            return Err(StorageError::Misuse {
                call: "finish_flush",
                why: "the ticket is not this log's flush in flight",
            });
        }
        if nothing {
            // Nothing was pending when it began; a failed flush since then
            // latched the log.
            self.check_writable()?;
            return Ok(self.durable);
        }
        let outcome = ticket.finish().and_then(|_| {
            if self.latched {
                return Err(StorageError::Latched { what: "log" });
            }
            self.end_batch().map_err(StorageError::from)
        });
        if let Err(e) = outcome {
            // What the failed write or sync covered is in an unknown state.
            self.in_flight = None;
            self.latched = true;
            return Err(e);
        }
        self.now_ms = now_ms();
        Ok(self.durable)
    }

    fn begin_seal(&mut self) -> Result<SealTicket> {
        self.check_writable()?;
        if self.sealing {
            return Err(StorageError::Misuse {
                call: "begin_seal",
                why: "a seal is already in flight: finish it first",
            });
        }
        self.sealing = true;
        Ok(SealTicket::new(
            self.id,
            self.durable,
            Box::new(SealWork {
                shared: Arc::clone(&self.shared),
                seal: Arc::clone(&self.seal),
                lsn: self.durable,
            }),
        ))
    }

    fn finish_seal(&mut self, ticket: SealTicket) -> Result<Lsn> {
        if ticket.log() != self.id || !self.sealing {
            return Err(StorageError::Misuse {
                call: "finish_seal",
                why: "the ticket is not this log's seal in flight",
            });
        }
        self.sealing = false;
        ticket.finish().inspect_err(|_| {
            // A failed sync on the shard's disk: later ones cannot be
            // trusted either (the seal file keeps its newest record).
            self.latched = true;
        })
    }

    fn read(&mut self, after: Lsn, visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>) -> Result<Lsn> {
        self.shared.check_open("log")?;
        let last = self.writer.last_lsn();
        if after > last {
            return Err(StorageError::BeyondEnd { after, last });
        }
        if after.saturating_add(1) < self.first {
            return Err(StorageError::Trimmed {
                first_kept: self.first,
            });
        }
        let mut failed: Option<StorageError> = None;
        for seg in self
            .segments
            .values()
            .filter(|s| s.last > after && s.last >= s.base)
        {
            let map = seg
                .file
                .map()
                .map_err(|e| StorageError::io(format!("map {}", seg.path.display()), e))?;
            let mut seen = seg.base;
            let upto = seg.last;
            let flushed = map.get(..seg.end as usize).unwrap_or(&map);
            let scanned = scan_segment(flushed, |lsn, body| {
                seen = lsn;
                if failed.is_none()
                    && lsn > after
                    && lsn <= upto
                    && let Err(e) = visit(lsn, body)
                {
                    failed = Some(e);
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
            let reached = matches!(scanned, Ok(Some(_))) && seen >= upto;
            if !reached {
                return Err(StorageError::from(Self::corrupt(
                    &seg.path,
                    "flushed records no longer read back",
                    seen,
                )));
            }
        }
        let in_flight = self.in_flight.iter().flat_map(|f| f.batch.frames());
        for (lsn, body) in in_flight.chain(self.writer.pending()) {
            if lsn > after {
                visit(lsn, body)?;
            }
        }
        Ok(last)
    }

    fn discard_through(&mut self, lsn: Lsn) -> Result<()> {
        self.check_writable()?;
        if lsn > self.durable {
            return Err(StorageError::Misuse {
                call: "discard_through",
                why: "records after the durable LSN cannot be discarded",
            });
        }
        // The newest segment with a durable header carries the last LSN
        // across a crash (the writer may have rolled past it in memory): it
        // and everything after it stay.
        let carrier = self
            .segments
            .iter()
            .filter(|(_, s)| s.header_durable)
            .map(|(n, _)| *n)
            .max()
            .unwrap_or(0);
        let doomed: Vec<u64> = self
            .segments
            .iter()
            .filter(|(n, s)| **n < carrier && s.last <= lsn)
            .map(|(n, _)| *n)
            .collect();
        // The manifest's floor rises first: a segment missing below it was
        // discarded, one missing at or above it was lost.
        let floor = self
            .segments
            .iter()
            .filter(|(n, s)| !doomed.contains(n) && s.last >= s.base)
            .map(|(_, s)| s.base)
            .min()
            .unwrap_or(self.durable + 1);
        if !doomed.is_empty() && floor > self.manifest.floor {
            let next = Manifest {
                seq: self.manifest.seq + 1,
                floor,
                ..self.manifest
            };
            if let Err(e) = self.write_manifest(next) {
                self.latched = true;
                return Err(e.into());
            }
        }
        // Oldest first, each deletion durable before the next: a crash never
        // leaves an older segment without the one after it (a hole).
        for n in doomed {
            if let Err(e) = self.drop_segment(n) {
                // The log no longer knows what its directory holds (a
                // segment forgotten but still there, a rename not durable):
                // nothing more until a reopen reads the directory again.
                self.latched = true;
                return Err(e.into());
            }
        }
        self.first = self
            .segments
            .values()
            .find(|s| s.last >= s.base)
            .map_or(self.writer.next_lsn(), |s| s.base)
            .max(self.first);
        Ok(())
    }

    fn first_lsn(&self) -> Lsn {
        self.first
    }

    fn last_lsn(&self) -> Lsn {
        self.writer.last_lsn()
    }

    fn durable_lsn(&self) -> Lsn {
        self.durable
    }
}

impl<I: Io> Drop for FileLog<I> {
    fn drop(&mut self) {
        // A preparation still running would create its file after the log
        // is gone, possibly after the storage's lock was released: wait.
        if let Some(p) = self.preparing.take() {
            let _ = p.work.join();
        }
    }
}

impl<I: Io> std::fmt::Debug for FileLog<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileLog")
            .field("dir", &self.shared.dir)
            .finish_non_exhaustive()
    }
}
