//! Schedules: a workflow started on a cron expression or a fixed interval,
//! each fire exactly once, across restarts.
//!
//! ```
//! use std::time::Duration;
//! use fusee::schedule::{CatchUp, Overlap};
//! use fusee::testing::TestEngine;
//! use fusee::{Ctx, Engine, Failure, Workflow};
//!
//! const REPORT: Workflow<String, ()> = Workflow::new("report");
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let kit = TestEngine::open(|engine: &Engine| {
//!     engine.register(REPORT, |_: Ctx, _team: String| async { Ok::<_, Failure>(()) });
//!     // After your own workflows: schedules start them.
//!     engine.register_flow_control();
//! })
//! .await?;
//! let engine = kit.engine();
//! engine
//!     .schedule("sales-daily", "0 9 * * MON-FRI", REPORT, &"sales".to_string())
//!     .time_zone("Europe/Paris")
//!     .overlap(Overlap::Skip)
//!     .catch_up(CatchUp::Last)
//!     .create()
//!     .await?;
//! let about = engine.schedules().describe("sales-daily").await?;
//! assert_eq!(about.next_fires.len(), 5);
//! // A (virtual) week later: five week days, five reports, named
//! // <schedule ID>/<fire time in UTC>.
//! kit.advance(Duration::from_secs(7 * 86_400)).await?;
//! let about = engine.schedules().describe("sales-daily").await?;
//! assert_eq!(about.fired, 5);
//! assert!(about.recent[0].workflow_id.starts_with("sales-daily/20"));
//! # Ok(())
//! # }
//! ```
//!
//! # What it promises
//!
//! - **Each fire exactly once.** A fire starts the workflow as
//!   `<schedule ID>/<fire time>` (the time in UTC, RFC 3339, e.g.
//!   `nightly/2024-05-01T03:00:00Z`) from the schedule's own journal, as a
//!   child it does not wait for (it runs on when the schedule is deleted):
//!   a crash before the start was durable makes the same start again, and
//!   one after finds it made. An ID already taken (by a run started by
//!   hand) is not started again; the fire records why.
//! - **Time zones.** A cron expression is read on the wall clock of its
//!   time zone (default UTC; IANA names, `Europe/Paris`): `0 9 * * *` fires
//!   at nine local time all year. A time the clock skips in spring fires
//!   at the next one that exists; a time it passes twice in autumn fires
//!   once ([croner](https://docs.rs/croner)'s rules).
//! - **Overlap** ([`Overlap`]): what a fire does when it comes due while an
//!   earlier fire of the schedule still runs (or waits to start).
//! - **Catch-up** ([`CatchUp`]): what happens to fire times the schedule
//!   slept through: it woke more than [`ScheduleBuilder::missed_after`]
//!   after them (the engine was down, or very busy).
//! - **Pause, resume, trigger now, delete, describe** through [`Engine::schedules`]:
//!   each an update (recorded) or a query of the schedule's workflow, so
//!   they are durable and ordered with its fires.
//!
//! # How it works
//!
//! A schedule is a workflow (type `fusee.schedule`, ID
//! `fusee.schedule/<id>`) on the public workflow API: it records the time
//! when it wakes ([`Ctx::now`]), computes the fire times due since it last
//! looked, starts them as children ([`Ctx::child`]), and sleeps durably
//! ([`Ctx::sleep`]) until the next one. Durability, exactly-once and crash
//! safety are the engine's: no storage code is added. It continues as new
//! every few dozen wake-ups, whenever no fire it waits for runs,
//! so its journal stays short (a fire is about six records). With
//! [`Overlap::AllowAll`] it continues as new while fires run, and
//! [`ScheduleDescription::running`] then lists only those started since.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::rc::Rc;
use std::str::FromStr;
use std::task::Poll;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, TimeZone, Utc};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::client::IdPolicy;
use crate::ctx::{ChildCall, Ctx, ParentClose};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::flow::shared::{Notify, Timer, intern, now_ms, poll_once, time_of};
use crate::workflow::{Failure, Query, Update, Workflow};

/// The workflow that implements schedules; this file is their client side
/// (what callers call on `Engine`), the protocol between the two (the
/// run's `Input`, its updates and query) and the spec's fire times.
mod workflow;
pub(crate) use workflow::register;

/// The workflow type behind every schedule.
pub const SCHEDULE_WORKFLOW: &str = "fusee.schedule";

/// What a schedule's workflow ID starts with: `fusee.schedule/<id>`.
pub const SCHEDULE_ID_PREFIX: &str = "fusee.schedule/";

const WORKFLOW: Workflow<Input, ()> = Workflow::new(SCHEDULE_WORKFLOW);
const PAUSE: Update<Option<String>, ()> = Update::new("fusee.schedule.pause");
const RESUME: Update<(), ()> = Update::new("fusee.schedule.resume");
const DELETE: Update<(), ()> = Update::new("fusee.schedule.delete");
const TRIGGER: Update<(), ()> = Update::new("fusee.schedule.trigger");
const DESCRIBE: Query<(), ScheduleDescription> = Query::new("fusee.schedule.describe");

/// Wake-ups after which a schedule continues as new (when no fire it
/// waits for runs): a fire is two wake-ups and about six records. Kept
/// under the 64 deliveries a query replays of a run loaded back from the
/// run store, so [`Schedules::describe`] always sees the whole run.
const CONTINUE_EVERY: u32 = 48;
/// With [`Overlap::AllowAll`] a schedule continues as new at this many
/// wake-ups even while fires run (it then stops tracking them).
const CONTINUE_ANYWAY: u32 = 4 * CONTINUE_EVERY;
/// Fires kept in [`ScheduleDescription::recent`].
const RECENT_MAX: usize = 20;
/// Missed fire times counted one by one at a wake-up; beyond it
/// [`ScheduleDescription::skipped`] counts this many.
const MISSED_COUNT_MAX: u64 = 10_000;
/// The largest [`CatchUp::All`] limit.
pub const CATCH_UP_MAX: u32 = 10_000;
/// The shortest interval ([`Spec::every`]) and
/// [`ScheduleBuilder::missed_after`].
pub const SHORTEST: Duration = Duration::from_secs(1);
/// First wait before a fire whose workflow type was not registered is
/// tried again; doubled each time up to [`RETRY_MAX_MS`].
const RETRY_FIRST_MS: u64 = 1_000;
const RETRY_MAX_MS: u64 = 300_000;
/// Fire times [`ScheduleDescription::next_fires`] lists.
const NEXT_FIRES: usize = 5;

/// When a schedule fires: a cron expression, or a fixed interval.
///
/// ```
/// use std::time::Duration;
/// use fusee::schedule::Spec;
///
/// let weekdays = Spec::cron("30 8 * * MON-FRI"); // 08:30 on week days
/// let with_seconds = Spec::cron("*/10 * * * * *"); // every ten seconds
/// let quarter_past = Spec::every(Duration::from_secs(3600)).offset(Duration::from_secs(900));
/// let from_str: Spec = "@hourly".into();
/// # let _ = (weekdays, with_seconds, quarter_past, from_str);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec(SpecKind);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum SpecKind {
    Cron(String),
    Every { every_ms: u64, offset_ms: u64 },
}

