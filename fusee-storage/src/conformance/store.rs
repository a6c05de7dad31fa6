//! Run-store clauses.

use fusee_core::shard::BlobRef;

use super::{Harness, frame, open};
use crate::{CheckpointStore, IndexChange, MAX_FRAME, RunStore, Storage, StorageError};

/// Frame sizes from 0 B to 16 MiB, around powers of two.
fn sizes() -> Vec<usize> {
    let mut v = vec![
        0,
        1,
        2,
        3,
        7,
        100,
        511,
        512,
        513,
        4095,
        4096,
        4097,
        65_536,
        1 << 20,
    ];
    v.extend([(1 << 20) + 3, 5 << 20, (16 << 20) - 1, 16 << 20]);
    v
}

fn append<R: RunStore>(runs: &mut R, bytes: &[u8]) -> BlobRef {
    let before = runs.position();
    let blob = runs
        .append(bytes)
        .unwrap_or_else(|e| panic!("append of a {} B frame: {e}", bytes.len()));
    assert_eq!(
        blob.len as usize,
        bytes.len(),
        "BlobRef.len must be the frame length"
    );
    assert!(
        blob.offset < 1 << 48,
        "BlobRef.offset uses more than 48 bits"
    );
    assert!(
        runs.position() >= before,
        "the store position went backwards"
    );
    blob
}

fn check<R: RunStore>(runs: &mut R, blob: BlobRef, want: &[u8]) {
    let mut out = vec![0xA5; 3];
    runs.read(blob, &mut out)
        .unwrap_or_else(|e| panic!("read of the {} B frame at {}: {e}", want.len(), blob.offset));
    assert!(
        out == want,
        "frame at {} ({} B) read back different bytes",
        blob.offset,
        want.len()
    );
}

/// Commits an empty delta with `checkpoint`, returning the recorded position.
fn commit<S: Storage>(p: &mut crate::ShardParts<S>, checkpoint: &[u8]) -> u64 {
    let before = p.runs.position();
    let c = p
        .checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&[]), checkpoint)
        .unwrap_or_else(|e| panic!("commit: {e}"));
    assert_eq!(
        c.store_position, before,
        "a commit records the store's position"
    );
    c.store_position
}

/// Store round trip: frames from 0 B to 16 MiB read back exactly, before a
/// commit, after it, and after a reopen.
pub fn store_round_trip<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let mut p = open(&s, 0);
    let frames: Vec<Vec<u8>> = sizes().into_iter().map(|n| frame(n, 11)).collect();
    let blobs: Vec<BlobRef> = frames.iter().map(|f| append(&mut p.runs, f)).collect();
    for (b, f) in blobs.iter().zip(&frames) {
        check(&mut p.runs, *b, f);
    }
    let position = commit(&mut p, b"ck");
    for (b, f) in blobs.iter().zip(&frames).rev() {
        check(&mut p.runs, *b, f);
    }
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    assert_eq!(p.recovered.store_position, position);
    assert_eq!(
        p.runs.position(),
        position,
        "the store must start at the committed position"
    );
    for (b, f) in blobs.iter().zip(&frames) {
        check(&mut p.runs, *b, f);
    }
}

/// Frames committed before a crash survive it; frames appended after the
/// last commit are gone (reads fail, never return other bytes) and the store
/// continues from the committed position.
pub fn store_crash<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let mut p = open(&s, 4);
    let kept: Vec<Vec<u8>> = (0..20).map(|i| frame(i * 37, 12)).collect();
    let kept_refs: Vec<BlobRef> = kept.iter().map(|f| append(&mut p.runs, f)).collect();
    let position = commit(&mut p, b"one");
    let lost: Vec<Vec<u8>> = (0..20).map(|i| frame(i * 41 + 1, 13)).collect();
    let lost_refs: Vec<BlobRef> = lost.iter().map(|f| append(&mut p.runs, f)).collect();
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 4);
    assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"one"[..]));
    assert_eq!(p.recovered.store_position, position);
    assert_eq!(
        p.runs.position(),
        position,
        "the store must roll back to the commit"
    );
    for (b, f) in kept_refs.iter().zip(&kept) {
        check(&mut p.runs, *b, f);
    }
    let mut out = Vec::new();
    for b in &lost_refs {
        assert!(
            p.runs.read(*b, &mut out).is_err(),
            "frame at {} appended after the last commit survived a crash",
            b.offset
        );
    }
    // New frames may reuse the lost space; every reference reads its own.
    let again: Vec<Vec<u8>> = (0..20).map(|i| frame(i * 43 + 2, 14)).collect();
    let again_refs: Vec<BlobRef> = again.iter().map(|f| append(&mut p.runs, f)).collect();
    commit(&mut p, b"two");
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 4);
    for (b, f) in kept_refs
        .iter()
        .zip(&kept)
        .chain(again_refs.iter().zip(&again))
    {
        check(&mut p.runs, *b, f);
    }
}

