//! Queues a checked plan's kernels: the parameter block's pointers, the no-keys fill, the
//! stream's workspace, tensor maps and the launch calls themselves. Knows nothing of the
//! `Attention` trait: `plan.rs` checks a call and plans it before anything here runs.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{CudaFunction, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Unsupported};
use crate::launch_plan::{linear_grid, tiles, KernelLaunch, LaunchPlan};
use crate::params::AttentionParams;
use crate::problem::AttentionProblem;
use crate::tensor_map::encode_tensor_maps;
use crate::tensors::{AttentionTensors, DeviceTables, KvAppend, KvCacheMut, KvRef, TensorRef};

/// Writes `new.k_new`/`new.v_new` into the caches at `seqused_k[b]` (`core_append_kv.cu`):
/// copied into 16-bit caches, converted into e4m3 ones (`Modes::kv_fp8`) with the descale
/// tables' pointers from `tables`. The caller has checked their lengths and dtypes, and for e4m3
/// the device's architecture and an even head dim.
pub(crate) fn append_kv(
    device: &Device,
    stream: &CudaStream,
    problem: &AttentionProblem,
    tables: &DeviceTables<'_>,
    k_cache: &mut dyn KvCacheMut,
    v_cache: &mut dyn KvCacheMut,
    new: &KvAppend<'_>,
) -> Result<(), Error> {
    let mut params = AttentionParams::from_problem(problem);
    let mut table_uses = Guards::default();
    set_table_pointers(&mut params, tables, stream, &mut table_uses);
    // The append writes the caches: their uses are recorded as writes, after the launch.
    let (k, _wk) = k_cache.device_ptr_mut(stream);
    let (v, _wv) = v_cache.device_ptr_mut(stream);
    params.k = k;
    params.v = v;
    let (k_new, _a) = new.k_new.data.device_ptr(stream);
    let (v_new, _b) = new.v_new.data.device_ptr(stream);
    let elements = new.k_new.data.len();
    let append = match problem.modes.kv_fp8 {
        // One thread per pair of columns: the conversion packs two bytes.
        Some(_) => {
            KernelLaunch::per_thread("core_append_kv.cu", "append_kv_e4m3", elements / 2, 256)
        }
        None => KernelLaunch::per_thread("core_append_kv.cu", "append_kv", elements, 256),
    };
    let pointers = [k_new, v_new];
    let extra = pointers.each_ref().map(|p| p as *const u64 as *mut c_void);
    launch_with(device, stream, problem.dtype, &append, &params, &extra)
}

/// The guards of the device addresses one call hands its kernels: each records its tensor's use
/// on the stream (cudarc's read/write events, which order other streams behind this call) when
/// dropped, so hold them until the plan's last launch is queued.
#[derive(Default)]
pub(crate) struct Guards<'s>(Vec<SyncOnDrop<'s>>);

impl<'s> Guards<'s> {
    /// The address of a `device_ptr` or `device_ptr_mut` call, its guard kept.
    pub(crate) fn keep(&mut self, (ptr, guard): (u64, SyncOnDrop<'s>)) -> u64 {
        self.0.push(guard);
        ptr
    }

    /// Q, K and V's addresses into the parameter block, for the backward (whose K and V are
    /// always 16-bit).
    pub(crate) fn set_qkv(
        &mut self,
        params: &mut AttentionParams,
        [q, k, v]: [&'s TensorRef<'_>; 3],
        stream: &'s CudaStream,
    ) {
        params.q = self.keep(q.data.device_ptr(stream));
        params.k = self.keep(k.data.device_ptr(stream));
        params.v = self.keep(v.data.device_ptr(stream));
    }
}

/// The tensors' and tables' device addresses into the parameter block, with their guards.
fn set_pointers<'s>(
    params: &mut AttentionParams,
    t: &'s mut AttentionTensors<'_>,
    stream: &'s CudaStream,
) -> Guards<'s> {
    let mut guards = Guards::default();
    // 16-bit elements or e4m3 bytes alike: the kernel knows which from the problem's modes.
    params.q = guards.keep(t.q.device_ptr(stream));
    params.k = guards.keep(t.k.device_ptr(stream));
    params.v = guards.keep(t.v.device_ptr(stream));
    params.o = guards.keep(t.o.data.device_ptr_mut(stream));
    params.lse = guards.keep(t.lse.device_ptr_mut(stream));
    set_table_pointers(params, &t.tables, stream, &mut guards);
    guards
}

/// The tables' device addresses into the parameter block (0 for a table the problem lacks), their
/// guards into `guards`.
pub(crate) fn set_table_pointers<'s>(
    params: &mut AttentionParams,
    tb: &'s DeviceTables<'_>,
    stream: &'s CudaStream,
    guards: &mut Guards<'s>,
) {
    let mut ptr = |v: &'s Option<cudarc::driver::CudaView<'_, i32>>| {
        v.as_ref().map_or(0, |v| guards.keep(v.device_ptr(stream)))
    };
    params.cu_seqlens_q = ptr(&tb.cu_seqlens_q);
    params.cu_seqlens_k = ptr(&tb.cu_seqlens_k);
    params.seqused_k = ptr(&tb.seqused_k);
    params.block_table = ptr(&tb.block_table);
    params.mm_prefix_ranges = ptr(&tb.mm_prefix_ranges);
    let mut ptr_f32 = |v: &'s Option<cudarc::driver::CudaView<'_, f32>>| {
        v.as_ref().map_or(0, |v| guards.keep(v.device_ptr(stream)))
    };
    params.alibi_slopes = ptr_f32(&tb.alibi_slopes);
    params.k_descale = ptr_f32(&tb.k_descale);
    params.v_descale = ptr_f32(&tb.v_descale);
    params.q_descale = ptr_f32(&tb.q_descale);
}

