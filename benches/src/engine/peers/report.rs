//! The peers' section of the report: a table of every figure with its
//! cost ratio (above 1 = worse) to Fusee on the file backend and, where
//! there is one, to the floor (the chain: the floor's `fdatasync` measured
//! beside that subject's turns; timers: the sleep); then each subject's
//! counts, version, durability setting and flush calls counted; then the
//! issue's goals, judged on this run's ratios.

use std::fmt::Write as _;

use super::{Counts, PeersPlan};
use crate::engine::report::ChartGroup;
use crate::engine::{EngineFigures, EngineMetric};
use crate::text::{aligned, sig3};

/// The figures of the peers' comparison, in table order: the engine
/// section's metrics (labels, units, directions, ratios).
pub const METRICS: [EngineMetric; 8] = [
    EngineMetric::ChainP50,
    EngineMetric::ChainP99,
    EngineMetric::ChainFloorP50,
    EngineMetric::ChainFloorP99,
    EngineMetric::FanoutRate,
    // Fusee's only: a peer's work runs in processes of its own.
    EngineMetric::FanoutCpu,
    EngineMetric::TimersDone,
    EngineMetric::Recovery,
];

/// One subject's figures and what they were measured on.
#[derive(Clone, Debug, PartialEq)]
pub struct SubjectFigures {
    /// The subject's name.
    pub name: &'static str,
    /// The counts it ran.
    pub counts: Counts,
    /// Its version, as it reports it.
    pub version: String,
    /// How it is configured to make a step durable.
    pub durability: String,
    /// Each figure measured, with notes and failed workloads.
    pub figures: EngineFigures,
    /// The flush calls of a chain of this many steps, per system call.
    pub fsyncs: Option<(u32, Vec<(String, u64)>)>,
}

impl SubjectFigures {
    /// No figures yet.
    pub fn new(name: &'static str, counts: Counts) -> Self {
        Self {
            name,
            counts,
            version: String::new(),
            durability: String::new(),
            figures: EngineFigures::default(),
            fsyncs: None,
        }
    }

    /// Flush calls per step of the counted chain, and their breakdown.
    pub fn fsync_text(&self) -> String {
        let Some((steps, calls)) = &self.fsyncs else {
            return "not counted".into();
        };
        let total: u64 = calls.iter().map(|(_, n)| n).sum();
        let parts: Vec<String> = calls
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        format!(
            "{} per step ({} in a chain of {steps}{})",
            sig3(total as f64 / f64::from((*steps).max(1))),
            total,
            if parts.is_empty() {
                String::new()
            } else {
                format!(": {}", parts.join(", "))
            }
        )
    }
}

/// A goal of issue 34, judged on one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Goal {
    /// What it asks.
    pub text: String,
    /// The ratio measured, if both sides were.
    pub ratio: Option<f64>,
    /// Met, missed, or `None` when a side was not measured.
    pub met: Option<bool>,
}

/// The peers' section.
#[derive(Clone, Debug, PartialEq)]
pub struct PeersReport {
    /// The counts.
    pub plan: PeersPlan,
    /// Every subject, in measurement order (the floor first).
    pub subjects: Vec<SubjectFigures>,
    /// Notes on the run (a peer not measured and why).
    pub notes: Vec<String>,
}

/// The subject every ratio is to.
const FUSEE: &str = "fusee-file";

impl PeersReport {
    fn subject(&self, name: &str) -> Option<&SubjectFigures> {
        self.subjects.iter().find(|s| s.name == name)
    }

    fn value(&self, name: &str, m: EngineMetric) -> Option<f64> {
        self.subject(name)?.figures.get(m)
    }

    /// `s`'s cost ratios for its value `v` of `m`: to the floor (the chain:
    /// the floor beside its turns; timers: the sleep) and to fusee-file
    /// (none for fusee-file itself, nor for the floor, a reference).
    fn ratios(&self, s: &SubjectFigures, m: EngineMetric, v: f64) -> (Option<f64>, Option<f64>) {
        if s.name == "floor" {
            return (None, None);
        }
        let floor = match m {
            EngineMetric::ChainP50 => s.figures.get(EngineMetric::ChainFloorP50),
            EngineMetric::ChainP99 => s.figures.get(EngineMetric::ChainFloorP99),
            EngineMetric::TimersDone => self.value("floor", m),
            _ => None,
        };
        let fusee = (s.name != FUSEE)
            .then(|| self.value(FUSEE, m))
            .flatten()
            .and_then(|f| m.cost_ratio(v, f));
        (floor.and_then(|f| m.cost_ratio(v, f)), fusee)
    }

