//! flashcore-candle: the functions of `candle-flash-attn` 0.11 — same names, arguments,
//! `(batch, seq, heads, head_dim)` layouts and dtype rules — backed by flashcore's kernels,
//! which NVRTC compiles at run time: no nvcc, CUTLASS or FlashAttention build. Switching is one
//! line:
//!
//! ```ignore
//! // use candle_flash_attn::flash_attn;
//! use flashcore_candle::flash_attn;
//! ```
//!
//! Each function is a candle `CustomOp` on candle's own CUDA storage: it takes the tensors'
//! device pointers and strides as they are (any view whose head dimension is contiguous; a
//! generation that cannot take a view's alignment falls through to one that can), allocates the
//! output with candle's allocator, and queues the kernel picked by `flashcore::best_for` on
//! candle's stream, with no synchronisation and no copies. Anything flashcore does not implement
//! (e.g. pages larger than 256 rows, or `mm_prefix_ranges` where no compiled-in generation takes
//! them) is a candle error saying why, never a wrong answer.
//!
//! Conventions are candle-flash-attn's: `window_size_left = None, window_size_right = Some(0)`
//! is causal (bottom-right aligned when `seq_q != seq_k`), a window larger than the key length
//! counts as none, `softcap = 0.0` is off, ALiBi slopes are f32 `(num_heads_q)` (or
//! `(batch, num_heads_q)`), cumulative `seqlens` are u32 (i32 taken too).
//!
//! Beyond candle-flash-attn: [`flash_attn_with_kvcache`] (FlashAttention's KV-cache entry:
//! `seqused_k`, an optional block table, optional `k_new`/`v_new` appended in place), and
//! [`flash_attn_with_kvcache_fp8`] on an fp8 (`F8E4M3`) cache with FlashAttention 3's
//! `k_descale`/`v_descale`, and [`flash_attn_fp8`], FlashAttention 3's fp8 forward (e4m3 Q, K
//! and V with their descales, O in bf16).
//!
//! The candle half needs the crate feature `cuda` (candle-core with its CUDA backend); without
//! it only [`args`], the argument rules, is compiled (and unit-tested, with the KV-cache op's
//! own rules on candle's CPU tensors).

/// The argument rules, shared with flashcore's other bindings.
pub use flashcore::fa_args as args;

pub use args::{batch_invariant, set_batch_invariant};

#[cfg(any(test, feature = "cuda"))]
mod attn;
#[cfg(any(test, feature = "cuda"))]
mod fp8;
#[cfg(any(test, feature = "cuda"))]
mod kvcache;
#[cfg(feature = "cuda")]
mod ops;
#[cfg(test)]
mod test_tensors;

#[cfg(feature = "cuda")]
pub use api::*;

#[cfg(feature = "cuda")]
pub use candle;

#[cfg(feature = "cuda")]
pub use attn::{FlashAttn, FlashAttnVarLen};
#[cfg(feature = "cuda")]
pub use fp8::FlashAttnFp8;
#[cfg(feature = "cuda")]
pub use kvcache::FlashAttnKvCache;
#[cfg(feature = "cuda")]
pub use ops::flashcore_device;

#[cfg(feature = "cuda")]
mod api {
    use candle::{Result, Tensor};

    use crate::attn::{FlashAttn, FlashAttnVarLen};
    use crate::fp8::FlashAttnFp8;
    use crate::kvcache::FlashAttnKvCache;

    #[allow(clippy::too_many_arguments)]
    fn dense(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        softmax_scale: f32,
        alibi_slopes: Option<&Tensor>,
        window_size_left: Option<usize>,
        window_size_right: Option<usize>,
        softcap: Option<f32>,
    ) -> Result<Tensor> {
        let op = FlashAttn {
            softmax_scale,
            alibi_slopes: alibi_slopes.cloned(),
            window_size_left,
            window_size_right,
            softcap,
        };
        q.apply_op3(k, v, op)
    }

    fn causal_window(causal: bool) -> (Option<usize>, Option<usize>) {
        (None, if causal { Some(0) } else { None })
    }

    /// Scaled dot-product attention `softmax(Q Kᵀ · softmax_scale) V` (candle-flash-attn's
    /// `flash_attn`). `q`: `(batch, seq_len_q, num_heads_q, head_size)`, `k`/`v`:
    /// `(batch, seq_len_kv, num_heads_kv, head_size)` with `num_heads_kv` dividing
    /// `num_heads_q` (GQA/MQA). Returns `(batch, seq_len_q, num_heads_q, head_size)`.
    /// Differentiable: candle's autograd gets dQ, dK, dV from flashcore's backward kernels.
    pub fn flash_attn(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        softmax_scale: f32,
        causal: bool,
    ) -> Result<Tensor> {
        let (l, r) = causal_window(causal);
        dense(q, k, v, softmax_scale, None, l, r, None)
    }

