//! Fusee's default storage backend, on plain files.
//!
//! Not written yet: it will hold, per shard, the log in preallocated segment
//! files (the `fusee_core::segment` format), run-store generations, the
//! index file and two alternating checkpoint slots, and pass the whole
//! `fusee-storage` conformance suite.
