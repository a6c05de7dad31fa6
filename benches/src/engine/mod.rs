//! The engine comparison: the same workflows on every Fusee backend
//! compiled in, the floor and a peer engine run in-process (duroxide on its
//! SQLite provider), in one run, subjects taking turns so the disk's and
//! the machine's noise falls on all alike.
//!
//! | workload | what is timed | subjects |
//! |---|---|---|
//! | **chain** | one workflow of [`EnginePlan::chain_steps`] sequential no-op steps: the time from one step's start to the next's (p50, p99) | every engine; the floor makes as many `pwrite` + `fdatasync` of a step record's size per round, half in a block just before each engine's turn, half just after |
//! | **fanout** | [`EnginePlan::fanout_runs`] concurrent workflows of [`FANOUT_STEPS`] no-op steps, from the first start to the last result: steps per second, records per flush, CPU time per step | every engine |
//! | **timers** | [`EnginePlan::timers`] workflows ([`EnginePlan::peer_timers`] on the peer) that sleep [`TIMER_SLEEP`] then finish, from the first start to the last result (the ideal: the sleep) | every engine |
//! | **parked** | [`EnginePlan::parked`] sleepers parked, the store closed and opened in a fresh process: open time and resident memory after open | durable Fusee backends |
//! | **recovery** | a child process runs the fanout and is killed with SIGKILL once half its runs finished; the time to open the store again and finish every run | durable Fusee backends, the peer |
//! | **reminders** | a child starts [`EnginePlan::reminders`] durable sleepers due in 1 to 5 s (a tenth snoozed, a tenth cancelled by signals) and is killed with SIGKILL when half are due; a fresh process opens the store: open time, log records replayed, lateness of the reminders due after the open (p99), overdue ones caught up per second, resident bytes per loaded run after the open, and the peak from the open to the last reminder's end | durable Fusee backends |
//!
//! Every engine is opened for its turn and closed after it (opening is not
//! timed), so no idle engine polls or flushes during another's turn.
//! Every result is read back and checked: a figure never comes from runs
//! that did not all finish with the right value.
//!
//! | module | owns |
//! |---|---|
//! | [`workload`] | the Fusee workflows and the drivers the criterion `engine` bench shares |
//! | [`peer`] | duroxide: the same workflows as orchestrations and activities |
//! | [`peers`] | Temporal, Restate and DBOS, servers on loopback (`--peers`) |
//! | [`reminders`] | the reminder service SIGKILLed mid-way (issue 37) |
//! | [`child`] | the child process the recovery, parked and reminders workloads need |
//! | [`measure`] | the turns, and the figures of each subject |
//! | [`report`] | the engine section of the report: rows, ratios, goals |

pub mod child;
pub mod measure;
pub mod peer;
pub mod peers;
pub mod reminders;
pub mod report;
pub mod workload;

use std::time::Duration;

use crate::target::Role;

/// Steps of each fanout workflow (the "10 no-op steps").
pub const FANOUT_STEPS: u32 = 10;

/// How long each timer workflow sleeps: the timers figure's ideal.
pub const TIMER_SLEEP: Duration = Duration::from_secs(1);

/// How much of each engine workload one run makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnginePlan {
    /// Whether the engine workloads run at all (`--no-engine`).
    pub enabled: bool,
    /// Steps of the chain workflow, per round.
    pub chain_steps: u32,
    /// Rounds of the chain (each subject runs one chain per round).
    pub chain_rounds: u32,
    /// Concurrent workflows of the fanout (and of the recovery's fanout).
    pub fanout_runs: u32,
    /// Rounds of the fanout.
    pub fanout_rounds: u32,
    /// Timer workflows.
    pub timers: u32,
    /// Timer workflows of the peer, at most [`EnginePlan::timers`]: fewer,
    /// as each costs the peer several SQLite transactions and an
    /// orchestration turn or two, a few hundred per second on the machine
    /// the plans were sized on (100,000 would take minutes).
    pub peer_timers: u32,
    /// Parked sleepers reopened in a fresh process.
    pub parked: u64,
    /// Reminders of the SIGKILLed reminder service ([`reminders`]).
    pub reminders: u64,
}

impl EnginePlan {
    /// The full plan: the counts.
    pub fn full() -> Self {
        Self {
            enabled: true,
            chain_steps: 1000,
            // Five rounds: each subject's p50 pools steps (and the floor
            // beside it) from five moments of the run, a few seconds apart.
            chain_rounds: 5,
            fanout_runs: 1000,
            fanout_rounds: 2,
            timers: 100_000,
            peer_timers: 5_000,
            parked: 1_000_000,
            // The reminder service.
            reminders: 100_000,
        }
    }

