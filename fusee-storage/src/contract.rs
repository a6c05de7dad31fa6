//! The traits a backend implements and the engine calls.
//!
//! See the crate documentation for the promises in prose and the
//! "Writing a backend" guide.

use fusee_core::record::Lsn;
use fusee_core::shard::BlobRef;

use crate::Result;

/// Many shards' storage. Shared between threads (`Send + Sync`); each shard
/// is opened by one owner at a time.
pub trait Storage: Send + Sync {
    /// A shard's log part.
    type Log: LogStore;
    /// A shard's run-store part.
    type Runs: RunStore;
    /// A shard's checkpoint part, which commits with this storage's run
    /// store.
    type Checkpoint: CheckpointStore<Runs = Self::Runs>;

    /// Opens shard `shard` (creating it empty if new) and returns its three
    /// parts with the state of its last commit: the run store rolled back
    /// to that commit's position, the log holding a prefix of what was
    /// appended that contains every flushed record. Everything the reopened
    /// log holds is durable (`durable_lsn() == last_lsn()`): a backend that
    /// finds records it cannot know were synced syncs them before returning,
    /// because the engine acts on every record it replays.
    ///
    /// Errors: [`crate::StorageError::AlreadyOpen`] while a part from an
    /// earlier open of the same shard is still alive;
    /// [`crate::StorageError::Closed`] after [`Storage::close`].
    fn open_shard(&self, shard: u32) -> Result<ShardParts<Self>>;

    /// Every shard this storage holds (opened at least once), ascending.
    fn shards(&self) -> Result<Vec<u32>>;

    /// Closes the storage: afterwards every call on it and on any part it
    /// gave out is a [`crate::StorageError::Closed`] error. Makes nothing
    /// durable that was not flushed or committed. Closing twice is allowed.
    fn close(&self) -> Result<()>;
}

/// What opening a shard yields: its three parts and what its last commit
/// recorded.
pub struct ShardParts<S: Storage + ?Sized> {
    /// The log.
    pub log: S::Log,
    /// The run store, rolled back to the last commit's position.
    pub runs: S::Runs,
    /// The checkpoint part; [`CheckpointStore::read_index`] streams the
    /// recovered index.
    pub checkpoint: S::Checkpoint,
    /// The last commit's checkpoint and positions.
    pub recovered: Recovered,
}

/// The state of a shard's last commit, as found when it was opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The checkpoint bytes of the last commit; `None` if the shard never
    /// committed.
    pub checkpoint: Option<Vec<u8>>,
    /// How many records the committed index holds.
    pub index_records: u64,
    /// The run store's position recorded by the last commit (backend-defined
    /// address space; 0 before the first commit). The run store starts
    /// there: frames appended after the commit are gone.
    pub store_position: u64,
}

/// A shard's log: records in LSN order, consecutive from 1.
pub trait LogStore: Send {
    /// Buffers `record` (canonical bytes) as LSN `lsn`, which must be
    /// [`LogStore::last_lsn`] + 1 ([`crate::StorageError::LsnGap`]
    /// otherwise). Longer than [`crate::MAX_RECORD`]:
    /// [`crate::StorageError::TooLarge`]. A failed append consumes no LSN.
    fn append(&mut self, lsn: Lsn, record: &[u8]) -> Result<()>;

    /// Makes every record appended so far durable and returns the durable
    /// LSN (= [`LogStore::last_lsn`]). One flush is one batch. If it fails,
    /// the part is latched: later appends, flushes and discards are
    /// [`crate::StorageError::Latched`] errors until the shard is reopened.
    fn flush(&mut self) -> Result<Lsn>;

