//! The `backward` check of `cargo xtask reliability` (the list in `super` says what it tries):
//! every compiled-in backward kernel (`flashcore::backward_kernels`, filtered by `--kernels`)
//! under three sub-checks, each its own report line:
//!
//! - `nan-padding`: Q, K, V, O, dO and LSE inside larger NaN-filled buffers (custom strides: NaN
//!   past head_dim, past seq, past the heads, before the base pointer) give dQ, dK, dV bit-
//!   identical to the dense run, and the padding of the gradient buffers keeps its sentinel.
//! - `determinism`: a GQA causal problem with several key tiles at each head dim (128, 64),
//!   `--backward-runs` times (1000), bit-identical dQ, dK, dV every time.
//! - `grid`: batch·heads past 65535, a sequence past 65535 rows, and Q-side and K-side tensors
//!   past 2^31 elements: every gradient element finite (written), and where the groups are
//!   small, GQA groups of chosen batches judged by the oracle.

mod placement;

use std::time::Instant;

use flashcore::cudarc::driver::CudaSlice;
use flashcore::{
    Attention, AttentionBackward, AttentionProblem, BackwardTensors, Capabilities, DType, Device,
    Error, Layout, ProblemStrides, TensorMut, TensorRef,
};

use super::device::{alloc_f32, alloc_u16, download16, memset16, upload, DevCase};
use super::host::{count_nan_bits, count_nonfinite_bits, mib, padding_sentinel, Synth};
use super::watchdog::{progress, step};
use super::{dims_in, Args, Report, Res};
use crate::case::{backward_inputs, forward_for_backward, BackwardInputs, Case, NoInputs};
use crate::inputs::precision;
use placement::{backward_device_bytes, compare_padded, spot_batches, Padding, Placement};

const CHECK: &str = "backward";

/// Device memory one grid problem may hold (the H100 has 80 GB; other work may share it).
const MEMORY_CAP: usize = 30 << 30;

