//! The simulator's workflows: programs generated from the seed, one
//! workflow type that interprets them, and the outside service their steps
//! call.
//!
//! The service answers every call with a new number, so a step run again
//! returns something else. A run's state mixes in every answer, and every
//! step sends the state so far as its input: a step that starts before the
//! records it follows are durable (and so runs again, after a crash, behind
//! a step that answered differently) shows up as one idempotency key with
//! two inputs. Every run also takes an update (`add`), a step of its own
//! whose answer reaches the result. Sagas have the `order` example's
//! shape: steps that register compensations (which call the service too),
//! one of them failing for good, undone newest first before the program
//! goes on. A race's order goes into the name of the step after it: a
//! replay that hands the race's results over in another order calls a step
//! the journal does not hold, a determinism error. Each op begins by
//! setting the run's search attribute [`PROGRESS`] to its number. A stream
//! op sends numbered chunks from a step that may fail after sending them
//! (so they are sent again), and ends the stream.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::ctx::Registry;
use crate::step::StepError;
use crate::{Ctx, Failure, Saga, SearchAttributes, Signal, Update, Workflow};

/// The one workflow type: input (program, generation).
pub(super) const SIM: Workflow<(u32, u32), u64> = Workflow::new("sim");

/// The signals a program waits for (a `Signal` names a static string).
pub(super) const SIGNALS: [Signal<u64>; 4] = [
    Signal::new("sig-0"),
    Signal::new("sig-1"),
    Signal::new("sig-2"),
    Signal::new("sig-3"),
];

/// The search attribute each op sets to its number (from 1) as it begins.
pub(super) const PROGRESS: &str = "progress";

/// The update every run takes: a step with the caller's number as its
/// input, its answer mixed into the run's result.
pub(super) const ADD: Update<u64, u64> = Update::new("add");

/// One operation of a program.
#[derive(Clone, Debug)]
pub(super) enum Op {
    /// A step that fails its first `fail_first` attempts (retried).
    Step { fail_first: u32 },
    /// A durable sleep.
    Sleep { ms: u64 },
    /// A wait for signal `k`, with a timeout.
    Wait { k: usize, timeout_ms: u64 },
    /// A step and a sleep at once; the one done first names the next step.
    Race { sleep_ms: u64 },
    /// A child running leaf program `program`.
    Child { program: u32 },
    /// A saga of `steps` steps, each registering a compensation; step
    /// `fail_at` (if any) fails for good, so the ones before it are undone
    /// newest first and the program goes on with the saga's failure.
    Saga { steps: u32, fail_at: Option<u32> },
    /// A stream of `chunks` chunks sent by a step, which fails its first
    /// `fail_first` attempts after sending them all (so a retry sends them
    /// again), then ends the stream. Chunk `j` reads `j@attempt`: the
    /// world checks each sits at its own index, once.
    Stream { chunks: u32, fail_first: u32 },
}

/// A program: its operations, and whether it continues as new once.
#[derive(Clone, Debug)]
pub(super) struct Program {
    pub(super) ops: Vec<Op>,
    pub(super) continue_once: bool,
}

/// Programs `0..leaves` have no children (children run them); the rest
/// may start children.
pub(super) fn programs(rng: &mut fastrand::Rng, count: u32, leaves: u32) -> Vec<Program> {
    (0..count)
        .map(|p| {
            let len = rng.usize(2..7);
            let ops = (0..len)
                .map(|_| match rng.u32(0..12) {
                    0..=3 => Op::Step {
                        fail_first: if rng.u32(0..4) == 0 { rng.u32(1..3) } else { 0 },
                    },
                    4 => Op::Sleep {
                        ms: rng.u64(1..5_000),
                    },
                    5 | 6 => Op::Wait {
                        k: rng.usize(0..SIGNALS.len()),
                        timeout_ms: rng.u64(100..20_000),
                    },
                    7 => Op::Race {
                        sleep_ms: rng.u64(0..50),
                    },
                    8 => {
                        let steps = rng.u32(1..4);
                        Op::Saga {
                            steps,
                            fail_at: (rng.u32(0..2) == 0).then(|| rng.u32(0..steps)),
                        }
                    }
                    11 => Op::Stream {
                        chunks: rng.u32(1..12),
                        fail_first: rng.u32(0..2),
                    },
                    _ if p >= leaves && leaves > 0 => Op::Child {
                        program: rng.u32(0..leaves),
                    },
                    _ => Op::Step { fail_first: 0 },
                })
                .collect();
            Program {
                ops,
                continue_once: rng.u32(0..4) == 0,
            }
        })
        .collect()
}

