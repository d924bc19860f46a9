//! `bench-all --pass bwd --suite bwd-modes`: each backward mode against a dense backward of the
//! same work, both timed by this process in one run, so a ratio carries no cross-run noise.
//!
//! Rows (H = 16, bf16, BSHD or packed; issue 39's measures):
//! - window: one sequence of S rows with a causal sliding window of W keys (`window_left = W`,
//!   `window_right = 0`) against a non-causal dense problem of `round(sqrt(pairs))` rows; the ratio
//!   is time per visible (query, key) pair;
//! - varlen: packed sequences (`cu_seqlens`) against the dense `[B, S]` problem of equal lengths, or
//!   mixed lengths against one dense sequence of `round(sqrt(Σ L²))` rows; time per visible pair;
//! - softcap (30) and ALiBi (slopes per head): the same shape with and without the modifier.
//!
//! Each problem gets fresh random Q, K, V and dO, O and LSE from the fastest forward that takes it,
//! and one backward with dQ, dK, dV poisoned (NaN) that must leave them written and finite before
//! it is timed (`backward::check_gradients`). That is not a gradient check: `verify --pass bwd`
//! is. Timing is the dense backward bench's event loop (`gpu::time_calls`) over rotated input sets.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use flashcore::{
    AlibiSlopes, AttentionBackward, AttentionProblem, DType, Device, KvStorage, Layout, Modes,
};
use serde::{Deserialize, Serialize};

use super::backward::check_gradients;
use super::backward_gpu::BackwardBuffers;
use super::gpu::{self, Buffers, LoopOptions, TableData, Timer};
use super::report::{DeviceSummary, Settings};
use super::Args;
use crate::inputs::random_tensor_parallel;

const HEADS: usize = 16;
const DTYPE: DType = DType::Bf16;
const SOFTCAP: f32 = 30.0;
/// The mixed-length varlen row's sequences (those of `modes_vs_dense.py` before this bench).
pub const MIXED_LENS: [usize; 8] = [4096, 512, 2048, 1024, 3072, 256, 1536, 2560];

/// One problem of the suite, as the bench builds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    pub head_dim: usize,
    /// Dense: `batch` sequences of `seq` rows; with `lens`, packed sequences of those lengths.
    pub batch: usize,
    pub seq: usize,
    pub lens: Option<Vec<usize>>,
    pub causal: bool,
    /// A causal sliding window of this many keys left of the diagonal.
    pub window: Option<usize>,
    pub softcap: bool,
    pub alibi: bool,
}

impl Spec {
    fn dense(head_dim: usize, batch: usize, seq: usize, causal: bool) -> Spec {
        Spec {
            head_dim,
            batch,
            seq,
            lens: None,
            causal,
            window: None,
            softcap: false,
            alibi: false,
        }
    }

    /// The sequences' lengths (each query sees keys of its own sequence; Sq = Sk).
    pub fn lengths(&self) -> Vec<usize> {
        self.lens
            .clone()
            .unwrap_or_else(|| vec![self.seq; self.batch])
    }

    /// Visible (query, key) pairs of one head, summed over the sequences.
    pub fn pairs(&self) -> f64 {
        self.lengths()
            .iter()
            .map(|&l| {
                let l = l as f64;
                match (self.window, self.causal) {
                    (Some(w), _) => window_pairs(l as usize, w) as f64,
                    (None, true) => l * (l + 1.0) / 2.0,
                    (None, false) => l * l,
                }
            })
            .sum()
    }

    /// A short name: `d128 b1 s16384 win1024`, `d64 varlen 8x2048 causal`.
    pub fn label(&self) -> String {
        let mut s = match &self.lens {
            Some(l) if l.iter().all(|&x| x == l[0]) => {
                format!("d{} varlen {}x{}", self.head_dim, l.len(), l[0])
            }
            Some(l) => format!("d{} varlen {} mixed", self.head_dim, l.len()),
            None => format!("d{} b{} s{}", self.head_dim, self.batch, self.seq),
        };
        if let Some(w) = self.window {
            let _ = write!(s, " win{w}");
        }
        if self.causal {
            s.push_str(" causal");
        }
        if self.softcap {
            s.push_str(" softcap");
        }
        if self.alibi {
            s.push_str(" alibi");
        }
        s
    }

