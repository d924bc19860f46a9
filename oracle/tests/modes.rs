//! The inference modes of the reference (docs/MODES.md): windows against a brute-force mask,
//! softcap and ALiBi against their definitions, and the storage helpers.

use flashcore_oracle::{
    append_rows, gather_paged, probabilities, reference_f64, OracleProblem, Rows,
};
use ndarray::{s, Array3, Array4};
use rand::{Rng, SeedableRng};

fn random(shape: [usize; 4], seed: u64) -> Array4<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    Array4::from_shape_fn(shape, |_| rng.gen_range(-2.0f32..2.0))
}

fn problem(sq: usize, sk: usize) -> OracleProblem {
    OracleProblem::dense(1, 2, 1, sq, sk, 8, false, 0.4)
}

/// The mask written out from the definition, independently of key_range.
fn visible(p: &OracleProblem, i: usize, j: usize) -> bool {
    let diag = i as i64 + p.seq_k as i64 - p.seq_q as i64;
    let j = j as i64;
    let right = if p.causal {
        Some(0)
    } else {
        p.window_right.map(|w| w as i64)
    };
    right.is_none_or(|r| j <= diag + r) && p.window_left.is_none_or(|l| j >= diag - l as i64)
}

/// candle-flash-attn's `mm_prefix_ranges` rule written out (its `mm_prefix_allowed`): a query at
/// position `diag` inside a range sees every key of the range below seq_k, beside what the causal
/// mask and the window let through.
fn visible_with_prefix(p: &OracleProblem, b: usize, i: usize, j: usize) -> bool {
    let diag = i as i64 + p.seq_k as i64 - p.seq_q as i64;
    let ranges = p.mm_prefix.as_ref().map_or(&[][..], |m| &m[b][..]);
    let in_range = ranges.iter().any(|&(s, e)| {
        let (s, e) = (s as i64, e as i64);
        s < e && (s..e).contains(&diag) && (s..e).contains(&(j as i64))
    });
    j < p.seq_k && (visible(p, i, j) || in_range)
}

#[test]
fn mm_prefix_ranges_match_a_brute_force_mask() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(37);
    for _ in 0..400 {
        let sk = rng.gen_range(0..40usize);
        let sq = rng.gen_range(1..40usize);
        let mut p = OracleProblem::dense(3, 2, 1, sq, sk, 8, rng.gen_bool(0.6), 0.4);
        if rng.gen_bool(0.5) {
            p.window_left = Some(rng.gen_range(0..8));
        }
        if !p.causal && rng.gen_bool(0.3) {
            p.window_right = Some(rng.gen_range(0..4));
        }
        // Up to three ranges an entry, some empty (start >= end), some past seq_k, overlapping.
        let ranges: Vec<Vec<(usize, usize)>> = (0..p.batch)
            .map(|_| {
                (0..rng.gen_range(0..4))
                    .map(|_| (rng.gen_range(0..45usize), rng.gen_range(0..45usize)))
                    .collect()
            })
            .collect();
        p.mm_prefix = Some(ranges);
        for b in 0..p.batch {
            for i in 0..sq {
                let want: Vec<usize> = (0..sk)
                    .filter(|&j| visible_with_prefix(&p, b, i, j))
                    .collect();
                let (lo, hi) = p.key_range(b, i);
                assert_eq!(
                    (lo..hi).collect::<Vec<_>>(),
                    want,
                    "{p:?} entry {b} row {i}"
                );
            }
        }
    }
}

#[test]
fn windows_match_a_brute_force_mask() {
    let windows = [None, Some(0), Some(1), Some(5), Some(1000)];
    for (sq, sk) in [(7, 7), (3, 11), (11, 3), (5, 0), (1, 9)] {
        for wl in windows {
            for wr in windows {
                for causal in [false, true] {
                    let mut p = problem(sq, sk);
                    p.window_left = wl;
                    p.window_right = wr;
                    p.causal = causal;
                    for i in 0..sq {
                        let want: Vec<usize> = (0..sk).filter(|&j| visible(&p, i, j)).collect();
                        let (lo, hi) = p.key_range(0, i);
                        assert_eq!((lo..hi).collect::<Vec<_>>(), want, "{p:?} row {i}");
                    }
                }
            }
        }
    }
}

#[test]
fn a_window_changes_only_what_it_masks() {
    // Window rows: the probabilities over the window equal a dense softmax over those keys.
    let mut p = problem(6, 10);
    p.window_left = Some(2);
    p.window_right = Some(1);
    let (q, k, v) = (
        random([1, 2, 6, 8], 1),
        random([1, 1, 10, 8], 2),
        random([1, 1, 10, 8], 3),
    );
    for i in 0..6 {
        let (lo, hi) = p.key_range(0, i);
        let probs = probabilities(&p, q.view(), k.view(), v.view(), (0, 1, i));
        assert_eq!(probs.len(), hi - lo);
        let dots: Vec<f64> = (lo..hi)
            .map(|j| {
                0.4 * (0..8)
                    .map(|c| q[[0, 1, i, c]] as f64 * k[[0, 0, j, c]] as f64)
                    .sum::<f64>()
            })
            .collect();
        let m = dots.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = dots.iter().map(|d| (d - m).exp()).sum();
        for (pr, d) in probs.iter().zip(&dots) {
            assert!((pr - (d - m).exp() / z).abs() < 1e-12);
        }
    }
}

