//! The segment format end to end: `LogWriter` output scanned back, every
//! truncation and every single-byte flip of a small segment classified.

use fusee_core::segment::{
    Batch, FRAME_HEADER, HEADER_BYTES, LogWriter, MAX_RECORD_BODY, Progress, SEGMENT_FORMAT,
    ScanError, Scanned, SegmentHeader, SegmentScanner, Tail, scan_segment,
};

const BLOCK: usize = 4096;
/// Bytes of the header block before its zero padding: fields and crc.
const HEADER_FIELDS: usize = 48;

/// A record as written: its LSN, body, frame offset and flush batch index.
#[derive(Clone, Debug)]
struct Written {
    lsn: u64,
    body: Vec<u8>,
    offset: usize,
    batch: usize,
}

/// A segment image written by `LogWriter` in several batches.
struct Image {
    bytes: Vec<u8>,
    records: Vec<Written>,
    /// Offset just past the last frame.
    used: usize,
    batches: usize,
}

fn apply(image: &mut [u8], batch: &Batch, segment: u64) {
    for c in &batch.chunks {
        assert_eq!(c.segment, segment, "test images hold one segment");
        let at = c.offset as usize;
        image[at..at + c.bytes.len()].copy_from_slice(&c.bytes);
    }
}

/// Writes `batches` batches of random bodies (0..max_body bytes) into one
/// segment of `segment_bytes`, starting at LSN `base`.
fn write_image(rng: &mut fastrand::Rng, base: u64, batches: usize, max_body: usize) -> Image {
    let segment_bytes = 64 * 1024;
    let mut w = LogWriter::new(7, 3, base, segment_bytes, 1000);
    let mut bytes = vec![0u8; segment_bytes as usize];
    let header = w.take().expect("the open's header batch");
    assert_eq!(header.records(), 0);
    apply(&mut bytes, &header, 3);
    let mut records = Vec::new();
    let mut offset = HEADER_BYTES;
    for b in 0..batches {
        for _ in 0..rng.usize(1..=4) {
            let len = rng.usize(0..max_body);
            let body: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            let lsn = w.append(&body, 1000).expect("fits");
            records.push(Written {
                lsn,
                offset,
                batch: b,
                body,
            });
            offset += FRAME_HEADER + len;
        }
        let batch = w.take().expect("records pending");
        assert_eq!(batch.chunks.len(), 1, "one segment, one chunk per batch");
        apply(&mut bytes, &batch, 3);
    }
    assert_eq!(w.offset() as usize, offset);
    Image {
        bytes,
        records,
        used: offset,
        batches,
    }
}

/// Scans `bytes` whole, collecting the visited records.
/// A scan's result and the records it visited.
type ScanResult = (Result<Option<Scanned>, ScanError>, Vec<(u64, Vec<u8>)>);

fn scan(bytes: &[u8]) -> ScanResult {
    let mut seen = Vec::new();
    let r = scan_segment(bytes, |lsn, body| seen.push((lsn, body.to_vec())));
    (r, seen)
}

/// The visited records are exactly the first `k` written, unchanged.
fn assert_prefix(seen: &[(u64, Vec<u8>)], written: &[Written], k: usize, ctx: &str) {
    assert_eq!(seen.len(), k, "{ctx}: record count");
    for (s, w) in seen.iter().zip(written) {
        assert_eq!(s.0, w.lsn, "{ctx}: lsn");
        assert_eq!(s.1, w.body, "{ctx}: body of LSN {}", w.lsn);
    }
}

