//! What `bench-all --suite fp8` measured, as plain data: the rows (B, H, S, D and causal), the
//! peer script's JSON read into them, the ratios the issue sets bars on, and the tables. Nothing
//! here touches a GPU.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::super::peers;
use super::super::report::{
    cell_within, fmt_us, peers_line, DeviceSummary, Outcome, PeerStatus, Row, Settings, Source,
    Timing,
};
use super::super::suite::{CausalSel, Shape};
use flashcore::DType;

pub const JSON: &str = "bench-fp8.json";
pub const MARKDOWN: &str = "bench-fp8.md";

/// The peer script's backend name for cuDNN's fp8 SDPA.
pub const CUDNN_BACKEND: &str = "cudnn_fp8";

/// B, H, S, D of the suite (the suites' shapes live in `suite.rs`).
pub use super::super::suite::FP8_ROWS as ROWS;

/// O's dtype (Q, K and V are e4m3), and the dtype of the bf16 comparison.
pub const O_DTYPE: DType = DType::Bf16;

/// The bars: what must hold (at least cuDNN's fp8, and 1.6x flashcore's own bf16) and
/// what is aimed at (1 PFLOP/s and 1.05x cuDNN's fp8).
pub const MUST_VS_CUDNN: f64 = 1.0;
pub const MUST_VS_BF16: f64 = 1.6;
pub const GOAL_TFLOPS: f64 = 1000.0;
pub const GOAL_VS_CUDNN: f64 = 1.05;

/// The rows timed: `explicit` (`--shape`) or [`ROWS`], each causal as `causal` selects, O in
/// [`O_DTYPE`], kept where their key contains one of `filters` (`--case`; all without any).
pub fn rows(
    explicit: &[(usize, usize, usize, usize)],
    causal: CausalSel,
    filters: &[String],
) -> Vec<Shape> {
    let bhsd = if explicit.is_empty() {
        ROWS.to_vec()
    } else {
        explicit.to_vec()
    };
    let all = super::super::suite::expand(&bhsd, causal, &[O_DTYPE]);
    super::super::suite::filter_by_key(all, filters)
}

/// One line of the peer script's GEMM reference: an n x n x n GEMM's rate, or why not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmLine {
    /// "scaled_mm_e4m3" (`torch._scaled_mm`, e4m3 in, bf16 out) or "matmul_bf16".
    pub name: String,
    pub n: usize,
    pub us: Option<f64>,
    pub tflops: Option<f64>,
    pub error: Option<String>,
}

/// One (B, H, S, D, causal): flashcore on e4m3 Q, K, V, flashcore on bf16, and cuDNN's fp8.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fp8Row {
    pub shape: Shape,
    /// flashcore's default kernel on e4m3 Q, K and V (O in [`O_DTYPE`]).
    pub e4m3: Row,
    /// flashcore's default kernel on the same shape in bf16 (the ladder's timing).
    pub bf16: Row,
    /// cuDNN's fp8 SDPA (None: no peer row, the header says why).
    pub cudnn: Option<Row>,
}

fn timing(r: Option<&Row>) -> Option<&Timing> {
    r.and_then(Row::timing)
}

impl Fp8Row {
    /// bf16 time / e4m3 time: above 1 means the e4m3 forward is faster.
    pub fn vs_bf16(&self) -> Option<f64> {
        Some(timing(Some(&self.bf16))?.us / timing(Some(&self.e4m3))?.us)
    }

    /// cuDNN fp8 time / flashcore e4m3 time.
    pub fn vs_cudnn(&self) -> Option<f64> {
        Some(timing(self.cudnn.as_ref())?.us / timing(Some(&self.e4m3))?.us)
    }

    /// Whether the musts hold (None: a number is missing).
    pub fn must(&self) -> Option<bool> {
        Some(self.vs_cudnn()? >= MUST_VS_CUDNN && self.vs_bf16()? >= MUST_VS_BF16)
    }

    /// Whether the goals hold (None: a number is missing).
    pub fn goal(&self) -> Option<bool> {
        let t = timing(Some(&self.e4m3))?;
        Some(t.tflops >= GOAL_TFLOPS && self.vs_cudnn()? >= GOAL_VS_CUDNN)
    }
}

