// Generation 5 (Hopper) backward: the f32 dQ accumulator in the workspace, and each step's bulk
// reduce into it (each warp adds its quarter of its warpgroup's slice, 4 or 5 KiB, with one
// cp.reduce.async.bulk; not scalar atomics: the portable atomic schedule lost 1.5-1.9x to those).
//
// Workspace: D (rowsum(dO ∘ O)) for every padded query row, [batch·heads_q][q_blocks·QUERY_ROWS],
// then the accumulator: per (batch·heads_q, DQ_SLICE_QUERIES-row query block, 64-column slice) one
// slice in the order the consumer threads hold it (dq_slice_quad), so staging it is conflict-free
// 16-byte stores and each warp reduces one contiguous quarter; the convert kernel undoes the
// permutation. Both are zeroed or written whole by the prepare kernel before the main kernel runs
// (nothing to clear between calls). Keep in sync with crates/gen5-persistent/src/hopper_bwd.rs.
#pragma once
#include "config.cuh"
#include "block_info.cuh"
#include "../common/params.cuh"

namespace fhb {

__device__ __forceinline__ long long padded_rows(const AttentionParams& p) {
    return (long long)p.batch * p.heads_q * query_blocks(p) * QUERY_ROWS;
}
// D of query row `row` of flat head bh = b * heads_q + h.
__device__ __forceinline__ long long dvec_index(const AttentionParams& p, long long bh, int row) {
    return bh * query_blocks(p) * QUERY_ROWS + row;
}
__device__ __forceinline__ float* dq_accumulator(const AttentionParams& p) { return p.workspace + padded_rows(p); }
// The slice of query block `row_block` (row / DQ_SLICE_QUERIES) and 64-column block `slice`.
__device__ __forceinline__ float* dq_slice(const AttentionParams& p, long long bh, int row_block, int slice) {
    return dq_accumulator(p) +
           ((bh * (query_blocks(p) * DQ_BLOCKS_PER_STEP) + row_block) * DQ_SLICES + slice) * (long long)DQ_SLICE_FLOATS;
}
constexpr int DQ_WARP_FLOATS = DQ_SLICE_FLOATS / 4;
constexpr int DQ_WARP_BYTES = DQ_SLICE_BYTES / 4;

// Where float4 i of slice `slice` belongs: warp w of the warpgroup staged words
// [DQ_WARP_FLOATS w, DQ_WARP_FLOATS (w + 1)), lane l's float4 j at 4 (32 j + l), holding accumulator
// elements (16 w + l / 4, 8 j + 2 (l % 4)), the next column, 8 rows down, and both (the wgmma
// accumulator layout, common/hopper/wgmma.cuh). The accumulator's rows are queries and its columns
// the slice's 64 head-dim columns, or the other way round with DQ_TRANSPOSED. `query`, `col`: the
// first element's; next_query / next_col: the offsets of elements 1 (x) and 2 (y).
struct SliceQuad {
    int query, col;
    int2 next_query, next_col;
};
__device__ __forceinline__ SliceQuad dq_slice_quad(int i, int slice) {
    const int w = i / (DQ_WARP_FLOATS / 4), j = (i / 32) % (DQ_REGS / 4), l = i % 32;
    const int acc_row = 16 * w + l / 4, acc_col = 8 * j + 2 * (l % 4);
    if constexpr (DQ_TRANSPOSED)
        return {acc_col, 64 * slice + acc_row, make_int2(1, 0), make_int2(0, 8)};
    else
        return {acc_row, 64 * slice + acc_col, make_int2(0, 8), make_int2(1, 0)};
}

// Threads of the convert launch (crates/gen5-persistent/src/hopper_bwd.rs repeats it).
constexpr int CONVERT_THREADS = 128;
static_assert(DQ_SLICE_FLOATS % (4 * CONVERT_THREADS) == 0, "the convert's loads divide the slice");

// The warp's quarter of the warpgroup's dQ partial (its 16 accumulator rows) into its staging
// quarter, conflict-free 16-byte stores.
__device__ __forceinline__ void stage_dq(unsigned warp_staging, const float (&dq)[DQ_REGS], int lane) {
#pragma unroll
    for (int j = 0; j < DQ_REGS / 4; ++j) {
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(warp_staging + 16u * (32u * j + lane)),
                     "f"(dq[4 * j]), "f"(dq[4 * j + 1]), "f"(dq[4 * j + 2]), "f"(dq[4 * j + 3])
                     : "memory");
    }
}

// One lane: dst[0 .. DQ_WARP_BYTES / 4) += the warp's staging quarter, asynchronously (bulk-async
// group). Each warp reduces its own quarter, so no warpgroup barrier stands before the reduce.
__device__ __forceinline__ void reduce_dq_quarter(float* dst, unsigned warp_staging) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst),
                 "r"(warp_staging), "n"(DQ_WARP_BYTES)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// The issuing lane: all but its `kPending` latest reduces have read their staging (it may be
// overwritten).
template <int kPending>
__device__ __forceinline__ void wait_dq_staging_read_but() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
// The issuing lane: all its reduces have read their staging.
__device__ __forceinline__ void wait_dq_staging_read() { wait_dq_staging_read_but<0>(); }
// The issuing lane: its reduces are complete (before the CTA exits).
__device__ __forceinline__ void wait_dq_reduces() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

}  // namespace fhb
