//! Gradients of attention (`docs/ORACLE.md`, "The backward pass"): dQ, dK and dV in f64 by the
//! analytic formulas, the same computed the way PyTorch's math path does in fp16/bf16, and the
//! tolerance rule applied to each of the three.
//!
//! With `P = softmax(S)`, `S = scale · Q Kᵀ` over the visible keys and `dO` the gradient of the
//! output, per (batch, query head):
//!
//! ```text
//! dV = Pᵀ dO      dP = dO Vᵀ      D_i = rowsum(dO ∘ O)_i      dS = P ∘ (dP − D)
//! dQ = scale · dS K                dK = scale · dSᵀ Q
//! ```
//!
//! With softcap (`s' = c·tanh(s/c)` of the scaled score) dS is multiplied by `1 − tanh²(s/c)`
//! before the last two products; windows and ALiBi change only which keys a row sees and the
//! logits, as in the forward.
//!
//! V (and so O, dO and dV) may have a head dim of its own (`head_dim_v`, DeepSeek's 192 / 128):
//! it is taken from V's shape, and dQ, dK keep Q's and K's.
//!
//! With GQA, dK and dV of a kv head are the sums over the query heads of its group. Masked keys
//! have `P = 0`, so a row that sees no key contributes nothing, and a key no row sees gets
//! `dK = dV = 0` exactly.

use ndarray::{s, Array2, Array4, ArrayView4, LinalgScalar};

use crate::judge::LOW_PRECISION_FACTOR;
use crate::problem::{OracleProblem, Precision};

/// dQ `[batch, heads_q, seq_q, head_dim]`, dK and dV `[batch, heads_kv, seq_k, head_dim]`, in
/// logical order.
#[derive(Clone, Debug, PartialEq)]
pub struct Gradients {
    pub dq: Array4<f64>,
    pub dk: Array4<f64>,
    pub dv: Array4<f64>,
}

