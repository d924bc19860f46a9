//! The two references: exact-ish f64 attention, and what a plain PyTorch fp16/bf16 program
//! computes. Both share one blocked, multi-threaded row engine.

use std::ops::{Add, AddAssign, Mul};

use ndarray::{s, Array3, Array4, ArrayView1, ArrayView2, ArrayView4};

use crate::problem::{OracleProblem, Precision, Rows};

/// Reference output for a set of query rows: one O row (V's head dim of values: `head_dim`, or
/// V's own last dim where it differs) and one LSE per row, in the order of the [`Rows`] it was
/// computed for.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    rows: Vec<(usize, usize, usize)>,
    head_dim: usize,
    o: Vec<f64>,
    lse: Vec<f64>,
}

impl Reference {
    /// The `(batch, head_q, query_row)` of each stored row, in order.
    pub fn rows(&self) -> &[(usize, usize, usize)] {
        &self.rows
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The width of an O row: V's head dim.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// O of the `i`-th stored row.
    pub fn o_row(&self, i: usize) -> &[f64] {
        &self.o[i * self.head_dim..(i + 1) * self.head_dim]
    }

    /// LSE (natural log) of the `i`-th stored row.
    pub fn lse(&self, i: usize) -> f64 {
        self.lse[i]
    }

    /// All stored O rows as `[rows, head_dim]`.
    pub fn o(&self) -> ArrayView2<'_, f64> {
        ArrayView2::from_shape((self.rows.len(), self.head_dim), &self.o).expect("consistent")
    }

    /// All stored LSEs, one per row.
    pub fn lse_all(&self) -> ArrayView1<'_, f64> {
        ArrayView1::from(&self.lse[..])
    }

    /// Scatters the stored rows into full logical arrays `O: [b, hq, sq, d_v]`, `LSE: [b, hq, sq]`;
    /// rows not stored are NaN.
    pub fn to_dense(&self, p: &OracleProblem) -> (Array4<f64>, Array3<f64>) {
        let mut o = Array4::from_elem((p.batch, p.heads_q, p.seq_q, self.head_dim), f64::NAN);
        let mut lse = Array3::from_elem((p.batch, p.heads_q, p.seq_q), f64::NAN);
        for (i, &(b, h, r)) in self.rows.iter().enumerate() {
            for (c, &x) in self.o_row(i).iter().enumerate() {
                o[[b, h, r, c]] = x;
            }
            lse[[b, h, r]] = self.lse[i];
        }
        (o, lse)
    }
}

/// Softmax of one row of scores, in place, in f64; returns the row's log-sum-exp
/// `m + ln(sum_j exp(s_j - m))` with `m` the row max. This is the function both
/// [`reference_f64`] and the self-tests use.
///
/// * An empty row returns `+inf` (the flashcore convention for rows that see no key) and
///   leaves nothing behind.
/// * The max propagates NaN (unlike `f64::max`), so one NaN score makes the whole row NaN.
/// * Otherwise plain IEEE arithmetic: a `+inf` score gives `inf - inf = NaN` and a NaN row; a
///   row whose scores are all `-inf` gives `-inf - -inf = NaN` too (softmax is 0/0 there);
///   `-inf` scores next to a finite max just get probability 0.
pub fn softmax_in_place(scores: &mut [f64]) -> f64 {
    if scores.is_empty() {
        return f64::INFINITY;
    }
    let m = nan_max(scores.iter().copied());
    let mut sum = 0.0;
    for s in scores.iter_mut() {
        *s = (*s - m).exp();
        sum += *s;
    }
    let inv = 1.0 / sum;
    for s in scores.iter_mut() {
        *s *= inv;
    }
    m + sum.ln()
}

fn nan_max<T: Elem>(xs: impl Iterator<Item = T>) -> T {
    let mut m = T::NEG_INF;
    for x in xs {
        // Once m is NaN no comparison is true, so it stays NaN.
        if x > m || x.is_nan() {
            m = x;
        }
    }
    m
}

