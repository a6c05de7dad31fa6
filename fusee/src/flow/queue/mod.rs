//! Queues: named durable queues that start a workflow per item, with a
//! concurrency limit, a rate limit, priorities, and fairness or
//! serialisation by key. Enqueueing is idempotent by a deduplication key.
//!
//! ```
//! use std::time::Duration;
//! use fusee::queue::ItemOptions;
//! use fusee::testing::TestEngine;
//! use fusee::{Ctx, Engine, Failure, Workflow};
//!
//! const SEND: Workflow<String, ()> = Workflow::new("send-email");
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let kit = TestEngine::open(|engine: &Engine| {
//!     engine.register(SEND, |_: Ctx, _to: String| async { Ok::<_, Failure>(()) });
//!     engine.register_flow_control();
//! })
//! .await?;
//! let emails = kit
//!     .engine()
//!     .queue("emails", SEND)
//!     .concurrency(10)
//!     .rate(100, Duration::from_secs(60))
//!     .create()
//!     .await?;
//! let first = emails.enqueue(&"ada@example.com".to_string(), "welcome/ada").await?;
//! assert_eq!(first.id, "emails/welcome/ada");
//! // The same key again: nothing new is enqueued.
//! let again = emails.enqueue(&"ada@example.com".to_string(), "welcome/ada").await?;
//! assert!(again.duplicate);
//! // Urgent mail first; a customer's mails take turns with others'.
//! let urgent = ItemOptions::new().priority(10).key("customer-7");
//! emails.enqueue_with(&"bob@example.com".to_string(), "reset/bob", urgent).await?;
//! kit.result(SEND, "emails/reset/bob").await?;
//! # Ok(())
//! # }
//! ```
//!
//! # What it promises
//!
//! - **An item is enqueued once per deduplication key**, and its
//!   workflow, `<queue name>/<dedup key>`, starts once, across crashes: the
//!   enqueue is an update of the queue's workflow (durable when
//!   [`Queue::enqueue`] returns) and the start a child with that ID, from
//!   the queue's journal. A key seen before (waiting, running, or among
//!   the last ten thousand finished) is answered
//!   [`duplicate`](Enqueued::duplicate); an older key whose workflow the
//!   engine still keeps is not started again either (its ID is taken).
//! - **Concurrency**: at most [`QueueBuilder::concurrency`] item
//!   workflows run at once. A slot is freed when the queue learns the
//!   item's workflow ended, never before.
//! - **Rate**: at most `count` starts in any window of `per`
//!   ([`QueueBuilder::rate`]), counted on the engine's clock at the
//!   queue's start decisions (a sliding window, not a bucket: no burst
//!   above the count in any window).
//! - **Order**: higher [`ItemOptions::priority`] first; within a priority,
//!   items of different [`ItemOptions::key`]s take turns (a key with a
//!   thousand items does not hold up the others), and items of one key go
//!   in enqueue order. With [`QueueBuilder::one_per_key`] at most one item
//!   of a key runs at a time.
//!
//! # How it works
//!
//! A queue is a workflow (type `fusee.queue`, ID `fusee.queue/<name>`) on
//! the public workflow API, so its items, its start decisions and its
//! rate window are in its journal and survive crashes; no storage code is
//! added. It starts items as children it does not keep alive (they run on
//! when the queue is deleted), and learns each end from the child's
//! result. It continues as new every thousand wake-ups to keep its
//! journal short, handing on the items waiting, the rate window and the
//! items running; the next run cannot receive the results of children the
//! previous one started, so it looks them up now and then ([`Engine::describe`]
//! in a step, every quarter second at first, backing off to half a minute)
//! and frees their slots when they have ended.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::client::RunStatus;
use crate::ctx::{ChildCall, Ctx, ParentClose};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::flow::shared::{MOVING, Notify, Rate, Timer, Window, intern, now_ms, poll_once};
use crate::step::StepError;
use crate::workflow::{Failure, Update, Workflow};

/// The workflow that implements queues; this file is their client side
/// (what callers call on `Engine` and `Queue`) and the protocol between
/// the two (the run's `Input`, its updates and query).
mod workflow;
pub(crate) use workflow::register;

/// The workflow type behind every queue.
pub const QUEUE_WORKFLOW: &str = "fusee.queue";

/// What a queue's workflow ID starts with: `fusee.queue/<name>`.
pub const QUEUE_ID_PREFIX: &str = "fusee.queue/";

/// The default [`QueueBuilder::max_pending`].
pub const MAX_PENDING_DEFAULT: u64 = 100_000;

const WORKFLOW: Workflow<Input, ()> = Workflow::new(QUEUE_WORKFLOW);
const CONFIGURE: Update<Settings, ()> = Update::new("fusee.queue.configure");
const ENQUEUE: Update<Vec<NewItem>, Vec<Enqueued>> = Update::new("fusee.queue.enqueue");
const PAUSE: Update<bool, ()> = Update::new("fusee.queue.pause");
const DELETE: Update<(), u64> = Update::new("fusee.queue.delete");
const DESCRIBE: Update<(), QueueDescription> = Update::new("fusee.queue.describe");

/// Wake-ups after which a queue continues as new.
const CONTINUE_EVERY: u32 = 1_000;
/// Finished dedup keys a queue remembers (beyond them, a key's workflow
/// ID being taken still stops a second start).
const DONE_KEEP: usize = 10_000;
/// Running items [`QueueDescription::running_ids`] lists.
const RUNNING_LISTED: usize = 100;
/// The first and the longest wait between looks at items a previous run
/// started.
const SWEEP_FIRST_MS: u64 = 250;
const SWEEP_MAX_MS: u64 = 30_000;
/// Waits before trying again an item whose workflow type is not
/// registered.
const RETRY_FIRST_MS: u64 = 1_000;
const RETRY_MAX_MS: u64 = 300_000;
/// The start of a validator's refusal when the queue is full.
const FULL: &str = "fusee.queue: full";

/// How an item is enqueued: its priority and its key.
///
/// ```
/// use fusee::queue::ItemOptions;
/// let urgent_for_ada = ItemOptions::new().priority(5).key("ada");
/// # let _ = urgent_for_ada;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ItemOptions {
    priority: i32,
    key: Option<String>,
}

impl ItemOptions {
    /// Priority 0, no key.
    pub fn new() -> Self {
        Self::default()
    }

    /// Items of a higher priority start first (default 0).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The item's key (a customer, a tenant): keys take turns within a
    /// priority, and with [`QueueBuilder::one_per_key`] one item of a key
    /// runs at a time.
    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_string());
        self
    }
}

