//! Device buffers: allocate with cudarc, run `forward` on `AttentionTensors`, read back.
//!
//! `cargo run --release -p flashcore --example device_buffers`
//!
//! The path to use inside a model that already keeps its tensors on the GPU: nothing is copied
//! by flashcore, the call only validates and queues the kernel on the device's stream
//! (asynchronous: synchronize before reading). Tensors are 16-bit element buffers (`u16`)
//! tagged with their dtype. This one is a grouped-query (8 query heads, 2 KV heads) bf16
//! problem in BHSD layout. Without a GPU it says so and exits (status 0).

use flashcore::{AttentionProblem, AttentionTensors, DType, Device, Layout};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("device_buffers: no CUDA GPU to run on here ({e}); nothing to do");
            return Ok(());
        }
    };
    let problem = AttentionProblem::new(2, 8, 1024, 128)
        .with_kv(2, 1024)
        .with_dtype(DType::Bf16)
        .with_layout(Layout::Bhsd);
    problem.validate()?;
    let kernel = flashcore::best_for(&problem, device.info())
        .ok_or("no compiled-in generation takes this problem on this device")?;

    // Inputs as bf16 bits; any values will do for a demo.
    let bits = |n: usize, seed: usize| -> Vec<u16> {
        (0..n)
            .map(|i| {
                problem
                    .dtype
                    .to_bits(((i * 31 + seed * 17) % 97) as f32 / 97.0 - 0.5)
            })
            .collect()
    };
    let stream = device.stream();
    let q = stream.clone_htod(&bits(problem.q_len(), 1))?;
    let k = stream.clone_htod(&bits(problem.k_len(), 2))?;
    let v = stream.clone_htod(&bits(problem.v_len(), 3))?;
    let mut o = stream.alloc_zeros::<u16>(problem.o_len())?;
    let mut lse = stream.alloc_zeros::<f32>(problem.lse_len())?;

    {
        let mut tensors = AttentionTensors::new(
            problem.dtype,
            q.as_view(),
            k.as_view(),
            v.as_view(),
            o.as_view_mut(),
            lse.as_view_mut(),
        );
        // Validates everything first; a rejected call launches nothing.
        kernel.forward(&device, &problem, &mut tensors)?;
    }
    device.synchronize()?;

    let o_host: Vec<f32> = stream
        .clone_dtoh(&o)?
        .into_iter()
        .map(|b| problem.dtype.from_bits(b))
        .collect();
    let lse_host = stream.clone_dtoh(&lse)?;
    println!("{} on {}: {problem}", kernel.name(), device.info().name);
    println!(
        "O[0, 0, 0, 0..4] = {:?}; LSE[0, 0, 0] = {}; all finite: {}",
        &o_host[..4],
        lse_host[0],
        o_host.iter().all(|x| x.is_finite()) && lse_host.iter().all(|x| x.is_finite())
    );
    Ok(())
}
