//! `flashcore`: list the kernel generations and devices, and run attention on `.npy` files.
//!
//! Exit codes: 0 success, 1 a device/kernel failure, 2 bad input (files, shapes, options).

mod npy;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use flashcore::{AttentionProblem, DType, Device, Layout};
use ndarray::Ix4;

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
enum Command {
    /// The kernel generations compiled in, with what each takes.
    Kernels,
    /// The CUDA devices visible, with what kernels plan against.
    Devices,
    /// O = softmax(scale·Q·Kᵀ)·V on .npy inputs (float16 or float32), written as float32 .npy.
    Run {
        /// Generation name (see `flashcore kernels`), or "auto" for the fastest that takes the problem.
        #[arg(long, default_value = "auto")]
        kernel: String,
        #[arg(long)]
        q: PathBuf,
        #[arg(long)]
        k: PathBuf,
        #[arg(long)]
        v: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// Also write the per-row log-sum-exp, float32 [batch, heads_q, seq_q].
        #[arg(long)]
        lse: Option<PathBuf>,
        /// Bottom-right aligned causal mask.
        #[arg(long)]
        causal: bool,
        /// Softmax scale (default 1/sqrt(head_dim)); 0 and negative values are valid.
        #[arg(long, allow_hyphen_values = true)]
        scale: Option<f32>,
        #[arg(long, default_value = "bshd", value_parser = parse_layout)]
        layout: Layout,
        /// Kernel dtype; inputs are rounded to it.
        #[arg(long, default_value = "f16", value_parser = parse_dtype)]
        dtype: DType,
        #[arg(long, default_value_t = 0)]
        device: usize,
    },
}

