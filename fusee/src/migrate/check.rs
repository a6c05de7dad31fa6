//! The run-by-run comparison of two stores (see the [design](super)).

use std::collections::BTreeMap;

use fusee_core::record::RunId;
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
            for run in batch {
                let Some((state, journal)) = run_of(&mut va, run)? else {
                    continue;
                };
                let Some((theirs, their_journal)) = run_of(&mut vb, run)? else {
                    return Err(mismatch(run, "missing from the destination".into()));
                };
                if state != theirs {
                    return Err(mismatch(
                        run,
                        format!("{state} in the source, {theirs} in the destination"),
                    ));
                }
                if journal != their_journal {
                    return Err(mismatch(
                        run,
                        format!(
                            "journals differ ({} bytes in the source, {} in the destination)",
                            journal.len(),
                            their_journal.len()
                        ),
                    ));
                }
                seen += 1;
                out.journal_bytes += journal.len() as u64;
                *out.by_state.entry(state).or_default() += 1;
                if seen.is_multiple_of(4096) {
                    report(progress, Event::Checked(seen))?;
                }
            }
        }
        // Every run of the destination was one of the source's.
        let mut theirs = 0u64;
        let mut cursor = vb.core.newest_first();
        loop {
            let batch = cursor.next_batch(&vb.core, 4096);
            if batch.is_empty() {
                break;
            }
            theirs += batch
                .into_iter()
                .filter(|&r| vb.core.get(r).is_some() || vb.core.parked(r).is_some())
                .count() as u64;
        }
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

/// Run `run`'s state and whole journal (stored prefix and records after
/// it), `None` if the shard has no such run.
fn run_of<R: RunStore>(
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
