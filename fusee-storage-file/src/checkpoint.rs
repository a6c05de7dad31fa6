//! A shard's checkpoint part: the index files and the commit that makes the
//! run store, the index change and the checkpoint durable together.
//!
//! # Index files
//!
//! `index-NNNNNNNNNNNNNNNNNNNN.idx` are chunk files ([`crate::chunks`]) of
//! 32-byte index records. A delta is appended to the current index file as
//! one or more chunks; a base is streamed into a new index file. Reading an
//! index file applies its records in order: each upserts its run, or deletes
//! it when its state is [`DELETED`].
//!
//! # Commit
//!
//! 1. The run store syncs its generation and its release log
//!    (`FileRuns::prepare_commit`).
//! 2. The index change is written (a delta appended, or the streamed base
//!    file completed) and synced.
//! 3. The slot ([`crate::slot`]) with the next sequence number, naming the
//!    index file and length and the store generation and lengths, is
//!    written to `slot-0` and synced, then to `slot-1` and synced (the pair,
//!    `crate::pair`). The first sync is the commit point; the commit
//!    returns after the second.
//! 4. Files the new commit no longer names (the index file a base replaced,
//!    a generation compaction replaced) are deleted.
//!
//! # Memory
//!
//! The part keeps only the set of runs the committed index holds (their
//! numbers: what counting a delta's effect at commit needs), not their
//! records, which the engine's own table holds (a second copy cost about
//! 85 MB a million parked runs). [`CheckpointStore::read_index`] reads the
//! records from the index file, newest first, visiting a run at its newest
//! record: no map of the records is built, not even for a while (freed, a
//! map that size stays resident in the allocator's arenas).
//!
//! A crash before step 3's first sync leaves the previous commit trusted;
//! open then cuts the index file and the run store back to what it names,
//! so the index, checkpoint and store position always come from one
//! commit. Open cuts only on the word of a slot that passed its checksum: a
//! damaged slot file is never the reason for a cut, since after every
//! commit both files hold it (the other file is then trusted, and rewritten
//! over the damaged one); a state no crash can leave (the second file
//! damaged while the first holds nothing, both damaged, a slot file gone
//! from a shard that was opened) is an error naming the file.

use std::path::PathBuf;
use std::sync::Arc;

use fusee_storage::{
    CheckpointStore, Committed, DELETED, INDEX_RECORD, IndexChange, Result, StorageError,
    index_record_run, index_record_state, index_records,
};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::chunks;
use crate::error::{FileError, IoContext};
use crate::io::{Io, IoFile, OpenMode};
use crate::pair;
use crate::shared::Shared;
use crate::slot::Slot;
use crate::store::FileRuns;

/// Index records handed to a visitor per call.
const VISIT_RECORDS: usize = 4096;

pub(crate) fn index_name(n: u64) -> String {
    format!("index-{n:020}.idx")
}

/// The checkpoint slots are the pair ([`crate::pair`]) `slot-0`, `slot-1`.
pub(crate) const SLOT_STEM: &str = "slot";

/// The runs an index holds: what counting a commit's records needs.
type Runs = FxHashSet<u64>;

/// Applies concatenated index records to the set of runs they leave.
fn apply_runs(runs: &mut Runs, records: &[u8]) {
    for r in records.chunks_exact(INDEX_RECORD) {
        let mut rec = [0u8; INDEX_RECORD];
        rec.copy_from_slice(r);
        let run = index_record_run(&rec);
        if index_record_state(&rec) == DELETED {
            runs.remove(&run);
        } else {
            runs.insert(run);
        }
    }
}

/// The payloads of the chunks in the committed prefix `len` of an index
/// file's bytes, in file order, each checked (whole, crc right).
fn index_chunks<'a>(
    bytes: &'a [u8],
    len: u64,
    path: &std::path::Path,
) -> std::result::Result<Vec<&'a [u8]>, FileError> {
    let mut out = Vec::new();
    let name = path.display().to_string();
    chunks::read(bytes, len, INDEX_RECORD, &name, |payload| {
        out.push(payload);
        Ok(())
    })?;
    Ok(out)
}

/// An index file being written.
struct IndexFile<F> {
    number: u64,
    file: F,
    path: PathBuf,
    len: u64,
}

