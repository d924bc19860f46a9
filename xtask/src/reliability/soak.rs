//! The `soak` check of `cargo xtask reliability` (the list in `super` says what it tries).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use flashcore::{Attention, AttentionProblem, Device, HeadDims};
use indicatif::{ProgressBar, ProgressStyle};

use super::host::mib;
use super::watchdog::{progress, step};
use super::{Args, Report, Res};
use crate::case::{run_case, Case, Outcome};

pub(super) fn run(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
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
    use crate::reliability::selected_kernels;

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