    /// Starts a flush of every record appended so far and returns it as a
    /// [`FlushTicket`] whose I/O ([`FlushTicket::run`]) may run on another
    /// thread while this log takes the next batch's appends: the way a host
    /// keeps encoding while a flush is in flight (group commit). Records
    /// appended meanwhile are not covered by the ticket; reads still see
    /// them and the ticket's records. Nothing becomes durable, as far as
    /// this log reports, until [`LogStore::finish_flush`] takes the ticket
    /// back.
    ///
    /// At most [`LogStore::flushes_in_flight_max`] tickets may be
    /// outstanding (begun, not yet finished): a backend that pipelines
    /// refuses one more with [`crate::StorageError::Misuse`]. With more
    /// than one out, each covers the records appended between its begin
    /// and the one before, their I/O may run at once on different threads
    /// and complete in any order, and they are finished in the order they
    /// were begun (see [`LogStore::finish_flush`]). A ticket dropped
    /// instead of finished stays outstanding (nobody knows whether its
    /// records are durable), so such a log refuses flushes until the shard
    /// is reopened; a crash meanwhile keeps the usual prefix, whichever of
    /// the outstanding tickets ran: a later ticket's records that reached
    /// the backend while an earlier one's did not are not part of the
    /// reopened log. The default does the whole flush here and returns a
    /// ticket with nothing left to run, which is correct for any backend,
    /// just not overlapped.
    fn begin_flush(&mut self) -> Result<FlushTicket> {
        self.flush().map(FlushTicket::done)
    }

    /// Ends the flush `ticket` began (running its I/O first if nobody did)
    /// and returns the durable LSN it reached, exactly as
    /// [`LogStore::flush`] would. If its I/O failed, the log is latched as
    /// after a failed flush, and every ticket still out fails too (the
    /// records between are not known durable). A ticket from another log,
    /// or one finished before an earlier ticket of the same log, is a
    /// [`crate::StorageError::Misuse`] error that latches the log (the
    /// ticket is gone, so its records cannot be reported durable any
    /// more).
    fn finish_flush(&mut self, ticket: FlushTicket) -> Result<Lsn> {
        ticket.finish()
    }

    /// How many flush tickets may be outstanding at once: 1 unless the
    /// backend overlaps flushes (the PostgreSQL backend writes each on a
    /// connection of its own, so one flush's commit wait overlaps the
    /// next one's statement). A host that keeps this many in flight gets
    /// the backend's throughput; one that keeps one gets its latency. The
    /// default, 1, is right for every backend.
    fn flushes_in_flight_max(&self) -> usize {
        1
    }

    /// Starts a seal: a record, kept apart from the log, that every record
    /// through the durable LSN ([`LogStore::durable_lsn`] now) is durable
    /// (the format and its rules: [`crate::seal`]). Returns a
    /// [`SealTicket`] whose I/O ([`SealTicket::run`]: one small write and
    /// its sync) may run on another thread while this log goes on taking
    /// appends and flushes, as a flush ticket's does; hand it back to
    /// [`LogStore::finish_seal`].
    ///
    /// What a seal buys: once [`LogStore::finish_seal`] returned LSN `n`,
    /// every later open of the shard either yields a log whose last LSN is
    /// at least `n`, or fails with [`crate::StorageError::LostRecords`]
    /// naming the seal, the sealed LSN and the LSN the log ends at (never
    /// less data without an error), even for damage the log alone cannot
    /// tell from a torn tail. A seal claims only what was durable, so a
    /// crash at any point (between a flush and its seal, during a seal)
    /// never makes an undamaged shard fail to open; a seal torn by a crash
    /// leaves the one before it. Records flushed after the last seal are
    /// not covered: the host seals soon after each flush to bound that
    /// window. Opening never cuts, deletes or rewrites anything on the
    /// strength of a seal.
    ///
    /// At most one seal may be outstanding (a backend with real tickets
    /// refuses a second with [`crate::StorageError::Misuse`]). A latched
    /// log refuses to seal ([`crate::StorageError::Latched`]).
    ///
    /// The default seals nothing and returns a ticket with nothing to run:
    /// right for a backend whose log cannot lose acknowledged records
    /// without reporting it (PostgreSQL, where the server owns
    /// durability), wrong for one that keeps its log in files or an
    /// embedded database.
    fn begin_seal(&mut self) -> Result<SealTicket> {
        Ok(SealTicket::done(self.durable_lsn()))
    }

