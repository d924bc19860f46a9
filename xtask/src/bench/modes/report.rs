//! What a mode suite measured (`bench-<suite>.json`), its comparisons evaluated, and the tables
//! every mode suite prints.

use serde::{Deserialize, Serialize};

use super::cases::{Case, Comparison, Measure, PeerCase, Side, Target, GRAPH_ALWAYS_US};
use crate::bench::decode::DecodeInfo;
use crate::bench::report::{
    cell_within, fmt_us, peers_line, DeviceSummary, Outcome, PeerStatus, Settings, Source, Timing,
};
use crate::bench::suite::Suite;

/// A case as the report keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseInfo {
    pub key: String,
    pub label: String,
    pub flops: f64,
}

impl From<&Case> for CaseInfo {
    fn from(c: &Case) -> Self {
        CaseInfo {
            key: c.key.clone(),
            label: c.label.clone(),
            flops: c.flops,
        }
    }
}

impl From<&PeerCase> for CaseInfo {
    fn from(c: &PeerCase) -> Self {
        CaseInfo {
            key: c.key.clone(),
            label: c.label.clone(),
            flops: c.flops,
        }
    }
}

/// One timed (or not) implementation on one case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeRow {
    pub case: String,
    pub implementation: String,
    pub source: Source,
    pub outcome: Outcome,
}

impl ModeRow {
    pub fn new(
        case: impl Into<String>,
        implementation: impl Into<String>,
        source: Source,
        outcome: Outcome,
    ) -> ModeRow {
        ModeRow {
            case: case.into(),
            implementation: implementation.into(),
            source,
            outcome,
        }
    }

    pub fn timing(&self) -> Option<&Timing> {
        match &self.outcome {
            Outcome::Timed(t) => Some(t),
            _ => None,
        }
    }
}

/// What a mode suite measured (`bench-<suite>.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeReport {
    pub suite: Suite,
    pub device: DeviceSummary,
    pub settings: Settings,
    pub peers: PeerStatus,
    pub notes: Vec<String>,
    pub cases: Vec<CaseInfo>,
    pub rows: Vec<ModeRow>,
    pub comparisons: Vec<Comparison>,
    /// The decode suite's rows, copy ceilings and anchors (`bench::decode`); absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<DecodeInfo>,
}

/// One evaluated comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluated {
    pub name: String,
    pub implementation: String,
    /// The peer a best-peer comparison took.
    pub peer: Option<String>,
    pub value: Option<f64>,
    pub target: Option<Target>,
    /// Why there is no value.
    pub missing: Option<String>,
}

impl ModeReport {
    /// Cases in report order, with the peer-only ones after the flashcore ones.
    pub fn case_keys(&self) -> Vec<String> {
        let mut v: Vec<String> = self.cases.iter().map(|c| c.key.clone()).collect();
        for r in &self.rows {
            if !v.contains(&r.case) {
                v.push(r.case.clone());
            }
        }
        v
    }

