//! FlashAttention 2's argument conventions (as candle-flash-attn and `flash_attn_interface` take
//! them) turned into an [`AttentionProblem`]: the one place the bindings' rules live
//! (flashcore-candle, the Python package). Shapes and strides come in as plain numbers (a candle
//! `Layout`'s `dims()`/`stride()`, a torch tensor's `shape`/`stride()`), so all of this is
//! unit-tested without a framework or a GPU.

use crate::{
    AlibiSlopes, AttentionProblem, DType, KvScales, KvStorage, Layout, Modes, ProblemStrides,
    TensorStrides,
};

/// Why a call is refused before anything launches. Each binding turns it into its own error.
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

/// Whether a dtype name is OCP FP8 E4M3 (`e4m3fn`) as the bindings spell it: `"e4m3"` (the
/// Python package's name for `torch.float8_e4m3fn`, and the core's) or candle's `"f8e4m3"`.
pub fn is_e4m3(name: &str) -> bool {
    matches!(name, "e4m3" | "f8e4m3")
}

/// The element types of a call whose K/V may be an e4m3 (fp8) cache: Q's dtype (f16 or bf16,
/// [`dtype_of`]'s rule) and whether K and V are e4m3 bytes (`Modes::kv_fp8`, FlashAttention 3's
/// fp8 KV cache). K and V are both Q's dtype or both e4m3; Q (and so O) is never fp8 here (an
/// e4m3 Q is the dense fp8 forward's, [`qkv_dtype_of`]), and no other 8-bit format (e5m2,
/// e4m3fnuz) is taken.
pub fn kv_dtype_of(name: &str, q: &str, k: &str, v: &str) -> Result<(DType, bool), ArgError> {
    if is_e4m3(q) {
        return bail(format!(
            "{name}: q is {q}; only K/V (the cache) may be fp8 e4m3, q must be f16/bf16 (the \
             output takes q's dtype)"
        ));
    }
    match (is_e4m3(k), is_e4m3(v)) {
        (true, true) => dtype_of(name, q, q, q).map(|d| (d, true)),
        (false, false) => {
            let dtype = dtype_of(name, q, q, q)?;
            for (t, d) in [("k", k), ("v", v)] {
                if d != q {
                    return bail(format!(
                        "dtype mismatch: q is {q} but {t} is {d} (K/V must be q's dtype, or both \
                         e4m3 for an fp8 KV cache)"
                    ));
                }
            }
            Ok((dtype, false))
        }
        _ => bail(format!(
            "k is {k} but v is {v}: K and V must both be e4m3 (an fp8 KV cache) or both q's \
             dtype ({q})"
        )),
    }
}

/// O's dtype in FlashAttention 3's fp8 forward (Q, K and V all e4m3): bf16, as FlashAttention 3
/// writes it.
pub const FP8_OUT: DType = DType::Bf16;

/// The element types of a dense call whose Q may be e4m3 too (FlashAttention 3's fp8 forward,
/// `Modes::q_fp8`): with an e4m3 Q, K and V must both be e4m3 and the problem's dtype (O's) is
/// [`FP8_OUT`]; with a 16-bit Q, [`kv_dtype_of`]'s rules. Returns (the problem's dtype, whether
/// K and V are e4m3, whether Q is).
pub fn qkv_dtype_of(
    name: &str,
    q: &str,
    k: &str,
    v: &str,
) -> Result<(DType, bool, bool), ArgError> {
    if !is_e4m3(q) {
        return kv_dtype_of(name, q, k, v).map(|(dtype, kv_e4m3)| (dtype, kv_e4m3, false));
    }
    if is_e4m3(k) && is_e4m3(v) {
        return Ok((FP8_OUT, true, true));
    }
    bail(format!(
        "{name}: q is {q} (FlashAttention 3's fp8 forward), so k and v must be e4m3 too; k is \
         {k}, v is {v}"
    ))
}

/// A `k_descale` / `v_descale` tensor of an e4m3 KV cache as the rules see it: f32, of
/// FlashAttention 3's shape `(batch, nheads_k)`, or `(nheads_k,)`, or one element; the true value
/// of a stored byte is its e4m3 value times the factor of its (sequence, KV head). Which
/// [`KvScales`] it is read as depends on its strides too ([`Descale::scales`]): a
/// `(batch, nheads_k)` view expanded from one factor per head (batch stride 0) or from one
/// factor (all strides 0), as serving engines pass them, is read without a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descale {
    name: &'static str,
    dims: [usize; 2],
    strides: [usize; 2],
    /// 0 for a tensor of one element (whatever its rank), else 1 or 2.
    rank: usize,
}

