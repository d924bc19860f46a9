//! The one tolerance rule every kernel generation is judged by.

use ndarray::{ArrayView3, ArrayView4};

use crate::problem::{OracleProblem, Precision, Rows};
use crate::reference::{reference_f64, reference_low_precision, Reference};

/// How much worse than a plain low-precision implementation a kernel may be: FlashAttention's
/// tests use `max|out - ref| <= 2 · max|out_pt - ref| + atol`.
pub const LOW_PRECISION_FACTOR: f64 = 2.0;

/// Absolute floor for f16. FlashAttention-3 adds `fwd_atol = 2·max|(x + 0.3 - 0.3) - x|`: adding
/// 0.3 rounds x to the dtype's grid at 0.3, an error of at most half an ulp there, and twice that
/// is one ulp at 0.3. 0.3 lies in [2^-2, 2^-1) and f16 keeps 10 fraction bits, so the ulp is
/// 2^-2 · 2^-10 = 2^-12 ≈ 2.44e-4. It keeps the rule from demanding better than the dtype can
/// express when the low-precision reference happens to be (nearly) exact, e.g. tiny problems.
pub const F16_ABS_FLOOR: f64 = 1.0 / 4096.0;

/// Absolute floor for bf16: as [`F16_ABS_FLOOR`] with 7 fraction bits, 2^-2 · 2^-7 = 2^-9 ≈ 1.95e-3.
pub const BF16_ABS_FLOOR: f64 = 1.0 / 512.0;