/// The expected result when everything from `t` on is missing (cut off or
/// zero): the frames ending by `t` are valid; the end is clean if the
/// bytes of the next frame before `t` are zero, torn otherwise.
fn check_cut(img: &Image, cut: &[u8], t: usize, ctx: &str) {
    let (r, seen) = scan(cut);
    if t < HEADER_BYTES && cut.len() < HEADER_BYTES {
        match r {
            Ok(None) => assert_eq!(t, 0, "{ctx}: only an empty file is never-started"),
            Err(ScanError::Truncated { .. }) => assert!(t > 0, "{ctx}"),
            other => panic!("{ctx}: {other:?}"),
        }
        return;
    }
    if t < HEADER_FIELDS {
        // Zero-filled after a partial header write: the block is neither
        // valid nor zero (past its fields, the header block is zero anyway).
        assert!(
            matches!(r, Err(ScanError::BadHeader { .. }) | Ok(None)),
            "{ctx}: {r:?}"
        );
        assert_eq!(matches!(r, Ok(None)), t == 0, "{ctx}");
        return;
    }
    let t = t.max(HEADER_BYTES);
    let k = img
        .records
        .iter()
        .take_while(|w| w.offset + FRAME_HEADER + w.body.len() <= t)
        .count();
    let p = img.records.get(k).map_or(img.used, |w| w.offset);
    let s = r
        .unwrap_or_else(|e| panic!("{ctx}: {e}"))
        .unwrap_or_else(|| panic!("{ctx}: header lost"));
    assert_prefix(&seen, &img.records, k, ctx);
    assert_eq!(s.end as usize, p, "{ctx}: end");
    assert_eq!(s.records as usize, k, "{ctx}");
    let clean = cut[p..t.min(cut.len())].iter().all(|&b| b == 0);
    let want = if clean {
        Tail::Clean
    } else {
        Tail::Torn { at: p as u64 }
    };
    assert_eq!(s.tail, want, "{ctx}");
    let last = if k == 0 {
        s.header.base_lsn - 1
    } else {
        img.records[k - 1].lsn
    };
    assert_eq!(s.last_lsn, last, "{ctx}");
}

fn exhaustive(seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let base = rng.u64(1..1 << 40);
    let batches = rng.usize(3..=5);
    let img = write_image(&mut rng, base, batches, 600);
    let ctx = |what: &str, at: usize| format!("seed {seed}: {what} at {at}");

    // The intact image.
    let (r, seen) = scan(&img.bytes);
    let s = r.expect("intact").expect("started");
    assert_eq!(s.tail, Tail::Clean, "seed {seed}");
    assert_prefix(&seen, &img.records, img.records.len(), "intact");
    let last_batch_first = img
        .records
        .iter()
        .find(|w| w.batch == img.batches - 1)
        .expect("every batch has records");
    assert_eq!(s.max_batch_start, last_batch_first.lsn, "seed {seed}");

    // Every truncation: the file cut short, and the rest left zero.
    let window = img.used.next_multiple_of(BLOCK) + BLOCK;
    let mut zeroed = img.bytes.clone();
    for t in (0..=window).rev() {
        check_cut(&img, &img.bytes[..t], t, &ctx("cut", t));
        zeroed[t..].fill(0);
        check_cut(&img, &zeroed, t, &ctx("zero-filled", t));
    }

    // Every single-byte flip.
    let mut flipped = img.bytes.clone();
    for i in 0..window + BLOCK {
        let mask = rng.u8(1..);
        flipped[i] ^= mask;
        let (r, seen) = scan(&flipped);
        let c = ctx(&format!("flip {mask:#04x}"), i);
        if i < HEADER_BYTES {
            assert!(
                matches!(
                    r,
                    Err(ScanError::BadHeader { .. } | ScanError::UnsupportedFormat { .. })
                ),
                "{c}: {r:?}"
            );
        } else if let Some(k) = img
            .records
            .iter()
            .position(|w| i < w.offset + FRAME_HEADER + w.body.len())
        {
            let w = &img.records[k];
            if w.batch == img.batches - 1 {
                let s = r.unwrap_or_else(|e| panic!("{c}: {e}")).expect("started");
                assert_eq!(
                    s.tail,
                    Tail::Torn {
                        at: w.offset as u64
                    },
                    "{c}"
                );
                assert_prefix(&seen, &img.records, k, &c);
            } else {
                assert_eq!(
                    r.map(|_| ()).unwrap_err(),
                    ScanError::LostRecord {
                        offset: w.offset as u64,
                        lsn: w.lsn,
                        reason: "bad frame followed by a later flush batch",
                    },
                    "{c}"
                );
                assert_prefix(&seen, &img.records, k, &c);
            }
        } else {
            let s = r.unwrap_or_else(|e| panic!("{c}: {e}")).expect("started");
            assert_prefix(&seen, &img.records, img.records.len(), &c);
            let want = if i < window {
                Tail::Torn {
                    at: img.used as u64,
                }
            } else {
                Tail::Clean
            };
            assert_eq!(s.tail, want, "{c}");
        }
        flipped[i] ^= mask;
    }
}

