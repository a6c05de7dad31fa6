//! Unit tests of the canonical encoding: pinned bytes, every rejection rule,
//! limits and name sharing. Random round trips of every kind live in
//! `tests/record_roundtrip.rs`, the decoder fuzz smoke in
//! `tests/fuzz_record.rs`.

use std::sync::Arc;

use super::*;
use crate::wire::{DecodeError, MAX_PAYLOAD, put_varint};

fn step<'a>(run: RunId, name: &'a str, payload: &'static [u8]) -> RecordRef<'a> {
    Record::Step {
        run,
        seq: 2,
        name,
        attempt: 1,
        status: Status::Ok,
        payload,
        ended_ms: None,
    }
}

fn canonical<S: AsRef<str>, B: AsRef<[u8]>>(rec: &Record<S, B>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_canonical(rec, &mut out);
    out
}

fn body<S: AsRef<str>, B: AsRef<[u8]>>(rec: &Record<S, B>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_body(rec, &mut out);
    out
}

fn err(reason: &'static str) -> DecodeError {
    DecodeError::new(reason)
}

/// The example of the module doc, byte for byte.
#[test]
fn step_matches_the_documented_example() {
    let rec = step(1, "a", b"hi");
    let bytes = canonical(&rec);
    assert_eq!(
        bytes,
        [
            0x0a, 0x02, 0x01, 0x02, 0x01, 0x61, 0x01, 0x00, 0x02, 0x68, 0x69
        ]
    );
    assert_eq!(body_len(&rec), 10);
    assert_eq!(canonical_len(&rec), 11);
    assert_eq!(body(&rec), bytes[1..]);
    assert_eq!(decode_body(&bytes[1..]), Ok(rec));
}

/// Every optional part of a `Start` present, pinned byte by byte from the
/// module doc's table (multi-byte varints included).
#[test]
fn full_start_is_pinned() {
    let rec: RecordRef<'_> = Record::Start {
        run: 300,
        id: "w",
        wtype: "T",
        version: 2,
        codec: 1,
        started_ms: 1000,
        deadline_ms: 0,
        parent: Some(ParentRef {
            shard: 3,
            run: 7,
            seq: 9,
        }),
        policy: policy::DETACHED | policy::ID_TERMINATE_RUNNING,
        from: Some(Origin {
            run: 299,
            cause: origin::RESET,
        }),
        copies: 4,
        update: Some(Box::new(StartUpdate {
            id: "u",
            name: "n",
            payload: b"p",
        })),
        input: b"{}",
        meta: Some(Box::new(StartMeta {
            attributes: b"a",
            memo: b"",
        })),
    };
    #[rustfmt::skip]
    let want: &[u8] = &[
        36,                     // body length
        1,                      // tag: Start
        0xac, 0x02,             // run 300
        1, b'w',                // id
        1, b'T',                // wtype
        2,                      // version
        1,                      // codec
        0xe8, 0x07,             // started_ms 1000
        0,                      // deadline_ms
        1, 3, 7, 9,             // parent: shard, run, seq
        6,                      // policy
        1, 0xab, 0x02, 1,       // from: run 299, cause reset
        4,                      // copies
        1, 1, b'u', 1, b'n', 1, b'p', // update
        2, b'{', b'}',          // input
        1, 1, b'a', 0,          // meta
    ];
    assert_eq!(canonical(&rec), want);
    assert_eq!(decode_body(&want[1..]), Ok(rec.clone()));
    assert_eq!(rec.run(), 300);
    assert_eq!(rec.kind(), kind::START);
    assert_eq!(rec.kind_name(), "Start");
}

