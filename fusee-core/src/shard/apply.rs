//! [`ShardCore::apply`]: the only state transition, one record at a time.

use std::cmp::Reverse;
use std::sync::Arc;

use super::run::{Kid, LoadedRun, SignalSlot, WaitSlot, push_small, reserve_journal, snug_journal};
use super::{CANCEL_SIGNAL, Event, Mode, Output, ShardCore, TimerKind, UpdateSlot, send_dedup};
use crate::record::{
    Lsn, Name, PAUSED, ParentRef, Payload, Record, RecordBuf, RunId, StartMeta, Status, ToName,
    ToPayload, WaitOutcome, Walked, canonical_len, decode_canonical_all, encode_canonical,
    iter_canonical_passing, kind, policy,
};
use crate::store::ApartRun;
use crate::wire::{DecodeError, hash_id};

/// The reason an [`Output::Close`] under the parent close policy carries.
const PARENT_CLOSED: &[u8] = b"parent closed";

/// Counts a record after its run's `Start` off a reset's copies: whether
/// it is one (its messages were sent by the run it was copied from).
fn count_copy(run: &mut LoadedRun) -> bool {
    run.rare.as_mut().is_some_and(|r| {
        let left = r.copies_left > 0;
        r.copies_left = r.copies_left.saturating_sub(1);
        left
    })
}

fn empty_payload() -> Payload {
    Payload::from(&[][..])
}

impl ShardCore {
    /// Applies one record at `lsn`.
    ///
    /// A record for a run the shard does not hold loaded is ignored (the
    /// host loads a parked run before appending to it). Applying the same
    /// records in any [`Mode`] leaves the same run state.
    pub fn apply<S: ToName, B: ToPayload>(&mut self, lsn: Lsn, rec: &Record<S, B>, mode: Mode) {
        self.apply_with(lsn, rec, mode, None);
    }

    /// [`apply`](Self::apply) for a record whose canonical encoding (with its
    /// length prefix, as [`encode_canonical`] writes it) the host already
    /// has: the journal copies those bytes instead of encoding again.
    pub fn apply_encoded<S: ToName, B: ToPayload>(
        &mut self,
        lsn: Lsn,
        rec: &Record<S, B>,
        mode: Mode,
        canonical: &[u8],
    ) {
        self.apply_with(lsn, rec, mode, Some(canonical));
    }

    /// What [`apply_encoded`](Self::apply_encoded) does with `count`
    /// consecutive `Chunk` records of run `run_id` whose canonical bytes
    /// (`canonical`, concatenated) the host framed without decoding them
    /// ([`crate::record::iter_canonical_passing`]): applying a chunk reads
    /// none of its fields (it is journaled, counted off a reset's copies,
    /// and marks its run as streaming), so a long stream is applied with
    /// no decode and one lookup.
    pub fn apply_passed_chunks(
        &mut self,
        lsn: Lsn,
        run_id: RunId,
        mode: Mode,
        canonical: &[u8],
        count: u32,
    ) {
        let Some(run) = self.loaded.get_mut(&run_id) else {
            return;
        };
        run.last_lsn = run.last_lsn.max(lsn);
        if mode.journal {
            reserve_journal(&mut run.journal, canonical.len(), mode == Mode::LIVE);
            run.journal.extend_from_slice(canonical);
            self.journal_bytes += canonical.len();
            run.journal_records = run.journal_records.saturating_add(count);
        }
        if let Some(r) = run.rare.as_mut() {
            r.copies_left = r.copies_left.saturating_sub(count);
        }
        run.streams = true;
    }

    /// Applies run `run_id`'s canonical records in `journal` (a frame's or
    /// a checkpoint's, whose integrity its crc checked) at `lsn`: each
    /// record as [`apply_encoded`](Self::apply_encoded) does, its stream
    /// chunks framed, not decoded
    /// ([`apply_passed_chunks`](Self::apply_passed_chunks)). The first
    /// record that does not decode is `Err`; those before it are applied.
    pub fn apply_journal(
        &mut self,
        lsn: Lsn,
        run_id: RunId,
        mode: Mode,
        journal: &[u8],
    ) -> Result<(), DecodeError> {
        self.apply_journal_apart(lsn, run_id, mode, journal, &[])
    }

