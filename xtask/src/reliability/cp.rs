//! The `cp` check of `cargo xtask reliability` (context parallelism, 2+ GPUs; skipped on one):
//! - kill: one process per GPU (`xtask cp-rank`), ring forwards in a loop; one rank aborts
//!   mid-run. Every other rank must answer a clear error within 60 s and exit, nothing hangs.
//! - determinism: in deterministic mode, repeated forward + backward over every GPU give
//!   bit-identical O, LSE, dQ, dK and dV.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flashcore::cudarc::driver::CudaSlice;
use flashcore::{Attention, DType, Device, TensorMut, TensorRef};
use flashcore_context_parallel::{
    run_ranks, ContextParallel, CpOptions, CpProblem, Strategy, UniqueId,
};

use super::watchdog::{progress, step};
use super::{Args, Report, Res};
use crate::inputs::random_tensor;

/// How long a surviving rank may take to report its peer's death.
const KILL_LIMIT: Duration = Duration::from_secs(60);

pub(super) fn run(_dev: &Device, _k: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    let t = Instant::now();
    let n = Device::count().unwrap_or(0);
    if n < 2 {
        report.add(
            "cp",
            "context-parallel",
            Res::Skip,
            format!("needs 2 GPUs, {n} visible"),
            t,
        );
        return;
    }
    let world = n.min(4);
    let _s = step("cp kill", 200);
    match kill_one_rank(world) {
        Ok(m) => report.add("cp", "kill a rank", Res::Pass, m, t),
        Err(m) => report.add("cp", "kill a rank", Res::Fail, m, t),
    }
    let t = Instant::now();
    let _s = step("cp determinism", args.step_timeout);
    match determinism(world, 20) {
        Ok(m) => report.add("cp", "determinism", Res::Pass, m, t),
        Err(m) => report.add("cp", "determinism", Res::Fail, m, t),
    }
}

/// The problem both checks run: causal, GQA, zig-zag shards.
fn problem() -> CpProblem {
    CpProblem::new(1, 8, 4096, 128)
        .with_heads_kv(2)
        .with_dtype(DType::Bf16)
        .causal()
}

