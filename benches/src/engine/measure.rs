//! The engine measurements, subjects taking turns: in each round of a
//! workload every subject runs once, the one that goes first rotating, so
//! a slow spell of the disk or the machine weighs on all alike. Each turn
//! opens the subject's engine (untimed), runs the workload, and closes it.
//!
//! The chain's figures are the gaps between consecutive steps' starts
//! (a step made durable, the next one started), pooled over rounds; the
//! floor's are single `pwrite` + `fdatasync` calls of a step record's size,
//! as many as a chain has steps, half in a block made just before each
//! engine's turn and half just after it. Each engine's chain is judged
//! against the blocks made beside it ([`EngineMetric::ChainFloorP50`]),
//! the floor's column pools them all: a shared disk's latency drifts
//! between turns seconds apart (0.79x and 1.47x the pooled floor for two
//! subjects in one trial run), and within a round too (blocks made only
//! before each turn gave the file backend 1.02x to 1.36x in seven runs of
//! one day whose step p50 stayed within 113 to 205 µs), so the blocks
//! surround the turn rather than precede it. The fanout's steps per second
//! are all steps over all the time of every round. Timers, parked and recovery run one
//! round. Every turn and floor block starts after a `sync`, so none pays
//! for another's writeback.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fusee::{Config, Engine};

use super::child::{self, FANOUT_PREFIX};
use super::peer::{FailureCounts, Peer, PeerFailures};
use super::workload::{self, STEPS, Stamps, WorkResult};
use super::{EngineFigures, EngineMetric, EnginePlan, EngineSubject, FANOUT_STEPS, TIMER_SLEEP};
use crate::error::{BenchError, Result};
use crate::floor::FloorFile;
use crate::progress::Progress;
use crate::stats::Latencies;

/// Bytes of each floor write in the chain: about a no-op step's record.
pub const FLOOR_RECORD: usize = 64;

/// One subject's accumulated measurements.
struct Books {
    subject: EngineSubject,
    dir: PathBuf,
    gaps: Latencies,
    /// The floor's samples in the blocks taken around this subject's
    /// chain turns.
    beside: Latencies,
    /// Timer workflows finished per second in the timers workload.
    timer_rate: f64,
    /// The floor's file, kept across the chain's rounds.
    floor: Option<FloorFile>,
    fanout: workload::FanoutRun,
    figures: EngineFigures,
    /// The peer's infrastructure failures as they happen.
    peer_failures: PeerFailures,
    /// The peer's infrastructure failures, per workload.
    failures: BTreeMap<&'static str, FailureCounts>,
}

fn at<T>(subject: EngineSubject, phase: &'static str, r: WorkResult<T>) -> Result<T> {
    r.map_err(|source| BenchError::Measure {
        subject: subject.name().to_string(),
        phase,
        source,
    })
}

/// The order of the subjects in turn `turn`: all of them, the first
/// rotating.
pub(crate) fn rotation(n: usize, turn: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |j| (turn + j) % n.max(1))
}

