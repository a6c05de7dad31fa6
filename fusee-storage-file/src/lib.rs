//! Fusee's default storage backend, on plain files.
//!
//! Per shard, the log lives in preallocated segment files (the
//! `fusee_core::segment` format), the run store in generation files with a
//! release log, the index in chunk files, and the current commit in a pair
//! of checkpoint slot files. See [`storage`] for the directory layout
//! and each module for its file format byte by byte:
//!
//! | module | owns |
//! |---|---|
//! | [`storage`] | [`FileStorage`]: the directory, its lock, opening shards |
//! | [`shared`] | what a shard's parts share, options, the guard marking a shard open (a leaf: imports no module above it) |
//! | [`log`] | log segments: writing, flushing, recovery, discard |
//! | [`manifest`] | the log manifest: the newest segment started and the first LSN the log must hold |
//! | `pair` | a small record kept in two files written in turn (slots, manifest) |
//! | [`store`] | run-store generations, release logs, compaction |
//! | [`checkpoint`] | index files and the commit sequence |
//! | [`seal`] | the log seal: how far the log was durable, kept apart from it |
//! | [`slot`] | the checkpoint slot format |
//! | [`chunks`] | the checksummed chunk-file format |
//! | [`io`] | the file-system trait, real files |
//! | [`sim`] | a simulated disk that loses, keeps or tears unsynced writes |
//!
//! What it deliberately does not know: what records, frames, index records
//! or checkpoints mean. It stores the core's bytes and the contract's
//! promises, nothing more.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod checkpoint;
pub mod chunks;
pub mod error;
pub mod io;
pub mod log;
pub mod manifest;
mod pair;
pub mod seal;
pub mod shared;
pub mod sim;
pub mod slot;
pub mod storage;
pub mod store;
pub mod verify;

pub use error::FileError;
pub use shared::{Create, DEFAULT_SEGMENT_BYTES, FileOptions, FlushMethod, OPEN_SEGMENT_BYTES};
pub use storage::FORMAT;
pub use storage::FileStorage;
