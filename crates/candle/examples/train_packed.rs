//! Trains a small decoder-only transformer with candle-nn on the GPU through flashcore-candle's
//! packed varlen attention with a causal sliding window, forward and backward
//! (`flash_attn_varlen_windowed`), and compares it with the same model on candle's own attention:
//!
//! - **gradients**: the first [`CHECK_STEPS`] steps compute the loss and the gradient of every
//!   parameter with both attentions, on the same weights and the same batch, backward through the
//!   whole model; the worst relative L2 error `‖g_fc − g_ref‖ / ‖g_ref‖` over all parameters and
//!   steps must be at most [`GRAD_TOLERANCE`] (the optimizer steps on flashcore's gradients);
//! - **training**: `--steps` AdamW steps in all (the checked ones included) on flashcore's
//!   attention; the loss must fall below what any predictor blind to the earlier tokens can
//!   reach: the mean of the last [`LOSS_LAST`] steps under ln 26 − [`LOSS_MARGIN`] nats (see
//!   [`loss_bound`]), which takes the attention learning to copy;
//! - **speed**: `--time-steps` steps (forward, backward, optimizer) with each attention after
//!   [`WARMUP_STEPS`] warm-up steps, the device synchronized before each reading of the clock:
//!   steps/s, tokens/s and their ratio.
//!
//! Model: byte-level vocabulary (256), d_model 256, 4 pre-norm layers (RMSNorm) of 4 heads of
//! head dim 64 (MHA) with RoPE (positions restart at 0 in each packed sequence), a 4× GELU MLP,
//! output head tied to the embedding: 3.2 M parameters, f32 weights in a `VarMap`. Q, K and V are
//! cast to bf16 for flashcore's kernel and its output back to f32 (`to_dtype` is differentiable,
//! so the gradients flow through the casts). The reference attention is candle's own ops in f32,
//! one packed sequence at a time (matmul, the causal sliding-window mask, softmax, matmul).
//!
//! Data: synthetic, from a seeded RNG. Each sequence repeats a random pattern of 4–16 letters
//! (bytes `a`–`z`, uniform) to a random length in 32–512; sequences are packed into batches of
//! about `--tokens-per-batch` tokens (cumulative lengths as a u32 tensor, as FlashAttention's
//! varlen takes them); next-token prediction over every position but each sequence's last. The
//! loss starts at about ln 256 ≈ 5.5, falls within a few dozen steps to ln 26 ≈ 3.26 (which
//! letters occur: all a predictor blind to the context can know), and below that only as the
//! attention learns to copy the pattern seen earlier in the same sequence (at most 16 bytes back,
//! always inside the window), towards the share of first occurrences.
//!
//! Exits with an error (non-zero status) when the gradients disagree beyond the tolerance or the
//! loss does not fall; ends with a Markdown summary table.
//!
//! ```sh
//! cargo run --release -p flashcore-candle --features cuda --example train_packed
//! cargo run --release -p flashcore-candle --features cuda --example train_packed -- \
//!     --steps 300 --time-steps 50 --window 128 --seed 42 --tokens-per-batch 4096
//! ```

use std::collections::BTreeMap;
use std::time::Instant;

use candle_nn::{Embedding, Linear, Module, Optimizer, ParamsAdamW, RmsNorm, VarBuilder, VarMap};
use flashcore_candle::candle::backprop::GradStore;
use flashcore_candle::candle::{DType, Device, Error, Result, Tensor, Var, D};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const VOCAB: usize = 256;
const D_MODEL: usize = 256;
const HEADS: usize = 4;
const HEAD_DIM: usize = D_MODEL / HEADS;
const LAYERS: usize = 4;
const D_MLP: usize = 4 * D_MODEL;
const RMS_EPS: f64 = 1e-5;
const ROPE_THETA: f32 = 10_000.0;

/// Lengths of the packed sequences and of the patterns they repeat (inclusive ranges).
const SEQ_LEN: (usize, usize) = (32, 512);
const PATTERN_LEN: (usize, usize) = (4, 16);
/// The bytes the patterns are drawn from (uniformly).
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz";