    /// The problem (BSHD, or packed Q/K/V for varlen) and its host tables.
    pub fn problem(&self) -> (AttentionProblem, TableData) {
        let lens = self.lengths();
        let max = lens.iter().copied().max().unwrap_or(0);
        let mut modes = Modes {
            window_left: self.window,
            window_right: self.window.map(|_| 0),
            softcap: self.softcap.then_some(SOFTCAP),
            alibi: self.alibi.then_some(AlibiSlopes::PerHead),
            ..Modes::default()
        };
        let mut tables = TableData::default();
        if self.lens.is_some() {
            let total: usize = lens.iter().sum();
            modes.packed_q = Some(total);
            modes.kv = KvStorage::Packed { total_k: total };
            let mut cu = vec![0i32];
            for &l in &lens {
                cu.push(cu.last().unwrap() + l as i32);
            }
            tables.cu_seqlens_q = Some(cu.clone());
            tables.cu_seqlens_k = Some(cu);
        }
        if self.alibi {
            tables.alibi_slopes = Some(
                (0..HEADS)
                    .map(|h| 2f32.powf(-8.0 * (h + 1) as f32 / HEADS as f32))
                    .collect(),
            );
        }
        let p = AttentionProblem::new(lens.len(), HEADS, max, self.head_dim)
            .with_dtype(DTYPE)
            .with_causal(self.causal && self.window.is_none())
            .with_layout(Layout::Bshd)
            .with_modes(modes);
        (p, tables)
    }
}

/// Row i of one sequence with a causal window of `w` keys sees keys `max(0, i - w)..=i`.
pub fn window_pairs(s: usize, w: usize) -> usize {
    (0..s).map(|i| i.min(w) + 1).sum()
}

/// A row: the mode's problem and its dense twin, with the unit their times are divided by.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeRow {
    pub kind: String,
    pub mode: Spec,
    pub twin: Spec,
}

/// Every row of the suite, at head dims 64 and 128.
pub fn rows() -> Vec<ModeRow> {
    let mut out = Vec::new();
    for d in [64, 128] {
        for (s, w) in [(16384, 1024), (16384, 4096), (8192, 2048)] {
            let mode = Spec {
                window: Some(w),
                ..Spec::dense(d, 1, s, false)
            };
            let side = (mode.pairs().sqrt()).round() as usize;
            out.push(ModeRow {
                kind: "window".into(),
                mode,
                twin: Spec::dense(d, 1, side, false),
            });
        }
        for causal in [false, true] {
            out.push(ModeRow {
                kind: "varlen".into(),
                mode: Spec {
                    lens: Some(vec![2048; 8]),
                    ..Spec::dense(d, 8, 2048, causal)
                },
                twin: Spec::dense(d, 8, 2048, causal),
            });
            let side = (MIXED_LENS.iter().map(|&l| (l * l) as f64).sum::<f64>())
                .sqrt()
                .round() as usize;
            out.push(ModeRow {
                kind: "varlen".into(),
                mode: Spec {
                    lens: Some(MIXED_LENS.to_vec()),
                    ..Spec::dense(d, MIXED_LENS.len(), 4096, causal)
                },
                twin: Spec::dense(d, 1, side, causal),
            });
        }
        for (b, s) in [(4, 2048), (1, 16384)] {
            for causal in [false, true] {
                for softcap in [true, false] {
                    let twin = Spec::dense(d, b, s, causal);
                    out.push(ModeRow {
                        kind: if softcap { "softcap" } else { "alibi" }.into(),
                        mode: Spec {
                            softcap,
                            alibi: !softcap,
                            ..twin.clone()
                        },
                        twin,
                    });
                }
            }
        }
    }
    out
}

