use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use fusee_storage::{MemoryStorage, StorageError};

use crate::AnyStorage;

/// A storage backend Fusee knows about (compiled in or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// In memory: always compiled in; nothing survives the process.
    Memory,
    /// Plain files (feature `file`, the default).
    File,
    /// RocksDB (feature `rocksdb`).
    Rocksdb,
    /// redb (feature `redb`).
    Redb,
    /// PostgreSQL (feature `postgres`): shards shared by many processes
    /// under leases; [`StorageConfig::dir`] is unused, the server comes
    /// from [`PostgresSettings::url`].
    Postgres,
}

impl Backend {
    /// Every backend, compiled in or not.
    pub const ALL: [Backend; 5] = [
        Backend::Memory,
        Backend::File,
        Backend::Rocksdb,
        Backend::Redb,
        Backend::Postgres,
    ];

    /// The backend's name, as [`FromStr`] accepts it and as its Cargo
    /// feature is called (`memory` has no feature).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::File => "file",
            Backend::Rocksdb => "rocksdb",
            Backend::Redb => "redb",
            Backend::Postgres => "postgres",
        }
    }

    /// Whether this build can open the backend (its feature is on).
    pub fn compiled_in(self) -> bool {
        match self {
            Backend::Memory => true,
            Backend::File => cfg!(feature = "file"),
            Backend::Rocksdb => cfg!(feature = "rocksdb"),
            Backend::Redb => cfg!(feature = "redb"),
            Backend::Postgres => cfg!(feature = "postgres"),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A backend name that is none of [`Backend::ALL`].
#[derive(Debug, thiserror::Error)]
#[error("unknown storage backend {0:?}: expected memory, file, rocksdb, redb or postgres")]
pub struct UnknownBackend(pub String);

impl FromStr for Backend {
    type Err = UnknownBackend;

    /// Parses a backend's [`Backend::name`] (ASCII case ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownBackend(s.to_string()))
    }
}

/// Which storage to open and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageConfig {
    /// The backend.
    pub backend: Backend,
    /// The directory holding the storage (unused by [`Backend::Memory`]
    /// and [`Backend::Postgres`], whose server is
    /// [`PostgresSettings::url`]).
    pub dir: PathBuf,
    /// Whether a missing or empty directory becomes a new store (the
    /// default) or is [`StorageError::NotFound`]: an embedder that must
    /// never start over on a mistyped or unmounted path says
    /// [`Create::Never`].
    pub create: Create,
    /// The file backend's settings.
    pub file: FileSettings,
    /// The redb backend's settings.
    pub redb: RedbSettings,
    /// The RocksDB backend's settings.
    pub rocksdb: RocksSettings,
    /// The PostgreSQL backend's settings.
    pub postgres: PostgresSettings,
}

pub use fusee_storage::identity::Create;

/// How the file backend makes flushes durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Flush {
    /// `fdatasync` (the default): data, and the metadata needed to read
    /// it; segments are preallocated, so no other metadata.
    #[default]
    DataSync,
    /// `fsync`: data and all metadata, for file systems where
    /// `fdatasync` is not enough.
    FullSync,
    /// No sync at all: nothing is durable before the OS writes it back.
    /// For tests and benchmarks only.
    None,
}

/// Settings of the file backend; `None` leaves the backend's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileSettings {
    /// Bytes of a log segment (default 64 MiB). Larger segments roll and
    /// zero-fill less often; each costs its size on disk until a checkpoint
    /// lets it go.
    pub segment_bytes: Option<u64>,
    /// How flushes reach the disk (default [`Flush::DataSync`]).
    pub flush: Flush,
}

/// Settings of the redb backend; `None` leaves the backend's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedbSettings {
    /// Bytes of page cache (default 1 GiB, filled only as pages are used).
    pub cache_bytes: Option<usize>,
    /// Whether flushes and commits use redb's two-phase commit (default
    /// yes: damage to the newest commit after a crash is an error rather
    /// than a silent step back, for two syncs per flush instead of one).
    pub two_phase_commit: Option<bool>,
}

