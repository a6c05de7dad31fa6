//! The workflow behind every queue (`fusee.queue`): a run per queue that
//! keeps its items (by priority, keys taking turns), starts a workflow per
//! item within the concurrency and rate limits, adopts the ones it
//! started, answers the client side's updates and queries (`super`), and
//! continues as new now and then, handing its items on. It reaches its
//! engine only through the run's context.

use super::*;
use crate::flow::shared::on_change;

/// Items waiting: by priority (highest first), then keys taking turns,
/// then each key's items in order.
#[derive(Default)]
struct Pending {
    levels: BTreeMap<Reverse<i32>, Level>,
    len: usize,
}

#[derive(Default)]
struct Level {
    turns: VecDeque<Option<String>>,
    items: HashMap<Option<String>, VecDeque<NewItem>>,
}

impl Pending {
    fn push(&mut self, item: NewItem) {
        let level = self.levels.entry(Reverse(item.priority)).or_default();
        let queue = level.items.entry(item.key.clone()).or_default();
        if queue.is_empty() {
            level.turns.push_back(item.key.clone());
        }
        queue.push_back(item);
        self.len += 1;
    }

    /// The next item whose key `blocked` lets through.
    fn take(&mut self, blocked: impl Fn(&Option<String>) -> bool) -> Option<NewItem> {
        let mut emptied = None;
        let mut found = None;
        for (priority, level) in self.levels.iter_mut() {
            for _ in 0..level.turns.len() {
                let Some(key) = level.turns.pop_front() else {
                    break;
                };
                if blocked(&key) {
                    level.turns.push_back(key);
                    continue;
                }
                let Some(queue) = level.items.get_mut(&key) else {
                    continue;
                };
                let item = queue.pop_front();
                if queue.is_empty() {
                    level.items.remove(&key);
                } else {
                    level.turns.push_back(key);
                }
                if level.turns.is_empty() {
                    emptied = Some(*priority);
                }
                found = item;
                break;
            }
            if found.is_some() {
                break;
            }
        }
        if let Some(p) = emptied {
            self.levels.remove(&p);
        }
        if found.is_some() {
            self.len -= 1;
        }
        found
    }

    /// Every item, in the order that rebuilds this state.
    fn to_vec(&self) -> Vec<NewItem> {
        let mut out = Vec::with_capacity(self.len);
        for level in self.levels.values() {
            let mut queues: Vec<_> = level
                .turns
                .iter()
                .filter_map(|k| level.items.get(k).map(|q| q.iter()))
                .collect();
            // Round by round, so each key's first item comes in turn order
            // and the rebuilt turns match.
            loop {
                let mut any = false;
                for q in &mut queues {
                    if let Some(item) = q.next() {
                        out.push(item.clone());
                        any = true;
                    }
                }
                if !any {
                    break;
                }
            }
        }
        out
    }
}

/// What a queue's code and its update handlers share.
struct Shared {
    name: String,
    settings: Settings,
    p: Progress,
    pending: Pending,
    /// Dedup keys waiting or running.
    live_keys: HashSet<String>,
    done_keys: HashSet<String>,
    /// Items running, by workflow ID: dedup and key.
    running: BTreeMap<String, (String, Option<String>)>,
    running_by_key: HashMap<String, u32>,
    deleted: bool,
    moving: bool,
}

impl Shared {
    fn known(&self, dedup: &str) -> bool {
        self.live_keys.contains(dedup) || self.done_keys.contains(dedup)
    }

    fn finished(&mut self, id: &str, ok: bool) {
        if let Some((dedup, key)) = self.running.remove(id) {
            self.live_keys.remove(&dedup);
            if let Some(k) = key
                && let Some(n) = self.running_by_key.get_mut(&k)
            {
                *n -= 1;
                if *n == 0 {
                    self.running_by_key.remove(&k);
                }
            }
            self.done_keys.insert(dedup.clone());
            self.p.done.push_back(dedup);
            while self.p.done.len() > DONE_KEEP {
                if let Some(old) = self.p.done.pop_front() {
                    self.done_keys.remove(&old);
                }
            }
        }
        if ok {
            self.p.stats.completed += 1;
        } else {
            self.p.stats.failed += 1;
        }
    }

