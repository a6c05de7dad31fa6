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
//! - **Pause, resume, delete, describe** through [`Engine::schedules`]:
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

/// The workflow type behind every schedule.
pub const SCHEDULE_WORKFLOW: &str = "fusee.schedule";

/// What a schedule's workflow ID starts with: `fusee.schedule/<id>`.
pub const SCHEDULE_ID_PREFIX: &str = "fusee.schedule/";

const WORKFLOW: Workflow<Input, ()> = Workflow::new(SCHEDULE_WORKFLOW);
const PAUSE: Update<Option<String>, ()> = Update::new("fusee.schedule.pause");
const RESUME: Update<(), ()> = Update::new("fusee.schedule.resume");
const DELETE: Update<(), ()> = Update::new("fusee.schedule.delete");
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

/// What a schedule's code and its update handlers share.
struct Shared {
    plan: Plan,
    p: Progress,
    /// Fires that run: time and workflow ID.
    running: Vec<(u64, String)>,
    deleted: bool,
    /// The code decided to continue as new: updates are refused (sent
    /// again, they reach the next run).
    moving: bool,
}

impl Shared {
    fn note(&mut self, at: u64, outcome: FireOutcome) {
        let workflow_id = format!("{}/{}", self.plan.id, fire_time_text(at));
        if let Some(r) = self
            .p
            .recent
            .iter_mut()
            .find(|r| r.workflow_id == workflow_id)
        {
            r.outcome = outcome;
            return;
        }
        self.p.recent.push_front(FireRecord {
            at: time_of(at),
            workflow_id,
            outcome,
        });
        self.p.recent.truncate(RECENT_MAX);
    }

    fn describe(&self, timing: &Timing) -> ScheduleDescription {
        let mut next_fires = Vec::new();
        if !self.p.paused {
            let mut at = self.p.cursor_ms;
            while next_fires.len() < NEXT_FIRES {
                match timing.next_after(at) {
                    Some(t) => {
                        next_fires.push(time_of(t));
                        at = t;
                    }
                    None => break,
                }
            }
        }
        ScheduleDescription {
            id: self.plan.id.clone(),
            workflow: self.plan.workflow.clone(),
            spec: self.plan.spec.to_string(),
            time_zone: self.plan.time_zone.clone(),
            overlap: self.plan.overlap,
            catch_up: self.plan.catch_up,
            paused: self.p.paused,
            note: self.p.note.clone(),
            next_fires,
            running: self.running.iter().map(|(_, id)| id.clone()).collect(),
            waiting: self.p.waiting.iter().map(|t| time_of(*t)).collect(),
            fired: self.p.fired,
            skipped: self.p.skipped,
            recent: self.p.recent.iter().cloned().collect(),
            last_error: self.p.last_error.clone(),
        }
    }
}

/// A fire whose workflow runs.
struct Fire {
    at: u64,
    id: String,
    call: Pin<Box<ChildCall<IgnoredAny>>>,
    cancelled: bool,
}

/// What woke a schedule's code.
enum Woke {
    Timer(std::result::Result<(), Failure>),
    Fire(usize, std::result::Result<IgnoredAny, Failure>),
    Changed,
}

/// Registers the schedule workflow in `engine`.
/// Registered already by an earlier call, it is the same code: no change.
pub(crate) fn register(engine: &Engine) {
    let _ = engine.try_register(WORKFLOW, run);
}

/// A schedule's code.
async fn run(ctx: Ctx, input: Input) -> std::result::Result<(), Failure> {
    let timing = Rc::new(
        input
            .plan
            .check()
            .map_err(|e| Failure::with_kind("invalid-schedule", e))?,
    );
    let notify = Notify::default();
    let shared = Rc::new(RefCell::new(Shared {
        plan: input.plan,
        p: input.progress,
        running: Vec::new(),
        deleted: false,
        moving: false,
    }));
    register_handlers(&ctx, &shared, &notify, &timing);
    let mut s = Schedule {
        ctx: ctx.clone(),
        shared,
        timing,
        fires: Vec::new(),
        timer: Timer::default(),
        wakes: 0,
        blocked: false,
        hold_until: 0,
    };
    s.main(&notify).await
}