/// The saved JSON of a run (`--from-json` re-renders it); `fp8` tells it from the other suites'.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fp8Report {
    pub device: DeviceSummary,
    pub settings: Settings,
    /// The e4m3 inputs' descale tables, in words.
    pub descales: String,
    pub peers: PeerStatus,
    pub gemm: Vec<GemmLine>,
    pub fp8: Vec<Fp8Row>,
}

/// The peer script's JSON (`bench/peers/cudnn_fp8.py`) for `shapes`: its status (the cudnn
/// frontend's and backend's versions beside torch's), one cuDNN row per shape (None where the
/// script gave none) and its GEMM lines.
pub fn parse_peers(
    v: &Value,
    shapes: &[Shape],
) -> anyhow::Result<(PeerStatus, Vec<Option<Row>>, Vec<GemmLine>)> {
    let mut status = peers::peer_status(v);
    if let PeerStatus::Ran { torch, .. } = &mut status {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        if let Some(fe) = s("cudnn_frontend") {
            torch.push_str(&format!(
                "; nvidia-cudnn-frontend {fe} (cuDNN backend {})",
                s("cudnn_backend").unwrap_or("?")
            ));
        }
    }
    let merged = peers::merge_peer_rows(v, shapes, peers::shape_of, Shape::flops)?;
    let mut cudnn: Vec<Option<Row>> = vec![None; shapes.len()];
    for (si, backend, outcome) in merged {
        if backend == CUDNN_BACKEND {
            cudnn[si] = Some(Row {
                shape: shapes[si],
                implementation: backend,
                source: Source::Peer,
                outcome,
            });
        }
    }
    let gemm = v
        .get("gemm")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|g| GemmLine {
            name: g
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string(),
            n: g.get("n").and_then(Value::as_u64).unwrap_or(0) as usize,
            us: g.get("us").and_then(Value::as_f64),
            tflops: g.get("tflops").and_then(Value::as_f64),
            error: g.get("error").and_then(Value::as_str).map(String::from),
        })
        .collect();
    Ok((status, cudnn, gemm))
}

impl Fp8Report {
    /// The e4m3 GEMM's rate (`torch._scaled_mm`), if it was measured.
    pub fn e4m3_gemm_tflops(&self) -> Option<f64> {
        self.gemm
            .iter()
            .find(|g| g.name == "scaled_mm_e4m3")
            .and_then(|g| g.tflops)
    }
}

fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map_or_else(|| "-".into(), f)
}

fn us_cell(r: Option<&Row>) -> String {
    opt(timing(r).map(|t| t.us), fmt_us)
}

fn tflops_cell(r: Option<&Row>) -> String {
    opt(timing(r).map(|t| t.tflops), |t| format!("{t:.1}"))
}

fn ratio(x: Option<f64>) -> String {
    opt(x, |r| format!("{r:.2}x"))
}

fn verdict(x: Option<bool>) -> &'static str {
    match x {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    }
}

/// "1,16,16384,128 causal": a row's name in the tables.
pub fn row_name(s: &Shape) -> String {
    format!("{}{}", s.bhsd(), if s.causal { " causal" } else { " full" })
}

/// What a row's notes cell says: the kernels, the checks, and each measurement that has no time.
fn notes(r: &Fp8Row) -> String {
    let mut parts = Vec::new();
    for (what, row) in [("e4m3", Some(&r.e4m3)), ("bf16", Some(&r.bf16))]
        .into_iter()
        .chain([("cuDNN fp8", r.cudnn.as_ref())])
    {
        let Some(row) = row else { continue };
        match &row.outcome {
            Outcome::Timed(t) => {
                let mut p = format!("{what}: {}", row.implementation);
                if let Some(c) = &t.check {
                    p.push_str(&format!(" {c}"));
                }
                if let Some(n) = &t.note {
                    p.push_str(&format!(" ({n})"));
                }
                parts.push(p);
            }
            other => parts.push(format!("{what}: {} {}", row.implementation, other.text())),
        }
    }
    cell_within(&parts.join("; "), 400)
}

