//! The identity marker: the file `FUSEE` that every on-disk backend writes
//! into a directory it creates, naming the backend and its format version,
//! and checks before it opens a directory.
//!
//! Without it a directory of another backend, another program's files, a
//! damaged store or a mistyped path would open as a new, empty store, and
//! the backend would add its files beside whatever is there. With it:
//!
//! | the path | [`claim_dir`] |
//! |---|---|
//! | empty (`""`) | [`StorageError::NotAStore`] |
//! | missing, or an empty directory | creates the directory and the marker (or [`StorageError::NotFound`] when opening an existing store only) |
//! | a file | [`StorageError::NotAStore`] |
//! | a directory with a valid marker of this backend and version | opens |
//! | … of another backend | [`StorageError::WrongBackend`] |
//! | … of another format version | [`StorageError::UnsupportedFormat`] |
//! | a damaged marker | [`StorageError::CorruptFile`] naming it |
//! | a non-empty directory without a marker | [`StorageError::NotAStore`] |
//!
//! # Layout (integers little-endian)
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `FUSEE\0ID` |
//! | 8 | 4 | marker format (1) |
//! | 12 | 4 | the backend's format version |
//! | 16 | 1 | length `n` of the backend's name (1 to [`MAX_NAME`]) |
//! | 17 | n | the backend's name, ASCII (`file`, `redb`, `rocksdb`, ...) |
//! | 17 + n | 4 | CRC-32 of bytes `0 .. 17 + n` |
//!
//! The marker is written to `FUSEE.tmp`, synced, renamed to `FUSEE`, and
//! the directory synced: a crash leaves either no marker (the directory
//! holds nothing else of the store yet, so the next open starts again) or a
//! whole one. A backend writes the marker before anything else of its own,
//! so a directory whose only entries are a leftover `FUSEE.tmp` and the
//! names the backend declares as its own pre-marker files (a lock file) is
//! still empty.
//!
//! What it does not know: what the backend keeps beside the marker, or how
//! the backend locks the directory.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::{Result, StorageError};

/// The marker's file name.
pub const MARKER: &str = "FUSEE";
/// The name the marker has while `fusee migrate` fills the directory: a
/// directory holding it and no [`MARKER`] is refused like any unmarked one
/// (an interrupted migration), and the migration renames it back last.
pub const MARKER_MIGRATING: &str = "FUSEE.migrating";
/// The name the marker is written under before its rename.
pub const MARKER_TMP: &str = "FUSEE.tmp";
/// The longest backend name a marker holds.
pub const MAX_NAME: usize = 32;

const MAGIC: [u8; 8] = *b"FUSEE\0ID";
const MARKER_FORMAT: u32 = 1;

/// What a marker says: which backend made the directory, in which of its
/// format versions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The backend's name (`file`, `redb`, `rocksdb`, ...).
    pub backend: String,
    /// The backend's format version.
    pub format: u32,
}

impl Identity {
    /// The marker's bytes. Panics only for a name longer than
    /// [`MAX_NAME`] or empty, which is a programming error of the backend.
    pub fn encode(&self) -> Vec<u8> {
        let name = self.backend.as_bytes();
        assert!(
            (1..=MAX_NAME).contains(&name.len()),
            "backend name of {} bytes",
            name.len()
        );
        let mut out = Vec::with_capacity(21 + name.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&MARKER_FORMAT.to_le_bytes());
        out.extend_from_slice(&self.format.to_le_bytes());
        out.push(name.len() as u8);
        out.extend_from_slice(name);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a marker's bytes; `file` names it in errors. Any damage is
    /// [`StorageError::CorruptFile`]; a marker format this build does not
    /// know is [`StorageError::UnsupportedFormat`].
    pub fn decode(bytes: &[u8], file: &str) -> Result<Self> {
        let corrupt = |what: &'static str, at: u64| StorageError::CorruptFile {
            file: file.to_string(),
            what,
            at,
        };
        if bytes.len() < 17 {
            return Err(corrupt("identity marker too short", bytes.len() as u64));
        }
        if bytes[..8] != MAGIC {
            return Err(corrupt("not a Fusee identity marker (bad magic)", 0));
        }
        let u32_at = |at: usize| {
            bytes
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes)
        };
        let n = usize::from(bytes[16]);
        let end = 17 + n;
        if n == 0 || n > MAX_NAME || bytes.len() != end + 4 {
            return Err(corrupt("identity marker of the wrong length", 16));
        }
        if u32_at(end) != Some(crc32fast::hash(&bytes[..end])) {
            return Err(corrupt("identity marker checksum mismatch", end as u64));
        }
        let marker_format = u32_at(8).unwrap_or(0);
        if marker_format != MARKER_FORMAT {
            return Err(StorageError::UnsupportedFormat {
                file: file.to_string(),
                found: marker_format,
                supported: MARKER_FORMAT,
            });
        }
        let backend = std::str::from_utf8(&bytes[17..end])
            .ok()
            .filter(|s| s.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| corrupt("backend name is not ASCII", 17))?;
        Ok(Self {
            backend: backend.to_string(),
            format: u32_at(12).unwrap_or(0),
        })
    }
}

