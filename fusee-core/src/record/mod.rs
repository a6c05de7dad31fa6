//! Journal records: one fact about one workflow run.
//!
//! [`Record`] has 25 kinds, each identified by a one-byte tag ([`kind`]),
//! and is generic over its string type `S` and bytes type `B`:
//! [`RecordRef`] borrows both (building a record to append costs no
//! allocation), [`RecordBuf`] owns shared [`Name`]s and [`Payload`]s (what
//! decoding a stored journal yields).
//!
//! # One table
//!
//! The kinds are written once, in the table of [`kind`] (`record_kinds!`:
//! each kind's name, tag, and fields with their Rust and wire types, in
//! canonical order). Everything that goes kind by kind is generated from it:
//! [`Record`] itself, the tag constants and names, [`Record::run`],
//! [`Record::seq`], [`Record::kind`], [`Record::map`] (and so
//! [`Record::to_ref`], [`Record::to_buf`]), and two field walks:
//! [`Record::write_fields`] into a [`FieldSink`] (the canonical encoder, its
//! length count and [`check_limits`] are sinks) and [`Record::read_fields`]
//! from a [`FieldSource`] (the canonical decoder is one). Adding a kind is
//! one entry in the table and a new tag.
//!
//! Every record has exactly one byte form, the *canonical encoding*,
//! documented byte by byte in [`canonical`]: the same bytes go to a run's
//! journal, to the log, to the run store, to checkpoints and over the
//! network. Its decoders never panic and never allocate more than their
//! input justifies, whatever bytes they are given.
//!
//! Limits every record must respect to be decodable (checked by
//! [`check_limits`], refused by every decoder): run IDs in
//! `1..=`[`MAX_RUN`], each string or payload at most
//! [`MAX_PAYLOAD`](crate::wire::MAX_PAYLOAD) bytes, the whole body at most
//! [`MAX_BODY`] bytes.

use std::sync::Arc;

use crate::wire::DecodeResult;

pub mod canonical;
mod convert;
mod fields;
mod inline;
pub mod kind;

pub use canonical::{
    CanonicalIter, LimitError, MAX_BODY, PassingIter, Walked, body_len, canonical_len,
    check_limits, decode_body, decode_canonical_all, encode_body, encode_canonical, find_kind,
    frame_first, iter_canonical, iter_canonical_passing,
};
pub use fields::{FieldSink, FieldSource};
pub use inline::InlineDecoder;

/// A run's number within its shard, from 1 (0 marks a free table slot).
/// Fits 48 bits ([`MAX_RUN`]).
pub type RunId = u64;
/// An operation's position in its run's journal (its call order).
pub type Seq = u32;
/// A record's position in its shard's log, from 1 to [`MAX_LSN`].
pub type Lsn = u64;
/// The largest LSN a log holds: no log gets there (146 years at a billion
/// records a second), so a stored LSN past it (a segment's base) is
/// damage, refused where it is read, and LSN arithmetic never overflows.
pub const MAX_LSN: Lsn = 1 << 62;
/// A shared string: names, workflow IDs and types after decoding.
pub type Name = Arc<str>;
/// A shared byte payload.
pub type Payload = Arc<[u8]>;

/// The largest run ID: run IDs use 48 bits (the run table packs them with
/// state bits). Decoders refuse a record naming a larger run, or run 0.
pub const MAX_RUN: RunId = (1 << 48) - 1;

/// `retry_at_ms` of an [`Record::Attempt`] whose step waits for a
/// [`Record::Resume`] instead of a time.
pub const PAUSED: u64 = u64::MAX;

/// How a step, child, update or workflow ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Status {
    /// Returned a value.
    Ok = 0,
    /// Returned an error.
    Failed = 1,
    /// Cancelled on request.
    Cancelled = 2,
    /// Its deadline passed.
    TimedOut = 3,
    /// Stopped from outside without running any more code.
    Terminated = 4,
    /// Ended by starting a new run of the same workflow ID.
    ContinuedAsNew = 5,
    /// Replaced by a reset.
    Reset = 6,
}

