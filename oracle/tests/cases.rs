//! Hand-built cases: exact values, GQA, masking edges, non-finite inputs, judge failure modes.

mod common;

use common::{as_kernel_output, inputs};
use flashcore_oracle::{
    check, judge, reference_f64, reference_low_precision, sample_rows, OracleProblem, Precision,
    Reference, Rows, BF16_ABS_FLOOR, F16_ABS_FLOOR,
};
use ndarray::{array, s, Array4, Axis};

fn prob(seq_q: usize, seq_k: usize, head_dim: usize, causal: bool) -> OracleProblem {
    OracleProblem {
        batch: 1,
        heads_q: 1,
        heads_kv: 1,
        seq_q,
        seq_k,
        head_dim,
        causal,
        scale: 1.0,
        window_left: None,
        window_right: None,
        softcap: None,
        alibi_slopes: None,
        mm_prefix: None,
        p_e4m3: false,
    }
}

fn render(p: &OracleProblem, r: &Reference) -> String {
    let mut out = format!("seq_q={} seq_k={} causal={}\n", p.seq_q, p.seq_k, p.causal);
    for (i, row) in r.rows().iter().enumerate() {
        let o: Vec<String> = r.o_row(i).iter().map(|x| format!("{x:.12}")).collect();
        out += &format!("{row:?} O=[{}] LSE={:.12}\n", o.join(", "), r.lse(i));
    }
    out
}

/// 2 queries, 3 keys, head_dim 2, worked by hand:
/// K = [[0,0],[1,0],[0,1]], V = [[1,0],[0,1],[1,1]], q0 = [0,0], q1 = [1,0], scale 1.
/// q0: scores 0,0,0 -> O = (2/3, 2/3), LSE = ln 3; causal it sees keys 0..=1 -> O = (1/2, 1/2),
/// LSE = ln 2. q1: scores 0,1,0 -> O = (2, 1+e)/(2+e), LSE = ln(2+e), causal or not.
#[test]
fn hand_computed_small_case() {
    let q = array![[[[0.0f32, 0.0], [1.0, 0.0]]]];
    let k = array![[[[0.0f32, 0.0], [1.0, 0.0], [0.0, 1.0]]]];
    let v = array![[[[1.0f32, 0.0], [0.0, 1.0], [1.0, 1.0]]]];
    let e = std::f64::consts::E;
    let q1 = ([2.0 / (2.0 + e), (1.0 + e) / (2.0 + e)], (2.0 + e).ln());
    let mut shown = String::new();
    for causal in [false, true] {
        let p = prob(2, 3, 2, causal);
        let r = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
        let q0 = if causal {
            ([0.5, 0.5], 2f64.ln())
        } else {
            ([2.0 / 3.0, 2.0 / 3.0], 3f64.ln())
        };
        for (i, (o, lse)) in [q0, q1].into_iter().enumerate() {
            for (c, want) in o.iter().enumerate() {
                assert!(
                    (r.o_row(i)[c] - want).abs() < 1e-15,
                    "{causal} row {i} col {c}"
                );
            }
            assert!((r.lse(i) - lse).abs() < 1e-15);
        }
        shown += &render(&p, &r);
    }
    // Causal with more queries than keys: rows 0 and 1 see nothing, row 2 sees key 0 only.
    let q3 = array![[[[0.0f32, 0.0], [1.0, 0.0], [1.0, 0.0]]]];
    let k1 = k.slice(s![.., .., ..1, ..]);
    let v1 = v.slice(s![.., .., ..1, ..]);
    let p = prob(3, 1, 2, true);
    let r = reference_f64(&p, q3.view(), k1, v1, &Rows::All);
    assert_eq!(r.o_row(0), [0.0, 0.0]);
    assert_eq!(r.lse(1), f64::INFINITY);
    assert_eq!(r.o_row(2), [1.0, 0.0]);
    assert_eq!(r.lse(2), 0.0);
    shown += &render(&p, &r);
    insta::assert_snapshot!("hand_computed_small_case", shown);
}