/// Every truncation and every byte flip of small segments. Seeds come from
/// `FUSEE_SEGMENT_EXHAUSTIVE` (how many, default 4).
#[test]
fn every_truncation_and_flip_is_classified() {
    let seeds: u64 = std::env::var("FUSEE_SEGMENT_EXHAUSTIVE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    for seed in 0..seeds {
        exhaustive(seed);
    }
}

/// Feeding growing prefixes visits the same records and ends the same way
/// as scanning the whole image, and never reads far past the valid data.
#[test]
fn growing_prefix_matches_whole_scan() {
    for seed in 0..200u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let batches = rng.usize(1..=6);
        let mut img = write_image(&mut rng, 1, batches, 3000);
        let mode = rng.u8(0..3);
        match mode {
            0 => {}
            1 => {
                let i = rng.usize(HEADER_BYTES..img.used + 64);
                img.bytes[i] ^= rng.u8(1..);
            }
            _ => {
                let t = rng.usize(HEADER_BYTES..img.used);
                img.bytes[t..].fill(0);
            }
        }
        let (whole, seen_whole) = scan(&img.bytes);
        let file_len = img.bytes.len() as u64;
        let mut seen = Vec::new();
        let mut len = HEADER_BYTES + rng.usize(0..100);
        let mut scanner = SegmentScanner::start(&img.bytes[..len], file_len)
            .expect("header")
            .expect("started");
        let got = loop {
            match scanner.advance(&img.bytes[..len], |l, b| seen.push((l, b.to_vec()))) {
                Ok(Progress::Done(s)) => break Ok(Some(s)),
                Ok(Progress::NeedMore { want }) => {
                    assert!(want as usize > len && want <= file_len, "seed {seed}");
                    len = (want as usize + rng.usize(0..500)).min(img.bytes.len());
                }
                Err(e) => break Err(e),
            }
        };
        assert_eq!(got, whole, "seed {seed}");
        assert_eq!(seen, seen_whole, "seed {seed}");
        if mode != 1 {
            // Without a damaged length field, the scan reads the written
            // frames plus at most the zero block after them.
            let bound = img.used.next_multiple_of(BLOCK) + BLOCK + 500;
            assert!(
                len <= bound,
                "seed {seed}: read {len} bytes, used {}",
                img.used
            );
        }
    }
}

