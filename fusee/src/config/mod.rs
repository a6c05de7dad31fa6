//! Which backend to open, and where: [`StorageConfig`] and [`open_storage`].
//!
//! # Examples
//!
//! The in-memory backend, always compiled in (nothing survives the
//! process; `dir` is not used):
//!
//! ```
//! use fusee::storage::{LogStore, Storage};
//! use fusee::{Backend, StorageConfig, open_storage};
//!
//! let storage = open_storage(&StorageConfig::new(Backend::Memory, "unused"))?;
//! let mut p = storage.open_shard(0)?;
//! p.log.append(1, b"record")?;
//! assert_eq!(p.log.flush()?, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! redb, with the `redb` feature (one database file in `dir`); a backend
//! named in text (a config file, a flag) parses with [`str::parse`]:
//!
//! ```
//! use fusee::storage::{LogStore, Storage};
//! use fusee::{Backend, OpenError, StorageConfig, open_storage};
//!
//! let dir = std::env::temp_dir().join(format!("fusee-doc-redb-{}", std::process::id()));
//! let backend: Backend = "redb".parse()?;
//! let opened = open_storage(&StorageConfig::new(backend, &dir));
//! #[cfg(feature = "redb")]
//! {
//!     let storage = opened?;
//!     let mut p = storage.open_shard(0)?;
//!     p.log.append(1, b"record")?;
//!     assert_eq!(p.log.flush()?, 1);
//!     drop(p);
//!     storage.close()?;
//! # let _ = std::fs::remove_dir_all(&dir);
//! }
//! #[cfg(not(feature = "redb"))]
//! assert!(matches!(opened, Err(OpenError::FeatureDisabled { feature: "redb", .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A backend that was not compiled in is an error naming the feature to
//! enable:
//!
//! ```
//! use fusee::{Backend, OpenError, StorageConfig, open_storage};
//!
//! let r = open_storage(&StorageConfig::new(Backend::Rocksdb, "/tmp/fusee"));
//! #[cfg(not(feature = "rocksdb"))]
//! match r {
//!     Err(e @ OpenError::FeatureDisabled { .. }) => {
//!         assert!(e.to_string().contains(r#"enable the "rocksdb" feature of fusee"#));
//!     }
//!     other => panic!("{other:?}"),
//! }
//! ```
//!
//! The file backend (`file`, the default feature): one directory, a
//! subdirectory per shard:
//!
//! ```
//! use fusee::storage::{LogStore, Storage};
//! use fusee::{Backend, OpenError, StorageConfig, open_storage};
//!
//! let dir = std::env::temp_dir().join(format!("fusee-doc-file-{}", std::process::id()));
//! let opened = open_storage(&StorageConfig::new(Backend::File, &dir));
//! #[cfg(feature = "file")]
//! {
//!     let storage = opened?;
//!     let mut p = storage.open_shard(0)?;
//!     p.log.append(1, b"record")?;
//!     assert_eq!(p.log.flush()?, 1);
//!     drop(p);
//!     storage.close()?;
//! # let _ = std::fs::remove_dir_all(&dir);
//! }
//! #[cfg(not(feature = "file"))]
//! assert!(matches!(opened, Err(OpenError::FeatureDisabled { feature: "file", .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//!
//! RocksDB, with the `rocksdb` feature (one RocksDB database, the directory
//! `fusee.rocksdb` in `dir`; its C++ build takes a while the first time):
//!
//! ```
//! use fusee::storage::{CheckpointStore, IndexChange, LogStore, RunStore, Storage};
//! use fusee::{Backend, OpenError, StorageConfig, open_storage};
//!
//! let dir = std::env::temp_dir().join(format!("fusee-doc-rocksdb-{}", std::process::id()));
//! let opened = open_storage(&StorageConfig::new(Backend::Rocksdb, &dir));
//! #[cfg(feature = "rocksdb")]
//! {
//!     let storage = opened?;
//!     let mut p = storage.open_shard(0)?;
//!     p.log.append(1, b"record")?;
//!     assert_eq!(p.log.flush()?, 1);
//!     let blob = p.runs.append(b"frame")?;
//!     p.checkpoint.commit(&mut p.runs, IndexChange::Delta(&[]), b"checkpoint")?;
//!     drop(p);
//!     storage.close()?;
//!     drop(storage);
//!     let storage = open_storage(&StorageConfig::new(Backend::Rocksdb, &dir))?;
//!     let mut p = storage.open_shard(0)?;
//!     assert_eq!(p.recovered.checkpoint.as_deref(), Some(&b"checkpoint"[..]));
//!     let mut out = Vec::new();
//!     p.runs.read(blob, &mut out)?;
//!     assert_eq!(out, b"frame");
//! # drop(p); drop(storage);
//! # let _ = std::fs::remove_dir_all(&dir);
//! }
//! #[cfg(not(feature = "rocksdb"))]
//! assert!(matches!(opened, Err(OpenError::FeatureDisabled { feature: "rocksdb", .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The engine's own settings ([`Config`]: shards, checkpoints, retention,
//! limits, the clock, [`Ownership`]) hold a [`StorageConfig`] and are
//! checked at [`Engine::open`](crate::Engine::open).

