//! From a validated problem and a generation's plan to launched kernels: the parameter block,
//! tensor maps, shared-memory opt-in and error checks, shared by every generation.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, InvalidProblem, Unsupported};
use crate::modes::{AlibiSlopes, KvStorage};
use crate::plan::{Attention, KernelLaunch, LaunchPlan, Swizzle, TensorMapSpec};
use crate::problem::{AttentionProblem, ProblemStrides, TensorStrides};
use crate::tensors::{AttentionTensors, TensorMut, TensorRef};

/// Mirror of `struct AttentionParams` in kernels/common/params.cuh: change both together.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionParams {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: u64,
    pub workspace: u64,
    pub q_batch_stride: i64,
    pub q_head_stride: i64,
    pub q_row_stride: i64,
    pub k_batch_stride: i64,
    pub k_head_stride: i64,
    pub k_row_stride: i64,
    pub v_batch_stride: i64,
    pub v_head_stride: i64,
    pub v_row_stride: i64,
    pub o_batch_stride: i64,
    pub o_head_stride: i64,
    pub o_row_stride: i64,
    pub batch: i32,
    pub heads_q: i32,
    pub heads_kv: i32,
    pub seq_q: i32,
    pub seq_k: i32,
    pub head_dim: i32,
    pub q_heads_per_kv: i32,
    pub causal: i32,
    pub softmax_scale: f32,
    pub scale_log2: f32,
    pub num_splits: i32,
    pub total_q: i32,
    pub cu_seqlens_q: u64,
    pub cu_seqlens_k: u64,
    pub seqused_k: u64,
    pub block_table: u64,
    pub alibi_slopes: u64,
    pub alibi_batch_stride: i32,
    pub window_left: i32,
    pub window_right: i32,
    pub softcap_pre: f32,
    pub softcap_log2: f32,
    pub block_size: i32,
    pub max_blocks_per_seq: i32,
    pub seqlen_new: i32,
    pub block_size_magic: u32,
    pub num_blocks: i32,
}

// The C side is 272 bytes: 11 pointers, 12 i64 strides, 22 4-byte fields.
const _: () = assert!(std::mem::size_of::<AttentionParams>() == 272);

impl AttentionParams {
    /// Everything but the pointers, from the problem.
    pub fn from_problem(p: &AttentionProblem) -> Self {
        let s = p.strides();
        let scale = p.scale();
        AttentionParams {
            q_batch_stride: s.q.batch as i64,
            q_head_stride: s.q.head as i64,
            q_row_stride: s.q.row as i64,
            k_batch_stride: s.k.batch as i64,
            k_head_stride: s.k.head as i64,
            k_row_stride: s.k.row as i64,
            v_batch_stride: s.v.batch as i64,
            v_head_stride: s.v.head as i64,
            v_row_stride: s.v.row as i64,
            o_batch_stride: s.o.batch as i64,
            o_head_stride: s.o.head as i64,
            o_row_stride: s.o.row as i64,
            batch: p.batch as i32,
            heads_q: p.heads_q as i32,
            heads_kv: p.heads_kv as i32,
            seq_q: p.seq_q as i32,
            seq_k: p.seq_k as i32,
            head_dim: p.head_dim as i32,
            q_heads_per_kv: p.q_heads_per_kv() as i32,
            causal: p.causal as i32,
            softmax_scale: scale,
            scale_log2: scale * std::f32::consts::LOG2_E,
            num_splits: 1,
            ..Default::default()
        }
        .with_modes(p)
    }

