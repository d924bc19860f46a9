//! `determinism`: a GQA causal problem with several key tiles at each head dim, and at the first
//! one the same with a left window, softcap and ALiBi where the kernel takes them, run
//! `--backward-runs` times, gives bit-identical dQ, dK, dV every time.

use flashcore::{AlibiSlopes, AttentionProblem, Capabilities, Error, Modes};

use super::buffers::{inputs_for, BwdBuffers, HostBits, Places};
use super::KernelCheck;
use crate::reliability::determinism::same_every_run;
use crate::reliability::host::count_nan_bits;
use crate::reliability::{dims_in, Report, Res};

/// `determinism`'s head dims unless `--head-dims` names others.
pub(super) const DETERMINISM_DIMS: &[usize] = &[128, 64];

/// GQA (8:2) and causal where the kernel takes them, 700 rows and keys (several key tiles of
/// every tile size, with a tail), at each of `wanted`'s head dims the kernel takes; the dims take
/// different dtypes and layouts where the kernel has them. Then, for a kernel that takes the
/// modes of the scores, the first of them again with a left window of 300 keys (key tiles
/// whose query walk stops before the last query tile), softcap and ALiBi per (batch, head).
pub(super) fn determinism_problems(caps: &Capabilities, wanted: &[usize]) -> Vec<AttentionProblem> {
    let (hq, hkv) = if caps.gqa { (8, 2) } else { (8, 8) };
    let mut v: Vec<AttentionProblem> = dims_in(&caps.head_dims, wanted)
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            AttentionProblem::new(2, hq, 700, d)
                .with_kv(hkv, 700)
                .with_causal(caps.causal)
                .with_dtype(caps.dtypes[i % caps.dtypes.len()])
                .with_layout(caps.layouts[i % caps.layouts.len()])
        })
        .collect();
    let modes = Modes {
        window_left: Some(300),
        softcap: Some(30.0),
        alibi: Some(AlibiSlopes::PerBatchHead),
        ..Modes::default()
    };
    if let Some(first) = v.first().filter(|_| caps.modes.missing(&modes).is_none()) {
        let with_modes = first.clone().with_modes(modes);
        v.push(with_modes);
    }
    v
}

pub(super) fn determinism(cx: &KernelCheck, p: &AttentionProblem, report: &mut Report) {
    let KernelCheck {
        dev,
        kernel: k,
        args,
    } = *cx;
    let line = cx.start(format_args!(
        "determinism d={}{}",
        p.head_dim,
        if p.modes.is_dense() {
            ""
        } else {
            " (window, softcap, ALiBi)"
        }
    ));
    if !k.deterministic() {
        let why = "not deterministic by design (dQ accumulated with f32 atomics); its \
                   deterministic schedule is checked under its own name";
        line.add(report, Res::Skip, why.to_string());
        return;
    }
    if let Err(u) = k.supports_backward(p, dev.info()) {
        line.add(report, Res::Skip, u.reason);
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
        same_every_run(
            p,
            runs,
            &first,
            || c.run(k, dev).map_err(e),
            |g, first| {
                (0..3)
                    .map(|i| g[i].iter().zip(&first[i]).filter(|(a, b)| a != b).count())
                    .sum()
            },
        )?;
        Ok(Some(format!(
            "{runs} runs bit-identical (dQ {} + dK {} + dV {} elements, NaN-poisoned before each) on {p}",
            first[0].len(),
            first[1].len(),
            first[2].len()
        )))
    })();
    match result {
        Ok(Some(m)) => line.add(report, Res::Pass, m),
        Ok(None) => line.add(report, Res::Skip, "no forward takes the problem".into()),
        Err(m) => line.add(report, Res::Fail, m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reliability::backward::valid_problems_per_kernel;

    #[test]
    fn determinism_problems_have_gqa_causal_and_several_key_tiles() {
        for (name, caps, v) in
            valid_problems_per_kernel(|c| determinism_problems(c, DETERMINISM_DIMS))
        {
            assert!(!v.is_empty(), "{name}");
            // One mode problem, last, where the kernel claims the modes of the scores.
            let modes = v.iter().filter(|p| !p.modes.is_dense()).count();
            assert_eq!(
                modes,
                (caps.modes.window && caps.modes.alibi) as usize,
                "{name}"
            );
            assert!(v[..v.len() - modes].iter().all(|p| p.modes.is_dense()));
            for p in &v {
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
}