    /// [`flash_attn`] with a sliding window; `(None, Some(0))` is causal.
    pub fn flash_attn_windowed(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        softmax_scale: f32,
        window_size_left: Option<usize>,
        window_size_right: Option<usize>,
    ) -> Result<Tensor> {
        dense(
            q,
            k,
            v,
            softmax_scale,
            None,
            window_size_left,
            window_size_right,
            None,
        )
    }

    /// [`flash_attn`] with ALiBi slopes (f32, `(num_heads_q)`).
    pub fn flash_attn_alibi(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        alibi_slopes: &Tensor,
        softmax_scale: f32,
        causal: bool,
    ) -> Result<Tensor> {
        let (l, r) = causal_window(causal);
        dense(q, k, v, softmax_scale, Some(alibi_slopes), l, r, None)
    }

    /// [`flash_attn`] with ALiBi slopes and a sliding window.
    pub fn flash_attn_alibi_windowed(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        alibi_slopes: &Tensor,
        softmax_scale: f32,
        window_size_left: Option<usize>,
        window_size_right: Option<usize>,
    ) -> Result<Tensor> {
        dense(
            q,
            k,
            v,
            softmax_scale,
            Some(alibi_slopes),
            window_size_left,
            window_size_right,
            None,
        )
    }

    /// [`flash_attn`] with optional ALiBi, a sliding window and Gemma-style softcap of the
    /// logits (`softcap · tanh(s / softcap)`; 0 is off).
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_alibi_windowed_softcap(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        alibi_slopes: Option<&Tensor>,
        softmax_scale: f32,
        window_size_left: Option<usize>,
        window_size_right: Option<usize>,
        softcap: f32,
    ) -> Result<Tensor> {
        dense(
            q,
            k,
            v,
            softmax_scale,
            alibi_slopes,
            window_size_left,
            window_size_right,
            Some(softcap),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn varlen(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        alibi_slopes: Option<&Tensor>,
        seqlens_q: &Tensor,
        seqlens_k: &Tensor,
        max_seqlen_q: usize,
        max_seqlen_k: usize,
        softmax_scale: f32,
        window_size_left: Option<usize>,
        window_size_right: Option<usize>,
        softcap: Option<f32>,
    ) -> Result<Tensor> {
        let op = FlashAttnVarLen {
            softmax_scale,
            max_seqlen_q,
            max_seqlen_k,
            seqlens_q: seqlens_q.clone(),
            seqlens_k: seqlens_k.clone(),
            block_table: None,
            mm_prefix_ranges: None,
            page_block_size: None,
            alibi_slopes: alibi_slopes.cloned(),
            window_size_left,
            window_size_right,
            softcap,
        };
        q.apply_op3(k, v, op)
    }

    /// Variable-length batching (candle-flash-attn's `flash_attn_varlen`): `q`
    /// `(total_q, num_heads_q, head_size)`, `k`/`v` `(total_kv, num_heads_kv, head_size)`,
    /// `seqlens_q`/`seqlens_k` the cumulative lengths (u32, `batch + 1` entries starting at 0).
    /// Returns `(total_q, num_heads_q, head_size)`.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_varlen(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        seqlens_q: &Tensor,
        seqlens_k: &Tensor,
        max_seqlen_q: usize,
        max_seqlen_k: usize,
        softmax_scale: f32,
        causal: bool,
    ) -> Result<Tensor> {
        let (l, r) = causal_window(causal);
        varlen(
            q,
            k,
            v,
            None,
            seqlens_q,
            seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            softmax_scale,
            l,
            r,
            None,
        )
    }

    /// [`flash_attn_varlen`] with a sliding window.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_varlen_windowed(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        seqlens_q: &Tensor,
        seqlens_k: &Tensor,
        max_seqlen_q: usize,
        max_seqlen_k: usize,
        softmax_scale: f32,
        window_size_left: Option<usize>,
        window_size_right: Option<usize>,
    ) -> Result<Tensor> {
        varlen(
            q,
            k,
            v,
            None,
            seqlens_q,
            seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            softmax_scale,
            window_size_left,
            window_size_right,
            None,
        )
    }

