//! Messages between shards: the outputs of one shard's core that a run on
//! another shard (or the same one) must record: a child to start, a
//! child's result for its parent, a signal, a close (cancel or
//! terminate).
//!
//! # Exactly once into the target's journal
//!
//! A message leaves only once the record that produced it is durable (it
//! is a core output, released by `ShardCore::release`). The sender keeps
//! it in its **outbox** until the target acknowledges it, and the target
//! acknowledges only once what it recorded (or the state on which it
//! decided to record nothing) is durable. The outbox goes into every
//! checkpoint; at recovery the sender sends its outbox again, and the log
//! replayed after the checkpoint regenerates the messages of its records.
//! So a message may arrive twice, never zero times, and the target
//! deduplicates: a signal by its dedup key
//! ([`send_dedup`](fusee_core::shard::send_dedup)), a child start by the
//! child's ID and parent, a child's result by the parent's pending
//! children, a cancel by its key (carried in its `Cancel` record's `by`).
//!
//! # Between processes
//!
//! A message for a shard another process owns (PostgreSQL under leases)
//! goes through the target's inbox table instead of a channel: the
//! sender's driver posts it ([`Message::to_bytes`]) and counts it
//! acknowledged once the row is durable (the row now carries the
//! obligation, as the outbox did); the target's driver reads the row and
//! hands it to the loop ([`Origin::Inbox`]), and the loop's
//! acknowledgement deletes the row, at the moment it would send
//! `Delivered` to a shard of its own process. A crash of the sender
//! between the row and the acknowledgement posts the message again as
//! another row; a crash of the target between its record and the delete
//! reads the row again. Both are duplicates, deduplicated as above.
//!
//! # Outbox encoding (inside the checkpoint's `outbox` bytes)
//!
//! A varint count, then per message its varint id and a tag byte:
//!
//! | tag | message | fields after the tag |
//! |---|---|---|
//! | 1 | child start | parent shard u32, parent run varint, parent seq u32, wtype str, id str, flags u8, deadline_ms varint, input bytes |
//! | 6 | child start with a trace context | as tag 1, then the child's `traceparent` str (W3C text, see [`crate::trace`]) |
//! | 2 | child result | parent shard u32, parent run varint, parent seq u32, status u8, payload bytes |
//! | 3 | signal | target str, name str, payload bytes, dedup u64 |
//! | 4 | close (older outboxes; read only, its key is 0) | target str, wtype str, has parent u8 (then shard u32, run varint, seq u32), terminate u8, reason bytes |
//! | 5 | close | as tag 4, then dedup u64 |
//! | 7 | close with a grace (a cancel cascaded from a parent cancelled with one) | as tag 5, then grace_ms varint |
//!
//! (`str` and `bytes` are varint-length-prefixed; integers little-endian.)

use std::collections::BTreeMap;

use fusee_core::record::{Name, ParentRef, Payload, Status};
use fusee_core::shard::{Output, ShardCore, shard_of};
use fusee_core::wire::{
    DecodeResult, Reader, put_bytes, put_str, put_u8, put_u32, put_u64, put_varint,
};

use crate::trace::{RunTrace, TraceParent};

/// A message between shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Message {
    /// Start a child run.
    ChildStart {
        parent: ParentRef,
        wtype: Name,
        id: Name,
        flags: u8,
        deadline_ms: u64,
        input: Payload,
        /// The trace context the child records in its `Start`: the
        /// parent's trace, the parent's child span as the parent.
        trace: Option<TraceParent>,
    },
    /// A child's result for its parent.
    ChildResult {
        parent: ParentRef,
        status: Status,
        payload: Payload,
    },
    /// A signal to a workflow.
    Signal {
        target: Name,
        name: Name,
        payload: Payload,
        dedup: u64,
    },
    /// Cancel or terminate a workflow.
    Close {
        target: Name,
        wtype: Name,
        parent: Option<ParentRef>,
        terminate: bool,
        reason: Payload,
        /// The close's stable key (0: none, from an older outbox).
        dedup: u64,
        /// A cancel's grace (ms): the parent's, cascaded (see
        /// `super::grace`); none for a terminate.
        grace_ms: Option<u64>,
    },
}