impl Gradients {
    /// The three tensors with their names, in the order dQ, dK, dV.
    pub fn named(&self) -> [(&'static str, &Array4<f64>); 3] {
        [("dQ", &self.dq), ("dK", &self.dk), ("dV", &self.dv)]
    }
}

/// Float type of one reference's arithmetic.
trait Num: LinalgScalar + Send + Sync + PartialOrd + std::fmt::Debug {
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn exp(self) -> Self;
    fn neg_inf() -> Self;
    fn is_nan(self) -> bool;
    fn tanh(self) -> Self;
}

impl Num for f64 {
    fn from_f64(x: f64) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn exp(self) -> Self {
        f64::exp(self)
    }
    fn neg_inf() -> Self {
        f64::NEG_INFINITY
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    fn tanh(self) -> Self {
        f64::tanh(self)
    }
}

impl Num for f32 {
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn exp(self) -> Self {
        f32::exp(self)
    }
    fn neg_inf() -> Self {
        f32::NEG_INFINITY
    }
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    fn tanh(self) -> Self {
        f32::tanh(self)
    }
}

/// The gradients in f64 from the given f32 values (already representable in the kernel dtype),
/// by the analytic formulas above. `d_o` is `[batch, heads_q, seq_q, head_dim]`. Windows (and
/// causal) are taken through the problem's key ranges and ALiBi through the same bias as the
/// forward (the slopes are constants, not differentiated); with softcap, `s' = c·tanh(s / c)` of
/// the scaled score, dS is carried through the tanh: `dS_s = dS_{s'} ∘ (1 − tanh²(s / c))`
/// before dQ and dK. Inputs are expected finite: masked keys are weighted by an exact 0 inside the products, so a NaN in
/// a masked K/V row would reach the gradients (unlike the forward reference). Panics on shape
/// mismatch.
pub fn gradients_f64(
    p: &OracleProblem,
    q: ArrayView4<f32>,
    k: ArrayView4<f32>,
    v: ArrayView4<f32>,
    d_o: ArrayView4<f32>,
) -> Gradients {
    run(p, q, k, v, d_o, &|x: f64| x, false)
}

/// The gradients a plain PyTorch fp16/bf16 program gets by autograd through the forward of
/// [`crate::reference_low_precision`] (FlashAttention's `attention_ref` without upcast): every
/// matmul accumulates in f32 and every op's result is rounded to `precision`:
///
/// * forward: `S = round(acc(q·k) · scale)` (softcap's `c·tanh(s/c)` and minus the ALiBi bias
///   before that one rounding, as [`crate::reference_low_precision`]), `P = round(softmax_f32(S))`;
/// * `dV_h = round(acc(Pᵀ dO))`, `dP = round(acc(dO Vᵀ))`;
/// * `dS = round(P ∘ (dP − rowsum(P ∘ dP)))` in f32 (torch's softmax backward, which uses
///   `rowsum(P ∘ dP)`, equal to `D` in exact arithmetic); with softcap then
///   `dS = round(dS ∘ (1 − t²))`, `t = tanh(s/c)` in f32 (tanh's backward, one op);
/// * `dQ = round(acc(dS K) · scale)`, `dK_h = round(acc(dSᵀ Q) · scale)`;
/// * with GQA (K/V repeated over the group, as `attention_ref` does), `dK = round(Σ_h dK_h)` and
///   `dV = round(Σ_h dV_h)` summed in f32.
pub fn gradients_low_precision(
    p: &OracleProblem,
    precision: Precision,
    q: ArrayView4<f32>,
    k: ArrayView4<f32>,
    v: ArrayView4<f32>,
    d_o: ArrayView4<f32>,
) -> Gradients {
    run(p, q, k, v, d_o, &|x: f32| precision.round(x), true)
}

fn check_shapes(
    p: &OracleProblem,
    q: &ArrayView4<f32>,
    k: &ArrayView4<f32>,
    v: &ArrayView4<f32>,
    d_o: &ArrayView4<f32>,
) {
    p.group_size();
    let qs = [p.batch, p.heads_q, p.seq_q, p.head_dim];
    let ks = [p.batch, p.heads_kv, p.seq_k, p.head_dim];
    let dv = v.shape()[3];
    assert_eq!(q.shape(), qs, "Q must be [batch, heads_q, seq_q, head_dim]");
    assert_eq!(
        d_o.shape(),
        [p.batch, p.heads_q, p.seq_q, dv],
        "dO must be [batch, heads_q, seq_q, head_dim_v]"
    );
    assert_eq!(
        k.shape(),
        ks,
        "K must be [batch, heads_kv, seq_k, head_dim]"
    );
    assert_eq!(
        v.shape()[..3],
        ks[..3],
        "V must be [batch, heads_kv, seq_k, head_dim_v]"
    );
}

/// One (batch, kv head): dQ of its query heads, dK and dV.
struct TaskOut<T> {
    b: usize,
    kvh: usize,
    dq: Vec<Array2<T>>,
    dk: Array2<T>,
    dv: Array2<T>,
}

fn run<T: Num>(
    p: &OracleProblem,
    q: ArrayView4<f32>,
    k: ArrayView4<f32>,
    v: ArrayView4<f32>,
    d_o: ArrayView4<f32>,
    round: &(dyn Fn(T) -> T + Sync),
    low: bool,
) -> Gradients {
    check_shapes(p, &q, &k, &v, &d_o);
    let tasks: Vec<(usize, usize)> = (0..p.batch)
        .flat_map(|b| (0..p.heads_kv).map(move |h| (b, h)))
        .collect();
    let do_task = |&(b, kvh): &(usize, usize)| -> TaskOut<T> {
        let (dq, dk, dv) = group(p, &q, &k, &v, &d_o, b, kvh, round, low);
        TaskOut { b, kvh, dq, dk, dv }
    };
    let work = p.batch * p.heads_q * p.seq_q * p.seq_k * p.head_dim.max(1);
    let outs: Vec<TaskOut<T>> = crate::parallel::map_tasks(&tasks, work >= (1 << 20), do_task);
    let (d, dv) = (p.head_dim, v.shape()[3]);
    let mut g = Gradients {
        dq: Array4::zeros((p.batch, p.heads_q, p.seq_q, d)),
        dk: Array4::zeros((p.batch, p.heads_kv, p.seq_k, d)),
        dv: Array4::zeros((p.batch, p.heads_kv, p.seq_k, dv)),
    };
    let group_size = p.group_size();
    for t in outs {
        for (n, dq) in t.dq.iter().enumerate() {
            g.dq.slice_mut(s![t.b, t.kvh * group_size + n, .., ..])
                .assign(&dq.mapv(T::to_f64));
        }
        g.dk.slice_mut(s![t.b, t.kvh, .., ..])
            .assign(&t.dk.mapv(T::to_f64));
        g.dv.slice_mut(s![t.b, t.kvh, .., ..])
            .assign(&t.dv.mapv(T::to_f64));
    }
    g
}

/// The gradients of one (batch, kv head) and its group of query heads.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn group<T: Num>(
    p: &OracleProblem,
    q: &ArrayView4<f32>,
    k: &ArrayView4<f32>,
    v: &ArrayView4<f32>,
    d_o: &ArrayView4<f32>,
    b: usize,
    kvh: usize,
    round: &(dyn Fn(T) -> T + Sync),
    low: bool,
) -> (Vec<Array2<T>>, Array2<T>, Array2<T>) {
    let (sq, sk, d, dv) = (p.seq_q, p.seq_k, p.head_dim, v.shape()[3]);
    let load = |a: ndarray::ArrayView2<f32>| a.mapv(|x| round(T::from_f64(x as f64)));
    let kk = load(k.slice(s![b, kvh, .., ..]));
    let vv = load(v.slice(s![b, kvh, .., ..]));
    let scale = T::from_f64(p.scale);
    let softcap = p.softcap.map(T::from_f64);
    let g = p.group_size();
    let mut dq_out = Vec::with_capacity(g);
    // Per-head dK/dV (rounded per op in the low-precision program), summed over the group.
    let mut dk_sum = Array2::<T>::zeros((sk, d));
    let mut dv_sum = Array2::<T>::zeros((sk, dv));
    for h in kvh * g..(kvh + 1) * g {
        let qq = load(q.slice(s![b, h, .., ..]));
        let dout = load(d_o.slice(s![b, h, .., ..]));
        // S then P, row by row over the visible keys; masked entries are exactly 0. With
        // softcap, `dtanh` keeps ∂s'/∂s = 1 − tanh²(s / softcap) of each visible entry.
        let raw = qq.dot(&kk.t());
        let mut pm = Array2::<T>::zeros((sq, sk));
        let mut dtanh = softcap.map(|_| Array2::<T>::zeros((sq, sk)));
        let slope = p.slope(b, h);
        for i in 0..sq {
            let (lo, hi) = p.key_range(b, i);
            if lo == hi {
                continue;
            }
            let diag = i as f64 + sk as f64 - sq as f64;
            let mut row: Vec<T> = (lo..hi)
                .map(|j| {
                    let bias = if slope == 0.0 {
                        0.0
                    } else {
                        slope * (diag - j as f64).abs()
                    };
                    let s = raw[[i, j]] * scale;
                    let s = match (softcap, dtanh.as_mut()) {
                        (Some(c), Some(dt)) => {
                            let t = (s / c).tanh();
                            dt[[i, j]] = T::one() - t * t;
                            c * t
                        }
                        _ => s,
                    };
                    round(s - T::from_f64(bias))
                })
                .collect();
            let mut m = T::neg_inf();
            for &x in &row {
                if x > m || x.is_nan() {
                    m = x;
                }
            }
            let mut sum = T::zero();
            for x in row.iter_mut() {
                *x = (*x - m).exp();
                sum = sum + *x;
            }
            for (j, x) in (lo..hi).zip(row) {
                pm[[i, j]] = round(x / sum);
            }
        }
        let dv_h = pm.t().dot(&dout).mapv(round);
        let dp = dout.dot(&vv.t()).mapv(round);
        // D: rowsum(dO ∘ O) in f64 (the kernels' preprocessing); rowsum(P ∘ dP) in the
        // low-precision program (torch's softmax backward).
        let dvec: Vec<T> = if low {
            (0..sq)
                .map(|i| (0..sk).fold(T::zero(), |a, j| a + pm[[i, j]] * dp[[i, j]]))
                .collect()
        } else {
            let o = pm.dot(&vv);
            (0..sq)
                .map(|i| (0..dv).fold(T::zero(), |a, c| a + dout[[i, c]] * o[[i, c]]))
                .collect()
        };
        // dS with respect to the logit, then through softcap to the scaled score s (one more
        // op, so one more rounding in the low-precision program).
        let mut ds = Array2::<T>::zeros((sq, sk));
        for i in 0..sq {
            let (lo, hi) = p.key_range(b, i);
            for j in lo..hi {
                let d = round(pm[[i, j]] * (dp[[i, j]] - dvec[i]));
                ds[[i, j]] = match &dtanh {
                    Some(dt) => round(d * dt[[i, j]]),
                    None => d,
                };
            }
        }
        let dq_h = ds.dot(&kk).mapv(|x| round(x * scale));
        let dk_h = ds.t().dot(&qq).mapv(|x| round(x * scale));
        dk_sum = dk_sum + dk_h;
        dv_sum = dv_sum + dv_h;
        dq_out.push(dq_h);
    }
    (dq_out, dk_sum.mapv(round), dv_sum.mapv(round))
}

/// The absolute floor of the backward rule for one tensor: FlashAttention-3's
/// `2·max|(x + 0.3 − 0.3) − x|` over the f64 reference gradient, i.e. one ulp of the dtype at
/// `max|x| + 0.3`, never below the forward floor ([`Precision::abs_floor`], one ulp at 0.3).
pub fn backward_floor(precision: Precision, reference: &Array4<f64>) -> f64 {
    let max = reference
        .iter()
        .filter(|x| x.is_finite())
        .fold(0.0f64, |m, x| m.max(x.abs()));
    let fraction_bits = match precision {
        Precision::F16 => 10,
        Precision::Bf16 => 7,
    };
    let ulp = 2f64.powi((max + 0.3).log2().floor() as i32 - fraction_bits);
    ulp.max(precision.abs_floor())
}

/// The judgement of one gradient tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorVerdict {
    pub name: &'static str,
    pub max_err: f64,
    pub low_precision_err: f64,
    pub floor: f64,
    /// `LOW_PRECISION_FACTOR · low_precision_err + floor`.
    pub allowed: f64,
}

