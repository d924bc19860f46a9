//! One verification case: a problem plus the seed of its random inputs, runnable on any
//! generation and judged by the oracle. A case prints as one `--case` argument that reruns it.

use anyhow::{anyhow, bail, Result};
use flashcore::{Attention, AttentionProblem, DType, Device, Error, Layout};
use flashcore_oracle::{OracleProblem, Precision, Rows, Verdict};
use ndarray::{Array4, Axis};
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub problem: AttentionProblem,
    pub data_seed: u64,
}

impl Case {
    /// `b=2,hq=4,hkv=2,sq=65,sk=130,d=64,dtype=f16,causal=1,layout=bshd,seed=7` (+ `,scale=…`).
    pub fn to_arg(&self) -> String {
        let p = &self.problem;
        let mut s = format!(
            "b={},hq={},hkv={},sq={},sk={},d={},dtype={},causal={},layout={},seed={}",
            p.batch,
            p.heads_q,
            p.heads_kv,
            p.seq_q,
            p.seq_k,
            p.head_dim,
            p.dtype,
            p.causal as u8,
            p.layout.name(),
            self.data_seed
        );
        if let Some(scale) = p.softmax_scale {
            s.push_str(&format!(",scale={scale}"));
        }
        s
    }

    pub fn parse(s: &str) -> Result<Case> {
        let mut p = AttentionProblem::new(1, 1, 1, 64);
        let mut seed = 0u64;
        let mut hkv = None;
        for kv in s.split(',').filter(|x| !x.trim().is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| anyhow!("'{kv}' is not key=value"))?;
            let num = || {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| anyhow!("{k}: '{v}' is not a count"))
            };
            match k.trim() {
                "b" => p.batch = num()?,
                "hq" => p.heads_q = num()?,
                "hkv" => hkv = Some(num()?),
                "sq" => p.seq_q = num()?,
                "sk" => p.seq_k = num()?,
                "d" => p.head_dim = num()?,
                "dtype" => p.dtype = v.parse().map_err(|e: String| anyhow!(e))?,
                "causal" => p.causal = matches!(v.trim(), "1" | "true" | "yes"),
                "layout" => p.layout = v.parse().map_err(|e: String| anyhow!(e))?,
                "seed" => seed = v.trim().parse()?,
                "scale" => p.softmax_scale = Some(v.trim().parse()?),
                other => bail!("unknown case key '{other}'"),
            }
        }
        p.heads_kv = hkv.unwrap_or(p.heads_q);
        Ok(Case {
            problem: p,
            data_seed: seed,
        })
    }

    pub fn oracle_problem(&self) -> OracleProblem {
        let p = &self.problem;
        OracleProblem {
            batch: p.batch,
            heads_q: p.heads_q,
            heads_kv: p.heads_kv,
            seq_q: p.seq_q,
            seq_k: p.seq_k,
            head_dim: p.head_dim,
            causal: p.causal,
            scale: p.scale() as f64,
        }
    }

    /// Multiply-adds the oracle spends on the whole case.
    pub fn oracle_work(&self) -> usize {
        let p = &self.problem;
        p.batch * p.heads_q * p.seq_q * p.seq_k.max(1) * p.head_dim
    }
}

pub fn precision(d: DType) -> Precision {
    match d {
        DType::F16 => Precision::F16,
        DType::Bf16 => Precision::Bf16,
    }
}

/// Standard normal values rounded to the dtype, in logical [batch, heads, seq, head_dim] order.
pub fn random_tensor(dtype: DType, shape: [usize; 4], seed: u64) -> Array4<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|_| dtype.round(StandardNormal.sample(&mut rng)))
        .collect();
    Array4::from_shape_vec(shape, data).expect("length matches")
}

