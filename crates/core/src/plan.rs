//! The `Attention` trait and what a generation tells the core: which problems it takes and how to
//! launch its kernel. Validation, compilation, buffers and the launch itself live in the core:
//! [`forward_on`] checks a call and plans it, `execute.rs` queues the plan.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::device::{Device, DeviceInfo};
use crate::dtype::DType;
use crate::error::{Error, InvalidProblem, Unsupported};
use crate::execute::{check_pointer_alignment, run_plan_on};
use crate::modes::ModeSupport;
use crate::problem::{AttentionProblem, Layout};
use crate::tensors::AttentionTensors;

pub use crate::launch_plan::{KernelLaunch, LaunchPlan, Swizzle, TensorMapSpec, TransposedV};

/// Head dims a kernel takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeadDims {
    /// Every value in `min..=max` that is a multiple of `multiple_of`.
    Range {
        min: usize,
        max: usize,
        multiple_of: usize,
    },
    /// Exactly these (one compiled kernel each).
    List(&'static [usize]),
}

impl HeadDims {
    pub fn contains(&self, d: usize) -> bool {
        match self {
            HeadDims::Range {
                min,
                max,
                multiple_of,
            } => d >= *min && d <= *max && d.is_multiple_of(*multiple_of),
            HeadDims::List(l) => l.contains(&d),
        }
    }
}

impl std::fmt::Display for HeadDims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeadDims::Range {
                min,
                max,
                multiple_of: 1,
            } => write!(f, "{min}..={max}"),
            HeadDims::Range {
                min,
                max,
                multiple_of,
            } => write!(f, "{min}..={max} step {multiple_of}"),
            HeadDims::List(l) => {
                let s: Vec<String> = l.iter().map(|d| d.to_string()).collect();
                f.write_str(&s.join(","))
            }
        }
    }
}

/// What a generation takes, in a form a table (and `flashcore kernels`) can print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    pub dtypes: &'static [DType],
    pub head_dims: HeadDims,
    pub causal: bool,
    pub gqa: bool,
    pub layouts: &'static [Layout],
    /// Lowest compute capability (major, minor) the kernel runs on.
    pub min_compute_capability: (u32, u32),
    /// Base pointers and row/head/batch strides must be multiples of this many elements
    /// (8 for kernels that load 16 bytes at a time).
    pub alignment_elems: usize,
    /// Inference modes (varlen, KV cache, pages, windows, softcap, ALiBi) the kernel implements.
    pub modes: ModeSupport,
    /// Whether V and O may have a head dim of their own (`AttentionProblem::head_dim_v`, e.g.
    /// 192 for Q·K and 128 for V). Kernels without it take one head dim for all tensors.
    pub distinct_head_dim_v: bool,
    /// Head dims past which the kernel takes only decode-shaped problems (a decode kernel in
    /// front of it holds wider builds than its prefill kernel). `None`: every claimed head dim
    /// for every shape.
    pub decode_only: Option<DecodeOnly>,
}

/// Past `head_dim` (Q's or V's), a problem is taken only when the queries of one KV head fit
/// `packed_rows` rows: `seq_q · heads_q / heads_kv <= packed_rows` (`seq_q` the longest
/// sequence's under varlen). The plan refuses the rest, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeOnly {
    pub head_dim: usize,
    pub packed_rows: usize,
}

impl DecodeOnly {
    /// Whether `problem` is outside what the kernel takes for this reason alone.
    pub fn excludes(&self, problem: &AttentionProblem) -> bool {
        problem.head_dim.max(problem.head_dim_v()) > self.head_dim
            && problem.seq_q.saturating_mul(problem.q_heads_per_kv()) > self.packed_rows
    }
}

