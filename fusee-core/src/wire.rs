//! Byte-level building blocks shared by every format in the crate.
//!
//! # Encodings
//!
//! - **Fixed integers** are little-endian: `u16` in 2 bytes, `u32` in 4,
//!   `u64` in 8.
//! - **Varints** are unsigned LEB128: 7 bits per byte, least significant
//!   group first, the high bit set on every byte but the last. A `u32` takes
//!   at most 5 bytes, a `u64` at most 10. The decoder rejects a varint that
//!   runs past its width (a 6th byte for `u32`, an 11th for `u64`, or high
//!   bits in the last byte that do not fit), so each value has one accepted
//!   longest form and no input can overflow.
//! - **Bytes** are a varint length followed by that many bytes; a **string**
//!   is bytes that must be valid UTF-8.
//!
//! # Invariants
//!
//! Every decoder in the crate reads through [`Reader`], which checks every
//! length against the bytes actually present before it slices or allocates,
//! and reports a [`DecodeError`] with a static reason instead of panicking.
//! A length prefix can therefore never make a decoder allocate more than the
//! input it was given justifies.
//!
//! # Hashes
//!
//! [`checksum64`] chains XXH64 over several parts (dedup keys and hash
//! chains, where 32 bits would collide over billions of entries).
//! [`hash_id`] is the stable hash of a workflow ID that routes it to a shard
//! and indexes it in the run table: it must never change between versions or
//! platforms, and its test vectors are pinned in this module's tests.

use std::fmt;

/// Largest payload a record may carry, and the largest length any decoder
/// accepts for one length-prefixed field: 64 MiB.
pub const MAX_PAYLOAD: usize = 64 << 20;

/// Why some bytes could not be decoded. The reason is static, so the error
/// path never allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("decode error: {reason}")]
pub struct DecodeError {
    /// What was wrong, in a few words.
    pub reason: &'static str,
}

impl DecodeError {
    /// An error with this reason.
    pub const fn new(reason: &'static str) -> Self {
        Self { reason }
    }
}

/// The result of every decoder in the crate.
pub type DecodeResult<T> = Result<T, DecodeError>;

/// Appends `v` as one byte.
#[inline]
pub fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}