/// With one visible key the output is that key's V row and LSE its score.
#[test]
fn one_key_returns_its_value() {
    for causal in [false, true] {
        let p = OracleProblem {
            seq_q: 3,
            scale: -0.5,
            ..prob(3, 1, 5, causal)
        };
        let (q, k, v) = inputs(&p, Precision::F16, 2.0, 11);
        let r = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
        for i in 0..3 {
            if causal && i < 2 {
                assert_eq!(r.lse(i), f64::INFINITY);
                continue;
            }
            let vrow: Vec<f64> = v.slice(s![0, 0, 0, ..]).iter().map(|&x| x as f64).collect();
            assert_eq!(r.o_row(i), vrow.as_slice());
            let dot: f64 = (0..5)
                .map(|c| q[[0, 0, i, c]] as f64 * k[[0, 0, 0, c]] as f64)
                .sum();
            assert!((r.lse(i) - (-0.5 * dot)).abs() < 1e-12);
        }
    }
}

/// Query head h reads kv head h / (heads_q / heads_kv): same result as MHA with K/V repeated.
#[test]
fn gqa_matches_repeated_kv() {
    let p = OracleProblem {
        batch: 2,
        heads_q: 6,
        heads_kv: 2,
        seq_q: 5,
        seq_k: 7,
        head_dim: 4,
        causal: true,
        scale: 0.5,
        window_left: None,
        window_right: None,
        softcap: None,
        alibi_slopes: None,
        mm_prefix: None,
        p_e4m3: false,
    };
    let (q, k, v) = inputs(&p, Precision::Bf16, 2.0, 3);
    let rep: Vec<usize> = (0..6).map(|h| h / 3).collect();
    let (kr, vr) = (k.select(Axis(1), &rep), v.select(Axis(1), &rep));
    let mha = OracleProblem {
        heads_kv: 6,
        ..p.clone()
    };
    let a = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
    let b = reference_f64(&mha, q.view(), kr.view(), vr.view(), &Rows::All);
    assert_eq!(a, b);
    let c = reference_low_precision(
        &p,
        Precision::Bf16,
        q.view(),
        k.view(),
        v.view(),
        &Rows::All,
    );
    let d = reference_low_precision(
        &mha,
        Precision::Bf16,
        q.view(),
        kr.view(),
        vr.view(),
        &Rows::All,
    );
    assert_eq!(c, d);
}

/// Arbitrary strides (a BSHD array viewed as BHSD) give the same result as standard layout.
#[test]
fn strided_views_are_fine() {
    let p = OracleProblem {
        batch: 2,
        heads_q: 4,
        heads_kv: 2,
        seq_q: 6,
        seq_k: 9,
        head_dim: 7,
        causal: false,
        scale: 0.3,
        window_left: None,
        window_right: None,
        softcap: None,
        alibi_slopes: None,
        mm_prefix: None,
        p_e4m3: false,
    };
    let (q, k, v) = inputs(&p, Precision::F16, 1.0, 5);
    let bshd = |x: &Array4<f32>| {
        x.view()
            .permuted_axes([0, 2, 1, 3])
            .as_standard_layout()
            .into_owned()
    };
    let (qs, ks, vs) = (bshd(&q), bshd(&k), bshd(&v));
    fn back(x: &Array4<f32>) -> ndarray::ArrayView4<'_, f32> {
        x.view().permuted_axes([0, 2, 1, 3])
    }
    let a = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
    let b = reference_f64(&p, back(&qs), back(&ks), back(&vs), &Rows::All);
    assert_eq!(a, b);
}

/// Big enough to take the multi-threaded path; must equal row-by-row results.
#[test]
fn threaded_path_matches_rows() {
    let p = OracleProblem {
        batch: 1,
        heads_q: 4,
        heads_kv: 1,
        seq_q: 160,
        seq_k: 200,
        head_dim: 40,
        causal: true,
        scale: 0.2,
        window_left: None,
        window_right: None,
        softcap: None,
        alibi_slopes: None,
        mm_prefix: None,
        p_e4m3: false,
    };
    let (q, k, v) = inputs(&p, Precision::F16, 1.0, 9);
    let all = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
    for (i, &row) in all.rows().iter().enumerate().step_by(37) {
        let one = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::List(vec![row]));
        assert_eq!(one.o_row(0), all.o_row(i));
        assert_eq!(one.lse(0), all.lse(i));
    }
}

