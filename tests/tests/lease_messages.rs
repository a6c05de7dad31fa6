//! Messages between engine processes, through the PostgreSQL inbox table:
//! exactly once into every journal, across kills of either side and with
//! every message delivered more than once.
//!
//! Two `inbox-child` processes share one store of four shards under
//! leases: `a` owns shard 0, where the parents run, `b` shards 1 to 3,
//! where their kids run (see `fusee_tests::inbox`). Every parent's family
//! sends each kind of message both ways between the processes: child
//! starts, a signal each way, a cancel, and the kids' results. A trigger the
//! test adds keeps a copy of every inbox row ever written. Each run waits
//! a while after the signals it expects for one more, so a duplicate
//! recorded in its journal changes its family's result (a duplicate
//! child's result stops the parent; a duplicate child start fails the
//! child). Phases:
//!
//! 1. **clean**: a family runs to its end.
//! 2. **kills**: a family while `b`, then `a`, is SIGKILLed at a random
//!    moment and started again (`FUSEE_SEED` picks the moments): a kill
//!    may land between a row's insert and its sender's acknowledgement,
//!    between a record and its row's delete, or elsewhere.
//! 3. **windows**: kills inside both windows, for sure: with the inbox's
//!    deletes held by a trigger and checkpoints only at close (a sender's
//!    acknowledgement becomes durable only in a checkpoint), once the
//!    kids' hellos are posted both processes are SIGKILLed: `b` between
//!    the record of each child start and its row's delete, `a` between
//!    each child start's insert and a durable acknowledgement (checked: it
//!    posts them again).
//! 4. **resent**: the states those crashes leave, made deterministic for
//!    every hop of a family: with the target process killed, the test
//!    waits for the hop's rows (the child starts, then the hellos, then the
//!    finishes and the cancel, then the results), writes each again, and
//!    starts the target, killing the other side meanwhile. Two rows of one
//!    message are what a sender's crash between its insert and its
//!    acknowledgement leaves (it posts the message again), and what a
//!    target's crash between its record and the row's delete leaves (it
//!    reads the row again).
//! 5. **not deleted**: every row ever written is written again, and both
//!    processes take them (every message of every phase, to runs that
//!    finished); before them, two rows under a shard that is not their
//!    message's target (as a sender with another shard count would write
//!    them), which neither process may take: they stay in the table.
//!
//! Between phases 4 and 5 a loner's only kid has an ID already taken on
//! `b`: the refusal goes back to `a` as a failed result, and the start's
//! row is deleted only once that reply's row is durable (a reply relayed
//! across processes).
//!
//! Checked: every parent returns what its family must (each kid finished
//! once, the victim cancelled, no second hello), every run finished as it
//! must, and the inbox is empty at the end
//! (every row deleted once recorded). Needs the server `scripts/postgres.sh`
//! starts (`FUSEE_PG_URL`); without it the test prints SKIPPED, and fails
//! under `CI`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child as Process, ChildStdin, Command as Spawn, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use fusee_core::shard::shard_of;
use fusee_tests::env_u64;
use fusee_tests::inbox::{A_SHARDS, SHARDS, expected};
use postgres::{Client, NoTls};

/// The children's lease.
const LEASE: Duration = Duration::from_secs(2);
/// The longest anything may take: only a hang trips it.
const PATIENCE: Duration = Duration::from_secs(60);
/// Kids per family.
const KIDS: usize = 3;

/// One `inbox-child` process.
struct Child {
    role: &'static str,
    process: Process,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Lines read and not yet matched.
    seen: Vec<String>,
}