/// Q's, K's, V's and O's base addresses against the kernel's alignment; e4m3 Q, K and V
/// (`Modes::q_fp8`, `Modes::kv_fp8`) on 16 bytes whatever the kernel's element alignment, since
/// every kernel that reads them copies 16 bytes at a time.
pub(crate) fn check_pointer_alignment(
    kernel: &'static str,
    alignment_elems: usize,
    t: &AttentionTensors<'_>,
    stream: &cudarc::driver::CudaStream,
) -> Result<(), Unsupported> {
    let input = |name: &'static str, t: &KvRef<'_>| match t {
        KvRef::Half(h) => check_aligned(kernel, alignment_elems, || {
            [(name, h.data.device_ptr(stream).0)]
        }),
        KvRef::E4m3(b) => check_aligned_bytes(
            kernel,
            crate::modes::KV_FP8_ALIGN_BYTES as u64,
            [(name, b.device_ptr(stream).0)],
        ),
    };
    input("q", &t.q)?;
    check_aligned(kernel, alignment_elems, || {
        [("o", t.o.data.device_ptr(stream).0)]
    })?;
    input("k", &t.k)?;
    input("v", &t.v)
}

/// Every (name, base address) that `ptrs` gives on a multiple of `alignment_elems` 16-bit
/// elements; `ptrs` is not asked where any address will do.
pub(crate) fn check_aligned<const N: usize>(
    kernel: &'static str,
    alignment_elems: usize,
    ptrs: impl FnOnce() -> [(&'static str, u64); N],
) -> Result<(), Unsupported> {
    let bytes = (alignment_elems * 2) as u64;
    if bytes <= 2 {
        return Ok(());
    }
    check_aligned_bytes(kernel, bytes, ptrs())
}

/// Every (name, base address) of `ptrs` on a multiple of `bytes`.
fn check_aligned_bytes<const N: usize>(
    kernel: &'static str,
    bytes: u64,
    ptrs: [(&'static str, u64); N],
) -> Result<(), Unsupported> {
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
    run_launches(device, stream, problem, plan, None, t)
}

/// [`run_plan_on`] with the plan's functions already looked up (`functions[i]` is launch `i`'s,
/// its defines including the problem's mode defines), or looked up here (`None`).
pub(crate) fn run_launches(
    device: &Device,
    stream: &Arc<CudaStream>,
    problem: &AttentionProblem,
    plan: &LaunchPlan,
    functions: Option<&[CudaFunction]>,
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
        params.head_dim = problem.head_dim_v() as i32; // the fill writes O's rows
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
        return launch_with(device, stream, problem.dtype, &fill, &params, &[]);
    }

    device.with_workspace(stream, plan.workspace_f32, plan.workspace_counters, |ws| {
        params.workspace = ws;
        for (i, launch) in plan.launches.iter().enumerate() {
            let maps = match &launch.tensor_maps {
                Some(spec) => Some(encode_tensor_maps(problem, &params, spec)?),
                None => None,
            };
            // Tensor maps go after the parameter block, as `__grid_constant__` arguments.
            let extra: Vec<*mut c_void> = maps
                .iter()
                .flatten()
                .map(|m| m as *const sys::CUtensorMap as *mut c_void)
                .collect();
            match functions {
                Some(f) => launch_function(device, stream, launch, &f[i], &params, &extra)?,
                None => {
                    let launch = &launch.with_defines(problem.modes.build_defines());
                    launch_with(device, stream, problem.dtype, launch, &params, &extra)?
                }
            }
        }
        Ok(())
    })
}

/// Launches `launch` with the parameter block as its first argument and `extra` after it
/// (tensor maps, or device pointers of a core kernel such as `append_kv`), each pointing at a
/// value that outlives the call.
pub(crate) fn launch_with(
    device: &Device,
    stream: &CudaStream,
    dtype: DType,
    launch: &KernelLaunch,
    params: &AttentionParams,
    extra: &[*mut c_void],
) -> Result<(), Error> {
    let function = device.function(
        launch.source,
        launch.entry,
        dtype,
        &launch.defines,
        launch.dynamic_smem_bytes,
    )?;
    launch_function(device, stream, launch, &function, params, extra)
}

/// [`launch_with`] on the launch's function, already looked up.
fn launch_function(
    device: &Device,
    stream: &CudaStream,
    launch: &KernelLaunch,
    function: &CudaFunction,
    params: &AttentionParams,
    extra: &[*mut c_void],
) -> Result<(), Error> {
    let mut args: Vec<*mut c_void> = vec![params as *const AttentionParams as *mut c_void];
    args.extend_from_slice(extra);
    launch_raw(device, stream, launch, function, &mut args)
}

pub(crate) fn launch_raw(
    device: &Device,
    stream: &CudaStream,
    launch: &KernelLaunch,
    function: &CudaFunction,
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
