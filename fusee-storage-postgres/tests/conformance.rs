//! The whole conformance suite, and the lease clauses, against a real
//! PostgreSQL: the primary `FUSEE_PG_URL` names (with two synchronous
//! standbys under `scripts/postgres.sh`), each storage in a fresh schema;
//! failover on the separate cluster `FUSEE_PG_FAILOVER_URL` names.
//!
//! Without `FUSEE_PG_URL` (outside CI) the file compiles to one test that
//! prints SKIPPED.

mod common;

#[cfg(not(fusee_pg))]
#[test]
fn conformance_skipped() {
    common::skipped_without_server(&format!(
        "conformance: {n} of {n} clauses skipped for postgres",
        n = fusee_storage::conformance::CLAUSES.len()
    ));
}

#[cfg(fusee_pg)]
mod harness {
    use std::path::Path;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    use fusee_storage::conformance::{Capabilities, Harness, LeaseChecks};
    use fusee_storage::{Result, Storage};
    use fusee_storage_kv::COMMIT_CRASH_POINTS;
    use fusee_storage_postgres::PgStorage;

    use super::common::{admin, drop_schema, options, unique_schema, url, urls};

    /// A harness whose storages live in one fresh schema of the main
    /// primary (or, after `open_replicated`, of the failover cluster's).
    pub(crate) struct PgHarness {
        url: String,
        schema: String,
        owner: String,
        others: AtomicU32,
        /// Schemas to drop at the end, with their servers.
        made: Vec<(String, String)>,
    }

    impl PgHarness {
        pub(crate) fn new() -> Self {
            let schema = unique_schema("c");
            Self {
                url: url(),
                owner: format!("owner-{schema}"),
                schema,
                others: AtomicU32::new(0),
                made: Vec::new(),
            }
        }

        fn open_as(&mut self, owner: &str) -> Result<PgStorage> {
            let made = (self.url.clone(), self.schema.clone());
            if !self.made.contains(&made) {
                self.made.push(made);
            }
            PgStorage::open(&options(&self.url, &self.schema, owner))
        }

        fn must_open(&mut self) -> PgStorage {
            let owner = self.owner.clone();
            self.open_as(&owner)
                .unwrap_or_else(|e| panic!("opening {}: {e}", self.schema))
        }
    }

    impl Drop for PgHarness {
        fn drop(&mut self) {
            for (url, schema) in &self.made {
                drop_schema(url, schema);
            }
        }
    }

    /// The first line of the server's `postmaster.pid`: the postmaster.
    fn postmaster_pid(url: &str) -> String {
        let pidfile: String = admin(url)
            .query_one("SELECT pg_read_file('postmaster.pid')", &[])
            .and_then(|r| r.try_get(0))
            .unwrap_or_else(|e| panic!("reading postmaster.pid of {url}: {e}"));
        pidfile.lines().next().unwrap_or("").trim().to_owned()
    }

    /// The WAL position a standby has received (as a number).
    fn received(url: &str) -> Option<u64> {
        let mut c = postgres::Client::connect(url, postgres::NoTls).ok()?;
        let lsn: String = c
            .query_one("SELECT pg_last_wal_receive_lsn()::text", &[])
            .and_then(|r| r.try_get(0))
            .ok()?;
        let (hi, lo) = lsn.split_once('/')?;
        Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
    }

    impl Harness for PgHarness {
        type S = PgStorage;

        fn capabilities(&self) -> Capabilities {
            Capabilities {
                fault_injection: true,
                // A crash here is the process's, not the server's: the
                // server keeps every acknowledged commit (the failover
                // clause covers losing the server).
                power_loss: false,
                commit_crash_points: COMMIT_CRASH_POINTS,
                // Two flushes in flight by default, on two connections.
                overlapping_flushes: true,
            }
        }

        fn open(&mut self) -> PgStorage {
            // Fresh and empty: a new schema, whatever the last one holds.
            self.schema = unique_schema("c");
            self.must_open()
        }

        fn reopen(&mut self, s: PgStorage) -> PgStorage {
            s.close().unwrap_or_else(|e| panic!("close: {e}"));
            drop(s);
            self.must_open()
        }

        fn crash(&mut self, s: PgStorage) -> PgStorage {
            // The process dies (leases left live); its successor under the
            // same owner name takes its shards back at once.
            s.kill();
            drop(s);
            self.must_open()
        }

        fn fail_next_flush(&mut self, s: &PgStorage, shard: u32) {
            s.faults().arm_flush(shard);
        }

        fn fail_next_commit(&mut self, s: &PgStorage, shard: u32) {
            s.faults().arm_commit(shard);
        }

        fn crash_in_commit(&mut self, s: &PgStorage, shard: u32, step: u32) {
            s.faults().arm_crash(shard, step);
        }

