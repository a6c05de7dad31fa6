//! Fusee: an embeddable durable execution engine.
//!
//! Not written yet: the engine (one `ShardCore` per shard driven over a
//! storage backend) comes after the storage backends. Backends are chosen by
//! Cargo features: `file` (default), `rocksdb`, `redb`; the in-memory
//! backend is always there.

pub use fusee_core as core;
pub use fusee_storage as storage;
