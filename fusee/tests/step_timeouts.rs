//! Step time limits and heartbeats (issue 32, item 1), on the test kit's
//! virtual clock: an attempt's own timeout, the policy's schedule-to-close
//! limit over all attempts, heartbeat timeouts, heartbeat details read by
//! the next attempt (also after a crash), and heartbeats batched into
//! group commits.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fusee::core::record::Record;
use fusee::testing::{RunFailure, Sleeper, TestEngine};
use fusee::{Ctx, Engine, Failure, RetryPolicy, StepCancel, StepContext, StepError, Workflow};

const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);

/// The kit's sleeper, set once the kit is open (steps run only after).
type Cell = Arc<OnceLock<Sleeper>>;

fn sleeper(cell: &Cell) -> Sleeper {
    cell.get().expect("the kit is open").clone()
}

/// Opens a kit whose workflows, registered by `register`, sleep on its
/// virtual clock through the cell.
async fn kit(register: impl Fn(&Engine, &Cell) + Send + Sync + 'static) -> TestEngine {
    let cell: Cell = Arc::default();
    let c = Arc::clone(&cell);
    let kit = TestEngine::open(move |engine: &Engine| register(engine, &c))
        .await
        .expect("open");
    let _ = cell.set(kit.sleeper());
    kit
}

/// Sets a flag when dropped: the attempt's future was dropped.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

const TIMED: Workflow<(), u32> = Workflow::new("timed");

/// Attempt 1 would run an hour; its 10 s timeout fails it (kind `timeout`,
/// its future dropped before it finished), and attempt 2 succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_past_its_timeout_fails_with_kind_timeout_and_the_next_succeeds() {
    let dropped = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let (d, f) = (Arc::clone(&dropped), Arc::clone(&finished));
    let mut kit = kit(move |engine, cell| {
        let (cell, d, f) = (Arc::clone(cell), Arc::clone(&d), Arc::clone(&f));
        engine.register(TIMED, move |ctx: Ctx, ()| {
            let (cell, d, f) = (Arc::clone(&cell), Arc::clone(&d), Arc::clone(&f));
            async move {
                let v = ctx
                    .step("slow", move |sc: StepContext| {
                        let (sl, d, f) = (sleeper(&cell), Arc::clone(&d), Arc::clone(&f));
                        async move {
                            if sc.attempt() == 1 {
                                let _guard = Dropped(d);
                                sl.sleep(HOUR).await?;
                                f.store(true, Ordering::SeqCst);
                            } else {
                                sl.sleep(SECOND).await?;
                            }
                            Ok(sc.attempt())
                        }
                    })
                    .timeout(Duration::from_secs(10))
                    .await?;
                Ok::<_, Failure>(v)
            }
        });
    })
    .await;
    let start = kit.now_ms();
    assert_eq!(kit.execute(TIMED, "t-1", &()).await.expect("result"), 2);
    assert!(dropped.load(Ordering::SeqCst), "attempt 1's future dropped");
    assert!(!finished.load(Ordering::SeqCst), "attempt 1 never finished");
    assert!(
        kit.now_ms() - start < HOUR.as_millis() as u64,
        "no hour passed"
    );
    let journal = kit.export_journal("t-1").await.expect("journal");
    let mut began = None;
    let mut failed = None;
    for rec in journal.records() {
        match rec {
            Record::Began {
                attempt: 1,
                started_ms,
                ..
            } => began = Some(*started_ms),
            Record::Attempt {
                attempt: 1,
                error,
                ended_ms,
                ..
            } => {
                failed = Some((
                    serde_json::from_slice::<StepError>(error).unwrap(),
                    *ended_ms,
                ))
            }
            _ => {}
        }
    }
    let (error, ended) = failed.expect("attempt 1 failed");
    assert_eq!(error.kind.as_deref(), Some("timeout"), "{error:?}");
    assert!(error.message.contains("timeout of 10s"), "{error:?}");
    assert_eq!(
        ended.unwrap() - began.unwrap(),
        10_000,
        "cut at its timeout, by its start"
    );
}

