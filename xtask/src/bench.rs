//! `cargo xtask bench-all`: every compiled-in generation on a shape suite, checked by the oracle
//! and then timed with CUDA events, beside the peers (PyTorch SDPA backends, FA3 when present)
//! timed by `bench/peers/torch_sdpa.py` with the same method, FA3 through the flash-attn3-jax
//! wheel timed by `bench/peers/fa3_jax.py` in a second process (`--fa3-path`), and against the
//! device's cuBLAS GEMM rate. Writes JSON, markdown and an SVG plot under `target/bench/` (or `--out-dir`).
//!
//! Pure parts (suites, report, tables, ratios, peer parsing, plot) live in the submodules
//! `suite`, `report`, `peers` and `plot` and are unit-tested without a GPU; `gpu` holds the
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
pub mod bandwidth;
pub mod decode;
pub mod gpu;
pub mod modes;
pub mod modes_gpu;
pub mod peers;
pub mod plot;
pub mod report;
pub mod suite;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use flashcore::{Attention, DType, Device, Layout};
use indicatif::{ProgressBar, ProgressStyle};

use crate::case::ShapeCheck;
use crate::inputs::{random_tensor_parallel, to_layout};
use gpu::{Buffers, LoopOptions, Timer};
use report::{
    DeviceSummary, GemmPeak, Method, Outcome, PeerStatus, Report, Row, Settings, Source, Timing,
};
use suite::{CausalSel, Shape, Suite};

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
    /// --causal on; --anchors DIR adds the decode anchors, ../shared/anchors if present).
    #[arg(long, value_enum, default_value_t = Suite::Ladder)]
    pub suite: Suite,
    /// Explicit B,H,S,D shapes instead of the suite (repeatable: --shape 1,8,512,64 --shape ...).
    #[arg(long = "shape", value_parser = suite::parse_bhsd)]
    pub shapes: Vec<(usize, usize, usize, usize)>,
    #[arg(long, value_enum, default_value_t = CausalSel::Both)]
    pub causal: CausalSel,
    /// What is timed: fwd, the forward; bwd, the backward alone (dQ, dK, dV; TFLOP/s on 2.5x
    /// the forward's FLOPs; peers as fwd + autograd.grad minus fwd; FA3 from the anchors);
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
}

