//! Whether the backward rule leaves room for FlashAttention's D: FlashAttention's backward program
//! (the one every flashcore backward kernel runs) emulated on the host, in three forms that differ
//! only in where `D` of `dS = P ∘ (dP − D)` comes from, each judged by `judge_backward` as a
//! kernel's gradients are:
//!
//! - **stored O**: `D = rowsum(dO ∘ O)` in f32, O as the forward stores it (rounded to the dtype):
//!   FlashAttention's preprocessing, and flashcore's dense builds';
//! - **rowsum P∘dP**: `D = rowsum(P ∘ dP)` in f32 from the backward's own P and dP, which needs
//!   every key of a row before any dS (a second pass over the keys in a kernel);
//! - **P∘dP at ≤ 32 keys**: the second in a row that sees at most 32 keys, else the first: what the
//!   fast backwards' modes builds do (`kernels/common/short_row_delta.cuh`).
//!
//! The program, as the kernels compute it (f32 unless said): forward S = scale · Q Kᵀ (f32
//! accumulation of the 16-bit inputs), softcap's c·tanh(s/c), minus ALiBi's bias; p = exp(s − m),
//! l = Σ p, O = round((Σ round(p) V) / l), LSE = m + ln l. Backward: P = exp(s − LSE), dP = dO Vᵀ,
//! dS = P ∘ (dP − D) (∘ (1 − tanh²) with softcap); dV = round(P)ᵀ dO, dK = scale · round(dS)ᵀ Q,
//! dQ = scale · round(dS) K, each rounded once at the end. The judge's references are the
//! oracle's: f64 gradients and the low-precision yardstick (`gradients_low_precision`).
//!
//! Cases: one sequence a case (verify judges varlen sequence by sequence), lengths 1-400, head
//! dims 56, 64 and 128, f16 and bf16, standard normal inputs rounded to the dtype, in five classes:
//! dense; causal; a left window of 1 or 2 keys (with a right window of 0-80 keys or none); that
//! window with softcap 30 or 50.5 and ALiBi; a window of 64-256 keys with softcap and ALiBi.
//!
//! `cargo run --release -p flashcore-oracle --example stored_o -- [cases a class] [seed]`
//! (default 300, 1).

use flashcore_oracle::{
    gradients_f64, gradients_low_precision, judge_backward, OracleProblem, Precision,
};
use ndarray::{s, Array2, Array4};
use rand::{Rng, SeedableRng};

const CLASSES: [&str; 5] = [
    "dense",
    "causal",
    "window 1-2",
    "window 1-2, softcap, ALiBi",
    "window 64-256, softcap, ALiBi",
];

const FORMS: [(DFrom, &str); 3] = [
    (DFrom::StoredO, "stored O"),
    (DFrom::PdP, "rowsum P∘dP"),
    (DFrom::ShortRows(32), "P∘dP at ≤ 32 keys, else stored O"),
];

fn normal(rng: &mut rand::rngs::StdRng) -> f32 {
    // Box-Muller: a standard normal from two uniforms.
    let (u, v): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen_range(0.0..1.0));
    ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
}

fn tensor(shape: [usize; 4], rng: &mut rand::rngs::StdRng, prec: Precision) -> Array4<f32> {
    Array4::from_shape_fn(shape, |_| prec.round(normal(rng)))
}

fn draw(class: usize, rng: &mut rand::rngs::StdRng) -> (OracleProblem, Precision) {
    let d = [56, 64, 128][rng.gen_range(0..3)];
    let prec = if rng.gen_bool(0.5) {
        Precision::F16
    } else {
        Precision::Bf16
    };
    let (sq, sk) = (rng.gen_range(1..=400), rng.gen_range(1..=400));
    let mut p = OracleProblem::dense(1, 1, 1, sq, sk, d, class == 1, 1.0 / (d as f64).sqrt());
    if class >= 2 {
        p.window_left = Some(if class == 4 {
            rng.gen_range(64..=256)
        } else {
            rng.gen_range(1..=2)
        });
        p.window_right = rng.gen_bool(0.5).then(|| rng.gen_range(0..=80));
    }
    if class >= 3 {
        p.softcap = Some(if rng.gen_bool(0.5) { 30.0 } else { 50.5 });
        p.alibi_slopes = Some(vec![rng.gen_range(0.0625..1.0)]);
    }
    (p, prec)
}

/// Where a row's D comes from.
#[derive(Clone, Copy)]
enum DFrom {
    /// rowsum(dO ∘ O) with the stored (rounded) O: FlashAttention's.
    StoredO,
    /// rowsum(P ∘ dP).
    PdP,
    /// rowsum(P ∘ dP) in a row that sees at most this many keys, else the stored O: the fast
    /// backwards' modes builds (kernels/common/short_row_delta.cuh, 32 keys).
    ShortRows(usize),
}

