//! Run-store entries and checkpoints: round trips of every kind, and the
//! errors damaged bytes give.

use std::borrow::Cow;

mod common;

use fusee_core::Status;
use fusee_core::record::encode_canonical;
use fusee_core::record::{MAX_LSN, MAX_RUN};
use fusee_core::shard::{BlobRef, TimerKind};
use fusee_core::store::{
    Apart, ApartRun, CHECKPOINT_FORMAT, CHECKPOINT_HEADER, Checkpoint, CheckpointError,
    CheckpointRun, ENTRY_HEADER, Split, StoreEntry, StoreError, decode_entry, encode_entry,
    encode_entry_into, join_chunks, kind, peek_frame_len, rewrite_kept, split_chunks,
};

fn bytes(rng: &mut fastrand::Rng, max: usize) -> Vec<u8> {
    let n = rng.usize(0..=max);
    (0..n).map(|_| rng.u8(..)).collect()
}

/// A value with a random bit width, so varints of every length appear.
fn wide(rng: &mut fastrand::Rng) -> u64 {
    rng.u64(..) >> rng.u32(0..64)
}

fn blob(rng: &mut fastrand::Rng) -> BlobRef {
    BlobRef {
        offset: wide(rng) >> 16,
        len: rng.u32(..),
    }
}

fn timers(rng: &mut fastrand::Rng) -> Vec<(u32, TimerKind, u64)> {
    (0..rng.usize(0..5))
        .map(|_| {
            let kind = TimerKind::from_u8(rng.u8(0..4)).expect("valid tag");
            (rng.u32(..), kind, wide(rng))
        })
        .collect()
}

/// A random entry of each kind in turn.
fn entry(rng: &mut fastrand::Rng, kind: u8) -> StoreEntry {
    let journal = bytes(rng, 300);
    let apart = common::some_apart(rng, journal.len());
    match kind % 6 {
        0 => StoreEntry::Park {
            run: wide(rng),
            last_lsn: wide(rng),
            id_hash: rng.u64(..),
            timers: timers(rng),
            apart,
            journal,
        },
        1 => StoreEntry::Delta {
            run: wide(rng),
            last_lsn: wide(rng),
            id_hash: rng.u64(..),
            timers: timers(rng),
            prev: blob(rng),
            depth: rng.u8(..),
            chain: wide(rng),
            apart,
            journal,
        },
        2 => StoreEntry::Done {
            run: wide(rng),
            last_lsn: wide(rng),
            id_hash: rng.u64(..),
            status: Status::ALL[rng.usize(0..Status::ALL.len())],
            finished_ms: wide(rng),
            apart,
            journal,
        },
        3 => StoreEntry::Tombstone { run: wide(rng) },
        4 => StoreEntry::Stream {
            run: wide(rng),
            chunks: journal,
        },
        _ => StoreEntry::Index {
            records: (0..32 * rng.usize(0..6)).map(|_| rng.u8(..)).collect(),
        },
    }
}

fn checkpoint(rng: &mut fastrand::Rng) -> Checkpoint {
    Checkpoint {
        shard: rng.u32(..),
        shards: rng.u32(..),
        lsn: wide(rng) % (MAX_LSN + 1),
        next_run: wide(rng) % (MAX_RUN + 2),
        store_generation: wide(rng),
        store_len: wide(rng),
        created_ms: wide(rng),
        runs: (0..rng.usize(0..6))
            .map(|_| CheckpointRun {
                run: wide(rng) % MAX_RUN + 1,
                last_lsn: wide(rng),
                blob: rng.bool().then(|| blob(rng)),
                blob_chain: wide(rng),
                blob_depth: rng.u8(..),
                journal: bytes(rng, 200),
            })
            .collect(),
        outbox: bytes(rng, 100),
        index: (0..rng.usize(0..6)).map(|_| blob(rng)).collect(),
        obsolete: wide(rng),
        index_runs: wide(rng),
        attr_frames: (0..rng.usize(0..3)).map(|_| blob(rng)).collect(),
    }
}

#[test]
fn every_entry_kind_round_trips() {
    for seed in 0..2000u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let e = entry(&mut rng, seed as u8);
        let frame = encode_entry(&e).expect("small");
        assert_eq!(
            peek_frame_len(&frame[..ENTRY_HEADER]),
            Some(frame.len() as u64),
            "seed {seed}"
        );
        let back = decode_entry(&frame).unwrap_or_else(|err| panic!("seed {seed}: {err}"));
        assert_eq!(back.to_owned(), e, "seed {seed}");
        assert_eq!(back, e.as_ref(), "seed {seed}");
        // Appending after other bytes writes the same frame.
        let mut out = vec![9u8; 5];
        encode_entry_into(&e.as_ref(), &mut out).expect("small");
        assert_eq!(&out[5..], &frame[..], "seed {seed}");
    }
}

