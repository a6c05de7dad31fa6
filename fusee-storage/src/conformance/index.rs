//! Index and commit clauses.

use std::collections::BTreeMap;

use fusee_core::shard::BlobRef;

use super::{Harness, concat, delete_record, frame, index_record, open, read_index, scaled, skip};
use crate::{CheckpointStore, INDEX_RECORD, IndexChange, RunStore, ShardParts, Storage};

type Index = BTreeMap<u64, [u8; INDEX_RECORD]>;

fn commit_delta<S: Storage>(p: &mut ShardParts<S>, delta: &[[u8; INDEX_RECORD]], ck: &[u8]) {
    let c = p
        .checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&concat(delta)), ck)
        .unwrap_or_else(|e| panic!("delta commit: {e}"));
    let _ = c;
}

fn apply(model: &mut Index, delta: &[[u8; INDEX_RECORD]]) {
    for r in delta {
        let run = crate::index_record_run(r);
        if crate::index_record_state(r) == crate::DELETED {
            model.remove(&run);
        } else {
            model.insert(run, *r);
        }
    }
}

/// Index deltas: upserts insert and replace by run, deletes remove (an
/// absent run included), records apply in order, and the index and
/// checkpoint read back after the commit, after a reopen and after a crash.
pub fn index_delta<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let mut p = open(&s, 0);
    assert_eq!(
        p.recovered.checkpoint, None,
        "a fresh shard has no checkpoint"
    );
    assert_eq!(p.recovered.index_records, 0);
    assert!(read_index(&mut p.checkpoint).is_empty());
    let mut model = Index::new();
    let d1: Vec<_> = (1..=100).map(|r| index_record(r, r)).collect();
    let d2: Vec<_> = (50..=60)
        .map(|r| index_record(r, r + 1000))
        .chain((70..=80).map(delete_record))
        .chain([
            delete_record(12_345),
            index_record(1 << 40, 7),
            index_record(90, 1),
            delete_record(90),
        ])
        .chain([delete_record(91), index_record(91, 2)])
        .collect();
    for (i, d) in [&d1, &d2].into_iter().enumerate() {
        commit_delta(&mut p, d, format!("ck{i}").as_bytes());
        apply(&mut model, d);
        assert_eq!(
            read_index(&mut p.checkpoint),
            model,
            "index after delta commit {i}"
        );
    }
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"ck1"[..]));
    assert_eq!(p.recovered.index_records, model.len() as u64);
    assert_eq!(read_index(&mut p.checkpoint), model, "index after reopen");
    let d3: Vec<_> = (1..=10).map(delete_record).collect();
    commit_delta(&mut p, &d3, b"ck2");
    apply(&mut model, &d3);
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 0);
    assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"ck2"[..]));
    assert_eq!(read_index(&mut p.checkpoint), model, "index after crash");
    // An empty checkpoint is a checkpoint, not "none".
    commit_delta(&mut p, &[], b"");
    drop(p);
    s = h.reopen(s);
    let p = open(&s, 0);
    assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b""[..]));
}

/// A base of 1,000,000 records (scaled by `FUSEE_CONFORMANCE_SCALE`) streamed
/// in chunks replaces the index whole; a base begun but not committed before
/// a crash leaves the previous index; deltas apply on top of a base.
pub fn index_base_streamed<H: Harness>(h: &mut H) {
    let n = scaled(1_000_000) as u64;
    let mut s = h.open();
    let mut p = open(&s, 5);
    commit_delta(&mut p, &[index_record(7, 7), index_record(8, 8)], b"old");
    let old = read_index(&mut p.checkpoint);
    // A base that is streamed but never committed.
    p.checkpoint
        .begin_base()
        .unwrap_or_else(|e| panic!("begin_base: {e}"));
    p.checkpoint
        .base_chunk(&concat(&[index_record(1, 1)]))
        .unwrap_or_else(|e| panic!("base_chunk: {e}"));
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 5);
    assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"old"[..]));
    assert_eq!(
        read_index(&mut p.checkpoint),
        old,
        "an uncommitted base changed the index"
    );
    // The real base, in chunks of varying size; runs spread over 48 bits.
    let run_of = |i: u64| (i.wrapping_mul(0x9E37_79B9) & ((1 << 47) - 1)) | 1 << 47;
    p.checkpoint
        .begin_base()
        .unwrap_or_else(|e| panic!("begin_base: {e}"));
    let mut i = 0u64;
    let mut chunk = Vec::new();
    let mut chunk_len = 1u64;
    while i < n {
        chunk.clear();
        let end = (i + chunk_len).min(n);
        for j in i..end {
            chunk.extend_from_slice(&index_record(run_of(j), j));
        }
        p.checkpoint
            .base_chunk(&chunk)
            .unwrap_or_else(|e| panic!("base_chunk at {i}: {e}"));
        i = end;
        chunk_len = (chunk_len * 3).min(65_536);
    }
    let c = p
        .checkpoint
        .commit(&mut p.runs, IndexChange::Base, b"base")
        .unwrap_or_else(|e| panic!("base commit: {e}"));
    assert_eq!(c.index_records, n);
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 5);
    assert_eq!(p.recovered.index_records, n);
    let mut want: Vec<[u8; INDEX_RECORD]> = (0..n).map(|j| index_record(run_of(j), j)).collect();
    want.sort_unstable_by_key(crate::index_record_run);
    let got = read_index_sorted(&mut p.checkpoint);
    assert_eq!(got.len() as u64, n, "base record count after reopen");
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        panic!(
            "base record for run {} missing or changed",
            crate::index_record_run(&want[i])
        );
    }
    drop((got, want));
    let d = [delete_record(run_of(0)), index_record(3, 3)];
    commit_delta(&mut p, &d, b"after");
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 5);
    let got = read_index_sorted(&mut p.checkpoint);
    assert_eq!(got.len() as u64, n);
    let has = |run| {
        got.binary_search_by_key(&run, crate::index_record_run)
            .is_ok()
    };
    assert!(!has(run_of(0)) && has(3), "a delta on top of a base");
}