/// Pages of the last batch written out of order: any missing pages cut the
/// segment at or before the first one, never after it.
#[test]
fn missing_pages_of_the_last_batch_are_a_torn_tail() {
    for seed in 0..300u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut img = write_image(&mut rng, 1, 2, 4000);
        let last_first = img
            .records
            .iter()
            .position(|w| w.batch == 1)
            .expect("batch");
        let from = img.records[last_first].offset;
        let first_page = from / BLOCK;
        let last_page = (img.used - 1) / BLOCK;
        let mut hole_start = usize::MAX;
        for page in first_page..=last_page {
            if rng.bool() {
                // The pages of the previous batch are durable: only zero the
                // part of the page the last batch wrote.
                let a = (page * BLOCK).max(from);
                img.bytes[a..(page + 1) * BLOCK].fill(0);
                hole_start = hole_start.min(a);
            }
        }
        let (r, seen) = scan(&img.bytes);
        let s = r
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"))
            .expect("started");
        let k = img
            .records
            .iter()
            .take_while(|w| w.offset + FRAME_HEADER + w.body.len() <= hole_start)
            .count();
        assert!(s.records as usize <= k.max(last_first), "seed {seed}");
        assert!(s.records as usize >= last_first, "seed {seed}");
        assert_prefix(
            &seen,
            &img.records,
            s.records as usize,
            &format!("seed {seed}"),
        );
        if s.records as usize == img.records.len() {
            assert_eq!(s.tail, Tail::Clean, "seed {seed}");
        }
    }
}

fn frame(lsn: u64, batch: u32, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(&lsn.to_le_bytes());
    f.extend_from_slice(&batch.to_le_bytes());
    f.extend_from_slice(body);
    let crc = fusee_core::wire::checksum32(&f[8..]);
    f[4..8].copy_from_slice(&crc.to_le_bytes());
    f
}

fn segment_of(base: u64, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut img = SegmentHeader {
        format: SEGMENT_FORMAT,
        shard: 0,
        segment: 1,
        base_lsn: base,
        created_ms: 5,
        flags: 0,
    }
    .encode();
    for f in frames {
        img.extend_from_slice(f);
    }
    img.resize(4 * BLOCK, 0);
    img
}

#[test]
fn lsn_gaps_and_inconsistent_batches_are_lost_records() {
    let lost = |img: &[u8]| match scan(img).0 {
        Err(ScanError::LostRecord { offset, lsn, .. }) => (offset, lsn),
        other => panic!("{other:?}"),
    };
    let second = (HEADER_BYTES + FRAME_HEADER + 3) as u64;
    // A skipped LSN.
    assert_eq!(
        lost(&segment_of(10, &[frame(10, 0, b"abc"), frame(12, 0, b"x")])),
        (second, 11)
    );
    // A repeated LSN.
    assert_eq!(
        lost(&segment_of(10, &[frame(10, 0, b"abc"), frame(10, 0, b"x")])),
        (second, 11)
    );
    // The first frame is not the base LSN.
    assert_eq!(
        lost(&segment_of(10, &[frame(11, 0, b"abc")])),
        (HEADER_BYTES as u64, 10)
    );
    // A batch that neither continues the previous one nor starts anew.
    assert_eq!(
        lost(&segment_of(
            10,
            &[frame(10, 0, b"abc"), frame(11, 1, b"x"), frame(12, 1, b"y")]
        )),
        (second + (FRAME_HEADER + 1) as u64, 12)
    );
    // A batch reaching before LSN 1.
    assert_eq!(
        lost(&segment_of(1, &[frame(1, 1, b"abc")])),
        (HEADER_BYTES as u64, 1)
    );
    // A first frame continuing a batch of the previous segment is fine.
    let (r, _) = scan(&segment_of(
        10,
        &[frame(10, 4, b"abc"), frame(11, 5, b"x"), frame(12, 0, b"y")],
    ));
    let s = r.expect("valid").expect("started");
    assert_eq!((s.records, s.last_lsn, s.max_batch_start), (3, 12, 12));
}

