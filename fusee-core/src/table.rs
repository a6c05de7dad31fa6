//! The run table: one 32-byte [`Entry`] per run a shard knows, loaded or
//! parked, found by run ID or by workflow-ID hash.
//!
//! A parked run lives only here: where its journal frame is in the run
//! store, its earliest timer (or its finish time once finished) and its
//! status. The table is the shard's largest structure (millions of sleeping
//! runs), so its bytes per run are a design figure: 32 for the entry plus
//! what the two indexes cost (see [`Layout`]).
//!
//! # Entry
//!
//! Four 64-bit words:
//!
//! | word | bits 0..48 | bits 48..56 | bits 56..64 |
//! |---|---|---|---|
//! | 0 | ID hash (all 64 bits) | | |
//! | 1 | run ID | state | flags |
//! | 2 | store offset | frame length bits 0..8 | frame length bits 8..16 |
//! | 3 | time | frame length bits 16..24 | frame length bits 24..32 |
//!
//! `time` means: for a parked unfinished run its earliest armed timer (0 =
//! none); for a parked finished run its finish time; for a loaded run its
//! earliest timer not yet in a timing wheel (0 = none). All times are ms and
//! saturate at 2^48 - 1 (year 10889).
//!
//! # Persisted index record ([`RECORD`] = 32 bytes)
//!
//! [`Entry::record`] is the four words, each little-endian, with every
//! in-memory flag but [`flag::CHAINED`] and [`flag::APART`] cleared:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | ID hash, u64 LE (0 in a [`DELETED`] record) |
//! | 8..14 | run ID, 48-bit LE, never 0 |
//! | 14 | state: [`PARKED`], [`DONE`]` + status` (8..=14) or [`DELETED`] |
//! | 15 | flags: [`flag::CHAINED`] and [`flag::APART`], or 0 (0 in a `DELETED` record) |
//! | 16..22 | store offset of the run's frame, 48-bit LE |
//! | 22..24 | frame length bits 0..16, LE |
//! | 24..30 | time (see above), 48-bit LE |
//! | 30..32 | frame length bits 16..32, LE |
//!
//! A `DELETED` record has every byte zero but the run ID and the state.
//! [`Entry::from_record`] rejects anything else (run 0, a state that is not
//! persisted, including [`LOADED`], unknown flags, a `DELETED` record with
//! other fields set): a torn or garbled index frame is reported, never
//! loaded as a plausible run. Bytes that pass are a well-formed entry; a
//! wrong but well-formed offset or length is caught by the store read.
//!
//! # Slots and indexes
//!
//! Entries sit in fixed chunks of [`CHUNK`] entries that never move when the
//! table grows, so a [`Slot`] stays valid until the entry is removed or
//! [`RunTable::compact`] runs. Free slots (run 0) form an intrusive list and
//! are reused first. Two open-addressing indexes map a run ID and an ID hash
//! to a slot; the ID index holds only the latest run (highest run ID) of each
//! ID hash that was [`indexed`](RunTable::index_id).

mod index;
#[cfg(test)]
mod tests;

use index::Index;

use crate::record::{RunId, Status};

/// Bytes of one persisted index record.
pub const RECORD: usize = 32;

/// A position in the table; stable until the entry is removed or the table
/// is [compacted](RunTable::compact).
pub type Slot = u32;

/// State: the run is in memory (its journal is held by the shard).
pub const LOADED: u8 = 1;
/// State: the run is parked unfinished: its journal is in the run store.
pub const PARKED: u8 = 2;
/// State base: `DONE + status as u8` (8..=14) is a parked finished run with
/// that [`Status`].
pub const DONE: u8 = 8;
/// State found only in persisted index deltas: the run is gone.
pub const DELETED: u8 = 15;

/// Entry flags (one byte). Only [`PERSISTED`](flag::PERSISTED) ones are persisted.
pub mod flag {
    /// A near-timer item is queued in the shard's near wheel for the
    /// entry's current time.
    pub const NEAR: u8 = 1;
    /// A load was requested and is not done yet.
    pub const PENDING: u8 = 2;
    /// Changed since the persisted index last recorded it.
    pub const DIRTY: u8 = 4;
    /// The ID index points at this entry (the latest run of its ID hash).
    /// Kept by [`RunTable`](super::RunTable); callers read it.
    pub const IN_ID: u8 = 8;
    /// The run's frame is a delta extending an earlier frame: a store
    /// compaction must rewrite its journal whole. Persisted.
    pub const CHAINED: u8 = 16;
    /// The run's frame names `Stream` frames holding its chunks set apart
    /// (`crate::store::apart`): a store compaction that moves them must
    /// write the frame again, and a release lets them go too. Persisted.
    pub const APART: u8 = 32;
    /// The flags the persisted index keeps.
    pub const PERSISTED: u8 = CHAINED | APART;
}