impl Spec {
    /// A cron expression: five fields (minute, hour, day of month, month,
    /// day of week), or six with seconds first; names (`MON`, `JAN`),
    /// ranges, steps, `L`, `W`, `#` and `@daily`-style aliases, read by
    /// [croner](https://docs.rs/croner) with Vixie cron's day rules (a
    /// day-of-month and a day-of-week field both given: either matches).
    /// Checked when the schedule is created.
    pub fn cron(expr: &str) -> Self {
        Spec(SpecKind::Cron(expr.to_string()))
    }

    /// Every `every` (at least [`SHORTEST`]), at whole multiples of it
    /// since the Unix epoch (every hour fires on the hour), moved by
    /// [`offset`](Self::offset). Time zones do not matter to it.
    pub fn every(every: Duration) -> Self {
        Spec(SpecKind::Every {
            every_ms: every.as_millis().min(u128::from(u64::MAX)) as u64,
            offset_ms: 0,
        })
    }

    /// An interval's fire times moved `offset` later (less than the
    /// interval); no effect on a cron expression.
    pub fn offset(self, offset: Duration) -> Self {
        match self.0 {
            SpecKind::Every { every_ms, .. } => Spec(SpecKind::Every {
                every_ms,
                offset_ms: offset.as_millis().min(u128::from(u64::MAX)) as u64,
            }),
            cron => Spec(cron),
        }
    }
}