#[test]
fn headers_round_trip_and_reject_garbage() {
    let h = SegmentHeader {
        format: SEGMENT_FORMAT,
        shard: 9,
        segment: 77,
        base_lsn: 1234,
        created_ms: 99,
        flags: fusee_core::segment::OPENED,
    };
    let block = h.encode();
    assert_eq!(block.len(), HEADER_BYTES);
    assert_eq!(&block[..8], b"FUSEESEG");
    assert_eq!(SegmentHeader::decode(&block), Ok(Some(h)));
    assert_eq!(SegmentHeader::decode(&[0; HEADER_BYTES]), Ok(None));
    assert!(matches!(
        SegmentHeader::decode(&block[..100]),
        Err(ScanError::Truncated { len: 100 })
    ));
    // A newer format, and format 1 (CRC-32 frames), are refused by name.
    for found in [SEGMENT_FORMAT + 1, 1] {
        let other = SegmentHeader { format: found, ..h };
        assert_eq!(
            SegmentHeader::decode(&other.encode()),
            Err(ScanError::UnsupportedFormat { found })
        );
    }
    let zero_base = SegmentHeader { base_lsn: 0, ..h };
    assert!(SegmentHeader::decode(&zero_base.encode()).is_err());
    // A base past any LSN a log reaches is damage: the scan's LSN
    // arithmetic never overflows.
    let top = SegmentHeader {
        base_lsn: fusee_core::record::MAX_LSN,
        ..h
    };
    assert_eq!(SegmentHeader::decode(&top.encode()), Ok(Some(top)));
    for base_lsn in [fusee_core::record::MAX_LSN + 1, u64::MAX] {
        let past = SegmentHeader { base_lsn, ..h };
        assert!(matches!(
            SegmentHeader::decode(&past.encode()),
            Err(ScanError::BadHeader { .. })
        ));
    }
    // A never-started file shorter than a block, and an empty one.
    assert_eq!(scan(&[0; 100]).0, Ok(None));
    assert_eq!(scan(&[]).0, Ok(None));
}

#[test]
fn the_open_header_is_a_batch_of_its_own() {
    let mut w = LogWriter::new(1, 5, 40, 1 << 20, 7);
    assert!(w.has_pending());
    assert_eq!(w.append(b"one", 8), Ok(40));
    assert_eq!(w.append(b"two", 8), Ok(41));
    let h = w.take().expect("header");
    assert_eq!((h.first_lsn, h.last_lsn, h.records()), (40, 39, 0));
    assert_eq!(h.chunks.len(), 1);
    assert_eq!((h.chunks[0].segment, h.chunks[0].offset), (5, 0));
    assert_eq!(h.chunks[0].bytes.len(), HEADER_BYTES);
    let header = SegmentHeader::decode(&h.chunks[0].bytes).expect("valid");
    assert_eq!(
        header.map(|h| (h.shard, h.base_lsn, h.created_ms)),
        Some((1, 40, 7))
    );
    let b = w.take().expect("records");
    assert_eq!((b.first_lsn, b.last_lsn), (40, 41));
    assert_eq!(b.chunks.len(), 1);
    assert_eq!(b.chunks[0].offset, HEADER_BYTES as u64);
    assert_eq!(b.chunks[0].bytes.len(), 2 * (FRAME_HEADER + 3));
    assert!(!w.has_pending());
    assert_eq!(w.take(), None);
    assert_eq!(w.pending_records(), 0);
    assert_eq!((w.next_lsn(), w.last_lsn()), (42, 41));
}