#[test]
fn damaged_entries_are_errors() {
    let mut rng = fastrand::Rng::with_seed(7);
    let e = StoreEntry::Park {
        run: 5,
        last_lsn: 77,
        id_hash: 1,
        timers: vec![(3, TimerKind::Sleep, 1000)],
        apart: Apart::default(),
        journal: b"records".to_vec(),
    };
    let frame = encode_entry(&e).expect("small");
    assert_eq!(peek_frame_len(&frame[..ENTRY_HEADER - 1]), None);
    for i in 0..frame.len() {
        let mut bad = frame.clone();
        bad[i] ^= rng.u8(1..);
        assert!(decode_entry(&bad).is_err(), "flip at {i}");
    }
    for t in 0..frame.len() {
        assert!(
            matches!(decode_entry(&frame[..t]), Err(StoreError::Truncated { .. })),
            "cut at {t}"
        );
    }
    let mut long = frame.clone();
    long.push(0);
    assert!(matches!(
        decode_entry(&long),
        Err(StoreError::TrailingBytes { .. })
    ));
    // A valid crc over an unknown kind or a ragged index.
    let reframe = |kind: u8, body: &[u8]| {
        let mut f = (body.len() as u32).to_le_bytes().to_vec();
        f.push(kind);
        let mut h = crc32fast::Hasher::new();
        h.update(&f);
        h.update(body);
        f.extend_from_slice(&h.finalize().to_le_bytes());
        f.extend_from_slice(body);
        f
    };
    assert_eq!(
        decode_entry(&reframe(0, b"")),
        Err(StoreError::UnknownKind(0))
    );
    assert_eq!(
        decode_entry(&reframe(5, &[0; 33])),
        Err(StoreError::IndexLength(33))
    );
    assert!(matches!(
        decode_entry(&reframe(4, &[1, 2])),
        Err(StoreError::Malformed(_))
    ));
    // Our own reframing of a valid body decodes: the helper is right.
    assert_eq!(
        decode_entry(&reframe(1, &frame[ENTRY_HEADER..])).map(|e| e.to_owned()),
        Ok(e)
    );
}

#[test]
fn checkpoints_round_trip() {
    for seed in 0..2000u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let c = checkpoint(&mut rng);
        let bytes = c.encode();
        assert_eq!(Checkpoint::decode(&bytes), Ok(c), "seed {seed}");
    }
    assert_eq!(
        Checkpoint::decode(&Checkpoint::default().encode()),
        Ok(Checkpoint::default())
    );
}

/// A checkpoint's LSN, next run number and run IDs past what a shard can
/// reach are damage: a shard that took them would hand out run IDs no
/// record can carry, or overflow its counters.
#[test]
fn checkpoint_fields_past_their_bounds_are_refused() {
    let run = |run| CheckpointRun {
        run,
        last_lsn: 1,
        blob: None,
        blob_chain: 0,
        blob_depth: 0,
        journal: Vec::new(),
    };
    let at_bounds = Checkpoint {
        lsn: MAX_LSN,
        next_run: MAX_RUN + 1,
        runs: vec![run(1), run(MAX_RUN)],
        ..Checkpoint::default()
    };
    assert_eq!(
        Checkpoint::decode(&at_bounds.encode()),
        Ok(at_bounds.clone())
    );
    let past = [
        Checkpoint {
            lsn: MAX_LSN + 1,
            ..at_bounds.clone()
        },
        Checkpoint {
            next_run: MAX_RUN + 2,
            ..at_bounds.clone()
        },
        Checkpoint {
            next_run: u64::MAX,
            ..at_bounds.clone()
        },
        Checkpoint {
            runs: vec![run(0)],
            ..at_bounds.clone()
        },
        Checkpoint {
            runs: vec![run(MAX_RUN + 1)],
            ..at_bounds.clone()
        },
    ];
    for c in past {
        assert!(Checkpoint::decode(&c.encode()).is_err(), "{c:?} accepted");
    }
}