/// Steps whose gradients are checked against candle's attention.
const CHECK_STEPS: usize = 3;
/// The gradient check's bound on `‖g_fc − g_ref‖ / ‖g_ref‖`, for every parameter and step.
///
/// flashcore's attention takes Q, K, V in bf16 and works as FlashAttention 2 does: P is rounded
/// to bf16 before P·V, O is returned in bf16 (so dO arrives in bf16), and the backward rounds P
/// and dS to bf16 before its products. bf16 keeps 8 significant bits: each rounding is a relative
/// error of at most 2⁻⁸ ≈ 3.9e-3, about 2.3e-3 RMS. The reference does all of it in f32. Half a
/// dozen such independent roundings on the path of a gradient give an RMS relative error of
/// roughly √6 × 2.3e-3 ≈ 6e-3 at the attention; four layers of backward carry it into every
/// weight gradient, where sums over ~4000 tokens average part of it out and the chain through the
/// layers can amplify part of it. 2e-2 is about 3× that estimate: it passes bf16 rounding noise
/// (a CPU emulation of these roundings on this model gave worst errors of 2e-3 to 5e-3, the H200
/// 3.4e-3) and fails anything structural — a wrong mask, window or sequence boundary, a missing
/// or misplaced dQ/dK/dV row, or a missing gradient, which give errors of order 1.
const GRAD_TOLERANCE: f32 = 2e-2;

/// The loss-falls rule: the mean of the last `LOSS_LAST` steps below [`loss_bound`], ln 26 −
/// `LOSS_MARGIN` ≈ 3.01 nats (the mean of the first `LOSS_FIRST`, about 5.1–5.6, is reported
/// beside it). The pattern letters are uniform over 26, so a model that does not look at the
/// earlier tokens of its sequence cannot beat ln 26 ≈ 3.26 however well it trains: the
/// embedding, MLP and head learn that much in a few dozen steps, and only the attention, forward
/// and backward, takes the loss below it. The margin is 3× the spread of a 20-step mean on a
/// plateau (single batches move by about ±0.3, their means by about ±0.07). On uniform random
/// bytes (this example's first data) the copy was learned too slowly to judge in 300 steps (on
/// the H200: 5.53 → 4.72, and 3.5 at 2000; `docs/results/2026-11-30-hopper-bwd-modes-h200`);
/// with 26 letters, two CPU runs of this model (f32 attention with the kernel's bf16 roundings
/// emulated; seeds 42 and 7) sat near ln 26 until step 100–150, then fell: the last 20 steps'
/// means were 1.81 and 1.81, the first 5 steps' 5.09 and 5.15. Judged when `--steps` ≥
/// `LOSS_FIRST + LOSS_LAST`.
const LOSS_FIRST: usize = 5;
const LOSS_LAST: usize = 20;
const LOSS_MARGIN: f32 = 0.25;

/// The bound of the loss-falls rule: the entropy of the pattern letters, ln 26, less
/// `LOSS_MARGIN`.
fn loss_bound() -> f32 {
    (ALPHABET.len() as f32).ln() - LOSS_MARGIN
}

/// Steps of linear learning-rate warm-up at the start of training.
const LR_WARMUP: usize = 20;
/// Warm-up steps before each timing.
const WARMUP_STEPS: usize = 5;
/// Distinct batches the timed steps cycle through (drawn before the clock starts).
const TIMING_BATCHES: usize = 8;
/// Print the training loss every this many steps.
const PRINT_EVERY: usize = 25;

const USAGE: &str =
    "usage: train_packed [--steps N (300)] [--time-steps N (50)] [--window N (128)] \
                     [--seed N (42)] [--tokens-per-batch N (4096)] [--lr X (1e-3)]";

#[derive(Clone, Debug)]
struct Config {
    /// Optimizer steps in all, the gradient check's first.
    steps: usize,
    /// Timed steps per attention.
    time_steps: usize,
    /// Keys left of the query each query sees (plus itself): query i sees key j iff
    /// i − window ≤ j ≤ i.
    window: usize,
    seed: u64,
    tokens_per_batch: usize,
    lr: f64,
}