impl Message {
    /// The message an output of `core` is, if it is one.
    pub(crate) fn of(output: Output, core: &ShardCore) -> Option<Message> {
        Some(match output {
            Output::ChildStart {
                parent,
                wtype,
                id,
                flags,
                deadline_ms,
                input,
            } => Message::ChildStart {
                parent,
                wtype,
                id,
                flags,
                deadline_ms,
                input,
                // The parent is loaded: it has just applied its `Child`
                // (or replayed it at recovery).
                trace: core
                    .get(parent.run)
                    .map(|l| RunTrace::of(parent.shard, parent.run, l).child_start(parent)),
            },
            Output::ChildResult {
                parent,
                status,
                payload,
            } => Message::ChildResult {
                parent,
                status,
                payload,
            },
            Output::Signal {
                target,
                name,
                payload,
                dedup,
            } => Message::Signal {
                target,
                name,
                payload,
                dedup,
            },
            Output::Close {
                target,
                wtype,
                parent,
                terminate,
                reason,
                dedup,
            } => Message::Close {
                grace_ms: match parent {
                    Some(p) if !terminate => super::grace::cascaded_grace(core, p.run),
                    _ => None,
                },
                target,
                wtype,
                parent,
                terminate,
                reason,
                dedup,
            },
            _ => return None,
        })
    }

    /// The same message with every run it names passed through `f` (the
    /// parent of a child start, a child's result, a close): what a
    /// reshard does to messages in flight when it renumbers runs.
    pub(crate) fn map_parents(&mut self, mut f: impl FnMut(ParentRef) -> ParentRef) {
        match self {
            Message::ChildStart { parent, .. } | Message::ChildResult { parent, .. } => {
                *parent = f(*parent);
            }
            Message::Close {
                parent: Some(parent),
                ..
            } => *parent = f(*parent),
            Message::Close { parent: None, .. } | Message::Signal { .. } => {}
        }
    }

    /// The shard it goes to, of `shards`.
    pub(crate) fn target_shard(&self, shards: u32) -> u32 {
        match self {
            Message::ChildResult { parent, .. } => parent.shard,
            Message::ChildStart { id: target, .. }
            | Message::Signal { target, .. }
            | Message::Close { target, .. } => shard_of(target, shards),
        }
    }
}

// Only the PostgreSQL backend has inboxes.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
impl Message {
    /// The message's bytes as an inbox row carries it between processes:
    /// its outbox encoding (tag and fields, see the [module docs](self)),
    /// so there is one codec.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        encode_message(self, &mut out);
        out
    }

    /// A message from [`to_bytes`](Self::to_bytes)'s bytes (all of them).
    pub(crate) fn from_bytes(bytes: &[u8]) -> DecodeResult<Message> {
        let mut r = Reader::new(bytes);
        let m = decode_message(&mut r)?;
        r.finish()?;
        Ok(m)
    }
}

/// Where a message a shard received came from: what its acknowledgement
/// is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Shard `shard` of this process, as its outbox's message `id`:
    /// acknowledged with [`Input::Delivered`](super::Input::Delivered) to
    /// that shard.
    Shard { shard: u32, id: u64 },
    /// Row `row` of this shard's inbox table, posted by a shard of another
    /// process (the PostgreSQL backend): acknowledged by deleting the row.
    Inbox { row: u64 },
}

/// The largest message id an outbox holds: ids count a shard's messages
/// over its store's life, which never get near 2^62, so a larger one is
/// damage and the next id's `+ 1` never overflows.
const MAX_MESSAGE_ID: u64 = 1 << 62;

/// Messages sent and not acknowledged, by id.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    next_id: u64,
    pending: BTreeMap<u64, Message>,
}

impl Outbox {
    /// Keeps `message` until acknowledged; returns its id.
    pub(crate) fn add(&mut self, message: Message) -> u64 {
        self.next_id += 1;
        self.pending.insert(self.next_id, message);
        self.next_id
    }

    /// The target recorded message `id`.
    pub(crate) fn acknowledged(&mut self, id: u64) {
        self.pending.remove(&id);
    }

    /// Every message not acknowledged, with its id.
    pub(crate) fn pending(&self) -> impl Iterator<Item = (u64, &Message)> {
        self.pending.iter().map(|(id, m)| (*id, m))
    }