/// The outside service: every call by idempotency key, and the keys that
/// came with two different inputs.
#[derive(Debug, Default)]
pub(super) struct Service {
    next: u64,
    /// Key → the input of its first call.
    pub(super) calls: BTreeMap<String, u64>,
    /// (key, first input, later input) of each conflict.
    pub(super) conflicts: Vec<(String, u64, u64)>,
}

impl Service {
    /// One call: logged, then answered with a new number (or refused, for
    /// an attempt the program wants to fail).
    fn call(
        &mut self,
        key: &str,
        input: u64,
        attempt: u32,
        fail_first: u32,
    ) -> Result<u64, StepError> {
        match self.calls.get(key) {
            Some(&first) if first != input => {
                self.conflicts.push((key.to_string(), first, input));
            }
            Some(_) => {}
            None => {
                self.calls.insert(key.to_string(), input);
            }
        }
        if attempt <= fail_first {
            return Err(StepError::retryable(format!("attempt {attempt} refused")));
        }
        self.next += 1;
        Ok(self.next)
    }
}

fn mix(state: u64, v: u64) -> u64 {
    (state ^ v)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(29)
}

/// A step calling the service with the run's state as its input.
async fn call_step(
    ctx: &Ctx,
    name: String,
    state: u64,
    fail_first: u32,
    service: &Arc<Mutex<Service>>,
) -> Result<u64, Failure> {
    let service = Arc::clone(service);
    let v = ctx
        .step(&name, move |sc| {
            let service = Arc::clone(&service);
            async move {
                service.lock().unwrap_or_else(|e| e.into_inner()).call(
                    sc.key(),
                    state,
                    sc.attempt(),
                    fail_first,
                )
            }
        })
        .await?;
    Ok(v)
}

/// Registers [`SIM`], interpreting `programs`.
pub(super) fn register(
    registry: &Registry,
    programs: Arc<Vec<Program>>,
    service: Arc<Mutex<Service>>,
) {
    let fresh = registry.register(SIM, move |ctx: Ctx, (p, generation): (u32, u32)| {
        let programs = Arc::clone(&programs);
        let service = Arc::clone(&service);
        async move {
            let Some(program) = programs.get(p as usize).cloned() else {
                return Err(Failure::new(format!("no program {p}")));
            };
            let id = ctx.workflow_id().to_string();
            // Updates run beside the program, at their place in the
            // journal; what they add reaches the result.
            let added = Rc::new(std::cell::Cell::new(0u64));
            {
                let (added, c, service) = (Rc::clone(&added), ctx.clone(), Arc::clone(&service));
                ctx.on_update(ADD, move |n: u64| {
                    let (added, c, service) = (Rc::clone(&added), c.clone(), Arc::clone(&service));
                    async move {
                        let v = call_step(&c, "u".to_string(), n, 0, &service).await?;
                        added.set(mix(added.get(), v));
                        Ok(v)
                    }
                });
            }
            let mut state = u64::from(p) << 32 | u64::from(generation);
            for (i, op) in program.ops.iter().enumerate() {
                // Each op begins by setting the run's progress as a search
                // attribute: the world checks each value is recorded once,
                // in order, through every crash and replay.
                ctx.set_attributes(&SearchAttributes::new().int(PROGRESS, i as i64 + 1))?;
                match op {
                    Op::Step { fail_first } => {
                        let v =
                            call_step(&ctx, format!("s{i}"), state, *fail_first, &service).await?;
                        state = mix(state, v);
                    }
                    Op::Sleep { ms } => {
                        ctx.sleep(&format!("z{i}"), Duration::from_millis(*ms))
                            .await?;
                        state = mix(state, 1);
                    }
                    Op::Wait { k, timeout_ms } => {
                        let got = ctx
                            .wait_for(&SIGNALS[*k])
                            .timeout(Duration::from_millis(*timeout_ms))
                            .await?;
                        state = mix(state, got.unwrap_or(0));
                    }
                    Op::Race { sleep_ms } => {
                        let order = Rc::new(RefCell::new(Vec::new()));
                        let (a, b) = (Rc::clone(&order), Rc::clone(&order));
                        let step = call_step(&ctx, format!("r{i}"), state, 0, &service);
                        let sleep = ctx.sleep(&format!("w{i}"), Duration::from_millis(*sleep_ms));
                        let (x, y) = futures_join(
                            async move {
                                let r = step.await;
                                a.borrow_mut().push('s');
                                r
                            },
                            async move {
                                let r = sleep.await;
                                b.borrow_mut().push('z');
                                r
                            },
                        )
                        .await;
                        state = mix(state, x?);
                        y?;
                        let first = order.borrow().first().copied().unwrap_or('-');
                        let v = call_step(&ctx, format!("after{i}-{first}"), state, 0, &service)
                            .await?;
                        state = mix(state, v);
                    }
                    Op::Saga { steps, fail_at } => {
                        let v = saga(&ctx, i, state, *steps, *fail_at, &service).await;
                        state = mix(state, v);
                    }
                    Op::Stream { chunks, fail_first } => {
                        let v = stream(&ctx, i, *chunks, *fail_first).await?;
                        state = mix(state, v);
                    }
                    Op::Child { program } => {
                        let v = ctx
                            .child(SIM, &format!("{id}/g{generation}c{i}"), &(*program, 0))
                            .await?;
                        state = mix(state, v);
                    }
                }
            }
            if program.continue_once && generation == 0 {
                return ctx.continue_as_new(&(p, 1)).await;
            }
            Ok(mix(state, added.get()))
        }
    });
    // Each world makes its own registry and registers SIM in it once.
    debug_assert!(fresh.is_ok(), "SIM registered twice in one registry");
}