    /// Ends the seal `ticket` began (running its I/O first if nobody did)
    /// and returns the LSN sealed. If its I/O failed, the error is
    /// returned and the log is latched as after a failed flush (an `fsync`
    /// that failed on the shard's disk says later ones cannot be trusted
    /// either); the seal file keeps its previous record. A ticket from
    /// another log is a [`crate::StorageError::Misuse`] error.
    fn finish_seal(&mut self, ticket: SealTicket) -> Result<Lsn> {
        ticket.finish()
    }

    /// [`LogStore::begin_seal`], the ticket's I/O and
    /// [`LogStore::finish_seal`] in a row, on this thread: what a host
    /// calls when it would only wait for the seal anyway (at close).
    fn seal(&mut self) -> Result<Lsn> {
        let ticket = self.begin_seal()?;
        self.finish_seal(ticket)
    }

    /// Visits, in order, every record after `after` that this log holds
    /// (flushed or not) and returns the last LSN. Records before the first
    /// kept: [`crate::StorageError::Trimmed`]; `after` beyond the last
    /// record: [`crate::StorageError::BeyondEnd`]. An error from `visit`
    /// stops the read and is returned. The bytes are exactly those appended.
    fn read(&mut self, after: Lsn, visit: &mut dyn FnMut(Lsn, &[u8]) -> Result<()>) -> Result<Lsn>;

    /// Allows the backend to drop records through `lsn` (it may keep some;
    /// [`LogStore::first_lsn`] says what is left). `lsn` must not exceed the
    /// durable LSN ([`crate::StorageError::Misuse`]). The last LSN is kept
    /// even when every record is dropped, across reopens.
    fn discard_through(&mut self, lsn: Lsn) -> Result<()>;

    /// The first LSN still held (`last_lsn() + 1` when none is).
    fn first_lsn(&self) -> Lsn;

    /// The LSN of the last record appended (0 for a fresh log).
    fn last_lsn(&self) -> Lsn;

    /// The LSN through which records are durable.
    fn durable_lsn(&self) -> Lsn;
}

/// The I/O of one flush, taken out of its log by [`LogStore::begin_flush`]
/// so it can run on any thread (or of one seal, [`LogStore::begin_seal`]). It owns (or shares) everything it writes:
/// the log may take appends, reads and discards while it runs.
pub trait FlushWork: Send {
    /// Writes the batch (or the seal) and makes it durable; blocks until
    /// then.
    fn run(&mut self) -> Result<()>;
}

/// What a flush ticket and a seal ticket hold: I/O to run once, on any
/// thread, its outcome, and the log and LSN it is for.
struct TicketIo {
    /// The backend's name for the log that made it, so a ticket handed to
    /// another log is refused (0 for tickets with nothing left to run).
    log: u64,
    /// The last LSN a flush covers, or the LSN a seal records.
    lsn: Lsn,
    work: Option<Box<dyn FlushWork>>,
    outcome: Option<Result<()>>,
}

impl TicketIo {
    fn new(log: u64, lsn: Lsn, work: Box<dyn FlushWork>) -> Self {
        Self {
            log,
            lsn,
            work: Some(work),
            outcome: None,
        }
    }

    fn done(lsn: Lsn) -> Self {
        Self {
            log: 0,
            lsn,
            work: None,
            outcome: Some(Ok(())),
        }
    }

    fn run(&mut self) -> bool {
        if self.outcome.is_none() {
            let outcome = match self.work.as_mut() {
                Some(work) => work.run(),
                None => Ok(()),
            };
            self.outcome = Some(outcome);
        }
        matches!(self.outcome, Some(Ok(())))
    }

    fn has_run(&self) -> bool {
        self.outcome.is_some()
    }

    /// Runs the I/O if nobody did; drops the work (and the buffers it
    /// shares with the log) before returning the outcome.
    fn finish(mut self) -> Result<Lsn> {
        self.run();
        self.work = None;
        match self.outcome.take() {
            Some(Ok(())) | None => Ok(self.lsn),
            Some(Err(e)) => Err(e),
        }
    }