    /// `s`'s cell for `m`: the value, its ratio to Fusee on file and to
    /// the floor.
    fn cell(&self, s: &SubjectFigures, m: EngineMetric) -> String {
        let Some(v) = s.figures.get(m) else {
            return "-".into();
        };
        let mut cell = sig3(v);
        let (floor, fusee) = self.ratios(s, m, v);
        let mut ratios = Vec::new();
        if let Some(r) = fusee {
            ratios.push(format!("×{} fusee", sig3(r)));
        }
        if let Some(r) = floor {
            ratios.push(format!("×{} floor", sig3(r)));
        }
        if !ratios.is_empty() {
            let _ = write!(cell, " ({})", ratios.join(", "));
        }
        cell
    }

    /// The goals on this run.
    pub fn goals(&self) -> Vec<Goal> {
        let mut goals = Vec::new();
        let mut ratio_goal =
            |text: String, ours: &str, theirs: &str, m: EngineMetric, limit: f64| {
                let (a, b) = (self.value(ours, m), self.value(theirs, m));
                let ratio = match (a, b) {
                    (Some(a), Some(b)) if a > 0.0 && b > 0.0 => Some(a / b),
                    _ => None,
                };
                let met = match ratio {
                    Some(r) if m.higher_is_better() == Some(true) => Some(r >= limit),
                    Some(r) => Some(r <= limit),
                    // A side not measured (a peer that failed: its note says
                    // why) leaves the goal unjudged.
                    None => None,
                };
                goals.push(Goal { text, ratio, met });
            };
        for (peer, limit) in [
            ("restate", 0.3),
            ("dbos-postgres", 0.05),
            ("temporal", 0.05),
        ] {
            ratio_goal(
                format!("chain step p50: fusee-file at most {limit}x {peer}'s"),
                FUSEE,
                peer,
                EngineMetric::ChainP50,
                limit,
            );
        }
        for (peer, limit) in [
            ("restate", 200.0),
            ("dbos-postgres", 2000.0),
            ("temporal", 20000.0),
        ] {
            ratio_goal(
                format!("fanout steps/s: fusee-file at least {limit}x {peer}'s"),
                FUSEE,
                peer,
                EngineMetric::FanoutRate,
                limit,
            );
        }
        ratio_goal(
            "chain step p50: fusee-postgres at most 0.3x dbos-postgres's".into(),
            "fusee-postgres",
            "dbos-postgres",
            EngineMetric::ChainP50,
            0.3,
        );
        ratio_goal(
            "fanout steps/s: fusee-postgres at least 20x dbos-postgres's".into(),
            "fusee-postgres",
            "dbos-postgres",
            EngineMetric::FanoutRate,
            20.0,
        );
        goals
    }

    /// The CSV rows (columns in [`crate::report`]): per figure, the value,
    /// its ratio to the floor and (in the last column) to fusee-file; then
    /// each subject's counted flush calls per step.
    pub fn csv_rows(&self) -> String {
        let mut out = String::new();
        let opt = |r: Option<f64>| r.map_or(String::new(), |r| format!("{r:.6}"));
        let role = |name: &str| match name {
            "floor" => "floor",
            n if n.starts_with("fusee-") => "backend",
            _ => "peer",
        };
        for m in METRICS {
            for s in &self.subjects {
                let Some(v) = s.figures.get(m) else { continue };
                let (floor, fusee) = self.ratios(s, m, v);
                let _ = writeln!(
                    out,
                    "peers_{},{},{},{},{v:.6},{},{}",
                    m.key(),
                    m.unit(),
                    s.name,
                    role(s.name),
                    opt(floor),
                    opt(fusee)
                );
            }
        }
        for s in &self.subjects {
            let Some((steps, calls)) = &s.fsyncs else {
                continue;
            };
            let total: u64 = calls.iter().map(|(_, n)| n).sum();
            let _ = writeln!(
                out,
                "peers_flush_calls_per_step,calls,{},{},{:.6},,",
                s.name,
                role(s.name),
                total as f64 / f64::from((*steps).max(1))
            );
        }
        out
    }

