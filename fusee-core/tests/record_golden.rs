//! Golden bytes of the canonical encoding: an on-disk format, so these
//! vectors must never change.
//!
//! The samples are written field by field by name here, independent of the
//! record table in `fusee_core::record` (a table that swapped two fields of
//! one wire type would still round-trip; only named samples catch it). Five
//! value sets cover every kind: zeros and every option absent, maxima and
//! every option present, varint boundaries, long strings and payloads (a
//! 3-byte length prefix), and a mix. Pinned: the full hex of two sets, a
//! CRC-32 and length of every set, what the accessors say of each record,
//! and what the decoder says (the value, or its exact reason) of every
//! truncation and of thousands of single-byte changes.

use std::collections::BTreeMap;

use fusee_core::record::{
    CancelGrace, MAX_RUN, Origin, PAUSED, ParentRef, Record, RecordRef, StartMeta, StartUpdate,
    Status, WaitOutcome, check_limits, decode_body, decode_canonical_all, encode_body,
    encode_canonical, iter_canonical,
};

/// The values one sample set gives its records' fields.
struct Vals {
    run: u64,
    other_run: u64,
    a32: u32,
    b32: u32,
    a64: u64,
    b64: u64,
    byte: u8,
    s1: String,
    s2: String,
    p1: Vec<u8>,
    p2: Vec<u8>,
    status: Status,
    outcome: WaitOutcome,
    /// Which options are present: parent, from, update, meta, by, caller.
    some: [bool; 6],
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

fn sets() -> Vec<Vals> {
    vec![
        // Zeros, empties, every option absent.
        Vals {
            run: 1,
            other_run: 1,
            a32: 0,
            b32: 0,
            a64: 0,
            b64: 0,
            byte: 0,
            s1: String::new(),
            s2: String::new(),
            p1: Vec::new(),
            p2: Vec::new(),
            status: Status::Ok,
            outcome: WaitOutcome::Signal(0),
            some: [false; 6],
        },
        // Short values, every option present.
        Vals {
            run: 5,
            other_run: 300,
            a32: 2,
            b32: 1,
            a64: 1_000,
            b64: 7,
            byte: 6,
            s1: "a".into(),
            s2: "日本".into(),
            p1: b"hi".to_vec(),
            p2: b"{}".to_vec(),
            status: Status::Failed,
            outcome: WaitOutcome::TimedOut,
            some: [true; 6],
        },
        // Maxima.
        Vals {
            run: MAX_RUN,
            other_run: MAX_RUN,
            a32: u32::MAX,
            b32: u32::MAX,
            a64: u64::MAX,
            b64: PAUSED,
            byte: u8::MAX,
            s1: "🦀 ünïcødé \u{10FFFF}".into(),
            s2: "a\u{0}b".into(),
            p1: pattern(300, 1),
            p2: vec![0xff; 16],
            status: Status::Reset,
            outcome: WaitOutcome::Signal(u64::MAX),
            some: [true; 6],
        },
        // Varint boundaries.
        Vals {
            run: 128,
            other_run: 16_384,
            a32: 127,
            b32: 128,
            a64: 16_383,
            b64: 1 << 56,
            byte: 0x80,
            s1: "x".repeat(127),
            s2: "y".repeat(128),
            p1: pattern(127, 2),
            p2: pattern(128, 3),
            status: Status::ContinuedAsNew,
            outcome: WaitOutcome::Abandoned,
            some: [true, false, true, false, true, false],
        },
        // Long strings and payloads, the other options present.
        Vals {
            run: 1 << 35,
            other_run: 2,
            a32: 1 << 31,
            b32: 3,
            a64: 1_795_000_000_000,
            b64: u64::from(u32::MAX) + 1,
            byte: 1,
            s1: "z".repeat(20_000),
            s2: "é".repeat(300),
            p1: pattern(70_000, 4),
            p2: Vec::new(),
            status: Status::Terminated,
            outcome: WaitOutcome::Signal(128),
            some: [false, true, false, true, false, true],
        },
    ]
}

/// Every kind once, from `v`, each field named; statuses rotate so each
/// appears across the sets.
fn every_kind(v: &Vals) -> Vec<RecordRef<'_>> {
    let (s1, s2, p1, p2) = (v.s1.as_str(), v.s2.as_str(), &v.p1[..], &v.p2[..]);
    let [parent, from, update, meta, by, caller] = v.some;
    let parent_ref = ParentRef {
        shard: v.b32,
        run: v.other_run,
        seq: v.a32,
    };
    let status2 = Status::ALL[(v.status as usize + 3) % Status::ALL.len()];
    vec![
        Record::Start {
            run: v.run,
            id: s1,
            wtype: s2,
            version: v.a32,
            codec: v.byte,
            started_ms: v.a64,
            deadline_ms: v.b64,
            parent: parent.then_some(parent_ref),
            policy: v.byte.wrapping_add(1),
            from: from.then_some(Origin {
                run: v.other_run,
                cause: v.byte,
            }),
            copies: v.b32,
            update: update.then(|| {
                Box::new(StartUpdate {
                    id: s2,
                    name: s1,
                    payload: p2,
                })
            }),
            input: p1,
            meta: meta.then(|| {
                Box::new(StartMeta {
                    attributes: p2,
                    memo: p1,
                })
            }),
        },
        Record::Step {
            run: v.run,
            seq: v.a32,
            name: s1,
            attempt: v.b32,
            status: v.status,
            payload: p1,
            ended_ms: None,
        },
        Record::Attempt {
            run: v.run,
            seq: v.a32,
            name: s2,
            attempt: v.b32,
            retry_at_ms: v.b64,
            error: p1,
            ended_ms: None,
        },
        Record::Resume {
            run: v.run,
            seq: v.b32,
        },
        Record::Timer {
            run: v.run,
            seq: v.a32,
            name: s1,
            fire_at_ms: v.a64,
        },
        Record::Fired {
            run: v.run,
            seq: v.a32,
        },
        Record::Signal {
            run: v.run,
            name: s2,
            dedup: v.b64,
            payload: p1,
            by: by.then_some(p2),
        },
        Record::Wait {
            run: v.run,
            seq: v.b32,
            name: s1,
            deadline_ms: v.b64,
        },
        Record::Waited {
            run: v.run,
            seq: v.a32,
            outcome: v.outcome,
        },
        Record::Value {
            run: v.run,
            seq: v.a32,
            kind: v.byte,
            value: p2,
        },
        Record::Child {
            run: v.run,
            seq: v.a32,
            wtype: s2,
            id: s1,
            flags: v.byte,
            deadline_ms: v.a64,
            input: p1,
        },
        Record::ChildDone {
            run: v.run,
            seq: v.b32,
            status: status2,
            payload: p2,
        },
        Record::Send {
            run: v.run,
            seq: v.a32,
            target: s1,
            name: s2,
            payload: p1,
        },
        Record::Cancel {
            run: v.run,
            reason: p2,
            by: by.then_some(p1),
            grace: None,
        },
        Record::Update {
            run: v.run,
            id: s2,
            name: s1,
            payload: p1,
            caller: caller.then_some(ParentRef {
                shard: v.a32,
                run: v.other_run,
                seq: v.b32,
            }),
        },
        Record::UpdateDone {
            run: v.run,
            ordinal: v.a64,
            status: v.status,
            payload: p2,
        },
        Record::Heartbeat {
            run: v.run,
            seq: v.a32,
            attempt: v.b32,
            payload: p1,
        },
        Record::Patch {
            run: v.run,
            seq: v.b32,
            id: s2,
        },
        Record::Awaiting {
            run: v.run,
            seq: v.a32,
            name: s1,
            attempt: v.b32,
        },
        Record::Completed {
            run: v.run,
            seq: v.b32,
            attempt: v.a32,
            status: status2,
            payload: p1,
        },
        Record::Attributes {
            run: v.run,
            payload: p2,
        },
        Record::Chunk {
            run: v.run,
            seq: v.a32,
            payload: p1,
        },
        Record::StreamEnd {
            run: v.run,
            seq: v.b32,
        },
        Record::Done {
            run: v.run,
            status: status2,
            finished_ms: v.a64,
            payload: p1,
            by: by.then_some(p2),
        },
    ]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn canonical(rec: &RecordRef<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_canonical(rec, &mut out);
    out
}

fn body(rec: &RecordRef<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_body(rec, &mut out);
    out
}

/// Set 0 (zeros, no options), one canonical record a line.
const ZEROS_HEX: [&str; 24] = [
    "0f010100000000000000010000000000", // Start
    "0702010000000000",                 // Step
    "0703010000000000",                 // Attempt
    "03040100",                         // Resume
    "050501000000",                     // Timer
    "03060100",                         // Fired
    "06070100000000",                   // Signal
    "050801000000",                     // Wait
    "050901000000",                     // Waited
    "050a01000000",                     // Value
    "080b01000000000000",               // Child
    "050c01000300",                     // ChildDone
    "060d0100000000",                   // Send
    "040e010000",                       // Cancel
    "060f0100000000",                   // Update
    "051001000000",                     // UpdateDone
    "051101000000",                     // Heartbeat
    "0412010000",                       // Patch
    "051301000000",                     // Awaiting
    "06140100000300",                   // Completed
    "03150100",                         // Attributes
    "0416010000",                       // Chunk
    "03170100",                         // StreamEnd
    "06180103000000",                   // Done
];

/// Set 1 (short values, every option present), one canonical record a line.
const SHORT_HEX: [&str; 24] = [
    "320105016106e697a5e69cac0206e807070101ac02020701ac0206010106e697a5e69cac0161027b7d02686901027b7d026869", // Start
    "0a02050201610101026869",                   // Step
    "0f03050206e697a5e69cac0107026869",         // Attempt
    "03040501",                                 // Resume
    "070505020161e807",                         // Timer
    "03060502",                                 // Fired
    "11070506e697a5e69cac0702686901027b7d",     // Signal
    "06080501016107",                           // Wait
    "0409050201",                               // Waited
    "070a050206027b7d",                         // Value
    "120b050206e697a5e69cac016106e807026869",   // Child
    "070c050104027b7d",                         // ChildDone
    "0f0d0502016106e697a5e69cac026869",         // Send
    "090e05027b7d01026869",                     // Cancel
    "130f0506e697a5e69cac01610268690102ac0201", // Update
    "081005e80701027b7d",                       // UpdateDone
    "0711050201026869",                         // Heartbeat
    "0a12050106e697a5e69cac",                   // Patch
    "06130502016101",                           // Awaiting
    "081405010204026869",                       // Completed
    "051505027b7d",                             // Attributes
    "06160502026869",                           // Chunk
    "03170501",                                 // StreamEnd
    "0c180504e80702686901027b7d",               // Done
];

/// Per set: (CRC-32 of the concatenated canonical records, their length).
const SET_DIGESTS: [(u32, usize); 5] = [
    (3341245408, 155),
    (3169089506, 279),
    (3208162690, 4817),
    (2438125078, 4989),
    (309176632, 1004656),
];

#[test]
fn every_kind_encodes_to_its_golden_bytes() {
    let sets = sets();
    let mut printed = String::new();
    let mut failed = false;
    for (i, v) in sets.iter().enumerate() {
        let recs = every_kind(v);
        assert_eq!(recs.len(), 24);
        let mut all = Vec::new();
        for (k, rec) in recs.iter().enumerate() {
            let bytes = canonical(rec);
            let b = body(rec);
            assert!(
                bytes.ends_with(&b),
                "set {i} kind {k}: body after the prefix"
            );
            assert_eq!(decode_body(&body(rec)), Ok(rec.clone()), "set {i} kind {k}");
            let want = match i {
                0 => Some(ZEROS_HEX[k]),
                1 => Some(SHORT_HEX[k]),
                _ => None,
            };
            if let Some(want) = want {
                printed.push_str(&format!("set {i} kind {k}: \"{}\",\n", hex(&bytes)));
                failed |= hex(&bytes) != want;
            }
            all.extend_from_slice(&bytes);
        }
        let owned = decode_canonical_all(&all).expect("the set decodes");
        assert_eq!(owned.len(), 24);
        for (rec, got) in recs.iter().zip(&owned) {
            assert_eq!(got.to_ref(), *rec, "set {i}");
        }
        let digest = (crc32fast::hash(&all), all.len());
        printed.push_str(&format!("set {i} digest: {digest:?}\n"));
        failed |= digest != SET_DIGESTS[i];
    }
    assert!(!failed, "golden bytes changed:\n{printed}");
}

/// What the accessors say of every sample, and what the limit check says.
#[test]
fn accessors_agree_with_the_golden_list() {
    let mut lines = String::new();
    for (i, v) in sets().iter().enumerate() {
        for rec in every_kind(v) {
            let mut moved = rec.clone();
            moved.set_run(42);
            assert_eq!(moved.run(), 42);
            assert_eq!(moved.kind(), rec.kind());
            let mut names = Vec::new();
            rec.map(|s| names.push(s.len()), |b| b.len());
            lines.push_str(&format!(
                "{i} {} {} run={} seq={:?} strs={names:?} limits={:?}\n",
                rec.kind(),
                rec.kind_name(),
                rec.run(),
                rec.seq(),
                check_limits(&rec).is_ok(),
            ));
        }
    }
    let digest = (crc32fast::hash(lines.as_bytes()), lines.len());
    assert_eq!(digest, (4105917804, 7022), "accessors changed:\n{lines}");
}

/// Every malformed variant of the small samples' bodies, decoded: the
/// outcome (the record re-encoded, or the exact reason) of each is folded
/// into a digest, and the count of each reason pinned in full.
#[test]
fn decoder_rejects_exactly_what_it_rejected() {
    let mut hasher = crc32fast::Hasher::new();
    let mut reasons: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut note = |bytes: &[u8]| {
        let outcome = match decode_body(bytes) {
            Ok(rec) => {
                *reasons.entry("ok").or_default() += 1;
                format!("ok {}", hex(&body(&rec)))
            }
            Err(e) => {
                *reasons.entry(e.reason).or_default() += 1;
                format!("err {}", e.reason)
            }
        };
        hasher.update(outcome.as_bytes());
        hasher.update(b"\n");
    };
    let sets = sets();
    for v in &sets[..4] {
        for rec in every_kind(v) {
            let good = body(&rec);
            let near = |i: usize| i < 48 || i + 8 >= good.len();
            for cut in (0..good.len()).filter(|&i| near(i)) {
                note(&good[..cut]);
            }
            note(&[&good[..], &[0]].concat());
            for i in (0..good.len()).filter(|&i| near(i)) {
                let b = good[i];
                for x in [0x00, 0x01, 0x02, 0x7f, 0x80, 0xff, b ^ 1, b.wrapping_add(1)] {
                    let mut bad = good.clone();
                    bad[i] = x;
                    note(&bad);
                }
                // A byte inserted and a byte removed shift every later field.
                let mut longer = good.clone();
                longer.insert(i, 0x81);
                note(&longer);
                let mut shorter = good.clone();
                shorter.remove(i);
                note(&shorter);
            }
            // The framing too: every torn canonical record is refused.
            let whole = canonical(&rec);
            for cut in (1..whole.len()).filter(|&i| near(i)) {
                let mut it = iter_canonical(&whole[..cut]);
                assert!(matches!(it.next(), Some(Err(_))), "{cut}");
            }
        }
    }
    let digest = hasher.finalize();
    let got: Vec<(&str, usize)> = reasons.into_iter().collect();
    let want: &[(&str, usize)] = &[
        ("length over the payload limit", 398),
        ("length past the end of input", 3423),
        ("ok", 14203),
        ("option marker is neither 0 nor 1", 708),
        ("run ID outside 1..=2^48-1", 447),
        ("string is not UTF-8", 3569),
        ("trailing bytes", 1394),
        ("truncated", 258),
        ("truncated varint", 1125),
        ("unknown record kind", 532),
        ("unknown status", 341),
        ("unknown wait outcome", 52),
        ("varint not in its shortest form", 907),
        ("varint overflows 32 bits", 327),
        ("varint overflows 64 bits", 242),
    ];
    // Tag 25 (`Began`) became a kind: of the samples' bytes changed to
    // 25, eight now read as one (two whole, six cut short or too long)
    // rather than "unknown record kind"; no other outcome moved.
    // `Step` and `Attempt` then grew their `ended_ms` tail: 66 of their
    // changed bodies that had bytes left after the payload or error (one
    // appended, a length made shorter) read as a record with an end time
    // rather than "trailing bytes" (1506 then, 14134 ok); nothing else
    // moved. `Cancel` then grew its `grace` tail: of its changed bodies
    // with bytes left after `by`, 3 read as a cancel with a grace and 43
    // as a grace cut short ("truncated varint") rather than "trailing
    // bytes" (1440 then, 1082 truncated varints, 14200 ok).
    assert_eq!(
        (digest, &got[..]),
        (534624794, want),
        "decoder outcomes changed"
    );
}

/// Kinds and tail fields added after the five sets' pins were taken, one
/// sample each per set: pinned apart, so the pins of the older kinds (and
/// of `Step`, `Attempt` and `Cancel` without their tail) stay as they were.
fn later_kinds(v: &Vals) -> Vec<RecordRef<'_>> {
    let (s1, s2, p1) = (v.s1.as_str(), v.s2.as_str(), &v.p1[..]);
    vec![
        Record::Began {
            run: v.run,
            seq: v.a32,
            name: s1,
            attempt: v.b32,
            started_ms: v.a64,
        },
        // The samples of `every_kind`, with their end time.
        Record::Step {
            run: v.run,
            seq: v.a32,
            name: s1,
            attempt: v.b32,
            status: v.status,
            payload: p1,
            ended_ms: Some(v.b64),
        },
        Record::Attempt {
            run: v.run,
            seq: v.a32,
            name: s2,
            attempt: v.b32,
            retry_at_ms: v.b64,
            error: p1,
            ended_ms: Some(v.a64),
        },
        // `every_kind`'s cancel, with a grace.
        Record::Cancel {
            run: v.run,
            reason: &v.p2[..],
            by: v.some[4].then_some(p1),
            grace: Some(CancelGrace {
                until_ms: v.a64,
                grace_ms: v.b64,
            }),
        },
    ]
}

