//! The two field walks every encoder and decoder of records is built on,
//! generated from the kinds table (see [`kind`]).
//!
//! [`Record::write_fields`] hands a record's `run` and fields, in canonical
//! order, to a [`FieldSink`]; [`Record::read_fields`] builds a record of a
//! given kind from the values a [`FieldSource`] yields in that same order.
//! The canonical encoder, its length count and [`check_limits`] are sinks,
//! the canonical decoder is a source (all in [`canonical`]), and so is the
//! random record generator of the tests. Composite fields decompose into
//! the wire types of [`canonical`]'s notation, with dotted names: an
//! `opt<parent>` field `caller` is `present("caller")`, then, if present,
//! `v32("caller.shard")`, `run("caller.run")`, `v32("caller.seq")`. A
//! `tail<v64>` field `ended_ms` is `v64("ended_ms")` when present and
//! nothing when absent for a sink; a source is asked `more("ended_ms")`
//! first. A `tail<grace>` field `grace` is, when present,
//! `v64("grace.until_ms")`, `v64("grace.grace_ms")`.
//!
//! [`check_limits`]: super::check_limits
//! [`canonical`]: super::canonical

use super::{
    CancelGrace, Origin, ParentRef, Record, RunId, StartMeta, StartUpdate, Status, WaitOutcome,
    kind,
};