const JSON: &str = "bench-all.json";
const MARKDOWN: &str = "bench-all.md";
const SVG: &str = "bench-all.svg";

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
        return write_and_print(&report, &out_dir);
    }
    if args.pass != backward::Pass::Fwd {
        return backward_gpu::run(&args, &out_dir);
    }
    if args.suite.is_modes() && args.shapes.is_empty() {
        return modes_gpu::run(&args, &out_dir);
    }
    let dtypes: Vec<DType> = args
        .dtypes
        .iter()
        .map(|d| d.parse::<DType>().map_err(|e| anyhow!(e)))
        .collect::<Result<_>>()?;
    let layout: Layout = args.layout.parse().map_err(|e: String| anyhow!(e))?;
    let bhsd = if args.shapes.is_empty() {
        suite::suite_bhsd(args.suite)
    } else {
        args.shapes.clone()
    };
    let shapes = suite::expand(&bhsd, args.causal, &dtypes);
    let kernels = select_kernels(args.kernels.as_deref())?;
    let (device, info) = open_bench_device(args.device, &out_dir)?;
    eprintln!(
        "bench-all: {}, L2 {} MiB); {} shapes x {} generations ({}); output in {}",
        device_banner(&info),
        info.l2_bytes >> 20,
        shapes.len(),
        kernels.len(),
        kernel_names(&kernels, |k| k.name()),
        out_dir.display()
    );
    if args.batch_invariant {
        eprintln!("bench-all: flashcore in the batch-invariant mode (--batch-invariant)");
    }
    let loop_opts = args.loop_options();
    let mut report = Report {
        device: DeviceSummary::of(&info),
        settings: args.settings(layout.name()),
        gemm: vec![],
        gemm_note: None,
        peers: PeerStatus::Off,
        rows: vec![],
    };

    // 1. The GEMM reference rate, per dtype in the run.
    if args.no_gemm {
        report.gemm_note = Some("--no-gemm".into());
    } else {
        for &dtype in &dtypes {
            let n = args.gemm_n;
            match gpu::no_panic("cuBLAS GEMM", || {
                gpu::gemm_peak(&device, dtype, n, &loop_opts)
            }) {
                Ok((us, tflops)) => {
                    eprintln!("cuBLAS {dtype} GEMM {n}^3: {us:.1} us, {tflops:.1} TFLOP/s");
                    report.gemm.push(GemmPeak {
                        dtype,
                        n,
                        us,
                        tflops,
                    });
                }
                Err(e) => {
                    eprintln!("cuBLAS GEMM reference not measured: {e:#}");
                    report.gemm_note = Some(format!("{e:#}"));
                }
            }
        }
    }

    // 2. Ours.
    let timer = Timer::new(&device)?;
    let bar = ProgressBar::new((shapes.len() * kernels.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
            .unwrap()
            .progress_chars("=> "),
    );
    bar.set_prefix("bench-all");
    let mut spent: Vec<f64> = vec![0.0; kernels.len()];
    for shape in &shapes {
        let rows = bench_shape(
            &device, &timer, &kernels, shape, layout, &args, &loop_opts, &mut spent, &bar,
        );
        for r in &rows {
            if let Outcome::Wrong { message } = &r.outcome {
                bar.println(format!(
                    "WRONG {} at {}: {message}",
                    r.implementation,
                    shape.label()
                ));
            }
        }
        report.rows.extend(rows);
        // Partial results survive a crash later in the run.
        let _ = std::fs::write(out_dir.join(JSON), serde_json::to_string_pretty(&report)?);
    }
    bar.finish_and_clear();

    // 3. Peers, after ours, with our buffers freed.
    if let Some(path) = &args.peers_json {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)?;
        let (status, rows) = peers::parse_peers(&v, &shapes)?;
        report.peers = status;
        report.rows.extend(rows);
    } else if !args.no_peers {
        eprintln!("peers: running the peer script (progress below)");
        let script = peers::find_script(args.peer_script.as_deref());
        let list: Vec<serde_json::Value> = shapes.iter().map(|s| s.peer_json()).collect();
        let fa3 = args.fa3_options();
        let run = peers::PeerRun {
            python: &args.python,
            script: script.as_deref(),
            dir: &out_dir,
            suffix: "",
            quick: args.quick,
            extra: &[],
            fa3: &fa3,
        };
        match run.run(&list) {
            Ok(Ok(v)) => match peers::parse_peers(&v, &shapes) {
                Ok((status, rows)) => {
                    report.peers = status;
                    report.rows.extend(rows);
                }
                Err(e) => {
                    report.peers = PeerStatus::Missing {
                        reason: format!("peer JSON unreadable: {e:#}"),
                    }
                }
            },
            Ok(Err(reason)) => report.peers = PeerStatus::Missing { reason },
            Err(e) => {
                report.peers = PeerStatus::Missing {
                    reason: format!("{e:#}"),
                }
            }
        }
    }
    if let Some(dir) = &args.anchors {
        match peers::load_anchors(dir, &shapes) {
            Ok(rows) => report.rows.extend(rows),
            Err(e) => eprintln!("anchors not loaded: {e:#}"),
        }
    }
    write_and_print(&report, &out_dir)
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

/// Writes JSON, markdown and SVG under `dir` and prints the header, the summary and, last,
/// the full table.
fn write_and_print(report: &Report, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join(JSON), serde_json::to_string_pretty(report)?)?;
    std::fs::write(dir.join(MARKDOWN), report::render_markdown(report))?;
    match plot::render_svg(report) {
        Ok(svg) => std::fs::write(dir.join(SVG), svg)?,
        Err(e) => eprintln!("plot not written: {e:#}"),
    }
    eprintln!(
        "bench-all: wrote {}, {} and {} in {}",
        JSON,
        MARKDOWN,
        SVG,
        dir.display()
    );
    println!("{}", report::render_header(report));
    println!("{}", report::render_summary(report));
    print!("{}", report::render_table(report));
    Ok(())
}

/// Row for a generation that gets no number.
fn row(shape: &Shape, kernel: &str, outcome: Outcome) -> Row {
    Row {
        shape: *shape,
        implementation: kernel.to_string(),
        source: Source::Flashcore,
        outcome,
    }
}

