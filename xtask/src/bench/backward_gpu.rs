//! The GPU side of `bench-all --pass bwd | fwdbwd`: every compiled-in backward kernel (or those
//! named by `--kernels`) on the dense shapes, timed with the forward bench's event loop
//! (`gpu::time_calls`), then the peers' backward (`torch_sdpa.py --backward`, and FA3's through
//! flash-attn3-jax, `fa3_jax.py --backward`, in a process of its own) and the anchors for what
//! the peers did not time.
//!
//! Per shape: Q, K, V and dO are random normal; O and LSE come from a forward kernel (the fastest
//! compiled-in one that takes the problem, or `--fwd-kernel`) run on every input set, and that
//! forward output is judged by the oracle on sampled rows. Each backward is then run once with
//! dQ, dK, dV poisoned with NaN and must leave them written, finite and not all zero before it
//! is timed. That is not a gradient check: the oracle's f64 gradients cost about six forward
//! references of every row, too slow at bench sizes; `verify --pass bwd` is the gate.

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use flashcore::cudarc::driver::{CudaSlice, DriverError};
use flashcore::{
    Attention, AttentionBackward, AttentionProblem, BackwardTensors, DType, Device, Layout,
    TensorMut, TensorRef,
};
use indicatif::ProgressBar;

use super::backward::{
    self, check_gradients, parse_backward_peers, predicted_skip, AnchorNote, BackwardReport, Pass,
};
use super::dense::{dense_shapes, print_wrong, sweep_bar};
use super::gpu::{self, Buffers, LoopOptions, Timer};
use super::report::{DeviceSummary, Outcome, PeerStatus, Row, Source, Timing};
use super::suite::{self, Shape};
use super::{decode, peers, Args};
use crate::case::ShapeCheck;
use crate::inputs::{random_tensor_parallel, to_layout};

fn cu<T>(r: std::result::Result<T, DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| anyhow!("CUDA error in {what}: {e:?}"))
}

/// dO and the gradients of one input set.
struct GradSet {
    d_o: CudaSlice<u16>,
    dq: CudaSlice<u16>,
    dk: CudaSlice<u16>,
    dv: CudaSlice<u16>,
}

/// The forward's input sets (Q, K, V, O, LSE) with dO, dQ, dK, dV beside each, rotated call
/// to call.
pub struct BackwardBuffers {
    pub fwd: Buffers,
    grads: Vec<GradSet>,
    next: usize,
}

impl BackwardBuffers {
    /// `q`, `k`, `v`, `d_o`: dtype bits in the problem's layout order; every set holds them
    /// (set 0 uploaded, the others device copies).
    pub fn new(
        device: &Device,
        problem: &AttentionProblem,
        [q, k, v, d_o]: [&[u16]; 4],
        sets: usize,
    ) -> Result<BackwardBuffers> {
        BackwardBuffers::from_forward(device, Buffers::new(device, problem, q, k, v, sets)?, d_o)
    }

    /// Beside the forward's sets `fwd` (with the tables of a mode problem, which the backward
    /// takes too), dO (bits, layout order) and dQ, dK, dV for each set.
    pub fn from_forward(device: &Device, fwd: Buffers, d_o: &[u16]) -> Result<BackwardBuffers> {
        let problem = &fwd.problem;
        let s = device.stream();
        let set = |d_o: CudaSlice<u16>| -> Result<GradSet> {
            Ok(GradSet {
                d_o,
                dq: cu(s.alloc_zeros::<u16>(problem.q_len()), "allocating dQ")?,
                dk: cu(s.alloc_zeros::<u16>(problem.k_len()), "allocating dK")?,
                dv: cu(s.alloc_zeros::<u16>(problem.v_len()), "allocating dV")?,
            })
        };
        let mut grads = vec![set(cu(s.clone_htod(d_o), "uploading dO")?)?];
        for _ in 1..fwd.sets.len() {
            let copy = cu(s.clone_dtod(&grads[0].d_o), "copying dO")?;
            grads.push(set(copy)?);
        }
        cu(s.synchronize(), "filling the gradient sets")?;
        Ok(BackwardBuffers {
            fwd,
            grads,
            next: 0,
        })
    }

    pub fn sets(&self) -> usize {
        self.grads.len()
    }