    /// [`apply_journal`](Self::apply_journal) of a frame's journal whose
    /// chunks went apart (`crate::store::apart`): each run of them is
    /// applied where it stood, as chunks whose bytes are not here (counted,
    /// not journaled: a stored prefix's bytes are the store's). `runs`
    /// must stand on record boundaries of `journal` (a run that does not
    /// is `Err`).
    pub fn apply_journal_apart(
        &mut self,
        lsn: Lsn,
        run_id: RunId,
        mode: Mode,
        journal: &[u8],
        runs: &[ApartRun],
    ) -> Result<(), DecodeError> {
        let mut apart = runs.iter().peekable();
        let mut walk = iter_canonical_passing(journal, kind::CHUNK);
        loop {
            let at = walk.offset() as u64;
            while let Some(r) = apart.next_if(|r| r.at <= at) {
                if r.at != at {
                    return Err(DecodeError::new("chunks-apart run inside a record"));
                }
                self.apply_passed_chunks(lsn, run_id, mode, &[], r.count);
            }
            let Some(item) = walk.next() else {
                break;
            };
            match item? {
                Walked::Record(rec, whole) => self.apply_encoded(lsn, &rec, mode, whole),
                Walked::Passed { bytes, count } => {
                    self.apply_passed_chunks(lsn, run_id, mode, bytes, count);
                }
            }
        }
        match apart.next() {
            Some(_) => Err(DecodeError::new("chunks-apart run past the journal's end")),
            None => Ok(()),
        }
    }

