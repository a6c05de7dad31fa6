//! Decoder fuzz smoke: malformed canonical records never make a decoder
//! panic or allocate more than its input justifies, and whatever decodes is
//! exactly the canonical encoding of what it decoded to.
//!
//! Inputs mix random bytes, random bodies behind a valid tag, valid journals
//! with flipped bytes, truncated at random points, with their length prefix
//! inflated (64 MiB + 1, 128 MiB + 1, 4 GiB, 2^64 - 1) or an inner length
//! replaced by a huge varint, valid journals with junk behind, and valid
//! journals unchanged. Each goes through `decode_body`,
//! `decode_canonical_all`, `iter_canonical`, one long-lived `InlineDecoder`
//! and random `wire::Reader` calls.
//!
//! Environment:
//! - `FUSEE_FUZZ_ITERS`: inputs per run (default 1,000,000).
//! - `FUSEE_SEED`: the seed (default fixed; printed with the failing input).

mod common;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use common::{canonical, env_or, hex, record, seed};
use fusee_core::record::{
    InlineDecoder, MAX_BODY, RecordBuf, RecordRef, check_limits, decode_body, decode_canonical_all,
    encode_body, encode_canonical, iter_canonical, kind,
};
use fusee_core::wire::{MAX_PAYLOAD, Reader, put_varint};

/// Valid records the mutations start from.
const POOL: usize = 2_048;

/// Huge lengths a hostile or corrupt prefix may claim.
const INFLATED: [u64; 5] = [
    MAX_PAYLOAD as u64 + 1,
    MAX_BODY as u64 + 1,
    4 << 30,
    u64::MAX,
    u32::MAX as u64,
];

struct Fuzz {
    rng: fastrand::Rng,
    pool: Vec<Vec<u8>>,
}

impl Fuzz {
    /// 1 to 3 valid canonical records from the pool, concatenated.
    fn valid(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..self.rng.usize(1..=3) {
            out.extend_from_slice(&self.pool[self.rng.usize(0..self.pool.len())]);
        }
        out
    }

    fn input(&mut self) -> Vec<u8> {
        let rng = &mut self.rng;
        match rng.u8(0..8) {
            0 => {
                let mut v = vec![0u8; rng.usize(0..48)];
                rng.fill(&mut v);
                v
            }
            1 => {
                // A valid tag and run, then random bytes: reaches the fields.
                let mut v = vec![rng.u8(0..26), rng.u8(1..128)];
                let mut tail = vec![0u8; rng.usize(0..40)];
                rng.fill(&mut tail);
                v.extend_from_slice(&tail);
                v
            }
            2 => {
                let mut v = self.valid();
                for _ in 0..self.rng.usize(1..=4) {
                    let i = self.rng.usize(0..v.len());
                    if self.rng.bool() {
                        v[i] ^= 1 << self.rng.u32(0..8);
                    } else {
                        v[i] = self.rng.u8(..);
                    }
                }
                v
            }
            3 => {
                let mut v = self.valid();
                v.truncate(self.rng.usize(0..v.len()));
                v
            }
            4 => {
                // Replace the first record's length prefix.
                let v = self.valid();
                let mut r = Reader::new(&v);
                let _ = r.varint();
                let mut out = Vec::new();
                put_varint(&mut out, INFLATED[self.rng.usize(0..INFLATED.len())]);
                out.extend_from_slice(r.rest());
                out
            }
            5 => {
                // Overwrite 0 to 2 bytes anywhere with a huge varint: often an
                // inner length prefix.
                let v = self.valid();
                let at = self.rng.usize(0..v.len());
                let end = (at + self.rng.usize(0..3)).min(v.len());
                let mut out = v[..at].to_vec();
                put_varint(&mut out, INFLATED[self.rng.usize(0..INFLATED.len())]);
                out.extend_from_slice(&v[end..]);
                out
            }
            6 => {
                let mut v = self.valid();
                let mut junk = vec![0u8; self.rng.usize(1..8)];
                self.rng.fill(&mut junk);
                v.extend_from_slice(&junk);
                v
            }
            _ => self.valid(),
        }
    }
}

fn reencode_all<S: AsRef<str>, B: AsRef<[u8]>>(
    recs: impl IntoIterator<Item = fusee_core::Record<S, B>>,
) -> Vec<u8> {
    let mut out = Vec::new();
    for r in recs {
        encode_canonical(&r, &mut out);
    }
    out
}

fn owned_bytes(rec: &RecordBuf) -> usize {
    let mut n = 0;
    rec.map(|s| n += s.len(), |_| ());
    let mut m = 0;
    rec.map(|_| (), |b| m += b.len());
    n + m
}

