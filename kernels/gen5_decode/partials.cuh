// Generation 5, decode: where a split's result goes. The workspace's partials (a normalised f32 O
// row and a log2-LSE per unit, split and packed row), a finished row's scale and LSE, and the
// epilogue's merge area over the ring.
#pragma once
#include "config.cuh"
#include "../common/params.cuh"
#include "../common/types.cuh"
#include "../common/masking.cuh"
#include "../common/online_softmax.cuh"

namespace decode {

// The workspace this kernel owns.
__device__ __forceinline__ float* workspace_of(const AttentionParams& p) { return p.workspace + FC_DECODE_WS_OFFSET; }

// Workspace: per (unit, split, packed row) a normalised f32 O row, then all the log2-LSEs.
__device__ __forceinline__ long long partial_row(const AttentionParams& p, long long u, int s, int r) {
    return (u * p.num_splits + s) * q_tile_rows + r;
}
__device__ __forceinline__ long long partial_lse_base(const AttentionParams& p, long long units) {
    return units * p.num_splits * q_tile_rows * head_dim;
}

// One row's result, whoever produces it: O unnormalised by l, log2-domain max m.
// l = 0 with visible keys means every logit was -inf (infinite inputs): NaN, as the f64
// reference; with no visible key it is the defined empty row (O = 0, LSE = +inf).
__device__ __forceinline__ float final_scale(float l, bool sees_keys) {
    if (l != 0.f) return 1.f / l;
    return sees_keys ? FC_QNAN : 0.f;
}
__device__ __forceinline__ float final_lse(float m, float l, bool sees_keys) {
    if (l != 0.f) return (m + __log2f(l)) * FC_LN2;
    return sees_keys ? FC_QNAN : FC_INF;
}
// The epilogue's merge area, [key slice][packed row][column] words over the ring: where row
// `row` (key_slice * 16 + packed row) keeps column `col`. Columns are XOR-swizzled inside each
// 32-word block: a warp stores one accumulator element (e4m3's permuted columns) or pair (16-bit)
// per lane, every lane in the same column block of its own row, and row strides of D words put
// all of them in one bank (32 ways for e4m3, 8 for the pairs). Row bits 0-2 go to column bits
// 3, 4 and 2 (the four rows of a half warp's pairs land on distinct banks) and column bit 5 to
// bit 1 (e4m3's lanes 2t and 2t + 1 own columns 32 apart): e4m3 stores then conflict two ways,
// 16-bit pairs not at all. Bit 0 stays, so pairs stay whole for the float2 reads.
__device__ __forceinline__ int merged_index(int row, int col) {
    const int swizzle = ((row & 3) << 3) | (row & 4) | (((col >> 5) & 1) << 1);
    return row * head_dim + (col ^ swizzle);
}
// Packed row `row`'s merge over the key slices, from their (max, sum) in `stats` ([slice][row][2]):
// the slices' max m, each slice's weight 2^(m_w - m), and l, the weighted sums in slice order.
struct RowWeights {
    float m, l;
    float weight[key_slices];
};
__device__ __forceinline__ RowWeights row_weights(const float* stats, int row) {
    RowWeights rw;
    rw.m = -FC_INF;
#pragma unroll
    for (int w = 0; w < key_slices; ++w) rw.m = fmaxf(rw.m, stats[(w * q_tile_rows + row) * 2]);
    rw.l = 0.f;
#pragma unroll
    for (int w = 0; w < key_slices; ++w) {
        const float mw = stats[(w * q_tile_rows + row) * 2];
        const float lw = stats[(w * q_tile_rows + row) * 2 + 1];
        // A warp that saw no visible key (max still -inf) has l = 0 and O = 0: weight 0. Its max
        // also stays -inf when every score it saw was NaN; then l is NaN and so must the row be.
        rw.weight[w] = mw == -FC_INF ? (lw == 0.f ? 0.f : FC_QNAN) : fast_exp2(mw - rw.m);
        rw.l += rw.weight[w] * lw;
    }
    return rw;
}
// Column pair `col` of packed row `row` over the key slices of the merge area, each weighted,
// summed in slice order (the same sums whichever thread or warp does it).
__device__ __forceinline__ float2 merge_pair(const float* merged, const float (&weight)[key_slices], int row, int col) {
    float o0 = 0.f, o1 = 0.f;
#pragma unroll
    for (int w = 0; w < key_slices; ++w) {
        const float2 ow = *reinterpret_cast<const float2*>(&merged[merged_index(w * q_tile_rows + row, col)]);
        o0 += weight[w] * ow.x;
        o1 += weight[w] * ow.y;
    }
    return make_float2(o0, o1);
}

}  // namespace decode
