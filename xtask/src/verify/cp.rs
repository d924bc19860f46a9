//! `cargo xtask verify --cp N`: context-parallel attention over N GPUs (one thread and one NCCL
//! rank per GPU), forward and backward, ring and all-gather, causal (zig-zag shards) and not,
//! GQA, judged by the oracle's rule on the whole sequence (sampled rows when it is long), and
//! the forward compared with the single-GPU kernel on the same global problem.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use flashcore::cudarc::driver::CudaSlice;
use flashcore::{DType, Device, TensorMut, TensorRef};
use flashcore_context_parallel::{
    run_ranks, ContextParallel, CpOptions, CpProblem, Sharding, Strategy,
};
use ndarray::{Array3, Array4};
use rand::{Rng, SeedableRng};

use crate::case::{ShapeCheck, SAMPLED_ROWS};
use crate::inputs::{precision, random_tensor, to_layout};

/// One context-parallel case: the local problem every rank runs, the strategy, the pass.
#[derive(Clone, Debug)]
pub struct CpCase {
    pub problem: CpProblem,
    pub strategy: Strategy,
    pub backward: bool,
    pub seed: u64,
}

impl CpCase {
    pub fn describe(&self, world: usize) -> String {
        let p = &self.problem;
        format!(
            "b={} hq={} hkv={} s={}x{} d={} {} {} {} {:?}{}",
            p.batch,
            p.heads_q,
            p.heads_kv,
            world,
            p.seq_local,
            p.head_dim,
            p.dtype.name(),
            if p.causal { "causal" } else { "full" },
            p.sharding.name(),
            self.strategy,
            if self.backward { " +bwd" } else { "" }
        )
    }
}

/// Fixed cases every run starts with: both strategies, both masks, GQA and MQA, odd chunk
/// lengths, a batch of two, and a long sequence judged on sampled rows.
fn edge_cases(seed: u64) -> Vec<CpCase> {
    let c = |b, hq, hkv, s, d, dt, causal: bool, strategy, backward| {
        let mut p = CpProblem::new(b, hq, s, d)
            .with_heads_kv(hkv)
            .with_dtype(dt);
        if causal {
            p = p.causal();
        }
        CpCase {
            problem: p,
            strategy,
            backward,
            seed,
        }
    };
    use DType::{Bf16, F16};
    use Strategy::{AllGather, Ring};
    vec![
        c(1, 4, 4, 128, 64, F16, false, Ring, true),
        c(1, 8, 2, 256, 128, Bf16, true, Ring, true),
        c(2, 4, 1, 74, 64, Bf16, true, AllGather, true),
        c(1, 8, 8, 512, 128, F16, true, Ring, true),
        c(2, 8, 2, 200, 128, Bf16, false, AllGather, true),
        c(1, 4, 4, 2, 64, F16, true, Ring, true),
        c(1, 16, 16, 1024, 128, Bf16, true, Ring, false),
        c(1, 32, 4, 2048, 128, Bf16, true, AllGather, false),
    ]
}

/// Random cases: shapes, dtypes, masks, GQA groups and strategies drawn from `seed`. The
/// backward is drawn where the global sequence is at most 1024 rows (its f64 gradients cost the
/// CPU a full S² per head).
fn random_cases(n: usize, world: usize, seed: u64) -> Vec<CpCase> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let b = rng.gen_range(1..=2);
            let hq = [2, 4, 8][rng.gen_range(0..3)];
            let group = [1, 2, hq][rng.gen_range(0..3)];
            let d = [64, 128][rng.gen_range(0..2)];
            let dt = [DType::F16, DType::Bf16][rng.gen_range(0..2)];
            let causal = rng.gen_bool(0.6);
            let s = 2 * rng.gen_range(1..=300);
            let mut p = CpProblem::new(b, hq, s, d)
                .with_heads_kv(hq / group)
                .with_dtype(dt);
            if causal {
                p = p.causal();
            } else if rng.gen_bool(0.3) {
                p = p.with_sharding(Sharding::ZigZag);
            }
            CpCase {
                problem: p,
                strategy: [Strategy::Ring, Strategy::AllGather][rng.gen_range(0..2)],
                backward: s * world <= 1024 && rng.gen_bool(0.7),
                seed: seed.wrapping_add(1 + i as u64),
            }
        })
        .collect()
}