#[test]
fn empty_key_set_and_zero_rows() {
    let p = prob(3, 0, 4, false);
    let (q, k, v) = inputs(&p, Precision::F16, 1.0, 1);
    for r in [
        reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All),
        reference_low_precision(&p, Precision::F16, q.view(), k.view(), v.view(), &Rows::All),
    ] {
        for i in 0..3 {
            assert_eq!(r.o_row(i), [0.0; 4]);
            assert_eq!(r.lse(i), f64::INFINITY);
        }
    }
    let none = prob(0, 5, 4, true);
    let (q, k, v) = inputs(&none, Precision::F16, 1.0, 1);
    let v = check(
        &none,
        Precision::F16,
        q.view(),
        k.view(),
        v.view(),
        Array4::zeros((1, 1, 0, 4)).view(),
        ndarray::Array3::zeros((1, 1, 0)).view(),
        &Rows::All,
    );
    assert!(
        v.pass && v.rows_checked == 0 && v.worst.is_none(),
        "{}",
        v.message
    );
}

/// Non-finite inputs never panic and propagate as IEEE arithmetic does.
#[test]
fn non_finite_inputs_propagate() {
    let p = OracleProblem {
        seq_q: 4,
        ..prob(4, 4, 3, true)
    };
    let (q, k, v) = inputs(&p, Precision::F16, 1.0, 2);

    // NaN in one query row: that row only.
    let mut qn = q.clone();
    qn[[0, 0, 1, 0]] = f32::NAN;
    let r = reference_f64(&p, qn.view(), k.view(), v.view(), &Rows::All);
    assert!(r.lse(1).is_nan() && r.o_row(1).iter().all(|x| x.is_nan()));
    assert!(r.lse(0).is_finite() && r.lse(2).is_finite());

    // NaN in V[key 2, col 1]: column 1 of rows that see key 2 (rows 2, 3); masked rows untouched.
    let mut vn = v.clone();
    vn[[0, 0, 2, 1]] = f32::NAN;
    let r = reference_f64(&p, q.view(), k.view(), vn.view(), &Rows::All);
    for i in 0..4 {
        assert!(r.lse(i).is_finite());
        assert_eq!(r.o_row(i)[1].is_nan(), i >= 2, "row {i}");
        assert!(!r.o_row(i)[0].is_nan() && !r.o_row(i)[2].is_nan());
    }

    // +Inf in a key: a +inf (or NaN, from 0 · inf) score makes the rows that see it NaN.
    let mut kn = k.clone();
    kn.slice_mut(s![0, 0, 3, ..]).fill(f32::INFINITY);
    let mut qp = q.clone();
    qp.slice_mut(s![0, 0, 3, ..]).fill(0.5);
    let r = reference_f64(&p, qp.view(), kn.view(), v.view(), &Rows::All);
    assert!(r.lse(3).is_nan() && r.o_row(3).iter().all(|x| x.is_nan()));
    assert!(r.lse(2).is_finite());

    // Inf in V: that column becomes ±inf or NaN, never a panic.
    let mut vi = v.clone();
    vi[[0, 0, 0, 0]] = f32::NEG_INFINITY;
    let r = reference_f64(&p, q.view(), k.view(), vi.view(), &Rows::All);
    assert_eq!(r.o_row(0)[0], f64::NEG_INFINITY);
    let _ = reference_low_precision(
        &p,
        Precision::Bf16,
        qn.view(),
        kn.view(),
        vi.view(),
        &Rows::All,
    );
}

fn fixture() -> (OracleProblem, Array4<f32>, Array4<f32>, Array4<f32>) {
    let p = OracleProblem {
        batch: 2,
        heads_q: 2,
        heads_kv: 1,
        seq_q: 8,
        seq_k: 6,
        head_dim: 16,
        causal: true,
        scale: 0.25,
        window_left: None,
        window_right: None,
        softcap: None,
        alibi_slopes: None,
        mm_prefix: None,
        p_e4m3: false,
    };
    let (q, k, v) = inputs(&p, Precision::F16, 2.0, 42);
    (p, q, k, v)
}

