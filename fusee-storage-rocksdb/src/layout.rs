//! How the shared layout ([`fusee_storage_kv::layout`], documented there
//! byte by byte) maps onto RocksDB: one column family per layout table, the
//! format marker sharing the meta family, and this backend's marker. The
//! only module that knows the column families.
//!
//! | column family | keys | values |
//! |---|---|---|
//! | `fusee.meta` | [`FORMAT_KEY`] (12 B) and meta keys (5 B) | [`FORMAT_MAGIC`] ‖ version `u32` LE; log and commit rows |
//! | `fusee.log` | log keys (12 B) | CRC-prefixed records |
//! | `fusee.store` | store keys (12 B) | CRC-prefixed frames |
//! | `fusee.index` | index keys (16 B) | index values (36 B) |
//!
//! The `default` column family (RocksDB always has one) stays empty. The
//! format key is 12 bytes long, so it never collides with a 5-byte meta key.
//! Ranges are deleted with range deletions whose exclusive ends are the
//! layout's [`seq_end`], [`index_end`] and [`index_shard_end`]. RocksDB
//! checksums its blocks and WAL records and verifies them on reads; the
//! layout's own CRC-32s also catch a value damaged before RocksDB
//! checksummed it.

pub use fusee_storage_kv::layout::{
    CRC, CommitRow, INDEX_VALUE, LogRow, TAG_COMMIT, TAG_LOG, check_crc, index_end, index_key,
    index_record_of, index_shard_end, index_value, known_tag, meta_key, meta_of, seq_end, seq_key,
    seq_of, with_crc,
};

/// Marks a database as Fusee's.
pub const FORMAT_MAGIC: [u8; 8] = *b"FUSEE-RK";
/// The layout version this crate writes and reads
/// ([`fusee_storage_kv::layout::FORMAT_VERSION`]), in the directory's
/// identity marker and in the format row: a store of any other version is
/// refused with [`fusee_storage::StorageError::UnsupportedFormat`].
pub const FORMAT_VERSION: u32 = fusee_storage_kv::layout::FORMAT_VERSION;
/// The key of the format marker in [`META`].
pub const FORMAT_KEY: &[u8; 12] = b"fusee.format";

/// Column family of the format marker and the per-shard meta rows.
pub const META: &str = "fusee.meta";
/// Column family of log records by (shard, LSN).
pub const LOG: &str = "fusee.log";
/// Column family of run-store frames by (shard, frame number).
pub const STORE: &str = "fusee.store";
/// Column family of index records by (shard, generation, run).
pub const INDEX: &str = "fusee.index";
/// RocksDB's own column family, which every database has; ours stays empty.
pub const DEFAULT: &str = "default";
/// Every column family of a Fusee database.
pub const FAMILIES: [&str; 5] = [DEFAULT, META, LOG, STORE, INDEX];

/// The format marker's value for this version.
pub fn format_value() -> [u8; 12] {
    fusee_storage_kv::layout::format_value(FORMAT_MAGIC, FORMAT_VERSION)
}

/// The version a format value declares, or `None` if it is not Fusee's.
pub fn format_version(value: &[u8]) -> Option<u32> {
    fusee_storage_kv::layout::format_version(FORMAT_MAGIC, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_marker_is_ours() {
        assert_eq!(format_version(&format_value()), Some(FORMAT_VERSION));
        assert_eq!(format_version(b"FUSEE-RD\x01\0\0\0"), None);
        assert_eq!(meta_of(FORMAT_KEY), None);
    }
}