/// What an enqueue did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The item's workflow ID: `<queue name>/<dedup key>`.
    pub id: String,
    /// The key was seen before: nothing new was enqueued.
    pub duplicate: bool,
}

/// What [`Queues::describe`] says about a queue. More fields may come;
/// match it with `..`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QueueDescription {
    /// The queue's name.
    pub name: String,
    /// The workflow type its items start.
    pub workflow: String,
    /// At most this many items run at once.
    pub concurrency: Option<u32>,
    /// At most `.0` starts in any window of `.1`.
    pub rate: Option<(u32, Duration)>,
    /// One item of a key runs at a time.
    pub one_per_key: bool,
    /// The most items it holds waiting.
    pub max_pending: u64,
    /// Whether it is paused (it starts nothing).
    pub paused: bool,
    /// Items waiting.
    pub pending: u64,
    /// Items whose workflow runs.
    pub running: u64,
    /// The workflow IDs of running items (up to a hundred).
    pub running_ids: Vec<String>,
    /// Items enqueued since the queue was made.
    pub enqueued: u64,
    /// Enqueues answered as duplicates.
    pub duplicates: u64,
    /// Item workflows started.
    pub started: u64,
    /// Item workflows that ended well.
    pub completed: u64,
    /// Item workflows that ended otherwise, or were not started (their
    /// ID was taken).
    pub failed: u64,
    /// The latest problem (a workflow type not registered), if any.
    pub last_error: Option<String>,
}

