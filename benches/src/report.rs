//! A comparison's results and their four renderings: a text table
//! (stdout), CSV, markdown (what `benches/RESULTS.md` holds) and an SVG bar
//! chart of the ratios.
//!
//! # Ratios
//!
//! Every figure is also given as a *cost ratio*: how many times worse it is
//! than a reference, whatever the metric's direction (above 1 = worse,
//! below 1 = better; for a throughput, reference / value). Two references:
//!
//! - **× floor**: the floor's figure for the same metric (raw `pwrite` +
//!   `fdatasync` of the same bytes on the same disk);
//! - **× best**: the best figure among the durable backends measured (the
//!   memory backend is left out: it flushes nothing).
//!
//! Table memory per parked run is the core's, one figure for every backend;
//! its ratio is to the 32-byte persisted index record of a parked run.
//!
//! # CSV columns
//!
//! `metric,unit,subject,role,value,ratio_to_floor,ratio_to_best_backend`;
//! `metric` is [`Metric::key`], an empty ratio means no reference was
//! measured. The table memory row has subject `core` and role `core`, its
//! ratio to the index record in `ratio_to_floor`. The engine section's rows
//! follow, with the same columns and keys starting `engine_`
//! ([`crate::engine::EngineMetric::key`]; ratios as in
//! [`crate::engine::report`]). Under `--peers`, the peers' rows instead:
//! keys `peers_` and the engine's key, or `peers_flush_calls_per_step`;
//! `ratio_to_best_backend` holds the ratio to Fusee on the file backend
//! ([`crate::engine::peers::report`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::engine::peers::report::PeersReport;
use crate::engine::report::EngineReport;
use crate::error::{BenchError, Result};
use crate::machine::Machine;
use crate::measure::{Figures, Metric};
use crate::plan::{BATCH_SIZES, Plan};
use crate::target::Role;
use crate::text::{aligned, sig3};

/// The file names [`Report::write`] creates in the output directory.
pub const FILES: [&str; 3] = ["compare.csv", "compare.md", "compare.svg"];

/// One subject's results.
#[derive(Clone, Debug, PartialEq)]
pub struct SubjectResult {
    /// Its name (`memory`, `floor`, `sqlite`, ...).
    pub name: String,
    /// What it is in the comparison.
    pub role: Role,
    /// Whether its flushes survive power loss.
    pub durable: bool,
    /// How it makes data durable.
    pub flush_method: String,
    /// What was measured.
    pub figures: Figures,
}

/// Everything a comparison run produced, with what it needs to be
/// reproduced.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// When the run started (UTC).
    pub date: String,
    /// The command line, as typed (arguments joined by spaces).
    pub command: String,
    /// The machine, disk and build.
    pub machine: Machine,
    /// The workload's counts.
    pub plan: Plan,
    /// Mean log record and frame sizes of the workload, bytes.
    pub record_bytes: f64,
    /// Mean frame size of the workload, bytes.
    pub frame_bytes: f64,
    /// Each subject's results, in measurement order.
    pub subjects: Vec<SubjectResult>,
    /// `ShardCore` table bytes per parked run.
    pub table_bytes_per_run: f64,
    /// Seconds the whole run took.
    pub seconds: f64,
    /// The engine section, when the engine workloads ran.
    pub engine: Option<EngineReport>,
    /// The engine peers' section (`--peers`).
    pub peers: Option<PeersReport>,
}

impl Report {
    /// The floor's value of `m`, if the floor was measured.
    pub fn floor(&self, m: Metric) -> Option<f64> {
        self.subjects
            .iter()
            .find(|s| s.role == Role::Floor)
            .and_then(|s| s.figures.get(m))
    }

    /// The best value of `m` among the durable backends.
    pub fn best_backend(&self, m: Metric) -> Option<f64> {
        self.subjects
            .iter()
            .filter(|s| s.role == Role::Backend && s.durable)
            .filter_map(|s| s.figures.get(m))
            .filter(|v| v.is_finite())
            .reduce(|a, b| {
                if m.higher_is_better() == (b > a) {
                    b
                } else {
                    a
                }
            })
    }

    /// `(ratio to floor, ratio to best durable backend)` of a value of `m`.
    pub fn ratios(&self, m: Metric, value: f64) -> (Option<f64>, Option<f64>) {
        (
            self.floor(m).and_then(|f| m.cost_ratio(value, f)),
            self.best_backend(m).and_then(|b| m.cost_ratio(value, b)),
        )
    }