    /// One backward call on set `i` (Q, K, V, O, LSE of the forward, dO, and the forward's tables),
    /// writing its dQ, dK, dV.
    pub fn backward(
        &mut self,
        kernel: &dyn AttentionBackward,
        device: &Device,
        i: usize,
    ) -> Result<(), flashcore::Error> {
        let dtype = self.fwd.problem.dtype;
        let set = &self.fwd.sets[i];
        let g = &mut self.grads[i];
        fn r(data: &CudaSlice<u16>, dtype: DType) -> TensorRef<'_> {
            TensorRef {
                data: data.as_view(),
                dtype,
            }
        }
        let mut t = BackwardTensors {
            q: r(&set.q, dtype),
            k: r(set.k.half(), dtype),
            v: r(set.v.half(), dtype),
            o: r(&set.o, dtype),
            d_o: r(&g.d_o, dtype),
            lse: set.lse.as_view(),
            dq: TensorMut {
                data: g.dq.as_view_mut(),
                dtype,
            },
            dk: TensorMut {
                data: g.dk.as_view_mut(),
                dtype,
            },
            dv: TensorMut {
                data: g.dv.as_view_mut(),
                dtype,
            },
        };
        let tables = self.fwd.tables();
        flashcore::backward_on_with_tables(
            kernel,
            device,
            device.stream(),
            &self.fwd.problem,
            &mut t,
            &tables,
        )
    }

    /// The next set in rotation: `forward` (if given) then `backward`.
    pub fn step_next(
        &mut self,
        forward: Option<&dyn Attention>,
        backward: &dyn AttentionBackward,
        device: &Device,
    ) -> Result<()> {
        let i = self.next;
        self.next = (self.next + 1) % self.sets();
        if let Some(f) = forward {
            self.fwd.forward(f, device, i).map_err(|e| anyhow!("{e}"))?;
        }
        self.backward(backward, device, i)
            .map_err(|e| anyhow!("{e}"))
    }

    /// Fills set `i`'s dQ, dK, dV with NaN, so an element a kernel never writes shows up.
    pub fn poison_grads(&mut self, device: &Device, i: usize) -> Result<()> {
        let s = device.stream();
        let nan = flashcore::host::nan_bits(self.fwd.problem.dtype);
        let g = &mut self.grads[i];
        for (buf, what) in [
            (&mut g.dq, "poisoning dQ"),
            (&mut g.dk, "poisoning dK"),
            (&mut g.dv, "poisoning dV"),
        ] {
            cu(s.memcpy_htod(&vec![nan; buf.len()], buf), what)?;
        }
        Ok(())
    }

    /// Set `i`'s dQ, dK, dV (bits, layout order), after waiting for the stream.
    pub fn read_grads(&self, device: &Device, i: usize) -> Result<[Vec<u16>; 3]> {
        device.synchronize().map_err(|e| anyhow!("{e}"))?;
        let s = device.stream();
        let g = &self.grads[i];
        Ok([
            cu(s.clone_dtoh(&g.dq), "copying dQ back")?,
            cu(s.clone_dtoh(&g.dk), "copying dK back")?,
            cu(s.clone_dtoh(&g.dv), "copying dV back")?,
        ])
    }
}

/// The backward kernels named by `--kernels` (every one compiled in without it), in the
/// facade's order.
pub fn select_backward_kernels(
    names: Option<&[String]>,
) -> Result<Vec<Box<dyn AttentionBackward>>> {
    crate::select::named(
        flashcore::backward_kernels(),
        |k| k.name(),
        names,
        &[],
        "backward kernel",
    )
}

