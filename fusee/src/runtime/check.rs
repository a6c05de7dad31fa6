//! The replay check, on the shard: every unfinished run (loaded or
//! parked) replayed against the code registered for its type through the
//! one code host ([`host::replay_encoded`]): no step runs, nothing is
//! recorded for a run that replays. A run whose code departs from its
//! journal is held: a pausing `Attributes` record naming why (the format
//! is `runtime/operator`'s), after which its code does not start until an
//! operator resumes or resets it.
//!
//! A page of the check visits runs newest first below a run number, like
//! a page of the list, and replays at most [`CHECK_REPLAYS`] of them, so
//! a shard with a million parked runs still takes its other inputs
//! between pages.

use fusee_core::record::{Payload, Record, RecordBuf, RunId, iter_canonical};
use fusee_storage::StorageError;

use super::ShardLoop;
use super::host::{self, ReplayFault};
use super::operator::held_payload;
use crate::client::{CheckPage, Divergence};
use crate::ctx::Registry;
use crate::error::Error;

/// Runs replayed per page of the check.
const CHECK_REPLAYS: usize = 1024;

/// Runs visited per page (finished ones cost a table lookup).
const CHECK_VISITS: usize = 16_384;

/// What replaying one unfinished run's journal found.
pub(crate) enum Verdict {
    /// The code makes the journal's calls in the journal's order.
    Replays,
    /// The code departs from the journal (`held` is false here).
    Diverged(Box<Divergence>),
    /// No code is registered for the run's type at its version: (ID,
    /// type, version).
    NoCode(String, String, u32),
}

/// Counts `verdict` in `page`: a run replayed is checked, one without
/// code is listed as not checked; a divergence is handed back for the
/// caller to hold (on a shard) or not (offline) before it lists it.
pub(crate) fn note(page: &mut CheckPage, verdict: Verdict) -> Option<Box<Divergence>> {
    match verdict {
        Verdict::Replays => {
            page.checked += 1;
            None
        }
        Verdict::NoCode(id, wtype, version) => {
            page.no_code.push((id, wtype, version));
            None
        }
        Verdict::Diverged(d) => {
            page.checked += 1;
            Some(d)
        }
    }
}

/// Replays run `run`'s canonical journal (`journal`, its `Start` first)
/// with `registry`'s code for its type, and judges it. A journal that
/// does not replay as a journal at all (damage the shard's own checks
/// would have caught) is a divergence too: its code cannot go on either.
pub(crate) fn judge(registry: &Registry, shard: u32, run: RunId, journal: &[u8]) -> Verdict {
    let (id, workflow, version) = match iter_canonical(journal).next() {
        Some(Ok((
            Record::Start {
                id, wtype, version, ..
            },
            _,
        ))) => (id.to_string(), wtype.to_string(), version),
        _ => (String::new(), String::new(), 0),
    };
    let departure = match host::replay_encoded(registry, journal) {
        Ok(_) => return Verdict::Replays,
        Err(ReplayFault::NoCode { wtype, version, .. }) => {
            return Verdict::NoCode(id, wtype, version);
        }
        Err(ReplayFault::Diverged(d)) => d,
        Err(ReplayFault::Malformed(why)) => host::Departure {
            message: format!("its journal does not replay: {why}"),
            error: None,
        },
    };
    let (operation, held_there, code_did) = match &departure.error {
        Some(e) => (Some(e.seq), e.journal.to_string(), e.code.to_string()),
        None => (None, String::new(), String::new()),
    };
    Verdict::Diverged(Box::new(Divergence {
        id,
        workflow,
        version,
        shard,
        run,
        operation,
        journal: held_there,
        code: code_did,
        message: departure.message,
        held: false,
    }))
}

impl ShardLoop {
    /// One page of the check (module docs): unfinished runs below run
    /// `below`, newest first, each replayed and judged; those that depart
    /// are held. The caller is answered once the holds are durable.
    pub(super) fn check_page(&mut self, below: RunId, now_ms: u64) -> Result<CheckPage, Error> {
        let shard = self.shard;
        let storage = |error: StorageError| Error::Storage { shard, error };
        let mut page = CheckPage::default();
        let mut cursor = self.core.newest_first_below(below);
        let (mut visited, mut replayed) = (0usize, 0usize);
        let mut last = below;
        loop {
            let batch = cursor.next_batch(&self.core, 256);
            if batch.is_empty() {
                return Ok(page);
            }
            for run in batch {
                if visited == CHECK_VISITS || replayed == CHECK_REPLAYS {
                    page.resume = Some(last);
                    return Ok(page);
                }
                visited += 1;
                last = run;
                let journal = if let Some(l) = self.core.get(run) {
                    if l.is_done() {
                        continue;
                    }
                    if self.is_held(run) {
                        page.already_held += 1;
                        continue;
                    }
                    self.run_code_journal(run).map_err(storage)?
                } else if let Some(p) = self.core.parked(run) {
                    if p.done().is_some() {
                        continue;
                    }
                    let blob = p.blob();
                    // Code takes no chunk: those set apart stay unread.
                    self.read_frame_apart(blob).map_err(storage)?.journal
                } else {
                    continue;
                };
                replayed += 1;
                let verdict = judge(&self.registry, shard, run, &journal);
                if let Some(mut d) = note(&mut page, verdict) {
                    self.hold(run, &d.message, now_ms).map_err(storage)?;
                    d.held = true;
                    page.divergences.push(*d);
                }
            }
        }
    }

    /// Holds run `run` (loaded first if parked): a pausing `Attributes`
    /// record naming `why`, and its code, if running, dropped (it departs
    /// from its journal: it would only stop there).
    fn hold(&mut self, run: RunId, why: &str, now_ms: u64) -> Result<(), StorageError> {
        if self.core.get(run).is_none() {
            self.load(run, now_ms)?;
        }
        let why = format!("replay check: {why}");
        self.append(&RecordBuf::Attributes {
            run,
            payload: Payload::from(held_payload(&why).as_slice()),
        });
        self.live.forget(run);
        tracing::warn!(shard = self.shard, run, reason = %why, "run held by the replay check");
        Ok(())
    }
}

impl ShardLoop {
    /// Takes `Input::Check`: the page, answered (as JSON, through the
    /// answer path queries use) once every record so far is durable, the
    /// holds it made included.
    pub(super) fn take_check(&mut self, below: RunId, reply: super::Reply<Vec<u8>>, now_ms: u64) {
        let page = self.check_page(below, now_ms).and_then(|page| {
            serde_json::to_vec(&page).map_err(|e| Error::codec("replay check page", e))
        });
        match page {
            Ok(bytes) => {
                let token = self
                    .waiters
                    .wait(super::waiters::Waiting::Answer(reply, bytes));
                let lsn = fusee_storage::LogStore::last_lsn(&self.log);
                self.core
                    .add_output(lsn, fusee_core::shard::Output::Ack(token));
                self.release_now_if_durable();
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }
}
