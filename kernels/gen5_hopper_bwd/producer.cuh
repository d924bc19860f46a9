// Generation 5 (Hopper) backward: the producer warp's copies. K and V once per work unit; Q, dO and
// the step's LSE and D per query block into the ring. Part of gen5_hopper_bwd.cu.
#pragma once
#include "config.cuh"
#include "block_info.cuh"
#include "dq_reduce.cuh"
#include "../common/params.cuh"
#include "../common/types.cuh"
#include "../common/tensor_index.cuh"
#include "../common/hopper/mbarrier.cuh"
#include "../common/hopper/tma.cuh"

namespace fhb {

struct BackwardMaps {
    const CUtensorMap *q, *k, *v, *d_o;
};

// K and V of the unit into their tiles, completing on `full`.
__device__ __forceinline__ void load_key_block(const AttentionParams& p, const BackwardMaps& maps, const Unit& u,
                                               unsigned sK, unsigned sV, unsigned full) {
    mbar_arrive_expect_tx(full, 2 * KV_TILE_BYTES);
    const int row = bwd_k_row(p, u.b, u.k0), batch = tma_batch(u.b);
#pragma unroll
    for (int c = 0; c < NBOX; ++c) {
        tma_load_4d(sK + c * KV_BOX_BYTES, maps.k, full, c * 64, row, u.h_kv, batch);
        tma_load_4d(sV + c * KV_BOX_BYTES, maps.v, full, c * 64, row, u.h_kv, batch);
    }
}

// Q and dO of query block m of head h into a ring stage. Posts the bytes without arriving: the
// producer's 32 lanes arrive once they have written the stage's stats (stage_stats), so the copies
// start before the stats' global loads rather than after them.
__device__ __forceinline__ void load_query_block(const AttentionParams& p, const BackwardMaps& maps, int b, int h,
                                                 int m, unsigned sQ, unsigned sDO, unsigned full) {
    mbar_expect_tx(full, 2 * Q_TILE_BYTES);
    const int row = bwd_q_row(p, b, m * QUERY_ROWS), batch = tma_batch(b);
#pragma unroll
    for (int c = 0; c < NBOX; ++c) {
        tma_load_4d(sQ + c * Q_BOX_BYTES, maps.q, full, c * 64, row, h, batch);
        tma_load_4d(sDO + c * Q_BOX_BYTES, maps.d_o, full, c * 64, row, h, batch);
    }
}

// LSE·log2e (+inf past the sequence's len_q: P = 0 there) and D of query block m's rows into the
// stage's stats, one row per lane and pass.
__device__ __forceinline__ void stage_stats(const AttentionParams& p, int b, int h, int m, int len_q, unsigned stats,
                                            int lane) {
    const long long bh = (long long)b * p.heads_q + h;
#pragma unroll
    for (int i = 0; i < (QUERY_ROWS + 31) / 32; ++i) {
        const int r = lane + 32 * i;
        if (QUERY_ROWS % 32 != 0 && r >= QUERY_ROWS) break;
        const int row = m * QUERY_ROWS + r;
        const float lse = row < len_q ? p.lse[bwd_lse_offset(p, b, h, row)] * LOG2E : INFINITY;
        const float dvec = p.workspace[dvec_index(p, bh, row)];
        asm volatile("st.shared.f32 [%0], %1;" ::"r"(stats + 4 * r), "f"(lse) : "memory");
        asm volatile("st.shared.f32 [%0], %1;" ::"r"(stats + 4 * (QUERY_ROWS + r)), "f"(dvec) : "memory");
    }
}

}  // namespace fhb
