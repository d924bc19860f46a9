//! `cargo xtask check-kernels`: every kernel each generation would launch, compiled by NVRTC for
//! sm_80, sm_86, sm_89 and sm_90a, with ptxas's resource report, and every header compiled alone
//! (header_check.rs). Fails on a compile error, on a header that does not include what it uses, on
//! any spill, on shared memory over the architecture's limit, or where ptxas ignored setmaxnreg or
//! serialized the wgmma pipeline.

use std::collections::BTreeSet;

use anyhow::{bail, Context, Result};
use flashcore::compile::{compile, CompileRequest};
use flashcore::{
    toolkit, AlibiSlopes, AttentionProblem, Capabilities, DType, DeviceInfo, HeadDims, KvScales,
    KvStorage, Modes,
};

use crate::ptx_compare;

/// (compute capability, ptxas arch, opt-in shared memory per block in bytes)
pub const ARCHES: &[((u32, u32), &str, u32)] = &[
    ((8, 0), "sm_80", 163 * 1024),
    ((8, 6), "sm_86", 99 * 1024),
    ((8, 9), "sm_89", 99 * 1024),
    ((9, 0), "sm_90a", 227 * 1024),
];

/// (batch, heads, seq) of the problems whose plans are compiled; a define set already compiled
/// for an earlier problem is not compiled again. (2, 8, 1024) is a typical problem; (1, 8, 512)
/// a small one (32 items on 132 SMs), for builds that only small problems get, such as the
/// Hopper path's split-KV build; (4, 16, 2048) a large one (more items than CTA slots), for
/// builds only large problems get, such as the portable path's dynamic schedule.
pub const PROBLEM_SIZES: &[(usize, usize, usize)] = &[(2, 8, 1024), (1, 8, 512), (4, 16, 2048)];

/// (batch, page rows) of the every-mode problems. Batch 2 gives 64 items of 128 query rows (one
/// round on 132 SMs), batch 16 gives 512 (the Hopper path's modes build with the dynamic
/// schedule, which chunked prefill gets); 16-row pages get the Hopper path's spread producer
/// (FC_HOPPER_SPREAD_PAGES).
pub const MODE_PROBLEMS: &[(usize, usize)] = &[(2, 64), (16, 64), (2, 16), (16, 16)];

/// (head_dim, head_dim_v) pairs compiled for kernels that take a V head dim of their own
/// (`Capabilities::distinct_head_dim_v`): DeepSeek-V2/V3 prefill's (192, 128). Their dense,
/// every-mode and decode-shaped problems are planned as the equal-dim ones are.
pub const DISTINCT_V_DIMS: &[(usize, usize)] = &[(192, 128)];

/// A problem with every inference mode on (paged cache with `seqused_k`, window, softcap, ALiBi,
/// causal): kernels that claim modes compile a separate build for them (e.g. the Hopper path's
/// `FC_HOPPER_MODES`), and that build must be free of spills too.
pub fn every_mode_problem(head_dim: usize, batch: usize, block_size: usize) -> AttentionProblem {
    let (heads, cache_rows) = (8, 1024);
    let max_blocks_per_seq = cache_rows / block_size;
    AttentionProblem::new(batch, heads, 512, head_dim)
        .with_kv(heads / 4, block_size * max_blocks_per_seq)
        .with_causal(true)
        .with_modes(Modes {
            kv: KvStorage::Paged {
                num_blocks: batch * max_blocks_per_seq,
                block_size,
                max_blocks_per_seq,
            },
            seqused_k: true,
            window_left: Some(256),
            softcap: Some(30.0),
            alibi: Some(AlibiSlopes::PerHead),
            ..Modes::default()
        })
}

/// `dense` with every mode of the scores a backward kernel may take: a left window (and a right
/// one without causal masking), softcap and ALiBi per (batch, head).
pub fn backward_mode_problem(dense: &AttentionProblem) -> AttentionProblem {
    dense.clone().with_modes(Modes {
        window_left: Some(256),
        window_right: (!dense.causal).then_some(64),
        softcap: Some(30.0),
        alibi: Some(AlibiSlopes::PerBatchHead),
        ..Modes::default()
    })
}

/// [`backward_mode_problem`] without softcap: the Hopper backward's modes builds of 128-row steps
/// at D = 64, which keep the dense step flow.
pub fn backward_uncapped_problem(dense: &AttentionProblem) -> AttentionProblem {
    let mut p = backward_mode_problem(dense);
    p.modes.softcap = None;
    p
}