/// Release: other frames stay intact; a released frame reads back its exact
/// bytes or fails; a release is not durable before the next commit (a crash
/// before it leaves the frame readable).
pub fn store_release<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let mut p = open(&s, 0);
    let frames: Vec<Vec<u8>> = (0..30).map(|i| frame(100 + i * 10, 15)).collect();
    let refs: Vec<BlobRef> = frames.iter().map(|f| append(&mut p.runs, f)).collect();
    commit(&mut p, b"a");
    for b in refs.iter().step_by(2) {
        p.runs
            .release(*b)
            .unwrap_or_else(|e| panic!("release: {e}"));
    }
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 0);
    for (b, f) in refs.iter().zip(&frames) {
        check(&mut p.runs, *b, f);
    }
    for b in refs.iter().step_by(2) {
        p.runs
            .release(*b)
            .unwrap_or_else(|e| panic!("release after crash: {e}"));
    }
    commit(&mut p, b"b");
    let mut moved = Vec::new();
    p.runs
        .compact(&mut |old, new| moved.push((old, new)))
        .unwrap_or_else(|e| panic!("compact: {e}"));
    let mut current: Vec<BlobRef> = refs.clone();
    for (old, new) in &moved {
        let i = current
            .iter()
            .position(|b| b == old)
            .unwrap_or_else(|| panic!("compaction moved unknown frame {old:?}"));
        assert!(i % 2 == 1, "compaction moved released frame {old:?}");
        current[i] = *new;
    }
    commit(&mut p, b"c");
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    let mut out = Vec::new();
    for (i, (b, f)) in current.iter().zip(&frames).enumerate() {
        if i % 2 == 1 {
            check(&mut p.runs, *b, f);
        } else if p.runs.read(*b, &mut out).is_ok() {
            assert!(out == *f, "a released frame read back other bytes");
        }
    }
}

/// A frame over `MAX_FRAME` is a `TooLarge` error and the store stays usable.
pub fn store_too_large<H: Harness>(h: &mut H) {
    let s = h.open();
    let mut p = open(&s, 0);
    let over = vec![0u8; MAX_FRAME + 1];
    match p.runs.append(&over) {
        Err(StorageError::TooLarge { len, max, .. }) => {
            assert_eq!((len, max), ((MAX_FRAME + 1) as u64, MAX_FRAME as u64));
        }
        other => panic!("oversized frame: expected TooLarge, got {other:?}"),
    }
    let f = frame(1000, 16);
    let b = append(&mut p.runs, &f);
    check(&mut p.runs, b, &f);
}

/// References that name no frame (never appended, wrong length, far past
/// the end) are errors, never other bytes.
pub fn store_bad_reference<H: Harness>(h: &mut H) {
    let s = h.open();
    let mut p = open(&s, 0);
    let a = frame(300, 17);
    let b = frame(300, 18);
    let ra = append(&mut p.runs, &a);
    let rb = append(&mut p.runs, &b);
    let mut out = Vec::new();
    let bad = [
        BlobRef {
            offset: (1 << 48) - 1,
            len: 10,
        },
        BlobRef {
            offset: ra.offset,
            len: ra.len + 1,
        },
        BlobRef {
            offset: rb.offset + u64::from(rb.len),
            len: 5,
        },
    ];
    for r in bad {
        if p.runs.read(r, &mut out).is_ok() {
            panic!("read of bad reference {r:?} returned {} bytes", out.len());
        }
    }
    // A shorter length may be refused, and must never return other bytes.
    let short = BlobRef {
        offset: ra.offset,
        len: ra.len - 1,
    };
    if p.runs.read(short, &mut out).is_ok() {
        assert!(
            out == a[..a.len() - 1],
            "a shortened reference returned other bytes"
        );
    }
    check(&mut p.runs, ra, &a);
    check(&mut p.runs, rb, &b);
}