#[test]
fn format_2_only_when_attribute_frames_are_named() {
    let plain = Checkpoint::default().encode();
    assert_eq!(plain[8..12], 1u32.to_le_bytes());
    let named = Checkpoint {
        attr_frames: vec![BlobRef { offset: 7, len: 9 }],
        ..Checkpoint::default()
    };
    let bytes = named.encode();
    assert_eq!(bytes[8..12], CHECKPOINT_FORMAT.to_le_bytes());
    assert_eq!(CHECKPOINT_FORMAT, 2);
    assert_eq!(Checkpoint::decode(&bytes), Ok(named));
    // A format-1 body read as format 2 lacks the attribute part.
    let mut relabelled = plain.clone();
    relabelled[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = {
        let mut h = crc32fast::Hasher::new();
        h.update(&relabelled[8..20]);
        h.update(&relabelled[CHECKPOINT_HEADER..]);
        h.finalize()
    };
    relabelled[20..24].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        Checkpoint::decode(&relabelled),
        Err(CheckpointError::Malformed(_))
    ));
}

#[test]
fn damaged_checkpoints_are_clear_errors() {
    let mut rng = fastrand::Rng::with_seed(3);
    let c = checkpoint(&mut rng);
    let bytes = c.encode();
    assert_eq!(&bytes[..8], b"FUSEECKP");
    let mut bad = bytes.clone();
    bad[0] ^= 1;
    assert_eq!(Checkpoint::decode(&bad), Err(CheckpointError::BadMagic));
    let mut future = bytes.clone();
    future[8..12].copy_from_slice(&(CHECKPOINT_FORMAT + 1).to_le_bytes());
    assert_eq!(
        Checkpoint::decode(&future),
        Err(CheckpointError::UnsupportedVersion {
            found: CHECKPOINT_FORMAT + 1
        })
    );
    for i in CHECKPOINT_HEADER..bytes.len() {
        let mut bad = bytes.clone();
        bad[i] ^= rng.u8(1..);
        assert!(
            matches!(
                Checkpoint::decode(&bad),
                Err(CheckpointError::BadCrc { .. })
            ),
            "flip at {i}"
        );
    }
    for t in 0..bytes.len() {
        assert!(Checkpoint::decode(&bytes[..t]).is_err(), "cut at {t}");
    }
    assert_eq!(
        Checkpoint::decode(&bytes[..10]),
        Err(CheckpointError::TooShort { len: 10 })
    );
}

/// A frame with a valid crc over `body` and tag `kind` (the header built
/// by hand, so bodies the encoder never writes can be tried).
fn framed(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_le_bytes().to_vec();
    f.push(kind);
    let mut h = crc32fast::Hasher::new();
    h.update(&f);
    h.update(body);
    f.extend_from_slice(&h.finalize().to_le_bytes());
    f.extend_from_slice(body);
    f
}

/// A chunks-apart section is checked at decode: the flag only on a run's
/// frames and only with chunks, each frame's count the total of its runs,
/// runs within the journal. Each damage is an error, never another entry.
#[test]
fn chunks_apart_sections_are_checked() {
    let done = |apart: Apart, journal: &[u8]| StoreEntry::Done {
        run: 4,
        last_lsn: 9,
        id_hash: 3,
        status: Status::Ok,
        finished_ms: 12,
        apart,
        journal: journal.to_vec(),
    };
    let blob = BlobRef {
        offset: 100,
        len: 50,
    };
    let run = |at, frame, count| ApartRun { at, frame, count };
    let good = Apart {
        frames: vec![(blob, 3), (blob, 2)],
        runs: vec![run(0, 0, 1), run(4, 1, 2), run(4, 0, 2)],
    };
    let frame = encode_entry(&done(good.clone(), b"abcdef")).expect("small");
    assert_eq!(frame[4], kind::DONE | kind::APART);
    let back = decode_entry(&frame).expect("decodes");
    assert_eq!(back.apart(), &good);
    assert_eq!(back.apart().chunks(), 5);
    // No section: no flag, the frame an older build wrote.
    let plain = encode_entry(&done(Apart::default(), b"abcdef")).expect("small");
    assert_eq!(plain[4], kind::DONE);
    assert!(decode_entry(&plain).expect("decodes").apart().is_empty());

    let body = |apart: &Apart, journal: &[u8]| {
        let f = encode_entry(&done(apart.clone(), journal)).expect("small");
        f[ENTRY_HEADER..].to_vec()
    };
    let malformed = |apart: &Apart, journal: &[u8], what: &str| {
        let f = framed(kind::DONE | kind::APART, &body(apart, journal));
        assert!(
            matches!(decode_entry(&f), Err(StoreError::Malformed(_))),
            "{what}: {:?}",
            decode_entry(&f)
        );
    };
    malformed(&good, b"abc", "a run past the journal's end");
    let with_runs = |runs| Apart {
        runs,
        ..good.clone()
    };
    malformed(
        &with_runs(vec![run(0, 0, 1), run(4, 1, 2), run(4, 0, 3)]),
        b"abcdef",
        "a run takes more than its frame holds",
    );
    malformed(
        &with_runs(vec![run(0, 0, 1), run(4, 1, 2), run(4, 0, 1)]),
        b"abcdef",
        "a frame holds more than its runs take",
    );
    malformed(
        &with_runs(vec![run(0, 0, 3), run(4, 2, 2)]),
        b"abcdef",
        "a run of a frame not listed",
    );
    malformed(
        &with_runs(vec![run(0, 0, 3), run(4, 1, 0), run(5, 1, 2)]),
        b"abcdef",
        "a run of none",
    );
    malformed(
        &Apart {
            frames: vec![(blob, 0)],
            runs: vec![run(0, 0, 0)],
        },
        b"abcdef",
        "a frame of none",
    );
    // The flag with an empty section: a frame count of 0.
    let mut no_section = plain[ENTRY_HEADER..].to_vec();
    // Done's fixed fields: run 4, lsn 9, hash (8 bytes), status, time 12.
    no_section.insert(1 + 1 + 8 + 1 + 1, 0);
    assert!(matches!(
        decode_entry(&framed(kind::DONE | kind::APART, &no_section)),
        Err(StoreError::Malformed(_))
    ));
    // The flag on a kind that has no section.
    for k in [kind::TOMBSTONE, kind::INDEX, kind::STREAM, 0] {
        assert_eq!(
            decode_entry(&framed(k | kind::APART, &[1])),
            Err(StoreError::UnknownKind(k | kind::APART))
        );
    }
}

