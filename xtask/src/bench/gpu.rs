//! The GPU side of `bench-all`: input sets on the device, CUDA-event timing of back-to-back
//! `flashcore::launch::forward` calls, CUDA-graph replays and the cuBLAS GEMM reference rate
//! (the decode suite's bandwidth references are `bandwidth.rs`).
//!
//! Why the graph is built node by node instead of by stream capture: `Device` launches on the
//! context's legacy default stream, and a CUDA stream capture cannot run on (or alongside work
//! queued to) that stream. So the graph is assembled here from the same plan, function handles
//! and parameter block that `launch::run_plan` uses, and its output is judged by the oracle
//! again before it is timed, so a graph that differs from `forward` cannot report a number.

use std::ffi::c_void;

use anyhow::{anyhow, bail, Context, Result};
use flashcore::cudarc::driver::{
    sys, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DriverError,
};
use flashcore::launch::AttentionParams;
use flashcore::toolkit::{find_lib, lib_dirs};
use flashcore::{
    Attention, AttentionProblem, AttentionTensors, DType, Device, DeviceTables, KvRef, LaunchPlan,
    TensorMut, TensorRef,
};

pub(super) fn cu<T>(r: std::result::Result<T, DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| anyhow!("CUDA error in {what}: {e:?}"))
}

/// Back-to-back calls that make one sample last at least `target_ms` (the peer script's rule).
pub fn calls_for(us_per_call: f64, target_ms: f64) -> u64 {
    ((target_ms * 1e3 / us_per_call.max(1e-3)).ceil() as u64).clamp(1, 100_000)
}

/// How many input sets to rotate: enough that the bytes one pass touches (Q, K, V read and O
/// written, `set_bytes` per set) exceed twice the L2, as the peer script does
/// (`max(2, ceil(2·L2 / set_bytes) + 1)`), but within a quarter of the free memory
/// (`alloc_bytes` per set) and at most `cap`.
pub fn sets_needed(
    set_bytes: usize,
    alloc_bytes: usize,
    l2_bytes: usize,
    free_bytes: usize,
    cap: usize,
) -> usize {
    let want = (2 * l2_bytes).div_ceil(set_bytes.max(1)) + 1;
    let want = want.max(2);
    let fit = (free_bytes / 4 / alloc_bytes.max(1)).max(1);
    want.min(fit).min(cap).max(1)
}

/// [`sets_needed`] with this device's L2 and free memory.
pub fn sets_on(device: &Device, set_bytes: usize, alloc_bytes: usize, cap: usize) -> Result<usize> {
    let (free, _) = device.memory().map_err(|e| anyhow!("{e}"))?;
    Ok(sets_needed(
        set_bytes,
        alloc_bytes,
        device.info().l2_bytes as usize,
        free,
        cap,
    ))
}

/// The most input sets a bench rotates: 2 with `--quick`, else 1000.
pub fn max_sets(quick: bool) -> usize {
    if quick {
        2
    } else {
        1000
    }
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A pair of timing events on the device's stream.
pub struct Timer {
    start: CudaEvent,
    end: CudaEvent,
}

impl Timer {
    pub fn new(device: &Device) -> Result<Timer> {
        let ev = || {
            cu(
                device
                    .context()
                    .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)),
                "creating a timing event",
            )
        };
        Ok(Timer {
            start: ev()?,
            end: ev()?,
        })
    }

    /// GPU milliseconds between the start of the work `f` queues and its end.
    pub fn time_ms(&self, device: &Device, f: impl FnOnce() -> Result<()>) -> Result<f64> {
        cu(self.start.record(device.stream()), "recording an event")?;
        f()?;
        cu(self.end.record(device.stream()), "recording an event")?;
        Ok(cu(self.start.elapsed_ms(&self.end), "reading an event time")? as f64)
    }
}

/// One input set: Q, K, V, and the outputs a call writes.
pub struct Set {
    pub(crate) q: CudaSlice<u16>,
    pub(crate) k: KvSlice,
    pub(crate) v: KvSlice,
    pub(crate) o: CudaSlice<u16>,
    pub(crate) lse: CudaSlice<f32>,
}

