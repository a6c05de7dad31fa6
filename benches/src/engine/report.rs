//! The engine section of the comparison's report: the table (text and
//! markdown), the CSV rows, the ratios and the goals' verdict.
//!
//! # Ratios
//!
//! As in the storage section, every ratio is a cost ratio (above 1 =
//! worse): **× floor** to the floor's figure where it has one (the chain:
//! its `pwrite` + `fdatasync` p50 and p99 in the blocks taken around the
//! subject's own turns, half just before each and half just after,
//! [`EngineMetric::ChainFloorP50`], as a shared disk's latency drifts
//! between turns; timers: the sleep itself, the ideal), and
//! **× best** to the best durable Fusee backend. Records per flush has no
//! ratio: it describes the group commit, neither better nor worse.
//!
//! # Goals
//!
//! For the file backend, as ratios in one run ([`EngineReport::goals`]):
//! chain at most 1.2x the floor per step (p50); fanout at least 10x the
//! peer's steps per second; timers all done within 1.5 s; parked open
//! within 1 s; the reminder service after its SIGKILL (issue 37): open
//! within 0.3 s, reminders due after the open at most 50 ms late (p99),
//! overdue ones caught up at 200,000 a second or more, at most 1 KB
//! resident per loaded run.

use std::fmt::Write as _;

use super::{EngineFigures, EngineMetric, EnginePlan, EngineSubject};
use crate::target::Role;
use crate::text::sig3;

/// One bar of the chart: a subject, its ratio (if it has one) and its
/// value with the unit.
pub type ChartBar = (&'static str, Option<f64>, String);

/// One metric of the chart: its label and a bar per subject.
pub type ChartGroup = (String, Vec<ChartBar>);

/// One engine subject's results.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineResult {
    /// The subject.
    pub subject: EngineSubject,
    /// What was measured.
    pub figures: EngineFigures,
}

impl EngineResult {
    /// The subject's name.
    pub fn name(&self) -> &'static str {
        self.subject.name()
    }
}

/// The engine comparison's results.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineReport {
    /// The workloads' counts.
    pub plan: EnginePlan,
    /// Each subject's results, in measurement order.
    pub subjects: Vec<EngineResult>,
}

/// Whether a goal was met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Measured and within the goal.
    Met,
    /// Measured and outside it.
    Missed,
    /// A figure it needs was not measured in this run.
    NotMeasured,
    /// Its workload's runs came back wrong (see the notes).
    Failed,
}

/// One goal of the issue, judged on this run's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Goal {
    /// Which workload (`chain`, `fanout`, `timers`, `parked`).
    pub name: &'static str,
    /// The figure judged (a ratio or seconds), if measured.
    pub value: Option<f64>,
    /// What the figure is, with the goal, e.g. `x the floor per step (goal <= 1.2)`.
    pub what: &'static str,
    /// The limit.
    pub limit: f64,
    /// Whether the figure must be at most (`true`) or at least the limit.
    pub at_most: bool,
    /// Whether the workload's runs came back wrong on the file backend.
    pub failed: bool,
}

impl Goal {
    /// Met, missed, not measured, or failed.
    pub fn outcome(&self) -> Outcome {
        if self.failed {
            return Outcome::Failed;
        }
        match self.value {
            Some(v) if v.is_finite() => {
                if (self.at_most && v <= self.limit) || (!self.at_most && v >= self.limit) {
                    Outcome::Met
                } else {
                    Outcome::Missed
                }
            }
            _ => Outcome::NotMeasured,
        }
    }

    /// `chain 1.05x the floor per step (goal at most 1.2): met`.
    pub fn describe(&self) -> String {
        let verdict = match self.outcome() {
            Outcome::Met => "met",
            Outcome::Missed => "MISSED",
            Outcome::NotMeasured => "not measured",
            Outcome::Failed => "FAILED (see the notes)",
        };
        let value = self.value.map_or_else(|| "-".into(), sig3);
        format!("{} {value}{}: {verdict}", self.name, self.what)
    }
}

impl EngineReport {
    fn by_name(&self, name: &str) -> Option<&EngineResult> {
        self.subjects.iter().find(|s| s.name() == name)
    }

    fn value(&self, name: &str, m: EngineMetric) -> Option<f64> {
        self.by_name(name).and_then(|s| s.figures.get(m))
    }

    /// The floor's figure for `m`, if it has one.
    pub fn floor(&self, m: EngineMetric) -> Option<f64> {
        self.subjects
            .iter()
            .find(|s| s.subject.role() == Role::Floor)
            .and_then(|s| s.figures.get(m))
    }

