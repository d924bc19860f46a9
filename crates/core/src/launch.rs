//! The entry points that launch a generation's kernels, and the helpers generations and tools
//! build launches with. The pieces live in modules of their own: the call's checks and plan in
//! `plan.rs`, the parameter block in `params.rs`, grids in `launch_plan.rs`, tensor maps in
//! `tensor_map.rs`, the launches in `execute.rs`; this module re-exports them where callers
//! have always found them.

use cudarc::driver::CudaViewMut;

use crate::device::{Device, DeviceInfo};
use crate::error::{Error, InvalidProblem, Unsupported};
use crate::execute::append_kv;
use crate::plan::{prepare, Attention};
use crate::problem::AttentionProblem;
use crate::tensors::{AttentionTensors, DeviceTables, KvCacheMut, KvRef, TensorMut, TensorRef};

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
    o: TensorMut<'_>,
    lse: CudaViewMut<'_, f32>,
    tables: DeviceTables<'_>,
) -> Result<(), Error> {
    append_and_attend(
        attention,
        device,
        problem,
        q.into(),
        k_cache,
        v_cache,
        new,
        o,
        lse,
        tables,
    )
}

/// [`forward_with_kvcache`] on an e4m3 cache (`Modes::kv_fp8`, the descale tables in `tables`):
/// `k_new`/`v_new` stay in Q's dtype and are written as the e4m3 of value / descale[b, h_kv]
/// (round to nearest, saturating at ±448), so that the cache holds what a quantizing model
/// writer would. Needs compute capability 8.9 or newer (the conversion instruction).
#[allow(clippy::too_many_arguments)]
pub fn forward_with_e4m3_kvcache(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    q: TensorRef<'_>,
    k_cache: &mut CudaViewMut<'_, u8>,
    v_cache: &mut CudaViewMut<'_, u8>,
    new: KvAppend<'_>,
    o: TensorMut<'_>,
    lse: CudaViewMut<'_, f32>,
    tables: DeviceTables<'_>,
) -> Result<(), Error> {
    append_and_attend(
        attention,
        device,
        problem,
        q.into(),
        k_cache,
        v_cache,
        new,
        o,
        lse,
        tables,
    )
}

/// Both entry points, and the host path's (whose Q may be e4m3, `Modes::q_fp8`): the caches'
/// kind and Q's must be the problem's (`AttentionTensors::check` says so otherwise).
#[allow(clippy::too_many_arguments)]
pub(crate) fn append_and_attend(
    attention: &(impl Attention + ?Sized),
    device: &Device,
    problem: &AttentionProblem,
    q: KvRef<'_>,
    k_cache: &mut dyn KvCacheMut,
    v_cache: &mut dyn KvCacheMut,
    new: KvAppend<'_>,
    mut o: TensorMut<'_>,
    mut lse: CudaViewMut<'_, f32>,
    tables: DeviceTables<'_>,
) -> Result<(), Error> {
    let Some(seqlen_new) = problem.modes.append else {
        return Err(InvalidProblem::Mode {
            field: "k_new",
            reason: "the problem appends no rows (set modes.append to seqlen_new)".into(),
        }
        .into());
    };
    // v_new's rows are V's width (FlashAttention 3's `headdim_v`), as `fa_args` takes them: a
    // distinct V dim then reaches the capability check's refusal, not a length mismatch.
    let rows = problem.batch * seqlen_new * problem.heads_kv;
    for (tensor, t, d) in [
        ("k_new", &new.k_new, problem.head_dim),
        ("v_new", &new.v_new, problem.head_dim_v()),
    ] {
        let needed = rows * d;
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
    if problem.modes.kv_fp8.is_some() {
        check_e4m3_append(attention.name(), problem, device.info())?;
    }
    let stream = device.stream().clone();
    // Every check (the attention call's included) before the first launch.
    let plan = {
        let tensors = kv_tensors(
            &q,
            k_cache.as_kv(),
            v_cache.as_kv(),
            &mut o,
            &mut lse,
            &tables,
        );
        prepare(attention, device, &stream, problem, &tensors)?
    };
    device.check_lent_workspace(plan.workspace_f32, plan.workspace_counters)?;
    if seqlen_new > 0 && problem.batch > 0 {
        append_kv(device, &stream, problem, &tables, k_cache, v_cache, &new)?;
    }
    let mut tensors = AttentionTensors {
        q,
        k: k_cache.as_kv(),
        v: v_cache.as_kv(),
        o,
        lse,
        tables,
    };
    run_plan_on(device, &stream, problem, &plan, &mut tensors)
}

/// What the e4m3 append kernel (`append_kv_e4m3`) needs beyond the problem's own rules: the
/// e4m3 conversion instruction (sm_89+), and an even head dim (it writes column pairs).
pub fn check_e4m3_append(
    kernel: &'static str,
    problem: &AttentionProblem,
    device: &DeviceInfo,
) -> Result<(), Unsupported> {
    if device.compute_capability < E4M3_APPEND_MIN_CC {
        let (major, minor) = device.compute_capability;
        return Err(Unsupported::new(
            kernel,
            format!(
                "appending into an e4m3 cache needs compute capability 8.9 or newer (cvt to \
                 e4m3), device is {major}.{minor}"
            ),
        ));
    }
    if !problem.head_dim.is_multiple_of(2) {
        return Err(Unsupported::new(
            kernel,
            format!(
                "appending into an e4m3 cache writes column pairs; head_dim {} is odd",
                problem.head_dim
            ),
        ));
    }
    Ok(())
}

/// The oldest architecture with `cvt.rn.satfinite.e4m3x2.f32`.
const E4M3_APPEND_MIN_CC: (u32, u32) = (8, 9);

/// The attention call's tensors of an append, reborrowed for its checks (the caches are then
/// taken mutably for the append).
fn kv_tensors<'s>(
    q: &'s KvRef<'_>,
    k_cache: KvRef<'s>,
    v_cache: KvRef<'s>,
    o: &'s mut TensorMut<'_>,
    lse: &'s mut CudaViewMut<'_, f32>,
    tables: &'s DeviceTables<'_>,
) -> AttentionTensors<'s> {
    let table = |t: &'s Option<cudarc::driver::CudaView<'_, i32>>| t.as_ref().map(|v| v.slice(..));
    let table_f32 =
        |t: &'s Option<cudarc::driver::CudaView<'_, f32>>| t.as_ref().map(|v| v.slice(..));
    AttentionTensors {
        q: q.view(),
        k: k_cache,
        v: v_cache,
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
            alibi_slopes: table_f32(&tables.alibi_slopes),
            mm_prefix_ranges: table(&tables.mm_prefix_ranges),
            k_descale: table_f32(&tables.k_descale),
            v_descale: table_f32(&tables.v_descale),
            q_descale: table_f32(&tables.q_descale),
        },
    }
}
