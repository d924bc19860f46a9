//! The candle side: `CustomOp`s that take candle's CUDA storage, build the flashcore problem
//! (`crate::args`), and queue flashcore's kernels on candle's own stream.

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, OnceLock};

use candle::backend::{BackendDevice, BackendStorage};
use candle::cuda_backend::cudarc::driver::{
    CudaSlice, CudaStream, CudaView, DevicePtr, DeviceRepr,
};
use candle::cuda_backend::{CudaDType, CudaDevice, CudaStorageSlice, DeviceId};
use candle::{CpuStorage, CudaStorage, DType, Layout, Result, Shape, Storage, StorageRef, Tensor};
use flashcore::{
    Attention, AttentionProblem, AttentionTensors, BackwardTensors, DeviceTables, KvAppend, KvRef,
    TensorMut, TensorRef,
};
use half::{bf16, f16};

use crate::args;
use crate::attn::{backward_problem, FlashAttn, FlashAttnVarLen};
use crate::fp8::FlashAttnFp8;
use crate::kvcache::{refused, FlashAttnKvCache};

fn error(e: impl std::fmt::Display) -> candle::Error {
    candle::Error::msg(format!("flashcore: {e}"))
}

/// One flashcore `Device` per candle CUDA device (candle's `DeviceId`: one context and stream),
/// made with `Device::from_stream` on candle's stream, so every call queues behind candle's own
/// work there. Compiled modules are cached per context by flashcore itself.
pub fn flashcore_device(dev: &CudaDevice) -> Result<Arc<flashcore::Device>> {
    static DEVICES: OnceLock<Mutex<HashMap<DeviceId, Arc<flashcore::Device>>>> = OnceLock::new();
    let mut map = DEVICES.get_or_init(Default::default).lock().unwrap();
    if let Some(d) = map.get(&dev.id()) {
        return Ok(d.clone());
    }
    let d = Arc::new(flashcore::Device::from_stream(dev.cuda_stream()).map_err(error)?);
    map.insert(dev.id(), d.clone());
    Ok(d)
}

/// Q/K/V data from `start_offset` to the end of the buffer, as flashcore's 16-bit view.
fn half_view<'a, T: CudaDType + 'static>(
    s: &'a CudaStorage,
    l: &Layout,
) -> Result<CudaView<'a, u16>> {
    let slice = s.as_cuda_slice::<T>()?;
    let v = slice.slice(l.start_offset()..);
    // SAFETY: f16 and bf16 are 16-bit; flashcore reads them as raw 16-bit words tagged by dtype.
    unsafe { v.transmute::<u16>(v.len()) }.ok_or_else(|| error("16-bit view"))
}

/// An `F8E4M3` tensor (an fp8 KV cache, or fp8 Q/K/V) from `start_offset` to the end of its
/// buffer, as the e4m3 bytes flashcore reads.
fn e4m3_view<'a>(s: &'a CudaStorage, l: &Layout, name: &str) -> Result<CudaView<'a, u8>> {
    let CudaStorageSlice::F8E4M3(slice) = &s.slice else {
        candle::bail!("{name} must be f8e4m3, got {:?}", s.dtype())
    };
    let v = slice.slice(l.start_offset()..);
    // SAFETY: an e4m3 element is one byte; flashcore reads them as raw bytes.
    unsafe { v.transmute::<u8>(v.len()) }.ok_or_else(|| error("e4m3 view"))
}

/// K or V as the problem reads them: 16-bit elements of `T`, or e4m3 bytes (`Modes::kv_fp8`).
fn kv_ref<'a, T: CudaDType + 'static>(
    s: &'a CudaStorage,
    l: &Layout,
    problem: &AttentionProblem,
    name: &str,
) -> Result<KvRef<'a>> {
    Ok(match problem.modes.kv_fp8 {
        Some(_) => KvRef::E4m3(e4m3_view(s, l, name)?),
        None => half_ref::<T>(s, l, problem.dtype)?.into(),
    })
}

/// A contiguous tensor (`k_new`, `v_new`) as flashcore's 16-bit view of exactly its elements.
fn contiguous16<'a, T: CudaDType + 'static>(
    s: &'a CudaStorage,
    l: &Layout,
    name: &str,
) -> Result<CudaView<'a, u16>> {
    let Some((a, b)) = l.contiguous_offsets() else {
        candle::bail!("{name} must be contiguous")
    };
    let v = s.as_cuda_slice::<T>()?.slice(a..b);
    // SAFETY: as in `half_view`.
    unsafe { v.transmute::<u16>(b - a) }.ok_or_else(|| error("16-bit view"))
}

