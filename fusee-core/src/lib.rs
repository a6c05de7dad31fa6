//! Deterministic core of the Fusee durable execution engine: records,
//! segments, journals and shard state, with no I/O.
//!
//! Every piece of this crate is a state machine or a format driven by a host:
//! nothing here performs I/O, reads a clock, spawns a thread or takes a lock,
//! and `unsafe` is forbidden. Time comes in as an argument (`now_ms`);
//! deadlines go out as values the host waits for.
//!
//! What the crate deliberately does not know: files, directories, fsync,
//! threads, or which storage backend holds its bytes. It defines the bytes
//! (the canonical record encoding, the segment, run-store and checkpoint
//! formats) and the state derived from them; the storage crates move them.
//!
//! | module | owns |
//! |---|---|
//! | [`wire`] | integers, varints, length-prefixed bytes, the never-panicking [`wire::Reader`], hashes |
//! | [`record`] | the 25 record kinds and their one canonical encoding |
//! | [`table`] | the 32-byte-per-run table and its persisted index records |
//! | [`wheel`] | the hierarchical timing wheel |
//! | [`shard`] | [`shard::ShardCore`], the shard state machine |
//! | [`run`] | [`run::RunMachine`], one run's journal against its code: sequence numbers, replay in journal order, determinism checks, the gate LSN |
//! | [`segment`] | the log segment format, `LogWriter` and the recovery scanner |
//! | [`store`] | run-store entries and the checkpoint format |

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

pub mod record;
pub mod run;
pub mod segment;
pub mod shard;
pub mod store;
pub mod table;
pub mod wheel;
pub mod wire;

pub use record::{Lsn, Name, Payload, Record, RecordBuf, RecordRef, RunId, Seq, Status};
