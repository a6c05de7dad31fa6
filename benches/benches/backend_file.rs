//! The file backend against the disk's floor, measured in the same run:
//! durable append of one 100-byte record (append + flush against a raw
//! positioned write + `fdatasync` of the same 120-byte frame), group commit
//! at batches of 1, 16, 256 and 4,096 records (against the floor writing the
//! same bytes per flush, and against two *framed floors* that also lay the
//! records out as frames first: the least CPU the segment format allows,
//! and the least any checksummed log allows), and recovery of a log of
//! `FUSEE_BENCH_RECOVERY_MB` MiB (default 1024) of 100-byte records.
//!
//! `cargo bench -p fusee-benches --bench backend_file`
//! (`FUSEE_BENCH_DIR` picks the disk; default: the system temp directory.)

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fusee_benches::floor::FloorFile;
use fusee_storage::{FlushTicket, LogStore, Storage};
use fusee_storage_file::{FileOptions, FileStorage, FlushMethod};

/// A record body of 100 bytes; its segment frame is 120 bytes.
const RECORD: usize = 100;
const FRAME: usize = RECORD + 20;

fn bench_dir(name: &str) -> PathBuf {
    let base = std::env::var_os("FUSEE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("fusee-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    dir
}

/// The floor's preallocated file in `dir`, `size` bytes.
fn floor(dir: &std::path::Path, size: u64) -> FloorFile {
    FloorFile::create(dir.join("floor"), size).expect("floor file")
}

/// Records a log keeps, as a host that checkpoints would: older ones are
/// discarded, so the log's segment files are recycled in a steady state,
/// like the floor's one file that the floor's writes wrap around in.
const KEEP_RECORDS: u64 = 1 << 19;

/// Discards what a checkpointing host would have discarded by now.
fn keep_recent(log: &mut impl LogStore) {
    let durable = log.durable_lsn();
    if durable > KEEP_RECORDS {
        log.discard_through(durable - KEEP_RECORDS)
            .expect("discard");
    }
}

/// Appends `n` copies of `record` after the log's last LSN.
fn append_records(log: &mut impl LogStore, n: usize, record: &[u8]) {
    for _ in 0..n {
        let lsn = log.last_lsn() + 1;
        log.append(lsn, record).expect("append");
    }
}

/// Brings a fresh log to the steady state its benchmark measures: past
/// [`KEEP_RECORDS`] and two more segments, so discarded segments are being
/// recycled (untimed).
fn warm_up(log: &mut impl LogStore) {
    let segment_records = fusee_storage_file::DEFAULT_SEGMENT_BYTES / FRAME as u64;
    let record = [7u8; RECORD];
    while log.durable_lsn() < KEEP_RECORDS + 2 * segment_records {
        append_records(log, 4096, &record);
        log.flush().expect("flush");
        keep_recent(log);
    }
}

/// Whether the command line's filter (criterion's positional argument)
/// selects `name`, for the benches that time themselves instead of going
/// through criterion's groups: no filter selects everything.
fn selected(name: &str) -> bool {
    // Criterion's options that take a value: the value is not a filter.
    const VALUED: &[&str] = &[
        "--warm-up-time",
        "--measurement-time",
        "--sample-size",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--nresamples",
        "--save-baseline",
        "--baseline",
        "--load-baseline",
        "--output-format",
        "--color",
        "--profile-time",
        "--plotting-backend",
    ];
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut filters = args
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            !a.starts_with('-') && (*i == 0 || !VALUED.contains(&args[i - 1].as_str()))
        })
        .map(|(_, a)| a.as_str())
        .peekable();
    // Criterion's filter is a regex; alternatives of plain words are all
    // these benches need.
    filters.peek().is_none() || filters.any(|f| f.split('|').any(|part| name.contains(part)))
}

/// A whole-number setting from the environment, or `default`.
fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A bench directory with a 256 MiB floor file and a file storage beside it.
fn steady_state(name: &str) -> (PathBuf, FloorFile, FileStorage) {
    let dir = bench_dir(name);
    let floor = floor(&dir, 256 << 20);
    let storage = open_file_storage(&dir.join("storage"), FlushMethod::DataSync);
    (dir, floor, storage)
}

fn open_file_storage(dir: &std::path::Path, flush: FlushMethod) -> FileStorage {
    let options = FileOptions {
        flush,
        ..FileOptions::default()
    };
    FileStorage::open(dir, options).expect("open file storage")
}