/// Measures every workload of `plan` on `subjects`, subject `i` with its
/// files under `dirs[i]` (empty, existing), and returns their figures in
/// the same order.
pub fn measure_engines(
    subjects: &[EngineSubject],
    plan: &EnginePlan,
    dirs: &[PathBuf],
    progress: &Progress,
) -> Result<Vec<EngineFigures>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| BenchError::io("starting a tokio runtime", ".", e))?;
    let mut books: Vec<Books> = subjects
        .iter()
        .zip(dirs)
        .map(|(&subject, dir)| Books {
            subject,
            dir: dir.clone(),
            gaps: Latencies::default(),
            beside: Latencies::default(),
            timer_rate: 0.0,
            floor: None,
            fanout: workload::FanoutRun::default(),
            figures: EngineFigures::default(),
            peer_failures: PeerFailures::default(),
            failures: BTreeMap::new(),
        })
        .collect();
    let n = books.len();
    let floor = books.iter().position(|b| b.subject == EngineSubject::Floor);
    let mut turn = 0;
    for round in 0..plan.chain_rounds {
        for i in rotation(n, turn) {
            if Some(i) == floor {
                continue;
            }
            // The floor's share of the round in two halves around each
            // engine's turn, so its samples sit next to every engine's
            // alike and a drift of the disk during the turn weighs on both.
            let (before, after) = floor_halves(plan.chain_steps);
            if let Some(f) = floor {
                beside_block(&mut books, f, i, plan, before)?;
            }
            progress.line(format_args!(
                "engine: chain of {} steps, round {}/{}: {}",
                plan.chain_steps,
                round + 1,
                plan.chain_rounds,
                books[i].subject.name()
            ));
            settle();
            let r = chain_turn(&runtime, &mut books[i], plan, round);
            tolerate_peer(&mut books[i], "chain", r)?;
            if let Some(f) = floor {
                beside_block(&mut books, f, i, plan, after)?;
            }
        }
        turn += 1;
    }
    for b in &mut books {
        for (m, p) in [
            (EngineMetric::ChainP50, 50.0),
            (EngineMetric::ChainP99, 99.0),
        ] {
            if let Some(d) = b.gaps.percentile(p) {
                b.figures.set(m, d.as_secs_f64() * 1e6);
            }
            // Only beside a subject that has chain figures of its own.
            if let (Some(beside), Some(_)) = (m.beside(), b.gaps.percentile(p))
                && let Some(d) = b.beside.percentile(p)
            {
                b.figures.set(beside, d.as_secs_f64() * 1e6);
            }
        }
    }
    for round in 0..plan.fanout_rounds {
        for i in rotation(n, turn) {
            if books[i].subject == EngineSubject::Floor {
                continue;
            }
            progress.line(format_args!(
                "engine: fanout of {} x {FANOUT_STEPS} steps, round {}/{}: {}",
                plan.fanout_runs,
                round + 1,
                plan.fanout_rounds,
                books[i].subject.name()
            ));
            settle();
            let r = fanout_turn(&runtime, &mut books[i], plan, round);
            tolerate_peer(&mut books[i], "fanout", r)?;
        }
        turn += 1;
    }
    for b in &mut books {
        let f = b.fanout;
        if f.steps == 0 {
            continue;
        }
        b.figures.set(
            EngineMetric::FanoutRate,
            f.steps as f64 / f.elapsed.as_secs_f64().max(1e-9),
        );
        if f.cpu > Duration::ZERO {
            b.figures.set(
                EngineMetric::FanoutCpu,
                f.cpu.as_secs_f64() * 1e6 / f.steps as f64,
            );
        } else {
            b.figures
                .notes
                .push("fanout: no CPU time read: not shown".into());
        }
        if f.failed > 0 {
            b.figures.notes.push(format!(
                "fanout: {} of {} workflows not started or failed by the peer itself (its \
                 infrastructure failures) are left out of steps/s",
                f.failed,
                u64::from(plan.fanout_runs) * u64::from(plan.fanout_rounds)
            ));
        }
        if f.flushes > 0 {
            b.figures.set(
                EngineMetric::FanoutBatch,
                f.records as f64 / f.flushes as f64,
            );
        }
    }
    for i in rotation(n, turn) {
        let b = &mut books[i];
        if b.subject == EngineSubject::Floor {
            // The floor of a sleep is the sleep.
            b.figures
                .set(EngineMetric::TimersDone, TIMER_SLEEP.as_secs_f64());
            continue;
        }
        progress.line(format_args!(
            "engine: {} timers of {} s: {}",
            plan.timers,
            TIMER_SLEEP.as_secs_f64(),
            b.subject.name()
        ));
        settle();
        let r = timers_turn(&runtime, b, plan);
        tolerate_peer(b, "timers", r)?;
    }
    turn += 1;
    let program = child::program();
    for i in rotation(n, turn) {
        let b = &mut books[i];
        match (b.subject, &program) {
            (EngineSubject::Floor, _) => {}
            (EngineSubject::Duroxide, _) => b.figures.notes.push(format!(
                "parked: not measured: at the {:.0} sleepers per second it started, timed out \
                 and finished in the timers workload (beyond the sleep), parking {} would take \
                 about {:.0} s",
                b.timer_rate,
                plan.parked,
                plan.parked as f64 / b.timer_rate.max(1e-9)
            )),
            (s, _) if !s.durable() => {}
            (_, None) => b.figures.notes.push(
                "parked: not measured (no fusee-compare binary to open the store in a fresh \
                 process)"
                    .into(),
            ),
            (_, Some(program)) => {
                progress.line(format_args!(
                    "engine: parking {} sleepers, then opening them in a fresh process: {}",
                    plan.parked,
                    b.subject.name()
                ));
                settle();
                parked_turn(&runtime, b, plan, program)?;
            }
        }
    }
    turn += 1;
    for i in rotation(n, turn) {
        let b = &mut books[i];
        if b.subject == EngineSubject::Floor || !b.subject.durable() {
            continue;
        }
        let Some(program) = &program else {
            b.figures.notes.push(
                "recovery: not measured (no fusee-compare binary to run and kill a child process)"
                    .into(),
            );
            continue;
        };
        progress.line(format_args!(
            "engine: recovery: a child runs {} x {FANOUT_STEPS} steps, SIGKILL at half, reopen: {}",
            plan.fanout_runs,
            b.subject.name()
        ));
        settle();
        let r = recovery_turn(&runtime, b, plan, program);
        tolerate_peer(b, "recovery", r)?;
    }
    turn += 1;
    for i in rotation(n, turn) {
        let b = &mut books[i];
        if plan.reminders == 0
            || !matches!(b.subject, EngineSubject::Fusee(_))
            || !b.subject.durable()
        {
            continue;
        }
        let Some(program) = &program else {
            b.figures.notes.push(
                "reminders: not measured (no fusee-compare binary to run and kill a child process)"
                    .into(),
            );
            continue;
        };
        progress.line(format_args!(
            "engine: reminders: a child starts {} reminders, SIGKILL when half are due, reopen: {}",
            plan.reminders,
            b.subject.name()
        ));
        settle();
        reminders_turn(b, plan, program)?;
    }
    for b in &mut books {
        if b.subject != EngineSubject::Duroxide {
            continue;
        }
        // Counted in every run, zero included: a reader sees the peer's
        // figures came from runs that went through.
        let total: u64 = b.failures.values().map(FailureCounts::total).sum();
        b.figures.set(EngineMetric::PeerFailures, total as f64);
        for (workload, counts) in &b.failures {
            if let Some(d) = counts.describe() {
                b.figures.notes.push(format!("{workload}: {d}"));
            }
        }
    }
    Ok(books.into_iter().map(|b| b.figures).collect())
}

