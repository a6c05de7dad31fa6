//! The production driver: each shard loop on its own thread, its flushes on
//! a flusher thread (so records keep arriving while a flush is in flight),
//! its steps as tasks of the embedder's tokio runtime, and the time from
//! the engine's [`Clock`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use super::{Effects, Input, LoopConfig, ShardLoop, StepJob};
use crate::AnyStorage;
use crate::clock::Clock;
use crate::ctx::StepError;
use crate::registry::Registry;

/// The client's side of a running shard.
pub(crate) struct ShardHandle {
    /// Inputs to the shard.
    pub(crate) tx: Sender<Input>,
    /// Client requests sent and not yet taken by the loop.
    pub(crate) queued: Arc<AtomicUsize>,
    /// The shard's thread.
    pub(crate) thread: Option<JoinHandle<()>>,
}

/// The longest a shard thread sleeps without an input: a bound, so a clock
/// that jumps (a suspended laptop) is noticed.
const MAX_SLEEP: Duration = Duration::from_secs(1);

/// Every shard's input channel, by shard, set once all shards are running:
/// how messages between shards are carried.
pub(crate) type Peers = Arc<OnceLock<Vec<Sender<Input>>>>;

/// Starts shard `shard`: its thread recovers it, then runs it. Returns once
/// recovery finished, with the handle or the storage's error.
pub(crate) fn spawn(
    storage: Arc<AnyStorage>,
    shard: u32,
    config: LoopConfig,
    registry: Registry,
    clock: Clock,
    runtime: Handle,
    peers: Peers,
) -> Result<ShardHandle, fusee_storage::StorageError> {
    let (tx, rx) = mpsc::channel::<Input>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let thread_tx = tx.clone();
    let thread_queued = Arc::clone(&queued);
    if let Clock::Virtual(v) = &clock {
        let poke = tx.clone();
        v.watch(Box::new(move || {
            let _ = poke.send(Input::Tick);
        }));
    }
    let thread = std::thread::Builder::new()
        .name(format!("fusee-shard-{shard}"))
        .spawn(move || {
            let opened = ShardLoop::open(&storage, shard, config, registry, clock.now_ms());
            let shard_loop = match opened {
                Ok(l) => {
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
                rx,
                thread_tx,
                thread_queued,
                clock,
                runtime,
                peers,
            );
        })
        .map_err(|e| fusee_storage::StorageError::io("spawning a shard thread", e))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(ShardHandle {
            tx,
            queued,
            thread: Some(thread),
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => {
            let _ = thread.join();
            Err(fusee_storage::StorageError::io(
                "recovering a shard",
                std::io::Error::other("the shard thread died during recovery"),
            ))
        }
    }
}

/// The shard thread's loop: run, carry out the effects, wait for an input
/// or the next wake-up.
fn drive(
    mut shard: ShardLoop,
    rx: Receiver<Input>,
    tx: Sender<Input>,
    queued: Arc<AtomicUsize>,
    clock: Clock,
    runtime: Handle,
    peers: Peers,
) {
    let flusher = Flusher::start(shard.shard, tx.clone());
    // Messages produced before every shard was running (at recovery).
    let mut unsent: Vec<(u32, Input)> = Vec::new();
    loop {
        let now = clock.now_ms();
        let Effects {
            flush,
            steps,
            more,
            messages,
        } = shard.run(now);
        if let Some(ticket) = flush {
            flusher.send(ticket);
        }
        for job in steps {
            spawn_step(&runtime, job, tx.clone());
        }
        unsent.extend(messages);
        if let Some(peers) = peers.get() {
            for (target, input) in unsent.drain(..) {
                // A stopped shard's messages go out again after a restart.
                if let Some(peer) = peers.get(target as usize) {
                    let _ = peer.send(input);
                }
            }
        }
        if shard.is_closed() {
            break;
        }
        let input = if more {
            rx.try_recv().map_err(|e| match e {
                mpsc::TryRecvError::Empty => RecvTimeoutError::Timeout,
                mpsc::TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
            })
        } else {
            let wait = match (&clock, shard.next_wake()) {
                (_, Some(at)) if at <= now => Duration::ZERO,
                (Clock::System, Some(at)) => Duration::from_millis(at - now).min(MAX_SLEEP),
                (Clock::System, None) => MAX_SLEEP,
                // A virtual clock moves only by `advance`, which sends a
                // tick: wait for inputs only.
                (Clock::Virtual(_), _) => Duration::from_secs(3600),
            };
            rx.recv_timeout(wait)
        };
        match input {
            Ok(first) => {
                take(&mut shard, first, &queued);
                // Everything else already queued joins this iteration.
                while let Ok(next) = rx.try_recv() {
                    take(&mut shard, next, &queued);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
}

/// Hands an input to the loop, counting a client request as taken.
fn take(shard: &mut ShardLoop, input: Input, queued: &AtomicUsize) {
    if input.is_client() {
        queued.fetch_sub(1, Ordering::AcqRel);
    }
    shard.handle(input);
}

/// Runs a step attempt as a task; a panic in it is a failed attempt.
fn spawn_step(runtime: &Handle, job: StepJob, tx: Sender<Input>) {
    let StepJob {
        run,
        seq,
        attempt,
        future,
    } = job;
    let inner = runtime.spawn(future);
    runtime.spawn(async move {
        let result = match inner.await {
            Ok(r) => r,
            Err(e) if e.is_panic() => {
                let p = e.into_panic();
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".into());
                Err(StepError::retryable(format!("step panicked: {msg}")).kind("panic"))
            }
            Err(_) => Err(StepError::retryable("step task was cancelled").kind("cancelled")),
        };
        let _ = tx.send(Input::StepDone {
            run,
            seq,
            attempt,
            result,
        });
    });
}

/// A shard's flusher thread: runs flush tickets one at a time and hands
/// each back to the shard.
struct Flusher {
    tx: Option<Sender<fusee_storage::FlushTicket>>,
    back: Sender<Input>,
}

impl Flusher {
    fn start(shard: u32, back: Sender<Input>) -> Self {
        let (tx, rx) = mpsc::channel::<fusee_storage::FlushTicket>();
        let thread_back = back.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("fusee-flush-{shard}"))
            .spawn(move || {
                while let Ok(ticket) = rx.recv() {
                    if thread_back.send(run_ticket(ticket)).is_err() {
                        break;
                    }
                }
            });
        let tx = match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::warn!(shard, error = %e, "no flusher thread: flushes run on the shard thread");
                None
            }
        };
        Self { tx, back }
    }

    /// Sends a ticket to the flusher (or runs it here without one).
    fn send(&self, ticket: fusee_storage::FlushTicket) {
        let ticket = match &self.tx {
            Some(tx) => match tx.send(ticket) {
                Ok(()) => return,
                Err(mpsc::SendError(ticket)) => ticket,
            },
            None => ticket,
        };
        let _ = self.back.send(run_ticket(ticket));
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
