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
//! - `modes`: the inference modes (docs/MODES.md): NaN in unread cache slots and pages leaves
//!   the output bit-identical, paged = contiguous and varlen = each sequence alone bit for bit,
//!   prefix-shared pages, and bad host or device tables rejected with the field named.
//! - `batchinv`: the batch-invariant mode: each sequence of random varlen, paged, cached, decode
//!   and dense batches bit-identical alone, in one batch and in another (`batchinv.rs`).
//! - `oom`: more device memory than is free gives an out-of-memory error, and the same `Device`
//!   then runs a normal case correctly (no leak from the failed call).
//! - `soak`: 20000 `verify`-style random cases across the generations, zero failures, and
//!   device free memory before and after within a tolerance.
//! - `streams`: several host threads, each with its own stream of the device's context
//!   (`Device::from_stream`, `Device::with_stream`, `Attention::forward_on`), run a mix of
//!   problems (the persistent generations' workspace counters included) at once; every output
//!   bit-identical to a sequential run, and no device memory lost once the streams are gone.
//! - `backward`: every backward kernel: NaN padding around Q, K, V, O, dO and LSE leaves dQ, dK,
//!   dV bit-identical and the gradients' padding untouched; 1000 runs bit-identical; batch·heads
//!   and sequences past 65535 and tensors past 2^31 elements finite and, on chosen GQA groups,
//!   passing the oracle (or refused as unsupported).
//!
//! A watchdog turns a hang into exit code 3 with the step that hung. docs/RELIABILITY.md.

mod backward;
mod badinput;
mod batchinv;
pub mod cp;
mod determinism;
mod device;
mod grid;
mod host;
mod modes;
mod nonfinite;
mod oob;
mod oom;
mod soak;
mod streams;
mod watchdog;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use flashcore::{Attention, AttentionProblem, Device};
use flashcore_oracle::OracleProblem;

use crate::case::Case;
use watchdog::start_watchdog;

/// One sub-check: it runs on each selected generation and adds its lines to the report.
type Check = fn(&Device, &[Box<dyn Attention>], &Args, &mut Report);

/// The sub-checks by name, in the order they run.
const CHECKS: &[(&str, Check)] = &[
    ("badinput", badinput::run),
    ("oob", oob::run),
    ("determinism", determinism::run),
    ("grid", grid::run),
    ("nonfinite", nonfinite::run),
    ("modes", modes::run),
    ("batchinv", batchinv::run),
    ("oom", oom::run),
    ("soak", soak::run),
    ("streams", streams::run),
    ("backward", backward::run),
    ("cp", cp::run),
];

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Comma-separated sub-checks (default: all): badinput, oob, determinism, grid, nonfinite,
    /// modes, batchinv, oom, soak, streams, backward, cp (2+ GPUs).
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
    /// Repeated runs of each backward kernel's GQA causal problem in `backward`.
    #[arg(long, default_value_t = 1000)]
    pub backward_runs: usize,
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
    /// Host threads of `streams`, each calling on its own stream of the device's context.
    #[arg(long, default_value_t = 4)]
    pub streams_threads: usize,
    /// Calls each `streams` thread makes (the mix's problems in its own order).
    #[arg(long, default_value_t = 300)]
    pub streams_iterations: usize,
    /// Stop the `streams` threads after this many seconds if their calls are not done (0: no
    /// limit).
    #[arg(long, default_value_t = 0)]
    pub streams_seconds: u64,
    /// Device memory `streams` may lose between after its sequential pass and after its
    /// threads' streams are gone (MiB).
    #[arg(long, default_value_t = 16)]
    pub streams_slack_mib: usize,
    /// Skip the two tensors past 2^31 elements in `grid` (each needs ~9 GB of device memory
    /// and up to ~40 GB of host memory for the oracle) and the two backward problems past 2^31
    /// in `backward` (~20 GB of device memory each).
    #[arg(long)]
    pub no_huge: bool,
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// The forward problems of the checks in the batch-invariant mode (`bi=1` on every case
    /// line, and the determinism check's problems); `batchinv` always runs in it.
    #[arg(long)]
    pub batch_invariant: bool,
    /// Head dims the checks run at, in place of each check's own (64 and/or 128), where the
    /// kernel takes them; a check that runs at one head dim takes the first.
    #[arg(long, value_delimiter = ',')]
    pub head_dims: Option<Vec<usize>>,
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

