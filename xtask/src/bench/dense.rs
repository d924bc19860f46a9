//! The dense suite of `bench-all` (`--suite mission | ladder | full`, or `--shape`): the cuBLAS
//! GEMM reference, every generation checked by the oracle and timed at each shape (with the
//! launch floor beside graph-timed rows), then the peers and the anchors. Its per-problem check
//! and timing (`bench_one`) serves the mode suites too.

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use flashcore::{Attention, DType, Device, Layout};
use indicatif::{ProgressBar, ProgressStyle};

use super::gpu::{self, Buffers, LoopOptions, Timer};
use super::report::{
    self, DeviceSummary, GemmPeak, Method, Outcome, PeerStatus, Report, Row, Source, Timing,
};
use super::suite::{self, Shape};
use super::{device_banner, kernel_names, open_bench_device, peers, plot, select_kernels, Args};
use crate::case::ShapeCheck;
use crate::inputs::{random_tensor_parallel, to_layout};

pub(super) const JSON: &str = "bench-all.json";
pub(super) const MARKDOWN: &str = "bench-all.md";
pub(super) const SVG: &str = "bench-all.svg";

/// The dtypes of `--dtypes`, the layout of `--layout` and the dense shapes of `--suite` (or
/// `--shape`) with `--causal`.
pub(crate) fn dense_shapes(args: &Args) -> Result<(Vec<DType>, Layout, Vec<Shape>)> {
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
    Ok((dtypes, layout, shapes))
}

/// The progress bar of a sweep over `len` (shape, kernel) pairs.
pub(crate) fn sweep_bar(len: usize, prefix: String) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
            .unwrap()
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix);
    bar
}

/// A shape's WRONG rows, printed above the bar as they come.
pub(crate) fn print_wrong(bar: &ProgressBar, rows: &[Row], shape: &Shape) {
    for r in rows {
        if let Outcome::Wrong { message } = &r.outcome {
            bar.println(format!(
                "WRONG {} at {}: {message}",
                r.implementation,
                shape.label()
            ));
        }
    }
}

/// `bench-all` on dense shapes.
pub(super) fn run(args: &Args, out_dir: &Path) -> Result<()> {
    let (dtypes, layout, shapes) = dense_shapes(args)?;
    let kernels = select_kernels(args.kernels.as_deref())?;
    let (device, info) = open_bench_device(args.device, out_dir)?;
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
    let bar = sweep_bar(shapes.len() * kernels.len(), "bench-all".into());
    let mut spent: Vec<f64> = vec![0.0; kernels.len()];
    for shape in &shapes {
        let rows = bench_shape(
            &device, &timer, &kernels, shape, layout, args, &loop_opts, &mut spent, &bar,
        );
        print_wrong(&bar, &rows, shape);
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
            dir: out_dir,
            suffix: "",
            quick: args.quick,
            extra: &[],
            fa3: &fa3,
        };
        let (status, rows) =
            peers::peer_outcome(run.run(&list), |v| peers::parse_peers(v, &shapes));
        report.peers = status;
        report.rows.extend(rows);
    }
    if let Some(dir) = &args.anchors {
        match peers::load_anchors(dir, &shapes) {
            Ok(rows) => report.rows.extend(rows),
            Err(e) => eprintln!("anchors not loaded: {e:#}"),
        }
    }
    write_and_print(&report, out_dir)
}

/// Writes JSON, markdown and SVG under `dir` and prints the header, the summary and, last,
/// the full table.
pub(super) fn write_and_print(report: &Report, dir: &Path) -> Result<()> {
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
            rows[i] = Some(Row::flashcore(
                shape,
                k.name(),
                Outcome::Unsupported { reason: u.reason },
            ));
            bar.inc(1);
        } else if spent[i] >= args.max_seconds_per_kernel {
            rows[i] = Some(Row::flashcore(
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
                rows[i] = Some(Row::flashcore(
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
        rows[i] = Some(Row::flashcore(shape, k.name(), outcome));
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
pub(super) fn prepare(
    device: &Device,
    shape: &Shape,
    problem: &flashcore::AttentionProblem,
    args: &Args,
) -> Result<(ShapeCheck, Buffers)> {
    let (check, [qb, kb, vb]) = shape_inputs(shape, problem, args);
    let elems = problem.q_len() + problem.k_len() + problem.v_len() + problem.o_len();
    let set_bytes = elems * 2;
    let alloc_bytes = set_bytes + problem.lse_len() * 4;
    let sets = match forced_input_sets()? {
        Some(n) => {
            eprintln!(
                "bench-all: FLASHCORE_BENCH_INPUT_SETS={n}: inputs rotated over {n} set(s), so a \
                 small problem's inputs stay in L2 between calls (a diagnostic: not comparable \
                 with the peers' timings)"
            );
            n
        }
        None => gpu::sets_on(device, set_bytes, alloc_bytes, gpu::max_sets(args.quick))?,
    };
    let bufs = Buffers::new(device, problem, &qb, &kb, &vb, sets)?;
    Ok((check, bufs))
}

/// `FLASHCORE_BENCH_INPUT_SETS=N` (1..=64): rotate the dense bench's inputs over N sets instead
/// of enough to exceed twice the L2, to see what a kernel does when its inputs are already in L2.
fn forced_input_sets() -> Result<Option<usize>> {
    parse_input_sets(std::env::var("FLASHCORE_BENCH_INPUT_SETS").ok().as_deref())
}

pub(super) fn parse_input_sets(v: Option<&str>) -> Result<Option<usize>> {
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
    if let Err(e) = bufs.forward(k, device, 0) {
        return Ok(Outcome::of_error(e));
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