const CLOSING: Workflow<(), u32> = Workflow::new("closing");

/// The policy allows 10 attempts, but all together may take 10 s: attempt
/// 1 fails at once, attempt 2 (1 s later) would run an hour and is cut 10
/// s after attempt 1 began; the step fails for good with kind `timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_to_close_cuts_the_running_attempt_and_stops_retries() {
    let attempts = Arc::new(AtomicU32::new(0));
    let a = Arc::clone(&attempts);
    let kit = kit(move |engine, cell| {
        let (cell, a) = (Arc::clone(cell), Arc::clone(&a));
        engine.register(CLOSING, move |ctx: Ctx, ()| {
            let (cell, a) = (Arc::clone(&cell), Arc::clone(&a));
            async move {
                let v = ctx
                    .step("close", move |sc: StepContext| {
                        let (sl, a) = (sleeper(&cell), Arc::clone(&a));
                        async move {
                            a.fetch_add(1, Ordering::SeqCst);
                            if sc.attempt() == 1 {
                                return Err(StepError::retryable("not yet"));
                            }
                            sl.sleep(HOUR).await?;
                            Ok(sc.attempt())
                        }
                    })
                    .retry(
                        RetryPolicy::default()
                            .attempts(10)
                            .backoff(SECOND, 1.0, SECOND)
                            .schedule_to_close(Duration::from_secs(10)),
                    )
                    .await?;
                Ok::<_, Failure>(v)
            }
        });
    })
    .await;
    let start = kit.now_ms();
    kit.engine()
        .start(CLOSING, "c-1", &())
        .await
        .expect("start");
    let out = kit.outcome(CLOSING, "c-1").await.expect("outcome");
    let RunFailure { failure, .. } = out.expect_err("the step failed for good");
    assert_eq!(failure.kind.as_deref(), Some("timeout"), "{failure:?}");
    assert!(failure.message.contains("schedule-to-close"), "{failure:?}");
    assert_eq!(attempts.load(Ordering::SeqCst), 2, "no third attempt");
    assert_eq!(kit.now_ms() - start, 10_000, "cut at the limit");
}

const LONG: Workflow<(), u32> = Workflow::new("long");

/// The schedule-to-close limit counts from the first attempt's recorded
/// `Began`, across a crash: an attempt run again after a crash at 6 s is
/// cut at 10 s, not 10 s after its new start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_to_close_counts_from_the_first_began_across_a_crash() {
    let mut kit = kit(move |engine, cell| {
        let cell = Arc::clone(cell);
        engine.register(LONG, move |ctx: Ctx, ()| {
            let cell = Arc::clone(&cell);
            async move {
                let v = ctx
                    .step("long", move |sc: StepContext| {
                        let sl = sleeper(&cell);
                        async move {
                            sl.sleep(HOUR).await?;
                            Ok(sc.attempt())
                        }
                    })
                    .retry(RetryPolicy::default().schedule_to_close(Duration::from_secs(10)))
                    .await?;
                Ok::<_, Failure>(v)
            }
        });
    })
    .await;
    let start = kit.now_ms();
    kit.engine().start(LONG, "l-1", &()).await.expect("start");
    kit.advance(Duration::from_secs(6)).await.expect("advance");
    kit.crash().await.expect("crash");
    let out = kit.outcome(LONG, "l-1").await.expect("outcome");
    let RunFailure { failure, .. } = out.expect_err("the step failed for good");
    assert_eq!(failure.kind.as_deref(), Some("timeout"), "{failure:?}");
    assert_eq!(
        kit.now_ms() - start,
        10_000,
        "cut 10 s after the first Began"
    );
}

const RETRIED: Workflow<(), u32> = Workflow::new("retried");