    /// The durable backends and the peer, best first, by the geometric mean
    /// of their ratios to the best durable backend over every per-subject
    /// metric (each metric weighs the same; 1.0 = best at everything).
    /// Subjects missing a metric are ranked on the ones they have.
    pub fn ranking(&self) -> Vec<(&SubjectResult, f64)> {
        let mut out: Vec<(&SubjectResult, f64)> = self
            .subjects
            .iter()
            .filter(|s| s.durable && s.role != Role::Floor)
            .filter_map(|s| {
                let logs: Vec<f64> = Metric::per_subject()
                    .into_iter()
                    .filter_map(|m| s.figures.get(m).and_then(|v| self.ratios(m, v).1))
                    .map(f64::ln)
                    .collect();
                (!logs.is_empty())
                    .then(|| (s, (logs.iter().sum::<f64>() / logs.len() as f64).exp()))
            })
            .collect();
        out.sort_by(|a, b| a.1.total_cmp(&b.1));
        out
    }

    /// One line naming the pick for this disk, or why there is none.
    pub fn verdict(&self) -> String {
        let ranking = self.ranking();
        let backends: Vec<String> = ranking
            .iter()
            .filter(|(s, _)| s.role == Role::Backend)
            .map(|(s, g)| format!("{} ×{}", s.name, sig3(*g)))
            .collect();
        let peers: Vec<String> = ranking
            .iter()
            .filter(|(s, _)| s.role == Role::Peer)
            .map(|(s, g)| format!("{} ×{}", s.name, sig3(*g)))
            .collect();
        let mut line = match backends.first() {
            Some(best) => format!(
                "pick for this disk: {} (durable backends by the geometric mean of their \
                 ratios to the best figure: {})",
                best.split(' ').next().unwrap_or_default(),
                backends.join(", ")
            ),
            None => "no durable backend measured: nothing to pick between yet".to_string(),
        };
        if !peers.is_empty() && !backends.is_empty() {
            line.push_str(&format!("; for comparison, {}", peers.join(", ")));
        }
        line
    }

    /// Table memory per parked run as a ratio to the 32-byte index record.
    pub fn table_ratio(&self) -> f64 {
        self.table_bytes_per_run / fusee_storage::INDEX_RECORD as f64
    }

    /// What was run: the peers' plan under `--peers`, else the plan's.
    fn workload(&self) -> String {
        match &self.peers {
            Some(p) => p.plan.describe(),
            None => self.plan.describe(),
        }
    }

    /// The results as an aligned text table, with the run's description
    /// above it.
    pub fn text(&self) -> String {
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut head = vec!["metric".to_string(), "unit".to_string()];
        head.extend(self.subjects.iter().map(|s| s.name.clone()));
        rows.push(head);
        for m in Metric::per_subject() {
            let mut row = vec![m.label(), m.unit().to_string()];
            for s in &self.subjects {
                row.push(self.cell(m, s, false));
            }
            rows.push(row);
        }
        let mut out = String::new();
        let _ = writeln!(out, "Fusee backend comparison, {}", self.date);
        let _ = writeln!(out, "command: {}", self.command);
        let _ = writeln!(out, "workload: {}", self.workload());
        for (k, v) in self.machine.fields() {
            let _ = writeln!(out, "{k}: {v}");
        }
        for s in &self.subjects {
            let _ = writeln!(out, "flush, {}: {}", s.name, s.flush_method);
        }
        if self.subjects.is_empty() {
            // `--engine-only`: no storage table of empty columns.
            let _ = writeln!(
                out,
                "\nstorage section not run (--engine-only or --peers)\nrun took {:.1} s",
                self.seconds
            );
        } else {
            let _ = writeln!(out);
            out.push_str(&aligned(&rows));
            let _ = writeln!(
                out,
                "\nwhere the group-commit time goes (µs per batch; × = to the floor's):"
            );
            for (batch, rows) in self.breakdown_rows() {
                for r in rows {
                    let _ = writeln!(
                        out,
                        "  batch {batch:>4}, {}: appends {}, flush p50 {}, p99 {}, \
                         time above the median flush {}",
                        r[0], r[1], r[2], r[3], r[4]
                    );
                }
            }
            let _ = writeln!(
                out,
                "\n(×N = N times worse than the floor; below 1 = better)\n{}\n\
                 table memory per parked run: {} bytes ({} parked runs in ShardCore; ×{} the 32-byte index record)\n\
                 run took {:.1} s",
                self.verdict(),
                sig3(self.table_bytes_per_run),
                self.plan.parked_runs,
                sig3(self.table_ratio()),
                self.seconds
            );
        }
        if let Some(e) = &self.engine {
            out.push_str(&e.text());
        }
        if let Some(p) = &self.peers {
            out.push_str(&p.text());
        }
        out
    }

