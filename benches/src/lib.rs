//! Workloads shared by Fusee's criterion benches, and the cross-backend
//! comparison behind the `fusee-compare` binary.
//!
//! The comparison measures every backend compiled in (the `file`, `redb`
//! and `rocksdb` features add theirs; memory is always there) against two
//! references measured in the same run on the same disk: the **floor**
//! (raw `pwrite` + `fdatasync` of the same bytes) and a **SQLite peer**
//! (one row per record, WAL, `synchronous=FULL`). Its engine section runs
//! the same workflows on Fusee's engine over each backend and on a **peer
//! engine**, duroxide on SQLite ([`engine`]).
//!
//! | module | owns |
//! |---|---|
//! | [`workload`] | the records, frames and parked runs every bench uses |
//! | [`plan`] | how much of each measurement a run makes (`--quick`, full) |
//! | [`target`] | the operations measured, the `Subject`/`Target` traits |
//! | [`backend`] | any `fusee_storage::Storage` as a subject; the list of backends |
//! | [`floor`] | the floor |
//! | [`sqlite`] | the SQLite peer |
//! | [`measure`] | the measurements, written once for every subject |
//! | [`stats`] | percentiles |
//! | [`machine`] | the machine, disk and build a run names |
//! | [`report`] | the results as text, CSV, markdown and SVG, with ratios |
//! | [`engine`] | the engine workloads, the peer engine, their figures and goals |
//! | [`compare`] | the command line and the run |
//! | [`progress`] | progress lines on stderr |
//!
//! `cargo run --release -p fusee-benches --bin fusee-compare -- --quick`

pub mod backend;
pub mod compare;
pub mod engine;
pub mod error;
pub mod floor;
pub mod machine;
pub mod measure;
pub mod plan;
pub mod progress;
pub mod report;
pub mod sqlite;
pub mod stats;
pub mod target;
pub mod text;
pub mod workload;

pub use backend::{Backend, Factory, Memory, backends};
pub use error::{BenchError, Result};
pub use report::Report;

/// The setting in environment variable `name` (a bench's `FUSEE_*` count,
/// say), or `default` when it is unset or does not parse as a `T`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