/// [`later_kinds`] of sets 0 and 1.
const LATER_HEX: [[&str; 4]; 2] = [
    [
        "06190100000000",     // Began, set 0
        "080201000000000000", // Step with ended_ms 0, set 0
        "080301000000000000", // Attempt with ended_ms 0, set 0
        "060e0100000000",     // Cancel with grace 0 until 0, set 0
    ],
    [
        "08190502016101e807",                   // Began, set 1
        "0b0205020161010102686907",             // Step with ended_ms 7, set 1
        "1103050206e697a5e69cac0107026869e807", // Attempt with ended_ms 1000, set 1
        "0c0e05027b7d01026869e80707",           // Cancel with grace 7 until 1000, set 1
    ],
];

#[test]
fn later_kinds_encode_to_their_golden_bytes_and_cover_every_tag() {
    let mut printed = String::new();
    let mut failed = false;
    let mut tags: std::collections::BTreeSet<u8> = std::collections::BTreeSet::new();
    for (i, v) in sets().iter().enumerate() {
        tags.extend(every_kind(v).iter().map(|r| r.kind()));
        for (k, rec) in later_kinds(v).iter().enumerate() {
            tags.insert(rec.kind());
            let bytes = canonical(rec);
            assert_eq!(decode_body(&body(rec)), Ok(rec.clone()), "set {i} kind {k}");
            let owned = decode_canonical_all(&bytes).expect("decodes");
            assert_eq!(owned.len(), 1);
            assert_eq!(owned[0].to_ref(), *rec, "set {i}");
            assert!(check_limits(rec).is_ok());
            if let Some(want) = LATER_HEX.get(i) {
                printed.push_str(&format!("set {i} kind {k}: \"{}\",\n", hex(&bytes)));
                failed |= hex(&bytes) != want[k];
            }
        }
    }
    assert!(!failed, "golden bytes changed:\n{printed}");
    let all: std::collections::BTreeSet<u8> = fusee_core::record::kind::ALL.into_iter().collect();
    assert_eq!(tags, all, "every kind has a golden sample");
}

