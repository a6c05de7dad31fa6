//! The log seal: a small record, kept apart from a shard's log, that every
//! record through an LSN was durable ([`crate::LogStore::begin_seal`]).
//!
//! # Why
//!
//! A log alone cannot tell every kind of damage from a crash. The newest
//! acknowledged batch zeroed by the disk reads like a batch a power cut
//! tore before it was acknowledged (the file backend); a database that
//! loses its newest commit (redb's commit-slot byte flipped, RocksDB's
//! WAL damaged before the replay) opens as it was one commit earlier.
//! Each opens with less data and no error. A seal written somewhere else
//! after the log was durable lets the open tell the two apart: a log that
//! ends before its sealed LSN lost acknowledged records, and opening it is
//! [`StorageError::LostRecords`], with nothing changed on disk.
//!
//! # What it promises
//!
//! After a seal of LSN `n` returned, every open of the shard either yields
//! a log whose last LSN is at least `n`, or fails with
//! [`StorageError::LostRecords`] (or another named error of damage). A seal
//! never claims more than was durable when it was taken, so a crash
//! anywhere (between a flush and its seal, in the middle of a seal) never
//! makes an undamaged shard fail to open. What a seal does not see: damage
//! that loses records after the last seal (the window the engine bounds by
//! sealing soon after each flush), and damage that keeps the log's end
//! while losing records before it (each backend's checksums and chain
//! checks report those).
//!
//! The seal file is a detector, never the data: it is never used to cut,
//! delete or rewrite anything. A missing seal file (a store made before
//! seals, or the file deleted) is "never sealed", so deleting it loses
//! nothing but the check.
//!
//! # Layout (integers little-endian)
//!
//! A seal file holds two slots, written in turn, each followed by
//! `fdatasync` (and the directory synced when the write created the file).
//! Slot 0 is at offset 0, slot 1 at offset [`SLOT_SPACING`] (4096), so a
//! torn sector can damage one slot only. A slot:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `FUSEESEL` |
//! | 8 | 4 | format ([`FORMAT`], 1) |
//! | 12 | 4 | shard |
//! | 16 | 8 | sequence number (1 for the first write; grows by one per write; at most [`MAX_SEQ`](crate::MAX_SEQ)) |
//! | 24 | 8 | sealed LSN: every record through it was durable |
//! | 32 | 4 | CRC-32 (`crc32fast`) of bytes 0..32 |
//!
//! A write goes to the slot that does not hold the newest valid record, so
//! that one stays whole while the other is written. Reading
//! ([`SealState::decode`]): each slot is valid, never written (past the
//! file's end, or all zeros) or damaged (torn, flipped, another shard's);
//! the valid slot with the higher sequence number wins. With no valid
//! slot, only one state is a crash's doing: slot 0 torn or empty and slot 1
//! never written (the very first write interrupted), which reads as never
//! sealed. Slot 1 damaged with slot 0 not valid cannot come from a crash
//! (slot 1 is first written once slot 0 is durable, and a slot is only
//! ever overwritten while the other holds the newest record): that is
//! [`StorageError::CorruptFile`] naming the file. A valid slot of another
//! format version is [`StorageError::UnsupportedFormat`].
//!
//! # Who owns what
//!
//! This module owns the format, the reading rules, the check at open
//! ([`SealState::check`]) and [`SealFile`], a seal file on the real file
//! system for backends that keep their files there (the key-value
//! backends). A backend with its own I/O layer (the file backend, whose
//! simulated disk must see every write) uses [`encode_slot`],
//! [`SealState::decode`] and [`SealState::next`] over its own files.

use std::fs::File;
use std::path::{Path, PathBuf};

use fusee_core::record::Lsn;

use crate::{Result, StorageError};

const MAGIC: [u8; 8] = *b"FUSEESEL";
/// The seal format version this build writes and reads.
pub const FORMAT: u32 = 1;
/// Bytes of one slot.
pub const SLOT_BYTES: usize = 36;
/// Where slot 1 starts (slot 0 starts at 0): a block apart.
pub const SLOT_SPACING: u64 = 4096;

/// One slot's record: the `seq`-th seal of the shard, sealing `lsn`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seal {
    /// Grows by one with every write.
    pub seq: u64,
    /// Every record through this LSN was durable when it was written.
    pub lsn: Lsn,
}

