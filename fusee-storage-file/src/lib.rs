//! Fusee's default storage backend, on plain files.
//!
//! In progress: the I/O layer ([`io`]) and the simulated disk for power-loss
//! tests ([`sim`]) are here. Still to come: per shard, the log in
//! preallocated segment files (the `fusee_core::segment` format), run-store
//! generations, the index file and two alternating checkpoint slots, passing
//! the whole `fusee-storage` conformance suite.

pub mod chunks;
pub mod error;
pub mod io;
pub mod sim;
pub mod slot;
