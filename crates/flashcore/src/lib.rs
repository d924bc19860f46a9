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

/// B, H, S, D of the ladder, the shapes the generations are measured and ranked on (`cargo xtask
/// bench-all --suite ladder`, the launch snapshots): launch-bound, mid-size D = 64 and D = 128,
/// long sequences, many heads.
pub const LADDER: [(usize, usize, usize, usize); 6] = [
    (1, 8, 512, 64),
    (4, 16, 2048, 64),
    (4, 16, 2048, 128),
    (2, 16, 8192, 64),
    (1, 16, 16384, 128),
    (8, 32, 4096, 128),
];

/// Every generation compiled in, fastest first: the order [`best_for`] walks.
///
/// From `cargo xtask bench-all --suite ladder` on an H100 (docs/results/2026-11-23-ladder-h100):
/// the Hopper path of generation 5 is the fastest at every ladder shape (387-622 TFLOP/s);
/// tile64 (242-295) comes next, ahead of the portable path of generation 5 (226-302, slower than
/// tile64 at 6 of 8 large shapes in that run), then fused32, vectorized and scalar. A generation
/// that rejects a problem (the Hopper path off sm_90, or past head dim 256) lets `best_for` fall
/// through to the next.
#[allow(clippy::vec_init_then_push)] // one `push` per feature, each behind its own cfg
pub fn kernels() -> Vec<Box<dyn Attention>> {
    #[cfg(feature = "aot")]
    aot::install();
    #[allow(unused_mut)]
    let mut v: Vec<Box<dyn Attention>> = Vec::new();
    #[cfg(feature = "persistent")]
    v.push(Box::new(flashcore_persistent::PersistentHopper));
    #[cfg(feature = "tile64")]
    v.push(Box::new(flashcore_tile64::Tile64));
    #[cfg(feature = "persistent")]
    v.push(Box::new(flashcore_persistent::PersistentPortable));
    #[cfg(feature = "fused32")]
    v.push(Box::new(flashcore_fused32::Fused32));
    #[cfg(feature = "vectorized")]
    v.push(Box::new(flashcore_vectorized::Vectorized));
    #[cfg(feature = "scalar")]
    v.push(Box::new(flashcore_scalar::Scalar));
    v
}

/// Every backward kernel compiled in (`AttentionBackward`), fastest first as measured on the
/// H100 (docs/generations/gen5-hopper-bwd.md, gen5-portable-bwd.md): generation 5's Hopper
/// backward (`kernels/gen5_hopper_bwd.cu`, sm_90a only, not deterministic: bulk f32 reduces of
/// dQ), its portable mma.sync backward with FlashAttention-2's schedule (dQ reduced into f32 by
/// the dK/dV pass: not deterministic, 1.2-1.4x faster than the next), the portable backward's
/// deterministic schedule (`kernels/gen5_portable_bwd*.cu`, dQ in its own pass), then the scalar
/// baseline (`kernels/gen1_scalar_bwd.cu`). So the default trades bit-identical dQ for speed;
/// [`AttentionBackward::deterministic`] tells them apart, and a caller that needs bit-identical
/// gradients picks the first deterministic one that takes the problem.
#[allow(clippy::vec_init_then_push)]
pub fn backward_kernels() -> Vec<Box<dyn AttentionBackward>> {
    #[cfg(feature = "aot")]
    aot::install();
    #[allow(unused_mut)]
    let mut v: Vec<Box<dyn AttentionBackward>> = Vec::new();
    #[cfg(feature = "persistent")]
    v.push(Box::new(flashcore_persistent::PersistentHopper));
    #[cfg(feature = "persistent")]
    v.push(Box::new(flashcore_persistent::PortableAtomicBackward));
    #[cfg(feature = "persistent")]
    v.push(Box::new(flashcore_persistent::PersistentPortable));
    #[cfg(feature = "scalar")]
    v.push(Box::new(flashcore_scalar::Scalar));
    v
}

/// The backward kernel called `name`, if compiled in.
pub fn backward_kernel(name: &str) -> Option<Box<dyn AttentionBackward>> {
    backward_kernels().into_iter().find(|k| k.name() == name)
}

/// The generation called `name`, if compiled in. "persistent" is generation 5 with its path
/// chosen from the device's compute capability (Hopper on sm_90, portable otherwise).
pub fn kernel(name: &str) -> Option<Box<dyn Attention>> {
    #[cfg(feature = "persistent")]
    if name == "persistent" {
        return Some(Box::new(flashcore_persistent::Persistent));
    }
    kernels().into_iter().find(|k| k.name() == name)
}

/// The fastest compiled-in generation that takes `problem` on `device`.
pub fn best_for(problem: &AttentionProblem, device: &DeviceInfo) -> Option<Box<dyn Attention>> {
    problem.validate().ok()?; // plans assume a valid problem (sizes that cannot overflow)
    kernels()
        .into_iter()
        .find(|k| k.supports(problem, device).is_ok())
}

/// A markdown table of every compiled-in generation and what it takes (`flashcore kernels`).
pub fn capabilities_table() -> String {
    render_capabilities(&kernels())
}