pub(super) fn run(dev: &Device, _forward: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    let all = flashcore::backward_kernels();
    let names: Vec<&str> = all.iter().map(|k| k.name()).collect();
    let compiled_in = names.join(", ");
    let kernels: Vec<&Box<dyn AttentionBackward>> = all
        .iter()
        .filter(|k| {
            args.kernels
                .as_ref()
                .is_none_or(|n| n.iter().any(|x| x == k.name()))
        })
        .collect();
    if kernels.is_empty() {
        report.add(
            CHECK,
            "-",
            Res::Skip,
            format!("no backward kernel among --kernels (compiled in: {compiled_in})"),
            Instant::now(),
        );
        return;
    }
    for k in kernels {
        nan_padding(dev, k.as_ref(), args, report);
        for p in determinism_problems(&k.capabilities()) {
            determinism(dev, k.as_ref(), &p, args, report);
        }
        for case in grid_cases(&k.capabilities(), args.no_huge) {
            grid(dev, k.as_ref(), &case, args, report);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Device buffers of one backward call

/// Where Q, K, V and O sit in their buffers; dO sits like O, dQ like Q, dK like K, dV like V.
#[derive(Clone, Copy, Debug)]
struct Places {
    q: Placement,
    k: Placement,
    v: Placement,
    o: Placement,
}

impl Places {
    fn dense(p: &AttentionProblem) -> Places {
        let qd = [p.batch, p.heads_q, p.seq_q, p.head_dim];
        let kd = [p.batch, p.heads_kv, p.seq_k, p.head_dim];
        Places {
            q: Placement::dense(p.layout, qd),
            k: Placement::dense(p.layout, kd),
            v: Placement::dense(p.layout, kd),
            o: Placement::dense(p.layout, qd),
        }
    }

    fn padded(p: &AttentionProblem, pads: [Padding; 4]) -> Places {
        let qd = [p.batch, p.heads_q, p.seq_q, p.head_dim];
        let kd = [p.batch, p.heads_kv, p.seq_k, p.head_dim];
        Places {
            q: Placement::padded(qd, pads[0]),
            k: Placement::padded(kd, pads[1]),
            v: Placement::padded(kd, pads[2]),
            o: Placement::padded(qd, pads[3]),
        }
    }

    /// dQ, dK, dV.
    fn grads(&self) -> [Placement; 3] {
        [self.q, self.k, self.v]
    }
}

/// The problem with the padded tensors' strides.
fn with_places(p: &AttentionProblem, places: &Places) -> AttentionProblem {
    let mut pp = p.clone();
    pp.custom_strides = Some(ProblemStrides {
        q: places.q.strides,
        k: places.k.strides,
        v: places.v.strides,
        o: places.o.strides,
    });
    pp
}

/// What a backward call reads, as dtype bits in logical [b, h, s, d] order (LSE as f32).
struct HostBits {
    q: Vec<u16>,
    k: Vec<u16>,
    v: Vec<u16>,
    o: Vec<u16>,
    d_o: Vec<u16>,
    lse: Vec<f32>,
}

impl HostBits {
    fn new(p: &AttentionProblem, bi: &BackwardInputs) -> HostBits {
        let dt = p.dtype;
        let bits = |a: ndarray::ArrayView4<f32>| a.iter().map(|&x| dt.to_bits(x)).collect();
        HostBits {
            q: bits(bi.inputs.q.view()),
            k: bits(bi.inputs.k.view()),
            v: bits(bi.inputs.v.view()),
            // The forward's O is in the layout's order; the axis swap is its own inverse.
            o: bits(crate::inputs::to_layout(bi.forward.o.view(), p.layout)),
            d_o: bits(bi.d_o.view()),
            lse: bi.forward.lse.iter().copied().collect(),
        }
    }
}

/// Device buffers of one backward call: each tensor at an element offset into its buffer, and
/// the images dQ, dK and dV are reset to before every launch (NaN at the elements, so an element
/// never written shows, and a sentinel in padding the kernel must not touch); without images
/// the gradients are set to NaN.
struct BwdBuffers {
    p: AttentionProblem,
    /// Q, K, V, O, dO.
    inputs: [CudaSlice<u16>; 5],
    lse: CudaSlice<f32>,
    /// dQ, dK, dV.
    grads: [CudaSlice<u16>; 3],
    images: Option<[CudaSlice<u16>; 3]>,
    /// Element offsets of Q, K, V, O, dO, LSE, dQ, dK, dV in their buffers.
    off: [usize; 9],
}

fn upload_f32(dev: &Device, what: &str, v: &[f32]) -> Result<CudaSlice<f32>, Error> {
    let v = if v.is_empty() { &[0f32][..] } else { v };
    dev.stream()
        .clone_htod(v)
        .map_err(|e| Error::cuda(format!("copying {what} to the device"), e))
}

impl BwdBuffers {
    /// Buffers for `p` (its strides must be those of `places`), the inputs placed where
    /// `places` says with NaN around them, LSE between `lse_guard` NaNs on each side.
    fn from_host(
        dev: &Device,
        p: &AttentionProblem,
        hb: &HostBits,
        places: &Places,
        lse_guard: usize,
    ) -> Result<BwdBuffers, Error> {
        let dt = p.dtype;
        let nan = flashcore::host::nan_bits(dt);
        let inputs = [
            upload(dev, "q", &places.q.embed(&hb.q, nan))?,
            upload(dev, "k", &places.k.embed(&hb.k, nan))?,
            upload(dev, "v", &places.v.embed(&hb.v, nan))?,
            upload(dev, "o", &places.o.embed(&hb.o, nan))?,
            upload(dev, "d_o", &places.o.embed(&hb.d_o, nan))?,
        ];
        let mut lse = vec![f32::NAN; 2 * lse_guard + hb.lse.len()];
        lse[lse_guard..lse_guard + hb.lse.len()].copy_from_slice(&hb.lse);
        let lse = upload_f32(dev, "lse", &lse)?;
        let sentinel = padding_sentinel(dt);
        let grad_image = |pl: &Placement| pl.embed(&vec![nan; pl.elements()], sentinel);
        let [gq, gk, gv] = places.grads().map(|pl| grad_image(&pl));
        let grads = [
            upload(dev, "dq", &gq)?,
            upload(dev, "dk", &gk)?,
            upload(dev, "dv", &gv)?,
        ];
        let images = if p.custom_strides.is_some() {
            Some([
                upload(dev, "dq image", &gq)?,
                upload(dev, "dk image", &gk)?,
                upload(dev, "dv image", &gv)?,
            ])
        } else {
            None
        };
        let f = |pl: &Placement| pl.front;
        Ok(BwdBuffers {
            p: p.clone(),
            inputs,
            lse,
            grads,
            images,
            off: [
                f(&places.q),
                f(&places.k),
                f(&places.v),
                f(&places.o),
                f(&places.o),
                lse_guard,
                f(&places.q),
                f(&places.k),
                f(&places.v),
            ],
        })
    }

    /// Resets the gradients, launches, waits.
    fn launch(&mut self, kernel: &dyn AttentionBackward, dev: &Device) -> Result<(), Error> {
        let stream = dev.stream().clone();
        match &self.images {
            Some(images) => {
                for (img, g) in images.iter().zip(&mut self.grads) {
                    stream
                        .memcpy_dtod(img, g)
                        .map_err(|e| Error::cuda("restoring a gradient", e))?;
                }
            }
            None => {
                for g in &mut self.grads {
                    memset16(dev, g, flashcore::host::nan_bits(self.p.dtype))?;
                }
            }
        }
        let p = &self.p;
        let dense = p.custom_strides.is_none();
        let need = [
            p.q_len(),
            p.k_len(),
            p.v_len(),
            p.o_len(),
            p.o_len(),
            p.lse_len(),
            p.q_len(),
            p.k_len(),
            p.v_len(),
        ];
        let off = self.off;
        // Dense problems need exact lengths; strided views take the rest of their buffer.
        let range = |i: usize, len: usize| {
            if dense {
                off[i]..off[i] + need[i]
            } else {
                off[i]..len
            }
        };
        let dt = p.dtype;
        fn view(s: &CudaSlice<u16>, r: std::ops::Range<usize>, dtype: DType) -> TensorRef<'_> {
            TensorRef {
                data: s.slice(r),
                dtype,
            }
        }
        let r = |i: usize, s: &CudaSlice<u16>| range(i, s.len());
        let [q, k, v, o, d_o] = &self.inputs;
        let [dq, dk, dv] = &mut self.grads;
        let (nq, nk, nv) = (dq.len(), dk.len(), dv.len());
        let mut t = BackwardTensors {
            q: view(q, r(0, q), dt),
            k: view(k, r(1, k), dt),
            v: view(v, r(2, v), dt),
            o: view(o, r(3, o), dt),
            d_o: view(d_o, r(4, d_o), dt),
            lse: self.lse.slice(range(5, self.lse.len())),
            dq: TensorMut {
                data: dq.slice_mut(range(6, nq)),
                dtype: dt,
            },
            dk: TensorMut {
                data: dk.slice_mut(range(7, nk)),
                dtype: dt,
            },
            dv: TensorMut {
                data: dv.slice_mut(range(8, nv)),
                dtype: dt,
            },
        };
        kernel.backward(dev, p, &mut t)?;
        dev.synchronize()
    }

    /// Launch, then dQ, dK, dV as they came back (whole buffers).
    fn run(
        &mut self,
        kernel: &dyn AttentionBackward,
        dev: &Device,
    ) -> Result<[Vec<u16>; 3], Error> {
        self.launch(kernel, dev)?;
        Ok([
            download16(dev, &self.grads[0])?,
            download16(dev, &self.grads[1])?,
            download16(dev, &self.grads[2])?,
        ])
    }
}

/// The case's backward inputs, or why there are none: `Ok(None)` when the forward that feeds it
/// does not take the problem.
fn inputs_for(
    k: &dyn AttentionBackward,
    dev: &Device,
    p: &AttentionProblem,
    seed: u64,
) -> std::result::Result<Option<BackwardInputs>, String> {
    let case = Case {
        problem: p.clone(),
        data_seed: seed,
    };
    match backward_inputs(k.name(), dev, &case) {
        Ok(bi) => Ok(Some(bi)),
        Err(NoInputs::Unsupported(_)) => Ok(None),
        Err(NoInputs::Failed(m)) => Err(m),
    }
}

const GRADS: [&str; 3] = ["dQ", "dK", "dV"];

// ---------------------------------------------------------------------------------------------
// nan-padding

/// (seq_q, seq_k): one row and key, tails at tile sizes ± 1, seq_q above and below seq_k, no
/// keys at all.
const PADDING_SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (15, 17),
    (65, 130),
    (130, 65),
    (129, 129),
    (17, 200),
    (200, 17),
    (257, 257),
    (33, 0),
];

/// The problems `nan-padding` runs on a backward kernel: every shape at head dims 64 and 128
/// (those it takes), causal and not, GQA where it takes it, dtypes and layouts alternating.
fn padding_problems(caps: &Capabilities) -> Vec<AttentionProblem> {
    let (hq, hkv) = if caps.gqa { (4, 2) } else { (4, 4) };
    let mut v = Vec::new();
    for d in dims_in(&caps.head_dims, &[64, 128]) {
        for &(sq, sk) in PADDING_SHAPES {
            for causal in [false, true] {
                if causal && !caps.causal {
                    continue;
                }
                let i = v.len();
                v.push(
                    AttentionProblem::new(2, hq, sq, d)
                        .with_kv(hkv, sk)
                        .with_causal(causal)
                        .with_dtype(caps.dtypes[i % caps.dtypes.len()])
                        .with_layout(caps.layouts[(i / 2) % caps.layouts.len()]),
                );
            }
        }
    }
    v
}

/// How Q, K, V and O (with dO) are padded in variant `n`: each tensor differently (a kernel
/// that takes one tensor's strides for another's reads or writes the wrong elements), heads
/// outside rows or rows outside heads alternating between tensors and variants. Every amount
/// is a multiple of 8 elements where it moves a row start, so 16-byte loads stay aligned.
fn paddings(n: usize) -> [Padding; 4] {
    let order = |i: usize| Layout::ALL[(n + i) % 2];
    let pad = |cols, rows, heads, i| Padding {
        cols,
        rows,
        heads,
        front: 64,
        back: 64,
        order: order(i),
    };
    [
        pad(8, 29, 1, 0),
        pad(16, 13, 0, 1),
        pad(8, 7, 1, 2),
        pad(0, 3, 2, 3),
    ]
}

fn nan_padding(dev: &Device, k: &dyn AttentionBackward, args: &Args, report: &mut Report) {
    let label = format!("{} [nan-padding]", k.name());
    let t = Instant::now();
    let _s = step(format!("{CHECK} {label}"), args.step_timeout);
    let (mut ran, mut skipped) = (0usize, 0usize);
    let mut fails: Vec<String> = Vec::new();
    for (i, p) in padding_problems(&k.capabilities()).iter().enumerate() {
        progress();
        match padding_one(dev, k, p, i, args.seed.wrapping_add(900 + i as u64)) {
            Ok(true) => ran += 1,
            Ok(false) => skipped += 1,
            Err(m) => {
                ran += 1;
                if fails.len() < 6 {
                    fails.push(format!("{p}: {m}"));
                } else if fails.len() == 6 {
                    fails.push("...".into());
                }
            }
        }
    }
    let failed = fails.iter().filter(|f| *f != "...").count();
    let unsupported = if skipped > 0 {
        format!(", {skipped} unsupported")
    } else {
        String::new()
    };
    if ran == 0 {
        report.add(
            CHECK,
            &label,
            Res::Skip,
            format!("{skipped} cases unsupported"),
            t,
        );
    } else if fails.is_empty() {
        report.add(
            CHECK,
            &label,
            Res::Pass,
            format!(
                "{ran} padded runs bit-identical to dense (tails 1..257, seq_k 0, causal and not, \
                 NaN past seq/head_dim/heads/base in Q, K, V, O, dO, LSE), no gradient padding \
                 written{unsupported}"
            ),
            t,
        );
    } else {
        report.add(
            CHECK,
            &label,
            Res::Fail,
            format!("{failed}+ of {ran} differ: {}", fails.join("; ")),
            t,
        );
    }
}

/// One padded-versus-dense comparison. Ok(false): the kernel (or its forward) does not take
/// the problem.
fn padding_one(
    dev: &Device,
    k: &dyn AttentionBackward,
    p: &AttentionProblem,
    variant: usize,
    seed: u64,
) -> std::result::Result<bool, String> {
    if k.supports_backward(p, dev.info()).is_err() {
        return Ok(false);
    }
    let Some(bi) = inputs_for(k, dev, p, seed)? else {
        return Ok(false);
    };
    let e = |e: Error| e.to_string();
    let hb = HostBits::new(p, &bi);
    let dense = Places::dense(p);
    let mut c = BwdBuffers::from_host(dev, p, &hb, &dense, 0).map_err(e)?;
    let clean = c.run(k, dev).map_err(|err| format!("dense run: {err}"))?;
    let clean: Vec<Vec<u16>> = clean
        .iter()
        .zip(dense.grads())
        .map(|(bits, pl)| pl.gather(bits))
        .collect();
    let unwritten: usize = clean.iter().map(|g| count_nan_bits(p.dtype, g)).sum();
    if unwritten > 0 {
        return Err(format!(
            "dense run left {unwritten} gradient elements NaN (unwritten)"
        ));
    }
    drop(c);

    let padded = Places::padded(p, paddings(variant));
    let pp = with_places(p, &padded);
    flashcore::backward::validate_backward(&pp).map_err(|err| err.to_string())?;
    if let Err(u) = k.supports_backward(&pp, dev.info()) {
        return Err(format!(
            "takes the dense problem but not the padded one: {}",
            u.reason
        ));
    }
    let mut c = BwdBuffers::from_host(dev, &pp, &hb, &padded, 16).map_err(e)?;
    let got = c.run(k, dev).map_err(|err| format!("padded run: {err}"))?;
    let sentinel = padding_sentinel(p.dtype);
    // A kernel that is not deterministic (atomic dQ) may round dQ differently in the two runs:
    // there dQ must be written everywhere and leave its padding alone, not match bit for bit.
    let loose_dq = !k.deterministic();
    let got_dq = padded.grads()[0].gather(&got[0]);
    if loose_dq && count_nan_bits(p.dtype, &got_dq) > 0 {
        return Err(format!(
            "padded run left {} dQ elements NaN (unwritten)",
            count_nan_bits(p.dtype, &got_dq)
        ));
    }
    let why: Vec<String> = (0..3)
        .map(|i| {
            let want = if loose_dq && i == 0 {
                &got_dq
            } else {
                &clean[i]
            };
            compare_padded(want, &padded.grads()[i], &got[i], sentinel)
        })
        .zip(GRADS)
        .filter(|(d, _)| !d.is_clean())
        .map(|(d, name)| d.describe(name))
        .collect();
    if why.is_empty() {
        Ok(true)
    } else {
        Err(why.join(", "))
    }
}

// ---------------------------------------------------------------------------------------------
// determinism

/// GQA (8:2) and causal where the kernel takes them, 700 rows and keys (several key tiles of
/// every tile size, with a tail), at head dims 128 and 64; the two dims take different dtypes
/// and layouts where the kernel has them.
fn determinism_problems(caps: &Capabilities) -> Vec<AttentionProblem> {
    let (hq, hkv) = if caps.gqa { (8, 2) } else { (8, 8) };
    dims_in(&caps.head_dims, &[128, 64])
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            AttentionProblem::new(2, hq, 700, d)
                .with_kv(hkv, 700)
                .with_causal(caps.causal)
                .with_dtype(caps.dtypes[i % caps.dtypes.len()])
                .with_layout(caps.layouts[i % caps.layouts.len()])
        })
        .collect()
}

