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
