//! A hierarchical timing wheel: millisecond deadlines, O(1) insert, lazy
//! removal.
//!
//! Six levels of 64 slots: a key due at `at` sits at the level of the
//! highest 6-bit group in which `at` differs from the wheel's `elapsed`
//! time (level L's slots are 64^L ms wide, its range 64^(L+1) ms; six
//! levels cover 2^36 ms, about 2.2 years), in the slot named by that group
//! of `at`. Deadlines beyond the top level wait in an ordered overflow map;
//! deadlines already past wait in a due list. Keys are never removed
//! before they fire: their owner ignores a key that is no longer current,
//! so no cancel operation (or index of keys) is needed.
//!
//! Invariant: every key in level L shares all groups above L with
//! `elapsed`, and its group L is greater than `elapsed`'s. So every key of
//! a level is later than every key of the levels below it, and the lowest
//! occupied slot of the lowest occupied level holds the earliest deadline
//! (each slot keeps the minimum of its keys, exact because slots only gain
//! keys until they are emptied whole). When `elapsed` advances, the slots
//! it passed fire whole and the slot it lands in is re-placed one level
//! down (a key moves down at most five times in its life).
//!
//! Nothing here is persisted: durable timers are rebuilt from records.

use std::collections::BTreeMap;

const LEVELS: usize = 6;
const SLOTS: usize = 64;
const BITS: u32 = 6;
/// Deadlines whose highest group differing from `elapsed` is beyond this
/// many bits wait in the overflow map.
const WHEEL_BITS: u32 = BITS * LEVELS as u32;
/// A drained slot keeps its vector (for the next keys) up to this capacity.
const KEEP_CAPACITY: usize = 32;

/// Keys due at millisecond deadlines: see the [module documentation](self).
pub struct Wheel<K: Copy> {
    elapsed: u64,
    /// `LEVELS * SLOTS` slots of (deadline, key).
    slots: Vec<Vec<(u64, K)>>,
    /// Per level, bit s set when slot s holds keys.
    occupied: [u64; LEVELS],
    /// Per slot, the earliest deadline it holds (meaningless when empty).
    min_at: [u64; LEVELS * SLOTS],
    overflow: BTreeMap<u64, Vec<K>>,
    /// Keys inserted at or before `elapsed`: fire at the next poll.
    due: Vec<(u64, K)>,
    /// Scratch for a poll: keys firing, and keys moving down.
    fired: Vec<(u64, K)>,
    moving: Vec<(u64, K)>,
    len: usize,
}