fn determinism(
    dev: &Device,
    k: &dyn AttentionBackward,
    p: &AttentionProblem,
    args: &Args,
    report: &mut Report,
) {
    let label = format!("{} [determinism d={}]", k.name(), p.head_dim);
    let t = Instant::now();
    let _s = step(format!("{CHECK} {label}"), args.step_timeout);
    if !k.deterministic() {
        let why = "not deterministic by design (dQ accumulated with f32 atomics); its \
                   deterministic schedule is checked under its own name";
        report.add(CHECK, &label, Res::Skip, why.to_string(), t);
        return;
    }
    if let Err(u) = k.supports_backward(p, dev.info()) {
        report.add(CHECK, &label, Res::Skip, u.reason, t);
        return;
    }
    let runs = args.backward_runs.max(1);
    let result = (|| -> std::result::Result<Option<String>, String> {
        let Some(bi) = inputs_for(k, dev, p, args.seed.wrapping_add(41))? else {
            return Ok(None);
        };
        let e = |e: Error| e.to_string();
        let hb = HostBits::new(p, &bi);
        let mut c = BwdBuffers::from_host(dev, p, &hb, &Places::dense(p), 0).map_err(e)?;
        let first = c.run(k, dev).map_err(e)?;
        let unwritten: usize = first.iter().map(|g| count_nan_bits(p.dtype, g)).sum();
        if unwritten > 0 {
            return Err(format!(
                "first run left {unwritten} gradient elements NaN (unwritten)"
            ));
        }
        let (mut differing_runs, mut worst, mut first_run) = (0usize, 0usize, None);
        for run in 1..runs {
            progress();
            let g = c.run(k, dev).map_err(e)?;
            if g != first {
                differing_runs += 1;
                let n: usize = (0..3)
                    .map(|i| g[i].iter().zip(&first[i]).filter(|(a, b)| a != b).count())
                    .sum();
                worst = worst.max(n);
                first_run.get_or_insert(run);
            }
        }
        if differing_runs > 0 {
            return Err(format!(
                "{differing_runs} of {} runs differ from run 0 (first: run {}, up to {worst} elements) on {p}",
                runs - 1,
                first_run.unwrap()
            ));
        }
        Ok(Some(format!(
            "{runs} runs bit-identical (dQ {} + dK {} + dV {} elements, NaN-poisoned before each) on {p}",
            first[0].len(),
            first[1].len(),
            first[2].len()
        )))
    })();
    match result {
        Ok(Some(m)) => report.add(CHECK, &label, Res::Pass, m, t),
        Ok(None) => report.add(
            CHECK,
            &label,
            Res::Skip,
            "no forward takes the problem".into(),
            t,
        ),
        Err(m) => report.add(CHECK, &label, Res::Fail, m, t),
    }
}