/// K or V of an input set: the problem's 16-bit elements, or e4m3 bytes (`Modes::kv_fp8`).
pub enum KvSlice {
    Half(CudaSlice<u16>),
    E4m3(CudaSlice<u8>),
}

impl KvSlice {
    /// The 16-bit elements (the backward's K and V, which are never e4m3).
    pub(crate) fn half(&self) -> &CudaSlice<u16> {
        match self {
            KvSlice::Half(h) => h,
            KvSlice::E4m3(_) => panic!("16-bit K/V expected, the input set holds e4m3 bytes"),
        }
    }

    fn view(&self, dtype: DType) -> KvRef<'_> {
        match self {
            KvSlice::Half(h) => KvRef::Half(TensorRef {
                data: h.as_view(),
                dtype,
            }),
            KvSlice::E4m3(b) => KvRef::E4m3(b.as_view()),
        }
    }

    fn device_ptr(&self, stream: &CudaStream) -> u64 {
        match self {
            KvSlice::Half(h) => h.device_ptr(stream).0,
            KvSlice::E4m3(b) => b.device_ptr(stream).0,
        }
    }

    fn copy(&self, stream: &std::sync::Arc<CudaStream>) -> Result<KvSlice> {
        let what = "copying an input set";
        Ok(match self {
            KvSlice::Half(h) => KvSlice::Half(cu(stream.clone_dtod(h), what)?),
            KvSlice::E4m3(b) => KvSlice::E4m3(cu(stream.clone_dtod(b), what)?),
        })
    }
}

/// K and V on the host as [`Buffers`] upload them: dtype bits, or e4m3 bytes.
#[derive(Clone, Copy)]
pub enum KvHost<'a> {
    Half(&'a [u16]),
    E4m3(&'a [u8]),
}

/// Host copies of the per-sequence tables a mode problem needs (`docs/MODES.md`), and of the
/// descale tables of e4m3 K/V.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableData {
    pub cu_seqlens_q: Option<Vec<i32>>,
    pub cu_seqlens_k: Option<Vec<i32>>,
    pub seqused_k: Option<Vec<i32>>,
    pub block_table: Option<Vec<i32>>,
    pub k_descale: Option<Vec<f32>>,
    pub v_descale: Option<Vec<f32>>,
    /// ALiBi's slopes (`[heads_q]` or `[batch, heads_q]`).
    pub alibi_slopes: Option<Vec<f32>>,
}

/// Device copies of [`TableData`], shared by every input set (the kernels only read them).
#[derive(Default)]
struct DeviceTableData {
    cu_seqlens_q: Option<CudaSlice<i32>>,
    cu_seqlens_k: Option<CudaSlice<i32>>,
    seqused_k: Option<CudaSlice<i32>>,
    block_table: Option<CudaSlice<i32>>,
    k_descale: Option<CudaSlice<f32>>,
    v_descale: Option<CudaSlice<f32>>,
    alibi_slopes: Option<CudaSlice<f32>>,
}

impl DeviceTableData {
    fn views(&self) -> DeviceTables<'_> {
        DeviceTables {
            cu_seqlens_q: self.cu_seqlens_q.as_ref().map(|t| t.as_view()),
            cu_seqlens_k: self.cu_seqlens_k.as_ref().map(|t| t.as_view()),
            seqused_k: self.seqused_k.as_ref().map(|t| t.as_view()),
            block_table: self.block_table.as_ref().map(|t| t.as_view()),
            alibi_slopes: self.alibi_slopes.as_ref().map(|t| t.as_view()),
            k_descale: self.k_descale.as_ref().map(|t| t.as_view()),
            v_descale: self.v_descale.as_ref().map(|t| t.as_view()),
            ..DeviceTables::default()
        }
    }
}

