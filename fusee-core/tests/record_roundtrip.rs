//! Property round trips of the canonical encoding for every record kind.
//!
//! Environment:
//! - `FUSEE_PROPTEST_CASES`: random records in total (default 20,000, kinds
//!   taken in turn so each gets an equal share).
//! - `FUSEE_SEED`: the seed (default fixed; printed on failure).

mod common;

use std::sync::Arc;

use common::{canonical, env_or, hex, record, seed, strings};
use fusee_core::record::{
    InlineDecoder, RecordBuf, body_len, check_limits, decode_body, decode_canonical_all,
    encode_body, iter_canonical, kind,
};
use fusee_core::wire::{Reader, varint_len};

/// Records per journal in the batch checks (a fresh decoder per journal
/// remembers at most 64 * 4 strings, well under its cache bound).
const BATCH: usize = 64;

/// One record through every encoder and decoder, alone.
fn check_one(rec: &RecordBuf, inline: &mut InlineDecoder, ctx: &str) {
    let enc = canonical(rec);
    assert_eq!(
        canonical(&rec.to_ref()),
        enc,
        "{ctx}: Ref and Buf encode alike"
    );
    assert_eq!(check_limits(rec), Ok(()), "{ctx}");

    let mut r = Reader::new(&enc);
    let len = r.varint().expect("length prefix") as usize;
    let prefix = r.position();
    assert_eq!(prefix, varint_len(len as u64), "{ctx}");
    assert_eq!(len, body_len(rec), "{ctx}");
    assert_eq!(enc.len(), prefix + len, "{ctx}");
    let body = &enc[prefix..];
    let mut only_body = Vec::new();
    encode_body(rec, &mut only_body);
    assert_eq!(only_body, body, "{ctx}");
    assert_eq!(body[0], rec.kind(), "{ctx}: the tag comes first");

    let dec = decode_body(body).unwrap_or_else(|e| panic!("{ctx}: {e} in {}", hex(body)));
    assert_eq!(dec, rec.to_ref(), "{ctx}");
    assert_eq!(dec.to_buf(), *rec, "{ctx}");
    assert_eq!(canonical(&dec), enc, "{ctx}: re-encoding the Ref");
    assert_eq!(canonical(&dec.to_buf()), enc, "{ctx}: re-encoding the Buf");

    let owned = inline.decode(body).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(owned, *rec, "{ctx}");
    assert_eq!(canonical(&owned), enc, "{ctx}");

    let items: Vec<_> = iter_canonical(&enc).collect();
    assert_eq!(items, vec![Ok((rec.to_ref(), &enc[..]))], "{ctx}");
    assert_eq!(decode_canonical_all(&enc), Ok(vec![rec.clone()]), "{ctx}");
}

/// A journal of records through the list decoders, and name sharing.
fn check_batch(recs: &[RecordBuf], ctx: &str) {
    let mut journal = Vec::new();
    let mut ends = Vec::new();
    for rec in recs {
        fusee_core::record::encode_canonical(rec, &mut journal);
        ends.push(journal.len());
    }
    assert_eq!(decode_canonical_all(&journal).as_deref(), Ok(recs), "{ctx}");

    let mut start = 0;
    let mut n = 0;
    for (item, (rec, end)) in iter_canonical(&journal).zip(recs.iter().zip(&ends)) {
        let (got, whole) = item.unwrap_or_else(|e| panic!("{ctx}: record {n}: {e}"));
        assert_eq!(got, rec.to_ref(), "{ctx}: record {n}");
        assert_eq!(whole, &journal[start..*end], "{ctx}: record {n}'s bytes");
        start = *end;
        n += 1;
    }
    assert_eq!(n, recs.len(), "{ctx}");
    assert_eq!(iter_canonical(&journal).count(), recs.len(), "{ctx}");

    let mut inline = InlineDecoder::new();
    let owned = inline.decode_all(&journal).unwrap();
    assert_eq!(owned, recs, "{ctx}");
    let mut again = Vec::new();
    for rec in &owned {
        fusee_core::record::encode_canonical(rec, &mut again);
    }
    assert_eq!(again, journal, "{ctx}");

    // Equal (cacheable) strings share one allocation; different ones never.
    let names: Vec<_> = owned.iter().flat_map(strings).collect();
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            let shared = Arc::ptr_eq(a, b);
            if a != b {
                assert!(!shared, "{ctx}: {a:?} and {b:?} share");
            } else if a.len() <= 256 {
                assert!(shared, "{ctx}: {a:?} is not shared");
            }
        }
    }
}

