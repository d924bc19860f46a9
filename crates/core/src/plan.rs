//! The `Attention` trait and what a generation tells the core: which problems it takes and how to
//! launch its kernel. Validation, compilation, buffers and the launch itself live in the core.

use crate::device::{Device, DeviceInfo};
use crate::dtype::DType;
use crate::error::{Error, Unsupported};
use crate::modes::ModeSupport;
use crate::problem::{AttentionProblem, Layout};
use crate::tensors::AttentionTensors;

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
        }
    }

    pub fn with_modes(mut self, modes: ModeSupport) -> Self {
        self.modes = modes;
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

/// Hopper bulk-tensor-copy maps the core encodes on the host (cuTensorMapEncodeTiled) and passes
/// after the params block, as `const __grid_constant__ CUtensorMap` arguments in the order
/// Q, K, V. Each map views its tensor as 4-D (head_dim, seq, heads, batch) with the problem's
/// strides; a box is `box_cols` elements of head_dim by `rows` of seq, one head, one batch.
/// Rows past seq are filled with zeros by the hardware.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorMapSpec {
    pub q_box_rows: u32,
    pub kv_box_rows: u32,
    /// Inner box extent in elements; 64 with 128-byte swizzle (64 halves = 128 bytes).
    pub box_cols: u32,
    pub swizzle: Swizzle,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Swizzle {
    None,
    B32,
    B64,
    B128,
}

/// One kernel launch of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelLaunch {
    /// File under `kernels/`, e.g. "gen1_scalar.cu".
    pub source: &'static str,
    /// The `extern "C"` entry point.
    pub entry: &'static str,
    /// Preprocessor defines beyond FC_DTYPE_F16/FC_DTYPE_BF16, which the core adds.
    pub defines: Vec<(String, String)>,
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub dynamic_smem_bytes: u32,
    pub tensor_maps: Option<TensorMapSpec>,
    /// Launch with programmatic stream serialization (programmatic dependent launch, sm_90+):
    /// the kernel may start while the stream's previous kernel still runs. Only for kernels
    /// that execute `griddepcontrol.wait` before their first global-memory access
    /// (`kernels/common/hopper/grid_dependency.cuh`).
    pub programmatic_launch: bool,
}

impl KernelLaunch {
    /// The launch of a grid-stride kernel that takes one (batch, q head, `q_tile_rows`-row query
    /// tile) item per block of `warps` warps (generations 2-4): one block per item while that
    /// fits grid.x, the kernel's loop covers the rest (and items past 2^31).
    pub fn per_q_tile(
        source: &'static str,
        entry: &'static str,
        defines: Vec<(String, String)>,
        problem: &AttentionProblem,
        q_tile_rows: usize,
        warps: u32,
        dynamic_smem_bytes: u32,
    ) -> Self {
        let items =
            problem.batch * problem.heads_q * crate::launch::tiles(problem.seq_q, q_tile_rows);
        KernelLaunch {
            source,
            entry,
            defines,
            grid: (crate::launch::linear_grid(items), 1, 1),
            block: (warps * 32, 1, 1),
            dynamic_smem_bytes,
            tensor_maps: None,
            programmatic_launch: false,
        }
    }
}

/// How to run one problem: launches in order on one stream.
///
/// **Workspace contract.** `params.workspace` points to `workspace_f32` words of device scratch
/// that the core keeps across calls (one buffer per stream of a [`Device`], reused and grown as
/// needed; the plans of one stream run one after another, so they never share it in flight). It
/// is *not* cleared per call (a memset per call would cost about as much as a whole small
/// problem inside a CUDA graph). Its first `workspace_counters` words are the exception: the core
/// guarantees they are zero when the plan's first launch starts (it zeroes the buffer when it
/// allocates it, and again only when an earlier plan may have used those words as scratch), and
/// the plan's kernels must leave them zero when the plan's last launch finishes. Everything past
/// them holds whatever the previous call left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchPlan {
    pub launches: Vec<KernelLaunch>,
    /// f32 scratch elements the core allocates and passes as `params.workspace`.
    pub workspace_f32: usize,
    /// Leading words of the workspace (counted in f32 words, used as u32 arrival counters) that
    /// are zero when the plan starts and that its kernels leave zero (see the contract above);
    /// at most `workspace_f32`.
    pub workspace_counters: usize,
    /// Written into `params.num_splits` (1 when the plan does not split the keys).
    pub num_splits: u32,
}

impl LaunchPlan {
    pub fn single(launch: KernelLaunch) -> Self {
        LaunchPlan {
            launches: vec![launch],
            workspace_f32: 0,
            workspace_counters: 0,
            num_splits: 1,
        }
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
        crate::launch::forward(self, device, problem, tensors)
    }

    /// [`Attention::forward`] on `stream` instead of the device's stream: `stream` must belong
    /// to the device's context (a framework's stream, or one of several streams a caller keeps
    /// busy at once). Queues the launches behind the caller's work on `stream` and returns; the
    /// call gets `stream`'s own scratch buffer, so calls in flight on different streams never
    /// share one.
    fn forward_on(
        &self,
        device: &Device,
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
        problem: &AttentionProblem,
        tensors: &mut AttentionTensors<'_>,
    ) -> Result<(), Error> {
        crate::launch::forward_on(self, device, stream, problem, tensors)
    }
}