    fn apply_with<S: ToName, B: ToPayload>(
        &mut self,
        lsn: Lsn,
        rec: &Record<S, B>,
        mode: Mode,
        canonical: Option<&[u8]>,
    ) {
        let run_id = rec.run();
        if let Record::Start { .. } = rec {
            if self.loaded.contains_key(&run_id) {
                // Built already: a handover `Done` created it, and recovery
                // meets its `Start` again in the run's own journal.
                return;
            }
            self.start_run(lsn, rec, mode);
        }
        let Some(run) = self.loaded.get_mut(&run_id) else {
            return;
        };
        run.last_lsn = run.last_lsn.max(lsn);
        if mode.journal {
            let before = run.journal.len();
            match canonical {
                Some(bytes) => {
                    reserve_journal(&mut run.journal, bytes.len(), mode == Mode::LIVE);
                    run.journal.extend_from_slice(bytes);
                }
                None => {
                    reserve_journal(&mut run.journal, canonical_len(rec), mode == Mode::LIVE);
                    encode_canonical(rec, &mut run.journal);
                }
            }
            self.journal_bytes += run.journal.len() - before;
            run.journal_records += 1;
            if matches!(
                rec,
                Record::Timer { .. } | Record::Wait { .. } | Record::Child { .. }
            ) {
                snug_journal(&mut run.journal);
            }
        }
        // Records copied from a reset run's journal sent their messages once
        // already, in the run they were copied from.
        let copied = !matches!(rec, Record::Start { .. }) && count_copy(run);
        let outputs = mode.outputs && !copied;
        match rec {
            Record::Start { .. }
            | Record::Value { .. }
            | Record::Cancel { grace: None, .. }
            | Record::Heartbeat { .. }
            | Record::Began { .. }
            | Record::Patch { .. } => {}
            Record::Step { seq, .. } | Record::Resume { seq, .. } => {
                Self::disarm(run, *seq, TimerKind::Retry);
            }
            Record::Attempt {
                seq, retry_at_ms, ..
            } => {
                // A paused step waits for a `Resume`, not a time.
                Self::disarm(run, *seq, TimerKind::Retry);
                if *retry_at_ms != PAUSED {
                    self.arm(run_id, *seq, TimerKind::Retry, *retry_at_ms);
                }
            }
            Record::Timer {
                seq, fire_at_ms, ..
            } => self.arm(run_id, *seq, TimerKind::Sleep, *fire_at_ms),
            Record::Fired { seq, .. } => Self::disarm(run, *seq, TimerKind::Sleep),
            Record::Signal {
                name,
                dedup,
                payload,
                ..
            } => {
                let ordinal = run.signal_count;
                run.signal_count += 1;
                if *dedup != 0 {
                    run.rare_mut().dedup.insert(*dedup);
                }
                run.signal_buffer().push_back(SignalSlot {
                    ordinal,
                    name: name.to_name(),
                    payload: payload.to_payload(),
                    offered: None,
                });
                self.offer(run_id, mode.events);
            }
            Record::Wait {
                seq,
                name,
                deadline_ms,
                ..
            } => {
                push_small(
                    &mut run.waits,
                    WaitSlot {
                        seq: *seq,
                        name: name.to_name(),
                        offered: None,
                    },
                );
                if *deadline_ms > 0 {
                    self.arm(run_id, *seq, TimerKind::WaitTimeout, *deadline_ms);
                }
                self.offer(run_id, mode.events);
            }
            Record::Waited { seq, outcome, .. } => {
                Self::end_wait(run, *seq, *outcome);
                self.offer(run_id, mode.events);
            }
            Record::Child {
                seq,
                wtype,
                id,
                flags,
                deadline_ms,
                input,
                ..
            } => {
                let rare = run.rare_mut();
                if flags & policy::DETACHED == 0 {
                    rare.children.push(*seq);
                }
                if !rare.kids.iter().any(|k| k.seq == *seq) {
                    rare.kids.push(Kid {
                        seq: *seq,
                        id: id.to_name(),
                        wtype: wtype.to_name(),
                        flags: *flags,
                    });
                }
                // A copied `Child` still asks for its child: starting is
                // idempotent at the receiver, and the new run waits for it.
                if mode.outputs {
                    let parent = ParentRef {
                        shard: self.shard,
                        run: run_id,
                        seq: *seq,
                    };
                    self.outputs.push_back((
                        lsn,
                        Output::ChildStart {
                            parent,
                            wtype: wtype.to_name(),
                            id: id.to_name(),
                            flags: *flags,
                            deadline_ms: *deadline_ms,
                            input: input.to_payload(),
                        },
                    ));
                }
            }
            Record::ChildDone { seq, .. } => {
                if let Some(rare) = run.rare.as_mut() {
                    rare.children.retain(|s| s != seq);
                    rare.kids.retain(|k| k.seq != *seq);
                }
            }
            Record::Send {
                seq,
                target,
                name,
                payload,
                ..
            } => {
                if outputs {
                    let out = if name.as_ref() == CANCEL_SIGNAL {
                        Output::Close {
                            target: target.to_name(),
                            wtype: Name::from(""),
                            parent: None,
                            terminate: false,
                            reason: payload.to_payload(),
                            dedup: send_dedup(self.shard, run_id, *seq),
                        }
                    } else {
                        Output::Signal {
                            target: target.to_name(),
                            name: name.to_name(),
                            payload: payload.to_payload(),
                            dedup: send_dedup(self.shard, run_id, *seq),
                        }
                    };
                    self.outputs.push_back((lsn, out));
                }
            }
            Record::Update {
                id, name, caller, ..
            } => {
                let rare = run.rare_mut();
                let ordinal = rare.updates.len() as u64;
                let id = id.to_name();
                rare.update_ids.insert(id.clone(), ordinal);
                rare.updates.push(UpdateSlot {
                    id,
                    name: name.to_name(),
                    caller: *caller,
                    result: None,
                });
            }
            Record::UpdateDone {
                ordinal,
                status,
                payload,
                ..
            } => {
                let Some(slot) = usize::try_from(*ordinal)
                    .ok()
                    .and_then(|i| run.rare.as_mut()?.updates.get_mut(i))
                else {
                    return;
                };
                let payload = payload.to_payload();
                slot.result = Some((*status, payload.clone(), lsn));
                if mode.outputs {
                    let (id, caller) = (slot.id.clone(), slot.caller);
                    // A workflow that called gets the result as a child
                    // result, sent again from this record after a crash.
                    if let (Some(parent), false) = (caller, copied) {
                        self.outputs.push_back((
                            lsn,
                            Output::ChildResult {
                                parent,
                                status: *status,
                                payload: payload.clone(),
                            },
                        ));
                    }
                    self.outputs.push_back((
                        lsn,
                        Output::UpdateResult {
                            run: run_id,
                            ordinal: *ordinal,
                            id,
                            status: *status,
                            payload,
                        },
                    ));
                }
            }
            Record::Awaiting { seq, attempt, .. } => {
                run.rare_mut().awaiting.insert(*seq, *attempt);
            }
            Record::Completed { seq, .. } => {
                if let Some(rare) = run.rare.as_mut() {
                    rare.awaiting.remove(seq);
                }
            }
            Record::Cancel {
                reason,
                grace: Some(grace),
                ..
            } => {
                if !copied {
                    run.rare_mut().grace = Some((*grace, reason.to_payload()));
                }
            }
            Record::Attributes { payload, .. } => {
                run.attrs.get_or_insert_default().push(payload.to_payload());
            }
            Record::Chunk { .. } | Record::StreamEnd { .. } => run.streams = true,
            Record::Done {
                status,
                finished_ms,
                payload,
                ..
            } => {
                if run.done.is_some() {
                    return;
                }
                if status.is_handover() {
                    self.hand_over(lsn, run_id, *status, *finished_ms, payload.as_ref(), mode);
                } else {
                    self.finish(
                        lsn,
                        run_id,
                        *status,
                        *finished_ms,
                        payload.to_payload(),
                        mode,
                    );
                }
            }
        }
    }