impl Capabilities {
    /// Both dtypes, causal, GQA, both layouts, 16-byte loads (bases and strides multiples of 8
    /// elements): what every generation past the scalar one takes, given its head dims and the
    /// oldest architecture its instructions exist on.
    pub fn all_features(head_dims: HeadDims, min_compute_capability: (u32, u32)) -> Self {
        Capabilities {
            dtypes: &DType::ALL,
            head_dims,
            causal: true,
            gqa: true,
            layouts: &Layout::ALL,
            min_compute_capability,
            alignment_elems: 8,
            modes: ModeSupport::NONE,
            distinct_head_dim_v: false,
            decode_only: None,
        }
    }

    /// Head dims past `head_dim` only for decode-shaped problems ([`DecodeOnly`]).
    pub fn with_decode_only(mut self, head_dim: usize, packed_rows: usize) -> Self {
        self.decode_only = Some(DecodeOnly {
            head_dim,
            packed_rows,
        });
        self
    }

    pub fn with_modes(mut self, modes: ModeSupport) -> Self {
        self.modes = modes;
        self
    }

    /// V and O may have their own head dim (any the kernel's plan takes; it refuses the rest).
    pub fn with_distinct_head_dim_v(mut self) -> Self {
        self.distinct_head_dim_v = true;
        self
    }

    /// `Unsupported` unless `head_dim` is one this kernel is built for (`plan` can be called
    /// without `check`, e.g. by the compile check, so plans use this before sizing anything).
    pub fn require_head_dim(
        &self,
        kernel: &'static str,
        head_dim: usize,
    ) -> Result<(), Unsupported> {
        if self.head_dims.contains(head_dim) {
            Ok(())
        } else {
            Err(Unsupported::new(
                kernel,
                format!("head_dim {head_dim} is not in {}", self.head_dims),
            ))
        }
    }

