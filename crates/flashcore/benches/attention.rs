//! criterion benches: the oracle on the CPU (small and medium problems) and every compiled-in
//! generation on the GPU, timed by CUDA events through `iter_custom` (skipped, with a message,
//! where there is no GPU).
//!
//! `cargo bench -p flashcore` (all), `cargo bench -p flashcore -- oracle` (CPU only).
//! For the numbers that go into results tables use `cargo xtask bench-all` (L2-cold inputs,
//! CUDA graphs for short calls, peers); these are for quick before/after comparisons.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use flashcore::cudarc::driver::sys::CUevent_flags;
use flashcore::{AttentionProblem, AttentionTensors, Device};
use flashcore_oracle::{reference_f64, OracleProblem, Rows};
use ndarray::Array4;

/// Deterministic values in [-1, 1) (a 64-bit LCG), rounded to f16.
fn values(shape: [usize; 4], seed: u64) -> Array4<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    Array4::from_shape_simple_fn(shape, || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = (x >> 40) as f32 / (1u64 << 24) as f32;
        flashcore::DType::F16.round(2.0 * u - 1.0)
    })
}

fn oracle(c: &mut Criterion) {
    let mut g = c.benchmark_group("oracle_f64");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for (name, (b, h, s, d)) in [("small", (1, 2, 64, 64)), ("medium", (1, 4, 512, 64))] {
        let p = OracleProblem {
            batch: b,
            heads_q: h,
            heads_kv: h,
            seq_q: s,
            seq_k: s,
            head_dim: d,
            causal: false,
            scale: 1.0 / (d as f64).sqrt(),
            window_left: None,
            window_right: None,
            softcap: None,
            alibi_slopes: None,
            mm_prefix: None,
            p_e4m3: false,
        };
        let q = values([b, h, s, d], 1);
        let k = values([b, h, s, d], 2);
        let v = values([b, h, s, d], 3);
        g.throughput(Throughput::Elements((b * h * s * s * d) as u64));
        g.bench_function(
            BenchmarkId::new("reference", format!("{name} {b}x{h}x{s}x{d}")),
            |bn| bn.iter(|| reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All)),
        );
    }
    g.finish();
}

fn gpu(c: &mut Criterion) {
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("gpu benches skipped: {e}");
            return;
        }
    };
    let mut g = c.benchmark_group("forward");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let stream = device.stream().clone();
    let event = || {
        device
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .expect("a timing event")
    };
    let (start, end) = (event(), event());
    for (b, h, s, d) in [(1, 8, 512, 64), (4, 16, 2048, 64), (4, 16, 2048, 128)] {
        for causal in [false, true] {
            let problem = AttentionProblem::new(b, h, s, d)
                .with_causal(causal)
                .with_layout(flashcore::Layout::Bhsd);
            let bits: Vec<u16> = values([b, h, s, d], 9)
                .iter()
                .map(|&x| problem.dtype.to_bits(x))
                .collect();
            let (q, k, v) = (
                stream.clone_htod(&bits).unwrap(),
                stream.clone_htod(&bits).unwrap(),
                stream.clone_htod(&bits).unwrap(),
            );
            let mut o = stream.alloc_zeros::<u16>(problem.o_len()).unwrap();
            let mut lse = stream.alloc_zeros::<f32>(problem.lse_len()).unwrap();
            g.throughput(Throughput::Elements(problem.flops() as u64));
            for kernel in flashcore::kernels() {
                if let Err(u) = kernel.supports(&problem, device.info()) {
                    eprintln!("{}: skipped ({})", kernel.name(), u.reason);
                    continue;
                }
                let dtype = problem.dtype;
                let mut call = || {
                    let mut t = AttentionTensors::new(
                        dtype,
                        q.as_view(),
                        k.as_view(),
                        v.as_view(),
                        o.as_view_mut(),
                        lse.as_view_mut(),
                    );
                    kernel.forward(&device, &problem, &mut t)
                };
                // First call compiles the kernel; a failure skips it rather than the whole run.
                if let Err(e) = call().and_then(|_| device.synchronize()) {
                    eprintln!("{}: skipped ({e})", kernel.name());
                    continue;
                }
                let id = BenchmarkId::new(
                    kernel.name(),
                    format!("{b}x{h}x{s}x{d}{}", if causal { " causal" } else { "" }),
                );
                g.bench_function(id, |bn| {
                    bn.iter_custom(|iters| {
                        start.record(&stream).unwrap();
                        for _ in 0..iters {
                            call().unwrap();
                        }
                        end.record(&stream).unwrap();
                        let ms = start.elapsed_ms(&end).unwrap() as f64;
                        Duration::from_secs_f64(ms / 1e3)
                    })
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, oracle, gpu);
criterion_main!(benches);