/// `problem` on varlen storage (packed Q and K/V, every sequence full): the `FC_BWD_VARLEN`
/// builds.
pub fn on_varlen_storage(problem: AttentionProblem) -> AttentionProblem {
    let mut p = problem;
    p.modes.packed_q = Some(p.batch * p.seq_q);
    p.modes.kv = KvStorage::Packed {
        total_k: p.batch * p.seq_k,
    };
    p
}

/// Chunked prefill on a contiguous cache, non-causal, with every mode a strided cache takes
/// (`seqused_k`, a window, softcap, ALiBi): the Hopper path's modes build with 176-key tiles at
/// D = 128, which the paged, causal every-mode problems do not reach. Batch as in
/// [`MODE_PROBLEMS`]: 2 for one round of items, 16 for the dynamic schedule.
pub fn contiguous_cache_problem(head_dim: usize, batch: usize) -> AttentionProblem {
    AttentionProblem::new(batch, 32, 128, head_dim)
        .with_kv(8, 2048)
        .with_modes(Modes {
            seqused_k: true,
            window_left: Some(1024),
            softcap: Some(30.0),
            alibi: Some(AlibiSlopes::PerHead),
            ..Modes::default()
        })
}

/// `p` with two `mm_prefix_ranges` per sequence: the builds that read the ranges
/// (`FC_MM_PREFIX`, which the core adds).
pub fn with_mm_prefix(mut p: AttentionProblem) -> AttentionProblem {
    p.modes.mm_prefix = Some(2);
    p
}

/// A decode problem (one query, GQA 32:8, a 4096-key cache): generation 5 plans it with its
/// split-KV decode kernel and the combine, which no prefill problem reaches. Batch 1 splits the
/// keys (on sm_90 that build has the L2 prefetch); batch 32 gives every SM a unit and does not.
pub fn decode_problem(head_dim: usize, batch: usize) -> AttentionProblem {
    AttentionProblem::new(batch, 32, 1, head_dim).with_kv(8, 4096)
}

/// Speculative decoding (four queries a sequence, causal): two splits on an H100, few enough
/// that the combine takes whole rows (`attention_decode_combine_rows`) at 128-512.
pub fn speculative_problem(head_dim: usize) -> AttentionProblem {
    AttentionProblem::new(8, 32, 4, head_dim)
        .with_kv(8, 8192)
        .with_causal(true)
}

/// `p` with Q, K and V in e4m3 (descales per sequence and KV head): the Hopper path's e4m3 build
/// (`FC_HOPPER_E4M3`) and V's transpose.
pub fn with_e4m3_qkv(mut p: AttentionProblem) -> AttentionProblem {
    p.modes.kv_fp8 = Some(KvScales::PerBatchKvHead);
    p.modes.q_fp8 = true;
    p
}

/// `p` with an e4m3 KV cache (descales per KV head): the decode kernel's `FC_KV_E4M3` builds,
/// which every such problem plans, prefill-shaped or not.
pub fn with_e4m3_cache(mut p: AttentionProblem) -> AttentionProblem {
    p.modes.kv_fp8 = Some(KvScales::PerKvHead);
    p
}

/// The batch-invariant builds (`docs/MODES.md`): the decode kernel's key chunks, a varlen batch
/// routed between a persistent kernel and the decode kernel (`FC_SEQ_ROUTE`) and, on the Hopper
/// path, between its key-split build and the other (`FC_SEQ_KEY_SPLIT_ROUTE`), a paged cache of
/// small pages whose few query rows take the key split, and the dense and mode plans whose tile
/// width or schedule the mode pins, each small and large.
pub fn batch_invariant_problems(head_dim: usize) -> Vec<AttentionProblem> {
    let varlen = |batch: usize, causal: bool| {
        AttentionProblem::new(batch, 32, 512, head_dim)
            .with_kv(8, 8192)
            .with_causal(causal)
            .with_modes(Modes {
                packed_q: Some(batch * 256),
                kv: KvStorage::Packed {
                    total_k: batch * 2048,
                },
                ..Modes::default()
            })
    };
    [
        // 4096 keys: one chunk, written by the split kernel; 16384: eight, and the combine (a
        // warp a row up to 256); 131072: more chunks than a warp's loads hold at 128-512, the
        // combine a warp a slice.
        decode_problem(head_dim, 32),
        AttentionProblem::new(1, 32, 1, head_dim).with_kv(8, 16384),
        AttentionProblem::new(1, 32, 1, head_dim).with_kv(8, 131072),
        varlen(2, true),
        varlen(16, false),
        contiguous_cache_problem(head_dim, 16),
        AttentionProblem::new(4, 8, 256, head_dim)
            .with_kv(2, 2048)
            .with_causal(true)
            .with_modes(Modes {
                kv: KvStorage::Paged {
                    num_blocks: 4 * 128,
                    block_size: 16,
                    max_blocks_per_seq: 128,
                },
                seqused_k: true,
                ..Modes::default()
            }),
        AttentionProblem::new(1, 8, 512, head_dim),
        AttentionProblem::new(4, 16, 2048, head_dim),
    ]
    .into_iter()
    .map(|p| p.with_batch_invariant(true))
    .collect()
}

