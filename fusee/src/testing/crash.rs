//! `crash_everywhere`: a scenario run once to its end, then again from
//! every prefix of the log it wrote, each outcome checked against the
//! uncrashed one.
//!
//! Why prefixes of the log: on one shard every record of every run the
//! scenario touches is in one log, in order; the store of a crash is
//! exactly a prefix of it (the storage contract: a crash keeps a prefix of
//! what was appended, holding every flushed record). Checkpoints are off
//! in these engines, so the log keeps every record and a prefix is the
//! whole durable state.

use std::sync::Arc;
use std::time::Duration;

use fusee_core::record::{Record, RecordBuf, RunId, decode_canonical_all, value_kind};
use fusee_storage::{LogStore, MemoryStorage, Storage};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{ATTACH, RunFailure, Settings, TestEngine, TestError};
use crate::workflow::Workflow;

/// The workflow ID [`TestEngine::crash_everywhere`] runs its workflow as.
pub const CRASH_ID: &str = "crash-everywhere";

/// One outcome of a crash-everywhere run, for the check.
#[derive(Debug)]
pub struct CrashPoint<'a, T> {
    /// `None` for the uncrashed run (checked first); `Some(n)` for the
    /// run carried on from a crash that kept exactly the first `n` records
    /// (0 to all of them).
    pub crashed_after: Option<usize>,
    /// The records the uncrashed run wrote.
    pub records: usize,
    /// What the scenario returned here.
    pub outcome: &'a T,
    /// What it returned uncrashed.
    pub uncrashed: &'a T,
    /// The records the crash kept (all of them for the uncrashed run).
    pub kept: &'a [RecordBuf],
}

impl<T> CrashPoint<'_, T> {
    /// The steps whose result the crash kept (`Step` records): their
    /// functions must not have run again after the crash. By run number
    /// and step name.
    pub fn durable_steps(&self) -> Vec<(RunId, String)> {
        self.kept
            .iter()
            .filter_map(|r| match r {
                Record::Step { run, name, .. } => Some((*run, name.to_string())),
                _ => None,
            })
            .collect()
    }
}

/// What a crash-everywhere run covered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashReport {
    /// The records the uncrashed run wrote.
    pub records: usize,
    /// The crash points run and checked (`records + 1`: after 0 records
    /// through after all of them).
    pub crash_points: usize,
}

