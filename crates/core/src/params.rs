//! The parameter block every kernel takes first: the Rust mirror of
//! `kernels/common/params.cuh`, filled from a problem.

use crate::modes::{AlibiSlopes, KvStorage};
use crate::problem::AttentionProblem;

/// Mirror of `struct AttentionParams` in kernels/common/params.cuh: change both together.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionParams {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: u64,
    pub workspace: u64,
    pub q_batch_stride: i64,
    pub q_head_stride: i64,
    pub q_row_stride: i64,
    pub k_batch_stride: i64,
    pub k_head_stride: i64,
    pub k_row_stride: i64,
    pub v_batch_stride: i64,
    pub v_head_stride: i64,
    pub v_row_stride: i64,
    pub o_batch_stride: i64,
    pub o_head_stride: i64,
    pub o_row_stride: i64,
    pub batch: i32,
    pub heads_q: i32,
    pub heads_kv: i32,
    pub seq_q: i32,
    pub seq_k: i32,
    pub head_dim: i32,
    pub q_heads_per_kv: i32,
    pub causal: i32,
    pub softmax_scale: f32,
    pub scale_log2: f32,
    pub num_splits: i32,
    pub total_q: i32,
    pub cu_seqlens_q: u64,
    pub cu_seqlens_k: u64,
    pub seqused_k: u64,
    pub block_table: u64,
    pub alibi_slopes: u64,
    pub alibi_batch_stride: i32,
    pub window_left: i32,
    pub window_right: i32,
    pub softcap_pre: f32,
    pub softcap_log2: f32,
    pub block_size: i32,
    pub max_blocks_per_seq: i32,
    pub seqlen_new: i32,
    pub block_size_magic: u32,
    pub num_blocks: i32,
    pub mm_prefix_ranges: u64,
    pub mm_prefix_n: i32,
    pub k_descale: u64,
    pub v_descale: u64,
    pub descale_batch_stride: i32,
    pub descale_head_stride: i32,
    /// e4m3 Q's descale table (`Modes::q_fp8`); last, so every other field keeps its offset.
    pub q_descale: u64,
}

// The C side is 320 bytes: 15 pointers, 12 i64 strides, 25 4-byte fields, and 4 bytes of padding
// after mm_prefix_n (k_descale starts on 8).
const _: () = assert!(std::mem::size_of::<AttentionParams>() == 320);

impl AttentionParams {
    /// Everything but the pointers, from the problem.
    pub fn from_problem(p: &AttentionProblem) -> Self {
        let s = p.strides();
        let scale = p.scale();
        let [q_batch_stride, q_head_stride, q_row_stride] = s.q.as_i64();
        let [k_batch_stride, k_head_stride, k_row_stride] = s.k.as_i64();
        let [v_batch_stride, v_head_stride, v_row_stride] = s.v.as_i64();
        let [o_batch_stride, o_head_stride, o_row_stride] = s.o.as_i64();
        AttentionParams {
            q_batch_stride,
            q_head_stride,
            q_row_stride,
            k_batch_stride,
            k_head_stride,
            k_row_stride,
            v_batch_stride,
            v_head_stride,
            v_row_stride,
            o_batch_stride,
            o_head_stride,
            o_row_stride,
            batch: p.batch as i32,
            heads_q: p.heads_q as i32,
            heads_kv: p.heads_kv as i32,
            seq_q: p.seq_q as i32,
            seq_k: p.seq_k as i32,
            head_dim: p.head_dim as i32,
            q_heads_per_kv: p.q_heads_per_kv() as i32,
            causal: p.causal as i32,
            softmax_scale: scale,
            scale_log2: scale * std::f32::consts::LOG2_E,
            num_splits: 1,
            ..Default::default()
        }
        .with_modes(p)
    }