fn reslice<'a, E>(t: &'a Option<CudaView<'_, E>>) -> Option<CudaView<'a, E>> {
    t.as_ref().map(|v| v.slice(..))
}

fn cuda<'a>(s: &'a StorageRef<'_>, name: &str) -> Result<&'a CudaStorage> {
    match &**s {
        Storage::Cuda(c) => Ok(c),
        _ => candle::bail!("{name} must be a cuda tensor"),
    }
}

/// A u32/i32 table (cu_seqlens, seqused_k, block table; mm_prefix_ranges, whose i32-only rule
/// `args` applies first), contiguous, as i32.
fn table_i32<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    dev: &CudaDevice,
    name: &str,
) -> Result<CudaView<'a, i32>> {
    if !s.device().same_device(dev) {
        candle::bail!("{name} is on another device than q");
    }
    let Some((o1, o2)) = l.contiguous_offsets() else {
        candle::bail!("{name} has to be contiguous")
    };
    let v = match s.dtype() {
        DType::U32 => {
            let v = s.as_cuda_slice::<u32>()?.slice(o1..o2);
            // SAFETY: same size; entries are below 2^31 by flashcore's contract on the tables.
            unsafe { v.transmute::<i32>(o2 - o1) }
        }
        DType::I32 => Some(s.as_cuda_slice::<i32>()?.slice(o1..o2)),
        dt => candle::bail!("{name} must be u32 or i32, got {dt:?}"),
    };
    v.ok_or_else(|| error(format!("{name} view")))
}

/// A descale table (`k_descale`/`v_descale`, f32, whose layout the rules have read as a table of
/// `len` entries from its first element: contiguous or expanded).
fn descale_view<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    dev: &CudaDevice,
    name: &str,
    len: usize,
) -> Result<CudaView<'a, f32>> {
    if !s.device().same_device(dev) {
        candle::bail!("{name} is on another device than q");
    }
    let o = l.start_offset();
    s.as_cuda_slice::<f32>()?
        .try_slice(o..o + len)
        .ok_or_else(|| error(format!("{name}: {len} entries past its offset {o}")))
}

fn alibi_view<'a>(s: &'a CudaStorage, l: &Layout, dev: &CudaDevice) -> Result<CudaView<'a, f32>> {
    if s.dtype() != DType::F32 {
        candle::bail!(
            "DType mismatch alibi_slopes {:?}, expected {:?}",
            s.dtype(),
            DType::F32
        );
    }
    if !s.device().same_device(dev) {
        candle::bail!("alibi_slopes is on another device than q");
    }
    let Some((o1, o2)) = l.contiguous_offsets() else {
        candle::bail!("alibi_slopes has to be contiguous")
    };
    Ok(s.as_cuda_slice::<f32>()?.slice(o1..o2))
}

fn dtype_of(name: &str, q: DType, k: DType, v: DType) -> Result<flashcore::DType> {
    args::dtype_of(name, q.as_str(), k.as_str(), v.as_str()).map_err(refused)
}

/// Runs `f` with the fastest compiled-in generation first (`flashcore::best_for`'s order),
/// falling through to the next one only where a generation answers `Unsupported` before
/// launching anything (e.g. a strided view whose base breaks its 16-byte alignment); the error
/// lists every generation's reason when none takes the call.
fn run(
    problem: &AttentionProblem,
    device: &flashcore::Device,
    mut f: impl FnMut(&dyn Attention) -> std::result::Result<(), flashcore::Error>,
) -> Result<()> {
    let mut kernels = flashcore::kernels();
    if let Some(best) = flashcore::best_for(problem, device.info()) {
        kernels.retain(|k| k.name() != best.name());
        kernels.insert(0, best);
    }
    flashcore::first_that_takes(kernels, |k| f(k))
        .map(|_| ())
        .map_err(error)
}

/// O's shape: `q`'s with V's head dim last (FlashAttention 3's `headdim_v`; `q`'s own when V's
/// head dim is Q's).
fn o_shape(q: &Shape, problem: &AttentionProblem) -> Shape {
    Shape::from(args::o_dims(q.dims(), problem.head_dim_v()))
}

