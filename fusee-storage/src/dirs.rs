//! Directory entries that survive a crash, for backends on the real file
//! system (what an engine such as RocksDB or redb does not do for the
//! directory it is given).
//!
//! A file or directory created in a directory is durable only once that
//! directory is synced (`fsync` on the directory): until then a power cut
//! may take the new entry away, with everything synced inside it. Backend
//! authors call [`create_dir_durably`] for the directories they create,
//! [`open_in_dir`] to have an engine open or create its database inside
//! one, and [`sync_dir`] after creating other entries. [`exchange`] swaps
//! two directories in one step (a store replaced in place).

use std::fs::File;
use std::path::Path;

use crate::{Result, StorageError};

/// Makes the entries of directory `dir` durable (`fsync` on it). An empty
/// path means the current directory.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io(format!("syncing directory {}", dir.display()), e))
}

/// Opens `dir/name` with `open` (an engine opening or creating its database
/// file or directory there), with `dir` created as [`create_dir_durably`]
/// does, and `name`'s entry synced into `dir` when `open` created it: an
/// engine syncs what it writes, not its own entry in the directory above.
pub fn open_in_dir<T>(dir: &Path, name: &str, open: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    create_dir_durably(dir)?;
    let path = dir.join(name);
    let new = !path.exists();
    let opened = open(&path)?;
    if new {
        sync_dir(dir)?;
    }
    Ok(opened)
}

/// Creates `dir` and whichever of its parents are missing, each new
/// directory's entry durable in its parent before this returns. `dir`'s
/// parent is synced even when `dir` exists: an earlier open may have
/// created it and failed, or died, before that sync.
pub fn create_dir_durably(dir: &Path) -> Result<()> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .collect();
    if !missing.is_empty() {
        std::fs::create_dir_all(dir)
            .map_err(|e| StorageError::io(format!("creating directory {}", dir.display()), e))?;
    }
    let synced = if missing.is_empty() {
        vec![dir]
    } else {
        missing
    };
    // Outermost first, so each entry synced sits in a durable directory.
    for new in synced.iter().rev() {
        if let Some(parent) = new.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_directories_are_created_and_a_file_in_the_way_is_an_error() {
        let root = std::env::temp_dir().join(format!("fusee-dirs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let deep = root.join("a").join("b");
        create_dir_durably(&deep).expect("create");
        assert!(deep.is_dir());
        create_dir_durably(&deep).expect("existing is fine");
        sync_dir(&deep).expect("sync");
        std::fs::write(root.join("file"), b"x").expect("write");
        let err = create_dir_durably(&root.join("file").join("c")).expect_err("not a directory");
        assert!(err.to_string().contains("file"), "{err}");
        let inner = root.join("x").join("y");
        let opened = open_in_dir(&inner, "db", |path| {
            std::fs::write(path, b"db").map_err(|e| StorageError::io("writing", e))?;
            Ok(path.to_path_buf())
        });
        assert_eq!(opened.expect("opened"), inner.join("db"));
        let refused: Result<()> = open_in_dir(&inner, "db", |_| {
            Err(StorageError::io(
                "opening",
                std::io::Error::other("refused"),
            ))
        });
        assert!(
            refused
                .expect_err("the engine's error")
                .to_string()
                .contains("refused")
        );
        let err = sync_dir(&root.join("missing")).expect_err("no such directory");
        assert!(err.to_string().contains("missing"), "{err}");
        let _ = std::fs::remove_dir_all(&root);
    }
}

/// Swaps the entries at `a` and `b` (two directories, or two files) in one
/// step, then syncs their parent directories: after a crash at any moment
/// each path names one of the two, never neither and never the same one
/// (Linux's `renameat2` with `RENAME_EXCHANGE`, on ext4, XFS, Btrfs, tmpfs
/// and most local file systems).
///
/// Errors: `Io` naming both paths: either is missing, the file system
/// cannot exchange (`EINVAL`), or this is not Linux (`Unsupported`).
pub fn exchange(a: &Path, b: &Path) -> Result<()> {
    let context = || format!("exchanging {} and {}", a.display(), b.display());
    swap(a, b).map_err(|e| StorageError::io(context(), e))?;
    let parent = |p: &Path| p.parent().map(Path::to_path_buf).unwrap_or_default();
    let (pa, pb) = (parent(a), parent(b));
    sync_dir(&pa)?;
    if pb != pa {
        sync_dir(&pb)?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn swap(a: &Path, b: &Path) -> std::io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).map_err(std::io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn swap(_a: &Path, _b: &Path) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "swapping two directories in one step needs Linux's renameat2",
    ))
}

#[cfg(test)]
mod exchange_tests {
    use super::*;

    #[test]
    fn two_directories_swap_and_a_missing_one_is_an_error() {
        let root = std::env::temp_dir().join(format!("fusee-exchange-{}", std::process::id()));
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir_all(&a).expect("a");
        std::fs::create_dir_all(&b).expect("b");
        std::fs::write(a.join("x"), b"in a").expect("x");
        std::fs::write(b.join("y"), b"in b").expect("y");
        exchange(&a, &b).expect("swaps");
        assert_eq!(std::fs::read(a.join("y")).expect("y now in a"), b"in b");
        assert_eq!(std::fs::read(b.join("x")).expect("x now in b"), b"in a");
        let err = exchange(&a, &root.join("missing")).expect_err("refused");
        assert!(err.to_string().contains("exchanging"), "{err}");
        assert!(a.join("y").exists(), "nothing moved");
        let _ = std::fs::remove_dir_all(&root);
    }
}
