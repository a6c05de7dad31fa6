//! `fusee-core::segment` throughput: `LogWriter::append` and the recovery
//! scanner over a 64 MiB segment of 100-byte records.

// criterion_group! generates a public function without a doc comment.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fusee_core::segment::{FRAME_HEADER, HEADER_BYTES, LogWriter, scan_segment};

const SEGMENT: u64 = 64 << 20;
const BODY: usize = 100;
/// Records per flush batch, as a busy shard would group them.
const PER_BATCH: usize = 256;
/// Records that fill one segment.
const RECORDS: usize = (SEGMENT as usize - HEADER_BYTES) / (FRAME_HEADER + BODY);

fn body(i: usize) -> [u8; BODY] {
    let mut b = [0u8; BODY];
    for (j, x) in b.iter_mut().enumerate() {
        *x = (i.wrapping_mul(31) ^ j) as u8;
    }
    b
}

/// Appends a full segment of records, taking a batch every `PER_BATCH`.
fn fill(bodies: &[[u8; BODY]]) -> (LogWriter, usize) {
    let mut w = LogWriter::new(0, 1, 1, SEGMENT, 0);
    let mut bytes = 0;
    let mut take = |w: &mut LogWriter| {
        while let Some(b) = w.take() {
            bytes += b.chunks.iter().map(|c| c.bytes.len()).sum::<usize>();
        }
    };
    for (i, b) in bodies.iter().enumerate() {
        w.append(b, 0).expect("fits");
        if i % PER_BATCH == PER_BATCH - 1 {
            take(&mut w);
        }
    }
    take(&mut w);
    (w, bytes)
}

fn image(bodies: &[[u8; BODY]]) -> Vec<u8> {
    let mut w = LogWriter::new(0, 1, 1, SEGMENT, 0);
    let mut img = vec![0u8; SEGMENT as usize];
    for (i, b) in bodies.iter().enumerate() {
        w.append(b, 0).expect("fits");
        if i % PER_BATCH == PER_BATCH - 1 || i + 1 == bodies.len() {
            while let Some(batch) = w.take() {
                for c in batch.chunks {
                    assert_eq!(c.segment, 1, "the records fill exactly one segment");
                    let at = c.offset as usize;
                    img[at..at + c.bytes.len()].copy_from_slice(&c.bytes);
                }
            }
        }
    }
    img
}

fn benches(c: &mut Criterion) {
    let bodies: Vec<[u8; BODY]> = (0..RECORDS).map(body).collect();
    let frame_bytes = (RECORDS * (FRAME_HEADER + BODY)) as u64;
    eprintln!("{RECORDS} records of {BODY} bytes, {frame_bytes} frame bytes per segment");

    let mut g = c.benchmark_group("segment");
    g.sample_size(10);
    g.throughput(Throughput::Elements(RECORDS as u64));
    g.bench_function("append_records", |b| {
        b.iter(|| fill(&bodies));
    });
    g.throughput(Throughput::Bytes(frame_bytes));
    g.bench_function("append_bytes", |b| {
        b.iter(|| fill(&bodies));
    });

    // The file log's steady state: one group commit of 4,096 records
    // appended, taken and its buffer recycled, as `FileLog::flush` does.
    const GROUP: usize = 4096;
    let mut w = LogWriter::new(0, 1, 1, SEGMENT, 0);
    g.throughput(Throughput::Elements(GROUP as u64));
    g.bench_function("append_group_4096", |b| {
        b.iter(|| {
            for body in &bodies[..GROUP] {
                w.append(body, 0).expect("fits");
            }
            while let Some(batch) = w.take() {
                w.recycle(batch);
            }
        });
    });

    // The frame checksum against CRC-32 (which the format used before) on
    // one frame's checksummed bytes: LSN, batch and a 100-byte body.
    let frame = [0x5au8; FRAME_HEADER - 8 + BODY];
    g.throughput(Throughput::Elements(1));
    g.bench_function("checksum_frame_xxh3_low32", |b| {
        b.iter(|| fusee_core::wire::checksum32(std::hint::black_box(&frame)))
    });
    g.bench_function("checksum_frame_crc32", |b| {
        b.iter(|| crc32fast::hash(std::hint::black_box(&frame)))
    });

    let img = image(&bodies);
    g.throughput(Throughput::Bytes(frame_bytes));
    g.bench_function("scan_bytes", |b| {
        b.iter(|| {
            let mut n = 0u64;
            let s = scan_segment(&img, |_, body| n += body.len() as u64)
                .expect("valid")
                .expect("started");
            assert_eq!(s.records as usize, RECORDS);
            n
        });
    });
    g.finish();
}

criterion_group!(core_segment, benches);
criterion_main!(core_segment);