use std::path::PathBuf;
use std::time::Duration;

use crate::clock::Clock;

mod storage;

pub use storage::*;

/// The engine's settings. Defaults serve a laptop; each builder method says
/// what it changes.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where runs are stored.
    pub storage: StorageConfig,
    /// Shards, each with its own thread, log and flusher (default 4). The
    /// count is fixed when the store is created: opening it with another is
    /// [`Error::Config`](crate::Error::Config), even for a store that never recorded anything
    /// once it was closed. (A store that never closed and never recorded
    /// anything, as a first open interrupted while it made its shards
    /// leaves it, takes a larger count: that open makes the rest.)
    pub shards: u32,
    /// Log bytes after which a checkpoint is taken (default 64 MiB): the
    /// most a restart replays.
    pub checkpoint_bytes: u64,
    /// Time after which a checkpoint is taken if anything was logged
    /// (default 60 s).
    pub checkpoint_interval: Duration,
    /// How long a finished run is kept (default 7 days): its result, its
    /// status and its ID, then it is forgotten.
    pub retention: Duration,
    /// How long after it finished a run keeps its whole journal (default 3
    /// days, at most [`Config::retention`]): every step, its result and
    /// attempts, timers, signals and compensations, for
    /// [`Engine::describe`](crate::Engine::describe), queries and `fusee show` after the end. Then
    /// only its `Start` and `Done` records (its input and result) are kept
    /// until its retention ends. A run in memory keeps it whole anyway; this
    /// is what a finished run keeps once it parks ([`Config::park_after`]).
    /// The cost is the journal's bytes in the run store for this long: 186
    /// bytes a run more than its 100-byte summary for a run of 10 steps
    /// with small results, growing with the payloads (measured by `cargo
    /// bench -p fusee --bench history`; `benches/RESULTS.md`, "A finished
    /// run's history"). After an open, each finished parked run's frame is
    /// read once to learn when its history ends.
    pub history_retention: Duration,
    /// How long after it finished a run keeps its streams' chunks (default
    /// `None`: as long as the run, [`Config::retention`]; at most that).
    /// Then its frame keeps each stream's opening and end but no chunk, and
    /// a subscription to one of its streams is
    /// [`Error::StreamGone`](crate::Error::StreamGone); its result, and its
    /// history while [`Config::history_retention`] lasts, stay. Zero: a
    /// client reads a stream only while its run runs. Tokens of a model's
    /// answer are wanted for minutes, its result for days: this bounds the
    /// disk the chunks hold (at most [`Config::max_stream_chunks`] a run)
    /// by the time they are useful.
    pub stream_retention: Option<Duration>,
    /// The largest journal, in bytes, a finished run keeps whole for
    /// [`Config::history_retention`] (default 1 MiB): a larger one keeps
    /// only its summary as soon as it parks, so the history kept is
    /// bounded by this per run.
    pub history_max_bytes: u64,
    /// Bytes of stream chunks from which a run's frame in the run store
    /// keeps them in a frame of their own, apart from its other records
    /// (default 64 KiB): loading the run, starting its code and reading
    /// its result then read none of them, and a later frame of the run
    /// names them again instead of copying them. Fewer stay with the
    /// records, one frame fewer to write and read.
    pub stream_apart_bytes: usize,
    /// Client requests a shard queues before [`Error::Busy`](crate::Error::Busy) (default
    /// 4,096).
    pub queue_capacity: usize,
    /// How long a run waiting for a timer or a signal is idle before it
    /// leaves memory for the run store (default 10 s). A finished run
    /// leaves at the next housekeeping once its records are durable (its
    /// result is then read from its frame), whatever this says. A parked
    /// run costs a 32-byte table entry.
    pub park_after: Duration,
    /// How long a waiting run's code is idle (its records durable, nothing
    /// for it in flight) before the shard drops the code and keeps only
    /// its journal in memory (default 1 s; not before `park_after`: then
    /// never). What comes for the run next (its timer, a signal, a query,
    /// an update) starts its code again by replaying the journal, about
    /// the cost of its first poll after a restart. A sleeper's code holds
    /// about 1.1 KB (its state, future and operation table) beside the
    /// ~0.5 KB of its journal and state in the shard.
    pub doze_after: Duration,
    /// Run-store bytes released (by runs loaded back, finished or
    /// expired) after which the store is compacted at the next checkpoint,
    /// if they are most of what was written since the last compaction
    /// (default 8 MiB: copying the live frames costs about what they
    /// weigh, so a small gain is not worth it).
    pub compact_after_bytes: u64,
    /// Largest input, signal, step result or workflow result, in bytes
    /// (default 4 MiB; at most 64 MiB, the record limit).
    pub max_payload: usize,
    /// Most stream chunks one run may send, over all its streams (default
    /// 1,000,000; at least 1): the next is refused with
    /// [`crate::Error::StreamLimit`] and nothing is recorded. Chunks live in
    /// the run's journal (see [`crate::StreamSender`]), so this bounds what a
    /// run's streams add to its journal at `max_stream_chunks` chunks of at
    /// most [`Config::max_payload`] each.
    pub max_stream_chunks: u64,
    /// How long a shard's log stays idle after a flush before the shard
    /// seals it (default 20 ms). A seal is one small write and `fdatasync`
    /// of a file apart from the log (run on the shard's flusher thread),
    /// recording that every record so far is durable; it is what lets the
    /// next open tell damage that lost acknowledged records (the newest
    /// batch zeroed by the disk, redb's newest commit lost to a flipped
    /// header byte, RocksDB's WAL damaged before its replay) from a torn,
    /// unacknowledged tail, and fail with
    /// [`crate::StorageError::LostRecords`] instead of opening with less
    /// data. Records acknowledged since the last seal are not covered: the
    /// window is this long after the shard goes idle, and at most
    /// [`Config::seal_interval`] under continuous load. A closed engine is
    /// always sealed. Shorter: a smaller window, more seals for a shard
    /// whose records come in bursts this far apart.
    pub seal_after_idle: Duration,
    /// The longest a durable record waits for a seal while the shard never
    /// goes idle (default 1 s): one extra small `fdatasync` per interval
    /// under load.
    pub seal_interval: Duration,
    /// Where time comes from (default: the system clock).
    pub clock: Clock,
    /// Which shards this engine owns (default [`Ownership::All`]: every
    /// shard, this process alone on its store). [`Ownership::Lease`] shares
    /// a PostgreSQL store between processes, each owning the shards whose
    /// leases it holds and taking over those of a process that dies; a
    /// call for a shard owned elsewhere is [`Error::NotOwner`](crate::Error::NotOwner). Messages
    /// between workflows on shards of different processes (children,
    /// `ctx.signal`, cancels) are not carried between processes: they wait
    /// in the sender's outbox until both shards are in one process. See
    /// [`Ownership`] and `fusee-storage-postgres/DEPLOYMENT.md`.
    pub ownership: Ownership,
    /// Whether the engine counts the figures [`crate::telemetry::render`]
    /// exposes beyond [`Engine::metrics`](crate::Engine::metrics): step attempts, run starts and
    /// ends, timers, schedule fires, queue starts (from durable records),
    /// flush histograms, fencing refusals, open times (default on; off,
    /// a shard pays one branch per record).
    pub metrics: bool,
    /// The tracer provider the engine's spans go to (feature `otel`;
    /// default none: no spans). Your own provider, with its exporter,
    /// processor and sampler: the engine takes a tracer from it and never
    /// touches the global one. See [`crate::otel`].
    #[cfg(feature = "otel")]
    pub tracer: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
    /// Whether the engine checks every unfinished run against its code
    /// before any run's code starts (default off). With it on,
    /// [`Engine::open`](crate::Engine::open) recovers the shards but starts
    /// no run's code (runs wait as for code not registered yet) until
    /// [`Engine::check_replay`](crate::Engine::check_replay) has run: open,
    /// register your workflows, then call it. It replays every loaded and
    /// parked unfinished run with the registered code, holds those that
    /// depart from their journals, and lets the others start.
    pub replay_check: bool,
}

