//! Causal attention over every visible GPU, forward and backward, one thread and NCCL rank per
//! GPU: `cargo run --release -p flashcore-context-parallel --example ring -- [rows per GPU]`.
//! Needs libnccl.so on the library path (docs/CONTEXT_PARALLEL.md).

use std::time::Instant;

use flashcore::cudarc::driver::CudaSlice;
use flashcore::{DType, Device, TensorMut, TensorRef};
use flashcore_context_parallel::{run_ranks, CpError, CpOptions, CpProblem};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rows: usize = std::env::args().nth(1).map_or(Ok(8192), |s| s.parse())?;
    let world = Device::count()?;
    // bf16, 32 query heads over 8 KV heads, head dim 128; zig-zag shards for the causal mask.
    let p = CpProblem::new(1, 32, rows, 128)
        .with_heads_kv(8)
        .with_dtype(DType::Bf16)
        .causal();
    let results = run_ranks(world, &CpOptions::default(), |cp| {
        let s = cp.device().stream().clone();
        let cuda = |e: flashcore::cudarc::driver::DriverError| CpError::Invalid(format!("{e:?}"));
        // Any values will do here; a model passes its own shards (Sharding::global_rows says
        // which global rows each rank holds).
        let fill = |n: usize, seed: u32| -> Result<CudaSlice<u16>, CpError> {
            let v: Vec<u16> = (0..n as u32)
                .map(|i| {
                    DType::Bf16
                        .to_bits(((i.wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
                })
                .collect();
            s.clone_htod(&v).map_err(cuda)
        };
        let rank = cp.rank() as u32;
        let (q, k, v, d_o) = (
            fill(p.q_len(), rank)?,
            fill(p.kv_len(), rank + 7)?,
            fill(p.kv_len(), rank + 13)?,
            fill(p.q_len(), rank + 21)?,
        );
        let mut o = fill(p.q_len(), 0)?;
        let mut lse = s.alloc_zeros::<f32>(p.lse_len()).map_err(cuda)?;
        let (mut dq, mut dk, mut dv) = (
            fill(p.q_len(), 0)?,
            fill(p.kv_len(), 0)?,
            fill(p.kv_len(), 0)?,
        );
        fn r(x: &CudaSlice<u16>) -> TensorRef<'_> {
            TensorRef {
                data: x.slice(..),
                dtype: DType::Bf16,
            }
        }
        let t = Instant::now();
        let fwd = cp.forward(
            &p,
            &r(&q),
            &r(&k),
            &r(&v),
            &mut TensorMut {
                data: o.slice_mut(..),
                dtype: DType::Bf16,
            },
            &mut lse.slice_mut(..),
        )?;
        let t_fwd = t.elapsed();
        let t = Instant::now();
        cp.backward(
            &p,
            &r(&q),
            &r(&k),
            &r(&v),
            &r(&o),
            &r(&d_o),
            &lse.slice(..),
            &mut TensorMut {
                data: dq.slice_mut(..),
                dtype: DType::Bf16,
            },
            &mut TensorMut {
                data: dk.slice_mut(..),
                dtype: DType::Bf16,
            },
            &mut TensorMut {
                data: dv.slice_mut(..),
                dtype: DType::Bf16,
            },
        )?;
        Ok((fwd.strategy, fwd.kernels, t_fwd, t.elapsed()))
    })?;
    for (rank, r) in results.into_iter().enumerate() {
        let (strategy, kernels, f, b) = r?;
        println!(
            "rank {rank}: {strategy:?} on {kernels:?}: forward {:.1} ms, backward {:.1} ms (first calls compile)",
            f.as_secs_f64() * 1e3,
            b.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
