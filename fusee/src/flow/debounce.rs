//! Debounce: start a workflow for a key at most once per quiet window,
//! with the last input winning ([`Engine::debounce`]).
//!
//! Each (workflow type, key) is an entity workflow of the engine's own,
//! `fusee.debounce/<type>/<key>`, on the public workflow API like the
//! other entities of this folder: a call is an update (a push: the input
//! and the window), recorded before the call returns. The entity's run
//! waits; each push replaces the input and moves the fire time to the
//! push's time plus its window (but never past the first push's time plus
//! `max_wait`, when set); at the fire time it starts the workflow as a
//! child it does not keep (`<type>/<key>/<n>`, the `n`th fire of the key)
//! with the last input, and continues as new for the next window. A push
//! that reaches the run after it decided to fire is refused with
//! "moving" and sent again by the client side: it reaches the next
//! window. Durable across restarts as any run: the pushes are in the
//! journal, the fire time is a durable timer.
//!
//! An idle key costs what a parked run costs (its journal holds one
//! `Start`).

use std::cell::RefCell;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use super::shared::{MOVING, Notify, Timer, intern, now_ms, poll_once};
use crate::ctx::{Ctx, ParentClose};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::workflow::{Failure, Update, Workflow, encode};

/// The internal workflow type of every debounced key.
pub(crate) const DEBOUNCE_WORKFLOW: &str = "fusee.debounce";

const WORKFLOW: Workflow<Plan, ()> = Workflow::new(DEBOUNCE_WORKFLOW);

/// A call of [`Engine::debounce`]: the input and the timing it asks for.
const PUSH: Update<Push, String> = Update::new("fusee.debounce.push");

/// How a debounced start waits: the quiet window, and at most how long
/// after the first call of a window it fires anyway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debounce {
    window: Duration,
    max_wait: Option<Duration>,
}

impl Debounce {
    /// Fire once `window` passed with no other call for the key (each call
    /// moves the fire time to its own time plus `window`).
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            max_wait: None,
        }
    }

    /// Fire at most `max_wait` after the first call of the window, however
    /// often calls come (a key called more often than its window would
    /// otherwise never fire).
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }
}

/// A debounced key's run: which workflow it starts, for which key, and how
/// many windows fired before.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Plan {
    workflow: String,
    key: String,
    /// Windows fired by the runs before this one.
    fired: u64,
}

/// One call: the input (JSON) and the timing, in ms.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Push {
    input: serde_json::Value,
    window_ms: u64,
    max_wait_ms: Option<u64>,
}

/// What the run's code and its push handler share.
struct Shared {
    /// The last push of this window, not yet looked at by the loop.
    pushed: Option<Push>,
    /// The input the fire starts with (the last push's).
    input: Option<serde_json::Value>,
    /// The code decided to fire: pushes are refused (sent again, they
    /// reach the next run).
    moving: bool,
}

/// The ID of the `n`th run (from 1) a key of `wtype` starts.
fn started_id(wtype: &str, key: &str, n: u64) -> String {
    format!("{wtype}/{key}/{n}")
}

fn entity_id(wtype: &str, key: &str) -> String {
    format!("{DEBOUNCE_WORKFLOW}/{wtype}/{key}")
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

impl Engine {
    /// Starts `workflow` for `key` once calls for that key stop for the
    /// window `debounce` names, with the input of the last call: a burst
    /// of calls becomes one run (a search box's keystrokes, a document's
    /// saves, a user's many edits). Returns once the call is durable, with
    /// the workflow ID the run will have (`<type>/<key>/<n>`: the `n`th
    /// run of this key, from 1); no run has that ID before its window
    /// fires ([`Engine::result`] and [`Engine::describe`] answer
    /// [`Error::NotFound`] until then).
    ///
    /// Needs [`Engine::register_flow_control`]. The window and `max_wait`
    /// of the last call apply. Nothing is lost across a restart: the calls
    /// are recorded, the fire time is a durable timer. `input` must decode
    /// as the workflow's registered input type ([`Error::Codec`]
    /// otherwise, nothing recorded).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use fusee::{Config, Ctx, Debounce, Engine, Failure, Workflow};
    /// const REINDEX: Workflow<String, String> = Workflow::new("reindex");
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// let engine = Engine::open(Config::memory()).await?;
    /// engine.register(REINDEX, |_: Ctx, doc: String| async move { Ok::<_, Failure>(doc) });
    /// engine.register_flow_control();
    /// let quiet = Debounce::new(Duration::from_millis(50));
    /// let id = engine.debounce(REINDEX, "doc-7", &"v1".to_string(), quiet).await?;
    /// let again = engine.debounce(REINDEX, "doc-7", &"v2".to_string(), quiet).await?;
    /// assert_eq!(id, again); // one run, with the last input
    /// tokio::time::sleep(Duration::from_millis(300)).await;
    /// assert_eq!(engine.result(REINDEX, &id).await?, "v2");
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn debounce<I: Serialize, O>(
        &self,
        workflow: Workflow<I, O>,
        key: &str,
        input: &I,
        debounce: Debounce,
    ) -> Result<String> {
        self.check_flow(DEBOUNCE_WORKFLOW, Some(workflow.name()))?;
        let window_ms = millis(debounce.window);
        if window_ms == 0 {
            return Err(Error::Config(
                "a debounce window must be at least 1 ms".into(),
            ));
        }
        let bytes = encode(input).map_err(|e| Error::codec("workflow input", e))?;
        self.check_input(workflow.name(), None, &bytes)?;
        let input: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| Error::codec("workflow input", e))?;
        let plan = Plan {
            workflow: workflow.name().to_string(),
            key: key.to_string(),
            fired: 0,
        };
        let push = Push {
            input,
            window_ms,
            max_wait_ms: debounce.max_wait.map(millis),
        };
        self.update_or_start_entity(
            WORKFLOW,
            &entity_id(workflow.name(), key),
            &plan,
            PUSH,
            &push,
        )
        .await
    }
}