/// Output O ([`o_shape`], contiguous) and the f32 LSE flashcore writes beside it.
fn alloc_out<T: CudaDType + DeviceRepr + 'static>(
    dev: &CudaDevice,
    problem: &AttentionProblem,
    q_shape: &Shape,
) -> Result<(CudaSlice<T>, CudaSlice<f32>)> {
    // SAFETY: every element of O and LSE is written by the kernels (rows that see no key get
    // O = 0, LSE = +inf).
    let o = unsafe { dev.alloc::<T>(o_shape(q_shape, problem).elem_count())? };
    let lse = unsafe { dev.alloc::<f32>(problem.lse_len().max(1))? };
    Ok((o, lse))
}

fn out_view<T: DeviceRepr>(o: &mut CudaSlice<T>, dtype: flashcore::DType) -> Result<TensorMut<'_>> {
    let n = o.len();
    // SAFETY: as in `half_view`.
    let data = unsafe { o.transmute_mut::<u16>(n) }.ok_or_else(|| error("16-bit view"))?;
    Ok(TensorMut { data, dtype })
}

/// An input tensor as flashcore's 16-bit view ([`half_view`]), tagged with its dtype.
fn half_ref<'a, T: CudaDType + 'static>(
    s: &'a CudaStorage,
    l: &Layout,
    dtype: flashcore::DType,
) -> Result<TensorRef<'a>> {
    Ok(TensorRef {
        data: half_view::<T>(s, l)?,
        dtype,
    })
}

/// A tensor's storage and layout, as `Tensor::storage_and_layout` lends them.
type Lent<'a> = (StorageRef<'a>, &'a Layout);

/// An optional table ([`table_i32`]).
fn optional_table<'a>(
    t: &'a Option<Lent<'_>>,
    dev: &CudaDevice,
    name: &str,
) -> Result<Option<CudaView<'a, i32>>> {
    t.as_ref()
        .map(|(s, l)| table_i32(cuda(s, name)?, l, dev, name))
        .transpose()
}

/// Optional ALiBi slopes ([`alibi_view`]).
fn optional_alibi<'a>(
    a: &'a Option<Lent<'_>>,
    dev: &CudaDevice,
) -> Result<Option<CudaView<'a, f32>>> {
    a.as_ref()
        .map(|(s, l)| alibi_view(cuda(s, "alibi_slopes")?, l, dev))
        .transpose()
}

/// An optional descale table ([`descale_view`]).
fn optional_descale<'a>(
    t: &'a Option<Lent<'_>>,
    dev: &CudaDevice,
    name: &str,
    len: usize,
) -> Result<Option<CudaView<'a, f32>>> {
    t.as_ref()
        .map(|(s, l)| descale_view(cuda(s, name)?, l, dev, name, len))
        .transpose()
}

/// The `CustomOp3` methods every (q, k, v) op shares: its name and no CPU path.
macro_rules! named_cuda_op {
    ($name:expr) => {
        fn name(&self) -> &'static str {
            $name
        }

        fn cpu_fwd(
            &self,
            _: &CpuStorage,
            _: &Layout,
            _: &CpuStorage,
            _: &Layout,
            _: &CpuStorage,
            _: &Layout,
        ) -> Result<(CpuStorage, Shape)> {
            candle::bail!("no cpu support for flash-attn (flashcore runs on CUDA devices)")
        }
    };
}

/// [`named_cuda_op`] and the CUDA forward of a 16-bit (q, k, v) op, dispatched by dtype to the
/// op's own `fwd::<T>`.
macro_rules! qkv_op {
    ($name:expr, $label:expr) => {
        named_cuda_op!($name);

        fn cuda_fwd(
            &self,
            q: &CudaStorage,
            q_l: &Layout,
            k: &CudaStorage,
            k_l: &Layout,
            v: &CudaStorage,
            v_l: &Layout,
        ) -> Result<(CudaStorage, Shape)> {
            let dtype = dtype_of($label, q.dtype(), k.dtype(), v.dtype())?;
            let qkv = Qkv {
                q: (q, q_l),
                k: (k, k_l),
                v: (v, v_l),
            };
            match dtype {
                flashcore::DType::F16 => self.fwd::<f16>(dtype, qkv),
                flashcore::DType::Bf16 => self.fwd::<bf16>(dtype, qkv),
            }
        }
    };
}

/// Q, K and V as candle hands them to a `CustomOp3`: each storage with its layout.
#[derive(Clone, Copy)]
struct Qkv<'a> {
    q: (&'a CudaStorage, &'a Layout),
    k: (&'a CudaStorage, &'a Layout),
    v: (&'a CudaStorage, &'a Layout),
}