impl From<&str> for Spec {
    /// A cron expression ([`Spec::cron`]).
    fn from(expr: &str) -> Self {
        Spec::cron(expr)
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            SpecKind::Cron(expr) => f.write_str(expr),
            SpecKind::Every {
                every_ms,
                offset_ms: 0,
            } => write!(f, "every {:?}", Duration::from_millis(*every_ms)),
            SpecKind::Every {
                every_ms,
                offset_ms,
            } => write!(
                f,
                "every {:?} offset {:?}",
                Duration::from_millis(*every_ms),
                Duration::from_millis(*offset_ms)
            ),
        }
    }
}

/// What a fire does when it comes due while an earlier fire of the
/// schedule still runs, or waits to start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Overlap {
    /// It is skipped (the default): at most one fire runs.
    #[default]
    Skip,
    /// It waits and starts when the running one ends, under its own fire
    /// time's ID; only one waits: a fire due while one already waits is
    /// skipped.
    BufferOne,
    /// It starts at once: fires may run side by side.
    AllowAll,
    /// The running fire is asked to cancel ([`Engine::cancel`]), and this
    /// one starts once it has ended (cancelled, or done first); a fire
    /// waiting meanwhile is replaced by a newer one.
    CancelPrevious,
}

/// What happens to fire times a schedule slept through: it woke for them
/// more than [`ScheduleBuilder::missed_after`] late, because the engine
/// was down (or very busy). Fire times that pass while an earlier fire
/// runs are not missed: [`Overlap`] rules them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CatchUp {
    /// They are skipped: the schedule goes on with the next fire time to
    /// come.
    None,
    /// Only the latest of them fires (the default): a job missed during
    /// downtime runs once.
    #[default]
    Last,
    /// Each of them fires, oldest first, at most the latest `limit` (1 to
    /// [`CATCH_UP_MAX`]). They are never skipped for overlap: with
    /// [`Overlap::AllowAll`] they start together, otherwise one after
    /// another, each when the one before has ended.
    All {
        /// The most missed fire times that fire.
        limit: u32,
    },
}

/// How a fire went, in [`ScheduleDescription::recent`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FireOutcome {
    /// Its workflow runs.
    Running,
    /// Its workflow ended well.
    Completed,
    /// Its workflow ended otherwise: how.
    Failed(String),
    /// Its workflow was not started: why (its ID was taken).
    NotStarted(String),
    /// It was skipped because an earlier fire ran ([`Overlap`]).
    SkippedOverlap,
    /// It was skipped because the schedule slept through it ([`CatchUp`]).
    SkippedMissed,
}

/// A fire time and what came of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FireRecord {
    /// The fire time.
    pub at: SystemTime,
    /// The ID its workflow has (or would have had):
    /// `<schedule ID>/<fire time>`.
    pub workflow_id: String,
    /// What came of it.
    pub outcome: FireOutcome,
}

/// What [`Schedules::describe`] says about a schedule. More fields may
/// come; match it with `..`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleDescription {
    /// The schedule's ID.
    pub id: String,
    /// The workflow type it starts.
    pub workflow: String,
    /// When it fires.
    pub spec: String,
    /// The time zone its cron expression is read in.
    pub time_zone: String,
    /// Its overlap policy.
    pub overlap: Overlap,
    /// Its catch-up policy.
    pub catch_up: CatchUp,
    /// Whether it is paused.
    pub paused: bool,
    /// The note given when it was paused.
    pub note: Option<String>,
    /// The next fire times (up to five; none while paused, and none for
    /// an expression that will not match again).
    pub next_fires: Vec<SystemTime>,
    /// The workflow IDs of its fires that run now.
    pub running: Vec<String>,
    /// Fire times due that wait to start ([`Overlap::BufferOne`],
    /// [`CatchUp::All`]).
    pub waiting: Vec<SystemTime>,
    /// Fires started since the schedule was created.
    pub fired: u64,
    /// Fire times skipped since it was created (overlap, missed while
    /// down, or a start refused).
    pub skipped: u64,
    /// The latest fire times, newest first (up to twenty).
    pub recent: Vec<FireRecord>,
    /// The latest problem (a workflow type not registered), if any.
    pub last_error: Option<String>,
}

