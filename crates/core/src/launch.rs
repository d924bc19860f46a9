//! From a validated problem and a generation's plan to launched kernels: the parameter block,
//! tensor maps, shared-memory opt-in and error checks, shared by every generation.

use std::ffi::c_void;

use cudarc::driver::sys;
use cudarc::driver::{DevicePtr, DevicePtrMut};

use crate::device::Device;
use crate::error::{Error, Unsupported};
use crate::plan::{Attention, KernelLaunch, LaunchPlan, Swizzle, TensorMapSpec};
use crate::problem::{AttentionProblem, DType, ProblemStrides, TensorStrides};
use crate::tensors::AttentionTensors;

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
    pub reserved: i32,
}

// The C side is 192 bytes: 6 pointers, 12 i64 strides, 12 4-byte fields.
const _: () = assert!(std::mem::size_of::<AttentionParams>() == 192);

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

/// Validates, plans and launches `attention` on `tensors`. Asynchronous: returns once the
/// launches are queued (call `Device::synchronize` to surface faults).
pub fn forward(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    tensors: &mut AttentionTensors<'_>,
) -> Result<(), Error> {
    problem.validate()?;
    tensors.check(problem)?;
    let caps = attention.capabilities();
    caps.check(attention.name(), problem, device.info())?;
    let plan = attention.plan(problem, device.info())?;
    check_pointer_alignment(
        attention.name(),
        caps.alignment_elems,
        tensors,
        device.stream(),
    )?;
    run_plan(device, problem, &plan, tensors)
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

/// Launches a plan on already-validated tensors.
pub fn run_plan(
    device: &Device,
    problem: &AttentionProblem,
    plan: &LaunchPlan,
    t: &mut AttentionTensors<'_>,
) -> Result<(), Error> {
    if problem.is_empty_output() {
        return Ok(());
    }
    let stream = device.stream().clone();
    let mut params = AttentionParams::from_problem(problem);
    let (q, _sq) = t.q.data.device_ptr(&stream);
    let (k, _sk) = t.k.data.device_ptr(&stream);
    let (v, _sv) = t.v.data.device_ptr(&stream);
    let (o, _so) = t.o.data.device_ptr_mut(&stream);
    let (lse, _sl) = t.lse.device_ptr_mut(&stream);
    params.q = q;
    params.k = k;
    params.v = v;
    params.o = o;
    params.lse = lse;
    params.num_splits = plan.num_splits.max(1) as i32;

    if problem.seq_k == 0 {
        // No keys: one defined answer for every generation (O = 0, LSE = +inf).
        let fill = KernelLaunch {
            source: "core_fill.cu",
            entry: "fill_no_keys",
            defines: vec![],
            grid: (linear_grid(tiles(problem.lse_len(), 8)), 1, 1),
            block: (32, 8, 1),
            dynamic_smem_bytes: 0,
            tensor_maps: None,
        };
        return launch_one(device, problem.dtype, &fill, &params, None);
    }

    device.with_workspace(plan.workspace_f32, plan.workspace_counters, |ws| {
        params.workspace = ws;
        for launch in &plan.launches {
            let maps = match &launch.tensor_maps {
                Some(spec) => Some(encode_tensor_maps(problem, &params, spec)?),
                None => None,
            };
            launch_one(device, problem.dtype, launch, &params, maps.as_ref())?;
        }
        Ok(())
    })
}

fn launch_one(
    device: &Device,
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
    device
        .context()
        .bind_to_thread()
        .map_err(|e| Error::cuda("binding the context", e))?;
    // SAFETY: `args` points at live values whose layout matches the kernel's parameter list
    // (AttentionParams mirrors params.cuh; tensor maps are the driver's own type), and every
    // pointer inside `params` was taken from a view that outlives this call's queued work
    // (the views' SyncOnDrop guards in run_plan record the stream's use).
    unsafe {
        cudarc::driver::result::launch_kernel(
            function.cu_function(),
            launch.grid,
            launch.block,
            launch.dynamic_smem_bytes,
            device.stream().cu_stream(),
            &mut args,
        )
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

/// Q, K and V tensor maps for the Hopper bulk-copy path (see `TensorMapSpec`); `params` holds
/// the tensors' device addresses.
pub fn encode_tensor_maps(
    p: &AttentionProblem,
    params: &AttentionParams,
    spec: &TensorMapSpec,
) -> Result<[sys::CUtensorMap; 3], Error> {
    let s: ProblemStrides = p.strides();
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
    let one = |name: &str, ptr: u64, st: TensorStrides, heads: usize, seq: usize, rows: u32| {
        let dims: [u64; 4] = [p.head_dim as u64, seq as u64, heads as u64, p.batch as u64];
        let strides: [u64; 3] = [st.row as u64 * 2, st.head as u64 * 2, st.batch as u64 * 2];
        let boxes: [u32; 4] = [spec.box_cols, rows, 1, 1];
        let elem_strides: [u32; 4] = [1, 1, 1, 1];
        let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
        // SAFETY: all arrays have the rank's length; the driver validates the values and
        // answers with an error code rather than faulting.
        let rc = unsafe {
            sys::cuTensorMapEncodeTiled(
                map.as_mut_ptr(),
                dtype,
                4,
                ptr as *mut c_void,
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
                    "cuTensorMapEncodeTiled for {name} (dims {dims:?}, byte strides {strides:?}, box {boxes:?})"
                ),
                message: format!("{rc:?}"),
            });
        }
        // SAFETY: initialised by the successful call above.
        Ok(unsafe { map.assume_init() })
    };
    Ok([
        one("q", params.q, s.q, p.heads_q, p.seq_q, spec.q_box_rows)?,
        one("k", params.k, s.k, p.heads_kv, p.seq_k, spec.kv_box_rows)?,
        one("v", params.v, s.v, p.heads_kv, p.seq_k, spec.kv_box_rows)?,
    ])
}