/// Rolls: frames never cross a segment's end, a rolled segment's chunk
/// starts with its header, and the segments scan back to every record with
/// batch fields that reach across segments.
#[test]
fn the_writer_rolls_segments_and_they_scan_back() {
    for seed in 0..50u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let seg = 3 * BLOCK as u64;
        let mut w = LogWriter::new(2, 10, 1, seg, 0);
        if rng.bool() {
            w.limit_first_segment(HEADER_BYTES as u64 + 500);
        }
        let mut files: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
        let mut written = Vec::new();
        for _ in 0..30 {
            let since_take = written.len();
            for _ in 0..rng.usize(1..8) {
                let body: Vec<u8> = (0..rng.usize(0..1500)).map(|_| rng.u8(..)).collect();
                let lsn = w.append(&body, 1).expect("fits");
                written.push((lsn, body));
                assert!(w.offset() <= seg, "seed {seed}");
                // The unflushed records read back from the writer, across
                // any roll since the last batch was taken.
                let pending: Vec<_> = w.pending().map(|(l, b)| (l, b.to_vec())).collect();
                assert_eq!(pending, written[since_take..], "seed {seed}: pending");
                assert_eq!(w.pending_records() as usize, pending.len());
            }
            while let Some(b) = w.take() {
                if b.records() > 0 {
                    let frames: Vec<_> = b.frames().map(|(l, b)| (l, b.to_vec())).collect();
                    assert_eq!(frames, written[since_take..], "seed {seed}: batch frames");
                }
                let mut prev_seg = None;
                for c in &b.chunks {
                    let file = files
                        .entry(c.segment)
                        .or_insert_with(|| vec![0; seg as usize]);
                    let end = c.offset as usize + c.bytes.len();
                    assert!(end as u64 <= seg, "seed {seed}: chunk past the segment");
                    file[c.offset as usize..end].copy_from_slice(&c.bytes);
                    assert_ne!(prev_seg, Some(c.segment), "one chunk per segment");
                    if prev_seg.is_some() {
                        assert_eq!(c.offset, 0, "a rolled segment starts with its header");
                    }
                    prev_seg = Some(c.segment);
                }
                // Half the batches hand their buffers back for reuse.
                if rng.bool() {
                    w.recycle(b);
                }
            }
            assert!(!w.has_pending() && w.pending().next().is_none());
        }
        assert!(files.len() > 3, "seed {seed}: rolled");
        let mut seen = Vec::new();
        let mut next = 1;
        for (n, file) in &files {
            let s = scan_segment(file, |l, b| seen.push((l, b.to_vec())))
                .unwrap_or_else(|e| panic!("seed {seed}: segment {n}: {e}"))
                .expect("started");
            assert_eq!((s.header.segment, s.header.base_lsn), (*n, next));
            assert_eq!(s.tail, Tail::Clean);
            next = s.last_lsn + 1;
        }
        assert_eq!(seen, written, "seed {seed}");
    }
}

#[test]
fn oversized_records_are_refused_and_large_ones_get_their_own_segment() {
    let mut w = LogWriter::new(0, 1, 1, 2 * BLOCK as u64, 0);
    let max = w.max_body();
    assert_eq!(max, MAX_RECORD_BODY);
    let err = w.append(&vec![1; max + 1], 0).unwrap_err();
    assert_eq!((err.len, err.max), (max as u64 + 1, max as u64));
    assert_eq!(
        (w.next_lsn(), w.pending_records(), w.offset()),
        (1, 0, HEADER_BYTES as u64)
    );
    let room = 2 * BLOCK - HEADER_BYTES - FRAME_HEADER;
    assert_eq!(w.append(&vec![1; room], 0), Ok(1));
    assert_eq!(w.offset(), 2 * BLOCK as u64);
    // The next record rolls; a full segment ends clean.
    assert_eq!(w.append(b"x", 0), Ok(2));
    assert_eq!(w.segment(), 2);
    // A record larger than a segment gets a segment of its own, and the
    // record after it a normal one.
    let big = 3 * BLOCK;
    assert_eq!(w.append(&vec![2; big], 0), Ok(3));
    assert_eq!(w.segment(), 3);
    assert_eq!(w.offset(), (HEADER_BYTES + FRAME_HEADER + big) as u64);
    assert_eq!(w.append(b"y", 0), Ok(4));
    assert_eq!(w.segment(), 4);
    let mut images: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
    while let Some(batch) = w.take() {
        for c in batch.chunks {
            let img = images.entry(c.segment).or_default();
            let end = c.offset as usize + c.bytes.len();
            if img.len() < end {
                img.resize(end, 0);
            }
            img[c.offset as usize..end].copy_from_slice(&c.bytes);
        }
    }
    let mut lsns = Vec::new();
    for img in images.values() {
        scan_segment(img, |lsn, body| lsns.push((lsn, body.len())))
            .expect("scans")
            .expect("started");
    }
    assert_eq!(lsns, vec![(1, room), (2, 1), (3, big), (4, 1)]);
    // Tiny segment sizes are raised to the minimum.
    assert_eq!(
        LogWriter::new(0, 1, 1, 10, 0).segment_bytes(),
        2 * BLOCK as u64
    );
}