fn value(seq: u32, v: &[u8]) -> Vec<u8> {
    let rec: fusee_core::RecordRef<'_> = fusee_core::Record::Value {
        run: 1,
        seq,
        kind: 1,
        value: v,
    };
    let mut out = Vec::new();
    encode_canonical(&rec, &mut out);
    out
}

fn chunk(i: u32) -> Vec<u8> {
    let payload = format!("token-{i}");
    let rec: fusee_core::RecordRef<'_> = fusee_core::Record::Chunk {
        run: 1,
        seq: 2,
        payload: payload.as_bytes(),
    };
    let mut out = Vec::new();
    encode_canonical(&rec, &mut out);
    out
}

/// A random journal of run 1: values and chunks, mixed.
fn mixed(rng: &mut fastrand::Rng, chunks: &mut u32) -> Vec<u8> {
    let mut journal = Vec::new();
    for i in 0..rng.u32(0..40) {
        if rng.u8(0..3) == 0 {
            journal.extend(value(i, &vec![7; rng.usize(0..200)]));
        } else {
            journal.extend(chunk(*chunks));
            *chunks += 1;
        }
    }
    journal
}

/// The chunk bodies of `split`'s frames, the last one `split.chunks`
/// (the others from `stored`, by place).
fn bodies<'a>(stored: &'a [Vec<u8>], split: &'a Split) -> Vec<&'a [u8]> {
    let mut out: Vec<&[u8]> = stored.iter().map(Vec::as_slice).collect();
    if split.count > 0 {
        out.push(&split.chunks);
    }
    out
}

/// Splitting a journal's chunks out and joining them back gives its bytes
/// again, whatever the mix (none, only chunks, runs at either end). A
/// journal that already set chunks apart and holds more (a chain read
/// whole, then new records) splits again keeping its frames, and joins
/// back to the whole.
#[test]
fn chunks_split_apart_join_back_byte_for_byte() {
    for seed in 0..500u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut count = 0u32;
        let first = mixed(&mut rng, &mut count);
        let split = split_chunks(&first, &Apart::default()).expect("frames");
        assert_eq!(split.count, count, "seed {seed}");
        assert_eq!(u64::from(count), split.apart.chunks(), "seed {seed}");
        assert_eq!(
            split.journal.len() + split.chunks.len(),
            first.len(),
            "seed {seed}"
        );
        assert!(
            split.apart.runs.windows(2).all(|w| w[0].at < w[1].at),
            "seed {seed}: {:?}",
            split.apart.runs
        );
        let mut joined = Vec::new();
        join_chunks(
            &split.journal,
            &split.apart.runs,
            &bodies(&[], &split),
            &mut joined,
        )
        .expect("joins");
        assert_eq!(joined, first, "seed {seed}");

        // The same journal read back apart, then more records: split again.
        let more = mixed(&mut rng, &mut count);
        let mut stored = Vec::new();
        let mut apart = split.apart.clone();
        if split.count > 0 {
            stored.push(split.chunks.clone());
        }
        let journal = [split.journal.clone(), more.clone()].concat();
        if apart.frames.is_empty() {
            apart = Apart::default();
        }
        let again = split_chunks(&journal, &apart).expect("frames");
        assert_eq!(
            again.apart.frames.len(),
            stored.len() + usize::from(again.count > 0)
        );
        let mut joined = Vec::new();
        join_chunks(
            &again.journal,
            &again.apart.runs,
            &bodies(&stored, &again),
            &mut joined,
        )
        .expect("joins");
        assert_eq!(
            joined,
            [first.clone(), more.clone()].concat(),
            "seed {seed}"
        );

        // A chain's two frames read whole: the second's section after the
        // first's.
        let (sa, sb) = (
            split_chunks(&first, &Apart::default()).expect("a"),
            split_chunks(&more, &Apart::default()).expect("b"),
        );
        let mut chain = sa.apart.clone();
        chain.extend_after(sa.journal.len() as u64, &sb.apart);
        let chain_journal = [sa.journal.clone(), sb.journal.clone()].concat();
        let mut given: Vec<&[u8]> = Vec::new();
        if sa.count > 0 {
            given.push(&sa.chunks);
        }
        if sb.count > 0 {
            given.push(&sb.chunks);
        }
        let mut joined = Vec::new();
        join_chunks(&chain_journal, &chain.runs, &given, &mut joined).expect("joins");
        assert_eq!(joined, [first, more].concat(), "seed {seed}");
    }
}

