//! The backward pass: dQ, dK and dV from Q, K, V, O, dO and the forward's LSE.
//!
//! A sibling of [`Attention`](crate::Attention): a generation implements
//! [`AttentionBackward`] (`name`, `capabilities`, `plan_backward`) and the core validates,
//! compiles and launches, as for the forward. Every launch of a backward plan takes two
//! parameter blocks by value: the forward's `AttentionParams` (Q, K, V, O, LSE, workspace,
//! shapes, strides, scale) and [`BackwardParams`] (dO, dQ, dK, dV and their strides;
//! `kernels/common/backward_params.cuh`).
//!
//! **Layouts.** dO has O's strides and dQ Q's; dK and dV have K's and V's (dense problems: the
//! problem's layout). **Workspace.** A plan's preprocessing (`D = rowsum(dO ∘ O)`) and any f32
//! dQ accumulator live in the plan's workspace under the contract on [`LaunchPlan`]: not
//! cleared per call, only its first `workspace_counters` words are zero at the start and must
//! be left zero. **Modes.** Dense or varlen storage (packed Q and K/V with `cu_seqlens_q`/`_k`,
//! FlashAttention 2's layout: LSE `[heads_q, total_q]`, dQ packed like Q, dK and dV like K and
//! V), no cache and no `mm_prefix_ranges`; varlen, sliding windows (causal included), softcap
//! and ALiBi are taken where a kernel's capabilities say so, with the forward's tables
//! ([`backward_on_with_tables`]).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::CUtensorMap;
use cudarc::driver::{CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use ndarray::{Array4, ArrayD, ArrayView3, ArrayView4, ArrayViewD};

use crate::device::{Device, DeviceInfo};
use crate::dtype::DType;
use crate::error::{Error, InvalidProblem, Unsupported};
use crate::execute::Guards;
use crate::host::{download, nan_bits, HostElement};
use crate::launch_plan::{LaunchPlan, TensorMapSpec};
use crate::modes::{HostTables, KvStorage, ModeSupport, Modes};
use crate::params::AttentionParams;
use crate::plan::Capabilities;
use crate::problem::AttentionProblem;
use crate::tensors::{check_dtypes, check_lens, DeviceTables, TensorMut, TensorRef};

/// Mirror of `struct BackwardParams` in kernels/common/backward_params.cuh: change both together.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BackwardParams {
    pub d_o: u64,
    pub dq: u64,
    pub dk: u64,
    pub dv: u64,
    pub do_batch_stride: i64,
    pub do_head_stride: i64,
    pub do_row_stride: i64,
    pub dq_batch_stride: i64,
    pub dq_head_stride: i64,
    pub dq_row_stride: i64,
    pub dk_batch_stride: i64,
    pub dk_head_stride: i64,
    pub dk_row_stride: i64,
    pub dv_batch_stride: i64,
    pub dv_head_stride: i64,
    pub dv_row_stride: i64,
}

// The C side is 128 bytes: 4 pointers, 12 i64 strides.
const _: () = assert!(std::mem::size_of::<BackwardParams>() == 128);

impl BackwardParams {
    /// The strides (pointers are filled in at launch): dO like O, dQ like Q, dK like K, dV like V.
    pub fn from_problem(p: &AttentionProblem) -> Self {
        let s = p.strides();
        let [do_batch_stride, do_head_stride, do_row_stride] = s.o.as_i64();
        let [dq_batch_stride, dq_head_stride, dq_row_stride] = s.q.as_i64();
        let [dk_batch_stride, dk_head_stride, dk_row_stride] = s.k.as_i64();
        let [dv_batch_stride, dv_head_stride, dv_row_stride] = s.v.as_i64();
        BackwardParams {
            do_batch_stride,
            do_head_stride,
            do_row_stride,
            dq_batch_stride,
            dq_head_stride,
            dq_row_stride,
            dk_batch_stride,
            dk_head_stride,
            dk_row_stride,
            dv_batch_stride,
            dv_head_stride,
            dv_row_stride,
            ..Default::default()
        }
    }
}

