//! Canonical record encoding and decoding throughput (records per second).
//!
//! Each iteration handles a journal of 1,000 records of one shape:
//! - `step_100B`: a `Step` with an 11-byte name and a 100-byte payload;
//! - `start`: a plain `Start` (ID, type, 2-byte input, no options).
//!
//! Benches per shape: `encode` (into a reused buffer), `decode_ref`
//! (borrowed, `iter_canonical`), `decode_all` (owned, `decode_canonical_all`
//! with a fresh list and decoder), `inline_decode` (owned, one reused
//! `InlineDecoder`, bodies one at a time).
//!
//! Run: `cargo bench -p fusee-benches --bench core_record -- --warm-up-time 1
//! --measurement-time 3`

#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fusee_core::record::{
    InlineDecoder, Record, RecordRef, Status, body_len, decode_canonical_all, encode_canonical,
    iter_canonical,
};

const RECORDS: usize = 1_000;

fn steps(payload: &[u8]) -> Vec<RecordRef<'_>> {
    (0..RECORDS as u32)
        .map(|seq| Record::Step {
            run: 12_345,
            seq,
            name: "charge-card",
            attempt: 1,
            status: Status::Ok,
            payload,
            ended_ms: None,
        })
        .collect()
}

fn starts() -> Vec<RecordRef<'static>> {
    (0..RECORDS as u64)
        .map(|run| Record::Start {
            run: 1_000 + run,
            id: "order-2026-11-29-000042",
            wtype: "checkout",
            version: 3,
            codec: 1,
            started_ms: 1_795_000_000_000 + run,
            deadline_ms: 0,
            parent: None,
            policy: 0,
            from: None,
            copies: 0,
            update: None,
            input: &b"{}"[..],
            meta: None,
        })
        .collect()
}

fn shape(c: &mut Criterion, name: &str, recs: &[RecordRef<'_>]) {
    let mut journal = Vec::new();
    for r in recs {
        encode_canonical(r, &mut journal);
    }
    eprintln!(
        "{name}: {} canonical bytes per record ({} body)",
        journal.len() / recs.len(),
        body_len(&recs[0])
    );
    let mut g = c.benchmark_group(format!("core_record/{name}"));
    g.throughput(Throughput::Elements(recs.len() as u64));

    let mut out = Vec::with_capacity(journal.len());
    g.bench_function("encode", |b| {
        b.iter(|| {
            out.clear();
            for r in recs {
                encode_canonical(black_box(r), &mut out);
            }
            black_box(out.len())
        })
    });
    g.bench_function("decode_ref", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for item in iter_canonical(black_box(&journal)) {
                let (rec, _) = item.expect("valid journal");
                n += rec.run();
            }
            n
        })
    });
    g.bench_function("decode_all", |b| {
        b.iter(|| decode_canonical_all(black_box(&journal)).expect("valid journal"))
    });
    let bodies: Vec<&[u8]> = iter_canonical(&journal)
        .map(|item| {
            let (_, whole) = item.expect("valid journal");
            // A one-byte prefix: every body here is under 128 bytes.
            &whole[1..]
        })
        .collect();
    let mut inline = InlineDecoder::new();
    g.bench_function("inline_decode", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for body in &bodies {
                n += inline.decode(black_box(body)).expect("valid body").run();
            }
            n
        })
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    let payload = [0x5au8; 100];
    shape(c, "step_100B", &steps(&payload));
    shape(c, "start", &starts());
}

criterion_group!(benches, bench);
criterion_main!(benches);