/// `Step` and `Attempt` end with `ended_ms`, a tail: a body stored before
/// the field existed (nothing after the payload or error) reads as
/// `None` and is exactly what `None` encodes to; the time is the varint
/// after it. Bytes after the time, a time not in its shortest form or cut
/// short are refused, so each record keeps one form; kinds with no tail
/// still refuse any byte after their last field.
#[test]
fn end_time_is_a_tail_and_old_bodies_read_as_none() {
    let step = |ended_ms| -> RecordRef<'static> {
        Record::Step {
            run: 1,
            seq: 2,
            name: "a",
            attempt: 1,
            status: Status::Ok,
            payload: b"hi",
            ended_ms,
        }
    };
    let attempt = |ended_ms| -> RecordRef<'static> {
        Record::Attempt {
            run: 1,
            seq: 0,
            name: "",
            attempt: 1,
            retry_at_ms: PAUSED,
            error: b"",
            ended_ms,
        }
    };
    // Bodies as written before the field: the canonical module's example
    // and a paused attempt.
    let old_step: &[u8] = &[0x02, 0x01, 0x02, 0x01, 0x61, 0x01, 0x00, 0x02, 0x68, 0x69];
    let old_attempt: &[u8] = &[
        0x03, 0x01, 0x00, 0x00, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        0x00,
    ];
    // 1_700_000_000_000 ms: 6 bytes.
    let t = 1_700_000_000_000u64;
    let t_bytes: &[u8] = &[0x80, 0xd0, 0x95, 0xff, 0xbc, 0x31];
    for (old, make) in [
        (
            old_step,
            &step as &dyn Fn(Option<u64>) -> RecordRef<'static>,
        ),
        (old_attempt, &attempt),
    ] {
        assert_eq!(
            decode_body(old),
            Ok(make(None)),
            "an old body reads as None"
        );
        assert_eq!(body(&make(None)), old, "None writes nothing");
        let new = [old, t_bytes].concat();
        assert_eq!(decode_body(&new), Ok(make(Some(t))));
        assert_eq!(body(&make(Some(t))), new);
        assert_eq!(new.len() - old.len(), 6, "a timestamp's bytes");
        // 0 is a time like any other: one byte, not "absent".
        assert_eq!(decode_body(&[old, &[0]].concat()), Ok(make(Some(0))));
        for (bad, why) in [
            ([&new[..], &[0]].concat(), "trailing bytes"),
            ([&new[..], &new[..]].concat(), "trailing bytes"),
            (
                [old, &[0x80, 0x00]].concat(),
                "varint not in its shortest form",
            ),
            ([old, &[0x80]].concat(), "truncated varint"),
            (new[..new.len() - 1].to_vec(), "truncated varint"),
        ] {
            assert_eq!(
                decode_body(&bad).map_err(|e| e.reason),
                Err(why),
                "{}",
                hex(&bad)
            );
        }
    }
    // A journal across the upgrade: old and new records side by side.
    let mut journal = Vec::new();
    for rec in [step(None), attempt(Some(t)), step(Some(7)), attempt(None)] {
        encode_canonical(&rec, &mut journal);
    }
    let owned = decode_canonical_all(&journal).expect("decodes");
    let ended: Vec<Option<u64>> = owned
        .iter()
        .map(|r| match r {
            Record::Step { ended_ms, .. } | Record::Attempt { ended_ms, .. } => *ended_ms,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ended, [None, Some(t), Some(7), None]);
    // A kind without a tail still refuses a byte after its last field.
    let began = Record::Began {
        run: 1,
        seq: 2,
        name: "a",
        attempt: 1,
        started_ms: t,
    };
    let bad = [body(&began), vec![0]].concat();
    assert_eq!(
        decode_body(&bad).map_err(|e| e.reason),
        Err("trailing bytes")
    );
}