/// Longest `--dump-ptx` file name written as is (file systems stop at 255 bytes).
const MAX_DUMP_NAME: usize = 200;

/// FNV-1a, 64 bit: a short stable name for a long build description.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Plan variants that are off by default but selectable through the environment, compiled in a
/// second pass with the variable set (only define sets not already compiled are built).
pub const VARIANT_ENV: &[(&str, &str)] = &[
    ("FLASHCORE_HOPPER_SPLITS", "auto"),
    ("FLASHCORE_HOPPER_CONSUMER_WGS", "3"),
    ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "1"),
    ("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT", "1"),
];

/// The same for backward plans: the portable backward's 16-row tiles, which only devices with
/// 99 KiB of shared memory get by default, and the step at D <= 64 the other way from each
/// device's default (64 queries from sm_90, 32 below).
pub const BACKWARD_VARIANT_ENV: &[(&str, &str)] = &[
    ("FLASHCORE_PORTABLE_BWD_TILES", "narrow"),
    ("FLASHCORE_PORTABLE_BWD_STEP_QUERIES", "32"),
    ("FLASHCORE_PORTABLE_BWD_STEP_QUERIES", "64"),
];

/// Sets the environment for one pass over `variants`: `None` (the default plans) clears every
/// variable, `Some((var, value))` sets that one alone. Edition 2021: set_var is safe; xtask is
/// single-threaded here.
fn enter_variant(pass: Option<(&str, &str)>, variants: &[(&str, &str)]) {
    variants
        .iter()
        .for_each(|(var, _)| std::env::remove_var(var));
    if let Some((var, value)) = pass {
        std::env::set_var(var, value);
    }
}