impl TestEngine {
    /// Runs `workflow` with `input` (as [`CRASH_ID`]) to its end on a
    /// fresh one-shard engine, then again from every crash point: for
    /// each `n`, an engine on a store holding exactly the first `n`
    /// records the uncrashed run wrote, where the workflow is started
    /// again (attaching to the run if its start was durable) and carried
    /// to its end. `check` sees the uncrashed run first, then every crash
    /// point, each with the uncrashed outcome; it asserts (panics) on what
    /// it finds wrong.
    ///
    /// The engines use this kit's workflows, mocks and settings, with one
    /// shard and no checkpoints. Each crash point's clock starts at the
    /// latest time its kept records hold (a start or end, a recorded
    /// `now()`, a fired sleep's time), as a restarted process's clock
    /// would, so code after the crash never reads a time before one it saw. A run that does not end
    /// ([`TestError::Stalled`], [`TestError::Timeout`]) or whose code
    /// departs from its journal ([`Error::Determinism`](crate::Error::Determinism))
    /// is an error naming its crash point.
    pub async fn crash_everywhere<I: Serialize, O: DeserializeOwned>(
        &self,
        workflow: Workflow<I, O>,
        input: &I,
        check: impl FnMut(&CrashPoint<'_, Result<O, RunFailure>>),
    ) -> Result<CrashReport, TestError> {
        self.crash_everywhere_with(
            async |kit: &TestEngine| {
                kit.engine()
                    .start_with(workflow, CRASH_ID, input, ATTACH)
                    .await?;
                kit.outcome(workflow, CRASH_ID).await
            },
            check,
        )
        .await
    }

    /// [`crash_everywhere`](Self::crash_everywhere) of a scenario: what
    /// your test does with a fresh engine (start runs, send signals, wait
    /// for results through the kit so time moves), returning the outcome
    /// to compare. The scenario runs again after every crash, on the
    /// engine that carries on, so it must tolerate finding its work done:
    /// starts with [`IdPolicy::Attach`](crate::IdPolicy::Attach), and a
    /// signal may find its run finished ([`Error::Finished`](crate::Error::Finished)).
    pub async fn crash_everywhere_with<T>(
        &self,
        scenario: impl AsyncFn(&TestEngine) -> Result<T, TestError>,
        mut check: impl FnMut(&CrashPoint<'_, T>),
    ) -> Result<CrashReport, TestError> {
        let settings = Arc::new(Settings {
            config: self
                .settings
                .config
                .clone()
                .shards(1)
                // No checkpoint: the log keeps every record.
                .checkpoint_bytes(u64::MAX)
                .checkpoint_interval(Duration::from_secs(100 * 365 * 86_400)),
            register: Arc::clone(&self.settings.register),
            mocks: Arc::clone(&self.settings.mocks),
            start_ms: self.settings.start_ms,
            wait_limit: self.settings.wait_limit,
            stall_after: self.settings.stall_after,
        });
        let at = |crashed_after, records| {
            move |e: TestError| TestError::CrashPoint {
                crashed_after,
                records,
                source: Box::new(e),
            }
        };
        let kit = TestEngine::on(Arc::clone(&settings), MemoryStorage::new())
            .await
            .map_err(at(None, 0))?;
        let uncrashed = scenario(&kit).await.map_err(at(None, 0))?;
        let crashed = kit.memory.crash();
        kit.stop().await;
        let log = log_records(&crashed).map_err(at(None, 0))?;
        drop(kit);
        let records = log.len();
        let kept: Vec<RecordBuf> = log.iter().map(|(r, _)| r.clone()).collect();
        check(&CrashPoint {
            crashed_after: None,
            records,
            outcome: &uncrashed,
            uncrashed: &uncrashed,
            kept: &kept,
        });
        for n in 0..=records {
            let bytes: Vec<&[u8]> = log[..n].iter().map(|(_, b)| b.as_slice()).collect();
            let memory = store_with(&bytes).map_err(at(Some(n), records))?;
            // The clock starts at the latest time the kept records hold,
            // as a restarted process's would be: never before a time the
            // code already saw (a timer it saw fire, say).
            let resumed = Arc::new(Settings {
                start_ms: settings.start_ms.max(latest_ms(&kept[..n])),
                ..Settings::clone(&settings)
            });
            let kit = TestEngine::on(resumed, memory)
                .await
                .map_err(at(Some(n), records))?;
            let outcome = scenario(&kit).await.map_err(at(Some(n), records));
            kit.stop().await;
            drop(kit);
            check(&CrashPoint {
                crashed_after: Some(n),
                records,
                outcome: &outcome?,
                uncrashed: &uncrashed,
                kept: &kept[..n],
            });
        }
        Ok(CrashReport {
            records,
            crash_points: records + 1,
        })
    }
}

/// The latest time `kept` holds: each run's start and end, every recorded
/// `now()`, every sleep that fired (at its fire time).
fn latest_ms(kept: &[RecordBuf]) -> u64 {
    let mut armed: std::collections::HashMap<(RunId, u32), u64> = Default::default();
    let mut latest = 0;
    for r in kept {
        let seen = match r {
            RecordBuf::Start { started_ms, .. } => *started_ms,
            RecordBuf::Done { finished_ms, .. } => *finished_ms,
            RecordBuf::Value { kind, value, .. } if *kind == value_kind::NOW => {
                crate::ctx::value_u64(value)
            }
            RecordBuf::Timer {
                run,
                seq,
                fire_at_ms,
                ..
            } => {
                armed.insert((*run, *seq), *fire_at_ms);
                0
            }
            RecordBuf::Fired { run, seq } => armed.get(&(*run, *seq)).copied().unwrap_or(0),
            _ => 0,
        };
        latest = latest.max(seen);
    }
    latest
}

/// Shard 0's log in `memory` (an engine's store, after a crash): each
/// record decoded, with its bytes.
fn log_records(memory: &MemoryStorage) -> Result<Vec<(RecordBuf, Vec<u8>)>, TestError> {
    let storage = |what| move |error| TestError::Storage { what, error };
    let mut parts = memory
        .open_shard(0)
        .map_err(storage("opening the uncrashed run's store"))?;
    let mut out = Vec::new();
    let mut bad = None;
    parts
        .log
        .read(0, &mut |lsn, bytes| {
            match decode_canonical_all(bytes) {
                Ok(mut recs) if recs.len() == 1 => {
                    out.push((recs.remove(0), bytes.to_vec()));
                }
                Ok(recs) => bad = Some(format!("log record {lsn} holds {} records", recs.len())),
                Err(e) => bad = Some(format!("log record {lsn} does not decode: {e}")),
            }
            Ok(())
        })
        .map_err(storage("reading the uncrashed run's log"))?;
    match bad {
        Some(why) => Err(TestError::Storage {
            what: "reading the uncrashed run's log",
            error: fusee_storage::StorageError::Backend(why.into()),
        }),
        None => Ok(out),
    }
}

/// A fresh store whose shard 0 holds exactly `records`, durable.
fn store_with(records: &[&[u8]]) -> Result<MemoryStorage, TestError> {
    let storage = |what| move |error| TestError::Storage { what, error };
    let memory = MemoryStorage::new();
    let mut parts = memory
        .open_shard(0)
        .map_err(storage("making a crash point's store"))?;
    for (i, r) in records.iter().enumerate() {
        parts
            .log
            .append(i as u64 + 1, r)
            .map_err(storage("making a crash point's store"))?;
    }
    parts
        .log
        .flush()
        .map_err(storage("making a crash point's store"))?;
    drop(parts);
    Ok(memory.crash())
}
