//! The search-attribute index's snapshot: the whole [`AttrIndex`] (a base)
//! and the changes since (deltas), in run-store frames that every
//! checkpoint names (`Checkpoint::attr_frames`, the base's parts then the
//! deltas, oldest first), read back by the next open, so that open's first
//! filtered listing needs no frame of any run, after a clean close or a
//! crash alike. When and what a checkpoint writes: `runtime/search`.
//!
//! # Base frames
//!
//! The base is one byte stream cut into parts of at most
//! [`PART_BYTES_MAX`], one run-store frame each (integers little-endian):
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..8 | magic | `b"FUSEATTR"` |
//! | 8..12 | format u32 | [`FORMAT`] (1) |
//! | 12..16 | part u32 | this frame's place, from 0 |
//! | 16..20 | parts u32 | how many frames the stream has |
//! | 20..28 | checksum u64 | `wire::checksum64` of bytes 8..20, then the body |
//! | 28.. | body | the stream's next bytes |
//!
//! Varints are LEB128 (`fusee_core::wire`). The stream:
//!
//! 1. Names: count varint, then each name as length varint and UTF-8.
//! 2. Runs, in ascending run order: count varint, then per run its run
//!    number as a varint delta from the run before (the first from 0;
//!    never 0), its pair count varint (at least 1), and per pair the name's
//!    place in the names varint and the value's key.
//! 3. By name, in the names' order: per name its entry count varint, then
//!    each (key, run) in ascending order: the key, then the run varint. It
//!    repeats section 2 turned around, so an open builds each name's
//!    ordered set from sorted input rather than by sorting (a sort of
//!    three million keys took longer than the goal of the whole listing).
//!
//! A key is its kind u8 then its value: 1 bool (u8 0 or 1), 2 int (i64,
//! 8 bytes), 3 float (u64, 8 bytes: the order-preserving bits
//! `AttrValue::key` makes), 4 time (varint ms), 5 keyword and 6 text
//! (length varint and UTF-8).
//!
//! # Delta frames
//!
//! Each delta holds the runs whose values changed since the frame before
//! it was taken, each with its values then: the same 28-byte header with
//! magic `b"FUSEATTD"`, its place among the deltas (from 0) where a base
//! part has its part, and 0 where a base part has its count. Its body is
//! sections 1 and 2 above, except that a run's pair count may be 0: the
//! run has no values any more (removed). An open applies the deltas to
//! the base in order.
//!
//! # Trust
//!
//! Every frame's checksum, magic and place is checked, every count
//! against the bytes left, every name place against the names, and the
//! base's section 3 against its section 2 name by name (counts) and order
//! (strictly ascending); any failure is a [`SnapshotError`], never a
//! panic, and the open then builds the index from the runs as it does
//! without a snapshot.

use std::collections::BTreeSet;
use std::sync::Arc;

use fusee_core::record::RunId;
use fusee_core::wire::{
    DecodeError, Reader, checksum64, put_str, put_u8, put_u32, put_u64, put_varint,
};
use rustc_hash::FxHashMap;

use super::{AttrIndex, AttrKey, NamedKey, RunValues};

/// The first 8 bytes of every base frame.
const MAGIC: [u8; 8] = *b"FUSEATTR";
/// The first 8 bytes of every delta frame.
const DELTA_MAGIC: [u8; 8] = *b"FUSEATTD";
/// The snapshot format this module writes and reads.
pub(crate) const FORMAT: u32 = 1;
/// Bytes of a frame before its body.
const HEADER: usize = 28;
/// Most stream bytes per frame: far under the run store's frame limit
/// (256 MiB), and small enough that no part is a long write of its own.
pub(crate) const PART_BYTES_MAX: usize = 32 << 20;

