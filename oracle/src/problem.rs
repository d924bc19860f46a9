//! The problem description, the kernel dtype, and which query rows are computed and judged.

use std::collections::BTreeSet;

/// One attention call as the oracle sees it. Logical tensor order everywhere in this crate:
/// Q and O are `[batch, heads_q, seq_q, head_dim]`, K and V are `[batch, heads_kv, seq_k, head_dim]`,
/// LSE is `[batch, heads_q, seq_q]`. Windows, softcap and ALiBi follow `docs/MODES.md`; a varlen
/// batch or a KV cache is judged one sequence at a time, each as its own batch-1 problem over the
/// logical K/V the sequence attends to ([`gather_paged`](crate::gather_paged),
/// [`append_rows`](crate::append_rows)).
#[derive(Clone, Debug, PartialEq)]
pub struct OracleProblem {
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub seq_q: usize,
    pub seq_k: usize,
    pub head_dim: usize,
    /// Bottom-right aligned causal mask (FlashAttention >= 2.1).
    pub causal: bool,
    /// Multiplies q·k. Any finite value, including 0 and negative ones.
    pub scale: f64,
    /// Keys further left of the (bottom-right aligned) diagonal than this are masked.
    pub window_left: Option<usize>,
    /// Keys further right of the diagonal than this are masked (causal makes it 0).
    pub window_right: Option<usize>,
    /// Logits become `softcap · tanh(s / softcap)`.
    pub softcap: Option<f64>,
    /// ALiBi slopes, `[batch, heads_q]` row-major: the logit of key j at row i loses
    /// `slope · |i + seq_k - seq_q - j|`.
    pub alibi_slopes: Option<Vec<f64>>,
    /// `mm_prefix_ranges` (candle-flash-attn's): per batch entry, ranges `[start, end)` of key
    /// positions. A query whose position `i + seq_k - seq_q` lies in a range also sees every key
    /// of the range (below `seq_k`), whatever the causal mask and the window say; ranges with
    /// `start >= end` are empty.
    pub mm_prefix: Option<Vec<Vec<(usize, usize)>>>,
    /// An fp8 forward (Q, K and V stored in e4m3, FlashAttention 3's fp8 path): the low-precision
    /// reference models that program, whose scores are an fp8 GEMM's (rounded to bf16) and which
    /// rounds the probabilities to e4m3 before P·V ([`reference_low_precision`](crate::reference_low_precision)). The f64
    /// reference, the tolerance rule and the backward references ignore it.
    pub p_e4m3: bool,
}

impl OracleProblem {
    /// A problem without windows, softcap or ALiBi.
    #[allow(clippy::too_many_arguments)]
    pub fn dense(
        batch: usize,
        heads_q: usize,
        heads_kv: usize,
        seq_q: usize,
        seq_k: usize,
        head_dim: usize,
        causal: bool,
        scale: f64,
    ) -> Self {
        OracleProblem {
            batch,
            heads_q,
            heads_kv,
            seq_q,
            seq_k,
            head_dim,
            causal,
            scale,
            window_left: None,
            window_right: None,
            softcap: None,
            alibi_slopes: None,
            mm_prefix: None,
            p_e4m3: false,
        }
    }

    /// Query heads per kv head (GQA/MQA group size). Panics if `heads_kv` does not divide `heads_q`.
    pub fn group_size(&self) -> usize {
        assert!(
            self.heads_kv > 0 && self.heads_q.is_multiple_of(self.heads_kv),
            "heads_q ({}) must be a positive multiple of heads_kv ({})",
            self.heads_q,
            self.heads_kv
        );
        self.heads_q / self.heads_kv
    }

    /// The kv head that query head `head_q` reads.
    pub fn kv_head(&self, head_q: usize) -> usize {
        head_q / self.group_size()
    }

    /// The keys query row `row` of batch entry `b` sees: `lo..hi` (empty when `lo == hi`). With
    /// the diagonal `i + seq_k - seq_q` (bottom-right aligned, signed), row i sees key j iff
    /// `j >= diag - window_left` (if given), `j <= diag + window_right` (if given; causal bounds
    /// it at 0) and `0 <= j < seq_k`; or j and the diagonal lie in one of the entry's
    /// [`mm_prefix`](Self::mm_prefix) ranges. Both sets hold the diagonal whenever it is a key,
    /// so their union stays one range.
    pub fn key_range(&self, b: usize, row: usize) -> (usize, usize) {
        let (mut lo, mut hi) = self.window_range(row);
        let diag = row as i128 + self.seq_k as i128 - self.seq_q as i128;
        let ranges = self.mm_prefix.as_ref().map_or(&[][..], |m| &m[b][..]);
        for &(start, end) in ranges {
            let end = end.min(self.seq_k);
            if start < end && (start as i128..end as i128).contains(&diag) {
                (lo, hi) = if lo < hi {
                    (lo.min(start), hi.max(end))
                } else {
                    (start, end)
                };
            }
        }
        (lo, hi)
    }

