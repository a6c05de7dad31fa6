//! The records, frames and parked runs that the criterion benches and the
//! comparison share, so every figure is measured on the same bytes.
//!
//! A *journal* is one run's life: `Start` (64-byte input), ten `Step`s
//! (100-byte payloads) and `Done`: twelve records, about 1.6 KB in canonical
//! form. The log workload cycles through the records of
//! [`LOG_CYCLE_RUNS`] journals in order; a run-store frame is one whole
//! journal's canonical bytes (what parking a finished run writes).

use fusee_core::record::{Name, Payload, Record, RecordBuf, Status, encode_canonical};
use fusee_core::shard::{BlobRef, Mode, ShardCore};

/// How many distinct journals the log workload and the frame workload
/// cycle through: enough to vary record sizes (run IDs grow from one to
/// three digits), few enough to stay in cache while the storage is measured.
pub const LOG_CYCLE_RUNS: u64 = 100;

/// Records per journal: `Start`, ten `Step`s, `Done`.
pub const RECORDS_PER_JOURNAL: u64 = 12;

/// The `Start` record of run `run` (workflow ID `order-{run}`, 64-byte input).
pub fn start(run: u64) -> RecordBuf {
    Record::Start {
        run,
        id: Name::from(format!("order-{run}")),
        wtype: Name::from("checkout"),
        version: 1,
        codec: 0,
        started_ms: 0,
        deadline_ms: 0,
        parent: None,
        policy: 0,
        from: None,
        copies: 0,
        update: None,
        input: Payload::from(&[7u8; 64][..]),
        meta: None,
    }
}

/// Step `seq` of run `run`: a successful `charge` with a 100-byte payload.
pub fn step(run: u64, seq: u32) -> RecordBuf {
    Record::Step {
        run,
        seq,
        name: Name::from("charge"),
        attempt: 1,
        status: Status::Ok,
        payload: Payload::from(&[1u8; 100][..]),
        ended_ms: None,
    }
}

/// The `Done` record of run `run`.
pub fn done(run: u64) -> RecordBuf {
    Record::Done {
        run,
        status: Status::Ok,
        finished_ms: 1,
        payload: Payload::from(&b"ok"[..]),
        by: None,
    }
}

/// Run `run`'s journal: `Start`, ten `Step`s, `Done`.
pub fn journal(run: u64) -> Vec<RecordBuf> {
    let mut recs = Vec::with_capacity(RECORDS_PER_JOURNAL as usize);
    recs.push(start(run));
    recs.extend((0..10).map(|seq| step(run, seq)));
    recs.push(done(run));
    recs
}

/// The journals of runs `1..=runs`, each record with its canonical bytes.
pub fn encoded_journals(runs: u64) -> Vec<(RecordBuf, Vec<u8>)> {
    let mut out = Vec::with_capacity((runs * RECORDS_PER_JOURNAL) as usize);
    for run in 1..=runs {
        for rec in journal(run) {
            let mut bytes = Vec::new();
            encode_canonical(&rec, &mut bytes);
            out.push((rec, bytes));
        }
    }
    out
}

/// The log workload: record `i` (from 0) is the canonical bytes of record
/// `i mod len` of [`LOG_CYCLE_RUNS`] journals in order. Every subject of a
/// comparison appends exactly these bytes.
#[derive(Clone, Debug)]
pub struct LogRecords {
    records: Vec<Vec<u8>>,
}

impl Default for LogRecords {
    fn default() -> Self {
        Self::new()
    }
}

impl LogRecords {
    /// The workload's distinct records.
    pub fn new() -> Self {
        let records = encoded_journals(LOG_CYCLE_RUNS)
            .into_iter()
            .map(|(_, bytes)| bytes)
            .collect();
        Self { records }
    }

    /// Record `i`'s canonical bytes.
    pub fn get(&self, i: u64) -> &[u8] {
        debug_assert!(!self.records.is_empty());
        &self.records[(i % self.records.len() as u64) as usize]
    }

    /// Total bytes of records `0..n`.
    pub fn bytes(&self, n: u64) -> u64 {
        let len = self.records.len() as u64;
        let cycle: u64 = self.records.iter().map(|r| r.len() as u64).sum();
        let tail: u64 = (0..n % len).map(|i| self.get(i).len() as u64).sum();
        (n / len) * cycle + tail
    }

    /// The longest record, in bytes.
    pub fn max_len(&self) -> usize {
        self.records.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// Mean record length, in bytes.
    pub fn mean_len(&self) -> f64 {
        self.bytes(self.records.len() as u64) as f64 / self.records.len() as f64
    }
}

/// The frame workload: frame `k` is run `k mod LOG_CYCLE_RUNS + 1`'s whole
/// journal, concatenated canonical records.
#[derive(Clone, Debug)]
pub struct Frames {
    frames: Vec<Vec<u8>>,
}

impl Default for Frames {
    fn default() -> Self {
        Self::new()
    }
}

impl Frames {
    /// The workload's distinct frames.
    pub fn new() -> Self {
        let frames = (1..=LOG_CYCLE_RUNS)
            .map(|run| {
                let mut frame = Vec::new();
                for rec in journal(run) {
                    encode_canonical(&rec, &mut frame);
                }
                frame
            })
            .collect();
        Self { frames }
    }

    /// Frame `k`'s bytes.
    pub fn get(&self, k: u64) -> &[u8] {
        debug_assert!(!self.frames.is_empty());
        &self.frames[(k % self.frames.len() as u64) as usize]
    }

    /// Total bytes of frames `0..n`.
    pub fn bytes(&self, n: u64) -> u64 {
        (0..n).map(|k| self.get(k).len() as u64).sum()
    }
}

/// A `ShardCore` holding `n` parked sleepers: runs `1..=n`, each started,
/// waiting on a timer in `[at, at + spread)` (drawn from a
/// `fastrand::Rng::with_seed(seed)`), parked with a 200-byte frame
/// reference; spare capacity released, so [`ShardCore::table_bytes`] is
/// what the parked population costs.
pub fn parked_sleepers(n: u64, at: u64, spread: u64, seed: u64) -> ShardCore {
    let mut core = ShardCore::new(0, 1, 1000, 0);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut lsn = 0;
    for run in 1..=n {
        lsn += 1;
        core.apply(lsn, &start(run), Mode::LIVE);
        lsn += 1;
        let timer: RecordBuf = Record::Timer {
            run,
            seq: 0,
            name: Name::from("sleep"),
            fire_at_ms: at + rng.u64(0..spread.max(1)),
        };
        core.apply(lsn, &timer, Mode::LIVE);
        let blob = BlobRef {
            offset: run * 256,
            len: 200,
        };
        core.park(run, blob, false);
        while core.take_event().is_some() {}
    }
    core.shrink_spare(0);
    core
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_bytes_add_up() {
        let log = LogRecords::new();
        let n = LOG_CYCLE_RUNS * RECORDS_PER_JOURNAL * 2 + 5;
        let direct: u64 = (0..n).map(|i| log.get(i).len() as u64).sum();
        assert_eq!(log.bytes(n), direct);
        assert!(log.max_len() > 100 && log.mean_len() > 100.0);
    }

    #[test]
    fn frames_are_whole_journals() {
        let frames = Frames::new();
        let n = fusee_core::record::iter_canonical(frames.get(3)).count() as u64;
        assert_eq!(n, RECORDS_PER_JOURNAL);
    }

    #[test]
    fn sleepers_are_parked() {
        let core = parked_sleepers(100, 1000, 10, 1);
        assert_eq!(core.parked_len(), 100);
        assert!(core.table_bytes() > 0);
    }
}
