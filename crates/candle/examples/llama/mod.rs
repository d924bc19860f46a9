//! A Llama-architecture decoder shared by the `llama_decode` (random weights) and `smollm2`
//! (a trained model from GGUF) examples: candle-nn layers, RoPE, GQA, RMSNorm, SwiGLU, and
//! attention in one of three modes, prefill then greedy decode steps, and the checks that the
//! modes agree.
//!
//! - [`Mode::Flashcore`]: flashcore-candle's `flash_attn_with_kvcache` on a preallocated cache,
//!   contiguous or paged (shuffled pages), each call appending its K/V in place.
//! - [`Mode::Candle`]: candle's own matmul-softmax attention (a growing cache, `repeat_kv`,
//!   softmax in f32).
//! - [`Mode::CandleF32`]: the same in f32 throughout (scores, P and P·V), output rounded to the
//!   model's dtype: a reference more precise than either bf16 attention.
//!
//! Agreement ([`Agreement`]): logits at every step within a tolerance (flashcore teacher-forced on
//! the reference's tokens, so a late tie does not hide later steps), and the greedy token ids:
//! every decision whose reference margin (its top token's logit minus its logit of the other
//! mode's token) exceeds twice the logit tolerance must match; the exact count is printed.

use std::time::Instant;

use candle_nn::{Linear, Module};
use flashcore_candle as fc;
use flashcore_candle::candle::{DType, Device, Result, Tensor, D};

/// The model's dimensions.
#[derive(Clone, Debug)]
pub struct Shape {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub rope_theta: f32,
    pub rms_eps: f64,
}

impl Shape {
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    pub fn params(&self) -> usize {
        let d = self.head_dim();
        let attn = self.hidden * (self.heads * d) * 2 + self.hidden * (self.kv_heads * d) * 2;
        let mlp = 3 * self.hidden * self.intermediate;
        self.layers * (attn + mlp + 2 * self.hidden) + 2 * self.vocab * self.hidden + self.hidden
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} layers, hidden {}, {} q heads / {} kv heads (d = {}), mlp {}, vocab {}: {:.3} B params, bf16",
            self.layers,
            self.hidden,
            self.heads,
            self.kv_heads,
            self.head_dim(),
            self.intermediate,
            self.vocab,
            self.params() as f64 / 1e9
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Flashcore,
    Candle,
    CandleF32,
}

/// Where flashcore's K/V cache lives.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum KvLayout {
    /// `(batch, capacity, kv_heads, head_dim)`.
    Contiguous,
    /// `(num_blocks, block_size, kv_heads, head_dim)` pages, handed out shuffled.
    Paged { block_size: usize },
}

/// One decoder layer's weights (bf16; projections `(out, in)`, Q and K rows in the half-split
/// RoPE order that `rope_thd` rotates).
pub struct Layer {
    pub wq: Linear,
    pub wk: Linear,
    pub wv: Linear,
    pub wo: Linear,
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
    pub ln1: Tensor,
    pub ln2: Tensor,
}

pub struct Model {
    pub shape: Shape,
    pub embed: Tensor,
    pub layers: Vec<Layer>,
    pub norm: Tensor,
    pub lm_head: Linear,
    cos: Tensor,
    sin: Tensor,
    pub dev: Device,
}

/// Per-layer K/V: a preallocated cache filled in place (flashcore) or `(b, kv_heads, t, d)`
/// tensors grown by concatenation (candle).
pub struct Cache {
    k: Vec<Option<Tensor>>,
    v: Vec<Option<Tensor>>,
    block_table: Option<Tensor>,
    len: usize,
    /// With [`Cache::check_attention`]: flashcore's attention output judged at every layer
    /// and step, and the `(b, kv_heads, t, d)` history the reference attends over.
    check: Option<AttnCheck>,
    history_k: Vec<Option<Tensor>>,
    history_v: Vec<Option<Tensor>>,
}

/// FlashAttention's tolerance rule applied to one attention call of the model, on its real
/// activations: flashcore's output `o` against attention in f32 on the same Q, K, V passes when
/// `max|o - ref| <= 2 max|o_bf16 - ref| + atol`, where `o_bf16` is candle's own attention in the
/// model's dtype on the same inputs and `atol = 2 max|(ref + 0.3) - 0.3 - ref|` in bf16 (the
/// dtype's rounding at that magnitude, FlashAttention 3's constant). This measures the kernel
/// alone: every call sees the same inputs in both, whatever the model's bf16 noise upstream.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttnCheck {
    pub calls: usize,
    pub failures: usize,
    /// The largest `max|o - ref| / bound` seen, with its error, bound and (layer, position).
    pub worst_ratio: f32,
    pub worst_err: f32,
    pub worst_bound: f32,
    pub worst_at: (usize, usize),
}