/// Update handlers and the describe query, registered before anything
/// waits.
fn register_handlers(
    ctx: &Ctx,
    shared: &Rc<RefCell<Shared>>,
    notify: &Notify,
    timing: &Rc<Timing>,
) {
    let refuse = {
        let shared = Rc::clone(shared);
        move || -> std::result::Result<(), String> {
            if shared.borrow().moving {
                return Err(crate::flow::shared::MOVING.to_string());
            }
            Ok(())
        }
    };
    {
        let (shared, notify, refuse) = (Rc::clone(shared), notify.clone(), refuse.clone());
        ctx.on_update_validated(
            PAUSE,
            move |_| refuse(),
            move |note: Option<String>| {
                let mut s = shared.borrow_mut();
                s.p.paused = true;
                s.p.note = note;
                drop(s);
                notify.notify();
                std::future::ready(Ok(()))
            },
        );
    }
    {
        let (shared, notify, refuse, ctx2) = (
            Rc::clone(shared),
            notify.clone(),
            refuse.clone(),
            ctx.clone(),
        );
        ctx.on_update_validated(
            RESUME,
            move |_| refuse(),
            move |()| {
                let (shared, notify, ctx) = (Rc::clone(&shared), notify.clone(), ctx2.clone());
                // Run when polled, not when the handler is made: reading the
                // time is an operation of the run.
                async move {
                    if shared.borrow().p.paused {
                        // Fire times passed while paused are neither fired
                        // nor missed: the schedule goes on from now.
                        let now = now_ms(&ctx);
                        let mut s = shared.borrow_mut();
                        s.p.cursor_ms = s.p.cursor_ms.max(now);
                        s.p.paused = false;
                        s.p.note = None;
                    }
                    notify.notify();
                    Ok(())
                }
            },
        );
    }
    {
        let (shared, notify) = (Rc::clone(shared), notify.clone());
        ctx.on_update_validated(
            DELETE,
            move |_| refuse(),
            move |()| {
                shared.borrow_mut().deleted = true;
                notify.notify();
                std::future::ready(Ok(()))
            },
        );
    }
    let (shared, timing) = (Rc::clone(shared), Rc::clone(timing));
    ctx.on_query(DESCRIBE, move |()| Ok(shared.borrow().describe(&timing)));
}

/// A schedule's running code.
struct Schedule {
    ctx: Ctx,
    shared: Rc<RefCell<Shared>>,
    timing: Rc<Timing>,
    fires: Vec<Fire>,
    timer: Timer,
    /// Wake-ups in this run.
    wakes: u32,
    /// The timer was left unarmed because an earlier fire blocks the next
    /// ones: fire times due at the next wake-up are overlap's, not missed.
    blocked: bool,
    /// No fire starts before this time (a retry's wait).
    hold_until: u64,
}

/// Why a schedule's code stops its run.
enum Stop {
    /// A fire's workflow type is not registered: try it again in the next
    /// run, after a wait.
    Unregistered(u64, String),
}

impl Schedule {
    async fn main(&mut self, notify: &Notify) -> std::result::Result<(), Failure> {
        let mut now = now_ms(&self.ctx);
        {
            let mut sh = self.shared.borrow_mut();
            if sh.p.cursor_ms == 0 {
                sh.p.cursor_ms = now;
            }
            if sh.p.retry_ms > 0 {
                self.hold_until = now.saturating_add(sh.p.retry_ms);
            }
        }
        loop {
            if self.shared.borrow().deleted {
                return Ok(());
            }
            if self.ctx.cancels() > 0 {
                return Err(Failure::with_kind(
                    "cancelled",
                    "the schedule's workflow was cancelled",
                ));
            }
            self.take_due(now);
            if let Err(Stop::Unregistered(at, why)) = self.start_waiting(now) {
                return self.retry_later(at, why).await;
            }
            if self.should_continue() {
                return self.continue_as_new().await;
            }
            self.arm(now);
            let woke = {
                let (timer, fires) = (&mut self.timer, &mut self.fires);
                std::future::poll_fn(|cx| {
                    if notify.poll_take(cx) {
                        return Poll::Ready(Woke::Changed);
                    }
                    if let Poll::Ready(r) = timer.poll_fired(cx) {
                        return Poll::Ready(Woke::Timer(r));
                    }
                    for (i, f) in fires.iter_mut().enumerate() {
                        if let Poll::Ready(r) = f.call.as_mut().poll(cx) {
                            return Poll::Ready(Woke::Fire(i, r));
                        }
                    }
                    Poll::Pending
                })
                .await
            };
            self.wakes += 1;
            now = now_ms(&self.ctx);
            match woke {
                Woke::Timer(Err(cancelled)) => return Err(cancelled),
                Woke::Timer(Ok(())) | Woke::Changed => {}
                Woke::Fire(i, result) => {
                    // Fire times due while it ran are the overlap
                    // policy's, judged with it still running.
                    self.take_due(now);
                    let fire = self.fires.remove(i);
                    let outcome = match result {
                        Ok(_) => FireOutcome::Completed,
                        Err(f) if f.kind.as_deref() == Some("child-start-failed") => {
                            self.shared.borrow_mut().p.skipped += 1;
                            FireOutcome::NotStarted(f.message)
                        }
                        Err(f) => FireOutcome::Failed(f.to_string()),
                    };
                    let mut sh = self.shared.borrow_mut();
                    sh.running.retain(|(_, id)| *id != fire.id);
                    sh.note(fire.at, outcome);
                }
            }
        }
    }