impl Config {
    /// Settings for `storage`, everything else by default.
    pub fn new(storage: StorageConfig) -> Self {
        Self {
            storage,
            shards: 4,
            checkpoint_bytes: 64 << 20,
            checkpoint_interval: Duration::from_secs(60),
            retention: Duration::from_secs(7 * 24 * 3600),
            history_retention: Duration::from_secs(3 * 24 * 3600),
            history_max_bytes: 1 << 20,
            stream_apart_bytes: 64 << 10,
            stream_retention: None,
            queue_capacity: 4096,
            park_after: Duration::from_secs(10),
            doze_after: Duration::from_secs(1),
            compact_after_bytes: 8 << 20,
            max_payload: 4 << 20,
            max_stream_chunks: 1_000_000,
            seal_after_idle: Duration::from_millis(20),
            seal_interval: Duration::from_secs(1),
            clock: Clock::System,
            ownership: Ownership::All,
            metrics: true,
            #[cfg(feature = "otel")]
            tracer: None,
            replay_check: false,
        }
    }

    /// In memory: nothing survives the process (tests, examples).
    pub fn memory() -> Self {
        Self::new(StorageConfig::new(Backend::Memory, ""))
    }

    /// The file backend in `dir` (feature `file`, the default).
    pub fn file(dir: impl Into<PathBuf>) -> Self {
        Self::new(StorageConfig::new(Backend::File, dir))
    }