/// `max |a - b|` over every element, in f32.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    (a.to_dtype(DType::F32)? - b.to_dtype(DType::F32)?)?
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_scalar::<f32>()
}

/// FlashAttention 3's constant of the rule: twice the largest rounding error of adding and
/// removing 0.3 in bf16 at the reference's magnitudes.
pub fn rounding_atol(reference: &Tensor) -> Result<f32> {
    let r = reference.to_dtype(DType::BF16)?;
    let back = r.affine(1.0, 0.3)?.affine(1.0, -0.3)?;
    Ok(2.0 * max_abs_diff(&back, &r)?)
}

impl AttnCheck {
    /// Judges flashcore's `o` `(b, s, h, d)` for q `(b, s, h, d)` over the history `(b, h_kv, t,
    /// d)` of layer `layer` at position `pos`.
    #[allow(clippy::too_many_arguments)]
    fn judge(
        &mut self,
        layer: usize,
        pos: usize,
        o: &Tensor,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        scale: f32,
        groups: usize,
    ) -> Result<()> {
        let f = |x: &Tensor| x.to_dtype(DType::F32);
        let reference = candle_attention(Mode::Candle, &f(q)?, &f(k)?, &f(v)?, scale, groups)?;
        let low = candle_attention(Mode::Candle, q, k, v, scale, groups)?;
        let err = max_abs_diff(o, &reference)?;
        let bound = 2.0 * max_abs_diff(&low, &reference)? + rounding_atol(&reference)?;
        self.calls += 1;
        let ratio = if err.is_nan() {
            f32::INFINITY
        } else {
            err / bound
        };
        if ratio > 1.0 {
            self.failures += 1;
        }
        if ratio > self.worst_ratio {
            self.worst_ratio = ratio;
            self.worst_err = err;
            self.worst_bound = bound;
            self.worst_at = (layer, pos);
        }
        Ok(())
    }

    pub fn ok(&self) -> bool {
        self.calls > 0 && self.failures == 0
    }

    pub fn print(&self) {
        println!(
            "attention check (FlashAttention's rule at every layer and step, on the model's own \
             Q, K, V): {} calls, {} over the bound; worst max|o - ref| = {:.3e} against a bound of \
             {:.3e} (ratio {:.3}, layer {}, position {}): {}",
            self.calls,
            self.failures,
            self.worst_err,
            self.worst_bound,
            self.worst_ratio,
            self.worst_at.0,
            self.worst_at.1,
            if self.ok() { "ok" } else { "FAILED" }
        );
    }
}

impl Cache {
    /// Judge flashcore's attention at every layer and step ([`AttnCheck`]); keeps a second,
    /// candle-layout copy of the K/V history for the reference.
    pub fn check_attention(&mut self) {
        self.check = Some(AttnCheck::default());
    }
}

/// Accumulated time of the attention calls when `profile` is on (synchronising around each).
pub struct AttnTimer {
    profile: bool,
    secs: f64,
}