/// The cases of a padded-against-dense check: how many ran, how many the kernel does not take,
/// and the first six failures (then "...").
#[derive(Default)]
struct PaddedTally {
    ran: usize,
    skipped: usize,
    fails: Vec<String>,
}

impl PaddedTally {
    /// One case: `Ok(true)` ran and agreed, `Ok(false)` not taken, `Err` a failure, told as
    /// "`name`: why".
    fn count(&mut self, outcome: Result<bool, String>, name: impl FnOnce() -> String) {
        match outcome {
            Ok(true) => self.ran += 1,
            Ok(false) => self.skipped += 1,
            Err(m) => {
                self.ran += 1;
                if self.fails.len() < 6 {
                    self.fails.push(format!("{}: {m}", name()));
                } else if self.fails.len() == 6 {
                    self.fails.push("...".into());
                }
            }
        }
    }

    /// The check's line: SKIP where nothing ran, PASS saying `passed` of the count that ran
    /// (with ", N unsupported" appended where some were not taken), else FAIL with the failures.
    fn report(
        self,
        report: &mut Report,
        check: &'static str,
        kernel: &str,
        passed: impl FnOnce(usize) -> String,
        t: Instant,
    ) {
        let PaddedTally {
            ran,
            skipped,
            fails,
        } = self;
        if ran == 0 {
            report.add(
                check,
                kernel,
                Res::Skip,
                format!("{skipped} cases unsupported"),
                t,
            );
        } else if fails.is_empty() {
            let unsupported = if skipped > 0 {
                format!(", {skipped} unsupported")
            } else {
                String::new()
            };
            report.add(
                check,
                kernel,
                Res::Pass,
                format!("{}{unsupported}", passed(ran)),
                t,
            );
        } else {
            let failed = fails.iter().filter(|f| *f != "...").count();
            let detail = format!("{failed}+ of {ran} differ: {}", fails.join("; "));
            report.add(check, kernel, Res::Fail, detail, t);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Kernels and problems, shared by the checks

fn selected_kernels(names: &Option<Vec<String>>) -> Result<Vec<Box<dyn Attention>>> {
    // A name may be a backward kernel only (the `backward` check selects by it too).
    let backward: Vec<&str> = flashcore::backward_kernels()
        .iter()
        .map(|k| k.name())
        .collect();
    crate::select::named(
        flashcore::kernels(),
        |k| k.name(),
        names.as_deref(),
        &backward,
        "kernel",
    )
}

/// Head dims to try for a kernel: those of `wanted` it takes, else its first representative.
fn dims_for(k: &dyn Attention, args: &Args, wanted: &[usize]) -> Vec<usize> {
    dims_in(&k.capabilities().head_dims, wanted_dims(args, wanted))
}

/// `--head-dims` where given, else a check's own head dims.
fn wanted_dims<'a>(args: &'a Args, own: &'a [usize]) -> &'a [usize] {
    args.head_dims.as_deref().unwrap_or(own)
}

/// [`dims_for`] on a kernel's head dims (forward or backward).
fn dims_in(h: &flashcore::HeadDims, wanted: &[usize]) -> Vec<usize> {
    let v: Vec<usize> = wanted.iter().copied().filter(|&d| h.contains(d)).collect();
    if !v.is_empty() {
        return v;
    }
    crate::check_kernels::representative_head_dims(h)
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

fn case_oracle(p: &AttentionProblem) -> OracleProblem {
    Case {
        problem: p.clone(),
        data_seed: 0,
    }
    .oracle_problem()
}

// ---------------------------------------------------------------------------------------------
// Entry point

pub fn main(args: Args) -> Result<()> {
    let names = || CHECKS.iter().map(|&(name, _)| name);
    let only: Vec<String> = match &args.only {
        Some(v) => {
            for c in v {
                if !names().any(|n| n == c) {
                    let all: Vec<&str> = names().collect();
                    bail!("unknown check '{c}' (checks: {})", all.join(", "));
                }
            }
            v.clone()
        }
        None => names().map(|s| s.to_string()).collect(),
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
    if args.batch_invariant {
        println!("reliability: forward cases in the batch-invariant mode (bi=1)");
    }
    crate::case::set_batch_invariant_default(args.batch_invariant);
    start_watchdog();
    let mut report = Report::default();
    let on = |c: &str| only.iter().any(|x| x == c);
    for &(name, run) in CHECKS {
        if on(name) {
            run(&dev, &kernels, &args, &mut report);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_check_is_listed_and_names_parse() {
        for (c, _) in CHECKS {
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
}