impl<'a> Qkv<'a> {
    /// The layouts of Q, K and V, as the argument rules take them.
    fn layouts(&self) -> [&'a Layout; 3] {
        [self.q.1, self.k.1, self.v.1]
    }
}

/// `tables` lent again, for a second call that reads the same tables.
fn reborrow<'a>(t: &'a DeviceTables<'_>) -> DeviceTables<'a> {
    DeviceTables {
        cu_seqlens_q: reslice(&t.cu_seqlens_q),
        cu_seqlens_k: reslice(&t.cu_seqlens_k),
        seqused_k: reslice(&t.seqused_k),
        block_table: reslice(&t.block_table),
        alibi_slopes: reslice(&t.alibi_slopes),
        mm_prefix_ranges: reslice(&t.mm_prefix_ranges),
        k_descale: reslice(&t.k_descale),
        v_descale: reslice(&t.v_descale),
        q_descale: reslice(&t.q_descale),
    }
}

/// The forward of Q, K, V with `tables`, on candle's stream: O
/// (`q`'s shape, contiguous) and the LSE.
fn forward_into<T: CudaDType + DeviceRepr + 'static>(
    problem: &AttentionProblem,
    dtype: flashcore::DType,
    qkv: Qkv<'_>,
    tables: DeviceTables<'_>,
) -> Result<(CudaSlice<T>, CudaSlice<f32>)> {
    let Qkv {
        q: (q, q_l),
        k: (k, k_l),
        v: (v, v_l),
    } = qkv;
    let dev = q.device();
    let (mut o, mut lse) = alloc_out::<T>(dev, problem, q_l.shape())?;
    let device = flashcore_device(dev)?;
    let stream = dev.cuda_stream();
    {
        let mut tensors = AttentionTensors {
            q: half_ref::<T>(q, q_l, dtype)?.into(),
            k: kv_ref::<T>(k, k_l, problem, "k")?,
            v: kv_ref::<T>(v, v_l, problem, "v")?,
            o: out_view(&mut o, dtype)?,
            lse: lse.slice_mut(..),
            tables,
        };
        run(problem, &device, |kern| {
            kern.forward_on(&device, &stream, problem, &mut tensors)
        })?;
    }
    Ok((o, lse))
}

/// A (q, k, v) op whose backward candle's autograd runs through [`Grads`]: the problem and the
/// device tables of a call, which the forward and the backward build alike (the backward takes
/// the forward's problem, modes included, and reads the same tables).
trait Differentiable: Clone + Send + Sync + 'static {
    /// The candle name of the backward op.
    const GRADS: &'static str;
    /// How errors name the backward.
    const LABEL: &'static str;

    /// The problem of a call on these layouts.
    fn problem_of(
        &self,
        dtype: flashcore::DType,
        layouts: [&Layout; 3],
    ) -> Result<AttentionProblem>;

    /// Calls `f` with the device tables of a call of `problem` on `dev` (borrowed from the
    /// op's tensors for the duration of `f`).
    fn with_tables<R>(
        &self,
        dev: &CudaDevice,
        problem: &AttentionProblem,
        f: impl FnOnce(DeviceTables<'_>) -> Result<R>,
    ) -> Result<R>;

    /// The op's output and its shape: O of a forward call.
    fn fwd<T: CudaDType + DeviceRepr + 'static>(
        &self,
        dtype: flashcore::DType,
        qkv: Qkv<'_>,
    ) -> Result<(CudaStorage, Shape)> {
        let (q, q_l) = qkv.q;
        let problem = self.problem_of(dtype, qkv.layouts())?;
        let (o, _) = self.with_tables(q.device(), &problem, |t| {
            forward_into::<T>(&problem, dtype, qkv, t)
        })?;
        Ok((
            CudaStorage::wrap_cuda_slice(o, q.device().clone()),
            o_shape(q_l.shape(), &problem),
        ))
    }
}

