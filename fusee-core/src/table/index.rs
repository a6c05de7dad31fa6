//! A slot index: Robin Hood open addressing over bit-packed buckets.
//!
//! A bucket is `width` bits, packed back to back in a byte vector (padded by
//! 8 bytes so every bucket is read with one unaligned 8-byte load):
//!
//! | bits | meaning |
//! |---|---|
//! | 0..slot_bits | field: 0 = empty, otherwise slot + 1 |
//! | slot_bits..+4 | displacement from the key's home bucket, 15 = 15 or more |
//! | above | fingerprint: low bits of the key's hash (2 in the compact layout) |
//!
//! The home bucket of a hash is `(hash * capacity) >> 64` (multiply-shift
//! range reduction), so any capacity works, not only powers of two: the
//! owner sizes the index to the load it wants instead of doubling.
//!
//! Collisions are resolved by linear probing in Robin Hood order: a key
//! never sits behind one closer to its home. So a lookup at distance `d`
//! from its home stops at the first bucket whose displacement is below
//! `d`, and only looks at the table entry (a likely cache miss) of buckets
//! whose displacement is exactly `d` (keys with the same home: about 0.9
//! of them at 90% load) and whose fingerprint matches: so a lookup reads
//! about one entry for a hit and a fraction of one for a miss, with few
//! fingerprint bits. The displacement saturates at 15; the
//! rare key displaced further is recognised by its entry, and moving it
//! (insert, remove) reads its entry to learn its home.
//!
//! Removal shifts the following keys back (no tombstones), so the load is
//! exactly the live keys. The owner keeps the load below its maximum, so a
//! probe always meets an empty bucket within `capacity` steps.

use super::Slot;

/// Fewest buckets an index allocates.
const MIN_CAP: usize = 16;
const DISP_BITS: u32 = 4;
/// A stored displacement of 15 means "15 or more".
const SAT: u64 = (1 << DISP_BITS) - 1;

pub(super) struct Index {
    bytes: Vec<u8>,
    cap: usize,
    width: u32,
    slot_bits: u32,
    live: usize,
}

impl Index {
    /// An index without buckets: lookups miss, inserts need a `with_cap` first.
    pub(super) fn empty() -> Self {
        Index {
            bytes: Vec::new(),
            cap: 0,
            width: 32,
            slot_bits: 28,
            live: 0,
        }
    }

    /// Room for `cap` buckets of `slot_bits + 4 + fp_bits` bits that can
    /// name any slot below `2^slot_bits - 1`.
    pub(super) fn with_cap(cap: usize, slot_bits: u32, fp_bits: u32) -> Self {
        debug_assert!((1..=32).contains(&slot_bits) && slot_bits + DISP_BITS + fp_bits <= 40);
        let cap = cap.max(MIN_CAP);
        let width = slot_bits + DISP_BITS + fp_bits;
        let bytes = (cap * width as usize).div_ceil(8) + 8;
        Index {
            bytes: vec![0; bytes],
            cap,
            width,
            slot_bits,
            live: 0,
        }
    }

    pub(super) fn cap(&self) -> usize {
        self.cap
    }

    pub(super) fn live(&self) -> usize {
        self.live
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
    }

    /// Whether every slot below `slots` can be stored.
    pub(super) fn fits_slots(&self, slots: usize) -> bool {
        self.cap > 0 && (slots as u64) < (1u64 << self.slot_bits)
    }

    fn read(&self, i: usize) -> u64 {
        let bit = i * self.width as usize;
        let at = bit >> 3;
        let mut word = [0u8; 8];
        word.copy_from_slice(&self.bytes[at..at + 8]);
        (u64::from_le_bytes(word) >> (bit & 7)) & ((1u64 << self.width) - 1)
    }

    fn write(&mut self, i: usize, v: u64) {
        let bit = i * self.width as usize;
        let at = bit >> 3;
        let shift = bit & 7;
        let mask = ((1u64 << self.width) - 1) << shift;
        let mut word = [0u8; 8];
        word.copy_from_slice(&self.bytes[at..at + 8]);
        let w = (u64::from_le_bytes(word) & !mask) | ((v << shift) & mask);
        self.bytes[at..at + 8].copy_from_slice(&w.to_le_bytes());
    }

    fn home(&self, hash: u64) -> usize {
        ((u128::from(hash) * self.cap as u128) >> 64) as usize
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.cap { 0 } else { i + 1 }
    }

    fn field_mask(&self) -> u64 {
        (1u64 << self.slot_bits) - 1
    }

    fn disp(&self, v: u64) -> u64 {
        (v >> self.slot_bits) & SAT
    }

    fn slot(&self, v: u64) -> Slot {
        ((v & self.field_mask()) - 1) as Slot
    }

    /// The fingerprint bits of `hash`, in place.
    fn fingerprint(&self, hash: u64) -> u64 {
        let shift = self.slot_bits + DISP_BITS;
        (hash & ((1u64 << (self.width - shift)) - 1)) << shift
    }

    fn fp_of(&self, v: u64) -> u64 {
        v & !((1u64 << (self.slot_bits + DISP_BITS)) - 1)
    }

    fn pack(&self, fp: u64, disp: u64, slot: Slot) -> u64 {
        fp | disp.min(SAT) << self.slot_bits | (u64::from(slot) + 1)
    }