    /// The mode fields (table pointers are filled in by `run_plan`).
    fn with_modes(mut self, p: &AttentionProblem) -> Self {
        let m = &p.modes;
        let window = |w: Option<usize>| w.map_or(-1, |w| w.min(i32::MAX as usize) as i32);
        self.window_left = window(m.window_left);
        self.window_right = window(m.window_right);
        if let Some(c) = m.softcap {
            self.softcap_pre = p.scale() / c;
            self.softcap_log2 = c * std::f32::consts::LOG2_E;
        }
        self.alibi_batch_stride = match m.alibi {
            Some(AlibiSlopes::PerBatchHead) => p.heads_q as i32,
            _ => 0,
        };
        if let KvStorage::Paged {
            num_blocks,
            block_size,
            max_blocks_per_seq,
        } = m.kv
        {
            self.num_blocks = num_blocks as i32;
            self.block_size = block_size as i32;
            self.block_size_magic = page_divisor_magic(block_size as u32);
            self.max_blocks_per_seq = max_blocks_per_seq as i32;
        }
        self.seqlen_new = m.append.unwrap_or(0) as i32;
        self.total_q = m.packed_q.unwrap_or(0) as i32;
        self
    }
}

/// Blocks for a grid-stride loop over `items` work items on grid.x, which takes up to 2^31 - 1
/// blocks (grid.y and grid.z stop at 65535, the limit other libraries have tripped over).
pub fn linear_grid(items: usize) -> u32 {
    items.clamp(1, i32::MAX as usize) as u32
}

/// Whole tiles of `tile` covering `n`.
pub fn tiles(n: usize, tile: usize) -> usize {
    n.div_ceil(tile)
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
fn prepare(
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

/// The rows `flash_attn_with_kvcache` appends: `[batch, seqlen_new, heads_kv, head_dim]`, dense.
pub struct KvAppend<'a> {
    pub k_new: TensorRef<'a>,
    pub v_new: TensorRef<'a>,
}

/// FlashAttention's `flash_attn_with_kvcache` with new tokens: writes `k_new`/`v_new` into the
/// cache (`tensors.k`/`tensors.v` are the cache, given mutably here) at `seqused_k[b]`, then
/// attends over `seqused_k[b] + seqlen_new` keys, in one call on the device's stream. Everything
/// is checked before the first launch. `seqused_k` is not advanced: the caller does that.
#[allow(clippy::too_many_arguments)]
pub fn forward_with_kvcache(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    q: TensorRef<'_>,
    k_cache: &mut TensorMut<'_>,
    v_cache: &mut TensorMut<'_>,
    new: KvAppend<'_>,
    mut o: TensorMut<'_>,
    mut lse: cudarc::driver::CudaViewMut<'_, f32>,
    tables: crate::tensors::DeviceTables<'_>,
) -> Result<(), Error> {
    let Some(seqlen_new) = problem.modes.append else {
        return Err(InvalidProblem::Mode {
            field: "k_new",
            reason: "the problem appends no rows (set modes.append to seqlen_new)".into(),
        }
        .into());
    };
    let needed = problem.batch * seqlen_new * problem.heads_kv * problem.head_dim;
    for (tensor, t) in [("k_new", &new.k_new), ("v_new", &new.v_new)] {
        if t.data.len() != needed {
            return Err(InvalidProblem::LengthMismatch {
                tensor,
                got: t.data.len(),
                needed,
            }
            .into());
        }
        if t.dtype != problem.dtype {
            return Err(InvalidProblem::DTypeMismatch {
                tensor,
                got: t.dtype,
                expected: problem.dtype,
            }
            .into());
        }
    }
    let stream = device.stream().clone();
    // Every check (the attention call's included) before the first launch.
    let plan = {
        let tensors = kv_tensors(&q, k_cache, v_cache, &mut o, &mut lse, &tables);
        prepare(attention, device, &stream, problem, &tensors)?
    };
    if seqlen_new > 0 && problem.batch > 0 {
        let mut params = AttentionParams::from_problem(problem);
        let _tables = set_table_pointers(&mut params, &tables, &stream);
        // The append writes the caches: their uses are recorded as writes, after the launch.
        let (k, _wk) = k_cache.data.device_ptr_mut(&stream);
        let (v, _wv) = v_cache.data.device_ptr_mut(&stream);
        params.k = k;
        params.v = v;
        let (k_new, _a) = new.k_new.data.device_ptr(&stream);
        let (v_new, _b) = new.v_new.data.device_ptr(&stream);
        let append = KernelLaunch {
            source: "core_append_kv.cu",
            entry: "append_kv",
            defines: vec![],
            grid: (linear_grid(tiles(needed, 256)), 1, 1),
            block: (256, 1, 1),
            dynamic_smem_bytes: 0,
            tensor_maps: None,
            programmatic_launch: false,
        };
        launch_with_args(
            device,
            &stream,
            problem.dtype,
            &append,
            &params,
            &[k_new, v_new],
        )?;
    }
    let mut tensors = AttentionTensors {
        q,
        k: TensorRef {
            data: k_cache.data.as_view(),
            dtype: k_cache.dtype,
        },
        v: TensorRef {
            data: v_cache.data.as_view(),
            dtype: v_cache.dtype,
        },
        o,
        lse,
        tables,
    };
    run_plan_on(device, &stream, problem, &plan, &mut tensors)
}

/// The attention call's tensors of `forward_with_kvcache`, reborrowed for its checks (the
/// caches are then taken mutably for the append).
fn kv_tensors<'s>(
    q: &'s TensorRef<'_>,
    k_cache: &'s TensorMut<'_>,
    v_cache: &'s TensorMut<'_>,
    o: &'s mut TensorMut<'_>,
    lse: &'s mut cudarc::driver::CudaViewMut<'_, f32>,
    tables: &'s crate::tensors::DeviceTables<'_>,
) -> AttentionTensors<'s> {
    let view = |t: &'s TensorMut<'_>| TensorRef {
        data: t.data.as_view(),
        dtype: t.dtype,
    };
    let table = |t: &'s Option<cudarc::driver::CudaView<'_, i32>>| t.as_ref().map(|v| v.slice(..));
    AttentionTensors {
        q: TensorRef {
            data: q.data.slice(..),
            dtype: q.dtype,
        },
        k: view(k_cache),
        v: view(v_cache),
        o: TensorMut {
            data: o.data.slice_mut(..),
            dtype: o.dtype,
        },
        lse: lse.slice_mut(..),
        tables: crate::tensors::DeviceTables {
            cu_seqlens_q: table(&tables.cu_seqlens_q),
            cu_seqlens_k: table(&tables.cu_seqlens_k),
            seqused_k: table(&tables.seqused_k),
            block_table: table(&tables.block_table),
            alibi_slopes: tables.alibi_slopes.as_ref().map(|v| v.slice(..)),
        },
    }
}