    /// The checks every generation shares; `kernel` names the generation in the reason.
    pub fn check(
        &self,
        kernel: &'static str,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<(), Unsupported> {
        if !self.dtypes.contains(&problem.dtype) {
            return Err(Unsupported::new(
                kernel,
                format!("dtype {} is not supported", problem.dtype),
            ));
        }
        self.require_head_dim(kernel, problem.head_dim)?;
        if problem.has_distinct_head_dim_v() {
            if !self.distinct_head_dim_v {
                return Err(Unsupported::new(
                    kernel,
                    format!(
                        "head_dim_v {} differs from head_dim {}: this kernel takes one head dim \
                         for Q, K and V",
                        problem.head_dim_v(),
                        problem.head_dim
                    ),
                ));
            }
            if problem.modes.append.is_some() {
                // The core's append kernel copies rows of one head dim into both caches.
                return Err(Unsupported::new(
                    kernel,
                    format!(
                        "appending to a KV cache with head_dim_v {} != head_dim {} is not \
                         implemented",
                        problem.head_dim_v(),
                        problem.head_dim
                    ),
                ));
            }
        }
        if let Some(only) = self.decode_only.filter(|o| o.excludes(problem)) {
            return Err(Unsupported::new(
                kernel,
                format!(
                    "head dim {}: past {} only decode-shaped problems are taken (seq_q · heads_q \
                     / heads_kv <= {}, here {})",
                    problem.head_dim.max(problem.head_dim_v()),
                    only.head_dim,
                    only.packed_rows,
                    problem.seq_q.saturating_mul(problem.q_heads_per_kv())
                ),
            ));
        }
        if problem.causal && !self.causal {
            return Err(Unsupported::new(kernel, "causal masking is not supported"));
        }
        if let Some(mode) = self.modes.missing(&problem.modes) {
            return Err(Unsupported::new(
                kernel,
                format!("{mode} is not implemented by this kernel"),
            ));
        }
        if problem.heads_q != problem.heads_kv && !self.gqa {
            return Err(Unsupported::new(
                kernel,
                "heads_q != heads_kv (GQA/MQA) is not supported",
            ));
        }
        if problem.custom_strides.is_none() && !self.layouts.contains(&problem.layout) {
            return Err(Unsupported::new(
                kernel,
                format!("layout {} is not supported", problem.layout.name()),
            ));
        }
        if device.compute_capability < self.min_compute_capability {
            return Err(Unsupported::new(
                kernel,
                format!(
                    "needs compute capability {}.{} or newer, device is {}.{}",
                    self.min_compute_capability.0,
                    self.min_compute_capability.1,
                    device.compute_capability.0,
                    device.compute_capability.1
                ),
            ));
        }
        let a = self.alignment_elems;
        if a > 1 {
            let s = problem.strides();
            for (name, st) in [("q", s.q), ("k", s.k), ("v", s.v), ("o", s.o)] {
                for (axis, v) in [("batch", st.batch), ("head", st.head), ("row", st.row)] {
                    if v % a != 0 {
                        return Err(Unsupported::new(
                            kernel,
                            format!("{name} {axis} stride {v} is not a multiple of {a} elements (16-byte loads)"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// One rung of the kernel ladder. A generation implements `name`, `capabilities` and `plan`;
/// the core supplies validation, compilation, buffers and the launch.
pub trait Attention: Send + Sync {
    /// Short stable name used on the command line and in tables (e.g. "scalar").
    fn name(&self) -> &'static str;

    fn capabilities(&self) -> Capabilities;

    /// The launch configuration for a problem the capabilities admit. Returns `Unsupported`
    /// for anything else the kernel cannot do on this device (shared memory, tile constraints).
    fn plan(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported>;

    /// Whether this kernel takes the problem on this device, and why not.
    fn supports(&self, problem: &AttentionProblem, device: &DeviceInfo) -> Result<(), Unsupported> {
        self.capabilities().check(self.name(), problem, device)?;
        self.plan(problem, device).map(|_| ())
    }

    /// Runs on device buffers. Validates everything first; a rejected call launches nothing.
    fn forward(
        &self,
        device: &Device,
        problem: &AttentionProblem,
        tensors: &mut AttentionTensors<'_>,
    ) -> Result<(), Error> {
        forward(self, device, problem, tensors)
    }

    /// [`Attention::forward`] on `stream` instead of the device's stream: `stream` must belong
    /// to the device's context (a framework's stream, or one of several streams a caller keeps
    /// busy at once). Queues the launches behind the caller's work on `stream` and returns; the
    /// call gets `stream`'s own scratch buffer, so calls in flight on different streams never
    /// share one.
    fn forward_on(
        &self,
        device: &Device,
        stream: &Arc<CudaStream>,
        problem: &AttentionProblem,
        tensors: &mut AttentionTensors<'_>,
    ) -> Result<(), Error> {
        forward_on(self, device, stream, problem, tensors)
    }
}

/// A kernel that takes one (batch, q head, query tile) item per block (generations 2-4): their
/// plans are its one launch, once the head dim and the block's shared memory pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QTileKernel {
    pub source: &'static str,
    pub entry: &'static str,
    pub q_tile_rows: usize,
    pub warps: u32,
    /// Built per head dim (`FC_HEAD_DIM`) rather than taking it at run time.
    pub per_head_dim: bool,
}

/// The shared memory of one block, as the launch asks for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockSharedMemory {
    /// Declared in the kernel: the default limit applies, the launch asks for none.
    Static(usize),
    /// Asked for at launch, within the default limit.
    Dynamic(usize),
    /// Asked for at launch, past the default limit where the device allows it.
    DynamicOptIn(usize),
}

impl QTileKernel {
    /// A kernel built per head dim.
    pub const fn new(
        source: &'static str,
        entry: &'static str,
        q_tile_rows: usize,
        warps: u32,
    ) -> Self {
        QTileKernel {
            source,
            entry,
            q_tile_rows,
            warps,
            per_head_dim: true,
        }
    }

    /// The same kernel taking the head dim at run time (one build for all).
    pub const fn runtime_head_dim(self) -> Self {
        QTileKernel {
            per_head_dim: false,
            ..self
        }
    }

    /// The plan of `attention`, whose kernel this is: `Unsupported` unless the head dim is one
    /// its capabilities list and the block's shared memory at that head dim, `smem(head_dim)`
    /// (only sized once the head dim passes), fits.
    pub fn plan(
        &self,
        attention: &dyn Attention,
        problem: &AttentionProblem,
        device: &DeviceInfo,
        smem: impl FnOnce(usize) -> BlockSharedMemory,
    ) -> Result<LaunchPlan, Unsupported> {
        let (name, d) = (attention.name(), problem.head_dim);
        attention.capabilities().require_head_dim(name, d)?;
        let (bytes, dynamic, opt_in) = match smem(d) {
            BlockSharedMemory::Static(bytes) => (bytes, 0, false),
            BlockSharedMemory::Dynamic(bytes) => (bytes, bytes, false),
            BlockSharedMemory::DynamicOptIn(bytes) => (bytes, bytes, true),
        };
        device.require_shared_memory(name, bytes, opt_in, &format!(" at head_dim {d}"))?;
        let defines = if self.per_head_dim {
            vec![("FC_HEAD_DIM".into(), d.to_string())]
        } else {
            vec![]
        };
        Ok(LaunchPlan::single(KernelLaunch::per_q_tile(
            self.source,
            self.entry,
            defines,
            problem,
            self.q_tile_rows,
            self.warps,
            dynamic as u32,
        )))
    }
}

/// A forward generation's unit struct and its [`Attention`] impl, the shape every single-kernel
/// generation repeats: all that differs is the name, the body of `plan` (`plan: |problem,
/// device| ...`, an expression of type `Result<LaunchPlan, Unsupported>`) and the capabilities.
#[macro_export]
macro_rules! attention_generation {
    (
        $(#[$meta:meta])*
        $vis:vis struct $ty:ident: $name:literal,
        plan: |$problem:ident, $device:ident| $plan:expr,
        capabilities: $capabilities:expr $(,)?
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default)]
        $vis struct $ty;

        impl $crate::Attention for $ty {
            fn name(&self) -> &'static str {
                $name
            }

            fn capabilities(&self) -> $crate::Capabilities {
                $capabilities
            }

            fn plan(
                &self,
                $problem: &$crate::AttentionProblem,
                $device: &$crate::DeviceInfo,
            ) -> ::std::result::Result<$crate::LaunchPlan, $crate::Unsupported> {
                $plan
            }
        }
    };
}

/// Validates, plans and launches `attention` on `tensors`, on the device's stream.
/// Asynchronous: returns once the launches are queued (call `Device::synchronize` to surface
/// faults).
pub fn forward(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    tensors: &mut AttentionTensors<'_>,
) -> Result<(), Error> {
    forward_on(attention, device, device.stream(), problem, tensors)
}

/// [`forward`] on `stream` (of the device's context) instead of the device's stream, e.g. the
/// stream a framework runs the surrounding layers on. Nothing waits for the device: the launches
/// are queued on `stream` behind whatever the caller queued there, with the stream's own scratch
/// buffer (`Device::with_workspace`), so calls on different streams may run at once.
pub fn forward_on(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    stream: &Arc<CudaStream>,
    problem: &AttentionProblem,
    tensors: &mut AttentionTensors<'_>,
) -> Result<(), Error> {
    device.check_stream(stream)?;
    if problem.modes.append.is_some() {
        return Err(InvalidProblem::Mode {
            field: "k_new",
            reason: "appending writes into the cache: call forward_with_kvcache, which takes it \
                     mutably"
                .into(),
        }
        .into());
    }
    let plan = prepare(attention, device, stream, problem, tensors)?;
    run_plan_on(device, stream, problem, &plan, tensors)
}

/// Every check of a call, in order; returns the plan. Launches nothing.
pub(crate) fn prepare(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    stream: &CudaStream,
    problem: &AttentionProblem,
    tensors: &AttentionTensors<'_>,
) -> Result<LaunchPlan, Error> {
    problem.validate()?;
    tensors.check(problem)?;
    let caps = attention.capabilities();
    caps.check(attention.name(), problem, device.info())?;
    let plan = attention.plan(problem, device.info())?;
    check_pointer_alignment(attention.name(), caps.alignment_elems, tensors, stream)?;
    Ok(plan)
}
