//! Issue 22's figures, measured in one run against the floor: durable
//! append p50 (one 128-byte record per flush) on one node
//! (`synchronous_commit = local`) and with a synchronous standby (`on`,
//! `ANY 1` of two), as ratios to the floor; and group commit at 256
//! records per flush, in records/s, on one node and with the standby,
//! against the file backend's, measured two ways:
//!
//! - **with flushes in flight**, as a host runs them: each log keeps as
//!   many flush tickets out as it takes (`flushes_in_flight_max`: 2 for
//!   PostgreSQL by default, 1 for the file backend), each ticket's I/O on a
//!   worker thread of its own while the next batch is appended, as the
//!   engine's flusher threads do. Records/s of the median window of
//!   [`WINDOW`] flushes; subjects take turns window by window. This is the
//!   issue's figure.
//! - **one flush at a time**: records/s at each subject's median flush.
//!
//! "One node" is a server alone (`FUSEE_PG_SINGLE_URL`), as the issue
//! measured it. The primary of `FUSEE_PG_URL` at `local` is measured too,
//! as "primary, standbys beside it": its two standbys share its 2 cores
//! and its disk, replaying and flushing every commit's WAL, so even a
//! `local` commit there waits behind their work (see DEPLOYMENT.md, "What
//! a flush costs"). Without `FUSEE_PG_SINGLE_URL` the one-node rows are
//! left out.
//!
//! The floor is what the comparison in `benches/` calls it: one `pwrite` of
//! the batch at the next offset of a preallocated file, then `fdatasync`.
//! Subjects take turns flush by flush, so the machine's noise weighs on all
//! alike. Run on the servers `scripts/postgres.sh` starts, in the test
//! profile (no release build):
//!
//! ```text
//! source scripts/postgres.sh
//! cargo test -p fusee-storage-postgres --bench figures
//! ```

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use fusee_storage::{FlushTicket, LogStore, ShardParts, Storage};
use fusee_storage_file::{FileOptions, FileStorage};
use fusee_storage_postgres::{PgOptions, PgStorage, SyncCommit};

const RECORD: usize = 128;
const SINGLE_ROUNDS: usize = 400;
const GROUP: u64 = 256;
const GROUP_ROUNDS: usize = 200;
/// Flushes per window of the measurement with flushes in flight.
const WINDOW: usize = 10;
/// Windows per subject.
const WINDOWS: usize = 30;

struct Floor {
    file: File,
    at: u64,
}

impl Floor {
    fn new(path: &std::path::Path) -> Self {
        let file = File::options()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(path)
            .unwrap_or_else(|e| panic!("{e}"));
        // Preallocated and synced untimed, so fdatasync writes no metadata.
        file.write_all_at(&vec![0u8; 64 << 20], 0)
            .and_then(|()| file.sync_all())
            .unwrap_or_else(|e| panic!("{e}"));
        Self { file, at: 0 }
    }

    fn flush(&mut self, bytes: &[u8]) {
        if self.at + bytes.len() as u64 > 64 << 20 {
            self.at = 0;
        }
        self.file
            .write_all_at(bytes, self.at)
            .and_then(|()| self.file.sync_data())
            .unwrap_or_else(|e| panic!("{e}"));
        self.at += bytes.len() as u64;
    }
}

