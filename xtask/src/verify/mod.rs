//! `cargo xtask verify`: property-based tests over random problems for every generation compiled
//! in, plus a fixed list of edge cases, judged by the oracle's one tolerance rule.
//!
//! One driver runs both passes: the forward generations (`--pass fwd`) and the backward kernels
//! (`--pass bwd`: dense or varlen storage, with the modes a kernel takes), each kernel a
//! [`Subject`]; what differs between the
//! passes (names, cases, rerun lines) is [`Pass`]'s. The cases are `cases.rs`'s, the oracle's
//! GPU-free self-checks `self_check.rs`'s.

mod cases;
pub mod cp;
mod self_check;

use std::time::Instant;

use anyhow::{bail, Result};
use flashcore::{Attention, AttentionBackward, Capabilities, Device, HeadDims};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

use crate::case::{run_backward_case, run_case, Case, Outcome};
use crate::mode_case::{InputDtype, KvDtype};
use crate::progress::CaseProgress;
use cases::{
    backward_edge_cases, case_strategy_dtype, fp8_edge_cases, qkv_fp8_edge_cases, seeded_runner,
};

pub use cases::{case_strategy, edge_cases};
pub use self_check::{oracle_backward_self_check, oracle_self_check};

/// Which pass `verify` checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Pass {
    /// The forward (O, LSE) of every generation.
    Fwd,
    /// The backward (dQ, dK, dV) of every backward kernel.
    Bwd,
}

impl Pass {
    /// A kernel in the progress bar and the failure lines ("scalar", "scalar bwd").
    fn label(self, kernel: &str) -> String {
        match self {
            Pass::Fwd => kernel.to_string(),
            Pass::Bwd => format!("{kernel} bwd"),
        }
    }

    /// A kernel in the tallies ("scalar", "scalar (bwd)").
    fn tally_name(self, kernel: &str) -> String {
        match self {
            Pass::Fwd => kernel.to_string(),
            Pass::Bwd => format!("{kernel} (bwd)"),
        }
    }

    /// The command that reruns one case on one kernel.
    fn rerun(self, kernel: &str, case: &Case) -> String {
        let pass = match self {
            Pass::Fwd => "",
            Pass::Bwd => " --pass bwd",
        };
        format!(
            "cargo xtask verify{pass} --kernels {kernel} --case '{}'",
            case.to_arg()
        )
    }

    /// The fixed cases: the forward's edge list, and the backward's own edges after it; with
    /// `--dtype e4m3` the fp8 forward's edges alone, with `--kv-dtype e4m3` the e4m3-cache edges
    /// alone.
    fn edges(
        self,
        caps: &Capabilities,
        dtype: Option<InputDtype>,
        kv_dtype: Option<KvDtype>,
    ) -> Vec<Case> {
        if dtype == Some(InputDtype::E4m3) {
            return qkv_fp8_edge_cases();
        }
        if kv_dtype == Some(KvDtype::E4m3) {
            return fp8_edge_cases(caps);
        }
        let mut e = edge_cases(caps);
        if self == Pass::Bwd {
            e.extend(backward_edge_cases(caps));
        }
        e
    }

    /// The random cases' generator for a kernel: both passes draw the forward sweep's cases,
    /// with the inference modes the kernel's capabilities claim (a backward kernel claims at
    /// most windows, softcap and ALiBi; one that claims none draws dense problems, as before);
    /// each pass its own seed stream.
    fn strategy(
        self,
        caps: &Capabilities,
        opts: &Options,
        kernel: &str,
    ) -> (proptest::test_runner::TestRunner, BoxedStrategy<Case>) {
        let seed = opts.seed ^ fxhash(kernel);
        match self {
            Pass::Fwd => {
                let bi = opts.batch_invariant;
                let strategy = case_strategy_dtype(caps, opts.max_seq, opts.dtype, opts.kv_dtype)
                    .prop_map(move |c| with_batch_invariant(c, bi))
                    .boxed();
                (seeded_runner(seed, opts.cases), strategy)
            }
            Pass::Bwd => (
                seeded_runner(seed ^ 0xb4c4_3a2d, opts.cases),
                case_strategy(caps, opts.max_seq),
            ),
        }
    }
}