    /// The chart's groups: per figure, each subject but the floor with its
    /// cost ratio to fusee-file (1 for fusee-file itself).
    pub fn chart_groups(&self) -> Vec<ChartGroup> {
        [
            EngineMetric::ChainP50,
            EngineMetric::ChainP99,
            EngineMetric::FanoutRate,
            EngineMetric::TimersDone,
            EngineMetric::Recovery,
        ]
        .into_iter()
        .map(|m| {
            let fusee = self.value(FUSEE, m);
            let bars = self
                .subjects
                .iter()
                .filter(|s| s.name != "floor")
                .map(|s| {
                    let v = s.figures.get(m);
                    let ratio = v.zip(fusee).and_then(|(v, f)| m.cost_ratio(v, f));
                    let value = v.map_or_else(String::new, |v| format!("{} {}", sig3(v), m.unit()));
                    (s.name, ratio, value)
                })
                .collect();
            (m.label().to_string(), bars)
        })
        .collect()
    }

    fn counts_text(&self, s: &SubjectFigures) -> String {
        if s.name == "floor" {
            return format!(
                "{} writes per chain turn of Fusee's count, half before, half after",
                self.plan.fusee.chain_steps
            );
        }
        let c = s.counts;
        format!(
            "chain {} steps x {} rounds; fanout {} x 10 steps x {} rounds; {} timers; recovery of {}",
            c.chain_steps,
            self.plan.chain_rounds,
            c.fanout_runs,
            self.plan.fanout_rounds,
            c.timers,
            c.fanout_runs
        )
    }

    /// The section as aligned text.
    pub fn text(&self) -> String {
        let mut rows = vec![{
            let mut h = vec!["metric".to_string(), "unit".to_string()];
            h.extend(self.subjects.iter().map(|s| s.name.to_string()));
            h
        }];
        for m in METRICS {
            let mut r = vec![m.label().to_string(), m.unit().to_string()];
            r.extend(self.subjects.iter().map(|s| self.cell(s, m)));
            rows.push(r);
        }
        let mut out = String::from(
            "\nengine peers (×N fusee = N times worse than fusee-file; ×N floor = to the floor)\n",
        );
        out.push_str(&aligned(&rows));
        for s in &self.subjects {
            let _ = writeln!(out, "\n{}: {}", s.name, s.version);
            let _ = writeln!(out, "  counts: {}", self.counts_text(s));
            let _ = writeln!(out, "  durability: {}", s.durability);
            if s.name != "floor" {
                let _ = writeln!(out, "  flush calls (strace): {}", s.fsync_text());
            }
            for n in &s.figures.notes {
                let _ = writeln!(out, "  note: {n}");
            }
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        let _ = writeln!(out, "\ngoals (issue 34):");
        for g in self.goals() {
            let _ = writeln!(out, "  {}: {}", verdict(&g), g.text);
        }
        out
    }

    /// The section as markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::from("\n## Engine peers\n\n");
        let _ = writeln!(
            out,
            "Cells: the value, then its cost ratio (above 1 = worse) to fusee-file and to the \
             floor (the chain: the floor's `fdatasync` beside that subject's turns; timers: the \
             sleep).\n"
        );
        let _ = write!(out, "| metric | unit |");
        for s in &self.subjects {
            let _ = write!(out, " {} |", s.name);
        }
        let _ = write!(out, "\n|---|---|");
        for _ in &self.subjects {
            let _ = write!(out, "---:|");
        }
        out.push('\n');
        for m in METRICS {
            let _ = write!(out, "| {} | {} |", m.label(), m.unit());
            for s in &self.subjects {
                let _ = write!(out, " {} |", self.cell(s, m));
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "\n| subject | version | counts | durability | flush calls, counted (strace) |\n|---|---|---|---|---|"
        );
        for s in &self.subjects {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                s.name,
                s.version,
                self.counts_text(s),
                s.durability,
                if s.name == "floor" {
                    "1 fdatasync per write".into()
                } else {
                    s.fsync_text()
                }
            );
        }
        let notes: Vec<String> = self
            .subjects
            .iter()
            .flat_map(|s| {
                s.figures
                    .notes
                    .iter()
                    .map(move |n| format!("{}: {n}", s.name))
            })
            .chain(self.notes.iter().cloned())
            .collect();
        if !notes.is_empty() {
            out.push('\n');
            for n in notes {
                let _ = writeln!(out, "- {n}");
            }
        }
        let _ = writeln!(out, "\n### Goals (issue 34)\n");
        for g in self.goals() {
            let _ = writeln!(out, "- **{}**: {}", verdict(&g), g.text);
        }
        out
    }
}

