//! Index and commit clauses.

use fusee_core::shard::BlobRef;

use super::check::{Clause, check_bytes, check_index, check_matches};
use super::{
    Harness, Index, check, check_eq, concat, delete_record, fail, frame, index_record, must, open,
    read_index, scaled,
};
use crate::{
    CheckpointStore, INDEX_RECORD, IndexChange, RunStore, ShardParts, Storage, StorageError,
};

fn commit_delta<S: Storage>(p: &mut ShardParts<S>, delta: &[[u8; INDEX_RECORD]], ck: &[u8]) {
    must!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&concat(delta)), ck),
        "commit of a {}-record delta with checkpoint {:?}",
        delta.len(),
        String::from_utf8_lossy(ck)
    );
}

/// Checks what the shard recovered: its checkpoint bytes and index size.
fn check_recovered<S: Storage>(p: &ShardParts<S>, checkpoint: &[u8], index: &Index, when: &str) {
    check_eq!(
        p.recovered.checkpoint.as_deref(),
        Some(checkpoint),
        "{when}, recovered.checkpoint must be the last commit's"
    );
    check_eq!(
        p.recovered.index_records,
        index.len() as u64,
        "{when}, recovered.index_records must be the last commit's index size"
    );
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
    let _c = Clause::enter("index_delta");
    let mut s = h.open();
    let mut p = open(&s, 0);
    check_eq!(
        p.recovered.checkpoint,
        None,
        "a fresh shard has no checkpoint: recovered.checkpoint"
    );
    check_eq!(
        p.recovered.index_records,
        0,
        "a fresh shard's recovered.index_records"
    );
    check_index(
        &read_index(&mut p.checkpoint),
        &Index::new(),
        format_args!("a fresh shard's index"),
    );
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
        check_index(
            &read_index(&mut p.checkpoint),
            &model,
            format_args!("the index after delta commit {i}"),
        );
    }
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    check_recovered(&p, b"ck1", &model, "after a reopen");
    check_index(
        &read_index(&mut p.checkpoint),
        &model,
        format_args!("the index after a reopen"),
    );
    let d3: Vec<_> = (1..=10).map(delete_record).collect();
    commit_delta(&mut p, &d3, b"ck2");
    apply(&mut model, &d3);
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 0);
    check_recovered(&p, b"ck2", &model, "after a crash");
    check_index(
        &read_index(&mut p.checkpoint),
        &model,
        format_args!("the index after a crash"),
    );
    // An empty checkpoint is a checkpoint, not "none".
    commit_delta(&mut p, &[], b"");
    drop(p);
    s = h.reopen(s);
    let p = open(&s, 0);
    check_recovered(
        &p,
        b"",
        &model,
        "after a commit of an empty checkpoint and a reopen",
    );
}