pub struct Options {
    pub pass: Pass,
    pub cases: usize,
    pub seed: u64,
    pub kernels: Option<Vec<String>>,
    pub edge: bool,
    pub random: bool,
    pub single_case: Option<String>,
    pub shrink: bool,
    pub json: Option<std::path::PathBuf>,
    pub max_seq: usize,
    /// Every case in the batch-invariant mode (`bi=1`): forward only.
    pub batch_invariant: bool,
    /// `--head-dims`: the head dims drawn (each kernel keeps those it claims).
    pub head_dims: Option<Vec<usize>>,
    /// `--kv-dtype e4m3`: every case (edge list and random) an e4m3-cache case: forward only.
    pub kv_dtype: Option<KvDtype>,
    /// `--dtype e4m3`: every case (edge list and random) an fp8 forward, Q, K and V in e4m3
    /// (it takes precedence over `kv_dtype`): forward only.
    pub dtype: Option<InputDtype>,
}

#[derive(Default, Clone, serde::Serialize)]
pub struct Tally {
    pub kernel: String,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub worst_ratio: f64,
    pub worst_case: Option<String>,
    pub failures: Vec<String>,
    pub seconds: f64,
}

impl Tally {
    /// The one-line result of a kernel's sweep.
    fn print_summary(&self) {
        println!(
            "{:>20}: {} passed, {} failed, {} skipped, worst ratio {:.3} ({:.1} s)",
            self.kernel, self.passed, self.failed, self.skipped, self.worst_ratio, self.seconds
        );
    }

    /// One case's result, from either pass, into the counts, the worst ratio and the first 20
    /// failures.
    fn count(&mut self, case: &Case, result: CaseResult) {
        match result {
            CaseResult::Pass(ratio) => {
                self.passed += 1;
                if ratio > self.worst_ratio {
                    self.worst_ratio = ratio;
                    self.worst_case = Some(case.to_arg());
                }
            }
            CaseResult::Fail(msg, ratio) => {
                self.failed += 1;
                if let Some(ratio) = ratio {
                    self.worst_ratio = self.worst_ratio.max(ratio);
                }
                if self.failures.len() < 20 {
                    self.failures.push(format!("{}: {msg}", case.to_arg()));
                }
            }
            CaseResult::Skipped => self.skipped += 1,
        }
    }
}

/// What a kernel's tally counts of one case, whichever pass judged it.
enum CaseResult<'a> {
    Pass(f64),
    Fail(&'a str, Option<f64>),
    Skipped,
}

/// One case's outcome, from either pass.
enum Judged {
    Pass { ratio: f64, message: String },
    Fail(String, Option<f64>),
    Skipped(String),
}

impl Judged {
    fn result(&self) -> CaseResult<'_> {
        match self {
            Judged::Pass { ratio, .. } => CaseResult::Pass(*ratio),
            Judged::Fail(msg, ratio) => CaseResult::Fail(msg, *ratio),
            Judged::Skipped(_) => CaseResult::Skipped,
        }
    }

    fn failed(&self) -> bool {
        matches!(self, Judged::Fail(..))
    }
}

/// What a verdict of either pass gives [`Judged`]: how close to the limit it ran, and its text.
trait Graded {
    fn ratio(&self) -> f64;
    fn into_message(self) -> String;
}

impl Graded for flashcore_oracle::Verdict {
    fn ratio(&self) -> f64 {
        self.ratio
    }
    fn into_message(self) -> String {
        self.message
    }
}

impl Graded for flashcore_oracle::BackwardVerdict {
    fn ratio(&self) -> f64 {
        self.ratio
    }
    fn into_message(self) -> String {
        self.message
    }
}

impl<V: Graded> From<Outcome<V>> for Judged {
    fn from(o: Outcome<V>) -> Judged {
        match o {
            Outcome::Pass(v) => Judged::Pass {
                ratio: v.ratio(),
                message: v.into_message(),
            },
            Outcome::Fail(msg, v) => Judged::Fail(msg, v.map(|v| v.ratio())),
            Outcome::Skipped(r) => Judged::Skipped(r),
        }
    }
}

/// A kernel under test: a forward generation or a backward kernel.
enum Subject {
    Forward(Box<dyn Attention>),
    Backward(Box<dyn AttentionBackward>),
}

