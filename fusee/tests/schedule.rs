//! Schedules (issue 20), on the test kit's virtual clock: a schedule every
//! minute over a simulated week fires exactly once per minute across
//! crashes; each overlap and catch-up policy does what its doc says;
//! pause, resume, delete and describe; bad input is a named error that
//! records nothing.
//!
//! Sizes (CI defaults; raise them by hand):
//!   FUSEE_SCHEDULE_DAYS     simulated days of the every-minute schedule (7)
//!   FUSEE_SCHEDULE_CRASHES  crashes spread over them                    (20)

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use fusee::testing::TestEngine;
use fusee::{
    CatchUp, Config, Ctx, Engine, Error, Failure, FireOutcome, ListFilter, Overlap, RunSummary,
    Spec, Workflow,
};

const MINUTE: u64 = 60_000;
/// The kit's clock starts at 2023-11-14T22:13:20Z; the tests start on a
/// whole minute.
const START_MS: u64 = 1_700_000_040_000;

/// A fire's workflow: sleeps its input in seconds.
const JOB: Workflow<u64, ()> = Workflow::new("job");

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn kit() -> TestEngine {
    TestEngine::builder()
        .start_ms(START_MS)
        // Finished fires are kept past the week the tests look at.
        .config(
            Config::memory()
                .shards(2)
                .retention(Duration::from_secs(90 * 86_400)),
        )
        .open(|engine: &Engine| {
            engine.register(JOB, |ctx: Ctx, secs: u64| async move {
                if secs > 0 {
                    ctx.sleep("work", Duration::from_secs(secs)).await?;
                }
                Ok::<_, Failure>(())
            });
            engine.register_flow_control();
        })
        .await
        .expect("the test engine opens")
}

/// Every run of [`JOB`], by workflow ID (each ID's runs).
async fn jobs(engine: &Engine) -> BTreeMap<String, Vec<RunSummary>> {
    let mut filter = ListFilter::new()
        .workflow("job")
        .limit(ListFilter::LIMIT_MAX);
    let mut out: BTreeMap<String, Vec<RunSummary>> = BTreeMap::new();
    loop {
        let page = engine.list(filter.clone()).await.expect("list");
        for r in page.runs {
            out.entry(r.id.clone()).or_default().push(r);
        }
        match page.next {
            Some(c) => filter = filter.after(c),
            None => return out,
        }
    }
}

/// The fire ID of `schedule` at `ms`.
fn fire_id(schedule: &str, ms: u64) -> String {
    let t = chrono_free_rfc3339(ms);
    format!("{schedule}/{t}")
}

/// RFC 3339 of a whole second, without a date crate in the test.
fn chrono_free_rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_minute_for_a_week_fires_exactly_once_a_minute_across_crashes() {
    let days = env("FUSEE_SCHEDULE_DAYS", 7);
    let crashes = env("FUSEE_SCHEDULE_CRASHES", 20).max(1);
    let mut kit = kit().await;
    kit.engine()
        .schedule("tick", "* * * * *", JOB, &0)
        .create()
        .await
        .expect("created");
    let total = days * 24 * 60 * MINUTE;
    let slice = total / crashes;
    for _ in 0..crashes {
        kit.advance(Duration::from_millis(slice))
            .await
            .expect("advance");
        kit.crash().await.expect("crash");
    }
    kit.advance(Duration::from_millis(total - slice * crashes))
        .await
        .expect("advance");
    let end = START_MS + total;
    let runs = jobs(kit.engine()).await;
    let want: Vec<u64> = (1..=total / MINUTE)
        .map(|i| START_MS + i * MINUTE)
        .collect();
    assert_eq!(
        runs.len(),
        want.len(),
        "one fire per minute, no more, no less"
    );
    for at in &want {
        let id = fire_id("tick", *at);
        let r = runs.get(&id).unwrap_or_else(|| panic!("no fire {id}"));
        assert_eq!(r.len(), 1, "{id} ran {} times", r.len());
        assert_eq!(r[0].started_ms, *at, "{id} started on time");
    }
    let about = kit
        .engine()
        .schedules()
        .describe("tick")
        .await
        .expect("describe");
    assert_eq!(about.fired, want.len() as u64);
    assert_eq!(about.skipped, 0);
    assert_eq!(
        about.next_fires[0]
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as u64,
        end + MINUTE
    );
}