/// One timed problem: microseconds per call, or why there is none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Timed {
    Us { us: f64, check: String },
    Failed(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowResult {
    pub row: ModeRow,
    pub kernel: String,
    pub mode: Timed,
    pub twin: Timed,
}

impl RowResult {
    /// Time per visible pair with the mode over the twin's.
    pub fn ratio(&self) -> Option<f64> {
        match (&self.mode, &self.twin) {
            (Timed::Us { us: m, .. }, Timed::Us { us: t, .. }) => {
                Some((m / self.row.mode.pairs()) / (t / self.row.twin.pairs()))
            }
            _ => None,
        }
    }
}

/// What `bench-all --pass bwd --suite bwd-modes` measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BwdModesReport {
    pub device: DeviceSummary,
    pub settings: Settings,
    pub bwd_modes: Vec<RowResult>,
}

fn fmt_timed(t: &Timed) -> String {
    match t {
        Timed::Us { us, .. } => format!("{us:.1}"),
        Timed::Failed(m) => format!("✗ {}", m.chars().take(80).collect::<String>()),
    }
}

pub fn markdown(r: &BwdModesReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# bench-all --pass bwd --suite bwd-modes\n\n{} (cc {}), H = {HEADS}, bf16, backward alone, \
         µs per call (event loop, median of {} samples). Ratio: time per visible (query, key) pair \
         with the mode over the dense twin's, both timed in this run.\n\nCommand: `{}`\n",
        r.device.name, r.device.compute_capability, r.settings.repeats, r.settings.command
    );
    s.push_str("| kind | problem | dense twin | kernel | mode µs | twin µs | ratio |\n");
    s.push_str("|---|---|---|---|---:|---:|---:|\n");
    for x in &r.bwd_modes {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            x.row.kind,
            x.row.mode.label(),
            x.row.twin.label(),
            x.kernel,
            fmt_timed(&x.mode),
            fmt_timed(&x.twin),
            x.ratio().map_or("—".into(), |v| format!("{v:.3}"))
        );
    }
    s
}

pub fn write_and_print(r: &BwdModesReport, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let md = markdown(r);
    std::fs::write(dir.join("bench-bwd-modes.md"), &md)?;
    std::fs::write(
        dir.join("bench-bwd-modes.json"),
        serde_json::to_string_pretty(r)?,
    )?;
    println!("{md}");
    Ok(())
}

// ---- GPU ----

/// The problem's input sets (with its tables) and gradient buffers: fresh random Q, K, V and dO.
fn prepare(device: &Device, spec: &Spec, seed: u64, sets_cap: usize) -> Result<BackwardBuffers> {
    let (p, tables) = spec.problem();
    let inputs = super::modes_gpu::random_inputs(&p, seed);
    let bits = |a: &ndarray::ArrayD<f32>| super::modes_gpu::to_bits(&p, a);
    let (q, k, v) = (bits(&inputs.q), bits(&inputs.k), bits(&inputs.v));
    drop(inputs);
    let d_o: Vec<u16> = random_tensor_parallel(DTYPE, [1, 1, 1, p.o_len()], seed ^ 3)
        .iter()
        .map(|&x| DTYPE.to_bits(x))
        .collect();
    let set_bytes = 2 * 2 * (p.q_len() + p.k_len() + p.v_len() + p.o_len()) + 4 * p.lse_len();
    let sets = gpu::sets_on(device, set_bytes, set_bytes, sets_cap)?;
    let fwd = Buffers::new(device, &p, &q, &k, &v, sets)?.with_tables(device, &tables)?;
    BackwardBuffers::from_forward(device, fwd, &d_o)
}