    /// The redb backend in `dir` (feature `redb`).
    pub fn redb(dir: impl Into<PathBuf>) -> Self {
        Self::new(StorageConfig::new(Backend::Redb, dir))
    }

    /// The RocksDB backend in `dir` (feature `rocksdb`).
    pub fn rocksdb(dir: impl Into<PathBuf>) -> Self {
        Self::new(StorageConfig::new(Backend::Rocksdb, dir))
    }

    /// Opens an existing store only: a missing or empty directory is an
    /// error instead of a new store ([`StorageConfig::existing_only`]).
    pub fn existing_only(mut self) -> Self {
        self.storage = self.storage.existing_only();
        self
    }

    /// Sets the shard count (for a new store).
    pub fn shards(mut self, n: u32) -> Self {
        self.shards = n;
        self
    }

    /// Sends spans made from durable records to `provider`
    /// ([`Config::tracer`], feature `otel`).
    #[cfg(feature = "otel")]
    pub fn tracer(mut self, provider: opentelemetry_sdk::trace::SdkTracerProvider) -> Self {
        self.tracer = Some(provider);
        self
    }

    /// Sets whether the engine counts its telemetry figures
    /// ([`Config::metrics`]).
    pub fn metrics(mut self, on: bool) -> Self {
        self.metrics = on;
        self
    }

    /// Sets where time comes from.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the log bytes between checkpoints.
    pub fn checkpoint_bytes(mut self, bytes: u64) -> Self {
        self.checkpoint_bytes = bytes;
        self
    }

    /// Sets the time between checkpoints.
    pub fn checkpoint_interval(mut self, d: Duration) -> Self {
        self.checkpoint_interval = d;
        self
    }