#[test]
fn small_kinds_are_pinned() {
    let cases: [(RecordRef<'_>, &[u8]); 5] = [
        (Record::Resume { run: 5, seq: 0 }, &[3, 4, 5, 0]),
        (
            Record::Waited {
                run: 1,
                seq: 3,
                outcome: WaitOutcome::Signal(128),
            },
            &[6, 9, 1, 3, 0, 0x80, 0x01],
        ),
        (
            Record::Waited {
                run: 1,
                seq: 3,
                outcome: WaitOutcome::Abandoned,
            },
            &[4, 9, 1, 3, 2],
        ),
        (
            Record::Done {
                run: 2,
                status: Status::Reset,
                finished_ms: 0,
                payload: b"",
                by: Some(b"x"),
            },
            &[8, 24, 2, 6, 0, 0, 1, 1, b'x'],
        ),
        (
            Record::Attempt {
                run: 1,
                seq: 0,
                name: "",
                attempt: 1,
                retry_at_ms: PAUSED,
                error: b"",
                ended_ms: None,
            },
            &[
                16, 3, 1, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0,
            ],
        ),
    ];
    for (rec, want) in cases {
        assert_eq!(canonical(&rec), want, "{rec:?}");
        assert_eq!(decode_body(&want[1..]), Ok(rec));
    }
}

#[test]
fn malformed_bodies_are_refused_with_a_reason() {
    let good = body(&step(1, "a", b"hi"));
    assert!(decode_body(&good).is_ok());
    let with = |i: usize, v: &[u8]| {
        let mut b = good.clone();
        b.splice(i..=i, v.iter().copied());
        b
    };
    let cases: Vec<(Vec<u8>, DecodeError)> = vec![
        (vec![], err("truncated")),
        (with(0, &[0]), err("unknown record kind")),
        (with(0, &[26]), err("unknown record kind")),
        (with(1, &[0]), err("run ID outside 1..=2^48-1")),
        // Run 1 written in two bytes.
        (
            with(1, &[0x81, 0x00]),
            err("varint not in its shortest form"),
        ),
        // Status 7.
        (with(6, &[7]), err("unknown status")),
        // Name that is not UTF-8.
        (with(4, &[0xff]), err("string is not UTF-8")),
        // Payload length past the end.
        (with(7, &[3]), err("length past the end of input")),
        // A byte after the payload is the step's `ended_ms` (a tail); one
        // more is left over.
        ([&good[..], &[0, 0]].concat(), err("trailing bytes")),
        ([&good[..], &[0x80]].concat(), err("truncated varint")),
        (
            good[..good.len() - 1].to_vec(),
            err("length past the end of input"),
        ),
        (good[..3].to_vec(), err("truncated varint")),
    ];
    for (bytes, want) in cases {
        assert_eq!(decode_body(&bytes), Err(want), "{bytes:02x?}");
    }

    // A run of 2^48 needs 49 bits.
    let mut b = vec![kind::RESUME];
    put_varint(&mut b, MAX_RUN + 1);
    b.push(0);
    assert_eq!(decode_body(&b), Err(err("run ID outside 1..=2^48-1")));
    let mut b = vec![kind::RESUME];
    put_varint(&mut b, MAX_RUN);
    b.push(0);
    assert!(decode_body(&b).is_ok());

    // Seq over 32 bits.
    let mut b = vec![kind::RESUME, 1];
    put_varint(&mut b, u64::from(u32::MAX) + 1);
    assert_eq!(decode_body(&b), Err(err("varint overflows 32 bits")));

    // Option marker 2 (a `Cancel`'s `by`).
    assert_eq!(
        decode_body(&[kind::CANCEL, 1, 0, 2]),
        Err(err("option marker is neither 0 nor 1"))
    );
    assert!(decode_body(&[kind::CANCEL, 1, 0, 0]).is_ok());
    // Wait outcome 3.
    assert_eq!(
        decode_body(&[kind::WAITED, 1, 0, 3]),
        Err(err("unknown wait outcome"))
    );
    // A body over the limit is refused before a byte of it is read (the
    // zeroed buffer is never touched, so it costs no memory).
    let huge = vec![0u8; MAX_BODY + 1];
    assert_eq!(
        decode_body(&huge),
        Err(err("record body over the size limit"))
    );
    assert_eq!(
        InlineDecoder::new().decode(&huge),
        Err(err("record body over the size limit"))
    );
    drop(huge);
    // A payload length over the limit, with nothing behind it.
    let mut b = vec![kind::ATTRIBUTES, 1];
    put_varint(&mut b, MAX_PAYLOAD as u64 + 1);
    assert_eq!(decode_body(&b), Err(err("length over the payload limit")));
    let mut b = vec![kind::ATTRIBUTES, 1];
    put_varint(&mut b, 4 << 30);
    assert_eq!(decode_body(&b), Err(err("length over the payload limit")));
}

#[test]
fn malformed_framing_is_refused() {
    let one = canonical(&step(1, "a", b"hi"));
    let all = |bytes: &[u8]| decode_canonical_all(bytes).map(|v| v.len());
    assert_eq!(all(&[]), Ok(0));
    assert_eq!(all(&[one.clone(), one.clone()].concat()), Ok(2));
    assert_eq!(all(&[0]), Err(err("empty record body")));
    // The length written in two bytes.
    let mut long = vec![0x8a, 0x00];
    long.extend_from_slice(&one[1..]);
    assert_eq!(all(&long), Err(err("varint not in its shortest form")));
    // A torn second record fails the whole list.
    let torn = [&one[..], &one[..one.len() - 1]].concat();
    assert_eq!(all(&torn), Err(err("record length past the end of input")));
    for inflated in [MAX_BODY as u64 + 1, 4 << 30, u64::MAX] {
        let mut b = Vec::new();
        put_varint(&mut b, inflated);
        b.extend_from_slice(&one[1..]);
        assert_eq!(
            all(&b),
            Err(err("record length over the body limit")),
            "{inflated}"
        );
    }
    // The iterator yields the good records, then the error, then stops.
    let bytes = [&one[..], &one[..], &[0x05, 0x02][..]].concat();
    let items: Vec<_> = iter_canonical(&bytes).collect();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0], Ok((step(1, "a", b"hi"), &one[..])));
    assert_eq!(items[1], Ok((step(1, "a", b"hi"), &one[..])));
    assert_eq!(items[2], Err(err("record length past the end of input")));
    let mut it = iter_canonical(&bytes);
    it.by_ref().for_each(drop);
    assert_eq!(it.next(), None);
    assert_eq!(it.offset(), 2 * one.len(), "the failed record's offset");
    assert_eq!(it.rest(), [0x05, 0x02]);
    let mut it = iter_canonical(&one);
    assert_eq!(it.offset(), 0);
    it.by_ref().for_each(drop);
    assert_eq!((it.offset(), it.rest()), (one.len(), &[][..]));
}