/// The tensors' and tables' device addresses into the parameter block. The returned guards
/// record each tensor's use on `stream` (cudarc's read/write events, which order other streams
/// behind this call) when dropped: hold them until the plan's last launch is queued.
fn set_pointers<'s>(
    params: &mut AttentionParams,
    t: &'s mut AttentionTensors<'_>,
    stream: &'s CudaStream,
) -> Vec<SyncOnDrop<'s>> {
    let mut guards = Vec::with_capacity(10);
    let mut keep = |(ptr, guard): (u64, SyncOnDrop<'s>)| {
        guards.push(guard);
        ptr
    };
    params.q = keep(t.q.data.device_ptr(stream));
    params.k = keep(t.k.data.device_ptr(stream));
    params.v = keep(t.v.data.device_ptr(stream));
    params.o = keep(t.o.data.device_ptr_mut(stream));
    params.lse = keep(t.lse.device_ptr_mut(stream));
    guards.extend(set_table_pointers(params, &t.tables, stream));
    guards
}

/// The tables' device addresses into the parameter block (0 for a table the problem lacks), with
/// their guards (see [`set_pointers`]).
fn set_table_pointers<'s>(
    params: &mut AttentionParams,
    tb: &'s crate::tensors::DeviceTables<'_>,
    stream: &'s CudaStream,
) -> Vec<SyncOnDrop<'s>> {
    let mut guards = Vec::with_capacity(5);
    let mut ptr = |v: &'s Option<cudarc::driver::CudaView<'_, i32>>| match v {
        Some(v) => {
            let (p, g) = v.device_ptr(stream);
            guards.push(g);
            p
        }
        None => 0,
    };
    params.cu_seqlens_q = ptr(&tb.cu_seqlens_q);
    params.cu_seqlens_k = ptr(&tb.cu_seqlens_k);
    params.seqused_k = ptr(&tb.seqused_k);
    params.block_table = ptr(&tb.block_table);
    if let Some(v) = &tb.alibi_slopes {
        let (p, g) = v.device_ptr(stream);
        guards.push(g);
        params.alibi_slopes = p;
    }
    guards
}

