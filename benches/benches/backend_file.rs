//! The file backend against the disk's floor, measured in the same run:
//! durable append of one record (append + flush against the floor's
//! positioned write + `fdatasync` of the same record), group commit at
//! batches of 1, 16, 256 and 4,096 records (against the floor writing the
//! same records per flush, and against two *framed floors* that also lay the
//! records out as frames first: the least CPU the segment format allows,
//! and the least any checksummed log allows), run-store reads (against the
//! floor's `pread` of the same frames, with and without a CRC-32 check), and
//! recovery of a log of `FUSEE_BENCH_RECOVERY_MB` MiB (default 1024).
//!
//! The floor is the comparison's ([`FloorFile`], fed through `append` and
//! `flush` as `fusee-compare` feeds it), and every record and frame is the
//! comparison's workload ([`LogRecords`], [`Frames`]): journals of about
//! 104-byte records. What still differs from `fusee-compare` is on purpose:
//! the log benches here run a log in its steady state (warmed up, older
//! records discarded as a checkpointing host would, segments recycled),
//! while the comparison times a fresh log as it grows, with its roll out of
//! the small segment an open starts and the zero-filling of new segments
//! (see `benches/RESULTS.md`).
//!
//! `cargo bench -p fusee-benches --bench backend_file`
//! (`FUSEE_BENCH_DIR` picks the disk; default: the system temp directory.)

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fusee_benches::floor::{Floor, FloorFile};
use fusee_benches::target::{Subject, Target};
use fusee_benches::workload::{Frames, LogRecords};
use fusee_benches::{Backend, backend, env_or};
use fusee_core::segment::FRAME_HEADER;
use fusee_storage::{FlushTicket, LogStore, Storage};
use fusee_storage_file::{FileOptions, FileStorage, FlushMethod};

/// The mean size of a log record's segment frame, in bytes.
fn mean_frame(records: &LogRecords) -> f64 {
    records.mean_len() + FRAME_HEADER as f64
}

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

/// Appends workload records `first..first + n` after the log's last LSN.
fn append_records(log: &mut impl LogStore, records: &LogRecords, first: u64, n: usize) {
    for i in first..first + n as u64 {
        let lsn = log.last_lsn() + 1;
        log.append(lsn, records.get(i)).expect("append");
    }
}

/// One floor flush of workload records `first..first + n`, the bytes the
/// log is given for them.
fn floor_flush(floor: &mut FloorFile, records: &LogRecords, first: u64, n: usize) {
    for i in first..first + n as u64 {
        floor.append(records.get(i));
    }
    floor.flush().expect("floor flush");
}

