//! `cargo xtask bench-all --suite cp`: context-parallel attention over every visible GPU (one
//! thread and NCCL rank each), forward and backward, against flashcore's single-GPU kernel at
//! the same work per GPU (a causal or full problem of S/√N rows has 1/N of the FLOPs of one of
//! S rows), in the same run. Efficiency = per-GPU TFLOP/s of the group / TFLOP/s of one GPU.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use flashcore::cudarc::driver::{CudaSlice, CudaStream};
use flashcore::{
    AttentionBackward, AttentionProblem, AttentionTensors, BackwardTensors, DType, Device,
    TensorMut, TensorRef,
};
use flashcore_context_parallel::{run_ranks, CpError, CpOptions, CpProblem, Strategy};
use serde::Serialize;

use super::Args;
use crate::inputs::random_tensor_parallel;

/// One row: a global problem and the strategy its ranks take.
struct Row {
    key: &'static str,
    heads_kv: usize,
    seq: usize,
    causal: bool,
    strategy: Strategy,
    backward: bool,
}

const ROWS: &[Row] = &[
    Row {
        key: "causal-256k-mha",
        heads_kv: 32,
        seq: 256 << 10,
        causal: true,
        strategy: Strategy::Ring,
        backward: true,
    },
    Row {
        key: "causal-256k-gqa8-ring",
        heads_kv: 8,
        seq: 256 << 10,
        causal: true,
        strategy: Strategy::Ring,
        backward: true,
    },
    Row {
        key: "causal-256k-gqa8-allgather",
        heads_kv: 8,
        seq: 256 << 10,
        causal: true,
        strategy: Strategy::AllGather,
        backward: true,
    },
    Row {
        key: "full-128k-mha",
        heads_kv: 32,
        seq: 128 << 10,
        causal: false,
        strategy: Strategy::Ring,
        backward: true,
    },
    Row {
        key: "causal-1m-mha",
        heads_kv: 32,
        seq: 1 << 20,
        causal: true,
        strategy: Strategy::Ring,
        backward: true,
    },
];

/// (heads_kv, rows, causal) of a single-GPU reference, and its forward and backward ms.
type SingleKey = (usize, usize, bool);
type SingleMs = (f64, Option<f64>);

const HEADS: usize = 32;
const HEAD_DIM: usize = 128;

#[derive(Serialize, serde::Deserialize, Clone, Debug)]
pub struct Measured {
    key: String,
    world: usize,
    seq: usize,
    heads_kv: usize,
    causal: bool,
    pass: String,
    strategy: String,
    kernels: String,
    cp_ms: f64,
    cp_tflops_per_gpu: f64,
    single_seq: usize,
    single_ms: f64,
    single_tflops: f64,
    efficiency: f64,
    /// flash-attn3-jax's ring attention on the same GPUs in the same run, or why not.
    fa3_ring_ms: Option<f64>,
    fa3_ring_note: Option<String>,
    /// Each rank's median ms (the group's is the slowest).
    #[serde(default)]
    rank_ms: Vec<f64>,
    /// The single-GPU kernel at S/√N run on every GPU at once (the host's clocks and power when
    /// all its GPUs work, as they do in the group), slowest GPU; efficiency against it.
    #[serde(default)]
    busy_ms: Option<f64>,
    #[serde(default)]
    busy_efficiency: Option<f64>,
}

fn flops(seq: usize, causal: bool, backward: bool) -> f64 {
    let f = 4.0
        * HEADS as f64
        * (seq as f64).powi(2)
        * HEAD_DIM as f64
        * if causal { 0.5 } else { 1.0 };
    if backward {
        2.5 * f
    } else {
        f
    }
}

/// Device buffer of `n` random dtype values: 2^24 fresh values tiled (timing only; the checks
/// are `verify --cp`'s).
fn random_bits(s: &std::sync::Arc<CudaStream>, n: usize, seed: u64) -> Result<CudaSlice<u16>> {
    let m = n.min(1 << 24);
    let a = random_tensor_parallel(DType::Bf16, [1, 1, 1, m], seed);
    let tile = s.clone_htod(
        &a.iter()
            .map(|&x| DType::Bf16.to_bits(x))
            .collect::<Vec<_>>(),
    )?;
    // SAFETY: every element is written by the copies below.
    let mut out = unsafe { s.alloc::<u16>(n) }?;
    let mut at = 0;
    while at < n {
        let len = m.min(n - at);
        s.memcpy_dtod(&tile.slice(..len), &mut out.slice_mut(at..at + len))?;
        at += len;
    }
    Ok(out)
}