    fn describe(&self) -> QueueDescription {
        QueueDescription {
            name: self.name.clone(),
            workflow: self.settings.workflow.clone(),
            concurrency: self.settings.concurrency,
            rate: self
                .settings
                .rate
                .map(|r| (r.count, Duration::from_millis(r.per_ms))),
            one_per_key: self.settings.one_per_key,
            max_pending: self.settings.max_pending,
            paused: self.p.paused,
            pending: self.pending.len as u64,
            running: self.running.len() as u64,
            running_ids: self.running.keys().take(RUNNING_LISTED).cloned().collect(),
            enqueued: self.p.stats.enqueued,
            duplicates: self.p.stats.duplicates,
            started: self.p.stats.started,
            completed: self.p.stats.completed,
            failed: self.p.stats.failed,
            last_error: self.p.last_error.clone(),
        }
    }
}

/// An item whose workflow this run started.
struct Running {
    id: String,
    call: Pin<Box<ChildCall<IgnoredAny>>>,
}

/// Registers the queue workflow in `engine`.
/// Registered already by an earlier call, it is the same code: no change.
pub(crate) fn register(engine: &Engine) {
    let _ = engine.try_register(WORKFLOW, run);
}

/// A queue's code.
async fn run(ctx: Ctx, input: Input) -> std::result::Result<(), Failure> {
    let mut shared = Shared {
        name: input.name,
        settings: input.settings,
        pending: Pending::default(),
        live_keys: HashSet::new(),
        done_keys: input.progress.done.iter().cloned().collect(),
        running: BTreeMap::new(),
        running_by_key: HashMap::new(),
        deleted: false,
        moving: false,
        p: input.progress,
    };
    for item in std::mem::take(&mut shared.p.pending) {
        shared.live_keys.insert(item.dedup.clone());
        shared.pending.push(item);
    }
    for a in &shared.p.adopted {
        shared.live_keys.insert(a.dedup.clone());
        if let Some(k) = &a.key {
            *shared.running_by_key.entry(k.clone()).or_default() += 1;
        }
        shared
            .running
            .insert(a.id.clone(), (a.dedup.clone(), a.key.clone()));
    }
    let shared = Rc::new(RefCell::new(shared));
    let notify = Notify::default();
    register_handlers(&ctx, &shared, &notify);
    let mut q = QueueRun {
        ctx,
        shared,
        running: Vec::new(),
        timer: Timer::default(),
        wakes: 0,
        continue_every: CONTINUE_EVERY,
        hold_until: 0,
        next_sweep: 0,
        sweep_ms: SWEEP_FIRST_MS,
    };
    q.main(&notify).await
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
        let (checked, shared, notify, check) = (
            Rc::clone(shared),
            Rc::clone(shared),
            notify.clone(),
            moving.clone(),
        );
        ctx.on_update_validated(
            ENQUEUE,
            move |items: &Vec<NewItem>| {
                check()?;
                let s = checked.borrow();
                let fresh = items.iter().filter(|i| !s.known(&i.dedup)).count() as u64;
                let pending = s.pending.len as u64;
                if fresh > 0 && pending + fresh > s.settings.max_pending {
                    return Err(format!("{FULL} {pending} {}", s.settings.max_pending));
                }
                Ok(())
            },
            move |items: Vec<NewItem>| {
                let mut s = shared.borrow_mut();
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    let id = format!("{}/{}", s.name, item.dedup);
                    let duplicate = s.known(&item.dedup);
                    if duplicate {
                        s.p.stats.duplicates += 1;
                    } else {
                        s.p.stats.enqueued += 1;
                        s.live_keys.insert(item.dedup.clone());
                        s.pending.push(item);
                    }
                    out.push(Enqueued { id, duplicate });
                }
                drop(s);
                notify.notify();
                std::future::ready(Ok(out))
            },
        );
    }
    let check = moving.clone();
    on_change(
        ctx,
        PAUSE,
        shared,
        notify,
        move |_| check(),
        |s, paused| s.p.paused = paused,
    );
    {
        let (shared, notify, check) = (Rc::clone(shared), notify.clone(), moving.clone());
        ctx.on_update_validated(
            DELETE,
            move |_| check(),
            move |()| {
                let mut s = shared.borrow_mut();
                s.deleted = true;
                let dropped = s.pending.len as u64;
                drop(s);
                notify.notify();
                std::future::ready(Ok(dropped))
            },
        );
    }
    let shared = Rc::clone(shared);
    ctx.on_update_validated(
        DESCRIBE,
        move |_| moving(),
        move |()| std::future::ready(Ok(shared.borrow().describe())),
    );
}