/// Attempts that fail after 4 s each, retried 1 s later, under a limit of
/// 10 s: attempt 2 fails at 9 s, and a retry at 10 s would start at the
/// limit, so the step fails with kind `timeout` naming the last error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_to_close_refuses_a_retry_that_would_start_past_it() {
    let attempts = Arc::new(AtomicU32::new(0));
    let a = Arc::clone(&attempts);
    let kit = kit(move |engine, cell| {
        let (cell, a) = (Arc::clone(cell), Arc::clone(&a));
        engine.register(RETRIED, move |ctx: Ctx, ()| {
            let (cell, a) = (Arc::clone(&cell), Arc::clone(&a));
            async move {
                let v = ctx
                    .step("flaky", move |_sc: StepContext| {
                        let (sl, a) = (sleeper(&cell), Arc::clone(&a));
                        async move {
                            a.fetch_add(1, Ordering::SeqCst);
                            sl.sleep(Duration::from_secs(4)).await?;
                            Err::<u32, _>(StepError::retryable("down").kind("unavailable"))
                        }
                    })
                    .retry(
                        RetryPolicy::default()
                            .attempts(10)
                            .backoff(SECOND, 1.0, SECOND)
                            .schedule_to_close(Duration::from_secs(10)),
                    )
                    .await?;
                Ok::<_, Failure>(v)
            }
        });
    })
    .await;
    kit.engine()
        .start(RETRIED, "r-1", &())
        .await
        .expect("start");
    let out = kit.outcome(RETRIED, "r-1").await.expect("outcome");
    let RunFailure { failure, .. } = out.expect_err("the step failed for good");
    assert_eq!(failure.kind.as_deref(), Some("timeout"), "{failure:?}");
    assert!(failure.message.contains("down"), "{failure:?}");
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
}

const BEATING: Workflow<u32, (u32, Option<u32>)> = Workflow::new("beating");

/// Registers `BEATING`: step "upload" with a 5 s heartbeat timeout
/// (`limited`; else no limit at all, its heartbeats only progress). An
/// attempt reads the last heartbeat, then heartbeats `1..=n` every 2 s
/// (n is the input for attempt 1, and 2 for later attempts) and, on
/// attempt 1 with `stall` set, then sleeps an hour without heartbeating.
/// Returns (attempt, details read).
fn register_beating(engine: &Engine, cell: &Cell, stall: bool, limited: bool) {
    let cell = Arc::clone(cell);
    engine.register(BEATING, move |ctx: Ctx, n: u32| {
        let cell = Arc::clone(&cell);
        async move {
            let step = ctx.step("upload", move |sc: StepContext| {
                let sl = sleeper(&cell);
                async move {
                    let last = sc.last_heartbeat::<u32>()?;
                    let beats = if sc.attempt() == 1 { n } else { 2 };
                    for i in 1..=beats {
                        sl.sleep(2 * SECOND).await?;
                        sc.heartbeat(&(last.unwrap_or(0) + i))?;
                    }
                    if stall && sc.attempt() == 1 {
                        sl.sleep(HOUR).await?;
                    }
                    Ok((sc.attempt(), last))
                }
            });
            let step = if limited {
                step.heartbeat_timeout(5 * SECOND)
            } else {
                step
            };
            let v = step.await?;
            Ok::<_, Failure>(v)
        }
    });
}

/// Ten heartbeats 2 s apart keep a 20 s attempt alive past its 5 s
/// heartbeat timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeating_step_outlives_its_heartbeat_timeout() {
    let kit = kit(|engine, cell| register_beating(engine, cell, false, true)).await;
    let start = kit.now_ms();
    let out = kit.execute(BEATING, "b-1", &10).await.expect("result");
    assert_eq!(out, (1, None), "attempt 1 finished");
    assert!(kit.now_ms() - start >= 20_000);
}