fn parse_layout(s: &str) -> Result<Layout, String> {
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
        } => {
            let read = |p: &PathBuf| -> Result<ndarray::Array4<f32>, Failure> {
                npy::read_f32(p)
                    .map_err(Failure::Input)?
                    .into_dimensionality::<Ix4>()
                    .map_err(|_| {
                        Failure::Input(anyhow::anyhow!(
                            "{}: expected a 4-D array ({})",
                            p.display(),
                            axes(layout)
                        ))
                    })
            };
            // Everything the user can get wrong is checked before the device is opened: the
            // kernel name, the output paths, the files and their shapes.
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
            for path in std::iter::once(&out).chain(lse.as_ref()) {
                check_writable_dir(path).map_err(Failure::Input)?;
            }
            let (qa, ka, va) = (read(&q)?, read(&k)?, read(&v)?);
            let problem = problem_from_shapes(
                qa.shape(),
                ka.shape(),
                va.shape(),
                layout,
                dtype,
                causal,
                scale,
            )
            .map_err(Failure::Input)?;
            // Head dim and dtype need no device to rule out.
            let takes = |k: &dyn flashcore::Attention| {
                let c = k.capabilities();
                c.dtypes.contains(&problem.dtype) && c.head_dims.contains(problem.head_dim)
            };
            match &named {
                Some(k) if !takes(k.as_ref()) => {
                    return Err(Failure::Input(anyhow::anyhow!(
                        "{} does not take {problem} (head dims {}, dtypes {:?})",
                        k.name(),
                        k.capabilities().head_dims,
                        k.capabilities().dtypes
                    )))
                }
                None if !flashcore::kernels().iter().any(|k| takes(k.as_ref())) => {
                    return Err(Failure::Input(anyhow::anyhow!(
                        "no compiled-in generation takes head_dim {} with {}",
                        problem.head_dim,
                        problem.dtype
                    )))
                }
                _ => {}
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
            let output = flashcore::forward_host(
                attention.as_ref(),
                &dev,
                &problem,
                qa.view(),
                ka.view(),
                va.view(),
            )
            .map_err(|e| match e {
                flashcore::Error::Invalid(_) | flashcore::Error::Unsupported(_) => {
                    Failure::Input(e.into())
                }
                other => Failure::Device(other.into()),
            })?;
            npy::write_f32(&out, &output.o.into_dyn()).map_err(Failure::Input)?;
            if let Some(path) = lse {
                npy::write_f32(&path, &output.lse.into_dyn()).map_err(Failure::Input)?;
            }
            eprintln!(
                "flashcore: {} on {}: {problem} -> {}",
                attention.name(),
                dev.info().name,
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

fn axes(layout: Layout) -> &'static str {
    match layout {
        Layout::Bshd => "batch, seq, heads, head_dim",
        Layout::Bhsd => "batch, heads, seq, head_dim",
    }
}

/// The problem the three shapes describe in `layout`, or why they do not fit together.
fn problem_from_shapes(
    q: &[usize],
    k: &[usize],
    v: &[usize],
    layout: Layout,
    dtype: DType,
    causal: bool,
    scale: Option<f32>,
) -> Result<AttentionProblem> {
    let split = |s: &[usize]| match layout {
        Layout::Bshd => (s[0], s[2], s[1], s[3]),
        Layout::Bhsd => (s[0], s[1], s[2], s[3]),
    };
    let (bq, hq, sq, dq) = split(q);
    let (bk, hk, sk, dk) = split(k);
    if k != v {
        bail!("k has shape {k:?} but v has {v:?}: they must match");
    }
    if bq != bk {
        bail!("q has batch {bq} but k has {bk}");
    }
    if dq != dk {
        bail!("q has head_dim {dq} but k has {dk}");
    }
    if hk == 0 || hq % hk != 0 {
        bail!("q has {hq} heads, not a multiple of k's {hk}");
    }
    if let Some(s) = scale {
        if !s.is_finite() {
            bail!("--scale {s} is not finite");
        }
    }
    let mut p = AttentionProblem::new(bq, hq, sq, dq)
        .with_kv(hk, sk)
        .with_dtype(dtype)
        .with_causal(causal)
        .with_layout(layout);
    p.softmax_scale = scale;
    p.validate()?;
    Ok(p)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_give_the_problem_in_either_layout() {
        let p = problem_from_shapes(
            &[2, 10, 8, 64],
            &[2, 12, 2, 64],
            &[2, 12, 2, 64],
            Layout::Bshd,
            DType::F16,
            true,
            None,
        )
        .unwrap();
        assert_eq!(
            (p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k, p.head_dim),
            (2, 8, 2, 10, 12, 64)
        );
        let p = problem_from_shapes(
            &[2, 8, 10, 64],
            &[2, 2, 12, 64],
            &[2, 2, 12, 64],
            Layout::Bhsd,
            DType::F16,
            false,
            None,
        )
        .unwrap();
        assert_eq!((p.heads_q, p.seq_q), (8, 10));
    }

    #[test]
    fn mismatched_shapes_say_which() {
        let e = |q: &[usize], k: &[usize], v: &[usize]| {
            problem_from_shapes(q, k, v, Layout::Bhsd, DType::F16, false, None)
                .unwrap_err()
                .to_string()
        };
        assert!(e(&[1, 2, 3, 8], &[1, 2, 3, 8], &[1, 2, 4, 8]).contains("must match"));
        assert!(e(&[1, 2, 3, 8], &[2, 2, 3, 8], &[2, 2, 3, 8]).contains("batch"));
        assert!(e(&[1, 2, 3, 8], &[1, 2, 3, 16], &[1, 2, 3, 16]).contains("head_dim"));
        assert!(e(&[1, 3, 3, 8], &[1, 2, 3, 8], &[1, 2, 3, 8]).contains("multiple"));
        assert!(e(&[1, 2, 3, 0], &[1, 2, 3, 0], &[1, 2, 3, 0]).contains("head_dim is 0"));
        assert!(problem_from_shapes(
            &[1, 2, 3, 8],
            &[1, 2, 3, 8],
            &[1, 2, 3, 8],
            Layout::Bhsd,
            DType::F16,
            false,
            Some(f32::NAN)
        )
        .is_err());
    }
}
