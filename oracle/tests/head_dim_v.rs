//! V with a head dim of its own (FlashAttention 3's `headdim_v`: DeepSeek-V2/V3 prefill's Q·K
//! at 192, V and O at 128): the references take V's width from V's shape.

use flashcore_oracle::{
    check, reference_f64, reference_low_precision, OracleProblem, Precision, Rows,
};
use ndarray::{s, Array3, Array4};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn tensor(shape: (usize, usize, usize, usize), seed: u64) -> Array4<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    Array4::from_shape_simple_fn(shape, || {
        Precision::Bf16.round(rng.gen_range(-1.0f32..=1.0))
    })
}

/// Causal GQA, more keys than queries, so rows see different key counts.
fn problem() -> OracleProblem {
    OracleProblem::dense(2, 4, 2, 7, 11, 192, true, 1.0 / (192f64).sqrt())
}

/// Attention written out by hand in f64: no blocking, no threads.
fn naive(
    p: &OracleProblem,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
) -> (Array4<f64>, Array3<f64>) {
    let dv = v.shape()[3];
    let mut o = Array4::zeros((p.batch, p.heads_q, p.seq_q, dv));
    let mut lse = Array3::zeros((p.batch, p.heads_q, p.seq_q));
    for b in 0..p.batch {
        for h in 0..p.heads_q {
            let kvh = h / (p.heads_q / p.heads_kv);
            for i in 0..p.seq_q {
                let visible = (i + p.seq_k - p.seq_q + 1).min(p.seq_k);
                let scores: Vec<f64> = (0..visible)
                    .map(|j| {
                        let dot: f64 = (0..p.head_dim)
                            .map(|c| q[[b, h, i, c]] as f64 * k[[b, kvh, j, c]] as f64)
                            .sum();
                        p.scale * dot
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                lse[[b, h, i]] = m + sum.ln();
                for (j, s) in scores.iter().enumerate() {
                    let pj = (s - m).exp() / sum;
                    for c in 0..dv {
                        o[[b, h, i, c]] += pj * v[[b, kvh, j, c]] as f64;
                    }
                }
            }
        }
    }
    (o, lse)
}

#[test]
fn the_f64_reference_at_192_and_128_agrees_with_a_naive_one() {
    let p = problem();
    let q = tensor((2, 4, 7, 192), 1);
    let k = tensor((2, 2, 11, 192), 2);
    let v = tensor((2, 2, 11, 128), 3);
    let r = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
    assert_eq!(r.head_dim(), 128);
    let (o, lse) = r.to_dense(&p);
    assert_eq!(o.shape(), [2, 4, 7, 128]);
    let (no, nlse) = naive(&p, &q, &k, &v);
    let o_err = (&o - &no).iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let lse_err = (&lse - &nlse).iter().fold(0.0f64, |m, x| m.max(x.abs()));
    assert!(o_err < 1e-12 && lse_err < 1e-12, "{o_err} {lse_err}");
}

#[test]
fn o_at_128_is_the_first_128_columns_of_o_with_v_at_192() {
    // The softmax depends on Q and K alone; each O column on its own V column.
    let p = problem();
    let q = tensor((2, 4, 7, 192), 4);
    let k = tensor((2, 2, 11, 192), 5);
    let v_wide = tensor((2, 2, 11, 192), 6);
    let v = v_wide.slice(s![.., .., .., ..128]);
    for precision in [Precision::F16, Precision::Bf16] {
        let wide =
            reference_low_precision(&p, precision, q.view(), k.view(), v_wide.view(), &Rows::All);
        let narrow = reference_low_precision(&p, precision, q.view(), k.view(), v, &Rows::All);
        assert_eq!(narrow.head_dim(), 128);
        for i in 0..narrow.len() {
            assert_eq!(narrow.o_row(i), &wide.o_row(i)[..128]);
            assert_eq!(narrow.lse(i), wide.lse(i));
        }
    }
}

#[test]
fn the_rule_judges_an_o_of_v_width() {
    let p = problem();
    let q = tensor((2, 4, 7, 192), 7);
    let k = tensor((2, 2, 11, 192), 8);
    let v = tensor((2, 2, 11, 128), 9);
    let low = reference_low_precision(
        &p,
        Precision::Bf16,
        q.view(),
        k.view(),
        v.view(),
        &Rows::All,
    );
    let (o, lse) = low.to_dense(&p);
    let (o, lse) = (o.mapv(|x| x as f32), lse.mapv(|x| x as f32));
    let verdict = check(
        &p,
        Precision::Bf16,
        q.view(),
        k.view(),
        v.view(),
        o.view(),
        lse.view(),
        &Rows::All,
    );
    assert!(verdict.pass, "{verdict}");
    // A wrong last O column fails and is named as O's, not as the LSE.
    let mut bad = o.clone();
    bad[[1, 3, 6, 127]] += 0.5;
    let verdict = check(
        &p,
        Precision::Bf16,
        q.view(),
        k.view(),
        v.view(),
        bad.view(),
        lse.view(),
        &Rows::All,
    );
    assert!(!verdict.pass);
    assert_eq!(verdict.worst, Some((1, 3, 6, 127)));
    assert!(verdict.message.contains("O[1,3,6,127]"), "{verdict}");
}
