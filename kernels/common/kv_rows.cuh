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

// Offset of key row j's head h_kv (the same for K and V when their strides agree; each tensor
// passes its own strides).
__device__ __forceinline__ long long kv_row_offset(const AttentionParams& p, const SeqInfo& s, int b, int h_kv, int j,
                                                   long long batch_stride, long long head_stride,
                                                   long long row_stride) {
    if (p.block_table != nullptr) {
        const int block = p.block_table[(long long)b * p.max_blocks_per_seq + j / p.block_size];
        return (long long)block * batch_stride + (long long)(j % p.block_size) * row_stride +
               (long long)h_kv * head_stride;
    }
    return (long long)b * batch_stride + (s.k_row0 + j) * row_stride + (long long)h_kv * head_stride;
}

__device__ __forceinline__ long long k_row_offset(const AttentionParams& p, const SeqInfo& s, int b, int h_kv, int j) {
    return kv_row_offset(p, s, b, h_kv, j, p.k_batch_stride, p.k_head_stride, p.k_row_stride);
}
__device__ __forceinline__ long long v_row_offset(const AttentionParams& p, const SeqInfo& s, int b, int h_kv, int j) {
    return kv_row_offset(p, s, b, h_kv, j, p.v_batch_stride, p.v_head_stride, p.v_row_stride);
}