/// Why snapshot frames could not be read back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotError {
    /// A frame without the magic its place calls for.
    #[error("attribute snapshot frame {part}: not a snapshot frame of its kind")]
    BadMagic {
        /// The frame's place in the list.
        part: usize,
    },
    /// A format this build does not read.
    #[error("attribute snapshot format {found} is not supported (this build reads {FORMAT})")]
    Format {
        /// The format field.
        found: u32,
    },
    /// A frame in the wrong place, or a list too short for its base.
    #[error("attribute snapshot frame {part} says it is part {says} of {parts}, of {have} named")]
    Misplaced {
        /// The frame's place in the list.
        part: usize,
        /// The part it says it is.
        says: u32,
        /// The parts it says there are.
        parts: u32,
        /// The frames the checkpoint named.
        have: usize,
    },
    /// Damaged bytes.
    #[error("attribute snapshot frame {part}: checksum mismatch")]
    BadCrc {
        /// The frame's place in the list.
        part: usize,
    },
    /// A stream that does not decode, or whose sections disagree.
    #[error("attribute snapshot: {0}")]
    Malformed(#[from] DecodeError),
    /// A frame the run store could not read.
    #[error("attribute snapshot frame unreadable: {0}")]
    Read(#[from] fusee_storage::StorageError),
}

fn checksum(head: &[u8], body: &[u8]) -> u64 {
    checksum64(&[head, body])
}

fn put_key(out: &mut Vec<u8>, k: &AttrKey) {
    put_u8(out, k.kind());
    match k {
        AttrKey::Bool(b) => put_u8(out, u8::from(*b)),
        AttrKey::Int(i) => put_u64(out, *i as u64),
        AttrKey::Float(f) => put_u64(out, *f),
        AttrKey::Time(t) => put_varint(out, *t),
        AttrKey::Keyword(s) | AttrKey::Text(s) => put_str(out, s),
    }
}

fn read_key(r: &mut Reader<'_>) -> Result<AttrKey, DecodeError> {
    Ok(match r.u8()? {
        1 => match r.u8()? {
            0 => AttrKey::Bool(false),
            1 => AttrKey::Bool(true),
            _ => return Err(DecodeError::new("bool is not 0 or 1")),
        },
        2 => AttrKey::Int(r.u64()? as i64),
        3 => AttrKey::Float(r.u64()?),
        4 => AttrKey::Time(r.varint()?),
        5 => AttrKey::Keyword(r.str()?.into()),
        6 => AttrKey::Text(r.str()?.into()),
        _ => return Err(DecodeError::new("unknown value kind")),
    })
}

/// The run after `before` in section 2: its varint delta, never 0.
fn next_run(r: &mut Reader<'_>, before: RunId) -> Result<RunId, DecodeError> {
    let delta = r.varint()?;
    if delta == 0 {
        return Err(DecodeError::new("runs not in ascending order"));
    }
    before
        .checked_add(delta)
        .ok_or_else(|| DecodeError::new("run number overflows"))
}

/// A name's place, checked against the `n_names` names.
fn read_name(r: &mut Reader<'_>, n_names: usize) -> Result<usize, DecodeError> {
    let at = r.varint()?;
    usize::try_from(at)
        .ok()
        .filter(|&i| i < n_names)
        .ok_or_else(|| DecodeError::new("name place past the names"))
}

/// The names section: every name the index holds, and each one's place.
fn put_names<'a>(s: &mut Vec<u8>, names: &[&'a Arc<str>]) -> FxHashMap<&'a str, u64> {
    put_varint(s, names.len() as u64);
    for n in names {
        put_str(s, n);
    }
    names
        .iter()
        .enumerate()
        .map(|(i, n)| (&***n, i as u64))
        .collect()
}

/// Section 2: `runs` (ascending) with their values (none: removed).
fn put_runs<'a>(
    s: &mut Vec<u8>,
    place: &FxHashMap<&str, u64>,
    runs: impl ExactSizeIterator<Item = (RunId, &'a [NamedKey])>,
) {
    put_varint(s, runs.len() as u64);
    let mut before = 0;
    for (run, values) in runs {
        debug_assert!(run > before, "runs ascending");
        put_varint(s, run - before);
        before = run;
        put_varint(s, values.len() as u64);
        for (name, key) in values {
            put_varint(s, place[&**name]);
            put_key(s, key);
        }
    }
}

/// One frame: `magic`, the format, `a` and `b` (a base part's place and
/// count, a delta's place and 0), the checksum, `body`.
fn frame(magic: [u8; 8], a: u32, b: u32, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER + body.len());
    f.extend_from_slice(&magic);
    put_u32(&mut f, FORMAT);
    put_u32(&mut f, a);
    put_u32(&mut f, b);
    let c = checksum(&f[8..20], body);
    put_u64(&mut f, c);
    f.extend_from_slice(body);
    f
}

/// A frame's body once its magic, format and checksum are checked, with
/// its two header fields.
fn open_frame(f: &[u8], magic: [u8; 8], part: usize) -> Result<(u32, u32, &[u8]), SnapshotError> {
    let mut r = Reader::new(f);
    if r.array::<8>().ok() != Some(magic) {
        return Err(SnapshotError::BadMagic { part });
    }
    let found = r.u32()?;
    if found != FORMAT {
        return Err(SnapshotError::Format { found });
    }
    let (a, b) = (r.u32()?, r.u32()?);
    let stored = r.u64()?;
    if stored != checksum(&f[8..20], r.rest()) {
        return Err(SnapshotError::BadCrc { part });
    }
    Ok((a, b, r.rest()))
}