/// A usage error: says why and exits with status 2.
fn bad(msg: String) -> ! {
    eprintln!("train_packed: {msg}\n{USAGE}");
    std::process::exit(2);
}

impl Config {
    fn from_args() -> Config {
        let mut c = Config {
            steps: 300,
            time_steps: 50,
            window: 128,
            seed: 42,
            tokens_per_batch: 4096,
            lr: 1e-3,
        };
        let mut args = std::env::args().skip(1);
        while let Some(k) = args.next() {
            if k == "--help" || k == "-h" {
                println!("{USAGE}");
                std::process::exit(0);
            }
            let v = args.next().unwrap_or_default();
            let n = || -> usize {
                v.parse()
                    .unwrap_or_else(|_| bad(format!("{k} wants a whole number, not {v:?}")))
            };
            match k.as_str() {
                "--steps" => c.steps = n(),
                "--time-steps" => c.time_steps = n(),
                "--window" => c.window = n(),
                "--seed" => c.seed = n() as u64,
                "--tokens-per-batch" => c.tokens_per_batch = n(),
                "--lr" => {
                    c.lr = v
                        .parse()
                        .unwrap_or_else(|_| bad(format!("--lr wants a number, not {v:?}")))
                }
                other => bad(format!("unknown argument {other}")),
            }
        }
        if c.steps < CHECK_STEPS {
            bad(format!(
                "--steps must be at least {CHECK_STEPS} (the gradient check's)"
            ));
        }
        if c.tokens_per_batch < SEQ_LEN.0 {
            bad(format!("--tokens-per-batch must be at least {}", SEQ_LEN.0));
        }
        c
    }
}

/// One packed batch: sequences laid end to end, FlashAttention's varlen layout.
struct Batch {
    /// Token ids `(total)`, u32.
    tokens: Tensor,
    /// Cumulative sequence lengths `(batch + 1)`, u32, starting at 0.
    cu_seqlens: Tensor,
    /// Each sequence's first row and length.
    spans: Vec<(usize, usize)>,
    max_seqlen: usize,
    total: usize,
    /// RoPE factors `(total, 1, HEAD_DIM)` of each token's position in its own sequence.
    cos: Tensor,
    sin: Tensor,
    /// The rows that have a next token in their sequence `(n)`, u32, and that token `(n)`.
    rows: Tensor,
    targets: Tensor,
    /// The reference attention's additive masks, `(len, len)` f32 per sequence: 0 where query i
    /// sees key j (i − window ≤ j ≤ i), −∞ elsewhere. Empty when drawn without them.
    masks: Vec<Tensor>,
}

