//! Streams from a run to its clients: [`crate::Ctx::stream`] gives a
//! [`StreamSender`] of chunks, [`Engine::subscribe`] an async stream of them
//! from a cursor. Typical use: the tokens of a language model's answer,
//! relayed to a user as they come while the step that asks the model runs.
//!
//! # Records and where chunks live
//!
//! Opening a stream is a workflow operation: a `Value` record of kind
//! [`value_kind::STREAM`] whose value is the stream's name, at the code's
//! next sequence number (so replay finds it, and code that opens another
//! name there stops with the two names). Each chunk is a `Chunk` record
//! naming that operation; `StreamEnd` ends it. A name is opened once per
//! run; a chunk's index is its place among its stream's `Chunk` records.
//!
//! Chunks live in the run's journal, like every other record, rather than
//! out of line. That is what makes them durable in the shard's group
//! commits with no store of their own (a chunk is one log record, made
//! durable by the flush that covers it with whatever else arrived
//! meanwhile), carried whole by everything that moves a journal (parking,
//! checkpoints, backups, migrations, reshards), and consistent with the
//! run after any crash (the log keeps a prefix: a chunk lost is lost with
//! every record after it, the step that sent it included, so the step
//! runs again and sends it again). An out-of-line home would need a
//! second durable structure whose cut after a crash agrees with the log's.
//!
//! Replay does not keep them: the run machine takes a `Chunk` as a host
//! record (it wakes no code, takes no number, keeps no byte of it), and
//! nothing replays a send (a chunk comes from a step or a task holding the
//! sender, and a replayed step returns its recorded result without
//! running). No walk of a journal but a subscriber's decodes a chunk:
//! loading a parked run, building its machine, loading a checkpoint,
//! summing a finished run up, reading its attributes or its `Done` walk
//! with `fusee_core::record::iter_canonical_passing`, which frames each
//! chunk (its length varint and its kind byte) and hands a run of them
//! over as one item (`ShardCore::apply_passed_chunks` applies it: the
//! bytes journaled, a reset's copies counted off, the run marked as
//! streaming).
//!
//! # Chunks apart in the run store
//!
//! In memory and in the log a chunk is a record of its run's journal, as
//! above. A parked run's journal lives in the run store, and so does a
//! loaded run's once it reaches 256 KiB: a checkpoint writes it to a
//! frame as a park does and names the frame, so a long stream is not
//! carried by every checkpoint. There, a frame whose chunks reach
//! [`crate::Config::stream_apart_bytes`] (64 KiB by default) keeps them in
//! a `Stream` frame of their own and says where each run of them stood
//! among its records (`fusee_core::store::apart`). So what restarts and
//! loads a run reads none of them: an open applies a loaded run's stored
//! prefix and starts its code from the short frame, a signal loads a
//! parked run from it, its result is read from it, and its finished
//! `Done` frame (and its summary, and a compaction's rewrite) names the
//! same `Stream` frames again instead of copying them; each run of chunks
//! is applied where it stood, counted but unread. A subscriber, a reset's
//! copies, a migration's copy and `fusee show` read them and put them
//! back (`recovery::read_chain`): the same bytes the frame would have
//! held. The `Stream` frames are written with the frame that names them
//! and made durable by the same checkpoint commit, so a crash keeps both
//! or neither; they go when no frame of the run names them any more (its
//! chunks' or its retention's end, a rewrite that holds them again), and
//! a compaction that moves them writes the frame naming them again before
//! its checkpoint commits. Measured (`benches/RESULTS.md`, "Streams at a
//! restart, chunks apart"): a run with 100,000 chunks restarts about 1.1x
//! the time of the same run without, and holds no more memory.
//!
//! # Sending, and determinism
//!
//! A sender counts the chunks it sent; the shard records chunk `i` of a
//! stream once: a chunk sent with an index the stream already holds is
//! acknowledged and dropped, unread. So a step that runs again (a retry,
//! or after a crash) and sends again does not duplicate what its earlier
//! attempt sent, and a sender cloned into each attempt starts where the
//! clone was made. Chunks sent again are not compared with the recorded
//! ones: the first recording of each index wins (a model asked again gives
//! other tokens; the client has seen the first ones). One sender at a time
//! per stream: two senders counting from the same index would have the
//! second's chunks dropped as repeats.
//!
//! A send returns once the shard recorded (or refused) the chunk, not once
//! it is durable: a send never waits for a flush of its own, and a client
//! sees a chunk only once it is durable (below).
//!
//! # Limits and retention
//!
//! A run sends at most [`crate::Config::max_stream_chunks`] chunks over all
//! its streams ([`Error::StreamLimit`]), each at most
//! [`crate::Config::max_payload`] bytes ([`Error::TooLarge`]).
//!
//! Retention: streams have their own, [`crate::Config::stream_retention`]
//! (by default the run's, [`crate::Config::retention`]). While the run is
//! unfinished its chunks are in its journal; once it finished, its
//! journal is kept whole for [`crate::Config::history_retention`] (for a
//! journal of at most [`crate::Config::history_max_bytes`]) and then cut
//! to a summary, which keeps the run's `Start` and `Done` *and every
//! stream record* (each opening, chunk and end), whatever their size.
//! When the streams' retention ends, the chunks go (each stream's opening
//! and end stay): a subscription then is [`Error::StreamGone`], saying
//! when they went, from that time on (the shard answers by the rule, not
//! by what a frame not yet rewritten still holds), and the run's frame is
//! rewritten without them when it parks or by the pass over parked
//! finished runs. The summary goes when the run's retention ends, and the
//! streams with it (a subscription then is [`Error::NotFound`]). So a
//! client that comes back for the tokens of a finished answer finds them
//! for the streams' retention, and the answer for the run's; the disk
//! cost is bounded per run by the chunk limit, for that time.
//!
//! # Subscribing
//!
//! [`Engine::subscribe`] reads the run's journal through the shard, which
//! answers once every record it holds is durable (the output-commit rule:
//! no client sees a chunk a crash could take back), and yields the
//! stream's chunks from the cursor on, each with its index: a client that
//! keeps the index of the last chunk it got resumes after a restart of
//! either side with `from = index + 1`. It ends after the last chunk once
//! the stream ended or the run finished; while neither, it asks again
//! after a short pause (1 ms, doubling to 50 ms while nothing comes).
//!
//! Each read after the first asks for the journal's bytes after those
//! the cursor walked whole (`Cursor::scanned`), and the shard answers an
//! unfinished run in memory with those alone, from memory, its stored
//! prefix not read (`LoadedRun::blob_journal` says where memory begins):
//! a subscriber copies and walks each chunk about once. That is sound
//! because an unfinished run's journal is only appended to and a reader
//! only ever had durable bytes, which a restart keeps byte for byte. Any
//! other answer (a parked or finished run, a reader behind what memory
//! holds) is the whole journal, and the cursor walks it afresh. Measured
//! (`benches/RESULTS.md`, "A live subscriber"): a subscriber used to cost
//! 40 to 240 µs of CPU a chunk of 100,000, now about 2.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use fusee_core::record::{Record, RecordRef, RunId, Seq, iter_canonical, value_kind};
use futures_util::Stream;
use serde::Serialize;

