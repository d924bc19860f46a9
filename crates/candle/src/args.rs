//! The candle-independent half of the crate: candle-flash-attn's argument conventions turned into
//! a flashcore [`AttentionProblem`]. Shapes and strides come in as plain numbers (a candle
//! `Layout`'s `dims()`, `stride()`), so all of this is unit-tested without candle or a GPU.

use flashcore::{
    AlibiSlopes, AttentionProblem, DType, KvStorage, Layout, Modes, ProblemStrides, TensorStrides,
};

/// Why a call is refused before anything launches. The ops turn it into a candle error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgError(pub String);

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ArgError {}

fn bail<T>(msg: impl Into<String>) -> Result<T, ArgError> {
    Err(ArgError(msg.into()))
}

/// A tensor's dims and strides in elements (candle's `Layout::dims()` / `stride()`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View<'a> {
    pub name: &'static str,
    pub dims: &'a [usize],
    pub strides: &'a [usize],
}

impl<'a> View<'a> {
    pub fn new(name: &'static str, dims: &'a [usize], strides: &'a [usize]) -> Self {
        View {
            name,
            dims,
            strides,
        }
    }

    fn rank(&self, rank: usize, what: &str) -> Result<(), ArgError> {
        if self.dims.len() != rank || self.strides.len() != rank {
            return bail(format!(
                "{what} expects {} of rank {rank}, got shape {:?}",
                self.name, self.dims
            ));
        }
        Ok(())
    }

    /// candle-flash-attn's rule: the head dimension must be contiguous. Other strides are taken
    /// as they are (flashcore's kernels then refuse them if they break their alignment, and the
    /// slowest generation takes any).
    fn inner_contiguous(&self) -> Result<(), ArgError> {
        let d = self.dims.last().copied().unwrap_or(0);
        if d > 1 && self.strides.last() != Some(&1) {
            return bail(format!(
                "the last dim of {} must be contiguous {:?} (call .contiguous() first)",
                self.name, self.strides
            ));
        }
        Ok(())
    }

    /// The stride of axis `i`, or for an axis of extent 1 (whose stride is never multiplied by a
    /// non-zero index) the dense stride of that axis, so that alignment checks and TMA
    /// descriptors see a well-formed value whatever candle left there.
    fn stride(&self, i: usize) -> usize {
        if self.dims[i] == 1 {
            self.dims[i + 1..].iter().product()
        } else {
            self.strides[i]
        }
    }

    /// `[batch, seq, heads, head_dim]` strides.
    fn bshd(&self) -> TensorStrides {
        TensorStrides {
            batch: self.stride(0),
            row: self.stride(1),
            head: self.stride(2),
        }
    }

    /// `[total, heads, head_dim]` strides (packed varlen rows, no batch axis).
    fn packed(&self) -> TensorStrides {
        TensorStrides {
            batch: 0,
            row: self.stride(0),
            head: self.stride(1),
        }
    }
}

/// The element type of Q (candle-flash-attn's rule: f16 or bf16; K and V must match it).
pub fn dtype_of(name: &str, q: &str, k: &str, v: &str) -> Result<DType, ArgError> {
    let dtype = match q {
        "f16" => DType::F16,
        "bf16" => DType::Bf16,
        other => {
            return bail(format!(
                "{name} is only supported for f16/bf16 (q is {other})"
            ))
        }
    };
    for (t, d) in [("k", k), ("v", v)] {
        if d != q {
            return bail(format!("dtype mismatch: q is {q} but {t} is {d}"));
        }
    }
    Ok(dtype)
}

/// Causal masking and the sliding window as candle-flash-attn (FlashAttention 2) defines them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Masking {
    pub causal: bool,
    pub window_left: Option<usize>,
    pub window_right: Option<usize>,
}

/// candle-flash-attn's window rule: a size larger than `seqlen_k` (max_seqlen_k for varlen, the
/// cache capacity for a KV cache) counts as none; `left = None, right = Some(0)` is causal
/// (bottom-right aligned); a window bounded on one side only gets `seqlen_k` on the other.
pub fn masking(
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    seqlen_k: usize,
) -> Masking {
    let left = window_size_left.filter(|&w| w <= seqlen_k);
    let right = window_size_right.filter(|&w| w <= seqlen_k);
    match (left, right) {
        (None, Some(0)) => Masking {
            causal: true,
            window_left: None,
            window_right: None,
        },
        (None, None) => Masking {
            causal: false,
            window_left: None,
            window_right: None,
        },
        (l, r) => Masking {
            causal: false,
            window_left: Some(l.unwrap_or(seqlen_k)),
            window_right: Some(r.unwrap_or(seqlen_k)),
        },
    }
}