impl AttrIndex {
    /// The base's frames (see the module docs): at least one, each at
    /// most [`PART_BYTES_MAX`] of stream behind its header.
    pub(crate) fn snapshot_frames(&self) -> Vec<Vec<u8>> {
        let names: Vec<&Arc<str>> = self.by_name.keys().collect();
        let mut s = Vec::new();
        let place = put_names(&mut s, &names);
        let mut runs: Vec<RunId> = self.by_run.runs().collect();
        runs.sort_unstable();
        let values = runs
            .iter()
            .map(|&run| (run, self.by_run.get(run).unwrap_or_default()));
        put_runs(&mut s, &place, values);
        for n in &names {
            let set = &self.by_name[*n];
            put_varint(&mut s, set.len() as u64);
            for (key, run) in set {
                put_key(&mut s, key);
                put_varint(&mut s, *run);
            }
        }
        // Never empty: the two counts are there.
        debug_assert!(s.len() >= 2);
        let parts = s.len().div_ceil(PART_BYTES_MAX);
        s.chunks(PART_BYTES_MAX)
            .enumerate()
            .map(|(i, body)| frame(MAGIC, i as u32, parts as u32, body))
            .collect()
    }

    /// The delta frame at place `seq` among the deltas: every run changed
    /// since the last frame was taken, with its values now (see the module
    /// docs). `None` if none changed.
    pub(crate) fn delta_frame(&self, seq: u32) -> Option<Vec<u8>> {
        if self.changed.is_empty() {
            return None;
        }
        let names: Vec<&Arc<str>> = self.by_name.keys().collect();
        let mut s = Vec::new();
        let place = put_names(&mut s, &names);
        let mut runs: Vec<RunId> = self.changed.iter().copied().collect();
        runs.sort_unstable();
        let values = runs
            .iter()
            .map(|&run| (run, self.by_run.get(run).unwrap_or_default()));
        put_runs(&mut s, &place, values);
        Some(frame(DELTA_MAGIC, seq, 0, &s))
    }

    /// A frame was taken (or none will be): changes count from now.
    pub(crate) fn forget_changes(&mut self) {
        self.changed.clear();
    }

    /// The index the frames hold (a base, then deltas), built (every run
    /// of the shard was in it when they were written) and wanted if it
    /// holds any run, with no change pending; and how many of the frames
    /// are the base's.
    pub(crate) fn from_snapshot(frames: &[Vec<u8>]) -> Result<(AttrIndex, usize), SnapshotError> {
        let first = frames.first().ok_or(SnapshotError::Misplaced {
            part: 0,
            says: 0,
            parts: 0,
            have: 0,
        })?;
        let (_, parts, _) = open_frame(first, MAGIC, 0)?;
        let base = parts as usize;
        if base == 0 || base > frames.len() {
            return Err(SnapshotError::Misplaced {
                part: 0,
                says: 0,
                parts,
                have: frames.len(),
            });
        }
        let mut stream = Vec::with_capacity(frames[..base].iter().map(|f| f.len()).sum());
        for (part, f) in frames[..base].iter().enumerate() {
            let (says, count, body) = open_frame(f, MAGIC, part)?;
            if says as usize != part || count != parts {
                return Err(SnapshotError::Misplaced {
                    part,
                    says,
                    parts: count,
                    have: frames.len(),
                });
            }
            stream.extend_from_slice(body);
        }
        let mut index = Self::decode_stream(&stream)?;
        for (i, f) in frames[base..].iter().enumerate() {
            let part = base + i;
            let (says, zero, body) = open_frame(f, DELTA_MAGIC, part)?;
            if says as usize != i || zero != 0 {
                return Err(SnapshotError::Misplaced {
                    part,
                    says,
                    parts: zero,
                    have: frames.len(),
                });
            }
            index.apply_delta(body)?;
        }
        index.changed.clear();
        index.wanted = index.by_run.len() > 0;
        Ok((index, base))
    }

    /// Applies one delta's body: each run's values set (none: removed).
    fn apply_delta(&mut self, s: &[u8]) -> Result<(), DecodeError> {
        let mut r = Reader::new(s);
        let n_names = r.count(2)?;
        let mut names: Vec<Arc<str>> = Vec::with_capacity(n_names);
        for _ in 0..n_names {
            let name = r.str()?;
            names.push(self.interned(name));
        }
        // A run takes at least 2 bytes: delta, count.
        let n_runs = r.count(2)?;
        let mut run: RunId = 0;
        for _ in 0..n_runs {
            run = next_run(&mut r, run)?;
            let pairs = r.count(2)?;
            let mut values = Vec::with_capacity(pairs);
            for _ in 0..pairs {
                let name = read_name(&mut r, n_names)?;
                values.push((Arc::clone(&names[name]), read_key(&mut r)?));
            }
            self.set_keys(run, values);
        }
        r.finish()
    }