#[test]
fn limits_are_checked_with_context() {
    assert_eq!(check_limits(&step(1, "a", b"hi")), Ok(()));
    assert_eq!(
        check_limits(&step(0, "a", b"hi")),
        Err(LimitError::RunOutOfRange {
            kind: "Step",
            field: "run",
            value: 0,
            max: MAX_RUN
        })
    );
    let caller = Record::<&str, &[u8]>::Update {
        run: 9,
        id: "u",
        name: "n",
        payload: b"",
        caller: Some(ParentRef {
            shard: 0,
            run: MAX_RUN + 1,
            seq: 0,
        }),
    };
    assert_eq!(
        check_limits(&caller),
        Err(LimitError::RunOutOfRange {
            kind: "Update",
            field: "caller.run",
            value: MAX_RUN + 1,
            max: MAX_RUN
        })
    );
    // What check_limits refuses, the decoder refuses too.
    assert!(decode_body(&body(&caller)).is_err());

    let big = vec![7u8; MAX_PAYLOAD + 1];
    let at_limit = &big[..MAX_PAYLOAD];
    let rec = Record::<&str, &[u8]>::Chunk {
        run: 3,
        seq: 1,
        payload: &big,
    };
    let e = check_limits(&rec).unwrap_err();
    assert_eq!(
        e,
        LimitError::FieldTooLarge {
            kind: "Chunk",
            run: 3,
            field: "payload",
            len: MAX_PAYLOAD + 1,
            limit: MAX_PAYLOAD
        }
    );
    assert!(e.to_string().contains("`payload`"), "{e}");
    assert!(decode_body(&body(&rec)).is_err());

    let rec = Record::<&str, &[u8]>::Chunk {
        run: 3,
        seq: 1,
        payload: at_limit,
    };
    assert_eq!(check_limits(&rec), Ok(()));
    let bytes = canonical(&rec);
    assert_eq!(decode_canonical_all(&bytes).map(|v| v.len()), Ok(1));

    // Three fields at the limit: each fits, the body does not.
    let start = Record::<&str, &[u8]>::Start {
        run: 1,
        id: "w",
        wtype: "t",
        version: 0,
        codec: 0,
        started_ms: 0,
        deadline_ms: 0,
        parent: None,
        policy: 0,
        from: None,
        copies: 0,
        update: None,
        input: at_limit,
        meta: Some(Box::new(StartMeta {
            attributes: at_limit,
            memo: at_limit,
        })),
    };
    let len = body_len(&start);
    assert!(len > MAX_BODY);
    assert_eq!(
        check_limits(&start),
        Err(LimitError::BodyTooLarge {
            kind: "Start",
            run: 1,
            len,
            limit: MAX_BODY
        })
    );
}