#[test]
fn softcap_bounds_the_logits_and_vanishes_when_large() {
    let p = problem(5, 9);
    let (q, k, v) = (
        random([1, 2, 5, 8], 4),
        random([1, 1, 9, 8], 5),
        random([1, 1, 9, 8], 6),
    );
    let plain = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
    let mut capped = p.clone();
    capped.softcap = Some(1e9);
    let wide = reference_f64(&capped, q.view(), k.view(), v.view(), &Rows::All);
    for (a, b) in plain.o().iter().zip(wide.o().iter()) {
        assert!((a - b).abs() <= 1e-12 * (1.0 + a.abs()), "{a} {b}");
    }
    // With c = 0.5 every logit lies in (-0.5, 0.5): the probabilities' ratio is at most e.
    capped.softcap = Some(0.5);
    for i in 0..5 {
        let probs = probabilities(&capped, q.view(), k.view(), v.view(), (0, 0, i));
        let (mn, mx) = probs
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
        assert!(mx / mn <= 1f64.exp() + 1e-12, "{mx} / {mn}");
    }
}

#[test]
fn alibi_is_the_absolute_distance_bias() {
    let (q, k, v) = (
        random([2, 2, 4, 8], 7),
        random([2, 1, 6, 8], 8),
        random([2, 1, 6, 8], 9),
    );
    let mut p = OracleProblem::dense(2, 2, 1, 4, 6, 8, false, 0.4);
    let zero = {
        let mut z = p.clone();
        z.alibi_slopes = Some(vec![0.0; 4]);
        z
    };
    let a = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
    let b = reference_f64(&zero, q.view(), k.view(), v.view(), &Rows::All);
    assert_eq!(a.o(), b.o(), "slope 0 is no ALiBi");
    p.alibi_slopes = Some(vec![0.5, 0.25, 1.0, 0.125]);
    // Row 1 of (batch 1, head 0): slope 1.0, diagonal key 1 + 6 - 4 = 3.
    let probs = probabilities(&p, q.view(), k.view(), v.view(), (1, 0, 1));
    let logits: Vec<f64> = (0..6)
        .map(|j| {
            let dot: f64 = (0..8)
                .map(|c| q[[1, 0, 1, c]] as f64 * k[[1, 0, j, c]] as f64)
                .sum();
            0.4 * dot - 1.0 * (3.0 - j as f64).abs()
        })
        .collect();
    let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = logits.iter().map(|l| (l - m).exp()).sum();
    for (pr, l) in probs.iter().zip(&logits) {
        assert!((pr - (l - m).exp() / z).abs() < 1e-12);
    }
}

#[test]
fn causal_alibi_matches_flash_attention_2s_form_up_to_the_lse() {
    // FA2's causal kernels add +slope·j instead of -slope·|i + off - j|: under the causal mask
    // the two differ by slope·(i + off) per row, so O is the same and LSE shifts by that.
    let (q, k, v) = (
        random([1, 1, 5, 8], 10),
        random([1, 1, 8, 8], 11),
        random([1, 1, 8, 8], 12),
    );
    let mut p = OracleProblem::dense(1, 1, 1, 5, 8, 8, true, 0.4);
    p.alibi_slopes = Some(vec![0.3]);
    let ours = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
    for i in 0..5 {
        let (lo, hi) = p.key_range(0, i);
        let logits: Vec<f64> = (lo..hi)
            .map(|j| {
                let dot: f64 = (0..8)
                    .map(|c| q[[0, 0, i, c]] as f64 * k[[0, 0, j, c]] as f64)
                    .sum();
                0.4 * dot + 0.3 * j as f64
            })
            .collect();
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = logits.iter().map(|l| (l - m).exp()).sum();
        let fa2_lse = m + z.ln();
        for c in 0..8 {
            let o: f64 = (lo..hi)
                .map(|j| (logits[j - lo] - m).exp() / z * v[[0, 0, j, c]] as f64)
                .sum();
            assert!((o - ours.o_row(i)[c]).abs() < 1e-12);
        }
        let shift = 0.3 * (i + 8 - 5) as f64;
        assert!((fa2_lse - shift - ours.lse(i)).abs() < 1e-12);
    }
}

#[test]
fn paged_gather_and_append_rebuild_the_sequence() {
    let (blocks, bs, h, d) = (6, 4, 2, 3);
    let cache = random([blocks, bs, h, d], 13);
    let table = [4, 1, 5];
    let got = gather_paged(cache.view(), &table, 10);
    assert_eq!(got.dim(), (h, 10, d));
    for j in 0..10 {
        let want = cache.slice(s![table[j / bs] as usize, j % bs, .., ..]);
        assert_eq!(got.slice(s![.., j, ..]), want);
    }
    let new = Array3::from_shape_fn((h, 2, d), |(a, b, c)| (a * 100 + b * 10 + c) as f32);
    let all = append_rows(got.view(), new.view());
    assert_eq!(all.dim(), (h, 12, d));
    assert_eq!(all.slice(s![.., ..10, ..]), got);
    assert_eq!(all.slice(s![.., 10.., ..]), new);
}

#[test]
#[should_panic(expected = "block_table entry 1 is 9")]
fn a_bad_block_id_is_named() {
    let cache = random([4, 4, 1, 2], 14);
    gather_paged(cache.view(), &[0, 9], 6);
}