/// Settings of the RocksDB backend; `None` leaves the backend's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RocksSettings {
    /// Memtable bytes of each column family (default 32 MiB).
    pub write_buffer: Option<usize>,
    /// Memtable bytes of all column families (default 128 MiB).
    pub db_write_buffer: Option<usize>,
    /// WAL bytes kept before flushing memtables (default 256 MiB).
    pub max_total_wal: Option<u64>,
    /// Background flush and compaction jobs (default 2).
    pub background_jobs: Option<i32>,
}

/// How far a PostgreSQL commit travels before it is acknowledged (the
/// server's `synchronous_commit`): what a flush or commit reported durable
/// survives. See `fusee-storage-postgres`'s `SyncCommit` and DEPLOYMENT.md.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SynchronousCommit {
    /// `off`: not even the primary's WAL is flushed; a server crash loses
    /// acknowledged records. Tests and benchmarks only.
    Off,
    /// `local`: the primary's WAL is flushed; a failover can lose the last
    /// acknowledged commits.
    Local,
    /// `remote_write`: a synchronous standby received the WAL (not yet
    /// flushed).
    RemoteWrite,
    /// `on` (the default): a synchronous standby flushed it too; a
    /// promoted synchronous standby holds every acknowledged commit.
    #[default]
    On,
    /// `remote_apply`: as `on`, and applied on the standby.
    RemoteApply,
}

/// Settings of the PostgreSQL backend; `None` leaves the backend's
/// default. The server is [`PostgresSettings::url`]: for this backend
/// [`StorageConfig::dir`] is not used.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostgresSettings {
    /// The connection URL, `postgresql://user:password@host:port/database`
    /// (default `postgresql://postgres@localhost/postgres`). No TLS: reach
    /// the server over loopback or a private network.
    pub url: Option<String>,
    /// The schema holding the store (default `fusee`): one schema, one
    /// store.
    pub schema: Option<String>,
    /// Connections kept open for reuse between shard opens (default 8;
    /// each open shard holds `2 + flushes_in_flight` more, the storage one
    /// for its leases and one listening for inbox notifications).
    pub pool_size: Option<usize>,
    /// How many log flushes of one shard may be in flight at once, each on
    /// a connection of its own (default 2, 1 to 4): the next flush's
    /// statement runs while the one before waits for its commit, which
    /// raises a loaded shard's records per second (measured in
    /// `fusee-storage-postgres`'s DEPLOYMENT.md). 1 saves a connection per
    /// shard.
    pub flushes_in_flight: Option<usize>,
    /// How long a shard's lease lives unrenewed (default 10 s): after a
    /// process dies, its shards wait this long for another owner.
    pub lease: Option<std::time::Duration>,
    /// How far a commit travels before it is acknowledged (default
    /// [`SynchronousCommit::On`]).
    pub synchronous_commit: SynchronousCommit,
    /// This process's name as a lease holder (default: host, process id
    /// and a random suffix); a restarted process given its predecessor's
    /// name takes that one's shards back at once.
    pub owner: Option<String>,
    /// How often each shard's driver reads the shard's inbox table, where
    /// shards of other processes leave their messages for it (a child to
    /// start, a child's result, a signal, a cancel: see
    /// [`Ownership::Lease`](crate::Ownership::Lease)), besides reading it
    /// at once when a PostgreSQL notification says rows came (within a
    /// round trip of their post). Default 1 s: the bound on a message's
    /// delay should a notification go unheard (a connection pooler in
    /// transaction mode does not carry `LISTEN`: lower it there), for one
    /// cheap indexed query per shard per interval. At least 1 ms.
    pub inbox_poll: Option<std::time::Duration>,
}

/// [`PostgresSettings::inbox_poll`] when unset.
pub const DEFAULT_INBOX_POLL: std::time::Duration = std::time::Duration::from_secs(1);

