//! A Llama-architecture decoder with random weights (`llama/mod.rs`) run in two attention modes,
//! flashcore-candle (`flash_attn_with_kvcache` on a preallocated cache, appending each step's K/V
//! in place) and candle's own matmul-softmax attention, through a prefill of a prompt batch and
//! greedy decode steps. It checks that the two agree:
//!
//! - flashcore's attention at every layer and step, on the model's own Q, K and V, by
//!   FlashAttention's tolerance rule against attention in f32 (`llama::AttnCheck`);
//! - logits at every step within `--tolerance` (max |Δ|, default 0.25 on bf16 logits of std ~1);
//! - the greedy token ids by the margin rule (`llama::Agreement`): bf16 runs of random weights
//!   flip near-ties (the H100 run of commit 8e61095 had 490 of 512 equal, all 22 others within
//!   2× the measured logit difference).
//!
//! Then it reports prefill and decode tokens/s of both modes, the share of attention in the
//! model's time, and the attention op timed alone at the model's shapes.
//!
//! Default configuration: TinyLlama-1.1B's shape (22 layers, hidden 2048, 32 query heads,
//! 4 KV heads, head_dim 64, MLP 5632, vocab 32000; 1.1 B parameters, bf16), batch 4, a
//! 512-token prompt and 128 decode steps; `--block-size N` puts flashcore's cache in N-row pages.
//!
//! ```sh
//! cargo run --release -p flashcore-candle --features cuda --example llama_decode -- --layers 22
//! ```

#[path = "llama/mod.rs"]
mod llama;

use candle_nn::Linear;
use flashcore_candle::candle::{DType, Device, Result, Tensor};
use llama::{Agreement, Generation, KvLayout, Layer, Mode, Model, Shape};

#[derive(Clone, Debug)]
struct Config {
    shape: Shape,
    batch: usize,
    prompt: usize,
    steps: usize,
    block_size: Option<usize>,
    tolerance: f32,
    seed: u64,
}

impl Config {
    fn from_args() -> Config {
        let mut c = Config {
            shape: Shape {
                layers: 22,
                hidden: 2048,
                heads: 32,
                kv_heads: 4,
                intermediate: 5632,
                vocab: 32000,
                rope_theta: 10000.0,
                rms_eps: 1e-5,
            },
            batch: 4,
            prompt: 512,
            steps: 128,
            block_size: None,
            tolerance: 0.25,
            seed: 299792458,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        for pair in args.chunks(2) {
            let (k, v) = (
                pair[0].as_str(),
                pair.get(1).map(String::as_str).unwrap_or(""),
            );
            let n = || v.parse::<usize>().expect("a number");
            match k {
                "--layers" => c.shape.layers = n(),
                "--hidden" => c.shape.hidden = n(),
                "--heads" => c.shape.heads = n(),
                "--kv-heads" => c.shape.kv_heads = n(),
                "--intermediate" => c.shape.intermediate = n(),
                "--vocab" => c.shape.vocab = n(),
                "--batch" => c.batch = n(),
                "--prompt" => c.prompt = n(),
                "--steps" => c.steps = n(),
                "--block-size" => c.block_size = Some(n()),
                "--tolerance" => c.tolerance = v.parse().expect("a number"),
                "--seed" => c.seed = v.parse().expect("a number"),
                other => panic!("unknown argument {other}"),
            }
        }
        c
    }
}

fn linear(dev: &Device, out: usize, inp: usize) -> Result<Linear> {
    let std = (1.0 / inp as f64).sqrt();
    let w = Tensor::randn(0f32, std as f32, (out, inp), dev)?.to_dtype(DType::BF16)?;
    Ok(Linear::new(w, None))
}

fn random_model(cfg: &Config, dev: &Device) -> Result<Model> {
    let c = &cfg.shape;
    let d = c.head_dim();
    let ones = Tensor::ones(c.hidden, DType::BF16, dev)?;
    let mut layers = Vec::new();
    for _ in 0..c.layers {
        layers.push(Layer {
            wq: linear(dev, c.heads * d, c.hidden)?,
            wk: linear(dev, c.kv_heads * d, c.hidden)?,
            wv: linear(dev, c.kv_heads * d, c.hidden)?,
            wo: linear(dev, c.hidden, c.heads * d)?,
            gate: linear(dev, c.intermediate, c.hidden)?,
            up: linear(dev, c.intermediate, c.hidden)?,
            down: linear(dev, c.hidden, c.intermediate)?,
            ln1: ones.clone(),
            ln2: ones.clone(),
        });
    }
    let embed = Tensor::randn(0f32, 1.0, (c.vocab, c.hidden), dev)?.to_dtype(DType::BF16)?;
    let lm_head = linear(dev, c.vocab, c.hidden)?;
    Model::new(
        c.clone(),
        embed,
        layers,
        ones,
        lm_head,
        cfg.prompt + cfg.steps + 1,
        dev,
    )
}

fn main() -> Result<()> {
    let cfg = Config::from_args();
    let dev = llama::cuda_device("llama_decode");
    dev.set_seed(cfg.seed)?;
    let c = &cfg.shape;
    println!(
        "config: {c}; batch {}, prompt {}, {} decode steps",
        cfg.batch, cfg.prompt, cfg.steps
    );
    let model = random_model(&cfg, &dev)?;
    let prompt_ids: Vec<u32> = (0..cfg.batch * cfg.prompt)
        .map(|i| ((i as u64 * 2654435761 + cfg.seed) % c.vocab as u64) as u32)
        .collect();
    let prompt = Tensor::from_vec(prompt_ids, (cfg.batch, cfg.prompt), &dev)?;
    let g = Generation {
        prompt: &prompt,
        steps: cfg.steps,
        layout: match cfg.block_size {
            Some(block_size) => KvLayout::Paged { block_size },
            None => KvLayout::Contiguous,
        },
    };

    // Agreement: the reference generates; flashcore is teacher-forced on its tokens.
    let reference = llama::run(&model, Mode::Candle, &g, None, false)?;
    let flash = llama::run_checked(&model, &g, Some(&reference.tokens))?;
    let agreement = Agreement::of(&reference, &flash, c.vocab, cfg.tolerance);
    agreement.print(cfg.steps);
    let attention = flash.attention.unwrap_or_default();
    attention.print();

    llama::report_throughput(&model, &g)?;
    llama::report_attention_alone(&model, cfg.batch, cfg.prompt, cfg.steps)?;
    if !agreement.ok() || !attention.ok() {
        std::process::exit(1);
    }
    Ok(())
}