/// Writes every file's dirty pages back and waits (`sync(1)`, untimed)
/// before a turn, so no turn pays for the previous one's writeback: a
/// floor block right after the storage section's SQLite recovery, or
/// after the peer's WAL checkpoints, was slowed by them. Without a `sync`
/// program the turns run unsettled.
pub(crate) fn settle() {
    let _ = std::process::Command::new("sync")
        .stdin(std::process::Stdio::null())
        .status();
}

/// After a turn of the peer: its infrastructure failures are added to the
/// workload's count, and a failed turn becomes a note (`workload: not
/// measured: why`) and the run goes on: the peer is measured as it is,
/// failures included, while a failure of Fusee's engine stops the
/// comparison.
fn tolerate_peer(b: &mut Books, workload: &'static str, r: Result<()>) -> Result<()> {
    if b.subject != EngineSubject::Duroxide {
        return r;
    }
    b.failures
        .entry(workload)
        .or_default()
        .merge(b.peer_failures.take());
    if let Err(e) = r {
        b.figures
            .notes
            .push(format!("{workload}: not measured: {e}"));
    }
    Ok(())
}

fn chain_turn(
    runtime: &tokio::runtime::Runtime,
    b: &mut Books,
    plan: &EnginePlan,
    round: u32,
) -> Result<()> {
    let subject = b.subject;
    let phase = "engine chain";
    let steps = plan.chain_steps;
    let id = format!("chain-{round}");
    let dir = b.dir.join("chain");
    let gaps = match subject {
        EngineSubject::Floor => return floor_block(b, plan, steps).map(drop),
        EngineSubject::Fusee(backend) => at(
            subject,
            phase,
            runtime.block_on(async {
                let engine = Engine::open(workload::config(backend, &dir).shards(1)).await?;
                let stamps = Stamps::default();
                workload::register(&engine, &stamps);
                let run = workload::chain(&engine, &stamps, &id, steps).await?;
                engine.close().await?;
                Ok(run.gaps)
            }),
        )?,
        EngineSubject::Duroxide => at(
            subject,
            phase,
            runtime.block_on(async {
                std::fs::create_dir_all(&dir)?;
                let stamps = Stamps::default();
                let peer = Peer::open(&dir, &stamps, &b.peer_failures).await?;
                let run = peer.chain(&stamps, &id, steps).await;
                peer.close().await;
                // A round duroxide could not run (counted) adds no gaps.
                Ok(run?.map(|r| r.gaps).unwrap_or_default())
            }),
        )?,
    };
    for g in gaps {
        b.gaps.push(g);
    }
    Ok(())
}

