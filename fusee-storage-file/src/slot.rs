//! Checkpoint slots: the two files that say which commit is current.
//!
//! A commit writes a slot with a sequence number one above the last,
//! naming the index file and length and the run-store generation and length
//! it covers, followed by the core's checkpoint bytes, into both slot files
//! (`slot-0`, then `slot-1`), each synced before the next: the pair
//! (`crate::pair`) that makes a torn write or damage to one file lose
//! nothing. Open trusts the valid slot with the highest sequence number.
//!
//! # Layout (all integers little-endian)
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `FUSEESLT` |
//! | 8 | 4 | format version (1) |
//! | 12 | 4 | crc32 of bytes 16.. to the end of the checkpoint |
//! | 16 | 8 | sequence number (1 for the first commit; at most [`fusee_storage::MAX_SEQ`]) |
//! | 24 | 8 | index file number |
//! | 32 | 8 | index file valid length in bytes |
//! | 40 | 8 | index records the committed index holds |
//! | 48 | 8 | run-store generation |
//! | 56 | 8 | run-store generation valid length in bytes |
//! | 64 | 8 | the generation's release log valid length in bytes |
//! | 72 | 8 | checkpoint length `n` |
//! | 80 | n | the checkpoint bytes |
//!
//! A slot file may be longer than `80 + n` (an older, longer slot was
//! overwritten); the bytes after the checkpoint are ignored. A slot file
//! that is empty, all zeros or missing holds no commit.

use crate::error::FileError;

/// Bytes before the checkpoint.
pub const SLOT_HEADER: usize = 80;
const MAGIC: [u8; 8] = *b"FUSEESLT";
const FORMAT: u32 = 1;

/// What a slot records about one commit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    /// The commit's sequence number, from 1.
    pub seq: u64,
    /// The index file the commit's index is in.
    pub index_file: u64,
    /// How many bytes of that file are valid.
    pub index_len: u64,
    /// How many index records it holds.
    pub index_records: u64,
    /// The run-store generation current at the commit.
    pub store_gen: u64,
    /// How many bytes of that generation are valid.
    pub store_len: u64,
    /// How many bytes of the generation's release log are valid.
    pub releases_len: u64,
    /// The core's checkpoint bytes.
    pub checkpoint: Vec<u8>,
}

impl Slot {
    /// The slot's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SLOT_HEADER + self.checkpoint.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        for v in [
            self.seq,
            self.index_file,
            self.index_len,
            self.index_records,
            self.store_gen,
            self.store_len,
            self.releases_len,
            self.checkpoint.len() as u64,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.checkpoint);
        let crc = crc32fast::hash(&out[16..]);
        out[12..16].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a slot file's bytes. `Ok(None)`: the file holds no commit
    /// (empty or all zeros: never written). A damaged slot is an error
    /// naming what is wrong; the caller falls back to the other slot.
    pub fn decode(bytes: &[u8], file: &str) -> Result<Option<Slot>, FileError> {
        if bytes.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let corrupt = |what: &'static str, at: u64| FileError::Corrupt {
            file: file.to_string(),
            what,
            at,
        };
        if bytes.len() < SLOT_HEADER {
            return Err(corrupt("slot shorter than its header", bytes.len() as u64));
        }
        if bytes[..8] != MAGIC {
            return Err(corrupt("bad slot magic", 0));
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        let format = u32_at(8);
        if format != FORMAT {
            return Err(FileError::Format {
                file: file.to_string(),
                found: format,
                supported: FORMAT,
            });
        }
        let len = u64_at(72);
        let end = (SLOT_HEADER as u64)
            .checked_add(len)
            .filter(|&end| end <= bytes.len() as u64)
            .ok_or_else(|| corrupt("checkpoint runs past the slot's end", 72))?
            as usize;
        if crc32fast::hash(&bytes[16..end]) != u32_at(12) {
            return Err(corrupt("slot crc mismatch", 12));
        }
        if u64_at(16) > fusee_storage::MAX_SEQ {
            return Err(corrupt("slot sequence number out of range", 16));
        }
        Ok(Some(Slot {
            seq: u64_at(16),
            index_file: u64_at(24),
            index_len: u64_at(32),
            index_records: u64_at(40),
            store_gen: u64_at(48),
            store_len: u64_at(56),
            releases_len: u64_at(64),
            checkpoint: bytes[SLOT_HEADER..end].to_vec(),
        }))
    }
}

impl crate::pair::Sequenced for Slot {
    fn seq(&self) -> u64 {
        self.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(seq: u64) -> Slot {
        Slot {
            seq,
            index_file: 3,
            index_len: 640,
            index_records: 20,
            store_gen: 2,
            store_len: 12_345,
            releases_len: 24,
            checkpoint: (0..200u8).collect(),
        }
    }

    #[test]
    fn slots_round_trip_and_ignore_trailing_bytes() {
        let s = slot(7);
        let mut bytes = s.encode();
        assert_eq!(Slot::decode(&bytes, "slot-0").unwrap(), Some(s.clone()));
        bytes.extend_from_slice(&[9; 100]);
        assert_eq!(Slot::decode(&bytes, "slot-0").unwrap(), Some(s));
        assert_eq!(Slot::decode(&[], "slot-0").unwrap(), None);
        assert_eq!(Slot::decode(&[0; 4096], "slot-0").unwrap(), None);
    }

    #[test]
    fn a_sequence_number_past_its_bound_is_damage() {
        let s = slot(fusee_storage::MAX_SEQ);
        assert_eq!(
            Slot::decode(&s.encode(), "s").ok().flatten().map(|s| s.seq),
            Some(fusee_storage::MAX_SEQ)
        );
        let past = slot(fusee_storage::MAX_SEQ + 1).encode();
        assert!(matches!(
            Slot::decode(&past, "s"),
            Err(FileError::Corrupt { at: 16, .. })
        ));
    }

    #[test]
    fn every_flipped_byte_and_every_cut_is_refused() {
        let bytes = slot(7).encode();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x20;
            assert!(Slot::decode(&b, "s").is_err(), "flip at {i}");
        }
        for cut in 1..bytes.len() {
            assert!(Slot::decode(&bytes[..cut], "s").is_err(), "cut at {cut}");
        }
    }
}
