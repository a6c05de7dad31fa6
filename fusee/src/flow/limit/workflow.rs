//! The workflow behind every step limit (`fusee.limit`): a run per limit
//! that grants permits to the steps asking for them (at most `n` at once,
//! at most `count` per period), signals each waiting step its grant,
//! takes permits back from runs that ended, and continues as new now and
//! then. It reaches its engine only through the run's context.

use super::*;
use crate::flow::shared::on_change;

struct Shared {
    name: String,
    settings: Settings,
    s: State,
    deleted: bool,
    moving: bool,
}

impl Shared {
    /// `None` if a permit may go out at `now`; else when the rate lets one
    /// (`Some(None)`: when one comes back, or the limit is resumed).
    fn blocked(&mut self, now: u64) -> Option<Option<u64>> {
        if self.s.paused.is_some() {
            return Some(None);
        }
        if let Some(n) = self.settings.concurrency
            && self.s.holders.len() >= n as usize
        {
            return Some(None);
        }
        if let Some(rate) = self.settings.rate
            && let Some(at) = self.s.window.wait(rate, now)
        {
            return Some(Some(at));
        }
        None
    }

    fn grant(&mut self, req: Request, now: u64) {
        self.s.window.record(now);
        self.s.granted += 1;
        self.s.holders.push(Holder { req, since_ms: now });
    }

    fn describe(&self) -> LimitDescription {
        LimitDescription {
            name: self.name.clone(),
            concurrency: self.settings.concurrency,
            rate: self
                .settings
                .rate
                .map(|r| (r.count, Duration::from_millis(r.per_ms))),
            holders: self
                .s
                .holders
                .iter()
                .map(|h| h.req.holder.clone())
                .collect(),
            waiting: self.s.waiting.len() as u64,
            granted: self.s.granted,
            reclaimed: self.s.reclaimed,
            paused: self.s.paused.is_some(),
            note: self.s.paused.clone(),
        }
    }
}

/// Registers the limit workflow in `engine`.
/// Registered already by an earlier call, it is the same code: no change.
pub(crate) fn register(engine: &Engine) {
    let _ = engine.try_register(WORKFLOW, run);
}

/// A limit's code.
async fn run(ctx: Ctx, input: Input) -> std::result::Result<(), Failure> {
    let shared = Rc::new(RefCell::new(Shared {
        name: input.name,
        settings: input.settings,
        s: input.state,
        deleted: false,
        moving: false,
    }));
    let notify = Notify::default();
    register_handlers(&ctx, &shared, &notify);
    let mut timer = Timer::default();
    let mut wakes = 0u32;
    let mut now = now_ms(&ctx);
    loop {
        if shared.borrow().deleted {
            let waiting: Vec<Request> = shared.borrow_mut().s.waiting.drain(..).collect();
            for req in waiting {
                signal_grant(&ctx, &req, Grant::Closed)?;
            }
            return Ok(());
        }
        if ctx.cancels() > 0 {
            return Err(Failure::with_kind(
                "cancelled",
                "the limit's workflow was cancelled",
            ));
        }
        // Hand out what may go now, in request order.
        let mut wait_until = None;
        loop {
            let mut sh = shared.borrow_mut();
            if sh.s.waiting.is_empty() {
                break;
            }
            if let Some(at) = sh.blocked(now) {
                wait_until = at;
                break;
            }
            let Some(req) = sh.s.waiting.pop_front() else {
                break;
            };
            sh.grant(req.clone(), now);
            drop(sh);
            signal_grant(&ctx, &req, Grant::Granted)?;
        }
        // Holders older than a minute: does their run still run?
        let oldest = shared.borrow().s.holders.iter().map(|h| h.since_ms).min();
        let sweep_at = oldest.map(|t| t.saturating_add(SWEEP_AFTER_MS));
        if sweep_at.is_some_and(|t| t <= now) {
            sweep(&ctx, &shared, now).await;
            now = now_ms(&ctx);
            continue;
        }
        if wakes >= CONTINUE_EVERY {
            let next = {
                let mut sh = shared.borrow_mut();
                sh.moving = true;
                Input {
                    name: sh.name.clone(),
                    settings: sh.settings.clone(),
                    state: sh.s.clone(),
                }
            };
            return ctx.continue_as_new(&next).await;
        }
        let target = [wait_until, sweep_at].into_iter().flatten().min();
        timer.set(&ctx, "fusee.limit.wait", target, now);
        let fired = std::future::poll_fn(|cx| {
            if notify.poll_take(cx) {
                return Poll::Ready(Ok(()));
            }
            timer.poll_fired(cx)
        })
        .await;
        fired?;
        wakes += 1;
        now = now_ms(&ctx);
    }
}

