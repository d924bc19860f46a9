//! Shared helpers for the oracle's self-tests.

#![allow(dead_code)]

use flashcore_oracle::{OracleProblem, Precision};
use ndarray::{Array3, Array4};
use proptest::prelude::*;
use rand::{rngs::StdRng, Rng, SeedableRng};

/// Q, K, V with values on the `precision` grid in [-amp, amp].
pub fn inputs(
    p: &OracleProblem,
    precision: Precision,
    amp: f32,
    seed: u64,
) -> (Array4<f32>, Array4<f32>, Array4<f32>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut gen = |shape: (usize, usize, usize, usize)| {
        Array4::from_shape_simple_fn(shape, || precision.round(rng.gen_range(-amp..=amp)))
    };
    let q = gen((p.batch, p.heads_q, p.seq_q, p.head_dim));
    let k = gen((p.batch, p.heads_kv, p.seq_k, p.head_dim));
    let v = gen((p.batch, p.heads_kv, p.seq_k, p.head_dim));
    (q, k, v)
}

/// Small random problems, including empty key sets, sq > sk and GQA/MQA.
pub fn small_problem() -> impl Strategy<Value = OracleProblem> {
    (
        1usize..=2,
        1usize..=2,
        1usize..=3,
        0usize..=6,
        0usize..=6,
        1usize..=9,
        any::<bool>(),
        prop_oneof![Just(0.0), Just(-0.75), -1.5f64..1.5],
    )
        .prop_map(
            |(batch, heads_kv, group, seq_q, seq_k, head_dim, causal, scale)| OracleProblem {
                batch,
                heads_q: heads_kv * group,
                heads_kv,
                seq_q,
                seq_k,
                head_dim,
                causal,
                scale,
                window_left: None,
                window_right: None,
                softcap: None,
                alibi_slopes: None,
                mm_prefix: None,
                p_e4m3: false,
            },
        )
}

pub fn precision() -> impl Strategy<Value = Precision> {
    prop_oneof![Just(Precision::F16), Just(Precision::Bf16)]
}

/// A reference's rows scattered into kernel-shaped f32 outputs (NaN where not stored).
pub fn as_kernel_output(
    p: &OracleProblem,
    r: &flashcore_oracle::Reference,
) -> (Array4<f32>, Array3<f32>) {
    let (o, lse) = r.to_dense(p);
    (o.mapv(|x| x as f32), lse.mapv(|x| x as f32))
}
