//! Random records of every kind for the round-trip and fuzz tests.

#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;

use fusee_core::shard::BlobRef;
use fusee_core::store::{Apart, ApartRun};

use fusee_core::record::{
    FieldSource, MAX_RUN, Name, PAUSED, Payload, Record, RecordBuf, Status, WaitOutcome,
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

/// Draws every field at random, in the order the record table asks for
/// them: every `Option` arm (a tail's too), status and outcome possible.
struct Random<'a> {
    rng: &'a mut fastrand::Rng,
    big: bool,
}

impl FieldSource<Name, Payload> for Random<'_> {
    type Error = Infallible;

    fn u8(&mut self, _field: &'static str) -> Result<u8, Infallible> {
        Ok(self.rng.u8(..))
    }
    fn v32(&mut self, _field: &'static str) -> Result<u32, Infallible> {
        Ok(u32x(self.rng))
    }
    fn v64(&mut self, field: &'static str) -> Result<u64, Infallible> {
        // A paused attempt half the time: the one reserved value.
        if field == "retry_at_ms" && self.rng.bool() {
            return Ok(PAUSED);
        }
        Ok(u64x(self.rng))
    }
    fn run(&mut self, _field: &'static str) -> Result<u64, Infallible> {
        Ok(run(self.rng))
    }
    fn str(&mut self, _field: &'static str) -> Result<Name, Infallible> {
        Ok(Name::from(string(self.rng)))
    }
    fn bytes(&mut self, _field: &'static str) -> Result<Payload, Infallible> {
        Ok(Payload::from(bytes(self.rng, self.big)))
    }
    fn status(&mut self, _field: &'static str) -> Result<Status, Infallible> {
        Ok(Status::ALL[self.rng.usize(0..Status::ALL.len())])
    }
    fn outcome(&mut self, _field: &'static str) -> Result<WaitOutcome, Infallible> {
        Ok(match self.rng.u8(0..3) {
            0 => WaitOutcome::Signal(u64x(self.rng)),
            1 => WaitOutcome::TimedOut,
            _ => WaitOutcome::Abandoned,
        })
    }
    fn present(&mut self, _field: &'static str) -> Result<bool, Infallible> {
        Ok(self.rng.bool())
    }
    fn more(&mut self, _field: &'static str) -> Result<bool, Infallible> {
        Ok(self.rng.bool())
    }
}

/// A random record of kind `tag` (one of `kind::ALL`), every field
/// random, every `Option` arm and status possible.
pub fn record(rng: &mut fastrand::Rng, tag: u8, big: bool) -> RecordBuf {
    match Record::read_fields(tag, &mut Random { rng, big }) {
        Ok(Some(rec)) => rec,
        Ok(None) => panic!("no record kind {tag}"),
        Err(never) => match never {},
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

/// A random chunks-apart section for a journal of `len` bytes: empty half
/// the time, else one to three frames whose records runs at ascending
/// offsets take, each frame's in two runs at most.
pub fn some_apart(rng: &mut fastrand::Rng, len: usize) -> Apart {
    if rng.bool() {
        return Apart::default();
    }
    let mut runs = Vec::new();
    let mut frames = Vec::new();
    for frame in 0..rng.u32(1..4) {
        let blob = BlobRef {
            offset: rng.u64(..1 << 48),
            len: rng.u32(..),
        };
        let n = rng.u32(1..1000);
        frames.push((blob, n));
        let first = if n > 1 && rng.bool() {
            rng.u32(1..n)
        } else {
            n
        };
        for count in [first, n - first] {
            if count > 0 {
                runs.push(ApartRun {
                    at: rng.u64(0..=len as u64),
                    frame,
                    count,
                });
            }
        }
    }
    // Sorted by offset, a frame's runs keep their order (stable sort).
    runs.sort_by_key(|r| r.at);
    Apart { frames, runs }
}
