//! The convenience path: host ndarrays in, host ndarrays out. Inputs are f32 values rounded to
//! the problem's dtype on upload; outputs come back as f32.

use ndarray::{Array3, Array4, ArrayD, ArrayView4, ArrayViewD};

use crate::device::Device;
use crate::error::{Error, InvalidProblem};
use crate::modes::{HostTables, KvStorage};
use crate::plan::Attention;
use crate::problem::{AttentionProblem, DType};
use crate::tensors::{AttentionTensors, DeviceTables, TensorMut, TensorRef};

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

/// Runs `attention` on host arrays laid out as the problem's `layout` says (dense).
pub fn forward_host<'a>(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    q: ArrayView4<'a, f32>,
    k: ArrayView4<'a, f32>,
    v: ArrayView4<'a, f32>,
) -> Result<HostOutput, Error> {
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
///   `[total_k, heads_kv, head_dim]` packed, or `[num_blocks, block_size, heads_kv, head_dim]` paged;
/// - `k_new`, `v_new`: `[batch, seqlen_new, heads_kv, head_dim]` when the problem appends;
/// - `tables`: the per-sequence tables the modes need, validated before anything launches.
pub struct HostInputs<'a> {
    pub q: ArrayViewD<'a, f32>,
    pub k: ArrayViewD<'a, f32>,
    pub v: ArrayViewD<'a, f32>,
    pub k_new: Option<ArrayViewD<'a, f32>>,
    pub v_new: Option<ArrayViewD<'a, f32>>,
    pub tables: HostTables<'a>,
}

impl<'a> HostInputs<'a> {
    /// Q, K, V with no append and no tables (a dense problem's inputs).
    pub fn new(q: ArrayViewD<'a, f32>, k: ArrayViewD<'a, f32>, v: ArrayViewD<'a, f32>) -> Self {
        HostInputs {
            q,
            k,
            v,
            k_new: None,
            v_new: None,
            tables: HostTables::default(),
        }
    }
}

/// Outputs in storage order: O shaped like Q, LSE `[batch, heads_q, seq_q]` or `[heads_q, total_q]`;
/// after an append, the caches as they are after the call.
#[derive(Clone, Debug)]
pub struct HostOutputs {
    pub o: ArrayD<f32>,
    pub lse: ArrayD<f32>,
    pub k_cache: Option<ArrayD<f32>>,
    pub v_cache: Option<ArrayD<f32>>,
}

/// Expected storage shapes of Q (and O), K (and V) for a problem.
pub fn storage_shapes(problem: &AttentionProblem) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let p = problem;
    let (b, hq, hkv, sq, sk, d) = (p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k, p.head_dim);
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
    let lse = match p.modes.packed_q {
        Some(total) => vec![hq, total],
        None => vec![b, hq, sq],
    };
    (q, kv, lse)
}

fn check_shape_d(
    tensor: &'static str,
    a: &ArrayViewD<f32>,
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

/// Runs `attention` on host arrays of any mode; see [`HostInputs`].
pub fn forward_host_modes(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    inputs: HostInputs<'_>,
) -> Result<HostOutputs, Error> {
    problem.validate()?;
    if problem.custom_strides.is_some() {
        return Err(Error::Unsupported(crate::error::Unsupported::new(
            attention.name(),
            "the host path takes dense layouts only; use device tensors for custom strides",
        )));
    }
    let (q_shape, kv_shape, lse_shape) = storage_shapes(problem);
    check_shape_d("q", &inputs.q, &q_shape)?;
    check_shape_d("k", &inputs.k, &kv_shape)?;
    check_shape_d("v", &inputs.v, &kv_shape)?;
    let new_shape = problem
        .modes
        .append
        .map(|n| vec![problem.batch, n, problem.heads_kv, problem.head_dim]);
    for (name, a) in [("k_new", &inputs.k_new), ("v_new", &inputs.v_new)] {
        match (&new_shape, a) {
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

    let stream = device.stream();
    let dtype = problem.dtype;
    let oom = |what: &str, bytes: usize| Error::OutOfMemory {
        what: what.to_string(),
        bytes,
    };
    let up = |a: &ArrayViewD<f32>, what: &str| {
        let bits: Vec<u16> = a.iter().map(|&x| dtype.to_bits(x)).collect();
        stream
            .clone_htod(&bits)
            .map_err(|_| oom(what, bits.len() * 2))
    };
    let up_i32 = |t: Option<&[i32]>, what: &str| {
        t.map(|t| stream.clone_htod(t).map_err(|_| oom(what, t.len() * 4)))
            .transpose()
    };
    let dq = up(&inputs.q, "q")?;
    let mut dk = up(&inputs.k, "k")?;
    let mut dv = up(&inputs.v, "v")?;
    let t = &inputs.tables;
    let cu_q = up_i32(t.cu_seqlens_q, "cu_seqlens_q")?;
    let cu_k = up_i32(t.cu_seqlens_k, "cu_seqlens_k")?;
    let used = up_i32(t.seqused_k, "seqused_k")?;
    let table = up_i32(t.block_table, "block_table")?;
    let slopes = t
        .alibi_slopes
        .map(|s| {
            stream
                .clone_htod(s)
                .map_err(|_| oom("alibi_slopes", s.len() * 4))
        })
        .transpose()?;
    let o_len: usize = q_shape.iter().product();
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
            crate::launch::forward_with_kvcache(
                attention,
                device,
                problem,
                tref(&dq, dtype),
                &mut TensorMut {
                    data: dk.as_view_mut(),
                    dtype,
                },
                &mut TensorMut {
                    data: dv.as_view_mut(),
                    dtype,
                },
                crate::launch::KvAppend {
                    k_new: tref(&dk_new, dtype),
                    v_new: tref(&dv_new, dtype),
                },
                TensorMut {
                    data: d_o.as_view_mut(),
                    dtype,
                },
                d_lse.as_view_mut(),
                tables,
            )?;
            device.synchronize()?;
        }
        _ => {
            let mut t = AttentionTensors {
                q: tref(&dq, dtype),
                k: tref(&dk, dtype),
                v: tref(&dv, dtype),
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
        let bits = stream
            .clone_dtoh(d)
            .map_err(|e| Error::cuda(format!("copying {what} back"), e))?;
        let vals: Vec<f32> = bits.iter().map(|&x| dtype.from_bits(x)).collect();
        Ok::<_, Error>(ArrayD::from_shape_vec(shape.to_vec(), vals).expect("length matches"))
    };
    let o = down(&d_o, &q_shape, "O")?;
    let lse = stream
        .clone_dtoh(&d_lse)
        .map_err(|e| Error::cuda("copying LSE back", e))?;
    let (k_cache, v_cache) = if problem.modes.append.is_some() {
        (
            Some(down(&dk, &kv_shape, "the K cache")?),
            Some(down(&dv, &kv_shape, "the V cache")?),
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
