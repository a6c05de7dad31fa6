//! Approval: a person in the loop, with a deadline and an escalation.
//!
//! An expense report first holds its amount against the team's budget (a
//! saga step whose compensation releases the hold), then waits for the
//! manager's decision, which comes one of two ways: as a signal (here from
//! a bot reading e-mail replies), or as an update (from the web app, which
//! wants an answer: the update's validator refuses a rejection without a
//! reason before anything is recorded, and its result says what was
//! recorded). Two days without a decision and the report escalates: a
//! ticket goes to the director's queue carrying a durable promise, which
//! the ticket system completes by its ID; the manager may still decide
//! meanwhile. A day more without either, and the report is rejected. A
//! rejected report fails its saga, which releases the hold.
//!
//! The report answers a query with where it stands (what the web app
//! shows), read from its code's state without recording anything.
//!
//! Days are long for an example: the engine runs on a virtual clock
//! ([`VirtualClock`]) that the example moves an hour at a time, so three
//! days pass in a moment. With `Clock::System` (the default) the same code
//! waits for real.
//!
//! Run it with `cargo run -p fusee --example approval`; `cargo test -p
//! fusee --examples` runs it too (its `main`, from the test at the bottom).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fusee::{
    Clock, Config, Ctx, Engine, Error, Failure, Query, Saga, Signal, StepError, Update,
    VirtualClock, Workflow,
};
use serde::{Deserialize, Serialize};

/// An expense report.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Expense {
    id: String,
    employee: String,
    cents: u64,
}

/// A decision on a report, whoever makes it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Decision {
    by: String,
    approve: bool,
    reason: Option<String>,
}

/// A paid report.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Paid {
    approved_by: String,
    payment: String,
}

const EXPENSE: Workflow<Expense, Paid> = Workflow::new("expense");
/// The manager's decision, from the e-mail bot.
const DECISION: Signal<Decision> = Signal::new("decision");
/// The manager's decision, from the web app: answered with what was
/// recorded.
const DECIDE: Update<Decision, String> = Update::new("decide");
/// Where a report stands.
const STATUS: Query<(), String> = Query::new("status");

const HOUR_MS: u64 = 3_600_000;
/// How long the manager has.
const MANAGER_DEADLINE: Duration = Duration::from_secs(2 * 24 * 3600);
/// How long the director has, after that.
const DIRECTOR_DEADLINE: Duration = Duration::from_secs(24 * 3600);

/// The outside world: the budget, the director's ticket queue, payments.
/// Each effect is applied once per idempotency key.
#[derive(Default)]
struct Office {
    state: Mutex<OfficeState>,
}

#[derive(Default)]
struct OfficeState {
    /// Holds on the budget by key: (report, cents, released).
    holds: BTreeMap<String, (String, u64, bool)>,
    /// Tickets by key: (report, the promise ID to complete).
    tickets: BTreeMap<String, (String, String)>,
    /// Payments by key: (report, cents).
    payments: BTreeMap<String, (String, u64)>,
}

impl Office {
    fn state(&self) -> MutexGuard<'_, OfficeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hold(&self, key: &str, report: &str, cents: u64) -> String {
        self.state()
            .holds
            .entry(key.into())
            .or_insert_with(|| (report.into(), cents, false));
        key.to_string()
    }

    fn release(&self, key: &str) {
        if let Some((report, cents, released)) = self.state().holds.get_mut(key)
            && !*released
        {
            println!("  budget: released {cents} cents held for {report}");
            *released = true;
        }
    }

    fn open_ticket(&self, key: &str, report: &str, promise: &str) {
        self.state()
            .tickets
            .entry(key.into())
            .or_insert_with(|| (report.into(), promise.into()));
    }

    /// The promise ID of the ticket opened for `report`, if one was.
    fn ticket(&self, report: &str) -> Option<String> {
        self.state()
            .tickets
            .values()
            .find(|(r, _)| r == report)
            .map(|(_, promise)| promise.clone())
    }

    fn pay(&self, key: &str, report: &str, cents: u64) -> String {
        let mut s = self.state();
        let n = s.payments.len() + 1;
        s.payments
            .entry(key.into())
            .or_insert_with(|| (report.into(), cents));
        format!("PAY-{n:03}")
    }
}