    /// The mode fields (table pointers, the descale tables' included, are filled in by
    /// `run_plan`).
    fn with_modes(mut self, p: &AttentionProblem) -> Self {
        let m = &p.modes;
        let window = |w: Option<usize>| w.map_or(-1, |w| w.min(i32::MAX as usize) as i32);
        self.window_left = window(m.window_left);
        self.window_right = window(m.window_right);
        if let Some(c) = m.softcap {
            self.softcap_pre = p.scale() / c;
            self.softcap_log2 = c * std::f32::consts::LOG2_E;
        }
        self.alibi_batch_stride = match m.alibi {
            Some(AlibiSlopes::PerBatchHead) => p.heads_q as i32,
            _ => 0,
        };
        if let KvStorage::Paged {
            num_blocks,
            block_size,
            max_blocks_per_seq,
        } = m.kv
        {
            self.num_blocks = num_blocks as i32;
            self.block_size = block_size as i32;
            self.block_size_magic = page_divisor_magic(block_size as u32);
            self.max_blocks_per_seq = max_blocks_per_seq as i32;
        }
        self.seqlen_new = m.append.unwrap_or(0) as i32;
        self.mm_prefix_n = m.mm_prefix.unwrap_or(0) as i32;
        let (batch, head) = m.kv_fp8.map_or((0, 0), |s| s.strides(p.heads_kv));
        self.descale_batch_stride = batch as i32;
        self.descale_head_stride = head as i32;
        self.total_q = m.packed_q.unwrap_or(0) as i32;
        self
    }
}

/// `ceil(2^31 / (block_size / 16))`: the kernels' `page_row` (kv_rows.cuh) takes key row j's
/// block-table slot as `umulhi(2 (j >> 4), magic)` instead of dividing by the block size. Exact
/// for every non-negative i32 j when block_size is a multiple of 16 in 16..=256 (validation's
/// rule): with d = block_size / 16 and magic = (2^31 + e) / d, e < d, the result is
/// floor(x / d + x e / (d 2^31)) for x = j >> 4 < 2^27, and x e < 2^31 keeps it floor(x / d).
pub fn page_divisor_magic(block_size: u32) -> u32 {
    let d = u64::from((block_size / 16).max(1));
    (1u64 << 31).div_ceil(d) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The device's page_row (kv_rows.cuh), on the host.
    fn page_slot(j: u32, magic: u32) -> u32 {
        ((u64::from((j >> 4) << 1) * u64::from(magic)) >> 32) as u32
    }

    #[test]
    fn page_divisor_magic_divides_every_row_index_exactly() {
        // Every legal block size; the key rows where the error term is largest (the top of the i32
        // range, and the last row of each page) plus a stride through the rest.
        for block_size in (16..=256u32).step_by(16) {
            let magic = page_divisor_magic(block_size);
            let top = i32::MAX as u32;
            let edges = (0..4096u32).chain(top - 4096..=top);
            let pages = (1..=(top / block_size))
                .step_by(9973)
                .flat_map(|s| [s * block_size - 1, s * block_size]);
            for j in edges.chain(pages).chain((0..top).step_by(1_000_003)) {
                assert_eq!(
                    page_slot(j, magic),
                    j / block_size,
                    "block_size {block_size}, j {j}"
                );
            }
        }
    }

    #[test]
    fn page_divisor_magic_fails_for_an_unchecked_divisor() {
        // The bound is tight enough to matter: the same formula with 2^30 instead of 2^31 is off
        // somewhere in range, so the test above can tell a wrong magic from a right one.
        let block_size = 16 * 15;
        let magic = (1u64 << 30).div_ceil(15);
        let wrong = (0..i32::MAX as u32)
            .step_by(997)
            .any(|j| ((u64::from((j >> 4) << 2) * magic) >> 32) as u32 != j / block_size);
        assert!(wrong);
    }

    #[test]
    fn paged_params_carry_the_pool_size() {
        // The decode kernel bounds-checks block-table entries it reads before
        // griddepcontrol.wait against num_blocks: a paged problem sets it, others leave it 0.
        let paged = AttentionProblem::new(2, 8, 1, 128)
            .with_kv(2, 256)
            .with_modes(crate::modes::Modes {
                kv: KvStorage::Paged {
                    num_blocks: 9,
                    block_size: 64,
                    max_blocks_per_seq: 4,
                },
                seqused_k: true,
                ..crate::modes::Modes::default()
            });
        let p = AttentionParams::from_problem(&paged);
        assert_eq!(
            (p.num_blocks, p.block_size, p.max_blocks_per_seq),
            (9, 64, 4)
        );
        let dense = AttentionParams::from_problem(&AttentionProblem::new(2, 8, 1, 128));
        assert_eq!((dense.num_blocks, dense.block_size), (0, 0));
    }
}