/// What [`Engine::queue`] makes: set its limits, then
/// [`create`](Self::create) it (or take a [`handle`](Self::handle) to one
/// made elsewhere).
#[must_use = "a queue is made by create()"]
pub struct QueueBuilder<I> {
    engine: Engine,
    name: String,
    workflow: &'static str,
    concurrency: Option<u32>,
    rate: Option<(u32, Duration)>,
    one_per_key: bool,
    max_pending: u64,
    _type: PhantomData<fn(I)>,
}

impl<I> std::fmt::Debug for QueueBuilder<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueBuilder")
            .field("name", &self.name)
            .field("workflow", &self.workflow)
            .field("concurrency", &self.concurrency)
            .field("rate", &self.rate)
            .field("one_per_key", &self.one_per_key)
            .field("max_pending", &self.max_pending)
            .finish()
    }
}

impl Engine {
    /// Queue `name`, whose items each start `workflow` with the item as
    /// input: set its limits on the builder, then
    /// [`create`](QueueBuilder::create) it. Nothing is checked or recorded
    /// before `create`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # const RESIZE: Workflow<String, ()> = Workflow::new("resize");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(RESIZE, |_: Ctx, _: String| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// let images = engine
    ///     .queue("images", RESIZE)
    ///     .concurrency(4)
    ///     .rate(20, Duration::from_secs(1))
    ///     .one_per_key()
    ///     .create()
    ///     .await?;
    /// images.enqueue(&"cat.png".to_string(), "cat.png").await?;
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn queue<I: Serialize, O>(&self, name: &str, workflow: Workflow<I, O>) -> QueueBuilder<I> {
        QueueBuilder {
            engine: self.clone(),
            name: name.to_string(),
            workflow: workflow.name(),
            concurrency: None,
            rate: None,
            one_per_key: false,
            max_pending: MAX_PENDING_DEFAULT,
            _type: PhantomData,
        }
    }

    /// The queues of this engine: describe, pause, resume, delete, list.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # const W: Workflow<u32, ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, _: u32| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// engine.queue("jobs", W).create().await?;
    /// assert_eq!(engine.queues().list().await?, vec!["jobs".to_string()]);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn queues(&self) -> Queues {
        Queues {
            engine: self.clone(),
        }
    }
}

impl<I: Serialize> QueueBuilder<I> {
    /// At most `n` item workflows run at once (default: no limit; 0 is
    /// [`Error::InvalidQueue`]).
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// At most `count` starts in any window of `per` (default: no limit;
    /// a count of 0 or above 100,000, or a period under a millisecond, is
    /// [`Error::InvalidQueue`]).
    pub fn rate(mut self, count: u32, per: Duration) -> Self {
        self.rate = Some((count, per));
        self
    }

    /// At most one item of a key ([`ItemOptions::key`]) runs at a time;
    /// items without a key are not held back.
    pub fn one_per_key(mut self) -> Self {
        self.one_per_key = true;
        self
    }

    /// The most items the queue holds waiting (default
    /// [`MAX_PENDING_DEFAULT`]); an enqueue beyond it is
    /// [`Error::QueueFull`]. Waiting items live in the queue's memory and
    /// are handed on whole when it continues as new, which a payload over
    /// the engine's limit ([`crate::Config::max_payload`]) puts off: keep
    /// `max_pending` times an item's size well under it.
    pub fn max_pending(mut self, n: u64) -> Self {
        self.max_pending = n;
        self
    }