    /// [`key_range`](Self::key_range) without the `mm_prefix` ranges: the causal mask and the
    /// window alone.
    fn window_range(&self, row: usize) -> (usize, usize) {
        let diag = row as i128 + self.seq_k as i128 - self.seq_q as i128;
        let mut hi = self.seq_k as i128;
        let right = if self.causal {
            Some(0)
        } else {
            self.window_right.map(|w| w as i128)
        };
        if let Some(r) = right {
            hi = hi.min(diag + r + 1);
        }
        let mut lo = 0i128;
        if let Some(l) = self.window_left {
            lo = lo.max(diag - l as i128);
        }
        let hi = hi.max(0);
        let lo = lo.min(hi);
        (lo as usize, hi as usize)
    }

    /// How many keys query row `row` of batch entry `b` sees (the length of
    /// [`key_range`](Self::key_range)); 0 for rows above the diagonal when causal and
    /// `seq_q > seq_k`, and always when `seq_k == 0`.
    pub fn visible_keys(&self, b: usize, row: usize) -> usize {
        let (lo, hi) = self.key_range(b, row);
        hi - lo
    }

    /// The ALiBi slope of (batch, head_q); 0 without ALiBi.
    pub fn slope(&self, b: usize, h: usize) -> f64 {
        self.alibi_slopes
            .as_ref()
            .map_or(0.0, |s| s[b * self.heads_q + h])
    }

    /// Total number of query rows, `batch * heads_q * seq_q`.
    pub fn total_rows(&self) -> usize {
        self.batch * self.heads_q * self.seq_q
    }
}

/// The kernel's element type for Q, K, V and O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    F16,
    Bf16,
}

impl Precision {
    pub const ALL: [Precision; 2] = [Precision::F16, Precision::Bf16];

    pub fn name(self) -> &'static str {
        match self {
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
        }
    }

    /// Rounds an f32 to this dtype (round to nearest even) and back. NaN and ±Inf pass through;
    /// values beyond the dtype's range become ±Inf.
    #[inline]
    pub fn round(self, x: f32) -> f32 {
        match self {
            Precision::F16 => half::f16::from_f32(x).to_f32(),
            Precision::Bf16 => half::bf16::from_f32(x).to_f32(),
        }
    }

    /// Whether `x` is exactly representable in this dtype (NaN counts as representable).
    pub fn is_representable(self, x: f32) -> bool {
        x.is_nan() || self.round(x) == x
    }

    /// The absolute floor of the tolerance rule for this dtype; see [`crate::F16_ABS_FLOOR`].
    pub fn abs_floor(self) -> f64 {
        match self {
            Precision::F16 => crate::F16_ABS_FLOOR,
            Precision::Bf16 => crate::BF16_ABS_FLOOR,
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f16" | "fp16" | "float16" | "half" => Ok(Precision::F16),
            "bf16" | "bfloat16" => Ok(Precision::Bf16),
            other => Err(format!(
                "unknown precision '{other}' (expected f16 or bf16)"
            )),
        }
    }
}

/// Which query rows to compute and judge. A row is `(batch, head_q, query_row)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rows {
    /// Every row, in `(batch, head_q, query_row)` lexicographic order.
    All,
    /// These rows, in this order. Duplicates are allowed (and computed twice).
    List(Vec<(usize, usize, usize)>),
}

impl Rows {
    /// The rows as an explicit list. Panics if a listed row is out of range for `p`.
    pub fn expand(&self, p: &OracleProblem) -> Vec<(usize, usize, usize)> {
        match self {
            Rows::All => {
                let mut out = Vec::with_capacity(p.total_rows());
                for b in 0..p.batch {
                    for h in 0..p.heads_q {
                        for r in 0..p.seq_q {
                            out.push((b, h, r));
                        }
                    }
                }
                out
            }
            Rows::List(list) => {
                for &(b, h, r) in list {
                    assert!(
                        b < p.batch && h < p.heads_q && r < p.seq_q,
                        "row ({b}, {h}, {r}) out of range for batch {}, heads_q {}, seq_q {}",
                        p.batch,
                        p.heads_q,
                        p.seq_q
                    );
                }
                list.clone()
            }
        }
    }