/// Device tensors of one backward call: Q, K, V, O, dO (the problem's dtype) and the forward's
/// f32 LSE `[batch, heads_q, seq_q]` in; dQ, dK, dV (the problem's dtype) out.
pub struct BackwardTensors<'a> {
    pub q: TensorRef<'a>,
    pub k: TensorRef<'a>,
    pub v: TensorRef<'a>,
    pub o: TensorRef<'a>,
    pub d_o: TensorRef<'a>,
    pub lse: CudaView<'a, f32>,
    pub dq: TensorMut<'a>,
    pub dk: TensorMut<'a>,
    pub dv: TensorMut<'a>,
}

impl BackwardTensors<'_> {
    /// Lengths and dtypes against the problem (see [`check_backward_buffers`]).
    pub fn check(&self, p: &AttentionProblem) -> Result<(), InvalidProblem> {
        check_backward_buffers(
            p,
            [
                self.q.data.len(),
                self.k.data.len(),
                self.v.data.len(),
                self.o.data.len(),
                self.d_o.data.len(),
                self.lse.len(),
                self.dq.data.len(),
                self.dk.data.len(),
                self.dv.data.len(),
            ],
            [
                self.q.dtype,
                self.k.dtype,
                self.v.dtype,
                self.o.dtype,
                self.d_o.dtype,
                self.dq.dtype,
                self.dk.dtype,
                self.dv.dtype,
            ],
        )
    }
}

/// Names of the buffers [`check_backward_buffers`] takes, in order (LSE sits between dO and dQ).
pub const BACKWARD_BUFFERS: [&str; 9] = ["q", "k", "v", "o", "d_o", "lse", "dq", "dk", "dv"];

/// The elements each of [`BACKWARD_BUFFERS`] addresses.
pub fn backward_buffer_lens(p: &AttentionProblem) -> [usize; 9] {
    [
        p.q_len(),
        p.k_len(),
        p.v_len(),
        p.o_len(),
        p.o_len(),
        p.lse_len(),
        p.q_len(),
        p.k_len(),
        p.v_len(),
    ]
}

/// What [`BackwardTensors::check`] checks, on plain numbers: `lens` are the elements of
/// [`BACKWARD_BUFFERS`], `dtypes` the tags of Q, K, V, O, dO, dQ, dK, dV. Dense strides need
/// exact lengths; custom strides may sit in larger buffers.
pub fn check_backward_buffers(
    p: &AttentionProblem,
    lens: [usize; 9],
    dtypes: [DType; 8],
) -> Result<(), InvalidProblem> {
    let exact = p.custom_strides.is_none();
    check_lens(BACKWARD_BUFFERS, lens, backward_buffer_lens(p), exact)?;
    let names = ["q", "k", "v", "o", "d_o", "dq", "dk", "dv"];
    check_dtypes(names, dtypes, p.dtype)
}

/// The modes of the scores a backward kernel may claim (sliding windows, softcap, ALiBi), on
/// dense storage.
pub const SCORE_MODES: ModeSupport = ModeSupport {
    window: true,
    softcap: true,
    alibi: true,
    ..ModeSupport::NONE
};

/// Every mode a backward kernel may claim: [`SCORE_MODES`] and varlen (packed Q and K/V).
pub const BACKWARD_MODES: ModeSupport = ModeSupport {
    varlen: true,
    ..SCORE_MODES
};

/// Whether the problem is varlen: packed Q with packed K/V, the one varlen form a backward
/// takes.
pub fn is_varlen(p: &AttentionProblem) -> bool {
    p.modes.packed_q.is_some() && matches!(p.modes.kv, KvStorage::Packed { .. })
}

/// The defines a backward build takes for the problem's modes: `FC_BWD_MODES=1` when it has a
/// window, softcap, ALiBi or varlen, and `FC_BWD_VARLEN=1` too for varlen
/// (`kernels/common/backward_scores.cuh`); none for a dense problem, whose builds stay as they
/// were.
pub fn backward_mode_defines(p: &AttentionProblem) -> Vec<(String, String)> {
    let mut defines = vec![];
    if !p.modes.is_dense() {
        defines.push(("FC_BWD_MODES".into(), "1".into()));
    }
    if is_varlen(p) {
        defines.push(("FC_BWD_VARLEN".into(), "1".into()));
    }
    defines
}

