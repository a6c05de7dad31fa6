//! Harnesses shared by Fusee's end-to-end and crash tests.
//!
//! The SIGKILL harness (`tests/sigkill.rs`) runs the `crash-child` binary,
//! which appends and flushes log records on a backend named on its command
//! line and reports every durable LSN on stdout; the parent kills it with
//! SIGKILL at random moments, reopens the storage and checks that every
//! reported record is present and intact. Any backend this crate is built
//! with ([`backends`]) runs the same harness.

use std::path::Path;

use fusee_core::record::Lsn;
use std::sync::mpsc;

use fusee_storage::{FlushTicket, LogStore, Result, Storage};

/// The bytes of the record at `lsn`: a length and content derived from the
/// LSN alone, so a checker needs nothing but the LSN to verify a record.
pub fn record_bytes(lsn: Lsn) -> Vec<u8> {
    let mut state = lsn.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let len = (state % 2048) as usize + (lsn % 3) as usize * 40;
    let mut out = Vec::with_capacity(len + 8);
    out.extend_from_slice(&lsn.to_le_bytes());
    while out.len() < len + 8 {
        // xorshift64: cheap, deterministic filler.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.push(state as u8);
    }
    out
}

/// The backends this build can drive, by name.
pub fn backends() -> Vec<&'static str> {
    let mut names = Vec::new();
    if cfg!(feature = "file") {
        names.push("file");
    }
    if cfg!(feature = "redb") {
        names.push("redb");
    }
    if cfg!(feature = "rocksdb") {
        names.push("rocksdb");
    }
    names
}

/// Checks shard 0's log of `storage`: every record from its first to its
/// last is the one [`record_bytes`] gives. Returns the last LSN.
pub fn check_log<S: Storage>(storage: &S) -> Result<Lsn> {
    let mut parts = storage.open_shard(0)?;
    let first = parts.log.first_lsn();
    let mut next = first;
    let last = parts.log.read(first.saturating_sub(1), &mut |lsn, bytes| {
        assert_eq!(lsn, next, "hole in the log before LSN {lsn}");
        assert!(
            bytes == record_bytes(lsn).as_slice(),
            "record {lsn} changed ({} bytes read)",
            bytes.len()
        );
        next += 1;
        Ok(())
    })?;
    Ok(last)
}

/// Runs `f` on the storage of backend `name` in `dir`.
///
/// # Panics
/// On an unknown backend name, or if the storage does not open.
pub fn with_backend<T>(name: &str, dir: &Path, f: impl FnOnce(&dyn AnyBackend) -> T) -> T {
    match name {
        #[cfg(feature = "file")]
        "file" => {
            let s = fusee_storage_file::FileStorage::open(dir, file_options())
                .unwrap_or_else(|e| panic!("open {}: {e}", dir.display()));
            let out = f(&s);
            let _ = s.close();
            out
        }
        #[cfg(feature = "redb")]
        "redb" => {
            let s = fusee_storage_redb::RedbStorage::open(dir)
                .unwrap_or_else(|e| panic!("open {}: {e}", dir.display()));
            let out = f(&s);
            let _ = s.close();
            out
        }
        #[cfg(feature = "rocksdb")]
        "rocksdb" => {
            let s = fusee_storage_rocksdb::RocksStorage::open(dir)
                .unwrap_or_else(|e| panic!("open {}: {e}", dir.display()));
            let out = f(&s);
            let _ = s.close();
            out
        }
        other => panic!("backend {other:?} is not built into this binary"),
    }
}

#[cfg(feature = "file")]
fn file_options() -> fusee_storage_file::FileOptions {
    fusee_storage_file::FileOptions {
        // Small segments, so kills land across rolls too.
        segment_bytes: 1 << 20,
        ..Default::default()
    }
}

/// How the crash child writes.
#[derive(Clone, Copy, Debug)]
pub struct Writing {
    /// Records per flush.
    pub batch: usize,
    /// Flush on a flusher thread (`begin_flush`, `FlushTicket::run` there,
    /// `finish_flush`) while the next batch is appended, as a host's group
    /// commit does; otherwise `flush` on the writing thread.
    pub pipelined: bool,
    /// Discard records this far behind the durable LSN after each flush, as
    /// a checkpointing host would (0: never), so segments are dropped or
    /// recycled while the process may die.
    pub keep: u64,
}

/// What the crash harness needs of a storage, object-safe.
pub trait AnyBackend {
    /// Appends records after the log's last LSN as `how` says, calling
    /// `durable` with the durable LSN after each flush, until `durable`
    /// returns false.
    fn append_forever(&self, how: Writing, durable: &mut dyn FnMut(Lsn) -> bool) -> Result<()>;
    /// [`check_log`] on this storage.
    fn check(&self) -> Result<Lsn>;
}

impl<S: Storage> AnyBackend for S {
    fn append_forever(&self, how: Writing, durable: &mut dyn FnMut(Lsn) -> bool) -> Result<()> {
        let mut parts = self.open_shard(0)?;
        let log = &mut parts.log;
        let append_batch = |log: &mut S::Log| -> Result<()> {
            for _ in 0..how.batch.max(1) {
                let lsn = log.last_lsn() + 1;
                log.append(lsn, &record_bytes(lsn))?;
            }
            Ok(())
        };
        let discard = |log: &mut S::Log, lsn: Lsn| -> Result<()> {
            if how.keep > 0 && lsn > how.keep {
                log.discard_through(lsn - how.keep)?;
            }
            Ok(())
        };
        if !how.pipelined {
            loop {
                append_batch(log)?;
                let lsn = log.flush()?;
                discard(log, lsn)?;
                if !durable(lsn) {
                    return Ok(());
                }
            }
        }
        let (to_flusher, jobs) = mpsc::sync_channel::<FlushTicket>(1);
        let (done, back) = mpsc::sync_channel::<FlushTicket>(1);
        std::thread::scope(|scope| {
            scope.spawn(move || {
                for mut ticket in jobs {
                    ticket.run();
                    if done.send(ticket).is_err() {
                        break;
                    }
                }
            });
            append_batch(log)?;
            let mut ticket = log.begin_flush()?;
            loop {
                // The flush of one batch runs while the next is appended.
                let _ = to_flusher.send(ticket);
                append_batch(log)?;
                let Ok(ran) = back.recv() else {
                    return Ok(());
                };
                let lsn = log.finish_flush(ran)?;
                discard(log, lsn)?;
                if !durable(lsn) {
                    return Ok(());
                }
                ticket = log.begin_flush()?;
            }
        })
    }

    fn check(&self) -> Result<Lsn> {
        check_log(self)
    }
}
