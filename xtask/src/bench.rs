//! `cargo xtask bench-all`: every compiled-in generation on a shape suite, checked by the oracle
//! and then timed with CUDA events, beside the peers (PyTorch SDPA backends, FA3 when present)
//! timed by `bench/peers/torch_sdpa.py` with the same method, FA3 through the flash-attn3-jax
//! wheel timed by `bench/peers/fa3_jax.py` in a second process (`--fa3-path`), and against the
//! device's cuBLAS GEMM rate. Writes JSON, markdown and an SVG plot under `target/bench/` (or `--out-dir`).
//!
//! This module holds the arguments and picks the suite; the dense suite is `dense`. Pure parts
//! (suites, report, tables, ratios, peer parsing, anchors, plot) live in the submodules `suite`,
//! `report`, `peers`, `anchors` and `plot` and are unit-tested without a GPU; `gpu` holds the
//! timing code. The inference-mode suites (`--suite varlen | paged | window`) build their own
//! problems and comparisons (`modes`) and run them with the same timing (`modes_gpu`), writing
//! `bench-<suite>.json` and `.md`. So does `--suite decode` (`decode`: decode, chunked-prefill
//! and speculative rows on contiguous and paged caches as graph replays, in GB/s of K/V against a
//! device-to-device copy of the same bytes and against the peers in the same run).
//! `--pass bwd | fwdbwd` times the backward kernels instead (`backward`, pure, and
//! `backward_gpu`), writing `bench-bwd.json` / `bench-fwdbwd.json` and `.md`.

pub mod anchors;
pub mod backward;
pub mod backward_gpu;
pub mod backward_modes;
pub mod bandwidth;
mod cp;
pub mod decode;
pub mod dense;
pub mod fp8;
pub mod gpu;
pub mod modes;
pub mod modes_gpu;
pub mod peers;
pub mod plot;
pub mod report;
pub mod suite;

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use flashcore::{Attention, Device};

use gpu::LoopOptions;
use report::{Report, Settings, Source};
use suite::{CausalSel, Suite};