/// A base being streamed.
struct Base<F> {
    file: IndexFile<F>,
    /// The runs its records hold.
    runs: Runs,
}

/// A shard's checkpoint part. See the [module docs](self).
pub struct FileCheckpoint<I: Io = crate::io::RealIo> {
    shared: Arc<Shared<I>>,
    /// The runs the committed index holds.
    runs: Runs,
    current: IndexFile<I::File>,
    base: Option<Base<I::File>>,
    /// The sequence number of the last commit.
    newest: Option<u64>,
    latched: bool,
}

/// What opening a shard's checkpoint part found.
pub(crate) struct Opened<I: Io> {
    pub(crate) part: FileCheckpoint<I>,
    pub(crate) slot: Option<Slot>,
}

impl<I: Io> FileCheckpoint<I> {
    /// Reads both slots, loads the index the trusted one names and deletes
    /// index files no commit names. `initialized`: the shard's log says
    /// the shard was opened whole before, so its slot files must exist;
    /// otherwise a commit found is damage (a shard is opened whole before
    /// it can commit).
    pub(crate) fn open(
        shared: Arc<Shared<I>>,
        initialized: bool,
    ) -> std::result::Result<Opened<I>, FileError> {
        let dir = shared.dir.clone();
        let paths = pair::paths(&dir, SLOT_STEM);
        let mut copies = Vec::with_capacity(2);
        for path in &paths {
            let (copy, _) = pair::read(&shared, path, Slot::decode)?;
            if initialized && matches!(copy, pair::Held::Missing) {
                return Err(FileError::Corrupt {
                    file: path.display().to_string(),
                    what: "checkpoint slot file missing",
                    at: 0,
                });
            }
            copies.push(copy);
        }
        let second = copies.pop().unwrap_or(pair::Held::Missing);
        let first = copies.pop().unwrap_or(pair::Held::Missing);
        let chosen = pair::choose(first, second)?;
        if let Some((slot, source)) = &chosen {
            if !initialized {
                return Err(FileError::Corrupt {
                    file: paths[*source].display().to_string(),
                    what: "a checkpoint slot holds a commit but the log manifest is missing",
                    at: 0,
                });
            }
            // A commit whose process died before its sync returned may be
            // in the page cache only; what open reports must be durable.
            pair::restore(&shared, &paths, *source, &slot.encode())?;
        } else {
            for path in &paths {
                shared.open_or_create(path, true, "create slot")?;
            }
        }
        let slot = chosen.map(|(slot, _)| slot);
        let newest = slot.as_ref().map(|s| s.seq);
        let (number, len) = slot
            .as_ref()
            .map_or((1, 0), |s| (s.index_file, s.index_len));
        let path = dir.join(index_name(number));
        let file = shared.open_or_create(&path, slot.is_none(), "open index")?;
        let runs = {
            let map = file.map().ctx("map index", &path)?;
            // Sized from the commit's count, bounded by what the file holds
            // (not by the slot's length, which a damaged slot can make
            // huge): no growth (whose freed tables would stay resident) and
            // no allocation past the file's own records.
            let capacity = slot.as_ref().map_or(0, |s| {
                s.index_records
                    .min(len.min(map.len() as u64) / INDEX_RECORD as u64)
                    .try_into()
                    .unwrap_or(0)
            });
            let mut runs = Runs::with_capacity_and_hasher(capacity, Default::default());
            for payload in index_chunks(&map, len, &path)? {
                apply_runs(&mut runs, payload);
            }
            runs
        };
        if let Some(s) = &slot
            && s.index_records != runs.len() as u64
        {
            return Err(FileError::Corrupt {
                file: path.display().to_string(),
                what: "index holds another number of records than its commit says",
                at: len,
            });
        }
        // A delta or base written by a commit that did not finish.
        shared.cut_to(&file, &path, len)?;
        for name in shared.io.list_dir(&dir).ctx("list directory", &dir)? {
            if name.starts_with("index-") && name != index_name(number) {
                let p = dir.join(&name);
                shared.io.remove_file(&p).ctx("remove", &p)?;
            }
        }
        let part = Self {
            shared,
            runs,
            current: IndexFile {
                number,
                file,
                path,
                len,
            },
            base: None,
            newest,
            latched: false,
        };
        Ok(Opened { part, slot })
    }