/// A queue's running code.
struct QueueRun {
    ctx: Ctx,
    shared: Rc<RefCell<Shared>>,
    running: Vec<Running>,
    timer: Timer,
    wakes: u32,
    continue_every: u32,
    /// No item starts before this time (a retry's wait).
    hold_until: u64,
    /// When to look at the items a previous run started.
    next_sweep: u64,
    sweep_ms: u64,
}

/// What woke a queue's code.
enum Woke {
    Timer(std::result::Result<(), Failure>),
    Item(usize, std::result::Result<IgnoredAny, Failure>),
    Changed,
}

impl QueueRun {
    async fn main(&mut self, notify: &Notify) -> std::result::Result<(), Failure> {
        let mut now = now_ms(&self.ctx);
        {
            let sh = self.shared.borrow();
            if sh.p.retry_ms > 0 {
                self.hold_until = now.saturating_add(sh.p.retry_ms);
            }
            if !sh.p.adopted.is_empty() {
                self.next_sweep = now.saturating_add(self.sweep_ms);
            }
        }
        loop {
            if self.shared.borrow().deleted {
                return Ok(());
            }
            if self.ctx.cancels() > 0 {
                return Err(Failure::with_kind(
                    "cancelled",
                    "the queue's workflow was cancelled",
                ));
            }
            if self.next_sweep > 0 && now >= self.next_sweep {
                self.sweep().await?;
                now = now_ms(&self.ctx);
            }
            let wait = match self.start_ready(now) {
                Ok(wait) => wait,
                Err((item, why)) => return self.retry_later(item, why).await,
            };
            if self.wakes >= self.continue_every {
                self.continue_as_new().await?;
            }
            let target = [wait, (self.next_sweep > 0).then_some(self.next_sweep)]
                .into_iter()
                .flatten()
                .min();
            self.timer.set(&self.ctx, "fusee.queue.wait", target, now);
            let woke = {
                let (timer, running) = (&mut self.timer, &mut self.running);
                std::future::poll_fn(|cx| {
                    if notify.poll_take(cx) {
                        return Poll::Ready(Woke::Changed);
                    }
                    if let Poll::Ready(r) = timer.poll_fired(cx) {
                        return Poll::Ready(Woke::Timer(r));
                    }
                    for (i, r) in running.iter_mut().enumerate() {
                        if let Poll::Ready(out) = r.call.as_mut().poll(cx) {
                            return Poll::Ready(Woke::Item(i, out));
                        }
                    }
                    Poll::Pending
                })
                .await
            };
            self.wakes += 1;
            let rate = self.shared.borrow().settings.rate.is_some();
            // Time matters to the rate, the sweep and a retry only.
            if rate || self.next_sweep > 0 || self.hold_until > 0 {
                now = now_ms(&self.ctx);
            }
            match woke {
                Woke::Timer(Err(cancelled)) => return Err(cancelled),
                Woke::Timer(Ok(())) | Woke::Changed => {}
                Woke::Item(i, out) => {
                    let item = self.running.remove(i);
                    self.shared.borrow_mut().finished(&item.id, out.is_ok());
                }
            }
        }
    }