    /// Creates the loaded run of a `Start` record.
    fn start_run<S: ToName, B: ToPayload>(&mut self, lsn: Lsn, rec: &Record<S, B>, mode: Mode) {
        let Record::Start {
            run,
            id,
            wtype,
            version,
            codec,
            started_ms,
            deadline_ms,
            parent,
            policy,
            from,
            copies,
            update,
            meta,
            ..
        } = rec
        else {
            return;
        };
        let id = id.to_name();
        self.next_run = self.next_run.max(run.saturating_add(1));
        // The latest run of an ID holds it: loading an older run back (to
        // read it, say) must not hide a newer one.
        self.note_loaded(*run, hash_id(&id));
        let mut l = self
            .spare
            .pop()
            .unwrap_or_else(|| Box::new(LoadedRun::empty()));
        if let Some(u) = update {
            let uid = u.id.to_name();
            let rare = l.rare_mut();
            rare.update_ids.insert(uid.clone(), 0);
            rare.updates.push(UpdateSlot {
                id: uid,
                name: u.name.to_name(),
                caller: None,
                result: None,
            });
        }
        l.id = id;
        l.wtype = self.type_name(wtype.as_ref());
        l.version = *version;
        l.codec = *codec;
        l.parent = parent.map(Box::new);
        l.started_ms = *started_ms;
        l.deadline_ms = *deadline_ms;
        l.last_lsn = lsn;
        l.done = None;
        l.blob = None;
        l.blob_chain = 0;
        l.blob_depth = 0;
        l.blob_journal = 0;
        l.set_blob_apart(false);
        l.journal_records = 0;
        l.signal_count = 0;
        l.policy = *policy;
        l.meta = meta.as_ref().map(|m| {
            Box::new(StartMeta {
                attributes: m.attributes.to_payload(),
                memo: m.memo.to_payload(),
            })
        });
        if from.is_some() || *copies > 0 {
            let rare = l.rare_mut();
            rare.from = *from;
            rare.copies_left = *copies;
        }
        l.streams = false;
        l.queued = 0;
        self.loaded.insert(*run, l);
        if *deadline_ms > 0 {
            self.arm(*run, 0, TimerKind::Deadline, *deadline_ms);
        }
        if mode.events {
            self.events.push_back(Event::Started { run: *run });
        }
    }

    /// A wait ended: it leaves the run, and the signal it had been offered is
    /// free again unless the wait consumed it.
    fn end_wait(run: &mut LoadedRun, seq: u32, outcome: WaitOutcome) {
        Self::disarm(run, seq, TimerKind::WaitTimeout);
        let offered = run
            .waits
            .iter()
            .position(|w| w.seq == seq)
            .and_then(|i| run.waits.remove(i).offered);
        let consumed = match outcome {
            WaitOutcome::Signal(ordinal) => {
                // Usually the oldest: found at the front.
                if let Some(q) = run.signals.as_mut()
                    && let Some(i) = q.iter().position(|s| s.ordinal == ordinal)
                {
                    q.remove(i);
                    if q.is_empty() {
                        // Most runs take one signal now and then: a
                        // sleeper does not keep an empty buffer (issue 37).
                        run.signals = None;
                    }
                }
                Some(ordinal)
            }
            WaitOutcome::TimedOut | WaitOutcome::Abandoned => None,
        };
        if let Some(o) = offered
            && Some(o) != consumed
            && let Some(s) = run
                .signals
                .iter_mut()
                .flat_map(|q| q.iter_mut())
                .find(|s| s.ordinal == o)
        {
            s.offered = None;
        }
    }

    /// Offers buffered signals to pending waits, oldest signal first, one
    /// signal per wait and one wait per signal.
    fn offer(&mut self, run_id: RunId, events: bool) {
        let Some(run) = self.loaded.get_mut(&run_id) else {
            return;
        };
        for w in run.waits.iter_mut().filter(|w| w.offered.is_none()) {
            let Some(sig) = run
                .signals
                .iter_mut()
                .flat_map(|q| q.iter_mut())
                .find(|s| s.offered.is_none() && s.name == w.name)
            else {
                continue;
            };
            sig.offered = Some(w.seq);
            w.offered = Some(sig.ordinal);
            if events {
                run.queued += 1;
                self.events.push_back(Event::SignalReady {
                    run: run_id,
                    seq: w.seq,
                    ordinal: sig.ordinal,
                    payload: sig.payload.clone(),
                });
            }
        }
    }