impl Batch {
    fn draw(rng: &mut StdRng, cfg: &Config, with_masks: bool, dev: &Device) -> Result<Batch> {
        let budget = cfg.tokens_per_batch;
        let mut tokens: Vec<u32> = Vec::with_capacity(budget);
        let mut positions: Vec<usize> = Vec::with_capacity(budget);
        let mut spans = Vec::new();
        // The last sequence takes what is left of the budget (at least 2 tokens, so that it
        // has a prediction).
        while budget - tokens.len() >= 2 {
            let len = rng
                .gen_range(SEQ_LEN.0..=SEQ_LEN.1)
                .min(budget - tokens.len());
            let period = rng.gen_range(PATTERN_LEN.0..=PATTERN_LEN.1);
            let pattern: Vec<u32> = (0..period)
                .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as u32)
                .collect();
            spans.push((tokens.len(), len));
            tokens.extend((0..len).map(|i| pattern[i % period]));
            positions.extend(0..len);
        }
        let total = tokens.len();
        let max_seqlen = spans.iter().map(|s| s.1).max().unwrap_or(0);
        let mut cu = vec![0u32];
        cu.extend(spans.iter().map(|&(start, len)| (start + len) as u32));
        let (mut rows, mut targets) = (Vec::new(), Vec::new());
        for &(start, len) in &spans {
            for r in start..start + len - 1 {
                rows.push(r as u32);
                targets.push(tokens[r + 1]);
            }
        }
        // RoPE, half-split convention: dims i and i + HEAD_DIM/2 rotate by position × θ^(−2i/d).
        let half = HEAD_DIM / 2;
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| ROPE_THETA.powf(-2.0 * i as f32 / HEAD_DIM as f32))
            .collect();
        let (mut cos, mut sin) = (
            Vec::with_capacity(total * HEAD_DIM),
            Vec::with_capacity(total * HEAD_DIM),
        );
        for &p in &positions {
            for _ in 0..2 {
                for f in &inv_freq {
                    let a = p as f32 * f;
                    cos.push(a.cos());
                    sin.push(a.sin());
                }
            }
        }
        let mut masks = Vec::new();
        if with_masks {
            for &(_, len) in &spans {
                let m: Vec<f32> = (0..len)
                    .flat_map(|i| {
                        (0..len).map(move |j| {
                            if j <= i && i - j <= cfg.window {
                                0.0
                            } else {
                                f32::NEG_INFINITY
                            }
                        })
                    })
                    .collect();
                masks.push(Tensor::from_vec(m, (len, len), dev)?);
            }
        }
        let n = rows.len();
        Ok(Batch {
            tokens: Tensor::from_vec(tokens, total, dev)?,
            cu_seqlens: Tensor::from_vec(cu, spans.len() + 1, dev)?,
            spans,
            max_seqlen,
            total,
            cos: Tensor::from_vec(cos, (total, 1, HEAD_DIM), dev)?,
            sin: Tensor::from_vec(sin, (total, 1, HEAD_DIM), dev)?,
            rows: Tensor::from_vec(rows, n, dev)?,
            targets: Tensor::from_vec(targets, n, dev)?,
            masks,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attention {
    /// flashcore-candle's `flash_attn_varlen_windowed` on bf16 Q, K, V.
    Flashcore,
    /// candle's own ops in f32, one packed sequence at a time.
    Candle,
}

impl Attention {
    fn name(self) -> &'static str {
        match self {
            Attention::Flashcore => "flashcore",
            Attention::Candle => "candle",
        }
    }
}

struct Layer {
    norm1: RmsNorm,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    norm2: RmsNorm,
    up: Linear,
    down: Linear,
}

struct Model {
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    head: Linear,
    window: usize,
}

/// RMSNorm through candle's differentiable ops. `RmsNorm::forward` takes candle-nn's fused
/// kernel on contiguous input, which has no backward (`apply_op2_no_bwd`: the gradient would
/// silently stop there); `forward_diff` is the same norm built from tensor ops.
fn norm(n: &RmsNorm, x: &Tensor) -> Result<Tensor> {
    n.forward_diff(x)
}

/// RoPE on `(total, heads, HEAD_DIM)` with the batch's per-token factors, from differentiable
/// ops (candle-nn's `rope*` kernels have no backward either).
fn rope(x: &Tensor, b: &Batch) -> Result<Tensor> {
    let half = HEAD_DIM / 2;
    let rotated = Tensor::cat(
        &[
            &x.narrow(D::Minus1, half, half)?.neg()?,
            &x.narrow(D::Minus1, 0, half)?,
        ],
        D::Minus1,
    )?;
    x.broadcast_mul(&b.cos)? + rotated.broadcast_mul(&b.sin)?
}

fn softmax_scale() -> f32 {
    1.0 / (HEAD_DIM as f32).sqrt()
}

/// flashcore's varlen attention, causal with a left window (candle-flash-attn's convention:
/// `window_size_right = Some(0)` with a left window is causal and sliding; a left window of at
/// least `max_seqlen` is plain causal). f32 in and out, bf16 in the kernel.
fn flashcore_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    b: &Batch,
    window: usize,
) -> Result<Tensor> {
    let bf = |t: &Tensor| t.to_dtype(DType::BF16);
    flashcore_candle::flash_attn_varlen_windowed(
        &bf(q)?,
        &bf(k)?,
        &bf(v)?,
        &b.cu_seqlens,
        &b.cu_seqlens,
        b.max_seqlen,
        b.max_seqlen,
        softmax_scale(),
        Some(window),
        Some(0),
    )?
    .to_dtype(DType::F32)
}