impl Status {
    /// Every status, in tag order.
    pub const ALL: [Status; 7] = [
        Status::Ok,
        Status::Failed,
        Status::Cancelled,
        Status::TimedOut,
        Status::Terminated,
        Status::ContinuedAsNew,
        Status::Reset,
    ];

    /// The status with this tag.
    pub fn from_u8(v: u8) -> DecodeResult<Self> {
        Self::ALL
            .get(usize::from(v))
            .copied()
            .ok_or(crate::wire::DecodeError::new("unknown status"))
    }

    /// A lower-case name for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::TimedOut => "timed out",
            Status::Terminated => "terminated",
            Status::ContinuedAsNew => "continued as new",
            Status::Reset => "reset",
        }
    }

    /// The run handed over to a newer run of the same workflow ID: its
    /// `Done` payload is the next run's `Start`.
    pub fn is_handover(self) -> bool {
        matches!(self, Status::ContinuedAsNew | Status::Reset)
    }
}

/// The parent of a child run: the shard and run that started it and the
/// journal position waiting for its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParentRef {
    /// The parent's shard.
    pub shard: u32,
    /// The parent run.
    pub run: RunId,
    /// The parent's operation waiting for the child.
    pub seq: Seq,
}

/// A cancel's grace (see `Cancel`'s `grace`): the run is terminated with
/// the cancel's reason at `until_ms` unless it ends first. Both are kept:
/// a recovery arms the absolute deadline, and the children the run's close
/// cancels get the same length, counted from their own cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CancelGrace {
    /// When the grace ends (ms since the epoch, the engine's clock).
    pub until_ms: u64,
    /// How long it is (ms): `until_ms` minus the cancel's time.
    pub grace_ms: u64,
}

/// Where a run came from when it is not a fresh start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The run it replaces.
    pub run: RunId,
    /// Why: one of [`origin`]'s constants.
    pub cause: u8,
}

/// Causes of an [`Origin`].
pub mod origin {
    /// Continue-as-new: the new run's `Start` is the old run's `Done`
    /// payload, so one record ends one run and starts the next.
    pub const CONTINUED: u8 = 0;
    /// Reset: the old run is ended by its own `Done`; records copied from
    /// its journal follow the new `Start` (see `copies`).
    pub const RESET: u8 = 1;
}

/// The policy byte of a `Start` record and the flags of a `Child` record
/// (which become the child's start policy). Recorded so replay and recovery
/// apply the same rules.
///
/// Bits 0–1: the ID policy; bit 2: [`DETACHED`](policy::DETACHED);
/// bits 3–4: the parent close policy.
pub mod policy {
    /// Mask of the ID policy bits.
    pub const ID_MASK: u8 = 0b11;
    /// A start with an ID whose latest run is finished starts a new run.
    pub const ID_ALLOW_DUPLICATE: u8 = 0;
    /// A start with an ID that was ever used is refused.
    pub const ID_REJECT_DUPLICATE: u8 = 1;
    /// A start with an ID whose latest run is still running terminates it.
    pub const ID_TERMINATE_RUNNING: u8 = 2;
    /// A start with an ID whose latest run is still running attaches to it.
    pub const ID_USE_EXISTING: u8 = 3;
    /// The child outlives its parent: the parent does not wait for it and
    /// receives no result.
    pub const DETACHED: u8 = 1 << 2;
    /// Mask of the parent close policy bits.
    pub const CLOSE_MASK: u8 = 0b11 << 3;
    /// When the parent closes, the child is terminated (the default).
    pub const CLOSE_TERMINATE: u8 = 0;
    /// When the parent closes, the child is asked to cancel.
    pub const CLOSE_CANCEL: u8 = 1 << 3;
    /// When the parent closes, the child is left running.
    pub const CLOSE_ABANDON: u8 = 2 << 3;
}