/// A base of 1,000,000 records (scaled by `FUSEE_CONFORMANCE_SCALE`) streamed
/// in chunks replaces the index whole; a base begun but not committed before
/// a crash leaves the previous index; deltas apply on top of a base.
pub fn index_base_streamed<H: Harness>(h: &mut H) {
    let _c = Clause::enter("index_base_streamed");
    let n = scaled(1_000_000) as u64;
    let mut s = h.open();
    let mut p = open(&s, 5);
    commit_delta(&mut p, &[index_record(7, 7), index_record(8, 8)], b"old");
    let old = read_index(&mut p.checkpoint);
    // A base that is streamed but never committed.
    must!(p.checkpoint.begin_base(), "begin_base");
    must!(
        p.checkpoint.base_chunk(&concat(&[index_record(1, 1)])),
        "base_chunk of one record"
    );
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 5);
    check_recovered(
        &p,
        b"old",
        &old,
        "after a crash with a base streamed, not committed",
    );
    check_index(
        &read_index(&mut p.checkpoint),
        &old,
        format_args!("after a crash with a base streamed, not committed, the previous index"),
    );
    // The real base, in chunks of varying size; runs spread over 48 bits.
    let run_of = |i: u64| (i.wrapping_mul(0x9E37_79B9) & ((1 << 47) - 1)) | 1 << 47;
    must!(
        p.checkpoint.begin_base(),
        "begin_base of the {n}-record base"
    );
    let mut i = 0u64;
    let mut chunk = Vec::new();
    let mut chunk_len = 1u64;
    while i < n {
        chunk.clear();
        let end = (i + chunk_len).min(n);
        for j in i..end {
            chunk.extend_from_slice(&index_record(run_of(j), j));
        }
        must!(
            p.checkpoint.base_chunk(&chunk),
            "base_chunk of records {i} to {}",
            end - 1
        );
        i = end;
        chunk_len = (chunk_len * 3).min(65_536);
    }
    let c = must!(
        p.checkpoint.commit(&mut p.runs, IndexChange::Base, b"base"),
        "commit of the {n}-record base"
    );
    check_eq!(
        c.index_records,
        n,
        "commit of the {n}-record base: the index_records it returns"
    );
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 5);
    check_eq!(
        p.recovered.index_records,
        n,
        "after a reopen, recovered.index_records of the {n}-record base"
    );
    let mut want: Vec<[u8; INDEX_RECORD]> = (0..n).map(|j| index_record(run_of(j), j)).collect();
    want.sort_unstable_by_key(crate::index_record_run);
    let got = read_index_sorted(&mut p.checkpoint);
    check_eq!(
        got.len() as u64,
        n,
        "after a reopen, the records read_index visits of the {n}-record base"
    );
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        fail(format_args!(
            "after a reopen, the base must hold every record streamed: expected run {}'s record in sorted position {i}; found run {}'s, or other bytes",
            crate::index_record_run(&want[i]),
            crate::index_record_run(&got[i])
        ));
    }
    drop((got, want));
    let d = [delete_record(run_of(0)), index_record(3, 3)];
    commit_delta(&mut p, &d, b"after");
    drop(p);
    s = h.crash(s);
    let mut p = open(&s, 5);
    let got = read_index_sorted(&mut p.checkpoint);
    check_eq!(
        got.len() as u64,
        n,
        "after a delta (one delete, one insert) on the base and a crash, the index size"
    );
    let has = |run| {
        got.binary_search_by_key(&run, crate::index_record_run)
            .is_ok()
    };
    check_eq!(
        (has(run_of(0)), has(3)),
        (false, true),
        "after a delta on the base deleting run {} and adding run 3, and a crash: (has run {}, has run 3)",
        run_of(0),
        run_of(0)
    );
}

/// The committed index sorted by run (cheaper than a map for a million
/// records), checking that no run is listed twice.
fn read_index_sorted<C: CheckpointStore>(c: &mut C) -> Vec<[u8; INDEX_RECORD]> {
    let mut all = Vec::new();
    let count = must!(
        c.read_index(&mut |chunk| {
            check!(
                chunk.len() % INDEX_RECORD == 0,
                "read_index must visit whole {INDEX_RECORD}-byte records; found a chunk of {} bytes",
                chunk.len()
            );
            all.extend(chunk.chunks_exact(INDEX_RECORD).map(|r| {
                let mut rec = [0u8; INDEX_RECORD];
                rec.copy_from_slice(r);
                rec
            }));
            Ok(())
        }),
        "read_index"
    );
    check_eq!(
        count,
        all.len() as u64,
        "read_index must return how many records it visited"
    );
    all.sort_unstable_by_key(crate::index_record_run);
    let runs = all.windows(2).map(|w| {
        (
            crate::index_record_run(&w[0]),
            crate::index_record_run(&w[1]),
        )
    });
    if let Some((run, _)) = runs.into_iter().find(|(a, b)| a == b) {
        fail(format_args!(
            "read_index must visit each run once; found run {run} twice"
        ));
    }
    all
}