/// The backward of a [`Differentiable`] op's call, for candle's `CustomOp3::bwd`: dQ, dK, dV of
/// Q, K, V (each in its input's shape) from the output `res` and its gradient `grad_res`. Q, K,
/// V, O and dO are made contiguous; the three gradients come back from one op as one buffer.
fn grads_of<Op: Differentiable>(
    op: &Op,
    [q, k, v]: [&Tensor; 3],
    res: &Tensor,
    grad_res: &Tensor,
) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
    let grads = Grads {
        attn: op.clone(),
        o: res.contiguous()?,
        d_o: grad_res.contiguous()?,
    };
    let g = q.apply_op3_no_bwd(&k, &v, &grads)?;
    let (nq, nk, nv) = (q.elem_count(), k.elem_count(), v.elem_count());
    Ok((
        Some(g.narrow(0, 0, nq)?.reshape(q.shape())?),
        Some(g.narrow(0, nq, nk)?.reshape(k.shape())?),
        Some(g.narrow(0, nq + nk, nv)?.reshape(v.shape())?),
    ))
}

/// The backward of a [`Differentiable`] op as an op of (Q, K, V), holding O and dO: its output
/// is dQ, dK and dV back to back (flat). The forward's LSE is not kept by the forward op
/// (candle-flash-attn's ops are stateless), so it is recomputed here by the same forward kernel
/// choice, on the same problem and tables.
struct Grads<Op> {
    attn: Op,
    o: Tensor,
    d_o: Tensor,
}

impl<Op: Differentiable> Grads<Op> {
    fn fwd<T: CudaDType + DeviceRepr + 'static>(
        &self,
        dtype: flashcore::DType,
        qkv: Qkv<'_>,
    ) -> Result<(CudaStorage, Shape)> {
        let Qkv {
            q: (q, q_l),
            k: (k, k_l),
            v: (v, v_l),
        } = qkv;
        let dev = q.device();
        let problem = backward_problem(self.attn.problem_of(dtype, qkv.layouts())?)?;
        let device = flashcore_device(dev)?;
        let stream = dev.cuda_stream();
        let (o_s, o_l) = self.o.storage_and_layout();
        let (do_s, do_l) = self.d_o.storage_and_layout();
        let (nq, nk, nv) = (
            q_l.shape().elem_count(),
            k_l.shape().elem_count(),
            v_l.shape().elem_count(),
        );
        // SAFETY: the backward kernels write every element of dQ, dK and dV.
        let mut grads = unsafe { dev.alloc::<T>(nq + nk + nv)? };
        self.attn.with_tables(dev, &problem, |tables| {
            // The forward again, for the LSE (its O is dropped: dO·O takes the caller's O).
            let (_, lse) = forward_into::<T>(&problem, dtype, qkv, reborrow(&tables))?;
            // SAFETY: as in `half_view`.
            let mut all = unsafe { grads.transmute_mut::<u16>(nq + nk + nv) }
                .ok_or_else(|| error("16-bit view"))?;
            let (dq, mut rest) = all.split_at_mut(nq);
            let (dk, dv) = rest.split_at_mut(nk);
            let r = |data| TensorRef { data, dtype };
            let w = |data| TensorMut { data, dtype };
            let mut t = BackwardTensors {
                q: r(half_view::<T>(q, q_l)?),
                k: r(half_view::<T>(k, k_l)?),
                v: r(half_view::<T>(v, v_l)?),
                o: r(half_view::<T>(cuda(&o_s, "o")?, o_l)?),
                d_o: r(half_view::<T>(cuda(&do_s, "d_o")?, do_l)?),
                lse: lse.slice(..),
                dq: w(dq),
                dk: w(dk),
                dv: w(dv),
            };
            flashcore::first_backward_that_takes(flashcore::backward_kernels(), |kern| {
                flashcore::backward::backward_on_with_tables(
                    kern, &device, &stream, &problem, &mut t, &tables,
                )
            })
            .map_err(error)?;
            Ok(())
        })?;
        Ok((
            CudaStorage::wrap_cuda_slice(grads, dev.clone()),
            Shape::from(nq + nk + nv),
        ))
    }
}

impl<Op: Differentiable> candle::CustomOp3 for Grads<Op> {
    qkv_op!(Op::GRADS, Op::LABEL);
}

impl Differentiable for FlashAttn {
    const GRADS: &'static str = "flashcore-flash-attn-bwd";
    const LABEL: &'static str = "flash-attn backward";

    fn problem_of(
        &self,
        dtype: flashcore::DType,
        layouts: [&Layout; 3],
    ) -> Result<AttentionProblem> {
        self.problem(dtype, layouts)
    }