#[test]
fn inline_decoder_shares_names_and_empty_payloads() {
    let names = ["charge-card", "ship", "charge-card", "ship", "charge-card"];
    let mut bytes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        encode_canonical(
            &Record::<&str, &[u8]>::Step {
                run: 1,
                seq: i as u32,
                name,
                attempt: 1,
                status: Status::Ok,
                payload: b"",
                ended_ms: None,
            },
            &mut bytes,
        );
    }
    let name_of = |r: &RecordBuf| match r {
        Record::Step { name, payload, .. } => (name.clone(), payload.clone()),
        other => panic!("not a step: {other:?}"),
    };
    for recs in [
        decode_canonical_all(&bytes).unwrap(),
        InlineDecoder::new().decode_all(&bytes).unwrap(),
    ] {
        let got: Vec<_> = recs.iter().map(name_of).collect();
        for (i, (a, pa)) in got.iter().enumerate() {
            assert_eq!(&**a, names[i]);
            for (j, (b, pb)) in got.iter().enumerate() {
                assert_eq!(Arc::ptr_eq(a, b), names[i] == names[j], "{i} {j}");
                assert!(Arc::ptr_eq(pa, pb), "empty payloads are shared");
            }
        }
    }
    // Across calls of one decoder too.
    let mut d = InlineDecoder::new();
    let a = d.decode(&body(&step(1, "x", b""))).unwrap();
    let b = d.decode(&body(&step(2, "x", b""))).unwrap();
    assert!(Arc::ptr_eq(&name_of(&a).0, &name_of(&b).0));
}

#[test]
fn inline_decoder_cache_stays_bounded() {
    let mut d = InlineDecoder::new();
    let long = "l".repeat(300);
    for i in 0..5_000u32 {
        let name = format!("name-{i}");
        let rec = d.decode(&body(&step(1, &name, b"p"))).unwrap();
        assert_eq!(rec, step(1, &name, b"p").to_buf());
        let rec = d.decode(&body(&step(1, &long, b"p"))).unwrap();
        assert_eq!(rec, step(1, &long, b"p").to_buf());
        assert!(d.remembered() <= 1024, "{}", d.remembered());
    }
}

#[test]
fn conversions_keep_every_field() {
    let rec = step(7, "n", b"payload");
    let owned = rec.to_buf();
    assert_eq!(owned.to_ref(), rec);
    assert_eq!(owned.to_buf(), owned);
    assert_eq!(owned.run(), 7);
    assert_eq!(owned.kind(), kind::STEP);
    assert_eq!(canonical(&owned), canonical(&rec));
}