#[test]
fn prefixes_that_break_the_contract_are_errors() {
    let mut rng = fastrand::Rng::with_seed(11);
    let img = write_image(&mut rng, 1, 2, 100);
    let len = img.bytes.len() as u64;
    assert!(matches!(
        SegmentScanner::start(&img.bytes[..100], len),
        Err(ScanError::BadPrefix { .. })
    ));
    assert!(matches!(
        SegmentScanner::start(&img.bytes, len - 1),
        Err(ScanError::BadPrefix { .. })
    ));
    let mut s = SegmentScanner::start(&img.bytes[..HEADER_BYTES + 50], len)
        .expect("header")
        .expect("started");
    assert_eq!(s.header().base_lsn, 1);
    assert!(matches!(
        s.advance(&img.bytes[..HEADER_BYTES + 50], |_, _| {}),
        Ok(Progress::NeedMore { .. })
    ));
    assert!(matches!(
        s.advance(&img.bytes[..HEADER_BYTES], |_, _| {}),
        Err(ScanError::BadPrefix { .. })
    ));
    let mut n = 0;
    let done = s.advance(&img.bytes, |_, _| n += 1).expect("valid");
    assert_eq!(n, img.records.len());
    // Done stays done, visiting nothing again.
    assert_eq!(s.advance(&img.bytes, |_, _| n += 1), Ok(done));
    assert_eq!(n, img.records.len());
}

/// A recycled segment: a file that held an older segment of the log (its
/// header and frames of lower LSNs, here of the same size, so old frame
/// boundaries line up with new ones) gets a new header and new batches,
/// each followed by zeros up to `clean_end`. After every batch the scan
/// reads exactly the new records and ends cleanly; with the last batch torn
/// at any byte (the rest of the file still old), it reads a prefix that
/// holds every earlier batch and never reports a lost record.
#[test]
fn recycled_segments_read_only_their_new_frames() {
    const BODY: usize = 100;
    let segment_bytes = 64 * 1024u64;
    let len = segment_bytes as usize;
    // The file's previous life: LSNs 1.. filling most of it.
    let mut old = LogWriter::new(7, 1, 1, segment_bytes, 5);
    let mut image = vec![0u8; len];
    apply(&mut image, &old.take().expect("header"), 1);
    while old.offset() + ((FRAME_HEADER + BODY) as u64) * 9 < segment_bytes {
        for i in 0..8u8 {
            old.append(&[i; BODY], 5).expect("fits");
        }
        apply(&mut image, &old.take().expect("batch"), 1);
    }
    let stale_last = old.last_lsn();
    // Its new life as segment 9, starting well after every old LSN.
    let base = stale_last + 1000;
    let mut w = LogWriter::new(7, 9, base, segment_bytes, 6);
    let write = |image: &mut Vec<u8>, batch: &Batch, upto: usize| {
        for c in &batch.chunks {
            let at = c.offset as usize;
            let end = at + c.bytes.len();
            let pad = fusee_core::segment::clean_end(end as u64, segment_bytes) as usize;
            let mut bytes = c.bytes.clone();
            bytes.resize(pad - at, 0);
            let n = bytes.len().min(upto.saturating_sub(at));
            image[at..at + n].copy_from_slice(&bytes[..n]);
        }
    };
    write(&mut image, &w.take().expect("header"), usize::MAX);
    let mut bodies: Vec<Vec<u8>> = Vec::new();
    // Batches from 5 records (inside the previous batch's zeros) to 54
    // (well past them, over old frames).
    for round in 0..8u8 {
        let durable = bodies.len();
        for i in 0..5 + 7 * round {
            let body = vec![round.wrapping_mul(16) ^ i; BODY];
            w.append(&body, 6).expect("fits");
            bodies.push(body);
        }
        let batch = w.take().expect("batch");
        let start = batch.chunks[0].offset as usize;
        let end = start + batch.chunks[0].bytes.len();
        let pad = fusee_core::segment::clean_end(end as u64, segment_bytes) as usize;
        // Each frame boundary and the bytes beside it (a cut at a boundary
        // past the previous zeros leaves an old, valid frame right after
        // the new ones), and a sample of the padding.
        let frame = FRAME_HEADER + BODY;
        let boundaries = (start..end)
            .step_by(frame)
            .flat_map(|b| [b, b + 1, b + frame - 1]);
        for cut in boundaries.chain((end..=pad).step_by(61)).chain([pad]) {
            let mut torn = image.clone();
            write(&mut torn, &batch, cut);
            let (result, visited) = scan(&torn);
            let scanned = result
                .unwrap_or_else(|e| panic!("round {round} cut {cut}: {e}"))
                .expect("started");
            assert!(
                (durable..=bodies.len()).contains(&visited.len()),
                "round {round} cut {cut}: {} records, {durable} durable",
                visited.len()
            );
            for (i, (lsn, body)) in visited.iter().enumerate() {
                assert_eq!(*lsn, base + i as u64, "round {round} cut {cut}");
                assert_eq!(body, &bodies[i], "round {round} cut {cut}: record {lsn}");
            }
            if cut == pad {
                assert_eq!(scanned.tail, Tail::Clean, "round {round}: whole batch");
                assert_eq!(visited.len(), bodies.len(), "round {round}");
            }
        }
        write(&mut image, &batch, usize::MAX);
    }
}

