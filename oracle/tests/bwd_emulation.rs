//! An emulation of the scalar backward kernel (`kernels/gen1_scalar_bwd.cu`: D from the
//! dtype-rounded forward O, p recomputed from the forward's f32 LSE, f32 accumulation in the
//! kernel's order, gradients rounded once) must pass the backward rule on random problems of
//! both dtypes, causal with seq_q > seq_k, GQA; the same emulation with a real bug (a top-left
//! causal mask, a missing D) must not. This checks that the rule leaves room for a correct
//! kernel fed a real forward's rounded O and LSE, and that it catches typical mistakes. The same
//! with windows, softcap and ALiBi (the kernels' score modifier, tanh.approx's error included),
//! and its variants without softcap's derivative, the bias or the left window.

use flashcore_oracle::{check_backward, reference_f64, OracleProblem, Precision, Rows};
use ndarray::Array4;
use rand::{rngs::StdRng, Rng, SeedableRng};

#[derive(Clone, Copy, PartialEq)]
enum Bug {
    None,
    TopLeftCausal,
    NoD,
    /// dS not multiplied by softcap's 1 − tanh².
    NoSoftcapDerivative,
    /// The ALiBi bias left out of the recomputed logits.
    NoAlibi,
    /// The left window ignored (every key up to the right edge seen).
    NoLeftWindow,
}

fn normal(rng: &mut StdRng) -> f32 {
    // Box-Muller: standard normal from two uniforms.
    let (u, v): (f64, f64) = (rng.gen_range(1e-12..1.0), rng.gen_range(0.0..1.0));
    ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
}

fn tensor(shape: [usize; 4], rng: &mut StdRng, prec: Precision) -> Array4<f32> {
    Array4::from_shape_fn(shape, |_| prec.round(normal(rng)))
}

type Grads = (Array4<f32>, Array4<f32>, Array4<f32>);

/// tanh.approx.f32's error as emulated: a relative error of `BWD_EMU_TANH_ERR` × 2^-11 (its
/// documented maximum), the sign alternating with the key (the worst pattern for a row's sum);
/// 0 unless set (f32 tanh).
fn tanh_error(j: usize) -> f32 {
    let scale = std::env::var("BWD_EMU_TANH_ERR").map_or(0.0, |v| v.parse::<f32>().unwrap());
    if j.is_multiple_of(2) {
        scale * 2f32.powi(-11)
    } else {
        -scale * 2f32.powi(-11)
    }
}

/// The kernels' logit of key j at row i (common/score_mod.cuh: scale, softcap through tanh, the
/// ALiBi bias) in the log2 domain, and the factor dS takes from softcap (1 − t², else 1).
#[allow(clippy::too_many_arguments)]
fn logit(
    p: &OracleProblem,
    b: usize,
    h: usize,
    i: usize,
    j: usize,
    dot: f32,
    bug: Bug,
) -> (f32, f32) {
    let log2e = std::f32::consts::LOG2_E;
    let scale = p.scale as f32;
    let (s, dt) = match p.softcap {
        Some(c) => {
            let c = c as f32;
            let t = (dot * (scale / c)).tanh() * (1.0 + tanh_error(j));
            (t * (c * log2e), 1.0 - t * t)
        }
        None => (dot * (scale * log2e), 1.0),
    };
    let slope = if bug == Bug::NoAlibi {
        0.0
    } else {
        p.slope(b, h) as f32
    };
    let diag = i as i64 + p.seq_k as i64 - p.seq_q as i64;
    let s = s - slope * log2e * (diag - j as i64).abs() as f32;
    (
        s,
        if bug == Bug::NoSoftcapDerivative {
            1.0
        } else {
            dt
        },
    )
}

