//! Run-store entries and checkpoints: round trips of every kind, and the
//! errors damaged bytes give.

use fusee_core::Status;
use fusee_core::record::{MAX_LSN, MAX_RUN};
use fusee_core::shard::{BlobRef, TimerKind};
use fusee_core::store::{
    CHECKPOINT_FORMAT, CHECKPOINT_HEADER, Checkpoint, CheckpointError, CheckpointRun, ENTRY_HEADER,
    StoreEntry, StoreError, decode_entry, encode_entry, encode_entry_into, peek_frame_len,
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
    match kind % 5 {
        0 => StoreEntry::Park {
            run: wide(rng),
            last_lsn: wide(rng),
            id_hash: rng.u64(..),
            timers: timers(rng),
            journal: bytes(rng, 300),
        },
        1 => StoreEntry::Delta {
            run: wide(rng),
            last_lsn: wide(rng),
            id_hash: rng.u64(..),
            timers: timers(rng),
            prev: blob(rng),
            depth: rng.u8(..),
            chain: wide(rng),
            journal: bytes(rng, 300),
        },
        2 => StoreEntry::Done {
            run: wide(rng),
            last_lsn: wide(rng),
            id_hash: rng.u64(..),
            status: Status::ALL[rng.usize(0..Status::ALL.len())],
            finished_ms: wide(rng),
            journal: bytes(rng, 300),
        },
        3 => StoreEntry::Tombstone { run: wide(rng) },
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