/// The global inputs of a case, logical `[batch, heads, seq, dim]` f32 rounded to the dtype.
struct Global {
    q: Array4<f32>,
    k: Array4<f32>,
    v: Array4<f32>,
    d_o: Array4<f32>,
}

fn global_inputs(case: &CpCase, world: usize) -> Global {
    let p = &case.problem;
    let s = p.global_seq(world);
    let t = |h, k: u64| {
        random_tensor(
            p.dtype,
            [p.batch, h, s, p.head_dim],
            case.seed.wrapping_mul(5).wrapping_add(k),
        )
    };
    Global {
        q: t(p.heads_q, 0),
        k: t(p.heads_kv, 1),
        v: t(p.heads_kv, 2),
        d_o: t(p.heads_q, 3),
    }
}

/// Rank `rank`'s shard of a logical global tensor, as dtype bits in BSHD order.
fn shard_bits(a: &Array4<f32>, p: &CpProblem, rank: usize, world: usize) -> Vec<u16> {
    let (b, h, _, d) = a.dim();
    let mut out = Vec::with_capacity(b * p.seq_local * h * d);
    let ranges = p.sharding.global_rows(rank, world, p.seq_local);
    for bi in 0..b {
        for &(g0, g1) in &ranges {
            for g in g0..g1 {
                for hi in 0..h {
                    for di in 0..d {
                        out.push(p.dtype.to_bits(a[[bi, hi, g, di]]));
                    }
                }
            }
        }
    }
    out
}

/// Writes rank `rank`'s BSHD shard (dtype bits) into a logical global tensor.
fn unshard_bits(out: &mut Array4<f32>, bits: &[u16], p: &CpProblem, rank: usize, world: usize) {
    let (b, h, _, d) = out.dim();
    let ranges = p.sharding.global_rows(rank, world, p.seq_local);
    let mut i = 0;
    for bi in 0..b {
        for &(g0, g1) in &ranges {
            for g in g0..g1 {
                for hi in 0..h {
                    for di in 0..d {
                        out[[bi, hi, g, di]] = p.dtype.from_bits(bits[i]);
                        i += 1;
                    }
                }
            }
        }
    }
}

/// What one rank brings back from one case.
#[derive(Default)]
struct RankOut {
    o: Vec<u16>,
    lse: Vec<f32>,
    dq: Vec<u16>,
    dk: Vec<u16>,
    dv: Vec<u16>,
    kernels: Vec<&'static str>,
}

fn run_on_rank(cp: &mut ContextParallel, case: &CpCase, g: &Global) -> Result<RankOut, String> {
    let (rank, world) = (cp.rank(), cp.world());
    let p = &case.problem;
    let s = cp.device().stream().clone();
    let up = |bits: Vec<u16>| s.clone_htod(&bits).map_err(|e| format!("upload: {e:?}"));
    let poisoned = |n: usize| up(vec![flashcore::nan_bits(p.dtype); n]);
    let q = up(shard_bits(&g.q, p, rank, world))?;
    let k = up(shard_bits(&g.k, p, rank, world))?;
    let v = up(shard_bits(&g.v, p, rank, world))?;
    let mut o: CudaSlice<u16> = poisoned(p.q_len())?;
    let mut lse = s
        .clone_htod(&vec![f32::NAN; p.lse_len()])
        .map_err(|e| format!("{e:?}"))?;
    let dt = p.dtype;
    fn r(x: &CudaSlice<u16>, dtype: DType) -> TensorRef<'_> {
        TensorRef {
            data: x.slice(..),
            dtype,
        }
    }
    fn m(x: &mut CudaSlice<u16>, dtype: DType) -> TensorMut<'_> {
        TensorMut {
            data: x.slice_mut(..),
            dtype,
        }
    }
    let mut options = cp.options().clone();
    options.strategy = case.strategy;
    cp.set_options(options);
    let run = cp
        .forward(
            p,
            &r(&q, dt),
            &r(&k, dt),
            &r(&v, dt),
            &mut m(&mut o, dt),
            &mut lse.slice_mut(..),
        )
        .map_err(|e| e.to_string())?;
    let down = |x: &CudaSlice<u16>| s.clone_dtoh(x).map_err(|e| format!("download: {e:?}"));
    let mut out = RankOut {
        o: down(&o)?,
        lse: s.clone_dtoh(&lse).map_err(|e| format!("{e:?}"))?,
        kernels: run.kernels,
        ..Default::default()
    };
    if case.backward {
        let d_o = up(shard_bits(&g.d_o, p, rank, world))?;
        let mut dq = poisoned(p.q_len())?;
        let mut dk = poisoned(p.kv_len())?;
        let mut dv = poisoned(p.kv_len())?;
        let run = cp
            .backward(
                p,
                &r(&q, dt),
                &r(&k, dt),
                &r(&v, dt),
                &r(&o, dt),
                &r(&d_o, dt),
                &lse.slice(..),
                &mut m(&mut dq, dt),
                &mut m(&mut dk, dt),
                &mut m(&mut dv, dt),
            )
            .map_err(|e| e.to_string())?;
        for k in run.kernels {
            if !out.kernels.contains(&k) {
                out.kernels.push(k);
            }
        }
        out.dq = down(&dq)?;
        out.dk = down(&dk)?;
        out.dv = down(&dv)?;
    }
    Ok(out)
}