    fn check_writable(&self) -> Result<()> {
        self.shared.check_open("checkpoint")?;
        if self.latched {
            return Err(StorageError::Latched { what: "checkpoint" });
        }
        Ok(())
    }

    /// Steps 1 to 3 of a commit (see the module docs); returns the new
    /// index file if a base replaced the current one, and the slot written.
    fn write_commit(
        &mut self,
        runs: &mut FileRuns<I>,
        change: IndexChange<'_>,
        checkpoint: &[u8],
    ) -> std::result::Result<Written<I::File>, FileError> {
        let mark = runs.prepare_commit()?;
        let (index_file, index_len, records, replaced) = match change {
            IndexChange::Delta(records) => {
                let mut out = Vec::with_capacity(records.len() + chunks::CHUNK_HEADER);
                chunks::encode(records, INDEX_RECORD, &mut out);
                let cur = &self.current;
                cur.file
                    .write_at(cur.len, &out)
                    .ctx("append index", &cur.path)?;
                self.shared.sync(&cur.file, &cur.path)?;
                let mut count = self.runs.len() as u64;
                let mut seen = FxHashMap::<u64, bool>::default();
                for r in records.chunks_exact(INDEX_RECORD) {
                    let mut rec = [0u8; INDEX_RECORD];
                    rec.copy_from_slice(r);
                    let run = index_record_run(&rec);
                    let present = seen
                        .get(&run)
                        .copied()
                        .unwrap_or_else(|| self.runs.contains(&run));
                    let now = index_record_state(&rec) != DELETED;
                    count = count + u64::from(now && !present) - u64::from(present && !now);
                    seen.insert(run, now);
                }
                (cur.number, cur.len + out.len() as u64, count, None)
            }
            IndexChange::Base => {
                let Some(base) = self.base.take() else {
                    return Err(FileError::Corrupt {
                        file: String::new(),
                        what: "internal: base commit without a base",
                        at: 0,
                    });
                };
                self.shared.sync(&base.file.file, &base.file.path)?;
                self.shared.sync_dir(&self.shared.dir)?;
                let (n, len, count) = (base.file.number, base.file.len, base.runs.len() as u64);
                // Keep the staged records until the commit point passes.
                self.base = Some(base);
                (n, len, count, Some(()))
            }
        };
        let seq = self.newest.map_or(1, |s| s + 1);
        let slot = Slot {
            seq,
            index_file,
            index_len,
            index_records: records,
            store_gen: mark.generation,
            store_len: mark.len,
            releases_len: mark.releases_len,
            checkpoint: checkpoint.to_vec(),
        };
        let paths = pair::paths(&self.shared.dir, SLOT_STEM);
        pair::write(&self.shared, &paths, &slot.encode())?;
        self.newest = Some(seq);
        let new_file = match replaced {
            Some(()) => self.base.take().map(|b| {
                self.runs = b.runs;
                b.file
            }),
            None => {
                if let IndexChange::Delta(records) = change {
                    apply_runs(&mut self.runs, records);
                }
                self.current.len = index_len;
                None
            }
        };
        Ok(Written {
            new_file,
            records,
            position: address_of(&mark),
        })
    }
}

/// What a commit wrote, once its slot is durable.
struct Written<F> {
    /// The base's index file, which replaces the current one.
    new_file: Option<IndexFile<F>>,
    /// Index records the commit holds.
    records: u64,
    /// The store position it recorded.
    position: u64,
}

fn address_of(mark: &crate::store::StoreMark) -> u64 {
    crate::store::position_of(mark.generation, mark.len)
}

impl<I: Io> CheckpointStore for FileCheckpoint<I> {
    type Runs = FileRuns<I>;