const MASK48: u64 = (1 << 48) - 1;

/// One run: see the [module documentation](self) for the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    words: [u64; 4],
}

const _: () = assert!(std::mem::size_of::<Entry>() == 32);
const _: () = assert!(std::mem::size_of::<Entry>() == RECORD);

impl Entry {
    /// A run in `state` with no location, time or flags. `run` must be
    /// nonzero and fit 48 bits (debug-asserted; masked otherwise).
    pub fn new(run: RunId, id_hash: u64, state: u8) -> Entry {
        debug_assert!(
            run != 0 && run <= MASK48,
            "run {run} is not a 48-bit run ID"
        );
        Entry {
            words: [id_hash, (run & MASK48) | u64::from(state) << 48, 0, 0],
        }
    }

    /// The workflow ID's hash ([`crate::wire::hash_id`]).
    pub fn id_hash(&self) -> u64 {
        self.words[0]
    }

    /// The run ID; 0 only for a free slot.
    pub fn run(&self) -> RunId {
        self.words[1] & MASK48
    }

    /// The state ([`LOADED`], [`PARKED`], [`DONE`]` + status`, [`DELETED`]).
    pub fn state(&self) -> u8 {
        (self.words[1] >> 48) as u8
    }

    /// Sets the state, keeping everything else.
    pub fn set_state(&mut self, state: u8) {
        self.words[1] = (self.words[1] & !(0xFF << 48)) | u64::from(state) << 48;
    }

    /// The flag byte (see [`flag`]).
    pub fn flags(&self) -> u8 {
        (self.words[1] >> 56) as u8
    }

    /// Whether every bit of `f` is set (true for `f == 0`).
    pub fn has(&self, f: u8) -> bool {
        self.flags() & f == f
    }

    /// Sets (`on`) or clears every bit of `f`, keeping the others.
    pub fn set(&mut self, f: u8, on: bool) {
        let flags = if on {
            self.flags() | f
        } else {
            self.flags() & !f
        };
        self.words[1] = (self.words[1] & !(0xFF << 56)) | u64::from(flags) << 56;
    }

    /// Store offset of the run's frame.
    pub fn offset(&self) -> u64 {
        self.words[2] & MASK48
    }

    /// Length of the run's frame.
    pub fn len(&self) -> u32 {
        ((self.words[2] >> 48) | (self.words[3] >> 48) << 16) as u32
    }

    /// Whether the frame length is 0 (no frame recorded).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sets the frame's location. Store offsets are 48-bit: a larger one is
    /// a caller bug (debug-asserted; masked to 48 bits otherwise).
    pub fn set_location(&mut self, offset: u64, len: u32) {
        debug_assert!(offset <= MASK48, "store offset {offset} beyond 48 bits");
        let len = u64::from(len);
        self.words[2] = (offset & MASK48) | (len & 0xFFFF) << 48;
        self.words[3] = (self.words[3] & MASK48) | (len >> 16) << 48;
    }

    /// The entry's time in ms (see the [module documentation](self)).
    pub fn time(&self) -> u64 {
        self.words[3] & MASK48
    }

    /// Sets the time; a time beyond 48 bits saturates to `2^48 - 1` (so a
    /// deadline never wraps into the past).
    pub fn set_time(&mut self, ms: u64) {
        self.words[3] = (self.words[3] & !MASK48) | ms.min(MASK48);
    }

    /// Whether the run is parked: [`PARKED`] or finished ([`DONE`]` + status`).
    pub fn is_parked(&self) -> bool {
        self.state() == PARKED || self.done().is_some()
    }

    /// The status of a parked finished run; `None` in any other state.
    pub fn done(&self) -> Option<Status> {
        self.state()
            .checked_sub(DONE)
            .and_then(|s| Status::from_u8(s).ok())
    }