impl Drop for Child {
    fn drop(&mut self) {
        // Never leave a child holding leases.
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Child {
    /// Starts child `role`, checkpointing `often` or `never` (see the
    /// child's docs).
    fn spawn(url: &str, schema: &str, role: &'static str, checkpoints: &str) -> Child {
        let mut process = Spawn::new(env!("CARGO_BIN_EXE_inbox-child"))
            .arg(url)
            .arg(schema)
            .arg(role)
            .arg(LEASE.as_millis().to_string())
            .arg(checkpoints)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn inbox-child");
        let stdout = process.stdout.take().expect("piped stdout");
        let stdin = process.stdin.take();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut child = Child {
            role,
            process,
            stdin,
            lines,
            seen: Vec::new(),
        };
        child.expect("opened");
        child
    }

    fn tell(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("the child's stdin");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("telling {} {line:?}: {e}", self.role));
    }

    /// The first line starting with `prefix` (waiting for it); an `error`
    /// line fails the test.
    fn expect(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(i) = self.seen.iter().position(|l| l.starts_with(prefix)) {
                return self.seen.remove(i);
            }
            if let Some(e) = self.seen.iter().find(|l| l.starts_with("error")) {
                panic!("child {} reported {e:?}", self.role);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "child {} never said {prefix:?} (it said {:?})",
                        self.role, self.seen
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("child {} ended before saying {prefix:?}", self.role)
                }
            }
        }
    }

    /// Kills the child as a crash would.
    fn kill(mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }

    /// Closes the engine and waits for the process.
    fn close(mut self) {
        self.tell("close");
        self.expect("closed");
        self.stdin = None;
        let _ = self.process.wait();
    }

    /// Run `id`'s status and journal record count.
    fn describe(&mut self, id: &str) -> (String, u64) {
        self.tell(&format!("describe {id}"));
        let line = self.expect(&format!("described {id} "));
        let mut words = line.split_whitespace().skip(2);
        let status = words.next().unwrap_or_default().to_owned();
        let records = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        (status, records)
    }
}

/// A workflow ID starting with `prefix` on a shard `on` accepts.
fn id_on(prefix: &str, on: impl Fn(u32) -> bool) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|id| on(shard_of(id, SHARDS)))
        .unwrap_or_default()
}

/// A family: the parent's ID (on `a`'s shards) and its kids' (on `b`'s).
struct Family {
    parent: String,
    kids: Vec<String>,
}

impl Family {
    fn new(name: &str) -> Family {
        Family {
            parent: id_on(&format!("{name}-parent"), |s| A_SHARDS.contains(&s)),
            kids: (0..KIDS)
                .map(|k| id_on(&format!("{name}-kid{k}"), |s| !A_SHARDS.contains(&s)))
                .collect(),
        }
    }

    fn command(&self) -> String {
        format!("parent {} {}", self.parent, self.kids.join(" "))
    }

    /// Waits for the parent's result from `a` and checks it.
    fn check_result(&self, a: &mut Child) {
        let line = a.expect(&format!("result {} ", self.parent));
        let got = line
            .split_once(' ')
            .and_then(|(_, rest)| rest.split_once(' '))
            .map_or("", |(_, lines)| lines);
        assert_eq!(
            got,
            expected(&self.kids).join("|"),
            "parent {}'s result",
            self.parent
        );
    }
}

/// Checks every run of `family` finished as it must: the parent and
/// its kids successfully, its victim cancelled.
fn check_statuses(family: &Family, a: &mut Child, b: &mut Child, phase: &str) {
    let (status, _) = a.describe(&family.parent);
    assert_eq!(status, "Finished(Ok)", "{phase}: parent {}", family.parent);
    for (i, kid) in family.kids.iter().enumerate() {
        let (status, _) = b.describe(kid);
        let want = if i == 0 {
            "Finished(Cancelled)"
        } else {
            "Finished(Ok)"
        };
        assert_eq!(status, want, "{phase}: kid {kid}");
    }
}

/// The test's own statements on the store.
struct Store {
    client: Client,
    schema: String,
}