/// `bench-all --pass bwd | fwdbwd`.
pub fn run(args: &Args, out_dir: &Path) -> Result<()> {
    let pass = args.pass;
    if args.suite.is_modes() && args.shapes.is_empty() {
        bail!(
            "--pass {} takes dense problems only: --suite mission, ladder or full, or --shape",
            pass.name()
        );
    }
    let (_, layout, shapes) = dense_shapes(args)?;
    let shapes = suite::filter_by_key(shapes, &args.case_filter);
    if shapes.is_empty() {
        bail!(
            "--case {:?} matches no shape key (e.g. b4-h16-s2048-d64-f16-c1)",
            args.case_filter
        );
    }
    let kernels = select_backward_kernels(args.kernels.as_deref())?;
    if let Some(name) = &args.fwd_kernel {
        if flashcore::kernel(name).is_none() {
            let known: Vec<&str> = flashcore::kernels().iter().map(|k| k.name()).collect();
            bail!(
                "--fwd-kernel: no forward called '{name}' is compiled in; compiled in: {}",
                known.join(", ")
            );
        }
    }
    let (device, info) = super::open_bench_device(args.device, out_dir)?;
    eprintln!(
        "bench-all --pass {}: {}); {} shapes x {} backward kernels ({}); output in {}",
        pass.name(),
        super::device_banner(&info),
        shapes.len(),
        kernels.len(),
        super::kernel_names(&kernels, |k| k.name()),
        out_dir.display()
    );
    let loop_opts = args.loop_options();
    let mut report = BackwardReport {
        pass,
        device: DeviceSummary::of(&info),
        settings: args.settings(layout.name()),
        forward: match &args.fwd_kernel {
            Some(n) => format!("--fwd-kernel {n}"),
            None => "the fastest compiled-in forward that takes the problem".into(),
        },
        peers: PeerStatus::Off,
        anchors: AnchorNote {
            note: "not loaded".into(),
            method: vec![],
        },
        rows: vec![],
    };
    let json = out_dir.join(format!("{}.json", pass.file_stem()));

    // 1. Ours.
    let timer = Timer::new(&device)?;
    let bar = sweep_bar(
        shapes.len() * kernels.len(),
        format!("bench {}", pass.name()),
    );
    let mut budget = Budget {
        spent: vec![0.0; kernels.len()],
        rate: vec![None; kernels.len()],
    };
    for shape in &shapes {
        let rows = bench_shape(
            &device,
            &timer,
            &kernels,
            shape,
            layout,
            args,
            &loop_opts,
            &mut budget,
            &bar,
        );
        print_wrong(&bar, &rows, shape);
        report.rows.extend(rows);
        // Partial results survive a crash later in the run.
        let _ = std::fs::write(&json, serde_json::to_string_pretty(&report)?);
    }
    bar.finish_and_clear();

    // 2. Peers, after ours, with our buffers freed.
    let peer_json = if let Some(path) = &args.peers_json {
        Some(
            std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
                .map_err(|e| format!("--peers-json {}: {e}", path.display())),
        )
    } else if !args.no_peers {
        eprintln!("peers: running the peer script with --backward (progress below)");
        let script = peers::find_script(args.peer_script.as_deref());
        let list: Vec<serde_json::Value> = shapes.iter().map(|s| s.peer_json()).collect();
        // FA3 (flash-attn3-jax) gets `--backward` too; a failure of its process becomes a
        // "skipped" note beside the torch rows, and its anchors fill in (step 3).
        let fa3 = args.fa3_options();
        let suffix = format!("-{}", pass.name());
        let run = peers::PeerRun {
            python: &args.python,
            script: script.as_deref(),
            dir: out_dir,
            suffix: &suffix,
            quick: args.quick,
            extra: &["--backward"],
            fa3: &fa3,
        };
        Some(run.run(&list))
    } else {
        None
    };
    match peer_json {
        None => report.peers = PeerStatus::Off,
        Some(ran) => {
            let (status, rows) =
                peers::peer_outcome(ran, |v| parse_backward_peers(v, &shapes, pass));
            report.peers = status;
            report.rows.extend(rows);
        }
    }

    // 3. Anchors: a labelled fallback for the peers (FA3, SDPA) this run has no time of.
    add_anchors(&mut report, &shapes, args.anchors.as_deref());
    write_and_print(&report, out_dir)
}

/// Adds the backward anchors (`--anchors DIR`, else `../shared/anchors` or `shared/anchors`)
/// for `shapes` to the report, or says why there are none.
pub(crate) fn add_anchors(report: &mut BackwardReport, shapes: &[Shape], dir: Option<&Path>) {
    report.rows.retain(|r| r.source != Source::Anchor);
    let Some(dir) = decode::anchor_dir(dir) else {
        report.anchors = AnchorNote {
            note: "no anchors: pass --anchors DIR (the directory of h100-backward-peers.txt)"
                .into(),
            method: vec![],
        };
        return;
    };
    match backward::load_backward_anchors(&dir) {
        Ok((anchors, note)) => {
            let rows = backward::anchor_rows(&anchors, shapes, report.pass, &report.rows);
            report.rows.extend(rows);
            report.anchors = note;
        }
        Err(e) => {
            report.anchors = AnchorNote {
                note: format!("anchors not loaded: {e:#}"),
                method: vec![],
            }
        }
    }
}