/// Pre-allocated input sets for one problem, rotated call to call.
pub struct Buffers {
    pub problem: AttentionProblem,
    pub sets: Vec<Set>,
    next: usize,
    workspace: Option<CudaSlice<f32>>,
    tables: DeviceTableData,
}

impl Buffers {
    /// Set 0 holds the given bits (layout order); the others are device copies of it (what
    /// matters for the cache is that they are different memory).
    pub fn new(
        device: &Device,
        problem: &AttentionProblem,
        q: &[u16],
        k: &[u16],
        v: &[u16],
        sets: usize,
    ) -> Result<Buffers> {
        Buffers::with_kv(device, problem, q, KvHost::Half(k), KvHost::Half(v), sets)
    }

    /// [`Buffers::new`] with K and V as dtype bits or as e4m3 bytes (`Modes::kv_fp8`).
    pub fn with_kv(
        device: &Device,
        problem: &AttentionProblem,
        q: &[u16],
        k: KvHost<'_>,
        v: KvHost<'_>,
        sets: usize,
    ) -> Result<Buffers> {
        let s = device.stream();
        let up = |x: &[u16], what: &str| cu(s.clone_htod(x), what);
        let up_kv = |x: KvHost<'_>, what: &str| -> Result<KvSlice> {
            Ok(match x {
                KvHost::Half(h) => KvSlice::Half(up(h, what)?),
                KvHost::E4m3(b) => KvSlice::E4m3(cu(s.clone_htod(b), what)?),
            })
        };
        let alloc_out = || -> Result<(CudaSlice<u16>, CudaSlice<f32>)> {
            Ok((
                cu(s.alloc_zeros::<u16>(problem.o_len()), "allocating O")?,
                cu(s.alloc_zeros::<f32>(problem.lse_len()), "allocating LSE")?,
            ))
        };
        let (o, lse) = alloc_out()?;
        let first = Set {
            q: up(q, "uploading Q")?,
            k: up_kv(k, "uploading K")?,
            v: up_kv(v, "uploading V")?,
            o,
            lse,
        };
        let mut all = Vec::with_capacity(sets);
        for _ in 1..sets.max(1) {
            let (o, lse) = alloc_out()?;
            all.push(Set {
                q: cu(s.clone_dtod(&first.q), "copying an input set")?,
                k: first.k.copy(s)?,
                v: first.v.copy(s)?,
                o,
                lse,
            });
        }
        all.insert(0, first);
        cu(s.synchronize(), "filling the input sets")?;
        Ok(Buffers {
            problem: problem.clone(),
            sets: all,
            next: 0,
            workspace: None,
            tables: DeviceTableData::default(),
        })
    }

    /// These buffers for a problem with inference modes (made by [`Buffers::new`] from
    /// storage-order bits: packed, contiguous cache or pages) with the per-sequence `tables` it
    /// needs.
    pub fn with_tables(mut self, device: &Device, tables: &TableData) -> Result<Buffers> {
        let s = device.stream();
        let up = |t: &Option<Vec<i32>>, what: &str| {
            t.as_ref().map(|t| cu(s.clone_htod(t), what)).transpose()
        };
        let up_f32 = |t: &Option<Vec<f32>>, what: &str| {
            t.as_ref().map(|t| cu(s.clone_htod(t), what)).transpose()
        };
        self.tables = DeviceTableData {
            cu_seqlens_q: up(&tables.cu_seqlens_q, "uploading cu_seqlens_q")?,
            cu_seqlens_k: up(&tables.cu_seqlens_k, "uploading cu_seqlens_k")?,
            seqused_k: up(&tables.seqused_k, "uploading seqused_k")?,
            block_table: up(&tables.block_table, "uploading block_table")?,
            k_descale: up_f32(&tables.k_descale, "uploading k_descale")?,
            v_descale: up_f32(&tables.v_descale, "uploading v_descale")?,
            alibi_slopes: up_f32(&tables.alibi_slopes, "uploading alibi_slopes")?,
        };
        cu(s.synchronize(), "uploading the tables")?;
        Ok(self)
    }

    /// One `forward` call on set `i`.
    pub fn forward(
        &mut self,
        kernel: &dyn Attention,
        device: &Device,
        i: usize,
    ) -> Result<(), flashcore::Error> {
        let dtype = self.problem.dtype;
        let set = &mut self.sets[i];
        let tb = &self.tables;
        let mut t = AttentionTensors {
            q: TensorRef {
                data: set.q.as_view(),
                dtype,
            }
            .into(),
            k: set.k.view(dtype),
            v: set.v.view(dtype),
            o: TensorMut {
                data: set.o.as_view_mut(),
                dtype,
            },
            lse: set.lse.as_view_mut(),
            tables: DeviceTables::default(),
        }
        .with_tables(tb.views());
        flashcore::launch::forward(kernel, device, &self.problem, &mut t)
    }

    /// The device tables every set shares (for a backward call on these sets).
    pub fn tables(&self) -> DeviceTables<'_> {
        self.tables.views()
    }

    /// `forward` on the next set in rotation.
    pub fn forward_next(&mut self, kernel: &dyn Attention, device: &Device) -> Result<()> {
        let i = self.next;
        self.next = (self.next + 1) % self.sets.len();
        self.forward(kernel, device, i).map_err(|e| anyhow!("{e}"))
    }

    /// Fills set `i`'s O and LSE with NaN, so an element a kernel never writes shows up.
    pub fn poison(&mut self, device: &Device, i: usize) -> Result<()> {
        let s = device.stream();
        let set = &mut self.sets[i];
        let nan = flashcore::host::nan_bits(self.problem.dtype);
        cu(
            s.memcpy_htod(&vec![nan; set.o.len()], &mut set.o),
            "poisoning O",
        )?;
        cu(
            s.memcpy_htod(&vec![f32::NAN; set.lse.len()], &mut set.lse),
            "poisoning LSE",
        )?;
        Ok(())
    }

    /// Set `i`'s O (bits, layout order) and LSE, after waiting for the stream.
    pub fn read_output(&self, device: &Device, i: usize) -> Result<(Vec<u16>, Vec<f32>)> {
        device.synchronize().map_err(|e| anyhow!("{e}"))?;
        let s = device.stream();
        Ok((
            cu(s.clone_dtoh(&self.sets[i].o), "copying O back")?,
            cu(s.clone_dtoh(&self.sets[i].lse), "copying LSE back")?,
        ))
    }
}

