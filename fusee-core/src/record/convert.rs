//! What every record has (run, kind) and conversions between the borrowed
//! and owned instantiations of [`Record`].

use super::{Record, RecordBuf, RecordRef, RunId, StartMeta, StartUpdate, ToName, ToPayload, kind};

impl<S, B> Record<S, B> {
    /// The run this record is about (every kind has one).
    pub fn run(&self) -> RunId {
        match self {
            Record::Start { run, .. }
            | Record::Step { run, .. }
            | Record::Attempt { run, .. }
            | Record::Resume { run, .. }
            | Record::Timer { run, .. }
            | Record::Fired { run, .. }
            | Record::Signal { run, .. }
            | Record::Wait { run, .. }
            | Record::Waited { run, .. }
            | Record::Value { run, .. }
            | Record::Child { run, .. }
            | Record::ChildDone { run, .. }
            | Record::Send { run, .. }
            | Record::Cancel { run, .. }
            | Record::Update { run, .. }
            | Record::UpdateDone { run, .. }
            | Record::Heartbeat { run, .. }
            | Record::Patch { run, .. }
            | Record::Awaiting { run, .. }
            | Record::Completed { run, .. }
            | Record::Attributes { run, .. }
            | Record::Chunk { run, .. }
            | Record::StreamEnd { run, .. }
            | Record::Done { run, .. } => *run,
        }
    }

    /// Makes this a record of run `to`, nothing else changed (a reset copies
    /// a journal into a new run this way).
    pub fn set_run(&mut self, to: RunId) {
        match self {
            Record::Start { run, .. }
            | Record::Step { run, .. }
            | Record::Attempt { run, .. }
            | Record::Resume { run, .. }
            | Record::Timer { run, .. }
            | Record::Fired { run, .. }
            | Record::Signal { run, .. }
            | Record::Wait { run, .. }
            | Record::Waited { run, .. }
            | Record::Value { run, .. }
            | Record::Child { run, .. }
            | Record::ChildDone { run, .. }
            | Record::Send { run, .. }
            | Record::Cancel { run, .. }
            | Record::Update { run, .. }
            | Record::UpdateDone { run, .. }
            | Record::Heartbeat { run, .. }
            | Record::Patch { run, .. }
            | Record::Awaiting { run, .. }
            | Record::Completed { run, .. }
            | Record::Attributes { run, .. }
            | Record::Chunk { run, .. }
            | Record::StreamEnd { run, .. }
            | Record::Done { run, .. } => *run = to,
        }
    }

    /// The operation (sequence number) this record belongs to, for the
    /// kinds that belong to one; `None` for run-wide kinds (`Start`,
    /// `Signal`, `Cancel`, `Update`, `UpdateDone`, `Attributes`, `Done`).
    pub fn seq(&self) -> Option<super::Seq> {
        match self {
            Record::Step { seq, .. }
            | Record::Attempt { seq, .. }
            | Record::Resume { seq, .. }
            | Record::Timer { seq, .. }
            | Record::Fired { seq, .. }
            | Record::Wait { seq, .. }
            | Record::Waited { seq, .. }
            | Record::Value { seq, .. }
            | Record::Child { seq, .. }
            | Record::ChildDone { seq, .. }
            | Record::Send { seq, .. }
            | Record::Heartbeat { seq, .. }
            | Record::Patch { seq, .. }
            | Record::Awaiting { seq, .. }
            | Record::Completed { seq, .. }
            | Record::Chunk { seq, .. }
            | Record::StreamEnd { seq, .. } => Some(*seq),
            Record::Start { .. }
            | Record::Signal { .. }
            | Record::Cancel { .. }
            | Record::Update { .. }
            | Record::UpdateDone { .. }
            | Record::Attributes { .. }
            | Record::Done { .. } => None,
        }
    }