    /// One cell: the value and its ratio to the floor (and, in markdown, to
    /// the best durable backend).
    fn cell(&self, m: Metric, s: &SubjectResult, both: bool) -> String {
        let Some(v) = s.figures.get(m) else {
            return "-".into();
        };
        let (floor, best) = self.ratios(m, v);
        let mut cell = sig3(v);
        let show_floor = floor.filter(|_| s.role != Role::Floor);
        let show_best = best.filter(|_| both && s.role != Role::Floor && s.durable);
        match (show_floor, show_best) {
            (Some(f), Some(b)) => {
                let _ = write!(cell, " (×{} floor, ×{} best)", sig3(f), sig3(b));
            }
            (Some(f), None) => {
                let _ = write!(cell, " (×{})", sig3(f));
            }
            (None, Some(b)) => {
                let _ = write!(cell, " (×{} best)", sig3(b));
            }
            (None, None) => {}
        }
        cell
    }

    /// The results as CSV (columns in the module documentation).
    pub fn csv(&self) -> String {
        let mut out =
            String::from("metric,unit,subject,role,value,ratio_to_floor,ratio_to_best_backend\n");
        let opt = |r: Option<f64>| r.map_or(String::new(), |r| format!("{r:.6}"));
        for m in Metric::per_subject() {
            for s in &self.subjects {
                let Some(v) = s.figures.get(m) else { continue };
                let (floor, best) = self.ratios(m, v);
                let _ = writeln!(
                    out,
                    "{},{},{},{},{v:.6},{},{}",
                    m.key(),
                    m.unit(),
                    s.name,
                    s.role.as_str(),
                    opt(floor),
                    opt(best)
                );
            }
        }
        let m = Metric::TableBytes;
        // Under `--peers` the core's table was not measured.
        if self.peers.is_none() {
            let _ = writeln!(
                out,
                "{},{},core,core,{:.6},{:.6},",
                m.key(),
                m.unit(),
                self.table_bytes_per_run,
                self.table_ratio()
            );
        }
        if let Some(e) = &self.engine {
            out.push_str(&e.csv_rows());
        }
        if let Some(p) = &self.peers {
            out.push_str(&p.csv_rows());
        }
        out
    }

