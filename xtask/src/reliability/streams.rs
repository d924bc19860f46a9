//! The `streams` check of `cargo xtask reliability`: the core's interop with a caller's streams
//! (issue 13), under load.
//!
//! First every problem of a mix (shapes, dtypes, layouts, GQA, decode, no keys, the inference
//! modes, and problems of more work items than the device has SMs, which the generation-5 paths
//! plan with the dynamic schedule's workspace counters) runs once, one after the other, on the
//! device's own stream: the reference. Then `--streams-threads` host threads, each with its own
//! stream of the device's context, call the mix in their own orders at once for
//! `--streams-iterations` calls (or `--streams-seconds`), each call through one of three paths:
//!
//! - the host path with f32 arrays, on a `Device` of the thread's stream (even threads:
//!   `Device::from_stream`, its own workspaces; odd threads: `dev.with_stream`, sharing the
//!   device's per-stream workspace map);
//! - the host path with the problem's own `half::f16` / `half::bf16` arrays (`HostElement`);
//! - device buffers on the thread's stream through `Attention::forward_on` on the shared device.
//!
//! Every output (O, LSE, and the caches after an append) must be bit-identical to the
//! reference, and device free memory must come back to within `--streams-slack-mib` of what it
//! was after the reference pass once the threads' streams are gone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flashcore::cudarc::driver::{CudaSlice, CudaStream};
use flashcore::host::{host_bits, nan_bits, storage_shapes};
use flashcore::{
    Attention, AttentionProblem, AttentionTensors, DType, Device, DeviceInfo, DeviceTables,
    HostElement, HostOutputs,
};
use half::{bf16, f16};
use indicatif::{ProgressBar, ProgressStyle};
use ndarray::ArrayD;

use super::host::{mib, splitmix};
use super::watchdog::{progress, step};
use super::{Args, Report, Res};
use crate::case::Case;
use crate::mode_case::{Draw, ModeInputs};

/// Problems every generation gets where it takes them: GQA, causal, decode, both layouts, no
/// keys at all (the core's fill kernel).
const COMMON: &[&str] = &[
    "b=2,hq=8,hkv=2,sq=300,sk=300,causal=1,dtype=f16",
    "b=1,hq=4,hkv=1,sq=1,sk=777,dtype=bf16",
    "b=3,hq=4,sq=130,sk=65,dtype=bf16,layout=bhsd",
    "b=2,hq=2,sq=65,sk=0,dtype=f16",
];

/// Inference modes (docs/MODES.md), for the generations that claim them: paged decode, an
/// append into a contiguous cache, varlen, windows with softcap and ALiBi on pages.
const MODES: &[&str] = &[
    "b=3,hq=8,hkv=2,sq=1,sk=700,causal=1,cache=paged,bs=16,dtype=bf16",
    "b=3,hq=8,hkv=2,sq=5,sk=700,causal=1,cache=contig,append=5,dtype=f16",
    "b=5,hq=4,hkv=2,sq=300,sk=300,causal=1,varlen=1,dtype=bf16",
    "b=2,hq=4,sq=130,sk=500,cache=paged,bs=48,wl=100,softcap=30,alibi=head,dtype=f16",
];

/// More work items than an H100 has SMs: the generation-5 paths plan these with the dynamic
/// schedule, whose counters are the workspace's first words (given to the persistent
/// generations only; the others would just take long).
const LARGE: &[&str] = &[
    "b=2,hq=16,hkv=4,sq=1024,sk=1024,causal=1,dtype=bf16",
    "b=4,hq=16,sq=512,sk=2048,dtype=f16",
    "b=4,hq=16,hkv=4,sq=512,sk=1024,causal=1,varlen=1,dtype=f16",
];

/// One problem of the mix, for one generation.
#[derive(Clone, Debug)]
pub(super) struct MixCase {
    pub(super) kernel: usize,
    pub(super) case: Case,
    /// The plan's `workspace_counters` on the device (0: the plan uses no counters).
    pub(super) workspace_counters: usize,
}

