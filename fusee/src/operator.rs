//! Operator verbs: what the people running an engine do to runs whose code
//! they did not write. Pause and resume a run, reset it to a step, list
//! runs by status and type, and cancel or terminate many at once.
//!
//! Each verb that changes a run writes a record and answers once it is
//! durable, like every client call; each refusal records nothing. How the
//! records look is in the shard side's module (`runtime::operator`).

use fusee_core::record::RunId;

use crate::client::{Cursor, ListFilter, Page, RunRef, RunSummary, ShardPage, StatusFilter};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::runtime::Input;

impl Engine {
    /// Pauses workflow `id`: no new step attempt starts until
    /// [`resume`](Self::resume) (timers still fire; signals, updates and
    /// cancels are still recorded; its code runs up to its next step).
    /// Recorded, so a restart keeps the run paused. Pausing a paused run
    /// records nothing. A finished run is [`Error::Finished`].
    ///
    /// ```
    /// # async fn demo(engine: fusee::Engine) -> fusee::Result<()> {
    /// engine.pause("order-42").await?;
    /// assert!(engine.describe("order-42").await?.paused);
    /// engine.resume("order-42").await?;
    /// # Ok(()) }
    /// ```
    pub async fn pause(&self, id: &str) -> Result<()> {
        self.set_paused(id, true).await
    }

    /// Lets a paused workflow `id` start steps again. Resuming a run that
    /// is not paused records nothing.
    pub async fn resume(&self, id: &str) -> Result<()> {
        self.set_paused(id, false).await
    }

    async fn set_paused(&self, id: &str, paused: bool) -> Result<()> {
        self.request(id, |reply| Input::Pause {
            id: id.to_string(),
            paused,
            reply,
        })
        .await
    }

    /// Lets step `step` of workflow `id` run again after its retry policy
    /// ran out of attempts and paused it ([`crate::RetryPolicy::pause_when_exhausted`]):
    /// a `Resume` is recorded and the step gets a fresh allowance of
    /// attempts (after a restart, the policy counts every attempt the
    /// journal holds: the next failure pauses the step again). A step that
    /// is not paused is [`Error::StepNotPaused`] (listing those that are),
    /// and nothing is recorded.
    ///
    /// ```
    /// # async fn demo(engine: fusee::Engine) -> fusee::Result<()> {
    /// // The payment service is back: let the paused charge try again.
    /// engine.resume_step("order-42", "charge-card").await?;
    /// # Ok(()) }
    /// ```
    pub async fn resume_step(&self, id: &str, step: &str) -> Result<()> {
        self.request(id, |reply| Input::ResumeStep {
            id: id.to_string(),
            step: step.to_string(),
            reply,
        })
        .await
    }

    /// Restarts workflow `id` from its step named `step`: a new run of the
    /// same ID and input whose journal copies every record the old run
    /// wrote before that step's first record, so the steps before it are
    /// not run again and the step runs afresh (with the code registered
    /// now). The old run, if it was still running, ends with status
    /// `Reset`; the new run's `Start` names it. Result waiters follow to
    /// the new run.
    ///
    /// Refused, recording nothing: a step name the run never reached
    /// ([`Error::UnknownStep`], listing the steps it has); a finished run
    /// whose history was let go (after `Config::history_retention`, or at
    /// once for a journal over `Config::history_max_bytes`: only its start
    /// and end are kept) or a run that has a child still running at that
    /// point (its result would go to the old run) ([`Error::CannotReset`]).
    /// A finished run is reset from its kept journal, in memory or parked.
    ///
    /// ```
    /// # async fn demo(engine: fusee::Engine) -> fusee::Result<()> {
    /// let again = engine.reset("order-42", "charge-card", "card processor fixed").await?;
    /// assert!(!again.attached);
    /// # Ok(()) }
    /// ```
    ///
    /// A reset is not safe to repeat: a caller that lost the answer (a
    /// timeout, a crash of either side) and calls it again resets the new
    /// run. Use [`reset_run`](Self::reset_run) for that.
    pub async fn reset(&self, id: &str, step: &str, reason: &str) -> Result<RunRef> {
        self.request(id, |reply| Input::Reset {
            id: id.to_string(),
            run: None,
            step: step.to_string(),
            reason: reason.to_string(),
            reply,
        })
        .await
    }