/// Runs a per-minute schedule whose fires each take 150 s for ten
/// minutes under `overlap`; the fires started, by minute, and how each
/// ended.
async fn overlap_run(overlap: Overlap) -> Vec<(u64, u64, Option<String>)> {
    let kit = kit().await;
    kit.engine()
        .schedule("o", "* * * * *", JOB, &150)
        .overlap(overlap)
        .create()
        .await
        .expect("created");
    kit.advance(Duration::from_millis(10 * MINUTE + 30_000))
        .await
        .expect("advance");
    let mut out: Vec<(u64, u64, Option<String>)> = jobs(kit.engine())
        .await
        .into_values()
        .map(|rs| {
            let r = &rs[0];
            let minute = (1..=10)
                .find(|m| r.id == fire_id("o", START_MS + m * MINUTE))
                .expect("a fire ID on a minute");
            (
                minute,
                (r.started_ms - START_MS) / 1000,
                r.finished.map(|s| s.as_str().to_string()),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_starts_nothing_while_a_fire_runs() {
    // Fire 1 runs 60..210 s: 2 and 3 are skipped; 4 runs 240..390 s; ...
    let fires = overlap_run(Overlap::Skip).await;
    let minutes: Vec<u64> = fires.iter().map(|f| f.0).collect();
    assert_eq!(minutes, [1, 4, 7, 10]);
    assert!(fires.iter().all(|(m, started, _)| *started == m * 60));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_one_starts_the_first_fire_due_when_the_running_one_ends() {
    // 1 runs 60..210; 2 waits (3 is skipped) and starts at 210 under its
    // own time's ID; 4 waits (5 and 6 are skipped: 6 comes due at 360 as
    // 2 ends, judged with 2 still running), starts at 360; 7 waits and
    // starts at 510.
    let fires = overlap_run(Overlap::BufferOne).await;
    let got: Vec<(u64, u64)> = fires.iter().map(|f| (f.0, f.1)).collect();
    assert_eq!(got, [(1, 60), (2, 210), (4, 360), (7, 510)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_all_starts_every_fire_on_time() {
    let fires = overlap_run(Overlap::AllowAll).await;
    let got: Vec<(u64, u64)> = fires.iter().map(|f| (f.0, f.1)).collect();
    let want: Vec<(u64, u64)> = (1..=10).map(|m| (m, m * 60)).collect();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_previous_cancels_the_running_fire_and_starts_the_next() {
    let fires = overlap_run(Overlap::CancelPrevious).await;
    let started: Vec<(u64, u64)> = fires.iter().map(|f| (f.0, f.1)).collect();
    let want: Vec<(u64, u64)> = (1..=10).map(|m| (m, m * 60)).collect();
    assert_eq!(started, want, "each fire starts on its minute");
    for (m, _, end) in &fires[..9] {
        assert_eq!(
            end.as_deref(),
            Some("cancelled"),
            "fire {m} was cancelled by the next"
        );
    }
    assert_eq!(fires[9].2, None, "the last still runs");
}

/// A per-minute schedule with `catch_up`, whose engine sees its clock
/// jump ten and a half minutes (as after downtime): the fires, by minute.
async fn catch_up_run(catch_up: CatchUp) -> (Vec<u64>, u64) {
    let kit = kit().await;
    kit.engine()
        .schedule("c", "* * * * *", JOB, &0)
        .catch_up(catch_up)
        .missed_after(Duration::from_secs(10))
        .create()
        .await
        .expect("created");
    kit.advance(Duration::from_millis(2 * MINUTE))
        .await
        .expect("advance");
    // Down from 2:00 to 12:30: minutes 3 to 12 are slept through (12 by
    // 30 s, more than `missed_after`).
    kit.clock().advance(10 * MINUTE + 30_000);
    kit.advance(Duration::from_millis(MINUTE))
        .await
        .expect("advance");
    let mut minutes: Vec<u64> = jobs(kit.engine())
        .await
        .keys()
        .map(|id| {
            (1..=14)
                .find(|m| *id == fire_id("c", START_MS + m * MINUTE))
                .expect("a fire on a minute")
        })
        .collect();
    minutes.sort();
    let skipped = kit
        .engine()
        .schedules()
        .describe("c")
        .await
        .expect("describe")
        .skipped;
    (minutes, skipped)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_policies_fire_none_the_last_or_the_latest_few_of_the_missed_times() {
    // Minutes 1, 2 on time; 3..=12 missed; 13 on time after the jump.
    let (none, skipped) = catch_up_run(CatchUp::None).await;
    assert_eq!(none, [1, 2, 13]);
    assert_eq!(skipped, 10);
    let (last, skipped) = catch_up_run(CatchUp::Last).await;
    assert_eq!(last, [1, 2, 12, 13]);
    assert_eq!(skipped, 9);
    let (all, skipped) = catch_up_run(CatchUp::All { limit: 4 }).await;
    assert_eq!(all, [1, 2, 9, 10, 11, 12, 13]);
    assert_eq!(skipped, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_delete_and_describe_do_what_they_say() {
    let kit = kit().await;
    let engine = kit.engine();
    engine
        .schedule("p", Spec::every(Duration::from_secs(60)), JOB, &0)
        .create()
        .await
        .expect("created");
    kit.advance(Duration::from_millis(3 * MINUTE))
        .await
        .expect("advance");
    engine
        .schedules()
        .pause("p", "deploy")
        .await
        .expect("pause");
    kit.advance(Duration::from_millis(5 * MINUTE))
        .await
        .expect("advance");
    let about = engine.schedules().describe("p").await.expect("describe");
    assert!(about.paused);
    assert_eq!(about.fired, 3, "nothing fired while paused");
    engine.schedules().resume("p").await.expect("resume");
    kit.advance(Duration::from_millis(2 * MINUTE))
        .await
        .expect("advance");
    let about = engine.schedules().describe("p").await.expect("describe");
    assert_eq!(
        about.fired, 5,
        "fires again once resumed, no catch-up of the pause"
    );
    assert!(matches!(about.recent[0].outcome, FireOutcome::Completed));
    engine.schedules().delete("p").await.expect("delete");
    kit.advance(Duration::from_millis(3 * MINUTE))
        .await
        .expect("advance");
    assert_eq!(jobs(engine).await.len(), 5, "nothing fires after delete");
    assert!(engine.schedules().list().await.expect("list").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_named_error_and_records_nothing() {
    let kit = kit().await;
    let engine = kit.engine();
    for (spec, tz) in [
        (Spec::cron("every day"), "UTC"),
        (Spec::cron("0 0 30 2 *"), "UTC"),
        (Spec::cron("0 9 * * *"), "Europe/Atlantis"),
        (Spec::every(Duration::ZERO), "UTC"),
    ] {
        let r = engine
            .schedule("bad", spec.clone(), JOB, &0)
            .time_zone(tz)
            .create()
            .await;
        assert!(
            matches!(r, Err(Error::InvalidSchedule { .. })),
            "{spec} in {tz}: {r:?}"
        );
    }
    let r = engine
        .schedule("bad", "* * * * *", JOB, &0)
        .catch_up(CatchUp::All { limit: 0 })
        .create()
        .await;
    assert!(matches!(r, Err(Error::InvalidSchedule { .. })), "{r:?}");
    const UNREGISTERED: Workflow<(), ()> = Workflow::new("unregistered");
    let r = engine
        .schedule("bad", "* * * * *", UNREGISTERED, &())
        .create()
        .await;
    assert!(matches!(r, Err(Error::UnknownWorkflow { .. })), "{r:?}");
    for r in [
        engine.schedules().describe("none").await.map(drop),
        engine.schedules().pause("none", "").await,
        engine.schedules().delete("none").await,
    ] {
        assert!(matches!(r, Err(Error::UnknownSchedule { .. })), "{r:?}");
    }
    let page = engine.list(ListFilter::new()).await.expect("list");
    assert!(
        page.runs.is_empty(),
        "something was recorded: {:?}",
        page.runs
    );
}

/// Trigger now (issue 29): a yearly schedule fired by hand starts a fire
/// at once, named after the moment; a trigger while that fire runs goes
/// through the overlap policy (skipped under `Skip`, and said so); a crash
/// after the triggers fires nothing again; a paused schedule refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_fires_now_under_the_overlap_policy_and_a_paused_schedule_refuses() {
    let mut kit = kit().await;
    kit.engine()
        .schedule("y", "0 0 1 1 *", JOB, &100)
        .overlap(Overlap::Skip)
        .create()
        .await
        .expect("created");
    // Each fire is named after the time the schedule woke for it: the
    // virtual clock stands still between advances.
    kit.engine()
        .schedules()
        .trigger("y")
        .await
        .expect("trigger");
    let first = fire_id("y", START_MS);
    kit.advance(Duration::from_secs(10)).await.expect("advance");
    kit.engine()
        .schedules()
        .trigger("y")
        .await
        .expect("trigger");
    let second = fire_id("y", START_MS + 10_000);
    kit.advance(Duration::from_secs(200))
        .await
        .expect("advance");
    kit.crash().await.expect("crash");
    kit.advance(Duration::from_secs(200))
        .await
        .expect("advance");
    let runs = jobs(kit.engine()).await;
    assert_eq!(runs.keys().collect::<Vec<_>>(), [&first], "{runs:?}");
    assert_eq!(runs[&first].len(), 1);
    assert!(runs[&first][0].finished.is_some());
    let about = kit
        .engine()
        .schedules()
        .describe("y")
        .await
        .expect("describe");
    assert_eq!((about.fired, about.skipped), (1, 1), "{about:?}");
    assert!(
        about
            .recent
            .iter()
            .any(|r| r.workflow_id == second && r.outcome == FireOutcome::SkippedOverlap),
        "{about:?}"
    );
    kit.engine()
        .schedules()
        .pause("y", "frozen")
        .await
        .expect("pause");
    let refused = kit.engine().schedules().trigger("y").await;
    assert!(
        matches!(&refused, Err(Error::Rejected { reason, .. }) if reason.contains("paused")),
        "{refused:?}"
    );
    assert!(matches!(
        kit.engine().schedules().trigger("nope").await,
        Err(Error::UnknownSchedule { .. })
    ));
    // Resumed, parked and crashed: the schedule's run replays its journal
    // (updates included) without diverging, and still counts its fire.
    kit.engine().schedules().resume("y").await.expect("resume");
    kit.advance(Duration::from_secs(60)).await.expect("advance");
    kit.crash().await.expect("crash");
    let run = kit
        .engine()
        .describe("fusee.schedule/y")
        .await
        .expect("describe the run");
    assert_eq!(run.stopped_because, None, "{run:?}");
    let about = kit
        .engine()
        .schedules()
        .describe("y")
        .await
        .expect("describe");
    assert_eq!((about.paused, about.fired), (false, 1), "{about:?}");
}

/// A bulk terminate with no workflow type leaves the engine's own runs
/// (here a schedule's) alone: it deleted every schedule, queue and limit
/// of the store. Named, they go like any other type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_action_over_every_run_leaves_the_schedules_alone() {
    let kit = kit().await;
    let engine = kit.engine();
    engine
        .schedule("nightly", "0 3 * * *", JOB, &0)
        .create()
        .await
        .expect("created");
    engine.start(JOB, "long-job", &3600).await.expect("start");
    let every = ListFilter::new();
    assert_eq!(engine.count_running(every.clone()).await.expect("count"), 1);
    let n = engine
        .terminate_all(every.clone(), "clean up")
        .await
        .expect("terminate");
    assert_eq!(n, 1, "the user's run only");
    assert_eq!(engine.schedules().list().await.expect("list"), ["nightly"]);
    engine
        .schedules()
        .describe("nightly")
        .await
        .expect("the schedule still answers");
    let schedules = ListFilter::new().workflow("fusee.schedule");
    assert_eq!(
        engine
            .count_running(schedules.clone())
            .await
            .expect("count"),
        1
    );
}