/// The report's workflow: hold, decide (escalating on the way), pay; a
/// rejection fails the saga, which releases the hold.
async fn expense(ctx: Ctx, report: Expense, office: Arc<Office>) -> Result<Paid, Failure> {
    // Plain state of the code, rebuilt by replay like the rest of it.
    let status = Rc::new(RefCell::new("holding the amount".to_string()));
    let shown = Rc::clone(&status);
    ctx.on_query(STATUS, move |()| Ok(shown.borrow().clone()));
    // The web app's decisions, validated before anything is recorded, go
    // to the code below as a signal to this workflow, the way the e-mail
    // bot's do: one wait takes both.
    let me = ctx.clone();
    ctx.on_update_validated(
        DECIDE,
        |d: &Decision| match (d.approve, &d.reason) {
            (false, None) => Err("a rejection needs a reason".to_string()),
            _ => Ok(()),
        },
        move |d: Decision| {
            let me = me.clone();
            async move {
                me.signal(&me.workflow_id(), DECISION, &d)?;
                let verb = if d.approve { "approval" } else { "rejection" };
                Ok(format!("{verb} by {} recorded", d.by))
            }
        },
    );
    let saga = Saga::new(&ctx);
    let s = saga.clone();
    saga.run(async move {
        let (held, id, cents) = (Arc::clone(&office), report.id.clone(), report.cents);
        let released = Arc::clone(&office);
        s.step("hold-budget", move |step| {
            let hold = held.hold(step.key(), &id, cents);
            async move { Ok(hold) }
        })
        .compensate("release-budget", move |hold: String, _| {
            released.release(&hold);
            async { Ok(()) }
        })
        .await?;

        *status.borrow_mut() = "waiting for the manager".into();
        let decision = match ctx.wait_for(&DECISION).timeout(MANAGER_DEADLINE).await? {
            Some(d) => d,
            None => escalate(&ctx, &report, &office, &status).await?,
        };
        *status.borrow_mut() = "decided".into();
        if !decision.approve {
            let why = decision.reason.unwrap_or_default();
            return Err(Failure::with_kind(
                "rejected",
                format!("rejected by {}: {why}", decision.by),
            ));
        }
        let (payments, id) = (Arc::clone(&office), report.id.clone());
        let payment = ctx
            .step("pay", move |step| {
                let payment = payments.pay(step.key(), &id, cents);
                async move { Ok::<_, StepError>(payment) }
            })
            .await?;
        Ok(Paid {
            approved_by: decision.by,
            payment,
        })
    })
    .await
}