/// What a timing loop measured.
#[derive(Clone, Debug)]
pub struct Sampled {
    /// Median microseconds per call.
    pub us: f64,
    pub calls: u64,
    pub repeats: usize,
    /// Stopped before `repeats` samples because the time budget ran out.
    pub capped: bool,
}

#[derive(Clone, Debug)]
pub struct LoopOptions {
    pub repeats: usize,
    pub sample_ms: f64,
    /// Stop sampling once this much GPU time went into the samples (at least 3 samples).
    pub max_seconds: f64,
}

/// Samples `one_batch(calls)` (which queues `calls` calls) until `repeats` samples or the budget.
pub(super) fn sample_loop(
    timer: &Timer,
    device: &Device,
    per_call_us: f64,
    opts: &LoopOptions,
    calls_per_unit: u64,
    mut batch: impl FnMut(u64) -> Result<()>,
) -> Result<Sampled> {
    // Units (calls, or graph replays) per sample.
    let units = calls_for(per_call_us * calls_per_unit as f64, opts.sample_ms);
    let mut samples = Vec::with_capacity(opts.repeats);
    let mut gpu = 0.0;
    let mut capped = false;
    for i in 0..opts.repeats.max(1) {
        let ms = timer.time_ms(device, || batch(units))?;
        gpu += ms / 1e3;
        samples.push(ms * 1e3 / (units * calls_per_unit) as f64);
        if gpu >= opts.max_seconds && samples.len() >= 3 && i + 1 < opts.repeats {
            capped = true;
            break;
        }
    }
    let repeats = samples.len();
    Ok(Sampled {
        us: median(&mut samples),
        calls: units * calls_per_unit,
        repeats,
        capped,
    })
}