use crate::client::LiveJournal;
use crate::engine::WeakEngine;
use crate::runtime::Input;
use crate::{Engine, Error, Result};

/// The sending end of one of a run's streams, from [`crate::Ctx::stream`].
///
/// `Send`, `Sync` and cheap to clone: move it into a step (the usual
/// place: the step that calls the model sends its tokens) or any task.
/// Its futures need the engine's tokio runtime; awaited in the workflow's
/// own code they would make it wait on something its journal does not
/// hold, so send from a step. A clone counts on from the chunks its
/// original sent (see the [module docs](self)).
#[derive(Clone)]
pub struct StreamSender {
    engine: Option<WeakEngine>,
    /// The simulator's post, when the simulator runs the code (it has no
    /// engine): requests go there, and its world hands them to the shard.
    #[cfg(feature = "testing")]
    sim: Option<SimPost>,
    id: Arc<str>,
    name: Arc<str>,
    run: RunId,
    seq: Seq,
    next: u64,
}

impl std::fmt::Debug for StreamSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSender")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("run", &self.run)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

/// The simulator's post of stream requests: (workflow ID, input), taken
/// by its world, which hands each to the ID's shard when its seed says.
#[cfg(feature = "testing")]
pub(crate) type SimPost = Arc<std::sync::Mutex<Vec<(Arc<str>, Input)>>>;

