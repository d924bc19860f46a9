//! `determinism`: a GQA causal problem with several key tiles at each head dim, and at the first
//! one the same with a left window, softcap and ALiBi where the kernel takes them, run
//! `--backward-runs` times, gives bit-identical dQ, dK, dV every time. Where the kernel takes
//! varlen, so does a varlen batch with those modes (`determinism varlen`), through the host path.

use flashcore::{AlibiSlopes, AttentionProblem, Capabilities, Error, Modes};

use super::buffers::{inputs_for, BwdBuffers, HostBits, Places};
use super::KernelCheck;
use crate::case::{Case, NoInputs, VarlenBackwardInputs};
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

/// The varlen batch of `determinism varlen`, for a kernel that takes varlen with the modes of
/// the scores: five packed sequences of up to 700 rows and keys (lengths drawn from the seed),
/// GQA 8:2, causal with a left window of 300, softcap and ALiBi per (sequence, head), at the
/// first of `wanted`'s head dims the kernel takes.
pub(super) fn varlen_case(caps: &Capabilities, wanted: &[usize], seed: u64) -> Option<Case> {
    let d = *dims_in(&caps.head_dims, wanted).first()?;
    let line = format!(
        "b=5,hq=8,hkv=2,sq=700,sk=700,d={d},causal=1,varlen=1,wl=300,softcap=30,alibi=batch,\
         seed={seed}"
    );
    let case = Case::parse(&line).expect("the varlen determinism line parses");
    caps.modes
        .missing(&case.problem.modes)
        .is_none()
        .then_some(case)
}

/// `determinism varlen`: [`varlen_case`]'s backward `--backward-runs` times through
/// `backward_host_modes` (outputs NaN-poisoned before each run), every run's dQ, dK, dV bits the
/// first run's, and none of its elements NaN.
pub(super) fn determinism_varlen(cx: &KernelCheck, case: &Case, report: &mut Report) {
    let KernelCheck {
        dev,
        kernel: k,
        args,
    } = *cx;
    let line = cx.start("determinism varlen (window, softcap, ALiBi)");
    if !k.deterministic() {
        let why = "not deterministic by design (dQ accumulated with f32 atomics); its \
                   deterministic schedule is checked under its own name";
        line.add(report, Res::Skip, why.to_string());
        return;
    }
    if let Err(u) = k.supports_backward(&case.problem, dev.info()) {
        line.add(report, Res::Skip, u.reason);
        return;
    }
    let runs = args.backward_runs.max(1);
    let result = (|| -> std::result::Result<Option<String>, String> {
        let vi = match VarlenBackwardInputs::new(k.name(), dev, case) {
            Ok(vi) => vi,
            Err(NoInputs::Unsupported(_)) => return Ok(None),
            Err(NoInputs::Failed(m)) => return Err(m),
        };
        let p = &vi.problem;
        let run = || -> std::result::Result<[Vec<u32>; 3], String> {
            let g =
                flashcore::backward_host_modes(k, dev, p, vi.host()).map_err(|e| e.to_string())?;
            let bits = |a: &ndarray::ArrayD<f32>| a.iter().map(|x| x.to_bits()).collect();
            Ok([bits(&g.dq), bits(&g.dk), bits(&g.dv)])
        };
        let first = run()?;
        let unwritten: usize = first
            .iter()
            .map(|g| g.iter().filter(|&&b| f32::from_bits(b).is_nan()).count())
            .sum();
        if unwritten > 0 {
            return Err(format!(
                "first run left {unwritten} gradient elements NaN (unwritten)"
            ));
        }
        same_every_run(p, runs, &first, run, |g, first| {
            (0..3)
                .map(|i| g[i].iter().zip(&first[i]).filter(|(a, b)| a != b).count())
                .sum()
        })?;
        Ok(Some(format!(
            "{runs} runs bit-identical (dQ {} + dK {} + dV {} elements, NaN-poisoned before each) on {p}, lengths q {:?} k {:?}",
            first[0].len(),
            first[1].len(),
            first[2].len(),
            vi.draw.len_q,
            vi.draw.len_k
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

    #[test]
    fn the_varlen_case_is_a_valid_varlen_backward_for_the_kernels_that_take_varlen() {
        for (name, caps) in crate::reliability::backward::backward_caps() {
            let case = varlen_case(&caps, DETERMINISM_DIMS, 7);
            assert_eq!(case.is_some(), caps.modes.varlen, "{name}");
            if let Some(c) = case {
                let (p, draw, _) = c.with_mode_inputs();
                flashcore::backward::validate_backward(&p).unwrap();
                assert!(flashcore::backward::is_varlen(&p), "{name}");
                assert_eq!(draw.len_q.len(), 5);
            }
        }
    }
}