/// Tells a waiting step its permit came (or never will).
fn signal_grant(ctx: &Ctx, req: &Request, grant: Grant) -> std::result::Result<(), Failure> {
    let payload = encode(&grant).map_err(|e| Failure::with_kind("codec", e.to_string()))?;
    ctx.signal_named(
        &req.holder,
        &format!("{GRANT_PREFIX}{}", req.request),
        payload,
    )
}

/// Takes back the permits of holders older than a minute whose run has
/// ended (a step asks the engine; its answer is recorded).
async fn sweep(ctx: &Ctx, shared: &Rc<RefCell<Shared>>, now: u64) {
    let old: Vec<(String, u64)> = shared
        .borrow()
        .s
        .holders
        .iter()
        .filter(|h| h.since_ms.saturating_add(SWEEP_AFTER_MS) <= now)
        .map(|h| (h.req.holder.clone(), h.req.run))
        .collect();
    let host = EngineRef::of(ctx);
    let looked = ctx
        .step("fusee.limit.sweep", move |_| {
            let (old, host) = (old.clone(), host.clone());
            async move {
                let engine = host
                    .get()
                    .ok_or_else(|| StepError::retryable("the engine is closing"))?;
                let mut gone = Vec::new();
                for (id, run) in old {
                    match engine.describe(&id).await {
                        Ok(d) if d.run != run || matches!(d.status, RunStatus::Finished(_)) => {
                            gone.push((id, run));
                        }
                        Ok(_) => {}
                        Err(Error::NotFound { .. }) => gone.push((id, run)),
                        Err(e) => return Err(StepError::retryable(e.to_string())),
                    }
                }
                Ok(gone)
            }
        })
        .await;
    let gone: Vec<(String, u64)> = looked.unwrap_or_default();
    let mut sh = shared.borrow_mut();
    let before = sh.s.holders.len();
    sh.s.holders.retain(|h| {
        !gone
            .iter()
            .any(|(id, run)| *id == h.req.holder && *run == h.req.run)
    });
    sh.s.reclaimed += (before - sh.s.holders.len()) as u64;
    // Holders still running are looked at again a minute later.
    for h in sh.s.holders.iter_mut() {
        if h.since_ms.saturating_add(SWEEP_AFTER_MS) <= now {
            h.since_ms = now;
        }
    }
}

fn register_handlers(ctx: &Ctx, shared: &Rc<RefCell<Shared>>, notify: &Notify) {
    let moving = {
        let shared = Rc::clone(shared);
        move || -> std::result::Result<(), String> {
            if shared.borrow().moving {
                return Err(MOVING.to_string());
            }
            Ok(())
        }
    };
    let check = moving.clone();
    on_change(
        ctx,
        CONFIGURE,
        shared,
        notify,
        move |_| check(),
        |s, settings| s.settings = settings,
    );
    {
        let (shared, notify, check) = (Rc::clone(shared), notify.clone(), moving.clone());
        ctx.on_update_validated(
            ACQUIRE,
            move |_| check(),
            move |req: Request| {
                let mut sh = shared.borrow_mut();
                // Asked again (a crash before the asking step's answer was
                // durable): the same answer.
                if sh.s.holders.iter().any(|h| h.req.request == req.request) {
                    return std::future::ready(Ok(true));
                }
                // Permits go out from the code's loop only, in request
                // order, at the time it records: a handler reading the
                // time beside the loop would interleave its records with
                // the loop's.
                if !sh.s.waiting.iter().any(|r| r.request == req.request) {
                    sh.s.waiting.push_back(req);
                }
                drop(sh);
                notify.notify();
                std::future::ready(Ok(false))
            },
        );
    }
    let check = moving.clone();
    on_change(
        ctx,
        RELEASE,
        shared,
        notify,
        move |_| check(),
        |sh, request| {
            sh.s.holders.retain(|h| h.req.request != request);
            sh.s.waiting.retain(|r| r.request != request);
        },
    );
    let check = moving.clone();
    on_change(
        ctx,
        PAUSE,
        shared,
        notify,
        move |_| check(),
        |sh, note| sh.s.paused = Some(note),
    );
    let check = moving.clone();
    on_change(
        ctx,
        RESUME,
        shared,
        notify,
        move |_| check(),
        |sh, ()| sh.s.paused = None,
    );
    let check = moving.clone();
    on_change(
        ctx,
        DELETE,
        shared,
        notify,
        move |_| check(),
        |sh, ()| sh.deleted = true,
    );
    let shared = Rc::clone(shared);
    ctx.on_update_validated(
        DESCRIBE,
        move |_| moving(),
        move |()| std::future::ready(Ok(shared.borrow().describe())),
    );
}
