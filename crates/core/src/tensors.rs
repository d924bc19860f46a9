//! Device tensors handed to a kernel, tagged with their dtype so mismatches are caught.

use cudarc::driver::{CudaView, CudaViewMut};

use crate::error::InvalidProblem;
use crate::problem::{AttentionProblem, DType};

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

/// Q, K, V in; O and the f32 log-sum-exp out.
pub struct AttentionTensors<'a> {
    pub q: TensorRef<'a>,
    pub k: TensorRef<'a>,
    pub v: TensorRef<'a>,
    pub o: TensorMut<'a>,
    pub lse: CudaViewMut<'a, f32>,
}

impl AttentionTensors<'_> {
    /// Lengths and dtypes against the problem. Dense problems need exact lengths (a mismatch is
    /// almost always a wrong shape); strided views may sit in larger buffers.
    pub fn check(&self, p: &AttentionProblem) -> Result<(), InvalidProblem> {
        let exact = p.custom_strides.is_none();
        let lens = [
            ("q", self.q.data.len(), p.q_len()),
            ("k", self.k.data.len(), p.k_len()),
            ("v", self.v.data.len(), p.v_len()),
            ("o", self.o.data.len(), p.o_len()),
            ("lse", self.lse.len(), p.lse_len()),
        ];
        for (tensor, got, needed) in lens {
            if got < needed || (exact && got != needed) {
                return Err(InvalidProblem::LengthMismatch {
                    tensor,
                    got,
                    needed,
                });
            }
        }
        for (tensor, got) in [
            ("q", self.q.dtype),
            ("k", self.k.dtype),
            ("v", self.v.dtype),
            ("o", self.o.dtype),
        ] {
            if got != p.dtype {
                return Err(InvalidProblem::DTypeMismatch {
                    tensor,
                    got,
                    expected: p.dtype,
                });
            }
        }
        Ok(())
    }
}