/// `Cancel` ends with `grace`, a tail of two varints (`until_ms`, then
/// `grace_ms`): a body stored before it existed (nothing after `by`) reads
/// as `None` and is exactly what `None` encodes to. A grace cut after its
/// first varint, or bytes after it, are refused, so a cancel and its grace
/// are one record in one form.
#[test]
fn a_cancels_grace_is_a_tail_and_old_bodies_read_as_none() {
    let cancel = |grace| -> RecordRef<'static> {
        Record::Cancel {
            run: 1,
            reason: b"no",
            by: None,
            grace,
        }
    };
    // As written before the field: tag 14, run 1, reason "no", no `by`.
    let old: &[u8] = &[0x0e, 0x01, 0x02, 0x6e, 0x6f, 0x00];
    assert_eq!(
        decode_body(old),
        Ok(cancel(None)),
        "an old body reads as None"
    );
    assert_eq!(body(&cancel(None)), old, "None writes nothing");
    let g = CancelGrace {
        until_ms: 1_700_000_000_000,
        grace_ms: 30_000,
    };
    // until_ms (6 bytes), then grace_ms 30,000 (3 bytes: b0 ea 01).
    let new = [old, &[0x80, 0xd0, 0x95, 0xff, 0xbc, 0x31, 0xb0, 0xea, 0x01]].concat();
    assert_eq!(decode_body(&new), Ok(cancel(Some(g))));
    assert_eq!(body(&cancel(Some(g))), new);
    for (bad, why) in [
        ([&new[..], &[0]].concat(), "trailing bytes"),
        (new[..new.len() - 3].to_vec(), "truncated varint"),
        (new[..new.len() - 1].to_vec(), "truncated varint"),
    ] {
        assert_eq!(
            decode_body(&bad).map_err(|e| e.reason),
            Err(why),
            "{}",
            hex(&bad)
        );
    }
}