    /// The persisted form (see the [module documentation](self)): the four
    /// words little-endian, in-memory flags cleared.
    pub fn record(&self) -> [u8; RECORD] {
        let mut e = *self;
        e.set(!flag::PERSISTED, false);
        let mut out = [0u8; RECORD];
        for (chunk, w) in out.chunks_exact_mut(8).zip(e.words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Decodes a persisted record; `None` for anything
    /// [`record`](Self::record) cannot produce for a parked or deleted run:
    /// run 0, a state other than [`PARKED`], [`DONE`]` + status` or
    /// [`DELETED`], a flag other than [`flag::CHAINED`] and [`flag::APART`], or a `DELETED`
    /// record with an ID hash, flags, location or time.
    pub fn from_record(bytes: &[u8; RECORD]) -> Option<Entry> {
        let mut words = [0u64; 4];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *w = u64::from_le_bytes(b);
        }
        let e = Entry { words };
        if e.run() == 0 || e.flags() & !flag::PERSISTED != 0 {
            return None;
        }
        match e.state() {
            DELETED => {
                (words[0] == 0 && e.flags() == 0 && words[2] == 0 && words[3] == 0).then_some(e)
            }
            _ if e.is_parked() => Some(e),
            _ => None,
        }
    }

    /// A free slot's entry: run 0, the next free slot in word 2.
    fn free(next: Slot) -> Entry {
        Entry {
            words: [0, 0, u64::from(next), 0],
        }
    }
}

/// Entries per chunk: 4096 × 32 B = 128 KiB. A table holds at most one
/// chunk more than it needs (the one it is filling), so at a million runs
/// the unused tail costs at most 0.13 B per run; growing never copies an
/// entry.
pub const CHUNK: usize = 1 << CHUNK_BITS;
const CHUNK_BITS: u32 = 12;
const NO_SLOT: Slot = Slot::MAX;

/// How the indexes trade memory for probe length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Layout {
    /// The default. Buckets are `b + 6` bits where `b` is the fewest bits
    /// that name every slot (26 bits up to a million slots): the slot, a
    /// Robin Hood displacement (only keys with the same home bucket are
    /// compared) and a 2-bit fingerprint (which skips three in four of
    /// those). Kept between 84% and 92% load: 39.7-40.2 B per run around a
    /// million runs. Growing past 2^17 keys rebuilds an index every ~9.5%
    /// of growth, so inserts without a [`reserve`](RunTable::reserve) cost
    /// more than with [`Layout::Roomy`]; below that an index grows by
    /// doubling (its load then 42% to 92%).
    #[default]
    Compact,
    /// The published 1.0 sizing: 32-bit buckets (slot, displacement and a
    /// fingerprint in the spare bits) between 65% and 85% load: about
    /// 43-45 B per run at a million runs.
    Roomy,
}

impl Layout {
    fn fp_bits(self, slot_bits: u32) -> u32 {
        match self {
            Layout::Compact => 2,
            Layout::Roomy => 28u32.saturating_sub(slot_bits),
        }
    }

    /// Load (percent) at which an index is rebuilt, and the load it is
    /// rebuilt to.
    fn loads(self) -> (usize, usize) {
        match self {
            Layout::Compact => (92, 84),
            Layout::Roomy => (85, 65),
        }
    }
}

/// How many keys a rebuilt index is sized for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Growth {
    /// Exactly the keys asked for, at the layout's target load: a bulk
    /// load ([`RunTable::reserve`]) knows its count.
    Exact,
    /// Twice the keys while the index is small ([`DOUBLING_KEYS_MAX`]),
    /// then exactly. Growing one insert at a time rebuilds a [`Layout::Compact`]
    /// index every ~9.5% of growth, re-inserting every key about 11 times
    /// per key added: a burst of starts into a fresh shard spent about a
    /// tenth of its CPU there. Doubling makes that about twice, and costs
    /// at most a few hundred KiB per index; past the limit the bytes per
    /// run are the design figure again.
    Doubling,
}

/// Keys below which a growing index doubles: 2^17 keys of at most 23 + 6
/// bits at 42% load are under 1.2 MiB, small beside the entries' chunks.
const DOUBLING_KEYS_MAX: usize = 1 << 17;

impl Growth {
    fn keys(self, n: usize) -> usize {
        match self {
            Growth::Doubling if n < DOUBLING_KEYS_MAX => 2 * n,
            _ => n,
        }
    }
}

