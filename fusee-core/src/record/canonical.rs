//! The canonical encoding: the one byte form of every [`Record`].
//!
//! The same bytes are a run's in-memory journal, its spilled blob in the run
//! store, the body of a log frame, a checkpoint's journals and what travels
//! over the network, so a record means the same everywhere and is encoded
//! once.
//!
//! # Framing
//!
//! A *canonical record* is a varint `L` followed by `L` bytes of *body*.
//! A journal or blob is canonical records concatenated: no count, no
//! separator, no terminator. `1 <= L <=` [`MAX_BODY`]. Containers that carry
//! their own length (segment frames) store the body alone
//! ([`encode_body`]).
//!
//! # Field types
//!
//! Varints are the LEB128 of [`crate::wire`]. Every integer wider than a
//! byte is a varint (most are small: sequence numbers, attempts, run IDs,
//! zeros for "none"; a millisecond timestamp takes 6 bytes instead of 8).
//!
//! | notation | bytes |
//! |---|---|
//! | `u8` | one byte, any value |
//! | `v32` | a varint whose value fits 32 bits (at most 5 bytes) |
//! | `v64` | a varint (at most 10 bytes) |
//! | `run` | a `v64` in `1..=`[`MAX_RUN`] (run IDs use 48 bits; 0 is no run) |
//! | `str` | a `v64` length `n <=` [`MAX_PAYLOAD`], then `n` bytes of UTF-8 |
//! | `bytes` | a `v64` length `n <=` [`MAX_PAYLOAD`], then `n` bytes |
//! | `opt<T>` | `u8` 0 for `None`, or `u8` 1 followed by `T`; any other byte is an error |
//! | `tail<T>` | nothing for `None`, `T` for `Some`: only as a kind's last field, present exactly when the body has bytes left after the fields before it |
//! | `status` | `u8`: the [`Status`] tag, 0 (`Ok`) to 6 (`Reset`) |
//! | `parent` | [`ParentRef`](super::ParentRef): `shard: v32`, `run: run`, `seq: v32` |
//! | `origin` | [`Origin`](super::Origin): `run: run`, `cause: u8` |
//! | `outcome` | [`WaitOutcome`]: `u8` 0 then the signal ordinal `v64` (`Signal`); `u8` 1 (`TimedOut`); `u8` 2 (`Abandoned`) |
//! | `update` | [`StartUpdate`](super::StartUpdate): `id: str`, `name: str`, `payload: bytes` |
//! | `meta` | [`StartMeta`](super::StartMeta): `attributes: bytes`, `memo: bytes` |
//! | `grace` | [`CancelGrace`](super::CancelGrace): `until_ms: v64`, `grace_ms: v64` |
//!
//! The `u8` fields `codec`, `policy`, `flags`, `kind` and an origin's
//! `cause` are stored as given: their meaning belongs to the shard (see
//! [`policy`](super::policy), [`origin`](super::origin),
//! [`value_kind`](super::value_kind)), and a future value must not make old
//! decoders fail.
//!
//! # Bodies
//!
//! Every body is the kind tag ([`kind`](super::kind)) as one byte, then
//! `run: run`, then the kind's other fields in the order of [`Record`]'s
//! fields. That order and each field's wire type are written once, in the
//! record table (`record_kinds!` in `record/kind.rs`), which generates the
//! encoder and decoder walks; each [`Record`] variant's documentation shows
//! the line the table gives it (for example `Step`: tag 2; body: `tag`,
//! `run: run`, `seq: v32`, `name: str`, `attempt: v32`, `status: status`,
//! `payload: bytes`, `ended_ms: tail<v64>`). [`PAUSED`](super::PAUSED) as
//! an `Attempt`'s `retry_at_ms` takes 10 bytes. The golden test
//! `tests/record_golden.rs` pins every kind's bytes.
//!
//! Example: `Step { run: 1, seq: 2, name: "a", attempt: 1, status: Ok,
//! payload: b"hi", ended_ms: None }` is the 11 bytes
//! `0a 02 01 02 01 61 01 00 02 68 69`: length 10, tag 2, run 1, seq 2,
//! name (length 1, `a`), attempt 1, status 0, payload (length 2, `hi`).
//! With `ended_ms: Some(1_700_000_000_000)` the body goes on with that
//! varint (6 bytes: `80 d0 95 ff bc 31`) and the length is 16.
//!
//! # Growing a kind
//!
//! A field is added to a stored kind only at its end, as a `tail<T>`:
//! the bodies written before it end where it begins and decode with it
//! `None`, and a record without it encodes to exactly those bytes, so
//! old and new bodies keep one form each. `Step` and `Attempt` grew
//! `ended_ms` (when the attempt's function returned) this way: a
//! millisecond timestamp adds 6 bytes to each (7 from September 2039,
//! when the time passes 2^41 ms). `Cancel` grew `grace` (`tail<grace>`,
//! a cancel's grace, which older builds wrote as an `Attributes` record
//! after the `Cancel`): a cancel and its grace are one record, so no crash
//! keeps the one without the other.
//!
//! # Invariants
//!
//! - **One form per record.** Decoders accept a varint only in its shortest
//!   form and an option marker only as 0 or 1, read a tail only when bytes
//!   are left and refuse bytes left after the last field,
//!   so bytes decode only if they are exactly what [`encode_canonical`]
//!   writes for the result: `encode(decode(b)) == b` and
//!   `decode(encode(r)) == r` (for every `r` that [`check_limits`] accepts).
//!   Comparing or hashing canonical bytes therefore compares records.
//! - **Limits.** Strings and payloads are at most [`MAX_PAYLOAD`] bytes, a
//!   body at most [`MAX_BODY`], run IDs in `1..=`[`MAX_RUN`]. Encoding cannot
//!   fail, so a record outside the limits encodes to bytes that no decoder
//!   accepts: the engine refuses such records first with [`check_limits`].
//! - **No checksum.** The encoding detects malformed bytes, not changed
//!   ones: a flipped bit inside a payload decodes to a different valid
//!   record. Integrity belongs to the containers (segment and store frames
//!   carry checksums).
//!
//! # Garbage and torn input
//!
//! Any bytes (a torn tail, a corrupt blob, hostile input) make a decoder
//! return a [`DecodeError`], never panic. The borrowed decoders allocate
//! nothing but the boxes of a `Start`'s update and meta (after their fields
//! decoded); the owned ones allocate one
//! shared string or payload per field actually present in the input, and a
//! list's length grows only with records actually decoded (each takes at
//! least 4 input bytes), so no length prefix can make a decoder allocate
//! more than its input justifies.