/// A host that prepares the next segment's file smaller than the configured
/// size caps that segment: the roll into it stops at the cap, and the roll
/// after it is back to the configured size.
#[test]
fn a_capped_next_segment_rolls_at_its_cap_then_at_the_configured_size() {
    let seg = 4 * BLOCK as u64;
    let mut w = LogWriter::new(0, 1, 1, seg, 0);
    w.limit_first_segment(HEADER_BYTES as u64 + 1000);
    w.limit_next_segment(2 * BLOCK as u64);
    let body = [7u8; 100];
    let mut limits = vec![w.limit()];
    while limits.len() < 3 {
        let before = w.segment();
        w.append(&body, 0).expect("fits");
        assert!(w.offset() <= w.limit());
        if w.segment() != before {
            limits.push(w.limit());
        }
    }
    assert_eq!(limits, [HEADER_BYTES as u64 + 1000, 2 * BLOCK as u64, seg]);
}

/// A bad frame followed by bytes crafted so that a frame of a later batch
/// seems to start at every fourth offset, each claiming a long body: the
/// search for a later batch checksums at most twice the file, then refuses
/// the segment, where it used to hash about L²/336 bytes (minutes for a
/// 64 MiB segment). Plain damage never gets there (see the tests above).
#[test]
fn a_crafted_tail_is_refused_in_linear_time() {
    let len = 1 << 20;
    let x = (len / 42) as u32;
    let lsn = u64::from(x) | (u64::from(x) << 32);
    let mut img = SegmentHeader {
        format: SEGMENT_FORMAT,
        shard: 0,
        segment: 1,
        base_lsn: lsn - u64::from(x) - 1,
        created_ms: 0,
        flags: 0,
    }
    .encode();
    while img.len() < len {
        img.extend_from_slice(&x.to_le_bytes());
    }
    let r = scan_segment(&img, |_, _| {});
    assert!(
        matches!(r, Err(ScanError::LostRecord { reason, .. }) if reason.contains("plausible")),
        "{r:?}"
    );
}
