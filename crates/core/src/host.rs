//! The convenience path: host ndarrays in, host ndarrays out, in f32 (rounded to the problem's
//! dtype on upload, widened back) or in the problem's own 16-bit type (`half::f16` /
//! `half::bf16`, uploaded as they are, no widening and, for standard-layout arrays, no copy).

use ndarray::{Array3, Array4, ArrayD, ArrayView4, ArrayViewD};

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, InvalidProblem};
use crate::modes::{HostTables, KvStorage};
use crate::plan::Attention;
use crate::problem::AttentionProblem;
use crate::tensors::{AttentionTensors, DeviceTables, KvRef, TensorMut, TensorRef};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element type of host arrays: `f32`, rounded to the problem's dtype on upload (outputs
/// widened back), or `half::f16` / `half::bf16`, taken as they are by a problem of that dtype
/// (outputs in it too; any other dtype is a `DTypeMismatch`).
pub trait HostElement: sealed::Sealed + Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The dtype these values already are, or `None` (f32: rounded to either).
    const DTYPE: Option<DType>;
    /// The value as `dtype`'s bits (`dtype` is `Self::DTYPE` where that is set).
    fn to_dtype_bits(self, dtype: DType) -> u16;
    /// `dtype`'s bits as a value of this type.
    fn from_dtype_bits(bits: u16, dtype: DType) -> Self;
    /// Contiguous values that already are 16-bit patterns, borrowed as such (no copy).
    fn as_bits(values: &[Self]) -> Option<&[u16]>;
    /// The value widened to f32, exactly.
    fn to_f32(self) -> f32;
}

impl HostElement for f32 {
    const DTYPE: Option<DType> = None;
    fn to_dtype_bits(self, dtype: DType) -> u16 {
        dtype.to_bits(self)
    }
    fn from_dtype_bits(bits: u16, dtype: DType) -> Self {
        dtype.from_bits(bits)
    }
    fn as_bits(_: &[Self]) -> Option<&[u16]> {
        None
    }
    fn to_f32(self) -> f32 {
        self
    }
}

/// The 16-bit types: their values are the dtype's bits, taken and borrowed as they are.
macro_rules! half_host_element {
    ($ty:ty, $dtype:expr) => {
        impl HostElement for $ty {
            const DTYPE: Option<DType> = Some($dtype);
            fn to_dtype_bits(self, dtype: DType) -> u16 {
                debug_assert_eq!(dtype, $dtype);
                self.to_bits()
            }
            fn from_dtype_bits(bits: u16, dtype: DType) -> Self {
                debug_assert_eq!(dtype, $dtype);
                <$ty>::from_bits(bits)
            }
            fn as_bits(values: &[Self]) -> Option<&[u16]> {
                use half::slice::HalfFloatSliceExt;
                Some(values.reinterpret_cast())
            }
            fn to_f32(self) -> f32 {
                <$ty>::to_f32(self)
            }
        }
    };
}

half_host_element!(half::f16, DType::F16);
half_host_element!(half::bf16, DType::Bf16);

/// Output of a host-side call: O in the problem's layout order and the inputs' element type,
/// LSE (always f32) as [batch, heads_q, seq_q].
#[derive(Clone, Debug)]
pub struct HostOutput<E = f32> {
    pub o: Array4<E>,
    pub lse: Array3<f32>,
}

/// The bit pattern of a quiet NaN in `dtype`: outputs are poisoned with it before a launch so
/// an element the kernel never writes cannot pass for a result.
pub fn nan_bits(dtype: DType) -> u16 {
    match dtype {
        DType::F16 => 0x7e00,
        DType::Bf16 => 0x7fc0,
    }
}

/// Converts an array to the dtype's bits in standard (row-major) order.
pub fn to_bits<E: HostElement>(dtype: DType, a: &ArrayView4<E>) -> Vec<u16> {
    a.iter().map(|&x| x.to_dtype_bits(dtype)).collect()
}

