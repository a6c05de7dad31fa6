//! Opening a shard: its parts, its last checkpoint and index, and the log
//! after the checkpoint replayed through the core, in that order (the
//! recovery order of the storage contract). Every unfinished run's code
//! starts again later, replaying its journal: when something reaches the
//! run, or when the loop has nothing else to do (`live`).

use std::collections::VecDeque;

use fusee_core::record::Lsn;
use fusee_core::shard::ShardCore;
use fusee_core::store::Checkpoint;
use fusee_storage::{LogStore, Storage, StorageError};

use super::checkpoint::Checkpoints;
use super::flights::Flights;
use super::messages::{Message, Outbox};
use super::parking::Parking;
use super::parking::chain_error;
use super::receive::Mail;
use super::seal::Seals;
use super::search::Snapshot;
use super::{LoopConfig, ShardLoop};
use crate::AnyStorage;
use crate::ctx::Registry;
use crate::metrics::ShardMetrics;
use crate::recovery::{self, Damage};

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
        // The index first: a run parked in it and loaded at the checkpoint
        // becomes loaded when the checkpoint's records are applied.
        let checkpoint = match parts.recovered.checkpoint.as_deref() {
            Some(bytes) => {
                let cp = Checkpoint::decode(bytes).map_err(|_| corrupt("checkpoint (decode)"))?;
                if cp.shard != shard {
                    return Err(corrupt("checkpoint of another shard"));
                }
                Some(cp)
            }
            None => None,
        };
        // The table and its indexes sized once for the runs the checkpoint
        // counted: grown as records arrive, every insert lands at high load
        // (a million parked runs took 5 s to open instead of about 1).
        let counted = checkpoint.as_ref().map_or(0, |cp| cp.index_runs);
        core.reserve_runs(usize::try_from(counted).unwrap_or(0).min(RESERVE_RUNS_MAX));
        recovery::load_index(&mut core, &mut parts.checkpoint).map_err(damage)?;
        let mut after: Lsn = 0;
        let mut outbox = Outbox::default();
        let checkpointed = checkpoint.is_some();
        let snapshot = checkpoint.as_ref().map(Snapshot::named).unwrap_or_default();
        if let Some(cp) = checkpoint {
            recovery::load_checkpoint(&mut core, &mut parts.runs, &cp).map_err(damage)?;
            after = cp.lsn;
            outbox = Outbox::decode(&cp.outbox).map_err(|_| corrupt("checkpoint outbox"))?;
        }
        // The log after the checkpoint, through the same transition.
        let replayed = recovery::replay_log(
            &mut core,
            &mut parts.log,
            &mut parts.runs,
            after,
            now_ms,
            &mut |_| {},
        )
        .map_err(damage)?;
        let durable = parts.log.last_lsn();
        // Outputs of records already durable: replies and results have no
        // caller any more; messages go out again (targets deduplicate).
        let mut released = Vec::new();
        core.release(durable, &mut released);
        for message in released.into_iter().filter_map(|o| Message::of(o, &core)) {
            outbox.add(message);
        }
        while core.take_event().is_some() {}
        tracing::info!(shard, replayed, checkpoint_lsn = after, "shard recovered");
        // Which parked finished runs still hold their whole journal or
        // their streams' chunks is in their frames: each is looked at
        // once, unless runs expire before either would be let go.
        let histories = if config.history_ms.min(config.stream_ms) < config.retention_ms {
            core.parked_runs()
                .filter(|(_, p)| p.done().is_some())
                .map(|(run, _)| std::cmp::Reverse((0, run)))
                .collect()
        } else {
            Default::default()
        };
        let mail = Mail::new(shard, config.shards, outbox);
        let hub = crate::step::StepHub::new(config.max_payload);
        let mut this = Self {
            shard,
            config,
            core,
            log: parts.log,
            store: parts.runs,
            checkpoint: parts.checkpoint,
            registry,
            live: Default::default(),
            inbox: VecDeque::new(),
            waiters: Default::default(),
            flights: Flights::new(durable),
            seals: Seals::new(durable, now_ms),
            life: Default::default(),
            checkpoints: Checkpoints::new(now_ms, checkpointed),
            parking: Parking::new(now_ms, histories),
            store_bytes: Default::default(),
            streams: Default::default(),
            mail,
            metrics: ShardMetrics {
                recovered_records: replayed,
                ..ShardMetrics::default()
            },
            watch: Default::default(),
            hub,
            graces: Default::default(),
            telemetry: None,
            attr_index: crate::attrs::AttrIndex::default(),
            attr_snapshot: Snapshot::default(),
            encode: Vec::new(),
            spare_appends: Vec::new(),
        };
        let unfinished: Vec<(u64, bool)> = this
            .core
            .loaded_runs()
            .filter(|(_, l)| !l.is_done())
            .map(|(run, l)| (run, l.waits_on_shard()))
            .collect();
        this.live
            .start_waiting_by(now_ms.saturating_add(super::DEFERRED_WAITING_GRACE_MS));
        for (run, waits) in unfinished {
            // Offers made during replay emitted no events: make them again.
            this.core.reoffer(run);
            this.arm_recovered_grace(run);
            // Its code starts when something reaches it, or when the loop
            // has nothing else to do (`live`'s docs): not in the open. A
            // run cut mid-way (waiting on nothing) goes first.
            this.live.defer(run, !waits);
        }
        // Every message not acknowledged before the crash goes out again.
        this.mail.route_pending();
        this.open_attr_index(snapshot, after);
        Ok(this)
    }
}

/// Most runs a shard's table is sized for before its index is read: the
/// count comes from disk (checksummed, yet not trusted with an allocation
/// of any size); a bigger index grows the table as it loads.
const RESERVE_RUNS_MAX: usize = 4 << 20;

/// Recovery's failure as the engine reports it: the store's own error, or
/// what is damaged.
fn damage(d: Damage) -> StorageError {
    let corrupt = |what: &'static str| StorageError::Corrupt { what, at: 0 };
    match d {
        Damage::Store(e) => e,
        Damage::Index(_) => corrupt("index records"),
        Damage::Frame { error, .. } => chain_error(error),
        Damage::FrameJournal { .. } => corrupt("run frame journal"),
        Damage::CheckpointJournal(_) => corrupt("checkpoint journal"),
        Damage::LogRecord { .. } => corrupt("log record (decode)"),
    }
}
