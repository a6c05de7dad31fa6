//! The record kinds: the one table every per-kind piece of code is derived
//! from, and the kind tags it assigns.
//!
//! `record_kinds!` lists each kind once: its variant name, its tag (the
//! first byte of every canonical body) and its fields after `run`, in
//! canonical order, each with its Rust type and its wire type (the notation
//! of [`canonical`](super::canonical)). From it are generated the
//! [`Record`](super::Record) enum, these tag constants, [`name`], the
//! accessors and conversions (`run`, `set_run`, `seq`, `kind`, `map`), and
//! the two field walks every encoder and decoder is built on
//! ([`Record::write_fields`](super::Record::write_fields),
//! [`Record::read_fields`](super::Record::read_fields)). Adding a kind is
//! one entry here.
//!
//! Tags are part of the stored format: a tag, once assigned, never changes
//! meaning, and a field's place and wire type never change. Tag 0 is never a
//! record (a zeroed byte is garbage, not a kind); the tags follow
//! [`Record`](super::Record)'s variant order from 1 to 25. The golden test
//! `tests/record_golden.rs` pins every kind's bytes.
//!
//! A kind grows only at its end, by one `tail<T>` field (an `Option`
//! written only when present, see [`canonical`](super::canonical)):
//! bodies stored before it end where it would begin and read as `None`.
//! `Step` and `Attempt` grew `ended_ms` this way, `Cancel` its `grace`.