// ---------------------------------------------------------------------------------------------
// grid

/// One problem at a grid or offset limit.
#[derive(Clone, Debug)]
struct GridCase {
    name: String,
    problem: AttentionProblem,
    /// Judge chosen GQA groups by the oracle (their heads are small enough); otherwise every
    /// element finite is the verdict.
    judge_groups: bool,
}

/// The smallest batch at which `per_batch` elements per batch pass 2^31 elements in all.
fn batch_past_2_pow_31(per_batch: usize) -> usize {
    (1usize << 31) / per_batch + 1
}

/// The grid sub-check's problems for a backward kernel: batch·heads past 65535 (query and kv
/// heads both, GQA 2:1 where taken), a causal sequence of 70001 rows and keys, and unless
/// `no_huge` two problems with tensors past 2^31 elements: Q, O, dO, dQ (K-side tensors an
/// eighth of that through GQA 8:1, or 8× fewer keys without GQA), and K, V, dK, dV (16 query
/// rows against 256 keys).
fn grid_cases(caps: &Capabilities, no_huge: bool) -> Vec<GridCase> {
    let d64 = dims_in(&caps.head_dims, &[64])[0];
    let d128 = dims_in(&caps.head_dims, &[128])[0];
    let dt = |i: usize| caps.dtypes[i % caps.dtypes.len()];
    let (hq, hkv) = if caps.gqa { (32, 16) } else { (32, 32) };
    let wide = AttentionProblem::new(4200, hq, 33, d64)
        .with_kv(hkv, 33)
        .with_causal(caps.causal)
        .with_dtype(dt(0));
    let (hq, hkv) = if caps.gqa { (4, 1) } else { (4, 4) };
    let long = AttentionProblem::new(1, hq, 70_001, d64)
        .with_kv(hkv, 70_001)
        .with_causal(caps.causal)
        .with_dtype(dt(1));
    let mut v = vec![
        GridCase {
            name: format!("batch*heads={}", wide.batch * wide.heads_q),
            problem: wide,
            judge_groups: true,
        },
        GridCase {
            name: "seq=70001".into(),
            problem: long,
            judge_groups: false,
        },
    ];
    if !no_huge {
        let (hkv, sk) = if caps.gqa { (2, 128) } else { (16, 16) };
        let b = batch_past_2_pow_31(16 * 128 * d128);
        let q_side = AttentionProblem::new(b, 16, 128, d128)
            .with_kv(hkv, sk)
            .with_causal(caps.causal)
            .with_dtype(dt(0));
        let b = batch_past_2_pow_31(16 * 256 * d128);
        let k_side = AttentionProblem::new(b, 16, 16, d128)
            .with_kv(16, 256)
            .with_causal(caps.causal)
            .with_dtype(dt(1));
        v.push(GridCase {
            name: "q,o,do,dq >2^31 elements".into(),
            problem: q_side,
            judge_groups: true,
        });
        v.push(GridCase {
            name: "k,v,dk,dv >2^31 elements".into(),
            problem: k_side,
            judge_groups: true,
        });
    }
    v
}

