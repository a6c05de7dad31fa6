//! [`PgOptions`]: where the storage lives and what its leases and commits
//! promise.

use std::time::Duration;

use fusee_storage::identity::Create;

/// How far a commit travels before PostgreSQL acknowledges it: the
/// server's `synchronous_commit`, set on every connection the storage
/// opens. A log flush or a checkpoint commit returns once its transaction
/// is acknowledged at this level, so the level is what "durable" means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SyncCommit {
    /// `off`: acknowledged before the server's WAL is flushed. A crash of
    /// the server (not of Fusee) can lose the last few hundred
    /// milliseconds of acknowledged flushes, so the reopened log may miss
    /// records Fusee reported durable: for tests and benchmarks only.
    Off,
    /// `local`: the primary's WAL is flushed to its disk; standbys are not
    /// waited for. Survives a crash of the primary that it restarts from;
    /// a failover to a standby can lose the last acknowledged commits.
    Local,
    /// `remote_write`: the primary's WAL is flushed, and a synchronous
    /// standby has received it and handed it to its operating system (not
    /// flushed). Survives the primary's loss unless the standby's machine
    /// crashes too before its OS writes the WAL out.
    RemoteWrite,
    /// `on` (the default): the primary's WAL is flushed, and so is a
    /// synchronous standby's (as many as `synchronous_standby_names`
    /// requires). Survives the loss of the primary: a promoted synchronous
    /// standby holds every acknowledged commit. Without synchronous
    /// standbys configured it is the same as `local`.
    #[default]
    On,
    /// `remote_apply`: as `on`, and the standbys have applied the commit,
    /// so a read on a standby sees it. Costs the apply delay on every
    /// flush; durability is the same as `on`.
    RemoteApply,
}

impl SyncCommit {
    /// The setting's value as PostgreSQL spells it.
    pub fn as_sql(self) -> &'static str {
        match self {
            SyncCommit::Off => "off",
            SyncCommit::Local => "local",
            SyncCommit::RemoteWrite => "remote_write",
            SyncCommit::On => "on",
            SyncCommit::RemoteApply => "remote_apply",
        }
    }
}

/// The options of a [`crate::PgStorage`]. Build with
/// [`PgOptions::new`] and set the fields that differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgOptions {
    /// The connection URL (`postgresql://user:password@host:port/database`)
    /// or key-value string (`host=... user=... dbname=...`), as libpq
    /// takes them. No TLS: the backend connects without it, so reach the
    /// server over loopback or a private network. Default
    /// `postgresql://postgres@localhost/postgres`.
    pub url: String,
    /// The schema holding the store's tables, created with them when
    /// missing (`create`): one schema is one store, so several stores can
    /// share a database. Lowercase ASCII letters, digits and `_`, starting
    /// with a letter or `_`, at most 63 bytes. Default `fusee`.
    pub schema: String,
    /// Connections kept open between shard opens for reuse (default 8).
    /// An open shard holds `1 + flushes_in_flight` connections (one for
    /// its reads, run store and commits, one per log flush in flight, so
    /// flushes overlap the shard's other work and each other), one more
    /// once its inbox is used ([`crate::PgInbox`], as the engine does), and
    /// the storage one more for renewing leases and one listening for
    /// inbox notifications: size the server's `max_connections` for
    /// `(2 + flushes_in_flight) × shards + 2` per process (`4 × shards + 2`
    /// by default), plus this pool.
    pub pool_size: usize,
    /// How many log flushes of one shard may be in flight at once, each
    /// on a connection of its own (default 2, at most
    /// [`FLUSHES_IN_FLIGHT_MAX`]): the second flush's statement runs while
    /// the first waits for its commit, so a shard under load flushes more
    /// records per second (measured in DEPLOYMENT.md, "What a flush
    /// costs"). The log reports flushes durable in the order they began
    /// whatever order the server commits them in, and an open deletes a
    /// flush that overtook one that never committed (the crate
    /// documentation says how). 1 keeps one connection per shard for
    /// flushes and one flush at a time.
    pub flushes_in_flight: usize,
    /// How long a shard's lease lives without renewal (default 10 s). The
    /// owner renews every third of it; another process can take the shard
    /// once it lapses. It bounds how long a shard stays unowned after its
    /// owner dies (see DEPLOYMENT.md), and how long a live owner may go
    /// without reaching the server before it loses its shards. Judged by
    /// the server's clock (`now()`), never by the processes'.
    pub lease: Duration,
    /// How far a commit travels before it is acknowledged (default
    /// [`SyncCommit::On`]).
    pub synchronous_commit: SyncCommit,
    /// This process's name as a lease holder (default: host name, process
    /// id and a random suffix, new for every open). A storage opened under
    /// the name that holds a shard's live lease takes the shard at once
    /// instead of waiting for the lease to lapse: give a restarted process
    /// its predecessor's name and it recovers its shards without waiting.
    /// Two live processes must never share a name; if they do, each open
    /// still fences the other's writes (the epoch moves), but they take
    /// shards from each other without waiting.
    pub owner: Option<String>,
    /// Whether a missing schema is created (the default) or is
    /// [`fusee_storage::StorageError::NotFound`].
    pub create: Create,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self::new(DEFAULT_URL)
    }
}

/// The most [`PgOptions::flushes_in_flight`] allows: a third flush in
/// flight measured no faster than two on the machines DEPLOYMENT.md
/// describes, and each costs a connection per shard.
pub const FLUSHES_IN_FLIGHT_MAX: usize = 4;

/// The URL [`PgOptions::default`] connects to.
pub const DEFAULT_URL: &str = "postgresql://postgres@localhost/postgres";

impl PgOptions {
    /// The options for the server at `url`, every other field by default.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: "fusee".to_owned(),
            pool_size: 8,
            flushes_in_flight: 2,
            lease: Duration::from_secs(10),
            synchronous_commit: SyncCommit::On,
            owner: None,
            create: Create::IfMissing,
        }
    }

    /// The same options with the store in `schema`.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The same options with leases of `lease`.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The same options holding leases as `owner`.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
}
