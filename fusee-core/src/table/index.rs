//! A slot index: open addressing over bit-packed buckets.
//!
//! A bucket is `width` bits, packed back to back in a byte vector (padded by
//! 8 bytes so every bucket can be read with one unaligned 8-byte load). Its
//! low `slot_bits` bits are the *field*: 0 = empty, all ones = tombstone
//! (a removed bucket that probes must walk past), otherwise slot + 1. The
//! bits above the field are a *fingerprint* of the key's hash: a probe only
//! looks at a table entry (a likely cache miss) when the fingerprint
//! matches, so a lookup touches about one entry however long its probe run.
//!
//! The home bucket of a hash is `(hash * capacity) >> 64` (multiply-shift
//! range reduction), so any capacity works, not only powers of two: the
//! table sizes itself to the load it wants instead of doubling. Collisions
//! are resolved by linear probing (neighbouring buckets share cache lines).
//! The owner keeps the load below its maximum, so a probe always meets an
//! empty bucket within `capacity` steps.

use super::Slot;

/// Fewest buckets an index allocates.
const MIN_CAP: usize = 16;

pub(super) struct Index {
    bytes: Vec<u8>,
    cap: usize,
    width: u32,
    slot_bits: u32,
    /// Non-empty buckets, tombstones included (what the load counts).
    occupied: usize,
    /// Buckets holding a slot.
    live: usize,
}

impl Index {
    /// An index without buckets: lookups miss, inserts need a `with_cap` first.
    pub(super) fn empty() -> Self {
        Index {
            bytes: Vec::new(),
            cap: 0,
            width: 32,
            slot_bits: 32,
            occupied: 0,
            live: 0,
        }
    }

    /// Room for `cap` buckets of `slot_bits + fp_bits` bits (at most 32) that
    /// can name any slot below `2^slot_bits - 2`.
    pub(super) fn with_cap(cap: usize, slot_bits: u32, fp_bits: u32) -> Self {
        debug_assert!((1..=32).contains(&slot_bits));
        let cap = cap.max(MIN_CAP);
        let width = (slot_bits + fp_bits).min(32);
        let bytes = (cap * width as usize).div_ceil(8) + 8;
        Index {
            bytes: vec![0; bytes],
            cap,
            width,
            slot_bits,
            occupied: 0,
            live: 0,
        }
    }

    pub(super) fn cap(&self) -> usize {
        self.cap
    }

    pub(super) fn occupied(&self) -> usize {
        self.occupied
    }

    pub(super) fn live(&self) -> usize {
        self.live
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
    }

    fn field_mask(&self) -> u64 {
        (1u64 << self.slot_bits) - 1
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

    /// The fingerprint bits of a bucket for `hash`, in place above the field.
    fn fingerprint(&self, hash: u64) -> u64 {
        let fp_bits = self.width - self.slot_bits;
        (hash & ((1u64 << fp_bits) - 1)) << self.slot_bits
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.cap { 0 } else { i + 1 }
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
        let (fmask, fp) = (self.field_mask(), self.fingerprint(hash));
        let mut i = self.home(hash);
        for _ in 0..self.cap {
            let v = self.read(i);
            if v == 0 {
                return None;
            }
            let field = v & fmask;
            if field != fmask && v & !fmask == fp {
                let slot = (field - 1) as Slot;
                if hit(slot) {
                    return Some((i, slot));
                }
            }
            i = self.next(i);
        }
        None
    }

    /// Whether every slot below `slots` can be stored.
    pub(super) fn fits_slots(&self, slots: usize) -> bool {
        self.cap > 0 && (slots as u64) < self.field_mask()
    }

    /// Stores `slot` for `hash`. The caller knows the key is not stored yet
    /// (so the first tombstone may be reused) and that there is room.
    pub(super) fn insert(&mut self, hash: u64, slot: Slot) {
        assert!(
            self.occupied < self.cap,
            "index full: the owner grows it first"
        );
        let fmask = self.field_mask();
        debug_assert!(
            u64::from(slot) + 1 < fmask,
            "slot {slot} beyond the index's field"
        );
        let v = self.fingerprint(hash) | (u64::from(slot) + 1);
        let mut i = self.home(hash);
        for _ in 0..self.cap {
            let old = self.read(i);
            if old == 0 || old & fmask == fmask {
                self.write(i, v);
                self.occupied += usize::from(old == 0);
                self.live += 1;
                return;
            }
            i = self.next(i);
        }
        unreachable!("an index below full load has an empty bucket");
    }

    /// Points bucket `i` (found by [`find`](Self::find)) at another slot of
    /// the same key.
    pub(super) fn replace(&mut self, i: usize, slot: Slot) {
        let fmask = self.field_mask();
        let v = self.read(i);
        debug_assert!(v != 0 && v & fmask != fmask);
        self.write(i, (v & !fmask) | (u64::from(slot) + 1));
    }

    /// Removes bucket `i` (found by [`find`](Self::find)). A bucket followed
    /// by an empty one ends no probe run, so it and the tombstones before it
    /// become empty; otherwise it becomes a tombstone.
    pub(super) fn remove(&mut self, i: usize) {
        let fmask = self.field_mask();
        debug_assert!(self.read(i) & fmask != fmask);
        self.live -= 1;
        if self.read(self.next(i)) != 0 {
            self.write(i, fmask);
            return;
        }
        self.write(i, 0);
        self.occupied -= 1;
        let mut j = i;
        for _ in 0..self.cap {
            j = if j == 0 { self.cap - 1 } else { j - 1 };
            if self.read(j) != fmask {
                break;
            }
            self.write(j, 0);
            self.occupied -= 1;
        }
    }
}