/// How many floor writes go just before a subject's chain turn and how
/// many just after: `steps` in all, the odd one before.
pub(crate) fn floor_halves(steps: u32) -> (u32, u32) {
    (steps - steps / 2, steps / 2)
}

/// A block of `count` floor writes (by `books[floor]`) beside subject
/// `i`'s chain turn: added to the floor's samples and to the ones `i` is
/// judged against.
fn beside_block(
    books: &mut [Books],
    floor: usize,
    i: usize,
    plan: &EnginePlan,
    count: u32,
) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    settle();
    for d in floor_block(&mut books[floor], plan, count)? {
        books[i].beside.push(d);
    }
    Ok(())
}

/// `count` single `pwrite` + `fdatasync` calls of the floor, each timed
/// (added to the floor's gaps, and returned).
fn floor_block(b: &mut Books, plan: &EnginePlan, count: u32) -> Result<Vec<Duration>> {
    let subject = b.subject;
    let phase = "engine chain";
    if b.floor.is_none() {
        // Room for every round: writes past it would wrap.
        let bytes =
            (FLOOR_RECORD as u64 * u64::from(plan.chain_steps) * u64::from(plan.chain_rounds))
                .max(1 << 20);
        let path = b.dir.join("chain-floor.dat");
        b.floor = Some(at(subject, phase, FloorFile::create(path, bytes))?);
    }
    let floor = b.floor.as_mut().ok_or_else(|| BenchError::Mismatch {
        subject: subject.name().into(),
        phase,
        what: "no floor file".into(),
    })?;
    let record = [7u8; FLOOR_RECORD];
    let mut samples = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let t = std::time::Instant::now();
        at(subject, phase, floor.write_sync(&record))?;
        samples.push(t.elapsed());
    }
    for &d in &samples {
        b.gaps.push(d);
    }
    Ok(samples)
}

fn fanout_turn(
    runtime: &tokio::runtime::Runtime,
    b: &mut Books,
    plan: &EnginePlan,
    round: u32,
) -> Result<()> {
    let subject = b.subject;
    let prefix = format!("ten-{round}");
    let dir = b.dir.join("fanout");
    let (runs, steps) = (plan.fanout_runs, FANOUT_STEPS);
    let failures = b.peer_failures.clone();
    let run = at(
        subject,
        "engine fanout",
        runtime.block_on(async {
            match subject {
                EngineSubject::Fusee(backend) => {
                    let engine = Engine::open(workload::config(backend, &dir)).await?;
                    workload::register(&engine, &Stamps::default());
                    let run = workload::fanout(&engine, &prefix, runs, steps).await?;
                    engine.close().await?;
                    Ok(run)
                }
                EngineSubject::Duroxide => {
                    std::fs::create_dir_all(&dir)?;
                    let peer = Peer::open(&dir, &Stamps::default(), &failures).await?;
                    let run = peer.fanout(&prefix, runs, steps).await;
                    peer.close().await;
                    run
                }
                EngineSubject::Floor => Err("the floor runs no workflows".into()),
            }
        }),
    )?;
    let f = &mut b.fanout;
    f.steps += run.steps;
    f.elapsed += run.elapsed;
    f.cpu += run.cpu;
    f.records += run.records;
    f.flushes += run.flushes;
    f.failed += run.failed;
    Ok(())
}

