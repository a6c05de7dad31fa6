//! Sending messages to other shards, and recording the messages they send
//! here, exactly once (see [`super::messages`]).

use fusee_core::record::{Payload, Record, RecordBuf, Status, iter_canonical, policy};
use fusee_core::shard::Output;

use rustc_hash::FxHashMap;

use super::messages::{Message, Origin, Outbox};
use super::waiters::Waiting;
use super::{Input, ShardLoop};
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

/// A shard's mail: the messages it sent and are not acknowledged, what it
/// hands the driver for other shards, and the acknowledgements it owes.
///
/// Invariant: a message stays in the outbox (and in every checkpoint) from
/// `send` until its target's acknowledgement, and a message received is
/// acknowledged only once its record (and a reply it waits on) is durable,
/// so a crash on either side makes the sender send again and the target
/// recognise the repeat. Checked by `fusee/tests/sim.rs` `seeds_pass`
/// (messages reordered, dropped by crashes) and
/// `fusee/tests/crash_everywhere_family.rs`
/// `every_crash_point_of_children_messages_and_handovers_ends_the_same`.
pub(super) struct Mail {
    /// This shard, and how many there are (a message's target).
    shard: u32,
    shards: u32,
    /// Messages sent and not acknowledged.
    outbox: Outbox,
    /// Inputs for shards produced since the last run.
    outgoing: Vec<(u32, Input)>,
    /// Messages received whose acknowledgement waits for the
    /// acknowledgement of a message this shard sent in reply (a child start
    /// refused with a result to the parent): sent id -> where it came from.
    relayed: FxHashMap<u64, Origin>,
    /// Inbox rows acknowledged since the last run (see
    /// [`super::Effects::inbox_done`]).
    inbox_done: Vec<u64>,
}

impl Mail {
    /// Shard `shard`'s mail, of `shards`, with the outbox it recovered.
    pub(super) fn new(shard: u32, shards: u32, outbox: Outbox) -> Self {
        Self {
            shard,
            shards,
            outbox,
            outgoing: Vec::new(),
            relayed: FxHashMap::default(),
            inbox_done: Vec::new(),
        }
    }

    /// Sends `message` (kept in the outbox until acknowledged): its id.
    pub(super) fn send(&mut self, message: Message) -> u64 {
        let id = self.outbox.add(message.clone());
        self.route(id, message);
        id
    }

    /// Sends `message` in reply to one received from `from`, which is
    /// acknowledged only once this one is.
    pub(super) fn relay(&mut self, message: Message, from: Origin) {
        let sent = self.outbox.add(message.clone());
        self.relayed.insert(sent, from);
        self.route(sent, message);
    }

    /// Hands message `id` to the driver for its target shard.
    pub(super) fn route(&mut self, id: u64, message: Message) {
        let target = message.target_shard(self.shards);
        self.outgoing.push((
            target,
            Input::Message {
                from: self.shard,
                id,
                message,
            },
        ));
    }

    /// Routes again every message in the outbox for a shard that `came`
    /// (by shard number).
    pub(super) fn route_again(&mut self, came: &[bool]) {
        let shards = self.shards;
        let again: Vec<(u64, Message)> = self
            .outbox
            .pending()
            .filter(|(_, m)| came.get(m.target_shard(shards) as usize) == Some(&true))
            .map(|(id, m)| (id, m.clone()))
            .collect();
        for (id, message) in again {
            self.route(id, message);
        }
    }

    /// Routes every message in the outbox again (after a recovery: each
    /// message not acknowledged before the crash goes out again).
    pub(super) fn route_pending(&mut self) {
        let pending: Vec<(u64, Message)> = self
            .outbox
            .pending()
            .map(|(id, m)| (id, m.clone()))
            .collect();
        for (id, message) in pending {
            self.route(id, message);
        }
    }

    /// The target of message `id` recorded it: the origin of a message
    /// received here that waited for it (its reply), to acknowledge now.
    pub(super) fn delivered(&mut self, id: u64) -> Option<Origin> {
        self.outbox.acknowledged(id);
        self.relayed.remove(&id)
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

    /// The inputs for shards made since the last call.
    #[inline]
    pub(super) fn take_outgoing(&mut self) -> Vec<(u32, Input)> {
        std::mem::take(&mut self.outgoing)
    }

    /// The inbox rows acknowledged since the last call.
    #[inline]
    pub(super) fn take_inbox_done(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.inbox_done)
    }

    /// How many messages wait for an acknowledgement.
    pub(super) fn unacknowledged(&self) -> usize {
        self.outbox.len()
    }

    /// The outbox's bytes, for a checkpoint.
    pub(super) fn encode_outbox(&self) -> Vec<u8> {
        self.outbox.encode()
    }
}

impl ShardLoop {
    /// Sends `message` (kept in the outbox until acknowledged).
    pub(super) fn send(&mut self, message: Message) {
        self.mail.send(message);
    }

    /// The target of message `id` recorded it (or, in another process,
    /// its inbox row is durable).
    pub(super) fn delivered(&mut self, id: u64) {
        // A message received here waited for this one (its reply).
        if let Some(origin) = self.mail.delivered(id) {
            self.mail.acknowledge(origin);
        }
    }

    /// The inputs for shards made since the last [`run`](Self::run): the
    /// driver's, when it routes messages again between runs.
    pub(crate) fn take_outgoing(&mut self) -> Vec<(u32, Input)> {
        self.mail.take_outgoing()
    }

    /// Routes again every message for a shard that `came` (started running
    /// in this process since the driver last looked): the driver's call.
    pub(crate) fn route_again(&mut self, came: &[bool]) {
        self.mail.route_again(came);
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
                grace_ms,
                ..
            } => {
                // A child whose start has not arrived is not closed here:
                // its start, when it comes, starts it (rare; the parent
                // close policy acts on children it knows started).
                let key = cancel_key(dedup);
                if let Ok(run) = self.running(&target, "close", 0, now_ms) {
                    // Sent again after a crash: recorded already. The
                    // acknowledgement below still goes.
                    let repeat = match self.has_cancel(run, key.as_ref()) {
                        Ok(repeat) => repeat,
                        Err(e) => return self.fail(e),
                    };
                    // Recorded with its grace, if any, in one record: a
                    // repeat has nothing to add. (A cancel an older build
                    // recorded, whose separate grace record a crash cut,
                    // stays a plain cancel.)
                    if repeat {
                        return self.ack_message(from);
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
                        // A parent's grace, cascaded: in the cancel, as a
                        // client's cancel with a grace records it.
                        let grace = grace_ms.map(|g| {
                            let why = String::from_utf8_lossy(&reason).into_owned();
                            self.grace_for(run, now_ms, g, &why)
                        });
                        RecordBuf::Cancel {
                            run,
                            reason: reason.clone(),
                            by: key.map(|k| Payload::from(k.as_slice())),
                            grace,
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
                        // The newest code registered here, as a client's
                        // start takes (0 while the type is not).
                        let version = self.registry.newest(&wtype).unwrap_or(0);
                        self.append(&RecordBuf::Start {
                            run,
                            id: child,
                            wtype,
                            version,
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
                    self.mail.relay(result, from);
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
        let token = self.waiters.wait(Waiting::Message { from });
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
            return Some(l.parent());
        }
        match self.parked_start(run) {
            Ok(Some(RecordBuf::Start { parent, .. })) => Some(parent),
            _ => None,
        }
    }
}
