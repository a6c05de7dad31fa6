//! Fusee storage backend on RocksDB.
//!
//! Not written yet: it will keep every shard of a storage in one RocksDB
//! database, with column families for the log, the run store, the index and
//! metadata, and pass the whole `fusee-storage` conformance suite. Until then
//! it does not depend on the `rocksdb` crate, so the workspace builds without
//! compiling RocksDB.
