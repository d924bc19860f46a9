//! Properties the f64 reference must have whatever the problem, and the judge's basic contract.

mod common;

use common::{as_kernel_output, inputs, precision, small_problem};
use flashcore_oracle::{
    judge, probabilities, reference_f64, reference_low_precision, softmax_in_place, OracleProblem,
    Precision, Rows,
};
use ndarray::{s, Array4, Axis};
use proptest::prelude::*;

const TIGHT: f64 = 1e-12;

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn probabilities_sum_to_one(p in small_problem(), seed in any::<u64>()) {
        let (q, k, v) = inputs(&p, Precision::F16, 2.0, seed);
        for row in Rows::All.expand(&p) {
            let pr = probabilities(&p, q.view(), k.view(), v.view(), row);
            prop_assert_eq!(pr.len(), p.visible_keys(row.0, row.2));
            if !pr.is_empty() {
                let sum: f64 = pr.iter().sum();
                prop_assert!((sum - 1.0).abs() < TIGHT, "sum {sum}");
                prop_assert!(pr.iter().all(|&x| (0.0..=1.0).contains(&x)));
            }
        }
    }

    /// Each O row is a convex combination of the visible V rows, so it lies within their
    /// per-column min/max; empty rows are exactly 0 with LSE +inf.
    #[test]
    fn output_is_convex_combination(p in small_problem(), seed in any::<u64>()) {
        let (q, k, v) = inputs(&p, Precision::Bf16, 3.0, seed);
        let r = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
        for (i, &(b, h, row)) in r.rows().iter().enumerate() {
            let n = p.visible_keys(b, row);
            let o = r.o_row(i);
            if n == 0 {
                prop_assert!(o.iter().all(|&x| x == 0.0));
                prop_assert_eq!(r.lse(i), f64::INFINITY);
                continue;
            }
            prop_assert!(r.lse(i).is_finite());
            let vis = v.slice(s![b, p.kv_head(h), ..n, ..]);
            for (c, &x) in o.iter().enumerate() {
                let col = vis.index_axis(Axis(1), c);
                let lo = col.iter().fold(f64::INFINITY, |a, &y| a.min(y as f64));
                let hi = col.iter().fold(f64::NEG_INFINITY, |a, &y| a.max(y as f64));
                prop_assert!(x >= lo - TIGHT && x <= hi + TIGHT, "{x} not in [{lo}, {hi}]");
            }
        }
    }

    #[test]
    fn key_permutation_leaves_noncausal_output_unchanged(
        p in small_problem(), seed in any::<u64>(), shift in 0usize..16
    ) {
        let p = OracleProblem { causal: false, ..p.clone() };
        let (q, k, v) = inputs(&p, Precision::F16, 2.0, seed);
        // A rotation plus a reversal: every key moves for seq_k >= 2.
        let perm: Vec<usize> = (0..p.seq_k).rev().map(|j| (j + shift) % p.seq_k.max(1)).collect();
        let kp = k.select(Axis(2), &perm);
        let vp = v.select(Axis(2), &perm);
        let a = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
        let b = reference_f64(&p, q.view(), kp.view(), vp.view(), &Rows::All);
        for i in 0..a.len() {
            prop_assert!((a.lse(i) - b.lse(i)).abs() < TIGHT || a.lse(i) == b.lse(i));
            for (x, y) in a.o_row(i).iter().zip(b.o_row(i)) {
                prop_assert!((x - y).abs() < TIGHT);
            }
        }
    }

    /// Adding a constant to every score of a row changes O not at all and LSE by that constant.
    /// Done through the full reference with an extra dimension: q gets `a`, every key gets 1,
    /// so each score of the row grows by `scale · a`.
    #[test]
    fn constant_score_shift_changes_nothing(
        p in small_problem(), seed in any::<u64>(), shift in -8.0f32..8.0
    ) {
        let (q, k, v) = inputs(&p, Precision::F16, 2.0, seed);
        let d = p.head_dim;
        let p2 = OracleProblem { head_dim: d + 1, ..p.clone() };
        let mut q2 = Array4::from_elem((p.batch, p.heads_q, p.seq_q, d + 1), shift);
        q2.slice_mut(s![.., .., .., ..d]).assign(&q);
        let mut k2 = Array4::from_elem((p.batch, p.heads_kv, p.seq_k, d + 1), 1.0f32);
        k2.slice_mut(s![.., .., .., ..d]).assign(&k);
        let mut v2 = Array4::zeros((p.batch, p.heads_kv, p.seq_k, d + 1));
        v2.slice_mut(s![.., .., .., ..d]).assign(&v);
        let a = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
        let b = reference_f64(&p2, q2.view(), k2.view(), v2.view(), &Rows::All);
        let c = p.scale * shift as f64;
        for i in 0..a.len() {
            if a.lse(i).is_infinite() {
                prop_assert_eq!(b.lse(i), f64::INFINITY);
            } else {
                prop_assert!((a.lse(i) + c - b.lse(i)).abs() < 1e-9);
            }
            for (x, y) in a.o_row(i).iter().zip(&b.o_row(i)[..d]) {
                prop_assert!((x - y).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn softmax_is_shift_invariant(
        s in prop::collection::vec(-50.0f64..50.0, 1..40), c in -1e3f64..1e3
    ) {
        let mut a = s.clone();
        let mut b: Vec<f64> = s.iter().map(|x| x + c).collect();
        let la = softmax_in_place(&mut a);
        let lb = softmax_in_place(&mut b);
        prop_assert!((la + c - lb).abs() < 1e-9);
        for (x, y) in a.iter().zip(&b) {
            prop_assert!((x - y).abs() < 1e-12);
        }
    }

    /// The low-precision reference stays close to f64 (a sanity bound, far above typical), and
    /// follows the same empty-row convention.
    #[test]
    fn low_precision_is_near_f64(p in small_problem(), prec in precision(), seed in any::<u64>()) {
        let (q, k, v) = inputs(&p, prec, 2.0, seed);
        let r = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
        let l = reference_low_precision(&p, prec, q.view(), k.view(), v.view(), &Rows::All);
        let bound = match prec { Precision::F16 => 2e-2, Precision::Bf16 => 1e-1 };
        for i in 0..r.len() {
            if r.lse(i).is_infinite() {
                prop_assert_eq!(l.lse(i), f64::INFINITY);
                prop_assert!(l.o_row(i).iter().all(|&x| x == 0.0));
                continue;
            }
            prop_assert!((r.lse(i) - l.lse(i)).abs() < bound, "lse {} vs {}", r.lse(i), l.lse(i));
            for (x, y) in r.o_row(i).iter().zip(l.o_row(i)) {
                prop_assert!((x - y).abs() < bound, "o {x} vs {y}");
                prop_assert!(prec.is_representable(*y as f32));
            }
        }
    }

    /// The judge passes the f64 reference (as f32 kernel output) and the low-precision reference,
    /// and fails outputs perturbed by 10x the allowance, NaN-poisoned or with an empty row not
    /// exactly 0 / +inf.
    #[test]
    fn judge_passes_references_and_fails_corruption(
        p in small_problem(), prec in precision(), seed in any::<u64>(), pick in any::<prop::sample::Index>()
    ) {
        let (q, k, v) = inputs(&p, prec, 2.0, seed);
        let rows = Rows::All;
        let r = reference_f64(&p, q.view(), k.view(), v.view(), &rows);
        let l = reference_low_precision(&p, prec, q.view(), k.view(), v.view(), &rows);
        let (o, lse) = as_kernel_output(&p, &r);
        let ok = judge(&p, prec, o.view(), lse.view(), &rows, &r, &l);
        prop_assert!(ok.pass, "{}", ok.message);
        prop_assert!(ok.ratio <= 1.0);
        prop_assert!(ok.o_allowed >= prec.abs_floor());
        let (lo, llse) = as_kernel_output(&p, &l);
        let lv = judge(&p, prec, lo.view(), llse.view(), &rows, &r, &l);
        prop_assert!(lv.pass, "{}", lv.message);

        let n = p.total_rows() * p.head_dim;
        prop_assume!(n > 0);
        let at = pick.index(n);
        let (b, h, row, c) = (
            at / (p.heads_q * p.seq_q * p.head_dim),
            at / (p.seq_q * p.head_dim) % p.heads_q,
            at / p.head_dim % p.seq_q,
            at % p.head_dim,
        );

        let mut bad = o.clone();
        bad[[b, h, row, c]] += (10.0 * ok.o_allowed) as f32;
        let v1 = judge(&p, prec, bad.view(), lse.view(), &rows, &r, &l);
        prop_assert!(!v1.pass);
        prop_assert_eq!(v1.worst, Some((b, h, row, c)));
        if p.visible_keys(b, row) == 0 {
            prop_assert_eq!(v1.empty_mismatch, 1);
        } else {
            prop_assert!(v1.ratio > 9.0, "{}", v1.message);
        }

        let mut nan = o.clone();
        nan[[b, h, row, c]] = f32::NAN;
        let v2 = judge(&p, prec, nan.view(), lse.view(), &rows, &r, &l);
        prop_assert!(!v2.pass);
        prop_assert_eq!(v2.unwritten_or_nan, 1);
        prop_assert_eq!(v2.worst, Some((b, h, row, c)));

        let mut badlse = lse.clone();
        badlse[[b, h, row]] += (10.0 * ok.lse_allowed) as f32;
        badlse[[b, h, row]] = if p.visible_keys(b, row) == 0 { 1e30 } else { badlse[[b, h, row]] };
        let v3 = judge(&p, prec, o.view(), badlse.view(), &rows, &r, &l);
        prop_assert!(!v3.pass, "{}", v3.message);
        prop_assert_eq!(v3.worst, Some((b, h, row, p.head_dim)));
    }

    /// Sampled rows give the same values as the full computation, whatever order they come in.
    #[test]
    fn row_lists_match_all(p in small_problem(), seed in any::<u64>()) {
        let (q, k, v) = inputs(&p, Precision::F16, 2.0, seed);
        let all = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
        let mut list = Rows::All.expand(&p);
        list.reverse();
        if let Some(&first) = list.first() {
            list.push(first);
        }
        let some = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::List(list.clone()));
        for (i, row) in list.iter().enumerate() {
            let j = all.rows().iter().position(|x| x == row).unwrap();
            prop_assert_eq!(some.o_row(i), all.o_row(j));
            prop_assert_eq!(some.lse(i).to_bits(), all.lse(j).to_bits());
        }
    }
}