/// An attempt that heartbeats three times, then stops, fails 5 s after
/// its last heartbeat (kind `timeout`, the heartbeat named); the next
/// attempt reads its last details (3) and goes on from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_stops_heartbeating_is_failed_and_the_next_attempt_resumes() {
    let mut kit = kit(|engine, cell| register_beating(engine, cell, true, true)).await;
    let out = kit.execute(BEATING, "b-2", &3).await.expect("result");
    assert_eq!(out, (2, Some(3)), "attempt 2 read attempt 1's last details");
    let journal = kit.export_journal("b-2").await.expect("journal");
    let mut beats = Vec::new();
    let mut error = None;
    let mut began = None;
    for rec in journal.records() {
        match rec {
            Record::Began {
                attempt: 1,
                started_ms,
                ..
            } => began = Some(*started_ms),
            Record::Heartbeat {
                attempt, payload, ..
            } => beats.push((*attempt, serde_json::from_slice::<u32>(payload).unwrap())),
            Record::Attempt {
                attempt: 1,
                error: e,
                ended_ms,
                ..
            } => error = Some((serde_json::from_slice::<StepError>(e).unwrap(), *ended_ms)),
            _ => {}
        }
    }
    let (error, ended) = error.expect("attempt 1 failed");
    assert_eq!(error.kind.as_deref(), Some("timeout"), "{error:?}");
    assert!(error.message.contains("heartbeat"), "{error:?}");
    assert_eq!(
        ended.unwrap() - began.unwrap(),
        6_000 + 5_000,
        "5 s after the last heartbeat, at 6 s"
    );
    // Recorded at most once a tick: each of attempt 1's (2 s apart), then
    // attempt 2's last (its result ends it before the next tick records
    // 5, which nothing needs).
    assert_eq!(
        beats.iter().filter(|(a, _)| *a == 1).collect::<Vec<_>>(),
        [&(1, 1), &(1, 2), &(1, 3)]
    );
}

/// A crash while attempt 1 runs: the attempt run again after it reads the
/// details recorded before the crash, from the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attempt_after_a_crash_reads_the_last_recorded_heartbeat() {
    let mut kit = kit(|engine, cell| register_beating(engine, cell, false, true)).await;
    kit.engine()
        .start(BEATING, "b-3", &10)
        .await
        .expect("start");
    // Heartbeats at 2, 4 and 6 s, each recorded on the next second's tick.
    kit.advance(Duration::from_millis(7_000))
        .await
        .expect("advance");
    kit.crash().await.expect("crash");
    let out = kit.result(BEATING, "b-3").await.expect("result");
    assert_eq!(
        out,
        (1, Some(3)),
        "attempt 1 again, resumed from its recorded details"
    );
}

/// The same with a step that has no time limit: its heartbeats are still
/// recorded on the shard's tick (no link of its own carries them), and
/// the attempt run again after a crash reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_without_limits_heartbeats_and_resumes_after_a_crash() {
    let mut kit = kit(|engine, cell| register_beating(engine, cell, false, false)).await;
    kit.engine()
        .start(BEATING, "b-4", &10)
        .await
        .expect("start");
    kit.advance(Duration::from_millis(7_000))
        .await
        .expect("advance");
    kit.crash().await.expect("crash");
    let out = kit.result(BEATING, "b-4").await.expect("result");
    assert_eq!(out, (1, Some(3)), "resumed from its recorded details");
}

const MANY: Workflow<u32, u32> = Workflow::new("many");

/// Registers `MANY`: one step that works 5 s in 100 ms pieces, calling
/// `heartbeat` `per_piece` times after each.
fn register_many(engine: &Engine, cell: &Cell, per_piece: u32) {
    let cell = Arc::clone(cell);
    engine.register(MANY, move |ctx: Ctx, n: u32| {
        let cell = Arc::clone(&cell);
        async move {
            let v = ctx
                .step("work", move |sc: StepContext| {
                    let sl = sleeper(&cell);
                    async move {
                        for piece in 0..50u32 {
                            sl.sleep(Duration::from_millis(100)).await?;
                            for k in 0..per_piece {
                                sc.heartbeat(&(piece, k))?;
                            }
                        }
                        Ok(n)
                    }
                })
                .heartbeat_timeout(HOUR)
                .await?;
            Ok::<_, Failure>(v)
        }
    });
}

