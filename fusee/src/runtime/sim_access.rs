//! What the simulator (`crate::testing::sim`) reads of a shard loop to
//! judge it, beyond the inputs and effects every driver uses. Feature
//! `testing` only; nothing here changes the loop.

use fusee_core::record::{RecordBuf, RunId, Status, decode_canonical_all};

use super::ShardLoop;

/// Where a workflow ID's latest run stands, as the shard knows it.
#[derive(Debug)]
pub(crate) struct RunView {
    /// The run's number.
    pub(crate) run: RunId,
    /// How it ended, once its `Done` is durable.
    pub(crate) done: Option<Status>,
    /// Its journal, when the shard still has it (a finished run parked
    /// past its history time keeps only its `Start` and `Done`).
    pub(crate) journal: Vec<RecordBuf>,
}

impl ShardLoop {
    /// Why the shard stopped taking work, if its storage failed.
    pub(crate) fn failure(&self) -> Option<&str> {
        self.life.why()
    }

    /// Runs whose code stopped (a determinism error), with why.
    pub(crate) fn stopped_runs(&self) -> Vec<(RunId, String)> {
        let mut out: Vec<(RunId, String)> = self
            .live
            .iter()
            .filter_map(|(run, l)| l.stopped.as_ref().map(|why| (*run, why.to_string())))
            .collect();
        out.sort();
        out
    }

    /// Run `run`'s values in the search-attribute index (name to index
    /// key), once the index is built (`None` before).
    pub(crate) fn indexed_attributes(
        &self,
        run: RunId,
    ) -> Option<std::collections::BTreeMap<String, crate::attrs::AttrKey>> {
        self.attr_index
            .built()
            .then(|| self.attr_index.values_of(run))
    }

    /// The latest run of `id`, if the shard has one; `Err` if reading it
    /// back failed.
    pub(crate) fn view(&mut self, id: &str) -> Result<Option<RunView>, String> {
        let Some((run, parked)) = self.lookup(id).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let (journal, done) = if parked {
            let Some(p) = self.core.parked(run) else {
                return Ok(None);
            };
            let frame = self.read_frame(p.blob()).map_err(|e| e.to_string())?;
            (frame.journal, p.done())
        } else {
            let journal = self.run_journal(run).map_err(|e| e.to_string())?;
            let done = self
                .core
                .get(run)
                .filter(|l| l.last_lsn <= self.flights.durable())
                .and_then(|l| l.done.map(|(s, _)| s));
            (journal, done)
        };
        let journal = decode_canonical_all(&journal).map_err(|e| e.to_string())?;
        Ok(Some(RunView { run, done, journal }))
    }
}