/// Whether a backend may create a store where there is none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Create {
    /// Create the directory and the store when they are missing (the
    /// default).
    #[default]
    IfMissing,
    /// Open an existing store only: a missing or empty directory is
    /// [`StorageError::NotFound`].
    Never,
}

/// What a directory looks like to [`judge`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// Nothing at the path.
    Missing,
    /// Something other than a directory.
    NotADirectory,
    /// A directory holding nothing but a leftover `FUSEE.tmp` and the
    /// backend's pre-marker files.
    Empty,
    /// A directory with a marker: its bytes.
    Marker(Vec<u8>),
    /// A directory with other entries and no marker.
    Unmarked,
}

/// What the backend does with a directory [`judge`] accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Create the directory if missing, then write the marker: a new store.
    Create,
    /// The directory is this backend's store, in this format: open it.
    Open,
}

/// Decides what to do with the directory `path`, found as `found`, for
/// backend `expected` in format `format`. The pure half of [`claim_dir`],
/// for backends that reach the file system through their own layer.
pub fn judge(
    path: &Path,
    found: Found,
    expected: &'static str,
    format: u32,
    create: Create,
) -> Result<Verdict> {
    let shown = || path.display().to_string();
    match found {
        Found::Missing | Found::Empty => match create {
            Create::IfMissing => Ok(Verdict::Create),
            Create::Never => Err(StorageError::NotFound { path: shown() }),
        },
        Found::NotADirectory => Err(StorageError::NotAStore {
            path: shown(),
            why: "it is not a directory",
        }),
        Found::Unmarked => Err(StorageError::NotAStore {
            path: shown(),
            why: "the directory holds files but no FUSEE identity marker \
                  (another program's files, a store from a release before markers, \
                  or one an interrupted `fusee migrate` left incomplete: FUSEE.migrating)",
        }),
        Found::Marker(bytes) => {
            let file = path.join(MARKER).display().to_string();
            let id = Identity::decode(&bytes, &file)?;
            if id.backend != expected {
                return Err(StorageError::WrongBackend {
                    path: shown(),
                    found: id.backend,
                    expected,
                });
            }
            if id.format != format {
                return Err(StorageError::UnsupportedFormat {
                    file,
                    found: id.format,
                    supported: format,
                });
            }
            Ok(Verdict::Open)
        }
    }
}

/// Refuses the empty path, which every file-system call would read as the
/// current directory.
pub fn check_path(path: &Path) -> Result<()> {
    if path.as_os_str().is_empty() {
        return Err(StorageError::NotAStore {
            path: String::new(),
            why: "the path is empty",
        });
    }
    Ok(())
}

/// Claims directory `dir` for backend `backend` in format `format` on the
/// real file system: checks its marker, or creates the directory (durably,
/// as [`crate::dirs::create_dir_durably`]) and writes the marker when there
/// is no store yet and `create` allows it. `own` lists entries the backend
/// creates before the marker (a lock file), which do not make a directory
/// non-empty. Returns whether the store is new.
pub fn claim_dir(
    dir: &Path,
    backend: &'static str,
    format: u32,
    create: Create,
    own: &[&str],
) -> Result<bool> {
    check_path(dir)?;
    let found = inspect(dir, own)?;
    match judge(dir, found, backend, format, create)? {
        Verdict::Open => Ok(false),
        Verdict::Create => {
            crate::dirs::create_dir_durably(dir)?;
            write_marker(
                dir,
                &Identity {
                    backend: backend.to_string(),
                    format,
                },
            )?;
            Ok(true)
        }
    }
}

/// Looks at `dir` on the real file system, as [`judge`] wants it.
fn inspect(dir: &Path, own: &[&str]) -> Result<Found> {
    let io = |what: &str, e| StorageError::io(format!("{what} {}", dir.display()), e);
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => return Err(io("reading", e)),
    };
    if !meta.is_dir() {
        return Ok(Found::NotADirectory);
    }
    let marker = dir.join(MARKER);
    match std::fs::read(&marker) {
        Ok(bytes) => return Ok(Found::Marker(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("reading the marker in", e)),
    }
    for entry in std::fs::read_dir(dir).map_err(|e| io("listing", e))? {
        let name = entry.map_err(|e| io("listing", e))?.file_name();
        let name = name.to_string_lossy();
        if name != MARKER_TMP && !own.contains(&name.as_ref()) {
            return Ok(Found::Unmarked);
        }
    }
    Ok(Found::Empty)
}