/// Twenty runs' steps, each heartbeating ten times every 100 ms for 5 s:
/// against the same work without heartbeats, at most one flush more per
/// heartbeat tick (a second), and each attempt records at most one
/// heartbeat a tick. Counted over 4 s in the middle of the steps' work,
/// once every start and step's beginning is durable: how starts and
/// results fall into group commits varies from run to run, heartbeats'
/// flushes must not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_of_many_steps_add_no_flushes_beyond_one_a_tick() {
    const RUNS: u32 = 20;
    const WINDOW: Duration = Duration::from_millis(4_000);
    let measure = async |per_piece: u32| {
        let kit = kit(move |engine, cell| register_many(engine, cell, per_piece)).await;
        for i in 0..RUNS {
            kit.engine()
                .start(MANY, &format!("m-{i}"), &i)
                .await
                .expect("start");
        }
        kit.settle().await.expect("settle");
        let before = kit.engine().metrics().await;
        let start = kit.now_ms();
        kit.advance(WINDOW).await.expect("advance");
        kit.settle().await.expect("settle");
        let after = kit.engine().metrics().await;
        let seconds = (kit.now_ms() - start).div_ceil(1_000);
        assert_eq!(
            after.step_attempts, before.step_attempts,
            "no step ended in the window"
        );
        for i in 0..RUNS {
            assert_eq!(kit.result(MANY, &format!("m-{i}")).await.unwrap(), i);
        }
        kit.close().await.expect("close");
        (
            after.flushes - before.flushes,
            after.flushed_records - before.flushed_records,
            seconds,
        )
    };
    let (quiet_flushes, quiet_records, _) = measure(0).await;
    let (flushes, records, seconds) = measure(10).await;
    assert!(
        flushes <= quiet_flushes + seconds + 1,
        "{flushes} flushes with heartbeats, {quiet_flushes} without, over {seconds} s"
    );
    let beats = records - quiet_records;
    assert!(beats > 0, "heartbeats were recorded");
    assert!(
        beats <= u64::from(RUNS) * (seconds + 1),
        "{beats} heartbeat records for {RUNS} steps over {seconds} s"
    );
}

const PROGRESS: Workflow<(), u32> = Workflow::new("progress");

/// Each attempt goes one part further than the last recorded heartbeat,
/// reports it and fails, until part 3; the policy allows 3 attempts, just
/// enough when no progress is lost. At every crash point (every prefix of
/// the log) the attempt run again resumes from the details kept, so the
/// step still ends at part 3 within its attempts: progress recorded with
/// an attempt's failure is never lost to a crash, and the heartbeat right
/// before an attempt's end is never lost to the order inputs arrive in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_progress_survives_a_crash_at_every_record_boundary() {
    let kit = TestEngine::open(|engine: &Engine| {
        engine.register(PROGRESS, |ctx: Ctx, ()| async move {
            let v = ctx
                .step("parts", |sc: StepContext| async move {
                    let part = sc.last_heartbeat::<u32>()?.unwrap_or(0) + 1;
                    sc.heartbeat(&part)?;
                    if part < 3 {
                        return Err(StepError::retryable(format!("stopped after part {part}")));
                    }
                    Ok(part)
                })
                .retry(RetryPolicy::default().attempts(3))
                .await?;
            Ok::<_, Failure>(v)
        });
    })
    .await
    .expect("open");
    let report = kit
        .crash_everywhere(PROGRESS, &(), |point| {
            assert_eq!(
                point.outcome, point.uncrashed,
                "crash after {:?} of {} records",
                point.crashed_after, point.records
            );
            assert_eq!(point.outcome.as_ref().ok(), Some(&3));
        })
        .await
        .expect("crash everywhere");
    assert!(report.records > 6, "{report:?}");
}