    /// The best figure for `m` among the durable Fusee backends.
    pub fn best(&self, m: EngineMetric) -> Option<f64> {
        let higher = m.higher_is_better()?;
        self.subjects
            .iter()
            .filter(|s| s.subject.role() == Role::Backend && s.subject.durable())
            .filter_map(|s| s.figures.get(m))
            .filter(|v| v.is_finite())
            .reduce(|a, b| if higher == (b > a) { b } else { a })
    }

    /// The floor `s`'s value of `m` is judged against: the floor measured
    /// beside it where there is one ([`EngineMetric::beside`]), else the
    /// floor's figure.
    pub fn floor_for(&self, m: EngineMetric, s: &EngineResult) -> Option<f64> {
        m.beside()
            .and_then(|b| s.figures.get(b))
            .or_else(|| self.floor(m))
    }

    /// `(ratio to the floor, ratio to the best durable backend)` of `s`'s
    /// value `value` of `m`.
    pub fn ratios(
        &self,
        m: EngineMetric,
        s: &EngineResult,
        value: f64,
    ) -> (Option<f64>, Option<f64>) {
        (
            self.floor_for(m, s).and_then(|f| m.cost_ratio(value, f)),
            self.best(m).and_then(|b| m.cost_ratio(value, b)),
        )
    }

    /// The goals for the file backend, judged on this run.
    pub fn goals(&self) -> Vec<Goal> {
        let file = |m| self.value("file", m);
        let file_floor = |m| self.by_name("file").and_then(|s| self.floor_for(m, s));
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        let failed = |name: &str| {
            self.by_name("file")
                .is_some_and(|s| s.figures.failed.contains(&name))
        };
        vec![
            Goal {
                name: "chain",
                failed: failed("chain"),
                value: ratio(
                    file(EngineMetric::ChainP50),
                    file_floor(EngineMetric::ChainP50),
                ),
                what: "x the floor beside it per step, p50 (goal at most 1.2)",
                limit: 1.2,
                at_most: true,
            },
            Goal {
                name: "fanout",
                failed: failed("fanout"),
                value: ratio(
                    file(EngineMetric::FanoutRate),
                    self.value("duroxide", EngineMetric::FanoutRate),
                ),
                what: "x the peer's steps/s (goal at least 10)",
                limit: 10.0,
                at_most: false,
            },
            Goal {
                name: "timers",
                failed: failed("timers"),
                value: file(EngineMetric::TimersDone),
                what: " s until all finished (goal at most 1.5 s)",
                limit: 1.5,
                at_most: true,
            },
            Goal {
                name: "parked",
                failed: failed("parked"),
                value: file(EngineMetric::ParkedOpen),
                what: " s to open (goal at most 1 s)",
                limit: 1.0,
                at_most: true,
            },
            Goal {
                name: "reminders open",
                failed: failed("reminders"),
                value: file(EngineMetric::RemindersOpen),
                what: " s to open after SIGKILL (goal at most 0.3 s)",
                limit: 0.3,
                at_most: true,
            },
            Goal {
                name: "reminders late",
                failed: failed("reminders"),
                value: file(EngineMetric::RemindersLateP99),
                what: " ms p99 late, due after the open (goal at most 50 ms)",
                limit: 50.0,
                at_most: true,
            },
            Goal {
                name: "reminders overdue",
                failed: failed("reminders"),
                value: file(EngineMetric::RemindersCatchup),
                what: " overdue caught up per s (goal at least 200,000)",
                limit: 200_000.0,
                at_most: false,
            },
            Goal {
                name: "reminders memory",
                failed: failed("reminders"),
                value: file(EngineMetric::RemindersRunBytes),
                what: " bytes resident per loaded run (goal at most 1,024)",
                limit: 1024.0,
                at_most: true,
            },
        ]
    }

    /// One line: each goal and how many were met.
    pub fn verdict(&self) -> String {
        let goals = self.goals();
        let met = goals.iter().filter(|g| g.outcome() == Outcome::Met).count();
        let measured = goals
            .iter()
            .filter(|g| g.outcome() != Outcome::NotMeasured)
            .count();
        format!(
            "engine goals on the file backend: {}; {met} of {measured} measured goals met",
            goals
                .iter()
                .map(Goal::describe)
                .collect::<Vec<_>>()
                .join("; ")
        )
    }