/// The f64 reference: scores `s_ij = scale · (q_i · k_j)` over the visible keys (then
/// `softcap · tanh(s / softcap)` and minus the ALiBi bias `slope · |i + seq_k - seq_q - j|` when
/// the problem has them, all in f64), softmax and
/// `O_i = Σ_j p_ij v_j`, all in f64 from the given f32 values. Rows that see no key get `O = 0`
/// and `LSE = +inf`. Masked keys take no part at all: a NaN or Inf in a masked K/V row does not
/// reach the output (as in the mathematical definition; a kernel that multiplies masked V rows
/// by p = 0 turns such an Inf/NaN into NaN). Non-finite inputs otherwise propagate by IEEE
/// rules, see [`softmax_in_place`]. Panics on shape mismatch.
pub fn reference_f64(
    p: &OracleProblem,
    q: ArrayView4<f32>,
    k: ArrayView4<f32>,
    v: ArrayView4<f32>,
    rows: &Rows,
) -> Reference {
    let scale = p.scale;
    run(
        p,
        q,
        k,
        v,
        rows,
        &F64Mode {
            scale,
            softcap: p.softcap,
        },
        // f64 needs no rounding of inputs.
        |x| x as f64,
    )
}

/// What a plain PyTorch fp16/bf16 program computes (FlashAttention's `attention_ref` without
/// upcast), as the error yardstick of the tolerance rule. Inputs are rounded to `precision`
/// (a no-op for representable values), then:
///
/// * `S = round(f32(acc_f32(q·k) · f32(scale)))`: dot products accumulated in f32, scaled in
///   f32, one rounding to the dtype; with softcap `c·tanh(s/c)` and the ALiBi bias applied in
///   f32 before that one rounding (FlashAttention's `attention_ref` does both on the scores
///   before the softmax);
/// * `P = round(exp(S - max S) / Σ exp(S - max S))` computed in f32 from the rounded S;
/// * `O = round(Σ_j P_j v_j)` accumulated in f32;
/// * `LSE = max S + ln Σ exp(S - max S)` in f32 from the rounded S (not rounded to the dtype).
///
/// Empty rows get `O = 0`, `LSE = +inf`, as in [`reference_f64`].
///
/// **fp8 forward** ([`OracleProblem::p_e4m3`]: Q, K and V stored in e4m3, their true values
/// given): what FlashAttention 3's fp8 forward computes. Its scores come from an fp8 GEMM, and
/// Hopper's e4m3 tensor cores do not sum in f32: a one-key row's score came out 1.1e-3 from the
/// exact one (`docs/results/2026-11-29-fp8-forward-h200`), about bf16's rounding. So
/// `S = round_bf16(acc_f32(q·k) · f32(scale))` (softcap and the ALiBi bias in f32 first), the
/// scores a plain fp8 program gets from a GEMM that returns bf16 (`torch._scaled_mm`), whatever
/// O's dtype; `P̃ = round_e4m3(exp(S - max S))`, the numerator the program rounds to e4m3
/// before its P·V matmul (in (0, 1], so a row's largest terms keep e4m3's relative precision:
/// rounding the normalised probabilities instead would flush every term of a long, flat row
/// below e4m3's subnormals); `O = round(Σ_j P̃_j v_j / Σ_j exp(S_j - max S))`, with the sum of
/// the unrounded terms in f32, as the program keeps its row sum; LSE as above. Rounding P to e4m3
/// is the error this reference adds, and so what the tolerance grants every kernel on such a
/// problem.
pub fn reference_low_precision(
    p: &OracleProblem,
    precision: Precision,
    q: ArrayView4<f32>,
    k: ArrayView4<f32>,
    v: ArrayView4<f32>,
    rows: &Rows,
) -> Reference {
    let mode = LowMode {
        precision,
        scale: p.scale as f32,
        softcap: p.softcap.map(|c| c as f32),
        p_e4m3: p.p_e4m3,
    };
    run(p, q, k, v, rows, &mode, |x| precision.round(x))
}

// ---------------------------------------------------------------------------------------------
// Row engine.

/// Minimal float trait so one engine serves f64 and f32.
trait Elem:
    Copy + Send + Sync + PartialOrd + Add<Output = Self> + Mul<Output = Self> + AddAssign + 'static
{
    const ZERO: Self;
    const NEG_INF: Self;
    fn is_nan(self) -> bool;
}

impl Elem for f64 {
    const ZERO: Self = 0.0;
    const NEG_INF: Self = f64::NEG_INFINITY;
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
}