    fn with_tables<R>(
        &self,
        dev: &CudaDevice,
        _: &AttentionProblem,
        f: impl FnOnce(DeviceTables<'_>) -> Result<R>,
    ) -> Result<R> {
        let alibi = self.alibi_slopes.as_ref().map(|a| a.storage_and_layout());
        f(DeviceTables {
            alibi_slopes: optional_alibi(&alibi, dev)?,
            ..Default::default()
        })
    }
}

impl candle::CustomOp3 for FlashAttn {
    qkv_op!("flashcore-flash-attn", "flash-attn");

    /// dQ, dK, dV through flashcore's backward kernels, with the forward's modes (causal,
    /// sliding windows, softcap, ALiBi).
    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        grads_of(self, [q, k, v], res, grad_res)
    }
}

impl Differentiable for FlashAttnVarLen {
    const GRADS: &'static str = "flashcore-flash-attn-varlen-bwd";
    const LABEL: &'static str = "flash-attn-varlen backward";

    fn problem_of(
        &self,
        dtype: flashcore::DType,
        layouts: [&Layout; 3],
    ) -> Result<AttentionProblem> {
        self.problem(dtype, layouts)
    }

    /// cu_seqlens (packed), or seqused_k and the block table (paged), the ALiBi slopes and the
    /// mm_prefix_ranges.
    fn with_tables<R>(
        &self,
        dev: &CudaDevice,
        problem: &AttentionProblem,
        f: impl FnOnce(DeviceTables<'_>) -> Result<R>,
    ) -> Result<R> {
        let batch = problem.batch;
        // Paged: flashcore reads each sequence's key count from seqused_k, which is the
        // difference of consecutive cumulative seqlens_k (computed on the device, no sync).
        let seqused = match &self.block_table {
            Some(_) => {
                let s = &self.seqlens_k;
                Some((s.narrow(0, 1, batch)? - s.narrow(0, 0, batch)?)?.contiguous()?)
            }
            None => None,
        };
        let cu_q = self.seqlens_q.storage_and_layout();
        let cu_k = self.seqlens_k.storage_and_layout();
        let used = seqused.as_ref().map(|t| t.storage_and_layout());
        let table = self.block_table.as_ref().map(|t| t.storage_and_layout());
        let alibi = self.alibi_slopes.as_ref().map(|a| a.storage_and_layout());
        // An empty table (no ranges) is no mode: the problem then takes no table either.
        let ranges = problem
            .modes
            .mm_prefix
            .and(self.mm_prefix_ranges.as_ref())
            .map(|t| t.storage_and_layout());
        f(DeviceTables {
            cu_seqlens_q: Some(table_i32(
                cuda(&cu_q.0, "seqlens_q")?,
                cu_q.1,
                dev,
                "seqlens_q",
            )?),
            cu_seqlens_k: match &used {
                None => Some(table_i32(
                    cuda(&cu_k.0, "seqlens_k")?,
                    cu_k.1,
                    dev,
                    "seqlens_k",
                )?),
                Some(_) => None,
            },
            seqused_k: optional_table(&used, dev, "seqused_k")?,
            block_table: optional_table(&table, dev, "block_table")?,
            alibi_slopes: optional_alibi(&alibi, dev)?,
            mm_prefix_ranges: optional_table(&ranges, dev, "mm_prefix_ranges")?,
            ..Default::default()
        })
    }
}

impl candle::CustomOp3 for FlashAttnVarLen {
    qkv_op!("flashcore-flash-attn-varlen", "flash-attn-varlen");

    /// dQ, dK, dV of the packed Q, K, V through flashcore's backward kernels, with the forward's
    /// modes and tables (cumulative lengths, ALiBi slopes). A paged call or one with
    /// mm_prefix_ranges has none: its `backward()` is an error saying so.
    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        grads_of(self, [q, k, v], res, grad_res)
    }
}

impl candle::CustomOp3 for FlashAttnFp8 {
    named_cuda_op!("flashcore-flash-attn-fp8");

