//! What an operator meets (issue 36): a shard another process holds is
//! refused naming its holder and when its lease ends, and a shard reopened
//! after the server restarted does not fail on a connection the old
//! server process held (the pool is checked).
//!
//! Without `FUSEE_PG_URL` (outside CI) the file compiles to one test that
//! prints SKIPPED. The restart test restarts the server alone
//! (`FUSEE_PG_SINGLE_URL`), which no other test of this crate uses.

mod common;

#[cfg(not(fusee_pg))]
#[test]
fn operator_skipped() {
    common::skipped_without_server("operator: 2 tests skipped");
}

#[cfg(fusee_pg)]
mod with_server {
    use std::time::{Duration, Instant};

    use fusee_storage::{LogStore, Storage, StorageError};
    use fusee_storage_postgres::PgStorage;

    use super::common::{
        admin, drop_schema, options, record, skipped_without_server, unique_schema, url,
    };

    #[test]
    fn a_shard_held_elsewhere_names_its_holder_and_when_its_lease_ends() {
        let url = url();
        let schema = unique_schema("held");
        let a = PgStorage::open(&options(&url, &schema, "holder-a")).expect("open a");
        let parts = a.open_shard(4).expect("a takes shard 4");
        let b = PgStorage::open(&options(&url, &schema, "b")).expect("open b");
        let lease = a.lease(4).expect("reading the lease").expect("a lease row");
        assert_eq!(lease.holder, "holder-a");
        assert!(lease.live);
        match b.open_shard(4).map(drop) {
            Err(e @ StorageError::Leased { .. }) => {
                let place = format!(
                    "postgresql://postgres@{}/postgres schema {schema}",
                    url.trim_start_matches("postgresql://postgres@")
                        .trim_end_matches("/postgres")
                );
                assert_eq!(
                    e.to_string(),
                    format!(
                        "shard 4 of {place} is leased by \"holder-a\" until {}: another process holds it (or held it and stopped); it can be taken here once that lease lapses or is released",
                        lease.until
                    )
                );
            }
            other => panic!("b opening a's shard: expected Leased, found {other:?}"),
        }
        drop(parts);
        drop_schema(&url, &schema);
    }

    /// Restarts the server `url` names as a crash restarts it: a backend
    /// killed with SIGKILL (by the server's own user, through `COPY TO
    /// PROGRAM`) makes the postmaster end every session and start again.
    /// Returns once it accepts connections.
    fn crash_restart(url: &str) {
        let mut c = admin(url);
        let pid: i32 = c
            .query_one("SELECT pg_backend_pid()", &[])
            .and_then(|r| r.try_get(0))
            .expect("a backend pid");
        // The statement's own backend dies: its error is expected.
        let _ = c.batch_execute(&format!("COPY (SELECT 1) TO PROGRAM 'kill -9 {pid}'"));
        drop(c);
        let began = Instant::now();
        // Down first (the postmaster ends every session), then up again.
        std::thread::sleep(Duration::from_millis(200));
        loop {
            if let Ok(mut c) = postgres::Client::connect(url, postgres::NoTls)
                && c.batch_execute("SELECT 1").is_ok()
            {
                return;
            }
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "{url} did not come back after the crash restart"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    #[test]
    fn a_shard_reopened_after_a_server_restart_takes_no_dead_connection() {
        let single = std::env::var("FUSEE_PG_SINGLE_URL").unwrap_or_default();
        if single.is_empty() {
            skipped_without_server("pooled connections after a restart (FUSEE_PG_SINGLE_URL)");
            return;
        }
        let schema = unique_schema("restart");
        let mut o = options(&single, &schema, "restarted");
        o.pool_size = 8;
        let s = PgStorage::open(&o).expect("open");
        {
            let mut p = s.open_shard(0).expect("open shard 0");
            p.log.append(1, &record(1)).expect("append");
            assert_eq!(p.log.flush().expect("flush"), 1);
        }
        // Its connections (main, flushers) went back to the pool.
        crash_restart(&single);
        let mut p = s
            .open_shard(0)
            .expect("reopening shard 0 after the restart");
        assert_eq!(p.log.last_lsn(), 1);
        for lsn in 2..=4 {
            p.log.append(lsn, &record(lsn)).expect("append");
            assert_eq!(
                p.log.flush().expect("the first flushes after the restart"),
                lsn
            );
        }
        drop(p);
        drop(s);
        drop_schema(&single, &schema);
    }
}
