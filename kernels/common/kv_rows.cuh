// Where key/value rows live, one place for every generation: strided (dense tensor, contiguous
// cache or packed varlen) or paged through the block table. Key row j of sequence b:
//   strided: b * batch_stride + (k_row0 + j) * row_stride + h * head_stride
//   paged:   block_table[b][j / block_size] * batch_stride + (j % block_size) * row_stride + ...
// (for a paged cache the "batch" stride is one block). Pages hold a multiple of 16 rows, so a
// 16-row group [16 g, 16 g + 16) never straddles two pages: loaders look the page up once per group.
#pragma once
#include "params.cuh"
#include "seqlen.cuh"

#define FC_KV_ROW_GROUP 16

// Key row j (>= 0) of a paged sequence: its block-table slot j / block_size and its row in that page,
// without a division. A division per tile load cost tile64 ~25 dependent instructions and a
// MUFU.RCP (the softmax's exponential pipe) per thread: paged 1.15x contiguous (b294d9c).
// Block sizes are 16 d with d in 1..=16, so j / block_size = (j >> 4) / d; with
// p.block_size_magic = ceil(2^31 / d) (launch.rs, page_divisor_magic), umulhi(2 (j >> 4), magic)
// is exact while (j >> 4) (d - 1) < 2^31, which every int j meets.
struct PageRow {
    int slot;
    int row;
};
__device__ __forceinline__ PageRow page_row(const AttentionParams& p, int j) {
    PageRow r;
    r.slot = (int)__umulhi(((unsigned)j >> 4) << 1, p.block_size_magic);
    r.row = j - r.slot * p.block_size;
    return r;
}

// The block-table entry of key row j's page (j a row of sequence b: entries past it need not be
// valid), and the offset of row j's head h_kv in that page: a loader that reads the entry early
// (tile64, a tile ahead) passes it back here.
__device__ __forceinline__ int page_of_row(const AttentionParams& p, int b, int j) {
    return p.block_table[(long long)b * p.max_blocks_per_seq + page_row(p, j).slot];
}
__device__ __forceinline__ long long paged_row_offset(const AttentionParams& p, int block, int h_kv, int j,
                                                      long long batch_stride, long long head_stride,
                                                      long long row_stride) {
    return (long long)block * batch_stride + (long long)page_row(p, j).row * row_stride + (long long)h_kv * head_stride;
}

// Offset of key row j's head h_kv (the same for K and V when their strides agree; each tensor
// passes its own strides).
__device__ __forceinline__ long long kv_row_offset(const AttentionParams& p, const SeqInfo& s, int b, int h_kv, int j,
                                                   long long batch_stride, long long head_stride,
                                                   long long row_stride) {
    if (p.block_table != nullptr) {
        return paged_row_offset(p, page_of_row(p, b, j), h_kv, j, batch_stride, head_stride, row_stride);
    }
    return (long long)b * batch_stride + (s.k_row0 + j) * row_stride + (long long)h_kv * head_stride;
}

__device__ __forceinline__ long long k_row_offset(const AttentionParams& p, const SeqInfo& s, int b, int h_kv, int j) {
    return kv_row_offset(p, s, b, h_kv, j, p.k_batch_stride, p.k_head_stride, p.k_row_stride);
}
__device__ __forceinline__ long long v_row_offset(const AttentionParams& p, const SeqInfo& s, int b, int h_kv, int j) {
    return kv_row_offset(p, s, b, h_kv, j, p.v_batch_stride, p.v_head_stride, p.v_row_stride);
}