/// The committed index sorted by run (cheaper than a map for a million
/// records), checking that no run is listed twice.
fn read_index_sorted<C: CheckpointStore>(c: &mut C) -> Vec<[u8; INDEX_RECORD]> {
    let mut all = Vec::new();
    let count = c
        .read_index(&mut |chunk| {
            assert_eq!(
                chunk.len() % INDEX_RECORD,
                0,
                "index chunk of {} bytes",
                chunk.len()
            );
            all.extend(chunk.chunks_exact(INDEX_RECORD).map(|r| {
                let mut rec = [0u8; INDEX_RECORD];
                rec.copy_from_slice(r);
                rec
            }));
            Ok(())
        })
        .unwrap_or_else(|e| panic!("read_index failed: {e}"));
    assert_eq!(
        count,
        all.len() as u64,
        "read_index returned a count other than it visited"
    );
    all.sort_unstable_by_key(crate::index_record_run);
    let runs = all.windows(2).map(|w| {
        (
            crate::index_record_run(&w[0]),
            crate::index_record_run(&w[1]),
        )
    });
    if let Some((run, _)) = runs.into_iter().find(|(a, b)| a == b) {
        panic!("run {run} listed twice in the index");
    }
    all
}

/// Bad index input is refused without changing anything: partial records in
/// a delta or a base chunk, a base committed without `begin_base`, a chunk
/// without a base.
pub fn index_bad_input<H: Harness>(h: &mut H) {
    let mut s = h.open();
    let mut p = open(&s, 0);
    commit_delta(&mut p, &[index_record(1, 1)], b"good");
    let good = read_index(&mut p.checkpoint);
    let r = p
        .checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&[0u8; 33]), b"bad");
    assert!(r.is_err(), "a 33-byte delta must be refused");
    let r = p.checkpoint.commit(&mut p.runs, IndexChange::Base, b"bad");
    assert!(
        r.is_err(),
        "a base commit without begin_base must be refused"
    );
    assert!(
        p.checkpoint.base_chunk(&[0u8; 32]).is_err(),
        "a chunk without a base"
    );
    p.checkpoint
        .begin_base()
        .unwrap_or_else(|e| panic!("begin_base: {e}"));
    assert!(
        p.checkpoint.base_chunk(&[0u8; 31]).is_err(),
        "a 31-byte base chunk"
    );
    assert_eq!(read_index(&mut p.checkpoint), good);
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"good"[..]));
    assert_eq!(read_index(&mut p.checkpoint), good);
}

/// One committed state as the suite expects to find it.
#[derive(Clone, Debug)]
struct State {
    checkpoint: Vec<u8>,
    index: Index,
    position: u64,
    frames: Vec<(BlobRef, Vec<u8>)>,
}