/// Median wall time (ms) of `reps` timed calls after one untimed (compiling) call.
fn time_ms(reps: usize, f: impl FnMut() -> Result<()>) -> Result<f64> {
    time_ms_after(reps, &|| {}, f)
}

/// [`time_ms`], each call after `before` (a barrier, so that every GPU runs at once).
fn time_ms_after(reps: usize, before: &dyn Fn(), mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    before();
    f()?;
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            before();
            let s = Instant::now();
            f().map(|_| s.elapsed().as_secs_f64() * 1e3)
        })
        .collect::<Result<_>>()?;
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Ok(t[t.len() / 2])
}

/// Per pass: (pass, the slowest rank's ms, strategy, kernels, every rank's ms).
type CpTimes = Vec<(String, f64, String, String, Vec<f64>)>;

fn cp_row(row: &Row, world: usize, reps: usize) -> Result<CpTimes> {
    let mut p = CpProblem::new(1, HEADS, row.seq / world, HEAD_DIM)
        .with_heads_kv(row.heads_kv)
        .with_dtype(DType::Bf16);
    if row.causal {
        p = p.causal();
    }
    let options = CpOptions {
        strategy: row.strategy,
        timeout: Duration::from_secs(120),
        ..CpOptions::default()
    };
    let per_rank = run_ranks(world, &options, |cp| {
        let e = |e: anyhow::Error| CpError::Invalid(e.to_string());
        let s = cp.device().stream().clone();
        let seed = 100 + cp.rank() as u64;
        let q = random_bits(&s, p.q_len(), seed).map_err(e)?;
        let k = random_bits(&s, p.kv_len(), seed + 1).map_err(e)?;
        let v = random_bits(&s, p.kv_len(), seed + 2).map_err(e)?;
        let mut o = random_bits(&s, p.q_len(), seed + 3).map_err(e)?;
        let mut lse = s
            .alloc_zeros::<f32>(p.lse_len())
            .map_err(|x| CpError::Invalid(format!("{x:?}")))?;
        let dt = DType::Bf16;
        fn r(x: &CudaSlice<u16>) -> TensorRef<'_> {
            TensorRef {
                data: x.slice(..),
                dtype: DType::Bf16,
            }
        }
        let mut out = Vec::new();
        let mut run = None;
        let ms = time_ms(reps, || {
            let got = cp.forward(
                &p,
                &r(&q),
                &r(&k),
                &r(&v),
                &mut TensorMut {
                    data: o.slice_mut(..),
                    dtype: dt,
                },
                &mut lse.slice_mut(..),
            )?;
            run = Some(got);
            Ok(())
        })
        .map_err(e)?;
        let run = run.expect("ran");
        out.push((
            "fwd".to_string(),
            ms,
            format!("{:?}", run.strategy),
            run.kernels.join("+"),
        ));
        if row.backward {
            let d_o = random_bits(&s, p.q_len(), seed + 4).map_err(e)?;
            let mut dq = random_bits(&s, p.q_len(), 1).map_err(e)?;
            let mut dk = random_bits(&s, p.kv_len(), 2).map_err(e)?;
            let mut dv = random_bits(&s, p.kv_len(), 3).map_err(e)?;
            let mut kernels = String::new();
            let ms = time_ms(reps, || {
                let got = cp.backward(
                    &p,
                    &r(&q),
                    &r(&k),
                    &r(&v),
                    &r(&o),
                    &r(&d_o),
                    &lse.slice(..),
                    &mut TensorMut {
                        data: dq.slice_mut(..),
                        dtype: dt,
                    },
                    &mut TensorMut {
                        data: dk.slice_mut(..),
                        dtype: dt,
                    },
                    &mut TensorMut {
                        data: dv.slice_mut(..),
                        dtype: dt,
                    },
                )?;
                kernels = got.kernels.join("+");
                Ok(())
            })
            .map_err(e)?;
            out.push((
                "bwd".to_string(),
                ms,
                format!("{:?}", run.strategy),
                kernels,
            ));
        }
        Ok(out)
    })?;
    // The group's time is its slowest rank's.
    let mut merged: CpTimes = Vec::new();
    for (rank, r) in per_rank.into_iter().enumerate() {
        let r = r.map_err(|e| anyhow::anyhow!("rank {rank}: {e}"))?;
        if merged.is_empty() {
            merged = r
                .into_iter()
                .map(|(p, ms, s, k)| (p, ms, s, k, vec![ms]))
                .collect();
        } else {
            for (m, x) in merged.iter_mut().zip(r) {
                m.1 = m.1.max(x.1);
                m.4.push(x.1);
            }
        }
    }
    Ok(merged)
}

