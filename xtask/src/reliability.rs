//! `cargo xtask reliability`: the failures trusted attention libraries are known for, tried on
//! the GPU for every generation and shown. Each sub-check prints one line per (check, kernel)
//! with PASS / FAIL / SKIP and its numbers, then a summary table; any FAIL exits non-zero.
//!
//! - `badinput`: misaligned base pointers (Unsupported, and `forward_auto` falls back to a
//!   generation that takes them), dtype and length mismatches (an error, nothing launched),
//!   batch 0 / seq_q 0 (empty output), seq_k 0 (O = 0, LSE = +inf), causal seq_q > seq_k, a
//!   softmax scale of 0 and negative, a host array of the wrong shape.
//! - `oob`: inputs padded past seq_q / seq_k / head_dim with NaN (custom strides, NaN before the
//!   base pointer too) give outputs bit-identical to the dense run, and output padding is never
//!   written; tail lengths at tile sizes ± 1, causal and not.
//! - `determinism`: 100 runs of a large causal problem, bit-identical O and LSE; 1000 for the
//!   persistent generation on one large causal problem.
//! - `grid`: batch·heads past the 65535 grid.y/z limit, and Q/O and K/V tensors past 2^31
//!   elements, judged by the oracle on sampled rows (and every element written).
//! - `nonfinite`: NaN and ±Inf planted in Q, K and V: no crash or hang, and the output is NaN
//!   exactly where the f64 reference's is.
//! - `oom`: more device memory than is free gives an out-of-memory error, and the same `Device`
//!   then runs a normal case correctly (no leak from the failed call).
//! - `soak`: 20000 `verify`-style random cases across the generations, zero failures, and
//!   device free memory before and after within a tolerance.
//!
//! A watchdog turns a hang into exit code 3 with the step that hung. docs/RELIABILITY.md.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use flashcore::cudarc::driver::sys;
use flashcore::cudarc::driver::{CudaSlice, DevicePtrMut};
use flashcore::{
    Attention, AttentionProblem, AttentionTensors, DType, Device, Error, HeadDims, InvalidProblem,
    Layout, ProblemStrides, TensorMut, TensorRef, TensorStrides,
};
use flashcore_oracle::{OracleProblem, Rows};
use indicatif::{ProgressBar, ProgressStyle};
use ndarray::{Array3, Array4};

use crate::case::{precision, run_case, Case, Outcome};

pub const CHECKS: &[&str] = &[
    "badinput",
    "oob",
    "determinism",
    "grid",
    "nonfinite",
    "oom",
    "soak",
];

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Comma-separated sub-checks (default: all): badinput, oob, determinism, grid, nonfinite,
    /// oom, soak.
    #[arg(long, value_delimiter = ',')]
    pub only: Option<Vec<String>>,
    /// Comma-separated generation names (default: all compiled in).
    #[arg(long, value_delimiter = ',')]
    pub kernels: Option<Vec<String>>,
    /// Repeated runs per generation in `determinism`.
    #[arg(long, default_value_t = 100)]
    pub determinism_runs: usize,
    /// Repeated runs of the persistent generation's large causal case in `determinism`.
    #[arg(long, default_value_t = 1000)]
    pub persistent_runs: usize,
    /// Random cases in `soak`, spread over the generations.
    #[arg(long, default_value_t = 20000)]
    pub soak_cases: usize,
    /// Host threads running soak cases at once (on the one device and stream).
    #[arg(long, default_value_t = 8)]
    pub soak_threads: usize,
    /// Longest seq_q / seq_k drawn in `soak`.
    #[arg(long, default_value_t = 1100)]
    pub soak_max_seq: usize,
    /// Device memory `soak` may lose between before and after (MiB).
    #[arg(long, default_value_t = 64)]
    pub leak_tolerance_mib: usize,
    /// Skip the two tensors past 2^31 elements in `grid` (each needs ~9 GB of device memory
    /// and up to ~40 GB of host memory for the oracle).
    #[arg(long)]
    pub no_huge: bool,
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// Seconds one step may run (or `soak` go without progress) before it counts as a hang:
    /// the run then stops with exit code 3.
    #[arg(long, default_value_t = 600)]
    pub step_timeout: u64,
    /// Write the lines as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

// ---------------------------------------------------------------------------------------------
// Report

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
enum Res {
    Pass,
    Fail,
    Skip,
}

impl Res {
    fn name(self) -> &'static str {
        match self {
            Res::Pass => "PASS",
            Res::Fail => "FAIL",
            Res::Skip => "SKIP",
        }
    }
}

#[derive(Clone, Debug, serde::Serialize)]
struct Line {
    check: &'static str,
    kernel: String,
    result: Res,
    detail: String,
    seconds: f64,
}

#[derive(Default)]
struct Report {
    lines: Vec<Line>,
}

impl Report {
    /// PASS with the notes when nothing failed, else FAIL with the failures.
    fn add_outcome(
        &mut self,
        check: &'static str,
        kernel: &str,
        notes: &[String],
        fails: &[String],
        t: Instant,
    ) {
        if fails.is_empty() {
            self.add(check, kernel, Res::Pass, notes.join("; "), t);
        } else {
            self.add(check, kernel, Res::Fail, fails.join("; "), t);
        }
    }

    fn add(&mut self, check: &'static str, kernel: &str, result: Res, detail: String, t: Instant) {
        let seconds = t.elapsed().as_secs_f64();
        println!(
            "{check:<11} {kernel:<24} {}  {detail}  ({seconds:.1} s)",
            result.name()
        );
        self.lines.push(Line {
            check,
            kernel: kernel.to_string(),
            result,
            detail,
            seconds,
        });
    }