/// What [`Engine::schedule`] makes: set the time zone and policies, then
/// [`create`](Self::create) it.
#[must_use = "a schedule is made by create()"]
#[derive(Debug)]
pub struct ScheduleBuilder {
    engine: Engine,
    id: String,
    spec: Spec,
    workflow: &'static str,
    input: std::result::Result<serde_json::Value, serde_json::Error>,
    time_zone: String,
    overlap: Overlap,
    catch_up: CatchUp,
    missed_after: Duration,
    paused: bool,
}

impl Engine {
    /// A schedule `id` that starts `workflow` with `input` at the times
    /// `spec` says (a cron expression as `&str`, or a [`Spec`]): set its
    /// time zone, overlap and catch-up policies on the builder, then
    /// [`create`](ScheduleBuilder::create) it. Nothing is checked or
    /// recorded before `create`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// use fusee::schedule::{CatchUp, Overlap, Spec};
    /// # const SYNC: Workflow<u32, ()> = Workflow::new("sync");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(SYNC, |_: Ctx, _: u32| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// engine
    ///     .schedule("sync", Spec::every(Duration::from_secs(300)), SYNC, &7)
    ///     .overlap(Overlap::BufferOne)
    ///     .catch_up(CatchUp::All { limit: 12 })
    ///     .create()
    ///     .await?;
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn schedule<I: Serialize, O>(
        &self,
        id: &str,
        spec: impl Into<Spec>,
        workflow: Workflow<I, O>,
        input: &I,
    ) -> ScheduleBuilder {
        ScheduleBuilder {
            engine: self.clone(),
            id: id.to_string(),
            spec: spec.into(),
            workflow: workflow.name(),
            input: serde_json::to_value(input),
            time_zone: "UTC".to_string(),
            overlap: Overlap::default(),
            catch_up: CatchUp::default(),
            missed_after: Duration::from_secs(60),
            paused: false,
        }
    }

    /// The schedules of this engine: describe, pause, resume, delete, list.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # const W: Workflow<(), ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, ()| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// engine.schedule("hourly", "@hourly", W, &()).create().await?;
    /// assert_eq!(engine.schedules().list().await?, vec!["hourly".to_string()]);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn schedules(&self) -> Schedules {
        Schedules {
            engine: self.clone(),
        }
    }
}

impl ScheduleBuilder {
    /// The IANA time zone the cron expression is read in (default `UTC`):
    /// `Europe/Paris`, `America/New_York`. An unknown name is
    /// [`Error::InvalidSchedule`] at [`create`](Self::create).
    pub fn time_zone(mut self, name: &str) -> Self {
        self.time_zone = name.to_string();
        self
    }

    /// What a fire does while an earlier one runs (default
    /// [`Overlap::Skip`]).
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// What happens to fire times slept through (default
    /// [`CatchUp::Last`]).
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// How late (at least [`SHORTEST`]; default a minute) the schedule may
    /// wake for a fire time before the time counts as missed and
    /// [`CatchUp`] decides.
    pub fn missed_after(mut self, d: Duration) -> Self {
        self.missed_after = d;
        self
    }

    /// Creates the schedule paused (resume it with [`Schedules::resume`]).
    pub fn paused(mut self, paused: bool) -> Self {
        self.paused = paused;
        self
    }