/// Two days passed: a ticket to the director, carrying a promise the
/// ticket system completes. The manager may still decide; a day more
/// without either, and the report is rejected.
async fn escalate(
    ctx: &Ctx,
    report: &Expense,
    office: &Arc<Office>,
    status: &RefCell<String>,
) -> Result<Decision, Failure> {
    let ticket = ctx.promise::<Decision>();
    let (tickets, id, promise) = (
        Arc::clone(office),
        report.id.clone(),
        ticket.id().to_string(),
    );
    ctx.step("open-ticket", move |step| {
        tickets.open_ticket(step.key(), &id, &promise);
        async { Ok(()) }
    })
    .await?;
    *status.borrow_mut() = "escalated".into();
    // `biased`: when both are ready at once, the same one wins in every
    // replay.
    tokio::select! {
        biased;
        director = ticket.wait().timeout(DIRECTOR_DEADLINE) => Ok(director?.unwrap_or(Decision {
            by: "the deadline".into(),
            approve: false,
            reason: Some("no decision within three days".into()),
        })),
        manager = ctx.wait_for(&DECISION) => manager?
            .ok_or_else(|| Failure::new("a wait without a timeout returned nothing")),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 9:00 on Monday 6 January 2025, UTC.
    let clock = VirtualClock::new(1_736_154_000_000);
    let engine = Engine::open(Config::memory().clock(Clock::Virtual(clock.clone()))).await?;
    let office = Arc::new(Office::default());
    let workflow_office = Arc::clone(&office);
    engine.register(EXPENSE, move |ctx: Ctx, report: Expense| {
        expense(ctx, report, Arc::clone(&workflow_office))
    });

    let report = |id: &str, employee: &str, cents| Expense {
        id: id.into(),
        employee: employee.into(),
        cents,
    };
    let reports = [
        report("exp-1", "ada", 12_000),
        report("exp-2", "brian", 480_000),
        report("exp-3", "chen", 95_000),
        report("exp-4", "dora", 7_000),
    ];
    for r in &reports {
        engine.start(EXPENSE, &r.id, r).await?;
        println!("{}: {} asks for {} cents", r.id, r.employee, r.cents);
    }
    let decision = |by: &str, approve, reason: Option<&str>| Decision {
        by: by.into(),
        approve,
        reason: reason.map(Into::into),
    };

    // exp-1: the manager approves by replying to the e-mail.
    engine
        .signal("exp-1", DECISION, &decision("maya", true, None))
        .await?;
    // exp-2: the manager rejects in the web app, first without a reason.
    match engine
        .update("exp-2", DECIDE, &decision("maya", false, None))
        .await
    {
        Err(Error::Rejected { reason, .. }) => println!("exp-2: the web app says: {reason}"),
        other => return Err(format!("a rejection without a reason: {other:?}").into()),
    }
    let said = engine
        .update(
            "exp-2",
            DECIDE,
            &decision("maya", false, Some("over the team's limit")),
        )
        .await?;
    println!("exp-2: the web app says: {said}");
    // Both end on Monday morning (before the clock moves: a decision and
    // its deadline should not arrive together).
    let mut paid = Vec::new();
    for r in &reports[..2] {
        if let Some(by) = ended(&engine, &r.id).await? {
            paid.push((r.id.clone(), by));
        }
    }

    // The clock moves only once exp-3 and exp-4 wait for their manager:
    // a deadline counts from when the wait began.
    for id in ["exp-3", "exp-4"] {
        status_is(&engine, id, "waiting for the manager").await?;
    }
    // Two days pass, an hour at a time: exp-3 and exp-4 escalate.
    for _ in 0..49 {
        clock.advance(HOUR_MS);
    }
    let mut tickets = BTreeMap::new();
    for id in ["exp-3", "exp-4"] {
        status_is(&engine, id, "escalated").await?;
        let promise = office
            .ticket(id)
            .ok_or_else(|| format!("{id} escalated without a ticket"))?;
        tickets.insert(id, promise);
    }
    println!("Wednesday 10:00  exp-3 and exp-4 escalated to the director");
    // The ticket system completes exp-3's promise. Its webhook fires twice:
    // the second completion is refused (the promise is completed, or its
    // run has finished already).
    engine
        .complete(&tickets["exp-3"], &decision("olga", true, None))
        .await?;
    match engine
        .complete(&tickets["exp-3"], &decision("olga", true, None))
        .await
    {
        Err(Error::PromiseCompleted { .. } | Error::PromiseClosed { .. }) => {
            println!("exp-3: the director's approval came twice; the second was refused")
        }
        other => return Err(format!("a second completion: {other:?}").into()),
    }
    // A day more: exp-4 is rejected for want of a decision.
    for _ in 0..25 {
        clock.advance(HOUR_MS);
    }

    for r in &reports[2..] {
        if let Some(by) = ended(&engine, &r.id).await? {
            paid.push((r.id.clone(), by));
        }
    }
    // exp-4's promise belongs to a finished run now.
    match engine
        .complete(&tickets["exp-4"], &decision("olga", true, None))
        .await
    {
        Err(Error::PromiseClosed { .. }) => {
            println!("exp-4: the director's late approval is refused")
        }
        other => return Err(format!("a late completion: {other:?}").into()),
    }
    engine.close().await?;

    // The books: two paid, the other two holds released.
    let want = [
        ("exp-1".to_string(), "maya".to_string()),
        ("exp-3".to_string(), "olga".to_string()),
    ];
    let s = office.state();
    let held: u64 = s.holds.values().filter(|h| !h.2).map(|h| h.1).sum();
    let spent: u64 = s.payments.values().map(|p| p.1).sum();
    println!("held and paid: {held} cents; paid out: {spent} cents");
    if paid != want || held != 107_000 || spent != 107_000 {
        return Err(format!("the books do not balance: {paid:?}, {held}, {spent}").into());
    }
    Ok(())
}

/// Waits for report `id` to end (30 s at most), says how, and returns
/// who approved it if it was paid.
async fn ended(engine: &Engine, id: &str) -> Result<Option<String>, Box<dyn std::error::Error>> {
    let Ok(result) =
        tokio::time::timeout(Duration::from_secs(30), engine.result(EXPENSE, id)).await
    else {
        let stands = engine.describe(id).await;
        return Err(format!("{id} has no result after 30 s: {stands:?}").into());
    };
    match result {
        Ok(p) => {
            println!("{id}: paid as {}, approved by {}", p.payment, p.approved_by);
            Ok(Some(p.approved_by))
        }
        Err(Error::Failed { failure, .. }) => {
            println!("{id}: {}", failure.message);
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Waits (a few seconds at most) until report `id` says it is at `want`.
async fn status_is(
    engine: &Engine,
    id: &str,
    want: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut last = String::new();
    for _ in 0..5000 {
        last = engine.query(id, STATUS, &()).await?;
        if last == want {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Err(format!("{id} is {last:?}, not {want:?}").into())
}

#[cfg(test)]
mod tests {
    /// The example's whole `main` runs to the end.
    #[test]
    fn main_runs_to_completion() {
        super::main().expect("the approval example runs");
    }
}
