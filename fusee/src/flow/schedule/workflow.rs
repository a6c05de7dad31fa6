//! The workflow behind every schedule (`fusee.schedule`): a run per
//! schedule that sleeps until the next fire time, starts the schedule's
//! workflow as a child (exactly once per fire time: the child's ID is the
//! schedule's ID and the fire time), applies the overlap and catch-up
//! policies, answers the client side's updates and queries (`super`), and
//! continues as new now and then. It reaches its engine only through the
//! run's context.

use super::*;
use crate::flow::shared::on_change;

/// What a schedule's code and its update handlers share.
struct Shared {
    plan: Plan,
    p: Progress,
    /// Fires that run: time and workflow ID.
    running: Vec<(u64, String)>,
    /// A [`TRIGGER`] came: the loop fires once at the time it wakes. Not
    /// carried over a continue-as-new: the loop takes it before it decides.
    triggered: bool,
    /// A [`RESUME`] of a paused schedule came: the loop moves its cursor to
    /// the time it wakes.
    resumed: bool,
    deleted: bool,
    /// The code decided to continue as new: updates are refused (sent
    /// again, they reach the next run).
    moving: bool,
}

impl Shared {
    fn note(&mut self, at: u64, outcome: FireOutcome) {
        let workflow_id = fire_workflow_id(&self.plan.id, at);
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
        triggered: false,
        resumed: false,
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
    let check = refuse.clone();
    on_change(
        ctx,
        PAUSE,
        shared,
        notify,
        move |_| check(),
        |s, note| {
            s.p.paused = true;
            s.p.note = note;
        },
    );
    let check = refuse.clone();
    on_change(
        ctx,
        RESUME,
        shared,
        notify,
        move |_| check(),
        |s, ()| {
            if s.p.paused {
                // Fire times passed while paused are neither fired nor missed:
                // the loop moves its cursor to the time it wakes at.
                s.p.paused = false;
                s.p.note = None;
                s.resumed = true;
            }
        },
    );
    {
        let check = {
            let (shared, refuse) = (Rc::clone(shared), refuse.clone());
            move |_: &()| {
                refuse()?;
                let sh = shared.borrow();
                if sh.p.paused {
                    return Err(format!(
                        "schedule {} is paused: resume it to trigger it",
                        sh.plan.id
                    ));
                }
                Ok(())
            }
        };
        // The loop reads the time and starts the fire when it wakes.
        on_change(ctx, TRIGGER, shared, notify, check, |s, ()| {
            s.triggered = true
        });
    }
    on_change(
        ctx,
        DELETE,
        shared,
        notify,
        move |_| refuse(),
        |s, ()| s.deleted = true,
    );
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
            let triggered = {
                let mut sh = self.shared.borrow_mut();
                if std::mem::take(&mut sh.resumed) {
                    sh.p.cursor_ms = sh.p.cursor_ms.max(now);
                }
                std::mem::take(&mut sh.triggered)
            };
            self.take_due(now);
            if triggered {
                self.admit(now);
            }
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
                fire_workflow_id(&sh.plan.id, t),
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