/// Checks and times every generation at one shape. Never fails as a whole: whatever goes wrong
/// becomes the row's outcome.
#[allow(clippy::too_many_arguments)]
fn bench_shape(
    device: &Device,
    timer: &Timer,
    kernels: &[Box<dyn Attention>],
    shape: &Shape,
    layout: Layout,
    args: &Args,
    loop_opts: &LoopOptions,
    spent: &mut [f64],
    bar: &ProgressBar,
) -> Vec<Row> {
    let problem = shape
        .problem(layout)
        .with_batch_invariant(args.batch_invariant);
    let mut rows: Vec<Option<Row>> = vec![None; kernels.len()];
    let mut todo = Vec::new();
    for (i, k) in kernels.iter().enumerate() {
        if let Err(u) = k.supports(&problem, device.info()) {
            rows[i] = Some(row(
                shape,
                k.name(),
                Outcome::Unsupported { reason: u.reason },
            ));
            bar.inc(1);
        } else if spent[i] >= args.max_seconds_per_kernel {
            rows[i] = Some(row(
                shape,
                k.name(),
                Outcome::Skipped {
                    reason: format!(
                        "--max-seconds-per-kernel ({} s) used up",
                        args.max_seconds_per_kernel
                    ),
                },
            ));
            bar.inc(1);
        } else {
            todo.push(i);
        }
    }
    if todo.is_empty() {
        return rows.into_iter().flatten().collect();
    }
    bar.set_message(format!("{}: inputs and oracle", shape.label()));
    let prepared = prepare(device, shape, &problem, args);
    let (check, mut bufs) = match prepared {
        Ok(x) => x,
        Err(e) => {
            for i in todo {
                rows[i] = Some(row(
                    shape,
                    kernels[i].name(),
                    Outcome::Error {
                        message: format!("{e:#}"),
                    },
                ));
                bar.inc(1);
            }
            return rows.into_iter().flatten().collect();
        }
    };
    for i in todo {
        let k = kernels[i].as_ref();
        bar.set_message(format!("{} @ {}", k.name(), shape.label()));
        let start = Instant::now();
        let judge = |o: &[u16], l: &[f32]| {
            check
                .judge_bits(o, l)
                .map(|v| (v.ratio, check.rows_checked()))
        };
        let outcome = gpu::no_panic(k.name(), || {
            bench_one(
                device,
                timer,
                k,
                &judge,
                shape.flops(),
                &mut bufs,
                args,
                loop_opts,
            )
        })
        .unwrap_or_else(|e| Outcome::Error {
            message: format!("{e:#}"),
        });
        spent[i] += start.elapsed().as_secs_f64();
        rows[i] = Some(row(shape, k.name(), outcome));
        bar.inc(1);
    }
    let mut rows: Vec<Row> = rows.into_iter().flatten().collect();
    let graph_timed = rows
        .iter()
        .any(|r| r.timing().is_some_and(|t| t.method == Method::Graph));
    if graph_timed {
        bar.set_message(format!("launch floor @ {}", shape.label()));
        let outcome = gpu::no_panic("launch floor", || {
            bench_floor(device, timer, &mut bufs, args, loop_opts)
        })
        .unwrap_or_else(|e| Outcome::Error {
            message: format!("{e:#}"),
        });
        rows.push(Row {
            shape: *shape,
            implementation: FLOOR_NAME.to_string(),
            source: Source::Floor,
            outcome,
        });
    }
    rows
}

/// The launch floor's row name and kernel (`kernels/bench_launch_floor.cu`).
pub(crate) const FLOOR_NAME: &str = "launch floor (one-thread kernel)";
const FLOOR_SOURCE: &str = "bench_launch_floor.cu";
const FLOOR_ENTRY: &str = "launch_floor";