impl StorageConfig {
    /// A config for `backend` in `dir`, every setting by default.
    pub fn new(backend: Backend, dir: impl Into<PathBuf>) -> Self {
        Self {
            backend,
            dir: dir.into(),
            create: Create::IfMissing,
            file: FileSettings::default(),
            redb: RedbSettings::default(),
            rocksdb: RocksSettings::default(),
            postgres: PostgresSettings::default(),
        }
    }

    /// A config for the PostgreSQL store at `url` (`dir` unused), every
    /// other setting by default.
    pub fn postgres(url: impl Into<String>) -> Self {
        let mut c = Self::new(Backend::Postgres, PathBuf::new());
        c.postgres.url = Some(url.into());
        c
    }

    /// The PostgreSQL schema holding the store.
    pub fn postgres_schema(mut self, schema: impl Into<String>) -> Self {
        self.postgres.schema = Some(schema.into());
        self
    }

    /// The PostgreSQL lease duration.
    pub fn postgres_lease(mut self, lease: std::time::Duration) -> Self {
        self.postgres.lease = Some(lease);
        self
    }

    /// How far a PostgreSQL commit travels before it is acknowledged.
    pub fn postgres_synchronous_commit(mut self, level: SynchronousCommit) -> Self {
        self.postgres.synchronous_commit = level;
        self
    }

    /// Opens an existing store only: a missing or empty directory is an
    /// error instead of a new store.
    pub fn existing_only(mut self) -> Self {
        self.create = Create::Never;
        self
    }

    /// The file backend's segment size.
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.file.segment_bytes = Some(bytes);
        self
    }

    /// How the file backend's flushes reach the disk.
    pub fn flush(mut self, flush: Flush) -> Self {
        self.file.flush = flush;
        self
    }

    /// redb's page cache size.
    pub fn redb_cache_bytes(mut self, bytes: usize) -> Self {
        self.redb.cache_bytes = Some(bytes);
        self
    }

    /// Whether redb commits in two phases.
    pub fn redb_two_phase_commit(mut self, on: bool) -> Self {
        self.redb.two_phase_commit = Some(on);
        self
    }

    /// RocksDB's memtable sizes: per column family, and all together.
    pub fn rocksdb_write_buffers(mut self, per_family: usize, total: usize) -> Self {
        self.rocksdb.write_buffer = Some(per_family);
        self.rocksdb.db_write_buffer = Some(total);
        self
    }

    /// RocksDB's WAL bound.
    pub fn rocksdb_max_total_wal(mut self, bytes: u64) -> Self {
        self.rocksdb.max_total_wal = Some(bytes);
        self
    }

    /// RocksDB's background jobs.
    pub fn rocksdb_background_jobs(mut self, jobs: i32) -> Self {
        self.rocksdb.background_jobs = Some(jobs);
        self
    }

    #[cfg(feature = "file")]
    fn file_options(&self) -> fusee_storage_file::FileOptions {
        let mut o = fusee_storage_file::FileOptions {
            create: self.create,
            ..Default::default()
        };
        if let Some(b) = self.file.segment_bytes {
            o.segment_bytes = b;
        }
        o.flush = match self.file.flush {
            Flush::DataSync => fusee_storage_file::FlushMethod::DataSync,
            Flush::FullSync => fusee_storage_file::FlushMethod::FullSync,
            Flush::None => fusee_storage_file::FlushMethod::None,
        };
        o
    }

    #[cfg(feature = "redb")]
    fn redb_options(&self) -> fusee_storage_redb::RedbOptions {
        let mut o = fusee_storage_redb::RedbOptions::default();
        o.create = self.create;
        if let Some(b) = self.redb.cache_bytes {
            o.cache_size = b;
        }
        if let Some(on) = self.redb.two_phase_commit {
            o.two_phase_commit = on;
        }
        o
    }

    #[cfg(feature = "postgres")]
    pub(crate) fn postgres_options(&self) -> fusee_storage_postgres::PgOptions {
        use fusee_storage_postgres::{PgOptions, SyncCommit};
        let p = &self.postgres;
        let mut o = PgOptions::new(
            p.url
                .clone()
                .unwrap_or_else(|| fusee_storage_postgres::DEFAULT_URL.to_owned()),
        );
        o.create = self.create;
        if let Some(s) = &p.schema {
            o.schema = s.clone();
        }
        if let Some(n) = p.pool_size {
            o.pool_size = n;
        }
        if let Some(n) = p.flushes_in_flight {
            o.flushes_in_flight = n;
        }
        if let Some(l) = p.lease {
            o.lease = l;
        }
        o.synchronous_commit = match p.synchronous_commit {
            SynchronousCommit::Off => SyncCommit::Off,
            SynchronousCommit::Local => SyncCommit::Local,
            SynchronousCommit::RemoteWrite => SyncCommit::RemoteWrite,
            SynchronousCommit::On => SyncCommit::On,
            SynchronousCommit::RemoteApply => SyncCommit::RemoteApply,
        };
        o.owner.clone_from(&p.owner);
        o
    }

    #[cfg(feature = "rocksdb")]
    fn rocksdb_options(&self) -> fusee_storage_rocksdb::RocksOptions {
        let mut o = fusee_storage_rocksdb::RocksOptions::default();
        o.create = self.create;
        let r = &self.rocksdb;
        if let Some(v) = r.write_buffer {
            o.write_buffer = v;
        }
        if let Some(v) = r.db_write_buffer {
            o.db_write_buffer = v;
        }
        if let Some(v) = r.max_total_wal {
            o.max_total_wal = v;
        }
        if let Some(v) = r.background_jobs {
            o.background_jobs = v;
        }
        o
    }
}

