//! Finished runs expiring, runs forgotten, and memory given back.

use std::cmp::Reverse;

use rustc_hash::FxHashMap;

use super::{BlobRef, Expired, ShardCore};
use crate::record::RunId;
use crate::table::flag;

impl ShardCore {
    /// When the earliest finished run becomes eligible for removal.
    pub fn next_expiry(&self) -> Option<u64> {
        self.retention
            .peek()
            .map(|Reverse((at, _))| at.saturating_add(self.retention_ms))
    }

    /// Removes the runs whose retention ended by `now_ms` (each listed in
    /// `out`), and returns the store bytes their frames occupied, for the
    /// host to release.
    pub fn expire(&mut self, now_ms: u64, out: &mut Vec<RunId>) -> u64 {
        let mut expired = Vec::new();
        let released = self.expire_frames(now_ms, &mut expired);
        out.extend(expired.into_iter().map(|x| x.run));
        released
    }

    /// [`expire`](Self::expire), listing with each run removed the newest
    /// frame that held it, for the host to release ([`Expired`]).
    pub fn expire_frames(&mut self, now_ms: u64, out: &mut Vec<Expired>) -> u64 {
        let mut released = 0u64;
        while let Some(&Reverse((finished, run))) = self.retention.peek() {
            if finished.saturating_add(self.retention_ms) > now_ms {
                break;
            }
            self.retention.pop();
            let Some(slot) = self.runs.find_run(run) else {
                continue;
            };
            let e = *self.runs.get(slot);
            let (frame, linked);
            if e.is_parked() {
                if e.done().is_none() {
                    continue;
                }
                released += u64::from(e.len());
                frame = Some(BlobRef {
                    offset: e.offset(),
                    len: e.len(),
                });
                linked = e.has(flag::CHAINED) || e.has(flag::APART);
            } else {
                let Some(l) = self.loaded.get(&run).filter(|l| l.done.is_some()) else {
                    continue;
                };
                released += l.blob.map_or(0, |_| l.blob_chain);
                frame = l.blob;
                linked = l.blob.is_some();
                self.forget_loaded(run);
            }
            self.table_remove(slot);
            out.push(Expired { run, frame, linked });
        }
        released
    }

    /// Forgets a run entirely (terminated before it was ever parked, or a
    /// run the host gave up on). Rarely needed.
    pub fn remove(&mut self, run: RunId) {
        self.forget_loaded(run);
        if let Some(slot) = self.runs.find_run(run) {
            self.table_remove(slot);
        }
    }

    /// Gives back capacity left behind when many runs parked or finished
    /// (hash maps and queues never shrink on their own), and compacts the
    /// table unless slots are held.
    pub fn shrink(&mut self) {
        fn fit<K: std::hash::Hash + Eq, V>(m: &mut FxHashMap<K, V>) {
            if m.capacity() > 1024 && m.capacity() > 4 * m.len() {
                m.shrink_to(m.len() * 2);
            }
        }
        fit(&mut self.loaded);
        if !self.slots_held && self.runs.compact() {
            // Slots moved: the next sweep walks every bucket.
            self.sweep_full = true;
        }
        if self.outputs.capacity() > 1024 && self.outputs.capacity() > 4 * self.outputs.len() {
            self.outputs.shrink_to(self.outputs.len() * 2);
        }
        if self.retention.capacity() > 1024 && self.retention.capacity() > 4 * self.retention.len()
        {
            self.retention.shrink_to(self.retention.len() * 2);
        }
    }
}
