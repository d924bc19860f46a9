//! The oracle's own consistency checks, which run without a GPU (`verify` without a device):
//! on small random problems the rounded f64 answer passes the oracle's rule and one off by 1.0
//! fails it.

use anyhow::{bail, Result};
use flashcore::{AttentionProblem, DType};

use crate::case::Case;
use crate::inputs::precision;

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

/// The backward oracle without a GPU: on small random problems (every other one with a window,
/// softcap and ALiBi, as `verify --pass bwd` draws them) the f64 gradients rounded to the dtype
/// and the low-precision program's gradients pass the rule, and a gradient off by 1.0 fails it.
pub fn oracle_backward_self_check() -> Result<usize> {
    use flashcore_oracle::{gradients_f64, gradients_low_precision, judge_backward};
    let mut checked = 0;
    for seed in 0..16u64 {
        let mut case = self_check_case(seed, 4);
        if seed % 2 == 1 {
            // (A right window only without causal masking, which fixes it at 0.)
            let modes = match (seed / 2 % 2, case.problem.causal) {
                (0, _) => "wl=3,softcap=5,alibi=batch",
                (_, false) => "wl=0,wr=2,alibi=head",
                (_, true) => "wl=2,softcap=1,alibi=head",
            };
            case = Case::parse(&format!("{},{modes}", case.to_arg()))?;
            case.problem.validate()?;
        }
        let inp = crate::case::inputs(&case);
        let d_o = crate::case::grad_output(&case);
        let op = case.oracle_problem();
        let prec = precision(case.problem.dtype);
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

/// Runs without a GPU: the oracle's own consistency checks on random small problems.
pub fn oracle_self_check() -> Result<usize> {
    use flashcore_oracle::{check, reference_f64, OracleProblem, Rows};
    let mut checked = 0;
    for seed in 0..24u64 {
        let case = self_check_case(seed, 2);
        let inp = crate::case::inputs(&case);
        let op: OracleProblem = case.oracle_problem();
        let prec = precision(case.problem.dtype);
        let r = reference_f64(&op, inp.q.view(), inp.k.view(), inp.v.view(), &Rows::All);
        let (o, lse) = r.to_dense(&op);
        let o32 = o.mapv(|x| prec.round(x as f32));
        let lse32 = lse.mapv(|x| x as f32);
        // The rule on the oracle's own inputs and LSE, for an output.
        let check_output = |o: ndarray::ArrayView4<'_, f32>| {
            let (q, k, v) = (inp.q.view(), inp.k.view(), inp.v.view());
            check(&op, prec, q, k, v, o, lse32.view(), &Rows::All)
        };
        let v = check_output(o32.view());
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
        if op.visible_keys(0, 0) > 0 && check_output(bad.view()).pass {
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

    #[test]
    fn the_oracle_self_check_passes() {
        assert!(oracle_self_check().unwrap() > 0);
    }

    #[test]
    fn the_oracle_backward_self_check_passes() {
        assert!(oracle_backward_self_check().unwrap() > 0);
    }
}