/// The single-GPU kernels on `seq` rows: forward, then backward, median ms of each.
fn single(dev: &Device, row: &Row, seq: usize, reps: usize, before: &dyn Fn()) -> Result<SingleMs> {
    let p = AttentionProblem::new(1, HEADS, seq, HEAD_DIM)
        .with_kv(row.heads_kv, seq)
        .with_dtype(DType::Bf16)
        .with_causal(row.causal);
    let s = dev.stream().clone();
    let kernel = flashcore::best_for(&p, dev.info())
        .ok_or_else(|| anyhow::anyhow!("no kernel takes {p:?}"))?;
    let (nq, nkv) = (seq * HEADS * HEAD_DIM, seq * row.heads_kv * HEAD_DIM);
    let q = random_bits(&s, nq, 1)?;
    let k = random_bits(&s, nkv, 2)?;
    let v = random_bits(&s, nkv, 3)?;
    let mut o = random_bits(&s, nq, 4)?;
    let mut lse = s.alloc_zeros::<f32>(HEADS * seq)?;
    let fwd = time_ms_after(reps, before, || {
        let mut t = AttentionTensors::new(
            DType::Bf16,
            q.slice(..),
            k.slice(..),
            v.slice(..),
            o.slice_mut(..),
            lse.slice_mut(..),
        );
        kernel.forward(dev, &p, &mut t)?;
        dev.synchronize()?;
        Ok(())
    })?;
    if !row.backward {
        return Ok((fwd, None));
    }
    let d_o = random_bits(&s, nq, 5)?;
    let mut dq = random_bits(&s, nq, 6)?;
    let mut dk = random_bits(&s, nkv, 7)?;
    let mut dv = random_bits(&s, nkv, 8)?;
    let dt = DType::Bf16;
    let bwd = time_ms_after(reps, before, || {
        let mut t = BackwardTensors {
            q: TensorRef {
                data: q.slice(..),
                dtype: dt,
            },
            k: TensorRef {
                data: k.slice(..),
                dtype: dt,
            },
            v: TensorRef {
                data: v.slice(..),
                dtype: dt,
            },
            o: TensorRef {
                data: o.slice(..),
                dtype: dt,
            },
            d_o: TensorRef {
                data: d_o.slice(..),
                dtype: dt,
            },
            lse: lse.slice(..),
            dq: TensorMut {
                data: dq.slice_mut(..),
                dtype: dt,
            },
            dk: TensorMut {
                data: dk.slice_mut(..),
                dtype: dt,
            },
            dv: TensorMut {
                data: dv.slice_mut(..),
                dtype: dt,
            },
        };
        flashcore::first_backward_that_takes(
            flashcore::backward_kernels(),
            |b: &dyn AttentionBackward| b.backward(dev, &p, &mut t),
        )?;
        dev.synchronize()?;
        Ok(())
    })?;
    Ok((fwd, Some(bwd)))
}

/// [`single`] on every GPU at once (one thread each, a barrier before every call): the slowest
/// GPU's median ms.
fn single_all_busy(world: usize, row: &Row, seq: usize, reps: usize) -> Result<SingleMs> {
    let barrier = std::sync::Barrier::new(world);
    let wait = || {
        barrier.wait();
    };
    let per_gpu: Vec<Result<SingleMs>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|g| {
                let wait = &wait;
                s.spawn(move || single(&Device::open(g)?, row, seq, reps, wait))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a GPU's thread panicked")))
            })
            .collect()
    });
    let mut out: SingleMs = (0.0, Some(0.0));
    for r in per_gpu {
        let (f, b) = r?;
        out.0 = out.0.max(f);
        out.1 = match (out.1, b) {
            (Some(x), Some(y)) => Some(x.max(y)),
            _ => None,
        };
    }
    Ok(out)
}