    fn cuda_fwd(
        &self,
        q: &CudaStorage,
        q_l: &Layout,
        k: &CudaStorage,
        k_l: &Layout,
        v: &CudaStorage,
        v_l: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let problem = self.problem((q.dtype(), q_l), (k.dtype(), k_l), (v.dtype(), v_l))?;
        let dev = q.device();
        let n = problem
            .modes
            .kv_fp8
            .map_or(0, |s| s.table_len(problem.batch, problem.heads_kv));
        // The rules read each descale as a table of `n` entries from its first element.
        let q_d = Some(self.q_descale.storage_and_layout());
        let k_d = Some(self.k_descale.storage_and_layout());
        let v_d = Some(self.v_descale.storage_and_layout());
        let tables = DeviceTables {
            q_descale: optional_descale(&q_d, dev, "q_descale", n)?,
            k_descale: optional_descale(&k_d, dev, "k_descale", n)?,
            v_descale: optional_descale(&v_d, dev, "v_descale", n)?,
            ..Default::default()
        };
        let (mut o, mut lse) = alloc_out::<bf16>(dev, &problem, q_l.shape())?;
        let device = flashcore_device(dev)?;
        let stream = dev.cuda_stream();
        {
            let mut tensors = AttentionTensors::with_e4m3_qkv(
                FlashAttnFp8::OUT,
                e4m3_view(q, q_l, "q")?,
                e4m3_view(k, k_l, "k")?,
                e4m3_view(v, v_l, "v")?,
                out_view(&mut o, FlashAttnFp8::OUT)?.data,
                lse.slice_mut(..),
            )
            .with_tables(tables);
            run(&problem, &device, |kern| {
                kern.forward_on(&device, &stream, &problem, &mut tensors)
            })?;
        }
        Ok((
            CudaStorage::wrap_cuda_slice(o, dev.clone()),
            o_shape(q_l.shape(), &problem),
        ))
    }

    /// The fp8 forward has no backward (neither has FlashAttention 3's): an error, never a
    /// gradient.
    fn bwd(
        &self,
        _: &Tensor,
        _: &Tensor,
        _: &Tensor,
        _: &Tensor,
        _: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        candle::bail!(
            "flashcore: flash_attn_fp8 is a forward only (inference): it has no backward; \
             differentiate flash_attn on 16-bit inputs instead"
        )
    }
}

/// A writable alias of a candle tensor's device memory, never freed by us: the KV cache is
/// written in place by the append, while candle holds the storage (under its read lock; all
/// work is queued on candle's one stream, so candle's own readers are ordered behind it).
struct Alias<E>(ManuallyDrop<CudaSlice<E>>);

impl<E> Alias<E> {
    /// An alias of `v`'s memory.
    ///
    /// # Safety
    /// `v` must lie in a live allocation that outlives the alias.
    unsafe fn of(stream: &Arc<CudaStream>, v: &CudaView<'_, E>) -> Self {
        let (ptr, _guard) = v.device_ptr(stream);
        Alias(ManuallyDrop::new(
            stream.upgrade_device_ptr::<E>(ptr, v.len()),
        ))
    }
}

impl<E> Drop for Alias<E> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `leak` gives the memory back to its owner without freeing.
        let s = unsafe { ManuallyDrop::take(&mut self.0) };
        let _ = s.leak();
    }
}

