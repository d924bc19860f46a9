//! Host arrays in, host arrays out: the shortest way to run flashcore.
//!
//! `cargo run --release -p flashcore --example host_arrays`
//!
//! Builds Q, K, V as ndarrays in BSHD order ([batch, seq, heads, head_dim], what most model
//! code produces), lets `best_for` pick the fastest compiled-in generation for the device, and
//! runs it with `forward_host`, which uploads the inputs (rounded to f16), launches, waits and
//! copies O and the log-sum-exp back as f32. Without a GPU it says so and exits (status 0).

use flashcore::{AttentionProblem, Device};
use ndarray::Array4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("host_arrays: no CUDA GPU to run on here ({e}); nothing to do");
            return Ok(());
        }
    };
    // One causal self-attention call: batch 1, 8 heads, 512 tokens, head dim 64, f16, BSHD.
    let problem = AttentionProblem::new(1, 8, 512, 64).with_causal(true);
    let kernel = flashcore::best_for(&problem, device.info())
        .ok_or("no compiled-in generation takes this problem on this device")?;

    let [b, s, h, d] = problem.layout.shape(
        problem.batch,
        problem.heads_q,
        problem.seq_q,
        problem.head_dim,
    );
    let wave = |phase: f32| {
        Array4::from_shape_fn((b, s, h, d), |(bi, si, hi, di)| {
            ((bi * 7 + si * 13 + hi * 17 + di * 3) as f32 * 0.01 + phase).sin()
        })
    };
    let (q, k, v) = (wave(0.0), wave(1.0), wave(2.0));

    let out = flashcore::forward_host(
        kernel.as_ref(),
        &device,
        &problem,
        q.view(),
        k.view(),
        v.view(),
    )?;

    println!(
        "{} on {}: {problem}\nO {:?}, LSE {:?}",
        kernel.name(),
        device.info().name,
        out.o.shape(),
        out.lse.shape()
    );
    // Causal: the first query sees only the first key, so its output is that key's V row.
    let err = (0..d)
        .map(|i| (out.o[[0, 0, 0, i]] - v[[0, 0, 0, i]]).abs())
        .fold(0.0f32, f32::max);
    println!("first row equals V[0] up to f16 rounding: max diff {err:.2e}");
    println!(
        "O[0, 511, 0, 0..4] = {:?}",
        &out.o.as_slice().unwrap()[511 * h * d..511 * h * d + 4]
    );
    Ok(())
}
