//! The `backward` check of `cargo xtask reliability` (the list in `super` says what it tries):
//! every compiled-in backward kernel (`flashcore::backward_kernels`, filtered by `--kernels`)
//! under three sub-checks, each its own report line:
//!
//! - `nan-padding`: Q, K, V, O, dO and LSE inside larger NaN-filled buffers (custom strides: NaN
//!   past head_dim, past seq, past the heads, before the base pointer) give dQ, dK, dV bit-
//!   identical to the dense run, and the padding of the gradient buffers keeps its sentinel; at
//!   head dims 64, 128 and 200 (a padded build's), or `--head-dims`.
//! - `determinism`: a GQA causal problem with several key tiles at each head dim (128, 64, or
//!   `--head-dims`), `--backward-runs` times (1000), bit-identical dQ, dK, dV every time; and a
//!   varlen batch with a window, softcap and ALiBi where the kernel takes them.
//! - `grid`: batch·heads past 65535, a sequence past 65535 rows, and Q-side and K-side tensors
//!   past 2^31 elements: every gradient element finite (written), and where the groups are
//!   small, GQA groups of chosen batches judged by the oracle.

mod buffers;
mod determinism;
mod grid;
mod padding;
mod placement;

use std::fmt::Display;
use std::time::Instant;

use flashcore::{Attention, AttentionBackward, Device};

use super::watchdog::{step, Step};
use super::{Args, Report, Res};

const CHECK: &str = "backward";

/// One backward kernel under check: what every sub-check of it reads.
struct KernelCheck<'a> {
    dev: &'a Device,
    kernel: &'a dyn AttentionBackward,
    args: &'a Args,
}

impl KernelCheck<'_> {
    /// Starts the report line `<kernel> [<what>]`: its clock, and a watchdog step named after it.
    fn start(&self, what: impl Display) -> LineStart {
        let label = format!("{} [{what}]", self.kernel.name());
        let t = Instant::now();
        let step = step(format!("{CHECK} {label}"), self.args.step_timeout);
        LineStart {
            label,
            t,
            _step: step,
        }
    }
}

/// A sub-check's report line under way; the watchdog step ends when it is dropped.
struct LineStart {
    label: String,
    t: Instant,
    _step: Step,
}

impl LineStart {
    fn add(&self, report: &mut Report, result: Res, detail: String) {
        report.add(CHECK, &self.label, result, detail, self.t);
    }
}

pub(super) fn run(dev: &Device, _forward: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    let all = flashcore::backward_kernels();
    let names: Vec<&str> = all.iter().map(|k| k.name()).collect();
    let compiled_in = names.join(", ");
    let kernels: Vec<&Box<dyn AttentionBackward>> = all
        .iter()
        .filter(|k| crate::select::picked(args.kernels.as_deref(), k.name()))
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
        let cx = KernelCheck {
            dev,
            kernel: k.as_ref(),
            args,
        };
        padding::nan_padding(&cx, report);
        let wanted = super::wanted_dims(args, determinism::DETERMINISM_DIMS);
        for p in determinism::determinism_problems(&k.capabilities(), wanted) {
            determinism::determinism(&cx, &p, report);
        }
        if let Some(case) =
            determinism::varlen_case(&k.capabilities(), wanted, args.seed.wrapping_add(43))
        {
            determinism::determinism_varlen(&cx, &case, report);
        }
        for case in grid::grid_cases(&k.capabilities(), args.no_huge) {
            grid::grid(&cx, &case, report);
        }
    }
}

/// Every compiled-in backward kernel's name and capabilities (the sub-checks' tests).
#[cfg(test)]
fn backward_caps() -> Vec<(String, flashcore::Capabilities)> {
    flashcore::backward_kernels()
        .iter()
        .map(|k| (k.name().to_string(), k.capabilities()))
        .collect()
}

/// Every compiled-in backward kernel's name, capabilities and the problems `make` draws for it,
/// each checked to be a valid backward problem (the sub-checks' tests).
#[cfg(test)]
fn valid_problems_per_kernel(
    make: impl Fn(&flashcore::Capabilities) -> Vec<flashcore::AttentionProblem>,
) -> Vec<(
    String,
    flashcore::Capabilities,
    Vec<flashcore::AttentionProblem>,
)> {
    backward_caps()
        .into_iter()
        .map(|(name, caps)| {
            let problems = make(&caps);
            for p in &problems {
                flashcore::backward::validate_backward(p)
                    .unwrap_or_else(|e| panic!("{name} {p}: {e}"));
            }
            (name, caps, problems)
        })
        .collect()
}
