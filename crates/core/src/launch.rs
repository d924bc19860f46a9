//! The entry points that launch a generation's kernels, and the helpers generations and tools
//! build launches with. The pieces live in modules of their own: the call's checks and plan in
//! `plan.rs`, the parameter block in `params.rs`, grids in `launch_plan.rs`, tensor maps in
//! `tensor_map.rs`, the launches in `execute.rs`; this module re-exports them where callers
//! have always found them.

use crate::device::Device;
use crate::error::{Error, InvalidProblem};
use crate::execute::append_kv;
use crate::plan::{prepare, Attention};
use crate::problem::AttentionProblem;
use crate::tensors::{AttentionTensors, DeviceTables, TensorMut, TensorRef};

pub use crate::execute::{run_plan, run_plan_on};
pub use crate::launch_plan::{linear_grid, tiles};
pub use crate::params::{page_divisor_magic, AttentionParams};
pub use crate::plan::{forward, forward_on};
pub use crate::tensor_map::{encode_tensor_map, encode_tensor_maps, paged_box_rows, MapTarget};
pub use crate::tensors::KvAppend;

/// FlashAttention's `flash_attn_with_kvcache` with new tokens: writes `k_new`/`v_new` into the
/// cache (`tensors.k`/`tensors.v` are the cache, given mutably here) at `seqused_k[b]`, then
/// attends over `seqused_k[b] + seqlen_new` keys, in one call on the device's stream. Everything
/// is checked before the first launch. `seqused_k` is not advanced: the caller does that.
#[allow(clippy::too_many_arguments)]
pub fn forward_with_kvcache(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    q: TensorRef<'_>,
    k_cache: &mut TensorMut<'_>,
    v_cache: &mut TensorMut<'_>,
    new: KvAppend<'_>,
    mut o: TensorMut<'_>,
    mut lse: cudarc::driver::CudaViewMut<'_, f32>,
    tables: DeviceTables<'_>,
) -> Result<(), Error> {
    let Some(seqlen_new) = problem.modes.append else {
        return Err(InvalidProblem::Mode {
            field: "k_new",
            reason: "the problem appends no rows (set modes.append to seqlen_new)".into(),
        }
        .into());
    };
    if problem.modes.kv_fp8.is_some() {
        return Err(InvalidProblem::Mode {
            field: "kv_fp8",
            reason: "appending into an e4m3 cache is not implemented (the caches here are \
                     16-bit tensors)"
                .into(),
        }
        .into());
    }
    let needed = problem.batch * seqlen_new * problem.heads_kv * problem.head_dim;
    for (tensor, t) in [("k_new", &new.k_new), ("v_new", &new.v_new)] {
        if t.data.len() != needed {
            return Err(InvalidProblem::LengthMismatch {
                tensor,
                got: t.data.len(),
                needed,
            }
            .into());
        }
        if t.dtype != problem.dtype {
            return Err(InvalidProblem::DTypeMismatch {
                tensor,
                got: t.dtype,
                expected: problem.dtype,
            }
            .into());
        }
    }
    let stream = device.stream().clone();
    // Every check (the attention call's included) before the first launch.
    let plan = {
        let tensors = kv_tensors(&q, k_cache, v_cache, &mut o, &mut lse, &tables);
        prepare(attention, device, &stream, problem, &tensors)?
    };
    device.check_lent_workspace(plan.workspace_f32, plan.workspace_counters)?;
    if seqlen_new > 0 && problem.batch > 0 {
        append_kv(device, &stream, problem, &tables, k_cache, v_cache, &new)?;
    }
    let mut tensors = AttentionTensors {
        q,
        k: TensorRef {
            data: k_cache.data.as_view(),
            dtype: k_cache.dtype,
        }
        .into(),
        v: TensorRef {
            data: v_cache.data.as_view(),
            dtype: v_cache.dtype,
        }
        .into(),
        o,
        lse,
        tables,
    };
    run_plan_on(device, &stream, problem, &plan, &mut tensors)
}

/// The attention call's tensors of `forward_with_kvcache`, reborrowed for its checks (the
/// caches are then taken mutably for the append).
fn kv_tensors<'s>(
    q: &'s TensorRef<'_>,
    k_cache: &'s TensorMut<'_>,
    v_cache: &'s TensorMut<'_>,
    o: &'s mut TensorMut<'_>,
    lse: &'s mut cudarc::driver::CudaViewMut<'_, f32>,
    tables: &'s DeviceTables<'_>,
) -> AttentionTensors<'s> {
    let view = |t: &'s TensorMut<'_>| TensorRef {
        data: t.data.as_view(),
        dtype: t.dtype,
    };
    let table = |t: &'s Option<cudarc::driver::CudaView<'_, i32>>| t.as_ref().map(|v| v.slice(..));
    AttentionTensors {
        q: TensorRef {
            data: q.data.slice(..),
            dtype: q.dtype,
        },
        k: view(k_cache).into(),
        v: view(v_cache).into(),
        o: TensorMut {
            data: o.data.slice_mut(..),
            dtype: o.dtype,
        },
        lse: lse.slice_mut(..),
        tables: DeviceTables {
            cu_seqlens_q: table(&tables.cu_seqlens_q),
            cu_seqlens_k: table(&tables.cu_seqlens_k),
            seqused_k: table(&tables.seqused_k),
            block_table: table(&tables.block_table),
            alibi_slopes: tables.alibi_slopes.as_ref().map(|v| v.slice(..)),
            mm_prefix_ranges: table(&tables.mm_prefix_ranges),
            k_descale: tables.k_descale.as_ref().map(|v| v.slice(..)),
            v_descale: tables.v_descale.as_ref().map(|v| v.slice(..)),
        },
    }
}