impl MixCase {
    fn appends(&self) -> bool {
        self.case.problem.modes.append.is_some()
    }
}

/// The mix: for each generation, the problems of `COMMON`, `MODES` and (persistent generations)
/// `LARGE` it takes on this device, at its head dims (128 and 64 in turn where it takes both).
pub(super) fn problem_mix(
    kernels: &[Box<dyn Attention>],
    info: &DeviceInfo,
    seed: u64,
    wanted_dims: &[usize],
) -> Vec<MixCase> {
    let mut mix = Vec::new();
    for (ki, k) in kernels.iter().enumerate() {
        let dims = super::dims_in(&k.capabilities().head_dims, wanted_dims);
        let large: &[&str] = if k.name().contains("persistent") {
            LARGE
        } else {
            &[]
        };
        for (i, line) in COMMON.iter().chain(MODES).chain(large).enumerate() {
            let d = dims[i % dims.len()];
            let case = Case::parse(&format!(
                "{line},d={d},seed={}",
                seed.wrapping_add(i as u64)
            ))
            .expect("the mix's lines parse");
            if k.supports(&case.problem, info).is_err() {
                continue;
            }
            let Ok(plan) = k.plan(&case.problem, info) else {
                continue;
            };
            mix.push(MixCase {
                kernel: ki,
                case,
                workspace_counters: plan.workspace_counters,
            });
        }
    }
    mix
}

/// How a call reaches the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Path {
    /// `forward_host_modes` with f32 arrays on the thread's `Device`.
    HostF32,
    /// `forward_host_modes` with the problem's own f16/bf16 arrays.
    HostNative,
    /// Device buffers on the thread's stream, `Attention::forward_on` on the shared device.
    ForwardOn,
}

const PATHS: [Path; 3] = [Path::HostF32, Path::HostNative, Path::ForwardOn];

/// The calls of thread `thread`: `iterations` (case index into `cases`, path) pairs. Each round
/// visits every case once in an order of its own (so the threads run different problems at the
/// same moment), and the path turns with the call (an append, which `forward_on` does not take,
/// goes through the native host path instead).
pub(super) fn schedule(
    thread: usize,
    iterations: usize,
    cases: &[MixCase],
    seed: u64,
) -> Vec<(usize, Path)> {
    let n = cases.len();
    if n == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(iterations);
    let mut order: Vec<usize> = (0..n).collect();
    for j in 0..iterations {
        if j % n == 0 {
            // Fisher-Yates with a hash of (seed, thread, round).
            let round = (j / n) as u64;
            let mut h = splitmix(seed ^ splitmix(thread as u64 + 1) ^ round.rotate_left(32));
            for i in (1..n).rev() {
                h = splitmix(h);
                order.swap(i, (h % (i as u64 + 1)) as usize);
            }
        }
        let case = order[j % n];
        let mut path = PATHS[(thread + j) % PATHS.len()];
        if path == Path::ForwardOn && cases[case].appends() {
            path = Path::HostNative;
        }
        out.push((case, path));
    }
    out
}

/// A call's outputs as bits: O (and the caches) in the problem's dtype, LSE as f32 bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Bits {
    pub(super) o: Vec<u16>,
    pub(super) lse: Vec<u32>,
    pub(super) k_cache: Option<Vec<u16>>,
    pub(super) v_cache: Option<Vec<u16>>,
}

impl Bits {
    fn of<E: HostElement>(dtype: DType, out: &HostOutputs<E>) -> Bits {
        let bits = |a: &ArrayD<E>| a.iter().map(|&x| x.to_dtype_bits(dtype)).collect();
        Bits {
            o: bits(&out.o),
            lse: out.lse.iter().map(|x| x.to_bits()).collect(),
            k_cache: out.k_cache.as_ref().map(bits),
            v_cache: out.v_cache.as_ref().map(bits),
        }
    }
}

