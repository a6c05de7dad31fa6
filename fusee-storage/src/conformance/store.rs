//! Run-store clauses.

use fusee_core::shard::BlobRef;

use super::check::{Clause, check_bytes, check_matches};
use super::{Harness, check, check_eq, fail, frame, must, open};
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
    let blob = must!(runs.append(bytes), "append of a {} B frame", bytes.len());
    check_eq!(
        blob.len as usize,
        bytes.len(),
        "append of a {} B frame: BlobRef.len must be the frame's length",
        bytes.len()
    );
    check!(
        blob.offset < 1 << 48,
        "append of a {} B frame: BlobRef.offset must fit in 48 bits; found {:#x}",
        bytes.len(),
        blob.offset
    );
    check!(
        runs.position() >= before,
        "append of a {} B frame: the store position must not go backwards; found {} after {before}",
        bytes.len(),
        runs.position()
    );
    blob
}

fn check_frame<R: RunStore>(runs: &mut R, blob: BlobRef, want: &[u8], when: &str) {
    let mut out = vec![0xA5; 3];
    must!(
        runs.read(blob, &mut out),
        "{when}, the read of the {} B frame at {}",
        want.len(),
        blob.offset
    );
    check_bytes(
        &out,
        want,
        format_args!(
            "{when}, the frame at {} must read back as appended",
            blob.offset
        ),
    );
}

/// Commits an empty delta with `checkpoint`, returning the recorded position.
fn commit<S: Storage>(p: &mut crate::ShardParts<S>, checkpoint: &[u8]) -> u64 {
    let before = p.runs.position();
    let c = must!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&[]), checkpoint),
        "commit {:?}",
        String::from_utf8_lossy(checkpoint)
    );
    check_eq!(
        c.store_position,
        before,
        "a commit must record the store's position (the store_position it returns)"
    );
    c.store_position
}

/// Store round trip: frames from 0 B to 16 MiB read back exactly, before a
/// commit, after it, after a prefetch of them (a hint: reads are unchanged),
/// and after a reopen.
pub fn store_round_trip<H: Harness>(h: &mut H) {
    let _c = Clause::enter("store_round_trip");
    let mut s = h.open();
    let mut p = open(&s, 0);
    let frames: Vec<Vec<u8>> = sizes().into_iter().map(|n| frame(n, 11)).collect();
    let blobs: Vec<BlobRef> = frames.iter().map(|f| append(&mut p.runs, f)).collect();
    for (b, f) in blobs.iter().zip(&frames) {
        check_frame(&mut p.runs, *b, f, "before a commit");
    }
    let position = commit(&mut p, b"ck");
    for (b, f) in blobs.iter().zip(&frames).rev() {
        check_frame(&mut p.runs, *b, f, "after the commit");
    }
    // A prefetch is a hint: whatever it names (a reference to no frame
    // included), every read returns what it returned before, twice over.
    let mut named: Vec<BlobRef> = blobs.iter().rev().copied().collect();
    named.push(BlobRef {
        offset: (1 << 47) + 3,
        len: 1,
    });
    let prefetched = p.runs.prefetch(&named);
    check!(
        prefetched.is_ok(),
        "prefetch of committed frames and of a reference to no frame must be Ok; found {prefetched:?}"
    );
    for _ in 0..2 {
        for (b, f) in blobs.iter().zip(&frames) {
            check_frame(&mut p.runs, *b, f, "after a prefetch");
        }
    }
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    check_eq!(
        p.recovered.store_position,
        position,
        "after a reopen, recovered.store_position must be the commit's"
    );
    check_eq!(
        p.runs.position(),
        position,
        "after a reopen, the store must start at the committed position"
    );
    for (b, f) in blobs.iter().zip(&frames) {
        check_frame(&mut p.runs, *b, f, "after a reopen");
    }
}