    /// The results as markdown: what `benches/RESULTS.md` holds.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Fusee backend comparison\n");
        let _ = writeln!(out, "- date: {}", self.date);
        let _ = writeln!(out, "- command: `{}`", self.command);
        if self.peers.is_some() {
            // No records or frames of the storage section were written.
            let _ = writeln!(out, "- workload: {}", self.workload());
        } else {
            let _ = writeln!(
                out,
                "- workload: {}; log records {:.0} bytes on average, run-store frames {:.0} bytes \
                 (whole journals: Start, 10 Steps, Done)",
                self.workload(),
                self.record_bytes,
                self.frame_bytes
            );
        }
        let _ = writeln!(out, "- run took {:.1} s\n", self.seconds);
        let _ = writeln!(out, "## Machine\n\n| | |\n|---|---|");
        for (k, v) in self.machine.fields() {
            let _ = writeln!(out, "| {k} | {} |", md_escape(&v));
        }
        if self.subjects.is_empty() {
            // `--engine-only`: no storage table of empty columns.
            let _ = writeln!(
                out,
                "\nThe storage section was not run (`--engine-only` or `--peers`)."
            );
        } else {
            self.storage_markdown(&mut out);
        }
        if let Some(e) = &self.engine {
            out.push_str(&e.markdown());
        }
        if let Some(p) = &self.peers {
            out.push_str(&p.markdown());
        }
        out
    }

    /// The storage section of [`Report::markdown`]: subjects, results,
    /// verdict and the group-commit breakdown.
    fn storage_markdown(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\n## Subjects and flush methods\n\n| subject | role | flush method |\n|---|---|---|"
        );
        for s in &self.subjects {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                s.name,
                s.role.as_str(),
                md_escape(&s.flush_method)
            );
        }
        let _ = writeln!(*out, "\n## Results\n");
        let _ = write!(*out, "| metric | unit |");
        for s in &self.subjects {
            let _ = write!(*out, " {} |", s.name);
        }
        let _ = write!(*out, "\n|---|---|");
        for _ in &self.subjects {
            let _ = write!(*out, "---:|");
        }
        let _ = writeln!(*out);
        for m in Metric::per_subject() {
            let _ = write!(*out, "| {} | {} |", m.label(), m.unit());
            for s in &self.subjects {
                let _ = write!(*out, " {} |", self.cell(m, s, true));
            }
            let _ = writeln!(*out);
        }
        let _ = writeln!(
            out,
            "\n×N floor: N times worse than raw `pwrite` + `fdatasync` of the same bytes on the \
             same disk (below 1 = better); ×N best: against the best durable backend measured.\n\n\
             Table memory per parked run: **{} bytes** (`ShardCore::table_bytes` over {} parked \
             runs; the same for every backend), ×{} the 32-byte persisted index record.\n\n\
             **Verdict**: {}.",
            sig3(self.table_bytes_per_run),
            self.plan.parked_runs,
            sig3(self.table_ratio()),
            self.verdict()
        );
        let _ = writeln!(
            out,
            "\n## Where the group-commit time goes\n\n\
             Each flush is timed apart from its batch's appends. Per batch size and subject: the \
             appends' mean time per batch (the caller's CPU), the median and 99th-percentile \
             flush (×: to the floor's), and the share of all the time that flushes spent above \
             their median flush: the tail, where rare slow flushes (a roll to a new file, the \
             subject's own background work competing for the disk, the machine's noise, which \
             the floor's share shows) weigh in the records/s figure.\n\n\
             | batch | subject | appends µs/batch | flush p50 µs | flush p99 µs | time above the median flush |\n\
             |---:|---|---:|---:|---:|---:|"
        );
        for (batch, rows) in self.breakdown_rows() {
            for row in rows {
                let _ = writeln!(*out, "| {batch} | {} |", row.join(" | "));
            }
        }
    }

    /// Per batch size, one row of five cells per subject that has its
    /// breakdown: subject, appends µs per batch, flush p50 and p99 (with
    /// their ratios to the floor's), and the tail's share of the time.
    fn breakdown_rows(&self) -> Vec<(u64, Vec<[String; 5]>)> {
        let floor = self.subjects.iter().find(|s| s.role == Role::Floor);
        BATCH_SIZES
            .iter()
            .map(|&b| {
                let reference = floor.and_then(|f| f.figures.batch(b));
                let rows = self
                    .subjects
                    .iter()
                    .filter_map(|s| {
                        let d = s.figures.batch(b)?;
                        let vs = |v: f64, r: Option<f64>| match r.filter(|r| *r > 0.0) {
                            Some(r) if s.role != Role::Floor => {
                                format!("{} (×{})", sig3(v), sig3(v / r))
                            }
                            _ => sig3(v),
                        };
                        Some([
                            s.name.clone(),
                            sig3(d.append_us),
                            vs(d.flush_p50_us, reference.map(|r| r.flush_p50_us)),
                            vs(d.flush_p99_us, reference.map(|r| r.flush_p99_us)),
                            format!("{:.0}%", d.tail_share * 100.0),
                        ])
                    })
                    .collect();
                (b, rows)
            })
            .collect()
    }

    /// A horizontal bar chart of every subject's ratio to the floor, per
    /// metric, on a logarithmic axis, as a standalone SVG document; with
    /// the engine section, a second panel of the engine's ratios below.
    pub fn svg(&self) -> String {
        let storage: Vec<Group> = Metric::per_subject()
            .into_iter()
            .map(|m| {
                let bars = self
                    .subjects
                    .iter()
                    .filter(|s| s.role != Role::Floor)
                    .map(|s| {
                        let v = s.figures.get(m);
                        Bar {
                            name: s.name.clone(),
                            ratio: v.and_then(|v| self.ratios(m, v).0),
                            value: v
                                .map_or_else(String::new, |v| format!("{} {}", sig3(v), m.unit())),
                        }
                    })
                    .collect();
                Group {
                    label: m.label(),
                    bars,
                }
            })
            .collect();
        let groups = |chart: Vec<crate::engine::report::ChartGroup>| -> Vec<Group> {
            chart
                .into_iter()
                .map(|(label, bars)| Group {
                    label,
                    bars: bars
                        .into_iter()
                        .map(|(name, ratio, value)| Bar {
                            name: name.to_string(),
                            ratio,
                            value,
                        })
                        .collect(),
                })
                .collect()
        };
        let engine: Vec<Group> = self
            .engine
            .as_ref()
            .map(|e| groups(e.chart_groups()))
            .unwrap_or_default();
        let peers: Vec<Group> = self
            .peers
            .as_ref()
            .map(|p| groups(p.chart_groups()))
            .unwrap_or_default();
        // One colour per subject name, the same in every panel.
        let mut names: Vec<String> = Vec::new();
        for b in storage
            .iter()
            .chain(&engine)
            .chain(&peers)
            .flat_map(|g| &g.bars)
        {
            if !names.contains(&b.name) {
                names.push(b.name.clone());
            }
        }
        let (left, width) = (230.0, 560.0);
        let legend_rows = names.len().div_ceil(6).max(1) as f64;
        let mut out = String::new();
        let mut body = String::new();
        let mut y = 70.0 + legend_rows * 18.0;
        if !self.subjects.is_empty() {
            y = panel(
                &mut body,
                y,
                "Storage: cost relative to the floor (1× = pwrite + fdatasync)",
                &storage,
                &names,
            );
        }
        if !engine.is_empty() {
            y = panel(
                &mut body,
                y,
                "Engine: cost relative to the floor (chain), the ideal (timers) or the best durable backend",
                &engine,
                &names,
            );
        }
        if !peers.is_empty() {
            y = panel(
                &mut body,
                y,
                "Engine peers: cost relative to Fusee on the file backend (1×)",
                &peers,
                &names,
            );
        }
        let height = y + 10.0;
        let _ = writeln!(
            out,
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height:.0}" viewBox="0 0 {w} {height:.0}" font-family="sans-serif" font-size="12">"##,
            w = left + width + 90.0
        );
        let _ = writeln!(
            out,
            r##"<rect width="100%" height="100%" fill="white"/><text x="10" y="22" font-size="15" font-weight="bold">Fusee: cost relative to a reference (log scale; above 1× = worse)</text>"##
        );
        let _ = writeln!(
            out,
            r##"<text x="10" y="40" fill="#555">{}</text><text x="10" y="56" fill="#555">{}</text>"##,
            xml(&format!(
                "{} · {} · {}",
                self.date, self.machine.cpu, self.machine.filesystem
            )),
            xml(&self.command)
        );
        for (i, name) in names.iter().enumerate() {
            let lx = 10.0 + (i % 6) as f64 * 120.0;
            let ly = 70.0 + (i / 6) as f64 * 18.0;
            let _ = writeln!(
                out,
                r##"<rect x="{lx}" y="{ly}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{}</text>"##,
                PALETTE[i % PALETTE.len()],
                lx + 16.0,
                ly + 10.0,
                xml(name)
            );
        }
        out.push_str(&body);
        let _ = writeln!(out, "</svg>");
        out
    }

    /// Writes [`FILES`] into `dir` (created if missing) and returns their
    /// paths.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).map_err(|e| BenchError::io("creating", dir, e))?;
        let mut paths = Vec::new();
        for (name, body) in FILES.iter().zip([self.csv(), self.markdown(), self.svg()]) {
            let path = dir.join(name);
            std::fs::write(&path, body).map_err(|e| BenchError::io("writing", &path, e))?;
            paths.push(path);
        }
        Ok(paths)
    }
}