/// Bad index input is refused with `Misuse` without changing anything:
/// partial records (33 bytes) in a delta, partial records (31 and 33 bytes)
/// in a base chunk, a base committed without `begin_base`, a chunk without
/// a base.
pub fn index_bad_input<H: Harness>(h: &mut H) {
    let _c = Clause::enter("index_bad_input");
    let mut s = h.open();
    let mut p = open(&s, 0);
    commit_delta(&mut p, &[index_record(1, 1)], b"good");
    let good = read_index(&mut p.checkpoint);
    let misuse = "Err(Misuse), changing nothing";
    check_matches!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Delta(&[0u8; 33]), b"bad")
            .map(drop),
        Err(StorageError::Misuse { .. }),
        misuse,
        "commit of a 33-byte delta (a partial index record)"
    );
    check_matches!(
        p.checkpoint
            .commit(&mut p.runs, IndexChange::Base, b"bad")
            .map(drop),
        Err(StorageError::Misuse { .. }),
        misuse,
        "commit of IndexChange::Base without begin_base"
    );
    check_matches!(
        p.checkpoint.base_chunk(&[0u8; 32]),
        Err(StorageError::Misuse { .. }),
        misuse,
        "base_chunk without begin_base"
    );
    must!(p.checkpoint.begin_base(), "begin_base");
    for len in [31, 33] {
        check_matches!(
            p.checkpoint.base_chunk(&vec![0u8; len]),
            Err(StorageError::Misuse { .. }),
            misuse,
            "base_chunk of {len} bytes (a partial index record)"
        );
    }
    check_index(
        &read_index(&mut p.checkpoint),
        &good,
        format_args!("after refused input, the last committed index"),
    );
    drop(p);
    s = h.reopen(s);
    let mut p = open(&s, 0);
    check_recovered(&p, b"good", &good, "after refused input and a reopen");
    check_index(
        &read_index(&mut p.checkpoint),
        &good,
        format_args!("after refused input and a reopen, the last committed index"),
    );
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
        fail(format_args!(
            "{what}: expected checkpoint {:?} or {:?}; found {:?}, never committed",
            String::from_utf8_lossy(&a.checkpoint),
            String::from_utf8_lossy(&b.checkpoint),
            String::from_utf8_lossy(&got)
        ));
    };
    let name = String::from_utf8_lossy(&which.checkpoint);
    check_eq!(
        p.recovered.store_position,
        which.position,
        "{what}: recovered.store_position must be that of the commit found ({name:?})"
    );
    check_eq!(
        p.runs.position(),
        which.position,
        "{what}: the store must be rolled back to the commit found ({name:?}): its position"
    );
    check_index(
        &read_index(&mut p.checkpoint),
        &which.index,
        format_args!("{what}: the index must be that of the commit found ({name:?})"),
    );
    let mut out = Vec::new();
    for (blob, bytes) in &which.frames {
        must!(
            p.runs.read(*blob, &mut out),
            "{what}: the read of frame {blob:?} committed by {name:?}"
        );
        check_bytes(
            &out,
            bytes,
            format_args!("{what}: frame {blob:?} committed by {name:?}"),
        );
    }
    for (blob, _) in b.frames.iter().filter(|f| !which.frames.contains(f)) {
        let r = p.runs.read(*blob, &mut out);
        check!(
            r.is_err(),
            "{what}: the read of frame {blob:?}, appended after the commit found ({name:?}), must fail; found Ok with {} bytes",
            out.len()
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
    let clause = Clause::enter("commit_atomic");
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
    // Prints the skip of the crashes inside a commit if the harness has
    // no crash points; the plan above then has none.
    let _ = clause.skips(h);
    for (round, &(step, base)) in plan.iter().enumerate() {
        let r = round as u64;
        let what = format!("round {round} (crash point {step:?}, base {base})");
        // The next state: new frames, a changed index, a new checkpoint.
        let mut next = cur.clone();
        for i in 0..3 {
            let bytes = frame(100 * i + r as usize, r);
            let blob = must!(p.runs.append(&bytes), "{what}: append of a frame");
            next.frames.push((blob, bytes));
        }
        next.position = p.runs.position();
        next.checkpoint = format!("checkpoint {round}").into_bytes();
        let result = if base {
            next.index = (0..50)
                .map(|i| (r * 100 + i, index_record(r * 100 + i, r)))
                .collect();
            must!(p.checkpoint.begin_base(), "{what}: begin_base");
            let all: Vec<_> = next.index.values().copied().collect();
            for c in all.chunks(7) {
                must!(p.checkpoint.base_chunk(&concat(c)), "{what}: base_chunk");
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
            fail(format_args!(
                "{what}: commit must succeed; found Err({e:?})"
            ));
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