    /// Offers a loaded run's buffered signals to its waits afresh (after
    /// recovery or a load, when the events of earlier offers are gone).
    pub fn reoffer(&mut self, run_id: RunId) {
        if let Some(run) = self.loaded.get_mut(&run_id) {
            run.waits.iter_mut().for_each(|w| w.offered = None);
            run.signals
                .iter_mut()
                .flat_map(|q| q.iter_mut())
                .for_each(|s| s.offered = None);
        }
        self.offer(run_id, true);
    }

    /// A run ended: its pending work is dropped, and (in a mode with
    /// outputs) its result goes to its callers and its children follow the
    /// parent close policy.
    ///
    /// A handover (continue-as-new, reset) ends with an empty result and no
    /// child result: the newer run inherits the parent and callers follow
    /// the ID. A reset keeps the children, whom the new run's copied records
    /// still wait for.
    fn finish(
        &mut self,
        lsn: Lsn,
        run_id: RunId,
        status: Status,
        at_ms: u64,
        payload: Payload,
        mode: Mode,
    ) {
        let Some(run) = self.loaded.get_mut(&run_id) else {
            return;
        };
        // The journal holds the result when the `Done` went into it.
        let held = (!mode.journal).then(|| payload.clone());
        let kids = run.finish(status, at_ms, held);
        let child_result = match run.parent() {
            Some(parent) if !status.is_handover() && run.policy & policy::DETACHED == 0 => {
                Some(parent)
            }
            _ => None,
        };
        self.retention.push(Reverse((at_ms, run_id)));
        if mode.outputs {
            self.outputs.push_back((
                lsn,
                Output::Result {
                    run: run_id,
                    status,
                    payload: payload.clone(),
                },
            ));
            if let Some(parent) = child_result {
                self.outputs.push_back((
                    lsn,
                    Output::ChildResult {
                        parent,
                        status,
                        payload,
                    },
                ));
            }
            if status != Status::Reset {
                self.close_children(lsn, run_id, kids);
            }
        }
        if mode.events {
            self.events.push_back(Event::Finished { run: run_id });
        }
    }

    /// A run handed over to a newer run of its ID (continue-as-new or
    /// reset): one record ends it and, where the next run does not exist
    /// yet, starts the next run from the `Start` in its payload.
    fn hand_over(
        &mut self,
        lsn: Lsn,
        run_id: RunId,
        status: Status,
        at_ms: u64,
        payload: &[u8],
        mode: Mode,
    ) {
        let next = next_start(payload);
        self.finish(lsn, run_id, status, at_ms, empty_payload(), mode);
        // Only a live append or the log tail creates the next run: a run
        // rebuilt from its frame or a checkpoint (or loaded back to take a
        // late message) finds the next run in the table already, perhaps
        // finished since.
        if let Some(next) = next
            && mode.outputs
            && !self.runs.has_run(next.run())
        {
            self.apply(lsn, &next, mode);
        }
    }

    /// Children follow their parent close policy when the parent closes:
    /// terminated (the default), asked to cancel, or left running.
    fn close_children(&mut self, lsn: Lsn, run: RunId, kids: Vec<Kid>) {
        for kid in kids {
            let terminate = match kid.flags & policy::CLOSE_MASK {
                policy::CLOSE_ABANDON => continue,
                policy::CLOSE_CANCEL => false,
                _ => true,
            };
            let parent = ParentRef {
                shard: self.shard,
                run,
                seq: kid.seq,
            };
            self.outputs.push_back((
                lsn,
                Output::Close {
                    target: kid.id,
                    wtype: kid.wtype,
                    parent: Some(parent),
                    terminate,
                    reason: Arc::from(PARENT_CLOSED),
                    dedup: send_dedup(self.shard, run, kid.seq),
                },
            ));
        }
    }
}

/// The next run's `Start` in a handover `Done` payload: exactly one
/// canonical `Start` record, else nothing (the payload is not trusted).
fn next_start(payload: &[u8]) -> Option<RecordBuf> {
    let mut records = decode_canonical_all(payload).ok()?;
    if records.len() != 1 {
        return None;
    }
    let rec = records.pop()?;
    matches!(rec, Record::Start { .. }).then_some(rec)
}