impl StreamSender {
    pub(crate) fn new(
        engine: Option<WeakEngine>,
        #[cfg(feature = "testing")] sim: Option<SimPost>,
        id: Arc<str>,
        name: Arc<str>,
        run: RunId,
        seq: Seq,
    ) -> Self {
        Self {
            engine,
            #[cfg(feature = "testing")]
            sim,
            id,
            name,
            run,
            seq,
            next: 0,
        }
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The index the next chunk this sender sends takes.
    pub fn index(&self) -> u64 {
        self.next
    }

    /// Sends `chunk` as the stream's chunk [`index`](Self::index), then
    /// counts it. Returns once the shard recorded it (durable with the
    /// shard's next flush, visible to subscribers then) or found it
    /// recorded already (a step run again). Errors record nothing:
    /// [`Error::StreamLimit`], [`Error::TooLarge`], [`Error::StreamClosed`]
    /// (the stream ended, the run finished), [`Error::Closed`] (the engine
    /// is gone), [`Error::Busy`].
    pub async fn send(&mut self, chunk: impl Into<Vec<u8>>) -> Result<()> {
        let (run, seq, index, payload) = (self.run, self.seq, self.next, chunk.into());
        self.request(|reply| Input::Chunk {
            run,
            seq,
            index,
            payload,
            reply,
        })
        .await?;
        self.next += 1;
        Ok(())
    }

    /// [`send`](Self::send) of `value` encoded as JSON.
    pub async fn send_json<T: Serialize>(&mut self, value: &T) -> Result<()> {
        let bytes = crate::workflow::encode(value)
            .map_err(|e| Error::codec_for("stream chunk", &self.id, e))?;
        self.send(bytes).await
    }

    /// Ends the stream: its subscriptions end after its last chunk, and
    /// later sends are [`Error::StreamClosed`]. Ending an ended stream is
    /// no error (a step run again ends it again).
    pub async fn end(&self) -> Result<()> {
        let (run, seq) = (self.run, self.seq);
        self.request(|reply| Input::StreamEnd { run, seq, reply })
            .await
    }

    /// Sends the input `make` builds to the run's shard and waits for its
    /// answer: through the engine, or the simulator's post.
    async fn request<T>(
        &self,
        make: impl FnOnce(tokio::sync::oneshot::Sender<Result<T>>) -> Input,
    ) -> Result<T> {
        #[cfg(feature = "testing")]
        if let Some(post) = &self.sim {
            let (tx, rx) = tokio::sync::oneshot::channel();
            post.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((Arc::clone(&self.id), make(tx)));
            // A power cut drops the request with the step awaiting it.
            return rx.await.map_err(|_| Error::Closed)?;
        }
        self.engine()?.request(&self.id, make).await
    }

    fn engine(&self) -> Result<Engine> {
        self.engine
            .as_ref()
            .and_then(WeakEngine::upgrade)
            .ok_or(Error::Closed)
    }
}

/// One chunk of a stream, as a subscription yields it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamChunk {
    /// Its index in the stream, from 0: resume after it with
    /// `from = index + 1`.
    pub index: u64,
    /// The bytes sent.
    pub payload: Vec<u8>,
}

/// An async stream ([`futures_util::Stream`]) of a stream's chunks, from
/// [`Engine::subscribe`]. Yields each durable chunk from the cursor on, in
/// order; ends after the last one once the stream ended or its run
/// finished. An error is its last item.
pub struct Subscription {
    inner: Pin<Box<dyn Stream<Item = Result<StreamChunk>> + Send>>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").finish_non_exhaustive()
    }
}

