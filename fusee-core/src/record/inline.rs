//! Owned decoding of canonical records with shared names.

use rustc_hash::FxHashSet;

use super::canonical::{decode_body, iter_canonical};
use super::{Name, Payload, RecordBuf};
use crate::wire::DecodeResult;

/// At most this many distinct strings are remembered; when full, the cache
/// starts over, so a stream of distinct strings (IDs, garbage) cannot grow
/// it without bound.
const CACHE_ENTRIES: usize = 1024;
/// Longer strings are not shared: they are rarely repeated names, and the
/// cache's memory stays under `CACHE_ENTRIES * CACHE_NAME_BYTES`.
const CACHE_NAME_BYTES: usize = 256;

/// A streaming decoder of canonical records into owned [`RecordBuf`]s in
/// which equal strings (step names, workflow types, IDs) decoded by the
/// same decoder share one [`Name`] allocation, and every empty payload
/// shares one [`Payload`].
///
/// Memory beyond the records it returns is bounded: at most 1,024 remembered
/// strings of at most 256 bytes each.
#[derive(Debug)]
pub struct InlineDecoder {
    names: FxHashSet<Name>,
    empty: Payload,
}

impl Default for InlineDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl InlineDecoder {
    /// A decoder that remembers no string yet.
    pub fn new() -> Self {
        Self {
            names: FxHashSet::default(),
            empty: Payload::from(&[][..]),
        }
    }

    /// Decodes exactly one canonical body (no length prefix), as
    /// [`decode_body`] does, into an owned record.
    pub fn decode(&mut self, body: &[u8]) -> DecodeResult<RecordBuf> {
        let rec = decode_body(body)?;
        Ok(self.own(&rec))
    }

    /// Decodes every canonical record concatenated in `bytes`; any malformed
    /// record fails the whole call. The list grows only with records
    /// actually decoded.
    pub fn decode_all(&mut self, bytes: &[u8]) -> DecodeResult<Vec<RecordBuf>> {
        let mut out = Vec::new();
        for item in iter_canonical(bytes) {
            let (rec, _) = item?;
            out.push(self.own(&rec));
        }
        Ok(out)
    }

    /// How many distinct strings it remembers now (at most 1,024).
    pub fn remembered(&self) -> usize {
        self.names.len()
    }

    /// An owned copy of a borrowed record, sharing remembered strings.
    pub fn own(&mut self, rec: &super::RecordRef<'_>) -> RecordBuf {
        let empty = &self.empty;
        let names = &mut self.names;
        rec.map(
            |s| share(names, s),
            |b| {
                if b.is_empty() {
                    empty.clone()
                } else {
                    Payload::from(*b)
                }
            },
        )
    }
}

fn share(names: &mut FxHashSet<Name>, s: &str) -> Name {
    if s.len() > CACHE_NAME_BYTES {
        return Name::from(s);
    }
    if let Some(n) = names.get(s) {
        return n.clone();
    }
    if names.len() >= CACHE_ENTRIES {
        names.clear();
    }
    let n = Name::from(s);
    names.insert(n.clone());
    n
}