impl Model {
    /// A model of these weights, with RoPE tables for `max_pos` positions.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        shape: Shape,
        embed: Tensor,
        layers: Vec<Layer>,
        norm: Tensor,
        lm_head: Linear,
        max_pos: usize,
        dev: &Device,
    ) -> Result<Model> {
        let d = shape.head_dim();
        let inv: Vec<f32> = (0..d / 2)
            .map(|i| 1.0 / shape.rope_theta.powf(2.0 * i as f32 / d as f32))
            .collect();
        let inv = Tensor::new(inv.as_slice(), dev)?;
        let t = Tensor::arange(0u32, max_pos as u32, dev)?.to_dtype(DType::F32)?;
        let freqs = t.unsqueeze(1)?.broadcast_mul(&inv.unsqueeze(0)?)?;
        Ok(Model {
            shape,
            embed,
            layers,
            norm,
            lm_head,
            cos: freqs.cos()?.to_dtype(DType::BF16)?,
            sin: freqs.sin()?.to_dtype(DType::BF16)?,
            dev: dev.clone(),
        })
    }

    pub fn new_cache(
        &self,
        mode: Mode,
        batch: usize,
        capacity: usize,
        layout: KvLayout,
    ) -> Result<Cache> {
        let c = &self.shape;
        let (hkv, d) = (c.kv_heads, c.head_dim());
        let mut cache = Cache {
            k: vec![],
            v: vec![],
            block_table: None,
            len: 0,
            check: None,
            history_k: vec![None; c.layers],
            history_v: vec![None; c.layers],
        };
        let shape = match (mode, layout) {
            (Mode::Candle | Mode::CandleF32, _) => None,
            (Mode::Flashcore, KvLayout::Contiguous) => Some((batch, capacity, hkv, d)),
            (Mode::Flashcore, KvLayout::Paged { block_size }) => {
                let per_seq = capacity.div_ceil(block_size);
                let blocks = batch * per_seq;
                // Pages anywhere in the pool, in any order: block i of sequence b is pool page
                // (i * batch + b) * 7919 mod blocks (7919 is prime, so the map is a permutation
                // unless it divides `blocks`).
                let step = if blocks.is_multiple_of(7919) { 1 } else { 7919 };
                let table: Vec<u32> = (0..batch)
                    .flat_map(|b| {
                        (0..per_seq).map(move |i| (((i * batch + b) * step) % blocks) as u32)
                    })
                    .collect();
                cache.block_table = Some(Tensor::from_vec(table, (batch, per_seq), &self.dev)?);
                Some((blocks, block_size, hkv, d))
            }
        };
        for _ in 0..c.layers {
            let tensor = |s| Tensor::zeros(s, DType::BF16, &self.dev);
            cache.k.push(shape.map(tensor).transpose()?);
            cache.v.push(shape.map(tensor).transpose()?);
        }
        Ok(cache)
    }

    /// Logits (f32, `(b, vocab)`) of the last position of `tokens` `(b, s)`.
    pub fn forward(
        &self,
        tokens: &Tensor,
        cache: &mut Cache,
        mode: Mode,
        timer: &mut AttnTimer,
    ) -> Result<Tensor> {
        let c = &self.shape;
        let (b, s) = tokens.dims2()?;
        let d = c.head_dim();
        let pos = cache.len;
        let mut x = self
            .embed
            .index_select(&tokens.flatten_all()?, 0)?
            .reshape((b, s, c.hidden))?;
        let cos = self.cos.narrow(0, pos, s)?;
        let sin = self.sin.narrow(0, pos, s)?;
        let seqused = Tensor::new(vec![pos as u32; b].as_slice(), &self.dev)?;
        let scale = 1.0 / (d as f32).sqrt();
        for (l, layer) in self.layers.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &layer.ln1, c.rms_eps as f32)?;
            let q = layer.wq.forward(&h)?.reshape((b, s, c.heads, d))?;
            let k = layer.wk.forward(&h)?.reshape((b, s, c.kv_heads, d))?;
            let v = layer.wv.forward(&h)?.reshape((b, s, c.kv_heads, d))?;
            let q = candle_nn::rotary_emb::rope_thd(&q.contiguous()?, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope_thd(&k.contiguous()?, &cos, &sin)?;
            let v = v.contiguous()?;
            if timer.profile {
                self.dev.synchronize()?;
            }
            let t0 = Instant::now();
            let attn = match mode {
                Mode::Flashcore => fc::flash_attn_with_kvcache(
                    &q,
                    cache.k[l].as_ref().unwrap(),
                    cache.v[l].as_ref().unwrap(),
                    Some(&k),
                    Some(&v),
                    &seqused,
                    cache.block_table.as_ref(),
                    None,
                    scale,
                    None,
                    Some(0),
                    None,
                )?,
                Mode::Candle | Mode::CandleF32 => {
                    let (kt, vt) = (k.transpose(1, 2)?, v.transpose(1, 2)?);
                    let (kc, vc) = match (&cache.k[l], &cache.v[l]) {
                        (Some(pk), Some(pv)) => {
                            (Tensor::cat(&[pk, &kt], 2)?, Tensor::cat(&[pv, &vt], 2)?)
                        }
                        _ => (kt.contiguous()?, vt.contiguous()?),
                    };
                    cache.k[l] = Some(kc.clone());
                    cache.v[l] = Some(vc.clone());
                    candle_attention(mode, &q, &kc, &vc, scale, c.heads / c.kv_heads)?
                }
            };
            if timer.profile {
                self.dev.synchronize()?;
                timer.secs += t0.elapsed().as_secs_f64();
            }
            if let (Mode::Flashcore, Some(check)) = (mode, cache.check.as_mut()) {
                let (kt, vt) = (k.transpose(1, 2)?, v.transpose(1, 2)?);
                let (kc, vc) = match (&cache.history_k[l], &cache.history_v[l]) {
                    (Some(pk), Some(pv)) => {
                        (Tensor::cat(&[pk, &kt], 2)?, Tensor::cat(&[pv, &vt], 2)?)
                    }
                    _ => (kt.contiguous()?, vt.contiguous()?),
                };
                check.judge(l, pos, &attn, &q, &kc, &vc, scale, c.heads / c.kv_heads)?;
                cache.history_k[l] = Some(kc);
                cache.history_v[l] = Some(vc);
            }
            let o = attn.reshape((b, s, c.heads * d))?;
            x = (x + layer.wo.forward(&o)?)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.ln2, c.rms_eps as f32)?;
            let mlp = layer.down.forward(
                &(candle_nn::ops::silu(&layer.gate.forward(&h)?)? * layer.up.forward(&h)?)?,
            )?;
            x = (x + mlp)?;
        }
        cache.len += s;
        // A prompt's last row is a strided view; candle's CUDA rms-norm takes contiguous input
        // only ("input has to be contiguous" on the H100, commit 8e61095).
        let last = x.narrow(1, s - 1, 1)?.squeeze(1)?.contiguous()?;
        let last = candle_nn::ops::rms_norm(&last, &self.norm, c.rms_eps as f32)?;
        self.lm_head.forward(&last)?.to_dtype(DType::F32)
    }
}