impl Stream for Subscription {
    type Item = Result<StreamChunk>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// Bytes of chunks one read of the journal hands over at most (at least
/// one chunk): a long stream is read a page at a time.
const PAGE_BYTES: usize = 1 << 20;
/// The first pause before asking again while nothing new came.
const IDLE_MIN: Duration = Duration::from_millis(1);
/// The longest pause between two reads while nothing new comes.
const IDLE_MAX: Duration = Duration::from_millis(50);

impl Engine {
    /// The chunks of stream `name` of workflow `id`'s latest run (the run
    /// at the first read: a later run of the ID is not followed), from
    /// chunk index `from` on: see [`Subscription`] and the
    /// [stream docs](crate::stream). Bad input is the subscription's one
    /// item: [`Error::NotFound`] (no such workflow),
    /// [`Error::UnknownStream`] (its run finished without opening
    /// `name`), [`Error::StreamCursor`] (`from` past the stream's durable
    /// chunks). A subscription made before the run opens the stream waits
    /// for it.
    pub fn subscribe(&self, id: &str, name: &str, from: u64) -> Subscription {
        Sub::new(self, id, name, from).subscription()
    }

    /// [`subscribe`](Self::subscribe), with its first read done before it
    /// returns: bad input is this call's `Err` rather than the
    /// subscription's item (what a server needs to answer it with an HTTP
    /// status before it starts streaming).
    pub async fn subscribe_checked(&self, id: &str, name: &str, from: u64) -> Result<Subscription> {
        let mut sub = Sub::new(self, id, name, from);
        sub.read().await?;
        Ok(sub.subscription())
    }
}

/// A subscription's state between reads.
struct Sub {
    engine: Engine,
    cursor: Cursor,
    buf: VecDeque<StreamChunk>,
    idle: Duration,
}

impl Sub {
    fn new(engine: &Engine, id: &str, name: &str, from: u64) -> Self {
        Sub {
            engine: engine.clone(),
            cursor: Cursor::new(id, name, from),
            buf: VecDeque::new(),
            idle: IDLE_MIN,
        }
    }

    fn subscription(self) -> Subscription {
        Subscription {
            inner: Box::pin(futures_util::stream::unfold(self, Sub::next_item)),
        }
    }

    async fn next_item(mut self) -> Option<(Result<StreamChunk>, Self)> {
        loop {
            if let Some(c) = self.buf.pop_front() {
                return Some((Ok(c), self));
            }
            if self.cursor.finished() {
                return None;
            }
            match self.read().await {
                Err(e) => {
                    self.cursor.finished = true;
                    return Some((Err(e), self));
                }
                Ok(true) => self.idle = IDLE_MIN,
                Ok(false) => {
                    tokio::time::sleep(self.idle).await;
                    self.idle = (self.idle * 2).min(IDLE_MAX);
                }
            }
        }
    }

    /// One read of the run's durable journal: whether it brought chunks
    /// or the end.
    async fn read(&mut self) -> Result<bool> {
        let (id, run, from) = (
            self.cursor.id.clone(),
            self.cursor.run(),
            self.cursor.scanned(),
        );
        let live = self
            .engine
            .request(&self.cursor.id, |reply| Input::Journal {
                id,
                run,
                from,
                reply,
            })
            .await?;
        let chunks = self.cursor.take(&live)?;
        let got = !chunks.is_empty();
        self.buf.extend(chunks);
        Ok(got || self.cursor.finished())
    }
}

/// A subscriber's place in one stream, fed with reads of its run's
/// journal as the shard answers `Input::Journal` (durable when sent). It
/// owns what a read means: the run it follows (the latest when it began),
/// the next index, when the stream is over, and the errors of a cursor
/// past the stream or of a finished run that never opened it. The
/// simulator's subscribers drive it with the shard's answers directly.
#[derive(Debug)]
pub(crate) struct Cursor {
    id: String,
    name: String,
    run: Option<RunId>,
    next: u64,
    finished: bool,
    /// What the walks of `run`'s journal counted through `scanned` bytes
    /// of it: a read asks for the bytes after only (a subscriber of a
    /// long stream copies and walks each chunk once, not at every read).
    seen: StreamView,
    scanned: u64,
}

impl Cursor {
    /// A cursor on stream `name` of `id`'s latest run, from index `from`.
    pub(crate) fn new(id: &str, name: &str, from: u64) -> Self {
        Self {
            id: id.to_string(),
            name: name.to_string(),
            run: None,
            next: from,
            finished: false,
            seen: StreamView::default(),
            scanned: 0,
        }
    }