    /// The true displacement of bucket `i`'s key, whose hash is `hash`.
    fn distance(&self, i: usize, hash: u64) -> u64 {
        let home = self.home(hash);
        (if i >= home {
            i - home
        } else {
            i + self.cap - home
        }) as u64
    }

    /// The bucket and slot of the first slot stored for `hash` that `hit`
    /// accepts.
    pub(super) fn find(
        &self,
        hash: u64,
        mut hit: impl FnMut(Slot) -> bool,
    ) -> Option<(usize, Slot)> {
        if self.cap == 0 {
            return None;
        }
        let fp = self.fingerprint(hash);
        let mut i = self.home(hash);
        for d in 0..self.cap as u64 {
            let v = self.read(i);
            if v == 0 {
                return None;
            }
            let sd = self.disp(v);
            if sd < SAT && sd < d {
                // Robin Hood order: the key would sit here or earlier.
                return None;
            }
            if (sd == d || (sd == SAT && d >= SAT)) && self.fp_of(v) == fp {
                let slot = self.slot(v);
                if hit(slot) {
                    return Some((i, slot));
                }
            }
            i = self.next(i);
        }
        None
    }

    /// Stores `slot` for `hash`; `hash_of` gives the hash of a stored slot
    /// (asked only for keys displaced 15 or more). The caller knows the key
    /// is not stored yet and that there is room.
    pub(super) fn insert(&mut self, hash: u64, slot: Slot, hash_of: impl Fn(Slot) -> u64) {
        assert!(self.live < self.cap, "index full: the owner grows it first");
        debug_assert!(
            u64::from(slot) < self.field_mask(),
            "slot {slot} beyond the index's field"
        );
        let (mut fp, mut slot, mut d) = (self.fingerprint(hash), slot, 0u64);
        let mut i = self.home(hash);
        for _ in 0..self.cap {
            let v = self.read(i);
            if v == 0 {
                self.write(i, self.pack(fp, d, slot));
                self.live += 1;
                return;
            }
            let mut od = self.disp(v);
            if od == SAT && d > SAT {
                od = self.distance(i, hash_of(self.slot(v)));
            }
            if od < d {
                self.write(i, self.pack(fp, d, slot));
                (fp, slot, d) = (self.fp_of(v), self.slot(v), od);
            }
            i = self.next(i);
            d += 1;
        }
        unreachable!("an index below full load has an empty bucket");
    }

    /// Points bucket `i` (found by [`find`](Self::find)) at another slot of
    /// the same key.
    pub(super) fn replace(&mut self, i: usize, slot: Slot) {
        let v = self.read(i);
        debug_assert!(v != 0);
        self.write(i, (v & !self.field_mask()) | (u64::from(slot) + 1));
    }

    /// Removes bucket `i` (found by [`find`](Self::find)): the keys after
    /// it that are away from home move one bucket back. `hash_of` as for
    /// [`insert`](Self::insert).
    pub(super) fn remove(&mut self, i: usize, hash_of: impl Fn(Slot) -> u64) {
        debug_assert!(self.read(i) != 0);
        self.live -= 1;
        let mut prev = i;
        let mut j = self.next(i);
        for _ in 0..self.cap {
            let v = self.read(j);
            if v == 0 || self.disp(v) == 0 {
                break;
            }
            let mut d = self.disp(v);
            if d == SAT {
                d = self.distance(j, hash_of(self.slot(v)));
            }
            self.write(prev, self.pack(self.fp_of(v), d - 1, self.slot(v)));
            prev = j;
            j = self.next(j);
        }
        self.write(prev, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys crowded onto few home buckets (displacements far beyond the
    /// saturated 15) under random inserts and removes, against a model.
    /// Seed: `FUSEE_SEED`.
    #[test]
    fn crowded_homes_match_model() {
        let seed = std::env::var("FUSEE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| fastrand::u64(..));
        let mut rng = fastrand::Rng::with_seed(seed);
        for fp_bits in [0, 6] {
            // slot -> hash; a hash's home is its top bits: 8 distinct homes.
            let mut hashes: Vec<Option<u64>> = vec![None; 400];
            let mut ix = Index::with_cap(420, 10, fp_bits);
            for step in 0..20_000 {
                let slot = rng.u32(0..400);
                let hash_of = |s: Slot| hashes[s as usize].expect("stored slot has a hash");
                match hashes[slot as usize] {
                    None if ix.live() < 380 => {
                        let h = (rng.u64(0..8) << 61) | rng.u64(0..1 << 20);
                        ix.insert(h, slot, hash_of);
                        hashes[slot as usize] = Some(h);
                    }
                    Some(h) => {
                        let (i, s) = ix
                            .find(h, |s| s == slot)
                            .unwrap_or_else(|| panic!("seed {seed} step {step}: lost {slot}"));
                        assert_eq!(s, slot);
                        if rng.bool() {
                            ix.remove(i, hash_of);
                            hashes[slot as usize] = None;
                        }
                    }
                    None => {}
                }
                let probe = rng.u32(0..400);
                let h =
                    hashes[probe as usize].unwrap_or((rng.u64(0..8) << 61) | rng.u64(0..1 << 20));
                let want = hashes[probe as usize].map(|_| probe);
                assert_eq!(
                    ix.find(h, |s| s == probe).map(|(_, s)| s),
                    want,
                    "seed {seed} step {step}"
                );
            }
            assert_eq!(ix.live(), hashes.iter().flatten().count(), "seed {seed}");
        }
    }
}