/// The modes a backward pass takes at all: those of the scores on dense storage or on varlen
/// storage with both Q and K/V packed. The first other mode the problem asks for, as the reason
/// it is refused.
fn storage_mode(m: &Modes) -> Option<&'static str> {
    let kv_packed = matches!(m.kv, KvStorage::Packed { .. });
    if m.packed_q.is_some() != kv_packed {
        return Some(if kv_packed {
            "packed K/V without packed Q (varlen takes cu_seqlens_q and cu_seqlens_k together)"
        } else {
            "packed Q without packed K/V (varlen takes cu_seqlens_q and cu_seqlens_k together)"
        });
    }
    let taken = Modes {
        packed_q: m.packed_q,
        kv: if kv_packed { m.kv } else { KvStorage::Dense },
        window_left: m.window_left,
        window_right: m.window_right,
        softcap: m.softcap,
        alibi: m.alibi,
        ..Modes::default()
    };
    if *m == taken {
        return None;
    }
    BACKWARD_MODES.missing(m)
}

/// The problem checks of a backward call beyond `AttentionProblem::validate`: dense or varlen
/// storage only (windows, softcap and ALiBi are modes of the scores, which a kernel's
/// capabilities may take, as is varlen; caches, appends, `mm_prefix_ranges` and e4m3 inputs are
/// not), and dQ (Q's strides), dK and dV (K's and V's) must not alias their own elements, as O
/// must not (blocks would race to write them).
pub fn validate_backward(p: &AttentionProblem) -> Result<(), InvalidProblem> {
    p.validate()?;
    if let Some(mode) = storage_mode(&p.modes) {
        return Err(InvalidProblem::Mode {
            field: "modes",
            reason: format!(
                "the backward pass takes dense or varlen storage with windows, softcap and \
                 ALiBi, not {mode}"
            ),
        });
    }
    let s = p.strides();
    let ((q_batch, q_rows), (kv_batch, kv_rows)) = (p.q_storage(), p.kv_storage());
    // dV is V's width (a kernel with one head dim refuses a distinct one in its capabilities).
    for (st, batch, heads, rows, width) in [
        (s.q, q_batch, p.heads_q, q_rows, p.head_dim),
        (s.k, kv_batch, p.heads_kv, kv_rows, p.head_dim),
        (s.v, kv_batch, p.heads_kv, kv_rows, p.head_dim_v()),
    ] {
        // A gradient with no elements (seq_k = 0: no keys) has nothing to alias; its strides
        // are 0 along the empty extent's neighbours (H100, commit bbeeaea: verify's sk=0 cases).
        if batch == 0 || heads == 0 || rows == 0 {
            continue;
        }
        st.check_distinct(batch, heads, rows, width)?;
    }
    Ok(())
}

/// A backward kernel. A generation implements `name`, `capabilities` and `plan_backward`; the
/// core supplies validation, compilation, buffers and the launch.
pub trait AttentionBackward: Send + Sync {
    /// Short stable name (the generation's name, e.g. "scalar").
    fn name(&self) -> &'static str;

    /// What the backward kernel takes (its `modes` at most [`BACKWARD_MODES`]: windows,
    /// softcap, ALiBi and varlen).
    fn capabilities(&self) -> Capabilities;

    /// Whether repeated calls on the same inputs give bit-identical gradients (no atomics, or
    /// ordered ones). A kernel that trades this for speed says so here.
    fn deterministic(&self) -> bool {
        true
    }

