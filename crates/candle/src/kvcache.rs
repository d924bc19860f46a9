//! `flash_attn_with_kvcache`'s op and its argument rules on candle's terms (dtype names, dims,
//! strides), apart from the CUDA half (`ops.rs`), so that they are unit-tested on the CPU
//! without the `cuda` feature: the 16-bit or e4m3 (fp8) caches, the rows to append, and
//! FlashAttention 3's `k_descale`/`v_descale` (a missing one is 1.0).

use candle::{DType, Layout, Result, Tensor};
use flashcore::AttentionProblem;

use crate::args::{self, ArgError, Descale, Options, View};

/// The argument rules' refusals as candle errors (the rules live in the facade, so candle's
/// error type cannot take a `From` for them here).
pub(crate) fn refused(e: ArgError) -> candle::Error {
    candle::Error::msg(format!("flashcore: {e}"))
}

/// `flash_attn_with_kvcache`: attention of `q` over a contiguous or paged KV cache with
/// per-sequence lengths `seqused_k`, optionally appending `k_new`/`v_new` first. The caches are
/// Q's dtype, or both `F8E4M3` (an fp8 cache) read through the f32 `k_descale`/`v_descale`
/// (`None`: 1.0, as FlashAttention 3), which must be `None` for a 16-bit cache.
pub struct FlashAttnKvCache {
    pub k_cache: Tensor,
    pub v_cache: Tensor,
    pub k_new: Option<Tensor>,
    pub v_new: Option<Tensor>,
    pub seqused_k: Tensor,
    pub block_table: Option<Tensor>,
    pub alibi_slopes: Option<Tensor>,
    pub k_descale: Option<Tensor>,
    pub v_descale: Option<Tensor>,
    pub softmax_scale: f32,
    pub window_size_left: Option<usize>,
    pub window_size_right: Option<usize>,
    pub softcap: Option<f32>,
}

fn view<'a>(name: &'static str, l: &'a Layout) -> View<'a> {
    View::new(name, l.dims(), l.stride())
}

fn descale(name: &'static str, t: Option<&Tensor>) -> Result<Option<Descale>> {
    t.map(|t| Descale::new(name, t.dtype().as_str(), t.dims(), t.stride()))
        .transpose()
        .map_err(refused)
}

impl FlashAttnKvCache {
    /// The descale tables of the call: the given ones, and for an `F8E4M3` `k_cache`
    /// FlashAttention 3's 1.0 in place of a missing one (one f32 element on the cache's device,
    /// or ones shaped as the other descale, which is then made contiguous so that both index
    /// alike). Whether they fit the call is [`Self::problem`]'s to say.
    pub(crate) fn descales(&self) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (k, v) = (self.k_descale.as_ref(), self.v_descale.as_ref());
        if self.k_cache.dtype() != DType::F8E4M3 || (k.is_some() && v.is_some()) {
            return Ok((k.cloned(), v.cloned()));
        }
        let Some(given) = k.or(v) else {
            let ones = Tensor::ones(1, DType::F32, self.k_cache.device())?;
            return Ok((Some(ones.clone()), Some(ones)));
        };
        let given = given.contiguous()?;
        let ones = Tensor::ones(given.shape(), DType::F32, given.device())?;
        Ok(match k {
            Some(_) => (Some(given), Some(ones)),
            None => (Some(ones), Some(given)),
        })
    }

    /// The problem of this call on a `q` of `q_dtype` laid out as `q_l`, with the descales of
    /// [`Self::descales`]: Q f16/bf16; the caches Q's dtype or both e4m3; the rows to append in
    /// Q's dtype (an e4m3 append quantizes them); the descales f32 and shaped as
    /// [`Descale::scales`] takes them, given exactly for an e4m3 cache.
    pub(crate) fn problem(
        &self,
        q_dtype: DType,
        q_l: &Layout,
        (k_descale, v_descale): (Option<&Tensor>, Option<&Tensor>),
    ) -> Result<AttentionProblem> {
        let (dtype, e4m3) = args::kv_dtype_of(
            "flash-attn-with-kvcache",
            q_dtype.as_str(),
            self.k_cache.dtype().as_str(),
            self.v_cache.dtype().as_str(),
        )
        .map_err(refused)?;
        let new = match (&self.k_new, &self.v_new) {
            (Some(k), Some(v)) => Some((k, v)),
            (None, None) => None,
            _ => candle::bail!("k_new and v_new must be given together"),
        };
        if let Some((k, v)) = new {
            args::dtype_of(
                "flash-attn-with-kvcache (k_new/v_new)",
                q_dtype.as_str(),
                k.dtype().as_str(),
                v.dtype().as_str(),
            )
            .map_err(|e| match e4m3 {
                true => refused(ArgError(format!(
                    "{e}: k_new and v_new stay in q's dtype, the fp8 cache quantizes them with \
                     k_descale/v_descale"
                ))),
                false => refused(e),
            })?;
        }
        let descales = args::kv_descales(
            e4m3,
            descale("k_descale", k_descale)?,
            descale("v_descale", v_descale)?,
        )
        .map_err(refused)?;
        let mut opts = Options::new(dtype, self.softmax_scale)
            .with_window(self.window_size_left, self.window_size_right)
            .with_softcap(self.softcap)
            .with_kv_fp8(descales);
        if let Some(a) = &self.alibi_slopes {
            opts = opts.with_alibi(a.dims());
        }
        let new_views = new.map(|(k, v)| (view("k_new", k.layout()), view("v_new", v.layout())));
        args::kvcache_problem(
            &view("q", q_l),
            &view("k_cache", self.k_cache.layout()),
            &view("v_cache", self.v_cache.layout()),
            self.seqused_k.dims(),
            self.block_table.as_ref().map(|t| t.dims()),
            new_views.as_ref().map(|(k, v)| (k, v)),
            &opts,
        )
        .map_err(refused)
    }
}

#[cfg(test)]
mod tests;
