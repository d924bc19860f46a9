//! `cargo xtask bench-all --suite fp8`: flashcore's fp8 forward (Q, K and V e4m3 with descale
//! tables per sequence and KV head, O bf16) at the prefill shapes of [`report::ROWS`], against
//! flashcore's own bf16 forward at the same shape (the ladder's check and timing,
//! `dense::bench_one`) and, in the same run, cuDNN's fp8 SDPA with the e4m3 and bf16 GEMM rates
//! beside it (`bench/peers/cudnn_fp8.py`, through the nvidia-cudnn-frontend wheel: `--cudnn-fe-path`).
//! Each flashcore measurement is checked against the oracle first (the e4m3 one on the true
//! values, stored × descale, with the fp8 program's low-precision reference) and timed with CUDA
//! events on input sets rotated past twice the L2. Writes `bench-fp8.json` and `.md`.

pub mod report;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use flashcore::cudarc::driver::CudaSlice;
use flashcore::{
    Attention, AttentionProblem, AttentionTensors, Device, DeviceInfo, DeviceTables, KvScales,
    Layout,
};
use ndarray::{Array4, ArrayD};
use serde_json::Value;

use super::gpu::{self, cu, LoopOptions, Timer};
use super::modes_gpu::{ModeCheck, StorageInputs};
use super::peers::{self, SideScript};
use super::report::{DeviceSummary, Method, Outcome, PeerStatus, Row, Timing};
use super::suite::Shape;
use super::{dense, device_banner, open_bench_device, select_kernels, Args};
use crate::inputs::{random_tensor_parallel, to_layout};
use crate::mode_case::{self, Draw};
use report::{Fp8Report, Fp8Row, CUDNN_BACKEND};

/// The variable `--cudnn-fe-path` falls back to.
pub const CUDNN_FE_PATH_ENV: &str = "FLASHCORE_CUDNN_FE_PATH";

/// The descale tables' shape: one factor per (sequence, KV head), the finest FlashAttention 3
/// takes.
pub const SCALES: KvScales = KvScales::PerBatchKvHead;

/// The descale factor of (sequence `b`, KV head `h`): 2^-5 and 2^-6 alternating, so that a
/// kernel reading another entry's factor is off by 2x (the check sees it), and powers of two,
/// so that stored × factor is exact in f32 and bf16 (`mode_case::draw_fp8_side` says why).
/// Standard normal values over these are about 32-64 wide, within e4m3's ±448.
pub fn descale(b: usize, h: usize) -> f32 {
    2f32.powi(-5 - ((b + h) % 2) as i32)
}

/// Q's, K's and V's descale tables (the same factors) of a problem, laid out as [`SCALES`] says.
pub fn descale_table(p: &AttentionProblem) -> Vec<f32> {
    let (batch_stride, head_stride) = SCALES.strides(p.heads_kv);
    let mut t = vec![0f32; SCALES.table_len(p.batch, p.heads_kv)];
    for b in 0..p.batch {
        for h in 0..p.heads_kv {
            t[b * batch_stride + h * head_stride] = descale(b, h);
        }
    }
    t
}

/// The descales in the report's words.
pub const DESCALES: &str = "Q, K and V standard normal over a descale per (sequence, KV head) of \
                            2^-5 or 2^-6 (alternating), rounded to e4m3 (the stored bytes); cuDNN: \
                            standard normal rounded to e4m3, descales 1";

/// The e4m3 forward of a row: Q, K, V e4m3 with descale tables of [`SCALES`], O in the row's dtype.
pub fn e4m3_problem(shape: &Shape, layout: Layout) -> AttentionProblem {
    let mut p = shape.problem(layout);
    p.modes.kv_fp8 = Some(SCALES);
    p.modes.q_fp8 = true;
    p
}

/// One tensor's stored values: `x` (logical B,H,S,D in standard layout, the true values) over
/// the factor of its (sequence, KV head), rounded to e4m3 with saturation
/// (`mode_case::round_e4m3`: exact round-to-nearest-even). `group` is the tensor's heads per KV
/// head (Q's query heads per KV head; 1 for K and V). In parallel over the (sequence, head) planes.
pub fn quantize(mut x: Array4<f32>, group: usize) -> Array4<f32> {
    let (heads, plane) = (x.shape()[1], x.shape()[2] * x.shape()[3]);
    let group = group.max(1);
    let Some(data) = x.as_slice_mut() else {
        // Not drawn contiguous: one pass in logical order.
        for ((b, h, _, _), v) in x.indexed_iter_mut() {
            *v = mode_case::round_e4m3(*v / descale(b, h / group));
        }
        return x;
    };
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let planes: Vec<(usize, &mut [f32])> = data.chunks_mut(plane.max(1)).enumerate().collect();
    let per_thread = planes.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let mut it = planes.into_iter().peekable();
        while it.peek().is_some() {
            let mine: Vec<(usize, &mut [f32])> = it.by_ref().take(per_thread).collect();
            s.spawn(move || {
                for (i, plane) in mine {
                    let f = descale(i / heads, (i % heads) / group);
                    plane
                        .iter_mut()
                        .for_each(|v| *v = mode_case::round_e4m3(*v / f));
                }
            });
        }
    });
    x
}