    /// Creates the schedule; returns once it is durable. Its first fire is
    /// the first fire time after it starts. Nothing is recorded when it
    /// fails: a bad expression, time zone, interval or limit is
    /// [`Error::InvalidSchedule`], a schedule of this ID that exists
    /// [`Error::ScheduleExists`] (delete it first to change it), a workflow
    /// type not registered, or flow control not registered
    /// ([`Engine::register_flow_control`]), [`Error::UnknownWorkflow`], an
    /// input that does not encode [`Error::Codec`].
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Error, Failure, Workflow};
    /// # const W: Workflow<(), ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, ()| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// let bad = engine.schedule("typo", "61 * * * *", W, &()).create().await;
    /// assert!(matches!(bad, Err(Error::InvalidSchedule { .. })), "{bad:?}");
    /// engine.schedule("ok", "*/5 * * * *", W, &()).create().await?;
    /// let again = engine.schedule("ok", "*/5 * * * *", W, &()).create().await;
    /// assert!(matches!(again, Err(Error::ScheduleExists { .. })));
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create(self) -> Result<()> {
        let invalid = |reason: String| Error::InvalidSchedule {
            id: self.id.clone(),
            reason,
        };
        if self.id.is_empty() {
            return Err(invalid("the ID is empty".into()));
        }
        let input = match &self.input {
            Ok(v) => v.clone(),
            Err(e) => {
                return Err(Error::Codec {
                    what: "schedule input",
                    id: None,
                    detail: e.to_string(),
                });
            }
        };
        let plan = Plan {
            id: self.id.clone(),
            workflow: self.workflow.to_string(),
            input,
            spec: self.spec.clone(),
            time_zone: self.time_zone.clone(),
            overlap: self.overlap,
            catch_up: self.catch_up,
            missed_after_ms: self.missed_after.as_millis().min(u128::from(u64::MAX)) as u64,
        };
        plan.check().map_err(invalid)?;
        self.engine
            .check_flow(SCHEDULE_WORKFLOW, Some(self.workflow))?;
        let progress = Progress {
            paused: self.paused,
            ..Progress::default()
        };
        let id = workflow_id(&self.id);
        match self
            .engine
            .start_with(
                WORKFLOW,
                &id,
                &Input { plan, progress },
                IdPolicy::ReuseAfterFinish,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(Error::AlreadyExists { .. }) => Err(Error::ScheduleExists { id: self.id }),
            Err(e) => Err(e),
        }
    }
}

/// The schedules of an engine ([`Engine::schedules`]). Each call is an
/// update or a query of the schedule's workflow: a change returns once
/// it is durable. An ID with no schedule (never made, or deleted) is
/// [`Error::UnknownSchedule`].
#[derive(Clone, Debug)]
pub struct Schedules {
    engine: Engine,
}

impl Schedules {
    /// Where schedule `id` stands: its policies, next fire times, running
    /// fires, counts and latest fires.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # const W: Workflow<(), ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, ()| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// engine.schedule("tick", "* * * * *", W, &()).create().await?;
    /// let about = engine.schedules().describe("tick").await?;
    /// let gap = about.next_fires[1].duration_since(about.next_fires[0]).unwrap();
    /// assert_eq!(gap.as_secs(), 60);
    /// assert!(matches!(
    ///     engine.schedules().describe("tock").await,
    ///     Err(fusee::Error::UnknownSchedule { .. })
    /// ));
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn describe(&self, id: &str) -> Result<ScheduleDescription> {
        let r = self.engine.query(&workflow_id(id), DESCRIBE, &()).await;
        r.map_err(|e| unknown(id, e))
    }

    /// Pauses schedule `id`, with a note for people: it starts nothing
    /// until resumed, and the fire times meanwhile pass (they are neither
    /// missed nor caught up). Fires running go on. Pausing a paused
    /// schedule changes only its note.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # const W: Workflow<(), ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, ()| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// engine.schedule("tick", "* * * * *", W, &()).create().await?;
    /// engine.schedules().pause("tick", "maintenance").await?;
    /// let about = engine.schedules().describe("tick").await?;
    /// assert!(about.paused && about.next_fires.is_empty());
    /// assert_eq!(about.note.as_deref(), Some("maintenance"));
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn pause(&self, id: &str, note: &str) -> Result<()> {
        let r = self
            .engine
            .update_entity(&workflow_id(id), PAUSE, &Some(note.to_string()))
            .await;
        r.map_err(|e| unknown(id, e))
    }

