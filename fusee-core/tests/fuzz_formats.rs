//! Decoder fuzz smoke for the on-disk formats: segment headers and images,
//! run-store frames and checkpoints. Inputs are random bytes, valid
//! encodings with random damage, and truncations. No input may panic, and
//! no decode may make a single allocation much larger than its input.
//!
//! Iterations per decoder come from `FUSEE_FUZZ_ITERS` (default 200_000).

// A counting global allocator is the only way to observe allocation sizes;
// it forwards every call to the system allocator unchanged.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

mod common;

use fusee_core::segment::{HEADER_BYTES, LogWriter, SegmentHeader, scan_segment};
use fusee_core::store::{Checkpoint, CheckpointRun, StoreEntry, decode_entry, encode_entry};

struct Counting;

thread_local! {
    /// The largest single allocation on this thread since the last reset.
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = PEAK.try_with(|p| p.set(p.get().max(size)));
}

// SAFETY: every method forwards to `System` with the caller's arguments;
// the bookkeeping touches only a const-initialised thread-local.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `decode` on `input` and checks its largest single allocation
/// against a small multiple of the input's size.
fn bounded<T>(input: &[u8], seed: u64, what: &str, decode: impl FnOnce(&[u8]) -> T) -> T {
    PEAK.with(|p| p.set(0));
    let out = decode(input);
    let peak = PEAK.with(Cell::get);
    assert!(
        peak <= 16 * input.len() + 4096,
        "{what}, seed {seed}: allocated {peak} bytes for {} input bytes",
        input.len()
    );
    out
}

fn iters() -> u64 {
    std::env::var("FUSEE_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000)
}

/// Random damage to a valid encoding: flips, overwrites with extreme
/// bytes, a cut, or random bytes appended.
fn damage(rng: &mut fastrand::Rng, mut bytes: Vec<u8>) -> Vec<u8> {
    for _ in 0..rng.usize(1..4) {
        if bytes.is_empty() {
            break;
        }
        let i = rng.usize(0..bytes.len());
        match rng.u8(0..5) {
            0 => bytes[i] ^= 1 << rng.u8(0..8),
            1 => bytes[i] = 0xff,
            2 => bytes[i] = 0,
            3 => bytes.truncate(i),
            _ => bytes.extend((0..rng.usize(1..16)).map(|_| rng.u8(..))),
        }
    }
    bytes
}

fn random_bytes(rng: &mut fastrand::Rng, max: usize) -> Vec<u8> {
    let n = rng.usize(0..=max);
    (0..n).map(|_| rng.u8(..)).collect()
}

fn some_entry(rng: &mut fastrand::Rng) -> StoreEntry {
    let journal = random_bytes(rng, 64);
    let apart = common::some_apart(rng, journal.len());
    match rng.u8(0..6) {
        0 => StoreEntry::Park {
            run: rng.u64(..),
            last_lsn: rng.u64(..),
            id_hash: rng.u64(..),
            timers: vec![(1, fusee_core::shard::TimerKind::Retry, rng.u64(..)); rng.usize(0..4)],
            apart,
            journal,
        },
        1 => StoreEntry::Delta {
            run: rng.u64(..100),
            last_lsn: rng.u64(..),
            id_hash: rng.u64(..),
            timers: Vec::new(),
            prev: fusee_core::shard::BlobRef {
                offset: rng.u64(..1 << 48),
                len: rng.u32(..),
            },
            depth: rng.u8(..),
            chain: rng.u64(..),
            apart,
            journal,
        },
        2 => StoreEntry::Done {
            run: rng.u64(..),
            last_lsn: rng.u64(..),
            id_hash: rng.u64(..),
            status: fusee_core::Status::Failed,
            finished_ms: rng.u64(..),
            apart,
            journal,
        },
        3 => StoreEntry::Tombstone { run: rng.u64(..) },
        4 => StoreEntry::Stream {
            run: rng.u64(..),
            chunks: journal,
        },
        _ => StoreEntry::Index {
            records: vec![7; 32 * rng.usize(0..4)],
        },
    }
}

#[test]
fn store_frames_never_panic_or_overallocate() {
    let mut rng = fastrand::Rng::with_seed(0x5eed_0001);
    for i in 0..iters() {
        let input = if i % 4 == 0 {
            random_bytes(&mut rng, 64)
        } else {
            let e = some_entry(&mut rng);
            damage(&mut rng, encode_entry(&e).expect("small"))
        };
        let _ = bounded(&input, i, "store frame", |b| {
            decode_entry(b).map(|e| e.to_owned())
        });
    }
}

/// Checkpoints whose counts claim more items than the bytes hold, with a
/// correct crc, so the decoder gets past the header checks.
fn lying_checkpoint(rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut body = Vec::new();
    for _ in 0..9 {
        body.push(rng.u8(..0x80));
    }
    // A run count far beyond the bytes that follow.
    let mut count = rng.u64(1 << 12..1 << 20);
    while count >= 0x80 {
        body.push(count as u8 | 0x80);
        count >>= 7;
    }
    body.push(count as u8);
    body.extend(random_bytes(rng, 32));
    let mut out = b"FUSEECKP".to_vec();
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&out[8..20]);
    h.update(&body);
    out.extend_from_slice(&h.finalize().to_le_bytes());
    out.extend_from_slice(&body);
    out
}