    /// [`flash_attn_varlen`] with ALiBi slopes.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_varlen_alibi(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        alibi_slopes: &Tensor,
        seqlens_q: &Tensor,
        seqlens_k: &Tensor,
        max_seqlen_q: usize,
        max_seqlen_k: usize,
        softmax_scale: f32,
        causal: bool,
    ) -> Result<Tensor> {
        let (l, r) = causal_window(causal);
        varlen(
            q,
            k,
            v,
            Some(alibi_slopes),
            seqlens_q,
            seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            softmax_scale,
            l,
            r,
            None,
        )
    }

    /// [`flash_attn_varlen`] with ALiBi slopes and a sliding window.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_varlen_alibi_windowed(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        alibi_slopes: &Tensor,
        seqlens_q: &Tensor,
        seqlens_k: &Tensor,
        max_seqlen_q: usize,
        max_seqlen_k: usize,
        softmax_scale: f32,
        window_size_left: Option<usize>,
        window_size_right: Option<usize>,
    ) -> Result<Tensor> {
        varlen(
            q,
            k,
            v,
            Some(alibi_slopes),
            seqlens_q,
            seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            softmax_scale,
            window_size_left,
            window_size_right,
            None,
        )
    }

    /// [`flash_attn_varlen`] with optional ALiBi, a sliding window and softcap.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_varlen_alibi_windowed_softcap(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        alibi_slopes: Option<&Tensor>,
        seqlens_q: &Tensor,
        seqlens_k: &Tensor,
        max_seqlen_q: usize,
        max_seqlen_k: usize,
        softmax_scale: f32,
        window_size_left: Option<usize>,
        window_size_right: Option<usize>,
        softcap: f32,
    ) -> Result<Tensor> {
        varlen(
            q,
            k,
            v,
            alibi_slopes,
            seqlens_q,
            seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            softmax_scale,
            window_size_left,
            window_size_right,
            Some(softcap),
        )
    }

    /// Variable-length batching over a paged K/V cache (candle-flash-attn 0.11's
    /// `flash_attn_varlen_paged_windowed`): `k`/`v` `(num_blocks, page_block_size,
    /// num_heads_kv, head_size)`, `block_table` `(batch, max_blocks)` (u32 or i32); sequence b
    /// reads its first `seqlens_k[b+1] - seqlens_k[b]` cache rows. flashcore takes pages of a
    /// multiple of 16 rows up to 256 (candle-flash-attn: multiples of 32). `mm_prefix_ranges`
    /// (i32 `(batch, max_ranges, 2)`, contiguous): `[start, end)` key positions of each
    /// sequence; a query whose position (`i + len_k - len_q`) lies in a range also sees every key
    /// of it, whatever the causal mask and the window say. Pairs with `start >= end` are unused;
    /// a used pair starts at 0 or later. They go to the kernels that take them; where no
    /// compiled-in generation does, the call is refused naming them.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_varlen_paged_windowed(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        seqlens_q: &Tensor,
        seqlens_k: &Tensor,
        block_table: &Tensor,
        mm_prefix_ranges: Option<&Tensor>,
        max_seqlen_q: usize,
        max_seqlen_k: usize,
        softmax_scale: f32,
        window_size_left: Option<usize>,
        window_size_right: Option<usize>,
        page_block_size: usize,
        softcap: Option<f32>,
    ) -> Result<Tensor> {
        let op = FlashAttnVarLen {
            softmax_scale,
            max_seqlen_q,
            max_seqlen_k,
            seqlens_q: seqlens_q.clone(),
            seqlens_k: seqlens_k.clone(),
            block_table: Some(block_table.clone()),
            mm_prefix_ranges: mm_prefix_ranges.cloned(),
            page_block_size: Some(page_block_size),
            alibi_slopes: None,
            window_size_left,
            window_size_right,
            softcap,
        };
        q.apply_op3(k, v, op)
    }

    /// FlashAttention's `flash_attn_with_kvcache` (not in candle-flash-attn): `q`
    /// `(batch, seq_len_q, num_heads_q, head_size)` attends over the first `seqused_k[b]`
    /// (u32/i32, `(batch)`) rows of sequence b's cache, plus `seqlen_new` rows of
    /// `k_new`/`v_new` `(batch, seqlen_new, num_heads_kv, head_size)` (contiguous) which are
    /// first written **into the caches in place** at rows `seqused_k[b]..`. The cache is
    /// `(batch, capacity, num_heads_kv, head_size)`, or with `block_table` `(batch, max_blocks)`
    /// paged `(num_blocks, block_size, num_heads_kv, head_size)`. `seqused_k` is not advanced:
    /// the caller does that. Causal is bottom-right aligned on each sequence's key count;
    /// windows larger than the capacity count as none. `F8E4M3` caches are read with
    /// descales of 1.0 ([`flash_attn_with_kvcache_fp8`] takes them).
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_with_kvcache(
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        k_new: Option<&Tensor>,
        v_new: Option<&Tensor>,
        seqused_k: &Tensor,
        block_table: Option<&Tensor>,
        alibi_slopes: Option<&Tensor>,
        softmax_scale: f32,
        window_size_left: Option<usize>,
        window_size_right: Option<usize>,
        softcap: Option<f32>,
    ) -> Result<Tensor> {
        flash_attn_with_kvcache_fp8(
            q,
            k_cache,
            v_cache,
            k_new,
            v_new,
            seqused_k,
            block_table,
            alibi_slopes,
            None,
            None,
            softmax_scale,
            window_size_left,
            window_size_right,
            softcap,
        )
    }

    /// [`flash_attn_with_kvcache`] on an fp8 cache, as FlashAttention 3 keeps one: `k_cache`
    /// and `v_cache` both `DType::F8E4M3` (OCP e4m3fn), the true value of a stored element
    /// being its e4m3 value times the f32 factor of its (sequence, KV head) in `k_descale` /
    /// `v_descale`, of shape `(batch, num_heads_kv)` (FlashAttention 3's), `(num_heads_kv)` or
    /// one element; a `(batch, num_heads_kv)` view broadcast from one of those is read without a
    /// copy. A missing descale is 1.0. `q`, `k_new`/`v_new` (quantized into the caches as
    /// `value / descale`, rounded to nearest and saturating at ±448) and the output stay
    /// f16/bf16. Head dims 64, 128 and 256, compute capability 8.9 or newer (the generation-5
    /// decode kernel reads e4m3 caches; another call is an error naming why). An fp8 `q`, one
    /// cache fp8 and the other not, descales of another dtype, shape or device, or descales
    /// with a 16-bit cache are candle errors before anything runs. Inference only.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_with_kvcache_fp8(
        q: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        k_new: Option<&Tensor>,
        v_new: Option<&Tensor>,
        seqused_k: &Tensor,
        block_table: Option<&Tensor>,
        alibi_slopes: Option<&Tensor>,
        k_descale: Option<&Tensor>,
        v_descale: Option<&Tensor>,
        softmax_scale: f32,
        window_size_left: Option<usize>,
        window_size_right: Option<usize>,
        softcap: Option<f32>,
    ) -> Result<Tensor> {
        let op = FlashAttnKvCache {
            k_cache: k_cache.clone(),
            v_cache: v_cache.clone(),
            k_new: k_new.cloned(),
            v_new: v_new.cloned(),
            seqused_k: seqused_k.clone(),
            block_table: block_table.cloned(),
            alibi_slopes: alibi_slopes.cloned(),
            k_descale: k_descale.cloned(),
            v_descale: v_descale.cloned(),
            softmax_scale,
            window_size_left,
            window_size_right,
            softcap,
        };
        q.apply_op1(op)
    }

    /// FlashAttention 3's fp8 forward: [`flash_attn`] on `q`, `k`, `v` of `DType::F8E4M3` (OCP
    /// e4m3fn) in the same `(batch, seq_len, num_heads, head_size)` layouts, the true value of an
    /// element being its e4m3 value times the f32 factor of its (sequence, KV head) in
    /// `q_descale` / `k_descale` / `v_descale` (a query head reads its KV head's `q_descale`
    /// entry). The three descales are f32 on `q`'s device, of one layout: `(batch, num_heads_kv)`
    /// (FlashAttention 3's), `(num_heads_kv)` or one element (a `(batch, num_heads_kv)` view
    /// broadcast from one of those is read without a copy). Returns O in bf16 (FlashAttention
    /// 3's), `(batch, seq_len_q, num_heads_q, head_size)`. Taken by the Hopper kernel (sm_90a) at
    /// head size 128, causal or not, GQA/MQA; anything else is a candle error with the kernels'
    /// reasons, as are 16-bit inputs and descales of another dtype, layout or device. Inference
    /// only: `backward()` is an error.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_fp8(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        q_descale: &Tensor,
        k_descale: &Tensor,
        v_descale: &Tensor,
        softmax_scale: f32,
        causal: bool,
    ) -> Result<Tensor> {
        let op = FlashAttnFp8 {
            q_descale: q_descale.clone(),
            k_descale: k_descale.clone(),
            v_descale: v_descale.clone(),
            softmax_scale,
            causal,
        };
        q.apply_op3(k, v, op)
    }
}