use thiserror::Error;

use super::fields::{OUTCOME_ABANDONED, OUTCOME_SIGNAL, OUTCOME_TIMED_OUT};
use super::{FieldSink, FieldSource, MAX_RUN, Record, RecordRef, RunId, Status, WaitOutcome};
use crate::wire::{self, DecodeError, DecodeResult, MAX_PAYLOAD, varint_len};

/// The largest canonical body: room for one payload at the limit
/// ([`MAX_PAYLOAD`]) and as much again for the record's other fields.
/// Decoders refuse a longer length prefix before looking at its bytes.
pub const MAX_BODY: usize = 2 * MAX_PAYLOAD;

/// Why [`check_limits`] refuses a record: encoded, it would be bytes no
/// decoder accepts.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LimitError {
    /// A string or payload is longer than [`MAX_PAYLOAD`].
    #[error("{kind} record of run {run}: `{field}` is {len} bytes, over the {limit}-byte limit")]
    FieldTooLarge {
        /// The record's kind name.
        kind: &'static str,
        /// The record's run.
        run: RunId,
        /// Which field.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
        /// [`MAX_PAYLOAD`].
        limit: usize,
    },
    /// The whole body is longer than [`MAX_BODY`].
    #[error("{kind} record of run {run}: body is {len} bytes, over the {limit}-byte limit")]
    BodyTooLarge {
        /// The record's kind name.
        kind: &'static str,
        /// The record's run.
        run: RunId,
        /// The body's length in bytes.
        len: usize,
        /// [`MAX_BODY`].
        limit: usize,
    },
    /// A run ID is 0 or needs more than 48 bits.
    #[error("{kind} record: `{field}` is run {value}, outside 1..={max}")]
    RunOutOfRange {
        /// The record's kind name.
        kind: &'static str,
        /// Which field (`run`, `parent.run`, `from.run`, `caller.run`).
        field: &'static str,
        /// The run ID given.
        value: RunId,
        /// [`MAX_RUN`].
        max: RunId,
    },
}