/// FlashAttention's backward program on one (batch 0, head 0) sequence: dQ, dK, dV, with D as
/// `from` says.
fn flash_program(
    p: &OracleProblem,
    prec: Precision,
    [q, k, v, d_o]: [&Array2<f32>; 4],
    from: DFrom,
) -> [Array4<f32>; 3] {
    let (sq, sk, d) = (p.seq_q, p.seq_k, p.head_dim);
    let scale = p.scale as f32;
    let slope = p.slope(0, 0) as f32;
    let r = |x: f32| prec.round(x);
    // Scores (after softcap and bias) and 1 − tanh² of the visible pairs.
    let raw = q.dot(&k.t());
    let mut sc = Array2::<f32>::from_elem((sq, sk), f32::NEG_INFINITY);
    let mut dt = Array2::<f32>::ones((sq, sk));
    for i in 0..sq {
        let (lo, hi) = p.key_range(0, i);
        let diag = i as f32 + sk as f32 - sq as f32;
        for j in lo..hi {
            let mut s = raw[[i, j]] * scale;
            if let Some(c) = p.softcap {
                let t = (s / c as f32).tanh();
                dt[[i, j]] = 1.0 - t * t;
                s = c as f32 * t;
            }
            sc[[i, j]] = s - slope * (diag - j as f32).abs();
        }
    }
    // Forward: O (stored, rounded) and LSE.
    let mut o = Array2::<f32>::zeros((sq, d));
    let mut lse = vec![f32::INFINITY; sq];
    for i in 0..sq {
        let (lo, hi) = p.key_range(0, i);
        if lo == hi {
            continue;
        }
        let m = (lo..hi)
            .map(|j| sc[[i, j]])
            .fold(f32::NEG_INFINITY, f32::max);
        let mut l = 0.0f32;
        let mut acc = vec![0.0f32; d];
        for j in lo..hi {
            let pj = (sc[[i, j]] - m).exp();
            l += pj;
            let pr = r(pj);
            for c in 0..d {
                acc[c] += pr * v[[j, c]];
            }
        }
        for c in 0..d {
            o[[i, c]] = r(acc[c] / l);
        }
        lse[i] = m + l.ln();
    }
    // Backward.
    let mut pm = Array2::<f32>::zeros((sq, sk));
    for i in 0..sq {
        let (lo, hi) = p.key_range(0, i);
        for j in lo..hi {
            pm[[i, j]] = (sc[[i, j]] - lse[i]).exp();
        }
    }
    let dp = d_o.dot(&v.t());
    let dvec: Vec<f32> = (0..sq)
        .map(|i| {
            let (lo, hi) = p.key_range(0, i);
            let stored_o = match from {
                DFrom::StoredO => true,
                DFrom::PdP => false,
                DFrom::ShortRows(n) => hi.saturating_sub(lo) > n,
            };
            if stored_o {
                (0..d).map(|c| d_o[[i, c]] * o[[i, c]]).sum()
            } else {
                (0..sk).map(|j| pm[[i, j]] * dp[[i, j]]).sum()
            }
        })
        .collect();
    let mut ds = Array2::<f32>::zeros((sq, sk));
    for i in 0..sq {
        let (lo, hi) = p.key_range(0, i);
        for j in lo..hi {
            ds[[i, j]] = r(pm[[i, j]] * (dp[[i, j]] - dvec[i]) * dt[[i, j]]);
        }
    }
    let p16 = pm.mapv(r);
    let dv = p16.t().dot(d_o).mapv(r);
    let dk = ds.t().dot(q).mapv(|x| r(x * scale));
    let dq = ds.dot(k).mapv(|x| r(x * scale));
    let four = |a: Array2<f32>| {
        a.insert_axis(ndarray::Axis(0))
            .insert_axis(ndarray::Axis(0))
    };
    [four(dq), four(dk), four(dv)]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let per_class: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(300);
    let seed: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1);
    println!("cases a class: {per_class}, seed {seed}");
    println!("| class | D from | fail | worst ratio | worst case |");
    println!("|---|---|---:|---:|---|");
    for (class, name) in CLASSES.iter().enumerate() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed.wrapping_mul(1000) + class as u64);
        // (fails, worst ratio, worst case) for each of FORMS.
        let mut stats = vec![(0usize, 0.0f64, String::new()); FORMS.len()];
        for _ in 0..per_class {
            let (p, prec) = draw(class, &mut rng);
            let qs = [1, 1, p.seq_q, p.head_dim];
            let ks = [1, 1, p.seq_k, p.head_dim];
            let (q, k, v, d_o) = (
                tensor(qs, &mut rng, prec),
                tensor(ks, &mut rng, prec),
                tensor(ks, &mut rng, prec),
                tensor(qs, &mut rng, prec),
            );
            let reference = gradients_f64(&p, q.view(), k.view(), v.view(), d_o.view());
            let yardstick =
                gradients_low_precision(&p, prec, q.view(), k.view(), v.view(), d_o.view());
            let two = |a: &Array4<f32>| a.slice(s![0, 0, .., ..]).to_owned();
            let operands = [&two(&q), &two(&k), &two(&v), &two(&d_o)];
            for (n, (from, _)) in FORMS.into_iter().enumerate() {
                let [dq, dk, dv] = flash_program(&p, prec, operands, from);
                let verdict = judge_backward(
                    &p,
                    prec,
                    dq.view(),
                    dk.view(),
                    dv.view(),
                    &reference,
                    &yardstick,
                );
                let st = &mut stats[n];
                st.0 += usize::from(!verdict.pass);
                if verdict.ratio > st.1 {
                    st.1 = verdict.ratio;
                    st.2 = format!(
                        "sq={},sk={},d={},{},causal={},wl={:?},wr={:?},softcap={:?},alibi={}",
                        p.seq_q,
                        p.seq_k,
                        p.head_dim,
                        prec.name(),
                        p.causal,
                        p.window_left,
                        p.window_right,
                        p.softcap,
                        p.alibi_slopes.is_some()
                    );
                }
            }
        }
        for (n, (_, from)) in FORMS.into_iter().enumerate() {
            let (fails, worst, case) = &stats[n];
            println!("| {name} | {from} | {fails} / {per_class} | {worst:.3} | {case} |");
        }
    }
}
