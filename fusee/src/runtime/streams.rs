//! Stream chunks taken on the shard ([`crate::stream`]): a chunk or a
//! stream's end from a sender becomes a record of its run, counted
//! against the run's limit, once per chunk index.

use fusee_core::record::{Name, Record, RunId, Seq};
use rustc_hash::FxHashMap;

use super::sabotage::Sabotage;
use super::{Reply, ShardLoop};
use crate::Error;
use crate::stream::RunStreams;

/// The shard's count of each streaming run's chunks (`crate::stream`'s
/// `RunStreams`), for the runs a chunk came for in this process: built
/// from the run's journal at the first, dropped when the run finishes.
#[derive(Default)]
pub(super) struct Streams {
    runs: FxHashMap<RunId, RunStreams>,
}

impl Streams {
    /// Run `run` finished or left: its count goes.
    pub(super) fn forget(&mut self, run: RunId) {
        self.runs.remove(&run);
    }
}

/// What a sender asks of its stream.
enum Ask {
    Chunk { index: u64, payload: Vec<u8> },
    End,
}

impl ShardLoop {
    /// Takes chunk `index` of the stream run `run` opened at operation
    /// `seq`: recorded if new, acknowledged if recorded already, refused
    /// (nothing recorded) past the limits or after the stream's or run's
    /// end.
    pub(super) fn take_chunk(
        &mut self,
        run: RunId,
        seq: Seq,
        index: u64,
        payload: Vec<u8>,
        reply: Reply<()>,
        now_ms: u64,
    ) {
        let answer = self.take_stream(run, seq, Ask::Chunk { index, payload }, now_ms);
        let _ = reply.send(answer);
    }

    /// Ends the stream run `run` opened at operation `seq` (again: no
    /// error).
    pub(super) fn take_stream_end(&mut self, run: RunId, seq: Seq, reply: Reply<()>, now_ms: u64) {
        let answer = self.take_stream(run, seq, Ask::End, now_ms);
        let _ = reply.send(answer);
    }

    fn take_stream(&mut self, run: RunId, seq: Seq, ask: Ask, now_ms: u64) -> Result<(), Error> {
        let shard = self.shard;
        let storage = |error| Error::Storage { shard, error };
        if self.core.get(run).is_none() {
            // A parked run (a sender held past its step): loaded back.
            self.load(run, now_ms).map_err(storage)?;
        }
        let Some(l) = self.core.get(run) else {
            return Err(Error::StreamClosed {
                id: String::new(),
                name: String::new(),
                reason: format!("shard {shard} has no unfinished run {run}"),
            });
        };
        let id = l.id.to_string();
        if let Some((status, _)) = l.done {
            self.streams.forget(run);
            return Err(Error::StreamClosed {
                id,
                name: String::new(),
                reason: format!("its run {run} has finished ({status:?})"),
            });
        }
        let known = self
            .streams
            .runs
            .get(&run)
            .is_some_and(|s| s.get(seq).is_some());
        if !known {
            // First chunk here, or a stream opened since the count was
            // built: counted from the journal.
            let journal = self.run_journal(run).map_err(storage)?;
            let counts = RunStreams::of(&journal).map_err(|at| {
                storage(fusee_storage::StorageError::Corrupt {
                    what: "run journal",
                    at,
                })
            })?;
            self.streams.runs.insert(run, counts);
        }
        let limit = self.config.max_stream_chunks;
        let max = self.config.max_payload;
        let again_recorded = self.sabotaged(Sabotage::ChunkAgain);
        let counts = self.streams.runs.get_mut(&run).expect("inserted above");
        let Some(stream) = counts.get(seq) else {
            return Err(Error::StreamClosed {
                id,
                name: String::new(),
                reason: format!("run {run} opened no stream at operation {seq}"),
            });
        };
        let (name, len, ended, again) =
            (stream.name.clone(), stream.len, stream.ended, stream.again);
        let closed = |id: String, reason: String| Error::StreamClosed {
            id,
            name: name.to_string(),
            reason,
        };
        if let Some(first) = again {
            return Err(closed(
                id,
                format!(
                    "the run opened it again at operation {seq}; a run opens a stream once (first at operation {first})"
                ),
            ));
        }
        // The record borrows the chunk's bytes from `ask`: not copied on
        // their way to the log.
        let rec: Record<Name, &[u8]> = match &ask {
            Ask::End if ended => return Ok(()),
            Ask::End => {
                counts.end(seq);
                Record::StreamEnd { run, seq }
            }
            Ask::Chunk { index, .. } if *index < len && !again_recorded => return Ok(()),
            Ask::Chunk { .. } if ended => {
                return Err(closed(id, "the stream has ended".into()));
            }
            Ask::Chunk { index, .. } if *index > len => {
                return Err(closed(
                    id,
                    format!(
                        "chunk {index} would leave a gap: the stream holds {len} chunks (two senders at once?)"
                    ),
                ));
            }
            Ask::Chunk { payload, .. } => {
                if payload.len() > max {
                    return Err(Error::TooLarge {
                        id,
                        what: "stream chunk",
                        len: payload.len(),
                        max,
                    });
                }
                if counts.total >= limit {
                    return Err(Error::StreamLimit { id, run, limit });
                }
                counts.chunk(seq);
                Record::Chunk {
                    run,
                    seq,
                    payload: payload.as_slice(),
                }
            }
        };
        // Chunks wake no code: appended quietly. A failed storage answers
        // through its own path; this sender hears the engine closed.
        match self.append_quiet(&rec) {
            Some(_) => Ok(()),
            None => Err(Error::Closed),
        }
    }
}