    /// The `--quick` plan: the same workloads, smaller, so the whole
    /// comparison stays under two minutes.
    pub fn quick() -> Self {
        Self {
            enabled: true,
            // Three short rounds rather than one long one: each subject's
            // steps then sample the disk at three moments, as the floor's.
            chain_steps: 100,
            chain_rounds: 3,
            fanout_runs: 100,
            fanout_rounds: 1,
            timers: 5_000,
            peer_timers: 1_000,
            parked: 50_000,
            reminders: 5_000,
        }
    }

    /// One line naming every count, for reports.
    pub fn describe(&self) -> String {
        if !self.enabled {
            return "engine workloads off".into();
        }
        format!(
            "chain of {} steps x {} rounds; fanout of {} workflows x {} steps x {} rounds; \
             {} timers of {} s (the peer: {}); {} parked sleepers; recovery after SIGKILL \
             mid-fanout of {} workflows; {} reminders SIGKILLed when half are due",
            self.chain_steps,
            self.chain_rounds,
            self.fanout_runs,
            FANOUT_STEPS,
            self.fanout_rounds,
            self.timers,
            TIMER_SLEEP.as_secs_f64(),
            self.peer_timers.min(self.timers),
            self.parked,
            self.fanout_runs,
            self.reminders
        )
    }
}

/// A subject of the engine comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineSubject {
    /// The floor: `pwrite` + `fdatasync` of a step record's size (chain
    /// only), and the ideal for timers.
    Floor,
    /// Fusee's engine on one of its backends.
    Fusee(fusee::Backend),
    /// The peer engine: duroxide on its SQLite provider.
    Duroxide,
}

impl EngineSubject {
    /// The name `--backends` takes and reports show.
    pub fn name(self) -> &'static str {
        match self {
            EngineSubject::Floor => "floor",
            EngineSubject::Fusee(b) => b.name(),
            EngineSubject::Duroxide => "duroxide",
        }
    }

    /// What the subject is in the comparison.
    pub fn role(self) -> Role {
        match self {
            EngineSubject::Floor => Role::Floor,
            EngineSubject::Fusee(_) => Role::Backend,
            EngineSubject::Duroxide => Role::Peer,
        }
    }

    /// Whether what it makes durable survives the process (the memory
    /// backend's does not: no parked or recovery figure, no "best").
    pub fn durable(self) -> bool {
        !matches!(self, EngineSubject::Fusee(fusee::Backend::Memory))
    }

    /// How it makes a step durable, for the report.
    pub fn durability(self) -> String {
        match self {
            EngineSubject::Floor => "pwrite + fdatasync of 64 bytes on a preallocated file".into(),
            EngineSubject::Fusee(fusee::Backend::Memory) => "none (in memory)".into(),
            EngineSubject::Fusee(b) => format!(
                "Fusee engine on the {} backend: group commit, one flush for every record that \
                 arrived meanwhile",
                b.name()
            ),
            EngineSubject::Duroxide => peer::DURABILITY.into(),
        }
    }

    /// Parses a name [`EngineSubject::name`] gives, for a backend compiled
    /// in (Postgres is not an engine subject: it needs a server).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "floor" => Some(EngineSubject::Floor),
            "duroxide" => Some(EngineSubject::Duroxide),
            other => other
                .parse::<fusee::Backend>()
                .ok()
                .filter(|b| b.compiled_in() && *b != fusee::Backend::Postgres)
                .map(EngineSubject::Fusee),
        }
    }

    /// Every engine subject of this build, in measurement order: the
    /// floor, the Fusee backends compiled in, the peer.
    pub fn all() -> Vec<Self> {
        let mut v = vec![EngineSubject::Floor];
        v.extend(
            [
                fusee::Backend::Memory,
                fusee::Backend::File,
                fusee::Backend::Rocksdb,
                fusee::Backend::Redb,
            ]
            .into_iter()
            .filter(|b| b.compiled_in())
            .map(EngineSubject::Fusee),
        );
        v.push(EngineSubject::Duroxide);
        v
    }
}