impl Elem for f32 {
    const ZERO: Self = 0.0;
    const NEG_INF: Self = f32::NEG_INFINITY;
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}

/// What differs between the two references.
trait Mode: Sync {
    type T: Elem;
    /// Raw dot product to logit: scale, softcap, minus the ALiBi `bias` (slope · distance).
    fn score(&self, dot: Self::T, bias: f64) -> Self::T;
    /// Scores to probabilities in place; returns the LSE.
    fn softmax(&self, s: &mut [Self::T]) -> f64;
    /// Accumulated output element to the reported value.
    fn finish(&self, o: Self::T) -> f64;
}

struct F64Mode {
    scale: f64,
    softcap: Option<f64>,
}

impl Mode for F64Mode {
    type T = f64;
    #[inline]
    fn score(&self, dot: f64, bias: f64) -> f64 {
        let s = self.scale * dot;
        let s = match self.softcap {
            Some(c) => c * (s / c).tanh(),
            None => s,
        };
        s - bias
    }
    fn softmax(&self, s: &mut [f64]) -> f64 {
        softmax_in_place(s)
    }
    #[inline]
    fn finish(&self, o: f64) -> f64 {
        o
    }
}

struct LowMode {
    precision: Precision,
    scale: f32,
    softcap: Option<f32>,
    /// FlashAttention 3's fp8 program ([`OracleProblem::p_e4m3`]).
    p_e4m3: bool,
}

impl Mode for LowMode {
    type T = f32;
    #[inline]
    fn score(&self, dot: f32, bias: f64) -> f32 {
        let s = dot * self.scale;
        let s = match self.softcap {
            Some(c) => c * (s / c).tanh(),
            None => s,
        };
        let s = s - bias as f32;
        if self.p_e4m3 {
            Precision::Bf16.round(s) // an fp8 GEMM's scores, as bf16 (see reference_low_precision)
        } else {
            self.precision.round(s)
        }
    }
    fn softmax(&self, s: &mut [f32]) -> f64 {
        if s.is_empty() {
            return f64::INFINITY;
        }
        let m = nan_max(s.iter().copied());
        let mut sum = 0.0f32;
        for x in s.iter_mut() {
            *x = (*x - m).exp();
            sum += *x;
        }
        if self.p_e4m3 {
            // The rounded numerators over the unrounded sum (see reference_low_precision).
            for x in s.iter_mut() {
                *x = crate::fp8::round_e4m3(*x) / sum;
            }
        } else {
            for x in s.iter_mut() {
                *x = self.precision.round(*x / sum);
            }
        }
        (m + sum.ln()) as f64
    }
    #[inline]
    fn finish(&self, o: f32) -> f64 {
        self.precision.round(o) as f64
    }
}

/// Query rows processed together, so each K and V row is loaded once per block.
const BLOCK: usize = 4;
/// Lanes per dot-product accumulator (independent partial sums, so the loop vectorizes).
const LANES: usize = 4;
/// Rows per parallel task: large enough that converting the task's K/V is noise.
const TASK_ROWS: usize = 64;
/// Below this many multiply-adds, threads cost more than they save.
const PARALLEL_WORK: usize = 1 << 22;

struct Task {
    b: usize,
    kvh: usize,
    /// Indices into the caller's row list.
    idx: Vec<usize>,
}

struct TaskOut {
    idx: Vec<usize>,
    o: Vec<f64>,
    lse: Vec<f64>,
}

fn check_shapes(p: &OracleProblem, q: &ArrayView4<f32>, k: &ArrayView4<f32>, v: &ArrayView4<f32>) {
    p.group_size();
    let qs = [p.batch, p.heads_q, p.seq_q, p.head_dim];
    let ks = [p.batch, p.heads_kv, p.seq_k, p.head_dim];
    assert_eq!(q.shape(), qs, "Q must be [batch, heads_q, seq_q, head_dim]");
    assert_eq!(
        k.shape(),
        ks,
        "K must be [batch, heads_kv, seq_k, head_dim]"
    );
    // V's head dim may differ from Q's and K's (FlashAttention 3's `headdim_v`): O takes it.
    assert_eq!(
        v.shape()[..3],
        ks[..3],
        "V must be [batch, heads_kv, seq_k, head_dim_v]"
    );
}