/// Brings a fresh log to the steady state its benchmark measures: past
/// [`KEEP_RECORDS`] and two more segments, so discarded segments are being
/// recycled (untimed).
fn warm_up(log: &mut impl LogStore, records: &LogRecords) {
    let segment_records =
        (fusee_storage_file::DEFAULT_SEGMENT_BYTES as f64 / mean_frame(records)) as u64;
    let mut next = 0;
    while log.durable_lsn() < KEEP_RECORDS + 2 * segment_records {
        append_records(log, records, next, 4096);
        next += 4096;
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
    let records = LogRecords::new();
    let mut g = c.benchmark_group("durable_append");
    g.sample_size(200);
    let mut next = 0;
    g.bench_function("floor_pwrite_fdatasync", |b| {
        b.iter(|| {
            floor_flush(&mut floor, &records, next, 1);
            next += 1;
        })
    });
    let mut next = 0;
    g.bench_function("file_append_flush", |b| {
        b.iter(|| {
            append_records(&mut parts.log, &records, next, 1);
            next += 1;
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
///
/// At 4,096 records per flush the file's figure is accepted as bounded by
/// this machine (issue 21): its reference is the framed floor with a
/// checksum per frame, measured in the same run, not the floor; the log
/// reached 0.83 to 0.93 of it. The line for that batch size says so.
fn interleaved(_c: &mut Criterion) {
    if !selected("interleaved") {
        return;
    }
    let rounds = env_or("FUSEE_BENCH_ROUNDS", 3000usize);
    let min_rounds = env_or("FUSEE_BENCH_MIN_ROUNDS", 300usize);
    let (dir, mut floor, storage) = steady_state("interleaved");
    let mut per_frame_floor =
        FloorFile::create(dir.join("floor-frames"), 256 << 20).expect("floor");
    let mut per_batch_floor = FloorFile::create(dir.join("floor-batch"), 256 << 20).expect("floor");
    let mut framed = Vec::new();
    let mut parts = storage.open_shard(0).expect("shard");
    let records = LogRecords::new();
    warm_up(&mut parts.log, &records);
    let mut next = 0u64;
    for batch in [1usize, 16, 256, 4096] {
        let rounds = (rounds / batch).clamp(min_rounds.min(rounds), rounds.max(min_rounds));
        let first = next;
        let mut floor_t = Vec::with_capacity(rounds);
        let mut file_t = Vec::with_capacity(rounds);
        let mut append_t = Vec::with_capacity(rounds);
        let mut flush_t = Vec::with_capacity(rounds);
        let mut per_frame_total = Duration::ZERO;
        let mut per_batch_total = Duration::ZERO;
        for _ in 0..rounds {
            let t = Instant::now();
            floor_flush(&mut floor, &records, next, batch);
            floor_t.push(t.elapsed());
            let t = Instant::now();
            lay_out(&mut framed, &records, next, batch, Checksum::PerFrame);
            per_frame_floor.write_sync(&framed).expect("floor write");
            per_frame_total += t.elapsed();
            let t = Instant::now();
            lay_out(&mut framed, &records, next, batch, Checksum::PerBatch);
            per_batch_floor.write_sync(&framed).expect("floor write");
            per_batch_total += t.elapsed();
            let t = Instant::now();
            append_records(&mut parts.log, &records, next, batch);
            next += batch as u64;
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
        let n = (batch * rounds) as f64;
        let secs = |d: Duration| d.as_secs_f64();
        eprintln!(
            "batch {batch:>4}, {rounds} interleaved flushes: floor p50 {f50:?} p99 {f99:?}; \
             file p50 {s50:?} p99 {s99:?} (append p50 {:?}, flush p50 {:?}); file {:.0} records/s, \
             {:.1} MB/s of records (floor {:.0}/s); latency ratio p50 {:.3} p99 {:.3}; \
             throughput ratio {:.3} (at p50: {:.3}); framed floors / floor: checksum per frame \
             {:.3}, per batch {:.3}; file / framed floor with a checksum per frame {:.3}{}",
            percentile(&append_t, 0.5),
            percentile(&flush_t, 0.5),
            n / secs(file_total),
            (records.bytes(next) - records.bytes(first)) as f64 / secs(file_total) / 1e6,
            n / secs(floor_total),
            secs(s50) / secs(f50),
            secs(s99) / secs(f99),
            secs(floor_total) / secs(file_total),
            secs(f50) / secs(s50),
            secs(floor_total) / secs(per_frame_total),
            secs(floor_total) / secs(per_batch_total),
            secs(per_frame_total) / secs(file_total),
            if batch == 4096 { BOUNDED_4096 } else { "" },
        );
    }
    drop(parts);
    drop(storage);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the 4,096-record line adds: issue 21 accepted that figure as
/// bounded by this machine.
const BOUNDED_4096: &str = " (accepted as bounded by this machine: the reference of the \
     4,096-record figure is the framed floor with a checksum per frame measured in this run, \
     not the floor; the log reached 0.83 to 0.93 of it, issue 21)";

/// How a framed floor protects its frames.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Checksum {
    /// Each frame's checksum field covers that frame, as in the segment
    /// format.
    PerFrame,
    /// The first frame's checksum field covers the whole batch.
    PerBatch,
}

/// Lays workload records `first..first + n` out in `out` as segment frames
/// numbered from `first`, checksummed as `checksum` says: a framed floor's
/// CPU work.
fn lay_out(out: &mut Vec<u8>, records: &LogRecords, first: u64, n: usize, checksum: Checksum) {
    out.clear();
    for i in 0..n {
        let start = out.len();
        let record = records.get(first + i as u64);
        let mut header = [0u8; FRAME_HEADER];
        header[0..4].copy_from_slice(&(record.len() as u32).to_le_bytes());
        header[8..16].copy_from_slice(&(first + i as u64).to_le_bytes());
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
    let rounds = env_or("FUSEE_BENCH_PIPELINE_ROUNDS", 600usize);
    let (dir, mut floor, storage) = steady_state("pipelined");
    let mut pipe_floor = FloorFile::create(dir.join("floor-pipelined"), 256 << 20).expect("floor");
    let mut parts = storage.open_shard(0).expect("shard");
    let records = LogRecords::new();
    warm_up(&mut parts.log, &records);
    let mut next = 0u64;
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
            let first = next;
            let mut floor_total = Duration::ZERO;
            let mut file_total = Duration::ZERO;
            let mut pipe_total = Duration::ZERO;
            let mut ran = 0;
            while ran < rounds {
                let n = BLOCK.min(rounds - ran);
                // Round `j` of the block: records `at(j)..at(j) + batch`,
                // the same for the three subjects.
                let at = |j: usize| next + (j * batch) as u64;
                let t = Instant::now();
                for j in 0..n {
                    floor_flush(&mut floor, &records, at(j), batch);
                }
                floor_total += t.elapsed();
                let t = Instant::now();
                let mut appending = Duration::ZERO;
                let mut in_flight = false;
                for j in 0..n {
                    let a = Instant::now();
                    append_records(&mut parts.log, &records, at(j), batch);
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
                let mut spare = Some(Vec::new());
                for j in 0..n {
                    spin_for(busy);
                    let mut buffer = match spare.take() {
                        Some(b) => b,
                        None => match back() {
                            Job::Floor(b) => b,
                            Job::Ticket(_) => unreachable!("no ticket is out"),
                        },
                    };
                    // The floor's append: the batch's records, one after
                    // the other.
                    buffer.clear();
                    for i in at(j)..at(j) + batch as u64 {
                        buffer.extend_from_slice(records.get(i));
                    }
                    to_flusher.send(Job::Floor(buffer)).expect("flusher");
                }
                back();
                pipe_total += t.elapsed();
                ran += n;
                next = at(n);
            }
            let n = (batch * rounds) as f64;
            let per_s = |d: Duration| n / d.as_secs_f64();
            eprintln!(
                "pipelined batch {batch:>4}, {rounds} flushes: file {:.0} records/s, {:.1} MB/s \
                 of records; floor {:.0} records/s; floor pipelined with the file's append CPU \
                 {:.0} records/s; throughput ratio {:.3} (floor pipelined / floor {:.3}, \
                 file / floor pipelined {:.3})",
                per_s(file_total),
                (records.bytes(next) - records.bytes(first)) as f64
                    / file_total.as_secs_f64()
                    / 1e6,
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
    let records = LogRecords::new();
    let mut g = c.benchmark_group("group_commit");
    g.sample_size(30);
    let (mut floor_next, mut file_next) = (0u64, 0u64);
    for batch in [1usize, 16, 256, 4096] {
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_with_input(BenchmarkId::new("floor", batch), &batch, |b, &n| {
            b.iter(|| {
                floor_flush(&mut floor, &records, floor_next, n);
                floor_next += n as u64;
            })
        });
        g.bench_with_input(BenchmarkId::new("file", batch), &batch, |b, &n| {
            b.iter(|| {
                append_records(&mut parts.log, &records, file_next, n);
                file_next += n as u64;
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
    let mib = env_or("FUSEE_BENCH_RECOVERY_MB", 1024usize) as u64;
    let dir = bench_dir("recovery");
    let workload = LogRecords::new();
    let records = ((mib << 20) as f64 / mean_frame(&workload)) as u64;
    {
        // Built without syncs: the bench measures reading it back.
        let storage = open_file_storage(&dir, FlushMethod::None);
        let mut parts = storage.open_shard(0).expect("shard");
        for first in (0..records).step_by(4096) {
            append_records(
                &mut parts.log,
                &workload,
                first,
                4096.min(records - first) as usize,
            );
            parts.log.flush().expect("flush");
        }
        drop(parts);
        storage.close().expect("close");
    }
    let mut g = c.benchmark_group("recovery");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(
        workload.bytes(records) + records * FRAME_HEADER as u64,
    ));
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

/// Run-store reads as the comparison makes them (`fusee-compare`'s
/// run-store read: the workload's frames, read back once each in a seeded
/// random order, page cache warm), against the floor's (one `pread` of the
/// frame, into a reused buffer), with where the difference goes. Four
/// parts take turns by blocks of 1,000 frames:
/// - **floor**: the comparison's floor, reading its own preallocated file;
/// - **file**: the file backend's `RunStore::read`, which copies the frame
///   from a memory map of its generation file and checks it;
/// - **raw**: one `pread` of the same bytes (header and payload) from the
///   file backend's generation file, bypassing the backend, and the same
///   comparison with what was written as the floor's: what the file
///   *as the run store wrote it* costs to read with a `pread` (the store's
///   read before it used a map), against the floor's file, which was
///   written all at once before any frame (files grown by unaligned writes
///   are held in smaller page-cache folios, and read back more slowly);
/// - **crc**: the CRC-32 the file backend checks on each frame, alone.
///
/// Prints ns per read of each and the ratios: file / floor is the
/// comparison's figure; floor / raw is what the file's layout costs a
/// `pread`; file - crc is the copy from the map and the backend's own code.
/// `FUSEE_BENCH_FRAMES` frames (default 50,000, the quick plan's), three
/// passes.
fn store_read(_c: &mut Criterion) {
    if !selected("store_read") {
        return;
    }
    const BLOCK: usize = 1000;
    let n = env_or("FUSEE_BENCH_FRAMES", 50_000usize) as u64;
    let dir = bench_dir("store-read");
    let frames = Frames::new();
    let file = Backend(backend::File);
    let subjects: [&dyn Subject; 2] = [&Floor, &file];
    let mut targets: Vec<Box<dyn Target>> = Vec::new();
    let mut refs = Vec::new();
    for s in subjects {
        let sub = dir.join(s.name());
        std::fs::create_dir_all(&sub).expect("bench dir");
        let mut t = s.open(&sub).expect("open");
        t.prepare_frames(n, frames.bytes(n)).expect("prepare");
        let mut written = Vec::with_capacity(n as usize);
        for k in 0..n {
            written.push((k, t.put_frame(frames.get(k)).expect("put frame")));
            if (k + 1) % 1000 == 0 {
                t.commit_frames().expect("commit");
            }
        }
        t.commit_frames().expect("commit");
        fastrand::Rng::with_seed(0xF005EE).shuffle(&mut written);
        targets.push(t);
        refs.push(written);
    }
    let generation = generation_file(&dir.join(file.name()));
    let mut out = Vec::new();
    let blocks = (n as usize).div_ceil(BLOCK);
    for pass in 1..=3 {
        // Floor, file, raw, crc.
        let mut took = [Duration::ZERO; 4];
        for turn in 0..blocks {
            let block = |b: usize| b * BLOCK..((b + 1) * BLOCK).min(n as usize);
            let range = block(turn);
            // Raw reads other frames of the same file than the file's read
            // in this turn: the same ones would come from the CPU's caches.
            let raw_range = block((turn + blocks / 2) % blocks);
            for j in 0..4 {
                let who = (turn + j) % 4;
                let t = Instant::now();
                match who {
                    0 | 1 => {
                        for &(k, blob) in &refs[who][range.clone()] {
                            targets[who].get_frame(blob, &mut out).expect("read");
                            assert!(out.as_slice() == frames.get(k), "frame {k} differs");
                        }
                    }
                    2 => {
                        for &(k, blob) in &refs[1][raw_range.clone()] {
                            // The store's address: the generation above a
                            // 36-bit offset of the frame's 8-byte header.
                            let offset = blob.offset & ((1 << 36) - 1);
                            out.resize(blob.len as usize + 8, 0);
                            generation.read_exact_at(&mut out, offset).expect("pread");
                            assert!(out[8..] == *frames.get(k), "frame {k} differs");
                        }
                    }
                    _ => {
                        for &(k, blob) in &refs[1][range.clone()] {
                            let mut crc = crc32fast::Hasher::new();
                            crc.update(&blob.len.to_le_bytes());
                            crc.update(frames.get(k));
                            std::hint::black_box(crc.finalize());
                        }
                    }
                }
                took[who] += t.elapsed();
            }
        }
        let ns = |d: Duration| d.as_secs_f64() * 1e9 / n as f64;
        let [floor, file, raw, crc] = took.map(ns);
        eprintln!(
            "store_read pass {pass}, {n} frames of {:.0} bytes: floor {floor:.0} ns/read, file \
             {file:.0} ns (CRC-32 {crc:.0} ns, the rest {:.0} ns: the copy from its map and the \
             backend's code; a raw pread of its file {raw:.0} ns); file / floor throughput {:.3}; \
             floor / raw {:.3}",
            frames.bytes(n) as f64 / n as f64,
            file - crc,
            floor / file,
            floor / raw,
        );
    }
    drop(targets);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The one run-store generation file (`store-*.dat`) under `dir`.
fn generation_file(dir: &std::path::Path) -> std::fs::File {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("dir entry").path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if path.is_dir() {
                dirs.push(path);
            } else if name.is_some_and(|n| n.starts_with("store-") && n.ends_with(".dat")) {
                found.push(path);
            }
        }
    }
    assert_eq!(found.len(), 1, "run-store generation files: {found:?}");
    std::fs::File::open(&found[0]).expect("open generation file")
}

/// The first segment roll after an open (issue 21): a fresh storage (every
/// open starts a segment of [`fusee_storage_file::OPEN_SEGMENT_BYTES`]),
/// then flushes of 256 of the comparison's records until the log holds
/// three times that, floor and file taking turns flush by flush. The log
/// rolls out of the open's segment early, while the next segment
/// may still be being zero-filled on its background thread (it waited for
/// a 64 MiB zero-fill, about 50 ms here, before segments ramped up from
/// the open's size and before a roll stopped waiting), into more segments
/// after it. Prints, per open, each side's slowest flush, the file/floor
/// ratio of their total times and the rolls that found no segment prepared
/// ([`fusee_storage_file::log::FileLog::unprepared_rolls`]);
/// `FUSEE_BENCH_OPENS` opens (default 5), each in a fresh directory.
fn first_roll(_c: &mut Criterion) {
    if !selected("first_roll") {
        return;
    }
    const BATCH: usize = 256;
    let opens = env_or("FUSEE_BENCH_OPENS", 5usize);
    let records = LogRecords::new();
    let target = 3 * fusee_storage_file::OPEN_SEGMENT_BYTES;
    for open in 1..=opens {
        let dir = bench_dir("first_roll");
        let mut floor = floor(&dir, 64 << 20);
        let storage = open_file_storage(&dir.join("storage"), FlushMethod::DataSync);
        let mut parts = storage.open_shard(0).expect("shard");
        let (mut floor_max, mut file_max) = (Duration::ZERO, Duration::ZERO);
        let (mut floor_total, mut file_total) = (Duration::ZERO, Duration::ZERO);
        let mut next = 0u64;
        let mut flushes = 0u64;
        while records.bytes(next) < target {
            let t = Instant::now();
            floor_flush(&mut floor, &records, next, BATCH);
            let d = t.elapsed();
            floor_max = floor_max.max(d);
            floor_total += d;
            let t = Instant::now();
            append_records(&mut parts.log, &records, next, BATCH);
            parts.log.flush().expect("flush");
            let d = t.elapsed();
            file_max = file_max.max(d);
            file_total += d;
            next += BATCH as u64;
            flushes += 1;
        }
        eprintln!(
            "first_roll, open {open}/{opens}: {flushes} flushes of {BATCH} records \
             ({:.1} MB) from a fresh open: slowest flush floor {floor_max:?}, file {file_max:?}; \
             total floor {floor_total:?}, file {file_total:?}; throughput ratio file / floor {:.3}; \
             rolls that found no segment prepared {}",
            records.bytes(next) as f64 / 1e6,
            floor_total.as_secs_f64() / file_total.as_secs_f64(),
            parts.log.unprepared_rolls(),
        );
        drop(parts);
        drop(storage);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

criterion_group!(
    benches,
    interleaved,
    pipelined,
    store_read,
    first_roll,
    durable_append,
    group_commit,
    recovery
);
criterion_main!(benches);
