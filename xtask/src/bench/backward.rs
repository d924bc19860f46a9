//! `bench-all --pass bwd | fwdbwd` as plain data: the pass and its FLOP count, the report it
//! writes, the peers' backward rows (`torch_sdpa.py --backward`, and FA3's from `fa3_jax.py
//! --backward` merged in), the backward anchors (a labelled fallback for the peers and shapes the
//! run has no time of), the ratios and the markdown. Nothing here touches a GPU; `backward_gpu`
//! does the timing.

use std::path::Path;

use anyhow::{bail, Result};
use flashcore::DType;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::anchors::{
    backend_name, comment_lines, file_dtype, measurement_lines, read_anchor_files,
};
use super::peers::{backend_of, peer_status, rows_of, shape_of};
use super::report::{
    best_ours_in, best_peer_in, cell_within, fmt_us, peers_line, row_lead, rows_ours_first,
    shapes_of, yes_no, DeviceSummary, Outcome, PeerStatus, Row, Settings, Source, Timing,
};
use super::suite::Shape;

/// What `bench-all` times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pass {
    /// The forward (O, LSE).
    #[default]
    Fwd,
    /// The backward alone (dQ, dK, dV from Q, K, V, O, dO, LSE).
    Bwd,
    /// A forward then its backward, as one training step's attention.
    Fwdbwd,
}

impl Pass {
    pub fn name(self) -> &'static str {
        match self {
            Pass::Fwd => "fwd",
            Pass::Bwd => "bwd",
            Pass::Fwdbwd => "fwdbwd",
        }
    }

    /// FLOPs per call in units of the forward's (FlashAttention's convention: the backward is
    /// 2.5 forwards, five matmuls to the forward's two).
    pub fn flops_factor(self) -> f64 {
        match self {
            Pass::Fwd => 1.0,
            Pass::Bwd => 2.5,
            Pass::Fwdbwd => 3.5,
        }
    }

    /// FLOPs of one call at `shape`: the factor times 4·B·H·S²·D (halved for causal).
    pub fn flops(self, shape: &Shape) -> f64 {
        self.flops_factor() * shape.flops()
    }

    /// The JSON and markdown files' stem: `bench-bwd`, `bench-fwdbwd`.
    pub fn file_stem(self) -> String {
        format!("bench-{}", self.name())
    }
}

/// The anchors a backward report shows, and how they were measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnchorNote {
    /// Which files gave rows ("h100-backward-peers.txt (8 rows)"), or why there are none.
    pub note: String,
    /// The `#` lines of those files: the method of the earlier run.
    pub method: Vec<String>,
}

/// What `bench-all --pass bwd | fwdbwd` measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackwardReport {
    pub pass: Pass,
    pub device: DeviceSummary,
    pub settings: Settings,
    /// Which forward produced O and LSE (and, for fwdbwd, was timed before each backward).
    pub forward: String,
    pub peers: PeerStatus,
    pub anchors: AnchorNote,
    pub rows: Vec<Row>,
}

/// One line of a backward anchor file.
#[derive(Clone, Debug, PartialEq)]
pub struct BackwardAnchor {
    pub shape: Shape,
    /// The peer script's name ("sdpa_flash", "fa3-jax").
    pub backend: String,
    pub fwd_us: f64,
    pub bwd_us: f64,
}

/// Backward anchor lines, e.g.
/// `B=4 H=16 S=2048 D=64 causal=0 fa3-jax   fwd     234.5 us bwd     606.4 us  bwd  283.3 TFLOP/s`.
/// Lines without a `fwd N us` and a `bwd N us` (the forward anchor files) are not backward
/// anchors. The dtype is bf16 when the file name or a `#` line says so, else f16.
pub fn parse_backward_anchor_file(file: &str, text: &str) -> Vec<BackwardAnchor> {
    let dtype = file_dtype(file, text);
    let mut out = Vec::new();
    for w in measurement_lines(text) {
        let Some(shape) = w.dense_shape(dtype) else {
            continue;
        };
        let (Some(fwd_us), Some(bwd_us)) =
            (w.number_between("fwd", "us"), w.number_between("bwd", "us"))
        else {
            continue;
        };
        let Some(name) = w.after_causal(1) else {
            continue;
        };
        out.push(BackwardAnchor {
            shape,
            backend: backend_name(name, file),
            fwd_us,
            bwd_us,
        });
    }
    out
}

/// The backward anchors of every `*.txt` under `dir`, and the note on where they came from.
pub fn load_backward_anchors(dir: &Path) -> Result<(Vec<BackwardAnchor>, AnchorNote)> {
    let mut anchors = Vec::new();
    let mut used = Vec::new();
    let mut method = Vec::new();
    for f in read_anchor_files(dir, "the anchors directory")? {
        let found = parse_backward_anchor_file(&f.name, &f.text);
        if found.is_empty() {
            continue;
        }
        used.push(format!("{} ({} rows)", f.name, found.len()));
        method.extend(
            comment_lines(&f.text)
                .map(|l| format!("{}: {}", f.name, l.trim_start_matches('#').trim())),
        );
        anchors.extend(found);
    }
    let note = if used.is_empty() {
        format!("no backward anchors in {}", dir.display())
    } else {
        format!("{} in {}", used.join(", "), dir.display())
    };
    Ok((anchors, AnchorNote { note, method }))
}

/// Whether a live peer row named `live` times the backend an anchor names `anchored`: the same
/// name, or FA3 by either of its names (the anchors' "fa3-jax"; the live script's rows are
/// "fa3", or "fa3-jax" beside a torch "fa3" of flash_attn_interface).
pub fn same_peer(live: &str, anchored: &str) -> bool {
    live == anchored || (anchored == FA3_ANCHOR && live == "fa3")
}

/// The backend name of FA3 (flash-attn3-jax) in the backward anchor files.
pub const FA3_ANCHOR: &str = "fa3-jax";

