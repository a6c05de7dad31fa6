//! The floor: the same bytes written with positioned writes and made
//! durable with `fdatasync` on a preallocated file in the same directory,
//! what no durable log on this disk can beat.
//!
//! Each log is its own file, preallocated (zeros written and `fsync`ed,
//! untimed) so `fdatasync` never has to write metadata; a flush is one
//! `pwrite` of the batch's bytes at the next offset plus one `fdatasync`,
//! exactly the bytes a backend was given in that batch. Frames go to a third
//! preallocated file: `put_frame` is one `pwrite`, `commit_frames` one
//! `fdatasync`, `get_frame` one `pread`. Replaying opens the log file, reads
//! the bytes written (the floor knows their length: it keeps no
//! metadata at all) and splits them at the records' varint length prefixes.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use fusee_core::shard::BlobRef;
use fusee_core::wire::Reader;

use crate::target::{LogId, Role, Subject, Target, TargetResult};

/// Zeros written per call while preallocating.
const ZERO_CHUNK: usize = 1 << 20;

/// The floor as a comparison subject.
#[derive(Clone, Copy, Debug, Default)]
pub struct Floor;

impl Subject for Floor {
    fn name(&self) -> &str {
        "floor"
    }

    fn role(&self) -> Role {
        Role::Floor
    }

    fn flush_method(&self) -> String {
        "pwrite + fdatasync on a preallocated file".into()
    }

    fn open<'a>(&'a self, dir: &Path) -> TargetResult<Box<dyn Target + 'a>> {
        Ok(Box::new(FloorTarget {
            dir: dir.to_path_buf(),
            logs: [FloorFile::default(), FloorFile::default()],
            frames: FloorFile::default(),
        }))
    }
}

/// One preallocated file of the floor: every durable write lands on zeros
/// written and synced beforehand, so `fdatasync` writes data only. The bytes
/// made durable end at `end`; the batch being built is `pending`. The
/// comparison and the criterion benches both measure the floor with it, fed
/// the same records through [`FloorFile::append`] and [`FloorFile::flush`].
#[derive(Debug, Default)]
pub struct FloorFile {
    file: Option<File>,
    path: PathBuf,
    /// Bytes preallocated.
    size: u64,
    end: u64,
    /// Whether writes started again at offset 0: the file no longer holds
    /// one contiguous history to replay.
    wrapped: bool,
    pending: Vec<u8>,
}

impl FloorFile {
    /// Creates (or truncates) `path` and makes `bytes` zeros durable in it,
    /// directory entry included.
    pub fn create(path: PathBuf, bytes: u64) -> TargetResult<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        let zeros = vec![0u8; ZERO_CHUNK];
        let mut at = 0u64;
        while at < bytes {
            let n = (bytes - at).min(ZERO_CHUNK as u64) as usize;
            file.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        file.sync_all()?;
        // The new file's directory entry must be durable too, or a crash
        // could lose the file with everything "durable" in it.
        if let Some(parent) = path.parent() {
            File::open(parent)?.sync_all()?;
        }
        Ok(Self {
            file: Some(file),
            path,
            size: bytes,
            end: 0,
            wrapped: false,
            pending: Vec::new(),
        })
    }

    /// One floor flush: a positioned write of `bytes` at the end of what was
    /// written before, then `fdatasync`. Past the preallocated size the
    /// writes start again at offset 0 (still over written blocks), so a
    /// benchmark may run longer than the file is large.
    pub fn write_sync(&mut self, bytes: &[u8]) -> TargetResult<()> {
        if self.end + bytes.len() as u64 > self.size {
            self.end = 0;
            self.wrapped = true;
        }
        let file = self.file()?;
        file.write_all_at(bytes, self.end)?;
        file.sync_data()?;
        self.end += bytes.len() as u64;
        Ok(())
    }

    /// Adds `record` to the batch the next [`FloorFile::flush`] writes. The
    /// floor writes exactly the bytes a backend is given, no framing: what
    /// a log adds around them is part of the log's cost.
    pub fn append(&mut self, record: &[u8]) {
        self.pending.extend_from_slice(record);
    }

    /// One floor flush of the batch gathered by [`FloorFile::append`]: its
    /// bytes written and synced as [`FloorFile::write_sync`] does.
    pub fn flush(&mut self) -> TargetResult<()> {
        let pending = std::mem::take(&mut self.pending);
        let done = self.write_sync(&pending);
        self.pending = pending;
        self.pending.clear();
        done
    }

    fn file(&self) -> TargetResult<&File> {
        self.file
            .as_ref()
            .ok_or_else(|| format!("{} is not open", self.path.display()).into())
    }
}

struct FloorTarget {
    dir: PathBuf,
    logs: [FloorFile; 2],
    frames: FloorFile,
}

impl FloorTarget {
    fn log(&mut self, log: LogId) -> &mut FloorFile {
        &mut self.logs[log.number() as usize]
    }
}

impl Target for FloorTarget {
    fn prepare_log(&mut self, log: LogId, _records: u64, bytes: u64) -> TargetResult<()> {
        let path = self.dir.join(format!("floor-log-{}", log.number()));
        *self.log(log) = FloorFile::create(path, bytes)?;
        Ok(())
    }

    fn append(&mut self, log: LogId, record: &[u8]) -> TargetResult<()> {
        self.log(log).append(record);
        Ok(())
    }

    fn flush(&mut self, log: LogId) -> TargetResult<()> {
        self.log(log).flush()
    }

    fn prepare_frames(&mut self, _frames: u64, bytes: u64) -> TargetResult<()> {
        self.frames = FloorFile::create(self.dir.join("floor-frames"), bytes)?;
        Ok(())
    }

    fn put_frame(&mut self, frame: &[u8]) -> TargetResult<BlobRef> {
        let f = &mut self.frames;
        let len = u32::try_from(frame.len())?;
        f.file()?.write_all_at(frame, f.end)?;
        let at = BlobRef { offset: f.end, len };
        f.end += frame.len() as u64;
        Ok(at)
    }

    fn commit_frames(&mut self) -> TargetResult<()> {
        self.frames.file()?.sync_data()?;
        Ok(())
    }

    fn get_frame(&mut self, at: BlobRef, out: &mut Vec<u8>) -> TargetResult<()> {
        out.resize(at.len as usize, 0);
        self.frames.file()?.read_exact_at(out, at.offset)?;
        Ok(())
    }

    fn restart(&mut self) -> TargetResult<()> {
        for f in self.logs.iter_mut().chain([&mut self.frames]) {
            f.file = None;
            f.pending.clear();
        }
        Ok(())
    }

    fn replay(&mut self, log: LogId, visit: &mut dyn FnMut(&[u8])) -> TargetResult<u64> {
        let f = self.log(log);
        if f.wrapped {
            return Err(format!(
                "{} wrapped past its {} preallocated bytes: nothing to replay",
                f.path.display(),
                f.size
            )
            .into());
        }
        let file = File::open(&f.path)?;
        let mut bytes = vec![0u8; usize::try_from(f.end)?];
        file.read_exact_at(&mut bytes, 0)?;
        f.file = Some(file);
        let mut r = Reader::new(&bytes);
        let mut n = 0u64;
        while r.remaining() > 0 {
            let start = r.position();
            let len = r.varint()?;
            r.take(usize::try_from(len)?)?;
            visit(&bytes[start..r.position()]);
            n += 1;
        }
        Ok(n)
    }
}
