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
            "b={}{} hq={} hkv={} s={}x{} d={} {} {} {} {:?}{}",
            p.batch,
            p.seqlens_local
                .as_ref()
                .map_or(String::new(), |l| format!(" varlen{l:?}")),
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
        varlen(vec![74, 200, 10], 8, 2, Bf16, true, Ring, seed),
        varlen(vec![64, 2, 300, 18], 4, 1, F16, false, AllGather, seed),
    ]
}

/// A packed case: sequences of these local lengths (forward only: no varlen backward kernel).
fn varlen(
    local: Vec<usize>,
    hq: usize,
    hkv: usize,
    dt: DType,
    causal: bool,
    strategy: Strategy,
    seed: u64,
) -> CpCase {
    let mut p = CpProblem::new(1, hq, 2, 128)
        .with_heads_kv(hkv)
        .with_dtype(dt);
    p = if causal { p.causal() } else { p };
    CpCase {
        problem: p.with_varlen(local),
        strategy,
        backward: false,
        seed,
    }
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
            let strategy = [Strategy::Ring, Strategy::AllGather][rng.gen_range(0..2)];
            let seed = seed.wrapping_add(1 + i as u64);
            if rng.gen_bool(0.2) {
                // Packed sequences (forward only), each a multiple of the parts long.
                let parts = p.sharding.parts();
                let lens = (0..rng.gen_range(1..=4))
                    .map(|_| parts * rng.gen_range(1..=150))
                    .collect();
                return CpCase {
                    problem: p.with_varlen(lens),
                    strategy,
                    backward: false,
                    seed,
                };
            }
            CpCase {
                problem: p,
                strategy,
                backward: s * world <= 1024 && rng.gen_bool(0.7),
                seed,
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
    // Packed sequences: one row of all the sequences' global rows, one after the other.
    let (b, s) = match &p.seqlens_local {
        Some(_) => (1, world * p.local_rows()),
        None => (p.batch, p.global_seq(world)),
    };
    let t = |h, k: u64| {
        random_tensor(
            p.dtype,
            [b, h, s, p.head_dim],
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

/// (batch index, global row) of each of rank `rank`'s local rows, in local order: batch-major
/// then part-major (dense); sequence-major then part-major in one row of all the sequences
/// (packed).
fn local_rows(p: &CpProblem, rank: usize, world: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    match &p.seqlens_local {
        None => {
            for b in 0..p.batch {
                for (g0, g1) in p.sharding.global_rows(rank, world, p.seq_local) {
                    out.extend((g0..g1).map(|g| (b, g)));
                }
            }
        }
        Some(lens) => {
            let mut start = 0;
            for &n in lens {
                for (g0, g1) in p.sharding.global_rows(rank, world, n) {
                    out.extend((start + g0..start + g1).map(|g| (0, g)));
                }
                start += world * n;
            }
        }
    }
    out
}

/// Where local row `l`, head `h` sits in a rank's LSE: `[batch, heads, seq_local]` dense,
/// `[heads, rows]` packed.
fn lse_index(p: &CpProblem, l: usize, h: usize) -> usize {
    match &p.seqlens_local {
        None => (l / p.seq_local * p.heads_q + h) * p.seq_local + l % p.seq_local,
        Some(_) => h * p.local_rows() + l,
    }
}

/// Rank `rank`'s shard of a logical global tensor, as dtype bits in its local row order.
fn shard_bits(a: &Array4<f32>, p: &CpProblem, rank: usize, world: usize) -> Vec<u16> {
    let (_, h, _, d) = a.dim();
    let rows = local_rows(p, rank, world);
    let mut out = Vec::with_capacity(rows.len() * h * d);
    for (b, g) in rows {
        for hi in 0..h {
            for di in 0..d {
                out.push(p.dtype.to_bits(a[[b, hi, g, di]]));
            }
        }
    }
    out
}

/// Writes rank `rank`'s shard (dtype bits, local row order) into a logical global tensor.
fn unshard_bits(out: &mut Array4<f32>, bits: &[u16], p: &CpProblem, rank: usize, world: usize) {
    let (_, h, _, d) = out.dim();
    let mut i = 0;
    for (b, g) in local_rows(p, rank, world) {
        for hi in 0..h {
            for di in 0..d {
                out[[b, hi, g, di]] = p.dtype.from_bits(bits[i]);
                i += 1;
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
    let (gb, _, s, _) = g.q.dim();
    // O and the LSE of the whole sequence, from the shards.
    let mut o = Array4::<f32>::zeros((gb, p.heads_q, s, p.head_dim));
    let mut lse = Array3::<f32>::zeros((gb, p.heads_q, s));
    for (rank, out) in outs.iter().enumerate() {
        unshard_bits(&mut o, &out.o, p, rank, world);
        for (l, (b, gr)) in local_rows(p, rank, world).into_iter().enumerate() {
            for hi in 0..p.heads_q {
                lse[[b, hi, gr]] = out.lse[lse_index(p, l, hi)];
            }
        }
    }
    if let Some(lens) = &p.seqlens_local {
        return judge_packed(case, world, g, lens, &o, &lse);
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

/// Packed sequences: each sequence judged as a problem of its own (its global rows), by the
/// oracle's rule.
fn judge_packed(
    case: &CpCase,
    world: usize,
    g: &Global,
    lens: &[usize],
    o: &Array4<f32>,
    lse: &Array3<f32>,
) -> Judged {
    let p = &case.problem;
    let name = case.describe(world);
    let (mut worst, mut fails) = (0f64, Vec::new());
    let mut start = 0;
    for (i, &n) in lens.iter().enumerate() {
        let len = world * n;
        let r = ndarray::s![.., .., start..start + len, ..];
        let gp = flashcore::AttentionProblem::new(1, p.heads_q, len, p.head_dim)
            .with_kv(p.heads_kv, len)
            .with_dtype(p.dtype)
            .with_causal(p.causal)
            .with_scale(p.scale());
        let check = ShapeCheck::new(
            &gp,
            g.q.slice(r),
            g.k.slice(r),
            g.v.slice(r),
            SAMPLED_ROWS,
            case.seed + i as u64,
        );
        let bits: Vec<u16> = to_layout(o.slice(r), gp.layout)
            .iter()
            .map(|&x| p.dtype.to_bits(x))
            .collect();
        let l: Vec<f32> = lse
            .slice(ndarray::s![.., .., start..start + len])
            .iter()
            .copied()
            .collect();
        match check.judge_bits(&bits, &l) {
            Ok(v) => worst = worst.max(v.ratio),
            Err(e) => fails.push(format!("sequence {i}: {e}")),
        }
        start += len;
    }
    let pass = fails.is_empty();
    let line = if pass {
        format!("fwd ratio {worst:.2} (each sequence judged alone)")
    } else {
        format!("fwd FAILED: {}", fails.join("; "))
    };
    Judged {
        pass,
        line: format!("{} {name} : {line}", if pass { "ok  " } else { "FAIL" }),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every global row lands on exactly one rank, and sharding then unsharding gives the
    /// tensor back, dense and packed.
    #[test]
    fn shards_cover_the_global_rows_once_and_round_trip() {
        let world = 3;
        for p in [
            CpProblem::new(2, 2, 8, 4).causal(),
            CpProblem::new(1, 2, 6, 4),
            CpProblem::new(1, 2, 2, 4)
                .causal()
                .with_varlen(vec![4, 2, 10]),
            CpProblem::new(1, 2, 2, 4).with_varlen(vec![3, 1]),
        ] {
            let (b, s) = match &p.seqlens_local {
                Some(_) => (1, world * p.local_rows()),
                None => (p.batch, p.global_seq(world)),
            };
            let a = random_tensor(DType::F16, [b, 2, s, 4], 9);
            let mut back = Array4::<f32>::from_elem((b, 2, s, 4), f32::NAN);
            let mut seen = vec![0; b * s];
            for rank in 0..world {
                let bits = shard_bits(&a, &p, rank, world);
                assert_eq!(bits.len(), p.q_len() / p.heads_q * 2);
                unshard_bits(&mut back, &bits, &p, rank, world);
                for (bi, g) in local_rows(&p, rank, world) {
                    seen[bi * s + g] += 1;
                }
                // The LSE positions of a rank are a permutation of its LSE buffer.
                let mut idx: Vec<usize> = (0..p.local_rows())
                    .flat_map(|l| (0..p.heads_q).map(move |h| (l, h)))
                    .map(|(l, h)| lse_index(&p, l, h))
                    .collect();
                idx.sort_unstable();
                assert_eq!(idx, (0..p.lse_len()).collect::<Vec<_>>());
            }
            assert!(seen.iter().all(|&n| n == 1), "{p:?}");
            assert_eq!(a, back);
        }
    }
}