impl Descale {
    /// `dtype` as the binding spells it (`"f32"`); dims and strides in elements.
    pub fn new(
        name: &'static str,
        dtype: &str,
        dims: &[usize],
        strides: &[usize],
    ) -> Result<Self, ArgError> {
        if dtype != "f32" {
            return bail(format!("{name} must be f32 (float32), got {dtype}"));
        }
        if dims.len() != strides.len() {
            return bail(format!(
                "{name}: {} dims but {} strides",
                dims.len(),
                strides.len()
            ));
        }
        let mut d = Descale {
            name,
            dims: [0; 2],
            strides: [0; 2],
            rank: 0,
        };
        if dims.iter().product::<usize>() == 1 {
            return Ok(d);
        }
        if dims.is_empty() || dims.len() > 2 {
            return bail(format!(
                "{name} must have shape (batch, nheads_k), (nheads_k,) or one element, got \
                 {dims:?}"
            ));
        }
        d.rank = dims.len();
        d.dims[..d.rank].copy_from_slice(dims);
        d.strides[..d.rank].copy_from_slice(strides);
        Ok(d)
    }

    /// The table's shape for a problem of `batch` sequences and `heads_kv` KV heads, read from
    /// the (batch, head) strides the kernels index it with (an axis of extent 1 has none):
    /// (0, 0) is one factor, (0, 1) one per KV head, (heads_kv, 1) one per (sequence, KV head).
    pub fn scales(&self, batch: usize, heads_kv: usize) -> Result<KvScales, ArgError> {
        let name = self.name;
        let along = |i: usize, extent: usize| if extent == 1 { 0 } else { self.strides[i] };
        let (sb, sh) = match self.rank {
            0 => (0, 0),
            1 if self.dims[0] == heads_kv => (0, along(0, heads_kv)),
            2 if self.dims == [batch, heads_kv] => (along(0, batch), along(1, heads_kv)),
            _ => {
                return bail(format!(
                    "{name} must have shape ({batch}, {heads_kv}) (batch, nheads_k), \
                     ({heads_kv},) (nheads_k,) or one element, got {:?}",
                    &self.dims[..self.rank]
                ))
            }
        };
        match (sb, sh) {
            (0, 0) => Ok(KvScales::PerTensor),
            (0, 1) => Ok(KvScales::PerKvHead),
            (b, 1) if b == heads_kv => Ok(KvScales::PerBatchKvHead),
            (1, 0) if heads_kv == 1 => Ok(KvScales::PerBatchKvHead),
            _ => bail(format!(
                "{name} with strides {:?} is not a table the kernels can read: it must be \
                 contiguous, or expanded along the batch (stride 0) or from one element (call \
                 .contiguous() first)",
                &self.strides[..self.rank]
            )),
        }
    }
}

/// The descale tables of a call: given exactly when K/V are e4m3 (`e4m3`, as [`kv_dtype_of`]
/// says). FlashAttention 3 reads a missing descale as 1.0; the bindings do so by passing a
/// table of ones in its place, so that a call reaching this rule without one is a bug in the
/// binding, not the caller's.
pub fn kv_descales(
    e4m3: bool,
    k_descale: Option<Descale>,
    v_descale: Option<Descale>,
) -> Result<Option<(Descale, Descale)>, ArgError> {
    match (e4m3, k_descale, v_descale) {
        (true, Some(k), Some(v)) => Ok(Some((k, v))),
        (false, None, None) => Ok(None),
        (true, k, _) => bail(format!(
            "an e4m3 (fp8) KV cache needs both k_descale and v_descale; {} is missing",
            if k.is_none() {
                "k_descale"
            } else {
                "v_descale"
            }
        )),
        (false, k, _) => bail(format!(
            "{} is given, but K/V are not e4m3: descales scale an fp8 (e4m3) KV cache only",
            if k.is_some() {
                "k_descale"
            } else {
                "v_descale"
            }
        )),
    }
}

