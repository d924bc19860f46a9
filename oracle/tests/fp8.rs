//! The fp8 forward's low-precision reference (`OracleProblem::p_e4m3`): FlashAttention 3's fp8
//! program takes its scores from an fp8 GEMM (as bf16) and rounds the probabilities' numerators to
//! e4m3 before P·V, and the reference does too.

use flashcore_oracle::{
    check, reference_f64, reference_low_precision, round_e4m3, OracleProblem, Precision, Rows,
};
use ndarray::Array4;
use rand::{Rng, SeedableRng};

/// Two keys whose scores are 0 and ln 0.3 (scale ln 0.3, q = 1, k = [0, 1]), V = [0, 1]: the
/// second key's numerator exp(ln 0.3) = 0.3 is not an e4m3 value (its neighbours 0.28125 and
/// 0.3125), so P rounding shows in O = P̃_1 / (1 + 0.3).
#[test]
fn the_second_keys_numerator_is_rounded_to_e4m3() {
    let mut p = OracleProblem::dense(1, 1, 1, 1, 2, 1, false, 0.3f64.ln());
    let q = Array4::from_elem((1, 1, 1, 1), 1.0f32);
    let k = Array4::from_shape_vec((1, 1, 2, 1), vec![0.0f32, 1.0]).unwrap();
    let v = k.clone();
    let low = |p: &OracleProblem| {
        reference_low_precision(p, Precision::Bf16, q.view(), k.view(), v.view(), &Rows::All)
    };
    let plain = low(&p);
    p.p_e4m3 = true;
    let fp8 = low(&p);
    let exact = 0.3 / 1.3;
    // The fp8 program's scores are an fp8 GEMM's, in bf16: ln 0.3 rounded, whose exp is still
    // closest to e4m3's 0.3125.
    let e = Precision::Bf16.round(0.3f32.ln()).exp();
    assert_eq!(round_e4m3(e), 0.3125);
    let want = f64::from(Precision::Bf16.round(0.3125f32 / (1.0 + e)));
    assert_eq!(fp8.o_row(0)[0], want, "fp8 O");
    // The bf16 program rounds the normalised probability to bf16 instead: far closer.
    assert!(
        (plain.o_row(0)[0] - exact).abs() < 2e-3,
        "{}",
        plain.o_row(0)[0]
    );
    assert!((fp8.o_row(0)[0] - exact).abs() > 5e-3);
    // The LSE comes from the unrounded numerators of the bf16 scores: ln(1 + e).
    assert!(
        (fp8.lse(0) - f64::from((1.0 + e).ln())).abs() < 1e-6,
        "{}",
        fp8.lse(0)
    );
    // The f64 reference ignores the flag.
    let mut f64_plain = p.clone();
    f64_plain.p_e4m3 = false;
    assert_eq!(
        reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All),
        reference_f64(&f64_plain, q.view(), k.view(), v.view(), &Rows::All)
    );
}

/// e4m3 values times a power of two, as `verify --dtype e4m3` draws them.
fn e4m3_tensor(shape: (usize, usize, usize, usize), std: f32, rng: &mut impl Rng) -> Array4<f32> {
    Array4::from_shape_simple_fn(shape, || {
        let u: f32 = rng.gen_range(-1.7f32..1.7);
        round_e4m3(u * std) / std
    })
}

/// On a random GQA problem of e4m3 inputs the fp8 reference differs from the bf16 one, sits
/// further from the f64 reference (P's three fraction bits against bf16's seven), and so grants
/// a wider tolerance; each reference passes the rule it sets.
#[test]
fn on_random_e4m3_inputs_the_fp8_reference_is_the_looser_one() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for causal in [false, true] {
        let mut p = OracleProblem::dense(2, 4, 2, 37, 300, 64, causal, 1.0 / 8.0);
        let q = e4m3_tensor((2, 4, 37, 64), 16.0, &mut rng);
        let k = e4m3_tensor((2, 2, 300, 64), 16.0, &mut rng);
        let v = e4m3_tensor((2, 2, 300, 64), 16.0, &mut rng);
        let exact = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
        let low = |p: &OracleProblem| {
            reference_low_precision(p, Precision::Bf16, q.view(), k.view(), v.view(), &Rows::All)
        };
        let bf16 = low(&p);
        p.p_e4m3 = true;
        let fp8 = low(&p);
        assert_ne!(fp8, bf16);
        let max_err = |r: &flashcore_oracle::Reference| {
            r.o()
                .iter()
                .zip(exact.o().iter())
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max)
        };
        let (e_fp8, e_bf16) = (max_err(&fp8), max_err(&bf16));
        assert!(e_fp8 > 2.0 * e_bf16, "fp8 {e_fp8:.3e}, bf16 {e_bf16:.3e}");
        // Still an approximation of the same attention: with |v| < 1.7 and numerators off by
        // at most half of e4m3's relative step (2^-4) where they are normal, O's error stays
        // under 1.7 · 2^-4.
        assert!(e_fp8 < 1.7 / 16.0, "{e_fp8}");

        // The f64 reference's own output passes with a ratio near 0 either way, and the bf16
        // program's output passes the fp8 rule, which is the looser one.
        let (o, lse) = exact.to_dense(&p);
        let o32 = o.mapv(|x| x as f32);
        let lse32 = lse.mapv(|x| x as f32);
        let v_ = check(
            &p,
            Precision::Bf16,
            q.view(),
            k.view(),
            v.view(),
            o32.view(),
            lse32.view(),
            &Rows::All,
        );
        assert!(v_.pass, "{}", v_.message);
        let (o_bf16, _) = bf16.to_dense(&p);
        let o_bf16 = o_bf16.mapv(|x| x as f32);
        let v_ = check(
            &p,
            Precision::Bf16,
            q.view(),
            k.view(),
            v.view(),
            o_bf16.view(),
            lse32.view(),
            &Rows::All,
        );
        assert!(v_.pass, "{}", v_.message);
    }
}
