//! CPU tensors the ops' argument tests share (no GPU and no `cuda` feature needed).

use candle::{DType, Device, Tensor};
use flashcore::KvScales;

pub(crate) fn zeros(shape: &[usize], dtype: DType) -> Tensor {
    Tensor::zeros(shape, dtype, &Device::Cpu).unwrap()
}

pub(crate) fn f32s(shape: &[usize]) -> Tensor {
    Tensor::ones(shape, DType::F32, &Device::Cpu).unwrap()
}

/// Every layout a descale table of `batch` sequences and `kv_heads` KV heads may come in, with
/// the `KvScales` each is read as: per (sequence, KV head), per KV head, one for all, and the
/// last two expanded (stride 0) to `[batch, kv_heads]`.
pub(crate) fn descale_layouts(batch: usize, kv_heads: usize) -> Vec<(Tensor, KvScales)> {
    let expanded = |shape: &[usize]| f32s(shape).broadcast_as((batch, kv_heads)).unwrap();
    vec![
        (f32s(&[batch, kv_heads]), KvScales::PerBatchKvHead),
        (f32s(&[kv_heads]), KvScales::PerKvHead),
        (f32s(&[1]), KvScales::PerTensor),
        (expanded(&[1]), KvScales::PerTensor),
        (expanded(&[kv_heads]), KvScales::PerKvHead),
    ]
}
