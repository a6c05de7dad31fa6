//! Fusee storage backend on redb.
//!
//! Not written yet: it will keep every shard of a storage in one redb
//! database file, with tables for the log, the run store, the index and
//! metadata, and pass the whole `fusee-storage` conformance suite. Until then
//! it does not depend on the `redb` crate.