    /// Resumes schedule `id`: it fires at the first fire time after now.
    /// Resuming a running schedule changes nothing.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # const W: Workflow<(), ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, ()| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// engine.schedule("tick", "* * * * *", W, &()).paused(true).create().await?;
    /// engine.schedules().resume("tick").await?;
    /// assert!(!engine.schedules().describe("tick").await?.paused);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn resume(&self, id: &str) -> Result<()> {
        let r = self
            .engine
            .update_entity(&workflow_id(id), RESUME, &())
            .await;
        r.map_err(|e| unknown(id, e))
    }

    /// Fires schedule `id` now, out of its timetable: once the trigger is
    /// durable, the schedule wakes and admits a fire at the time it wakes,
    /// named `<schedule ID>/<that time in UTC>` as any fire, so the overlap
    /// policy applies (with [`Overlap::Skip`] and a fire running it is
    /// skipped) and [`ScheduleDescription::recent`] shows what became of
    /// it. Triggers that arrive before the schedule wakes make one fire. A
    /// paused schedule refuses ([`Error::Rejected`]): resume it first, or
    /// start the workflow by hand.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # const W: Workflow<(), ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, ()| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// engine.schedule("yearly", "0 0 1 1 *", W, &()).create().await?;
    /// engine.schedules().trigger("yearly").await?;
    /// let fire = loop {
    ///     if let Some(r) = engine.schedules().describe("yearly").await?.recent.first() {
    ///         break r.workflow_id.clone();
    ///     }
    ///     tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    /// };
    /// assert!(fire.starts_with("yearly/"));
    /// engine.result(W, &fire).await?;
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn trigger(&self, id: &str) -> Result<()> {
        let r = self
            .engine
            .update_entity(&workflow_id(id), TRIGGER, &())
            .await;
        r.map_err(|e| unknown(id, e))
    }

    /// Deletes schedule `id`: it fires no more and its workflow ends (fires
    /// running go on). Its ID can then be used for a new schedule.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Error, Failure, Workflow};
    /// # const W: Workflow<(), ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, ()| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// engine.schedule("tick", "* * * * *", W, &()).create().await?;
    /// engine.schedules().delete("tick").await?;
    /// assert!(matches!(
    ///     engine.schedules().delete("tick").await,
    ///     Err(Error::UnknownSchedule { .. })
    /// ));
    /// engine.schedule("tick", "*/2 * * * *", W, &()).create().await?;
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn delete(&self, id: &str) -> Result<()> {
        let wid = workflow_id(id);
        self.engine
            .update_entity(&wid, DELETE, &())
            .await
            .map_err(|e| unknown(id, e))?;
        // The update returns once it is durable; the run ends right after
        // (its code returns at its next poll). Wait for that end, so the
        // ID is free when this returns.
        match self.engine.result(WORKFLOW, &wid).await {
            Ok(()) | Err(Error::Failed { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The IDs of every schedule, sorted.
    pub async fn list(&self) -> Result<Vec<String>> {
        self.engine
            .list_entities(SCHEDULE_WORKFLOW, SCHEDULE_ID_PREFIX)
            .await
    }
}

/// Schedule `id`'s workflow ID.
fn workflow_id(id: &str) -> String {
    format!("{SCHEDULE_ID_PREFIX}{id}")
}

/// A call's error as the schedules' caller sees it: no such workflow (or
/// it has finished) is no such schedule.
fn unknown(id: &str, e: Error) -> Error {
    match e {
        Error::NotFound { .. } | Error::Finished { .. } => {
            Error::UnknownSchedule { id: id.to_string() }
        }
        other => other,
    }
}

/// The workflow ID of schedule `id`'s fire at `at_ms`:
/// `<schedule ID>/<fire time in UTC>`.
pub(crate) fn fire_workflow_id(id: &str, at_ms: u64) -> String {
    format!("{id}/{}", fire_time_text(at_ms))
}

/// A fire time as its workflow ID has it: RFC 3339 in UTC, whole seconds
/// unless the time has milliseconds.
pub(crate) fn fire_time_text(ms: u64) -> String {
    match DateTime::<Utc>::from_timestamp_millis(ms.min(i64::MAX as u64) as i64) {
        Some(t) if ms.is_multiple_of(1000) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => ms.to_string(),
    }
}

/// What creating a schedule fixes.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Plan {
    id: String,
    workflow: String,
    input: serde_json::Value,
    spec: Spec,
    time_zone: String,
    overlap: Overlap,
    catch_up: CatchUp,
    missed_after_ms: u64,
}

impl Plan {
    /// `Err` with the reason the plan cannot run.
    fn check(&self) -> std::result::Result<Timing, String> {
        if let CatchUp::All { limit } = self.catch_up
            && !(1..=CATCH_UP_MAX).contains(&limit)
        {
            return Err(format!(
                "CatchUp::All's limit must be 1 to {CATCH_UP_MAX}, not {limit} (CatchUp::None skips every missed fire)"
            ));
        }
        if self.missed_after_ms < SHORTEST.as_millis() as u64 {
            return Err(format!(
                "missed_after must be at least {SHORTEST:?}, not {:?}",
                Duration::from_millis(self.missed_after_ms)
            ));
        }
        Timing::compile(&self.spec, &self.time_zone)
    }
}

/// What a schedule's runs hand on: the fire times handled, the counts.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Progress {
    /// Every fire time up to this one was handled (0: not started yet).
    cursor_ms: u64,
    paused: bool,
    note: Option<String>,
    /// Fire times due, waiting to start, oldest first.
    waiting: VecDeque<u64>,
    fired: u64,
    skipped: u64,
    recent: VecDeque<FireRecord>,
    last_error: Option<String>,
    /// The previous run stopped on a fire whose workflow type was not
    /// registered: wait this long before trying it again.
    retry_ms: u64,
}

/// A schedule run's input: its plan and where its runs got to.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Input {
    plan: Plan,
    #[serde(default)]
    progress: Progress,
}