/// Options of `cargo xtask bench-all`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Generations to time, comma-separated (default: every one compiled in); backward kernels
    /// with --pass bwd | fwdbwd.
    #[arg(long, value_delimiter = ',')]
    pub kernels: Option<Vec<String>>,
    /// Shape suite: mission = (1,8,512,64); ladder = six shapes up to S=16384; full = ladder + 3;
    /// varlen, paged, window: the inference-mode suites (bf16, Hq=32, Hkv=8, D=128; --shape,
    /// --causal, --dtypes and --layout do not apply to them); decode: eight decode / chunked
    /// prefill / speculative rows (bf16, D=128) on contiguous and paged (block 64) caches, as
    /// graph replays, in GB/s against a device-to-device copy and the peers (non-causal unless
    /// --causal on; --anchors DIR adds the decode anchors, ../shared/anchors if present);
    /// fp8: e4m3 Q/K/V at (1,16,16384,128) and (8,32,4096,128) against flashcore bf16 and
    /// cuDNN fp8 (--cudnn-fe-path), --shape / --causal / --case narrow it.
    #[arg(long, value_enum, default_value_t = Suite::Ladder)]
    pub suite: Suite,
    /// Explicit B,H,S,D shapes instead of the suite (repeatable: --shape 1,8,512,64 --shape ...).
    #[arg(long = "shape", value_parser = suite::parse_bhsd)]
    pub shapes: Vec<(usize, usize, usize, usize)>,
    #[arg(long, value_enum, default_value_t = CausalSel::Both)]
    pub causal: CausalSel,
    /// What is timed: fwd, the forward; bwd, the backward alone (dQ, dK, dV; TFLOP/s on 2.5x
    /// the forward's FLOPs; peers as fwd + autograd.grad minus fwd, FA3 as jax.grad minus fwd);
    /// fwdbwd, forward then backward (3.5x). bwd and fwdbwd write bench-<pass>.json and .md,
    /// and --kernels names backward kernels there.
    #[arg(long, value_enum, default_value_t = backward::Pass::Fwd)]
    pub pass: backward::Pass,
    /// --pass bwd | fwdbwd: the forward that makes O and LSE, and that fwdbwd times (default:
    /// the fastest compiled-in forward that takes the problem).
    #[arg(long)]
    pub fwd_kernel: Option<String>,
    /// Comma-separated dtypes.
    #[arg(long, value_delimiter = ',', default_value = "f16")]
    pub dtypes: Vec<String>,
    /// Memory layout of Q, K, V and O (bhsd: what the peers take, contiguous B,H,S,D).
    #[arg(long, default_value = "bhsd")]
    pub layout: String,
    /// Where the JSON, markdown, SVG and peer files go (default target/bench).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Timed samples per measurement (median reported).
    #[arg(long, default_value_t = 15)]
    pub repeats: usize,
    /// Length of one sample: back-to-back calls until it lasts this long.
    #[arg(long, default_value_t = 20.0)]
    pub sample_ms: f64,
    /// GPU seconds of samples per (generation, shape) before sampling stops (3 samples at least).
    #[arg(long, default_value_t = 2.0)]
    pub max_seconds_per_shape: f64,
    /// Wall seconds per generation over the whole suite; shapes after that are skipped.
    #[arg(long, default_value_t = 240.0)]
    pub max_seconds_per_kernel: f64,
    /// Calls faster than this (µs, eager) are also timed as CUDA-graph replays.
    #[arg(long, default_value_t = 50.0)]
    pub graph_threshold_us: f64,
    /// Calls captured in one graph (at least one per input set).
    #[arg(long, default_value_t = 50)]
    pub graph_calls: usize,
    /// Rows judged by the oracle before a generation is timed at a shape.
    #[arg(long, default_value_t = 512)]
    pub check_rows: usize,
    /// Do not run the peers.
    #[arg(long)]
    pub no_peers: bool,
    /// Mode suites: run only the cases whose key contains this text (repeatable), e.g.
    /// `--case sk32768` for one decode row (tuning runs; the report then covers those cases).
    #[arg(long = "case")]
    pub case_filter: Vec<String>,
    /// Use this peers.json (from an earlier run of the peer script) instead of running it.
    #[arg(long)]
    pub peers_json: Option<PathBuf>,
    /// Python with torch, for the peer script.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// The peer script (default: bench/peers/torch_sdpa.py under the current directory).
    #[arg(long)]
    pub peer_script: Option<PathBuf>,
    /// Do not run the FA3 peer process (bench/peers/fa3_jax.py: FlashAttention-3 through the
    /// flash-attn3-jax wheel, run after the torch script when `import jax, flash_attn3_jax` works).
    #[arg(long)]
    pub no_fa3: bool,
    /// Directory put first on PYTHONPATH for the FA3 peer process, e.g. where `pip install
    /// --no-deps --target DIR flash_attn3_jax-*.whl` put the wheel (default: $FLASHCORE_FA3_PATH).
    #[arg(long)]
    pub fa3_path: Option<PathBuf>,
    /// Python for the FA3 peer process (default: --python).
    #[arg(long)]
    pub fa3_python: Option<String>,
    /// --suite fp8: directory put first on PYTHONPATH for bench/peers/cudnn_fp8.py, where
    /// `pip install --no-deps --target DIR nvidia_cudnn_frontend-*.whl` put the cuDNN frontend
    /// (default: $FLASHCORE_CUDNN_FE_PATH).
    #[arg(long)]
    pub cudnn_fe_path: Option<PathBuf>,
    /// Directory of anchor files (peer timings from an earlier run, e.g. shared/anchors): added
    /// as "(anchor)" rows for the shapes they cover (--suite decode: a cross-check column; it
    /// looks in ../shared/anchors and shared/anchors when this is not given).
    #[arg(long)]
    pub anchors: Option<PathBuf>,
    /// Skip the cuBLAS GEMM reference (no "% GEMM" column; --suite decode: no GEMM rate for the peer target).
    #[arg(long)]
    pub no_gemm: bool,
    /// Time flashcore's forward in the batch-invariant mode (docs/MODES.md); the peers as
    /// always. Compare with a run without it for the mode's cost.
    #[arg(long)]
    pub batch_invariant: bool,
    /// M = N = K of the GEMM reference.
    #[arg(long, default_value_t = 8192)]
    pub gemm_n: usize,
    /// Smoke mode: 5 samples of 2 ms, peers in their --quick mode. Numbers are not for reporting.
    #[arg(long)]
    pub quick: bool,
    /// Re-render the tables and plot of a saved bench-all JSON (no GPU needed).
    #[arg(long)]
    pub from_json: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// Head dim of the decode suite's rows (the suite's shapes are D = 128 models'; e.g. 256 for
    /// Gemma's).
    #[arg(long, default_value_t = decode::HEAD_DIM)]
    pub decode_head_dim: usize,
    /// --suite decode: also time every row on an e4m3 cache (contiguous and paged 64, descale
    /// per KV head), in GB/s of the bytes it moves against the read probe of as many bytes and
    /// against the bf16 peers of the same row.
    #[arg(long, value_enum)]
    pub kv_dtype: Option<crate::mode_case::KvDtype>,
}

impl Args {
    /// The FA3 peer process's options (`--no-fa3`, `--fa3-python`, `--fa3-path` or
    /// $FLASHCORE_FA3_PATH).
    pub(crate) fn fa3_options(&self) -> peers::Fa3Options {
        peers::Fa3Options::new(self.no_fa3, self.fa3_python.clone(), self.fa3_path.clone())
    }

    /// The timing loop's settings (`--quick` caps them), shared by the dense and mode suites.
    /// The settings a report records: the loop's (after `--quick`), the command line, `layout`.
    pub(crate) fn settings(&self, layout: &str) -> Settings {
        let LoopOptions {
            repeats, sample_ms, ..
        } = self.loop_options();
        Settings {
            layout: layout.to_string(),
            repeats,
            sample_ms,
            graph_threshold_us: self.graph_threshold_us,
            graph_calls: self.graph_calls,
            check_rows: self.check_rows,
            max_seconds_per_shape: self.max_seconds_per_shape,
            quick: self.quick,
            command: std::env::args().collect::<Vec<_>>().join(" "),
        }
    }