/// candle's own attention: q `(b, s, h, d)`, cache `(b, h_kv, t, d)`; scores in the model
/// dtype, softmax in f32, bottom-right causal mask when s > 1 (for [`Mode::CandleF32`], all in
/// f32 and the output rounded back to q's dtype). Returns `(b, s, h, d)`.
pub fn candle_attention(
    mode: Mode,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f32,
    groups: usize,
) -> Result<Tensor> {
    if mode == Mode::CandleF32 {
        let f = |x: &Tensor| x.to_dtype(DType::F32);
        return candle_attention(Mode::Candle, &f(q)?, &f(k)?, &f(v)?, scale, groups)?
            .to_dtype(q.dtype());
    }
    let (b, s, h, d) = q.dims4()?;
    let (_, hkv, t, _) = k.dims4()?;
    let rep = |x: &Tensor| -> Result<Tensor> {
        x.unsqueeze(2)?
            .expand((b, hkv, groups, t, d))?
            .reshape((b, h, t, d))
    };
    let (k, v) = (rep(k)?, rep(v)?);
    let q = q.transpose(1, 2)?.contiguous()?;
    let scores = (q.matmul(&k.t()?)? * scale as f64)?.to_dtype(DType::F32)?;
    let scores = if s > 1 {
        let off = t - s;
        let mask: Vec<f32> = (0..s)
            .flat_map(|i| (0..t).map(move |j| if j <= i + off { 0.0 } else { f32::NEG_INFINITY }))
            .collect();
        let mask = Tensor::from_vec(mask, (s, t), q.device())?;
        scores.broadcast_add(&mask)?
    } else {
        scores
    };
    let p = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(q.dtype())?;
    p.matmul(&v)?.transpose(1, 2)
}

/// What a generation run asks for: its prompt `(b, s)`, decode steps, and flashcore's cache.
pub struct Generation<'a> {
    pub prompt: &'a Tensor,
    pub steps: usize,
    pub layout: KvLayout,
}

pub struct Run {
    pub logits: Vec<Vec<f32>>,
    pub tokens: Vec<Vec<u32>>,
    pub prefill_secs: f64,
    pub decode_secs: f64,
    pub attn_secs: f64,
    /// The attention check of a [`run_checked`] run.
    pub attention: Option<AttnCheck>,
}

/// Prefill of the prompt then `steps` greedy steps. With `force`, the fed tokens are `force`'s
/// (teacher forcing) while the argmax is still recorded.
pub fn run(
    model: &Model,
    mode: Mode,
    g: &Generation,
    force: Option<&[Vec<u32>]>,
    profile: bool,
) -> Result<Run> {
    run_with(model, mode, g, force, profile, false)
}

