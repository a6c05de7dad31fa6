//! Random records of every kind for the round-trip and fuzz tests.

#![allow(dead_code, unreachable_pub)]

use fusee_core::record::{
    MAX_RUN, Name, Origin, PAUSED, ParentRef, Payload, Record, RecordBuf, StartMeta, StartUpdate,
    Status, WaitOutcome, kind,
};

/// `name` parsed from the environment, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
        Err(_) => default,
    }
}

/// The seed: `FUSEE_SEED` if set, else `default`.
pub fn seed(default: u64) -> u64 {
    env_or("FUSEE_SEED", default)
}

/// A few strings that repeat, so name sharing has something to share.
const COMMON: [&str; 6] = ["charge-card", "ship", "t", "order-42", "", "ünïcødé"];
const ODD: [&str; 6] = [
    "日本語",
    "🦀 crab",
    "a\u{0}b",
    "\u{10FFFF}",
    "tab\tnew\nline",
    "é",
];

/// A random string: empty, repeated, unicode (any scalar value) or ASCII.
pub fn string(rng: &mut fastrand::Rng) -> String {
    match rng.u8(0..8) {
        0 => String::new(),
        1 => ODD[rng.usize(0..ODD.len())].to_owned(),
        2 => (0..rng.usize(0..12)).map(|_| rng.char(..)).collect(),
        3 | 4 => COMMON[rng.usize(0..COMMON.len())].to_owned(),
        5 => "x".repeat(rng.usize(200..400)),
        _ => (0..rng.usize(0..24)).map(|_| rng.alphanumeric()).collect(),
    }
}