    /// Creates the queue, or sets these limits on the queue of this name
    /// (items waiting and running are kept); returns once that is durable.
    /// Nothing is recorded when it fails: a zero limit or a bad rate is
    /// [`Error::InvalidQueue`], a workflow type not registered, or flow
    /// control not registered ([`Engine::register_flow_control`]),
    /// [`Error::UnknownWorkflow`].
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Error, Failure, Workflow};
    /// # const W: Workflow<u32, ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, _: u32| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// let bad = engine.queue("jobs", W).concurrency(0).create().await;
    /// assert!(matches!(bad, Err(Error::InvalidQueue { .. })));
    /// engine.queue("jobs", W).concurrency(2).create().await?;
    /// // Again, with another limit: the same queue, reconfigured.
    /// engine.queue("jobs", W).concurrency(8).create().await?;
    /// assert_eq!(engine.queues().describe("jobs").await?.concurrency, Some(8));
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create(self) -> Result<Queue<I>> {
        let invalid = |reason: String| Error::InvalidQueue {
            name: self.name.clone(),
            reason,
        };
        if self.name.is_empty() {
            return Err(invalid("the name is empty".into()));
        }
        if self.concurrency == Some(0) {
            return Err(invalid(
                "a concurrency limit of 0 would start nothing".into(),
            ));
        }
        if self.max_pending == 0 {
            return Err(invalid("max_pending of 0 would take no item".into()));
        }
        let rate = match self.rate {
            Some((count, per)) => Some(Rate::new(count, per).map_err(invalid)?),
            None => None,
        };
        self.engine
            .check_flow(QUEUE_WORKFLOW, Some(self.workflow))?;
        let settings = Settings {
            workflow: self.workflow.to_string(),
            concurrency: self.concurrency,
            rate,
            one_per_key: self.one_per_key,
            max_pending: self.max_pending,
        };
        let id = workflow_id(&self.name);
        let input = Input {
            name: self.name.clone(),
            settings: settings.clone(),
            progress: Progress::default(),
        };
        self.engine
            .update_or_start_entity(WORKFLOW, &id, &input, CONFIGURE, &settings)
            .await?;
        Ok(self.handle())
    }

    /// A handle to the queue of this name as it is, for code that only
    /// enqueues (its limits here are not applied): enqueues fail with
    /// [`Error::UnknownQueue`] until it is created.
    pub fn handle(self) -> Queue<I> {
        Queue {
            engine: self.engine,
            name: self.name,
            _type: PhantomData,
        }
    }
}

/// A queue whose items are `I` ([`QueueBuilder::create`]). Cheap to clone.
pub struct Queue<I> {
    engine: Engine,
    name: String,
    _type: PhantomData<fn(I)>,
}

impl<I> Clone for Queue<I> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine.clone(),
            name: self.name.clone(),
            _type: PhantomData,
        }
    }
}

impl<I> std::fmt::Debug for Queue<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("name", &self.name).finish()
    }
}