/// Runs `attention` on host arrays laid out as the problem's `layout` says (dense), on the
/// device's stream, and waits for the result. `E` is `f32` (rounded to the problem's dtype) or
/// the problem's own `half::f16` / `half::bf16` (taken as is); O comes back as `E`.
pub fn forward_host<'a, E: HostElement>(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    q: ArrayView4<'a, E>,
    k: ArrayView4<'a, E>,
    v: ArrayView4<'a, E>,
) -> Result<HostOutput<E>, Error> {
    let out = forward_host_modes(
        attention,
        device,
        problem,
        HostInputs::new(q.into_dyn(), k.into_dyn(), v.into_dyn()),
    )?;
    let (b, hq, sq) = (problem.batch, problem.heads_q, problem.seq_q);
    Ok(HostOutput {
        o: out
            .o
            .into_dimensionality()
            .expect("a dense problem's O is 4-D"),
        lse: out
            .lse
            .into_shape_with_order((b, hq, sq))
            .expect("a dense problem's LSE is [b, hq, sq]"),
    })
}

/// Host inputs of any problem (`docs/MODES.md`), in storage order:
/// - `q`: the layout's 4-D shape, or `[total_q, heads_q, head_dim]` for packed Q;
/// - `k`, `v`: the layout's 4-D shape (a contiguous cache: seq = capacity),
///   `[total_k, heads_kv, head_dim]` packed, or `[num_blocks, block_size, heads_kv, head_dim]` paged
///   (V's last dim is `head_dim_v`, [`v_o_shapes`]); with `Modes::kv_fp8`, the stored e4m3
///   values as numbers (unscaled: the descales go in `tables`), each exactly an e4m3 value
///   ([`e4m3_bytes`]); with `Modes::q_fp8`, Q likewise (its descale `tables.q_descale`);
/// - `k_new`, `v_new`: `[batch, seqlen_new, heads_kv, head_dim]` when the problem appends (v_new's
///   last dim `head_dim_v`);
/// - `tables`: the per-sequence tables the modes need, validated before anything launches.
///
/// Elements are `f32` or the problem's 16-bit type ([`HostElement`]), all of one type.
pub struct HostInputs<'a, E = f32> {
    pub q: ArrayViewD<'a, E>,
    pub k: ArrayViewD<'a, E>,
    pub v: ArrayViewD<'a, E>,
    pub k_new: Option<ArrayViewD<'a, E>>,
    pub v_new: Option<ArrayViewD<'a, E>>,
    pub tables: HostTables<'a>,
}

impl<'a, E> HostInputs<'a, E> {
    /// Q, K, V with no append and no tables (a dense problem's inputs).
    pub fn new(q: ArrayViewD<'a, E>, k: ArrayViewD<'a, E>, v: ArrayViewD<'a, E>) -> Self {
        HostInputs {
            q,
            k,
            v,
            k_new: None,
            v_new: None,
            tables: HostTables::default(),
        }
    }

    /// With `k_new`/`v_new` written into the cache before attending (each when given).
    pub fn with_append(
        self,
        k_new: Option<ArrayViewD<'a, E>>,
        v_new: Option<ArrayViewD<'a, E>>,
    ) -> Self {
        HostInputs {
            k_new,
            v_new,
            ..self
        }
    }

    /// With the tables the problem's modes read.
    pub fn with_tables(self, tables: HostTables<'a>) -> Self {
        HostInputs { tables, ..self }
    }
}

/// Outputs in storage order: O shaped like Q (with V's head dim last), LSE `[batch, heads_q, seq_q]` or `[heads_q, total_q]`;
/// after an append, the caches as they are after the call (an e4m3 cache as its stored values,
/// unscaled, as it went in). O and the caches are in the inputs' element type, LSE in f32.
#[derive(Clone, Debug)]
pub struct HostOutputs<E = f32> {
    pub o: ArrayD<E>,
    pub lse: ArrayD<f32>,
    pub k_cache: Option<ArrayD<E>>,
    pub v_cache: Option<ArrayD<E>>,
}

/// Storage shapes of Q (and O), K (and V), and LSE.
pub type StorageShapes = (Vec<usize>, Vec<usize>, Vec<usize>);

/// Expected storage shapes of Q (and O), K (and V) and LSE for a problem. With a V head dim of
/// its own ([`AttentionProblem::head_dim_v`]) V and O are [`v_o_shapes`] instead.
pub fn storage_shapes(problem: &AttentionProblem) -> StorageShapes {
    let (q, kv) = shapes_at(problem, problem.head_dim);
    let p = problem;
    let lse = match p.modes.packed_q {
        Some(total) => vec![p.heads_q, total],
        None => vec![p.batch, p.heads_q, p.seq_q],
    };
    (q, kv, lse)
}