/// Where [`Record::write_fields`] puts a record's fields, each with its
/// name. The provided methods are the canonical decomposition of each wire
/// type into `u8`, `v64` and `bytes`, so a byte sink implements only those
/// three.
pub trait FieldSink {
    /// A one-byte field.
    fn u8(&mut self, field: &'static str, v: u8);
    /// A varint field.
    fn v64(&mut self, field: &'static str, v: u64);
    /// A length-prefixed bytes field.
    fn bytes(&mut self, field: &'static str, v: &[u8]);

    /// A varint field that fits 32 bits.
    #[inline]
    fn v32(&mut self, field: &'static str, v: u32) {
        self.v64(field, u64::from(v));
    }
    /// A run ID (a varint in `1..=`[`MAX_RUN`](super::MAX_RUN) if decodable).
    #[inline]
    fn run(&mut self, field: &'static str, v: RunId) {
        self.v64(field, v);
    }
    /// A UTF-8 string, length-prefixed like bytes.
    #[inline]
    fn str(&mut self, field: &'static str, v: &str) {
        self.bytes(field, v.as_bytes());
    }
    /// A [`Status`]: its tag as one byte.
    #[inline]
    fn status(&mut self, field: &'static str, v: Status) {
        self.u8(field, v as u8);
    }
    /// A [`WaitOutcome`]: a byte (0 signal, 1 timed out, 2 abandoned), then
    /// the signal's ordinal for a signal.
    #[inline]
    fn outcome(&mut self, field: &'static str, v: WaitOutcome) {
        match v {
            WaitOutcome::Signal(ordinal) => {
                self.u8(field, OUTCOME_SIGNAL);
                self.v64(field, ordinal);
            }
            WaitOutcome::TimedOut => self.u8(field, OUTCOME_TIMED_OUT),
            WaitOutcome::Abandoned => self.u8(field, OUTCOME_ABANDONED),
        }
    }
    /// The marker of an optional field: one byte, 1 present, 0 absent.
    #[inline]
    fn present(&mut self, field: &'static str, v: bool) {
        self.u8(field, u8::from(v));
    }
}

/// Where [`Record::read_fields`] takes a record's fields from, each asked
/// for by name in canonical order. The canonical decoder reads them from
/// bytes and fails with a reason; a generator may draw them at random.
pub trait FieldSource<S, B> {
    /// Why a value could not be had.
    type Error;
    /// A one-byte field.
    fn u8(&mut self, field: &'static str) -> Result<u8, Self::Error>;
    /// A varint field that fits 32 bits.
    fn v32(&mut self, field: &'static str) -> Result<u32, Self::Error>;
    /// A varint field.
    fn v64(&mut self, field: &'static str) -> Result<u64, Self::Error>;
    /// A run ID.
    fn run(&mut self, field: &'static str) -> Result<RunId, Self::Error>;
    /// A string.
    fn str(&mut self, field: &'static str) -> Result<S, Self::Error>;
    /// A bytes field.
    fn bytes(&mut self, field: &'static str) -> Result<B, Self::Error>;
    /// A [`Status`].
    fn status(&mut self, field: &'static str) -> Result<Status, Self::Error>;
    /// A [`WaitOutcome`].
    fn outcome(&mut self, field: &'static str) -> Result<WaitOutcome, Self::Error>;
    /// Whether an optional field is present.
    fn present(&mut self, field: &'static str) -> Result<bool, Self::Error>;
    /// Whether a trailing optional field (`tail<T>`, always a kind's last)
    /// is present: the canonical decoder answers whether the body has
    /// bytes left, so bodies written before the field existed read as
    /// `None`.
    fn more(&mut self, field: &'static str) -> Result<bool, Self::Error>;
}

/// The canonical bytes of [`WaitOutcome`]'s arms.
pub(super) const OUTCOME_SIGNAL: u8 = 0;
pub(super) const OUTCOME_TIMED_OUT: u8 = 1;
pub(super) const OUTCOME_ABANDONED: u8 = 2;

/// Writes one field of wire type `[..]` to the sink `$w`.
macro_rules! put {
    ($w:ident, $f:ident, $v:expr, [opt<bytes>]) => {
        match $v {
            None => $w.present(stringify!($f), false),
            Some(b) => {
                $w.present(stringify!($f), true);
                $w.bytes(stringify!($f), b.as_ref());
            }
        }
    };
    ($w:ident, $f:ident, $v:expr, [opt<parent>]) => {
        match $v {
            None => $w.present(stringify!($f), false),
            Some(p) => {
                $w.present(stringify!($f), true);
                $w.v32(concat!(stringify!($f), ".shard"), p.shard);
                $w.run(concat!(stringify!($f), ".run"), p.run);
                $w.v32(concat!(stringify!($f), ".seq"), p.seq);
            }
        }
    };
    ($w:ident, $f:ident, $v:expr, [opt<origin>]) => {
        match $v {
            None => $w.present(stringify!($f), false),
            Some(o) => {
                $w.present(stringify!($f), true);
                $w.run(concat!(stringify!($f), ".run"), o.run);
                $w.u8(concat!(stringify!($f), ".cause"), o.cause);
            }
        }
    };
    ($w:ident, $f:ident, $v:expr, [opt<update>]) => {
        match $v {
            None => $w.present(stringify!($f), false),
            Some(u) => {
                $w.present(stringify!($f), true);
                $w.str(concat!(stringify!($f), ".id"), u.id.as_ref());
                $w.str(concat!(stringify!($f), ".name"), u.name.as_ref());
                $w.bytes(concat!(stringify!($f), ".payload"), u.payload.as_ref());
            }
        }
    };
    ($w:ident, $f:ident, $v:expr, [opt<meta>]) => {
        match $v {
            None => $w.present(stringify!($f), false),
            Some(m) => {
                $w.present(stringify!($f), true);
                $w.bytes(
                    concat!(stringify!($f), ".attributes"),
                    m.attributes.as_ref(),
                );
                $w.bytes(concat!(stringify!($f), ".memo"), m.memo.as_ref());
            }
        }
    };
    // A tail: nothing at all when absent (no marker), so a body without
    // it is the body of a record written before the field existed.
    ($w:ident, $f:ident, $v:expr, [tail<v64>]) => {
        if let Some(v) = $v {
            $w.v64(stringify!($f), *v);
        }
    };
    ($w:ident, $f:ident, $v:expr, [tail<grace>]) => {
        if let Some(g) = $v {
            $w.v64(concat!(stringify!($f), ".until_ms"), g.until_ms);
            $w.v64(concat!(stringify!($f), ".grace_ms"), g.grace_ms);
        }
    };
    ($w:ident, $f:ident, $v:expr, [str]) => {
        $w.str(stringify!($f), $v.as_ref())
    };
    ($w:ident, $f:ident, $v:expr, [bytes]) => {
        $w.bytes(stringify!($f), $v.as_ref())
    };
    ($w:ident, $f:ident, $v:expr, [$wire:ident]) => {
        $w.$wire(stringify!($f), *$v)
    };
}

/// Reads one field of wire type `[..]` from the source `$r`. A struct
/// expression evaluates its fields in the order written, which is the
/// table's, so fields are asked for in canonical order; boxes are made only
/// after their fields were read.
macro_rules! take {
    ($r:ident, $f:ident, [opt<bytes>]) => {
        if $r.present(stringify!($f))? {
            Some($r.bytes(stringify!($f))?)
        } else {
            None
        }
    };
    ($r:ident, $f:ident, [opt<parent>]) => {
        if $r.present(stringify!($f))? {
            Some(ParentRef {
                shard: $r.v32(concat!(stringify!($f), ".shard"))?,
                run: $r.run(concat!(stringify!($f), ".run"))?,
                seq: $r.v32(concat!(stringify!($f), ".seq"))?,
            })
        } else {
            None
        }
    };
    ($r:ident, $f:ident, [opt<origin>]) => {
        if $r.present(stringify!($f))? {
            Some(Origin {
                run: $r.run(concat!(stringify!($f), ".run"))?,
                cause: $r.u8(concat!(stringify!($f), ".cause"))?,
            })
        } else {
            None
        }
    };
    ($r:ident, $f:ident, [opt<update>]) => {
        if $r.present(stringify!($f))? {
            Some(Box::new(StartUpdate {
                id: $r.str(concat!(stringify!($f), ".id"))?,
                name: $r.str(concat!(stringify!($f), ".name"))?,
                payload: $r.bytes(concat!(stringify!($f), ".payload"))?,
            }))
        } else {
            None
        }
    };
    ($r:ident, $f:ident, [opt<meta>]) => {
        if $r.present(stringify!($f))? {
            Some(Box::new(StartMeta {
                attributes: $r.bytes(concat!(stringify!($f), ".attributes"))?,
                memo: $r.bytes(concat!(stringify!($f), ".memo"))?,
            }))
        } else {
            None
        }
    };
    ($r:ident, $f:ident, [tail<v64>]) => {
        if $r.more(stringify!($f))? {
            Some($r.v64(stringify!($f))?)
        } else {
            None
        }
    };
    ($r:ident, $f:ident, [tail<grace>]) => {
        if $r.more(stringify!($f))? {
            Some(CancelGrace {
                until_ms: $r.v64(concat!(stringify!($f), ".until_ms"))?,
                grace_ms: $r.v64(concat!(stringify!($f), ".grace_ms"))?,
            })
        } else {
            None
        }
    };
    ($r:ident, $f:ident, [$wire:ident]) => {
        $r.$wire(stringify!($f))?
    };
}

/// Generates [`Record::write_fields`] and [`Record::read_fields`].
macro_rules! walks {
    ($(
        $(#[$doc:meta])*
        $kind:ident = $tag:literal ($konst:ident) {
            $( $(#[$fdoc:meta])* $field:ident : $ty:ty [$($wire:tt)+] ),* $(,)?
        }
    )*) => {
        impl<S: AsRef<str>, B: AsRef<[u8]>> Record<S, B> {
            /// Hands `run` and every field to `w`, in canonical order (the
            /// kind tag is not a field: see [`Record::kind`]).
            #[inline]
            pub fn write_fields<W: FieldSink + ?Sized>(&self, w: &mut W) {
                match self {
                    $(
                        Record::$kind { run, $($field),* } => {
                            w.run("run", *run);
                            $( put!(w, $field, $field, [$($wire)+]); )*
                        }
                    )*
                }
            }
        }

        impl<S, B> Record<S, B> {
            /// Builds a record of kind `tag` from `r`: asks for `run`, then,
            /// if `tag` is a kind, for its fields in canonical order;
            /// `Ok(None)` if `tag` is no kind. Stops at the first error.
            #[inline]
            pub fn read_fields<R: FieldSource<S, B> + ?Sized>(
                tag: u8,
                r: &mut R,
            ) -> Result<Option<Self>, R::Error> {
                let run = r.run("run")?;
                Ok(Some(match tag {
                    $(
                        kind::$konst => Record::$kind {
                            run,
                            $( $field: take!(r, $field, [$($wire)+]), )*
                        },
                    )*
                    _ => return Ok(None),
                }))
            }
        }
    };
}
kind::record_kinds!(walks);
