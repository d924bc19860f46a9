//! What `bench-all` measured, as plain data: the JSON it writes, the ratios against peers, and
//! the markdown tables. Nothing here touches a GPU, so all of it is tested on any machine.

use flashcore::DType;
use serde::{Deserialize, Serialize};

use super::suite::{dtype_name, Shape};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub device: DeviceSummary,
    pub settings: Settings,
    /// cuBLAS dense GEMM throughput per dtype, measured in the same run (the "% GEMM" column).
    pub gemm: Vec<GemmPeak>,
    /// Why there is no GEMM number, if there is none.
    pub gemm_note: Option<String>,
    pub peers: PeerStatus,
    pub rows: Vec<Row>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceSummary {
    pub name: String,
    pub compute_capability: String,
    pub sm_count: u32,
    pub l2_bytes: u64,
}

impl DeviceSummary {
    /// The first line of every report's header: name, compute capability, SMs and L2.
    pub fn header_line(&self) -> String {
        format!(
            "device: {} (cc {}, {} SMs, L2 {:.1} MiB)\n\n",
            self.name,
            self.compute_capability,
            self.sm_count,
            self.l2_bytes as f64 / (1 << 20) as f64
        )
    }

    pub fn of(info: &flashcore::DeviceInfo) -> Self {
        DeviceSummary {
            name: info.name.clone(),
            compute_capability: format!(
                "{}.{}",
                info.compute_capability.0, info.compute_capability.1
            ),
            sm_count: info.sm_count,
            l2_bytes: info.l2_bytes as u64,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub layout: String,
    pub repeats: usize,
    pub sample_ms: f64,
    pub graph_threshold_us: f64,
    pub graph_calls: usize,
    pub check_rows: usize,
    pub max_seconds_per_shape: f64,
    pub quick: bool,
    /// The command line, to rerun it.
    pub command: String,
}

/// The device and settings the saved-report fixtures of the tests share: an H100 and the
/// default loop, with `layout` and `command` as given.
#[cfg(test)]
pub(crate) fn fixture_run(layout: &str, command: &str) -> (DeviceSummary, Settings) {
    (
        DeviceSummary {
            name: "NVIDIA H100 80GB HBM3".into(),
            compute_capability: "9.0".into(),
            sm_count: 132,
            l2_bytes: 50 << 20,
        },
        Settings {
            layout: layout.into(),
            repeats: 15,
            sample_ms: 20.0,
            graph_threshold_us: 50.0,
            graph_calls: 50,
            check_rows: 512,
            max_seconds_per_shape: 2.0,
            quick: false,
            command: command.into(),
        },
    )
}

/// Test helper: `report` written as the saved reports are and read back is `report` again.
/// Returns the JSON, for tests that go on to read it as an older report.
#[cfg(test)]
pub(crate) fn assert_json_round_trip<T>(report: &T) -> String
where
    T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let j = serde_json::to_string_pretty(report).unwrap();
    assert_eq!(&serde_json::from_str::<T>(&j).unwrap(), report);
    j
}

/// Test helper: each of `parts` stands in the rendered `text` (which the failure prints).
#[cfg(test)]
pub(crate) fn assert_contains_all(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "no {part:?} in:\n{text}");
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmPeak {
    #[serde(with = "dtype_name")]
    pub dtype: DType,
    /// M = N = K.
    pub n: usize,
    pub us: f64,
    pub tflops: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerSkip {
    pub backend: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum PeerStatus {
    /// The peer script ran (or its JSON was loaded with --peers-json).
    Ran {
        device: String,
        torch: String,
        cudnn: Option<String>,
        skipped: Vec<PeerSkip>,
    },
    /// Peers were wanted but could not run: the reason goes into the table.
    Missing { reason: String },
    /// --no-peers.
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A flashcore generation.
    Flashcore,
    /// A peer timed in this run by bench/peers/torch_sdpa.py.
    Peer,
    /// A peer number from an earlier run on the same kind of device (--anchors).
    Anchor,
    /// The launch floor: a one-thread kernel timed as the calls at that shape are (graph
    /// replays), what any launch costs there. Neither ours nor a peer: never the best of either.
    Floor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Back-to-back launches from the host.
    Eager,
    /// Replays of a CUDA graph of many captured calls (no launch overhead).
    Graph,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Eager => "eager",
            Method::Graph => "graph",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Which time `us` is: graph when one was measured, else eager.
    pub method: Method,
    /// Median time of one call, microseconds.
    pub us: f64,
    pub tflops: f64,
    pub eager_us: Option<f64>,
    pub graph_us: Option<f64>,
    /// Calls per sample (eager) or per replay x replays (graph), of the reported method.
    pub calls: u64,
    pub repeats: usize,
    /// Input sets rotated call to call.
    pub sets: usize,
    /// Correctness: "ok 0.41" (oracle error ratio, 1.0 is the limit) or the peer's "rel 2.7e-4".
    pub check: Option<String>,
    /// Anything else worth a word (e.g. repeats capped by the time budget, graph failed).
    pub note: Option<String>,
}

impl Timing {
    /// The reported time is the graph time when there is one: it is the kernel without the
    /// host's launch overhead, for flashcore and peers alike.
    pub fn new(shape: &Shape, eager_us: Option<f64>, graph_us: Option<f64>) -> Option<Timing> {
        Timing::from_flops(shape.flops(), eager_us, graph_us)
    }

    /// [`Timing::new`] for a problem whose FLOPs are counted by the caller (the mode suites
    /// count only the (query, key) pairs a mask lets through).
    pub fn from_flops(flops: f64, eager_us: Option<f64>, graph_us: Option<f64>) -> Option<Timing> {
        let (method, us) = match (graph_us, eager_us) {
            (Some(g), _) if g > 0.0 => (Method::Graph, g),
            (_, Some(e)) if e > 0.0 => (Method::Eager, e),
            _ => return None,
        };
        Some(Timing {
            method,
            us,
            tflops: flops / us / 1e6,
            eager_us,
            graph_us,
            calls: 0,
            repeats: 0,
            sets: 0,
            check: None,
            note: None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Outcome {
    Timed(Timing),
    /// Failed the oracle check: no number.
    Wrong {
        message: String,
    },
    Unsupported {
        reason: String,
    },
    Error {
        message: String,
    },
    Skipped {
        reason: String,
    },
}

impl Outcome {
    /// The outcome of a call that failed: unsupported (with the kernel's reason) or an error.
    pub fn of_error(e: flashcore::Error) -> Outcome {
        match e {
            flashcore::Error::Unsupported(u) => Outcome::Unsupported { reason: u.reason },
            e => Outcome::Error {
                message: e.to_string(),
            },
        }
    }

    /// The outcome in a table's note column ("WRONG: …", "unsupported: …"; "timed" for a time).
    pub fn text(&self) -> String {
        match self {
            Outcome::Timed(_) => "timed".into(),
            Outcome::Wrong { message } => format!("WRONG: {message}"),
            Outcome::Unsupported { reason } => format!("unsupported: {reason}"),
            Outcome::Error { message } => format!("error: {message}"),
            Outcome::Skipped { reason } => format!("skipped: {reason}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub shape: Shape,
    pub implementation: String,
    pub source: Source,
    pub outcome: Outcome,
}

impl Row {
    /// A row of one of flashcore's kernels.
    pub fn flashcore(shape: &Shape, kernel: &str, outcome: Outcome) -> Row {
        Row {
            shape: *shape,
            implementation: kernel.to_string(),
            source: Source::Flashcore,
            outcome,
        }
    }

    pub fn timing(&self) -> Option<&Timing> {
        match &self.outcome {
            Outcome::Timed(t) => Some(t),
            _ => None,
        }
    }
    pub fn is_peer(&self) -> bool {
        matches!(self.source, Source::Peer | Source::Anchor)
    }
}

impl Report {
    /// Shapes in first-seen order.
    pub fn shapes(&self) -> Vec<Shape> {
        shapes_of(&self.rows)
    }

    pub fn gemm_tflops(&self, dtype: DType) -> Option<f64> {
        self.gemm
            .iter()
            .find(|g| g.dtype == dtype)
            .map(|g| g.tflops)
    }

    /// The fastest peer (live or anchor) at `shape`: (its row, its time in µs).
    pub fn best_peer(&self, shape: &Shape) -> Option<(&Row, f64)> {
        best_peer_in(&self.rows, shape)
    }

    /// The fastest flashcore generation at `shape`.
    pub fn best_ours(&self, shape: &Shape) -> Option<(&Row, f64)> {
        best_ours_in(&self.rows, shape)
    }

    /// best peer time / this row's time: above 1 means faster than every peer.
    pub fn vs_best_peer(&self, row: &Row) -> Option<f64> {
        if row.source == Source::Floor {
            return None;
        }
        let t = row.timing()?;
        let (_, best) = self.best_peer(&row.shape)?;
        Some(best / t.us)
    }

    pub fn percent_of_gemm(&self, row: &Row) -> Option<f64> {
        if row.source == Source::Floor {
            return None;
        }
        let t = row.timing()?;
        Some(100.0 * t.tflops / self.gemm_tflops(row.shape.dtype)?)
    }
}

fn best<'a>(rows: impl Iterator<Item = &'a Row>) -> Option<(&'a Row, f64)> {
    rows.filter_map(|r| r.timing().map(|t| (r, t.us)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

// Row queries shared by the forward and backward reports (both are lists of `Row`s).

/// Shapes in first-seen order.
pub(crate) fn shapes_of(rows: &[Row]) -> Vec<Shape> {
    let mut v: Vec<Shape> = Vec::new();
    for r in rows {
        if !v.contains(&r.shape) {
            v.push(r.shape);
        }
    }
    v
}

/// The fastest peer (this run's or an anchor) at `shape`: (its row, its time in µs).
pub(crate) fn best_peer_in<'a>(rows: &'a [Row], shape: &Shape) -> Option<(&'a Row, f64)> {
    best(rows.iter().filter(|r| r.shape == *shape && r.is_peer()))
}

/// The fastest flashcore kernel at `shape`.
pub(crate) fn best_ours_in<'a>(rows: &'a [Row], shape: &Shape) -> Option<(&'a Row, f64)> {
    best(
        rows.iter()
            .filter(|r| r.shape == *shape && r.source == Source::Flashcore),
    )
}

/// The rows of `shape`, flashcore's first, then the peers and anchors, each in report order.
pub(crate) fn rows_ours_first(rows: &[Row], shape: Shape) -> impl Iterator<Item = &Row> {
    let ours = move |r: &&Row| r.shape == shape && r.source == Source::Flashcore;
    let theirs = move |r: &&Row| r.shape == shape && r.source != Source::Flashcore;
    rows.iter().filter(ours).chain(rows.iter().filter(theirs))
}

/// A full table row's first four cells: shape, dtype, causal, implementation.
pub(crate) fn row_lead(shape: &Shape, r: &Row) -> String {
    format!(
        "| {} | {} | {} | {} |",
        shape.bhsd(),
        shape.dtype,
        yes_no(shape.causal),
        cell(&r.implementation)
    )
}

pub(crate) fn fmt_us(us: f64) -> String {
    if us < 100.0 {
        format!("{us:.2}")
    } else {
        format!("{us:.1}")
    }
}

fn cell(s: &str) -> String {
    cell_within(s, 160)
}

/// A markdown table cell: one line, `|` escaped, cut to `max_chars` with "...".
pub(crate) fn cell_within(s: &str, max_chars: usize) -> String {
    let one_line = s.replace(['\n', '\r'], " ").replace('|', "\\|");
    if one_line.chars().count() > max_chars {
        let cut: String = one_line.chars().take(max_chars - 3).collect();
        format!("{cut}...")
    } else {
        one_line
    }
}

pub(crate) fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The main table: one row per (shape, implementation), flashcore generations first, then the
/// peers, with µs, TFLOP/s, percent of the cuBLAS GEMM rate and the speed against the best
/// peer at that shape (best peer time / this time: above 1.00x is faster than every peer).
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    out.push_str(
        "| B,H,S,D | dtype | causal | implementation | method | µs | TFLOP/s | % GEMM | vs best peer | eager µs | check / note |\n",
    );
    out.push_str("|---|---|---|---|---|---:|---:|---:|---:|---:|---|\n");
    match &report.peers {
        PeerStatus::Missing { reason } => out.push_str(&format!(
            "| — | — | — | peers | — | — | — | — | — | — | no peer rows: {} |\n",
            cell(reason)
        )),
        PeerStatus::Off => out
            .push_str("| — | — | — | peers | — | — | — | — | — | — | no peer rows: --no-peers |\n"),
        PeerStatus::Ran { .. } => {}
    }
    for shape in report.shapes() {
        let best_peer_row = report.best_peer(&shape).map(|(r, _)| r as *const Row);
        for r in rows_ours_first(&report.rows, shape) {
            let lead = row_lead(&shape, r);
            match &r.outcome {
                Outcome::Timed(t) => {
                    let vs = match report.vs_best_peer(r) {
                        Some(x) if best_peer_row == Some(r as *const Row) => {
                            format!("{x:.2}× (best)")
                        }
                        Some(x) => format!("{x:.2}×"),
                        None => "—".into(),
                    };
                    let pct = report
                        .percent_of_gemm(r)
                        .map(|p| format!("{p:.1}%"))
                        .unwrap_or_else(|| "—".into());
                    let mut note: Vec<String> = Vec::new();
                    if let Some(c) = &t.check {
                        note.push(c.clone());
                    }
                    if let Some(n) = &t.note {
                        note.push(n.clone());
                    }
                    let tflops = if r.source == Source::Floor {
                        "—".to_string()
                    } else {
                        format!("{:.1}", t.tflops)
                    };
                    out.push_str(&format!(
                        "{lead} {} | {} | {tflops} | {pct} | {vs} | {} | {} |\n",
                        t.method.name(),
                        fmt_us(t.us),
                        t.eager_us.map(fmt_us).unwrap_or_else(|| "—".into()),
                        cell(&note.join("; "))
                    ));
                }
                other => {
                    let text = other.text();
                    out.push_str(&format!(
                        "{lead} — | — | — | — | — | — | {} |\n",
                        cell(&text)
                    ));
                }
            }
        }
    }
    out
}

/// One line per shape: the best flashcore generation against the best peer.
pub fn render_summary(report: &Report) -> String {
    let mut out = String::new();
    out.push_str("| B,H,S,D | dtype | causal | best flashcore | µs | TFLOP/s | best peer | µs | TFLOP/s | flashcore speed vs peer |\n");
    out.push_str("|---|---|---|---|---:|---:|---|---:|---:|---:|\n");
    for shape in report.shapes() {
        let ours = report.best_ours(&shape);
        let peer = report.best_peer(&shape);
        let side = |x: Option<(&Row, f64)>| match x {
            Some((r, us)) => format!(
                "{} | {} | {:.1}",
                cell(&r.implementation),
                fmt_us(us),
                r.timing().map(|t| t.tflops).unwrap_or(0.0)
            ),
            None => "— | — | —".into(),
        };
        let ratio = match (ours, peer) {
            (Some((_, o)), Some((_, p))) => format!("{:.2}×", p / o),
            _ => "—".into(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {ratio} |\n",
            shape.bhsd(),
            shape.dtype,
            yes_no(shape.causal),
            side(ours),
            side(peer)
        ));
    }
    out
}

/// What was measured where and how, as a few markdown lines.
pub fn render_header(report: &Report) -> String {
    let d = &report.device;
    let s = &report.settings;
    let mut out = d.header_line();
    if report.gemm.is_empty() {
        out.push_str(&format!(
            "cuBLAS GEMM peak: not measured ({})\n\n",
            report.gemm_note.as_deref().unwrap_or("no reason recorded")
        ));
    } else {
        let g: Vec<String> = report
            .gemm
            .iter()
            .map(|g| {
                format!(
                    "{} {}³ {:.1} TFLOP/s ({} µs)",
                    g.dtype,
                    g.n,
                    g.tflops,
                    fmt_us(g.us)
                )
            })
            .collect();
        out.push_str(&format!(
            "cuBLAS GEMM peak (f32 accumulate, random inputs, median): {}\n\n",
            g.join("; ")
        ));
    }
    out.push_str(&peers_line(&report.peers));
    if report.rows.iter().any(|r| r.source == Source::Anchor) {
        out.push_str(
            "rows marked (anchor): peer times from an earlier run on the same kind of device (--anchors), not this run\n\n",
        );
    }
    out.push_str(&format!(
        "method: {} layout; CUDA events around back-to-back calls, >= {} ms per sample, median of {} samples, \
         inputs rotated over sets whose bytes exceed 2x L2; calls under {} µs are also timed as replays of a \
         CUDA graph of >= {} calls and reported as such (eager µs beside). Each flashcore generation is checked \
         against the oracle on {} sampled rows first (check column: error ratio, 1.0 is the limit); a wrong one \
         gets no number.{}\n\n",
        s.layout,
        s.sample_ms,
        s.repeats,
        s.graph_threshold_us,
        s.graph_calls,
        s.check_rows,
        if s.quick { " QUICK MODE: smoke numbers only." } else { "" }
    ));
    out.push_str(&format!("command: `{}`\n", s.command));
    out
}

/// The "peers: ..." paragraph of a header.
pub fn peers_line(peers: &PeerStatus) -> String {
    let mut out = String::new();
    match peers {
        PeerStatus::Ran {
            device,
            torch,
            cudnn,
            skipped,
        } => {
            out.push_str(&format!(
                "peers: PyTorch {torch}, cuDNN {} on {device}",
                cudnn.as_deref().unwrap_or("none")
            ));
            if !skipped.is_empty() {
                let sk: Vec<String> = skipped
                    .iter()
                    .map(|s| format!("{} ({})", s.backend, s.reason))
                    .collect();
                out.push_str(&format!("; not timed: {}", sk.join("; ")));
            }
            out.push_str("\n\n");
        }
        PeerStatus::Missing { reason } => out.push_str(&format!("peers: none ({reason})\n\n")),
        PeerStatus::Off => out.push_str("peers: not run (--no-peers)\n\n"),
    }
    out
}

/// The markdown file: header, per-shape summary, full table (the table last, as on stdout).
pub fn render_markdown(report: &Report) -> String {
    format!(
        "# flashcore bench-all\n\n{}\n## Best against best\n\n{}\n## All rows\n\n{}",
        render_header(report),
        render_summary(report),
        render_table(report)
    )
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A fixed report: the mission shape with every kind of row, plus one bigger shape.
    pub fn fixture() -> Report {
        let mission = Shape {
            batch: 1,
            heads: 8,
            seq: 512,
            head_dim: 64,
            causal: false,
            dtype: DType::F16,
        };
        let big = Shape {
            batch: 4,
            heads: 16,
            seq: 2048,
            head_dim: 128,
            causal: true,
            dtype: DType::F16,
        };
        let timed = |shape: &Shape,
                     name: &str,
                     source: Source,
                     eager: f64,
                     graph: Option<f64>,
                     check: &str| {
            let mut t = Timing::new(shape, Some(eager), graph).unwrap();
            t.calls = 100;
            t.repeats = 15;
            t.sets = 3;
            t.check = Some(check.to_string());
            Row {
                shape: *shape,
                implementation: name.to_string(),
                source,
                outcome: Outcome::Timed(t),
            }
        };
        let rows = vec![
            timed(
                &mission,
                "persistent-hopper",
                Source::Flashcore,
                14.2,
                Some(8.9),
                "ok 0.41",
            ),
            Row {
                shape: mission,
                implementation: "vectorized".into(),
                source: Source::Flashcore,
                outcome: Outcome::Wrong {
                    message: "O: max err 0.5 > allowed 0.002 at O[0,1,2,3]".into(),
                },
            },
            timed(
                &mission,
                "scalar",
                Source::Flashcore,
                120.5,
                None,
                "ok 0.30",
            ),
            timed(
                &mission,
                "sdpa_flash",
                Source::Peer,
                26.6,
                Some(10.05),
                "rel 2.7e-4",
            ),
            timed(
                &mission,
                "sdpa_cudnn",
                Source::Peer,
                21.2,
                Some(9.37),
                "rel 2.7e-4",
            ),
            timed(
                &mission,
                "launch floor (one-thread kernel)",
                Source::Floor,
                2.1,
                Some(1.07),
                "",
            ),
            Row {
                shape: mission,
                implementation: "fa3".into(),
                source: Source::Peer,
                outcome: Outcome::Error {
                    message: "RuntimeError: no kernel image | for this device".into(),
                },
            },
            timed(
                &big,
                "persistent-hopper",
                Source::Flashcore,
                150.0,
                None,
                "ok 0.38",
            ),
            Row {
                shape: big,
                implementation: "scalar".into(),
                source: Source::Flashcore,
                outcome: Outcome::Skipped {
                    reason: "--max-seconds-per-kernel (120 s) used up".into(),
                },
            },
            Row {
                shape: big,
                implementation: "tile64".into(),
                source: Source::Flashcore,
                outcome: Outcome::Unsupported {
                    reason: "head_dim 128 is not in 64".into(),
                },
            },
            timed(&big, "sdpa_cudnn", Source::Peer, 161.6, None, "rel 2.5e-4"),
            timed(
                &big,
                "fa3-jax (anchor)",
                Source::Anchor,
                148.6,
                None,
                "rel 2.5e-4",
            ),
        ];
        let (device, settings) = fixture_run("bhsd", "xtask bench-all --suite ladder");
        Report {
            device,
            settings,
            gemm: vec![GemmPeak {
                dtype: DType::F16,
                n: 8192,
                us: 1432.0,
                tflops: 767.8,
            }],
            gemm_note: None,
            peers: PeerStatus::Ran {
                device: "NVIDIA H100 80GB HBM3".into(),
                torch: "2.11.0+cu130".into(),
                cudnn: Some("91900".into()),
                skipped: vec![],
            },
            rows,
        }
    }

    #[test]
    fn best_peer_takes_graph_times_and_anchors() {
        let r = fixture();
        let shapes = r.shapes();
        let (row, us) = r.best_peer(&shapes[0]).unwrap();
        assert_eq!((row.implementation.as_str(), us), ("sdpa_cudnn", 9.37));
        let (row, _) = r.best_peer(&shapes[1]).unwrap();
        assert_eq!(row.implementation, "fa3-jax (anchor)");
        let (ours, us) = r.best_ours(&shapes[0]).unwrap();
        assert_eq!(
            (ours.implementation.as_str(), us),
            ("persistent-hopper", 8.9)
        );
        let ratio = r.vs_best_peer(ours).unwrap();
        assert!((ratio - 9.37 / 8.9).abs() < 1e-12);
        let pct = r.percent_of_gemm(ours).unwrap();
        assert!((pct - 100.0 * ours.timing().unwrap().tflops / 767.8).abs() < 1e-9);
        // The launch floor (1.07 µs, faster than all) is neither ours nor a peer, and gets no
        // ratio, rate or share of the GEMM.
        let floor = r.rows.iter().find(|x| x.source == Source::Floor).unwrap();
        assert_eq!(floor.timing().unwrap().us, 1.07);
        assert_eq!(r.vs_best_peer(floor), None);
        assert_eq!(r.percent_of_gemm(floor), None);
        let table = render_table(&r);
        let line = table.lines().find(|l| l.contains("launch floor")).unwrap();
        assert!(line.contains("| graph | 1.07 | — | — | — |"), "{line}");
    }

    #[test]
    fn timing_prefers_the_graph_time() {
        let s = fixture().rows[0].shape;
        let t = Timing::new(&s, Some(20.0), Some(10.0)).unwrap();
        assert_eq!((t.method, t.us), (Method::Graph, 10.0));
        assert!((t.tflops - s.flops() / 10.0 / 1e6).abs() < 1e-9);
        let t = Timing::new(&s, Some(20.0), None).unwrap();
        assert_eq!((t.method, t.us), (Method::Eager, 20.0));
        assert!(Timing::new(&s, None, None).is_none());
    }

    #[test]
    fn report_round_trips_through_json() {
        assert_json_round_trip(&fixture());
    }

    #[test]
    fn missing_peers_get_one_line_in_the_table() {
        let mut r = fixture();
        r.rows.retain(|x| x.source == Source::Flashcore);
        r.peers = PeerStatus::Missing {
            reason: "python3 -c 'import torch' failed: ModuleNotFoundError".into(),
        };
        let t = render_table(&r);
        assert_eq!(t.matches("no peer rows").count(), 1, "{t}");
        assert!(!t.contains('×'), "no ratios without peers:\n{t}");
    }

    #[test]
    fn table_layout() {
        insta::assert_snapshot!("bench_table", render_markdown(&fixture()));
    }
}