impl<K: Copy> std::fmt::Debug for Wheel<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wheel")
            .field("elapsed", &self.elapsed)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<K: Copy> Wheel<K> {
    /// An empty wheel whose time is `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Wheel {
            elapsed: now_ms,
            slots: (0..LEVELS * SLOTS).map(|_| Vec::new()).collect(),
            occupied: [0; LEVELS],
            min_at: [u64::MAX; LEVELS * SLOTS],
            overflow: BTreeMap::new(),
            due: Vec::new(),
            fired: Vec::new(),
            moving: Vec::new(),
            len: 0,
        }
    }

    /// The wheel's time: the latest `now_ms` it was polled at (or created
    /// with).
    pub fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Keys held (fired keys are gone; stale keys count until they fire).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `key`, due at `at_ms`. A time at or before
    /// [`elapsed`](Self::elapsed) fires at the next poll. O(1) (the
    /// overflow map, for deadlines more than 2^36 ms ahead, is O(log n)).
    pub fn insert(&mut self, at_ms: u64, key: K) {
        self.len += 1;
        self.place(at_ms, key);
    }

    fn place(&mut self, at: u64, key: K) {
        if at <= self.elapsed {
            self.due.push((at, key));
            return;
        }
        let high = 63 - (at ^ self.elapsed).leading_zeros();
        let level = (high / BITS) as usize;
        if level >= LEVELS {
            self.overflow.entry(at).or_default().push(key);
            return;
        }
        let s = ((at >> (BITS * level as u32)) as usize) & (SLOTS - 1);
        let i = level * SLOTS + s;
        if self.occupied[level] & (1 << s) == 0 {
            self.occupied[level] |= 1 << s;
            self.min_at[i] = at;
        } else {
            self.min_at[i] = self.min_at[i].min(at);
        }
        self.slots[i].push((at, key));
    }

    /// The exact earliest deadline held (the wheel's time for keys already
    /// due); `None` when empty. Polling at this time fires at least one key.
    pub fn next_wake(&self) -> Option<u64> {
        if !self.due.is_empty() {
            return Some(self.elapsed);
        }
        for level in 0..LEVELS {
            if self.occupied[level] != 0 {
                let s = self.occupied[level].trailing_zeros() as usize;
                return Some(self.min_at[level * SLOTS + s]);
            }
        }
        self.overflow.keys().next().copied()
    }

    /// Appends to `out` every key due at or before `now_ms` and advances
    /// the wheel's time to `now_ms` (a `now_ms` before it advances nothing
    /// and fires only keys already due). Keys of one poll are appended in
    /// deadline order (ties in no promised order). Work is bounded by the
    /// keys fired or moved down plus 6 × 64 slot checks, however far the
    /// time jumps.
    pub fn poll(&mut self, now_ms: u64, out: &mut Vec<K>) {
        let mut fired = std::mem::take(&mut self.fired);
        let mut moving = std::mem::take(&mut self.moving);
        fired.append(&mut self.due);
        if now_ms > self.elapsed {
            self.advance(now_ms, &mut fired, &mut moving);
        }
        fired.sort_unstable_by_key(|&(at, _)| at);
        self.len -= fired.len();
        out.extend(fired.drain(..).map(|(_, k)| k));
        self.fired = fired;
        self.moving = moving;
    }

    fn advance(&mut self, now: u64, fired: &mut Vec<(u64, K)>, moving: &mut Vec<(u64, K)>) {
        let old = self.elapsed;
        for level in 0..LEVELS {
            let shift = BITS * level as u32;
            let mut fire_mask = u64::MAX;
            let mut split = None;
            if old >> (shift + BITS) == now >> (shift + BITS) {
                // Same range at this level: the slots before `now`'s fire,
                // the one it lands in moves down, the later ones stay.
                let g = ((now >> shift) as usize) & (SLOTS - 1);
                fire_mask = (1u64 << g) - 1;
                split = Some(g);
            }
            let mut bits = self.occupied[level] & fire_mask;
            while bits != 0 {
                let s = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let slot = self.take(level, s);
                fired.extend_from_slice(&slot);
                self.give_back(level, s, slot);
            }
            if let Some(g) = split
                && self.occupied[level] & (1 << g) != 0
            {
                let slot = self.take(level, g);
                for &(at, k) in &slot {
                    if at <= now {
                        fired.push((at, k));
                    } else {
                        moving.push((at, k));
                    }
                }
                self.give_back(level, g, slot);
            }
        }
        // Overflow keys: those now due fire, those now within the wheel's
        // range move in. Both are a prefix of the ordered map.
        while let Some(entry) = self.overflow.first_entry() {
            let at = *entry.key();
            if at <= now {
                fired.extend(entry.remove().into_iter().map(|k| (at, k)));
            } else if (at ^ now) >> WHEEL_BITS == 0 {
                moving.extend(entry.remove().into_iter().map(|k| (at, k)));
            } else {
                break;
            }
        }
        self.elapsed = now;
        for (at, k) in moving.drain(..) {
            debug_assert!(at > now);
            self.place(at, k);
        }
    }

    fn take(&mut self, level: usize, s: usize) -> Vec<(u64, K)> {
        self.occupied[level] &= !(1 << s);
        std::mem::take(&mut self.slots[level * SLOTS + s])
    }

    fn give_back(&mut self, level: usize, s: usize, mut slot: Vec<(u64, K)>) {
        let i = level * SLOTS + s;
        if slot.capacity() <= KEEP_CAPACITY && self.slots[i].is_empty() {
            slot.clear();
            self.slots[i] = slot;
        }
    }
}

#[cfg(test)]
mod tests;