    /// Turns the replay check at open on or off (see
    /// [`Config::replay_check`](Config#structfield.replay_check)).
    ///
    /// ```no_run
    /// # async fn demo(register: impl Fn(&fusee::Engine)) -> fusee::Result<()> {
    /// use fusee::{Config, Engine};
    /// let engine = Engine::open(Config::file("data").replay_check(true)).await?;
    /// register(&engine); // your workflows, as always
    /// // No run's code has started yet: each is replayed against the code
    /// // just registered; those that depart are held, the rest go on.
    /// let report = engine.check_replay().await?;
    /// for d in &report.divergences {
    ///     eprintln!("held {} ({}): {}", d.id, d.workflow, d.message);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn replay_check(mut self, on: bool) -> Self {
        self.replay_check = on;
        self
    }

    /// Sets how long finished runs are kept.
    pub fn retention(mut self, d: Duration) -> Self {
        self.retention = d;
        self
    }

    /// Sets how long a finished run keeps its whole journal
    /// ([`Config::history_retention`]); zero keeps only the summary.
    pub fn history_retention(mut self, d: Duration) -> Self {
        self.history_retention = d;
        self
    }

    /// Sets how long a finished run keeps its streams' chunks
    /// ([`Config::stream_retention`]).
    pub fn stream_retention(mut self, d: Duration) -> Self {
        self.stream_retention = Some(d);
        self
    }

    /// Sets the largest journal a finished run keeps whole
    /// ([`Config::history_max_bytes`]).
    pub fn history_max_bytes(mut self, bytes: u64) -> Self {
        self.history_max_bytes = bytes;
        self
    }

    /// Sets the bytes of stream chunks from which a run's frame keeps them
    /// in a frame of their own ([`Config::stream_apart_bytes`]; 0: always,
    /// as soon as it holds one).
    pub fn stream_apart_bytes(mut self, bytes: usize) -> Self {
        self.stream_apart_bytes = bytes;
        self
    }

    /// Sets how long the log stays idle after a flush before it is sealed
    /// ([`Config::seal_after_idle`]).
    pub fn seal_after_idle(mut self, d: Duration) -> Self {
        self.seal_after_idle = d;
        self
    }

    /// Sets the longest a durable record waits for a seal under load
    /// ([`Config::seal_interval`]).
    pub fn seal_interval(mut self, d: Duration) -> Self {
        self.seal_interval = d;
        self
    }

    /// Sets how long a run is idle before it parks.
    pub fn park_after(mut self, d: Duration) -> Self {
        self.park_after = d;
        self
    }

    /// Sets how long a waiting run's code is idle before it is dropped
    /// (see [`Config::doze_after`]).
    pub fn doze_after(mut self, d: Duration) -> Self {
        self.doze_after = d;
        self
    }

    /// Sets the released run-store bytes that trigger a compaction.
    pub fn compact_after_bytes(mut self, bytes: u64) -> Self {
        self.compact_after_bytes = bytes;
        self
    }

    /// Sets the request queue's capacity per shard.
    pub fn queue_capacity(mut self, n: usize) -> Self {
        self.queue_capacity = n;
        self
    }

    /// Sets the largest payload.
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// Sets the most stream chunks one run may send
    /// ([`Config::max_stream_chunks`]).
    pub fn max_stream_chunks(mut self, n: u64) -> Self {
        self.max_stream_chunks = n;
        self
    }

    /// Sets which shards the engine owns: [`Ownership::Lease`] for a store
    /// shared by several processes.
    ///
    /// ```no_run
    /// # async fn demo() -> fusee::Result<()> {
    /// use std::time::Duration;
    /// use fusee::{Config, Engine, Ownership, StorageConfig};
    ///
    /// let mut storage = StorageConfig::postgres("postgresql://fusee@db.internal/app")
    ///     .postgres_lease(Duration::from_secs(5));
    /// // Unique per live process; a restarted process may reuse its
    /// // predecessor's name to take its shards back at once.
    /// storage.postgres.owner = Some("worker-1".into());
    /// let engine = Engine::open(Config::new(storage).shards(8).ownership(Ownership::Lease {
    ///     retry: Some(Duration::from_secs(1)),
    ///     prefer: Some(vec![0, 1, 2, 3]),
    /// }))
    /// .await?;
    /// println!("this process owns shards {:?}", engine.owned_shards());
    /// # Ok(()) }
    /// ```
    pub fn ownership(mut self, ownership: Ownership) -> Self {
        self.ownership = ownership;
        self
    }

    /// The store's lease time, as the engine times its tries by it
    /// ([`PostgresSettings::lease`](crate::config::PostgresSettings::lease), or
    /// the backend's default).
    pub(crate) fn lease(&self) -> Duration {
        self.storage.postgres.lease.unwrap_or(DEFAULT_LEASE)
    }

    /// Why the settings cannot open an engine, if they cannot (the engine
    /// reports it as [`crate::Error::Config`]).
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.shards == 0 || self.shards > 4096 {
            return Err(format!("shards must be 1 to 4096, not {}", self.shards));
        }
        if self.queue_capacity == 0 {
            return Err("queue_capacity must be at least 1".into());
        }
        if let Some(p) = self.storage.postgres.inbox_poll
            && p < Duration::from_millis(1)
        {
            return Err(format!("the inbox poll interval of {p:?} is below 1 ms"));
        }
        if self.max_stream_chunks == 0 {
            return Err("max_stream_chunks is 0: a run could open a stream but never send".into());
        }
        let limit = fusee_core::wire::MAX_PAYLOAD;
        if self.max_payload > limit {
            return Err(format!(
                "max_payload of {} exceeds the record limit of {limit} bytes",
                self.max_payload
            ));
        }
        Ok(())
    }
}

