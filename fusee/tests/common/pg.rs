//! The PostgreSQL server of the crate's integration tests, included by
//! path (`#[path = "common/pg.rs"]`) by the tests that need one alone.

/// The server `scripts/postgres.sh` started (`FUSEE_PG_URL`); `None`,
/// with a SKIPPED line, outside CI when none is set (under CI a missing
/// server fails: `.ci/run` starts one).
pub(crate) fn pg_url_or_skip() -> Option<String> {
    let url = std::env::var("FUSEE_PG_URL").unwrap_or_default();
    if url.is_empty() {
        assert!(
            std::env::var_os("CI").is_none(),
            "FUSEE_PG_URL is unset under CI: .ci/run must source scripts/postgres.sh"
        );
        eprintln!("SKIPPED: no PostgreSQL server (FUSEE_PG_URL unset)");
        return None;
    }
    Some(url)
}

/// Runs `sql` on the server `url` names with `psql`, failing the test with
/// its error text if the statement fails.
pub(crate) fn psql(url: &str, sql: &str) {
    let out = std::process::Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
