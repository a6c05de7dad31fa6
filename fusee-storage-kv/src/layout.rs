//! The byte layout of every key and value both backends store: the only
//! module that knows it. A backend maps the five *tables* below onto its own
//! namespaces (redb tables, RocksDB column families) and stores the same
//! bytes in them. This is layout version [`FORMAT_VERSION`].
//!
//! Every key starts with the shard as a big-endian `u32` and continues with
//! big-endian numbers, so a byte-wise key order (what both engines use) is
//! the numeric order: a log iterates in LSN order and one shard's rows form
//! one contiguous range.
//!
//! # Keys
//!
//! | table | key bytes | fields |
//! |---|---|---|
//! | format | the backend's format key | one row per database |
//! | log | `0..4` shard BE u32, `4..12` LSN BE u64 (12 B, [`seq_key`]) | |
//! | store | `0..4` shard BE u32, `4..12` frame number BE u64 (12 B, [`seq_key`]) | |
//! | index | `0..4` shard BE u32, `4..8` generation BE u32, `8..16` run BE u64 (16 B, [`index_key`]) | |
//! | meta | `0..4` shard BE u32, `4` tag u8 (5 B, [`meta_key`]) | tag [`TAG_LOG`] or [`TAG_COMMIT`] |
//!
//! # Values
//!
//! Every CRC below is CRC-32 (IEEE, `crc32fast`), stored little-endian, and
//! covers **the row's key first**, then the value bytes it protects: a value
//! read under another key than the one it was written under fails its CRC
//! just as a changed value byte does ([`crc_of`]).
//!
//! **Format row** (12 B, [`format_value`]): `0..8` the backend's magic,
//! `8..12` layout version u32 LE. No CRC: any change makes it another
//! backend's magic or another version, both refused at open.
//!
//! **Log record** and **store frame** (4 + n B, [`with_crc`]): `0..4`
//! CRC of key ‖ bytes, `4..` the record's or frame's bytes (n ≥ 0).
//!
//! **Index record** (36 B, [`index_value`]): `0..32` the index record,
//! `32..36` CRC of key ‖ record. The record also carries its run, which
//! must be the key's ([`crate::KvCheckpoint`] checks it).
//!
//! **Log row** (meta tag 1, 20 B, [`LogRow`]): `0..8` `base` u64 LE (the
//! LSN before the first record kept), `8..16` `last` u64 LE (the last
//! flushed LSN; it survives discarding every record), `16..20` CRC of key ‖
//! bytes `0..16`. Written by every log flush in the same durable write as
//! the records, and by discards and spills (not durable) with `last`
//! unchanged; its presence says the shard was opened at least once.
//!
//! **Commit row** (meta tag 2, 24 + n B, [`CommitRow`]): `0..8` `position`
//! u64 LE (the store's next frame number at the commit), `8..12`
//! `generation` u32 LE (which index generation is live), `12..20`
//! `records` u64 LE (how many index records that generation holds),
//! `20..24` CRC of key ‖ bytes `0..20` ‖ the checkpoint, `24..` the
//! checkpoint bytes (n ≥ 0). Absent until the shard's first commit.
//!
//! A range end for "everything of a shard" (or of a shard's generation) is
//! the prefix followed by nine `0xFF` bytes ([`seq_end`], [`index_end`],
//! [`index_shard_end`]): longer than, and so after, every key with that
//! prefix. (redb, whose keys are fixed-size arrays, uses inclusive ends
//! with `u64::MAX` instead.)
//!
//! # Versions
//!
//! | version | change |
//! |---|---|
//! | 1 | CRCs over the value only |
//! | 2 | CRCs over the key, then the value (this one) |
//!
//! A database of another version is refused at open with
//! [`fusee_storage::StorageError::UnsupportedFormat`] (no conversion: a
//! version-1 value would fail its CRC, never be misread).
//!
//! # Invariants
//!
//! The log holds LSNs `base+1..=last` of a shard, plus,
//! between flushes, spilled unflushed records past `last`, which opening the
//! shard deletes. Store frames `< position` are the committed ones; frames
//! `>= position` are leftovers of an uncommitted interval and are deleted
//! when the shard is opened. Index rows of any generation other than the
//! commit row's are a base streamed but not committed (or an old base not
//! yet deleted) and are deleted at open too ([`crate::Cleanup`]).
//!
//! # Garbage
//!
//! Every value carries a CRC-32 of ours, whatever the engine checks itself
//! (redb does not verify page checksums on reads; RocksDB does, but a value
//! damaged before it checksummed it would pass): a changed byte of a key or
//! a value is reported as [`fusee_storage::StorageError::Corrupt`] naming
//! the table and the LSN, frame number, record or shard, never returned. A
//! value cut short is corrupt too.