/// One figure of the engine comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EngineMetric {
    /// Median time per chain step, µs (the floor: its `fdatasync` p50).
    ChainP50,
    /// 99th-percentile time per chain step, µs.
    ChainP99,
    /// The floor's p50 in the blocks taken around this subject's chain
    /// turns (half just before each, half just after), µs: what its
    /// [`EngineMetric::ChainP50`] is judged against (the disk next to it,
    /// not next to another subject).
    ChainFloorP50,
    /// The same blocks' p99, µs.
    ChainFloorP99,
    /// Fanout steps per second.
    FanoutRate,
    /// Records per flush during the fanout (Fusee's group commit).
    FanoutBatch,
    /// Process CPU time per fanout step, µs.
    FanoutCpu,
    /// Seconds from the first timer workflow's start to the last result.
    TimersDone,
    /// Seconds to open a store of parked sleepers in a fresh process.
    ParkedOpen,
    /// Resident memory of that process after the open, MB.
    ParkedRss,
    /// Seconds from reopening after a SIGKILL mid-fanout until every run
    /// finished.
    Recovery,
    /// Seconds to open the reminder service's store after its SIGKILL.
    RemindersOpen,
    /// Log records that open replayed.
    RemindersReplayed,
    /// How late the reminders due after the open fired, p99, ms.
    RemindersLateP99,
    /// Overdue reminders fired per second after the open.
    RemindersCatchup,
    /// Resident bytes the open added per loaded reminder.
    RemindersRunBytes,
    /// Reminders: peak resident bytes per loaded run, open to last end.
    RemindersPeakBytes,
    /// The peer's infrastructure failures over every workload, counted
    /// ([`peer::FailureCounts::total`]; the peer only).
    PeerFailures,
}

impl EngineMetric {
    /// Every engine metric, in report order.
    pub const ALL: [EngineMetric; 18] = [
        EngineMetric::ChainP50,
        EngineMetric::ChainP99,
        EngineMetric::ChainFloorP50,
        EngineMetric::ChainFloorP99,
        EngineMetric::FanoutRate,
        EngineMetric::FanoutBatch,
        EngineMetric::FanoutCpu,
        EngineMetric::TimersDone,
        EngineMetric::ParkedOpen,
        EngineMetric::ParkedRss,
        EngineMetric::Recovery,
        EngineMetric::RemindersOpen,
        EngineMetric::RemindersReplayed,
        EngineMetric::RemindersLateP99,
        EngineMetric::RemindersCatchup,
        EngineMetric::RemindersRunBytes,
        EngineMetric::RemindersPeakBytes,
        EngineMetric::PeerFailures,
    ];