fn gib(bytes: usize) -> f64 {
    mib(bytes) / 1024.0
}

fn grid(
    dev: &Device,
    k: &dyn AttentionBackward,
    case: &GridCase,
    args: &Args,
    report: &mut Report,
) {
    let label = format!("{} [grid {}]", k.name(), case.name);
    let t = Instant::now();
    let _s = step(format!("{CHECK} {label}"), args.step_timeout);
    let p = &case.problem;
    let skip = |report: &mut Report, why: String| report.add(CHECK, &label, Res::Skip, why, t);
    if let Err(u) = k.supports_backward(p, dev.info()) {
        return skip(report, u.reason);
    }
    let Some(forward) =
        forward_for_backward(k.name(), p, dev.info()).filter(|f| f.supports(p, dev.info()).is_ok())
    else {
        return skip(report, "no forward takes the problem (O and LSE)".into());
    };
    let plan = match k.plan_backward(p, dev.info()) {
        Ok(plan) => plan,
        Err(u) => return skip(report, u.reason),
    };
    let need = backward_device_bytes(p, plan.workspace_f32 + plan.workspace_counters);
    if need > MEMORY_CAP {
        return skip(
            report,
            format!(
                "{p} needs {:.1} GiB of device memory, over the check's {:.0} GiB",
                gib(need),
                gib(MEMORY_CAP)
            ),
        );
    }
    let free = dev.memory().map(|(free, _)| free).unwrap_or(0);
    if free < need + (1 << 30) {
        return skip(
            report,
            format!(
                "{p} needs {:.1} GiB of device memory, {:.1} GiB free",
                gib(need),
                gib(free)
            ),
        );
    }
    match grid_one(dev, k, forward.as_ref(), case, args) {
        Ok(Ok(m)) => report.add(CHECK, &label, Res::Pass, m, t),
        Ok(Err(m)) => report.add(CHECK, &label, Res::Fail, m, t),
        Err(Error::Unsupported(u)) => skip(report, u.reason),
        Err(Error::OutOfMemory { what, bytes }) => skip(
            report,
            format!(
                "out of device memory allocating {:.1} GiB for {what} ({p} needs {:.1} GiB)",
                gib(bytes),
                gib(need)
            ),
        ),
        // Any other error is a failure: the problem is valid and the kernel said it takes it.
        Err(e) => report.add(CHECK, &label, Res::Fail, format!("{p}: {e}"), t),
    }
}