impl Store {
    fn count(&mut self, filter: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM \"{}\".inbox {filter}", self.schema);
        self.client
            .query_one(sql.as_str(), &[])
            .and_then(|r| r.try_get(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Rows of the copy of every row ever written that `filter` matches.
    fn count_copies(&mut self, filter: &str) -> i64 {
        let sql = format!(
            "SELECT count(*) FROM \"{}\".inbox_copy {filter}",
            self.schema
        );
        self.client
            .query_one(sql.as_str(), &[])
            .and_then(|r| r.try_get(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    fn execute(&mut self, sql: &str) {
        let sql = sql.replace("{s}", &format!("\"{}\"", self.schema));
        self.client
            .batch_execute(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Writes every inbox row `filter` matches again, in order: the state
    /// a crash leaves between a row's insert and its sender's
    /// acknowledgement (the message is posted again), or between the
    /// record of its message and the row's delete (it is read again).
    fn double(&mut self, filter: &str) {
        self.execute(&format!(
            "INSERT INTO {{s}}.inbox (shard, sender, value)
             SELECT shard, sender, value FROM {{s}}.inbox {filter} ORDER BY id"
        ));
    }

    /// Waits until `filter` matches at least `n` inbox rows.
    fn wait_rows(&mut self, filter: &str, n: i64) {
        let deadline = Instant::now() + PATIENCE;
        while self.count(filter) < n {
            assert!(
                Instant::now() < deadline,
                "{n} inbox rows {filter} never came"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until the inbox is empty.
    fn wait_empty(&mut self) {
        self.wait_none("");
    }

    /// Waits until `filter` matches no inbox row.
    fn wait_none(&mut self, filter: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = self.count(filter);
            if left == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{left} inbox rows {filter} are never deleted"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Writes two messages under a shard that is not their target, as a
    /// sender with another shard count would (each under a valid CRC for
    /// the shard it is under, so only the check of the message's target
    /// refuses it): one for a shard of `b` under `a`'s shard 0, one for
    /// shard 0 under a shard of `b` that other rows are written to.
    /// Returns their row IDs.
    fn misroute(&mut self) -> Vec<i64> {
        // CRC-32 (IEEE, as the inbox's values carry it, little-endian),
        // checked against every row written so far.
        self.execute(
            "CREATE FUNCTION {s}.crc32(b bytea) RETURNS bytea LANGUAGE plpgsql AS $$
             DECLARE c int8 := 4294967295;
             BEGIN
                 FOR i IN 0 .. length(b) - 1 LOOP
                     c := c # get_byte(b, i);
                     FOR k IN 1 .. 8 LOOP
                         IF c & 1 = 1 THEN c := (c >> 1) # 3988292384; ELSE c := c >> 1; END IF;
                     END LOOP;
                 END LOOP;
                 c := c # 4294967295;
                 RETURN set_byte(set_byte(set_byte(set_byte('\\x00000000'::bytea,
                     0, (c & 255)::int), 1, (c >> 8 & 255)::int),
                     2, (c >> 16 & 255)::int), 3, (c >> 24 & 255)::int);
             END $$;
             CREATE FUNCTION {s}.under(shard int8, value bytea) RETURNS bytea LANGUAGE sql AS $$
                 SELECT {s}.crc32('inbox'::bytea || int4send(shard::int4) || substr(value, 5))
                     || substr(value, 5) $$;",
        );
        let wrong = self.count_copies(&format!(
            "WHERE value <> \"{}\".under(shard, value)",
            self.schema
        ));
        assert_eq!(wrong, 0, "the test's CRC-32 disagrees with the inbox's");
        let sql = format!(
            "INSERT INTO {s}.inbox (shard, sender, value)
             (SELECT 0, sender, {s}.under(0, value) FROM {s}.inbox_copy WHERE shard <> 0 LIMIT 1)
             UNION ALL
             (SELECT o.shard, sender, {s}.under(o.shard, value)
              FROM {s}.inbox_copy, (SELECT shard FROM {s}.inbox_copy WHERE shard <> 0 LIMIT 1) o
              WHERE inbox_copy.shard = 0 LIMIT 1)
             RETURNING id",
            s = format_args!("\"{}\"", self.schema)
        );
        let rows = self
            .client
            .query(sql.as_str(), &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        rows.iter()
            .map(|r| r.try_get(0).unwrap_or_else(|e| panic!("{sql}: {e}")))
            .collect()
    }
}

/// A schema no other test uses.
fn unique_schema() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("t_inbox_{}_{}", std::process::id(), nanos % 1_000_000_007)
}

#[test]
fn messages_between_processes_are_recorded_exactly_once() {
    let Some(url) = fusee_tests::pg_url_or_skip("lease messages") else {
        return;
    };
    let seed = env_u64("FUSEE_SEED", fastrand::u64(..));
    eprintln!("lease_messages: FUSEE_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let schema = unique_schema();
    let began = Instant::now();
    let mut a = Child::spawn(&url, &schema, "a", "often");
    let mut b = Child::spawn(&url, &schema, "b", "often");
    let client = Client::connect(&url, NoTls).unwrap_or_else(|e| panic!("connecting: {e}"));
    let mut store = Store {
        client,
        schema: schema.clone(),
    };
    // A copy of every row ever written to the inbox (phase 4).
    store.execute(
        "CREATE TABLE {s}.inbox_copy (shard int8, sender int8, value bytea);
         CREATE FUNCTION {s}.copy_inbox() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO {s}.inbox_copy VALUES (NEW.shard, NEW.sender, NEW.value);
             RETURN NEW;
         END $$;
         CREATE TRIGGER copy AFTER INSERT ON {s}.inbox
             FOR EACH ROW EXECUTE FUNCTION {s}.copy_inbox();",
    );
    let mut families = Vec::new();
    // Rows for a shard of `a` or `b` holding messages with one of `tags`
    // (the message's first byte, after the row's 4-byte CRC: 1 a child
    // start, 2 a child's result, 3 a signal, 5 a cancel).
    let rows = |to_a: bool, tags: &[u8]| {
        format!(
            "WHERE shard {} (ARRAY{A_SHARDS:?}::int8[]) AND get_byte(value, 4) = ANY(ARRAY{tags:?})",
            if to_a { "= ANY" } else { "<> ALL" }
        )
    };

    // 1. clean
    let clean = Family::new("clean");
    let clean_began = Instant::now();
    a.tell(&clean.command());
    clean.check_result(&mut a);
    // For the record (not checked: a loaded machine is slow): a family's
    // dozen hops between the processes, each woken by a notification.
    eprintln!(
        "lease_messages: the clean family took {:.0?}",
        clean_began.elapsed()
    );
    check_statuses(&clean, &mut a, &mut b, "clean");
    families.push(clean);

    // 2. kills at random moments
    let killed = Family::new("killed");
    a.tell(&killed.command());
    std::thread::sleep(Duration::from_millis(rng.u64(0..150)));
    b.kill();
    b = Child::spawn(&url, &schema, "b", "often");
    std::thread::sleep(Duration::from_millis(rng.u64(0..150)));
    a.kill();
    a = Child::spawn(&url, &schema, "a", "often");
    a.tell(&killed.command());
    killed.check_result(&mut a);
    check_statuses(&killed, &mut a, &mut b, "kills");
    families.push(killed);

    // 3. kills inside both windows: deletes held (a trigger refuses
    // them), checkpoints only at close (an acknowledgement is durable only
    // in a checkpoint); once the kids' hellos are posted, `b` recorded the
    // child starts whose rows are still there, and `a` posted those child
    // starts without its acknowledgements being durable: both are killed.
    store.wait_empty();
    a.kill();
    b.kill();
    a = Child::spawn(&url, &schema, "a", "never");
    b = Child::spawn(&url, &schema, "b", "never");
    store.execute(
        "CREATE FUNCTION {s}.no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'the test holds deletes'; END $$;
         CREATE TRIGGER hold BEFORE DELETE ON {s}.inbox
             FOR EACH ROW EXECUTE FUNCTION {s}.no_delete();",
    );
    // Child starts: tag 1, or 6 when they carry their trace context (every
    // child start the engine sends now; see fusee's runtime/messages.rs).
    let starts = rows(false, &[1, 6]);
    let hellos = rows(true, &[3]);
    let posted = store.count_copies(&starts);
    let windows = Family::new("windows");
    a.tell(&windows.command());
    store.wait_rows(&hellos, KIDS as i64);
    assert!(
        store.count(&starts) >= KIDS as i64,
        "the child starts' rows"
    );
    b.kill();
    a.kill();
    store.execute("DROP TRIGGER hold ON {s}.inbox;");
    a = Child::spawn(&url, &schema, "a", "often");
    b = Child::spawn(&url, &schema, "b", "often");
    a.tell(&windows.command());
    windows.check_result(&mut a);
    check_statuses(&windows, &mut a, &mut b, "windows");
    assert!(
        store.count_copies(&starts) - posted >= 2 * KIDS as i64,
        "the killed sender did not post its child starts again"
    );
    families.push(windows);

    // 4. resent: each hop's rows doubled while their target is down, so
    // both copies are there when it comes back (in turn: the child
    // starts, the hellos, the finishes and the cancel, the results).
    store.wait_empty();
    let resent = Family::new("resent");
    let finishes = rows(false, &[3, 5]);
    let results = rows(true, &[2]);
    b.kill();
    a.tell(&resent.command());
    store.wait_rows(&starts, KIDS as i64);
    store.double(&starts);
    a.kill();
    b = Child::spawn(&url, &schema, "b", "often");
    store.wait_rows(&hellos, KIDS as i64);
    store.double(&hellos);
    b.kill();
    a = Child::spawn(&url, &schema, "a", "often");
    store.wait_rows(&finishes, KIDS as i64);
    store.double(&finishes);
    a.kill();
    b = Child::spawn(&url, &schema, "b", "often");
    store.wait_rows(&results, KIDS as i64);
    store.double(&results);
    a = Child::spawn(&url, &schema, "a", "often");
    a.tell(&resent.command());
    resent.check_result(&mut a);
    check_statuses(&resent, &mut a, &mut b, "resent");
    families.push(resent);

    // A reply relayed across processes: a loner's kid ID is taken on `b`
    // by a run it did not start, so `b` refuses the start with a failed
    // result to the loner on `a`, and deletes the start's row only once
    // that result's row is durable (checked by the empty inbox at the
    // end; phase 5 sends the start again).
    let loner = id_on("loner", |s| A_SHARDS.contains(&s));
    let taken = id_on("taken", |s| !A_SHARDS.contains(&s));
    b.tell(&format!("kid {taken} nobody"));
    b.expect(&format!("started {taken}"));
    let relay_results = rows(true, &[2]);
    let relayed_before = store.count_copies(&relay_results);
    a.tell(&format!("loner {loner} {taken}"));
    let line = a.expect(&format!("result {loner} "));
    assert_eq!(line, format!("result {loner} child-start-failed"));
    assert!(
        store.count_copies(&relay_results) > relayed_before,
        "the refusal went back through the inbox"
    );

    // 5. every row ever written, written again, after two rows under a
    // shard that is not their message's target: a process must never
    // record those (the message would name a run of its shard that is not
    // the message's), so they stay in the table. Each is read before the
    // copies written after it to its shard (a shard's rows are read in ID
    // order), so once the copies are gone, it was read.
    store.wait_empty();
    store.execute("ALTER TABLE {s}.inbox DISABLE TRIGGER copy;");
    let misrouted = store.misroute();
    assert_eq!(misrouted.len(), 2, "the misrouted rows written");
    store.execute(
        "INSERT INTO {s}.inbox (shard, sender, value)
         SELECT shard, sender, value FROM {s}.inbox_copy;",
    );
    let copies = store.count("") - 2;
    eprintln!("lease_messages: {copies} rows written again");
    assert!(
        copies >= 3 * (2 * KIDS as i64 + 2),
        "too few rows copied: {copies}"
    );
    let misrouted = format!("id = ANY(ARRAY{misrouted:?}::int8[])");
    store.wait_none(&format!("WHERE NOT ({misrouted})"));
    assert_eq!(
        store.count(&format!("WHERE {misrouted}")),
        2,
        "a row under a shard that is not its message's target was taken (recorded on the wrong shard)"
    );
    store.execute(&format!("DELETE FROM {{s}}.inbox WHERE {misrouted};"));
    for family in &families {
        check_statuses(family, &mut a, &mut b, "not deleted");
        // The result is the one reported before.
        a.tell(&family.command());
        family.check_result(&mut a);
    }
    a.tell(&format!("loner {loner} {taken}"));
    let line = a.expect(&format!("result {loner} "));
    assert_eq!(line, format!("result {loner} child-start-failed"));
    let (status, _) = b.describe(&taken);
    assert_eq!(status, "Running", "the taken ID's own run, never restarted");
    a.close();
    b.close();
    assert_eq!(store.count(""), 0, "inbox rows left after the close");
    store
        .client
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .ok();
    eprintln!(
        "lease_messages: {} families in {:.1?}",
        families.len(),
        began.elapsed()
    );
}