    /// The run it follows, once a read named it: the one to ask for.
    pub(crate) fn run(&self) -> Option<RunId> {
        self.run
    }

    /// Bytes of the run's journal its walks went through: the shard may
    /// answer with the rest only (`LiveJournal::offset`).
    pub(crate) fn scanned(&self) -> u64 {
        if self.run.is_some() { self.scanned } else { 0 }
    }

    /// Whether the stream (or its run) ended and every chunk was taken.
    pub(crate) fn finished(&self) -> bool {
        self.finished
    }

    /// The stream's chunks in `live` from the cursor on (at most a page),
    /// the cursor moved past them.
    pub(crate) fn take(&mut self, live: &LiveJournal) -> Result<Vec<StreamChunk>> {
        if self.run != Some(live.run) {
            // Another run (or the first read): its walk starts afresh.
            self.seen = StreamView::default();
            self.scanned = 0;
        }
        self.run = Some(live.run);
        let base = match live.offset {
            0 => StreamView::default(),
            at if at == self.scanned => self.seen.counts(),
            // Not the rest of what was walked (never asked for): read
            // whole next time.
            _ => {
                self.scanned = 0;
                self.seen = StreamView::default();
                return Ok(Vec::new());
            }
        };
        let view =
            scan_on(&live.journal, &self.name, self.next, PAGE_BYTES, base).map_err(|at| {
                Error::Storage {
                    shard: live.shard,
                    error: fusee_storage::StorageError::Corrupt {
                        what: "run journal",
                        at: live.offset.saturating_add(at),
                    },
                }
            })?;
        // `live.complete` false: a finished run's summary, which keeps
        // every stream record (`crate::recovery::summary_keeps`) until
        // the streams' time passes: then only each opening and end.
        if let (Some((finished_ms, gone_ms)), Some(_)) = (live.streams_gone, view.seq) {
            return Err(Error::StreamGone {
                id: self.id.clone(),
                name: self.name.clone(),
                finished_ms,
                gone_ms,
            });
        }
        if self.next > view.len {
            return Err(Error::StreamCursor {
                id: self.id.clone(),
                name: self.name.clone(),
                from: self.next,
                len: view.len,
            });
        }
        if view.seq.is_none() && view.run_ended {
            return Err(Error::UnknownStream {
                id: self.id.clone(),
                run: live.run,
                name: self.name.clone(),
            });
        }
        self.next += view.chunks.len() as u64;
        self.finished = (view.ended || view.run_ended) && self.next == view.len;
        // A walk cut by the page goes on from where the last whole one
        // ended (the journal before that point does not change: a run's
        // records are only appended, and only durable ones were read).
        if !view.cut {
            self.scanned = live.offset.saturating_add(live.journal.len() as u64);
            self.seen = view.counts();
        }
        Ok(view.chunks)
    }
}

/// What one walk of a journal found of one stream.
#[derive(Debug, Default)]
pub(crate) struct StreamView {
    /// The operation that opened it, if the journal holds its opening.
    pub(crate) seq: Option<Seq>,
    /// How many chunks the journal holds.
    pub(crate) len: u64,
    /// Its chunks from the cursor on, at most a page of them.
    pub(crate) chunks: Vec<StreamChunk>,
    /// Its `StreamEnd` is in the journal.
    pub(crate) ended: bool,
    /// The run's `Done` is in the journal.
    pub(crate) run_ended: bool,
    /// The page filled before the walk's last chunk.
    pub(crate) cut: bool,
}

impl StreamView {
    /// What a later walk counts on from: all but the chunks.
    fn counts(&self) -> StreamView {
        StreamView {
            seq: self.seq,
            len: self.len,
            chunks: Vec::new(),
            ended: self.ended,
            run_ended: self.run_ended,
            cut: false,
        }
    }
}

/// Walks `journal` (canonical records) for stream `name`: its opening,
/// chunks from index `from` on (past `page_bytes` of them, at least one,
/// the rest are only counted), its end and the run's. `Err` is the offset
/// of an undecodable record.
#[cfg(test)]
pub(crate) fn scan(
    journal: &[u8],
    name: &str,
    from: u64,
    page_bytes: usize,
) -> std::result::Result<StreamView, u64> {
    scan_on(journal, name, from, page_bytes, StreamView::default())
}

/// [`scan`] of the records after those an earlier walk counted into
/// `base` (its opening, chunks and ends).
fn scan_on(
    journal: &[u8],
    name: &str,
    from: u64,
    page_bytes: usize,
    base: StreamView,
) -> std::result::Result<StreamView, u64> {
    let mut view = base;
    let mut bytes = 0usize;
    // A chunk did not fit: later reads take the rest.
    let mut full = false;
    each_record(journal, |rec| match rec {
        Record::Chunk { seq, payload, .. } if Some(seq) == view.seq => {
            let index = view.len;
            view.len += 1;
            if index >= from && !full {
                if view.chunks.is_empty() || bytes.saturating_add(payload.len()) <= page_bytes {
                    bytes = bytes.saturating_add(payload.len());
                    view.chunks.push(StreamChunk {
                        index,
                        payload: payload.to_vec(),
                    });
                } else {
                    full = true;
                    view.cut = true;
                }
            }
        }
        Record::StreamEnd { seq, .. } if Some(seq) == view.seq => view.ended = true,
        Record::Done { .. } => view.run_ended = true,
        rec => {
            if let Some((seq, opened)) = opening(&rec)
                && view.seq.is_none()
                && opened == name.as_bytes()
            {
                view.seq = Some(seq);
            }
        }
    })?;
    Ok(view)
}

/// Visits every record of `journal` (canonical records), borrowed; `Err`
/// is the offset of the first that does not decode.
fn each_record<'a>(
    journal: &'a [u8],
    mut visit: impl FnMut(RecordRef<'a>),
) -> std::result::Result<(), u64> {
    let mut records = iter_canonical(journal);
    while let Some(next) = records.next() {
        let Ok((rec, _)) = next else {
            return Err(records.offset() as u64);
        };
        visit(rec);
    }
    Ok(())
}

/// The stream `rec` opens, if it is a stream's opening: its operation and
/// its name's bytes.
fn opening<'a>(rec: &RecordRef<'a>) -> Option<(Seq, &'a [u8])> {
    match *rec {
        Record::Value {
            seq, kind, value, ..
        } if kind == value_kind::STREAM => Some((seq, value)),
        _ => None,
    }
}