    fn fmt(&self, f: &mut std::fmt::Formatter<'_>, name: &str, lsn: &str) -> std::fmt::Result {
        f.debug_struct(name)
            .field("log", &self.log)
            .field(lsn, &self.lsn)
            .field("has_run", &self.has_run())
            .finish_non_exhaustive()
    }
}

/// One flush in flight: made by [`LogStore::begin_flush`], run anywhere
/// with [`FlushTicket::run`], and handed back to the same log's
/// [`LogStore::finish_flush`], which reports the records durable.
pub struct FlushTicket(TicketIo);

impl FlushTicket {
    /// A ticket with I/O still to run: `work` makes LSNs through `last`
    /// durable. `log` is the backend's name for the log (any value it can
    /// check in [`LogStore::finish_flush`]).
    pub fn new(log: u64, last: Lsn, work: Box<dyn FlushWork>) -> Self {
        Self(TicketIo::new(log, last, work))
    }

    /// A ticket whose flush already completed: LSNs through `last` are
    /// durable.
    pub fn done(last: Lsn) -> Self {
        Self(TicketIo::done(last))
    }

    /// Runs the flush's I/O, once: later calls do nothing. Blocks until the
    /// batch is durable or the I/O failed; the outcome is reported by
    /// [`LogStore::finish_flush`], on the log's own thread. Returns whether
    /// the I/O succeeded.
    pub fn run(&mut self) -> bool {
        self.0.run()
    }

    /// The last LSN the flush covers.
    pub fn last_lsn(&self) -> Lsn {
        self.0.lsn
    }

    /// The backend's name for the log that made the ticket.
    pub fn log(&self) -> u64 {
        self.0.log
    }

    /// Whether the I/O has run (successfully or not).
    pub fn has_run(&self) -> bool {
        self.0.has_run()
    }

    /// Runs the I/O if nobody did and returns its outcome with the ticket's
    /// last LSN; the work (with whatever buffers it shares with the log) is
    /// dropped first, so the log can take its buffers back.
    pub fn finish(self) -> Result<Lsn> {
        self.0.finish()
    }
}

impl std::fmt::Debug for FlushTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f, "FlushTicket", "last")
    }
}

/// One seal in flight: made by [`LogStore::begin_seal`], run anywhere with
/// [`SealTicket::run`], and handed back to the same log's
/// [`LogStore::finish_seal`]. Its work is a [`FlushWork`] (one small write
/// and its sync). A type of its own, so that a seal cannot be handed back
/// as a flush.
pub struct SealTicket(TicketIo);

impl SealTicket {
    /// A ticket with I/O still to run: `work` records `lsn` as sealed.
    /// `log` is the backend's name for the log.
    pub fn new(log: u64, lsn: Lsn, work: Box<dyn FlushWork>) -> Self {
        Self(TicketIo::new(log, lsn, work))
    }

    /// A ticket with nothing to run (a backend that needs no seal, or a
    /// seal already written): `lsn` is sealed.
    pub fn done(lsn: Lsn) -> Self {
        Self(TicketIo::done(lsn))
    }

    /// Runs the seal's I/O, once: later calls do nothing. Blocks until the
    /// seal is durable or the I/O failed; returns whether it succeeded
    /// (the outcome is reported by [`LogStore::finish_seal`]).
    pub fn run(&mut self) -> bool {
        self.0.run()
    }

    /// The LSN the seal records.
    pub fn lsn(&self) -> Lsn {
        self.0.lsn
    }

    /// The backend's name for the log that made the ticket.
    pub fn log(&self) -> u64 {
        self.0.log
    }

    /// Whether the I/O has run (successfully or not).
    pub fn has_run(&self) -> bool {
        self.0.has_run()
    }

    /// Runs the I/O if nobody did and returns its outcome with the sealed
    /// LSN; the work is dropped first.
    pub fn finish(self) -> Result<Lsn> {
        self.0.finish()
    }
}

impl std::fmt::Debug for SealTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f, "SealTicket", "lsn")
    }
}