fn timers_turn(runtime: &tokio::runtime::Runtime, b: &mut Books, plan: &EnginePlan) -> Result<()> {
    let subject = b.subject;
    let dir = b.dir.join("timers");
    let n = match subject {
        EngineSubject::Duroxide => plan.peer_timers.min(plan.timers),
        _ => plan.timers,
    };
    let failures = b.peer_failures.clone();
    let run = at(
        subject,
        "engine timers",
        runtime.block_on(async {
            match subject {
                EngineSubject::Fusee(backend) => {
                    let engine = Engine::open(workload::config(backend, &dir)).await?;
                    workload::register(&engine, &Stamps::default());
                    let run = workload::timers(&engine, "nap", n, TIMER_SLEEP).await?;
                    engine.close().await?;
                    Ok(run)
                }
                EngineSubject::Duroxide => {
                    std::fs::create_dir_all(&dir)?;
                    let peer = Peer::open(&dir, &Stamps::default(), &failures).await?;
                    let run = peer.timers("nap", n, TIMER_SLEEP).await;
                    peer.close().await;
                    run
                }
                EngineSubject::Floor => Err("the floor runs no workflows".into()),
            }
        }),
    )?;
    b.figures
        .set(EngineMetric::TimersDone, run.all_done.as_secs_f64());
    // Sleepers handled per second beyond the sleep itself: what starting,
    // timing out and finishing each one costs this engine.
    b.timer_rate = f64::from(n)
        / (run.all_done.saturating_sub(TIMER_SLEEP))
            .as_secs_f64()
            .max(1e-3);
    if run.failed > 0 {
        b.figures.notes.push(format!(
            "timers: {} of {n} not started or failed by the peer itself (its infrastructure \
             failures); the time is until the last of the others finished",
            run.failed
        ));
    }
    b.figures.notes.push(format!(
        "timers: {n} workflows{}; starting them took {:.2} s of the {:.2} s",
        if n == plan.timers {
            ""
        } else {
            " (the peer's count: see the plan)"
        },
        run.starting.as_secs_f64(),
        run.all_done.as_secs_f64()
    ));
    Ok(())
}

fn parked_turn(
    runtime: &tokio::runtime::Runtime,
    b: &mut Books,
    plan: &EnginePlan,
    program: &Path,
) -> Result<()> {
    let subject = b.subject;
    let EngineSubject::Fusee(backend) = subject else {
        return Ok(());
    };
    let phase = "engine parked";
    let dir = b.dir.join("parked");
    at(
        subject,
        phase,
        runtime.block_on(async {
            let config = workload::config(backend, &dir).park_after(Duration::ZERO);
            let engine = Engine::open(config).await?;
            workload::register(&engine, &Stamps::default());
            workload::park_sleepers(&engine, plan.parked).await?;
            engine.close().await?;
            Ok(())
        }),
    )?;
    let r = at(
        subject,
        phase,
        child::reopen_in_child(program, subject, &dir),
    )?;
    if r.parked != plan.parked {
        // An engine fault the comparison reports rather than stops at: the
        // other workloads' figures stand, this one has none, and the goal
        // it judges is failed.
        b.figures.failed.push("parked");
        b.figures.notes.push(format!(
            "parked: FAILED: {} parked runs after the reopen in a fresh process, {} parked \
             before the close (open took {:.2} s): an engine fault, no figure",
            r.parked, plan.parked, r.open_s
        ));
        return Ok(());
    }
    b.figures.set(EngineMetric::ParkedOpen, r.open_s);
    b.figures
        .set(EngineMetric::ParkedRss, r.resident_bytes as f64 / 1e6);
    Ok(())
}

/// Reopens the store `config` names after its child was killed mid-fanout
/// and waits for all `runs` results: the time from the open to the last.
pub(crate) async fn finish_killed_fanout(config: Config, runs: u32) -> WorkResult<Duration> {
    let t = std::time::Instant::now();
    let engine = Engine::open(config).await?;
    workload::register(&engine, &Stamps::default());
    workload::await_all(
        &engine,
        STEPS,
        FANOUT_PREFIX,
        u64::from(runs),
        &FANOUT_STEPS,
    )
    .await?;
    let took = t.elapsed();
    engine.close().await?;
    Ok(took)
}

