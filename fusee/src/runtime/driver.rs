//! The production driver: each shard loop on its own thread, its flushes on
//! a flusher thread (so records keep arriving while a flush is in flight;
//! a flush the loop would only wait for runs on the shard thread; a log
//! that takes several flushes at once gets as many threads), its
//! steps on the embedder's tokio runtime (each attempt polled once on the
//! shard thread first: one that ends at once is taken back without a task
//! and its wake-ups), and the time from the engine's [`Clock`].
//!
//! Messages between shards travel through [`Peers`], the input channels of
//! the shards running in this process. A shard this process does not run
//! (owned by another process under [`crate::Ownership::Lease`], or not
//! opened yet) has no channel: with the PostgreSQL backend a message for it
//! goes to its inbox table through the sender's [`Postman`] (and the
//! postman brings the shard's own inbox to its loop); with the others it
//! stays in its sender's outbox. Each time a shard starts running here (a
//! new incarnation) every driver routes the messages its outbox holds for
//! that shard again, and with a postman each time one stops running here
//! (to its inbox: it may be another process's now).
//! Under a lease a shard whose storage failed stops its thread (its
//! callers answered by the loop), and the engine is told
//! ([`Leased::on_lost`]) so it can open the shard again later.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fusee_core::record::Name;
use fusee_storage::StorageError;
use rustc_hash::FxHashSet;
use tokio::runtime::Handle;

use super::postman::Postman;
use super::{Effects, Input, LoopConfig, ShardLoop, StepJob};
use crate::AnyStorage;
use crate::clock::Clock;
use crate::ctx::Registry;
use crate::step::StepError;

/// The client's side of a running shard.
pub(crate) struct ShardHandle {
    /// Inputs to the shard.
    pub(crate) tx: Sender<Input>,
    /// Client requests sent and not yet taken by the loop.
    pub(crate) queued: Arc<AtomicUsize>,
    /// The shard's thread.
    pub(crate) thread: Option<JoinHandle<()>>,
    /// What the shard is doing, for the test kit (empty and unread
    /// without the `testing` feature).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) activity: Arc<Activity>,
}

/// The longest a shard thread sleeps without an input: a bound, so a clock
/// that jumps (a suspended laptop) is noticed.
const MAX_SLEEP: Duration = Duration::from_secs(1);

/// How often a shard under a lease asks its storage whether it was fenced
/// (an in-memory check for the PostgreSQL backend, whose renewal thread
/// marks a shard another owner took over): an idle shard lets go of a
/// shard it lost within this, rather than at its next write.
const PROBE_EVERY: Duration = Duration::from_millis(250);

/// What a shard needs to run, the same for every shard of an engine.
#[derive(Clone)]
pub(crate) struct Context {
    pub(crate) storage: Arc<AnyStorage>,
    pub(crate) config: LoopConfig,
    pub(crate) registry: Registry,
    pub(crate) clock: Clock,
    pub(crate) runtime: Handle,
    pub(crate) peers: Arc<Peers>,
    /// How often a shard's postman reads its inbox table (PostgreSQL).
    pub(crate) inbox_poll: Duration,
    /// The engine's telemetry (`None`: [`crate::Config::metrics`] off).
    pub(crate) telemetry: Option<Arc<crate::telemetry::Telemetry>>,
}

/// How a shard under [`crate::Ownership::Lease`] ends: after a storage
/// failure (`Fenced` included) its thread stops, rather than answering
/// errors until the engine closes, and says so.
pub(crate) struct Leased {
    /// Called once, from the shard's thread, after the loop stopped after
    /// a storage failure and its parts were dropped (so the shard can be
    /// opened again): why, and whether the storage answered `Fenced`.
    pub(crate) on_lost: Box<dyn FnOnce(String, bool) + Send>,
}

/// A shard running here, as its peers reach it.
#[derive(Clone)]
struct Peer {
    /// Which opening of the shard this is: a new one is sent the messages
    /// its senders' outboxes hold for it.
    incarnation: u64,
    tx: Sender<Input>,
}

/// The input channels of the shards running in this process, by shard:
/// how messages between shards are carried (see the [module docs](self)).
pub(crate) struct Peers {
    running: RwLock<Vec<Option<Peer>>>,
    /// Moves at every change, so a driver notices one with a load.
    generation: AtomicU64,
}

/// A driver's copy of [`Peers`] as of one generation.
struct PeerView {
    generation: u64,
    running: Vec<Option<Peer>>,
}