/// Random bytes: usually 0..=300, and when `big`, about one in 300 between
/// 1 KB and 200 KB.
pub fn bytes(rng: &mut fastrand::Rng, big: bool) -> Vec<u8> {
    let len = if big && rng.u32(0..300) == 0 {
        rng.usize(1_000..200_000)
    } else {
        rng.usize(0..=300)
    };
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

fn u64x(rng: &mut fastrand::Rng) -> u64 {
    match rng.u8(0..6) {
        0 => 0,
        1 => u64::MAX,
        2 => rng.u64(..),
        3 => rng.u64(0..128),
        4 => 1 << rng.u32(0..64),
        _ => rng.u64(0..1 << 45),
    }
}

fn u32x(rng: &mut fastrand::Rng) -> u32 {
    match rng.u8(0..5) {
        0 => 0,
        1 => u32::MAX,
        2 => rng.u32(..),
        3 => 1 << rng.u32(0..32),
        _ => rng.u32(0..300),
    }
}

fn run(rng: &mut fastrand::Rng) -> u64 {
    match rng.u8(0..4) {
        0 => 1,
        1 => MAX_RUN,
        2 => rng.u64(1..=MAX_RUN),
        _ => rng.u64(1..1000),
    }
}

fn status(rng: &mut fastrand::Rng) -> Status {
    Status::ALL[rng.usize(0..Status::ALL.len())]
}

fn parent(rng: &mut fastrand::Rng) -> Option<ParentRef> {
    rng.bool().then(|| ParentRef {
        shard: u32x(rng),
        run: run(rng),
        seq: u32x(rng),
    })
}

/// A random record of kind `tag` (one of [`kind::ALL`]), every field
/// random, every `Option` arm and status possible.
pub fn record(rng: &mut fastrand::Rng, tag: u8, big: bool) -> RecordBuf {
    let s = |rng: &mut fastrand::Rng| Name::from(string(rng));
    let b = |rng: &mut fastrand::Rng| Payload::from(bytes(rng, big));
    let ob = |rng: &mut fastrand::Rng| rng.bool().then(|| Payload::from(bytes(rng, big)));
    let run = run(rng);
    match tag {
        kind::START => Record::Start {
            run,
            id: s(rng),
            wtype: s(rng),
            version: u32x(rng),
            codec: rng.u8(..),
            started_ms: u64x(rng),
            deadline_ms: u64x(rng),
            parent: parent(rng),
            policy: rng.u8(..),
            from: rng.bool().then(|| Origin {
                run: self::run(rng),
                cause: rng.u8(..),
            }),
            copies: u32x(rng),
            update: rng.bool().then(|| {
                Box::new(StartUpdate {
                    id: s(rng),
                    name: s(rng),
                    payload: b(rng),
                })
            }),
            input: b(rng),
            meta: rng.bool().then(|| {
                Box::new(StartMeta {
                    attributes: b(rng),
                    memo: b(rng),
                })
            }),
        },
        kind::STEP => Record::Step {
            run,
            seq: u32x(rng),
            name: s(rng),
            attempt: u32x(rng),
            status: status(rng),
            payload: b(rng),
        },
        kind::ATTEMPT => Record::Attempt {
            run,
            seq: u32x(rng),
            name: s(rng),
            attempt: u32x(rng),
            retry_at_ms: if rng.bool() { PAUSED } else { u64x(rng) },
            error: b(rng),
        },
        kind::RESUME => Record::Resume {
            run,
            seq: u32x(rng),
        },
        kind::TIMER => Record::Timer {
            run,
            seq: u32x(rng),
            name: s(rng),
            fire_at_ms: u64x(rng),
        },
        kind::FIRED => Record::Fired {
            run,
            seq: u32x(rng),
        },
        kind::SIGNAL => Record::Signal {
            run,
            name: s(rng),
            dedup: u64x(rng),
            payload: b(rng),
            by: ob(rng),
        },
        kind::WAIT => Record::Wait {
            run,
            seq: u32x(rng),
            name: s(rng),
            deadline_ms: u64x(rng),
        },
        kind::WAITED => Record::Waited {
            run,
            seq: u32x(rng),
            outcome: match rng.u8(0..3) {
                0 => WaitOutcome::Signal(u64x(rng)),
                1 => WaitOutcome::TimedOut,
                _ => WaitOutcome::Abandoned,
            },
        },
        kind::VALUE => Record::Value {
            run,
            seq: u32x(rng),
            kind: rng.u8(..),
            value: b(rng),
        },
        kind::CHILD => Record::Child {
            run,
            seq: u32x(rng),
            wtype: s(rng),
            id: s(rng),
            flags: rng.u8(..),
            deadline_ms: u64x(rng),
            input: b(rng),
        },
        kind::CHILD_DONE => Record::ChildDone {
            run,
            seq: u32x(rng),
            status: status(rng),
            payload: b(rng),
        },
        kind::SEND => Record::Send {
            run,
            seq: u32x(rng),
            target: s(rng),
            name: s(rng),
            payload: b(rng),
        },
        kind::CANCEL => Record::Cancel {
            run,
            reason: b(rng),
            by: ob(rng),
        },
        kind::UPDATE => Record::Update {
            run,
            id: s(rng),
            name: s(rng),
            payload: b(rng),
            caller: parent(rng),
        },
        kind::UPDATE_DONE => Record::UpdateDone {
            run,
            ordinal: u64x(rng),
            status: status(rng),
            payload: b(rng),
        },
        kind::HEARTBEAT => Record::Heartbeat {
            run,
            seq: u32x(rng),
            attempt: u32x(rng),
            payload: b(rng),
        },
        kind::PATCH => Record::Patch {
            run,
            seq: u32x(rng),
            id: s(rng),
        },
        kind::AWAITING => Record::Awaiting {
            run,
            seq: u32x(rng),
            name: s(rng),
            attempt: u32x(rng),
        },
        kind::COMPLETED => Record::Completed {
            run,
            seq: u32x(rng),
            attempt: u32x(rng),
            status: status(rng),
            payload: b(rng),
        },
        kind::ATTRIBUTES => Record::Attributes {
            run,
            payload: b(rng),
        },
        kind::CHUNK => Record::Chunk {
            run,
            seq: u32x(rng),
            payload: b(rng),
        },
        kind::STREAM_END => Record::StreamEnd {
            run,
            seq: u32x(rng),
        },
        kind::DONE => Record::Done {
            run,
            status: status(rng),
            finished_ms: u64x(rng),
            payload: b(rng),
            by: ob(rng),
        },
        other => panic!("no record kind {other}"),
    }
}

/// The canonical bytes of `rec`.
pub fn canonical<S: AsRef<str>, B: AsRef<[u8]>>(rec: &Record<S, B>) -> Vec<u8> {
    let mut out = Vec::new();
    fusee_core::record::encode_canonical(rec, &mut out);
    out
}

/// Every string field of `rec`, in canonical order.
pub fn strings(rec: &RecordBuf) -> Vec<Name> {
    let mut out = Vec::new();
    rec.map(|s| out.push(s.clone()), |_| ());
    out
}

/// Lower-case hex, for failure messages.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
