//! An emulation of the scalar backward kernel (`kernels/gen1_scalar_bwd.cu`: D from the
//! dtype-rounded forward O, p recomputed from the forward's f32 LSE, f32 accumulation in the
//! kernel's order, gradients rounded once) must pass the backward rule on random problems of
//! both dtypes, causal with seq_q > seq_k, GQA; the same emulation with a real bug (a top-left
//! causal mask, a missing D) must not. This checks that the rule leaves room for a correct
//! kernel fed a real forward's rounded O and LSE, and that it catches typical mistakes.

use flashcore_oracle::{check_backward, reference_f64, OracleProblem, Precision, Rows};
use ndarray::Array4;
use rand::{rngs::StdRng, Rng, SeedableRng};

#[derive(Clone, Copy, PartialEq)]
enum Bug {
    None,
    TopLeftCausal,
    NoD,
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
    let scale_log2 = scale * std::f32::consts::LOG2_E;
    let prob = |dot: f32, lse: f32| (dot * scale_log2 - lse * std::f32::consts::LOG2_E).exp2();
    let sees = |i: usize, j: usize| -> bool {
        if !p.causal {
            return true;
        }
        match bug {
            Bug::TopLeftCausal => j <= i,
            _ => j as i64 <= i as i64 + sk as i64 - sq as i64,
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
                        let pr = prob(dot(q, [b, h, i], k, [b, kvh, j]), lse[[b, h, i]]);
                        let ds = pr * (dot(d_o, [b, h, i], v, [b, kvh, j]) - dvec[[b, h, i]]);
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
                    let pr = prob(dot(q, [b, h, i], k, [b, kvh, j]), lse[[b, h, i]]);
                    let ds = pr * (dot(d_o, [b, h, i], v, [b, kvh, j]) - dvec[[b, h, i]]);
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
    let lse = lse.mapv(|x| x as f32);
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
