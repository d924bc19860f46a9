//! Device tensors handed to a kernel, tagged with their dtype so mismatches are caught.

use cudarc::driver::{CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, SyncOnDrop};

use crate::dtype::DType;
use crate::error::InvalidProblem;
use crate::problem::AttentionProblem;

/// A read-only device tensor of 16-bit elements.
pub struct TensorRef<'a> {
    pub data: CudaView<'a, u16>,
    pub dtype: DType,
}

/// A writable device tensor of 16-bit elements.
pub struct TensorMut<'a> {
    pub data: CudaViewMut<'a, u16>,
    pub dtype: DType,
}

/// An input tensor (Q, K or V) as a kernel reads it: 16-bit elements of the problem's dtype, or
/// OCP FP8 E4M3 bytes (`Modes::kv_fp8` for K/V, `Modes::q_fp8` for Q) whose true values are
/// scaled by the `k_descale` / `v_descale` / `q_descale` tables.
pub enum KvRef<'a> {
    Half(TensorRef<'a>),
    E4m3(CudaView<'a, u8>),
}

impl<'a> KvRef<'a> {
    /// Elements (bytes for e4m3).
    pub fn len(&self) -> usize {
        match self {
            KvRef::Half(t) => t.data.len(),
            KvRef::E4m3(b) => b.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type's name for errors: "e4m3", "f16" or "bf16".
    pub fn dtype_name(&self) -> &'static str {
        match self {
            KvRef::Half(t) => t.dtype.name(),
            KvRef::E4m3(_) => E4M3,
        }
    }

    /// The same tensor, reborrowed.
    pub fn view(&self) -> KvRef<'_> {
        match self {
            KvRef::Half(t) => KvRef::Half(TensorRef {
                data: t.data.slice(..),
                dtype: t.dtype,
            }),
            KvRef::E4m3(b) => KvRef::E4m3(b.slice(..)),
        }
    }

    /// The base address on `stream`, with the guard that records the read there.
    pub(crate) fn device_ptr<'s>(&'s self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        match self {
            KvRef::Half(t) => t.data.device_ptr(stream),
            KvRef::E4m3(b) => b.device_ptr(stream),
        }
    }
}

impl<'a> From<TensorRef<'a>> for KvRef<'a> {
    fn from(t: TensorRef<'a>) -> Self {
        KvRef::Half(t)
    }
}

/// A cache an append writes, 16-bit (`TensorMut`) or e4m3 bytes, as the attention then reads it:
/// one append-then-attend path serves both kinds.
pub(crate) trait KvCacheMut {
    fn as_kv(&self) -> KvRef<'_>;
    /// The base address on `stream`, with the guard that records the write there.
    fn device_ptr_mut<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>);
}

impl KvCacheMut for TensorMut<'_> {
    fn as_kv(&self) -> KvRef<'_> {
        KvRef::Half(TensorRef {
            data: self.data.as_view(),
            dtype: self.dtype,
        })
    }
    fn device_ptr_mut<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        self.data.device_ptr_mut(stream)
    }
}

impl KvCacheMut for CudaViewMut<'_, u8> {
    fn as_kv(&self) -> KvRef<'_> {
        KvRef::E4m3(self.as_view())
    }
    fn device_ptr_mut<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        DevicePtrMut::device_ptr_mut(self, stream)
    }
}

/// The rows `flash_attn_with_kvcache` appends: `[batch, seqlen_new, heads_kv, head_dim]`, dense
/// (v_new's last dim `head_dim_v`).
pub struct KvAppend<'a> {
    pub k_new: TensorRef<'a>,
    pub v_new: TensorRef<'a>,
}

/// Q, K, V in; O and the f32 log-sum-exp out; the per-sequence tables of the problem's modes.
pub struct AttentionTensors<'a> {
    /// 16-bit of the problem's dtype, or e4m3 bytes (`Modes::q_fp8`).
    pub q: KvRef<'a>,
    pub k: KvRef<'a>,
    pub v: KvRef<'a>,
    pub o: TensorMut<'a>,
    pub lse: CudaViewMut<'a, f32>,
    pub tables: DeviceTables<'a>,
}