/// One problem on one backward kernel: the forward on every set, the written-and-finite check of
/// O, LSE and the gradients, then the event loop.
fn time_spec(
    device: &Device,
    timer: &Timer,
    kernel: &dyn AttentionBackward,
    spec: &Spec,
    seed: u64,
    args: &Args,
    loop_opts: &LoopOptions,
) -> Result<Timed> {
    let (p, _) = spec.problem();
    if let Err(u) = kernel.supports_backward(&p, device.info()) {
        return Ok(Timed::Failed(format!("unsupported: {}", u.reason)));
    }
    let forward = flashcore::best_for(&p, device.info())
        .ok_or_else(|| anyhow!("no compiled-in forward takes {}", spec.label()))?;
    let mut bufs = prepare(device, spec, seed, gpu::max_sets(args.quick))?;
    bufs.fwd.poison(device, 0)?;
    for i in 0..bufs.sets() {
        bufs.fwd
            .forward(forward.as_ref(), device, i)
            .map_err(|e| anyhow!("forward {}: {e}", forward.name()))?;
    }
    let (o, lse) = bufs.fwd.read_output(device, 0)?;
    if let Err(m) = check_gradients(DTYPE, &[("O", &o)]) {
        return Ok(Timed::Failed(format!("forward {}: {m}", forward.name())));
    }
    if lse.iter().any(|x| x.is_nan()) {
        return Ok(Timed::Failed(format!(
            "forward {}: LSE not written",
            forward.name()
        )));
    }
    bufs.poison_grads(device, 0)?;
    if let Err(e) = bufs.backward(kernel, device, 0) {
        return Ok(Timed::Failed(format!("{e}")));
    }
    let [dq, dk, dv] = bufs.read_grads(device, 0)?;
    let check = match check_gradients(DTYPE, &[("dQ", &dq), ("dK", &dk), ("dV", &dv)]) {
        Ok(c) => c,
        Err(m) => return Ok(Timed::Failed(m)),
    };
    let sampled = gpu::time_calls(timer, device, loop_opts, || {
        bufs.step_next(None, kernel, device)
    })?;
    Ok(Timed::Us {
        us: sampled.us,
        check: format!("{check}; forward {}", forward.name()),
    })
}