    /// The launches of one backward call, each taking `(AttentionParams, BackwardParams)`.
    fn plan_backward(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported>;

    /// Whether this kernel takes the problem on this device, and why not.
    fn supports_backward(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<(), Unsupported> {
        self.capabilities().check(self.name(), problem, device)?;
        self.plan_backward(problem, device).map(|_| ())
    }

    /// Runs on device buffers, on the device's stream. Validates everything first; a rejected
    /// call launches nothing. Asynchronous, like `Attention::forward`.
    fn backward(
        &self,
        device: &Device,
        problem: &AttentionProblem,
        tensors: &mut BackwardTensors<'_>,
    ) -> Result<(), Error> {
        backward_on(self, device, device.stream(), problem, tensors)
    }
}

/// Validates, plans and launches a backward call on `stream` (of the device's context), for a
/// problem with no tables (dense, or with windows or softcap; ALiBi and varlen need theirs:
/// [`backward_on_with_tables`]).
pub fn backward_on(
    kernel: &(impl AttentionBackward + ?Sized),
    device: &Device,
    stream: &Arc<CudaStream>,
    problem: &AttentionProblem,
    t: &mut BackwardTensors<'_>,
) -> Result<(), Error> {
    backward_on_with_tables(kernel, device, stream, problem, t, &DeviceTables::default())
}

/// [`backward_on`] with the problem's tables, the forward's: `alibi_slopes` (`[heads_q]` or
/// `[batch, heads_q]`) and, for varlen, `cu_seqlens_q` and `cu_seqlens_k`. A backward takes no
/// other table, so every other must be absent. Their contents are trusted, as the forward's are
/// (`Device::check_tables` checks them).
pub fn backward_on_with_tables(
    kernel: &(impl AttentionBackward + ?Sized),
    device: &Device,
    stream: &Arc<CudaStream>,
    problem: &AttentionProblem,
    t: &mut BackwardTensors<'_>,
    tables: &DeviceTables<'_>,
) -> Result<(), Error> {
    device.check_stream(stream)?;
    validate_backward(problem)?;
    t.check(problem)?;
    crate::modes::check_table_lens(problem, tables.lens())?;
    let caps = kernel.capabilities();
    caps.check(kernel.name(), problem, device.info())?;
    let plan = kernel.plan_backward(problem, device.info())?;
    crate::execute::check_aligned(kernel.name(), caps.alignment_elems, || {
        [
            ("q", t.q.data.device_ptr(stream).0),
            ("k", t.k.data.device_ptr(stream).0),
            ("v", t.v.data.device_ptr(stream).0),
            ("o", t.o.data.device_ptr(stream).0),
            ("d_o", t.d_o.data.device_ptr(stream).0),
            ("dq", t.dq.data.device_ptr(stream).0),
            ("dk", t.dk.data.device_ptr(stream).0),
            ("dv", t.dv.data.device_ptr(stream).0),
        ]
    })?;
    if problem.batch == 0 || problem.heads_q == 0 {
        return Ok(()); // nothing to write
    }
    let mut params = AttentionParams::from_problem(problem);
    let mut bwd = BackwardParams::from_problem(problem);
    // Held until after the last launch (see `Guards`).
    let mut guards = Guards::default();
    guards.set_qkv(&mut params, [&t.q, &t.k, &t.v], stream);
    params.o = guards.keep(t.o.data.device_ptr(stream));
    params.lse = guards.keep(t.lse.device_ptr(stream));
    bwd.d_o = guards.keep(t.d_o.data.device_ptr(stream));
    bwd.dq = guards.keep(t.dq.data.device_ptr_mut(stream));
    bwd.dk = guards.keep(t.dk.data.device_ptr_mut(stream));
    bwd.dv = guards.keep(t.dv.data.device_ptr_mut(stream));
    crate::execute::set_table_pointers(&mut params, tables, stream, &mut guards);
    let result = device.with_workspace(stream, plan.workspace_f32, plan.workspace_counters, |ws| {
        params.workspace = ws;
        for launch in &plan.launches {
            let function = device.function(
                launch.source,
                launch.entry,
                problem.dtype,
                &launch.defines,
                launch.dynamic_smem_bytes,
            )?;
            let maps = match &launch.tensor_maps {
                Some(spec) => Some(backward_tensor_maps(problem, &params, &bwd, spec)?),
                None => None,
            };
            let mut args: Vec<*mut c_void> = vec![
                &params as *const AttentionParams as *mut c_void,
                &bwd as *const BackwardParams as *mut c_void,
            ];
            for map in maps.iter().flatten() {
                args.push(map as *const CUtensorMap as *mut c_void);
            }
            crate::execute::launch_raw(device, stream, launch, &function, &mut args)?;
        }
        Ok(())
    });
    drop(guards);
    result
}

/// The tensor maps a Hopper backward launch takes after its two parameter blocks: Q, K, V (as
/// the forward's) and dO (Q's box, O's strides).
fn backward_tensor_maps(
    p: &AttentionProblem,
    params: &AttentionParams,
    bwd: &BackwardParams,
    spec: &TensorMapSpec,
) -> Result<[CUtensorMap; 4], Error> {
    let [q, k, v] = crate::tensor_map::encode_tensor_maps(p, params, spec)?;
    let d_o = crate::tensor_map::encode_tensor_map(
        p,
        spec,
        &crate::tensor_map::MapTarget {
            name: "d_o",
            ptr: bwd.d_o,
            strides: p.strides().o,
            heads: p.heads_q,
            storage: p.q_storage(),
            box_rows: spec.q_box_rows,
        },
    )?;
    Ok([q, k, v, d_o])
}

/// dQ, dK, dV of a host call, in the problem's layout order and the inputs' element type.
#[derive(Clone, Debug)]
pub struct HostGradients<E = f32> {
    pub dq: Array4<E>,
    pub dk: Array4<E>,
    pub dv: Array4<E>,
}

/// dQ, dK, dV of [`backward_host_modes`] in storage shapes: Q's and K's (`[total, heads, d]`
/// for varlen).
#[derive(Clone, Debug)]
pub struct HostGradientsD<E = f32> {
    pub dq: ArrayD<E>,
    pub dk: ArrayD<E>,
    pub dv: ArrayD<E>,
}

/// The inputs of [`backward_host_modes`], in storage shapes (`crate::host::storage_shapes`): Q,
/// O and dO like Q, K and V like K, `lse` as the forward returned it (`[batch, heads_q, seq_q]`,
/// or `[heads_q, total_q]` for varlen), and the forward's tables (ALiBi slopes, cu_seqlens).
pub struct BackwardHostInputs<'a, E = f32> {
    pub q: ArrayViewD<'a, E>,
    pub k: ArrayViewD<'a, E>,
    pub v: ArrayViewD<'a, E>,
    pub o: ArrayViewD<'a, E>,
    pub d_o: ArrayViewD<'a, E>,
    pub lse: ArrayViewD<'a, f32>,
    pub tables: HostTables<'a>,
}

/// The backward on host arrays laid out as the problem's (dense) `layout` says: Q, O, dO like
/// Q, K and V like K, `lse` `[batch, heads_q, seq_q]` as the forward returned it. Outputs are
/// poisoned with NaN before the launch (an element never written comes back NaN). Waits for
/// the result. A problem with ALiBi needs its slopes: [`backward_host_with_tables`].
#[allow(clippy::too_many_arguments)]
pub fn backward_host<'a, E: HostElement>(
    kernel: &(impl AttentionBackward + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    q: ArrayView4<'a, E>,
    k: ArrayView4<'a, E>,
    v: ArrayView4<'a, E>,
    o: ArrayView4<'a, E>,
    d_o: ArrayView4<'a, E>,
    lse: ArrayView3<'a, f32>,
) -> Result<HostGradients<E>, Error> {
    backward_host_with_tables(
        kernel,
        device,
        problem,
        q,
        k,
        v,
        o,
        d_o,
        lse,
        &HostTables::default(),
    )
}

/// [`backward_host`] with the problem's host tables (`alibi_slopes` only, as the forward took
/// them), validated before anything is copied. Dense storage: varlen takes
/// [`backward_host_modes`].
#[allow(clippy::too_many_arguments)]
pub fn backward_host_with_tables<'a, E: HostElement>(
    kernel: &(impl AttentionBackward + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    q: ArrayView4<'a, E>,
    k: ArrayView4<'a, E>,
    v: ArrayView4<'a, E>,
    o: ArrayView4<'a, E>,
    d_o: ArrayView4<'a, E>,
    lse: ArrayView3<'a, f32>,
    tables: &HostTables<'a>,
) -> Result<HostGradients<E>, Error> {
    let g = backward_host_modes(
        kernel,
        device,
        problem,
        BackwardHostInputs {
            q: q.into_dyn(),
            k: k.into_dyn(),
            v: v.into_dyn(),
            o: o.into_dyn(),
            d_o: d_o.into_dyn(),
            lse: lse.into_dyn(),
            tables: *tables,
        },
    )?;
    let four = |a: ArrayD<E>, what: &'static str| {
        a.into_dimensionality::<ndarray::Ix4>()
            .map_err(|_| InvalidProblem::Mode {
                field: what,
                reason: "a varlen problem's gradients are 3-D: use backward_host_modes".into(),
            })
    };
    Ok(HostGradients {
        dq: four(g.dq, "dq")?,
        dk: four(g.dk, "dk")?,
        dv: four(g.dv, "dv")?,
    })
}

