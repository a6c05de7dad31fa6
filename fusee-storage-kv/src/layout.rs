//! The byte layout of every key and value both backends store: the only
//! module that knows it. A backend maps the five *tables* below onto its own
//! namespaces (redb tables, RocksDB column families) and stores the same
//! bytes in them.
//!
//! Every key starts with the shard as a big-endian `u32` and continues with
//! big-endian numbers, so a byte-wise key order (what both engines use) is
//! the numeric order: a log iterates in LSN order and one shard's rows form
//! one contiguous range.
//!
//! | table | key | value |
//! |---|---|---|
//! | format | the format key (the backend's) | magic (8 B, the backend's) ‖ version `u32` LE ([`format_value`]) |
//! | log | shard BE u32 ‖ LSN BE u64 (12 B, [`seq_key`]) | CRC-32 LE u32 of the record ‖ record bytes ([`with_crc`]) |
//! | store | shard BE u32 ‖ frame number BE u64 (12 B, [`seq_key`]) | CRC-32 LE u32 of the frame ‖ frame bytes ([`with_crc`]) |
//! | index | shard BE u32 ‖ generation BE u32 ‖ run BE u64 (16 B, [`index_key`]) | the 32-byte index record ‖ its CRC-32 LE u32 (36 B, [`index_value`]) |
//! | meta | shard BE u32 ‖ tag u8 (5 B, [`meta_key`]) | tag [`TAG_LOG`]: [`LogRow`]; tag [`TAG_COMMIT`]: [`CommitRow`] |
//!
//! A range end for "everything of a shard" (or of a shard's generation) is
//! the prefix followed by nine `0xFF` bytes ([`seq_end`], [`index_end`],
//! [`index_shard_end`]): longer than, and so after, every key with that
//! prefix. (redb, whose keys are fixed-size arrays, uses inclusive ends
//! with `u64::MAX` instead.)
//!
//! **Log row** (tag 1, 20 bytes): `base` u64 LE (the LSN before the first
//! record kept) ‖ `last` u64 LE (the last flushed LSN; it survives discarding
//! every record) ‖ CRC-32 LE of the 16 bytes before it. Written by every log
//! flush in the same durable write as the records, and by discards and
//! spills (not durable) with `last` unchanged; its presence says the shard
//! was opened at least once.
//!
//! **Commit row** (tag 2, 24 + n bytes): `position` u64 LE (the store's next
//! frame number at the commit) ‖ `generation` u32 LE (which index generation
//! is live) ‖ `records` u64 LE (how many index records that generation
//! holds) ‖ CRC-32 LE of everything else ‖ the checkpoint bytes (n ≥ 0).
//! Absent until the shard's first commit.
//!
//! **Invariants.** The log holds LSNs `base+1..=last` of a shard, plus,
//! between flushes, spilled unflushed records past `last`, which opening the
//! shard deletes. Store frames `< position` are the committed ones; frames
//! `>= position` are leftovers of an uncommitted interval and are deleted
//! when the shard is opened. Index rows of any generation other than the
//! commit row's are a base streamed but not committed (or an old base not
//! yet deleted) and are deleted at open too ([`crate::Cleanup`]).
//!
//! **Garbage.** Every value carries a CRC-32 of ours, whatever the engine
//! checks itself (redb does not verify page checksums on reads; RocksDB
//! does, but a value damaged before it checksummed it would pass): a changed
//! byte is reported as [`fusee_storage::StorageError::Corrupt`] naming the
//! table and the LSN, frame number, record or shard, never returned. A value
//! cut short is corrupt too. An index record is also checked against its
//! key's run.

use fusee_core::record::Lsn;
use fusee_storage::{INDEX_RECORD, StorageError};

/// Meta tag of a shard's [`LogRow`].
pub const TAG_LOG: u8 = 1;
/// Meta tag of a shard's [`CommitRow`].
pub const TAG_COMMIT: u8 = 2;

/// Bytes of the CRC that prefixes log records and frames.
pub const CRC: usize = 4;

/// Bytes of a stored index value: the record and its CRC-32.
pub const INDEX_VALUE: usize = INDEX_RECORD + CRC;

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

/// `bytes` prefixed with their CRC, the stored form of a record or frame.
pub fn with_crc(bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(CRC + bytes.len());
    v.extend_from_slice(&crc32fast::hash(bytes).to_le_bytes());
    v.extend_from_slice(bytes);
    v
}

/// The payload of a CRC-prefixed value, or `Corrupt { what, at }`.
pub fn check_crc<'a>(
    value: &'a [u8],
    what: &'static str,
    at: u64,
) -> Result<&'a [u8], StorageError> {
    let corrupt = StorageError::Corrupt { what, at };
    let (crc, bytes) = value.split_first_chunk::<CRC>().ok_or(corrupt)?;
    if u32::from_le_bytes(*crc) != crc32fast::hash(bytes) {
        return Err(StorageError::Corrupt { what, at });
    }
    Ok(bytes)
}

/// The stored form of an index record.
pub fn index_value(record: &[u8; INDEX_RECORD]) -> [u8; INDEX_VALUE] {
    let mut v = [0u8; INDEX_VALUE];
    v[..INDEX_RECORD].copy_from_slice(record);
    v[INDEX_RECORD..].copy_from_slice(&crc32fast::hash(record).to_le_bytes());
    v
}