    /// Starts every item that may start now. `Ok(Some(t))`: the rate lets
    /// the next one start at `t`; `Err`: an item's workflow type is not
    /// registered.
    #[allow(clippy::type_complexity)]
    fn start_ready(&mut self, now: u64) -> std::result::Result<Option<u64>, (NewItem, String)> {
        loop {
            let mut sh = self.shared.borrow_mut();
            if sh.p.paused || sh.pending.len == 0 {
                return Ok(None);
            }
            if now < self.hold_until {
                return Ok(Some(self.hold_until));
            }
            if let Some(limit) = sh.settings.concurrency
                && sh.running.len() >= limit as usize
            {
                return Ok(None);
            }
            if let Some(rate) = sh.settings.rate
                && let Some(at) = sh.p.window.wait(rate, now)
            {
                return Ok(Some(at));
            }
            let one_per_key = sh.settings.one_per_key;
            let item = {
                let Shared {
                    pending,
                    running_by_key,
                    ..
                } = &mut *sh;
                pending.take(|k| {
                    one_per_key && k.as_ref().is_some_and(|k| running_by_key.contains_key(k))
                })
            };
            let Some(item) = item else {
                return Ok(None);
            };
            let id = format!("{}/{}", sh.name, item.dedup);
            let wtype = intern(&sh.settings.workflow);
            drop(sh);
            let workflow: Workflow<serde_json::Value, IgnoredAny> = Workflow::new(wtype);
            let mut call = Box::pin(
                self.ctx
                    .child(workflow, &id, &item.input)
                    .on_parent_close(ParentClose::Abandon),
            );
            let mut sh = self.shared.borrow_mut();
            match poll_once(call.as_mut()) {
                Poll::Ready(Err(f)) if f.kind.as_deref() == Some("unknown-workflow") => {
                    return Err((item, f.message));
                }
                Poll::Ready(Err(f)) => {
                    sh.p.stats.failed += 1;
                    sh.p.last_error = Some(format!("item {id:?} not started: {f}"));
                    sh.live_keys.remove(&item.dedup);
                }
                Poll::Ready(Ok(_)) | Poll::Pending => {
                    if sh.settings.rate.is_some() {
                        sh.p.window.record(now);
                    }
                    sh.p.stats.started += 1;
                    sh.p.retry_ms = 0;
                    if let Some(k) = &item.key {
                        *sh.running_by_key.entry(k.clone()).or_default() += 1;
                    }
                    sh.running
                        .insert(id.clone(), (item.dedup.clone(), item.key.clone()));
                    self.running.push(Running { id, call });
                }
            }
        }
    }

    /// Looks up the items a previous run started and frees the slots of
    /// those that ended: a step (its answer recorded) asking the engine.
    async fn sweep(&mut self) -> std::result::Result<(), Failure> {
        let ids: Vec<String> = self
            .shared
            .borrow()
            .p
            .adopted
            .iter()
            .map(|a| a.id.clone())
            .collect();
        let host = crate::flow::shared::EngineRef::of(&self.ctx);
        let looked = self
            .ctx
            .step("fusee.queue.sweep", move |_| {
                let (ids, host) = (ids.clone(), host.clone());
                async move { ended_of(&host, &ids).await }
            })
            .await;
        let now = now_ms(&self.ctx);
        let mut sh = self.shared.borrow_mut();
        // A look that failed for good (the engine closing) frees nothing:
        // the next one is tried later.
        let ended = looked.unwrap_or_else(|e| {
            sh.p.last_error = Some(format!("looking up items running: {e}"));
            Vec::new()
        });
        for id in &ended {
            sh.finished(id, true);
        }
        sh.p.adopted.retain(|a| !ended.contains(&a.id));
        if sh.p.adopted.is_empty() {
            self.next_sweep = 0;
            return Ok(());
        }
        self.sweep_ms = if ended.is_empty() {
            (self.sweep_ms * 2).min(SWEEP_MAX_MS)
        } else {
            SWEEP_FIRST_MS
        };
        self.next_sweep = now.saturating_add(self.sweep_ms);
        Ok(())
    }