/// Every decoder on one input; panics (with a reason) on a broken promise.
fn check(input: &[u8], inline: &mut InlineDecoder, rng: &mut fastrand::Rng) {
    // One body, as given and behind a 1-byte prefix.
    for body in [input, input.get(1..).unwrap_or(&[])] {
        let got = decode_body(body);
        if let Ok(rec) = &got {
            let mut again = Vec::new();
            encode_body(rec, &mut again);
            assert_eq!(again, body, "decoded body is not canonical");
            assert_eq!(check_limits(rec), Ok(()));
        }
        let owned = inline.decode(body);
        assert_eq!(
            owned.as_ref().map(RecordBuf::to_ref).map_err(|e| *e),
            got.clone(),
            "InlineDecoder::decode disagrees with decode_body"
        );
    }

    // A journal.
    let all = decode_canonical_all(input);
    if let Ok(recs) = &all {
        assert_eq!(reencode_all(recs.iter().cloned()), input, "not canonical");
        assert!(
            recs.capacity() <= (input.len() / 2).max(4),
            "{} records' room for {} bytes",
            recs.capacity(),
            input.len()
        );
        let payload: usize = recs.iter().map(owned_bytes).sum();
        assert!(
            payload <= input.len(),
            "{payload} bytes owned from {}",
            input.len()
        );
    }
    assert_eq!(
        inline.decode_all(input),
        all,
        "InlineDecoder::decode_all disagrees with decode_canonical_all"
    );

    // The streaming walk: good records cover a prefix, then at most one error.
    let mut covered = 0;
    let mut good: Vec<RecordRef<'_>> = Vec::new();
    let mut failed = false;
    for item in iter_canonical(input) {
        assert!(!failed, "an item after an error");
        match item {
            Ok((rec, whole)) => {
                assert_eq!(whole, &input[covered..covered + whole.len()]);
                let mut again = Vec::new();
                encode_canonical(&rec, &mut again);
                assert_eq!(again, whole, "a yielded record is not its bytes");
                covered += whole.len();
                good.push(rec);
            }
            Err(e) => {
                assert!(!e.reason.is_empty());
                failed = true;
            }
        }
        assert!(good.len() <= input.len() / 4, "records from nothing");
    }
    assert_eq!(failed, all.is_err(), "iterator and list disagree");
    if let Ok(recs) = &all {
        assert_eq!(covered, input.len());
        assert_eq!(recs.iter().map(RecordBuf::to_ref).collect::<Vec<_>>(), good);
    }

    // Raw reader calls.
    let mut r = Reader::new(input);
    for _ in 0..8 {
        let before = r.position();
        let ok = match rng.u8(0..11) {
            0 => r.u8().is_ok(),
            1 => r.u16().is_ok(),
            2 => r.u32().is_ok(),
            3 => r.u64().is_ok(),
            4 => r.varint().is_ok(),
            5 => r.varint32().is_ok(),
            6 => match r.len_prefix() {
                Ok(n) => n <= r.remaining() && n <= MAX_PAYLOAD,
                Err(_) => true,
            },
            7 => match r.bytes() {
                Ok(b) => b.len() <= input.len(),
                Err(_) => true,
            },
            8 => match r.str() {
                Ok(s) => s.len() <= input.len(),
                Err(_) => true,
            },
            9 => r.take(rng.usize(0..=input.len() + 2)).is_ok(),
            _ => r.array::<3>().is_ok(),
        };
        let _ = ok;
        assert!(r.position() >= before);
        assert_eq!(r.position() + r.remaining(), input.len());
    }
    let _ = r.finish();
}

#[test]
fn decoders_survive_garbage() {
    let iters: usize = env_or("FUSEE_FUZZ_ITERS", 1_000_000);
    let seed = seed(0x6675_7a7a);
    let mut rng = fastrand::Rng::with_seed(seed);
    let pool = (0..POOL)
        .map(|i| canonical(&record(&mut rng, kind::ALL[i % kind::ALL.len()], false)))
        .collect();
    let mut fuzz = Fuzz { rng, pool };
    let mut inline = InlineDecoder::new();
    let mut calls = fastrand::Rng::with_seed(seed ^ 1);
    let mut decoded = 0usize;
    let mut reasons: BTreeMap<&'static str, usize> = BTreeMap::new();
    for i in 0..iters {
        let input = fuzz.input();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            check(&input, &mut inline, &mut calls);
        }));
        if outcome.is_err() {
            panic!(
                "seed {seed:#x} input {i} (FUSEE_SEED={seed}): {}",
                hex(&input)
            );
        }
        match decode_canonical_all(&input) {
            Ok(_) => decoded += 1,
            Err(e) => *reasons.entry(e.reason).or_default() += 1,
        }
        if let Err(e) = decode_body(input.get(1..).unwrap_or(&[])) {
            *reasons.entry(e.reason).or_default() += 1;
        }
        assert!(inline.remembered() <= 1024);
    }
    // The mutations must leave a real share of inputs valid, or the accept
    // path goes unexercised.
    assert!(
        iters < 1000 || decoded * 10 > iters,
        "only {decoded} of {iters} inputs decoded"
    );
    eprintln!("seed {seed:#x}: {decoded} of {iters} inputs decoded; refusals: {reasons:?}");
    // Every rejection rule must be reached, or the mutations went blind.
    if iters >= 100_000 {
        for reason in [
            "unknown record kind",
            "run ID outside 1..=2^48-1",
            "varint not in its shortest form",
            "varint overflows 32 bits",
            "length over the payload limit",
            "length past the end of input",
            "record length over the body limit",
            "record length past the end of input",
            "empty record body",
            "string is not UTF-8",
            "unknown status",
            "option marker is neither 0 nor 1",
            "unknown wait outcome",
            "trailing bytes",
            "truncated",
            "truncated varint",
            "varint overflows 64 bits",
        ] {
            assert!(reasons.contains_key(reason), "never refused for {reason:?}");
        }
    }
}