fn check_pointer_alignment(
    kernel: &'static str,
    alignment_elems: usize,
    t: &AttentionTensors<'_>,
    stream: &cudarc::driver::CudaStream,
) -> Result<(), Unsupported> {
    let bytes = (alignment_elems * 2) as u64;
    if bytes <= 2 {
        return Ok(());
    }
    let ptrs = [
        ("q", t.q.data.device_ptr(stream).0),
        ("k", t.k.data.device_ptr(stream).0),
        ("v", t.v.data.device_ptr(stream).0),
        ("o", t.o.data.device_ptr(stream).0),
    ];
    for (name, ptr) in ptrs {
        if ptr % bytes != 0 {
            return Err(Unsupported::new(
                kernel,
                format!("{name} base address {ptr:#x} is not {bytes}-byte aligned"),
            ));
        }
    }
    Ok(())
}

/// Launches a plan on already-validated tensors, on the device's stream.
pub fn run_plan(
    device: &Device,
    problem: &AttentionProblem,
    plan: &LaunchPlan,
    t: &mut AttentionTensors<'_>,
) -> Result<(), Error> {
    run_plan_on(device, device.stream(), problem, plan, t)
}

/// Launches a plan on already-validated tensors, on `stream` (of the device's context), with
/// that stream's workspace. Queues work only: no host synchronisation.
pub fn run_plan_on(
    device: &Device,
    stream: &Arc<CudaStream>,
    problem: &AttentionProblem,
    plan: &LaunchPlan,
    t: &mut AttentionTensors<'_>,
) -> Result<(), Error> {
    device.check_stream(stream)?;
    if problem.is_empty_output() {
        return Ok(());
    }
    let mut params = AttentionParams::from_problem(problem);
    // Dropped (recording the tensors' use on `stream`) after the last launch below is queued.
    let _uses = set_pointers(&mut params, t, stream);
    params.num_splits = plan.num_splits.max(1) as i32;

    if problem.modes.packed_q == Some(0) {
        return Ok(()); // every sequence is empty: nothing to write
    }
    if problem.seq_k == 0 || problem.k_len() == 0 {
        // No keys: one defined answer for every generation (O = 0, LSE = +inf).
        let fill = KernelLaunch {
            source: "core_fill.cu",
            entry: "fill_no_keys",
            defines: vec![],
            grid: (linear_grid(tiles(problem.lse_len(), 8)), 1, 1),
            block: (32, 8, 1),
            dynamic_smem_bytes: 0,
            tensor_maps: None,
            programmatic_launch: false,
        };
        return launch_one(device, stream, problem.dtype, &fill, &params, None);
    }

    device.with_workspace(stream, plan.workspace_f32, plan.workspace_counters, |ws| {
        params.workspace = ws;
        for launch in &plan.launches {
            let maps = match &launch.tensor_maps {
                Some(spec) => Some(encode_tensor_maps(problem, &params, spec)?),
                None => None,
            };
            launch_one(
                device,
                stream,
                problem.dtype,
                launch,
                &params,
                maps.as_ref(),
            )?;
        }
        Ok(())
    })
}