fn run<M: Mode>(
    p: &OracleProblem,
    q: ArrayView4<f32>,
    k: ArrayView4<f32>,
    v: ArrayView4<f32>,
    rows: &Rows,
    mode: &M,
    load: impl Fn(f32) -> M::T + Sync,
) -> Reference {
    check_shapes(p, &q, &k, &v);
    let list = rows.expand(p);
    let d = p.head_dim;
    let dv = v.shape()[3];
    let group = p.group_size();

    // Sort by (batch, kv head, row, head) so a block shares K/V and has similar visible
    // lengths (GQA heads at the same row see the same keys).
    let mut order: Vec<usize> = (0..list.len()).collect();
    order.sort_by_key(|&i| {
        let (b, h, r) = list[i];
        (b, h / group, r, h)
    });
    let mut tasks: Vec<Task> = Vec::new();
    let mut work = 0usize;
    for &i in &order {
        let (b, h, r) = list[i];
        work += p.visible_keys(b, r) * (d + dv).max(1);
        let kvh = h / group;
        match tasks.last_mut() {
            Some(t) if t.b == b && t.kvh == kvh && t.idx.len() < TASK_ROWS => t.idx.push(i),
            _ => tasks.push(Task {
                b,
                kvh,
                idx: vec![i],
            }),
        }
    }

    let do_task = |t: &Task| -> TaskOut {
        let rows: Vec<(usize, usize)> = t.idx.iter().map(|&i| (list[i].1, list[i].2)).collect();
        let (o, lse) = task_rows(p, &q, &k, &v, t.b, t.kvh, &rows, mode, &load);
        TaskOut {
            idx: t.idx.clone(),
            o,
            lse,
        }
    };

    let outs: Vec<TaskOut> = crate::parallel::map_tasks(&tasks, work >= PARALLEL_WORK, do_task);

    let mut o = vec![0.0; list.len() * dv];
    let mut lse = vec![0.0; list.len()];
    for t in outs {
        for (n, &i) in t.idx.iter().enumerate() {
            o[i * dv..(i + 1) * dv].copy_from_slice(&t.o[n * dv..(n + 1) * dv]);
            lse[i] = t.lse[n];
        }
    }
    Reference {
        rows: list,
        head_dim: dv,
        o,
        lse,
    }
}

/// Computes rows `(head_q, query_row)` that all read kv head `kvh` of batch `b`.
#[allow(clippy::too_many_arguments)]
fn task_rows<M: Mode>(
    p: &OracleProblem,
    q: &ArrayView4<f32>,
    k: &ArrayView4<f32>,
    v: &ArrayView4<f32>,
    b: usize,
    kvh: usize,
    rows: &[(usize, usize)],
    mode: &M,
    load: &impl Fn(f32) -> M::T,
) -> (Vec<f64>, Vec<f64>) {
    let (d, dv) = (p.head_dim, v.shape()[3]);
    // Keys 0..nk cover every row's range (rows see keys lo..hi).
    let nk = rows
        .iter()
        .map(|&(_, r)| p.key_range(b, r).1)
        .max()
        .unwrap_or(0);

    // Contiguous copies of the keys this task can see, whatever the caller's strides.
    let to_buf = |x: &ArrayView4<f32>| -> Vec<M::T> {
        // Logical-order iteration, so any strides work.
        x.slice(s![b, kvh, ..nk, ..])
            .iter()
            .map(|&e| load(e))
            .collect()
    };
    let kb = to_buf(k);
    let vb = to_buf(v);

    let mut out_o = vec![0.0; rows.len() * dv];
    let mut out_lse = vec![0.0; rows.len()];
    let mut qb = vec![M::T::ZERO; BLOCK * d];
    let mut sb = vec![M::T::ZERO; BLOCK * nk];
    let mut ob = vec![M::T::ZERO; BLOCK * dv];

    for (bi, blk) in rows.chunks(BLOCK).enumerate() {
        let mut lo = [0usize; BLOCK];
        let mut n = [0usize; BLOCK];
        qb.fill(M::T::ZERO);
        for (r, &(h, row)) in blk.iter().enumerate() {
            (lo[r], n[r]) = p.key_range(b, row);
            for (dst, &e) in qb[r * d..(r + 1) * d]
                .iter_mut()
                .zip(q.slice(s![b, h, row, ..]))
            {
                *dst = load(e);
            }
        }
        let nmax = n.iter().copied().max().unwrap_or(0);
        // (A window's rows start past key 0: nothing before the block's first visible key.)
        let jmin = lo[..blk.len()].iter().copied().min().unwrap_or(0);

        // Scores: each K row against all block rows at once; scores past a row's visible
        // range are computed but never read.
        for j in jmin..nmax {
            let dots = dot_block(&qb, &kb[j * d..(j + 1) * d]);
            for r in 0..BLOCK {
                sb[r * nk + j] = dots[r];
            }
        }

        ob.fill(M::T::ZERO);
        let mut lse = [0.0f64; BLOCK];
        for (r, &(h, row)) in blk.iter().enumerate() {
            let slope = p.slope(b, h);
            let diag = row as f64 + p.seq_k as f64 - p.seq_q as f64;
            let s = &mut sb[r * nk + lo[r]..r * nk + n[r]];
            for (j, x) in (lo[r]..).zip(s.iter_mut()) {
                let bias = if slope == 0.0 {
                    0.0
                } else {
                    slope * (diag - j as f64).abs()
                };
                *x = mode.score(*x, bias);
            }
            lse[r] = mode.softmax(s);
        }
        // O: masked keys are skipped, not weighted by 0, so their NaN/Inf cannot leak in.
        for j in jmin..nmax {
            let vj = &vb[j * dv..(j + 1) * dv];
            for r in 0..blk.len() {
                if j >= lo[r] && j < n[r] {
                    axpy(sb[r * nk + j], vj, &mut ob[r * dv..(r + 1) * dv]);
                }
            }
        }
        for r in 0..blk.len() {
            let i = bi * BLOCK + r;
            for c in 0..dv {
                out_o[i * dv + c] = if n[r] == lo[r] {
                    0.0
                } else {
                    mode.finish(ob[r * dv + c])
                };
            }
            out_lse[i] = lse[r];
        }
    }
    (out_o, out_lse)
}