/// What any call costs at a graph-timed shape: a one-thread kernel that writes one element, in a
/// graph of as many calls, on the same input sets and parameter block, as the shape's graph
/// rows. A small problem's time is read against it (issue 12 asks for it in the same table).
fn bench_floor(
    device: &Device,
    timer: &Timer,
    bufs: &mut Buffers,
    args: &Args,
    loop_opts: &LoopOptions,
) -> Result<Outcome> {
    let plan = flashcore::LaunchPlan::single(flashcore::KernelLaunch {
        source: FLOOR_SOURCE,
        entry: FLOOR_ENTRY,
        defines: vec![],
        grid: (1, 1, 1),
        block: (32, 1, 1),
        dynamic_smem_bytes: 0,
        tensor_maps: None,
        programmatic_launch: false,
    });
    let calls = args.graph_calls.max(bufs.sets.len());
    let graph = gpu::build_graph(device, bufs, &plan, calls)?;
    let s = gpu::time_graph(timer, device, &graph, loop_opts)?;
    let mut t =
        Timing::from_flops(0.0, None, Some(s.us)).ok_or_else(|| anyhow!("no time measured"))?;
    t.calls = s.calls;
    t.sets = bufs.sets.len();
    t.note = Some("the cost of any launch here, timed as the graph rows are".into());
    Ok(Outcome::Timed(t))
}

/// Inputs (set 0 random normal, seeded by the shape), the oracle's references on sampled rows,
/// and the rotated device sets.
fn prepare(
    device: &Device,
    shape: &Shape,
    problem: &flashcore::AttentionProblem,
    args: &Args,
) -> Result<(ShapeCheck, Buffers)> {
    let (check, [qb, kb, vb]) = shape_inputs(shape, problem, args);
    let elems = problem.q_len() + problem.k_len() + problem.v_len() + problem.o_len();
    let set_bytes = elems * 2;
    let alloc_bytes = set_bytes + problem.lse_len() * 4;
    let (free, _) = device.memory().map_err(|e| anyhow!("{e}"))?;
    let cap = if args.quick { 2 } else { 1000 };
    let sets = match forced_input_sets()? {
        Some(n) => {
            eprintln!(
                "bench-all: FLASHCORE_BENCH_INPUT_SETS={n}: inputs rotated over {n} set(s), so a \
                 small problem's inputs stay in L2 between calls (a diagnostic: not comparable \
                 with the peers' timings)"
            );
            n
        }
        None => gpu::sets_needed(
            set_bytes,
            alloc_bytes,
            device.info().l2_bytes as usize,
            free,
            cap,
        ),
    };
    let bufs = Buffers::new(device, problem, &qb, &kb, &vb, sets)?;
    Ok((check, bufs))
}

/// `FLASHCORE_BENCH_INPUT_SETS=N` (1..=64): rotate the dense bench's inputs over N sets instead
/// of enough to exceed twice the L2, to see what a kernel does when its inputs are already in L2.
fn forced_input_sets() -> Result<Option<usize>> {
    parse_input_sets(std::env::var("FLASHCORE_BENCH_INPUT_SETS").ok().as_deref())
}

fn parse_input_sets(v: Option<&str>) -> Result<Option<usize>> {
    let Some(v) = v else {
        return Ok(None);
    };
    match v.trim().parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(Some(n)),
        _ => bail!("FLASHCORE_BENCH_INPUT_SETS={v}: expected 1..=64"),
    }
}

/// The seed of a shape's inputs (`--seed` mixed with the shape).
pub(crate) fn shape_seed(seed: u64, shape: &Shape) -> u64 {
    seed ^ (shape.batch as u64) << 48
        ^ (shape.heads as u64) << 40
        ^ (shape.seq as u64) << 16
        ^ (shape.head_dim as u64) << 4
        ^ shape.causal as u64
}

/// Q, K, V of a shape (random normal, seeded by the shape) as dtype bits in the problem's
/// layout order, and the oracle's forward references on sampled rows.
pub(crate) fn shape_inputs(
    shape: &Shape,
    problem: &flashcore::AttentionProblem,
    args: &Args,
) -> (ShapeCheck, [Vec<u16>; 3]) {
    let seed = shape_seed(args.seed, shape);
    let dims = |heads, seq| [problem.batch, heads, seq, problem.head_dim];
    let dt = problem.dtype;
    let q = random_tensor_parallel(dt, dims(problem.heads_q, problem.seq_q), seed);
    let k = random_tensor_parallel(dt, dims(problem.heads_kv, problem.seq_k), seed ^ 1);
    let v = random_tensor_parallel(dt, dims(problem.heads_kv, problem.seq_k), seed ^ 2);
    let check = ShapeCheck::new(problem, q.view(), k.view(), v.view(), args.check_rows, seed);
    let bits = |a: &ndarray::Array4<f32>| {
        flashcore::host::to_bits(dt, &to_layout(a.view(), problem.layout))
    };
    (check, [bits(&q), bits(&k), bits(&v)])
}