/// The rows of `--suite fp8` with `args`' selection (`--shape`, `--causal`, `--case`).
fn selected_rows(args: &Args) -> Vec<Shape> {
    report::rows(&args.shapes, args.causal, &args.case_filter)
}

pub fn run(args: &Args, out_dir: &Path) -> Result<()> {
    if args.pass != super::backward::Pass::Fwd {
        bail!("--suite fp8 times the forward (the e4m3 path has no backward): drop --pass");
    }
    let layout: Layout = args.layout.parse().map_err(|e: String| anyhow!(e))?;
    let shapes = selected_rows(args);
    if shapes.is_empty() {
        bail!("--suite fp8: no row left after --case / --causal");
    }
    let (device, info) = open_bench_device(args.device, out_dir)?;
    eprintln!(
        "bench-all --suite fp8: {}, L2 {} MiB); {} rows, e4m3 and bf16 forward{}; output in {}",
        device_banner(&info),
        info.l2_bytes >> 20,
        shapes.len(),
        if args.no_peers {
            ""
        } else {
            ", then the cuDNN fp8 peer"
        },
        out_dir.display()
    );
    let loop_opts = args.loop_options();
    let timer = Timer::new(&device)?;
    let started = Instant::now();
    let mut rows = Vec::new();
    for (i, shape) in shapes.iter().enumerate() {
        let at = format!("[{}/{}] {}", i + 1, shapes.len(), report::row_name(shape));
        eprintln!("{at}: e4m3 inputs, oracle references, timing");
        let e4m3 = bench_e4m3(&device, &timer, shape, layout, args, &loop_opts);
        eprintln!("{at}: flashcore e4m3 {}", progress_text(&e4m3));
        eprintln!("{at}: bf16 inputs, oracle references, timing");
        let bf16 = bench_bf16(&device, &timer, shape, layout, args, &loop_opts);
        eprintln!(
            "{at}: flashcore bf16 {} ({:.0} s so far)",
            progress_text(&bf16),
            started.elapsed().as_secs_f64()
        );
        rows.push(Fp8Row {
            shape: *shape,
            e4m3,
            bf16,
            cudnn: None,
        });
    }
    let (peers, cudnn, gemm) = peer_rows(args, &shapes, out_dir);
    for (row, c) in rows.iter_mut().zip(cudnn) {
        row.cudnn = c;
    }
    let report = Fp8Report {
        device: DeviceSummary::of(&info),
        settings: args.settings(layout.name()),
        descales: DESCALES.into(),
        peers,
        gemm,
        fp8: rows,
    };
    write_and_print(&report, out_dir)
}

/// "1234.5 µs, 890.1 TFLOP/s (persistent-hopper, ok 0.41 (512 rows))", or the outcome's text.
fn progress_text(r: &Row) -> String {
    match &r.outcome {
        Outcome::Timed(t) => format!(
            "{:.1} µs, {:.1} TFLOP/s ({}, {})",
            t.us,
            t.tflops,
            r.implementation,
            t.check.as_deref().unwrap_or("-")
        ),
        o => format!("({}) {}", r.implementation, o.text()),
    }
}

/// Writes `bench-fp8.json` and `.md` and prints the header, the full table and, last, the short
/// one (also `--from-json` of a saved run).
pub fn write_and_print(r: &Fp8Report, out_dir: &Path) -> Result<()> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    std::fs::write(out_dir.join(report::JSON), serde_json::to_string_pretty(r)?)?;
    std::fs::write(out_dir.join(report::MARKDOWN), report::render_markdown(r))?;
    eprintln!(
        "bench-all --suite fp8: wrote {} and {} in {}",
        report::JSON,
        report::MARKDOWN,
        out_dir.display()
    );
    println!("{}", report::render_header(r));
    println!("{}", report::render_table(r));
    print!("{}", report::render_short(r));
    Ok(())
}