/// The outcome of judging dQ, dK and dV.
#[derive(Clone, Debug, PartialEq)]
pub struct BackwardVerdict {
    pub pass: bool,
    /// dQ, dK, dV in that order.
    pub tensors: [TensorVerdict; 3],
    /// `max(max_err / allowed)` over the three tensors (pass needs <= 1).
    pub ratio: f64,
    /// Kernel NaN where the reference is not NaN (also outputs never written: the harness
    /// poisons them with NaN).
    pub unwritten_or_nan: usize,
    /// Reference NaN where the kernel is not NaN.
    pub nan_mismatch: usize,
    /// Elements that nothing contributes to (a dQ row that sees no key, a dK/dV row no query
    /// row sees) where the kernel is not exactly 0 (either sign).
    pub empty_mismatch: usize,
    /// The first counted mismatch, else the element with the largest err/allowed:
    /// (tensor name, [batch, head, row, col]).
    pub worst: Option<(&'static str, [usize; 4])>,
    pub message: String,
}

impl std::fmt::Display for BackwardVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Judges kernel gradients (f32 in logical order: dQ `[b, hq, sq, d]`, dK and dV
/// `[b, hkv, sk, d]`) against the references, with the one rule applied to each tensor:
///
/// `max|kernel − f64| ≤ 2 · max|low_precision − f64| + floor`, `floor` = [`backward_floor`],
///
/// plus exact rules: elements nothing contributes to must be exactly 0, kernel NaN where the
/// reference is not fails, reference NaN where the kernel is not fails. Panics on shape mismatch.
#[allow(clippy::too_many_arguments)]
pub fn judge_backward(
    p: &OracleProblem,
    precision: Precision,
    dq: ArrayView4<f32>,
    dk: ArrayView4<f32>,
    dv: ArrayView4<f32>,
    reference: &Gradients,
    low_precision: &Gradients,
) -> BackwardVerdict {
    // Which rows receive anything: query rows that see a key, keys some query row sees (the same
    // in every batch entry: the backward takes no mm_prefix ranges).
    assert!(
        p.mm_prefix.is_none(),
        "the backward oracle takes no mm_prefix ranges"
    );
    let row_live: Vec<bool> = (0..p.seq_q).map(|r| p.visible_keys(0, r) > 0).collect();
    let mut key_live = vec![false; p.seq_k];
    for r in 0..p.seq_q {
        let (lo, hi) = p.key_range(0, r);
        key_live[lo..hi].iter_mut().for_each(|x| *x = true);
    }
    let kernels = [dq.view(), dk.view(), dv.view()];
    let mut unwritten = (0usize, None);
    let mut nan_mm = (0usize, None);
    let mut empty_mm = (0usize, None);
    let count = |c: &mut (usize, Option<_>), at| {
        c.0 += 1;
        c.1.get_or_insert(at);
    };
    let mut worst_ratio = -1.0f64;
    let mut worst_ok = None;
    let mut verdicts = Vec::with_capacity(3);
    for (t, ((name, rf), lp)) in reference
        .named()
        .into_iter()
        .zip(low_precision.named().map(|(_, a)| a))
        .enumerate()
    {
        let kernel = &kernels[t];
        assert_eq!(kernel.shape(), rf.shape(), "kernel {name} shape");
        let live: &[bool] = if t == 0 { &row_live } else { &key_live };
        let lp_err = lp
            .iter()
            .zip(rf.iter())
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        let floor = backward_floor(precision, rf);
        let allowed = LOW_PRECISION_FACTOR * lp_err + floor;
        let mut max_err = 0.0f64;
        for ((idx, &kv), &rv) in kernel.indexed_iter().zip(rf.iter()) {
            let at = (name, [idx.0, idx.1, idx.2, idx.3]);
            let kv = kv as f64;
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
            if !live[idx.2] {
                if kv != 0.0 {
                    count(&mut empty_mm, at);
                }
                continue;
            }
            let err = if kv == rv { 0.0 } else { (kv - rv).abs() };
            max_err = max_err.max(err);
            if err / allowed > worst_ratio {
                worst_ratio = err / allowed;
                worst_ok = Some(at);
            }
        }
        verdicts.push(TensorVerdict {
            name,
            max_err,
            low_precision_err: lp_err,
            floor,
            allowed,
        });
    }
    let tensors: [TensorVerdict; 3] = verdicts.try_into().expect("three tensors");
    let ratio = tensors
        .iter()
        .map(|t| t.max_err / t.allowed)
        .fold(0.0, f64::max);
    let within = tensors.iter().all(|t| t.max_err <= t.allowed);
    let pass = within && unwritten.0 == 0 && nan_mm.0 == 0 && empty_mm.0 == 0;
    let worst = unwritten.1.or(nan_mm.1).or(empty_mm.1).or(worst_ok);
    let loc = |(n, [b, h, r, c]): (&str, [usize; 4])| format!("{n}[{b},{h},{r},{c}]");
    let summary = tensors
        .iter()
        .map(|t| {
            format!(
                "{} err {:.3e} / allowed {:.3e} (low-precision {:.3e}, floor {:.2e})",
                t.name, t.max_err, t.allowed, t.low_precision_err, t.floor
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let summary = format!("{summary}, ratio {ratio:.3} ({precision})");
    let message = if pass {
        format!("pass: {summary}")
    } else {
        let mut why = Vec::new();
        if let (n @ 1.., Some(at)) = unwritten {
            why.push(format!(
                "{n} kernel NaN where the reference is finite (unwritten or NaN), first {}",
                loc(at)
            ));
        }
        if let (n @ 1.., Some(at)) = nan_mm {
            why.push(format!(
                "{n} finite kernel values where the reference is NaN, first {}",
                loc(at)
            ));
        }
        if let (n @ 1.., Some(at)) = empty_mm {
            why.push(format!(
                "{n} nonzero values where nothing contributes (no visible key / unseen key), first {}",
                loc(at)
            ));
        }
        if !within {
            why.push(format!(
                "error over the limit, worst at {}",
                worst_ok.map(loc).unwrap_or_default()
            ));
        }
        format!("FAIL: {}; {summary}", why.join("; "))
    };
    BackwardVerdict {
        pass,
        tensors,
        ratio,
        unwritten_or_nan: unwritten.0,
        nan_mismatch: nan_mm.0,
        empty_mismatch: empty_mm.0,
        worst,
        message,
    }
}

/// Computes both references and judges the kernel gradients with [`judge_backward`].
#[allow(clippy::too_many_arguments)]
pub fn check_backward(
    p: &OracleProblem,
    precision: Precision,
    q: ArrayView4<f32>,
    k: ArrayView4<f32>,
    v: ArrayView4<f32>,
    d_o: ArrayView4<f32>,
    dq: ArrayView4<f32>,
    dk: ArrayView4<f32>,
    dv: ArrayView4<f32>,
) -> BackwardVerdict {
    let reference = gradients_f64(p, q.view(), k.view(), v.view(), d_o.view());
    let low = gradients_low_precision(p, precision, q, k, v, d_o);
    judge_backward(p, precision, dq, dk, dv, &reference, &low)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::reference_f64;
    use crate::Rows;
    use rand::{Rng, SeedableRng};

    fn random(shape: [usize; 4], rng: &mut rand::rngs::StdRng, prec: Precision) -> Array4<f32> {
        Array4::from_shape_fn(shape, |_| prec.round(rng.gen_range(-1.5f32..1.5)))
    }

    struct Inputs {
        q: Array4<f32>,
        k: Array4<f32>,
        v: Array4<f32>,
        d_o: Array4<f32>,
    }

    fn inputs(p: &OracleProblem, seed: u64) -> Inputs {
        inputs_with_v_dim(p, p.head_dim, seed)
    }

    /// The f64 gradients and the low-precision yardstick of `inp`.
    fn references(p: &OracleProblem, prec: Precision, inp: &Inputs) -> (Gradients, Gradients) {
        let (q, k, v, d_o) = (inp.q.view(), inp.k.view(), inp.v.view(), inp.d_o.view());
        (
            gradients_f64(p, q, k, v, d_o),
            gradients_low_precision(p, prec, q, k, v, d_o),
        )
    }

    /// Inputs whose V (and dO) have `dv` columns.
    fn inputs_with_v_dim(p: &OracleProblem, dv: usize, seed: u64) -> Inputs {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let qs = [p.batch, p.heads_q, p.seq_q, p.head_dim];
        let ks = [p.batch, p.heads_kv, p.seq_k, p.head_dim];
        let f = Precision::F16;
        Inputs {
            q: random(qs, &mut rng, f),
            k: random(ks, &mut rng, f),
            v: random([p.batch, p.heads_kv, p.seq_k, dv], &mut rng, f),
            d_o: random([p.batch, p.heads_q, p.seq_q, dv], &mut rng, f),
        }
    }

    /// `L = Σ O ∘ dO` from the f64 forward reference, so `∂L/∂x` are the gradients.
    fn loss(
        p: &OracleProblem,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        d_o: &Array4<f32>,
    ) -> f64 {
        let r = reference_f64(p, q.view(), k.view(), v.view(), &Rows::All);
        let (o, _) = r.to_dense(p);
        o.iter().zip(d_o.iter()).map(|(a, &b)| a * b as f64).sum()
    }

    /// Central differences of the f64 forward. The step 2^-10 added to a dtype value is exact
    /// in f32 (inputs have at most 11 significant bits and magnitude < 2), so the difference
    /// quotient divides by the true step; its truncation error is O(step²).
    fn finite_differences(p: &OracleProblem, inp: &Inputs) -> Gradients {
        let h = 1.0f32 / 1024.0;
        let grad = |which: usize| -> Array4<f64> {
            let base = [&inp.q, &inp.k, &inp.v][which];
            let mut out = Array4::<f64>::zeros(base.raw_dim());
            for (idx, _) in base.indexed_iter() {
                let at = |delta: f32| {
                    let mut t = [inp.q.clone(), inp.k.clone(), inp.v.clone()];
                    t[which][idx] += delta;
                    loss(p, &t[0], &t[1], &t[2], &inp.d_o)
                };
                out[idx] = (at(h) - at(-h)) / (2.0 * h as f64);
            }
            out
        };
        Gradients {
            dq: grad(0),
            dk: grad(1),
            dv: grad(2),
        }
    }

    fn configs() -> Vec<OracleProblem> {
        vec![
            OracleProblem::dense(1, 2, 2, 4, 5, 3, false, 0.7),
            OracleProblem::dense(2, 2, 1, 5, 3, 2, true, 1.1), // causal, seq_q > seq_k: empty rows
            OracleProblem::dense(1, 4, 2, 3, 6, 3, true, -0.6), // causal, GQA, negative scale
            OracleProblem::dense(1, 3, 1, 4, 4, 4, true, 0.5), // MQA, square causal
            OracleProblem::dense(1, 2, 2, 1, 7, 2, false, 2.0), // a single query row
        ]
    }

    /// Windows, softcap and ALiBi on small problems (`docs/MODES.md`): each window side alone
    /// and both, causal with a left window, windows that leave rows no key (seq_q > seq_k) and
    /// keys no row sees, softcap small enough that tanh bends (c = 1, 0.7) and large, ALiBi per
    /// head and per (batch, head), all of them together with GQA.
    fn mode_configs() -> Vec<OracleProblem> {
        let base = OracleProblem::dense;
        let with = |mut p: OracleProblem, f: &dyn Fn(&mut OracleProblem)| {
            f(&mut p);
            p
        };
        let slopes = |p: &OracleProblem, per_batch: bool| -> Vec<f64> {
            (0..p.batch * p.heads_q)
                .map(|i| {
                    let h = if per_batch { i } else { i % p.heads_q };
                    0.5f64.powi(h as i32 + 1)
                })
                .collect()
        };
        vec![
            with(base(1, 2, 2, 6, 7, 3, false, 0.7), &|p| {
                p.window_left = Some(1)
            }),
            with(base(1, 2, 1, 5, 6, 3, false, 0.9), &|p| {
                p.window_right = Some(0)
            }),
            with(base(2, 2, 2, 7, 5, 2, false, -0.8), &|p| {
                p.window_left = Some(1);
                p.window_right = Some(2);
            }),
            // seq_q > seq_k: the first rows see no key; wl = 0 leaves each row its diagonal.
            with(base(1, 2, 2, 6, 3, 3, true, 1.2), &|p| {
                p.window_left = Some(0)
            }),
            // seq_q < seq_k: bottom-right aligned, keys left of every window are unseen.
            with(base(1, 2, 2, 3, 8, 2, true, 0.6), &|p| {
                p.window_left = Some(2)
            }),
            with(base(1, 2, 2, 4, 5, 3, false, 2.0), &|p| {
                p.softcap = Some(1.0)
            }),
            with(base(1, 2, 1, 5, 4, 3, true, 1.5), &|p| {
                p.softcap = Some(0.7)
            }),
            with(base(1, 1, 1, 4, 6, 4, false, 0.5), &|p| {
                p.softcap = Some(30.0)
            }),
            with(base(2, 2, 2, 4, 6, 3, false, 0.8), &|p| {
                p.alibi_slopes = Some(slopes(p, false))
            }),
            with(base(2, 4, 2, 5, 5, 2, true, 0.8), &|p| {
                p.alibi_slopes = Some(slopes(p, true))
            }),
            with(base(2, 4, 2, 6, 7, 3, true, 0.9), &|p| {
                p.window_left = Some(2);
                p.softcap = Some(1.5);
                p.alibi_slopes = Some(slopes(p, true));
            }),
            with(base(1, 3, 1, 5, 9, 2, false, -0.7), &|p| {
                p.window_left = Some(3);
                p.window_right = Some(1);
                p.softcap = Some(2.0);
                p.alibi_slopes = Some(slopes(p, false));
            }),
        ]
    }

    /// The largest |analytic − finite difference| over the three gradients must stay within
    /// 2e-5 of the largest gradient.
    fn assert_matches_finite_differences(n: usize, p: &OracleProblem) {
        assert_matches_finite_differences_with(n, p, &inputs(p, 100 + n as u64));
    }

    fn assert_matches_finite_differences_with(n: usize, p: &OracleProblem, inp: &Inputs) {
        let g = gradients_f64(p, inp.q.view(), inp.k.view(), inp.v.view(), inp.d_o.view());
        let fd = finite_differences(p, inp);
        for ((name, a), (_, f)) in g.named().into_iter().zip(fd.named()) {
            let scale = f.iter().fold(1.0f64, |m, x| m.max(x.abs()));
            let err = a
                .iter()
                .zip(f.iter())
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f64::max);
            assert!(
                err <= 2e-5 * scale,
                "config {n} {p:?}: {name} differs from finite differences by {err:e}"
            );
        }
    }

    /// V of a head dim of its own (`head_dim_v`: DeepSeek's 192 / 128, here 3 / 2 and 2 / 5):
    /// dV and dO take V's, dQ and dK Q's, dense and with every mode; and the rule judges them.
    #[test]
    fn a_v_head_dim_of_its_own_matches_finite_differences_and_the_rule() {
        let mut windowed = OracleProblem::dense(2, 4, 2, 6, 7, 2, false, 0.8);
        windowed.window_left = Some(2);
        windowed.window_right = Some(1);
        windowed.softcap = Some(1.0);
        windowed.alibi_slopes = Some((0..8).map(|i| 0.5f64.powi(i + 1)).collect());
        for (n, (p, dv)) in [
            (OracleProblem::dense(1, 2, 1, 4, 5, 3, true, 0.7), 2),
            (windowed, 5),
        ]
        .iter()
        .enumerate()
        {
            let inp = inputs_with_v_dim(p, *dv, 300 + n as u64);
            assert_matches_finite_differences_with(n, p, &inp);
            let prec = Precision::Bf16;
            let (g, lp) = references(p, prec, &inp);
            assert_eq!(g.dv.shape()[3], *dv);
            assert_eq!(g.dq.shape()[3], p.head_dim);
            let [a, b, c] = [&g.dq, &g.dk, &g.dv].map(|a| a.mapv(|x| prec.round(x as f32)));
            let v = judge_backward(p, prec, a.view(), b.view(), c.view(), &g, &lp);
            assert!(v.pass, "config {n}: {v}");
        }
    }

    #[test]
    fn analytic_gradients_match_finite_differences() {
        for (n, p) in configs().iter().enumerate() {
            assert_matches_finite_differences(n, p);
        }
    }

    #[test]
    fn analytic_gradients_match_finite_differences_with_modes() {
        for (n, p) in mode_configs().iter().enumerate() {
            assert_matches_finite_differences(n, p);
        }
    }

    /// The mode configurations change the gradients (so the test above would see a mode the
    /// gradients leave out), and a gradient that drops softcap's derivative, or ALiBi's bias,
    /// is caught by finite differences.
    #[test]
    fn finite_differences_catch_a_missing_softcap_derivative_or_bias() {
        for (n, p) in mode_configs().iter().enumerate() {
            let inp = inputs(p, 100 + n as u64);
            let dense = OracleProblem {
                window_left: None,
                window_right: None,
                softcap: None,
                alibi_slopes: None,
                ..p.clone()
            };
            let g = gradients_f64(p, inp.q.view(), inp.k.view(), inp.v.view(), inp.d_o.view());
            let d = gradients_f64(
                &dense,
                inp.q.view(),
                inp.k.view(),
                inp.v.view(),
                inp.d_o.view(),
            );
            // Ten times the finite-difference test's tolerance (2e-5 of gradients near 1).
            let scale = g.dq.iter().fold(1.0f64, |m, x| m.max(x.abs()));
            let diff = (&g.dq - &d.dq).iter().fold(0.0f64, |m, x| m.max(x.abs()));
            assert!(
                diff > 2e-4 * scale,
                "config {n}: the modes do not change dQ ({diff:e})"
            );
        }
        // Softcap: the analytic gradient of the problem without it (wrong derivative, and
        // wrong P) is far from the finite differences of the problem with it.
        let p = mode_configs().swap_remove(5);
        assert!(p.softcap.is_some());
        let inp = inputs(&p, 7);
        let fd = finite_differences(&p, &inp);
        let wrong = OracleProblem {
            softcap: None,
            ..p.clone()
        };
        let g = gradients_f64(
            &wrong,
            inp.q.view(),
            inp.k.view(),
            inp.v.view(),
            inp.d_o.view(),
        );
        let err = (&g.dq - &fd.dq).iter().fold(0.0f64, |m, x| m.max(x.abs()));
        assert!(err > 1e-2, "{err:e}");
    }

    #[test]
    fn rows_and_keys_nothing_reaches_are_exactly_zero() {
        // Causal, seq_q 5 > seq_k 3: rows 0 and 1 see no key.
        let p = OracleProblem::dense(1, 2, 2, 5, 3, 4, true, 0.5);
        let inp = inputs(&p, 7);
        for g in [
            gradients_f64(&p, inp.q.view(), inp.k.view(), inp.v.view(), inp.d_o.view()),
            gradients_low_precision(
                &p,
                Precision::Bf16,
                inp.q.view(),
                inp.k.view(),
                inp.v.view(),
                inp.d_o.view(),
            ),
        ] {
            assert!(g.dq.slice(s![.., .., 0..2, ..]).iter().all(|&x| x == 0.0));
            assert!(g.dq.slice(s![.., .., 2.., ..]).iter().any(|&x| x != 0.0));
        }
        // seq_k 0: nothing at all.
        let p0 = OracleProblem::dense(1, 1, 1, 3, 0, 2, false, 1.0);
        let inp = inputs(&p0, 1);
        let g = gradients_f64(
            &p0,
            inp.q.view(),
            inp.k.view(),
            inp.v.view(),
            inp.d_o.view(),
        );
        assert!(g.dq.iter().all(|&x| x == 0.0) && g.dk.is_empty());
        // Causal seq_q 2 < seq_k 5 never leaves a key unseen (the last row sees all).
        let p = OracleProblem::dense(1, 1, 1, 2, 5, 2, true, 1.0);
        let inp = inputs(&p, 2);
        let g = gradients_f64(&p, inp.q.view(), inp.k.view(), inp.v.view(), inp.d_o.view());
        assert!(g.dv.slice(s![0, 0, 4, ..]).iter().any(|&x| x != 0.0));
        // A window, softcap and ALiBi: rows left no key (seq_q 6 > seq_k 3 under causal) and keys
        // left of every row's window (wl = 1, seq_k 8 > seq_q 3: rows see keys 4-5, 5-6, 6-7)
        // get exact zeros in both references.
        for (p, rows, keys) in [
            (
                OracleProblem::dense(1, 2, 1, 6, 3, 3, true, 0.9),
                0..3,
                0..0,
            ),
            (
                OracleProblem::dense(1, 2, 1, 3, 8, 3, true, 0.9),
                0..0,
                0..4,
            ),
        ] {
            let p = OracleProblem {
                window_left: Some(1),
                softcap: Some(2.0),
                alibi_slopes: Some(vec![0.25, 0.5]),
                ..p
            };
            let inp = inputs(&p, 5);
            for g in [
                gradients_f64(&p, inp.q.view(), inp.k.view(), inp.v.view(), inp.d_o.view()),
                gradients_low_precision(
                    &p,
                    Precision::F16,
                    inp.q.view(),
                    inp.k.view(),
                    inp.v.view(),
                    inp.d_o.view(),
                ),
            ] {
                let dq_rows = g.dq.slice(s![.., .., rows.clone(), ..]);
                assert!(dq_rows.iter().all(|&x| x == 0.0));
                for t in [&g.dk, &g.dv] {
                    assert!(t
                        .slice(s![.., .., keys.clone(), ..])
                        .iter()
                        .all(|&x| x == 0.0));
                    assert!(t.iter().any(|&x| x != 0.0));
                }
                assert!(g.dq.iter().any(|&x| x != 0.0));
            }
        }
    }

    #[test]
    fn gqa_sums_over_the_group() {
        // GQA 4:2 equals MHA with K/V repeated, dK/dV summed over the repeats.
        let p = OracleProblem::dense(1, 4, 2, 4, 5, 3, true, 0.8);
        let inp = inputs(&p, 11);
        let rep = |a: &Array4<f32>| {
            Array4::from_shape_fn((1, 4, 5, 3), |(b, h, s, c)| a[[b, h / 2, s, c]])
        };
        let mha = OracleProblem::dense(1, 4, 4, 4, 5, 3, true, 0.8);
        let g = gradients_f64(&p, inp.q.view(), inp.k.view(), inp.v.view(), inp.d_o.view());
        let (k4, v4) = (rep(&inp.k), rep(&inp.v));
        let m = gradients_f64(&mha, inp.q.view(), k4.view(), v4.view(), inp.d_o.view());
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        for ((b, h, s, c), &x) in g.dk.indexed_iter() {
            assert!(close(
                x,
                m.dk[[b, 2 * h, s, c]] + m.dk[[b, 2 * h + 1, s, c]]
            ));
            let y = g.dv[[b, h, s, c]];
            assert!(close(
                y,
                m.dv[[b, 2 * h, s, c]] + m.dv[[b, 2 * h + 1, s, c]]
            ));
        }
        assert!(g.dq.iter().zip(m.dq.iter()).all(|(a, b)| close(*a, *b)));
    }

    #[test]
    fn the_rule_passes_both_references_and_fails_a_perturbation() {
        for (n, p) in [
            OracleProblem::dense(2, 4, 2, 37, 29, 16, true, 0.25),
            OracleProblem::dense(1, 2, 1, 20, 64, 32, false, 0.18),
        ]
        .iter()
        .enumerate()
        {
            for prec in Precision::ALL {
                let inp = inputs(p, 40 + n as u64);
                let (rf, lp) = references(p, prec, &inp);
                let f32s =
                    |g: &Gradients| [&g.dq, &g.dk, &g.dv].map(|a| a.mapv(|x| prec.round(x as f32)));
                let [a, b, c] = f32s(&rf);
                let v = judge_backward(p, prec, a.view(), b.view(), c.view(), &rf, &lp);
                assert!(v.pass, "{prec} rounded f64: {v}");
                let [a, b, c] = f32s(&lp);
                let v = judge_backward(p, prec, a.view(), b.view(), c.view(), &rf, &lp);
                assert!(v.pass && v.ratio <= 0.5 + 1e-9, "{prec} low precision: {v}");
                // 10x the allowed error on one dK element fails; so does a NaN hole in dV and a
                // nonzero dQ in a row that sees no key.
                let [a, mut b, mut c] = f32s(&rf);
                let allowed = v.tensors[1].allowed as f32;
                b[[0, 0, 3, 1]] += 10.0 * allowed;
                let bad = judge_backward(p, prec, a.view(), b.view(), c.view(), &rf, &lp);
                assert!(
                    !bad.pass && bad.worst == Some(("dK", [0, 0, 3, 1])),
                    "{bad}"
                );
                b[[0, 0, 3, 1]] -= 10.0 * allowed;
                c[[0, 0, 0, 0]] = f32::NAN;
                let bad = judge_backward(p, prec, a.view(), b.view(), c.view(), &rf, &lp);
                assert!(!bad.pass && bad.unwritten_or_nan == 1, "{bad}");
            }
        }
        let p = OracleProblem::dense(1, 1, 1, 6, 4, 2, true, 1.0);
        let inp = inputs(&p, 3);
        let rf = gradients_f64(&p, inp.q.view(), inp.k.view(), inp.v.view(), inp.d_o.view());
        let mut dq = rf.dq.mapv(|x| x as f32);
        dq[[0, 0, 1, 0]] = 1e-30; // row 1 sees no key
        let (dk, dv) = (rf.dk.mapv(|x| x as f32), rf.dv.mapv(|x| x as f32));
        let v = judge_backward(
            &p,
            Precision::F16,
            dq.view(),
            dk.view(),
            dv.view(),
            &rf,
            &rf,
        );
        assert!(!v.pass && v.empty_mismatch == 1, "{v}");
    }

    #[test]
    fn the_floor_is_one_ulp_at_the_largest_gradient_plus_point_three() {
        let a = Array4::from_elem((1, 1, 1, 1), 0.0);
        assert_eq!(backward_floor(Precision::F16, &a), crate::F16_ABS_FLOOR);
        assert_eq!(backward_floor(Precision::Bf16, &a), crate::BF16_ABS_FLOOR);
        let a = Array4::from_elem((1, 1, 1, 1), -5.0);
        // 5.3 lies in [4, 8): f16 ulp 2^2 · 2^-10, bf16 2^2 · 2^-7.
        assert_eq!(backward_floor(Precision::F16, &a), 4.0 / 1024.0);
        assert_eq!(backward_floor(Precision::Bf16, &a), 4.0 / 128.0);
        // FlashAttention-3's expression, evaluated in the dtype, gives the same.
        let x = 5.0f32;
        let fa3 =
            |prec: Precision| 2.0 * ((prec.round(prec.round(x + 0.3) - 0.3) - x).abs() as f64);
        assert!(fa3(Precision::F16) <= 4.0 / 1024.0);
    }
}
