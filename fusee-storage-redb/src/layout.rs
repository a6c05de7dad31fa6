//! How the shared layout ([`fusee_storage_kv::layout`], documented there
//! byte by byte) maps onto redb: one table per layout table, keyed by
//! fixed-size byte arrays (redb orders them byte-wise, so numerically), and
//! this backend's format marker. The only module that knows the tables.
//!
//! | table | redb key type | redb value type |
//! |---|---|---|
//! | `fusee.format` | `&str`: [`FORMAT_KEY`] | `&[u8]`: [`FORMAT_MAGIC`] ‖ version `u32` LE |
//! | `fusee.log` | `[u8; 12]` | `&[u8]` |
//! | `fusee.store` | `[u8; 12]` | `&[u8]` |
//! | `fusee.index` | `[u8; 16]` | `[u8; 36]` |
//! | `fusee.meta` | `[u8; 5]` | `&[u8]` |
//!
//! Range ends are inclusive (`..=` the key with `u64::MAX`), the arrays
//! having no longer key after them. redb checksums its pages for crash
//! recovery but does not verify them on reads: the layout's own CRC-32s are
//! what turn a changed byte into an error.

use redb::TableDefinition;

pub use fusee_storage_kv::layout::{
    CRC, CommitRow, INDEX_VALUE, LogRow, TAG_COMMIT, TAG_LOG, check_crc, index_key,
    index_record_of, index_value, known_tag, meta_key, meta_of, seq_key, seq_of, with_crc,
};

/// Marks a database file as Fusee's.
pub const FORMAT_MAGIC: [u8; 8] = *b"FUSEE-RD";
/// The layout version this crate writes and reads
/// ([`fusee_storage_kv::layout::FORMAT_VERSION`]), in the directory's
/// identity marker and in the format table: a store of any other version
/// is refused with [`fusee_storage::StorageError::UnsupportedFormat`].
pub const FORMAT_VERSION: u32 = fusee_storage_kv::layout::FORMAT_VERSION;
/// The single key of the format table.
pub const FORMAT_KEY: &str = "fusee.format";

/// Format marker table.
pub const FORMAT: TableDefinition<&str, &[u8]> = TableDefinition::new("fusee.format");
/// Log records by (shard, LSN).
pub const LOG: TableDefinition<[u8; 12], &[u8]> = TableDefinition::new("fusee.log");
/// Run-store frames by (shard, frame number).
pub const STORE: TableDefinition<[u8; 12], &[u8]> = TableDefinition::new("fusee.store");
/// Index records by (shard, generation, run).
pub const INDEX: TableDefinition<[u8; 16], [u8; INDEX_VALUE]> = TableDefinition::new("fusee.index");
/// Per-shard metadata by (shard, tag).
pub const META: TableDefinition<[u8; 5], &[u8]> = TableDefinition::new("fusee.meta");

/// The format table's value for this version.
pub fn format_value() -> [u8; 12] {
    fusee_storage_kv::layout::format_value(FORMAT_MAGIC, FORMAT_VERSION)
}

/// The version a format value declares, or `None` if it is not Fusee's.
pub fn format_version(value: &[u8]) -> Option<u32> {
    fusee_storage_kv::layout::format_version(FORMAT_MAGIC, value)
}

/// The number (LSN or frame number) in a redb log or store key.
pub(crate) fn number(key: [u8; 12]) -> u64 {
    let [_, _, _, _, n @ ..] = key;
    u64::from_be_bytes(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_marker_is_ours() {
        assert_eq!(format_version(&format_value()), Some(FORMAT_VERSION));
        assert_eq!(format_version(b"FUSEE-RK\x01\0\0\0"), None);
        assert_eq!(number(seq_key(7, 1 << 40)), 1 << 40);
    }
}
