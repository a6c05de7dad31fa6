//! The run table (to be written).

/// Bytes of one persisted index record.
pub const RECORD: usize = 32;