fn durable_append(c: &mut Criterion) {
    let dir = bench_dir("append");
    let mut floor = floor(&dir, 64 << 20);
    let storage = open_file_storage(&dir.join("storage"), FlushMethod::DataSync);
    let mut parts = storage.open_shard(0).expect("shard");
    let record = vec![7u8; RECORD];
    let frame = vec![7u8; FRAME];
    let mut g = c.benchmark_group("durable_append_100B");
    g.sample_size(200);
    g.bench_function("floor_pwrite_fdatasync", |b| {
        b.iter(|| floor.write_sync(&frame).expect("floor write"))
    });
    g.bench_function("file_append_flush", |b| {
        b.iter(|| {
            let lsn = parts.log.last_lsn() + 1;
            parts.log.append(lsn, &record).expect("append");
            parts.log.flush().expect("flush")
        })
    });
    g.finish();
    drop(parts);
    drop(storage);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The p-th percentile of sorted durations.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Floor and file flushes interleaved one by one, so both see the same disk
/// and the same neighbours (this machine is shared and noisy): for batches
/// of 1, 16, 256 and 4,096 records, prints each side's p50 and p99 flush
/// latency, the file's time spent in `append` and in `flush` (p50), records/s and MB/s,
/// and the file/floor ratios. The throughput ratio is over the total time
/// of all rounds, so rare slow flushes (a segment roll) count in it; at
/// least `FUSEE_BENCH_MIN_ROUNDS` rounds (default 300) run per batch size,
/// enough for 4,096-record batches to cross segment boundaries.
///
/// Two more subjects bound what a writer could do here. Each *framed floor*
/// lays the batch out as frames in a reused buffer before the same write
/// and `fdatasync`: one checksums each frame as the segment format does (the
/// least CPU the format allows), the other checksums the whole batch once
/// (the least CPU any log that copies its records and protects them can
/// spend). The file's ratio to the floor cannot be expected above theirs.
fn interleaved(_c: &mut Criterion) {
    if !selected("interleaved") {
        return;
    }
    let rounds = env("FUSEE_BENCH_ROUNDS", 3000);
    let min_rounds = env("FUSEE_BENCH_MIN_ROUNDS", 300);
    let (dir, mut floor, storage) = steady_state("interleaved");
    let mut per_frame_floor =
        FloorFile::create(dir.join("floor-frames"), 256 << 20).expect("floor");
    let mut per_batch_floor = FloorFile::create(dir.join("floor-batch"), 256 << 20).expect("floor");
    let mut framed = Vec::new();
    let mut parts = storage.open_shard(0).expect("shard");
    warm_up(&mut parts.log);
    let record = vec![7u8; RECORD];
    for batch in [1usize, 16, 256, 4096] {
        let rounds = (rounds / batch).clamp(min_rounds.min(rounds), rounds.max(min_rounds));
        let bytes = vec![7u8; batch * FRAME];
        let mut floor_t = Vec::with_capacity(rounds);
        let mut file_t = Vec::with_capacity(rounds);
        let mut append_t = Vec::with_capacity(rounds);
        let mut flush_t = Vec::with_capacity(rounds);
        let mut per_frame_total = Duration::ZERO;
        let mut per_batch_total = Duration::ZERO;
        for round in 0..rounds {
            let t = Instant::now();
            floor.write_sync(&bytes).expect("floor write");
            floor_t.push(t.elapsed());
            let first_lsn = (round * batch) as u64;
            let t = Instant::now();
            lay_out(&mut framed, first_lsn, batch, &record, Checksum::PerFrame);
            per_frame_floor.write_sync(&framed).expect("floor write");
            per_frame_total += t.elapsed();
            let t = Instant::now();
            lay_out(&mut framed, first_lsn, batch, &record, Checksum::PerBatch);
            per_batch_floor.write_sync(&framed).expect("floor write");
            per_batch_total += t.elapsed();
            let t = Instant::now();
            append_records(&mut parts.log, batch, &record);
            let appended = t.elapsed();
            parts.log.flush().expect("flush");
            keep_recent(&mut parts.log);
            let total = t.elapsed();
            append_t.push(appended);
            flush_t.push(total - appended);
            file_t.push(total);
        }
        let floor_total: Duration = floor_t.iter().sum();
        let file_total: Duration = file_t.iter().sum();
        floor_t.sort_unstable();
        file_t.sort_unstable();
        append_t.sort_unstable();
        flush_t.sort_unstable();
        let (f50, f99) = (percentile(&floor_t, 0.5), percentile(&floor_t, 0.99));
        let (s50, s99) = (percentile(&file_t, 0.5), percentile(&file_t, 0.99));
        let records = (batch * rounds) as f64;
        eprintln!(
            "batch {batch:>4}, {rounds} interleaved flushes: floor p50 {f50:?} p99 {f99:?}; \
             file p50 {s50:?} p99 {s99:?} (append p50 {:?}, flush p50 {:?}); file {:.0} records/s, \
             {:.1} MB/s of records (floor {:.0}/s); latency ratio p50 {:.3} p99 {:.3}; \
             throughput ratio {:.3} (at p50: {:.3}); framed floors / floor: checksum per frame \
             {:.3}, per batch {:.3}",
            percentile(&append_t, 0.5),
            percentile(&flush_t, 0.5),
            records / file_total.as_secs_f64(),
            records * RECORD as f64 / file_total.as_secs_f64() / 1e6,
            records / floor_total.as_secs_f64(),
            s50.as_secs_f64() / f50.as_secs_f64(),
            s99.as_secs_f64() / f99.as_secs_f64(),
            floor_total.as_secs_f64() / file_total.as_secs_f64(),
            f50.as_secs_f64() / s50.as_secs_f64(),
            floor_total.as_secs_f64() / per_frame_total.as_secs_f64(),
            floor_total.as_secs_f64() / per_batch_total.as_secs_f64(),
        );
    }
    drop(parts);
    drop(storage);
    let _ = std::fs::remove_dir_all(&dir);
}

/// How a framed floor protects its frames.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Checksum {
    /// Each frame's checksum field covers that frame, as in the segment
    /// format.
    PerFrame,
    /// The first frame's checksum field covers the whole batch.
    PerBatch,
}

