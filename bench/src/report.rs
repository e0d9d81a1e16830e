//! What a run found: one row per comparison (with its target), free-form
//! detail per section, the printed table, BENCHMARKS.md and its charts.

use std::fmt::Write as _;
use std::path::Path;

use crate::Result;

/// What a row's target constrains.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// ours / baseline ≥ x
    RatioAtLeast(f64),
    /// ours / baseline ≤ x
    RatioAtMost(f64),
    /// ours ≤ x (in the row's unit)
    ValueAtMost(f64),
    /// ours ≥ x (in the row's unit)
    ValueAtLeast(f64),
}

impl Target {
    fn describe(&self) -> String {
        match self {
            Target::RatioAtLeast(x) => format!("≥ {x}×"),
            Target::RatioAtMost(x) => format!("≤ {x}×"),
            Target::ValueAtMost(x) => format!("≤ {x}"),
            Target::ValueAtLeast(x) => format!("≥ {x}"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Row {
    pub section: u8,
    pub what: String,
    pub ours: f64,
    /// The baseline, when the row compares against one.
    pub base: Option<f64>,
    pub unit: &'static str,
    pub target: Option<Target>,
    /// `/proc/loadavg` (1, 5, 15 min) when the row was measured.
    pub load: String,
    /// The server it was measured on (its label, e.g. `Redis 7.0.15`).
    pub server: String,
}

impl Row {
    pub fn ratio(&self) -> Option<f64> {
        self.base.filter(|b| *b > 0.0).map(|b| self.ours / b)
    }

    pub fn met(&self) -> Option<bool> {
        match self.target? {
            Target::RatioAtLeast(x) => self.ratio().map(|r| r >= x),
            Target::RatioAtMost(x) => self.ratio().map(|r| r <= x),
            Target::ValueAtMost(x) => Some(self.ours <= x),
            Target::ValueAtLeast(x) => Some(self.ours >= x),
        }
    }
}

/// Points of a curve: (seconds, milliseconds).
pub type Series = Vec<(f64, f64)>;

#[derive(Default, Clone)]
pub struct Report {
    pub rows: Vec<Row>,
    /// Markdown detail per section number, with the server's label.
    pub details: Vec<(u8, String, String)>,
    /// PING latency over time during mass expiry: (server, label, points
    /// (s, ms)).
    pub expiry_series: Vec<(String, String, Series)>,
    /// The server the rows and details that follow are measured on.
    pub server: String,
    /// The servers of the run, in order.
    pub servers: Vec<String>,
}

pub const SECTIONS: [(u8, &str); 13] = [
    (1, "Acquire on fresh keys"),
    (2, "Release"),
    (3, "Re-entrant acquire"),
    (4, "Memory per held lock"),
    (5, "Redlock clients on five masters"),
    (6, "Contention: 32 tasks on one key"),
    (7, "Scale: many live locks, mass expiry"),
    (8, "Do no harm: plain commands with and without the module"),
    (9, "Shared locks and semaphores"),
    (
        10,
        "Fenced writes: LOCK.FENCED vs HSET and the Lua fence script",
    ),
    (11, "Native anchors: the servers' own lock commands"),
    (
        12,
        "Node.js clients: redislock-native vs redlock and redis-semaphore",
    ),
    (13, "Against etcd: lock+unlock on a three-member cluster"),
];

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

impl Report {
    /// The rows, details and charts that follow belong to `label`.
    pub fn set_server(&mut self, label: &str) {
        self.server = label.to_string();
        if !self.servers.iter().any(|s| s == label) {
            self.servers.push(label.to_string());
        }
    }

    /// What was measured on one server only (for its table and charts).
    pub fn for_server(&self, label: &str) -> Report {
        Report {
            rows: self
                .rows
                .iter()
                .filter(|r| r.server == label)
                .cloned()
                .collect(),
            details: self
                .details
                .iter()
                .filter(|d| d.2 == label)
                .cloned()
                .collect(),
            expiry_series: self
                .expiry_series
                .iter()
                .filter(|e| e.0 == label)
                .cloned()
                .collect(),
            server: label.to_string(),
            servers: vec![label.to_string()],
        }
    }

    /// Adds a curve to the mass-expiry chart of the current server.
    pub fn expiry(&mut self, label: impl Into<String>, points: Series) {
        self.expiry_series
            .push((self.server.clone(), label.into(), points));
    }

    #[allow(clippy::too_many_arguments)]
    pub fn row(
        &mut self,
        section: u8,
        what: impl Into<String>,
        ours: f64,
        base: Option<f64>,
        unit: &'static str,
        target: Option<Target>,
    ) {
        let row = Row {
            section,
            what: what.into(),
            ours,
            base,
            unit,
            target,
            load: loadavg(),
            server: self.server.clone(),
        };
        println!("  {}", text_line(&row));
        self.rows.push(row);
    }

    pub fn detail(&mut self, section: u8, markdown: impl Into<String>) {
        self.details
            .push((section, markdown.into(), self.server.clone()));
    }

    /// The table printed at the end of a run.
    pub fn text_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<58} {:>12} {:>12} {:>8} {:>8} {:>5}  load avg",
            "comparison", "ours", "baseline", "ratio", "target", "met"
        );
        for server in &self.servers {
            let _ = writeln!(out, "-- {server}");
            for row in self.rows.iter().filter(|r| &r.server == server) {
                let _ = writeln!(out, "{}", text_line(row));
            }
        }
        out
    }
}

fn fmt_num(x: f64) -> String {
    if x.abs() >= 1000.0 {
        format!("{:.0}", x)
    } else if x.abs() >= 10.0 {
        format!("{:.1}", x)
    } else {
        format!("{:.2}", x)
    }
}

fn text_line(row: &Row) -> String {
    format!(
        "{:<58} {:>12} {:>12} {:>8} {:>8} {:>5}  {}",
        format!("{}. {} [{}]", row.section, row.what, row.unit),
        fmt_num(row.ours),
        row.base.map(fmt_num).unwrap_or_else(|| "-".into()),
        row.ratio()
            .map(|r| format!("{r:.2}×"))
            .unwrap_or_else(|| "-".into()),
        row.target
            .map(|t| t.describe())
            .unwrap_or_else(|| "-".into()),
        match row.met() {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        },
        row.load
    )
}

/// Everything BENCHMARKS.md states besides the results.
pub struct Context {
    pub mode: &'static str,
    pub machine: Vec<(String, String)>,
    pub versions: Vec<(String, String)>,
    pub commands: Vec<String>,
    pub started_load: String,
    pub finished_load: String,
    pub duration_s: f64,
    /// Per server (label): its ratio chart and its mass-expiry chart.
    pub charts: Vec<(String, String, Option<String>)>,
}

pub fn markdown(report: &Report, ctx: &Context, analysis: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(
        md,
        "Written by `make bench` ({} mode, {:.0} s). Every ratio compares figures measured in \
         the same run, on the same servers: the module's commands against what users run \
         today (`SET NX PX`, Lua compare-and-delete, Redisson's reentrant hash script), and \
         the `redis-lock-client` Redlock client against `rslock` and a hand-written ideal \
         script client. Rerun with `make bench` (`make bench QUICK=1` for a five-minute \
         check); the run starts and stops its own server processes on loopback \
         (`BENCH_SERVERS` picks the servers: `redis7 valkey8 redis8 valkey9`, all four by \
         default).\n",
        ctx.mode, ctx.duration_s
    );
    let _ = writeln!(md, "## Machine and versions\n");
    let _ = writeln!(md, "| | |\n|---|---|");
    for (k, v) in ctx.machine.iter().chain(ctx.versions.iter()) {
        let _ = writeln!(md, "| {k} | {v} |");
    }
    let _ = writeln!(
        md,
        "| load average (1/5/15 min) at start / end | {} / {} |\n",
        ctx.started_load, ctx.finished_load
    );
    let _ = writeln!(md, "## Results\n");
    let _ = writeln!(
        md,
        "One table per server, every section run on each in turn (the Redlock and etcd \
         sections on five servers of that kind). Ratio = ours / baseline (for memory and \
         stalls, lower is better); a row that needs a server feature (`DELEX`, `DELIFEQ`, \
         `SET … IFEQ`) is only in the tables of the servers that have it. The load average \
         is the one when the row was measured.\n"
    );
    for server in &report.servers {
        let part = report.for_server(server);
        let _ = writeln!(md, "### {server}\n");
        let _ = writeln!(
            md,
            "| # | comparison | unit | ours | baseline | ratio | target | met | load avg |"
        );
        let _ = writeln!(md, "|---|---|---|---:|---:|---:|---|---|---|");
        for row in &part.rows {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                row.section,
                row.what,
                row.unit,
                fmt_num(row.ours),
                row.base.map(fmt_num).unwrap_or_else(|| "–".into()),
                row.ratio()
                    .map(|r| format!("**{r:.2}×**"))
                    .unwrap_or_else(|| "–".into()),
                row.target
                    .map(|t| t.describe())
                    .unwrap_or_else(|| "(figure)".into()),
                match row.met() {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "–",
                },
                row.load
            );
        }
        for (_, failure, _) in part.details.iter().filter(|d| d.0 == 0) {
            let _ = writeln!(md, "\n{}", failure.trim_end());
        }
        if let Some((_, chart, _)) = ctx.charts.iter().find(|c| &c.0 == server) {
            let _ = writeln!(md, "\n![{server}: ratios against the targets]({chart})");
        }
        let _ = writeln!(md);
    }
    if !analysis.trim().is_empty() {
        let _ = writeln!(
            md,
            "## Targets not met, profiles, next steps\n\n{analysis}\n"
        );
    }
    let _ = writeln!(md, "## Method and details\n");
    for (number, title) in SECTIONS {
        let parts: Vec<&(u8, String, String)> = report
            .details
            .iter()
            .filter(|(s, _, _)| *s == number)
            .collect();
        if parts.is_empty() {
            continue;
        }
        let _ = writeln!(md, "### {number}. {title}\n");
        for (i, (_, detail, server)) in parts.iter().enumerate() {
            if report.servers.len() > 1 {
                let _ = writeln!(md, "**{server}.** {}\n", detail.trim_end());
            } else {
                let _ = writeln!(md, "{}\n", detail.trim_end());
            }
            // The chart once, after the server's last part of section 7.
            let last_of_server = !parts[i + 1..].iter().any(|p| &p.2 == server);
            if number == 7 && last_of_server {
                if let Some((_, _, Some(file))) = ctx.charts.iter().find(|c| &c.0 == server) {
                    let _ = writeln!(md, "![{server}: PING latency during mass expiry]({file})\n");
                }
            }
        }
    }
    let _ = writeln!(md, "## Exact commands\n");
    let _ = writeln!(
        md,
        "`$PORT` is the port of the run's module-loaded server (`<server> --port $PORT \
         --save '' --appendonly no --loadmodule target/release/libredis_lock.so`). Each \
         redis-benchmark run starts on an emptied server (`FLUSHALL SYNC`) after the \
         `redis-cli --pipe` loads listed for its section; keys `lock:%012d` match what \
         redis-benchmark's `__rand_int__` expands to.\n"
    );
    let _ = writeln!(md, "```sh");
    for c in &ctx.commands {
        let _ = writeln!(md, "{c}");
    }
    let _ = writeln!(md, "```");
    md
}