/// Calls the macro `$gen` with the table of record kinds, in tag order:
///
/// ```text
/// /// docs
/// Kind = tag (CONST) { /// docs
///                      field: RustType [wire], ... }
/// ```
///
/// Every kind also has `run: RunId [run]` first, which the generators add.
/// Wire types are `u8`, `v32`, `v64`, `str`, `bytes`, `status`, `outcome`,
/// `opt<bytes|parent|origin|update|meta>` and `tail<v64|grace>` (only as a
/// kind's last field, at most one a kind: its presence is read from
/// whether the body has bytes left).
macro_rules! record_kinds {
    ($gen:ident) => {
        $gen! {
            /// A run begins (fresh, continue-as-new, reset or update-with-start).
            Start = 1 (START) {
                /// The workflow ID.
                id: S [str],
                /// The workflow type.
                wtype: S [str],
                /// The workflow code version.
                version: u32 [v32],
                /// How payloads are encoded (host-defined).
                codec: u8 [u8],
                /// When it started.
                started_ms: u64 [v64],
                /// When it times out; 0 = never.
                deadline_ms: u64 [v64],
                /// The run that started it as a child.
                parent: Option<ParentRef> [opt<parent>],
                /// See [`policy`].
                policy: u8 [u8],
                /// The run it replaces.
                from: Option<Origin> [opt<origin>],
                /// How many records after this one are copied from `from`'s journal.
                copies: u32 [v32],
                /// The update of an update-with-start.
                update: Option<Box<StartUpdate<S, B>>> [opt<update>],
                /// The input.
                input: B [bytes],
                /// Rare fields.
                meta: Option<Box<StartMeta<B>>> [opt<meta>],
            }
            /// A step's final result.
            Step = 2 (STEP) {
                /// The operation.
                seq: Seq [v32],
                /// The step's name.
                name: S [str],
                /// The attempt that produced the result, from 1.
                attempt: u32 [v32],
                /// How it ended.
                status: Status [status],
                /// Its result or error.
                payload: B [bytes],
                /// When the attempt's function returned, by the host's clock
                /// (ms since the Unix epoch; its start is the attempt's
                /// `Began`). `None` in records written before the field
                /// existed. Not part of replay: only people read it.
                ended_ms: Option<u64> [tail<v64>],
            }
            /// A failed attempt of a step that will be retried.
            Attempt = 3 (ATTEMPT) {
                /// The operation.
                seq: Seq [v32],
                /// The step's name.
                name: S [str],
                /// The attempt that failed, from 1.
                attempt: u32 [v32],
                /// When the next attempt runs; [`PAUSED`]: after a `Resume`.
                retry_at_ms: u64 [v64],
                /// The error.
                error: B [bytes],
                /// When the attempt's function returned, as in `Step`.
                ended_ms: Option<u64> [tail<v64>],
            }
            /// A paused step may go on.
            Resume = 4 (RESUME) {
                /// The paused step.
                seq: Seq [v32],
            }
            /// A durable sleep armed.
            Timer = 5 (TIMER) {
                /// The operation.
                seq: Seq [v32],
                /// The timer's name.
                name: S [str],
                /// When it fires.
                fire_at_ms: u64 [v64],
            }
            /// A durable sleep fired.
            Fired = 6 (FIRED) {
                /// The timer's operation.
                seq: Seq [v32],
            }
            /// A signal delivered to the run.
            Signal = 7 (SIGNAL) {
                /// The signal's name.
                name: S [str],
                /// Dedup key; 0 = none.
                dedup: u64 [v64],
                /// The signal's payload.
                payload: B [bytes],
                /// Who sent it.
                by: Option<B> [opt<bytes>],
            }
            /// The code began waiting for a signal.
            Wait = 8 (WAIT) {
                /// The operation.
                seq: Seq [v32],
                /// The signal name waited for.
                name: S [str],
                /// When the wait times out; 0 = never.
                deadline_ms: u64 [v64],
            }
            /// A wait ended.
            Waited = 9 (WAITED) {
                /// The wait's operation.
                seq: Seq [v32],
                /// How.
                outcome: WaitOutcome [outcome],
            }
            /// A recorded nondeterministic value.
            Value = 10 (VALUE) {
                /// The operation.
                seq: Seq [v32],
                /// See [`value_kind`].
                kind: u8 [u8],
                /// The value.
                value: B [bytes],
            }
            /// A child workflow started.
            Child = 11 (CHILD) {
                /// The operation waiting for the child.
                seq: Seq [v32],
                /// The child's workflow type.
                wtype: S [str],
                /// The child's workflow ID.
                id: S [str],
                /// The child's start policy (see [`policy`]).
                flags: u8 [u8],
                /// The child's deadline; 0 = none.
                deadline_ms: u64 [v64],
                /// The child's input.
                input: B [bytes],
            }
            /// A child's result.
            ChildDone = 12 (CHILD_DONE) {
                /// The operation that started the child.
                seq: Seq [v32],
                /// How the child ended.
                status: Status [status],
                /// Its result.
                payload: B [bytes],
            }
            /// A signal sent to another workflow ([`crate::shard::CANCEL_SIGNAL`]
            /// cancels it).
            Send = 13 (SEND) {
                /// The operation.
                seq: Seq [v32],
                /// The target workflow ID.
                target: S [str],
                /// The signal's name.
                name: S [str],
                /// The signal's payload.
                payload: B [bytes],
            }
            /// Cancellation requested.
            Cancel = 14 (CANCEL) {
                /// Why.
                reason: B [bytes],
                /// Who asked.
                by: Option<B> [opt<bytes>],
                /// The grace after which the run is terminated unless it
                /// ended (`Engine::cancel_with_grace`, or a parent's grace
                /// cascaded); `None` for a plain cancel. Bodies written
                /// before it existed end at `by` (their grace, if any, is
                /// in an `Attributes` record right after).
                grace: Option<CancelGrace> [tail<grace>],
            }
            /// An update accepted.
            Update = 15 (UPDATE) {
                /// The update's ID.
                id: S [str],
                /// The handler's name.
                name: S [str],
                /// Its argument.
                payload: B [bytes],
                /// The workflow operation waiting for the result, if a workflow
                /// called.
                caller: Option<ParentRef> [opt<parent>],
            }
            /// An update's handler returned.
            UpdateDone = 16 (UPDATE_DONE) {
                /// The update's ordinal (its position among the run's updates).
                ordinal: u64 [v64],
                /// How the handler ended.
                status: Status [status],
                /// Its result.
                payload: B [bytes],
            }
            /// A long step's progress.
            Heartbeat = 17 (HEARTBEAT) {
                /// The step.
                seq: Seq [v32],
                /// The attempt.
                attempt: u32 [v32],
                /// Progress details.
                payload: B [bytes],
            }
            /// A versioning marker.
            Patch = 18 (PATCH) {
                /// The operation.
                seq: Seq [v32],
                /// The patch ID.
                id: S [str],
            }
            /// An async completion token handed out.
            Awaiting = 19 (AWAITING) {
                /// The operation.
                seq: Seq [v32],
                /// The operation's name.
                name: S [str],
                /// The attempt the token belongs to, from 1.
                attempt: u32 [v32],
            }
            /// An async completion token used.
            Completed = 20 (COMPLETED) {
                /// The operation.
                seq: Seq [v32],
                /// The attempt the token belonged to.
                attempt: u32 [v32],
                /// How the operation ended.
                status: Status [status],
                /// Its result.
                payload: B [bytes],
            }
            /// Search attributes set.
            Attributes = 21 (ATTRIBUTES) {
                /// The attributes object.
                payload: B [bytes],
            }
            /// A stream's chunk.
            Chunk = 22 (CHUNK) {
                /// The stream's operation.
                seq: Seq [v32],
                /// The chunk.
                payload: B [bytes],
            }
            /// A stream's end.
            StreamEnd = 23 (STREAM_END) {
                /// The stream's operation.
                seq: Seq [v32],
            }
            /// The run ended. For a handover status the payload is the next run's
            /// `Start`, canonically encoded.
            Done = 24 (DONE) {
                /// How it ended.
                status: Status [status],
                /// When.
                finished_ms: u64 [v64],
                /// Its result (or the next run's `Start`).
                payload: B [bytes],
                /// Who ended it from outside.
                by: Option<B> [opt<bytes>],
            }
            /// A step attempt began: recorded, and durable, before the step's
            /// function runs. A step's first attempt records it at the call, in
            /// call order (like a command, so replayed code that calls another
            /// step there is a determinism error); a retry, or an attempt run
            /// again after a crash, records it when the attempt starts. A step
            /// with no `Began` is a journal written before this kind existed.
            Began = 25 (BEGAN) {
                /// The step.
                seq: Seq [v32],
                /// The step's name.
                name: S [str],
                /// The attempt, from 1 (an attempt cut by a crash begins again
                /// under its number: the later `Began` supersedes the earlier).
                attempt: u32 [v32],
                /// When the attempt began, by the host's clock (ms since the
                /// Unix epoch).
                started_ms: u64 [v64],
            }
        }
    };
}
pub(crate) use record_kinds;