        fn lease_checks(&self) -> LeaseChecks {
            LeaseChecks {
                leases: true,
                connection_kill: true,
                failover: std::env::var_os("FUSEE_PG_FAILOVER_URL").is_some(),
            }
        }

        fn open_other_owner(&mut self) -> Result<PgStorage> {
            let n = self.others.fetch_add(1, Ordering::Relaxed);
            let owner = format!("{}-other-{n}", self.owner);
            self.open_as(&owner)
        }

        fn lease_time(&self) -> Duration {
            Duration::from_secs(2)
        }

        fn pause_renewal(&mut self, s: &PgStorage) {
            s.pause_renewal(true);
        }

        fn die(&mut self, s: PgStorage) {
            s.kill();
        }

        fn kill_connection_during(
            &mut self,
            s: &PgStorage,
            shard: u32,
            flush: &mut dyn FnMut() -> bool,
        ) -> bool {
            // The flush runs on one of the shard's flusher connections:
            // the one found waiting is killed.
            let pids = s
                .server_pids(shard)
                .unwrap_or_else(|| panic!("shard {shard} is not open"))
                .flushers;
            // Hold the shard's row so the flush's statement waits on it:
            // the kill then lands while the statement runs.
            let mut locker = admin(&self.url);
            let mut tx = locker.transaction().unwrap_or_else(|e| panic!("{e}"));
            tx.execute(
                &format!(
                    "SELECT 1 FROM \"{}\".shards WHERE shard = $1 FOR UPDATE",
                    self.schema
                ),
                &[&i64::from(shard)],
            )
            .unwrap_or_else(|e| panic!("locking the shard row: {e}"));
            let url = self.url.clone();
            let ok = std::thread::scope(|scope| {
                let killer = scope.spawn(move || {
                    let mut c = admin(&url);
                    let start = Instant::now();
                    while start.elapsed() < Duration::from_secs(30) {
                        let waiting: Option<i32> = c
                            .query_opt(
                                "SELECT pid FROM pg_stat_activity
                                 WHERE pid = ANY($1) AND wait_event_type = 'Lock'",
                                &[&pids],
                            )
                            .ok()
                            .flatten()
                            .and_then(|r| r.try_get(0).ok());
                        if let Some(pid) = waiting {
                            let _ = c.execute("SELECT pg_terminate_backend($1)", &[&pid]);
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    // Never seen waiting: kill them all rather than leave
                    // the flush waiting on the lock this thread's caller
                    // holds.
                    for pid in &pids {
                        let _ = c.execute("SELECT pg_terminate_backend($1)", &[pid]);
                    }
                });
                let ok = flush();
                let _ = killer.join();
                ok
            });
            let _ = tx.rollback();
            ok
        }

        fn open_replicated(&mut self) -> PgStorage {
            self.url = std::env::var("FUSEE_PG_FAILOVER_URL").unwrap_or_default();
            self.schema = unique_schema("f");
            self.must_open()
        }

        fn failover(&mut self, s: PgStorage) -> PgStorage {
            let pid = postmaster_pid(&self.url);
            s.kill();
            drop(s);
            // SIGQUIT: PostgreSQL's immediate shutdown, no checkpoint (the
            // server comes back, if ever, through crash recovery).
            let status = std::process::Command::new("kill")
                .args(["-QUIT", &pid])
                .status()
                .unwrap_or_else(|e| panic!("kill -QUIT {pid}: {e}"));
            assert!(status.success(), "kill -QUIT {pid}: {status}");
            let start = Instant::now();
            while postgres::Client::connect(&self.url, postgres::NoTls).is_ok() {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "the primary did not stop"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            // Promote the standby that received the most WAL: with
            // `ANY 1 (s1, s2)` only one of them is known to hold the last
            // acknowledged commit.
            let standbys = urls("FUSEE_PG_FAILOVER_STANDBY_URLS");
            let best = standbys
                .iter()
                .filter_map(|u| received(u).map(|lsn| (lsn, u.clone())))
                .max()
                .map(|(_, u)| u)
                .unwrap_or_else(|| panic!("no standby answers among {standbys:?}"));
            let promoted: bool = admin(&best)
                .query_one("SELECT pg_promote(true, 60)", &[])
                .and_then(|r| r.try_get(0))
                .unwrap_or_else(|e| panic!("promoting {best}: {e}"));
            assert!(promoted, "{best} was not promoted within 60 s");
            self.url = best;
            self.must_open()
        }

        // No lock clauses: a PostgreSQL store is meant to be opened by many
        // processes at once; ownership is per shard, by lease (the lease
        // clauses above).
        fn open_at(&mut self, path: &Path) -> Result<PgStorage> {
            let _ = path;
            unreachable!("no LockChecks declared")
        }
    }
}

#[cfg(fusee_pg)]
use harness::PgHarness;

#[cfg(fusee_pg)]
fusee_storage::conformance_suite!(postgres, PgHarness::new);