#[allow(clippy::too_many_arguments)]
fn scalar_bwd(
    p: &OracleProblem,
    prec: Precision,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    o: &Array4<f32>,
    lse: &ndarray::Array3<f32>,
    d_o: &Array4<f32>,
    bug: Bug,
) -> Grads {
    let (sq, sk, d) = (p.seq_q, p.seq_k, p.head_dim);
    let scale = p.scale as f32;
    let log2e = std::f32::consts::LOG2_E;
    // p and the dS factor of the kernels' score modifier (common/score_mod.cuh), log2 domain.
    let prob = |b: usize, h: usize, i: usize, j: usize, dot: f32, lse: f32| -> (f32, f32) {
        let (s, dt) = logit(p, b, h, i, j, dot, bug);
        ((s - lse * log2e).exp2(), dt)
    };
    let sees = |i: usize, j: usize| -> bool {
        match bug {
            Bug::TopLeftCausal if p.causal => j <= i,
            Bug::NoLeftWindow => {
                let wide = OracleProblem {
                    window_left: None,
                    ..p.clone()
                };
                (wide.key_range(0, i).0..wide.key_range(0, i).1).contains(&j)
            }
            _ => {
                let (lo, hi) = p.key_range(0, i);
                (lo..hi).contains(&j)
            }
        }
    };
    let dot = |a: &Array4<f32>, ia: [usize; 3], b: &Array4<f32>, ib: [usize; 3]| {
        (0..d).fold(0.0f32, |s, c| {
            s + a[[ia[0], ia[1], ia[2], c]] * b[[ib[0], ib[1], ib[2], c]]
        })
    };
    let mut dvec = ndarray::Array3::<f32>::zeros((p.batch, p.heads_q, sq));
    for ((b, h, i), x) in dvec.indexed_iter_mut() {
        *x = if bug == Bug::NoD {
            0.0
        } else {
            dot(d_o, [b, h, i], o, [b, h, i])
        };
    }
    let mut dq = Array4::<f32>::zeros(q.raw_dim());
    let mut dk = Array4::<f32>::zeros(k.raw_dim());
    let mut dv = Array4::<f32>::zeros(v.raw_dim());
    let g = p.group_size();
    for b in 0..p.batch {
        for kvh in 0..p.heads_kv {
            for j in 0..sk {
                let (mut ak, mut av) = (vec![0.0f32; d], vec![0.0f32; d]);
                for h in kvh * g..(kvh + 1) * g {
                    for i in (0..sq).filter(|&i| sees(i, j)) {
                        let (pr, dt) = prob(
                            b,
                            h,
                            i,
                            j,
                            dot(q, [b, h, i], k, [b, kvh, j]),
                            lse[[b, h, i]],
                        );
                        let ds = pr * (dot(d_o, [b, h, i], v, [b, kvh, j]) - dvec[[b, h, i]]) * dt;
                        for c in 0..d {
                            av[c] += pr * d_o[[b, h, i, c]];
                            ak[c] += ds * q[[b, h, i, c]];
                        }
                    }
                }
                for c in 0..d {
                    dk[[b, kvh, j, c]] = prec.round(ak[c] * scale);
                    dv[[b, kvh, j, c]] = prec.round(av[c]);
                }
            }
        }
        for h in 0..p.heads_q {
            let kvh = p.kv_head(h);
            for i in 0..sq {
                let mut acc = vec![0.0f32; d];
                for j in (0..sk).filter(|&j| sees(i, j)) {
                    let (pr, dt) = prob(
                        b,
                        h,
                        i,
                        j,
                        dot(q, [b, h, i], k, [b, kvh, j]),
                        lse[[b, h, i]],
                    );
                    let ds = pr * (dot(d_o, [b, h, i], v, [b, kvh, j]) - dvec[[b, h, i]]) * dt;
                    for c in 0..d {
                        acc[c] += ds * k[[b, kvh, j, c]];
                    }
                }
                for c in 0..d {
                    dq[[b, h, i, c]] = prec.round(acc[c] * scale);
                }
            }
        }
    }
    (dq, dk, dv)
}