/// The ratio chart: one bar per row with a target on a ratio, the target
/// drawn as a tick; bars green when met, red when not.
pub fn ratio_chart(report: &Report, path: &Path) -> Result<()> {
    use plotters::prelude::*;

    let rows: Vec<(&Row, f64, f64)> = report
        .rows
        .iter()
        .filter_map(|row| match (row.target, row.ratio()) {
            (Some(Target::RatioAtLeast(t)), Some(r)) | (Some(Target::RatioAtMost(t)), Some(r)) => {
                Some((row, r, t))
            }
            _ => None,
        })
        .collect();
    let height = 110 + 34 * rows.len().max(1) as u32;
    let root = SVGBackend::new(path, (960, height)).into_drawing_area();
    root.fill(&WHITE)?;
    // The axis follows the targets; a bar far beyond them is cut at the
    // edge (its label still says how far).
    let max = rows.iter().map(|(_, _, t)| *t).fold(1.0_f64, f64::max) * 1.6;
    let n = rows.len().max(1) as i32;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "ours / baseline: green met, red not met; black line: target",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(360)
        .build_cartesian_2d(0.0..max, (0..n).into_segmented())?;
    let labels: Vec<String> = rows
        .iter()
        .map(|(row, _, _)| format!("{}. {}", row.section, row.what))
        .collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.len().max(1))
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(y) => usize::try_from(n - 1 - *y)
                .ok()
                .and_then(|i| labels.get(i))
                .cloned()
                .unwrap_or_default(),
            _ => String::new(),
        })
        .x_desc("ratio")
        .label_style(("sans-serif", 12))
        .draw()?;
    for (i, (row, ratio, target)) in rows.iter().enumerate() {
        let y = n - 1 - i as i32;
        let color = if row.met() == Some(true) {
            RGBColor(60, 160, 90)
        } else {
            RGBColor(210, 70, 60)
        };
        let mut bar = Rectangle::new(
            [
                (0.0, SegmentValue::Exact(y)),
                (ratio.min(max * 0.75), SegmentValue::Exact(y + 1)),
            ],
            color.filled(),
        );
        bar.set_margin(5, 5, 0, 0);
        chart.draw_series(std::iter::once(bar))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![
                (*target, SegmentValue::Exact(y)),
                (*target, SegmentValue::Exact(y + 1)),
            ],
            BLACK.stroke_width(2),
        )))?;
        let label = format!(
            "{ratio:.2}× (target {})",
            row.target.map(|t| t.describe()).unwrap_or_default()
        );
        chart.draw_series(std::iter::once(Text::new(
            label,
            (
                ratio.min(max * 0.75).max(*target) + max * 0.01,
                SegmentValue::CenterOf(y),
            ),
            ("sans-serif", 12).into_font(),
        )))?;
    }
    root.present()?;
    Ok(())
}

