//! [`Waiters`]: the clients a shard owes an answer, each given once the
//! records it rests on are durable (the output-commit rule): callers
//! waiting on a token the core releases (`Output::Ack`), on a run's result,
//! or on an update's.
//!
//! Invariant: every caller here is answered exactly once: by the output
//! that releases it, by a refusal, or, when the storage fails, with the
//! failure (`refuse_all`); nothing is answered before the records it
//! rests on are durable. Checked by `fusee/tests/output_commit.rs`
//! `nothing_leaves_before_its_records_are_durable` and `fusee/tests/sim.rs`
//! `every_sabotage_is_caught` (`EarlyReply`).

use fusee_core::record::{Name, RunId};
use rustc_hash::FxHashMap;

use super::{Reply, messages};
use crate::client::{LiveJournal, RunRef, RunResult};
use crate::error::Error;

/// A client waiting for an output.
pub(super) enum Waiting {
    Started(Reply<RunRef>, RunRef),
    Done(Reply<()>),
    /// A start refused on the strength of records not yet durable.
    Refused(Reply<RunRef>, Error),
    /// A signal or cancel refused on the strength of records not yet
    /// durable (the run's `Done`).
    RefusedDone(Reply<()>, Error),
    /// A message from another shard, recorded (or found a duplicate):
    /// acknowledged once durable.
    Message {
        from: messages::Origin,
    },
    /// A query's answer, given once the state it read is durable.
    Answer(Reply<Vec<u8>>, Vec<u8>),
    /// A keyed update asked again after its handler returned: the first
    /// call's result, given once its `UpdateDone` is durable.
    Updated(Reply<RunResult>, RunResult),
    /// A run's journal, given once the records it holds are durable.
    Journal(Reply<LiveJournal>, LiveJournal),
    /// A result asked of a run whose code stopped: the error, given once
    /// the records it was judged on are durable.
    Stopped(Reply<RunResult>, Error),
}

/// The clients waiting for an answer.
#[derive(Default)]
pub(super) struct Waiters {
    next_token: u64,
    /// By the token of the `Output::Ack` that releases them.
    waiting: FxHashMap<u64, Waiting>,
    /// Callers of a run's result, by run.
    results: FxHashMap<RunId, Vec<Reply<RunResult>>>,
    /// Callers of updates not answered yet, by run and update ID (a keyed
    /// update asked again while its handler runs has more than one).
    update_waiters: FxHashMap<(RunId, Name), Vec<Reply<RunResult>>>,
}

impl Waiters {
    /// `w` waits for the output of the token returned (the caller queues
    /// `Output::Ack(token)` behind the records the answer rests on).
    #[inline]
    pub(super) fn wait(&mut self, w: Waiting) -> u64 {
        self.next_token += 1;
        self.waiting.insert(self.next_token, w);
        self.next_token
    }

    /// Who waits for `token`'s output, if anyone.
    #[inline]
    pub(super) fn take(&mut self, token: u64) -> Option<Waiting> {
        self.waiting.remove(&token)
    }

    /// `reply` waits for `run`'s result.
    pub(super) fn wait_result(&mut self, run: RunId, reply: Reply<RunResult>) {
        self.results.entry(run).or_default().push(reply);
    }

    /// The callers waiting for `run`'s result, no longer waiting.
    pub(super) fn take_results(&mut self, run: RunId) -> Vec<Reply<RunResult>> {
        self.results.remove(&run).unwrap_or_default()
    }

    /// `callers` wait for `run`'s result (a handover's next run).
    pub(super) fn hand_results(&mut self, run: RunId, callers: Vec<Reply<RunResult>>) {
        self.results.entry(run).or_default().extend(callers);
    }

    /// `reply` waits for update `update` of `run`.
    pub(super) fn wait_update(&mut self, run: RunId, update: Name, reply: Reply<RunResult>) {
        self.update_waiters
            .entry((run, update))
            .or_default()
            .push(reply);
    }

    /// The callers of update `update` of `run`, no longer waiting.
    pub(super) fn take_update(&mut self, run: RunId, update: Name) -> Vec<Reply<RunResult>> {
        self.update_waiters
            .remove(&(run, update))
            .unwrap_or_default()
    }

    /// Whether a caller waits on an update of `run`.
    pub(super) fn has_updates(&self, run: RunId) -> bool {
        self.update_waiters.keys().any(|(r, _)| *r == run)
    }

    /// The callers of `run`'s updates that `take` picks, no longer waiting.
    pub(super) fn take_updates(
        &mut self,
        run: RunId,
        mut take: impl FnMut(&Name) -> bool,
    ) -> Vec<Reply<RunResult>> {
        let mut out = Vec::new();
        self.update_waiters.retain(|(r, update), callers| {
            if *r != run || !take(update) {
                return true;
            }
            out.append(callers);
            false
        });
        out
    }

    /// Answers everyone with `err(maybe_recorded)` (the storage failed):
    /// `maybe_recorded` when what the caller asked for was recorded and
    /// waits to be durable, so the failed flush may have made it so.
    pub(super) fn refuse_all(&mut self, err: impl Fn(bool) -> Error) {
        for (_, w) in self.waiting.drain() {
            match w {
                Waiting::Started(r, _) => {
                    let _ = r.send(Err(err(true)));
                }
                Waiting::Refused(r, _) => {
                    let _ = r.send(Err(err(false)));
                }
                Waiting::Done(r) => {
                    let _ = r.send(Err(err(true)));
                }
                Waiting::RefusedDone(r, _) => {
                    let _ = r.send(Err(err(false)));
                }
                // Unacknowledged, the sender sends it again after a restart.
                Waiting::Message { .. } => {}
                Waiting::Answer(r, _) => {
                    let _ = r.send(Err(err(false)));
                }
                Waiting::Updated(r, _) => {
                    let _ = r.send(Err(err(true)));
                }
                Waiting::Stopped(r, _) => {
                    let _ = r.send(Err(err(false)));
                }
                Waiting::Journal(r, _) => {
                    let _ = r.send(Err(err(false)));
                }
            }
        }
        for (_, rs) in self.results.drain() {
            for r in rs {
                let _ = r.send(Err(err(false)));
            }
        }
        // An update accepted and waiting for its handler: recorded.
        for (_, rs) in self.update_waiters.drain() {
            for r in rs {
                let _ = r.send(Err(err(true)));
            }
        }
    }
}