fn check_state<S: Storage>(p: &mut ShardParts<S>, a: &State, b: &State, what: &str) -> State {
    let got = p.recovered.checkpoint.clone().unwrap_or_default();
    let which = if got == b.checkpoint {
        b
    } else if got == a.checkpoint {
        a
    } else {
        panic!("{what}: recovered a checkpoint that was never committed");
    };
    assert_eq!(
        p.recovered.store_position, which.position,
        "{what}: store position of another commit"
    );
    assert_eq!(
        p.runs.position(),
        which.position,
        "{what}: the store was not rolled back"
    );
    assert_eq!(
        read_index(&mut p.checkpoint),
        which.index,
        "{what}: index of another commit"
    );
    let mut out = Vec::new();
    for (blob, bytes) in &which.frames {
        p.runs
            .read(*blob, &mut out)
            .unwrap_or_else(|e| panic!("{what}: committed frame lost: {e}"));
        assert!(out == *bytes, "{what}: committed frame changed");
    }
    for (blob, _) in b.frames.iter().filter(|f| !which.frames.contains(f)) {
        assert!(
            p.runs.read(*blob, &mut out).is_err(),
            "{what}: an uncommitted frame survived"
        );
    }
    which.clone()
}

/// Marks a round that streams the change and crashes without committing.
const NOT_CALLED: u32 = u32::MAX;

fn arm<H: Harness>(h: &mut H, s: &H::S, step: Option<u32>) {
    if let Some(k) = step.filter(|&k| k != NOT_CALLED) {
        h.crash_in_commit(s, 2, k);
    }
}

/// A crash at any point of a commit yields the previous commit or the new
/// one whole (index, checkpoint and store position together), never a mix.
/// Crashes just before and just after a commit are always checked; crashes
/// inside one need [`super::Capabilities::commit_crash_points`].
pub fn commit_atomic<H: Harness>(h: &mut H) {
    let points = h.capabilities().commit_crash_points;
    let mut s = h.open();
    let mut p = open(&s, 2);
    let mut cur = State {
        checkpoint: Vec::new(),
        index: Index::new(),
        position: 0,
        frames: Vec::new(),
    };
    // (crash point or None for "after the commit returned", base or delta)
    let mut plan: Vec<(Option<u32>, bool)> = vec![
        (None, false),
        (Some(NOT_CALLED), false),
        (None, true),
        (Some(NOT_CALLED), true),
    ];
    for step in 0..points {
        plan.push((Some(step), false));
        plan.push((Some(step), true));
    }
    if points == 0 {
        skip(
            "commit_atomic (inside a commit)",
            "the harness declares no commit crash points",
        );
    }
    for (round, &(step, base)) in plan.iter().enumerate() {
        let r = round as u64;
        let what = format!("round {round} (crash point {step:?}, base {base})");
        // The next state: new frames, a changed index, a new checkpoint.
        let mut next = cur.clone();
        for i in 0..3 {
            let bytes = frame(100 * i + r as usize, r);
            let blob = p
                .runs
                .append(&bytes)
                .unwrap_or_else(|e| panic!("{what}: append: {e}"));
            next.frames.push((blob, bytes));
        }
        next.position = p.runs.position();
        next.checkpoint = format!("checkpoint {round}").into_bytes();
        let result = if base {
            next.index = (0..50)
                .map(|i| (r * 100 + i, index_record(r * 100 + i, r)))
                .collect();
            p.checkpoint
                .begin_base()
                .unwrap_or_else(|e| panic!("{what}: begin_base: {e}"));
            let all: Vec<_> = next.index.values().copied().collect();
            for c in all.chunks(7) {
                p.checkpoint
                    .base_chunk(&concat(c))
                    .unwrap_or_else(|e| panic!("{what}: chunk: {e}"));
            }
            arm(h, &s, step);
            (step != Some(NOT_CALLED)).then(|| {
                p.checkpoint
                    .commit(&mut p.runs, IndexChange::Base, &next.checkpoint)
            })
        } else {
            let delta: Vec<_> = cur
                .index
                .keys()
                .take(3)
                .map(|&run| delete_record(run))
                .chain((0..5).map(|i| index_record(r * 100 + 50 + i, r)))
                .collect();
            apply(&mut next.index, &delta);
            arm(h, &s, step);
            let delta = concat(&delta);
            (step != Some(NOT_CALLED)).then(|| {
                p.checkpoint
                    .commit(&mut p.runs, IndexChange::Delta(&delta), &next.checkpoint)
            })
        };
        if let (None, Some(Err(e))) = (step, result) {
            panic!("{what}: commit: {e}");
        }
        drop(p);
        s = h.crash(s);
        p = open(&s, 2);
        if step.is_none() {
            // The commit returned: it must be the one found.
            cur = check_state(&mut p, &next, &next, &what);
        } else {
            cur = check_state(&mut p, &cur, &next, &what);
        }
    }
}
