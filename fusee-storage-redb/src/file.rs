//! The database file under redb: [`DurableFile`], the storage backend
//! whose growth is durable before redb can name it, and `repair_length`,
//! which opens a file whose header names more than the file holds (a power
//! cut while a commit grew it) as redb's crash recovery expects.
//!
//! # Why growth must be durable
//!
//! A commit that needs more space grows the file (`set_len`), writes its
//! pages and then a header that names the new length, and syncs once
//! (`fdatasync`). Until that sync the new length is as volatile as the
//! pages, but the kernel may write the header page back at any moment
//! before it. A power cut in between leaves a header naming a file longer
//! than the one on disk, and redb 3.1 then refuses the file at open (an
//! assertion: `storage.raw_file_len() >= header.layout().len()`), although
//! its previous commit is intact. [`DurableFile::set_len`] therefore syncs
//! the file (`fdatasync`, which makes the size durable) after every growth,
//! before redb gets to write a header that names it (redb 3.1 accepts a
//! custom [`redb::StorageBackend`] for exactly such wrapping). Shrinking
//! needs no
//! sync: redb shrinks only after the header naming the shorter length is
//! durable. Cost: one more sync per growth; redb grows by doubling (and by
//! whole 4 GiB regions past the first), so a handful in a file's life.
//!
//! (A newer redb does not change this: 3.1.3, the newest 3.x, grows the
//! same way, and 4.x needs a newer Rust than the workspace's.)
//!
//! # The header's length, byte by byte
//!
//! redb 3 (file format 3) begins its file with a header whose first 64
//! bytes hold the file's geometry; the commit slots follow (bytes 64..320,
//! checksummed by redb; not read here). Integers little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..9 | magic `72 65 64 62 1A 0A A9 0D 0A` (`redb`, then PNG-style bytes) |
//! | 9 | god byte: bit 0 primary slot, bit 1 *recovery required* (set while the database is open for writing, cleared by a clean close), bit 2 two-phase commit |
//! | 10..12 | padding |
//! | 12..16 | page size (4096) |
//! | 16..20 | region header pages |
//! | 20..24 | region data pages (of a full region) |
//! | 24..28 | full regions |
//! | 28..32 | data pages of the trailing partial region (0: none) |
//!
//! The length the header names: one page (the header's own), then each
//! full region (header pages + data pages), then the trailing region
//! (header pages + its data pages) if it has any pages.
//!
//! # The repair
//!
//! A file shorter than its header's length, with *recovery required* set
//! (it was open for writing when it stopped), is extended with zeros to
//! that length and synced: what redb's recovery needs, and all it would
//! have found after the power cut had the size change reached the disk.
//! redb then checks the newest commit's checksums and, if the zeros cut its
//! pages, falls back to the commit before. Refused instead, as
//! [`StorageError::CorruptFile`]: the same shortfall in a file closed
//! cleanly (it was cut short after the fact), a header whose geometry is
//! impossible, and a shortfall larger than redb ever grows a file at once
//! (two full regions), which only damage can produce.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use fusee_storage::{Result, StorageError};
use redb::StorageBackend;
use redb::backends::FileBackend;

/// redb's magic number, the header's first 9 bytes.
const MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];
/// The god byte's *recovery required* bit.
const RECOVERY_REQUIRED: u8 = 2;
/// Bytes of the header this module reads.
const GEOMETRY: usize = 32;
/// Bytes of redb's whole header (geometry and both commit slots): a file
/// shorter than this is no database.
pub(crate) const HEADER: u64 = 320;

/// A redb storage backend that forwards every call to `inner` (by default
/// redb's own file backend, which also locks the file) and syncs after
/// every growth, so that a header naming the new length is never on disk
/// before the length is (see the module documentation).
#[derive(Debug)]
pub struct DurableFile<B = FileBackend> {
    inner: B,
}

impl DurableFile {
    /// The backend over `file`, opened for reading and writing; locks it
    /// (redb's `DatabaseAlreadyOpen` if another backend holds it).
    pub fn open(file: File) -> std::result::Result<Self, redb::DatabaseError> {
        Ok(Self::new(FileBackend::new(file)?))
    }
}

impl<B: StorageBackend> DurableFile<B> {
    /// The backend over `inner` (a simulated file in tests).
    pub fn new(inner: B) -> Self {
        Self { inner }
    }
}

impl<B: StorageBackend> StorageBackend for DurableFile<B> {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let grows = len > self.inner.len()?;
        self.inner.set_len(len)?;
        if grows {
            // `fdatasync` makes a size change durable: the new length is on
            // disk before any header names it.
            self.inner.sync_data()?;
        }
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.inner.write(offset, data)
    }

    fn close(&self) -> std::io::Result<()> {
        self.inner.close()
    }
}