fn timed(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// One PostgreSQL subject: where it writes, how it is named in each
/// table, the goal printed beside it, and its samples.
struct PgSubject {
    storage: PgStorage,
    shard: ShardParts<PgStorage>,
    /// Its name in the append table and in the group-commit table.
    labels: [&'static str; 2],
    /// The goals printed beside its append ratio and its group ratio.
    goals: [&'static str; 2],
    append: Vec<Duration>,
    group: Vec<Duration>,
    windows: Vec<Duration>,
    /// Measured with flushes in flight only: the same node with another
    /// `flushes_in_flight`, as the A/B of that option.
    windows_only: bool,
}

impl PgSubject {
    fn open(
        url: &str,
        schema: &str,
        level: SyncCommit,
        shard: u32,
        labels: [&'static str; 2],
        goals: [&'static str; 2],
    ) -> Self {
        let mut o = PgOptions::new(url).schema(schema);
        o.synchronous_commit = level;
        if labels[0].is_empty() {
            o.flushes_in_flight = 1;
        }
        let storage = PgStorage::open(&o).unwrap_or_else(|e| panic!("{e}"));
        let shard = storage.open_shard(shard).unwrap_or_else(|e| panic!("{e}"));
        Self {
            storage,
            shard,
            labels,
            goals,
            append: Vec::new(),
            group: Vec::new(),
            windows: Vec::new(),
            windows_only: labels[0].is_empty(),
        }
    }
}

/// Appends `n` records to `log` and flushes them (one batch).
fn batch<L: LogStore>(log: &mut L, n: u64, record: &[u8]) {
    let first = log.last_lsn() + 1;
    for lsn in first..first + n {
        log.append(lsn, record).unwrap_or_else(|e| panic!("{e}"));
    }
    log.flush().unwrap_or_else(|e| panic!("{e}"));
}

/// Worker threads that run flush tickets' I/O, one per ticket a log may
/// have out, so each ticket out runs at once with the others, as the
/// engine's flusher threads run them.
struct Workers {
    lanes: Vec<(Sender<FlushTicket>, Receiver<FlushTicket>)>,
}

impl Workers {
    fn new(n: usize) -> Self {
        let lanes = (0..n)
            .map(|_| {
                let (to, rx) = mpsc::channel::<FlushTicket>();
                let (tx, from) = mpsc::channel::<FlushTicket>();
                std::thread::spawn(move || {
                    while let Ok(mut ticket) = rx.recv() {
                        ticket.run();
                        if tx.send(ticket).is_err() {
                            break;
                        }
                    }
                });
                (to, from)
            })
            .collect();
        Self { lanes }
    }

    /// Appends and flushes `flushes` batches of [`GROUP`] records with as
    /// many tickets out as `log` takes (ticket `i` on lane `i % lanes`,
    /// finished in order), and returns the time from the first append to
    /// the last flush finished.
    fn window<L: LogStore>(&self, log: &mut L, flushes: usize, record: &[u8]) -> Duration {
        let out_max = log.flushes_in_flight_max().min(self.lanes.len());
        let start = Instant::now();
        let (mut begun, mut finished) = (0, 0);
        while finished < flushes {
            if begun < flushes && begun - finished < out_max {
                let first = log.last_lsn() + 1;
                for lsn in first..first + GROUP {
                    log.append(lsn, record).unwrap_or_else(|e| panic!("{e}"));
                }
                let ticket = log.begin_flush().unwrap_or_else(|e| panic!("{e}"));
                let lane = &self.lanes[begun % self.lanes.len()];
                lane.0.send(ticket).unwrap_or_else(|e| panic!("{e}"));
                begun += 1;
                continue;
            }
            let lane = &self.lanes[finished % self.lanes.len()];
            let ticket = lane.1.recv().unwrap_or_else(|e| panic!("{e}"));
            log.finish_flush(ticket).unwrap_or_else(|e| panic!("{e}"));
            finished += 1;
        }
        start.elapsed()
    }
}

fn main() {
    let Some(url) = std::env::var("FUSEE_PG_URL").ok().filter(|u| !u.is_empty()) else {
        eprintln!("SKIPPED figures: FUSEE_PG_URL unset (source scripts/postgres.sh)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("fusee-pg-figures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let schema = format!("figures_{}", std::process::id());
    let record = [0x5Au8; RECORD];

    let single_url = std::env::var("FUSEE_PG_SINGLE_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let mut floor = Floor::new(&dir.join("floor"));
    let mut subjects: Vec<PgSubject> = single_url
        .as_deref()
        .map(|u| {
            PgSubject::open(
                u,
                &schema,
                SyncCommit::Local,
                0,
                ["one node (synchronous_commit local)", "one node (local)"],
                ["  (goal <= 6x)", " (goal >= 0.5)"],
            )
        })
        .into_iter()
        .collect();
    if let Some(u) = single_url.as_deref() {
        // An empty first label: one flush in flight, in the windows only.
        subjects.push(PgSubject::open(
            u,
            &schema,
            SyncCommit::Local,
            1,
            ["", "one node, flushes_in_flight 1"],
            ["", ""],
        ));
    }
    subjects.push(PgSubject::open(
        &url,
        &schema,
        SyncCommit::Local,
        0,
        [
            "primary, standbys beside it (local)",
            "primary, standbys beside (local)",
        ],
        ["", ""],
    ));
    subjects.push(PgSubject::open(
        &url,
        &schema,
        SyncCommit::On,
        1,
        [
            "synchronous standby (on, ANY 1)",
            "synchronous standby (on, ANY 1)",
        ],
        ["  (goal <= 9x)", ""],
    ));
    let file = FileStorage::open(dir.join("file"), FileOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut pf = file.open_shard(0).unwrap_or_else(|e| panic!("{e}"));

    let mut tf = Vec::new();
    for _ in 0..SINGLE_ROUNDS {
        tf.push(timed(|| floor.flush(&record)));
        for s in subjects.iter_mut().filter(|s| !s.windows_only) {
            let log = &mut s.shard.log;
            s.append.push(timed(|| batch(log, 1, &record)));
        }
    }
    let f = p50(tf);
    let ratio = |d: Duration| d.as_secs_f64() / f.as_secs_f64();
    println!(
        "durable append p50, {RECORD} B records, one per flush, {SINGLE_ROUNDS} flushes each:"
    );
    println!(
        "  floor (pwrite + fdatasync)                     {:>8.1} us",
        f.as_secs_f64() * 1e6
    );
    for s in subjects.iter_mut().filter(|s| !s.windows_only) {
        let d = p50(std::mem::take(&mut s.append));
        println!(
            "  postgres, {:<36} {:>8.1} us  {:.1}x floor{}",
            s.labels[0],
            d.as_secs_f64() * 1e6,
            ratio(d),
            s.goals[0]
        );
    }

    let group = vec![0x5Au8; RECORD * GROUP as usize];
    let (mut gfl, mut gf) = (Vec::new(), Vec::new());
    for _ in 0..GROUP_ROUNDS {
        gfl.push(timed(|| floor.flush(&group)));
        gf.push(timed(|| batch(&mut pf.log, GROUP, &record)));
        for s in subjects.iter_mut().filter(|s| !s.windows_only) {
            let log = &mut s.shard.log;
            s.group.push(timed(|| batch(log, GROUP, &record)));
        }
    }
    // From each subject's median flush: a few flushes stalled by the
    // machine (another process's I/O) would otherwise decide a total.
    let rate = |d: Vec<Duration>| GROUP as f64 / p50(d).as_secs_f64();
    let (rfl, rf) = (rate(gfl), rate(gf));

    let workers = Workers::new(fusee_storage_postgres::FLUSHES_IN_FLIGHT_MAX);
    let mut wf = Vec::new();
    for _ in 0..WINDOWS {
        wf.push(workers.window(&mut pf.log, WINDOW, &record));
        for s in &mut subjects {
            s.windows
                .push(workers.window(&mut s.shard.log, WINDOW, &record));
        }
    }
    let window_rate = |d: Vec<Duration>| (WINDOW as u64 * GROUP) as f64 / p50(d).as_secs_f64();
    let rwf = window_rate(wf);
    println!(
        "group commit, {GROUP} records per flush, with each log's flushes in flight, \
         records/s of the median window of {WINDOW} flushes ({WINDOWS} windows each):"
    );
    println!(
        "  file backend ({} in flight)                  {rwf:>10.0} records/s",
        pf.log.flushes_in_flight_max()
    );
    for s in &mut subjects {
        let r = window_rate(std::mem::take(&mut s.windows));
        println!(
            "  postgres, {:<32} {r:>10.0} records/s  {:.2} of the file backend's{} ({} in flight)",
            s.labels[1],
            r / rwf,
            s.goals[1],
            s.shard.log.flushes_in_flight_max()
        );
    }

    println!(
        "group commit, {GROUP} records per flush, one flush at a time, {GROUP_ROUNDS} flushes each, records/s at the median flush:"
    );
    println!("  floor                                      {rfl:>10.0} records/s");
    println!("  file backend                               {rf:>10.0} records/s");
    for s in subjects.iter_mut().filter(|s| !s.windows_only) {
        let r = rate(std::mem::take(&mut s.group));
        println!(
            "  postgres, {:<32} {r:>10.0} records/s  {:.2} of the file backend's",
            s.labels[1],
            r / rf,
        );
    }

    drop(pf);
    for s in subjects {
        drop(s.shard);
        let _ = s.storage.close();
    }
    let _ = file.close();
    let _ = std::fs::remove_dir_all(&dir);
    for u in std::iter::once(url.as_str()).chain(single_url.as_deref()) {
        if let Ok(mut c) = postgres::Client::connect(u, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
        }
    }
}