/// Eager timing: back-to-back `forward` calls rotating over the input sets. The caller has
/// already run (and checked) the kernel once, so compilation is out of the way.
pub fn time_eager(
    timer: &Timer,
    device: &Device,
    bufs: &mut Buffers,
    kernel: &dyn Attention,
    opts: &LoopOptions,
) -> Result<Sampled> {
    time_calls(timer, device, opts, || bufs.forward_next(kernel, device))
}

/// Eager timing of any call that queues its work on the device's stream (the backward bench's
/// backward, or forward then backward): back-to-back calls between events, median per call.
pub fn time_calls(
    timer: &Timer,
    device: &Device,
    opts: &LoopOptions,
    mut call: impl FnMut() -> Result<()>,
) -> Result<Sampled> {
    let one = timer.time_ms(device, &mut call)?;
    // Estimate from 3 calls unless one call is already long (slow generations at big shapes).
    let per_call_us = if one > 5.0 {
        one * 1e3
    } else {
        timer.time_ms(device, || {
            for _ in 0..3 {
                call()?;
            }
            Ok(())
        })? * 1e3
            / 3.0
    };
    sample_loop(timer, device, per_call_us, opts, 1, |calls| {
        for _ in 0..calls {
            call()?;
        }
        Ok(())
    })
}

/// An instantiated CUDA graph of `calls` attention calls.
pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    pub calls: usize,
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: both handles were created by build_graph and are destroyed once, here.
        unsafe {
            if !self.exec.is_null() {
                sys::cuGraphExecDestroy(self.exec);
            }
            if !self.graph.is_null() {
                sys::cuGraphDestroy(self.graph);
            }
        }
    }
}

impl Graph {
    pub fn launch(&self, device: &Device) -> Result<()> {
        // SAFETY: a live executable graph, launched on the device's stream.
        let rc = unsafe { sys::cuGraphLaunch(self.exec, device.stream().cu_stream()) };
        check(rc, "cuGraphLaunch")
    }
}

fn check(rc: sys::CUresult, what: &str) -> Result<()> {
    if rc == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(anyhow!("{what} failed: {rc:?}"))
    }
}