/// Hash of a run ID for the run index (murmur3's finalizer: run IDs are
/// sequential, every output bit must depend on every input bit).
fn hash_run(run: RunId) -> u64 {
    let mut x = run;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Hash of an ID hash for the ID index: mixed again so that IDs hashed by
/// anything weaker than [`crate::wire::hash_id`] still spread.
fn hash_idh(id_hash: u64) -> u64 {
    hash_run(id_hash ^ 0x9e37_79b9_7f4a_7c15)
}

/// The entry at `slot` of `chunks` (a borrow that leaves the indexes free).
fn entry(chunks: &[Box<[Entry]>], slot: Slot) -> &Entry {
    &chunks[(slot >> CHUNK_BITS) as usize][slot as usize & (CHUNK - 1)]
}

/// Every run a shard knows: see the [module documentation](self).
pub struct RunTable {
    chunks: Vec<Box<[Entry]>>,
    /// Slots handed out so far (live or free).
    used: Slot,
    live: usize,
    free_head: Slot,
    free_count: usize,
    by_run: Index,
    by_id: Index,
    layout: Layout,
}

impl Default for RunTable {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RunTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunTable")
            .field("live", &self.live)
            .field("used", &self.used)
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

impl RunTable {
    /// An empty table with the [`Layout::Compact`] indexes; allocates nothing.
    pub fn new() -> Self {
        Self::with_layout(Layout::Compact)
    }

    /// An empty table whose indexes use `layout`; allocates nothing.
    pub fn with_layout(layout: Layout) -> Self {
        RunTable {
            chunks: Vec::new(),
            used: 0,
            live: 0,
            free_head: NO_SLOT,
            free_count: 0,
            by_run: Index::empty(),
            by_id: Index::empty(),
            layout,
        }
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether the table holds no entry.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Slots handed out so far, live or free: every live entry's slot is
    /// below this (the range a sweep walks).
    pub fn used(&self) -> Slot {
        self.used
    }

    /// Heap bytes the table and its indexes allocated.
    pub fn heap_bytes(&self) -> usize {
        self.chunks.capacity() * std::mem::size_of::<Box<[Entry]>>()
            + self.chunks.len() * CHUNK * std::mem::size_of::<Entry>()
            + self.by_run.heap_bytes()
            + self.by_id.heap_bytes()
    }

    /// The entry at `slot` (a free slot reads as run 0).
    ///
    /// # Panics
    /// If `slot >= used()` (a caller bug; may also return a free entry).
    pub fn get(&self, slot: Slot) -> &Entry {
        debug_assert!(slot < self.used, "slot {slot} >= used {}", self.used);
        &self.chunks[(slot >> CHUNK_BITS) as usize][slot as usize & (CHUNK - 1)]
    }

    /// The entry at `slot`, to change. Callers must not change its run ID
    /// or ID hash (the indexes are keyed by them) or set [`flag::IN_ID`] on
    /// an entry that lacks it.
    ///
    /// # Panics
    /// If `slot >= used()` (a caller bug).
    pub fn get_mut(&mut self, slot: Slot) -> &mut Entry {
        debug_assert!(slot < self.used, "slot {slot} >= used {}", self.used);
        &mut self.chunks[(slot >> CHUNK_BITS) as usize][slot as usize & (CHUNK - 1)]
    }

    /// The live entry at `slot`; `None` for a free or out-of-range slot.
    /// Never panics.
    pub fn live_at(&self, slot: Slot) -> Option<&Entry> {
        if slot >= self.used {
            return None;
        }
        let e = self.get(slot);
        (e.run() != 0).then_some(e)
    }

    /// The slot of `run`, if the table holds it.
    pub fn find_run(&self, run: RunId) -> Option<Slot> {
        if run == 0 {
            return None;
        }
        self.by_run
            .find(hash_run(run), |s| self.get(s).run() == run)
            .map(|(_, s)| s)
    }

    /// Whether the table holds `run`.
    pub fn has_run(&self, run: RunId) -> bool {
        self.find_run(run).is_some()
    }

    /// The slot of the latest (highest run ID) run with this ID hash that
    /// was [indexed](Self::index_id) and is still in the table. When that
    /// run is removed, older runs of the hash are not found again.
    pub fn find_id(&self, id_hash: u64) -> Option<Slot> {
        self.by_id
            .find(hash_idh(id_hash), |s| {
                let e = self.get(s);
                e.run() != 0 && e.id_hash() == id_hash
            })
            .map(|(_, s)| s)
    }

    /// Adds an entry and indexes it by run ID (not by ID: see
    /// [`index_id`](Self::index_id)); returns its slot. [`flag::IN_ID`] is
    /// cleared.
    ///
    /// # Panics
    /// If `e.run()` is 0 or the table would exceed `u32::MAX - 2` slots.
    /// Inserting a run the table holds is a caller bug (debug-asserted).
    pub fn insert(&mut self, mut e: Entry) -> Slot {
        assert!(e.run() != 0, "run 0 marks a free slot");
        debug_assert!(!self.has_run(e.run()), "run {} inserted twice", e.run());
        e.set(flag::IN_ID, false);
        let slot = if self.free_head != NO_SLOT {
            let slot = self.free_head;
            self.free_head = self.get(slot).words[2] as Slot;
            self.free_count -= 1;
            slot
        } else {
            assert!(self.used < Slot::MAX - 2, "run table full");
            if self.used as usize == self.chunks.len() * CHUNK {
                self.chunks
                    .push(vec![Entry::free(NO_SLOT); CHUNK].into_boxed_slice());
            }
            self.used += 1;
            self.used - 1
        };
        self.make_room(1, 0, Growth::Doubling);
        *self.get_mut(slot) = e;
        self.live += 1;
        let chunks = &self.chunks;
        self.by_run.insert(hash_run(e.run()), slot, |s| {
            hash_run(entry(chunks, s).run())
        });
        slot
    }

    /// Makes `slot` what [`find_id`](Self::find_id) returns for its ID hash,
    /// unless a later run (higher run ID) of the same hash holds the ID
    /// index: the latest run wins. Keeps [`flag::IN_ID`] on the winner only.
    pub fn index_id(&mut self, slot: Slot) {
        let e = *self.get(slot);
        assert!(e.run() != 0, "index_id on free slot {slot}");
        let h = hash_idh(e.id_hash());
        let found = self.by_id.find(h, |s| {
            let x = self.get(s);
            x.run() != 0 && x.id_hash() == e.id_hash()
        });
        match found {
            Some((_, s)) if s == slot => self.get_mut(slot).set(flag::IN_ID, true),
            Some((_, s)) if self.get(s).run() > e.run() => {
                self.get_mut(slot).set(flag::IN_ID, false)
            }
            Some((bucket, s)) => {
                self.by_id.replace(bucket, slot);
                self.get_mut(s).set(flag::IN_ID, false);
                self.get_mut(slot).set(flag::IN_ID, true);
            }
            None => {
                self.make_room(0, 1, Growth::Doubling);
                let chunks = &self.chunks;
                self.by_id
                    .insert(h, slot, |s| hash_idh(entry(chunks, s).id_hash()));
                self.get_mut(slot).set(flag::IN_ID, true);
            }
        }
    }

    /// Removes the entry at `slot` from the table and both indexes and
    /// returns it. If it held the ID index, no run of its hash is found by
    /// ID until another is [indexed](Self::index_id).
    ///
    /// # Panics
    /// If `slot` holds no live entry (a caller bug).
    pub fn remove(&mut self, slot: Slot) -> Entry {
        let e = *self
            .live_at(slot)
            .unwrap_or_else(|| panic!("remove of free slot {slot}"));
        let (bucket, _) = self
            .by_run
            .find(hash_run(e.run()), |s| s == slot)
            .unwrap_or_else(|| panic!("run {} at slot {slot} is not indexed", e.run()));
        let chunks = &self.chunks;
        self.by_run
            .remove(bucket, |s| hash_run(entry(chunks, s).run()));
        // Looked up whatever the flag says: a bucket left behind would name
        // the slot once it is reused.
        if let Some((bucket, _)) = self.by_id.find(hash_idh(e.id_hash()), |s| s == slot) {
            debug_assert!(e.has(flag::IN_ID));
            let chunks = &self.chunks;
            self.by_id
                .remove(bucket, |s| hash_idh(entry(chunks, s).id_hash()));
        } else {
            debug_assert!(!e.has(flag::IN_ID));
        }
        *self.get_mut(slot) = Entry::free(self.free_head);
        self.free_head = slot;
        self.free_count += 1;
        self.live -= 1;
        e
    }

    /// Live entries in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (Slot, &Entry)> {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .take(self.used as usize)
            .enumerate()
            .filter(|(_, e)| e.run() != 0)
            .map(|(s, e)| (s as Slot, e))
    }

    /// Makes room for `n` more entries without growing again (before a bulk
    /// load): chunks and both indexes.
    pub fn reserve(&mut self, n: usize) {
        let slots =
            (self.used as usize + n.saturating_sub(self.free_count)).min(Slot::MAX as usize - 2);
        let chunks = slots.div_ceil(CHUNK);
        self.chunks
            .reserve(chunks.saturating_sub(self.chunks.len()));
        while self.chunks.len() < chunks {
            self.chunks
                .push(vec![Entry::free(NO_SLOT); CHUNK].into_boxed_slice());
        }
        self.make_room(n, n, Growth::Exact);
    }

    /// When fewer than half the used slots are live (and more than two
    /// chunks are used), moves entries down to close the holes, keeping
    /// their order, releases the chunks left empty and rebuilds both
    /// indexes. Returns whether any entry changed slot; `false` (and
    /// nothing done) otherwise.
    pub fn compact(&mut self) -> bool {
        let used = self.used as usize;
        if used <= 2 * CHUNK || self.live * 2 >= used {
            return false;
        }
        let mut to: Slot = 0;
        let mut moved = false;
        for from in 0..self.used {
            let e = *self.get(from);
            if e.run() == 0 {
                continue;
            }
            if from != to {
                *self.get_mut(to) = e;
                moved = true;
            }
            to += 1;
        }
        debug_assert_eq!(to as usize, self.live);
        self.used = to;
        self.free_head = NO_SLOT;
        self.free_count = 0;
        self.chunks.truncate((to as usize).div_ceil(CHUNK));
        self.chunks.shrink_to_fit();
        self.rebuild_run(self.live);
        self.rebuild_id(self.by_id.live());
        moved
    }

    /// Ensures the indexes take `more_run` and `more_id` more buckets
    /// within their maximum load and name every allocated slot; rebuilds
    /// the one that does not, for its live keys and the ones to come, sized
    /// as `growth` says.
    fn make_room(&mut self, more_run: usize, more_id: usize, growth: Growth) {
        let (max, _) = self.layout.loads();
        let slots = self.chunks.len() * CHUNK;
        let fits = |ix: &Index, more: usize| {
            ix.fits_slots(slots) && (ix.live() + more) * 100 <= ix.cap() * max
        };
        let (run_ok, id_ok) = (fits(&self.by_run, more_run), fits(&self.by_id, more_id));
        if !run_ok {
            self.rebuild_run(growth.keys(self.by_run.live() + more_run));
        }
        if !id_ok {
            self.rebuild_id(growth.keys(self.by_id.live() + more_id));
        }
    }

    /// Bits that name every slot of the allocated chunks (field value
    /// slot + 1; 0 is the empty bucket).
    fn slot_bits(&self) -> u32 {
        let slots = (self.chunks.len() * CHUNK) as u64;
        (64 - slots.leading_zeros()).clamp(1, 32)
    }

    /// A new empty index sized for `n` buckets at the target load.
    fn new_index(&self, n: usize) -> Index {
        let (_, target) = self.layout.loads();
        let bits = self.slot_bits();
        Index::with_cap(
            (n * 100).div_ceil(target) + 1,
            bits,
            self.layout.fp_bits(bits),
        )
    }

    /// Rebuilds the run index for `n` runs (at least the live ones).
    fn rebuild_run(&mut self, n: usize) {
        let mut ix = self.new_index(n.max(self.live));
        for (s, e) in self.iter() {
            ix.insert(hash_run(e.run()), s, |x| hash_run(self.get(x).run()));
        }
        self.by_run = ix;
    }

    /// Rebuilds the ID index (from the [`flag::IN_ID`] entries) for `n`.
    fn rebuild_id(&mut self, n: usize) {
        let mut ix = self.new_index(n.max(self.by_id.live()));
        for (s, e) in self.iter() {
            if e.has(flag::IN_ID) {
                ix.insert(hash_idh(e.id_hash()), s, |x| {
                    hash_idh(self.get(x).id_hash())
                });
            }
        }
        self.by_id = ix;
    }
}