    /// This record's kind tag: one of [`kind`]'s constants, never 0. It is
    /// the first byte of the record's canonical body.
    pub fn kind(&self) -> u8 {
        match self {
            Record::Start { .. } => kind::START,
            Record::Step { .. } => kind::STEP,
            Record::Attempt { .. } => kind::ATTEMPT,
            Record::Resume { .. } => kind::RESUME,
            Record::Timer { .. } => kind::TIMER,
            Record::Fired { .. } => kind::FIRED,
            Record::Signal { .. } => kind::SIGNAL,
            Record::Wait { .. } => kind::WAIT,
            Record::Waited { .. } => kind::WAITED,
            Record::Value { .. } => kind::VALUE,
            Record::Child { .. } => kind::CHILD,
            Record::ChildDone { .. } => kind::CHILD_DONE,
            Record::Send { .. } => kind::SEND,
            Record::Cancel { .. } => kind::CANCEL,
            Record::Update { .. } => kind::UPDATE,
            Record::UpdateDone { .. } => kind::UPDATE_DONE,
            Record::Heartbeat { .. } => kind::HEARTBEAT,
            Record::Patch { .. } => kind::PATCH,
            Record::Awaiting { .. } => kind::AWAITING,
            Record::Completed { .. } => kind::COMPLETED,
            Record::Attributes { .. } => kind::ATTRIBUTES,
            Record::Chunk { .. } => kind::CHUNK,
            Record::StreamEnd { .. } => kind::STREAM_END,
            Record::Done { .. } => kind::DONE,
        }
    }

