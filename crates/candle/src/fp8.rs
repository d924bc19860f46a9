//! `flash_attn_fp8`'s op and its argument rules on candle's terms (dtype names, dims, strides),
//! apart from the CUDA half (`ops.rs`), so that they are unit-tested on the CPU without the
//! `cuda` feature: FlashAttention 3's fp8 forward, Q, K and V as e4m3 with f32
//! `q_descale`/`k_descale`/`v_descale`, O in bf16. The shape rules are the facade's
//! (`args::dense_problem`, [`Descale`]); what a kernel takes (Hopper, dense, head dim 128) is the
//! kernel's to say.

use candle::{DType, Layout, Result, Tensor};
use flashcore::AttentionProblem;

use crate::args::{self, Descale, Options, View};
use crate::kvcache::refused;

/// `flash_attn_fp8`: dense attention of e4m3 `(b, s, h, d)` Q, K and V whose true values are
/// their e4m3 values times the f32 factors of their (sequence, KV head) in the descale tables
/// (all three of one layout: one element, `(heads_kv)` or `(batch, heads_kv)`). Inference only.
pub struct FlashAttnFp8 {
    pub q_descale: Tensor,
    pub k_descale: Tensor,
    pub v_descale: Tensor,
    pub softmax_scale: f32,
    pub causal: bool,
}

fn view<'a>(name: &'static str, l: &'a Layout) -> View<'a> {
    View::new(name, l.dims(), l.stride())
}

fn descale(name: &'static str, t: &Tensor) -> Result<Descale> {
    Descale::new(name, t.dtype().as_str(), t.dims(), t.stride()).map_err(refused)
}

impl FlashAttnFp8 {
    /// O's dtype: bf16, as FlashAttention 3's fp8 forward writes it.
    pub(crate) const OUT: flashcore::DType = args::FP8_OUT;

    /// The problem of this call on Q, K and V of these dtypes and layouts: all three e4m3, the
    /// descales f32 and read as one [`flashcore::KvScales`] (Q's table is indexed as K's,
    /// [`Options::with_q_fp8`]).
    pub(crate) fn problem(
        &self,
        q: (DType, &Layout),
        k: (DType, &Layout),
        v: (DType, &Layout),
    ) -> Result<AttentionProblem> {
        for (name, dtype) in [("q", q.0), ("k", k.0), ("v", v.0)] {
            if !args::is_e4m3(dtype.as_str()) {
                candle::bail!(
                    "flashcore: flash-attn-fp8 takes q, k and v as f8e4m3 (OCP e4m3fn), {name} \
                     is {} (16-bit inputs: flash_attn)",
                    dtype.as_str()
                );
            }
        }
        let q_d = descale("q_descale", &self.q_descale)?;
        let kv = args::kv_descales(
            true,
            Some(descale("k_descale", &self.k_descale)?),
            Some(descale("v_descale", &self.v_descale)?),
        )
        .map_err(refused)?;
        // Q's table laid out as K's, and the core's own rules for e4m3 Q (its strides in whole
        // 16-byte copies, beside e4m3 K/V): the facade's rules, the Python binding's too.
        let opts = Options::new(Self::OUT, self.softmax_scale)
            .with_window(None, self.causal.then_some(0))
            .with_kv_fp8(kv)
            .with_q_fp8(true, Some(q_d))
            .map_err(refused)?;
        args::dense_problem(&view("q", q.1), &view("k", k.1), &view("v", v.1), &opts)
            .map_err(refused)
    }
}

#[cfg(test)]
mod tests;