impl FlashAttnKvCache {
    fn fwd<T: CudaDType + DeviceRepr + 'static>(
        &self,
        problem: &AttentionProblem,
        descales: (Option<&Tensor>, Option<&Tensor>),
        q: &CudaStorage,
        q_l: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let dev = q.device();
        let dtype = problem.dtype;
        let used = self.seqused_k.storage_and_layout();
        let table = self.block_table.as_ref().map(|t| t.storage_and_layout());
        let alibi = self.alibi_slopes.as_ref().map(|a| a.storage_and_layout());
        let k_d = descales.0.map(|t| t.storage_and_layout());
        let v_d = descales.1.map(|t| t.storage_and_layout());
        // The rules read each descale as a table of this many entries from its first element.
        let n_descale = problem
            .modes
            .kv_fp8
            .map_or(0, |s| s.table_len(problem.batch, problem.heads_kv));
        let tables = DeviceTables {
            seqused_k: Some(table_i32(
                cuda(&used.0, "seqused_k")?,
                used.1,
                dev,
                "seqused_k",
            )?),
            block_table: optional_table(&table, dev, "block_table")?,
            alibi_slopes: optional_alibi(&alibi, dev)?,
            k_descale: optional_descale(&k_d, dev, "k_descale", n_descale)?,
            v_descale: optional_descale(&v_d, dev, "v_descale", n_descale)?,
            ..Default::default()
        };
        let kc = self.k_cache.storage_and_layout();
        let vc = self.v_cache.storage_and_layout();
        let (kc_s, vc_s) = (cuda(&kc.0, "k_cache")?, cuda(&vc.0, "v_cache")?);
        let o = match (&self.k_new, &self.v_new) {
            (Some(k_new), Some(v_new)) => {
                let (mut o, mut lse) = alloc_out::<T>(dev, problem, q_l.shape())?;
                let device = flashcore_device(dev)?;
                let stream = dev.cuda_stream();
                let kn = k_new.storage_and_layout();
                let vn = v_new.storage_and_layout();
                let (kn_s, vn_s) = (cuda(&kn.0, "k_new")?, cuda(&vn.0, "v_new")?);
                let q16 = half_view::<T>(q, q_l)?;
                let kn16 = contiguous16::<T>(kn_s, kn.1, "k_new")?;
                let vn16 = contiguous16::<T>(vn_s, vn.1, "v_new")?;
                let n_o = o.len();
                // SAFETY: as in `half_view`.
                let mut o16 =
                    unsafe { o.transmute_mut::<u16>(n_o) }.ok_or_else(|| error("16-bit view"))?;
                let q_ref = || TensorRef {
                    data: q16.slice(..),
                    dtype,
                };
                let new = || KvAppend {
                    k_new: TensorRef {
                        data: kn16.slice(..),
                        dtype,
                    },
                    v_new: TensorRef {
                        data: vn16.slice(..),
                        dtype,
                    },
                };
                let t = || reborrow(&tables);
                // Aliases of the caches, written by the append. forward_with_kvcache (and its
                // e4m3 twin) checks everything before its first launch, so a generation that
                // answers Unsupported has written nothing.
                // SAFETY (both arms): the views lie inside the caches' allocations, which the
                // storage guards (`kc`, `vc`) keep alive past the aliases.
                if problem.modes.kv_fp8.is_some() {
                    let mut k_alias =
                        unsafe { Alias::of(&stream, &e4m3_view(kc_s, kc.1, "k_cache")?) };
                    let mut v_alias =
                        unsafe { Alias::of(&stream, &e4m3_view(vc_s, vc.1, "v_cache")?) };
                    let mut k_cache = k_alias.0.slice_mut(..);
                    let mut v_cache = v_alias.0.slice_mut(..);
                    run(problem, &device, |kern| {
                        flashcore::forward_with_e4m3_kvcache(
                            kern,
                            &device,
                            problem,
                            q_ref(),
                            &mut k_cache,
                            &mut v_cache,
                            new(),
                            TensorMut {
                                data: o16.slice_mut(..),
                                dtype,
                            },
                            lse.slice_mut(..),
                            t(),
                        )
                    })?;
                } else {
                    let mut k_alias = unsafe { Alias::of(&stream, &half_view::<T>(kc_s, kc.1)?) };
                    let mut v_alias = unsafe { Alias::of(&stream, &half_view::<T>(vc_s, vc.1)?) };
                    let mut k_cache = TensorMut {
                        data: k_alias.0.slice_mut(..),
                        dtype,
                    };
                    let mut v_cache = TensorMut {
                        data: v_alias.0.slice_mut(..),
                        dtype,
                    };
                    run(problem, &device, |kern| {
                        flashcore::forward_with_kvcache(
                            kern,
                            &device,
                            problem,
                            q_ref(),
                            &mut k_cache,
                            &mut v_cache,
                            new(),
                            TensorMut {
                                data: o16.slice_mut(..),
                                dtype,
                            },
                            lse.slice_mut(..),
                            t(),
                        )
                    })?;
                }
                o
            }
            _ => {
                let qkv = Qkv {
                    q: (q, q_l),
                    k: (kc_s, kc.1),
                    v: (vc_s, vc.1),
                };
                let (o, _) = forward_into::<T>(problem, dtype, qkv, tables)?;
                o
            }
        };
        Ok((
            CudaStorage::wrap_cuda_slice(o, dev.clone()),
            o_shape(q_l.shape(), problem),
        ))
    }
}

impl candle::CustomOp1 for FlashAttnKvCache {
    fn name(&self) -> &'static str {
        "flashcore-flash-attn-with-kvcache"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        candle::bail!("no cpu support for flash-attn (flashcore runs on CUDA devices)")
    }

    fn cuda_fwd(&self, q: &CudaStorage, q_l: &Layout) -> Result<(CudaStorage, Shape)> {
        let (k_descale, v_descale) = self.descales()?;
        let descales = (k_descale.as_ref(), v_descale.as_ref());
        let problem = self.problem(q.dtype(), q_l, descales)?;
        match problem.dtype {
            flashcore::DType::F16 => self.fwd::<f16>(&problem, descales, q, q_l),
            flashcore::DType::Bf16 => self.fwd::<bf16>(&problem, descales, q, q_l),
        }
    }
}
