//! The kernel's tile geometry and what it sizes: dynamic shared memory (mirrors the kernel's
//! `SMEM_BYTES` and exchange buffers) and the workspace of the split and dynamic schedules.

/// Q rows per work item with two consumer warpgroups of 64 rows = Q TMA box rows.
pub const BLOCK_M: usize = 128;
/// Q rows per consumer warpgroup.
pub const WARPGROUP_ROWS: usize = 64;
/// Keys per K/V tile = K/V TMA box rows. 128 for both head dims: with D = 128 the consumer holds
/// S (64 f32) + O (64 f32) + P (32 packed) + bookkeeping, well inside the 232-register budget.
pub const BLOCK_N: usize = 128;
/// K/V ring depth. 2 stages for D = 128 is 160 KiB of smem; 3 would still fit (224 KiB).
pub const STAGES: usize = 2;
/// Threads per warpgroup (a CTA: the producer's and the consumers', [`HopperConfig::threads`]).
pub(super) const WARPGROUP_THREADS: usize = 128;
/// 64 16-bit columns = 128 bytes = one 128B-swizzle row.
pub const BOX_COLS: usize = 64;
/// The build a problem's head dim runs in (`FC_HEAD_DIM` 64, 128, 192 or 256): the next multiple
/// of 64, whole TMA boxes (FlashAttention-2's rounding up to an instance; the kernel's
/// `FC_HOPPER_PADDED_HEAD` bounds O's columns by the problem's).
pub fn build_head_dim(head_dim: usize) -> usize {
    head_dim.div_ceil(BOX_COLS).max(1) * BOX_COLS
}

/// The narrow build's head dim (`FC_HEAD_DIM` 32): a row is one 64-byte box (TMA's and wgmma's
/// 64-byte swizzle), half the tensor-core work of the 64 build a head of 32 or fewer columns is
/// otherwise padded into ([`HopperConfig::build_head_dim`](super::config::HopperConfig::build_head_dim)).
pub const NARROW_HEAD_DIM: usize = 32;

/// Slack to align the dynamic shared memory base to 1024 bytes (128B swizzle atom).
pub const SMEM_ALIGN_SLACK: usize = 1024;

/// The kernel's own default Q buffer count (1: Q of the next item is loaded once this item's
/// last QK^T is done; 2: it is prefetched into the other buffer while this item runs). The plan's
/// default is [`HopperConfig::default`](super::config::HopperConfig), which uses 2 (measured
/// faster, see there).
pub const Q_STAGES: usize = 1;

/// Dynamic shared memory the kernel needs; mirrors `SMEM_BYTES` in the kernel:
/// Q_STAGES x Q (BLOCK_M x D) + STAGES x (K + V tiles of BLOCK_N x D) + barriers
/// (2 Q_STAGES + 4 STAGES, 8 B each, rounded up to 128 B) + 1024 bytes of alignment slack.
pub fn smem_bytes_for(head_dim: usize, elem_bytes: usize, stages: usize, q_stages: usize) -> usize {
    smem_bytes_with_block_n(head_dim, elem_bytes, stages, q_stages, BLOCK_N)
}

/// [`smem_bytes_for`] with `block_n` keys per K/V tile.
pub fn smem_bytes_with_block_n(
    head_dim: usize,
    elem_bytes: usize,
    stages: usize,
    q_stages: usize,
    block_n: usize,
) -> usize {
    smem_bytes_with_tiles(head_dim, elem_bytes, stages, q_stages, BLOCK_M, block_n)
}

/// [`smem_bytes_for`] with `block_m` q rows per item and `block_n` keys per K/V tile.
pub fn smem_bytes_with_tiles(
    head_dim: usize,
    elem_bytes: usize,
    stages: usize,
    q_stages: usize,
    block_m: usize,
    block_n: usize,
) -> usize {
    smem_bytes_with_tiles_v(
        head_dim, head_dim, elem_bytes, stages, q_stages, block_m, block_n,
    )
}

/// [`smem_bytes_with_tiles`] with V's own head dim (`FC_HEAD_DIM_V`): the V ring's stages are
/// `block_n x head_dim_v`.
pub fn smem_bytes_with_tiles_v(
    head_dim: usize,
    head_dim_v: usize,
    elem_bytes: usize,
    stages: usize,
    q_stages: usize,
    block_m: usize,
    block_n: usize,
) -> usize {
    let q = block_m * head_dim * elem_bytes;
    let kv_tiles = block_n * (head_dim + head_dim_v) * elem_bytes;
    q_stages * q + stages * kv_tiles + barrier_area_bytes(q_stages, stages, 0) + SMEM_ALIGN_SLACK
}