fn verdict(g: &Goal) -> String {
    let r = g
        .ratio
        .map_or(String::new(), |r| format!(" ({}x)", sig3(r)));
    match g.met {
        Some(true) => format!("met{r}"),
        Some(false) => format!("missed{r}"),
        None => "not measured".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(name: &'static str, p50: f64, rate: f64) -> SubjectFigures {
        let mut s = SubjectFigures::new(name, PeersPlan::new(true).fusee);
        s.figures.set(EngineMetric::ChainP50, p50);
        s.figures.set(EngineMetric::ChainFloorP50, 100.0);
        s.figures.set(EngineMetric::FanoutRate, rate);
        s
    }

    fn report() -> PeersReport {
        let mut restate = subject("restate", 2000.0, 700.0);
        restate.fsyncs = Some((50, vec![("fsync".into(), 0), ("fdatasync".into(), 150)]));
        PeersReport {
            plan: PeersPlan::new(true),
            subjects: vec![
                subject("fusee-file", 150.0, 200_000.0),
                restate,
                subject("temporal", 70_000.0, 12.0),
            ],
            notes: vec!["dbos-postgres: not measured: no PostgreSQL server".into()],
        }
    }

    #[test]
    fn cells_carry_ratios_to_fusee_and_to_the_floor() {
        let r = report();
        let restate = &r.subjects[1];
        assert_eq!(
            r.cell(restate, EngineMetric::ChainP50),
            "2000 (×13.3 fusee, ×20.0 floor)"
        );
        assert_eq!(
            r.cell(restate, EngineMetric::FanoutRate),
            "700 (×286 fusee)"
        );
        assert_eq!(
            r.cell(&r.subjects[0], EngineMetric::ChainP50),
            "150 (×1.50 floor)"
        );
        assert_eq!(r.cell(restate, EngineMetric::Recovery), "-");
        assert_eq!(
            restate.fsync_text(),
            "3.00 per step (150 in a chain of 50: 150 fdatasync)"
        );
        let text = r.text();
        assert!(text.contains("restate"), "{text}");
        assert!(r.markdown().contains("| chain: step p50 | µs |"));
        let csv = r.csv_rows();
        assert!(
            csv.contains(
                "peers_engine_chain_step_p50_us,µs,restate,peer,2000.000000,20.000000,13.333333"
            ),
            "{csv}"
        );
        assert!(
            csv.contains("peers_flush_calls_per_step,calls,restate,peer,3.000000,,"),
            "{csv}"
        );
        let chart = r.chart_groups();
        let fanout = chart.iter().find(|(l, _)| l == "fanout: steps/s");
        let temporal = fanout.and_then(|(_, bars)| bars.iter().find(|b| b.0 == "temporal"));
        assert_eq!(
            temporal.and_then(|b| b.1).map(|x| x.round()),
            Some(16_667.0)
        );
    }

    #[test]
    fn goals_are_judged_on_the_run_and_unmeasured_ones_say_so() {
        let goals = report().goals();
        let find = |t: &str| {
            goals
                .iter()
                .find(|g| g.text.starts_with(t) && g.text.contains("restate"))
        };
        let chain = find("chain step p50: fusee-file").map(|g| (g.met, g.ratio));
        assert_eq!(chain, Some((Some(true), Some(0.075))));
        let fan = find("fanout").map(|g| g.met);
        assert_eq!(fan, Some(Some(true)));
        let temporal = goals
            .iter()
            .find(|g| g.text.contains("fanout") && g.text.contains("temporal"))
            .map(|g| g.met);
        // 200,000 / 12 is under 20,000x.
        assert_eq!(temporal, Some(Some(false)));
        assert!(
            goals
                .iter()
                .any(|g| g.text.contains("dbos-postgres") && g.met.is_none())
        );
    }
}