/// PING round-trip time over time during the mass-expiry test.
pub fn expiry_chart(report: &Report, path: &Path) -> Result<()> {
    use plotters::prelude::*;

    let root = SVGBackend::new(path, (900, 360)).into_drawing_area();
    root.fill(&WHITE)?;
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 1.0_f64);
    for (_, _, points) in &report.expiry_series {
        for (x, y) in points {
            x0 = x0.min(*x);
            x1 = x1.max(*x);
            y1 = y1.max(*y);
        }
    }
    if x0 >= x1 {
        x0 = 0.0;
        x1 = 1.0;
    }
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "PING round trip while 1M leases end at t = 0",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x0..x1, 0.0..y1 * 1.1)?;
    chart
        .configure_mesh()
        .x_desc("seconds from the common lease end")
        .y_desc("PING ms")
        .label_style(("sans-serif", 12))
        .draw()?;
    let colors = [RGBColor(40, 100, 200), RGBColor(210, 110, 40)];
    for (i, (_, label, points)) in report.expiry_series.iter().enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(1),
            ))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .draw_series(LineSeries::new(
            vec![(x0, 5.0), (x1, 5.0)],
            RGBColor(120, 120, 120).stroke_width(1),
        ))?
        .label("5 ms target")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RGBColor(120, 120, 120)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ours: f64, base: Option<f64>, target: Option<Target>) -> Row {
        Row {
            section: 1,
            what: "x".into(),
            ours,
            base,
            unit: "ops/s",
            target,
            load: "0 0 0".into(),
            server: "Redis 7".into(),
        }
    }

    #[test]
    fn targets_on_ratios_and_values() {
        assert_eq!(
            row(95.0, Some(100.0), Some(Target::RatioAtLeast(0.9))).met(),
            Some(true)
        );
        assert_eq!(
            row(85.0, Some(100.0), Some(Target::RatioAtLeast(0.9))).met(),
            Some(false)
        );
        assert_eq!(
            row(120.0, Some(100.0), Some(Target::RatioAtMost(1.1))).met(),
            Some(false)
        );
        assert_eq!(
            row(8.0, None, Some(Target::ValueAtMost(10.0))).met(),
            Some(true)
        );
        assert_eq!(row(8.0, None, None).met(), None);
        assert_eq!(
            row(8.0, Some(0.0), Some(Target::RatioAtLeast(1.0))).met(),
            None
        );
    }

    #[test]
    fn one_table_per_server_and_each_chart_once() {
        let mut report = Report::default();
        for server in ["Redis 7.0.15", "Valkey 9.1.2"] {
            report.set_server(server);
            report.row(1, "a", 95.0, Some(100.0), "ops/s", None);
            report.detail(7, "scale");
            report.detail(7, "expiry");
        }
        let ctx = Context {
            mode: "quick",
            machine: Vec::new(),
            versions: Vec::new(),
            commands: Vec::new(),
            started_load: String::new(),
            finished_load: String::new(),
            duration_s: 1.0,
            charts: vec![
                (
                    "Redis 7.0.15".into(),
                    "r7.svg".into(),
                    Some("e7.svg".into()),
                ),
                (
                    "Valkey 9.1.2".into(),
                    "v9.svg".into(),
                    Some("e9.svg".into()),
                ),
            ],
        };
        let md = markdown(&report, &ctx, "");
        assert!(md.contains("### Redis 7.0.15\n") && md.contains("### Valkey 9.1.2\n"));
        assert_eq!(md.matches("| 1 | a |").count(), 2);
        for file in ["r7.svg", "v9.svg", "e7.svg", "e9.svg"] {
            assert_eq!(md.matches(&format!("({file})")).count(), 1, "{file}");
        }
        assert_eq!(report.for_server("Valkey 9.1.2").rows.len(), 1);
    }

    #[test]
    fn charts_render_without_fonts() {
        let mut report = Report::default();
        report.row(
            1,
            "a",
            95.0,
            Some(100.0),
            "ops/s",
            Some(Target::RatioAtLeast(0.9)),
        );
        report.row(
            4,
            "b",
            120.0,
            Some(100.0),
            "B",
            Some(Target::RatioAtMost(1.1)),
        );
        report
            .expiry_series
            .push(("s".into(), "module".into(), vec![(-1.0, 0.1), (0.5, 3.0)]));
        let dir = std::env::temp_dir().join(format!("bench-chart-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        ratio_chart(&report, &dir.join("r.svg")).expect("ratio chart");
        expiry_chart(&report, &dir.join("e.svg")).expect("expiry chart");
        let svg = std::fs::read_to_string(dir.join("r.svg")).expect("svg");
        assert!(svg.contains("<svg") && svg.contains("1. a"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