/// Runs one grid case: `Err` when a call or copy failed, else the verdict (`Err`: why it
/// fails).
fn grid_one(
    dev: &Device,
    k: &dyn AttentionBackward,
    forward: &dyn Attention,
    case: &GridCase,
    args: &Args,
) -> Result<std::result::Result<String, String>, Error> {
    let p = &case.problem;
    let dt = p.dtype;
    let qd = [p.batch, p.heads_q, p.seq_q, p.head_dim];
    let kd = [p.batch, p.heads_kv, p.seq_k, p.head_dim];
    let synth = |salt: u64, dims| Synth::new(args.seed ^ salt, dt, dims);
    let (sq, sk, sv, sdo) = (
        synth(0x61, qd),
        synth(0x62, kd),
        synth(0x63, kd),
        synth(0x64, qd),
    );
    // Inputs (one host image at a time: each may be 4 GiB), then O and LSE from the forward.
    let q = upload(dev, "q", &sq.dense_bits(p.layout))?;
    progress();
    let kk = upload(dev, "k", &sk.dense_bits(p.layout))?;
    progress();
    let v = upload(dev, "v", &sv.dense_bits(p.layout))?;
    progress();
    let d_o = upload(dev, "d_o", &sdo.dense_bits(p.layout))?;
    progress();
    let mut fwd = DevCase {
        p: p.clone(),
        q,
        k: kk,
        v,
        o: alloc_u16(dev, "o", p.o_len())?,
        lse: alloc_f32(dev, "lse", p.lse_len())?,
        off: [0; 5],
        o_image: None,
        lse_image: None,
    };
    fwd.forward(forward, dev)?;
    dev.synchronize()?;
    progress();
    let DevCase {
        q,
        k: kk,
        v,
        o,
        lse,
        ..
    } = fwd;
    let mut c = BwdBuffers {
        p: p.clone(),
        inputs: [q, kk, v, o, d_o],
        lse,
        grads: [
            alloc_u16(dev, "dq", p.q_len())?,
            alloc_u16(dev, "dk", p.k_len())?,
            alloc_u16(dev, "dv", p.v_len())?,
        ],
        images: None,
        off: [0; 9],
    };
    let t_kernel = Instant::now();
    c.launch(k, dev)?;
    let kernel_s = t_kernel.elapsed().as_secs_f64();
    progress();

    // Every element written and finite; the chosen groups' gradients kept for the oracle.
    let places = Places::dense(p);
    let group = p.heads_q / p.heads_kv;
    let batches = if case.judge_groups {
        spot_batches(p, args.seed)
    } else {
        vec![]
    };
    let mut kv_heads = vec![0, p.heads_kv - 1];
    kv_heads.dedup();
    let groups: Vec<(usize, usize)> = batches
        .iter()
        .flat_map(|&b| kv_heads.iter().map(move |&g| (b, g)))
        .collect();
    let mut kept: Vec<[Vec<u16>; 3]> = vec![Default::default(); groups.len()];
    let mut nonfinite = [0usize; 3];
    for (i, pl) in places.grads().iter().enumerate() {
        let bits = download16(dev, &c.grads[i])?;
        nonfinite[i] = count_nonfinite_bits(dt, &bits[..pl.elements()]);
        for (slot, &(b, g)) in kept.iter_mut().zip(&groups) {
            let heads = if i == 0 {
                g * group..(g + 1) * group
            } else {
                g..g + 1
            };
            slot[i] = pl.gather_heads(&bits, b, heads);
        }
        progress();
    }
    drop(c);
    if nonfinite.iter().any(|&n| n > 0) {
        return Ok(Err(format!(
            "{p}: non-finite (unwritten NaN or overflow) elements: dQ {}, dK {}, dV {}",
            nonfinite[0], nonfinite[1], nonfinite[2]
        )));
    }
    let mut worst = 0.0f64;
    for (&(b, g), got) in groups.iter().zip(&kept) {
        progress();
        let heads_q = g * group..(g + 1) * group;
        let op = flashcore_oracle::OracleProblem::dense(
            1,
            group,
            1,
            p.seq_q,
            p.seq_k,
            p.head_dim,
            p.causal,
            p.scale() as f64,
        );
        let arr = |bits: &[u16], heads: usize, seq: usize| {
            let vals: Vec<f32> = bits.iter().map(|&x| dt.from_bits(x)).collect();
            ndarray::Array4::from_shape_vec([1, heads, seq, p.head_dim], vals)
                .expect("group length")
        };
        let verdict = flashcore_oracle::check_backward(
            &op,
            precision(dt),
            sq.block(b, heads_q.clone()).view(),
            sk.block(b, g..g + 1).view(),
            sv.block(b, g..g + 1).view(),
            sdo.block(b, heads_q).view(),
            arr(&got[0], group, p.seq_q).view(),
            arr(&got[1], 1, p.seq_k).view(),
            arr(&got[2], 1, p.seq_k).view(),
        );
        if !verdict.pass {
            return Ok(Err(format!(
                "{p}: batch {b}, kv head {g}: {}",
                verdict.message
            )));
        }
        worst = worst.max(verdict.ratio);
    }
    let judged = if groups.is_empty() {
        "no oracle (heads too long for it)".to_string()
    } else {
        format!(
            "{} GQA groups judged by the oracle (batches {batches:?}, kv heads {kv_heads:?}), worst ratio {worst:.3}",
            groups.len()
        )
    };
    Ok(Ok(format!(
        "{p}: every dQ, dK, dV element finite; {judged}; backward {kernel_s:.2} s"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashcore::DeviceInfo;

    fn backward_caps() -> Vec<(String, Capabilities)> {
        flashcore::backward_kernels()
            .iter()
            .map(|k| (k.name().to_string(), k.capabilities()))
            .collect()
    }

    #[test]
    fn padding_problems_cover_tails_gqa_causal_and_both_layouts() {
        for (name, caps) in backward_caps() {
            let v = padding_problems(&caps);
            assert!(v.len() >= PADDING_SHAPES.len(), "{name}");
            for p in &v {
                flashcore::backward::validate_backward(p).unwrap();
            }
            assert!(v.iter().any(|p| p.seq_k == 0));
            assert!(v.iter().any(|p| p.seq_q > p.seq_k && p.causal) || !caps.causal);
            assert!(v.iter().any(|p| p.heads_q > p.heads_kv) || !caps.gqa);
            for layout in caps.layouts {
                assert!(v.iter().any(|p| p.layout == *layout), "{name} {layout:?}");
            }
            for dt in caps.dtypes {
                assert!(v.iter().any(|p| p.dtype == *dt), "{name} {dt}");
            }
        }
    }

    #[test]
    fn every_padded_problem_validates_and_the_kernels_that_take_it_dense_take_it_padded() {
        let dev = DeviceInfo::synthetic_h100();
        for k in flashcore::backward_kernels() {
            for (i, p) in padding_problems(&k.capabilities()).iter().enumerate() {
                let places = Places::padded(p, paddings(i));
                let pp = with_places(p, &places);
                flashcore::backward::validate_backward(&pp).unwrap_or_else(|e| panic!("{p}: {e}"));
                // Each buffer holds its tensor from its front offset (what the check passes).
                let lens = [
                    (places.q, pp.q_len()),
                    (places.k, pp.k_len()),
                    (places.v, pp.v_len()),
                    (places.o, pp.o_len()),
                ];
                for (pl, need) in lens {
                    assert!(pl.len - pl.front >= need, "{p}");
                }
                if k.supports_backward(p, &dev).is_ok() {
                    k.supports_backward(&pp, &dev)
                        .unwrap_or_else(|u| panic!("{} {p}: {}", k.name(), u.reason));
                }
            }
        }
    }

    #[test]
    fn padded_strides_are_valid_distinct_per_tensor_and_aligned() {
        let p = AttentionProblem::new(2, 4, 65, 64)
            .with_kv(2, 130)
            .with_causal(true);
        for variant in 0..2 {
            let places = Places::padded(&p, paddings(variant));
            let pp = with_places(&p, &places);
            flashcore::backward::validate_backward(&pp).unwrap();
            let s = pp.strides();
            // No two tensors share strides (Q and O have the same dims, K and V too).
            assert_ne!(s.q, s.o);
            assert_ne!(s.k, s.v);
            for st in [s.q, s.k, s.v, s.o] {
                assert!(st.batch % 8 == 0 && st.head % 8 == 0 && st.row % 8 == 0);
            }
            for pl in [places.q, places.k, places.v, places.o] {
                assert_eq!(pl.front % 8, 0);
                // Padding on every side: before, past the rows and past the tensor.
                assert!(pl.len > pl.elements() + pl.front);
            }
            // Both orders appear across the tensors of a variant.
            let orders: Vec<Layout> = paddings(variant).iter().map(|x| x.order).collect();
            assert!(orders.contains(&Layout::Bhsd) && orders.contains(&Layout::Bshd));
            // The kernels that take the dense problem take the padded one.
            for k in flashcore::backward_kernels() {
                let dev = DeviceInfo::synthetic_h100();
                if k.supports_backward(&p, &dev).is_ok() {
                    k.supports_backward(&pp, &dev).unwrap();
                }
            }
        }
        assert_ne!(paddings(0)[0].order, paddings(1)[0].order);
    }

    #[test]
    fn determinism_problems_have_gqa_causal_and_several_key_tiles() {
        for (name, caps) in backward_caps() {
            let v = determinism_problems(&caps);
            assert!(!v.is_empty(), "{name}");
            for p in &v {
                flashcore::backward::validate_backward(p).unwrap();
                assert!(p.seq_k >= 5 * 128 && p.seq_k % 64 != 0);
                assert!(
                    p.batch * p.heads_q * p.seq_q * p.seq_k <= 1 << 24,
                    "fast to repeat"
                );
                assert_eq!(p.causal, caps.causal);
                assert_eq!(p.heads_q > p.heads_kv, caps.gqa);
            }
        }
    }

    #[test]
    fn grid_problems_pass_the_limits_and_fit_the_memory_cap() {
        for (name, caps) in backward_caps() {
            let small = grid_cases(&caps, true);
            assert_eq!(small.len(), 2);
            let all = grid_cases(&caps, false);
            assert_eq!(all.len(), 4);
            let p = &all[0].problem;
            assert!(p.batch * p.heads_q > 65535 && p.batch * p.heads_kv > 65535);
            assert!(all[1].problem.seq_q > 65535 && all[1].problem.seq_k > 65535);
            assert!(!all[1].judge_groups);
            assert!(all[2].problem.q_len() > 1 << 31, "{name}");
            assert!(all[3].problem.k_len() > 1 << 31, "{name}");
            for c in &all {
                flashcore::backward::validate_backward(&c.problem).unwrap();
                // With a workspace of one f32 per query row (the scalar plan's D).
                let bytes = backward_device_bytes(&c.problem, c.problem.lse_len());
                assert!(bytes <= MEMORY_CAP, "{name} {}: {bytes}", c.name);
                // The oracle's groups are small (a few million multiply-adds each).
                if c.judge_groups {
                    let q = &c.problem;
                    let group = q.heads_q / q.heads_kv;
                    assert!(group * q.seq_q * q.seq_k * q.head_dim <= 1 << 24);
                }
            }
        }
        for per_batch in [16 * 128 * 128, 16 * 256 * 128, 3 * 1000 * 7] {
            let b = batch_past_2_pow_31(per_batch);
            assert!(b * per_batch > 1 << 31 && (b - 1) * per_batch <= 1 << 31);
        }
    }
}