impl Subject {
    fn name(&self) -> &'static str {
        match self {
            Subject::Forward(k) => k.name(),
            Subject::Backward(k) => k.name(),
        }
    }

    fn capabilities(&self) -> Capabilities {
        match self {
            Subject::Forward(k) => k.capabilities(),
            Subject::Backward(k) => k.capabilities(),
        }
    }

    fn pass(&self) -> Pass {
        match self {
            Subject::Forward(_) => Pass::Fwd,
            Subject::Backward(_) => Pass::Bwd,
        }
    }

    fn check(&self, device: &Device, case: &Case) -> Judged {
        match self {
            Subject::Forward(k) => run_case(k.as_ref(), device, case).into(),
            Subject::Backward(k) => run_backward_case(k.as_ref(), device, case).into(),
        }
    }
}

/// The forward generations `--kernels` names (every one without a list).
fn forward_subjects(opts: &Options) -> Result<Vec<Subject>> {
    let kernels: Vec<Box<dyn Attention>> = flashcore::kernels()
        .into_iter()
        .filter(|k| crate::select::picked(opts.kernels.as_deref(), k.name()))
        .collect();
    if kernels.is_empty() {
        let names: Vec<&str> = flashcore::kernels().iter().map(|k| k.name()).collect();
        bail!(
            "no kernel matches {:?}; compiled in: {}",
            opts.kernels,
            names.join(", ")
        );
    }
    Ok(kernels.into_iter().map(Subject::Forward).collect())
}

/// The backward kernels `--kernels` names.
fn backward_subjects(opts: &Options) -> Result<Vec<Subject>> {
    if opts.batch_invariant {
        bail!("--batch-invariant is a forward option: the backward kernels do not take it (docs/MODES.md)");
    }
    if opts.kv_dtype.is_some() {
        bail!("--kv-dtype is a forward option: the backward kernels take K and V in the problem's dtype");
    }
    if opts.dtype.is_some() {
        bail!(
            "--dtype e4m3 is a forward option: the backward kernels take Q, K and V in f16 or bf16"
        );
    }
    let kernels = crate::select::named(
        flashcore::backward_kernels(),
        |k| k.name(),
        opts.kernels.as_deref(),
        &[],
        "backward kernel",
    )?;
    Ok(kernels.into_iter().map(Subject::Backward).collect())
}

/// `verify`: the forward sweep, or with `--pass bwd` the backward kernels on the forward's edge
/// list plus their own and on random problems (`case_strategy`: the forward sweep's shapes, with
/// the windows, softcap and ALiBi a backward kernel claims), each judged by the oracle's rule of
/// its pass; the first failure of each kernel is shrunk.
pub fn run(device: &Device, opts: &Options) -> Result<Vec<Tally>> {
    let info = device.info();
    let subjects = match opts.pass {
        Pass::Fwd => {
            let subjects = forward_subjects(opts)?;
            println!(
                "verify: device {} (cc {}.{}, {} SMs), seed {}, {} random cases per kernel{}",
                info.name,
                info.compute_capability.0,
                info.compute_capability.1,
                info.sm_count,
                opts.seed,
                if opts.random { opts.cases } else { 0 },
                if opts.edge { " + edge list" } else { "" }
            );
            if opts.batch_invariant {
                println!("verify: every case in the batch-invariant mode (bi=1)");
            }
            if opts.dtype == Some(InputDtype::E4m3) {
                println!("verify: every case an fp8 forward, Q, K and V in e4m3 (fp8=...,qfp8=1), O in bf16 or f16: a kernel that does not take one skips it");
            } else if opts.kv_dtype == Some(KvDtype::E4m3) {
                println!("verify: every case with an e4m3 KV cache (fp8=...): a kernel that does not take one skips it");
            }
            subjects
        }
        Pass::Bwd => {
            let subjects = backward_subjects(opts)?;
            println!(
                "verify --pass bwd: device {} (cc {}.{}), seed {}, {} random cases per kernel{}, max seq {}",
                info.name,
                info.compute_capability.0,
                info.compute_capability.1,
                opts.seed,
                if opts.random { opts.cases } else { 0 },
                if opts.edge { " + edge list" } else { "" },
                opts.max_seq
            );
            subjects
        }
    };
    if let Some(arg) = &opts.single_case {
        let case = with_batch_invariant(Case::parse(arg)?, opts.batch_invariant);
        let tallies = subjects
            .iter()
            .map(|k| single_case(k, device, &case))
            .collect();
        // The backward's single case reports the compile cost as its sweeps do; the forward's
        // never has.
        if opts.pass == Pass::Bwd {
            print_compile_stats(device);
        }
        return finish(tallies, opts);
    }
    let mut tallies = Vec::new();
    for k in &subjects {
        tallies.push(sweep(k, device, opts)?);
    }
    print_compile_stats(device);
    finish(tallies, opts)
}