/// A graph of `calls` calls of `plan`, call j on input set j % sets, each call's launches in one
/// chain (no per-call workspace memset, like `run_plan`: see the workspace contract on
/// `LaunchPlan`).
pub fn build_graph(
    device: &Device,
    bufs: &mut Buffers,
    plan: &LaunchPlan,
    calls: usize,
) -> Result<Graph> {
    let problem = bufs.problem.clone();
    if problem.is_empty_output() || problem.seq_k == 0 {
        bail!("the graph path does not cover empty problems");
    }
    cu(device.context().bind_to_thread(), "binding the context")?;
    let functions = plan
        .launches
        .iter()
        .map(|l| {
            device
                .function(
                    l.source,
                    l.entry,
                    problem.dtype,
                    &l.defines,
                    l.dynamic_smem_bytes,
                )
                .map_err(|e| anyhow!("{e}"))
        })
        .collect::<Result<Vec<_>>>()?;
    if plan.workspace_f32 > 0
        && bufs
            .workspace
            .as_ref()
            .is_none_or(|w| w.len() < plan.workspace_f32)
    {
        bufs.workspace = Some(cu(
            device.stream().alloc_zeros::<f32>(plan.workspace_f32),
            "allocating the workspace",
        )?);
    }
    if plan.workspace_f32 > 0 {
        // Once, before (and outside) the graph: the plan's counters start at zero and its kernels
        // leave them zero (the workspace contract on `LaunchPlan`), so the replays need no memset
        // node, just as `run_plan` needs no memset per call. Zeroed here rather than only at
        // allocation because an earlier graph on these buffers may have run another plan.
        let w = bufs.workspace.as_mut().expect("allocated above");
        cu(device.stream().memset_zeros(w), "zeroing the workspace")?;
    }
    let stream = device.stream();
    let ws_ptr = match (&bufs.workspace, plan.workspace_f32) {
        (Some(w), n) if n > 0 => w.device_ptr(stream).0,
        _ => 0,
    };
    let table_ptr = |t: &Option<CudaSlice<i32>>| t.as_ref().map_or(0, |t| t.device_ptr(stream).0);
    let tables = [
        table_ptr(&bufs.tables.cu_seqlens_q),
        table_ptr(&bufs.tables.cu_seqlens_k),
        table_ptr(&bufs.tables.seqused_k),
        table_ptr(&bufs.tables.block_table),
    ];
    let f32_ptr = |t: &Option<CudaSlice<f32>>| t.as_ref().map_or(0, |t| t.device_ptr(stream).0);
    let descales = [
        f32_ptr(&bufs.tables.k_descale),
        f32_ptr(&bufs.tables.v_descale),
    ];
    let mut g = Graph {
        graph: std::ptr::null_mut(),
        exec: std::ptr::null_mut(),
        calls,
    };
    // SAFETY: plain out-parameter.
    check(
        unsafe { sys::cuGraphCreate(&mut g.graph, 0) },
        "cuGraphCreate",
    )?;
    let mut prev: Option<sys::CUgraphNode> = None;
    for j in 0..calls {
        let set = &bufs.sets[j % bufs.sets.len()];
        let mut params = AttentionParams::from_problem(&problem);
        params.q = set.q.device_ptr(stream).0;
        params.k = set.k.device_ptr(stream);
        params.v = set.v.device_ptr(stream);
        params.o = set.o.device_ptr(stream).0;
        params.lse = set.lse.device_ptr(stream).0;
        params.num_splits = plan.num_splits.max(1) as i32;
        params.workspace = ws_ptr;
        // The per-sequence tables, as `launch::run_plan` sets them (no ALiBi in the bench), and
        // e4m3 K/V's descale tables (their strides come with `from_problem`).
        [
            params.cu_seqlens_q,
            params.cu_seqlens_k,
            params.seqused_k,
            params.block_table,
        ] = tables;
        [params.k_descale, params.v_descale] = descales;
        for (launch, function) in plan.launches.iter().zip(&functions) {
            let maps = match &launch.tensor_maps {
                Some(spec) => Some(flashcore::launch::encode_tensor_maps(
                    &problem, &params, spec,
                )?),
                None => None,
            };
            let mut args: Vec<*mut c_void> =
                vec![&mut params as *mut AttentionParams as *mut c_void];
            if let Some(maps) = &maps {
                for m in maps.iter() {
                    args.push(m as *const sys::CUtensorMap as *mut c_void);
                }
            }
            let node_params = sys::CUDA_KERNEL_NODE_PARAMS {
                func: function.cu_function(),
                gridDimX: launch.grid.0,
                gridDimY: launch.grid.1,
                gridDimZ: launch.grid.2,
                blockDimX: launch.block.0,
                blockDimY: launch.block.1,
                blockDimZ: launch.block.2,
                sharedMemBytes: launch.dynamic_smem_bytes,
                kernelParams: args.as_mut_ptr(),
                extra: std::ptr::null_mut(),
                kern: std::ptr::null_mut(),
                ctx: std::ptr::null_mut(),
            };
            let mut node: sys::CUgraphNode = std::ptr::null_mut();
            // A programmatic launch depends on the kernel before it through a programmatic edge,
            // as a stream capture of the launch would record it: it may start once that kernel's
            // CTAs have all signalled (griddepcontrol.launch_dependents) and waits in-kernel for
            // its completion. Other launches take a plain edge (full completion).
            let programmatic = launch.programmatic_launch && prev.is_some();
            let deps: Vec<sys::CUgraphNode> = if programmatic {
                vec![]
            } else {
                prev.into_iter().collect()
            };
            // SAFETY: the argument values (params, maps) are live for this call, which copies
            // them into the node; the function was loaded (and opted in to its shared memory)
            // by Device::function in this context.
            check(
                unsafe {
                    sys::cuGraphAddKernelNode_v2(
                        &mut node,
                        g.graph,
                        deps.as_ptr(),
                        deps.len(),
                        &node_params,
                    )
                },
                &format!(
                    "cuGraphAddKernelNode ({} grid={:?} block={:?} smem={})",
                    launch.entry, launch.grid, launch.block, launch.dynamic_smem_bytes
                ),
            )?;
            if programmatic {
                let from = prev.expect("programmatic implies an earlier node");
                // SAFETY: `from` and `node` are nodes of `g.graph`; one edge described by one
                // zero-initialised CUgraphEdgeData with its type and port set.
                let mut edge: sys::CUgraphEdgeData = unsafe { std::mem::zeroed() };
                edge.type_ =
                    sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8;
                edge.from_port = sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8;
                check(
                    unsafe { sys::cuGraphAddDependencies_v2(g.graph, &from, &node, &edge, 1) },
                    "cuGraphAddDependencies_v2 (programmatic edge)",
                )?;
            }
            prev = Some(node);
        }
    }
    // SAFETY: a complete graph; plain out-parameter.
    check(
        unsafe { sys::cuGraphInstantiateWithFlags(&mut g.exec, g.graph, 0) },
        "cuGraphInstantiateWithFlags",
    )?;
    // SAFETY: a live executable graph on the device's stream.
    check(
        unsafe { sys::cuGraphUpload(g.exec, stream.cu_stream()) },
        "cuGraphUpload",
    )?;
    Ok(g)
}