/// One case's judgement.
struct Judged {
    pass: bool,
    line: String,
}

fn judge(
    case: &CpCase,
    world: usize,
    g: &Global,
    outs: &[Result<RankOut, String>],
    single: &Device,
) -> Judged {
    let p = &case.problem;
    let name = case.describe(world);
    let errors: Vec<String> = outs
        .iter()
        .enumerate()
        .filter_map(|(r, o)| o.as_ref().err().map(|e| format!("rank {r}: {e}")))
        .collect();
    if !errors.is_empty() {
        return Judged {
            pass: false,
            line: format!("FAIL {name}: {}", errors.join("; ")),
        };
    }
    let outs: Vec<&RankOut> = outs.iter().map(|o| o.as_ref().unwrap()).collect();
    let gp = p.global_problem(world);
    let s = gp.seq_q;
    // O and the LSE of the whole sequence, from the shards.
    let mut o = Array4::<f32>::zeros((p.batch, p.heads_q, s, p.head_dim));
    let mut lse = Array3::<f32>::zeros((p.batch, p.heads_q, s));
    for (rank, out) in outs.iter().enumerate() {
        unshard_bits(&mut o, &out.o, p, rank, world);
        let ranges = p.sharding.global_rows(rank, world, p.seq_local);
        let mut i = 0;
        for bi in 0..p.batch {
            for hi in 0..p.heads_q {
                for &(g0, g1) in &ranges {
                    for gr in g0..g1 {
                        lse[[bi, hi, gr]] = out.lse[i];
                        i += 1;
                    }
                }
            }
        }
    }
    let check = ShapeCheck::new(
        &gp,
        g.q.view(),
        g.k.view(),
        g.v.view(),
        SAMPLED_ROWS,
        case.seed,
    );
    let o_bshd: Vec<u16> = to_layout(o.view(), gp.layout)
        .iter()
        .map(|&x| p.dtype.to_bits(x))
        .collect();
    let fwd = check.judge_bits(&o_bshd, lse.as_slice().unwrap());
    // The single-GPU kernel on the same global problem, judged alike, and how far apart they are.
    let single_line = match flashcore::best_for(&gp, single.info()) {
        None => "single-GPU: no kernel".to_string(),
        Some(k) => match flashcore::forward_host(
            k.as_ref(),
            single,
            &gp,
            to_layout(g.q.view(), gp.layout),
            to_layout(g.k.view(), gp.layout),
            to_layout(g.v.view(), gp.layout),
        ) {
            Err(e) => format!("single-GPU {}: error {e}", k.name()),
            Ok(h) => {
                let so = to_layout(h.o.view(), gp.layout);
                let bits: Vec<u16> = h.o.iter().map(|&x| p.dtype.to_bits(x)).collect();
                let verdict = match check.judge_bits(&bits, h.lse.as_slice().unwrap()) {
                    Ok(v) => format!("{:.2}", v.ratio),
                    Err(e) => format!("FAILED ({e})"),
                };
                let diff = so
                    .iter()
                    .zip(o.iter())
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                format!(
                    "single-GPU {} ratio {verdict}, max|O_cp - O_single| {diff:.2e}",
                    k.name()
                )
            }
        },
    };
    let mut pass = fwd.is_ok();
    let mut line = match &fwd {
        Ok(v) => format!("fwd ratio {:.2}", v.ratio),
        Err(e) => format!("fwd FAILED: {e}"),
    };
    if case.backward {
        let zeros = |h| Array4::<f32>::zeros((p.batch, h, s, p.head_dim));
        let (mut dq, mut dk, mut dv) = (zeros(p.heads_q), zeros(p.heads_kv), zeros(p.heads_kv));
        for (rank, out) in outs.iter().enumerate() {
            unshard_bits(&mut dq, &out.dq, p, rank, world);
            unshard_bits(&mut dk, &out.dk, p, rank, world);
            unshard_bits(&mut dv, &out.dv, p, rank, world);
        }
        let op = flashcore_oracle::OracleProblem::dense(
            p.batch,
            p.heads_q,
            p.heads_kv,
            s,
            s,
            p.head_dim,
            p.causal,
            p.scale() as f64,
        );
        let v = flashcore_oracle::check_backward(
            &op,
            precision(p.dtype),
            g.q.view(),
            g.k.view(),
            g.v.view(),
            g.d_o.view(),
            dq.view(),
            dk.view(),
            dv.view(),
        );
        pass &= v.pass;
        line += &if v.pass {
            format!(", bwd ratio {:.2}", v.ratio)
        } else {
            format!(", bwd FAILED: {}", v.message)
        };
    }
    let kernels = outs[0].kernels.join("+");
    Judged {
        pass,
        line: format!(
            "{} {name} [{kernels}]: {line}; {single_line}",
            if pass { "ok  " } else { "FAIL" }
        ),
    }
}