/// Device copies of the tables `docs/MODES.md` describes (int32, f32 for the slopes and the
/// descale factors). Kernels
/// trust their contents; check host copies with [`crate::HostTables::validate`], or device ones
/// with [`crate::Device::check_tables`], when they come from outside.
#[derive(Default)]
pub struct DeviceTables<'a> {
    pub cu_seqlens_q: Option<CudaView<'a, i32>>,
    pub cu_seqlens_k: Option<CudaView<'a, i32>>,
    pub seqused_k: Option<CudaView<'a, i32>>,
    pub block_table: Option<CudaView<'a, i32>>,
    pub alibi_slopes: Option<CudaView<'a, f32>>,
    pub mm_prefix_ranges: Option<CudaView<'a, i32>>,
    /// e4m3 K's and V's factors (`Modes::kv_fp8`).
    pub k_descale: Option<CudaView<'a, f32>>,
    pub v_descale: Option<CudaView<'a, f32>>,
    /// e4m3 Q's factors (`Modes::q_fp8`, shaped as K's).
    pub q_descale: Option<CudaView<'a, f32>>,
}

impl DeviceTables<'_> {
    pub(crate) fn lens(&self) -> [Option<usize>; crate::modes::TABLES] {
        [
            self.cu_seqlens_q.as_ref().map(|t| t.len()),
            self.cu_seqlens_k.as_ref().map(|t| t.len()),
            self.seqused_k.as_ref().map(|t| t.len()),
            self.block_table.as_ref().map(|t| t.len()),
            self.alibi_slopes.as_ref().map(|t| t.len()),
            self.mm_prefix_ranges.as_ref().map(|t| t.len()),
            self.k_descale.as_ref().map(|t| t.len()),
            self.v_descale.as_ref().map(|t| t.len()),
            self.q_descale.as_ref().map(|t| t.len()),
        ]
    }
}

impl<'a> AttentionTensors<'a> {
    /// Q, K, V and O of one dtype (16-bit elements) and the f32 LSE, with no mode tables (add
    /// them with [`Self::with_tables`]).
    pub fn new(
        dtype: DType,
        q: CudaView<'a, u16>,
        k: CudaView<'a, u16>,
        v: CudaView<'a, u16>,
        o: CudaViewMut<'a, u16>,
        lse: CudaViewMut<'a, f32>,
    ) -> Self {
        let half = |data| KvRef::Half(TensorRef { data, dtype });
        Self::from_inputs(half(q), half(k), half(v), TensorMut { data: o, dtype }, lse)
    }

    /// Q and O of `dtype`, K and V as e4m3 bytes (`Modes::kv_fp8`; their descale tables go in
    /// [`Self::with_tables`]), and the f32 LSE.
    pub fn with_e4m3_kv(
        dtype: DType,
        q: CudaView<'a, u16>,
        k: CudaView<'a, u8>,
        v: CudaView<'a, u8>,
        o: CudaViewMut<'a, u16>,
        lse: CudaViewMut<'a, f32>,
    ) -> Self {
        let q = KvRef::Half(TensorRef { data: q, dtype });
        Self::from_inputs(
            q,
            KvRef::E4m3(k),
            KvRef::E4m3(v),
            TensorMut { data: o, dtype },
            lse,
        )
    }

    /// Q, K and V as e4m3 bytes (`Modes::q_fp8` and `Modes::kv_fp8`; the three descale tables go
    /// in [`Self::with_tables`]), O of `dtype` (f16 or bf16) and the f32 LSE: FlashAttention 3's
    /// fp8 forward.
    pub fn with_e4m3_qkv(
        dtype: DType,
        q: CudaView<'a, u8>,
        k: CudaView<'a, u8>,
        v: CudaView<'a, u8>,
        o: CudaViewMut<'a, u16>,
        lse: CudaViewMut<'a, f32>,
    ) -> Self {
        let o = TensorMut { data: o, dtype };
        Self::from_inputs(KvRef::E4m3(q), KvRef::E4m3(k), KvRef::E4m3(v), o, lse)
    }

    /// The inputs as the kernel reads them, O and the LSE, with no mode tables.
    fn from_inputs(
        q: KvRef<'a>,
        k: KvRef<'a>,
        v: KvRef<'a>,
        o: TensorMut<'a>,
        lse: CudaViewMut<'a, f32>,
    ) -> Self {
        AttentionTensors {
            q,
            k,
            v,
            o,
            lse,
            tables: DeviceTables::default(),
        }
    }

    /// These tensors with the per-sequence tables of the problem's modes.
    pub fn with_tables(self, tables: DeviceTables<'a>) -> Self {
        AttentionTensors { tables, ..self }
    }