/// Two rows exchanged fail (rows 6 and 7 see 4 and 5 different keys, so they differ a lot).
#[test]
fn judge_fails_swapped_rows() {
    let (p, q, k, v) = fixture();
    let (r, l) = refs(&p, Precision::F16, &q, &k, &v, &Rows::All);
    let (mut o, lse) = as_kernel_output(&p, &r);
    let a = o.slice(s![1, 1, 6, ..]).to_owned();
    let b = o.slice(s![1, 1, 7, ..]).to_owned();
    o.slice_mut(s![1, 1, 6, ..]).assign(&b);
    o.slice_mut(s![1, 1, 7, ..]).assign(&a);
    let verdict = judge(&p, Precision::F16, o.view(), lse.view(), &Rows::All, &r, &l);
    assert!(!verdict.pass);
    assert!(verdict.ratio > 10.0, "{}", verdict.message);
    assert!(matches!(verdict.worst, Some((1, 1, 6 | 7, _))));
    assert!(verdict.message.starts_with("FAIL"), "{}", verdict.message);
}

fn refs(
    p: &OracleProblem,
    prec: Precision,
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    rows: &Rows,
) -> (Reference, Reference) {
    (
        reference_f64(p, q.view(), k.view(), v.view(), rows),
        reference_low_precision(p, prec, q.view(), k.view(), v.view(), rows),
    )
}

#[test]
fn judge_nan_and_empty_row_rules() {
    let (p, q, k, v) = fixture();
    let (r, l) = refs(&p, Precision::F16, &q, &k, &v, &Rows::All);
    let (o, lse) = as_kernel_output(&p, &r);

    // Empty rows (0 and 1 of each head): -0.0 is fine, anything else is not.
    let mut o2 = o.clone();
    o2[[0, 1, 1, 3]] = -0.0;
    let ok = judge(
        &p,
        Precision::F16,
        o2.view(),
        lse.view(),
        &Rows::All,
        &r,
        &l,
    );
    assert!(ok.pass, "{}", ok.message);
    o2[[0, 1, 1, 3]] = 1e-30;
    let bad = judge(
        &p,
        Precision::F16,
        o2.view(),
        lse.view(),
        &Rows::All,
        &r,
        &l,
    );
    assert_eq!((bad.pass, bad.empty_mismatch), (false, 1));
    assert_eq!(bad.worst, Some((0, 1, 1, 3)));
    for x in [f32::NEG_INFINITY, 0.0, f32::NAN] {
        let mut l2 = lse.clone();
        l2[[1, 0, 0]] = x;
        let bad = judge(&p, Precision::F16, o.view(), l2.view(), &Rows::All, &r, &l);
        assert!(!bad.pass);
        assert_eq!(bad.empty_mismatch + bad.unwritten_or_nan, 1);
        assert_eq!(bad.worst, Some((1, 0, 0, 16)));
    }

    // Kernel +inf where the reference is finite is an infinite error.
    let mut o3 = o.clone();
    o3[[0, 0, 5, 0]] = f32::INFINITY;
    let bad = judge(
        &p,
        Precision::F16,
        o3.view(),
        lse.view(),
        &Rows::All,
        &r,
        &l,
    );
    assert!(!bad.pass && bad.o_max_err.is_infinite());

    // Reference NaN: the kernel must be NaN too; both NaN is agreement.
    let mut qn = q.clone();
    qn[[1, 0, 4, 2]] = f32::NAN;
    let (rn, ln) = refs(&p, Precision::F16, &qn, &k, &v, &Rows::All);
    let (on, lsen) = as_kernel_output(&p, &rn);
    let both = judge(
        &p,
        Precision::F16,
        on.view(),
        lsen.view(),
        &Rows::All,
        &rn,
        &ln,
    );
    assert!(both.pass, "{}", both.message);
    let mismatch = judge(
        &p,
        Precision::F16,
        o.view(),
        lse.view(),
        &Rows::All,
        &rn,
        &ln,
    );
    assert!(!mismatch.pass);
    assert_eq!(mismatch.nan_mismatch, 16 + 1);
    assert_eq!(mismatch.worst, Some((1, 0, 4, 0)));
}