impl<I: Serialize> Queue<I> {
    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Enqueues `item` under `dedup_key` (priority 0, no key); returns
    /// once it is durable. A key seen before is answered as a
    /// [`duplicate`](Enqueued::duplicate) and enqueues nothing. Nothing is
    /// recorded when it fails: no such queue is [`Error::UnknownQueue`], a
    /// full one [`Error::QueueFull`], an empty key [`Error::InvalidQueue`].
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Error, Failure, Workflow};
    /// # const W: Workflow<u32, u32> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// engine.register(W, |_: Ctx, n: u32| async move { Ok::<_, Failure>(n * 2) });
    /// engine.register_flow_control();
    /// let q = engine.queue("doubler", W).create().await?;
    /// let item = q.enqueue(&21, "twenty-one").await?;
    /// // The queue starts the item's workflow when its limits allow: until
    /// // then the item's ID names no run.
    /// let doubled = loop {
    ///     match engine.result(W, &item.id).await {
    ///         Err(Error::NotFound { .. }) => {
    ///             tokio::time::sleep(std::time::Duration::from_millis(5)).await
    ///         }
    ///         other => break other?,
    ///     }
    /// };
    /// assert_eq!(doubled, 42);
    /// let nowhere = engine.queue("nowhere", W).handle();
    /// assert!(matches!(nowhere.enqueue(&1, "one").await, Err(Error::UnknownQueue { .. })));
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn enqueue(&self, item: &I, dedup_key: &str) -> Result<Enqueued> {
        self.enqueue_with(item, dedup_key, ItemOptions::default())
            .await
    }

    /// [`enqueue`](Self::enqueue) with a priority and a key.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # use fusee::queue::ItemOptions;
    /// # const W: Workflow<u32, ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, _: u32| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// let q = engine.queue("jobs", W).one_per_key().create().await?;
    /// q.enqueue_with(&1, "a-1", ItemOptions::new().key("tenant-a").priority(3)).await?;
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn enqueue_with(
        &self,
        item: &I,
        dedup_key: &str,
        options: ItemOptions,
    ) -> Result<Enqueued> {
        let mut out = self.enqueue_all([(item, dedup_key, options)]).await?;
        out.pop().ok_or_else(|| Error::Codec {
            what: "enqueue answer",
            id: None,
            detail: "the queue answered no item".into(),
        })
    }

    /// Enqueues many items in one update (one pair of records for all):
    /// each `(item, dedup key, options)`; the answers in the same order.
    /// All or none are enqueued.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # use fusee::queue::ItemOptions;
    /// # const W: Workflow<u32, ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, _: u32| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// let q = engine.queue("jobs", W).create().await?;
    /// let keys: Vec<String> = (0..3).map(|i| format!("job-{i}")).collect();
    /// let items: Vec<u32> = vec![10, 11, 10];
    /// let done = q
    ///     .enqueue_all(items.iter().zip(&keys).map(|(i, k)| (i, k.as_str(), ItemOptions::new())))
    ///     .await?;
    /// assert_eq!(done.len(), 3);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn enqueue_all<'a>(
        &self,
        items: impl IntoIterator<Item = (&'a I, &'a str, ItemOptions)>,
    ) -> Result<Vec<Enqueued>>
    where
        I: 'a,
    {
        let mut batch = Vec::new();
        for (item, key, options) in items {
            if key.is_empty() {
                return Err(Error::InvalidQueue {
                    name: self.name.clone(),
                    reason: "an item's dedup key is empty".into(),
                });
            }
            let input = serde_json::to_value(item).map_err(|e| Error::codec("queue item", e))?;
            batch.push(NewItem {
                dedup: key.to_string(),
                input,
                priority: options.priority,
                key: options.key,
            });
        }
        let r = self
            .engine
            .update_entity(&workflow_id(&self.name), ENQUEUE, &batch)
            .await;
        r.map_err(|e| queue_error(&self.name, e))
    }

    /// Where the queue stands ([`Queues::describe`]).
    pub async fn describe(&self) -> Result<QueueDescription> {
        self.engine.queues().describe(&self.name).await
    }
}

/// The queues of an engine ([`Engine::queues`]). Each call is an update of
/// the queue's workflow (recorded, so it answers after everything its
/// journal holds). A name with no queue is [`Error::UnknownQueue`].
#[derive(Clone, Debug)]
pub struct Queues {
    engine: Engine,
}

impl Queues {
    /// Where queue `name` stands: limits, counts, items running.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Error, Failure, Workflow};
    /// # const W: Workflow<u32, ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, _: u32| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// engine.queue("jobs", W).concurrency(3).create().await?;
    /// assert_eq!(engine.queues().describe("jobs").await?.concurrency, Some(3));
    /// assert!(matches!(
    ///     engine.queues().describe("nope").await,
    ///     Err(Error::UnknownQueue { .. })
    /// ));
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn describe(&self, name: &str) -> Result<QueueDescription> {
        let r = self
            .engine
            .update_entity(&workflow_id(name), DESCRIBE, &())
            .await;
        r.map_err(|e| queue_error(name, e))
    }