/// Writes `bench-<pass>.json` and `.md` under `dir` and prints the header, the summary and,
/// last, the full table.
pub(crate) fn write_and_print(report: &BackwardReport, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stem = report.pass.file_stem();
    std::fs::write(
        dir.join(format!("{stem}.json")),
        serde_json::to_string_pretty(report)?,
    )?;
    std::fs::write(
        dir.join(format!("{stem}.md")),
        backward::render_markdown(report),
    )?;
    eprintln!(
        "bench-all: wrote {stem}.json and {stem}.md in {}",
        dir.display()
    );
    println!("{}", backward::render_header(report));
    println!("{}", backward::render_summary(report));
    print!("{}", backward::render_table(report));
    Ok(())
}

/// Wall seconds spent per kernel and its last measured rate (FLOP/s), for the skips.
struct Budget {
    spent: Vec<f64>,
    rate: Vec<Option<f64>>,
}

/// The forward that makes O and LSE at this problem: `--fwd-kernel`, else the fastest that
/// takes it.
fn pick_forward(
    problem: &AttentionProblem,
    device: &Device,
    named: Option<&str>,
) -> std::result::Result<Box<dyn Attention>, String> {
    match named {
        Some(n) => {
            let k = flashcore::kernel(n).ok_or_else(|| format!("no forward called '{n}'"))?;
            k.supports(problem, device.info())
                .map_err(|u| format!("forward {n}: unsupported: {}", u.reason))?;
            Ok(k)
        }
        None => flashcore::best_for(problem, device.info()).ok_or_else(|| {
            "no compiled-in forward takes this problem (O and LSE come from one)".into()
        }),
    }
}

/// Checks and times every backward kernel at one shape. Never fails as a whole: whatever goes
/// wrong becomes the rows' outcomes.
#[allow(clippy::too_many_arguments)]
fn bench_shape(
    device: &Device,
    timer: &Timer,
    kernels: &[Box<dyn AttentionBackward>],
    shape: &Shape,
    layout: Layout,
    args: &Args,
    loop_opts: &LoopOptions,
    budget: &mut Budget,
    bar: &ProgressBar,
) -> Vec<Row> {
    let pass = args.pass;
    let problem = shape.problem(layout);
    let flops = pass.flops(shape);
    let mut rows: Vec<Option<Row>> = vec![None; kernels.len()];
    let mut todo = Vec::new();
    for (i, k) in kernels.iter().enumerate() {
        let skip = if let Err(u) = k.supports_backward(&problem, device.info()) {
            Some(Outcome::Unsupported { reason: u.reason })
        } else if budget.spent[i] >= args.max_seconds_per_kernel {
            Some(Outcome::Skipped {
                reason: format!(
                    "--max-seconds-per-kernel ({} s) used up",
                    args.max_seconds_per_kernel
                ),
            })
        } else {
            predicted_skip(
                flops,
                budget.rate[i],
                budget.spent[i],
                args.max_seconds_per_kernel,
            )
            .map(|reason| Outcome::Skipped { reason })
        };
        match skip {
            Some(outcome) => {
                rows[i] = Some(Row::flashcore(shape, k.name(), outcome));
                bar.inc(1);
            }
            None => todo.push(i),
        }
    }
    if todo.is_empty() {
        return rows.into_iter().flatten().collect();
    }
    let fail_all = |rows: &mut Vec<Option<Row>>, outcome: Outcome| {
        for &i in &todo {
            rows[i] = Some(Row::flashcore(shape, kernels[i].name(), outcome.clone()));
            bar.inc(1);
        }
    };
    let forward = match pick_forward(&problem, device, args.fwd_kernel.as_deref()) {
        Ok(f) => f,
        Err(message) => {
            fail_all(&mut rows, Outcome::Error { message });
            return rows.into_iter().flatten().collect();
        }
    };
    bar.set_message(format!("{}: inputs, forward and oracle", shape.label()));
    let prepared = gpu::no_panic("preparing", || {
        prepare(device, shape, &problem, forward.as_ref(), args)
    });
    let (mut bufs, forward_check) = match prepared {
        Ok((bufs, Ok(check))) => (bufs, check),
        Ok((_, Err(message))) => {
            fail_all(
                &mut rows,
                Outcome::Wrong {
                    message: format!("forward {} (O, LSE): {message}", forward.name()),
                },
            );
            return rows.into_iter().flatten().collect();
        }
        Err(e) => {
            fail_all(
                &mut rows,
                Outcome::Error {
                    message: format!("{e:#}"),
                },
            );
            return rows.into_iter().flatten().collect();
        }
    };
    for i in todo {
        let k = kernels[i].as_ref();
        bar.set_message(format!("{} @ {}", k.name(), shape.label()));
        let start = Instant::now();
        let outcome = gpu::no_panic(k.name(), || {
            bench_one(
                device,
                timer,
                k,
                forward.as_ref(),
                &forward_check,
                &mut bufs,
                pass,
                flops,
                loop_opts,
            )
        })
        .unwrap_or_else(|e| Outcome::Error {
            message: format!("{e:#}"),
        });
        budget.spent[i] += start.elapsed().as_secs_f64();
        if let Outcome::Timed(t) = &outcome {
            budget.rate[i] = Some(flops / (t.us * 1e-6));
        }
        rows[i] = Some(Row::flashcore(shape, k.name(), outcome));
        bar.inc(1);
    }
    rows.into_iter().flatten().collect()
}