/// Runs the emulation on a random problem; returns (pass, ratio).
fn run(p: &OracleProblem, prec: Precision, seed: u64, bug: Bug) -> (bool, f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let qs = [p.batch, p.heads_q, p.seq_q, p.head_dim];
    let ks = [p.batch, p.heads_kv, p.seq_k, p.head_dim];
    let q = tensor(qs, &mut rng, prec);
    let k = tensor(ks, &mut rng, prec);
    let v = tensor(ks, &mut rng, prec);
    let d_o = tensor(qs, &mut rng, prec);
    // The forward as a kernel returns it: O rounded to the dtype, LSE in f32.
    let r = reference_f64(p, q.view(), k.view(), v.view(), &Rows::All);
    let (o, lse) = r.to_dense(p);
    let o = o.mapv(|x| prec.round(x as f32));
    let mut lse = lse.mapv(|x| x as f32);
    if p.softcap.is_some() && std::env::var("BWD_EMU_TANH_ERR").is_ok() {
        // The forward's LSE from the same emulated tanh.approx (f32 logits, f64 sum).
        let g = p.group_size();
        for ((b, h, i), x) in lse.indexed_iter_mut() {
            let (lo, hi) = p.key_range(b, i);
            let sum: f64 = (lo..hi)
                .map(|j| {
                    let dot = (0..p.head_dim)
                        .fold(0.0f32, |a, c| a + q[[b, h, i, c]] * k[[b, h / g, j, c]]);
                    ((logit(p, b, h, i, j, dot, Bug::None).0 as f64) * std::f64::consts::LN_2).exp()
                })
                .sum();
            if lo < hi {
                *x = sum.ln() as f32;
            }
        }
    }
    let (dq, dk, dv) = scalar_bwd(p, prec, &q, &k, &v, &o, &lse, &d_o, bug);
    let verdict = check_backward(
        p,
        prec,
        q.view(),
        k.view(),
        v.view(),
        d_o.view(),
        dq.view(),
        dk.view(),
        dv.view(),
    );
    if std::env::var("BWD_EMU_VERBOSE").is_ok() && !verdict.pass {
        println!("{verdict}");
    }
    (verdict.pass, verdict.ratio)
}

fn random_problem(rng: &mut StdRng) -> OracleProblem {
    let hkv = rng.gen_range(1..=2);
    let hq = hkv * rng.gen_range(1..=3);
    let big = std::env::var("BWD_EMU_BIG").is_ok();
    let d = if big {
        [64usize, 128, 256][rng.gen_range(0..3)]
    } else {
        [1usize, 3, 8, 16, 32, 64][rng.gen_range(0..6)]
    };
    let max_seq = if big { 300 } else { 40 };
    let (sq, sk) = (rng.gen_range(1..=max_seq), rng.gen_range(1..=max_seq));
    let causal = rng.gen_bool(0.5);
    OracleProblem::dense(
        rng.gen_range(1..=2),
        hq,
        hkv,
        sq,
        sk,
        d,
        causal,
        1.0 / (d as f64).sqrt(),
    )
}

#[test]
fn the_scalar_backward_emulation_passes_random_problems() {
    let mut rng = StdRng::seed_from_u64(14);
    let mut worst = 0.0f64;
    for n in 0..std::env::var("BWD_EMU_CASES").map_or(150, |v| v.parse().unwrap()) {
        let p = random_problem(&mut rng);
        let prec = Precision::ALL[n as usize % 2];
        let (pass, ratio) = run(&p, prec, n, Bug::None);
        if std::env::var("BWD_EMU_COUNT").is_ok() {
            if !pass {
                println!(
                    "fail d={} sq={} sk={} causal={} {prec} ratio {ratio:.3}",
                    p.head_dim, p.seq_q, p.seq_k, p.causal
                );
            }
            worst = worst.max(ratio);
            continue;
        }
        assert!(pass, "case {n} {p:?} {prec}: ratio {ratio}");
        worst = worst.max(ratio);
    }
    println!("worst ratio {worst:.3}");
}

/// A random problem with windows, softcap and ALiBi (each on in about half the draws, as verify
/// draws them), dense storage, so rows left no key and keys no row sees come up.
fn random_mode_problem(rng: &mut StdRng) -> OracleProblem {
    let mut p = random_problem(rng);
    let window = |rng: &mut StdRng| match rng.gen_range(0..6) {
        0 => Some(0),
        1 => Some(1),
        2 => Some(rng.gen_range(0..=40)),
        _ => None,
    };
    p.window_left = window(rng);
    p.window_right = if p.causal { None } else { window(rng) };
    if rng.gen_bool(0.4) {
        p.softcap = Some([1.0, 5.0, 30.0, 50.5][rng.gen_range(0..4)]);
    }
    if rng.gen_bool(0.4) {
        let n = if rng.gen_bool(0.5) {
            p.heads_q
        } else {
            p.batch * p.heads_q
        };
        let slopes: Vec<f64> = (0..n)
            .map(|_| 2f64.powf(-rng.gen_range(0.0..8.0)))
            .collect();
        // [batch, heads_q]: a per-head table repeats over the batch.
        p.alibi_slopes = Some((0..p.batch * p.heads_q).map(|i| slopes[i % n]).collect());
    }
    p
}