/// A core kernel that takes device pointers after the parameter block (e.g. `append_kv`).
fn launch_with_args(
    device: &Device,
    stream: &CudaStream,
    dtype: DType,
    launch: &KernelLaunch,
    params: &AttentionParams,
    extra: &[u64],
) -> Result<(), Error> {
    let function = device.function(
        launch.source,
        launch.entry,
        dtype,
        &launch.defines,
        launch.dynamic_smem_bytes,
    )?;
    let mut args: Vec<*mut c_void> = vec![params as *const AttentionParams as *mut c_void];
    for p in extra {
        args.push(p as *const u64 as *mut c_void);
    }
    launch_raw(device, stream, launch, &function, &mut args)
}

fn launch_one(
    device: &Device,
    stream: &CudaStream,
    dtype: DType,
    launch: &KernelLaunch,
    params: &AttentionParams,
    maps: Option<&[sys::CUtensorMap; 3]>,
) -> Result<(), Error> {
    let function = device.function(
        launch.source,
        launch.entry,
        dtype,
        &launch.defines,
        launch.dynamic_smem_bytes,
    )?;
    let mut args: Vec<*mut c_void> = vec![params as *const AttentionParams as *mut c_void];
    if let Some(maps) = maps {
        for m in maps.iter() {
            args.push(m as *const sys::CUtensorMap as *mut c_void);
        }
    }
    launch_raw(device, stream, launch, &function, &mut args)
}

pub(crate) fn launch_raw(
    device: &Device,
    stream: &CudaStream,
    launch: &KernelLaunch,
    function: &cudarc::driver::CudaFunction,
    args: &mut [*mut c_void],
) -> Result<(), Error> {
    device
        .context()
        .bind_to_thread()
        .map_err(|e| Error::cuda("binding the context", e))?;
    // SAFETY: `args` points at live values whose layout matches the kernel's parameter list
    // (AttentionParams mirrors params.cuh; tensor maps are the driver's own type), and every
    // pointer inside `params` was taken from a view that outlives this call's queued work
    // (the views' SyncOnDrop guards, held by run_plan_on until its last launch is queued,
    // record the stream's use).
    unsafe {
        if launch.programmatic_launch {
            launch_programmatic(function.cu_function(), launch, stream.cu_stream(), args)
        } else {
            cudarc::driver::result::launch_kernel(
                function.cu_function(),
                launch.grid,
                launch.block,
                launch.dynamic_smem_bytes,
                stream.cu_stream(),
                args,
            )
        }
    }
    .map_err(|e| {
        Error::cuda(
            format!(
                "launching {} grid={:?} block={:?} smem={}",
                launch.entry, launch.grid, launch.block, launch.dynamic_smem_bytes
            ),
            e,
        )
    })
}

/// `cuLaunchKernelEx` with programmatic stream serialization allowed: the kernel may begin
/// before the stream's previous kernel has completed (it waits in-kernel, `griddepcontrol.wait`,
/// before touching global memory; `KernelLaunch::programmatic_launch`).
///
/// # Safety
/// As `cudarc::driver::result::launch_kernel`: `args` must match the kernel's parameters.
unsafe fn launch_programmatic(
    f: sys::CUfunction,
    launch: &KernelLaunch,
    stream: sys::CUstream,
    args: &mut [*mut c_void],
) -> Result<(), cudarc::driver::DriverError> {
    let mut value: sys::CUlaunchAttributeValue = std::mem::zeroed();
    value.programmaticStreamSerializationAllowed = 1;
    let mut attribute = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let config = sys::CUlaunchConfig {
        gridDimX: launch.grid.0,
        gridDimY: launch.grid.1,
        gridDimZ: launch.grid.2,
        blockDimX: launch.block.0,
        blockDimY: launch.block.1,
        blockDimZ: launch.block.2,
        sharedMemBytes: launch.dynamic_smem_bytes,
        hStream: stream,
        attrs: &mut attribute,
        numAttrs: 1,
    };
    sys::cuLaunchKernelEx(&config, f, args.as_mut_ptr(), std::ptr::null_mut()).result()
}