/// Lays `n` copies of `record` out in `out` as segment frames numbered from
/// `first_lsn`, checksummed as `checksum` says: a framed floor's CPU work.
fn lay_out(out: &mut Vec<u8>, first_lsn: u64, n: usize, record: &[u8], checksum: Checksum) {
    out.clear();
    for i in 0..n {
        let start = out.len();
        let mut header = [0u8; FRAME - RECORD];
        header[0..4].copy_from_slice(&(record.len() as u32).to_le_bytes());
        header[8..16].copy_from_slice(&(first_lsn + i as u64).to_le_bytes());
        header[16..20].copy_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(record);
        if checksum == Checksum::PerFrame {
            let sum = fusee_core::wire::checksum32(&out[start + 8..]);
            out[start + 4..start + 8].copy_from_slice(&sum.to_le_bytes());
        }
    }
    if checksum == Checksum::PerBatch {
        let sum = fusee_core::wire::checksum32(&out[8..]);
        out[4..8].copy_from_slice(&sum.to_le_bytes());
    }
}

/// Work for the pipelined bench's flusher thread.
enum Job {
    /// The file log's flush.
    Ticket(FlushTicket),
    /// The floor's: one positioned write and `fdatasync` of these bytes.
    Floor(Vec<u8>),
}

/// Busy for `d`: stands in for a writer's CPU work per batch.
fn spin_for(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Group commit as a host runs it: while one batch's flush is in flight on a
/// flusher thread (`begin_flush`, `FlushTicket::run` there, `finish_flush`
/// back here), the next batch is appended. Two baselines run in the same
/// blocks of 50 rounds, so all three see the same disk: the serial floor
/// (write and `fdatasync` on this thread), and the floor pipelined the same
/// way with this thread busy for as long as the file's appends took in the
/// block (what overlapping that much CPU with the I/O can give on this
/// machine). Per batch size it prints records/s of each over its total time
/// and the ratios. `FUSEE_BENCH_PIPELINE_ROUNDS` (default 600) rounds per
/// batch size.
fn pipelined(_c: &mut Criterion) {
    if !selected("pipelined") {
        return;
    }
    const BLOCK: usize = 50;
    let rounds = env("FUSEE_BENCH_PIPELINE_ROUNDS", 600);
    let (dir, mut floor, storage) = steady_state("pipelined");
    let mut pipe_floor = FloorFile::create(dir.join("floor-pipelined"), 256 << 20).expect("floor");
    let mut parts = storage.open_shard(0).expect("shard");
    warm_up(&mut parts.log);
    let record = vec![7u8; RECORD];
    let (to_flusher, jobs) = mpsc::sync_channel::<Job>(1);
    let (done, from_flusher) = mpsc::sync_channel::<Job>(1);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            for mut job in jobs {
                match &mut job {
                    Job::Ticket(ticket) => {
                        ticket.run();
                    }
                    Job::Floor(bytes) => pipe_floor.write_sync(bytes).expect("floor write"),
                }
                if done.send(job).is_err() {
                    break;
                }
            }
        });
        let back = || from_flusher.recv().expect("flusher");
        for batch in [1usize, 16, 256, 4096] {
            let bytes = vec![7u8; batch * FRAME];
            let mut floor_total = Duration::ZERO;
            let mut file_total = Duration::ZERO;
            let mut pipe_total = Duration::ZERO;
            let mut ran = 0;
            while ran < rounds {
                let n = BLOCK.min(rounds - ran);
                let t = Instant::now();
                for _ in 0..n {
                    floor.write_sync(&bytes).expect("floor write");
                }
                floor_total += t.elapsed();
                let t = Instant::now();
                let mut appending = Duration::ZERO;
                let mut in_flight = false;
                for _ in 0..n {
                    let a = Instant::now();
                    append_records(&mut parts.log, batch, &record);
                    appending += a.elapsed();
                    if in_flight && let Job::Ticket(ticket) = back() {
                        parts.log.finish_flush(ticket).expect("flush");
                    }
                    keep_recent(&mut parts.log);
                    let ticket = parts.log.begin_flush().expect("begin flush");
                    to_flusher.send(Job::Ticket(ticket)).expect("flusher");
                    in_flight = true;
                }
                if let Job::Ticket(ticket) = back() {
                    parts.log.finish_flush(ticket).expect("flush");
                }
                file_total += t.elapsed();
                let busy = appending / n as u32;
                let t = Instant::now();
                let mut spare = Some(bytes.clone());
                for _ in 0..n {
                    spin_for(busy);
                    let buffer = match spare.take() {
                        Some(b) => b,
                        None => match back() {
                            Job::Floor(b) => b,
                            Job::Ticket(_) => unreachable!("no ticket is out"),
                        },
                    };
                    to_flusher.send(Job::Floor(buffer)).expect("flusher");
                }
                back();
                pipe_total += t.elapsed();
                ran += n;
            }
            let records = (batch * rounds) as f64;
            let per_s = |d: Duration| records / d.as_secs_f64();
            eprintln!(
                "pipelined batch {batch:>4}, {rounds} flushes: file {:.0} records/s, {:.1} MB/s \
                 of records; floor {:.0} records/s; floor pipelined with the file's append CPU \
                 {:.0} records/s; throughput ratio {:.3} (floor pipelined / floor {:.3}, \
                 file / floor pipelined {:.3})",
                per_s(file_total),
                records * RECORD as f64 / file_total.as_secs_f64() / 1e6,
                per_s(floor_total),
                per_s(pipe_total),
                floor_total.as_secs_f64() / file_total.as_secs_f64(),
                floor_total.as_secs_f64() / pipe_total.as_secs_f64(),
                pipe_total.as_secs_f64() / file_total.as_secs_f64(),
            );
        }
        drop(to_flusher);
    });
    drop(parts);
    drop(storage);
    let _ = std::fs::remove_dir_all(&dir);
}