#[test]
fn a_passing_walk_frames_the_passed_kind_and_decodes_the_rest() {
    let chunk: RecordRef<'_> = Record::Chunk {
        run: 1,
        seq: 3,
        payload: b"tok",
    };
    let mut bytes = canonical(&step(1, "a", b"x"));
    let chunk_bytes = canonical(&chunk);
    bytes.extend_from_slice(&chunk_bytes);
    bytes.extend_from_slice(&canonical(&step(1, "b", b"y")));
    bytes.extend_from_slice(&chunk_bytes);
    bytes.extend_from_slice(&chunk_bytes);
    let walked: Vec<_> = iter_canonical_passing(&bytes, kind::CHUNK)
        .map(Result::unwrap)
        .collect();
    assert!(matches!(
        walked[0],
        Walked::Record(Record::Step { name: "a", .. }, _)
    ));
    assert!(
        matches!(walked[1], Walked::Passed { bytes, count: 1 } if bytes == chunk_bytes.as_slice())
    );
    assert!(matches!(
        walked[2],
        Walked::Record(Record::Step { name: "b", .. }, _)
    ));
    let two = [chunk_bytes.clone(), chunk_bytes.clone()].concat();
    assert!(matches!(walked[3], Walked::Passed { bytes, count: 2 } if bytes == two.as_slice()));
    assert_eq!(walked.len(), 4);
    // The passed body is not decoded (its bad payload length goes
    // unseen), but its framing is checked.
    let mut damaged = chunk_bytes.clone();
    let last = damaged.len() - 4;
    damaged[last] = 0x7f;
    assert!(iter_canonical(&damaged).next().unwrap().is_err());
    assert!(
        iter_canonical_passing(&damaged, kind::CHUNK)
            .next()
            .unwrap()
            .is_ok()
    );
    let torn = &two[..two.len() - 1];
    let mut walk = iter_canonical_passing(torn, kind::CHUNK);
    assert!(matches!(
        walk.next(),
        Some(Ok(Walked::Passed { count: 1, .. }))
    ));
    assert!(walk.next().unwrap().is_err());
    assert!(walk.next().is_none());
}

#[test]
fn find_kind_decodes_only_the_first_record_of_its_kind() {
    let done = |payload: &'static [u8]| -> RecordRef<'static> {
        Record::Done {
            run: 1,
            status: Status::Ok,
            finished_ms: 9,
            payload,
            by: None,
        }
    };
    let chunk: RecordRef<'_> = Record::Chunk {
        run: 1,
        seq: 3,
        payload: b"tok",
    };
    let mut bytes = canonical(&step(1, "a", b"x"));
    bytes.extend_from_slice(&canonical(&chunk));
    // A record before the one sought is framed, not decoded: a step whose
    // body is damaged (its last byte, inside the payload's length, made
    // an overlong length) does not stop the walk.
    let mut damaged = canonical(&step(1, "b", b"y"));
    let last = damaged.len() - 2;
    damaged[last] = 0x7f;
    assert!(iter_canonical(&damaged).next().unwrap().is_err());
    bytes.extend_from_slice(&damaged);
    bytes.extend_from_slice(&canonical(&done(b"first")));
    bytes.extend_from_slice(&canonical(&done(b"second")));
    assert_eq!(
        find_kind(&bytes, kind::DONE).map(Result::unwrap),
        Some(done(b"first"))
    );
    assert!(matches!(
        find_kind(&bytes, kind::CHUNK),
        Some(Ok(Record::Chunk { seq: 3, .. }))
    ));
    assert_eq!(find_kind(&bytes, kind::START), None);
    // Bytes that do not frame: nothing found.
    let mut torn = canonical(&done(b"first"));
    torn.truncate(torn.len() - 1);
    assert_eq!(find_kind(&torn, kind::DONE), None);
    assert_eq!(find_kind(&[], kind::DONE), None);
}