/// The same attention from candle's own ops in f32, sequence by sequence on views of the packed
/// Q, K, V: scores, the batch's window mask, softmax, P·V. (candle-nn 0.11's
/// `flash_attn_varlen_unfused` does this too but through `softmax_last_dim`, which has no
/// backward; `ops::softmax` is built from differentiable ops.)
fn candle_attention(q: &Tensor, k: &Tensor, v: &Tensor, b: &Batch) -> Result<Tensor> {
    if b.masks.len() != b.spans.len() {
        return Err(Error::msg(
            "candle's attention needs a batch drawn with its masks",
        ));
    }
    let mut outs = Vec::with_capacity(b.spans.len());
    for (&(start, len), mask) in b.spans.iter().zip(&b.masks) {
        let heads = |t: &Tensor| t.narrow(0, start, len)?.transpose(0, 1)?.contiguous();
        let (q, k, v) = (heads(q)?, heads(k)?, heads(v)?);
        let scores = (q.matmul(&k.t()?)? * softmax_scale() as f64)?.broadcast_add(mask)?;
        let p = candle_nn::ops::softmax(&scores, D::Minus1)?;
        outs.push(p.matmul(&v)?.transpose(0, 1)?);
    }
    Tensor::cat(&outs, 0)
}

/// GPT-2's initialization: weights N(0, `INIT_STD`), the projections back into the residual
/// stream (`wo`, `down`) scaled by 1/√(2·LAYERS). (candle-nn's defaults — Kaiming for ReLU on the
/// linear layers, N(0, 1) embeddings — learned the copying several times slower in a CPU trial.)
const INIT_STD: f64 = 0.02;

/// A bias-free linear layer `in → out` initialized N(0, `std`).
fn linear(vb: &VarBuilder, name: &str, (i, o): (usize, usize), std: f64) -> Result<Linear> {
    let init = candle_nn::Init::Randn {
        mean: 0.0,
        stdev: std,
    };
    Ok(Linear::new(
        vb.pp(name).get_with_hints((o, i), "weight", init)?,
        None,
    ))
}

impl Model {
    fn new(vb: VarBuilder, window: usize) -> Result<Model> {
        let residual_std = INIT_STD / (2.0 * LAYERS as f64).sqrt();
        let lin = |i, o, name: &str, vb: &VarBuilder| linear(vb, name, (i, o), INIT_STD);
        let out = |i, o, name: &str, vb: &VarBuilder| linear(vb, name, (i, o), residual_std);
        let rms = |name: &str, vb: &VarBuilder| candle_nn::rms_norm(D_MODEL, RMS_EPS, vb.pp(name));
        let mut layers = Vec::with_capacity(LAYERS);
        for l in 0..LAYERS {
            let vb = vb.pp(format!("layers.{l}"));
            layers.push(Layer {
                norm1: rms("norm1", &vb)?,
                wq: lin(D_MODEL, D_MODEL, "wq", &vb)?,
                wk: lin(D_MODEL, D_MODEL, "wk", &vb)?,
                wv: lin(D_MODEL, D_MODEL, "wv", &vb)?,
                wo: out(D_MODEL, D_MODEL, "wo", &vb)?,
                norm2: rms("norm2", &vb)?,
                up: lin(D_MODEL, D_MLP, "up", &vb)?,
                down: out(D_MLP, D_MODEL, "down", &vb)?,
            });
        }
        let embed = vb.pp("embed").get_with_hints(
            (VOCAB, D_MODEL),
            "weight",
            candle_nn::Init::Randn {
                mean: 0.0,
                stdev: INIT_STD,
            },
        )?;
        Ok(Model {
            embed: Embedding::new(embed.clone(), D_MODEL),
            layers,
            norm: rms("norm", &vb)?,
            // Tied to the embedding (its gradient is the sum of both uses).
            head: Linear::new(embed, None),
            window,
        })
    }