/// `Ok` when `got` is bit-identical to `reference`, else what differs (counts, first index).
pub(super) fn compare(reference: &Bits, got: &Bits) -> Result<(), String> {
    fn diff<T: PartialEq + std::fmt::LowerHex>(what: &str, a: &[T], b: &[T]) -> Option<String> {
        if a.len() != b.len() {
            return Some(format!(
                "{what}: {} elements, reference {}",
                b.len(),
                a.len()
            ));
        }
        let mut differ = a.iter().zip(b).enumerate().filter(|(_, (x, y))| x != y);
        let (first, (x, y)) = differ.next()?;
        Some(format!(
            "{what}: {} of {} elements differ (first at {first}: {y:#x}, reference {x:#x})",
            1 + differ.count(),
            a.len(),
        ))
    }
    let cache = |what: &str, a: &Option<Vec<u16>>, b: &Option<Vec<u16>>| match (a, b) {
        (Some(a), Some(b)) => diff(what, a, b),
        (None, None) => None,
        (Some(_), None) => Some(format!("{what}: missing")),
        (None, Some(_)) => Some(format!("{what}: returned, the reference has none")),
    };
    let problems: Vec<String> = [
        diff("O", &reference.o, &got.o),
        diff("LSE", &reference.lse, &got.lse),
        cache("K cache", &reference.k_cache, &got.k_cache),
        cache("V cache", &reference.v_cache, &got.v_cache),
    ]
    .into_iter()
    .flatten()
    .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The problem's own 16-bit arrays.
enum Native {
    F16(ModeInputs<f16>),
    Bf16(ModeInputs<bf16>),
}

/// A mix case ready to call: the problem with its drawn tables, inputs in f32 and in the dtype.
struct Prepared {
    p: AttentionProblem,
    draw: Draw,
    f32: ModeInputs<f32>,
    native: Native,
}

impl Prepared {
    fn new(case: &Case) -> Prepared {
        let (p, draw, f32) = case.with_mode_inputs();
        // The values are already rounded to the dtype: the conversions are exact.
        let native = match p.dtype {
            DType::F16 => Native::F16(f32.map(f16::from_f32)),
            DType::Bf16 => Native::Bf16(f32.map(bf16::from_f32)),
        };
        Prepared {
            p,
            draw,
            f32,
            native,
        }
    }
}

fn run_host<E: HostElement>(
    k: &dyn Attention,
    dev: &Device,
    prep: &Prepared,
    a: &ModeInputs<E>,
) -> Result<Bits, String> {
    let out = flashcore::forward_host_modes(k, dev, &prep.p, a.host_inputs(&prep.draw))
        .map_err(|e| e.to_string())?;
    Ok(Bits::of(prep.p.dtype, &out))
}

/// Device buffers on `stream`, `forward_on` the shared device, copied back on `stream`.
fn run_forward_on(
    k: &dyn Attention,
    dev: &Device,
    stream: &Arc<CudaStream>,
    prep: &Prepared,
) -> Result<Bits, String> {
    let p = &prep.p;
    let dtype = p.dtype;
    let e = |what: &'static str| {
        move |err: flashcore::cudarc::driver::DriverError| format!("{what}: {err:?}")
    };
    // A zero-length allocation is not something every allocator takes: keep one element and
    // hand the kernel a view of the exact length.
    let up16 = |a: &ArrayD<f32>| -> Result<(CudaSlice<u16>, usize), String> {
        let bits = host_bits(&a.view(), dtype);
        let n = bits.len();
        let buf = if n == 0 {
            stream.clone_htod(&[0u16][..])
        } else {
            stream.clone_htod(&*bits)
        };
        Ok((buf.map_err(e("uploading an input"))?, n))
    };
    let up_i32 = |t: Option<&[i32]>| {
        t.map(|t| stream.clone_htod(t))
            .transpose()
            .map_err(e("uploading a table"))
    };
    let (q, nq) = up16(&prep.f32.q)?;
    let (kk, nk) = up16(&prep.f32.k)?;
    let (v, nv) = up16(&prep.f32.v)?;
    let tables = prep.draw.host_tables();
    let cu_q = up_i32(tables.cu_seqlens_q)?;
    let cu_k = up_i32(tables.cu_seqlens_k)?;
    let used = up_i32(tables.seqused_k)?;
    let table = up_i32(tables.block_table)?;
    let slopes = tables
        .alibi_slopes
        .map(|s| stream.clone_htod(s))
        .transpose()
        .map_err(e("uploading the slopes"))?;
    let (q_shape, _, lse_shape) = storage_shapes(p);
    let (no, nl) = (
        q_shape.iter().product::<usize>(),
        lse_shape.iter().product::<usize>(),
    );
    // Poisoned: an element the kernel does not write differs from the reference.
    let mut o = stream
        .clone_htod(&vec![nan_bits(dtype); no.max(1)])
        .map_err(e("allocating O"))?;
    let mut lse = stream
        .clone_htod(&vec![f32::NAN; nl.max(1)])
        .map_err(e("allocating LSE"))?;
    {
        let mut t = AttentionTensors::new(
            dtype,
            q.slice(0..nq),
            kk.slice(0..nk),
            v.slice(0..nv),
            o.slice_mut(0..no),
            lse.slice_mut(0..nl),
        )
        .with_tables(DeviceTables {
            cu_seqlens_q: cu_q.as_ref().map(|t| t.as_view()),
            cu_seqlens_k: cu_k.as_ref().map(|t| t.as_view()),
            seqused_k: used.as_ref().map(|t| t.as_view()),
            block_table: table.as_ref().map(|t| t.as_view()),
            alibi_slopes: slopes.as_ref().map(|t| t.as_view()),
            ..DeviceTables::default()
        });
        k.forward_on(dev, stream, p, &mut t)
            .map_err(|e| e.to_string())?;
    }
    // clone_dtoh waits for the stream (and so for the kernel) before returning.
    let o = stream.clone_dtoh(&o).map_err(e("copying O back"))?;
    let lse = stream.clone_dtoh(&lse).map_err(e("copying LSE back"))?;
    Ok(Bits {
        o: o[..no].to_vec(),
        lse: lse[..nl].iter().map(|x| x.to_bits()).collect(),
        k_cache: None,
        v_cache: None,
    })
}