/// Expected storage shapes of V and O: K's and Q's with [`AttentionProblem::head_dim_v`] last.
pub fn v_o_shapes(problem: &AttentionProblem) -> (Vec<usize>, Vec<usize>) {
    let (o, v) = shapes_at(problem, problem.head_dim_v());
    (v, o)
}

/// Q-like and K-like storage shapes with rows `d` wide.
fn shapes_at(p: &AttentionProblem, d: usize) -> (Vec<usize>, Vec<usize>) {
    let (b, hq, hkv, sq, sk) = (p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k);
    let q = match p.modes.packed_q {
        Some(total) => vec![total, hq, d],
        None => p.layout.shape(b, hq, sq, d).to_vec(),
    };
    let kv = match p.modes.kv {
        KvStorage::Dense => p.layout.shape(b, hkv, sk, d).to_vec(),
        KvStorage::Packed { total_k } => vec![total_k, hkv, d],
        KvStorage::Paged {
            num_blocks,
            block_size,
            ..
        } => vec![num_blocks, block_size, hkv, d],
    };
    (q, kv)
}

fn check_shape_d<E>(
    tensor: &'static str,
    a: &ArrayViewD<E>,
    expected: &[usize],
) -> Result<(), InvalidProblem> {
    if a.shape() != expected {
        return Err(InvalidProblem::ShapeMismatch {
            tensor,
            got: a.shape().to_vec(),
            expected: expected.to_vec(),
        });
    }
    Ok(())
}

/// An array's elements as `dtype`'s bits in standard (row-major) order: borrowed from the array
/// itself when it is standard-layout and already holds them (`f16`/`bf16` of the dtype),
/// converted otherwise (f32 rounded, or a non-contiguous view gathered).
pub fn host_bits<'x, E: HostElement>(
    a: &ArrayViewD<'x, E>,
    dtype: DType,
) -> std::borrow::Cow<'x, [u16]> {
    match a.to_slice().and_then(E::as_bits) {
        Some(bits) => std::borrow::Cow::Borrowed(bits),
        None => a.iter().map(|&x| x.to_dtype_bits(dtype)).collect(),
    }
}

/// An array of e4m3 values (`Modes::kv_fp8`, `Modes::q_fp8`: the stored values, unscaled) as their bytes in
/// standard order. The host path does not quantize: an element that is NaN, or not exactly an
/// e4m3 value once widened to f32, is `NotE4m3`, naming `tensor` and its flat index.
pub fn e4m3_bytes<E: HostElement>(
    tensor: &'static str,
    a: &ArrayViewD<'_, E>,
) -> Result<Vec<u8>, InvalidProblem> {
    a.iter()
        .enumerate()
        .map(|(index, &x)| {
            let value = x.to_f32();
            let byte = float8::F8E4M3::from_f32(value);
            // NaN never compares equal, so it is refused with the values that do not round-trip.
            if byte.to_f32() == value {
                Ok(byte.to_bits())
            } else {
                Err(InvalidProblem::NotE4m3 {
                    tensor,
                    index,
                    value,
                })
            }
        })
        .collect()
}

/// Everything the host path checks before touching the device: the problem, dense layouts
/// only, the element type against the dtype, every array's shape, the tables. Returns the
/// storage shapes of Q (and O), K (and V) and LSE.
pub fn check_host_inputs<E: HostElement>(
    kernel: &'static str,
    problem: &AttentionProblem,
    inputs: &HostInputs<'_, E>,
) -> Result<StorageShapes, Error> {
    problem.validate()?;
    if problem.custom_strides.is_some() {
        return Err(Error::Unsupported(crate::error::Unsupported::new(
            kernel,
            "the host path takes dense layouts only; use device tensors for custom strides",
        )));
    }
    if let Some(got) = E::DTYPE.filter(|&d| d != problem.dtype) {
        return Err(InvalidProblem::DTypeMismatch {
            tensor: "q",
            got,
            expected: problem.dtype,
        }
        .into());
    }
    let (q_shape, kv_shape, lse_shape) = storage_shapes(problem);
    check_shape_d("q", &inputs.q, &q_shape)?;
    check_shape_d("k", &inputs.k, &kv_shape)?;
    check_shape_d("v", &inputs.v, &v_o_shapes(problem).0)?;
    // v_new's rows are V's width, as V's are.
    let new_shape = |d: usize| {
        problem
            .modes
            .append
            .map(|n| vec![problem.batch, n, problem.heads_kv, d])
    };
    for (name, a, d) in [
        ("k_new", &inputs.k_new, problem.head_dim),
        ("v_new", &inputs.v_new, problem.head_dim_v()),
    ] {
        match (&new_shape(d), a) {
            (Some(shape), Some(a)) => check_shape_d(name, a, shape)?,
            (None, None) => {}
            (Some(_), None) => {
                return Err(InvalidProblem::Mode {
                    field: name,
                    reason: "the problem appends rows but none were given".into(),
                }
                .into())
            }
            (None, Some(_)) => {
                return Err(InvalidProblem::Mode {
                    field: name,
                    reason: "given, but the problem appends nothing (set modes.append)".into(),
                }
                .into())
            }
        }
    }
    inputs.tables.validate(problem)?;
    Ok((q_shape, kv_shape, lse_shape))
}