    /// Mean next-token cross-entropy over the batch's predicted rows.
    fn loss(&self, b: &Batch, attention: Attention) -> Result<Tensor> {
        let mut x = self.embed.forward(&b.tokens)?; // (total, D_MODEL)
        for l in &self.layers {
            let h = norm(&l.norm1, &x)?;
            let heads = |w: &Linear| w.forward(&h)?.reshape((b.total, HEADS, HEAD_DIM));
            let q = rope(&heads(&l.wq)?, b)?;
            let k = rope(&heads(&l.wk)?, b)?;
            let v = heads(&l.wv)?;
            let o = match attention {
                Attention::Flashcore => flashcore_attention(&q, &k, &v, b, self.window)?,
                Attention::Candle => candle_attention(&q, &k, &v, b)?,
            };
            x = (x + l.wo.forward(&o.reshape((b.total, D_MODEL))?)?)?;
            let h = norm(&l.norm2, &x)?;
            x = (&x + l.down.forward(&l.up.forward(&h)?.gelu()?)?)?;
        }
        let h = norm(&self.norm, &x)?.index_select(&b.rows, 0)?;
        candle_nn::loss::cross_entropy(&self.head.forward(&h)?, &b.targets)
    }
}

/// `‖got − want‖ / ‖want‖` (L2 over all elements; NaN counts as infinite).
fn relative_l2(got: &Tensor, want: &Tensor) -> Result<f32> {
    let norm2 = |t: &Tensor| -> Result<f64> {
        let squares = t.to_dtype(DType::F64)?.sqr()?.sum_all()?;
        Ok(squares.to_scalar::<f64>()?.sqrt())
    };
    let (diff, base) = (norm2(&(got - want)?)?, norm2(want)?);
    Ok(if diff.is_nan() {
        f32::INFINITY
    } else if diff == 0.0 {
        0.0
    } else {
        (diff / base) as f32
    })
}

/// The gradient check's findings: per step the two losses, per parameter each step's error.
#[derive(Default)]
struct GradCheck {
    losses: Vec<(f32, f32)>,
    errors: BTreeMap<String, Vec<f32>>,
}

impl GradCheck {
    /// The worst error: (error, parameter, step).
    fn worst(&self) -> (f32, String, usize) {
        let mut worst = (0f32, String::new(), 0);
        for (name, errs) in &self.errors {
            for (step, &e) in errs.iter().enumerate() {
                if e > worst.0 || e.is_nan() {
                    worst = (e, name.clone(), step);
                }
            }
        }
        worst
    }

    fn ok(&self) -> bool {
        self.worst().0 <= GRAD_TOLERANCE
    }

    /// Compares one step's gradients, parameter by parameter (every one must have both).
    fn record(
        &mut self,
        params: &[(String, Var)],
        (loss_fc, grads_fc): (f32, &GradStore),
        (loss_ref, grads_ref): (f32, &GradStore),
    ) -> Result<()> {
        let step = self.losses.len();
        self.losses.push((loss_fc, loss_ref));
        let mut worst = (0f32, "");
        for (name, var) in params {
            let get = |g: &GradStore, which: &str| {
                g.get(var.as_tensor()).cloned().ok_or_else(|| {
                    Error::msg(format!("no {which} gradient for {name} (step {step})"))
                })
            };
            let e = relative_l2(&get(grads_fc, "flashcore")?, &get(grads_ref, "candle")?)?;
            if e > worst.0 || e.is_nan() {
                worst = (e, name);
            }
            self.errors.entry(name.clone()).or_default().push(e);
        }
        println!(
            "check step {step}: loss flashcore {loss_fc:.5}, candle {loss_ref:.5} (|Δ| {:.1e}); \
             worst gradient error {:.2e} ({})",
            (loss_fc - loss_ref).abs(),
            worst.0,
            worst.1
        );
        Ok(())
    }

    fn print(&self) {
        let steps = self.losses.len();
        println!("\nrelative L2 gradient error ‖g_fc − g_ref‖ / ‖g_ref‖ per parameter:");
        print!("| parameter |");
        for s in 0..steps {
            print!(" step {s} |");
        }
        println!();
        println!("|---|{}", "---:|".repeat(steps));
        for (name, errs) in &self.errors {
            print!("| {name} |");
            for e in errs {
                print!(" {e:.2e} |");
            }
            println!();
        }
        let (e, name, step) = self.worst();
        println!(
            "worst: {e:.3e} ({name}, step {step}); tolerance {GRAD_TOLERANCE:.0e}: {}\n",
            if self.ok() { "pass" } else { "FAIL" }
        );
    }
}