/// Graph timing: replays of `graph`, enough per sample for `sample_ms`, median per call.
pub fn time_graph(
    timer: &Timer,
    device: &Device,
    graph: &Graph,
    opts: &LoopOptions,
) -> Result<Sampled> {
    graph.launch(device)?;
    let one = timer.time_ms(device, || graph.launch(device))?;
    let per_call_us = one * 1e3 / graph.calls as f64;
    sample_loop(
        timer,
        device,
        per_call_us,
        opts,
        graph.calls as u64,
        |replays| {
            for _ in 0..replays {
                graph.launch(device)?;
            }
            Ok(())
        },
    )
}

/// Makes cuBLAS loadable by name: cudarc opens "libcublas.so*" by bare name (and panics if it
/// cannot), so where it is not on the loader's path, open it (and cublasLt) by full path from a
/// toolkit or the pip wheels first, as the core does for NVRTC.
fn ensure_cublas() -> Result<()> {
    // SAFETY: probing for a library by name.
    if unsafe { flashcore::cudarc::cublas::sys::is_culib_present() } {
        return Ok(());
    }
    for d in lib_dirs() {
        let find = |prefix: &str| find_lib(&d, prefix);
        if let Some(blas) = find("libcublas.so") {
            for lib in find("libcublasLt.so").into_iter().chain([blas]) {
                // SAFETY: loading NVIDIA's library runs its initialisers; kept loaded forever.
                unsafe {
                    if let Ok(l) = libloading::os::unix::Library::open(
                        Some(&lib),
                        libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
                    ) {
                        std::mem::forget(l);
                    }
                }
            }
            // SAFETY: as above.
            if unsafe { flashcore::cudarc::cublas::sys::is_culib_present() } {
                return Ok(());
            }
        }
    }
    bail!("libcublas.so was not found on the loader path, in $CUDA_HOME or /usr/local/cuda")
}

