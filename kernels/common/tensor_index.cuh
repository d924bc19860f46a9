// Addressing through the stride table: 64-bit offsets throughout, because batch*heads*seq*dim
// passes 2^31 elements on large problems (an int32 offset overflow is a known failure elsewhere).
#pragma once
#include "params.cuh"

__device__ __forceinline__ long long q_offset(const AttentionParams& p, int b, int h, int row) {
    return (long long)b * p.q_batch_stride + (long long)h * p.q_head_stride + (long long)row * p.q_row_stride;
}
__device__ __forceinline__ long long k_offset(const AttentionParams& p, int b, int h_kv, int row) {
    return (long long)b * p.k_batch_stride + (long long)h_kv * p.k_head_stride + (long long)row * p.k_row_stride;
}
__device__ __forceinline__ long long v_offset(const AttentionParams& p, int b, int h_kv, int row) {
    return (long long)b * p.v_batch_stride + (long long)h_kv * p.v_head_stride + (long long)row * p.v_row_stride;
}
__device__ __forceinline__ long long o_offset(const AttentionParams& p, int b, int h, int row) {
    return (long long)b * p.o_batch_stride + (long long)h * p.o_head_stride + (long long)row * p.o_row_stride;
}
__device__ __forceinline__ long long lse_offset(const AttentionParams& p, int b, int h, int row) {
    return ((long long)b * p.heads_q + h) * p.seq_q + row;
}
