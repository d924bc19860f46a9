//! What a plan asks the core to launch: kernels with their grids, tensor maps and workspace.

use crate::problem::AttentionProblem;

/// Blocks for a grid-stride loop over `items` work items on grid.x, which takes up to 2^31 - 1
/// blocks (grid.y and grid.z stop at 65535, the limit other libraries have tripped over).
pub fn linear_grid(items: usize) -> u32 {
    items.clamp(1, i32::MAX as usize) as u32
}

/// Whole tiles of `tile` covering `n`.
pub fn tiles(n: usize, tile: usize) -> usize {
    n.div_ceil(tile)
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
    /// Inner box extent in elements; 64 with 128-byte swizzle (64 halves = 128 bytes), 128 for
    /// e4m3 bytes (`Modes::q_fp8`, whose maps view Q, K and V as bytes).
    pub box_cols: u32,
    pub swizzle: Swizzle,
    /// V's map views a transposed copy in the workspace instead of V itself (the e4m3 forward).
    pub transposed_v: Option<TransposedV>,
}

/// V's transposed copy that an earlier launch of the plan writes into the workspace:
/// `[batch, heads_kv, head_dim_v, keys]` bytes from `offset_bytes`, every row `keys` long (seq_k
/// padded with zeros to whole tiles). Its map views it as 4-D (keys, head_dim_v, heads_kv,
/// batch); a box is `box_keys` keys by all of head_dim_v's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransposedV {
    pub offset_bytes: u64,
    pub keys: usize,
    pub box_keys: u32,
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
    /// This launch with `extra` defines beside its own (borrowed when there are none): the
    /// core adds a problem's `Modes::build_defines` this way.
    pub fn with_defines(&self, extra: Vec<(String, String)>) -> std::borrow::Cow<'_, KernelLaunch> {
        if extra.is_empty() {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut l = self.clone();
        l.defines.extend(extra);
        std::borrow::Cow::Owned(l)
    }

    /// A plain launch of a grid-stride kernel over `items` work items, one per block of
    /// `threads` threads: no defines, shared memory or tensor maps.
    pub fn per_item(source: &'static str, entry: &'static str, items: usize, threads: u32) -> Self {
        KernelLaunch {
            source,
            entry,
            defines: vec![],
            grid: (linear_grid(items), 1, 1),
            block: (threads, 1, 1),
            dynamic_smem_bytes: 0,
            tensor_maps: None,
            programmatic_launch: false,
        }
    }

    /// A persistent kernel's launch: `ctas` blocks of `threads` threads with `dynamic_smem_bytes`
    /// of shared memory, each looping over work items itself (generation 5).
    pub fn persistent(
        source: &'static str,
        entry: &'static str,
        defines: Vec<(String, String)>,
        ctas: u32,
        threads: u32,
        dynamic_smem_bytes: u32,
    ) -> Self {
        KernelLaunch {
            source,
            entry,
            defines,
            grid: (ctas, 1, 1),
            block: (threads, 1, 1),
            dynamic_smem_bytes,
            tensor_maps: None,
            programmatic_launch: false,
        }
    }

    /// [`per_item`](Self::per_item) with one item per thread: blocks of `threads` threads for
    /// `items` items.
    pub fn per_thread(
        source: &'static str,
        entry: &'static str,
        items: usize,
        threads: u32,
    ) -> Self {
        Self::per_item(source, entry, tiles(items, threads as usize), threads)
    }

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
        let items = problem.batch * problem.heads_q * tiles(problem.seq_q, q_tile_rows);
        KernelLaunch {
            defines,
            dynamic_smem_bytes,
            ..Self::per_item(source, entry, items, warps * 32)
        }
    }
}

/// How to run one problem: launches in order on one stream.
///
/// **Workspace contract.** `params.workspace` points to `workspace_f32` words of device scratch
/// that the core keeps across calls (one buffer per stream of a [`Device`](crate::device::Device),
/// reused and grown as needed; the plans of one stream run one after another, so they never share
/// it in flight). It is *not* cleared per call (a memset per call would cost about as much as a
/// whole small problem inside a CUDA graph). Its first `workspace_counters` words are the
/// exception: the core guarantees they are zero when the plan's first launch starts (it zeroes the
/// buffer when it allocates it, and again only when an earlier plan may have used those words as
/// scratch), and the plan's kernels must leave them zero when the plan's last launch finishes.
/// Everything past them holds whatever the previous call left.
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
    /// The launches' entry points, in launch order.
    pub fn entries(&self) -> Vec<&'static str> {
        self.launches.iter().map(|l| l.entry).collect()
    }

    pub fn single(launch: KernelLaunch) -> Self {
        LaunchPlan {
            launches: vec![launch],
            workspace_f32: 0,
            workspace_counters: 0,
            num_splits: 1,
        }
    }
}
