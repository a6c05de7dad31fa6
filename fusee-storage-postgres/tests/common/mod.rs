//! What the PostgreSQL tests share: the servers `scripts/postgres.sh`
//! started (named by environment variables), a fresh schema per storage,
//! and the skip when no server is named.

#![allow(dead_code, unreachable_pub)] // each test file uses a part

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fusee_storage_postgres::PgOptions;
use postgres::{Client, NoTls};

/// The main primary (`FUSEE_PG_URL`).
pub fn url() -> String {
    std::env::var("FUSEE_PG_URL").unwrap_or_default()
}

/// A space-separated list from the environment.
pub fn urls(var: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// A schema name no other test (in this process or another) uses.
pub fn unique_schema(what: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!(
        "t_{what}_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos % 1_000_000_007
    )
}

/// Options for tests: `schema` on `url`, short leases (takeovers wait for
/// them), a small pool.
pub fn options(url: &str, schema: &str, owner: &str) -> PgOptions {
    let mut o = PgOptions::new(url)
        .schema(schema)
        .lease(Duration::from_secs(2))
        .owner(owner);
    o.pool_size = 2;
    o
}

/// A superuser connection for the tests' own statements.
pub fn admin(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

/// Drops `schema` and everything in it (best effort: a test's leftovers
/// only cost space on a throwaway server).
pub fn drop_schema(url: &str, schema: &str) {
    if let Ok(mut c) = Client::connect(url, NoTls) {
        let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
    }
}

/// The test a file compiles to without a server: prints SKIPPED, counted
/// as skipped, and fails under CI, where scripts/postgres.sh must have
/// named one.
pub fn skipped_without_server(what: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{what}: FUSEE_PG_URL is unset under CI: .ci/run must source scripts/postgres.sh"
    );
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {what}: no PostgreSQL server (FUSEE_PG_URL unset; `source scripts/postgres.sh` starts one)"
    );
}
