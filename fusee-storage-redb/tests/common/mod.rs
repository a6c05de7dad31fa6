//! Helpers shared by the integration tests.

#![allow(dead_code)] // each test file uses a part

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use fusee_storage_redb::{FILE_NAME, RedbStorage};
use redb::StorageBackend;
use redb::backends::FileBackend;

/// A file backend that refuses every write once its process "crashed".
#[derive(Debug)]
struct Crashable {
    file: FileBackend,
    dead: Arc<AtomicBool>,
}

impl Crashable {
    fn check(&self) -> std::io::Result<()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("the process crashed"));
        }
        Ok(())
    }
}

impl StorageBackend for Crashable {
    fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.check()?;
        self.file.set_len(len)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        self.check()?;
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.check()?;
        self.file.write(offset, data)
    }

    fn close(&self) -> std::io::Result<()> {
        self.file.close()
    }
}

/// Opens the storage in `dir` on a [`Crashable`] file backend; returns it
/// with its kill switch.
pub(crate) fn open_crashable(dir: &Path) -> (RedbStorage, Arc<AtomicBool>) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir {dir:?}: {e}"));
    let path = dir.join(FILE_NAME);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {path:?}: {e}"));
    let file = FileBackend::new(file).unwrap_or_else(|e| panic!("lock {path:?}: {e}"));
    let dead = Arc::<AtomicBool>::default();
    let backend = Crashable {
        file,
        dead: Arc::clone(&dead),
    };
    let storage = RedbStorage::open_with_backend(path, backend)
        .unwrap_or_else(|e| panic!("open {dir:?}: {e}"));
    (storage, dead)
}

/// A temporary directory, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    /// A new empty directory named after `name`, the process and a counter.
    pub(crate) fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fusee-redb-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {dir:?}: {e}"));
        Self(dir)
    }

    /// The database file inside.
    pub(crate) fn file(&self) -> PathBuf {
        self.0.join(FILE_NAME)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