/// Q, K and V tensor maps for the Hopper bulk-copy path (see `TensorMapSpec`); `params` holds
/// the tensors' device addresses.
pub fn encode_tensor_maps(
    p: &AttentionProblem,
    params: &AttentionParams,
    spec: &TensorMapSpec,
) -> Result<[sys::CUtensorMap; 3], Error> {
    let s: ProblemStrides = p.strides();
    // A paged cache is loaded in groups of rows that never straddle a page: the largest power
    // of two dividing both the block size and the tile (the kernel computes the same).
    let kv_box_rows = match p.modes.kv {
        crate::modes::KvStorage::Paged { block_size, .. } => {
            paged_box_rows(block_size as u32, spec.kv_box_rows)
        }
        _ => spec.kv_box_rows,
    };
    let q = MapTarget {
        name: "q",
        ptr: params.q,
        strides: s.q,
        heads: p.heads_q,
        storage: p.q_storage(),
        box_rows: spec.q_box_rows,
    };
    Ok([
        encode_tensor_map(p, spec, &q)?,
        encode_tensor_map(
            p,
            spec,
            &MapTarget {
                name: "k",
                ptr: params.k,
                strides: s.k,
                heads: p.heads_kv,
                storage: p.kv_storage(),
                box_rows: kv_box_rows,
            },
        )?,
        encode_tensor_map(
            p,
            spec,
            &MapTarget {
                name: "v",
                ptr: params.v,
                strides: s.v,
                heads: p.heads_kv,
                storage: p.kv_storage(),
                box_rows: kv_box_rows,
            },
        )?,
    ])
}

/// One tensor a map views: its address, strides, heads and storage `(batch, seq)` (packed
/// tensors are one "batch" of total rows; a paged cache's batch axis is the block), and the
/// rows of one box.
pub struct MapTarget {
    pub name: &'static str,
    pub ptr: u64,
    pub strides: TensorStrides,
    pub heads: usize,
    pub storage: (usize, usize),
    pub box_rows: u32,
}

/// The tensor map of one tensor, viewed as 4-D (head_dim, seq, heads, batch) with its strides;
/// a box is `spec.box_cols` elements of head_dim by `t.box_rows` rows, one head, one batch.
pub fn encode_tensor_map(
    p: &AttentionProblem,
    spec: &TensorMapSpec,
    t: &MapTarget,
) -> Result<sys::CUtensorMap, Error> {
    let dtype = match p.dtype {
        DType::F16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::Bf16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
    };
    let swizzle = match spec.swizzle {
        Swizzle::None => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
        Swizzle::B32 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        Swizzle::B64 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        Swizzle::B128 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    let (batch, seq) = t.storage;
    let st = t.strides;
    // A size-1 axis gets a stride past the others: the encoder wants a nonzero multiple of 16
    // bytes even where no coordinate ever steps along it.
    let dims: [u64; 4] = [
        p.head_dim as u64,
        seq.max(1) as u64,
        t.heads as u64,
        batch.max(1) as u64,
    ];
    let span = (seq.max(1) * st.row).max(t.heads * st.head) as u64 * 2;
    let batch_stride = if batch <= 1 {
        span
    } else {
        st.batch as u64 * 2
    };
    let strides: [u64; 3] = [st.row as u64 * 2, st.head as u64 * 2, batch_stride];
    let boxes: [u32; 4] = [spec.box_cols, t.box_rows, 1, 1];
    let elem_strides: [u32; 4] = [1, 1, 1, 1];
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: all arrays have the rank's length; the driver validates the values and answers
    // with an error code rather than faulting.
    let rc = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            dtype,
            4,
            t.ptr as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            elem_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(Error::Cuda {
            context: format!(
                "cuTensorMapEncodeTiled for {} (dims {dims:?}, byte strides {strides:?}, box {boxes:?})",
                t.name
            ),
            message: format!("{rc:?}"),
        });
    }
    // SAFETY: initialised by the successful call above.
    Ok(unsafe { map.assume_init() })
}