/// The header: device, the reference GEMM rates, the peers, the method and the bars.
pub fn render_header(r: &Fp8Report) -> String {
    let mut out = r.device.header_line();
    if r.gemm.is_empty() {
        out.push_str("GEMM reference: not measured (--no-gemm, --no-peers or no peer run)\n\n");
    } else {
        let g: Vec<String> = r
            .gemm
            .iter()
            .map(|g| match (&g.error, g.us, g.tflops) {
                (None, Some(us), Some(t)) => {
                    format!("{} {}³ {t:.1} TFLOP/s ({} µs)", g.name, g.n, fmt_us(us))
                }
                (e, ..) => format!("{} {}³: {}", g.name, g.n, e.as_deref().unwrap_or("no time")),
            })
            .collect();
        out.push_str(&format!(
            "GEMM reference (torch, same run): {}\n\n",
            g.join("; ")
        ));
    }
    out.push_str(&peers_line(&r.peers));
    let s = &r.settings;
    out.push_str(&format!(
        "method: {} layout, Q/K/V e4m3 (O {O_DTYPE}, LSE f32) against the same shape in {O_DTYPE}; {}. CUDA events \
         around back-to-back calls, >= {} ms per sample, median of {} samples, inputs rotated over sets whose bytes \
         exceed 2x L2; flashcore checked against the oracle on {} sampled rows first (a wrong one gets no number). \
         TFLOP/s on 4·B·H·S²·D, halved for causal. Bars: must >= {MUST_VS_CUDNN:.2}x cuDNN fp8 and >= \
         {MUST_VS_BF16:.1}x flashcore bf16; goal >= {GOAL_TFLOPS:.0} TFLOP/s and >= {GOAL_VS_CUDNN:.2}x cuDNN fp8.{}\n\n",
        s.layout,
        r.descales,
        s.sample_ms,
        s.repeats,
        s.check_rows,
        if s.quick { " QUICK MODE: not for reporting." } else { "" }
    ));
    out.push_str(&format!("command: `{}`\n\n", s.command));
    out
}

/// The full table: every measurement and ratio of each row.
pub fn render_table(r: &Fp8Report) -> String {
    let gemm = r.e4m3_gemm_tflops();
    let mut md = String::from(
        "| B,H,S,D | causal | flashcore e4m3 µs | TFLOP/s | % e4m3 GEMM | flashcore bf16 µs | TFLOP/s | e4m3 / bf16 | cuDNN fp8 µs | TFLOP/s | vs cuDNN fp8 | must | goal | notes |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in &r.fp8 {
        let e = Some(&row.e4m3);
        let pct = match (timing(e), gemm) {
            (Some(t), Some(g)) => format!("{:.1} %", 100.0 * t.tflops / g),
            _ => "-".into(),
        };
        md += &format!(
            "| {} | {} | {} | {} | {pct} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            row.shape.bhsd(),
            super::super::report::yes_no(row.shape.causal),
            us_cell(e),
            tflops_cell(e),
            us_cell(Some(&row.bf16)),
            tflops_cell(Some(&row.bf16)),
            ratio(row.vs_bf16()),
            us_cell(row.cudnn.as_ref()),
            tflops_cell(row.cudnn.as_ref()),
            ratio(row.vs_cudnn()),
            verdict(row.must()),
            verdict(row.goal()),
            notes(row)
        );
    }
    md
}

/// The short table printed last: the numbers the bars are on.
pub fn render_short(r: &Fp8Report) -> String {
    let mut md = String::from(
        "| row | e4m3 TFLOP/s | vs bf16 | vs cuDNN fp8 | must | goal |\n|---|---|---|---|---|---|\n",
    );
    for row in &r.fp8 {
        md += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            row_name(&row.shape),
            tflops_cell(Some(&row.e4m3)),
            ratio(row.vs_bf16()),
            ratio(row.vs_cudnn()),
            verdict(row.must()),
            verdict(row.goal())
        );
    }
    md
}

/// The markdown file: header, full table, short table (the order stdout prints them in).
pub fn render_markdown(r: &Fp8Report) -> String {
    format!(
        "# flashcore bench-all --suite fp8\n\n{}## All measurements\n\n{}\n## Against the bars\n\n{}",
        render_header(r),
        render_table(r),
        render_short(r)
    )
}