    /// [`reset`](Self::reset) of one run of `id` (its number, as
    /// [`describe`](Self::describe) or a [`RunRef`] gives it), safe to
    /// repeat: a run is reset at most once. When `run` is `id`'s current
    /// run it is reset as `reset` does. When it was reset already and the
    /// run that reset made is still `id`'s current one, nothing is
    /// recorded and the answer is that run, with
    /// [`attached`](RunRef::attached) set, once the records that made it
    /// are durable; so a caller retries after a lost answer or a crash
    /// until it gets one, and each retry names the same run.
    ///
    /// Refused, recording nothing, as `reset` refuses, and with
    /// [`Error::CannotReset`] when `run` is not `id`'s current run and the
    /// current run was not made by resetting it (the ID has moved on since:
    /// reset the run it is now, if that is what you mean).
    ///
    /// ```
    /// # async fn demo(engine: fusee::Engine) -> fusee::Result<()> {
    /// let seen = engine.describe("order-42").await?;
    /// // Retrying this call (say, after a timeout) resets `seen.run` once.
    /// let again = engine
    ///     .reset_run("order-42", seen.run, "charge-card", "card processor fixed")
    ///     .await?;
    /// assert_ne!(again.run, seen.run);
    /// # Ok(()) }
    /// ```
    pub async fn reset_run(
        &self,
        id: &str,
        run: RunId,
        step: &str,
        reason: &str,
    ) -> Result<RunRef> {
        self.request(id, |reply| Input::Reset {
            id: id.to_string(),
            run: Some(run),
            step: step.to_string(),
            reason: reason.to_string(),
            reply,
        })
        .await
    }