/// Appends `v` little-endian in 2 bytes.
#[inline]
pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` little-endian in 4 bytes.
#[inline]
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` little-endian in 8 bytes.
#[inline]
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` as a LEB128 varint (1 to 10 bytes).
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// How many bytes [`put_varint`] writes for `v`.
#[inline]
pub const fn varint_len(v: u64) -> usize {
    // One byte per started group of 7 significant bits; 0 still takes one.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Appends `bytes` behind its varint length.
#[inline]
pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Appends `s` behind its varint length.
#[inline]
pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

/// A bounds-checked cursor over borrowed bytes. Every read either returns
/// what it promises or a [`DecodeError`]; no input makes it panic, and a
/// length it is told about is checked against the bytes left before anything
/// is sliced.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub const fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// Bytes consumed so far.
    pub const fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub const fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Whether every byte was read.
    pub const fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The bytes not read yet, without consuming them.
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.pos..]
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> DecodeResult<&'a [u8]> {
        if n > self.remaining() {
            return Err(DecodeError::new("truncated"));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> DecodeResult<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// One byte.
    pub fn u8(&mut self) -> DecodeResult<u8> {
        Ok(self.array::<1>()?[0])
    }

    /// A little-endian `u16`.
    pub fn u16(&mut self) -> DecodeResult<u16> {
        self.array().map(u16::from_le_bytes)
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self) -> DecodeResult<u32> {
        self.array().map(u32::from_le_bytes)
    }

    /// A little-endian `u64`.
    pub fn u64(&mut self) -> DecodeResult<u64> {
        self.array().map(u64::from_le_bytes)
    }

    /// A LEB128 varint of at most 64 bits.
    pub fn varint(&mut self) -> DecodeResult<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self
                .u8()
                .map_err(|_| DecodeError::new("truncated varint"))?;
            let group = u64::from(b & 0x7f);
            // The 10th byte may only carry the 64th bit.
            if i == 9 && (b & 0x80 != 0 || group > 1) {
                return Err(DecodeError::new("varint overflows 64 bits"));
            }
            v |= group << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::new("varint overflows 64 bits"))
    }

    /// A LEB128 varint that must fit 32 bits.
    pub fn varint32(&mut self) -> DecodeResult<u32> {
        u32::try_from(self.varint()?).map_err(|_| DecodeError::new("varint overflows 32 bits"))
    }

    /// A varint count of items taking at least `min_bytes` each (at least
    /// 1), checked against the bytes left so it can size an allocation.
    pub fn count(&mut self, min_bytes: usize) -> DecodeResult<usize> {
        let n = self.varint()?;
        if n > (self.remaining() / min_bytes.max(1)) as u64 {
            return Err(DecodeError::new("count larger than the bytes left"));
        }
        Ok(n as usize)
    }

    /// A varint length, checked against [`MAX_PAYLOAD`] and the bytes left.
    pub fn len_prefix(&mut self) -> DecodeResult<usize> {
        let n = self.varint()?;
        if n > MAX_PAYLOAD as u64 {
            return Err(DecodeError::new("length over the payload limit"));
        }
        let n = n as usize;
        if n > self.remaining() {
            return Err(DecodeError::new("length past the end of input"));
        }
        Ok(n)
    }

    /// Length-prefixed bytes.
    pub fn bytes(&mut self) -> DecodeResult<&'a [u8]> {
        let n = self.len_prefix()?;
        self.take(n)
    }

    /// A length-prefixed UTF-8 string.
    pub fn str(&mut self) -> DecodeResult<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| DecodeError::new("string is not UTF-8"))
    }

    /// Succeeds only if every byte was read.
    pub fn finish(&self) -> DecodeResult<()> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::new("trailing bytes"))
        }
    }
}

/// XXH64 of `bytes` with `seed`.
pub fn xxh64(bytes: &[u8], seed: u64) -> u64 {
    xxhash_rust::xxh64::xxh64(bytes, seed)
}

/// The 32-bit checksum of log frames: the low 32 bits of XXH3-64 (seed 0)
/// of `bytes`. A frame is small (a record of ~100 bytes is typical) and one
/// is checksummed per record on the append path, where XXH3 is about twice
/// as fast as CRC-32 (`crc32fast` falls back to its table below 128 bytes):
/// see the `core_segment` bench. Like a CRC it misses a random change with
/// probability 2⁻³²; unlike a CRC it promises nothing special for short
/// bursts, which is the trade RocksDB's XXH3 block checksums make too.
pub fn checksum32(bytes: &[u8]) -> u32 {
    // Truncation is the point: the low half of XXH3-64 is as well mixed
    // as the whole.
    xxhash_rust::xxh3::xxh3_64(bytes) as u32
}

/// A chained 64-bit checksum of several parts: each part is hashed with
/// XXH64 seeded by the checksum of the parts before it (the first with seed
/// 0), so every bit of the result depends on every part and on where the
/// parts split. One part gives plain `xxh64(part, 0)`.
pub fn checksum64(parts: &[&[u8]]) -> u64 {
    parts.iter().fold(0, |seed, part| xxh64(part, seed))
}

/// The stable 64-bit hash of a workflow ID: FNV-1a 64 over its UTF-8 bytes,
/// then the MurmurHash3 64-bit finaliser so nearby IDs spread over every
/// bit (FNV alone leaves the low bits weak, and routing takes them modulo
/// the shard count).
///
/// Shard routing and the run table's ID index depend on this exact
/// function: changing it would send existing workflows to the wrong shard.
pub fn hash_id(id: &str) -> u64 {
    let mut h = fnv1a64(id.as_bytes());
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// FNV-1a, 64-bit.
fn fnv1a64(bytes: &[u8]) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(FNV_OFFSET, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    })
}

/// Formats bytes as lower-case hex, for error messages and tests.
pub struct Hex<'a>(pub &'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_width() {
        let mut values = vec![0u64, 1, 127, 128, 255, 16_383, 16_384, u64::MAX];
        values.extend((0..64).map(|b| 1u64 << b));
        values.extend((1..64).map(|b| (1u64 << b) - 1));
        for v in values {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
            let mut r = Reader::new(&out);
            assert_eq!(r.varint(), Ok(v));
            r.finish().unwrap();
        }
    }

    #[test]
    fn varints_past_their_width_are_rejected() {
        // 11 continuation bytes.
        assert!(Reader::new(&[0xff; 11]).varint().is_err());
        // A 10th byte carrying more than the 64th bit.
        let mut b = [0xffu8; 10];
        b[9] = 0x02;
        assert!(Reader::new(&b).varint().is_err());
        b[9] = 0x01;
        assert_eq!(Reader::new(&b).varint(), Ok(u64::MAX));
        // Fits 64 bits but not 32.
        let mut out = Vec::new();
        put_varint(&mut out, u64::from(u32::MAX) + 1);
        assert!(Reader::new(&out).varint32().is_err());
        assert!(Reader::new(&[0x80]).varint().is_err());
    }

    #[test]
    fn lengths_are_checked_before_slicing() {
        let mut out = Vec::new();
        put_varint(&mut out, 4 << 30);
        out.extend_from_slice(b"tiny");
        assert!(Reader::new(&out).bytes().is_err());
        let mut out = Vec::new();
        put_varint(&mut out, 10);
        out.extend_from_slice(b"tiny");
        assert!(Reader::new(&out).bytes().is_err());
        let mut out = Vec::new();
        put_bytes(&mut out, &[0xff, 0xfe]);
        assert!(Reader::new(&out).str().is_err());
    }

    #[test]
    fn fixed_ints_are_little_endian() {
        let mut out = Vec::new();
        put_u16(&mut out, 0x0102);
        put_u32(&mut out, 0x0304_0506);
        put_u64(&mut out, 0x0708_090a_0b0c_0d0e);
        assert_eq!(
            out,
            [2, 1, 6, 5, 4, 3, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 9, 8, 7]
        );
        let mut r = Reader::new(&out);
        assert_eq!(r.u16(), Ok(0x0102));
        assert_eq!(r.u32(), Ok(0x0304_0506));
        assert_eq!(r.u64(), Ok(0x0708_090a_0b0c_0d0e));
        assert!(r.u8().is_err());
    }

    /// Published XXH64 vectors (the reference implementation's sanity
    /// checks and the values every port agrees on).
    #[test]
    fn xxh64_matches_published_vectors() {
        assert_eq!(xxh64(b"", 0), 0xef46_db37_51d8_e999);
        assert_eq!(xxh64(b"a", 0), 0xd24e_c4f1_a98c_6e5b);
        assert_eq!(xxh64(b"abc", 0), 0x44bc_2cf5_ad77_0999);
        assert_eq!(
            xxh64(b"Nobody inspects the spammish repetition", 0),
            0xfbce_a83c_8a37_8bf1
        );
        assert_eq!(checksum64(&[b"abc"]), xxh64(b"abc", 0));
        assert_eq!(
            checksum64(&[b"ab", b"c"]),
            xxh64(b"c", xxh64(b"ab", 0)),
            "each part is seeded with the hash of the parts before it"
        );
        assert_ne!(checksum64(&[b"ab", b"c"]), checksum64(&[b"a", b"bc"]));
    }

    /// `checksum32` is the low half of XXH3-64: the published empty-input
    /// value, and values an independent implementation (Python's `xxhash`
    /// 3.x) gives for inputs on each of XXH3's short-input paths.
    #[test]
    fn checksum32_is_the_low_half_of_xxh3() {
        assert_eq!(checksum32(b""), 0x38d3_94c2); // XXH3-64 = 0x2d06800538d394c2
        assert_eq!(checksum32(b"abc"), 0x892f_3950);
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(checksum32(&bytes[..112]), 0xdb23_2fec);
        assert_eq!(checksum32(&bytes[..200]), 0xfeaf_0703);
    }

    /// The published FNV-1a 64 vectors.
    #[test]
    fn fnv1a64_matches_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    /// Pinned forever: shard routing and the ID index depend on these.
    #[test]
    fn hash_id_never_changes() {
        let pinned: [(&str, u64); 4] = [
            ("", HASH_EMPTY),
            ("a", HASH_A),
            ("order-42", HASH_ORDER_42),
            ("ünïcødé", HASH_UNICODE),
        ];
        for (id, want) in pinned {
            assert_eq!(hash_id(id), want, "hash_id({id:?}) = {:#018x}", hash_id(id));
        }
    }

    const HASH_EMPTY: u64 = 0xefd0_1f60_ba99_2926;
    const HASH_A: u64 = 0x82a2_a958_a9be_ce5b;
    const HASH_ORDER_42: u64 = 0x8e47_543c_313c_6386;
    const HASH_UNICODE: u64 = 0xc4b3_c4eb_f61b_c14d;
}