use fusee_core::record::Lsn;
use fusee_storage::{INDEX_RECORD, StorageError};

/// The layout version this crate writes and reads (see the table above).
pub const FORMAT_VERSION: u32 = 2;

/// Meta tag of a shard's [`LogRow`].
pub const TAG_LOG: u8 = 1;
/// Meta tag of a shard's [`CommitRow`].
pub const TAG_COMMIT: u8 = 2;

/// Bytes of a CRC.
pub const CRC: usize = 4;

/// Bytes of a stored index value: the record and its CRC-32.
pub const INDEX_VALUE: usize = INDEX_RECORD + CRC;

/// Bytes of a stored log row.
pub const LOG_ROW: usize = 20;

/// The key of a log record or store frame: sorts by shard, then number.
pub fn seq_key(shard: u32, n: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&shard.to_be_bytes());
    k[4..].copy_from_slice(&n.to_be_bytes());
    k
}

/// The end (exclusive) of every log or store key of `shard`.
pub fn seq_end(shard: u32) -> [u8; 13] {
    let mut k = [0xFFu8; 13];
    k[..4].copy_from_slice(&shard.to_be_bytes());
    k
}

/// The number (LSN or frame number) in a log or store key, or `None` if the
/// key is not 12 bytes long.
pub fn seq_of(key: &[u8]) -> Option<u64> {
    let key: &[u8; 12] = key.try_into().ok()?;
    let (_, n) = key.split_first_chunk::<4>()?;
    let n: [u8; 8] = n.try_into().ok()?;
    Some(u64::from_be_bytes(n))
}

/// The key of an index record: sorts by shard, generation, then run.
pub fn index_key(shard: u32, generation: u32, run: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(&shard.to_be_bytes());
    k[4..8].copy_from_slice(&generation.to_be_bytes());
    k[8..].copy_from_slice(&run.to_be_bytes());
    k
}

/// The end (exclusive) of every index key of `shard`'s `generation`.
pub fn index_end(shard: u32, generation: u32) -> [u8; 17] {
    let mut k = [0xFFu8; 17];
    k[..4].copy_from_slice(&shard.to_be_bytes());
    k[4..8].copy_from_slice(&generation.to_be_bytes());
    k
}

/// The end (exclusive) of every index key of `shard`.
pub fn index_shard_end(shard: u32) -> [u8; 17] {
    let mut k = [0xFFu8; 17];
    k[..4].copy_from_slice(&shard.to_be_bytes());
    k
}

/// The key of a meta row.
pub fn meta_key(shard: u32, tag: u8) -> [u8; 5] {
    let mut k = [0u8; 5];
    k[..4].copy_from_slice(&shard.to_be_bytes());
    k[4] = tag;
    k
}

/// Whether `tag` names a meta row this layout writes.
pub fn known_tag(tag: u8) -> bool {
    tag == TAG_LOG || tag == TAG_COMMIT
}

/// The shard and tag of a meta key, or `None` for a key of another length
/// (a format marker sharing the table).
pub fn meta_of(key: &[u8]) -> Option<(u32, u8)> {
    let key: &[u8; 5] = key.try_into().ok()?;
    Some((u32::from_be_bytes([key[0], key[1], key[2], key[3]]), key[4]))
}

