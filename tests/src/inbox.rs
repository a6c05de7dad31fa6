//! The inbox harness (`tests/lease_messages.rs`) and its child
//! (`inbox-child`): two engine processes on one PostgreSQL store under
//! [`fusee::Ownership::Lease`], process `a` owning shard 0 and process `b`
//! shards 1 to 3, so every message between a parent on shard 0 and its
//! children travels between processes, through the shards' inbox table.
//!
//! The workflows: a [`PARENT`] starts its [`KID`]s (all at once, on `b`'s
//! shards), each kid signals the parent [`HELLO`] and waits for [`FINISH`];
//! once every kid said hello the parent finishes all of them but its
//! victim, which it cancels, and returns one line per kid's result. Each
//! run then waits [`EXTRA`] for one more of the signals it expected: a
//! duplicate recorded changes the result. So each
//! parent's family sends every kind of message both ways: child starts, a
//! signal each way, a cancel, and the children's results.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use fusee::{Ctx, Engine, Failure, Signal, Workflow};

/// Shards of the store.
pub const SHARDS: u32 = 4;

/// The shards process `a` owns (the parents'); `b` owns the others.
pub const A_SHARDS: [u32; 1] = [0];

/// The parent: given its kids' IDs (on `b`'s shards; it cancels the
/// first, its victim), one line per kid, in that order.
pub const PARENT: Workflow<Vec<String>, Vec<String>> = Workflow::new("inbox-parent");
/// A parent of one kid whose ID is taken by a run it did not start: the
/// kid's shard refuses the start, and its refusal (a failed result) goes
/// back to the parent's process before the start's row may go (a reply
/// relayed across processes). Returns the kid's failure kind.
pub const LONER: Workflow<String, String> = Workflow::new("inbox-loner");
/// A kid: given its parent's ID, returns a line.
pub const KID: Workflow<String, String> = Workflow::new("inbox-kid");
/// A kid's hello to its parent: the kid's ID.
pub const HELLO: Signal<String> = Signal::new("hello");
/// The parent's word to a kid to finish.
pub const FINISH: Signal<u32> = Signal::new("finish");

/// The line a kid that finished returns.
pub fn finished_line(kid: &str) -> String {
    format!("{kid} finished")
}

/// The line a parent gives a kid that failed with `kind`.
pub fn failed_line(kid: &str, kind: &str) -> String {
    format!("{kid} failed {kind}")
}

/// The result a parent must return for `kids`.
pub fn expected(kids: &[String]) -> Vec<String> {
    kids.iter()
        .enumerate()
        .map(|(i, k)| {
            if i == 0 {
                failed_line(k, "cancelled")
            } else {
                finished_line(k)
            }
        })
        .collect()
}

/// Registers the workflows on `engine`.
pub fn register(engine: &Engine) {
    engine.register(PARENT, parent);
    engine.register(KID, kid);
    engine.register(LONER, loner);
}

async fn loner(ctx: Ctx, kid: String) -> Result<String, Failure> {
    let me = ctx.workflow_id();
    Ok(match ctx.child(KID, &kid, &me).await {
        Ok(line) => format!("the kid ran: {line}"),
        Err(f) => f.kind.unwrap_or_default(),
    })
}

/// How long a run waits, after the signals it expects, for one more: a
/// duplicate recorded in its journal would arrive within it (the tests
/// deliver every duplicate together with its original).
pub const EXTRA: Duration = Duration::from_millis(300);

async fn kid(ctx: Ctx, parent: String) -> Result<String, Failure> {
    let me = ctx.workflow_id();
    ctx.signal(&parent, HELLO, &me)?;
    ctx.wait_for(&FINISH).await?;
    if ctx.wait_for(&FINISH).timeout(EXTRA).await?.is_some() {
        return Ok(format!("{me} was told to finish twice"));
    }
    Ok(finished_line(&me))
}

async fn parent(ctx: Ctx, kids: Vec<String>) -> Result<Vec<String>, Failure> {
    let me = ctx.workflow_id();
    let calls: Vec<_> = kids.iter().map(|k| ctx.child(KID, k, &me)).collect();
    let hellos = async {
        let mut said = Vec::new();
        while said.len() < kids.len() {
            if let Some(kid) = ctx.wait_for(&HELLO).await? {
                said.push(kid);
            }
        }
        for (i, k) in kids.iter().enumerate() {
            if i == 0 {
                ctx.cancel(k, "the victim");
            } else {
                ctx.signal(k, FINISH, &1)?;
            }
        }
        Ok::<_, Failure>(said)
    };
    let (results, said) = both(all(calls), hellos).await;
    let mut said = said?;
    if let Some(again) = ctx.wait_for(&HELLO).timeout(EXTRA).await? {
        return Err(Failure::new(format!("a second hello from {again}")));
    }
    said.sort();
    let mut sorted = kids.clone();
    sorted.sort();
    if said != sorted {
        return Err(Failure::new(format!(
            "hellos from {said:?}, kids {sorted:?}"
        )));
    }
    Ok(kids
        .iter()
        .zip(results)
        .map(|(k, r)| match r {
            Ok(line) => line,
            Err(f) => failed_line(k, f.kind.as_deref().unwrap_or("-")),
        })
        .collect())
}

/// Awaits every future, polling them in order (the same order in every
/// replay), and returns their outputs in order.
async fn all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(move |cx| {
        let mut pending = false;
        for (f, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(outputs.iter_mut().filter_map(Option::take).collect())
        }
    })
    .await
}

/// Awaits two futures, polling `a` first each time.
async fn both<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let mut a = Box::pin(a);
    let mut b = Box::pin(b);
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(move |cx| {
        if ra.is_none()
            && let Poll::Ready(v) = a.as_mut().poll(cx)
        {
            ra = Some(v);
        }
        if rb.is_none()
            && let Poll::Ready(v) = b.as_mut().poll(cx)
        {
            rb = Some(v);
        }
        match (ra.take(), rb.take()) {
            (Some(x), Some(y)) => Poll::Ready((x, y)),
            (x, y) => {
                ra = x;
                rb = y;
                Poll::Pending
            }
        }
    })
    .await
}