/// What a kernel with `caps` is compiled for: each of [`ARCHES`] (as a synthetic device, its
/// NVRTC architecture and shared-memory limit) with each dtype it takes.
fn targets(
    caps: &Capabilities,
) -> impl Iterator<Item = (DeviceInfo, &'static str, u32, DType)> + '_ {
    ARCHES.iter().flat_map(move |&(cc, arch, smem_limit)| {
        let dev = synthetic_device(cc, smem_limit);
        caps.dtypes
            .iter()
            .map(move |&dtype| (dev.clone(), arch, smem_limit, dtype))
    })
}

pub fn synthetic_device(cc: (u32, u32), smem_optin: u32) -> DeviceInfo {
    DeviceInfo {
        ordinal: 0,
        name: format!("sm_{}{} (synthetic)", cc.0, cc.1),
        compute_capability: cc,
        sm_count: 132,
        max_shared_memory_per_block: 48 * 1024,
        max_shared_memory_per_block_optin: smem_optin,
        l2_bytes: 50 << 20,
        total_memory: 80 << 30,
    }
}

/// Head dims worth compiling for: every listed one, or a few of a range: FlashAttention-2's
/// instances (a kernel may compile one each and pad the others up, as the portable generation-5
/// path does; 80 stands for the padded ones, 8 for the smallest), which a kernel that takes the
/// head dim at run time builds alike, and 512 (the decode kernel's widest build; 264 for the
/// dims padded into it).
pub fn representative_head_dims(h: &HeadDims) -> Vec<usize> {
    match h {
        HeadDims::List(l) => l.to_vec(),
        HeadDims::Range { .. } => [8usize, 32, 64, 80, 96, 128, 160, 192, 224, 256, 264, 512]
            .into_iter()
            .filter(|d| h.contains(*d))
            .collect(),
    }
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Resources {
    pub registers: u32,
    pub static_smem: u32,
    pub stack: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
}

/// Whether ptxas reports that it serialized entry point `entry`'s wgmma.mma_async instructions
/// (C7510: "Potential Performance Loss: wgmma.mma_async instructions are serialized due to ...
/// in the function '<entry>'").
pub fn wgmma_serialized(report: &str, entry: &str) -> bool {
    let function = format!("'{entry}'");
    report.lines().any(|l| {
        (l.contains("C7510") || l.contains("wgmma.mma_async instructions are serialized"))
            && l.contains(&function)
    })
}

/// Parses `ptxas -v` output for one entry point.
pub fn parse_ptxas(report: &str, entry: &str) -> Option<Resources> {
    let mut r = Resources::default();
    let mut in_entry = false;
    let mut found = false;
    for line in report.lines() {
        if line.contains("Compiling entry function") || line.contains("Function properties for") {
            in_entry = line.contains(&format!("'{entry}'"))
                || line.trim_end().ends_with(&format!(" {entry}"));
            continue;
        }
        if !in_entry {
            continue;
        }
        let num_before = |s: &str, key: &str| -> Option<u32> {
            let i = s.find(key)?;
            s[..i].split_whitespace().last()?.parse().ok()
        };
        if line.contains("stack frame") {
            r.stack = num_before(line, "bytes stack frame").unwrap_or(0);
            r.spill_stores = num_before(line, "bytes spill stores").unwrap_or(0);
            r.spill_loads = num_before(line, "bytes spill loads").unwrap_or(0);
        }
        if line.contains("Used") && line.contains("registers") {
            r.registers = num_before(line, "registers").unwrap_or(0);
            r.static_smem = num_before(line, "bytes smem").unwrap_or(0);
            found = true;
        }
    }
    found.then_some(r)
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    pub kernel: String,
    pub source: String,
    pub entry: String,
    pub arch: String,
    pub dtype: String,
    pub defines: String,
    pub dynamic_smem: u32,
    pub resources: Option<Resources>,
    pub problem: String,
}

/// The head dims of `h` that check-kernels builds: its representatives, or those of `--head-dims`
/// it takes (any of them, not only representatives: a padded build that no representative reaches,
/// such as a head dim of 200 in a 224 build, can be asked for).
fn checked_head_dims(h: &HeadDims, only: Option<&[usize]>) -> Vec<usize> {
    match only {
        Some(wanted) => wanted.iter().copied().filter(|&d| h.contains(d)).collect(),
        None => representative_head_dims(h),
    }
}

/// One build to check: a launch of a plan, compiled for one architecture and dtype.
struct Build {
    kernel: &'static str,
    problem: String,
    launch: flashcore::KernelLaunch,
    arch: &'static str,
    smem_limit: u32,
    dtype: DType,
}

/// What compiling one build and reading ptxas's report on it found.
struct Checked {
    row: Row,
    failures: Vec<String>,
    /// Under --compare-ptx: the PTX against the earlier dump's.
    verdict: Option<ptx_compare::Verdict>,
}

/// Where --dump-ptx writes each build's PTX and --compare-ptx reads the earlier one.
struct PtxFiles<'a> {
    dump: Option<&'a std::path::Path>,
    compare: Option<&'a std::path::Path>,
}

/// A count line on stderr every [`crate::progress::LOG_EVERY`] while builds compile: a cold run
/// compiles thousands of modules (tens of minutes on two cores).
struct BuildProgress {
    total: usize,
    done: std::sync::atomic::AtomicUsize,
    started: std::time::Instant,
    last_line: std::sync::Mutex<std::time::Instant>,
}

impl BuildProgress {
    fn new(total: usize) -> Self {
        let now = std::time::Instant::now();
        Self {
            total,
            done: 0.into(),
            started: now,
            last_line: std::sync::Mutex::new(now),
        }
    }

    fn one_done(&self) {
        let done = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let mut last = self.last_line.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() >= crate::progress::LOG_EVERY || done == self.total {
            *last = std::time::Instant::now();
            eprintln!(
                "check-kernels: {done} of {} builds checked ({:.0} s, {} threads)",
                self.total,
                self.started.elapsed().as_secs_f64(),
                crate::parallel::threads()
            );
        }
    }
}

/// Compiles one build and checks ptxas's report on it: a compile error, a spill, shared memory
/// over the architecture's limit, an ignored setmaxnreg or a serialized wgmma pipeline is a
/// failure. An `Err` is a failure of the machinery (a file that cannot be written), not of the
/// kernel.
fn check_build(
    b: &Build,
    ptxas: Option<&crate::ptxas::Ptxas>,
    files: &PtxFiles<'_>,
) -> Result<Checked> {
    let (arch, dtype, launch) = (b.arch, b.dtype, &b.launch);
    let virtual_arch = arch.replace("sm_", "compute_");
    let req = CompileRequest {
        source: launch.source,
        dtype,
        defines: &launch.defines,
        arch: &virtual_arch,
    };
    let defines: Vec<String> = launch
        .defines
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let mut out = Checked {
        row: Row {
            kernel: b.kernel.into(),
            source: launch.source.into(),
            entry: launch.entry.into(),
            arch: arch.into(),
            dtype: dtype.name().into(),
            defines: defines.join(" "),
            dynamic_smem: launch.dynamic_smem_bytes,
            resources: None,
            problem: b.problem.clone(),
        },
        failures: Vec::new(),
        verdict: None,
    };
    let compiled = match compile(&req) {
        Ok(c) => c,
        Err(e) => {
            out.failures.push(format!(
                "{} {} {arch} {dtype}: {e}",
                b.kernel, launch.source
            ));
            return Ok(out);
        }
    };
    let name = dump_name(launch.entry, arch, &dtype.to_string(), &defines);
    if let Some(dir) = files.dump {
        std::fs::write(dir.join(&name), &compiled.ptx)
            .with_context(|| format!("writing {name}"))?;
    }
    if let Some(dir) = files.compare {
        out.verdict = Some(match std::fs::read_to_string(dir.join(&name)) {
            Ok(old) => ptx_compare::compare(&old, &compiled.ptx),
            Err(_) => ptx_compare::Verdict::New,
        });
    }
    let Some(ptxas) = ptxas else {
        return Ok(out);
    };
    let ptxas_said = ptxas.report(&compiled.ptx, arch)?;
    let (report, row) = (&ptxas_said.text, &mut out.row);
    let failures = &mut out.failures;
    if !ptxas_said.success {
        failures.push(format!(
            "ptxas failed for {} {arch} {dtype}:\n{report}",
            launch.source
        ));
        return Ok(out);
    }
    let Some(r) = parse_ptxas(report, launch.entry) else {
        failures.push(format!(
            "no ptxas report for {} in:\n{report}",
            launch.entry
        ));
        return Ok(out);
    };
    if r.spill_stores + r.spill_loads > 0 {
        failures.push(format!(
            "{} {} {arch} {dtype} {}: spills ({} B stores, {} B loads)",
            b.kernel, launch.entry, row.defines, r.spill_stores, r.spill_loads
        ));
    }
    if r.static_smem + launch.dynamic_smem_bytes > b.smem_limit {
        failures.push(format!(
            "{} {} {arch}: {} B static + {} B dynamic shared memory exceeds {} B",
            b.kernel, launch.entry, r.static_smem, launch.dynamic_smem_bytes, b.smem_limit
        ));
    }
    if report.contains("C7508") || report.contains("setmaxnreg ignored") {
        failures.push(format!(
            "{} {arch}: ptxas ignored setmaxnreg:\n{report}",
            launch.entry
        ));
    }
    if wgmma_serialized(report, launch.entry) {
        // ptxas then waits for every wgmma right after issuing it: correct, and silently far
        // slower (a printf in the kernel is enough: 599d16b).
        failures.push(format!(
            "{} {} {arch} {dtype} {}: ptxas serialized the wgmma pipeline:\n{report}",
            b.kernel, launch.entry, row.defines
        ));
    }
    row.resources = Some(r);
    Ok(out)
}

pub fn run(
    json_out: Option<&std::path::Path>,
    dump_ptx: Option<&std::path::Path>,
    compare_ptx: Option<&std::path::Path>,
    only: Option<&[String]>,
    head_dims: Option<&[usize]>,
    passes: &[crate::verify::Pass],
) -> Result<Vec<Row>> {
    let forward = passes.contains(&crate::verify::Pass::Fwd);
    let backward = passes.contains(&crate::verify::Pass::Bwd);
    if let Some(names) = only {
        let mut known: Vec<&str> = flashcore::kernels().iter().map(|k| k.name()).collect();
        for k in flashcore::backward_kernels() {
            if !known.contains(&k.name()) {
                known.push(k.name());
            }
        }
        if let Some(bad) = names.iter().find(|n| !known.contains(&n.as_str())) {
            bail!("unknown kernel {bad:?} (known: {})", known.join(", "));
        }
    }
    if let Some(dir) = dump_ptx {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    crate::cuda_wheels::ensure()?;
    toolkit::ensure_nvrtc().map_err(|e| anyhow::anyhow!("{e}"))?;
    let ptxas = crate::ptxas::Ptxas::find()?;
    if ptxas.is_none() {
        eprintln!("ptxas not found: compiling only, no resource report");
    }
    // Each header alone first: a missing include then reads as such, not as a kernel's error.
    let headers = crate::header_check::check()?;
    let mut failures = headers.failures.clone();
    // Every plan is made first (plans read the variant variables, which are set one pass at a
    // time), each distinct build once; the builds are then compiled on every core.
    let mut builds: Vec<Build> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut add_build = |kernel: &'static str,
                         problem: &AttentionProblem,
                         launch: flashcore::KernelLaunch,
                         arch: &'static str,
                         smem_limit: u32,
                         dtype: DType| {
        let key = format!(
            "{}|{}|{:?}|{arch}|{dtype}",
            launch.source, launch.entry, launch.defines
        );
        if seen.insert(key) {
            builds.push(Build {
                kernel,
                problem: problem.to_string(),
                launch,
                arch,
                smem_limit,
                dtype,
            });
        }
    };
    let passes = std::iter::once(None).chain(VARIANT_ENV.iter().copied().map(Some));
    let selected = move || {
        flashcore::kernels()
            .into_iter()
            .filter(move |k| forward && crate::select::picked(only, k.name()))
    };
    for (pass, kernel) in passes.flat_map(|v| selected().map(move |k| (v, k))) {
        enter_variant(pass, VARIANT_ENV);
        let caps = kernel.capabilities();
        let representative_head_dims = |h: &HeadDims| checked_head_dims(h, head_dims);
        for (dev, arch, smem_limit, dtype) in targets(&caps) {
            let dense_problems = representative_head_dims(&caps.head_dims)
                .into_iter()
                .flat_map(|d| PROBLEM_SIZES.iter().map(move |&(b, h, s)| (b, h, s, d)))
                .map(|(b, h, s, d)| AttentionProblem::new(b, h, s, d));
            let mode_problems = representative_head_dims(&caps.head_dims)
                .into_iter()
                .flat_map(|d| MODE_PROBLEMS.iter().map(move |&(b, rows)| (d, b, rows)))
                .map(|(d, b, rows)| every_mode_problem(d, b, rows));
            let mode_problems = mode_problems
                .chain(
                    representative_head_dims(&caps.head_dims)
                        .into_iter()
                        .flat_map(|d| [2, 16].map(|b| contiguous_cache_problem(d, b))),
                )
                .flat_map(|p| [with_mm_prefix(p.clone()), p]);
            // Decode on each cache the kernel has a build for: contiguous, pages of whole tiles,
            // small pages; and with few splits (the combine's rows entry).
            let decode_problems = representative_head_dims(&caps.head_dims)
                .into_iter()
                .flat_map(|d| [1, 32].map(|b| decode_problem(d, b)))
                .flat_map(|p| {
                    [
                        p.clone().with_paged_cache(64),
                        p.clone().with_paged_cache(16),
                        p,
                    ]
                })
                .flat_map(|p| [with_mm_prefix(p.clone()), p])
                .chain(
                    representative_head_dims(&caps.head_dims)
                        .into_iter()
                        .map(speculative_problem),
                );
            // e4m3 caches: decode (split and not, on each cache), the paged every-mode problems
            // and chunked prefill on a contiguous cache, all through the decode kernel.
            let e4m3_problems = representative_head_dims(&caps.head_dims)
                .into_iter()
                .flat_map(|d| {
                    [1, 32]
                        .map(|b| decode_problem(d, b))
                        .into_iter()
                        .flat_map(|p| {
                            [
                                p.clone().with_paged_cache(64),
                                p.clone().with_paged_cache(16),
                                p,
                            ]
                        })
                        .chain(
                            MODE_PROBLEMS
                                .iter()
                                .map(move |&(b, rows)| every_mode_problem(d, b, rows)),
                        )
                        .chain([contiguous_cache_problem(d, 2)])
                })
                .filter(|_| caps.modes.kv_fp8)
                .map(with_e4m3_cache);
            // e4m3 Q, K and V: the dense problems at D = 128, causal and not.
            let e4m3_forward = PROBLEM_SIZES
                .iter()
                .filter(|_| caps.modes.q_fp8 && head_dims.is_none_or(|only| only.contains(&128)))
                .flat_map(|&(b, h, s)| {
                    [false, true].map(|causal| {
                        with_e4m3_qkv(AttentionProblem::new(b, h, s, 128).with_causal(causal))
                    })
                });
            let batch_invariant = representative_head_dims(&caps.head_dims)
                .into_iter()
                .flat_map(batch_invariant_problems);
            let distinct_v = DISTINCT_V_DIMS
                .iter()
                .filter(|&&(d, _)| {
                    caps.distinct_head_dim_v && head_dims.is_none_or(|only| only.contains(&d))
                })
                .flat_map(|&(d, dv)| {
                    let dense = PROBLEM_SIZES
                        .iter()
                        .map(move |&(b, h, s)| AttentionProblem::new(b, h, s, d));
                    let modes = MODE_PROBLEMS
                        .iter()
                        .map(move |&(b, rows)| every_mode_problem(d, b, rows))
                        .chain([2, 16].map(|b| contiguous_cache_problem(d, b)));
                    dense
                        .chain(modes)
                        .chain([decode_problem(d, 1)])
                        .map(move |p| p.with_head_dim_v(dv))
                });
            for problem in dense_problems
                .chain(mode_problems)
                .chain(decode_problems)
                .chain(e4m3_problems)
                .chain(e4m3_forward)
                .chain(batch_invariant)
                .chain(distinct_v)
            {
                let problem = problem.with_dtype(dtype);
                let Ok(plan) = kernel.plan(&problem, &dev) else {
                    continue;
                };
                if caps.check(kernel.name(), &problem, &dev).is_err() {
                    continue;
                }
                for launch in plan.launches {
                    // With the defines the core adds for the problem's modes (FC_MM_PREFIX).
                    let launch = launch
                        .with_defines(problem.modes.build_defines())
                        .into_owned();
                    add_build(kernel.name(), &problem, launch, arch, smem_limit, dtype);
                }
            }
        }
    }
    enter_variant(None, VARIANT_ENV);
    // Backward kernels: the plans of dense problems, with every mode of the scores a kernel
    // takes (windows, softcap, ALiBi: the FC_BWD_MODES builds), and those on varlen storage (the
    // FC_BWD_VARLEN builds).
    let backward_passes =
        std::iter::once(None).chain(BACKWARD_VARIANT_ENV.iter().copied().map(Some));
    let backward_selected = || {
        flashcore::backward_kernels()
            .into_iter()
            .filter(|k| backward && crate::select::picked(only, k.name()))
    };
    for (pass, kernel) in backward_passes.flat_map(|v| backward_selected().map(move |k| (v, k))) {
        enter_variant(pass, BACKWARD_VARIANT_ENV);
        let caps = kernel.capabilities();
        let representative_head_dims = |h: &HeadDims| checked_head_dims(h, head_dims);
        for (dev, arch, smem_limit, dtype) in targets(&caps) {
            for d in representative_head_dims(&caps.head_dims) {
                // Causal too: the Hopper backward's causal plans take other L2 sections.
                for (&(b, h, s), causal) in PROBLEM_SIZES
                    .iter()
                    .flat_map(|sz| [false, true].map(|c| (sz, c)))
                {
                    let dense = AttentionProblem::new(b, h, s, d)
                        .with_dtype(dtype)
                        .with_causal(causal);
                    for problem in [
                        on_varlen_storage(backward_mode_problem(&dense)),
                        backward_mode_problem(&dense),
                        on_varlen_storage(backward_uncapped_problem(&dense)),
                        backward_uncapped_problem(&dense),
                        dense,
                    ] {
                        if kernel.supports_backward(&problem, &dev).is_err() {
                            continue;
                        }
                        let Ok(plan) = kernel.plan_backward(&problem, &dev) else {
                            continue;
                        };
                        for launch in plan.launches {
                            add_build(kernel.name(), &problem, launch, arch, smem_limit, dtype);
                        }
                    }
                }
            }
        }
    }
    enter_variant(None, BACKWARD_VARIANT_ENV);
    let ptx_files = PtxFiles {
        dump: dump_ptx,
        compare: compare_ptx,
    };
    let progress = BuildProgress::new(builds.len());
    let checked = crate::parallel::par_map_queue(&builds, |b| {
        let c = check_build(b, ptxas.as_ref(), &ptx_files);
        progress.one_done();
        c
    });
    let mut rows = Vec::with_capacity(checked.len());
    // --compare-ptx: (build, verdict) for every build that is not the same as before.
    let mut ptx_changes: Vec<(String, ptx_compare::Verdict)> = Vec::new();
    let mut ptx_same = 0usize;
    for c in checked {
        let c = c?;
        failures.extend(c.failures);
        match c.verdict {
            Some(ptx_compare::Verdict::Same) => ptx_same += 1,
            Some(verdict) => ptx_changes.push((
                format!(
                    "{} {} {} {}",
                    c.row.entry, c.row.arch, c.row.dtype, c.row.defines
                ),
                verdict,
            )),
            None => {}
        }
        rows.push(c.row);
    }
    print_table(&rows);
    if let Some(path) = json_out {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)?;
    }
    if let Some(dir) = compare_ptx {
        println!(
            "compare-ptx against {}: {ptx_same} builds the same, {} not:",
            dir.display(),
            ptx_changes.len()
        );
        for (build, verdict) in &ptx_changes {
            println!("  {verdict}: {build}");
        }
    }
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("FAIL {f}");
        }
        bail!("{} kernel check(s) failed", failures.len());
    }
    println!(
        "check-kernels: {} headers compile alone ({} builds: {}, f16 and bf16, defines from HEADER_DEFINES)",
        headers.headers,
        headers.builds,
        crate::header_check::HEADER_ARCHES.join(" and ").replace("compute_", "sm_")
    );
    println!(
        "check-kernels: {} kernel builds compiled, no spills, shared memory within limits",
        rows.len()
    );
    Ok(rows)
}