fn kill_one_rank(world: usize) -> Result<String, String> {
    let id = UniqueId::new().map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let victim = world - 1;
    let mut children = Vec::new();
    for rank in 0..world {
        let mut c = Command::new(&exe);
        c.args([
            "cp-rank",
            "--rank",
            &rank.to_string(),
            "--world",
            &world.to_string(),
        ])
        .env("FLASHCORE_CP_ID", id.to_hex())
        .env("NCCL_NVLS_ENABLE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        if rank == victim {
            c.args(["--abort-after-calls", "3"]);
        }
        children.push(
            c.spawn()
                .map_err(|e| format!("starting rank {rank}: {e}"))?,
        );
    }
    let start = Instant::now();
    let mut lines = Vec::new();
    let mut failures = Vec::new();
    for (rank, child) in children.into_iter().enumerate() {
        let out = wait_with_limit(
            child,
            KILL_LIMIT + Duration::from_secs(60) - start.elapsed().min(KILL_LIMIT),
        );
        progress();
        match out {
            None => failures.push(format!(
                "rank {rank} still running after {:?}: killed",
                start.elapsed()
            )),
            Some((code, stdout, stderr)) => {
                let last = stdout
                    .lines()
                    .chain(stderr.lines())
                    .rfind(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .to_string();
                if rank == victim {
                    lines.push(format!("rank {rank} aborted itself (exit {code:?})"));
                    continue;
                }
                // A survivor exits 0 once it has seen a CpError, printing it and how long it took.
                let secs = stdout
                    .lines()
                    .find_map(|l| l.strip_prefix("error-after-s "))
                    .and_then(|s| s.trim().parse::<f64>().ok());
                match (code, secs) {
                    (Some(0), Some(s)) if s <= KILL_LIMIT.as_secs_f64() => {
                        lines.push(format!("rank {rank}: error after {s:.1} s: {last}"))
                    }
                    _ => failures.push(format!("rank {rank}: exit {code:?}, {last}")),
                }
            }
        }
    }
    if failures.is_empty() {
        Ok(lines.join("; "))
    } else {
        Err(failures.join("; "))
    }
}

/// Waits for a child at most `limit`, killing it after that. Returns exit code and output.
fn wait_with_limit(
    mut child: std::process::Child,
    limit: Duration,
) -> Option<(Option<i32>, String, String)> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => {
                let out = child.wait_with_output().ok()?;
                return Some((
                    out.status.code(),
                    String::from_utf8_lossy(&out.stdout).into(),
                    String::from_utf8_lossy(&out.stderr).into(),
                ));
            }
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(100)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// `xtask cp-rank`: one rank of the kill check, in a process of its own.
pub fn rank_main(
    rank: usize,
    world: usize,
    abort_after_calls: Option<usize>,
) -> anyhow::Result<()> {
    let id = UniqueId::from_hex(&std::env::var("FLASHCORE_CP_ID")?)?;
    let device = Device::open(rank)?;
    let options = CpOptions {
        timeout: Duration::from_secs(20),
        ..CpOptions::default()
    };
    let mut cp = ContextParallel::new(&device, rank, world, &id, options)?;
    let p = problem();
    let bufs = Buffers::new(&cp, &p, 1)?;
    let start = Instant::now();
    for call in 0.. {
        if abort_after_calls == Some(call) {
            // Die without a word to the peers, as a crashed or killed process does.
            std::process::abort();
        }
        let t = Instant::now();
        if let Err(e) = bufs.forward(&mut cp, &p) {
            println!("error-after-s {:.2}", t.elapsed().as_secs_f64());
            println!("{e}");
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(300) {
            anyhow::bail!("no error after 300 s of calls");
        }
    }
    Ok(())
}

/// One rank's shard and outputs.
struct Buffers {
    q: CudaSlice<u16>,
    k: CudaSlice<u16>,
    v: CudaSlice<u16>,
    d_o: CudaSlice<u16>,
}

impl Buffers {
    fn new(cp: &ContextParallel, p: &CpProblem, seed: u64) -> anyhow::Result<Self> {
        let s = cp.device().stream();
        let rank = cp.rank() as u64;
        let bits = |n: usize, k: u64| -> anyhow::Result<CudaSlice<u16>> {
            let a = random_tensor(p.dtype, [1, 1, 1, n], seed * 97 + rank * 13 + k);
            Ok(s.clone_htod(&a.iter().map(|&x| p.dtype.to_bits(x)).collect::<Vec<_>>())?)
        };
        Ok(Buffers {
            q: bits(p.q_len(), 0)?,
            k: bits(p.kv_len(), 1)?,
            v: bits(p.kv_len(), 2)?,
            d_o: bits(p.q_len(), 3)?,
        })
    }

    fn forward(
        &self,
        cp: &mut ContextParallel,
        p: &CpProblem,
    ) -> Result<(Vec<u16>, Vec<f32>), flashcore_context_parallel::CpError> {
        let s = cp.device().stream().clone();
        let dt = p.dtype;
        let mut o = s
            .clone_htod(&vec![flashcore::nan_bits(dt); p.q_len()])
            .expect("upload");
        let mut lse = s.clone_htod(&vec![f32::NAN; p.lse_len()]).expect("upload");
        cp.forward(
            p,
            &TensorRef {
                data: self.q.slice(..),
                dtype: dt,
            },
            &TensorRef {
                data: self.k.slice(..),
                dtype: dt,
            },
            &TensorRef {
                data: self.v.slice(..),
                dtype: dt,
            },
            &mut TensorMut {
                data: o.slice_mut(..),
                dtype: dt,
            },
            &mut lse.slice_mut(..),
        )?;
        Ok((
            s.clone_dtoh(&o).expect("download"),
            s.clone_dtoh(&lse).expect("download"),
        ))
    }
}

fn determinism(world: usize, runs: usize) -> Result<String, String> {
    let p = problem();
    let mut summaries = Vec::new();
    for strategy in [Strategy::Ring, Strategy::AllGather] {
        let options = CpOptions {
            strategy,
            deterministic: true,
            ..CpOptions::default()
        };
        let results = run_ranks(world, &options, |cp| {
            let b = Buffers::new(cp, &p, 7)
                .map_err(|e| flashcore_context_parallel::CpError::Invalid(e.to_string()))?;
            let s = cp.device().stream().clone();
            let dt = p.dtype;
            let mut first: Option<Vec<Vec<u16>>> = None;
            let mut first_lse: Option<Vec<f32>> = None;
            let mut kernels = Vec::new();
            for _ in 0..runs {
                let (o_bits, lse) = b.forward(cp, &p)?;
                let o = s.clone_htod(&o_bits).expect("upload");
                let lse_d = s.clone_htod(&lse).expect("upload");
                let mut g: Vec<CudaSlice<u16>> = [p.q_len(), p.kv_len(), p.kv_len()]
                    .iter()
                    .map(|&n| {
                        s.clone_htod(&vec![flashcore::nan_bits(dt); n])
                            .expect("upload")
                    })
                    .collect();
                let (dq, rest) = g.split_at_mut(1);
                let (dk, dv) = rest.split_at_mut(1);
                let run = cp.backward(
                    &p,
                    &TensorRef {
                        data: b.q.slice(..),
                        dtype: dt,
                    },
                    &TensorRef {
                        data: b.k.slice(..),
                        dtype: dt,
                    },
                    &TensorRef {
                        data: b.v.slice(..),
                        dtype: dt,
                    },
                    &TensorRef {
                        data: o.slice(..),
                        dtype: dt,
                    },
                    &TensorRef {
                        data: b.d_o.slice(..),
                        dtype: dt,
                    },
                    &lse_d.slice(..),
                    &mut TensorMut {
                        data: dq[0].slice_mut(..),
                        dtype: dt,
                    },
                    &mut TensorMut {
                        data: dk[0].slice_mut(..),
                        dtype: dt,
                    },
                    &mut TensorMut {
                        data: dv[0].slice_mut(..),
                        dtype: dt,
                    },
                )?;
                kernels = run.kernels;
                let mut now = vec![o_bits];
                now.extend(g.iter().map(|x| s.clone_dtoh(x).expect("download")));
                if now.iter().flatten().any(|&x| dt.from_bits(x).is_nan()) {
                    return Err(flashcore_context_parallel::CpError::Invalid(
                        "NaN (unwritten?) in an output".into(),
                    ));
                }
                match (&first, &first_lse) {
                    (None, _) => {
                        first = Some(now);
                        first_lse = Some(lse);
                    }
                    (Some(f), Some(fl)) => {
                        if *f != now || fl.iter().zip(&lse).any(|(a, b)| a.to_bits() != b.to_bits())
                        {
                            return Err(flashcore_context_parallel::CpError::Invalid(
                                "outputs differ between runs".into(),
                            ));
                        }
                    }
                    _ => unreachable!(),
                }
            }
            Ok(kernels)
        })
        .map_err(|e| e.to_string())?;
        let mut kernels = Vec::new();
        for (r, res) in results.into_iter().enumerate() {
            match res {
                Ok(k) => kernels = k,
                Err(e) => return Err(format!("{strategy:?} rank {r}: {e}")),
            }
        }
        summaries.push(format!("{strategy:?} [{}]", kernels.join("+")));
    }
    Ok(format!(
        "{runs} runs of forward + backward ({}, {world} GPUs) bit-identical: {}",
        describe(&p),
        summaries.join(", ")
    ))
}

fn describe(p: &CpProblem) -> String {
    format!(
        "b={} hq={} hkv={} s_local={} d={} {} causal",
        p.batch,
        p.heads_q,
        p.heads_kv,
        p.seq_local,
        p.head_dim,
        p.dtype.name()
    )
}