/// Writes the marker durably: to `FUSEE.tmp`, synced, renamed, directory
/// synced.
fn write_marker(dir: &Path, id: &Identity) -> Result<()> {
    let tmp = dir.join(MARKER_TMP);
    let io = |what: &str, e| StorageError::io(format!("{what} {}", tmp.display()), e);
    let mut f = File::create(&tmp).map_err(|e| io("creating", e))?;
    f.write_all(&id.encode()).map_err(|e| io("writing", e))?;
    f.sync_all().map_err(|e| io("syncing", e))?;
    drop(f);
    std::fs::rename(&tmp, dir.join(MARKER)).map_err(|e| io("renaming", e))?;
    crate::dirs::sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(backend: &str, format: u32) -> Identity {
        Identity {
            backend: backend.to_string(),
            format,
        }
    }

    #[test]
    fn markers_round_trip_and_every_flip_and_cut_is_refused() {
        let bytes = id("rocksdb", 3).encode();
        assert_eq!(
            Identity::decode(&bytes, "m").expect("decodes"),
            id("rocksdb", 3)
        );
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x04;
            assert!(
                Identity::decode(&b, "m").is_err(),
                "flip at byte {i} accepted"
            );
        }
        for cut in 0..bytes.len() {
            assert!(
                Identity::decode(&bytes[..cut], "m").is_err(),
                "cut at {cut} accepted"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(
            Identity::decode(&longer, "m").is_err(),
            "trailing byte accepted"
        );
    }

    #[test]
    fn judge_names_each_case() {
        let p = Path::new("/data");
        let ok = |found, create| judge(p, found, "file", 2, create);
        assert_eq!(
            ok(Found::Missing, Create::IfMissing).ok(),
            Some(Verdict::Create)
        );
        assert_eq!(
            ok(Found::Empty, Create::IfMissing).ok(),
            Some(Verdict::Create)
        );
        assert!(matches!(
            ok(Found::Empty, Create::Never),
            Err(StorageError::NotFound { .. })
        ));
        assert!(matches!(
            ok(Found::NotADirectory, Create::IfMissing),
            Err(StorageError::NotAStore { .. })
        ));
        assert!(matches!(
            ok(Found::Unmarked, Create::IfMissing),
            Err(StorageError::NotAStore { .. })
        ));
        let marker = |b: &str, f| Found::Marker(id(b, f).encode());
        assert_eq!(
            ok(marker("file", 2), Create::Never).ok(),
            Some(Verdict::Open)
        );
        match ok(marker("redb", 1), Create::IfMissing) {
            Err(StorageError::WrongBackend {
                found, expected, ..
            }) => assert_eq!((found.as_str(), expected), ("redb", "file")),
            other => panic!("expected WrongBackend, found {other:?}"),
        }
        assert!(matches!(
            ok(marker("file", 1), Create::IfMissing),
            Err(StorageError::UnsupportedFormat {
                found: 1,
                supported: 2,
                ..
            })
        ));
        assert!(matches!(
            ok(Found::Marker(vec![0; 30]), Create::IfMissing),
            Err(StorageError::CorruptFile { .. })
        ));
    }

    #[test]
    fn claim_dir_creates_once_then_opens_and_refuses_others() {
        let root = std::env::temp_dir().join(format!("fusee-identity-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("store");
        assert!(matches!(
            claim_dir(&dir, "redb", 1, Create::Never, &[]),
            Err(StorageError::NotFound { .. })
        ));
        assert!(claim_dir(&dir, "redb", 1, Create::IfMissing, &[]).expect("created"));
        assert!(!claim_dir(&dir, "redb", 1, Create::Never, &[]).expect("opened"));
        assert!(matches!(
            claim_dir(&dir, "rocksdb", 1, Create::IfMissing, &[]),
            Err(StorageError::WrongBackend { .. })
        ));
        assert!(matches!(
            claim_dir(Path::new(""), "redb", 1, Create::IfMissing, &[]),
            Err(StorageError::NotAStore { .. })
        ));
        let other = root.join("other");
        std::fs::create_dir_all(&other).expect("mkdir");
        std::fs::write(other.join("LOCK"), b"").expect("lock file");
        std::fs::write(other.join(MARKER_TMP), b"torn").expect("leftover");
        assert!(claim_dir(&other, "file", 2, Create::IfMissing, &["LOCK"]).expect("empty but own"));
        std::fs::write(root.join("plain"), b"x").expect("file");
        assert!(matches!(
            claim_dir(&root.join("plain"), "file", 2, Create::IfMissing, &[]),
            Err(StorageError::NotAStore { .. })
        ));
        let _ = std::fs::remove_dir_all(&root);
    }
}