/// The file one build's PTX gets under --dump-ptx (and is looked up by under --compare-ptx):
/// named so a reader can find it (e.g. for cuobjdump).
fn dump_name(entry: &str, arch: &str, dtype: &str, defines: &[String]) -> String {
    let mut name = format!(
        "{entry}-{arch}-{dtype}-{}.ptx",
        defines.join("_").replace(['=', ' '], "")
    );
    if name.len() > MAX_DUMP_NAME {
        // Long define lists pass the file-name limit (255 bytes): keep the readable head and make
        // it unique with a hash of the whole name (the same build gets the same file across source
        // changes, so two dumps can be compared file by file).
        let hash = fnv1a(&name);
        name.truncate(MAX_DUMP_NAME - 24);
        name = format!("{name}-{hash:016x}.ptx");
    }
    name
}

fn print_table(rows: &[Row]) {
    println!("| kernel | entry | arch | dtype | defines | regs | static smem | dyn smem | stack | spills |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let (regs, smem, stack, spills) = match &r.resources {
            Some(x) => (
                x.registers.to_string(),
                x.static_smem.to_string(),
                x.stack.to_string(),
                (x.spill_stores + x.spill_loads).to_string(),
            ),
            None => ("?".into(), "?".into(), "?".into(), "?".into()),
        };
        println!(
            "| {} | {} | {} | {} | {} | {regs} | {smem} | {} | {stack} | {spills} |",
            r.kernel, r.entry, r.arch, r.dtype, r.defines, r.dynamic_smem
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_ptxas_report() {
        let report = "ptxas info    : Compiling entry function 'attention_scalar' for 'sm_80'\n\
ptxas info    : Function properties for attention_scalar\n    \
16 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads\n\
ptxas info    : Used 56 registers, used 1 barriers, 3072 bytes smem, 544 bytes cmem[0]\n";
        let r = parse_ptxas(report, "attention_scalar").unwrap();
        assert_eq!(
            (
                r.registers,
                r.static_smem,
                r.stack,
                r.spill_stores,
                r.spill_loads
            ),
            (56, 3072, 16, 4, 8)
        );
        assert!(parse_ptxas(report, "other").is_none());
    }

    #[test]
    fn a_serialized_wgmma_pipeline_is_recognised() {
        // ptxas 13.0's words for the traced Hopper forward (a printf in the kernel), 2026-11-26.
        let serialized = "ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async \
instructions are serialized due to wgmma pipeline crossing function boundary at a function call \
in the function 'attention_persistent_hopper'\n";
        assert!(wgmma_serialized(serialized, "attention_persistent_hopper"));
        // The report covers the module: another entry point of it is not the one serialized.
        assert!(!wgmma_serialized(
            serialized,
            "attention_persistent_hopper_trace_print"
        ));
        let clean = "ptxas info    : Used 168 registers, used 16 barriers\n";
        assert!(!wgmma_serialized(clean, "attention_persistent_hopper"));
    }

    #[test]
    fn unused_head_dims_are_not_compiled() {
        let h = HeadDims::Range {
            min: 8,
            max: 128,
            multiple_of: 8,
        };
        assert_eq!(representative_head_dims(&h), vec![8, 32, 64, 80, 96, 128]);
        assert_eq!(checked_head_dims(&h, None), representative_head_dims(&h));
        // --head-dims reaches any head dim a kernel takes, representative or not, and no other.
        assert_eq!(
            checked_head_dims(&h, Some(&[40, 64, 100, 136])),
            vec![40, 64]
        );
        let list = HeadDims::List(&[32, 64]);
        assert_eq!(checked_head_dims(&list, Some(&[40, 64])), vec![64]);
    }
}