pub fn run(args: &Args, out_dir: &Path) -> Result<()> {
    let world = Device::count()?;
    if world < 2 {
        bail!("--suite cp needs 2 or more GPUs; {world} visible");
    }
    std::fs::create_dir_all(out_dir)?;
    flashcore_context_parallel::nccl_available()?;
    let rows: Vec<&Row> = ROWS
        .iter()
        .filter(|r| {
            args.case_filter.is_empty()
                || args.case_filter.iter().any(|f| r.key.contains(f.as_str()))
        })
        .collect();
    let dev = Device::open(0)?;
    println!(
        "bench-all --suite cp: {world} x {} (NCCL {}), B=1 H={HEADS} D={HEAD_DIM} bf16",
        dev.info().name,
        flashcore_context_parallel::nccl_version()?
    );
    let mut results = Vec::new();
    // The single-GPU reference of a problem, measured once (the strategies share it).
    let mut singles: Vec<(SingleKey, (SingleMs, SingleMs))> = Vec::new();
    for row in rows {
        let reps = if row.seq > (256 << 10) { 1 } else { 2 };
        let t = Instant::now();
        let cp = cp_row(row, world, reps)?;
        // Equal work per GPU: S/√N rows (multiple of 128).
        let single_seq = ((row.seq as f64 / (world as f64).sqrt()) / 128.0).round() as usize * 128;
        let id = (row.heads_kv, single_seq, row.causal);
        let ((sf, sb), (busy_f, busy_b)) = match singles.iter().find(|(k, _)| *k == id) {
            Some(&(_, t)) => t,
            None => {
                let alone = single(&dev, row, single_seq, reps, &|| {})?;
                let busy = single_all_busy(world, row, single_seq, reps)?;
                singles.push((id, (alone, busy)));
                (alone, busy)
            }
        };
        for (pass, ms, strategy, kernels, rank_ms) in cp {
            let bwd = pass == "bwd";
            let single_ms = if bwd { sb.unwrap_or(f64::NAN) } else { sf };
            let busy_ms = if bwd {
                busy_b.unwrap_or(f64::NAN)
            } else {
                busy_f
            };
            let busy_t = flops(single_seq, row.causal, bwd) / (busy_ms * 1e-3) / 1e12;
            let cp_t = flops(row.seq, row.causal, bwd) / world as f64 / (ms * 1e-3) / 1e12;
            let single_t = flops(single_seq, row.causal, bwd) / (single_ms * 1e-3) / 1e12;
            let m = Measured {
                key: row.key.into(),
                world,
                seq: row.seq,
                heads_kv: row.heads_kv,
                causal: row.causal,
                pass,
                strategy,
                kernels,
                cp_ms: ms,
                cp_tflops_per_gpu: cp_t,
                single_seq,
                single_ms,
                single_tflops: single_t,
                efficiency: cp_t / single_t,
                fa3_ring_ms: None,
                fa3_ring_note: None,
                rank_ms,
                busy_ms: Some(busy_ms),
                busy_efficiency: Some(cp_t / busy_t),
            };
            println!(
                "  {:<28} {} {:>9.1} ms (ranks {:?})  {:>6.1} TFLOP/s/GPU | 1 GPU S={} {:>9.1} ms {:>6.1} TFLOP/s ({:.1} % ), all busy {:.1} ms ({:.1} %)  ({:.0} s)",
                m.key,
                m.pass,
                m.cp_ms,
                m.rank_ms.iter().map(|x| x.round()).collect::<Vec<_>>(),
                m.cp_tflops_per_gpu,
                m.single_seq,
                m.single_ms,
                m.single_tflops,
                100.0 * m.efficiency,
                busy_ms,
                100.0 * m.busy_efficiency.unwrap_or(f64::NAN),
                t.elapsed().as_secs_f64()
            );
            results.push(m);
        }
    }
    if !args.no_peers {
        fa3_ring(args, &mut results);
    }
    write_and_print(&results, out_dir)
}

