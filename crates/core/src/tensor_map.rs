//! Hopper tensor maps (cuTensorMapEncodeTiled) for the bulk-copy kernels' Q, K and V boxes.

use std::ffi::c_void;

use cudarc::driver::sys;

use crate::dtype::DType;
use crate::error::Error;
use crate::launch_plan::{Swizzle, TensorMapSpec};
use crate::params::AttentionParams;
use crate::problem::{AttentionProblem, ProblemStrides, TensorStrides};

/// Q, K and V tensor maps for the Hopper bulk-copy path (see `TensorMapSpec`); `params` holds
/// the tensors' device addresses.
pub fn encode_tensor_maps(
    p: &AttentionProblem,
    params: &AttentionParams,
    spec: &TensorMapSpec,
) -> Result<[sys::CUtensorMap; 3], Error> {
    let s: ProblemStrides = p.strides();
    // A paged cache is loaded in groups of rows that never straddle a page: the largest power
    // of two dividing both the block size and the tile (the kernel computes the same).
    let kv_box_rows = match p.modes.kv {
        crate::modes::KvStorage::Paged { block_size, .. } => {
            paged_box_rows(block_size as u32, spec.kv_box_rows)
        }
        _ => spec.kv_box_rows,
    };
    let q = MapTarget {
        name: "q",
        ptr: params.q,
        strides: s.q,
        heads: p.heads_q,
        storage: p.q_storage(),
        box_rows: spec.q_box_rows,
    };
    Ok([
        encode_tensor_map(p, spec, &q)?,
        encode_tensor_map(
            p,
            spec,
            &MapTarget {
                name: "k",
                ptr: params.k,
                strides: s.k,
                heads: p.heads_kv,
                storage: p.kv_storage(),
                box_rows: kv_box_rows,
            },
        )?,
        match spec.transposed_v {
            Some(t) => encode_transposed_v(p, params, &t)?,
            // V's rows are its own head dim wide (FlashAttention 3's headdim_v); the boxes the
            // same 64 columns, fewer of them.
            None => encode_tensor_map_cols(
                p,
                spec,
                &MapTarget {
                    name: "v",
                    ptr: params.v,
                    strides: s.v,
                    heads: p.heads_kv,
                    storage: p.kv_storage(),
                    box_rows: kv_box_rows,
                },
                p.head_dim_v(),
            )?,
        },
    ])
}

/// The map of V's transposed copy in the workspace (`TransposedV`; the e4m3 forward): bytes,
/// viewed as (keys, head_dim_v, heads_kv, batch), a box of `box_keys` keys by every row.
fn encode_transposed_v(
    p: &AttentionProblem,
    params: &AttentionParams,
    t: &crate::launch_plan::TransposedV,
) -> Result<sys::CUtensorMap, Error> {
    let dv = p.head_dim_v() as u64;
    let keys = t.keys as u64;
    let dims: [u64; 4] = [keys, dv, p.heads_kv as u64, p.batch.max(1) as u64];
    let strides: [u64; 3] = [keys, keys * dv, keys * dv * p.heads_kv as u64];
    let boxes: [u32; 4] = [t.box_keys, dv as u32, 1, 1];
    encode_raw(
        "v (transposed copy)",
        sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        params.workspace + t.offset_bytes,
        dims,
        strides,
        boxes,
    )
}

/// One tensor a map views: its address, strides, heads and storage `(batch, seq)` (packed
/// tensors are one "batch" of total rows; a paged cache's batch axis is the block), and the
/// rows of one box.
pub struct MapTarget {
    pub name: &'static str,
    pub ptr: u64,
    pub strides: TensorStrides,
    pub heads: usize,
    pub storage: (usize, usize),
    pub box_rows: u32,
}

/// The tensor map of one tensor, viewed as 4-D (head_dim, seq, heads, batch) with its strides;
/// a box is `spec.box_cols` elements of head_dim by `t.box_rows` rows, one head, one batch.
pub fn encode_tensor_map(
    p: &AttentionProblem,
    spec: &TensorMapSpec,
    t: &MapTarget,
) -> Result<sys::CUtensorMap, Error> {
    encode_tensor_map_cols(p, spec, t, p.head_dim)
}

/// [`encode_tensor_map`] of a tensor whose rows are `cols` elements wide (V's and O's head dim
/// where it differs from Q's and K's).
pub fn encode_tensor_map_cols(
    p: &AttentionProblem,
    spec: &TensorMapSpec,
    t: &MapTarget,
    cols: usize,
) -> Result<sys::CUtensorMap, Error> {
    // e4m3 Q, K and V (`Modes::q_fp8`) are bytes; strides are in elements either way.
    let (dtype, elem_bytes) = match p.dtype {
        _ if p.modes.q_fp8 => (sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8, 1),
        DType::F16 => (sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2),
        DType::Bf16 => (
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            2,
        ),
    };
    let swizzle = match spec.swizzle {
        Swizzle::None => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
        Swizzle::B32 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        Swizzle::B64 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        Swizzle::B128 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    let (batch, seq) = t.storage;
    let st = t.strides;
    // A size-1 axis gets a stride past the others: the encoder wants a nonzero multiple of 16
    // bytes even where no coordinate ever steps along it.
    let dims: [u64; 4] = [
        cols as u64,
        seq.max(1) as u64,
        t.heads as u64,
        batch.max(1) as u64,
    ];
    let span = (seq.max(1) * st.row).max(t.heads * st.head) as u64 * elem_bytes;
    let batch_stride = if batch <= 1 {
        span
    } else {
        st.batch as u64 * elem_bytes
    };
    let strides: [u64; 3] = [
        st.row as u64 * elem_bytes,
        st.head as u64 * elem_bytes,
        batch_stride,
    ];
    let boxes: [u32; 4] = [spec.box_cols, t.box_rows, 1, 1];
    encode_raw(t.name, dtype, swizzle, t.ptr, dims, strides, boxes)
}

/// `cuTensorMapEncodeTiled` of a 4-D tensor (byte strides of dims 1..3), interleave none, L2
/// promotion 256 B, out-of-bounds elements read as zeros.
fn encode_raw(
    name: &str,
    dtype: sys::CUtensorMapDataType,
    swizzle: sys::CUtensorMapSwizzle,
    ptr: u64,
    dims: [u64; 4],
    strides: [u64; 3],
    boxes: [u32; 4],
) -> Result<sys::CUtensorMap, Error> {
    let elem_strides: [u32; 4] = [1, 1, 1, 1];
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: all arrays have the rank's length; the driver validates the values and answers
    // with an error code rather than faulting.
    let rc = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            dtype,
            4,
            ptr as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            elem_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(Error::Cuda {
            context: format!(
                "cuTensorMapEncodeTiled for {name} (dims {dims:?}, byte strides {strides:?}, box {boxes:?})"
            ),
            message: format!("{rc:?}"),
        });
    }
    // SAFETY: initialised by the successful call above.
    Ok(unsafe { map.assume_init() })
}

/// Rows per TMA box of a paged K/V tile: the largest power of two that divides both the block
/// size and the tile's rows (block sizes are multiples of 16, so at least 16 for power-of-two
/// tiles). Mirrors `paged_box_rows` in gen5_persistent_hopper.cu.
pub fn paged_box_rows(block_size: u32, tile_rows: u32) -> u32 {
    let mut rows = tile_rows & tile_rows.wrapping_neg(); // largest power of two dividing the tile
    while rows > 1 && !block_size.is_multiple_of(rows) {
        rows /= 2;
    }
    rows
}
