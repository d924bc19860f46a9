//! `flashcore`: list the kernel generations and devices, and run attention on `.npy` files.
//!
//! Exit codes: 0 success, 1 a device/kernel failure, 2 bad input (files, shapes, options).

mod modes;
mod npy;
#[cfg(test)]
#[path = "../tests/support/npy_file.rs"]
mod npy_file;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use flashcore::{DType, Device, HostInputs};
use modes::{Loaded, ModeFlags, RunLayout, Settings};

#[derive(Parser)]
#[command(
    name = "flashcore",
    version,
    about = "FlashAttention-style attention kernels for NVIDIA GPUs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing buys nothing
enum Command {
    /// The kernel generations compiled in, with what each takes.
    Kernels,
    /// The CUDA devices visible, with what kernels plan against.
    Devices,
    /// O = softmax(scale·Q·Kᵀ)·V on .npy inputs (float16 or float32), written as float32 .npy;
    /// varlen, KV cache (contiguous or paged, with appended tokens), sliding windows, softcap and
    /// ALiBi as FlashAttention's flash_attn_varlen_func / flash_attn_with_kvcache, fp8 (e4m3) KV
    /// caches with descale factors as FlashAttention 3's, its fp8 forward (e4m3 Q, K and V:
    /// --q-dtype e4m3 --kv-dtype e4m3), and candle-flash-attn's mm_prefix_ranges (docs/MODES.md).
    Run {
        /// Generation name (see `flashcore kernels`), or "auto" for the fastest that takes the problem.
        #[arg(long, default_value = "auto")]
        kernel: String,
        /// Queries: 4-D in --layout, or [total_q, heads_q, head_dim] with --layout thd.
        #[arg(long, value_name = "NPY")]
        q: PathBuf,
        /// Keys: 4-D in --layout (a cache [batch, capacity, ..] with --seqused-k), [total_k, heads_kv, head_dim] with --cu-seqlens-k, or [num_blocks, block_size, heads_kv, head_dim] with --block-table.
        #[arg(long, value_name = "NPY")]
        k: PathBuf,
        /// Values, shaped as --k.
        #[arg(long, value_name = "NPY")]
        v: PathBuf,
        /// Output O, float32, shaped as --q.
        #[arg(long, value_name = "NPY")]
        out: PathBuf,
        /// Also write the per-row log-sum-exp, float32 [batch, heads_q, seq_q] ([heads_q, total_q] with --layout thd).
        #[arg(long, value_name = "NPY")]
        lse: Option<PathBuf>,
        /// Bottom-right aligned causal mask (window_size[1] = 0).
        #[arg(long)]
        causal: bool,
        /// Softmax scale (default 1/sqrt(head_dim)); 0 and negative values are valid.
        #[arg(long, allow_hyphen_values = true)]
        scale: Option<f32>,
        /// bshd, bhsd, or thd: packed varlen Q/O [total_tokens, heads, head_dim] (needs --cu-seqlens-q).
        #[arg(long, default_value = "bshd", value_parser = parse_layout)]
        layout: RunLayout,
        /// Kernel dtype; inputs are rounded to it (O's dtype with --q-dtype e4m3).
        #[arg(long, default_value = "f16", value_parser = parse_dtype)]
        dtype: DType,
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Batch-invariant mode: each sequence's O and LSE bit-identical whatever else is in the
        /// batch (docs/MODES.md).
        #[arg(long)]
        batch_invariant: bool,
        #[command(flatten)]
        modes: ModeFlags,
    },
}

fn parse_layout(s: &str) -> Result<RunLayout, String> {
    s.parse()
}
fn parse_dtype(s: &str) -> Result<DType, String> {
    s.parse()
}

/// A failure the user can fix (exit 2) versus one of the device (exit 1).
enum Failure {
    Input(anyhow::Error),
    Device(anyhow::Error),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Input(e)) => {
            eprintln!("flashcore: {}", one_line(&e));
            ExitCode::from(2)
        }
        Err(Failure::Device(e)) => {
            eprintln!("flashcore: {}", one_line(&e));
            ExitCode::from(1)
        }
    }
}

