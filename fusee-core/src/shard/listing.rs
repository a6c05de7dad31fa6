//! Walking a shard's runs, and the stable keys derived from run identity.

use super::ShardCore;
use crate::record::{RunId, Seq};
use crate::wire::{checksum64, hash_id};

/// A shard's runs from the highest run number down: newest start first,
/// since a shard numbers runs in the order they start.
///
/// Batches let the caller release the shard between them. The cursor probes
/// each number below the last one it issued, so the newest `k` runs cost
/// about `k` lookups. Once probing has cost two passes over the table (old
/// numbers mostly expired), it sorts the remaining runs instead. Runs started
/// after the cursor was made are not visited; a run removed meanwhile may
/// still be returned once.
#[derive(Debug)]
pub struct NewestFirst {
    /// Every number at or above this was visited.
    below: RunId,
    probes: usize,
    /// The runs under `below`, ascending, once probing stopped paying.
    rest: Option<Vec<RunId>>,
}

impl NewestFirst {
    pub(super) fn below(below: RunId) -> Self {
        Self {
            below,
            probes: 0,
            rest: None,
        }
    }

    /// The next at most `n` runs, newest first; empty once every run was
    /// visited.
    pub fn next_batch(&mut self, core: &ShardCore, n: usize) -> Vec<RunId> {
        let mut out = Vec::with_capacity(n.min(4096));
        let probe_budget = core.runs.len().saturating_mul(2).saturating_add(1024);
        while out.len() < n {
            if let Some(rest) = &mut self.rest {
                let Some(run) = rest.pop() else { break };
                out.push(run);
                continue;
            }
            // Run numbers start at 1.
            if self.below <= 1 {
                break;
            }
            if self.probes >= probe_budget {
                let below = self.below;
                let mut rest: Vec<RunId> = core
                    .runs
                    .iter()
                    .map(|(_, e)| e.run())
                    .filter(|&r| r < below)
                    .collect();
                rest.sort_unstable();
                self.rest = Some(rest);
                continue;
            }
            self.below -= 1;
            self.probes += 1;
            if core.runs.has_run(self.below) {
                out.push(self.below);
            }
        }
        out
    }
}

/// The shard workflow ID `id` belongs to, of `shards` (0 counts as 1).
/// Stable across versions and platforms: it rests on [`hash_id`].
pub fn shard_of(id: &str, shards: u32) -> u32 {
    shard_of_hash(hash_id(id), shards)
}

/// The shard of a workflow ID whose [`hash_id`] is `id_hash` (what a run
/// table entry keeps), of `shards` (0 counts as 1): [`shard_of`] without
/// the ID.
pub fn shard_of_hash(id_hash: u64, shards: u32) -> u32 {
    let shards = u64::from(shards.max(1));
    // The remainder is below `shards`, which fits u32.
    (id_hash % shards) as u32
}

/// The dedup key of a signal sent by workflow code (shard, run, operation):
/// the same on every resend after a crash, and never 0, which means "no
/// key".
pub fn send_dedup(shard: u32, run: RunId, seq: Seq) -> u64 {
    let mut key = [0u8; 16];
    key[..4].copy_from_slice(&shard.to_le_bytes());
    key[4..12].copy_from_slice(&run.to_le_bytes());
    key[12..].copy_from_slice(&seq.to_le_bytes());
    checksum64(&[&key]) | 1
}