fn recovery_turn(
    runtime: &tokio::runtime::Runtime,
    b: &mut Books,
    plan: &EnginePlan,
    program: &Path,
) -> Result<()> {
    let subject = b.subject;
    let phase = "engine recovery";
    let dir = b.dir.join("recovery");
    at(
        subject,
        phase,
        std::fs::create_dir_all(&dir).map_err(Into::into),
    )?;
    let runs = plan.fanout_runs;
    let killed = at(
        subject,
        phase,
        child::kill_mid_fanout(
            program,
            child::ChildStore::Dir(subject, &dir),
            runs,
            FANOUT_STEPS,
            runs / 2,
        ),
    )?;
    let failures = b.peer_failures.clone();
    let took = at(
        subject,
        phase,
        runtime.block_on(async {
            let t = std::time::Instant::now();
            match subject {
                EngineSubject::Fusee(backend) => {
                    let config = workload::config(backend, &dir);
                    Ok((finish_killed_fanout(config, runs).await?, 0))
                }
                EngineSubject::Duroxide => {
                    let peer = Peer::open(&dir, &Stamps::default(), &failures).await?;
                    // Starts the child gave up (counted there) never existed.
                    let r = peer
                        .await_all(
                            FANOUT_PREFIX,
                            u64::from(runs),
                            &killed.lost,
                            &FANOUT_STEPS.to_string(),
                        )
                        .await;
                    let took = t.elapsed();
                    peer.close().await;
                    let expected = u64::from(runs) - killed.lost.len() as u64;
                    r.map(|completed| (took, expected.saturating_sub(completed)))
                }
                EngineSubject::Floor => Err("the floor runs no workflows".into()),
            }
        }),
    )?;
    let (took, failed) = took;
    b.figures.set(EngineMetric::Recovery, took.as_secs_f64());
    let mut note = format!(
        "recovery: killed with {} of {runs} results reported",
        killed.done
    );
    if !killed.lost.is_empty() {
        note.push_str(&format!(
            "; {} starts the child gave up (infrastructure failures) never ran",
            killed.lost.len()
        ));
    }
    if failed > 0 {
        note.push_str(&format!(
            "; {failed} runs failed by the peer itself after the reopen"
        ));
    }
    b.figures.notes.push(note);
    Ok(())
}

fn reminders_turn(b: &mut Books, plan: &EnginePlan, program: &Path) -> Result<()> {
    let subject = b.subject;
    let phase = "engine reminders";
    let dir = b.dir.join("reminders");
    at(
        subject,
        phase,
        std::fs::create_dir_all(&dir).map_err(Into::into),
    )?;
    let r = match child::kill_mid_reminders(program, subject, &dir, plan.reminders) {
        Ok(r) => r,
        // A reminder that fired early, lost its snooze or fired after its
        // cancel: an engine fault the report shows, as the parked one.
        Err(e) => {
            b.figures.failed.push("reminders");
            b.figures.notes.push(format!(
                "reminders: FAILED: {e}: an engine fault, no figure"
            ));
            return Ok(());
        }
    };
    b.figures.set(EngineMetric::RemindersOpen, r.open_s);
    b.figures
        .set(EngineMetric::RemindersReplayed, r.replayed as f64);
    b.figures
        .set(EngineMetric::RemindersLateP99, r.late_p99_ms as f64);
    b.figures
        .set(EngineMetric::RemindersCatchup, r.catchup_rate());
    b.figures
        .set(EngineMetric::RemindersRunBytes, r.bytes_per_run as f64);
    b.figures.set(
        EngineMetric::RemindersPeakBytes,
        r.peak_bytes_per_run as f64,
    );
    b.figures.notes.push(format!(
        "reminders: {} loaded after the open; {} due after it fired late by p50 {} ms, p99 {} \
         ms, max {} ms; {} overdue caught up in {:.3} s",
        r.loaded, r.late_count, r.late_p50_ms, r.late_p99_ms, r.late_max_ms, r.overdue, r.catchup_s
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subject_goes_first_in_turn() {
        let firsts: Vec<usize> = (0..4).map(|t| rotation(3, t).next().unwrap_or(9)).collect();
        assert_eq!(firsts, [0, 1, 2, 0]);
        let mut all: Vec<usize> = rotation(3, 2).collect();
        all.sort_unstable();
        assert_eq!(all, [0, 1, 2]);
    }

    #[test]
    fn the_floor_surrounds_each_turn_with_as_many_writes_as_steps() {
        for steps in [0, 1, 2, 99, 100, 1000] {
            let (before, after) = floor_halves(steps);
            assert_eq!(before + after, steps);
            assert!(
                before >= after && before - after <= 1,
                "{steps}: {before}/{after}"
            );
        }
    }
}
