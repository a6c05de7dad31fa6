//! Fan-out: a batch job over many items, in children, with
//! continue-as-new.
//!
//! The job works through its items ten thousand at a time. For each slice
//! it starts a thousand child workflows at once (ten items each), collects
//! their results, and then continues as new with the next slice and the
//! running total: the next run of the same workflow ID starts with a short
//! journal instead of one that grows with every item. Each child handles
//! its items in a step, keyed, so an item retried after a crash is counted
//! once; each child's result reaches its parent once.
//!
//! `FUSEE_FANOUT_ITEMS` sets how many items the job has (default 25,000:
//! three runs, 2,500 children, a few seconds). The shape is the same at
//! any size: a million items is a hundred runs of a thousand children.
//!
//! Run it with `cargo run -p fusee --example fanout`; `cargo test -p fusee
//! --examples` runs it too (its `main`, from the test at the bottom).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use fusee::{Config, Ctx, Engine, Failure, StepError, Workflow};
use serde::{Deserialize, Serialize};

/// Items one run handles before it continues as new.
const PER_RUN: u64 = 10_000;
/// Items one child handles.
const PER_CHILD: u64 = 10;

/// Where a job stands: the next run's input.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Batch {
    /// The first item this run handles.
    next: u64,
    /// Items in all.
    total: u64,
    /// What the runs before found.
    sum: u64,
    /// Runs before this one.
    runs: u32,
}

/// What a job found.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Summary {
    items: u64,
    sum: u64,
    runs: u32,
    children: u64,
}

/// A child's share: items `first..first + count`.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Slice {
    first: u64,
    count: u64,
}

const JOB: Workflow<Batch, Summary> = Workflow::new("fanout-job");
const SLICE: Workflow<Slice, u64> = Workflow::new("fanout-slice");

/// The outside world: what was done to each item, by idempotency key.
#[derive(Default)]
struct Warehouse {
    /// Items handled, by the key of the step that handled them.
    handled: Mutex<BTreeMap<String, u64>>,
}

impl Warehouse {
    /// Handles `slice` once per key: an item's "value" is its number's
    /// digit sum.
    fn handle(&self, key: &str, slice: &Slice) -> u64 {
        let value: u64 = (slice.first..slice.first + slice.count)
            .map(digit_sum)
            .sum();
        self.handled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.to_string())
            .or_insert(slice.count);
        value
    }

    fn items(&self) -> u64 {
        self.handled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum()
    }
}

fn digit_sum(mut n: u64) -> u64 {
    let mut s = 0;
    while n > 0 {
        s += n % 10;
        n /= 10;
    }
    s
}

/// One run of the job: a child per ten items of its slice, all at once;
/// then the next run, or the summary.
async fn job(ctx: Ctx, batch: Batch) -> Result<Summary, Failure> {
    let end = (batch.next + PER_RUN).min(batch.total);
    let id = ctx.workflow_id();
    let children: Vec<_> = (batch.next..end)
        .step_by(PER_CHILD as usize)
        .map(|first| {
            let slice = Slice {
                first,
                count: PER_CHILD.min(end - first),
            };
            ctx.child(SLICE, &format!("{id}/items-{first}"), &slice)
        })
        .collect();
    let mut sum = batch.sum;
    for result in all(children).await {
        sum += result?;
    }
    if end < batch.total {
        return ctx
            .continue_as_new(&Batch {
                next: end,
                total: batch.total,
                sum,
                runs: batch.runs + 1,
            })
            .await;
    }
    Ok(Summary {
        items: batch.total,
        sum,
        runs: batch.runs + 1,
        children: batch.total.div_ceil(PER_CHILD),
    })
}

/// A child: its items, handled in one step keyed for the warehouse.
async fn slice(ctx: Ctx, slice: Slice, warehouse: Arc<Warehouse>) -> Result<u64, Failure> {
    Ok(ctx
        .step("handle", move |step| {
            let value = warehouse.handle(step.key(), &slice);
            async move { Ok::<_, StepError>(value) }
        })
        .await?)
}

/// Awaits every future, polling them in order (so the children start in
/// the same order in every replay), and returns their outputs in order.
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let items: u64 = match std::env::var("FUSEE_FANOUT_ITEMS") {
        Ok(v) => v.parse()?,
        Err(_) => 25_000,
    };
    let engine = Engine::open(Config::memory()).await?;
    let warehouse = Arc::new(Warehouse::default());
    let w = Arc::clone(&warehouse);
    engine.register(SLICE, move |ctx: Ctx, s: Slice| {
        slice(ctx, s, Arc::clone(&w))
    });
    engine.register(JOB, job);

    let started = std::time::Instant::now();
    let run = engine
        .start(
            JOB,
            "job-1",
            &Batch {
                next: 0,
                total: items,
                sum: 0,
                runs: 0,
            },
        )
        .await?;
    let summary = run.result().await?;
    println!(
        "{} items in {} children over {} runs of job-1: sum {} in {:.1?}",
        summary.items,
        summary.children,
        summary.runs,
        summary.sum,
        started.elapsed()
    );
    engine.close().await?;

    let want = (0..items).map(digit_sum).sum::<u64>();
    let runs = items.div_ceil(PER_RUN).max(1) as u32;
    if summary.sum != want || summary.runs != runs || warehouse.items() != items {
        return Err(format!(
            "expected sum {want} over {runs} runs and {items} items handled once; found {summary:?} and {} handled",
            warehouse.items()
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The example's whole `main` runs to the end.
    #[test]
    fn main_runs_to_completion() {
        super::main().expect("the fanout example runs");
    }
}