/// The backward on host arrays in storage shapes, dense or varlen ([`BackwardHostInputs`]): the
/// gradients come back in Q's and K's storage shapes. Validates the problem, the shapes and the
/// tables before anything is copied; outputs are poisoned with NaN before the launch (an element
/// never written comes back NaN). Waits for the result.
pub fn backward_host_modes<E: HostElement>(
    kernel: &(impl AttentionBackward + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    inputs: BackwardHostInputs<'_, E>,
) -> Result<HostGradientsD<E>, Error> {
    validate_backward(problem)?;
    inputs.tables.validate(problem)?;
    if problem.custom_strides.is_some() {
        return Err(Unsupported::new(
            kernel.name(),
            "the host path takes dense layouts only; use device tensors for custom strides",
        )
        .into());
    }
    let dtype = problem.dtype;
    if let Some(got) = E::DTYPE.filter(|&d| d != dtype) {
        return Err(InvalidProblem::DTypeMismatch {
            tensor: "q",
            got,
            expected: dtype,
        }
        .into());
    }
    let p = problem;
    let (q_shape, kv_shape, lse_shape) = crate::host::storage_shapes(p);
    let (v_shape, o_shape) = crate::host::v_o_shapes(p);
    for (tensor, got, expected) in [
        ("q", inputs.q.shape(), &q_shape[..]),
        ("k", inputs.k.shape(), &kv_shape[..]),
        ("v", inputs.v.shape(), &v_shape[..]),
        ("o", inputs.o.shape(), &o_shape[..]),
        ("d_o", inputs.d_o.shape(), &o_shape[..]),
        ("lse", inputs.lse.shape(), &lse_shape[..]),
    ] {
        if got != expected {
            return Err(InvalidProblem::ShapeMismatch {
                tensor,
                got: got.to_vec(),
                expected: expected.to_vec(),
            }
            .into());
        }
    }
    let stream = device.stream();
    let oom = |what: &str, bytes: usize| Error::OutOfMemory {
        what: what.to_string(),
        bytes,
    };
    let up = |a: &ArrayViewD<E>, what: &str| {
        let bits = crate::host::host_bits(a, dtype);
        stream
            .clone_htod(&*bits)
            .map_err(|_| oom(what, bits.len() * 2))
    };
    let up_i32 = |t: Option<&[i32]>, what: &str| {
        t.map(|t| stream.clone_htod(t).map_err(|_| oom(what, t.len() * 4)))
            .transpose()
    };
    let dq_ = up(&inputs.q, "q")?;
    let dk_ = up(&inputs.k, "k")?;
    let dv_ = up(&inputs.v, "v")?;
    let do_ = up(&inputs.o, "o")?;
    let ddo = up(&inputs.d_o, "d_o")?;
    let slopes = crate::host::upload_slopes(stream, inputs.tables.alibi_slopes)?;
    let cu_q = up_i32(inputs.tables.cu_seqlens_q, "cu_seqlens_q")?;
    let cu_k = up_i32(inputs.tables.cu_seqlens_k, "cu_seqlens_k")?;
    let lse_host: Vec<f32> = inputs.lse.iter().copied().collect();
    let dlse = stream
        .clone_htod(&lse_host)
        .map_err(|_| oom("lse", lse_host.len() * 4))?;
    let poisoned = |n: usize, what: &str| {
        stream
            .clone_htod(&vec![nan_bits(dtype); n])
            .map_err(|_| oom(what, n * 2))
    };
    let mut g_q = poisoned(q_shape.iter().product(), "dq")?;
    let mut g_k = poisoned(kv_shape.iter().product(), "dk")?;
    let mut g_v = poisoned(v_shape.iter().product(), "dv")?;
    fn r(d: &cudarc::driver::CudaSlice<u16>, dtype: DType) -> TensorRef<'_> {
        TensorRef {
            data: d.as_view(),
            dtype,
        }
    }
    fn w(d: &mut cudarc::driver::CudaSlice<u16>, dtype: DType) -> TensorMut<'_> {
        let data: CudaViewMut<'_, u16> = d.as_view_mut();
        TensorMut { data, dtype }
    }
    {
        let mut t = BackwardTensors {
            q: r(&dq_, dtype),
            k: r(&dk_, dtype),
            v: r(&dv_, dtype),
            o: r(&do_, dtype),
            d_o: r(&ddo, dtype),
            lse: dlse.as_view(),
            dq: w(&mut g_q, dtype),
            dk: w(&mut g_k, dtype),
            dv: w(&mut g_v, dtype),
        };
        let device_tables = DeviceTables {
            alibi_slopes: slopes.as_ref().map(|s| s.as_view()),
            cu_seqlens_q: cu_q.as_ref().map(|s| s.as_view()),
            cu_seqlens_k: cu_k.as_ref().map(|s| s.as_view()),
            ..DeviceTables::default()
        };
        backward_on_with_tables(kernel, device, stream, problem, &mut t, &device_tables)?;
    }
    device.synchronize()?;
    let down = |d: &cudarc::driver::CudaSlice<u16>, shape: &[usize], what: &str| {
        let vals = download::<E>(stream, d, dtype, what)?;
        Ok::<_, Error>(ArrayD::from_shape_vec(shape, vals).expect("length matches"))
    };
    Ok(HostGradientsD {
        dq: down(&g_q, &q_shape, "dQ")?,
        dk: down(&g_k, &kv_shape, "dK")?,
        dv: down(&g_v, &v_shape, "dV")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modes::{AlibiSlopes, KvStorage};
    use crate::problem::{Layout, ProblemStrides, TensorStrides};

    #[test]
    fn buffers_are_checked_by_name() {
        let p = AttentionProblem::new(2, 4, 33, 64).with_kv(2, 65);
        let ok = [p.dtype; 8];
        check_backward_buffers(&p, backward_buffer_lens(&p), ok).unwrap();
        for i in 0..9 {
            let mut l = backward_buffer_lens(&p);
            l[i] -= 1;
            match check_backward_buffers(&p, l, ok) {
                Err(InvalidProblem::LengthMismatch { tensor, .. }) => {
                    assert_eq!(tensor, BACKWARD_BUFFERS[i])
                }
                other => panic!("{i}: {other:?}"),
            }
        }
        let mut d = ok;
        d[6] = DType::Bf16;
        assert!(matches!(
            check_backward_buffers(&p, backward_buffer_lens(&p), d),
            Err(InvalidProblem::DTypeMismatch { tensor: "dk", .. })
        ));
    }

    #[test]
    fn empty_gradients_never_alias() {
        for layout in crate::problem::Layout::ALL {
            let p = AttentionProblem::new(2, 8, 5, 64)
                .with_kv(2, 0)
                .with_layout(layout);
            validate_backward(&p).unwrap();
        }
    }

    #[test]
    fn storage_modes_and_aliasing_gradients_are_rejected() {
        // The modes of the scores are the kernels' to take or refuse; storage modes never are.
        let scores = Modes {
            window_left: Some(2),
            window_right: Some(0),
            softcap: Some(30.0),
            alibi: Some(AlibiSlopes::PerBatchHead),
            ..Modes::default()
        };
        validate_backward(&AttentionProblem::new(1, 2, 8, 16).with_modes(scores.clone())).unwrap();
        // Varlen is Q and K/V packed together, with or without the scores' modes.
        let varlen = Modes {
            packed_q: Some(8),
            kv: KvStorage::Packed { total_k: 8 },
            ..scores.clone()
        };
        let p = AttentionProblem::new(2, 2, 8, 16).with_modes(varlen.clone());
        validate_backward(&p).unwrap();
        assert!(is_varlen(&p));
        assert_eq!(
            backward_mode_defines(&p),
            [
                ("FC_BWD_MODES".into(), "1".into()),
                ("FC_BWD_VARLEN".into(), "1".into())
            ]
        );
        assert!(backward_mode_defines(&AttentionProblem::new(1, 2, 8, 16)).is_empty());
        for (modes, named) in [
            (
                Modes {
                    packed_q: Some(8),
                    ..scores.clone()
                },
                "packed Q without packed K/V",
            ),
            (
                Modes {
                    mm_prefix: Some(1),
                    ..varlen
                },
                "mm_prefix_ranges",
            ),
            (
                Modes {
                    seqused_k: true,
                    ..Modes::default()
                },
                "a KV cache",
            ),
            (
                Modes {
                    kv: KvStorage::Packed { total_k: 8 },
                    ..Modes::default()
                },
                "packed K/V without packed Q",
            ),
            (
                Modes {
                    mm_prefix: Some(1),
                    ..Modes::default()
                },
                "mm_prefix_ranges",
            ),
        ] {
            let p = AttentionProblem::new(1, 2, 8, 16).with_modes(modes);
            match validate_backward(&p) {
                Err(InvalidProblem::Mode { reason, .. }) => {
                    assert!(reason.contains(named), "{reason}")
                }
                other => panic!("{named}: {other:?}"),
            }
        }
        let mut p = AttentionProblem::new(1, 2, 8, 16).with_layout(Layout::Bhsd);
        validate_backward(&p).unwrap();
        let s = p.strides();
        // K's heads share rows: reading is fine for the forward, but dK would alias.
        p.custom_strides = Some(ProblemStrides {
            k: TensorStrides {
                batch: s.k.batch,
                head: 0,
                row: s.k.row,
            },
            ..s
        });
        p.validate().unwrap();
        assert!(matches!(
            validate_backward(&p),
            Err(InvalidProblem::OverlappingOutput { .. })
        ));
    }

    #[test]
    fn the_c_block_has_the_rust_fields_in_order() {
        // Field names of `struct BackwardParams` in the embedded header, in declaration order.
        let src = crate::compile::kernel_source("common/backward_params.cuh").unwrap();
        let body = &src[src.find("struct BackwardParams {").unwrap()..];
        let body = &body[..body.find("};").unwrap()];
        let mut fields = Vec::new();
        for line in body.lines().skip(1) {
            let decl = line.split("//").next().unwrap().trim();
            let Some(decl) = decl.strip_suffix(';') else {
                continue;
            };
            for part in decl.split(',') {
                let name = part.split_whitespace().last().unwrap();
                fields.push(name.trim_start_matches('*').to_string());
            }
        }
        let rust = [
            "d_o",
            "dq",
            "dk",
            "dv",
            "do_batch_stride",
            "do_head_stride",
            "do_row_stride",
            "dq_batch_stride",
            "dq_head_stride",
            "dq_row_stride",
            "dk_batch_stride",
            "dk_head_stride",
            "dk_row_stride",
            "dv_batch_stride",
            "dv_head_stride",
            "dv_row_stride",
        ];
        assert_eq!(fields, rust);
        // Every field is 8 bytes on both sides: 16 fields, 128 bytes.
        assert_eq!(std::mem::size_of::<BackwardParams>(), 8 * rust.len());
    }

    #[test]
    fn params_take_the_gradient_strides_from_their_tensors() {
        let p = AttentionProblem::new(2, 4, 10, 8).with_kv(2, 6);
        let b = BackwardParams::from_problem(&p);
        let s = p.strides();
        assert_eq!(b.dq_row_stride, s.q.row as i64);
        assert_eq!(b.do_batch_stride, s.o.batch as i64);
        assert_eq!(b.dk_head_stride, s.k.head as i64);
        assert_eq!(b.dv_row_stride, s.v.row as i64);
    }
}