/// Bar colours, one per subject name.
const PALETTE: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
];

/// One bar of the chart: a subject's ratio for one metric.
struct Bar {
    name: String,
    ratio: Option<f64>,
    /// The value with its unit, for the bar's tooltip.
    value: String,
}

/// One metric's bars.
struct Group {
    label: String,
    bars: Vec<Bar>,
}

/// Draws one panel of bar groups on a logarithmic axis of ratios, its
/// title at `top`; returns where the next panel may start. A subject's
/// colour is its place in `names`.
fn panel(out: &mut String, top: f64, title: &str, groups: &[Group], names: &[String]) -> f64 {
    let (left, width, bar_h, gap) = (230.0, 560.0, 14.0, 3.0);
    let all: Vec<f64> = groups
        .iter()
        .flat_map(|g| g.bars.iter().filter_map(|b| b.ratio))
        .collect();
    let lo = all
        .iter()
        .copied()
        .fold(1.0f64, f64::min)
        .log10()
        .floor()
        .clamp(-6.0, 0.0);
    let hi = all
        .iter()
        .copied()
        .fold(10.0f64, f64::max)
        .log10()
        .ceil()
        .clamp(1.0, 6.0);
    let bars = groups.iter().map(|g| g.bars.len()).max().unwrap_or(0);
    let group_h = 22.0 + bars as f64 * (bar_h + gap) + 8.0;
    let x = |r: f64| left + (r.log10().clamp(lo, hi) - lo) / (hi - lo) * width;
    let _ = writeln!(
        out,
        r##"<text x="10" y="{:.1}" font-size="13" font-weight="bold">{}</text>"##,
        top + 14.0,
        xml(title)
    );
    let top = top + 24.0;
    let axis_bottom = top + groups.len() as f64 * group_h;
    for d in (lo as i32)..=(hi as i32) {
        let gx = x(10f64.powi(d));
        let (stroke, w) = if d == 0 { ("#000", 1.5) } else { ("#ccc", 1.0) };
        let _ = writeln!(
            out,
            r##"<line x1="{gx:.1}" y1="{top}" x2="{gx:.1}" y2="{axis_bottom:.1}" stroke="{stroke}" stroke-width="{w}"/><text x="{gx:.1}" y="{:.1}" text-anchor="middle">{}×</text>"##,
            axis_bottom + 16.0,
            decade(d)
        );
    }
    for (g, group) in groups.iter().enumerate() {
        let gy = top + g as f64 * group_h;
        let _ = writeln!(
            out,
            r##"<text x="10" y="{:.1}" font-weight="bold">{}</text>"##,
            gy + 15.0,
            xml(&group.label)
        );
        for (i, b) in group.bars.iter().enumerate() {
            let y = gy + 22.0 + i as f64 * (bar_h + gap);
            let Some(r) = b.ratio else { continue };
            let colour = names.iter().position(|n| *n == b.name).unwrap_or(0);
            let (x0, x1) = (x(1.0), x(r));
            let (bx, bw) = if x1 >= x0 {
                (x0, x1 - x0)
            } else {
                (x1, x0 - x1)
            };
            let _ = writeln!(
                out,
                r##"<rect x="{bx:.1}" y="{y:.1}" width="{:.1}" height="{bar_h}" fill="{}"><title>{}: {} (×{})</title></rect><text x="{:.1}" y="{:.1}" font-size="10">{}×</text>"##,
                bw.max(1.0),
                PALETTE[colour % PALETTE.len()],
                xml(&b.name),
                xml(&b.value),
                sig3(r),
                x0.max(x1) + 4.0,
                y + bar_h - 3.0,
                sig3(r)
            );
        }
    }
    axis_bottom + 30.0
}