/// Frames committed before a crash survive it; frames appended after the
/// last commit are gone (reads fail, never return other bytes) and the store
/// continues from the committed position.
pub fn store_crash<H: Harness>(h: &mut H) {
    let _c = Clause::enter("store_crash");
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
    check_eq!(
        p.recovered.checkpoint.as_deref(),
        Some(&b"one"[..]),
        "after a crash, the checkpoint of the last commit"
    );
    check_eq!(
        p.recovered.store_position,
        position,
        "after a crash, recovered.store_position must be the last commit's"
    );
    check_eq!(
        p.runs.position(),
        position,
        "after a crash, the store must roll back to the last commit's position"
    );
    for (b, f) in kept_refs.iter().zip(&kept) {
        check_frame(&mut p.runs, *b, f, "after a crash, a committed frame");
    }
    let mut out = Vec::new();
    for b in &lost_refs {
        let r = p.runs.read(*b, &mut out);
        check!(
            r.is_err(),
            "after a crash, the read of frame {b:?} appended after the last commit must fail; found Ok with {} bytes",
            out.len()
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
        check_frame(
            &mut p.runs,
            *b,
            f,
            "after a second crash, a committed frame",
        );
    }
}

/// Release: other frames stay intact; a released frame reads back its exact
/// bytes or fails; a release is not durable before the next commit (a crash
/// before it leaves the frame readable).
pub fn store_release<H: Harness>(h: &mut H) {
    let _c = Clause::enter("store_release");
    let mut s = h.open();
    let mut p = open(&s, 0);
    let frames: Vec<Vec<u8>> = (0..30).map(|i| frame(100 + i * 10, 15)).collect();
    let refs: Vec<BlobRef> = frames.iter().map(|f| append(&mut p.runs, f)).collect();
    commit(&mut p, b"a");
    for b in refs.iter().step_by(2) {
        must!(p.runs.release(*b), "release of {b:?}");
    }
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 0);
    for (b, f) in refs.iter().zip(&frames) {
        check_frame(
            &mut p.runs,
            *b,
            f,
            "after a crash before the release was committed",
        );
    }
    for b in refs.iter().step_by(2) {
        must!(p.runs.release(*b), "release of {b:?} after the crash");
    }
    commit(&mut p, b"b");
    let mut moved = Vec::new();
    must!(
        p.runs.compact(&mut |old, new| moved.push((old, new))),
        "compact"
    );
    let mut current: Vec<BlobRef> = refs.clone();
    for (old, new) in &moved {
        let Some(i) = current.iter().position(|b| b == old) else {
            fail(format_args!(
                "compact must report moves of live frames only; found a move of {old:?}, which was never appended"
            ));
        };
        check!(
            i % 2 == 1,
            "compact must not move released frames; found a move of released frame {old:?}"
        );
        current[i] = *new;
    }
    commit(&mut p, b"c");
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    let mut out = Vec::new();
    for (i, (b, f)) in current.iter().zip(&frames).enumerate() {
        if i % 2 == 1 {
            check_frame(
                &mut p.runs,
                *b,
                f,
                "after compaction and a reopen, a frame never released",
            );
        } else if p.runs.read(*b, &mut out).is_ok() {
            check_bytes(
                &out,
                f,
                format_args!("a released frame {b:?} that still reads must read its own bytes"),
            );
        }
    }
}

/// A frame over `MAX_FRAME` is a `TooLarge` error and the store stays usable.
pub fn store_too_large<H: Harness>(h: &mut H) {
    let _c = Clause::enter("store_too_large");
    let s = h.open();
    let mut p = open(&s, 0);
    let over = vec![0u8; MAX_FRAME + 1];
    let (len, max) = ((MAX_FRAME + 1) as u64, MAX_FRAME as u64);
    check_matches!(
        p.runs.append(&over),
        Err(StorageError::TooLarge { len: l, max: m, .. }) if (l, m) == (len, max),
        format_args!("Err(TooLarge {{ len: {len}, max: {max} }})"),
        "append of a frame one byte over MAX_FRAME"
    );
    let f = frame(1000, 16);
    let b = append(&mut p.runs, &f);
    check_frame(&mut p.runs, b, &f, "after a refused oversized frame");
}

/// References that name no frame (never appended, wrong length, far past
/// the end, between two frames' addresses) are `UnknownBlob` errors, never
/// other bytes, both to read and to release; a refused release releases
/// nothing.
pub fn store_bad_reference<H: Harness>(h: &mut H) {
    let _c = Clause::enter("store_bad_reference");
    let mut s = h.open();
    let mut p = open(&s, 0);
    let a = frame(300, 17);
    let b = frame(300, 18);
    let ra = append(&mut p.runs, &a);
    let rb = append(&mut p.runs, &b);
    let mut out = Vec::new();
    let mut bad = vec![
        (
            "far past the end",
            BlobRef {
                offset: (1 << 48) - 1,
                len: 10,
            },
        ),
        (
            "one byte too long",
            BlobRef {
                offset: ra.offset,
                len: ra.len + 1,
            },
        ),
        (
            "one byte too short",
            BlobRef {
                offset: ra.offset,
                len: ra.len - 1,
            },
        ),
        (
            "just past the last frame",
            BlobRef {
                offset: rb.offset + u64::from(rb.len),
                len: 5,
            },
        ),
    ];
    // Addresses are the backend's: one strictly between two frames'
    // (inside the first, for a backend that addresses bytes) names none.
    if rb.offset > ra.offset + 1 {
        let inside = BlobRef {
            offset: ra.offset + (rb.offset - ra.offset) / 2,
            len: 5,
        };
        bad.push(("between two frames' addresses", inside));
    }
    for &(what, r) in &bad {
        let read = p.runs.read(r, &mut out);
        if what == "one byte too short" && read.is_ok() {
            // A shorter length may be served, as a prefix, never other bytes.
            check_bytes(
                &out,
                &a[..a.len() - 1],
                format_args!("a read of {r:?} ({what}) that succeeds"),
            );
            continue;
        }
        check_matches!(
            read,
            Err(StorageError::UnknownBlob { blob }) if blob == r,
            format_args!("Err(UnknownBlob {{ blob: {r:?} }})"),
            "read of {r:?} ({what})"
        );
    }
    for &(what, r) in &bad {
        check_matches!(
            p.runs.release(r),
            Err(StorageError::UnknownBlob { blob }) if blob == r,
            format_args!("Err(UnknownBlob {{ blob: {r:?} }})"),
            "release of {r:?} ({what})"
        );
    }
    check_frame(&mut p.runs, ra, &a, "after refused releases");
    check_frame(&mut p.runs, rb, &b, "after refused releases");
    commit(&mut p, b"bad references");
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    check_frame(
        &mut p.runs,
        ra,
        &a,
        "after refused releases, a commit and a reopen",
    );
    check_frame(
        &mut p.runs,
        rb,
        &b,
        "after refused releases, a commit and a reopen",
    );
}