    fn side(&self, case: &str, side: Side, implementation: &str) -> Result<&ModeRow, String> {
        let rows = self.rows.iter().filter(|r| r.case == case);
        match side {
            Side::This => {
                let r = rows
                    .into_iter()
                    .find(|r| r.source == Source::Flashcore && r.implementation == implementation)
                    .ok_or_else(|| format!("{case}: no {implementation} row"))?;
                if r.timing().is_some() {
                    Ok(r)
                } else {
                    Err(format!("{case}: {}", r.outcome.text()))
                }
            }
            Side::BestPeer => rows
                .filter(|r| r.source != Source::Flashcore)
                .filter_map(|r| r.timing().map(|t| (r, t.us)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(r, _)| r)
                .ok_or_else(|| format!("{case}: no peer time")),
        }
    }

    /// Every comparison for every flashcore generation that has a row in one of its cases.
    pub fn evaluate(&self) -> Vec<Evaluated> {
        let mut impls: Vec<String> = Vec::new();
        for r in self.rows.iter().filter(|r| r.source == Source::Flashcore) {
            if !impls.contains(&r.implementation) {
                impls.push(r.implementation.clone());
            }
        }
        let mut out = Vec::new();
        for c in &self.comparisons {
            for imp in &impls {
                let this_cases = [&c.num, &c.den]
                    .into_iter()
                    .filter(|(_, s)| *s == Side::This)
                    .map(|(k, _)| k);
                let has_row = this_cases.clone().any(|k| {
                    self.rows.iter().any(|r| {
                        r.case == *k && r.source == Source::Flashcore && r.implementation == *imp
                    })
                });
                if !has_row {
                    continue;
                }
                let sides = self
                    .side(&c.num.0, c.num.1, imp)
                    .and_then(|n| Ok((n, self.side(&c.den.0, c.den.1, imp)?)));
                let peer = sides.as_ref().ok().and_then(|(n, d)| {
                    [n, d]
                        .into_iter()
                        .find(|r| r.source != Source::Flashcore)
                        .map(|r| r.implementation.clone())
                });
                let value = sides.map(|(n, d)| {
                    let (n, d) = (n.timing().unwrap(), d.timing().unwrap());
                    match c.measure {
                        Measure::Time => n.us / d.us,
                        Measure::Rate => n.tflops / d.tflops,
                    }
                });
                out.push(Evaluated {
                    name: c.name.clone(),
                    implementation: imp.clone(),
                    peer,
                    value: value.as_ref().ok().copied(),
                    target: c.target,
                    missing: value.err(),
                });
            }
        }
        out
    }
}

fn cell(s: &str) -> String {
    cell_within(s, 200)
}

/// The comparisons: one line per (comparison, generation), value against target.
pub fn render_comparisons(r: &ModeReport) -> String {
    let mut out = String::from("| comparison | implementation | value | target | met |\n");
    out.push_str("|---|---|---:|---|---|\n");
    for e in r.evaluate() {
        let (value, met) = match e.value {
            Some(v) => (
                format!("{v:.3}"),
                match e.target {
                    Some(t) if t.met(v) => "yes".to_string(),
                    Some(_) => "NO".to_string(),
                    None => "—".to_string(),
                },
            ),
            None => (
                "—".into(),
                format!("— ({})", e.missing.as_deref().unwrap_or("")),
            ),
        };
        out.push_str(&format!(
            "| {} | {} | {value} | {} | {} |\n",
            cell(&e.name),
            cell(&match &e.peer {
                Some(p) => format!("{} (peer: {p})", e.implementation),
                None => e.implementation.clone(),
            }),
            e.target.map_or("—".into(), |t| t.text()),
            cell(&met)
        ));
    }
    out
}

/// Every row: per case, the flashcore generations then the peers.
pub fn render_rows(r: &ModeReport) -> String {
    let mut out = String::from(
        "| case | implementation | method | µs | TFLOP/s (real FLOPs) | eager µs | check / note |\n",
    );
    out.push_str("|---|---|---|---:|---:|---:|---|\n");
    match &r.peers {
        PeerStatus::Missing { reason } => out.push_str(&format!(
            "| — | peers | — | — | — | — | no peer rows: {} |\n",
            cell(reason)
        )),
        PeerStatus::Off => {
            out.push_str("| — | peers | — | — | — | — | no peer rows: --no-peers |\n")
        }
        PeerStatus::Ran { .. } => {}
    }
    for key in r.case_keys() {
        let ours = r
            .rows
            .iter()
            .filter(|x| x.case == key && x.source == Source::Flashcore);
        let theirs = r
            .rows
            .iter()
            .filter(|x| x.case == key && x.source != Source::Flashcore);
        for row in ours.chain(theirs) {
            let lead = format!("| {} | {} |", cell(&key), cell(&row.implementation));
            match &row.outcome {
                Outcome::Timed(t) => {
                    let note: Vec<&str> =
                        t.check.iter().chain(&t.note).map(String::as_str).collect();
                    out.push_str(&format!(
                        "{lead} {} | {} | {:.1} | {} | {} |\n",
                        t.method.name(),
                        fmt_us(t.us),
                        t.tflops,
                        t.eager_us.map(fmt_us).unwrap_or_else(|| "—".into()),
                        cell(&note.join("; "))
                    ));
                }
                other => out.push_str(&format!(
                    "{lead} — | — | — | — | {} |\n",
                    cell(&other.text())
                )),
            }
        }
    }
    out
}

/// The cases: key, problem, real FLOPs.
pub fn render_cases(r: &ModeReport) -> String {
    let mut out = String::from("| case | problem | real GFLOP |\n|---|---|---:|\n");
    for c in &r.cases {
        out.push_str(&format!(
            "| {} | {} | {:.1} |\n",
            cell(&c.key),
            cell(&c.label),
            c.flops / 1e9
        ));
    }
    out
}

pub fn render_header(r: &ModeReport) -> String {
    let d = &r.device;
    let s = &r.settings;
    let mut out = d.header_line();
    out.push_str(&peers_line(&r.peers));
    out.push_str(&format!(
        "method: the dense bench's: CUDA events around back-to-back calls, >= {} ms per sample, median of {} samples, \
         inputs rotated over sets whose bytes exceed 2x L2; {} as CUDA-graph replays of >= {} calls. \
         Each flashcore row is checked against the oracle first (each sequence judged alone, on sampled rows; \
         check column: error ratio, 1.0 is the limit); a wrong one gets no number. TFLOP/s count only the pairs the masks let through.{}\n\n",
        s.sample_ms,
        s.repeats,
        if s.graph_threshold_us >= GRAPH_ALWAYS_US {
            "every call also".to_string()
        } else {
            format!("calls under {} µs also", s.graph_threshold_us)
        },
        s.graph_calls,
        if s.quick { " QUICK MODE: smoke numbers only." } else { "" }
    ));
    for n in &r.notes {
        out.push_str(&format!("- {n}\n"));
    }
    out.push_str(&format!("\ncommand: `{}`\n", s.command));
    out
}

pub fn suite_name(s: Suite) -> &'static str {
    match s {
        Suite::Mission => "mission",
        Suite::Ladder => "ladder",
        Suite::Full => "full",
        Suite::Varlen => "varlen",
        Suite::Paged => "paged",
        Suite::Window => "window",
        Suite::Decode => "decode",
        Suite::Cp => "cp",
        Suite::Fp8 => "fp8",
        Suite::BwdModes => "bwd-modes",
    }
}