/// The canonical body writer: the tag, then the fields as
/// [`Record::write_fields`] hands them over.
struct Write<'a>(&'a mut Vec<u8>);

impl FieldSink for Write<'_> {
    #[inline]
    fn u8(&mut self, _field: &'static str, v: u8) {
        self.0.push(v);
    }
    #[inline]
    fn v64(&mut self, _field: &'static str, v: u64) {
        wire::put_varint(self.0, v);
    }
    #[inline]
    fn bytes(&mut self, _field: &'static str, b: &[u8]) {
        wire::put_bytes(self.0, b);
    }
}

/// Counts the bytes a body takes.
struct Count(usize);

impl FieldSink for Count {
    #[inline]
    fn u8(&mut self, _field: &'static str, _v: u8) {
        self.0 += 1;
    }
    #[inline]
    fn v64(&mut self, _field: &'static str, v: u64) {
        self.0 += varint_len(v);
    }
    #[inline]
    fn bytes(&mut self, _field: &'static str, b: &[u8]) {
        self.0 += varint_len(b.len() as u64) + b.len();
    }
}

/// Counts the bytes a body takes and keeps the first limit it breaks.
struct Check {
    kind: &'static str,
    run: RunId,
    len: usize,
    error: Option<LimitError>,
}

impl Check {
    fn fail(&mut self, e: LimitError) {
        self.error.get_or_insert(e);
    }
}

impl FieldSink for Check {
    fn u8(&mut self, _field: &'static str, _v: u8) {
        self.len += 1;
    }
    fn v64(&mut self, _field: &'static str, v: u64) {
        self.len += varint_len(v);
    }
    fn bytes(&mut self, field: &'static str, b: &[u8]) {
        if b.len() > MAX_PAYLOAD {
            self.fail(LimitError::FieldTooLarge {
                kind: self.kind,
                run: self.run,
                field,
                len: b.len(),
                limit: MAX_PAYLOAD,
            });
        }
        self.len = self
            .len
            .saturating_add(varint_len(b.len() as u64) + b.len());
    }
    fn run(&mut self, field: &'static str, v: RunId) {
        if !(1..=MAX_RUN).contains(&v) {
            self.fail(LimitError::RunOutOfRange {
                kind: self.kind,
                field,
                value: v,
                max: MAX_RUN,
            });
        }
        self.v64(field, v);
    }
}

/// Writes `rec`'s body (tag, then `run` and the fields) to `w`: the one
/// walk behind encoding, measuring and limit checking, so the three cannot
/// disagree.
#[inline]
fn write_body<S: AsRef<str>, B: AsRef<[u8]>, W: FieldSink>(rec: &Record<S, B>, w: &mut W) {
    w.u8("tag", rec.kind());
    rec.write_fields(w);
}

/// The length of `rec`'s canonical body (without the length prefix): what
/// [`encode_body`] appends.
pub fn body_len<S: AsRef<str>, B: AsRef<[u8]>>(rec: &Record<S, B>) -> usize {
    let mut c = Count(0);
    write_body(rec, &mut c);
    c.0
}

/// The length of `rec`'s whole canonical record (length prefix and body):
/// what [`encode_canonical`] appends.
pub fn canonical_len<S: AsRef<str>, B: AsRef<[u8]>>(rec: &Record<S, B>) -> usize {
    let len = body_len(rec);
    varint_len(len as u64) + len
}

/// Appends `rec`'s canonical body (kind tag and fields, no length prefix)
/// to `out`, for containers that carry the length themselves.
pub fn encode_body<S: AsRef<str>, B: AsRef<[u8]>>(rec: &Record<S, B>, out: &mut Vec<u8>) {
    let before = out.len();
    write_body(rec, &mut Write(out));
    debug_assert_eq!(out.len() - before, body_len(rec));
}

/// Appends `rec` as one canonical record (varint body length, then the
/// body) to `out`, in one walk of its fields: the body goes after a
/// one-byte length, right for bodies under 128 bytes (a step's records),
/// and a longer body is moved up for its longer length. (Measuring first
/// took about a third of encoding.)
pub fn encode_canonical<S: AsRef<str>, B: AsRef<[u8]>>(rec: &Record<S, B>, out: &mut Vec<u8>) {
    let start = out.len();
    out.push(0);
    write_body(rec, &mut Write(out));
    let len = out.len() - start - 1;
    if len < 0x80 {
        out[start] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(varint_len(len as u64));
        wire::put_varint(&mut prefix, len as u64);
        out.splice(start..start + 1, prefix);
    }
    debug_assert_eq!(
        out.len() - start,
        canonical_len(rec),
        "canonical_len disagrees"
    );
}