    /// One cell: the value, its ratio to the floor and (with `both`) to the
    /// best durable backend.
    pub fn cell(&self, m: EngineMetric, s: &EngineResult, both: bool) -> String {
        let Some(v) = s.figures.get(m) else {
            return "-".into();
        };
        let (floor, best) = self.ratios(m, s, v);
        let role = s.subject.role();
        // A count is a whole number: "3", not "3.00".
        let mut cell = if m == EngineMetric::PeerFailures {
            format!("{v:.0}")
        } else {
            sig3(v)
        };
        let floor = floor.filter(|_| role != Role::Floor);
        let best = best.filter(|_| both && role != Role::Floor && s.subject.durable());
        match (floor, best) {
            (Some(f), Some(b)) => {
                let _ = write!(cell, " (×{} floor, ×{} best)", sig3(f), sig3(b));
            }
            (Some(f), None) => {
                let _ = write!(cell, " (×{} floor)", sig3(f));
            }
            (None, Some(b)) => {
                let _ = write!(cell, " (×{} best)", sig3(b));
            }
            (None, None) => {}
        }
        cell
    }

    /// The metrics any subject measured, in report order.
    fn metrics(&self) -> Vec<EngineMetric> {
        EngineMetric::ALL
            .into_iter()
            .filter(|&m| self.subjects.iter().any(|s| s.figures.get(m).is_some()))
            .collect()
    }

    /// Every subject's notes, as `subject: note` lines.
    pub fn notes(&self) -> Vec<String> {
        self.subjects
            .iter()
            .flat_map(|s| {
                s.figures
                    .notes
                    .iter()
                    .map(move |n| format!("{}: {n}", s.name()))
            })
            .collect()
    }

    /// The section as aligned text.
    pub fn text(&self) -> String {
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut head = vec!["engine metric".to_string(), "unit".to_string()];
        head.extend(self.subjects.iter().map(|s| s.name().to_string()));
        rows.push(head);
        for m in self.metrics() {
            let mut row = vec![m.label().to_string(), m.unit().to_string()];
            row.extend(self.subjects.iter().map(|s| self.cell(m, s, false)));
            rows.push(row);
        }
        let mut out = String::new();
        let _ = writeln!(out, "\nengine workloads: {}", self.plan.describe());
        for s in &self.subjects {
            let _ = writeln!(out, "durability, {}: {}", s.name(), s.subject.durability());
        }
        let _ = writeln!(out);
        out.push_str(&crate::text::aligned(&rows));
        for n in self.notes() {
            let _ = writeln!(out, "  {n}");
        }
        let _ = writeln!(out, "{}", self.verdict());
        out
    }