    /// How many messages wait for an acknowledgement.
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// The outbox's bytes (see the [module docs](self)).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, self.pending.len() as u64);
        for (id, m) in &self.pending {
            put_varint(&mut out, *id);
            encode_message(m, &mut out);
        }
        out
    }

    /// An outbox from its bytes; ids continue after the largest.
    pub(crate) fn decode(bytes: &[u8]) -> DecodeResult<Outbox> {
        let mut outbox = Outbox::default();
        if bytes.is_empty() {
            return Ok(outbox);
        }
        let mut r = Reader::new(bytes);
        let n = r.varint()?;
        // Each message takes several bytes: a count beyond the input is
        // garbage, not a reason to loop.
        if n > bytes.len() as u64 {
            return Err(fusee_core::wire::DecodeError::new(
                "outbox count past its bytes",
            ));
        }
        for _ in 0..n {
            let id = r.varint()?;
            if id > MAX_MESSAGE_ID {
                return Err(fusee_core::wire::DecodeError::new(
                    "outbox message id out of range",
                ));
            }
            let m = decode_message(&mut r)?;
            outbox.next_id = outbox.next_id.max(id);
            outbox.pending.insert(id, m);
        }
        r.finish()?;
        Ok(outbox)
    }
}

fn put_parent(out: &mut Vec<u8>, p: &ParentRef) {
    put_u32(out, p.shard);
    put_varint(out, p.run);
    put_u32(out, p.seq);
}

fn parent(r: &mut Reader<'_>) -> DecodeResult<ParentRef> {
    Ok(ParentRef {
        shard: r.u32()?,
        run: r.varint()?,
        seq: r.u32()?,
    })
}

fn encode_message(m: &Message, out: &mut Vec<u8>) {
    match m {
        Message::ChildStart {
            parent,
            wtype,
            id,
            flags,
            deadline_ms,
            input,
            trace,
        } => {
            put_u8(out, if trace.is_some() { 6 } else { 1 });
            put_parent(out, parent);
            put_str(out, wtype);
            put_str(out, id);
            put_u8(out, *flags);
            put_varint(out, *deadline_ms);
            put_bytes(out, input);
            if let Some(t) = trace {
                put_str(out, &t.to_string());
            }
        }
        Message::ChildResult {
            parent,
            status,
            payload,
        } => {
            put_u8(out, 2);
            put_parent(out, parent);
            put_u8(out, *status as u8);
            put_bytes(out, payload);
        }
        Message::Signal {
            target,
            name,
            payload,
            dedup,
        } => {
            put_u8(out, 3);
            put_str(out, target);
            put_str(out, name);
            put_bytes(out, payload);
            put_u64(out, *dedup);
        }
        Message::Close {
            target,
            wtype,
            parent,
            terminate,
            reason,
            dedup,
            grace_ms,
        } => {
            put_u8(out, if grace_ms.is_some() { 7 } else { 5 });
            put_str(out, target);
            put_str(out, wtype);
            match parent {
                Some(p) => {
                    put_u8(out, 1);
                    put_parent(out, p);
                }
                None => put_u8(out, 0),
            }
            put_u8(out, u8::from(*terminate));
            put_bytes(out, reason);
            put_u64(out, *dedup);
            if let Some(g) = grace_ms {
                put_varint(out, *g);
            }
        }
    }
}

