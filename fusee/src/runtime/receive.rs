//! Sending messages to other shards, and recording the messages they send
//! here, exactly once (see [`super::messages`]).

use fusee_core::record::{Payload, Record, RecordBuf, Status, iter_canonical, policy};
use fusee_core::shard::Output;

use super::messages::{Message, Origin};
use super::{Input, ShardLoop, Waiting};
use crate::workflow::{CODEC_JSON, Failure, encode};

/// How long a cancel's key is in its `Cancel` record's `by`.
const CANCEL_KEY_LEN: usize = 14;

/// A cancel's key as its `Cancel` record's `by` holds it: `dedup:` and the
/// close's 8-byte dedup key, little-endian. `None` for a close without one.
fn cancel_key(dedup: u64) -> Option<[u8; CANCEL_KEY_LEN]> {
    if dedup == 0 {
        return None;
    }
    let mut key = [0u8; CANCEL_KEY_LEN];
    key[..6].copy_from_slice(b"dedup:");
    key[6..].copy_from_slice(&dedup.to_le_bytes());
    Some(key)
}

impl ShardLoop {
    /// Sends `message` (kept in the outbox until acknowledged).
    pub(super) fn send(&mut self, message: Message) {
        let id = self.outbox.add(message.clone());
        self.route(id, message);
    }

    /// Hands message `id` to the driver for its target shard.
    pub(super) fn route(&mut self, id: u64, message: Message) {
        let target = message.target_shard(self.config.shards);
        self.outgoing.push((
            target,
            Input::Message {
                from: self.shard,
                id,
                message,
            },
        ));
    }

    /// The target of message `id` recorded it (or, in another process,
    /// its inbox row is durable).
    pub(super) fn delivered(&mut self, id: u64) {
        self.outbox.acknowledged(id);
        // A message received here waited for this one (its reply).
        if let Some(origin) = self.relayed.remove(&id) {
            self.acknowledge(origin);
        }
    }

    /// Acknowledges a message received from `origin`, whose record is
    /// durable: to its sender shard in this process, or by deleting its
    /// inbox row (the driver's I/O).
    pub(super) fn acknowledge(&mut self, origin: Origin) {
        match origin {
            Origin::Shard { shard, id } => self.outgoing.push((shard, Input::Delivered { id })),
            Origin::Inbox { row } => self.inbox_done.push(row),
        }
    }