    /// Handles the fire times due up to `now`: missed ones as catch-up
    /// says, the others as overlap says.
    fn take_due(&mut self, now: u64) {
        let (paused, cursor, missed_after, catch_up) = {
            let sh = self.shared.borrow();
            (
                sh.p.paused,
                sh.p.cursor_ms,
                sh.plan.missed_after_ms,
                sh.plan.catch_up,
            )
        };
        // Paused: the times pass; resuming moves the cursor past them.
        if paused || now <= cursor {
            return;
        }
        // Times before `late` were slept through, unless an earlier fire
        // blocked them (then they are overlap's).
        let late = if self.blocked {
            cursor
        } else {
            now.saturating_sub(missed_after).max(cursor)
        };
        let mut catch_ups = Vec::new();
        if late > cursor {
            let take = match catch_up {
                CatchUp::None => 0,
                CatchUp::Last => 1,
                CatchUp::All { limit } => limit as usize,
            };
            // The latest missed times, newest first: those caught up, then
            // those recorded as skipped.
            let mut latest = Vec::new();
            let mut at = late.saturating_sub(1);
            while latest.len() < take + RECENT_MAX {
                match self.timing.latest_at(at) {
                    Some(t) if t > cursor => {
                        latest.push(t);
                        at = match t.checked_sub(1) {
                            Some(a) => a,
                            None => break,
                        };
                    }
                    _ => break,
                }
            }
            let missed = self.count(cursor, late.saturating_sub(1));
            let caught = take.min(latest.len());
            let mut sh = self.shared.borrow_mut();
            sh.p.skipped += missed.saturating_sub(caught as u64);
            for t in latest.iter().skip(caught).rev() {
                sh.note(*t, FireOutcome::SkippedMissed);
            }
            catch_ups.extend(latest[..caught].iter().rev());
        }
        // On time: at or after `late` (and after the cursor).
        let mut on_time = Vec::new();
        let mut at = cursor.max(late.saturating_sub(1));
        while let Some(t) = self.timing.next_after(at) {
            if t > now {
                break;
            }
            on_time.push(t);
            at = t;
        }
        self.shared.borrow_mut().p.cursor_ms = now;
        if !catch_ups.is_empty() {
            self.admit_catch_ups(&catch_ups);
        }
        for t in on_time {
            self.admit(t);
        }
    }

    /// How many fire times fall in `(from, to]` (at most
    /// [`MISSED_COUNT_MAX`]).
    fn count(&self, from: u64, to: u64) -> u64 {
        let mut n = 0;
        let mut at = from;
        while n < MISSED_COUNT_MAX {
            match self.timing.next_after(at) {
                Some(t) if t <= to => {
                    n += 1;
                    at = t;
                }
                _ => break,
            }
        }
        n
    }

    /// Missed fire times to catch up, oldest first.
    fn admit_catch_ups(&mut self, times: &[u64]) {
        let overlap = self.shared.borrow().plan.overlap;
        if overlap == Overlap::CancelPrevious {
            self.cancel_running();
        }
        self.shared
            .borrow_mut()
            .p
            .waiting
            .extend(times.iter().copied());
    }

    /// A fire time due on time: started, waiting or skipped as overlap
    /// says.
    fn admit(&mut self, t: u64) {
        let overlap = self.shared.borrow().plan.overlap;
        let busy = !self.fires.is_empty() || !self.shared.borrow().p.waiting.is_empty();
        let mut sh = self.shared.borrow_mut();
        if overlap == Overlap::AllowAll || !busy {
            sh.p.waiting.push_back(t);
            return;
        }
        match overlap {
            Overlap::Skip => {
                sh.p.skipped += 1;
                sh.note(t, FireOutcome::SkippedOverlap);
            }
            Overlap::BufferOne if sh.p.waiting.is_empty() => sh.p.waiting.push_back(t),
            Overlap::BufferOne => {
                sh.p.skipped += 1;
                sh.note(t, FireOutcome::SkippedOverlap);
            }
            Overlap::CancelPrevious => {
                let replaced: Vec<u64> = sh.p.waiting.drain(..).collect();
                for old in replaced {
                    sh.p.skipped += 1;
                    sh.note(old, FireOutcome::SkippedOverlap);
                }
                sh.p.waiting.push_back(t);
                drop(sh);
                self.cancel_running();
            }
            Overlap::AllowAll => sh.p.waiting.push_back(t),
        }
    }

    /// Asks every running fire not asked yet to cancel.
    fn cancel_running(&mut self) {
        for f in self.fires.iter_mut().filter(|f| !f.cancelled) {
            f.cancelled = true;
            self.ctx.cancel(
                &f.id,
                "fusee.schedule: the next fire is due (Overlap::CancelPrevious)",
            );
        }
    }