/// The outcome of judging one kernel output.
///
/// Errors are max absolute differences against the f64 reference over the judged rows, ignoring
/// elements counted in `unwritten_or_nan`, `nan_mismatch` or `empty_mismatch`.
/// `*_allowed = LOW_PRECISION_FACTOR · *_low_precision_err + precision.abs_floor()`.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub pass: bool,
    pub o_max_err: f64,
    pub o_low_precision_err: f64,
    pub o_allowed: f64,
    pub lse_max_err: f64,
    pub lse_low_precision_err: f64,
    pub lse_allowed: f64,
    /// `max(o_max_err / o_allowed, lse_max_err / lse_allowed)`: how close to the limit the kernel
    /// runs (pass needs <= 1). Does not include the counted mismatches below.
    pub ratio: f64,
    /// Kernel NaN where the reference is not NaN (also catches outputs never written, since the
    /// harness poisons outputs with NaN before launch).
    pub unwritten_or_nan: usize,
    /// Reference NaN where the kernel is not NaN.
    pub nan_mismatch: usize,
    /// Rows that see no key where the kernel's O is not exactly 0 (either sign) or its LSE not
    /// exactly +inf.
    pub empty_mismatch: usize,
    /// Number of rows judged.
    pub rows_checked: usize,
    /// Where it is worst: `(batch, head_q, query_row, col)`; `col < d` is `O[b, h, r, col]`,
    /// `col == d` is `LSE[b, h, r]`, with `d` O's head dim (V's). The first counted mismatch if there is one, else the
    /// element with the largest err/allowed. `None` when nothing was judged.
    pub worst: Option<(usize, usize, usize, usize)>,
    /// One line: why it failed, or the summary.
    pub message: String,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Max |a - b| over elements where both are finite (a low-precision reference that overflowed
/// says nothing about the error scale, so it must not open the tolerance up to infinity).
fn finite_max_diff(a: impl Iterator<Item = f64>, b: impl Iterator<Item = f64>) -> f64 {
    a.zip(b)
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// `dv`: O's head dim (V's), the column that names the LSE.
fn loc_name(dv: usize, (b, h, r, c): (usize, usize, usize, usize)) -> String {
    if c == dv {
        format!("LSE[{b},{h},{r}]")
    } else {
        format!("O[{b},{h},{r},{c}]")
    }
}

/// Judges a kernel's outputs against the references, with the one rule for every generation:
///
/// `max|kernel - f64| <= 2 · max|low_precision - f64| + floor(precision)`, separately for O
/// and for LSE, over the rows in `rows`; plus exact agreement where the f64 reference has no
/// tolerance to give: rows with no visible key must have O exactly 0 and LSE exactly +inf;
/// kernel NaN where the reference is not NaN fails (`unwritten_or_nan`); reference NaN where the
/// kernel is not NaN fails (`nan_mismatch`); both NaN is agreement. An infinite kernel value
/// where the reference differs is an infinite error.
///
/// `o` and `lse` are the kernel outputs converted to f32 in full logical shape
/// (`[b, hq, sq, d_v]` and `[b, hq, sq]`, LSE in natural log; `d_v` is V's head dim, the
/// references' [`Reference::head_dim`]); only rows in `rows` are read.
/// `reference` and `low_precision` must have been computed for the same `rows`. Panics on
/// shape or row mismatch.
pub fn judge(
    p: &OracleProblem,
    precision: Precision,
    o: ArrayView4<f32>,
    lse: ArrayView3<f32>,
    rows: &Rows,
    reference: &Reference,
    low_precision: &Reference,
) -> Verdict {
    let d = reference.head_dim();
    assert_eq!(
        o.shape(),
        [p.batch, p.heads_q, p.seq_q, d],
        "kernel O shape"
    );
    assert_eq!(
        lse.shape(),
        [p.batch, p.heads_q, p.seq_q],
        "kernel LSE shape"
    );
    let list = rows.expand(p);
    assert!(
        reference.rows() == list.as_slice() && low_precision.rows() == list.as_slice(),
        "references were computed for other rows"
    );
    assert!(reference.head_dim() == d && low_precision.head_dim() == d);

    let o_lp = finite_max_diff(
        low_precision.o().iter().copied(),
        reference.o().iter().copied(),
    );
    let lse_lp = finite_max_diff(
        low_precision.lse_all().iter().copied(),
        reference.lse_all().iter().copied(),
    );
    let floor = precision.abs_floor();
    let o_allowed = LOW_PRECISION_FACTOR * o_lp + floor;
    let lse_allowed = LOW_PRECISION_FACTOR * lse_lp + floor;

    let mut unwritten = (0usize, None);
    let mut nan_mm = (0usize, None);
    let mut empty_mm = (0usize, None);
    let mut o_err = 0.0f64;
    let mut lse_err = 0.0f64;
    let mut worst_ratio = -1.0f64;
    let mut worst_ok = None;

    let count = |c: &mut (usize, Option<_>), at| {
        c.0 += 1;
        c.1.get_or_insert(at);
    };

    for (i, &(b, h, r)) in list.iter().enumerate() {
        let empty = p.visible_keys(b, r) == 0;
        let kernel_row = o.slice(ndarray::s![b, h, r, ..]);
        let pairs = kernel_row
            .iter()
            .map(|&x| x as f64)
            .zip(reference.o_row(i).iter().copied())
            .enumerate()
            .map(|(c, (k, rf))| (c, k, rf, o_allowed, false))
            .chain(std::iter::once((
                d,
                lse[[b, h, r]] as f64,
                reference.lse(i),
                lse_allowed,
                true,
            )));
        for (c, kv, rv, allowed, is_lse) in pairs {
            let at = (b, h, r, c);
            if rv.is_nan() {
                if !kv.is_nan() {
                    count(&mut nan_mm, at);
                }
                continue;
            }
            if kv.is_nan() {
                count(&mut unwritten, at);
                continue;
            }
            if empty {
                let exact = if is_lse {
                    kv == f64::INFINITY
                } else {
                    kv == 0.0
                };
                if !exact {
                    count(&mut empty_mm, at);
                }
                continue;
            }
            // Equal infinities are agreement; any other mix with an infinity is an infinite error.
            let err = if kv == rv { 0.0 } else { (kv - rv).abs() };
            if is_lse {
                lse_err = lse_err.max(err);
            } else {
                o_err = o_err.max(err);
            }
            let ratio = err / allowed;
            if ratio > worst_ratio {
                worst_ratio = ratio;
                worst_ok = Some(at);
            }
        }
    }

    let ratio = (o_err / o_allowed).max(lse_err / lse_allowed);
    let within = o_err <= o_allowed && lse_err <= lse_allowed;
    let pass = within && unwritten.0 == 0 && nan_mm.0 == 0 && empty_mm.0 == 0;
    let worst = unwritten.1.or(nan_mm.1).or(empty_mm.1).or(worst_ok);

    let summary = format!(
        "O err {o_err:.3e} / allowed {o_allowed:.3e} (low-precision {o_lp:.3e}), \
         LSE err {lse_err:.3e} / allowed {lse_allowed:.3e} (low-precision {lse_lp:.3e}), \
         ratio {ratio:.3} over {} rows ({precision})",
        list.len()
    );
    let message = if pass {
        format!("pass: {summary}")
    } else {
        let mut why = Vec::new();
        if let (n @ 1.., Some(at)) = unwritten {
            why.push(format!(
                "{n} kernel NaN where the reference is finite (unwritten or NaN), first {}",
                loc_name(d, at)
            ));
        }
        if let (n @ 1.., Some(at)) = nan_mm {
            why.push(format!(
                "{n} finite kernel values where the reference is NaN, first {}",
                loc_name(d, at)
            ));
        }
        if let (n @ 1.., Some(at)) = empty_mm {
            why.push(format!(
                "{n} values in rows with no visible key that are not O = 0 / LSE = +inf, first {}",
                loc_name(d, at)
            ));
        }
        if !within {
            let at = worst_ok.map(|a| loc_name(d, a)).unwrap_or_default();
            why.push(format!("error over the limit, worst at {at}"));
        }
        format!("FAIL: {}; {summary}", why.join("; "))
    };

    Verdict {
        pass,
        o_max_err: o_err,
        o_low_precision_err: o_lp,
        o_allowed,
        lse_max_err: lse_err,
        lse_low_precision_err: lse_lp,
        lse_allowed,
        ratio,
        unwritten_or_nan: unwritten.0,
        nan_mismatch: nan_mm.0,
        empty_mismatch: empty_mm.0,
        rows_checked: list.len(),
        worst,
        message,
    }
}

/// Computes both references for `rows` and judges the kernel outputs `o`, `lse` with [`judge`].
#[allow(clippy::too_many_arguments)]
pub fn check(
    p: &OracleProblem,
    precision: Precision,
    q: ArrayView4<f32>,
    k: ArrayView4<f32>,
    v: ArrayView4<f32>,
    o: ArrayView4<f32>,
    lse: ArrayView3<f32>,
    rows: &Rows,
) -> Verdict {
    let reference = reference_f64(p, q.view(), k.view(), v.view(), rows);
    let low = reference_low_precision(p, precision, q, k, v, rows);
    judge(p, precision, o, lse, rows, &reference, &low)
}