/// `--case`: one case on one kernel, its verdict printed.
fn single_case(k: &Subject, device: &Device, case: &Case) -> Tally {
    let mut tally = Tally {
        kernel: k.pass().tally_name(k.name()),
        ..Default::default()
    };
    let judged = k.check(device, case);
    match &judged {
        Judged::Pass { ratio, message } => {
            println!("{}: PASS ratio {ratio:.3} ({message})", k.name())
        }
        Judged::Fail(m, _) => println!("{}: FAIL {m}", k.name()),
        Judged::Skipped(r) => println!("{}: SKIPPED {r}", k.name()),
    }
    tally.count(case, judged.result());
    tally
}

/// The head dims of `claimed` among `wanted` (`--head-dims`), as a list to draw from; `None` if
/// the kernel takes none of them. (A run's lists are few and small: leaked for the `'static`
/// list `HeadDims` holds.)
fn only_head_dims(claimed: &HeadDims, wanted: &[usize]) -> Option<HeadDims> {
    let mut l: Vec<usize> = wanted
        .iter()
        .copied()
        .filter(|&d| claimed.contains(d))
        .collect();
    l.sort_unstable();
    l.dedup();
    (!l.is_empty()).then(|| HeadDims::List(Vec::leak(l)))
}

/// One kernel's sweep: the edge list, then the random cases, the first failure shrunk.
fn sweep(k: &Subject, device: &Device, opts: &Options) -> Result<Tally> {
    let start = Instant::now();
    let pass = k.pass();
    let name = k.name();
    let label = pass.label(name);
    let mut caps = k.capabilities();
    let mut tally = Tally {
        kernel: pass.tally_name(name),
        ..Default::default()
    };
    if let Some(dims) = &opts.head_dims {
        match only_head_dims(&caps.head_dims, dims) {
            Some(l) => caps.head_dims = l,
            None => {
                println!("{label}: takes none of head dims {dims:?}; skipped");
                return Ok(tally);
            }
        }
    }
    let edges: Vec<Case> = if opts.edge {
        pass.edges(&caps, opts.dtype, opts.kv_dtype)
    } else {
        vec![]
    }
    .into_iter()
    .map(|c| with_batch_invariant(c, opts.batch_invariant))
    .collect();
    let total = edges.len() + if opts.random { opts.cases } else { 0 };
    let bar = CaseProgress::new(total, label.clone());
    for case in &edges {
        bar.start_case(case.to_arg());
        let judged = k.check(device, case);
        if let Judged::Fail(m, _) = &judged {
            bar.println(format!(
                "FAIL {label} edge: {m}\n  rerun: {}",
                pass.rerun(name, case)
            ));
        }
        tally.count(case, judged.result());
        bar.finish_case(tally.failed);
    }
    if opts.random {
        let (mut runner, strategy) = pass.strategy(&caps, opts, name);
        let mut shrunk_one = false;
        for _ in 0..opts.cases {
            let tree = strategy
                .new_tree(&mut runner)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let case = tree.current();
            bar.start_case(case.to_arg());
            let judged = k.check(device, &case);
            if let Judged::Fail(m, _) = &judged {
                bar.println(format!("FAIL {label}: {m}\n  case: {}", case.to_arg()));
                if opts.shrink && !shrunk_one {
                    shrunk_one = true;
                    let small = shrink(&|c: &Case| k.check(device, c).failed(), tree);
                    bar.println(format!("  shrunk to: {}", pass.rerun(name, &small)));
                    tally.failures.push(format!("shrunk: {}", small.to_arg()));
                }
            }
            tally.count(&case, judged.result());
            bar.finish_case(tally.failed);
        }
    }
    bar.finish();
    tally.seconds = start.elapsed().as_secs_f64();
    tally.print_summary();
    Ok(tally)
}