const REAL: Workflow<(), (u32, Option<u32>)> = Workflow::new("real");

/// The production driver on the system clock: attempt 1 heartbeats every
/// 50 ms for 600 ms under a 300 ms heartbeat timeout (alive), then waits
/// 30 s without heartbeating and is failed 300 ms later; attempt 2 reads
/// its last details at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_heartbeats_run_on_the_system_clock() {
    let engine = Engine::open(fusee::Config::memory()).await.expect("open");
    engine.register(REAL, |ctx: Ctx, ()| async move {
        let v = ctx
            .step("real", |sc: StepContext| async move {
                let last = sc.last_heartbeat::<u32>()?;
                if sc.attempt() == 1 {
                    for i in 1..=12u32 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        sc.heartbeat(&i)?;
                    }
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                Ok((sc.attempt(), last))
            })
            .heartbeat_timeout(Duration::from_millis(300))
            .timeout(Duration::from_secs(20))
            .await?;
        Ok::<_, Failure>(v)
    });
    let started = std::time::Instant::now();
    let out = engine.execute(REAL, "real-1", &()).await.expect("result");
    assert_eq!(out, (2, Some(12)));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    engine.close().await.expect("close");
}

const UPLOAD: Workflow<(), u32> = Workflow::new("upload");

/// Heartbeat details resumed across a crash at every record boundary, with
/// heartbeats recorded in the middle of attempts (not only at their end).
/// Each attempt of step "upload" reads the last heartbeat `L`, reports
/// `L+1`, works 1.5 s of virtual time (so the heartbeat tick records it),
/// reports `L+2`, works 1.5 s more, and fails (retried) until it reaches
/// part 6 of 6 (a crash point resuming from an odd part reaches it the
/// same). At each crash point, the first attempt run after the crash reads no
/// older details than the last `Heartbeat` the crash kept (a step whose
/// result was kept runs no attempt), every later attempt reads no older
/// details than the one before, and the run ends with 6 as uncrashed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_point_resumes_from_the_last_durable_heartbeat() {
    use std::sync::Mutex;
    // The sleeper of the engine at hand: each crash point's kit has its
    // own clock, set by the scenario and cleared by the check; an attempt
    // recovered before the scenario sets it waits for it.
    let slot: Arc<Mutex<Option<Sleeper>>> = Arc::default();
    // What each attempt read, since the last check.
    let reads: Arc<Mutex<Vec<u32>>> = Arc::default();
    let (s, r) = (Arc::clone(&slot), Arc::clone(&reads));
    let kit = TestEngine::open(move |engine: &Engine| {
        let (s, r) = (Arc::clone(&s), Arc::clone(&r));
        engine.register(UPLOAD, move |ctx: Ctx, ()| {
            let (s, r) = (Arc::clone(&s), Arc::clone(&r));
            async move {
                let v = ctx
                    .step("upload", move |sc: StepContext| {
                        let (s, r) = (Arc::clone(&s), Arc::clone(&r));
                        async move {
                            let sl = loop {
                                if let Some(sl) = s.lock().unwrap().clone() {
                                    break sl;
                                }
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            };
                            let last = sc.last_heartbeat::<u32>()?.unwrap_or(0);
                            r.lock().unwrap().push(last);
                            // Six parts in all: none past the last.
                            sc.heartbeat(&(last + 1).min(6))?;
                            sl.sleep(Duration::from_millis(1_500)).await?;
                            let reached = (last + 2).min(6);
                            sc.heartbeat(&reached)?;
                            sl.sleep(Duration::from_millis(1_500)).await?;
                            if reached < 6 {
                                return Err(StepError::retryable(format!(
                                    "stopped at {}",
                                    last + 2
                                )));
                            }
                            Ok(reached)
                        }
                    })
                    .retry(RetryPolicy::default().attempts(10))
                    .await?;
                Ok::<_, Failure>(v)
            }
        });
    })
    .await
    .expect("open");
    let mut exercised = 0;
    let report = kit
        .crash_everywhere_with(
            async |kit: &TestEngine| {
                *slot.lock().unwrap() = Some(kit.sleeper());
                kit.engine()
                    .start_with(UPLOAD, "up-1", &(), fusee::IdPolicy::Attach)
                    .await?;
                kit.outcome(UPLOAD, "up-1").await
            },
            |point| {
                *slot.lock().unwrap() = None;
                let read = std::mem::take(&mut *reads.lock().unwrap());
                let at = point.crashed_after;
                assert_eq!(point.outcome, point.uncrashed, "crash after {at:?}");
                assert_eq!(point.outcome.as_ref().ok(), Some(&6), "crash after {at:?}");
                let durable = point
                    .kept
                    .iter()
                    .rev()
                    .find_map(|rec| match rec {
                        Record::Heartbeat { payload, .. } => {
                            Some(serde_json::from_slice::<u32>(payload).expect("details"))
                        }
                        _ => None,
                    })
                    .unwrap_or(0);
                if at.is_none() {
                    assert_eq!(read, [0, 2, 4], "uncrashed: each attempt two parts on");
                    return;
                }
                let done = point
                    .kept
                    .iter()
                    .any(|rec| matches!(rec, Record::Step { .. }));
                if done {
                    assert!(read.is_empty(), "crash after {at:?}: ran again: {read:?}");
                    return;
                }
                let first = *read.first().expect("an attempt ran");
                assert!(
                    first >= durable,
                    "crash after {at:?}: the first attempt read {first}, older than the \
                     durable heartbeat {durable}"
                );
                assert!(
                    read.windows(2).all(|w| w[0] <= w[1]),
                    "crash after {at:?}: progress went back: {read:?}"
                );
                if durable > 0 && durable % 2 == 1 {
                    // A heartbeat recorded mid-attempt was resumed from.
                    exercised += 1;
                }
            },
        )
        .await
        .expect("crash everywhere");
    assert!(report.records > 10, "{report:?}");
    assert!(exercised > 0, "no crash point kept a mid-attempt heartbeat");
}

