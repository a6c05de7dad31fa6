//! The run-by-run comparison of two stores (see the [design](super)).

use std::collections::BTreeMap;

use fusee_core::record::RunId;
use fusee_core::shard::BlobRef;
use fusee_storage::{RunStore, Storage};

use super::{Event, MigrateError, Progress, report};
use crate::inspect::{ShardView, read_chain, rebuild, status_name};

/// What [`compare`] found equal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Shards compared.
    pub shards: u32,
    /// Runs compared, each with the same state and journal on both sides.
    pub runs: u64,
    /// Journal bytes compared.
    pub journal_bytes: u64,
    /// Runs by state (`loaded`, `parked`, or a finished status's name).
    pub by_state: BTreeMap<&'static str, u64>,
}

/// Rebuilds every shard of `a` and `b` at `now_ms` as recovery does and
/// checks that they hold the same shards, the same next run number per
/// shard, and the same runs, each in the same state with a byte-equal
/// journal. The first difference is [`MigrateError::Mismatch`].
pub fn compare<A: Storage, B: Storage>(
    a: &A,
    b: &B,
    now_ms: u64,
    progress: Progress<'_>,
) -> Result<CheckReport, MigrateError> {
    let shards = a.shards().map_err(MigrateError::storage("source", None))?;
    let theirs = b
        .shards()
        .map_err(MigrateError::storage("destination", None))?;
    if shards != theirs {
        return Err(MigrateError::Mismatch {
            shard: 0,
            run: 0,
            what: format!("the source holds shards {shards:?}, the destination {theirs:?}"),
        });
    }
    let mut out = CheckReport::default();
    for shard in shards {
        report(progress, Event::Checking { shard })?;
        let mut va = rebuild(a, shard, now_ms, &mut |_| {})?;
        let mut vb =
            rebuild(b, shard, now_ms, &mut |_| {}).map_err(|e| MigrateError::Mismatch {
                shard,
                run: 0,
                what: format!("the destination does not recover: {e}"),
            })?;
        let mismatch = |run: RunId, what: String| MigrateError::Mismatch { shard, run, what };
        if va.core.next_run_id() != vb.core.next_run_id() {
            return Err(mismatch(
                0,
                format!(
                    "next run number {} in the source, {} in the destination",
                    va.core.next_run_id(),
                    vb.core.next_run_id()
                ),
            ));
        }
        let mut seen = 0u64;
        let mut cursor = va.core.newest_first();
        loop {
            let batch = cursor.next_batch(&va.core, 4096);
            if batch.is_empty() {
                break;
            }
            for (i, run) in batch.iter().copied().enumerate() {
                if i % PREFETCH_RUNS == 0 {
                    let next = || batch[i..].iter().copied().take(PREFETCH_RUNS);
                    prefetch("source", &mut va, next())?;
                    prefetch("destination", &mut vb, next())?;
                }
                let Some(ours) = run_of(&mut va, run)? else {
                    continue;
                };
                let theirs = run_of(&mut vb, run)?;
                same_run(shard, run, &ours, theirs.as_ref(), &mut out)?;
                seen += 1;
                if seen.is_multiple_of(4096) {
                    report(progress, Event::Checked(seen))?;
                }
            }
        }
        // Every run of the destination was one of the source's.
        let theirs = runs_held(&vb);
        if theirs != seen {
            return Err(mismatch(
                0,
                format!("{seen} runs in the source, {theirs} in the destination"),
            ));
        }
        out.runs += seen;
        out.shards += 1;
        report(progress, Event::Checked(seen))?;
    }
    Ok(out)
}

/// Checks that destination run `run` of `shard` (`theirs`, `None` if
/// missing) is in the same state as the source's `ours` with a byte-equal
/// journal, and counts it in `out`.
pub(crate) fn same_run(
    shard: u32,
    run: RunId,
    ours: &(&'static str, Vec<u8>),
    theirs: Option<&(&'static str, Vec<u8>)>,
    out: &mut CheckReport,
) -> Result<(), MigrateError> {
    let mismatch = |what: String| MigrateError::Mismatch { shard, run, what };
    let (state, journal) = ours;
    let Some((their_state, their_journal)) = theirs else {
        return Err(mismatch("missing from the destination".into()));
    };
    if state != their_state {
        return Err(mismatch(format!(
            "{state} in the source, {their_state} in the destination"
        )));
    }
    if journal != their_journal {
        return Err(mismatch(format!(
            "journals differ ({} bytes in the source, {} in the destination)",
            journal.len(),
            their_journal.len()
        )));
    }
    out.journal_bytes += journal.len() as u64;
    *out.by_state.entry(state).or_default() += 1;
    Ok(())
}

/// How many runs (loaded or parked) a rebuilt shard holds.
pub(crate) fn runs_held<R>(view: &ShardView<R>) -> u64 {
    runs_in(&view.core)
}

/// How many runs (loaded or parked) `core` holds: a rebuilt shard's, or a
/// live one's (a backup's check, [`crate::backup`]).
pub(crate) fn runs_in(core: &fusee_core::shard::ShardCore) -> u64 {
    let mut held = 0u64;
    let mut cursor = core.newest_first();
    loop {
        let batch = cursor.next_batch(core, 4096);
        if batch.is_empty() {
            return held;
        }
        held += batch
            .into_iter()
            .filter(|&r| core.get(r).is_some() || core.parked(r).is_some())
            .count() as u64;
    }
}

/// How many runs' frames one [`prefetch`] names (PostgreSQL fetches them
/// in one round trip; see `RunStore::prefetch`).
pub(crate) const PREFETCH_RUNS: usize = 256;

/// Hints to the run store that the frames of `runs` (loaded runs' stored
/// prefixes, parked runs' frames) are read next.
pub(crate) fn prefetch<R: RunStore>(
    side: &'static str,
    view: &mut ShardView<R>,
    runs: impl Iterator<Item = RunId>,
) -> Result<(), MigrateError> {
    let blobs: Vec<BlobRef> = runs
        .filter_map(|run| match view.core.get(run) {
            Some(l) => l.blob,
            None => view.core.parked(run).map(|p| p.blob()),
        })
        .collect();
    view.runs
        .prefetch(&blobs)
        .map_err(MigrateError::storage(side, Some(view.shard)))
}

/// Run `run`'s state and whole journal (stored prefix and records after
/// it), `None` if the shard has no such run.
pub(crate) fn run_of<R: RunStore>(
    view: &mut ShardView<R>,
    run: RunId,
) -> Result<Option<(&'static str, Vec<u8>)>, MigrateError> {
    let shard = view.shard;
    let damaged = |e: crate::inspect::FrameError| MigrateError::Damaged {
        shard,
        what: "run frame",
        detail: e.to_string(),
    };
    if let Some(l) = view.core.get(run) {
        let state = l.done.map_or("loaded", |(s, _)| status_name(s));
        let tail = l.journal.clone();
        let mut whole = match l.blob {
            Some(blob) => read_chain(&mut view.runs, blob).map_err(damaged)?.journal,
            None => Vec::new(),
        };
        whole.extend_from_slice(&tail);
        return Ok(Some((state, whole)));
    }
    let Some(parked) = view.core.parked(run) else {
        return Ok(None);
    };
    let state = parked.done().map_or("parked", status_name);
    let journal = read_chain(&mut view.runs, parked.blob())
        .map_err(damaged)?
        .journal;
    Ok(Some((state, journal)))
}