/// Waits for everything, frees the workspaces of streams that are gone, and reads free memory.
fn settle(dev: &Device) -> Result<usize, String> {
    dev.synchronize().map_err(|e| e.to_string())?;
    dev.trim_workspaces();
    // A context synchronisation also hands freed stream-ordered memory back (release
    // threshold 0), so cuMemGetInfo sees it.
    dev.context()
        .synchronize()
        .map_err(|e| format!("synchronizing the context: {e:?}"))?;
    dev.memory().map(|m| m.0).map_err(|e| e.to_string())
}

/// PASS when free memory after is within `slack` bytes below `before`, with the message.
pub(super) fn memory_verdict(
    before: usize,
    after: usize,
    slack: usize,
    calls: usize,
    threads: usize,
) -> (Res, String) {
    let lost = before.saturating_sub(after);
    let msg = format!(
        "free device memory {:.0} MiB before (after the sequential pass), {:.0} MiB after {calls} \
         calls on {threads} streams and their release: {} {:.1} MiB (slack {:.0} MiB)",
        mib(before),
        mib(after),
        if after >= before { "gained" } else { "lost" },
        mib(before.abs_diff(after)),
        mib(slack)
    );
    (if lost > slack { Res::Fail } else { Res::Pass }, msg)
}

#[derive(Default)]
struct Tally {
    calls: usize,
    paths: [usize; 3],
    failed: usize,
    failures: Vec<String>,
}

impl Tally {
    fn fail(&mut self, msg: String) {
        self.failed += 1;
        if self.failures.len() < 5 {
            self.failures.push(msg);
        }
    }
}