/// Runs `attention` on host arrays of any mode (see [`HostInputs`]) on the device's stream, and
/// waits for the result (a synchronisation of that stream: this is the convenience path; device
/// tensors and `Attention::forward_on` queue work without waiting).
pub fn forward_host_modes<E: HostElement>(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    inputs: HostInputs<'_, E>,
) -> Result<HostOutputs<E>, Error> {
    let (_, kv_shape, lse_shape) = check_host_inputs(attention.name(), problem, &inputs)?;
    // e4m3 Q/K/V are encoded (and refused when they are not e4m3 values) before anything
    // uploads.
    let kv_bytes = match problem.modes.kv_fp8 {
        Some(_) => Some((e4m3_bytes("k", &inputs.k)?, e4m3_bytes("v", &inputs.v)?)),
        None => None,
    };
    let q_bytes = match problem.modes.q_fp8 {
        true => Some(e4m3_bytes("q", &inputs.q)?),
        false => None,
    };

    let stream = device.stream();
    let dtype = problem.dtype;
    let oom = |what: &str, bytes: usize| Error::OutOfMemory {
        what: what.to_string(),
        bytes,
    };
    let up = |a: &ArrayViewD<E>, what: &str| {
        let bits = host_bits(a, dtype);
        stream
            .clone_htod(&*bits)
            .map_err(|_| oom(what, bits.len() * 2))
    };
    let up_i32 = |t: Option<&[i32]>, what: &str| {
        t.map(|t| stream.clone_htod(t).map_err(|_| oom(what, t.len() * 4)))
            .transpose()
    };
    // Q goes up as 16-bit elements or as the e4m3 bytes encoded above.
    let dq = match &q_bytes {
        Some(b) => DeviceQ::E4m3(stream.clone_htod(b).map_err(|_| oom("q", b.len()))?),
        None => DeviceQ::Half(up(&inputs.q, "q")?),
    };
    // K and V go up as one kind: 16-bit elements, or the e4m3 bytes encoded above.
    let mut kv = match &kv_bytes {
        Some((k, v)) => {
            let bytes =
                |b: &Vec<u8>, what: &str| stream.clone_htod(b).map_err(|_| oom(what, b.len()));
            DeviceKv::E4m3(bytes(k, "k")?, bytes(v, "v")?)
        }
        None => DeviceKv::Half(up(&inputs.k, "k")?, up(&inputs.v, "v")?),
    };
    let t = &inputs.tables;
    let cu_q = up_i32(t.cu_seqlens_q, "cu_seqlens_q")?;
    let cu_k = up_i32(t.cu_seqlens_k, "cu_seqlens_k")?;
    let used = up_i32(t.seqused_k, "seqused_k")?;
    let table = up_i32(t.block_table, "block_table")?;
    let ranges = up_i32(t.mm_prefix_ranges, "mm_prefix_ranges")?;
    let slopes = upload_slopes(stream, t.alibi_slopes)?;
    let k_descale = upload_f32(stream, t.k_descale, "k_descale")?;
    let v_descale = upload_f32(stream, t.v_descale, "v_descale")?;
    let q_descale = upload_f32(stream, t.q_descale, "q_descale")?;
    let (v_shape, o_shape) = v_o_shapes(problem);
    let o_len: usize = o_shape.iter().product();
    let lse_len: usize = lse_shape.iter().product();
    let mut d_o = stream
        .clone_htod(&vec![nan_bits(dtype); o_len])
        .map_err(|_| oom("o", o_len * 2))?;
    let mut d_lse = stream
        .clone_htod(&vec![f32::NAN; lse_len])
        .map_err(|_| oom("lse", lse_len * 4))?;
    let tables = DeviceTables {
        cu_seqlens_q: cu_q.as_ref().map(|t| t.as_view()),
        cu_seqlens_k: cu_k.as_ref().map(|t| t.as_view()),
        seqused_k: used.as_ref().map(|t| t.as_view()),
        block_table: table.as_ref().map(|t| t.as_view()),
        alibi_slopes: slopes.as_ref().map(|t| t.as_view()),
        mm_prefix_ranges: ranges.as_ref().map(|t| t.as_view()),
        k_descale: k_descale.as_ref().map(|t| t.as_view()),
        v_descale: v_descale.as_ref().map(|t| t.as_view()),
        q_descale: q_descale.as_ref().map(|t| t.as_view()),
    };
    fn tref(data: &cudarc::driver::CudaSlice<u16>, dtype: DType) -> TensorRef<'_> {
        TensorRef {
            data: data.as_view(),
            dtype,
        }
    }
    match (&inputs.k_new, &inputs.v_new) {
        (Some(k_new), Some(v_new)) => {
            let dk_new = up(k_new, "k_new")?;
            let dv_new = up(v_new, "v_new")?;
            let new = crate::tensors::KvAppend {
                k_new: tref(&dk_new, dtype),
                v_new: tref(&dv_new, dtype),
            };
            let o = TensorMut {
                data: d_o.as_view_mut(),
                dtype,
            };
            let q = dq.view(dtype);
            let lse = d_lse.as_view_mut();
            // The public entry points' shared body: it takes an e4m3 Q too.
            match &mut kv {
                DeviceKv::Half(dk, dv) => crate::launch::append_and_attend(
                    attention,
                    device,
                    problem,
                    q,
                    &mut TensorMut {
                        data: dk.as_view_mut(),
                        dtype,
                    },
                    &mut TensorMut {
                        data: dv.as_view_mut(),
                        dtype,
                    },
                    new,
                    o,
                    lse,
                    tables,
                )?,
                DeviceKv::E4m3(dk, dv) => crate::launch::append_and_attend(
                    attention,
                    device,
                    problem,
                    q,
                    &mut dk.as_view_mut(),
                    &mut dv.as_view_mut(),
                    new,
                    o,
                    lse,
                    tables,
                )?,
            }
            device.synchronize()?;
        }
        _ => {
            let mut t = AttentionTensors {
                q: dq.view(dtype),
                k: kv.view(0, dtype),
                v: kv.view(1, dtype),
                o: TensorMut {
                    data: d_o.as_view_mut(),
                    dtype,
                },
                lse: d_lse.as_view_mut(),
                tables,
            };
            attention.forward(device, problem, &mut t)?;
            device.synchronize()?;
        }
    }
    let down = |d: &cudarc::driver::CudaSlice<u16>, shape: &[usize], what: &str| {
        let vals = download::<E>(stream, d, dtype, what)?;
        Ok::<_, Error>(ArrayD::from_shape_vec(shape.to_vec(), vals).expect("length matches"))
    };
    // An e4m3 cache comes back as its stored values (unscaled), as it went in.
    let down_kv = |side: usize, shape: &[usize], what: &str| match &kv {
        DeviceKv::Half(k, v) => down([k, v][side], shape, what),
        DeviceKv::E4m3(k, v) => {
            let bytes = stream
                .clone_dtoh([k, v][side])
                .map_err(|e| Error::cuda(format!("copying {what} back"), e))?;
            let vals = bytes
                .into_iter()
                .map(|b| E::from_dtype_bits(dtype.to_bits(e4m3_value(b)), dtype))
                .collect();
            Ok(ArrayD::from_shape_vec(shape.to_vec(), vals).expect("length matches"))
        }
    };
    let o = down(&d_o, &o_shape, "O")?;
    let lse = stream
        .clone_dtoh(&d_lse)
        .map_err(|e| Error::cuda("copying LSE back", e))?;
    let (k_cache, v_cache) = if problem.modes.append.is_some() {
        (
            Some(down_kv(0, &kv_shape, "the K cache")?),
            Some(down_kv(1, &v_shape, "the V cache")?),
        )
    } else {
        (None, None)
    };
    Ok(HostOutputs {
        o,
        lse: ArrayD::from_shape_vec(lse_shape, lse).expect("length matches"),
        k_cache,
        v_cache,
    })
}