/// Checks that `rec`, encoded, is decodable: run IDs in `1..=`[`MAX_RUN`],
/// every string and payload at most [`MAX_PAYLOAD`] bytes, the body at most
/// [`MAX_BODY`]. Returns the first broken limit in field order.
pub fn check_limits<S: AsRef<str>, B: AsRef<[u8]>>(rec: &Record<S, B>) -> Result<(), LimitError> {
    let mut c = Check {
        kind: rec.kind_name(),
        run: rec.run(),
        len: 0,
        error: None,
    };
    write_body(rec, &mut c);
    if let Some(e) = c.error {
        return Err(e);
    }
    if c.len > MAX_BODY {
        return Err(LimitError::BodyTooLarge {
            kind: c.kind,
            run: c.run,
            len: c.len,
            limit: MAX_BODY,
        });
    }
    Ok(())
}

/// A strict cursor over one body: shortest-form varints only, bounded
/// lengths. (Not [`crate::wire::Reader`]: the hot path wants a one-byte varint fast
/// path and the shortest-form check folded into the varint loop.)
struct Body<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> FieldSource<&'a str, &'a [u8]> for Body<'a> {
    type Error = DecodeError;

    #[inline]
    fn u8(&mut self, _field: &'static str) -> DecodeResult<u8> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or(DecodeError::new("truncated"))?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    fn v64(&mut self, _field: &'static str) -> DecodeResult<u64> {
        strict_varint(self.bytes, &mut self.pos)
    }

    #[inline]
    fn v32(&mut self, field: &'static str) -> DecodeResult<u32> {
        u32::try_from(self.v64(field)?).map_err(|_| DecodeError::new("varint overflows 32 bits"))
    }

    #[inline]
    fn run(&mut self, field: &'static str) -> DecodeResult<RunId> {
        let v = self.v64(field)?;
        if (1..=MAX_RUN).contains(&v) {
            Ok(v)
        } else {
            Err(DecodeError::new("run ID outside 1..=2^48-1"))
        }
    }

    #[inline]
    fn bytes(&mut self, field: &'static str) -> DecodeResult<&'a [u8]> {
        let n = self.v64(field)?;
        if n > MAX_PAYLOAD as u64 {
            return Err(DecodeError::new("length over the payload limit"));
        }
        // Fits: at most MAX_PAYLOAD.
        let n = n as usize;
        let end = self.pos + n;
        let Some(b) = self.bytes.get(self.pos..end) else {
            return Err(DecodeError::new("length past the end of input"));
        };
        self.pos = end;
        Ok(b)
    }

    #[inline]
    fn str(&mut self, field: &'static str) -> DecodeResult<&'a str> {
        std::str::from_utf8(self.bytes(field)?).map_err(|_| DecodeError::new("string is not UTF-8"))
    }

    #[inline]
    fn present(&mut self, field: &'static str) -> DecodeResult<bool> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::new("option marker is neither 0 nor 1")),
        }
    }

    #[inline]
    fn more(&mut self, _field: &'static str) -> DecodeResult<bool> {
        Ok(self.pos < self.bytes.len())
    }

    #[inline]
    fn status(&mut self, field: &'static str) -> DecodeResult<Status> {
        Status::from_u8(self.u8(field)?)
    }

    #[inline]
    fn outcome(&mut self, field: &'static str) -> DecodeResult<WaitOutcome> {
        Ok(match self.u8(field)? {
            OUTCOME_SIGNAL => WaitOutcome::Signal(self.v64(field)?),
            OUTCOME_TIMED_OUT => WaitOutcome::TimedOut,
            OUTCOME_ABANDONED => WaitOutcome::Abandoned,
            _ => return Err(DecodeError::new("unknown wait outcome")),
        })
    }
}

/// The varint at `*pos` in `bytes`, which must be in its shortest form (a
/// longer one would give one record two encodings); advances `*pos` past it.
#[inline]
fn strict_varint(bytes: &[u8], pos: &mut usize) -> DecodeResult<u64> {
    let rest = bytes.get(*pos..).unwrap_or_default();
    match rest.first() {
        Some(&b) if b < 0x80 => {
            *pos += 1;
            Ok(u64::from(b))
        }
        Some(_) => long_varint(rest, pos),
        None => Err(DecodeError::new("truncated varint")),
    }
}