/// Dot products of the `BLOCK` rows of `qb` (row-major, `d` wide) with `kj`.
#[inline]
fn dot_block<T: Elem>(qb: &[T], kj: &[T]) -> [T; BLOCK] {
    let d = kj.len();
    let whole = d - d % LANES;
    let mut acc = [[T::ZERO; LANES]; BLOCK];
    for (r, a) in acc.iter_mut().enumerate() {
        let qr = &qb[r * d..(r + 1) * d];
        for (qc, kc) in qr[..whole]
            .chunks_exact(LANES)
            .zip(kj[..whole].chunks_exact(LANES))
        {
            for l in 0..LANES {
                a[l] += qc[l] * kc[l];
            }
        }
    }
    let mut out = [T::ZERO; BLOCK];
    for r in 0..BLOCK {
        let a = acc[r];
        let mut s = (a[0] + a[1]) + (a[2] + a[3]);
        for c in whole..d {
            s += qb[r * d + c] * kj[c];
        }
        out[r] = s;
    }
    out
}

#[inline]
fn axpy<T: Elem>(a: T, x: &[T], y: &mut [T]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// The probabilities of every visible key of one row (keys `key_range(row)`, in order), in f64
/// (for tests and diagnostics). Empty when the row sees no key.
pub fn probabilities(
    p: &OracleProblem,
    q: ArrayView4<f32>,
    k: ArrayView4<f32>,
    v: ArrayView4<f32>,
    row: (usize, usize, usize),
) -> Vec<f64> {
    check_shapes(p, &q, &k, &v);
    let (b, h, r) = row;
    let kvh = p.kv_head(h);
    let mode = F64Mode {
        scale: p.scale,
        softcap: p.softcap,
    };
    let diag = r as f64 + p.seq_k as f64 - p.seq_q as f64;
    let (lo, hi) = p.key_range(b, r);
    let mut s: Vec<f64> = (lo..hi)
        .map(|j| {
            let dot: f64 = (0..p.head_dim)
                .map(|c| q[[b, h, r, c]] as f64 * k[[b, kvh, j, c]] as f64)
                .sum();
            mode.score(dot, p.slope(b, h) * (diag - j as f64).abs())
        })
        .collect();
    softmax_in_place(&mut s);
    s
}