/// The kernel that runs `p`: the first of `--kernels` (default: every generation, fastest
/// first, as `flashcore::best_for` walks them) that takes it, or why none does (boxed: an
/// outcome is large beside a kernel).
fn pick_kernel(
    args: &Args,
    p: &AttentionProblem,
    info: &DeviceInfo,
) -> std::result::Result<Box<dyn Attention>, Box<Outcome>> {
    let kernels = select_kernels(args.kernels.as_deref()).map_err(|e| Outcome::Error {
        message: format!("{e:#}"),
    })?;
    let mut reasons = Vec::new();
    for k in kernels {
        match k.supports(p, info) {
            Ok(()) => return Ok(k),
            Err(u) => reasons.push(format!("{}: {}", k.name(), u.reason)),
        }
    }
    Err(Box::new(Outcome::Unsupported {
        reason: reasons.join("; "),
    }))
}

/// A row's measurement by the kernel [`pick_kernel`] gives, `measure` turned into an outcome
/// whatever goes wrong (an error or a panic becomes the row's text, never the run's end).
fn measured(
    shape: &Shape,
    p: &AttentionProblem,
    args: &Args,
    device: &Device,
    measure: impl FnOnce(&dyn Attention) -> Result<Outcome>,
) -> Row {
    let k = match pick_kernel(args, p, device.info()) {
        Ok(k) => k,
        Err(o) => return Row::flashcore(shape, "-", *o),
    };
    let outcome =
        gpu::no_panic(k.name(), || measure(k.as_ref())).unwrap_or_else(|e| Outcome::Error {
            message: format!("{e:#}"),
        });
    Row::flashcore(shape, k.name(), outcome)
}