/// The bytes of slot record `seal` of `shard`.
pub fn encode_slot(shard: u32, seal: Seal) -> [u8; SLOT_BYTES] {
    let mut out = [0u8; SLOT_BYTES];
    out[..8].copy_from_slice(&MAGIC);
    out[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    out[12..16].copy_from_slice(&shard.to_le_bytes());
    out[16..24].copy_from_slice(&seal.seq.to_le_bytes());
    out[24..32].copy_from_slice(&seal.lsn.to_le_bytes());
    let crc = crc32fast::hash(&out[..32]);
    out[32..36].copy_from_slice(&crc.to_le_bytes());
    out
}

/// What one slot holds.
#[derive(Debug)]
enum Slot {
    /// Past the file's end, or all zeros: never written.
    Empty,
    Valid(Seal),
    /// Torn or damaged, and why.
    Damaged(&'static str),
}

/// Decodes the slot at `at` of a seal file's `bytes`.
fn slot(bytes: &[u8], at: usize, shard: u32, file: &str) -> Result<Slot> {
    let Some(rest) = bytes.get(at..) else {
        return Ok(Slot::Empty);
    };
    let s = &rest[..rest.len().min(SLOT_BYTES)];
    if s.iter().all(|&b| b == 0) {
        return Ok(Slot::Empty);
    }
    if s.len() < SLOT_BYTES {
        return Ok(Slot::Damaged("seal slot cut short"));
    }
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[i..i + 8]);
        u64::from_le_bytes(w)
    };
    let half = |i: usize| u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]);
    if s[..8] != MAGIC {
        return Ok(Slot::Damaged("bad seal magic"));
    }
    if half(32) != crc32fast::hash(&s[..32]) {
        return Ok(Slot::Damaged("seal slot checksum mismatch"));
    }
    if half(8) != FORMAT {
        return Err(StorageError::UnsupportedFormat {
            file: file.to_string(),
            found: half(8),
            supported: FORMAT,
        });
    }
    if half(12) != shard {
        return Ok(Slot::Damaged("seal of another shard"));
    }
    if word(16) > crate::MAX_SEQ {
        return Ok(Slot::Damaged("seal sequence number out of range"));
    }
    Ok(Slot::Valid(Seal {
        seq: word(16),
        lsn: word(24),
    }))
}

/// What a shard's seal file says: the newest valid record and the slot
/// holding it, or never sealed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SealState {
    /// The newest valid record and its slot (0 or 1); `None`: never sealed.
    pub newest: Option<(Seal, usize)>,
}

impl SealState {
    /// Reads a seal file's `bytes` (empty for a missing file) for `shard`;
    /// `file` names it in errors. See the [module docs](self) for the
    /// rules.
    pub fn decode(bytes: &[u8], shard: u32, file: &str) -> Result<Self> {
        let first = slot(bytes, 0, shard, file)?;
        let second = slot(bytes, SLOT_SPACING as usize, shard, file)?;
        let newest = match (first, second) {
            (Slot::Valid(a), Slot::Valid(b)) => Some(if b.seq > a.seq { (b, 1) } else { (a, 0) }),
            (Slot::Valid(a), _) => Some((a, 0)),
            (_, Slot::Valid(b)) => Some((b, 1)),
            // The very first write, torn before slot 1 was ever written.
            (Slot::Empty | Slot::Damaged(_), Slot::Empty) => None,
            // Slot 1 is first written once slot 0 is durable.
            (Slot::Empty | Slot::Damaged(_), Slot::Damaged(what)) => {
                return Err(StorageError::CorruptFile {
                    file: file.to_string(),
                    what,
                    at: SLOT_SPACING,
                });
            }
        };
        Ok(Self { newest })
    }

    /// The sealed LSN (0: never sealed).
    pub fn lsn(&self) -> Lsn {
        self.newest.map_or(0, |(s, _)| s.lsn)
    }

    /// The next write, sealing `lsn`: the record and the byte offset of
    /// the slot it goes to (the one not holding the newest record).
    pub fn next(&self, lsn: Lsn) -> (Seal, u64) {
        match self.newest {
            None => (Seal { seq: 1, lsn }, 0),
            Some((s, held)) => {
                let to = 1 - held.min(1);
                (
                    Seal {
                        seq: s.seq + 1,
                        // A seal never goes back: what was sealed stays so.
                        lsn: lsn.max(s.lsn),
                    },
                    to as u64 * SLOT_SPACING,
                )
            }
        }
    }