    fn summary(&self) {
        println!();
        println!("| check | kernel | result | detail | seconds |");
        println!("|---|---|---|---|---|");
        for l in &self.lines {
            println!(
                "| {} | {} | {} | {} | {:.1} |",
                l.check,
                l.kernel,
                l.result.name(),
                l.detail.replace('|', "/"),
                l.seconds
            );
        }
        let count = |r: Res| self.lines.iter().filter(|l| l.result == r).count();
        println!();
        println!(
            "reliability: {} passed, {} failed, {} skipped",
            count(Res::Pass),
            count(Res::Fail),
            count(Res::Skip)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Watchdog: a hang becomes exit code 3 naming the step.

struct StepState {
    what: String,
    last_progress: Instant,
    limit: Duration,
}

static STEP: Mutex<Option<StepState>> = Mutex::new(None);

struct Step;

impl Drop for Step {
    fn drop(&mut self) {
        *STEP.lock().unwrap() = None;
    }
}

fn step(what: impl Into<String>, limit_s: u64) -> Step {
    *STEP.lock().unwrap() = Some(StepState {
        what: what.into(),
        last_progress: Instant::now(),
        limit: Duration::from_secs(limit_s),
    });
    Step
}

/// The current step made progress (for long steps made of many small ones).
fn progress() {
    if let Some(s) = STEP.lock().unwrap().as_mut() {
        s.last_progress = Instant::now();
    }
}

fn start_watchdog() {
    std::thread::spawn(|| loop {
        std::thread::sleep(Duration::from_secs(1));
        let guard = STEP.lock().unwrap();
        if let Some(s) = guard.as_ref() {
            if s.last_progress.elapsed() > s.limit {
                eprintln!(
                    "reliability: HANG: '{}' made no progress for {} s; stopping (exit 3)",
                    s.what,
                    s.limit.as_secs()
                );
                std::process::exit(3);
            }
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Host helpers: parallel loops and synthetic inputs that need no RNG state.

fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Calls `f(first_index, chunk)` on disjoint chunks of `out` from every core.
fn par_chunks<T: Send>(out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let per = n.div_ceil(threads()).max(1 << 14);
    std::thread::scope(|s| {
        for (i, chunk) in out.chunks_mut(per).enumerate() {
            let f = &f;
            s.spawn(move || f(i * per, chunk));
        }
    });
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A tensor whose element `i` (logical [b, h, s, d] order) is a function of `(seed, i)` alone:
/// roughly standard normal (Irwin–Hall of four uniforms, unit variance), rounded to the dtype.
/// Any element, row or layout can be produced in parallel without holding the whole tensor.
#[derive(Clone, Copy, Debug)]
struct Synth {
    seed: u64,
    dtype: DType,
    dims: [usize; 4],
}

impl Synth {
    fn new(seed: u64, dtype: DType, dims: [usize; 4]) -> Self {
        Synth { seed, dtype, dims }
    }

    fn len(&self) -> usize {
        self.dims.iter().product()
    }

    fn at(&self, i: usize) -> f32 {
        let h = splitmix(self.seed ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
        let sum: u32 = (0..4).map(|k| ((h >> (16 * k)) & 0xffff) as u32).sum();
        let x = (sum as f32 / 65535.0 - 2.0) * 3f32.sqrt();
        self.dtype.round(x)
    }

    fn full(&self) -> Array4<f32> {
        let mut v = vec![0f32; self.len()];
        par_chunks(&mut v, |start, c| {
            for (j, x) in c.iter_mut().enumerate() {
                *x = self.at(start + j);
            }
        });
        Array4::from_shape_vec(self.dims, v).expect("length matches")
    }

    /// Zeros (lazily committed by the OS) except the given (b, h, s) rows.
    fn rows(&self, rows: &[(usize, usize, usize)]) -> Array4<f32> {
        let [_, nh, ns, d] = self.dims;
        let mut a = Array4::<f32>::zeros(self.dims);
        let flat = a.as_slice_mut().expect("standard layout");
        for &(b, h, s) in rows {
            let base = ((b * nh + h) * ns + s) * d;
            for c in 0..d {
                flat[base + c] = self.at(base + c);
            }
        }
        a
    }

    /// Zeros (lazily committed) except the given (b, h) heads, filled in parallel.
    fn heads(&self, heads: &BTreeSet<(usize, usize)>) -> Array4<f32> {
        let [_, nh, ns, d] = self.dims;
        let mut a = Array4::<f32>::zeros(self.dims);
        let flat = a.as_slice_mut().expect("standard layout");
        let head_len = ns * d;
        if head_len == 0 {
            return a;
        }
        let mut chunks: Vec<(usize, &mut [f32])> = flat
            .chunks_mut(head_len)
            .enumerate()
            .filter(|(i, _)| heads.contains(&(i / nh, i % nh)))
            .collect();
        let per = chunks.len().div_ceil(threads()).max(1);
        std::thread::scope(|s| {
            while !chunks.is_empty() {
                let take = per.min(chunks.len());
                let mine: Vec<(usize, &mut [f32])> = chunks.drain(..take).collect();
                s.spawn(move || {
                    for (i, c) in mine {
                        for (j, x) in c.iter_mut().enumerate() {
                            *x = self.at(i * head_len + j);
                        }
                    }
                });
            }
        });
        a
    }

    /// The tensor as dtype bits in a dense layout's memory order.
    fn dense_bits(&self, layout: Layout) -> Vec<u16> {
        let [_, nh, ns, d] = self.dims;
        let mut out = vec![0u16; self.len()];
        let dt = self.dtype;
        par_chunks(&mut out, |start, c| {
            for (j, x) in c.iter_mut().enumerate() {
                let i = start + j;
                let logical = match layout {
                    Layout::Bhsd => i,
                    Layout::Bshd => {
                        let (row, col) = (i / d, i % d);
                        let (h, rest) = (row % nh, row / nh);
                        let (s, b) = (rest % ns, rest / ns);
                        ((b * nh + h) * ns + s) * d + col
                    }
                };
                *x = dt.to_bits(self.at(logical));
            }
        });
        out
    }
}

fn is_nan_bits(dtype: DType, b: u16) -> bool {
    match dtype {
        DType::F16 => (b & 0x7c00) == 0x7c00 && (b & 0x03ff) != 0,
        DType::Bf16 => (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0,
    }
}

fn count_nan_bits(dtype: DType, bits: &[u16]) -> usize {
    let per = bits.len().div_ceil(threads()).max(1 << 16);
    std::thread::scope(|s| {
        let hs: Vec<_> = bits
            .chunks(per)
            .map(|c| s.spawn(move || c.iter().filter(|&&b| is_nan_bits(dtype, b)).count()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

/// The element offset of logical (b, h, s, 0) under `st`.
fn offset(st: &TensorStrides, b: usize, h: usize, s: usize) -> usize {
    b * st.batch + h * st.head + s * st.row
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

// ---------------------------------------------------------------------------------------------
// Device helpers

fn oom(what: &str, bytes: usize) -> impl FnOnce(flashcore::cudarc::driver::DriverError) -> Error {
    let what = what.to_string();
    move |e| {
        if format!("{e:?}").contains("OUT_OF_MEMORY") {
            Error::OutOfMemory { what, bytes }
        } else {
            Error::cuda(format!("allocating {bytes} bytes for {what}"), e)
        }
    }
}

fn upload(dev: &Device, what: &str, bits: &[u16]) -> Result<CudaSlice<u16>, Error> {
    if bits.is_empty() {
        // A zero-byte allocation is not something every allocator accepts; keep one element.
        return dev.stream().clone_htod(&[0u16][..]).map_err(oom(what, 2));
    }
    dev.stream()
        .clone_htod(bits)
        .map_err(oom(what, bits.len() * 2))
}

fn alloc_u16(dev: &Device, what: &str, n: usize) -> Result<CudaSlice<u16>, Error> {
    // SAFETY: every buffer allocated here is filled (memset or copy) before it is read.
    unsafe { dev.stream().alloc::<u16>(n.max(1)) }.map_err(oom(what, n * 2))
}

fn alloc_f32(dev: &Device, what: &str, n: usize) -> Result<CudaSlice<f32>, Error> {
    // SAFETY: as above.
    unsafe { dev.stream().alloc::<f32>(n.max(1)) }.map_err(oom(what, n * 4))
}

fn memset16(dev: &Device, buf: &mut CudaSlice<u16>, bits: u16) -> Result<(), Error> {
    let n = buf.len();
    let stream = dev.stream().clone();
    dev.context()
        .bind_to_thread()
        .map_err(|e| Error::cuda("binding the context", e))?;
    let (ptr, _sync) = buf.device_ptr_mut(&stream);
    // SAFETY: `ptr` addresses `n` u16 elements of a live allocation, used on this stream.
    unsafe { sys::cuMemsetD16Async(ptr, bits, n, stream.cu_stream()) }
        .result()
        .map_err(|e| Error::cuda("cuMemsetD16Async", e))
}

fn memset32(dev: &Device, buf: &mut CudaSlice<f32>, bits: u32) -> Result<(), Error> {
    let n = buf.len();
    let stream = dev.stream().clone();
    dev.context()
        .bind_to_thread()
        .map_err(|e| Error::cuda("binding the context", e))?;
    let (ptr, _sync) = buf.device_ptr_mut(&stream);
    // SAFETY: as memset16, 4-byte elements.
    unsafe { sys::cuMemsetD32Async(ptr, bits, n, stream.cu_stream()) }
        .result()
        .map_err(|e| Error::cuda("cuMemsetD32Async", e))
}

fn download16(dev: &Device, buf: &CudaSlice<u16>) -> Result<Vec<u16>, Error> {
    dev.synchronize()?;
    dev.stream()
        .clone_dtoh(buf)
        .map_err(|e| Error::cuda("copying a buffer back", e))
}

fn download32(dev: &Device, buf: &CudaSlice<f32>) -> Result<Vec<f32>, Error> {
    dev.synchronize()?;
    dev.stream()
        .clone_dtoh(buf)
        .map_err(|e| Error::cuda("copying a buffer back", e))
}

const LSE_NAN: u32 = 0x7fc0_0000;

/// Device buffers for one problem: each tensor at an element offset into its buffer, with the
/// image O and LSE are reset to before every launch (NaN where the kernel must write, a
/// sentinel in padding it must not touch).
struct DevCase {
    p: AttentionProblem,
    q: CudaSlice<u16>,
    k: CudaSlice<u16>,
    v: CudaSlice<u16>,
    o: CudaSlice<u16>,
    lse: CudaSlice<f32>,
    /// Element offsets of Q, K, V, O and LSE in their buffers.
    off: [usize; 5],
    o_image: Option<CudaSlice<u16>>,
    lse_image: Option<CudaSlice<f32>>,
}

impl DevCase {
    /// Dense buffers (exact lengths, offset 0) for a problem without custom strides.
    fn dense(
        dev: &Device,
        p: &AttentionProblem,
        q: &[u16],
        k: &[u16],
        v: &[u16],
    ) -> Result<DevCase, Error> {
        Ok(DevCase {
            p: p.clone(),
            q: upload(dev, "q", q)?,
            k: upload(dev, "k", k)?,
            v: upload(dev, "v", v)?,
            o: alloc_u16(dev, "o", p.o_len())?,
            lse: alloc_f32(dev, "lse", p.lse_len())?,
            off: [0; 5],
            o_image: None,
            lse_image: None,
        })
    }

    /// Resets O and LSE to their images (or NaN everywhere).
    fn poison(&mut self, dev: &Device) -> Result<(), Error> {
        let stream = dev.stream().clone();
        match &self.o_image {
            Some(img) => stream
                .memcpy_dtod(img, &mut self.o)
                .map_err(|e| Error::cuda("restoring O", e))?,
            None => memset16(dev, &mut self.o, flashcore::host::nan_bits(self.p.dtype))?,
        }
        match &self.lse_image {
            Some(img) => stream
                .memcpy_dtod(img, &mut self.lse)
                .map_err(|e| Error::cuda("restoring LSE", e))?,
            None => memset32(dev, &mut self.lse, LSE_NAN)?,
        }
        Ok(())
    }

    fn forward(&mut self, kernel: &dyn Attention, dev: &Device) -> Result<(), Error> {
        let p = self.p.clone();
        self.with_tensors(p.dtype, 0, |t| kernel.forward(dev, &p, t))
    }

    /// The case's tensors (dense: exact lengths from each offset; strided: the rest of each
    /// buffer), with K tagged `k_dtype` and V `v_short` elements shorter, for the bad-input checks.
    fn with_tensors<R>(
        &mut self,
        k_dtype: DType,
        v_short: usize,
        f: impl FnOnce(&mut AttentionTensors<'_>) -> R,
    ) -> R {
        let p = &self.p;
        let dense = p.custom_strides.is_none();
        let need = [p.q_len(), p.k_len(), p.v_len(), p.o_len(), p.lse_len()];
        let r = |i: usize, len: usize| {
            if dense {
                self.off[i]..self.off[i] + need[i]
            } else {
                self.off[i]..len
            }
        };
        let (rq, rk, mut rv, ro, rl) = (
            r(0, self.q.len()),
            r(1, self.k.len()),
            r(2, self.v.len()),
            r(3, self.o.len()),
            r(4, self.lse.len()),
        );
        rv.end -= v_short;
        let mut t = AttentionTensors {
            q: TensorRef {
                data: self.q.slice(rq),
                dtype: p.dtype,
            },
            k: TensorRef {
                data: self.k.slice(rk),
                dtype: k_dtype,
            },
            v: TensorRef {
                data: self.v.slice(rv),
                dtype: p.dtype,
            },
            o: TensorMut {
                data: self.o.slice_mut(ro),
                dtype: p.dtype,
            },
            lse: self.lse.slice_mut(rl),
        };
        f(&mut t)
    }

    /// Poison, run, wait; O and LSE as they came back (whole buffers).
    fn run(&mut self, kernel: &dyn Attention, dev: &Device) -> Result<(Vec<u16>, Vec<f32>), Error> {
        self.poison(dev)?;
        self.forward(kernel, dev)?;
        dev.synchronize()?;
        Ok((download16(dev, &self.o)?, download32(dev, &self.lse)?))
    }
}

fn selected_kernels(names: &Option<Vec<String>>) -> Result<Vec<Box<dyn Attention>>> {
    let all = flashcore::kernels();
    if let Some(names) = names {
        for n in names {
            if !all.iter().any(|k| k.name() == n) {
                let have: Vec<&str> = all.iter().map(|k| k.name()).collect();
                bail!("unknown kernel '{n}' (compiled in: {})", have.join(", "));
            }
        }
    }
    Ok(all
        .into_iter()
        .filter(|k| {
            names
                .as_ref()
                .is_none_or(|n| n.iter().any(|x| x == k.name()))
        })
        .collect())
}

/// Head dims to try for a kernel: those of `wanted` it takes, else its first representative.
fn dims_for(k: &dyn Attention, wanted: &[usize]) -> Vec<usize> {
    let h = k.capabilities().head_dims;
    let v: Vec<usize> = wanted.iter().copied().filter(|&d| h.contains(d)).collect();
    if !v.is_empty() {
        return v;
    }
    crate::check_kernels::representative_head_dims(&h)
        .into_iter()
        .take(1)
        .collect()
}

fn heads_for(k: &dyn Attention) -> (usize, usize) {
    if k.capabilities().gqa {
        (4, 2)
    } else {
        (4, 4)
    }
}

// ---------------------------------------------------------------------------------------------
// Entry point

pub fn main(args: Args) -> Result<()> {
    let only: Vec<String> = match &args.only {
        Some(v) => {
            for c in v {
                if !CHECKS.contains(&c.as_str()) {
                    bail!("unknown check '{c}' (checks: {})", CHECKS.join(", "));
                }
            }
            v.clone()
        }
        None => CHECKS.iter().map(|s| s.to_string()).collect(),
    };
    let kernels = selected_kernels(&args.kernels)?;
    let dev = match Device::open(args.device) {
        Ok(d) => d,
        Err(e) => bail!(
            "reliability runs on a GPU and there is none here ({e}); the checks that need no GPU \
             are `cargo test -p flashcore-core -p flashcore -p flashcore-cli`"
        ),
    };
    let info = dev.info();
    println!(
        "reliability: device {} (cc {}.{}, {} SMs, {} MiB), kernels {}, checks {}",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.sm_count,
        info.total_memory >> 20,
        kernels
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(","),
        only.join(",")
    );
    start_watchdog();
    let mut report = Report::default();
    let on = |c: &str| only.iter().any(|x| x == c);
    if on("badinput") {
        badinput(&dev, &kernels, &args, &mut report);
    }
    if on("oob") {
        oob(&dev, &kernels, &args, &mut report);
    }
    if on("determinism") {
        determinism(&dev, &kernels, &args, &mut report);
    }
    if on("grid") {
        grid(&dev, &kernels, &args, &mut report);
    }
    if on("nonfinite") {
        nonfinite(&dev, &kernels, &args, &mut report);
    }
    if on("oom") {
        oom_check(&dev, &kernels, &args, &mut report);
    }
    if on("soak") {
        soak(&dev, &kernels, &args, &mut report);
    }
    report.summary();
    crate::verify::print_compile_stats(&dev);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report.lines)?)?;
    }
    let failed = report
        .lines
        .iter()
        .filter(|l| l.result == Res::Fail)
        .count();
    if failed > 0 {
        bail!("{failed} reliability line(s) failed");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// badinput

fn judge_case_outcome(o: Outcome) -> std::result::Result<String, String> {
    match o {
        Outcome::Pass(v) => Ok(format!("ratio {:.3}", v.ratio)),
        Outcome::Skipped(r) => Ok(format!("skipped: {r}")),
        Outcome::Fail(m, _) => Err(m),
    }
}

fn badinput(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    for k in kernels {
        let t = Instant::now();
        let _s = step(format!("badinput {}", k.name()), args.step_timeout);
        let mut notes = Vec::new();
        let mut fails = Vec::new();
        let d = dims_for(k.as_ref(), &[64])[0];
        let (hq, hkv) = heads_for(k.as_ref());
        let p = AttentionProblem::new(1, hq, 100, d)
            .with_kv(hkv, 100)
            .with_causal(k.capabilities().causal)
            .with_layout(Layout::Bhsd);
        if let Err(u) = k.supports(&p, dev.info()) {
            report.add("badinput", k.name(), Res::Skip, u.reason, t);
            continue;
        }
        match badinput_tensors(dev, k.as_ref(), &p, args.seed) {
            Ok(n) => notes.extend(n),
            Err(e) => fails.push(e),
        }
        // Degenerate but valid problems through the host path, judged by the oracle.
        let case = |p: AttentionProblem, seed: u64| Case {
            problem: p,
            data_seed: seed,
        };
        let c = k.capabilities().causal;
        let checks: Vec<(&str, Case)> = vec![
            (
                "seq_k=0",
                case(
                    AttentionProblem::new(2, hq, 33, d)
                        .with_kv(hkv, 0)
                        .with_causal(c),
                    1,
                ),
            ),
            (
                "causal seq_q>seq_k",
                case(
                    AttentionProblem::new(2, hq, 200, d)
                        .with_kv(hkv, 70)
                        .with_causal(c),
                    2,
                ),
            ),
            (
                "scale 0",
                case(
                    AttentionProblem::new(1, hq, 77, d)
                        .with_kv(hkv, 90)
                        .with_scale(0.0),
                    3,
                ),
            ),
            (
                "scale -0.5",
                case(
                    AttentionProblem::new(1, hq, 77, d)
                        .with_kv(hkv, 90)
                        .with_scale(-0.5)
                        .with_causal(c),
                    4,
                ),
            ),
        ];
        for (what, cs) in checks {
            match judge_case_outcome(run_case(k.as_ref(), dev, &cs)) {
                Ok(m) if m.starts_with("skipped") => notes.push(format!("{what} {m}")),
                Ok(_) => notes.push(format!("{what} ok")),
                Err(m) => fails.push(format!("{what}: {m}")),
            }
        }
        for (what, p) in [
            (
                "batch=0",
                AttentionProblem::new(0, hq, 16, d).with_kv(hkv, 16),
            ),
            (
                "seq_q=0",
                AttentionProblem::new(2, hq, 0, d).with_kv(hkv, 16),
            ),
        ] {
            let l = p.layout;
            let q = Array4::<f32>::zeros(l.shape(p.batch, p.heads_q, p.seq_q, d));
            let kv = Array4::<f32>::zeros(l.shape(p.batch, p.heads_kv, p.seq_k, d));
            match flashcore::forward_host(k.as_ref(), dev, &p, q.view(), kv.view(), kv.view()) {
                Ok(out) if out.o.is_empty() && out.lse.is_empty() => {
                    notes.push(format!("{what} empty"))
                }
                Ok(out) => fails.push(format!("{what}: output of {} elements", out.o.len())),
                Err(Error::Unsupported(u)) => {
                    notes.push(format!("{what} unsupported ({})", u.reason))
                }
                Err(e) => fails.push(format!("{what}: {e}")),
            }
        }
        // A host array of the wrong shape.
        let q = Array4::<f32>::zeros(p.layout.shape(1, hq, 100, d));
        let kv = Array4::<f32>::zeros(p.layout.shape(1, hkv, 99, d));
        match flashcore::forward_host(k.as_ref(), dev, &p, q.view(), kv.view(), kv.view()) {
            Err(Error::Invalid(InvalidProblem::ShapeMismatch { tensor: "k", .. })) => {
                notes.push("host shape -> ShapeMismatch".into())
            }
            other => fails.push(format!("wrong host shape: {:?}", other.map(|_| ()))),
        }
        if let Err(e) = dev.synchronize() {
            fails.push(format!("device unusable afterwards: {e}"));
        }
        report.add_outcome("badinput", k.name(), &notes, &fails, t);
    }
}

/// Misaligned base pointers, dtype tags and short buffers on real device views.
fn badinput_tensors(
    dev: &Device,
    k: &dyn Attention,
    p: &AttentionProblem,
    seed: u64,
) -> std::result::Result<Vec<String>, String> {
    let e = |e: Error| e.to_string();
    let mut notes = Vec::new();
    let sq = Synth::new(seed, p.dtype, [p.batch, p.heads_q, p.seq_q, p.head_dim]);
    let sk = Synth::new(
        seed + 1,
        p.dtype,
        [p.batch, p.heads_kv, p.seq_k, p.head_dim],
    );
    let sv = Synth::new(
        seed + 2,
        p.dtype,
        [p.batch, p.heads_kv, p.seq_k, p.head_dim],
    );
    // Q one element past a 16-byte boundary: buffer [pad, q...].
    let mut qbits = vec![0u16; 1];
    qbits.extend(sq.dense_bits(p.layout));
    let kbits = sk.dense_bits(p.layout);
    let vbits = sv.dense_bits(p.layout);
    let mut c = DevCase::dense(dev, p, &qbits, &kbits, &vbits).map_err(e)?;
    c.off[0] = 1;
    let align = k.capabilities().alignment_elems;
    let o_len = p.o_len();
    let nan = flashcore::host::nan_bits(p.dtype);
    let untouched = |c: &DevCase| -> std::result::Result<bool, String> {
        Ok(download16(dev, &c.o).map_err(e)?[..o_len]
            .iter()
            .all(|&b| b == nan))
    };
    let judge = |o: &[u16], lse: &[f32]| -> std::result::Result<f64, String> {
        let op = case_oracle(p);
        let q = sq.full();
        let kk = sk.full();
        let v = sv.full();
        let o = Array4::from_shape_vec(
            [p.batch, p.heads_q, p.seq_q, p.head_dim],
            o[..o_len].iter().map(|&b| p.dtype.from_bits(b)).collect(),
        )
        .unwrap();
        let lse =
            Array3::from_shape_vec((p.batch, p.heads_q, p.seq_q), lse[..p.lse_len()].to_vec())
                .unwrap();
        let v = flashcore_oracle::check(
            &op,
            precision(p.dtype),
            q.view(),
            kk.view(),
            v.view(),
            o.view(),
            lse.view(),
            &Rows::All,
        );
        if v.pass {
            Ok(v.ratio)
        } else {
            Err(v.message)
        }
    };
    c.poison(dev).map_err(e)?;
    match c.forward(k, dev) {
        Err(Error::Unsupported(u)) if align > 1 && u.reason.contains("aligned") => {
            if !untouched(&c)? {
                return Err("misaligned q: Unsupported but O was written".into());
            }
            notes.push("misaligned q -> Unsupported".into());
        }
        Ok(()) if align <= 1 => {
            dev.synchronize().map_err(e)?;
            let o = download16(dev, &c.o).map_err(e)?;
            let lse = download32(dev, &c.lse).map_err(e)?;
            judge(&o, &lse).map_err(|m| format!("misaligned q: {m}"))?;
            notes.push("misaligned q ok".into());
        }
        other => {
            return Err(format!(
                "misaligned q with {align}-element alignment: {:?}",
                other.map_err(|e| e.to_string())
            ))
        }
    }
    // The facade falls back to a generation that takes the misaligned pointer.
    c.poison(dev).map_err(e)?;
    let ran = {
        let pp = c.p.clone();
        c.with_tensors(c.p.dtype, 0, |t| flashcore::forward_auto(dev, &pp, t))
    };
    match ran {
        Ok(name) => {
            dev.synchronize().map_err(e)?;
            let o = download16(dev, &c.o).map_err(e)?;
            let lse = download32(dev, &c.lse).map_err(e)?;
            judge(&o, &lse).map_err(|m| format!("forward_auto on misaligned q ({name}): {m}"))?;
            notes.push(format!("forward_auto -> {name}"));
        }
        Err(err) => return Err(format!("forward_auto on misaligned q: {err}")),
    }
    // K tagged with the other dtype.
    c.poison(dev).map_err(e)?;
    let other = if p.dtype == DType::F16 {
        DType::Bf16
    } else {
        DType::F16
    };
    let r = {
        let pp = c.p.clone();
        c.with_tensors(other, 0, |t| k.forward(dev, &pp, t))
    };
    match r {
        Err(Error::Invalid(InvalidProblem::DTypeMismatch { tensor: "k", .. }))
            if untouched(&c)? =>
        {
            notes.push("k dtype -> DTypeMismatch".into())
        }
        r => {
            return Err(format!(
                "k tagged {other}: {:?}",
                r.map_err(|e| e.to_string())
            ))
        }
    }
    // V one element short.
    let r = {
        let pp = c.p.clone();
        c.with_tensors(c.p.dtype, 1, |t| k.forward(dev, &pp, t))
    };
    match r {
        Err(Error::Invalid(InvalidProblem::LengthMismatch { tensor: "v", .. }))
            if untouched(&c)? =>
        {
            notes.push("short v -> LengthMismatch".into())
        }
        other => return Err(format!("short v: {:?}", other.map_err(|e| e.to_string()))),
    }
    Ok(notes)
}

fn case_oracle(p: &AttentionProblem) -> OracleProblem {
    Case {
        problem: p.clone(),
        data_seed: 0,
    }
    .oracle_problem()
}

// ---------------------------------------------------------------------------------------------
// oob

/// Tail lengths: 1 and tile sizes 16/32/64/128(/192) ± 1.
const TAILS: &[usize] = &[1, 15, 17, 31, 33, 63, 65, 127, 129, 191, 193];
const CROSS: &[(usize, usize)] = &[
    (65, 129),
    (129, 65),
    (1, 193),
    (193, 1),
    (17, 191),
    (191, 17),
];

fn oob(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    for k in kernels {
        let t = Instant::now();
        let _s = step(format!("oob {}", k.name()), args.step_timeout);
        let caps = k.capabilities();
        let (hq, hkv) = heads_for(k.as_ref());
        let mut shapes: Vec<(usize, usize)> = TAILS.iter().map(|&n| (n, n)).collect();
        shapes.extend_from_slice(CROSS);
        let (mut ran, mut skipped) = (0usize, 0usize);
        let mut fails: Vec<String> = Vec::new();
        let mut i = 0u64;
        for d in dims_for(k.as_ref(), &[64, 128]) {
            for &(sq, sk) in &shapes {
                for causal in [false, true] {
                    if causal && !caps.causal {
                        continue;
                    }
                    for cols in [false, true] {
                        i += 1;
                        progress();
                        let dtype = caps.dtypes[i as usize % caps.dtypes.len()];
                        let p = AttentionProblem::new(2, hq, sq, d)
                            .with_kv(hkv, sk)
                            .with_causal(causal)
                            .with_dtype(dtype)
                            .with_layout(Layout::Bhsd);
                        let name = format!(
                            "sq={sq} sk={sk} d={d} {dtype}{}{}",
                            if causal { " causal" } else { "" },
                            if cols {
                                " rows+cols padded"
                            } else {
                                " rows padded"
                            }
                        );
                        match oob_one(dev, k.as_ref(), &p, cols, args.seed ^ i) {
                            Ok(true) => ran += 1,
                            Ok(false) => skipped += 1,
                            Err(m) => {
                                ran += 1;
                                if fails.len() < 6 {
                                    fails.push(format!("{name}: {m}"));
                                } else if fails.len() == 6 {
                                    fails.push("...".into());
                                }
                            }
                        }
                    }
                }
            }
        }
        let failed = fails.iter().filter(|f| *f != "...").count();
        if ran == 0 {
            report.add(
                "oob",
                k.name(),
                Res::Skip,
                format!("{skipped} cases unsupported"),
                t,
            );
        } else if fails.is_empty() {
            report.add(
                "oob",
                k.name(),
                Res::Pass,
                format!(
                    "{ran} padded runs bit-identical to dense (tails 1..193 at tiles ±1, causal and not, NaN past seq/head_dim/base), no writes into padding{}",
                    if skipped > 0 { format!(", {skipped} unsupported") } else { String::new() }
                ),
                t,
            );
        } else {
            report.add(
                "oob",
                k.name(),
                Res::Fail,
                format!("{failed}+ of {ran} differ: {}", fails.join("; ")),
                t,
            );
        }
    }
}

/// One padded-versus-dense comparison. Ok(false): the kernel does not take the problem.
fn oob_one(
    dev: &Device,
    k: &dyn Attention,
    p: &AttentionProblem,
    pad_cols: bool,
    seed: u64,
) -> std::result::Result<bool, String> {
    if k.supports(p, dev.info()).is_err() {
        return Ok(false);
    }
    let e = |e: Error| e.to_string();
    let (b, hq, hkv, sq, sk, d) = (p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k, p.head_dim);
    let dt = p.dtype;
    let nan = flashcore::host::nan_bits(dt);
    // Padding sentinels the kernel must never write: NaNs with a payload no kernel produces.
    let o_sentinel: u16 = match dt {
        DType::F16 => 0x7e5a,
        DType::Bf16 => 0x7fda,
    };
    let lse_sentinel: u32 = 0x7fc0_5a5a;
    let sq_ = Synth::new(seed, dt, [b, hq, sq, d]);
    let sk_ = Synth::new(seed + 1, dt, [b, hkv, sk, d]);
    let sv_ = Synth::new(seed + 2, dt, [b, hkv, sk, d]);

    // Dense run.
    let mut dense = DevCase::dense(
        dev,
        p,
        &sq_.dense_bits(Layout::Bhsd),
        &sk_.dense_bits(Layout::Bhsd),
        &sv_.dense_bits(Layout::Bhsd),
    )
    .map_err(e)?;
    let (o_ref, lse_ref) = dense
        .run(k, dev)
        .map_err(|err| format!("dense run: {err}"))?;
    let o_ref = &o_ref[..p.o_len()];
    let lse_ref = &lse_ref[..p.lse_len()];
    let unwritten = o_ref.iter().filter(|&&x| is_nan_bits(dt, x)).count()
        + lse_ref.iter().filter(|x| x.is_nan()).count();
    if unwritten > 0 {
        return Err(format!(
            "dense run left {unwritten} output elements NaN (unwritten)"
        ));
    }

    // Padded: NaN rows past seq, NaN columns past head_dim, NaN before the base pointer.
    const FRONT: usize = 64;
    const TAIL: usize = 64;
    let row = if pad_cols { d + 8 } else { d };
    let (cap_q, cap_k) = (sq + 29, sk + 29);
    let st = |heads: usize, cap: usize| TensorStrides {
        batch: heads * cap * row,
        head: cap * row,
        row,
    };
    let (stq, stk) = (st(hq, cap_q), st(hkv, cap_k));
    let mut pp = p.clone();
    pp.custom_strides = Some(ProblemStrides {
        q: stq,
        k: stk,
        v: stk,
        o: stq,
    });
    pp.validate().map_err(|err| err.to_string())?;
    if let Err(u) = k.supports(&pp, dev.info()) {
        return Err(format!(
            "takes the dense problem but not the padded one: {}",
            u.reason
        ));
    }
    let image = |s: &Synth, st: &TensorStrides, heads: usize, seq: usize, cap: usize| -> Vec<u16> {
        let mut buf = vec![nan; FRONT + b * heads * cap * row + TAIL];
        for bi in 0..b {
            for h in 0..heads {
                for r in 0..seq {
                    let at = FRONT + offset(st, bi, h, r);
                    let logical = ((bi * heads + h) * seq + r) * d;
                    for c in 0..d {
                        buf[at + c] = dt.to_bits(s.at(logical + c));
                    }
                }
            }
        }
        buf
    };
    let qimg = image(&sq_, &stq, hq, sq, cap_q);
    let kimg = image(&sk_, &stk, hkv, sk, cap_k);
    let vimg = image(&sv_, &stk, hkv, sk, cap_k);
    // O: sentinel everywhere, NaN where the kernel must write.
    let mut oimg = vec![o_sentinel; FRONT + b * hq * cap_q * row + TAIL];
    let mut o_valid = Vec::with_capacity(p.o_len());
    for bi in 0..b {
        for h in 0..hq {
            for r in 0..sq {
                let at = FRONT + offset(&stq, bi, h, r);
                for c in 0..d {
                    oimg[at + c] = nan;
                    o_valid.push(at + c);
                }
            }
        }
    }
    let lse_n = p.lse_len();
    let mut limg = vec![f32::from_bits(lse_sentinel); 16 + lse_n + 16];
    for x in &mut limg[16..16 + lse_n] {
        *x = f32::NAN;
    }
    let mut c = DevCase {
        p: pp,
        q: upload(dev, "q", &qimg).map_err(e)?,
        k: upload(dev, "k", &kimg).map_err(e)?,
        v: upload(dev, "v", &vimg).map_err(e)?,
        o: upload(dev, "o", &oimg).map_err(e)?,
        lse: dev
            .stream()
            .clone_htod(&limg)
            .map_err(|err| format!("{err:?}"))?,
        off: [FRONT, FRONT, FRONT, FRONT, 16],
        o_image: Some(upload(dev, "o image", &oimg).map_err(e)?),
        lse_image: Some(
            dev.stream()
                .clone_htod(&limg)
                .map_err(|err| format!("{err:?}"))?,
        ),
    };
    let (o, lse) = c.run(k, dev).map_err(|err| format!("padded run: {err}"))?;
    // Valid region against the dense run, in the same logical order.
    let mut differ = 0usize;
    let mut first = None;
    for (n, &at) in o_valid.iter().enumerate() {
        if o[at] != o_ref[n] {
            differ += 1;
            if first.is_none() {
                let (r, col) = (n / d, n % d);
                first = Some(format!(
                    "O[{},{},{},{col}] {:#06x} vs dense {:#06x}",
                    r / (hq * sq),
                    (r / sq) % hq,
                    r % sq,
                    o[at],
                    o_ref[n]
                ));
            }
        }
    }
    let lse_differ = (0..lse_n)
        .filter(|&i| lse[16 + i].to_bits() != lse_ref[i].to_bits())
        .count();
    // Padding must be untouched.
    let mut is_valid = vec![false; o.len()];
    for &at in &o_valid {
        is_valid[at] = true;
    }
    let o_pad_writes = (0..o.len())
        .filter(|&i| !is_valid[i] && o[i] != o_sentinel)
        .count();
    let lse_pad_writes = lse[..16]
        .iter()
        .chain(&lse[16 + lse_n..])
        .filter(|x| x.to_bits() != lse_sentinel)
        .count();
    if differ + lse_differ + o_pad_writes + lse_pad_writes > 0 {
        return Err(format!(
            "{differ} O and {lse_differ} LSE elements differ from the dense run{}, {o_pad_writes} O and {lse_pad_writes} LSE padding elements written",
            first.map(|f| format!(" (first {f})")).unwrap_or_default()
        ));
    }
    Ok(true)
}

// ---------------------------------------------------------------------------------------------
// determinism

fn determinism(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    for k in kernels {
        let d = dims_for(k.as_ref(), &[128, 64])[0];
        let p = AttentionProblem::new(8, 16, 1024, d).with_causal(k.capabilities().causal);
        repeat(
            dev,
            k.as_ref(),
            &p,
            args.determinism_runs,
            k.name().to_string(),
            args,
            report,
        );
        if k.name().contains("persistent") && args.persistent_runs > 0 {
            let d = dims_for(k.as_ref(), &[128])[0];
            let p = AttentionProblem::new(4, 16, 8192, d).with_causal(true);
            repeat(
                dev,
                k.as_ref(),
                &p,
                args.persistent_runs,
                format!("{} (large)", k.name()),
                args,
                report,
            );
        }
    }
}

fn repeat(
    dev: &Device,
    k: &dyn Attention,
    p: &AttentionProblem,
    runs: usize,
    label: String,
    args: &Args,
    report: &mut Report,
) {
    let t = Instant::now();
    let _s = step(format!("determinism {label}"), args.step_timeout);
    if let Err(u) = k.supports(p, dev.info()) {
        report.add("determinism", &label, Res::Skip, u.reason, t);
        return;
    }
    let result = (|| -> std::result::Result<String, String> {
        let e = |e: Error| e.to_string();
        let s = |i: u64, h: usize, n: usize| {
            Synth::new(
                args.seed.wrapping_add(i),
                p.dtype,
                [p.batch, h, n, p.head_dim],
            )
        };
        let mut c = DevCase::dense(
            dev,
            p,
            &s(10, p.heads_q, p.seq_q).dense_bits(p.layout),
            &s(11, p.heads_kv, p.seq_k).dense_bits(p.layout),
            &s(12, p.heads_kv, p.seq_k).dense_bits(p.layout),
        )
        .map_err(e)?;
        let (o0, l0) = c.run(k, dev).map_err(e)?;
        let unwritten = count_nan_bits(p.dtype, &o0) + l0.iter().filter(|x| x.is_nan()).count();
        if unwritten > 0 {
            return Err(format!(
                "first run left {unwritten} output elements NaN (unwritten)"
            ));
        }
        let (mut differing_runs, mut worst, mut first) = (0usize, 0usize, None);
        for run in 1..runs {
            progress();
            let (o, l) = c.run(k, dev).map_err(e)?;
            if o != o0
                || l.iter()
                    .map(|x| x.to_bits())
                    .ne(l0.iter().map(|x| x.to_bits()))
            {
                differing_runs += 1;
                let n = o.iter().zip(&o0).filter(|(a, b)| a != b).count()
                    + l.iter()
                        .zip(&l0)
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                worst = worst.max(n);
                first.get_or_insert(run);
            }
        }
        if differing_runs > 0 {
            return Err(format!(
                "{differing_runs} of {} runs differ from run 0 (first: run {}, up to {worst} elements) on {p}",
                runs - 1,
                first.unwrap()
            ));
        }
        Ok(format!(
            "{runs} runs bit-identical (O {} + LSE {} elements) on {p}",
            o0.len(),
            l0.len()
        ))
    })();
    match result {
        Ok(m) => report.add("determinism", &label, Res::Pass, m, t),
        Err(m) => report.add("determinism", &label, Res::Fail, m, t),
    }
}

// ---------------------------------------------------------------------------------------------
// grid

struct BigCase {
    name: &'static str,
    problem: AttentionProblem,
    max_rows: usize,
}

fn grid(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    let mut cases = vec![BigCase {
        name: "batch*heads=67200 (>65535)",
        problem: AttentionProblem::new(4200, 16, 64, 64).with_causal(true),
        max_rows: 2048,
    }];
    if !args.no_huge {
        // Q and O: 32 · 524352 · 128 = 2 147 745 792 elements > 2^31; BSHD, so a row offset
        // alone (row · 32 · 128) passes 2^31.
        cases.push(BigCase {
            name: "q,o >2^31 elements",
            problem: AttentionProblem::new(1, 32, 524_352, 128).with_kv(32, 1024),
            max_rows: 2048,
        });
        // K and V past 2^31 elements; every sampled row reads ~half a million keys in the oracle.
        cases.push(BigCase {
            name: "k,v >2^31 elements",
            problem: AttentionProblem::new(1, 32, 256, 128)
                .with_kv(32, 524_352)
                .with_causal(true)
                .with_dtype(DType::Bf16),
            max_rows: 128,
        });
    }
    for case in cases {
        grid_case(dev, kernels, &case, args, report);
    }
}

fn grid_case(
    dev: &Device,
    kernels: &[Box<dyn Attention>],
    case: &BigCase,
    args: &Args,
    report: &mut Report,
) {
    let p = &case.problem;
    let label = |k: &dyn Attention| format!("{} [{}]", k.name(), case.name);
    let takers: Vec<&Box<dyn Attention>> = kernels
        .iter()
        .filter(|k| k.supports(p, dev.info()).is_ok())
        .collect();
    for k in kernels
        .iter()
        .filter(|k| k.supports(p, dev.info()).is_err())
    {
        let why = k.supports(p, dev.info()).unwrap_err().reason;
        report.add("grid", &label(k.as_ref()), Res::Skip, why, Instant::now());
    }
    if takers.is_empty() {
        return;
    }
    let t_setup = Instant::now();
    let _s = step(format!("grid setup {}", case.name), args.step_timeout);
    let dt = p.dtype;
    let sq = Synth::new(
        args.seed ^ 0x51,
        dt,
        [p.batch, p.heads_q, p.seq_q, p.head_dim],
    );
    let sk = Synth::new(
        args.seed ^ 0x52,
        dt,
        [p.batch, p.heads_kv, p.seq_k, p.head_dim],
    );
    let sv = Synth::new(
        args.seed ^ 0x53,
        dt,
        [p.batch, p.heads_kv, p.seq_k, p.head_dim],
    );
    let setup = (|| -> std::result::Result<_, String> {
        let e = |e: Error| e.to_string();
        let q = upload(dev, "q", &sq.dense_bits(p.layout)).map_err(e)?;
        let k = upload(dev, "k", &sk.dense_bits(p.layout)).map_err(e)?;
        let v = upload(dev, "v", &sv.dense_bits(p.layout)).map_err(e)?;
        let c = DevCase {
            p: p.clone(),
            q,
            k,
            v,
            o: alloc_u16(dev, "o", p.o_len()).map_err(e)?,
            lse: alloc_f32(dev, "lse", p.lse_len()).map_err(e)?,
            off: [0; 5],
            o_image: None,
            lse_image: None,
        };
        // The oracle's inputs: the sampled rows of Q, the kv heads they read.
        let op = case_oracle(p);
        let rows = flashcore_oracle::sample_rows(&op, case.max_rows, args.seed);
        let list = rows.expand(&op);
        let group = p.heads_q / p.heads_kv;
        let kv_heads: BTreeSet<(usize, usize)> =
            list.iter().map(|&(b, h, _)| (b, h / group)).collect();
        let qa = sq.rows(&list);
        let ka = sk.heads(&kv_heads);
        let va = sv.heads(&kv_heads);
        let prec = precision(dt);
        let reference =
            flashcore_oracle::reference_f64(&op, qa.view(), ka.view(), va.view(), &rows);
        let low = flashcore_oracle::reference_low_precision(
            &op,
            prec,
            qa.view(),
            ka.view(),
            va.view(),
            &rows,
        );
        Ok((c, op, rows, list, reference, low))
    })();
    drop(_s);
    let (mut c, op, rows, list, reference, low) = match setup {
        Ok(x) => x,
        Err(m) => {
            for k in &takers {
                report.add(
                    "grid",
                    &label(k.as_ref()),
                    Res::Fail,
                    format!("setup: {m}"),
                    t_setup,
                );
            }
            return;
        }
    };
    println!(
        "grid: {} set up in {:.1} s ({} rows judged, Q {} M elements, K {} M)",
        case.name,
        t_setup.elapsed().as_secs_f64(),
        list.len(),
        p.q_len() >> 20,
        p.k_len() >> 20
    );
    for k in takers {
        let t = Instant::now();
        let _s = step(format!("grid {}", label(k.as_ref())), args.step_timeout);
        let result = (|| -> std::result::Result<String, String> {
            let e = |e: Error| e.to_string();
            c.poison(dev).map_err(e)?;
            let t_kernel = Instant::now();
            c.forward(k.as_ref(), dev).map_err(e)?;
            dev.synchronize().map_err(e)?;
            let kernel_s = t_kernel.elapsed().as_secs_f64();
            let o = download16(dev, &c.o).map_err(e)?;
            let lse = download32(dev, &c.lse).map_err(e)?;
            let unwritten = count_nan_bits(dt, &o[..p.o_len()])
                + lse[..p.lse_len()].iter().filter(|x| x.is_nan()).count();
            // Kernel O of the judged rows, in logical order (zeros elsewhere, never read).
            let mut oa = Array4::<f32>::zeros([p.batch, p.heads_q, p.seq_q, p.head_dim]);
            let st = p.strides().o;
            for &(b, h, r) in &list {
                let at = offset(&st, b, h, r);
                for col in 0..p.head_dim {
                    oa[[b, h, r, col]] = dt.from_bits(o[at + col]);
                }
            }
            drop(o);
            let la =
                Array3::from_shape_vec((p.batch, p.heads_q, p.seq_q), lse[..p.lse_len()].to_vec())
                    .unwrap();
            let v = flashcore_oracle::judge(
                &op,
                precision(dt),
                oa.view(),
                la.view(),
                &rows,
                &reference,
                &low,
            );
            if !v.pass {
                return Err(v.message);
            }
            if unwritten > 0 {
                return Err(format!(
                    "{unwritten} output elements NaN (unwritten) outside the judged rows"
                ));
            }
            Ok(format!(
                "{p}: {} rows judged, ratio {:.3}, every element written, kernel {kernel_s:.2} s",
                v.rows_checked, v.ratio
            ))
        })();
        match result {
            Ok(m) => report.add("grid", &label(k.as_ref()), Res::Pass, m, t),
            Err(m) => report.add("grid", &label(k.as_ref()), Res::Fail, m, t),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// nonfinite

fn nonfinite(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    for k in kernels {
        let t = Instant::now();
        let _s = step(format!("nonfinite {}", k.name()), args.step_timeout);
        let caps = k.capabilities();
        let d = dims_for(k.as_ref(), &[64])[0];
        let (hq, hkv) = heads_for(k.as_ref());
        let dt2 = *caps.dtypes.last().unwrap();
        let mut cases = vec![
            (
                "non-causal",
                AttentionProblem::new(2, hq, 200, d).with_kv(hkv, 200),
            ),
            (
                "non-causal sq!=sk",
                AttentionProblem::new(2, hq, 130, d)
                    .with_kv(hkv, 257)
                    .with_dtype(dt2)
                    .with_layout(Layout::Bhsd),
            ),
        ];
        if caps.causal {
            cases.push((
                "causal",
                AttentionProblem::new(2, hq, 200, d)
                    .with_kv(hkv, 200)
                    .with_causal(true),
            ));
            cases.push((
                "causal sq>sk",
                AttentionProblem::new(2, hq, 300, d)
                    .with_kv(hkv, 150)
                    .with_causal(true)
                    .with_dtype(dt2),
            ));
        }
        let mut notes = Vec::new();
        let mut fails = Vec::new();
        for (i, (what, p)) in cases.into_iter().enumerate() {
            progress();
            match nonfinite_one(dev, k.as_ref(), &p, args.seed.wrapping_add(100 + i as u64)) {
                Ok(Some(m)) => notes.push(format!("{what}: {m}")),
                Ok(None) => notes.push(format!("{what}: unsupported")),
                Err(m) => fails.push(format!("{what} ({p}): {m}")),
            }
        }
        report.add_outcome("nonfinite", k.name(), &notes, &fails, t);
    }
}

fn nonfinite_one(
    dev: &Device,
    k: &dyn Attention,
    p: &AttentionProblem,
    seed: u64,
) -> std::result::Result<Option<String>, String> {
    if k.supports(p, dev.info()).is_err() {
        return Ok(None);
    }
    let dt = p.dtype;
    let mut q = Synth::new(seed, dt, [p.batch, p.heads_q, p.seq_q, p.head_dim]).full();
    let mut kk = Synth::new(seed + 1, dt, [p.batch, p.heads_kv, p.seq_k, p.head_dim]).full();
    let mut v = Synth::new(seed + 2, dt, [p.batch, p.heads_kv, p.seq_k, p.head_dim]).full();
    // Two of each of NaN, +Inf, -Inf in each of Q, K and V, at places drawn from the seed.
    // Not in V of causal problems: the tensor-core kernels multiply a masked key's V row by
    // p = 0 inside a diagonal tile, and 0 * NaN = NaN (FlashAttention behaves the same); the
    // oracle leaves masked keys out entirely. docs/RELIABILITY.md records this deviation.
    let mut z = seed;
    let mut next = |n: usize| {
        z = splitmix(z);
        (z % n as u64) as usize
    };
    let planted: Vec<&mut ndarray::Array4<f32>> = if p.causal {
        vec![&mut q, &mut kk]
    } else {
        vec![&mut q, &mut kk, &mut v]
    };
    for a in planted {
        for val in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for _ in 0..2 {
                let sh = a.shape().to_vec();
                let at = [next(sh[0]), next(sh[1]), next(sh[2]), next(sh[3])];
                a[at] = val;
            }
        }
    }
    let l = p.layout;
    let out = flashcore::forward_host(
        k,
        dev,
        p,
        crate::case::to_layout(q.view(), l),
        crate::case::to_layout(kk.view(), l),
        crate::case::to_layout(v.view(), l),
    )
    .map_err(|e| format!("error: {e}"))?;
    let o = crate::case::to_layout(out.o.view(), l);
    let op = case_oracle(p);
    let verdict = flashcore_oracle::check(
        &op,
        precision(dt),
        q.view(),
        kk.view(),
        v.view(),
        o,
        out.lse.view(),
        &Rows::All,
    );
    let nan_rows = out.lse.iter().filter(|x| x.is_nan()).count();
    if verdict.pass {
        return Ok(Some(format!(
            "NaN exactly where the reference is ({nan_rows} NaN rows of {}), ratio {:.3}",
            out.lse.len(),
            verdict.ratio
        )));
    }
    // Why not: sort the disagreements into the ways a kernel gets non-finite input wrong.
    let (o_ref, lse_ref) =
        flashcore_oracle::reference_f64(&op, q.view(), kk.view(), v.view(), &Rows::All)
            .to_dense(&op);
    let group = p.heads_q / p.heads_kv;
    // Keys (b, kv head, key) holding a planted non-finite value in K or V.
    let bad = |a: &Array4<f32>| -> BTreeSet<(usize, usize, usize)> {
        a.indexed_iter()
            .filter(|(_, x)| !x.is_finite())
            .map(|((b, h, j, _), _)| (b, h, j))
            .collect()
    };
    let (bad_k, bad_v) = (bad(&kk), bad(&v));
    let (mut nan_as_empty, mut nan_as_finite, mut leak_v, mut leak_k, mut leak_other) =
        (0, 0, 0, 0, 0);
    for b in 0..p.batch {
        for h in 0..p.heads_q {
            for r in 0..p.seq_q {
                let (kl, rl) = (out.lse[[b, h, r]], lse_ref[[b, h, r]]);
                if rl.is_nan() && !kl.is_nan() {
                    if kl == f32::INFINITY {
                        nan_as_empty += 1;
                    } else {
                        nan_as_finite += 1;
                    }
                }
                let kernel_nan = (0..p.head_dim)
                    .filter(|&c| o[[b, h, r, c]].is_nan() && !o_ref[[b, h, r, c]].is_nan())
                    .count()
                    + (kl.is_nan() && !rl.is_nan()) as usize;
                if kernel_nan > 0 {
                    let vis = op.visible_keys(r);
                    let masked = |set: &BTreeSet<(usize, usize, usize)>| {
                        set.range((b, h / group, vis)..(b, h / group, usize::MAX))
                            .next()
                            .is_some()
                    };
                    if masked(&bad_v) {
                        leak_v += kernel_nan;
                    } else if masked(&bad_k) {
                        leak_k += kernel_nan;
                    } else {
                        leak_other += kernel_nan;
                    }
                }
            }
        }
    }
    let mut why = Vec::new();
    if nan_as_empty > 0 {
        why.push(format!(
            "{nan_as_empty} rows NaN in the reference come back as no-key rows (LSE = +inf)"
        ));
    }
    if nan_as_finite > 0 {
        why.push(format!(
            "{nan_as_finite} rows NaN in the reference come back with a finite LSE"
        ));
    }
    if leak_v > 0 {
        why.push(format!(
            "{leak_v} values NaN where the reference is finite, in rows with a NaN/Inf in the V row of a masked key (0 * NaN in P*V: masked keys must take no part)"
        ));
    }
    if leak_k > 0 {
        why.push(format!(
            "{leak_k} values NaN where the reference is finite, in rows with a NaN/Inf in the K row of a masked key (the mask must replace the score, not add to it)"
        ));
    }
    if leak_other > 0 {
        why.push(format!(
            "{leak_other} values NaN where the reference is finite (not explained by masked keys)"
        ));
    }
    if why.is_empty() {
        why.push(format!(
            "{} O values NaN in the reference but not in the kernel",
            verdict.nan_mismatch
        ));
    }
    Err(format!(
        "{}; oracle: {} NaN mismatches ({} kernel-only, {} reference-only), ratio {:.3}",
        why.join(", "),
        verdict.unwritten_or_nan + verdict.nan_mismatch,
        verdict.unwritten_or_nan,
        verdict.nan_mismatch,
        verdict.ratio
    ))
}

// ---------------------------------------------------------------------------------------------
// oom

fn oom_check(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    for k in kernels {
        let t = Instant::now();
        let _s = step(format!("oom {}", k.name()), args.step_timeout);
        let d = dims_for(k.as_ref(), &[128, 64])[0];
        let small = Case {
            problem: AttentionProblem::new(1, 4, 129, d).with_causal(k.capabilities().causal),
            data_seed: 77,
        };
        match oom_one(dev, k.as_ref(), &small, d) {
            Ok(Some(m)) => report.add("oom", k.name(), Res::Pass, m, t),
            Ok(None) => report.add(
                "oom",
                k.name(),
                Res::Skip,
                "does not take the small case".into(),
                t,
            ),
            Err(m) => report.add("oom", k.name(), Res::Fail, m, t),
        }
    }
}

fn oom_one(
    dev: &Device,
    k: &dyn Attention,
    small: &Case,
    d: usize,
) -> std::result::Result<Option<String>, String> {
    // Warm up first, so that compiling and loading the module is not what runs out.
    match run_case(k, dev, small) {
        Outcome::Pass(_) => {}
        Outcome::Skipped(_) => return Ok(None),
        Outcome::Fail(m, _) => return Err(format!("the small case fails before any OOM: {m}")),
    }
    dev.synchronize().map_err(|e| e.to_string())?;
    let (free0, total) = dev.memory().map_err(|e| e.to_string())?;
    // 1. One allocation larger than the device.
    let too_big = total + (1 << 30);
    // SAFETY: never read; expected to fail.
    let r = unsafe { dev.stream().alloc::<u8>(too_big) };
    let direct = match r {
        Err(e) if format!("{e:?}").contains("OUT_OF_MEMORY") => {
            "alloc > total -> CUDA_ERROR_OUT_OF_MEMORY".to_string()
        }
        Err(e) => format!("alloc > total -> {e:?}"),
        Ok(_) => {
            return Err(format!(
                "allocating {} MiB (more than the device's {} MiB) succeeded",
                too_big >> 20,
                total >> 20
            ))
        }
    };
    // 2. Fill the device to within 256 MiB, then ask forward_host for ~1 GiB of tensors.
    let mut ballast = None;
    for keep in [256usize << 20, 512 << 20, 1 << 30] {
        if free0 <= keep {
            break;
        }
        // SAFETY: never read.
        if let Ok(b) = unsafe { dev.stream().alloc::<u8>(free0 - keep) } {
            ballast = Some(b);
            break;
        }
    }
    let Some(ballast) = ballast else {
        return Err(format!(
            "could not allocate a ballast near the {} MiB free",
            free0 >> 20
        ));
    };
    let (free_low, _) = dev.memory().map_err(|e| e.to_string())?;
    let seq = ((free_low + (512 << 20)) / (4 * 16 * d * 2)).max(1024);
    let p = AttentionProblem::new(1, 16, seq, d);
    let zero = Array4::<f32>::zeros((1, 1, 1, 1));
    let big = zero.broadcast(p.layout.shape(1, 16, seq, d)).unwrap();
    let r = flashcore::forward_host(k, dev, &p, big, big, big);
    let host = match r {
        Err(Error::OutOfMemory { what, bytes }) => format!(
            "forward_host ({} MiB of tensors, {} MiB free) -> OutOfMemory ({what}, {bytes} bytes)",
            (4 * p.q_len() * 2) >> 20,
            free_low >> 20
        ),
        Err(Error::Cuda { context, message }) if message.contains("OUT_OF_MEMORY") => {
            format!("forward_host -> CUDA error in {context}: {message}")
        }
        Err(e) => {
            return Err(format!(
                "forward_host with {} MiB free: unexpected error {e}",
                free_low >> 20
            ))
        }
        Ok(_) => {
            return Err(format!(
                "forward_host with {} MiB of tensors and {} MiB free succeeded",
                (4 * p.q_len() * 2) >> 20,
                free_low >> 20
            ))
        }
    };
    drop(ballast);
    dev.synchronize()
        .map_err(|e| format!("device unusable after the OOM: {e}"))?;
    let (free1, _) = dev.memory().map_err(|e| e.to_string())?;
    let lost = free0.saturating_sub(free1);
    if lost > 64 << 20 {
        return Err(format!(
            "{host}; but {:.0} MiB less free afterwards (leak?)",
            mib(lost)
        ));
    }
    match run_case(k, dev, small) {
        Outcome::Pass(v) => Ok(Some(format!(
            "{direct}; {host}; then {} passes (ratio {:.3}), free memory back within {:.0} MiB",
            small.to_arg(),
            v.ratio,
            mib(lost)
        ))),
        Outcome::Fail(m, _) => Err(format!("{host}; then the small case FAILS: {m}")),
        Outcome::Skipped(r) => Err(format!("small case skipped after OOM: {r}")),
    }
}

// ---------------------------------------------------------------------------------------------
// soak

fn soak(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let t = Instant::now();
    if kernels.is_empty() || args.soak_cases == 0 {
        return;
    }
    // The cases, drawn up front: round-robin over the generations, each from its own strategy.
    let mut runners: Vec<(TestRunner, _)> = kernels
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut seed = [0u8; 32];
            seed[..8].copy_from_slice(&(args.seed ^ 0x50a4 ^ (i as u64) << 32).to_le_bytes());
            (
                TestRunner::new_with_rng(
                    Config::default(),
                    TestRng::from_seed(RngAlgorithm::ChaCha, &seed),
                ),
                crate::verify::case_strategy(&k.capabilities(), args.soak_max_seq),
            )
        })
        .collect();
    let cases: Vec<(usize, Case)> = (0..args.soak_cases)
        .map(|i| {
            let ki = i % kernels.len();
            let (runner, strategy) = &mut runners[ki];
            (
                ki,
                strategy.new_tree(runner).expect("strategy draws").current(),
            )
        })
        .collect();

    // Load every module the cases can need before measuring memory (a module is device memory
    // that stays, not a leak).
    let _w = step("soak warm-up", args.step_timeout);
    let warm = warmup_cases(dev.info(), kernels);
    let mut warm_fail = Vec::new();
    for (ki, c) in &warm {
        progress();
        if let Outcome::Fail(m, _) = run_case(kernels[*ki].as_ref(), dev, c) {
            warm_fail.push(format!("{}: {} ({m})", kernels[*ki].name(), c.to_arg()));
        }
    }
    drop(_w);
    let before = dev.synchronize().and_then(|_| dev.memory()).map(|m| m.0);

    #[derive(Default, Clone)]
    struct Tally {
        passed: usize,
        failed: usize,
        skipped: usize,
        worst: f64,
        failures: Vec<String>,
    }
    let tallies: Vec<Mutex<Tally>> = kernels
        .iter()
        .map(|_| Mutex::new(Tally::default()))
        .collect();
    let next = AtomicUsize::new(0);
    let bar = ProgressBar::new(cases.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("soak [{bar:30}] {pos}/{len} {msg} ({elapsed}, eta {eta})")
            .unwrap()
            .progress_chars("=> "),
    );
    let failed_total = AtomicUsize::new(0);
    let _s = step("soak", args.step_timeout);
    std::thread::scope(|s| {
        for _ in 0..args.soak_threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= cases.len() {
                    break;
                }
                let (ki, case) = &cases[i];
                let k = kernels[*ki].as_ref();
                let outcome = run_case(k, dev, case);
                let mut t = tallies[*ki].lock().unwrap();
                match outcome {
                    Outcome::Pass(v) => {
                        t.passed += 1;
                        t.worst = t.worst.max(v.ratio);
                    }
                    Outcome::Skipped(_) => t.skipped += 1,
                    Outcome::Fail(m, _) => {
                        t.failed += 1;
                        failed_total.fetch_add(1, Ordering::Relaxed);
                        bar.println(format!(
                            "FAIL soak {}: {m}\n  rerun: cargo xtask verify --kernels {} --case '{}'",
                            k.name(),
                            k.name(),
                            case.to_arg()
                        ));
                        if t.failures.len() < 5 {
                            t.failures.push(case.to_arg());
                        }
                    }
                }
                drop(t);
                progress();
                bar.set_message(format!("{} failed", failed_total.load(Ordering::Relaxed)));
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    drop(_s);
    let after = dev.synchronize().and_then(|_| dev.memory()).map(|m| m.0);
    for (k, tl) in kernels.iter().zip(&tallies) {
        let t_start = t;
        let t = tl.lock().unwrap().clone();
        let msg = format!(
            "{} passed, {} failed, {} skipped (unsupported), worst ratio {:.3}{}",
            t.passed,
            t.failed,
            t.skipped,
            t.worst,
            if t.failures.is_empty() {
                String::new()
            } else {
                format!("; failing: {}", t.failures.join(" "))
            }
        );
        let res = if t.failed > 0 { Res::Fail } else { Res::Pass };
        report.add("soak", k.name(), res, msg, t_start);
    }
    let mem = match (before, after) {
        (Ok(b), Ok(a)) => {
            let lost = b.saturating_sub(a);
            let msg = format!(
                "free device memory {:.0} MiB before (after warm-up), {:.0} MiB after {} cases: {} {:.1} MiB (tolerance {} MiB){}",
                mib(b),
                mib(a),
                cases.len(),
                if a >= b { "gained" } else { "lost" },
                mib(if a >= b { a - b } else { lost }),
                args.leak_tolerance_mib,
                if warm_fail.is_empty() { String::new() } else { format!("; warm-up failures: {}", warm_fail.join(" ")) }
            );
            let res = if lost > args.leak_tolerance_mib << 20 || !warm_fail.is_empty() {
                Res::Fail
            } else {
                Res::Pass
            };
            (res, msg)
        }
        (b, a) => (
            Res::Fail,
            format!(
                "could not read device memory: {:?} / {:?}",
                b.err().map(|e| e.to_string()),
                a.err().map(|e| e.to_string())
            ),
        ),
    };
    report.add("soak", "memory", mem.0, mem.1, t);
}

/// One small case per distinct module (source, entry, defines, dtype) a generation's random
/// cases can load, found by planning over the dtypes, head dims, causal and GQA it takes.
fn warmup_cases(
    info: &flashcore::DeviceInfo,
    kernels: &[Box<dyn Attention>],
) -> Vec<(usize, Case)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (ki, k) in kernels.iter().enumerate() {
        let caps = k.capabilities();
        let dims: Vec<usize> = match &caps.head_dims {
            HeadDims::List(l) => l.to_vec(),
            HeadDims::Range {
                min,
                max,
                multiple_of,
            } => (*min..=*max).filter(|d| d % multiple_of == 0).collect(),
        };
        for &dtype in caps.dtypes {
            for &d in &dims {
                for causal in [false, true] {
                    for (hq, hkv) in [(4, 4), (4, 1)] {
                        for (sq, sk) in [(64, 64), (1, 1000), (1000, 1), (65, 0)] {
                            for &layout in caps.layouts {
                                let p = AttentionProblem::new(1, hq, sq, d)
                                    .with_kv(hkv, sk)
                                    .with_causal(causal)
                                    .with_dtype(dtype)
                                    .with_layout(layout);
                                let Ok(plan) = k.plan(&p, info) else { continue };
                                if k.supports(&p, info).is_err() {
                                    continue;
                                }
                                let mut key: Vec<String> = plan
                                    .launches
                                    .iter()
                                    .map(|l| format!("{}|{}|{:?}", l.source, l.entry, l.defines))
                                    .collect();
                                key.push(dtype.name().into());
                                if sk == 0 {
                                    key = vec!["core_fill".into(), dtype.name().into()];
                                }
                                if seen.insert(key) {
                                    out.push((
                                        ki,
                                        Case {
                                            problem: p,
                                            data_seed: 9,
                                        },
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_inputs_are_deterministic_normalish_and_rounded() {
        let s = Synth::new(7, DType::F16, [2, 3, 50, 64]);
        let a = s.full();
        assert_eq!(a, Synth::new(7, DType::F16, [2, 3, 50, 64]).full());
        assert_ne!(a, Synth::new(8, DType::F16, [2, 3, 50, 64]).full());
        let n = a.len() as f64;
        let mean = a.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = a.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!(
            mean.abs() < 0.05 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
        assert!(a.iter().all(|&x| DType::F16.round(x) == x && x.is_finite()));
    }

    #[test]
    fn dense_bits_follow_the_layout() {
        let s = Synth::new(3, DType::Bf16, [2, 3, 5, 8]);
        let a = s.full();
        for layout in Layout::ALL {
            let bits = s.dense_bits(layout);
            let st = layout.strides(3, 5, 8);
            for b in 0..2 {
                for h in 0..3 {
                    for r in 0..5 {
                        for c in 0..8 {
                            assert_eq!(
                                bits[offset(&st, b, h, r) + c],
                                DType::Bf16.to_bits(a[[b, h, r, c]])
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn partial_tensors_hold_exactly_the_asked_rows_and_heads() {
        let s = Synth::new(5, DType::F16, [2, 4, 6, 8]);
        let full = s.full();
        let rows = s.rows(&[(1, 2, 3), (0, 0, 0)]);
        let heads = s.heads(&[(1, 3), (0, 1)].into_iter().collect());
        for b in 0..2 {
            for h in 0..4 {
                for r in 0..6 {
                    let want_row = [(1, 2, 3), (0, 0, 0)].contains(&(b, h, r));
                    let want_head = [(1, 3), (0, 1)].contains(&(b, h));
                    for c in 0..8 {
                        let x = full[[b, h, r, c]];
                        assert_eq!(rows[[b, h, r, c]], if want_row { x } else { 0.0 });
                        assert_eq!(heads[[b, h, r, c]], if want_head { x } else { 0.0 });
                    }
                }
            }
        }
    }

    #[test]
    fn nan_bits_are_recognised_in_both_dtypes() {
        for dt in DType::ALL {
            assert!(is_nan_bits(dt, flashcore::host::nan_bits(dt)));
            assert!(!is_nan_bits(dt, dt.to_bits(f32::INFINITY)));
            assert!(!is_nan_bits(dt, dt.to_bits(1.5)));
            assert!(is_nan_bits(dt, dt.to_bits(f32::NAN)));
        }
        assert!(is_nan_bits(DType::F16, 0x7e5a) && is_nan_bits(DType::Bf16, 0x7fda));
        let v = vec![0u16, 0x7e00, 0x3c00, 0xfe00];
        assert_eq!(count_nan_bits(DType::F16, &v), 2);
    }

    #[test]
    fn every_check_is_listed_and_names_parse() {
        for c in CHECKS {
            assert!(!c.contains(','));
        }
        assert!(selected_kernels(&Some(vec!["nope".into()])).is_err());
        assert_eq!(
            selected_kernels(&Some(vec!["scalar".into()]))
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn warmup_covers_each_module_once() {
        let info = flashcore::DeviceInfo::synthetic_h100();
        let scalar = selected_kernels(&Some(vec!["scalar".into()])).unwrap();
        // One runtime-head-dim module per dtype, plus the seq_k = 0 fill per dtype.
        let w = warmup_cases(&info, &scalar);
        assert_eq!(
            w.len(),
            4,
            "{:?}",
            w.iter().map(|c| c.1.to_arg()).collect::<Vec<_>>()
        );
        // A generation compiled per head dim gets one case per (head dim, dtype) at least.
        for k in flashcore::kernels() {
            if let HeadDims::List(l) = k.capabilities().head_dims {
                let ks = selected_kernels(&Some(vec![k.name().into()])).unwrap();
                let w = warmup_cases(&info, &ks);
                assert!(
                    w.len() >= l.len() * k.capabilities().dtypes.len(),
                    "{}: {}",
                    k.name(),
                    w.len()
                );
                for (_, c) in &w {
                    c.problem.validate().unwrap();
                }
            }
        }
    }
}
