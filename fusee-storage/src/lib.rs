//! The Fusee storage contract (docs to be written).

mod contract;
mod error;
mod limits;
pub mod memory;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use contract::{
    CheckpointStore, Committed, IndexChange, LogStore, Recovered, RunStore, ShardParts, Storage,
};
pub use error::{Result, StorageError};
pub use limits::{
    DELETED, INDEX_RECORD, MAX_FRAME, MAX_OFFSET, MAX_RECORD, NO_LSN, index_record_run,
    index_record_state, index_records,
};
pub use memory::MemoryStorage;