fn group_commit(c: &mut Criterion) {
    let dir = bench_dir("group");
    let mut floor = floor(&dir, 256 << 20);
    let storage = open_file_storage(&dir.join("storage"), FlushMethod::DataSync);
    let mut parts = storage.open_shard(0).expect("shard");
    let record = vec![7u8; RECORD];
    let mut g = c.benchmark_group("group_commit");
    g.sample_size(30);
    for batch in [1usize, 16, 256, 4096] {
        g.throughput(Throughput::Elements(batch as u64));
        let bytes = vec![7u8; batch * FRAME];
        g.bench_with_input(BenchmarkId::new("floor", batch), &batch, |b, _| {
            b.iter(|| floor.write_sync(&bytes).expect("floor write"))
        });
        g.bench_with_input(BenchmarkId::new("file", batch), &batch, |b, &n| {
            b.iter(|| {
                append_records(&mut parts.log, n, &record);
                parts.log.flush().expect("flush")
            })
        });
    }
    g.finish();
    drop(parts);
    drop(storage);
    let _ = std::fs::remove_dir_all(&dir);
}

fn recovery(c: &mut Criterion) {
    let mib = env("FUSEE_BENCH_RECOVERY_MB", 1024) as u64;
    let dir = bench_dir("recovery");
    let records = (mib << 20) / FRAME as u64;
    {
        // Built without syncs: the bench measures reading it back.
        let storage = open_file_storage(&dir, FlushMethod::None);
        let mut parts = storage.open_shard(0).expect("shard");
        let record = vec![7u8; RECORD];
        for lsn in 1..=records {
            parts.log.append(lsn, &record).expect("append");
            if lsn % 4096 == 0 {
                parts.log.flush().expect("flush");
            }
        }
        parts.log.flush().expect("flush");
        drop(parts);
        storage.close().expect("close");
    }
    let mut g = c.benchmark_group("recovery");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(records * FRAME as u64));
    g.bench_function(format!("file_open_{mib}MiB_log"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let storage = open_file_storage(&dir, FlushMethod::DataSync);
                let parts = storage.open_shard(0).expect("shard");
                assert_eq!(parts.log.last_lsn(), records);
                total += t.elapsed();
                drop(parts);
                storage.close().expect("close");
            }
            total
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(
    benches,
    interleaved,
    pipelined,
    durable_append,
    group_commit,
    recovery
);
criterion_main!(benches);