    /// Stable identifier for CSV.
    pub fn key(self) -> &'static str {
        match self {
            EngineMetric::ChainP50 => "engine_chain_step_p50_us",
            EngineMetric::ChainP99 => "engine_chain_step_p99_us",
            EngineMetric::ChainFloorP50 => "engine_chain_floor_beside_p50_us",
            EngineMetric::ChainFloorP99 => "engine_chain_floor_beside_p99_us",
            EngineMetric::FanoutRate => "engine_fanout_steps_per_s",
            EngineMetric::FanoutBatch => "engine_fanout_records_per_flush",
            EngineMetric::FanoutCpu => "engine_fanout_cpu_us_per_step",
            EngineMetric::TimersDone => "engine_timers_all_done_s",
            EngineMetric::ParkedOpen => "engine_parked_open_s",
            EngineMetric::ParkedRss => "engine_parked_rss_mb",
            EngineMetric::Recovery => "engine_recovery_s",
            EngineMetric::RemindersOpen => "engine_reminders_open_s",
            EngineMetric::RemindersReplayed => "engine_reminders_replayed_records",
            EngineMetric::RemindersLateP99 => "engine_reminders_late_p99_ms",
            EngineMetric::RemindersCatchup => "engine_reminders_overdue_per_s",
            EngineMetric::RemindersRunBytes => "engine_reminders_bytes_per_loaded_run",
            EngineMetric::RemindersPeakBytes => "engine_reminders_peak_bytes_per_loaded_run",
            EngineMetric::PeerFailures => "engine_peer_infrastructure_failures",
        }
    }

    /// Human label for tables and the chart.
    pub fn label(self) -> &'static str {
        match self {
            EngineMetric::ChainP50 => "chain: step p50",
            EngineMetric::ChainP99 => "chain: step p99",
            EngineMetric::ChainFloorP50 => "chain: floor beside it, p50",
            EngineMetric::ChainFloorP99 => "chain: floor beside it, p99",
            EngineMetric::FanoutRate => "fanout: steps/s",
            EngineMetric::FanoutBatch => "fanout: records per flush",
            EngineMetric::FanoutCpu => "fanout: CPU per step",
            EngineMetric::TimersDone => "timers: all done",
            EngineMetric::ParkedOpen => "parked: open",
            EngineMetric::ParkedRss => "parked: resident after open",
            EngineMetric::Recovery => "recovery after SIGKILL",
            EngineMetric::RemindersOpen => "reminders: open after SIGKILL",
            EngineMetric::RemindersReplayed => "reminders: log records replayed",
            EngineMetric::RemindersLateP99 => "reminders: due after open, late p99",
            EngineMetric::RemindersCatchup => "reminders: overdue caught up",
            EngineMetric::RemindersRunBytes => "reminders: resident per loaded run",
            EngineMetric::RemindersPeakBytes => "reminders: peak resident per loaded run",
            EngineMetric::PeerFailures => "peer: infrastructure failures",
        }
    }

    /// The unit of the value.
    pub fn unit(self) -> &'static str {
        match self {
            EngineMetric::ChainP50
            | EngineMetric::ChainP99
            | EngineMetric::ChainFloorP50
            | EngineMetric::ChainFloorP99
            | EngineMetric::FanoutCpu => "µs",
            EngineMetric::FanoutRate => "steps/s",
            EngineMetric::FanoutBatch => "records",
            EngineMetric::TimersDone
            | EngineMetric::ParkedOpen
            | EngineMetric::Recovery
            | EngineMetric::RemindersOpen => "s",
            EngineMetric::RemindersReplayed => "records",
            EngineMetric::RemindersLateP99 => "ms",
            EngineMetric::RemindersCatchup => "timers/s",
            EngineMetric::RemindersRunBytes | EngineMetric::RemindersPeakBytes => "bytes",
            EngineMetric::ParkedRss => "MB",
            EngineMetric::PeerFailures => "count",
        }
    }

    /// Whether a larger value is better; `None` for a figure that is
    /// neither (records per flush describes the group commit, the peer's
    /// failures are a count of events, the floor beside a subject is a
    /// reference: no ratio).
    pub fn higher_is_better(self) -> Option<bool> {
        match self {
            EngineMetric::FanoutRate | EngineMetric::RemindersCatchup => Some(true),
            EngineMetric::FanoutBatch
            | EngineMetric::PeerFailures
            | EngineMetric::ChainFloorP50
            | EngineMetric::ChainFloorP99 => None,
            _ => Some(false),
        }
    }

    /// The metric holding the floor measured beside a subject for this
    /// one, if it has one (the chain's percentiles).
    pub fn beside(self) -> Option<EngineMetric> {
        match self {
            EngineMetric::ChainP50 => Some(EngineMetric::ChainFloorP50),
            EngineMetric::ChainP99 => Some(EngineMetric::ChainFloorP99),
            _ => None,
        }
    }

    /// How many times worse `value` is than `reference` (above 1 = worse);
    /// `None` when either is not a positive number or the metric has no
    /// direction.
    pub fn cost_ratio(self, value: f64, reference: f64) -> Option<f64> {
        let usable = |x: f64| x > 0.0 && x.is_finite();
        if !(usable(value) && usable(reference)) {
            return None;
        }
        Some(if self.higher_is_better()? {
            reference / value
        } else {
            value / reference
        })
    }
}

/// The figures measured on one engine subject, and why any is missing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineFigures {
    /// Each metric measured, with its value in [`EngineMetric::unit`].
    pub values: Vec<(EngineMetric, f64)>,
    /// Notes on this subject's figures (a count that differs, a workload
    /// it cannot run), one sentence each.
    pub notes: Vec<String>,
    /// Workloads whose runs came back wrong on this subject (its figures
    /// left out, a note says what): a goal judged on one is failed, not
    /// "not measured".
    pub failed: Vec<&'static str>,
}

impl EngineFigures {
    /// The value of `m`, if measured.
    pub fn get(&self, m: EngineMetric) -> Option<f64> {
        self.values.iter().find(|(k, _)| *k == m).map(|&(_, v)| v)
    }

    /// Sets `m` to `v` (replacing an earlier value).
    pub fn set(&mut self, m: EngineMetric, v: f64) {
        self.values.retain(|(k, _)| *k != m);
        self.values.push((m, v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for s in EngineSubject::all() {
            assert_eq!(EngineSubject::parse(s.name()), Some(s));
        }
        assert_eq!(EngineSubject::parse("sqlite"), None);
        assert_eq!(EngineSubject::parse("postgres"), None);
    }

    #[test]
    fn ratios_follow_the_direction() {
        assert_eq!(EngineMetric::ChainP50.cost_ratio(120.0, 100.0), Some(1.2));
        assert_eq!(EngineMetric::FanoutRate.cost_ratio(50.0, 100.0), Some(2.0));
        assert_eq!(EngineMetric::FanoutBatch.cost_ratio(50.0, 100.0), None);
        assert_eq!(EngineMetric::Recovery.cost_ratio(0.0, 1.0), None);
    }
}