/// "(anchor)" rows for the shapes in `wanted`: every anchored backend that has no timed row of
/// it in `live` at that shape ([`same_peer`]): a fallback where this run has no number of its
/// own (`--no-peers`, `--no-fa3`, a peer script that failed or refused the shape).
pub fn anchor_rows(
    anchors: &[BackwardAnchor],
    wanted: &[Shape],
    pass: Pass,
    live: &[Row],
) -> Vec<Row> {
    let mut rows = Vec::new();
    for shape in wanted {
        for a in anchors.iter().filter(|a| a.shape == *shape) {
            let timed_live = live.iter().any(|r| {
                r.shape == *shape
                    && r.source == Source::Peer
                    && same_peer(&r.implementation, &a.backend)
                    && r.timing().is_some()
            });
            let name = format!("{} (anchor)", a.backend);
            if timed_live
                || rows
                    .iter()
                    .any(|r: &Row| r.shape == *shape && r.implementation == name)
            {
                continue;
            }
            let us = match pass {
                Pass::Fwdbwd => a.fwd_us + a.bwd_us,
                _ => a.bwd_us,
            };
            let Some(mut t) = Timing::from_flops(pass.flops(shape), Some(us), None) else {
                continue;
            };
            t.note = Some(format!(
                "earlier run: fwd {} µs, bwd {} µs",
                fmt_us(a.fwd_us),
                fmt_us(a.bwd_us)
            ));
            rows.push(Row {
                shape: *shape,
                implementation: name,
                source: Source::Anchor,
                outcome: Outcome::Timed(t),
            });
        }
    }
    rows
}

/// The rows of `torch_sdpa.py --backward` (with `fa3_jax.py --backward`'s merged in, same
/// fields) for the shapes in `wanted`, timed as `pass` says (bwd: fwd + grad minus fwd;
/// fwdbwd: fwd + grad), and what the scripts say about themselves.
pub fn parse_backward_peers(
    v: &Value,
    wanted: &[Shape],
    pass: Pass,
) -> Result<(PeerStatus, Vec<Row>)> {
    if v.get("backward").and_then(Value::as_bool) != Some(true) {
        bail!("the peer JSON is not from torch_sdpa.py --backward (no \"backward\": true)");
    }
    let rows_json = rows_of(v)?;
    let mut rows = Vec::new();
    for r in rows_json {
        let Some(shape) = shape_of(r).filter(|s| wanted.contains(s)) else {
            continue;
        };
        let backend = backend_of(r);
        let num = |k: &str| r.get(k).and_then(Value::as_f64);
        let outcome = if let Some(e) = r.get("error").and_then(Value::as_str) {
            Outcome::Error { message: e.into() }
        } else if let Some(worst) =
            worst_grad_rel(r).filter(|&g| g.is_nan() || g > PEER_GRAD_REL_LIMIT)
        {
            // A backward whose gradients are wrong is no peer to beat, however fast.
            Outcome::Error {
                message: format!(
                    "gradients wrong: rel {worst:.1e} on head (0, 0) against the script's \
                     reference (limit {PEER_GRAD_REL_LIMIT:.0e}); its time is not counted \
                     (fwd+grad {} − fwd {} µs)",
                    num("fwdbwd_us").map_or("?".into(), fmt_us),
                    num("fwd_us").map_or("?".into(), fmt_us),
                ),
            }
        } else {
            let (fwd, fwdbwd) = (num("fwd_us"), num("fwdbwd_us"));
            let us = match pass {
                Pass::Fwdbwd => fwdbwd,
                _ => num("bwd_us"),
            };
            match Timing::from_flops(pass.flops(&shape), us, None) {
                Some(mut t) => {
                    t.calls = r.get("calls").and_then(Value::as_u64).unwrap_or(0);
                    t.repeats = num("repeats").unwrap_or(0.0) as usize;
                    t.sets = num("sets").unwrap_or(0.0) as usize;
                    t.check = peer_check(r);
                    let mut notes = Vec::new();
                    if pass == Pass::Bwd {
                        if let (Some(f), Some(fb)) = (fwd, fwdbwd) {
                            notes.push(format!("fwd+grad {} − fwd {} µs", fmt_us(fb), fmt_us(f)));
                        }
                    }
                    // The script's own remark on how it timed the row (FA3's: wall clock).
                    notes.extend(r.get("note").and_then(Value::as_str).map(String::from));
                    t.note = (!notes.is_empty()).then(|| notes.join("; "));
                    Outcome::Timed(t)
                }
                None => Outcome::Error {
                    message: format!(
                        "no positive time (fwd {:?} µs, fwd+grad {:?} µs)",
                        fwd, fwdbwd
                    ),
                },
            }
        };
        rows.push(Row {
            shape,
            implementation: backend,
            source: Source::Peer,
            outcome,
        });
    }
    Ok((peer_status(v), rows))
}

/// The largest relative gradient error a peer's row may report (its dQ, dK and dV on head (0, 0)
/// against float32 math: f16/bf16 backwards give a few 1e-4) and still be timed as a peer.
pub const PEER_GRAD_REL_LIMIT: f64 = 1e-2;

/// The worst of a peer row's `grad_rel` errors (NaN if any is not a number), if it has them.
fn worst_grad_rel(r: &Value) -> Option<f64> {
    let m = r.get("grad_rel").and_then(Value::as_object)?;
    Some(m.values().fold(f64::NEG_INFINITY, |w, x| match x.as_f64() {
        Some(x) if !w.is_nan() => w.max(x),
        _ => f64::NAN,
    }))
}