/// Why [`open_storage`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The backend's Cargo feature is off in this build.
    #[error(
        "the {backend} storage backend is not compiled in: enable the \"{feature}\" feature of fusee"
    )]
    FeatureDisabled {
        /// The backend asked for.
        backend: Backend,
        /// The feature of the `fusee` crate that compiles it in.
        feature: &'static str,
    },
    /// The backend failed to open the storage.
    #[error("opening the {backend} storage{}: {error}", in_dir(dir))]
    Storage {
        /// The backend.
        backend: Backend,
        /// The directory given (empty for a backend without one,
        /// PostgreSQL, whose error names its server instead).
        dir: PathBuf,
        /// The backend's error.
        error: StorageError,
    },
}

/// ` in DIR` for an error's message, or nothing for a backend without a
/// directory (PostgreSQL: its errors name the server and schema).
fn in_dir(dir: &std::path::Path) -> String {
    if dir.as_os_str().is_empty() {
        String::new()
    } else {
        format!(" in {}", dir.display())
    }
}

/// Opens the storage `config` names. A backend whose feature is off is
/// [`OpenError::FeatureDisabled`] naming the feature; the backend's own
/// failure (a locked or foreign database, an I/O error) is
/// [`OpenError::Storage`] with the directory.
pub fn open_storage(config: &StorageConfig) -> Result<AnyStorage, OpenError> {
    let backend = config.backend;
    if !backend.compiled_in() {
        return Err(OpenError::FeatureDisabled {
            backend,
            feature: backend.name(),
        });
    }
    #[allow(unused_variables)] // used only by backends compiled in
    let wrap = |error: StorageError| OpenError::Storage {
        backend,
        dir: config.dir.clone(),
        error,
    };
    match backend {
        Backend::Memory => Ok(AnyStorage::Memory(MemoryStorage::new())),
        #[cfg(feature = "file")]
        Backend::File => fusee_storage_file::FileStorage::open(&config.dir, config.file_options())
            .map(AnyStorage::File)
            .map_err(wrap),
        #[cfg(feature = "rocksdb")]
        Backend::Rocksdb => {
            let options = config.rocksdb_options();
            fusee_storage_rocksdb::RocksStorage::open_with(&config.dir, &options)
                .map(AnyStorage::Rocksdb)
                .map_err(wrap)
        }
        #[cfg(feature = "redb")]
        Backend::Redb => {
            let options = config.redb_options();
            fusee_storage_redb::RedbStorage::open_with(&config.dir, &options)
                .map(AnyStorage::Redb)
                .map_err(wrap)
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => fusee_storage_postgres::PgStorage::open(&config.postgres_options())
            .map(AnyStorage::Postgres)
            .map_err(wrap),
        // Backends not compiled in were refused above.
        #[allow(unreachable_patterns)] // every backend compiled in
        _ => Err(OpenError::FeatureDisabled {
            backend,
            feature: backend.name(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for b in Backend::ALL {
            assert_eq!(b.name().parse::<Backend>().ok(), Some(b));
            assert_eq!(
                b.to_string().to_uppercase().parse::<Backend>().ok(),
                Some(b)
            );
        }
        assert!("sqlite".parse::<Backend>().is_err());
    }

    /// Every backend either opens, or says why, naming the feature when it
    /// is off.
    #[test]
    fn every_backend_opens_or_names_its_feature() {
        let dir = std::env::temp_dir().join(format!("fusee-config-test-{}", std::process::id()));
        for b in Backend::ALL {
            let r = open_storage(&StorageConfig::new(b, dir.join(b.name())));
            match r {
                Ok(s) => {
                    assert!(b.compiled_in());
                    assert_eq!(s.backend(), b);
                }
                Err(OpenError::FeatureDisabled { backend, feature }) => {
                    assert!(!b.compiled_in() && backend == b && feature == b.name());
                    let msg = OpenError::FeatureDisabled { backend, feature }.to_string();
                    assert!(msg.contains(&format!("enable the \"{feature}\" feature of fusee")));
                }
                // No server at the default URL in this test: opening it is
                // an error of the backend's, not a panic.
                Err(OpenError::Storage {
                    backend: Backend::Postgres,
                    ..
                }) => assert!(b == Backend::Postgres && b.compiled_in()),
                Err(e) => panic!("{b}: {e}"),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A PostgreSQL open that fails names the server, not an empty
    /// directory (the backend has none).
    #[cfg(feature = "postgres")]
    #[test]
    fn a_failed_postgres_open_names_its_server() {
        // Nothing listens on port 1: the connection is refused at once.
        let config = StorageConfig::postgres("postgresql://fusee@127.0.0.1:1/app");
        match open_storage(&config) {
            Err(e @ OpenError::Storage { .. }) => {
                let text = e.to_string();
                assert!(
                    text.starts_with(
                        "opening the postgres storage: I/O error while connecting on postgresql://fusee@127.0.0.1:1/app schema fusee: "
                    ),
                    "{text}"
                );
            }
            other => panic!(
                "opening a server that is not there: {:?}",
                other.map(|_| ())
            ),
        }
    }

    /// The PostgreSQL backend opens from its settings (`dir` unused) on the
    /// server `FUSEE_PG_URL` names; without one (outside CI) it is skipped.
    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_opens_from_its_settings() {
        use fusee_storage::{LogStore, Storage};
        let Some(url) = std::env::var("FUSEE_PG_URL").ok().filter(|u| !u.is_empty()) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "FUSEE_PG_URL unset under CI"
            );
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED postgres_opens_from_its_settings: FUSEE_PG_URL unset"
            );
            return;
        };
        let config = StorageConfig::postgres(url)
            .postgres_schema("fusee_config_test")
            .postgres_lease(std::time::Duration::from_secs(2))
            .postgres_synchronous_commit(SynchronousCommit::Local);
        let s = open_storage(&config).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.backend(), Backend::Postgres);
        let mut p = s.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
        // The schema is kept between runs: the log goes on where it was.
        let next = p.log.last_lsn() + 1;
        p.log
            .append(next, b"record")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.log.flush().ok(), Some(next));
        drop(p);
        s.close().unwrap_or_else(|e| panic!("{e}"));
    }
}