/// A full-size poisoned output is caught on sampled rows, via `check`.
#[test]
fn check_on_sampled_rows() {
    let p = OracleProblem {
        batch: 2,
        heads_q: 4,
        heads_kv: 2,
        seq_q: 300,
        seq_k: 100,
        head_dim: 8,
        causal: true,
        scale: 0.35,
        window_left: None,
        window_right: None,
        softcap: None,
        alibi_slopes: None,
        mm_prefix: None,
        p_e4m3: false,
    };
    let (q, k, v) = inputs(&p, Precision::Bf16, 2.0, 8);
    let rows = sample_rows(&p, 200, 3);
    assert!(matches!(rows, Rows::List(_)));
    let r = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
    let (o, lse) = as_kernel_output(&p, &r);
    let v1 = check(
        &p,
        Precision::Bf16,
        q.view(),
        k.view(),
        v.view(),
        o.view(),
        lse.view(),
        &rows,
    );
    assert!(v1.pass, "{}", v1.message);
    // Last row of each head is always sampled; poison one element there.
    let mut o2 = o.clone();
    o2[[1, 3, 299, 5]] = f32::NAN;
    let v2 = check(
        &p,
        Precision::Bf16,
        q.view(),
        k.view(),
        v.view(),
        o2.view(),
        lse.view(),
        &rows,
    );
    assert_eq!((v2.pass, v2.unwritten_or_nan), (false, 1));
    assert!(v2.message.contains("O[1,3,299,5]"), "{}", v2.message);
}

#[test]
fn floors_are_one_ulp_at_point_three() {
    // FA3's fwd_atol, 2·max|(x + 0.3 - 0.3) - x|, measured over many small x in each dtype.
    for (prec, floor) in [
        (Precision::F16, F16_ABS_FLOOR),
        (Precision::Bf16, BF16_ABS_FLOOR),
    ] {
        let r = |x: f32| prec.round(x);
        let c = r(0.3);
        let worst = (0..20000)
            .map(|i| r(i as f32 * 1e-5 - 0.1))
            .map(|x| (r(r(x + c) - c) - x).abs() as f64)
            .fold(0.0, f64::max);
        assert_eq!(2.0 * worst, floor, "{prec}");
    }
    assert_eq!(Precision::F16.abs_floor(), 2f64.powi(-12));
    assert_eq!(Precision::Bf16.abs_floor(), 2f64.powi(-9));
}

/// Pins what the low-precision reference rounds: scores, probabilities and O to the dtype, LSE
/// kept in f32.
#[test]
fn low_precision_rounds_where_pytorch_does() {
    let f16 = Precision::F16;
    // One key: LSE is the score, so it shows the score's rounding to f16.
    let p = OracleProblem {
        scale: 1.0 / 3.0,
        ..prob(1, 1, 1, false)
    };
    let x = 1.0f32 + 2f32.powi(-10);
    let q = Array4::from_elem((1, 1, 1, 1), 1.0f32);
    let k = Array4::from_elem((1, 1, 1, 1), x);
    let l = reference_low_precision(&p, f16, q.view(), k.view(), k.view(), &Rows::All);
    let s16 = f16.round(x * (1.0f32 / 3.0));
    assert_eq!(l.lse(0), s16 as f64);
    let r = reference_f64(&p, q.view(), k.view(), k.view(), &Rows::All);
    assert!((r.lse(0) - s16 as f64).abs() > 1e-5);

    // Three equal scores: P = round(1/3), so O picks up the rounded probability; LSE = ln 3 in f32.
    let p = prob(1, 3, 1, false);
    let q = Array4::zeros((1, 1, 1, 1));
    let k = Array4::zeros((1, 1, 3, 1));
    let v = array![[[[1.0f32], [0.0], [0.0]]]];
    let l = reference_low_precision(&p, f16, q.view(), k.view(), v.view(), &Rows::All);
    assert_eq!(l.o_row(0), [f16.round(1.0 / 3.0) as f64]);
    assert_eq!(l.lse(0), 3f32.ln() as f64);
    let b = reference_low_precision(
        &p,
        Precision::Bf16,
        q.view(),
        k.view(),
        v.view(),
        &Rows::All,
    );
    assert_eq!(b.o_row(0), [Precision::Bf16.round(1.0 / 3.0) as f64]);
}