/// [`strict_varint`] past its first byte, which has the continuation bit.
#[inline(never)]
fn long_varint(rest: &[u8], pos: &mut usize) -> DecodeResult<u64> {
    let mut v = 0u64;
    for (i, &b) in rest.iter().take(10).enumerate() {
        // The 10th byte may only carry the 64th bit.
        if i == 9 && b > 1 {
            return Err(DecodeError::new("varint overflows 64 bits"));
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            // A zero last group after the first byte adds nothing: a
            // shorter form exists.
            if b == 0 {
                return Err(DecodeError::new("varint not in its shortest form"));
            }
            *pos += i + 1;
            debug_assert_eq!(i + 1, varint_len(v));
            return Ok(v);
        }
    }
    Err(DecodeError::new("truncated varint"))
}

/// Decodes exactly one canonical body (no length prefix), borrowing its
/// strings and bytes from `body`. Fails on any malformed input, including
/// bytes left over after the record.
pub fn decode_body(body: &[u8]) -> DecodeResult<RecordRef<'_>> {
    if body.len() > MAX_BODY {
        return Err(DecodeError::new("record body over the size limit"));
    }
    let mut d = Body {
        bytes: body,
        pos: 0,
    };
    let tag = d.u8("tag")?;
    let rec = Record::read_fields(tag, &mut d)?.ok_or(DecodeError::new("unknown record kind"))?;
    if d.pos != body.len() {
        return Err(DecodeError::new("trailing bytes"));
    }
    Ok(rec)
}

/// Splits the first canonical record off `bytes`: its body and its whole
/// length (prefix included).
#[inline]
fn split_first(bytes: &[u8]) -> DecodeResult<(&[u8], usize)> {
    let mut pos = 0;
    let len = strict_varint(bytes, &mut pos)?;
    if len == 0 {
        return Err(DecodeError::new("empty record body"));
    }
    if len > MAX_BODY as u64 {
        return Err(DecodeError::new("record length over the body limit"));
    }
    // Fits: at most MAX_BODY.
    let end = pos + len as usize;
    let Some(body) = bytes.get(pos..end) else {
        return Err(DecodeError::new("record length past the end of input"));
    };
    Ok((body, end))
}

/// A borrowed, streaming walk over concatenated canonical records. Yields
/// each record with its whole canonical bytes (length prefix included);
/// after the first error it yields nothing more.
#[derive(Clone, Debug)]
pub struct CanonicalIter<'a> {
    rest: &'a [u8],
    /// Length of the whole input, for [`Self::offset`].
    len: usize,
    failed: bool,
}

impl<'a> CanonicalIter<'a> {
    /// Bytes not walked yet: empty once the walk ends without error; after
    /// an error, the bytes from the start of the record that failed.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// Where [`Self::rest`] starts in the input: after an error, the offset
    /// of the record that failed (for error messages).
    pub fn offset(&self) -> usize {
        self.len - self.rest.len()
    }
}

