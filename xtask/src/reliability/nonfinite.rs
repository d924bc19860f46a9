//! The `nonfinite` check of `cargo xtask reliability` (the list in `super` says what it tries).

use std::collections::BTreeSet;
use std::time::Instant;

use flashcore::{Attention, AttentionProblem, Device, Layout};
use flashcore_oracle::Rows;
use ndarray::Array4;

use super::host::{splitmix, Synth};
use super::watchdog::{progress, step};
use super::{case_oracle, dims_for, heads_for, Args, Report};
use crate::inputs::precision;

pub(super) fn run(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    for k in kernels {
        let t = Instant::now();
        let _s = step(format!("nonfinite {}", k.name()), args.step_timeout);
        let caps = k.capabilities();
        let d = dims_for(k.as_ref(), args, &[64])[0];
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
        crate::inputs::to_layout(q.view(), l),
        crate::inputs::to_layout(kk.view(), l),
        crate::inputs::to_layout(v.view(), l),
    )
    .map_err(|e| format!("error: {e}"))?;
    let o = crate::inputs::to_layout(out.o.view(), l);
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
                    let vis = op.visible_keys(b, r);
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
    let mut why: Vec<String> = [
        (
            nan_as_empty,
            "rows NaN in the reference come back as no-key rows (LSE = +inf)",
        ),
        (
            nan_as_finite,
            "rows NaN in the reference come back with a finite LSE",
        ),
        (
            leak_v,
            "values NaN where the reference is finite, in rows with a NaN/Inf in the V row of a masked key (0 * NaN in P*V: masked keys must take no part)",
        ),
        (
            leak_k,
            "values NaN where the reference is finite, in rows with a NaN/Inf in the K row of a masked key (the mask must replace the score, not add to it)",
        ),
        (
            leak_other,
            "values NaN where the reference is finite (not explained by masked keys)",
        ),
    ]
    .into_iter()
    .filter(|&(n, _)| n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
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
