//! Changing a store's shard count: every run moved to the shard its
//! workflow ID hashes to under the new count, renumbered there, every link
//! between runs rewritten (see the [design](super#resharding)).

use fusee_core::record::{
    MAX_RUN, ParentRef, Payload, Record, RecordBuf, RunId, decode_canonical_all, encode_canonical,
};
use fusee_core::shard::{BlobRef, shard_of, shard_of_hash};
use fusee_core::store::{Checkpoint, CheckpointRun};
use fusee_core::table::{Entry, RECORD, flag};
use fusee_core::wire::hash_id;
use fusee_storage::{CheckpointStore, IndexChange, LogStore, RunStore, Storage};

use super::check::{CheckReport, PREFETCH_RUNS, prefetch, run_of, runs_held, same_run};
use super::copy::{CopyReport, Inboxes, copy_frame};
use super::{Event, MigrateError, Progress, report};
use crate::inspect::{ShardView, rebuild};
use crate::runtime::messages::{Message, Outbox};

/// Index bytes per base chunk streamed to the destination.
const CHUNK_BYTES: usize = 64 << 10;

/// The run number links to a run the source no longer holds are given
/// (its retention ended): no run of the destination has it, so they stay
/// dangling as they were, never naming another run.
pub const GONE: RunId = MAX_RUN;

/// The source's shards, rebuilt.
pub(crate) type Views<R> = Vec<ShardView<R>>;

/// Where every run of the source goes.
pub(crate) struct Plan {
    /// The new shard count.
    shards: u32,
    /// By source shard number: `(old run, new shard, new run)`, by old run.
    moves: Vec<Vec<(RunId, u32, RunId)>>,
    /// By destination shard: `(source shard, old run)`, by new run.
    into: Vec<Vec<(u32, RunId)>>,
    /// By source shard number: its inbox rows (PostgreSQL), taken before
    /// the shard was rebuilt (a PostgreSQL shard opens once at a time).
    inboxes: Vec<Vec<Vec<u8>>>,
}

impl Plan {
    /// Source shard `shard`'s run `run` in the destination.
    fn find(&self, shard: u32, run: RunId) -> Option<(u32, RunId)> {
        let moves = self.moves.get(shard as usize)?;
        let i = moves.binary_search_by_key(&run, |m| m.0).ok()?;
        Some((moves[i].1, moves[i].2))
    }

    /// A link to source run `(shard, run)`, pointed at its new place, or at
    /// [`GONE`] if the source no longer holds it.
    fn link(&self, p: ParentRef) -> ParentRef {
        let (shard, run) = self.find(p.shard, p.run).unwrap_or((0, GONE));
        ParentRef {
            shard,
            run,
            seq: p.seq,
        }
    }

    /// Rewrites the journal of source shard `shard`'s run `run` (the whole
    /// of it, or a handover's `Start`) for the destination: each record's
    /// run, a `Start`'s parent and origin, an `Update`'s caller, and the
    /// next run's `Start` inside a handover `Done`.
    fn rewrite(&self, shard: u32, journal: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let records = decode_canonical_all(journal).map_err(|e| e.to_string())?;
        for mut rec in records {
            self.rewrite_record(shard, &mut rec)?;
            encode_canonical(&rec, out);
        }
        Ok(())
    }