    pub(crate) fn loop_options(&self) -> LoopOptions {
        let (repeats, sample_ms) = if self.quick {
            (self.repeats.min(5), self.sample_ms.min(2.0))
        } else {
            (self.repeats, self.sample_ms)
        };
        LoopOptions {
            repeats,
            sample_ms,
            max_seconds: self.max_seconds_per_shape,
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("target/bench"));
    if let Some(path) = &args.from_json {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if v.as_array()
            .and_then(|a| a.first())
            .is_some_and(|r| r.get("cp_ms").is_some())
        {
            let rows: Vec<cp::Measured> = serde_json::from_value(v)?;
            return cp::write_and_print(&rows, &out_dir);
        }
        if v.get("pass").is_some() {
            let mut report: backward::BackwardReport =
                serde_json::from_value(v).with_context(|| format!("parsing {}", path.display()))?;
            // A run made where the anchor file was not (a device machine) gets its anchors here;
            // --anchors replaces the saved ones.
            if args.anchors.is_some() || !report.rows.iter().any(|r| r.source == Source::Anchor) {
                let shapes = report.shapes();
                backward_gpu::add_anchors(&mut report, &shapes, args.anchors.as_deref());
            }
            return backward_gpu::write_and_print(&report, &out_dir);
        }
        if v.get("bwd_modes").is_some() {
            let report: backward_modes::BwdModesReport =
                serde_json::from_value(v).with_context(|| format!("parsing {}", path.display()))?;
            return backward_modes::write_and_print(&report, &out_dir);
        }
        if v.get("fp8").is_some() {
            let report: fp8::report::Fp8Report =
                serde_json::from_value(v).with_context(|| format!("parsing {}", path.display()))?;
            return fp8::write_and_print(&report, &out_dir);
        }
        if v.get("comparisons").is_some() {
            let mut report: modes::ModeReport =
                serde_json::from_value(v).with_context(|| format!("parsing {}", path.display()))?;
            // A decode run made where the anchor file was not (a device machine) gets its
            // cross-check column here; --anchors replaces the saved anchors.
            if let Some(d) = report.decode.as_mut() {
                if d.anchors.is_empty() || args.anchors.is_some() {
                    modes_gpu::decode_anchors(d, &args);
                }
            }
            return modes_gpu::write_and_print(&report, &out_dir);
        }
        let report: Report =
            serde_json::from_value(v).with_context(|| format!("parsing {}", path.display()))?;
        return dense::write_and_print(&report, &out_dir);
    }
    if args.kv_dtype.is_some()
        && (args.suite != suite::Suite::Decode
            || args.pass != backward::Pass::Fwd
            || !args.shapes.is_empty())
    {
        anyhow::bail!("--kv-dtype is a --suite decode option (forward, its own rows): the other suites and --shape time K/V in the problem's dtype");
    }
    if args.suite == suite::Suite::Cp {
        return cp::run(&args, &out_dir);
    }
    if args.suite == suite::Suite::Fp8 {
        return fp8::run(&args, &out_dir);
    }
    if args.suite == suite::Suite::BwdModes {
        if args.pass != backward::Pass::Bwd || !args.shapes.is_empty() {
            anyhow::bail!("--suite bwd-modes is a --pass bwd suite with its own rows (no --shape)");
        }
        return backward_modes::run(&args, &out_dir);
    }
    if args.pass != backward::Pass::Fwd {
        return backward_gpu::run(&args, &out_dir);
    }
    if args.suite.is_modes() && args.shapes.is_empty() {
        return modes_gpu::run(&args, &out_dir);
    }
    dense::run(&args, &out_dir)
}

/// The GPU a bench runs on, with its output folder created. Without a GPU the error points at
/// `--from-json` (re-rendering a saved run needs none).
pub(crate) fn open_bench_device(
    ordinal: usize,
    out_dir: &Path,
) -> Result<(Device, flashcore::DeviceInfo)> {
    let device = Device::open(ordinal).map_err(|e| {
        anyhow!(
            "bench-all needs a CUDA GPU: {e}\n(use --from-json FILE to re-render a saved run here)"
        )
    })?;
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let info = device.info().clone();
    Ok((device, info))
}

/// `name (cc X.Y, N SMs` (the parenthesis left open for the caller's extras): how each bench's
/// first line names the device.
pub(crate) fn device_banner(info: &flashcore::DeviceInfo) -> String {
    format!(
        "{} (cc {}.{}, {} SMs",
        info.name, info.compute_capability.0, info.compute_capability.1, info.sm_count
    )
}

/// The kernels' names, comma-separated (the benches' first line).
pub(crate) fn kernel_names<K: ?Sized>(
    kernels: &[Box<K>],
    name: impl Fn(&K) -> &'static str,
) -> String {
    kernels
        .iter()
        .map(|k| name(k))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn select_kernels(names: Option<&[String]>) -> Result<Vec<Box<dyn Attention>>> {
    crate::select::named(flashcore::kernels(), |k| k.name(), names, &[], "generation")
}

#[cfg(test)]
mod tests;
