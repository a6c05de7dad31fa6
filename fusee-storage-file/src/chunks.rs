//! Chunk files: append-only files of checksummed chunks, used for the index
//! (32-byte index records) and for run-store release logs.
//!
//! A commit appends at most a few chunks to a chunk file, syncs it, and then
//! names the file's new length in its checkpoint slot. Open reads only that
//! committed prefix, so bytes after it (a chunk written by a commit that did
//! not finish) are cut; inside it, every chunk must be whole and its crc
//! right, or the file is reported corrupt (a committed chunk was synced
//! before its slot named it, so a crash cannot damage it).
//!
//! # Layout (integers little-endian)
//!
//! The file is a sequence of chunks, from offset 0:
//!
//! | size | field |
//! |---|---|
//! | 4 | payload length `n` |
//! | 4 | crc32 of the payload |
//! | n | payload |

use crate::error::FileError;

/// Bytes before each chunk's payload.
pub const CHUNK_HEADER: usize = 8;

/// Largest payload one chunk holds: 16 MiB. Larger writes are split.
pub const CHUNK_MAX: usize = 16 << 20;

/// Appends `payload` to `out` as one or more chunks of at most
/// [`CHUNK_MAX`] bytes, each split at a multiple of `unit` bytes so a chunk
/// always holds whole items.
pub fn encode(payload: &[u8], unit: usize, out: &mut Vec<u8>) {
    let unit = unit.max(1);
    let per_chunk = (CHUNK_MAX / unit).max(1) * unit;
    for part in payload.chunks(per_chunk) {
        out.extend_from_slice(&(part.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(part).to_le_bytes());
        out.extend_from_slice(part);
    }
}

/// Visits the payload of every chunk in `bytes[..len]`, which must be whole
/// chunks with right crcs and payloads of whole `unit`-byte items.
pub fn read<'a>(
    bytes: &'a [u8],
    len: u64,
    unit: usize,
    file: &str,
    mut visit: impl FnMut(&'a [u8]) -> Result<(), FileError>,
) -> Result<(), FileError> {
    let corrupt = |what: &'static str, at: usize| FileError::Corrupt {
        file: file.to_string(),
        what,
        at: at as u64,
    };
    let len = usize::try_from(len).map_err(|_| corrupt("committed length overflows", 0))?;
    if len > bytes.len() {
        return Err(corrupt(
            "file shorter than its committed length",
            bytes.len(),
        ));
    }
    let bytes = &bytes[..len];
    let mut at = 0usize;
    while at < bytes.len() {
        let header = bytes
            .get(at..at + CHUNK_HEADER)
            .ok_or_else(|| corrupt("partial chunk header", at))?;
        let n = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if n > CHUNK_MAX || !n.is_multiple_of(unit.max(1)) {
            return Err(corrupt("bad chunk length", at));
        }
        let start = at + CHUNK_HEADER;
        let payload = bytes
            .get(start..start + n)
            .ok_or_else(|| corrupt("chunk runs past the committed length", at))?;
        if crc32fast::hash(payload) != crc {
            return Err(corrupt("chunk crc mismatch", at));
        }
        visit(payload)?;
        at = start + n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(bytes: &[u8], len: u64) -> Result<Vec<u8>, FileError> {
        let mut all = Vec::new();
        read(bytes, len, 4, "f", |p| {
            all.extend_from_slice(p);
            Ok(())
        })?;
        Ok(all)
    }

    #[test]
    fn chunks_round_trip_and_split_at_whole_items() {
        let mut out = Vec::new();
        encode(b"abcdefgh", 4, &mut out);
        encode(b"", 4, &mut out);
        encode(b"ijkl", 4, &mut out);
        assert_eq!(collect(&out, out.len() as u64).unwrap(), b"abcdefghijkl");
        let big = vec![7u8; CHUNK_MAX + 12];
        let mut out = Vec::new();
        encode(&big, 32, &mut out);
        assert_eq!(out.len(), big.len() + 2 * CHUNK_HEADER);
        assert_eq!(collect(&out, out.len() as u64).unwrap(), big);
    }

    #[test]
    fn damage_inside_the_committed_prefix_is_an_error_and_after_it_ignored() {
        let mut out = Vec::new();
        encode(b"abcdefgh", 4, &mut out);
        let committed = out.len() as u64;
        encode(b"torn", 4, &mut out);
        let n = out.len();
        out[n - 1] ^= 1;
        assert_eq!(collect(&out, committed).unwrap(), b"abcdefgh");
        for i in 0..committed as usize {
            let mut b = out.clone();
            b[i] ^= 0x40;
            assert!(collect(&b, committed).is_err(), "flip at {i}");
        }
        for cut in 1..committed {
            assert!(collect(&out, cut).is_err(), "cut at {cut}");
        }
        assert!(collect(&out[..4], committed).is_err());
    }
}
