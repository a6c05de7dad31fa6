//! The log manifest: what a shard's log must hold, so recovery can tell
//! segments lost to damage or deletion from segments a crash never made
//! durable.
//!
//! The segments alone cannot say that their newest file is gone, was cut
//! to its header or had its header zeroed: each of those reads like a log
//! that simply ended earlier. Nor can they tell the oldest segments deleted
//! from segments a checkpoint discarded. The manifest records both ends:
//!
//! - the **carrier**: the newest segment whose header is known durable (the
//!   segment an open started, or one a flush rolled into, recorded once that
//!   flush is durable and before it is reported), with its base LSN and
//!   size. Every acknowledged record lies in the carrier or before it, so
//!   recovery holds every segment up to the carrier to the strict rules (no
//!   zeroed or stale header, no hole, the carrier present, whole-sized and
//!   based where recorded); only segments after it may be the remains of a
//!   batch a crash cut short.
//! - the **floor**: the first LSN the log must hold. A discard raises it
//!   before it deletes a segment, so a missing segment below the floor was
//!   discarded, and one at or above it was lost.
//!
//! The manifest is a pair of files (`log/manifest-0`, `log/manifest-1`,
//! `crate::pair`): a torn write or damage to one file loses nothing.
//! It is written at every open (after the open's segment header is
//! durable), after a flush that rolled into a new segment, and before a
//! discard deletes segments: a few writes per segment's worth of log, none
//! on the common flush path.
//!
//! # Layout (integers little-endian)
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `FUSEELOG` |
//! | 8 | 4 | format (1) |
//! | 12 | 4 | crc32 of bytes 16..56 |
//! | 16 | 8 | sequence number (1 for the first write; at most [`fusee_storage::MAX_SEQ`]) |
//! | 24 | 8 | floor: the first LSN the log must hold |
//! | 32 | 8 | carrier segment number (0: no segment started yet) |
//! | 40 | 8 | carrier base LSN |
//! | 48 | 8 | carrier size in bytes |
//!
//! A file that is empty or all zeros holds no manifest.
//!
//! What it does not know: what the records are, or how segments are laid
//! out.

use fusee_core::record::Lsn;

use crate::error::FileError;

const MAGIC: [u8; 8] = *b"FUSEELOG";
const FORMAT: u32 = 1;
/// Bytes of a manifest.
pub const MANIFEST_BYTES: usize = 56;
/// The manifest's pair of files in the log directory: `manifest-0`,
/// `manifest-1`.
pub(crate) const MANIFEST_STEM: &str = "manifest";

/// What the log must hold. See the [module docs](self).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Grows with every write.
    pub seq: u64,
    /// The first LSN the log must hold.
    pub floor: Lsn,
    /// The newest segment whose header is known durable (0: none yet).
    pub carrier: u64,
    /// The carrier's base LSN.
    pub carrier_base: Lsn,
    /// The carrier's size in bytes: it may grow, never shrink.
    pub carrier_size: u64,
}

impl Manifest {
    /// The manifest's bytes.
    pub fn encode(&self) -> [u8; MANIFEST_BYTES] {
        let mut out = [0u8; MANIFEST_BYTES];
        out[..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&FORMAT.to_le_bytes());
        for (i, v) in [
            self.seq,
            self.floor,
            self.carrier,
            self.carrier_base,
            self.carrier_size,
        ]
        .into_iter()
        .enumerate()
        {
            out[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32fast::hash(&out[16..]);
        out[12..16].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a manifest file's bytes: `Ok(None)` for a file never
    /// written (empty or all zeros), an error naming `file` for anything
    /// damaged.
    pub fn decode(bytes: &[u8], file: &str) -> Result<Option<Manifest>, FileError> {
        if bytes.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let corrupt = |what: &'static str, at: u64| FileError::Corrupt {
            file: file.to_string(),
            what,
            at,
        };
        let Some(m) = bytes.get(..MANIFEST_BYTES) else {
            return Err(corrupt(
                "log manifest shorter than its format",
                bytes.len() as u64,
            ));
        };
        if m[..8] != MAGIC {
            return Err(corrupt("bad log manifest magic", 0));
        }
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&m[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let format = u32::from_le_bytes([m[8], m[9], m[10], m[11]]);
        if format != FORMAT {
            return Err(FileError::Format {
                file: file.to_string(),
                found: format,
                supported: FORMAT,
            });
        }
        if u32::from_le_bytes([m[12], m[13], m[14], m[15]]) != crc32fast::hash(&m[16..]) {
            return Err(corrupt("log manifest crc mismatch", 12));
        }
        if word(16) > fusee_storage::MAX_SEQ {
            return Err(corrupt("log manifest sequence number out of range", 16));
        }
        Ok(Some(Manifest {
            seq: word(16),
            floor: word(24),
            carrier: word(32),
            carrier_base: word(40),
            carrier_size: word(48),
        }))
    }
}

impl crate::pair::Sequenced for Manifest {
    fn seq(&self) -> u64 {
        self.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_round_trip_and_refuse_every_flip_and_cut() {
        let m = Manifest {
            seq: 9,
            floor: 1001,
            carrier: 17,
            carrier_base: 2048,
            carrier_size: 1 << 20,
        };
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes, "m").ok(), Some(Some(m)));
        assert_eq!(Manifest::decode(&[], "m").ok(), Some(None));
        assert_eq!(Manifest::decode(&[0; 64], "m").ok(), Some(None));
        for i in 0..bytes.len() {
            let mut b = bytes;
            b[i] ^= 0x10;
            assert!(Manifest::decode(&b, "m").is_err(), "flip at {i} accepted");
        }
        for cut in 1..bytes.len() {
            assert!(
                Manifest::decode(&bytes[..cut], "m").is_err(),
                "cut at {cut} accepted"
            );
        }
    }

    #[test]
    fn a_sequence_number_past_its_bound_is_damage() {
        let mut m = Manifest {
            seq: fusee_storage::MAX_SEQ,
            floor: 1,
            carrier: 1,
            carrier_base: 1,
            carrier_size: 1 << 20,
        };
        assert_eq!(Manifest::decode(&m.encode(), "m").ok(), Some(Some(m)));
        m.seq += 1;
        assert!(matches!(
            Manifest::decode(&m.encode(), "m"),
            Err(FileError::Corrupt { at: 16, .. })
        ));
    }
}
