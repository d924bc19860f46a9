//! `cargo xtask verify`: property-based tests over random problems for every generation compiled
//! in, plus a fixed list of edge cases, judged by the oracle's one tolerance rule.

use std::time::Instant;

use crate::progress::CaseProgress;
use anyhow::{bail, Result};
use flashcore::{
    AlibiSlopes, Attention, AttentionProblem, Capabilities, DType, Device, HeadDims, Layout,
    ModeSupport,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use crate::case::{run_backward_case, run_case, BwdOutcome, Case, Outcome};
use crate::mode_case::{CacheKind, ModeKeys};

/// Which pass `verify` checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Pass {
    /// The forward (O, LSE) of every generation.
    Fwd,
    /// The backward (dQ, dK, dV) of every backward kernel.
    Bwd,
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

    fn record(&mut self, case: &Case, outcome: &Outcome) {
        self.count(
            case,
            match outcome {
                Outcome::Pass(v) => CaseResult::Pass(v.ratio),
                Outcome::Fail(msg, v) => CaseResult::Fail(msg, v.as_ref().map(|v| v.ratio)),
                Outcome::Skipped(_) => CaseResult::Skipped,
            },
        );
    }

    fn record_bwd(&mut self, case: &Case, outcome: &BwdOutcome) {
        self.count(
            case,
            match outcome {
                BwdOutcome::Pass(v) => CaseResult::Pass(v.ratio),
                BwdOutcome::Fail(msg, v) => CaseResult::Fail(msg, v.as_ref().map(|v| v.ratio)),
                BwdOutcome::Skipped(_) => CaseResult::Skipped,
            },
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

/// The case generator of one kernel's sweep: ChaCha seeded by `seed` (the run's seed mixed with
/// the kernel's name, and the pass), so a rerun with the same `--seed` draws the same cases.
fn seeded_runner(seed: u64, cases: usize) -> TestRunner {
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(
        Config {
            cases: cases as u32,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    )
}

/// Sequence lengths: uniform, plus tile boundaries ±1 (16, 32, 64, 128-row tiles) so the
/// masked-tail paths come up often.
fn seq_strategy(max_seq: usize) -> BoxedStrategy<usize> {
    let boundary = (
        prop::sample::select(vec![16usize, 32, 64, 128]),
        1usize..=16,
        -1i64..=1,
    )
        .prop_map(move |(tile, k, delta)| {
            ((tile * k) as i64 + delta).clamp(1, max_seq as i64) as usize
        });
    prop_oneof![2 => 1usize..=max_seq, 1 => boundary].boxed()
}

fn head_dim_strategy(h: &HeadDims) -> BoxedStrategy<usize> {
    match h.clone() {
        HeadDims::List(l) => prop::sample::select(l.to_vec()).boxed(),
        HeadDims::Range {
            min,
            max,
            multiple_of,
        } => {
            let common: Vec<usize> = [32usize, 64, 96, 128, 256]
                .into_iter()
                .filter(|d| h.contains(*d))
                .collect();
            let any =
                (min.div_ceil(multiple_of)..=max / multiple_of).prop_map(move |k| k * multiple_of);
            if common.is_empty() {
                any.boxed()
            } else {
                prop_oneof![1 => prop::sample::select(common), 1 => any].boxed()
            }
        }
    }
}

/// Random problems within what `caps` claims: batch 1-4, heads_q 1-16 with heads_kv dividing
/// it, seq_q and seq_k 1..=max_seq independently, both dtypes, causal, both layouts; for a kernel
/// that takes inference modes, half the cases also draw those (`mode_keys_strategy`).
pub fn case_strategy(caps: &Capabilities, max_seq: usize) -> BoxedStrategy<Case> {
    let dense = dense_case_strategy(caps, max_seq);
    if caps.modes == ModeSupport::NONE {
        return dense;
    }
    let with_modes = (
        dense_case_strategy(caps, max_seq),
        mode_keys_strategy(caps.modes, max_seq),
    )
        .prop_map(|(mut case, keys)| {
            let p = &mut case.problem;
            if keys.window_right.is_some() {
                p.causal = false; // causal already fixes the right edge at 0
            }
            crate::mode_case::apply(p, &keys, case.data_seed);
            case
        });
    prop_oneof![1 => dense, 1 => with_modes].boxed()
}

/// The inference modes a case turns on, within what the kernel takes: varlen, a contiguous or
/// paged cache (block sizes 16..=256) with or without appended rows, windows (0, 1, in range,
/// past the sequence), softcap and ALiBi (per head or per batch and head).
fn mode_keys_strategy(m: ModeSupport, max_seq: usize) -> BoxedStrategy<ModeKeys> {
    let varlen = if m.varlen {
        any::<bool>().boxed()
    } else {
        Just(false).boxed()
    };
    let mut caches: Vec<BoxedStrategy<Option<CacheKind>>> = vec![Just(None).boxed()];
    if m.seqused_k {
        caches.push(Just(Some(CacheKind::Contiguous)).boxed());
    }
    if m.paged {
        caches.push(
            prop_oneof![
                prop::sample::select(vec![16usize, 64, 256]),
                (1usize..=16).prop_map(|k| 16 * k)
            ]
            .prop_map(|block_size| Some(CacheKind::Paged { block_size }))
            .boxed(),
        );
    }
    let cache = prop::strategy::Union::new(caches);
    let window = move || {
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(0usize)),
            1 => Just(Some(1usize)),
            1 => (0..=max_seq).prop_map(Some),
            1 => (max_seq..=4 * max_seq).prop_map(Some),
        ]
        .boxed()
    };
    let (wl, wr) = if m.window {
        (window(), window())
    } else {
        (Just(None).boxed(), Just(None).boxed())
    };
    let softcap = if m.softcap {
        prop_oneof![2 => Just(None), 1 => prop::sample::select(vec!["1", "5", "30", "50.5"]).prop_map(|c| Some(c.to_string()))].boxed()
    } else {
        Just(None).boxed()
    };
    let alibi = if m.alibi {
        prop_oneof![2 => Just(None), 1 => Just(Some(AlibiSlopes::PerHead)), 1 => Just(Some(AlibiSlopes::PerBatchHead))].boxed()
    } else {
        Just(None).boxed()
    };
    (
        varlen,
        cache,
        0usize..=8,
        any::<bool>(),
        wl,
        wr,
        softcap,
        alibi,
    )
        .prop_map(
            |(varlen, cache, append, appends, window_left, window_right, softcap, alibi)| {
                ModeKeys {
                    varlen,
                    cache,
                    append: if cache.is_some() && appends {
                        append
                    } else {
                        0
                    },
                    window_left,
                    window_right,
                    softcap,
                    alibi,
                }
            },
        )
        .boxed()
}

fn dense_case_strategy(caps: &Capabilities, max_seq: usize) -> BoxedStrategy<Case> {
    let gqa = caps.gqa;
    let heads = (1usize..=16).prop_flat_map(move |hq| {
        let divisors: Vec<usize> = (1..=hq).filter(|d| hq % d == 0).collect();
        let kv = if gqa {
            prop::sample::select(divisors).boxed()
        } else {
            Just(hq).boxed()
        };
        (Just(hq), kv)
    });
    let causal = if caps.causal {
        any::<bool>().boxed()
    } else {
        Just(false).boxed()
    };
    (
        1usize..=4,
        heads,
        seq_strategy(max_seq),
        seq_strategy(max_seq),
        head_dim_strategy(&caps.head_dims),
        prop::sample::select(caps.dtypes.to_vec()),
        causal,
        prop::sample::select(caps.layouts.to_vec()),
        any::<u64>(),
    )
        .prop_map(
            |(batch, (hq, hkv), sq, sk, d, dtype, causal, layout, seed)| Case {
                problem: AttentionProblem::new(batch, hq, sq, d)
                    .with_kv(hkv, sk)
                    .with_dtype(dtype)
                    .with_causal(causal)
                    .with_layout(layout),
                data_seed: seed,
            },
        )
        .boxed()
}

/// The fixed edge list for a kernel: single rows and keys, seq_q != seq_k both ways with
/// causal, lengths at tile boundaries ±1, no keys at all, GQA and MQA, both dtypes and layouts.
pub fn edge_cases(caps: &Capabilities) -> Vec<Case> {
    let dims: Vec<usize> = match &caps.head_dims {
        HeadDims::List(l) => l.to_vec(),
        h => [h_min(h), 64, 128, 256]
            .into_iter()
            .filter(|d| h.contains(*d))
            .collect(),
    };
    let mut shapes: Vec<(usize, usize, bool)> = vec![
        (1, 1, false),
        (1, 1, true),
        (1, 777, false),
        (1, 777, true),
        (777, 1, false),
        (777, 1, true),
        (65, 130, true),
        (130, 65, true),
        (200, 1000, true),
        (1000, 200, true),
        (5, 0, false),
    ];
    for n in [
        15usize, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257,
    ] {
        shapes.push((n, n, false));
        shapes.push((n, n, true));
    }
    let mut cases = Vec::new();
    let mut i = 0u64;
    for &d in &dims {
        for &(sq, sk, causal) in &shapes {
            if causal && !caps.causal {
                continue;
            }
            let dtype = caps.dtypes[(i as usize) % caps.dtypes.len()];
            let layout = Layout::ALL[(i as usize / 2) % 2];
            let (hq, hkv) = if caps.gqa {
                [(2, 2), (8, 2), (4, 1)][(i as usize) % 3]
            } else {
                (2, 2)
            };
            cases.push(Case {
                problem: AttentionProblem::new(1 + (i as usize % 2), hq, sq, d)
                    .with_kv(hkv, sk)
                    .with_causal(causal)
                    .with_dtype(dtype)
                    .with_layout(layout),
                data_seed: 1000 + i,
            });
            i += 1;
        }
    }
    if caps.modes != ModeSupport::NONE {
        cases.extend(mode_edge_cases(caps, &dims));
    }
    cases
}

/// Fixed mode cases: single-token decode over a paged cache, lengths 0 and 1, windows 0, 1 and
/// past the sequence with seq_q != seq_k both ways, softcap and ALiBi with and without causal.
fn mode_edge_cases(caps: &Capabilities, dims: &[usize]) -> Vec<Case> {
    const LINES: &[&str] = &[
        "b=3,hq=8,hkv=2,sq=1,sk=300,causal=1,cache=paged,bs=16,append=1",
        "b=4,hq=4,hkv=4,sq=1,sk=1000,cache=contig",
        "b=2,hq=4,hkv=1,sq=7,sk=256,causal=1,cache=paged,bs=256,append=7",
        "b=4,hq=2,hkv=2,sq=130,sk=130,causal=1,varlen=1",
        "b=4,hq=2,hkv=1,sq=65,sk=200,varlen=1,cache=paged,bs=48",
        "b=1,hq=2,sq=100,sk=300,causal=1,wl=0",
        "b=1,hq=2,sq=300,sk=100,causal=1,wl=1",
        "b=1,hq=2,sq=200,sk=200,wl=1000,wr=1000",
        "b=2,hq=2,sq=129,sk=257,wl=64,wr=0",
        "b=2,hq=2,sq=64,sk=64,wl=0,wr=0",
        "b=2,hq=4,sq=100,sk=333,causal=1,softcap=30",
        "b=2,hq=4,sq=100,sk=100,softcap=1,alibi=head",
        "b=2,hq=4,sq=77,sk=300,causal=1,alibi=batch",
        "b=3,hq=4,hkv=2,sq=50,sk=500,causal=1,wl=100,softcap=50.5,alibi=batch,varlen=1",
    ];
    let mut cases = Vec::new();
    for (i, line) in LINES.iter().enumerate() {
        for (j, &d) in dims.iter().enumerate() {
            let dtype = caps.dtypes[(i + j) % caps.dtypes.len()];
            let arg = format!("{line},d={d},dtype={dtype},seed={}", 5000 + 16 * i + j);
            let case = Case::parse(&arg).expect("the edge list parses");
            if caps.modes.missing(&case.problem.modes).is_none() {
                cases.push(case);
            }
        }
    }
    cases
}

fn h_min(h: &HeadDims) -> usize {
    match h {
        HeadDims::Range {
            min, multiple_of, ..
        } => min.div_ceil(*multiple_of) * multiple_of,
        HeadDims::List(l) => l[0],
    }
}

/// Shrinks a failing case with proptest's value tree: simplest case that still fails.
fn shrink(kernel: &dyn Attention, device: &Device, tree: impl ValueTree<Value = Case>) -> Case {
    shrink_with(
        &|c: &Case| matches!(run_case(kernel, device, c), Outcome::Fail(..)),
        tree,
    )
}

/// Shrinks with any failure test (the forward's or the backward's).
fn shrink_with(fails: &dyn Fn(&Case) -> bool, mut tree: impl ValueTree<Value = Case>) -> Case {
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

pub fn run(device: &Device, opts: &Options) -> Result<Vec<Tally>> {
    if opts.pass == Pass::Bwd {
        return run_backward(device, opts);
    }
    let kernels: Vec<Box<dyn Attention>> = flashcore::kernels()
        .into_iter()
        .filter(|k| {
            opts.kernels
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n == k.name()))
        })
        .collect();
    if kernels.is_empty() {
        let names: Vec<&str> = flashcore::kernels().iter().map(|k| k.name()).collect();
        bail!(
            "no kernel matches {:?}; compiled in: {}",
            opts.kernels,
            names.join(", ")
        );
    }
    println!(
        "verify: device {} (cc {}.{}, {} SMs), seed {}, {} random cases per kernel{}",
        device.info().name,
        device.info().compute_capability.0,
        device.info().compute_capability.1,
        device.info().sm_count,
        opts.seed,
        if opts.random { opts.cases } else { 0 },
        if opts.edge { " + edge list" } else { "" }
    );
    if opts.batch_invariant {
        println!("verify: every case in the batch-invariant mode (bi=1)");
    }
    let mut tallies = Vec::new();
    if let Some(arg) = &opts.single_case {
        let case = with_batch_invariant(Case::parse(arg)?, opts.batch_invariant);
        for k in &kernels {
            let mut t = Tally {
                kernel: k.name().into(),
                ..Default::default()
            };
            let outcome = run_case(k.as_ref(), device, &case);
            match &outcome {
                Outcome::Pass(v) => {
                    println!("{}: PASS ratio {:.3} ({})", k.name(), v.ratio, v.message)
                }
                Outcome::Fail(m, _) => println!("{}: FAIL {m}", k.name()),
                Outcome::Skipped(r) => println!("{}: SKIPPED {r}", k.name()),
            }
            t.record(&case, &outcome);
            tallies.push(t);
        }
        return finish(tallies, opts);
    }
    for k in &kernels {
        let start = Instant::now();
        let caps = k.capabilities();
        let mut tally = Tally {
            kernel: k.name().into(),
            ..Default::default()
        };
        let bi = opts.batch_invariant;
        let edges: Vec<Case> = if opts.edge { edge_cases(&caps) } else { vec![] }
            .into_iter()
            .map(|c| with_batch_invariant(c, bi))
            .collect();
        let total = edges.len() + if opts.random { opts.cases } else { 0 };
        let bar = CaseProgress::new(total, k.name().to_string());
        for case in &edges {
            bar.start_case(case.to_arg());
            let outcome = run_case(k.as_ref(), device, case);
            if let Outcome::Fail(m, _) = &outcome {
                bar.println(format!(
                    "FAIL {} edge: {m}\n  rerun: cargo xtask verify --kernels {} --case '{}'",
                    k.name(),
                    k.name(),
                    case.to_arg()
                ));
            }
            tally.record(case, &outcome);
            bar.finish_case(tally.failed);
        }
        if opts.random {
            let mut runner = seeded_runner(opts.seed ^ fxhash(k.name()), opts.cases);
            let strategy = case_strategy(&caps, opts.max_seq)
                .prop_map(move |c| with_batch_invariant(c, bi))
                .boxed();
            let mut shrunk_one = false;
            for _ in 0..opts.cases {
                let tree = strategy
                    .new_tree(&mut runner)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let case = tree.current();
                bar.start_case(case.to_arg());
                let outcome = run_case(k.as_ref(), device, &case);
                if let Outcome::Fail(m, _) = &outcome {
                    bar.println(format!("FAIL {}: {m}\n  case: {}", k.name(), case.to_arg()));
                    if opts.shrink && !shrunk_one {
                        shrunk_one = true;
                        let small = shrink(k.as_ref(), device, tree);
                        bar.println(format!(
                            "  shrunk to: cargo xtask verify --kernels {} --case '{}'",
                            k.name(),
                            small.to_arg()
                        ));
                        tally.failures.push(format!("shrunk: {}", small.to_arg()));
                    }
                }
                tally.record(&case, &outcome);
                bar.finish_case(tally.failed);
            }
        }
        bar.finish();
        tally.seconds = start.elapsed().as_secs_f64();
        tally.print_summary();
        tallies.push(tally);
    }
    print_compile_stats(device);
    finish(tallies, opts)
}

/// `case` with the batch-invariant option set to `on` (kept as drawn when off).
fn with_batch_invariant(mut case: Case, on: bool) -> Case {
    case.problem.batch_invariant |= on;
    case
}

/// `verify --pass bwd`: the backward kernels on the forward's edge list and random dense
/// problems (`dense_case_strategy`: the forward sweep's shapes without inference modes), each
/// judged by the oracle's backward rule; the first failure is shrunk.
fn run_backward(device: &Device, opts: &Options) -> Result<Vec<Tally>> {
    if opts.batch_invariant {
        bail!("--batch-invariant is a forward option: the backward kernels do not take it (docs/MODES.md)");
    }
    let kernels = crate::select::named(
        flashcore::backward_kernels(),
        |k| k.name(),
        opts.kernels.as_deref(),
        &[],
        "backward kernel",
    )?;
    println!(
        "verify --pass bwd: device {} (cc {}.{}), seed {}, {} random cases per kernel{}, max seq {}",
        device.info().name,
        device.info().compute_capability.0,
        device.info().compute_capability.1,
        opts.seed,
        if opts.random { opts.cases } else { 0 },
        if opts.edge { " + edge list" } else { "" },
        opts.max_seq
    );
    let mut tallies = Vec::new();
    for k in &kernels {
        let start = Instant::now();
        let caps = k.capabilities();
        let mut tally = Tally {
            kernel: format!("{} (bwd)", k.name()),
            ..Default::default()
        };
        let rerun = |case: &Case| {
            format!(
                "cargo xtask verify --pass bwd --kernels {} --case '{}'",
                k.name(),
                case.to_arg()
            )
        };
        if let Some(arg) = &opts.single_case {
            let case = Case::parse(arg)?;
            let outcome = run_backward_case(k.as_ref(), device, &case);
            match &outcome {
                BwdOutcome::Pass(v) => {
                    println!("{}: PASS ratio {:.3} ({})", k.name(), v.ratio, v.message)
                }
                BwdOutcome::Fail(m, _) => println!("{}: FAIL {m}", k.name()),
                BwdOutcome::Skipped(r) => println!("{}: SKIPPED {r}", k.name()),
            }
            tally.record_bwd(&case, &outcome);
            tallies.push(tally);
            continue;
        }
        let edges = if opts.edge {
            let mut e = edge_cases(&caps);
            e.extend(backward_edge_cases(&caps));
            e
        } else {
            vec![]
        };
        let total = edges.len() + if opts.random { opts.cases } else { 0 };
        let bar = CaseProgress::new(total, format!("{} bwd", k.name()));
        for case in &edges {
            bar.start_case(case.to_arg());
            let outcome = run_backward_case(k.as_ref(), device, case);
            if let BwdOutcome::Fail(m, _) = &outcome {
                bar.println(format!(
                    "FAIL {} bwd edge: {m}\n  rerun: {}",
                    k.name(),
                    rerun(case)
                ));
            }
            tally.record_bwd(case, &outcome);
            bar.finish_case(tally.failed);
        }
        if opts.random {
            let mut runner = seeded_runner(opts.seed ^ fxhash(k.name()) ^ 0xb4c4_3a2d, opts.cases);
            let strategy = dense_case_strategy(&caps, opts.max_seq);
            let mut shrunk_one = false;
            for _ in 0..opts.cases {
                let tree = strategy
                    .new_tree(&mut runner)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let case = tree.current();
                bar.start_case(case.to_arg());
                let outcome = run_backward_case(k.as_ref(), device, &case);
                if let BwdOutcome::Fail(m, _) = &outcome {
                    bar.println(format!(
                        "FAIL {} bwd: {m}\n  case: {}",
                        k.name(),
                        case.to_arg()
                    ));
                    if opts.shrink && !shrunk_one {
                        shrunk_one = true;
                        let fails = |c: &Case| {
                            matches!(
                                run_backward_case(k.as_ref(), device, c),
                                BwdOutcome::Fail(..)
                            )
                        };
                        let small = shrink_with(&fails, tree);
                        bar.println(format!("  shrunk to: {}", rerun(&small)));
                        tally.failures.push(format!("shrunk: {}", small.to_arg()));
                    }
                }
                tally.record_bwd(&case, &outcome);
                bar.finish_case(tally.failed);
            }
        }
        bar.finish();
        tally.seconds = start.elapsed().as_secs_f64();
        tally.print_summary();
        tallies.push(tally);
    }
    print_compile_stats(device);
    finish(tallies, opts)
}

/// Backward-only edges beyond the forward's list: negative and zero scale, an odd head dim
/// with seq_k > seq_q causal, one query row over many keys with MQA (every key's dK/dV sums a
/// single row per head), and many query rows over one key (dV sums them all).
fn backward_edge_cases(caps: &Capabilities) -> Vec<Case> {
    [
        "b=2,hq=4,hkv=2,sq=100,sk=37,d=64,causal=1,scale=-0.3,seed=9001",
        "b=1,hq=2,sq=64,sk=64,d=32,scale=0,seed=9002",
        "b=1,hq=3,hkv=1,sq=129,sk=257,d=100,causal=1,dtype=bf16,scale=0.5,seed=9003",
        "b=2,hq=8,hkv=1,sq=1,sk=300,d=128,causal=1,seed=9004",
        "b=1,hq=4,hkv=2,sq=500,sk=1,d=64,dtype=bf16,seed=9005",
        "b=3,hq=2,sq=33,sk=65,d=256,layout=bhsd,causal=1,seed=9006",
    ]
    .iter()
    .map(|a| Case::parse(a).expect("the backward edge list parses"))
    .filter(|c| caps.head_dims.contains(c.problem.head_dim))
    .collect()
}

/// A small problem of the oracle self-checks, drawn from `seed`: 1-2 batches, `heads_q` query
/// heads (MHA on even seeds, two query heads per KV head on odd ones), 1-40 queries, 1-50 keys,
/// D = 16, causal every third seed, both dtypes.
fn self_check_case(seed: u64, heads_q: usize) -> Case {
    let heads_kv = if seed.is_multiple_of(2) {
        heads_q
    } else {
        heads_q / 2
    };
    Case {
        problem: AttentionProblem::new(
            1 + seed as usize % 2,
            heads_q,
            1 + (seed as usize * 7) % 40,
            16,
        )
        .with_kv(heads_kv, 1 + (seed as usize * 13) % 50)
        .with_causal(seed.is_multiple_of(3))
        .with_dtype(DType::ALL[seed as usize % 2]),
        data_seed: seed,
    }
}

/// The backward oracle without a GPU: on small random problems the f64 gradients rounded to the
/// dtype and the low-precision program's gradients pass the rule, and a gradient off by 1.0
/// fails it.
pub fn oracle_backward_self_check() -> Result<usize> {
    use flashcore_oracle::{gradients_f64, gradients_low_precision, judge_backward};
    let mut checked = 0;
    for seed in 0..16u64 {
        let case = self_check_case(seed, 4);
        let inp = crate::case::inputs(&case);
        let d_o = crate::case::grad_output(&case);
        let op = case.oracle_problem();
        let prec = crate::inputs::precision(case.problem.dtype);
        let (q, k, v, g) = (inp.q.view(), inp.k.view(), inp.v.view(), d_o.view());
        let rf = gradients_f64(&op, q, k, v, g);
        let lp = gradients_low_precision(&op, prec, q, k, v, g);
        let [dq, dk, mut dv] = [&rf.dq, &rf.dk, &rf.dv].map(|a| a.mapv(|x| prec.round(x as f32)));
        let verdict = judge_backward(&op, prec, dq.view(), dk.view(), dv.view(), &rf, &lp);
        if !verdict.pass {
            bail!(
                "oracle backward self-check: the rounded f64 gradients fail their own rule on {}: {}",
                case.to_arg(),
                verdict.message
            );
        }
        if let Some(x) = dv.iter_mut().next() {
            *x += 1.0;
        }
        if judge_backward(&op, prec, dq.view(), dk.view(), dv.view(), &rf, &lp).pass {
            bail!(
                "oracle backward self-check: a dV off by 1.0 passed on {}",
                case.to_arg()
            );
        }
        checked += 1;
    }
    Ok(checked)
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

/// Runs without a GPU: the oracle's own consistency checks on random small problems.
pub fn oracle_self_check() -> Result<usize> {
    use flashcore_oracle::{check, reference_f64, OracleProblem, Precision, Rows};
    let mut checked = 0;
    for seed in 0..24u64 {
        let case = self_check_case(seed, 2);
        let inp = crate::case::inputs(&case);
        let op: OracleProblem = case.oracle_problem();
        let prec = if case.problem.dtype == DType::F16 {
            Precision::F16
        } else {
            Precision::Bf16
        };
        let r = reference_f64(&op, inp.q.view(), inp.k.view(), inp.v.view(), &Rows::All);
        let (o, lse) = r.to_dense(&op);
        let o32 = o.mapv(|x| prec.round(x as f32));
        let lse32 = lse.mapv(|x| x as f32);
        let v = check(
            &op,
            prec,
            inp.q.view(),
            inp.k.view(),
            inp.v.view(),
            o32.view(),
            lse32.view(),
            &Rows::All,
        );
        if !v.pass {
            bail!(
                "oracle self-check: the rounded f64 reference fails its own rule on {}: {}",
                case.to_arg(),
                v.message
            );
        }
        let mut bad = o32.clone();
        if let Some(x) = bad.iter_mut().next() {
            *x += 1.0;
        }
        if op.visible_keys(0) > 0
            && check(
                &op,
                prec,
                inp.q.view(),
                inp.k.view(),
                inp.v.view(),
                bad.view(),
                lse32.view(),
                &Rows::All,
            )
            .pass
        {
            bail!(
                "oracle self-check: an output off by 1.0 passed on {}",
                case.to_arg()
            );
        }
        checked += 1;
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--seed` reproduces a sweep: the same seed draws the same cases, another seed others.
    #[test]
    fn a_seed_draws_the_same_cases_again() {
        let caps = flashcore::kernels()[0].capabilities();
        let s = case_strategy(&caps, 1100);
        let draw = |seed: u64| {
            let mut r = seeded_runner(seed, 5);
            (0..5)
                .map(|_| s.new_tree(&mut r).unwrap().current().to_arg())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(41), draw(41));
        assert_ne!(draw(41), draw(42));
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

    #[test]
    fn generated_cases_stay_in_bounds() {
        let caps = flashcore::kernels()[0].capabilities();
        let mut runner = TestRunner::deterministic();
        let s = case_strategy(&caps, 1100);
        let mut with_modes = 0;
        for _ in 0..300 {
            let c = s.new_tree(&mut runner).unwrap().current();
            let p = &c.problem;
            assert!((1..=4).contains(&p.batch));
            assert!((1..=16).contains(&p.heads_q) && p.heads_q.is_multiple_of(p.heads_kv));
            // A paged cache's capacity is rounded up to whole blocks (at most 256 rows).
            let max_k = if matches!(p.modes.kv, flashcore::KvStorage::Paged { .. }) {
                1100 + 255
            } else {
                1100
            };
            assert!((1..=1100).contains(&p.seq_q) && (1..=max_k).contains(&p.seq_k));
            assert!(caps.head_dims.contains(p.head_dim));
            p.validate().unwrap();
            assert_eq!(caps.modes.missing(&p.modes), None);
            with_modes += !p.modes.is_dense() as usize;
        }
        if caps.modes != ModeSupport::NONE {
            assert!(
                (100..=200).contains(&with_modes),
                "{with_modes} of 300 draw modes"
            );
        }
    }

    #[test]
    fn tile_boundaries_come_up() {
        let caps = flashcore::kernels()[0].capabilities();
        let mut runner = TestRunner::deterministic();
        let s = case_strategy(&caps, 1100);
        let hits = (0..500)
            .map(|_| s.new_tree(&mut runner).unwrap().current())
            .filter(|c| [63, 64, 65, 127, 128, 129].contains(&c.problem.seq_q))
            .count();
        assert!(hits > 10, "only {hits} boundary lengths in 500 cases");
    }

    #[test]
    fn edge_list_covers_the_named_edges() {
        let caps = flashcore::kernels()[0].capabilities();
        let e = edge_cases(&caps);
        let has = |f: &dyn Fn(&AttentionProblem) -> bool| e.iter().any(|c| f(&c.problem));
        assert!(has(&|p| p.seq_q == 1));
        assert!(has(&|p| p.seq_k == 1));
        assert!(has(&|p| p.causal && p.seq_q > p.seq_k));
        assert!(has(&|p| p.causal && p.seq_q < p.seq_k));
        assert!(has(&|p| p.seq_k == 0));
        assert!(has(&|p| p.seq_q == 129));
        assert!(has(&|p| p.heads_kv == 1 && p.heads_q > 1));
    }

    #[test]
    fn the_oracle_self_check_passes() {
        assert!(oracle_self_check().unwrap() > 0);
    }

    #[test]
    fn the_oracle_backward_self_check_passes() {
        assert!(oracle_backward_self_check().unwrap() > 0);
    }

    #[test]
    fn backward_cases_are_dense_and_in_bounds() {
        // The scalar backward takes every head dim, so the whole edge list applies to it.
        let caps = flashcore::backward_kernel("scalar")
            .expect("the scalar backward is compiled in")
            .capabilities();
        assert_eq!(caps.modes, ModeSupport::NONE);
        let mut runner = TestRunner::deterministic();
        let s = dense_case_strategy(&caps, 300);
        for _ in 0..200 {
            let c = s.new_tree(&mut runner).unwrap().current();
            assert!(c.problem.modes.is_dense());
            assert!(c.problem.seq_q <= 300 && c.problem.seq_k <= 300);
            flashcore::backward::validate_backward(&c.problem).unwrap();
        }
        let edges = backward_edge_cases(&caps);
        assert_eq!(edges.len(), 6);
        assert!(edges.iter().any(|c| c.problem.softmax_scale == Some(0.0)));
    }
}