    fn rewrite_record(&self, shard: u32, rec: &mut RecordBuf) -> Result<(), String> {
        let old = rec.run();
        let (_, run) = self
            .find(shard, old)
            .ok_or_else(|| format!("a record of run {old}, which the shard does not hold"))?;
        rec.set_run(run);
        match rec {
            Record::Start { parent, from, .. } => {
                if let Some(p) = parent {
                    *p = self.link(*p);
                }
                // The replaced run is the same workflow ID's: same shard.
                if let Some(o) = from {
                    o.run = self.find(shard, o.run).map_or(GONE, |(_, r)| r);
                }
            }
            Record::Update {
                caller: Some(c), ..
            } => *c = self.link(*c),
            Record::Done {
                status, payload, ..
            } if status.is_handover() => {
                // The next run's `Start` (the core trusts only exactly one).
                if let Ok(next) = decode_canonical_all(payload)
                    && next.len() == 1
                    && matches!(next[0], Record::Start { .. })
                {
                    let mut bytes = Vec::with_capacity(payload.len());
                    self.rewrite(shard, payload, &mut bytes)
                        .map_err(|e| format!("a handover's next run: {e}"))?;
                    *payload = Payload::from(bytes);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Prefetches the source frames of the next [`PREFETCH_RUNS`] of `runs`
/// (`(source shard, old run)`), from each source shard they come from.
fn prefetch_sources<R: RunStore>(
    views: &mut [ShardView<R>],
    runs: &[(u32, RunId)],
) -> Result<(), MigrateError> {
    let next = &runs[..runs.len().min(PREFETCH_RUNS)];
    for view in views.iter_mut() {
        let shard = view.shard;
        let mine = next
            .iter()
            .filter(|&&(from, _)| from == shard)
            .map(|&(_, r)| r);
        prefetch("source", view, mine)?;
    }
    Ok(())
}

/// Rebuilds every shard of `src` as recovery would and plans where each
/// run goes under `shards` shards: to `shard_of` its ID, numbered there in
/// the order of (source shard, run number), so the runs of one workflow ID
/// (all on one source shard) keep their order and the newest stays the
/// newest.
pub(crate) fn plan<S: Storage>(
    src: &S,
    src_inbox: &mut dyn Inboxes<S::Log>,
    shards: u32,
    now_ms: u64,
    progress: Progress<'_>,
) -> Result<(Views<S::Runs>, Plan), MigrateError> {
    let numbers = src
        .shards()
        .map_err(MigrateError::storage("source", None))?;
    let mut views = Vec::with_capacity(numbers.len());
    let top = numbers.iter().max().map_or(0, |&s| s as usize + 1);
    let mut plan = Plan {
        shards,
        moves: vec![Vec::new(); top],
        into: vec![Vec::new(); shards as usize],
        inboxes: vec![Vec::new(); top],
    };
    let mut next = vec![1 as RunId; shards as usize];
    for shard in numbers {
        report(progress, Event::Planning { shard })?;
        if src_inbox.present() {
            let from = MigrateError::storage("source", Some(shard));
            let mut s = src.open_shard(shard).map_err(&from)?;
            plan.inboxes[shard as usize] = src_inbox.take(&mut s.log).map_err(&from)?;
        }
        let view = rebuild(src, shard, now_ms, &mut |_| {})?;
        let mut runs = Vec::new();
        let mut cursor = view.core.newest_first();
        loop {
            let batch = cursor.next_batch(&view.core, 4096);
            if batch.is_empty() {
                break;
            }
            runs.extend(batch);
        }
        runs.reverse();
        let moves = &mut plan.moves[shard as usize];
        for run in runs {
            let id_hash = if let Some(l) = view.core.get(run) {
                hash_id(&l.id)
            } else if let Some(e) = view.core.parked_record(run) {
                e.id_hash()
            } else {
                continue;
            };
            if run == GONE {
                return Err(MigrateError::Damaged {
                    shard,
                    what: "run table",
                    detail: format!("run {run} is the number reserved for gone runs"),
                });
            }
            let to = shard_of_hash(id_hash, shards);
            let new = next[to as usize];
            next[to as usize] += 1;
            moves.push((run, to, new));
            plan.into[to as usize].push((shard, run));
        }
        views.push(view);
    }
    Ok((views, plan))
}

/// Writes every shard of the destination `dst` (new, with `plan.shards`
/// shards) from the rebuilt source `views`: parked runs as one frame each
/// (renumbered, journal rewritten) listed by a base index, loaded runs in
/// the checkpoint, and every message in flight (checkpoint outboxes, those
/// the log tails regenerate, PostgreSQL inbox rows) in the outbox of the
/// shard it now goes to, its links rewritten. Nothing goes in the logs.
pub(crate) fn write<R: RunStore, D: Storage>(
    views: &mut [ShardView<R>],
    plan: &Plan,
    dst: &D,
    now_ms: u64,
    progress: Progress<'_>,
) -> Result<CopyReport, MigrateError> {
    let mut out = CopyReport::default();
    let mut outboxes: Vec<Outbox> = (0..plan.shards).map(|_| Outbox::default()).collect();
    for view in views.iter() {
        let shard = view.shard;
        let damaged = |what: &'static str| {
            move |e: &dyn std::fmt::Display| MigrateError::Damaged {
                shard,
                what,
                detail: e.to_string(),
            }
        };
        let mut messages: Vec<Message> = Outbox::decode(&view.outbox)
            .map_err(|e| damaged("checkpoint outbox")(&e))?
            .pending()
            .map(|(_, m)| m.clone())
            .collect();
        messages.extend(
            view.released
                .iter()
                .filter_map(|o| Message::of(o.clone(), &view.core)),
        );
        for bytes in plan.inboxes.get(shard as usize).into_iter().flatten() {
            messages.push(Message::from_bytes(bytes).map_err(|e| damaged("inbox message")(&e))?);
        }
        for mut m in messages {
            m.map_parents(|p| plan.link(p));
            out.inbox_messages += 1;
            outboxes[m.target_shard(plan.shards) as usize].add(m);
        }
    }
    let mut buf = Vec::new();
    let mut frame = Vec::new();
    let mut rewritten = Vec::new();
    for (to, (outbox, runs)) in outboxes.iter().zip(&plan.into).enumerate() {
        let to = to as u32;
        report(
            progress,
            Event::Shard {
                shard: to,
                shards: plan.shards,
            },
        )?;
        let dest = MigrateError::storage("destination", Some(to));
        let mut d = dst.open_shard(to).map_err(&dest)?;
        if d.recovered.checkpoint.is_some()
            || d.recovered.store_position != 0
            || d.log.last_lsn() != 0
        {
            return Err(MigrateError::TargetNotEmpty(format!("(shard {to})")));
        }
        let mut cp = Checkpoint {
            shard: to,
            shards: plan.shards,
            next_run: runs.len() as RunId + 1,
            created_ms: now_ms,
            outbox: outbox.encode(),
            ..Checkpoint::default()
        };
        d.checkpoint.begin_base().map_err(&dest)?;
        let mut chunk = Vec::with_capacity(CHUNK_BYTES + RECORD);
        let mut parked = 0u64;
        for (i, &(from, old)) in runs.iter().enumerate() {
            if i % PREFETCH_RUNS == 0 {
                prefetch_sources(views, &runs[i..])?;
            }
            let new = i as RunId + 1;
            let view = views.iter_mut().find(|v| v.shard == from).ok_or_else(|| {
                MigrateError::Mismatch {
                    shard: from,
                    run: old,
                    what: "planned from a shard not read".into(),
                }
            })?;
            let damaged = |detail: String| MigrateError::Damaged {
                shard: from,
                what: "run journal",
                detail: format!("run {old}: {detail}"),
            };
            if view.core.get(old).is_some() {
                let Some((_, journal)) = run_of(view, old)? else {
                    continue;
                };
                rewritten.clear();
                plan.rewrite(from, &journal, &mut rewritten)
                    .map_err(damaged)?;
                cp.runs.push(CheckpointRun {
                    run: new,
                    journal: std::mem::take(&mut rewritten),
                    ..CheckpointRun::default()
                });
                out.loaded += 1;
            } else if let Some(e) = view.core.parked_record(old) {
                let blob = BlobRef {
                    offset: e.offset(),
                    len: e.len(),
                };
                let mut retarget = |run: RunId, journal: &[u8]| {
                    let (_, new) = plan.find(from, run).ok_or_else(|| {
                        format!("frame of run {run}, which the shard does not hold")
                    })?;
                    let mut bytes = Vec::with_capacity(journal.len());
                    plan.rewrite(from, journal, &mut bytes)?;
                    Ok((new, bytes))
                };
                let at = copy_frame(
                    &mut view.runs,
                    &mut d.runs,
                    blob,
                    u64::MAX,
                    &mut buf,
                    &mut frame,
                    Some(&mut retarget),
                )
                .map_err(|f| f.at(from))?;
                let mut moved = Entry::new(new, e.id_hash(), e.state());
                moved.set_location(at.offset, at.len);
                moved.set_time(e.time());
                moved.set(flag::CHAINED, false);
                chunk.extend_from_slice(&moved.record());
                parked += 1;
                out.frames += 1;
                if chunk.len() >= CHUNK_BYTES {
                    d.checkpoint.base_chunk(&chunk).map_err(&dest)?;
                    chunk.clear();
                }
                if parked.is_multiple_of(4096) {
                    report(progress, Event::Frames(parked))?;
                }
            }
        }
        if !chunk.is_empty() {
            d.checkpoint.base_chunk(&chunk).map_err(&dest)?;
        }
        cp.store_len = d.runs.position();
        cp.index_runs = parked;
        let committed = d
            .checkpoint
            .commit(&mut d.runs, IndexChange::Base, &cp.encode())
            .map_err(&dest)?;
        if committed.index_records != parked {
            return Err(MigrateError::Mismatch {
                shard: to,
                run: 0,
                what: format!(
                    "the destination's index holds {} records, {parked} were written",
                    committed.index_records
                ),
            });
        }
        report(progress, Event::Committed)?;
        d.log.seal().map_err(&dest)?;
        out.parked += parked;
        out.shards += 1;
        report(progress, Event::ShardDone)?;
    }
    Ok(out)
}

/// Checks the destination against the plan: each destination shard, rebuilt
/// as recovery does, holds exactly the runs planned for it, each in the
/// source run's state with the source's journal as rewritten, each of a
/// workflow ID that `shard_of` places on that shard, and numbers runs on
/// after them.
pub(crate) fn check<R: RunStore, D: Storage>(
    views: &mut [ShardView<R>],
    plan: &Plan,
    dst: &D,
    now_ms: u64,
    progress: Progress<'_>,
) -> Result<CheckReport, MigrateError> {
    let theirs = dst
        .shards()
        .map_err(MigrateError::storage("destination", None))?;
    if theirs != (0..plan.shards).collect::<Vec<_>>() {
        return Err(MigrateError::Mismatch {
            shard: 0,
            run: 0,
            what: format!(
                "the destination holds shards {theirs:?}, not 0..{}",
                plan.shards
            ),
        });
    }
    let mut out = CheckReport::default();
    for (to, runs) in plan.into.iter().enumerate() {
        let to = to as u32;
        report(progress, Event::Checking { shard: to })?;
        let mismatch = |run: RunId, what: String| MigrateError::Mismatch {
            shard: to,
            run,
            what,
        };
        let mut vb = rebuild(dst, to, now_ms, &mut |_| {})
            .map_err(|e| mismatch(0, format!("the destination does not recover: {e}")))?;
        let next = runs.len() as RunId + 1;
        if vb.core.next_run_id() != next {
            return Err(mismatch(
                0,
                format!(
                    "next run number {} in the destination, {next} planned",
                    vb.core.next_run_id()
                ),
            ));
        }
        for (i, &(from, old)) in runs.iter().enumerate() {
            let new = i as RunId + 1;
            if i % PREFETCH_RUNS == 0 {
                prefetch_sources(views, &runs[i..])?;
                let next = (new..).take(PREFETCH_RUNS.min(runs.len() - i));
                prefetch("destination", &mut vb, next)?;
            }
            let Some(view) = views.iter_mut().find(|v| v.shard == from) else {
                return Err(mismatch(
                    new,
                    format!("planned from shard {from}, not read"),
                ));
            };
            let Some((state, journal)) = run_of(view, old)? else {
                return Err(mismatch(new, format!("source run {from}/{old} vanished")));
            };
            let mut want = Vec::with_capacity(journal.len());
            plan.rewrite(from, &journal, &mut want)
                .map_err(|e| mismatch(new, e))?;
            let got = run_of(&mut vb, new)?;
            if let Some((_, j)) = &got {
                let id = match decode_canonical_all(j)
                    .ok()
                    .and_then(|r| r.into_iter().next())
                {
                    Some(Record::Start { id, .. }) => id,
                    _ => {
                        return Err(mismatch(
                            new,
                            "its journal does not begin with a Start".into(),
                        ));
                    }
                };
                if shard_of(&id, plan.shards) != to {
                    return Err(mismatch(
                        new,
                        format!(
                            "workflow {id} belongs on shard {}",
                            shard_of(&id, plan.shards)
                        ),
                    ));
                }
            }
            same_run(to, new, &(state, want), got.as_ref(), &mut out)?;
            if (i + 1).is_multiple_of(4096) {
                report(progress, Event::Checked(i as u64 + 1))?;
            }
        }
        let held = runs_held(&vb);
        if held != runs.len() as u64 {
            return Err(mismatch(
                0,
                format!("{held} runs in the destination, {} planned", runs.len()),
            ));
        }
        out.runs += held;
        out.shards += 1;
        report(progress, Event::Checked(held))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use fusee_core::record::{Origin, Record, RecordRef, Status, origin, policy};

    use super::*;

    /// Two source shards: shard 0's runs 1 and 2 go to (2, 5) and (0, 1);
    /// shard 1's run 1 to (1, 3). Shard 1's run 9 is gone (retention).
    fn plan() -> Plan {
        Plan {
            shards: 3,
            moves: vec![vec![(1, 2, 5), (2, 0, 1)], vec![(1, 1, 3)]],
            into: vec![Vec::new(); 3],
            inboxes: vec![Vec::new(); 2],
        }
    }

    fn start(run: RunId, parent: Option<ParentRef>, from: Option<RunId>) -> Vec<u8> {
        let rec: RecordRef<'_> = Record::Start {
            run,
            id: "w",
            wtype: "T",
            version: 0,
            codec: 0,
            started_ms: 1,
            deadline_ms: 0,
            parent,
            policy: policy::DETACHED,
            from: from.map(|run| Origin {
                run,
                cause: origin::CONTINUED,
            }),
            copies: 0,
            update: None,
            input: b"{}",
            meta: None,
        };
        let mut out = Vec::new();
        encode_canonical(&rec, &mut out);
        out
    }

    fn rewritten(plan: &Plan, shard: u32, journal: &[u8]) -> Result<Vec<RecordBuf>, String> {
        let mut out = Vec::new();
        plan.rewrite(shard, journal, &mut out)?;
        decode_canonical_all(&out).map_err(|e| e.to_string())
    }

    fn parent(shard: u32, run: RunId) -> ParentRef {
        ParentRef { shard, run, seq: 7 }
    }

    #[test]
    fn a_start_follows_its_parent_and_origin_or_names_gone() {
        let plan = plan();
        let mut journal = start(2, Some(parent(1, 1)), Some(1));
        let got = rewritten(&plan, 0, &journal).expect("rewrites");
        let Record::Start {
            run,
            parent: p,
            from,
            ..
        } = &got[0]
        else {
            panic!("{got:?}")
        };
        assert_eq!(
            (*run, *p, from.map(|o| o.run)),
            (1, Some(parent(1, 3)), Some(5))
        );
        // Links to runs retention removed: never another run.
        journal = start(2, Some(parent(1, 9)), Some(4));
        let got = rewritten(&plan, 0, &journal).expect("rewrites");
        let Record::Start {
            parent: p, from, ..
        } = &got[0]
        else {
            panic!("{got:?}")
        };
        assert_eq!(p.map(|p| (p.shard, p.run, p.seq)), Some((0, GONE, 7)));
        assert_eq!(from.map(|o| o.run), Some(GONE));
    }

    #[test]
    fn an_updates_caller_follows() {
        let plan = plan();
        let rec: RecordRef<'_> = Record::Update {
            run: 1,
            id: "u",
            name: "n",
            payload: b"",
            caller: Some(parent(0, 2)),
        };
        let mut journal = Vec::new();
        encode_canonical(&rec, &mut journal);
        let got = rewritten(&plan, 1, &journal).expect("rewrites");
        let Record::Update { run, caller, .. } = &got[0] else {
            panic!("{got:?}")
        };
        assert_eq!((*run, *caller), (3, Some(parent(0, 1))));
    }

    #[test]
    fn a_handovers_next_start_follows_and_other_payloads_stay() {
        let plan = plan();
        let next = start(2, None, Some(1));
        for (status, rewritten_inside) in [
            (Status::ContinuedAsNew, true),
            (Status::Reset, true),
            (Status::Ok, false),
        ] {
            let rec: RecordRef<'_> = Record::Done {
                run: 1,
                status,
                finished_ms: 3,
                payload: &next,
                by: None,
            };
            let mut journal = Vec::new();
            encode_canonical(&rec, &mut journal);
            let got = rewritten(&plan, 0, &journal).expect("rewrites");
            let Record::Done { run, payload, .. } = &got[0] else {
                panic!("{got:?}")
            };
            assert_eq!(*run, 5);
            let inner = decode_canonical_all(payload).expect("a start");
            let Record::Start { run, from, .. } = &inner[0] else {
                panic!("{inner:?}")
            };
            let want = if rewritten_inside {
                (1, Some(5))
            } else {
                (2, Some(1))
            };
            assert_eq!((*run, from.map(|o| o.run)), want, "{status:?}");
        }
    }

    #[test]
    fn a_record_of_a_run_the_shard_does_not_hold_is_refused() {
        let err = rewritten(&plan(), 1, &start(2, None, None)).expect_err("refused");
        assert!(err.contains("run 2"), "{err}");
    }
}