    /// This record's variant name, for messages.
    pub fn kind_name(&self) -> &'static str {
        // Every variant's tag has a name (pinned by `kind`'s tests).
        kind::name(self.kind()).unwrap_or("?")
    }

    /// The same record with every string passed through `s` and every bytes
    /// field through `b`, in canonical field order. Nothing else changes.
    pub fn map<'a, S2, B2>(
        &'a self,
        mut s: impl FnMut(&'a S) -> S2,
        mut b: impl FnMut(&'a B) -> B2,
    ) -> Record<S2, B2> {
        match self {
            Record::Start {
                run,
                id,
                wtype,
                version,
                codec,
                started_ms,
                deadline_ms,
                parent,
                policy,
                from,
                copies,
                update,
                input,
                meta,
            } => Record::Start {
                run: *run,
                id: s(id),
                wtype: s(wtype),
                version: *version,
                codec: *codec,
                started_ms: *started_ms,
                deadline_ms: *deadline_ms,
                parent: *parent,
                policy: *policy,
                from: *from,
                copies: *copies,
                update: update.as_ref().map(|u| {
                    Box::new(StartUpdate {
                        id: s(&u.id),
                        name: s(&u.name),
                        payload: b(&u.payload),
                    })
                }),
                input: b(input),
                meta: meta.as_ref().map(|m| {
                    Box::new(StartMeta {
                        attributes: b(&m.attributes),
                        memo: b(&m.memo),
                    })
                }),
            },
            Record::Step {
                run,
                seq,
                name,
                attempt,
                status,
                payload,
            } => Record::Step {
                run: *run,
                seq: *seq,
                name: s(name),
                attempt: *attempt,
                status: *status,
                payload: b(payload),
            },
            Record::Attempt {
                run,
                seq,
                name,
                attempt,
                retry_at_ms,
                error,
            } => Record::Attempt {
                run: *run,
                seq: *seq,
                name: s(name),
                attempt: *attempt,
                retry_at_ms: *retry_at_ms,
                error: b(error),
            },
            Record::Resume { run, seq } => Record::Resume {
                run: *run,
                seq: *seq,
            },
            Record::Timer {
                run,
                seq,
                name,
                fire_at_ms,
            } => Record::Timer {
                run: *run,
                seq: *seq,
                name: s(name),
                fire_at_ms: *fire_at_ms,
            },
            Record::Fired { run, seq } => Record::Fired {
                run: *run,
                seq: *seq,
            },
            Record::Signal {
                run,
                name,
                dedup,
                payload,
                by,
            } => Record::Signal {
                run: *run,
                name: s(name),
                dedup: *dedup,
                payload: b(payload),
                by: by.as_ref().map(&mut b),
            },
            Record::Wait {
                run,
                seq,
                name,
                deadline_ms,
            } => Record::Wait {
                run: *run,
                seq: *seq,
                name: s(name),
                deadline_ms: *deadline_ms,
            },
            Record::Waited { run, seq, outcome } => Record::Waited {
                run: *run,
                seq: *seq,
                outcome: *outcome,
            },
            Record::Value {
                run,
                seq,
                kind,
                value,
            } => Record::Value {
                run: *run,
                seq: *seq,
                kind: *kind,
                value: b(value),
            },
            Record::Child {
                run,
                seq,
                wtype,
                id,
                flags,
                deadline_ms,
                input,
            } => Record::Child {
                run: *run,
                seq: *seq,
                wtype: s(wtype),
                id: s(id),
                flags: *flags,
                deadline_ms: *deadline_ms,
                input: b(input),
            },
            Record::ChildDone {
                run,
                seq,
                status,
                payload,
            } => Record::ChildDone {
                run: *run,
                seq: *seq,
                status: *status,
                payload: b(payload),
            },
            Record::Send {
                run,
                seq,
                target,
                name,
                payload,
            } => Record::Send {
                run: *run,
                seq: *seq,
                target: s(target),
                name: s(name),
                payload: b(payload),
            },
            Record::Cancel { run, reason, by } => Record::Cancel {
                run: *run,
                reason: b(reason),
                by: by.as_ref().map(&mut b),
            },
            Record::Update {
                run,
                id,
                name,
                payload,
                caller,
            } => Record::Update {
                run: *run,
                id: s(id),
                name: s(name),
                payload: b(payload),
                caller: *caller,
            },
            Record::UpdateDone {
                run,
                ordinal,
                status,
                payload,
            } => Record::UpdateDone {
                run: *run,
                ordinal: *ordinal,
                status: *status,
                payload: b(payload),
            },
            Record::Heartbeat {
                run,
                seq,
                attempt,
                payload,
            } => Record::Heartbeat {
                run: *run,
                seq: *seq,
                attempt: *attempt,
                payload: b(payload),
            },
            Record::Patch { run, seq, id } => Record::Patch {
                run: *run,
                seq: *seq,
                id: s(id),
            },
            Record::Awaiting {
                run,
                seq,
                name,
                attempt,
            } => Record::Awaiting {
                run: *run,
                seq: *seq,
                name: s(name),
                attempt: *attempt,
            },
            Record::Completed {
                run,
                seq,
                attempt,
                status,
                payload,
            } => Record::Completed {
                run: *run,
                seq: *seq,
                attempt: *attempt,
                status: *status,
                payload: b(payload),
            },
            Record::Attributes { run, payload } => Record::Attributes {
                run: *run,
                payload: b(payload),
            },
            Record::Chunk { run, seq, payload } => Record::Chunk {
                run: *run,
                seq: *seq,
                payload: b(payload),
            },
            Record::StreamEnd { run, seq } => Record::StreamEnd {
                run: *run,
                seq: *seq,
            },
            Record::Done {
                run,
                status,
                finished_ms,
                payload,
                by,
            } => Record::Done {
                run: *run,
                status: *status,
                finished_ms: *finished_ms,
                payload: b(payload),
                by: by.as_ref().map(&mut b),
            },
        }
    }

    /// A borrowed view of this record (no allocation but the rare boxed
    /// start fields).
    pub fn to_ref(&self) -> RecordRef<'_>
    where
        S: AsRef<str>,
        B: AsRef<[u8]>,
    {
        self.map(|s| s.as_ref(), |b| b.as_ref())
    }

    /// An owned copy: a [`RecordRef`]'s strings and bytes are copied once, a
    /// [`RecordBuf`]'s shared ones are cloned (reference counts only).
    pub fn to_buf(&self) -> RecordBuf
    where
        S: ToName,
        B: ToPayload,
    {
        self.map(ToName::to_name, ToPayload::to_payload)
    }
}