/// A schedule's fire times, compiled.
enum Timing {
    Cron(Box<croner::Cron>, chrono_tz::Tz),
    Every { every_ms: u64, offset_ms: u64 },
}

impl Timing {
    fn compile(spec: &Spec, time_zone: &str) -> std::result::Result<Self, String> {
        let tz = chrono_tz::Tz::from_str(time_zone)
            .map_err(|_| format!("{time_zone:?} is not an IANA time zone name"))?;
        match &spec.0 {
            SpecKind::Cron(expr) => {
                let cron = croner::Cron::from_str(expr)
                    .map_err(|e| format!("{expr:?} is not a cron expression: {e}"))?;
                let timing = Timing::Cron(Box::new(cron), tz);
                // A pattern that matches no time (the 31st of February)
                // is refused rather than made into a schedule that never
                // fires.
                if timing.next_after(0).is_none() {
                    return Err(format!("{expr:?} matches no time"));
                }
                Ok(timing)
            }
            SpecKind::Every {
                every_ms,
                offset_ms,
            } => {
                if *every_ms < SHORTEST.as_millis() as u64 {
                    return Err(format!(
                        "an interval must be at least {SHORTEST:?}, not {:?}",
                        Duration::from_millis(*every_ms)
                    ));
                }
                if offset_ms >= every_ms {
                    return Err(format!(
                        "an interval's offset ({:?}) must be less than the interval ({:?})",
                        Duration::from_millis(*offset_ms),
                        Duration::from_millis(*every_ms)
                    ));
                }
                Ok(Timing::Every {
                    every_ms: *every_ms,
                    offset_ms: *offset_ms,
                })
            }
        }
    }

    /// The first fire time after `ms`.
    fn next_after(&self, ms: u64) -> Option<u64> {
        match self {
            Timing::Every {
                every_ms,
                offset_ms,
            } => {
                if ms < *offset_ms {
                    return Some(*offset_ms);
                }
                let k = (ms - offset_ms) / every_ms + 1;
                k.checked_mul(*every_ms)?.checked_add(*offset_ms)
            }
            Timing::Cron(cron, tz) => {
                let t = tz.timestamp_millis_opt(i64::try_from(ms / 1000 * 1000).ok()?);
                let next = cron.find_next_occurrence(&t.single()?, false).ok()?;
                u64::try_from(next.timestamp_millis()).ok()
            }
        }
    }