/// Writes `bench-cp.md` and `.json` and prints the table (also `--from-json` of a saved run).
pub fn write_and_print(results: &[Measured], out_dir: &Path) -> Result<()> {
    std::fs::create_dir_all(out_dir)?;
    let md = render_markdown(results);
    std::fs::write(out_dir.join("bench-cp.md"), &md)?;
    std::fs::write(
        out_dir.join("bench-cp.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    println!("\n{md}");
    Ok(())
}

/// Times flash-attn3-jax's ring attention on the same rows (`bench/peers/cp_ring_fa3_jax.py`)
/// and fills the FA3 columns; a row or a run it cannot do gets the reason instead.
fn fa3_ring(args: &Args, results: &mut [Measured]) {
    let mut rows: Vec<String> = Vec::new();
    for m in results.iter() {
        let r = format!(
            "{}:{}:{}:{}:{}",
            m.key,
            m.seq,
            m.heads_kv,
            u8::from(m.causal),
            u8::from(results.iter().any(|x| x.key == m.key && x.pass == "bwd"))
        );
        if !rows.contains(&r) && !m.key.contains("allgather") {
            rows.push(r);
        }
    }
    let reps = if results.iter().any(|m| m.seq > (256 << 10)) {
        "1"
    } else {
        "2"
    };
    let script = std::path::Path::new("bench/peers/cp_ring_fa3_jax.py");
    println!(
        "peer: flash-attn3-jax ring attention ({})",
        script.display()
    );
    let out = std::process::Command::new(&args.python)
        .arg(script)
        .args(["--reps", reps])
        .args(&rows)
        .stderr(std::process::Stdio::inherit())
        .output();
    let note = |results: &mut [Measured], why: String| {
        for m in results.iter_mut() {
            m.fa3_ring_note = Some(why.clone());
        }
    };
    let out = match out {
        Ok(o) => o,
        Err(e) => return note(results, format!("not run: {e}")),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(v) = text
        .lines()
        .last()
        .and_then(|l| serde_json::from_str::<Vec<serde_json::Value>>(l).ok())
    else {
        return note(
            results,
            format!("peer failed (exit {:?})", out.status.code()),
        );
    };
    for m in results.iter_mut() {
        // The all-gather rows share their problem with the ring rows of the same shape.
        let key = m.key.replace("-allgather", "-ring");
        for x in &v {
            if x["key"] != key.as_str() {
                continue;
            }
            if let Some(e) = x["error"].as_str() {
                m.fa3_ring_note =
                    Some(format!("error: {}", e.chars().take(80).collect::<String>()));
            } else if x["pass"] == m.pass.as_str() {
                m.fa3_ring_ms = x["ms"].as_f64();
            }
        }
    }
}

/// The table: each row against the single-GPU kernel at equal work per GPU, and against
/// FA3's ring attention. JAX's backward cannot be timed alone (`jax.grad` runs the forward
/// too), so a backward row compares forward + backward of both.
pub fn render_markdown(results: &[Measured]) -> String {
    let mut md = String::from(
        "| row | pass | GPUs | strategy | ms | TFLOP/s per GPU | 1 GPU at S/√N: rows | ms | TFLOP/s | efficiency | all GPUs busy: TFLOP/s | efficiency | FA3 ring ms | × FA3 ring |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for m in results {
        let fwd = results.iter().find(|x| x.key == m.key && x.pass == "fwd");
        let (peer, ratio) = match (m.pass.as_str(), m.fa3_ring_ms, fwd) {
            ("fwd", Some(t), _) => (format!("{t:.1}"), format!("{:.2}", t / m.cp_ms)),
            ("bwd", Some(t), Some(f)) => match f.fa3_ring_ms {
                Some(tf) => (
                    format!("fwd+bwd {:.1}", tf + t),
                    format!("{:.2} (fwd+bwd)", (tf + t) / (f.cp_ms + m.cp_ms)),
                ),
                None => ("-".into(), "-".into()),
            },
            _ => (
                m.fa3_ring_note.clone().unwrap_or_else(|| "-".into()),
                "-".into(),
            ),
        };
        let busy = match m.busy_efficiency {
            Some(e) => format!("{:.1} | {:.1} %", m.cp_tflops_per_gpu / e, 100.0 * e),
            None => "- | -".into(),
        };
        md += &format!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {} | {:.1} | {:.1} | {:.1} % | {busy} | {peer} | {ratio} |\n",
            m.key,
            m.pass,
            m.world,
            m.strategy,
            m.cp_ms,
            m.cp_tflops_per_gpu,
            m.single_seq,
            m.single_ms,
            m.single_tflops,
            100.0 * m.efficiency
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pass: &str, ms: f64, fa3: Option<f64>, note: Option<&str>) -> Measured {
        Measured {
            key: "causal-256k-mha".into(),
            world: 2,
            seq: 256 << 10,
            heads_kv: 32,
            causal: true,
            pass: pass.into(),
            strategy: "Ring".into(),
            kernels: "persistent-hopper".into(),
            cp_ms: ms,
            cp_tflops_per_gpu: 600.0,
            single_seq: 185344,
            single_ms: ms,
            single_tflops: 600.0,
            efficiency: 1.0,
            fa3_ring_ms: fa3,
            fa3_ring_note: note.map(Into::into),
            rank_ms: vec![ms],
            busy_ms: None,
            busy_efficiency: None,
        }
    }

    #[test]
    fn backward_rows_compare_forward_plus_backward_with_the_peer() {
        let md = render_markdown(&[
            row("fwd", 100.0, Some(150.0), None),
            row("bwd", 300.0, Some(450.0), None),
        ]);
        assert!(md.contains("| - | - | 150.0 | 1.50 |"), "{md}");
        assert!(md.contains("| fwd+bwd 600.0 | 1.50 (fwd+bwd) |"), "{md}");
        let md = render_markdown(&[row("fwd", 100.0, None, Some("error: OOM"))]);
        assert!(md.contains("| error: OOM | - |"), "{md}");
    }
}