/// "rel 2.7e-4, grads rel ≤ 3.1e-3": the forward's and the worst gradient's error on head
/// (0, 0) against float64 math.
fn peer_check(r: &Value) -> Option<String> {
    let rel = r.get("rel").and_then(Value::as_f64);
    let grad = worst_grad_rel(r);
    let mut parts = Vec::new();
    if let Some(x) = rel {
        parts.push(format!("rel {x:.1e}"));
    }
    if let Some(g) = grad.filter(|g| g.is_finite()) {
        parts.push(format!("grads rel ≤ {g:.1e}"));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Whether every gradient element was written and is finite, and each gradient is not all
/// zero. The buffers are NaN before the first launch and the inputs finite, so a NaN is an
/// element never written (or one the kernel made). `grads`: (name, dtype bits).
pub fn check_gradients(
    dtype: DType,
    grads: &[(&str, &[u16])],
) -> std::result::Result<String, String> {
    let mut total = 0;
    for (name, bits) in grads {
        let (mut nan, mut inf, mut nonzero) = (0usize, 0usize, 0usize);
        let mut first_bad = None;
        for (i, &b) in bits.iter().enumerate() {
            let x = dtype.from_bits(b);
            if x.is_nan() {
                nan += 1;
            } else if x.is_infinite() {
                inf += 1;
            } else {
                nonzero += (x != 0.0) as usize;
                continue;
            }
            first_bad.get_or_insert(i);
        }
        if let Some(i) = first_bad {
            return Err(format!(
                "{name}: {nan} NaN (unwritten?) and {inf} infinite of {} elements, the first at flat index {i}",
                bits.len()
            ));
        }
        if nonzero == 0 && !bits.is_empty() {
            return Err(format!("{name}: all {} elements are zero", bits.len()));
        }
        total += bits.len();
    }
    Ok(format!("finite, all {total} written"))
}

/// Why a kernel is not run at a shape: its rate at an earlier shape (`rate`, FLOP/s) says that
/// the `MIN_CALLS` calls a shape takes at least (the check, the estimate, three samples) would
/// not fit in what is left of its `--max-seconds-per-kernel`.
pub fn predicted_skip(
    flops: f64,
    rate: Option<f64>,
    spent_s: f64,
    budget_s: f64,
) -> Option<String> {
    const MIN_CALLS: f64 = 5.0;
    let rate = rate.filter(|r| *r > 0.0)?;
    let per_call = flops / rate;
    let left = budget_s - spent_s;
    (MIN_CALLS * per_call > left).then(|| {
        format!(
            "one call would take ~{per_call:.1} s (at its {:.2} TFLOP/s of an earlier shape); \
             {MIN_CALLS} calls do not fit in the {:.0} s left of --max-seconds-per-kernel",
            rate / 1e12,
            left.max(0.0)
        )
    })
}

/// The names of the peers the ratio columns are against.
pub const FA2: &str = "sdpa_flash";
pub const CUDNN: &str = "sdpa_cudnn";

impl BackwardReport {
    /// Shapes in first-seen order.
    pub fn shapes(&self) -> Vec<Shape> {
        shapes_of(&self.rows)
    }

    /// A peer's time at `shape`: this run's, else its anchor's (the flag says which).
    pub fn peer_us(&self, shape: &Shape, backend: &str) -> Option<(f64, bool)> {
        let find = |name: &str, source: Source| {
            self.rows
                .iter()
                .find(|r| r.shape == *shape && r.source == source && r.implementation == name)
                .and_then(Row::timing)
                .map(|t| t.us)
        };
        find(backend, Source::Peer)
            .map(|us| (us, false))
            .or_else(|| find(&format!("{backend} (anchor)"), Source::Anchor).map(|us| (us, true)))
    }

    /// The fastest peer (this run's or an anchor) at `shape`.
    pub fn best_peer(&self, shape: &Shape) -> Option<(&Row, f64)> {
        best_peer_in(&self.rows, shape)
    }

    /// The fastest flashcore backward at `shape`.
    pub fn best_ours(&self, shape: &Shape) -> Option<(&Row, f64)> {
        best_ours_in(&self.rows, shape)
    }
}

/// "1.23×" (peer time / ours: above 1 is faster than the peer), "(anchor)" when the peer's
/// time is not from this run.
fn ratio(peer: Option<(f64, bool)>, ours_us: f64) -> String {
    match peer {
        Some((p, anchor)) => format!(
            "{:.2}×{}",
            p / ours_us,
            if anchor { " (anchor)" } else { "" }
        ),
        None => "—".into(),
    }
}

fn cell(s: &str) -> String {
    cell_within(s, 160)
}

/// One row per (shape, implementation): flashcore first, then the peers and anchors, with µs,
/// TFLOP/s and the speed against FA2, cuDNN and the best peer at that shape.
pub fn render_table(report: &BackwardReport) -> String {
    let mut out = String::from(
        "| B,H,S,D | dtype | causal | implementation | µs | TFLOP/s | vs FA2 | vs cuDNN | vs best peer | check / note |\n\
         |---|---|---|---|---:|---:|---:|---:|---:|---|\n",
    );
    match &report.peers {
        PeerStatus::Missing { reason } => out.push_str(&format!(
            "| — | — | — | peers | — | — | — | — | — | no peer rows from this run: {} |\n",
            cell(reason)
        )),
        PeerStatus::Off => out.push_str(
            "| — | — | — | peers | — | — | — | — | — | no peer rows from this run: --no-peers |\n",
        ),
        PeerStatus::Ran { .. } => {}
    }
    for shape in report.shapes() {
        let best = report.best_peer(&shape);
        for r in rows_ours_first(&report.rows, shape) {
            let lead = row_lead(&shape, r);
            match &r.outcome {
                Outcome::Timed(t) => {
                    let vs_best = match best {
                        Some((b, _)) if std::ptr::eq(b, r) => "1.00× (best)".to_string(),
                        Some((b, us)) => ratio(Some((us, b.source == Source::Anchor)), t.us),
                        None => "—".into(),
                    };
                    let note: Vec<&str> =
                        t.check.iter().chain(&t.note).map(String::as_str).collect();
                    out.push_str(&format!(
                        "{lead} {} | {:.1} | {} | {} | {vs_best} | {} |\n",
                        fmt_us(t.us),
                        t.tflops,
                        ratio(report.peer_us(&shape, FA2), t.us),
                        ratio(report.peer_us(&shape, CUDNN), t.us),
                        cell(&note.join("; "))
                    ));
                }
                other => {
                    let text = other.text();
                    out.push_str(&format!("{lead} — | — | — | — | — | {} |\n", cell(&text)));
                }
            }
        }
    }
    out
}

/// One line per shape: the best flashcore backward against FA2, cuDNN and the best peer.
pub fn render_summary(report: &BackwardReport) -> String {
    let mut out = String::from(
        "| B,H,S,D | dtype | causal | best flashcore | µs | TFLOP/s | FA2 µs | cuDNN µs | best peer | µs | vs FA2 | vs cuDNN | vs best peer |\n\
         |---|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|\n",
    );
    for shape in report.shapes() {
        let ours = report.best_ours(&shape);
        let fa2 = report.peer_us(&shape, FA2);
        let cudnn = report.peer_us(&shape, CUDNN);
        let peer = report.best_peer(&shape);
        let us_of = |p: Option<(f64, bool)>| match p {
            Some((us, true)) => format!("{} (anchor)", fmt_us(us)),
            Some((us, false)) => fmt_us(us),
            None => "—".into(),
        };
        let (ours_cells, ratios) = match ours {
            Some((r, us)) => (
                format!(
                    "{} | {} | {:.1}",
                    cell(&r.implementation),
                    fmt_us(us),
                    r.timing().map_or(0.0, |t| t.tflops)
                ),
                format!(
                    "{} | {} | {}",
                    ratio(fa2, us),
                    ratio(cudnn, us),
                    ratio(peer.map(|(p, pus)| (pus, p.source == Source::Anchor)), us)
                ),
            ),
            None => ("— | — | —".into(), "— | — | —".into()),
        };
        let peer_cells = match peer {
            Some((r, us)) => format!("{} | {}", cell(&r.implementation), fmt_us(us)),
            None => "— | —".into(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {ours_cells} | {} | {} | {peer_cells} | {ratios} |\n",
            shape.bhsd(),
            shape.dtype,
            yes_no(shape.causal),
            us_of(fa2),
            us_of(cudnn),
        ));
    }
    out
}

/// What was measured where and how.
pub fn render_header(report: &BackwardReport) -> String {
    let d = &report.device;
    let s = &report.settings;
    let mut out = d.header_line();
    out.push_str(&match report.pass {
        Pass::Fwdbwd => format!(
            "pass: forward then backward, one training step's attention; TFLOP/s count {}× the \
             forward's 4·B·H·S²·D (halved for causal). flashcore: the forward ({}) then each \
             backward kernel; peers: fwd + torch.autograd.grad(out, (q, k, v), dO), FA3 (JAX): \
             jax.grad of sum(O·dO), jitted, wall clock.\n\n",
            Pass::Fwdbwd.flops_factor(),
            report.forward
        ),
        _ => format!(
            "pass: backward alone (dQ, dK, dV from Q, K, V, O, dO and the forward's LSE); \
             TFLOP/s count {}× the forward's 4·B·H·S²·D (halved for causal), FlashAttention's \
             convention. flashcore: O and LSE from the forward ({}) before timing; peers: \
             (fwd + torch.autograd.grad(out, (q, k, v), dO)) − fwd, the medians of each; FA3 \
             (JAX): (jax.grad of sum(O·dO)) − flash_mha, both jitted, wall clock.\n\n",
            Pass::Bwd.flops_factor(),
            report.forward
        ),
    });
    out.push_str(&peers_line(&report.peers));
    out.push_str(&format!(
        "rows marked (anchor): from an earlier run on the same kind of device, not this run \
         ({}); ratios against them say (anchor).\n\n",
        report.anchors.note
    ));
    if !report.anchors.method.is_empty() {
        for l in &report.anchors.method {
            out.push_str(&format!("> {l}\n"));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "method: {} layout; CUDA events around back-to-back eager calls (no graph replays), \
         >= {} ms per sample, median of {} samples, inputs rotated over sets whose bytes exceed \
         2x L2 (the peers alike). Before timing, each forward output is judged by the oracle on \
         {} sampled rows and each backward's dQ, dK, dV (NaN before the first launch) must be \
         written, finite and not all zero: no full gradient check at bench sizes (`verify \
         --pass bwd` is the correctness gate). Ratios: peer µs / this row's µs, above 1.00× is \
         faster.{}\n\n",
        s.layout,
        s.sample_ms,
        s.repeats,
        s.check_rows,
        if s.quick {
            " QUICK MODE: smoke numbers only."
        } else {
            ""
        }
    ));
    out.push_str(&format!("command: `{}`\n", s.command));
    out
}

/// The markdown file: header, per-shape summary, full table.
pub fn render_markdown(report: &BackwardReport) -> String {
    format!(
        "# flashcore bench-all --pass {}\n\n{}\n## Best against the peers\n\n{}\n## All rows\n\n{}",
        report.pass.name(),
        render_header(report),
        render_summary(report),
        render_table(report)
    )
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::bench::peers::merge_fa3;
    use crate::bench::report::{fixture_run, Method};

    const ANCHORS: &str = "\
# Backward on an H100 80GB HBM3, fp16, inputs [B,H,S,D] (torch) / [B,S,H,D] (jax), random normal.
# TFLOP/s for backward counts 2.5x the forward FLOPs (4*B*H*S*S*D, halved for causal).
B=4 H=16 S=2048 D=64 causal=0 flash     fwd     239.2 us bwd     723.4 us  bwd  237.5 TFLOP/s
B=4 H=16 S=2048 D=64 causal=0 cudnn     fwd     157.5 us bwd     453.1 us  bwd  379.1 TFLOP/s
B=4 H=16 S=2048 D=64 causal=1 fa3-jax   fwd     141.7 us bwd     389.9 us  bwd  220.3 TFLOP/s
B=4 H=16 S=2048 D=64 causal=0 fa3-jax   fwd     234.5 us bwd     606.4 us  bwd  283.3 TFLOP/s
";

    fn shape(causal: bool) -> Shape {
        Shape {
            batch: 4,
            heads: 16,
            seq: 2048,
            head_dim: 64,
            causal,
            dtype: DType::F16,
        }
    }

    #[test]
    fn backward_flops_are_2_5_and_3_5_forwards() {
        let s = shape(false);
        let fwd = 4.0 * 4.0 * 16.0 * 2048.0 * 2048.0 * 64.0;
        assert_eq!(Pass::Fwd.flops(&s), fwd);
        assert_eq!(Pass::Bwd.flops(&s), 2.5 * fwd);
        assert_eq!(Pass::Fwdbwd.flops(&s), 3.5 * fwd);
        assert_eq!(Pass::Bwd.flops(&shape(true)), 2.5 * fwd / 2.0);
        // The anchor file's own TFLOP/s (723.4 us for FA2 at this shape): 237.5.
        let t = Timing::from_flops(Pass::Bwd.flops(&s), Some(723.4), None).unwrap();
        assert!((t.tflops - 237.5).abs() < 0.05, "{}", t.tflops);
        assert_eq!(Pass::Fwdbwd.file_stem(), "bench-fwdbwd");
    }

    #[test]
    fn backward_anchor_lines_parse() {
        let a = parse_backward_anchor_file("h100-backward-peers.txt", ANCHORS);
        assert_eq!(a.len(), 4);
        assert_eq!(
            a[0],
            BackwardAnchor {
                shape: shape(false),
                backend: "sdpa_flash".into(),
                fwd_us: 239.2,
                bwd_us: 723.4,
            }
        );
        assert_eq!(a[1].backend, "sdpa_cudnn");
        assert_eq!(
            (a[2].backend.as_str(), a[2].shape),
            ("fa3-jax", shape(true))
        );
        assert_eq!((a[3].fwd_us, a[3].bwd_us), (234.5, 606.4));
        // Forward anchor lines are not backward ones.
        let fwd =
            "B=4 H=16 S=2048 D=64 causal=0 cudnn          162.4 us    423.1 TFLOP/s rel=2.71e-04\n";
        assert!(parse_backward_anchor_file("h100-torch-sdpa-fp16.txt", fwd).is_empty());
        let bf16 = parse_backward_anchor_file("h100-backward-bf16.txt", ANCHORS);
        assert!(bf16.iter().all(|a| a.shape.dtype == DType::Bf16));
    }

    #[test]
    fn fa3_anchors_join_and_sdpa_anchors_only_fill_gaps() {
        let a = parse_backward_anchor_file("h100-backward-peers.txt", ANCHORS);
        let live = vec![Row {
            shape: shape(false),
            implementation: "sdpa_flash".into(),
            source: Source::Peer,
            outcome: Outcome::Timed(
                Timing::from_flops(Pass::Bwd.flops(&shape(false)), Some(700.0), None).unwrap(),
            ),
        }];
        let rows = anchor_rows(&a, &[shape(false)], Pass::Bwd, &live);
        let names: Vec<&str> = rows.iter().map(|r| r.implementation.as_str()).collect();
        assert_eq!(names, ["sdpa_cudnn (anchor)", "fa3-jax (anchor)"]);
        assert!(rows.iter().all(|r| r.source == Source::Anchor));
        assert_eq!(rows[1].timing().unwrap().us, 606.4);
        let fb = anchor_rows(&a, &[shape(false)], Pass::Fwdbwd, &live);
        let t = fb[1].timing().unwrap();
        assert!((t.us - (234.5 + 606.4)).abs() < 1e-9);
        assert_eq!(t.method, Method::Eager);
        assert!((t.tflops - Pass::Fwdbwd.flops(&shape(false)) / t.us / 1e6).abs() < 1e-9);
    }

    #[test]
    fn the_shared_backward_anchors_parse_if_present() {
        let dir = Path::new("/work/shared/anchors");
        if !dir.join("h100-backward-peers.txt").is_file() {
            return;
        }
        let (a, note) = load_backward_anchors(dir).unwrap();
        assert!(a.iter().any(|x| x.backend == "fa3-jax"), "{a:?}");
        assert!(a.iter().all(|x| x.bwd_us > 0.0 && x.fwd_us > 0.0));
        assert!(
            note.note.contains("h100-backward-peers.txt"),
            "{}",
            note.note
        );
        assert!(
            note.method.iter().any(|l| l.contains("2.5x")),
            "{:?}",
            note.method
        );
    }

    const PEERS: &str = r#"{"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "cudnn": "91900",
        "backward": true, "skipped": [{"backend": "fa3", "reason": "flash_attn_interface: ModuleNotFoundError"}],
        "rows": [
          {"batch": 4, "heads": 16, "heads_kv": 16, "seq": 2048, "seq_k": 2048, "head_dim": 64,
           "causal": false, "dtype": "f16", "backend": "sdpa_flash", "method": "eager",
           "fwd_us": 240.0, "fwdbwd_us": 960.0, "bwd_us": 720.0, "rel": 0.000272,
           "grad_rel": {"dq": 0.0021, "dk": 0.0031, "dv": 0.0012},
           "calls": 21, "repeats": 15, "sets": 2},
          {"batch": 4, "heads": 16, "heads_kv": 16, "seq": 2048, "seq_k": 2048, "head_dim": 64,
           "causal": false, "dtype": "f16", "backend": "sdpa_cudnn", "method": "eager",
           "fwd_us": 160.0, "fwdbwd_us": 610.0, "bwd_us": 450.0, "rel": 0.000271,
           "grad_rel": {"dq": 0.002, "dk": 0.002, "dv": 0.001},
           "calls": 33, "repeats": 15, "sets": 2},
          {"batch": 4, "heads": 16, "heads_kv": 16, "seq": 2048, "seq_k": 2048, "head_dim": 64,
           "causal": false, "dtype": "f16", "backend": "sdpa_efficient",
           "error": "RuntimeError: No available kernel"},
          {"batch": 1, "heads": 8, "heads_kv": 8, "seq": 512, "seq_k": 512, "head_dim": 64,
           "causal": false, "dtype": "f16", "backend": "sdpa_flash", "method": "eager",
           "fwd_us": 20.0, "fwdbwd_us": 60.0, "bwd_us": 40.0}
        ]}"#;

    #[test]
    fn peer_backward_rows_parse_for_both_passes() {
        let v: Value = serde_json::from_str(PEERS).unwrap();
        let (status, rows) = parse_backward_peers(&v, &[shape(false)], Pass::Bwd).unwrap();
        assert!(matches!(status, PeerStatus::Ran { ref skipped, .. } if skipped.len() == 1));
        assert_eq!(rows.len(), 3, "the 1,8,512,64 row is not wanted");
        let t = rows[0].timing().unwrap();
        assert_eq!((t.us, t.calls, t.sets), (720.0, 21, 2));
        assert!((t.tflops - Pass::Bwd.flops(&shape(false)) / 720.0 / 1e6).abs() < 1e-9);
        assert_eq!(t.check.as_deref(), Some("rel 2.7e-4, grads rel ≤ 3.1e-3"));
        assert_eq!(t.note.as_deref(), Some("fwd+grad 960.0 − fwd 240.0 µs"));
        assert!(
            matches!(&rows[2].outcome, Outcome::Error { message } if message.contains("No available"))
        );
        let (_, rows) = parse_backward_peers(&v, &[shape(false)], Pass::Fwdbwd).unwrap();
        let t = rows[1].timing().unwrap();
        assert_eq!(t.us, 610.0);
        assert!((t.tflops - Pass::Fwdbwd.flops(&shape(false)) / 610.0 / 1e6).abs() < 1e-9);
        assert!(t.note.is_none());
        // A forward run's JSON is not a backward one.
        let mut fwd = v.clone();
        fwd["backward"] = Value::Bool(false);
        let e = parse_backward_peers(&fwd, &[shape(false)], Pass::Bwd).unwrap_err();
        assert!(e.to_string().contains("--backward"), "{e}");
    }

    #[test]
    fn a_peer_with_wrong_gradients_is_an_error_row_not_a_time() {
        // FA3 through flash-attn3-jax 0.2.3, non-causal, on the H200 (2026-11-30): its
        // gradients were off by a relative 3.6e3 while its forward was right.
        let mut v: Value = serde_json::from_str(PEERS).unwrap();
        v["rows"][1]["grad_rel"] = serde_json::json!({"dq": 3622.7, "dk": 3681.5, "dv": 3575.6});
        v["rows"][0]["grad_rel"] = serde_json::json!({"dq": 1e-3, "dk": null, "dv": 1e-3});
        let (_, rows) = parse_backward_peers(&v, &[shape(false)], Pass::Bwd).unwrap();
        let message = |i: usize| match &rows[i].outcome {
            Outcome::Error { message } => message.clone(),
            o => panic!("row {i} timed: {o:?}"),
        };
        let m = message(1);
        assert!(m.contains("gradients wrong: rel 3.7e3"), "{m}");
        assert!(m.contains("fwd+grad 610.0 − fwd 160.0 µs"), "{m}");
        // A gradient error that is not a number cannot vouch for the row either.
        assert!(
            message(0).contains("gradients wrong: rel NaN"),
            "{}",
            message(0)
        );
        // A row without grad_rel (an older script) is still timed.
        v["rows"][1].as_object_mut().unwrap().remove("grad_rel");
        let (_, rows) = parse_backward_peers(&v, &[shape(false)], Pass::Bwd).unwrap();
        assert_eq!(rows[1].timing().map(|t| t.us), Some(450.0));
    }

    /// What `fa3_jax.py --backward` writes: one eager row per shape with fwd, fwd+bwd and bwd
    /// times, or an error row.
    const FA3_BWD: &str = r#"{"device": "NVIDIA H100 80GB HBM3", "jax": "0.11.2", "jaxlib": "0.11.2",
        "flash_attn3_jax": "0.2.3", "runtime": "jax", "l2_bytes": 52428800, "quick": false,
        "decode": false, "backward": true, "method": "...", "skipped": [], "complete": true,
        "rows": [
          {"batch": 4, "heads": 16, "heads_kv": 16, "seq": 2048, "seq_k": 2048, "head_dim": 64,
           "causal": false, "dtype": "f16", "backend": "fa3", "method": "eager",
           "fwd_us": 235.0, "fwdbwd_us": 835.0, "bwd_us": 600.0, "tflops": 286.3,
           "fwdbwd_tflops": 288.0, "rel": 0.000251,
           "grad_rel": {"dq": 0.0019, "dk": 0.0024, "dv": 0.0011},
           "calls": 24, "calls_fwd": 86, "repeats": 15, "sets": 2, "num_splits": 1,
           "note": "JAX wall clock around jitted calls (no CUDA events)"},
          {"batch": 4, "heads": 16, "heads_kv": 16, "seq": 2048, "seq_k": 2048, "head_dim": 64,
           "causal": true, "dtype": "f16", "backend": "fa3",
           "error": "XlaRuntimeError: INTERNAL: boom"},
          {"batch": 1, "heads": 8, "heads_kv": 8, "seq": 512, "seq_k": 512, "head_dim": 64,
           "causal": false, "dtype": "f16", "backend": "fa3", "method": "eager",
           "fwd_us": 20.0, "fwdbwd_us": 70.0, "bwd_us": 50.0}
        ]}"#;

    /// The torch script's and FA3's backward JSON, merged as a run merges them.
    fn merged_peers() -> Value {
        let torch: Value = serde_json::from_str(PEERS).unwrap();
        let fa3: Value = serde_json::from_str(FA3_BWD).unwrap();
        merge_fa3(Ok(torch), Ok(fa3)).unwrap()
    }

    #[test]
    fn fa3_backward_rows_parse_beside_the_torch_ones() {
        let v = merged_peers();
        let shapes = [shape(false), shape(true)];
        let (status, rows) = parse_backward_peers(&v, &shapes, Pass::Bwd).unwrap();
        let PeerStatus::Ran { torch, skipped, .. } = status else {
            panic!("{status:?}")
        };
        assert_eq!(
            torch,
            "2.11.0+cu130; JAX 0.11.2, flash_attn3_jax 0.2.3 (fa3)"
        );
        assert!(skipped.is_empty(), "{skipped:?}");
        let fa3: Vec<&Row> = rows.iter().filter(|r| r.implementation == "fa3").collect();
        assert_eq!(fa3.len(), 2, "the 1,8,512,64 row is not wanted");
        assert!(fa3.iter().all(|r| r.source == Source::Peer));
        let t = fa3[0].timing().unwrap();
        assert_eq!(fa3[0].shape, shape(false));
        assert_eq!((t.us, t.calls, t.repeats, t.sets), (600.0, 24, 15, 2));
        assert_eq!(t.method, Method::Eager);
        assert!((t.tflops - Pass::Bwd.flops(&shape(false)) / 600.0 / 1e6).abs() < 1e-9);
        assert_eq!(t.check.as_deref(), Some("rel 2.5e-4, grads rel ≤ 2.4e-3"));
        assert_eq!(
            t.note.as_deref(),
            Some("fwd+grad 835.0 − fwd 235.0 µs; JAX wall clock around jitted calls (no CUDA events)")
        );
        assert!(matches!(&fa3[1].outcome, Outcome::Error { message } if message.contains("boom")));
        // fwdbwd takes the fwd+bwd time.
        let (_, rows) = parse_backward_peers(&v, &shapes, Pass::Fwdbwd).unwrap();
        let t = rows
            .iter()
            .find(|r| r.implementation == "fa3")
            .and_then(Row::timing)
            .unwrap();
        assert_eq!(t.us, 835.0);
        assert!((t.tflops - Pass::Fwdbwd.flops(&shape(false)) / 835.0 / 1e6).abs() < 1e-9);
        assert_eq!(
            t.note.as_deref(),
            Some("JAX wall clock around jitted calls (no CUDA events)")
        );
    }

    #[test]
    fn fa3_anchors_fill_in_only_where_fa3_gave_no_time() {
        let a = parse_backward_anchor_file("h100-backward-peers.txt", ANCHORS);
        let shapes = [shape(false), shape(true)];
        let (_, live) = parse_backward_peers(&merged_peers(), &shapes, Pass::Bwd).unwrap();
        let rows = anchor_rows(&a, &shapes, Pass::Bwd, &live);
        let names: Vec<(&str, bool)> = rows
            .iter()
            .map(|r| (r.implementation.as_str(), r.shape.causal))
            .collect();
        // Non-causal: FA3 and both SDPA backends timed live, no anchor; causal: FA3's process
        // failed at that shape, its anchor stands in.
        assert_eq!(names, [("fa3-jax (anchor)", true)]);
        assert_eq!(rows[0].timing().unwrap().us, 389.9);
        // Beside a torch "fa3" (flash_attn_interface) the JAX rows are "fa3-jax": same rule.
        assert!(same_peer("fa3-jax", FA3_ANCHOR) && same_peer("fa3", FA3_ANCHOR));
        assert!(!same_peer("fa3", "sdpa_flash") && same_peer("sdpa_flash", "sdpa_flash"));
    }

    #[test]
    fn a_failed_or_forward_fa3_run_is_a_note_and_the_anchors_stand_in() {
        let torch: Value = serde_json::from_str(PEERS).unwrap();
        let shapes = [shape(false), shape(true)];
        let a = parse_backward_anchor_file("h100-backward-peers.txt", ANCHORS);
        // fa3_jax.py without --backward (forward rows): not mixed in as backward times.
        let mut fwd: Value = serde_json::from_str(FA3_BWD).unwrap();
        fwd["backward"] = Value::Bool(false);
        for (fa3, why) in [
            (Ok(fwd), "forward rows"),
            (Err("import jax failed: No module".into()), "No module"),
        ] {
            let v = merge_fa3(Ok(torch.clone()), fa3).unwrap();
            let (status, live) = parse_backward_peers(&v, &shapes, Pass::Bwd).unwrap();
            let PeerStatus::Ran { skipped, .. } = status else {
                panic!("{status:?}")
            };
            let fa3 = skipped.iter().find(|s| s.backend == "fa3").unwrap();
            assert!(fa3.reason.contains(why), "{}", fa3.reason);
            assert!(live.iter().all(|r| r.implementation != "fa3"));
            assert_eq!(live.len(), 3, "the torch rows stay");
            let anchors = anchor_rows(&a, &shapes, Pass::Bwd, &live);
            let fa3_anchors = anchors
                .iter()
                .filter(|r| r.implementation == "fa3-jax (anchor)")
                .count();
            assert_eq!(fa3_anchors, 2);
        }
        // Torch missing, FA3 alone: still a backward JSON.
        let fa3: Value = serde_json::from_str(FA3_BWD).unwrap();
        let v = merge_fa3(Err("no torch".into()), Ok(fa3)).unwrap();
        let (_, live) = parse_backward_peers(&v, &shapes, Pass::Bwd).unwrap();
        assert_eq!(live.len(), 2);
        assert_eq!(live[0].timing().unwrap().us, 600.0);
    }

    #[test]
    fn gradients_must_be_written_finite_and_not_all_zero() {
        let d = DType::F16;
        let ok: Vec<u16> = [0.5f32, -1.0, 0.0].iter().map(|&x| d.to_bits(x)).collect();
        let nan = flashcore::host::nan_bits(d);
        let holes = vec![ok[0], nan, nan];
        let zeros = vec![d.to_bits(0.0); 3];
        let inf = vec![ok[0], d.to_bits(f32::INFINITY), ok[1]];
        assert_eq!(
            check_gradients(d, &[("dQ", &ok), ("dK", &ok), ("dV", &ok)]).unwrap(),
            "finite, all 9 written"
        );
        let e = check_gradients(d, &[("dQ", &ok), ("dK", &holes)]).unwrap_err();
        assert!(e.starts_with("dK: 2 NaN") && e.ends_with("index 1"), "{e}");
        let e = check_gradients(d, &[("dV", &inf)]).unwrap_err();
        assert!(e.contains("1 infinite"), "{e}");
        let e = check_gradients(d, &[("dQ", &zeros)]).unwrap_err();
        assert!(e.contains("all 3 elements are zero"), "{e}");
        assert!(check_gradients(d, &[("dK", &[])]).is_ok());
    }

    #[test]
    fn a_slow_kernel_is_skipped_before_it_eats_the_budget() {
        // 1e12 FLOP/s measured earlier, 1e13 FLOPs: 10 s a call, 50 s at least.
        assert!(predicted_skip(1e13, Some(1e12), 0.0, 240.0).is_none());
        let why = predicted_skip(1e13, Some(1e12), 200.0, 240.0).unwrap();
        assert!(
            why.contains("~10.0 s") && why.contains("40 s left"),
            "{why}"
        );
        assert!(predicted_skip(1e13, None, 239.0, 240.0).is_none());
    }

    /// A backward report with flashcore rows of every kind, same-run peers (FA3 timed at one
    /// shape, an error at the other) and FA3's anchor where this run has no time of it.
    pub fn fixture() -> BackwardReport {
        let v = merged_peers();
        let shapes = [shape(false), shape(true)];
        let (peers, mut rows) = parse_backward_peers(&v, &shapes, Pass::Bwd).unwrap();
        let timed = |s: Shape, name: &str, us: f64, check: &str, note: &str| {
            let mut t = Timing::from_flops(Pass::Bwd.flops(&s), Some(us), None).unwrap();
            t.calls = 40;
            t.repeats = 15;
            t.sets = 2;
            t.check = Some(check.into());
            t.note = Some(note.into());
            Row {
                shape: s,
                implementation: name.into(),
                source: Source::Flashcore,
                outcome: Outcome::Timed(t),
            }
        };
        let mut ours = vec![
            timed(
                shape(false),
                "persistent-portable",
                650.0,
                "finite, all 25165824 written; forward ok 0.41 (512 rows)",
                "forward: persistent-hopper",
            ),
            Row {
                shape: shape(false),
                implementation: "scalar".into(),
                source: Source::Flashcore,
                outcome: Outcome::Skipped {
                    reason: "one call would take ~12.0 s".into(),
                },
            },
            timed(
                shape(true),
                "persistent-portable",
                400.0,
                "finite, all 25165824 written; forward ok 0.38 (512 rows)",
                "forward: persistent-hopper",
            ),
            Row {
                shape: shape(true),
                implementation: "scalar".into(),
                source: Source::Flashcore,
                outcome: Outcome::Wrong {
                    message: "dK: 12 NaN (unwritten?) and 0 infinite of 8388608 elements".into(),
                },
            },
        ];
        ours.append(&mut rows);
        let a = parse_backward_anchor_file("h100-backward-peers.txt", ANCHORS);
        let anchors = anchor_rows(&a, &shapes, Pass::Bwd, &ours);
        ours.extend(anchors);
        let (device, settings) =
            fixture_run("bhsd", "xtask bench-all --pass bwd --shape 4,16,2048,64");
        BackwardReport {
            pass: Pass::Bwd,
            device,
            settings,
            forward: "the fastest compiled-in forward that takes the problem".into(),
            peers,
            anchors: AnchorNote {
                note: "h100-backward-peers.txt (4 rows) in ../shared/anchors".into(),
                method: vec!["h100-backward-peers.txt: TFLOP/s for backward counts 2.5x".into()],
            },
            rows: ours,
        }
    }

    #[test]
    fn ratios_prefer_this_run_and_mark_anchors() {
        let r = fixture();
        let (s0, s1) = (shape(false), shape(true));
        assert_eq!(r.peer_us(&s0, FA2), Some((720.0, false)));
        assert_eq!(r.peer_us(&s0, CUDNN), Some((450.0, false)));
        // No live rows at the causal shape: only FA3's anchor.
        assert_eq!(r.peer_us(&s1, FA2), None);
        let (best, us) = r.best_peer(&s1).unwrap();
        assert_eq!(
            (best.implementation.as_str(), us),
            ("fa3-jax (anchor)", 389.9)
        );
        let (best, us) = r.best_peer(&s0).unwrap();
        assert_eq!((best.implementation.as_str(), us), ("sdpa_cudnn", 450.0));
        assert_eq!(r.best_ours(&s0).unwrap().1, 650.0);
        assert_eq!(ratio(Some((450.0, false)), 650.0), "0.69×");
        assert_eq!(ratio(Some((389.9, true)), 400.0), "0.97× (anchor)");
    }

    /// serde_json's default float parsing may differ from the written number in the last bit,
    /// so the saved report is compared by what it renders.
    #[test]
    fn backward_report_round_trips_through_json() {
        let r = fixture();
        let j = serde_json::to_string_pretty(&r).unwrap();
        assert!(j.contains("\"pass\": \"bwd\""), "{j}");
        let back = serde_json::from_str::<BackwardReport>(&j).unwrap();
        assert_eq!(render_markdown(&back), render_markdown(&r));
        assert_eq!(back.rows.len(), r.rows.len());
    }

    #[test]
    fn backward_table_layout() {
        insta::assert_snapshot!("bench_bwd_table", render_markdown(&fixture()));
    }
}