/// One optimizer step on the batch's loss with `attention`; returns the loss tensor.
fn train_step(
    model: &Model,
    opt: &mut candle_nn::AdamW,
    b: &Batch,
    attention: Attention,
) -> Result<Tensor> {
    let loss = model.loss(b, attention)?;
    let grads = loss.backward()?;
    opt.step(&grads)?;
    Ok(loss)
}

/// Seconds of `steps` training steps with `attention` after the warm-up, the device synchronized
/// before the clock starts and before it is read.
fn time_training(
    model: &Model,
    opt: &mut candle_nn::AdamW,
    batches: &[Batch],
    attention: Attention,
    steps: usize,
    dev: &Device,
) -> Result<f64> {
    for b in batches.iter().cycle().take(WARMUP_STEPS) {
        train_step(model, opt, b, attention)?;
    }
    dev.synchronize()?;
    let t0 = Instant::now();
    for b in batches.iter().cycle().take(steps) {
        train_step(model, opt, b, attention)?;
    }
    dev.synchronize()?;
    Ok(t0.elapsed().as_secs_f64())
}

fn mean(xs: &[f32]) -> f32 {
    xs.iter().sum::<f32>() / xs.len().max(1) as f32
}

fn main() {
    if let Err(e) = run(&Config::from_args()) {
        eprintln!("train_packed: {e}");
        std::process::exit(1);
    }
}