/// Registers the workflow behind debounced keys (by
/// [`Engine::register_flow_control`]).
pub(crate) fn register(engine: &Engine) {
    let _ = engine.try_register(WORKFLOW, run);
}

/// What woke the loop.
enum Woke {
    Pushed,
    Timer(std::result::Result<(), Failure>),
}

/// A debounced key's code: one window, then continue as new.
async fn run(ctx: Ctx, plan: Plan) -> std::result::Result<(), Failure> {
    let notify = Notify::default();
    let shared = Rc::new(RefCell::new(Shared {
        pushed: None,
        input: None,
        moving: false,
    }));
    let n = plan.fired + 1;
    let id = started_id(&plan.workflow, &plan.key, n);
    {
        let (shared, notify, id) = (Rc::clone(&shared), notify.clone(), id.clone());
        let refuse_shared = Rc::clone(&shared);
        ctx.on_update_validated(
            PUSH,
            move |_: &Push| {
                if refuse_shared.borrow().moving {
                    Err(MOVING.to_string())
                } else {
                    Ok(())
                }
            },
            move |push: Push| {
                shared.borrow_mut().pushed = Some(push);
                notify.notify();
                std::future::ready(Ok(id.clone()))
            },
        );
    }
    let mut timer = Timer::default();
    // The window's first push, and when it fires.
    let mut first_ms: Option<u64> = None;
    let mut fire_ms: Option<u64> = None;
    loop {
        let woke = std::future::poll_fn(|cx| {
            if notify.poll_take(cx) {
                return Poll::Ready(Woke::Pushed);
            }
            if let Poll::Ready(r) = timer.poll_fired(cx) {
                return Poll::Ready(Woke::Timer(r));
            }
            Poll::Pending
        })
        .await;
        // Read after each wake-up: a push is a delivery at its place in
        // the journal, so the time read here is the same on every replay.
        let now = now_ms(&ctx);
        match woke {
            Woke::Timer(Err(cancelled)) => return Err(cancelled),
            Woke::Timer(Ok(())) => {}
            Woke::Pushed => {
                let mut sh = shared.borrow_mut();
                if let Some(push) = sh.pushed.take() {
                    let first = *first_ms.get_or_insert(now);
                    let mut at = now.saturating_add(push.window_ms);
                    if let Some(max) = push.max_wait_ms {
                        at = at.min(first.saturating_add(max));
                    }
                    fire_ms = Some(at);
                    sh.input = Some(push.input);
                }
            }
        }
        if fire_ms.is_some_and(|at| at <= now) {
            break;
        }
        timer.set(&ctx, "quiet", fire_ms, now);
    }
    let input = {
        let mut sh = shared.borrow_mut();
        sh.moving = true;
        sh.input.take().unwrap_or(serde_json::Value::Null)
    };
    let workflow: Workflow<serde_json::Value, IgnoredAny> = Workflow::new(intern(&plan.workflow));
    let mut call = Box::pin(
        ctx.child(workflow, &id, &input)
            .on_parent_close(ParentClose::Abandon),
    );
    // One poll records the child's start; its result is the child's own
    // (the next window does not wait for it).
    if let Poll::Ready(Err(f)) = poll_once(call.as_mut()) {
        tracing::warn!(key = %plan.key, workflow = %plan.workflow, error = %f, "a debounced start failed");
    }
    drop(call);
    ctx.continue_as_new(&Plan { fired: n, ..plan }).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ids_name_the_type_key_and_window() {
        assert_eq!(started_id("mail", "user-1", 3), "mail/user-1/3");
        assert_eq!(entity_id("mail", "user-1"), "fusee.debounce/mail/user-1");
    }
}