/// The format marker value: `magic` and `version`.
pub fn format_value(magic: [u8; 8], version: u32) -> [u8; 12] {
    let mut v = [0u8; 12];
    v[..8].copy_from_slice(&magic);
    v[8..].copy_from_slice(&version.to_le_bytes());
    v
}

/// The version a format value declares, or `None` if it is not 12 bytes
/// starting with `magic`.
pub fn format_version(magic: [u8; 8], value: &[u8]) -> Option<u32> {
    let (found, version) = value.split_first_chunk::<8>()?;
    let version: [u8; 4] = version.try_into().ok()?;
    (*found == magic).then_some(u32::from_le_bytes(version))
}

/// The CRC-32 of `key` followed by each of `parts`: what every stored value
/// carries.
pub fn crc_of(key: &[u8], parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(key);
    for part in parts {
        h.update(part);
    }
    h.finalize()
}

/// `bytes` prefixed with the CRC of `key` ‖ `bytes`: the stored form of a
/// record or frame stored under `key`.
pub fn with_crc(key: &[u8], bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(CRC + bytes.len());
    v.extend_from_slice(&crc_of(key, &[bytes]).to_le_bytes());
    v.extend_from_slice(bytes);
    v
}

/// The payload of a CRC-prefixed value read under `key`, or
/// `Corrupt { what, at }`.
pub fn check_crc<'a>(
    key: &[u8],
    value: &'a [u8],
    what: &'static str,
    at: u64,
) -> Result<&'a [u8], StorageError> {
    let corrupt = || StorageError::Corrupt { what, at };
    let (crc, bytes) = value.split_first_chunk::<CRC>().ok_or_else(corrupt)?;
    if u32::from_le_bytes(*crc) != crc_of(key, &[bytes]) {
        return Err(corrupt());
    }
    Ok(bytes)
}

/// The stored form of an index record stored under `key`.
pub fn index_value(key: &[u8; 16], record: &[u8; INDEX_RECORD]) -> [u8; INDEX_VALUE] {
    let mut v = [0u8; INDEX_VALUE];
    v[..INDEX_RECORD].copy_from_slice(record);
    v[INDEX_RECORD..].copy_from_slice(&crc_of(key, &[record]).to_le_bytes());
    v
}

/// The record of a stored index value read under `key`, or
/// `Corrupt { what, at }` if it is not [`INDEX_VALUE`] bytes or its CRC is
/// wrong.
pub fn index_record_of(
    key: &[u8],
    value: &[u8],
    what: &'static str,
    at: u64,
) -> Result<[u8; INDEX_RECORD], StorageError> {
    let corrupt = || StorageError::Corrupt { what, at };
    let value: &[u8; INDEX_VALUE] = value.try_into().map_err(|_| corrupt())?;
    let (record, crc) = value
        .split_first_chunk::<INDEX_RECORD>()
        .ok_or_else(corrupt)?;
    let crc: [u8; CRC] = crc.try_into().map_err(|_| corrupt())?;
    if u32::from_le_bytes(crc) != crc_of(key, &[record]) {
        return Err(corrupt());
    }
    Ok(*record)
}

/// A little-endian u64 at `at` of `bytes` (which the caller sized).
fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

/// A little-endian u32 at `at` of `bytes` (which the caller sized).
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(w)
}

/// A shard's log bounds as stored in its meta row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogRow {
    /// The LSN before the first record kept.
    pub base: Lsn,
    /// The last flushed LSN.
    pub last: Lsn,
}

impl LogRow {
    /// The stored form of `shard`'s row.
    pub fn encode(&self, shard: u32) -> [u8; LOG_ROW] {
        let mut v = [0u8; LOG_ROW];
        v[..8].copy_from_slice(&self.base.to_le_bytes());
        v[8..16].copy_from_slice(&self.last.to_le_bytes());
        let crc = crc_of(&meta_key(shard, TAG_LOG), &[&v[..16]]);
        v[16..].copy_from_slice(&crc.to_le_bytes());
        v
    }