/// Dense GEMM throughput: an n×n×n `dtype` GEMM (f32 accumulate, `dtype` out) on random
/// normal inputs through cublasGemmEx, timed by events like the kernels; median TFLOP/s.
pub fn gemm_peak(
    device: &Device,
    dtype: DType,
    n: usize,
    opts: &LoopOptions,
) -> Result<(f64, f64)> {
    use flashcore::cudarc::cublas::{result, sys as bsys, CudaBlas};
    ensure_cublas()?;
    let s = device.stream();
    let data = crate::inputs::random_tensor_parallel(dtype, [1, 1, n, n], 7);
    let bits: Vec<u16> = data.iter().map(|&x| dtype.to_bits(x)).collect();
    drop(data);
    let a = cu(s.clone_htod(&bits), "uploading GEMM A")?;
    let b = cu(s.clone_dtod(&a), "copying GEMM B")?;
    let mut c = cu(s.alloc_zeros::<u16>(n * n), "allocating GEMM C")?;
    let blas = CudaBlas::new(s.clone()).map_err(|e| anyhow!("cublasCreate: {e:?}"))?;
    let ty = match dtype {
        DType::F16 => bsys::cudaDataType::CUDA_R_16F,
        DType::Bf16 => bsys::cudaDataType::CUDA_R_16BF,
    };
    let (pa, pb, pc) = (
        a.device_ptr(s).0 as *const c_void,
        b.device_ptr(s).0 as *const c_void,
        c.device_ptr_mut(s).0 as *mut c_void,
    );
    let (alpha, beta) = (1.0f32, 0.0f32);
    let ni = n as i32;
    let gemm = || -> Result<()> {
        // SAFETY: A, B, C are n×n device buffers of `dtype` that outlive the queued work (the
        // stream is synchronised before they drop); alpha/beta are f32 as COMPUTE_32F needs.
        unsafe {
            result::gemm_ex(
                *blas.handle(),
                bsys::cublasOperation_t::CUBLAS_OP_N,
                bsys::cublasOperation_t::CUBLAS_OP_N,
                ni,
                ni,
                ni,
                &alpha as *const f32 as *const c_void,
                pa,
                ty,
                ni,
                pb,
                ty,
                ni,
                &beta as *const f32 as *const c_void,
                pc,
                ty,
                ni,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| anyhow!("cublasGemmEx: {e:?}"))
    };
    let timer = Timer::new(device)?;
    for _ in 0..3 {
        gemm()?;
    }
    let one = timer.time_ms(device, gemm)?;
    let sampled = sample_loop(&timer, device, one * 1e3, opts, 1, |k| {
        for _ in 0..k {
            gemm()?;
        }
        Ok(())
    })?;
    cu(s.synchronize(), "finishing the GEMMs")?;
    drop(blas);
    let _ = c.len();
    let flops = 2.0 * (n as f64).powi(3);
    Ok((sampled.us, flops / sampled.us / 1e6))
}

/// Runs `f`, turning a panic (cudarc panics when a library or symbol is missing) into an error.
pub fn no_panic<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r.with_context(|| what.to_string()),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(anyhow!("{what}: panicked: {msg}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_fill_a_sample() {
        assert_eq!(calls_for(10.0, 20.0), 2000);
        assert_eq!(calls_for(30_000.0, 20.0), 1);
        assert_eq!(calls_for(0.0, 20.0), 100_000);
    }

    #[test]
    fn sets_exceed_twice_l2_within_memory() {
        let l2 = 50 << 20;
        // Mission shape: 4 tensors of 1·8·512·64 halves = 2 MiB a set: 51 sets.
        let set = 4 * 8 * 512 * 64 * 2;
        assert_eq!(sets_needed(set, set, l2, 80 << 30, 1000), 51);
        // Big shapes: at least 2.
        assert_eq!(sets_needed(1 << 30, 1 << 30, l2, 80 << 30, 1000), 2);
        // Memory-bound: a quarter of the free memory.
        assert_eq!(sets_needed(1 << 20, 1 << 20, l2, 8 << 20, 1000), 2);
        assert_eq!(sets_needed(1 << 20, 1 << 20, l2, 1 << 20, 1000), 1);
        assert_eq!(sets_needed(1, 1, l2, 80 << 30, 7), 7);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn panics_become_errors() {
        let e = no_panic::<()>("loading", || panic!("no libcublas")).unwrap_err();
        assert!(e.to_string().contains("no libcublas"), "{e}");
    }
}