    /// The state once the write [`SealState::next`] planned (`seal` at
    /// `offset`) is durable.
    pub fn written(&mut self, seal: Seal, offset: u64) {
        self.newest = Some((seal, usize::from(offset != 0)));
    }

    /// The open-time check: `Ok` if a log that `recovered` through LSN
    /// `last` holds everything sealed; [`StorageError::LostRecords`] naming
    /// `file` otherwise.
    pub fn check(&self, last: Lsn, shard: u32, file: &str) -> Result<()> {
        let sealed = self.lsn();
        if last < sealed {
            return Err(StorageError::LostRecords {
                shard,
                seal: file.to_string(),
                sealed,
                recovered: last,
            });
        }
        Ok(())
    }
}

/// A shard's seal file on the real file system (`std::fs`): read at open,
/// checked against the recovered log, written by [`SealFile::write`].
#[derive(Debug)]
pub struct SealFile {
    path: PathBuf,
    shard: u32,
    state: SealState,
    /// Open once the file exists (a write needs it).
    file: Option<File>,
}

impl SealFile {
    /// Reads the seal file at `path` of `shard` (missing: never sealed).
    /// Damage is an error naming it (see the [module docs](self)); nothing
    /// is written.
    pub fn open(path: &Path, shard: u32) -> Result<Self> {
        let shown = path.display().to_string();
        let (bytes, file) = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
        {
            Ok(f) => {
                use std::io::Read;
                let mut bytes = Vec::new();
                // A seal file is two slots: read no more than those.
                (&f).take(SLOT_SPACING + SLOT_BYTES as u64)
                    .read_to_end(&mut bytes)
                    .map_err(|e| StorageError::io(format!("reading {shown}"), e))?;
                (bytes, Some(f))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), None),
            Err(e) => return Err(StorageError::io(format!("opening {shown}"), e)),
        };
        let state = SealState::decode(&bytes, shard, &shown)?;
        Ok(Self {
            path: path.to_path_buf(),
            shard,
            state,
            file,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sealed LSN (0: never sealed).
    pub fn sealed(&self) -> Lsn {
        self.state.lsn()
    }

    /// [`SealState::check`]: `Ok` if a log recovered through `last` holds
    /// everything sealed, [`StorageError::LostRecords`] otherwise.
    pub fn check(&self, last: Lsn) -> Result<()> {
        self.state
            .check(last, self.shard, &self.path.display().to_string())
    }

    /// Seals `lsn` (which the caller knows durable): writes the next slot
    /// and syncs it (`fdatasync`; creating the file, also its directory).
    /// Returns the sealed LSN. On failure nothing changes here: the next
    /// write goes to the same slot, so the other slot, the newest valid
    /// record, is never put at risk.
    pub fn write(&mut self, lsn: Lsn) -> Result<Lsn> {
        use std::os::unix::fs::FileExt;
        let shown = || self.path.display().to_string();
        let (seal, offset) = self.state.next(lsn);
        if self.file.is_none() {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&self.path)
                .map_err(|e| StorageError::io(format!("creating {}", shown()), e))?;
            self.file = Some(f);
            if let Some(dir) = self.path.parent() {
                crate::dirs::sync_dir(dir)?;
            }
        }
        let Some(f) = &self.file else {
            return Err(StorageError::io(
                format!("writing {}", shown()),
                std::io::Error::other("the seal file is not open"),
            ));
        };
        f.write_all_at(&encode_slot(self.shard, seal), offset)
            .map_err(|e| StorageError::io(format!("writing {}", shown()), e))?;
        f.sync_data()
            .map_err(|e| StorageError::io(format!("syncing {}", shown()), e))?;
        self.state.written(seal, offset);
        Ok(seal.lsn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_of(slots: &[(usize, [u8; SLOT_BYTES])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, s) in slots {
            let at = i * SLOT_SPACING as usize;
            if out.len() < at + SLOT_BYTES {
                out.resize(at + SLOT_BYTES, 0);
            }
            out[at..at + SLOT_BYTES].copy_from_slice(s);
        }
        out
    }

    #[test]
    fn the_newest_valid_slot_wins_and_impossible_states_are_errors() {
        let a = encode_slot(3, Seal { seq: 1, lsn: 10 });
        let b = encode_slot(3, Seal { seq: 2, lsn: 20 });
        let lsn = |bytes: &[u8]| SealState::decode(bytes, 3, "s").map(|s| s.lsn());
        assert_eq!(lsn(&[]).ok(), Some(0), "missing or empty: never sealed");
        assert_eq!(lsn(&file_of(&[(0, a)])).ok(), Some(10));
        assert_eq!(lsn(&file_of(&[(0, a), (1, b)])).ok(), Some(20));
        let mut torn = b;
        torn[30] ^= 1;
        assert_eq!(lsn(&file_of(&[(0, a), (1, torn)])).ok(), Some(10));
        let mut torn_a = a;
        torn_a[20] ^= 1;
        assert_eq!(lsn(&file_of(&[(0, torn_a), (1, b)])).ok(), Some(20));
        assert_eq!(
            lsn(&file_of(&[(0, torn_a)])).ok(),
            Some(0),
            "first write torn"
        );
        assert_eq!(lsn(&[0; 5000]).ok(), Some(0), "all zeros: never written");
        assert!(
            matches!(
                lsn(&file_of(&[(0, torn_a), (1, torn)])),
                Err(StorageError::CorruptFile { at: 4096, .. })
            ),
            "both slots damaged"
        );
        assert!(
            lsn(&file_of(&[(1, torn)])).is_err(),
            "slot 1 damaged, slot 0 never written"
        );
        // Another shard's seal file is not this shard's seal.
        assert_eq!(
            SealState::decode(&file_of(&[(0, a)]), 4, "s")
                .ok()
                .map(|s| s.lsn()),
            Some(0)
        );
        let mut other = a;
        other[8] = 9;
        let crc = crc32fast::hash(&other[..32]);
        other[32..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            lsn(&file_of(&[(0, other)])),
            Err(StorageError::UnsupportedFormat { found: 9, .. })
        ));
    }

    #[test]
    fn every_flip_and_cut_of_a_slot_is_refused() {
        let s = encode_slot(1, Seal { seq: 7, lsn: 99 });
        for i in 0..SLOT_BYTES {
            let mut b = s;
            b[i] ^= 0x20;
            let r = SealState::decode(&b, 1, "s");
            assert!(
                matches!(r, Ok(SealState { newest: None })),
                "flip at {i}: {r:?}"
            );
        }
        for cut in 1..SLOT_BYTES {
            let r = SealState::decode(&s[..cut], 1, "s");
            assert!(
                matches!(r, Ok(SealState { newest: None })),
                "cut at {cut}: {r:?}"
            );
        }
    }

    #[test]
    fn a_sequence_number_past_its_bound_is_damage() {
        let ok = encode_slot(1, Seal { seq: 3, lsn: 9 });
        let past = encode_slot(
            1,
            Seal {
                seq: crate::MAX_SEQ + 1,
                lsn: 50,
            },
        );
        // Never the newest (its next write would overflow): the other
        // slot is, and a damaged slot 1 alone is an error.
        let st = SealState::decode(&file_of(&[(0, ok), (1, past)]), 1, "s").expect("decode");
        assert_eq!(st.newest, Some((Seal { seq: 3, lsn: 9 }, 0)));
        assert!(SealState::decode(&file_of(&[(1, past)]), 1, "s").is_err());
    }

    #[test]
    fn writes_alternate_and_never_go_back() {
        let mut st = SealState::default();
        let (s, at) = st.next(5);
        assert_eq!((s, at), (Seal { seq: 1, lsn: 5 }, 0));
        st.written(s, at);
        let (s, at) = st.next(9);
        assert_eq!((s, at), (Seal { seq: 2, lsn: 9 }, SLOT_SPACING));
        st.written(s, at);
        let (s, at) = st.next(3);
        assert_eq!((s, at), (Seal { seq: 3, lsn: 9 }, 0));
        assert!(st.check(9, 0, "s").is_ok());
        assert!(matches!(
            st.check(8, 0, "s"),
            Err(StorageError::LostRecords {
                sealed: 9,
                recovered: 8,
                ..
            })
        ));
    }

    #[test]
    fn a_seal_file_round_trips_on_disk() {
        let dir = std::env::temp_dir().join(format!("fusee-seal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("seal-1");
        let mut f = SealFile::open(&path, 1).expect("open missing");
        assert_eq!(f.sealed(), 0);
        assert!(!path.exists(), "opening writes nothing");
        for lsn in [3, 8, 8, 12] {
            assert_eq!(f.write(lsn).ok(), Some(lsn));
        }
        let f = SealFile::open(&path, 1).expect("reopen");
        assert_eq!(f.sealed(), 12);
        assert!(f.check(12).is_ok() && f.check(11).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
