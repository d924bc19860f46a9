// Generation 5 (Hopper) backward: a consumer warpgroup's dK and dV rows out of the accumulators,
// through shared memory so that they leave as whole rows. Stored straight from the accumulator
// layout (4 bytes a thread, 8 rows a warp instruction) they took 5-10 us a unit at
// (4,16,2048,128), up to a tenth of the unit (dbf6e12).
#pragma once
#include "config.cuh"
#include "../common/types.cuh"
#include "../common/padded_head.cuh"
#include "../common/hopper/named_barrier.cuh"
#include "../common/hopper/smem_io.cuh"

namespace fhb {

// The warpgroup's 64 rows of dV or dK (× scale) for keys wg_key0 + (0..63), through `staging` (its
// dQ staging slice: free at a unit's end once the warps' last reduces have read it, which lane 0 of
// each warp has waited for). The accumulators go in by stmatrix, 8 x 8 blocks of keys 16 warp + 8 r
// by columns 8 j, 16-byte chunk c of row r at chunk c ^ (r & 7); they leave as 16-byte pieces of
// whole rows. Keys past seq_k, and a padded build's columns past `head_dim`, are not written. `bar`
// is the warpgroup's own named barrier. `kStagingBytes`: the staging area's size.
template <int kStagingBytes = DQ_SLICE_BYTES>
__device__ __forceinline__ void store_key_rows(elem_t* base, long long row_stride, const float (&acc)[D / 2],
                                               int wg_key0, int seq_k, int head_dim, float scale, unsigned staging,
                                               unsigned bar,
                                               int warp, int lane, int tid) {
    constexpr int CHUNKS = D / 8;   // 16-byte chunks of a row
    constexpr int ROW = 2 * D;      // bytes of a row
    static_assert(64 * ROW <= kStagingBytes, "a warpgroup's 64 rows must fit its staging area");
    named_bar_sync(bar, 128);  // every thread's earlier reads of the staging slice are done
    const int block = lane >> 3;
    const int row = warp * 16 + 8 * (block & 1) + (lane & 7);
#pragma unroll
    for (int t = 0; t < D / 16; ++t) {
        const int chunk = 2 * t + (block >> 1);
        const unsigned addr = staging + row * ROW + ((chunk ^ (row & 7)) << 4);
        stmatrix_x4(addr, pack2_u32(acc[8 * t] * scale, acc[8 * t + 1] * scale),
                    pack2_u32(acc[8 * t + 2] * scale, acc[8 * t + 3] * scale),
                    pack2_u32(acc[8 * t + 4] * scale, acc[8 * t + 5] * scale),
                    pack2_u32(acc[8 * t + 6] * scale, acc[8 * t + 7] * scale));
    }
    named_bar_sync(bar, 128);
#pragma unroll
    for (int i = tid; i < 64 * CHUNKS; i += 128) {
        const int r = i / CHUNKS, c = i % CHUNKS, key = wg_key0 + r;
        if (key < seq_k && chunk_in_head<PADDED_HEAD>(head_dim, c)) {
            const uint4 v = ld_shared_v4(staging + r * ROW + ((c ^ (r & 7)) << 4));
            *reinterpret_cast<uint4*>(base + (long long)key * row_stride + 8 * c) = v;
        }
    }
}

}  // namespace fhb