/// Runs the edge list and `cases` random cases over `world` GPUs; fails if any case fails.
pub fn run(world: usize, cases: usize, seed: u64, timeout: Duration) -> Result<()> {
    let n = Device::count()?;
    if n < world {
        bail!("verify --cp {world} needs {world} GPUs; {n} are visible");
    }
    flashcore_context_parallel::nccl_available()?;
    let mut list = edge_cases(seed);
    list.extend(random_cases(cases, world, seed));
    let start = Instant::now();
    println!(
        "verify --cp {world}: {} cases (NCCL {}), one thread and one rank per GPU",
        list.len(),
        flashcore_context_parallel::nccl_version()?
    );
    let globals: Vec<Global> = list.iter().map(|c| global_inputs(c, world)).collect();
    let options = CpOptions {
        timeout,
        ..CpOptions::default()
    };
    let per_rank = run_ranks(world, &options, |cp| {
        Ok(list
            .iter()
            .zip(&globals)
            .enumerate()
            .map(|(i, (c, g))| {
                if cp.rank() == 0 && i % 8 == 0 {
                    eprintln!(
                        "  [{:>4.0}s] case {}/{}",
                        start.elapsed().as_secs_f64(),
                        i + 1,
                        list.len()
                    );
                }
                run_on_rank(cp, c, g)
            })
            .collect::<Vec<_>>())
    })?;
    let mut ranks = Vec::new();
    for (r, res) in per_rank.into_iter().enumerate() {
        match res {
            Ok(v) => ranks.push(v),
            Err(e) => bail!("rank {r} could not run: {e}"),
        }
    }
    let single = Device::open(0)?;
    let (mut passed, mut failed) = (0, 0);
    for (i, (case, g)) in list.iter().zip(&globals).enumerate() {
        let outs: Vec<Result<RankOut, String>> = ranks
            .iter_mut()
            .map(|r| std::mem::replace(&mut r[i], Err(String::new())))
            .collect();
        let j = judge(case, world, g, &outs, &single);
        println!("{}", j.line);
        if j.pass {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    println!(
        "verify --cp {world}: {passed} passed, {failed} failed ({:.0} s)",
        start.elapsed().as_secs_f64()
    );
    if failed > 0 {
        bail!("{failed} context-parallel cases failed");
    }
    Ok(())
}
