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

use crate::client::{IdPolicy, RunStatus};
use crate::ctx::{ChildCall, Ctx, ParentClose, StepError};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::flow::shared::{MOVING, Notify, Rate, Timer, Window, intern, now_ms, poll_once};
use crate::workflow::{Failure, Update, Workflow};

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
        let mut tries = 0;
        loop {
            let r = self
                .engine
                .update_with_start(WORKFLOW, &id, &input, CONFIGURE, &settings)
                .await;
            match r {
                Ok(()) => break,
                // Deleted before: a new queue of the name.
                Err(Error::Finished { .. }) => {
                    match self
                        .engine
                        .start_with(WORKFLOW, &id, &input, IdPolicy::ReuseAfterFinish)
                        .await
                    {
                        Ok(_) => break,
                        Err(Error::AlreadyExists { .. }) if tries < 3 => tries += 1,
                        Err(e) => return Err(e),
                    }
                }
                Err(Error::Rejected { reason, .. }) if reason == MOVING && tries < 64 => {
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        }
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
    {
        let (shared, notify, check) = (Rc::clone(shared), notify.clone(), moving.clone());
        ctx.on_update_validated(
            CONFIGURE,
            move |_| check(),
            move |settings: Settings| {
                shared.borrow_mut().settings = settings;
                notify.notify();
                std::future::ready(Ok(()))
            },
        );
    }
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
    {
        let (shared, notify, check) = (Rc::clone(shared), notify.clone(), moving.clone());
        ctx.on_update_validated(
            PAUSE,
            move |_| check(),
            move |paused: bool| {
                shared.borrow_mut().p.paused = paused;
                notify.notify();
                std::future::ready(Ok(()))
            },
        );
    }
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