/// Which shards of the store an engine owns, and how it comes to own them
/// ([`Config::ownership`](crate::Config::ownership)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Ownership {
    /// Every shard (the default): the engine is its store's only process.
    /// A shard another process holds fails [`Engine::open`](crate::Engine::open)
    /// (`StorageError::Leased`), and a shard whose storage fails stays
    /// stopped, answering [`Error::Storage`](crate::Error::Storage), until
    /// the engine is opened again.
    #[default]
    All,
    /// The shards whose leases this engine holds, shared with other
    /// processes on one store (the PostgreSQL backend; with another
    /// backend every shard simply opens). See the [module docs](crate::ownership):
    /// the open takes what it can and returns, a thread takes the rest as
    /// their leases lapse, a shard lost to another owner stops (its
    /// callers get [`Error::NotOwner`](crate::Error::NotOwner)) and is
    /// tried again after a back-off, and a call for a shard owned
    /// elsewhere is `NotOwner`, for the caller to send to its owner.
    ///
    /// Each process needs its own lease holder name
    /// ([`PostgresSettings::owner`](crate::config::PostgresSettings::owner), by
    /// default a new one per open); a restarted process given its
    /// predecessor's name takes that one's shards back at once instead of
    /// waiting for their leases to lapse. Every process must use the same
    /// shard count.
    ///
    /// Messages between workflows on shards of different processes (a
    /// child start, a child's result, a `ctx.signal`, a cancel) go through
    /// the PostgreSQL store's inbox table, exactly once into the target's
    /// journal (see the [module docs](crate::ownership); each hop adds a few round
    /// trips to the server, or up to
    /// [`inbox_poll`](crate::config::PostgresSettings::inbox_poll) when a
    /// notification goes unheard).
    /// Calls over every shard
    /// ([`Engine::list`](crate::Engine::list) and what uses it) fail with
    /// `NotOwner` while a shard is owned elsewhere.
    Lease {
        /// How often the engine tries again to open a shard it does not
        /// own (default: one lease time,
        /// [`PostgresSettings::lease`](crate::config::PostgresSettings::lease),
        /// 10 s by default). A shard whose owner died is taken over within
        /// its lease plus this. Each try of a shard held elsewhere costs
        /// one short transaction on the server.
        retry: Option<Duration>,
        /// The shards this engine opens at once (default: every shard).
        /// The others it first tries one lease time after the open, then
        /// every `retry`: processes started together with disjoint
        /// preferences split the shards between them, and each is a
        /// standby for the others' shards. Nothing is given back: a shard
        /// taken over stays with its new owner while that owner lives.
        prefer: Option<Vec<u32>>,
    },
}

impl Ownership {
    /// [`Ownership::Lease`] with every setting by default.
    pub fn lease() -> Self {
        Ownership::Lease {
            retry: None,
            prefer: None,
        }
    }
}

/// The lease of a store when the configuration does not name one: the
/// PostgreSQL backend's default.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(10);