    /// Pauses queue `name`: it starts nothing until resumed (enqueues are
    /// still taken; items running go on).
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # const W: Workflow<u32, ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, _: u32| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// let q = engine.queue("jobs", W).create().await?;
    /// engine.queues().pause("jobs").await?;
    /// q.enqueue(&1, "one").await?;
    /// assert_eq!(q.describe().await?.pending, 1);
    /// engine.queues().resume("jobs").await?;
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn pause(&self, name: &str) -> Result<()> {
        let r = self
            .engine
            .update_entity(&workflow_id(name), PAUSE, &true)
            .await;
        r.map_err(|e| queue_error(name, e))
    }

    /// Resumes queue `name`.
    pub async fn resume(&self, name: &str) -> Result<()> {
        let r = self
            .engine
            .update_entity(&workflow_id(name), PAUSE, &false)
            .await;
        r.map_err(|e| queue_error(name, e))
    }

    /// Deletes queue `name`: its waiting items are dropped (their count is
    /// returned), items running go on, and the name can be used again.
    ///
    /// ```
    /// # use fusee::{Config, Ctx, Engine, Failure, Workflow};
    /// # const W: Workflow<u32, ()> = Workflow::new("w");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// # let engine = Engine::open(Config::memory()).await?;
    /// # engine.register(W, |_: Ctx, _: u32| async { Ok::<_, Failure>(()) });
    /// # engine.register_flow_control();
    /// let q = engine.queue("jobs", W).create().await?;
    /// engine.queues().pause("jobs").await?;
    /// q.enqueue(&1, "one").await?;
    /// assert_eq!(engine.queues().delete("jobs").await?, 1);
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn delete(&self, name: &str) -> Result<u64> {
        let id = workflow_id(name);
        let dropped = self
            .engine
            .update_entity(&id, DELETE, &())
            .await
            .map_err(|e| queue_error(name, e))?;
        match self.engine.result(WORKFLOW, &id).await {
            Ok(()) | Err(Error::Failed { .. }) => Ok(dropped),
            Err(e) => Err(e),
        }
    }

    /// The names of every queue, sorted.
    pub async fn list(&self) -> Result<Vec<String>> {
        self.engine
            .list_entities(QUEUE_WORKFLOW, QUEUE_ID_PREFIX)
            .await
    }
}

/// Queue `name`'s workflow ID.
fn workflow_id(name: &str) -> String {
    format!("{QUEUE_ID_PREFIX}{name}")
}

/// A call's error as the queues' caller sees it.
fn queue_error(name: &str, e: Error) -> Error {
    match e {
        Error::NotFound { .. } | Error::Finished { .. } => Error::UnknownQueue {
            name: name.to_string(),
        },
        Error::Rejected { reason, .. } if reason.starts_with(FULL) => {
            let mut parts = reason[FULL.len()..].split_whitespace();
            let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
            Error::QueueFull {
                name: name.to_string(),
                pending: next(),
                max: next(),
            }
        }
        other => other,
    }
}

/// A queue's limits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Settings {
    workflow: String,
    concurrency: Option<u32>,
    rate: Option<Rate>,
    one_per_key: bool,
    max_pending: u64,
}

/// An item as an enqueue carries it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct NewItem {
    dedup: String,
    input: serde_json::Value,
    priority: i32,
    key: Option<String>,
}

/// An item whose workflow a previous run of the queue started.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Adopted {
    id: String,
    dedup: String,
    key: Option<String>,
}

/// Counts since the queue was made.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Stats {
    enqueued: u64,
    duplicates: u64,
    started: u64,
    completed: u64,
    failed: u64,
}

/// What a queue's runs hand on.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Progress {
    paused: bool,
    /// Items waiting, in the order they are taken within each priority
    /// and key (rebuilt in that order, so turns carry over).
    pending: Vec<NewItem>,
    adopted: Vec<Adopted>,
    window: Window,
    done: VecDeque<String>,
    stats: Stats,
    last_error: Option<String>,
    retry_ms: u64,
}

/// A queue run's input.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Input {
    name: String,
    settings: Settings,
    #[serde(default)]
    progress: Progress,
}