    /// A page of runs, newest start first, that pass `filter`; its
    /// [`Page::next`] leads to the next page. Parked runs are not loaded:
    /// the shard knows their status, and reads a parked run's `Start`
    /// from its frame only to show its type (or filter by it). Runs started
    /// after the first page was taken are not shown on later pages.
    ///
    /// A filter with search-attribute conditions walks each shard's
    /// attribute index (built the first time after an open: see
    /// [`crate::attrs`]) instead of every run; a malformed condition is
    /// [`Error::InvalidAttribute`] before any shard is asked.
    ///
    /// ```
    /// # async fn demo(engine: fusee::Engine) -> fusee::Result<()> {
    /// use fusee::{ListFilter, StatusFilter};
    /// let mut filter = ListFilter::new().status(StatusFilter::Running);
    /// loop {
    ///     let page = engine.list(filter.clone()).await?;
    ///     for run in &page.runs {
    ///         println!("{} {} started {}", run.id, run.workflow, run.started_ms);
    ///     }
    ///     match page.next {
    ///         Some(cursor) => filter = filter.after(cursor),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, filter: ListFilter) -> Result<Page> {
        filter.check()?;
        let shards = self.shard_count();
        let below = match &filter.after {
            Some(c) if c.below.len() == shards as usize => c.below.clone(),
            Some(c) => {
                return Err(Error::BadCursor {
                    cursor: Error::given(&c.to_string()),
                    reason: format!(
                        "it is for {} shard(s); this engine has {shards}",
                        c.below.len()
                    ),
                });
            }
            None => vec![RunId::MAX; shards as usize],
        };
        let mut pages = Vec::with_capacity(shards as usize);
        for shard in 0..shards {
            // Zero: that shard was walked to its end on an earlier page.
            if below[shard as usize] == 0 {
                pages.push(ShardPage::default());
                continue;
            }
            let page = self
                .request_shard(shard, |reply| Input::List {
                    filter: filter.clone(),
                    below: below[shard as usize],
                    reply,
                })
                .await?;
            pages.push(page);
        }
        Ok(merge(pages, below, filter.limit))
    }

    /// How many running workflows pass `filter` as the bulk actions
    /// ([`cancel_all`](Self::cancel_all), [`terminate_all`](Self::terminate_all))
    /// select them: what one of them would ask now.
    pub async fn count_running(&self, filter: ListFilter) -> Result<u64> {
        self.for_each_running(filter, |_, _| async { Ok(()) }).await
    }

    /// Asks every running workflow that passes `filter` (its status part
    /// is ignored) to cancel with `reason`; the count asked. Runs that
    /// finish meanwhile are skipped. Without a workflow type in `filter`,
    /// the engine's own schedules, queues, limits and debounces
    /// (`fusee.*` types) are left alone: name their type to act on them.
    pub async fn cancel_all(&self, filter: ListFilter, reason: &str) -> Result<u64> {
        self.cancel_all_as(filter, reason, None).await
    }

    /// Cancels every running workflow that passes `filter` (its status
    /// part is ignored) as [`cancel_with_grace`](Self::cancel_with_grace)
    /// does: each run asked is terminated with `reason` if it has not
    /// ended `grace` after its own cancel. The count asked.
    pub async fn cancel_all_with_grace(
        &self,
        filter: ListFilter,
        reason: &str,
        grace: std::time::Duration,
    ) -> Result<u64> {
        self.cancel_all_as(filter, reason, Some(grace)).await
    }

    /// [`cancel_all`](Self::cancel_all), with a grace if `grace` is some.
    async fn cancel_all_as(
        &self,
        filter: ListFilter,
        reason: &str,
        grace: Option<std::time::Duration>,
    ) -> Result<u64> {
        self.for_each_running(filter, |engine, id| {
            let reason = reason.to_string();
            async move { engine.cancel_as(&id, &reason, grace).await }
        })
        .await
    }

    /// Terminates every running workflow that passes `filter` (its status
    /// part is ignored) with `reason`; the count terminated. Without a
    /// workflow type in `filter`, the engine's own `fusee.*` runs are left
    /// alone, as for [`cancel_all`](Self::cancel_all).
    pub async fn terminate_all(&self, filter: ListFilter, reason: &str) -> Result<u64> {
        self.for_each_running(filter, |engine, id| {
            let reason = reason.to_string();
            async move { engine.terminate(&id, &reason).await }
        })
        .await
    }

    async fn for_each_running<F, Fut>(&self, filter: ListFilter, act: F) -> Result<u64>
    where
        F: Fn(Engine, String) -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        // Terminating every run must not take the schedules and queues
        // with it: they are the engine's, and go only when named.
        let engine_runs_too = filter.names_workflow();
        let mut filter = filter.status(StatusFilter::Running);
        let mut count = 0;
        loop {
            let page = self.list(filter.clone()).await?;
            for run in page.runs {
                if !engine_runs_too && crate::flow::is_engine_type(&run.workflow) {
                    continue;
                }
                match act(self.clone(), run.id).await {
                    Ok(()) => count += 1,
                    // Finished since the page was read.
                    Err(Error::Finished { .. } | Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            match page.next {
                Some(cursor) => filter = filter.after(cursor),
                None => return Ok(count),
            }
        }
    }
}

/// Merges the shards' pages newest start first, taking at most `limit`
/// runs, and works out where each shard goes on. Runs are taken from the
/// front of each shard's page only, so what a shard did not hand out stays
/// below its cursor.
fn merge(pages: Vec<ShardPage>, below: Vec<RunId>, limit: usize) -> Page {
    let mut heads: Vec<std::iter::Peekable<std::vec::IntoIter<RunSummary>>> =
        Vec::with_capacity(pages.len());
    let mut resume = Vec::with_capacity(pages.len());
    for page in pages {
        resume.push(page.resume);
        heads.push(page.runs.into_iter().peekable());
    }
    let mut runs = Vec::with_capacity(limit);
    let mut next_below = below;
    while runs.len() < limit {
        let newest = heads
            .iter_mut()
            .enumerate()
            .filter_map(|(i, h)| h.peek().map(|r| (i, r.started_ms)))
            .max_by_key(|&(i, started)| (started, std::cmp::Reverse(i)));
        let Some((i, _)) = newest else { break };
        if let Some(run) = heads[i].next() {
            next_below[i] = run.run;
            runs.push(run);
        }
    }
    // A shard whose page was taken whole goes on where it stopped looking
    // (0: it has nothing more).
    for (i, head) in heads.iter_mut().enumerate() {
        if head.peek().is_none() {
            next_below[i] = resume[i].unwrap_or(0);
        }
    }
    let more = next_below.iter().any(|&b| b != 0);
    Page {
        runs,
        next: more.then_some(Cursor { below: next_below }),
    }
}