#[test]
fn the_scalar_backward_emulation_passes_random_mode_problems() {
    let mut rng = StdRng::seed_from_u64(39);
    let mut worst = 0.0f64;
    for n in 0..std::env::var("BWD_EMU_CASES").map_or(150, |v| v.parse().unwrap()) {
        let p = random_mode_problem(&mut rng);
        let prec = Precision::ALL[n as usize % 2];
        let (pass, ratio) = run(&p, prec, 7000 + n, Bug::None);
        if std::env::var("BWD_EMU_COUNT").is_ok() {
            if !pass {
                println!("fail {p:?} {prec} ratio {ratio:.3}");
            }
            worst = worst.max(ratio);
            continue;
        }
        assert!(pass, "case {n} {p:?} {prec}: ratio {ratio}");
        worst = worst.max(ratio);
    }
    println!("worst ratio {worst:.3}");
}

#[test]
fn the_rule_catches_a_missing_softcap_derivative_alibi_bias_or_window() {
    let base = OracleProblem::dense(2, 4, 2, 24, 40, 16, true, 0.25);
    for prec in Precision::ALL {
        let softcap = OracleProblem {
            softcap: Some(1.0),
            ..base.clone()
        };
        assert!(run(&softcap, prec, 2, Bug::None).0);
        assert!(
            !run(&softcap, prec, 2, Bug::NoSoftcapDerivative).0,
            "{prec} softcap"
        );
        let alibi = OracleProblem {
            alibi_slopes: Some((0..8).map(|i| 0.5f64.powi(i % 4)).collect()),
            ..base.clone()
        };
        assert!(run(&alibi, prec, 3, Bug::None).0);
        assert!(!run(&alibi, prec, 3, Bug::NoAlibi).0, "{prec} ALiBi");
        let window = OracleProblem {
            window_left: Some(4),
            ..base.clone()
        };
        assert!(run(&window, prec, 4, Bug::None).0);
        assert!(!run(&window, prec, 4, Bug::NoLeftWindow).0, "{prec} window");
    }
}

#[test]
fn the_rule_catches_a_top_left_mask_and_a_missing_d() {
    for prec in Precision::ALL {
        let p = OracleProblem::dense(1, 4, 2, 24, 40, 16, true, 0.25);
        assert!(run(&p, prec, 1, Bug::None).0);
        assert!(!run(&p, prec, 1, Bug::TopLeftCausal).0, "{prec} top-left");
        assert!(!run(&p, prec, 1, Bug::NoD).0, "{prec} no D");
    }
}

/// By hand (`--ignored`): head_dim 1 on the shapes of verify's edge list, 4 seeds each.
#[test]
#[ignore]
fn head_dim_one_on_the_edge_shapes() {
    let mut shapes: Vec<(usize, usize, bool)> = vec![
        (1, 1, false),
        (1, 1, true),
        (1, 777, false),
        (1, 777, true),
        (777, 1, false),
        (777, 1, true),
        (65, 130, true),
        (130, 65, true),
        (200, 1000, true),
        (1000, 200, true),
    ];
    for n in [
        15usize, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257,
    ] {
        shapes.push((n, n, false));
        shapes.push((n, n, true));
    }
    let mut fails = 0;
    for (i, &(sq, sk, causal)) in shapes.iter().enumerate() {
        for seed in 0..4u64 {
            let (hq, hkv) = [(2, 2), (8, 2), (4, 1)][i % 3];
            let p = OracleProblem::dense(1 + i % 2, hq, hkv, sq, sk, 1, causal, 1.0);
            let prec = Precision::ALL[(i + seed as usize) % 2];
            let (pass, ratio) = run(&p, prec, 1000 + 16 * i as u64 + seed, Bug::None);
            if !pass {
                fails += 1;
                println!("fail sq={sq} sk={sk} causal={causal} hq={hq} hkv={hkv} {prec} ratio {ratio:.3}");
            }
        }
    }
    println!("{fails} of {} failed", shapes.len() * 4);
}
