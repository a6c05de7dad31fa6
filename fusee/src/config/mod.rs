//! Configuration: the storage to open ([`StorageConfig`], [`open_storage`]).

mod storage;

pub use storage::*;
