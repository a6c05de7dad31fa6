//! Opening a shard: its parts, its last checkpoint and index, and the log
//! after the checkpoint replayed through the core, in that order (the
//! recovery order of the storage contract). Then every unfinished run's
//! code starts again, replaying its journal.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use fusee_core::record::{Lsn, decode_canonical_all, iter_canonical};
use fusee_core::shard::{Mode, ShardCore};
use fusee_core::store::Checkpoint;
use fusee_storage::{CheckpointStore, LogStore, Storage, StorageError};
use rustc_hash::{FxHashMap, FxHashSet};

use super::{LoopConfig, ShardLoop};
use crate::AnyStorage;
use crate::metrics::ShardMetrics;
use crate::registry::Registry;

impl ShardLoop {
    /// Opens shard `shard` of `storage` and recovers it at time `now_ms`.
    pub(crate) fn open(
        storage: &AnyStorage,
        shard: u32,
        config: LoopConfig,
        registry: Registry,
        now_ms: u64,
    ) -> Result<Self, StorageError> {
        let mut parts = storage.open_shard(shard)?;
        let mut core = ShardCore::new(shard, config.shards, config.retention_ms, now_ms);
        let corrupt = |what: &'static str| StorageError::Corrupt { what, at: 0 };
        let mut after: Lsn = 0;
        if let Some(bytes) = &parts.recovered.checkpoint {
            let cp = Checkpoint::decode(bytes).map_err(|_| corrupt("checkpoint (decode)"))?;
            if cp.shard != shard {
                return Err(corrupt("checkpoint of another shard"));
            }
            core.set_next_run_id(cp.next_run);
            for run in &cp.runs {
                let records = decode_canonical_all(&run.journal)
                    .map_err(|_| corrupt("checkpoint journal"))?;
                for rec in &records {
                    core.apply(run.last_lsn, rec, Mode::SUFFIX);
                }
            }
            after = cp.lsn;
        }
        let mut index_err = None;
        parts.checkpoint.read_index(&mut |chunk| {
            if let Err(e) = core.load_index(chunk) {
                index_err = Some(e);
            }
            Ok(())
        })?;
        if index_err.is_some() {
            return Err(corrupt("index records"));
        }
        core.index_loaded();
        // The log after the checkpoint, through the same transition.
        let mut replayed = 0u64;
        let mut bad = false;
        if parts.log.last_lsn() > after {
            parts.log.read(after, &mut |lsn, bytes| {
                match iter_canonical(bytes).next() {
                    Some(Ok((rec, _))) => {
                        core.apply(lsn, &rec, Mode::RECOVER);
                        replayed += 1;
                    }
                    _ => bad = true,
                }
                Ok(())
            })?;
        }
        if bad {
            return Err(corrupt("log record (decode)"));
        }
        let durable = parts.log.last_lsn();
        // Outputs of records already durable: their callers are gone.
        let mut dropped = Vec::new();
        core.release(durable, &mut dropped);
        while core.take_event().is_some() {}
        tracing::info!(shard, replayed, checkpoint_lsn = after, "shard recovered");
        let mut this = Self {
            shard,
            config,
            core,
            log: parts.log,
            store: parts.runs,
            checkpoint: parts.checkpoint,
            registry,
            live: FxHashMap::default(),
            no_code: FxHashSet::default(),
            stepping: FxHashSet::default(),
            ready: Arc::new(Mutex::new(VecDeque::new())),
            inbox: VecDeque::new(),
            next_token: 0,
            waiting: FxHashMap::default(),
            results: FxHashMap::default(),
            jobs: Vec::new(),
            flushing: false,
            durable,
            closing: None,
            closed: false,
            failed: None,
            since_checkpoint: 0,
            checkpoint_ms: now_ms,
            metrics: ShardMetrics {
                recovered_records: replayed,
                ..ShardMetrics::default()
            },
            encode: Vec::new(),
            flush_records: 0,
        };
        let unfinished: Vec<u64> = this
            .core
            .loaded_runs()
            .filter(|(_, l)| !l.is_done())
            .map(|(run, _)| run)
            .collect();
        for run in unfinished {
            // Offers made during replay emitted no events: make them again.
            this.core.reoffer(run);
            this.start_code(run);
        }
        Ok(this)
    }
}