/// The oracle's judgement of one output (O bits, LSE as read back): (error ratio, rows judged),
/// or the one-line reason it is wrong.
pub(crate) type Judge<'a> =
    dyn Fn(&[u16], &[f32]) -> std::result::Result<(f64, usize), String> + 'a;

/// One generation on one problem: check, eager timing, and for short calls graph check and
/// timing. `flops` is what its TFLOP/s are counted on.
#[allow(clippy::too_many_arguments)]
pub(crate) fn bench_one(
    device: &Device,
    timer: &Timer,
    k: &dyn Attention,
    judge: &Judge<'_>,
    flops: f64,
    bufs: &mut Buffers,
    args: &Args,
    loop_opts: &LoopOptions,
) -> Result<Outcome> {
    let problem = bufs.problem.clone();
    // Correctness first (this call also compiles the kernel and warms it up).
    bufs.poison(device, 0)?;
    match bufs.forward(k, device, 0) {
        Ok(()) => {}
        Err(flashcore::Error::Unsupported(u)) => {
            return Ok(Outcome::Unsupported { reason: u.reason })
        }
        Err(e) => {
            return Ok(Outcome::Error {
                message: e.to_string(),
            })
        }
    }
    let (o, lse) = match bufs.read_output(device, 0) {
        Ok(x) => x,
        Err(e) => {
            return Ok(Outcome::Error {
                message: format!("{e:#}"),
            })
        }
    };
    let (ratio, rows_checked) = match judge(&o, &lse) {
        Ok(v) => v,
        Err(message) => return Ok(Outcome::Wrong { message }),
    };
    let eager = gpu::time_eager(timer, device, bufs, k, loop_opts)?;
    let mut notes: Vec<String> = Vec::new();
    if eager.capped {
        notes.push(format!("{} samples (time budget)", eager.repeats));
    }
    let mut graph_us = None;
    let mut graph_calls = 0;
    if eager.us < args.graph_threshold_us {
        let plan = k
            .plan(&problem, device.info())
            .map_err(|u| anyhow!("{u}"))?;
        let calls = args.graph_calls.max(bufs.sets.len());
        let timed = gpu::no_panic("graph", || {
            let graph = gpu::build_graph(device, bufs, &plan, calls)?;
            bufs.poison(device, 0)?;
            graph.launch(device)?;
            let (o, lse) = bufs.read_output(device, 0)?;
            judge(&o, &lse).map_err(|m| anyhow!("graph replay output is WRONG: {m}"))?;
            gpu::time_graph(timer, device, &graph, loop_opts)
        });
        match timed {
            Ok(s) => {
                graph_us = Some(s.us);
                graph_calls = s.calls;
            }
            Err(e) => notes.push(format!("graph: {e:#}")),
        }
    }
    let mut t = Timing::from_flops(flops, Some(eager.us), graph_us)
        .ok_or_else(|| anyhow!("no time measured"))?;
    t.calls = if t.method == Method::Graph {
        graph_calls
    } else {
        eager.calls
    };
    t.repeats = eager.repeats;
    t.sets = bufs.sets.len();
    t.check = Some(format!("ok {ratio:.2} ({rows_checked} rows)"));
    if !notes.is_empty() {
        t.note = Some(notes.join("; "));
    }
    Ok(Outcome::Timed(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn input_sets_override_parses_and_refuses_out_of_range() {
        assert_eq!(parse_input_sets(None).unwrap(), None);
        assert_eq!(parse_input_sets(Some("1")).unwrap(), Some(1));
        assert_eq!(parse_input_sets(Some(" 64 ")).unwrap(), Some(64));
        for bad in ["0", "65", "", "two"] {
            assert!(parse_input_sets(Some(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn fa3_flags_parse() {
        let a = Cli::try_parse_from(["bench-all"]).unwrap().args;
        assert!(!a.no_fa3 && a.fa3_path.is_none() && a.fa3_python.is_none());
        let a = Cli::try_parse_from([
            "bench-all",
            "--fa3-path",
            "/tmp/fa3pkg",
            "--fa3-python",
            "/usr/bin/python3.12",
        ])
        .unwrap()
        .args;
        let o = a.fa3_options();
        assert_eq!(o.path.as_deref(), Some(Path::new("/tmp/fa3pkg")));
        assert_eq!(o.python.as_deref(), Some("/usr/bin/python3.12"));
        assert!(!o.off);
        let a = Cli::try_parse_from(["bench-all", "--no-fa3"]).unwrap().args;
        assert!(a.fa3_options().off);
    }

    #[test]
    fn defaults_and_flags_parse() {
        let a = Cli::try_parse_from(["bench-all"]).unwrap().args;
        assert_eq!(a.suite, Suite::Ladder);
        assert_eq!(a.causal, CausalSel::Both);
        assert_eq!(a.dtypes, ["f16"]);
        assert_eq!(a.layout, "bhsd");
        assert_eq!(a.repeats, 15);
        let a = Cli::try_parse_from([
            "bench-all",
            "--kernels",
            "scalar,vectorized",
            "--suite",
            "full",
            "--causal",
            "on",
            "--dtypes",
            "f16,bf16",
            "--shape",
            "1,8,512,64",
            "--shape",
            "2x16x8192x64",
            "--out-dir",
            "/tmp/x",
            "--max-seconds-per-kernel",
            "30",
        ])
        .unwrap()
        .args;
        assert_eq!(a.kernels.unwrap(), ["scalar", "vectorized"]);
        assert_eq!(a.shapes, [(1, 8, 512, 64), (2, 16, 8192, 64)]);
        assert_eq!(a.max_seconds_per_kernel, 30.0);
        assert!(Cli::try_parse_from(["bench-all", "--suite", "huge"]).is_err());
        assert!(Cli::try_parse_from(["bench-all", "--shape", "1,2,3"]).is_err());
    }

    #[test]
    fn the_mode_suites_parse() {
        for (name, suite) in [
            ("varlen", Suite::Varlen),
            ("paged", Suite::Paged),
            ("window", Suite::Window),
            ("decode", Suite::Decode),
        ] {
            let a = Cli::try_parse_from([
                "bench-all",
                "--suite",
                name,
                "--kernels",
                "persistent-hopper",
            ])
            .unwrap()
            .args;
            assert_eq!(a.suite, suite);
            assert!(a.suite.is_modes());
            assert!(suite::suite_bhsd(a.suite).is_empty());
        }
        for dense in [Suite::Mission, Suite::Ladder, Suite::Full] {
            assert!(!dense.is_modes());
            assert!(!suite::suite_bhsd(dense).is_empty());
        }
    }

    #[test]
    fn the_decode_suite_parses() {
        let a = Cli::try_parse_from(["bench-all", "--suite", "decode"])
            .unwrap()
            .args;
        assert_eq!(a.suite, Suite::Decode);
        assert!(a.suite.is_modes());
        assert_eq!(modes::suite_name(a.suite), "decode");
        let a = Cli::try_parse_from([
            "bench-all",
            "--suite",
            "decode",
            "--causal",
            "on",
            "--anchors",
            "../shared/anchors",
            "--kernels",
            "persistent-hopper,tile64",
        ])
        .unwrap()
        .args;
        assert_eq!(a.causal, CausalSel::On);
        assert_eq!(a.anchors.as_deref(), Some(Path::new("../shared/anchors")));
        // The plan the runner takes for it.
        let p = modes::plan(a.suite, a.seed);
        assert_eq!(p.suite, Suite::Decode);
        assert_eq!(p.cases.len(), 32);
    }

    /// Writes `report` as a saved JSON report into a fresh temporary folder and renders it with
    /// `bench-all --from-json` (no GPU); returns the folder and the output folder inside it.
    fn render_saved_report(
        tag: &str,
        report: &modes::ModeReport,
    ) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("in.json");
        std::fs::write(&json, serde_json::to_string(report).unwrap()).unwrap();
        let out = dir.join("out");
        let a = Cli::try_parse_from([
            "bench-all",
            "--from-json",
            json.to_str().unwrap(),
            "--out-dir",
            out.to_str().unwrap(),
        ])
        .unwrap()
        .args;
        run(a).unwrap();
        (dir, out)
    }

    #[test]
    fn a_saved_decode_report_renders_without_a_gpu() {
        let (dir, out) = render_saved_report("bench-decode-test", &decode::tests::fixture());
        let json = dir.join("in.json");
        let md = std::fs::read_to_string(out.join("bench-decode.md")).unwrap();
        assert!(md.contains("# flashcore bench-all --suite decode"), "{md}");
        assert!(md.contains("### Copy ceiling"), "{md}");
        let back: modes::ModeReport =
            serde_json::from_str(&std::fs::read_to_string(out.join("bench-decode.json")).unwrap())
                .unwrap();
        assert_eq!(back, decode::tests::fixture());
        // A run saved without anchors gets them when re-rendered with --anchors.
        let mut bare = decode::tests::fixture();
        let d = bare.decode.as_mut().unwrap();
        d.anchors.clear();
        d.anchors_note = Some("no anchors".into());
        std::fs::write(&json, serde_json::to_string(&bare).unwrap()).unwrap();
        let anchors = dir.join("anchors");
        std::fs::create_dir_all(&anchors).unwrap();
        std::fs::write(
            anchors.join("h100-decode-peers.txt"),
            "B=8 Hq=32 Hkv=8 Sq=1 Sk=8192 D=128 bf16 sdpa_cudnn      94.2 us     2850 GB/s\n",
        )
        .unwrap();
        let a = Cli::try_parse_from([
            "bench-all",
            "--from-json",
            json.to_str().unwrap(),
            "--out-dir",
            out.to_str().unwrap(),
            "--anchors",
            anchors.to_str().unwrap(),
        ])
        .unwrap()
        .args;
        run(a).unwrap();
        let md = std::fs::read_to_string(out.join("bench-decode.md")).unwrap();
        assert!(
            md.contains("| sdpa_cudnn | 94.20 | 2850 | 202 % | 94.20 | 2850 | 1.00 |"),
            "{md}"
        );
        assert!(md.contains("h100-decode-peers.txt (1 number)"), "{md}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_backward_passes_parse() {
        let a = Cli::try_parse_from(["bench-all"]).unwrap().args;
        assert_eq!(a.pass, backward::Pass::Fwd);
        let a = Cli::try_parse_from([
            "bench-all",
            "--pass",
            "bwd",
            "--kernels",
            "scalar,persistent-portable",
            "--shape",
            "4,16,2048,64",
            "--case",
            "c1",
            "--fwd-kernel",
            "persistent-hopper",
        ])
        .unwrap()
        .args;
        assert_eq!(a.pass, backward::Pass::Bwd);
        assert_eq!(a.fwd_kernel.as_deref(), Some("persistent-hopper"));
        assert_eq!(a.case_filter, ["c1"]);
        let a = Cli::try_parse_from(["bench-all", "--pass", "fwdbwd"])
            .unwrap()
            .args;
        assert_eq!(a.pass, backward::Pass::Fwdbwd);
        assert!(Cli::try_parse_from(["bench-all", "--pass", "backward"]).is_err());
        let Err(e) = backward_gpu::select_backward_kernels(Some(&["nope".to_string()])) else {
            panic!("an unknown backward kernel was accepted");
        };
        assert!(
            e.to_string().contains("no backward kernel called 'nope'"),
            "{e}"
        );
    }

    #[test]
    fn backward_pass_arguments_are_checked_before_the_gpu() {
        let err = |argv: &[&str]| {
            let a = Cli::try_parse_from(argv).unwrap().args;
            format!("{:#}", run(a).unwrap_err())
        };
        let e = err(&["bench-all", "--pass", "bwd", "--suite", "decode"]);
        assert!(e.contains("dense problems only"), "{e}");
        let e = err(&["bench-all", "--pass", "bwd", "--case", "s123456"]);
        assert!(e.contains("matches no shape"), "{e}");
        let e = err(&["bench-all", "--pass", "fwdbwd", "--kernels", "nope"]);
        assert!(e.contains("no backward kernel called 'nope'"), "{e}");
        let e = err(&["bench-all", "--pass", "bwd", "--fwd-kernel", "nope"]);
        assert!(e.contains("--fwd-kernel"), "{e}");
    }

    #[test]
    fn a_saved_backward_report_renders_without_a_gpu() {
        let dir = std::env::temp_dir().join(format!("bench-bwd-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Saved where no anchor file was: re-rendered with --anchors, FA3's rows join.
        let mut saved = backward::tests::fixture();
        saved.rows.retain(|r| r.source != Source::Anchor);
        let json = dir.join("in.json");
        std::fs::write(&json, serde_json::to_string(&saved).unwrap()).unwrap();
        let anchors = dir.join("anchors");
        std::fs::create_dir_all(&anchors).unwrap();
        std::fs::write(
            anchors.join("h100-backward-peers.txt"),
            "# fa3-jax: wall clock around 10 jitted calls
             B=4 H=16 S=2048 D=64 causal=1 fa3-jax   fwd     141.7 us bwd     389.9 us  bwd  220.3 TFLOP/s
",
        )
        .unwrap();
        let out = dir.join("out");
        let a = Cli::try_parse_from([
            "bench-all",
            "--from-json",
            json.to_str().unwrap(),
            "--out-dir",
            out.to_str().unwrap(),
            "--anchors",
            anchors.to_str().unwrap(),
        ])
        .unwrap()
        .args;
        run(a).unwrap();
        let md = std::fs::read_to_string(out.join("bench-bwd.md")).unwrap();
        assert!(md.starts_with("# flashcore bench-all --pass bwd"), "{md}");
        assert!(
            md.contains("| 4,16,2048,64 | f16 | yes | fa3-jax (anchor) | 389.9 | 220.3 |"),
            "{md}"
        );
        assert!(
            md.contains("> h100-backward-peers.txt: fa3-jax: wall clock"),
            "{md}"
        );
        let back: backward::BackwardReport =
            serde_json::from_str(&std::fs::read_to_string(out.join("bench-bwd.json")).unwrap())
                .unwrap();
        assert_eq!(back.pass, backward::Pass::Bwd);
        assert_eq!(
            back.rows
                .iter()
                .filter(|r| r.source == Source::Anchor)
                .count(),
            1
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_saved_mode_report_renders_without_a_gpu() {
        let (dir, out) = render_saved_report("bench-modes-test", &modes::tests::fixture());
        let md = std::fs::read_to_string(out.join("bench-varlen.md")).unwrap();
        assert!(md.contains("## Comparisons"), "{md}");
        assert!(
            md.contains("| varlen | persistent-hopper | eager |"),
            "{md}"
        );
        let back: modes::ModeReport =
            serde_json::from_str(&std::fs::read_to_string(out.join("bench-varlen.json")).unwrap())
                .unwrap();
        assert_eq!(back, modes::tests::fixture());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_kernels_are_named() {
        let Err(e) = select_kernels(Some(&["nope".to_string()])) else {
            panic!("an unknown name was accepted");
        };
        assert!(e.to_string().contains("compiled in"), "{e}");
        let all = flashcore::kernels();
        let last = all.last().unwrap().name().to_string();
        let first = all[0].name().to_string();
        let picked = select_kernels(Some(&[last.clone(), first.clone()])).unwrap();
        let names: Vec<&str> = picked.iter().map(|k| k.name()).collect();
        if first != last {
            assert_eq!(names, [first.as_str(), last.as_str()]);
        }
    }

    #[test]
    fn a_saved_report_renders_without_a_gpu() {
        let dir = std::env::temp_dir().join(format!("bench-all-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("in.json");
        std::fs::write(
            &json,
            serde_json::to_string(&report::tests::fixture()).unwrap(),
        )
        .unwrap();
        let out = dir.join("out");
        let a = Cli::try_parse_from([
            "bench-all",
            "--from-json",
            json.to_str().unwrap(),
            "--out-dir",
            out.to_str().unwrap(),
        ])
        .unwrap()
        .args;
        run(a).unwrap();
        for f in [JSON, MARKDOWN, SVG] {
            assert!(out.join(f).is_file(), "{f}");
        }
        let md = std::fs::read_to_string(out.join(MARKDOWN)).unwrap();
        assert!(md.contains("| 1,8,512,64 | f16 | no | persistent-hopper | graph |"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
