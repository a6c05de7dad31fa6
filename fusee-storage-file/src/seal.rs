//! The shard's log seal, `shard-N/seal`: a record, apart from the log
//! segments and their manifest, that every record through an LSN was
//! durable ([`fusee_storage::LogStore::begin_seal`]). The format, byte by
//! byte, and the reading rules are [`fusee_storage::seal`]'s; this module
//! reads and writes it through the backend's [`Io`] layer, so the
//! simulated disk drops, keeps or tears its writes like any other file's.
//!
//! What it adds to the log's own checks: the segments and the manifest
//! cannot tell the newest acknowledged batch zeroed (or cut off) by the
//! disk from a batch a crash tore before it was acknowledged; both read as
//! a log that ends earlier. `FileSeal::check`, at open, after the scan
//! and before the open writes anything to the log, turns a log that ends
//! before the sealed LSN into [`fusee_storage::StorageError::LostRecords`].
//!
//! Writing: a seal writes the slot not holding the newest record, then
//! syncs the file with the shard's flush method (creating the file, it
//! also syncs the shard's directory). A failed write leaves the newest
//! record where it was: the next seal writes the same slot again.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use fusee_core::record::Lsn;
use fusee_storage::seal::{SealState, encode_slot};
use fusee_storage::{FlushWork, Result};

use crate::error::{FileError, IoContext};
use crate::io::{Io, IoFile, OpenMode};
use crate::shared::Shared;

/// The seal file's name in the shard's directory.
pub const SEAL_FILE: &str = "seal";

/// A shard's seal file: what it says, and the file once it exists.
pub(crate) struct FileSeal<I: Io> {
    path: PathBuf,
    state: SealState,
    file: Option<I::File>,
}

impl<I: Io> FileSeal<I> {
    /// Reads the seal file of the shard `shared` belongs to (missing:
    /// never sealed). Damage is an error naming the file; nothing is
    /// written.
    pub(crate) fn read(shared: &Shared<I>) -> std::result::Result<Self, FileError> {
        let path = shared.dir.join(SEAL_FILE);
        let shown = path.display().to_string();
        let (file, state) = match shared.io.open(&path, OpenMode::Existing) {
            Ok(f) => {
                let bytes = f.map().ctx("read seal", &path)?;
                let state = SealState::decode(&bytes, shared.shard, &shown)?;
                drop(bytes);
                (Some(f), state)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, SealState::default()),
            Err(e) => return Err(e).ctx("open seal", &path),
        };
        Ok(Self { path, state, file })
    }

    /// `Ok` if a log recovered through `last` holds everything sealed;
    /// `LostRecords` naming the file otherwise.
    pub(crate) fn check(&self, last: Lsn, shard: u32) -> std::result::Result<(), FileError> {
        self.state
            .check(last, shard, &self.path.display().to_string())
            .map_err(FileError::from)
    }

    /// Seals `lsn` (durable, as the caller knows): the next slot written
    /// and synced. Returns the LSN sealed.
    fn write(&mut self, shared: &Shared<I>, lsn: Lsn) -> std::result::Result<Lsn, FileError> {
        let (seal, offset) = self.state.next(lsn);
        if self.file.is_none() {
            self.file = Some(shared.open_or_create(&self.path, true, "create seal")?);
        }
        let Some(file) = &self.file else {
            return Err(FileError::Io {
                op: "write seal",
                path: self.path.clone(),
                error: std::io::Error::other("the seal file is not open"),
            });
        };
        file.write_at(offset, &encode_slot(shared.shard, seal))
            .ctx("write seal", &self.path)?;
        shared.sync(file, &self.path)?;
        self.state.written(seal, offset);
        Ok(seal.lsn)
    }
}

/// One seal's I/O, run on whatever thread runs the ticket.
pub(crate) struct SealWork<I: Io> {
    pub(crate) shared: Arc<Shared<I>>,
    pub(crate) seal: Arc<Mutex<FileSeal<I>>>,
    pub(crate) lsn: Lsn,
}

impl<I: Io> FlushWork for SealWork<I> {
    fn run(&mut self) -> Result<()> {
        // After a close the directory may belong to another process, and
        // close promises nothing more is written.
        self.shared.check_open("log")?;
        let mut seal = self.seal.lock().unwrap_or_else(|e| e.into_inner());
        seal.write(&self.shared, self.lsn)?;
        Ok(())
    }
}
