//! Deliberate bugs for the simulator to catch (feature `testing` only).
//!
//! Each variant breaks one rule the engine's correctness rests on, at one
//! place in the shard loop. The simulator (`crate::testing::sim`) runs
//! seeds with one of them switched on and must report a failure: a
//! sabotage no checker catches is a checker missing. Without the feature
//! the loop's [`ShardLoop::sabotaged`] is a constant `false` and every
//! hook compiles away.

use super::ShardLoop;

/// A deliberate bug (see the module docs). Without the `testing` feature
/// it exists only for the hooks' signatures and no loop ever has one.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub, dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sabotage {
    /// A start's reply leaves before its `Start` record is durable (the
    /// output-commit rule broken for replies).
    EarlyReply,
    /// A step attempt starts before the records its run wrote are durable
    /// (its gate LSN ignored).
    EarlyStep,
    /// A client's signal is acknowledged and never recorded.
    DropSignal,
    /// A sleep's `Timer` record carries the sequence number of the
    /// operation before it.
    ReuseSeq,
    /// A checkpoint drops the log it covers before the checkpoint itself
    /// is committed (as if its sync were skipped).
    UnsyncedCheckpoint,
    /// Replaying a journal hands the code two consecutive recorded
    /// deliveries in the opposite order.
    ReorderReplay,
    /// Code started again by replay records its search attributes again
    /// (the journal's `Attributes` records not counted as done).
    AttributesAgain,
    /// A stream chunk sent again (by a step run again) is recorded again
    /// instead of dropped as one the stream holds.
    ChunkAgain,
    /// A run's journal goes to a reader (a stream's subscriber) at once,
    /// records not durable yet included (the output-commit rule broken
    /// for reads).
    JournalEarly,
    /// A checkpoint names the search-attribute snapshot without a delta of
    /// the changes since its last frame.
    DeltaDropped,
    /// A finished run's frame is written without its streams' chunks
    /// whatever the time (`Config::stream_retention` ignored where the
    /// frames are written; readers still answer by the rule).
    ChunksEarly,
}

#[cfg_attr(not(feature = "testing"), allow(unreachable_pub, dead_code))]
impl Sabotage {
    /// Every sabotage, for a test that checks each is caught.
    pub const ALL: [Sabotage; 11] = [
        Sabotage::EarlyReply,
        Sabotage::EarlyStep,
        Sabotage::DropSignal,
        Sabotage::ReuseSeq,
        Sabotage::UnsyncedCheckpoint,
        Sabotage::ReorderReplay,
        Sabotage::AttributesAgain,
        Sabotage::ChunkAgain,
        Sabotage::JournalEarly,
        Sabotage::DeltaDropped,
        Sabotage::ChunksEarly,
    ];
}

impl ShardLoop {
    /// Whether `s` is switched on for this loop.
    #[cfg(feature = "testing")]
    pub(super) fn sabotaged(&self, s: Sabotage) -> bool {
        self.config.sabotage == Some(s)
    }

    /// Whether `s` is switched on for this loop: never, without the
    /// `testing` feature.
    #[cfg(not(feature = "testing"))]
    #[inline(always)]
    pub(super) fn sabotaged(&self, _s: Sabotage) -> bool {
        false
    }
}