    /// Decodes the stored row of `shard`, checking length, CRC and
    /// `base <= last`; `Corrupt { what, at: shard }` otherwise.
    pub fn decode(value: &[u8], shard: u32, what: &'static str) -> Result<Self, StorageError> {
        let corrupt = || StorageError::Corrupt {
            what,
            at: u64::from(shard),
        };
        let v: &[u8; LOG_ROW] = value.try_into().map_err(|_| corrupt())?;
        let row = Self {
            base: u64_at(v, 0),
            last: u64_at(v, 8),
        };
        let crc = crc_of(&meta_key(shard, TAG_LOG), &[&v[..16]]);
        if u32_at(v, 16) != crc || row.base > row.last {
            return Err(corrupt());
        }
        Ok(row)
    }
}

/// A shard's last commit as stored in its meta row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitRow {
    /// The store's next frame number at the commit.
    pub position: u64,
    /// The live index generation.
    pub generation: u32,
    /// How many records it holds.
    pub records: u64,
    /// The checkpoint bytes.
    pub checkpoint: Vec<u8>,
}

/// Bytes of a commit row before the checkpoint.
const COMMIT_HEAD: usize = 24;

impl CommitRow {
    /// The stored form of `shard`'s row.
    pub fn encode(&self, shard: u32) -> Vec<u8> {
        let mut v = Vec::with_capacity(COMMIT_HEAD + self.checkpoint.len());
        v.extend_from_slice(&self.position.to_le_bytes());
        v.extend_from_slice(&self.generation.to_le_bytes());
        v.extend_from_slice(&self.records.to_le_bytes());
        let crc = crc_of(&meta_key(shard, TAG_COMMIT), &[&v, &self.checkpoint]);
        v.extend_from_slice(&crc.to_le_bytes());
        v.extend_from_slice(&self.checkpoint);
        v
    }