/// The V (and O) head dim of a problem's build whose Q/K build is `build_d`: `build_d` when V
/// shares the head dim (padded alike); a distinct V head dim (FlashAttention 3's `headdim_v`) must
/// be whole boxes itself (64, 128, 192, 256: never padded) and at most `build_d`, so that O's
/// registers stay within the build's budget. `Err` says why not.
pub fn head_dim_v_build(
    head_dim: usize,
    head_dim_v: usize,
    build_d: usize,
) -> Result<usize, String> {
    if head_dim_v == head_dim {
        return Ok(build_d);
    }
    if !head_dim_v.is_multiple_of(BOX_COLS) || head_dim_v > build_d {
        return Err(format!(
            "head_dim_v {head_dim_v} with head_dim {head_dim}: a distinct V head dim must be a \
             multiple of {BOX_COLS} (whole TMA boxes) and at most the head dim's build ({build_d})"
        ));
    }
    Ok(head_dim_v)
}

/// The barrier area (the kernel's OFF_XCHG - OFF_BAR): the barriers (+ the producer's v_landed),
/// the dynamic schedule's two unit-index words (OFF_ITEM) and `extra` bytes after them, rounded up
/// to 128 bytes.
pub(super) fn barrier_area_bytes(q_stages: usize, stages: usize, extra: usize) -> usize {
    ((2 * q_stages + 4 * stages + 1) * 8 + 8 + extra).div_ceil(128) * 128
}

/// [`smem_bytes_for`] of the default configuration.
pub fn smem_bytes(head_dim: usize, elem_bytes: usize) -> usize {
    smem_bytes_for(head_dim, elem_bytes, STAGES, Q_STAGES)
}

/// Workspace words the dynamic schedule uses as counters (FC_HOPPER_DYNAMIC).
pub const DYNAMIC_COUNTER_WORDS: usize = 2;
/// Split-KV arrival counters per work item: one per warp of the two consumer warpgroups.
pub const SPLIT_COUNTERS_PER_ITEM: usize = 8;
/// Largest split-KV workspace a plan asks for (1 GiB); a problem that would need more is not
/// split (it has enough items to fill the GPU anyway unless splitting is forced).
pub const MAX_SPLIT_WORKSPACE_BYTES: usize = 1 << 30;

/// Leading workspace words holding the arrival counters (u32): 8 per item, rounded up to 32
/// words (128 bytes) so that the partial slots behind them stay 128-byte aligned.
pub fn split_counter_words(items: usize) -> usize {
    (items * SPLIT_COUNTERS_PER_ITEM).next_multiple_of(32)
}

/// f32 words of workspace a split plan needs; mirrors the layout in the kernel
/// (`split_epilogue`): the counters, then per (item, split, consumer warpgroup) one slot of
/// `64·D` partial-O words plus 512 words of (m, l) (a float4 per thread of the warpgroup).
/// `None` on overflow.
pub fn split_workspace_f32(items: usize, splits: usize, head_dim: usize) -> Option<usize> {
    let slot = (BLOCK_M / 2) * head_dim + 4 * 128;
    items
        .checked_mul(splits)?
        .checked_mul(2)?
        .checked_mul(slot)?
        .checked_add(split_counter_words(items))
}

/// Shared memory of the key-split warpgroups' exchange (the kernel's `XCHG_BYTES`): per receiving
/// warpgroup, D / 16 column blocks of O and one (m, l) quadruple, 16 bytes a thread each.
pub fn key_split_exchange_bytes(head_dim: usize) -> usize {
    2 * (head_dim / 16 + 1) * WARPGROUP_THREADS * 16
}

/// Shared memory of the cluster key split's exchange (the kernel's `CXCHG_BYTES`): per consumer
/// thread, the partner's row of its column half (D / 32 float4s) and its (m, l) in a slot of its
/// own.
pub fn cluster_exchange_bytes(head_dim: usize) -> usize {
    (head_dim / 32 + 1) * 2 * WARPGROUP_THREADS * 16
}

/// e4m3 forward (`Modes::q_fp8`): V's transposed copy starts this many bytes into the workspace,
/// past the dynamic schedule's counters (the copy's kernel, `gen5_hopper_vt.cu`, takes it as
/// `FC_VT_OFFSET`).
pub const VT_OFFSET_BYTES: usize = 256;
/// Keys a transposed V row is padded to (zeros): the e4m3 build's key tile, so every V box lies
/// inside the copy.
pub const VT_KEY_PAD: usize = BLOCK_N;
/// Keys per CTA of the transpose.
pub const VT_TILE_KEYS: usize = 64;

/// Bytes of V's transposed copy: `[batch, heads_kv, head_dim_v, keys padded]`. `None` on
/// overflow.
pub fn vt_bytes(batch: usize, heads_kv: usize, head_dim_v: usize, seq_k: usize) -> Option<usize> {
    seq_k
        .checked_next_multiple_of(VT_KEY_PAD)?
        .checked_mul(head_dim_v)?
        .checked_mul(heads_kv)?
        .checked_mul(batch)
}
