//! Flow control: schedules ([`crate::schedule`]), queues
//! ([`crate::queue`]), step limits ([`crate::limit`]), debounced starts
//! ([`crate::debounce`]), durable promises
//! ([`crate::promise`]) and sagas ([`crate::saga`]), each a module of this
//! folder (re-exported at the crate root, where the public paths stay).
//! This module holds what the first three share: their registration, the engine a run
//! belongs to, a sliding-window rate, and the small futures their entity
//! workflows wait with.
//!
//! Each of the four is an entity workflow of the engine's own (IDs
//! `fusee.schedule/<id>`, `fusee.queue/<name>`, `fusee.limit/<name>`,
//! `fusee.debounce/<type>/<key>`)
//! built on the public workflow API: durability, exactly-once and crash
//! safety come from the engine, and no storage code is added. Callers talk
//! to them through updates (recorded, validated before anything is
//! written) and queries.
//!
//! # Continue-as-new and updates
//!
//! Each entity continues as new now and then to keep its journal short.
//! An update accepted by a run that then continues as new before the
//! update is delivered would be lost, so every update handler of theirs
//! has a validator that refuses with [`MOVING`](shared::MOVING) once the code has decided
//! to continue as new (the decision and the run's end are one shard step),
//! and the client side sends a refused update again: it reaches the next
//! run.

/// Whether workflow type `wtype` is one of the engine's own entity
/// workflows (a schedule, queue, limit or debounce: `fusee.*`), which a
/// bulk action over every running run leaves alone unless named.
pub(crate) fn is_engine_type(wtype: &str) -> bool {
    wtype.starts_with("fusee.")
}

pub mod debounce;
pub mod limit;
pub mod promise;
pub mod queue;
pub mod saga;
pub mod schedule;
pub(crate) mod shared;

use crate::engine::Engine;

impl Engine {
    /// Registers the workflows behind schedules, queues, step limits and
    /// debounced starts (`fusee.schedule`, `fusee.queue`, `fusee.limit`,
    /// `fusee.debounce`), so the ones this
    /// store holds carry on and new ones can be made. Call it once after
    /// opening the engine, **after registering the workflows your schedules
    /// and queues start**: a recovered schedule or queue replays its
    /// journal as soon as its code is registered, and its journal names
    /// those workflows. Calling it again changes nothing.
    ///
    /// Without it, [`Engine::schedule`], [`Engine::queue`] and
    /// [`Engine::limit`] fail with [`Error::UnknownWorkflow`](crate::Error::UnknownWorkflow) naming the
    /// workflow missing, and a limited step ([`crate::Step::limit`]) fails.
    ///
    /// ```
    /// use fusee::{Config, Ctx, Engine, Failure, Workflow};
    ///
    /// const REPORT: Workflow<(), ()> = Workflow::new("report");
    ///
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> Result<(), fusee::Error> {
    /// let engine = Engine::open(Config::memory()).await?;
    /// engine.register(REPORT, |_: Ctx, ()| async { Ok::<_, Failure>(()) });
    /// engine.register_flow_control();
    /// engine.schedule("nightly", "0 3 * * *", REPORT, &()).create().await?;
    /// # engine.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn register_flow_control(&self) {
        schedule::register(self);
        debounce::register(self);
        queue::register(self);
        limit::register(self);
    }
}
