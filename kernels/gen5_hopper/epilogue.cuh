// Generation 5 (Hopper) forward: O staged through shared memory (FC_HOPPER_SMEM_EPILOGUE), one of
// the consumer's epilogues (FlashAttention-3's epilogue: O /= l and the LSE of its rows; rows at or
// past the sequence's end are never written). The others: split_epilogue.cuh (split-KV partials and
// their combine), wg_key_split.cuh (the key split's merge), and the register epilogue, which is the
// kernel's (gen5_persistent_hopper.cu says why).
#pragma once
#include "config.cuh"
#include "block_info.cuh"
#include "tile_scheduler.cuh"
#include "consumer_math.cuh"
#include "../common/params.cuh"
#include "../common/padded_head.cuh"
#include "../common/types.cuh"
#include "../common/seqlen.cuh"
#include "../common/hopper/mbarrier.cuh"
#include "../common/hopper/named_barrier.cuh"
#include "../common/hopper/smem_io.cuh"

namespace fch {

// Through shared memory (FC_HOPPER_SMEM_EPILOGUE): this warpgroup's 64 x DV slice of O, as elem_t,
// in its own 64-row slice of the unit's Q buffer `qs`, 128B-swizzled like a Q box (16-byte chunk q
// of local row lr sits at chunk q ^ (lr & 7)): the quad stores of one instruction hit 8 different
// chunks (conflict-free), and so do the 16-byte reads of 8 consecutive threads. Every wgmma that
// read this slice (the last QK^T) is complete: this warp's wait_group 0 on the last PV implies all
// four warps issued it, after their wait_group 1 on the last QK^T. The Q buffer is released here.
__device__ __forceinline__ void store_o_through_smem(const AttentionParams& p, const Work& w, int cw, int tid, int warp,
                                                     int lane, int col_in_block, const float (&o)[DV / 2],
                                                     const float (&m)[2], const float (&l)[2], const SeqInfo& seq,
                                                     int grow0, int grow1, const KeyRange& keys0, const KeyRange& keys1,
                                                     float softmax_scale_log2, unsigned sQ, int qs, unsigned q_empty) {
    const int h = w.h, b = w.b;
    const unsigned sO = sQ + qs * Q_BYTES + cw * WG_M * ROW_BYTES;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int grow = r == 0 ? grow0 : grow1;
        const int lr = warp * 16 + (lane >> 2) + 8 * r;
        const float inv = row_inverse(l[r], r == 0 ? keys0 : keys1);
#pragma unroll
        for (int j = 0; j < DV / 8; ++j) {
            const unsigned addr = sO + (j >> 3) * Q_BOX_BYTES + lr * ROW_BYTES +
                                  ((((unsigned)j & 7u) ^ ((unsigned)lr & 7u)) << 4) + (lane & 3) * 4;
            st_shared_u32(addr, pack2_u32(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv));
        }
        if (grow < seq.len_q && (lane & 3) == 0) {
            p.lse[block_lse_offset(p, seq, b, h, grow)] =
                row_natural_lse(l[r], m[r], r == 0 ? keys0 : keys1, softmax_scale_log2);
        }
    }
    named_bar_sync(BAR_WG + cw, 128);
    // 64 rows x NBOX_V boxes x 8 chunks: 8 consecutive threads write one 128-byte run.
#pragma unroll
    for (int i = 0; i < 4 * NBOX_V; ++i) {
        const int idx = tid + 128 * i;
        const int q = idx & 7;
        const int lr = (idx >> 3) & 63;
        const int box = idx >> 9;
        const int grow = w.m * BM + cw * WG_M + lr;
        if (grow < seq.len_q && chunk_in_head<PADDED_V>(p.head_dim, 8 * box + q)) {
            const uint4 v =
                ld_shared_v4(sO + box * Q_BOX_BYTES + lr * ROW_BYTES + (((unsigned)q ^ ((unsigned)lr & 7u)) << 4));
            elem_t* orow = reinterpret_cast<elem_t*>(p.o) + seq_o_offset(p, seq, b, h, grow);
            st_global_v4(orow + 64 * box + 8 * q, v);
        }
    }
    // Our generic reads/writes of the buffer before the TMA that refills it (item it + 2).
    fence_proxy_async_smem();
    mbar_arrive(q_empty);
}

}  // namespace fch
