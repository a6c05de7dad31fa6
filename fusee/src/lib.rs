//! Fusee: an embeddable durable execution engine.
//!
//! The engine (one `ShardCore` per shard driven over a storage backend) is
//! still to come. What is here: choosing and opening a storage backend.
//!
//! # Choosing a backend
//!
//! Backends are Cargo features of this crate: `file` (default), `rocksdb`
//! and `redb`; the in-memory backend is always there. [`open_storage`] opens
//! the one a [`StorageConfig`] names and returns it as an [`AnyStorage`],
//! which implements [`storage::Storage`] by delegating to the backend
//! compiled in. The [`config`] module has an example of each choice.

pub use fusee_core as core;
pub use fusee_storage as storage;

pub mod any_storage;
pub mod config;

pub use any_storage::{AnyCheckpoint, AnyLog, AnyRuns, AnyStorage};
pub use config::{Backend, OpenError, StorageConfig, open_storage};