/// `10^d` as an axis label: `1000`, `1`, `0.01`, `1e-4`.
fn decade(d: i32) -> String {
    match d {
        0.. => format!("{}", 10u64.saturating_pow(d.unsigned_abs())),
        -3..0 => format!("{:.*}", d.unsigned_abs() as usize, 10f64.powi(d)),
        _ => format!("1e{d}"),
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::BatchBreakdown;

    #[test]
    fn three_significant_digits() {
        assert_eq!(sig3(12345.6), "12346");
        assert_eq!(sig3(123.4), "123");
        assert_eq!(sig3(12.34), "12.3");
        assert_eq!(sig3(1.234), "1.23");
        assert_eq!(sig3(0.01234), "0.0123");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(decade(2), "100");
        assert_eq!(decade(0), "1");
        assert_eq!(decade(-2), "0.01");
        assert_eq!(decade(-5), "1e-5");
    }

    /// A subject whose every figure is `scale` times the floor's cost.
    fn subject(name: &str, role: Role, durable: bool, scale: f64) -> SubjectResult {
        let values = Metric::per_subject()
            .into_iter()
            .map(|m| {
                let base = 100.0;
                (
                    m,
                    if m.higher_is_better() {
                        base / scale
                    } else {
                        base * scale
                    },
                )
            })
            .collect();
        // Appends, median flush and p99 all `scale` times the floor's.
        let batches = BATCH_SIZES
            .iter()
            .map(|&batch| BatchBreakdown {
                batch,
                flushes: 10,
                append_us: 2.0 * scale,
                flush_p50_us: 100.0 * scale,
                flush_p99_us: 300.0 * scale,
                tail_share: 0.25,
            })
            .collect();
        SubjectResult {
            name: name.into(),
            role,
            durable,
            flush_method: "test".into(),
            figures: Figures { values, batches },
        }
    }

    fn report(subjects: Vec<SubjectResult>) -> Report {
        Report {
            date: "2026-01-01 00:00:00 UTC".into(),
            command: "fusee-compare --quick".into(),
            machine: Machine::default(),
            plan: Plan::quick(),
            record_bytes: 100.0,
            frame_bytes: 1000.0,
            subjects,
            table_bytes_per_run: 40.0,
            seconds: 1.0,
            engine: None,
            peers: None,
        }
    }

    #[test]
    fn ratios_name_the_floor_and_the_best_durable_backend() {
        let r = report(vec![
            subject("floor", Role::Floor, true, 1.0),
            subject("memory", Role::Backend, false, 0.01),
            subject("slow", Role::Backend, true, 4.0),
            subject("fast", Role::Backend, true, 2.0),
            subject("sqlite", Role::Peer, true, 8.0),
        ]);
        for m in Metric::per_subject() {
            let slow = r.subjects[2].figures.get(m).unwrap_or(f64::NAN);
            let (floor, best) = r.ratios(m, slow);
            let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
            assert!(close(floor, 4.0), "{m:?}: {floor:?}");
            // The best durable backend is `fast`, not the memory backend.
            assert!(close(best, 2.0), "{m:?}: {best:?}");
        }
        let ranking: Vec<(&str, f64)> = r
            .ranking()
            .iter()
            .map(|(s, g)| (s.name.as_str(), *g))
            .collect();
        let names: Vec<&str> = ranking.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["fast", "slow", "sqlite"]);
        assert!((ranking[2].1 - 4.0).abs() < 1e-9, "{ranking:?}");
        assert!(
            r.verdict().starts_with("pick for this disk: fast"),
            "{}",
            r.verdict()
        );
        let md = r.markdown();
        assert!(md.contains("| 400 (×4.00 floor, ×2.00 best) |"), "{md}");
        // The breakdown: the floor's flushes plain, the others' with their
        // ratio to the floor's.
        assert!(
            md.contains("| 256 | floor | 2.00 | 100 | 300 | 25% |"),
            "{md}"
        );
        assert!(
            md.contains("| 256 | slow | 8.00 | 400 (×4.00) | 1200 (×4.00) | 25% |"),
            "{md}"
        );
        let text = r.text();
        assert!(
            text.contains("batch   16, fast: appends 4.00, flush p50 200 (×2.00), p99 600 (×2.00)"),
            "{text}"
        );
        assert!(
            md.contains("| 100 |"),
            "the floor's own cells carry no ratio:\n{md}"
        );
    }

    #[test]
    fn a_breakdown_without_a_floor_has_no_ratios() {
        let r = report(vec![subject("fast", Role::Backend, true, 2.0)]);
        let md = r.markdown();
        assert!(md.contains("| 1 | fast | 4.00 | 200 | 600 | 25% |"), "{md}");
    }

    #[test]
    fn without_durable_backends_there_is_no_pick() {
        let r = report(vec![
            subject("floor", Role::Floor, true, 1.0),
            subject("memory", Role::Backend, false, 0.01),
        ]);
        assert!(r.verdict().starts_with("no durable backend"));
        assert_eq!(r.best_backend(Metric::Recovery), None);
        let csv = r.csv();
        assert_eq!(csv.lines().count(), 1 + 8 * 2 + 1, "{csv}");
    }

    #[test]
    fn ratios_follow_the_metric_direction() {
        assert_eq!(Metric::AppendP50.cost_ratio(20.0, 10.0), Some(2.0));
        assert_eq!(Metric::Batch(16).cost_ratio(10.0, 20.0), Some(2.0));
        assert_eq!(Metric::Recovery.cost_ratio(0.0, 1.0), None);
    }
}