/// The capabilities table for any list of generations, in the given order.
pub fn render_capabilities(kernels: &[Box<dyn Attention>]) -> String {
    let mut out = String::from(
        "| generation | dtypes | head dims | causal | GQA | layouts | min cc | alignment |\n|---|---|---|---|---|---|---|---|\n",
    );
    for k in kernels {
        let c = k.capabilities();
        let dtypes: Vec<&str> = c.dtypes.iter().map(|d| d.name()).collect();
        let layouts: Vec<&str> = c.layouts.iter().map(|l| l.name()).collect();
        let head_dims = match c.decode_only {
            Some(only) => format!(
                "{} (past {}: decode-shaped only)",
                c.head_dims, only.head_dim
            ),
            None => c.head_dims.to_string(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {}.{} | {} elems |\n",
            k.name(),
            dtypes.join(","),
            head_dims,
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

/// How `kernel` would launch `problem` on `device`, one line per launch: grid, block, dynamic
/// shared memory, defines and tensor maps (plus workspace and splits when the plan has them),
/// or the reason it does not take the problem. For `flashcore plan`-style output and snapshots.
pub fn describe_plan(
    kernel: &dyn Attention,
    problem: &AttentionProblem,
    device: &DeviceInfo,
) -> String {
    if let Err(u) = kernel.supports(problem, device) {
        return format!("unsupported: {}", u.reason);
    }
    let plan = match kernel.plan(problem, device) {
        Ok(p) => p,
        Err(u) => return format!("unsupported: {}", u.reason),
    };
    let mut lines: Vec<String> = Vec::new();
    for l in &plan.launches {
        let defines: Vec<String> = l.defines.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut line = format!(
            "{}:{} grid={:?} block={:?} smem={}",
            l.source, l.entry, l.grid, l.block, l.dynamic_smem_bytes
        );
        if !defines.is_empty() {
            line.push_str(&format!(" defines=[{}]", defines.join(" ")));
        }
        if let Some(t) = &l.tensor_maps {
            line.push_str(&format!(
                " tma(q_rows={} kv_rows={} cols={} swizzle={:?})",
                t.q_box_rows, t.kv_box_rows, t.box_cols, t.swizzle
            ));
        }
        lines.push(line);
    }
    if plan.workspace_f32 > 0 || plan.num_splits > 1 {
        lines.push(format!(
            "workspace_f32={} workspace_counters={} num_splits={}",
            plan.workspace_f32, plan.workspace_counters, plan.num_splits
        ));
    }
    lines.join("\n")
}

#[cfg(feature = "aot")]
pub mod aot;

pub mod fa_args;

/// Runs the fastest compiled-in generation that takes this problem *and these buffers*, falling
/// back past every generation that answers `Unsupported` — including for what [`best_for`]
/// cannot see, like a base pointer that breaks a fast generation's 16-byte alignment (the
/// scalar generation takes any). Returns the name of the generation that ran. Invalid problems
/// and buffers are errors at once; a generation only says `Unsupported` before it launches
/// anything, so trying the next one is safe. (Issue 6; tests in tests/fallback.rs.)
pub fn forward_auto(
    device: &Device,
    problem: &AttentionProblem,
    tensors: &mut AttentionTensors<'_>,
) -> Result<&'static str, Error> {
    problem.validate()?;
    tensors.check(problem)?;
    first_that_takes(kernels(), |k| k.forward(device, problem, tensors)).map(|(name, ())| name)
}

/// Calls `f` on each kernel in order until one does not answer `Unsupported`; returns that
/// kernel's name and result, or `Unsupported` with every kernel's reason. Any other error stops
/// the walk. (The fallback rule of [`forward_auto`], separate so it can be tested without a GPU.)
pub fn first_that_takes<T>(
    kernels: impl IntoIterator<Item = Box<dyn Attention>>,
    mut f: impl FnMut(&dyn Attention) -> Result<T, Error>,
) -> Result<(&'static str, T), Error> {
    first_taking(kernels, |k| k.name(), |k| f(k), "generation")
}

/// [`first_that_takes`] over backward kernels ([`backward_kernels`]' order).
pub fn first_backward_that_takes<T>(
    kernels: impl IntoIterator<Item = Box<dyn AttentionBackward>>,
    mut f: impl FnMut(&dyn AttentionBackward) -> Result<T, Error>,
) -> Result<(&'static str, T), Error> {
    first_taking(kernels, |k| k.name(), |k| f(k), "backward kernel")
}

fn first_taking<K: ?Sized, T>(
    kernels: impl IntoIterator<Item = Box<K>>,
    name: impl Fn(&K) -> &'static str,
    mut f: impl FnMut(&K) -> Result<T, Error>,
    what: &str,
) -> Result<(&'static str, T), Error> {
    let mut reasons = Vec::new();
    for k in kernels {
        match f(k.as_ref()) {
            Ok(t) => return Ok((name(k.as_ref()), t)),
            Err(Error::Unsupported(u)) => reasons.push(format!("{}: {}", u.kernel, u.reason)),
            Err(e) => return Err(e),
        }
    }
    Err(Error::Unsupported(Unsupported::new(
        "auto",
        if reasons.is_empty() {
            format!("no {what} is compiled in")
        } else {
            format!("no compiled-in {what} takes it ({})", reasons.join("; "))
        },
    )))
}