/// A run's streams as its shard counts them to take chunks: each stream's
/// name, chunks and end, and the run's chunks over all of them. Built
/// from the run's journal when a chunk first comes for it in this process
/// (counts, no chunk kept), then kept up to date as the shard appends.
#[derive(Debug, Default)]
pub(crate) struct RunStreams {
    /// By the operation that opened it.
    streams: rustc_hash::FxHashMap<Seq, Counted>,
    /// Chunks over all the run's streams.
    pub(crate) total: u64,
}

/// One stream's count.
#[derive(Debug)]
pub(crate) struct Counted {
    pub(crate) name: Arc<str>,
    pub(crate) len: u64,
    pub(crate) ended: bool,
    /// The name was opened earlier in the run at this operation: this
    /// opening takes no chunks.
    pub(crate) again: Option<Seq>,
}

impl RunStreams {
    /// The counts of `journal` (canonical records); `Err` is the offset of
    /// an undecodable record.
    pub(crate) fn of(journal: &[u8]) -> std::result::Result<Self, u64> {
        let mut out = Self::default();
        let mut first: rustc_hash::FxHashMap<&[u8], Seq> = rustc_hash::FxHashMap::default();
        each_record(journal, |rec| match rec {
            Record::Chunk { seq, .. } => out.chunk(seq),
            Record::StreamEnd { seq, .. } => out.end(seq),
            rec => {
                if let Some((seq, name)) = opening(&rec) {
                    let again = first.get(name).copied();
                    first.entry(name).or_insert(seq);
                    out.streams.insert(
                        seq,
                        Counted {
                            name: Arc::from(String::from_utf8_lossy(name).as_ref()),
                            len: 0,
                            ended: false,
                            again,
                        },
                    );
                }
            }
        })?;
        Ok(out)
    }