fn run(cfg: &Config) -> Result<()> {
    let dev = match Device::new_cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("train_packed needs a CUDA device: {e}");
            std::process::exit(2);
        }
    };
    dev.set_seed(cfg.seed)?;
    let mut rng = StdRng::seed_from_u64(cfg.seed);

    let varmap = VarMap::new();
    let model = Model::new(
        VarBuilder::from_varmap(&varmap, DType::F32, &dev),
        cfg.window,
    )?;
    let mut params: Vec<(String, Var)> = varmap
        .data()
        .lock()
        .expect("the VarMap's lock")
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    let n_params: usize = params.iter().map(|(_, v)| v.elem_count()).sum();
    println!(
        "model: vocab {VOCAB}, d_model {D_MODEL}, {LAYERS} layers, {HEADS} heads of {HEAD_DIM}, \
         MLP {D_MLP}; {n_params} parameters ({:.2} M) in {} tensors, f32",
        n_params as f64 / 1e6,
        params.len()
    );
    println!(
        "data: packed batches of ~{} tokens (sequences of {}-{} repeating {}-{} letters a-z); \
         causal sliding window {} (query i sees keys i-{}..=i); AdamW lr {}; seed {}",
        cfg.tokens_per_batch,
        SEQ_LEN.0,
        SEQ_LEN.1,
        PATTERN_LEN.0,
        PATTERN_LEN.1,
        cfg.window,
        cfg.window,
        cfg.lr,
        cfg.seed
    );
    let mut opt = candle_nn::AdamW::new(
        varmap.all_vars(),
        ParamsAdamW {
            lr: cfg.lr,
            ..ParamsAdamW::default()
        },
    )?;

    // Gradient check, then training: one loop, the first CHECK_STEPS steps also backed through
    // candle's attention on the same weights and batch; the optimizer always takes flashcore's.
    let mut check = GradCheck::default();
    let mut losses: Vec<f32> = Vec::with_capacity(cfg.steps);
    let t0 = Instant::now();
    for step in 0..cfg.steps {
        let checking = step < CHECK_STEPS;
        let b = Batch::draw(&mut rng, cfg, checking, &dev)?;
        let loss = model.loss(&b, Attention::Flashcore)?;
        let grads = loss.backward()?;
        let l = loss.to_scalar::<f32>()?;
        if checking {
            let loss_ref = model.loss(&b, Attention::Candle)?;
            let grads_ref = loss_ref.backward()?;
            check.record(
                &params,
                (l, &grads),
                (loss_ref.to_scalar::<f32>()?, &grads_ref),
            )?;
            if step + 1 == CHECK_STEPS {
                check.print();
            }
        }
        if !l.is_finite() {
            return Err(Error::msg(format!("the loss is {l} at step {step}")));
        }
        opt.set_learning_rate(cfg.lr * ((step + 1) as f64 / LR_WARMUP as f64).min(1.0));
        opt.step(&grads)?;
        losses.push(l);
        if step % PRINT_EVERY == 0 || step + 1 == cfg.steps {
            println!(
                "step {step:>4}: loss {l:.4} ({} sequences, {} tokens; {:.1}s)",
                b.spans.len(),
                b.total,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let judged = losses.len() >= LOSS_FIRST + LOSS_LAST;
    let first = mean(&losses[..LOSS_FIRST.min(losses.len())]);
    let last = mean(&losses[losses.len().saturating_sub(LOSS_LAST)..]);
    let loss_ok = !judged || last < loss_bound();

    // Speed: the same steps with each attention on the same batches.
    let mut timing_rng = StdRng::seed_from_u64(cfg.seed ^ 0x7469_6d65);
    let batches = (0..TIMING_BATCHES)
        .map(|_| Batch::draw(&mut timing_rng, cfg, true, &dev))
        .collect::<Result<Vec<_>>>()?;
    let timed_tokens: usize = batches
        .iter()
        .cycle()
        .take(cfg.time_steps)
        .map(|b| b.total)
        .sum();
    let mut rates = Vec::new();
    for attention in [Attention::Flashcore, Attention::Candle] {
        let secs = time_training(&model, &mut opt, &batches, attention, cfg.time_steps, &dev)?;
        let (steps_s, tokens_s) = (cfg.time_steps as f64 / secs, timed_tokens as f64 / secs);
        println!(
            "timing {}: {} steps in {secs:.3}s: {steps_s:.2} steps/s, {tokens_s:.0} tokens/s",
            attention.name(),
            cfg.time_steps
        );
        rates.push((steps_s, tokens_s));
    }

    let (worst, worst_name, worst_step) = check.worst();
    let verdict = |ok: bool| if ok { "pass" } else { "FAIL" };
    println!("\n| check | value | criterion | result |");
    println!("|---|---|---|---|");
    println!(
        "| gradients vs candle's f32 attention ({CHECK_STEPS} steps, {} parameters) | worst \
         ‖g_fc − g_ref‖/‖g_ref‖ {worst:.2e} ({worst_name}, step {worst_step}) | ≤ \
         {GRAD_TOLERANCE:.0e} | {} |",
        params.len(),
        verdict(check.ok())
    );
    println!(
        "| loss, step 0 → step {} | {:.4} → {:.4} | | |",
        losses.len() - 1,
        losses[0],
        losses[losses.len() - 1]
    );
    println!(
        "| loss, mean of first {LOSS_FIRST} → last {LOSS_LAST} steps | {first:.4} → {last:.4} \
         | last < ln {} − {LOSS_MARGIN} = {:.4} | {} |",
        ALPHABET.len(),
        loss_bound(),
        if judged {
            verdict(loss_ok)
        } else {
            "not judged (too few steps)"
        }
    );
    for (attention, (steps_s, tokens_s)) in [Attention::Flashcore, Attention::Candle]
        .into_iter()
        .zip(&rates)
    {
        println!(
            "| steps/s, {} attention (fwd+bwd+AdamW, {} steps) | {steps_s:.2} ({tokens_s:.0} \
             tokens/s) | | |",
            attention.name(),
            cfg.time_steps
        );
    }
    println!(
        "| ratio flashcore / candle | {:.2}× | | |",
        rates[0].0 / rates[1].0
    );

    let mut failures = Vec::new();
    if !check.ok() {
        failures.push(format!(
            "gradients disagree: worst relative error {worst:.3e} ({worst_name}, step \
             {worst_step}) > {GRAD_TOLERANCE:.0e}"
        ));
    }
    if !loss_ok {
        failures.push(format!(
            "the loss did not fall below the context-free bound: mean of the last {LOSS_LAST} \
             steps {last:.4} ≥ ln {} − {LOSS_MARGIN} = {:.4} (first {LOSS_FIRST}: {first:.4})",
            ALPHABET.len(),
            loss_bound()
        ));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::msg(failures.join("; ")))
    }
}
