// The backward pass's second parameter block, passed by value after AttentionParams (which
// keeps Q, K, V, O, the forward's LSE and the workspace). Mirrored field for field by
// `flashcore_core::backward::BackwardParams` (Rust, #[repr(C)]): change both together.
// dO is laid out with O's strides, dQ with its own (the problem's Q shape), dK and dV with
// theirs (K's shape); the head_dim stride is always 1.
#pragma once

struct BackwardParams {
    const void* d_o;  // [batch, heads_q, seq_q, head_dim], input dtype
    void* dq;         // [batch, heads_q, seq_q, head_dim], input dtype
    void* dk;         // [batch, heads_kv, seq_k, head_dim], input dtype
    void* dv;         // [batch, heads_kv, seq_k, head_dim], input dtype
    long long do_batch_stride, do_head_stride, do_row_stride;
    long long dq_batch_stride, dq_head_stride, dq_row_stride;
    long long dk_batch_stride, dk_head_stride, dk_row_stride;
    long long dv_batch_stride, dv_head_stride, dv_row_stride;
};

// Element offsets of row `row` of (batch b, head h) in dO, dQ, dK, dV (64-bit, as tensor_index.cuh).
__device__ __forceinline__ long long do_offset(const BackwardParams& g, int b, int h, int row) {
    return (long long)b * g.do_batch_stride + (long long)h * g.do_head_stride + (long long)row * g.do_row_stride;
}
__device__ __forceinline__ long long dq_offset(const BackwardParams& g, int b, int h, int row) {
    return (long long)b * g.dq_batch_stride + (long long)h * g.dq_head_stride + (long long)row * g.dq_row_stride;
}
__device__ __forceinline__ long long dk_offset(const BackwardParams& g, int b, int h, int row) {
    return (long long)b * g.dk_batch_stride + (long long)h * g.dk_head_stride + (long long)row * g.dk_row_stride;
}
__device__ __forceinline__ long long dv_offset(const BackwardParams& g, int b, int h, int row) {
    return (long long)b * g.dv_batch_stride + (long long)h * g.dv_head_stride + (long long)row * g.dv_row_stride;
}