    /// The latest fire time at or before `ms`.
    fn latest_at(&self, ms: u64) -> Option<u64> {
        match self {
            Timing::Every {
                every_ms,
                offset_ms,
            } => {
                let since = ms.checked_sub(*offset_ms)?;
                Some(since / every_ms * every_ms + offset_ms)
            }
            Timing::Cron(cron, tz) => {
                let t = tz.timestamp_millis_opt(i64::try_from(ms / 1000 * 1000).ok()?);
                let prev = cron.find_previous_occurrence(&t.single()?, true).ok()?;
                u64::try_from(prev.timestamp_millis()).ok()
            }
        }
    }
}

/// An RFC 3339 time in ms since the Unix epoch (for tests of this module).
#[cfg(test)]
fn at(text: &str) -> u64 {
    crate::flow::shared::ms_of(SystemTime::from(
        DateTime::parse_from_rfc3339(text).expect("an RFC 3339 time"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron(expr: &str, tz: &str) -> Timing {
        Timing::compile(&Spec::cron(expr), tz).expect("a valid spec")
    }

    #[test]
    fn cron_times_follow_the_time_zone_and_its_dst_changes() {
        let nine = cron("0 9 * * *", "Europe/Paris");
        // Winter: UTC+1; summer: UTC+2.
        assert_eq!(
            nine.next_after(at("2024-01-10T12:00:00Z")),
            Some(at("2024-01-11T08:00:00Z"))
        );
        assert_eq!(
            nine.next_after(at("2024-07-10T12:00:00Z")),
            Some(at("2024-07-11T07:00:00Z"))
        );
        // 02:30 does not exist on 2024-03-31 in Paris: it fires at the
        // next time that does, once.
        let half_two = cron("30 2 * * *", "Europe/Paris");
        let spring = half_two
            .next_after(at("2024-03-30T12:00:00Z"))
            .expect("a time");
        assert_eq!(spring, at("2024-03-31T01:00:00Z"), "03:00 CEST");
        // 02:30 happens twice on 2024-10-27: one fire.
        let first = half_two
            .next_after(at("2024-10-26T12:00:00Z"))
            .expect("a time");
        let second = half_two.next_after(first).expect("a time");
        assert!(second - first >= 23 * 3_600_000, "{first} then {second}");
    }

    #[test]
    fn intervals_fire_at_multiples_of_the_interval_plus_the_offset() {
        let t = Timing::compile(
            &Spec::every(Duration::from_secs(3600)).offset(Duration::from_secs(900)),
            "UTC",
        )
        .expect("valid");
        assert_eq!(
            t.next_after(at("2024-01-01T10:15:00Z")),
            Some(at("2024-01-01T11:15:00Z"))
        );
        assert_eq!(
            t.latest_at(at("2024-01-01T10:14:59Z")),
            Some(at("2024-01-01T09:15:00Z"))
        );
        assert_eq!(
            t.latest_at(at("2024-01-01T10:15:00Z")),
            Some(at("2024-01-01T10:15:00Z"))
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (spec, tz, want) in [
            (Spec::cron("61 * * * *"), "UTC", "not a cron expression"),
            (Spec::cron(""), "UTC", "not a cron expression"),
            (Spec::cron("0 0 31 2 *"), "UTC", "matches no time"),
            (
                Spec::cron("* * * * *"),
                "Mars/Olympus",
                "not an IANA time zone",
            ),
            (Spec::every(Duration::from_millis(10)), "UTC", "at least"),
            (
                Spec::every(Duration::from_secs(60)).offset(Duration::from_secs(60)),
                "UTC",
                "offset",
            ),
        ] {
            match Timing::compile(&spec, tz) {
                Err(e) => assert!(e.contains(want), "{spec}: {e}"),
                Ok(_) => panic!("{spec} in {tz} was accepted"),
            }
        }
    }

    #[test]
    fn fire_times_read_as_utc_rfc3339() {
        assert_eq!(
            fire_time_text(at("2024-05-01T03:00:00Z")),
            "2024-05-01T03:00:00Z"
        );
        assert_eq!(
            fire_time_text(at("2024-05-01T03:00:00Z") + 250),
            "2024-05-01T03:00:00.250Z"
        );
    }
}