/// The one [`KvScales`] of both descale tables (the kernels index them alike).
fn kv_scales(
    (k, v): (Descale, Descale),
    batch: usize,
    heads_kv: usize,
) -> Result<KvScales, ArgError> {
    let (ks, vs) = (k.scales(batch, heads_kv)?, v.scales(batch, heads_kv)?);
    if ks != vs {
        return bail(format!(
            "k_descale ({}) and v_descale ({}) must be laid out alike: both (batch, nheads_k), \
             both (nheads_k,) or both one element, with the same strides",
            read_as(ks),
            read_as(vs)
        ));
    }
    Ok(ks)
}

/// How the kernels read a descale table of this shape, in words.
fn read_as(s: KvScales) -> &'static str {
    match s {
        KvScales::PerTensor => "one factor",
        KvScales::PerKvHead => "one factor per KV head",
        KvScales::PerBatchKvHead => "one factor per (sequence, KV head)",
    }
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

/// candle-flash-attn's `mm_prefix_ranges` (of `flash_attn_varlen_paged_windowed`): an i32 tensor
/// `(batch, max_ranges, 2)` of `[start, end)` key positions per sequence; a query whose position
/// lies in a range also sees every key of that range, whatever the causal mask and the window
/// say (flashcore's `docs/MODES.md`). Returns the ranges per sequence for `Modes::mm_prefix`:
/// `None` for `max_ranges = 0`, which masks nothing, as in candle-flash-attn. Only i32 is taken,
/// as there: a u32 table's entries past `i32::MAX` would read as negative, unused pairs.
pub fn mm_prefix_ranges(
    dtype: &str,
    dims: &[usize],
    batch: usize,
) -> Result<Option<usize>, ArgError> {
    if dtype != "i32" {
        return bail(format!("mm_prefix_ranges must be i32, got {dtype}"));
    }
    match dims {
        [b, n, 2] if *b == batch => Ok((*n > 0).then_some(*n)),
        _ => bail(format!(
            "mm_prefix_ranges shape must be ({batch}, max_ranges, 2), got {dims:?}"
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
    /// Ranges per sequence of the mm_prefix_ranges tensor ([`mm_prefix_ranges`]), when given.
    pub mm_prefix: Option<usize>,
    /// K/V are e4m3 bytes with these descale tables ([`kv_descales`]).
    pub kv_fp8: Option<(Descale, Descale)>,
    /// Q is e4m3 bytes too, with this descale table ([`Options::with_q_fp8`]).
    pub q_fp8: Option<Descale>,
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
            mm_prefix: None,
            kv_fp8: None,
            q_fp8: None,
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

    /// Ranges per sequence of the mm_prefix_ranges table, as [`mm_prefix_ranges`] gives them.
    pub fn with_mm_prefix(mut self, ranges: Option<usize>) -> Self {
        self.mm_prefix = ranges;
        self
    }

    /// K/V as e4m3 bytes with these descales ([`kv_descales`]'s answer; `None`: Q's dtype).
    pub fn with_kv_fp8(mut self, descales: Option<(Descale, Descale)>) -> Self {
        self.kv_fp8 = descales;
        self
    }

    /// Q as e4m3 bytes too when `q_e4m3` (FlashAttention 3's fp8 forward, `Modes::q_fp8`, as
    /// [`qkv_dtype_of`] says), read through `q_descale`, which is given exactly then (the
    /// bindings pass a table of ones for a missing one, FlashAttention 3's 1.0, as for K/V). The
    /// problem then checks it against the problem's shape and K's table: all three descales are
    /// laid out alike (the kernels index Q's table as K's, a query head reading its KV head's
    /// factor), and the core's rules hold (Q's strides in whole 16-byte copies). Which kernels
    /// take such a problem (head dims, modes, architectures) is theirs to say when it is planned.
    pub fn with_q_fp8(
        mut self,
        q_e4m3: bool,
        q_descale: Option<Descale>,
    ) -> Result<Self, ArgError> {
        self.q_fp8 = match (q_e4m3, q_descale) {
            (false, None) => None,
            (false, Some(_)) => {
                return bail(
                    "q_descale is given, but q is not e4m3: it scales an fp8 (e4m3) q only \
                     (FlashAttention 3's fp8 forward takes q, k and v all e4m3)",
                )
            }
            (true, None) => return bail("an e4m3 (fp8) q needs q_descale; none was given"),
            (true, Some(d)) => Some(d),
        };
        Ok(self)
    }

    fn modes(
        &self,
        batch: usize,
        (heads_q, heads_kv): (usize, usize),
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
        // Q's table first: when only it was given, K's and V's are ones shaped as it.
        let q_fp8 = self.q_fp8.map(|d| d.scales(batch, heads_kv)).transpose()?;
        let kv_fp8 = self
            .kv_fp8
            .map(|d| kv_scales(d, batch, heads_kv))
            .transpose()?;
        match (q_fp8, kv_fp8) {
            (Some(_), None) => {
                return bail(
                    "an e4m3 (fp8) q needs e4m3 k and v (FlashAttention 3's fp8 forward), with \
                     k_descale and v_descale",
                )
            }
            (Some(qs), Some(kv)) if qs != kv => {
                return bail(format!(
                    "q_descale ({}) and k_descale/v_descale ({}) must be laid out alike: all \
                     three (batch, nheads_k), all (nheads_k,) or all one element, with the same \
                     strides (Q's table is indexed as K's)",
                    read_as(qs),
                    read_as(kv)
                ))
            }
            _ => {}
        }
        Ok((
            m.causal,
            Modes {
                window_left: m.window_left,
                window_right: m.window_right,
                softcap: softcap(self.softcap)?,
                alibi,
                mm_prefix: self.mm_prefix,
                kv_fp8,
                q_fp8: q_fp8.is_some(),
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
    (head_dim, head_dim_v): (usize, usize),
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
        head_dim_v: (head_dim_v != head_dim).then_some(head_dim_v),
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

/// Whether the bindings carry a forward problem's backward into autograd, and why not: dense
/// and varlen (packed) problems, causal or not, GQA/MQA, with sliding windows, softcap and ALiBi
/// have one (the kernels that take each are the core's to say: `first_backward_that_takes`).
/// Refused here, in the API's words: fp8 (e4m3) inputs, paged K/V and KV caches (`seqused_k`,
/// appended rows) and `mm_prefix_ranges`, which no backward takes. A binding raises the reason
/// as "not implemented", not as bad input.
pub fn backward_refusal(p: &AttentionProblem) -> Result<(), ArgError> {
    let m = &p.modes;
    let what = if m.kv_fp8.is_some() || m.q_fp8 {
        "fp8 (e4m3) inputs are inference only"
    } else if matches!(m.kv, KvStorage::Paged { .. }) {
        "a paged K/V (block_table) is inference only"
    } else if m.seqused_k || m.append.is_some() {
        "a KV cache (seqused_k, appended rows) is inference only"
    } else if m.mm_prefix.is_some() {
        "mm_prefix_ranges has no backward"
    } else {
        return Ok(());
    };
    bail(format!(
        "{what}: the backward pass takes f16/bf16 dense or varlen (packed) attention, causal or \
         not, with sliding windows, softcap and ALiBi"
    ))
}

/// The output O's dims: Q's, with V's head dim last (FlashAttention 3's `headdim_v`).
pub fn o_dims(q_dims: &[usize], head_dim_v: usize) -> Vec<usize> {
    let mut d = q_dims.to_vec();
    if let Some(last) = d.last_mut() {
        *last = head_dim_v;
    }
    d
}

/// V's head dim: its last dim, which FlashAttention 3 lets differ from Q's and K's (`headdim_v`:
/// DeepSeek-V2/V3 prefill has 192 and 128). Kernels that take one head dim refuse the problem
/// as `Unsupported`.
fn head_dim_v(v: &View) -> usize {
    v.dims.last().copied().unwrap_or(0)
}

/// Whether `v` has `k`'s dims except (perhaps) the last.
fn v_matches_k(k: &View, v: &View) -> bool {
    let n = k.dims.len();
    v.dims.len() == n && v.dims[..n - 1] == k.dims[..n - 1]
}

/// Dense strides of the output O, which the ops allocate contiguous with [`o_dims`].
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

/// `flash_attn*`: q `(b, s_q, h_q, d)`, k `(b, s_k, h_kv, d)`, v `(b, s_k, h_kv, d_v)`; O is
/// `(b, s_q, h_q, d_v)` ([`o_dims`]).
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
    if !v_matches_k(k, v) {
        return bail(format!("shape mismatch k {:?} and v {:?}", k.dims, v.dims));
    }
    let dv = head_dim_v(v);
    check_heads(h_q, h_kv)?;
    let (causal, modes) = opts.modes(b, (h_q, h_kv), s_k)?;
    let strides = ProblemStrides {
        q: q.bshd(),
        k: k.bshd(),
        v: v.bshd(),
        o: dense_o(&o_dims(q.dims, dv)),
    };
    problem(
        b,
        (h_q, h_kv),
        (s_q, s_k),
        (d, dv),
        opts,
        causal,
        strides,
        modes,
    )
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

/// `flash_attn_varlen*`: q `(total_q, h_q, d)`, k `(total_k, h_kv, d)`, v `(total_k, h_kv, d_v)`,
/// cumulative
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
    if !v_matches_k(k, v) {
        return bail(format!("shape mismatch k {:?} and v {:?}", k.dims, v.dims));
    }
    let dv = head_dim_v(v);
    check_heads(h_q, h_kv)?;
    let (causal, mut modes) = opts.modes(batch, (h_q, h_kv), max_seqlen_k)?;
    modes.packed_q = Some(total_q);
    modes.kv = KvStorage::Packed { total_k };
    let strides = ProblemStrides {
        q: q.packed(),
        k: k.packed(),
        v: v.packed(),
        o: dense_o(&o_dims(q.dims, dv)),
    };
    problem(
        batch,
        (h_q, h_kv),
        (max_seqlen_q, max_seqlen_k),
        (d, dv),
        opts,
        causal,
        strides,
        modes,
    )
}

/// A paged cache `(num_blocks, page_block_size, h_kv, d)` (V's last dim may differ) and its
/// block table `(batch, max_blocks)`: (num_blocks, block_size, heads_kv, max_blocks).
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
    if !v_matches_k(k, v) {
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
    let (causal, mut modes) = opts.modes(batch, (h_q, h_kv), max_seqlen_k)?;
    modes.packed_q = Some(total_q);
    modes.kv = kv;
    modes.seqused_k = true;
    let dv = head_dim_v(v);
    let strides = ProblemStrides {
        q: q.packed(),
        k: k.bshd(),
        v: v.bshd(),
        o: dense_o(&o_dims(q.dims, dv)),
    };
    problem(
        batch,
        (h_q, h_kv),
        (max_seqlen_q, capacity),
        (d, dv),
        opts,
        causal,
        strides,
        modes,
    )
}

/// `flash_attn_with_kvcache`: q `(b, s_q, h_q, d)`; a contiguous cache `(b, capacity, h_kv, d)`
/// or, with a block table `(b, max_blocks)`, a paged one `(num_blocks, block_size, h_kv, d)`;
/// `seqused_k` `(b)`; optional `k_new`/`v_new` `(b, s_new, h_kv, d)` (contiguous) appended at
/// `seqused_k[b]` before attending. V's caches and rows may have their own last dim (O then
/// has it), as FlashAttention 3 allows. Windows are clamped to the capacity, as FlashAttention does.
/// With `opts.kv_fp8` ([`Options::with_kv_fp8`]) the caches are e4m3 bytes (strides in bytes)
/// read through their descales, and `k_new`/`v_new` stay in Q's dtype: the append quantizes
/// them (FlashAttention 3's fp8 KV cache).
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
            if !v_matches_k(k_cache, v_cache) {
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
            let dv = head_dim_v(v_cache);
            if k_new.dims != [b, s_new, h_kv, d] || v_new.dims != [b, s_new, h_kv, dv] {
                return bail(format!(
                    "k_new {:?} and v_new {:?} must be ({b}, seqlen_new, {h_kv}, {d}) and \
                     ({b}, seqlen_new, {h_kv}, {dv})",
                    k_new.dims, v_new.dims
                ));
            }
            Some(s_new)
        }
    };
    let (causal, mut modes) = opts.modes(b, (h_q, h_kv), capacity)?;
    modes.kv = kv;
    modes.seqused_k = true;
    modes.append = append;
    let dv = head_dim_v(v_cache);
    let strides = ProblemStrides {
        q: q.bshd(),
        k: kv_strides.0,
        v: kv_strides.1,
        o: dense_o(&o_dims(q.dims, dv)),
    };
    problem(
        b,
        (h_q, h_kv),
        (s_q, capacity),
        (d, dv),
        opts,
        causal,
        strides,
        modes,
    )
}

#[cfg(test)]
mod tests;