impl Peers {
    /// A table of `shards` shards, none running.
    pub(crate) fn new(shards: u32) -> Arc<Self> {
        Arc::new(Self {
            running: RwLock::new(vec![None; shards as usize]),
            generation: AtomicU64::new(0),
        })
    }

    /// Shard `shard`'s opening `incarnation` runs here now, reached
    /// through `tx`. Drivers notice at their next iteration; the caller
    /// wakes them (an [`Input::Tick`]).
    pub(crate) fn join(&self, shard: u32, incarnation: u64, tx: Sender<Input>) {
        let mut running = self.running.write().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = running.get_mut(shard as usize) {
            *slot = Some(Peer { incarnation, tx });
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Shard `shard`'s opening `incarnation` stopped (a later one stays).
    pub(crate) fn leave(&self, shard: u32, incarnation: u64) {
        let mut running = self.running.write().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = running.get_mut(shard as usize)
            && slot.as_ref().is_some_and(|p| p.incarnation == incarnation)
        {
            *slot = None;
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn view(&self) -> PeerView {
        // The generation first: a change after it is seen again later.
        let generation = self.generation.load(Ordering::Acquire);
        let running = self
            .running
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        PeerView {
            generation,
            running,
        }
    }
}

impl PeerView {
    fn incarnation(&self, shard: usize) -> Option<u64> {
        self.running.get(shard)?.as_ref().map(|p| p.incarnation)
    }
}

/// Starts shard `shard`'s opening `incarnation`: its thread recovers it,
/// joins the [`Peers`], then runs it. Returns once recovery finished, with
/// the handle or the storage's error. With `leased`, a storage failure
/// stops the thread (see [`Leased`]).
///
/// The shard joins before its loop sends anything: a target acknowledges a
/// message to its sender's channel, and an acknowledgement for a shard not
/// among the peers yet is dropped (the sender's outbox keeps the message,
/// but nothing would send it again until the next recovery). Joining
/// after the loop started lost one acknowledgement now and then at an
/// open (the cross-shard restart test, about 1 run in 8).
pub(crate) fn spawn(
    context: &Context,
    shard: u32,
    incarnation: u64,
    leased: Option<Leased>,
) -> Result<ShardHandle, StorageError> {
    let (tx, rx) = mpsc::channel::<Input>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let activity = Arc::new(Activity::default());
    let thread_tx = tx.clone();
    let thread_queued = Arc::clone(&queued);
    let thread_activity = Arc::clone(&activity);
    let Context {
        storage,
        config,
        registry,
        clock,
        runtime,
        peers,
        inbox_poll,
        telemetry,
    } = context.clone();
    if let Clock::Virtual(v) = &clock {
        let poke = tx.clone();
        v.watch(Box::new(move || {
            let _ = poke.send(Input::Tick);
        }));
    }
    let thread = std::thread::Builder::new()
        .name(format!("fusee-shard-{shard}"))
        .spawn(move || {
            let began = Instant::now();
            let opened = ShardLoop::open(&storage, shard, config, registry, clock.now_ms());
            let shard_loop = match opened {
                Ok(mut l) => {
                    l.set_reopened_after_failure(leased.is_some());
                    if let Some(t) = &telemetry {
                        t.opened(shard, began.elapsed().as_secs_f64());
                        l.attach_telemetry(t.shard(shard));
                    }
                    peers.join(shard, incarnation, thread_tx.clone());
                    let _ = ready_tx.send(Ok(()));
                    l
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            drive(
                shard_loop,
                Channel {
                    rx,
                    tx: thread_tx,
                    queued: thread_queued,
                    inbox_poll,
                },
                clock,
                runtime,
                &peers,
                &thread_activity,
                leased,
            );
        })
        .map_err(|e| StorageError::io("spawning a shard thread", e))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(ShardHandle {
            tx,
            queued,
            thread: Some(thread),
            activity,
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => {
            let _ = thread.join();
            Err(StorageError::io(
                "recovering a shard",
                std::io::Error::other("the shard thread died during recovery"),
            ))
        }
    }
}

/// A shard thread's input channel.
struct Channel {
    rx: Receiver<Input>,
    /// Its sending side, for step tasks and the flusher.
    tx: Sender<Input>,
    /// Client requests sent and not yet taken.
    queued: Arc<AtomicUsize>,
    /// How often the postman reads the shard's inbox.
    inbox_poll: Duration,
}

/// The shard thread's loop: run, carry out the effects, wait for an input
/// or the next wake-up.
fn drive(
    mut shard: ShardLoop,
    channel: Channel,
    clock: Clock,
    runtime: Handle,
    peers: &Peers,
    activity: &Arc<Activity>,
    leased: Option<Leased>,
) {
    let Channel {
        rx,
        tx,
        queued,
        inbox_poll,
    } = channel;
    let flusher = Flusher::start(shard.shard(), shard.flushes_in_flight_max(), tx.clone());
    let postman = Postman::start(&shard, tx.clone(), inbox_poll);
    let mut view = peers.view();
    let mut unsent: Vec<(u32, Input)> = Vec::new();
    let mut probed = Instant::now();
    // Steps whose first poll here was slow: spawned without one.
    let mut slow_steps: FxHashSet<Name> = FxHashSet::default();
    // Whether steps are polled here first at all: not once more than
    // `SLOW_STEPS_MAX` step names were slow (names made per call would
    // otherwise grow the set without bound).
    let mut poll_steps = true;
    // How running attempts' heartbeats reach this loop: an input saying
    // they wait in the shard's hub (at most one on its way: `StepHub`).
    // Counted as sent before it goes, like a message, so the test kit
    // never takes the shard for idle while a heartbeat is on its way.
    {
        let (tx, activity) = (tx.clone(), Arc::clone(activity));
        shard.step_hub().set_poster(Box::new(move || {
            activity.message_sent();
            let _ = tx.send(Input::Heartbeats);
        }));
    }
    loop {
        if leased.is_some() && probed.elapsed() >= PROBE_EVERY {
            probed = Instant::now();
            if let Err(e @ StorageError::Fenced { .. }) = shard.probe() {
                shard.fail(e);
            }
        }
        let now = clock.now_ms();
        let Effects {
            flush,
            seal,
            steps,
            more,
            messages,
            inbox_done,
        } = shard.run(now);
        // A shard under a lease that failed is someone else's now (or
        // will be reopened): it starts nothing more.
        let stopping = leased.is_some() && shard.has_failed();
        // With nothing else to do (no work left, no step started, no input
        // waiting) the loop would only wait for this flush: it runs here,
        // saving the two thread wake-ups of a hand-off to the flusher and
        // back (tens of µs each on a busy machine, the most of a chain
        // step's time beyond its `fdatasync`). Inputs that arrive meanwhile
        // wait in the channel; with a flush in flight their records could
        // not have been flushed before it ended anyway, but code they wake
        // could have run: so only while flushes are quick (`flights`).
        let mut inline = false;
        if let Some(ticket) = flush {
            if !more
                && shard.flushes_are_quick()
                && steps.is_empty()
                && messages.is_empty()
                && idle(&mut shard, &rx, &queued, activity)
            {
                take(&mut shard, run_ticket(ticket), &queued, activity);
                inline = true;
            } else {
                flusher.send(Job::Flush(ticket));
            }
        }
        // A seal always goes to the flusher (after the flush, if both
        // came): the shard's thread never waits for its sync.
        if let Some(ticket) = seal {
            flusher.send(Job::Seal(ticket));
        }
        // A step attempt is polled once here before it becomes a task: one
        // that ends at once (no await that waits) is taken back now,
        // without the two thread wake-ups of a task and its `StepDone`.
        // Steps start here exactly when they would have been spawned (their
        // gate LSN durable: the output-commit rule holds). A step whose
        // first poll took long is spawned from then on (see `SLOW_POLL`).
        let mut polled = false;
        if !stopping {
            for job in steps {
                activity.step_started();
                if !poll_steps || slow_steps.contains(&job.name) {
                    spawn_step(&runtime, job, tx.clone());
                    continue;
                }
                let started = Instant::now();
                let name = job.name.clone();
                let outcome = poll_step(&runtime, job);
                if started.elapsed() >= SLOW_POLL {
                    tracing::debug!(shard = shard.shard(), step = %name, "a step's first poll was slow: its attempts run as tasks from now on");
                    if slow_steps.len() < SLOW_STEPS_MAX {
                        slow_steps.insert(name);
                    } else {
                        poll_steps = false;
                        slow_steps = FxHashSet::default();
                    }
                }
                match outcome {
                    Ok(done) => {
                        take(&mut shard, done, &queued, activity);
                        polled = true;
                    }
                    Err(job) => spawn_step(&runtime, job, tx.clone()),
                }
            }
        }
        if let Some(p) = &postman
            && !inbox_done.is_empty()
        {
            p.remove(inbox_done);
        }
        // A post failed: every message for a shard not here goes again,
        // in outbox order (its ids are in sending order).
        if let Some(p) = &postman
            && !stopping
            && p.take_retry()
        {
            let away: Vec<bool> = (0..view.running.len())
                .map(|t| view.incarnation(t).is_none())
                .collect();
            shard.route_again(&away);
            unsent.append(&mut shard.take_outgoing());
        }
        if peers.generation.load(Ordering::Acquire) != view.generation {
            let fresh = peers.view();
            // A shard that came is sent its messages by channel; with a
            // postman, one that went by its inbox (another process may
            // own it now; if it comes back here, it reads them there).
            let again: Vec<bool> = (0..fresh.running.len())
                .map(|t| match (view.incarnation(t), fresh.incarnation(t)) {
                    (before, Some(now)) => before != Some(now),
                    (Some(_), None) => postman.is_some(),
                    (None, None) => false,
                })
                .collect();
            view = fresh;
            if again.contains(&true) {
                shard.route_again(&again);
                unsent.append(&mut shard.take_outgoing());
            }
        }
        unsent.extend(messages);
        let mut posts = Vec::new();
        for (target, input) in unsent.drain(..) {
            // A shard not running here gets nothing by channel: with a
            // postman a message goes to its inbox table; without one it
            // stays in its sender's outbox, routed again when the shard
            // comes (or sent again when the sender recovers). An
            // acknowledgement is sent again by the target when the sender
            // sends again.
            match view.running.get(target as usize) {
                Some(Some(peer)) => {
                    let message = Activity::is_message(&input);
                    if peer.tx.send(input).is_ok() && message {
                        activity.message_sent();
                    }
                }
                _ => {
                    if let Input::Message { id, message, .. } = input
                        && postman.is_some()
                    {
                        posts.push((target, id, message));
                    }
                }
            }
        }
        if let Some(p) = &postman
            && !posts.is_empty()
            && !stopping
        {
            p.post(posts);
        }
        if shard.is_closed() || stopping {
            break;
        }
        let input = if more || inline || polled || shard.has_input() {
            rx.try_recv().map_err(|e| match e {
                mpsc::TryRecvError::Empty => RecvTimeoutError::Timeout,
                mpsc::TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
            })
        } else {
            let mut wait = match (&clock, shard.next_wake()) {
                (_, Some(at)) if at <= now => Duration::ZERO,
                (Clock::System, Some(at)) => Duration::from_millis(at - now).min(MAX_SLEEP),
                (Clock::System, None) => MAX_SLEEP,
                // A virtual clock moves only by `advance`, which sends a
                // tick: wait for inputs only.
                (Clock::Virtual(_), _) => Duration::from_secs(3600),
            };
            if leased.is_some() {
                wait = wait.min(PROBE_EVERY);
            }
            if !wait.is_zero() && shard.is_quiet() && unsent.is_empty() {
                activity.idle(shard.next_timer());
            }
            rx.recv_timeout(wait)
        };
        match input {
            Ok(first) => {
                take(&mut shard, first, &queued, activity);
                // Everything else already queued joins this iteration.
                while let Ok(next) = rx.try_recv() {
                    take(&mut shard, next, &queued, activity);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let lost = shard.lost();
    // The parts go first (a lease is released, the storage's claim on the
    // shard ends), then the channel: requests still queued are dropped
    // unanswered, which the engine reports as not owned.
    drop(shard);
    drop(flusher);
    drop(postman);
    drop(rx);
    if let (Some(leased), Some((why, fenced))) = (leased, lost) {
        (leased.on_lost)(why, fenced);
    }
}

/// Whether the loop has nothing to do but wait: no input taken and none
/// queued. An input found queued is taken (the loop runs it next).
fn idle(
    shard: &mut ShardLoop,
    rx: &Receiver<Input>,
    queued: &AtomicUsize,
    activity: &Activity,
) -> bool {
    if shard.has_input() {
        return false;
    }
    match rx.try_recv() {
        Ok(input) => {
            take(shard, input, queued, activity);
            false
        }
        Err(_) => true,
    }
}

/// Hands an input to the loop, counting a client request as taken.
fn take(shard: &mut ShardLoop, input: Input, queued: &AtomicUsize, activity: &Activity) {
    if input.is_client() {
        queued.fetch_sub(1, Ordering::AcqRel);
    }
    activity.took(&input);
    shard.handle(input);
}

/// A step attempt's first poll (on the shard thread) that takes this long
/// or more makes the driver spawn that step's attempts without one: a
/// step with heavy work before its first await holds up its shard once,
/// not every time.
const SLOW_POLL: Duration = Duration::from_millis(1);

/// Slow step names a shard remembers; past them it polls no step first.
const SLOW_STEPS_MAX: usize = 1024;

/// Polls a step attempt once, in the runtime's context (so it may spawn,
/// sleep, do I/O): its `StepDone` if it ended, else the job, to be spawned
/// (the task polls it again, registering its own waker; a wake-up of the
/// throwaway waker used here is not needed).
fn poll_step(runtime: &Handle, job: StepJob) -> Result<Input, StepJob> {
    let _entered = runtime.enter();
    let StepJob {
        run,
        seq,
        attempt,
        name,
        future,
    } = job;
    let mut attempt_future = CatchUnwind { future };
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::Pin::new(&mut attempt_future).poll(&mut cx) {
        std::task::Poll::Ready(r) => Ok(Input::StepDone {
            run,
            seq,
            attempt,
            result: attempt_result(r, &name),
        }),
        std::task::Poll::Pending => Err(StepJob {
            run,
            seq,
            attempt,
            name,
            future: attempt_future.future,
        }),
    }
}

/// An attempt's result, a panic in it a failed (retryable) attempt of
/// step `name`.
fn attempt_result(
    r: std::thread::Result<Result<Vec<u8>, StepError>>,
    name: &str,
) -> Result<Vec<u8>, StepError> {
    match r {
        Ok(r) => r,
        Err(p) => {
            let msg = crate::ctx::panic_message(&*p);
            Err(StepError::retryable(format!("step `{name}` panicked: {msg}")).kind("panic"))
        }
    }
}

/// Runs a step attempt as a task; a panic in it is a failed attempt.
fn spawn_step(runtime: &Handle, job: StepJob, tx: Sender<Input>) {
    let StepJob {
        run,
        seq,
        attempt,
        future,
        name,
    } = job;
    // One task, the panic caught in it: a second task awaiting the step's
    // (to learn of a panic from its `JoinError`) cost a wake-up per step.
    runtime.spawn(async move {
        let result = attempt_result((CatchUnwind { future }).await, &name);
        let _ = tx.send(Input::StepDone {
            run,
            seq,
            attempt,
            result,
        });
    });
}

/// A step's future with a panic in it caught: the panic's payload as its
/// output.
struct CatchUnwind {
    future: crate::step::StepFuture,
}

impl Future for CatchUnwind {
    type Output = std::thread::Result<Result<Vec<u8>, StepError>>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        // A step that panicked is not polled again: its attempt ended.
        let future = &mut self.future;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(std::task::Poll::Ready(r)) => std::task::Poll::Ready(Ok(r)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(p) => std::task::Poll::Ready(Err(p)),
        }
    }
}

/// What a flusher thread runs: a flush's I/O or a seal's.
enum Job {
    Flush(fusee_storage::FlushTicket),
    Seal(fusee_storage::SealTicket),
}

/// A shard's flusher threads: one per flush its log takes at once (one
/// for most backends), each running a flush or seal ticket at a time from
/// one queue and handing it back to the shard.
struct Flusher {
    tx: Option<Sender<Job>>,
    back: Sender<Input>,
    /// Joined when the flusher is dropped: a ticket in flight holds the
    /// storage's files (and its directory lock) until its I/O ends, and a
    /// dropped engine must have let go of them when its drop returns.
    threads: Vec<JoinHandle<()>>,
}

impl Drop for Flusher {
    fn drop(&mut self) {
        // Closing the channel ends the thread after its current ticket.
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Flusher {
    fn start(shard: u32, threads: usize, back: Sender<Input>) -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut spawned = Vec::with_capacity(threads);
        for i in 0..threads.max(1) {
            let (rx, back) = (Arc::clone(&rx), back.clone());
            let thread = std::thread::Builder::new()
                .name(format!("fusee-flush-{shard}-{i}"))
                .spawn(move || {
                    // The lock is held only while waiting for a job: the
                    // next thread waits for the next one meanwhile.
                    while let Ok(job) = {
                        let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
                        rx.recv()
                    } {
                        if back.send(run_job(job)).is_err() {
                            break;
                        }
                    }
                });
            match thread {
                Ok(t) => spawned.push(t),
                Err(e) => {
                    tracing::warn!(shard, error = %e, "a flusher thread could not start");
                    break;
                }
            }
        }
        let tx = (!spawned.is_empty()).then_some(tx);
        if tx.is_none() {
            tracing::warn!(shard, "no flusher thread: flushes run on the shard thread");
        }
        Self {
            tx,
            back,
            threads: spawned,
        }
    }

    /// Sends a ticket to the flusher (or runs it here without one).
    fn send(&self, job: Job) {
        let job = match &self.tx {
            Some(tx) => match tx.send(job) {
                Ok(()) => return,
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let _ = self.back.send(run_job(job));
    }
}

/// Runs a job's I/O: the input that hands its ticket back.
fn run_job(job: Job) -> Input {
    match job {
        Job::Flush(ticket) => run_ticket(ticket),
        Job::Seal(mut ticket) => {
            ticket.run();
            Input::Sealed { ticket }
        }
    }
}

/// Runs a flush ticket's I/O, timed.
fn run_ticket(mut ticket: fusee_storage::FlushTicket) -> Input {
    let started = Instant::now();
    ticket.run();
    Input::Flushed {
        ticket,
        micros: started.elapsed().as_micros() as u64,
    }
}

/// What a shard's driver is doing, published for the test kit
/// (`crate::testing`, feature `testing`) to tell when the whole engine is
/// idle: every shard waiting for an input with nothing queued, no flush in
/// flight, no step attempt running, no message between shards in transit.
///
/// Why the driver and not the loop: only the driver knows that a step's
/// task is still running (the loop forgets an attempt whose run ended) and
/// that it is about to block. The kit reads two snapshots around its own
/// checks; an unchanged `generation` in both means no shard moved between
/// them. Without the feature this is empty and every call is a no-op, so
/// the production driver pays nothing.
#[derive(Default)]
pub(crate) struct Activity {
    #[cfg(feature = "testing")]
    state: std::sync::Mutex<ActivityState>,
}

/// One shard's [`Activity`] at a moment.
#[cfg(feature = "testing")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ActivityState {
    /// The shard is blocked waiting for an input, with nothing queued and
    /// no flush in flight.
    pub(crate) idle: bool,
    /// Moves at every input taken and every time the shard goes idle.
    pub(crate) generation: u64,
    /// Step tasks started whose end (`StepDone`) the loop has not taken.
    pub(crate) steps: u64,
    /// Messages (and acknowledgements) this shard sent to shards, and
    /// heartbeats its step tasks sent it.
    pub(crate) sent: u64,
    /// Messages (and acknowledgements) this shard took from shards, and
    /// heartbeats it took.
    pub(crate) received: u64,
    /// The shard's next timer (a sleep, a wait's timeout, a retry, a
    /// deadline, or a sweep of far timers), when idle: the time only time
    /// can bring. Housekeeping and checkpoints are left out: they change
    /// nothing a run's code sees, and a clock that jumps runs them late.
    pub(crate) next_due: Option<u64>,
}

impl Activity {
    /// Whether `input` travels between shards (counted on both sides), or
    /// is a step task's heartbeat (counted the same way: both are sent
    /// from outside the shard's thread and must be taken before it is
    /// idle).
    fn is_message(input: &Input) -> bool {
        matches!(
            input,
            Input::Message { .. } | Input::Delivered { .. } | Input::Heartbeats
        )
    }

    #[cfg(feature = "testing")]
    fn with(&self, f: impl FnOnce(&mut ActivityState)) {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The driver took `input`: the shard is busy.
    #[cfg_attr(not(feature = "testing"), allow(unused_variables))]
    fn took(&self, input: &Input) {
        #[cfg(feature = "testing")]
        self.with(|s| {
            s.idle = false;
            s.generation += 1;
            match input {
                Input::StepDone { .. } => s.steps = s.steps.saturating_sub(1),
                i if Self::is_message(i) => s.received += 1,
                _ => {}
            }
        });
    }

    /// A step attempt's task was spawned.
    fn step_started(&self) {
        #[cfg(feature = "testing")]
        self.with(|s| s.steps += 1);
    }

    /// A message went to a shard.
    fn message_sent(&self) {
        #[cfg(feature = "testing")]
        self.with(|s| s.sent += 1);
    }

    /// The shard is about to block with nothing to do before `next_due`.
    #[cfg_attr(not(feature = "testing"), allow(unused_variables))]
    fn idle(&self, next_due: Option<u64>) {
        #[cfg(feature = "testing")]
        self.with(|s| {
            s.idle = true;
            s.generation += 1;
            s.next_due = next_due;
        });
    }

    /// What the shard is doing now.
    #[cfg(feature = "testing")]
    pub(crate) fn snapshot(&self) -> ActivityState {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