    /// Decodes the stored row of `shard`, checking length and CRC;
    /// `Corrupt { what, at: shard }` otherwise.
    pub fn decode(value: &[u8], shard: u32, what: &'static str) -> Result<Self, StorageError> {
        let corrupt = || StorageError::Corrupt {
            what,
            at: u64::from(shard),
        };
        let (head, checkpoint) = value
            .split_first_chunk::<COMMIT_HEAD>()
            .ok_or_else(corrupt)?;
        let crc = crc_of(&meta_key(shard, TAG_COMMIT), &[&head[..20], checkpoint]);
        if u32_at(head, 20) != crc {
            return Err(corrupt());
        }
        Ok(Self {
            position: u64_at(head, 0),
            generation: u32_at(head, 8),
            records: u64_at(head, 12),
            checkpoint: checkpoint.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_numerically() {
        let a = seq_key(1, 255);
        let b = seq_key(1, 256);
        let c = seq_key(2, 0);
        assert!(a < b && b < c);
        assert_eq!(seq_of(&b), Some(256));
        assert_eq!(seq_of(&b[..11]), None);
        assert!(seq_key(1, u64::MAX)[..] < seq_end(1)[..] && seq_end(1)[..] < c[..]);
        assert!(seq_end(u32::MAX)[..] > seq_key(u32::MAX, u64::MAX)[..]);
        assert!(index_key(1, 0, u64::MAX) < index_key(1, 1, 0));
        assert!(index_key(1, 0, u64::MAX)[..] < index_end(1, 0)[..]);
        assert!(index_end(1, 0)[..] < index_key(1, 1, 0)[..]);
        assert!(index_key(1, u32::MAX, u64::MAX)[..] < index_shard_end(1)[..]);
        assert!(index_shard_end(1)[..] < index_key(2, 0, 0)[..]);
        assert_eq!(
            meta_of(&meta_key(0xDEAD_BEEF, TAG_COMMIT)),
            Some((0xDEAD_BEEF, 2))
        );
        assert_eq!(meta_of(b"fusee.format"), None);
    }

    #[test]
    fn rows_round_trip_and_reject_any_changed_byte_or_shard() {
        let log = LogRow { base: 7, last: 99 };
        assert_eq!(LogRow::decode(&log.encode(3), 3, "t").ok(), Some(log));
        let commit = CommitRow {
            position: 5,
            generation: 9,
            records: 1 << 40,
            checkpoint: b"ck".to_vec(),
        };
        let bytes = commit.encode(3);
        assert_eq!(CommitRow::decode(&bytes, 3, "t").ok(), Some(commit));
        // A row read under another shard's key (its key damaged) fails.
        assert!(CommitRow::decode(&bytes, 4, "t").is_err());
        assert!(LogRow::decode(&log.encode(3), 2, "t").is_err());
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            assert!(CommitRow::decode(&bad, 3, "t").is_err(), "byte {i} flipped");
        }
        let lb = log.encode(3);
        for i in 0..lb.len() {
            let mut bad = lb;
            bad[i] ^= 1;
            assert!(LogRow::decode(&bad, 3, "t").is_err(), "byte {i} flipped");
        }
        for n in 0..24 {
            assert!(CommitRow::decode(&bytes[..n], 3, "t").is_err());
            assert!(LogRow::decode(&lb[..n.min(19)], 3, "t").is_err());
        }
        let inverted = LogRow { base: 9, last: 8 };
        assert!(LogRow::decode(&inverted.encode(0), 0, "t").is_err());
    }

    /// Version 2 pinned: a log row of shard 1 with base 2 and last 3 is
    /// these bytes, its CRC covering the key `00 00 00 01 01` first.
    #[test]
    fn the_crc_covers_the_key() {
        let row = LogRow { base: 2, last: 3 }.encode(1);
        let mut h = crc32fast::Hasher::new();
        h.update(&[0, 0, 0, 1, TAG_LOG]);
        h.update(&row[..16]);
        assert_eq!(row[16..], h.finalize().to_le_bytes());
        assert_eq!(row[..16], [2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
        // Version 1 (CRC over the value only) no longer decodes.
        let mut v1 = row;
        v1[16..].copy_from_slice(&crc32fast::hash(&row[..16]).to_le_bytes());
        assert!(LogRow::decode(&v1, 1, "t").is_err());
    }

    #[test]
    fn crc_values_and_format() {
        let key = seq_key(1, 7);
        let v = with_crc(&key, b"hello");
        assert_eq!(check_crc(&key, &v, "t", 0).ok(), Some(&b"hello"[..]));
        // The same value under another number or shard is corrupt.
        assert!(check_crc(&seq_key(1, 8), &v, "t", 0).is_err());
        assert!(check_crc(&seq_key(2, 7), &v, "t", 0).is_err());
        let mut bad = v.clone();
        bad[6] ^= 1;
        assert!(check_crc(&key, &bad, "t", 0).is_err());
        assert!(check_crc(&key, &v[..3], "t", 0).is_err());
        let magic = *b"FUSEE-XX";
        assert_eq!(format_version(magic, &format_value(magic, 3)), Some(3));
        assert_eq!(format_version(magic, b"FUSEE-RX\x01\0\0\0"), None);
        assert_eq!(format_version(magic, b"short"), None);
        assert_eq!(format_version(magic, b"FUSEE-XX\x01\0\0\0\0"), None);
        let r = [9u8; INDEX_RECORD];
        let k = index_key(1, 2, 3);
        let v = index_value(&k, &r);
        assert_eq!(index_record_of(&k, &v, "t", 0).ok(), Some(r));
        assert!(index_record_of(&index_key(1, 3, 3), &v, "t", 0).is_err());
        for i in 0..INDEX_VALUE {
            let mut bad = v;
            bad[i] ^= 4;
            assert!(index_record_of(&k, &bad, "t", 0).is_err(), "byte {i}");
        }
        assert!(index_record_of(&k, &v[..INDEX_VALUE - 1], "t", 0).is_err());
    }
}