/// Logical [b, h, s, d] view to the layout's axis order (and back: the swap is its own inverse).
pub fn to_layout(a: ndarray::ArrayView4<'_, f32>, layout: Layout) -> ndarray::ArrayView4<'_, f32> {
    match layout {
        Layout::Bhsd => a,
        Layout::Bshd => a.permuted_axes([0, 2, 1, 3]),
    }
}

/// Case inputs in logical order.
pub struct Inputs {
    pub q: Array4<f32>,
    pub k: Array4<f32>,
    pub v: Array4<f32>,
}

pub fn inputs(case: &Case) -> Inputs {
    let p = &case.problem;
    let s = case.data_seed;
    Inputs {
        q: random_tensor(
            p.dtype,
            [p.batch, p.heads_q, p.seq_q, p.head_dim],
            s.wrapping_mul(3),
        ),
        k: random_tensor(
            p.dtype,
            [p.batch, p.heads_kv, p.seq_k, p.head_dim],
            s.wrapping_mul(3).wrapping_add(1),
        ),
        v: random_tensor(
            p.dtype,
            [p.batch, p.heads_kv, p.seq_k, p.head_dim],
            s.wrapping_mul(3).wrapping_add(2),
        ),
    }
}

pub enum Outcome {
    Pass(Verdict),
    Fail(String, Option<Verdict>),
    Skipped(String),
}

/// Largest oracle work judged on every row; above it a sample of rows is judged (every element
/// of the output is still checked written, since a NaN anywhere in the sampled rows fails and
/// the unsampled rows are scanned for NaN separately).
pub const FULL_ORACLE_WORK: usize = 400_000_000;
pub const SAMPLED_ROWS: usize = 2048;

/// Runs one case on one kernel and judges it.
pub fn run_case(kernel: &dyn Attention, device: &Device, case: &Case) -> Outcome {
    let p = &case.problem;
    if let Err(u) = kernel.supports(p, device.info()) {
        return Outcome::Skipped(u.reason);
    }
    let inp = inputs(case);
    let result = flashcore::forward_host(
        kernel,
        device,
        p,
        to_layout(inp.q.view(), p.layout),
        to_layout(inp.k.view(), p.layout),
        to_layout(inp.v.view(), p.layout),
    );
    let out = match result {
        Ok(o) => o,
        Err(Error::Unsupported(u)) => return Outcome::Skipped(u.reason),
        Err(e) => return Outcome::Fail(format!("error: {e}"), None),
    };
    let o_logical = to_layout(out.o.view(), p.layout);
    let op = case.oracle_problem();
    let rows = if case.oracle_work() <= FULL_ORACLE_WORK {
        Rows::All
    } else {
        flashcore_oracle::sample_rows(&op, SAMPLED_ROWS, case.data_seed)
    };
    let verdict = flashcore_oracle::check(
        &op,
        precision(p.dtype),
        inp.q.view(),
        inp.k.view(),
        inp.v.view(),
        o_logical,
        out.lse.view(),
        &rows,
    );
    if !matches!(rows, Rows::All) {
        // Unsampled rows: every element must still have been written (inputs are finite).
        let unwritten = o_logical.iter().filter(|x| x.is_nan()).count()
            + out
                .lse
                .lanes(Axis(2))
                .into_iter()
                .flatten()
                .filter(|x| x.is_nan())
                .count();
        if unwritten > 0 {
            return Outcome::Fail(
                format!("{unwritten} output elements are NaN (unwritten?)"),
                Some(verdict),
            );
        }
    }
    if verdict.pass {
        Outcome::Pass(verdict)
    } else {
        Outcome::Fail(verdict.message.clone(), Some(verdict))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_round_trips_through_its_argument() {
        let c = Case {
            problem: AttentionProblem::new(2, 4, 65, 64)
                .with_kv(2, 130)
                .with_causal(true)
                .with_dtype(DType::Bf16)
                .with_layout(Layout::Bhsd),
            data_seed: 42,
        };
        assert_eq!(Case::parse(&c.to_arg()).unwrap(), c);
    }

    #[test]
    fn inputs_are_fresh_random_not_zeros() {
        let c = Case::parse("b=1,hq=2,sq=3,sk=5,d=8,seed=1").unwrap();
        let a = inputs(&c);
        let b = inputs(&Case {
            data_seed: 2,
            ..c.clone()
        });
        assert!(a.q.iter().all(|x| x.is_finite()));
        assert!(a.q.iter().filter(|x| **x == 0.0).count() < 2);
        assert_ne!(a.q, b.q);
        assert_ne!(a.k, a.v);
    }

    #[test]
    fn bad_case_arguments_are_errors() {
        assert!(Case::parse("b=x").is_err());
        assert!(Case::parse("nope=1").is_err());
        assert!(Case::parse("dtype=f32").is_err());
    }
}