    /// Records a message from `from`, unless it is a duplicate, and
    /// acknowledges it once what it rests on is durable.
    pub(super) fn receive(&mut self, from: Origin, message: Message, now_ms: u64) {
        match message {
            Message::Signal {
                target,
                name: signal,
                payload,
                dedup,
            } => {
                if let Ok(run) = self.running(&target, "signal", 0, now_ms)
                    && !self.core.seen_signal(run, dedup)
                {
                    self.append(&RecordBuf::Signal {
                        run,
                        name: signal,
                        dedup,
                        payload,
                        by: None,
                    });
                }
            }
            Message::Close {
                target,
                terminate,
                reason,
                dedup,
                ..
            } => {
                // A child whose start has not arrived is not closed here:
                // its start, when it comes, starts it (rare; the parent
                // close policy acts on children it knows started).
                let key = cancel_key(dedup);
                if let Ok(run) = self.running(&target, "close", 0, now_ms) {
                    match self.has_cancel(run, key.as_ref()) {
                        Ok(false) => {}
                        // Sent again after a crash: recorded already. The
                        // acknowledgement below still goes.
                        Ok(true) => return self.ack_message(from),
                        Err(e) => return self.fail(e),
                    }
                    let rec = if terminate {
                        let failure = Failure::with_kind(
                            "terminated",
                            String::from_utf8_lossy(&reason).into_owned(),
                        );
                        RecordBuf::Done {
                            run,
                            status: Status::Terminated,
                            finished_ms: now_ms,
                            payload: Payload::from(encode(&failure).unwrap_or_default().as_slice()),
                            by: Some(Payload::from(&b"parent"[..])),
                        }
                    } else {
                        RecordBuf::Cancel {
                            run,
                            reason,
                            by: key.map(|k| Payload::from(k.as_slice())),
                        }
                    };
                    self.append(&rec);
                }
            }
            Message::ChildStart {
                parent,
                wtype,
                id: child,
                flags,
                deadline_ms,
                input,
                trace,
            } => {
                let refusal = match self.lookup(&child) {
                    Ok(Some((run, _))) => {
                        let same = self.start_of(run).is_some_and(|p| p == Some(parent));
                        (!same).then(|| "a workflow with this ID already exists".to_string())
                    }
                    // The parent's code checked the type when it called
                    // the child; a type not registered here yet (a restart,
                    // before `register`) starts and waits for its code.
                    Ok(None) => {
                        let run = self.core.allocate_run();
                        self.append(&RecordBuf::Start {
                            run,
                            id: child,
                            wtype,
                            version: 0,
                            codec: CODEC_JSON,
                            started_ms: now_ms,
                            deadline_ms,
                            parent: Some(parent),
                            policy: (flags & !policy::ID_MASK) | policy::ID_REJECT_DUPLICATE,
                            from: None,
                            copies: 0,
                            update: None,
                            input,
                            meta: trace.map(crate::trace::TraceParent::to_meta),
                        });
                        None
                    }
                    Err(e) => Some(e.to_string()),
                };
                if let Some(why) = refusal {
                    // The parent learns it through a result; this start is
                    // acknowledged only once that result is, so a crash
                    // meanwhile makes the parent send the start again.
                    let failure = Failure::with_kind("child-start-failed", why);
                    let result = Message::ChildResult {
                        parent,
                        status: Status::Failed,
                        payload: Payload::from(encode(&failure).unwrap_or_default().as_slice()),
                    };
                    let sent = self.outbox.add(result.clone());
                    self.relayed.insert(sent, from);
                    self.route(sent, result);
                    return;
                }
            }
            Message::ChildResult {
                parent,
                status,
                payload,
            } => {
                let waiting = match self.core.parked(parent.run) {
                    Some(p) if p.done().is_none() => {
                        matches!(self.load(parent.run, now_ms), Ok(true))
                    }
                    _ => true,
                } && self
                    .core
                    .get(parent.run)
                    .is_some_and(|l| l.pending_children().contains(&parent.seq));
                if waiting {
                    self.append(&RecordBuf::ChildDone {
                        run: parent.run,
                        seq: parent.seq,
                        status,
                        payload,
                    });
                }
            }
        }
        self.ack_message(from);
    }

    /// Acknowledges a message from `from` once everything so far is
    /// durable: the record just appended, or the state a duplicate was
    /// recognised by.
    fn ack_message(&mut self, from: Origin) {
        let token = self.token();
        self.waiting.insert(token, Waiting::Message { from });
        let lsn = fusee_storage::LogStore::last_lsn(&self.log);
        self.core.add_output(lsn, Output::Ack(token));
        self.release_now_if_durable();
    }

    /// Whether run `run`'s journal holds a `Cancel` with key `key` (a close
    /// sent again after a crash). Closes without a key are never
    /// duplicates. Reads the run's stored frames: closes are rare.
    fn has_cancel(
        &mut self,
        run: u64,
        key: Option<&[u8; CANCEL_KEY_LEN]>,
    ) -> Result<bool, fusee_storage::StorageError> {
        let Some(key) = key else {
            return Ok(false);
        };
        let journal = self.run_journal(run)?;
        Ok(iter_canonical(&journal)
            .any(|r| matches!(r, Ok((Record::Cancel { by: Some(by), .. }, _)) if by == key)))
    }

    /// The parent named by the `Start` of run `run` (loaded or parked),
    /// `None` if the run is unknown.
    fn start_of(&mut self, run: u64) -> Option<Option<fusee_core::record::ParentRef>> {
        if let Some(l) = self.core.get(run) {
            return Some(l.parent);
        }
        match self.parked_start(run) {
            Ok(Some(RecordBuf::Start { parent, .. })) => Some(parent),
            _ => None,
        }
    }
}