/// Kinds of recorded nondeterministic values ([`Record::Value`]).
pub mod value_kind {
    /// The current time.
    pub const NOW: u8 = 0;
    /// Random bytes.
    pub const RANDOM: u8 = 1;
    /// A UUID.
    pub const UUID: u8 = 2;
    /// A value the workflow computed outside the journal.
    pub const CUSTOM: u8 = 3;
    /// A stream opened (`ctx.stream(name)`): the value is the stream's
    /// name, and the `Value`'s operation is the `seq` its [`Chunk`] and
    /// [`StreamEnd`] records name.
    ///
    /// [`Chunk`]: super::Record::Chunk
    /// [`StreamEnd`]: super::Record::StreamEnd
    pub const STREAM: u8 = 4;
}

/// How a wait for a signal ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitOutcome {
    /// The wait consumed the run's signal with this ordinal.
    Signal(u64),
    /// Its deadline passed.
    TimedOut,
    /// The code dropped the wait (it lost a race): the signal offered to it,
    /// if any, is offered again. Not a delivery.
    Abandoned,
}

/// The update that rides on an update-with-start.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StartUpdate<S, B> {
    /// The update's ID (unique within the run).
    pub id: S,
    /// The update handler's name.
    pub name: S,
    /// Its argument.
    pub payload: B,
}

/// Rarely used start fields, boxed so every record stays small.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StartMeta<B> {
    /// Search attributes set at start.
    pub attributes: B,
    /// Free-form memo shown with the run, never read by its code.
    pub memo: B,
}

/// Generates [`Record`] from the table ([`kind::record_kinds!`]): each
/// variant gets `run` first, then the table's fields, and a line naming its
/// tag and wire types.
macro_rules! record_enum {
    ($(
        $(#[$doc:meta])*
        $kind:ident = $tag:literal ($konst:ident) {
            $( $(#[$fdoc:meta])* $field:ident : $ty:ty [$($wire:tt)+] ),* $(,)?
        }
    )*) => {
        /// One fact about one run, generic over its string type `S` and bytes
        /// type `B`: [`RecordRef`] borrows, [`RecordBuf`] owns.
        ///
        /// Each variant's fields are in canonical order; its doc names its
        /// tag and each field's wire type (see [`canonical`]).
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum Record<S, B> {
            $(
                $(#[$doc])*
                ///
                #[doc = concat!(
                    "Tag ", stringify!($tag), " ([`kind::", stringify!($konst),
                    "`]); body: `tag`, `run: run`", $(", `", stringify!($field), ": ", stringify!($($wire)+), "`",)* "."
                )]
                $kind {
                    /// The run.
                    run: RunId,
                    $( $(#[$fdoc])* $field: $ty, )*
                },
            )*
        }
    };
}
kind::record_kinds!(record_enum);

/// A record borrowing its strings and bytes (the hot encode path).
pub type RecordRef<'a> = Record<&'a str, &'a [u8]>;
/// A record owning shared strings and bytes (after decoding).
pub type RecordBuf = Record<Name, Payload>;

/// A string type the shard can keep: clones a [`Name`], copies a `&str`.
pub trait ToName: AsRef<str> {
    /// This string as a shared [`Name`].
    fn to_name(&self) -> Name;
}

/// A bytes type the shard can keep: clones a [`Payload`], copies a `&[u8]`.
pub trait ToPayload: AsRef<[u8]> {
    /// These bytes as a shared [`Payload`].
    fn to_payload(&self) -> Payload;
}

impl ToName for &str {
    fn to_name(&self) -> Name {
        Name::from(*self)
    }
}

impl ToName for Name {
    fn to_name(&self) -> Name {
        self.clone()
    }
}

impl ToPayload for &[u8] {
    fn to_payload(&self) -> Payload {
        Payload::from(*self)
    }
}

impl ToPayload for Payload {
    fn to_payload(&self) -> Payload {
        self.clone()
    }
}

#[cfg(test)]
mod tests;
