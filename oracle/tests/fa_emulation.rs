//! A faithful emulation of a FlashAttention-2 style kernel (f32 scores, online softmax over
//! key blocks, P rounded to the dtype for the P·V product, f32 accumulation, O rounded at the
//! end) must pass the rule; the same emulation with a real bug must not.

mod common;

use flashcore_oracle::{
    judge, reference_f64, reference_low_precision, OracleProblem, Precision, Rows,
};
use ndarray::{s, Array3, Array4};
use rand::{rngs::StdRng, Rng, SeedableRng};

#[derive(Clone, Copy, PartialEq)]
enum Bug {
    None,
    /// Forgets to rescale the accumulator when the running max grows.
    NoRescale,
    /// Top-left aligned causal mask instead of bottom-right.
    TopLeftCausal,
}

fn fa_like(
    p: &OracleProblem,
    prec: Precision,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    block: usize,
    bug: Bug,
) -> (Array4<f32>, Array3<f32>) {
    let d = p.head_dim;
    let mut o = Array4::from_elem((p.batch, p.heads_q, p.seq_q, d), f32::NAN);
    let mut lse = Array3::from_elem((p.batch, p.heads_q, p.seq_q), f32::NAN);
    let scale = p.scale as f32;
    for b in 0..p.batch {
        for h in 0..p.heads_q {
            let kvh = p.kv_head(h);
            for i in 0..p.seq_q {
                let n = if bug == Bug::TopLeftCausal && p.causal {
                    (i + 1).min(p.seq_k)
                } else {
                    p.visible_keys(b, i)
                };
                let qi = q.slice(s![b, h, i, ..]);
                let mut m = f32::NEG_INFINITY;
                let mut l = 0.0f32;
                let mut acc = vec![0.0f32; d];
                for j0 in (0..n).step_by(block) {
                    let j1 = (j0 + block).min(n);
                    let s: Vec<f32> = (j0..j1)
                        .map(|j| {
                            let kj = k.slice(s![b, kvh, j, ..]);
                            scale * qi.iter().zip(kj).map(|(x, y)| x * y).sum::<f32>()
                        })
                        .collect();
                    let m_new = s.iter().fold(m, |a, &x| a.max(x));
                    let alpha = if bug == Bug::NoRescale {
                        1.0
                    } else {
                        (m - m_new).exp()
                    };
                    l *= alpha;
                    acc.iter_mut().for_each(|a| *a *= alpha);
                    for (jj, &sj) in s.iter().enumerate() {
                        let pj = (sj - m_new).exp();
                        l += pj;
                        let pr = prec.round(pj);
                        let vj = v.slice(s![b, kvh, j0 + jj, ..]);
                        acc.iter_mut().zip(vj).for_each(|(a, &x)| *a += pr * x);
                    }
                    m = m_new;
                }
                for c in 0..d {
                    o[[b, h, i, c]] = if n == 0 { 0.0 } else { prec.round(acc[c] / l) };
                }
                lse[[b, h, i]] = if n == 0 { f32::INFINITY } else { m + l.ln() };
            }
        }
    }
    (o, lse)
}

fn randn(rng: &mut StdRng) -> f32 {
    let (u, v): (f32, f32) = (rng.gen_range(f32::EPSILON..1.0), rng.gen());
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
}

fn random_case(
    rng: &mut StdRng,
) -> (
    OracleProblem,
    Precision,
    Array4<f32>,
    Array4<f32>,
    Array4<f32>,
) {
    let heads_kv = rng.gen_range(1..=2);
    let d = [1, 3, 8, 16, 32, 64][rng.gen_range(0..6)];
    let p = OracleProblem {
        batch: rng.gen_range(1..=2),
        heads_q: heads_kv * rng.gen_range(1..=2),
        heads_kv,
        seq_q: rng.gen_range(1..=70),
        seq_k: rng.gen_range(0..=70),
        head_dim: d,
        causal: rng.gen(),
        scale: 1.0 / (d as f64).sqrt(),
        window_left: None,
        window_right: None,
        softcap: None,
        alibi_slopes: None,
        mm_prefix: None,
        p_e4m3: false,
    };
    let prec = if rng.gen() {
        Precision::F16
    } else {
        Precision::Bf16
    };
    let mut gen = |s: (usize, usize, usize, usize)| {
        Array4::from_shape_simple_fn(s, || prec.round(randn(rng)))
    };
    let q = gen((p.batch, p.heads_q, p.seq_q, d));
    let k = gen((p.batch, p.heads_kv, p.seq_k, d));
    let v = gen((p.batch, p.heads_kv, p.seq_k, d));
    (p, prec, q, k, v)
}

#[test]
fn faithful_kernel_passes_and_bugs_fail() {
    let cases: u64 = std::env::var("FA_EMULATION_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let mut rng = StdRng::seed_from_u64(2024);
    let mut worst = [0.0f64; 2];
    let mut caught = [0usize; 2];
    let mut buggy_differs = [0usize; 2];
    for _ in 0..cases {
        let (p, prec, q, k, v) = random_case(&mut rng);
        let r = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
        let l = reference_low_precision(&p, prec, q.view(), k.view(), v.view(), &Rows::All);
        let judge_it = |o: &Array4<f32>, lse: &Array3<f32>| {
            judge(&p, prec, o.view(), lse.view(), &Rows::All, &r, &l)
        };

        let (o, lse) = fa_like(&p, prec, &q, &k, &v, 16, Bug::None);
        let verdict = judge_it(&o, &lse);
        assert!(verdict.pass, "{p:?}: {}", verdict.message);
        worst[0] = worst[0].max(verdict.ratio);

        // The exact answer rounded to the dtype: the best any kernel can return.
        let (ro, rlse) = r.to_dense(&p);
        let rounded = judge_it(&ro.mapv(|x| prec.round(x as f32)), &rlse.mapv(|x| x as f32));
        assert!(rounded.pass, "{p:?}: {}", rounded.message);
        worst[1] = worst[1].max(rounded.ratio);

        for (n, bug) in [Bug::NoRescale, Bug::TopLeftCausal].into_iter().enumerate() {
            let (ob, lb) = fa_like(&p, prec, &q, &k, &v, 16, bug);
            // A bug only shows where it changes something big enough (e.g. several key blocks).
            if (&ob - &o)
                .iter()
                .chain((&lb - &lse).iter())
                .any(|x| x.abs() > 0.05)
            {
                buggy_differs[n] += 1;
                caught[n] += usize::from(!judge_it(&ob, &lb).pass);
            }
        }
    }
    println!(
        "worst ratio: faithful kernel {:.3}, rounded exact answer {:.3}; bugs caught {caught:?} of {buggy_differs:?}",
        worst[0], worst[1]
    );
    assert_eq!(caught, buggy_differs);
}
