//! What every record has (run, kind, seq) and conversions between the
//! borrowed and owned instantiations of [`Record`], generated from the kinds
//! table (see [`kind`]).

use super::{Record, RecordBuf, RecordRef, RunId, StartMeta, StartUpdate, ToName, ToPayload, kind};

/// Maps one field of wire type `[..]` through the string map `$s` and the
/// bytes map `$b`; fields of no string or bytes are copied.
macro_rules! map_field {
    ($s:ident, $b:ident, $v:ident, [str]) => {
        $s($v)
    };
    ($s:ident, $b:ident, $v:ident, [bytes]) => {
        $b($v)
    };
    ($s:ident, $b:ident, $v:ident, [opt<bytes>]) => {
        $v.as_ref().map(&mut $b)
    };
    ($s:ident, $b:ident, $v:ident, [opt<update>]) => {
        $v.as_ref().map(|u| {
            Box::new(StartUpdate {
                id: $s(&u.id),
                name: $s(&u.name),
                payload: $b(&u.payload),
            })
        })
    };
    ($s:ident, $b:ident, $v:ident, [opt<meta>]) => {
        $v.as_ref().map(|m| {
            Box::new(StartMeta {
                attributes: $b(&m.attributes),
                memo: $b(&m.memo),
            })
        })
    };
    ($s:ident, $b:ident, $v:ident, [$($wire:tt)+]) => {
        *$v
    };
}

/// `Some(seq)` for a kind with a field named `seq`, else `None`: the fields
/// are munched one by one, `$this` matched again to bind the one found.
macro_rules! seq_of {
    ($this:expr, $kind:ident; seq $($rest:ident)*) => {
        match $this {
            Record::$kind { seq, .. } => Some(*seq),
            _ => None,
        }
    };
    ($this:expr, $kind:ident; $other:ident $($rest:ident)*) => {
        seq_of!($this, $kind; $($rest)*)
    };
    ($this:expr, $kind:ident;) => {
        None
    };
}

/// Generates the per-kind accessors and [`Record::map`] from the table.
macro_rules! accessors {
    ($(
        $(#[$doc:meta])*
        $kind:ident = $tag:literal ($konst:ident) {
            $( $(#[$fdoc:meta])* $field:ident : $ty:ty [$($wire:tt)+] ),* $(,)?
        }
    )*) => {
        impl<S, B> Record<S, B> {
            /// The run this record is about (every kind has one).
            pub fn run(&self) -> RunId {
                match self {
                    $( Record::$kind { run, .. } )|* => *run,
                }
            }

            /// Makes this a record of run `to`, nothing else changed (a reset
            /// copies a journal into a new run this way).
            pub fn set_run(&mut self, to: RunId) {
                match self {
                    $( Record::$kind { run, .. } )|* => *run = to,
                }
            }

            /// The operation (sequence number) this record belongs to, for the
            /// kinds that belong to one (those with a `seq` field); `None` for
            /// run-wide kinds (`Start`, `Signal`, `Cancel`, `Update`,
            /// `UpdateDone`, `Attributes`, `Done`).
            pub fn seq(&self) -> Option<super::Seq> {
                match self {
                    $( Record::$kind { .. } => seq_of!(self, $kind; $($field)*), )*
                }
            }

            /// This record's kind tag: one of [`kind`]'s constants, never 0. It
            /// is the first byte of the record's canonical body.
            pub fn kind(&self) -> u8 {
                match self {
                    $( Record::$kind { .. } => kind::$konst, )*
                }
            }

            /// The same record with every string passed through `s` and every
            /// bytes field through `b`, in canonical field order. Nothing else
            /// changes.
            pub fn map<'a, S2, B2>(
                &'a self,
                mut s: impl FnMut(&'a S) -> S2,
                mut b: impl FnMut(&'a B) -> B2,
            ) -> Record<S2, B2> {
                match self {
                    $(
                        Record::$kind { run, $($field),* } => Record::$kind {
                            run: *run,
                            $( $field: map_field!(s, b, $field, [$($wire)+]), )*
                        },
                    )*
                }
            }
        }
    };
}
kind::record_kinds!(accessors);

impl<S, B> Record<S, B> {
    /// This record's variant name, for messages.
    pub fn kind_name(&self) -> &'static str {
        // Every variant's tag has a name (pinned by `kind`'s tests).
        kind::name(self.kind()).unwrap_or("?")
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