    fn read_index(&mut self, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        self.shared.check_open("checkpoint")?;
        let cur = &self.current;
        let map = cur
            .file
            .map()
            .ctx("map index", &cur.path)
            .map_err(StorageError::from)?;
        let payloads = index_chunks(&map, cur.len, &cur.path).map_err(StorageError::from)?;
        let count = self.runs.len() as u64;
        // Newest record first: a run's first record met is its state in the
        // index (a run deleted last is not in `runs`, so its older records
        // are passed over too). Each run visited is taken out of `runs`,
        // so it is visited once; `runs` is folded again afterwards.
        let mut chunk = Vec::with_capacity(VISIT_RECORDS * INDEX_RECORD);
        let mut visited = Ok(());
        'walk: for payload in payloads.iter().rev() {
            for rec in payload.chunks_exact(INDEX_RECORD).rev() {
                let Ok(rec) = <&[u8; INDEX_RECORD]>::try_from(rec) else {
                    continue;
                };
                if !self.runs.remove(&index_record_run(rec)) {
                    continue;
                }
                chunk.extend_from_slice(rec);
                if chunk.len() == VISIT_RECORDS * INDEX_RECORD {
                    visited = visit(&chunk);
                    chunk.clear();
                    if visited.is_err() {
                        break 'walk;
                    }
                }
            }
        }
        if visited.is_ok() && !chunk.is_empty() {
            visited = visit(&chunk);
        }
        // The set keeps its capacity: folding it again allocates nothing.
        self.runs.clear();
        for payload in &payloads {
            apply_runs(&mut self.runs, payload);
        }
        debug_assert_eq!(self.runs.len() as u64, count);
        visited.map(|()| count)
    }

    fn begin_base(&mut self) -> Result<()> {
        self.check_writable()?;
        if let Some(old) = self.base.take() {
            drop(old.file.file);
            self.shared
                .io
                .remove_file(&old.file.path)
                .ctx("remove abandoned base", &old.file.path)
                .map_err(StorageError::from)?;
        }
        let number = self.current.number + 1;
        let path = self.shared.dir.join(index_name(number));
        if self.shared.io.exists(&path) {
            self.shared
                .io
                .remove_file(&path)
                .ctx("remove stale base", &path)
                .map_err(StorageError::from)?;
        }
        let file = self
            .shared
            .io
            .open(&path, OpenMode::CreateNew)
            .ctx("create base", &path)
            .map_err(StorageError::from)?;
        self.base = Some(Base {
            file: IndexFile {
                number,
                file,
                path,
                len: 0,
            },
            runs: Runs::default(),
        });
        Ok(())
    }

    fn base_chunk(&mut self, records: &[u8]) -> Result<()> {
        self.check_writable()?;
        drop(index_records(records, "base_chunk")?);
        let Some(base) = self.base.as_mut() else {
            return Err(StorageError::Misuse {
                call: "base_chunk",
                why: "no base was begun",
            });
        };
        let mut out = Vec::with_capacity(records.len() + chunks::CHUNK_HEADER);
        chunks::encode(records, INDEX_RECORD, &mut out);
        let f = &mut base.file;
        if let Err(e) = f.file.write_at(f.len, &out).ctx("write base", &f.path) {
            // A base missing this chunk must never be committed.
            self.latched = true;
            return Err(e.into());
        }
        f.len += out.len() as u64;
        apply_runs(&mut base.runs, records);
        Ok(())
    }

    fn commit(
        &mut self,
        runs: &mut FileRuns<I>,
        change: IndexChange<'_>,
        checkpoint: &[u8],
    ) -> Result<Committed> {
        self.check_writable()?;
        runs.check_commit()?;
        match change {
            IndexChange::Delta(records) => drop(index_records(records, "commit")?),
            IndexChange::Base if self.base.is_none() => {
                return Err(StorageError::Misuse {
                    call: "commit",
                    why: "a base commit needs begin_base first",
                });
            }
            IndexChange::Base => {}
        }
        let Written {
            new_file,
            records,
            position,
        } = match self.write_commit(runs, change, checkpoint) {
            Ok(done) => done,
            Err(e) => {
                // What the failed sync covered is in an unknown state.
                self.latched = true;
                runs.latched = true;
                return Err(e.into());
            }
        };
        // The commit is durable, so it succeeded whatever follows: what it
        // no longer names can go, and a failure to delete it leaves files
        // that the next open deletes (reporting it would tell the caller a
        // durable commit failed).
        if let Some(file) = new_file {
            let old = std::mem::replace(&mut self.current, file);
            drop(old.file);
            let _ = self.shared.io.remove_file(&old.path);
        }
        let _ = runs.committed();
        Ok(Committed {
            index_records: records,
            store_position: position,
        })
    }
}

impl<I: Io> std::fmt::Debug for FileCheckpoint<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileCheckpoint")
            .field("dir", &self.shared.dir)
            .finish_non_exhaustive()
    }
}