    /// Starts the fires waiting that may start now.
    fn start_waiting(&mut self, now: u64) -> std::result::Result<(), Stop> {
        loop {
            let (overlap, paused) = {
                let sh = self.shared.borrow();
                (sh.plan.overlap, sh.p.paused)
            };
            if paused || now < self.hold_until {
                return Ok(());
            }
            if overlap != Overlap::AllowAll && !self.fires.is_empty() {
                return Ok(());
            }
            let Some(t) = self.shared.borrow_mut().p.waiting.pop_front() else {
                return Ok(());
            };
            self.start(t)?;
        }
    }

    /// Starts fire `t`'s workflow as a child the schedule does not keep
    /// alive (it runs on if the schedule ends).
    fn start(&mut self, t: u64) -> std::result::Result<(), Stop> {
        let (id, wtype, input) = {
            let sh = self.shared.borrow();
            (
                format!("{}/{}", sh.plan.id, fire_time_text(t)),
                intern(&sh.plan.workflow),
                sh.plan.input.clone(),
            )
        };
        let workflow: Workflow<serde_json::Value, IgnoredAny> = Workflow::new(wtype);
        let mut call = Box::pin(
            self.ctx
                .child(workflow, &id, &input)
                .on_parent_close(ParentClose::Abandon),
        );
        match poll_once(call.as_mut()) {
            Poll::Ready(Err(f)) if f.kind.as_deref() == Some("unknown-workflow") => {
                return Err(Stop::Unregistered(t, f.message));
            }
            Poll::Ready(Err(f)) => {
                let mut sh = self.shared.borrow_mut();
                sh.p.skipped += 1;
                sh.note(t, FireOutcome::NotStarted(f.to_string()));
            }
            Poll::Ready(Ok(_)) => {
                let mut sh = self.shared.borrow_mut();
                sh.p.fired += 1;
                sh.note(t, FireOutcome::Completed);
            }
            Poll::Pending => {
                let mut sh = self.shared.borrow_mut();
                sh.p.fired += 1;
                sh.p.retry_ms = 0;
                sh.running.push((t, id.clone()));
                sh.note(t, FireOutcome::Running);
                drop(sh);
                self.fires.push(Fire {
                    at: t,
                    id,
                    call,
                    cancelled: false,
                });
            }
        }
        Ok(())
    }

    /// Arms the timer for what the schedule waits for next.
    fn arm(&mut self, now: u64) {
        let sh = self.shared.borrow();
        let running = !self.fires.is_empty();
        let waiting = !sh.p.waiting.is_empty();
        let want = !sh.p.paused
            && match sh.plan.overlap {
                Overlap::AllowAll => true,
                Overlap::Skip => !running && !waiting,
                Overlap::BufferOne => !waiting,
                Overlap::CancelPrevious => !self.fires.iter().any(|f| f.cancelled),
            };
        // Left unarmed, the times passing until the next wake-up (an
        // earlier fire's end) are overlap's.
        self.blocked = !sh.p.paused && !want;
        let next = want
            .then(|| self.timing.next_after(sh.p.cursor_ms))
            .flatten();
        let retry = (waiting && !sh.p.paused && now < self.hold_until).then_some(self.hold_until);
        let target = [next, retry].into_iter().flatten().min();
        drop(sh);
        self.timer
            .set(&self.ctx, "fusee.schedule.next", target, now);
    }

    /// Whether to continue as new now.
    fn should_continue(&self) -> bool {
        let allow_all = self.shared.borrow().plan.overlap == Overlap::AllowAll;
        self.wakes >= CONTINUE_EVERY
            && (self.fires.is_empty() || (allow_all && self.wakes >= CONTINUE_ANYWAY))
    }

    async fn continue_as_new(&mut self) -> std::result::Result<(), Failure> {
        let next = {
            let mut sh = self.shared.borrow_mut();
            sh.moving = true;
            Input {
                plan: sh.plan.clone(),
                progress: sh.p.clone(),
            }
        };
        self.ctx.continue_as_new(&next).await
    }

    /// Fire `at`'s workflow type is not registered: the run continues as
    /// new, the fire first in line, and the next run tries it after a wait
    /// (ending the run here records nothing that a replay with the type
    /// registered could contradict).
    async fn retry_later(&mut self, at: u64, why: String) -> std::result::Result<(), Failure> {
        {
            let mut sh = self.shared.borrow_mut();
            sh.p.waiting.push_front(at);
            sh.p.retry_ms = (sh.p.retry_ms.saturating_mul(2)).clamp(RETRY_FIRST_MS, RETRY_MAX_MS);
            sh.p.last_error = Some(why);
        }
        self.continue_as_new().await
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