/// [`run`] of flashcore's mode with its attention judged at every layer and step
/// ([`AttnCheck`], in [`Run::attention`]).
pub fn run_checked(model: &Model, g: &Generation, force: Option<&[Vec<u32>]>) -> Result<Run> {
    run_with(model, Mode::Flashcore, g, force, false, true)
}

fn run_with(
    model: &Model,
    mode: Mode,
    g: &Generation,
    force: Option<&[Vec<u32>]>,
    profile: bool,
    check: bool,
) -> Result<Run> {
    let (batch, prompt) = g.prompt.dims2()?;
    let mut cache = model.new_cache(mode, batch, prompt + g.steps + 1, g.layout)?;
    if check {
        cache.check_attention();
    }
    let mut timer = AttnTimer { profile, secs: 0.0 };
    let mut out = Run {
        logits: vec![],
        tokens: vec![],
        prefill_secs: 0.0,
        decode_secs: 0.0,
        attn_secs: 0.0,
        attention: None,
    };
    model.dev.synchronize()?;
    let t0 = Instant::now();
    let mut logits = model.forward(g.prompt, &mut cache, mode, &mut timer)?;
    model.dev.synchronize()?;
    out.prefill_secs = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for step in 0..g.steps {
        let next = logits.argmax(D::Minus1)?;
        if force.is_some() || !profile {
            out.logits.push(logits.flatten_all()?.to_vec1::<f32>()?);
        }
        let ids = next.to_vec1::<u32>()?;
        let feed = match force {
            Some(f) => Tensor::new(f[step].as_slice(), &model.dev)?,
            None => next,
        };
        out.tokens.push(ids);
        logits = model.forward(&feed.unsqueeze(1)?, &mut cache, mode, &mut timer)?;
    }
    model.dev.synchronize()?;
    out.decode_secs = t1.elapsed().as_secs_f64();
    out.attn_secs = timer.secs;
    out.attention = cache.check;
    Ok(out)
}

/// How far flashcore's run (teacher-forced on the reference's tokens) is from the reference's.
pub struct Agreement {
    pub worst_logit_diff: f32,
    pub worst_step: usize,
    pub same: usize,
    pub total: usize,
    pub flips: usize,
    pub widest_flip: f32,
    pub confident_flips: usize,
    pub tolerance: f32,
}

impl Agreement {
    pub fn of(reference: &Run, flash: &Run, vocab: usize, tolerance: f32) -> Agreement {
        let mut a = Agreement {
            worst_logit_diff: 0.0,
            worst_step: 0,
            same: 0,
            total: 0,
            flips: 0,
            widest_flip: 0.0,
            confident_flips: 0,
            tolerance,
        };
        for (step, (x, y)) in reference.logits.iter().zip(&flash.logits).enumerate() {
            let m = x
                .iter()
                .zip(y)
                .map(|(p, q)| (p - q).abs())
                .fold(0f32, f32::max);
            if m > a.worst_logit_diff || m.is_nan() {
                a.worst_logit_diff = if m.is_nan() { f32::INFINITY } else { m };
                a.worst_step = step;
            }
        }
        // Teacher forcing compares every step's greedy choice on the same inputs. Where the two
        // choices differ, the reference's margin between them is at most twice the logit
        // difference at that step, so a flip is only possible at a near-tie.
        for (step, (x, y)) in reference.tokens.iter().zip(&flash.tokens).enumerate() {
            for (row, (&p, &q)) in x.iter().zip(y).enumerate() {
                a.total += 1;
                if p == q {
                    a.same += 1;
                    continue;
                }
                let logits = &reference.logits[step][row * vocab..(row + 1) * vocab];
                let margin = logits[p as usize] - logits[q as usize];
                a.flips += 1;
                a.widest_flip = a.widest_flip.max(margin);
                if margin > 2.0 * tolerance {
                    a.confident_flips += 1;
                }
            }
        }
        a
    }

    pub fn ok(&self) -> bool {
        self.worst_logit_diff <= self.tolerance && self.confident_flips == 0
    }

