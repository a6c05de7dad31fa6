//! Limits every backend enforces, and the few facts about index records the
//! contract needs.
//!
//! # Index records
//!
//! The index is a set of [`INDEX_RECORD`]-byte records (the run table's
//! persisted form, owned by `fusee_core::table`). To a backend they are opaque
//! bytes except for the key: the record mirrors the table's persisted layout,
//! four little-endian 64-bit words, of which
//!
//! | bytes | word | meaning |
//! |---|---|---|
//! | 0..8 | 0 | workflow-ID hash (opaque here) |
//! | 8..14 | 1, bits 0..48 | **run ID**: the upsert/delete key |
//! | 14 | 1, bits 48..56 | state; [`DELETED`] marks a delete in a delta |
//! | 15 | 1, bits 56..64 | persisted flags (opaque here) |
//! | 16..32 | 2, 3 | store location and time (opaque here) |
//!
//! A backend keys the index by [`index_record_run`] and treats a record whose
//! [`index_record_state`] is [`DELETED`] as "remove this run"; it never
//! interprets any other byte, so the core may change them freely.

use fusee_core::record::Lsn;

/// Largest sequence number a record kept in two copies may hold (a seal,
/// and the file backend's log manifest and checkpoint slot): it counts
/// writes, one per commit at most, so it never comes near 2^62 (146 years
/// at a billion a second). A larger one is damage, refused where it is
/// read, so the next write's `seq + 1` never overflows.
pub const MAX_SEQ: u64 = 1 << 62;

/// Bytes of one index record (the core's `table::RECORD`).
pub const INDEX_RECORD: usize = fusee_core::table::RECORD;

/// The state byte that marks an index record as a delete of its run.
pub const DELETED: u8 = 15;

/// Largest log record a backend must accept, in bytes: a record carries at
/// most one payload of `fusee_core::wire::MAX_PAYLOAD` (64 MiB) plus its
/// envelope (run, names, IDs, varints), for which 64 KiB is ample. A longer
/// append is a [`crate::StorageError::TooLarge`] error and consumes no LSN.
pub const MAX_RECORD: usize = fusee_core::wire::MAX_PAYLOAD + (64 << 10);

/// Largest run-store frame a backend must accept, in bytes: 256 MiB, room
/// for a journal holding a few maximal payloads. `BlobRef::len` is a `u32`,
/// so no frame could exceed 4 GiB anyway; the lower bound keeps any frame
/// readable into memory. A longer append is a
/// [`crate::StorageError::TooLarge`] error.
pub const MAX_FRAME: usize = 256 << 20;

/// Largest run-store offset: `BlobRef::offset` uses at most 48 bits.
pub const MAX_OFFSET: u64 = (1 << 48) - 1;

/// The contract's checks of a log append, in the order every backend makes
/// them: `record` longer than [`MAX_RECORD`] is
/// [`crate::StorageError::TooLarge`], an `lsn` other than `last + 1` is
/// [`crate::StorageError::LsnGap`]. Backends call it before changing
/// anything, so they all refuse the same calls with the same errors.
// Inlined: it runs once per record on every backend's append path.
#[inline]
pub fn check_log_append(last: Lsn, lsn: Lsn, record: &[u8]) -> crate::Result<()> {
    if record.len() > MAX_RECORD {
        return Err(crate::StorageError::TooLarge {
            what: "log record",
            len: record.len() as u64,
            max: MAX_RECORD as u64,
        });
    }
    let expected = last + 1;
    if lsn != expected {
        return Err(crate::StorageError::LsnGap { expected, got: lsn });
    }
    Ok(())
}

/// The contract's check of a run-store frame: its length as a `BlobRef`
/// carries it, or [`crate::StorageError::TooLarge`] past [`MAX_FRAME`].
pub fn check_frame_len(frame: &[u8]) -> crate::Result<u32> {
    u32::try_from(frame.len())
        .ok()
        .filter(|&l| l as usize <= MAX_FRAME)
        .ok_or(crate::StorageError::TooLarge {
            what: "run-store frame",
            len: frame.len() as u64,
            max: MAX_FRAME as u64,
        })
}

/// The LSN before the first record: a fresh log's first append is LSN 1.
pub const NO_LSN: Lsn = 0;

/// The run ID an index record is keyed by (bytes 8..14, little-endian).
pub fn index_record_run(record: &[u8; INDEX_RECORD]) -> u64 {
    let mut word = [0u8; 8];
    word[..6].copy_from_slice(&record[8..14]);
    u64::from_le_bytes(word)
}

/// The state byte of an index record (byte 14); [`DELETED`] means delete.
pub fn index_record_state(record: &[u8; INDEX_RECORD]) -> u8 {
    record[14]
}

/// Splits concatenated index records handed to `call` into whole records;
/// a length that is not a multiple of [`INDEX_RECORD`] is the caller's
/// mistake, [`crate::StorageError::Misuse`], on every backend alike.
pub fn index_records<'a>(
    bytes: &'a [u8],
    call: &'static str,
) -> crate::Result<impl Iterator<Item = &'a [u8; INDEX_RECORD]>> {
    if !bytes.len().is_multiple_of(INDEX_RECORD) {
        return Err(crate::StorageError::Misuse {
            call,
            why: "index records must be whole 32-byte records",
        });
    }
    Ok(bytes
        .chunks_exact(INDEX_RECORD)
        .filter_map(|c| <&[u8; INDEX_RECORD]>::try_from(c).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_and_state_come_from_word_one() {
        let mut r = [0xAAu8; INDEX_RECORD];
        let word1: u64 = 0x1234_5678_9ABC | (u64::from(DELETED) << 48) | (0x10 << 56);
        r[8..16].copy_from_slice(&word1.to_le_bytes());
        assert_eq!(index_record_run(&r), 0x1234_5678_9ABC);
        assert_eq!(index_record_state(&r), DELETED);
    }

    #[test]
    fn records_reject_partial_lengths() {
        assert!(matches!(
            index_records(&[0; 33], "commit"),
            Err(crate::StorageError::Misuse { call: "commit", .. })
        ));
        assert_eq!(
            index_records(&[0; 64], "commit").map(|i| i.count()).ok(),
            Some(2)
        );
    }
}
