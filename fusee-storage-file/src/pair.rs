//! A small record kept in two files, written one after the other, so that
//! neither a torn write nor damage to one file loses it: the checkpoint
//! slots ([`crate::slot`]) and the log manifest ([`crate::manifest`]).
//!
//! # Writing
//!
//! Every write goes to the first file (`-0`), which is synced, then to the
//! second (`-1`), which is synced; only then is the write done. So after a
//! write that returned, both files hold it, and at any moment at least one
//! file holds a whole, valid record:
//! - a crash while the first is written tears at most the first, and the
//!   second still holds the previous record (or nothing, before the first
//!   write ever completed);
//! - a crash while the second is written leaves the first whole;
//! - damage to one file after a write leaves the other.
//!
//! # Reading
//!
//! Each file decodes to a valid record (with a sequence number), to nothing
//! (empty or all zeros: never written), or to an error (torn or damaged).
//! [`choose`] takes the valid record with the higher sequence number. With
//! no valid record, only one state is a crash's doing: the first file torn
//! and the second never written, the very first write interrupted; that is
//! "nothing written yet". Every other combination (the second file damaged
//! while the first holds nothing, both damaged) cannot come from a crash,
//! since the second file is written only after the first is durable: it is
//! an error naming the file.
//!
//! What it does not know: what the records mean, or when they are written.

use std::path::{Path, PathBuf};

use crate::error::{FileError, IoContext};
use crate::io::{Io, IoFile, OpenMode};
use crate::shared::Shared;

/// What one file of a pair holds.
#[derive(Debug)]
pub(crate) enum Held<T> {
    /// No file.
    Missing,
    /// Empty or all zeros: never written.
    Empty,
    /// A whole, valid record.
    Valid(T),
    /// Torn or damaged.
    Damaged(FileError),
}

/// A record with a sequence number that grows with every write.
pub(crate) trait Sequenced {
    /// The record's sequence number.
    fn seq(&self) -> u64;
}

/// The two paths of the pair named `stem` in `dir`: `stem-0`, `stem-1`.
pub(crate) fn paths(dir: &Path, stem: &str) -> [PathBuf; 2] {
    [dir.join(format!("{stem}-0")), dir.join(format!("{stem}-1"))]
}

/// Reads one file of a pair through `decode` (which returns `Ok(None)`
/// for a file never written).
pub(crate) fn read<I: Io, T>(
    shared: &Shared<I>,
    path: &Path,
    decode: impl Fn(&[u8], &str) -> Result<Option<T>, FileError>,
) -> Result<(Held<T>, Vec<u8>), FileError> {
    let file = match shared.io.open(path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((Held::Missing, Vec::new()));
        }
        Err(e) => return Err(e).ctx("open", path),
    };
    let bytes = file.map().ctx("read", path)?.to_vec();
    let copy = match decode(&bytes, &path.display().to_string()) {
        Ok(Some(t)) => Held::Valid(t),
        Ok(None) => Held::Empty,
        Err(e) => Held::Damaged(e),
    };
    Ok((copy, bytes))
}

/// The record to trust of a pair's two files, and which file holds it (0
/// or 1); `None` when nothing was ever written. See the [module
/// docs](self) for the rules.
pub(crate) fn choose<T: Sequenced>(
    first: Held<T>,
    second: Held<T>,
) -> Result<Option<(T, usize)>, FileError> {
    use self::Held::{Damaged, Empty, Missing, Valid};
    Ok(match (first, second) {
        (Valid(a), Valid(b)) => Some(if b.seq() > a.seq() { (b, 1) } else { (a, 0) }),
        (Valid(a), _) => Some((a, 0)),
        (_, Valid(b)) => Some((b, 1)),
        // The first write, torn before the second file was written.
        (Damaged(_), Empty | Missing) | (Empty | Missing, Empty | Missing) => None,
        // The second file is written only once the first is durable.
        (Empty | Missing, Damaged(e)) | (Damaged(e), Damaged(_)) => return Err(e),
    })
}

/// Writes `bytes` to both files of a pair, first then second, each synced
/// before the next step (see the [module docs](self)); creates a missing
/// file (durably).
pub(crate) fn write<I: Io>(
    shared: &Shared<I>,
    paths: &[PathBuf; 2],
    bytes: &[u8],
) -> Result<(), FileError> {
    write_in_order(shared, paths, [0, 1], bytes)
}

/// Writes the trusted record `bytes`, found in file `source`, back into
/// both files, the other file first: the copy that is already good is
/// overwritten only once the other is durable, so a crash meanwhile never
/// leaves both bad. Done at open: it restores a damaged or torn copy, and
/// it writes the source again because after a failed `fsync` Linux keeps
/// the bytes but marks them clean, so a sync alone could report bytes that
/// are not on disk.
pub(crate) fn restore<I: Io>(
    shared: &Shared<I>,
    paths: &[PathBuf; 2],
    source: usize,
    bytes: &[u8],
) -> Result<(), FileError> {
    let other = 1 - source.min(1);
    write_in_order(shared, paths, [other, 1 - other], bytes)
}

fn write_in_order<I: Io>(
    shared: &Shared<I>,
    paths: &[PathBuf; 2],
    order: [usize; 2],
    bytes: &[u8],
) -> Result<(), FileError> {
    for i in order {
        let path = &paths[i];
        let file = shared.open_or_create(path, true, "open")?;
        file.write_at(0, bytes).ctx("write", path)?;
        shared.sync(&file, path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct R(u64);
    impl Sequenced for R {
        fn seq(&self) -> u64 {
            self.0
        }
    }

    fn bad() -> Held<R> {
        Held::Damaged(FileError::Corrupt {
            file: "x".into(),
            what: "bad",
            at: 0,
        })
    }

    #[test]
    fn the_newest_valid_copy_wins_and_impossible_states_are_errors() {
        use super::Held::{Empty, Missing, Valid};
        let pick = |a, b| choose(a, b).map(|r| r.map(|(R(s), i)| (s, i)));
        assert_eq!(pick(Valid(R(3)), Valid(R(2))).ok(), Some(Some((3, 0))));
        assert_eq!(pick(Valid(R(3)), Valid(R(4))).ok(), Some(Some((4, 1))));
        assert_eq!(pick(Valid(R(3)), Valid(R(3))).ok(), Some(Some((3, 0))));
        assert_eq!(pick(bad(), Valid(R(2))).ok(), Some(Some((2, 1))));
        assert_eq!(pick(Valid(R(5)), bad()).ok(), Some(Some((5, 0))));
        assert_eq!(pick(Empty, Valid(R(2))).ok(), Some(Some((2, 1))));
        assert_eq!(pick(Valid(R(1)), Missing).ok(), Some(Some((1, 0))));
        assert_eq!(pick(bad(), Empty).ok(), Some(None));
        assert_eq!(pick(bad(), Missing).ok(), Some(None));
        assert_eq!(pick(Empty, Empty).ok(), Some(None));
        assert_eq!(pick(Missing, Missing).ok(), Some(None));
        assert!(pick(Empty, bad()).is_err());
        assert!(pick(Missing, bad()).is_err());
        assert!(pick(bad(), bad()).is_err());
    }
}