/// Whether a wire type is a `tail<T>`.
macro_rules! is_tail {
    (tail < $t:ident >) => {
        true
    };
    ($($other:tt)+) => {
        false
    };
}

/// Whether no field but the last is a `tail<T>`: a tail's presence is
/// read from whether the body has bytes left, so a field after it (or a
/// second tail) could not be told apart.
const fn tail_is_last(tails: &[bool]) -> bool {
    let mut i = 0;
    while i + 1 < tails.len() {
        if tails[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Generates the tag constants, [`ALL`] and [`name`] from the table, and
/// checks at compile time that a `tail<T>` field is its kind's last.
macro_rules! tags {
    ($(
        $(#[$doc:meta])*
        $kind:ident = $tag:literal ($konst:ident) {
            $( $(#[$fdoc:meta])* $field:ident : $ty:ty [$($wire:tt)+] ),* $(,)?
        }
    )*) => {
        $(
            #[doc = concat!("[`Record::", stringify!($kind), "`](super::Record::", stringify!($kind), ").")]
            pub const $konst: u8 = $tag;
            const _: () = assert!(
                tail_is_last(&[$(is_tail!($($wire)+)),*]),
                concat!(stringify!($kind), ": a tail<T> field must be the last")
            );
        )*

        /// Every valid tag, in order (`ALL[i] == i + 1`).
        pub const ALL: [u8; [$($konst),*].len()] = [$($konst),*];

        /// The variant name of tag `tag` (for messages), or `None` for a byte
        /// that is not a kind.
        pub const fn name(tag: u8) -> Option<&'static str> {
            Some(match tag {
                $( $konst => stringify!($kind), )*
                _ => return None,
            })
        }
    };
}
record_kinds!(tags);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_dense_from_one_and_named() {
        assert_eq!(ALL.len(), 25);
        for (i, &tag) in ALL.iter().enumerate() {
            assert_eq!(usize::from(tag), i + 1);
            assert!(name(tag).is_some(), "tag {tag} has no name");
        }
        assert_eq!(name(0), None);
        assert_eq!(name(26), None);
        assert_eq!(name(u8::MAX), None);
    }
}