/// flashcore at the same shape in bf16: the dense suite's inputs, check and timing.
fn bench_bf16(
    device: &Device,
    timer: &Timer,
    shape: &Shape,
    layout: Layout,
    args: &Args,
    loop_opts: &LoopOptions,
) -> Row {
    let p = shape.problem(layout);
    measured(shape, &p, args, device, |k| {
        let (check, mut bufs) = dense::prepare(device, shape, &p, args)?;
        let judge = |o: &[u16], l: &[f32]| {
            check
                .judge_bits(o, l)
                .map(|v| (v.ratio, check.rows_checked()))
        };
        dense::bench_one(
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
}

/// flashcore on e4m3 Q, K and V: inputs quantized on the host, the oracle's references on the
/// true values, the check, then eager timing over rotated sets (these calls are milliseconds
/// long: no graph replays).
fn bench_e4m3(
    device: &Device,
    timer: &Timer,
    shape: &Shape,
    layout: Layout,
    args: &Args,
    loop_opts: &LoopOptions,
) -> Row {
    let p = e4m3_problem(shape, layout);
    measured(shape, &p, args, device, |k| {
        let seed = dense::shape_seed(args.seed, shape);
        let table = descale_table(&p);
        let mut draw = Draw::lengths(vec![p.seq_q; p.batch], vec![p.seq_k; p.batch]);
        draw.q_descale = Some(table.clone());
        draw.k_descale = Some(table.clone());
        draw.v_descale = Some(table.clone());
        let dims = |heads, seq| [p.batch, heads, seq, p.head_dim];
        let stored = |heads, seq, seed, group| {
            let x = random_tensor_parallel(p.dtype, dims(heads, seq), seed);
            to_layout(quantize(x, group).view(), layout)
                .to_owned()
                .into_dyn()
        };
        let inp = StorageInputs {
            q: stored(p.heads_q, p.seq_q, seed, p.q_heads_per_kv()),
            k: stored(p.heads_kv, p.seq_k, seed ^ 1, 1),
            v: stored(p.heads_kv, p.seq_k, seed ^ 2, 1),
        };
        let check = ModeCheck::new(&p, &draw, &inp, args.check_rows, seed);
        let bytes = |name, a: &ArrayD<f32>| {
            flashcore::host::e4m3_bytes(name, &a.view()).map_err(|e| anyhow!("{e}"))
        };
        let (qb, kb, vb) = (
            bytes("q", &inp.q)?,
            bytes("k", &inp.k)?,
            bytes("v", &inp.v)?,
        );
        drop(inp);
        let set_bytes = qb.len() + kb.len() + vb.len() + p.o_len() * 2;
        let alloc_bytes = set_bytes + p.lse_len() * 4;
        let n_sets = gpu::sets_on(device, set_bytes, alloc_bytes, gpu::max_sets(args.quick))?;
        let mut bufs = E4m3Buffers::new(device, &p, [&qb, &kb, &vb], &table, n_sets)?;
        drop((qb, kb, vb));
        bufs.poison(device)?;
        if let Err(e) = bufs.forward(k, device, 0) {
            return Ok(Outcome::of_error(e));
        }
        let (o, lse) = bufs.read_output(device)?;
        let verdict = match check.judge_bits(&o, &lse) {
            Ok(v) => v,
            Err(message) => return Ok(Outcome::Wrong { message }),
        };
        let s = gpu::time_calls(timer, device, loop_opts, || bufs.forward_next(k, device))?;
        let mut t = Timing::from_flops(shape.flops(), Some(s.us), None)
            .ok_or_else(|| anyhow!("no time measured"))?;
        debug_assert_eq!(t.method, Method::Eager);
        t.calls = s.calls;
        t.repeats = s.repeats;
        t.sets = bufs.sets.len();
        t.check = Some(format!(
            "ok {:.2} ({} rows)",
            verdict.ratio,
            check.rows_checked()
        ));
        if s.capped {
            t.note = Some(format!("{} samples (time budget)", s.repeats));
        }
        Ok(Outcome::Timed(t))
    })
}

/// One input set of an e4m3 forward: Q, K, V bytes in, O and LSE out.
struct E4m3Set {
    q: CudaSlice<u8>,
    k: CudaSlice<u8>,
    v: CudaSlice<u8>,
    o: CudaSlice<u16>,
    lse: CudaSlice<f32>,
}

/// The rotated input sets of an e4m3 forward and its descale tables (Q's, K's and V's are the
/// same factors, one device copy each as a caller would have them).
struct E4m3Buffers {
    problem: AttentionProblem,
    sets: Vec<E4m3Set>,
    descales: [CudaSlice<f32>; 3],
    next: usize,
}

impl E4m3Buffers {
    /// Set 0 holds the given bytes (layout order); the others are device copies of it.
    fn new(
        device: &Device,
        p: &AttentionProblem,
        [q, k, v]: [&[u8]; 3],
        table: &[f32],
        n_sets: usize,
    ) -> Result<E4m3Buffers> {
        let s = device.stream();
        let what = "uploading an e4m3 input set";
        let mut sets = Vec::with_capacity(n_sets.max(1));
        for i in 0..n_sets.max(1) {
            let up = |x: &[u8], first: Option<&CudaSlice<u8>>| match first {
                Some(f) => cu(s.clone_dtod(f), what),
                None => cu(s.clone_htod(x), what),
            };
            let first = sets.first().filter(|_| i > 0);
            let set = E4m3Set {
                q: up(q, first.map(|f: &E4m3Set| &f.q))?,
                k: up(k, first.map(|f| &f.k))?,
                v: up(v, first.map(|f| &f.v))?,
                o: cu(s.alloc_zeros::<u16>(p.o_len()), "allocating O")?,
                lse: cu(s.alloc_zeros::<f32>(p.lse_len()), "allocating LSE")?,
            };
            sets.push(set);
        }
        let d = || cu(s.clone_htod(table), "uploading a descale table");
        let descales = [d()?, d()?, d()?];
        cu(s.synchronize(), "filling the input sets")?;
        Ok(E4m3Buffers {
            problem: p.clone(),
            sets,
            descales,
            next: 0,
        })
    }

    fn forward(
        &mut self,
        kernel: &dyn Attention,
        device: &Device,
        i: usize,
    ) -> Result<(), flashcore::Error> {
        let set = &mut self.sets[i];
        let [qd, kd, vd] = &self.descales;
        let mut t = AttentionTensors::with_e4m3_qkv(
            self.problem.dtype,
            set.q.as_view(),
            set.k.as_view(),
            set.v.as_view(),
            set.o.as_view_mut(),
            set.lse.as_view_mut(),
        )
        .with_tables(DeviceTables {
            q_descale: Some(qd.as_view()),
            k_descale: Some(kd.as_view()),
            v_descale: Some(vd.as_view()),
            ..DeviceTables::default()
        });
        flashcore::launch::forward(kernel, device, &self.problem, &mut t)
    }

    fn forward_next(&mut self, kernel: &dyn Attention, device: &Device) -> Result<()> {
        let i = self.next;
        self.next = (self.next + 1) % self.sets.len();
        self.forward(kernel, device, i).map_err(|e| anyhow!("{e}"))
    }

    /// Set 0's O and LSE filled with NaN, so that an element the kernel never writes shows.
    fn poison(&mut self, device: &Device) -> Result<()> {
        let s = device.stream();
        let set = &mut self.sets[0];
        let nan = flashcore::host::nan_bits(self.problem.dtype);
        cu(
            s.memcpy_htod(&vec![nan; set.o.len()], &mut set.o),
            "poisoning O",
        )?;
        cu(
            s.memcpy_htod(&vec![f32::NAN; set.lse.len()], &mut set.lse),
            "poisoning LSE",
        )
    }

    /// Set 0's O (bits, layout order) and LSE, after the stream drains.
    fn read_output(&self, device: &Device) -> Result<(Vec<u16>, Vec<f32>)> {
        device.synchronize().map_err(|e| anyhow!("{e}"))?;
        let s = device.stream();
        Ok((
            cu(s.clone_dtoh(&self.sets[0].o), "copying O back")?,
            cu(s.clone_dtoh(&self.sets[0].lse), "copying LSE back")?,
        ))
    }
}

/// `--cudnn-fe-path`, else `$FLASHCORE_CUDNN_FE_PATH`: where the cudnn frontend wheel was
/// installed (`pip install --no-deps --target DIR`).
fn cudnn_fe_path(args: &Args) -> Option<PathBuf> {
    peers::path_or_env(args.cudnn_fe_path.clone(), CUDNN_FE_PATH_ENV)
}

/// The peer script's arguments beyond the shapes: the GEMM lines' size, or none.
pub fn peer_extra_args(no_gemm: bool, gemm_n: usize) -> Vec<String> {
    if no_gemm {
        vec!["--no-gemm".into()]
    } else {
        vec!["--gemm-n".into(), gemm_n.to_string()]
    }
}

/// The cuDNN rows (one per shape, None where there is none) and GEMM lines, from the peer
/// script run now or from `--peers-json`; off with `--no-peers`. Never fails: a peer that
/// cannot run is the header's reason.
fn peer_rows(
    args: &Args,
    shapes: &[Shape],
    out_dir: &Path,
) -> (PeerStatus, Vec<Option<Row>>, Vec<report::GemmLine>) {
    let none = |status| (status, vec![None; shapes.len()], vec![]);
    if args.no_peers {
        return none(PeerStatus::Off);
    }
    let ran: std::result::Result<Value, String> = match &args.peers_json {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))
            .and_then(|t| {
                serde_json::from_str(&t).map_err(|e| format!("parsing {}: {e}", path.display()))
            }),
        None => run_peer_script(args, shapes, out_dir),
    };
    match ran {
        Ok(v) => report::parse_peers(&v, shapes).unwrap_or_else(|e| {
            none(PeerStatus::Missing {
                reason: format!("peer JSON unreadable: {e:#}"),
            })
        }),
        Err(reason) => {
            eprintln!("bench-all --suite fp8: no cuDNN fp8 peer: {reason}");
            none(PeerStatus::Missing { reason })
        }
    }
}

fn run_peer_script(
    args: &Args,
    shapes: &[Shape],
    out_dir: &Path,
) -> std::result::Result<Value, String> {
    let Some(script) = peers::find_peer_script("cudnn_fp8.py", args.peer_script.as_deref()) else {
        return Err("bench/peers/cudnn_fp8.py not found (run from the repository root)".into());
    };
    let path = cudnn_fe_path(args);
    let on_path = match &path {
        Some(p) => format!(" (PYTHONPATH starts with {})", p.display()),
        None => format!(" (no --cudnn-fe-path / ${CUDNN_FE_PATH_ENV})"),
    };
    let mut env = vec![("PYTHONUNBUFFERED", "1".into())];
    env.extend(peers::python_path_first(path.as_deref()));
    let side = SideScript {
        python: &args.python,
        script: &script,
        env,
        probe: "import torch",
        on_path,
        missing: "torch or CUDA for torch missing",
        backend: CUDNN_BACKEND,
    };
    eprintln!(
        "bench-all --suite fp8: timing cuDNN fp8 and the GEMM references ({}; progress below)",
        script.display()
    );
    let list: Vec<Value> = shapes.iter().map(Shape::peer_json).collect();
    let extra = peer_extra_args(args.no_gemm, args.gemm_n);
    match side.run(&list, out_dir, "-fp8", args.quick, &extra) {
        Ok(r) => r,
        Err(e) => Err(format!("{e:#}")),
    }
}