/// `--help` and `--version` print as usual; a bad command line is one line on stderr, exit 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            eprintln!(
                "flashcore: a command is needed: kernels, devices or run (see flashcore --help)"
            );
            ExitCode::from(2)
        }
        _ => {
            // The error paragraph (up to the first blank line), without the usage block.
            let rendered = e.render().to_string();
            let para: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .skip_while(|l| l.is_empty())
                .take_while(|l| !l.is_empty())
                .collect();
            let msg = para.join(" ");
            let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
            eprintln!(
                "flashcore: {} (see --help)",
                if msg.is_empty() {
                    "bad command line"
                } else {
                    msg
                }
            );
            ExitCode::from(2)
        }
    }
}

fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " | ")
}

fn run(cmd: Command) -> Result<(), Failure> {
    match cmd {
        Command::Kernels => {
            print!("{}", flashcore::capabilities_table());
            Ok(())
        }
        Command::Devices => devices().map_err(Failure::Device),
        Command::Run {
            kernel,
            q,
            k,
            v,
            out,
            lse,
            causal,
            scale,
            layout,
            dtype,
            device,
            batch_invariant,
            modes,
        } => {
            let input = |e: anyhow::Error| Failure::Input(e);
            // Everything the user can get wrong is checked before the device is opened: the
            // kernel name, the flag combination, the output paths, the files, their shapes and
            // the tables' contents.
            let named = if kernel == "auto" {
                None
            } else {
                Some(flashcore::kernel(&kernel).ok_or_else(|| {
                    let names: Vec<&str> = flashcore::kernels().iter().map(|k| k.name()).collect();
                    Failure::Input(anyhow::anyhow!(
                        "unknown kernel '{kernel}' (compiled in: {})",
                        names.join(", ")
                    ))
                })?)
            };
            let settings = Settings::new(layout, dtype, causal, scale).with_flags(&modes);
            modes::check_combination(&settings, &modes.given()).map_err(input)?;
            let outputs = [
                Some(&out),
                lse.as_ref(),
                modes.k_cache_out.as_ref(),
                modes.v_cache_out.as_ref(),
            ];
            for path in outputs.into_iter().flatten() {
                check_writable_dir(path).map_err(input)?;
            }
            let f32s =
                |p: &Option<PathBuf>| p.as_deref().map(npy::read_f32).transpose().map_err(input);
            let i32s = |p: &Option<PathBuf>| {
                p.as_deref()
                    .map(|p| npy::read_i32(p).map(modes::Arr::from))
                    .transpose()
                    .map_err(input)
            };
            // K and V of an fp8 cache may be its bytes (uint8 files) or its values.
            let kv = |p: &PathBuf| match modes.kv_dtype {
                Some(modes::KvDtype::E4m3) => npy::read_e4m3(p).map_err(input),
                None => npy::read_f32(p).map_err(input),
            };
            // Q of an fp8 forward, likewise.
            let q_in = match modes.q_dtype {
                Some(modes::KvDtype::E4m3) => npy::read_e4m3(&q).map_err(input)?,
                None => npy::read_f32(&q).map_err(input)?,
            };
            let loaded = Loaded {
                q_descale: f32s(&modes.q_descale)?.map(modes::Arr::from),
                k_descale: f32s(&modes.k_descale)?.map(modes::Arr::from),
                v_descale: f32s(&modes.v_descale)?.map(modes::Arr::from),
                k_new: f32s(&modes.k_new)?,
                v_new: f32s(&modes.v_new)?,
                cu_seqlens_q: i32s(&modes.cu_seqlens_q)?,
                cu_seqlens_k: i32s(&modes.cu_seqlens_k)?,
                seqused_k: i32s(&modes.seqused_k)?,
                block_table: i32s(&modes.block_table)?,
                alibi_slopes: f32s(&modes.alibi_slopes)?.map(modes::Arr::from),
                mm_prefix_ranges: i32s(&modes.mm_prefix_ranges)?,
                k_cache_out: modes.k_cache_out.is_some(),
                v_cache_out: modes.v_cache_out.is_some(),
                ..Loaded::new(q_in, kv(&k)?, kv(&v)?)
            };
            let problem = modes::build(&settings, &loaded)
                .map_err(input)?
                .with_batch_invariant(batch_invariant);
            // Head dim, dtype and modes need no device to rule out.
            let lacks = |k: &dyn flashcore::Attention| -> Option<String> {
                let c = k.capabilities();
                if !c.dtypes.contains(&problem.dtype) || !c.head_dims.contains(problem.head_dim) {
                    return Some(format!("head dims {}, dtypes {:?}", c.head_dims, c.dtypes));
                }
                c.modes
                    .missing(&problem.modes)
                    .map(|m| format!("it lacks {m}"))
            };
            match &named {
                Some(k) => {
                    if let Some(why) = lacks(k.as_ref()) {
                        return Err(Failure::Input(anyhow::anyhow!(
                            "{} does not take {problem} ({why})",
                            k.name()
                        )));
                    }
                }
                None => {
                    let all = flashcore::kernels();
                    if all.iter().all(|k| lacks(k.as_ref()).is_some()) {
                        // Name the first generation that takes the head dim and dtype, if any:
                        // then it is a mode it lacks.
                        let takes_dims = all.iter().find(|k| {
                            let c = k.capabilities();
                            c.dtypes.contains(&problem.dtype)
                                && c.head_dims.contains(problem.head_dim)
                        });
                        let e = match takes_dims {
                            None => anyhow::anyhow!(
                                "no compiled-in generation takes head_dim {} with {}",
                                problem.head_dim,
                                problem.dtype
                            ),
                            Some(k) => anyhow::anyhow!(
                                "no compiled-in generation takes {problem} with these modes ({}: {})",
                                k.name(),
                                lacks(k.as_ref()).unwrap_or_default()
                            ),
                        };
                        return Err(Failure::Input(e));
                    }
                }
            }
            let dev = Device::open(device).map_err(|e| Failure::Device(e.into()))?;
            let attention = match named {
                Some(k) => k,
                None => flashcore::best_for(&problem, dev.info()).ok_or_else(|| {
                    let why: Vec<String> = flashcore::kernels()
                        .iter()
                        .filter_map(|k| k.supports(&problem, dev.info()).err())
                        .map(|u| format!("{}: {}", u.kernel, u.reason))
                        .collect();
                    Failure::Input(anyhow::anyhow!(
                        "no compiled-in generation takes {problem} ({})",
                        why.join("; ")
                    ))
                })?,
            };
            let output = flashcore::forward_host_modes(
                attention.as_ref(),
                &dev,
                &problem,
                HostInputs::new(loaded.q.view(), loaded.k.view(), loaded.v.view())
                    .with_append(
                        loaded.k_new.as_ref().map(|a| a.view()),
                        loaded.v_new.as_ref().map(|a| a.view()),
                    )
                    .with_tables(loaded.host_tables()),
            )
            .map_err(|e| match e {
                flashcore::Error::Invalid(_) | flashcore::Error::Unsupported(_) => {
                    Failure::Input(e.into())
                }
                other => Failure::Device(other.into()),
            })?;
            npy::write_f32(&out, &output.o).map_err(input)?;
            if let Some(path) = lse {
                npy::write_f32(&path, &output.lse).map_err(input)?;
            }
            for (path, cache) in [
                (&modes.k_cache_out, &output.k_cache),
                (&modes.v_cache_out, &output.v_cache),
            ] {
                if let (Some(path), Some(cache)) = (path, cache) {
                    npy::write_f32(path, cache).map_err(input)?;
                }
            }
            eprintln!(
                "flashcore: {} on {}: {problem}{} -> {}",
                attention.name(),
                dev.info().name,
                modes::summary(&problem.modes),
                out.display()
            );
            Ok(())
        }
    }
}

/// The directory an output goes to must exist (checked before the device work, not after).
fn check_writable_dir(path: &std::path::Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "{}: directory {} does not exist",
            path.display(),
            dir.display()
        );
    }
    if path.is_dir() {
        bail!("{}: is a directory, not a file to write", path.display());
    }
    Ok(())
}

fn devices() -> Result<()> {
    let n = Device::count()?;
    if n == 0 {
        println!("no CUDA devices");
    }
    for i in 0..n {
        let d = Device::open(i)?;
        let info = d.info();
        println!(
            "{i}: {} (cc {}.{}, {} SMs, {} MiB, smem/block {} KiB opt-in, L2 {} MiB, NVRTC arch {})",
            info.name,
            info.compute_capability.0,
            info.compute_capability.1,
            info.sm_count,
            info.total_memory >> 20,
            info.max_shared_memory_per_block_optin / 1024,
            info.l2_bytes >> 20,
            d.arch()
        );
    }
    if bail_if_no_nvrtc() {
        println!("note: NVRTC not found; kernels cannot be compiled (run `cargo xtask install-cuda` or install CUDA 13)");
    }
    Ok(())
}

fn bail_if_no_nvrtc() -> bool {
    flashcore::toolkit::ensure_nvrtc().is_err()
}