/// A shard's run store: frames addressed by [`BlobRef`].
pub trait RunStore: Send {
    /// Appends a frame and returns its address. Longer than
    /// [`crate::MAX_FRAME`]: [`crate::StorageError::TooLarge`]. The frame is
    /// readable at once and durable once the next commit succeeds.
    fn append(&mut self, frame: &[u8]) -> Result<BlobRef>;

    /// Replaces `out`'s contents with the exact bytes of the frame at
    /// `blob`, or fails ([`crate::StorageError::UnknownBlob`] for a
    /// reference that names no live frame, `Corrupt` for damaged bytes):
    /// it never returns other bytes.
    fn read(&mut self, blob: BlobRef, out: &mut Vec<u8>) -> Result<()>;

    /// A hint that the frames at `blobs` will be read soon, so a backend
    /// whose every read is a round trip to a server may fetch them in one
    /// (a migration's copy and check walk many runs in a row, and the
    /// engine's listing pages, attribute build and pass over finished runs
    /// read a batch of parked runs' frames at a time). It changes
    /// nothing a read returns, and a backend may ignore it (the default).
    /// Only an error of the fetch itself is returned.
    fn prefetch(&mut self, blobs: &[BlobRef]) -> Result<()> {
        let _ = blobs;
        Ok(())
    }

    /// Declares the frame no longer needed. Its space may be reclaimed, but
    /// not durably before the next commit: a crash before it leaves the
    /// frame readable, because the committed index may still name it. After
    /// a release, reading the frame fails or returns its exact bytes.
    fn release(&mut self, blob: BlobRef) -> Result<()>;

    /// Reclaims released space. A backend that must move live frames to do
    /// so calls `moved(old, new)` for each; both addresses stay readable
    /// until the next commit (which the caller makes after updating its
    /// references), so a crash in between loses nothing. Returns how many
    /// frames moved. A backend that reclaims in place moves none.
    fn compact(&mut self, moved: &mut dyn FnMut(BlobRef, BlobRef)) -> Result<u64>;

    /// The current end of the store (backend-defined; what a commit made now
    /// would record).
    fn position(&self) -> u64;
}

/// How a commit changes the index.
#[derive(Clone, Copy, Debug)]
pub enum IndexChange<'a> {
    /// Concatenated index records applied in order: each upserts its run,
    /// or removes it if its state is [`crate::DELETED`] (removing an absent
    /// run is not an error). The length must be a multiple of
    /// [`crate::INDEX_RECORD`].
    Delta(&'a [u8]),
    /// The base streamed since [`CheckpointStore::begin_base`] replaces the
    /// whole index.
    Base,
}

/// A shard's checkpoint part: commits the index with the checkpoint.
pub trait CheckpointStore: Send {
    /// The run store this part commits with.
    type Runs: RunStore;

    /// Visits the index of the last commit in chunks of whole records (each
    /// run once, in no particular order) and returns how many records it
    /// holds. An error from `visit` stops the read and is returned.
    fn read_index(&mut self, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<u64>;

    /// Starts streaming a new base, abandoning any unfinished one. Nothing
    /// changes until [`CheckpointStore::commit`] with [`IndexChange::Base`];
    /// a crash before it leaves the previous index.
    fn begin_base(&mut self) -> Result<()>;

    /// Adds records to the base being streamed (a multiple of
    /// [`crate::INDEX_RECORD`] bytes; each run at most once per base).
    fn base_chunk(&mut self, records: &[u8]) -> Result<()>;

    /// Makes `runs` durable and records its position, then makes the index
    /// change and `checkpoint` durable atomically: after any crash, opening
    /// the shard yields either the previous commit or this one whole
    /// (index, checkpoint and store position together). Returns what was
    /// committed. If it fails, this part is latched (and `runs` may be).
    fn commit(
        &mut self,
        runs: &mut Self::Runs,
        change: IndexChange<'_>,
        checkpoint: &[u8],
    ) -> Result<Committed>;
}

/// What a successful commit recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Committed {
    /// How many records the index now holds.
    pub index_records: u64,
    /// The run store's position the commit recorded.
    pub store_position: u64,
}