/// A rewrite keeps the chunks set apart where they stood among the
/// records kept, and puts a record's replacement in its place.
#[test]
fn a_rewrite_keeps_chunks_apart_where_they_stood() {
    let journal = [
        value(0, b"abc"),
        chunk(0),
        value(1, b"de"),
        chunk(1),
        chunk(2),
        value(2, b"f"),
    ]
    .concat();
    let split = split_chunks(&journal, &Apart::default()).expect("frames");
    let dropped = value(1, b"de");
    let longer = value(2, b"a longer value");
    let (kept, apart) = rewrite_kept(&split.journal, &split.apart, |_, rec| {
        if rec == dropped.as_slice() {
            None
        } else if rec == value(2, b"f").as_slice() {
            Some(Cow::Owned(longer.clone()))
        } else {
            Some(Cow::Borrowed(rec))
        }
    })
    .expect("rewrites");
    let mut joined = Vec::new();
    join_chunks(&kept, &apart.runs, &[&split.chunks], &mut joined).expect("joins");
    assert_eq!(
        joined,
        [value(0, b"abc"), chunk(0), chunk(1), chunk(2), longer].concat()
    );
}

/// Joining refuses what does not fit: a run inside a record, chunks that
/// are not chunks, more or fewer chunks than the runs hold, a frame not
/// given.
#[test]
fn joining_chunks_that_do_not_fit_is_an_error() {
    let journal = [
        value(0, b"abc"),
        chunk(0),
        value(1, b"de"),
        chunk(1),
        chunk(2),
    ]
    .concat();
    let split = split_chunks(&journal, &Apart::default()).expect("frames");
    let runs = split.apart.runs.clone();
    assert_eq!(
        runs.iter()
            .map(|r| (r.at, r.frame, r.count))
            .collect::<Vec<_>>(),
        vec![
            (value(0, b"abc").len() as u64, 0, 1),
            (split.journal.len() as u64, 0, 2)
        ]
    );
    let join = |runs: &[ApartRun], chunks: &[&[u8]]| {
        let mut out = Vec::new();
        join_chunks(&split.journal, runs, chunks, &mut out)
    };
    let all: &[u8] = &split.chunks;
    assert!(join(&runs, &[all]).is_ok());
    let moved = |i: usize, at: u64| {
        let mut r = runs.clone();
        r[i].at = at;
        r
    };
    assert!(
        join(&moved(0, 1), &[all]).is_err(),
        "inside the first record"
    );
    assert!(
        join(&moved(1, split.journal.len() as u64 + 1), &[all]).is_err(),
        "past the journal"
    );
    assert!(
        join(&runs, &[&all[..all.len() - 1]]).is_err(),
        "fewer chunks"
    );
    let mut fewer = runs.clone();
    fewer[1].count = 1;
    assert!(join(&fewer, &[all]).is_err(), "a chunk no run takes");
    let not_chunks = [value(5, b"x"), chunk(1), chunk(2)].concat();
    assert!(join(&runs, &[&not_chunks]).is_err(), "not a chunk");
    let mut other = runs.clone();
    other[1].frame = 1;
    assert!(join(&other, &[all]).is_err(), "a frame not given");
}