fn decode_message(r: &mut Reader<'_>) -> DecodeResult<Message> {
    let name = |s: &str| Name::from(s);
    let payload = |b: &[u8]| Payload::from(b);
    Ok(match r.u8()? {
        tag @ (1 | 6) => Message::ChildStart {
            parent: parent(r)?,
            wtype: name(r.str()?),
            id: name(r.str()?),
            flags: r.u8()?,
            deadline_ms: r.varint()?,
            input: payload(r.bytes()?),
            trace: if tag == 6 {
                Some(
                    TraceParent::parse(r.str()?)
                        .map_err(|_| fusee_core::wire::DecodeError::new("bad child traceparent"))?,
                )
            } else {
                None
            },
        },
        2 => Message::ChildResult {
            parent: parent(r)?,
            status: Status::from_u8(r.u8()?)?,
            payload: payload(r.bytes()?),
        },
        3 => Message::Signal {
            target: name(r.str()?),
            name: name(r.str()?),
            payload: payload(r.bytes()?),
            dedup: r.u64()?,
        },
        tag @ (4 | 5 | 7) => Message::Close {
            target: name(r.str()?),
            wtype: name(r.str()?),
            parent: match r.u8()? {
                0 => None,
                1 => Some(parent(r)?),
                _ => return Err(fusee_core::wire::DecodeError::new("bad parent flag")),
            },
            terminate: match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(fusee_core::wire::DecodeError::new("bad terminate flag")),
            },
            reason: payload(r.bytes()?),
            dedup: if tag == 4 { 0 } else { r.u64()? },
            grace_ms: if tag == 7 { Some(r.varint()?) } else { None },
        },
        _ => return Err(fusee_core::wire::DecodeError::new("unknown message tag")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Message> {
        let p = ParentRef {
            shard: 3,
            run: 77,
            seq: 5,
        };
        vec![
            Message::ChildStart {
                parent: p,
                wtype: "child".into(),
                id: "kid-1".into(),
                flags: 9,
                deadline_ms: 12345,
                input: Payload::from(&b"{}"[..]),
                trace: None,
            },
            Message::ChildStart {
                parent: p,
                wtype: "child".into(),
                id: "kid-2".into(),
                flags: 0,
                deadline_ms: 0,
                input: Payload::from(&b"[]"[..]),
                trace: TraceParent::parse(
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                )
                .ok(),
            },
            Message::ChildResult {
                parent: p,
                status: Status::Failed,
                payload: Payload::from(&b"oops"[..]),
            },
            Message::Signal {
                target: "t".into(),
                name: "go".into(),
                payload: Payload::from(&b"1"[..]),
                dedup: 0xdead_beef,
            },
            Message::Close {
                target: "t".into(),
                wtype: "".into(),
                parent: Some(p),
                terminate: true,
                reason: Payload::from(&b"bye"[..]),
                dedup: 0x0123_4567_89ab_cdef,
                grace_ms: None,
            },
            Message::Close {
                target: "kid".into(),
                wtype: "w".into(),
                parent: Some(p),
                terminate: false,
                reason: Payload::from(&b"hurry"[..]),
                dedup: 9,
                grace_ms: Some(30_000),
            },
            Message::Close {
                target: "u".into(),
                wtype: "w".into(),
                parent: None,
                terminate: false,
                reason: Payload::from(&[][..]),
                dedup: 0,
                grace_ms: None,
            },
        ]
    }

    #[test]
    fn messages_round_trip_alone() {
        for m in sample() {
            let bytes = m.to_bytes();
            assert_eq!(Message::from_bytes(&bytes).expect("decodes"), m);
            assert!(Message::from_bytes(&bytes[..bytes.len() - 1]).is_err());
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Message::from_bytes(&longer).is_err(), "trailing bytes");
        }
    }

    #[test]
    fn outboxes_round_trip_and_garbage_is_refused_without_panicking() {
        let mut outbox = Outbox::default();
        for m in sample() {
            outbox.add(m);
        }
        outbox.acknowledged(2);
        let bytes = outbox.encode();
        let back = Outbox::decode(&bytes).expect("decodes");
        assert_eq!(back.pending, outbox.pending);
        assert_eq!(back.next_id, sample().len() as u64);
        assert_eq!(Outbox::decode(&[]).expect("empty").len(), 0);
        for cut in 0..bytes.len() {
            assert!(
                Outbox::decode(&bytes[..cut]).is_err() || cut == 0,
                "cut at {cut}"
            );
        }
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..2000 {
            let mut b = bytes.clone();
            let i = rng.usize(..b.len());
            b[i] = rng.u8(..);
            let _ = Outbox::decode(&b);
        }
        // An id past the bound is damage, so the next id never overflows.
        let one = |id: u64| {
            let mut b = Vec::new();
            put_varint(&mut b, 1);
            put_varint(&mut b, id);
            encode_message(&sample()[0], &mut b);
            b
        };
        let mut last = Outbox::decode(&one(MAX_MESSAGE_ID)).expect("at the bound");
        assert_eq!(last.add(sample()[1].clone()), MAX_MESSAGE_ID + 1);
        assert!(Outbox::decode(&one(MAX_MESSAGE_ID + 1)).is_err());
        assert!(Outbox::decode(&one(u64::MAX)).is_err());
    }
}