/// `ceil(2^31 / (block_size / 16))`: the kernels' `page_row` (kv_rows.cuh) takes key row j's
/// block-table slot as `umulhi(2 (j >> 4), magic)` instead of dividing by the block size. Exact
/// for every non-negative i32 j when block_size is a multiple of 16 in 16..=256 (validation's
/// rule): with d = block_size / 16 and magic = (2^31 + e) / d, e < d, the result is
/// floor(x / d + x e / (d 2^31)) for x = j >> 4 < 2^27, and x e < 2^31 keeps it floor(x / d).
pub fn page_divisor_magic(block_size: u32) -> u32 {
    let d = u64::from((block_size / 16).max(1));
    (1u64 << 31).div_ceil(d) as u32
}

/// Rows per TMA box of a paged K/V tile: the largest power of two that divides both the block
/// size and the tile's rows (block sizes are multiples of 16, so at least 16 for power-of-two
/// tiles). Mirrors `paged_box_rows` in gen5_persistent_hopper.cu.
pub fn paged_box_rows(block_size: u32, tile_rows: u32) -> u32 {
    let mut rows = tile_rows & tile_rows.wrapping_neg(); // largest power of two dividing the tile
    while rows > 1 && !block_size.is_multiple_of(rows) {
        rows /= 2;
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The device's page_row (kv_rows.cuh), on the host.
    fn page_slot(j: u32, magic: u32) -> u32 {
        ((u64::from((j >> 4) << 1) * u64::from(magic)) >> 32) as u32
    }

    #[test]
    fn page_divisor_magic_divides_every_row_index_exactly() {
        // Every legal block size; the key rows where the error term is largest (the top of the i32
        // range, and the last row of each page) plus a stride through the rest.
        for block_size in (16..=256u32).step_by(16) {
            let magic = page_divisor_magic(block_size);
            let top = i32::MAX as u32;
            let edges = (0..4096u32).chain(top - 4096..=top);
            let pages = (1..=(top / block_size))
                .step_by(9973)
                .flat_map(|s| [s * block_size - 1, s * block_size]);
            for j in edges.chain(pages).chain((0..top).step_by(1_000_003)) {
                assert_eq!(
                    page_slot(j, magic),
                    j / block_size,
                    "block_size {block_size}, j {j}"
                );
            }
        }
    }

    #[test]
    fn page_divisor_magic_fails_for_an_unchecked_divisor() {
        // The bound is tight enough to matter: the same formula with 2^30 instead of 2^31 is off
        // somewhere in range, so the test above can tell a wrong magic from a right one.
        let block_size = 16 * 15;
        let magic = (1u64 << 30).div_ceil(15);
        let wrong = (0..i32::MAX as u32)
            .step_by(997)
            .any(|j| ((u64::from((j >> 4) << 2) * magic) >> 32) as u32 != j / block_size);
        assert!(wrong);
    }

    #[test]
    fn paged_params_carry_the_pool_size() {
        // The decode kernel bounds-checks block-table entries it reads before
        // griddepcontrol.wait against num_blocks: a paged problem sets it, others leave it 0.
        let paged = AttentionProblem::new(2, 8, 1, 128)
            .with_kv(2, 256)
            .with_modes(crate::modes::Modes {
                kv: KvStorage::Paged {
                    num_blocks: 9,
                    block_size: 64,
                    max_blocks_per_seq: 4,
                },
                seqused_k: true,
                ..crate::modes::Modes::default()
            });
        let p = AttentionParams::from_problem(&paged);
        assert_eq!(
            (p.num_blocks, p.block_size, p.max_blocks_per_seq),
            (9, 64, 4)
        );
        let dense = AttentionParams::from_problem(&AttentionProblem::new(2, 8, 1, 128));
        assert_eq!((dense.num_blocks, dense.block_size), (0, 0));
    }
}