/// Shrinks a failing case with proptest's value tree: the simplest case that still fails.
fn shrink(fails: &dyn Fn(&Case) -> bool, mut tree: impl ValueTree<Value = Case>) -> Case {
    let mut best = tree.current();
    let mut steps = 0;
    while steps < 200 && tree.simplify() {
        steps += 1;
        if fails(&tree.current()) {
            best = tree.current();
        } else {
            while tree.complicate() {
                steps += 1;
                if fails(&tree.current()) {
                    best = tree.current();
                    break;
                }
            }
        }
    }
    best
}

/// `case` with the batch-invariant option set to `on` (kept as drawn when off).
fn with_batch_invariant(mut case: Case, on: bool) -> Case {
    case.problem.batch_invariant |= on;
    case
}

/// First-use versus cached compile cost: NVRTC runs only for modules missing from the disk cache.
pub fn print_compile_stats(device: &Device) {
    let s = device.compile_stats();
    println!(
        "compile: {} module(s) compiled by NVRTC in {:.0} ms, {} read from the disk cache in {:.1} ms, module load (driver JIT) {:.0} ms",
        s.compiled, s.compile_millis, s.from_disk_cache, s.cached_millis, s.module_load_millis
    );
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

fn finish(tallies: Vec<Tally>, opts: &Options) -> Result<Vec<Tally>> {
    println!();
    println!("| kernel | passed | failed | skipped (unsupported) | worst error ratio | seconds |");
    println!("|---|---|---|---|---|---|");
    for t in &tallies {
        println!(
            "| {} | {} | {} | {} | {:.3} | {:.1} |",
            t.kernel, t.passed, t.failed, t.skipped, t.worst_ratio, t.seconds
        );
    }
    let (p, f, s): (usize, usize, usize) = tallies.iter().fold((0, 0, 0), |a, t| {
        (a.0 + t.passed, a.1 + t.failed, a.2 + t.skipped)
    });
    println!();
    println!("verify: {p} passed, {f} failed, {s} skipped");
    if let Some(path) = &opts.json {
        std::fs::write(path, serde_json::to_string_pretty(&tallies)?)?;
    }
    if f > 0 {
        for t in &tallies {
            for m in &t.failures {
                eprintln!("{}: {m}", t.kernel);
            }
        }
        bail!("{f} case(s) failed");
    }
    Ok(tallies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_dims_narrow_to_those_the_kernel_claims() {
        let range = HeadDims::Range {
            min: 8,
            max: 256,
            multiple_of: 8,
        };
        let l = only_head_dims(&range, &[32, 8, 20, 512, 8]).expect("some claimed");
        assert!(matches!(l, HeadDims::List(&[8, 32])), "{l:?}");
        assert!(only_head_dims(&HeadDims::List(&[64, 128]), &[32, 96]).is_none());
    }

    #[test]
    fn a_tally_counts_both_passes_results_alike() {
        let a =
            Case::parse("b=2,hq=4,hkv=2,sq=65,sk=130,d=64,dtype=f16,causal=1,layout=bshd,seed=7")
                .unwrap();
        let b = Case::parse("b=1,hq=2,hkv=2,sq=9,sk=9,d=64,dtype=bf16,causal=0,layout=bshd,seed=8")
            .unwrap();
        let mut t = Tally::default();
        t.count(&a, CaseResult::Pass(0.3));
        t.count(&b, CaseResult::Pass(0.5));
        t.count(&a, CaseResult::Pass(0.4));
        t.count(&a, CaseResult::Skipped);
        assert_eq!((t.passed, t.failed, t.skipped), (3, 0, 1));
        assert_eq!(t.worst_ratio, 0.5);
        assert_eq!(t.worst_case.as_deref(), Some(b.to_arg().as_str()));
        t.count(&a, CaseResult::Fail("O differs", Some(1.7)));
        t.count(&b, CaseResult::Fail("not written", None));
        assert_eq!((t.passed, t.failed, t.skipped), (3, 2, 1));
        // A failure raises the worst ratio but is not the worst passing case.
        assert_eq!(t.worst_ratio, 1.7);
        assert_eq!(t.worst_case.as_deref(), Some(b.to_arg().as_str()));
        assert_eq!(
            t.failures,
            vec![
                format!("{}: O differs", a.to_arg()),
                format!("{}: not written", b.to_arg())
            ]
        );
        for _ in 0..30 {
            t.count(&a, CaseResult::Fail("again", None));
        }
        assert_eq!((t.failed, t.failures.len()), (32, 20));
    }
}