/// FlashAttention's softcap: 0 (or less) means none.
pub fn softcap(softcap: Option<f32>) -> Result<Option<f32>, ArgError> {
    match softcap {
        Some(c) if c.is_nan() || c.is_infinite() => bail(format!("softcap {c} is not finite")),
        Some(c) if c > 0.0 => Ok(Some(c)),
        _ => Ok(None),
    }
}

/// ALiBi slopes of shape `[heads_q]` or `[batch, heads_q]` (f32, contiguous).
pub fn alibi(dims: &[usize], batch: usize, heads_q: usize) -> Result<AlibiSlopes, ArgError> {
    match dims {
        [h] if *h == heads_q => Ok(AlibiSlopes::PerHead),
        [b, h] if *b == batch && *h == heads_q => Ok(AlibiSlopes::PerBatchHead),
        _ => bail(format!(
            "shape mismatch alibi_slopes {dims:?}, expected ({heads_q}) or ({batch}, {heads_q})"
        )),
    }
}

/// Whether the ops run in the batch-invariant mode (off until [`set_batch_invariant`]).
static BATCH_INVARIANT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns the batch-invariant mode on or off for every op called after it, process-wide (as a
/// serving engine sets it once): each sequence's output is then bit-identical whatever else is
/// in its batch (flashcore's `docs/MODES.md`, *Batch invariance*). candle-flash-attn has no
/// such switch; its functions keep their signatures.
pub fn set_batch_invariant(on: bool) {
    BATCH_INVARIANT.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether the ops run in the batch-invariant mode.
pub fn batch_invariant() -> bool {
    BATCH_INVARIANT.load(std::sync::atomic::Ordering::Relaxed)
}

/// What every entry point shares beyond the tensors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    pub dtype: DType,
    pub softmax_scale: f32,
    /// The batch-invariant mode ([`set_batch_invariant`]).
    pub batch_invariant: bool,
    pub window_size_left: Option<usize>,
    pub window_size_right: Option<usize>,
    pub softcap: Option<f32>,
    /// Dims of the alibi_slopes tensor, when given.
    pub alibi_dims: Option<[usize; 2]>,
    pub alibi_rank: usize,
}

impl Options {
    pub fn new(dtype: DType, softmax_scale: f32) -> Self {
        Options {
            dtype,
            softmax_scale,
            batch_invariant: batch_invariant(),
            window_size_left: None,
            window_size_right: None,
            softcap: None,
            alibi_dims: None,
            alibi_rank: 0,
        }
    }

    pub fn with_window(mut self, left: Option<usize>, right: Option<usize>) -> Self {
        self.window_size_left = left;
        self.window_size_right = right;
        self
    }

    pub fn with_softcap(mut self, softcap: Option<f32>) -> Self {
        self.softcap = softcap;
        self
    }

    /// The alibi_slopes tensor's dims (rank 1 or 2).
    pub fn with_alibi(mut self, dims: &[usize]) -> Self {
        let mut d = [0; 2];
        for (o, i) in d.iter_mut().zip(dims) {
            *o = *i;
        }
        self.alibi_dims = Some(d);
        self.alibi_rank = dims.len();
        self
    }

    fn modes(
        &self,
        batch: usize,
        heads_q: usize,
        seqlen_k_for_window: usize,
    ) -> Result<(bool, Modes), ArgError> {
        if !self.softmax_scale.is_finite() {
            return bail(format!(
                "softmax_scale {} is not finite",
                self.softmax_scale
            ));
        }
        let m = masking(
            self.window_size_left,
            self.window_size_right,
            seqlen_k_for_window,
        );
        let alibi = match self.alibi_dims {
            Some(_) if self.alibi_rank > 2 => {
                return bail(format!(
                    "alibi_slopes must be of rank 1 or 2, got rank {}",
                    self.alibi_rank
                ))
            }
            Some(d) => Some(alibi(&d[..self.alibi_rank], batch, heads_q)?),
            None => None,
        };
        Ok((
            m.causal,
            Modes {
                window_left: m.window_left,
                window_right: m.window_right,
                softcap: softcap(self.softcap)?,
                alibi,
                ..Modes::default()
            },
        ))
    }
}

fn check_heads(heads_q: usize, heads_kv: usize) -> Result<(), ArgError> {
    if heads_kv == 0 || !heads_q.is_multiple_of(heads_kv) {
        return bail(format!(
            "number of k/v heads {heads_kv} must divide number of heads in query {heads_q}"
        ));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn problem(
    batch: usize,
    heads: (usize, usize),
    seq: (usize, usize),
    head_dim: usize,
    opts: &Options,
    causal: bool,
    strides: ProblemStrides,
    modes: Modes,
) -> Result<AttentionProblem, ArgError> {
    let p = AttentionProblem {
        batch,
        heads_q: heads.0,
        heads_kv: heads.1,
        seq_q: seq.0,
        seq_k: seq.1,
        head_dim,
        dtype: opts.dtype,
        causal,
        softmax_scale: Some(opts.softmax_scale),
        layout: Layout::Bshd,
        custom_strides: Some(strides),
        modes,
        batch_invariant: opts.batch_invariant,
    };
    p.validate().map_err(|e| ArgError(e.to_string()))?;
    Ok(p)
}

/// Dense strides of the output O, which the ops allocate contiguous with Q's shape.
fn dense_o(dims: &[usize]) -> TensorStrides {
    let d = dims.to_vec();
    let strides: Vec<usize> = (0..d.len()).map(|i| d[i + 1..].iter().product()).collect();
    let v = View::new("o", &d, &strides);
    if d.len() == 4 {
        v.bshd()
    } else {
        v.packed()
    }
}

/// `flash_attn*`: q `(b, s_q, h_q, d)`, k and v `(b, s_k, h_kv, d)`.
pub fn dense_problem(
    q: &View,
    k: &View,
    v: &View,
    opts: &Options,
) -> Result<AttentionProblem, ArgError> {
    for t in [q, k, v] {
        t.rank(4, "flash-attn")?;
        t.inner_contiguous()?;
    }
    let [b, s_q, h_q, d] = [q.dims[0], q.dims[1], q.dims[2], q.dims[3]];
    let [_, s_k, h_kv, _] = [k.dims[0], k.dims[1], k.dims[2], k.dims[3]];
    if k.dims != [b, s_k, h_kv, d] {
        return bail(format!("shape mismatch q {:?} and k {:?}", q.dims, k.dims));
    }
    if v.dims != k.dims {
        return bail(format!("shape mismatch q {:?} and v {:?}", q.dims, v.dims));
    }
    check_heads(h_q, h_kv)?;
    let (causal, modes) = opts.modes(b, h_q, s_k)?;
    let strides = ProblemStrides {
        q: q.bshd(),
        k: k.bshd(),
        v: v.bshd(),
        o: dense_o(q.dims),
    };
    problem(b, (h_q, h_kv), (s_q, s_k), d, opts, causal, strides, modes)
}

/// The batch size a cu_seqlens table of these dims describes (`batch + 1` entries).
pub fn cu_seqlens_batch(seqlens_q: &[usize], seqlens_k: &[usize]) -> Result<usize, ArgError> {
    let n_q = match seqlens_q {
        [n] => *n,
        _ => return bail(format!("seqlens_q must be of rank 1, got {seqlens_q:?}")),
    };
    let n_k = match seqlens_k {
        [n] => *n,
        _ => return bail(format!("seqlens_k must be of rank 1, got {seqlens_k:?}")),
    };
    if n_q < 2 {
        return bail(format!("seqlens_q should have a len >= 2 {n_q}"));
    }
    if n_k != n_q {
        return bail(format!(
            "seqlens_q and seqlens_k should have the same number of elements {n_q} <> {n_k}"
        ));
    }
    Ok(n_q - 1)
}

/// `flash_attn_varlen*`: q `(total_q, h_q, d)`, k and v `(total_k, h_kv, d)`, cumulative
/// `seqlens_q`/`seqlens_k` of `batch + 1` entries.
pub fn varlen_problem(
    q: &View,
    k: &View,
    v: &View,
    batch: usize,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    opts: &Options,
) -> Result<AttentionProblem, ArgError> {
    for t in [q, k, v] {
        t.rank(3, "flash-attn-varlen")?;
        t.inner_contiguous()?;
    }
    let [total_q, h_q, d] = [q.dims[0], q.dims[1], q.dims[2]];
    let [total_k, h_kv, _] = [k.dims[0], k.dims[1], k.dims[2]];
    if k.dims != [total_k, h_kv, d] {
        return bail(format!("shape mismatch q {:?} and k {:?}", q.dims, k.dims));
    }
    if v.dims != k.dims {
        return bail(format!("shape mismatch q {:?} and v {:?}", q.dims, v.dims));
    }
    check_heads(h_q, h_kv)?;
    let (causal, mut modes) = opts.modes(batch, h_q, max_seqlen_k)?;
    modes.packed_q = Some(total_q);
    modes.kv = KvStorage::Packed { total_k };
    let strides = ProblemStrides {
        q: q.packed(),
        k: k.packed(),
        v: v.packed(),
        o: dense_o(q.dims),
    };
    problem(
        batch,
        (h_q, h_kv),
        (max_seqlen_q, max_seqlen_k),
        d,
        opts,
        causal,
        strides,
        modes,
    )
}

/// A paged cache `(num_blocks, page_block_size, h_kv, d)` and its block table
/// `(batch, max_blocks)`: (num_blocks, block_size, heads_kv, max_blocks).
fn paged_cache(
    k: &View,
    v: &View,
    head_dim: usize,
    block_table: &[usize],
    batch: usize,
    page_block_size: Option<usize>,
) -> Result<(KvStorage, usize), ArgError> {
    for t in [k, v] {
        t.rank(4, "paged flash-attn (k/v)")?;
        t.inner_contiguous()?;
    }
    let [num_blocks, block_size, h_kv, d] = [k.dims[0], k.dims[1], k.dims[2], k.dims[3]];
    if v.dims != k.dims {
        return bail(format!("shape mismatch k {:?} and v {:?}", k.dims, v.dims));
    }
    if d != head_dim {
        return bail(format!(
            "head dim of q ({head_dim}) and k {:?} differ",
            k.dims
        ));
    }
    if let Some(p) = page_block_size {
        if p != block_size {
            return bail(format!(
                "page_block_size {p} does not match k shape {:?}",
                k.dims
            ));
        }
    }
    let max_blocks = match block_table {
        [b, m] if *b == batch => *m,
        _ => {
            return bail(format!(
                "block_table must have shape ({batch}, max_blocks), got {block_table:?}"
            ))
        }
    };
    Ok((
        KvStorage::Paged {
            num_blocks,
            block_size,
            max_blocks_per_seq: max_blocks,
        },
        h_kv,
    ))
}

/// `flash_attn_varlen_paged_windowed`: packed q `(total_q, h_q, d)`, paged k/v
/// `(num_blocks, page_block_size, h_kv, d)`, block table `(batch, max_blocks)`. The keys of
/// sequence b are its first `seqlens_k[b+1] - seqlens_k[b]` cache rows (passed to the kernels as
/// `seqused_k`).
#[allow(clippy::too_many_arguments)]
pub fn paged_varlen_problem(
    q: &View,
    k: &View,
    v: &View,
    block_table: &[usize],
    batch: usize,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    page_block_size: usize,
    opts: &Options,
) -> Result<AttentionProblem, ArgError> {
    q.rank(3, "flash-attn-varlen")?;
    q.inner_contiguous()?;
    let [total_q, h_q, d] = [q.dims[0], q.dims[1], q.dims[2]];
    let (kv, h_kv) = paged_cache(k, v, d, block_table, batch, Some(page_block_size))?;
    check_heads(h_q, h_kv)?;
    let capacity = block_table[1] * page_block_size;
    if max_seqlen_k > capacity {
        return bail(format!(
            "max_seqlen_k {max_seqlen_k} exceeds the block table's capacity {capacity}"
        ));
    }
    let (causal, mut modes) = opts.modes(batch, h_q, max_seqlen_k)?;
    modes.packed_q = Some(total_q);
    modes.kv = kv;
    modes.seqused_k = true;
    let strides = ProblemStrides {
        q: q.packed(),
        k: k.bshd(),
        v: v.bshd(),
        o: dense_o(q.dims),
    };
    problem(
        batch,
        (h_q, h_kv),
        (max_seqlen_q, capacity),
        d,
        opts,
        causal,
        strides,
        modes,
    )
}

/// `flash_attn_with_kvcache`: q `(b, s_q, h_q, d)`; a contiguous cache `(b, capacity, h_kv, d)`
/// or, with a block table `(b, max_blocks)`, a paged one `(num_blocks, block_size, h_kv, d)`;
/// `seqused_k` `(b)`; optional `k_new`/`v_new` `(b, s_new, h_kv, d)` (contiguous) appended at
/// `seqused_k[b]` before attending. Windows are clamped to the capacity, as FlashAttention does.
pub fn kvcache_problem(
    q: &View,
    k_cache: &View,
    v_cache: &View,
    seqused_k: &[usize],
    block_table: Option<&[usize]>,
    new: Option<(&View, &View)>,
    opts: &Options,
) -> Result<AttentionProblem, ArgError> {
    q.rank(4, "flash-attn-with-kvcache")?;
    q.inner_contiguous()?;
    let [b, s_q, h_q, d] = [q.dims[0], q.dims[1], q.dims[2], q.dims[3]];
    if seqused_k != [b] {
        return bail(format!(
            "seqused_k must have shape ({b}), got {seqused_k:?}"
        ));
    }
    let (kv, h_kv, capacity, kv_strides) = match block_table {
        Some(table) => {
            let (kv, h_kv) = paged_cache(k_cache, v_cache, d, table, b, None)?;
            let KvStorage::Paged {
                block_size,
                max_blocks_per_seq,
                ..
            } = kv
            else {
                unreachable!()
            };
            (
                kv,
                h_kv,
                block_size * max_blocks_per_seq,
                (k_cache.bshd(), v_cache.bshd()),
            )
        }
        None => {
            for t in [k_cache, v_cache] {
                t.rank(4, "flash-attn-with-kvcache (cache)")?;
                t.inner_contiguous()?;
            }
            let [_, cap, h_kv, _] = [
                k_cache.dims[0],
                k_cache.dims[1],
                k_cache.dims[2],
                k_cache.dims[3],
            ];
            if k_cache.dims != [b, cap, h_kv, d] {
                return bail(format!(
                    "shape mismatch q {:?} and k_cache {:?}",
                    q.dims, k_cache.dims
                ));
            }
            if v_cache.dims != k_cache.dims {
                return bail(format!(
                    "shape mismatch k_cache {:?} and v_cache {:?}",
                    k_cache.dims, v_cache.dims
                ));
            }
            (
                KvStorage::Dense,
                h_kv,
                cap,
                (k_cache.bshd(), v_cache.bshd()),
            )
        }
    };
    check_heads(h_q, h_kv)?;
    let append = match new {
        None => None,
        Some((k_new, v_new)) => {
            for t in [k_new, v_new] {
                t.rank(4, "flash-attn-with-kvcache (k_new/v_new)")?;
                let dense: Vec<usize> = (0..4).map(|i| t.dims[i + 1..].iter().product()).collect();
                if (0..4).any(|i| t.dims[i] > 1 && t.strides[i] != dense[i]) {
                    return bail(format!(
                        "{} must be contiguous (call .contiguous() first), strides {:?}",
                        t.name, t.strides
                    ));
                }
            }
            let s_new = k_new.dims[1];
            if k_new.dims != [b, s_new, h_kv, d] || v_new.dims != k_new.dims {
                return bail(format!(
                    "k_new {:?} and v_new {:?} must both be ({b}, seqlen_new, {h_kv}, {d})",
                    k_new.dims, v_new.dims
                ));
            }
            Some(s_new)
        }
    };
    let (causal, mut modes) = opts.modes(b, h_q, capacity)?;
    modes.kv = kv;
    modes.seqused_k = true;
    modes.append = append;
    let strides = ProblemStrides {
        q: q.bshd(),
        k: kv_strides.0,
        v: kv_strides.1,
        o: dense_o(q.dims),
    };
    problem(
        b,
        (h_q, h_kv),
        (s_q, capacity),
        d,
        opts,
        causal,
        strides,
        modes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense(dims: &[usize]) -> Vec<usize> {
        (0..dims.len())
            .map(|i| dims[i + 1..].iter().product())
            .collect()
    }

    fn opts() -> Options {
        Options::new(DType::F16, 0.125)
    }

    #[test]
    fn causal_and_window_conventions() {
        // flash_attn(causal = true) passes (None, Some(0)).
        assert_eq!(
            masking(None, Some(0), 100),
            Masking {
                causal: true,
                window_left: None,
                window_right: None
            }
        );
        assert_eq!(masking(None, None, 100), masking(Some(101), Some(500), 100));
        assert!(!masking(None, None, 100).causal);
        // One-sided windows get seqlen_k on the other side, as FlashAttention 2 does.
        assert_eq!(
            masking(Some(16), None, 100),
            Masking {
                causal: false,
                window_left: Some(16),
                window_right: Some(100)
            }
        );
        assert_eq!(
            masking(None, Some(4), 100),
            Masking {
                causal: false,
                window_left: Some(100),
                window_right: Some(4)
            }
        );
        // A left window with right = 0 is local causal attention, not plain causal.
        assert_eq!(
            masking(Some(8), Some(0), 100),
            Masking {
                causal: false,
                window_left: Some(8),
                window_right: Some(0)
            }
        );
        // A left window larger than seqlen_k counts as none: then right = 0 is causal.
        assert!(masking(Some(1000), Some(0), 100).causal);
    }

    #[test]
    fn dtype_rules() {
        assert_eq!(dtype_of("flash-attn", "f16", "f16", "f16"), Ok(DType::F16));
        assert_eq!(
            dtype_of("flash-attn", "bf16", "bf16", "bf16"),
            Ok(DType::Bf16)
        );
        assert!(dtype_of("flash-attn", "f32", "f32", "f32")
            .unwrap_err()
            .0
            .contains("only supported for f16/bf16"));
        assert!(dtype_of("flash-attn", "f16", "bf16", "f16").is_err());
    }

    #[test]
    fn softcap_zero_is_off() {
        assert_eq!(softcap(Some(0.0)), Ok(None));
        assert_eq!(softcap(None), Ok(None));
        assert_eq!(softcap(Some(30.0)), Ok(Some(30.0)));
        assert!(softcap(Some(f32::NAN)).is_err());
    }

    #[test]
    fn dense_contiguous_gqa() {
        let (qd, kd) = ([2, 7, 8, 64], [2, 9, 2, 64]);
        let (qs, ks) = (dense(&qd), dense(&kd));
        let p = dense_problem(
            &View::new("q", &qd, &qs),
            &View::new("k", &kd, &ks),
            &View::new("v", &kd, &ks),
            &opts().with_window(None, Some(0)),
        )
        .unwrap();
        assert_eq!(
            (p.batch, p.seq_q, p.seq_k, p.heads_q, p.heads_kv, p.head_dim),
            (2, 7, 9, 8, 2, 64)
        );
        assert!(p.causal);
        assert_eq!(p.softmax_scale, Some(0.125));
        let s = p.strides();
        assert_eq!(
            s.q,
            TensorStrides {
                batch: 7 * 8 * 64,
                row: 8 * 64,
                head: 64
            }
        );
        assert_eq!(
            s.k,
            TensorStrides {
                batch: 9 * 2 * 64,
                row: 2 * 64,
                head: 64
            }
        );
        assert_eq!(s.o, s.q);
        assert!(p.modes.is_dense());
    }

    #[test]
    fn the_batch_invariant_switch_reaches_the_problem() {
        let (qd, kd) = ([2, 7, 8, 64], [2, 9, 2, 64]);
        let (qs, ks) = (dense(&qd), dense(&kd));
        let build = || {
            dense_problem(
                &View::new("q", &qd, &qs),
                &View::new("k", &kd, &ks),
                &View::new("v", &kd, &ks),
                &opts(),
            )
            .unwrap()
        };
        assert!(!batch_invariant());
        assert!(!build().batch_invariant);
        set_batch_invariant(true);
        let on = build().batch_invariant;
        set_batch_invariant(false);
        assert!(on);
        assert!(!build().batch_invariant);
    }

    #[test]
    fn strided_views_are_taken() {
        // q, k, v as slices of a packed qkv tensor (b, s, 3 * h, d): k starts h heads in.
        let (b, s, h, d) = (2, 5, 4, 64);
        let qkv_strides = [s * 3 * h * d, 3 * h * d, d, 1];
        let dims = [b, s, h, d];
        let p = dense_problem(
            &View::new("q", &dims, &qkv_strides),
            &View::new("k", &dims, &qkv_strides),
            &View::new("v", &dims, &qkv_strides),
            &opts(),
        )
        .unwrap();
        assert_eq!(p.strides().q.row, 3 * h * d);
        assert_eq!(p.strides().o.row, h * d, "O is allocated contiguous");
        // A transposed (b, h, s, d) tensor viewed as (b, s, h, d).
        let t_strides = [h * s * d, d, s * d, 1];
        let p = dense_problem(
            &View::new("q", &dims, &t_strides),
            &View::new("k", &dims, &t_strides),
            &View::new("v", &dims, &t_strides),
            &opts(),
        )
        .unwrap();
        assert_eq!(
            p.strides().q,
            TensorStrides {
                batch: h * s * d,
                row: d,
                head: s * d
            }
        );
    }

    #[test]
    fn extent_one_axes_get_dense_strides() {
        let dims = [1, 1, 8, 64];
        let odd = [3, 5, 64, 1];
        let p = dense_problem(
            &View::new("q", &dims, &odd),
            &View::new("k", &dims, &odd),
            &View::new("v", &dims, &odd),
            &opts(),
        )
        .unwrap();
        assert_eq!(
            p.strides().q,
            TensorStrides {
                batch: 8 * 64,
                row: 8 * 64,
                head: 64
            }
        );
    }

    #[test]
    fn refusals_name_the_problem() {
        let dims = [1, 4, 2, 64];
        let s = dense(&dims);
        let non_contig = [512, 128, 1, 2];
        let err = dense_problem(
            &View::new("q", &dims, &non_contig),
            &View::new("k", &dims, &s),
            &View::new("v", &dims, &s),
            &opts(),
        )
        .unwrap_err();
        assert!(err.0.contains("last dim of q must be contiguous"), "{err}");
        let k3 = [1, 4, 3, 64];
        let err = dense_problem(
            &View::new("q", &dims, &s),
            &View::new("k", &k3, &dense(&k3)),
            &View::new("v", &k3, &dense(&k3)),
            &opts(),
        )
        .unwrap_err();
        assert!(err.0.contains("must divide"), "{err}");
        let r3 = [4, 2, 64];
        let err = dense_problem(
            &View::new("q", &r3, &dense(&r3)),
            &View::new("k", &dims, &s),
            &View::new("v", &dims, &s),
            &opts(),
        )
        .unwrap_err();
        assert!(err.0.contains("rank 4"), "{err}");
        let err = dense_problem(
            &View::new("q", &dims, &s),
            &View::new("k", &dims, &s),
            &View::new("v", &dims, &s),
            &opts().with_alibi(&[3]),
        )
        .unwrap_err();
        assert!(err.0.contains("alibi_slopes"), "{err}");
    }

    #[test]
    fn modes_carry_over() {
        let dims = [2, 4, 2, 64];
        let s = dense(&dims);
        let p = dense_problem(
            &View::new("q", &dims, &s),
            &View::new("k", &dims, &s),
            &View::new("v", &dims, &s),
            &opts()
                .with_window(Some(2), Some(1))
                .with_softcap(Some(20.0))
                .with_alibi(&[2]),
        )
        .unwrap();
        assert_eq!(p.modes.window_left, Some(2));
        assert_eq!(p.modes.window_right, Some(1));
        assert_eq!(p.modes.softcap, Some(20.0));
        assert_eq!(p.modes.alibi, Some(AlibiSlopes::PerHead));
        assert!(!p.causal);
    }

    #[test]
    fn varlen() {
        assert_eq!(cu_seqlens_batch(&[4], &[4]), Ok(3));
        assert!(cu_seqlens_batch(&[1], &[1]).is_err());
        assert!(cu_seqlens_batch(&[4], &[3]).is_err());
        let (qd, kd) = ([30, 8, 128], [50, 4, 128]);
        let p = varlen_problem(
            &View::new("q", &qd, &dense(&qd)),
            &View::new("k", &kd, &dense(&kd)),
            &View::new("v", &kd, &dense(&kd)),
            3,
            12,
            20,
            &opts().with_window(None, Some(0)),
        )
        .unwrap();
        assert_eq!(p.modes.packed_q, Some(30));
        assert_eq!(p.modes.kv, KvStorage::Packed { total_k: 50 });
        assert_eq!((p.batch, p.seq_q, p.seq_k), (3, 12, 20));
        assert!(p.causal);
        assert_eq!(
            p.strides().k,
            TensorStrides {
                batch: 0,
                row: 4 * 128,
                head: 128
            }
        );
        assert_eq!(p.q_len(), 30 * 8 * 128);
    }

    #[test]
    fn paged() {
        let qd = [10, 8, 64];
        let kd = [16, 32, 2, 64];
        let p = paged_varlen_problem(
            &View::new("q", &qd, &dense(&qd)),
            &View::new("k", &kd, &dense(&kd)),
            &View::new("v", &kd, &dense(&kd)),
            &[2, 4],
            2,
            6,
            100,
            32,
            &opts().with_softcap(Some(10.0)),
        )
        .unwrap();
        assert_eq!(
            p.modes.kv,
            KvStorage::Paged {
                num_blocks: 16,
                block_size: 32,
                max_blocks_per_seq: 4
            }
        );
        assert!(p.modes.seqused_k);
        assert_eq!(p.seq_k, 128);
        // Wrong page size, table shape, capacity.
        assert!(paged_varlen_problem(
            &View::new("q", &qd, &dense(&qd)),
            &View::new("k", &kd, &dense(&kd)),
            &View::new("v", &kd, &dense(&kd)),
            &[2, 4],
            2,
            6,
            100,
            16,
            &opts(),
        )
        .is_err());
        assert!(paged_varlen_problem(
            &View::new("q", &qd, &dense(&qd)),
            &View::new("k", &kd, &dense(&kd)),
            &View::new("v", &kd, &dense(&kd)),
            &[3, 4],
            2,
            6,
            100,
            32,
            &opts(),
        )
        .is_err());
        assert!(paged_varlen_problem(
            &View::new("q", &qd, &dense(&qd)),
            &View::new("k", &kd, &dense(&kd)),
            &View::new("v", &kd, &dense(&kd)),
            &[2, 4],
            2,
            6,
            200,
            32,
            &opts(),
        )
        .is_err());
        // flashcore pages are multiples of 16 up to 256: a 512-row page is refused.
        let big = [4, 512, 2, 64];
        let err = paged_varlen_problem(
            &View::new("q", &qd, &dense(&qd)),
            &View::new("k", &big, &dense(&big)),
            &View::new("v", &big, &dense(&big)),
            &[2, 1],
            2,
            6,
            100,
            512,
            &opts(),
        )
        .unwrap_err();
        assert!(err.0.contains("block_size"), "{err}");
    }

    #[test]
    fn kvcache() {
        let qd = [2, 1, 8, 64];
        let cd = [2, 256, 2, 64];
        let nd = [2, 1, 2, 64];
        let p = kvcache_problem(
            &View::new("q", &qd, &dense(&qd)),
            &View::new("k_cache", &cd, &dense(&cd)),
            &View::new("v_cache", &cd, &dense(&cd)),
            &[2],
            None,
            Some((
                &View::new("k_new", &nd, &dense(&nd)),
                &View::new("v_new", &nd, &dense(&nd)),
            )),
            &opts().with_window(None, Some(0)),
        )
        .unwrap();
        assert_eq!(p.modes.append, Some(1));
        assert!(p.modes.seqused_k);
        assert_eq!(p.seq_k, 256);
        assert!(p.causal);
        // Paged, no append.
        let pd = [8, 64, 2, 64];
        let p = kvcache_problem(
            &View::new("q", &qd, &dense(&qd)),
            &View::new("k_cache", &pd, &dense(&pd)),
            &View::new("v_cache", &pd, &dense(&pd)),
            &[2],
            Some(&[2, 3]),
            None,
            &opts(),
        )
        .unwrap();
        assert_eq!(p.seq_k, 192);
        assert_eq!(p.modes.append, None);
        // A non-contiguous k_new is refused.
        let nt = [128, 128, 1, 2];
        assert!(kvcache_problem(
            &View::new("q", &qd, &dense(&qd)),
            &View::new("k_cache", &cd, &dense(&cd)),
            &View::new("v_cache", &cd, &dense(&cd)),
            &[2],
            None,
            Some((
                &View::new("k_new", &nd, &nt),
                &View::new("v_new", &nd, &dense(&nd)),
            )),
            &opts(),
        )
        .is_err());
    }
}
