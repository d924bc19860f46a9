//! The convenience path: host ndarrays in, host ndarrays out. Inputs are f32 values rounded to
//! the problem's dtype on upload; outputs come back as f32.

use ndarray::{Array3, Array4, ArrayView4};

use crate::device::Device;
use crate::error::{Error, InvalidProblem};
use crate::plan::Attention;
use crate::problem::{AttentionProblem, DType};
use crate::tensors::{AttentionTensors, TensorMut, TensorRef};

/// Output of a host-side call: O in the problem's layout order, LSE as [batch, heads_q, seq_q].
#[derive(Clone, Debug)]
pub struct HostOutput {
    pub o: Array4<f32>,
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
pub fn to_bits(dtype: DType, a: &ArrayView4<f32>) -> Vec<u16> {
    a.iter().map(|&x| dtype.to_bits(x)).collect()
}

fn check_shape(
    tensor: &'static str,
    a: &ArrayView4<f32>,
    expected: [usize; 4],
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

/// Runs `attention` on host arrays laid out as the problem's `layout` says (dense).
pub fn forward_host(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    q: ArrayView4<f32>,
    k: ArrayView4<f32>,
    v: ArrayView4<f32>,
) -> Result<HostOutput, Error> {
    problem.validate()?;
    if problem.custom_strides.is_some() {
        return Err(Error::Unsupported(crate::error::Unsupported::new(
            attention.name(),
            "the host path takes dense layouts only; use device tensors for custom strides",
        )));
    }
    let l = problem.layout;
    let (b, hq, hkv, sq, sk, d) = (
        problem.batch,
        problem.heads_q,
        problem.heads_kv,
        problem.seq_q,
        problem.seq_k,
        problem.head_dim,
    );
    check_shape("q", &q, l.shape(b, hq, sq, d))?;
    check_shape("k", &k, l.shape(b, hkv, sk, d))?;
    check_shape("v", &v, l.shape(b, hkv, sk, d))?;
    let stream = device.stream();
    let up = |a: &ArrayView4<f32>, what: &str| {
        let bits = to_bits(problem.dtype, a);
        stream.clone_htod(&bits).map_err(|_| Error::OutOfMemory {
            what: what.to_string(),
            bytes: bits.len() * 2,
        })
    };
    let dq = up(&q, "q")?;
    let dk = up(&k, "k")?;
    let dv = up(&v, "v")?;
    let o_shape = l.shape(b, hq, sq, d);
    let o_len: usize = o_shape.iter().product();
    let mut d_o = stream
        .clone_htod(&vec![nan_bits(problem.dtype); o_len])
        .map_err(|_| Error::OutOfMemory {
            what: "o".into(),
            bytes: o_len * 2,
        })?;
    let mut d_lse = stream
        .clone_htod(&vec![f32::NAN; problem.lse_len()])
        .map_err(|_| Error::OutOfMemory {
            what: "lse".into(),
            bytes: problem.lse_len() * 4,
        })?;
    {
        let mut t = AttentionTensors {
            q: TensorRef {
                data: dq.as_view(),
                dtype: problem.dtype,
            },
            k: TensorRef {
                data: dk.as_view(),
                dtype: problem.dtype,
            },
            v: TensorRef {
                data: dv.as_view(),
                dtype: problem.dtype,
            },
            o: TensorMut {
                data: d_o.as_view_mut(),
                dtype: problem.dtype,
            },
            lse: d_lse.as_view_mut(),
        };
        attention.forward(device, problem, &mut t)?;
    }
    device.synchronize()?;
    let o_bits = stream
        .clone_dtoh(&d_o)
        .map_err(|e| Error::cuda("copying O back", e))?;
    let lse = stream
        .clone_dtoh(&d_lse)
        .map_err(|e| Error::cuda("copying LSE back", e))?;
    let o: Vec<f32> = o_bits.iter().map(|&x| problem.dtype.from_bits(x)).collect();
    Ok(HostOutput {
        o: Array4::from_shape_vec(o_shape, o).expect("o length matches its shape"),
        lse: Array3::from_shape_vec((b, hq, sq), lse).expect("lse length matches its shape"),
    })
}
