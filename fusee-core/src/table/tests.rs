use std::collections::HashMap;

use super::*;

fn steps(default: usize) -> usize {
    std::env::var("FUSEE_MODEL_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
    std::env::var("FUSEE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..))
}

#[test]
fn entry_is_32_bytes() {
    assert_eq!(std::mem::size_of::<Entry>(), 32);
    assert_eq!(RECORD, 32);
}

#[test]
fn entry_fields_round_trip() {
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    for _ in 0..10_000 {
        let run = rng.u64(1..=MASK48);
        let id = rng.u64(..);
        let state = rng.u8(..);
        let mut e = Entry::new(run, id, state);
        assert_eq!(
            (e.run(), e.id_hash(), e.state(), e.flags()),
            (run, id, state, 0),
            "seed {seed}"
        );
        let (off, len, time, flags) = (
            rng.u64(..=MASK48),
            rng.u32(..),
            rng.u64(..=MASK48),
            rng.u8(..),
        );
        e.set_location(off, len);
        e.set_time(time);
        e.set(flags, true);
        let state2 = rng.u8(..);
        e.set_state(state2);
        assert_eq!(
            (
                e.run(),
                e.id_hash(),
                e.state(),
                e.flags(),
                e.offset(),
                e.len(),
                e.time()
            ),
            (run, id, state2, flags, off, len, time),
            "seed {seed}"
        );
        let f = rng.u8(..);
        e.set(f, false);
        assert_eq!(e.flags(), flags & !f, "seed {seed}");
        assert!(
            e.has(0) && (f & !flags != 0 || e.flags() & f == 0),
            "seed {seed}"
        );
        e.set(f, true);
        assert!(e.has(f), "seed {seed}");
        assert_eq!(
            (e.offset(), e.len(), e.time()),
            (off, len, time),
            "seed {seed}"
        );
    }
}

#[test]
fn time_saturates_and_states_classify() {
    let mut e = Entry::new(7, 1, PARKED);
    e.set_time(u64::MAX);
    assert_eq!(e.time(), MASK48);
    assert!(e.is_parked() && e.done().is_none());
    e.set_state(LOADED);
    assert!(!e.is_parked() && e.done().is_none());
    for s in Status::ALL {
        e.set_state(DONE + s as u8);
        assert!(e.is_parked());
        assert_eq!(e.done(), Some(s));
    }
    e.set_state(DELETED);
    assert!(!e.is_parked() && e.done().is_none());
}

#[test]
fn record_round_trip_keeps_only_chained() {
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    for _ in 0..10_000 {
        let state = match rng.u8(0..8) {
            7 => PARKED,
            s => DONE + s,
        };
        let mut e = Entry::new(rng.u64(1..=MASK48), rng.u64(..), state);
        e.set_location(rng.u64(..=MASK48), rng.u32(..));
        e.set_time(rng.u64(..=MASK48));
        e.set(rng.u8(..), true);
        let bytes = e.record();
        let back = Entry::from_record(&bytes).unwrap_or_else(|| panic!("seed {seed}: {e:?}"));
        let mut want = e;
        want.set(!flag::PERSISTED, false);
        assert_eq!(back, want, "seed {seed}");
        assert_eq!(back.record(), bytes, "seed {seed}");
    }
    let del = Entry::new(99, 0, DELETED);
    assert_eq!(Entry::from_record(&del.record()), Some(del));
}

#[test]
fn record_layout_is_as_documented() {
    let mut e = Entry::new(0x0605_0403_0201, 0x1122_3344_5566_7788, DONE + 3);
    e.set_location(0x0a09_0807_0605, 0xdead_beef);
    e.set_time(0x1615_1413_1211);
    e.set(flag::CHAINED | flag::DIRTY, true);
    let r = e.record();
    assert_eq!(&r[0..8], &0x1122_3344_5566_7788u64.to_le_bytes());
    assert_eq!(&r[8..14], &[1, 2, 3, 4, 5, 6]);
    assert_eq!((r[14], r[15]), (11, flag::CHAINED));
    assert_eq!(&r[16..22], &[5, 6, 7, 8, 9, 10]);
    assert_eq!(&r[22..24], &[0xef, 0xbe]);
    assert_eq!(&r[24..30], &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16]);
    assert_eq!(&r[30..32], &[0xad, 0xde]);
}

#[test]
fn from_record_rejects_garbage() {
    let good = {
        let mut e = Entry::new(5, 9, PARKED);
        e.set_location(100, 20);
        e.record()
    };
    assert!(Entry::from_record(&good).is_some());
    let with = |f: &dyn Fn(&mut [u8; RECORD])| {
        let mut r = good;
        f(&mut r);
        Entry::from_record(&r)
    };
    // Run 0.
    assert_eq!(with(&|r| r[8..14].fill(0)), None);
    // States that are never persisted.
    for s in (0..=255u8).filter(|&s| s != PARKED && !(DONE..=DELETED).contains(&s)) {
        assert_eq!(with(&|r| r[14] = s), None, "state {s}");
    }
    assert_eq!(with(&|r| r[14] = LOADED), None);
    // In-memory flags.
    for f in [flag::NEAR, flag::PENDING, flag::DIRTY, flag::IN_ID, 64, 128] {
        assert_eq!(with(&|r| r[15] = f), None, "flag {f}");
    }
    assert!(with(&|r| r[15] = flag::CHAINED).is_some());
    assert!(with(&|r| r[15] = flag::APART).is_some());
    assert!(with(&|r| r[15] = flag::PERSISTED).is_some());
    // DELETED with anything but the run set.
    let del = Entry::new(5, 0, DELETED).record();
    assert!(Entry::from_record(&del).is_some());
    for i in (0..8).chain(15..32) {
        let mut r = del;
        r[i] = 1;
        assert_eq!(Entry::from_record(&r), None, "byte {i}");
    }
    // Random bytes never panic; what passes is canonical.
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    for _ in 0..100_000 {
        let mut r = [0u8; RECORD];
        rng.fill(&mut r);
        if rng.bool() {
            r[14] = rng.u8(0..16);
            r[15] &= flag::PERSISTED;
        }
        if let Some(e) = Entry::from_record(&r) {
            assert_eq!(e.record(), r, "seed {seed}");
            assert!(
                e.run() != 0 && (e.is_parked() || e.state() == DELETED),
                "seed {seed}"
            );
        }
    }
}

/// The table against a model: random insert, remove, index_id, lookups,
/// edits, reserve, compact and iteration. Steps: `FUSEE_MODEL_STEPS`
/// (default 200 000); seed: `FUSEE_SEED` (default random, printed on failure).
#[test]
fn table_matches_model() {
    model_run(Layout::Compact, steps(200_000));
}

/// As [`table_matches_model`] with the [`Layout::Roomy`] indexes
/// (`FUSEE_MODEL_STEPS / 2` steps).
#[test]
fn roomy_table_matches_model() {
    model_run(Layout::Roomy, steps(200_000) / 2);
}

#[derive(Clone, Copy)]
struct Model {
    slot: Slot,
    entry: Entry,
}

fn model_run(layout: Layout, steps: usize) {
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut t = RunTable::with_layout(layout);
    let mut runs: HashMap<RunId, Model> = HashMap::new();
    let mut order: Vec<RunId> = Vec::new();
    let mut ids: HashMap<u64, RunId> = HashMap::new();
    let mut next_run: RunId = 1;
    // Phases alternate between growing and shrinking, so compaction and
    // slot reuse both happen.
    let phase_len = (steps / 4).max(1000);
    let id_pool = 5_000u64;
    let ctx = |step: usize| format!("seed {seed} step {step} layout {layout:?}");

    for step in 0..steps {
        let growing = (step / phase_len).is_multiple_of(2);
        let op = rng.u32(0..100);
        match op {
            0..=49 if growing || order.is_empty() || op < 5 => {
                // Insert a new run (run numbers increase with random gaps,
                // as after expiry); ID hashes collide on purpose.
                let run = next_run;
                next_run += rng.u64(1..4);
                let idh = rng.u64(0..id_pool).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let state = [LOADED, PARKED, DONE, DONE + 5][rng.usize(0..4)];
                let mut e = Entry::new(run, idh, state);
                e.set_time(rng.u64(..1 << 40));
                e.set_location(rng.u64(..1 << 40), rng.u32(..));
                e.set(flag::IN_ID, rng.bool()); // must be cleared by insert
                let slot = t.insert(e);
                e.set(flag::IN_ID, false);
                assert_eq!(*t.get(slot), e, "{}", ctx(step));
                runs.insert(run, Model { slot, entry: e });
                order.push(run);
                if rng.bool() {
                    t.index_id(slot);
                    index_model(&mut ids, &mut runs, run);
                }
            }
            0..=49 => {
                let i = rng.usize(0..order.len());
                let run = order.swap_remove(i);
                let m = runs.remove(&run).expect("model run");
                let e = t.remove(m.slot);
                assert_eq!(e, m.entry, "{}", ctx(step));
                if ids.get(&e.id_hash()) == Some(&run) {
                    ids.remove(&e.id_hash());
                }
            }
            50..=57 if !order.is_empty() => {
                let run = order[rng.usize(0..order.len())];
                t.index_id(runs[&run].slot);
                index_model(&mut ids, &mut runs, run);
            }
            58..=64 if !order.is_empty() => {
                // Edit through get_mut (never run, ID hash or IN_ID).
                let run = order[rng.usize(0..order.len())];
                let m = runs.get_mut(&run).expect("model run");
                let e = t.get_mut(m.slot);
                e.set_time(rng.u64(..1 << 47));
                e.set_location(rng.u64(..1 << 47), rng.u32(..));
                e.set_state(rng.u8(1..15));
                let f = rng.u8(..) & !flag::IN_ID;
                e.set(!flag::IN_ID, false);
                e.set(f, true);
                m.entry = *e;
            }
            65..=84 => {
                // Lookups, hits and misses.
                let run = if !order.is_empty() && rng.bool() {
                    order[rng.usize(0..order.len())]
                } else {
                    rng.u64(0..next_run + 10)
                };
                let want = runs.get(&run).map(|m| m.slot);
                assert_eq!(t.find_run(run), want, "{} run {run}", ctx(step));
                assert_eq!(t.has_run(run), want.is_some(), "{}", ctx(step));
                let idh = rng.u64(0..id_pool + 10).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let want = ids.get(&idh).map(|r| runs[r].slot);
                assert_eq!(t.find_id(idh), want, "{} id {idh:x}", ctx(step));
            }
            85 if rng.u32(0..20) == 0 => t.reserve(rng.usize(0..20_000)),
            86..=87 => {
                let slot = rng.u32(0..t.used() + 10);
                let want = runs.values().find(|m| m.slot == slot).map(|m| m.entry);
                if rng.u32(0..50) == 0 || slot >= t.used() {
                    assert_eq!(t.live_at(slot).copied(), want, "{} slot {slot}", ctx(step));
                } else if let Some(e) = t.live_at(slot) {
                    assert_eq!(runs[&e.run()].slot, slot, "{}", ctx(step));
                }
            }
            88 if rng.u32(0..10) == 0 => {
                let before: Vec<Entry> = t.iter().map(|(_, e)| *e).collect();
                let fragmented = (t.used() as usize) > 2 * CHUNK && t.len() * 2 < t.used() as usize;
                let moved = t.compact();
                assert!(moved <= fragmented, "{}", ctx(step));
                let after: Vec<Entry> = t.iter().map(|(_, e)| *e).collect();
                assert_eq!(before, after, "{}: compaction keeps order", ctx(step));
                if fragmented {
                    assert_eq!(t.used() as usize, t.len(), "{}", ctx(step));
                }
                for (s, e) in t.iter() {
                    runs.get_mut(&e.run()).expect("model run").slot = s;
                }
            }
            _ => {}
        }
        if step.is_multiple_of(20_000) || step + 1 == steps {
            check_all(&t, &runs, &ids, &ctx(step));
        }
    }
}

/// The model of [`RunTable::index_id`]: the latest run of a hash wins.
fn index_model(ids: &mut HashMap<u64, RunId>, runs: &mut HashMap<RunId, Model>, run: RunId) {
    let h = runs[&run].entry.id_hash();
    let winner = match ids.get(&h) {
        Some(&old) if old > run => old,
        _ => run,
    };
    if let Some(&old) = ids.get(&h) {
        runs.get_mut(&old)
            .expect("model run")
            .entry
            .set(flag::IN_ID, false);
    }
    ids.insert(h, winner);
    runs.get_mut(&winner)
        .expect("model run")
        .entry
        .set(flag::IN_ID, true);
}

fn check_all(t: &RunTable, runs: &HashMap<RunId, Model>, ids: &HashMap<u64, RunId>, ctx: &str) {
    assert_eq!(t.len(), runs.len(), "{ctx}");
    assert_eq!(t.is_empty(), runs.is_empty(), "{ctx}");
    let mut n = 0;
    let mut last = None;
    for (s, e) in t.iter() {
        assert!(last < Some(s), "{ctx}: slot order");
        last = Some(s);
        let m = runs
            .get(&e.run())
            .unwrap_or_else(|| panic!("{ctx}: stray run {}", e.run()));
        assert_eq!((m.slot, m.entry), (s, *e), "{ctx}");
        assert!(s < t.used(), "{ctx}");
        n += 1;
    }
    assert_eq!(n, runs.len(), "{ctx}");
    for (&h, &run) in ids {
        assert_eq!(t.find_id(h), Some(runs[&run].slot), "{ctx}: id {h:x}");
    }
    for (&run, m) in runs {
        assert_eq!(t.find_run(run), Some(m.slot), "{ctx}: run {run}");
    }
    assert!(t.heap_bytes() >= t.used() as usize * 32, "{ctx}");
}

fn parked_million(t: &mut RunTable, n: u64) {
    for run in 1..=n {
        let mut e = Entry::new(run, crate::wire::hash_id(&run.to_string()), PARKED);
        e.set_location(run * 100, 100);
        let slot = t.insert(e);
        t.index_id(slot);
    }
}

/// The design figure: heap bytes per run of a table holding a million
/// parked runs, grown one insert at a time and bulk-loaded after `reserve`.
#[test]
fn heap_bytes_per_run_at_a_million() {
    const N: u64 = 1_000_000;
    let mut grown = RunTable::new();
    parked_million(&mut grown, N);
    let per_run = grown.heap_bytes() as f64 / N as f64;
    assert!(per_run <= 40.0, "grown: {per_run:.2} B per run");
    let mut loaded = RunTable::new();
    loaded.reserve(N as usize);
    parked_million(&mut loaded, N);
    let per_run = loaded.heap_bytes() as f64 / N as f64;
    assert!(per_run <= 40.0, "reserved: {per_run:.2} B per run");
    assert_eq!(loaded.find_run(N / 2), Some((N / 2 - 1) as Slot));
}