    /// Number of rows selected.
    pub fn len(&self, p: &OracleProblem) -> usize {
        match self {
            Rows::All => p.total_rows(),
            Rows::List(list) => list.len(),
        }
    }

    pub fn is_empty(&self, p: &OracleProblem) -> bool {
        self.len(p) == 0
    }
}

/// Picks the rows to judge a large problem on. Returns [`Rows::All`] when the problem has at
/// most `max_rows` rows. Otherwise returns a sorted, duplicate-free list that always holds, for
/// every (batch, head_q), the first and last query rows and, for causal problems with
/// `seq_q > seq_k`, the last fully masked row and the first row that sees a key (the places
/// where masking bugs live), topped up with uniformly drawn rows to at most `max_rows` in total
/// (more only when the mandatory rows alone exceed it). Deterministic given `seed` on every
/// platform (SplitMix64, no external RNG whose stream could change between versions).
pub fn sample_rows(p: &OracleProblem, max_rows: usize, seed: u64) -> Rows {
    let total = p.total_rows();
    if total <= max_rows {
        return Rows::All;
    }
    let sq = p.seq_q;
    let flat = |b: usize, h: usize, r: usize| (b * p.heads_q + h) * sq + r;

    let mut special = vec![0, sq - 1];
    if p.causal && sq > p.seq_k {
        // Row sq - sk - 1 is the last with no visible key, sq - sk the first with exactly one.
        special.push(sq - p.seq_k - 1);
        special.push(sq - p.seq_k);
    }
    let mut chosen = BTreeSet::new();
    for b in 0..p.batch {
        for h in 0..p.heads_q {
            for &r in &special {
                chosen.insert(flat(b, h, r));
            }
        }
    }

    // Robert Floyd's algorithm: `budget` distinct indices from 0..total, no rejection loop.
    let budget = max_rows.saturating_sub(chosen.len());
    let mut rng = SplitMix64(seed);
    let mut drawn = BTreeSet::new();
    for j in (total - budget)..total {
        let t = rng.below(j as u64 + 1) as usize;
        if !drawn.insert(t) {
            drawn.insert(j);
        }
    }
    chosen.extend(drawn);

    Rows::List(
        chosen
            .into_iter()
            .map(|i| (i / (p.heads_q * sq), (i / sq) % p.heads_q, i % sq))
            .collect(),
    )
}

struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` by multiply-shift (bias below 2^-64 · n, irrelevant here).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prob(causal: bool, sq: usize, sk: usize) -> OracleProblem {
        OracleProblem {
            batch: 2,
            heads_q: 4,
            heads_kv: 2,
            seq_q: sq,
            seq_k: sk,
            head_dim: 8,
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

    #[test]
    fn visible_keys_bottom_right() {
        let p = prob(true, 5, 3);
        let v: Vec<_> = (0..5).map(|r| p.visible_keys(0, r)).collect();
        assert_eq!(v, [0, 0, 1, 2, 3]);
        let p = prob(true, 2, 4);
        assert_eq!([p.visible_keys(0, 0), p.visible_keys(0, 1)], [3, 4]);
        let p = prob(true, 3, 0);
        assert_eq!(p.visible_keys(0, 2), 0);
        assert_eq!(prob(false, 3, 7).visible_keys(0, 0), 7);
    }

    #[test]
    fn sampling_is_deterministic_and_keeps_edges() {
        let p = prob(true, 1000, 100);
        let a = sample_rows(&p, 300, 7);
        assert_eq!(a, sample_rows(&p, 300, 7));
        assert_ne!(a, sample_rows(&p, 300, 8));
        let Rows::List(list) = &a else {
            panic!("expected a list")
        };
        assert!(list.len() <= 300);
        assert!(list.windows(2).all(|w| w[0] < w[1]));
        for b in 0..2 {
            for h in 0..4 {
                for r in [0, 999, 899, 900] {
                    assert!(
                        list.binary_search(&(b, h, r)).is_ok(),
                        "missing {b} {h} {r}"
                    );
                }
            }
        }
        assert_eq!(sample_rows(&p, 8000, 1), Rows::All);
        // Mandatory rows win over a tiny budget.
        let Rows::List(tiny) = sample_rows(&p, 1, 1) else {
            panic!()
        };
        assert_eq!(tiny.len(), 2 * 4 * 4);
    }
}