    pub fn print(&self, steps: usize) {
        let verdict = |ok: bool| if ok { "ok" } else { "FAILED" };
        println!(
            "agreement: max |logits(flashcore) - logits(reference)| over {steps} steps = {:.4} (step {}), \
             tolerance {}: {}",
            self.worst_logit_diff,
            self.worst_step,
            self.tolerance,
            verdict(self.worst_logit_diff <= self.tolerance)
        );
        println!(
            "agreement: greedy token ids equal at {}/{} (batch x step); the {} that differ are \
             near-ties of the reference (its margin between the two tokens at most {:.4}); \
             decisions with a margin above {:.2} that differ: {}: {}",
            self.same,
            self.total,
            self.flips,
            self.widest_flip,
            2.0 * self.tolerance,
            self.confident_flips,
            verdict(self.confident_flips == 0)
        );
    }
}

/// Throughput (no synchronisation inside) and the attention share (synchronised around each
/// attention call) of both modes.
pub fn report_throughput(model: &Model, g: &Generation) -> Result<()> {
    let (batch, prompt) = g.prompt.dims2()?;
    for mode in [Mode::Candle, Mode::Flashcore] {
        let r = run(model, mode, g, None, false)?;
        let p = run(model, mode, g, None, true)?;
        let model_secs = p.prefill_secs + p.decode_secs;
        println!(
            "{mode:?}: prefill {:.0} tok/s ({:.1} ms), decode {:.1} tok/s ({:.2} ms/step); attention {:.1}% of the model's time",
            (batch * prompt) as f64 / r.prefill_secs,
            r.prefill_secs * 1e3,
            (batch * g.steps) as f64 / r.decode_secs,
            r.decode_secs * 1e3 / g.steps as f64,
            100.0 * p.attn_secs / model_secs
        );
    }
    Ok(())
}

/// The attention op alone at the model's shapes: mean seconds per call.
pub fn time_attention(
    model: &Model,
    mode: Mode,
    batch: usize,
    s: usize,
    keys: usize,
    iters: usize,
) -> Result<f64> {
    let c = &model.shape;
    let d = c.head_dim();
    let dev = &model.dev;
    let bf = |shape: (usize, usize, usize, usize)| -> Result<Tensor> {
        Tensor::randn(0f32, 1.0, shape, dev)?.to_dtype(DType::BF16)
    };
    let q = bf((batch, s, c.heads, d))?;
    let scale = 1.0 / (d as f32).sqrt();
    let cap = keys + 1;
    let kc = bf((batch, cap, c.kv_heads, d))?;
    let vc = bf((batch, cap, c.kv_heads, d))?;
    let used = Tensor::new(vec![keys as u32; batch].as_slice(), dev)?;
    let kt = kc.narrow(1, 0, keys)?.transpose(1, 2)?.contiguous()?;
    let vt = vc.narrow(1, 0, keys)?.transpose(1, 2)?.contiguous()?;
    let call = || -> Result<Tensor> {
        match mode {
            Mode::Flashcore => fc::flash_attn_with_kvcache(
                &q,
                &kc,
                &vc,
                None,
                None,
                &used,
                None,
                None,
                scale,
                None,
                Some(0),
                None,
            ),
            Mode::Candle | Mode::CandleF32 => {
                candle_attention(mode, &q, &kt, &vt, scale, c.heads / c.kv_heads)
            }
        }
    };
    call()?;
    dev.synchronize()?;
    let t0 = Instant::now();
    for _ in 0..iters {
        call()?;
    }
    dev.synchronize()?;
    Ok(t0.elapsed().as_secs_f64() / iters as f64)
}

/// [`time_attention`] of both modes at a prefill's and a decode step's shape.
pub fn report_attention_alone(
    model: &Model,
    batch: usize,
    prompt: usize,
    steps: usize,
) -> Result<()> {
    for (what, s, keys) in [("prefill", prompt, prompt), ("decode", 1, prompt + steps)] {
        let c = time_attention(model, Mode::Candle, batch, s, keys, 20)?;
        let f = time_attention(model, Mode::Flashcore, batch, s, keys, 20)?;
        println!(
            "attention op alone, {what} (b={batch}, s_q={s}, keys={keys}): candle {:.3} ms, flashcore {:.3} ms: {:.2}x",
            c * 1e3,
            f * 1e3,
            c / f
        );
    }
    Ok(())
}

/// The first CUDA device, or exit 2 saying why.
pub fn cuda_device(example: &str) -> Device {
    match Device::new_cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{example} needs a CUDA device: {e}");
            std::process::exit(2);
        }
    }
}