/// The record of a stored index value, or `Corrupt { what, at }` if it is
/// not [`INDEX_VALUE`] bytes or its CRC is wrong.
pub fn index_record_of(
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
    if u32::from_le_bytes(crc) != crc32fast::hash(record) {
        return Err(corrupt());
    }
    Ok(*record)
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
    /// The 20-byte stored form.
    pub fn encode(&self) -> [u8; 20] {
        let mut v = [0u8; 20];
        v[..8].copy_from_slice(&self.base.to_le_bytes());
        v[8..16].copy_from_slice(&self.last.to_le_bytes());
        let crc = crc32fast::hash(&v[..16]);
        v[16..].copy_from_slice(&crc.to_le_bytes());
        v
    }

    /// Decodes a stored row of `shard`, checking length, CRC and
    /// `base <= last`; `Corrupt { what, at: shard }` otherwise.
    pub fn decode(value: &[u8], shard: u32, what: &'static str) -> Result<Self, StorageError> {
        let corrupt = || StorageError::Corrupt {
            what,
            at: u64::from(shard),
        };
        let v: &[u8; 20] = value.try_into().map_err(|_| corrupt())?;
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&v[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let crc = u32::from_le_bytes([v[16], v[17], v[18], v[19]]);
        let row = Self {
            base: word(0),
            last: word(8),
        };
        if crc != crc32fast::hash(&v[..16]) || row.base > row.last {
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
    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(COMMIT_HEAD + self.checkpoint.len());
        v.extend_from_slice(&self.position.to_le_bytes());
        v.extend_from_slice(&self.generation.to_le_bytes());
        v.extend_from_slice(&self.records.to_le_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&v);
        h.update(&self.checkpoint);
        v.extend_from_slice(&h.finalize().to_le_bytes());
        v.extend_from_slice(&self.checkpoint);
        v
    }

    /// Decodes a stored row of `shard`, checking length and CRC;
    /// `Corrupt { what, at: shard }` otherwise.
    pub fn decode(value: &[u8], shard: u32, what: &'static str) -> Result<Self, StorageError> {
        let corrupt = || StorageError::Corrupt {
            what,
            at: u64::from(shard),
        };
        let (head, checkpoint) = value
            .split_first_chunk::<COMMIT_HEAD>()
            .ok_or_else(corrupt)?;
        let mut h = crc32fast::Hasher::new();
        h.update(&head[..20]);
        h.update(checkpoint);
        let crc = u32::from_le_bytes([head[20], head[21], head[22], head[23]]);
        if crc != h.finalize() {
            return Err(corrupt());
        }
        let mut w8 = [0u8; 8];
        w8.copy_from_slice(&head[..8]);
        let position = u64::from_le_bytes(w8);
        let generation = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        w8.copy_from_slice(&head[12..20]);
        Ok(Self {
            position,
            generation,
            records: u64::from_le_bytes(w8),
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
    fn rows_round_trip_and_reject_any_changed_byte() {
        let log = LogRow { base: 7, last: 99 };
        assert_eq!(LogRow::decode(&log.encode(), 3, "t").ok(), Some(log));
        let commit = CommitRow {
            position: 5,
            generation: 9,
            records: 1 << 40,
            checkpoint: b"ck".to_vec(),
        };
        let bytes = commit.encode();
        assert_eq!(CommitRow::decode(&bytes, 3, "t").ok(), Some(commit));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            assert!(CommitRow::decode(&bad, 3, "t").is_err(), "byte {i} flipped");
        }
        let lb = log.encode();
        for i in 0..lb.len() {
            let mut bad = lb;
            bad[i] ^= 1;
            assert!(LogRow::decode(&bad, 3, "t").is_err(), "byte {i} flipped");
        }
        for n in 0..24 {
            assert!(CommitRow::decode(&bytes[..n], 0, "t").is_err());
            assert!(LogRow::decode(&lb[..n.min(19)], 0, "t").is_err());
        }
        let inverted = LogRow { base: 9, last: 8 };
        assert!(LogRow::decode(&inverted.encode(), 0, "t").is_err());
    }

    #[test]
    fn crc_values_and_format() {
        let v = with_crc(b"hello");
        assert_eq!(check_crc(&v, "t", 0).ok(), Some(&b"hello"[..]));
        let mut bad = v.clone();
        bad[6] ^= 1;
        assert!(check_crc(&bad, "t", 0).is_err());
        assert!(check_crc(&v[..3], "t", 0).is_err());
        let magic = *b"FUSEE-XX";
        assert_eq!(format_version(magic, &format_value(magic, 3)), Some(3));
        assert_eq!(format_version(magic, b"FUSEE-RX\x01\0\0\0"), None);
        assert_eq!(format_version(magic, b"short"), None);
        assert_eq!(format_version(magic, b"FUSEE-XX\x01\0\0\0\0"), None);
        let r = [9u8; INDEX_RECORD];
        let v = index_value(&r);
        assert_eq!(index_record_of(&v, "t", 0).ok(), Some(r));
        for i in 0..INDEX_VALUE {
            let mut bad = v;
            bad[i] ^= 4;
            assert!(index_record_of(&bad, "t", 0).is_err(), "byte {i}");
        }
        assert!(index_record_of(&v[..INDEX_VALUE - 1], "t", 0).is_err());
    }
}
