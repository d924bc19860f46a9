//! candle-flash-attn's two (q, k, v) ops, `FlashAttn` and `FlashAttnVarLen`, and their argument
//! rules on candle's terms (dtype names, dims, strides), apart from the CUDA half (`ops.rs`), so
//! that they are unit-tested on the CPU without the `cuda` feature: the problem each call builds
//! (the forward's, which its backward takes unchanged, modes and tables included), and which
//! calls carry a backward ([`backward_problem`]: the facade's `backward_refusal`).

use candle::{Layout, Result, Tensor};
use flashcore::AttentionProblem;

use crate::args::{self, Options, View};
use crate::kvcache::refused;

fn view<'a>(name: &'static str, l: &'a Layout) -> View<'a> {
    View::new(name, l.dims(), l.stride())
}

/// The options candle-flash-attn's arguments describe: scale, window, softcap and the ALiBi
/// slopes' shape.
fn mode_options(
    dtype: flashcore::DType,
    softmax_scale: f32,
    (left, right): (Option<usize>, Option<usize>),
    softcap: Option<f32>,
    alibi_slopes: Option<&Tensor>,
) -> Options {
    let o = Options::new(dtype, softmax_scale)
        .with_window(left, right)
        .with_softcap(softcap);
    match alibi_slopes {
        Some(a) => o.with_alibi(a.dims()),
        None => o,
    }
}

/// [`mode_options`] of an op's candle-flash-attn fields (`softmax_scale`, `window_size_left`,
/// `window_size_right`, `softcap`, `alibi_slopes`), which both ops have.
macro_rules! options_of {
    ($op:expr, $dtype:expr) => {
        mode_options(
            $dtype,
            $op.softmax_scale,
            ($op.window_size_left, $op.window_size_right),
            $op.softcap,
            $op.alibi_slopes.as_ref(),
        )
    };
}

/// The problem a backward call takes: the forward's own (its modes, its tables), where the
/// bindings carry a backward for it at all; otherwise a candle error saying why (fp8, a paged
/// K/V, `mm_prefix_ranges`), never a gradient.
pub(crate) fn backward_problem(p: AttentionProblem) -> Result<AttentionProblem> {
    args::backward_refusal(&p).map_err(|e| {
        candle::Error::msg(format!(
            "flashcore: no backward for this call ({e}); the forward runs as it is"
        ))
    })?;
    Ok(p)
}

/// candle-flash-attn's `FlashAttn`: `(b, s, h, d)` tensors. Differentiable: its backward takes
/// the forward's modes (causal, sliding windows, softcap, ALiBi).
#[derive(Clone)]
pub struct FlashAttn {
    pub softmax_scale: f32,
    pub alibi_slopes: Option<Tensor>,
    pub window_size_left: Option<usize>,
    pub window_size_right: Option<usize>,
    pub softcap: Option<f32>,
}

impl FlashAttn {
    /// The problem of a call on Q, K, V of `dtype` laid out as `q`, `k`, `v`.
    pub(crate) fn problem(
        &self,
        dtype: flashcore::DType,
        [q, k, v]: [&Layout; 3],
    ) -> Result<AttentionProblem> {
        args::dense_problem(
            &view("q", q),
            &view("k", k),
            &view("v", v),
            &options_of!(self, dtype),
        )
        .map_err(refused)
    }
}

/// candle-flash-attn's `FlashAttnVarLen`: packed `(total, h, d)` tensors with cumulative
/// sequence lengths, or (with a block table) a paged K/V cache. Differentiable when packed
/// (FlashAttention 2's varlen backward, with the forward's modes); a paged call and
/// `mm_prefix_ranges` are inference only.
#[derive(Clone)]
pub struct FlashAttnVarLen {
    pub softmax_scale: f32,
    pub max_seqlen_q: usize,
    pub max_seqlen_k: usize,
    pub seqlens_q: Tensor,
    pub seqlens_k: Tensor,
    pub block_table: Option<Tensor>,
    pub mm_prefix_ranges: Option<Tensor>,
    pub page_block_size: Option<usize>,
    pub alibi_slopes: Option<Tensor>,
    pub window_size_left: Option<usize>,
    pub window_size_right: Option<usize>,
    pub softcap: Option<f32>,
}

impl FlashAttnVarLen {
    /// The number of sequences the cumulative lengths describe.
    pub(crate) fn batch(&self) -> Result<usize> {
        args::cu_seqlens_batch(self.seqlens_q.dims(), self.seqlens_k.dims()).map_err(refused)
    }

    /// Ranges per sequence of `mm_prefix_ranges` (`None`: no table, or one without ranges).
    pub(crate) fn mm_prefix(&self, batch: usize) -> Result<Option<usize>> {
        match &self.mm_prefix_ranges {
            Some(r) => args::mm_prefix_ranges(r.dtype().as_str(), r.dims(), batch).map_err(refused),
            None => Ok(None),
        }
    }

    /// The problem of a call on Q, K, V of `dtype` laid out as `q`, `k`, `v`: packed, or paged
    /// with the block table.
    pub(crate) fn problem(
        &self,
        dtype: flashcore::DType,
        [q, k, v]: [&Layout; 3],
    ) -> Result<AttentionProblem> {
        let batch = self.batch()?;
        let opts = options_of!(self, dtype).with_mm_prefix(self.mm_prefix(batch)?);
        let (qv, kv, vv) = (view("q", q), view("k", k), view("v", v));
        match &self.block_table {
            None => args::varlen_problem(
                &qv,
                &kv,
                &vv,
                batch,
                self.max_seqlen_q,
                self.max_seqlen_k,
                &opts,
            ),
            Some(table) => args::paged_varlen_problem(
                &qv,
                &kv,
                &vv,
                table.dims(),
                batch,
                self.max_seqlen_q,
                self.max_seqlen_k,
                self.page_block_size.unwrap_or(0),
                &opts,
            ),
        }
        .map_err(refused)
    }
}

#[cfg(test)]
mod tests;