pub fn run(args: &Args, out_dir: &Path) -> Result<()> {
    let mut all = rows();
    if !args.case_filter.is_empty() {
        all.retain(|r| {
            let key = format!("{} {}", r.kind, r.mode.label());
            args.case_filter.iter().any(|f| key.contains(f.as_str()))
        });
    }
    if all.is_empty() {
        bail!(
            "--case {:?} matches no bwd-modes row (e.g. 'd128 varlen', 'win1024', 'alibi')",
            args.case_filter
        );
    }
    let kernels = super::backward_gpu::select_backward_kernels(args.kernels.as_deref())?;
    let (device, info) = super::open_bench_device(args.device, out_dir)?;
    eprintln!(
        "bench-all --pass bwd --suite bwd-modes: {}); {} rows x {} backward kernels ({})",
        super::device_banner(&info),
        all.len(),
        kernels.len(),
        super::kernel_names(&kernels, |k| k.name())
    );
    let loop_opts = args.loop_options();
    let timer = Timer::new(&device)?;
    let mut report = BwdModesReport {
        device: DeviceSummary::of(&info),
        settings: args.settings("bshd / packed"),
        bwd_modes: vec![],
    };
    let json = out_dir.join("bench-bwd-modes.json");
    // A twin shared by several rows (the softcap and ALiBi rows') is timed once per kernel.
    let mut twins: HashMap<(String, String), Timed> = HashMap::new();
    let total = all.len() * kernels.len();
    for (n, row) in all.iter().enumerate() {
        for k in &kernels {
            let seed = args.seed ^ (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let timed = |spec: &Spec, seed: u64| {
                gpu::no_panic(k.name(), || {
                    time_spec(&device, &timer, k.as_ref(), spec, seed, args, &loop_opts)
                })
                .unwrap_or_else(|e| Timed::Failed(format!("{e:#}")))
            };
            let mode = timed(&row.mode, seed);
            let key = (k.name().to_string(), row.twin.label());
            let twin = match twins.get(&key) {
                Some(t) => t.clone(),
                None => {
                    let t = timed(&row.twin, seed ^ 0x5a5a);
                    twins.insert(key, t.clone());
                    t
                }
            };
            let result = RowResult {
                row: row.clone(),
                kernel: k.name().to_string(),
                mode,
                twin,
            };
            eprintln!(
                "[{}/{total}] {} {} on {}: {} / {} µs, ratio {}",
                report.bwd_modes.len() + 1,
                row.kind,
                row.mode.label(),
                k.name(),
                fmt_timed(&result.mode),
                fmt_timed(&result.twin),
                result.ratio().map_or("—".into(), |v| format!("{v:.3}"))
            );
            report.bwd_modes.push(result);
            let _ = std::fs::write(&json, serde_json::to_string_pretty(&report)?);
        }
    }
    write_and_print(&report, out_dir).context("writing the bwd-modes report")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_pairs_count_each_rows_keys() {
        // Rows 0..4 with w = 2 see 1, 2, 3, 3 keys.
        assert_eq!(window_pairs(4, 2), 9);
        let s = Spec {
            window: Some(2),
            ..Spec::dense(64, 1, 4, false)
        };
        assert_eq!(s.pairs(), 9.0);
        assert_eq!(Spec::dense(64, 2, 4, true).pairs(), 20.0);
        assert_eq!(Spec::dense(64, 2, 4, false).pairs(), 32.0);
    }

    #[test]
    fn twins_have_the_modes_work() {
        for r in rows() {
            let (m, t) = (r.mode.pairs(), r.twin.pairs());
            // Rounded square roots: within one row's worth of pairs.
            assert!(
                (m - t).abs() / m < 2e-3,
                "{} {m} vs {} {t}",
                r.mode.label(),
                r.twin.label()
            );
        }
    }

    #[test]
    fn problems_carry_their_modes_and_tables() {
        let rs = rows();
        let varlen = rs
            .iter()
            .find(|r| r.kind == "varlen" && r.mode.lens.as_ref().unwrap()[0] == 4096)
            .unwrap();
        let (p, t) = varlen.mode.problem();
        assert_eq!(p.modes.packed_q, Some(MIXED_LENS.iter().sum()));
        assert_eq!(p.seq_q, 4096);
        assert_eq!(
            t.cu_seqlens_q.as_ref().unwrap().last(),
            Some(&(MIXED_LENS.iter().sum::<usize>() as i32))
        );
        let win = rs.iter().find(|r| r.kind == "window").unwrap();
        let (p, _) = win.mode.problem();
        assert_eq!(
            (p.modes.window_left, p.modes.window_right, p.causal),
            (Some(1024), Some(0), false)
        );
        let alibi = rs.iter().find(|r| r.kind == "alibi").unwrap();
        let (p, t) = alibi.mode.problem();
        assert_eq!(p.modes.alibi, Some(AlibiSlopes::PerHead));
        assert_eq!(t.alibi_slopes.as_ref().map(|s| s.len()), Some(HEADS));
    }

    #[test]
    fn the_hopper_backward_plans_every_row_on_an_h200() {
        let h200 = crate::check_kernels::synthetic_device((9, 0), 232_448);
        let k = flashcore::backward_kernel("persistent-hopper").expect("compiled in");
        for r in rows() {
            for spec in [&r.mode, &r.twin] {
                let (p, _) = spec.problem();
                if let Err(u) = k.supports_backward(&p, &h200) {
                    panic!("{}: {}", spec.label(), u.reason);
                }
            }
        }
    }

    #[test]
    fn a_report_renders_ratios_and_failures_and_reads_back() {
        use crate::bench::report::{assert_contains_all, assert_json_round_trip, fixture_run};
        let (device, settings) = fixture_run(
            "bshd / packed",
            "xtask bench-all --pass bwd --suite bwd-modes",
        );
        let row = rows().into_iter().find(|r| r.kind == "softcap").unwrap();
        let report = BwdModesReport {
            device,
            settings,
            bwd_modes: vec![
                RowResult {
                    row: row.clone(),
                    kernel: "k".into(),
                    mode: Timed::Us {
                        us: 150.0,
                        check: "ok".into(),
                    },
                    twin: Timed::Us {
                        us: 100.0,
                        check: "ok".into(),
                    },
                },
                RowResult {
                    row,
                    kernel: "k".into(),
                    mode: Timed::Failed("unsupported: no softcap".into()),
                    twin: Timed::Us {
                        us: 100.0,
                        check: "ok".into(),
                    },
                },
            ],
        };
        assert_eq!(report.bwd_modes[0].ratio(), Some(1.5));
        assert_eq!(report.bwd_modes[1].ratio(), None);
        let md = markdown(&report);
        assert_contains_all(
            &md,
            &[
                "| 150.0 | 100.0 | 1.500 |",
                "✗ unsupported: no softcap",
                "| — |",
                "--suite bwd-modes",
            ],
        );
        let j = assert_json_round_trip(&report);
        assert!(
            j.contains("\"bwd_modes\""),
            "bench-all --from-json finds the report by this key"
        );
    }
}
