use std::collections::BTreeMap;

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

const YEAR_MS: u64 = 365 * 24 * 3600 * 1000;

/// A delta from 0 up to about three years, spread over every scale (so
/// every level and the overflow get keys).
fn delta(rng: &mut fastrand::Rng) -> u64 {
    match rng.u32(0..10) {
        0 => 0,
        1 => 3 * YEAR_MS + rng.u64(0..YEAR_MS),
        _ => {
            let bits = rng.u32(0..37);
            rng.u64(0..1u64 << bits)
        }
    }
}

/// The wheel against an ordered map: random inserts (past, near, far)
/// and polls at random times, forward and backward. Every key fires
/// exactly once, at the first poll at or after its deadline, in deadline
/// order, and `next_wake` is the exact earliest deadline. Steps:
/// `FUSEE_MODEL_STEPS` (default 200 000); seed: `FUSEE_SEED`.
#[test]
fn wheel_matches_model() {
    run_model(steps(200_000), false);
}

/// As [`wheel_matches_model`], but the clock only ever polls at
/// `next_wake()`: each poll fires something, and each key fires exactly
/// at its deadline (or at the first poll after its insert if that was
/// already past).
#[test]
fn polling_at_next_wake_fires_on_time() {
    run_model(steps(200_000), true);
}

fn run_model(steps: usize, at_next_wake: bool) {
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let start = rng.u64(0..1 << 45);
    let mut w: Wheel<u64> = Wheel::new(start);
    // (deadline, key) -> the earliest time it may fire (its deadline, or
    // the wheel's time when it was inserted in the past).
    let mut model: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    let mut elapsed = start;
    let mut out = Vec::new();
    let mut key = 0u64;
    for step in 0..steps {
        let ctx = format!("seed {seed} step {step}");
        if rng.u32(0..3) != 0 || model.is_empty() {
            let at = if rng.u32(0..10) == 0 {
                elapsed.saturating_sub(delta(&mut rng))
            } else {
                elapsed + delta(&mut rng)
            };
            key += 1;
            w.insert(at, key);
            model.insert((at, key), at.max(elapsed));
        } else {
            let now = if at_next_wake {
                w.next_wake().unwrap_or(elapsed)
            } else if rng.u32(0..8) == 0 {
                elapsed.saturating_sub(delta(&mut rng))
            } else {
                elapsed + delta(&mut rng)
            };
            out.clear();
            w.poll(now, &mut out);
            elapsed = elapsed.max(now);
            let due: Vec<(u64, u64)> = model.range(..(elapsed + 1, 0)).map(|(&k, _)| k).collect();
            let mut got: Vec<(u64, u64)> = Vec::with_capacity(out.len());
            for &k in &out {
                let (&(at, _), &earliest) = model
                    .iter()
                    .find(|((_, kk), _)| *kk == k)
                    .unwrap_or_else(|| panic!("{ctx}: key {k} fired twice or never inserted"));
                assert!(
                    at <= elapsed,
                    "{ctx}: key {k} at {at} fired early at {elapsed}"
                );
                if at_next_wake {
                    assert_eq!(earliest, now, "{ctx}: key {k} fired late");
                }
                got.push((at, k));
            }
            assert!(
                got.windows(2).all(|p| p[0].0 <= p[1].0),
                "{ctx}: fired out of order"
            );
            if at_next_wake {
                assert!(!got.is_empty(), "{ctx}: poll at next_wake fired nothing");
            }
            got.sort_unstable();
            assert_eq!(got, due, "{ctx}: fired set");
            for k in due {
                model.remove(&k);
            }
        }
        assert_eq!(w.elapsed(), elapsed, "{ctx}");
        assert_eq!(
            (w.len(), w.is_empty()),
            (model.len(), model.is_empty()),
            "{ctx}"
        );
        let want = model.values().min().copied();
        assert_eq!(w.next_wake(), want, "{ctx}: next_wake");
        // Keep the model small enough that the linear key lookup above
        // stays cheap.
        if model.len() > 2_000 {
            let far = model.keys().next_back().map_or(elapsed, |&(at, _)| at);
            out.clear();
            w.poll(far, &mut out);
            assert_eq!(out.len(), model.len(), "{ctx}: drain");
            model.clear();
            elapsed = elapsed.max(far);
        }
    }
}

/// A jump of three years fires a hundred thousand keys at once, in order,
/// without walking the milliseconds between.
#[test]
fn huge_jump_fires_everything_in_order() {
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut w = Wheel::new(5);
    let mut ats = Vec::new();
    for i in 0..100_000u64 {
        let at = rng.u64(0..3 * YEAR_MS);
        w.insert(at, (at, i));
        ats.push(at);
    }
    let mut out = Vec::new();
    w.poll(3 * YEAR_MS, &mut out);
    assert_eq!(out.len(), ats.len(), "seed {seed}");
    assert!(out.windows(2).all(|p| p[0].0 <= p[1].0), "seed {seed}");
    assert!(w.is_empty() && w.next_wake().is_none(), "seed {seed}");
    w.insert(u64::MAX, (u64::MAX, 0));
    assert_eq!(w.next_wake(), Some(u64::MAX));
    w.poll(u64::MAX - 1, &mut out);
    assert_eq!(out.len(), ats.len());
    w.poll(u64::MAX, &mut out);
    assert_eq!(out.len(), ats.len() + 1);
}