    /// Lengths and dtypes against the problem. Dense problems need exact lengths (a mismatch is
    /// almost always a wrong shape); strided views may sit in larger buffers. K and V must be
    /// e4m3 exactly when the problem says so (`Modes::kv_fp8`), and Q likewise (`Modes::q_fp8`).
    pub fn check(&self, p: &AttentionProblem) -> Result<(), InvalidProblem> {
        check_q_dtype(p, self.q.dtype_name())?;
        check_kv_dtypes(p, [("k", self.k.dtype_name()), ("v", self.v.dtype_name())])?;
        // e4m3 inputs passed the checks above; their tag stands in for the problem's dtype.
        let tag = |kv: &KvRef<'_>| match kv {
            KvRef::Half(t) => t.dtype,
            KvRef::E4m3(_) => p.dtype,
        };
        check_buffers(
            p,
            [
                self.q.len(),
                self.k.len(),
                self.v.len(),
                self.o.data.len(),
                self.lse.len(),
            ],
            [tag(&self.q), tag(&self.k), tag(&self.v), self.o.dtype],
        )?;
        crate::modes::check_table_lens(p, self.tables.lens())
    }
}

/// The name [`KvRef::dtype_name`] gives e4m3 bytes.
pub const E4M3: &str = "e4m3";

/// `KvDTypeMismatch` unless each named tensor's element type (a [`KvRef::dtype_name`]) is e4m3
/// exactly when the problem's K/V are (`Modes::kv_fp8`): a kernel would read bytes as 16-bit
/// elements, or the reverse. On plain names, so it is testable without a device; the 16-bit
/// dtype itself is [`check_buffers`]'s.
pub fn check_kv_dtypes<const N: usize>(
    p: &AttentionProblem,
    kv: [(&'static str, &'static str); N],
) -> Result<(), InvalidProblem> {
    let fp8 = p.modes.kv_fp8.is_some();
    let expected = if fp8 { E4M3 } else { p.dtype.name() };
    for (tensor, got) in kv {
        if (got == E4M3) != fp8 {
            return Err(InvalidProblem::KvDTypeMismatch {
                tensor,
                got,
                expected,
            });
        }
    }
    Ok(())
}

/// `QDTypeMismatch` unless Q's element type (a [`KvRef::dtype_name`]) is e4m3 exactly when the
/// problem says so (`Modes::q_fp8`): a kernel would read bytes as 16-bit elements, or the
/// reverse. On a plain name, so it is testable without a device.
pub fn check_q_dtype(p: &AttentionProblem, got: &'static str) -> Result<(), InvalidProblem> {
    let fp8 = p.modes.q_fp8;
    if (got == E4M3) != fp8 {
        return Err(InvalidProblem::QDTypeMismatch {
            got,
            expected: if fp8 { E4M3 } else { p.dtype.name() },
        });
    }
    Ok(())
}

/// What [`AttentionTensors::check`] checks, on plain numbers (usable and testable without a
/// device): `lens` are the elements of Q, K, V, O and LSE, `dtypes` the tags of Q, K, V and O.
pub fn check_buffers(
    p: &AttentionProblem,
    lens: [usize; 5],
    dtypes: [DType; 4],
) -> Result<(), InvalidProblem> {
    // Caches and packed tensors may sit in larger buffers (a cache is allocated for its capacity,
    // a packed batch for its largest size); plain dense tensors must match exactly.
    // e4m3 Q/K/V change the element type only, not where the tensors' rows are.
    let storage_modes = crate::modes::Modes {
        kv_fp8: None,
        q_fp8: false,
        ..p.modes.clone()
    };
    let exact = p.custom_strides.is_none() && storage_modes.is_dense();
    let needed = [p.q_len(), p.k_len(), p.v_len(), p.o_len(), p.lse_len()];
    check_lens(["q", "k", "v", "o", "lse"], lens, needed, exact)?;
    check_dtypes(["q", "k", "v", "o"], dtypes, p.dtype)
}

/// The elements of each named buffer against what the problem `needed`: the first one short
/// (or, `exact`, of any other length) is the error.
pub(crate) fn check_lens<const N: usize>(
    names: [&'static str; N],
    lens: [usize; N],
    needed: [usize; N],
    exact: bool,
) -> Result<(), InvalidProblem> {
    for ((tensor, got), needed) in names.into_iter().zip(lens).zip(needed) {
        if got < needed || (exact && got != needed) {
            return Err(InvalidProblem::LengthMismatch {
                tensor,
                got,
                needed,
            });
        }
    }
    Ok(())
}

/// Each named tensor's dtype tag against the problem's: the first that differs is the error.
pub(crate) fn check_dtypes<const N: usize>(
    names: [&'static str; N],
    dtypes: [DType; N],
    expected: DType,
) -> Result<(), InvalidProblem> {
    for (tensor, got) in names.into_iter().zip(dtypes) {
        if got != expected {
            return Err(InvalidProblem::DTypeMismatch {
                tensor,
                got,
                expected,
            });
        }
    }
    Ok(())
}