    /// The stream opened at operation `seq`.
    pub(crate) fn get(&self, seq: Seq) -> Option<&Counted> {
        self.streams.get(&seq)
    }

    /// A chunk of stream `seq` was appended.
    pub(crate) fn chunk(&mut self, seq: Seq) {
        self.total += 1;
        if let Some(c) = self.streams.get_mut(&seq) {
            c.len += 1;
        }
    }

    /// Stream `seq`'s end was appended.
    pub(crate) fn end(&mut self, seq: Seq) {
        if let Some(c) = self.streams.get_mut(&seq) {
            c.ended = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use fusee_core::record::{RecordBuf, encode_canonical};

    use super::*;

    fn journal(recs: &[RecordBuf]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in recs {
            encode_canonical(r, &mut out);
        }
        out
    }

    fn open(seq: Seq, name: &str) -> RecordBuf {
        RecordBuf::Value {
            run: 1,
            seq,
            kind: value_kind::STREAM,
            value: name.as_bytes().into(),
        }
    }

    fn chunk(seq: Seq, b: &[u8]) -> RecordBuf {
        RecordBuf::Chunk {
            run: 1,
            seq,
            payload: b.into(),
        }
    }

    #[test]
    fn a_scan_takes_one_streams_chunks_from_the_cursor_a_page_at_a_time() {
        let j = journal(&[
            open(1, "a"),
            open(2, "b"),
            chunk(1, b"a0"),
            chunk(2, b"b0"),
            chunk(1, b"a1"),
            chunk(1, b"a2"),
            RecordBuf::StreamEnd { run: 1, seq: 1 },
        ]);
        let v = scan(&j, "a", 1, 1 << 20).unwrap();
        assert_eq!(v.seq, Some(1));
        assert_eq!(v.len, 3);
        assert!(v.ended);
        let got: Vec<_> = v
            .chunks
            .iter()
            .map(|c| (c.index, c.payload.clone()))
            .collect();
        assert_eq!(got, vec![(1, b"a1".to_vec()), (2, b"a2".to_vec())]);
        // A page of 2 bytes takes one chunk; the rest are counted.
        let v = scan(&j, "a", 0, 2).unwrap();
        assert_eq!((v.chunks.len(), v.len), (1, 3));
        let v = scan(&j, "b", 0, 2).unwrap();
        assert!(!v.ended);
        assert_eq!(v.chunks[0].payload, b"b0");
        let v = scan(&j, "c", 0, 2).unwrap();
        assert_eq!((v.seq, v.len), (None, 0));
        let counts = RunStreams::of(&j).unwrap();
        assert_eq!(counts.total, 4);
        assert_eq!(counts.get(1).map(|c| (c.len, c.ended)), Some((3, true)));
        assert_eq!(counts.get(2).map(|c| (c.len, c.ended)), Some((1, false)));
    }

    #[test]
    fn damaged_journals_are_errors_not_panics() {
        let mut j = journal(&[open(1, "a"), chunk(1, b"xyz")]);
        j.truncate(j.len() - 1);
        assert!(scan(&j, "a", 0, 10).is_err());
        assert!(RunStreams::of(&j).is_err());
    }
}