#[test]
fn checkpoints_never_panic_or_overallocate() {
    let mut rng = fastrand::Rng::with_seed(0x5eed_0002);
    let mut decoded = 0u64;
    for i in 0..iters() {
        let input = match i % 4 {
            0 => random_bytes(&mut rng, 64),
            1 => lying_checkpoint(&mut rng),
            _ => {
                let c = Checkpoint {
                    lsn: rng.u64(..),
                    runs: (0..rng.usize(0..3))
                        .map(|_| CheckpointRun {
                            run: rng.u64(..),
                            journal: random_bytes(&mut rng, 20),
                            ..CheckpointRun::default()
                        })
                        .collect(),
                    outbox: random_bytes(&mut rng, 20),
                    ..Checkpoint::default()
                };
                let bytes = c.encode();
                if i % 8 == 2 {
                    bytes
                } else {
                    damage(&mut rng, bytes)
                }
            }
        };
        if bounded(&input, i, "checkpoint", Checkpoint::decode).is_ok() {
            decoded += 1;
        }
    }
    assert!(decoded > 0, "some inputs are valid checkpoints");
}

#[test]
fn segment_headers_and_images_never_panic() {
    let mut rng = fastrand::Rng::with_seed(0x5eed_0003);
    // One small valid segment to damage.
    let mut w = LogWriter::new(1, 1, 1, 1 << 16, 0);
    let mut image = vec![0u8; 3 * HEADER_BYTES];
    for _ in 0..3 {
        for _ in 0..rng.usize(1..5) {
            w.append(&random_bytes(&mut rng, 200), 0).expect("fits");
        }
        while let Some(b) = w.take() {
            for c in b.chunks {
                let at = c.offset as usize;
                image[at..at + c.bytes.len()].copy_from_slice(&c.bytes);
            }
        }
    }
    let header = image[..HEADER_BYTES].to_vec();
    for i in 0..iters() {
        let input = match i % 3 {
            0 => damage(&mut rng, header.clone()),
            1 => {
                let mut h = header.clone();
                // Random fields over the magic, so a few get past it.
                let from = if rng.bool() { 8 } else { 0 };
                h[from..48].iter_mut().for_each(|b| *b = rng.u8(..));
                h
            }
            _ => {
                let mut img = image.clone();
                for _ in 0..rng.usize(1..4) {
                    let at = rng.usize(HEADER_BYTES..img.len());
                    img[at] = rng.u8(..);
                }
                img.truncate(rng.usize(HEADER_BYTES..=img.len()));
                img
            }
        };
        let _ = bounded(&input, i, "segment header", SegmentHeader::decode);
        let _ = bounded(&input, i, "segment scan", |b| {
            let mut n = 0u64;
            let r = scan_segment(b, |_, body| n += body.len() as u64);
            (r, n)
        });
    }
}
