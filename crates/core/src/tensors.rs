//! Device tensors handed to a kernel, tagged with their dtype so mismatches are caught.

use cudarc::driver::{CudaView, CudaViewMut};

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

/// The rows `flash_attn_with_kvcache` appends: `[batch, seqlen_new, heads_kv, head_dim]`, dense.
pub struct KvAppend<'a> {
    pub k_new: TensorRef<'a>,
    pub v_new: TensorRef<'a>,
}

/// Q, K, V in; O and the f32 log-sum-exp out; the per-sequence tables of the problem's modes.
pub struct AttentionTensors<'a> {
    pub q: TensorRef<'a>,
    pub k: TensorRef<'a>,
    pub v: TensorRef<'a>,
    pub o: TensorMut<'a>,
    pub lse: CudaViewMut<'a, f32>,
    pub tables: DeviceTables<'a>,
}

/// Device copies of the tables `docs/MODES.md` describes (int32, f32 for the slopes). Kernels
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
        AttentionTensors {
            q: TensorRef { data: q, dtype },
            k: TensorRef { data: k, dtype },
            v: TensorRef { data: v, dtype },
            o: TensorMut { data: o, dtype },
            lse,
            tables: DeviceTables::default(),
        }
    }

    /// These tensors with the per-sequence tables of the problem's modes.
    pub fn with_tables(self, tables: DeviceTables<'a>) -> Self {
        AttentionTensors { tables, ..self }
    }

    /// Lengths and dtypes against the problem. Dense problems need exact lengths (a mismatch is
    /// almost always a wrong shape); strided views may sit in larger buffers.
    pub fn check(&self, p: &AttentionProblem) -> Result<(), InvalidProblem> {
        check_buffers(
            p,
            [
                self.q.data.len(),
                self.k.data.len(),
                self.v.data.len(),
                self.o.data.len(),
                self.lse.len(),
            ],
            [self.q.dtype, self.k.dtype, self.v.dtype, self.o.dtype],
        )?;
        crate::modes::check_table_lens(p, self.tables.lens())
    }
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
    let exact = p.custom_strides.is_none() && p.modes.is_dense();
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