/// The file's geometry, as its header states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// The file was open for writing when it was last written.
    pub(crate) recovery_required: bool,
    /// The length the header names, or `None` if its geometry is
    /// impossible (no page size, no region, or an overflow).
    pub(crate) len: Option<u64>,
    /// The bytes of one full region.
    pub(crate) region: Option<u64>,
}

impl Header {
    /// Parses the first [`GEOMETRY`] bytes of a file; `None` if the magic
    /// number is not redb's.
    pub(crate) fn parse(bytes: &[u8; GEOMETRY]) -> Option<Self> {
        if bytes[..9] != MAGIC {
            return None;
        }
        let u32_at = |at: usize| {
            u64::from(u32::from_le_bytes([
                bytes[at],
                bytes[at + 1],
                bytes[at + 2],
                bytes[at + 3],
            ]))
        };
        let (page, header_pages, data_pages) = (u32_at(12), u32_at(16), u32_at(20));
        let (full, trailing) = (u32_at(24), u32_at(28));
        let sane = page.is_power_of_two() && (512..=65_536).contains(&page) && data_pages > 0;
        let region = (header_pages + data_pages)
            .checked_mul(page)
            .filter(|_| sane);
        let len = region.and_then(|region| {
            let trailing = if trailing > 0 {
                (header_pages + trailing).checked_mul(page)?
            } else {
                0
            };
            let regions = full.checked_mul(region)?;
            (full > 0 || trailing > 0).then_some(page.checked_add(regions)?.checked_add(trailing)?)
        });
        Some(Self {
            recovery_required: bytes[9] & RECOVERY_REQUIRED != 0,
            len,
            region,
        })
    }
}

/// Checks the database file at `path` before redb opens it, and extends it
/// to its header's length when a power cut left it shorter (see the module
/// documentation). Returns the bytes added (0 if none were needed).
/// [`StorageError::CorruptFile`] for a file too short to hold redb's header
/// (an empty one included), one without redb's magic, and a shortfall that
/// is damage rather than a growth cut short.
pub(crate) fn repair_length(file: &File, path: &Path) -> Result<u64> {
    let shown = || path.display().to_string();
    let corrupt = |what: &'static str, at: u64| StorageError::CorruptFile {
        file: shown(),
        what,
        at,
    };
    let io = |doing: &str, e| StorageError::io(format!("{doing} {}", path.display()), e);
    let len = file
        .metadata()
        .map_err(|e| io("reading the length of", e))?
        .len();
    if len < HEADER {
        return Err(corrupt(
            "the database file is shorter than redb's header (cut short or emptied)",
            len,
        ));
    }
    let mut bytes = [0u8; GEOMETRY];
    let mut reader = file;
    reader
        .seek(SeekFrom::Start(0))
        .and_then(|_| reader.read_exact(&mut bytes))
        .map_err(|e| io("reading the header of", e))?;
    let header = Header::parse(&bytes).ok_or_else(|| corrupt("not a redb file (bad magic)", 0))?;
    let (Some(named), Some(region)) = (header.len, header.region) else {
        return Err(corrupt("redb header with an impossible geometry", 12));
    };
    if named <= len {
        return Ok(0);
    }
    if !header.recovery_required {
        return Err(corrupt(
            "the file is shorter than its redb header says, though it was closed cleanly: cut short",
            len,
        ));
    }
    if named - len > 2 * region {
        return Err(corrupt(
            "the file is shorter than its redb header says by more than redb grows a file at once",
            len,
        ));
    }
    file.set_len(named)
        .and_then(|()| file.sync_data())
        .map_err(|e| io("extending", e))?;
    Ok(named - len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(god: u8, page: u32, hp: u32, dp: u32, full: u32, trailing: u32) -> [u8; GEOMETRY] {
        let mut b = [0u8; GEOMETRY];
        b[..9].copy_from_slice(&MAGIC);
        b[9] = god;
        for (at, v) in [(12, page), (16, hp), (20, dp), (24, full), (28, trailing)] {
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    #[test]
    fn the_length_follows_the_geometry() {
        let h = Header::parse(&geometry(2, 4096, 3, 1 << 20, 0, 144)).expect("redb");
        assert!(h.recovery_required);
        assert_eq!(h.len, Some(4096 + (3 + 144) * 4096));
        let h = Header::parse(&geometry(0, 4096, 3, 100, 2, 0)).expect("redb");
        assert!(!h.recovery_required);
        assert_eq!(h.len, Some(4096 + 2 * 103 * 4096));
        assert_eq!(h.region, Some(103 * 4096));
        assert_eq!(
            Header::parse(&geometry(0, 4096, 3, 100, 0, 0)).and_then(|h| h.len),
            None
        );
        assert_eq!(
            Header::parse(&geometry(0, 3000, 3, 100, 1, 0)).and_then(|h| h.len),
            None
        );
        let mut other = geometry(0, 4096, 3, 100, 1, 0);
        other[0] = b'R';
        assert_eq!(Header::parse(&other), None);
    }
}