/// A device tensor of dtype bits, copied back (`what` names it in the error) and converted.
pub(crate) fn download<E: HostElement>(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    d: &cudarc::driver::CudaSlice<u16>,
    dtype: DType,
    what: &str,
) -> Result<Vec<E>, Error> {
    let bits = stream
        .clone_dtoh(d)
        .map_err(|e| Error::cuda(format!("copying {what} back"), e))?;
    Ok(bits
        .into_iter()
        .map(|x| E::from_dtype_bits(x, dtype))
        .collect())
}

/// The host's ALiBi slopes on the device (the forward's and the backward's host paths).
pub(crate) fn upload_slopes(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    slopes: Option<&[f32]>,
) -> Result<Option<cudarc::driver::CudaSlice<f32>>, Error> {
    upload_f32(stream, slopes, "alibi_slopes")
}

/// An f32 host table on the device (`what` names it in the error).
fn upload_f32(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    table: Option<&[f32]>,
    what: &str,
) -> Result<Option<cudarc::driver::CudaSlice<f32>>, Error> {
    table
        .map(|s| {
            stream.clone_htod(s).map_err(|_| Error::OutOfMemory {
                what: what.into(),
                bytes: s.len() * 4,
            })
        })
        .transpose()
}

/// Q of the host path on the device: the problem's 16-bit elements, or e4m3 bytes.
enum DeviceQ {
    Half(cudarc::driver::CudaSlice<u16>),
    E4m3(cudarc::driver::CudaSlice<u8>),
}