    fn decode_stream(s: &[u8]) -> Result<AttrIndex, DecodeError> {
        let mut r = Reader::new(s);
        let n_names = r.count(2)?;
        let mut names: Vec<Arc<str>> = Vec::with_capacity(n_names);
        for _ in 0..n_names {
            names.push(Arc::from(r.str()?));
        }
        // How many values each name has in section 2, to check section 3.
        let mut per_name = vec![0usize; n_names];
        // A run takes at least 4 bytes: delta, count, one pair of 2.
        let n_runs = r.count(4)?;
        // Most runs carry each name; a pair takes at least 3 bytes (so no
        // count can size the arena past the input).
        let mut by_run = RunValues::with_capacity(
            n_runs,
            n_runs.saturating_mul(n_names).min(r.remaining() / 3),
        );
        let mut values = Vec::new();
        let mut run: RunId = 0;
        for _ in 0..n_runs {
            run = next_run(&mut r, run)?;
            let pairs = r.count(2)?;
            if pairs == 0 {
                return Err(DecodeError::new("a run without values"));
            }
            values.clear();
            for _ in 0..pairs {
                let name = read_name(&mut r, n_names)?;
                per_name[name] += 1;
                values.push((Arc::clone(&names[name]), read_key(&mut r)?));
            }
            by_run.insert_frozen(run, values.drain(..));
        }
        let mut by_name = FxHashMap::default();
        by_name.reserve(n_names);
        for (i, name) in names.into_iter().enumerate() {
            // An entry takes at least 3 bytes: kind, value, run.
            let n = r.count(3)?;
            if n != per_name[i] {
                return Err(DecodeError::new("sections disagree on a name's values"));
            }
            let mut entries: Vec<(AttrKey, RunId)> = Vec::with_capacity(n);
            for _ in 0..n {
                let e = (read_key(&mut r)?, r.varint()?);
                if entries.last().is_some_and(|last| *last >= e) {
                    return Err(DecodeError::new("a name's values not in ascending order"));
                }
                entries.push(e);
            }
            // Sorted input: the set is built in one pass, not by inserts.
            by_name.insert(name, BTreeSet::from_iter(entries));
        }
        r.finish()?;
        Ok(AttrIndex {
            built: true,
            wanted: by_run.len() > 0,
            below: None,
            by_name,
            by_run,
            changed: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attrs::{AttrCondition, AttrMap, AttrValue};

    fn index(runs: u64) -> AttrIndex {
        let mut ix = AttrIndex::default();
        for run in 1..=runs {
            let mut m = AttrMap::new();
            m.insert("c".into(), AttrValue::Int((run % 7) as i64 - 3));
            m.insert("amount".into(), AttrValue::Float(run as f64 / 3.0 - 5.0));
            if run % 3 == 0 {
                m.insert("tier".into(), AttrValue::Keyword(format!("t{}", run % 4)));
                m.insert("note".into(), AttrValue::Text("ü …".into()));
                m.insert("vip".into(), AttrValue::Bool(run % 2 == 0));
                m.insert("at".into(), AttrValue::Time(run * 1000));
            }
            ix.set(run * 3, &m);
        }
        ix
    }

    fn same(a: &AttrIndex, b: &AttrIndex) {
        assert_eq!(a.by_run.len(), b.by_run.len());
        for run in a.by_run.runs() {
            assert_eq!(a.by_run.get(run), b.by_run.get(run), "run {run}");
        }
        assert_eq!(a.by_name, b.by_name);
    }

    #[test]
    fn a_snapshot_reads_back_as_the_index_it_was_taken_of() {
        for runs in [0, 1, 50, 2000] {
            let ix = index(runs);
            let frames = ix.snapshot_frames();
            assert_eq!(frames.len(), 1);
            let (back, base) = AttrIndex::from_snapshot(&frames).unwrap();
            assert_eq!(base, 1);
            same(&ix, &back);
            assert!(back.built());
            assert_eq!(back.wanted, runs > 0);
            let eq = AttrCondition::eq("c", 1);
            assert_eq!(
                back.candidates(&eq, RunId::MAX, 5),
                ix.candidates(&eq, RunId::MAX, 5)
            );
        }
    }

    #[test]
    fn a_long_stream_is_cut_into_parts_and_joined_again() {
        let ix = index(30_000);
        let mut frames = ix.snapshot_frames();
        let whole: Vec<u8> = frames.iter().flat_map(|f| f[HEADER..].to_vec()).collect();
        // Cut again into 7 parts, as a smaller part size would.
        let part = whole.len().div_ceil(7);
        frames = whole
            .chunks(part)
            .enumerate()
            .map(|(i, body)| {
                let mut f = MAGIC.to_vec();
                put_u32(&mut f, FORMAT);
                put_u32(&mut f, i as u32);
                put_u32(&mut f, 7);
                let c = checksum(&f[8..20], body);
                put_u64(&mut f, c);
                f.extend_from_slice(body);
                f
            })
            .collect();
        same(&ix, &AttrIndex::from_snapshot(&frames).unwrap().0);
        frames.swap(2, 3);
        assert!(matches!(
            AttrIndex::from_snapshot(&frames),
            Err(SnapshotError::Misplaced { part: 2, .. })
        ));
        frames.swap(2, 3);
        frames.pop();
        assert!(matches!(
            AttrIndex::from_snapshot(&frames),
            Err(SnapshotError::Misplaced { .. })
        ));
    }

    #[test]
    fn deltas_applied_to_the_base_read_back_as_the_index_now() {
        let mut ix = index(500);
        let mut frames = ix.snapshot_frames();
        ix.forget_changes();
        assert!(ix.delta_frame(0).is_none(), "nothing changed");
        let mut m = AttrMap::new();
        m.insert("c".into(), AttrValue::Int(99));
        ix.set(3, &m);
        ix.set(9_000, &m);
        ix.remove(6);
        frames.push(ix.delta_frame(0).expect("changes"));
        ix.forget_changes();
        ix.remove(9_000);
        m.insert("tier".into(), AttrValue::Keyword("new".into()));
        ix.set(12, &m);
        frames.push(ix.delta_frame(1).expect("changes"));
        ix.forget_changes();
        let (back, base) = AttrIndex::from_snapshot(&frames).unwrap();
        assert_eq!(base, 1);
        same(&ix, &back);
        assert!(back.changed.is_empty());
        // A delta out of its place, or a base where a delta goes.
        frames.swap(1, 2);
        assert!(matches!(
            AttrIndex::from_snapshot(&frames),
            Err(SnapshotError::Misplaced { part: 1, .. })
        ));
        frames.swap(1, 2);
        frames[2] = frames[0].clone();
        assert!(matches!(
            AttrIndex::from_snapshot(&frames),
            Err(SnapshotError::BadMagic { part: 2 })
        ));
    }

    #[test]
    fn damaged_frames_are_errors_never_panics_or_other_indexes() {
        let ix = index(300);
        let frame = ix.snapshot_frames().remove(0);
        let mut rng = fastrand::Rng::with_seed(7);
        for i in 0..frame.len() {
            let mut bad = frame.clone();
            bad[i] ^= rng.u8(1..);
            assert!(AttrIndex::from_snapshot(&[bad]).is_err(), "byte {i}");
        }
        for len in 0..frame.len() {
            assert!(AttrIndex::from_snapshot(&[frame[..len].to_vec()]).is_err());
        }
        // Bytes past the checksum, made to pass it: decoded, checked, refused.
        for _ in 0..20_000 {
            let body: Vec<u8> = (0..rng.usize(0..64)).map(|_| rng.u8(..)).collect();
            let mut f = MAGIC.to_vec();
            put_u32(&mut f, FORMAT);
            put_u32(&mut f, 0);
            put_u32(&mut f, 1);
            let c = checksum(&f[8..20], &body);
            put_u64(&mut f, c);
            f.extend_from_slice(&body);
            let _ = AttrIndex::from_snapshot(&[f]);
        }
        // Sections that disagree: one by-name entry changed to another run.
        let mut s = Vec::new();
        put_varint(&mut s, 1);
        put_str(&mut s, "c");
        put_varint(&mut s, 1); // one run
        put_varint(&mut s, 5);
        put_varint(&mut s, 1);
        put_varint(&mut s, 0);
        put_key(&mut s, &AttrKey::Int(1));
        put_varint(&mut s, 2); // two entries for one value
        put_key(&mut s, &AttrKey::Int(1));
        put_varint(&mut s, 5);
        put_key(&mut s, &AttrKey::Int(1));
        put_varint(&mut s, 6);
        assert!(AttrIndex::decode_stream(&s).is_err());
    }
}