impl<'a> Iterator for CanonicalIter<'a> {
    type Item = DecodeResult<(RecordRef<'a>, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let step = split_first(self.rest).and_then(|(body, total)| {
            let rec = decode_body(body)?;
            Ok((rec, total))
        });
        match step {
            Ok((rec, total)) => {
                // Every record takes at least 4 bytes (prefix, tag, run and one
                // more field): the walk ends within `bytes.len() / 4` steps.
                debug_assert!(total >= 4 && total <= self.rest.len());
                let (whole, rest) = self.rest.split_at(total);
                self.rest = rest;
                Some(Ok((rec, whole)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for CanonicalIter<'_> {}

/// Walks the canonical records concatenated in `bytes`, borrowing from it.
pub fn iter_canonical(bytes: &[u8]) -> CanonicalIter<'_> {
    CanonicalIter {
        rest: bytes,
        len: bytes.len(),
        failed: false,
    }
}

/// One step of [`iter_canonical_passing`]: a record decoded, or a run of
/// consecutive records of the passed kind, framed only.
#[derive(Clone, Debug)]
pub enum Walked<'a> {
    /// A record of another kind, decoded, with its whole canonical bytes.
    Record(RecordRef<'a>, &'a [u8]),
    /// `count` (at least 1) consecutive records of the passed kind: their
    /// whole canonical bytes (length prefixes included), their bodies not
    /// decoded.
    Passed {
        /// The records' bytes, concatenated as in the input.
        bytes: &'a [u8],
        /// How many records `bytes` holds.
        count: u32,
    },
}

/// A walk like [`CanonicalIter`] that does not decode the records of one
/// kind: see [`iter_canonical_passing`].
#[derive(Clone, Debug)]
pub struct PassingIter<'a> {
    inner: CanonicalIter<'a>,
    pass: u8,
}

impl PassingIter<'_> {
    /// Where the walk is in its input (see [`CanonicalIter::offset`]).
    pub fn offset(&self) -> usize {
        self.inner.offset()
    }

    /// The bytes and count of the passed records at the front of the
    /// rest: framing each, stopping at another kind, the end, or bytes
    /// that do not frame (the error, if it is the first).
    fn passed(&self) -> DecodeResult<(usize, u32)> {
        let rest = self.inner.rest;
        let (mut end, mut count) = (0usize, 0u32);
        while end < rest.len() && count < u32::MAX {
            match split_first(&rest[end..]) {
                Ok((body, total)) if body.first() == Some(&self.pass) => {
                    end += total;
                    count += 1;
                }
                Ok(_) => break,
                Err(e) if count == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok((end, count))
    }
}

impl<'a> Iterator for PassingIter<'a> {
    type Item = DecodeResult<Walked<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.inner.failed || self.inner.rest.is_empty() {
            return None;
        }
        match self.passed() {
            Ok((0, _)) => self
                .inner
                .next()
                .map(|r| r.map(|(rec, whole)| Walked::Record(rec, whole))),
            Ok((end, count)) => {
                let (bytes, rest) = self.inner.rest.split_at(end);
                self.inner.rest = rest;
                Some(Ok(Walked::Passed { bytes, count }))
            }
            Err(e) => {
                self.inner.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for PassingIter<'_> {}

/// Walks the canonical records in `bytes` like [`iter_canonical`], except
/// that records whose kind tag is `pass` are only framed (each length
/// checked against the input), not decoded, and a run of them comes as
/// one item: a walk that has nothing to do with a kind (stream chunks, for
/// every walk but a subscriber's) pays a varint and a byte for each of
/// its records instead of a decode. Only for bytes whose integrity
/// something else checked (a frame's or a checkpoint's crc, bytes this
/// process encoded): a passed body's damage goes unseen here.
pub fn iter_canonical_passing(bytes: &[u8], pass: u8) -> PassingIter<'_> {
    PassingIter {
        inner: iter_canonical(bytes),
        pass,
    }
}

/// The first record of kind `tag` among the canonical records in
/// `bytes`, decoded; the records before it are only framed (a varint and
/// a byte each, not a decode: a finished run's result call reads its
/// `Done` this way). `None` if there is none, or the records before it do
/// not frame. Like [`iter_canonical_passing`], only for bytes whose
/// integrity something else checked.
pub fn find_kind(bytes: &[u8], tag: u8) -> Option<DecodeResult<RecordRef<'_>>> {
    let mut rest = bytes;
    while !rest.is_empty() {
        let (body, total) = split_first(rest).ok()?;
        if body.first() == Some(&tag) {
            return Some(decode_body(body));
        }
        rest = &rest[total..];
    }
    None
}

/// The kind tag and whole length (prefix included) of the first canonical
/// record in `bytes`, framed, not decoded: what a walk that moves records
/// without reading them (stream chunks set apart from a journal,
/// `crate::store::split_chunks`) needs of each.
pub fn frame_first(bytes: &[u8]) -> DecodeResult<(u8, usize)> {
    let (body, total) = split_first(bytes)?;
    // `split_first` refuses an empty body.
    Ok((body.first().copied().unwrap_or(0), total))
}

/// Decodes every canonical record in `bytes` into owned records (repeated
/// names share one allocation, see [`InlineDecoder`](super::InlineDecoder)).
/// Any malformed record, including a torn last one, fails the whole call.
pub fn decode_canonical_all(bytes: &[u8]) -> DecodeResult<Vec<super::RecordBuf>> {
    super::InlineDecoder::new().decode_all(bytes)
}