#[test]
fn every_kind_round_trips() {
    let cases: usize = env_or("FUSEE_PROPTEST_CASES", 20_000);
    let seed = seed(0x7265_636f_7264);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut inline = InlineDecoder::new();
    let mut batch = Vec::with_capacity(BATCH);
    let mut per_kind = [0usize; kind::ALL.len()];
    for i in 0..cases {
        let tag = kind::ALL[i % kind::ALL.len()];
        let rec = record(&mut rng, tag, true);
        per_kind[usize::from(tag) - 1] += 1;
        let ctx = format!("seed {seed:#x} case {i} ({})", rec.kind_name());
        check_one(&rec, &mut inline, &ctx);
        batch.push(rec);
        if batch.len() == BATCH || i + 1 == cases {
            check_batch(&batch, &ctx);
            batch.clear();
        }
    }
    if cases >= kind::ALL.len() {
        assert!(per_kind.iter().all(|&n| n > 0), "{per_kind:?}");
    }
}

/// Sharing holds across journals decoded by one decoder, until its bounded
/// cache starts over.
#[test]
fn inline_decoder_shares_across_calls() {
    let seed = seed(0x0053_4841_5245);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut inline = InlineDecoder::new();
    let mut first: Option<Arc<str>> = None;
    for i in 0..100 {
        let mut rec = record(&mut rng, kind::STEP, false);
        if let fusee_core::Record::Step { name, .. } = &mut rec {
            *name = Arc::from("shared-step");
        }
        let owned = inline.decode_all(&canonical(&rec)).unwrap();
        let name = strings(&owned[0]).remove(0);
        match &first {
            None => first = Some(name),
            Some(f) => assert!(Arc::ptr_eq(f, &name), "seed {seed:#x} call {i}"),
        }
    }
    assert!(inline.remembered() <= 1024);
}

/// `set_run` changes the run and nothing else, and `seq` is the field that
/// follows the run in the body of exactly the kinds that have one.
#[test]
fn set_run_and_seq_match_the_encoding() {
    let seed = seed(0x0053_4554_5255);
    let mut rng = fastrand::Rng::with_seed(seed);
    let with_seq = [
        kind::STEP,
        kind::ATTEMPT,
        kind::RESUME,
        kind::TIMER,
        kind::FIRED,
        kind::WAIT,
        kind::WAITED,
        kind::VALUE,
        kind::CHILD,
        kind::CHILD_DONE,
        kind::SEND,
        kind::HEARTBEAT,
        kind::PATCH,
        kind::AWAITING,
        kind::COMPLETED,
        kind::CHUNK,
        kind::STREAM_END,
        kind::BEGAN,
    ];
    for round in 0..50 {
        for tag in kind::ALL {
            let rec = record(&mut rng, tag, false);
            let ctx = format!("seed {seed:#x}, round {round}, {}", rec.kind_name());
            let to = rng.u64(..);
            let mut moved = rec.clone();
            moved.set_run(to);
            assert_eq!(moved.run(), to, "{ctx}");
            moved.set_run(rec.run());
            assert_eq!(moved, rec, "{ctx}: only the run changed");

            let mut body = Vec::new();
            encode_body(&rec, &mut body);
            let mut r = Reader::new(&body[1..]);
            r.varint().expect("run");
            match rec.seq() {
                Some(seq) => {
                    assert!(with_seq.contains(&tag), "{ctx}: has no seq field");
                    assert_eq!(r.varint().ok(), Some(u64::from(seq)), "{ctx}");
                }
                None => assert!(!with_seq.contains(&tag), "{ctx}: seq missing"),
            }
        }
    }
}