impl DeviceQ {
    /// Q as the attention call reads it.
    fn view(&self, dtype: DType) -> KvRef<'_> {
        match self {
            DeviceQ::Half(q) => KvRef::Half(TensorRef {
                data: q.as_view(),
                dtype,
            }),
            DeviceQ::E4m3(q) => KvRef::E4m3(q.as_view()),
        }
    }
}

/// K and V of the host path on the device: the problem's 16-bit elements, or e4m3 bytes.
enum DeviceKv {
    Half(
        cudarc::driver::CudaSlice<u16>,
        cudarc::driver::CudaSlice<u16>,
    ),
    E4m3(cudarc::driver::CudaSlice<u8>, cudarc::driver::CudaSlice<u8>),
}

impl DeviceKv {
    /// K (`side` 0) or V (1) as the attention call reads it.
    fn view(&self, side: usize, dtype: DType) -> KvRef<'_> {
        match self {
            DeviceKv::Half(k, v) => KvRef::Half(TensorRef {
                data: [k, v][side].as_view(),
                dtype,
            }),
            DeviceKv::E4m3(k, v) => KvRef::E4m3([k, v][side].as_view()),
        }
    }
}

/// An e4m3 byte's value: exact in f32, f16 and bf16 alike, so widening it back to any
/// [`HostElement`] loses nothing.
pub fn e4m3_value(byte: u8) -> f32 {
    float8::F8E4M3::from_bits(byte).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};
    use ndarray::{ArrayD, IxDyn};

    fn values(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37) % 101) as f32 / 7.0 - 7.0)
            .collect()
    }

    #[test]
    fn half_elements_round_trip_every_bit_pattern() {
        for bits in 0..=u16::MAX {
            let h = f16::from_bits(bits);
            assert_eq!(h.to_dtype_bits(DType::F16), bits);
            assert_eq!(f16::from_dtype_bits(bits, DType::F16).to_bits(), bits);
            let b = bf16::from_bits(bits);
            assert_eq!(b.to_dtype_bits(DType::Bf16), bits);
            assert_eq!(bf16::from_dtype_bits(bits, DType::Bf16).to_bits(), bits);
        }
        // f32 keeps today's meaning: rounded to the dtype, widened back.
        assert_eq!(1.0f32.to_dtype_bits(DType::F16), 0x3c00);
        assert_eq!(1.0f32.to_dtype_bits(DType::Bf16), 0x3f80);
        assert_eq!(f32::from_dtype_bits(0x3c00, DType::F16), 1.0);
        assert_eq!(f32::from_dtype_bits(0x3f80, DType::Bf16), 1.0);
    }

    #[test]
    fn half_arrays_upload_the_same_bits_as_f32_without_widening_or_copying() {
        let v = values(2 * 3 * 4 * 8);
        let shape = IxDyn(&[2, 3, 4, 8]);
        let a32 = ArrayD::from_shape_vec(shape.clone(), v.clone()).unwrap();
        for dtype in DType::ALL {
            let from_f32 = host_bits(&a32.view(), dtype).into_owned();
            let same = match dtype {
                DType::F16 => {
                    let a = a32.mapv(f16::from_f32);
                    let view = a.view();
                    let bits = host_bits(&view, dtype);
                    // Borrowed from the array's own storage: no widening, no copy.
                    assert!(matches!(bits, std::borrow::Cow::Borrowed(_)));
                    assert_eq!(bits.as_ptr() as usize, a.as_ptr() as usize);
                    bits.into_owned()
                }
                DType::Bf16 => {
                    let a = a32.mapv(bf16::from_f32);
                    let view = a.view();
                    let bits = host_bits(&view, dtype);
                    assert!(matches!(bits, std::borrow::Cow::Borrowed(_)));
                    bits.into_owned()
                }
            };
            assert_eq!(same, from_f32, "{dtype}");
        }
        // f32 is always converted.
        assert!(matches!(
            host_bits(&a32.view(), DType::F16),
            std::borrow::Cow::Owned(_)
        ));
    }

    #[test]
    fn a_non_contiguous_half_view_is_gathered_in_logical_order() {
        let a = ArrayD::from_shape_vec(IxDyn(&[4, 6]), values(24))
            .unwrap()
            .mapv(f16::from_f32);
        let t = a.t();
        let bits = host_bits(&t, DType::F16);
        assert!(matches!(bits, std::borrow::Cow::Owned(_)));
        let expected: Vec<u16> = t.iter().map(|x| x.to_bits()).collect();
        assert_eq!(&*bits, &expected[..]);
    }

    fn dense_inputs<E: Clone + Default>(p: &AttentionProblem) -> [ArrayD<E>; 3] {
        let (q, kv, _) = storage_shapes(p);
        [
            ArrayD::from_elem(IxDyn(&q), E::default()),
            ArrayD::from_elem(IxDyn(&kv), E::default()),
            ArrayD::from_elem(IxDyn(&kv), E::default()),
        ]
    }

    #[test]
    fn half_arrays_must_match_the_problem_dtype_f32_takes_either() {
        for dtype in DType::ALL {
            let p = AttentionProblem::new(2, 4, 33, 64)
                .with_kv(2, 65)
                .with_dtype(dtype);
            let [q, k, v] = dense_inputs::<f32>(&p);
            check_host_inputs("k", &p, &HostInputs::new(q.view(), k.view(), v.view())).unwrap();

            let [q, k, v] = dense_inputs::<f16>(&p);
            let r = check_host_inputs("k", &p, &HostInputs::new(q.view(), k.view(), v.view()));
            let [q, k, v] = dense_inputs::<bf16>(&p);
            let rb = check_host_inputs("k", &p, &HostInputs::new(q.view(), k.view(), v.view()));
            let (ok, bad, got) = match dtype {
                DType::F16 => (r, rb, DType::Bf16),
                DType::Bf16 => (rb, r, DType::F16),
            };
            let (q_shape, kv_shape, lse_shape) = ok.unwrap();
            assert_eq!(q_shape, p.layout.shape(2, 4, 33, 64).to_vec());
            assert_eq!(kv_shape, p.layout.shape(2, 2, 65, 64).to_vec());
            assert_eq!(lse_shape, vec![2, 4, 33]);
            match bad {
                Err(Error::Invalid(InvalidProblem::DTypeMismatch {
                    tensor: "q",
                    got: g,
                    expected,
                })) => assert_eq!((g, expected), (got, dtype)),
                other => panic!("{dtype}: expected a DTypeMismatch, got {other:?}"),
            }
        }
    }

    #[test]
    fn half_arrays_get_the_same_shape_and_append_checks() {
        let p = AttentionProblem::new(1, 2, 8, 64).with_dtype(DType::Bf16);
        let [q, k, v] = dense_inputs::<bf16>(&p);
        let short = ArrayD::from_elem(IxDyn(&[1, 7, 2, 64]), bf16::ZERO);
        let e = check_host_inputs("k", &p, &HostInputs::new(q.view(), short.view(), v.view()))
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Invalid(InvalidProblem::ShapeMismatch { tensor: "k", .. })
            ),
            "{e}"
        );
        let mut inputs = HostInputs::new(q.view(), k.view(), v.view());
        inputs.k_new = Some(k.view());
        let e = check_host_inputs("k", &p, &inputs).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Invalid(InvalidProblem::Mode { field: "k_new", .. })
            ),
            "{e}"
        );
    }
}