/// The shape's input sets with O and LSE from `forward` on each, and the oracle's judgement of
/// set 0's forward output (`Err`: its one-line reason).
fn prepare(
    device: &Device,
    shape: &Shape,
    problem: &AttentionProblem,
    forward: &dyn Attention,
    args: &Args,
) -> Result<(BackwardBuffers, std::result::Result<String, String>)> {
    let (check, [qb, kb, vb]): (ShapeCheck, _) = super::dense::shape_inputs(shape, problem, args);
    let seed = super::dense::shape_seed(args.seed, shape);
    let d_o = random_tensor_parallel(
        problem.dtype,
        [
            problem.batch,
            problem.heads_q,
            problem.seq_q,
            problem.head_dim,
        ],
        seed ^ 3,
    );
    let dob = flashcore::host::to_bits(problem.dtype, &to_layout(d_o.view(), problem.layout));
    drop(d_o);
    // Read: Q, K, V, O, dO, LSE; written: dQ, dK, dV.
    let elems = 2 * (problem.q_len() + problem.k_len() + problem.v_len() + problem.o_len());
    let set_bytes = elems * 2 + problem.lse_len() * 4;
    let sets = gpu::sets_on(device, set_bytes, set_bytes, gpu::max_sets(args.quick))?;
    let mut bufs = BackwardBuffers::new(device, problem, [&qb, &kb, &vb, &dob], sets)?;
    bufs.fwd.poison(device, 0)?;
    for i in 0..bufs.sets() {
        bufs.fwd
            .forward(forward, device, i)
            .map_err(|e| anyhow!("forward {}: {e}", forward.name()))?;
    }
    let (o, lse) = bufs.fwd.read_output(device, 0)?;
    let verdict = check
        .judge_bits(&o, &lse)
        .map(|v| format!("ok {:.2} ({} rows)", v.ratio, check.rows_checked()));
    Ok((bufs, verdict))
}

/// One backward kernel at one problem: the written-and-finite check, then eager timing of
/// `pass` (the backward alone, or `forward` then the backward).
#[allow(clippy::too_many_arguments)]
fn bench_one(
    device: &Device,
    timer: &Timer,
    k: &dyn AttentionBackward,
    forward: &dyn Attention,
    forward_check: &str,
    bufs: &mut BackwardBuffers,
    pass: Pass,
    flops: f64,
    loop_opts: &LoopOptions,
) -> Result<Outcome> {
    let dtype = bufs.fwd.problem.dtype;
    // The check call also compiles the kernel and warms it up.
    bufs.poison_grads(device, 0)?;
    if let Err(e) = bufs.backward(k, device, 0) {
        return Ok(Outcome::of_error(e));
    }
    let [dq, dk, dv] = bufs.read_grads(device, 0)?;
    let grads_check = match check_gradients(dtype, &[("dQ", &dq), ("dK", &dk), ("dV", &dv)]) {
        Ok(s) => s,
        Err(message) => return Ok(Outcome::Wrong { message }),
    };
    drop((dq, dk, dv));
    let with_forward = (pass == Pass::Fwdbwd).then_some(forward);
    let sampled = gpu::time_calls(timer, device, loop_opts, || {
        bufs.step_next(with_forward, k, device)
    })?;
    let mut t = Timing::from_flops(flops, Some(sampled.us), None)
        .ok_or_else(|| anyhow!("no time measured"))?;
    t.calls = sampled.calls;
    t.repeats = sampled.repeats;
    t.sets = bufs.sets();
    t.check = Some(format!("{grads_check}; forward {forward_check}"));
    let mut notes = vec![format!("forward: {}", forward.name())];
    if sampled.capped {
        notes.push(format!("{} samples (time budget)", sampled.repeats));
    }
    t.note = Some(notes.join("; "));
    Ok(Outcome::Timed(t))
}