const NAMED: Workflow<(), Vec<String>> = Workflow::new("named");

/// Errors a step's own context makes name the step: heartbeat details that
/// do not encode or are too large, a cancel's failure, and a result that
/// does not encode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_of_a_steps_context_name_the_step() {
    let kit = kit(|engine, _cell| {
        engine.register(NAMED, |ctx: Ctx, ()| async move {
            let beats = ctx
                .step("beater", |sc: StepContext| async move {
                    // A map whose keys are not strings does not encode.
                    let bad = std::collections::BTreeMap::from([((1u8, 2u8), 3u8)]);
                    let huge = "x".repeat(8 << 20);
                    let mut texts = [sc.heartbeat(&bad), sc.heartbeat(&huge)]
                        .into_iter()
                        .map(|r| r.err().map_or("accepted".into(), |e| e.to_string()))
                        .collect::<Vec<String>>();
                    texts.push(sc.cancel_error(&StepCancel::Dropped).to_string());
                    Ok(texts)
                })
                .await?;
            let unencodable = ctx
                .step("encoder", |_sc: StepContext| async move {
                    Ok(std::collections::BTreeMap::from([((1u8, 2u8), 3u8)]))
                })
                .await
                .map_or_else(|e| e.to_string(), |_| "encoded".into());
            Ok::<_, Failure>([beats, vec![unencodable]].concat())
        });
    })
    .await;
    let texts = kit.execute(NAMED, "n-1", &()).await.expect("result");
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert!(texts[0].starts_with("encode: step \"beater\""), "{texts:?}");
    assert!(
        texts[1].starts_with("too-large: step \"beater\""),
        "{texts:?}"
    );
    assert!(
        texts[2].starts_with("cancelled: step \"beater\""),
        "{texts:?}"
    );
    assert!(texts[3].contains("step \"encoder\""), "{texts:?}");
}