    /// Continues as new, handing on what waits and runs; when the state
    /// is over the payload limit, goes on and tries again later.
    async fn continue_as_new(&mut self) -> std::result::Result<(), Failure> {
        let next = {
            let mut sh = self.shared.borrow_mut();
            sh.moving = true;
            let mut p = sh.p.clone();
            p.pending = sh.pending.to_vec();
            p.adopted = sh
                .running
                .iter()
                .map(|(id, (dedup, key))| Adopted {
                    id: id.clone(),
                    dedup: dedup.clone(),
                    key: key.clone(),
                })
                .collect();
            Input {
                name: sh.name.clone(),
                settings: sh.settings.clone(),
                progress: p,
            }
        };
        let mut can = std::pin::pin!(self.ctx.continue_as_new::<Input, ()>(&next));
        match poll_once(can.as_mut()) {
            Poll::Ready(Err(f)) => {
                // Too large to hand on now: go on, try again later.
                let mut sh = self.shared.borrow_mut();
                sh.moving = false;
                sh.p.last_error = Some(format!("not continued as new: {f}"));
                self.continue_every = self.continue_every.saturating_mul(2);
                Ok(())
            }
            _ => can.await,
        }
    }

    /// An item's workflow type is not registered: the run continues as
    /// new with the item first in line, and the next one tries it after a
    /// wait (see `schedule` for why the run ends here).
    async fn retry_later(
        &mut self,
        item: NewItem,
        why: String,
    ) -> std::result::Result<(), Failure> {
        {
            let mut sh = self.shared.borrow_mut();
            let rest = sh.pending.to_vec();
            let mut again = Pending::default();
            again.push(NewItem {
                priority: i32::MAX,
                ..item
            });
            for i in rest {
                again.push(i);
            }
            sh.pending = again;
            sh.p.retry_ms =
                sh.p.retry_ms
                    .saturating_mul(2)
                    .clamp(RETRY_FIRST_MS, RETRY_MAX_MS);
            sh.p.last_error = Some(why);
            self.continue_every = 0;
        }
        self.continue_as_new().await?;
        Err(Failure::with_kind(
            "queue",
            "the queue could not hand on its items",
        ))
    }
}

/// The IDs among `ids` whose workflow has ended (or is gone).
async fn ended_of(
    host: &crate::flow::shared::EngineRef,
    ids: &[String],
) -> std::result::Result<Vec<String>, StepError> {
    let engine = host
        .get()
        .ok_or_else(|| StepError::retryable("the queue's engine is closing"))?;
    let mut ended = Vec::new();
    for id in ids {
        match engine.describe(id).await {
            Ok(d) if matches!(d.status, RunStatus::Finished(_)) => ended.push(id.clone()),
            Ok(_) => {}
            Err(Error::NotFound { .. }) => ended.push(id.clone()),
            Err(e) => return Err(StepError::retryable(e.to_string())),
        }
    }
    Ok(ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(dedup: &str, priority: i32, key: Option<&str>) -> NewItem {
        NewItem {
            dedup: dedup.into(),
            input: serde_json::Value::Null,
            priority,
            key: key.map(str::to_string),
        }
    }

    fn order(p: &mut Pending, blocked: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(i) = p.take(|k| k.as_deref().is_some_and(|k| blocked.contains(&k))) {
            out.push(i.dedup);
        }
        out
    }

    #[test]
    fn higher_priorities_first_keys_take_turns_each_key_in_order() {
        let mut p = Pending::default();
        for (d, pr, k) in [
            ("a1", 0, Some("a")),
            ("a2", 0, Some("a")),
            ("a3", 0, Some("a")),
            ("b1", 0, Some("b")),
            ("n1", 0, None),
            ("urgent", 5, Some("a")),
        ] {
            p.push(item(d, pr, k));
        }
        assert_eq!(order(&mut p, &[]), ["urgent", "a1", "b1", "n1", "a2", "a3"]);
        assert_eq!(p.len, 0);
    }

    #[test]
    fn a_blocked_key_is_passed_over_and_the_state_survives_a_round_trip() {
        let mut p = Pending::default();
        for (d, k) in [("a1", "a"), ("b1", "b"), ("a2", "a"), ("c1", "c")] {
            p.push(item(d, 0, Some(k)));
        }
        let first = p.take(|k| k.as_deref() == Some("a")).map(|i| i.dedup);
        assert_eq!(first.as_deref(), Some("b1"));
        let mut rebuilt = Pending::default();
        for i in p.to_vec() {
            rebuilt.push(i);
        }
        assert_eq!(order(&mut rebuilt, &[]), order(&mut p, &[]));
    }
}