pub(super) fn run(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    let t = Instant::now();
    let threads = args.streams_threads;
    if kernels.is_empty() || threads == 0 || args.streams_iterations == 0 {
        return;
    }
    let mix = problem_mix(
        kernels,
        dev.info(),
        args.seed,
        super::wanted_dims(args, &[128, 64]),
    );
    let tallies: Vec<Mutex<Tally>> = kernels.iter().map(|_| Mutex::default()).collect();

    // The reference: each case once, one after the other, on the device's own stream (this
    // also loads every module the threads will need before memory is measured).
    let s = step("streams: sequential reference", args.step_timeout);
    let prepared: Vec<Prepared> = mix.iter().map(|m| Prepared::new(&m.case)).collect();
    let mut cases = Vec::new();
    let mut preps = Vec::new();
    let mut references = Vec::new();
    for (m, prep) in mix.iter().zip(prepared) {
        progress();
        let k = kernels[m.kernel].as_ref();
        match run_host(k, dev, &prep, &prep.f32) {
            Ok(bits) => {
                cases.push(m.clone());
                preps.push(prep);
                references.push(bits);
            }
            Err(e) => tallies[m.kernel]
                .lock()
                .unwrap()
                .fail(format!("sequential run of {}: {e}", m.case.to_arg())),
        }
    }
    drop(s);
    let before = settle(dev);

    let bar = ProgressBar::new((threads * args.streams_iterations) as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "streams [{bar:30}] {pos}/{len} calls {msg} ({elapsed}, eta {eta})",
        )
        .unwrap()
        .progress_chars("=> "),
    );
    let failed_total = AtomicUsize::new(0);
    let calls_total = AtomicUsize::new(0);
    let deadline = (args.streams_seconds > 0)
        .then(|| Instant::now() + Duration::from_secs(args.streams_seconds));
    let s = step("streams", args.step_timeout);
    std::thread::scope(|scope| {
        for ti in 0..threads {
            let (cases, preps, references, tallies) = (&cases, &preps, &references, &tallies);
            let (bar, failed_total, calls_total) = (&bar, &failed_total, &calls_total);
            scope.spawn(move || {
                let fail_all = |msg: String| {
                    for tl in tallies {
                        tl.lock().unwrap().fail(msg.clone());
                    }
                    failed_total.fetch_add(1, Ordering::Relaxed);
                };
                let stream = match dev.context().new_stream() {
                    Ok(s) => s,
                    Err(e) => return fail_all(format!("thread {ti}: creating a stream: {e:?}")),
                };
                // Even threads: a Device of their own on the stream; odd ones: a view of the
                // shared device (its per-stream workspace map).
                let own = if ti % 2 == 0 {
                    Device::from_stream(stream.clone())
                } else {
                    dev.with_stream(stream.clone())
                };
                let own = match own {
                    Ok(d) => d,
                    Err(e) => return fail_all(format!("thread {ti}: a Device on its stream: {e}")),
                };
                for (j, (ci, path)) in schedule(ti, args.streams_iterations, cases, args.seed)
                    .into_iter()
                    .enumerate()
                {
                    if deadline.is_some_and(|d| Instant::now() > d) {
                        break;
                    }
                    let m = &cases[ci];
                    let k = kernels[m.kernel].as_ref();
                    let prep = &preps[ci];
                    let got = match path {
                        Path::HostF32 => run_host(k, &own, prep, &prep.f32),
                        Path::HostNative => match &prep.native {
                            Native::F16(a) => run_host(k, &own, prep, a),
                            Native::Bf16(a) => run_host(k, &own, prep, a),
                        },
                        Path::ForwardOn => run_forward_on(k, dev, &stream, prep),
                    };
                    let verdict = got.and_then(|b| compare(&references[ci], &b));
                    let mut tl = tallies[m.kernel].lock().unwrap();
                    tl.calls += 1;
                    tl.paths[PATHS.iter().position(|&p| p == path).unwrap()] += 1;
                    if let Err(msg) = verdict {
                        let line = format!(
                            "thread {ti} call {j} ({path:?}) [{}]: {msg}",
                            m.case.to_arg()
                        );
                        bar.println(format!("FAIL streams {}: {line}", k.name()));
                        tl.fail(line);
                        failed_total.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(tl);
                    calls_total.fetch_add(1, Ordering::Relaxed);
                    progress();
                    bar.set_message(format!("{} failed", failed_total.load(Ordering::Relaxed)));
                    bar.inc(1);
                }
                // The stream's last work is done before it (and the Device on it) goes.
                let _ = stream.synchronize();
            });
        }
    });
    bar.finish_and_clear();
    drop(s);
    let after = settle(dev);

    for (ki, (k, tl)) in kernels.iter().zip(&tallies).enumerate() {
        let tl = tl.lock().unwrap();
        let n_cases = cases.iter().filter(|m| m.kernel == ki).count();
        let counters = cases
            .iter()
            .filter(|m| m.kernel == ki && m.workspace_counters > 0)
            .count();
        if n_cases == 0 && tl.failed == 0 {
            report.add(
                "streams",
                k.name(),
                Res::Skip,
                "takes none of the mix's problems on this device".into(),
                t,
            );
            continue;
        }
        let summary = format!(
            "{} calls on {threads} streams at once bit-identical to the sequential run ({n_cases} \
             problems, {counters} of them with workspace counters; host f32 / host f16-bf16 / \
             forward_on: {} / {} / {})",
            tl.calls, tl.paths[0], tl.paths[1], tl.paths[2]
        );
        if tl.failed == 0 {
            report.add("streams", k.name(), Res::Pass, summary, t);
        } else {
            report.add(
                "streams",
                k.name(),
                Res::Fail,
                format!(
                    "{} of {} calls failed: {}",
                    tl.failed,
                    tl.calls,
                    tl.failures.join(" | ")
                ),
                t,
            );
        }
    }
    let calls = calls_total.load(Ordering::Relaxed);
    let (res, msg) = match (before, after) {
        (Ok(b), Ok(a)) => {
            let (res, msg) = memory_verdict(b, a, args.streams_slack_mib << 20, calls, threads);
            // Only the device's own stream may keep a workspace: every thread's stream is gone.
            let left = dev.workspace_streams();
            if left > 1 {
                (
                    Res::Fail,
                    format!("{msg}; {left} stream workspaces left (at most the device's own)"),
                )
            } else {
                (res, format!("{msg}; {left} stream workspace(s) left"))
            }
        }
        (b, a) => (
            Res::Fail,
            format!(
                "could not read device memory: {:?} / {:?}",
                b.err(),
                a.err()
            ),
        ),
    };
    report.add("streams", "memory", res, msg, t);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reliability::selected_kernels;

    fn all() -> Vec<Box<dyn Attention>> {
        selected_kernels(&None).unwrap()
    }

    #[test]
    fn the_mix_gives_every_generation_work_and_the_persistent_ones_counters() {
        let kernels = all();
        let info = DeviceInfo::synthetic_h100();
        let mix = problem_mix(&kernels, &info, 7, &[128, 64]);
        for (ki, k) in kernels.iter().enumerate() {
            let mine: Vec<&MixCase> = mix.iter().filter(|m| m.kernel == ki).collect();
            assert!(mine.len() >= COMMON.len(), "{}: {}", k.name(), mine.len());
            for m in &mine {
                k.supports(&m.case.problem, &info).unwrap();
            }
            let dtypes: Vec<DType> = mine.iter().map(|m| m.case.problem.dtype).collect();
            assert!(dtypes.contains(&DType::F16) && dtypes.contains(&DType::Bf16));
            if k.name().contains("persistent") {
                assert!(
                    mine.iter().filter(|m| m.workspace_counters > 0).count() >= 2,
                    "{}: fewer than two problems of the mix use the workspace counters",
                    k.name()
                );
            }
            if k.capabilities().modes != flashcore::ModeSupport::NONE {
                assert!(
                    mine.iter().any(|m| !m.case.problem.modes.is_dense()),
                    "{} claims modes but the mix gives it none",
                    k.name()
                );
            }
        }
        // At least one append (through the host path only) and one mode case overall.
        assert!(mix.iter().any(|m| m.appends()));
        assert!(mix.iter().any(|m| !m.case.problem.modes.is_dense()));
        // Problems of the mix are what they say: the same seed gives the same mix.
        let again = problem_mix(&kernels, &info, 7, &[128, 64]);
        assert_eq!(
            mix.iter().map(|m| m.case.to_arg()).collect::<Vec<_>>(),
            again.iter().map(|m| m.case.to_arg()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn every_prepared_case_passes_the_host_checks_in_both_element_types() {
        let kernels = all();
        let mix = problem_mix(&kernels, &DeviceInfo::synthetic_h100(), 3, &[128, 64]);
        // One per distinct problem (the generations share most of them), leaving out the large
        // ones (their inputs take a debug build tens of seconds; their modes are among the rest).
        let mut seen = std::collections::BTreeSet::new();
        let small = |m: &&MixCase| m.case.problem.q_len() + m.case.problem.k_len() < 1 << 21;
        for m in mix
            .iter()
            .filter(small)
            .filter(|m| seen.insert(m.case.to_arg()))
        {
            let prep = Prepared::new(&m.case);
            let name = kernels[m.kernel].name();
            flashcore::host::check_host_inputs(name, &prep.p, &prep.f32.host_inputs(&prep.draw))
                .unwrap_or_else(|e| panic!("{}: {e}", m.case.to_arg()));
            let native = match &prep.native {
                Native::F16(a) => {
                    flashcore::host::check_host_inputs(name, &prep.p, &a.host_inputs(&prep.draw))
                }
                Native::Bf16(a) => {
                    flashcore::host::check_host_inputs(name, &prep.p, &a.host_inputs(&prep.draw))
                }
            };
            native.unwrap_or_else(|e| panic!("{}: {e}", m.case.to_arg()));
            // The 16-bit arrays hold exactly the f32 values (already rounded to the dtype).
            let dtype = prep.p.dtype;
            let bits32 = host_bits(&prep.f32.q.view(), dtype).into_owned();
            let bits16 = match &prep.native {
                Native::F16(a) => host_bits(&a.q.view(), dtype).into_owned(),
                Native::Bf16(a) => host_bits(&a.q.view(), dtype).into_owned(),
            };
            assert_eq!(bits32, bits16, "{}", m.case.to_arg());
        }
    }

    #[test]
    fn the_hopper_path_takes_no_part_on_an_older_device() {
        let kernels = all();
        let mix = problem_mix(&kernels, &DeviceInfo::synthetic_sm86(), 7, &[128, 64]);
        for m in &mix {
            assert_ne!(kernels[m.kernel].name(), "persistent-hopper");
        }
        assert!(!mix.is_empty());
    }

    fn fake_cases(n: usize, append_at: usize) -> Vec<MixCase> {
        (0..n)
            .map(|i| {
                let line = if i == append_at {
                    "b=1,hq=2,sq=1,sk=64,cache=contig,append=1,seed=1"
                } else {
                    "b=1,hq=2,sq=8,sk=8,seed=1"
                };
                MixCase {
                    kernel: 0,
                    case: Case::parse(line).unwrap(),
                    workspace_counters: 0,
                }
            })
            .collect()
    }

    #[test]
    fn each_thread_visits_every_case_each_round_in_its_own_order() {
        let cases = fake_cases(9, 4);
        let a = schedule(0, 27, &cases, 1);
        let b = schedule(1, 27, &cases, 1);
        assert_eq!(a.len(), 27);
        for s in [&a, &b] {
            for round in s.chunks(9) {
                let mut seen: Vec<usize> = round.iter().map(|c| c.0).collect();
                seen.sort();
                assert_eq!(seen, (0..9).collect::<Vec<_>>());
            }
            // Every path is used, and never forward_on for the append.
            for p in PATHS {
                assert!(s.iter().any(|c| c.1 == p), "{p:?}");
            }
            assert!(s.iter().all(|c| !(c.0 == 4 && c.1 == Path::ForwardOn)));
        }
        let order = |s: &[(usize, Path)]| s.iter().map(|c| c.0).collect::<Vec<_>>();
        assert_ne!(order(&a), order(&b), "two threads in the same order");
        assert_ne!(
            order(&a[..9]),
            order(&a[9..18]),
            "the same order every round"
        );
        assert_eq!(a, schedule(0, 27, &cases, 1), "not reproducible");
        assert!(schedule(0, 5, &[], 1).is_empty());
    }

    fn bits() -> Bits {
        Bits {
            o: vec![0x3c00, 0x4000, 0x7e00],
            lse: vec![1.5f32.to_bits(), f32::INFINITY.to_bits()],
            k_cache: None,
            v_cache: None,
        }
    }

    #[test]
    fn comparison_is_bit_for_bit() {
        assert_eq!(compare(&bits(), &bits()), Ok(()));
        let mut o = bits();
        o.o[1] ^= 1;
        let e = compare(&bits(), &o).unwrap_err();
        assert!(e.contains("O: 1 of 3 elements differ (first at 1"), "{e}");
        // -0.0 and 0.0 are equal as numbers, not as bits.
        let mut l = bits();
        l.lse[0] = (-0.0f32).to_bits();
        let mut r = bits();
        r.lse[0] = 0.0f32.to_bits();
        assert!(compare(&r, &l).unwrap_err().starts_with("LSE: 1 of 2"));
        let mut short = bits();
        short.o.pop();
        assert!(compare(&bits(), &short)
            .unwrap_err()
            .contains("2 elements, reference 3"));
        let mut cache = bits();
        cache.k_cache = Some(vec![1]);
        assert!(compare(&bits(), &cache).unwrap_err().contains("K cache"));
        assert!(compare(&cache, &bits())
            .unwrap_err()
            .contains("K cache: missing"));
    }

    #[test]
    fn outputs_of_either_element_type_give_the_same_bits() {
        let o32 = ArrayD::from_shape_vec(vec![2, 2], vec![1.0f32, -2.5, 0.0, 65504.0]).unwrap();
        let lse = ArrayD::from_shape_vec(vec![2], vec![0.5f32, f32::INFINITY]).unwrap();
        let out32 = HostOutputs {
            o: o32.clone(),
            lse: lse.clone(),
            k_cache: None,
            v_cache: None,
        };
        let out16 = HostOutputs {
            o: o32.mapv(f16::from_f32),
            lse,
            k_cache: None,
            v_cache: None,
        };
        assert_eq!(Bits::of(DType::F16, &out32), Bits::of(DType::F16, &out16));
        assert_eq!(Bits::of(DType::F16, &out16).o[0], 0x3c00);
    }

    #[test]
    fn memory_may_come_back_within_the_slack_only() {
        let mib = 1usize << 20;
        assert_eq!(
            memory_verdict(1000 * mib, 1000 * mib, 16 * mib, 10, 4).0,
            Res::Pass
        );
        assert_eq!(
            memory_verdict(1000 * mib, 1010 * mib, 16 * mib, 10, 4).0,
            Res::Pass
        );
        assert_eq!(
            memory_verdict(1000 * mib, 990 * mib, 16 * mib, 10, 4).0,
            Res::Pass
        );
        let (res, msg) = memory_verdict(1000 * mib, 980 * mib, 16 * mib, 10, 4);
        assert_eq!(res, Res::Fail);
        assert!(msg.contains("lost 20.0 MiB"), "{msg}");
    }
}