/// Opens stream `t{op}` and sends its `chunks` chunks from a step (chunk
/// `j` reads `j@attempt`), which fails its first `fail_first` attempts
/// once it sent them all, then ends the stream; returns the chunk count.
async fn stream(ctx: &Ctx, op: usize, chunks: u32, fail_first: u32) -> Result<u64, Failure> {
    let tx = ctx.stream(&format!("t{op}"));
    let sent = ctx
        .step(&format!("ts{op}"), move |sc| {
            let mut tx = tx.clone();
            async move {
                let attempt = sc.attempt();
                let fatal = |e: crate::Error| StepError::fatal(e.to_string());
                while tx.index() < u64::from(chunks) {
                    let j = tx.index();
                    tx.send(format!("{j}@{attempt}")).await.map_err(fatal)?;
                }
                if attempt <= fail_first {
                    return Err(StepError::retryable("cut off after its chunks"));
                }
                tx.end().await.map_err(fatal)?;
                Ok(u64::from(chunks))
            }
        })
        .await?;
    Ok(sent)
}

/// Runs a saga of `steps` service calls, each undone by another call when
/// a later one fails for good (step `fail_at`); what it returned, or a
/// mark of its failure (caught: compensated, the program goes on).
async fn saga(
    ctx: &Ctx,
    op: usize,
    state: u64,
    steps: u32,
    fail_at: Option<u32>,
    service: &Arc<Mutex<Service>>,
) -> u64 {
    let saga = Saga::new(ctx);
    let s = saga.clone();
    let service = Arc::clone(service);
    let outcome = saga
        .run(async move {
            let mut acc = state;
            for j in 0..steps {
                let (call, undo) = (Arc::clone(&service), Arc::clone(&service));
                let input = acc;
                let v: u64 = s
                    .step(&format!("g{op}-{j}"), move |sc| {
                        let call = Arc::clone(&call);
                        async move {
                            if fail_at == Some(j) {
                                return Err(StepError::fatal("out of stock"));
                            }
                            call.lock().unwrap_or_else(|e| e.into_inner()).call(
                                sc.key(),
                                input,
                                sc.attempt(),
                                0,
                            )
                        }
                    })
                    .compensate(&format!("undo{op}-{j}"), move |v: u64, sc| {
                        let undo = Arc::clone(&undo);
                        async move {
                            undo.lock().unwrap_or_else(|e| e.into_inner()).call(
                                sc.key(),
                                v,
                                sc.attempt(),
                                0,
                            )
                        }
                    })
                    .await?;
                acc = mix(acc, v);
            }
            Ok(acc)
        })
        .await;
    match outcome {
        Ok(v) => v,
        Err(f) => mix(0x5a6a, f.message.len() as u64),
    }
}

/// Both futures to completion, polled in turn (`tokio::join!` without the
/// macro).
async fn futures_join<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(move |cx| {
        if ra.is_none()
            && let std::task::Poll::Ready(v) = a.as_mut().poll(cx)
        {
            ra = Some(v);
        }
        if rb.is_none()
            && let std::task::Poll::Ready(v) = b.as_mut().poll(cx)
        {
            rb = Some(v);
        }
        match (ra.take(), rb.take()) {
            (Some(x), Some(y)) => std::task::Poll::Ready((x, y)),
            (x, y) => {
                (ra, rb) = (x, y);
                std::task::Poll::Pending
            }
        }
    })
    .await
}