    /// The section as markdown (a second-level heading and its table).
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n## The engine\n\nThe same workflows on every engine, subjects taking turns \
             (workloads: {}).\n\n| subject | role | how a step is made durable |\n|---|---|---|",
            self.plan.describe()
        );
        for s in &self.subjects {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                s.name(),
                s.subject.role().as_str(),
                s.subject.durability().replace('|', "\\|")
            );
        }
        let _ = write!(out, "\n| metric | unit |");
        for s in &self.subjects {
            let _ = write!(out, " {} |", s.name());
        }
        let _ = write!(out, "\n|---|---|");
        for _ in &self.subjects {
            let _ = write!(out, "---:|");
        }
        let _ = writeln!(out);
        for m in self.metrics() {
            let _ = write!(out, "| {} | {} |", m.label(), m.unit());
            for s in &self.subjects {
                let _ = write!(out, " {} |", self.cell(m, s, true));
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "\n×N floor: N times worse than the floor (chain: one `pwrite` + `fdatasync` of a \
             step record's size, in the blocks taken around the subject's own turns, half \
             just before each and half just after: the \
             \"floor beside it\" rows; timers: the sleep itself, the ideal); ×N best: against the best \
             durable Fusee backend. A chain step is timed from its start to the next step's \
             start; fanout from the first start to the last result."
        );
        let notes = self.notes();
        if !notes.is_empty() {
            let _ = writeln!(out);
            for n in notes {
                let _ = writeln!(out, "- {n}");
            }
        }
        let _ = writeln!(out, "\n**Engine verdict**: {}.", self.verdict());
        out
    }

    /// The section's CSV rows (the storage section's columns).
    pub fn csv_rows(&self) -> String {
        let mut out = String::new();
        let opt = |r: Option<f64>| r.map_or(String::new(), |r| format!("{r:.6}"));
        for m in EngineMetric::ALL {
            for s in &self.subjects {
                let Some(v) = s.figures.get(m) else { continue };
                let (floor, best) = self.ratios(m, s, v);
                let _ = writeln!(
                    out,
                    "{},{},{},{},{v:.6},{},{}",
                    m.key(),
                    m.unit(),
                    s.name(),
                    s.subject.role().as_str(),
                    opt(floor),
                    opt(best)
                );
            }
        }
        out
    }

    /// For the chart: per metric with a ratio, each non-floor subject's
    /// ratio to the floor where the floor has the metric, else to the
    /// best durable backend, with its value.
    pub fn chart_groups(&self) -> Vec<ChartGroup> {
        self.metrics()
            .into_iter()
            .filter(|m| m.higher_is_better().is_some())
            .map(|m| {
                let to_floor = self.floor(m).is_some();
                let bars = self
                    .subjects
                    .iter()
                    .filter(|s| s.subject.role() != Role::Floor)
                    .map(|s| {
                        let v = s.figures.get(m);
                        let r = v.and_then(|v| {
                            let (f, b) = self.ratios(m, s, v);
                            if to_floor { f } else { b }
                        });
                        let value =
                            v.map_or_else(String::new, |v| format!("{} {}", sig3(v), m.unit()));
                        (s.name(), r, value)
                    })
                    .collect();
                let reference = if to_floor { "floor" } else { "best" };
                (format!("{} (× {reference})", m.label()), bars)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(subject: EngineSubject, values: &[(EngineMetric, f64)]) -> EngineResult {
        EngineResult {
            subject,
            figures: EngineFigures {
                values: values.to_vec(),
                notes: vec![],
                failed: vec![],
            },
        }
    }

    fn sample(file_chain: f64, file_rate: f64, timers: f64, open: f64) -> EngineReport {
        use EngineMetric::*;
        EngineReport {
            plan: EnginePlan::quick(),
            subjects: vec![
                result(
                    EngineSubject::Floor,
                    &[(ChainP50, 100.0), (TimersDone, 1.0)],
                ),
                result(
                    EngineSubject::Fusee(fusee::Backend::Memory),
                    &[(ChainP50, 10.0), (FanoutRate, 1e6)],
                ),
                result(
                    EngineSubject::Fusee(fusee::Backend::File),
                    &[
                        (ChainP50, file_chain),
                        (FanoutRate, file_rate),
                        (FanoutBatch, 40.0),
                        (TimersDone, timers),
                        (ParkedOpen, open),
                    ],
                ),
                result(
                    EngineSubject::Fusee(fusee::Backend::Redb),
                    &[(ChainP50, 400.0), (FanoutRate, 5000.0)],
                ),
                result(
                    EngineSubject::Duroxide,
                    &[(ChainP50, 2000.0), (FanoutRate, 1000.0)],
                ),
            ],
        }
    }

    #[test]
    fn goals_met_and_missed() {
        let r = sample(110.0, 20_000.0, 1.2, 0.5);
        let outcomes: Vec<Outcome> = r.goals().iter().map(Goal::outcome).collect();
        assert_eq!(outcomes[..4], [Outcome::Met; 4]);
        // The sample has no reminders figures.
        assert_eq!(outcomes[4..], [Outcome::NotMeasured; 4]);
        assert!(
            r.verdict().ends_with("4 of 4 measured goals met"),
            "{}",
            r.verdict()
        );
        // Each goal on the wrong side of its limit.
        let r = sample(130.0, 9_000.0, 1.6, 1.1);
        let outcomes: Vec<Outcome> = r.goals().iter().map(Goal::outcome).collect();
        assert_eq!(outcomes[..4], [Outcome::Missed; 4]);
        let v = r.verdict();
        assert!(
            v.contains("chain 1.30x the floor beside it per step, p50 (goal at most 1.2): MISSED"),
            "{v}"
        );
        assert!(
            v.contains("fanout 9.00x the peer's steps/s (goal at least 10): MISSED"),
            "{v}"
        );
        assert!(v.ends_with("0 of 4 measured goals met"), "{v}");
        // Exactly at the limits is met.
        let r = sample(120.0, 10_000.0, 1.5, 1.0);
        assert!(r.goals()[..4].iter().all(|g| g.outcome() == Outcome::Met));
    }

    #[test]
    fn the_reminder_service_goals_judge_its_four_figures() {
        use EngineMetric::*;
        let with = |open: f64, late: f64, rate: f64, bytes: f64| {
            let mut r = sample(110.0, 20_000.0, 1.2, 0.5);
            for (m, v) in [
                (RemindersOpen, open),
                (RemindersLateP99, late),
                (RemindersCatchup, rate),
                (RemindersRunBytes, bytes),
            ] {
                r.subjects[2].figures.set(m, v);
            }
            r.goals()[4..].iter().map(Goal::outcome).collect::<Vec<_>>()
        };
        assert_eq!(with(0.3, 50.0, 200_000.0, 1024.0), [Outcome::Met; 4]);
        assert_eq!(with(0.31, 51.0, 199_999.0, 1025.0), [Outcome::Missed; 4]);
        let mut r = sample(110.0, 20_000.0, 1.2, 0.5);
        r.subjects[2].figures.failed.push("reminders");
        assert!(
            r.goals()[4..]
                .iter()
                .all(|g| g.outcome() == Outcome::Failed)
        );
    }

    #[test]
    fn a_workload_that_came_back_wrong_fails_its_goal() {
        let mut r = sample(110.0, 20_000.0, 1.2, 0.5);
        r.subjects[2].figures.failed.push("parked");
        let g = r.goals();
        assert_eq!(g[3].outcome(), Outcome::Failed);
        let v = r.verdict();
        assert!(
            v.contains("parked 0.500 s to open (goal at most 1 s): FAILED"),
            "{v}"
        );
        assert!(v.ends_with("3 of 4 measured goals met"), "{v}");
    }

    #[test]
    fn a_goal_without_its_figures_is_not_measured() {
        let mut r = sample(110.0, 20_000.0, 1.2, 0.5);
        r.subjects.retain(|s| s.subject != EngineSubject::Duroxide);
        let g = r.goals();
        assert_eq!(g[1].outcome(), Outcome::NotMeasured);
        assert!(
            r.verdict().ends_with("3 of 3 measured goals met"),
            "{}",
            r.verdict()
        );
    }

    #[test]
    fn ratios_to_the_floor_and_the_best_durable_backend() {
        let r = sample(110.0, 20_000.0, 1.2, 0.5);
        // The best durable chain is the file's 110, not memory's 10.
        assert_eq!(r.best(EngineMetric::ChainP50), Some(110.0));
        assert_eq!(r.best(EngineMetric::FanoutRate), Some(20_000.0));
        assert_eq!(r.best(EngineMetric::FanoutBatch), None);
        let redb = &r.subjects[3];
        assert_eq!(
            r.cell(EngineMetric::ChainP50, redb, true),
            "400 (×4.00 floor, ×3.64 best)"
        );
        assert_eq!(
            r.cell(EngineMetric::FanoutRate, redb, true),
            "5000 (×4.00 best)"
        );
        // A subject with the floor measured beside it is judged against
        // that, not the floor's pooled figure.
        let mut beside = redb.clone();
        beside.figures.set(EngineMetric::ChainFloorP50, 200.0);
        assert_eq!(r.floor_for(EngineMetric::ChainP50, &beside), Some(200.0));
        assert_eq!(
            r.cell(EngineMetric::ChainP50, &beside, true),
            "400 (×2.00 floor, ×3.64 best)"
        );
        assert_eq!(r.cell(EngineMetric::ChainFloorP50, &beside, true), "200");
        // The floor's own cell carries no ratio; memory no "best".
        assert_eq!(r.cell(EngineMetric::ChainP50, &r.subjects[0], true), "100");
        assert_eq!(
            r.cell(EngineMetric::ChainP50, &r.subjects[1], true),
            "10.0 (×0.100 floor)"
        );
        let csv = r.csv_rows();
        assert!(
            csv.contains("engine_chain_step_p50_us,µs,redb,backend,400.000000,4.000000,3.636364"),
            "{csv}"
        );
        assert!(
            csv.contains("engine_fanout_records_per_flush,records,file,backend,40.000000,,"),
            "{csv}"
        );
        let md = r.markdown();
        assert!(md.contains("| fanout: steps/s | steps/s |"), "{md}");
        assert!(md.contains("**Engine verdict**: engine goals"), "{md}");
        let groups = r.chart_groups();
        assert!(
            groups
                .iter()
                .all(|(l, _)| !l.starts_with("fanout: records"))
        );
        let (label, bars) = &groups[0];
        assert_eq!(label, "chain: step p50 (× floor)");
        assert_eq!(bars.len(), 4, "every subject but the floor");
    }
}
