//! flashcore: FlashAttention-style forward attention for NVIDIA GPUs, as a ladder of kernel
//! generations behind one [`Attention`] trait. Each generation is a feature (all on by default);
//! [`kernels`] lists those compiled in and [`best_for`] picks the fastest that takes a problem.
//!
//! ```no_run
//! use flashcore::{AttentionProblem, Device};
//! let device = Device::open(0)?;
//! let problem = AttentionProblem::new(1, 8, 512, 64).with_causal(true);
//! let kernel = flashcore::best_for(&problem, device.info()).expect("some generation takes it");
//! let q = ndarray::Array4::<f32>::zeros((1, 512, 8, 64)); // BSHD
//! let out = flashcore::forward_host(kernel.as_ref(), &device, &problem, q.view(), q.view(), q.view())?;
//! # Ok::<(), flashcore::Error>(())
//! ```

pub use flashcore_core::*;

/// Every generation compiled in, fastest first. The order comes from `cargo xtask bench-all` on
/// an H100 (docs/results/); it is what [`best_for`] walks.
pub fn kernels() -> Vec<Box<dyn Attention>> {
    #[allow(unused_mut)]
    let mut v: Vec<Box<dyn Attention>> = Vec::new();
    #[cfg(feature = "persistent")]
    v.push(Box::new(flashcore_persistent::PersistentHopper));
    #[cfg(feature = "tile64")]
    v.push(Box::new(flashcore_tile64::Tile64));
    #[cfg(feature = "fused32")]
    v.push(Box::new(flashcore_fused32::Fused32));
    #[cfg(feature = "vectorized")]
    v.push(Box::new(flashcore_vectorized::Vectorized));
    #[cfg(feature = "scalar")]
    v.push(Box::new(flashcore_scalar::Scalar));
    v
}

/// The generation called `name`, if compiled in.
pub fn kernel(name: &str) -> Option<Box<dyn Attention>> {
    kernels().into_iter().find(|k| k.name() == name)
}

/// The fastest compiled-in generation that takes `problem` on `device`.
pub fn best_for(problem: &AttentionProblem, device: &DeviceInfo) -> Option<Box<dyn Attention>> {
    kernels()
        .into_iter()
        .find(|k| k.supports(problem, device).is_ok())
}

/// A markdown table of every compiled-in generation and what it takes (`flashcore kernels`).
pub fn capabilities_table() -> String {
    let mut out = String::from(
        "| generation | dtypes | head dims | causal | GQA | layouts | min cc | alignment |\n|---|---|---|---|---|---|---|---|\n",
    );
    for k in kernels() {
        let c = k.capabilities();
        let dtypes: Vec<&str> = c.dtypes.iter().map(|d| d.name()).collect();
        let layouts: Vec<&str> = c.layouts.iter().map(|l| l.name()).collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {}.{} | {} elems |\n",
            k.name(),
            dtypes.join(","),
            c.head_dims,
            if c.causal { "yes" } else { "no" },
            if c.gqa { "yes" } else { "no" },
            layouts.join(","),
            c.min_compute_capability.0,
            c.min_compute_capability.1,
            c.alignment_elems
        ));
    }
    out
}
